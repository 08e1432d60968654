/* dcps — the error-feedback residual update.
 *
 * Error feedback keeps, per worker, what compression has not sent yet: each step
 * the new gradient is added to the residual (r ← r + g), the push sends from r,
 * and the sent entries of r are cleared. With a dense push everything is sent,
 * so r is g of that step. The GPU and CPU versions do the same single-precision
 * addition per element and give identical results, bit for bit. */
#ifndef DCPS_RESIDUAL_H
#define DCPS_RESIDUAL_H

#include <stddef.h>

#include "kernels/gpu.h"

/* r[i] ← r[i] + g[i] for i < n, on the CPU. */
void dcps_residual_add_cpu(float *r, const float *g, size_t n);

/* The same on the GPU: d_r and d_g are device pointers; runs on stream and
 * returns after the launch (not after completion). Returns 0, DCPS_E_CUDA, or
 * DCPS_E_NOGPU when built without CUDA or without a usable GPU (even for n 0). */
int dcps_residual_add_gpu(float *d_r, const float *d_g, size_t n, dcps_stream_t stream);

#endif
