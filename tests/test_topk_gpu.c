/* Tests for kernels/topk on the GPU: dcps_topk_gpu and dcps_topk_ef_gpu give the
 * same bits as their CPU counterparts (indices, values, and the residual after
 * error feedback) on random data of many sizes, including more than one chunk per
 * 65535 blocks, on ties, equal values, signed zeros and denormals, and over
 * repeated error-feedback steps; bad sizes and non-finite input give the CPU's
 * codes without writing past the outputs; scatter and gather match the CPU; the
 * read pass bench/topk measures against sums every entry once.
 * Without a GPU the program exits 77 (SKIP). */
#include "kernels/topk.h"

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

/* Output entries after k that must stay untouched. */
#define GUARD 17

static void *alloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    ck_assert_int_eq(dcps_gpu_alloc(&p, bytes), 0);
    return p;
}

static float from_bits(uint32_t u)
{
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* Values from every exponent of a normal float, both signs, cheap to draw for
 * hundreds of millions of entries; with few_keys, one of 7 magnitudes. */
static void fill(dcps_rng_t *rng, float *x, size_t n, int few_keys)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t u = dcps_rng_next(rng);
        uint32_t bits = few_keys ? 0x3f800000u + (uint32_t)(u % 7) * 0x00100000u
                                 : (uint32_t)(0x01000000u + (u >> 32) % 0x7d000000u);
        x[i] = from_bits(bits | (uint32_t)(u & 1) << 31);
    }
}

/* Runs the selection of k over x[0..n) on the CPU and on the GPU, both plain and
 * with error feedback (adding g when given, else NULL), and compares every output
 * bit and the residuals; entries past k must stay untouched on the GPU. */
static void compare(const float *x, const float *g, size_t n, size_t k)
{
    size_t out = k + GUARD;
    uint32_t *idx = alloc(out * sizeof *idx), *got_idx = alloc(out * sizeof *idx);
    float *val = alloc(out * sizeof *val), *got_val = alloc(out * sizeof *val);
    float *r = alloc(n * sizeof *r), *got_r = alloc(n * sizeof *r);
    float *d_x = dev_alloc(n * sizeof *d_x), *d_g = g ? dev_alloc(n * sizeof *d_g) : NULL;
    uint32_t *d_idx = dev_alloc(out * sizeof *d_idx);
    float *d_val = dev_alloc(out * sizeof *d_val);
    int err = 1;
    dcps_topk_ws_t *ws = dcps_topk_ws_new(n, &err);
    dcps_topk_gpu_ws_t *gws = dcps_topk_gpu_ws_new(n, &err);
    ck_assert_ptr_nonnull(ws);
    ck_assert_ptr_nonnull(gws);

    for (int ef = 0; ef < 2; ef++) {
        memset(idx, 0xa5, out * sizeof *idx);
        memset(val, 0xa5, out * sizeof *val);
        ck_assert_int_eq(dcps_gpu_to_device(d_idx, idx, out * sizeof *idx, NULL), 0);
        ck_assert_int_eq(dcps_gpu_to_device(d_val, val, out * sizeof *val, NULL), 0);
        ck_assert_int_eq(dcps_gpu_to_device(d_x, x, n * sizeof *x, NULL), 0);
        if (g)
            ck_assert_int_eq(dcps_gpu_to_device(d_g, g, n * sizeof *g, NULL), 0);
        memcpy(r, x, n * sizeof *r);
        if (ef) {
            ck_assert_int_eq(dcps_topk_ef_gpu(d_x, d_g, n, k, d_idx, d_val, gws, NULL), 0);
            ck_assert_int_eq(dcps_topk_ef_cpu(r, g, n, k, idx, val, ws), 0);
        } else {
            ck_assert_int_eq(dcps_topk_gpu(d_x, n, k, d_idx, d_val, gws, NULL), 0);
            ck_assert_int_eq(dcps_topk_cpu(x, n, k, idx, val, ws), 0);
        }
        ck_assert_int_eq(dcps_gpu_to_host(got_idx, d_idx, out * sizeof *idx, NULL), 0);
        ck_assert_int_eq(dcps_gpu_to_host(got_val, d_val, out * sizeof *val, NULL), 0);
        ck_assert_int_eq(dcps_gpu_to_host(got_r, d_x, n * sizeof *r, NULL), 0);
        ck_assert_int_eq(dcps_gpu_sync(NULL), 0);
        ck_assert_msg(memcmp(got_idx, idx, out * sizeof *idx) == 0,
                      "ef=%d n=%zu k=%zu: indices differ", ef, n, k);
        ck_assert_msg(memcmp(got_val, val, out * sizeof *val) == 0,
                      "ef=%d n=%zu k=%zu: values differ", ef, n, k);
        ck_assert_msg(memcmp(got_r, r, n * sizeof *r) == 0, "ef=%d n=%zu k=%zu: residual differs",
                      ef, n, k);
    }
    dcps_topk_ws_destroy(&ws);
    dcps_topk_gpu_ws_destroy(&gws);
    ck_assert_ptr_null(gws);
    dcps_gpu_free(d_x);
    dcps_gpu_free(d_g);
    dcps_gpu_free(d_idx);
    dcps_gpu_free(d_val);
    free(idx);
    free(got_idx);
    free(val);
    free(got_val);
    free(r);
    free(got_r);
}

