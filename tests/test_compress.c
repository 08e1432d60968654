/* Tests for worker/compress: every step's output and residual equal those of a
 * plain reference written step by step (brute-force sort for the top k) bit for
 * bit, with and without error feedback and momentum correction; error feedback
 * loses nothing, exactly; k follows the density warm-up; warm-up and correction
 * steps are dense and clear the residual; clipping; NaN and Inf are refused, not
 * sent; bad arguments are refused. */
#include "worker/compress.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/rng.h"
#include "kernels/topk.h"
#include "proto/codec.h"
#include "proto/quant.h"
#include "tests/check_run.h"

static void *alloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

static float *floats(size_t n)
{
    return alloc(n * sizeof(float));
}

static dcps_rng_t seeded(uint64_t seed)
{
    dcps_rng_t rng;
    dcps_rng_seed(&rng, seed);
    return rng;
}

/* The defaults with the keys these tests vary. */
static dcps_config_t config(int push, double density, bool ef, double mu)
{
    dcps_config_t cfg;
    dcps_config_defaults(&cfg);
    cfg.push = push;
    cfg.density = density;
    cfg.error_feedback = ef;
    cfg.momentum_correction = mu;
    return cfg;
}

static dcps_compress_t *new_compress(const dcps_config_t *cfg, size_t n)
{
    int err = 1;
    dcps_compress_t *c = dcps_compress_new(cfg, n, &err);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(err, 0);
    return c;
}

/* Multiples of 2^-10 in [-span, span] * 2^-10: their sums stay exact in float as
 * long as they stay below 2^14. */
static void fill_exact(dcps_rng_t *rng, float *g, size_t n, int span)
{
    for (size_t i = 0; i < n; i++)
        g[i] = ldexpf((float)((int)dcps_rng_below(rng, 2 * (uint64_t)span + 1) - span), -10);
}

/* Normal values over eight binary orders of magnitude. */
static void fill_wide(dcps_rng_t *rng, float *g, size_t n)
{
    for (size_t i = 0; i < n; i++)
        g[i] = ldexpf(dcps_rng_normal(rng), (int)dcps_rng_below(rng, 8) - 4);
}

/* Check records every assertion it passes, which is slow over many entries: the
 * loops find the first bad entry and assert once. */
static void expect_zero(const float *x, size_t n, const char *what)
{
    size_t i = 0;
    while (i < n && x[i] == 0.0f)
        i++;
    ck_assert_msg(i == n, "%s[%zu] = %g, not 0", what, i, i < n ? (double)x[i] : 0.0);
}

/* --- the reference: the contract, step by step, in the simplest way ------------ */

static const float *sort_x; /* what by_magnitude compares */

/* |x| descending, then index ascending. */
static int by_magnitude(const void *a, const void *b)
{
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    float x = fabsf(sort_x[i]), y = fabsf(sort_x[j]);
    if (x != y)
        return x < y ? 1 : -1;
    return (i > j) - (i < j);
}

static int by_index(const void *a, const void *b)
{
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    return (i > j) - (i < j);
}

/* The k largest magnitudes of x by sorting all n, in index order. */
static void ref_topk(const float *x, size_t n, size_t k, uint32_t *order, uint32_t *idx)
{
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    sort_x = x;
    qsort(order, n, sizeof *order, by_magnitude);
    memcpy(idx, order, k * sizeof *idx);
    qsort(idx, k, sizeof *idx, by_index);
}

/* DGC's warm-up: 25% to density, geometrically, over the first E epochs. */
static size_t ref_k(const dcps_config_t *cfg, size_t n, int epoch)
{
    double d = cfg->density, last = cfg->density_warmup_epochs;
    if (epoch <= last && d < 0.25)
        d = pow(0.25, 1 - (epoch - 1) / last) * pow(d, (epoch - 1) / last);
    double k = ceil(d * (double)n);
    return k < 1 ? 1 : k > (double)n ? n : (size_t)k;
}

