/* Tests for kernels/topk on the CPU: the selection equals a brute-force reference
 * (sort by magnitude descending and index ascending, take k, sort by index) bit for
 * bit, on random data of many sizes, ties, equal values, signed zeros, denormals
 * and bins too full for the workspace; with k on every side of long runs of equal
 * magnitudes, on clustered, sorted, all-zero and tied inputs, and where the sampled
 * pivot is too high or too low; bad sizes and non-finite input are refused
 * without writing past the outputs; error feedback loses nothing; scatter and
 * gather are the plain loops. */
#include "kernels/topk.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/rng.h"
#include "tests/check_run.h"

/* Output entries after k that must stay untouched. */
#define GUARD 17
#define SENTINEL 0xa5a5a5a5u

static uint32_t key(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u & 0x7fffffffu;
}

static float from_bits(uint32_t u)
{
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static void *alloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The contract by brute force: order by (key descending, index ascending), take
 * the first k, order those by index. */
static void reference(const float *x, size_t n, size_t k, uint32_t *idx, float *val)
{
    uint64_t *order = alloc(n * sizeof *order);
    for (size_t i = 0; i < n; i++)
        order[i] = (uint64_t)(0x7fffffffu - key(x[i])) << 32 | i;
    qsort(order, n, sizeof *order, cmp_u64);
    for (size_t j = 0; j < k; j++)
        idx[j] = (uint32_t)order[j];
    qsort(idx, k, sizeof *idx, cmp_u32);
    for (size_t j = 0; j < k; j++)
        val[j] = x[idx[j]];
    free(order);
}

/* Output arrays of k + GUARD entries, all SENTINEL. */
static void outputs(size_t k, uint32_t **idx, float **val)
{
    *idx = alloc((k + GUARD) * sizeof **idx);
    *val = alloc((k + GUARD) * sizeof **val);
    memset(*idx, 0xa5, (k + GUARD) * sizeof **idx);
    memset(*val, 0xa5, (k + GUARD) * sizeof **val);
}

/* Check records every assertion it passes, which is slow in a loop over many
 * entries: the loops below find the first bad entry and assert once. */

static void assert_guard(const uint32_t *idx, const float *val, size_t k)
{
    size_t j = k;
    uint32_t v = SENTINEL;
    for (; j < k + GUARD; j++) {
        memcpy(&v, &val[j], sizeof v);
        if (idx[j] != SENTINEL || v != SENTINEL)
            break;
    }
    ck_assert_msg(j == k + GUARD, "entry %zu past k=%zu written", j, k);
}

/* dcps_topk_cpu and dcps_topk_ef_cpu with g NULL (on a copy of x) both give the
 * reference; the latter clears exactly the selected entries. */
static void expect_topk(const float *x, size_t n, size_t k, dcps_topk_ws_t *ws)
{
    uint32_t *want_idx = alloc(k * sizeof *want_idx), *idx;
    float *want_val = alloc(k * sizeof *want_val), *val, *r = alloc(n * sizeof *r);
    reference(x, n, k, want_idx, want_val);
    outputs(k, &idx, &val);

    ck_assert_int_eq(dcps_topk_cpu(x, n, k, idx, val, ws), 0);
    ck_assert_msg(memcmp(idx, want_idx, k * sizeof *idx) == 0, "n=%zu k=%zu: indices differ", n, k);
    ck_assert_msg(memcmp(val, want_val, k * sizeof *val) == 0, "n=%zu k=%zu: values differ", n, k);
    assert_guard(idx, val, k);

    memcpy(r, x, n * sizeof *r);
    memset(idx, 0xa5, k * sizeof *idx);
    ck_assert_int_eq(dcps_topk_ef_cpu(r, NULL, n, k, idx, val, ws), 0);
    ck_assert_msg(memcmp(idx, want_idx, k * sizeof *idx) == 0, "ef n=%zu k=%zu: indices differ", n,
                  k);
    ck_assert_msg(memcmp(val, want_val, k * sizeof *val) == 0, "ef n=%zu k=%zu: values differ", n,
                  k);
    assert_guard(idx, val, k);
    size_t i = 0;
    for (size_t j = 0; i < n; i++) {
        int sel = j < k && idx[j] == i;
        j += sel;
        if (sel ? key(r[i]) != 0 || signbit(r[i]) : memcmp(&r[i], &x[i], sizeof(float)) != 0)
            break;
    }
    ck_assert_msg(i == n, "ef n=%zu k=%zu: residual %zu wrong", n, k, i);
    free(want_idx);
    free(want_val);
    free(idx);
    free(val);
    free(r);
}

/* expect_topk for k in {1, 2, n/100 + 1, n/2, n - 1, n} (those in 1..n). */
static void expect_topk_ks(const float *x, size_t n, dcps_topk_ws_t *ws)
{
    const size_t ks[] = {1, 2, n / 100 + 1, n / 2, n - 1, n};
    for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++)
        if (ks[j] >= 1 && ks[j] <= n)
            expect_topk(x, n, ks[j], ws);
}

