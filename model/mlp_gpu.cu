/* dcps — the MLP on the GPU; see mlp_gpu.h.
 *
 * Part one holds the kernels, part two the model and its launchers. Notation as
 * in model/mlp.c: B samples in a batch; for layer l, a_l is B x L(l), row-major,
 * with a_0 = x. Forward: z_l = a_(l-1) W_l^T + b_l, a_l = relu(z_l) on hidden
 * layers, z_n the logits. Backward with d_l = dLoss/dz_l: for the mean loss,
 * d_n = (softmax(z_n) - onehot(y)) / B; dW_l = d_l^T a_(l-1); db_l = column sums
 * of d_l; d_(l-1) = (d_l W_l) masked where a_(l-1) == 0.
 *
 * The products go to cuBLAS in the row-major form of the CPU's cblas calls (see
 * blas_gpu.h), everything else to the kernels below. Every launch is on the
 * model's stream, so the steps need no synchronisation between them; only the
 * totals come back to the host, at the end. Reductions (bias gradients, the
 * batch's loss and count) use a fixed order and no atomics, so the same inputs
 * give the same bits on every run. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

extern "C" {
#include "common/carve.h"
#include "common/error.h"
#include "kernels/blas_gpu.h"
#include "kernels/gpu.h"
#include "model/mlp_gpu.h"
#include "model/mlp.h"
}

#define THREADS 256        /* block size of the elementwise kernels */
#define MAX_BLOCKS 4096    /* grid-stride loops take over beyond this many blocks */
#define SAMPLE_THREADS 128 /* block size of the one-thread-per-sample loss kernel */
#define REDUCE_THREADS 256 /* the single block of reduce_batch(); a power of two */

/* What a forward pass reports, summed over a batch or over a whole evaluation.
 * Lives on the device and, copied back at the end of a call, in pinned memory. */
struct totals {
    double loss_sum;   /* sum of per-sample cross-entropies */
    long long correct; /* samples whose argmax is their label */
    long long bad;     /* samples whose label is not below the number of classes */
};

/* ---- part one: kernels ------------------------------------------------------- */

/* z ← z + b on every row of z (total = rows x cols elements, row-major), then
 * ReLU when relu is set. relu(v) = v > 0 ? v : 0 as on the CPU, which also maps
 * NaN and -0 to +0. */
__global__ static void bias_act(float *__restrict__ z, const float *__restrict__ b, size_t total,
                                int cols, int relu)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = z[i] + b[i % (size_t)cols];
        z[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
    }
}

/* ReLU's backward step: d[i] ← 0 where the layer's output a[i] is 0 (a = relu(z)
 * is never negative, so a <= 0 is exactly where the slope is 0). */
__global__ static void relu_mask(float *__restrict__ d, const float *__restrict__ a, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        if (a[i] <= 0.0f)
            d[i] = 0.0f;
}

/* Softmax cross-entropy of one sample per thread, the CPU's arithmetic step for
 * step: the argmax with ties to the lowest class; with mx that largest logit,
 * loss = log(sum_k exp(z_k - mx)) - (z_y - mx), every exponent <= 0 and the sum
 * in double. Writes the sample's loss and hit (1 correct, 0 wrong) for
 * reduce_batch() and, when dz is not NULL, its row of dLoss/dz:
 * (softmax - onehot(y)) * scale, with the products and the difference rounded
 * separately as the CPU does. A label not below classes is never used as an
 * index: the sample gets hit -1, loss 0 and a zero row. Classes are few (10 for
 * Fashion-MNIST), so a thread per sample wastes nothing worth a warp. */
__global__ static void softmax_xent(const float *__restrict__ z, const uint8_t *__restrict__ y,
                                    int batch, int classes, float scale, float *__restrict__ dz,
                                    double *__restrict__ loss, int *__restrict__ hit)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= batch)
        return;
    const float *zi = z + (size_t)i * classes;
    float *di = dz ? dz + (size_t)i * classes : NULL;
    int label = y[i];
    if (label >= classes) {
        loss[i] = 0.0;
        hit[i] = -1;
        for (int k = 0; di && k < classes; k++)
            di[k] = 0.0f;
        return;
    }
    int arg = 0;
    for (int k = 1; k < classes; k++)
        if (zi[k] > zi[arg])
            arg = k;
    float mx = zi[arg];
    double sum = 0.0;
    for (int k = 0; k < classes; k++)
        sum += exp((double)(zi[k] - mx));
    loss[i] = log(sum) - (double)(zi[label] - mx);
    hit[i] = arg == label;
    if (di) {
        for (int k = 0; k < classes; k++)
            di[k] = __fmul_rn((float)(exp((double)(zi[k] - mx)) / sum), scale);
        di[label] = __fsub_rn(di[label], scale);
    }
}

