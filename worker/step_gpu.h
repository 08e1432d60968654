/* libdcps — the device half of a step: device arrays (worker/step.h,
 * dcps_step_use_stream).
 *
 * With device arrays the caller's gradient and parameters are CUDA device
 * pointers, used in order on the caller's stream. This module is what the step
 * needs on that side: the encoder of a device gradient (the device counterpart
 * of worker/compress.h, for the options it supports) and the sink that lands a
 * pull in device parameters (dcps.h, dcps_pull_sink_t). It owns, all allocated
 * by dcps_step_gpu_new on the current device:
 *   on the device  the residual, n floats (error feedback with a top-k or
 *                  two-bit push, or shorter values), and a k-sized pair of arrays (indices, values) that
 *                  the selection writes and a delta pull scatters from;
 *   pinned host    n floats (a dense push, rank 0's initial parameters, a
 *                  pull's dense ranges) and the same k-sized pair (the
 *                  selection's output, a pull's deltas); with shorter values
 *                  and error feedback n more (what rounding took, which the
 *                  residual keeps: the values are encoded on the host, from
 *                  what the selection downloaded, as the host path does).
 * k is the larger of a top-k push's k in the first epoch (the density
 * schedule's largest) and the deltas the shards may send one pull in that
 * epoch; a pull that brings more is scattered in several rounds.
 *
 * It calls only the kernels' C API (kernels/gpu.h, topk.h, residual.h), sends
 * nothing and knows nothing of shards. One per step object, used by its thread. */
#ifndef DCPS_STEP_GPU_H
#define DCPS_STEP_GPU_H

#include <stddef.h>

#include "common/config.h"
#include "worker/compress.h"
#include "worker/dcps.h"

typedef struct dcps_step_gpu dcps_step_gpu_t;

/* The device side of a step for n parameters, configured by cfg's
 * [compression] keys (read now), working on `stream` (a cudaStream_t). cfg
 * must not ask for what the device path does not do (dcps_step_gpu_refuses).
 * Returns NULL with *err (DCPS_E_NOGPU, DCPS_E_NOMEM, DCPS_E_CUDA) and a
 * sentence in errbuf. */
dcps_step_gpu_t *dcps_step_gpu_new(const dcps_config_t *cfg, size_t n, void *stream, int *err,
                                   char *errbuf, size_t errlen);

/* Waits for the uploads in flight, frees *g and sets it to NULL; takes NULL
 * and a pointer to NULL. */
void dcps_step_gpu_destroy(dcps_step_gpu_t **g);

/* The [compression] or [job] key (as "section.key = value") of cfg that the
 * device path does not do in this version, written into buf; 0 if none. */
int dcps_step_gpu_refuses(const dcps_config_t *cfg, char *buf, size_t len);

/* From now on works on stream, after the uploads in flight on the old one. */
int dcps_step_gpu_set_stream(dcps_step_gpu_t *g, void *stream);

/* Encodes the device gradient d_g (n floats) of step `step` (from 1) in epoch
 * `epoch` as dcps_compress_encode does (same steps dense, same k, same bits),
 * into *out, whose arrays are this module's pinned buffers (valid until the
 * next call). Returns when what is sent is on the host: the stream has run up
 * to here. Returns 0, DCPS_E_NONFINITE (what would be sent holds NaN or Inf;
 * nothing is sent), DCPS_E_CUDA. */
int dcps_step_gpu_encode(dcps_step_gpu_t *g, const float *d_g, long step, int epoch,
                         dcps_encoded_t *out);

/* After the push of *e (from dcps_step_gpu_encode) wrote what rounding took
 * into e->lost (pinned): queues its upload into the device residual (a dense
 * step's r becomes it, a top-k step's adds it at the selected entries). The
 * next encode waits for it. Nothing when e->lost is NULL. */
int dcps_step_gpu_keep(dcps_step_gpu_t *g, const dcps_encoded_t *e);

/* Copies the device array d_x (n floats) to the pinned buffer and sets *host
 * to it (valid until the next call); returns when the copy is done. */
int dcps_step_gpu_download(dcps_step_gpu_t *g, const float *d_x, const float **host);

/* A sink (dcps_client_pull_to) that lands a pull in d_params: dense ranges are
 * staged in pinned memory and uploaded, deltas staged and added on the device
 * (dcps_scatter_add_gpu, alpha 1, as the host pull adds them). Waits first for
 * the uploads of the pull before. Call dcps_step_gpu_pull_end after the pull,
 * also after a failed one, so that what it queued is waited for before the
 * staging is written again. */
int dcps_step_gpu_sink(dcps_step_gpu_t *g, float *d_params, dcps_pull_sink_t *sink);

/* Queues what the pull left staged and returns: the parameters are complete
 * in stream order. The next use of the staging waits for these uploads. */
int dcps_step_gpu_pull_end(dcps_step_gpu_t *g);

#endif
