/* dcps — a step in ranges (worker/step.h: dcps_step_set_ranges, _begin,
 * _push_range, _end, _wait_range) against real dcps-server shards: a dense
 * sync step pushed range by range, in any order and across a shard's edge,
 * ends bit for bit where dcps_step_run ends, with the pull whole or front
 * first, and so does a sync round of one rank in ranges and one whole; one
 * range over the whole model is dcps_step_run's Top-k exactly, and several
 * ranges each send their own; an ordered pull's ranges land before it ends
 * and equal an exact pull; and every bad argument is refused with a sentence
 * naming the range, nothing sent and the step still usable. */
#include <check.h>

#include "tests/check_run.h"
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/error.h"
#include "common/shardmap.h"
#include "proto/quant.h"
#include "tests/harness.h"
#include "worker/internal.h"

#define N 100000 /* parameters: 2 shards of 49984 and 50016 */
#define STEPS 4

/* Ranges that cross shard 0's end at 49984, of uneven sizes. */
static const size_t ENDS[] = {1000, 30000, 60000, 60001, N};
#define N_RANGES (sizeof ENDS / sizeof ENDS[0])

static void teardown(void)
{
    h_cleanup();
}

static const char *job_of(const char *name, int workers, const char *mode, const char *compression)
{
    char text[1024];
    snprintf(text, sizeof text,
             "[job]\nname = ranges\nworkers = %d\nmode = %s\n"
             "[servers]\nshards = tcp://127.0.0.1:*, tcp://127.0.0.1:*\n"
             "[model]\nparams = %d\n[optimizer]\nkind = sgd\nlr = 0.05\n"
             "[compression]\n%s\n[worker]\ntimeout_ms = 5000\n",
             workers, mode, N, compression);
    return h_write(name, text);
}

static const char *job(const char *name, const char *mode, const char *compression)
{
    return job_of(name, 1, mode, compression);
}

/* The shards of a job, and a step of rank 0 on them. */
typedef struct {
    pid_t s0, s1;
    dcps_step_t *step;
} run_t;

static run_t open_run(const char *j, const char *extra)
{
    char ep0[256], ep1[256], shards[600], e[1024];
    run_t r = {h_server(j, 0, ep0), h_server(j, 1, ep1), NULL};
    ck_assert_int_gt(r.s0, 0);
    ck_assert_int_gt(r.s1, 0);
    snprintf(shards, sizeof shards, "servers.shards=%s,%s", ep0, ep1);
    const char *ov[] = {shards, extra};
    int rc;
    r.step = dcps_step_open(j, 0, ov, extra ? 2 : 1, N, &rc, e, sizeof e);
    ck_assert_msg(r.step != NULL, "step: %s", e);
    return r;
}

static void close_run(run_t *r)
{
    dcps_step_close(&r->step);
    ck_assert_int_eq(h_stop(r->s0, 5000), 0);
    ck_assert_int_eq(h_stop(r->s1, 5000), 0);
}

static void init(float *w)
{
    for (size_t i = 0; i < N; i++)
        w[i] = 0.5f + (float)(i % 97) * 1e-3f;
}

enum how { WHOLE, RANGES, ORDERED };

/* STEPS steps of job j pushed `how`, with `ends` (count ranges) for the ranges;
 * returns the parameters after the last pull (with `exact`, then an exact pull:
 * the shards' own, whatever format their replies have), and the client's
 * counters. */
