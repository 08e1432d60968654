/* dcps tests — stand-in for <cublas_v2.h>: the types, constants and the five
 * entry points that kernels/blas_gpu.c binds with dlsym(), with cuBLAS's names,
 * values and signatures (the _v2 symbols), so that __typeof__ there checks the
 * same signatures as against the real header. Their definitions are in
 * tests/cuda-emu/fakecublas.c, built as a libcublas.so.13 of its own. */
#ifndef DCPS_EMU_CUBLAS_V2_H
#define DCPS_EMU_CUBLAS_V2_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cublasContext *cublasHandle_t;
typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_EXECUTION_FAILED = 13
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle);
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle);
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float *alpha,
                              const float *A, int lda, const float *B, int ldb, const float *beta,
                              float *C, int ldc);
const char *cublasGetStatusString(cublasStatus_t status);

#ifdef __cplusplus
}
#endif
#endif
