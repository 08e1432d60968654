/* dcps — the server's update rules, as plain arithmetic on arrays.
 *
 * These functions own nothing: they update the arrays they are given. The shard
 * (shard.h) holds the arrays and decides which rule runs. Sparse updates take
 * global indices and `base`, the global index of element 0 (a shard's lo).
 *
 * Rules (docs/algorithms.md; w parameters, g gradient, η learning rate):
 *   SGD       w ← w − η g
 *   Momentum  u ← μ u + g;  w ← w − η u
 *   DC-ASGD   w ← w − η (g + λ g⊙g⊙(w − w_bak(m)))        (Zheng et al., ICML 2017)
 *             w_bak(m): the parameters worker m last pulled. λ constant (DC-ASGD-c) or
 *             adaptive (DC-ASGD-a): MS ← d MS + (1 − d) g⊙g, then λ_i = λ0 / sqrt(MS_i + ε).
 * A sparse push is the dense rule applied to a gradient that is zero off its
 * entries: SGD and DC-ASGD change only the pushed entries (the correction is zero
 * where g is); momentum decays u everywhere and so moves every parameter. For
 * DC-ASGD-a, MS is updated at the pushed entries only: entries a worker did not
 * push keep their mean square instead of decaying towards zero. */
#ifndef DCPS_OPTIMIZER_H
#define DCPS_OPTIMIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    float lr;
    float lambda;   /* λ, or λ0 when adaptive */
    bool adaptive;
    float ms_decay; /* d */
    float epsilon;  /* ε */
} dcps_dcasgd_t;

void dcps_sgd_dense(float *w, const float *g, size_t n, float lr);
void dcps_sgd_sparse(float *w, uint64_t base, const uint32_t *idx, const float *v, size_t k,
                     float lr);

void dcps_momentum_dense(float *w, float *u, const float *g, size_t n, float lr, float mu);
void dcps_momentum_sparse(float *w, float *u, size_t n, uint64_t base, const uint32_t *idx,
                          const float *v, size_t k, float lr, float mu);

/* ms is used (and updated) only when p->adaptive. */
void dcps_dcasgd_dense(float *w, const float *bak, float *ms, const float *g, size_t n,
                       const dcps_dcasgd_t *p);
void dcps_dcasgd_sparse(float *w, const float *bak, float *ms, uint64_t base, const uint32_t *idx,
                        const float *v, size_t k, const dcps_dcasgd_t *p);

/* --- checked, out of place -------------------------------------------------------------
 *
 * The shard never lets a parameter become NaN or Inf (server/shard.h), and an
 * update it refuses must leave everything as it was. So each rule comes in a
 * form that writes the new parameters to `out` (n floats apart from w), reads
 * the optimizer state without writing it, and checks the result as it goes: it
 * returns the first position whose new parameter (or, for DC-ASGD-a, new mean
 * square) would not be finite, or n (sparse: k) if every one is. The check is
 * fused into the pass (an OR of exponent bits, vectorised with it); only a
 * failing pass is walked again to find the position. The caller then makes out
 * the parameters (a pointer swap) and writes the state with the _state
 * function, which recomputes it with the same float arithmetic: the results
 * are bit for bit those of the in-place rules above. */
size_t dcps_sgd_dense_to(float *out, const float *w, const float *g, size_t n, float lr);
size_t dcps_momentum_dense_to(float *out, const float *w, const float *u, const float *g,
                              size_t n, float lr, float mu);
void dcps_momentum_dense_state(float *u, const float *g, size_t n, float mu);
size_t dcps_momentum_sparse_to(float *out, const float *w, const float *u, size_t n,
                               uint64_t base, const uint32_t *idx, const float *v, size_t k,
                               float lr, float mu);
void dcps_momentum_sparse_state(float *u, size_t n, uint64_t base, const uint32_t *idx,
                                const float *v, size_t k, float mu);
size_t dcps_dcasgd_dense_to(float *out, const float *w, const float *bak, const float *ms,
                            const float *g, size_t n, const dcps_dcasgd_t *p);
void dcps_dcasgd_dense_state(float *ms, const float *g, size_t n, const dcps_dcasgd_t *p);

/* Sparse rules that change only the pushed entries are checked in place, before
 * anything is written: the first j in [0, k) whose entry would not be finite,
 * or k. The in-place rule applies them after. */
size_t dcps_sgd_sparse_check(const float *w, uint64_t base, const uint32_t *idx, const float *v,
                             size_t k, float lr);
size_t dcps_dcasgd_sparse_check(const float *w, const float *bak, const float *ms, uint64_t base,
                                const uint32_t *idx, const float *v, size_t k,
                                const dcps_dcasgd_t *p);

/* Sums (sync mode's round): out = a + g, checked the same way; and the sparse
 * form's check of a[idx[j] − base] + v[j]. */
size_t dcps_add_dense_to(float *out, const float *a, const float *g, size_t n);
size_t dcps_add_sparse_check(const float *a, uint64_t base, const uint32_t *idx, const float *v,
                             size_t k);

#endif
