/* dcps bench/topk — how fast an exact top-k selection runs, against one read pass.
 *
 * For each input class (see classes[] below), N in {2^20, 2^24, 2^27} (normal data)
 * or {2^20, 2^24} (the other classes, so that the run stays within minutes) and
 * density in {0.001, 0.01, 0.1}, k = ceil(density N): the median time of one
 * selection (dcps_topk_cpu on one thread; dcps_topk_gpu too when a GPU is present),
 * elements per second, and the ratio to one read pass over the same array measured
 * in the same run (the sum of |x|: dcps_topk_read_cpu, or dcps_topk_read_gpu then a
 * stream synchronisation). CPU times are the thread's CPU time per call (see
 * thread_now); GPU times are wall-clock per call, including the synchronisation
 * both end with. Prints the machine, then one CSV row per
 * measurement.
 *
 * usage: bench/topk [largest N [class,class,...]]
 *        (default 134217728 = 2^27: every N of the grid; every class) */
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

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* A normal value, or with probability zeros / 1000 an exact +0. */
static float sparse_normal(dcps_rng_t *rng, unsigned zeros)
{
    float v = dcps_rng_normal(rng);
    return dcps_rng_below(rng, 1000) < zeros ? 0.0f : v;
}

/* Fills x[0..n) with the class's values; every class draws from a generator
 * seeded 1, so a run gives the same inputs every time. */
static void fill(const char *cls, float *x, size_t n)
{
    static const float few[] = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f};
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 1);
    for (size_t i = 0; i < n; i++) {
        float v;
        if (!strcmp(cls, "uniform"))
            v = (float)(2.0 * dcps_rng_uniform(&rng) - 1.0);
        else if (!strcmp(cls, "heavy")) { /* Cauchy: the ratio of two normals */
            float d = dcps_rng_normal(&rng);
            v = dcps_rng_normal(&rng) / (d != 0.0f ? d : 1.0f);
        } else if (!strcmp(cls, "zeros90"))
            v = sparse_normal(&rng, 900);
        else if (!strcmp(cls, "zeros99"))
            v = sparse_normal(&rng, 990);
        else if (!strcmp(cls, "few"))
            v = few[dcps_rng_below(&rng, 5)];
        else if (!strcmp(cls, "clustered"))
            v = (1.0f + 0x1p-16f * dcps_rng_normal(&rng)) *
                (dcps_rng_below(&rng, 2) ? 1.0f : -1.0f);
        else /* normal, sorted */
            v = dcps_rng_normal(&rng);
        x[i] = v;
    }
    if (!strcmp(cls, "sorted"))
        qsort(x, n, sizeof *x, cmp_float);
}

/* The input classes: name, and the largest log2 N it runs at. */
static const struct {
    const char *name;
    int max_log2_n;
} classes[] = {
    {"normal", 27},    /* N(0,1) */
    {"uniform", 24},   /* U(-1,1) */
    {"heavy", 24},     /* Cauchy: magnitudes over dozens of binades */
    {"zeros90", 24},   /* 90% exact zeros, the rest normal */
    {"zeros99", 24},   /* 99% exact zeros */
    {"few", 24},       /* drawn from {-1, -0.5, 0, 0.5, 1}: every threshold is a tie */
    {"clustered", 24}, /* |x| = 1 + 2^-16 N(0,1), random signs */
    {"sorted", 24},    /* normal, in ascending order */
};
#define N_CLASSES (sizeof classes / sizeof classes[0])

typedef struct {
    const float *x; /* host or device */
    size_t n, k;
    uint32_t *idx;
    float *val, *d_sum;
    dcps_topk_ws_t *ws;
    dcps_topk_gpu_ws_t *gws;
} run_t;

/* Seconds of CPU time this thread has used. The CPU rows are timed with it: on an
 * idle machine it is the wall time of a call, and on a shared one it leaves out the
 * time other processes held the core, which wall-clock medians of the selection
 * (tens of milliseconds, preempted) and of the read pass (a few, mostly not) would
 * count unequally. */
