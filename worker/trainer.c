/* dcps — the trainer; see trainer.h. */
#include "worker/trainer.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "common/log.h"
#include "common/rng.h"
#include "kernels/gpu.h"
#include "kernels/mlp_gpu.h"
#include "worker/compress.h"
#include "worker/dcps.h"
#include "worker/idx.h"
#include "worker/mlp.h"

#define READY_TIMEOUT_MS 120000   /* how long ranks > 0 wait for rank 0's INIT */
#define SLICE_ALIGN 256           /* bytes; alignment of the GPU path's buffer slices */

/* Two paths share the loop in train(). The CPU path (gpu == 0) keeps params
 * and grad in one host allocation and runs dcps_mlp_t. The GPU path (gpu == 1)
 * runs dcps_mlp_gpu_t on the compute stream cs: parameters and gradient live on
 * the device, and their host twins are pinned slices that the pull fills and
 * the gradient is downloaded to; batches go through two pinned slots
 * h_x/h_y[k] and their device twins d_x/d_y[k], uploaded on the copy stream xs
 * one step ahead. The events order the slots: up[k] when slot k's upload is
 * done, done[k] when the forward and backward pass has read it, params_up when
 * the last parameter upload has left the pinned params.
 *
 * Both paths hand the host gradient to the compressor (worker/compress.h) and
 * push what it returns. Without the pipeline, pulls fill params. With it (CPU
 * path), a thread of its own (comm_t) pushes step t and pulls into `pulled`
 * while the loop computes step t + 1 at params = pulled − local_lr · g_t. */
typedef struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool started, busy, stop;
    dcps_encoded_t job; /* the push in flight */
    int rc;             /* of the last job */
    dcps_client_stats_t stats; /* after the last job */
} comm_t;

typedef struct {
    const dcps_config_t *cfg;
    int rank;
    int gpu;
    dcps_client_t *client;
    dcps_mlp_t *mlp; /* CPU path */
    dcps_dataset_t train, test;
    size_t n;
    float *params, *grad;            /* host, n each; see above for which allocation */
    float *pulled;                   /* what pulls fill: params, or its own n (pipeline) */
    float *grads[2];                 /* CPU path: grad's two buffers (the same one unless
                                        the pipeline runs) */
    dcps_compress_t *comp;
    float *pool;                     /* emulated compute: the synthetic gradients */
    bool pipe;                       /* the CD-SGD pipeline runs */
    float local_lr;
    comm_t comm;
    float *xb;                       /* CPU path: batch inputs */
    uint8_t *yb;
    uint32_t *order;                 /* this rank's sample indices for the epoch */
    dcps_mlp_gpu_t *gmlp;            /* GPU path from here on */
    dcps_stream_t cs, xs;
    dcps_event_t up[2], done[2], params_up;
    void *dev, *pinned; /* the two allocations the slices below are carved from */
    float *d_params, *d_grad;
    float *d_x[2], *h_x[2];
    uint8_t *d_y[2], *h_y[2];
    FILE *csv;
    double t0;
    char *err;
    size_t errlen;
} trainer_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int fail(trainer_t *t, int code, const char *what)
{
    const char *why = t->client ? dcps_client_error(t->client) : "";
    snprintf(t->err, t->errlen, "%s: %s", what, *why ? why : dcps_strerror(code));
    return code;
}

/* fail() for the GPU's own failures, which the client knows nothing about;
 * CUDA errors are logged with their cause where they happen. */
static int gpu_fail(trainer_t *t, int code, const char *what)
{
    snprintf(t->err, t->errlen, "%s: %s%s", what, dcps_strerror(code),
             code == DCPS_E_CUDA ? " (see the log)" : "");
    return code;
}

uint32_t dcps_trainer_share(uint64_t seed, int epoch, int rank, int workers, uint32_t n,
                            uint32_t *order)
{
    uint32_t k = 0;
    dcps_rng_t rng;
    dcps_rng_seed(&rng, seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(epoch + 1)));
    for (uint32_t i = 0; i < n; i++)
        order[i] = i;
    dcps_rng_shuffle_u32(&rng, order, n);
    for (uint32_t i = (uint32_t)rank; i < n; i += (uint32_t)workers)
        order[k++] = order[i];
    return k;
}

