/* dcps — the worker's gradient compressor; see compress.h.
 *
 * The state lives in one zeroed block carved at setup:
 *   r      the residual, n floats (under momentum correction, DGC's accumulated
 *          velocity v); all zero when nothing is held back;
 *   spare  n floats, with error feedback: a dense step sends r itself and swaps
 *          the two, so it copies nothing and does not clear what the caller is
 *          still reading;
 *   u      n floats, under momentum correction: the velocity;
 *   val, idx  max_k entries each, a top-k step's output.
 * A dense push (the key) holds nothing back, whatever error_feedback says: every
 * step would send all of r + g and leave r at zero, so it sends g as it is and
 * needs none of the above but an all-zero r for dcps_compress_residual. */
#include "worker/compress.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/residual.h"
#include "kernels/topk.h"
#include "proto/codec.h"
#include "proto/quant.h"

struct dcps_compress {
    size_t n;
    size_t max_k;   /* the largest k of any epoch: that of epoch 1 */
    bool topk;      /* push = topk */
    bool twobit;    /* push = twobit */
    bool ef;        /* a top-k, two-bit or shorter-valued push with error feedback: r is
                       in use */
    uint32_t dtype; /* [compression] values as a FrameDesc dtype */
    float tau;      /* twobit: [compression] threshold */
    float *lost;    /* max_k: what rounding took from a sparse push's values */
    float mu;       /* momentum correction factor; 0: off */
    double density; /* the target density */
    int warmup_epochs;
    double clip_norm; /* 0: off */
    long warmup_steps, correction_every;
    float *r, *spare, *u, *val;
    uint32_t *idx;
    dcps_topk_ws_t *ws; /* NULL for a dense push */
    float *block;       /* what r, spare, u, val and idx are carved from */
};

/* The keys that dcps_config_load range-checks, checked again for a cfg built by
 * hand, and what the compressor needs on top: a residual for momentum correction. */
static bool valid(const dcps_config_t *cfg, size_t n)
{
    bool topk = cfg->push == DCPS_PUSH_TOPK;
    return n > 0 && (!topk || n <= DCPS_TOPK_MAX_N) &&
           (cfg->push != DCPS_PUSH_TWOBIT || cfg->threshold > 0) && cfg->density > 0 && cfg->density <= 1 &&
           cfg->density_warmup_epochs >= 0 && cfg->momentum_correction >= 0 &&
           cfg->momentum_correction < 1 && cfg->clip_norm >= 0 && cfg->warmup_steps >= 0 &&
           cfg->correction_every >= 0 && (cfg->momentum_correction == 0 || cfg->error_feedback);
}

static size_t k_at(const dcps_compress_t *c, int epoch)
{
    return dcps_config_entries(dcps_compress_density(c, epoch), c->n);
}

dcps_compress_t *dcps_compress_new(const dcps_config_t *cfg, size_t n, int *err)
{
    int rc = DCPS_E_INVAL;
    dcps_compress_t *c = NULL;
    if (!cfg || !valid(cfg, n))
        goto fail;
    rc = DCPS_E_NOMEM;
    if (!(c = calloc(1, sizeof *c)))
        goto fail;
    c->n = n;
    c->topk = cfg->push == DCPS_PUSH_TOPK;
    c->twobit = cfg->push == DCPS_PUSH_TWOBIT;
    c->dtype = dcps_config_values_dtype(cfg);
    c->tau = (float)cfg->threshold;
    c->ef = (c->topk || c->twobit || c->dtype != DCPS_DTYPE_F32) && cfg->error_feedback;
    c->mu = c->topk ? (float)cfg->momentum_correction : 0.0f;
    c->density = cfg->density;
    c->warmup_epochs = cfg->density_warmup_epochs;
    c->clip_norm = cfg->clip_norm;
    c->warmup_steps = cfg->warmup_steps;
    c->correction_every = cfg->correction_every;
    c->max_k = c->topk ? k_at(c, 1) : 0;

    bool lost = c->topk && c->ef && c->dtype != DCPS_DTYPE_F32;
    size_t floats = n * (1 + (size_t)c->ef + (c->mu > 0)) + (2 + lost) * c->max_k;
    float *p = c->block = calloc(floats, sizeof(float));
    if (!p)
        goto fail_block;
    c->r = p;
    p += n;
    if (c->ef) {
        c->spare = p;
        p += n;
    }
    if (c->mu > 0) {
        c->u = p;
        p += n;
    }
    if (c->topk) {
        c->val = p;
        c->idx = (uint32_t *)(p + c->max_k); /* uint32_t and float: 4 bytes, 4-aligned */
        c->lost = lost ? p + 2 * c->max_k : NULL;
        if (!(c->ws = dcps_topk_ws_new(n, &rc)))
            goto fail_ws;
    }
    if (err)
        *err = 0;
    return c;

fail_ws:
    free(c->block);
fail_block:
    free(c);
fail:
    if (err)
        *err = rc;
    return NULL;
}

