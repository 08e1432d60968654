/* dcps — the consistency models (server/consistency.h) through real daemons:
 * sync mode against one process doing SGD on the same global batches, the SSP
 * bound, a worker killed with SIGKILL, a worker out of batches, and a silent
 * worker declared dead and admitted again. The rules on their own are
 * tests/test_consistency.c. */
#include <check.h>

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "server/optimizer.h"
#include "tests/check_run.h"
#include "tests/harness.h"
#include "worker/internal.h"
#include "worker/job.h"
#include "model/idx.h"
#include "model/mlp.h"

#define DATA "/usr/share/datasets/fashion-mnist/"

static void teardown(void)
{
    h_cleanup();
}

static void sleep_ms(int ms)
{
    nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
}

/* A job on n_shards shards of 127.0.0.1 with `workers` workers, 2 epochs over
 * train_limit examples in batches of 32 unless set in extra, which follows. */
static const char *job_sized(int workers, int n_shards, int train_limit, int batch, int epochs,
                             const char *extra)
{
    static char text[4096];
    snprintf(text, sizeof text,
             "[job]\nname = consistency\nworkers = %d\n"
             "[servers]\nshards = %s\n"
             "[model]\nlayers = 784,32,10\n"
             "[data]\ntrain_images = " DATA "train-images-idx3-ubyte.gz\n"
             "train_labels = " DATA "train-labels-idx1-ubyte.gz\n"
             "test_images = " DATA "t10k-images-idx3-ubyte.gz\n"
             "test_labels = " DATA "t10k-labels-idx1-ubyte.gz\n"
             "batch_size = %d\nepochs = %d\ntrain_limit = %d\n"
             "[optimizer]\nlr = 0.1\n"
             "[worker]\nlog_every = 4\ntimeout_ms = 5000\n"
             "%s",
             workers, n_shards == 1 ? "tcp://127.0.0.1:*" : "tcp://127.0.0.1:*, tcp://127.0.0.1:*",
             batch, epochs, train_limit, extra);
    return h_write("job.ini", text);
}

static const char *job(int workers, int n_shards, const char *extra)
{
    return job_sized(workers, n_shards, 1024, 32, 2, extra);
}

typedef struct {
    int n_shards;
    pid_t server[2];
    char shards[600]; /* "servers.shards=..." with the bound endpoints */
} cluster_t;

static void start_servers(cluster_t *k, const char *j, int n_shards)
{
    char ep[2][256];
    k->n_shards = n_shards;
    for (int s = 0; s < n_shards; s++) {
        k->server[s] = h_server(j, s, ep[s]);
        ck_assert_int_gt(k->server[s], 0);
    }
    if (n_shards == 1)
        snprintf(k->shards, sizeof k->shards, "servers.shards=%s", ep[0]);
    else
        snprintf(k->shards, sizeof k->shards, "servers.shards=%s,%s", ep[0], ep[1]);
}

static const char *tag_of(int rank)
{
    static char tag[4][16];
    snprintf(tag[rank], sizeof tag[rank], "worker%d", rank);
    return tag[rank];
}

/* Starts worker rank with the cluster's endpoints and one more override (or NULL). */
static pid_t start_worker(const cluster_t *k, const char *j, int rank, const char *set)
{
    char r[16];
    snprintf(r, sizeof r, "%d", rank);
    const char *argv[] = {"--config", j, "--rank", r, "--set", k->shards,
                          set ? "--set" : NULL, set, NULL};
    return h_spawn("dcps-worker", tag_of(rank), argv);
}

static void expect_exit_0(pid_t pid, int rank, int timeout_ms)
{
    int st = h_wait(pid, timeout_ms);
    ck_assert_msg(st == 0, "worker %d exited %d: %s", rank, st,
                  h_slurp(h_path(tag_of(rank), "err")));
}

/* Stops the shards (SIGTERM, each must exit 0) and returns shard 0's log. */
static const char *stop_servers(const cluster_t *k)
{
    for (int i = 0; i < k->n_shards; i++)
        ck_assert_int_eq(h_stop(k->server[i], 5000), 0);
    return h_slurp(h_path("server0", "err"));
}

