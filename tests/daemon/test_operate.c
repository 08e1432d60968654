/* dcps tests — operating the daemons: SIGHUP reload, and jobs that survive a
 * shard or a worker killed with SIGKILL and started again. Real dcps-server and
 * dcps-worker processes on 127.0.0.1; training on the real Fashion-MNIST. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "common/schedule.h"
#include "config.h"
#include "tests/check_run.h"
#include "tests/harness.h"
#include "worker/internal.h"

#define N 1000 /* model 1,500: 1·500 weights + 500 biases, one shard */
#define DATA "/usr/share/datasets/fashion-mnist/"

static void teardown(void)
{
    h_cleanup();
}

/* Waits up to 10 s until the file at path contains text. */
static bool wait_for_text(const char *path, const char *text)
{
    for (int i = 0; i < 200; i++) {
        if (strstr(h_slurp(path), text))
            return true;
        nanosleep(&(struct timespec){0, 50000000}, NULL);
    }
    return false;
}

static const char *reload_job(const char *lr, const char *level, const char *layers)
{
    static char text[512];
    snprintf(text, sizeof text,
             "[job]\nname = reload\nworkers = 1\nlog_level = %s\n"
             "[servers]\nshards = tcp://127.0.0.1:*\n[model]\nlayers = %s\n"
             "[optimizer]\nlr = %s\n",
             level, layers, lr);
    return h_write("reload.ini", text);
}

/* Pushes a gradient of ones and pulls; w then holds the new parameters. */
static void step(dcps_client_t *c, float *w)
{
    float g[N];
    for (int i = 0; i < N; i++)
        g[i] = 1.0f;
    ck_assert_int_eq(dcps_client_push_dense(c, g), 0);
    ck_assert_int_eq(dcps_client_pull(c, w), 0);
}

/* Every parameter moved by -lr from before (SGD on a gradient of ones). */
static void expect_moved(const float *before, const float *after, float lr)
{
    for (int i = 0; i < N; i++)
        ck_assert_msg(fabsf(after[i] - (before[i] - lr)) < 1e-6f, "w[%d] = %g, expected %g", i,
                      after[i], before[i] - lr);
}

START_TEST(sighup_changes_the_learning_rate_and_refuses_fixed_keys)
{
    char ep[256], shards[300], err[512];
    const char *j = reload_job("0.05", "info", "1,500");
    pid_t srv = h_server(j, 0, ep);
    ck_assert_int_gt(srv, 0);
    snprintf(shards, sizeof shards, "servers.shards=%s", ep);
    const char *ov[] = {shards};
    dcps_config_t *cfg = malloc(sizeof *cfg);
    ck_assert_msg(dcps_config_load(cfg, j, ov, 1, err, sizeof err) == 0, "%s", err);
    int rc;
    dcps_client_t *c = dcps_client_new(cfg, 0, &rc, err, sizeof err);
    ck_assert_msg(c != NULL, "%s", err);
    float w0[N] = {0}, w1[N], w2[N], w3[N];
    ck_assert_int_eq(dcps_client_init(c, w0), 0);
    step(c, w1);
    expect_moved(w0, w1, 0.05f);

    /* A reloadable key: taken, logged, and the next update uses it. */
    reload_job("0.02", "debug", "1,500");
    kill(srv, SIGHUP);
    const char *log = h_path("server0", "err");
    ck_assert_msg(wait_for_text(log, "reload: [job] log_level info -> debug; [optimizer] lr "
                                     "0.05 -> 0.02"),
                  "server said: %s", h_slurp(log));
    step(c, w2);
    expect_moved(w1, w2, 0.02f);

    /* A fixed key changed with it: nothing is taken, the shard goes on. */
    reload_job("0.5", "debug", "1,400");
    kill(srv, SIGHUP);
    ck_assert_msg(wait_for_text(log, "reload refused: [model] layers 1,500 -> 1,400 cannot "
                                     "change while running"),
                  "server said: %s", h_slurp(log));
    step(c, w3);
    expect_moved(w2, w3, 0.02f);

    /* A file that no longer loads: refused with its error, the shard goes on. */
    h_write("reload.ini", "[job]\nworkers = many\n");
    kill(srv, SIGHUP);
    ck_assert_msg(wait_for_text(log, "reload refused: ") &&
                      wait_for_text(log, "[job] workers: \"many\" is not an integer"),
                  "server said: %s", h_slurp(log));
    ck_assert_int_eq(dcps_client_pull(c, w3), 0);

    dcps_client_close(&c);
    free(cfg);
    ck_assert_int_eq(h_stop(srv, 10000), 0);
}
END_TEST