/* compare for k in {1, n/1000 + 1, n/100 + 1, n/2, n}, with and without g. */
static void compare_ks(const float *x, const float *g, size_t n)
{
    const size_t ks[] = {1, n / 1000 + 1, n / 100 + 1, n / 2, n};
    for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++)
        if (ks[j] >= 1 && ks[j] <= n && (j == 0 || ks[j] != ks[j - 1])) {
            compare(x, NULL, n, ks[j]);
            compare(x, g, n, ks[j]);
        }
}

#ifndef DCPS_EMU
static const size_t sizes[] = {1,         2,    63,   255,          256,
                               257,       4095, 4097, 1000003,      (1u << 24) + 3,
                               /* more than 65535 chunks of 4096 entries */
                               65536u * 4096u + 5u};
#else /* the emulator: up to a few chunks of 4096, grids of many blocks */
static const size_t sizes[] = {1, 2, 63, 255, 256, 257, 4095, 4097, 30011};
#endif
#define N_SIZES (sizeof sizes / sizeof sizes[0])

START_TEST(gpu_topk_is_bit_identical_to_cpu_on_random_data)
{
    size_t n = sizes[_i];
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 200 + (uint64_t)_i);
    float *x = alloc(n * sizeof *x), *g = alloc(n * sizeof *g);
    fill(&rng, x, n, 0);
    fill(&rng, g, n, 0);
    if (n > (1u << 24) + 3) { /* the largest: the typical density only */
        compare(x, g, n, n / 100 + 1);
        compare(x, NULL, n, 7);
    } else {
        compare_ks(x, g, n);
    }
    free(x);
    free(g);
}
END_TEST

START_TEST(gpu_topk_is_bit_identical_on_ties_zeros_and_denormals)
{
    enum { N = DCPS_TEST_SIZE(300007, 12007) };
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 300);
    float *x = alloc(N * sizeof *x), *g = alloc(N * sizeof *g);
    fill(&rng, g, N, 0);

    fill(&rng, x, N, 1); /* 7 magnitudes: ties everywhere */
    compare_ks(x, g, N);
    for (size_t i = 0; i < N; i++) /* one magnitude */
        x[i] = i % 3 ? 2.5f : -2.5f;
    compare_ks(x, NULL, N);
    for (size_t i = 0; i < N; i++) /* zeros of both signs, a few nonzeros */
        x[i] = i % 1000 == 7 ? (float)i : i % 2 ? -0.0f : 0.0f;
    compare_ks(x, NULL, N);
    for (size_t i = 0; i < N; i++) /* denormals, and some normals */
        x[i] = from_bits((uint32_t)(dcps_rng_next(&rng) % (i % 5 ? 0x00800000u : 0x7f000000u)) |
                         (uint32_t)(i & 1) << 31);
    x[11] = FLT_MAX;
    x[12] = -FLT_MIN;
    compare_ks(x, NULL, N);
    free(x);
    free(g);
}
END_TEST

