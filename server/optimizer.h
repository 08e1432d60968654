/* dcps — the server's update rules, as plain arithmetic on arrays.
 *
 * These functions own nothing: they update the arrays they are given. The shard
 * (shard.h) holds the arrays and decides which rule runs. */
#ifndef DCPS_OPTIMIZER_H
#define DCPS_OPTIMIZER_H

#include <stddef.h>
#include <stdint.h>

/* SGD: w ← w − lr·g over n elements. */
void dcps_sgd_dense(float *w, const float *g, size_t n, float lr);

/* SGD on k entries: w[idx[j] − base] ← w[idx[j] − base] − lr·v[j]. base is the
 * global index of w[0] (a shard's lo). */
void dcps_sgd_sparse(float *w, uint64_t base, const uint32_t *idx, const float *v, size_t k,
                     float lr);

#endif