static float *train_pulled(const char *j, enum how how, const size_t *ends, size_t count,
                           dcps_client_stats_t *st, bool exact)
{
    run_t r = open_run(j, NULL);
    float *w = malloc(N * sizeof *w), *g = malloc(N * sizeof *g);
    ck_assert_ptr_nonnull(w);
    ck_assert_ptr_nonnull(g);
    init(w);
    if (how != WHOLE)
        ck_assert_int_eq(dcps_step_set_ranges(r.step, ends, count), 0);
    ck_assert_int_eq(dcps_step_start(r.step, w), 0);
    for (int t = 0; t < STEPS; t++) {
        h_gradient(g, N, (uint64_t)(7 * t + 1));
        if (how == WHOLE) {
            ck_assert_msg(dcps_step_run(r.step, g, w, 1) == 0, "%s", dcps_step_error(r.step));
            continue;
        }
        ck_assert_int_eq(dcps_step_begin(r.step, 1), 0);
        for (size_t k = count; k-- > 0;) { /* back to front, as a backward pass */
            size_t lo = k ? ends[k - 1] : 0;
            ck_assert_msg(dcps_step_push_range(r.step, lo, ends[k], g + lo) == 0, "%s",
                          dcps_step_error(r.step));
        }
        ck_assert_msg(dcps_step_end(r.step, w, how == ORDERED) == 0, "%s", dcps_step_error(r.step));
        if (how == ORDERED)
            for (size_t k = 0; k < count; k++)
                ck_assert_int_eq(dcps_step_wait_range(r.step, k ? ends[k - 1] : 0, ends[k]), 0);
    }
    if (st)
        dcps_step_stats(r.step, st);
    if (exact)
        ck_assert_msg(dcps_step_pull(r.step, w) == 0, "%s", dcps_step_error(r.step));
    free(g);
    close_run(&r);
    return w;
}

static float *train(const char *j, enum how how, const size_t *ends, size_t count,
                    dcps_client_stats_t *st)
{
    return train_pulled(j, how, ends, count, st, false);
}

START_TEST(dense_sync_steps_in_ranges_end_bit_for_bit_as_run)
{
    char j[512];
    snprintf(j, sizeof j, "%s", job("dense.ini", "sync", "push = dense"));
    float *whole = train(j, WHOLE, NULL, 0, NULL);
    float *ranges = train(j, RANGES, ENDS, N_RANGES, NULL);
    float *ordered = train(j, ORDERED, ENDS, N_RANGES, NULL);
    ck_assert_int_eq(memcmp(whole, ranges, N * sizeof *whole), 0);
    ck_assert_int_eq(memcmp(whole, ordered, N * sizeof *whole), 0);
    ck_assert_float_ne(whole[0], 0.5f); /* the job moved */
    free(whole);
    free(ranges);
    free(ordered);
}
END_TEST

/* One rank of a two-rank sync job: STEPS steps, in ranges (ordered pull) or
 * whole, then the final pull into w. */
typedef struct {
    dcps_step_t *step;
    int rank;
    bool ranges;
    float *w, *g;
    int rc;
} rank_t;

static void *rank_main(void *arg)
{
    rank_t *k = arg;
    dcps_step_t *s = k->step;
    if (k->ranges && (k->rc = dcps_step_set_ranges(s, ENDS, N_RANGES)) != 0)
        return NULL;
    if ((k->rc = dcps_step_start(s, k->w)) != 0)
        return NULL;
    for (int t = 0; t < STEPS && k->rc == 0; t++) {
        h_gradient(k->g, N, (uint64_t)(70 * k->rank + 7 * t + 1));
        if (!k->ranges) {
            k->rc = dcps_step_run(s, k->g, k->w, 1);
            continue;
        }
        if ((k->rc = dcps_step_begin(s, 1)) != 0)
            break;
        for (size_t r = N_RANGES; r-- > 0 && k->rc == 0;) {
            size_t lo = r ? ENDS[r - 1] : 0;
            k->rc = dcps_step_push_range(s, lo, ENDS[r], k->g + lo);
        }
        if (k->rc == 0)
            k->rc = dcps_step_end(s, k->w, 1);
    }
    if (k->rc == 0)
        k->rc = dcps_step_finish(s, k->w);
    return NULL;
}

