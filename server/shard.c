/* dcps — one shard's parameter store; see shard.h. */
#include "server/shard.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "server/optimizer.h"

/* The slices of the one allocation, in floats of n, in this order. */
typedef struct {
    size_t state, bak, acc, mirror, diff;
} layout_t;

static size_t layout(const dcps_config_t *cfg, int kind, bool adaptive, layout_t *l)
{
    bool sync = cfg->mode == DCPS_MODE_SYNC, delta = cfg->pull == DCPS_PULL_DELTA;
    l->state = kind == DCPS_OPT_MOMENTUM || (kind == DCPS_OPT_DCASGD && adaptive);
    l->bak = !sync && (kind == DCPS_OPT_DCASGD || delta) ? (size_t)cfg->workers : 0;
    l->acc = sync;
    l->mirror = sync && delta;
    l->diff = delta;
    return 1 + l->state + l->bak + l->acc + l->mirror + l->diff;
}

dcps_shard_t *dcps_shard_new(const dcps_config_t *cfg, int index, int *err)
{
    dcps_shard_t *s = calloc(1, sizeof *s);
    *err = DCPS_E_NOMEM;
    if (!s)
        return NULL;
    s->index = index;
    s->workers = cfg->workers;
    s->kind = cfg->opt_kind;
    s->momentum = (float)cfg->momentum;
    s->dc = (dcps_dcasgd_t){0, (float)cfg->dc_lambda, cfg->dc_adaptive,
                            (float)cfg->dc_ms_decay, (float)cfg->dc_epsilon};
    dcps_shard_set_lr(s, cfg->lr);
    s->delta_of = -1;
    s->session = calloc((size_t)cfg->workers, sizeof *s->session);
    s->behind = calloc((size_t)cfg->workers, sizeof *s->behind);
    if (!s->session || !s->behind || (cfg->n_params && dcps_shard_size(s, cfg, cfg->n_params)))
        goto fail;
    *err = 0;
    return s;

fail:
    dcps_shard_destroy(&s);
    return NULL;
}

void dcps_shard_unsize(dcps_shard_t *s)
{
    dcps_topk_ws_destroy(&s->topk);
    free(s->delta_val);
    free(s->delta_idx);
    free(s->tag);
    free(s->w);
    s->delta_val = s->w = s->state = s->bak = s->acc = s->mirror = s->diff = NULL;
    s->delta_idx = NULL;
    s->tag = NULL;
    s->delta = false;
    s->k_pull = s->k_max = s->delta_k = s->floats = s->n = 0;
    s->delta_of = -1;
    s->range = (dcps_range_t){0, 0};
    s->n_params = 0;
}

int dcps_shard_size(dcps_shard_t *s, const dcps_config_t *cfg, uint64_t n_params)
{
    layout_t l;
    int err = DCPS_E_NOMEM;
    if (s->n_params != 0)
        return DCPS_E_STATE;
    if (n_params == 0)
        return DCPS_E_INVAL;
    s->n_params = n_params;
    s->range = dcps_shardmap_range(n_params, cfg->n_shards, s->index);
    s->n = (size_t)(s->range.hi - s->range.lo);
    s->floats = s->n * layout(cfg, s->kind, s->dc.adaptive, &l);
    s->w = calloc(s->floats ? s->floats : 1, sizeof *s->w);
    if (!s->w)
        goto fail;
    float *at = s->w + s->n;
    s->state = l.state ? at : NULL;
    at += s->n * l.state;
    s->bak = l.bak ? at : NULL;
    at += s->n * l.bak;
    s->acc = l.acc ? at : NULL;
    at += s->n * l.acc;
    s->mirror = l.mirror ? at : NULL;
    at += s->n * l.mirror;
    s->diff = l.diff ? at : NULL;
    s->delta = l.diff && s->n > 0;
    if (s->delta) {
        double rho = dcps_config_pull_density(cfg);
        s->k_pull = dcps_config_entries(rho, s->n);
        s->k_max = dcps_config_entries(
            dcps_config_density_at(rho, cfg->density_warmup_epochs, 1), s->n);
        s->tag = calloc(s->mirror ? 1 : (size_t)cfg->workers, sizeof *s->tag);
        s->delta_idx = malloc(s->k_max * sizeof *s->delta_idx);
        s->delta_val = malloc(s->k_max * sizeof *s->delta_val);
        s->topk = dcps_topk_ws_new(s->n, &err);
        if (!s->tag || !s->delta_idx || !s->delta_val || !s->topk)
            goto fail;
    }
    return 0;

fail:
    dcps_shard_unsize(s);
    return DCPS_E_NOMEM;
}

