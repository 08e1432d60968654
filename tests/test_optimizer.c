/* Tests for server/optimizer: the update rules against values worked out by
 * hand (chosen so that every intermediate is exact in float32), sparse rules
 * against the dense rule of the same vector, and the checked out-of-place
 * forms against the in-place rules. Every rule of [optimizer] kind (sgd,
 * momentum with nesterov, adam, adamw, adagrad, with weight decay), dense and
 * lazy, against torch.optim's formulas computed in double; non-lazy sparse
 * pushes bit for bit the dense rule; their checks; delay compensation before
 * sgd bit for bit DC-ASGD. The shard store that runs them is
 * tests/test_shard.c's; python/tests/test_optim.py compares them with
 * torch.optim itself. */
#include "server/optimizer.h"

#include <check.h>

#include "tests/check_run.h"
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/config.h"
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

/* --- every rule of [optimizer] kind (dcps_rule_*) --------------------------------------- */

/* The options of one rule, as the job gives them: constants chosen so that
 * every term counts (an eps as large as √v, a weight decay that moves w). */
typedef struct {
    const char *name;
    int kind;
    double momentum;
    bool nesterov;
    double beta1, beta2, eps, wd;
} rule_case_t;

static const rule_case_t rule_cases[] = {
    {"sgd", DCPS_OPT_SGD, 0, false, 0, 0, 0, 0},
    {"sgd weight_decay", DCPS_OPT_SGD, 0, false, 0, 0, 0, 0.1},
    {"momentum", DCPS_OPT_MOMENTUM, 0.7, false, 0, 0, 0, 0},
    {"momentum nesterov weight_decay", DCPS_OPT_MOMENTUM, 0.7, true, 0, 0, 0, 0.1},
    {"adam", DCPS_OPT_ADAM, 0, false, 0.8, 0.9, 0.1, 0},
    {"adam weight_decay", DCPS_OPT_ADAM, 0, false, 0.9, 0.999, 1e-8, 0.1},
    {"adamw", DCPS_OPT_ADAMW, 0, false, 0.8, 0.9, 0.1, 0.1},
    {"adagrad", DCPS_OPT_ADAGRAD, 0, false, 0, 0, 0.1, 0},
    {"adagrad weight_decay", DCPS_OPT_ADAGRAD, 0, false, 0, 0, 1e-10, 0.1},
};
enum { RULE_CASES = sizeof rule_cases / sizeof rule_cases[0] };

static dcps_rule_t rule_of(const rule_case_t *c)
{
    return dcps_rule_new(c->kind, c->momentum, c->nesterov, c->beta1, c->beta2, c->eps, c->wd);
}

/* One entry of the rule as torch.optim's documentation writes it, in double:
 * w, its state a (u, m or the sum) and b (v), gradient g, learning rate lr, t
 * the step (from 1). Written from torch.optim's formulas, not from
 * optimizer.c. */
static void ref_step(const rule_case_t *c, double lr, uint64_t t, double *w, double *a,
                     double *b, double g)
{
    if (c->kind == DCPS_OPT_ADAMW)
        *w *= 1 - lr * c->wd; /* decoupled: the gradient does not see it */
    else
        g += c->wd * *w;
    switch (c->kind) {
    case DCPS_OPT_SGD: *w -= lr * g; break;
    case DCPS_OPT_MOMENTUM:
        *a = c->momentum * *a + g;
        *w -= lr * (c->nesterov ? g + c->momentum * *a : *a);
        break;
    case DCPS_OPT_ADAM:
    case DCPS_OPT_ADAMW: {
        *a = c->beta1 * *a + (1 - c->beta1) * g;
        *b = c->beta2 * *b + (1 - c->beta2) * g * g;
        const double bc1 = 1 - pow(c->beta1, (double)t), bc2 = 1 - pow(c->beta2, (double)t);
        *w -= lr / bc1 * *a / (sqrt(*b) / sqrt(bc2) + c->eps);
        break;
    }
    case DCPS_OPT_ADAGRAD:
        *a += g * g;
        *w -= lr * g / (sqrt(*a) + c->eps);
        break;
    default: ck_abort_msg("no such rule %d", c->kind);
    }
}