/* gb[j] = sum over rows i of d[i][j] (d is rows x cols, row-major): one thread
 * per column adding the rows in order, the CPU's order, so the result is
 * deterministic and equal to the CPU's for the same d. Neighbouring threads read
 * neighbouring columns, so each row is read coalesced. */
__global__ static void column_sums(const float *__restrict__ d, int rows, int cols,
                                   float *__restrict__ gb)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols)
        return;
    float s = 0.0f;
    for (int i = 0; i < rows; i++)
        s += d[(size_t)i * cols + j];
    gb[j] = s;
}

/* Sums n per-sample losses and hits into *tot (added to it when accumulate is
 * set, else stored), in one block of REDUCE_THREADS threads: thread t adds
 * samples t, t + REDUCE_THREADS, ... in order, then a fixed tree combines the
 * partial sums. The order depends on n alone, never on scheduling, so the loss
 * is reproducible bit for bit; no atomics are needed with a single block, and a
 * batch is small enough for one. */
__global__ static void reduce_batch(const double *__restrict__ loss, const int *__restrict__ hit,
                                    int n, struct totals *tot, int accumulate)
{
    __shared__ double s_loss[REDUCE_THREADS];
    __shared__ long long s_hit[REDUCE_THREADS], s_bad[REDUCE_THREADS];
    int t = threadIdx.x;
    double l = 0.0;
    long long h = 0, b = 0;
    for (int i = t; i < n; i += REDUCE_THREADS) {
        l += loss[i];
        h += hit[i] > 0;
        b += hit[i] < 0;
    }
    s_loss[t] = l;
    s_hit[t] = h;
    s_bad[t] = b;
    __syncthreads();
    for (int s = REDUCE_THREADS / 2; s > 0; s /= 2) {
        if (t < s) {
            s_loss[t] += s_loss[t + s];
            s_hit[t] += s_hit[t + s];
            s_bad[t] += s_bad[t + s];
        }
        __syncthreads();
    }
    if (t == 0) {
        if (accumulate) {
            tot->loss_sum += s_loss[0];
            tot->correct += s_hit[0];
            tot->bad += s_bad[0];
        } else {
            tot->loss_sum = s_loss[0];
            tot->correct = s_hit[0];
            tot->bad = s_bad[0];
        }
    }
}

/* w ← w − lr · g with the product and the difference each rounded to nearest:
 * the explicit intrinsics keep nvcc from fusing them into one FMA, which would
 * round once and differ from the CPU loop. */
__global__ static void sgd_step(float *__restrict__ w, const float *__restrict__ g, size_t n,
                                float lr)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        w[i] = __fsub_rn(w[i], __fmul_rn(lr, g[i]));
}

/* ---- part two: the model and the launchers ------------------------------------ */

struct dcps_mlp_gpu {
    int n_layers;
    int max_batch;
    size_t n_params;
    int *size;            /* n_layers layer sizes */
    size_t *off;          /* offset of W_l in the parameter vector; off[0] unused */
    float **act;          /* device: act[l], l >= 1, max_batch x size[l]; act[0] unused */
    float *delta[2];      /* device: ping-pong dLoss/dz, max_batch x widest layer >= 1 */
    double *sample_loss;  /* device: max_batch per-sample losses */
    int *sample_hit;      /* device: max_batch per-sample hits (1, 0, -1: bad label) */
    struct totals *d_tot; /* device */
    float *chunk_x[2];    /* device: evaluate()'s input chunks, max_batch x L0 each */
    uint8_t *chunk_y[2];  /* device: their labels */
    struct totals *h_tot; /* pinned: where d_tot comes back */
    float *stage_x[2];    /* pinned: host side of chunk_x */
    uint8_t *stage_y[2];  /* pinned: host side of chunk_y */
    void *dev, *pinned;   /* the two allocations the slices above are carved from */
    cudaStream_t stream;  /* the caller's; every computation runs here */
    cudaStream_t copy;    /* evaluate()'s uploads */
    /* copied[k]: chunk buffer k has been uploaded (recorded on copy);
     * used[k]: the forward pass has read chunk buffer k (recorded on stream). */
    cudaEvent_t copied[2], used[2];
    dcps_blas_t *blas;
};