/* Two workers in sync mode on two shards, then the reference: one process that
 * takes the same two batches each step (rank 0's and rank 1's shares of the
 * epoch), averages their gradients and applies SGD. The shards add the two
 * pushes in either order, which for two terms is the same float, so the result
 * must agree to the last bit; the tolerance only allows for a different
 * summation library. */
START_TEST(sync_mode_equals_single_process_sgd_on_the_global_batches)
{
    cluster_t k;
    const char *j = job(2, 2, "[job]\nmode = sync\n");
    start_servers(&k, j, 2);
    pid_t w[2] = {start_worker(&k, j, 0, NULL), start_worker(&k, j, 1, NULL)};
    for (int r = 0; r < 2; r++)
        expect_exit_0(w[r], r, 180000);
    const char *out = h_slurp(h_path("worker0", "out"));
    ck_assert_double_eq(h_final(out, "steps"), 32); /* 512 examples a rank, 2 epochs */
    ck_assert_double_eq(h_final(out, "staleness_max"), 0);

    /* What the shards hold, pulled as rank 0 (which has left). */
    dcps_config_t *cfg = malloc(sizeof *cfg);
    char err[512];
    const char *ov[] = {k.shards};
    ck_assert_msg(dcps_config_load(cfg, j, ov, 1, err, sizeof err) == 0, "%s", err);
    int rc;
    dcps_client_t *cl = dcps_client_new(cfg, 0, &rc, err, sizeof err);
    ck_assert_msg(cl != NULL, "%s", err);
    size_t n = cfg->n_params;
    float *got = malloc(n * sizeof *got), *w_ref = malloc(n * sizeof *w_ref);
    float *g = malloc(2 * n * sizeof *g);
    ck_assert_int_eq(dcps_client_pull(cl, got), 0);
    dcps_client_close(&cl);

    dcps_dataset_t ds;
    ck_assert_int_eq(dcps_dataset_load(cfg->train_images, cfg->train_labels,
                                       (uint32_t)cfg->train_limit, &ds, err, sizeof err),
                     0);
    dcps_mlp_t *mlp = dcps_mlp_new(cfg->layers, cfg->n_layers, cfg->batch_size, &rc);
    ck_assert_ptr_nonnull(mlp);
    dcps_mlp_init_params(cfg->layers, cfg->n_layers, cfg->seed, w_ref);
    uint32_t *order[2] = {malloc(ds.n * 4), malloc(ds.n * 4)};
    float *xb = malloc((size_t)cfg->batch_size * ds.dim * sizeof *xb);
    uint8_t *yb = malloc((size_t)cfg->batch_size);
    for (int epoch = 1; epoch <= cfg->epochs; epoch++) {
        uint32_t mine = 0;
        for (int r = 0; r < 2; r++)
            mine = dcps_job_share(cfg->seed, epoch, r, 2, ds.n, order[r]);
        for (uint32_t at = 0; at < mine; at += (uint32_t)cfg->batch_size) {
            for (int r = 0; r < 2; r++) {
                for (int b = 0; b < cfg->batch_size; b++) {
                    uint32_t i = order[r][at + (uint32_t)b];
                    memcpy(xb + (size_t)b * ds.dim, ds.x + (size_t)i * ds.dim,
                           ds.dim * sizeof *xb);
                    yb[b] = ds.y[i];
                }
                ck_assert_int_eq(dcps_mlp_forward_backward(mlp, w_ref, xb, yb, cfg->batch_size,
                                                           g + (size_t)r * n, NULL, NULL),
                                 0);
            }
            for (size_t i = 0; i < n; i++)
                g[i] = (g[i] + g[n + i]) * (1.0f / 2.0f);
            dcps_sgd_dense(w_ref, g, n, (float)cfg->lr);
        }
    }
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)got[i] - (double)w_ref[i]));
        scale = fmax(scale, fabs((double)w_ref[i]));
    }
    ck_assert_msg(worst <= 1e-6 * scale, "largest difference %g (largest parameter %g)", worst,
                  scale);
    const char *log = stop_servers(&k);
    ck_assert_ptr_nonnull(strstr(log, "version 32,")); /* one update per step */

    free(order[0]);
    free(order[1]);
    free(xb);
    free(yb);
    dcps_mlp_destroy(&mlp);
    dcps_dataset_free(&ds);
    free(got);
    free(w_ref);
    free(g);
    free(cfg);
}
END_TEST