static dcps_topk_ws_t *new_ws(size_t max_n)
{
    int err = 1;
    dcps_topk_ws_t *ws = dcps_topk_ws_new(max_n, &err);
    ck_assert_ptr_nonnull(ws);
    ck_assert_int_eq(err, 0);
    return ws;
}

/* Normal values scaled by 2^-20 .. 2^20, both signs. */
static void fill_wide(dcps_rng_t *rng, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = ldexpf(dcps_rng_normal(rng), (int)dcps_rng_below(rng, 41) - 20);
}

/* expect_topk with k on every side of the longest runs of equal magnitudes (at
 * most four): k equal to the count of larger keys (the threshold just above the
 * run), one more (one entry taken from the run), the middle of the run, its end,
 * and one past its end. */
static void expect_topk_ties(const float *x, size_t n, dcps_topk_ws_t *ws)
{
    enum { RUNS = 4 };
    uint32_t *keys = alloc(n * sizeof *keys);
    for (size_t i = 0; i < n; i++)
        keys[i] = 0x7fffffffu - key(x[i]); /* ascending: magnitudes descending */
    qsort(keys, n, sizeof *keys, cmp_u32);
    size_t start[RUNS] = {0}, len[RUNS] = {0};
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && keys[j] == keys[i];)
            j++;
        size_t m = 0; /* the shortest run kept, replaced when this one is longer */
        for (size_t q = 1; q < RUNS; q++)
            m = len[q] < len[m] ? q : m;
        if (j - i > len[m]) {
            start[m] = i;
            len[m] = j - i;
        }
    }
    free(keys);
    for (size_t q = 0; q < RUNS; q++) {
        const size_t ks[] = {start[q], start[q] + 1, start[q] + len[q] / 2, start[q] + len[q],
                             start[q] + len[q] + 1};
        for (size_t j = 0; len[q] > 1 && j < sizeof ks / sizeof ks[0]; j++)
            if (ks[j] >= 1 && ks[j] <= n)
                expect_topk(x, n, ks[j], ws);
    }
}

static const size_t sizes[] = {1, 2, 3, 63, 64, 65, 1000, 4097, 100003, 1000003};
#define N_SIZES (sizeof sizes / sizeof sizes[0])

START_TEST(selects_the_k_largest_magnitudes_on_random_data)
{
    size_t n = sizes[_i];
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 10 + (uint64_t)_i);
    float *x = alloc(n * sizeof *x);
    fill_wide(&rng, x, n);
    /* One workspace larger than n, one exactly n. */
    dcps_topk_ws_t *ws = new_ws(1000003);
    expect_topk_ks(x, n, ws);
    dcps_topk_ws_destroy(&ws);
    ck_assert_ptr_null(ws);
    ws = new_ws(n);
    expect_topk_ks(x, n, ws);
    dcps_topk_ws_destroy(&ws);
    free(x);
}
END_TEST

START_TEST(equal_magnitudes_go_to_the_lower_index)
{
    /* A handful of values, both signs: nearly every selection ends inside a tie. */
    static const float pool[] = {0.0f, -0.0f, 0.5f, -0.5f, 1.0f, -1.0f, 2.0f, -2.0f, 3.0f};
    const size_t ns[] = {63, 1000, 100003};
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 20);
    dcps_topk_ws_t *ws = new_ws(100003);
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        size_t n = ns[t];
        float *x = alloc(n * sizeof *x);
        for (size_t i = 0; i < n; i++)
            x[i] = pool[dcps_rng_below(&rng, sizeof pool / sizeof pool[0])];
        expect_topk_ks(x, n, ws);
        expect_topk(x, n, n / 3, ws);
        free(x);
    }
    dcps_topk_ws_destroy(&ws);
}
END_TEST

