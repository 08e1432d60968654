/* dcps — which shard owns which parameters.
 *
 * The model is one flat vector of n parameters; shard s of S owns the contiguous
 * range [lo, hi). The split is in blocks of DCPS_SHARD_ALIGN elements: with
 * B = ceil(n / 64) blocks, shard s gets blocks [s*B/S, (s+1)*B/S), clipped to n.
 * Every index belongs to exactly one shard; sizes differ by at most one block; a
 * shard is empty only when B < S. Servers and workers compute the same map. */
#ifndef DCPS_SHARDMAP_H
#define DCPS_SHARDMAP_H

#include <stdint.h>

#define DCPS_SHARD_ALIGN 64

typedef struct {
    uint64_t lo, hi;
} dcps_range_t;

/* The range of shard s (0 <= s < n_shards, n_shards >= 1). */
dcps_range_t dcps_shardmap_range(uint64_t n, int n_shards, int s);

/* The shard that owns index i (i < n). */
int dcps_shardmap_owner(uint64_t n, int n_shards, uint64_t i);

#endif
