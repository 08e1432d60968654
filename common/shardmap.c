/* dcps — the shard map; see shardmap.h. */
#include "common/shardmap.h"

#include <assert.h>

static uint64_t clip(uint64_t block, uint64_t n)
{
    uint64_t x = block * DCPS_SHARD_ALIGN;
    return x < n ? x : n;
}

dcps_range_t dcps_shardmap_range(uint64_t n, int n_shards, int s)
{
    assert(n_shards >= 1 && s >= 0 && s < n_shards);
    uint64_t blocks = (n + DCPS_SHARD_ALIGN - 1) / DCPS_SHARD_ALIGN;
    uint64_t S = (uint64_t)n_shards;
    dcps_range_t r = {clip(blocks * (uint64_t)s / S, n), clip(blocks * (uint64_t)(s + 1) / S, n)};
    return r;
}

int dcps_shardmap_owner(uint64_t n, int n_shards, uint64_t i)
{
    assert(i < n);
    uint64_t blocks = (n + DCPS_SHARD_ALIGN - 1) / DCPS_SHARD_ALIGN;
    uint64_t b = i / DCPS_SHARD_ALIGN;
    uint64_t S = (uint64_t)n_shards;
    /* The owner is the s with s*B/S <= b < (s+1)*B/S (floor divisions). b*S/B is
     * within one of it; the two loops settle the rounding. */
    int s = (int)((b * S) / blocks);
    while (s + 1 < n_shards && blocks * (uint64_t)(s + 1) / S <= b)
        s++;
    while (s > 0 && blocks * (uint64_t)s / S > b)
        s--;
    return s;
}
