/* dcps — the server's update rules; see optimizer.h. */
#include "server/optimizer.h"

#include "common/config.h"

#include <math.h>
#include <string.h>

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

/* The corrected gradient of one entry, with ms its mean square before the
 * push (adaptive) and *m_out the one after. */
static inline float delay_one(float w, float bak, const float *ms, float g, float *m_out,
                              const dcps_dcasgd_t *p)
{
    float lambda = p->lambda;
    *m_out = 0.0f;
    if (ms) {
        *m_out = p->ms_decay * *ms + (1.0f - p->ms_decay) * g * g;
        lambda = p->lambda / sqrtf(*m_out + p->epsilon);
    }
    return g + lambda * g * g * (w - bak);
}

/* One entry of DC-ASGD: SGD on the corrected gradient; ms may be NULL (constant λ). */
static inline void dc_one(float *w, float bak, float *ms, float g, const dcps_dcasgd_t *p)
{
    float m;
    const float gc = delay_one(*w, bak, ms, g, &m, p);
    if (ms)
        *ms = m;
    *w -= p->lr * gc;
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

/* --- checked, out of place -------------------------------------------------------------- */

/* Bit 31 of the result is set for NaN and ±Inf only: adding 1 to an exponent
 * field of all ones carries into it. Integer arithmetic, so an OR of it over
 * a loop vectorises with the loop. */
static inline uint32_t nonfinite_bit(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7f800000u) + 0x00800000u;
}

#define NONFINITE_SEEN(acc) (((acc) & 0x80000000u) != 0)

/* The first of x[0, n) that is not finite, or n. */
static size_t first_nonfinite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return i;
    return n;
}

size_t dcps_sgd_dense_to(float *out, const float *w, const float *g, size_t n, float lr)
{
    uint32_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        out[i] = w[i] - lr * g[i];
        acc |= nonfinite_bit(out[i]);
    }
    return NONFINITE_SEEN(acc) ? first_nonfinite(out, n) : n;
}

size_t dcps_momentum_dense_to(float *out, const float *w, const float *u, const float *g,
                              size_t n, float lr, float mu)
{
    uint32_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        const float ui = mu * u[i] + g[i];
        out[i] = w[i] - lr * ui;
        acc |= nonfinite_bit(out[i]);
    }
    /* A non-finite u makes w − η u non-finite too (η > 0): out says it all. */
    return NONFINITE_SEEN(acc) ? first_nonfinite(out, n) : n;
}

void dcps_momentum_dense_state(float *u, const float *g, size_t n, float mu)
{
    for (size_t i = 0; i < n; i++)
        u[i] = mu * u[i] + g[i];
}

/* The sparse momentum forms walk the array in runs: the entries between two
 * pushed ones take g = 0 in a plain loop the compiler vectorises, then the
 * pushed entry its value. The arithmetic of each entry is dcps_momentum_sparse's
 * (μ u + 0.0f, which turns −0 into +0 as the in-place rule does). */
size_t dcps_momentum_sparse_to(float *out, const float *w, const float *u, size_t n,
                               uint64_t base, const uint32_t *idx, const float *v, size_t k,
                               float lr, float mu)
{
    uint32_t acc = 0;
    size_t i = 0;
    for (size_t j = 0; j <= k; j++) {
        const size_t end = j < k ? (size_t)(idx[j] - base) : n;
        for (; i < end; i++) {
            const float ui = mu * u[i] + 0.0f;
            out[i] = w[i] - lr * ui;
            acc |= nonfinite_bit(out[i]);
        }
        if (j < k) {
            const float ui = mu * u[i] + v[j];
            out[i] = w[i] - lr * ui;
            acc |= nonfinite_bit(out[i]);
            i++;
        }
    }
    return NONFINITE_SEEN(acc) ? first_nonfinite(out, n) : n;
}

void dcps_momentum_sparse_state(float *u, size_t n, uint64_t base, const uint32_t *idx,
                                const float *v, size_t k, float mu)
{
    size_t i = 0;
    for (size_t j = 0; j <= k; j++) {
        const size_t end = j < k ? (size_t)(idx[j] - base) : n;
        for (; i < end; i++)
            u[i] = mu * u[i] + 0.0f;
        if (j < k) {
            u[i] = mu * u[i] + v[j];
            i++;
        }
    }
}