/* Float against the double reference: each step rounds a handful of float
 * operations (a relative 2^-24 each); over 20 steps at lr 0.1 they add up to
 * below 1e-6 of the values' scale (about 1; measured: under 3e-7), so 1e-5
 * is float rounding with room, and far below what a wrong term would give
 * (a term missing or misplaced moves values by 1e-3 or more). */
#define REF_TOL 1e-5

static void assert_near(const char *what, const char *rule, int step, size_t i, float got,
                        double want)
{
    ck_assert_msg(fabs((double)got - want) <= REF_TOL * (1 + fabs(want)),
                  "%s, step %d: %s[%zu] is %.9g, the reference %.9g", rule, step, what, i,
                  (double)got, want);
}

/* Lazy sparse pushes (_i even) and dense pushes (_i odd) of each rule, 20
 * steps from a fresh state, against ref_step in double. Lazy: the rule runs at
 * the pushed entries only, with the shard's step t; every other parameter and
 * its state keep their bits. */
START_TEST(rules_lazy_and_dense_follow_torch_optims_formulas_in_double)
{
    enum { N = 64, BASE = 1000 };
    const rule_case_t *c = &rule_cases[_i / 2];
    const bool lazy = _i % 2 == 0;
    float w[N], a[N] = {0}, b[N] = {0}, out[N], g[N], v[N];
    double wd_[N], ad[N] = {0}, bd[N] = {0};
    uint32_t idx[N];
    const int states = dcps_rule_states(c->kind);
    float *const st[2] = {states > 0 ? a : NULL, states > 1 ? b : NULL};
    dcps_rule_t r = rule_of(c);
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 27 + (uint64_t)_i);
    for (int i = 0; i < N; i++)
        wd_[i] = w[i] = dcps_rng_normal(&rng);
    double worst = 0;
    for (int t = 1; t <= 20; t++) {
        float w_was[N], a_was[N], b_was[N];
        memcpy(w_was, w, sizeof w), memcpy(a_was, a, sizeof a), memcpy(b_was, b, sizeof b);
        dcps_rule_at(&r, 0.1, (uint64_t)t);
        size_t k = 0;
        for (uint32_t i = 0; i < N; i++) {
            /* lazy: about a third of the entries, every one at step 7 */
            g[i] = 0;
            if (!lazy || t == 7 || dcps_rng_below(&rng, 3) == 0) {
                g[i] = dcps_rng_normal(&rng);
                idx[k] = BASE + i, v[k] = g[i], k++;
            }
        }
        if (lazy) {
            ck_assert_uint_eq(dcps_rule_lazy_check(&r, w, st, BASE, idx, v, k), k);
            dcps_rule_lazy(&r, w, st, BASE, idx, v, k);
        } else {
            ck_assert_uint_eq(dcps_rule_dense_to(&r, out, w, st, g, N), N);
            dcps_rule_dense_state(&r, st, w, g, N);
            memcpy(w, out, sizeof w);
        }
        for (size_t j = 0; j < k; j++)
            ref_step(c, 0.1, (uint64_t)t, &wd_[idx[j] - BASE], &ad[idx[j] - BASE],
                     &bd[idx[j] - BASE], v[j]);
        size_t j = 0;
        for (size_t i = 0; i < N; i++) {
            if (j < k && idx[j] - BASE == i) {
                j++;
                assert_near("w", c->name, t, i, w[i], wd_[i]);
                assert_near("state 0", c->name, t, i, a[i], ad[i]);
                assert_near("state 1", c->name, t, i, b[i], bd[i]);
                worst = fmax(worst, fabs(w[i] - wd_[i]) / (1 + fabs(wd_[i])));
            } else { /* not pushed (lazy): the same bits */
                ck_assert_msg(w[i] == w_was[i] && a[i] == a_was[i] && b[i] == b_was[i] &&
                                  signbit(w[i]) == signbit(w_was[i]),
                              "%s, step %d: entry %zu was not pushed but changed", c->name, t, i);
            }
        }
    }
    printf("%s %s: largest difference from the double reference %.3g (bound %g)\n", c->name,
           lazy ? "lazy" : "dense", worst, REF_TOL);
}
END_TEST