static double thread_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* One timed call: a selection, or the read pass when read is set. */
static double once(const run_t *r, int gpu, int read)
{
    int rc = 0;
    double (*clock)(void) = gpu ? bench_now : thread_now, t0 = clock();
    if (gpu && read) {
        rc = dcps_topk_read_gpu(r->x, r->n, r->d_sum, r->gws, NULL);
        if (!rc)
            rc = dcps_gpu_sync(NULL);
    } else if (gpu)
        rc = dcps_topk_gpu(r->x, r->n, r->k, r->idx, r->val, r->gws, NULL);
    else if (read)
        sink = dcps_topk_read_cpu(r->x, r->n);
    else
        rc = dcps_topk_cpu(r->x, r->n, r->k, r->idx, r->val, r->ws);
    double t = clock() - t0;
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

/* The largest N of the grid for class c, at most max_n (0 if none). */
static size_t class_n(size_t c, size_t max_n)
{
    size_t n = 0;
    for (size_t s = 0; s < sizeof log2_ns / sizeof log2_ns[0]; s++)
        if (log2_ns[s] <= classes[c].max_log2_n && (size_t)1 << log2_ns[s] <= max_n)
            n = (size_t)1 << log2_ns[s];
    return n;
}

/* Rows of class c for every N up to top and every density, on the CPU or the GPU. */
static void rows(run_t *r, size_t c, size_t top, int gpu)
{
    for (size_t s = 0; s < sizeof log2_ns / sizeof log2_ns[0]; s++) {
        size_t n = (size_t)1 << log2_ns[s];
        if (n > top)
            break;
        int reps = s == 0 ? MAX_REPS : s == 1 ? 11 : 5; /* the run stays within minutes */
        r->n = n;
        double read = median(r, gpu, 1, reps);
        for (size_t d = 0; d < N_DENSITIES; d++) {
            r->k = (size_t)ceil(densities[d] * (double)n);
            double t = median(r, gpu, 0, reps);
            printf("%s,%s,%zu,%g,%zu,%.3f,%.3e,%.3f,%.2f\n", gpu ? "gpu" : "cpu", classes[c].name,
                   n, densities[d], r->k, t * 1e3, (double)n / t, read * 1e3, t / read);
            fflush(stdout);
        }
    }
}

/* Whether the item of a comma-separated list that starts at p is name. */
static int named(const char *p, const char *name)
{
    size_t len = strcspn(p, ",");
    return len == strlen(name) && !strncmp(p, name, len);
}

/* The next item of a comma-separated list after the one at p, or NULL. */
static const char *next_item(const char *p)
{
    p = strchr(p, ',');
    return p ? p + 1 : NULL;
}

/* Whether class c is in the list (NULL: every class). */
static int chosen(const char *list, size_t c)
{
    for (const char *p = list; p; p = next_item(p))
        if (named(p, classes[c].name))
            return 1;
    return !list;
}

static int usage(const char *argv0)
{
    fprintf(stderr, "usage: %s [largest N, 2^20 .. 2^30 [class,class,...]]\nclasses:", argv0);
    for (size_t c = 0; c < N_CLASSES; c++)
        fprintf(stderr, " %s", classes[c].name);
    fprintf(stderr, "\n");
    return 2;
}

int main(int argc, char **argv)
{
    size_t max_n = argc > 1 ? strtoull(argv[1], NULL, 10) : (size_t)1 << 27;
    const char *list = argc > 2 ? argv[2] : NULL;
    if (max_n < (size_t)1 << 20 || max_n > DCPS_TOPK_MAX_N || argc > 3)
        return usage(argv[0]);
    for (const char *p = list; p; p = next_item(p)) {
        size_t c = 0;
        while (c < N_CLASSES && !named(p, classes[c].name))
            c++;
        if (c == N_CLASSES)
            return usage(argv[0]);
    }
    size_t max_k = (size_t)ceil(densities[N_DENSITIES - 1] * (double)max_n);
    float *x = malloc(max_n * sizeof *x), *val = malloc(max_k * sizeof *val);
    uint32_t *idx = malloc(max_k * sizeof *idx);
    int err = 0;
    run_t r = {.idx = idx, .val = val, .ws = dcps_topk_ws_new(max_n, &err)};
    if (!x || !val || !idx || !r.ws) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }

    int gpus = dcps_gpu_count();
    void *d_x = NULL, *d_idx = NULL, *d_val = NULL, *d_sum = NULL;
    if (gpus > 0 &&
        (!(r.gws = dcps_topk_gpu_ws_new(max_n, &err)) || dcps_gpu_alloc(&d_x, max_n * sizeof *x) ||
         dcps_gpu_alloc(&d_idx, max_k * sizeof *idx) ||
         dcps_gpu_alloc(&d_val, max_k * sizeof *val) || dcps_gpu_alloc(&d_sum, sizeof(float)))) {
        fprintf(stderr, "GPU setup failed\n");
        return 1;
    }
    machine(gpus);
    printf("device,class,n,density,k,median_ms,elems_per_s,read_ms,ratio_to_read\n");
    for (size_t c = 0; c < N_CLASSES; c++) {
        size_t top = class_n(c, max_n);
        if (!chosen(list, c) || top == 0)
            continue;
        fill(classes[c].name, x, top);
        r.x = x, r.idx = idx, r.val = val;
        rows(&r, c, top, 0);
        if (gpus > 0) {
            if (dcps_gpu_to_device(d_x, x, top * sizeof *x, NULL) || dcps_gpu_sync(NULL)) {
                fprintf(stderr, "GPU copy failed\n");
                return 1;
            }
            r.x = d_x, r.idx = d_idx, r.val = d_val, r.d_sum = d_sum;
            rows(&r, c, top, 1);
        }
    }
    if (gpus > 0) {
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
