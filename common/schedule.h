/* dcps — the learning-rate schedule: the lr of each update a shard applies.
 *
 * [optimizer] schedule and its keys (common/config.h holds them in
 * dcps_config_t.sched) define a factor f(t) of the base lr, [optimizer] lr, for
 * the update that t updates of the same shard precede (t = 0 for the first: the
 * shard's version before the update). The lr of that update is lr · f(t), the
 * product PyTorch's torch.optim.lr_scheduler.LambdaLR forms with the same f
 * when it is stepped once per update. With W = warmup_steps, T = total_steps:
 *
 *   t < W (warm-up)   f(t) = (t + 1) / W
 *   after it, with u = t − W and c = min(u, T − W) / (T − W):
 *     constant        1
 *     step            γ^⌊u / step_every⌋                    (γ = step_gamma)
 *     cosine          (min_lr + (lr − min_lr)(1 + cos πc) / 2) / lr
 *     linear          (lr + (min_lr − lr) c) / lr
 *     inverse_sqrt    √max(W, 1) / √(t + 1)
 *
 * f of cosine and linear depends on lr: they fall from lr to min_lr between
 * t = W and t = T whatever lr is, so a reload that changes lr (SIGHUP) moves
 * the whole schedule with it. The functions are pure: no state, no clock, the
 * same double for the same arguments (libm's cos, pow and sqrt, as Python's
 * math module calls them). This module owns the formulas and nothing else;
 * who counts t and when an lr is applied is the shard's. */
#ifndef DCPS_SCHEDULE_H
#define DCPS_SCHEDULE_H

#include <stdint.h>

/* [optimizer] schedule, in the order the job file's names are listed. */
enum dcps_schedule_kind {
    DCPS_SCHED_CONSTANT,
    DCPS_SCHED_STEP,
    DCPS_SCHED_COSINE,
    DCPS_SCHED_LINEAR,
    DCPS_SCHED_INVERSE_SQRT
};

/* A schedule's keys, as the job file gives them (the table in common/config.c
 * holds their ranges; the load checks total_steps > warmup_steps for cosine and
 * linear, and min_lr ≤ lr). */
typedef struct dcps_schedule {
    int kind;          /* enum dcps_schedule_kind */
    int warmup_steps;  /* W ≥ 0: updates of the linear warm-up; 0: none */
    int total_steps;   /* T: cosine and linear reach min_lr at t = T (T > W) */
    int step_every;    /* step: updates between two decays, ≥ 1 */
    double step_gamma; /* step: the factor of each decay, in (0, 1] */
    double min_lr;     /* cosine, linear: the lr from t = T on, in [0, lr] */
} dcps_schedule_t;

/* f(t) of s for base lr `lr` (> 0), exactly as the formulas above evaluate in
 * double, left to right. For cosine and linear with T ≤ W (which the load
 * refuses) c is taken as 1: min_lr / lr from the end of the warm-up on. */
double dcps_schedule_factor(const dcps_schedule_t *s, double lr, uint64_t t);

/* The lr of the update that t updates precede: lr · dcps_schedule_factor(s,
 * lr, t), the product LambdaLR forms (so the same double, not a rearranged
 * formula). lr is the base in force, [optimizer] lr since the last reload; a
 * shard calls it with t = its version before the update. */
double dcps_schedule_lr(const dcps_schedule_t *s, double lr, uint64_t t);

#endif
