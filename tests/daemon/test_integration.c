/* dcps — integration tests: real dcps-server and dcps-worker processes on
 * 127.0.0.1, trained on the real Fashion-MNIST files; and [model] params =
 * auto, the shards learning the model's size from rank 0, with dcps-worker and
 * with the client library in this process. */
#include <check.h>

#include "tests/check_run.h"
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "kernels/gpu.h"
#include "tests/harness.h"
#include "worker/internal.h"
#include "worker/trainer.h"

#define DATA "/usr/share/datasets/fashion-mnist/"

/* A small, quick job: 12000 training examples, 2 epochs. */
static const char *job(const char *name, const char *extra)
{
    static char text[4096];
    snprintf(text, sizeof text,
             "[job]\nname = itest\nworkers = 2\n"
             "[servers]\nshards = tcp://127.0.0.1:*, tcp://127.0.0.1:*\n"
             "[model]\nlayers = 784,64,10\n"
             "[data]\ntrain_images = " DATA "train-images-idx3-ubyte.gz\n"
             "train_labels = " DATA "train-labels-idx1-ubyte.gz\n"
             "test_images = " DATA "t10k-images-idx3-ubyte.gz\n"
             "test_labels = " DATA "t10k-labels-idx1-ubyte.gz\n"
             "batch_size = 32\nepochs = 2\ntrain_limit = 12000\n"
             "[optimizer]\nlr = 0.1\n"
             "[worker]\nlog_every = 5\ntimeout_ms = 5000\n"
             "%s",
             extra);
    return h_write(name, text);
}

static void teardown(void)
{
    h_cleanup();
}

/* Reads the loss column of the first and the last step rows of a metrics CSV. */
static void csv_losses(const char *path, double *first, double *last, int *rows)
{
    FILE *f = fopen(path, "r");
    char line[512];
    *rows = 0;
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    ck_assert_str_eq(line, "elapsed_s,step,epoch,loss,train_acc,test_acc,bytes_pushed,"
                           "bytes_pulled,bytes_dense,staleness_mean\n");
    while (fgets(line, sizeof line, f)) {
        double elapsed, loss;
        long step;
        int epoch;
        ck_assert_int_eq(sscanf(line, "%lf,%ld,%d,%lf", &elapsed, &step, &epoch, &loss), 4);
        if (*rows == 0)
            *first = loss;
        *last = loss;
        (*rows)++;
    }
    fclose(f);
}

START_TEST(two_workers_on_two_shards_learn_fashion_mnist)
{
    char ep0[256], ep1[256], shards[600];
    const char *j = job("job.ini", "");
    pid_t s0 = h_server(j, 0, ep0), s1 = h_server(j, 1, ep1);
    ck_assert_int_gt(s0, 0);
    ck_assert_int_gt(s1, 0);
    snprintf(shards, sizeof shards, "servers.shards=%s,%s", ep0, ep1);

    pid_t w[2];
    for (int r = 0; r < 2; r++) {
        char rank[16], tag[32];
        snprintf(rank, sizeof rank, "%d", r);
        snprintf(tag, sizeof tag, "worker%d", r);
        const char *argv[] = {"--config", j, "--rank", rank, "--set", shards,
                              "--metrics", h_path(tag, "csv"), NULL};
        w[r] = h_spawn("dcps-worker", tag, argv);
    }
    double acc[2];
    for (int r = 0; r < 2; r++) {
        char tag[32];
        snprintf(tag, sizeof tag, "worker%d", r);
        int st = h_wait(w[r], 300000);
        ck_assert_msg(st == 0, "worker %d exited %d: %s", r, st, h_slurp(h_path(tag, "err")));
        const char *out = h_slurp(h_path(tag, "out"));
        acc[r] = h_final(out, "test_acc");
        /* Chance is 0.10; this small job reaches about 0.80. */
        ck_assert_msg(acc[r] >= 0.70, "worker %d test_acc %g", r, acc[r]);
        double steps = h_final(out, "steps");
        ck_assert_double_eq(steps, 12000 / 2 / 32 * 2 + 2); /* 188 batches a worker, last partial */
        /* Dense pushes: every step sends every parameter (784*64+64+64*10+10). */
        ck_assert_double_ge(h_final(out, "bytes_pushed"), steps * 50890 * 4);
        ck_assert_double_ge(h_final(out, "bytes_pulled"), steps * 50890 * 4);

        double first, last;
        int rows;
        csv_losses(h_path(tag, "csv"), &first, &last, &rows);
        ck_assert_int_ge(rows, 6);
        /* Rank 0 starts from the fresh model (loss near ln 10); rank 1 may join
         * after rank 0's first steps, so only its end point is checked. */
        if (r == 0)
            ck_assert_msg(first > 1.5 && last < first * 0.4, "loss went from %g to %g", first,
                          last);
        ck_assert_msg(last < 0.8, "rank %d ends with loss %g", r, last);
    }
    /* After the final barrier both ranks evaluate the same parameters. */
    ck_assert_double_eq(acc[0], acc[1]);

    ck_assert_int_eq(h_stop(s0, 5000), 0);
    ck_assert_int_eq(h_stop(s1, 5000), 0);
    const char *log = h_slurp(h_path("server0", "err"));
    ck_assert_ptr_nonnull(strstr(log, "stopped: version"));
    ck_assert_ptr_nonnull(strstr(log, "0 bad messages"));
}
END_TEST

