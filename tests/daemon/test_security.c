/* dcps — [security] curve = true through real shards on 127.0.0.1 that admit
 * only the workers whose public keys are in worker_keys_dir (server/auth.h),
 * each only for the ranks its file names, while a refused worker learns why at
 * once (worker/client.c) instead of timing out; a key missing from the job or a
 * key file the shard cannot use stops either program before it binds, and
 * SIGHUP reads worker_keys_dir again. The key files on their own are
 * tests/test_security.c. Exits 77 when libzmq has no CURVE. */
#include <check.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/config.h"
#include "common/error.h"
#include "proto/frame.h"
#include "common/keys.h"
#include "tests/check_run.h"
#include "tests/harness.h"
#include "tests/security_keys.h"
#include "worker/dcps.h"

#define DATA "/usr/share/datasets/fashion-mnist/"

static void teardown(void)
{
    h_cleanup();
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The keys of a test: the shards' pair, workers 0 and 1 and a stranger, each a
 * secret key file (path) and its public key; worker_keys_dir holds w0@0.pub. */
typedef struct {
    char server[512], w0[512], w1[512], stranger[512], dir[512];
    char server_pub[48], w0_pub[48], w1_pub[48], stranger_pub[48];
} keys_t;

static void gen(const char *name, char *path, char *pub)
{
    char err[1024];
    snprintf(path, 512, "%s/%s", h_dir(), name);
    ck_assert_msg(dcps_key_generate(path, pub, err, sizeof err) == 0, "%s", err);
}

/* Writes a key file `name` holding pub (any text) into the workers' directory. */
static void admit(const char *name, const char *pub)
{
    char file[600], text[64];
    snprintf(file, sizeof file, "workers/%s", name);
    snprintf(text, sizeof text, "%s\n", pub);
    h_write(file, text);
}

static void make_keys(keys_t *k)
{
    gen("server", k->server, k->server_pub);
    gen("w0", k->w0, k->w0_pub);
    gen("w1", k->w1, k->w1_pub);
    gen("stranger", k->stranger, k->stranger_pub);
    snprintf(k->dir, sizeof k->dir, "%s/workers", h_dir());
    ck_assert_int_eq(mkdir(k->dir, 0755), 0);
    admit("w0@0.pub", k->w0_pub);
}

/* A job of one shard and one worker (rank 0 with w0's key), 12000 examples of
 * Fashion-MNIST for 2 epochs; extra goes into [worker]. */
static const char *curve_job(const keys_t *k, int metrics_port, const char *extra)
{
    static char text[8192];
    snprintf(text, sizeof text,
             "[job]\nname = sectest\nworkers = 1\n"
             "[servers]\nshards = tcp://127.0.0.1:*\n"
             "[model]\nlayers = 784,64,10\n"
             "[data]\ntrain_images = " DATA "train-images-idx3-ubyte.gz\n"
             "train_labels = " DATA "train-labels-idx1-ubyte.gz\n"
             "test_images = " DATA "t10k-images-idx3-ubyte.gz\n"
             "test_labels = " DATA "t10k-labels-idx1-ubyte.gz\n"
             "batch_size = 32\nepochs = 2\ntrain_limit = 12000\n"
             "[optimizer]\nlr = 0.1\n"
             "[worker]\nlog_every = 50\ntimeout_ms = 5000\n%s"
             "[server]\nmetrics_port = %d\n"
             "[security]\ncurve = true\nserver_secret_key_file = %s\nserver_public_key = %s\n"
             "worker_keys_dir = %s\nworker_secret_key_file = %s\n",
             extra, metrics_port, k->server, k->server_pub, k->dir, k->w0);
    /* Kept apart from h_write's path slots, which later calls reuse. */
    static char path[512];
    snprintf(path, sizeof path, "%s", h_write("job.ini", text));
    return path;
}

/* Waits up to ms for `what` to appear in the file at path; 1 if it did. */
static int wait_for(const char *path, const char *what, int ms)
{
    for (double until = now_ms() + ms; now_ms() < until; usleep(20000))
        if (strstr(h_slurp(path), what))
            return 1;
    return 0;
}

/* Occurrences of what in text. */
static int count(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what))
        n++;
    return n;
}