/* A job with a schedule (linear from lr to min_lr 0.01 over updates 2 to 12,
 * after a warm-up of 2) and /metrics. */
static const char *schedule_job(const char *lr, int port)
{
    static char text[512];
    snprintf(text, sizeof text,
             "[job]\nname = reload\nworkers = 1\n"
             "[servers]\nshards = tcp://127.0.0.1:*\n[model]\nlayers = 1,500\n"
             "[optimizer]\nlr = %s\nschedule = linear\nwarmup_steps = 2\ntotal_steps = 12\n"
             "min_lr = 0.01\n[server]\nmetrics_port = %d\n",
             lr, port);
    return h_write("schedule.ini", text);
}

/* /metrics' dcps_lr once dcps_version reads version and dcps_lr want (the
 * text is published every 500 ms), or after 5 s whatever it reads. */
static double metrics_lr(int port, double version, double want)
{
    double lr = NAN;
    for (int i = 0; i < 100; i++) {
        lr = h_metric(port, "dcps_lr{shard=\"0\"}");
        if (h_metric(port, "dcps_version{shard=\"0\"}") == version && lr == want)
            break;
        nanosleep(&(struct timespec){0, 50000000}, NULL);
    }
    return lr;
}

/* The lr in force, lr · f(version), on every PULL_REPLY (dcps_client_lr) and in
 * /metrics; a SIGHUP that changes lr moves the schedule's base, so that linear
 * still ends at min_lr; one that would put lr below min_lr is refused. */
START_TEST(pull_replies_and_metrics_carry_the_scheduled_lr_and_sighup_moves_its_base)
{
    char ep[256], shards[300], err[512];
    int port = h_free_port();
    const char *j = schedule_job("0.1", port);
    pid_t srv = h_server(j, 0, ep);
    ck_assert_int_gt(srv, 0);
    snprintf(shards, sizeof shards, "servers.shards=%s", ep);
    const char *ov[] = {shards};
    dcps_config_t *cfg = malloc(sizeof *cfg);
    ck_assert_msg(dcps_config_load(cfg, j, ov, 1, err, sizeof err) == 0, "%s", err);
    int rc;
    dcps_client_t *c = dcps_client_new(cfg, 0, &rc, err, sizeof err);
    ck_assert_msg(c != NULL, "%s", err);
    ck_assert(isnan(dcps_client_lr(c))); /* no pull yet */
    float w[N] = {0};
    ck_assert_int_eq(dcps_client_init(c, w), 0);
    ck_assert_int_eq(dcps_client_pull(c, w), 0);
    ck_assert_double_eq(dcps_client_lr(c), 0.05); /* t = 0: the warm-up's 1/2 of 0.1 */
    ck_assert_double_eq(metrics_lr(port, 0, 0.05), 0.05);
    /* Version v after v pushes: the next update's lr is 0.1 · f(v). */
    for (uint64_t v = 1; v <= 7; v++) {
        step(c, w);
        ck_assert_double_eq(dcps_client_lr(c), dcps_schedule_lr(&cfg->sched, 0.1, v));
    }
    /* t = 7: halfway from 2 to 12, so halfway from 0.1 to 0.01. */
    ck_assert_double_eq_tol(dcps_client_lr(c), 0.055, 1e-15);
    ck_assert_double_eq(metrics_lr(port, 7, dcps_client_lr(c)), dcps_client_lr(c));

    /* lr 0.1 -> 0.2: halfway from 0.2 to min_lr 0.01 now. */
    schedule_job("0.2", port);
    kill(srv, SIGHUP);
    const char *log = h_path("server0", "err");
    ck_assert_msg(wait_for_text(log, "reload: [optimizer] lr 0.1 -> 0.2"), "server said: %s",
                  h_slurp(log));
    ck_assert_int_eq(dcps_client_pull(c, w), 0);
    ck_assert_double_eq(dcps_client_lr(c), dcps_schedule_lr(&cfg->sched, 0.2, 7));
    ck_assert_double_eq_tol(dcps_client_lr(c), 0.105, 1e-15);
    ck_assert_double_eq(metrics_lr(port, 7, dcps_client_lr(c)), dcps_client_lr(c));
    for (uint64_t v = 8; v <= 13; v++)
        step(c, w);
    ck_assert_double_eq_tol(dcps_client_lr(c), 0.01, 1e-15); /* t = 13 > total_steps */

    /* Below min_lr: the reload is refused, the base stays 0.2. */
    schedule_job("0.005", port);
    kill(srv, SIGHUP);
    ck_assert_msg(wait_for_text(log, "reload refused: ") &&
                      wait_for_text(log, "[optimizer] min_lr (0.01) must be at most "
                                         "[optimizer] lr (0.005)"),
                  "server said: %s", h_slurp(log));
    ck_assert_int_eq(dcps_client_pull(c, w), 0);
    ck_assert_double_eq(dcps_client_lr(c), dcps_schedule_lr(&cfg->sched, 0.2, 13));

    dcps_client_close(&c);
    free(cfg);
    ck_assert_int_eq(h_stop(srv, 10000), 0);
}
END_TEST