static void layout_device(dcps_mlp_gpu_t *m, dcps_carver_t *c)
{
    size_t mb = (size_t)m->max_batch, widest = 0;
    for (int l = 1; l < m->n_layers; l++) {
        size_t w = (size_t)m->size[l];
        widest = w > widest ? w : widest;
        m->act[l] = (float *)dcps_carve(c, mb * w * sizeof(float));
    }
    for (int k = 0; k < 2; k++)
        m->delta[k] = (float *)dcps_carve(c, mb * widest * sizeof(float));
    m->sample_loss = (double *)dcps_carve(c, mb * sizeof(double));
    m->sample_hit = (int *)dcps_carve(c, mb * sizeof(int));
    m->d_tot = (struct totals *)dcps_carve(c, sizeof(struct totals));
    for (int k = 0; k < 2; k++) {
        m->chunk_x[k] = (float *)dcps_carve(c, mb * (size_t)m->size[0] * sizeof(float));
        m->chunk_y[k] = (uint8_t *)dcps_carve(c, mb);
    }
}

static void layout_pinned(dcps_mlp_gpu_t *m, dcps_carver_t *c)
{
    size_t mb = (size_t)m->max_batch;
    m->h_tot = (struct totals *)dcps_carve(c, sizeof(struct totals));
    for (int k = 0; k < 2; k++) {
        m->stage_x[k] = (float *)dcps_carve(c, mb * (size_t)m->size[0] * sizeof(float));
        m->stage_y[k] = (uint8_t *)dcps_carve(c, mb);
    }
}

/* Blocks for n elements of a grid-stride kernel; n > 0. */
static unsigned blocks_for(size_t n)
{
    size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < MAX_BLOCKS ? b : MAX_BLOCKS);
}

/* a_(l-1), the input of layer l: the caller's x for the first layer. */
static const float *input(const dcps_mlp_gpu_t *m, const float *d_x, int l)
{
    return l == 1 ? d_x : m->act[l - 1];
}