/* Opens rank 0 of job j in this process at endpoint ep with the secret key
 * file `secret` and the extra overrides; returns the client or NULL with *rc,
 * the sentence in err and the time it took in *ms. */
static dcps_client_t *open_client(const char *j, const char *ep, const char *secret,
                                  const char *extra, int *rc, char *err, size_t errlen, double *ms)
{
    char shards[300], key[600];
    snprintf(shards, sizeof shards, "servers.shards=%s", ep);
    snprintf(key, sizeof key, "security.worker_secret_key_file=%s", secret);
    const char *ov[] = {shards, key, extra ? extra : "worker.log_every=50"};
    double t0 = now_ms();
    dcps_client_t *c = dcps_client_open(j, 0, ov, 3, rc, err, errlen);
    *ms = now_ms() - t0;
    return c;
}

/* The line the shard logs for a refused key: its first 8 characters. */
static const char *refusal_of(const keys_t *k, const char *pub)
{
    static char line[1024];
    snprintf(line, sizeof line,
             "refused a connection from 127.0.0.1: CURVE key %.8s\u2026 is not in "
             "worker_keys_dir %s",
             pub, k->dir);
    return line;
}

/* (b) and (c): a worker with a listed key trains to the end while a worker and
 * a library client with an unlisted key are refused at once, each refusal
 * logged once and counted, and plain clients cannot talk to the shard at all. */
