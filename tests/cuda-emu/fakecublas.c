/* dcps tests — a stand-in libcublas.so.13 for the SIMT emulator.
 *
 * A column-major reference SGEMM behind the five entry points that
 * kernels/blas_gpu.c binds through its real dlopen() path. It checks the
 * argument rules of the cuBLAS documentation (operations, sizes, leading
 * dimensions against the column-major shapes) and answers
 * CUBLAS_STATUS_INVALID_VALUE with a line on stderr where cuBLAS would, so a
 * caller that mixes up row- and column-major is caught, not just slow. The
 * product is queued on the handle's stream through emu_host_enqueue(), which
 * the test program (tests/cuda-emu/emu_rt.cpp) exports; the scalars are read at
 * the call (host pointer mode), the matrices when the stream runs. */
#include <cublas_v2.h>
#include <stdio.h>
#include <stdlib.h>

void emu_host_enqueue(void *stream, void (*fn)(void *), void *ctx);

struct cublasContext {
    cudaStream_t stream;
};

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
    *handle = calloc(1, sizeof **handle);
    return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    free(handle);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS:
        return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "CUBLAS_STATUS_EXECUTION_FAILED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

/* One queued product: C = alpha op(A) op(B) + beta C, column-major. */
typedef struct {
    int ta, tb, m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const float *A, *B;
    float *C;
} gemm_t;

static void gemm(void *p)
{
    gemm_t *g = p;
    for (int j = 0; j < g->n; j++)
        for (int i = 0; i < g->m; i++) {
            float s = 0.0f;
            for (int q = 0; q < g->k; q++) {
                float a = g->ta ? g->A[q + (size_t)i * g->lda] : g->A[i + (size_t)q * g->lda];
                float b = g->tb ? g->B[j + (size_t)q * g->ldb] : g->B[q + (size_t)j * g->ldb];
                s += a * b;
            }
            float *c = &g->C[i + (size_t)j * g->ldc];
            /* beta == 0: C is not read, so it may hold NaN (the cuBLAS rule). */
            *c = g->beta == 0.0f ? g->alpha * s : g->alpha * s + g->beta * *c;
        }
    free(g);
}

static int at_least(int a, int b)
{
    return a > b ? a : b;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float *alpha,
                              const float *A, int lda, const float *B, int ldb, const float *beta,
                              float *C, int ldc)
{
    int ta = transa == CUBLAS_OP_T, tb = transb == CUBLAS_OP_T;
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if ((transa != CUBLAS_OP_N && !ta) || (transb != CUBLAS_OP_N && !tb) || m < 0 || n < 0 ||
        k < 0 || lda < at_least(1, ta ? k : m) || ldb < at_least(1, tb ? n : k) ||
        ldc < at_least(1, m)) {
        fprintf(stderr,
                "fake cuBLAS: invalid sgemm(ta=%d tb=%d m=%d n=%d k=%d lda=%d ldb=%d ldc=%d)\n", ta,
                tb, m, n, k, lda, ldb, ldc);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    gemm_t *g = malloc(sizeof *g);
    if (!g)
        return CUBLAS_STATUS_ALLOC_FAILED;
    *g = (gemm_t){ta, tb, m, n, k, lda, ldb, ldc, *alpha, *beta, A, B, C};
    emu_host_enqueue(handle->stream, gemm, g);
    return CUBLAS_STATUS_SUCCESS;
}
