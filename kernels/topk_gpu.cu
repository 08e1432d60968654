/* dcps — top-k selection, scatter and gather on the GPU; see topk.h.
 *
 * The radix selection of topk.c with every step on the device, in one stream and
 * without a host round trip until the final status:
 *   hist_top    pass 1: histogram of the top TOP_BITS key bits (r += g fused in);
 *   pick        one block: the bin holding the k-th largest key, NaN/Inf check;
 *   collect     pass 2, per chunk of CHUNK entries: the count of keys above the
 *               bin, and the indices of the bin's entries appended to the
 *               candidate list (in no particular order);
 *   cand_hist   twice with pick: the candidates narrowed to the threshold key T
 *               (TOP_BITS, then LOW_BITS more bits);
 *   cand_count  per chunk, the candidates above T and equal to T;
 *   DeviceScan  (CUB) the exclusive sum of the per-chunk counts;
 *   emit        pass 3, per chunk: each selected entry written at its rank.
 * An entry is selected when its key is above T, or equal to T and fewer than
 * need keys equal to T come before it; its output position is the count of
 * selected entries before it. Every count is an integer, so the result does not
 * depend on the order atomics land in, and equals the CPU's.
 *
 * Part one is the kernels, part two the launchers. */
extern "C" {
#include "kernels/topk.h"
}

#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>
#include <cuda_runtime.h>

#include <stdlib.h>

#include "common/error.h"

enum {
    TOP_BITS = 11,
    BINS = 1 << TOP_BITS,
    TOP_SHIFT = 31 - TOP_BITS, /* key >> TOP_SHIFT: the top bin */
    LOW_BITS = TOP_SHIFT - TOP_BITS,
    THREADS = 256,
    CHUNK = THREADS * 16, /* entries per block in collect and emit */
    BLOCKS_PER_SM = 2048 / THREADS,
    READ_SUMS = 4 /* independent sums per thread in read_pass */
};
#define NONFINITE_BIN (0x7f800000u >> TOP_SHIFT)
#define FULL 0xffffffffu

/* The state of one selection, in device memory, zeroed before pass 1. */
typedef struct {
    unsigned int hist[BINS]; /* the histogram of the current level */
    unsigned int prefix;     /* the bin (keys with key >> shift == prefix); at the end T */
    unsigned int need;       /* how many of the bin's entries to select; at the end,
                                how many keys equal to T */
    unsigned int ncand;      /* candidates collected */
    unsigned int nonfinite;  /* pass 1 saw a NaN or Inf: every later kernel returns */
} ctl_t;

typedef cub::BlockScan<unsigned int, THREADS> block_scan_t;

__device__ static inline unsigned int key(float v)
{
    return __float_as_uint(v) & 0x7fffffffu;
}

/* --- kernels ------------------------------------------------------------------- */

/* Pass 1, grid-stride: c->hist += the histogram of key >> TOP_SHIFT over x, or over
 * r ← r + g (one rounded float add, as on the CPU) when g is given; then x is r. */