START_TEST(gpu_ef_stays_identical_to_cpu_over_steps)
{
    enum { N = DCPS_TEST_SIZE(100003, 10007), K = DCPS_TEST_SIZE(1001, 101),
           STEPS = DCPS_TEST_SIZE(20, 5) };
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 400);
    float *r = calloc(N, sizeof *r), *g = alloc(N * sizeof *g), *got = alloc(N * sizeof *got);
    float val[K], got_val[K];
    uint32_t idx[K], got_idx[K];
    float *d_r = dev_alloc(N * sizeof *d_r), *d_g = dev_alloc(N * sizeof *d_g);
    float *d_val = dev_alloc(sizeof val);
    uint32_t *d_idx = dev_alloc(sizeof idx);
    int err;
    dcps_topk_ws_t *ws = dcps_topk_ws_new(N, &err);
    dcps_topk_gpu_ws_t *gws = dcps_topk_gpu_ws_new(N, &err);
    ck_assert(r && ws && gws);
    ck_assert_int_eq(dcps_gpu_to_device(d_r, r, N * sizeof *r, NULL), 0);
    for (int t = 0; t < STEPS; t++) {
        for (size_t i = 0; i < N; i++)
            g[i] = ldexpf(dcps_rng_normal(&rng), (int)dcps_rng_below(&rng, 21) - 10);
        ck_assert_int_eq(dcps_gpu_to_device(d_g, g, N * sizeof *g, NULL), 0);
        ck_assert_int_eq(dcps_topk_ef_gpu(d_r, d_g, N, K, d_idx, d_val, gws, NULL), 0);
        ck_assert_int_eq(dcps_topk_ef_cpu(r, g, N, K, idx, val, ws), 0);
        ck_assert_int_eq(dcps_gpu_to_host(got_idx, d_idx, sizeof idx, NULL), 0);
        ck_assert_int_eq(dcps_gpu_to_host(got_val, d_val, sizeof val, NULL), 0);
        ck_assert_int_eq(dcps_gpu_sync(NULL), 0);
        ck_assert_msg(memcmp(got_idx, idx, sizeof idx) == 0, "step %d: indices differ", t);
        ck_assert_msg(memcmp(got_val, val, sizeof val) == 0, "step %d: values differ", t);
    }
    ck_assert_int_eq(dcps_gpu_to_host(got, d_r, N * sizeof *r, NULL), 0);
    ck_assert_int_eq(dcps_gpu_sync(NULL), 0);
    ck_assert_int_eq(memcmp(got, r, N * sizeof *r), 0);
    dcps_topk_ws_destroy(&ws);
    dcps_topk_gpu_ws_destroy(&gws);
    dcps_gpu_free(d_r);
    dcps_gpu_free(d_g);
    dcps_gpu_free(d_val);
    dcps_gpu_free(d_idx);
    free(r);
    free(g);
    free(got);
}
END_TEST

