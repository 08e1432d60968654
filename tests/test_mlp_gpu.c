/* Tests for model/mlp_gpu and kernels/blas_gpu: the GPU MLP gives the CPU
 * MLP's gradients, loss and count (model/mlp.c is the reference) for several
 * shapes and batch sizes, the same bits on every run and on any stream; its
 * evaluation over a host data set agrees with the CPU's; the SGD kernel is the
 * C loop bit for bit; bad arguments and labels are DCPS_E_INVAL. Checks that
 * need no GPU (a missing cuBLAS, argument checks, no GPU at all) always run;
 * without a usable GPU and cuBLAS the rest is skipped and the program exits 77
 * (SKIP) once those have passed. */
#include "model/mlp_gpu.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/rng.h"
#include "config.h"
#include "kernels/blas_gpu.h"
#include "kernels/gpu.h"
#include "tests/gpu_probe.h"
#include "model/mlp.h"

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* Gradients are compared entry by entry relative to the largest |g| of the
 * vector. The two paths do the same operations, but cuBLAS and OpenBLAS sum the
 * dot products (up to 784 terms) in different orders, so each entry carries a
 * rounding difference of a few float ulps of the partial sums, ~1e-6 of the
 * gradient's scale; 1e-4 leaves a wide margin yet fails any indexing,
 * transposition, masking or scaling error, which moves entries by O(1) of
 * that scale. The loss sums per-sample terms in double on both sides and
 * differs only through the logits: 1e-5 relative (absolute below 1). */
#define GRAD_TOL 1e-4
#define LOSS_TOL 1e-5

/* The inputs are chosen (by seed) so that every hidden pre-activation is at
 * least this far from ReLU's kink and every sample's two largest logits at
 * least this far apart, computed in double. Rounding moves them by ~1e-5 at
 * most, so neither a ReLU mask nor an argmax can come out differently on the
 * two paths, and the comparison tests arithmetic, not luck. */
#define MARGIN 1e-4

typedef struct {
    int layers[4];
    int n_layers;
    int max_batch;
} shape_t;

static const shape_t shapes[] = {
    {{784, 256, 128, 10}, 4, 64}, /* the reference model */
    {{5, 7, 3}, 3, 40},
    {{1, 1, 2}, 3, 33}, /* one input, one hidden unit */
};
#define N_SHAPES (int)(sizeof shapes / sizeof shapes[0])

/* Batch sizes run per shape: 1, 17, and the shape's max_batch. */
#define N_BATCHES 3
static int batch_of(const shape_t *s, int i)
{
    return i == 0 ? 1 : i == 1 ? 17 : s->max_batch;
}

/* Test data for one shape: parameters, n samples, labels. */
typedef struct {
    size_t n_params;
    int n;
    float *params, *x;
    uint8_t *y;
} data_t;

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* He-normal weights with non-zero biases (so the biases' gradient path is
 * exercised), normal inputs, uniform labels; all from seed. */
static void fill(const shape_t *s, uint64_t seed, data_t *d)
{
    dcps_rng_t r;
    dcps_rng_seed(&r, seed);
    dcps_mlp_init_params(s->layers, s->n_layers, seed, d->params);
    float *p = d->params;
    for (int l = 1; l < s->n_layers; l++) {
        p += (size_t)s->layers[l - 1] * s->layers[l];
        for (int k = 0; k < s->layers[l]; k++)
            *p++ = 0.3f * dcps_rng_normal(&r);
    }
    for (size_t i = 0; i < (size_t)d->n * s->layers[0]; i++)
        d->x[i] = dcps_rng_normal(&r);
    for (int i = 0; i < d->n; i++)
        d->y[i] = (uint8_t)dcps_rng_below(&r, (uint64_t)s->layers[s->n_layers - 1]);
}

/* A double-precision forward pass written from the layout contract alone,
 * reporting the smallest |pre-activation| of any hidden unit (*kink) and the
 * smallest gap between a sample's two largest logits (*tie). */
