/* dcps — the reference MLP on the GPU: CUDA kernels and cuBLAS.
 *
 * The contract of model/mlp.h, on device memory: the same layer sizes, the
 * same flat parameter layout (per layer W_l, out x in row-major, then b_l),
 * ReLU on hidden layers, the mean softmax cross-entropy over the batch, and the
 * same count of samples whose argmax (ties to the lowest class) equals the
 * label. Inputs are floats as the CPU path gets them (pixel / 255, see
 * model/idx.h), labels are bytes. tests/test_mlp_gpu.c holds the two paths
 * together with stated tolerances: matrix products sum in a different order.
 *
 * A dcps_mlp_gpu_t owns device scratch for activations and gradients, a cuBLAS
 * handle, the pinned buffer through which loss and accuracy come back, and the
 * staging buffers, second stream and events of evaluate(); all are allocated at
 * new() for batches of up to max_batch samples. It owns no parameters. Every
 * call runs on the stream given to new() and says where it synchronises; one
 * thread at a time.
 *
 * Errors: DCPS_E_INVAL for bad arguments or labels, DCPS_E_NOGPU when there is
 * no usable GPU or cuBLAS (and always when built without CUDA), DCPS_E_CUDA
 * (logged) when the runtime or cuBLAS fails, DCPS_E_NOMEM (also when the GPU's
 * memory is taken, so that device = auto can fall back to the CPU). A call that
 * fails after queuing work waits for that work before it returns, so the caller
 * may free its arrays on any error. */
#ifndef DCPS_MLP_GPU_H
#define DCPS_MLP_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/gpu.h"
#include "model/idx.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dcps_mlp_gpu dcps_mlp_gpu_t;

/* A model for the given layer sizes (copied; the rules of dcps_mlp_new()) and
 * batches of up to max_batch samples, running on stream (borrowed: it must
 * outlive the model; NULL is the default stream). Returns NULL and sets *err (if
 * not NULL) to DCPS_E_INVAL, DCPS_E_NOGPU, DCPS_E_CUDA or DCPS_E_NOMEM; 0 on
 * success. Arguments are checked before the GPU is looked for. */
dcps_mlp_gpu_t *dcps_mlp_gpu_new(const int *layers, int n_layers, int max_batch,
                                 dcps_stream_t stream, int *err);

/* Waits for the model's work, frees it and sets *m to NULL; a NULL *m is fine. */
void dcps_mlp_gpu_destroy(dcps_mlp_gpu_t **m);

/* Number of parameters of m's layout (dcps_mlp_param_count()). */
size_t dcps_mlp_gpu_n_params(const dcps_mlp_gpu_t *m);

/* One forward and backward pass on device memory: d_params (n_params floats),
 * d_x (batch x L0 floats, row-major) and d_y (batch labels) must be ready in
 * stream order on the model's stream (upload them on it, or make it wait for
 * the event of the stream that did). Overwrites d_grad (n_params floats) with
 * the gradient of the mean cross-entropy and stores that mean in *loss and the
 * number of correct argmaxes in *correct (either may be NULL).
 *
 * Synchronises the model's stream once, at its end, to bring loss and count back
 * through a pinned buffer; d_grad is complete when it returns. DCPS_E_INVAL,
 * with nothing launched, if batch is not in 1..max_batch or a pointer is NULL.
 * Labels live on the device, so they are checked there: a label not below the
 * output size makes the call return DCPS_E_INVAL after that synchronisation,
 * with *loss and *correct unchanged but d_grad overwritten with unspecified
 * values (the CPU path leaves its grad untouched). */
int dcps_mlp_gpu_forward_backward(dcps_mlp_gpu_t *m, const float *d_params, const float *d_x,
                                  const uint8_t *d_y, int batch, float *d_grad, float *loss,
                                  int *correct);

/* Forward passes over the host data set ds in chunks of max_batch: the mean
 * loss and the fraction classified correctly, as dcps_mlp_evaluate(). Chunks go
 * through two pinned staging buffers and a second stream, so that the copy of
 * one chunk overlaps the computation of the one before. Synchronises the
 * model's stream at its end. DCPS_E_INVAL, with nothing launched and the outputs
 * unchanged, if ds is empty, its dim differs from L0 or a label is not below the
 * output size. */
int dcps_mlp_gpu_evaluate(dcps_mlp_gpu_t *m, const float *d_params, const dcps_dataset_t *ds,
                          float *loss, float *accuracy);

/* The local SGD step d_w[i] ← d_w[i] − lr · d_g[i] for i < n on stream: one
 * rounded product and one rounded difference per element (no fused
 * multiply-add), bit for bit the plain C loop `w[i] -= lr * g[i]` compiled
 * without contraction. Returns after the launch; n = 0 is a no-op. Returns 0,
 * DCPS_E_CUDA or DCPS_E_NOGPU (without a usable GPU, whatever n). */
int dcps_mlp_gpu_sgd(float *d_w, const float *d_g, size_t n, float lr, dcps_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
