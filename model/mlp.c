/* dcps — the CPU MLP; see mlp.h.
 *
 * Notation: B samples in a batch; for layer l, a_l is B x L(l), row-major, with
 * a_0 = x. Forward: z_l = a_(l-1) W_l^T + b_l, a_l = relu(z_l) (hidden) or z_l
 * (logits). Backward with d_l = dLoss/dz_l: for the mean loss,
 * d_n = (softmax(z_n) - onehot(y)) / B; dW_l = d_l^T a_(l-1); db_l = column sums
 * of d_l; d_(l-1) = (d_l W_l) masked where a_(l-1) == 0 (ReLU's derivative). */
#include "model/mlp.h"

#include "common/error.h"
#include "common/rng.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MLP_ALIGN 64

struct dcps_mlp {
    int n_layers;
    int max_batch;
    size_t n_params;
    int *size;       /* n_layers layer sizes */
    size_t *off;     /* offset of W_l in the parameter vector; off[0] unused */
    float **act;     /* act[l], l >= 1: max_batch x size[l]; act[0] unused */
    float *delta[2]; /* ping-pong dLoss/dz, max_batch x widest layer each */
};

static size_t round_up(size_t x)
{
    return (x + MLP_ALIGN - 1) / MLP_ALIGN * MLP_ALIGN;
}

/* n floats rounded up so that the next slice starts on a cache line. */
static size_t slice(size_t n)
{
    return round_up(n * sizeof(float)) / sizeof(float);
}

size_t dcps_mlp_param_count(const int *layers, int n_layers)
{
    if (!layers || n_layers < 2)
        return 0;
    size_t n = 0;
    for (int l = 1; l < n_layers; l++) {
        if (layers[l - 1] <= 0 || layers[l] <= 0)
            return 0;
        n += (size_t)layers[l - 1] * (size_t)layers[l] + (size_t)layers[l];
    }
    return n;
}

void dcps_mlp_init_params(const int *layers, int n_layers, uint64_t seed, float *params)
{
    dcps_rng_t rng;
    dcps_rng_seed(&rng, seed);
    float *p = params;
    for (int l = 1; l < n_layers; l++) {
        size_t in = (size_t)layers[l - 1], out = (size_t)layers[l];
        float std = sqrtf(2.0f / (float)in);
        for (size_t i = 0; i < in * out; i++)
            *p++ = std * dcps_rng_normal(&rng);
        memset(p, 0, out * sizeof *p);
        p += out;
    }
}

dcps_mlp_t *dcps_mlp_new(const int *layers, int n_layers, int max_batch, int *err)
{
    size_t n_params = dcps_mlp_param_count(layers, n_layers);
    if (n_params == 0 || max_batch <= 0) {
        if (err)
            *err = DCPS_E_INVAL;
        return NULL;
    }
    size_t widest = 0, act_floats = 0;
    for (int l = 0; l < n_layers; l++) {
        size_t w = (size_t)layers[l];
        widest = w > widest ? w : widest;
        if (l > 0)
            act_floats += slice((size_t)max_batch * w);
    }
    size_t delta_floats = slice((size_t)max_batch * widest);

    /* One block: the struct and its index arrays, then the float scratch
     * starting on a cache-line boundary. */
    size_t nl = (size_t)n_layers;
    size_t head = round_up(sizeof(struct dcps_mlp) + nl * (sizeof(int) + sizeof(size_t) +
                                                           sizeof(float *)));
    size_t bytes = head + (act_floats + 2 * delta_floats) * sizeof(float);
    void *block = aligned_alloc(MLP_ALIGN, round_up(bytes));
    if (!block) {
        if (err)
            *err = DCPS_E_NOMEM;
        return NULL;
    }
    dcps_mlp_t *m = block;
    m->n_layers = n_layers;
    m->max_batch = max_batch;
    m->n_params = n_params;
    m->act = (float **)(m + 1);
    m->off = (size_t *)(m->act + nl);
    m->size = (int *)(m->off + nl);
    float *f = (float *)((char *)block + head);
    m->act[0] = NULL;
    m->off[0] = 0;
    size_t off = 0;
    for (int l = 0; l < n_layers; l++) {
        m->size[l] = layers[l];
        if (l == 0)
            continue;
        m->off[l] = off;
        off += (size_t)layers[l - 1] * (size_t)layers[l] + (size_t)layers[l];
        m->act[l] = f;
        f += slice((size_t)max_batch * (size_t)layers[l]);
    }
    m->delta[0] = f;
    m->delta[1] = f + delta_floats;
    if (err)
        *err = 0;
    return m;
}

void dcps_mlp_destroy(dcps_mlp_t **m)
{
    if (!m)
        return;
    free(*m);
    *m = NULL;
}

size_t dcps_mlp_n_params(const dcps_mlp_t *m)
{
    return m->n_params;
}

/* a_(l-1), the input of layer l: the caller's x for the first layer. */
static const float *input(const dcps_mlp_t *m, const float *x, int l)
{
    return l == 1 ? x : m->act[l - 1];
}

static int check_labels(const dcps_mlp_t *m, const uint8_t *y, size_t n)
{
    int classes = m->size[m->n_layers - 1];
    for (size_t i = 0; i < n; i++)
        if (y[i] >= classes)
            return DCPS_E_INVAL;
    return 0;
}

