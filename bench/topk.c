/* dcps bench/topk — how fast an exact top-k selection runs, against one read pass.
 *
 * For N in {2^20, 2^24, 2^27} and density in {0.001, 0.01, 0.1}, k = ceil(density N),
 * on normal random data: the median time of one selection (dcps_topk_cpu on one
 * thread; dcps_topk_gpu too when a GPU is present), elements per second, and the
 * ratio to one read pass over the same array measured in the same run (the sum of
 * |x|: dcps_topk_read_cpu, or dcps_topk_read_gpu then a stream synchronisation).
 * GPU times are wall-clock per call, including the synchronisation both end with.
 * Prints the machine, then one CSV row per measurement.
 *
 * usage: bench/topk [largest N]      (default 134217728 = 2^27: every N of the grid) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "common/rng.h"
#include "kernels/gpu.h"
#include "kernels/topk.h"

static const int log2_ns[] = {20, 24, 27};
static const double densities[] = {0.001, 0.01, 0.1};
#define N_DENSITIES (sizeof densities / sizeof densities[0])
#define MAX_REPS 31

/* Where the read pass's sum goes, so that the pass is not optimised away. */
static volatile float sink;

typedef struct {
    const float *x; /* host or device */
    size_t n, k;
    uint32_t *idx;
    float *val, *d_sum;
    dcps_topk_ws_t *ws;
    dcps_topk_gpu_ws_t *gws;
} run_t;

/* One timed call: a selection, or the read pass when read is set. */
static double once(const run_t *r, int gpu, int read)
{
    int rc = 0;
    double t0 = bench_now();
    if (gpu && read) {
        rc = dcps_topk_read_gpu(r->x, r->n, r->d_sum, NULL);
        if (!rc)
            rc = dcps_gpu_sync(NULL);
    } else if (gpu)
        rc = dcps_topk_gpu(r->x, r->n, r->k, r->idx, r->val, r->gws, NULL);
    else if (read)
        sink = dcps_topk_read_cpu(r->x, r->n);
    else
        rc = dcps_topk_cpu(r->x, r->n, r->k, r->idx, r->val, r->ws);
    double t = bench_now() - t0;
    if (rc) {
        fprintf(stderr, "bench/topk: call failed (%d)\n", rc);
        exit(1);
    }
    return t;
}

/* The median of reps timed calls after one untimed one (page faults, caches). */
static double median(const run_t *r, int gpu, int read, int reps)
{
    double t[MAX_REPS];
    once(r, gpu, read);
    for (int i = 0; i < reps; i++)
        t[i] = once(r, gpu, read);
    return bench_median(t, reps);
}

static void machine(int gpus)
{
    char model[256], gpu[256] = "none";
    bench_cpu_model(model, sizeof model);
    if (gpus > 0)
        dcps_gpu_name(gpu, sizeof gpu);
    printf("# machine: %s, %ld cores (CPU rows use one), GPU: %s\n", model,
           sysconf(_SC_NPROCESSORS_ONLN), gpu);
}

/* Rows for every N up to max_n and every density, on the CPU or the GPU. */
static void rows(run_t *r, size_t max_n, int gpu)
{
    for (size_t s = 0; s < sizeof log2_ns / sizeof log2_ns[0]; s++) {
        size_t n = (size_t)1 << log2_ns[s];
        if (n > max_n)
            break;
        int reps = s == 0 ? MAX_REPS : s == 1 ? 11 : 5; /* the run stays within minutes */
        r->n = n;
        double read = median(r, gpu, 1, reps);
        for (size_t d = 0; d < N_DENSITIES; d++) {
            r->k = (size_t)ceil(densities[d] * (double)n);
            double t = median(r, gpu, 0, reps);
            printf("%s,%zu,%g,%zu,%.3f,%.3e,%.3f,%.2f\n", gpu ? "gpu" : "cpu", n, densities[d],
                   r->k, t * 1e3, (double)n / t, read * 1e3, t / read);
            fflush(stdout);
        }
    }
}

int main(int argc, char **argv)
{
    size_t max_n = argc > 1 ? strtoull(argv[1], NULL, 10) : (size_t)1 << 27;
    if (max_n < (size_t)1 << 20 || max_n > DCPS_TOPK_MAX_N) {
        fprintf(stderr, "usage: %s [largest N, 2^20 .. 2^30]\n", argv[0]);
        return 2;
    }
    size_t max_k = (size_t)ceil(densities[N_DENSITIES - 1] * (double)max_n);
    float *x = malloc(max_n * sizeof *x), *val = malloc(max_k * sizeof *val);
    uint32_t *idx = malloc(max_k * sizeof *idx);
    int err = 0;
    run_t r = {.x = x, .idx = idx, .val = val, .ws = dcps_topk_ws_new(max_n, &err)};
    if (!x || !val || !idx || !r.ws) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 1);
    for (size_t i = 0; i < max_n; i++)
        x[i] = dcps_rng_normal(&rng);

    int gpus = dcps_gpu_count();
    machine(gpus);
    printf("device,n,density,k,median_ms,elems_per_s,read_ms,ratio_to_read\n");
    rows(&r, max_n, 0);
    if (gpus > 0) {
        void *d_x = NULL, *d_idx = NULL, *d_val = NULL, *d_sum = NULL;
        r.gws = dcps_topk_gpu_ws_new(max_n, &err);
        if (!r.gws || dcps_gpu_alloc(&d_x, max_n * sizeof *x) ||
            dcps_gpu_alloc(&d_idx, max_k * sizeof *idx) ||
            dcps_gpu_alloc(&d_val, max_k * sizeof *val) || dcps_gpu_alloc(&d_sum, sizeof(float)) ||
            dcps_gpu_to_device(d_x, x, max_n * sizeof *x, NULL) || dcps_gpu_sync(NULL)) {
            fprintf(stderr, "GPU setup failed\n");
            return 1;
        }
        r.x = d_x, r.idx = d_idx, r.val = d_val, r.d_sum = d_sum;
        rows(&r, max_n, 1);
        dcps_topk_gpu_ws_destroy(&r.gws);
        dcps_gpu_free(d_x);
        dcps_gpu_free(d_idx);
        dcps_gpu_free(d_val);
        dcps_gpu_free(d_sum);
    }
    dcps_topk_ws_destroy(&r.ws);
    free(x);
    free(idx);
    free(val);
    return 0;
}
