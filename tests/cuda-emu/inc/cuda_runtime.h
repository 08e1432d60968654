/* dcps tests — stand-in for <cuda_runtime.h>: the C API. The device side
 * (dim3, threadIdx, __syncthreads, ...) comes from tests/cuda-emu/emu.h, which
 * the build force-includes into every emulated .cu file. */
#include <cuda_runtime_api.h>