void dcps_compress_destroy(dcps_compress_t **c)
{
    if (!c || !*c)
        return;
    dcps_topk_ws_destroy(&(*c)->ws);
    free((*c)->block);
    free(*c);
    *c = NULL;
}

double dcps_compress_density(const dcps_compress_t *c, int epoch)
{
    return dcps_config_density_at(c->density, c->warmup_epochs, epoch);
}

const float *dcps_compress_residual(const dcps_compress_t *c)
{
    return c->r;
}

/* Scales g[0..n) to L2 norm `limit` when its norm is above it. Returns false, g
 * unchanged, when g holds NaN or Inf: a sum of squares of floats in double can
 * only be non-finite then. */
static bool clip(float *g, size_t n, double limit)
{
    double sq = 0;
    for (size_t i = 0; i < n; i++)
        sq += (double)g[i] * (double)g[i];
    double norm = sqrt(sq);
    if (!isfinite(norm))
        return false;
    if (norm > limit) {
        float scale = (float)(limit / norm);
        for (size_t i = 0; i < n; i++)
            g[i] *= scale;
    }
    return true;
}

/* Exponent bits all ones are NaN or Inf: the largest exponent field decides,
 * without a branch per entry. */
bool dcps_compress_finite(const float *x, size_t n)
{
    uint32_t top = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], sizeof b);
        b &= 0x7f800000u;
        top = b > top ? b : top;
    }
    return top != 0x7f800000u;
}

/* What enters the residual this step: g, or under momentum correction the
 * velocity u <- mu * u + g (DGC, Algorithm 1). Two statements, so that the product
 * is rounded to float before the addition on every compiler (no fused multiply-add). */
static const float *entering(dcps_compress_t *c, const float *g)
{
    if (!c->u)
        return g;
    for (size_t i = 0; i < c->n; i++) {
        float p = c->mu * c->u[i];
        c->u[i] = p + g[i];
    }
    return c->u;
}

/* A dense step sends all of r + what enters (error feedback) or g, and keeps
 * nothing: r, and the velocity that went into it, become zero. */
static int encode_dense(dcps_compress_t *c, float *g, dcps_encoded_t *out)
{
    float *send = g;
    if (c->ef) {
        dcps_residual_add_cpu(c->r, entering(c, g), c->n);
        send = c->r;
    }
    if (!dcps_compress_finite(send, c->n))
        return DCPS_E_NONFINITE;
    if (c->ef) {
        c->r = c->spare;
        c->spare = send;
        memset(c->r, 0, c->n * sizeof *c->r);
        if (c->u)
            memset(c->u, 0, c->n * sizeof *c->u);
    }
    *out = (dcps_encoded_t){.dense = true, .values = send, .k = c->n, .density = 1,
                            .dtype = c->dtype};
    /* r is all zero now: the push writes what rounding takes straight into it */
    if (c->ef && (c->dtype != DCPS_DTYPE_F32 || c->twobit))
        out->lost = c->r;
    return 0;
}

/* A top-k step sends the k largest magnitudes of r + what enters (error
 * feedback; the kernel clears them in r) or of g. Under momentum correction the
 * velocity is cleared where r was: DGC's momentum factor masking. */
static int encode_topk(dcps_compress_t *c, const float *g, size_t k, dcps_encoded_t *out)
{
    int rc = c->ef ? dcps_topk_ef_cpu(c->r, entering(c, g), c->n, k, c->idx, c->val, c->ws)
                   : dcps_topk_cpu(g, c->n, k, c->idx, c->val, c->ws);
    if (rc != 0)
        return rc;
    if (c->u)
        for (size_t j = 0; j < k; j++)
            c->u[c->idx[j]] = 0.0f;
    *out = (dcps_encoded_t){.values = c->val, .idx = c->idx, .k = k, .dtype = c->dtype,
                            .lost = c->lost};
    return 0;
}

void dcps_compress_keep(dcps_compress_t *c, const dcps_encoded_t *e)
{
    if (e->lost && e->idx)
        for (size_t j = 0; j < e->k; j++)
            c->r[e->idx[j]] += e->lost[j];
}

int dcps_compress_encode(dcps_compress_t *c, float *g, long step, int epoch, dcps_encoded_t *out)
{
    if (step < 1 || epoch < 1)
        return DCPS_E_INVAL;
    if (c->clip_norm > 0 && !clip(g, c->n, c->clip_norm))
        return DCPS_E_NONFINITE;
    bool dense = !c->topk || step <= c->warmup_steps ||
                 (c->correction_every > 0 && step % c->correction_every == 0);
    if (dense) {
        int rc = encode_dense(c, g, out);
        if (rc == 0 && c->twobit && step > c->warmup_steps &&
            !(c->correction_every > 0 && step % c->correction_every == 0)) {
            out->dtype = DCPS_DTYPE_TWOBIT;
            out->tau = c->tau;
        }
        return rc;
    }
    size_t k = k_at(c, epoch);
    assert(k <= c->max_k);
    int rc = encode_topk(c, g, k, out);
    if (rc == 0)
        out->density = dcps_compress_density(c, epoch);
    return rc;
}