__global__ static void hist_top(const float *x, float *r, const float *g, size_t n, ctl_t *c)
{
    __shared__ unsigned int h[BINS];
    for (int b = threadIdx.x; b < BINS; b += THREADS)
        h[b] = 0;
    __syncthreads();
    for (size_t i = blockIdx.x * (size_t)THREADS + threadIdx.x; i < n;
         i += (size_t)gridDim.x * THREADS) {
        float v = x[i];
        if (g) {
            v = __fadd_rn(v, g[i]);
            r[i] = v;
        }
        atomicAdd(&h[key(v) >> TOP_SHIFT], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < BINS; b += THREADS)
        if (h[b])
            atomicAdd(&c->hist[b], h[b]);
}

/* One block of THREADS: the bin of c->hist[0 .. 1 << W) holding the need-th largest
 * key, where need is k on the first level (k > 0) and c->need after it (k == 0);
 * appends the bin to c->prefix, sets c->need to the rank inside it and clears the
 * histogram for the next level. The first level also checks for NaN and Inf. */
template <int W> __global__ static void pick(ctl_t *c, unsigned int k)
{
    constexpr int PER = (1 << W) / THREADS;
    __shared__ typename block_scan_t::TempStorage tmp;
    if (k == 0 && c->nonfinite)
        return;
    const unsigned int need = k ? k : c->need;
    /* Thread t owns PER bins from the top down: the top ones go to thread 0. */
    unsigned int h[PER], sum = 0;
    int bad = 0;
    for (int j = 0; j < PER; j++) {
        int b = (1 << W) - 1 - (threadIdx.x * PER + j);
        h[j] = c->hist[b];
        c->hist[b] = 0;
        sum += h[j];
        bad |= k && b >= (int)NONFINITE_BIN && h[j];
    }
    /* The barrier also orders every read of c->need before the write below. */
    if (__syncthreads_or(bad)) {
        if (threadIdx.x == 0)
            c->nonfinite = 1;
        return;
    }
    unsigned int above;
    block_scan_t(tmp).ExclusiveSum(sum, above);
    for (int j = 0; j < PER; j++) {
        unsigned int b = (1u << W) - 1 - (threadIdx.x * PER + j);
        if (above < need && need <= above + h[j]) {
            c->prefix = k ? b : c->prefix << W | b;
            c->need = need - above;
        }
        above += h[j];
    }
}

/* Pass 2, block b on entries [b * CHUNK, (b + 1) * CHUNK): cnt[b] = (keys above the
 * top bin c->prefix) << 32; the indices of the entries in that bin appended to cand,
 * one atomic per warp. */
__global__ static void collect(const float *x, size_t n, ctl_t *c, unsigned int *cand,
                               unsigned long long *cnt)
{
    if (c->nonfinite)
        return;
    const unsigned int bin = c->prefix, lane = threadIdx.x % 32;
    const size_t start = (size_t)blockIdx.x * CHUNK, end = min(n, start + CHUNK);
    unsigned int above = 0;
    for (size_t base = start; base < end; base += THREADS) {
        size_t i = base + threadIdx.x;
        unsigned int kk = i < end ? key(x[i]) >> TOP_SHIFT : 0;
        int in_bin = i < end && kk == bin;
        above += __syncthreads_count(i < end && kk > bin);
        unsigned int m = __ballot_sync(FULL, in_bin);
        if (m) {
            int leader = __ffs(m) - 1;
            unsigned int pos = 0;
            if ((int)lane == leader)
                pos = atomicAdd(&c->ncand, __popc(m));
            pos = __shfl_sync(FULL, pos, leader);
            if (in_bin)
                cand[pos + __popc(m & ((1u << lane) - 1))] = (unsigned int)i;
        }
    }
    if (threadIdx.x == 0)
        cnt[blockIdx.x] = (unsigned long long)above << 32;
}

/* Grid-stride over the candidates: c->hist += the histogram of the W key bits below
 * shift + W, of the candidates whose key >> (shift + W) is c->prefix. */
template <int W>
__global__ static void cand_hist(const float *x, const unsigned int *cand, ctl_t *c, int shift)
{
    __shared__ unsigned int h[1 << W];
    if (c->nonfinite)
        return;
    for (int b = threadIdx.x; b < (1 << W); b += THREADS)
        h[b] = 0;
    __syncthreads();
    const unsigned int prefix = c->prefix, ncand = c->ncand;
    for (size_t j = blockIdx.x * (size_t)THREADS + threadIdx.x; j < ncand;
         j += (size_t)gridDim.x * THREADS) {
        unsigned int kk = key(x[cand[j]]);
        if (kk >> shift >> W == prefix)
            atomicAdd(&h[(kk >> shift) & ((1u << W) - 1)], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < (1 << W); b += THREADS)
        if (h[b])
            atomicAdd(&c->hist[b], h[b]);
}

/* Grid-stride over the candidates, a warp at a time: cnt[chunk] += (candidates above
 * T) << 32 + (candidates equal to T), one atomic per chunk met by the warp (the
 * candidates of one warp of collect are neighbours, so usually one). */
__global__ static void cand_count(const float *x, const unsigned int *cand, const ctl_t *c,
                                  unsigned long long *cnt)
{
    if (c->nonfinite)
        return;
    const unsigned int t = c->prefix, ncand = c->ncand, lane = threadIdx.x % 32;
    for (size_t base = blockIdx.x * (size_t)THREADS + threadIdx.x - lane; base < ncand;
         base += (size_t)gridDim.x * THREADS) {
        size_t j = base + lane;
        unsigned int chunk = FULL, kk = 0;
        if (j < ncand) {
            unsigned int i = cand[j];
            kk = key(x[i]);
            chunk = i / CHUNK;
        }
        unsigned int group = __match_any_sync(FULL, chunk);
        unsigned int gt = __ballot_sync(FULL, j < ncand && kk > t) & group;
        unsigned int eq = __ballot_sync(FULL, j < ncand && kk == t) & group;
        if (j < ncand && (int)lane == __ffs(group) - 1 && (gt | eq))
            atomicAdd(&cnt[chunk], (unsigned long long)__popc(gt) << 32 | __popc(eq));
    }
}

/* Pass 3, block b on entries [b * CHUNK, (b + 1) * CHUNK): off[b] holds the keys above
 * T (high half) and equal to T (low half) before the chunk; each selected entry goes
 * to idx/val at its rank, and is cleared in clear when given. Positions at or past
 * k are never written, even if the counts were inconsistent. */
__global__ static void emit(const float *x, float *clear, size_t n, size_t k, const ctl_t *c,
                            const unsigned long long *off, uint32_t *idx, float *val)
{
    __shared__ typename block_scan_t::TempStorage tmp;
    if (c->nonfinite)
        return;
    const unsigned int t = c->prefix, need = c->need;
    unsigned int gt = (unsigned int)(off[blockIdx.x] >> 32), eq = (unsigned int)off[blockIdx.x];
    const size_t start = (size_t)blockIdx.x * CHUNK, end = min(n, start + CHUNK);
    for (size_t base = start; base < end; base += THREADS) {
        size_t i = base + threadIdx.x;
        float v = 0.0f;
        unsigned int kk = 0, flags = 0;
        if (i < end) {
            v = x[i];
            kk = key(v);
            flags = (unsigned int)(kk > t) << 16 | (kk == t);
        }
        /* Both counts of a round fit 16 bits: one scan counts both. */
        unsigned int before, total;
        block_scan_t(tmp).ExclusiveSum(flags, before, total);
        __syncthreads(); /* tmp is used again next round */
        unsigned int my_gt = gt + (before >> 16), my_eq = eq + (before & 0xffffu);
        if (i < end && (kk > t || (kk == t && my_eq < need))) {
            size_t pos = (size_t)my_gt + min(my_eq, need);
            if (pos < k) {
                idx[pos] = (uint32_t)i;
                val[pos] = v;
                if (clear)
                    clear[i] = 0.0f;
            }
        }
        gt += total >> 16;
        eq += total & 0xffffu;
    }
}

/* w[idx[j]] += alpha * val[j], the product rounded first (no FMA), as on the CPU. */
__global__ static void scatter_add(float *w, const uint32_t *idx, const float *val, size_t k,
                                   float alpha)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < k;
         j += (size_t)gridDim.x * blockDim.x)
        w[idx[j]] = __fadd_rn(w[idx[j]], __fmul_rn(alpha, val[j]));
}

