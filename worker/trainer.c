/* dcps — the trainer; see trainer.h. */
#include "worker/trainer.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "common/log.h"
#include "common/rng.h"
#include "kernels/gpu.h"
#include "kernels/residual.h"
#include "worker/dcps.h"
#include "worker/idx.h"
#include "worker/mlp.h"

#define READY_TIMEOUT_MS 120000   /* how long ranks > 0 wait for rank 0's INIT */

typedef struct {
    const dcps_config_t *cfg;
    int rank;
    int gpu; /* 1: the residual lives on the GPU */
    dcps_client_t *client;
    dcps_mlp_t *mlp;
    dcps_dataset_t train, test;
    size_t n;
    float *params, *grad, *residual; /* n each, one allocation */
    float *d_grad, *d_residual;      /* device copies when gpu */
    float *xb;                       /* batch inputs */
    uint8_t *yb;
    uint32_t *order;                 /* this rank's sample indices for the epoch */
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

/* Adds the gradient to the residual (the error-feedback kernel, on the GPU when
 * the worker has one) and leaves in t->residual what the push sends. */
static int accumulate(trainer_t *t)
{
    size_t bytes = t->n * sizeof(float);
    int rc;
    if (!t->gpu) {
        dcps_residual_add_cpu(t->residual, t->grad, t->n);
        return 0;
    }
    if ((rc = dcps_gpu_to_device(t->d_grad, t->grad, bytes, NULL)) == 0 &&
        (rc = dcps_residual_add_gpu(t->d_residual, t->d_grad, t->n, NULL)) == 0 &&
        (rc = dcps_gpu_to_host(t->residual, t->d_residual, bytes, NULL)) == 0)
        rc = dcps_gpu_sync(NULL);
    return rc;
}

/* A dense push sends the whole residual, which is then zero. */
static int clear_residual(trainer_t *t)
{
    memset(t->residual, 0, t->n * sizeof(float));
    if (!t->gpu)
        return 0;
    return dcps_gpu_to_device(t->d_residual, t->residual, t->n * sizeof(float), NULL);
}

static int check_finite(trainer_t *t, long step)
{
    for (size_t i = 0; i < t->n; i++)
        if (!isfinite(t->grad[i])) {
            snprintf(t->err, t->errlen,
                     "step %ld: gradient entry %zu is %g (not finite); lower [optimizer] lr?",
                     step, i, (double)t->grad[i]);
            return DCPS_E_NONFINITE;
        }
    return 0;
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
    dcps_client_stats(t->client, &st);
    fprintf(t->csv, "%.3f,%ld,%d,%.6f,%.4f,", now_s() - t->t0, step, epoch, loss, train_acc);
    if (test_acc >= 0)
        fprintf(t->csv, "%.4f", test_acc);
    fprintf(t->csv, ",%" PRIu64 ",%" PRIu64 ",%.3f\n", st.bytes_pushed, st.bytes_pulled,
            staleness_mean(&st));
    fflush(t->csv);
}

static int setup(trainer_t *t, const char *metrics_path)
{
    const dcps_config_t *cfg = t->cfg;
    int rc;

    int gpus = dcps_gpu_count();
    if (cfg->device == DCPS_DEVICE_GPU && gpus == 0) {
        snprintf(t->err, t->errlen,
                 "[worker] device = gpu, but no GPU is usable (none present, no driver, or "
                 "built --without-cuda); use device = auto or cpu");
        return DCPS_E_NOGPU;
    }
    t->gpu = cfg->device != DCPS_DEVICE_CPU && gpus > 0;

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
    t->params = calloc(3 * t->n, sizeof(float));
    t->xb = malloc((size_t)cfg->batch_size * t->train.dim * sizeof(float));
    t->yb = malloc((size_t)cfg->batch_size);
    t->order = malloc(t->train.n * sizeof(uint32_t));
    if (!t->params || !t->xb || !t->yb || !t->order) {
        snprintf(t->err, t->errlen, "out of memory");
        return DCPS_E_NOMEM;
    }
    t->grad = t->params + t->n;
    t->residual = t->grad + t->n;
    if (t->gpu) {
        size_t bytes = t->n * sizeof(float);
        if ((rc = dcps_gpu_alloc((void **)&t->d_grad, bytes)) != 0 ||
            (rc = dcps_gpu_alloc((void **)&t->d_residual, bytes)) != 0 ||
            (rc = dcps_gpu_to_device(t->d_residual, t->residual, bytes, NULL)) != 0)
            return fail(t, rc, "GPU set-up");
    }
    t->mlp = dcps_mlp_new(cfg->layers, cfg->n_layers, cfg->batch_size, &rc);
    if (!t->mlp)
        return fail(t, rc, "model");

    if (metrics_path && *metrics_path) {
        t->csv = fopen(metrics_path, "w");
        if (!t->csv) {
            snprintf(t->err, t->errlen, "cannot write metrics file %s: %s", metrics_path,
                     strerror(errno));
            return DCPS_E_IO;
        }
        fprintf(t->csv,
                "elapsed_s,step,epoch,loss,train_acc,test_acc,bytes_pushed,bytes_pulled,"
                "staleness_mean\n");
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
    if ((rc = dcps_client_pull(t->client, t->params)) != 0)
        return fail(t, rc, "first pull");
    return 0;
}

static void teardown(trainer_t *t)
{
    dcps_client_close(&t->client);
    dcps_mlp_destroy(&t->mlp);
    dcps_gpu_free(t->d_grad);
    dcps_gpu_free(t->d_residual);
    if (t->csv)
        fclose(t->csv);
    free(t->order);
    free(t->yb);
    free(t->xb);
    free(t->params);
    dcps_dataset_free(&t->train);
    dcps_dataset_free(&t->test);
}

static int train(trainer_t *t, FILE *out)
{
    const dcps_config_t *cfg = t->cfg;
    const uint32_t dim = t->train.dim;
    long step = 0;
    double win_loss = 0, epoch_loss = 0, t_win = now_s();
    long win_correct = 0, win_samples = 0, epoch_steps = 0, samples = 0;
    float test_loss, test_acc;
    int rc;

    t->t0 = now_s();
    for (int epoch = 1; epoch <= cfg->epochs; epoch++) {
        uint32_t mine = dcps_trainer_share(t->cfg->seed, epoch, t->rank, cfg->workers,
                                           t->train.n, t->order);
        epoch_loss = 0;
        epoch_steps = 0;
        for (uint32_t at = 0; at < mine; at += (uint32_t)cfg->batch_size) {
            int b = (int)(mine - at < (uint32_t)cfg->batch_size ? mine - at : (uint32_t)cfg->batch_size);
            for (int j = 0; j < b; j++) {
                uint32_t i = t->order[at + (uint32_t)j];
                memcpy(t->xb + (size_t)j * dim, t->train.x + (size_t)i * dim, dim * sizeof(float));
                t->yb[j] = t->train.y[i];
            }
            float loss;
            int correct;
            if ((rc = dcps_mlp_forward_backward(t->mlp, t->params, t->xb, t->yb, b, t->grad,
                                                &loss, &correct)) != 0)
                return fail(t, rc, "forward/backward");
            step++;
            if ((rc = check_finite(t, step)) != 0)
                return rc;
            if ((rc = accumulate(t)) != 0)
                return fail(t, rc, "residual update");
            if ((rc = dcps_client_push_dense(t->client, t->residual)) != 0)
                return fail(t, rc, "push");
            if ((rc = clear_residual(t)) != 0)
                return fail(t, rc, "residual update");
            if ((rc = dcps_client_pull(t->client, t->params)) != 0)
                return fail(t, rc, "pull");
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
                dcps_client_stats(t->client, &st);
                double tn = now_s();
                double wl = win_loss / (double)cfg->log_every;
                double wa = (double)win_correct / (double)win_samples;
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
        if ((rc = dcps_mlp_evaluate(t->mlp, t->params, &t->test, &test_loss, &test_acc)) != 0)
            return fail(t, rc, "evaluation");
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
    if ((rc = dcps_client_pull(t->client, t->params)) != 0)
        return fail(t, rc, "final pull");
    if ((rc = dcps_mlp_evaluate(t->mlp, t->params, &t->test, &test_loss, &test_acc)) != 0)
        return fail(t, rc, "evaluation");

    double elapsed = now_s() - t->t0;
    dcps_client_stats_t st;
    dcps_client_stats(t->client, &st);
    csv_row(t, step, cfg->epochs, epoch_loss / (double)epoch_steps, -1, test_acc);
    fprintf(out,
            "final: rank=%d test_acc=%.4f test_loss=%.4f train_loss=%.4f steps=%ld epochs=%d "
            "elapsed_s=%.2f samples_per_s=%.0f bytes_pushed=%" PRIu64 " bytes_pulled=%" PRIu64
            " mode=%s optimizer=%s compression=%s density=%g staleness_mean=%.3f "
            "staleness_max=%" PRIu64 " dropped=%" PRIu64 " retries=%" PRIu64
            " device=%s workers=%d\n",
            t->rank, test_acc, test_loss, epoch_loss / (double)epoch_steps, step, cfg->epochs,
            elapsed, (double)samples / elapsed,
            st.bytes_pushed, st.bytes_pulled, dcps_config_mode_name(cfg->mode),
            dcps_config_optimizer_name(cfg->opt_kind), dcps_config_push_name(cfg->push),
            cfg->push == DCPS_PUSH_DENSE ? 1.0 : cfg->density,
            staleness_mean(&st), st.staleness_max, st.dropped, st.retries, t->gpu ? "gpu" : "cpu", cfg->workers);
    fflush(out);
    return 0;
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
