/* dcps — one shard's parameter store.
 *
 * A shard owns the parameters [lo, hi) of the model, their version, the state of
 * the job's update rule (server/optimizer.h) and what it needs to apply each push
 * exactly once: the last applied sequence number of every worker rank.
 *
 * Memory, in floats of the shard's size n: the parameters (1); momentum's u or
 * DC-ASGD-a's mean square (1); DC-ASGD's backup of every worker's last pulled
 * parameters (P); in sync mode the sum of the open round's pushes (1). So SGD
 * holds n, momentum 2n, DC-ASGD-c (1 + P) n and DC-ASGD-a (2 + P) n, plus n in
 * sync mode, all in one allocation made at start. It is single-owner (the
 * server's loop thread) and takes no locks. It checks nothing that comes from the network: the router validates
 * every message (proto/codec.h) before it reaches these functions. */
#ifndef DCPS_SHARD_H
#define DCPS_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "common/shardmap.h"
#include "server/optimizer.h"

/* Staleness of applied pushes: the updates applied between the version a
 * gradient was computed on and its arrival. hist[0] counts 0, hist[b] counts
 * [2^(b−1), 2^b), the last bucket everything from 2^(BUCKETS−2) up. */
#define DCPS_STALENESS_BUCKETS 12
typedef struct {
    uint64_t count, sum, max;
    uint64_t hist[DCPS_STALENESS_BUCKETS];
} dcps_staleness_t;

typedef struct dcps_shard {
    int index;
    dcps_range_t range;
    size_t n;            /* hi − lo */
    float *w;            /* n parameters; one allocation with state and bak */
    float *state;        /* n: momentum's u or DC-ASGD-a's MS; NULL otherwise */
    float *bak;          /* workers × n: DC-ASGD's w_bak(m); NULL otherwise */
    float *acc;          /* n: sync mode's sum of the open round; NULL otherwise */
    int kind;            /* enum dcps_optimizer */
    float momentum;
    dcps_dcasgd_t dc;
    bool initialized;    /* set by the first INIT */
    uint64_t version;    /* incremented by every applied update */
    int workers;
    uint64_t *last_seq;  /* per rank: the highest push seq applied */
    float lr;            /* from [optimizer] lr */
    size_t floats;       /* size of the allocation, in floats */
    uint64_t pushes, duplicates, pulls, dropped;
    dcps_staleness_t staleness;
} dcps_shard_t;

/* Allocates the store of shard `index` for cfg. Returns NULL on allocation
 * failure (DCPS_E_NOMEM in *err). */
dcps_shard_t *dcps_shard_new(const dcps_config_t *cfg, int index, int *err);

/* Frees the store and sets *s to NULL. */
void dcps_shard_destroy(dcps_shard_t **s);

/* Sets the initial parameters (n values) if none were set, and every worker's
 * DC-ASGD backup to them. Returns 1 if it set them, 0 if the shard was already
 * initialised (nothing changed). */
int dcps_shard_init(dcps_shard_t *s, const float *w);

/* Whether a push (rank, seq) was already applied; ranks are < workers. Seqs of a
 * rank start at 1 and increase: a seq at or below the last applied one (0 at
 * start) is a duplicate. */
bool dcps_shard_is_duplicate(const dcps_shard_t *s, uint32_t rank, uint64_t seq);

/* Applies a gradient from (rank, seq) with the job's rule, records seq and bumps
 * the version. Dense: g has n values. Sparse: global indices in [lo, hi),
 * strictly ascending. */
void dcps_shard_apply_dense(dcps_shard_t *s, uint32_t rank, uint64_t seq, const float *g);
void dcps_shard_apply_sparse(dcps_shard_t *s, uint32_t rank, uint64_t seq, const uint32_t *idx,
                             const float *v, size_t k);

/* Sync mode: adds a push from (rank, seq) to the open round's sum and records
 * seq; nothing changes w until dcps_shard_apply_round. Same arguments as above. */
void dcps_shard_accumulate_dense(dcps_shard_t *s, uint32_t rank, uint64_t seq, const float *g);
void dcps_shard_accumulate_sparse(dcps_shard_t *s, uint32_t rank, uint64_t seq,
                                  const uint32_t *idx, const float *v, size_t k);

/* Sync mode: applies the mean of the round's `pushes` gradients once with the
 * job's rule, bumps the version and clears the sum. Every worker pulled the same
 * parameters for the round, so DC-ASGD's correction is zero here (its MS still
 * moves). */
void dcps_shard_apply_round(dcps_shard_t *s, int pushes);

/* Records seq of a push from rank that is not applied (sync: its round closed
 * without it), so that a retry of it is a duplicate. */
void dcps_shard_drop(dcps_shard_t *s, uint32_t rank, uint64_t seq);

/* Records that a push computed on parameter version `based_on` (at most the
 * current version) arrives now. */
void dcps_shard_note_staleness(dcps_shard_t *s, uint64_t based_on);

/* Records that worker `rank` now holds the current parameters (it was sent
 * them): DC-ASGD's w_bak(rank) becomes w. A no-op for the other rules. */
void dcps_shard_pulled(dcps_shard_t *s, uint32_t rank);

/* Bytes the shard holds (parameters and per-worker state). */
size_t dcps_shard_memory(const dcps_shard_t *s);

#endif