START_TEST(gpu_refuses_bad_sizes_and_nonfinite_input_like_cpu)
{
    enum { N = 5000 };
    const float bad[] = {NAN, INFINITY, -INFINITY};
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 500);
    float x[N];
    uint32_t idx[N + GUARD];
    float *d_x = dev_alloc(sizeof x), *d_val = dev_alloc((N + GUARD) * sizeof(float));
    uint32_t *d_idx = dev_alloc(sizeof idx);
    int err;
    dcps_topk_gpu_ws_t *gws = dcps_topk_gpu_ws_new(N, &err);
    ck_assert_ptr_nonnull(gws);
    ck_assert_int_eq(dcps_topk_gpu(d_x, N, 0, d_idx, d_val, gws, NULL), DCPS_E_INVAL);
    ck_assert_int_eq(dcps_topk_gpu(d_x, N, N + 1, d_idx, d_val, gws, NULL), DCPS_E_INVAL);
    ck_assert_int_eq(dcps_topk_gpu(d_x, 0, 1, d_idx, d_val, gws, NULL), DCPS_E_INVAL);
    ck_assert_int_eq(dcps_topk_gpu(d_x, N + 1, 1, d_idx, d_val, gws, NULL), DCPS_E_INVAL);
    ck_assert_int_eq(dcps_topk_ef_gpu(d_x, NULL, N, 0, d_idx, d_val, gws, NULL), DCPS_E_INVAL);
    ck_assert_ptr_null(dcps_topk_gpu_ws_new(0, &err));
    ck_assert_int_eq(err, DCPS_E_INVAL);
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++)
        for (size_t k = 1; k <= N; k += N - 1) {
            fill(&rng, x, N, 0);
            x[(b * 2477) % N] = bad[b];
            memset(idx, 0xa5, sizeof idx);
            ck_assert_int_eq(dcps_gpu_to_device(d_x, x, sizeof x, NULL), 0);
            ck_assert_int_eq(dcps_gpu_to_device(d_idx, idx, sizeof idx, NULL), 0);
            ck_assert_int_eq(dcps_topk_gpu(d_x, N, k, d_idx, d_val, gws, NULL), DCPS_E_NONFINITE);
            ck_assert_int_eq(dcps_topk_ef_gpu(d_x, NULL, N, k, d_idx, d_val, gws, NULL),
                             DCPS_E_NONFINITE);
            ck_assert_int_eq(dcps_gpu_to_host(idx, d_idx, sizeof idx, NULL), 0);
            ck_assert_int_eq(dcps_gpu_sync(NULL), 0);
            size_t j = k; /* one assertion, not one per entry: Check records each */
            while (j < N + GUARD && idx[j] == 0xa5a5a5a5u)
                j++;
            ck_assert_msg(j == N + GUARD, "k=%zu: index %zu written", k, j);
        }
    dcps_topk_gpu_ws_destroy(&gws);
    dcps_gpu_free(d_x);
    dcps_gpu_free(d_val);
    dcps_gpu_free(d_idx);
}
END_TEST

START_TEST(gpu_scatter_add_and_gather_match_cpu)
{
    enum { N = DCPS_TEST_SIZE(1000003, 100003), K = DCPS_TEST_SIZE(10007, 3001) };
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 600);
    float *w = alloc(N * sizeof *w), *got = alloc(N * sizeof *got);
    float *v = alloc(K * sizeof *v), *out = alloc(K * sizeof *out), *got_out = alloc(K * sizeof *out);
    uint32_t *perm = alloc(N * sizeof *perm);
    fill(&rng, w, N, 0);
    for (size_t j = 0; j < K; j++)
        v[j] = dcps_rng_normal(&rng);
    for (uint32_t i = 0; i < N; i++)
        perm[i] = i;
    dcps_rng_shuffle_u32(&rng, perm, N);
    float *d_w = dev_alloc(N * sizeof *w), *d_v = dev_alloc(K * sizeof *v);
    float *d_out = dev_alloc(K * sizeof *out);
    uint32_t *d_idx = dev_alloc(K * sizeof *perm);
    ck_assert_int_eq(dcps_gpu_to_device(d_w, w, N * sizeof *w, NULL), 0);
    ck_assert_int_eq(dcps_gpu_to_device(d_v, v, K * sizeof *v, NULL), 0);
    ck_assert_int_eq(dcps_gpu_to_device(d_idx, perm, K * sizeof *perm, NULL), 0);
    ck_assert_int_eq(dcps_scatter_add_gpu(d_w, d_idx, d_v, K, 0.123f, NULL), 0);
    ck_assert_int_eq(dcps_gather_gpu(d_w, d_idx, K, d_out, NULL), 0);
    ck_assert_int_eq(dcps_scatter_add_gpu(d_w, d_idx, d_v, 0, 1.0f, NULL), 0);
    ck_assert_int_eq(dcps_gather_gpu(d_w, d_idx, 0, d_out, NULL), 0);
    ck_assert_int_eq(dcps_gpu_to_host(got, d_w, N * sizeof *w, NULL), 0);
    ck_assert_int_eq(dcps_gpu_to_host(got_out, d_out, K * sizeof *out, NULL), 0);
    ck_assert_int_eq(dcps_gpu_sync(NULL), 0);
    dcps_scatter_add_cpu(w, perm, v, K, 0.123f);
    dcps_gather_cpu(w, perm, K, out);
    ck_assert_int_eq(memcmp(got, w, N * sizeof *w), 0);
    ck_assert_int_eq(memcmp(got_out, out, K * sizeof *out), 0);
    dcps_gpu_free(d_w);
    dcps_gpu_free(d_v);
    dcps_gpu_free(d_out);
    dcps_gpu_free(d_idx);
    free(w);
    free(got);
    free(v);
    free(out);
    free(got_out);
    free(perm);
}
END_TEST

