/* dcps — the GPU runtime behind a plain C interface.
 *
 * The only place outside the kernels/ .cu files that talks to the CUDA runtime. Built
 * without CUDA, or run on a machine without a GPU or driver, every function
 * here fails with DCPS_E_NOGPU and dcps_gpu_count() is 0: callers choose the CPU
 * path. CUDA failures become DCPS_E_CUDA with the runtime's message in the log,
 * never an abort. Streams are opaque (dcps_stream_t; NULL is the default stream). */
#ifndef DCPS_GPU_H
#define DCPS_GPU_H

#include <stddef.h>

typedef void *dcps_stream_t;

/* Usable GPUs; 0 without CUDA, driver or device. Never fails. */
int dcps_gpu_count(void);

/* The name of device 0 into buf ("NVIDIA H100 80GB HBM3"); DCPS_E_NOGPU if none. */
int dcps_gpu_name(char *buf, size_t len);

int dcps_gpu_alloc(void **dptr, size_t bytes);
void dcps_gpu_free(void *dptr);
int dcps_gpu_to_device(void *dst, const void *src, size_t bytes, dcps_stream_t stream);
int dcps_gpu_to_host(void *dst, const void *src, size_t bytes, dcps_stream_t stream);
int dcps_gpu_sync(dcps_stream_t stream);

/* Turns a CUDA runtime status into 0 or DCPS_E_CUDA, logging the runtime's
 * message with the caller's file and line. For kernels/ only. */
int dcps_gpu_check(int status, const char *what, const char *file, int line);
#define DCPS_CUDA_CHECK(call) dcps_gpu_check((int)(call), #call, __FILE__, __LINE__)

#endif
