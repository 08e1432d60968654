/* Tests for kernels/residual on the GPU: dcps_residual_add_gpu gives the same
 * bits as dcps_residual_add_cpu for sizes around the block size, sizes that need
 * the grid-stride loop and special values; it writes nothing past n and leaves g
 * alone; n = 0 is a no-op. Without a GPU the program exits 77 (SKIP). */
#include "kernels/residual.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/rng.h"
#include "kernels/gpu.h"
#include "tests/gpu_probe.h"

/* Elements after n on the device that must stay untouched. */
#define GUARD 67

#ifndef DCPS_EMU
static const size_t sizes[] = {1, 255, 256, 257, 1u << 20, 10000019,
                               /* more than 65535 blocks of 256: the grid-stride loop */
                               65535u * 256u + 1000u};
#else /* the emulator: fibers are slow, but the grid-stride loop still runs */
static const size_t sizes[] = {1, 255, 256, 257, 100003};
#endif
#define N_SIZES (sizeof sizes / sizeof sizes[0])

static void fill(dcps_rng_t *rng, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = ldexpf(dcps_rng_normal(rng), (int)dcps_rng_below(rng, 61) - 30);
}

static float *alloc_floats(size_t n)
{
    float *p = malloc(n * sizeof *p);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* Runs r ← r + g for n elements of r and g (host arrays holding n + GUARD
 * values) on the GPU and on the CPU, and compares everything bit for bit. */
static void compare(float *r, const float *g, size_t n)
{
    size_t total = n + GUARD, bytes = total * sizeof(float);
    float *got_r = alloc_floats(total), *got_g = alloc_floats(total);
    float *d_r = NULL, *d_g = NULL;
    ck_assert_int_eq(dcps_gpu_alloc((void **)&d_r, bytes), 0);
    ck_assert_int_eq(dcps_gpu_alloc((void **)&d_g, bytes), 0);
    ck_assert_int_eq(dcps_gpu_to_device(d_r, r, bytes, NULL), 0);
    ck_assert_int_eq(dcps_gpu_to_device(d_g, g, bytes, NULL), 0);
    ck_assert_int_eq(dcps_residual_add_gpu(d_r, d_g, n, NULL), 0);
    ck_assert_int_eq(dcps_gpu_to_host(got_r, d_r, bytes, NULL), 0);
    ck_assert_int_eq(dcps_gpu_to_host(got_g, d_g, bytes, NULL), 0);
    ck_assert_int_eq(dcps_gpu_sync(NULL), 0);

    dcps_residual_add_cpu(r, g, n);
    size_t first_bad = total;
    for (size_t i = 0; i < total && first_bad == total; i++)
        if (memcmp(&got_r[i], &r[i], sizeof(float)) != 0)
            first_bad = i;
    ck_assert_msg(first_bad == total, "n=%zu: element %zu is %a on the GPU, %a on the CPU%s", n,
                  first_bad, first_bad < total ? (double)got_r[first_bad] : 0.0,
                  first_bad < total ? (double)r[first_bad] : 0.0,
                  first_bad >= n ? " (past n)" : "");
    ck_assert_msg(memcmp(got_g, g, bytes) == 0, "n=%zu: the kernel changed g", n);
    dcps_gpu_free(d_r);
    dcps_gpu_free(d_g);
    free(got_r);
    free(got_g);
}

START_TEST(gpu_add_is_bit_identical_to_cpu_on_random_data)
{
    size_t n = sizes[_i];
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 100 + (uint64_t)_i);
    float *r = alloc_floats(n + GUARD), *g = alloc_floats(n + GUARD);
    fill(&rng, r, n + GUARD);
    fill(&rng, g, n + GUARD);
    compare(r, g, n);
    free(r);
    free(g);
}
END_TEST