size_t dcps_dcasgd_dense_to(float *out, const float *w, const float *bak, const float *ms,
                            const float *g, size_t n, const dcps_dcasgd_t *p)
{
    const float lr = p->lr, lambda = p->lambda, d = p->ms_decay, eps = p->epsilon;
    uint32_t acc = 0;
    if (!p->adaptive) {
        for (size_t i = 0; i < n; i++) {
            out[i] = w[i] - lr * (g[i] + lambda * g[i] * g[i] * (w[i] - bak[i]));
            acc |= nonfinite_bit(out[i]);
        }
        return NONFINITE_SEEN(acc) ? first_nonfinite(out, n) : n;
    }
    for (size_t i = 0; i < n; i++) {
        const float m = d * ms[i] + (1.0f - d) * g[i] * g[i];
        out[i] = w[i] - lr * (g[i] + lambda / sqrtf(m + eps) * g[i] * g[i] * (w[i] - bak[i]));
        acc |= nonfinite_bit(out[i]) | nonfinite_bit(m);
    }
    if (!NONFINITE_SEEN(acc))
        return n;
    /* A g⊙g that overflows makes MS infinite and λ_i zero, so w can stay finite:
     * the mean square is checked on its own. */
    for (size_t i = 0; i < n; i++)
        if (!isfinite(out[i]) || !isfinite(d * ms[i] + (1.0f - d) * g[i] * g[i]))
            return i;
    return n;
}

void dcps_dcasgd_dense_state(float *ms, const float *g, size_t n, const dcps_dcasgd_t *p)
{
    const float d = p->ms_decay;
    if (!p->adaptive)
        return;
    for (size_t i = 0; i < n; i++)
        ms[i] = d * ms[i] + (1.0f - d) * g[i] * g[i];
}

size_t dcps_sgd_sparse_check(const float *w, uint64_t base, const uint32_t *idx, const float *v,
                             size_t k, float lr)
{
    for (size_t j = 0; j < k; j++)
        if (!isfinite(w[idx[j] - base] - lr * v[j]))
            return j;
    return k;
}

size_t dcps_dcasgd_sparse_check(const float *w, const float *bak, const float *ms, uint64_t base,
                                const uint32_t *idx, const float *v, size_t k,
                                const dcps_dcasgd_t *p)
{
    for (size_t j = 0; j < k; j++) {
        /* dc_one's arithmetic on copies. */
        size_t i = idx[j] - base;
        float wi = w[i], m = p->adaptive ? ms[i] : 0.0f;
        dc_one(&wi, bak[i], p->adaptive ? &m : NULL, v[j], p);
        if (!isfinite(wi) || !isfinite(m))
            return j;
    }
    return k;
}

size_t dcps_add_dense_to(float *out, const float *a, const float *g, size_t n)
{
    uint32_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        out[i] = a[i] + g[i];
        acc |= nonfinite_bit(out[i]);
    }
    return NONFINITE_SEEN(acc) ? first_nonfinite(out, n) : n;
}

size_t dcps_add_sparse_check(const float *a, uint64_t base, const uint32_t *idx, const float *v,
                             size_t k)
{
    for (size_t j = 0; j < k; j++)
        if (!isfinite(a[idx[j] - base] + v[j]))
            return j;
    return k;
}

/* --- every rule ----------------------------------------------------------------------------- */

dcps_rule_t dcps_rule_new(int kind, double momentum, bool nesterov, double beta1, double beta2,
                          double eps, double weight_decay)
{
    dcps_rule_t r = {.kind = kind,
                     .momentum = (float)momentum,
                     .nesterov = nesterov,
                     .beta1 = beta1,
                     .beta2 = beta2,
                     .eps = eps,
                     .weight_decay = weight_decay};
    dcps_rule_at(&r, 0, 1);
    return r;
}

