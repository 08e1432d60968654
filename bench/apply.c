/* dcps bench/apply — how fast a shard applies a push, by update rule.
 *
 * For each rule (sgd, momentum, DC-ASGD constant and adaptive), dense and sparse
 * (density 1%, random and clustered indices): the median time of one apply over
 * a shard of N parameters, elements per second, and the ratio to a baseline of
 * the same run: memcpy of the shard (dense) or of the pushed values (sparse).
 * Prints the machine, then one CSV row per measurement.
 *
 * Then the same pushes through a shard (dcps_shard_push, async mode), which
 * refuses an update that would make a parameter NaN or Inf: dense updates and
 * sparse momentum out of place into its update buffer with the check fused,
 * then a pointer swap and the state recomputed; sparse SGD and DC-ASGD checked
 * entry by entry, then applied in place. Those rows say kind "dense_checked" or
 * "sparse_checked"; their baseline is the in-place rule on the same shard's
 * arrays (what the shard did before the check), timed alternately with it, so
 * ratio_to_baseline is what keeping the parameters finite costs.
 *
 * usage: bench/apply [N] [repeats]      (defaults 4194304 and 21) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "common/config.h"
#include "common/rng.h"
#include "server/optimizer.h"
#include "server/shard.h"

enum { SGD, MOMENTUM, DC_CONST, DC_ADAPTIVE };
static const char *const rule_names[] = {"sgd", "momentum", "dcasgd_c", "dcasgd_a"};

typedef struct {
    size_t n, k;
    float *w, *u, *bak, *ms, *g, *v, *copy;
    uint32_t *idx;
} data_t;

static void apply(data_t *d, int rule, int sparse)
{
    const dcps_dcasgd_t p = {1e-6f, 0.04f, rule == DC_ADAPTIVE, 0.95f, 1e-7f};
    switch (rule * 2 + sparse) {
    case SGD * 2: dcps_sgd_dense(d->w, d->g, d->n, 1e-6f); break;
    case SGD * 2 + 1: dcps_sgd_sparse(d->w, 0, d->idx, d->v, d->k, 1e-6f); break;
    case MOMENTUM * 2: dcps_momentum_dense(d->w, d->u, d->g, d->n, 1e-6f, 0.9f); break;
    case MOMENTUM * 2 + 1: dcps_momentum_sparse(d->w, d->u, d->n, 0, d->idx, d->v, d->k, 1e-6f, 0.9f); break;
    case DC_CONST * 2:
    case DC_ADAPTIVE * 2: dcps_dcasgd_dense(d->w, d->bak, d->ms, d->g, d->n, &p); break;
    default: dcps_dcasgd_sparse(d->w, d->bak, d->ms, 0, d->idx, d->v, d->k, &p); break;
    }
}

static double median_time(data_t *d, int rule, int sparse, int reps, int baseline)
{
    double t[101];
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        if (baseline)
            memcpy(d->copy, sparse ? d->v : d->g, (sparse ? d->k : d->n) * sizeof(float));
        else
            apply(d, rule, sparse);
        t[r] = bench_now() - t0;
    }
    return bench_median(t, reps);
}

/* A one-worker async shard of n parameters with rule `rule` and the parameters
 * apply() uses, initialised to w; NULL on failure (said on stderr). */
static dcps_shard_t *rule_shard(size_t n, int rule, const float *w)
{
    static dcps_config_t cfg;
    char err[512], params[64];
    snprintf(params, sizeof params, "model.params=%zu", n);
    const char *kinds[] = {"optimizer.kind=sgd", "optimizer.kind=momentum",
                           "optimizer.kind=dcasgd", "optimizer.kind=dcasgd"};
    const char *ov[] = {params, "servers.shards=tcp://127.0.0.1:1", "job.workers=1",
                        kinds[rule], "optimizer.lr=1e-6", "optimizer.momentum=0.9",
                        "optimizer.dc_lambda=0.04", "optimizer.dc_ms_decay=0.95",
                        "optimizer.dc_epsilon=1e-7",
                        rule == DC_ADAPTIVE ? "optimizer.dc_adaptive=true"
                                            : "optimizer.dc_adaptive=false"};
    int rc = 0;
    if (dcps_config_load(&cfg, NULL, ov, sizeof ov / sizeof ov[0], err, sizeof err) != 0) {
        fprintf(stderr, "bench/apply: %s\n", err);
        return NULL;
    }
    dcps_shard_t *s = dcps_shard_new(&cfg, 0, &rc);
    if (!s) {
        fprintf(stderr, "bench/apply: a shard of %zu parameters: out of memory\n", n);
        return NULL;
    }
    dcps_shard_init(s, w);
    return s;
}

/* The old shard's apply: the in-place rule, with the parameters rule_shard
 * gives the shard, on the shard's own arrays. Only this bench writes them from
 * outside (through its view, made writable): the baseline must run on the
 * memory the checked push just used, warm in the same caches, or it would
 * measure the caches instead of the check. The shard is dropped after. */
