/* libdcps — the device half of a step; see step_gpu.h.
 *
 * Per step, what crosses PCIe: a top-k step downloads its k indices and k
 * values (the residual and the selection stay on the device); a dense step
 * downloads n values; a pull uploads what the shards sent, a dense range as
 * it is and a delta as its (index, value) pairs, which a kernel adds in place.
 * The host waits for the stream where it must read what the device wrote (an
 * encode, a download), and before it overwrites pinned staging that a queued
 * upload may still read (the event `uploaded`); nowhere else. */
#include "worker/step_gpu.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "kernels/gpu.h"
#include "kernels/residual.h"
#include "kernels/topk.h"
#include "proto/codec.h"
#include "proto/quant.h"

struct dcps_step_gpu {
    size_t n;
    bool topk, ef; /* as in compress.c: a residual for top-k, two-bit or shorter values */
    bool twobit;
    uint32_t dtype; /* [compression] values */
    float tau;
    double density;
    int warmup_epochs;
    long warmup_steps, correction_every;
    dcps_stream_t stream;
    dcps_topk_gpu_ws_t *ws; /* top-k push only */
    float *d_r;             /* the residual (n), error feedback only */
    uint32_t *d_idx;        /* cap entries each: the selection's output, a pull's deltas */
    float *d_val;
    float *h_dense;  /* pinned, n */
    uint32_t *h_idx; /* pinned, cap each */
    float *h_val;
    float *h_lost;   /* pinned, n: what rounding took (shorter values, error feedback) */
    size_t cap;
    /* a pull in progress */
    float *d_params;
    size_t staged;         /* delta pairs in h_idx/h_val not yet queued */
    dcps_event_t uploaded; /* recorded after the last queued upload */
};

int dcps_step_gpu_refuses(const dcps_config_t *cfg, char *buf, size_t len)
{
    if (cfg->pipeline)
        snprintf(buf, len, "[compression] pipeline = true");
    else if (cfg->push == DCPS_PUSH_TOPK && cfg->momentum_correction > 0)
        snprintf(buf, len, "[compression] momentum_correction = %g", cfg->momentum_correction);
    else if (cfg->clip_norm > 0)
        snprintf(buf, len, "[compression] clip_norm = %g", cfg->clip_norm);
    else
        return 0;
    return DCPS_E_CONFIG;
}

static size_t k_at(const dcps_step_gpu_t *g, int epoch)
{
    return dcps_config_entries(dcps_config_density_at(g->density, g->warmup_epochs, epoch), g->n);
}

dcps_step_gpu_t *dcps_step_gpu_new(const dcps_config_t *cfg, size_t n, void *stream, int *err,
                                   char *errbuf, size_t errlen)
{
    int rc = DCPS_E_NOMEM;
    const char *what = "its state";
    dcps_step_gpu_t *g = calloc(1, sizeof *g);
    if (!g)
        goto fail;
    g->n = n;
    g->topk = cfg->push == DCPS_PUSH_TOPK;
    g->twobit = cfg->push == DCPS_PUSH_TWOBIT;
    g->dtype = dcps_config_values_dtype(cfg);
    g->tau = (float)cfg->threshold;
    g->ef = (g->topk || g->twobit || g->dtype != DCPS_DTYPE_F32) && cfg->error_feedback;
    g->density = cfg->density;
    g->warmup_epochs = cfg->density_warmup_epochs;
    g->warmup_steps = cfg->warmup_steps;
    g->correction_every = cfg->correction_every;
    g->stream = stream;
    /* What a pull may bring as deltas in epoch 1: each shard sends at most
     * ⌈ρ · its range⌉ (server/shard.c), which sums to at most ⌈ρ n⌉ plus one per
     * shard. More is scattered in rounds, so this is a size, not a limit. */
    size_t push_k = g->topk ? k_at(g, 1) : 0, pull_k = 0;
    if (cfg->pull == DCPS_PULL_DELTA)
        pull_k = dcps_config_entries(dcps_config_density_at(dcps_config_pull_density(cfg),
                                                            cfg->density_warmup_epochs, 1),
                                     n) +
                 (size_t)cfg->n_shards;
    g->cap = push_k > pull_k ? push_k : pull_k;
    if (g->cap > n)
        g->cap = n;
    if (g->cap == 0)
        g->cap = 1;

    if ((rc = dcps_gpu_event_new(&g->uploaded)) != 0) {
        what = "an event";
        goto fail;
    }
    if (g->topk && !(g->ws = dcps_topk_gpu_ws_new(n, &rc))) {
        what = "the top-k selection's workspace";
        goto fail;
    }
    what = "the residual and the k-sized arrays";
    if ((g->ef && (rc = dcps_gpu_alloc((void **)&g->d_r, n * sizeof(float))) != 0) ||
        (rc = dcps_gpu_alloc((void **)&g->d_idx, g->cap * sizeof(uint32_t))) != 0 ||
        (rc = dcps_gpu_alloc((void **)&g->d_val, g->cap * sizeof(float))) != 0)
        goto fail;
    what = "pinned staging";
    if ((rc = dcps_gpu_host_alloc((void **)&g->h_dense, n * sizeof(float))) != 0 ||
        (rc = dcps_gpu_host_alloc((void **)&g->h_idx, g->cap * sizeof(uint32_t))) != 0 ||
        (rc = dcps_gpu_host_alloc((void **)&g->h_val, g->cap * sizeof(float))) != 0 ||
        (g->ef && (g->twobit || g->dtype != DCPS_DTYPE_F32) &&
         (rc = dcps_gpu_host_alloc((void **)&g->h_lost, n * sizeof(float))) != 0))
        goto fail;
    what = "zeroing the residual";
    if (g->ef && ((rc = dcps_gpu_memset(g->d_r, 0, n * sizeof(float), stream)) != 0 ||
                  (rc = dcps_gpu_sync(stream)) != 0))
        goto fail;
    *err = 0;
    return g;
fail:
    dcps_say(errbuf, errlen, rc, "device arrays for %zu parameters: %s: %s", n, what,
             dcps_strerror(rc));
    *err = rc;
    dcps_step_gpu_destroy(&g);
    return NULL;
}

