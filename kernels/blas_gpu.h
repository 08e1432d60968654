/* dcps — cuBLAS, loaded at run time, behind a plain C interface.
 *
 * The binaries link no CUDA library but the static runtime, so that they start
 * on machines without the toolkit or a GPU. cuBLAS is therefore opened with
 * dlopen() on first use ("libcublas.so.13", then "libcublas.so") and stays
 * loaded for the life of the process. A library that cannot be loaded, like a
 * missing GPU, is DCPS_E_NOGPU with one logged sentence that names the library:
 * the caller chooses the CPU path. cuBLAS failures are DCPS_E_CUDA with cuBLAS's
 * own status string in the log, never an abort. Built without CUDA, every
 * function here returns DCPS_E_NOGPU.
 *
 * This module owns handles and the one matrix product the MLP needs; the
 * kernels/ .cu files are its only intended callers. */
#ifndef DCPS_BLAS_GPU_H
#define DCPS_BLAS_GPU_H

#include "kernels/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Loads cuBLAS into the process if it is not loaded yet: the library named by
 * name, or with name NULL the default names in order. Returns 0 (also at once,
 * whatever name, once any load has succeeded) or DCPS_E_NOGPU after logging why;
 * a failed load changes nothing, so a later call may try again. Thread-safe. */
int dcps_blas_load(const char *name);

typedef struct dcps_blas dcps_blas_t;

/* A cuBLAS handle whose work runs on stream (borrowed; it must outlive the
 * handle). Loads the library if needed. Returns NULL and sets *err (if not NULL)
 * to DCPS_E_NOGPU (no GPU, or no cuBLAS), DCPS_E_CUDA or DCPS_E_NOMEM; 0 on
 * success. Must be created after the CUDA runtime has a context on the device
 * (any earlier cudaMalloc gives it one), so that cuBLAS shares that context. */
dcps_blas_t *dcps_blas_new(dcps_stream_t stream, int *err);

/* Destroys the handle and sets *b to NULL; a NULL *b is fine. The library stays
 * loaded. */
void dcps_blas_destroy(dcps_blas_t **b);

typedef enum { DCPS_BLAS_N = 0, DCPS_BLAS_T = 1 } dcps_blas_op_t;

/* C ← alpha op(A) op(B) + beta C on row-major device matrices: exactly the
 * meaning of cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, ...), so a CPU call
 * carries over unchanged. C is m x n with row stride ldc, op(A) m x k, op(B)
 * k x n; lda and ldb are the row strides of A and B as stored. Runs on the
 * handle's stream and returns after the launch. Returns 0, DCPS_E_CUDA (the
 * cuBLAS status is logged) or DCPS_E_NOGPU. Single precision throughout: the
 * handle keeps cuBLAS's default math mode, which does not use TF32. */
int dcps_blas_sgemm(dcps_blas_t *b, dcps_blas_op_t ta, dcps_blas_op_t tb, int m, int n, int k,
                    float alpha, const float *d_a, int lda, const float *d_b, int ldb, float beta,
                    float *d_c, int ldc);

#ifdef __cplusplus
}
#endif
#endif