START_TEST(server_stops_with_status_0_on_sigterm_and_sigint)
{
    char ep[256];
    const char *j = job("job.ini", "");
    pid_t s = h_server(j, 0, ep);
    ck_assert_int_gt(s, 0);
    ck_assert_int_eq(h_stop(s, 5000), 0);
    ck_assert_ptr_nonnull(strstr(h_slurp(h_path("server0", "err")), "Terminated received"));

    s = h_server(j, 0, ep);
    ck_assert_int_gt(s, 0);
    kill(s, SIGINT);
    ck_assert_int_eq(h_wait(s, 5000), 0);
    ck_assert_ptr_nonnull(strstr(h_slurp(h_path("server0", "err")), "Interrupt received"));
}
END_TEST

/* An unknown key and an out-of-range value stop both programs before they bind
 * or connect, naming file, line and key. */
START_TEST(bad_job_file_stops_both_programs_before_binding)
{
    static const struct {
        const char *extra, *expect;
    } cases[] = {
        {"colour = blue\n", ":21: [worker] colour: unknown key"},
        {"[optimizer]\nmomentum = 5\n", ":22: [optimizer] momentum"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *j = job("bad.ini", cases[i].extra);
        const char *epf = h_path("bad", "endpoint");
        unlink(epf);
        const char *sargv[] = {"--config", j, "--shard", "0", "--endpoint-file", epf, NULL};
        int st = h_wait(h_spawn("dcps-server", "bad-server", sargv), 10000);
        ck_assert_int_eq(st, 2);
        const char *err = h_slurp(h_path("bad-server", "err"));
        ck_assert_msg(strstr(err, "bad.ini") && strstr(err, cases[i].expect),
                      "server said: %s", err);
        ck_assert_int_ne(access(epf, F_OK), 0); /* never bound */

        const char *wargv[] = {"--config", j, "--rank", "0", NULL};
        st = h_wait(h_spawn("dcps-worker", "bad-worker", wargv), 10000);
        ck_assert_int_eq(st, 2);
        err = h_slurp(h_path("bad-worker", "err"));
        ck_assert_msg(strstr(err, "bad.ini") && strstr(err, cases[i].expect),
                      "worker said: %s", err);
    }
}
END_TEST

/* A host name cannot be bound: the shard says what it can bind instead. */
START_TEST(shard_told_to_bind_a_host_name_says_what_it_can_bind)
{
    const char *j = job("host.ini", "");
    const char *argv[] = {"--config", j, "--shard", "0", "--set",
                          "servers.shards=tcp://localhost:17501", NULL};
    int st = h_wait(h_spawn("dcps-server", "host", argv), 10000);
    const char *err = h_slurp(h_path("host", "err"));
    ck_assert_msg(st == 1 && strstr(err, "cannot bind tcp://localhost:17501") &&
                      strstr(err, "not a host name") && strstr(err, "tcp://127.0.0.1:17501"),
                  "exit %d: %s", st, err);
}
END_TEST

START_TEST(worker_gives_up_on_an_unreachable_shard_with_a_clear_error)
{
    const char *j = job("job.ini", "");
    const char *argv[] = {"--config", j, "--rank", "0", "--set",
                          "servers.shards=tcp://127.0.0.1:9,tcp://127.0.0.1:10",
                          "--set", "worker.timeout_ms=200", "--set", "worker.retries=1", NULL};
    int st = h_wait(h_spawn("dcps-worker", "lonely", argv), 20000);
    ck_assert_int_eq(st, 1);
    const char *err = h_slurp(h_path("lonely", "err"));
    ck_assert_msg(strstr(err, "127.0.0.1:9") &&
                      strstr(err, "did not answer HELLO: 2 attempts over 0.6 s") &&
                      strstr(err, "is dcps-server running there"),
                  "worker said: %s", err);
}
END_TEST

/* What a_refused_connection_... runs on a thread of its own: dcps_client_open
 * of its job, which blocks until the shard answers or the retries run out. */
struct late_open {
    const char *job;
    dcps_client_t *c;
    int rc;
    char err[1024];
};

static void *open_late(void *arg)
{
    struct late_open *o = arg;
    o->c = dcps_client_open(o->job, 0, NULL, 0, &o->rc, o->err, sizeof o->err);
    return NULL;
}

/* Nothing listens at the shard's address: the worker says so at once (a
 * refused TCP connection is known in milliseconds, long before a request times
 * out), naming the address, how long it keeps trying and the keys that set
 * that; and it keeps trying, so a shard that starts later is still joined. */
START_TEST(a_refused_connection_is_said_at_once_and_a_late_shard_is_still_joined)
{
    char text[512], ep[256];
    int port = h_free_port();
    snprintf(text, sizeof text,
             "[job]\nname = late\nworkers = 1\n[servers]\nshards = tcp://127.0.0.1:%d\n"
             "[model]\nparams = 1000\n[worker]\ntimeout_ms = 3000\nretries = 2\n",
             port);
    struct late_open o = {.job = h_write("late.ini", text)};
    FILE *log = fopen(h_path("late", "log"), "w");
    ck_assert_ptr_nonnull(log);
    setvbuf(log, NULL, _IOLBF, 0);
    dcps_log_set_stream(log);
    pthread_t t;
    double t0 = dcps_now_ms(), said = -1;
    ck_assert_int_eq(pthread_create(&t, NULL, open_late, &o), 0);
    while (dcps_now_ms() - t0 < 2500 && said < 0) {
        if (strstr(h_slurp(h_path("late", "log")), "refused the connection"))
            said = dcps_now_ms() - t0;
        usleep(10000);
    }
    pid_t s = h_server(o.job, 0, ep);
    pthread_join(t, NULL);
    dcps_log_set_stream(NULL);
    fclose(log);
    const char *out = h_slurp(h_path("late", "log"));
    char want[128];
    snprintf(want, sizeof want, "shard 0 (tcp://127.0.0.1:%d) refused the connection", port);
    ck_assert_msg(said >= 0 && said < 2500, "not said within 2.5 s (the first attempt waits 3 s): %s",
                  out);
    ck_assert_msg(strstr(out, want) && strstr(out, "keeps trying for 2") &&
                      strstr(out, "[worker] timeout_ms = 3000 and retries = 2 set how long"),
                  "%s", out);
    ck_assert_msg(o.c != NULL, "the shard that started later was not joined: %s", o.err);
    dcps_client_close(&o.c);
    ck_assert_int_eq(h_stop(s, 5000), 0);
}
END_TEST

/* A data file that is missing, a directory or not IDX: exit status 1 and a line
 * naming the file and what is wrong with it, before any shard is contacted (none
 * runs here: a worker that tried would say so instead). */
START_TEST(worker_with_a_bad_data_file_exits_naming_it)
{
    char garbage[512], set[600];
    snprintf(garbage, sizeof garbage, "%s", h_write("garbage.gz", "garbage\n"));
    const struct {
        const char *key, *file, *expect;
    } cases[] = {
        {"train_images", "/nonexistent/train.gz", "/nonexistent/train.gz: cannot open: No such file"},
        {"test_labels", h_dir(), ": read failed: Is a directory"},
        {"test_labels", garbage, ": bad magic 0x67617262 (expected 0x00000801 for labels"},
    };
    const char *j = job("job.ini", "");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(set, sizeof set, "data.%s=%s", cases[i].key, cases[i].file);
        const char *argv[] = {"--config", j, "--rank", "0", "--set", set, NULL};
        int st = h_wait(h_spawn("dcps-worker", "baddata", argv), 20000);
        const char *err = h_slurp(h_path("baddata", "err"));
        ck_assert_msg(st == 1, "exit status %d: %s", st, err);
        char key[600];
        snprintf(key, sizeof key, "[data] %s: %s", cases[i].key, cases[i].file);
        ck_assert_msg(strstr(err, key) && strstr(err, cases[i].expect), "worker said: %s", err);
        /* A missing file: where the default files come from. */
        ck_assert_msg(!!strstr(err, "apt install dataset-fashion-mnist") == (i == 0),
                      "worker said: %s", err);
        ck_assert_ptr_null(strstr(err, "HELLO"));
    }
}
END_TEST

