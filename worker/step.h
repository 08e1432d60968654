/* libdcps — the worker's step: everything a worker does around a gradient.
 *
 * A step object is one worker rank of a job, for a model of n float32
 * parameters that the caller owns and computes. It knows nothing of the model
 * or its data: the caller hands it each step's gradient (a flat array of n)
 * and gets the parameters back (a flat array of n, in the same order). In
 * between it does what the job's [compression] and [job] keys say: clipping,
 * the uncompressed warm-up and periodic dense correction, the density
 * schedule, error feedback and DGC momentum correction (worker/compress.h), the
 * push split by shard, the pull (dense or delta), and with pipeline = true the
 * CD-SGD overlap. Both the built-in trainer (dcps-worker) and the Python
 * package (dcps.torch) are users of this one implementation.
 *
 * A life cycle:
 *
 *     dcps_step_t *s = dcps_step_open("job.ini", rank, NULL, 0, n, &err, buf, sizeof buf);
 *     dcps_step_start(s, params);          rank 0: its params initialise the shards;
 *                                          every rank: params = the shards' (first pull)
 *     for each batch:
 *         compute grad at params
 *         dcps_step_run(s, grad, params, epoch);  push grad, params = pulled
 *     dcps_step_finish(s, params);         DONE, barrier, exact pull into params
 *     dcps_step_close(&s);
 *
 * Arrays are borrowed for the duration of a call, except with the pipeline
 * (below). Errors are values: calls return 0 or a negative DCPS_E_… code
 * (<dcps/error.h>) and dcps_step_error() gives the sentence. A step object is
 * used by one thread (with the pipeline it runs a second one of its own, which
 * only it touches). The library never exits the process.
 *
 * Arrays are host (CPU) arrays, or after dcps_step_use_stream() CUDA device
 * arrays on the caller's stream (docs/pytorch.md, CUDA models); its comment says what then runs
 * where, what crosses PCIe and what is ordered on the stream. */
#ifndef DCPS_STEP_H
#define DCPS_STEP_H

#include <stddef.h>
#include <stdint.h>

#include "dcps.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dcps_step dcps_step_t;

/* Opens rank `rank` of the job in job_file (overrides: "section.key=value", as
 * --set) for a model of n parameters and connects to the shards. With [model]
 * params = auto the shards learn n from rank 0; otherwise n must equal the
 * job's size, and a shard whose size differs refuses this worker with
 * DCPS_E_SIZE and a sentence naming both sizes, before anything is pushed.
 * Returns NULL on failure with the code in *err and a sentence in errbuf. */
dcps_step_t *dcps_step_open(const char *job_file, int rank, const char *const *overrides,
                            size_t n_overrides, size_t n, int *err, char *errbuf, size_t errlen);

/* Waits for the previous step's communication (pipeline), says BYE, frees *s
 * and sets it to NULL. Accepts NULL and a pointer to NULL. */
void dcps_step_close(dcps_step_t **s);

/* Names the tensors of the flat vector for error messages: tensor j starts at
 * offsets[j] (ascending, offsets[0] = 0) and is called names[j]. Copied. A
 * non-finite gradient is then reported as "the gradient of NAME, entry e". */
int dcps_step_set_names(dcps_step_t *s, const size_t *offsets, const char *const *names,
                        size_t count);

/* Parameter groups (torch.optim's param_groups; docs/pytorch.md): n_ranges
 * (end, group) pairs tiling [0, n) of the flat vector in order, and n_groups
 * (lr_factor, weight_decay) pairs. The shards apply each group's weight decay
 * and lr (the shards' lr, which the schedule scales, times lr_factor) to its
 * ranges. Rank 0's table goes to the shards with its INIT; every rank's is
 * compared with it (dcps_client_set_groups): a table that differs is refused
 * with DCPS_E_FIELD and a sentence naming the first group that differs. Call
 * it before dcps_step_start. */
int dcps_step_set_groups(dcps_step_t *s, const uint32_t *ranges, size_t n_ranges,
                         const double *opts, size_t n_groups);

