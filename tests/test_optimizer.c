/* Tests for server/optimizer: the update rules against values worked out by
 * hand (chosen so that every intermediate is exact in float32), sparse rules
 * against the dense rule of the same vector, and the checked out-of-place
 * forms against the in-place rules. The shard store that runs them is
 * tests/test_shard.c's. */
#include "server/optimizer.h"

#include <check.h>

#include "tests/check_run.h"
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/rng.h"

static void assert_floats(const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i] && signbit(got[i]) == signbit(want[i]),
                      "element %zu: got %.9g, expected %.9g", i, (double)got[i], (double)want[i]);
}

/* --- dcps_sgd_dense / dcps_sgd_sparse ------------------------------------------------- */

START_TEST(sgd_dense_three_steps_by_hand)
{
    float w[4] = {1.0f, 2.0f, -3.0f, 0.25f};
    const float g1[4] = {2.0f, -4.0f, 1.0f, 0.5f};
    const float g2[4] = {1.0f, 1.0f, -1.0f, 8.0f};
    const float g3[4] = {0.25f, -0.75f, 3.0f, -2.0f};
    const float w1[4] = {0.0f, 4.0f, -3.5f, 0.0f};
    const float w2[4] = {-0.5f, 3.5f, -3.0f, -4.0f};
    const float w3[4] = {-0.625f, 3.875f, -4.5f, -3.0f};
    dcps_sgd_dense(w, g1, 4, 0.5f);
    assert_floats(w, w1, 4);
    dcps_sgd_dense(w, g2, 4, 0.5f);
    assert_floats(w, w2, 4);
    dcps_sgd_dense(w, g3, 4, 0.5f);
    assert_floats(w, w3, 4);
}
END_TEST

START_TEST(sgd_dense_touches_exactly_n_elements)
{
    float w[6] = {1, 1, 1, 1, 1, 1};
    const float g[6] = {1, 1, 1, 1, 1, 1};
    dcps_sgd_dense(w, g, 4, 0.5f);
    const float want[6] = {0.5f, 0.5f, 0.5f, 0.5f, 1.0f, 1.0f};
    assert_floats(w, want, 6);
    dcps_sgd_dense(w, g, 0, 0.5f);
    assert_floats(w, want, 6);
}
END_TEST

START_TEST(sgd_dense_with_zero_lr_changes_nothing)
{
    float w[3] = {1.5f, -2.0f, 1e-30f};
    const float g[3] = {1e30f, -7.0f, 3.0f};
    const float want[3] = {1.5f, -2.0f, 1e-30f};
    dcps_sgd_dense(w, g, 3, 0.0f);
    assert_floats(w, want, 3);
}
END_TEST

START_TEST(sgd_dense_rounds_like_float32)
{
    /* 1 - 0.5 * 2^-25 is not a float: it rounds (to even) back to 1. And
     * 1 - 0.5 * 2^-23 = 1 - 2^-24 is exact. */
    float w[2] = {1.0f, 1.0f};
    const float g[2] = {0x1p-25f, 0x1p-23f};
    dcps_sgd_dense(w, g, 2, 0.5f);
    ck_assert(w[0] == 1.0f);
    ck_assert(w[1] == 1.0f - 0x1p-24f);
    ck_assert(w[1] != 1.0f);
}
END_TEST