void dcps_step_gpu_destroy(dcps_step_gpu_t **gp)
{
    dcps_step_gpu_t *g = gp ? *gp : NULL;
    if (!g)
        return;
    if (g->uploaded) /* staging may not be freed under a queued copy */
        dcps_gpu_event_sync(g->uploaded);
    dcps_gpu_host_free(g->h_lost);
    dcps_gpu_host_free(g->h_val);
    dcps_gpu_host_free(g->h_idx);
    dcps_gpu_host_free(g->h_dense);
    dcps_gpu_free(g->d_val);
    dcps_gpu_free(g->d_idx);
    dcps_gpu_free(g->d_r);
    dcps_topk_gpu_ws_destroy(&g->ws);
    dcps_gpu_event_destroy(&g->uploaded);
    free(g);
    *gp = NULL;
}

int dcps_step_gpu_set_stream(dcps_step_gpu_t *g, void *stream)
{
    int rc = dcps_gpu_event_sync(g->uploaded);
    if (rc == 0)
        g->stream = stream;
    return rc;
}

/* A dense step: all of r + g (error feedback; r is then cleared) or g. */
static int encode_dense(dcps_step_gpu_t *g, const float *d_g, dcps_encoded_t *out)
{
    const float *send = d_g;
    int rc;
    if (g->ef) {
        if ((rc = dcps_residual_add_gpu(g->d_r, d_g, g->n, g->stream)) != 0)
            return rc;
        send = g->d_r;
    }
    if ((rc = dcps_gpu_to_host(g->h_dense, send, g->n * sizeof(float), g->stream)) != 0 ||
        (rc = dcps_gpu_sync(g->stream)) != 0)
        return rc;
    if (!dcps_compress_finite(g->h_dense, g->n))
        return DCPS_E_NONFINITE; /* r keeps the sum, as on the host */
    if (g->ef && (rc = dcps_gpu_memset(g->d_r, 0, g->n * sizeof(float), g->stream)) != 0)
        return rc;
    *out = (dcps_encoded_t){.dense = true, .values = g->h_dense, .k = g->n, .density = 1,
                            .dtype = g->dtype, .lost = g->h_lost};
    return 0;
}

/* A top-k step: the selection on the device (which waits for the stream),
 * then only its k pairs come to the host. */
static int encode_topk(dcps_step_gpu_t *g, const float *d_g, size_t k, dcps_encoded_t *out)
{
    int rc = g->ef ? dcps_topk_ef_gpu(g->d_r, d_g, g->n, k, g->d_idx, g->d_val, g->ws, g->stream)
                   : dcps_topk_gpu(d_g, g->n, k, g->d_idx, g->d_val, g->ws, g->stream);
    if (rc != 0)
        return rc;
    if ((rc = dcps_gpu_to_host(g->h_idx, g->d_idx, k * sizeof(uint32_t), g->stream)) != 0 ||
        (rc = dcps_gpu_to_host(g->h_val, g->d_val, k * sizeof(float), g->stream)) != 0 ||
        (rc = dcps_gpu_sync(g->stream)) != 0)
        return rc;
    if (!dcps_compress_finite(g->h_val, k)) /* the selection refuses them; checked here too */
        return DCPS_E_NONFINITE;
    *out = (dcps_encoded_t){.values = g->h_val, .idx = g->h_idx, .k = k, .dtype = g->dtype,
                            .lost = g->h_lost};
    return 0;
}

