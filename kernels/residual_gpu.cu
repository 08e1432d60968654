/* dcps — the residual update on the GPU; see residual.h.
 *
 * Part one is the kernel, part two its launcher. */
extern "C" {
#include "common/error.h"
#include "kernels/residual.h"
}

#include <cuda_runtime.h>

/* r ← r + g with a grid-stride loop; one plain float add per element (no FMA can
 * be formed), so the result equals the CPU's bit for bit. */
__global__ static void residual_add(float *__restrict__ r, const float *__restrict__ g, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        r[i] = __fadd_rn(r[i], g[i]);
}

extern "C" int dcps_residual_add_gpu(float *d_r, const float *d_g, size_t n, dcps_stream_t stream)
{
    if (dcps_gpu_count() == 0)
        return DCPS_E_NOGPU;
    if (n == 0)
        return 0;
    const int threads = 256;
    size_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535)
        blocks = 65535;
    residual_add<<<(unsigned)blocks, threads, 0, (cudaStream_t)stream>>>(d_r, d_g, n);
    return DCPS_CUDA_CHECK(cudaGetLastError());
}