void dcps_shard_destroy(dcps_shard_t **sp)
{
    dcps_shard_t *s = *sp;
    if (!s)
        return;
    dcps_shard_unsize(s);
    free(s->behind);
    free(s->session);
    free(s);
    *sp = NULL;
}

int dcps_shard_init(dcps_shard_t *s, const float *w)
{
    if (s->initialized)
        return 0;
    memcpy(s->w, w, s->n * sizeof *w);
    for (int m = 0; s->bak && m < s->workers; m++)
        memcpy(s->bak + (size_t)m * s->n, w, s->n * sizeof *w);
    if (s->mirror)
        memcpy(s->mirror, w, s->n * sizeof *w);
    s->initialized = true;
    return 1;
}

void dcps_shard_restored(dcps_shard_t *s)
{
    s->restored = true;
    for (int r = 0; r < s->workers; r++)
        s->behind[r] = true;
    if (!s->delta)
        return;
    for (int mi = 0; mi < (s->mirror ? 1 : s->workers); mi++)
        s->tag[mi] = UINT64_MAX;
    s->delta_of = -1;
}

bool dcps_shard_behind(const dcps_shard_t *s, uint32_t rank)
{
    return s->behind[rank];
}

static void applied(dcps_shard_t *s, uint32_t rank, uint64_t seq)
{
    dcps_session_pushed(&s->session[rank], seq, true);
    s->version++;
    s->pushes++;
}

/* Mirror number `mi`: worker mi's backup, or the shared one of sync mode. */
static float *mirror_of(const dcps_shard_t *s, int mi)
{
    return s->mirror ? s->mirror : s->bak + (size_t)mi * s->n;
}

/* Brings mirror mi from its tag to the current version by the top k of
 * w − mirror, kept as the last delta. Returns 0, or DCPS_E_NONFINITE when w
 * holds NaN or Inf (the mirror is then unchanged). */
static int advance(dcps_shard_t *s, int mi, size_t k)
{
    float *m = mirror_of(s, mi);
    for (size_t i = 0; i < s->n; i++)
        s->diff[i] = s->w[i] - m[i];
    int rc = dcps_topk_cpu(s->diff, s->n, k, s->delta_idx, s->delta_val, s->topk);
    if (rc != 0)
        return rc;
    /* The worker adds the same values with the same float addition. */
    dcps_scatter_add_cpu(m, s->delta_idx, s->delta_val, k, 1.0f);
    for (size_t j = 0; j < k; j++)
        s->delta_idx[j] += (uint32_t)s->range.lo;
    s->delta_k = k;
    s->delta_of = mi;
    s->delta_from = s->tag[mi];
    s->tag[mi] = s->version;
    return 0;
}

/* Mirror mi becomes w (tag: the current version); a delta kept for it is void. */
static void reset(dcps_shard_t *s, int mi)
{
    memcpy(mirror_of(s, mi), s->w, s->n * sizeof *s->w);
    s->tag[mi] = s->version;
    if (s->delta_of == mi)
        s->delta_of = -1;
}

void dcps_shard_pull(dcps_shard_t *s, uint32_t rank, bool holds, uint64_t held, uint64_t want,
                     bool exact, dcps_pull_t *out)
{
    s->pulls++;
    /* A tag held from before a restore may name other contents than the
     * restored mirror's: as if it held nothing (the sync mirror, shared, may
     * carry a post-restore tag equal to it). */
    if (s->behind[rank]) {
        s->behind[rank] = false;
        holds = false;
    }
    *out = (dcps_pull_t){.dense = true, .values = s->w, .k = s->n};
    if (!s->delta) {
        if (s->bak)
            memcpy(s->bak + (size_t)rank * s->n, s->w, s->n * sizeof *s->w);
        return;
    }
    int mi = s->mirror ? 0 : (int)rank;
    if (exact) {
        if (!s->mirror)
            reset(s, mi);
        return;
    }
    if (s->tag[mi] != s->version) {
        size_t k = want == 0 ? s->k_pull : want < s->k_max ? (size_t)want : s->k_max;
        if (!(holds && held == s->tag[mi]) || advance(s, mi, k) != 0)
            reset(s, mi);
    }
    if (holds && held == s->tag[mi])
        *out = (dcps_pull_t){.dense = false}; /* nothing changed since */
    else if (holds && s->delta_of == mi && held == s->delta_from)
        *out = (dcps_pull_t){false, s->delta_val, s->delta_idx, s->delta_k};
    else
        out->values = mirror_of(s, mi);
    s->deltas += !out->dense;
}

