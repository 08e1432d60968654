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
#include "common/shardmap.h"
#include "kernels/gpu.h"
#include "kernels/topk.h"
#include "proto/codec.h"
#include "worker/compress.h"
#include "worker/step_gpu.h"

#define READY_TIMEOUT_MS 120000 /* how long ranks > 0 wait for rank 0's INIT */

typedef struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool started, busy, stop;
    dcps_encoded_t job;        /* the push in flight */
    float *pull_into;          /* or an ordered pull into this array, without a push */
    uint64_t landed[DCPS_MAX_SHARDS]; /* ordered pull: shard s's range is current up to here */
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
    /* A step in ranges (dcps_step_set_ranges): range j is [ends[j - 1], ends[j])
     * (ends[-1] = 0), encoded by its own compressor; its piece of a shard's
     * range goes as piece_parts() parts: the first piece's from part
     * first_part[j] of its first shard's push, and every further shard it
     * covers starts with it (part 0). A sparse range's global indices go to
     * ridx at its own offset (k <= its length). pushed[j]: range j was pushed
     * in the step in progress (in_step), of number step_no in epoch step_epoch. */
    size_t n_ranges;
    size_t *ends;
    dcps_compress_t **rcomp;
    uint32_t *first_part, *ridx;
    bool split; /* pieces go in parts by size (dcps_parts_for), not one each */
    uint32_t parts[DCPS_MAX_SHARDS];
    dcps_range_t shard[DCPS_MAX_SHARDS];
    unsigned char *pushed;
    bool in_step;
    uint64_t step_no;
    int step_epoch;
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

/* An ordered pull's sink: each reply (or part of one) lands in params, and
 * the shard's range is current up to its end (dcps_step_wait_range). A delta
 * lands whole: its shard is current once its reply came, which the pull's end
 * says for an empty one. */
