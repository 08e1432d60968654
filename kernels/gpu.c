/* dcps — the GPU runtime behind a plain C interface; see gpu.h. */
#include "kernels/gpu.h"

#include <stdio.h>

#include "common/error.h"
#include "common/log.h"
#include "config.h"

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#include <pthread.h>

/* Statuses that say "no usable GPU on this machine" (no driver, a driver too
 * old for the runtime we link, no device) rather than "a GPU failed". */
static int is_no_gpu(cudaError_t e)
{
    return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
           e == cudaErrorStubLibrary || e == cudaErrorSystemDriverMismatch;
}

/* Every failure goes through here, so here is where it is cleared: the runtime
 * also keeps a failed call's status as its last error, and the next launch,
 * checked with cudaGetLastError(), would report it as its own. (Sticky errors,
 * which leave the context unusable, stay whatever is done.) */
int dcps_gpu_check(int status, const char *what, const char *file, int line)
{
    cudaError_t e = (cudaError_t)status;
    if (e == cudaSuccess)
        return 0;
    cudaGetLastError();
    if (e == cudaErrorMemoryAllocation) {
        DCPS_WARN("%s:%d: %s: out of GPU memory", file, line, what);
        return DCPS_E_NOMEM;
    }
    if (is_no_gpu(e)) {
        DCPS_DEBUG("%s:%d: %s: %s", file, line, what, cudaGetErrorString(e));
        return DCPS_E_NOGPU;
    }
    DCPS_ERR("%s:%d: %s: %s", file, line, what, cudaGetErrorString(e));
    return DCPS_E_CUDA;
}

/* The answer of the one cudaGetDeviceCount() of the process, and when it is 0
 * the reason, logged once. */
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int gpus;
static char why[320];

static void probe(void)
{
    int n = 0, runtime = 0, driver = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n > 0) {
        gpus = n;
        return;
    }
    cudaGetLastError();
    cudaRuntimeGetVersion(&runtime);
    if (cudaDriverGetVersion(&driver) != cudaSuccess)
        driver = 0;
    cudaGetLastError();
    if (e == cudaSuccess) {
        snprintf(why, sizeof why, "the driver sees no CUDA device");
    } else if (e == cudaErrorInsufficientDriver && driver > 0) {
        /* The case that looks like "no GPU" on H100 nodes with R535-R570. */
        snprintf(why, sizeof why,
                 "%s: the driver supports CUDA %d.%d, this build links the CUDA %d.%d runtime "
                 "(CUDA 13 needs an R580 or newer driver; or build --with-cuda=DIR with a CUDA 12 "
                 "toolkit)",
                 cudaGetErrorString(e), driver / 1000, driver % 1000 / 10, runtime / 1000,
                 runtime % 1000 / 10);
    } else {
        snprintf(why, sizeof why, "%s (CUDA runtime %d.%d, %s)", cudaGetErrorString(e),
                 runtime / 1000, runtime % 1000 / 10,
                 driver > 0 ? "a driver is installed" : "no NVIDIA driver found");
    }
    /* A driver too old for this build is an operator's problem worth a warning
     * wherever the library runs. Otherwise the caller that falls back to the
     * CPU says so, in its words (dcps-worker: docs/troubleshooting.md's line),
     * and one that needs a GPU fails with dcps_gpu_why(): said here too, the
     * reason would be logged twice. */
    if (e == cudaErrorInsufficientDriver && driver > 0)
        DCPS_WARN("no usable GPU: %s", why);
}

int dcps_gpu_count(void)
{
    pthread_once(&probe_once, probe);
    return gpus;
}

const char *dcps_gpu_why(void)
{
    pthread_once(&probe_once, probe);
    return why;
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
    *dptr = NULL;
    if (dcps_gpu_count() == 0)
        return DCPS_E_NOGPU;
    return DCPS_CUDA_CHECK(cudaMalloc(dptr, bytes));
}

void dcps_gpu_free(void *dptr)
{
    if (dptr)
        DCPS_CUDA_CHECK(cudaFree(dptr));
}

int dcps_gpu_to_device(void *dst, const void *src, size_t bytes, dcps_stream_t stream)
{
    if (dcps_gpu_count() == 0)
        return DCPS_E_NOGPU;
    return DCPS_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)stream));
}

int dcps_gpu_to_host(void *dst, const void *src, size_t bytes, dcps_stream_t stream)
{
    if (dcps_gpu_count() == 0)
        return DCPS_E_NOGPU;
    return DCPS_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)stream));
}

int dcps_gpu_sync(dcps_stream_t stream)
{
    if (dcps_gpu_count() == 0)
        return DCPS_E_NOGPU;
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
    if (dcps_gpu_count() == 0)
        return DCPS_E_NOGPU;
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
    if (dcps_gpu_count() == 0)
        return DCPS_E_NOGPU;
    return DCPS_CUDA_CHECK(cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)stream));
}

int dcps_gpu_event_wait(dcps_stream_t stream, dcps_event_t ev)
{
    if (dcps_gpu_count() == 0)
        return DCPS_E_NOGPU;
    return DCPS_CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)ev, 0));
}

int dcps_gpu_event_sync(dcps_event_t ev)
{
    if (dcps_gpu_count() == 0)
        return DCPS_E_NOGPU;
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
const char *dcps_gpu_why(void)
{
    return "this dcps was built without CUDA (--without-cuda, or no toolkit found by configure)";
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
    if (dcps_gpu_count() == 0)
        return DCPS_E_NOGPU;
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
