/* dcps — the learning-rate schedule; see schedule.h.
 *
 * Each formula is written as issue 27 and docs/algorithms.md#schedules give
 * it, operation by operation, so that a Python function that spells the same
 * formula (python/tests/test_schedule.py) gets the same double: integer ratios
 * are formed from exact integers (a quotient of two doubles below 2^53 is the
 * correctly rounded rational, as Python's int / int), and cos, pow and sqrt are
 * libm's, which Python's math module and float ** int call. The build's
 * -std=c11 keeps GCC from contracting a * b + c into an FMA. */
#include "common/schedule.h"

#include <math.h>

/* c = min(u, T − W) / (T − W): how far the decay of cosine and linear has
 * gone, u updates after the warm-up. 1 when T ≤ W, so that a schedule the
 * load would refuse still ends at min_lr. w is W, never negative. */
static double decayed(const dcps_schedule_t *s, uint64_t w, uint64_t u)
{
    if (s->total_steps <= 0 || (uint64_t)s->total_steps <= w)
        return 1;
    uint64_t span = (uint64_t)s->total_steps - w;
    return (double)(u < span ? u : span) / (double)span;
}

double dcps_schedule_factor(const dcps_schedule_t *s, double lr, uint64_t t)
{
    uint64_t w = s->warmup_steps > 0 ? (uint64_t)s->warmup_steps : 0;
    if (t < w)
        return (double)(t + 1) / (double)w;
    uint64_t u = t - w;
    switch (s->kind) {
    case DCPS_SCHED_STEP: {
        uint64_t every = s->step_every > 0 ? (uint64_t)s->step_every : 1;
        return pow(s->step_gamma, (double)(u / every));
    }
    case DCPS_SCHED_COSINE:
        return (s->min_lr + (lr - s->min_lr) * (1 + cos(M_PI * decayed(s, w, u))) / 2) / lr;
    case DCPS_SCHED_LINEAR: return (lr + (s->min_lr - lr) * decayed(s, w, u)) / lr;
    case DCPS_SCHED_INVERSE_SQRT: return sqrt((double)(w > 1 ? w : 1)) / sqrt((double)(t + 1));
    default: return 1; /* constant */
    }
}

double dcps_schedule_lr(const dcps_schedule_t *s, double lr, uint64_t t)
{
    return lr * dcps_schedule_factor(s, lr, t);
}