START_TEST(worker_asked_for_a_gpu_without_one_exits_clearly)
{
    if (dcps_gpu_count() > 0)
        return; /* the GPU suite covers this machine */
    char ep0[256], ep1[256], shards[600];
    const char *j = job("job.ini", "");
    ck_assert_int_gt(h_server(j, 0, ep0), 0);
    ck_assert_int_gt(h_server(j, 1, ep1), 0);
    snprintf(shards, sizeof shards, "servers.shards=%s,%s", ep0, ep1);
    const char *argv[] = {"--config", j, "--rank", "0", "--set", shards,
                          "--set", "worker.device=gpu", NULL};
    int st = h_wait(h_spawn("dcps-worker", "gpuless", argv), 20000);
    ck_assert_int_eq(st, 1);
    const char *err = h_slurp(h_path("gpuless", "err"));
    ck_assert_ptr_nonnull(strstr(err, "no GPU is usable"));
    /* With the runtime's own reason (an old driver, none, or no CUDA in the build). */
    ck_assert_msg(*dcps_gpu_why() && strstr(err, dcps_gpu_why()), "worker said: %s", err);
}
END_TEST

/* The synthetic gradients: a seeded pool per rank with the documented
 * distribution, and windows into it that move from step to step. */
START_TEST(synthetic_gradients_are_seeded_per_rank_and_move_each_step)
{
    enum { LEN = 1 << 20 };
    float *a = malloc(LEN * sizeof *a), *b = malloc(LEN * sizeof *b), *c = malloc(LEN * sizeof *c);
    ck_assert(a && b && c);
    dcps_trainer_synthetic_pool(42, 0, a, LEN);
    dcps_trainer_synthetic_pool(42, 0, b, LEN);
    dcps_trainer_synthetic_pool(42, 1, c, LEN);
    ck_assert_mem_eq(a, b, LEN * sizeof *a);
    size_t same = 0;
    double sum = 0, sq = 0;
    for (size_t i = 0; i < LEN; i++) {
        same += a[i] == c[i];
        sum += a[i];
        sq += (double)a[i] * a[i];
    }
    ck_assert_uint_lt(same, 16); /* another rank draws other values */
    double mean = sum / LEN, sd = sqrt(sq / LEN - mean * mean);
    ck_assert_msg(fabs(mean) < 1e-4 && fabs(sd - DCPS_SYNTH_STD) < 1e-4, "mean %g sd %g", mean,
                  sd);

    size_t distinct = 0, prev = SIZE_MAX;
    for (long step = 1; step <= 100; step++) {
        size_t off = dcps_trainer_synthetic_offset(42, 0, step);
        ck_assert_uint_le(off, DCPS_SYNTH_SLACK);
        ck_assert_uint_eq(off, dcps_trainer_synthetic_offset(42, 0, step));
        distinct += off != prev;
        prev = off;
    }
    ck_assert_uint_ge(distinct, 95);
    ck_assert_uint_ne(dcps_trainer_synthetic_offset(42, 0, 7), dcps_trainer_synthetic_offset(42, 1, 7));
    free(a);
    free(b);
    free(c);
}
END_TEST