/* Names the tensor that entry i of the model belongs to ("layer 2 weights"). */
static void tensor_name(const dcps_config_t *cfg, size_t i, char *buf, size_t len)
{
    size_t at = 0;
    for (int l = 1; l < cfg->n_layers; l++) {
        size_t w = (size_t)cfg->layers[l - 1] * (size_t)cfg->layers[l];
        if (i < at + w + (size_t)cfg->layers[l]) {
            snprintf(buf, len, "layer %d %s, entry %zu", l, i < at + w ? "weights" : "bias",
                     i - at - (i < at + w ? 0 : w));
            return;
        }
        at += w + (size_t)cfg->layers[l];
    }
    snprintf(buf, len, "entry %zu", i);
}

/* The step's host gradient must be finite: else the step and tensor are named. */
static int check_finite(trainer_t *t, long step, const float *v)
{
    for (size_t i = 0; i < t->n; i++)
        if (!isfinite(v[i])) {
            char name[96];
            tensor_name(t->cfg, i, name, sizeof name);
            snprintf(t->err, t->errlen,
                     "step %ld: the gradient of %s (model entry %zu) is %g, not finite; lower "
                     "[optimizer] lr?",
                     step, name, i, (double)v[i]);
            return DCPS_E_NONFINITE;
        }
    return 0;
}

/* Samples in the batch that starts at position at of a share of mine; 0 past its end. */
static int batch_len(uint32_t mine, uint32_t at, int batch_size)
{
    if (at >= mine)
        return 0;
    return mine - at < (uint32_t)batch_size ? (int)(mine - at) : batch_size;
}

/* Copies the b samples at positions at.. of this epoch's share into x and y. */
static void gather(trainer_t *t, uint32_t at, int b, float *x, uint8_t *y)
{
    const uint32_t dim = t->train.dim;
    for (int j = 0; j < b; j++) {
        uint32_t i = t->order[at + (uint32_t)j];
        memcpy(x + (size_t)j * dim, t->train.x + (size_t)i * dim, dim * sizeof(float));
        y[j] = t->train.y[i];
    }
}

/* Pulls the parameters into t->pulled (t->params unless the pipeline runs); on
 * the GPU path, where they are the same, also uploads them to
 * d_params on cs, so that the next pass and evaluation (on cs) see them. The
 * host first waits for params_up: the previous upload has left the pinned
 * buffer that the pull overwrites. `exact`: the parameters themselves, also
 * under delta pulls. */
static int pull(trainer_t *t, const char *what, bool exact)
{
    int rc;
    if (t->gpu && (rc = dcps_gpu_event_sync(t->params_up)) != 0)
        return gpu_fail(t, rc, "uploading the parameters");
    rc = exact ? dcps_client_pull_exact(t->client, t->pulled)
               : dcps_client_pull(t->client, t->pulled);
    if (rc != 0)
        return fail(t, rc, what);
    if (t->gpu &&
        ((rc = dcps_gpu_to_device(t->d_params, t->params, t->n * sizeof(float), t->cs)) != 0 ||
         (rc = dcps_gpu_event_record(t->params_up, t->cs)) != 0))
        return gpu_fail(t, rc, "uploading the parameters");
    return 0;
}

/* The test loss and accuracy at the parameters last pulled. */
static int evaluate(trainer_t *t, float *loss, float *acc)
{
    if (t->pool) { /* emulated compute: no model to evaluate */
        *loss = *acc = NAN;
        return 0;
    }
    int rc = t->gpu ? dcps_mlp_gpu_evaluate(t->gmlp, t->d_params, &t->test, loss, acc)
                    : dcps_mlp_evaluate(t->mlp, t->pulled, &t->test, loss, acc);
    if (rc == 0)
        return 0;
    return t->gpu ? gpu_fail(t, rc, "evaluation") : fail(t, rc, "evaluation");
}

static int push_encoded(trainer_t *t, const dcps_encoded_t *e)
{
    int rc = e->dense ? dcps_client_push_dense(t->client, e->values)
                      : dcps_client_push_sparse(t->client, e->idx, e->values, e->k);
    return rc == 0 ? 0 : fail(t, rc, "push");
}

/* The pipeline's thread: runs each posted job (push, then pull into pulled). */
static void *comm_main(void *arg)
{
    trainer_t *t = arg;
    comm_t *c = &t->comm;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->busy && !c->stop)
            pthread_cond_wait(&c->cv, &c->mu);
        if (!c->busy)
            break;
        pthread_mutex_unlock(&c->mu);
        int rc = push_encoded(t, &c->job);
        if (rc == 0)
            rc = pull(t, "pull", false);
        pthread_mutex_lock(&c->mu);
        c->rc = rc;
        dcps_client_stats(t->client, &c->stats);
        c->busy = false;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Waits until no job is in flight; returns the last job's result (once). */