START_TEST(a_listed_worker_trains_while_strangers_are_refused_at_once)
{
    keys_t k;
    char ep[256], shards[300], err[1024], key[600];
    int port = h_free_port(), rc;
    double ms;
    make_keys(&k);
    /* delay_ms: the good worker trains for some seconds, so the refusals
     * below happen while it is being served. */
    const char *j = curve_job(&k, port, "delay_ms = 4\n");
    pid_t server = h_server(j, 0, ep);
    ck_assert_msg(server > 0, "server: %s", h_slurp(h_path("server0", "err")));
    char log[512]; /* h_path's buffers are reused by later calls */
    snprintf(log, sizeof log, "%s", h_path("server0", "err"));
    ck_assert_ptr_nonnull(strstr(h_slurp(log), "CURVE: this shard's public key is "));
    ck_assert_ptr_nonnull(strstr(h_slurp(log), k.server_pub));
    snprintf(shards, sizeof shards, "servers.shards=%s", ep);

    const char *good_argv[] = {"--config", j, "--rank", "0", "--set", shards, NULL};
    pid_t good = h_spawn("dcps-worker", "good", good_argv);
    ck_assert_msg(wait_for(log, "worker 0 joined", 20000), "%s", h_slurp(log));

    /* A worker process with an unlisted key: exit 1 in well under the first
     * attempt's timeout_ms (5 s), saying why. */
    snprintf(key, sizeof key, "security.worker_secret_key_file=%s", k.stranger);
    const char *bad_argv[] = {"--config", j, "--rank", "0", "--set", shards, "--set", key, NULL};
    double t0 = now_ms();
    int status = h_wait(h_spawn("dcps-worker", "stranger", bad_argv), 20000);
    double took = now_ms() - t0;
    const char *said = h_slurp(h_path("stranger", "err"));
    ck_assert_msg(status == 1, "status %d: %s", status, said);
    ck_assert_msg(took < 2500, "the refused worker took %.0f ms", took);
    char want[512];
    snprintf(want, sizeof want,
             "shard 0 (%s) refused this worker's CURVE key (handshake failed: 400)", ep);
    ck_assert_msg(strstr(said, want), "%s", said);

    /* The library: DCPS_E_AUTH and the same sentence, at once. */
    dcps_client_t *c = open_client(j, ep, k.stranger, NULL, &rc, err, sizeof err, &ms);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(rc, DCPS_E_AUTH);
    ck_assert_msg(strstr(err, want), "%s", err);
    ck_assert_msg(ms < 1500, "dcps_client_open took %.0f ms to fail", ms);
    ck_assert_msg(h_running(good), "the good worker ended before the strangers were refused");

    /* A plain client cannot even complete the handshake: with a short
     * timeout it gives up (it must not hang), and the shard reads nothing. */
    const char *plain[] = {shards, "security.curve=false", "worker.timeout_ms=200",
                           "worker.retries=1"};
    t0 = now_ms();
    c = dcps_client_open(j, 0, plain, 4, &rc, err, sizeof err);
    ck_assert_ptr_null(c);
    ck_assert_msg(rc == DCPS_E_TIMEOUT || rc == DCPS_E_ZMQ, "%d: %s", rc, err);
    ck_assert_msg(now_ms() - t0 < 3000, "the plain client took %.0f ms", now_ms() - t0);
    /* And a raw plain DEALER's message is never read by the shard. */
    void *ctx = zmq_ctx_new(), *raw = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(raw, ZMQ_LINGER, &linger, sizeof linger);
    ck_assert_int_eq(zmq_connect(raw, ep), 0);
    zmq_send(raw, "garbage", 7, ZMQ_DONTWAIT);
    zmq_pollitem_t item = {raw, 0, ZMQ_POLLIN, 0};
    ck_assert_int_eq(zmq_poll(&item, 1, 500), 0);
    zmq_close(raw);
    zmq_ctx_term(ctx);

    status = h_wait(good, 300000);
    const char *out = h_slurp(h_path("good", "out"));
    ck_assert_msg(status == 0, "good worker exited %d: %s", status,
                  h_slurp(h_path("good", "err")));
    double acc = h_final(out, "test_acc");
    ck_assert_msg(acc >= 0.70, "test_acc %g (chance is 0.10): %s", acc, out);
    ck_assert_double_eq(h_final(out, "steps"), 12000 / 32 * 2);

    /* Each refused connection once in the log, and in the metric. */
    ck_assert_int_eq(count(h_slurp(log), refusal_of(&k, k.stranger_pub)), 2);
    ck_assert_int_eq(count(h_slurp(log), "refused a connection"), 2);
    snprintf(want, sizeof want,
             "admitted a connection from 127.0.0.1: CURVE key %.8s\u2026 (w0@0.pub)", k.w0_pub);
    ck_assert_msg(strstr(h_slurp(log), want), "%s", h_slurp(log));
    double refused = NAN;
    for (int i = 0; i < 100 && refused != 2; i++, usleep(50000))
        refused = h_metric(port, "dcps_auth_refused_total{shard=\"0\"}");
    ck_assert_double_eq(refused, 2);
    ck_assert_int_eq(h_stop(server, 5000), 0);
    ck_assert_ptr_nonnull(strstr(h_slurp(log), " 0 bad messages"));
}
END_TEST

/* (e) A key missing from the job stops either program before it binds or
 * connects, with exit status 2, naming the key. */