static void landed(dcps_step_t *s, int sh, uint64_t upto)
{
    comm_t *c = &s->comm;
    pthread_mutex_lock(&c->mu);
    if (upto > c->landed[sh])
        c->landed[sh] = upto;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static int land_dense(void *arg, uint64_t lo, const float *v, size_t n)
{
    dcps_step_t *s = arg;
    memcpy(s->comm.pull_into + lo, v, n * sizeof *v);
    landed(s, dcps_shardmap_owner(s->n, s->cfg.n_shards, lo), lo + n);
    return 0;
}

static int land_delta(void *arg, const uint32_t *idx, const float *val, size_t k)
{
    dcps_step_t *s = arg;
    dcps_scatter_add_cpu(s->comm.pull_into, idx, val, k, 1.0f);
    if (k > 0) {
        int sh = dcps_shardmap_owner(s->n, s->cfg.n_shards, idx[0]);
        landed(s, sh, s->shard[sh].hi);
    }
    return 0;
}

/* The parts a step in ranges asks its pull's replies in: as many as the
 * step's ranges give the shard that has most, so that the front of each
 * shard's range lands first. */
static uint32_t most_parts(const dcps_step_t *s)
{
    uint32_t most = 1;
    for (int sh = 0; sh < s->cfg.n_shards; sh++)
        if (s->parts[sh] > most)
            most = s->parts[sh];
    return most;
}

/* The pull of an ordered step end, on the pipeline's thread. */
static int ordered_pull(dcps_step_t *s)
{
    dcps_client_set_reply_parts(s->client, most_parts(s));
    dcps_pull_sink_t sink = {land_dense, land_delta, s};
    int rc = dcps_client_pull_to(s->client, &sink, 0);
    dcps_client_set_reply_parts(s->client, 0);
    return rc == 0 ? 0 : fail(s, rc, "pull");
}

/* The pipeline's thread: runs each posted job (push, then pull into pulled;
 * or an ordered pull alone). */
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
        int rc;
        if (c->pull_into) {
            rc = ordered_pull(s);
        } else if ((rc = push_encoded(s, &c->job)) == 0) {
            rc = pull(s, s->pulled, false, "pull");
        }
        pthread_mutex_lock(&c->mu);
        c->pull_into = NULL;
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

/* Posts a push and pull (e), or with `into` an ordered pull into it alone.
 * The counters the caller sees meanwhile are the client's now: after the
 * push of an ordered step's end, which moved the clock on. */
static void comm_post(dcps_step_t *s, const dcps_encoded_t *e, float *into)
{
    comm_t *c = &s->comm;
    pthread_mutex_lock(&c->mu);
    dcps_client_stats(s->client, &c->stats);
    c->lr = dcps_client_lr(s->client);
    if (e)
        c->job = *e;
    c->pull_into = into;
    for (int sh = 0; sh < s->cfg.n_shards; sh++)
        c->landed[sh] = s->shard[sh].lo;
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

/* Frees the ranges of dcps_step_set_ranges. */
static void free_ranges(dcps_step_t *s)
{
    for (size_t j = 0; s->rcomp && j < s->n_ranges; j++)
        dcps_compress_destroy(&s->rcomp[j]);
    free(s->rcomp);
    free(s->ends);
    free(s->first_part);
    free(s->ridx);
    free(s->pushed);
    s->rcomp = NULL;
    s->ends = NULL;
    s->first_part = s->ridx = NULL;
    s->pushed = NULL;
    s->n_ranges = 0;
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
    free_ranges(s);
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
 * non-finite entry of grad (entries lo to hi of the model), or says the
 * residual diverged. Error path only. */
static int nonfinite(dcps_step_t *s, const float *grad, size_t lo, size_t hi, uint64_t step)
{
    char name[160];
    for (size_t i = lo; grad && i < hi; i++)
        if (!isfinite(grad[i - lo])) {
            name_entry(s, i, name, sizeof name);
            return dcps_say(s->err, sizeof s->err, DCPS_E_NONFINITE,
                            "step %" PRIu64 ": the gradient of %s is %g, not finite; lower "
                            "[optimizer] lr?",
                            step, name, (double)grad[i - lo]);
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
    if ((int)s->state == want && !(want == STARTED && s->in_step))
        return 0;
    if ((int)s->state == want) /* a step in ranges holds the client's push */
        return dcps_say(s->err, sizeof s->err, DCPS_E_STATE,
                        "cannot %s: step %" PRIu64 " in ranges is open; end it with "
                        "dcps_step_end",
                        what, s->step_no);
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

/* Delta pulls follow the density warm-up as pushes do. */
static void set_epoch(dcps_step_t *s, int epoch)
{
    if (epoch == s->epoch)
        return;
    s->epoch = epoch;
    dcps_client_set_pull_density(s->client,
                                 dcps_config_density_at(dcps_config_pull_density(&s->cfg),
                                                        s->cfg.density_warmup_epochs, epoch));
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
        rc = nonfinite(s, host, 0, s->n, step);
        goto failed;
    }
    if (rc != 0) {
        dcps_say(s->err, sizeof s->err, rc, "step %" PRIu64 ": compressing the gradient: %s",
                 step, dcps_strerror(rc));
        goto failed;
    }
    set_epoch(s, epoch);
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
        comm_post(s, &e, NULL);
        if ((rc = comm_wait(s)) != 0)
            goto failed;
        memcpy(params, s->pulled, s->n * sizeof(float));
        return 0;
    }
    for (size_t i = 0; i < s->n; i++)
        params[i] = s->pulled[i] - s->local_lr * grad[i];
    comm_post(s, &e, NULL);
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

/* --- a step in ranges ------------------------------------------------------------- */

/* What a step in ranges does not do in this version, as the key (or call)
 * that asks for it; NULL when it can run. */
static const char *ranges_refuse(const dcps_step_t *s)
{
    const dcps_config_t *cfg = &s->cfg;
    if (s->gpu)
        return "device arrays (dcps_step_use_stream)";
    if (cfg->pipeline)
        return "[compression] pipeline = true";
    if (cfg->clip_norm > 0)
        return "[compression] clip_norm > 0 (the norm is the whole gradient's)";
    return NULL;
}

/* The start of range j. */
static size_t range_lo(const dcps_step_t *s, size_t j)
{
    return j ? s->ends[j - 1] : 0;
}

/* The ends of dcps_step_set_ranges: 0, or DCPS_E_INVAL with a sentence
 * naming the first range that does not tile the model. */
static int check_ends(dcps_step_t *s, const size_t *ends, size_t count)
{
    if (count == 0 || !ends)
        return dcps_say(s->err, sizeof s->err, DCPS_E_INVAL,
                        "no ranges: give at least one, the last ending at the model's %zu "
                        "parameters",
                        s->n);
    for (size_t j = 0; j < count; j++) {
        size_t lo = j ? ends[j - 1] : 0;
        if (ends[j] <= lo || ends[j] > s->n)
            return dcps_say(s->err, sizeof s->err, DCPS_E_INVAL,
                            "range %zu, [%zu, %zu), is not a nonempty range of the model's %zu "
                            "parameters: the ends ascend strictly, from above 0 to %zu",
                            j, lo, ends[j], s->n, s->n);
    }
    if (ends[count - 1] != s->n)
        return dcps_say(s->err, sizeof s->err, DCPS_E_INVAL,
                        "the ranges end at %zu, and the model has %zu parameters: [%zu, %zu) is "
                        "in no range (the last must end at the model's size)",
                        ends[count - 1], s->n, ends[count - 1], s->n);
    return 0;
}

/* The parts a range's piece [lo, hi) of shard sh's range goes in: by its
 * size, as a whole push's parts (dcps_parts_for), or one. */
static uint32_t piece_parts(const dcps_step_t *s, bool split, int sh, uint64_t lo, uint64_t hi)
{
    return split ? dcps_parts_for(&s->cfg, hi - lo, s->shard[sh].hi - s->shard[sh].lo) : 1;
}

/* Numbers the pieces of the ranges `ends` (count of them) as parts of each
 * shard's push: parts[sh] in all, first[j] the first part of range j's first
 * piece. 0, or the first range that makes a shard's parts exceed
 * DCPS_PARTS_MAX, plus one, and that shard in *over. */
static size_t number_parts(const dcps_step_t *s, const size_t *ends, size_t count, bool split,
                           uint32_t *parts, uint32_t *first, int *over)
{
    const int S = s->cfg.n_shards;
    memset(parts, 0, (size_t)S * sizeof *parts);
    for (size_t j = 0; j < count; j++) {
        size_t lo = j ? ends[j - 1] : 0;
        int sh = dcps_shardmap_owner(s->n, S, lo);
        first[j] = parts[sh];
        for (; sh < S && s->shard[sh].lo < ends[j]; sh++) {
            uint64_t plo = lo > s->shard[sh].lo ? lo : s->shard[sh].lo;
            uint64_t phi = ends[j] < s->shard[sh].hi ? ends[j] : s->shard[sh].hi;
            parts[sh] += piece_parts(s, split, sh, plo, phi);
            if (parts[sh] > DCPS_PARTS_MAX) {
                *over = sh;
                return j + 1;
            }
        }
    }
    return 0;
}

/* The parts of every shard's push for the ranges `ends` (number_parts), large
 * pieces in parts by size (*split) while every shard's parts fit in a push,
 * else one part a piece: 0, or DCPS_E_INVAL naming the range one too many. */
static int number_ranges(dcps_step_t *s, const size_t *ends, size_t count, uint32_t *parts,
                         uint32_t *first, bool *split)
{
    int sh = 0;
    size_t bad = number_parts(s, ends, count, *split = true, parts, first, &sh);
    if (bad)
        bad = number_parts(s, ends, count, *split = false, parts, first, &sh);
    if (!bad)
        return 0;
    size_t j = bad - 1, lo = j ? ends[j - 1] : 0;
    return dcps_say(s->err, sizeof s->err, DCPS_E_INVAL,
                    "shard %d's range [%" PRIu64 ", %" PRIu64 ") would take more than %d of the "
                    "ranges (range %zu, [%zu, %zu), is one too many): a push has at most %d "
                    "parts a shard; give fewer, larger ranges",
                    sh, s->shard[sh].lo, s->shard[sh].hi, DCPS_PARTS_MAX, j, lo, ends[j],
                    DCPS_PARTS_MAX);
}

int dcps_step_set_ranges(dcps_step_t *s, const size_t *ends, size_t count)
{
    int rc = 0;
    const int S = s->cfg.n_shards;
    uint32_t parts[DCPS_MAX_SHARDS] = {0};
    if (s->state == FAILED || s->state == FINISHED)
        return check_state(s, STARTED, "set the ranges");
    if (s->in_step)
        return dcps_say(s->err, sizeof s->err, DCPS_E_STATE,
                        "the ranges change between steps, and step %" PRIu64 " in ranges is "
                        "open; end it with dcps_step_end first",
                        s->step_no);
    if ((rc = comm_wait(s)) != 0) { /* its ordered pull reads the ranges' shards */
        s->state = FAILED;
        return rc;
    }
    s->err[0] = '\0';
    const char *no = ranges_refuse(s);
    if (no)
        return dcps_say(s->err, sizeof s->err, DCPS_E_CONFIG,
                        "%s is not supported with a step in ranges in this version: change it, "
                        "or push the whole gradient with dcps_step_run",
                        no);
    if ((rc = check_ends(s, ends, count)) != 0)
        return rc;
    for (int sh = 0; sh < S; sh++)
        s->shard[sh] = dcps_shardmap_range(s->n, S, sh);
    uint32_t *first = malloc(count * sizeof *first);
    size_t *e = malloc(count * sizeof *e);
    unsigned char *pushed = calloc(count, 1);
    dcps_compress_t **comp = calloc(count, sizeof *comp);
    uint32_t *ridx = s->cfg.push == DCPS_PUSH_TOPK ? malloc(s->n * sizeof *ridx) : NULL;
    if (!first || !e || !pushed || !comp || (s->cfg.push == DCPS_PUSH_TOPK && !ridx)) {
        rc = dcps_say(s->err, sizeof s->err, DCPS_E_NOMEM, "out of memory for %zu ranges", count);
        goto fail;
    }
    memcpy(e, ends, count * sizeof *e);
    bool split;
    if ((rc = number_ranges(s, ends, count, parts, first, &split)) != 0)
        goto fail;
    for (size_t j = 0; j < count; j++) {
        size_t lo = j ? ends[j - 1] : 0;
        if (!(comp[j] = dcps_compress_new(&s->cfg, ends[j] - lo, &rc))) {
            dcps_say(s->err, sizeof s->err, rc, "range %zu's compressor: %s", j, dcps_strerror(rc));
            goto fail;
        }
    }
    free_ranges(s);
    s->ends = e;
    s->first_part = first;
    s->split = split;
    s->pushed = pushed;
    s->rcomp = comp;
    s->ridx = ridx;
    s->n_ranges = count;
    memcpy(s->parts, parts, sizeof parts);
    return 0;
fail:
    for (size_t j = 0; comp && j < count; j++)
        dcps_compress_destroy(&comp[j]);
    free(comp);
    free(ridx);
    free(pushed);
    free(e);
    free(first);
    return rc;
}

int dcps_step_begin(dcps_step_t *s, int epoch)
{
    int rc;
    if ((rc = check_state(s, STARTED, "begin a step")) != 0)
        return rc;
    if (s->n_ranges == 0)
        return dcps_say(s->err, sizeof s->err, DCPS_E_STATE,
                        "cannot begin a step in ranges: no ranges were given "
                        "(dcps_step_set_ranges)");
    if (s->gpu) /* dcps_step_use_stream after the ranges were set */
        return dcps_say(s->err, sizeof s->err, DCPS_E_CONFIG,
                        "a step in ranges takes host arrays in this version, and this step "
                        "has device arrays (dcps_step_use_stream)");
    if ((rc = comm_wait(s)) != 0) /* the ordered pull in flight */
        goto failed;
    s->err[0] = '\0';
    if (epoch < 1)
        epoch = 1;
    set_epoch(s, epoch);
    s->step_no = dcps_step_clock(s) + 1;
    s->step_epoch = epoch;
    memset(s->pushed, 0, s->n_ranges);
    /* Each shard's pull goes as soon as its push was given (a job of dense
     * pulls): its reply moves while the caller computes the rest. */
    if ((rc = dcps_client_parts_begin(s->client, s->parts, most_parts(s))) != 0) {
        fail(s, rc, "beginning a push in parts");
        goto failed;
    }
    s->in_step = true;
    return 0;
failed:
    s->state = FAILED;
    return rc;
}

/* The range that holds entry i (i < n). */
static size_t range_of(const dcps_step_t *s, size_t i)
{
    size_t lo = 0, hi = s->n_ranges - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->ends[mid] <= i)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Sends range j's encoding e: its piece of each shard it covers, in the
 * piece's parts of that shard's push (piece_parts), in e's value format. What
 * rounding took from each part's values lands at the part's own offset in
 * e->lost, the whole range's loss once every part is sent (dcps_compress_keep). */
static int send_range(dcps_step_t *s, size_t j, const dcps_encoded_t *e)
{
    const size_t lo = range_lo(s, j), hi = s->ends[j];
    uint32_t *idx = NULL;
    if (!e->dense) { /* the range's compressor counts from its start */
        idx = s->ridx + lo;
        for (size_t i = 0; i < e->k; i++)
            idx[i] = e->idx[i] + (uint32_t)lo;
    }
    int first = dcps_shardmap_owner(s->n, s->cfg.n_shards, lo);
    for (int sh = first; sh < s->cfg.n_shards && s->shard[sh].lo < hi; sh++) {
        const uint64_t plo = lo > s->shard[sh].lo ? lo : s->shard[sh].lo;
        const uint64_t phi = hi < s->shard[sh].hi ? hi : s->shard[sh].hi;
        const uint32_t k = piece_parts(s, s->split, sh, plo, phi);
        const uint32_t part0 = sh == first ? s->first_part[j] : 0;
        for (uint32_t i = 0; i < k; i++) { /* bounds as a whole push's parts */
            dcps_push_part_t p = {plo + (phi - plo) * i / k, plo + (phi - plo) * (i + 1) / k,
                                  NULL, NULL, 0, e->dtype, e->tau, NULL};
            size_t at = p.lo - lo; /* the part's first value in e */
            if (!e->dense) {
                at = dcps_lower_bound(idx, e->k, p.lo);
                p.idx = idx + at;
                p.k = dcps_lower_bound(idx, e->k, p.hi) - at;
            }
            p.val = e->values + at;
            p.lost = e->lost ? e->lost + at : NULL;
            int rc = dcps_client_parts_send(s->client, sh, part0 + i, &p);
            if (rc != 0)
                return fail(s, rc, "push");
        }
    }
    return 0;
}

int dcps_step_push_range(dcps_step_t *s, size_t lo, size_t hi, float *grad)
{
    dcps_encoded_t e;
    int rc;
    if (s->state == FAILED)
        return DCPS_E_STATE;
    if (!s->in_step)
        return dcps_say(s->err, sizeof s->err, DCPS_E_STATE,
                        "cannot push the range [%zu, %zu): no step in ranges is open "
                        "(dcps_step_begin first)",
                        lo, hi);
    if (lo >= hi || hi > s->n || !grad)
        return dcps_say(s->err, sizeof s->err, DCPS_E_INVAL,
                        "range [%zu, %zu)%s is not a nonempty range of the model's %zu "
                        "parameters",
                        lo, hi, grad ? "" : " without a gradient", s->n);
    size_t j = range_of(s, lo);
    if (range_lo(s, j) != lo || s->ends[j] != hi)
        return dcps_say(s->err, sizeof s->err, DCPS_E_INVAL,
                        "range [%zu, %zu) is not one of the step's ranges: it overlaps range "
                        "%zu, [%zu, %zu) (dcps_step_set_ranges); a range is pushed whole, "
                        "as given there",
                        lo, hi, j, range_lo(s, j), s->ends[j]);
    if (s->pushed[j])
        return dcps_say(s->err, sizeof s->err, DCPS_E_INVAL,
                        "range [%zu, %zu) was pushed already in step %" PRIu64
                        ": each range is pushed once a step",
                        lo, hi, s->step_no);
    s->err[0] = '\0';
    rc = dcps_compress_encode(s->rcomp[j], grad, (long)s->step_no, s->step_epoch, &e);
    if (rc == DCPS_E_NONFINITE) {
        rc = nonfinite(s, grad, lo, hi, s->step_no);
        goto failed;
    }
    if (rc != 0) {
        dcps_say(s->err, sizeof s->err, rc,
                 "step %" PRIu64 ": compressing the gradient of range [%zu, %zu): %s", s->step_no,
                 lo, hi, dcps_strerror(rc));
        goto failed;
    }
    if ((rc = send_range(s, j, &e)) != 0)
        goto failed;
    dcps_compress_keep(s->rcomp[j], &e);
    s->pushed[j] = 1;
    return 0;
failed:
    s->in_step = false;
    s->state = FAILED;
    return rc;
}

int dcps_step_end(dcps_step_t *s, float *params, int ordered)
{
    int rc;
    if (s->state == FAILED)
        return DCPS_E_STATE;
    if (!s->in_step)
        return dcps_say(s->err, sizeof s->err, DCPS_E_STATE,
                        "cannot end a step: no step in ranges is open (dcps_step_begin first)");
    if (!params)
        return dcps_say(s->err, sizeof s->err, DCPS_E_INVAL,
                        "step %" PRIu64 ": no array to pull the parameters into", s->step_no);
    for (size_t j = 0; j < s->n_ranges; j++)
        if (!s->pushed[j])
            return dcps_say(s->err, sizeof s->err, DCPS_E_INVAL,
                            "range [%zu, %zu) was not pushed in step %" PRIu64
                            ": the step's ranges tile the model, and each is pushed once "
                            "before dcps_step_end",
                            range_lo(s, j), s->ends[j], s->step_no);
    s->in_step = false;
    s->err[0] = '\0';
    if ((rc = dcps_client_parts_end(s->client)) != 0) {
        fail(s, rc, "push");
        goto failed;
    }
    if (!ordered) {
        if ((rc = pull(s, params, false, "pull")) != 0)
            goto failed;
        return 0;
    }
    if (!s->comm.started && (rc = comm_start(s)) != 0)
        goto failed;
    comm_post(s, NULL, params);
    return 0;
failed:
    s->state = FAILED;
    return rc;
}

/* Whether the ordered pull in flight has landed [lo, hi). Under comm.mu. */
static bool covered(const dcps_step_t *s, size_t lo, size_t hi)
{
    for (int sh = dcps_shardmap_owner(s->n, s->cfg.n_shards, lo);
         sh < s->cfg.n_shards && s->shard[sh].lo < hi; sh++)
        if (s->comm.landed[sh] < (hi < s->shard[sh].hi ? hi : s->shard[sh].hi))
            return false;
    return true;
}

int dcps_step_wait_range(dcps_step_t *s, size_t lo, size_t hi)
{
    comm_t *c = &s->comm;
    if (s->state == FAILED)
        return DCPS_E_STATE;
    if (lo >= hi || hi > s->n)
        return dcps_say(s->err, sizeof s->err, DCPS_E_INVAL,
                        "range [%zu, %zu) is not a nonempty range of the model's %zu parameters",
                        lo, hi, s->n);
    if (!c->started)
        return 0;
    pthread_mutex_lock(&c->mu);
    while (c->busy && c->pull_into && !covered(s, lo, hi))
        pthread_cond_wait(&c->cv, &c->mu);
    bool busy = c->busy;
    pthread_mutex_unlock(&c->mu);
    if (busy) /* landed, with the rest of the pull still coming */
        return 0;
    int rc = comm_wait(s); /* the pull ended: its result, once */
    if (rc != 0)
        s->state = FAILED;
    return rc;
}

void dcps_step_info(const dcps_step_t *s, dcps_step_info_t *out)
{
    *out = (dcps_step_info_t){.cfg = &s->cfg, .rank = s->rank, .n = s->n, .started_s = s->t0};
}
