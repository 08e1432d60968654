/* dcps — compressed communication end to end: real dcps-server and dcps-worker
 * processes on 127.0.0.1, trained on the real Fashion-MNIST files, for every
 * combination of push (dense, topk), pull (dense, delta), mode (async, sync,
 * ssp) and pipeline (off, on). Each job is short (2 workers, 2 shards, 4000
 * examples, one epoch); what is checked is that it finishes, learns, evaluates
 * the same final model on both ranks, and sends what its settings say.
 * worker/compress.c's own suite, without daemons, is tests/test_compress.c. */
#include <check.h>

#include "tests/check_run.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"

#define DATA "/usr/share/datasets/fashion-mnist/"
#define N_PARAMS 50890.0 /* 784·64 + 64 + 64·10 + 10 */

static const char *push_of[] = {"dense", "topk"};
static const char *pull_of[] = {"dense", "delta"};
static const char *mode_of[] = {"async", "sync", "ssp"};

static void teardown(void)
{
    h_cleanup();
}

/* Runs one job; returns rank 0's stdout (static). */
static const char *run(const char *compression, const char *mode, double *acc1)
{
    char text[4096], ep0[256], ep1[256], shards[600];
    snprintf(text, sizeof text,
             "[job]\nname = ctest\nworkers = 2\nmode = %s\nstaleness = 2\n"
             "[servers]\nshards = tcp://127.0.0.1:*, tcp://127.0.0.1:*\n"
             "[model]\nlayers = 784,64,10\n"
             "[data]\ntrain_images = " DATA "train-images-idx3-ubyte.gz\n"
             "train_labels = " DATA "train-labels-idx1-ubyte.gz\n"
             "test_images = " DATA "t10k-images-idx3-ubyte.gz\n"
             "test_labels = " DATA "t10k-labels-idx1-ubyte.gz\n"
             "batch_size = 32\nepochs = 1\ntrain_limit = 4000\n"
             "[optimizer]\nlr = 0.1\n"
             "[worker]\nlog_every = 20\ntimeout_ms = 5000\ndevice = cpu\n"
             "[compression]\n%s",
             mode, compression);
    const char *j = h_write("job.ini", text);
    pid_t s0 = h_server(j, 0, ep0), s1 = h_server(j, 1, ep1);
    ck_assert_int_gt(s0, 0);
    ck_assert_int_gt(s1, 0);
    snprintf(shards, sizeof shards, "servers.shards=%s,%s", ep0, ep1);
    pid_t w[2];
    for (int r = 0; r < 2; r++) {
        char rank[16], tag[32];
        snprintf(rank, sizeof rank, "%d", r);
        snprintf(tag, sizeof tag, "worker%d", r);
        const char *argv[] = {"--config", j, "--rank", rank, "--set", shards, NULL};
        w[r] = h_spawn("dcps-worker", tag, argv);
    }
    for (int r = 1; r >= 0; r--) {
        char tag[32];
        snprintf(tag, sizeof tag, "worker%d", r);
        int st = h_wait(w[r], 120000);
        ck_assert_msg(st == 0, "%s %s: worker %d exited %d: %s", mode, compression, r, st,
                      h_slurp(h_path(tag, "err")));
        if (r == 1)
            *acc1 = h_final(h_slurp(h_path(tag, "out")), "test_acc");
    }
    ck_assert_int_eq(h_stop(s0, 5000), 0);
    ck_assert_int_eq(h_stop(s1, 5000), 0);
    const char *log = h_slurp(h_path("server0", "err"));
    ck_assert_msg(strstr(log, " 0 bad messages") != NULL, "%s", log);
    return h_slurp(h_path("worker0", "out"));
}

/* _i: push · 12 + pull · 6 + mode · 2 + pipeline. */
START_TEST(every_combination_trains_and_sends_what_it_says)
{
    int push = _i / 12, pull = _i / 6 % 2, mode = _i / 2 % 3, pipe = _i % 2;
    char c[256];
    snprintf(c, sizeof c,
             "push = %s\npull = %s\ndensity = 0.02\npipeline = %s\nwarmup_steps = 3\n"
             "correction_every = %d\n",
             push_of[push], pull_of[pull], pipe ? "true" : "false", push ? 25 : 0);
    double acc1 = NAN;
    const char *out = run(c, mode_of[mode], &acc1);
    double acc = h_final(out, "test_acc"), steps = h_final(out, "steps");
    double pushed = h_final(out, "bytes_pushed"), pulled = h_final(out, "bytes_pulled");
    char what[300];
    snprintf(what, sizeof what, "%s %s", mode_of[mode], c);
    for (char *p = what; *p; p++)
        if (*p == '\n')
            *p = ' ';
    ck_assert_msg(acc >= 0.55, "%s: test_acc %g", what, acc);
    ck_assert_msg(acc == acc1, "%s: ranks evaluated %g and %g", what, acc, acc1);
    ck_assert_double_eq(steps, 63); /* 2000 examples a worker, 32 a batch */
    /* Dense sends the n floats each way every step; top-k at 2% sends ~1,018
     * entries of 8 bytes, the warm-up and correction steps dense. */
    double dense_step = N_PARAMS * 4;
    if (push)
        ck_assert_msg(pushed < steps * dense_step * 0.2, "%s: pushed %g", what, pushed);
    else
        ck_assert_double_ge(pushed, steps * dense_step);
    if (pull)
        ck_assert_msg(pulled < steps * dense_step * 0.2, "%s: pulled %g", what, pulled);
    else
        ck_assert_double_ge(pulled, steps * dense_step);
    double ratio = h_final(out, "traffic_ratio");
    /* What dense would have sent is counted with the same headers. */
    if (!push && !pull)
        ck_assert_double_eq_tol(ratio, 1.0, 1e-9);
    else
        ck_assert_msg(ratio < 0.6, "%s: traffic ratio %g", what, ratio);
    /* Both compressed: 5 of 63 pushes dense (3 warm-up, 2 corrections), 2 of 65
     * pulls dense (the first and the exact final one), the rest ~4%: about 0.1. */
    if (push && pull)
        ck_assert_msg(ratio < 0.15, "%s: traffic ratio %g", what, ratio);
}
END_TEST

/* DGC's options through the trainer: momentum correction (with the shards'
 * plain SGD), local clipping, and the density warm-up, which in this job's
 * only epoch pushes 25% of the entries (8 bytes each: half of dense). */
START_TEST(dgc_options_train_and_the_density_warmup_is_followed)
{
    double acc1 = NAN;
    const char *out = run("push = topk\npull = delta\ndensity = 0.001\n"
                          "density_warmup_epochs = 1\nmomentum_correction = 0.5\n"
                          "clip_norm = 5\n",
                          "async", &acc1);
    double acc = h_final(out, "test_acc"), steps = h_final(out, "steps");
    double pushed = h_final(out, "bytes_pushed");
    ck_assert_msg(acc >= 0.55, "test_acc %g", acc);
    ck_assert_double_eq(acc, acc1);
    ck_assert_msg(pushed > 0.45 * steps * N_PARAMS * 4 && pushed < 0.55 * steps * N_PARAMS * 4,
                  "pushed %g bytes in %g steps", pushed, steps);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("compressed_jobs");
    TCase *tc = tcase_create("end to end");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_loop_test(tc, every_combination_trains_and_sends_what_it_says, 0, 24);
    tcase_add_test(tc, dgc_options_train_and_the_density_warmup_is_followed);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return dcps_test_run(suite());
}