START_TEST(a_missing_key_stops_each_program_with_status_2_naming_it)
{
    keys_t k;
    make_keys(&k);
    const char *j = curve_job(&k, 0, "");
    char epf[512];
    snprintf(epf, sizeof epf, "%s", h_path("bare", "endpoint"));
    static const char *const server_keys[] = {"server_secret_key_file", "worker_keys_dir"};
    static const char *const worker_keys[] = {"server_public_key", "worker_secret_key_file"};
    char set[128], want[256];
    for (int i = 0; i < 2; i++) {
        snprintf(set, sizeof set, "security.%s=", server_keys[i]);
        const char *argv[] = {"--config", j, "--shard", "0", "--set", set, "--endpoint-file", epf,
                              NULL};
        int status = h_wait(h_spawn("dcps-server", "bare", argv), 10000);
        const char *err = h_slurp(h_path("bare", "err"));
        ck_assert_msg(status == 2, "status %d: %s", status, err);
        snprintf(want, sizeof want, "job.ini: [security] curve = true needs [security] %s (",
                 server_keys[i]);
        ck_assert_msg(strstr(err, want), "%s", err);
        ck_assert_int_ne(access(epf, F_OK), 0); /* never bound */

        snprintf(set, sizeof set, "security.%s=", worker_keys[i]);
        const char *wargv[] = {"--config", j, "--rank", "0", "--set", set, NULL};
        status = h_wait(h_spawn("dcps-worker", "bare", wargv), 10000);
        err = h_slurp(h_path("bare", "err"));
        ck_assert_msg(status == 2, "status %d: %s", status, err);
        snprintf(want, sizeof want, "job.ini: [security] curve = true needs [security] %s (",
                 worker_keys[i]);
        ck_assert_msg(strstr(err, want), "%s", err);

        /* The library says the same, as a code: it never exits. */
        char e[1024];
        int rc;
        const char *ov[] = {set};
        ck_assert_ptr_null(dcps_client_open(j, 0, ov, 1, &rc, e, sizeof e));
        ck_assert_int_eq(rc, DCPS_E_CONFIG);
        ck_assert_msg(strstr(e, want + strlen("job.ini: ")), "%s", e);
    }
}
END_TEST

/* Key files the shard cannot use stop it before it binds, with status 1 and
 * the file's name; a worker's too-open secret key stops the worker. */
START_TEST(unusable_key_files_stop_the_server_before_it_binds)
{
    keys_t k;
    char set[700], want[1200], dir[600];
    make_keys(&k);
    const char *j = curve_job(&k, h_free_port(), "");
    char epf[512];
    snprintf(epf, sizeof epf, "%s", h_path("unusable", "endpoint"));
    snprintf(dir, sizeof dir, "%s/none", h_dir());
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    struct {
        const char *set, *want;
    } cases[4];
    char sets[4][700], wants[4][1200];
    snprintf(sets[0], 700, "security.worker_keys_dir=%s/missing", h_dir());
    snprintf(wants[0], 1200, "%s/missing: cannot open the directory: No such file or directory",
             h_dir());
    snprintf(sets[1], 700, "security.worker_keys_dir=%s", dir);
    snprintf(wants[1], 1200, "%s: no *.pub file, so no worker could connect", dir);
    snprintf(sets[2], 700, "security.server_public_key=%s", k.w0_pub);
    snprintf(wants[2], 1200, "is not the public key of server_secret_key_file %s, which is %s",
             k.server, k.server_pub);
    snprintf(sets[3], 700, "worker.log_every=50"); /* a bad .pub in the directory, below */
    snprintf(wants[3], 1200, "%s/zz.pub: is 5 characters; a Z85 key has 40", k.dir);
    for (int i = 0; i < 4; i++) {
        cases[i].set = sets[i];
        cases[i].want = wants[i];
    }
    for (int i = 0; i < 4; i++) {
        if (i == 3)
            admit("zz.pub", "short");
        const char *argv[] = {"--config", j, "--shard", "0", "--set", cases[i].set,
                              "--endpoint-file", epf, NULL};
        int status = h_wait(h_spawn("dcps-server", "unusable", argv), 10000);
        const char *err = h_slurp(h_path("unusable", "err"));
        ck_assert_msg(status == 1, "case %d: status %d: %s", i, status, err);
        ck_assert_msg(strstr(err, cases[i].want), "case %d: %s", i, err);
        ck_assert_ptr_nonnull(strstr(err, "not starting"));
        ck_assert_ptr_null(strstr(err, "metrics at")); /* nothing bound, not even metrics */
        ck_assert_int_ne(access(epf, F_OK), 0);
    }

    /* A secret key that others may read: the shard and the worker refuse it. */
    ck_assert_int_eq(chmod(k.server, 0644), 0);
    const char *argv[] = {"--config", j, "--shard", "0", "--endpoint-file", epf, NULL};
    int status = h_wait(h_spawn("dcps-server", "open", argv), 10000);
    const char *err = h_slurp(h_path("open", "err"));
    snprintf(want, sizeof want, "%s: permissions 0644 are too open for a secret key", k.server);
    ck_assert_msg(status == 1 && strstr(err, want), "status %d: %s", status, err);
    ck_assert_int_ne(access(epf, F_OK), 0);
    ck_assert_int_eq(chmod(k.w0, 0640), 0);
    snprintf(set, sizeof set, "servers.shards=tcp://127.0.0.1:9");
    const char *wargv[] = {"--config", j, "--rank", "0", "--set", set, NULL};
    status = h_wait(h_spawn("dcps-worker", "open", wargv), 10000);
    err = h_slurp(h_path("open", "err"));
    snprintf(want, sizeof want,
             "%s: permissions 0640 are too open for a secret key: group and others must have no "
             "access (chmod 600 %s) ([security] worker_secret_key_file)",
             k.w0, k.w0);
    ck_assert_msg(status == 1 && strstr(err, want), "status %d: %s", status, err);
}
END_TEST