/* Device arrays: from now on params and grad (of start, run and finish) are
 * CUDA device pointers on the current device, used in order on `stream` (a
 * cudaStream_t; NULL is the legacy default stream). Call it before
 * dcps_step_start; called again, it only moves the step to another stream
 * (after the uploads queued on the old one). The step allocates, once:
 * on the device, the error-feedback residual (n floats, a top-k push with
 * error feedback only), the top-k workspace (about 4n bytes, top-k push only)
 * and k indices and k values; pinned host memory for n floats and k indices
 * and values (k: the first epoch's top-k k or delta-pull entries, whichever
 * is larger); and it frees the host encoder's arrays.
 *
 * What runs where, per step: the residual update and the Top-k selection run
 * on the device (kernels/topk.h, bit for bit what the host path computes);
 * only the k indices and values cross PCIe to be pushed. A dense step
 * (push = dense, warm-up, correction_every) downloads n values (with error
 * feedback r + g, and clears r). A pull uploads what the shards sent: a dense
 * range as it is, a delta as its (index, value) pairs, added on the device.
 * What is sent is checked on the host for NaN and Inf, as on the host path.
 *
 * Ordering: the step reads grad and params after the work the caller queued
 * on the stream before the call, and waits for the stream where it must read
 * on the host (so the caller's queued work has run when run() returns). The
 * pulled parameters are written by copies and a kernel queued on the stream:
 * when start(), run() and finish() return they are complete for work queued
 * later on that stream, not yet for the host or for other streams (record an
 * event, or synchronise the stream). grad may be overwritten in stream order
 * as soon as run() returns.
 *
 * Refused: DCPS_E_NOGPU with a sentence when no GPU is usable (or libdcps was
 * built without CUDA); DCPS_E_STATE after dcps_step_start with host arrays,
 * and after a failed step (whose sentence dcps_step_error() keeps);
 * DCPS_E_CONFIG, naming the key, for what the device path does not do in this
 * version: [compression] pipeline = true, momentum_correction > 0 (DGC) with
 * push = topk, and clip_norm > 0; DCPS_E_NOMEM or DCPS_E_CUDA when the
 * allocations fail. After a refusal the step keeps the arrays it took. */
int dcps_step_use_stream(dcps_step_t *s, void *stream);

/* Starts training: rank 0 initialises the shards from params (n values) if
 * they have no parameters yet; the other ranks wait for that (up to 120 s).
 * Then every rank pulls: params become the shards' parameters. A restarted
 * worker resumes at the step the shards hold for its rank (dcps_step_clock).
 * With device arrays rank 0's params are copied to the host once for that. */
int dcps_step_start(dcps_step_t *s, float *params);

/* One step of epoch `epoch` (from 1): encodes grad (n values; clipping may
 * scale it in place), pushes it, and pulls the parameters of the next step
 * into params. With [compression] pull = delta, params must hold what the
 * previous call left there.
 *
 * With pipeline = true (CD-SGD) the call waits for the previous step's push
 * and pull instead, sets params to those pulled parameters minus local_lr ·
 * grad, and returns while this step's push and pull run on the step's thread;
 * grad may be reused at once (a dense push is copied first), params is not
 * touched by that thread. Warm-up steps wait for their pull.
 *
 * Returns 0; DCPS_E_NONFINITE when grad (or the residual) holds NaN or Inf,
 * naming the tensor and entry, before anything is sent; or a client error
 * (dcps.h). After a failure the step object can only be closed: later calls
 * return DCPS_E_STATE and dcps_step_error() keeps the first failure's sentence.
 * Out of order (run before start, start twice, run after finish): DCPS_E_STATE
 * with a sentence, and nothing sent. */
int dcps_step_run(dcps_step_t *s, float *grad, float *params, int epoch);

