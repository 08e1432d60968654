/* dcps — the trainer; see trainer.h. */
#include "worker/trainer.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/carve.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/rng.h"
#include "kernels/gpu.h"
#include "model/idx.h"
#include "model/mlp.h"
#include "model/mlp_gpu.h"
#include "worker/internal.h"
#include "worker/job.h"
#include "worker/step_gpu.h"


/* Two paths share the loop in train(). The CPU path (gpu == 0) keeps params
 * and grad in one host allocation and runs dcps_mlp_t. The GPU path (gpu == 1)
 * runs dcps_mlp_gpu_t on the compute stream cs: parameters and gradient live on
 * the device, with host twins in pinned slices; batches go through two pinned
 * slots h_x/h_y[k] and their device twins d_x/d_y[k], uploaded on the copy
 * stream xs one step ahead. The events order the slots: up[k] when slot k's
 * upload is done, done[k] when the forward and backward pass has read it,
 * params_up when the last parameter upload has left the pinned params.
 *
 * Both paths hand the gradient and parameters to the step (worker/step.h),
 * which encodes, pushes and pulls, with the CD-SGD pipeline when the job asks.
 * The CPU path hands it host arrays. The GPU path hands it d_grad and d_params
 * on cs (device arrays, dcps_step_use_stream; dev_step), as dcps.torch does
 * for a CUDA model: the residual and the Top-k selection stay on the GPU and
 * only the k pairs cross PCIe. Where the step's device path does not do what
 * the job asks, or its buffers do not fit on the GPU, the GPU path hands it
 * the pinned twins instead: the gradient is downloaded and compressed on the
 * host, and the pulled parameters uploaded. */