/* Two ranks of job j, rank r in ranges when ranges[r]; rank 0's final model. */
static float *two_ranks(const char *j, const bool *ranges)
{
    char ep0[256], ep1[256], shards[600], e[1024];
    pid_t s0 = h_server(j, 0, ep0), s1 = h_server(j, 1, ep1);
    ck_assert_int_gt(s0, 0);
    ck_assert_int_gt(s1, 0);
    snprintf(shards, sizeof shards, "servers.shards=%s,%s", ep0, ep1);
    const char *ov[] = {shards};
    rank_t k[2];
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        int rc;
        k[r] = (rank_t){dcps_step_open(j, r, ov, 1, N, &rc, e, sizeof e),
                        r,
                        ranges[r],
                        malloc(N * sizeof(float)),
                        malloc(N * sizeof(float)),
                        0};
        ck_assert_msg(k[r].step != NULL, "rank %d: %s", r, e);
        init(k[r].w);
    }
    for (int r = 0; r < 2; r++)
        ck_assert_int_eq(pthread_create(&th[r], NULL, rank_main, &k[r]), 0);
    for (int r = 0; r < 2; r++) {
        pthread_join(th[r], NULL);
        ck_assert_msg(k[r].rc == 0, "rank %d: %s", r, dcps_step_error(k[r].step));
    }
    ck_assert_int_eq(memcmp(k[0].w, k[1].w, N * sizeof(float)), 0);
    for (int r = 0; r < 2; r++) {
        dcps_step_close(&k[r].step);
        free(k[r].g);
        if (r > 0)
            free(k[r].w);
    }
    ck_assert_int_eq(h_stop(s0, 5000), 0);
    ck_assert_int_eq(h_stop(s1, 5000), 0);
    return k[0].w;
}

START_TEST(a_sync_round_of_a_rank_in_ranges_and_a_whole_one_is_the_whole_rounds)
{
    char j[512];
    snprintf(j, sizeof j, "%s", job_of("two.ini", 2, "sync", "push = dense"));
    float *whole = two_ranks(j, (const bool[]){false, false});
    float *mixed = two_ranks(j, (const bool[]){true, false});
    ck_assert_int_eq(memcmp(whole, mixed, N * sizeof *whole), 0);
    ck_assert_float_ne(whole[0], 0.5f);
    free(whole);
    free(mixed);
}
END_TEST

START_TEST(one_range_is_runs_topk_and_several_send_their_own)
{
    char j[512];
    const size_t all[] = {N};
    dcps_client_stats_t a, b, c;
    snprintf(j, sizeof j, "%s", job("topk.ini", "async", "push = topk\ndensity = 0.01"));
    float *whole = train(j, WHOLE, NULL, 0, &a);
    float *one = train(j, RANGES, all, 1, &b);
    float *several = train(j, RANGES, ENDS, N_RANGES, &c);
    /* One range over the model: the same Top-k and residual as dcps_step_run. */
    ck_assert_int_eq(memcmp(whole, one, N * sizeof *whole), 0);
    /* Several: each range its own k = ceil(0.01 · its length), so another set
     * of entries (the range of one parameter sends it every step). */
    ck_assert_int_ne(memcmp(whole, several, N * sizeof *whole), 0);
    ck_assert_uint_eq(c.pushes, STEPS);
    free(whole);
    free(one);
    free(several);
}
END_TEST

/* fp16, bf16 and twobit are element-wise (twobit's one tau is the job's): a
 * step in ranges, its parts encoded on their own, ends bit for bit where
 * dcps_step_run ends, with the rounding kept in each range's residual, in
 * async (parts applied on arrival) and sync (parts added to the round), its
 * pull (whole, in the job's format) in order or not. */