START_TEST(all_equal_magnitudes_select_the_first_k)
{
    /* One bin holds everything: more than the workspace's candidates, so the
     * bin is narrowed on the data down to a single key. */
    enum { N = 100003 };
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 30);
    float *x = alloc(N * sizeof *x);
    for (size_t i = 0; i < N; i++)
        x[i] = dcps_rng_below(&rng, 2) ? 3.0f : -3.0f;
    dcps_topk_ws_t *ws = new_ws(N);
    const size_t ks[] = {1, 4999, 50000, N};
    for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++) {
        uint32_t *idx;
        float *val;
        outputs(ks[t], &idx, &val);
        ck_assert_int_eq(dcps_topk_cpu(x, N, ks[t], idx, val, ws), 0);
        size_t j = 0;
        while (j < ks[t] && idx[j] == j && val[j] == x[j])
            j++;
        ck_assert_msg(j == ks[t], "k=%zu: entry %zu is not index %zu", ks[t], j, j);
        assert_guard(idx, val, ks[t]);
        free(idx);
        free(val);
        expect_topk(x, N, ks[t], ws);
    }
    dcps_topk_ws_destroy(&ws);
    free(x);
}
END_TEST

START_TEST(negative_and_positive_zeros_are_equal_magnitudes)
{
    /* 20 nonzero entries among zeros of both signs: past k = 20 the zeros are
     * taken by index, whatever their sign, and keep it in val. */
    enum { N = 1000 };
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 40);
    float x[N];
    for (size_t i = 0; i < N; i++)
        x[i] = dcps_rng_below(&rng, 2) ? -0.0f : 0.0f;
    for (int j = 0; j < 20; j++)
        x[dcps_rng_below(&rng, N)] = (float)(j + 1) * (j % 2 ? -1.0f : 1.0f);
    dcps_topk_ws_t *ws = new_ws(N);
    const size_t ks[] = {1, 19, 20, 21, 500, N};
    for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++)
        expect_topk(x, N, ks[t], ws);
    dcps_topk_ws_destroy(&ws);
}
END_TEST

START_TEST(denormals_and_extreme_exponents_are_ordered_by_magnitude)
{
    /* Denormals (keys below 0x00800000), normals from FLT_MIN to FLT_MAX, and a
     * run of denormals only, where the top bits of every key are zero. */
    enum { N = 50001 };
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 50);
    float *x = alloc(N * sizeof *x);
    for (size_t i = 0; i < N; i++) {
        uint32_t bits = (uint32_t)dcps_rng_below(&rng, 0x7f800000u);
        if (i % 3 == 0)
            bits = (uint32_t)dcps_rng_below(&rng, 0x00800000u);
        x[i] = from_bits(bits | (uint32_t)dcps_rng_below(&rng, 2) << 31);
    }
    x[7] = FLT_MAX;
    x[8] = -FLT_MAX;
    x[9] = FLT_MIN;
    x[10] = 0x1p-149f;
    dcps_topk_ws_t *ws = new_ws(N);
    expect_topk_ks(x, N, ws);
    for (size_t i = 0; i < N; i++)
        x[i] = from_bits((uint32_t)dcps_rng_below(&rng, 0x00800000u) | (uint32_t)(i & 1) << 31);
    expect_topk_ks(x, N, ws);
    dcps_topk_ws_destroy(&ws);
    free(x);
}
END_TEST

START_TEST(a_bin_too_full_for_the_workspace_is_narrowed_on_the_data)
{
    /* Values 1 + j * 2^-14 (j < 128) share the top key bits that pass 1 counts and
     * differ a few bits below: one narrowing pass over the data, then pass 2.
     * Values 1 + j * 2^-23 differ only in the lowest 7 bits: narrowing goes down
     * to a single key. */
    enum { N = 200003 };
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 60);
    float *x = alloc(N * sizeof *x);
    dcps_topk_ws_t *ws = new_ws(N);
    for (int step = 14; step <= 23; step += 9) {
        for (size_t i = 0; i < N; i++)
            x[i] = (1.0f + ldexpf((float)dcps_rng_below(&rng, 128), -step)) *
                   (i % 5 ? 1.0f : -1.0f);
        expect_topk_ks(x, N, ws);
    }
    dcps_topk_ws_destroy(&ws);
    free(x);
}
END_TEST