/* A wrong server_public_key, or a shard without CURVE: no refusal comes, the
 * shard closes the handshake (or the mechanisms differ), and the worker says
 * what to check after a few such closes, not after its timeouts. */
START_TEST(a_wrong_server_key_or_a_plain_shard_gives_a_clear_error)
{
    keys_t k;
    char ep[256], err[1024], set[128];
    int rc;
    double ms;
    make_keys(&k);
    const char *j = curve_job(&k, 0, "");
    pid_t server = h_server(j, 0, ep);
    ck_assert_int_gt(server, 0);
    snprintf(set, sizeof set, "security.server_public_key=%s", k.w1_pub);
    dcps_client_t *c = open_client(j, ep, k.w0, set, &rc, err, sizeof err, &ms);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(rc, DCPS_E_AUTH);
    ck_assert_msg(strstr(err, "closed the connection during the CURVE handshake 3 times in a row"),
                  "%s", err);
    ck_assert_msg(ms < 3000, "took %.0f ms", ms);
    ck_assert_int_eq(h_stop(server, 5000), 0);

    /* The same job with curve off on the shard's side only. */
    const char *argv[] = {"--config", j, "--shard", "0", "--endpoint-file",
                          h_path("plain", "endpoint"), "--set", "security.curve=false", NULL};
    server = h_spawn("dcps-server", "plain", argv);
    ck_assert_msg(wait_for(h_path("plain", "endpoint"), "tcp://", 10000), "%s",
                  h_slurp(h_path("plain", "err")));
    snprintf(ep, sizeof ep, "%s", h_slurp(h_path("plain", "endpoint")));
    ep[strcspn(ep, "\n")] = '\0';
    c = open_client(j, ep, k.w0, NULL, &rc, err, sizeof err, &ms);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(rc, DCPS_E_AUTH);
    /* Which it is depends on who notices the mismatch first: the worker
     * ("mechanism mismatch") or the shard (it closes the connection). */
    ck_assert_msg(strstr(err, "does not use CURVE (handshake failed: mechanism mismatch)") ||
                      strstr(err, "closed the connection during the CURVE handshake 3 times"),
                  "%s", err);
    ck_assert_msg(strstr(err, "[security] curve = true"), "%s", err);
    ck_assert_msg(ms < 3000, "took %.0f ms", ms);
    ck_assert_int_eq(h_stop(server, 5000), 0);
}
END_TEST

/* SIGHUP reads worker_keys_dir again: a key added is admitted, a key removed
 * is refused from the next connection on, and a directory that has become
 * unusable is refused as a whole, keeping the keys in force. */
