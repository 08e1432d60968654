/* Tests for kernels/residual on the CPU: r ← r + g is one float32 addition per
 * element (bit-exact against a reference), touches exactly n elements, and the
 * error-feedback bookkeeping built on it conserves what was pushed in: with dense
 * "send everything, then clear" what was sent equals the inputs exactly. */
#include "kernels/residual.h"

#include <check.h>

#include "tests/check_run.h"
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"

/* Random floats over a wide range of magnitudes, both signs. */
static void fill(dcps_rng_t *rng, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = ldexpf(dcps_rng_normal(rng), (int)dcps_rng_below(rng, 41) - 20);
}

static float *alloc_floats(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* The reference: one float add per element, through a volatile so nothing is
 * fused or kept in wider precision. */
static void reference(float *r, const float *g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        volatile float s = r[i] + g[i];
        r[i] = s;
    }
}

static void check_random(size_t n, uint64_t seed)
{
    dcps_rng_t rng;
    dcps_rng_seed(&rng, seed);
    float *r = alloc_floats(n), *g = alloc_floats(n), *want = alloc_floats(n),
          *g_copy = alloc_floats(n);
    fill(&rng, r, n);
    fill(&rng, g, n);
    memcpy(want, r, n * sizeof *r);
    memcpy(g_copy, g, n * sizeof *g);
    reference(want, g, n);
    dcps_residual_add_cpu(r, g, n);
    ck_assert_msg(memcmp(r, want, n * sizeof *r) == 0, "n=%zu: result differs from reference", n);
    ck_assert_msg(memcmp(g, g_copy, n * sizeof *g) == 0, "n=%zu: g was modified", n);
    free(r);
    free(g);
    free(want);
    free(g_copy);
}

START_TEST(add_matches_reference_on_random_data)
{
    check_random(1000, 1);
    check_random(1000003, 2);
}
END_TEST

START_TEST(add_of_one_element_touches_only_it)
{
    float r[3] = {1.5f, 2.0f, 7.0f};
    const float g[3] = {0.25f, 100.0f, 100.0f};
    dcps_residual_add_cpu(r, g, 1);
    ck_assert(r[0] == 1.75f);
    ck_assert(r[1] == 2.0f);
    ck_assert(r[2] == 7.0f);
}
END_TEST

START_TEST(add_of_zero_elements_is_a_no_op)
{
    float r[2] = {1.0f, -2.0f};
    const float g[2] = {5.0f, 5.0f};
    dcps_residual_add_cpu(r, g, 0);
    ck_assert(r[0] == 1.0f);
    ck_assert(r[1] == -2.0f);
    dcps_residual_add_cpu(NULL, NULL, 0);
}
END_TEST

START_TEST(add_stops_at_n)
{
    float r[1003], g[1003];
    for (int i = 0; i < 1003; i++) {
        r[i] = (float)i;
        g[i] = 1.0f;
    }
    dcps_residual_add_cpu(r, g, 1000);
    for (int i = 0; i < 1000; i++)
        ck_assert(r[i] == (float)i + 1.0f);
    for (int i = 1000; i < 1003; i++)
        ck_assert(r[i] == (float)i);
}
END_TEST

START_TEST(add_rounds_like_one_float32_addition)
{
    /* 1 + 2^-24 is a tie and rounds to even (1); 1 + 3*2^-24 rounds up to 1 + 2^-22;
     * FLT_MAX + FLT_MAX overflows to +Inf; signed zeros follow IEEE 754. */
    float r[6] = {1.0f, 1.0f, FLT_MAX, -0.0f, -0.0f, 0x1p-149f};
    const float g[6] = {0x1p-24f, 3 * 0x1p-24f, FLT_MAX, -0.0f, 0.0f, 0x1p-149f};
    dcps_residual_add_cpu(r, g, 6);
    ck_assert(r[0] == 1.0f);
    ck_assert(r[1] == 1.0f + 0x1p-22f);
    ck_assert(isinf(r[2]) && r[2] > 0);
    ck_assert(r[3] == 0.0f && signbit(r[3]));
    ck_assert(r[4] == 0.0f && !signbit(r[4]));
    ck_assert(r[5] == 0x1p-148f); /* denormals are not flushed */
}
END_TEST

START_TEST(dense_send_then_clear_conserves_mass_exactly)
{
    /* Each step: r ← r + g; send all of r; r ← 0. Accumulating what was sent and
     * what came in, in the same order, gives the same sums bit for bit. */
    enum { N = 1000, STEPS = 200 };
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 3);
    float *r = calloc(N, sizeof *r), *g = alloc_floats(N);
    float *in_sum = calloc(N, sizeof *in_sum), *sent_sum = calloc(N, sizeof *sent_sum);
    ck_assert(r && in_sum && sent_sum);
    for (int t = 0; t < STEPS; t++) {
        fill(&rng, g, N);
        dcps_residual_add_cpu(r, g, N);
        for (int i = 0; i < N; i++) {
            in_sum[i] += g[i];
            sent_sum[i] += r[i];
            r[i] = 0.0f;
        }
    }
    ck_assert_int_eq(memcmp(in_sum, sent_sum, N * sizeof(float)), 0);
    free(r);
    free(g);
    free(in_sum);
    free(sent_sum);
}
END_TEST

START_TEST(partial_sends_keep_the_unsent_part_in_the_residual)
{
    /* Each step sends only some entries (those with |r| >= 40) and clears them.
     * With small integers every sum is exact, so at every step
     * sent + residual == everything that came in. */
    enum { N = 500, STEPS = 300 };
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 4);
    float r[N], g[N], in_sum[N], sent_sum[N];
    memset(r, 0, sizeof r);
    memset(in_sum, 0, sizeof in_sum);
    memset(sent_sum, 0, sizeof sent_sum);
    size_t sent = 0, kept = 0;
    for (int t = 0; t < STEPS; t++) {
        for (int i = 0; i < N; i++) {
            g[i] = (float)((int)dcps_rng_below(&rng, 41) - 20);
            in_sum[i] += g[i];
        }
        dcps_residual_add_cpu(r, g, N);
        for (int i = 0; i < N; i++) {
            if (fabsf(r[i]) >= 40.0f) {
                sent_sum[i] += r[i];
                r[i] = 0.0f;
                sent++;
            } else {
                kept++;
            }
            ck_assert_msg(sent_sum[i] + r[i] == in_sum[i], "step %d entry %d: %g + %g != %g", t, i,
                          (double)sent_sum[i], (double)r[i], (double)in_sum[i]);
        }
    }
    /* Both branches ran many times. */
    ck_assert_uint_gt(sent, 1000);
    ck_assert_uint_gt(kept, 1000);
}
END_TEST

static Suite *residual_suite(void)
{
    Suite *s = suite_create("residual");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, add_matches_reference_on_random_data);
    tcase_add_test(tc, add_of_one_element_touches_only_it);
    tcase_add_test(tc, add_of_zero_elements_is_a_no_op);
    tcase_add_test(tc, add_stops_at_n);
    tcase_add_test(tc, add_rounds_like_one_float32_addition);
    tcase_add_test(tc, dense_send_then_clear_conserves_mass_exactly);
    tcase_add_test(tc, partial_sends_keep_the_unsent_part_in_the_residual);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return dcps_test_run(residual_suite());
}