START_TEST(shorter_dense_values_in_ranges_end_bit_for_bit_as_run)
{
    static const char *const formats[] = {"values = fp16", "values = bf16",
                                          "push = twobit\nthreshold = 0.002"};
    static const char *const modes[] = {"async", "sync"};
    for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++)
        for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
            char j[512], c[128];
            dcps_client_stats_t st;
            snprintf(c, sizeof c, "%s%s", f < 2 ? "push = dense\n" : "", formats[f]);
            snprintf(j, sizeof j, "%s", job("short.ini", modes[m], c));
            float *whole = train(j, WHOLE, NULL, 0, NULL);
            float *ranges = train(j, RANGES, ENDS, N_RANGES, &st);
            float *ordered = train(j, ORDERED, ENDS, N_RANGES, NULL);
            ck_assert_msg(memcmp(whole, ranges, N * sizeof *whole) == 0, "%s, %s", formats[f],
                          modes[m]);
            ck_assert_msg(memcmp(whole, ordered, N * sizeof *whole) == 0, "%s, %s", formats[f],
                          modes[m]);
            init(ordered); /* the job moved */
            ck_assert_int_ne(memcmp(whole, ordered, N * sizeof *whole), 0);
            /* The parts went in the short format: half the bytes of float32 or less. */
            ck_assert_uint_gt(st.bytes_pushed_dense - st.bytes_pushed,
                              (uint64_t)STEPS * N * 19 / 10);
            free(whole);
            free(ranges);
            free(ordered);
        }
}
END_TEST

/* One range over the model is a part per shard, each a whole push's frame:
 * dcps_step_run's push exactly, INT8 blocks and all, dense and Top-k (whose
 * rounding goes back into the residual at the sent entries). */
START_TEST(one_range_in_a_short_format_is_runs_push_exactly)
{
    static const char *const formats[] = {"push = dense\nvalues = int8",
                                          "push = topk\ndensity = 0.01\nvalues = int8",
                                          "push = topk\ndensity = 0.01\nvalues = fp16"};
    const size_t all[] = {N};
    for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
        char j[512];
        snprintf(j, sizeof j, "%s", job("one.ini", "async", formats[f]));
        float *whole = train_pulled(j, WHOLE, NULL, 0, NULL, true);
        float *one = train_pulled(j, ORDERED, all, 1, NULL, true);
        ck_assert_msg(memcmp(whole, one, N * sizeof *whole) == 0, "%s", formats[f]);
        free(whole);
        free(one);
    }
}
END_TEST

/* INT8 in several ranges: each part's blocks count from its own first value,
 * so the shards end where a reference ends that encodes each part (a range's
 * piece of a shard) on its own, with error feedback: what a part sends plus
 * what its range's residual keeps is the gradient plus the residual before,
 * bit for bit. */
START_TEST(int8_parts_carry_their_own_blocks_and_keep_what_rounding_took)
{
    char j[512];
    snprintf(j, sizeof j, "%s", job("int8.ini", "async", "push = dense\nvalues = int8"));
    float *ranges = train_pulled(j, ORDERED, ENDS, N_RANGES, NULL, true);
    float *whole = train_pulled(j, WHOLE, NULL, 0, NULL, true);
    float *w = malloc(N * sizeof *w), *r = calloc(N, sizeof *r), *g = malloc(N * sizeof *g);
    float *sent = malloc(N * sizeof *sent);
    uint8_t *buf = malloc((size_t)dcps_quant_bytes(DCPS_DTYPE_I8, N, DCPS_QUANT_BLOCK));
    ck_assert_ptr_nonnull(buf);
    init(w);
    const size_t cut = (size_t)dcps_shardmap_range(N, 2, 0).hi;
    for (int t = 0; t < STEPS; t++) {
        h_gradient(g, N, (uint64_t)(7 * t + 1));
        for (size_t k = 0; k < N_RANGES; k++) {
            const size_t lo = k ? ENDS[k - 1] : 0, hi = ENDS[k];
            for (size_t a = lo; a < hi;) { /* the range's piece of each shard */
                const size_t b = a < cut && hi > cut ? cut : hi, n = b - a;
                for (size_t i = a; i < b; i++)
                    r[i] += g[i]; /* the residual gains the gradient, all of it is sent */
                dcps_quant_encode(DCPS_DTYPE_I8, n > DCPS_QUANT_BLOCK ? DCPS_QUANT_BLOCK : 0, 0,
                                  r + a, n, buf, sent + a);
                for (size_t i = a; i < b; i++) {
                    const float before = r[i];
                    r[i] = before - sent[i]; /* what rounding took stays */
                    /* exact: a nonzero code is within a factor 2 of its value (Sterbenz) */
                    ck_assert_float_eq(sent[i] + r[i], before);
                    w[i] -= 0.05f * sent[i];
                }
                a = b;
            }
        }
    }
    ck_assert_int_eq(memcmp(w, ranges, N * sizeof *w), 0);
    /* The whole push's blocks start at each shard's start: other codes. */
    ck_assert_int_ne(memcmp(whole, ranges, N * sizeof *w), 0);
    free(buf);
    free(sent);
    free(g);
    free(r);
    free(w);
    free(whole);
    free(ranges);
}
END_TEST