START_TEST(bad_sizes_are_invalid_and_write_nothing)
{
    float x[4] = {1.0f, 2.0f, 3.0f, 4.0f}, r[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    uint32_t *idx;
    float *val;
    outputs(0, &idx, &val);
    dcps_topk_ws_t *ws = new_ws(4);
    ck_assert_int_eq(dcps_topk_cpu(x, 4, 0, idx, val, ws), DCPS_E_INVAL);
    ck_assert_int_eq(dcps_topk_cpu(x, 4, 5, idx, val, ws), DCPS_E_INVAL);
    ck_assert_int_eq(dcps_topk_cpu(x, 0, 1, idx, val, ws), DCPS_E_INVAL);
    ck_assert_int_eq(dcps_topk_cpu(x, 0, 0, idx, val, ws), DCPS_E_INVAL);
    ck_assert_int_eq(dcps_topk_cpu(x, 5, 1, idx, val, ws), DCPS_E_INVAL); /* n > max_n */
    ck_assert_int_eq(dcps_topk_cpu(x, 4, 1, idx, val, NULL), DCPS_E_INVAL);
    ck_assert_int_eq(dcps_topk_ef_cpu(r, x, 4, 0, idx, val, ws), DCPS_E_INVAL);
    ck_assert_int_eq(dcps_topk_ef_cpu(r, x, 4, 5, idx, val, ws), DCPS_E_INVAL);
    ck_assert_int_eq(dcps_topk_ef_cpu(r, x, 0, 1, idx, val, ws), DCPS_E_INVAL);
    ck_assert(r[0] == 1.0f && r[1] == 2.0f && r[2] == 3.0f && r[3] == 4.0f);
    assert_guard(idx, val, 0);
    dcps_topk_ws_destroy(&ws);
    free(idx);
    free(val);

    int err = 0;
    ck_assert_ptr_null(dcps_topk_ws_new(0, &err));
    ck_assert_int_eq(err, DCPS_E_INVAL);
    err = 0;
    ck_assert_ptr_null(dcps_topk_ws_new(DCPS_TOPK_MAX_N + 1, &err));
    ck_assert_int_eq(err, DCPS_E_INVAL);
    dcps_topk_ws_destroy(&ws);
    dcps_topk_ws_destroy(NULL);
}
END_TEST

START_TEST(nan_and_infinities_are_refused_without_stray_writes)
{
    /* Sizes below and above the one where pass 1 counts only above a sampled
     * bound, with k from 1 to n; the bad value first where the sample looks (entry
     * 0), then where it does not. */
    const size_t ns[] = {1003, 1 << 17};
    const float bad[] = {NAN, -NAN, INFINITY, -INFINITY, from_bits(0x7f800001u)};
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 70);
    for (int c = 0; c < 2; c++) {
        size_t n = ns[c];
        const size_t where[] = {0, n / 2 + 1, n - 1}, ks[] = {1, n / 100, n};
        float *x = alloc(n * sizeof *x);
        dcps_topk_ws_t *ws = new_ws(n);
        for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++)
            for (size_t w = 0; w < sizeof where / sizeof where[0]; w++)
                for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) {
                    size_t k = ks[j];
                    fill_wide(&rng, x, n);
                    x[where[w]] = bad[b];
                    uint32_t *idx;
                    float *val;
                    outputs(k, &idx, &val);
                    ck_assert_int_eq(dcps_topk_cpu(x, n, k, idx, val, ws), DCPS_E_NONFINITE);
                    ck_assert_int_eq(dcps_topk_ef_cpu(x, NULL, n, k, idx, val, ws),
                                     DCPS_E_NONFINITE);
                    assert_guard(idx, val, k);
                    free(idx);
                    free(val);
                }
        dcps_topk_ws_destroy(&ws);
        free(x);
    }
}
END_TEST

START_TEST(ef_refuses_a_sum_that_overflows)
{
    float r[3] = {1.0f, FLT_MAX, -2.0f};
    const float g[3] = {1.0f, FLT_MAX, 1.0f};
    uint32_t idx[1];
    float val[1];
    dcps_topk_ws_t *ws = new_ws(3);
    ck_assert_int_eq(dcps_topk_ef_cpu(r, g, 3, 1, idx, val, ws), DCPS_E_NONFINITE);
    /* The addition has happened, nothing was cleared. */
    ck_assert(r[0] == 2.0f && isinf(r[1]) && r[2] == -1.0f);
    dcps_topk_ws_destroy(&ws);
}
END_TEST