extern "C" dcps_mlp_gpu_t *dcps_mlp_gpu_new(const int *layers, int n_layers, int max_batch,
                                            dcps_stream_t stream, int *err)
{
    /* Declared before the first goto: C++ forbids jumping over initialisations. */
    int rc, k = 0;
    size_t n_params = dcps_mlp_param_count(layers, n_layers), nl = (size_t)n_layers, off = 0;
    dcps_carver_t dev = {NULL, 0}, pin = {NULL, 0};
    dcps_mlp_gpu_t *m = NULL;

    if (n_params == 0 || max_batch <= 0) {
        rc = DCPS_E_INVAL;
        goto fail;
    }
    if (dcps_gpu_count() == 0) {
        rc = DCPS_E_NOGPU;
        goto fail;
    }
    /* The struct and its index arrays in one block, as in model/mlp.c. */
    m = (dcps_mlp_gpu_t *)calloc(1,
                                 sizeof *m + nl * (sizeof(float *) + sizeof(size_t) + sizeof(int)));
    if (!m) {
        rc = DCPS_E_NOMEM;
        goto fail;
    }
    m->n_layers = n_layers;
    m->max_batch = max_batch;
    m->n_params = n_params;
    m->stream = (cudaStream_t)stream;
    m->act = (float **)(m + 1);
    m->off = (size_t *)(m->act + nl);
    m->size = (int *)(m->off + nl);
    for (int l = 0; l < n_layers; l++) {
        m->size[l] = layers[l];
        if (l > 0) {
            m->off[l] = off;
            off += (size_t)layers[l - 1] * (size_t)layers[l] + (size_t)layers[l];
        }
    }

    layout_device(m, &dev);
    if ((rc = DCPS_CUDA_CHECK(cudaMalloc(&m->dev, dev.used))) != 0)
        goto fail_dev;
    dev.base = (char *)m->dev;
    dev.used = 0;
    layout_device(m, &dev);
    /* After the cudaMalloc, so that the runtime has made the device's primary
     * context current and cuBLAS (its own copy of the runtime) shares it. */
    if (!(m->blas = dcps_blas_new(stream, &rc)))
        goto fail_blas;
    layout_pinned(m, &pin);
    if ((rc = DCPS_CUDA_CHECK(cudaHostAlloc(&m->pinned, pin.used, cudaHostAllocDefault))) != 0)
        goto fail_pinned;
    pin.base = (char *)m->pinned;
    pin.used = 0;
    layout_pinned(m, &pin);
    /* Non-blocking: the copies must not serialise with the legacy default
     * stream when the caller computes on it; the events order them. */
    if ((rc = DCPS_CUDA_CHECK(cudaStreamCreateWithFlags(&m->copy, cudaStreamNonBlocking))) != 0)
        goto fail_copy;
    for (k = 0; k < 2; k++) {
        if ((rc = DCPS_CUDA_CHECK(
                 cudaEventCreateWithFlags(&m->copied[k], cudaEventDisableTiming))) != 0)
            goto fail_events;
        if ((rc = DCPS_CUDA_CHECK(cudaEventCreateWithFlags(&m->used[k], cudaEventDisableTiming))) !=
            0) {
            cudaEventDestroy(m->copied[k]);
            goto fail_events;
        }
    }
    if (err)
        *err = 0;
    return m;

fail_events:
    while (k-- > 0) {
        cudaEventDestroy(m->used[k]);
        cudaEventDestroy(m->copied[k]);
    }
    cudaStreamDestroy(m->copy);
fail_copy:
    cudaFreeHost(m->pinned);
fail_pinned:
    dcps_blas_destroy(&m->blas);
fail_blas:
    cudaFree(m->dev);
fail_dev:
    free(m);
fail:
    if (err)
        *err = rc;
    return NULL;
}

extern "C" void dcps_mlp_gpu_destroy(dcps_mlp_gpu_t **mp)
{
    if (!mp || !*mp)
        return;
    dcps_mlp_gpu_t *m = *mp;
    /* Nothing may still read or write the buffers freed below. */
    DCPS_CUDA_CHECK(cudaStreamSynchronize(m->copy));
    DCPS_CUDA_CHECK(cudaStreamSynchronize(m->stream));
    for (int k = 1; k >= 0; k--) {
        DCPS_CUDA_CHECK(cudaEventDestroy(m->used[k]));
        DCPS_CUDA_CHECK(cudaEventDestroy(m->copied[k]));
    }
    DCPS_CUDA_CHECK(cudaStreamDestroy(m->copy));
    DCPS_CUDA_CHECK(cudaFreeHost(m->pinned));
    dcps_blas_destroy(&m->blas);
    DCPS_CUDA_CHECK(cudaFree(m->dev));
    free(m);
    *mp = NULL;
}

extern "C" size_t dcps_mlp_gpu_n_params(const dcps_mlp_gpu_t *m)
{
    return m->n_params;
}

/* The forward pass over batch rows of d_x, leaving activations in m->act and
 * the batch's totals in m->d_tot (added to them when accumulate is set). With
 * dlogits non-NULL also writes (softmax - onehot) * scale there, the start of
 * the backward pass. Launches only. */
static int forward(dcps_mlp_gpu_t *m, const float *d_params, const float *d_x, const uint8_t *d_y,
                   int batch, float *dlogits, float scale, int accumulate)
{
    cudaStream_t st = m->stream;
    int rc, last = m->n_layers - 1;
    for (int l = 1; l <= last; l++) {
        int in = m->size[l - 1], out = m->size[l];
        const float *W = d_params + m->off[l], *b = W + (size_t)in * out;
        size_t total = (size_t)batch * out;
        /* z = a_(l-1) W^T: (batch x in) times the transpose of (out x in). */
        if ((rc = dcps_blas_sgemm(m->blas, DCPS_BLAS_N, DCPS_BLAS_T, batch, out, in, 1.0f,
                                  input(m, d_x, l), in, W, in, 0.0f, m->act[l], out)) != 0)
            return rc;
        bias_act<<<blocks_for(total), THREADS, 0, st>>>(m->act[l], b, total, out, l < last);
        if ((rc = DCPS_CUDA_CHECK(cudaGetLastError())) != 0)
            return rc;
    }
    unsigned sample_blocks = (unsigned)((batch + SAMPLE_THREADS - 1) / SAMPLE_THREADS);
    softmax_xent<<<sample_blocks, SAMPLE_THREADS, 0, st>>>(
        m->act[last], d_y, batch, m->size[last], scale, dlogits, m->sample_loss, m->sample_hit);
    if ((rc = DCPS_CUDA_CHECK(cudaGetLastError())) != 0)
        return rc;
    reduce_batch<<<1, REDUCE_THREADS, 0, st>>>(m->sample_loss, m->sample_hit, batch, m->d_tot,
                                               accumulate);
    return DCPS_CUDA_CHECK(cudaGetLastError());
}