START_TEST(an_ordered_pull_lands_range_by_range_as_an_exact_pull)
{
    char j[512];
    snprintf(j, sizeof j, "%s", job("ordered.ini", "async", "push = dense"));
    run_t r = open_run(j, NULL);
    float *w = malloc(N * sizeof *w), *g = malloc(N * sizeof *g), *x = malloc(N * sizeof *x);
    init(w);
    ck_assert_int_eq(dcps_step_set_ranges(r.step, ENDS, N_RANGES), 0);
    ck_assert_int_eq(dcps_step_start(r.step, w), 0);
    h_gradient(g, N, 1);
    ck_assert_int_eq(dcps_step_begin(r.step, 1), 0);
    for (size_t k = 0; k < N_RANGES; k++) { /* front to back: any order goes */
        size_t lo = k ? ENDS[k - 1] : 0;
        ck_assert_int_eq(dcps_step_push_range(r.step, lo, ENDS[k], g + lo), 0);
    }
    ck_assert_int_eq(dcps_step_end(r.step, w, 1), 0);
    ck_assert_uint_eq(dcps_step_clock(r.step), 1); /* the push counts while the pull runs */
    /* The front first: what landed is the shards' already. */
    ck_assert_int_eq(dcps_step_wait_range(r.step, 0, ENDS[0]), 0);
    ck_assert_float_eq(w[0], 0.5f - 0.05f * g[0]);
    ck_assert_int_eq(dcps_step_wait_range(r.step, 0, N), 0);
    ck_assert_int_eq(dcps_step_pull(r.step, x), 0);
    ck_assert_int_eq(memcmp(w, x, N * sizeof *w), 0);
    /* No ordered pull in flight: at once. */
    ck_assert_int_eq(dcps_step_wait_range(r.step, 10, 20), 0);
    free(w);
    free(g);
    free(x);
    close_run(&r);
}
END_TEST

/* Expects rc to be `code` with a sentence that holds `says`. */
#define REFUSED(rc, code, says)                                                                    \
    do {                                                                                           \
        int rc_ = (rc);                                                                            \
        ck_assert_msg(rc_ == (code) && strstr(dcps_step_error(r.step), (says)),                    \
                      "got %d (%s), wanted %d saying \"%s\"", rc_, dcps_step_error(r.step),        \
                      (code), (says));                                                             \
    } while (0)

/* Shard 0's pulls answered so far, as its /metrics page says once it shows
 * more than `above` (the page is published every 500 ms), within 5 s. */
static double pulls_above(int port, double above)
{
    double n = NAN;
    for (int i = 0; i < 100; i++) {
        n = h_metric(port, "dcps_pulls_total{shard=\"0\"}");
        if (n > above)
            break;
        nanosleep(&(struct timespec){0, 50000000}, NULL);
    }
    return n;
}