/* One error-feedback step, checked: the selection is the reference's on the sums
 * r + g; for every entry, what is sent (if selected) or kept in r (if not) is the
 * sum bit for bit, and selected entries of r become +0. */
static void expect_ef(float *r, const float *g, size_t n, size_t k, dcps_topk_ws_t *ws)
{
    float *sum = alloc(n * sizeof *sum), *val = alloc(k * sizeof *val);
    float *want_val = alloc(k * sizeof *want_val);
    uint32_t *idx = alloc(k * sizeof *idx), *want_idx = alloc(k * sizeof *want_idx);
    for (size_t i = 0; i < n; i++) {
        volatile float s = r[i] + g[i];
        sum[i] = s;
    }
    reference(sum, n, k, want_idx, want_val);
    ck_assert_int_eq(dcps_topk_ef_cpu(r, g, n, k, idx, val, ws), 0);
    ck_assert_msg(memcmp(idx, want_idx, k * sizeof *idx) == 0, "n=%zu k=%zu: indices differ", n, k);
    size_t i = 0;
    float sent = 0.0f;
    for (size_t j = 0; i < n; i++) {
        int sel = j < k && idx[j] == i;
        sent = sel ? val[j++] : 0.0f;
        if (memcmp(sel ? &sent : &r[i], &sum[i], sizeof(float)) != 0 ||
            (sel && (r[i] != 0.0f || signbit(r[i]))))
            break;
    }
    ck_assert_msg(i == n, "n=%zu k=%zu entry %zu: sent %a, kept %a, sum %a", n, k, i,
                  (double)sent, i < n ? (double)r[i] : 0.0, i < n ? (double)sum[i] : 0.0);
    free(sum);
    free(val);
    free(want_val);
    free(idx);
    free(want_idx);
}

START_TEST(ef_sent_plus_kept_is_the_sum_bit_for_bit_over_steps)
{
    /* A small and a large residual (the large one with pass 1 counting only above
     * a sampled bound), over many steps. */
    const size_t ns[] = {10007, 300007}, ks[] = {101, 2999};
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 80);
    for (int c = 0; c < 2; c++) {
        float *r = calloc(ns[c], sizeof *r), *g = alloc(ns[c] * sizeof *g);
        ck_assert_ptr_nonnull(r);
        dcps_topk_ws_t *ws = new_ws(ns[c]);
        for (int t = 0; t < 20; t++) {
            fill_wide(&rng, g, ns[c]);
            expect_ef(r, g, ns[c], ks[c], ws);
        }
        dcps_topk_ws_destroy(&ws);
        free(r);
        free(g);
    }
}
END_TEST

START_TEST(a_misleading_sample_costs_a_recount_not_the_result)
{
    /* Pass 1 samples every (n / 4096)-th entry: make exactly those large, so that
     * its bound leaves fewer than k entries above it and it must count again. */
    enum { N = 1 << 17, STEP = N / 4096 };
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 85);
    float *x = alloc(N * sizeof *x), *g = alloc(N * sizeof *g);
    fill_wide(&rng, x, N);
    for (size_t i = 0; i < N; i++)
        x[i] = i % STEP ? ldexpf(x[i], -30) : 1e6f + (float)i;
    dcps_topk_ws_t *ws = new_ws(N);
    expect_topk(x, N, 200, ws);
    expect_topk(x, N, 1000, ws);
    for (size_t i = 0; i < N; i++) /* the same with error feedback: g added once */
        g[i] = i % STEP ? 1e-20f : 1.0f;
    expect_ef(x, g, N, 1000, ws);
    dcps_topk_ws_destroy(&ws);
    free(x);
    free(g);
}
END_TEST

START_TEST(ties_at_the_threshold_go_to_the_lower_indices_at_every_size)
{
    /* Inputs where the threshold falls inside a long run of equal magnitudes: a few
     * distinct values, 90% and 99% zeros of both signs, and a third of the entries
     * at one value among normal ones; below and above the size where the selection
     * starts from a sampled pivot, k on every side of each long run. */
    static const float pool[] = {-1.0f, -0.5f, -0.0f, 0.0f, 0.5f, 1.0f};
    const size_t ns[] = {1000, 70001, 300007};
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 100);
    dcps_topk_ws_t *ws = new_ws(300007);
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        size_t n = ns[t];
        float *x = alloc(n * sizeof *x);
        for (int cls = 0; cls < 4; cls++) {
            for (size_t i = 0; i < n; i++) {
                float v = dcps_rng_normal(&rng), z = dcps_rng_below(&rng, 2) ? 0.0f : -0.0f;
                uint64_t u = dcps_rng_below(&rng, 1000);
                x[i] = cls == 0   ? pool[u % 6]
                       : cls == 1 ? (u < 900 ? z : v)
                       : cls == 2 ? (u < 990 ? z : v)
                                  : (u < 333 ? 1.0f : v);
            }
            expect_topk_ties(x, n, ws);
            expect_topk(x, n, n / 100 + 1, ws);
            expect_topk(x, n, n / 1000 + 1, ws);
        }
        free(x);
    }
    dcps_topk_ws_destroy(&ws);
}
END_TEST

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