START_TEST(sgd_sparse_three_steps_by_hand)
{
    float w[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    const uint32_t i1[3] = {0, 2, 7};
    const float v1[3] = {2.0f, -2.0f, 4.0f};
    const uint32_t i2[2] = {2, 3};
    const float v2[2] = {6.0f, 0.5f};
    const uint32_t i3[4] = {0, 1, 2, 7};
    const float v3[4] = {-1.0f, 1.0f, 0.25f, 10.0f};
    dcps_sgd_sparse(w, 0, i1, v1, 3, 0.5f);
    const float w1[8] = {-1, 1, 3, 3, 4, 5, 6, 5};
    assert_floats(w, w1, 8);
    dcps_sgd_sparse(w, 0, i2, v2, 2, 0.5f);
    const float w2[8] = {-1, 1, 0, 2.75f, 4, 5, 6, 5};
    assert_floats(w, w2, 8);
    dcps_sgd_sparse(w, 0, i3, v3, 4, 0.5f);
    const float w3[8] = {-0.5f, 0.5f, -0.125f, 2.75f, 4, 5, 6, 0};
    assert_floats(w, w3, 8);
}
END_TEST

START_TEST(sgd_sparse_subtracts_base_from_global_indices)
{
    /* w[0] is global index 1000000. */
    float w[5] = {10, 20, 30, 40, 50};
    const uint32_t idx[3] = {1000000, 1000003, 1000004};
    const float v[3] = {4.0f, -8.0f, 1.0f};
    dcps_sgd_sparse(w, 1000000, idx, v, 3, 0.5f);
    const float want[5] = {8, 20, 30, 44, 49.5f};
    assert_floats(w, want, 5);
}
END_TEST

START_TEST(sgd_sparse_with_base_above_two_to_the_31)
{
    float w[4] = {1, 1, 1, 1};
    const uint32_t idx[2] = {4000000001u, 4000000003u};
    const float v[2] = {1.0f, 3.0f};
    dcps_sgd_sparse(w, 4000000000u, idx, v, 2, 0.5f);
    const float want[4] = {1, 0.5f, 1, -0.5f};
    assert_floats(w, want, 4);
}
END_TEST

START_TEST(sgd_sparse_with_no_entries_changes_nothing)
{
    float w[3] = {1, 2, 3};
    const float want[3] = {1, 2, 3};
    dcps_sgd_sparse(w, 0, NULL, NULL, 0, 0.5f);
    assert_floats(w, want, 3);
}
END_TEST

/* --- momentum and DC-ASGD, worked out by hand (all values exact in float) ------------- */

START_TEST(momentum_dense_two_steps_by_hand)
{
    float w[2] = {1, 2}, u[2] = {0, 0};
    const float g[2] = {1, -2};
    dcps_momentum_dense(w, u, g, 2, 0.5f, 0.5f);
    ck_assert_float_eq(u[0], 1);
    ck_assert_float_eq(u[1], -2);
    ck_assert_float_eq(w[0], 0.5f);
    ck_assert_float_eq(w[1], 3);
    dcps_momentum_dense(w, u, g, 2, 0.5f, 0.5f);
    ck_assert_float_eq(u[0], 1.5f); /* 0.5·1 + 1 */
    ck_assert_float_eq(u[1], -3);
    ck_assert_float_eq(w[0], -0.25f); /* 0.5 − 0.5·1.5 */
    ck_assert_float_eq(w[1], 4.5f);
}
END_TEST

START_TEST(momentum_sparse_equals_dense_of_the_same_sparse_vector)
{
    float w1[5] = {1, 2, 3, 4, 5}, u1[5] = {0.5f, -1, 0.25f, 2, -3};
    float w2[5], u2[5];
    memcpy(w2, w1, sizeof w1);
    memcpy(u2, u1, sizeof u1);
    const uint32_t idx[2] = {11, 13};
    const float v[2] = {2, -4}, g[5] = {0, 2, 0, -4, 0};
    for (int step = 0; step < 3; step++) {
        dcps_momentum_sparse(w1, u1, 5, 10, idx, v, 2, 0.1f, 0.9f);
        dcps_momentum_dense(w2, u2, g, 5, 0.1f, 0.9f);
    }
    ck_assert_mem_eq(w1, w2, sizeof w1);
    ck_assert_mem_eq(u1, u2, sizeof u1);
    ck_assert_float_ne(w1[0], 1); /* u decays everywhere, so every entry moved */
}
END_TEST

START_TEST(dcasgd_constant_lambda_two_steps_by_hand)
{
    float w[2] = {1, 2};
    const float bak[2] = {0.5f, 2}, g[2] = {2, 1};
    const dcps_dcasgd_t p = {.lr = 0.5f, .lambda = 0.25f};
    /* c = g + λ g² (w − bak): c0 = 2 + 0.25·4·0.5 = 2.5, c1 = 1 + 0 = 1. */
    dcps_dcasgd_dense(w, bak, NULL, g, 2, &p);
    ck_assert_float_eq(w[0], -0.25f);
    ck_assert_float_eq(w[1], 1.5f);
    /* c0 = 2 + 0.25·4·(−0.75) = 1.25, c1 = 1 + 0.25·1·(−0.5) = 0.875. */
    dcps_dcasgd_dense(w, bak, NULL, g, 2, &p);
    ck_assert_float_eq(w[0], -0.875f);
    ck_assert_float_eq(w[1], 1.0625f);
}
END_TEST

START_TEST(dcasgd_adaptive_lambda_by_hand)
{
    float w[1] = {1}, ms[1] = {0};
    const float bak[1] = {0.5f}, g[1] = {2};
    const dcps_dcasgd_t p = {.lr = 0.5f, .lambda = 3, .adaptive = true, .ms_decay = 0.5f,
                             .epsilon = 0.25f};
    /* MS = 0.5·0 + 0.5·4 = 2; λ = 3 / sqrt(2.25) = 2; c = 2 + 2·4·0.5 = 6. */
    dcps_dcasgd_dense(w, bak, ms, g, 1, &p);
    ck_assert_float_eq(ms[0], 2);
    ck_assert_float_eq(w[0], -2);
    /* MS = 1 + 2 = 3; λ = 3 / sqrt(3.25); c = 2 + λ·4·(−2.5). */
    float lambda = 3.0f / sqrtf(3.25f);
    float expect = -2.0f - 0.5f * (2.0f + lambda * 4.0f * (-2.5f));
    dcps_dcasgd_dense(w, bak, ms, g, 1, &p);
    ck_assert_float_eq(ms[0], 3);
    ck_assert_float_eq(w[0], expect);
}
END_TEST

START_TEST(dcasgd_sparse_changes_only_pushed_entries)
{
    float w1[4] = {1, 2, 3, 4}, w2[4] = {1, 2, 3, 4}, ms1[4] = {1, 1, 1, 1}, ms2[4] = {1, 1, 1, 1};
    const float bak[4] = {0, 1, 2, 3};
    const uint32_t idx[2] = {100, 102};
    const float v[2] = {0.5f, -1}, g[4] = {0.5f, 0, -1, 0};
    const dcps_dcasgd_t p = {0.1f, 2, true, 0.95f, 1e-7f};
    dcps_dcasgd_sparse(w1, bak, ms1, 100, idx, v, 2, &p);
    dcps_dcasgd_dense(w2, bak, ms2, g, 4, &p);
    ck_assert_mem_eq(w1, w2, sizeof w1); /* parameters: same as the dense rule */
    ck_assert_float_eq(w1[1], 2);
    ck_assert_float_eq(w1[3], 4);
    ck_assert_float_eq(ms1[1], 1); /* unpushed entries keep their mean square */
    ck_assert_float_eq(ms2[1], 0.95f);
}
END_TEST

/* --- parameters stay finite ------------------------------------------------------------ */

/* The checked out-of-place rules give the in-place rules' results bit for bit,
 * parameters and state, over many steps of random data (finite updates). */
START_TEST(checked_rules_equal_the_in_place_rules_bit_for_bit)
{
    enum { N = 301, K = 37 };
    static float w[N], u[N], ms[N], bak[N], g[N], w2[N], u2[N], ms2[N], out[N], v[K];
    static uint32_t idx[K];
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 18);
    for (int i = 0; i < N; i++) {
        w[i] = w2[i] = dcps_rng_normal(&rng);
        bak[i] = w[i] + 0.01f * dcps_rng_normal(&rng);
        u[i] = u2[i] = 0;
        ms[i] = ms2[i] = 0;
    }
    const dcps_dcasgd_t dc[2] = {{0.1f, 0.3f, false, 0.9f, 1e-7f}, {0.1f, 2.0f, true, 0.9f, 1e-7f}};
    for (int step = 0; step < 40; step++) {
        for (int i = 0; i < N; i++)
            g[i] = dcps_rng_normal(&rng) * (step % 3 ? 1.0f : 1e3f);
        for (int j = 0; j < K; j++) {
            idx[j] = (uint32_t)(1000 + j * 8 + (int)dcps_rng_below(&rng, 8));
            v[j] = dcps_rng_normal(&rng);
        }
        switch (step % 7) {
        case 0:
            dcps_sgd_dense(w, g, N, 0.1f);
            ck_assert_uint_eq(dcps_sgd_dense_to(out, w2, g, N, 0.1f), N);
            break;
        case 1:
            dcps_momentum_dense(w, u, g, N, 0.1f, 0.9f);
            ck_assert_uint_eq(dcps_momentum_dense_to(out, w2, u2, g, N, 0.1f, 0.9f), N);
            dcps_momentum_dense_state(u2, g, N, 0.9f);
            break;
        case 2:
        case 3:
            dcps_dcasgd_dense(w, bak, ms, g, N, &dc[step % 7 - 2]);
            ck_assert_uint_eq(dcps_dcasgd_dense_to(out, w2, bak, ms2, g, N, &dc[step % 7 - 2]),
                              N);
            dcps_dcasgd_dense_state(ms2, g, N, &dc[step % 7 - 2]);
            break;
        case 4:
            u[300] = u2[300] = -0.0f; /* never pushed: μ·(−0) + 0 is +0 in both */
            dcps_momentum_sparse(w, u, N, 1000, idx, v, K, 0.1f, 0.9f);
            ck_assert_uint_eq(
                dcps_momentum_sparse_to(out, w2, u2, N, 1000, idx, v, K, 0.1f, 0.9f), N);
            dcps_momentum_sparse_state(u2, N, 1000, idx, v, K, 0.9f);
            break;
        case 5: /* sparse rules that only check: same values either way */
            ck_assert_uint_eq(dcps_sgd_sparse_check(w, 1000, idx, v, K, 0.1f), K);
            ck_assert_uint_eq(dcps_dcasgd_sparse_check(w, bak, ms, 1000, idx, v, K, &dc[1]), K);
            ck_assert_uint_eq(dcps_add_sparse_check(w, 1000, idx, v, K), K);
            continue;
        default:
            for (int i = 0; i < N; i++)
                w[i] += g[i];
            ck_assert_uint_eq(dcps_add_dense_to(out, w2, g, N), N);
            break;
        }
        memcpy(w2, out, sizeof out);
        ck_assert_msg(memcmp(w, w2, sizeof w) == 0, "step %d: parameters differ", step);
        ck_assert_msg(memcmp(u, u2, sizeof u) == 0, "step %d: velocity differs", step);
        ck_assert_msg(memcmp(ms, ms2, sizeof ms) == 0, "step %d: mean square differs", step);
    }
}
END_TEST

