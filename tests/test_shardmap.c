/* Tests for common/shardmap: for many model sizes and shard counts the ranges
 * tile [0, n) in 64-aligned blocks with sizes at most one block apart, and the
 * owner lookup agrees with the ranges at every index (small n) or at every
 * shard boundary (large n). */
#include "common/shardmap.h"

#include <check.h>

#include "tests/check_run.h"
#include <stdlib.h>

static const uint64_t sizes[] = {1, 63, 64, 65, 1000, 235146, (1u << 20) + 7, 4294967295u};
#define N_SIZES (sizeof sizes / sizeof sizes[0])

/* Shard counts 1..17 and 64. */
static int shard_count(int k)
{
    return k < 17 ? k + 1 : 64;
}
#define N_COUNTS 18

static uint64_t blocks_of(uint64_t n)
{
    return (n + DCPS_SHARD_ALIGN - 1) / DCPS_SHARD_ALIGN;
}

/* The tests below loop over shard counts with _i (a loop test). */

START_TEST(ranges_tile_zero_to_n_contiguously)
{
    int S = shard_count(_i);
    for (size_t k = 0; k < N_SIZES; k++) {
        uint64_t n = sizes[k], expect_lo = 0;
        for (int s = 0; s < S; s++) {
            dcps_range_t r = dcps_shardmap_range(n, S, s);
            ck_assert_msg(r.lo == expect_lo, "n=%llu S=%d shard %d starts at %llu, expected %llu",
                          (unsigned long long)n, S, s, (unsigned long long)r.lo,
                          (unsigned long long)expect_lo);
            ck_assert_msg(r.hi >= r.lo, "n=%llu S=%d shard %d: hi %llu < lo %llu",
                          (unsigned long long)n, S, s, (unsigned long long)r.hi,
                          (unsigned long long)r.lo);
            ck_assert_uint_le(r.hi, n);
            expect_lo = r.hi;
        }
        ck_assert_msg(expect_lo == n, "n=%llu S=%d: last shard ends at %llu", (unsigned long long)n,
                      S, (unsigned long long)expect_lo);
        ck_assert_uint_eq(dcps_shardmap_range(n, S, 0).lo, 0);
    }
}
END_TEST

START_TEST(every_index_covered_exactly_once_for_small_n)
{
    /* Explicit coverage count, independent of the contiguity argument. */
    int S = shard_count(_i);
    for (size_t k = 0; k < N_SIZES && sizes[k] <= 235146; k++) {
        uint64_t n = sizes[k];
        unsigned char *seen = calloc(n, 1);
        ck_assert_ptr_nonnull(seen);
        for (int s = 0; s < S; s++) {
            dcps_range_t r = dcps_shardmap_range(n, S, s);
            for (uint64_t i = r.lo; i < r.hi && i < n; i++)
                seen[i]++;
        }
        for (uint64_t i = 0; i < n; i++)
            ck_assert_msg(seen[i] == 1, "n=%llu S=%d index %llu covered %d times",
                          (unsigned long long)n, S, (unsigned long long)i, seen[i]);
        free(seen);
    }
}
END_TEST

START_TEST(every_lo_is_a_multiple_of_64)
{
    int S = shard_count(_i);
    for (size_t k = 0; k < N_SIZES; k++)
        for (int s = 0; s < S; s++) {
            dcps_range_t r = dcps_shardmap_range(sizes[k], S, s);
            ck_assert_msg(r.lo % DCPS_SHARD_ALIGN == 0, "n=%llu S=%d shard %d lo %llu",
                          (unsigned long long)sizes[k], S, s, (unsigned long long)r.lo);
        }
}
END_TEST

START_TEST(sizes_differ_by_at_most_one_block)
{
    int S = shard_count(_i);
    for (size_t k = 0; k < N_SIZES; k++) {
        uint64_t n = sizes[k], min = UINT64_MAX, max = 0;
        for (int s = 0; s < S; s++) {
            dcps_range_t r = dcps_shardmap_range(n, S, s);
            uint64_t len = r.hi - r.lo;
            min = len < min ? len : min;
            max = len > max ? len : max;
        }
        ck_assert_msg(max - min <= DCPS_SHARD_ALIGN, "n=%llu S=%d sizes from %llu to %llu",
                      (unsigned long long)n, S, (unsigned long long)min, (unsigned long long)max);
    }
}
END_TEST

START_TEST(shard_is_empty_only_when_fewer_blocks_than_shards)
{
    int S = shard_count(_i);
    for (size_t k = 0; k < N_SIZES; k++) {
        uint64_t n = sizes[k], B = blocks_of(n);
        int empty = 0;
        for (int s = 0; s < S; s++) {
            dcps_range_t r = dcps_shardmap_range(n, S, s);
            if (r.lo == r.hi) {
                empty++;
                ck_assert_msg(B < (uint64_t)S, "n=%llu (%llu blocks) S=%d: shard %d is empty",
                              (unsigned long long)n, (unsigned long long)B, S, s);
            }
        }
        /* With fewer blocks than shards exactly S - B shards are empty. */
        if (B < (uint64_t)S)
            ck_assert_int_eq(empty, S - (int)B);
        else
            ck_assert_int_eq(empty, 0);
    }
}
END_TEST

