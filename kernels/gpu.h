/* dcps — the GPU runtime behind a plain C interface.
 *
 * The only place outside the kernels/ .cu files that talks to the CUDA runtime. Built
 * without CUDA, or run on a machine without a GPU or with a driver too old for the
 * runtime, every function here fails with DCPS_E_NOGPU and dcps_gpu_count() is 0
 * (dcps_gpu_why() says why): callers choose the CPU path. Out of device memory is
 * DCPS_E_NOMEM, so that callers can fall back as for a missing GPU. Other CUDA
 * failures become DCPS_E_CUDA with the runtime's message in the log, never an
 * abort. A failure that reached the caller as a code is cleared from the
 * runtime's last error, so no later launch check reports it again. Streams are
 * opaque (dcps_stream_t; NULL is the default stream). */
#ifndef DCPS_GPU_H
#define DCPS_GPU_H

#include <stddef.h>

typedef void *dcps_stream_t;

/* Usable GPUs; 0 without CUDA, driver or device. Never fails. The runtime is
 * asked once per process; when the answer is none, the reason is logged once
 * (a warning when a driver is present but too old for the runtime). */
int dcps_gpu_count(void);

/* Why dcps_gpu_count() is 0, as a phrase for an error message: the runtime's own
 * words and the driver and runtime versions ("CUDA driver version is
 * insufficient for CUDA runtime version: the driver supports CUDA 12.4, this
 * build links the CUDA 13.0 runtime ..."); "" when a GPU is usable. Static
 * storage, valid for the life of the process. */
const char *dcps_gpu_why(void);

/* The name of device 0 into buf ("NVIDIA H100 80GB HBM3"); DCPS_E_NOGPU if none. */
int dcps_gpu_name(char *buf, size_t len);

/* Device memory: *dptr is NULL on failure (DCPS_E_NOGPU, DCPS_E_NOMEM or
 * DCPS_E_CUDA). free() waits for the device's work first and takes NULL. */
int dcps_gpu_alloc(void **dptr, size_t bytes);
void dcps_gpu_free(void *dptr);
/* Copies in stream order; to_host into pageable memory returns when done. */
int dcps_gpu_to_device(void *dst, const void *src, size_t bytes, dcps_stream_t stream);
int dcps_gpu_to_host(void *dst, const void *src, size_t bytes, dcps_stream_t stream);
int dcps_gpu_sync(dcps_stream_t stream);

/* Streams for work that must overlap: created non-blocking, so they never wait
 * for the legacy default stream (NULL) or it for them; order them with events.
 * DCPS_E_NOGPU (and *s NULL) without a GPU. destroy() waits for the stream's
 * work, destroys it and sets *s to NULL; a NULL *s is fine. */
int dcps_gpu_stream_new(dcps_stream_t *s);
void dcps_gpu_stream_destroy(dcps_stream_t *s);

/* Page-locked host memory, which copies on a stream can read and write while
 * the host goes on (from pageable memory they are staged and partly
 * synchronous). DCPS_E_NOGPU (and *p NULL) without a GPU. free() takes NULL. */
int dcps_gpu_host_alloc(void **p, size_t bytes);
void dcps_gpu_host_free(void *p);

/* Sets bytes bytes at device pointer d to the byte value v, in stream order;
 * returns after the launch. */
int dcps_gpu_memset(void *d, int v, size_t bytes, dcps_stream_t stream);

/* Events order work across streams and tell the host when copies are done.
 * An event that was never recorded counts as complete: wait() and sync() on
 * it return at once. Created without timing, the cheap kind. new() gives
 * DCPS_E_NOGPU (and *ev NULL) without a GPU; destroy() sets *ev to NULL and
 * takes a NULL *ev. */
typedef struct dcps_event *dcps_event_t;
int dcps_gpu_event_new(dcps_event_t *ev);
void dcps_gpu_event_destroy(dcps_event_t *ev);
/* Marks the point in stream's work reached so far; ev completes when it has run. */
int dcps_gpu_event_record(dcps_event_t ev, dcps_stream_t stream);
/* Makes stream's later work wait for ev (last recorded); the host does not wait. */
int dcps_gpu_event_wait(dcps_stream_t stream, dcps_event_t ev);
/* Blocks the host until ev (last recorded) has completed. */
int dcps_gpu_event_sync(dcps_event_t ev);

/* Turns a CUDA runtime status into 0, DCPS_E_NOMEM (out of memory), DCPS_E_NOGPU
 * (no usable driver or device) or DCPS_E_CUDA, logging the runtime's message
 * with the caller's file and line, and clears the runtime's last error. For
 * kernels/ only. */
int dcps_gpu_check(int status, const char *what, const char *file, int line);
#define DCPS_CUDA_CHECK(call) dcps_gpu_check((int)(call), #call, __FILE__, __LINE__)

#endif