/* Brings m->d_tot back into m->h_tot and waits for the stream: the one
 * synchronisation of a call. */
static int fetch_totals(dcps_mlp_gpu_t *m)
{
    int rc = DCPS_CUDA_CHECK(
        cudaMemcpyAsync(m->h_tot, m->d_tot, sizeof *m->h_tot, cudaMemcpyDeviceToHost, m->stream));
    if (rc == 0)
        rc = DCPS_CUDA_CHECK(cudaStreamSynchronize(m->stream));
    return rc;
}

/* Waits for both streams after a failed call, so that no kernel still uses
 * the caller's arrays (which it may free on seeing the error) and no upload
 * still reads a staging buffer that the next call will overwrite. The failure
 * was reported by the call that failed; whatever the waits meet is its
 * consequence, and is cleared with it. */
static void drain(dcps_mlp_gpu_t *m)
{
    cudaStreamSynchronize(m->copy);
    cudaStreamSynchronize(m->stream);
    cudaGetLastError();
}

extern "C" int dcps_mlp_gpu_forward_backward(dcps_mlp_gpu_t *m, const float *d_params,
                                             const float *d_x, const uint8_t *d_y, int batch,
                                             float *d_grad, float *loss, int *correct)
{
    if (!m || !d_params || !d_x || !d_y || !d_grad || batch <= 0 || batch > m->max_batch)
        return DCPS_E_INVAL;
    cudaStream_t st = m->stream;
    int rc, last = m->n_layers - 1;
    /* d holds dLoss/dz_l, dprev receives dLoss/dz_(l-1); they swap each layer. */
    float *d = m->delta[0], *dprev = m->delta[1];
    if ((rc = forward(m, d_params, d_x, d_y, batch, d, 1.0f / (float)batch, 0)) != 0)
        goto drain;

    for (int l = last; l >= 1; l--) {
        int in = m->size[l - 1], out = m->size[l];
        const float *W = d_params + m->off[l], *a = input(m, d_x, l);
        float *gW = d_grad + m->off[l], *gb = gW + (size_t)in * out;
        /* dW = d^T a: (out x batch) times (batch x in), d stored batch x out. */
        if ((rc = dcps_blas_sgemm(m->blas, DCPS_BLAS_T, DCPS_BLAS_N, out, in, batch, 1.0f, d, out,
                                  a, in, 0.0f, gW, in)) != 0)
            goto drain;
        unsigned col_blocks = (unsigned)((out + THREADS - 1) / THREADS);
        column_sums<<<col_blocks, THREADS, 0, st>>>(d, batch, out, gb);
        if ((rc = DCPS_CUDA_CHECK(cudaGetLastError())) != 0)
            goto drain;
        if (l == 1)
            break;
        /* dLoss/da_(l-1) = d W: (batch x out) times (out x in). */
        if ((rc = dcps_blas_sgemm(m->blas, DCPS_BLAS_N, DCPS_BLAS_N, batch, in, out, 1.0f, d, out,
                                  W, in, 0.0f, dprev, in)) != 0)
            goto drain;
        size_t total = (size_t)batch * in;
        relu_mask<<<blocks_for(total), THREADS, 0, st>>>(dprev, a, total);
        if ((rc = DCPS_CUDA_CHECK(cudaGetLastError())) != 0)
            goto drain;
        float *t = d;
        d = dprev;
        dprev = t;
    }
    if ((rc = fetch_totals(m)) != 0)
        goto drain;
    if (m->h_tot->bad)
        return DCPS_E_INVAL;
    if (loss)
        *loss = (float)(m->h_tot->loss_sum / batch);
    if (correct)
        *correct = (int)m->h_tot->correct;
    return 0;

drain:
    drain(m);
    return rc;
}