/* Non-lazy sparse pushes are the dense rule on a gradient that is zero off
 * the pushed entries: the same bits, parameters and state, step after step;
 * and a parameter not pushed moves where the rule's state or weight decay
 * moves it (sgd and adagrad without weight decay leave it as it is). */
START_TEST(non_lazy_sparse_rules_equal_the_dense_rule_on_the_densified_gradient)
{
    enum { N = 301, BASE = 4000000000u };
    const rule_case_t *c = &rule_cases[_i];
    static float w0[N], s0[N], w1[N], w2[N], s1[2][N], s2[2][N], out1[N], out2[N], g[N], v[N];
    static uint32_t idx[N];
    static bool pushed[N];
    memset(s1, 0, sizeof s1), memset(s2, 0, sizeof s2), memset(pushed, 0, sizeof pushed);
    const int states = dcps_rule_states(c->kind);
    float *const st1[2] = {states > 0 ? s1[0] : NULL, states > 1 ? s1[1] : NULL};
    float *const st2[2] = {states > 0 ? s2[0] : NULL, states > 1 ? s2[1] : NULL};
    dcps_rule_t r = rule_of(c);
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 99 + (uint64_t)_i);
    for (int i = 0; i < N; i++)
        w1[i] = w2[i] = dcps_rng_normal(&rng);
    w1[17] = w2[17] = -0.0f; /* never pushed: weight decay leaves −0 as it is */
    for (int t = 1; t <= 30; t++) {
        dcps_rule_at(&r, 0.05, (uint64_t)t);
        memcpy(w0, w1, sizeof w0), memcpy(s0, s1[0], sizeof s0); /* before the step */
        memset(pushed, 0, sizeof pushed);
        size_t k = 0;
        for (uint32_t i = 0; i < N; i++) {
            g[i] = 0;
            /* the first and last entries every time, one in 8 of the rest;
             * a pushed −0 is a −0 in the dense gradient too */
            if (i == 0 || i == N - 1 || (i != 17 && dcps_rng_below(&rng, 8) == 0)) {
                g[i] = t % 5 == 0 && i == 0 ? -0.0f : dcps_rng_normal(&rng);
                idx[k] = BASE + i, v[k] = g[i], k++;
                pushed[i] = true;
            }
        }
        ck_assert_uint_eq(dcps_rule_sparse_to(&r, out1, w1, st1, N, BASE, idx, v, k), N);
        dcps_rule_sparse_state(&r, st1, w1, N, BASE, idx, v, k);
        ck_assert_uint_eq(dcps_rule_dense_to(&r, out2, w2, st2, g, N), N);
        dcps_rule_dense_state(&r, st2, w2, g, N);
        memcpy(w1, out1, sizeof w1), memcpy(w2, out2, sizeof w2);
        ck_assert_msg(memcmp(w1, w2, sizeof w1) == 0, "%s, step %d: parameters differ", c->name,
                      t);
        ck_assert_msg(memcmp(s1, s2, sizeof s1) == 0, "%s, step %d: state differs", c->name, t);
    }
    /* The last step's entries not pushed: moved where the rule's state or
     * weight decay moves them, kept their bits otherwise. */
    const bool decays = c->kind == DCPS_OPT_MOMENTUM || c->kind == DCPS_OPT_ADAM ||
                        c->kind == DCPS_OPT_ADAMW;
    int still = 0, moved = 0;
    for (int i = 0; i < N; i++)
        if (!pushed[i]) {
            const bool moves = (c->wd != 0 && w0[i] != 0) || (decays && s0[i] != 0);
            ck_assert_msg((w1[i] != w0[i]) == moves, "%s: entry %d, not pushed, is %g (was %g)",
                          c->name, i, (double)w1[i], (double)w0[i]);
            still += !moves, moved += moves;
        }
    ck_assert_int_gt(decays || c->wd != 0 ? moved : still, 100);
}
END_TEST

