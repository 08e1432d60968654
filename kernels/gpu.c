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

int dcps_gpu_stream_new(dcps_stream_t *s)
{
    cudaStream_t st = NULL;
    *s = NULL;
    if (dcps_gpu_count() == 0)
        return DCPS_E_NOGPU;
    int rc = DCPS_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    if (rc == 0)
        *s = st;
    return rc;
}

void dcps_gpu_stream_destroy(dcps_stream_t *s)
{
    if (!s || !*s)
        return;
    /* cudaStreamDestroy() would return at once and release the stream later;
     * callers free the buffers its work uses right after, so wait here. */
    DCPS_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)*s));
    DCPS_CUDA_CHECK(cudaStreamDestroy((cudaStream_t)*s));
    *s = NULL;
}

int dcps_gpu_host_alloc(void **p, size_t bytes)
{
    *p = NULL;
    if (dcps_gpu_count() == 0)
        return DCPS_E_NOGPU;
    return DCPS_CUDA_CHECK(cudaHostAlloc(p, bytes, cudaHostAllocDefault));
}

void dcps_gpu_host_free(void *p)
{
    if (p)
        DCPS_CUDA_CHECK(cudaFreeHost(p));
}

int dcps_gpu_memset(void *d, int v, size_t bytes, dcps_stream_t stream)
{
    return DCPS_CUDA_CHECK(cudaMemsetAsync(d, v, bytes, (cudaStream_t)stream));
}

int dcps_gpu_event_new(dcps_event_t *ev)
{
    cudaEvent_t e = NULL;
    *ev = NULL;
    if (dcps_gpu_count() == 0)
        return DCPS_E_NOGPU;
    int rc = DCPS_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    if (rc == 0)
        *ev = (dcps_event_t)e;
    return rc;
}

void dcps_gpu_event_destroy(dcps_event_t *ev)
{
    if (!ev || !*ev)
        return;
    DCPS_CUDA_CHECK(cudaEventDestroy((cudaEvent_t)*ev));
    *ev = NULL;
}

int dcps_gpu_event_record(dcps_event_t ev, dcps_stream_t stream)
{
    return DCPS_CUDA_CHECK(cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)stream));
}

int dcps_gpu_event_wait(dcps_stream_t stream, dcps_event_t ev)
{
    return DCPS_CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)ev, 0));
}

int dcps_gpu_event_sync(dcps_event_t ev)
{
    return DCPS_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)ev));
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
int dcps_gpu_stream_new(dcps_stream_t *s)
{
    *s = NULL;
    return DCPS_E_NOGPU;
}
void dcps_gpu_stream_destroy(dcps_stream_t *s)
{
    if (s)
        *s = NULL;
}
int dcps_gpu_host_alloc(void **p, size_t bytes)
{
    *p = NULL;
    return DCPS_E_NOGPU;
}
void dcps_gpu_host_free(void *p)
{
}
int dcps_gpu_memset(void *d, int v, size_t bytes, dcps_stream_t stream)
{
    return DCPS_E_NOGPU;
}
int dcps_gpu_event_new(dcps_event_t *ev)
{
    *ev = NULL;
    return DCPS_E_NOGPU;
}
void dcps_gpu_event_destroy(dcps_event_t *ev)
{
    if (ev)
        *ev = NULL;
}
int dcps_gpu_event_record(dcps_event_t ev, dcps_stream_t stream)
{
    return DCPS_E_NOGPU;
}
int dcps_gpu_event_wait(dcps_stream_t stream, dcps_event_t ev)
{
    return DCPS_E_NOGPU;
}
int dcps_gpu_event_sync(dcps_event_t ev)
{
    return DCPS_E_NOGPU;
}
#endif
