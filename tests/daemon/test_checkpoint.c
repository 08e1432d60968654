/* dcps — shard checkpoints (server/checkpoint.h) through the daemon: a restart
 * serves the parameters it had, recognises a retried push and the sessions it
 * had, a worker whose session a restarted shard does not know says HELLO
 * again, an auto shard keeps the size rank 0 gave, and a checkpoint_dir that is
 * a file or holds only unusable checkpoints stops it. The files on their own:
 * tests/test_checkpoint.c. */
#include <check.h>

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/config.h"
#include "common/error.h"
#include "proto/frame.h"
#include "tests/check_run.h"
#include "tests/checkpoint_fixture.h"
#include "tests/harness.h"
#include "worker/internal.h"

static const char *server_job(const char *dir)
{
    static char text[2048];
    snprintf(text, sizeof text,
             "[job]\nname = ckpt-itest\nworkers = 1\n"
             "[servers]\nshards = tcp://127.0.0.1:*\n"
             "[model]\nlayers = 20,10\n"
             "[optimizer]\nkind = dcasgd\nlr = 0.1\n"
             "[worker]\ntimeout_ms = 5000\n"
             "[server]\ncheckpoint_dir = %s\ncheckpoint_every = 1\nheartbeat_ms = 100\n"
             "dead_after_ms = 2000\n",
             dir);
    return h_write("job.ini", text);
}

static dcps_client_t *connect_to(const char *job, const char *endpoint)
{
    char set[300], e[512];
    int rc;
    snprintf(set, sizeof set, "servers.shards=%s", endpoint);
    const char *ov[] = {set};
    dcps_client_t *c = dcps_client_open(job, 0, ov, 1, &rc, e, sizeof e);
    ck_assert_msg(c != NULL, "%s", e);
    return c;
}

/* The newest checkpoint file's path in dir ("" if none). */
static const char *newest(const char *dir)
{
    static char best[1024];
    char name[256] = "";
    DIR *d = opendir(dir);
    struct dirent *de;
    ck_assert_ptr_nonnull(d);
    while ((de = readdir(d)) != NULL)
        if (strstr(de->d_name, ".ckpt") && strcmp(de->d_name, name) > 0)
            snprintf(name, sizeof name, "%s", de->d_name);
    closedir(d);
    snprintf(best, sizeof best, "%s/%s", dir, name);
    return *name ? best : "";
}