static void margins(const shape_t *s, const data_t *d, double *kink, double *tie)
{
    double a[2][784], *cur = a[0], *next = a[1];
    *kink = *tie = INFINITY;
    for (int i = 0; i < d->n; i++) {
        for (int k = 0; k < s->layers[0]; k++)
            cur[k] = d->x[(size_t)i * s->layers[0] + k];
        const float *p = d->params;
        for (int l = 1; l < s->n_layers; l++) {
            int in = s->layers[l - 1], out = s->layers[l];
            const float *W = p, *b = p + (size_t)in * out;
            for (int o = 0; o < out; o++) {
                double z = b[o];
                for (int k = 0; k < in; k++)
                    z += (double)W[(size_t)o * in + k] * cur[k];
                if (l < s->n_layers - 1) {
                    *kink = fmin(*kink, fabs(z));
                    z = z > 0.0 ? z : 0.0;
                }
                next[o] = z;
            }
            double *t = cur;
            cur = next;
            next = t;
            p += (size_t)in * out + out;
        }
        double top = -INFINITY, second = -INFINITY;
        for (int k = 0; k < s->layers[s->n_layers - 1]; k++) {
            if (cur[k] > top) {
                second = top;
                top = cur[k];
            } else if (cur[k] > second) {
                second = cur[k];
            }
        }
        *tie = fmin(*tie, top - second);
    }
}

/* Data for shape s with n samples from the first seed whose margins clear
 * MARGIN (the kink margin only when check_kinks is set: evaluation does not
 * differentiate). Near-misses are rare enough that a few seeds suffice. */
static data_t make_data(const shape_t *s, int n, int check_kinks)
{
    data_t d;
    d.n_params = dcps_mlp_param_count(s->layers, s->n_layers);
    d.n = n;
    d.params = xmalloc(d.n_params * sizeof(float));
    d.x = xmalloc((size_t)n * s->layers[0] * sizeof(float));
    d.y = xmalloc((size_t)n);
    for (uint64_t seed = 1; seed <= 1000; seed++) {
        double kink, tie;
        fill(s, seed, &d);
        margins(s, &d, &kink, &tie);
        if ((!check_kinks || kink >= MARGIN) && tie >= MARGIN)
            return d;
    }
    ck_abort_msg("no seed gives inputs clear of ReLU kinks and argmax ties");
    return d;
}

static void free_data(data_t *d)
{
    free(d->params);
    free(d->x);
    free(d->y);
}

static void *to_device(const void *host, size_t bytes)
{
    void *p = NULL;
    ck_assert_int_eq(dcps_gpu_alloc(&p, bytes), 0);
    ck_assert_int_eq(dcps_gpu_to_device(p, host, bytes, NULL), 0);
    return p;
}

static dcps_mlp_gpu_t *gpu_model(const shape_t *s, dcps_stream_t stream)
{
    int err = 1;
    dcps_mlp_gpu_t *m = dcps_mlp_gpu_new(s->layers, s->n_layers, s->max_batch, stream, &err);
    ck_assert_msg(m != NULL, "dcps_mlp_gpu_new: %s", dcps_strerror(err));
    ck_assert_int_eq(err, 0);
    return m;
}

/* Runs forward_backward on the GPU for the first batch samples of d and
 * returns the gradient (host memory, caller frees) with loss and count; d_grad
 * starts as NaN, so an entry left unwritten shows. */
static float *gpu_grad(dcps_mlp_gpu_t *m, const shape_t *s, const data_t *d, int batch,
                       dcps_stream_t stream, float *loss, int *correct)
{
    size_t pbytes = d->n_params * sizeof(float);
    float *grad = xmalloc(pbytes);
    for (size_t i = 0; i < d->n_params; i++)
        grad[i] = NAN;
    float *d_params = to_device(d->params, pbytes);
    float *d_x = to_device(d->x, (size_t)batch * s->layers[0] * sizeof(float));
    uint8_t *d_y = to_device(d->y, (size_t)batch);
    float *d_grad = to_device(grad, pbytes);
    /* The uploads ran on the default stream; a model on another stream must
     * not start before them. */
    ck_assert_int_eq(dcps_gpu_sync(NULL), 0);
    ck_assert_int_eq(
        dcps_mlp_gpu_forward_backward(m, d_params, d_x, d_y, batch, d_grad, loss, correct), 0);
    ck_assert_int_eq(dcps_gpu_to_host(grad, d_grad, pbytes, stream), 0);
    ck_assert_int_eq(dcps_gpu_sync(stream), 0);
    dcps_gpu_free(d_params);
    dcps_gpu_free(d_x);
    dcps_gpu_free(d_y);
    dcps_gpu_free(d_grad);
    return grad;
}