/* Chunk c uses buffer pair k = c % 2. The host fills stage[k] while the GPU
 * still computes chunk c - 1; the upload runs on the copy stream and the
 * forward pass waits for it through copied[k]. Before reusing pair k the host
 * waits for copied[k] (the upload of chunk c - 2 has left stage[k]) and the copy
 * stream waits for used[k] (the forward pass of chunk c - 2 has read
 * chunk_x[k]). Events never recorded yet count as complete. */
extern "C" int dcps_mlp_gpu_evaluate(dcps_mlp_gpu_t *m, const float *d_params,
                                     const dcps_dataset_t *ds, float *loss, float *accuracy)
{
    if (!m || !d_params || !ds || !ds->x || !ds->y || ds->n == 0 || ds->dim != (uint32_t)m->size[0])
        return DCPS_E_INVAL;
    int classes = m->size[m->n_layers - 1];
    for (uint32_t i = 0; i < ds->n; i++)
        if (ds->y[i] >= classes)
            return DCPS_E_INVAL;

    cudaStream_t st = m->stream;
    /* 64-bit positions: at + step must not wrap for a set of nearly 2^32 samples. */
    uint64_t step = (uint64_t)m->max_batch;
    int rc = DCPS_CUDA_CHECK(cudaMemsetAsync(m->d_tot, 0, sizeof *m->d_tot, st));
    for (uint64_t at = 0, c = 0; rc == 0 && at < ds->n; at += step, c++) {
        int k = (int)(c & 1);
        uint64_t left = ds->n - at;
        int batch = left < step ? (int)left : m->max_batch;
        size_t xbytes = (size_t)batch * ds->dim * sizeof(float);
        if ((rc = DCPS_CUDA_CHECK(cudaEventSynchronize(m->copied[k]))) != 0)
            break;
        memcpy(m->stage_x[k], ds->x + (size_t)at * ds->dim, xbytes);
        memcpy(m->stage_y[k], ds->y + at, (size_t)batch);
        if ((rc = DCPS_CUDA_CHECK(cudaStreamWaitEvent(m->copy, m->used[k], 0))) != 0 ||
            (rc = DCPS_CUDA_CHECK(cudaMemcpyAsync(m->chunk_x[k], m->stage_x[k], xbytes,
                                                  cudaMemcpyHostToDevice, m->copy))) != 0 ||
            (rc = DCPS_CUDA_CHECK(cudaMemcpyAsync(m->chunk_y[k], m->stage_y[k], (size_t)batch,
                                                  cudaMemcpyHostToDevice, m->copy))) != 0 ||
            (rc = DCPS_CUDA_CHECK(cudaEventRecord(m->copied[k], m->copy))) != 0 ||
            (rc = DCPS_CUDA_CHECK(cudaStreamWaitEvent(st, m->copied[k], 0))) != 0 ||
            (rc = forward(m, d_params, m->chunk_x[k], m->chunk_y[k], batch, NULL, 0.0f, 1)) != 0 ||
            (rc = DCPS_CUDA_CHECK(cudaEventRecord(m->used[k], st))) != 0)
            break;
    }
    /* Every upload is waited for by the stream, so syncing it drains the copies. */
    if (rc == 0)
        rc = fetch_totals(m);
    if (rc != 0) {
        drain(m);
        return rc;
    }
    if (loss)
        *loss = (float)(m->h_tot->loss_sum / ds->n);
    if (accuracy)
        *accuracy = (float)m->h_tot->correct / (float)ds->n;
    return 0;
}

extern "C" int dcps_mlp_gpu_sgd(float *d_w, const float *d_g, size_t n, float lr,
                                dcps_stream_t stream)
{
    if (dcps_gpu_count() == 0)
        return DCPS_E_NOGPU;
    if (n == 0)
        return 0;
    sgd_step<<<blocks_for(n), THREADS, 0, (cudaStream_t)stream>>>(d_w, d_g, n, lr);
    return DCPS_CUDA_CHECK(cudaGetLastError());
}