/* Sizes below and above READ_SUMS grid strides, so that both loops of read_pass
 * run: on 132 SMs (an H100 or H200) a stride is 270,336 entries, and 2000003
 * integers (at most 7 each) still sum below 2^24. Under the emulator 30011 and
 * 100003 are above on 2 SMs, 100003 on 7, neither on 132. */
#ifndef DCPS_EMU
static const size_t read_sizes[] = {1, 2, 255, 257, 4097, 1000003, 2000003, (1u << 24) + 3};
#else
static const size_t read_sizes[] = {1, 2, 255, 257, 4097, 30011, 100003};
#endif
#define N_READ_SIZES (sizeof read_sizes / sizeof read_sizes[0])

/* bench/topk's read pass reads every entry once and adds the sum of |x| to *d_sum.
 * On integers whose sum stays below 2^24 every partial sum is exact, whatever the
 * order, so the result must be that sum exactly: an entry read twice or missed
 * shows. On normal values it agrees with a double sum on the CPU to float
 * tolerance. */
START_TEST(gpu_read_pass_sums_every_entry_once)
{
    const size_t n = read_sizes[_i];
    const float start = 1000.0f;
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 800 + (uint64_t)_i);
    float *x = alloc(n * sizeof *x), *d_x = dev_alloc(n * sizeof *x), got;
    float *d_sum = dev_alloc(sizeof got);
    int err;
    /* The workspace gives only the grid: n may exceed its max_n. */
    dcps_topk_gpu_ws_t *gws = dcps_topk_gpu_ws_new(1, &err);
    ck_assert_ptr_nonnull(gws);
    ck_assert_int_eq(dcps_topk_read_gpu(NULL, n, d_sum, gws, NULL), DCPS_E_INVAL);
    ck_assert_int_eq(dcps_topk_read_gpu(d_x, n, NULL, gws, NULL), DCPS_E_INVAL);
    ck_assert_int_eq(dcps_topk_read_gpu(d_x, n, d_sum, NULL, NULL), DCPS_E_INVAL);

    for (int normal = 0; normal < 2; normal++) {
        double ref = 0.0;
        uint64_t exact = 0;
        for (size_t i = 0; i < n; i++) {
            if (normal) {
                x[i] = dcps_rng_normal(&rng);
            } else {
                unsigned m = 1 + (unsigned)dcps_rng_below(&rng, 7);
                x[i] = dcps_rng_below(&rng, 2) ? -(float)m : (float)m;
                exact += m;
            }
            ref += fabs((double)x[i]);
        }
        if (!normal && (double)start + (double)exact >= 0x1p24)
            continue;
        got = normal ? 0.0f : start;
        ck_assert_int_eq(dcps_gpu_to_device(d_x, x, n * sizeof *x, NULL), 0);
        ck_assert_int_eq(dcps_gpu_to_device(d_sum, &got, sizeof got, NULL), 0);
        ck_assert_int_eq(dcps_topk_read_gpu(d_x, n, d_sum, gws, NULL), 0);
        ck_assert_int_eq(dcps_topk_read_gpu(d_x, 0, d_sum, gws, NULL), 0);
        ck_assert_int_eq(dcps_gpu_to_host(&got, d_sum, sizeof got, NULL), 0);
        ck_assert_int_eq(dcps_gpu_sync(NULL), 0);
        if (!normal) {
            ck_assert_msg(got == start + (float)exact, "n=%zu: sum %.1f, not %.1f", n, got,
                          start + (double)exact);
        } else {
            /* The GPU adds in short chains (a thread's share of the grid-stride
             * loop, the block's tree, one atomic per block): 1e-4 is well above
             * their rounding. A missed entry is what the integers above catch.
             * The CPU's read pass is not held to this: its eight chains of n / 8
             * float additions drop small entries once the sums are large (3e-4 of
             * the sum at 2^24 + 3). */
            ck_assert_msg(fabs(got - ref) <= 1e-4 * ref, "n=%zu: GPU %.9g, double %.9g", n, got,
                          ref);
        }
    }
    dcps_topk_gpu_ws_destroy(&gws);
    dcps_gpu_free(d_x);
    dcps_gpu_free(d_sum);
    free(x);
}
END_TEST