/* SSP through a real shard, with the workers driven here: a fast worker (a
 * thread that pulls and pushes as fast as it can) and a slow one (this thread,
 * one step at a time). After the slow worker's c-th push, the fast one must have
 * pushed exactly c + s + 1 steps: it computes step c + s while the slow one is at
 * c, and its pull for the next step waits. */
#define SSP_S 3
#define SLOW_STEPS 6

typedef struct {
    const dcps_config_t *cfg;
    atomic_int pushed;
    atomic_bool stop;
    int rc;
} fast_t;

static void *fast_main(void *arg)
{
    fast_t *f = arg;
    char err[512];
    int rc;
    dcps_client_t *cl = dcps_client_new(f->cfg, 0, &rc, err, sizeof err);
    if (!cl) {
        f->rc = rc;
        return NULL;
    }
    size_t n = f->cfg->n_params;
    float *w = calloc(n, sizeof *w), *g = calloc(n, sizeof *g);
    rc = dcps_client_init(cl, w);
    while (rc == 0 && !atomic_load(&f->stop)) {
        if ((rc = dcps_client_pull(cl, w)) == 0 && (rc = dcps_client_push_dense(cl, g)) == 0)
            atomic_fetch_add(&f->pushed, 1);
    }
    f->rc = rc;
    dcps_client_close(&cl);
    free(w);
    free(g);
    return NULL;
}

START_TEST(ssp_holds_a_fast_worker_exactly_s_steps_ahead)
{
    cluster_t k;
    char extra[128];
    snprintf(extra, sizeof extra, "[job]\nmode = ssp\nstaleness = %d\n", SSP_S);
    const char *j = job(2, 1, extra);
    start_servers(&k, j, 1);
    dcps_config_t *cfg = malloc(sizeof *cfg);
    char err[512];
    const char *ov[] = {k.shards};
    ck_assert_msg(dcps_config_load(cfg, j, ov, 1, err, sizeof err) == 0, "%s", err);

    fast_t f = {.cfg = cfg};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, fast_main, &f), 0);
    int rc;
    dcps_client_t *slow = dcps_client_new(cfg, 1, &rc, err, sizeof err);
    ck_assert_msg(slow != NULL, "%s", err);
    ck_assert_int_eq(dcps_client_wait_ready(slow, 10000), 0);
    float *w = calloc(cfg->n_params, sizeof *w), *g = calloc(cfg->n_params, sizeof *g);
    for (int c = 0; c <= SLOW_STEPS; c++) {
        if (c > 0) {
            ck_assert_int_eq(dcps_client_pull(slow, w), 0);
            ck_assert_int_eq(dcps_client_push_dense(slow, g), 0);
        }
        /* Slow has pushed c steps. Give the fast one time to run into the bound. */
        sleep_ms(300);
        ck_assert_int_eq(atomic_load(&f.pushed), c + SSP_S + 1);
    }
    /* Let the fast one go: the slow one leaves. */
    atomic_store(&f.stop, true);
    dcps_client_close(&slow);
    pthread_join(th, NULL);
    ck_assert_int_eq(f.rc, 0);
    const char *log = stop_servers(&k);
    ck_assert_ptr_nonnull(strstr(log, "most steps ahead of the slowest worker 3 (bound 3)"));
    free(w);
    free(g);
    free(cfg);
}
END_TEST

/* Sync mode, three workers, one killed with SIGKILL once it has made progress:
 * the shards declare it dead after dead_after_ms and the other two finish. */
