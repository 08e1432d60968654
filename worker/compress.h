/* dcps — the worker's gradient compressor: what one step pushes.
 *
 * Each step the worker hands its gradient to the compressor, which returns either
 * the whole vector (a dense push) or k (index, value) pairs in ascending index
 * order (a top-k push, docs/algorithms.md). It applies, per the [compression] keys: local
 * gradient clipping, the uncompressed warm-up steps and the periodic dense
 * correction, the density warm-up schedule, error feedback, and DGC momentum
 * correction with momentum-factor masking (Lin et al., "Deep Gradient
 * Compression", ICLR 2018, §3.2). The compressor owns the residual (and the
 * velocity under momentum correction) and the output arrays; it does not send
 * anything, and it knows nothing of shards: the caller splits the output by index.
 *
 * Everything is allocated by dcps_compress_new; encoding allocates nothing. CPU
 * only; one compressor per worker, used by one thread at a time. */
#ifndef DCPS_COMPRESS_H
#define DCPS_COMPRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"

typedef struct dcps_compress dcps_compress_t;

/* One step's push. Its arrays are owned by the compressor (or are the caller's g,
 * see dcps_compress_encode) and stay valid until the next encode or destroy. */
typedef struct {
    bool dense;          /* values[0..n) is the whole vector to push */
    const float *values; /* dense: n values; sparse: k values */
    const uint32_t *idx; /* sparse: k ascending global indices; NULL when dense */
    size_t k;            /* sparse: entries; dense: n */
    double density;      /* the density this step used (1 when dense) */
    uint32_t dtype;      /* the values' wire format (FrameDesc.dtype: 1 float32, or a
                            shorter one of proto/quant.h): [compression] values, or
                            TWOBIT for a push = twobit step that is not dense */
    float tau;           /* TWOBIT: [compression] threshold */
    float *lost;         /* k floats the pusher fills with what rounding took from each
                            value (dcps_client_push_as), then dcps_compress_keep; NULL
                            when nothing is kept (float32, or no error feedback) */
} dcps_encoded_t;

/* A compressor for gradients of n floats, configured by cfg's [compression] keys
 * (read now; cfg is not kept). The residual and velocity start at zero. Returns
 * NULL with *err (when err is not NULL) set to DCPS_E_INVAL (n is 0 or, for a
 * top-k push, above DCPS_TOPK_MAX_N; a key outside its range; momentum correction
 * without error feedback) or DCPS_E_NOMEM; *err is 0 on success. */
dcps_compress_t *dcps_compress_new(const dcps_config_t *cfg, size_t n, int *err);

/* Frees *c and sets it to NULL; accepts NULL and a pointer to NULL. */
void dcps_compress_destroy(dcps_compress_t **c);

/* Encodes the gradient g (n floats) of step `step` (from 1) in epoch `epoch` (from
 * 1) into *out. In order:
 *   1. clip_norm > 0 and ||g||_2 > clip_norm: g is scaled in place to that norm.
 *   2. The step is dense when push is dense, step <= warmup_steps, or
 *      correction_every > 0 divides step; otherwise it sends the top k, k =
 *      max(1, ceil(density(epoch) * n)) and at most n.
 *   3. Error feedback: the residual r gains g (r <- r + g, as dcps_residual_add_cpu)
 *      and what is sent is taken from r and cleared there, so that what was sent
 *      plus r is always the sum of every g, bit for bit. Without it the step sends
 *      from g and keeps nothing.
 *   4. Momentum correction mu > 0 (rounded to float): the velocity
 *      u <- mu * u + g (the product rounded before the addition) is what enters r,
 *      and both r and u are cleared where an entry is sent (momentum factor
 *      masking).
 * A dense step sends everything, so it leaves r and u at zero. With push = dense
 * and float32 values nothing is ever held back: out->values is g itself.
 *   5. Values in a shorter format ([compression] values, push = twobit), with
 *      error feedback: what rounding takes from each sent value goes back into
 *      r after the push (out->lost, dcps_compress_keep), so nothing is lost
 *      over time. push = twobit sends every entry of r + g as +tau, -tau or 0
 *      (|x| >= tau), steps that are dense by 2. in the values format.
 *
 * Returns 0; DCPS_E_INVAL (step or epoch below 1; nothing changed); or
 * DCPS_E_NONFINITE when g, or the sum it would be sent from, holds NaN or Inf.
 * Nothing is sent then (and a g that holds NaN or Inf is not scaled), but the
 * non-finite sum may stay in the residual or the velocity, so that every later
 * call fails too: a diverged worker stops rather than pushing garbage. */
int dcps_compress_encode(dcps_compress_t *c, float *g, long step, int epoch, dcps_encoded_t *out);

/* After a push of *e that wrote what rounding took into e->lost: the residual
 * keeps it (r_i += lost_j at each sent entry; a dense step's lost is r
 * itself). Nothing to do when e->lost is NULL. */
void dcps_compress_keep(dcps_compress_t *c, const dcps_encoded_t *e);

/* The density of a top-k step in epoch (from 1; below 1 counts as 1): with E =
 * density_warmup_epochs > 0 and epoch e <= E, 0.25^(1 - (e-1)/E) * density^((e-1)/E),
 * falling geometrically from 25% towards density (DGC's warm-up); else density.
 * When density >= 0.25 it is always density. */
double dcps_compress_density(const dcps_compress_t *c, int epoch);

/* Whether x[0..n) holds no NaN and no Inf; reads all of it. The check every
 * encoder makes on what it is about to send. */
bool dcps_compress_finite(const float *x, size_t n);

/* The residual, n floats, for tests: all zero when nothing is held back (no error
 * feedback, a dense push, or just after a dense step). Valid until the next encode
 * or destroy. */
const float *dcps_compress_residual(const dcps_compress_t *c);

#endif