/* A job of dense pulls: the shard's PULL goes as soon as its ranges were
 * pushed, before dcps_step_end (the shard answers it meanwhile), and the end
 * collects that reply instead of asking again; a job of delta pulls waits for
 * the end (a delta moves the shard's mirror of the worker). */
START_TEST(a_shards_pull_goes_once_its_ranges_were_pushed)
{
    static const char *comp[] = {"push = dense", "push = topk\ndensity = 0.01\npull = delta"};
    for (int delta = 0; delta < 2; delta++) {
        int port = h_free_port();
        char text[1024], ep[256], shards[300], e[1024];
        snprintf(text, sizeof text,
                 "[job]\nname = ahead\nworkers = 1\nmode = async\n"
                 "[servers]\nshards = tcp://127.0.0.1:*\n[model]\nparams = %d\n"
                 "[optimizer]\nkind = sgd\nlr = 0.05\n[compression]\n%s\n"
                 "[worker]\ntimeout_ms = 5000\n[server]\nmetrics_port = %d\n",
                 N, comp[delta], port);
        const char *j = h_write("ahead.ini", text);
        pid_t s0 = h_server(j, 0, ep);
        ck_assert_int_gt(s0, 0);
        snprintf(shards, sizeof shards, "servers.shards=%s", ep);
        const char *ov[] = {shards};
        int rc;
        dcps_step_t *s = dcps_step_open(j, 0, ov, 1, N, &rc, e, sizeof e);
        ck_assert_msg(s != NULL, "step: %s", e);
        float *w = malloc(N * sizeof *w), *g = malloc(N * sizeof *g);
        ck_assert_ptr_nonnull(w);
        ck_assert_ptr_nonnull(g);
        init(w);
        h_gradient(g, N, 5);
        ck_assert_int_eq(dcps_step_set_ranges(s, ENDS, N_RANGES), 0);
        ck_assert_int_eq(dcps_step_start(s, w), 0);
        double before = pulls_above(port, 0); /* the start's pull */
        ck_assert_double_eq(before, 1);
        ck_assert_int_eq(dcps_step_begin(s, 1), 0);
        for (size_t k = N_RANGES; k-- > 0;) {
            size_t lo = k ? ENDS[k - 1] : 0;
            ck_assert_int_eq(dcps_step_push_range(s, lo, ENDS[k], g + lo), 0);
        }
        double during = pulls_above(port, before);
        ck_assert_msg(during == (delta ? before : before + 1),
                      "%s: %g pulls answered before the step's end, after %g",
                      delta ? "delta pulls" : "dense pulls", during, before);
        ck_assert_msg(dcps_step_end(s, w, 0) == 0, "%s", dcps_step_error(s));
        ck_assert_double_eq(pulls_above(port, before), before + 1);
        dcps_step_close(&s);
        ck_assert_int_eq(h_stop(s0, 5000), 0);
        free(w);
        free(g);
    }
}
END_TEST