START_TEST(sync_job_finishes_when_one_of_three_workers_is_killed)
{
    cluster_t k;
    const char *j = job_sized(3, 2, 3072, 32, 2,
                              "[job]\nmode = sync\n[server]\nheartbeat_ms = 100\n"
                              "dead_after_ms = 1000\n"
                              /* 30 ms a step: the run lasts long enough to kill a worker in it */
                              "[worker]\ndelay_ms = 30\n");
    start_servers(&k, j, 2);
    pid_t w[3];
    for (int r = 0; r < 3; r++)
        w[r] = start_worker(&k, j, r, NULL);
    /* Wait until worker 2 has logged progress, then kill it. */
    for (int i = 0; i < 3000 && !strstr(h_slurp(h_path("worker2", "out")), "step=8 "); i++)
        sleep_ms(20);
    ck_assert_ptr_nonnull(strstr(h_slurp(h_path("worker2", "out")), "step=8 "));
    ck_assert_ptr_null(strstr(h_slurp(h_path("worker2", "out")), "final:"));
    kill(w[2], SIGKILL);
    ck_assert_int_eq(h_wait(w[2], 5000), 128 + SIGKILL);
    for (int r = 0; r < 2; r++)
        expect_exit_0(w[r], r, 180000);
    const char *out = h_slurp(h_path("worker0", "out"));
    ck_assert_double_eq(h_final(out, "steps"), 2 * 32); /* 1024 examples a rank */
    ck_assert_double_ge(h_final(out, "test_acc"), 0.5);
    stop_servers(&k);
    for (int s = 0; s < 2; s++) {
        const char *log = h_slurp(h_path(s == 0 ? "server0" : "server1", "err"));
        ck_assert_msg(strstr(log, "worker 2 declared dead"), "shard %d: %s", s, log);
    }
}
END_TEST

/* Sync mode with uneven shares: 100 examples for three workers in batches of
 * 11 give rank 0 four batches and ranks 1 and 2 three. Rank 0's last step must
 * not wait for the others, which say DONE; dead_after_ms is far away, so only
 * DONE can release it. */
START_TEST(worker_out_of_batches_is_not_waited_for)
{
    cluster_t k;
    const char *j = job_sized(3, 1, 100, 11, 1, "[job]\nmode = sync\n[server]\ndead_after_ms = 600000\n");
    start_servers(&k, j, 1);
    pid_t w[3];
    for (int r = 0; r < 3; r++)
        w[r] = start_worker(&k, j, r, NULL);
    for (int r = 0; r < 3; r++) {
        expect_exit_0(w[r], r, 60000);
        ck_assert_double_eq(h_final(h_slurp(h_path(tag_of(r), "out")), "steps"), r == 0 ? 4 : 3);
    }
    const char *log = stop_servers(&k);
    ck_assert_ptr_nonnull(strstr(log, "worker 1 has no more batches"));
    ck_assert_ptr_nonnull(strstr(log, "version 4,")); /* the last round had rank 0 alone */
}
END_TEST

/* A worker stopped (SIGSTOP) for longer than dead_after_ms is declared dead, the
 * other goes on alone; when it continues it is admitted again, its push for a
 * round that closed without it is dropped, and both finish. */
START_TEST(silent_worker_is_declared_dead_and_admitted_again)
{
    cluster_t k;
    const char *j = job_sized(2, 1, 2048, 32, 2,
                              "[job]\nmode = sync\n[server]\nheartbeat_ms = 100\n"
                              "dead_after_ms = 800\n");
    start_servers(&k, j, 1);
    pid_t w[2] = {start_worker(&k, j, 0, NULL), start_worker(&k, j, 1, "worker.delay_ms=20")};
    for (int i = 0; i < 3000 && !strstr(h_slurp(h_path("worker1", "out")), "step=8 "); i++)
        sleep_ms(20);
    kill(w[1], SIGSTOP);
    ck_assert_ptr_null(strstr(h_slurp(h_path("worker1", "out")), "final:"));
    sleep_ms(2500);
    kill(w[1], SIGCONT);
    for (int r = 0; r < 2; r++)
        expect_exit_0(w[r], r, 180000);
    const char *out1 = h_slurp(h_path("worker1", "out"));
    ck_assert_double_ge(h_final(out1, "dropped"), 1);
    const char *log = stop_servers(&k);
    ck_assert_ptr_nonnull(strstr(log, "worker 1 declared dead"));
    ck_assert_ptr_nonnull(strstr(log, "worker 1 is back after"));
    ck_assert_ptr_nonnull(strstr(log, "push of rank 1 for step"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("consistency_daemons");
    TCase *tc = tcase_create("daemons");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, sync_mode_equals_single_process_sgd_on_the_global_batches);
    tcase_add_test(tc, ssp_holds_a_fast_worker_exactly_s_steps_ahead);
    tcase_add_test(tc, sync_job_finishes_when_one_of_three_workers_is_killed);
    tcase_add_test(tc, worker_out_of_batches_is_not_waited_for);
    tcase_add_test(tc, silent_worker_is_declared_dead_and_admitted_again);
    suite_add_tcase(s, tc);
    return dcps_test_run(s);
}
