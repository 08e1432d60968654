/* libdcps — the worker's step; see step.h.
 *
 * The step owns a client (dcps.h) and a compressor (compress.h). Without the
 * pipeline a step is encode, push, pull into the caller's params, all on the
 * caller's thread. With it a thread of the step's own (comm_t) pushes step t
 * and pulls into `pulled` while the caller computes step t + 1 at params =
 * pulled − local_lr · g_t (CD-SGD, docs/algorithms.md); only that thread touches the
 * client while it is busy, and the caller's thread waits for it before it
 * touches the client, `pulled` or the error text again. */
#include "worker/internal.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "kernels/gpu.h"
#include "worker/compress.h"
#include "worker/step_gpu.h"

#define READY_TIMEOUT_MS 120000 /* how long ranks > 0 wait for rank 0's INIT */

typedef struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool started, busy, stop;
    dcps_encoded_t job;        /* the push in flight */
    int rc;                    /* of the last job */
    dcps_client_stats_t stats; /* after the last job */
    double lr;                 /* dcps_client_lr after the last job */
} comm_t;

struct dcps_step {
    dcps_config_t cfg;
    int rank;
    size_t n;
    dcps_client_t *client;
    /* Host arrays: comp; device arrays (dcps_step_use_stream): gpu instead. */
    dcps_compress_t *comp;
    dcps_step_gpu_t *gpu;
    bool pipe;      /* the CD-SGD pipeline runs */
    float local_lr; /* of the pipeline's local update */
    float *pulled;  /* pipeline: what pulls fill (n) */
    float *staged;  /* pipeline: a dense push of the caller's gradient, copied (n) */
    comm_t comm;
    enum { NEW, STARTED, FINISHED, FAILED } state; /* FAILED: only close remains */
    int epoch;      /* of the last step; its pull density is set */
    uint64_t resumed;
    double t0;      /* when dcps_step_start returned */
    /* dcps_step_set_names: tensor j is [offsets[j], offsets[j + 1]) */
    size_t n_names;
    size_t *offsets;
    char **names;
    char err[768];
};

/* The client's sentence for a failed call, after `what`. */
static int fail(dcps_step_t *s, int code, const char *what)
{
    const char *why = dcps_client_error(s->client);
    snprintf(s->err, sizeof s->err, "%s: %s", what, *why ? why : dcps_strerror(code));
    return code;
}

/* Pushes e in its value format; what rounding took goes back into the residual. */
static int push_encoded(dcps_step_t *s, const dcps_encoded_t *e)
{
    int rc = dcps_client_push_as(s->client, e->dense ? NULL : e->idx, e->values, e->k, e->dtype,
                                 e->tau, e->lost);
    if (rc != 0)
        return fail(s, rc, "push");
    if (!e->lost)
        return 0;
    if (!s->gpu) {
        dcps_compress_keep(s->comp, e);
        return 0;
    }
    if ((rc = dcps_step_gpu_keep(s->gpu, e)) != 0)
        return dcps_say(s->err, sizeof s->err, rc,
                        "push: keeping what rounding took in the device residual: %s",
                        dcps_strerror(rc));
    return 0;
}

static int pull(dcps_step_t *s, float *into, bool exact, const char *what)
{
    int rc;
    if (s->gpu) { /* into is a device pointer: the pull lands through pinned staging */
        dcps_pull_sink_t sink;
        if ((rc = dcps_step_gpu_sink(s->gpu, into, &sink)) == 0) {
            rc = dcps_client_pull_to(s->client, &sink, exact);
            int end = dcps_step_gpu_pull_end(s->gpu); /* also after a failure: see step_gpu.h */
            if (rc == 0 && end != 0)
                return dcps_say(s->err, sizeof s->err, end, "%s: landing it in device memory: %s",
                                what, dcps_strerror(end));
        } else {
            return dcps_say(s->err, sizeof s->err, rc, "%s: waiting for the last uploads: %s",
                            what, dcps_strerror(rc));
        }
    } else {
        rc = exact ? dcps_client_pull_exact(s->client, into) : dcps_client_pull(s->client, into);
    }
    return rc == 0 ? 0 : fail(s, rc, what);
}

/* The pipeline's thread: runs each posted job (push, then pull into pulled). */
static void *comm_main(void *arg)
{
    dcps_step_t *s = arg;
    comm_t *c = &s->comm;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->busy && !c->stop)
            pthread_cond_wait(&c->cv, &c->mu);
        if (!c->busy)
            break;
        pthread_mutex_unlock(&c->mu);
        int rc = push_encoded(s, &c->job);
        if (rc == 0)
            rc = pull(s, s->pulled, false, "pull");
        pthread_mutex_lock(&c->mu);
        c->rc = rc;
        dcps_client_stats(s->client, &c->stats);
        c->lr = dcps_client_lr(s->client);
        c->busy = false;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Waits until no job is in flight; returns the last job's result (once). */