void dcps_rule_at(dcps_rule_t *r, double lr, uint64_t t)
{
    const bool adam = r->kind == DCPS_OPT_ADAM || r->kind == DCPS_OPT_ADAMW;
    /* Adam's bias corrections (the other rules have none: no pow per update) */
    const double bc1 = adam ? 1 - pow(r->beta1, (double)t) : 1;
    const double bc2 = adam ? 1 - pow(r->beta2, (double)t) : 1;
    r->lr = (float)lr;
    r->b1 = (float)r->beta1, r->one_b1 = (float)(1 - r->beta1);
    r->b2 = (float)r->beta2, r->one_b2 = (float)(1 - r->beta2);
    r->epsf = (float)r->eps;
    r->wd = (float)r->weight_decay;
    r->step_size = (float)(lr / bc1);
    r->bc2_sqrt = (float)sqrt(bc2);
    r->shrink = (float)(1 - lr * r->weight_decay);
}

int dcps_rule_states(int kind)
{
    switch (kind) {
    case DCPS_OPT_MOMENTUM:
    case DCPS_OPT_ADAGRAD: return 1;
    case DCPS_OPT_ADAM:
    case DCPS_OPT_ADAMW: return 2;
    default: return 0;
    }
}

/* One entry: the new parameter for parameter w and gradient g; *a and *b, the
 * entry's state, are updated. torch's order of operations throughout. */
static inline float rule_one(const dcps_rule_t *r, float w, float g, float *a, float *b)
{
    if (r->kind != DCPS_OPT_ADAMW && r->wd != 0.0f)
        g = g + r->wd * w;
    switch (r->kind) {
    case DCPS_OPT_MOMENTUM:
        *a = r->momentum * *a + g;
        return w + -r->lr * (r->nesterov ? g + r->momentum * *a : *a);
    case DCPS_OPT_ADAMW:
        w = w * r->shrink;
        /* fall through */
    case DCPS_OPT_ADAM: {
        *a = *a * r->b1 + r->one_b1 * g;
        *b = *b * r->b2 + r->one_b2 * g * g;
        const float denom = sqrtf(*b) / r->bc2_sqrt + r->epsf;
        return w + -r->step_size * *a / denom;
    }
    case DCPS_OPT_ADAGRAD: {
        *a = *a + g * g;
        const float std = sqrtf(*a) + r->epsf;
        return w + -r->lr * g / std;
    }
    default: return w + -r->lr * g;
    }
}

/* Entry i of the state, or 0 where the rule keeps none. */
static inline float st_at(float *const st[2], int j, size_t i)
{
    return st[j] ? st[j][i] : 0.0f;
}

static inline void st_put(float *const st[2], size_t i, float a, float b)
{
    if (st[0])
        st[0][i] = a;
    if (st[1])
        st[1][i] = b;
}

/* The rule at entry i with gradient g into out[i]; the bits of its finiteness. */
static inline uint32_t rule_to_one(const dcps_rule_t *r, float *out, const float *w,
                                   float *const st[2], size_t i, float g)
{
    float a = st_at(st, 0, i), b = st_at(st, 1, i);
    out[i] = rule_one(r, w[i], g, &a, &b);
    return nonfinite_bit(out[i]) | nonfinite_bit(a) | nonfinite_bit(b);
}

static inline void rule_state_one(const dcps_rule_t *r, float *const st[2], const float *w,
                                  size_t i, float g)
{
    float a = st_at(st, 0, i), b = st_at(st, 1, i);
    (void)rule_one(r, w[i], g, &a, &b);
    st_put(st, i, a, b);
}

/* The first entry whose new parameter or state is not finite (after a pass
 * saw one): the rule again on copies. g is the dense gradient, or NULL for a
 * sparse one given by idx, v, k. */
static size_t first_bad_rule(const dcps_rule_t *r, const float *w, float *const st[2],
                             const float *g, size_t n, uint64_t base, const uint32_t *idx,
                             const float *v, size_t k)
{
    float out;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        float gi = 0.0f;
        if (g)
            gi = g[i];
        else if (j < k && idx[j] - base == i)
            gi = v[j++];
        float a = st_at(st, 0, i), b = st_at(st, 1, i);
        out = rule_one(r, w[i], gi, &a, &b);
        if (!isfinite(out) || !isfinite(a) || !isfinite(b))
            return i;
    }
    return n;
}