/* The four [data] files of job(), pointed at paths that do not exist: a worker
 * that opened any of them would stop with status 1 (see above). */
static const char *const no_data[] = {
    "--set", "data.train_images=/nonexistent/train-images.gz",
    "--set", "data.train_labels=/nonexistent/train-labels.gz",
    "--set", "data.test_images=/nonexistent/test-images.gz",
    "--set", "data.test_labels=/nonexistent/test-labels.gz",
};
#define N_NO_DATA (sizeof no_data / sizeof no_data[0])

/* Runs emulated workers of ranks 0 and 1 of job j on two fresh shards, with no
 * data file, rank r with the overrides extra[r] (NULL-terminated); checks that
 * each exits 0 and says it emulates, and puts each one's stdout in out[r] (a
 * copy that the caller frees). */
static void emulated_pair(const char *j, const char *const *extra[2], char *out[2])
{
    char ep0[256], ep1[256], shards[600];
    pid_t s0 = h_server(j, 0, ep0), s1 = h_server(j, 1, ep1);
    ck_assert_int_gt(s0, 0);
    ck_assert_int_gt(s1, 0);
    snprintf(shards, sizeof shards, "servers.shards=%s,%s", ep0, ep1);
    pid_t w[2];
    for (int r = 0; r < 2; r++) {
        const char *argv[64];
        size_t n = 0;
        argv[n++] = "--config";
        argv[n++] = j;
        argv[n++] = "--rank";
        argv[n++] = r ? "1" : "0";
        argv[n++] = "--set";
        argv[n++] = shards;
        for (size_t i = 0; i < N_NO_DATA; i++)
            argv[n++] = no_data[i];
        for (size_t i = 0; extra[r][i] && n < 63; i++)
            argv[n++] = extra[r][i];
        argv[n] = NULL;
        w[r] = h_spawn("dcps-worker", r ? "emu1" : "emu0", argv);
    }
    for (int r = 0; r < 2; r++) {
        const char *tag = r ? "emu1" : "emu0";
        int st = h_wait(w[r], 120000);
        const char *err = h_slurp(h_path(tag, "err"));
        ck_assert_msg(st == 0, "worker %d exited %d: %s", r, st, err);
        ck_assert_ptr_nonnull(strstr(err, "emulates its computation"));
        out[r] = strdup(h_slurp(h_path(tag, "out")));
        ck_assert_ptr_nonnull(out[r]);
    }
    ck_assert_int_eq(h_stop(s0, 5000), 0);
    ck_assert_int_eq(h_stop(s1, 5000), 0);
}

/* --compute-ms (and [worker] compute_ms): each step sleeps and pushes a
 * gradient of the model's size; no model runs, so nothing is evaluated, and no
 * data file is read: [data] train_limit examples (Fashion-MNIST's 60,000 when
 * it is 0) set the number of steps. */