/* ---- checks that need no GPU ----------------------------------------------- */

START_TEST(missing_cublas_library_is_nogpu_not_a_crash)
{
    /* The first load in this process: a name that cannot exist. */
    ck_assert_int_eq(dcps_blas_load("libdcps-test-no-such-cublas.so.0"), DCPS_E_NOGPU);
}
END_TEST

START_TEST(new_rejects_bad_shapes_before_looking_for_a_gpu)
{
    const int layers[] = {5, 7, 3}, zero[] = {5, 0, 3};
    int err = 0;
    ck_assert_ptr_null(dcps_mlp_gpu_new(layers, 1, 4, NULL, &err));
    ck_assert_int_eq(err, DCPS_E_INVAL);
    err = 0;
    ck_assert_ptr_null(dcps_mlp_gpu_new(layers, 3, 0, NULL, &err));
    ck_assert_int_eq(err, DCPS_E_INVAL);
    err = 0;
    ck_assert_ptr_null(dcps_mlp_gpu_new(zero, 3, 4, NULL, &err));
    ck_assert_int_eq(err, DCPS_E_INVAL);
    dcps_mlp_gpu_t *none = NULL;
    dcps_mlp_gpu_destroy(&none);
    dcps_mlp_gpu_destroy(NULL);
}
END_TEST

START_TEST(without_a_gpu_new_reports_nogpu)
{
    /* Only meaningful where no GPU is usable; with one, the GPU cases below
     * cover construction. */
    if (dcps_gpu_count() > 0)
        return;
    const int layers[] = {5, 7, 3};
    int err = 0;
    ck_assert_ptr_null(dcps_mlp_gpu_new(layers, 3, 4, NULL, &err));
    ck_assert_int_eq(err, DCPS_E_NOGPU);
    err = 0;
    ck_assert_ptr_null(dcps_blas_new(NULL, &err));
    ck_assert_int_eq(err, DCPS_E_NOGPU);
}
END_TEST

/* ---- GPU against CPU ------------------------------------------------------- */

/* _i runs over shapes x batch sizes. */
START_TEST(gradient_loss_and_count_match_cpu)
{
    const shape_t *s = &shapes[_i / N_BATCHES];
    int batch = batch_of(s, _i % N_BATCHES);
    data_t d = make_data(s, s->max_batch, 1);

    float *want = xmalloc(d.n_params * sizeof(float)), want_loss = -1.0f, loss = -1.0f;
    int want_correct = -1, correct = -1;
    dcps_mlp_t *cpu = dcps_mlp_new(s->layers, s->n_layers, s->max_batch, NULL);
    ck_assert_ptr_nonnull(cpu);
    ck_assert_int_eq(
        dcps_mlp_forward_backward(cpu, d.params, d.x, d.y, batch, want, &want_loss, &want_correct),
        0);

    dcps_mlp_gpu_t *m = gpu_model(s, NULL);
    ck_assert_uint_eq(dcps_mlp_gpu_n_params(m), d.n_params);
    float *got = gpu_grad(m, s, &d, batch, NULL, &loss, &correct);

    double gmax = 0.0;
    for (size_t i = 0; i < d.n_params; i++)
        gmax = fmax(gmax, fabs(want[i]));
    ck_assert_double_gt(gmax, 0.0);
    for (size_t i = 0; i < d.n_params; i++) {
        double diff = fabs((double)got[i] - want[i]);
        /* A NaN (an entry never written) fails the comparison too. */
        ck_assert_msg(diff <= GRAD_TOL * gmax,
                      "layers %d-%d.. batch %d: grad[%zu] is %g on the GPU, %g on the CPU "
                      "(max |g| %g)",
                      s->layers[0], s->layers[1], batch, i, (double)got[i], (double)want[i], gmax);
    }
    ck_assert_msg(fabs((double)loss - want_loss) <= LOSS_TOL * fmax(1.0, want_loss),
                  "batch %d: loss %.9g on the GPU, %.9g on the CPU", batch, (double)loss,
                  (double)want_loss);
    ck_assert_int_eq(correct, want_correct);

    /* Reproducible: the same call gives the same bits. */
    float again_loss = -1.0f;
    int again_correct = -1;
    float *again = gpu_grad(m, s, &d, batch, NULL, &again_loss, &again_correct);
    ck_assert_mem_eq(again, got, d.n_params * sizeof(float));
    ck_assert_mem_eq(&again_loss, &loss, sizeof loss);
    ck_assert_int_eq(again_correct, correct);

    dcps_mlp_gpu_destroy(&m);
    ck_assert_ptr_null(m);
    dcps_mlp_destroy(&cpu);
    free(again);
    free(got);
    free(want);
    free_data(&d);
}
END_TEST