START_TEST(shard_gets_its_share_of_blocks)
{
    /* The header's formula: shard s gets blocks [s*B/S, (s+1)*B/S), clipped to n. */
    int S = shard_count(_i);
    for (size_t k = 0; k < N_SIZES; k++) {
        uint64_t n = sizes[k], B = blocks_of(n);
        for (int s = 0; s < S; s++) {
            dcps_range_t r = dcps_shardmap_range(n, S, s);
            uint64_t lo = B * (uint64_t)s / (uint64_t)S * DCPS_SHARD_ALIGN;
            uint64_t hi = B * (uint64_t)(s + 1) / (uint64_t)S * DCPS_SHARD_ALIGN;
            ck_assert_uint_eq(r.lo, lo < n ? lo : n);
            ck_assert_uint_eq(r.hi, hi < n ? hi : n);
        }
    }
}
END_TEST

START_TEST(owner_agrees_with_ranges_at_every_index_for_small_n)
{
    int S = shard_count(_i);
    for (size_t k = 0; k < N_SIZES && sizes[k] <= 235146; k++) {
        uint64_t n = sizes[k];
        for (int s = 0; s < S; s++) {
            dcps_range_t r = dcps_shardmap_range(n, S, s);
            for (uint64_t i = r.lo; i < r.hi; i++) {
                int o = dcps_shardmap_owner(n, S, i);
                if (o != s)
                    ck_abort_msg("n=%llu S=%d index %llu: owner %d, range says %d",
                                 (unsigned long long)n, S, (unsigned long long)i, o, s);
            }
        }
    }
}
END_TEST

START_TEST(owner_agrees_with_ranges_at_shard_boundaries_for_large_n)
{
    int S = shard_count(_i);
    for (size_t k = 0; k < N_SIZES; k++) {
        uint64_t n = sizes[k];
        for (int s = 0; s < S; s++) {
            dcps_range_t r = dcps_shardmap_range(n, S, s);
            if (r.lo == r.hi)
                continue;
            uint64_t probe[] = {r.lo, r.lo + 1, r.lo + 63, r.lo + 64, (r.lo + r.hi) / 2, r.hi - 1};
            for (size_t p = 0; p < sizeof probe / sizeof probe[0]; p++) {
                if (probe[p] >= r.hi)
                    continue;
                ck_assert_int_eq(dcps_shardmap_owner(n, S, probe[p]), s);
            }
            /* lo - 1 belongs to the nearest non-empty shard before s. */
            if (r.lo > 0) {
                int prev = s - 1;
                while (prev >= 0) {
                    dcps_range_t q = dcps_shardmap_range(n, S, prev);
                    if (q.lo < q.hi)
                        break;
                    prev--;
                }
                ck_assert_int_ge(prev, 0);
                ck_assert_int_eq(dcps_shardmap_owner(n, S, r.lo - 1), prev);
            }
        }
        /* The last shard is never empty; index 0 is the first non-empty shard's. */
        ck_assert_int_eq(dcps_shardmap_owner(n, S, n - 1), S - 1);
        int first = 0;
        while (dcps_shardmap_range(n, S, first).hi == 0)
            first++;
        ck_assert_int_eq(dcps_shardmap_owner(n, S, 0), first);
    }
}
END_TEST

START_TEST(known_splits)
{
    dcps_range_t r;
    /* 65 parameters = 2 blocks over 2 shards: one full block, one of 1. */
    r = dcps_shardmap_range(65, 2, 0);
    ck_assert_uint_eq(r.lo, 0);
    ck_assert_uint_eq(r.hi, 64);
    r = dcps_shardmap_range(65, 2, 1);
    ck_assert_uint_eq(r.lo, 64);
    ck_assert_uint_eq(r.hi, 65);
    /* 1000 = 16 blocks over 3 shards: 5, 5, 6 blocks. */
    r = dcps_shardmap_range(1000, 3, 0);
    ck_assert_uint_eq(r.lo, 0);
    ck_assert_uint_eq(r.hi, 320);
    r = dcps_shardmap_range(1000, 3, 1);
    ck_assert_uint_eq(r.lo, 320);
    ck_assert_uint_eq(r.hi, 640);
    r = dcps_shardmap_range(1000, 3, 2);
    ck_assert_uint_eq(r.lo, 640);
    ck_assert_uint_eq(r.hi, 1000);
    /* One shard owns everything. */
    r = dcps_shardmap_range(4294967295u, 1, 0);
    ck_assert_uint_eq(r.lo, 0);
    ck_assert_uint_eq(r.hi, 4294967295u);
    ck_assert_int_eq(dcps_shardmap_owner(4294967295u, 1, 4294967294u), 0);
}
END_TEST

static Suite *shardmap_suite(void)
{
    Suite *s = suite_create("shardmap");
    TCase *tc = tcase_create("map");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, ranges_tile_zero_to_n_contiguously, 0, N_COUNTS);
    tcase_add_loop_test(tc, every_index_covered_exactly_once_for_small_n, 0, N_COUNTS);
    tcase_add_loop_test(tc, every_lo_is_a_multiple_of_64, 0, N_COUNTS);
    tcase_add_loop_test(tc, sizes_differ_by_at_most_one_block, 0, N_COUNTS);
    tcase_add_loop_test(tc, shard_is_empty_only_when_fewer_blocks_than_shards, 0, N_COUNTS);
    tcase_add_loop_test(tc, shard_gets_its_share_of_blocks, 0, N_COUNTS);
    tcase_add_loop_test(tc, owner_agrees_with_ranges_at_every_index_for_small_n, 0, N_COUNTS);
    tcase_add_loop_test(tc, owner_agrees_with_ranges_at_shard_boundaries_for_large_n, 0, N_COUNTS);
    tcase_add_test(tc, known_splits);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return dcps_test_run(shardmap_suite());
}