START_TEST(restarted_server_serves_exactly_the_parameters_it_had)
{
    char ep[256], ep2[256], job[512];
    const char *dir = ckdir();
    snprintf(job, sizeof job, "%s", server_job(dir)); /* h_path's buffers rotate */
    pid_t srv = h_server(job, 0, ep);
    ck_assert_msg(srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    dcps_client_t *c = connect_to(job, ep);
    size_t n = dcps_client_num_params(c);
    ck_assert_uint_eq(n, 210);
    float w[210], g[210], before[210], after[210];
    for (size_t j = 0; j < n; j++)
        w[j] = (float)cos(0.3 * (double)j);
    ck_assert_int_eq(dcps_client_init(c, w), 0);
    for (int step = 0; step < 6; step++) {
        ck_assert_int_eq(dcps_client_pull(c, w), 0);
        for (size_t j = 0; j < n; j++)
            g[j] = w[j] * 0.5f + 0.01f * (float)step; /* DC-ASGD's correction acts too */
        ck_assert_int_eq(dcps_client_push_dense(c, g), 0);
    }
    ck_assert_int_eq(dcps_client_pull(c, before), 0);
    /* A periodic checkpoint within checkpoint_every = 1 s. */
    for (int i = 0; i < 40 && !strstr(h_slurp(h_path("server0", "err")), "periodic checkpoint");
         i++)
        nanosleep(&(struct timespec){0, 100000000L}, NULL);
    dcps_client_close(&c);
    ck_assert_int_eq(h_stop(srv, 10000), 0);
    const char *log = h_slurp(h_path("server0", "err"));
    ck_assert_msg(strstr(log, "no checkpoint in "), "%s", log);
    ck_assert_msg(strstr(log, "periodic checkpoint "), "%s", log);
    ck_assert_msg(strstr(log, "final checkpoint "), "%s", log);
    char file[1024];
    snprintf(file, sizeof file, "%s", newest(dir));
    ck_assert_msg(*file && strstr(log, file), "newest %s; log: %s", file, log);

    srv = h_server(job, 0, ep2);
    ck_assert_msg(srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    c = connect_to(job, ep2);
    ck_assert_int_eq(dcps_client_initialized(c), 1);
    ck_assert_int_eq(dcps_client_pull(c, after), 0);
    ck_assert_int_eq(memcmp(before, after, sizeof before), 0);
    dcps_client_close(&c);
    log = h_slurp(h_path("server0", "err"));
    char want[1200];
    snprintf(want, sizeof want, "restored %s (version 6, initialised)", file);
    ck_assert_msg(strstr(log, want), "want \"%s\" in %s", want, log);
    ck_assert_int_eq(h_stop(srv, 10000), 0);
}
END_TEST

/* A raw DEALER of this test's context, connected to endpoint. */
static void *raw_ctx;
static void *raw_dealer(const char *endpoint)
{
    int linger = 0, timeout = 5000;
    if (!raw_ctx)
        raw_ctx = zmq_ctx_new();
    void *s = zmq_socket(raw_ctx, ZMQ_DEALER);
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    ck_assert_int_eq(zmq_connect(s, endpoint), 0);
    return s;
}

/* Sends m (job id, rank 0 and session sid filled in) on sock and checks that
 * the reply is of type `type` (ERROR: with `code`); returns the reply's flags
 * and, in *version if not NULL, its param_version. */
static uint32_t raw_ask(void *sock, const dcps_config_t *cfg, dcps_msg_t m, uint64_t sid,
                        uint32_t type, int code, uint64_t *version)
{
    dcps_frames_t f;
    dcps_msg_t r;
    char why[256];
    m.job_id = cfg->job_id;
    m.session = sid;
    m.n_params = cfg->n_params;
    ck_assert_int_ge(dcps_frames_send(sock, NULL, &m, NULL, NULL, 0), 0);
    ck_assert_msg(dcps_frames_recv(sock, &f, 0) > 0, "no answer to %s", dcps_msg_type_name(m.type));
    ck_assert_int_eq(dcps_frames_decode(&f, 0, cfg->job_id, &r, why, sizeof why), 0);
    ck_assert_msg(r.type == type, "%s answered with %s: %s", dcps_msg_type_name(m.type),
                  dcps_msg_type_name(r.type), r.error_text);
    if (type == DCPS_MSG_ERROR)
        ck_assert_msg(r.error_code == (uint32_t)-code, "%s", r.error_text);
    if (version)
        *version = r.param_version;
    dcps_frames_close(&f);
    return r.flags;
}

/* A push of rank 0 with seq, whose gradient is g (n values). */
static dcps_msg_t raw_push(uint64_t seq, const float *g, size_t n)
{
    dcps_msg_t m = {.type = DCPS_MSG_PUSH, .seq = seq, .nframes = 1};
    m.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_DENSE, DCPS_DTYPE_F32, n};
    m.payload[0] = (dcps_buf_t){g, n * sizeof *g};
    return m;
}

/* A push applied before the shard stopped and retried after it restored its
 * checkpoint is answered DUPLICATE, not applied twice: the checkpoint holds the
 * rank's session and its last push, and the restored shard takes requests of
 * that session without a new HELLO. Another session is not taken. */
START_TEST(restarted_shard_recognises_a_retried_push_and_its_session)
{
    char ep[256], job[512], e[512];
    const uint64_t sid = 0x5e55100000000001ull;
    const char *dir = ckdir();
    snprintf(job, sizeof job, "%s", server_job(dir));
    dcps_config_t cfg;
    ck_assert_msg(dcps_config_load(&cfg, job, NULL, 0, e, sizeof e) == 0, "%s", e);
    float w[210], g[210];
    uint64_t v;
    for (size_t j = 0; j < 210; j++)
        w[j] = (float)cos(0.3 * (double)j), g[j] = 0.01f;
    pid_t srv = h_server(job, 0, ep);
    ck_assert_msg(srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    void *d = raw_dealer(ep);
    raw_ask(d, &cfg, (dcps_msg_t){.type = DCPS_MSG_HELLO, .seq = 1}, sid, DCPS_MSG_WELCOME, 0,
            NULL);
    dcps_msg_t init = raw_push(2, w, 210);
    init.type = DCPS_MSG_INIT;
    raw_ask(d, &cfg, init, sid, DCPS_MSG_PUSH_ACK, 0, NULL);
    ck_assert_uint_eq(raw_ask(d, &cfg, raw_push(5, g, 210), sid, DCPS_MSG_PUSH_ACK, 0, &v), 0);
    ck_assert_uint_eq(v, 1);
    zmq_close(d);
    ck_assert_int_eq(h_stop(srv, 10000), 0); /* the final checkpoint */

    srv = h_server(job, 0, ep);
    ck_assert_msg(srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    d = raw_dealer(ep);
    ck_assert_uint_eq(raw_ask(d, &cfg, raw_push(5, g, 210), sid, DCPS_MSG_PUSH_ACK, 0, &v),
                      DCPS_FLAG_DUPLICATE);
    ck_assert_uint_eq(v, 1);
    raw_ask(d, &cfg, raw_push(4, g, 210), sid, DCPS_MSG_ERROR, DCPS_E_STATE, NULL);
    raw_ask(d, &cfg, raw_push(9, g, 210), sid ^ 1, DCPS_MSG_ERROR, DCPS_E_SESSION, NULL);
    dcps_msg_t next = raw_push(6, g, 210);
    next.step = 1; /* step 0 was pushed: DUPLICATE (docs/protocol.md, 7.4) */
    ck_assert_uint_eq(raw_ask(d, &cfg, next, sid, DCPS_MSG_PUSH_ACK, 0, &v), 0);
    ck_assert_uint_eq(v, 2);
    zmq_close(d);
    ck_assert_int_eq(h_stop(srv, 10000), 0);
    const char *log = h_slurp(h_path("server0", "err"));
    ck_assert_msg(strstr(log, "worker 0 rejoins in session 5e551000\u2026, which it opened "
                              "before this shard restarted"),
                  "%s", log);
    ck_assert_msg(strstr(log, "2 pushes (1 duplicates, 0 dropped)"), "%s", log);
    zmq_ctx_term(raw_ctx);
    raw_ctx = NULL;
}
END_TEST

/* A shard that restarts from a checkpoint written before a worker's HELLO does
 * not know the worker's session: the client says HELLO again with it, once,
 * and its call goes on. If another session holds the rank by then, the call
 * fails with LIVE and a sentence that says so. */
START_TEST(client_says_hello_again_to_a_shard_that_lost_its_session)
{
    char ep[256], job[512], e[512], text[2048];
    const char *dir = ckdir();
    int port = h_free_port();
    snprintf(text, sizeof text,
             "[job]\nname = ckpt-itest\nworkers = 1\n"
             "[servers]\nshards = tcp://127.0.0.1:%d\n"
             "[model]\nlayers = 20,10\n"
             "[optimizer]\nlr = 0.1\n"
             "[worker]\ntimeout_ms = 1000\nretries = 6\n"
             "[server]\ncheckpoint_dir = %s\ncheckpoint_every = 3600\nheartbeat_ms = 100\n"
             "dead_after_ms = 2000\n",
             port, dir);
    snprintf(job, sizeof job, "%s", h_write("lost.ini", text));
    float w[210] = {0}, g[210];
    for (size_t j = 0; j < 210; j++)
        g[j] = 0.01f;
    pid_t srv = h_server(job, 0, ep);
    ck_assert_msg(srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    dcps_client_t *c = dcps_client_open(job, 0, NULL, 0, &(int){0}, e, sizeof e);
    ck_assert_msg(c != NULL, "%s", e);
    ck_assert_int_eq(dcps_client_init(c, w), 0);
    ck_assert_int_eq(dcps_client_push_dense(c, g), 0);
    dcps_client_close(&c);
    ck_assert_int_eq(h_stop(srv, 10000), 0); /* a checkpoint of the first session */

    srv = h_server(job, 0, ep);
    ck_assert_msg(srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    c = dcps_client_open(job, 0, NULL, 0, &(int){0}, e, sizeof e);
    ck_assert_msg(c != NULL, "%s", e);
    ck_assert_int_eq(dcps_client_pull(c, w), 0);
    ck_assert_int_eq(dcps_client_push_dense(c, g), 0);
    kill(srv, SIGKILL); /* no checkpoint of this session */
    ck_assert_int_ne(h_wait(srv, 10000), 0);

    srv = h_server(job, 0, ep);
    ck_assert_msg(srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    ck_assert_msg(dcps_client_pull(c, w) == 0, "%s", dcps_client_error(c));
    ck_assert_msg(dcps_client_push_dense(c, g) == 0, "%s", dcps_client_error(c));
    ck_assert_msg(strstr(logged(), "does not know this worker's session (request outside the "
                                   "rank's session: rank 0's session is "),
                  "%s", logged());
    kill(srv, SIGKILL);
    ck_assert_int_ne(h_wait(srv, 10000), 0);

    /* Again, but another process takes rank 0 first. */
    srv = h_server(job, 0, ep);
    ck_assert_msg(srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    dcps_client_t *other = dcps_client_open(job, 0, NULL, 0, &(int){0}, e, sizeof e);
    ck_assert_msg(other != NULL, "%s", e);
    int rc = dcps_client_pull(c, w);
    ck_assert_int_eq(rc, DCPS_E_LIVE);
    ck_assert_msg(strstr(dcps_client_error(c), "did not know this worker's session, and refused "
                                               "its HELLO again: ") &&
                      strstr(dcps_client_error(c), "is another process running as this rank?"),
                  "%s", dcps_client_error(c));
    dcps_client_close(&other);
    dcps_client_close(&c);
    ck_assert_int_eq(h_stop(srv, 10000), 0);
}
END_TEST

/* A client of rank 0 whose model has n parameters, for a job with params =
 * auto (dcps_client_open has no size to give). NULL with *rc and e if refused. */
static dcps_client_t *connect_sized(const char *job, const char *endpoint, uint64_t n, int *rc,
                                    char *e, size_t elen)
{
    char set[300];
    dcps_config_t cfg;
    snprintf(set, sizeof set, "servers.shards=%s", endpoint);
    const char *ov[] = {set};
    ck_assert_int_eq(dcps_config_load(&cfg, job, ov, 1, e, elen), 0);
    ck_assert_uint_eq(cfg.n_params, 0);
    cfg.n_params = n;
    return dcps_client_new(&cfg, 0, rc, e, elen);
}

/* Starts shard 0 of job into *srv (its endpoint in ep) and returns its log so far. */
static const char *restart(const char *job, char *ep, pid_t *srv)
{
    *srv = h_server(job, 0, ep);
    ck_assert_msg(*srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    return h_slurp(h_path("server0", "err"));
}

/* [model] params = auto: the size rank 0 gave survives a restart through the
 * checkpoint (a worker of another size is refused, naming both); a restart
 * without a checkpoint is unsized again. */
START_TEST(auto_shard_restarted_from_a_checkpoint_keeps_its_size)
{
    char ep[256], e[512], job[512];
    int rc;
    const char *dir = ckdir();
    const char *text = h_slurp(server_job(dir));
    char with_auto[4096];
    snprintf(with_auto, sizeof with_auto, "%s[model]\n", text);
    /* server_job's [model] section comes before; a second [model] header is
     * the same section to libinih. */
    snprintf(with_auto + strlen(with_auto), sizeof with_auto - strlen(with_auto),
             "params = auto\n");
    snprintf(job, sizeof job, "%s", h_write("auto.ini", with_auto));
    pid_t srv = h_server(job, 0, ep);
    ck_assert_msg(srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    /* 300, not the 210 of the job's layers: the size comes from rank 0. */
    dcps_client_t *c = connect_sized(job, ep, 300, &rc, e, sizeof e);
    ck_assert_msg(c != NULL, "%s", e);
    float w[300], g[300], before[300], after[300];
    for (size_t j = 0; j < 300; j++)
        w[j] = (float)cos(0.3 * (double)j);
    ck_assert_int_eq(dcps_client_init(c, w), 0);
    for (int step = 0; step < 4; step++) {
        ck_assert_int_eq(dcps_client_pull(c, w), 0);
        for (size_t j = 0; j < 300; j++)
            g[j] = w[j] * 0.5f + 0.01f * (float)step;
        ck_assert_int_eq(dcps_client_push_dense(c, g), 0);
    }
    ck_assert_int_eq(dcps_client_pull(c, before), 0);
    dcps_client_close(&c);
    ck_assert_int_eq(h_stop(srv, 10000), 0); /* the final checkpoint */
    const char *log = h_slurp(h_path("server0", "err"));
    ck_assert_msg(strstr(log, "waits for rank 0 to size the model"), "%s", log);
    ck_assert_msg(strstr(log, "rank 0's model has 300 parameters: this shard serves [0, 300)"),
                  "%s", log);
    ck_assert_msg(strstr(log, "final checkpoint "), "%s", log);

    log = restart(job, ep, &srv);
    ck_assert_msg(strstr(log, "(version 4, initialised)") &&
                      strstr(log, "serves parameters [0, 300) of 300"),
                  "%s", log);
    /* Whoever comes first, the size is the checkpoint's. */
    ck_assert_ptr_null(connect_sized(job, ep, 210, &rc, e, sizeof e));
    ck_assert_int_eq(rc, DCPS_E_SIZE);
    ck_assert_msg(strstr(e, "worker's model has 210 parameters, this job has 300"), "%s", e);
    c = connect_sized(job, ep, 300, &rc, e, sizeof e);
    ck_assert_msg(c != NULL, "%s", e);
    ck_assert_int_eq(dcps_client_initialized(c), 1);
    ck_assert_int_eq(dcps_client_pull(c, after), 0);
    ck_assert_int_eq(memcmp(before, after, sizeof before), 0);
    dcps_client_close(&c);
    ck_assert_int_eq(h_stop(srv, 10000), 0);

    /* Without a checkpoint, nothing says the size: unsized until rank 0. */
    char moved[600];
    snprintf(moved, sizeof moved, "%s/../ckpt-old", dir);
    ck_assert_int_eq(rename(dir, moved), 0);
    log = restart(job, ep, &srv);
    ck_assert_msg(strstr(log, "no checkpoint in ") &&
                      strstr(log, "waits for rank 0 to size the model"),
                  "%s", log);
    ck_assert_int_eq(h_stop(srv, 10000), 0);
}
END_TEST

START_TEST(failed_final_checkpoint_makes_the_exit_status_1)
{
    char ep[256], job[512], moved[600];
    const char *dir = ckdir();
    snprintf(job, sizeof job, "%s", server_job(dir));
    pid_t srv = h_server(job, 0, ep);
    ck_assert_msg(srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    dcps_client_t *c = connect_to(job, ep);
    float w[210] = {0};
    ck_assert_int_eq(dcps_client_init(c, w), 0);
    dcps_client_close(&c);
    /* The directory goes away and a file takes its name: nothing can be written. */
    snprintf(moved, sizeof moved, "%s.moved", dir);
    ck_assert_int_eq(rename(dir, moved), 0);
    fclose(fopen(dir, "w"));
    ck_assert_int_eq(h_stop(srv, 10000), 1);
    const char *log = h_slurp(h_path("server0", "err"));
    char want[1200];
    snprintf(want, sizeof want,
             "final checkpoint of version 0 failed: cannot read checkpoint directory %s: Not a "
             "directory",
             dir);
    ck_assert_msg(strstr(log, want), "want \"%s\" in %s", want, log);
    ck_assert_msg(strstr(log, "stopped: version 0"), "%s", log);
}
END_TEST

static void expect_no_start(const char *dir, const char *const *whys, int n_whys)
{
    const char *job = server_job(dir);
    const char *argv[] = {
        "--config", job, "--shard", "0", "--endpoint-file", h_path("bad", "endpoint"), NULL};
    pid_t p = h_spawn("dcps-server", "bad", argv);
    ck_assert_int_gt(p, 0);
    int st = h_wait(p, 10000);
    const char *log = h_slurp(h_path("bad", "err"));
    ck_assert_msg(st == 1, "exit %d: %s", st, log);
    for (int i = 0; i < n_whys; i++)
        ck_assert_msg(strstr(log, whys[i]), "want \"%s\" in %s", whys[i], log);
    ck_assert_int_ne(access(h_path("bad", "endpoint"), F_OK), 0);
}

START_TEST(server_with_a_checkpoint_dir_that_is_a_file_does_not_start)
{
    const char *f = h_write("not-a-dir", "x\n");
    char why[1024];
    snprintf(why, sizeof why, "checkpoint directory %s is not a directory", f);
    const char *whys[] = {why, "not starting"};
    expect_no_start(f, whys, 2);
}
END_TEST

START_TEST(server_with_only_unusable_checkpoints_does_not_start)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/shard-0-0000000001-v000000000000.ckpt", ckdir());
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("DCPSCKPT and then nothing", f);
    fclose(f);
    const char *whys[] = {"refused: truncated: 25 of at least 128 bytes",
                          "none of the 1 checkpoints of shard 0", "move them out of"};
    expect_no_start(ckdir(), whys, 3);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("checkpoint_daemons");
    TCase *daemon = tcase_create("daemon");
    tcase_add_checked_fixture(daemon, setup, teardown);
    tcase_set_timeout(daemon, 60);
    tcase_add_test(daemon, restarted_server_serves_exactly_the_parameters_it_had);
    tcase_add_test(daemon, restarted_shard_recognises_a_retried_push_and_its_session);
    tcase_add_test(daemon, client_says_hello_again_to_a_shard_that_lost_its_session);
    tcase_add_test(daemon, auto_shard_restarted_from_a_checkpoint_keeps_its_size);
    tcase_add_test(daemon, failed_final_checkpoint_makes_the_exit_status_1);
    tcase_add_test(daemon, server_with_a_checkpoint_dir_that_is_a_file_does_not_start);
    tcase_add_test(daemon, server_with_only_unusable_checkpoints_does_not_start);
    suite_add_tcase(s, daemon);
    return dcps_test_run(s);
}