/* Each generic rule's checks name the first entry whose new parameter or new
 * state would not be finite, and write no state: adam's v and adagrad's sum
 * overflow while the parameter stays finite (the step divides by √Inf);
 * nesterov momentum and sgd with weight decay overflow the parameter. Dense
 * and non-lazy sparse report the local position, lazy the pushed entry. */
START_TEST(rule_checks_name_the_first_entry_whose_parameter_or_state_would_not_be_finite)
{
    static const struct {
        rule_case_t c;
        float big;       /* the gradient at the bad entries */
        bool w_finite;   /* the parameter stays finite there: only the state overflows */
    } cases[] = {
        {{"adam", DCPS_OPT_ADAM, 0, false, 0.9, 0.999, 1e-8, 0}, 1e21f, true},
        {{"adamw", DCPS_OPT_ADAMW, 0, false, 0.9, 0.999, 1e-8, 0.01}, -1e21f, true},
        {{"adagrad", DCPS_OPT_ADAGRAD, 0, false, 0, 0, 1e-10, 0}, 2e19f, true},
        {{"nesterov", DCPS_OPT_MOMENTUM, 0.9, true, 0, 0, 0, 0.01}, -FLT_MAX, false},
        {{"sgd weight_decay", DCPS_OPT_SGD, 0, false, 0, 0, 0, 0.01}, -FLT_MAX, false},
    };
    const rule_case_t *c = &cases[_i].c;
    enum { N = 8, BASE = 100 };
    float w[N] = {1, -2, 3, -4, 5, -6, 7, -8}, a[N], b[N], out[N], g[N] = {1, 1, 1, 1, 1, 1, 1, 1};
    for (int i = 0; i < N; i++)
        a[i] = 0.5f, b[i] = 0.25f;
    float a_was[N], b_was[N], w_was[N];
    memcpy(a_was, a, sizeof a), memcpy(b_was, b, sizeof b), memcpy(w_was, w, sizeof w);
    const int states = dcps_rule_states(c->kind);
    float *const st[2] = {states > 0 ? a : NULL, states > 1 ? b : NULL};
    dcps_rule_t r = rule_of(c);
    dcps_rule_at(&r, 10, 3);
    g[6] = g[3] = cases[_i].big;
    ck_assert_uint_eq(dcps_rule_dense_to(&r, out, w, st, g, N), 3);
    ck_assert_msg(isfinite(out[3]) == cases[_i].w_finite, "%s: out[3] = %g", c->name,
                  (double)out[3]);
    const uint32_t idx[3] = {BASE + 1, BASE + 3, BASE + 6};
    const float v[3] = {1, cases[_i].big, cases[_i].big};
    ck_assert_uint_eq(dcps_rule_sparse_to(&r, out, w, st, N, BASE, idx, v, 3), 3);
    ck_assert_uint_eq(dcps_rule_lazy_check(&r, w, st, BASE, idx, v, 3), 1);
    ck_assert_mem_eq(a, a_was, sizeof a);
    ck_assert_mem_eq(b, b_was, sizeof b);
    ck_assert_mem_eq(w, w_was, sizeof w);
    /* without the bad entries, everything is finite */
    ck_assert_uint_eq(dcps_rule_lazy_check(&r, w, st, BASE, idx, v, 1), 1);
    g[6] = g[3] = 1;
    ck_assert_uint_eq(dcps_rule_dense_to(&r, out, w, st, g, N), N);
}
END_TEST