/* The job's rule with a dense gradient, against backup bak (DC-ASGD). */
static void apply_rule(dcps_shard_t *s, const float *bak, const float *g)
{
    switch (s->kind) {
    case DCPS_OPT_MOMENTUM:
        dcps_momentum_dense(s->w, s->state, g, s->n, s->lr, s->momentum);
        break;
    case DCPS_OPT_DCASGD:
        dcps_dcasgd_dense(s->w, bak, s->state, g, s->n, &s->dc);
        break;
    default:
        dcps_sgd_dense(s->w, g, s->n, s->lr);
    }
}

void dcps_shard_apply_dense(dcps_shard_t *s, uint32_t rank, uint64_t seq, const float *g)
{
    apply_rule(s, s->bak ? s->bak + (size_t)rank * s->n : NULL, g);
    applied(s, rank, seq);
}

void dcps_shard_apply_sparse(dcps_shard_t *s, uint32_t rank, uint64_t seq, const uint32_t *idx,
                             const float *v, size_t k)
{
    switch (s->kind) {
    case DCPS_OPT_MOMENTUM:
        dcps_momentum_sparse(s->w, s->state, s->n, s->range.lo, idx, v, k, s->lr, s->momentum);
        break;
    case DCPS_OPT_DCASGD:
        dcps_dcasgd_sparse(s->w, s->bak + (size_t)rank * s->n, s->state, s->range.lo, idx, v, k,
                           &s->dc);
        break;
    default:
        dcps_sgd_sparse(s->w, s->range.lo, idx, v, k, s->lr);
    }
    applied(s, rank, seq);
}

void dcps_shard_accumulate_dense(dcps_shard_t *s, uint32_t rank, uint64_t seq, const float *g)
{
    for (size_t i = 0; i < s->n; i++)
        s->acc[i] += g[i];
    dcps_session_pushed(&s->session[rank], seq, true);
    s->pushes++;
}

void dcps_shard_accumulate_sparse(dcps_shard_t *s, uint32_t rank, uint64_t seq,
                                  const uint32_t *idx, const float *v, size_t k)
{
    for (size_t j = 0; j < k; j++)
        s->acc[idx[j] - s->range.lo] += v[j];
    dcps_session_pushed(&s->session[rank], seq, true);
    s->pushes++;
}

void dcps_shard_apply_round(dcps_shard_t *s, int pushes)
{
    const float scale = 1.0f / (float)pushes;
    for (size_t i = 0; i < s->n; i++)
        s->acc[i] *= scale;
    /* Every worker computed this round's gradient on the same parameters: w,
     * or with delta pulls the shared mirror. */
    apply_rule(s, s->mirror ? s->mirror : s->w, s->acc);
    dcps_shard_clear_round(s);
    s->version++;
}

void dcps_shard_clear_round(dcps_shard_t *s)
{
    memset(s->acc, 0, s->n * sizeof *s->acc);
}

void dcps_shard_drop(dcps_shard_t *s, uint32_t rank, uint64_t seq)
{
    dcps_session_pushed(&s->session[rank], seq, false);
    s->dropped++;
}

void dcps_shard_note_staleness(dcps_shard_t *s, uint64_t based_on)
{
    dcps_staleness_t *st = &s->staleness;
    uint64_t d = s->version - based_on;
    int b = 0;
    while (b < DCPS_STALENESS_BUCKETS - 1 && d >> b)
        b++;
    st->hist[b]++;
    st->count++;
    st->sum += d;
    if (d > st->max)
        st->max = d;
}

void dcps_shard_set_lr(dcps_shard_t *s, double lr)
{
    s->lr = (float)lr;
    s->dc.lr = (float)lr;
}

void dcps_shard_memory_kinds(const dcps_shard_t *s, dcps_shard_memory_t *out)
{
    const size_t vec = s->n * sizeof *s->w;
    size_t tags = s->tag ? (s->mirror ? 1 : (size_t)s->workers) : 0;
    out->parameters = vec;
    out->optimizer_state = s->state ? vec : 0;
    out->worker_backups = s->bak ? vec * (size_t)s->workers : 0;
    out->sync_sum = s->acc ? vec : 0;
    out->delta_pull = (s->diff ? vec : 0) + (s->mirror ? vec : 0) + tags * sizeof *s->tag +
                      s->k_max * (sizeof *s->delta_idx + sizeof *s->delta_val) +
                      (s->delta ? s->n : 0); /* the selection's workspace, about n bytes */
    out->sequence_numbers = (size_t)s->workers * (sizeof *s->session + sizeof *s->behind);
}

size_t dcps_shard_memory(const dcps_shard_t *s)
{
    dcps_shard_memory_t k;
    dcps_shard_memory_kinds(s, &k);
    return k.parameters + k.optimizer_state + k.worker_backups + k.sync_sum + k.delta_pull +
           k.sequence_numbers;
}