START_TEST(sighup_rereads_the_worker_keys)
{
    keys_t k;
    char ep[256], err[1024], path[700];
    int rc;
    double ms;
    make_keys(&k);
    const char *j = curve_job(&k, 0, "");
    pid_t server = h_server(j, 0, ep);
    ck_assert_int_gt(server, 0);
    char log[512]; /* h_path's buffers are reused by later calls */
    snprintf(log, sizeof log, "%s", h_path("server0", "err"));

    dcps_client_t *c = open_client(j, ep, k.w1, NULL, &rc, err, sizeof err, &ms);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(rc, DCPS_E_AUTH);

    admit("w1@0.pub", k.w1_pub);
    kill(server, SIGHUP);
    ck_assert_msg(wait_for(log, "worker keys: 2 in ", 5000), "%s", h_slurp(log));
    ck_assert_ptr_nonnull(strstr(h_slurp(log), ", 1 added, 0 removed"));
    c = open_client(j, ep, k.w1, NULL, &rc, err, sizeof err, &ms);
    ck_assert_msg(c != NULL, "%s", err);
    dcps_client_close(&c);

    snprintf(path, sizeof path, "%s/w1@0.pub", k.dir);
    ck_assert_int_eq(unlink(path), 0);
    kill(server, SIGHUP);
    ck_assert_msg(wait_for(log, ", 0 added, 1 removed", 5000), "%s", h_slurp(log));
    c = open_client(j, ep, k.w1, NULL, &rc, err, sizeof err, &ms);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(rc, DCPS_E_AUTH);

    admit("bad.pub", "not a key");
    kill(server, SIGHUP);
    ck_assert_msg(wait_for(log, "reload refused: ", 5000), "%s", h_slurp(log));
    ck_assert_ptr_nonnull(strstr(h_slurp(log), "/bad.pub: is 9 characters; a Z85 key has 40"));
    c = open_client(j, ep, k.w0, NULL, &rc, err, sizeof err, &ms); /* w0 still admitted */
    ck_assert_msg(c != NULL, "%s", err);
    dcps_client_close(&c);
    ck_assert_int_eq(count(h_slurp(log), refusal_of(&k, k.w1_pub)), 2);
    ck_assert_int_eq(h_stop(server, 5000), 0);
}
END_TEST

/* A raw CURVE DEALER with the key pair in secret_path (its public key pub),
 * connected to the shard at ep whose public key is server_pub. */
static void *curve_dealer(void *ctx, const char *ep, const char *server_pub,
                          const char *secret_path, const char *pub)
{
    uint8_t secret[DCPS_KEY_BYTES], public[DCPS_KEY_BYTES], server[DCPS_KEY_BYTES];
    const char *err;
    int linger = 0, timeout = 5000;
    ck_assert_msg(read_key(secret_path, true, secret, &err) == 0, "%s", err);
    zmq_z85_decode(public, pub);
    zmq_z85_decode(server, server_pub);
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    ck_assert_int_eq(zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, server, sizeof server), 0);
    ck_assert_int_eq(zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, public, sizeof public), 0);
    ck_assert_int_eq(zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, secret, sizeof secret), 0);
    ck_assert_int_eq(zmq_connect(s, ep), 0);
    return s;
}

/* Sends a request of type for rank in session sid on s and checks the reply's
 * type (and for ERROR its code and that its text holds text). */
static void curve_ask(void *s, const dcps_config_t *cfg, uint32_t type, uint32_t rank,
                      uint64_t sid, uint32_t want, int code, const char *text)
{
    static uint64_t seq;
    dcps_msg_t m = {.type = type, .job_id = cfg->job_id, .rank = rank, .session = sid,
                    .seq = ++seq, .n_params = cfg->n_params}, r;
    dcps_frames_t f;
    char why[256];
    ck_assert_int_ge(dcps_frames_send(s, NULL, &m, NULL, NULL, 0), 0);
    ck_assert_msg(dcps_frames_recv(s, &f, 0) > 0, "no answer to %s", dcps_msg_type_name(type));
    ck_assert_int_eq(dcps_frames_decode(&f, 0, cfg->job_id, &r, why, sizeof why), 0);
    ck_assert_msg(r.type == want, "%s for rank %u: %s: %s", dcps_msg_type_name(type), rank,
                  dcps_msg_type_name(r.type), r.error_text);
    if (want == DCPS_MSG_ERROR)
        ck_assert_msg(r.error_code == (uint32_t)-code && strstr(r.error_text, text), "%s",
                      r.error_text);
    dcps_frames_close(&f);
}

