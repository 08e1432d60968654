/* dcps — exact top-k selection by magnitude, with error feedback, and the sparse
 * scatter and gather that go with it.
 *
 * The selection is exact and deterministic (docs/algorithms.md): of the n values it takes
 * the k of largest magnitude, where magnitudes are compared as the 31-bit key
 * bits(x) & 0x7fffffff (so -0 and +0 are equal; for finite values the order of
 * keys is the order of |x|), and among equal magnitudes the lower index wins. The
 * result is k pairs (index, original signed value) in ascending index order, so
 * the CPU and GPU versions give the same bits. NaN or Inf anywhere in the input is
 * refused with DCPS_E_NONFINITE; the outputs are then unspecified, but nothing is
 * written outside them. Sizes: 1 <= k <= n <= the workspace's max_n <=
 * DCPS_TOPK_MAX_N, anything else is DCPS_E_INVAL with nothing written.
 *
 * Both versions are radix selections, not sorts: a histogram of the top bits of
 * the keys finds the bin holding the k-th largest key, that bin is narrowed to the
 * exact threshold key T, and one ordered pass emits every key above T plus the
 * first entries equal to T. The CPU version mostly starts instead from a pivot read
 * from a sample, copies what lies above it in one ordered pass, and narrows only
 * the copies (kernels/topk.c). The module owns its workspaces; the caller owns
 * every array it passes. A workspace serves one call at a time. */
#ifndef DCPS_TOPK_H
#define DCPS_TOPK_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/gpu.h"

/* The largest n any call accepts (indices are uint32_t). */
#define DCPS_TOPK_MAX_N ((size_t)1 << 30)

/* --- CPU ------------------------------------------------------------------------ */

typedef struct dcps_topk_ws dcps_topk_ws_t;

/* A workspace for selections over up to max_n values, about max_n bytes, so that
 * no call allocates. NULL with *err set to DCPS_E_INVAL (max_n is 0 or above
 * DCPS_TOPK_MAX_N) or DCPS_E_NOMEM. */
dcps_topk_ws_t *dcps_topk_ws_new(size_t max_n, int *err);

/* Frees *ws and sets it to NULL; accepts NULL and a pointer to NULL. */
void dcps_topk_ws_destroy(dcps_topk_ws_t **ws);

/* Writes the top k of x[0..n) to idx[0..k) and val[0..k) (x[idx[j]] == val[j],
 * idx ascending). Returns 0, DCPS_E_INVAL or DCPS_E_NONFINITE. Runs on one thread;
 * for n of at least 2^16 and k up to an eighth of the workspace's max_n it reads x
 * once (and a sample of it), however many magnitudes are equal. Otherwise it
 * reads x twice, up to four times when the magnitudes are few or clustered, and a
 * sample that misleads adds those reads to the first one. */
int dcps_topk_cpu(const float *x, size_t n, size_t k, uint32_t *idx, float *val,
                  dcps_topk_ws_t *ws);

/* Error feedback, fused: r ← r + g (the same float addition as
 * dcps_residual_add_cpu), then the top k of r as dcps_topk_cpu would give it, and
 * r[idx[j]] ← +0 on the selected entries. With g NULL it selects from r as it is.
 * So for every i, what is sent plus what stays in r is r + g, bit for bit. On
 * DCPS_E_NONFINITE r holds r + g and nothing is cleared; on DCPS_E_INVAL r is
 * unchanged. */
int dcps_topk_ef_cpu(float *r, const float *g, size_t n, size_t k, uint32_t *idx, float *val,
                     dcps_topk_ws_t *ws);

/* w[idx[j]] ← w[idx[j]] + alpha * val[j] for j < k, the product rounded to float
 * before the addition; indices must be inside w. */
void dcps_scatter_add_cpu(float *w, const uint32_t *idx, const float *val, size_t k,
                          float alpha);

/* out[j] ← w[idx[j]] for j < k. */
void dcps_gather_cpu(const float *w, const uint32_t *idx, size_t k, float *out);

/* For benchmarks: one read pass over x[0..n), the cost a selection is measured
 * against. Returns the sum of |x| (summation order unspecified). */
float dcps_topk_read_cpu(const float *x, size_t n);

/* --- GPU -------------------------------------------------------------------------
 * The same operations on device pointers, on a stream, with the same results bit
 * for bit. Built without CUDA, or without a usable GPU, every function fails
 * with DCPS_E_NOGPU (the constructor returns NULL with that code); out of device
 * memory gives DCPS_E_NOMEM, other CUDA failures DCPS_E_CUDA. A call that fails
 * after queuing work waits for that work before it returns. */

typedef struct dcps_topk_gpu_ws dcps_topk_gpu_ws_t;

/* A device workspace for up to max_n values (about 4 * max_n bytes) on the current
 * device. NULL with *err set to DCPS_E_INVAL, DCPS_E_NOGPU, DCPS_E_NOMEM or
 * DCPS_E_CUDA. */
dcps_topk_gpu_ws_t *dcps_topk_gpu_ws_new(size_t max_n, int *err);

/* Frees *ws (after the work queued on it is done) and sets it to NULL. */
void dcps_topk_gpu_ws_destroy(dcps_topk_gpu_ws_t **ws);

/* dcps_topk_cpu on the GPU: d_x, d_idx (k entries) and d_val (k entries) are
 * device pointers. Synchronizes the stream before it returns, to report
 * DCPS_E_NONFINITE: the selection is complete when it returns 0. */
int dcps_topk_gpu(const float *d_x, size_t n, size_t k, uint32_t *d_idx, float *d_val,
                  dcps_topk_gpu_ws_t *ws, dcps_stream_t stream);

/* dcps_topk_ef_cpu on the GPU (d_g may be NULL); synchronizes the stream like
 * dcps_topk_gpu. */
int dcps_topk_ef_gpu(float *d_r, const float *d_g, size_t n, size_t k, uint32_t *d_idx,
                     float *d_val, dcps_topk_gpu_ws_t *ws, dcps_stream_t stream);

/* dcps_scatter_add_cpu on the GPU. The indices must be distinct (as a top-k
 * output is): each entry of w is updated by one thread. Returns after the launch. */
int dcps_scatter_add_gpu(float *d_w, const uint32_t *d_idx, const float *d_val, size_t k,
                         float alpha, dcps_stream_t stream);

/* dcps_gather_cpu on the GPU; returns after the launch. */
int dcps_gather_gpu(const float *d_w, const uint32_t *d_idx, size_t k, float *d_out,
                    dcps_stream_t stream);

/* For benchmarks: one read pass over d_x[0..n), adding the sum of |x| to *d_sum
 * (in an unspecified order), on the grid ws's selections use (ws gives only the
 * grid; n may exceed its max_n). Reads each entry once, with one atomic per block.
 * Returns after the launch: 0 (also for n == 0, *d_sum unchanged), DCPS_E_INVAL for
 * a NULL pointer, or DCPS_E_CUDA. */
int dcps_topk_read_gpu(const float *d_x, size_t n, float *d_sum, const dcps_topk_gpu_ws_t *ws,
                       dcps_stream_t stream);

#endif