/* Each checked form reports the first position that would not be finite, and
 * writes no state (the _to forms only write out). */
START_TEST(checked_rules_report_the_first_position_that_would_not_be_finite)
{
    float w[6] = {1, 2, 3, 4, 5, 6}, out[6], u[6] = {0}, ms[6] = {0};
    const float keep_u[6] = {0}, bak[6] = {1, 2, 3, 4, 5, 6};
    float g[6] = {1, 1, 1, 1, 1, 1};
    g[4] = -FLT_MAX;
    g[2] = -FLT_MAX; /* w − 10·g overflows at 2 and 4: 2 is reported */
    ck_assert_uint_eq(dcps_sgd_dense_to(out, w, g, 6, 10.0f), 2);
    ck_assert(isinf(out[2]));
    ck_assert_uint_eq(dcps_momentum_dense_to(out, w, u, g, 6, 10.0f, 0.9f), 2);
    ck_assert_mem_eq(u, keep_u, sizeof u);
    /* DC-ASGD-c: g⊙g overflows; λ·Inf·(w − bak) = Inf·0 is NaN. */
    const dcps_dcasgd_t c = {0.1f, 0.5f, false, 0.9f, 1e-7f}, a = {0.1f, 0.5f, true, 0.9f, 1e-7f};
    ck_assert_uint_eq(dcps_dcasgd_dense_to(out, w, bak, NULL, g, 6, &c), 2);
    /* DC-ASGD-a: the mean square overflows while w stays finite (λ_i → 0). */
    float h[6] = {1, 1, 1, 1e20f, 1, 1};
    ck_assert_uint_eq(dcps_dcasgd_dense_to(out, w, bak, ms, h, 6, &a), 3);
    ck_assert(isfinite(out[3]));
    ck_assert_float_eq(ms[3], 0);
    /* Sums and sparse checks. */
    const float big[6] = {FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX};
    ck_assert_uint_eq(dcps_add_dense_to(out, big, w, 6), 6); /* FLT_MAX + 6 rounds to FLT_MAX */
    ck_assert_uint_eq(dcps_add_dense_to(out, big, big, 6), 0);
    const uint32_t idx[3] = {10, 12, 14};
    const float v[3] = {1, -FLT_MAX, -FLT_MAX};
    ck_assert_uint_eq(dcps_sgd_sparse_check(w, 10, idx, v, 3, 10.0f), 1);
    ck_assert_uint_eq(dcps_dcasgd_sparse_check(w, bak, ms, 10, idx, v, 3, &a), 1);
    ck_assert_uint_eq(dcps_add_sparse_check(big, 10, idx, v, 3), 3); /* FLT_MAX − FLT_MAX = 0 */
    ck_assert_uint_eq(dcps_momentum_sparse_to(out, w, u, 6, 10, idx, v, 3, 10.0f, 0.9f), 2);
    ck_assert_mem_eq(u, keep_u, sizeof u);
}
END_TEST

