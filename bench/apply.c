/* dcps bench/apply — how fast a shard applies a push, by update rule.
 *
 * For each rule (sgd, momentum, DC-ASGD constant and adaptive), dense and sparse
 * (density 1%, random and clustered indices): the median time of one apply over
 * a shard of N parameters, elements per second, and the ratio to a baseline of
 * the same run: memcpy of the shard (dense) or of the pushed values (sparse).
 * Prints the machine, then one CSV row per measurement.
 *
 * usage: bench/apply [N] [repeats]      (defaults 4194304 and 21) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "common/rng.h"
#include "server/optimizer.h"

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
        for (int rule = SGD; rule <= DC_ADAPTIVE; rule++) {
            double t = median_time(&d, rule, sparse, reps, 0);
            size_t elems = sparse ? d.k : n;
            printf("%s,%s,%s,%zu,%zu,%.6f,%.3e,%.6f,%.2f\n", rule_names[rule],
                   sparse ? "sparse" : "dense",
                   layout == 0 ? "all" : layout == 1 ? "random" : "clustered", n, elems, t,
                   (double)elems / t, base, t / base);
        }
    }
    free(all);
    free(d.idx);
    return 0;
}
