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
    s->w = calloc(s->n ? s->n : 1, sizeof *s->w);
    if (!s->w)
        goto fail_w;
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

void dcps_shard_apply_dense(dcps_shard_t *s, uint32_t rank, uint64_t seq, const float *g)
{
    dcps_sgd_dense(s->w, g, s->n, s->lr);
    applied(s, rank, seq);
}

void dcps_shard_apply_sparse(dcps_shard_t *s, uint32_t rank, uint64_t seq, const uint32_t *idx,
                             const float *v, size_t k)
{
    dcps_sgd_sparse(s->w, s->range.lo, idx, v, k, s->lr);
    applied(s, rank, seq);
}

size_t dcps_shard_memory(const dcps_shard_t *s)
{
    return s->n * sizeof *s->w + (size_t)s->workers * sizeof *s->last_seq;
}