int dcps_step_gpu_keep(dcps_step_gpu_t *g, const dcps_encoded_t *e)
{
    int rc;
    if (!e->lost)
        return 0;
    if (e->dense) /* r is zero since the encode: it becomes what rounding took */
        rc = dcps_gpu_to_device(g->d_r, e->lost, g->n * sizeof(float), g->stream);
    else if ((rc = dcps_gpu_to_device(g->d_val, e->lost, e->k * sizeof(float), g->stream)) == 0)
        rc = dcps_scatter_add_gpu(g->d_r, g->d_idx, g->d_val, e->k, 1.0f, g->stream);
    return rc == 0 ? dcps_gpu_event_record(g->uploaded, g->stream) : rc;
}

int dcps_step_gpu_encode(dcps_step_gpu_t *g, const float *d_g, long step, int epoch,
                         dcps_encoded_t *out)
{
    int rc;
    if (step < 1 || epoch < 1)
        return DCPS_E_INVAL;
    /* The downloads below are ordered after the last pull's uploads on the
     * stream; this wait is for a stream changed since. */
    if ((rc = dcps_gpu_event_sync(g->uploaded)) != 0)
        return rc;
    bool dense = !g->topk || step <= g->warmup_steps ||
                 (g->correction_every > 0 && step % g->correction_every == 0);
    if (dense) {
        rc = encode_dense(g, d_g, out);
        if (rc == 0 && g->twobit && step > g->warmup_steps &&
            !(g->correction_every > 0 && step % g->correction_every == 0)) {
            out->dtype = DCPS_DTYPE_TWOBIT; /* as compress.c */
            out->tau = g->tau;
        }
        return rc;
    }
    size_t k = k_at(g, epoch);
    if ((rc = encode_topk(g, d_g, k, out)) == 0)
        out->density = dcps_config_density_at(g->density, g->warmup_epochs, epoch);
    return rc;
}

int dcps_step_gpu_download(dcps_step_gpu_t *g, const float *d_x, const float **host)
{
    int rc;
    if ((rc = dcps_gpu_event_sync(g->uploaded)) != 0 ||
        (rc = dcps_gpu_to_host(g->h_dense, d_x, g->n * sizeof(float), g->stream)) != 0 ||
        (rc = dcps_gpu_sync(g->stream)) != 0)
        return rc;
    *host = g->h_dense;
    return 0;
}

/* Queues the staged deltas: upload, then add them into the parameters. */
static int flush(dcps_step_gpu_t *g)
{
    size_t k = g->staged;
    int rc;
    if (k == 0)
        return 0;
    g->staged = 0;
    if ((rc = dcps_gpu_to_device(g->d_idx, g->h_idx, k * sizeof(uint32_t), g->stream)) != 0 ||
        (rc = dcps_gpu_to_device(g->d_val, g->h_val, k * sizeof(float), g->stream)) != 0 ||
        (rc = dcps_scatter_add_gpu(g->d_params, g->d_idx, g->d_val, k, 1.0f, g->stream)) != 0)
        return rc;
    return dcps_gpu_event_record(g->uploaded, g->stream);
}

static int sink_dense(void *arg, uint64_t lo, const float *v, size_t n)
{
    dcps_step_gpu_t *g = arg;
    /* Shards' ranges are disjoint: this part of the staging is free. */
    memcpy(g->h_dense + lo, v, n * sizeof *v);
    return dcps_gpu_to_device(g->d_params + lo, g->h_dense + lo, n * sizeof *v, g->stream);
}

static int sink_delta(void *arg, const uint32_t *idx, const float *val, size_t k)
{
    dcps_step_gpu_t *g = arg;
    int rc;
    while (k > 0) {
        if (g->staged == g->cap) { /* full: queue it, and wait before staging more */
            if ((rc = flush(g)) != 0 || (rc = dcps_gpu_event_sync(g->uploaded)) != 0)
                return rc;
        }
        size_t m = g->cap - g->staged < k ? g->cap - g->staged : k;
        memcpy(g->h_idx + g->staged, idx, m * sizeof *idx);
        memcpy(g->h_val + g->staged, val, m * sizeof *val);
        g->staged += m;
        idx += m;
        val += m;
        k -= m;
    }
    return 0;
}

int dcps_step_gpu_sink(dcps_step_gpu_t *g, float *d_params, dcps_pull_sink_t *sink)
{
    int rc = dcps_gpu_event_sync(g->uploaded);
    if (rc != 0)
        return rc;
    g->d_params = d_params;
    g->staged = 0;
    *sink = (dcps_pull_sink_t){sink_dense, sink_delta, g};
    return 0;
}

int dcps_step_gpu_pull_end(dcps_step_gpu_t *g)
{
    int rc = flush(g);
    if (rc == 0)
        rc = dcps_gpu_event_record(g->uploaded, g->stream);
    return rc;
}