START_TEST(clustered_and_sorted_inputs_match_the_reference)
{
    /* Magnitudes 1 + 2^-16 N(0, 1) (about a thousand distinct keys, most entries in
     * one or two bins of pass 1), and normal data sorted ascending and descending,
     * so that the sample is the data's quantiles and the large keys lie at the
     * ends. */
    const size_t ns[] = {4097, 70001, 300007};
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 110);
    dcps_topk_ws_t *ws = new_ws(300007);
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        size_t n = ns[t];
        const size_t ks[] = {n / 1000 + 1, n / 100 + 1, n / 10, n / 8, n / 8 + 1, n / 3};
        float *x = alloc(n * sizeof *x);
        for (int cls = 0; cls < 3; cls++) {
            for (size_t i = 0; i < n; i++)
                x[i] = cls == 0 ? (1.0f + 0x1p-16f * dcps_rng_normal(&rng)) *
                                      (dcps_rng_below(&rng, 2) ? 1.0f : -1.0f)
                                : dcps_rng_normal(&rng);
            if (cls > 0)
                qsort(x, n, sizeof *x, cmp_float);
            for (size_t i = 0; cls == 2 && i < n / 2; i++) {
                float v = x[i];
                x[i] = x[n - 1 - i];
                x[n - 1 - i] = v;
            }
            expect_topk_ks(x, n, ws);
            for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++)
                if (ks[j] >= 1)
                    expect_topk(x, n, ks[j], ws);
            if (cls == 0)
                expect_topk_ties(x, n, ws);
        }
        free(x);
    }
    dcps_topk_ws_destroy(&ws);
}
END_TEST

START_TEST(all_zeros_select_the_first_k)
{
    /* Zeros of both signs only, below and above the pivot's size: the first k by
     * index, each with its own sign. */
    const size_t ns[] = {1000, 100003};
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 120);
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        size_t n = ns[t];
        const size_t ks[] = {1, 2, n / 100, n / 8, n / 8 + 1, n / 2, n};
        float *x = alloc(n * sizeof *x);
        for (size_t i = 0; i < n; i++)
            x[i] = dcps_rng_below(&rng, 2) ? 0.0f : -0.0f;
        dcps_topk_ws_t *ws = new_ws(n);
        for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) {
            uint32_t *idx;
            float *val;
            outputs(ks[j], &idx, &val);
            ck_assert_int_eq(dcps_topk_cpu(x, n, ks[j], idx, val, ws), 0);
            size_t i = 0;
            while (i < ks[j] && idx[i] == i && memcmp(&val[i], &x[i], sizeof(float)) == 0)
                i++;
            ck_assert_msg(i == ks[j], "k=%zu: entry %zu is not index %zu", ks[j], i, i);
            free(idx);
            free(val);
            expect_topk(x, n, ks[j], ws);
        }
        dcps_topk_ws_destroy(&ws);
        free(x);
    }
}
END_TEST

START_TEST(a_sample_below_the_data_costs_a_second_selection_not_the_result)
{
    /* The sampled entries (every (n / 4096)-th) tiny, the rest normal: the pivot is
     * far below the k-th key, more entries lie above it than the spill holds, and
     * the general path selects. The same where the rest is one tied value, and with
     * error feedback (g added once). */
    enum { N = 1 << 17, STEP = N / 4096 };
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 130);
    float *x = alloc(N * sizeof *x), *g = alloc(N * sizeof *g);
    dcps_topk_ws_t *ws = new_ws(N);
    for (int tied = 0; tied < 2; tied++) {
        for (size_t i = 0; i < N; i++)
            x[i] = i % STEP ? (tied ? -2.0f : dcps_rng_normal(&rng))
                   : i % 2  ? 1e-30f * dcps_rng_normal(&rng)
                            : 0.0f;
        expect_topk(x, N, 13, ws);
        expect_topk(x, N, N / 100, ws);
        for (size_t i = 0; i < N; i++)
            g[i] = i % STEP ? 0.25f : 0.0f;
        expect_ef(x, g, N, N / 100, ws);
    }
    dcps_topk_ws_destroy(&ws);
    free(x);
    free(g);
}
END_TEST