/* Delay compensation as a transform: the corrected gradient handed to the
 * generic sgd rule gives DC-ASGD's in-place rule (0.1's kind = dcasgd) bit for
 * bit, dense and sparse, constant and adaptive λ, parameters and mean square. */
START_TEST(delay_transform_then_sgd_is_dcasgd_bit_for_bit)
{
    enum { N = 97, K = 20, BASE = 500 };
    const dcps_dcasgd_t p = {0.1f, _i % 2 ? 2.0f : 0.3f, _i % 2 == 1, 0.9f, 1e-7f};
    const bool sparse = _i >= 2;
    static float w1[N], w2[N], ms1[N], ms2[N], bak[N], g[N], gc[N], out[N], v[K];
    static uint32_t idx[K];
    float *const none[2] = {NULL, NULL};
    dcps_rule_t sgd = dcps_rule_new(DCPS_OPT_SGD, 0, false, 0.9, 0.999, 1e-8, 0);
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 1000 + (uint64_t)_i);
    for (int i = 0; i < N; i++) {
        w1[i] = w2[i] = dcps_rng_normal(&rng);
        bak[i] = w1[i] + 0.1f * dcps_rng_normal(&rng);
        ms1[i] = ms2[i] = 0;
    }
    for (int t = 1; t <= 25; t++) {
        dcps_rule_at(&sgd, p.lr, (uint64_t)t);
        for (int i = 0; i < N; i++)
            g[i] = dcps_rng_normal(&rng);
        for (int j = 0; j < K; j++) {
            idx[j] = (uint32_t)(BASE + j * 4 + (int)dcps_rng_below(&rng, 4));
            v[j] = dcps_rng_normal(&rng);
        }
        if (sparse) {
            ck_assert_uint_eq(dcps_delay_sparse_to(gc, w1, bak, ms1, BASE, idx, v, K, &p), K);
            ck_assert_uint_eq(dcps_rule_lazy_check(&sgd, w1, none, BASE, idx, gc, K), K);
            dcps_rule_lazy(&sgd, w1, none, BASE, idx, gc, K);
            dcps_dcasgd_sparse_state(ms1, BASE, idx, v, K, &p);
            dcps_dcasgd_sparse(w2, bak, ms2, BASE, idx, v, K, &p);
        } else {
            ck_assert_uint_eq(dcps_delay_dense_to(gc, w1, bak, ms1, g, N, &p), N);
            ck_assert_uint_eq(dcps_rule_dense_to(&sgd, out, w1, none, gc, N), N);
            dcps_dcasgd_dense_state(ms1, g, N, &p);
            memcpy(w1, out, sizeof w1);
            dcps_dcasgd_dense(w2, bak, ms2, g, N, &p);
        }
        ck_assert_msg(memcmp(w1, w2, sizeof w1) == 0, "step %d: parameters differ", t);
        ck_assert_msg(memcmp(ms1, ms2, sizeof ms1) == 0, "step %d: mean square differs", t);
    }
    ck_assert(p.adaptive ? ms1[idx[0] - BASE] > 0 : ms1[0] == 0);
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

    tc = tcase_create("every rule");
    tcase_add_loop_test(tc, rules_lazy_and_dense_follow_torch_optims_formulas_in_double, 0,
                        2 * RULE_CASES);
    tcase_add_loop_test(tc, non_lazy_sparse_rules_equal_the_dense_rule_on_the_densified_gradient,
                        0, RULE_CASES);
    tcase_add_loop_test(tc,
                        rule_checks_name_the_first_entry_whose_parameter_or_state_would_not_be_finite,
                        0, 5);
    tcase_add_loop_test(tc, delay_transform_then_sgd_is_dcasgd_bit_for_bit, 0, 4);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return dcps_test_run(optimizer_suite());
}