typedef struct {
    const dcps_config_t *cfg;
    int rank;
    int gpu;
    dcps_step_t *step;
    dcps_mlp_t *mlp; /* CPU path */
    bool emulated;                   /* [worker] compute_ms > 0: no data, no model */
    dcps_dataset_t train, test;      /* both empty when emulated */
    uint32_t examples;               /* in the job's training set, all ranks together */
    size_t n;
    float *params, *grad;            /* host, n each; see above for which allocation */
    float *pool;                     /* emulated compute: the synthetic gradients */
    float *xb;                       /* CPU path: batch inputs */
    uint8_t *yb;
    uint32_t *order;                 /* this rank's sample indices (none when emulated) */
    dcps_mlp_gpu_t *gmlp;            /* GPU path from here on */
    bool dev_step;                   /* the step takes d_grad and d_params */
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

/* The step's own sentence for a failure of the step's. */
static int step_fail(trainer_t *t, int code)
{
    snprintf(t->err, t->errlen, "%s", dcps_step_error(t->step));
    return code;
}

static int fail(trainer_t *t, int code, const char *what)
{
    snprintf(t->err, t->errlen, "%s: %s", what, dcps_strerror(code));
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

/* Loads one of the job's data sets; an error names the [data] key of the file
 * it is about and, for a file that is missing, where the default files come
 * from. */
static int load_set(trainer_t *t, const char *which, const char *images, const char *labels,
                    uint32_t limit, dcps_dataset_t *ds)
{
    char why[1024];
    int rc = dcps_dataset_load(images, labels, limit, ds, why, sizeof why);
    if (rc == 0)
        return 0;
    bool about_labels = strncmp(why, labels, strlen(labels)) == 0 &&
                        strncmp(why, images, strlen(images)) != 0;
    snprintf(t->err, t->errlen, "[data] %s_%s: %s%s", which, about_labels ? "labels" : "images",
             why,
             rc == DCPS_E_IO && strstr(why, "cannot open")
                 ? " (the default files are Debian's package dataset-fashion-mnist: apt install "
                   "dataset-fashion-mnist, or set the [data] paths)"
                 : "");
    return rc;
}

/* Names the model's tensors for the step's error messages ("layer 2 weights"). */
static int name_tensors(trainer_t *t)
{
    const dcps_config_t *cfg = t->cfg;
    size_t off[2 * DCPS_MAX_LAYERS], at = 0;
    char text[2 * DCPS_MAX_LAYERS][32];
    const char *names[2 * DCPS_MAX_LAYERS];
    size_t k = 0;
    for (int l = 1; l < cfg->n_layers; l++)
        for (int bias = 0; bias < 2; bias++, k++) {
            snprintf(text[k], sizeof text[k], "layer %d %s", l, bias ? "bias" : "weights");
            names[k] = text[k];
            off[k] = at;
            at += bias ? (size_t)cfg->layers[l] : (size_t)cfg->layers[l - 1] * cfg->layers[l];
        }
    return dcps_step_set_names(t->step, off, names, k) == 0 ? 0 : step_fail(t, DCPS_E_INVAL);
}

/* An emulated worker's share of the examples: as many as dcps_job_share()
 * would deal it (every workers-th from its rank), without the indices, since
 * it has no examples to pick. */
static uint32_t emulated_share(const trainer_t *t)
{
    uint32_t workers = (uint32_t)t->cfg->workers;
    return (t->examples - (uint32_t)t->rank + workers - 1) / workers;
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

/* GPU path on host arrays: uploads the parameters the step left in t->params
 * to d_params on cs, so that the next pass and evaluation (on cs) see them,
 * and records params_up: the host waits for it before the step overwrites
 * params again. */
static int upload_params(trainer_t *t)
{
    int rc;
    if (t->gpu && !t->dev_step &&
        ((rc = dcps_gpu_to_device(t->d_params, t->params, t->n * sizeof(float), t->cs)) != 0 ||
         (rc = dcps_gpu_event_record(t->params_up, t->cs)) != 0))
        return gpu_fail(t, rc, "uploading the parameters");
    return 0;
}

/* GPU path on host arrays: the last upload has left the pinned params
 * (before a pull). */
static int params_free(trainer_t *t)
{
    int rc;
    if (t->gpu && !t->dev_step && (rc = dcps_gpu_event_sync(t->params_up)) != 0)
        return gpu_fail(t, rc, "uploading the parameters");
    return 0;
}

/* The test loss and accuracy at the parameters last pulled. */
static int evaluate(trainer_t *t, float *loss, float *acc)
{
    if (t->emulated) { /* no model, and no test set, to evaluate */
        *loss = *acc = NAN;
        return 0;
    }
    /* With the pipeline the parameters last pulled are the step's, not params. */
    const float *pulled = dcps_step_pulled(t->step);
    int rc = t->gpu ? dcps_mlp_gpu_evaluate(t->gmlp, t->d_params, &t->test, loss, acc)
                    : dcps_mlp_evaluate(t->mlp, pulled ? pulled : t->params, &t->test, loss, acc);
    if (rc == 0)
        return 0;
    return t->gpu ? gpu_fail(t, rc, "evaluation") : fail(t, rc, "evaluation");
}

/* The arrays the step takes: the device ones with device arrays, else host. */
static float *step_params(const trainer_t *t)
{
    return t->dev_step ? t->d_params : t->params;
}

/* Hands the gradient of the step to the step object: push, and pull into
 * params (on the GPU path with host arrays then uploaded). With device arrays
 * the step reads d_grad after the pass queued on cs and writes d_params in
 * cs's order, so the next pass sees them. */
static int communicate(trainer_t *t, int epoch)
{
    float *grad = t->dev_step ? t->d_grad : t->grad;
    int rc;
    if ((rc = params_free(t)) != 0)
        return rc;
    if ((rc = dcps_step_run(t->step, grad, step_params(t), epoch)) != 0)
        return step_fail(t, rc);
    return upload_params(t);
}

/* One step of the CPU path on the b samples at position at of the share. */
static int cpu_step(trainer_t *t, long step, int epoch, uint32_t at, int b, float *loss,
                    int *correct)
{
    int rc;
    if (t->emulated) {
        int ms = t->cfg->compute_ms;
        nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
        t->grad = t->pool + dcps_trainer_synthetic_offset(t->cfg->seed, t->rank, step);
        *loss = NAN;
        *correct = 0;
        return communicate(t, epoch);
    }
    gather(t, at, b, t->xb, t->yb);
    if ((rc = dcps_mlp_forward_backward(t->mlp, t->params, t->xb, t->yb, b, t->grad, loss,
                                        correct)) != 0)
        return fail(t, rc, "forward/backward");
    return communicate(t, epoch);
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
 * staged into the other slot before the step runs: the host gathers it while
 * the GPU works, and its upload on xs runs during the push and pull. The
 * forward/backward pass synchronises cs once; the step's encoder waits for cs
 * a second and last time, for the k pairs it sends. On host arrays the
 * gradient's download, launched before the next batch is gathered, is that
 * second wait instead. */
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
    if (!t->dev_step && (rc = dcps_gpu_to_host(t->grad, t->d_grad, bytes, t->cs)) != 0)
        return gpu_fail(t, rc, "gradient download");
    if (next_b > 0 && (rc = stage(t, k ^ 1, next_at, next_b)) != 0)
        return rc;
    if (!t->dev_step && (rc = dcps_gpu_sync(t->cs)) != 0)
        return gpu_fail(t, rc, "gradient download");
    return communicate(t, epoch);
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
    dcps_step_stats(t->step, &st);
    fprintf(t->csv, "%.3f,%ld,%d,%.6f,%.4f,", dcps_now_s() - t->t0, step, epoch, loss, train_acc);
    if (test_acc >= 0)
        fprintf(t->csv, "%.4f", test_acc);
    fprintf(t->csv, ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%.3f\n", st.bytes_pushed,
            st.bytes_pulled, st.bytes_pushed_dense + st.bytes_pulled_dense, staleness_mean(&st));
    fflush(t->csv);
}

/* The GPU path's buffers: on the device the parameters, gradient and two batch
 * slots; pinned on the host params, grad and two batch slots. */
static void layout_gpu(trainer_t *t, dcps_carver_t *dev, dcps_carver_t *pin)
{
    size_t vec = t->n * sizeof(float), ybytes = (size_t)t->cfg->batch_size;
    size_t xbytes = ybytes * t->train.dim * sizeof(float);
    t->d_params = dcps_carve(dev, vec);
    t->d_grad = dcps_carve(dev, vec);
    t->params = dcps_carve(pin, vec);
    t->grad = dcps_carve(pin, vec);
    for (int k = 0; k < 2; k++) {
        t->d_x[k] = dcps_carve(dev, xbytes);
        t->d_y[k] = dcps_carve(dev, ybytes);
        t->h_x[k] = dcps_carve(pin, xbytes);
        t->h_y[k] = dcps_carve(pin, ybytes);
    }
}

/* Releases what the GPU path made, in reverse order of set-up, once neither
 * stream has work left that touches the buffers (an upload may be in flight
 * after a failure); the model goes before the stream it borrows. */
static void release_gpu(trainer_t *t)
{
    if (t->xs)
        dcps_gpu_sync(t->xs);
    if (t->cs)
        dcps_gpu_sync(t->cs);
    dcps_gpu_host_free(t->pinned);
    dcps_gpu_free(t->dev);
    t->pinned = t->dev = NULL;
    dcps_gpu_event_destroy(&t->params_up);
    for (int k = 1; k >= 0; k--) {
        dcps_gpu_event_destroy(&t->done[k]);
        dcps_gpu_event_destroy(&t->up[k]);
    }
    dcps_mlp_gpu_destroy(&t->gmlp);
    dcps_gpu_stream_destroy(&t->xs);
    dcps_gpu_stream_destroy(&t->cs);
}

/* GPU set-up failed with rc (no usable GPU model, or out of device memory):
 * with device = auto the worker trains on the CPU instead (returns 0, having
 * released the GPU path); with device = gpu it is an error. */
static int fall_back(trainer_t *t, int rc, const char *why)
{
    if (t->cfg->device != DCPS_DEVICE_AUTO) {
        if (rc == DCPS_E_NOGPU)
            snprintf(t->err, t->errlen,
                     "[worker] device = gpu, but the GPU model cannot run (cuBLAS missing? see "
                     "the log); use device = auto or cpu");
        else
            snprintf(t->err, t->errlen, "[worker] device = gpu, but %s; use device = auto or cpu",
                     why);
        return rc;
    }
    release_gpu(t);
    t->gpu = 0;
    t->params = t->grad = NULL; /* slices of the pinned memory just freed */
    DCPS_INFO("device = auto: %s, so this worker trains on the CPU", why);
    return 0;
}

/* Sets up the GPU path: streams, model, events, buffers.
 * When the GPU model cannot run (DCPS_E_NOGPU: cuBLAS is not loadable, say)
 * or device memory runs out (DCPS_E_NOMEM) and device = auto, releases what it
 * made, clears t->gpu and returns 0: the CPU path runs instead. Anything else that fails is an error; teardown()
 * releases what was made. */
static int setup_gpu(trainer_t *t)
{
    const dcps_config_t *cfg = t->cfg;
    dcps_carver_t dev = {NULL, 0}, pin = {NULL, 0};
    char name[256];
    int rc;

    if ((rc = dcps_gpu_stream_new(&t->cs)) == 0 && (rc = dcps_gpu_stream_new(&t->xs)) == 0)
        t->gmlp = dcps_mlp_gpu_new(cfg->layers, cfg->n_layers, cfg->batch_size, t->cs, &rc);
    if (rc == DCPS_E_NOGPU || rc == DCPS_E_NOMEM)
        return fall_back(t, rc,
                         rc == DCPS_E_NOMEM ? "the GPU's memory is taken (another job?)"
                                            : "the GPU model cannot run (see above)");
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
        (rc = dcps_gpu_host_alloc(&t->pinned, pin.used)) != 0) {
        if (rc == DCPS_E_NOMEM)
            return fall_back(t, rc, "the GPU's memory is taken (another job?)");
        return gpu_fail(t, rc, "GPU memory");
    }
    dev.base = t->dev;
    pin.base = t->pinned;
    dev.used = pin.used = 0;
    layout_gpu(t, &dev, &pin);
    if (dcps_gpu_name(name, sizeof name) == 0)
        DCPS_INFO("rank %d trains on the GPU (%s)", t->rank, name);
    return 0;
}

/* The CPU path's buffers and model: params, a gradient and a batch. Emulated
 * compute needs no gradient buffer (its gradients are windows of the pool), no
 * batch and no model. */
static int setup_cpu(trainer_t *t)
{
    const dcps_config_t *cfg = t->cfg;
    int rc;
    /* params [gradient] */
    t->params = calloc((t->emulated ? 1 : 2) * t->n, sizeof(float));
    if (!t->params) {
        snprintf(t->err, t->errlen, "out of memory");
        return DCPS_E_NOMEM;
    }
    if (t->emulated) {
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
    t->grad = t->params + t->n;
    t->xb = malloc((size_t)cfg->batch_size * t->train.dim * sizeof(float));
    t->yb = malloc((size_t)cfg->batch_size);
    if (!t->xb || !t->yb) {
        snprintf(t->err, t->errlen, "out of memory");
        return DCPS_E_NOMEM;
    }
    t->mlp = dcps_mlp_new(cfg->layers, cfg->n_layers, cfg->batch_size, &rc);
    if (!t->mlp)
        return fail(t, rc, "model");
    return 0;
}

/* The real path's training and test sets, and the order array for its share. */
static int load_data(trainer_t *t)
{
    const dcps_config_t *cfg = t->cfg;
    int rc;
    if ((rc = load_set(t, "train", cfg->train_images, cfg->train_labels,
                       (uint32_t)cfg->train_limit, &t->train)) != 0 ||
        (rc = load_set(t, "test", cfg->test_images, cfg->test_labels, 0, &t->test)) != 0)
        return rc;
    if (t->train.dim != (uint32_t)cfg->layers[0] || t->test.dim != (uint32_t)cfg->layers[0]) {
        snprintf(t->err, t->errlen, "images have %u pixels, [model] layers starts with %d",
                 t->train.dim, cfg->layers[0]);
        return DCPS_E_CONFIG;
    }
    t->examples = t->train.n;
    t->order = malloc(t->train.n * sizeof(uint32_t));
    if (!t->order) {
        snprintf(t->err, t->errlen, "out of memory");
        return DCPS_E_NOMEM;
    }
    return 0;
}

/* GPU path: hands the step device arrays on cs (dcps_step_use_stream). Where
 * the step's device path does not do what the job asks (the key that
 * dcps_step_gpu_refuses names) or its buffers do not fit on the GPU, logs why
 * and leaves the step on host arrays: the GPU path then downloads the gradient
 * for the step to compress on the host. */
static int use_device_arrays(trainer_t *t)
{
    char key[128];
    int rc;
    if (dcps_step_gpu_refuses(t->cfg, key, sizeof key) != 0) {
        DCPS_INFO("rank %d compresses its gradients on the host: the GPU's encoder does not "
                  "do %s in this version",
                  t->rank, key);
        return 0;
    }
    rc = dcps_step_use_stream(t->step, t->cs);
    if (rc == DCPS_E_NOMEM) {
        DCPS_INFO("rank %d compresses its gradients on the host: %s", t->rank,
                  dcps_step_error(t->step));
        return 0;
    }
    if (rc != 0)
        return step_fail(t, rc);
    t->dev_step = true;
    DCPS_INFO("rank %d compresses its gradients on the GPU", t->rank);
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
    t->emulated = cfg->compute_ms > 0;
    t->gpu = cfg->device != DCPS_DEVICE_CPU && gpus > 0 && !t->emulated;
    if (cfg->device == DCPS_DEVICE_AUTO && gpus == 0 && !t->emulated)
        DCPS_INFO("[worker] device = auto: no usable GPU (%s); computing on the CPU",
                  dcps_gpu_why());
    t->n = cfg->n_params;

    /* An emulated worker reads no data: only the number of examples matters,
     * for the number of steps (trainer.h). */
    if (t->emulated)
        t->examples = cfg->train_limit > 0 ? (uint32_t)cfg->train_limit : DCPS_EMULATED_EXAMPLES;
    else if ((rc = load_data(t)) != 0)
        return rc;
    if (t->examples < (uint32_t)cfg->workers) {
        snprintf(t->err, t->errlen, "%u training examples for %d workers", t->examples,
                 cfg->workers);
        return DCPS_E_CONFIG;
    }
    if (t->gpu && (rc = setup_gpu(t)) != 0)
        return rc;
    if (t->gpu && cfg->pipeline) {
        snprintf(t->err, t->errlen,
                 "[compression] pipeline = true runs on the CPU path only in this version; "
                 "set [worker] device = cpu");
        return DCPS_E_CONFIG;
    }
    if (!t->gpu && (rc = setup_cpu(t)) != 0) /* also when setup_gpu() fell back */
        return rc;

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

    t->step = dcps_step_new(cfg, t->rank, t->n, &rc, t->err, t->errlen);
    /* Emulated compute has no MLP: its [model] params need not be the layers'
     * count, so neither their names nor their initial values apply (it starts
     * from zeros). */
    if (!t->step || (!t->emulated && (rc = name_tensors(t)) != 0))
        return rc;
    if (t->gpu && (rc = use_device_arrays(t)) != 0)
        return rc;
    /* Rank 0's parameters initialise the shards unless they hold some already;
     * with device arrays the step reads them from d_params. */
    if (t->rank == 0 && !t->emulated)
        dcps_mlp_init_params(cfg->layers, cfg->n_layers, cfg->seed, t->params);
    if (t->dev_step &&
        (rc = dcps_gpu_to_device(t->d_params, t->params, t->n * sizeof(float), t->cs)) != 0)
        return gpu_fail(t, rc, "uploading the parameters");
    if ((rc = dcps_step_start(t->step, step_params(t))) != 0)
        return step_fail(t, rc);
    return upload_params(t);
}

static void teardown(trainer_t *t)
{
    dcps_step_close(&t->step);
    dcps_mlp_destroy(&t->mlp);
    release_gpu(t);
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

/* A rank whose shards hold all its steps already belongs to a run that has
 * finished (its checkpoints, or its shards still running): training nothing
 * and reporting that as a result would pass it off as a new run. */
static int refuse_finished(trainer_t *t, long resume)
{
    const dcps_config_t *cfg = t->cfg;
    long total = 0;
    for (int epoch = 1; epoch <= cfg->epochs; epoch++) {
        uint32_t mine = t->emulated ? emulated_share(t)
                                    : dcps_job_share(cfg->seed, epoch, t->rank, cfg->workers,
                                                      t->examples, t->order);
        total += ((long)mine + cfg->batch_size - 1) / cfg->batch_size;
    }
    if (resume < total)
        return 0;
    if (*cfg->checkpoint_dir)
        snprintf(t->err, t->errlen,
                 "the shards hold all %ld steps of rank %d: this job has already run to its end "
                 "(the shards still run from that run, or restored it from the checkpoints in "
                 "%s). To train again, stop the shards, remove those checkpoints and start "
                 "them again, or give the job another [job] name",
                 total, t->rank, cfg->checkpoint_dir);
    else
        snprintf(t->err, t->errlen,
                 "the shards hold all %ld steps of rank %d: this job has run to its end (in an "
                 "earlier run, or in this one while this rank was away: a sync job goes on "
                 "without a rank it declared dead). To train again, restart the shards",
                 total, t->rank);
    return DCPS_E_STATE;
}

/* Where train() stands: the step last pushed (counted over the job), the step
 * the shards expect (a restart's, or the sync round the job went on to), and
 * the sums over the progress window, the epoch and this process's run. */
typedef struct {
    long step, resume;
    double win_loss, epoch_loss, t_win;
    long win_correct, win_samples, epoch_steps, samples;
    float test_loss, test_acc; /* of the last evaluation */
} progress_t;

/* Counts one step of b samples; every [worker] log_every steps writes the
 * progress line and its CSV row and starts a new window. */
static void count_step(trainer_t *t, progress_t *p, int epoch, int b, float loss, int correct,
                       FILE *out)
{
    const dcps_config_t *cfg = t->cfg;
    p->win_loss += loss;
    p->epoch_loss += loss;
    p->epoch_steps++;
    p->win_correct += correct;
    p->win_samples += b;
    p->samples += b;
    if (p->step % cfg->log_every != 0)
        return;
    dcps_client_stats_t st;
    dcps_step_stats(t->step, &st);
    double tn = dcps_now_s();
    double wl = p->win_loss / (double)cfg->log_every;
    double wa = t->emulated ? NAN : (double)p->win_correct / (double)p->win_samples;
    fprintf(out,
            "rank=%d step=%ld epoch=%d loss=%.4f train_acc=%.4f samples_per_s=%.0f "
            "bytes_pushed=%" PRIu64 " bytes_pulled=%" PRIu64 " staleness=%.2f lr=%.6g\n",
            t->rank, p->step, epoch, wl, wa, (double)p->win_samples / (tn - p->t_win),
            st.bytes_pushed, st.bytes_pulled, staleness_mean(&st), dcps_step_lr(t->step));
    fflush(out);
    csv_row(t, p->step, epoch, wl, wa, -1);
    p->win_loss = 0;
    p->win_correct = p->win_samples = 0;
    p->t_win = tn;
}

/* What catch_up says besides 0 (go on) and an error. */
enum { SKIP_EPOCH = 1, WENT_BACK = 2 };

/* Sync: whether the shards went back to a round before this worker's steps
 * (clock, the client's) of p. With the pipeline the step in flight is not
 * counted in the clock yet: going back to it reads as going on (one batch not
 * trained again, as going back to the very round pushed). */
static bool went_back(const trainer_t *t, const progress_t *p, long clock)
{
    return t->cfg->mode == DCPS_MODE_SYNC && clock < p->step - (t->cfg->pipeline ? 1 : 0);
}

/* Sync: a worker the job went on without (declared dead, stopped, cut off) is
 * moved to the open round; the batches of the rounds it missed are skipped,
 * so it ends with the job's last round. Moves *at, the position in this
 * epoch's share of mine, past them (staging the batch there on the GPU path).
 * Returns SKIP_EPOCH when the rest of the epoch is skipped, 0 to go on,
 * WENT_BACK when the shards went back to an earlier round (a shard restarted:
 * docs/algorithms.md, "Restarts"), whose batches this worker trains again, or
 * an error. */
static int catch_up(trainer_t *t, progress_t *p, uint32_t mine, uint32_t *at)
{
    const uint32_t bs = (uint32_t)t->cfg->batch_size;
    long clock = (long)dcps_step_clock(t->step);
    int rc;
    if (went_back(t, p, clock))
        return WENT_BACK;
    if (clock <= p->step)
        return 0;
    long left = (long)((mine - *at + bs - 1) / bs);
    p->resume = clock;
    if (p->step + left <= p->resume) {
        p->step += left;
        return SKIP_EPOCH;
    }
    *at += (uint32_t)(p->resume - p->step) * bs;
    p->step = p->resume;
    if (t->gpu && (rc = stage(t, (int)((p->step + 1) & 1), *at,
                              batch_len(mine, *at, t->cfg->batch_size))) != 0)
        return rc;
    return 0;
}

/* Trains epoch `epoch` (from 1) from where p stands, skipping the steps the
 * shards hold already, then evaluates and writes the epoch's line and CSV
 * row. An epoch the shards hold whole is skipped without evaluation. */
static int train_epoch(trainer_t *t, progress_t *p, int epoch, FILE *out)
{
    const dcps_config_t *cfg = t->cfg;
    const uint32_t bs = (uint32_t)cfg->batch_size;
    int rc;
    uint32_t mine = t->emulated ? emulated_share(t)
                                : dcps_job_share(cfg->seed, epoch, t->rank, cfg->workers,
                                                 t->examples, t->order);
    long in_epoch = ((long)mine + cfg->batch_size - 1) / cfg->batch_size;
    if (p->step + in_epoch <= p->resume) {
        p->step += in_epoch;
        return 0;
    }
    uint32_t first = 0; /* where this epoch starts */
    if (p->step < p->resume) {
        first = (uint32_t)(p->resume - p->step) * bs;
        p->step = p->resume;
    }
    p->epoch_loss = 0;
    p->epoch_steps = 0;
    /* The GPU path stages each batch a step ahead (step s uses slot s & 1);
     * the epoch's first batch is staged here. */
    if (t->gpu && (rc = stage(t, (int)((p->step + 1) & 1), first,
                              batch_len(mine, first, cfg->batch_size))) != 0)
        return rc;
    for (uint32_t at = first; at < mine; at += bs) {
        if ((rc = catch_up(t, p, mine, &at)) < 0 || rc == WENT_BACK)
            return rc;
        if (rc == SKIP_EPOCH)
            break;
        int b = batch_len(mine, at, cfg->batch_size);
        uint32_t next = at + bs;
        float loss;
        int correct;
        p->step++;
        rc = t->gpu ? gpu_step(t, p->step, epoch, (int)(p->step & 1), b, next,
                               batch_len(mine, next, cfg->batch_size), &loss, &correct)
                    : cpu_step(t, p->step, epoch, at, b, &loss, &correct);
        if (rc != 0)
            return rc;
        if (cfg->delay_ms > 0)
            nanosleep(&(struct timespec){cfg->delay_ms / 1000, (cfg->delay_ms % 1000) * 1000000L},
                      NULL);
        count_step(t, p, epoch, b, loss, correct, out);
    }
    if ((rc = dcps_step_wait(t->step)) != 0)
        return step_fail(t, rc);
    if (went_back(t, p, (long)dcps_step_clock(t->step) + (t->cfg->pipeline ? 1 : 0)))
        return WENT_BACK;
    if ((rc = evaluate(t, &p->test_loss, &p->test_acc)) != 0)
        return rc;
    fprintf(out, "rank=%d epoch=%d done: steps=%ld test_loss=%.4f test_acc=%.4f\n", t->rank,
            epoch, p->step, p->test_loss, p->test_acc);
    fflush(out);
    csv_row(t, p->step, epoch, p->epoch_loss / (double)p->epoch_steps, -1, p->test_acc);
    return 0;
}

/* Meets the other workers, so that every rank evaluates the same final model
 * (an exact pull: w, or in sync mode with delta pulls the shared mirror the
 * workers trained on), and writes the last CSV row and the final: line. */
static int finish(trainer_t *t, progress_t *p, FILE *out)
{
    const dcps_config_t *cfg = t->cfg;
    int rc;
    if ((rc = params_free(t)) != 0)
        return rc;
    if ((rc = dcps_step_finish(t->step, step_params(t))) != 0)
        return step_fail(t, rc);
    if ((rc = upload_params(t)) != 0 || (rc = evaluate(t, &p->test_loss, &p->test_acc)) != 0)
        return rc;

    double train_loss = p->epoch_loss / (double)(p->epoch_steps ? p->epoch_steps : 1);
    csv_row(t, p->step, cfg->epochs, train_loss, -1, p->test_acc);
    char line[1024];
    dcps_job_result_t r = {.test_acc = p->test_acc,
                           .test_loss = p->test_loss,
                           .train_loss = train_loss,
                           .epochs = cfg->epochs,
                           .samples = (uint64_t)p->samples,
                           .device = t->gpu ? "gpu" : "cpu",
                           .compute_ms = cfg->compute_ms};
    dcps_job_summary(t->step, &r, line, sizeof line);
    fprintf(out, "%s\n", line);
    fflush(out);
    return 0;
}

static int train(trainer_t *t, FILE *out)
{
    progress_t p = {.t_win = dcps_now_s()};
    int rc;

    /* A restarted worker resumes where its previous process left off: the
     * shards said which step of this rank they expect (0 for a new one). */
    p.resume = (long)dcps_step_resumed(t->step);
    if ((rc = refuse_finished(t, p.resume)) != 0)
        return rc;

    t->t0 = dcps_now_s();
    for (int epoch = 1; epoch <= t->cfg->epochs; epoch++) {
        rc = train_epoch(t, &p, epoch, out);
        if (rc == WENT_BACK) { /* from the shards' round on, as a restarted worker */
            p.resume = (long)dcps_step_clock(t->step);
            p.step = 0;
            epoch = 0;
        } else if (rc != 0) {
            return rc;
        }
    }
    return finish(t, &p, out);
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