__global__ static void gather(const float *w, const uint32_t *idx, size_t k, float *out)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < k;
         j += (size_t)gridDim.x * blockDim.x)
        out[j] = w[idx[j]];
}

/* *sum += the sum of |x| over x[0..n), as bench/topk's measure of one read of the
 * input. Grid-stride on a grid that fills the device: each thread keeps READ_SUMS
 * independent sums, so that READ_SUMS loads per thread are in flight (one chain of
 * additions would wait for each load in turn); the block adds its threads' sums
 * (warp shuffles, then one partial per warp in shared memory) and thread 0 adds
 * the block's sum with the one atomic of the block. A warp-level atomic on the
 * one float would serialise the pass on that address instead of on memory. */
__global__ static void read_pass(const float *x, size_t n, float *sum)
{
    __shared__ float warp_sum[THREADS / 32];
    const size_t stride = (size_t)gridDim.x * THREADS;
    float s[READ_SUMS] = {0.0f};
    size_t i = blockIdx.x * (size_t)THREADS + threadIdx.x;
    for (; i + (READ_SUMS - 1) * stride < n; i += READ_SUMS * stride)
        for (int u = 0; u < READ_SUMS; u++)
            s[u] += fabsf(x[i + u * stride]);
    for (; i < n; i += stride)
        s[0] += fabsf(x[i]);
    float t = 0.0f;
    for (int u = 0; u < READ_SUMS; u++)
        t += s[u];
    for (int d = 16; d > 0; d /= 2)
        t += __shfl_down_sync(FULL, t, d);
    if (threadIdx.x % 32 == 0)
        warp_sum[threadIdx.x / 32] = t;
    __syncthreads();
    if (threadIdx.x < 32) {
        t = threadIdx.x < THREADS / 32 ? warp_sum[threadIdx.x] : 0.0f;
        for (int d = 16; d > 0; d /= 2)
            t += __shfl_down_sync(FULL, t, d);
        if (threadIdx.x == 0)
            atomicAdd(sum, t);
    }
}

/* --- launchers ----------------------------------------------------------------- */