START_TEST(emulated_compute_sleeps_and_pushes_model_sized_gradients)
{
    char j[512]; /* a copy: h_path's buffers rotate */
    snprintf(j, sizeof j, "%s", job("job.ini", ""));
    char *out[2];
    /* Rank 1 also runs the pipeline, whose buffers differ in this mode. */
    const char *const a0[] = {"--set", "data.train_limit=1200", "--compute-ms", "20", NULL};
    const char *const a1[] = {"--set", "data.train_limit=1200", "--set", "worker.compute_ms=20",
                              "--set", "compression.pipeline=true", NULL};
    emulated_pair(j, (const char *const *[2]){a0, a1}, out);
    for (int r = 0; r < 2; r++) {
        double steps = h_final(out[r], "steps");
        ck_assert_double_eq(steps, 2 * 19); /* 600 examples a worker, batch 32, 2 epochs */
        ck_assert_double_eq(h_final(out[r], "compute_ms"), 20);
        /* Each epoch's evaluation and the final one print NaN, having no test set. */
        ck_assert_msg(isnan(h_final(out[r], "test_acc")) && isnan(h_final(out[r], "test_loss")),
                      "%s", out[r]);
        ck_assert_msg(strstr(out[r], " epoch=2 done: steps=38 test_loss=nan test_acc=nan\n"),
                      "%s", out[r]);
        ck_assert_double_ge(h_final(out[r], "elapsed_s"), steps * 0.020);
        ck_assert_double_ge(h_final(out[r], "bytes_pushed"), steps * 50890 * 4);
        ck_assert_ptr_nonnull(strstr(out[r], r ? "pipeline=true" : "pipeline=false"));
        free(out[r]);
    }

    /* train_limit = 0: 60,000 examples, 30,000 for each of the 2 ranks. One
     * step of 30,000 each pins the count at 60,000 or fewer, two steps of
     * 29,999 at 60,000 or more: exactly the default, from no file. */
    for (int batch = 30000; batch >= 29999; batch--) {
        char set[64];
        snprintf(set, sizeof set, "data.batch_size=%d", batch);
        const char *const b[] = {"--set", "data.train_limit=0", "--set", set,
                                 "--set", "data.epochs=1",      "--compute-ms", "1", NULL};
        emulated_pair(j, (const char *const *[2]){b, b}, out);
        for (int r = 0; r < 2; r++) {
            ck_assert_msg(h_final(out[r], "steps") == (batch == 30000 ? 1 : 2), "%s", out[r]);
            free(out[r]);
        }
    }

    /* A real worker of the same job stops at the first missing file: the
     * emulated ones above did not just get past it. */
    const char *real[] = {"--config", j, "--rank", "0", no_data[0], no_data[1], NULL};
    ck_assert_int_eq(h_wait(h_spawn("dcps-worker", "real", real), 20000), 1);
    ck_assert_ptr_nonnull(strstr(h_slurp(h_path("real", "err")), "/nonexistent/train-images.gz"));

    const char *bad[] = {"--config", j, "--rank", "0", "--compute-ms", "5ms", NULL};
    ck_assert_int_eq(h_wait(h_spawn("dcps-worker", "emubad", bad), 20000), 2);
    ck_assert_ptr_nonnull(strstr(h_slurp(h_path("emubad", "err")), "--compute-ms: \"5ms\""));
}
END_TEST

/* --- [model] params = auto: the shards learn the model's size from rank 0 ------- */

/* The MLP 784,64,10 of job(): what dcps-worker's model has. */
#define MLP_PARAMS 50890

/* Writes the job of these tests, job() with params = auto, into j (512 bytes:
 * a copy, since h_path's buffers rotate) if j is empty; starts both its shards
 * and puts "servers.shards=..." in shards (600). */
static void two_shards(char *j, pid_t *s, char *shards)
{
    char ep0[256], ep1[256];
    if (!*j)
        snprintf(j, 512, "%s", job("auto.ini", "[model]\nparams = auto\n"));
    s[0] = h_server(j, 0, ep0);
    s[1] = h_server(j, 1, ep1);
    ck_assert_int_gt(s[0], 0);
    ck_assert_int_gt(s[1], 0);
    snprintf(shards, 600, "servers.shards=%s,%s", ep0, ep1);
}

/* A client of `rank` for job j on those shards, its model of n parameters
 * (params = auto: the caller gives n). NULL with *rc and e if refused. */
static dcps_client_t *client(const char *j, const char *shards, int rank, uint64_t n,
                             bool impatient, int *rc, char *e, size_t elen)
{
    dcps_config_t cfg;
    /* Impatient: asks for at most 100 + 200 ms. */
    const char *ov[] = {shards, "worker.timeout_ms=100", "worker.retries=1"};
    ck_assert_int_eq(dcps_config_load(&cfg, j, ov, impatient ? 3 : 1, e, elen), 0);
    ck_assert_uint_eq(cfg.n_params, 0);
    cfg.n_params = n;
    return dcps_client_new(&cfg, rank, rc, e, elen);
}