START_TEST(gpu_add_is_bit_identical_on_special_values)
{
    /* Signed zeros, denormals, overflow to infinity, infinities, rounding ties. */
    static const float rv[] = {0.0f,    -0.0f,     -0.0f,    0x1p-149f, 0x1p-149f, -0x1p-126f,
                               FLT_MAX, -FLT_MAX,  INFINITY, -INFINITY, 1.0f,      1.0f,
                               3.0f,    0x1p-126f, 1e38f,    -1e-38f};
    static const float gv[] = {-0.0f,   -0.0f,      0.0f,  0x1p-149f, -0x1p-149f, 0x1p-127f,
                               FLT_MAX, -FLT_MAX,   1.0f,  -5.0f,     0x1p-24f,   3 * 0x1p-24f,
                               -3.0f,   -0x1p-127f, 1e38f, 1e-38f};
    size_t n = sizeof rv / sizeof rv[0];
    float r[sizeof rv / sizeof rv[0] + GUARD], g[sizeof rv / sizeof rv[0] + GUARD];
    memcpy(r, rv, sizeof rv);
    memcpy(g, gv, sizeof gv);
    for (size_t i = n; i < n + GUARD; i++)
        r[i] = g[i] = (float)i;
    compare(r, g, n);
}
END_TEST

START_TEST(gpu_add_of_zero_elements_returns_0_and_changes_nothing)
{
    float host[4] = {1.0f, 2.0f, 3.0f, 4.0f}, back[4];
    float *d_r = NULL, *d_g = NULL;
    ck_assert_int_eq(dcps_gpu_alloc((void **)&d_r, sizeof host), 0);
    ck_assert_int_eq(dcps_gpu_alloc((void **)&d_g, sizeof host), 0);
    ck_assert_int_eq(dcps_gpu_to_device(d_r, host, sizeof host, NULL), 0);
    ck_assert_int_eq(dcps_gpu_to_device(d_g, host, sizeof host, NULL), 0);
    ck_assert_int_eq(dcps_residual_add_gpu(d_r, d_g, 0, NULL), 0);
    ck_assert_int_eq(dcps_gpu_to_host(back, d_r, sizeof back, NULL), 0);
    ck_assert_int_eq(dcps_gpu_sync(NULL), 0);
    ck_assert_int_eq(memcmp(back, host, sizeof host), 0);
    /* No memory needed at all. */
    ck_assert_int_eq(dcps_residual_add_gpu(NULL, NULL, 0, NULL), 0);
    ck_assert_int_eq(dcps_gpu_sync(NULL), 0);
    dcps_gpu_free(d_r);
    dcps_gpu_free(d_g);
}
END_TEST

START_TEST(gpu_add_repeated_steps_stay_identical_to_cpu)
{
    /* Error feedback adds into the same residual every step. */
    enum { N = DCPS_TEST_SIZE(100003, 10007), STEPS = DCPS_TEST_SIZE(20, 5) };
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 7);
    float *r = calloc(N, sizeof *r), *g = alloc_floats(N), *got = alloc_floats(N);
    float *d_r = NULL, *d_g = NULL;
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(dcps_gpu_alloc((void **)&d_r, N * sizeof(float)), 0);
    ck_assert_int_eq(dcps_gpu_alloc((void **)&d_g, N * sizeof(float)), 0);
    ck_assert_int_eq(dcps_gpu_to_device(d_r, r, N * sizeof(float), NULL), 0);
    for (int t = 0; t < STEPS; t++) {
        fill(&rng, g, N);
        ck_assert_int_eq(dcps_gpu_to_device(d_g, g, N * sizeof(float), NULL), 0);
        ck_assert_int_eq(dcps_residual_add_gpu(d_r, d_g, N, NULL), 0);
        /* The copy of g must finish before the host overwrites it. */
        ck_assert_int_eq(dcps_gpu_sync(NULL), 0);
        dcps_residual_add_cpu(r, g, N);
    }
    ck_assert_int_eq(dcps_gpu_to_host(got, d_r, N * sizeof(float), NULL), 0);
    ck_assert_int_eq(dcps_gpu_sync(NULL), 0);
    ck_assert_int_eq(memcmp(got, r, N * sizeof(float)), 0);
    dcps_gpu_free(d_r);
    dcps_gpu_free(d_g);
    free(r);
    free(g);
    free(got);
}
END_TEST

static Suite *residual_gpu_suite(void)
{
    Suite *s = suite_create("residual_gpu");
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, gpu_add_is_bit_identical_to_cpu_on_random_data, 0, N_SIZES);
    tcase_add_test(tc, gpu_add_is_bit_identical_on_special_values);
    tcase_add_test(tc, gpu_add_of_zero_elements_returns_0_and_changes_nothing);
    tcase_add_test(tc, gpu_add_repeated_steps_stay_identical_to_cpu);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    DCPS_TEST_EMU_SWEEP();
    return dcps_test_run_gpu(residual_gpu_suite());
}