struct ref {
    dcps_config_t cfg;
    size_t n;
    float *r, *u;
    uint32_t *order;
    /* the last step's output: k entries, all n when dense */
    bool dense;
    size_t k;
    uint32_t *idx;
    float *val;
};

static void ref_init(struct ref *ref, const dcps_config_t *cfg, size_t n)
{
    ref->cfg = *cfg;
    ref->n = n;
    ref->r = floats(n);
    ref->u = floats(n);
    ref->val = floats(n);
    ref->order = alloc(n * sizeof(uint32_t));
    ref->idx = alloc(n * sizeof(uint32_t));
}

static void ref_free(struct ref *ref)
{
    free(ref->r);
    free(ref->u);
    free(ref->val);
    free(ref->order);
    free(ref->idx);
}

/* One step; volatile keeps every operation a single float32 rounding. */
static void ref_encode(struct ref *ref, const float *g, long step, int epoch)
{
    const dcps_config_t *cfg = &ref->cfg;
    size_t n = ref->n;
    float mu = (float)cfg->momentum_correction;
    bool ef = cfg->push == DCPS_PUSH_TOPK && cfg->error_feedback;
    for (size_t i = 0; i < n && ef && mu > 0; i++) {
        volatile float p = mu * ref->u[i];
        ref->u[i] = p + g[i];
    }
    const float *in = mu > 0 ? ref->u : g;
    for (size_t i = 0; i < n && ef; i++) {
        volatile float s = ref->r[i] + in[i];
        ref->r[i] = s;
    }
    const float *from = ef ? ref->r : g;
    ref->dense = cfg->push == DCPS_PUSH_DENSE || step <= cfg->warmup_steps ||
                 (cfg->correction_every > 0 && step % cfg->correction_every == 0);
    ref->k = ref->dense ? n : ref_k(cfg, n, epoch);
    if (ref->dense)
        for (size_t i = 0; i < n; i++)
            ref->idx[i] = (uint32_t)i;
    else
        ref_topk(from, n, ref->k, ref->order, ref->idx);
    for (size_t j = 0; j < ref->k; j++) {
        uint32_t i = ref->idx[j];
        ref->val[j] = from[i];
        if (ef)
            ref->r[i] = ref->u[i] = 0.0f;
    }
}

/* c's output and residual are the reference's, bit for bit. */
static void expect_ref(const struct ref *ref, const dcps_compress_t *c, const dcps_encoded_t *out,
                       long step)
{
    size_t n = ref->n;
    ck_assert_msg(out->dense == ref->dense, "step %ld: dense %d, want %d", step, out->dense,
                  ref->dense);
    ck_assert_msg(out->k == ref->k, "step %ld: k %zu, want %zu", step, out->k, ref->k);
    ck_assert_msg(memcmp(out->values, ref->val, out->k * sizeof(float)) == 0,
                  "step %ld: values differ", step);
    if (out->dense)
        ck_assert_ptr_null(out->idx);
    else
        ck_assert_msg(memcmp(out->idx, ref->idx, out->k * sizeof(uint32_t)) == 0,
                      "step %ld: indices differ", step);
    ck_assert_msg(memcmp(dcps_compress_residual(c), ref->r, n * sizeof(float)) == 0,
                  "step %ld: residual differs", step);
}

/* --- tests ---------------------------------------------------------------------- */