/* Rank 1 starts first and waits for rank 0 to size the shards, then both
 * train the MLP to the end: no job file gives the size. */
START_TEST(auto_sized_job_trains_to_the_end_whichever_rank_starts_first)
{
    char shards[600], j[512] = "";
    pid_t s[2], w[2];
    two_shards(j, s, shards);
    for (int r = 1; r >= 0; r--) {
        char rank[16], tag[32];
        snprintf(rank, sizeof rank, "%d", r);
        snprintf(tag, sizeof tag, "auto%d", r);
        const char *argv[] = {"--config", j, "--rank", rank, "--set", shards, "--set",
                              "data.train_limit=4000", "--set", "data.epochs=1", NULL};
        w[r] = h_spawn("dcps-worker", tag, argv);
        if (r == 1) {
            /* It says it waits, and goes on waiting. */
            for (int i = 0; i < 500 && !strstr(h_slurp(h_path(tag, "err")), "waiting up to"); i++)
                usleep(10000);
            ck_assert_msg(strstr(h_slurp(h_path(tag, "err")), "rank 0 has not said HELLO"),
                          "rank 1 said: %s", h_slurp(h_path(tag, "err")));
            usleep(300000);
            ck_assert_int_eq(h_running(w[1]), 1);
        }
    }
    double acc[2];
    for (int r = 0; r < 2; r++) {
        const char *tag = r ? "auto1" : "auto0";
        int st = h_wait(w[r], 300000);
        ck_assert_msg(st == 0, "worker %d exited %d: %s", r, st, h_slurp(h_path(tag, "err")));
        const char *out = h_slurp(h_path(tag, "out"));
        acc[r] = h_final(out, "test_acc");
        ck_assert_msg(acc[r] >= 0.6, "worker %d test_acc %g", r, acc[r]);
        ck_assert_double_eq(h_final(out, "steps"), 2000 / 32 + 1); /* the last batch partial */
        ck_assert_double_ge(h_final(out, "bytes_pushed"), 63.0 * MLP_PARAMS * 4);
    }
    ck_assert_double_eq(acc[0], acc[1]);
    for (int i = 0; i < 2; i++) {
        char tag[32];
        snprintf(tag, sizeof tag, "server%d", i);
        ck_assert_int_eq(h_stop(s[i], 5000), 0);
        const char *log = h_slurp(h_path(tag, "err"));
        ck_assert_msg(strstr(log, "waits for rank 0 to size the model") &&
                          strstr(log, "rank 0's model has 50890 parameters: this shard serves ") &&
                          strstr(log, i ? "[25472, 50890)" : "[0, 25472)"),
                      "%s", log);
        /* The early HELLOs are not bad messages. */
        ck_assert_msg(strstr(log, " 0 bad messages"), "%s", log);
    }
}
END_TEST

/* A worker whose model is not the size rank 0 gave stops at HELLO, with a
 * sentence naming both sizes, and pushes nothing: rank 0 initialised the
 * shards, so it would otherwise have trained. */
START_TEST(worker_of_another_size_is_refused_before_its_first_push)
{
    char shards[600], e[1024], j[512] = "";
    pid_t s[2];
    int rc;
    two_shards(j, s, shards);
    dcps_client_t *c0 = client(j, shards, 0, MLP_PARAMS, false, &rc, e, sizeof e);
    ck_assert_msg(c0 != NULL, "%s", e);
    float *w = calloc(MLP_PARAMS, sizeof *w);
    ck_assert_int_eq(dcps_client_init(c0, w), 0);
    free(w);
    /* dcps-worker with a smaller MLP: 784*32+32+32*10+10 = 25450. */
    const char *argv[] = {"--config", j, "--rank", "1", "--set", shards, "--set",
                          "model.layers=784,32,10", NULL};
    int st = h_wait(h_spawn("dcps-worker", "other", argv), 60000);
    const char *err = h_slurp(h_path("other", "err"));
    ck_assert_msg(st == 1, "exit status %d: %s", st, err);
    ck_assert_msg(strstr(err, "refused HELLO") &&
                      strstr(err, "worker's model has 25450 parameters, this job has 50890"),
                  "worker said: %s", err);
    /* The library says the same to its caller. */
    ck_assert_ptr_null(client(j, shards, 1, 1000, false, &rc, e, sizeof e));
    ck_assert_int_eq(rc, DCPS_E_SIZE);
    ck_assert_msg(strstr(e, "worker's model has 1000 parameters, this job has 50890"), "%s", e);
    dcps_client_close(&c0);
    for (int i = 0; i < 2; i++) {
        char tag[32];
        snprintf(tag, sizeof tag, "server%d", i);
        ck_assert_int_eq(h_stop(s[i], 5000), 0);
        const char *log = h_slurp(h_path(tag, "err"));
        ck_assert_msg(strstr(log, "stopped: version 0, 0 pushes") &&
                          strstr(log, "0 dropped), 0 pulls"),
                      "%s", log);
    }
}
END_TEST