struct dcps_topk_gpu_ws {
    size_t max_n;
    unsigned int grid;              /* blocks that fill the device, for grid-stride kernels */
    ctl_t *ctl;                     /* the selection's state */
    unsigned long long *cnt, *off;  /* per chunk: the counts, their exclusive sum */
    void *scan_tmp;                 /* CUB's scratch for the sum */
    size_t scan_bytes;
    unsigned int *cand;             /* max_n candidate indices */
    void *mem;                      /* the one device allocation holding all of the above */
};

static size_t chunks(size_t n)
{
    return (n + CHUNK - 1) / CHUNK;
}

static size_t align(size_t bytes)
{
    return (bytes + 255) & ~(size_t)255;
}

/* Blocks for a grid-stride kernel over count entries: enough to fill the device or
 * the count, whichever is less; at least 1. */
static unsigned int grid_for(size_t count, unsigned int fill)
{
    size_t b = (count + THREADS - 1) / THREADS;
    return b == 0 ? 1 : b < fill ? (unsigned int)b : fill;
}

/* Sizes ws for max_n values and makes its one device allocation. */
static int setup(dcps_topk_gpu_ws_t *ws, size_t max_n)
{
    int dev = 0, sms = 0, rc;
    size_t nc = chunks(max_n);
    if ((rc = DCPS_CUDA_CHECK(cudaGetDevice(&dev))) ||
        (rc = DCPS_CUDA_CHECK(
             cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev))) ||
        (rc = DCPS_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(NULL, ws->scan_bytes,
                                                            (unsigned long long *)NULL,
                                                            (unsigned long long *)NULL, (int)nc))))
        return rc;
    ws->max_n = max_n;
    ws->grid = (unsigned int)sms * BLOCKS_PER_SM;
    size_t at_cnt = align(sizeof(ctl_t)), at_off = at_cnt + align(nc * sizeof *ws->cnt);
    size_t at_tmp = at_off + align(nc * sizeof *ws->off);
    size_t at_cand = at_tmp + align(ws->scan_bytes);
    /* Out of memory is DCPS_E_NOMEM, and cleared (dcps_gpu_check). */
    if ((rc = DCPS_CUDA_CHECK(cudaMalloc(&ws->mem, at_cand + max_n * sizeof *ws->cand))))
        return rc;
    char *base = (char *)ws->mem;
    ws->ctl = (ctl_t *)base;
    ws->cnt = (unsigned long long *)(base + at_cnt);
    ws->off = (unsigned long long *)(base + at_off);
    ws->scan_tmp = base + at_tmp;
    ws->cand = (unsigned int *)(base + at_cand);
    return 0;
}

extern "C" dcps_topk_gpu_ws_t *dcps_topk_gpu_ws_new(size_t max_n, int *err)
{
    if (max_n == 0 || max_n > DCPS_TOPK_MAX_N) {
        *err = DCPS_E_INVAL;
        return NULL;
    }
    if (dcps_gpu_count() == 0) {
        *err = DCPS_E_NOGPU;
        return NULL;
    }
    dcps_topk_gpu_ws_t *ws = (dcps_topk_gpu_ws_t *)calloc(1, sizeof *ws);
    if (!ws) {
        *err = DCPS_E_NOMEM;
        return NULL;
    }
    if ((*err = setup(ws, max_n))) {
        free(ws);
        return NULL;
    }
    return ws;
}

extern "C" void dcps_topk_gpu_ws_destroy(dcps_topk_gpu_ws_t **ws)
{
    if (!ws || !*ws)
        return;
    dcps_gpu_free((*ws)->mem);
    free(*ws);
    *ws = NULL;
}

/* The selection after the argument checks: over x, or over r ← r + g when r is given
 * (then x is r, and g may be NULL); selected entries of r are cleared. On any
 * error the stream is drained first: the kernels queued before the failure use
 * the caller's arrays, which the caller may free as soon as it sees the error. */