/* Configurations for the reference comparison: {error feedback, momentum, density}. */
static const struct {
    bool ef;
    double mu, density;
    bool exact; /* gradients on a coarse grid: many equal magnitudes */
} cases[] = {
    {true, 0, 0.01, false}, {true, 0, 0.1, true},    {true, 0.9, 0.01, false},
    {true, 0.9, 0.1, true}, {false, 0, 0.01, false}, {false, 0, 0.1, true},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

START_TEST(every_step_matches_a_plain_reference_bit_for_bit)
{
    /* Warm-up steps, corrections and the density warm-up over epochs of 8 steps. */
    enum { N = 5003, STEPS = 40, STEPS_PER_EPOCH = 8 };
    dcps_config_t cfg = config(DCPS_PUSH_TOPK, cases[_i].density, cases[_i].ef, cases[_i].mu);
    cfg.warmup_steps = 2;
    cfg.correction_every = 7;
    cfg.density_warmup_epochs = 3;
    dcps_compress_t *c = new_compress(&cfg, N);
    struct ref ref;
    ref_init(&ref, &cfg, N);
    float *g = floats(N);
    dcps_rng_t rng = seeded(10 + (uint64_t)_i);
    int sparse = 0;
    for (long step = 1; step <= STEPS; step++) {
        int epoch = 1 + (int)((step - 1) / STEPS_PER_EPOCH);
        if (cases[_i].exact)
            fill_exact(&rng, g, N, 8);
        else
            fill_wide(&rng, g, N);
        ref_encode(&ref, g, step, epoch);
        dcps_encoded_t out;
        ck_assert_int_eq(dcps_compress_encode(c, g, step, epoch, &out), 0);
        expect_ref(&ref, c, &out, step);
        sparse += !out.dense;
    }
    ck_assert_int_eq(sparse, STEPS - 2 - 5); /* steps 1, 2, 7, 14, ..., 35 were dense */
    ref_free(&ref);
    free(g);
    dcps_compress_destroy(&c);
    ck_assert_ptr_null(c);
}
END_TEST

START_TEST(error_feedback_loses_nothing_exactly)
{
    /* Every sum below is exact (multiples of 2^-10 below 2^14), so after every step
     * what was sent plus the residual is the sum of the gradients, bit for bit. */
    enum { N = 20011, STEPS = 50 };
    const double densities[] = {0.01, 0.1};
    dcps_rng_t rng = seeded(20);
    float *g = floats(N), *in = floats(N), *sent = floats(N);
    for (int d = 0; d < 2; d++) {
        dcps_config_t cfg = config(DCPS_PUSH_TOPK, densities[d], true, 0);
        cfg.warmup_steps = 3;
        cfg.correction_every = 10;
        cfg.density_warmup_epochs = 2;
        dcps_compress_t *c = new_compress(&cfg, N);
        memset(in, 0, N * sizeof *in);
        memset(sent, 0, N * sizeof *sent);
        size_t kept = 0;
        for (long step = 1; step <= STEPS; step++) {
            dcps_encoded_t out;
            fill_exact(&rng, g, N, 512);
            for (size_t i = 0; i < N; i++)
                in[i] += g[i];
            ck_assert_int_eq(dcps_compress_encode(c, g, step, 1 + (int)(step / 20), &out), 0);
            for (size_t j = 0; j < out.k; j++)
                sent[out.dense ? j : out.idx[j]] += out.values[j];
            const float *r = dcps_compress_residual(c);
            size_t i = 0;
            while (i < N && sent[i] + r[i] == in[i])
                i++;
            ck_assert_msg(i == N, "density %g step %ld entry %zu: %g + %g != %g", densities[d],
                          step, i, (double)sent[i], (double)r[i], (double)in[i]);
            for (i = 0; i < N; i++)
                kept += r[i] != 0.0f;
        }
        ck_assert_uint_gt(kept, N); /* the residual held something */
        dcps_compress_destroy(&c);
    }
    free(g);
    free(in);
    free(sent);
}
END_TEST

START_TEST(momentum_correction_sends_every_velocity_exactly_once)
{
    /* DGC: r accumulates the velocity u <- mu u + g, and u is cleared where r is
     * sent. With mu = 1/2 and ten steps of multiples of 2^-10 below 2^-4 every sum
     * is exact, so sent + r is the sum of the velocities, computed here with the
     * masking that the outputs imply. */
    enum { N = 3001, STEPS = 10 };
    dcps_config_t cfg = config(DCPS_PUSH_TOPK, 0.02, true, 0.5);
    cfg.correction_every = 6;
    dcps_compress_t *c = new_compress(&cfg, N);
    float *g = floats(N), *u = floats(N), *u_sum = floats(N), *sent = floats(N);
    dcps_rng_t rng = seeded(30);
    for (long step = 1; step <= STEPS; step++) {
        dcps_encoded_t out;
        fill_exact(&rng, g, N, 64);
        for (size_t i = 0; i < N; i++) {
            u[i] = 0.5f * u[i] + g[i];
            u_sum[i] += u[i];
        }
        ck_assert_int_eq(dcps_compress_encode(c, g, step, 1, &out), 0);
        ck_assert_int_eq(out.dense, step == 6);
        for (size_t j = 0; j < out.k; j++) {
            size_t i = out.dense ? j : out.idx[j];
            sent[i] += out.values[j];
            u[i] = 0.0f;
        }
        const float *r = dcps_compress_residual(c);
        size_t i = 0;
        while (i < N && sent[i] + r[i] == u_sum[i])
            i++;
        ck_assert_msg(i == N, "step %ld entry %zu: %g + %g != %g", step, i, (double)sent[i],
                      (double)r[i], (double)u_sum[i]);
    }
    free(g);
    free(u);
    free(u_sum);
    free(sent);
    dcps_compress_destroy(&c);
}
END_TEST

START_TEST(k_follows_the_density_warmup)
{
    /* E = 4, density 0.001: 25%, 6.29%, 1.58%, 0.398%, then 0.1%. */
    enum { N = 100000 };
    const size_t want_k[] = {25000, 6288, 1582, 398, 100, 100};
    const double want_d[] = {
        0.25, 0.0628716714841468, 0.0158113883008419, 0.00397635364383525, 0.001, 0.001};
    dcps_config_t cfg = config(DCPS_PUSH_TOPK, 0.001, true, 0);
    cfg.density_warmup_epochs = 4;
    dcps_compress_t *c = new_compress(&cfg, N);
    float *g = floats(N);
    dcps_rng_t rng = seeded(40);
    for (int epoch = 1; epoch <= 6; epoch++) {
        dcps_encoded_t out;
        double d = dcps_compress_density(c, epoch);
        ck_assert_double_eq_tol(d, want_d[epoch - 1], 1e-14);
        fill_wide(&rng, g, N);
        ck_assert_int_eq(dcps_compress_encode(c, g, epoch, epoch, &out), 0);
        ck_assert(!out.dense);
        ck_assert_uint_eq(out.k, want_k[epoch - 1]);
        ck_assert_double_eq(out.density, d);
    }
    dcps_compress_destroy(&c);

    cfg.density = 0.5; /* at or above the start: no warm-up */
    c = new_compress(&cfg, N);
    for (int epoch = 1; epoch <= 6; epoch++)
        ck_assert_double_eq(dcps_compress_density(c, epoch), 0.5);
    dcps_compress_destroy(&c);
    cfg.density = 0.001;
    cfg.density_warmup_epochs = 0; /* off */
    c = new_compress(&cfg, N);
    ck_assert_double_eq(dcps_compress_density(c, 1), 0.001);
    dcps_compress_destroy(&c);
    cfg.density = 1e-9; /* k is at least 1 */
    c = new_compress(&cfg, N);
    dcps_encoded_t out;
    ck_assert_int_eq(dcps_compress_encode(c, g, 1, 1, &out), 0);
    ck_assert_uint_eq(out.k, 1);
    dcps_compress_destroy(&c);
    free(g);
}
END_TEST

START_TEST(without_error_feedback_g_is_selected_and_nothing_kept)
{
    enum { N = 4099, K = 41 }; /* density 0.01: k = ceil(40.99) */
    dcps_config_t cfg = config(DCPS_PUSH_TOPK, 0.01, false, 0);
    dcps_compress_t *c = new_compress(&cfg, N);
    float *g = floats(N), *copy = floats(N);
    uint32_t *order = alloc(N * sizeof *order), want[K];
    dcps_rng_t rng = seeded(50);
    for (long step = 1; step <= 5; step++) {
        dcps_encoded_t out;
        fill_wide(&rng, g, N);
        memcpy(copy, g, N * sizeof *g);
        ref_topk(g, N, K, order, want);
        ck_assert_int_eq(dcps_compress_encode(c, g, step, 1, &out), 0);
        ck_assert_uint_eq(out.k, K);
        ck_assert_int_eq(memcmp(out.idx, want, sizeof want), 0);
        for (size_t j = 0; j < K; j++)
            ck_assert(out.values[j] == g[want[j]]);
        ck_assert_int_eq(memcmp(g, copy, N * sizeof *g), 0);
        expect_zero(dcps_compress_residual(c), N, "residual");
    }
    free(g);
    free(copy);
    free(order);
    dcps_compress_destroy(&c);
}
END_TEST

START_TEST(warmup_and_correction_steps_are_dense_and_clear_the_residual)
{
    /* Steps 1..3 warm up, every 4th corrects: dense at 1, 2, 3, 4, 8, 12. The dense
     * push is the residual plus g; it stays readable while the residual is zero. */
    enum { N = 1009 };
    static const bool dense[] = {1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1};
    dcps_config_t cfg = config(DCPS_PUSH_TOPK, 0.05, true, 0);
    cfg.warmup_steps = 3;
    cfg.correction_every = 4;
    dcps_compress_t *c = new_compress(&cfg, N);
    float *g = floats(N), *want = floats(N);
    dcps_rng_t rng = seeded(60);
    for (long step = 1; step <= 12; step++) {
        dcps_encoded_t out;
        fill_wide(&rng, g, N);
        const float *r = dcps_compress_residual(c);
        for (size_t i = 0; i < N; i++)
            want[i] = r[i] + g[i];
        ck_assert_int_eq(dcps_compress_encode(c, g, step, 1, &out), 0);
        ck_assert_msg(out.dense == dense[step - 1], "step %ld: dense %d", step, out.dense);
        r = dcps_compress_residual(c);
        if (!out.dense) {
            ck_assert_uint_eq(out.k, 51);
            ck_assert_double_eq(out.density, 0.05);
            continue;
        }
        ck_assert_ptr_null(out.idx);
        ck_assert_uint_eq(out.k, N);
        ck_assert_double_eq(out.density, 1);
        ck_assert_ptr_ne(out.values, r);
        ck_assert_int_eq(memcmp(out.values, want, N * sizeof *want), 0);
        expect_zero(r, N, "residual");
    }
    free(g);
    free(want);
    dcps_compress_destroy(&c);
}
END_TEST

START_TEST(dense_push_sends_g_itself_and_keeps_nothing)
{
    enum { N = 777 };
    dcps_config_t cfg = config(DCPS_PUSH_DENSE, 0.01, true, 0.9);
    dcps_compress_t *c = new_compress(&cfg, N);
    float *g = floats(N);
    dcps_rng_t rng = seeded(70);
    for (long step = 1; step <= 3; step++) {
        dcps_encoded_t out;
        fill_wide(&rng, g, N);
        ck_assert_int_eq(dcps_compress_encode(c, g, step, 1, &out), 0);
        ck_assert(out.dense);
        ck_assert_ptr_eq(out.values, g);
        ck_assert_uint_eq(out.k, N);
        ck_assert_double_eq(out.density, 1);
        expect_zero(dcps_compress_residual(c), N, "residual");
    }
    free(g);
    dcps_compress_destroy(&c);
}
END_TEST

static double norm(const float *x, size_t n)
{
    double sq = 0;
    for (size_t i = 0; i < n; i++)
        sq += (double)x[i] * x[i];
    return sqrt(sq);
}

START_TEST(clipping_scales_to_clip_norm_only_above_it)
{
    enum { N = 10007 };
    dcps_rng_t rng = seeded(80);
    float *g = floats(N), *copy = floats(N), *sum = floats(N);
    fill_wide(&rng, g, N);
    double before = norm(g, N);

    /* Above: what enters error feedback (sent plus kept, r being 0 before) has norm
     * clip_norm, and g itself was scaled. */
    dcps_config_t cfg = config(DCPS_PUSH_TOPK, 0.01, true, 0);
    cfg.clip_norm = before * 0.9;
    dcps_compress_t *c = new_compress(&cfg, N);
    dcps_encoded_t out;
    ck_assert_int_eq(dcps_compress_encode(c, g, 1, 1, &out), 0);
    memcpy(sum, dcps_compress_residual(c), N * sizeof *sum);
    for (size_t j = 0; j < out.k; j++)
        sum[out.idx[j]] += out.values[j];
    ck_assert_double_eq_tol(norm(sum, N) / cfg.clip_norm, 1, 1e-5);
    ck_assert_double_eq_tol(norm(g, N) / cfg.clip_norm, 1, 1e-5);
    dcps_compress_destroy(&c);

    /* Below: g is pushed as it is. */
    cfg = config(DCPS_PUSH_DENSE, 0.01, true, 0);
    fill_wide(&rng, g, N);
    memcpy(copy, g, N * sizeof *g);
    cfg.clip_norm = norm(g, N) * 1.5;
    c = new_compress(&cfg, N);
    ck_assert_int_eq(dcps_compress_encode(c, g, 1, 1, &out), 0);
    ck_assert_int_eq(memcmp(out.values, copy, N * sizeof *g), 0);
    dcps_compress_destroy(&c);
    free(g);
    free(copy);
    free(sum);
}
END_TEST

START_TEST(nan_or_inf_is_refused_not_sent)
{
    /* {push, error feedback, momentum, warm-up steps, clip norm} */
    static const struct {
        int push;
        bool ef;
        double mu;
        int warmup;
        double clip;
    } kinds[] = {
        {DCPS_PUSH_DENSE, true, 0, 0, 0}, {DCPS_PUSH_TOPK, true, 0, 0, 0},
        {DCPS_PUSH_TOPK, false, 0, 0, 0}, {DCPS_PUSH_TOPK, true, 0.9, 0, 0},
        {DCPS_PUSH_TOPK, true, 0, 1, 0},  {DCPS_PUSH_TOPK, true, 0.9, 1, 0},
        {DCPS_PUSH_TOPK, false, 0, 1, 0}, {DCPS_PUSH_TOPK, true, 0, 0, 1.0},
    };
    enum { N = 2048 };
    float *g = floats(N), *copy = floats(N);
    dcps_rng_t rng = seeded(90);
    for (size_t t = 0; t < sizeof kinds / sizeof kinds[0]; t++)
        for (int bad = 0; bad < 2; bad++) {
            dcps_config_t cfg = config(kinds[t].push, 0.01, kinds[t].ef, kinds[t].mu);
            cfg.warmup_steps = kinds[t].warmup;
            cfg.clip_norm = kinds[t].clip;
            dcps_compress_t *c = new_compress(&cfg, N);
            dcps_encoded_t out = {.k = 12345};
            fill_wide(&rng, g, N);
            g[N / 3] = bad ? -INFINITY : NAN;
            memcpy(copy, g, N * sizeof *g);
            ck_assert_msg(dcps_compress_encode(c, g, 1, 1, &out) == DCPS_E_NONFINITE,
                          "kind %zu: %s not refused", t, bad ? "-Inf" : "NaN");
            ck_assert_uint_eq(out.k, 12345);                     /* nothing was output */
            ck_assert_int_eq(memcmp(g, copy, N * sizeof *g), 0); /* nor g scaled */
            dcps_compress_destroy(&c);
        }
    free(g);
    free(copy);
}
END_TEST

START_TEST(finite_sum_that_overflows_is_refused_on_a_dense_step)
{
    /* Step 1 sends 3e38 and keeps 2e38; step 2 is dense and would send 2e38 + 2e38,
     * which is Inf in float. The Inf stays in the residual: later steps fail too. */
    float g[4] = {3e38f, 2e38f, 0, 0};
    dcps_config_t cfg = config(DCPS_PUSH_TOPK, 0.25, true, 0);
    cfg.correction_every = 2;
    dcps_compress_t *c = new_compress(&cfg, 4);
    dcps_encoded_t out;
    ck_assert_int_eq(dcps_compress_encode(c, g, 1, 1, &out), 0);
    ck_assert_uint_eq(out.k, 1);
    ck_assert_uint_eq(out.idx[0], 0);
    g[0] = 0;
    ck_assert_int_eq(dcps_compress_encode(c, g, 2, 1, &out), DCPS_E_NONFINITE);
    g[1] = 0;
    ck_assert_int_eq(dcps_compress_encode(c, g, 3, 1, &out), DCPS_E_NONFINITE);
    dcps_compress_destroy(&c);
}
END_TEST

START_TEST(bad_arguments_are_refused)
{
    int err = 0;
    dcps_config_t cfg = config(DCPS_PUSH_TOPK, 0.01, true, 0);
    ck_assert_ptr_null(dcps_compress_new(&cfg, 0, &err));
    ck_assert_int_eq(err, DCPS_E_INVAL);
    ck_assert_ptr_null(dcps_compress_new(NULL, 10, &err));
    ck_assert_ptr_null(dcps_compress_new(&cfg, DCPS_TOPK_MAX_N + 1, NULL));
    cfg.momentum_correction = 0.9;
    cfg.error_feedback = false; /* momentum correction needs the residual */
    err = 0;
    ck_assert_ptr_null(dcps_compress_new(&cfg, 10, &err));
    ck_assert_int_eq(err, DCPS_E_INVAL);
    cfg = config(DCPS_PUSH_TOPK, 0, true, 0);
    ck_assert_ptr_null(dcps_compress_new(&cfg, 10, &err));
    cfg = config(DCPS_PUSH_TOPK, 0.01, true, 1);
    ck_assert_ptr_null(dcps_compress_new(&cfg, 10, &err));

    cfg = config(DCPS_PUSH_TOPK, 0.01, true, 0);
    dcps_compress_t *c = new_compress(&cfg, 10);
    float g[10] = {1, 2, 3};
    dcps_encoded_t out = {.k = 99};
    ck_assert_int_eq(dcps_compress_encode(c, g, 0, 1, &out), DCPS_E_INVAL);
    ck_assert_int_eq(dcps_compress_encode(c, g, 1, 0, &out), DCPS_E_INVAL);
    ck_assert_uint_eq(out.k, 99);
    expect_zero(dcps_compress_residual(c), 10, "residual");
    dcps_compress_destroy(&c);
    dcps_compress_destroy(&c);
    dcps_compress_destroy(NULL);
}
END_TEST

/* Shorter values: each step's values as the pusher encodes them (one shard,
 * as dcps_client_push_as does) and what rounding took written into out->lost;
 * after dcps_compress_keep each sent entry's residual is exactly its value
 * minus its decoded value, and over the steps what was decoded plus the
 * residual is the sum of every gradient (float rounding of the sums aside). */
static const struct {
    int push, values;
} shorter[] = {
    {DCPS_PUSH_TOPK, DCPS_VALUES_INT8}, {DCPS_PUSH_TOPK, DCPS_VALUES_FP16},
    {DCPS_PUSH_DENSE, DCPS_VALUES_INT8}, {DCPS_PUSH_DENSE, DCPS_VALUES_BF16},
    {DCPS_PUSH_TWOBIT, DCPS_VALUES_FP32},
};

START_TEST(shorter_values_keep_what_rounding_took)
{
    enum { N = 3001, STEPS = 30 };
    dcps_config_t cfg = config(shorter[_i].push, 0.02, true, 0);
    cfg.values = shorter[_i].values;
    cfg.threshold = 0.05;
    cfg.correction_every = 7; /* twobit: every 7th step in the values format */
    dcps_compress_t *c = new_compress(&cfg, N);
    float *g = calloc(N, sizeof *g), *dec = calloc(N, sizeof *dec), *before = calloc(N, sizeof *before);
    double *sum_g = calloc(N, sizeof *sum_g), *sum_dec = calloc(N, sizeof *sum_dec);
    uint8_t *wire = malloc(4 * N + 64);
    ck_assert(g && dec && before && sum_g && sum_dec && wire);
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 30);
    for (long step = 1; step <= STEPS; step++) {
        for (size_t i = 0; i < N; i++) {
            g[i] = (float)((dcps_rng_uniform(&rng) - 0.5) * ldexp(1.0, (int)(i % 9) - 6));
            sum_g[i] += g[i];
        }
        dcps_encoded_t e;
        ck_assert_int_eq(dcps_compress_encode(c, g, step, 1, &e), 0);
        bool twobit_step = cfg.push == DCPS_PUSH_TWOBIT && step % 7 != 0;
        ck_assert_uint_eq(e.dtype, twobit_step ? DCPS_DTYPE_TWOBIT : dcps_config_values_dtype(&cfg));
        ck_assert_ptr_nonnull(e.lost);
        memcpy(before, e.values, e.k * sizeof *before);
        uint32_t block = e.dtype == DCPS_DTYPE_I8 && e.k > DCPS_QUANT_BLOCK ? DCPS_QUANT_BLOCK : 0;
        dcps_quant_encode(e.dtype, block, e.tau, before, e.k, wire, dec);
        for (size_t j = 0; j < e.k; j++)
            e.lost[j] = before[j] - dec[j];
        dcps_compress_keep(c, &e);
        const float *r = dcps_compress_residual(c);
        for (size_t j = 0; j < e.k; j++) {
            size_t i = e.idx ? e.idx[j] : j;
            float want = before[j] - dec[j];
            ck_assert_msg(memcmp(&r[i], &want, sizeof want) == 0,
                          "step %ld entry %zu: residual %a, value - decoded %a", step, i,
                          (double)r[i], (double)want);
            sum_dec[i] += dec[j];
            if (twobit_step)
                ck_assert(dec[j] == 0 || fabsf(dec[j]) == (float)cfg.threshold);
        }
    }
    const float *r = dcps_compress_residual(c);
    for (size_t i = 0; i < N; i++)
        ck_assert_msg(fabs(sum_dec[i] + r[i] - sum_g[i]) <= 1e-5 * (1 + fabs(sum_g[i])),
                      "entry %zu: sent %g + residual %g, gradients %g", i, sum_dec[i],
                      (double)r[i], sum_g[i]);
    /* Without error feedback nothing is kept: no lost values to fill. */
    dcps_compress_destroy(&c);
    cfg.error_feedback = false;
    c = new_compress(&cfg, N);
    dcps_encoded_t e;
    ck_assert_int_eq(dcps_compress_encode(c, g, 1, 1, &e), 0);
    ck_assert_ptr_null(e.lost);
    dcps_compress_destroy(&c);
    free(g);
    free(dec);
    free(before);
    free(sum_g);
    free(sum_dec);
    free(wire);
}
END_TEST

static Suite *compress_suite(void)
{
    Suite *s = suite_create("compress");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, every_step_matches_a_plain_reference_bit_for_bit, 0, N_CASES);
    tcase_add_test(tc, error_feedback_loses_nothing_exactly);
    tcase_add_test(tc, momentum_correction_sends_every_velocity_exactly_once);
    tcase_add_test(tc, k_follows_the_density_warmup);
    tcase_add_test(tc, without_error_feedback_g_is_selected_and_nothing_kept);
    tcase_add_test(tc, warmup_and_correction_steps_are_dense_and_clear_the_residual);
    tcase_add_test(tc, dense_push_sends_g_itself_and_keeps_nothing);
    tcase_add_test(tc, clipping_scales_to_clip_norm_only_above_it);
    tcase_add_test(tc, nan_or_inf_is_refused_not_sent);
    tcase_add_test(tc, finite_sum_that_overflows_is_refused_on_a_dense_step);
    tcase_add_test(tc, bad_arguments_are_refused);
    tcase_add_loop_test(tc, shorter_values_keep_what_rounding_took, 0,
                        (int)(sizeof shorter / sizeof shorter[0]));
    suite_add_tcase(s, tc);
    return s;
}


int main(void)
{
    return dcps_test_run(compress_suite());
}