/* Forward pass over batch rows of x, leaving activations in m->act. Adds each
 * sample's cross-entropy to *loss_sum (double: sums over a whole test set) and
 * counts correct argmaxes. With dlogits non-NULL also writes
 * (softmax - onehot) * scale there, the start of the backward pass. */
static void forward(dcps_mlp_t *m, const float *params, const float *x, const uint8_t *y, int batch,
                    double *loss_sum, int *correct, float *dlogits, float scale)
{
    int last = m->n_layers - 1;
    for (int l = 1; l <= last; l++) {
        int in = m->size[l - 1], out = m->size[l];
        const float *W = params + m->off[l], *b = W + (size_t)in * out;
        float *a = m->act[l];
        /* Rows start as b, so one GEMM with beta = 1 adds a_(l-1) W^T onto them. */
        for (int i = 0; i < batch; i++)
            memcpy(a + (size_t)i * out, b, (size_t)out * sizeof *a);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, out, in, 1.0f,
                    input(m, x, l), in, W, in, 1.0f, a, out);
        if (l < last)
            for (size_t i = 0; i < (size_t)batch * out; i++)
                a[i] = a[i] > 0.0f ? a[i] : 0.0f;
    }

    /* Stable softmax: with mx the row's largest logit, log-sum-exp is
     * mx + log(sum exp(z - mx)) and every exponent is <= 0. */
    int classes = m->size[last];
    for (int i = 0; i < batch; i++) {
        /* Ties go to the lowest class; the GPU path must match. */
        const float *z = m->act[last] + (size_t)i * classes;
        int arg = 0;
        for (int k = 1; k < classes; k++)
            if (z[k] > z[arg])
                arg = k;
        float mx = z[arg];
        double sum = 0.0;
        for (int k = 0; k < classes; k++)
            sum += exp((double)(z[k] - mx));
        *loss_sum += log(sum) - (double)(z[y[i]] - mx);
        *correct += arg == y[i];
        if (dlogits) {
            float *d = dlogits + (size_t)i * classes;
            for (int k = 0; k < classes; k++)
                d[k] = (float)(exp((double)(z[k] - mx)) / sum) * scale;
            d[y[i]] -= scale;
        }
    }
}

int dcps_mlp_forward_backward(dcps_mlp_t *m, const float *params, const float *x, const uint8_t *y,
                              int batch, float *grad, float *loss, int *correct)
{
    if (!m || !params || !x || !y || !grad || batch <= 0 || batch > m->max_batch)
        return DCPS_E_INVAL;
    if (check_labels(m, y, (size_t)batch))
        return DCPS_E_INVAL;

    int last = m->n_layers - 1;
    double loss_sum = 0.0;
    int hits = 0;
    /* d holds dLoss/dz_l, dprev receives dLoss/dz_(l-1); they swap each layer. */
    float *d = m->delta[0], *dprev = m->delta[1];
    forward(m, params, x, y, batch, &loss_sum, &hits, d, 1.0f / (float)batch);

    for (int l = last; l >= 1; l--) {
        int in = m->size[l - 1], out = m->size[l];
        const float *W = params + m->off[l];
        float *gW = grad + m->off[l], *gb = gW + (size_t)in * out;
        const float *a = input(m, x, l);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, batch, 1.0f, d, out, a, in,
                    0.0f, gW, in);
        memset(gb, 0, (size_t)out * sizeof *gb);
        for (int i = 0; i < batch; i++)
            cblas_saxpy(out, 1.0f, d + (size_t)i * out, 1, gb, 1);
        if (l == 1)
            break;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, in, out, 1.0f, d, out, W, in,
                    0.0f, dprev, in);
        /* a_(l-1) = relu(z_(l-1)), so a == 0 exactly where ReLU's slope is 0. */
        for (size_t i = 0; i < (size_t)batch * in; i++)
            if (a[i] <= 0.0f)
                dprev[i] = 0.0f;
        float *t = d;
        d = dprev;
        dprev = t;
    }
    if (loss)
        *loss = (float)(loss_sum / batch);
    if (correct)
        *correct = hits;
    return 0;
}

int dcps_mlp_evaluate(dcps_mlp_t *m, const float *params, const dcps_dataset_t *ds, float *loss,
                      float *accuracy)
{
    if (!m || !params || !ds || !ds->x || !ds->y || ds->n == 0 || ds->dim != (uint32_t)m->size[0])
        return DCPS_E_INVAL;
    if (check_labels(m, ds->y, ds->n))
        return DCPS_E_INVAL;
    double loss_sum = 0.0;
    int hits = 0;
    /* 64-bit positions: i + max_batch must not wrap for a set of nearly 2^32 samples. */
    for (uint64_t i = 0; i < ds->n; i += (uint64_t)m->max_batch) {
        uint64_t left = ds->n - i;
        int batch = left < (uint64_t)m->max_batch ? (int)left : m->max_batch;
        forward(m, params, ds->x + (size_t)i * ds->dim, ds->y + i, batch, &loss_sum, &hits, NULL,
                0.0f);
    }
    if (loss)
        *loss = (float)(loss_sum / ds->n);
    if (accuracy)
        *accuracy = (float)hits / (float)ds->n;
    return 0;
}