/* A step in ranges: the gradient given range by range as the caller has each
 * one (a framework's backward pass produces the last layers' first), each
 * range compressed on its own and sent at once while the caller computes the
 * next; then the pull, whole or front first (docs/pytorch.md, "Buckets").
 *
 *     size_t ends[] = {a, b, n};               three ranges: [0, a) [a, b) [b, n)
 *     dcps_step_set_ranges(s, ends, 3);
 *     for each batch:
 *         dcps_step_begin(s, epoch);
 *         as each range's gradient is ready, in any order:
 *             dcps_step_push_range(s, b, n, grad + b);
 *             ...
 *         dcps_step_end(s, params, 1);         the pull, front first
 *         dcps_step_wait_range(s, 0, a);       before computing with params[0..a)
 *
 * Each range has its own compressor (worker/compress.h) over its own entries:
 * its own error-feedback residual and, with push = topk, its own Top-k of
 * k = max(1, ⌈density · its length⌉) entries. That is not the Top-k of the
 * whole gradient (dcps_step_run's): every range sends its share of k however
 * large its entries are beside the other ranges'. Dense steps (push = dense,
 * the warm-up, correction_every) and the density schedule follow the step
 * number as in dcps_step_run, the same for every range. A range's piece of
 * each shard's range is one part of that shard's push (docs/protocol.md,
 * section 17), sent as soon as it is given; in sync mode the shards count the
 * rank's push for the round once all its parts have come. The ranges' own
 * residuals are apart from dcps_step_run's: a job may mix both kinds of step,
 * each keeping its own. */

/* Sets the ranges a step is pushed in: range j is [ends[j - 1], ends[j])
 * (ends[-1] = 0), the ends strictly ascending and the last the model's n, so
 * that the ranges tile the model once. Copied; each range gets its compressor,
 * with a zero residual (this call between steps starts them again). Before
 * dcps_step_start or between steps.
 *
 * Refused, with a sentence and nothing changed: DCPS_E_INVAL for ends that
 * leave a range empty, go backwards or past n, or end before n (naming the
 * range), and for ranges that give one shard more than 64 parts of a push
 * (docs/protocol.md, 17: give fewer, larger ranges); DCPS_E_CONFIG, naming the
 * key, for what a step in ranges does not do in this version: device arrays,
 * [compression] pipeline = true and clip_norm > 0 (the norm is the whole
 * gradient's); DCPS_E_STATE during a step in ranges; DCPS_E_NOMEM. Memory: the ranges'
 * compressors together hold what one compressor of the whole model does
 * (their residuals tile it), plus n uint32 indices with push = topk;
 * dcps_step_run's compressor is kept beside them. */
int dcps_step_set_ranges(dcps_step_t *s, const size_t *ends, size_t count);

/* Begins step number dcps_step_clock + 1 of epoch `epoch` (from 1) in ranges:
 * after dcps_step_start, between steps. Waits first for an ordered pull in
 * flight (dcps_step_end), whose failure it returns. DCPS_E_STATE with a
 * sentence when no ranges were set or a step in ranges is open; until
 * dcps_step_end, dcps_step_run, finish, pull and buffers refuse with
 * DCPS_E_STATE. */
int dcps_step_begin(dcps_step_t *s, int epoch);

/* Pushes the gradient of range [lo, hi), one of the ranges set, in grad
 * (hi - lo values; grad[0] is entry lo): encodes it with the range's own
 * compressor and sends its part of each shard's push without waiting for the
 * shards. grad is borrowed until dcps_step_end returns (a dense push sends it
 * as it is, and a resent part reads it again): do not change it meanwhile.
 * Values in a shorter format ([compression] values, push = twobit) go as
 * dcps_step_run sends them, each part encoded on its own (INT8's blocks count
 * from the part's first value), and with error feedback what rounding took
 * goes back into the range's residual.
 *
 * Refused with DCPS_E_INVAL and a sentence naming the range, nothing sent and
 * the step still open: a range that is empty or past the model, that is not
 * one of the ranges set (naming the range it overlaps), or that was pushed
 * already this step; DCPS_E_STATE outside a step in ranges. A gradient that
 * holds NaN or Inf fails the step (DCPS_E_NONFINITE, naming the tensor and
 * entry, as dcps_step_run), and so does a client error: the parts sent
 * already cannot be taken back, so only dcps_step_close remains. */
int dcps_step_push_range(dcps_step_t *s, size_t lo, size_t hi, float *grad);

