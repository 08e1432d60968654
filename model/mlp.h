/* dcps — the reference model: a multilayer perceptron on the CPU (CBLAS).
 *
 * Layer sizes L0..Ln; layer l (1..n) maps L(l-1) inputs to L(l) outputs as
 * z = W x + b, followed by ReLU on hidden layers and softmax cross-entropy on
 * the last. The model owns no parameters: they are one flat float vector that
 * the caller passes in (the parameter server's vector), laid out for each layer
 * in order as W_l (out x in, row-major) then b_l (out). A dcps_mlp_t holds only
 * scratch for activations and gradients, sized once for max_batch samples; it is
 * used by one thread at a time.
 *
 * The GPU path (model/mlp_gpu.h, on kernels/'s cuBLAS loader) implements the
 * same contract and is tested against this one. model/ is the built-in model's
 * home, above kernels/ (generic GPU and CPU operations) and below the trainer. */
#ifndef DCPS_MLP_H
#define DCPS_MLP_H

#include <stddef.h>
#include <stdint.h>

#include "model/idx.h"

/* sum over layers of in*out + out; 0 if the sizes are invalid. */
size_t dcps_mlp_param_count(const int *layers, int n_layers);

/* Fills params (dcps_mlp_param_count() floats) with He-normal weights, std
 * sqrt(2 / in) (He et al., 2015), drawn in layout order from a dcps_rng seeded
 * with seed, and zero biases. The same seed gives the same vector. */
void dcps_mlp_init_params(const int *layers, int n_layers, uint64_t seed, float *params);

typedef struct dcps_mlp dcps_mlp_t;

/* A model for the given layer sizes (copied; n_layers >= 2, every size > 0) and
 * batches of up to max_batch samples. Returns NULL and sets *err (if not NULL)
 * to DCPS_E_INVAL or DCPS_E_NOMEM on failure, 0 on success. */
dcps_mlp_t *dcps_mlp_new(const int *layers, int n_layers, int max_batch, int *err);

/* Frees the model and sets *m to NULL; a NULL *m is fine. */
void dcps_mlp_destroy(dcps_mlp_t **m);

/* Number of parameters of m's layout. */
size_t dcps_mlp_n_params(const dcps_mlp_t *m);

/* One forward and backward pass over batch samples x (batch x L0, row-major)
 * with labels y. Overwrites grad (n_params floats) with the gradient of the mean
 * cross-entropy over the batch and stores that mean in *loss and the number of
 * samples whose argmax equals the label in *correct (either may be NULL).
 * Returns DCPS_E_INVAL, leaving grad untouched, if batch is not in
 * 1..max_batch or a label is not below the output size. */
int dcps_mlp_forward_backward(dcps_mlp_t *m, const float *params, const float *x, const uint8_t *y,
                              int batch, float *grad, float *loss, int *correct);

/* Forward passes over all of ds in chunks of max_batch: the mean loss and the
 * fraction classified correctly. DCPS_E_INVAL if ds is empty, its dim differs
 * from L0 or a label is not below the output size; outputs then unchanged. */
int dcps_mlp_evaluate(dcps_mlp_t *m, const float *params, const dcps_dataset_t *ds, float *loss,
                      float *accuracy);

#endif