/* The installed API has no loaded job to set n_params in: a program opens an
 * auto-sized job with dcps_client_open and the override model.params=N (the
 * shards, which read the file without it, learn N from rank 0), as
 * docs/operating.md says. Without the override it is refused. */
START_TEST(installed_api_opens_an_auto_sized_job_with_a_params_override)
{
    char shards[600], e[1024], j[512] = "";
    pid_t s[2];
    int rc = 0;
    two_shards(j, s, shards);
    const char *none[] = {shards};
    ck_assert_ptr_null(dcps_client_open(j, 0, none, 1, &rc, e, sizeof e));
    ck_assert_int_eq(rc, DCPS_E_CONFIG);
    /* The sentence says what this API can do: nothing of a configuration's
     * n_params, which its caller never holds. */
    ck_assert_msg(strstr(e, "params = auto") && strstr(e, "\"model.params=N\"") &&
                      strstr(e, "dcps_step_open") && !strstr(e, "n_params"),
                  "%s", e);
    const char *ov0[] = {shards, "model.params=5000"};
    dcps_client_t *c0 = dcps_client_open(j, 0, ov0, 2, &rc, e, sizeof e);
    ck_assert_msg(c0 != NULL, "%s", e);
    ck_assert_uint_eq(dcps_client_num_params(c0), 5000);
    float *w = calloc(5000, sizeof *w), *got = calloc(5000, sizeof *got);
    for (int i = 0; i < 5000; i++)
        w[i] = (float)i / 8;
    ck_assert_int_eq(dcps_client_init(c0, w), 0);
    ck_assert_int_eq(dcps_client_pull(c0, got), 0);
    ck_assert_int_eq(memcmp(w, got, 5000 * sizeof *w), 0);
    const char *ov1[] = {shards, "model.params=4000", "worker.timeout_ms=100", "worker.retries=1"};
    ck_assert_ptr_null(dcps_client_open(j, 1, ov1, 4, &rc, e, sizeof e));
    ck_assert_int_eq(rc, DCPS_E_SIZE);
    ck_assert_msg(strstr(e, "worker's model has 4000 parameters, this job has 5000"), "%s", e);
    free(w);
    free(got);
    dcps_client_close(&c0);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(h_stop(s[i], 5000), 0);
}
END_TEST

/* Shards and worker that read different [job] workers: the refusal says which
 * differs and what to do about it. */
START_TEST(a_worker_count_that_differs_from_the_shards_says_what_to_do)
{
    char shards[600], e[1024], j[512] = "";
    pid_t s[2];
    int rc = 0;
    two_shards(j, s, shards);
    const char *ov[] = {shards, "model.params=5000", "job.workers=3"};
    ck_assert_ptr_null(dcps_client_open(j, 0, ov, 3, &rc, e, sizeof e));
    ck_assert_int_eq(rc, DCPS_E_SIZE);
    ck_assert_msg(strstr(e, "for 2 workers; this job expects") && strstr(e, "for 3: ") &&
                      strstr(e, "different [job] workers") &&
                      strstr(e, "launch-local.sh -w N") && strstr(e, "restart the shards"),
                  "%s", e);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(h_stop(s[i], 5000), 0);
}
END_TEST

/* Rank 0's size is untrusted: too few for the shards, or more than auto
 * accepts, is refused with a sentence, the shard stays unsized and serves the
 * next HELLO; a size of 0 is refused by the client itself. */
START_TEST(rank_0_with_an_impossible_size_is_refused_and_the_shards_wait_on)
{
    char shards[600], e[1024], j[512] = "";
    pid_t s[2];
    int rc;
    two_shards(j, s, shards);
    ck_assert_ptr_null(client(j, shards, 0, 64, false, &rc, e, sizeof e));
    ck_assert_int_eq(rc, DCPS_E_SIZE);
    ck_assert_msg(strstr(e, "rank 0's model has 64 parameters, too few for the 2 [servers] "
                            "shards: shard 0 would own none"),
                  "%s", e);
    ck_assert_ptr_null(client(j, shards, 0, DCPS_PARAMS_AUTO_MAX + 1, false, &rc, e, sizeof e));
    ck_assert_int_eq(rc, DCPS_E_SIZE);
    ck_assert_msg(strstr(e, "rank 0's model has 1073741825 parameters, more than the 1073741824 "
                            "that [model] params = auto accepts"),
                  "%s", e);
    ck_assert_ptr_null(client(j, shards, 0, 0, false, &rc, e, sizeof e));
    ck_assert_int_eq(rc, DCPS_E_CONFIG);
    ck_assert_msg(strstr(e, "params = auto") && strstr(e, "n_params"), "%s", e);
    dcps_client_t *c = client(j, shards, 0, 129, false, &rc, e, sizeof e);
    ck_assert_msg(c != NULL, "%s", e);
    ck_assert_uint_eq(dcps_client_num_params(c), 129);
    dcps_client_close(&c);
    ck_assert_int_eq(h_stop(s[0], 5000), 0);
    ck_assert_int_eq(h_stop(s[1], 5000), 0);
    ck_assert_ptr_nonnull(
        strstr(h_slurp(h_path("server1", "err")), "rank 0's model has 129 parameters"));
}
END_TEST