/* Reads the notifications that arrive on sock within ms into buf (joined by
 * '|'); returns how many there were. */
static int read_notifications(int sock, int ms, char *buf, size_t n)
{
    int count = 0;
    struct timeval tv = {0, 20000};
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    *buf = '\0';
    do {
        char d[1024];
        ssize_t got = recv(sock, d, sizeof d - 1, 0);
        if (got > 0) {
            d[got] = '\0';
            size_t at = strlen(buf);
            snprintf(buf + at, n - at, "%s|", d);
            count++;
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
    return count;
}

static int count_of(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = strstr(text, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

START_TEST(under_systemd_it_says_ready_pings_the_watchdog_and_reports_reloads)
{
#ifndef HAVE_SYSTEMD
    return; /* built without libsystemd: nothing is sent */
#endif
    /* The service manager's end: a datagram socket in NOTIFY_SOCKET, and a
     * watchdog of 300 ms in WATCHDOG_USEC (no WATCHDOG_PID: any pid may use it). */
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s/notify", h_dir());
    int sock = socket(AF_UNIX, SOCK_DGRAM, 0);
    ck_assert_int_ge(sock, 0);
    ck_assert_int_eq(bind(sock, (struct sockaddr *)&a, sizeof a), 0);
    setenv("NOTIFY_SOCKET", a.sun_path, 1);
    setenv("WATCHDOG_USEC", "300000", 1);

    char ep[256], got[8192];
    pid_t srv = h_server(reload_job("0.05", "info", "1,500"), 0, ep);
    ck_assert_int_gt(srv, 0);
    read_notifications(sock, 1000, got, sizeof got);
    const char *ready = "READY=1\nSTATUS=serving shard 0 at tcp://127.0.0.1:";
    ck_assert_msg(strncmp(got, ready, strlen(ready)) == 0, "got %s", got);
    /* Every 150 ms, from the loop: about 6 in the second after READY. */
    int pings = count_of(got, "WATCHDOG=1");
    ck_assert_msg(pings >= 3 && pings <= 10, "%d watchdog pings in 1 s: %s", pings, got);
    ck_assert_ptr_nonnull(strstr(got, "STATUS=version 0, 0 pushes, 0 pulls, 0 of 1 workers live"));

    kill(srv, SIGHUP);
    read_notifications(sock, 500, got, sizeof got);
    const char *r = strstr(got, "RELOADING=1|");
    ck_assert_msg(r && strstr(r, "|READY=1|"), "got %s", got);
    ck_assert_int_eq(h_stop(srv, 10000), 0);
    read_notifications(sock, 200, got, sizeof got);
    ck_assert_msg(strstr(got, "STOPPING=1"), "got %s", got);

    /* [model] params = auto: until rank 0 sizes the model, STATUS= says so. */
    srv = h_server(h_write("auto.ini", "[job]\nname = reload\nworkers = 1\n[servers]\n"
                                       "shards = tcp://127.0.0.1:*\n[model]\nparams = auto\n"),
                   0, ep);
    ck_assert_int_gt(srv, 0);
    read_notifications(sock, 500, got, sizeof got);
    ck_assert_msg(strstr(got, "STATUS=waiting for rank 0 to size the model; 0 of 1 workers live"),
                  "got %s", got);
    ck_assert_int_eq(h_stop(srv, 10000), 0);
    close(sock);
}
END_TEST

/* --- faults: a training job of 2 workers on 2 shards, checkpoints every second */

typedef struct {
    char job[512]; /* h_write's path is in a rotating buffer */
    pid_t srv[2];
    char ep[2][256];
    char shards[600]; /* servers.shards=ep0,ep1 */
} cluster_t;

static const char *const modes[] = {"async", "sync", "ssp"};

/* A job of 4 epochs over 24000 examples (1500 steps a worker: accuracy near its
 * plateau, where two async runs differ by a few tenths of a point), slowed to
 * last several seconds, in `mode` (ssp: 4 steps ahead at most), that writes
 * checkpoints into h_dir()/<dir>. */
static const char *fault_job(const char *name, const char *dir, const char *mode)
{
    char text[2048], path[512];
    snprintf(path, sizeof path, "%s/%s", h_dir(), dir);
    snprintf(text, sizeof text,
             "[job]\nname = faults\nworkers = 2\nmode = %s\nstaleness = 4\n"
             "[servers]\nshards = tcp://127.0.0.1:*, tcp://127.0.0.1:*\n"
             "[model]\nlayers = 784,64,10\n"
             "[data]\ntrain_images = " DATA "train-images-idx3-ubyte.gz\n"
             "train_labels = " DATA "train-labels-idx1-ubyte.gz\n"
             "test_images = " DATA "t10k-images-idx3-ubyte.gz\n"
             "test_labels = " DATA "t10k-labels-idx1-ubyte.gz\n"
             "batch_size = 32\nepochs = 4\ntrain_limit = 24000\n"
             "[optimizer]\nlr = 0.1\n"
             "[worker]\nlog_every = 20\ntimeout_ms = 500\nretries = 8\ndelay_ms = 4\n"
             "[server]\ncheckpoint_dir = %s\ncheckpoint_every = 1\n"
             "heartbeat_ms = 200\ndead_after_ms = 1500\n",
             mode, path);
    return h_write(name, text);
}

static void start_cluster(cluster_t *k, const char *job)
{
    snprintf(k->job, sizeof k->job, "%s", job);
    for (int s = 0; s < 2; s++) {
        k->srv[s] = h_server(job, s, k->ep[s]);
        ck_assert_int_gt(k->srv[s], 0);
    }
    snprintf(k->shards, sizeof k->shards, "servers.shards=%s,%s", k->ep[0], k->ep[1]);
}

static pid_t start_worker(const cluster_t *k, int rank, const char *tag)
{
    char r[8];
    snprintf(r, sizeof r, "%d", rank);
    const char *argv[] = {"--config", k->job, "--rank", r, "--set", k->shards, NULL};
    return h_spawn("dcps-worker", tag, argv);
}

/* Shard s again, on the endpoint it had. */
static pid_t restart_shard(cluster_t *k, int s, const char *tag)
{
    char idx[8];
    snprintf(idx, sizeof idx, "%d", s);
    const char *argv[] = {"--config", k->job, "--shard", idx, "--set", k->shards,
                          "--endpoint-file", h_path(tag, "endpoint"), NULL};
    k->srv[s] = h_spawn("dcps-server", tag, argv);
    ck_assert_msg(wait_for_text(h_path(tag, "endpoint"), k->ep[s]), "shard %d did not come back: %s",
                  s, h_slurp(h_path(tag, "err")));
    return k->srv[s];
}

static void expect_exit_0(pid_t pid, const char *tag)
{
    int st = h_wait(pid, 300000);
    ck_assert_msg(st == 0, "%s exited with %d: %s", tag, st, h_slurp(h_path(tag, "err")));
}

static int checkpoints_of(const char *dir, int shard)
{
    char path[512], prefix[32];
    snprintf(path, sizeof path, "%s/%s", h_dir(), dir);
    snprintf(prefix, sizeof prefix, "shard-%d-", shard);
    DIR *d = opendir(path);
    int n = 0;
    if (!d)
        return 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0 && strstr(e->d_name, ".ckpt");
    closedir(d);
    return n;
}

/* Waits until the worker's log shows step `at` or later. */
static void wait_for_step(const char *tag, long at)
{
    for (int i = 0; i < 1200; i++) {
        const char *out = h_slurp(h_path(tag, "out"));
        for (const char *p = strstr(out, "step="); p; p = strstr(p + 1, "step="))
            if (atol(p + 5) >= at)
                return;
        nanosleep(&(struct timespec){0, 50000000}, NULL);
    }
    ck_abort_msg("%s never reached step %ld: %s", tag, at, h_slurp(h_path(tag, "err")));
}

/* The test accuracy of the same job, undisturbed, in h_dir()/ref. */
static double undisturbed_accuracy(const char *mode)
{
    cluster_t k;
    start_cluster(&k, fault_job("ref.ini", "ref", mode));
    pid_t w0 = start_worker(&k, 0, "ref0"), w1 = start_worker(&k, 1, "ref1");
    expect_exit_0(w0, "ref0");
    expect_exit_0(w1, "ref1");
    double acc = h_final(h_slurp(h_path("ref0", "out")), "test_acc");
    ck_assert_msg(acc > 0.75, "the undisturbed job reached only %.4f", acc);
    for (int s = 0; s < 2; s++)
        ck_assert_int_eq(h_stop(k.srv[s], 20000), 0);
    return acc;
}

/* Within 0.02 of the undisturbed run's accuracy. Two runs of an ssp or async
 * job differ by the order their pushes met in: a killed shard's run was seen
 * 0.0100 off, above it. A restart that lost the model would be far outside. */
static void expect_close_to(const char *tag, double ref)
{
    double acc = h_final(h_slurp(h_path(tag, "out")), "test_acc");
    ck_assert_msg(fabs(acc - ref) <= 0.02, "%s: test accuracy %.4f, undisturbed %.4f", tag, acc,
                  ref);
}

static long stopped_version(const char *tag)
{
    const char *at = strstr(h_slurp(h_path(tag, "err")), "stopped: version ");
    ck_assert_msg(at != NULL, "%s did not say where it stopped", tag);
    return atol(at + strlen("stopped: version "));
}

/* What a sync shard's log says at its end of the rounds it closed: "N closed,
 * digest D" (since its last restore). */
static const char *rounds_digest(const char *tag)
{
    static char out[64];
    const char *at = strstr(h_slurp(h_path(tag, "err")), "notice: rounds: ");
    ck_assert_msg(at != NULL, "%s did not say which rounds it closed", tag);
    snprintf(out, sizeof out, "%.*s", (int)strcspn(at, "\n"), at);
    return out;
}

/* In each consistency model (the loop's index in modes). */
START_TEST(a_shard_killed_and_restarted_loses_nothing_that_matters)
{
    const char *mode = modes[_i];
    double ref = undisturbed_accuracy(mode);
    cluster_t k;
    start_cluster(&k, fault_job("kill.ini", "kill", mode));
    pid_t w0 = start_worker(&k, 0, "w0"), w1 = start_worker(&k, 1, "w1");
    wait_for_step("w0", 150);
    /* Killed 100 ms after a periodic checkpoint, so that some updates are lost
     * (in sync, rounds the workers went on to) but few: the test is about
     * surviving, not about how much a second costs. */
    int before = count_of(h_slurp(h_path("server1", "err")), "periodic checkpoint");
    while (count_of(h_slurp(h_path("server1", "err")), "periodic checkpoint") == before)
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    ck_assert_int_ge(checkpoints_of("kill", 1), 1);
    nanosleep(&(struct timespec){0, 100000000}, NULL);
    kill(k.srv[1], SIGKILL);
    ck_assert_int_eq(h_wait(k.srv[1], 10000), 128 + SIGKILL);
    nanosleep(&(struct timespec){0, 300000000}, NULL);
    restart_shard(&k, 1, "server1b");
    expect_exit_0(w0, "w0");
    expect_exit_0(w1, "w1");

    const char *log = h_slurp(h_path("server1b", "err"));
    ck_assert_msg(strstr(log, "restored") && strstr(log, "it was written"),
                  "the restarted shard said: %s", log);
    /* Both workers went on with the new process (a request lost with the old
     * one is sent again; one sent while it was down waits in ZeroMQ's queue). */
    ck_assert_msg(strstr(log, "worker 0 rejoins") && strstr(log, "worker 1 rejoins"),
                  "the restarted shard said: %s", log);
    expect_close_to("w0", ref);
    expect_close_to("w1", ref);
    for (int s = 0; s < 2; s++)
        ck_assert_int_eq(h_stop(k.srv[s], 20000), 0);
    if (strcmp(mode, "sync") != 0)
        return;
    /* In sync the workers had gone on to later rounds than its checkpoint's:
     * every shard went back to the checkpoint both hold, and so did the
     * workers; the shards end at one version, having closed the same rounds
     * since (their digests). */
    const char *lead = h_slurp(h_path("server0", "err"));
    ck_assert_msg(strstr(lead, "shard 1 restarted while the job ran") &&
                      strstr(lead, "every shard resumes at version"),
                  "shard 0 said: %s", lead);
    for (int r = 0; r < 2; r++) {
        const char *err = h_slurp(h_path(r ? "w1" : "w0", "err"));
        ck_assert_msg(strstr(err, "the shards went back to round"), "rank %d said: %s", r, err);
    }
    ck_assert_int_eq(stopped_version("server0"), stopped_version("server1b"));
    char d0[64], d1[64];
    snprintf(d0, sizeof d0, "%s", rounds_digest("server0"));
    snprintf(d1, sizeof d1, "%s", rounds_digest("server1b"));
    ck_assert_str_eq(d0, d1);
}
END_TEST

START_TEST(a_worker_killed_and_restarted_resumes_where_it_was)
{
    double ref = undisturbed_accuracy("async");
    cluster_t k;
    start_cluster(&k, fault_job("kill.ini", "kill", "async"));
    pid_t w0 = start_worker(&k, 0, "w0"), w1 = start_worker(&k, 1, "w1");
    wait_for_step("w1", 200);
    kill(w1, SIGKILL);
    ck_assert_int_eq(h_wait(w1, 10000), 128 + SIGKILL);
    w1 = start_worker(&k, 1, "w1b");
    expect_exit_0(w0, "w0");
    expect_exit_0(w1, "w1b");

    /* It resumed after step 200 instead of starting over. */
    const char *err = h_slurp(h_path("w1b", "err"));
    const char *at = strstr(err, "resuming at step ");
    ck_assert_msg(at && atol(at + 17) > 200, "the restarted worker said: %s", err);
    ck_assert_double_eq(h_final(h_slurp(h_path("w1b", "out")), "steps"),
                        h_final(h_slurp(h_path("ref1", "out")), "steps"));
    expect_close_to("w0", ref);
    expect_close_to("w1b", ref);
    for (int s = 0; s < 2; s++)
        ck_assert_int_eq(h_stop(k.srv[s], 20000), 0);
}
END_TEST

/* The version in a shard's "stopped: version V" line. */

/* A shard stopped (SIGSTOP) for twice dead_after_ms in sync mode: when it
 * runs again, the workers' silence was its own, not theirs. Nobody is declared
 * dead, no push is dropped as STALE, and both shards apply the same rounds
 * with the same pushes: they end at the same version. */
START_TEST(a_shard_stopped_longer_than_dead_after_ms_keeps_sync_rounds_whole)
{
    cluster_t k;
    start_cluster(&k, fault_job("stall.ini", "stall", "sync"));
    pid_t w0 = start_worker(&k, 0, "w0"), w1 = start_worker(&k, 1, "w1");
    wait_for_step("w0", 150);
    kill(k.srv[1], SIGSTOP);
    nanosleep(&(struct timespec){3, 0}, NULL); /* dead_after_ms = 1500 */
    kill(k.srv[1], SIGCONT);
    expect_exit_0(w0, "w0");
    expect_exit_0(w1, "w1");
    for (int s = 0; s < 2; s++)
        ck_assert_int_eq(h_stop(k.srv[s], 20000), 0);

    const char *log = h_slurp(h_path("server1", "err"));
    ck_assert_msg(strstr(log, "this shard did not run for"), "shard 1 said: %.2000s", log);
    for (int s = 0; s < 2; s++) {
        const char *dead = strstr(h_slurp(h_path(s ? "server1" : "server0", "err")),
                                  "declared dead");
        ck_assert_msg(!dead, "shard %d said: %.300s", s, dead);
    }
    ck_assert_double_eq(h_final(h_slurp(h_path("w0", "out")), "dropped"), 0);
    ck_assert_double_eq(h_final(h_slurp(h_path("w1", "out")), "dropped"), 0);
    ck_assert_int_eq(stopped_version("server0"), stopped_version("server1"));
}
END_TEST

/* Whether the stopped process pid's main thread was sleeping (the worker's
 * delay_ms after a step: no request of it is on its way then, since a step's
 * push and pull have been answered when it returns). Waits until it has
 * stopped. The number in /proc/PID/syscall is the system call it is in, -1 in
 * user space; a sleep resumed after a stop shows as restart_syscall, which a
 * poll resumed shows as too, so it does not count. */
static bool stopped_asleep(pid_t pid)
{
    char path[64], state = 0;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    for (int i = 0; i < 1000 && state != 'T'; i++) {
        const char *stat = h_slurp(path), *end = strrchr(stat, ')');
        state = end && end[1] == ' ' ? end[2] : 0;
        if (state != 'T')
            nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    ck_assert_msg(state == 'T', "process %d did not stop", (int)pid);
    snprintf(path, sizeof path, "/proc/%d/syscall", (int)pid);
    long nr = strtol(h_slurp(path), NULL, 10);
#ifdef SYS_nanosleep
    if (nr == SYS_nanosleep)
        return true;
#endif
    return nr == SYS_clock_nanosleep;
}

/* Stops pid between two of its steps, not inside one: a worker stopped while
 * its push is on its way to the shards may leave one shard with it and the
 * other without (docs/operating.md), which is not what this test is about.
 * Tried every few milliseconds, for at most 10 s. */
static void stop_between_steps(pid_t pid)
{
    for (int i = 0; i < 2000; i++) {
        kill(pid, SIGSTOP);
        if (stopped_asleep(pid))
            return;
        kill(pid, SIGCONT);
        nanosleep(&(struct timespec){0, (1 + i % 4) * 1000000L}, NULL);
    }
    ck_abort_msg("process %d was never stopped asleep between two steps", (int)pid);
}

/* A worker stopped (SIGSTOP) for twice dead_after_ms in sync mode is declared
 * dead; the job goes on without it. When it runs again, the rounds it missed
 * are gone for it: it skips their batches and ends with the job's last round,
 * so the shards apply exactly the job's rounds, and it says what it missed. */
START_TEST(a_worker_stopped_in_sync_mode_ends_with_the_jobs_last_round)
{
    double ref = undisturbed_accuracy("sync");
    double rounds = h_final(h_slurp(h_path("ref0", "out")), "steps");
    cluster_t k;
    start_cluster(&k, fault_job("stop.ini", "stop", "sync"));
    pid_t w0 = start_worker(&k, 0, "w0"), w1 = start_worker(&k, 1, "w1");
    wait_for_step("w1", 150);
    stop_between_steps(w1);
    nanosleep(&(struct timespec){3, 0}, NULL); /* dead_after_ms = 1500 */
    kill(w1, SIGCONT);
    expect_exit_0(w0, "w0");
    expect_exit_0(w1, "w1");
    for (int s = 0; s < 2; s++)
        ck_assert_int_eq(h_stop(k.srv[s], 20000), 0);

    const char *err = h_slurp(h_path("w1", "err"));
    ck_assert_msg(strstr(err, "rank 1 missed rounds"), "the stopped worker said: %s", err);
    ck_assert_msg(!strstr(err, "differs between the parts"), "the stopped worker said: %s", err);
    ck_assert_double_eq(h_final(h_slurp(h_path("w1", "out")), "steps"), rounds);
    ck_assert_double_eq(h_final(h_slurp(h_path("w0", "out")), "steps"), rounds);
    for (int s = 0; s < 2; s++)
        ck_assert_int_eq(stopped_version(s ? "server1" : "server0"), (long)rounds);
    expect_close_to("w0", ref);
    expect_close_to("w1", ref);
}
END_TEST

/* A job that has run to its end is not run again as if it were new: a worker
 * started again against its shards (still running, or restarted from their
 * checkpoints) says so and exits 1, instead of training nothing and printing a
 * result. */
START_TEST(a_finished_job_is_not_passed_off_as_a_new_run)
{
    char text[1024], path[512], ep[256], shards[300];
    snprintf(path, sizeof path, "%s/done", h_dir());
    snprintf(text, sizeof text,
             "[job]\nname = finished\nworkers = 1\n"
             "[servers]\nshards = tcp://127.0.0.1:*\n[model]\nlayers = 784,10\n"
             "[data]\ntrain_images = " DATA "train-images-idx3-ubyte.gz\n"
             "train_labels = " DATA "train-labels-idx1-ubyte.gz\n"
             "test_images = " DATA "t10k-images-idx3-ubyte.gz\n"
             "test_labels = " DATA "t10k-labels-idx1-ubyte.gz\n"
             "batch_size = 32\nepochs = 1\ntrain_limit = 640\n"
             "[server]\ncheckpoint_dir = %s\n",
             path);
    static char job[512];
    snprintf(job, sizeof job, "%s", h_write("finished.ini", text));
    pid_t srv = h_server(job, 0, ep);
    ck_assert_int_gt(srv, 0);
    snprintf(shards, sizeof shards, "servers.shards=%s", ep);
    const char *argv[] = {"--config", job, "--rank", "0", "--set", shards, NULL};
    expect_exit_0(h_spawn("dcps-worker", "first", argv), "first");

    /* The shard still runs from that run. */
    int st = h_wait(h_spawn("dcps-worker", "again", argv), 60000);
    const char *err = h_slurp(h_path("again", "err"));
    ck_assert_msg(st == 1 && strstr(err, "the shards hold all 20 steps of rank 0"),
                  "exit %d: %s", st, err);
    ck_assert_msg(!strstr(h_slurp(h_path("again", "out")), "final:"), "it printed a result");

    /* Restored from its checkpoint. */
    ck_assert_int_eq(h_stop(srv, 20000), 0);
    srv = h_spawn("dcps-server", "server0b",
                  (const char *[]){"--config", job, "--shard", "0", "--set", shards, NULL});
    ck_assert_msg(wait_for_text(h_path("server0b", "err"), "restored"), "the shard said: %s",
                  h_slurp(h_path("server0b", "err")));
    st = h_wait(h_spawn("dcps-worker", "third", argv), 60000);
    err = h_slurp(h_path("third", "err"));
    ck_assert_msg(st == 1 && strstr(err, "already run to its end") && strstr(err, path),
                  "exit %d: %s", st, err);
    ck_assert_int_eq(h_stop(srv, 20000), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("operate");
    TCase *tc = tcase_create("processes");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, sighup_changes_the_learning_rate_and_refuses_fixed_keys);
    tcase_add_test(tc, pull_replies_and_metrics_carry_the_scheduled_lr_and_sighup_moves_its_base);
    tcase_add_test(tc, under_systemd_it_says_ready_pings_the_watchdog_and_reports_reloads);
    tcase_add_loop_test(tc, a_shard_killed_and_restarted_loses_nothing_that_matters, 0,
                        (int)(sizeof modes / sizeof *modes));
    tcase_add_test(tc, a_worker_killed_and_restarted_resumes_where_it_was);
    tcase_add_test(tc, a_shard_stopped_longer_than_dead_after_ms_keeps_sync_rounds_whole);
    tcase_add_test(tc, a_worker_stopped_in_sync_mode_ends_with_the_jobs_last_round);
    tcase_add_test(tc, a_finished_job_is_not_passed_off_as_a_new_run);
    suite_add_tcase(s, tc);
    return dcps_test_run(s);
}
