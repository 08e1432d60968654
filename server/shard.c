/* dcps — one shard's parameter store; see shard.h. */
#include "server/shard.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "server/optimizer.h"

dcps_shard_t *dcps_shard_new(const dcps_config_t *cfg, int index, int *err)
{
    dcps_shard_t *s = calloc(1, sizeof *s);
    if (!s)
        goto fail_struct;
    s->index = index;
    s->range = dcps_shardmap_range(cfg->n_params, cfg->n_shards, index);
    s->n = (size_t)(s->range.hi - s->range.lo);
    s->workers = cfg->workers;
    s->lr = (float)cfg->lr;
    s->kind = cfg->opt_kind;
    s->momentum = (float)cfg->momentum;
    s->dc = (dcps_dcasgd_t){(float)cfg->lr, (float)cfg->dc_lambda, cfg->dc_adaptive,
                            (float)cfg->dc_ms_decay, (float)cfg->dc_epsilon};
    bool has_state = s->kind == DCPS_OPT_MOMENTUM || (s->kind == DCPS_OPT_DCASGD && s->dc.adaptive);
    size_t backups = s->kind == DCPS_OPT_DCASGD ? (size_t)cfg->workers : 0;
    bool has_acc = cfg->mode == DCPS_MODE_SYNC;
    s->floats = s->n * (1 + has_state + backups + has_acc);
    s->w = calloc(s->floats ? s->floats : 1, sizeof *s->w);
    if (!s->w)
        goto fail_w;
    s->state = has_state ? s->w + s->n : NULL;
    s->bak = backups ? s->w + s->n * (1 + has_state) : NULL;
    s->acc = has_acc ? s->w + s->n * (1 + has_state + backups) : NULL;
    s->last_seq = calloc((size_t)cfg->workers, sizeof *s->last_seq);
    if (!s->last_seq)
        goto fail_seq;
    return s;

fail_seq:
    free(s->w);
fail_w:
    free(s);
fail_struct:
    *err = DCPS_E_NOMEM;
    return NULL;
}

void dcps_shard_destroy(dcps_shard_t **sp)
{
    dcps_shard_t *s = *sp;
    if (!s)
        return;
    free(s->last_seq);
    free(s->w);
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
    s->initialized = true;
    return 1;
}

bool dcps_shard_is_duplicate(const dcps_shard_t *s, uint32_t rank, uint64_t seq)
{
    return seq <= s->last_seq[rank];
}

static void applied(dcps_shard_t *s, uint32_t rank, uint64_t seq)
{
    s->last_seq[rank] = seq;
    s->version++;
    s->pushes++;
}

void dcps_shard_pulled(dcps_shard_t *s, uint32_t rank)
{
    if (s->bak)
        memcpy(s->bak + (size_t)rank * s->n, s->w, s->n * sizeof *s->w);
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
    s->last_seq[rank] = seq;
    s->pushes++;
}

void dcps_shard_accumulate_sparse(dcps_shard_t *s, uint32_t rank, uint64_t seq,
                                  const uint32_t *idx, const float *v, size_t k)
{
    for (size_t j = 0; j < k; j++)
        s->acc[idx[j] - s->range.lo] += v[j];
    s->last_seq[rank] = seq;
    s->pushes++;
}

void dcps_shard_apply_round(dcps_shard_t *s, int pushes)
{
    const float scale = 1.0f / (float)pushes;
    for (size_t i = 0; i < s->n; i++)
        s->acc[i] *= scale;
    /* w is the backup of every worker that pulled for this round. */
    apply_rule(s, s->w, s->acc);
    memset(s->acc, 0, s->n * sizeof *s->acc);
    s->version++;
}

void dcps_shard_drop(dcps_shard_t *s, uint32_t rank, uint64_t seq)
{
    s->last_seq[rank] = seq;
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

size_t dcps_shard_memory(const dcps_shard_t *s)
{
    return s->floats * sizeof *s->w + (size_t)s->workers * sizeof *s->last_seq;
}
