/* Tests for common/rng: the sequence is pinned, and the derived draws have the
 * ranges and rough distributions their contracts promise. */
#include "common/rng.h"

#include <check.h>

#include "tests/check_run.h"
#include <math.h>
#include <stdlib.h>

START_TEST(seed_gives_reference_xoshiro256ss_sequence)
{
    /* Computed independently from the reference splitmix64 + xoshiro256**. */
    static const uint64_t seed0[] = {0x99ec5f36cb75f2b4u, 0xbf6e1f784956452au,
                                     0x1a5f849d4933e6e0u, 0x6aa594f1262d2d2cu};
    static const uint64_t seed42[] = {0x15780b2e0c2ec716u, 0x6104d9866d113a7eu,
                                      0xae17533239e499a1u, 0xecb8ad4703b360a1u};
    dcps_rng_t a, b;
    dcps_rng_seed(&a, 0);
    dcps_rng_seed(&b, 42);
    for (int i = 0; i < 4; i++) {
        ck_assert_uint_eq(dcps_rng_next(&a), seed0[i]);
        ck_assert_uint_eq(dcps_rng_next(&b), seed42[i]);
    }
}
END_TEST

START_TEST(same_seed_same_sequence_other_seed_differs)
{
    dcps_rng_t a, b, c;
    dcps_rng_seed(&a, 1234);
    dcps_rng_seed(&b, 1234);
    dcps_rng_seed(&c, 1235);
    int differ = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = dcps_rng_next(&a);
        ck_assert_uint_eq(x, dcps_rng_next(&b));
        differ += x != dcps_rng_next(&c);
    }
    ck_assert_int_gt(differ, 990);
}
END_TEST

START_TEST(uniform_in_unit_interval_with_mean_half)
{
    dcps_rng_t r;
    dcps_rng_seed(&r, 7);
    double sum = 0.0;
    const int n = 100000;
    for (int i = 0; i < n; i++) {
        double u = dcps_rng_uniform(&r);
        ck_assert(u >= 0.0 && u < 1.0);
        sum += u;
    }
    /* The mean's std is sqrt(1/12/n) ~ 0.0009. */
    ck_assert_double_lt(fabs(sum / n - 0.5), 0.005);
}
END_TEST

START_TEST(normal_has_zero_mean_unit_std)
{
    dcps_rng_t r;
    dcps_rng_seed(&r, 8);
    double s = 0.0, s2 = 0.0;
    const int n = 100000;
    for (int i = 0; i < n; i++) {
        double v = dcps_rng_normal(&r);
        ck_assert(isfinite(v));
        s += v;
        s2 += v * v;
    }
    double mean = s / n, std = sqrt(s2 / n - mean * mean);
    ck_assert_double_lt(fabs(mean), 0.02);
    ck_assert_double_lt(fabs(std - 1.0), 0.02);
}
END_TEST

START_TEST(below_stays_below_n_and_is_roughly_uniform)
{
    dcps_rng_t r;
    dcps_rng_seed(&r, 9);
    int count[7] = {0};
    for (int i = 0; i < 70000; i++) {
        uint64_t v = dcps_rng_below(&r, 7);
        ck_assert_uint_lt(v, 7);
        count[v]++;
    }
    /* Expected 10000 each, std ~ 93. */
    for (int k = 0; k < 7; k++)
        ck_assert_int_lt(abs(count[k] - 10000), 500);
    for (int i = 0; i < 100; i++) {
        ck_assert_uint_eq(dcps_rng_below(&r, 1), 0);
        ck_assert_uint_eq(dcps_rng_below(&r, 0), 0);
        ck_assert_uint_lt(dcps_rng_below(&r, UINT64_MAX), UINT64_MAX);
    }
}
END_TEST

START_TEST(shuffle_is_a_deterministic_permutation)
{
    enum { N = 1000 };
    static uint32_t a[N], b[N];
    for (uint32_t i = 0; i < N; i++)
        a[i] = b[i] = i;
    dcps_rng_t r1, r2;
    dcps_rng_seed(&r1, 10);
    dcps_rng_seed(&r2, 10);
    dcps_rng_shuffle_u32(&r1, a, N);
    dcps_rng_shuffle_u32(&r2, b, N);
    static int seen[N];
    int moved = 0;
    for (uint32_t i = 0; i < N; i++) {
        ck_assert_uint_eq(a[i], b[i]);
        ck_assert_uint_lt(a[i], N);
        ck_assert_int_eq(seen[a[i]]++, 0);
        moved += a[i] != i;
    }
    ck_assert_int_gt(moved, N / 2);
    dcps_rng_shuffle_u32(&r1, a, 0); /* empty and single-element arrays are fine */
    dcps_rng_shuffle_u32(&r1, a, 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rng");
    TCase *tc = tcase_create("rng");
    tcase_add_test(tc, seed_gives_reference_xoshiro256ss_sequence);
    tcase_add_test(tc, same_seed_same_sequence_other_seed_differs);
    tcase_add_test(tc, uniform_in_unit_interval_with_mean_half);
    tcase_add_test(tc, normal_has_zero_mean_unit_std);
    tcase_add_test(tc, below_stays_below_n_and_is_roughly_uniform);
    tcase_add_test(tc, shuffle_is_a_deterministic_permutation);
    suite_add_tcase(s, tc);
    return dcps_test_run(s);
}