static int topk(const float *x, float *r, const float *g, size_t n, size_t k, uint32_t *idx,
                float *val, dcps_topk_gpu_ws_t *ws, cudaStream_t st)
{
    ctl_t *c = ws->ctl;
    unsigned int grid = grid_for(n, ws->grid), nc = (unsigned int)chunks(n), nonfinite = 0;
    int rc = DCPS_CUDA_CHECK(cudaMemsetAsync(c, 0, sizeof *c, st));
    if (rc)
        goto drain;
    hist_top<<<grid, THREADS, 0, st>>>(x, r, g, n, c);
    pick<TOP_BITS><<<1, THREADS, 0, st>>>(c, (unsigned int)k);
    collect<<<nc, THREADS, 0, st>>>(x, n, c, ws->cand, ws->cnt);
    cand_hist<TOP_BITS><<<grid, THREADS, 0, st>>>(x, ws->cand, c, LOW_BITS);
    pick<TOP_BITS><<<1, THREADS, 0, st>>>(c, 0);
    cand_hist<LOW_BITS><<<grid, THREADS, 0, st>>>(x, ws->cand, c, 0);
    pick<LOW_BITS><<<1, THREADS, 0, st>>>(c, 0);
    cand_count<<<grid, THREADS, 0, st>>>(x, ws->cand, c, ws->cnt);
    /* A failed launch leaves the counts inconsistent, never the writes out of
     * bounds: candidates are at most n, and emit writes below k only. */
    if ((rc = DCPS_CUDA_CHECK(cudaGetLastError())) ||
        (rc = DCPS_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(ws->scan_tmp, ws->scan_bytes,
                                                            ws->cnt, ws->off, (int)nc, st))))
        goto drain;
    emit<<<nc, THREADS, 0, st>>>(x, r, n, k, c, ws->off, idx, val);
    if ((rc = DCPS_CUDA_CHECK(cudaGetLastError())) ||
        (rc = DCPS_CUDA_CHECK(cudaMemcpyAsync(&nonfinite, &c->nonfinite, sizeof nonfinite,
                                              cudaMemcpyDeviceToHost, st))) ||
        (rc = DCPS_CUDA_CHECK(cudaStreamSynchronize(st))))
        goto drain;
    return nonfinite ? DCPS_E_NONFINITE : 0;

drain:
    /* The failure was logged and cleared; whatever the wait meets was caused by it. */
    cudaStreamSynchronize(st);
    cudaGetLastError();
    return rc;
}

static int bad_args(size_t n, size_t k, const void *idx, const void *val,
                    const dcps_topk_gpu_ws_t *ws)
{
    return !ws || !idx || !val || n == 0 || n > ws->max_n || k == 0 || k > n;
}

extern "C" int dcps_topk_gpu(const float *d_x, size_t n, size_t k, uint32_t *d_idx,
                             float *d_val, dcps_topk_gpu_ws_t *ws, dcps_stream_t stream)
{
    if (!d_x || bad_args(n, k, d_idx, d_val, ws))
        return DCPS_E_INVAL;
    return topk(d_x, NULL, NULL, n, k, d_idx, d_val, ws, (cudaStream_t)stream);
}

extern "C" int dcps_topk_ef_gpu(float *d_r, const float *d_g, size_t n, size_t k,
                                uint32_t *d_idx, float *d_val, dcps_topk_gpu_ws_t *ws,
                                dcps_stream_t stream)
{
    if (!d_r || bad_args(n, k, d_idx, d_val, ws))
        return DCPS_E_INVAL;
    return topk(d_r, d_r, d_g, n, k, d_idx, d_val, ws, (cudaStream_t)stream);
}

/* Blocks for the simple grid-stride kernels below. */
static unsigned int simple_grid(size_t count)
{
    return grid_for(count, 65535);
}

extern "C" int dcps_scatter_add_gpu(float *d_w, const uint32_t *d_idx, const float *d_val,
                                    size_t k, float alpha, dcps_stream_t stream)
{
    if (dcps_gpu_count() == 0)
        return DCPS_E_NOGPU;
    if (k == 0)
        return 0;
    scatter_add<<<simple_grid(k), THREADS, 0, (cudaStream_t)stream>>>(d_w, d_idx, d_val, k,
                                                                      alpha);
    return DCPS_CUDA_CHECK(cudaGetLastError());
}

extern "C" int dcps_gather_gpu(const float *d_w, const uint32_t *d_idx, size_t k, float *d_out,
                               dcps_stream_t stream)
{
    if (dcps_gpu_count() == 0)
        return DCPS_E_NOGPU;
    if (k == 0)
        return 0;
    gather<<<simple_grid(k), THREADS, 0, (cudaStream_t)stream>>>(d_w, d_idx, k, d_out);
    return DCPS_CUDA_CHECK(cudaGetLastError());
}

extern "C" int dcps_topk_read_gpu(const float *d_x, size_t n, float *d_sum,
                                  const dcps_topk_gpu_ws_t *ws, dcps_stream_t stream)
{
    if (!d_x || !d_sum || !ws)
        return DCPS_E_INVAL;
    if (n == 0)
        return 0;
    read_pass<<<grid_for(n, ws->grid), THREADS, 0, (cudaStream_t)stream>>>(d_x, n, d_sum);
    return DCPS_CUDA_CHECK(cudaGetLastError());
}