START_TEST(bad_ranges_are_refused_naming_the_range_and_the_step_goes_on)
{
    char j[512];
    snprintf(j, sizeof j, "%s", job("bad.ini", "sync", "push = dense"));
    run_t r = open_run(j, NULL);
    float *w = malloc(N * sizeof *w), *g = calloc(N, sizeof *g);
    init(w);
    /* The ranges: strictly ascending, nonempty, ending at n, at most 64 parts a shard. */
    REFUSED(dcps_step_set_ranges(r.step, (const size_t[]){10, 10, N}, 3), DCPS_E_INVAL,
            "range 1, [10, 10), is not a nonempty range");
    REFUSED(dcps_step_set_ranges(r.step, (const size_t[]){500, 20, N}, 3), DCPS_E_INVAL,
            "range 1, [500, 20)");
    REFUSED(dcps_step_set_ranges(r.step, (const size_t[]){10, N + 1}, 2), DCPS_E_INVAL,
            "range 1, [10, 100001)");
    REFUSED(dcps_step_set_ranges(r.step, (const size_t[]){10, 9000}, 2), DCPS_E_INVAL,
            "[9000, 100000) is in no range");
    size_t many[70];
    for (size_t k = 0; k < 69; k++)
        many[k] = 100 * (k + 1);
    many[69] = N;
    REFUSED(dcps_step_set_ranges(r.step, many, 70), DCPS_E_INVAL,
            "more than 64 of the ranges (range 64, [6400, 6500), is one too many)");
    REFUSED(dcps_step_begin(r.step, 1), DCPS_E_STATE, "dcps_step_start has not been called");
    ck_assert_int_eq(dcps_step_set_ranges(r.step, ENDS, N_RANGES), 0);
    ck_assert_int_eq(dcps_step_start(r.step, w), 0);
    REFUSED(dcps_step_push_range(r.step, 0, 1000, g), DCPS_E_STATE,
            "no step in ranges is open (dcps_step_begin first)");
    REFUSED(dcps_step_end(r.step, w, 0), DCPS_E_STATE, "no step in ranges is open");
    ck_assert_int_eq(dcps_step_begin(r.step, 1), 0);
    /* In a step: a range is one of those set, pushed once; nothing else runs. */
    REFUSED(dcps_step_push_range(r.step, 500, 2000, g + 500), DCPS_E_INVAL,
            "range [500, 2000) is not one of the step's ranges: it overlaps range 0, [0, 1000)");
    REFUSED(dcps_step_push_range(r.step, 1000, 40000, g + 1000), DCPS_E_INVAL,
            "range [1000, 40000) is not one of the step's ranges: it overlaps range 1, [1000, "
            "30000)");
    REFUSED(dcps_step_push_range(r.step, 7, 7, g), DCPS_E_INVAL,
            "range [7, 7) is not a nonempty range");
    REFUSED(dcps_step_push_range(r.step, 60001, N + 5, g), DCPS_E_INVAL,
            "range [60001, 100005) is not a nonempty range of the model's 100000 parameters");
    ck_assert_int_eq(dcps_step_push_range(r.step, 0, 1000, g), 0);
    REFUSED(dcps_step_push_range(r.step, 0, 1000, g), DCPS_E_INVAL,
            "range [0, 1000) was pushed already in step 1: each range is pushed once a step");
    REFUSED(dcps_step_run(r.step, g, w, 1), DCPS_E_STATE,
            "cannot run a step: step 1 in ranges is open");
    REFUSED(dcps_step_set_ranges(r.step, ENDS, N_RANGES), DCPS_E_STATE, "step 1 in ranges is open");
    REFUSED(dcps_step_begin(r.step, 1), DCPS_E_STATE, "step 1 in ranges is open");
    for (size_t k = 1; k < N_RANGES - 1; k++)
        ck_assert_int_eq(dcps_step_push_range(r.step, ENDS[k - 1], ENDS[k], g + ENDS[k - 1]), 0);
    /* A gap: refused, the step stays open for the missing range. */
    REFUSED(dcps_step_end(r.step, w, 0), DCPS_E_INVAL,
            "range [60001, 100000) was not pushed in step 1");
    ck_assert_int_eq(dcps_step_push_range(r.step, 60001, N, g + 60001), 0);
    ck_assert_msg(dcps_step_end(r.step, w, 0) == 0, "%s", dcps_step_error(r.step));
    ck_assert_uint_eq(dcps_step_clock(r.step), 1);
    REFUSED(dcps_step_wait_range(r.step, 5, 5), DCPS_E_INVAL, "range [5, 5) is not a nonempty");
    free(g);
    free(w);
    close_run(&r);
}
END_TEST

/* [compression] parts = 8: a range's piece of a shard goes in its share of
 * the shard's 8 parts (dcps_parts_for), so one range over the model sends
 * exactly the whole push's messages (the same bytes), and several end bit for
 * bit as the whole push; with parts = 64, shard 1's pieces would need 65 parts
 * (13 + 1 + 51): each piece goes in one part instead, and the step still ends
 * as the whole push. */
