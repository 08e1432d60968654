/* dcps — the GPU MLP's entry points in a build without CUDA; see mlp_gpu.h.
 *
 * model/mlp_gpu.cu is compiled only with the CUDA toolkit. Without it these
 * definitions keep callers linking: arguments are checked as there, then every
 * call answers DCPS_E_NOGPU and the caller takes the CPU path. With CUDA this
 * file compiles to nothing. */
#include "model/mlp_gpu.h"

#include "common/error.h"
#include "config.h"
#include "model/mlp.h"

#ifndef HAVE_CUDA
dcps_mlp_gpu_t *dcps_mlp_gpu_new(const int *layers, int n_layers, int max_batch,
                                 dcps_stream_t stream, int *err)
{
    int bad = dcps_mlp_param_count(layers, n_layers) == 0 || max_batch <= 0;
    if (err)
        *err = bad ? DCPS_E_INVAL : DCPS_E_NOGPU;
    return NULL;
}

void dcps_mlp_gpu_destroy(dcps_mlp_gpu_t **m)
{
    if (m)
        *m = NULL;
}

/* No model can exist without CUDA. */
size_t dcps_mlp_gpu_n_params(const dcps_mlp_gpu_t *m)
{
    return 0;
}

int dcps_mlp_gpu_forward_backward(dcps_mlp_gpu_t *m, const float *d_params, const float *d_x,
                                  const uint8_t *d_y, int batch, float *d_grad, float *loss,
                                  int *correct)
{
    return DCPS_E_NOGPU;
}

int dcps_mlp_gpu_evaluate(dcps_mlp_gpu_t *m, const float *d_params, const dcps_dataset_t *ds,
                          float *loss, float *accuracy)
{
    return DCPS_E_NOGPU;
}

int dcps_mlp_gpu_sgd(float *d_w, const float *d_g, size_t n, float lr, dcps_stream_t stream)
{
    return DCPS_E_NOGPU;
}
#endif
