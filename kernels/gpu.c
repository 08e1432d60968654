/* dcps — the GPU runtime behind a plain C interface; see gpu.h. */
#include "kernels/gpu.h"

#include <stdio.h>

#include "common/error.h"
#include "common/log.h"
#include "config.h"

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>

int dcps_gpu_check(int status, const char *what, const char *file, int line)
{
    if (status == cudaSuccess)
        return 0;
    DCPS_ERR("%s:%d: %s: %s", file, line, what, cudaGetErrorString((cudaError_t)status));
    return DCPS_E_CUDA;
}

int dcps_gpu_count(void)
{
    int n = 0;
    /* No driver or no device is an answer, not an error: the CPU path runs. */
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

int dcps_gpu_name(char *buf, size_t len)
{
    struct cudaDeviceProp p;
    if (dcps_gpu_count() == 0)
        return DCPS_E_NOGPU;
    int rc = DCPS_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    if (rc == 0)
        snprintf(buf, len, "%s", p.name);
    return rc;
}

int dcps_gpu_alloc(void **dptr, size_t bytes)
{
    return DCPS_CUDA_CHECK(cudaMalloc(dptr, bytes));
}

void dcps_gpu_free(void *dptr)
{
    if (dptr)
        DCPS_CUDA_CHECK(cudaFree(dptr));
}

int dcps_gpu_to_device(void *dst, const void *src, size_t bytes, dcps_stream_t stream)
{
    return DCPS_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)stream));
}

int dcps_gpu_to_host(void *dst, const void *src, size_t bytes, dcps_stream_t stream)
{
    return DCPS_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)stream));
}

int dcps_gpu_sync(dcps_stream_t stream)
{
    return DCPS_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream));
}

#else /* built without CUDA */

int dcps_gpu_check(int status, const char *what, const char *file, int line)
{
    return status == 0 ? 0 : DCPS_E_CUDA;
}
int dcps_gpu_count(void)
{
    return 0;
}
int dcps_gpu_name(char *buf, size_t len)
{
    return DCPS_E_NOGPU;
}
int dcps_gpu_alloc(void **dptr, size_t bytes)
{
    *dptr = NULL;
    return DCPS_E_NOGPU;
}
void dcps_gpu_free(void *dptr)
{
}
int dcps_gpu_to_device(void *dst, const void *src, size_t bytes, dcps_stream_t stream)
{
    return DCPS_E_NOGPU;
}
int dcps_gpu_to_host(void *dst, const void *src, size_t bytes, dcps_stream_t stream)
{
    return DCPS_E_NOGPU;
}
int dcps_gpu_sync(dcps_stream_t stream)
{
    return DCPS_E_NOGPU;
}
#endif