#ifdef HAVE_CUDA
START_TEST(a_model_on_its_own_stream_gives_the_same_bits)
{
    const shape_t *s = &shapes[0];
    data_t d = make_data(s, s->max_batch, 1);
    cudaStream_t stream;
    ck_assert_int_eq(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    float l0, l1;
    int c0, c1;
    dcps_mlp_gpu_t *on_default = gpu_model(s, NULL), *on_own = gpu_model(s, stream);
    float *g0 = gpu_grad(on_default, s, &d, s->max_batch, NULL, &l0, &c0);
    float *g1 = gpu_grad(on_own, s, &d, s->max_batch, stream, &l1, &c1);
    ck_assert_mem_eq(g0, g1, d.n_params * sizeof(float));
    ck_assert_mem_eq(&l0, &l1, sizeof l0);
    ck_assert_int_eq(c0, c1);

    /* Evaluation too: its copy stream must order itself against the model's. */
    dcps_dataset_t ds = {(uint32_t)d.n, (uint32_t)s->layers[0], d.x, d.y};
    float *d_params = to_device(d.params, d.n_params * sizeof(float));
    ck_assert_int_eq(dcps_gpu_sync(NULL), 0);
    float el0, el1, ea0, ea1;
    ck_assert_int_eq(dcps_mlp_gpu_evaluate(on_default, d_params, &ds, &el0, &ea0), 0);
    ck_assert_int_eq(dcps_mlp_gpu_evaluate(on_own, d_params, &ds, &el1, &ea1), 0);
    ck_assert_mem_eq(&el0, &el1, sizeof el0);
    ck_assert_mem_eq(&ea0, &ea1, sizeof ea0);

    dcps_gpu_free(d_params);
    dcps_mlp_gpu_destroy(&on_default);
    dcps_mlp_gpu_destroy(&on_own);
    ck_assert_int_eq(cudaStreamDestroy(stream), cudaSuccess);
    free(g0);
    free(g1);
    free_data(&d);
}
END_TEST
#endif

/* Data set sizes and chunk sizes that give one partial chunk, many chunks
 * (both staging buffers reused many times) and a set smaller than a chunk. */
static const struct {
    int shape;
    int n;
    int max_batch;
} evals[] = {{0, 200, 64}, {1, 100, 7}, {2, 5, 33}, {2, 99, 33}};
#define N_EVALS (int)(sizeof evals / sizeof evals[0])

START_TEST(evaluate_matches_cpu_and_repeats_exactly)
{
    shape_t s = shapes[evals[_i].shape];
    s.max_batch = evals[_i].max_batch;
    data_t d = make_data(&s, evals[_i].n, 0);
    dcps_dataset_t ds = {(uint32_t)d.n, (uint32_t)s.layers[0], d.x, d.y};

    float want_loss, want_acc, loss = -1.0f, acc = -1.0f, loss2 = -1.0f, acc2 = -1.0f;
    dcps_mlp_t *cpu = dcps_mlp_new(s.layers, s.n_layers, s.max_batch, NULL);
    ck_assert_ptr_nonnull(cpu);
    ck_assert_int_eq(dcps_mlp_evaluate(cpu, d.params, &ds, &want_loss, &want_acc), 0);

    dcps_mlp_gpu_t *m = gpu_model(&s, NULL);
    float *d_params = to_device(d.params, d.n_params * sizeof(float));
    ck_assert_int_eq(dcps_mlp_gpu_evaluate(m, d_params, &ds, &loss, &acc), 0);
    ck_assert_msg(fabs((double)loss - want_loss) <= LOSS_TOL * fmax(1.0, want_loss),
                  "n %d: loss %.9g on the GPU, %.9g on the CPU", d.n, (double)loss,
                  (double)want_loss);
    ck_assert_float_eq(acc, want_acc);
    ck_assert_int_eq(dcps_mlp_gpu_evaluate(m, d_params, &ds, &loss2, &acc2), 0);
    ck_assert_mem_eq(&loss2, &loss, sizeof loss);
    ck_assert_float_eq(acc2, acc);

    dcps_gpu_free(d_params);
    dcps_mlp_gpu_destroy(&m);
    dcps_mlp_destroy(&cpu);
    free_data(&d);
}
END_TEST

/* Powers of two from 2^-30 to 2^30 times a normal: products and differences
 * of very different magnitudes, where a fused multiply-add would round
 * differently. */
static float wide(dcps_rng_t *r)
{
    return ldexpf(dcps_rng_normal(r), (int)dcps_rng_below(r, 61) - 30);
}

START_TEST(sgd_step_is_the_c_loop_bit_for_bit)
{
    /* More elements than MAX_BLOCKS x THREADS, so the grid-stride loop runs,
     * and guard elements past n that must not change. */
    enum { N = DCPS_TEST_SIZE(3000017, 1048576 + 17), GUARD = 67 };
    const float lr = 0.0123f;
    dcps_rng_t r;
    dcps_rng_seed(&r, 5);
    float *w = xmalloc((N + GUARD) * sizeof(float)), *g = xmalloc((N + GUARD) * sizeof(float));
    float *got = xmalloc((N + GUARD) * sizeof(float));
    for (size_t i = 0; i < N + GUARD; i++) {
        w[i] = wide(&r);
        g[i] = wide(&r);
    }
    size_t bytes = (N + GUARD) * sizeof(float);
    float *d_w = to_device(w, bytes), *d_g = to_device(g, bytes);
    ck_assert_int_eq(dcps_mlp_gpu_sgd(d_w, d_g, N, lr, NULL), 0);
    ck_assert_int_eq(dcps_gpu_to_host(got, d_w, bytes, NULL), 0);
    ck_assert_int_eq(dcps_gpu_sync(NULL), 0);
    for (size_t i = 0; i < N; i++)
        w[i] -= lr * g[i];
    ck_assert_mem_eq(got, w, bytes);
    /* n = 0 touches nothing, not even the pointers. */
    ck_assert_int_eq(dcps_mlp_gpu_sgd(NULL, NULL, 0, lr, NULL), 0);
    dcps_gpu_free(d_w);
    dcps_gpu_free(d_g);
    free(w);
    free(g);
    free(got);
}
END_TEST

/* A model of shapes[1] with a batch of its data on the device, for the cases
 * that call it with bad arguments or make it fail. */
typedef struct {
    const shape_t *s;
    data_t d;
    dcps_mlp_gpu_t *m;
    float *d_params, *d_grad, *d_x;
    uint8_t *d_y;
} rig_t;

static rig_t rig_new(void)
{
    rig_t r;
    r.s = &shapes[1];
    r.d = make_data(r.s, r.s->max_batch, 1);
    size_t pbytes = r.d.n_params * sizeof(float);
    r.m = gpu_model(r.s, NULL);
    r.d_params = to_device(r.d.params, pbytes);
    r.d_grad = to_device(r.d.params, pbytes);
    r.d_x = to_device(r.d.x, (size_t)r.d.n * r.s->layers[0] * sizeof(float));
    r.d_y = to_device(r.d.y, (size_t)r.d.n);
    return r;
}

static void rig_free(rig_t *r)
{
    dcps_gpu_free(r->d_params);
    dcps_gpu_free(r->d_grad);
    dcps_gpu_free(r->d_x);
    dcps_gpu_free(r->d_y);
    dcps_mlp_gpu_destroy(&r->m);
    free_data(&r->d);
}

START_TEST(bad_batch_pointer_or_label_is_inval)
{
    rig_t r = rig_new();
    const shape_t *s = r.s;
    data_t d = r.d;
    dcps_mlp_gpu_t *m = r.m;
    float *d_params = r.d_params, *d_grad = r.d_grad, *d_x = r.d_x;
    uint8_t *d_y = r.d_y;
    float loss = -1.0f;
    int correct = -1;

    ck_assert_int_eq(
        dcps_mlp_gpu_forward_backward(m, d_params, d_x, d_y, 0, d_grad, &loss, &correct),
        DCPS_E_INVAL);
    ck_assert_int_eq(dcps_mlp_gpu_forward_backward(m, d_params, d_x, d_y, s->max_batch + 1, d_grad,
                                                   &loss, &correct),
                     DCPS_E_INVAL);
    ck_assert_int_eq(
        dcps_mlp_gpu_forward_backward(m, d_params, NULL, d_y, 4, d_grad, &loss, &correct),
        DCPS_E_INVAL);

    /* A label equal to the class count, on the device: found there. */
    uint8_t bad = (uint8_t)s->layers[s->n_layers - 1];
    ck_assert_int_eq(dcps_gpu_to_device(d_y + 3, &bad, 1, NULL), 0);
    ck_assert_int_eq(
        dcps_mlp_gpu_forward_backward(m, d_params, d_x, d_y, 4, d_grad, &loss, &correct),
        DCPS_E_INVAL);
    ck_assert_float_eq(loss, -1.0f);
    ck_assert_int_eq(correct, -1);
    /* The model is still usable: the same batch with the label restored. */
    ck_assert_int_eq(dcps_gpu_to_device(d_y + 3, &d.y[3], 1, NULL), 0);
    ck_assert_int_eq(
        dcps_mlp_gpu_forward_backward(m, d_params, d_x, d_y, 4, d_grad, &loss, &correct), 0);
    ck_assert_float_gt(loss, 0.0f);

    /* Evaluation checks the host labels and shape before launching. */
    float l = -1.0f, a = -1.0f;
    dcps_dataset_t ds = {(uint32_t)d.n, (uint32_t)s->layers[0], d.x, d.y};
    d.y[5] = bad;
    ck_assert_int_eq(dcps_mlp_gpu_evaluate(m, d_params, &ds, &l, &a), DCPS_E_INVAL);
    d.y[5] = 0;
    ds.dim = (uint32_t)s->layers[0] + 1;
    ck_assert_int_eq(dcps_mlp_gpu_evaluate(m, d_params, &ds, &l, &a), DCPS_E_INVAL);
    ds.dim = (uint32_t)s->layers[0];
    ds.n = 0;
    ck_assert_int_eq(dcps_mlp_gpu_evaluate(m, d_params, &ds, &l, &a), DCPS_E_INVAL);
    ck_assert_float_eq(l, -1.0f);
    ck_assert_float_eq(a, -1.0f);

    rig_free(&r);
}
END_TEST

#ifdef DCPS_EMU
#include "tests/cuda-emu/emu_hooks.h"

/* A launch that fails in the middle of the forward pass: the call returns the
 * error only after the work queued before it (products and kernels on the
 * caller's d_params and d_x) has run, and leaves no error pending, so the next
 * call on the same model succeeds. */
START_TEST(emu_a_failed_launch_drains_the_stream_and_the_model_goes_on)
{
    rig_t r = rig_new();
    float loss = -1.0f;
    int correct = -1;
    ck_assert_int_eq(dcps_gpu_sync(NULL), 0);
    emu_fail_launch(2); /* the second layer's bias_act: one product and kernel queued */
    ck_assert_int_eq(dcps_mlp_gpu_forward_backward(r.m, r.d_params, r.d_x, r.d_y, 8, r.d_grad,
                                                   &loss, &correct),
                     DCPS_E_CUDA);
    ck_assert_uint_eq(emu_pending(), 0);
    ck_assert_float_eq(loss, -1.0f);
    ck_assert_int_eq(dcps_mlp_gpu_forward_backward(r.m, r.d_params, r.d_x, r.d_y, 8, r.d_grad,
                                                   &loss, &correct),
                     0);
    ck_assert_float_gt(loss, 0.0f);
    rig_free(&r);
}
END_TEST

/* A model whose scratch does not fit the device's memory is DCPS_E_NOMEM (the
 * code with which device = auto falls back to the CPU), not DCPS_E_CUDA, and
 * the failure does not stay pending: a launch after it succeeds. */
START_TEST(emu_a_model_beyond_device_memory_is_nomem_and_leaves_no_error)
{
    const shape_t *s = &shapes[0];
    int err = 0;
    emu_set_device_bytes(4 << 20);
    ck_assert_ptr_null(dcps_mlp_gpu_new(s->layers, s->n_layers, 4096, NULL, &err));
    ck_assert_int_eq(err, DCPS_E_NOMEM);
    float w[3] = {1.0f, 2.0f, 3.0f}, g[3] = {1.0f, 1.0f, 1.0f};
    float *d_w = to_device(w, sizeof w), *d_g = to_device(g, sizeof g);
    ck_assert_int_eq(dcps_mlp_gpu_sgd(d_w, d_g, 3, 0.5f, NULL), 0);
    ck_assert_int_eq(dcps_gpu_to_host(w, d_w, sizeof w, NULL), 0);
    ck_assert_float_eq(w[2], 2.5f);
    dcps_gpu_free(d_w);
    dcps_gpu_free(d_g);
}
END_TEST
#endif

/* cuBLAS must load too (asked in the probe's child process). */
static int cublas_loads(void)
{
    return dcps_blas_load(NULL);
}

int main(void)
{
    DCPS_TEST_EMU_SWEEP();
    int gpu = dcps_test_gpu_probe(cublas_loads), forking = gpu >= 0;
    /* Without fork the tests share this process: only the GPU count is asked
     * here, so that the missing-library check still runs before any load. */
    if (gpu < 0)
        gpu = dcps_gpu_count() > 0;

    Suite *s = suite_create("mlp_gpu");
    TCase *cpu = tcase_create("no_gpu_needed");
    tcase_add_test(cpu, missing_cublas_library_is_nogpu_not_a_crash);
    tcase_add_test(cpu, new_rejects_bad_shapes_before_looking_for_a_gpu);
    tcase_add_test(cpu, without_a_gpu_new_reports_nogpu);
    suite_add_tcase(s, cpu);
    if (gpu) {
        TCase *tc = tcase_create("gpu");
        tcase_set_timeout(tc, 300);
        tcase_add_loop_test(tc, gradient_loss_and_count_match_cpu, 0, N_SHAPES * N_BATCHES);
#ifdef HAVE_CUDA
        tcase_add_test(tc, a_model_on_its_own_stream_gives_the_same_bits);
#endif
        tcase_add_loop_test(tc, evaluate_matches_cpu_and_repeats_exactly, 0, N_EVALS);
        tcase_add_test(tc, sgd_step_is_the_c_loop_bit_for_bit);
        tcase_add_test(tc, bad_batch_pointer_or_label_is_inval);
#ifdef DCPS_EMU
        tcase_add_test(tc, emu_a_failed_launch_drains_the_stream_and_the_model_goes_on);
        tcase_add_test(tc, emu_a_model_beyond_device_memory_is_nomem_and_leaves_no_error);
#endif
        suite_add_tcase(s, tc);
    }

    if (dcps_test_run_all(s, forking) != 0)
        return 1;
    if (!gpu) {
        printf("no usable GPU or cuBLAS: GPU tests skipped\n");
        return 77;
    }
    return 0;
}
