/* dcps — the server's update rules; see optimizer.h. */
#include "server/optimizer.h"

#include <math.h>

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

void dcps_momentum_dense(float *w, float *u, const float *g, size_t n, float lr, float mu)
{
    for (size_t i = 0; i < n; i++) {
        u[i] = mu * u[i] + g[i];
        w[i] -= lr * u[i];
    }
}

void dcps_momentum_sparse(float *w, float *u, size_t n, uint64_t base, const uint32_t *idx,
                          const float *v, size_t k, float lr, float mu)
{
    /* The same arithmetic as the dense rule on a vector that is zero off idx,
     * in one pass: walk the array, taking the next pushed entry when reached. */
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        float g = 0.0f;
        if (j < k && idx[j] - base == i)
            g = v[j++];
        u[i] = mu * u[i] + g;
        w[i] -= lr * u[i];
    }
}

/* One entry of DC-ASGD; ms may be NULL (constant λ). */
static inline void dc_one(float *w, float bak, float *ms, float g, const dcps_dcasgd_t *p)
{
    float lambda = p->lambda;
    if (ms) {
        *ms = p->ms_decay * *ms + (1.0f - p->ms_decay) * g * g;
        lambda = p->lambda / sqrtf(*ms + p->epsilon);
    }
    *w -= p->lr * (g + lambda * g * g * (*w - bak));
}

void dcps_dcasgd_dense(float *w, const float *bak, float *ms, const float *g, size_t n,
                       const dcps_dcasgd_t *p)
{
    /* Two plain loops, not dc_one per element: without a branch inside, the
     * compiler vectorises them (the adaptive one needs -fno-math-errno). */
    const float lr = p->lr, lambda = p->lambda, d = p->ms_decay, eps = p->epsilon;
    if (!p->adaptive) {
        for (size_t i = 0; i < n; i++)
            w[i] -= lr * (g[i] + lambda * g[i] * g[i] * (w[i] - bak[i]));
        return;
    }
    for (size_t i = 0; i < n; i++) {
        ms[i] = d * ms[i] + (1.0f - d) * g[i] * g[i];
        w[i] -= lr * (g[i] + lambda / sqrtf(ms[i] + eps) * g[i] * g[i] * (w[i] - bak[i]));
    }
}

void dcps_dcasgd_sparse(float *w, const float *bak, float *ms, uint64_t base, const uint32_t *idx,
                        const float *v, size_t k, const dcps_dcasgd_t *p)
{
    for (size_t j = 0; j < k; j++) {
        size_t i = idx[j] - base;
        dc_one(&w[i], bak[i], p->adaptive ? &ms[i] : NULL, v[j], p);
    }
}