static int comm_wait(trainer_t *t)
{
    comm_t *c = &t->comm;
    pthread_mutex_lock(&c->mu);
    while (c->busy)
        pthread_cond_wait(&c->cv, &c->mu);
    int rc = c->rc;
    c->rc = 0;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void comm_post(trainer_t *t, const dcps_encoded_t *e)
{
    comm_t *c = &t->comm;
    pthread_mutex_lock(&c->mu);
    c->job = *e;
    c->busy = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static int comm_start(trainer_t *t)
{
    comm_t *c = &t->comm;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    dcps_client_stats(t->client, &c->stats);
    int rc = pthread_create(&c->thread, NULL, comm_main, t);
    if (rc != 0) {
        snprintf(t->err, t->errlen, "cannot start the pipeline's thread: %s", strerror(rc));
        return DCPS_E_NOMEM;
    }
    c->started = true;
    return 0;
}

static void comm_stop(trainer_t *t)
{
    comm_t *c = &t->comm;
    if (!c->started)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    c->started = false;
}

/* The client's counters; while the pipeline's thread runs a job, as of the
 * job before (only this thread posts jobs, so an idle client stays idle). */
static void stats(trainer_t *t, dcps_client_stats_t *st)
{
    if (!t->pipe) {
        dcps_client_stats(t->client, st);
        return;
    }
    pthread_mutex_lock(&t->comm.mu);
    if (t->comm.busy)
        *st = t->comm.stats;
    else
        dcps_client_stats(t->client, st);
    pthread_mutex_unlock(&t->comm.mu);
}

/* After the gradient of step `step` is in t->grad: checks it, encodes it,
 * pushes it and pulls. With the pipeline, first waits for the previous step's
 * push and pull, then sets params for the next step to pulled − local_lr · g
 * and leaves this step's push and pull to the pipeline's thread (except in the
 * warm-up steps, which wait for it). */
static int communicate(trainer_t *t, long step, int epoch)
{
    dcps_encoded_t e;
    int rc;
    /* The pipeline's thread may write t->err: it is idle from here on. */
    if (t->pipe && (rc = comm_wait(t)) != 0)
        return rc;
    if ((rc = check_finite(t, step, t->grad)) != 0)
        return rc;
    if ((rc = dcps_compress_encode(t->comp, t->grad, step, epoch, &e)) != 0) {
        snprintf(t->err, t->errlen, "step %ld: compressing the gradient: %s", step,
                 dcps_strerror(rc));
        return rc;
    }
    if (!t->pipe) {
        if ((rc = push_encoded(t, &e)) != 0)
            return rc;
        return pull(t, "pull", false);
    }
    if (step <= t->cfg->warmup_steps) {
        comm_post(t, &e);
        if ((rc = comm_wait(t)) != 0)
            return rc;
        memcpy(t->params, t->pulled, t->n * sizeof(float));
        return 0;
    }
    for (size_t i = 0; i < t->n; i++)
        t->params[i] = t->pulled[i] - t->local_lr * t->grad[i];
    comm_post(t, &e);
    return 0;
}

/* One step of the CPU path on the b samples at position at of the share. With
 * the pipeline the gradient alternates between two buffers: a dense push may
 * send it while the next step computes. */
static int cpu_step(trainer_t *t, long step, int epoch, uint32_t at, int b, float *loss,
                    int *correct)
{
    int rc;
    if (t->pool) {
        int ms = t->cfg->compute_ms;
        nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
        t->grad = t->pool + dcps_trainer_synthetic_offset(t->cfg->seed, t->rank, step);
        *loss = NAN;
        *correct = 0;
        return communicate(t, step, epoch);
    }
    t->grad = t->grads[step & 1];
    gather(t, at, b, t->xb, t->yb);
    if ((rc = dcps_mlp_forward_backward(t->mlp, t->params, t->xb, t->yb, b, t->grad, loss,
                                        correct)) != 0)
        return fail(t, rc, "forward/backward");
    return communicate(t, step, epoch);
}

/* Gathers the b samples at position at of the share into pinned slot k and
 * starts their upload to d_x[k], d_y[k] on xs, recorded by up[k]. Slot k was
 * last used two batches ago: the host waits for up[k] before overwriting the
 * pinned side (the old upload has left it), and xs waits for done[k] before
 * overwriting the device side (the old pass has read it). */
static int stage(trainer_t *t, int k, uint32_t at, int b)
{
    int rc;
    if ((rc = dcps_gpu_event_sync(t->up[k])) != 0)
        return gpu_fail(t, rc, "batch upload");
    gather(t, at, b, t->h_x[k], t->h_y[k]);
    if ((rc = dcps_gpu_event_wait(t->xs, t->done[k])) != 0 ||
        (rc = dcps_gpu_to_device(t->d_x[k], t->h_x[k], (size_t)b * t->train.dim * sizeof(float),
                                 t->xs)) != 0 ||
        (rc = dcps_gpu_to_device(t->d_y[k], t->h_y[k], (size_t)b, t->xs)) != 0 ||
        (rc = dcps_gpu_event_record(t->up[k], t->xs)) != 0)
        return gpu_fail(t, rc, "batch upload");
    return 0;
}

/* One step of the GPU path on the b samples staged in slot k. The next batch
 * of the epoch (next_b samples at position next_at; none when next_b is 0) is
 * staged into the other slot after the gradient's download is launched: the
 * host gathers it while the GPU works, and its upload on xs runs during the
 * push and pull. The forward/backward pass synchronises cs once; the gradient
 * download is the second and last wait of a step. The gradient is compressed
 * on the host (the GPU top-k kernel is not used here yet). */
static int gpu_step(trainer_t *t, long step, int epoch, int k, int b, uint32_t next_at,
                    int next_b, float *loss, int *correct)
{
    size_t bytes = t->n * sizeof(float);
    int rc;
    if ((rc = dcps_gpu_event_wait(t->cs, t->up[k])) != 0 ||
        (rc = dcps_mlp_gpu_forward_backward(t->gmlp, t->d_params, t->d_x[k], t->d_y[k], b,
                                            t->d_grad, loss, correct)) != 0 ||
        (rc = dcps_gpu_event_record(t->done[k], t->cs)) != 0)
        return gpu_fail(t, rc, "forward/backward");
    if ((rc = dcps_gpu_to_host(t->grad, t->d_grad, bytes, t->cs)) != 0)
        return gpu_fail(t, rc, "gradient download");
    if (next_b > 0 && (rc = stage(t, k ^ 1, next_at, next_b)) != 0)
        return rc;
    if ((rc = dcps_gpu_sync(t->cs)) != 0)
        return gpu_fail(t, rc, "gradient download");
    return communicate(t, step, epoch);
}

/* Mean staleness of this worker's pushes so far; 0 before the first. */
static double staleness_mean(const dcps_client_stats_t *st)
{
    return st->staleness_count ? (double)st->staleness_sum / (double)st->staleness_count : 0.0;
}

static void csv_row(trainer_t *t, long step, int epoch, double loss, double train_acc,
                    double test_acc)
{
    dcps_client_stats_t st;
    if (!t->csv)
        return;
    stats(t, &st);
    fprintf(t->csv, "%.3f,%ld,%d,%.6f,%.4f,", now_s() - t->t0, step, epoch, loss, train_acc);
    if (test_acc >= 0)
        fprintf(t->csv, "%.4f", test_acc);
    fprintf(t->csv, ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%.3f\n", st.bytes_pushed,
            st.bytes_pulled, st.bytes_pushed_dense + st.bytes_pulled_dense, staleness_mean(&st));
    fflush(t->csv);
}

/* Hands out consecutive SLICE_ALIGN-aligned slices of one allocation; with
 * base NULL it only measures, so that layout_gpu() both sizes and carves. */
struct carver {
    char *base;
    size_t used;
};

static void *carve(struct carver *c, size_t bytes)
{
    size_t at = (c->used + SLICE_ALIGN - 1) / SLICE_ALIGN * SLICE_ALIGN;
    c->used = at + bytes;
    return c->base ? c->base + at : NULL;
}

/* The GPU path's buffers: on the device the parameters, gradient and two batch
 * slots; pinned on the host params, grad and two batch slots. */
static void layout_gpu(trainer_t *t, struct carver *dev, struct carver *pin)
{
    size_t vec = t->n * sizeof(float), ybytes = (size_t)t->cfg->batch_size;
    size_t xbytes = ybytes * t->train.dim * sizeof(float);
    t->d_params = carve(dev, vec);
    t->d_grad = carve(dev, vec);
    t->params = carve(pin, vec);
    t->grad = carve(pin, vec);
    for (int k = 0; k < 2; k++) {
        t->d_x[k] = carve(dev, xbytes);
        t->d_y[k] = carve(dev, ybytes);
        t->h_x[k] = carve(pin, xbytes);
        t->h_y[k] = carve(pin, ybytes);
    }
}

/* Sets up the GPU path: streams, model, events, buffers.
 * When the GPU model cannot run (DCPS_E_NOGPU: cuBLAS is not loadable, say)
 * and device = auto, releases what it made, clears t->gpu and returns 0: the
 * CPU path runs instead. Anything else that fails is an error; teardown()
 * releases what was made. */
static int setup_gpu(trainer_t *t)
{
    const dcps_config_t *cfg = t->cfg;
    struct carver dev = {NULL, 0}, pin = {NULL, 0};
    char name[256];
    int rc;

    if ((rc = dcps_gpu_stream_new(&t->cs)) == 0 && (rc = dcps_gpu_stream_new(&t->xs)) == 0)
        t->gmlp = dcps_mlp_gpu_new(cfg->layers, cfg->n_layers, cfg->batch_size, t->cs, &rc);
    if (rc == DCPS_E_NOGPU && cfg->device == DCPS_DEVICE_AUTO) {
        dcps_gpu_stream_destroy(&t->xs);
        dcps_gpu_stream_destroy(&t->cs);
        t->gpu = 0;
        DCPS_INFO("device = auto: a GPU is present but the GPU model cannot run (see above), "
                  "so this worker trains on the CPU");
        return 0;
    }
    if (rc == DCPS_E_NOGPU) {
        snprintf(t->err, t->errlen,
                 "[worker] device = gpu, but the GPU model cannot run (cuBLAS missing? see the "
                 "log); use device = auto or cpu");
        return rc;
    }
    if (rc != 0)
        return gpu_fail(t, rc, "GPU set-up");
    for (int k = 0; k < 2; k++)
        if ((rc = dcps_gpu_event_new(&t->up[k])) != 0 ||
            (rc = dcps_gpu_event_new(&t->done[k])) != 0)
            return gpu_fail(t, rc, "GPU set-up");
    if ((rc = dcps_gpu_event_new(&t->params_up)) != 0)
        return gpu_fail(t, rc, "GPU set-up");

    layout_gpu(t, &dev, &pin);
    if ((rc = dcps_gpu_alloc(&t->dev, dev.used)) != 0 ||
        (rc = dcps_gpu_host_alloc(&t->pinned, pin.used)) != 0)
        return gpu_fail(t, rc, "GPU memory");
    dev.base = t->dev;
    pin.base = t->pinned;
    dev.used = pin.used = 0;
    layout_gpu(t, &dev, &pin);
    t->pulled = t->params;
    if (dcps_gpu_name(name, sizeof name) == 0)
        DCPS_INFO("rank %d trains on the GPU (%s)", t->rank, name);
    return 0;
}

/* The CPU path's buffers and model: params and a gradient, and with the
 * pipeline a second gradient and the pulled parameters. Emulated compute needs
 * no gradient buffers (its gradients are windows of the pool) and no model. */
static int setup_cpu(trainer_t *t)
{
    const dcps_config_t *cfg = t->cfg;
    bool emulated = cfg->compute_ms > 0;
    int rc;
    /* params [gradient] [second gradient, pulled] */
    t->params = calloc((t->pipe ? 2 : 1) * (emulated ? 1 : 2) * t->n, sizeof(float));
    t->xb = malloc((size_t)cfg->batch_size * t->train.dim * sizeof(float));
    t->yb = malloc((size_t)cfg->batch_size);
    if (!t->params || !t->xb || !t->yb) {
        snprintf(t->err, t->errlen, "out of memory");
        return DCPS_E_NOMEM;
    }
    t->pulled = t->params;
    if (emulated) {
        if (t->pipe)
            t->pulled = t->params + t->n;
        t->pool = malloc((t->n + DCPS_SYNTH_SLACK) * sizeof(float));
        if (!t->pool) {
            snprintf(t->err, t->errlen, "out of memory (synthetic gradients)");
            return DCPS_E_NOMEM;
        }
        dcps_trainer_synthetic_pool(cfg->seed, t->rank, t->pool, t->n + DCPS_SYNTH_SLACK);
        DCPS_INFO("rank %d emulates its computation: %d ms a step, synthetic gradients of "
                  "%zu parameters", t->rank, cfg->compute_ms, t->n);
        return 0;
    }
    t->grads[0] = t->grads[1] = t->grad = t->params + t->n;
    if (t->pipe) {
        t->grads[1] = t->params + 2 * t->n;
        t->pulled = t->params + 3 * t->n;
    }
    t->mlp = dcps_mlp_new(cfg->layers, cfg->n_layers, cfg->batch_size, &rc);
    if (!t->mlp)
        return fail(t, rc, "model");
    return 0;
}

static int setup(trainer_t *t, const char *metrics_path)
{
    const dcps_config_t *cfg = t->cfg;
    int rc;

    int gpus = dcps_gpu_count();
    if (cfg->device == DCPS_DEVICE_GPU && gpus == 0) {
        snprintf(t->err, t->errlen, "[worker] device = gpu, but no GPU is usable: %s; use "
                 "device = auto or cpu", dcps_gpu_why());
        return DCPS_E_NOGPU;
    }
    /* Emulated compute runs no model, so there is nothing for a GPU to do. */
    t->gpu = cfg->device != DCPS_DEVICE_CPU && gpus > 0 && cfg->compute_ms == 0;

    if ((rc = dcps_dataset_load(cfg->train_images, cfg->train_labels, (uint32_t)cfg->train_limit,
                                &t->train, t->err, t->errlen)) != 0 ||
        (rc = dcps_dataset_load(cfg->test_images, cfg->test_labels, 0, &t->test, t->err,
                                t->errlen)) != 0)
        return rc;
    if (t->train.dim != (uint32_t)cfg->layers[0] || t->test.dim != (uint32_t)cfg->layers[0]) {
        snprintf(t->err, t->errlen, "images have %u pixels, [model] layers starts with %d",
                 t->train.dim, cfg->layers[0]);
        return DCPS_E_CONFIG;
    }
    if (t->train.n < (uint32_t)cfg->workers) {
        snprintf(t->err, t->errlen, "%u training examples for %d workers", t->train.n,
                 cfg->workers);
        return DCPS_E_CONFIG;
    }

    t->n = cfg->n_params;
    t->order = malloc(t->train.n * sizeof(uint32_t));
    if (!t->order) {
        snprintf(t->err, t->errlen, "out of memory");
        return DCPS_E_NOMEM;
    }
    if (t->gpu && (rc = setup_gpu(t)) != 0)
        return rc;
    if (t->gpu && cfg->pipeline) {
        snprintf(t->err, t->errlen,
                 "[compression] pipeline = true runs on the CPU path only in this version; "
                 "set [worker] device = cpu");
        return DCPS_E_CONFIG;
    }
    t->pipe = cfg->pipeline;
    t->local_lr = (float)(cfg->local_lr > 0 ? cfg->local_lr : cfg->lr);
    if (!t->gpu && (rc = setup_cpu(t)) != 0) /* also when setup_gpu() fell back */
        return rc;
    t->comp = dcps_compress_new(cfg, t->n, &rc);
    if (!t->comp) {
        snprintf(t->err, t->errlen, "gradient compressor: %s", dcps_strerror(rc));
        return rc;
    }

    if (metrics_path && *metrics_path) {
        t->csv = fopen(metrics_path, "w");
        if (!t->csv) {
            snprintf(t->err, t->errlen, "cannot write metrics file %s: %s", metrics_path,
                     strerror(errno));
            return DCPS_E_IO;
        }
        fprintf(t->csv,
                "elapsed_s,step,epoch,loss,train_acc,test_acc,bytes_pushed,bytes_pulled,"
                "bytes_dense,staleness_mean\n");
    }

    t->client = dcps_client_new(cfg, t->rank, &rc, t->err, t->errlen);
    if (!t->client)
        return rc;
    if (t->rank == 0 && !dcps_client_initialized(t->client)) {
        dcps_mlp_init_params(cfg->layers, cfg->n_layers, cfg->seed, t->params);
        if ((rc = dcps_client_init(t->client, t->params)) != 0)
            return fail(t, rc, "initialising the shards");
        DCPS_INFO("initialised %zu parameters (seed %" PRIu64 ")", t->n, cfg->seed);
    } else if ((rc = dcps_client_wait_ready(t->client, READY_TIMEOUT_MS)) != 0) {
        return fail(t, rc, "waiting for rank 0");
    }
    if ((rc = pull(t, "first pull", false)) != 0)
        return rc;
    if (!t->pipe)
        return 0;
    memcpy(t->params, t->pulled, t->n * sizeof(float));
    return comm_start(t);
}

static void teardown(trainer_t *t)
{
    comm_stop(t);
    dcps_compress_destroy(&t->comp);
    dcps_client_close(&t->client);
    dcps_mlp_destroy(&t->mlp);
    /* The GPU path in reverse order of set-up, once neither stream has work
     * left that touches the buffers (an upload may be in flight after a
     * failure); the model goes before the stream it borrows. */
    if (t->xs)
        dcps_gpu_sync(t->xs);
    if (t->cs)
        dcps_gpu_sync(t->cs);
    dcps_gpu_host_free(t->pinned);
    dcps_gpu_free(t->dev);
    dcps_gpu_event_destroy(&t->params_up);
    for (int k = 1; k >= 0; k--) {
        dcps_gpu_event_destroy(&t->done[k]);
        dcps_gpu_event_destroy(&t->up[k]);
    }
    dcps_mlp_gpu_destroy(&t->gmlp);
    dcps_gpu_stream_destroy(&t->xs);
    dcps_gpu_stream_destroy(&t->cs);
    if (t->csv)
        fclose(t->csv);
    free(t->order);
    free(t->pool);
    free(t->yb);
    free(t->xb);
    if (!t->gpu) /* on the GPU path params is a slice of pinned */
        free(t->params);
    dcps_dataset_free(&t->train);
    dcps_dataset_free(&t->test);
}

static int train(trainer_t *t, FILE *out)
{
    const dcps_config_t *cfg = t->cfg;
    long step = 0;
    double win_loss = 0, epoch_loss = 0, t_win = now_s();
    long win_correct = 0, win_samples = 0, epoch_steps = 0, samples = 0;
    float test_loss, test_acc;
    int rc;

    /* A restarted worker resumes where its previous process left off: the
     * shards said which step of this rank they expect (0 for a new one). */
    dcps_client_stats_t st0;
    stats(t, &st0);
    long resume = (long)st0.clock;
    if (resume > 0)
        DCPS_NOTICE("resuming at step %ld: the shards hold this rank's first %ld steps",
                    resume + 1, resume);

    t->t0 = now_s();
    for (int epoch = 1; epoch <= cfg->epochs; epoch++) {
        uint32_t mine = dcps_trainer_share(t->cfg->seed, epoch, t->rank, cfg->workers,
                                           t->train.n, t->order);
        long in_epoch = ((long)mine + cfg->batch_size - 1) / cfg->batch_size;
        if (step + in_epoch <= resume) {
            step += in_epoch;
            continue;
        }
        uint32_t first = 0; /* where this epoch starts */
        if (step < resume) {
            first = (uint32_t)(resume - step) * (uint32_t)cfg->batch_size;
            step = resume;
        }
        /* Delta pulls follow the density warm-up as pushes do (the pipeline's
         * thread is idle here: the last epoch ended with comm_wait). */
        dcps_client_set_pull_density(
            t->client, dcps_config_density_at(dcps_config_pull_density(cfg),
                                              cfg->density_warmup_epochs, epoch));
        epoch_loss = 0;
        epoch_steps = 0;
        /* The GPU path stages each batch a step ahead (step s uses slot s & 1);
         * the epoch's first batch is staged here. */
        if (t->gpu && (rc = stage(t, (int)((step + 1) & 1), first,
                                  batch_len(mine, first, cfg->batch_size))) != 0)
            return rc;
        for (uint32_t at = first; at < mine; at += (uint32_t)cfg->batch_size) {
            int b = batch_len(mine, at, cfg->batch_size);
            uint32_t next = at + (uint32_t)cfg->batch_size;
            float loss;
            int correct;
            step++;
            rc = t->gpu ? gpu_step(t, step, epoch, (int)(step & 1), b, next,
                                   batch_len(mine, next, cfg->batch_size), &loss, &correct)
                        : cpu_step(t, step, epoch, at, b, &loss, &correct);
            if (rc != 0)
                return rc;
            if (cfg->delay_ms > 0)
                nanosleep(&(struct timespec){cfg->delay_ms / 1000,
                                             (cfg->delay_ms % 1000) * 1000000L},
                          NULL);

            win_loss += loss;
            epoch_loss += loss;
            epoch_steps++;
            win_correct += correct;
            win_samples += b;
            samples += b;
            if (step % cfg->log_every == 0) {
                dcps_client_stats_t st;
                stats(t, &st);
                double tn = now_s();
                double wl = win_loss / (double)cfg->log_every;
                double wa = t->pool ? NAN : (double)win_correct / (double)win_samples;
                fprintf(out,
                        "rank=%d step=%ld epoch=%d loss=%.4f train_acc=%.4f samples_per_s=%.0f "
                        "bytes_pushed=%" PRIu64 " bytes_pulled=%" PRIu64 " staleness=%.2f\n",
                        t->rank, step, epoch, wl, wa, (double)win_samples / (tn - t_win),
                        st.bytes_pushed, st.bytes_pulled,
                        staleness_mean(&st));
                fflush(out);
                csv_row(t, step, epoch, wl, wa, -1);
                win_loss = 0;
                win_correct = win_samples = 0;
                t_win = tn;
            }
        }
        if ((t->pipe && (rc = comm_wait(t)) != 0) || (rc = evaluate(t, &test_loss, &test_acc)) != 0)
            return rc;
        fprintf(out, "rank=%d epoch=%d done: steps=%ld test_loss=%.4f test_acc=%.4f\n", t->rank,
                epoch, step, test_loss, test_acc);
        fflush(out);
        csv_row(t, step, epoch, epoch_loss / (double)epoch_steps, -1, test_acc);
    }

    /* Meet the other workers, so that every rank evaluates the same final model. */
    if ((rc = dcps_client_done(t->client)) != 0)
        return fail(t, rc, "saying done");
    if ((rc = dcps_client_barrier(t->client, 1)) != 0)
        return fail(t, rc, "final barrier");
    /* The model is the shards' parameters themselves, not a delta pull's mirror. */
    if ((rc = pull(t, "final pull", true)) != 0 || (rc = evaluate(t, &test_loss, &test_acc)) != 0)
        return rc;

    double elapsed = now_s() - t->t0;
    dcps_client_stats_t st;
    stats(t, &st);
    uint64_t dense = st.bytes_pushed_dense + st.bytes_pulled_dense;
    long ran = step - resume; /* steps this process computed */
    double train_loss = epoch_loss / (double)(epoch_steps ? epoch_steps : 1);
    csv_row(t, step, cfg->epochs, train_loss, -1, test_acc);
    fprintf(out,
            "final: rank=%d test_acc=%.4f test_loss=%.4f train_loss=%.4f steps=%ld epochs=%d "
            "elapsed_s=%.2f samples_per_s=%.0f bytes_pushed=%" PRIu64 " bytes_pulled=%" PRIu64
            " bytes_per_step=%.0f traffic_ratio=%.5f mode=%s optimizer=%s compression=%s "
            "pull=%s density=%g pipeline=%s staleness_mean=%.3f staleness_max=%" PRIu64
            " dropped=%" PRIu64 " retries=%" PRIu64 " device=%s workers=%d compute_ms=%d\n",
            t->rank, test_acc, test_loss, train_loss, step, cfg->epochs,
            elapsed, (double)samples / elapsed, st.bytes_pushed, st.bytes_pulled,
            (double)(st.bytes_pushed + st.bytes_pulled) / (double)(ran ? ran : 1),
            dense ? (double)(st.bytes_pushed + st.bytes_pulled) / (double)dense : 1.0,
            dcps_config_mode_name(cfg->mode), dcps_config_optimizer_name(cfg->opt_kind),
            dcps_config_push_name(cfg->push), dcps_config_pull_name(cfg->pull),
            cfg->push == DCPS_PUSH_DENSE ? 1.0 : cfg->density, t->pipe ? "true" : "false",
            staleness_mean(&st), st.staleness_max, st.dropped, st.retries,
            t->gpu ? "gpu" : "cpu", cfg->workers, cfg->compute_ms);
    fflush(out);
    return 0;
}

void dcps_trainer_synthetic_pool(uint64_t seed, int rank, float *pool, size_t len)
{
    dcps_rng_t r;
    dcps_rng_seed(&r, seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1)));
    for (size_t i = 0; i < len; i++)
        pool[i] = DCPS_SYNTH_STD * dcps_rng_normal(&r);
}

size_t dcps_trainer_synthetic_offset(uint64_t seed, int rank, long step)
{
    dcps_rng_t r;
    dcps_rng_seed(&r, seed ^ ((uint64_t)rank << 40) ^ (uint64_t)step);
    return (size_t)dcps_rng_below(&r, DCPS_SYNTH_SLACK + 1);
}

int dcps_trainer_run(const dcps_config_t *cfg, int rank, const char *metrics_path, FILE *out,
                     char *err, size_t errlen)
{
    trainer_t t;
    memset(&t, 0, sizeof t);
    t.cfg = cfg;
    t.rank = rank;
    t.err = err;
    t.errlen = errlen;
    int rc = setup(&t, metrics_path);
    if (rc == 0)
        rc = train(&t, out);
    teardown(&t);
    return rc;
}