static void inplace_on_shard(dcps_shard_t *s, const data_t *d, int rule, int sparse)
{
    const dcps_shard_view_t v = dcps_shard_view(s);
    float *w = (float *)v.w, *state = (float *)v.state, *bak = (float *)v.bak;
    const dcps_dcasgd_t p = {1e-6f, 0.04f, rule == DC_ADAPTIVE, 0.95f, 1e-7f};
    const float lr = 1e-6f, mu = 0.9f;
    switch (rule * 2 + sparse) {
    case SGD * 2: dcps_sgd_dense(w, d->g, d->n, lr); break;
    case SGD * 2 + 1: dcps_sgd_sparse(w, 0, d->idx, d->v, d->k, lr); break;
    case MOMENTUM * 2: dcps_momentum_dense(w, state, d->g, d->n, lr, mu); break;
    case MOMENTUM * 2 + 1:
        dcps_momentum_sparse(w, state, d->n, 0, d->idx, d->v, d->k, lr, mu);
        break;
    case DC_CONST * 2:
    case DC_ADAPTIVE * 2: dcps_dcasgd_dense(w, bak, state, d->g, d->n, &p); break;
    default: dcps_dcasgd_sparse(w, bak, state, 0, d->idx, d->v, d->k, &p); break;
    }
}

/* Median times of one push through shard s (dense, or the k sparse entries),
 * checked (*checked) and as the shard applied it before the check (*before),
 * measured alternately on the same arrays. */
static void median_shard(dcps_shard_t *s, const data_t *d, int rule, int sparse, int reps,
                         double *checked, double *before)
{
    double t[101], u[101];
    char why[256];
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        uint64_t version = dcps_shard_stats(s).version;
        int rc = dcps_shard_push(s, false, 0, version + 1, version, sparse ? d->idx : NULL,
                                 sparse ? d->v : d->g, sparse ? d->k : d->n, why, sizeof why);
        t[r] = bench_now() - t0;
        if (rc != 0) {
            fprintf(stderr, "bench/apply: push refused: %s\n", why);
            exit(1);
        }
        t0 = bench_now();
        inplace_on_shard(s, d, rule, sparse);
        u[r] = bench_now() - t0;
    }
    *checked = bench_median(t, reps);
    *before = bench_median(u, reps);
}

static void machine(void)
{
    char model[256];
    bench_cpu_model(model, sizeof model);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    printf("# machine: %s, %ld cores, no GPU used (CPU code)\n", model, cores);
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : (size_t)1 << 22;
    int reps = argc > 2 ? atoi(argv[2]) : 21;
    if (n < 100 || reps < 1 || reps > 101) {
        fprintf(stderr, "usage: %s [N >= 100] [repeats 1..101]\n", argv[0]);
        return 2;
    }
    data_t d = {.n = n, .k = n / 100};
    float *all = calloc(7 * n, sizeof(float));
    d.idx = malloc(d.k * sizeof *d.idx);
    if (!all || !d.idx) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    d.w = all, d.u = all + n, d.bak = all + 2 * n, d.ms = all + 3 * n, d.g = all + 4 * n;
    d.v = all + 5 * n, d.copy = all + 6 * n;
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 1);
    for (size_t i = 0; i < n; i++) {
        d.w[i] = d.bak[i] = dcps_rng_normal(&rng);
        d.g[i] = dcps_rng_normal(&rng) * 1e-3f;
    }
    for (size_t j = 0; j < d.k; j++)
        d.v[j] = d.g[j];

    machine();
    printf("rule,kind,indices,n,k,median_s,elements_per_s,baseline_s,ratio_to_baseline\n");
    for (int layout = 0; layout < 3; layout++) {
        int sparse = layout > 0;
        if (layout == 1) /* random: k distinct indices, ascending (every 100th, jittered) */
            for (size_t j = 0; j < d.k; j++)
                d.idx[j] = (uint32_t)(j * 100 + dcps_rng_below(&rng, 100));
        if (layout == 2) /* clustered: one contiguous run */
            for (size_t j = 0; j < d.k; j++)
                d.idx[j] = (uint32_t)(n / 3 + j);
        double base = median_time(&d, 0, sparse, reps, 1);
        const char *indices = layout == 0 ? "all" : layout == 1 ? "random" : "clustered";
        size_t elems = sparse ? d.k : n;
        for (int rule = SGD; rule <= DC_ADAPTIVE; rule++) {
            double t = median_time(&d, rule, sparse, reps, 0);
            printf("%s,%s,%s,%zu,%zu,%.6f,%.3e,%.6f,%.2f\n", rule_names[rule],
                   sparse ? "sparse" : "dense", indices, n, elems, t, (double)elems / t, base,
                   t / base);
        }
        for (int rule = SGD; rule <= DC_ADAPTIVE; rule++) {
            dcps_shard_t *sh = rule_shard(n, rule, d.w);
            if (!sh)
                return 1;
            double t, before;
            median_shard(sh, &d, rule, sparse, reps, &t, &before);
            printf("%s,%s,%s,%zu,%zu,%.6f,%.3e,%.6f,%.2f\n", rule_names[rule],
                   sparse ? "sparse_checked" : "dense_checked", indices, n, elems, t,
                   (double)elems / t, before, t / before);
            fflush(stdout);
            dcps_shard_destroy(&sh);
        }
    }
    free(all);
    free(d.idx);
    return 0;
}