/* Ends the step in ranges: every range must have been pushed (else
 * DCPS_E_INVAL naming the first that was not, and the step stays open for
 * it). Waits for the shards' acknowledgement of every part, resending what is
 * not acknowledged, and moves the clock on. Then the pull of the next step's
 * parameters into params (n values):
 *  - ordered = 0: whole, as dcps_step_run's, before the call returns;
 *  - ordered != 0: asked for at once, and taken on the step's own thread while
 *    the caller goes on. Each shard's dense reply comes in about as many parts
 *    as the ranges give that shard, front first (shard 0 holds the front of
 *    the model; a reply in a shorter format, [compression] values, comes
 *    whole): dcps_step_wait_range says when a range has landed. params is
 *    the step's until the pull is complete: read only ranges that
 *    dcps_step_wait_range returned for, and write none; the next call of any
 *    other step function waits for the whole pull first.
 * With pull = delta, params must be what the previous pull left there.
 * A failure fails the step, as dcps_step_run's. */
int dcps_step_end(dcps_step_t *s, float *params, int ordered);

/* Returns when the entries [lo, hi) of the params of the last ordered
 * dcps_step_end have landed (those of the shards' replies that cover it;
 * a delta reply lands whole, an empty one when the pull ends), or the pull's
 * error if it failed (the step is then failed). Returns 0 at once when no
 * ordered pull is in flight. DCPS_E_INVAL for a range that is empty or past
 * the model. */
int dcps_step_wait_range(dcps_step_t *s, size_t lo, size_t hi);

/* Ends training: waits for the pipeline, tells the shards this worker is
 * done, meets the other workers at the final barrier and pulls the model
 * exactly into params, so that every rank ends with the same model: the
 * shards' parameters (not an async delta pull's mirror), or in sync mode with
 * delta pulls the shared mirror every worker trained on (docs/algorithms.md). */
int dcps_step_finish(dcps_step_t *s, float *params);

/* Pulls the model exactly (as dcps_step_finish does) into params, an
 * array of n other than the step's own, without ending training: for saving
 * the model mid-run. Waits first for the step in flight (pipeline); the model's
 * array that run and finish take is left as it is, and the next pull is dense.
 * After start, also after finish. On failure params may be partly written and
 * the step is failed, as after a failed run. */
int dcps_step_pull(dcps_step_t *s, float *params);

/* The model's buffers (dcps_client_buffers, enum dcps_buffers_mode): waits for
 * the pipeline's step in flight, then one exchange with shard 0 that publishes
 * this rank's (with publish) and writes the job's into out_floats and
 * out_ints. Returns 1 if it did, 0 if the shard has none yet, or a negative
 * code (dcps_step_error says why). Between dcps_step_start and
 * dcps_step_close, also after dcps_step_finish: a rank takes the job's final
 * buffers after the final barrier. A failure does not end the step. */
int dcps_step_buffers(dcps_step_t *s, int mode, int publish, const float *floats,
                      size_t n_floats, const double *ints, size_t n_ints, float *out_floats,
                      double *out_ints);

/* Pipeline: waits for the step in flight and returns its result (0 without
 * the pipeline). Then dcps_step_pulled() holds the parameters it pulled. */
int dcps_step_wait(dcps_step_t *s);

/* Pipeline: the step's own array of the parameters last pulled (valid until
 * the next run or close; read it only after dcps_step_wait), which params
 * differ from by the local update. NULL without the pipeline, and after
 * dcps_step_finish: params are then the parameters last pulled. For
 * evaluating the model the shards hold. */
const float *dcps_step_pulled(const dcps_step_t *s);

/* The step computed next, counted from 0 for the job: after a restart the
 * first step the shards do not hold for this rank. */
uint64_t dcps_step_clock(const dcps_step_t *s);
/* The step at which this process started (0 for a new worker). */
uint64_t dcps_step_resumed(const dcps_step_t *s);

/* The client's counters (dcps.h) as of the last completed exchange. */
void dcps_step_stats(const dcps_step_t *s, dcps_client_stats_t *out);

/* dcps_client_lr (dcps.h) as of the last completed exchange: the learning rate
 * the shards had in force at the last pull; NaN before it. */
double dcps_step_lr(const dcps_step_t *s);

/* The sentence for the last failure; "" if none. Valid until the next call. */
const char *dcps_step_error(const dcps_step_t *s);

#ifdef __cplusplus
}
#endif
#endif