/* A key named for rank 1 cannot HELLO or push as rank 0 (AUTH, before the
 * session is looked at), through the library neither; a SIGHUP that renames
 * its file for ranks 0-1 lets it, on the same connection, and one that removes
 * the file refuses its next request. */
START_TEST(a_key_speaks_only_for_the_ranks_its_file_names)
{
    keys_t k;
    char ep[256], err[1024], from[700], to[700], e[512];
    int rc;
    double ms;
    make_keys(&k);
    admit("w1@1.pub", k.w1_pub);
    char text[8192];
    snprintf(text, sizeof text, "%s", h_slurp(curve_job(&k, 0, "")));
    char *one = strstr(text, "workers = 1\n");
    ck_assert_ptr_nonnull(one);
    one[10] = '2'; /* a job of 2 workers */
    const char *j = h_write("job2.ini", text);
    dcps_config_t cfg;
    ck_assert_msg(dcps_config_load(&cfg, j, NULL, 0, e, sizeof e) == 0, "%s", e);
    ck_assert_int_eq(cfg.workers, 2);
    pid_t server = h_server(j, 0, ep);
    ck_assert_msg(server > 0, "server: %s", h_slurp(h_path("server0", "err")));
    char log[512];
    snprintf(log, sizeof log, "%s", h_path("server0", "err"));

    void *ctx = zmq_ctx_new(), *s = curve_dealer(ctx, ep, k.server_pub, k.w1, k.w1_pub);
    curve_ask(s, &cfg, DCPS_MSG_HELLO, 0, 0xa1, DCPS_MSG_ERROR, DCPS_E_AUTH,
              "the CURVE key of w1@1.pub may not speak for rank 0");
    curve_ask(s, &cfg, DCPS_MSG_HELLO, 1, 0xa1, DCPS_MSG_WELCOME, 0, NULL);
    curve_ask(s, &cfg, DCPS_MSG_HEARTBEAT, 0, 0xa1, DCPS_MSG_ERROR, DCPS_E_AUTH,
              "may not speak for rank 0");
    curve_ask(s, &cfg, DCPS_MSG_HEARTBEAT, 1, 0xa1, DCPS_MSG_HEARTBEAT, 0, NULL);
    /* The library says the same, at once. */
    dcps_client_t *c = open_client(j, ep, k.w1, NULL, &rc, err, sizeof err, &ms);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(rc, DCPS_E_AUTH);
    ck_assert_msg(strstr(err, "refused HELLO: ") &&
                      strstr(err, "the CURVE key of w1@1.pub may not speak for rank 0"),
                  "%s", err);
    ck_assert_msg(ms < 2000, "took %.0f ms", ms);

    snprintf(from, sizeof from, "%s/w1@1.pub", k.dir);
    snprintf(to, sizeof to, "%s/w1@0-1.pub", k.dir);
    ck_assert_int_eq(rename(from, to), 0);
    kill(server, SIGHUP);
    ck_assert_msg(wait_for(log, "worker keys: 2 in ", 5000), "%s", h_slurp(log));
    curve_ask(s, &cfg, DCPS_MSG_HELLO, 0, 0xa2, DCPS_MSG_WELCOME, 0, NULL);

    ck_assert_int_eq(unlink(to), 0);
    kill(server, SIGHUP);
    ck_assert_msg(wait_for(log, ", 0 added, 1 removed", 5000), "%s", h_slurp(log));
    curve_ask(s, &cfg, DCPS_MSG_HEARTBEAT, 1, 0xa1, DCPS_MSG_ERROR, DCPS_E_AUTH,
              "is no longer in worker_keys_dir");
    zmq_close(s);
    zmq_ctx_term(ctx);
    ck_assert_int_eq(h_stop(server, 5000), 0);
    /* The library's refusal and the three above. */
    ck_assert_msg(strstr(h_slurp(log), " 4 bad messages"), "%s", h_slurp(log));
}
END_TEST

