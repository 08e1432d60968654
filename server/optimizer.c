/* dcps — the server's update rules; see optimizer.h. */
#include "server/optimizer.h"

void dcps_sgd_dense(float *w, const float *g, size_t n, float lr)
{
    for (size_t i = 0; i < n; i++)
        w[i] -= lr * g[i];
}

void dcps_sgd_sparse(float *w, uint64_t base, const uint32_t *idx, const float *v, size_t k,
                     float lr)
{
    for (size_t j = 0; j < k; j++)
        w[idx[j] - base] -= lr * v[j];
}
