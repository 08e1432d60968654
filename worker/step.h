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