/* The rounds' link between the shards of a sync job (server/rounds.h) under
 * curve: shard 1 connects to shard 0 with the job's server key pair, which
 * shard 0 admits as another shard of the job; a worker trains to the end and
 * both shards close the same rounds. */
START_TEST(the_shards_of_a_sync_job_agree_their_rounds_over_curve)
{
    keys_t k;
    char ep0[256], ep1[256], shards[600], text[8192];
    make_keys(&k);
    snprintf(text, sizeof text, "%s", h_slurp(curve_job(&k, 0, "")));
    char *at = strstr(text, "shards = tcp://127.0.0.1:*\n");
    ck_assert_ptr_nonnull(at);
    char rest[8192];
    snprintf(rest, sizeof rest, "%s", at + strlen("shards = tcp://127.0.0.1:*\n"));
    snprintf(at, sizeof text - (size_t)(at - text),
             "shards = tcp://127.0.0.1:*, tcp://127.0.0.1:*\n%s[job]\nmode = sync\n", rest);
    /* [job] twice: the loader takes keys of a section wherever it appears. */
    const char *j = h_write("sync2.ini", text);
    static char job[512];
    snprintf(job, sizeof job, "%s", j);
    pid_t s0 = h_server(job, 0, ep0), s1 = h_server(job, 1, ep1);
    ck_assert_msg(s0 > 0 && s1 > 0, "%s%s", h_slurp(h_path("server0", "err")),
                  h_slurp(h_path("server1", "err")));
    snprintf(shards, sizeof shards, "servers.shards=%s,%s", ep0, ep1);
    const char *argv[] = {"--config", job, "--rank", "0", "--set", shards, "--set",
                          "data.epochs=1", "--set", "data.train_limit=1600", NULL};
    int st = h_wait(h_spawn("dcps-worker", "w", argv), 120000);
    ck_assert_msg(st == 0, "worker exited %d: %s", st, h_slurp(h_path("w", "err")));
    ck_assert_int_eq(h_stop(s1, 10000), 0);
    ck_assert_int_eq(h_stop(s0, 10000), 0);
    char log0[65536], log1[65536];
    snprintf(log0, sizeof log0, "%s", h_slurp(h_path("server0", "err")));
    snprintf(log1, sizeof log1, "%s", h_slurp(h_path("server1", "err")));
    ck_assert_msg(strstr(log0, "(another shard of this job)"), "%s", log0);
    const char *r0 = strstr(log0, "notice: rounds: "), *r1 = strstr(log1, "notice: rounds: ");
    ck_assert_msg(r0 && r1, "%s\n%s", log0, log1);
    ck_assert_msg(strncmp(r0, "notice: rounds: 50 closed, digest ", 34) == 0, "%s", r0);
    ck_assert_msg(strncmp(r0, r1, strcspn(r0, "\n")) == 0, "shard 0: %.60s, shard 1: %.60s", r0,
                  r1);
}
END_TEST

int main(void)
{
    if (!dcps_keys_available()) {
        printf("SKIP: this libzmq has no CURVE\n");
        return 77;
    }
    Suite *s = suite_create("security_daemons");
    TCase *shards = tcase_create("shards");
    tcase_add_checked_fixture(shards, NULL, teardown);
    tcase_set_timeout(shards, 300);
    tcase_add_test(shards, a_listed_worker_trains_while_strangers_are_refused_at_once);
    tcase_add_test(shards, a_missing_key_stops_each_program_with_status_2_naming_it);
    tcase_add_test(shards, unusable_key_files_stop_the_server_before_it_binds);
    tcase_add_test(shards, a_wrong_server_key_or_a_plain_shard_gives_a_clear_error);
    tcase_add_test(shards, sighup_rereads_the_worker_keys);
    tcase_add_test(shards, a_key_speaks_only_for_the_ranks_its_file_names);
    tcase_add_test(shards, the_shards_of_a_sync_job_agree_their_rounds_over_curve);
    suite_add_tcase(s, shards);
    return dcps_test_run(s);
}