#ifdef DCPS_EMU
#include "tests/cuda-emu/emu_hooks.h"

/* A launch that fails halfway through a selection: the error comes back only
 * after the kernels queued before it have run (the caller may free its arrays
 * at once), and it is not left pending for the next call, which succeeds. */
START_TEST(emu_a_failed_launch_drains_the_stream_and_leaves_no_error)
{
    enum { N = 5000, K = 50 };
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 700);
    float x[N], val[K], got_val[K];
    uint32_t idx[K], got_idx[K];
    fill(&rng, x, N, 0);
    float *d_x = dev_alloc(sizeof x), *d_val = dev_alloc(sizeof val);
    uint32_t *d_idx = dev_alloc(sizeof idx);
    int err;
    dcps_topk_ws_t *ws = dcps_topk_ws_new(N, &err);
    dcps_topk_gpu_ws_t *gws = dcps_topk_gpu_ws_new(N, &err);
    ck_assert(ws && gws);
    ck_assert_int_eq(dcps_gpu_to_device(d_x, x, sizeof x, NULL), 0);
    ck_assert_int_eq(dcps_gpu_sync(NULL), 0);
    emu_fail_launch(3); /* collect: after hist_top and pick are queued */
    ck_assert_int_eq(dcps_topk_gpu(d_x, N, K, d_idx, d_val, gws, NULL), DCPS_E_CUDA);
    ck_assert_uint_eq(emu_pending(), 0);
    ck_assert_int_eq(dcps_topk_gpu(d_x, N, K, d_idx, d_val, gws, NULL), 0);
    ck_assert_int_eq(dcps_topk_cpu(x, N, K, idx, val, ws), 0);
    ck_assert_int_eq(dcps_gpu_to_host(got_idx, d_idx, sizeof idx, NULL), 0);
    ck_assert_int_eq(dcps_gpu_to_host(got_val, d_val, sizeof val, NULL), 0);
    ck_assert_mem_eq(got_idx, idx, sizeof idx);
    ck_assert_mem_eq(got_val, val, sizeof val);
    dcps_topk_ws_destroy(&ws);
    dcps_topk_gpu_ws_destroy(&gws);
    dcps_gpu_free(d_x);
    dcps_gpu_free(d_val);
    dcps_gpu_free(d_idx);
}
END_TEST

/* A workspace larger than the device's memory is DCPS_E_NOMEM, not DCPS_E_CUDA. */
START_TEST(emu_a_workspace_beyond_device_memory_is_nomem)
{
    int err = 0;
    emu_set_device_bytes(1 << 20);
    ck_assert_ptr_null(dcps_topk_gpu_ws_new(1 << 20, &err));
    ck_assert_int_eq(err, DCPS_E_NOMEM);
    dcps_topk_gpu_ws_t *gws = dcps_topk_gpu_ws_new(1000, &err);
    ck_assert_ptr_nonnull(gws);
    dcps_topk_gpu_ws_destroy(&gws);
}
END_TEST
#endif

static Suite *topk_gpu_suite(void)
{
    Suite *s = suite_create("topk_gpu");
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, gpu_topk_is_bit_identical_to_cpu_on_random_data, 0, N_SIZES);
    tcase_add_test(tc, gpu_topk_is_bit_identical_on_ties_zeros_and_denormals);
    tcase_add_test(tc, gpu_ef_stays_identical_to_cpu_over_steps);
    tcase_add_test(tc, gpu_refuses_bad_sizes_and_nonfinite_input_like_cpu);
    tcase_add_test(tc, gpu_scatter_add_and_gather_match_cpu);
    tcase_add_loop_test(tc, gpu_read_pass_sums_every_entry_once, 0, N_READ_SIZES);
#ifdef DCPS_EMU
    tcase_add_test(tc, emu_a_failed_launch_drains_the_stream_and_leaves_no_error);
    tcase_add_test(tc, emu_a_workspace_beyond_device_memory_is_nomem);
#endif
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    DCPS_TEST_EMU_SWEEP();
    return dcps_test_run_gpu(topk_gpu_suite());
}