START_TEST(ef_over_tied_gradients_sends_plus_keeps_the_sum)
{
    /* Gradients from a few values, so that the residual's magnitudes tie at the
     * threshold step after step, with the pivot and without (small n). */
    static const float pool[] = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f};
    const size_t ns[] = {5003, 200003}, ks[] = {51, 2001};
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 140);
    for (int c = 0; c < 2; c++) {
        float *r = calloc(ns[c], sizeof *r), *g = alloc(ns[c] * sizeof *g);
        ck_assert_ptr_nonnull(r);
        dcps_topk_ws_t *ws = new_ws(ns[c]);
        for (int t = 0; t < 12; t++) {
            for (size_t i = 0; i < ns[c]; i++)
                g[i] = pool[dcps_rng_below(&rng, 5)];
            expect_ef(r, g, ns[c], ks[c], ws);
        }
        dcps_topk_ws_destroy(&ws);
        free(r);
        free(g);
    }
}
END_TEST

START_TEST(scatter_add_and_gather_are_the_plain_loops)
{
    enum { N = 5003, K = 777 };
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 90);
    float w[N], want[N], v[K], out[K];
    uint32_t idx[K], perm[N];
    fill_wide(&rng, w, N);
    fill_wide(&rng, v, K);
    for (uint32_t i = 0; i < N; i++)
        perm[i] = i;
    dcps_rng_shuffle_u32(&rng, perm, N);
    memcpy(idx, perm, sizeof idx);
    memcpy(want, w, sizeof w);
    for (size_t j = 0; j < K; j++) {
        volatile float p = -0.37f * v[j];
        want[idx[j]] += p;
    }
    dcps_scatter_add_cpu(w, idx, v, K, -0.37f);
    ck_assert_int_eq(memcmp(w, want, sizeof w), 0);
    dcps_gather_cpu(w, idx, K, out);
    size_t j = 0;
    while (j < K && memcmp(&out[j], &w[idx[j]], sizeof(float)) == 0)
        j++;
    ck_assert_uint_eq(j, K);
    dcps_scatter_add_cpu(w, idx, v, 0, 1.0f);
    dcps_gather_cpu(w, idx, 0, out);
    ck_assert_int_eq(memcmp(w, want, sizeof w), 0);
}
END_TEST

static Suite *topk_suite(void)
{
    Suite *s = suite_create("topk");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, selects_the_k_largest_magnitudes_on_random_data, 0, N_SIZES);
    tcase_add_test(tc, equal_magnitudes_go_to_the_lower_index);
    tcase_add_test(tc, all_equal_magnitudes_select_the_first_k);
    tcase_add_test(tc, negative_and_positive_zeros_are_equal_magnitudes);
    tcase_add_test(tc, denormals_and_extreme_exponents_are_ordered_by_magnitude);
    tcase_add_test(tc, a_bin_too_full_for_the_workspace_is_narrowed_on_the_data);
    tcase_add_test(tc, bad_sizes_are_invalid_and_write_nothing);
    tcase_add_test(tc, nan_and_infinities_are_refused_without_stray_writes);
    tcase_add_test(tc, ef_refuses_a_sum_that_overflows);
    tcase_add_test(tc, ef_sent_plus_kept_is_the_sum_bit_for_bit_over_steps);
    tcase_add_test(tc, a_misleading_sample_costs_a_recount_not_the_result);
    tcase_add_test(tc, ties_at_the_threshold_go_to_the_lower_indices_at_every_size);
    tcase_add_test(tc, clustered_and_sorted_inputs_match_the_reference);
    tcase_add_test(tc, all_zeros_select_the_first_k);
    tcase_add_test(tc, a_sample_below_the_data_costs_a_second_selection_not_the_result);
    tcase_add_test(tc, ef_over_tied_gradients_sends_plus_keeps_the_sum);
    tcase_add_test(tc, scatter_add_and_gather_are_the_plain_loops);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return dcps_test_run(topk_suite());
}