/* dcps-worker trains the MLP of [model] layers: an explicit params of another
 * size is refused before anything starts (emulated compute takes any size). */
START_TEST(worker_refuses_a_params_that_is_not_its_mlps)
{
    const char *j = job("job.ini", "[model]\nparams = 1000\n");
    const char *argv[] = {"--config", j, "--rank", "0", NULL};
    int st = h_wait(h_spawn("dcps-worker", "params", argv), 10000);
    const char *err = h_slurp(h_path("params", "err"));
    ck_assert_msg(st == 2, "exit status %d: %s", st, err);
    ck_assert_msg(strstr(err, "[model] params = 1000, but the MLP of [model] layers has 50890 "
                              "parameters"),
                  "worker said: %s", err);
}
END_TEST

struct early {
    const char *job, *shards;
    int rc;
    bool done;
    dcps_client_t *c;
    char e[1024];
};

static void *early_hello(void *arg)
{
    struct early *x = arg;
    x->c = client(x->job, x->shards, 1, MLP_PARAMS, false, &x->rc, x->e, sizeof x->e);
    __atomic_store_n(&x->done, true, __ATOMIC_RELEASE);
    return NULL;
}

/* dcps_client_new of rank 1 before rank 0 has said HELLO waits (the shards
 * answer NOTREADY, and it asks again) and returns once rank 0 has; with no
 * rank 0 it gives up after the bounded wait, saying why. */
START_TEST(hello_before_rank_0_waits_then_succeeds)
{
    char shards[600], e[1024], j[512] = "";
    pid_t s[2];
    int rc;
    two_shards(j, s, shards);
    struct early x = {.job = j, .shards = shards};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, early_hello, &x), 0);
    usleep(700000);
    ck_assert_msg(!__atomic_load_n(&x.done, __ATOMIC_ACQUIRE), "rank 1 did not wait: %s", x.e);
    dcps_client_t *c0 = client(j, shards, 0, MLP_PARAMS, false, &rc, e, sizeof e);
    ck_assert_msg(c0 != NULL, "%s", e);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_msg(x.c != NULL, "rank 1: %s", x.e);
    ck_assert_uint_eq(dcps_client_num_params(x.c), MLP_PARAMS);
    dcps_client_close(&x.c);
    dcps_client_close(&c0);
    ck_assert_int_eq(h_stop(s[0], 5000), 0);
    ck_assert_int_eq(h_stop(s[1], 5000), 0);

    /* Bounded: 100 + 200 ms, the retries of an unanswered request. */
    two_shards(j, s, shards);
    ck_assert_ptr_null(client(j, shards, 1, MLP_PARAMS, true, &rc, e, sizeof e));
    ck_assert_int_eq(rc, DCPS_E_NOTREADY);
    ck_assert_msg(strstr(e, "rank 0 has not said HELLO to this shard; asked for 0.") &&
                      strstr(e, "is rank 0 running?"),
                  "%s", e);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("integration");
    TCase *tc = tcase_create("processes");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, two_workers_on_two_shards_learn_fashion_mnist);
    tcase_add_test(tc, server_stops_with_status_0_on_sigterm_and_sigint);
    tcase_add_test(tc, bad_job_file_stops_both_programs_before_binding);
    tcase_add_test(tc, worker_gives_up_on_an_unreachable_shard_with_a_clear_error);
    tcase_add_test(tc, a_refused_connection_is_said_at_once_and_a_late_shard_is_still_joined);
    tcase_add_test(tc, worker_asked_for_a_gpu_without_one_exits_clearly);
    tcase_add_test(tc, worker_with_a_bad_data_file_exits_naming_it);
    tcase_add_test(tc, shard_told_to_bind_a_host_name_says_what_it_can_bind);
    tcase_add_test(tc, synthetic_gradients_are_seeded_per_rank_and_move_each_step);
    tcase_add_test(tc, emulated_compute_sleeps_and_pushes_model_sized_gradients);
    tcase_add_test(tc, auto_sized_job_trains_to_the_end_whichever_rank_starts_first);
    tcase_add_test(tc, worker_of_another_size_is_refused_before_its_first_push);
    tcase_add_test(tc, installed_api_opens_an_auto_sized_job_with_a_params_override);
    tcase_add_test(tc, a_worker_count_that_differs_from_the_shards_says_what_to_do);
    tcase_add_test(tc, rank_0_with_an_impossible_size_is_refused_and_the_shards_wait_on);
    tcase_add_test(tc, hello_before_rank_0_waits_then_succeeds);
    tcase_add_test(tc, worker_refuses_a_params_that_is_not_its_mlps);
    suite_add_tcase(s, tc);
    return dcps_test_run(s);
}