START_TEST(large_pieces_go_in_parts_as_a_whole_push_does)
{
    static const size_t ONE[] = {N};
    char j[512], j64[512];
    snprintf(j, sizeof j, "%s", job("parts8.ini", "sync", "push = dense\nparts = 8"));
    snprintf(j64, sizeof j64, "%s", job("parts64.ini", "sync", "push = dense\nparts = 64"));
    dcps_client_stats_t st_whole, st_one, st_ranges;
    float *whole = train(j, WHOLE, NULL, 0, &st_whole);
    float *one = train(j, RANGES, ONE, 1, &st_one);
    float *ranges = train(j, ORDERED, ENDS, N_RANGES, &st_ranges);
    float *whole64 = train(j64, WHOLE, NULL, 0, NULL);
    float *ranges64 = train(j64, RANGES, ENDS, N_RANGES, NULL);
    ck_assert_int_eq(memcmp(whole, one, N * sizeof *whole), 0);
    ck_assert_int_eq(memcmp(whole, ranges, N * sizeof *whole), 0);
    ck_assert_int_eq(memcmp(whole, whole64, N * sizeof *whole), 0);
    ck_assert_int_eq(memcmp(whole, ranges64, N * sizeof *whole), 0);
    ck_assert_uint_eq(st_one.bytes_pushed, st_whole.bytes_pushed);
    /* 9 parts a shard (1 + 5 + 3, 2 + 1 + 6), each with its part fields */
    ck_assert_uint_gt(st_ranges.bytes_pushed, st_whole.bytes_pushed);
    free(whole);
    free(one);
    free(ranges);
    free(whole64);
    free(ranges64);
}
END_TEST

START_TEST(what_a_step_in_ranges_does_not_do_is_refused_naming_the_key)
{
    static const struct {
        const char *set, *says;
    } no[] = {
        {"compression.clip_norm=1", "[compression] clip_norm > 0"},
        {"compression.pipeline=true", "[compression] pipeline = true"},
    };
    char j[512];
    snprintf(j, sizeof j, "%s", job("no.ini", "async", "push = dense"));
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        run_t r = open_run(j, no[i].set);
        REFUSED(dcps_step_set_ranges(r.step, ENDS, N_RANGES), DCPS_E_CONFIG, no[i].says);
        ck_assert_msg(strstr(dcps_step_error(r.step), "push the whole gradient with dcps_step_run"),
                      "%s", dcps_step_error(r.step));
        close_run(&r);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("step_ranges");
    TCase *tc = tcase_create("processes");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, dense_sync_steps_in_ranges_end_bit_for_bit_as_run);
    tcase_add_test(tc, a_sync_round_of_a_rank_in_ranges_and_a_whole_one_is_the_whole_rounds);
    tcase_add_test(tc, one_range_is_runs_topk_and_several_send_their_own);
    tcase_add_test(tc, shorter_dense_values_in_ranges_end_bit_for_bit_as_run);
    tcase_add_test(tc, one_range_in_a_short_format_is_runs_push_exactly);
    tcase_add_test(tc, int8_parts_carry_their_own_blocks_and_keep_what_rounding_took);
    tcase_add_test(tc, an_ordered_pull_lands_range_by_range_as_an_exact_pull);
    tcase_add_test(tc, a_shards_pull_goes_once_its_ranges_were_pushed);
    tcase_add_test(tc, bad_ranges_are_refused_naming_the_range_and_the_step_goes_on);
    tcase_add_test(tc, large_pieces_go_in_parts_as_a_whole_push_does);
    tcase_add_test(tc, what_a_step_in_ranges_does_not_do_is_refused_naming_the_key);
    suite_add_tcase(s, tc);
    return dcps_test_run(s);
}