static int comm_wait(dcps_step_t *s)
{
    comm_t *c = &s->comm;
    if (!c->started)
        return 0;
    pthread_mutex_lock(&c->mu);
    while (c->busy)
        pthread_cond_wait(&c->cv, &c->mu);
    int rc = c->rc;
    c->rc = 0;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void comm_post(dcps_step_t *s, const dcps_encoded_t *e)
{
    comm_t *c = &s->comm;
    pthread_mutex_lock(&c->mu);
    c->job = *e;
    c->busy = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static int comm_start(dcps_step_t *s)
{
    comm_t *c = &s->comm;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    dcps_client_stats(s->client, &c->stats);
    c->lr = dcps_client_lr(s->client);
    int rc = pthread_create(&c->thread, NULL, comm_main, s);
    if (rc != 0) {
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        return dcps_say(s->err, sizeof s->err, DCPS_E_NOMEM,
                        "cannot start the pipeline's thread: %s", strerror(rc));
    }
    c->started = true;
    return 0;
}

static void comm_stop(dcps_step_t *s)
{
    comm_t *c = &s->comm;
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

dcps_step_t *dcps_step_new(const dcps_config_t *cfg, int rank, size_t n, int *err, char *errbuf,
                           size_t errlen)
{
    int rc = 0;
    dcps_step_t *s = calloc(1, sizeof *s);
    if (!s) {
        *err = dcps_say(errbuf, errlen, DCPS_E_NOMEM, "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    s->rank = rank;
    s->n = n;
    if (n == 0) {
        rc = dcps_say(errbuf, errlen, DCPS_E_SIZE, "the model has no parameters");
        goto fail;
    }
    if (s->cfg.n_params == 0) /* [model] params = auto: the shards learn n from rank 0 */
        s->cfg.n_params = n;
    if (s->cfg.n_params != n) {
        rc = dcps_say(errbuf, errlen, DCPS_E_SIZE,
                      "the model has %zu parameters, the job has %" PRIu64
                      " ([model] layers or params); set [model] params = auto to take the "
                      "model's size",
                      n, s->cfg.n_params);
        goto fail;
    }
    s->pipe = cfg->pipeline;
    s->local_lr = (float)(cfg->local_lr > 0 ? cfg->local_lr : cfg->lr);
    if (s->pipe) {
        s->pulled = malloc(2 * n * sizeof(float));
        if (!s->pulled) {
            rc = dcps_say(errbuf, errlen, DCPS_E_NOMEM,
                          "out of memory (the pipeline's two copies of %zu parameters)", n);
            goto fail;
        }
        s->staged = s->pulled + n;
    }
    s->comp = dcps_compress_new(&s->cfg, n, &rc);
    if (!s->comp) {
        dcps_say(errbuf, errlen, rc, "gradient compressor: %s", dcps_strerror(rc));
        goto fail;
    }
    s->client = dcps_client_new(&s->cfg, rank, &rc, errbuf, errlen);
    if (!s->client)
        goto fail;
    return s;
fail:
    *err = rc;
    dcps_step_close(&s);
    return NULL;
}

dcps_step_t *dcps_step_open(const char *job_file, int rank, const char *const *overrides,
                            size_t n_overrides, size_t n, int *err, char *errbuf, size_t errlen)
{
    dcps_config_t *cfg = malloc(sizeof *cfg);
    if (!cfg) {
        *err = dcps_say(errbuf, errlen, DCPS_E_NOMEM, "out of memory");
        return NULL;
    }
    dcps_step_t *s = NULL;
    if ((*err = dcps_config_load(cfg, job_file, overrides, n_overrides, errbuf, errlen)) == 0 &&
        (*err = dcps_config_supported(cfg, job_file, errbuf, errlen)) == 0 &&
        (*err = dcps_config_check_role(cfg, job_file, DCPS_ROLE_WORKER, errbuf, errlen)) == 0)
        s = dcps_step_new(cfg, rank, n, err, errbuf, errlen);
    free(cfg);
    return s;
}

void dcps_step_close(dcps_step_t **sp)
{
    dcps_step_t *s = sp ? *sp : NULL;
    if (!s)
        return;
    comm_stop(s);
    dcps_client_close(&s->client);
    dcps_compress_destroy(&s->comp);
    dcps_step_gpu_destroy(&s->gpu);
    free(s->pulled);
    for (size_t j = 0; j < s->n_names; j++)
        free(s->names[j]);
    free(s->names);
    free(s->offsets);
    free(s);
    *sp = NULL;
}

int dcps_step_set_groups(dcps_step_t *s, const uint32_t *ranges, size_t n_ranges,
                         const double *opts, size_t n_groups)
{
    if (s->state != NEW)
        return dcps_say(s->err, sizeof s->err, DCPS_E_STATE,
                        "parameter groups are given before dcps_step_start");
    int rc = dcps_client_set_groups(s->client, ranges, n_ranges, opts, n_groups);
    return rc == 0 ? 0 : fail(s, rc, "parameter groups");
}

int dcps_step_set_names(dcps_step_t *s, const size_t *offsets, const char *const *names,
                        size_t count)
{
    for (size_t j = 0; j < count; j++)
        if ((j == 0 && offsets[0] != 0) || (j > 0 && offsets[j] <= offsets[j - 1]) ||
            offsets[j] >= s->n || !names[j])
            return dcps_say(s->err, sizeof s->err, DCPS_E_INVAL,
                            "tensor names: offset %zu of tensor %zu is not ascending from 0 "
                            "and below the model's %zu parameters",
                            offsets[j], j, s->n);
    size_t *off = malloc((count ? count : 1) * sizeof *off);
    char **nm = calloc(count ? count : 1, sizeof *nm);
    bool ok = off && nm;
    for (size_t j = 0; ok && j < count; j++)
        ok = (nm[j] = strdup(names[j])) != NULL;
    if (!ok) {
        for (size_t j = 0; nm && j < count; j++)
            free(nm[j]);
        free(nm);
        free(off);
        return dcps_say(s->err, sizeof s->err, DCPS_E_NOMEM, "out of memory");
    }
    memcpy(off, offsets, count * sizeof *off);
    for (size_t j = 0; j < s->n_names; j++)
        free(s->names[j]);
    free(s->names);
    free(s->offsets);
    s->offsets = off;
    s->names = nm;
    s->n_names = count;
    return 0;
}

int dcps_step_use_stream(dcps_step_t *s, void *stream)
{
    int rc;
    char key[128];
    if (s->state == FAILED) /* s->err still says why */
        return DCPS_E_STATE;
    s->err[0] = '\0';
    if (s->gpu) { /* already on device arrays: another stream */
        if ((rc = dcps_step_gpu_set_stream(s->gpu, stream)) != 0)
            return dcps_say(s->err, sizeof s->err, rc,
                            "changing streams: waiting for the old one's uploads: %s",
                            dcps_strerror(rc));
        return 0;
    }
    if (s->state != NEW)
        return dcps_say(s->err, sizeof s->err, DCPS_E_STATE,
                        "device arrays are chosen before dcps_step_start; this step has "
                        "started with host arrays");
    /* The job first: what it asks for is refused the same with or without a GPU. */
    if ((rc = dcps_step_gpu_refuses(&s->cfg, key, sizeof key)) != 0)
        return dcps_say(s->err, sizeof s->err, rc,
                        "%s is not supported with device arrays in this version: change it, or "
                        "pass host (CPU) arrays",
                        key);
    if (dcps_gpu_count() == 0)
        return dcps_say(s->err, sizeof s->err, DCPS_E_NOGPU,
                        "device arrays need a GPU, and none is usable: %s; pass host (CPU) "
                        "arrays",
                        dcps_gpu_why());
    if (!(s->gpu = dcps_step_gpu_new(&s->cfg, s->n, stream, &rc, s->err, sizeof s->err)))
        return rc;
    dcps_compress_destroy(&s->comp); /* the host encoder's n floats are not needed */
    return 0;
}

/* "the gradient of NAME, entry e (model entry i)" or "model entry i". */
static void name_entry(const dcps_step_t *s, size_t i, char *buf, size_t len)
{
    size_t j = s->n_names;
    while (j > 0 && s->offsets[j - 1] > i)
        j--;
    if (j == 0)
        snprintf(buf, len, "model entry %zu", i);
    else
        snprintf(buf, len, "%s, entry %zu (model entry %zu)", s->names[j - 1],
                 i - s->offsets[j - 1], i);
}

/* The compressor refused a non-finite gradient or residual: names the first
 * non-finite entry of grad, or says the residual diverged. Error path only. */
static int nonfinite(dcps_step_t *s, const float *grad, uint64_t step)
{
    char name[160];
    for (size_t i = 0; grad && i < s->n; i++)
        if (!isfinite(grad[i])) {
            name_entry(s, i, name, sizeof name);
            return dcps_say(s->err, sizeof s->err, DCPS_E_NONFINITE,
                            "step %" PRIu64 ": the gradient of %s is %g, not finite; lower "
                            "[optimizer] lr?",
                            step, name, (double)grad[i]);
        }
    if (!grad) /* a device gradient that could not be copied to look */
        return dcps_say(s->err, sizeof s->err, DCPS_E_NONFINITE,
                        "step %" PRIu64 ": the gradient, or the error-feedback residual it adds "
                        "to, holds NaN or Inf; lower [optimizer] lr?",
                        step);
    return dcps_say(s->err, sizeof s->err, DCPS_E_NONFINITE,
                    "step %" PRIu64 ": the gradient is finite but the error-feedback residual "
                    "(or momentum) it adds to is not; lower [optimizer] lr?",
                    step);
}

/* DCPS_E_STATE unless s is in state `want`; a failed step keeps its sentence. */
static int check_state(dcps_step_t *s, int want, const char *what)
{
    static const char *const says[] = {
        [NEW] = "dcps_step_start has not been called",
        [STARTED] = "dcps_step_start was called already",
        [FINISHED] = "dcps_step_finish was called already",
    };
    if ((int)s->state == want)
        return 0;
    if (s->state == FAILED) /* s->err still says why */
        return DCPS_E_STATE;
    return dcps_say(s->err, sizeof s->err, DCPS_E_STATE, "cannot %s: %s", what, says[s->state]);
}

static int start(dcps_step_t *s, float *params)
{
    int rc;
    if (s->rank == 0 && !dcps_client_initialized(s->client)) {
        const float *init = params;
        if (s->gpu && (rc = dcps_step_gpu_download(s->gpu, params, &init)) != 0)
            return dcps_say(s->err, sizeof s->err, rc,
                            "initialising the shards: copying the device parameters: %s",
                            dcps_strerror(rc));
        if ((rc = dcps_client_init(s->client, init)) != 0)
            return fail(s, rc, "initialising the shards");
        DCPS_INFO("initialised the shards with %zu parameters", s->n);
    } else if ((rc = dcps_client_wait_ready(s->client, READY_TIMEOUT_MS)) != 0) {
        return fail(s, rc, "waiting for rank 0 to initialise the shards");
    }
    dcps_client_stats_t st;
    dcps_client_stats(s->client, &st);
    s->resumed = st.clock;
    if (s->resumed > 0)
        DCPS_NOTICE("resuming at step %" PRIu64 ": the shards hold this rank's first %" PRIu64
                    " steps",
                    s->resumed + 1, s->resumed);
    if ((rc = pull(s, s->pipe ? s->pulled : params, false, "first pull")) != 0)
        return rc;
    if (s->pipe) {
        memcpy(params, s->pulled, s->n * sizeof(float));
        if ((rc = comm_start(s)) != 0)
            return rc;
    }
    s->t0 = dcps_now_s();
    return 0;
}

int dcps_step_start(dcps_step_t *s, float *params)
{
    int rc;
    if ((rc = check_state(s, NEW, "start")) != 0)
        return rc;
    s->err[0] = '\0';
    rc = start(s, params);
    s->state = rc == 0 ? STARTED : FAILED;
    return rc;
}

int dcps_step_run(dcps_step_t *s, float *grad, float *params, int epoch)
{
    dcps_encoded_t e;
    int rc;
    if ((rc = check_state(s, STARTED, "run a step")) != 0)
        return rc;
    /* The pipeline's thread may write s->err: it is idle from here on. */
    if ((rc = comm_wait(s)) != 0)
        goto failed;
    s->err[0] = '\0';
    uint64_t step = dcps_step_clock(s) + 1; /* the step being pushed, from 1 */
    if (epoch < 1)
        epoch = 1;
    rc = s->gpu ? dcps_step_gpu_encode(s->gpu, grad, (long)step, epoch, &e)
                : dcps_compress_encode(s->comp, grad, (long)step, epoch, &e);
    if (rc == DCPS_E_NONFINITE) {
        const float *host = grad; /* a device gradient is copied to name the entry */
        if (s->gpu && dcps_step_gpu_download(s->gpu, grad, &host) != 0)
            host = NULL;
        rc = nonfinite(s, host, step);
        goto failed;
    }
    if (rc != 0) {
        dcps_say(s->err, sizeof s->err, rc, "step %" PRIu64 ": compressing the gradient: %s",
                 step, dcps_strerror(rc));
        goto failed;
    }
    if (epoch != s->epoch) { /* delta pulls follow the density warm-up as pushes do */
        s->epoch = epoch;
        dcps_client_set_pull_density(
            s->client, dcps_config_density_at(dcps_config_pull_density(&s->cfg),
                                              s->cfg.density_warmup_epochs, epoch));
    }
    if (!s->pipe) {
        if ((rc = push_encoded(s, &e)) != 0 || (rc = pull(s, params, false, "pull")) != 0)
            goto failed;
        return 0;
    }
    if (e.dense && e.values == grad) { /* the caller may overwrite grad at once */
        memcpy(s->staged, grad, s->n * sizeof(float));
        e.values = s->staged;
    }
    if (step <= (uint64_t)s->cfg.warmup_steps) {
        comm_post(s, &e);
        if ((rc = comm_wait(s)) != 0)
            goto failed;
        memcpy(params, s->pulled, s->n * sizeof(float));
        return 0;
    }
    for (size_t i = 0; i < s->n; i++)
        params[i] = s->pulled[i] - s->local_lr * grad[i];
    comm_post(s, &e);
    return 0;
failed:
    s->state = FAILED;
    return rc;
}

int dcps_step_finish(dcps_step_t *s, float *params)
{
    int rc;
    if ((rc = check_state(s, STARTED, "finish")) != 0)
        return rc;
    if ((rc = comm_wait(s)) != 0) {
        s->state = FAILED;
        return rc;
    }
    comm_stop(s);
    s->state = FINISHED;
    s->err[0] = '\0';
    if ((rc = dcps_client_done(s->client)) != 0)
        return fail(s, rc, "saying done");
    if ((rc = dcps_client_barrier(s->client, 1)) != 0)
        return fail(s, rc, "final barrier");
    /* The model itself, the same on every rank: w, not an async delta pull's
     * mirror; in sync mode with delta pulls the shared mirror (docs/algorithms.md). */
    return pull(s, params, true, "final pull");
}

int dcps_step_pull(dcps_step_t *s, float *params)
{
    int rc;
    if (s->state != FINISHED && (rc = check_state(s, STARTED, "pull")) != 0)
        return rc;
    if ((rc = comm_wait(s)) != 0 || (rc = pull(s, params, true, "pull")) != 0) {
        s->state = FAILED;
        return rc;
    }
    return 0;
}

void dcps_step_stats(const dcps_step_t *s, dcps_client_stats_t *out)
{
    comm_t *c = (comm_t *)&s->comm;
    if (!c->started) {
        dcps_client_stats(s->client, out);
        return;
    }
    /* While the thread runs a job the counters are the job before's. */
    pthread_mutex_lock(&c->mu);
    if (c->busy)
        *out = c->stats;
    else
        dcps_client_stats(s->client, out);
    pthread_mutex_unlock(&c->mu);
}

double dcps_step_lr(const dcps_step_t *s)
{
    comm_t *c = (comm_t *)&s->comm;
    if (!c->started)
        return dcps_client_lr(s->client);
    /* As dcps_step_stats: while the thread runs a job, the job before's. */
    pthread_mutex_lock(&c->mu);
    double lr = c->busy ? c->lr : dcps_client_lr(s->client);
    pthread_mutex_unlock(&c->mu);
    return lr;
}

uint64_t dcps_step_clock(const dcps_step_t *s)
{
    dcps_client_stats_t st;
    dcps_step_stats(s, &st);
    return st.clock;
}

int dcps_step_buffers(dcps_step_t *s, int mode, int publish, const float *floats,
                      size_t n_floats, const double *ints, size_t n_ints, float *out_floats,
                      double *out_ints)
{
    int rc;
    if (s->state == FINISHED) {
        s->err[0] = '\0';
    } else if ((rc = check_state(s, STARTED, "exchange buffers")) != 0) {
        return rc;
    } else if ((rc = comm_wait(s)) != 0) { /* the client is the pipeline's until then */
        return rc;
    }
    rc = dcps_client_buffers(s->client, mode, publish, floats, n_floats, ints, n_ints,
                             out_floats, out_ints);
    return rc < 0 ? fail(s, rc, "exchanging buffers") : rc;
}

int dcps_step_wait(dcps_step_t *s)
{
    return comm_wait(s);
}

const float *dcps_step_pulled(const dcps_step_t *s)
{
    return s->comm.started ? s->pulled : NULL;
}

uint64_t dcps_step_resumed(const dcps_step_t *s)
{
    return s->resumed;
}

const char *dcps_step_error(const dcps_step_t *s)
{
    return s->err;
}

void dcps_step_info(const dcps_step_t *s, dcps_step_info_t *out)
{
    *out = (dcps_step_info_t){.cfg = &s->cfg, .rank = s->rank, .n = s->n, .started_s = s->t0};
}