static Suite *optimizer_suite(void)
{
    Suite *s = suite_create("optimizer");
    TCase *tc = tcase_create("sgd");
    tcase_add_test(tc, sgd_dense_three_steps_by_hand);
    tcase_add_test(tc, sgd_dense_touches_exactly_n_elements);
    tcase_add_test(tc, sgd_dense_with_zero_lr_changes_nothing);
    tcase_add_test(tc, sgd_dense_rounds_like_float32);
    tcase_add_test(tc, sgd_sparse_three_steps_by_hand);
    tcase_add_test(tc, sgd_sparse_subtracts_base_from_global_indices);
    tcase_add_test(tc, sgd_sparse_with_base_above_two_to_the_31);
    tcase_add_test(tc, sgd_sparse_with_no_entries_changes_nothing);
    suite_add_tcase(s, tc);

    tc = tcase_create("momentum and dcasgd");
    tcase_add_test(tc, momentum_dense_two_steps_by_hand);
    tcase_add_test(tc, momentum_sparse_equals_dense_of_the_same_sparse_vector);
    tcase_add_test(tc, dcasgd_constant_lambda_two_steps_by_hand);
    tcase_add_test(tc, dcasgd_adaptive_lambda_by_hand);
    tcase_add_test(tc, dcasgd_sparse_changes_only_pushed_entries);
    suite_add_tcase(s, tc);

    tc = tcase_create("finite");
    tcase_add_test(tc, checked_rules_equal_the_in_place_rules_bit_for_bit);
    tcase_add_test(tc, checked_rules_report_the_first_position_that_would_not_be_finite);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return dcps_test_run(optimizer_suite());
}
