/* dcps tests — operating the daemons: SIGHUP reload, and jobs that survive a
 * shard or a worker killed with SIGKILL and started again. Real dcps-server and
 * dcps-worker processes on 127.0.0.1; training on the real Fashion-MNIST. */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "config.h"
#include "tests/check_run.h"
#include "tests/harness.h"
#include "worker/dcps.h"

#define N 1000 /* model 1,500: 1·500 weights + 500 biases, one shard */

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
    close(sock);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("operate");
    TCase *tc = tcase_create("processes");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, sighup_changes_the_learning_rate_and_refuses_fixed_keys);
    tcase_add_test(tc, under_systemd_it_says_ready_pings_the_watchdog_and_reports_reloads);
    suite_add_tcase(s, tc);
    return dcps_test_run(s);
}