size_t dcps_rule_dense_to(const dcps_rule_t *r, float *out, const float *w, float *const st[2],
                          const float *g, size_t n)
{
    uint32_t acc = 0;
    for (size_t i = 0; i < n; i++)
        acc |= rule_to_one(r, out, w, st, i, g[i]);
    return NONFINITE_SEEN(acc) ? first_bad_rule(r, w, st, g, n, 0, NULL, NULL, 0) : n;
}

void dcps_rule_dense_state(const dcps_rule_t *r, float *const st[2], const float *w,
                           const float *g, size_t n)
{
    if (!st[0])
        return;
    for (size_t i = 0; i < n; i++)
        rule_state_one(r, st, w, i, g[i]);
}

size_t dcps_rule_sparse_to(const dcps_rule_t *r, float *out, const float *w, float *const st[2],
                           size_t n, uint64_t base, const uint32_t *idx, const float *v, size_t k)
{
    uint32_t acc = 0;
    size_t i = 0;
    for (size_t j = 0; j <= k; j++) {
        const size_t end = j < k ? (size_t)(idx[j] - base) : n;
        for (; i < end; i++)
            acc |= rule_to_one(r, out, w, st, i, 0.0f);
        if (j < k)
            acc |= rule_to_one(r, out, w, st, i++, v[j]);
    }
    return NONFINITE_SEEN(acc) ? first_bad_rule(r, w, st, NULL, n, base, idx, v, k) : n;
}

void dcps_rule_sparse_state(const dcps_rule_t *r, float *const st[2], const float *w, size_t n,
                            uint64_t base, const uint32_t *idx, const float *v, size_t k)
{
    size_t i = 0;
    if (!st[0])
        return;
    for (size_t j = 0; j <= k; j++) {
        const size_t end = j < k ? (size_t)(idx[j] - base) : n;
        for (; i < end; i++)
            rule_state_one(r, st, w, i, 0.0f);
        if (j < k)
            rule_state_one(r, st, w, i++, v[j]);
    }
}

size_t dcps_rule_lazy_check(const dcps_rule_t *r, const float *w, float *const st[2],
                            uint64_t base, const uint32_t *idx, const float *v, size_t k)
{
    for (size_t j = 0; j < k; j++) {
        const size_t i = idx[j] - base;
        float a = st_at(st, 0, i), b = st_at(st, 1, i);
        const float out = rule_one(r, w[i], v[j], &a, &b);
        if (!isfinite(out) || !isfinite(a) || !isfinite(b))
            return j;
    }
    return k;
}

void dcps_rule_lazy(const dcps_rule_t *r, float *w, float *const st[2], uint64_t base,
                    const uint32_t *idx, const float *v, size_t k)
{
    for (size_t j = 0; j < k; j++) {
        const size_t i = idx[j] - base;
        float a = st_at(st, 0, i), b = st_at(st, 1, i);
        w[i] = rule_one(r, w[i], v[j], &a, &b);
        st_put(st, i, a, b);
    }
}

size_t dcps_delay_dense_to(float *gc, const float *w, const float *bak, const float *ms,
                           const float *g, size_t n, const dcps_dcasgd_t *p)
{
    for (size_t i = 0; i < n; i++) {
        float m;
        gc[i] = delay_one(w[i], bak[i], p->adaptive ? &ms[i] : NULL, g[i], &m, p);
        if (!isfinite(gc[i]) || !isfinite(m))
            return i;
    }
    return n;
}

size_t dcps_delay_sparse_to(float *gc, const float *w, const float *bak, const float *ms,
                            uint64_t base, const uint32_t *idx, const float *v, size_t k,
                            const dcps_dcasgd_t *p)
{
    for (size_t j = 0; j < k; j++) {
        const size_t i = idx[j] - base;
        float m;
        gc[j] = delay_one(w[i], bak[i], p->adaptive ? &ms[i] : NULL, v[j], &m, p);
        if (!isfinite(gc[j]) || !isfinite(m))
            return j;
    }
    return k;
}

void dcps_dcasgd_sparse_state(float *ms, uint64_t base, const uint32_t *idx, const float *v,
                              size_t k, const dcps_dcasgd_t *p)
{
    if (!p->adaptive)
        return;
    for (size_t j = 0; j < k; j++) {
        float *m = &ms[idx[j] - base];
        *m = p->ms_decay * *m + (1.0f - p->ms_decay) * v[j] * v[j];
    }
}
