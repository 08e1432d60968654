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

/* --- every rule of [optimizer] kind --------------------------------------------------------
 *
 * The functions above are the fast paths of the rules 0.1 had (sgd, momentum
 * and DC-ASGD without weight decay). These apply any rule, as torch.optim
 * defines it (g the gradient after delay compensation, wd the weight decay,
 * t the step, counted from 1):
 *   sgd       g ← g + wd w;  w ← w − η g
 *   momentum  g ← g + wd w;  u ← μ u + g;  w ← w − η (nesterov ? g + μ u : u)
 *   adam      g ← g + wd w;  m ← β1 m + (1 − β1) g;  v ← β2 v + (1 − β2) g²;
 *             w ← w − η/(1 − β1^t) · m / (√v / √(1 − β2^t) + ε)
 *   adamw     w ← (1 − η wd) w, then adam's step with wd = 0
 *   adagrad   g ← g + wd w;  s ← s + g²;  w ← w − η g / (√s + ε)
 * with torch's float arithmetic: constants such as 1 − β1 and η/(1 − β1^t) are
 * computed in double and rounded to float once, as torch passes Python floats
 * to its kernels. The rule's state is st[0] (u, m or s) and st[1] (v).
 *
 * The same checked, out-of-place scheme as above: a _to function writes the
 * new w to out and checks it and the new state without writing the state;
 * the _state function then writes the state, given the old w. A sparse push
 * is either the dense rule on a gradient that is zero off its entries (every
 * parameter may move: adam's m decays, weight decay applies everywhere), or
 * lazy: the rule at the pushed entries only, state and parameters, as
 * torch.optim.SparseAdam does. */
enum dcps_rule_states { DCPS_RULE_MAX_STATES = 2 };

typedef struct {
    int kind; /* enum dcps_optimizer, never dcasgd (dcps_config_rule) */
    float momentum;
    bool nesterov;
    double beta1, beta2, eps, weight_decay;
    /* of the step at hand, set by dcps_rule_at: */
    float lr, b1, one_b1, b2, one_b2, epsf, wd;
    float step_size; /* adam: η/(1 − β1^t); else η */
    float bc2_sqrt;  /* adam: √(1 − β2^t) */
    float shrink;    /* adamw: 1 − η wd */
} dcps_rule_t;

/* The rule for `kind` (never dcasgd) with the job's options. */
dcps_rule_t dcps_rule_new(int kind, double momentum, bool nesterov, double beta1, double beta2,
                          double eps, double weight_decay);

/* Prepares r for step t (the first update is 1) with learning rate lr. */
void dcps_rule_at(dcps_rule_t *r, double lr, uint64_t t);

/* How many arrays of state the rule keeps: 0 (sgd), 1 (momentum, adagrad), 2
 * (adam, adamw). */
int dcps_rule_states(int kind);

size_t dcps_rule_dense_to(const dcps_rule_t *r, float *out, const float *w, float *const st[2],
                          const float *g, size_t n);
void dcps_rule_dense_state(const dcps_rule_t *r, float *const st[2], const float *w,
                           const float *g, size_t n);
size_t dcps_rule_sparse_to(const dcps_rule_t *r, float *out, const float *w, float *const st[2],
                           size_t n, uint64_t base, const uint32_t *idx, const float *v, size_t k);
void dcps_rule_sparse_state(const dcps_rule_t *r, float *const st[2], const float *w, size_t n,
                            uint64_t base, const uint32_t *idx, const float *v, size_t k);
/* Lazy: the first j in [0, k) whose parameter or state would not be finite,
 * or k; then the in-place update of those entries. */
size_t dcps_rule_lazy_check(const dcps_rule_t *r, const float *w, float *const st[2],
                            uint64_t base, const uint32_t *idx, const float *v, size_t k);
void dcps_rule_lazy(const dcps_rule_t *r, float *w, float *const st[2], uint64_t base,
                    const uint32_t *idx, const float *v, size_t k);

/* Delay compensation as a transform of the gradient, before any rule:
 * gc = g + λ g⊙g⊙(w − bak), λ constant or adaptive (ms moves as in
 * DC-ASGD-a; ms NULL when constant). Dense: n values into gc; sparse: the k
 * pushed entries. Returns the first position whose corrected gradient or new
 * mean square would not be finite, or n (k); ms is not written: the
 * dcps_dcasgd_*_state functions write it after. */
size_t dcps_delay_dense_to(float *gc, const float *w, const float *bak, const float *ms,
                           const float *g, size_t n, const dcps_dcasgd_t *p);
size_t dcps_delay_sparse_to(float *gc, const float *w, const float *bak, const float *ms,
                            uint64_t base, const uint32_t *idx, const float *v, size_t k,
                            const dcps_dcasgd_t *p);
void dcps_dcasgd_sparse_state(float *ms, uint64_t base, const uint32_t *idx, const float *v,
                              size_t k, const dcps_dcasgd_t *p);

#endif
