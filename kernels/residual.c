/* dcps — the residual update on the CPU; see residual.h. */
#include "kernels/residual.h"

#include "common/error.h"
#include "config.h"

void dcps_residual_add_cpu(float *r, const float *g, size_t n)
{
    for (size_t i = 0; i < n; i++)
        r[i] += g[i];
}

#ifndef HAVE_CUDA
int dcps_residual_add_gpu(float *d_r, const float *d_g, size_t n, dcps_stream_t stream)
{
    return DCPS_E_NOGPU;
}
#endif
