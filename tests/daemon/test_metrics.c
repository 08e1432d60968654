/* dcps — the server's Prometheus endpoint (server/metrics.h), through a real
 * dcps-server: a worker of libdcps pushes and pulls, and /metrics, fetched with
 * a plain HTTP/1.0 GET, must count exactly that, in Prometheus's text format;
 * other paths and methods are refused; a metrics port that is taken stops the
 * daemon before it binds its ZeroMQ endpoint. */
#include <check.h>

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/config.h"
#include "server/parts.h"
#include "server/session.h"
#include "tests/check_run.h"
#include "tests/harness.h"
#include "worker/internal.h"

#define N_PARAMS 210 /* layers 20,10: 20·10 + 10 */
/* What a shard holds per rank beside the floats: its session record, restore
 * flag, and records of pushes in parts (the kind sequence_numbers). */
#define RANK_RECORDS                                                                              \
    (sizeof(dcps_session_t) + sizeof(bool) + sizeof(dcps_parts_t) + sizeof(dcps_carried_t))

static void teardown(void)
{
    h_cleanup();
}

/* A job of one shard, with metrics on port; extra goes into [job], server_extra
 * into [server]. */
static const char *job_with(int port, int workers, const char *extra, const char *server_extra)
{
    char text[1024];
    snprintf(text, sizeof text,
             "[job]\nname = metrics\nworkers = %d\n%s"
             "[servers]\nshards = tcp://127.0.0.1:*\n"
             "[model]\nlayers = 20,10\n"
             "[worker]\ntimeout_ms = 5000\n"
             "[server]\nmetrics_port = %d\n%s",
             workers, extra, port, server_extra);
    return h_write("job.ini", text);
}

static const char *job(int port, int workers, const char *extra)
{
    return job_with(port, workers, extra, "");
}

/* A socket listening on every IPv4 interface at an ephemeral port. */
static int listener(int *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(fd, 4), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

/* A port that was free a moment ago. */
static int free_port(void)
{
    int port, fd = listener(&port);
    close(fd);
    return port;
}

/* The whole answer to `method path` from address:port over HTTP/1.0 (the server
 * closes the connection after it), in a static buffer; "" if the connection
 * failed. */
static const char *http_at(const char *address, int port, const char *method, const char *path)
{
    static char buf[1 << 16];
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    ck_assert_int_eq(inet_pton(AF_INET, address, &a.sin_addr), 1);
    struct timeval tv = {5, 0};
    char req[256];
    size_t n = 0;
    buf[0] = '\0';
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return buf;
    }
    int len = snprintf(req, sizeof req, "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", method, path);
    ck_assert_int_eq(send(fd, req, (size_t)len, MSG_NOSIGNAL), len);
    for (ssize_t got; n < sizeof buf - 1 && (got = recv(fd, buf + n, sizeof buf - 1 - n, 0)) > 0;)
        n += (size_t)got;
    buf[n] = '\0';
    close(fd);
    return buf;
}

static const char *http(int port, const char *method, const char *path)
{
    return http_at("127.0.0.1", port, method, path);
}

static int status_of(const char *response)
{
    int status = 0;
    sscanf(response, "HTTP/1.%*d %d", &status);
    return status;
}

static const char *body_of(const char *response)
{
    const char *b = strstr(response, "\r\n\r\n");
    return b ? b + 4 : "";
}

/* The value of the sample `series` (name and labels exactly as written); NAN if
 * there is none. */
static double sample(const char *text, const char *series)
{
    size_t len = strlen(series);
    for (const char *line = text; *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : "")
        if (strncmp(line, series, len) == 0 && line[len] == ' ')
            return strtod(line + len + 1, NULL);
    return NAN;
}

/* The histogram `prefix` (e.g. dcps_staleness_bucket{shard="0",): its buckets
 * in order must be cumulative (never decreasing), end with le="+Inf", and that
 * bucket equals `count`. Returns the number of buckets. */
static int check_buckets(const char *text, const char *prefix, double count)
{
    size_t len = strlen(prefix);
    double last = 0;
    int n = 0, inf = 0;
    for (const char *line = text; *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : "") {
        if (strncmp(line, prefix, len) != 0)
            continue;
        ck_assert_msg(!inf, "a bucket after +Inf in %s", prefix);
        ck_assert_msg(strncmp(line + len, "le=\"", 4) == 0, "no le label: %.80s", line);
        double v = strtod(strchr(line, ' ') + 1, NULL);
        ck_assert_msg(v >= last, "%s buckets decrease: %.80s", prefix, line);
        last = v;
        inf = strncmp(line + len, "le=\"+Inf\"", 9) == 0;
        n++;
    }
    ck_assert_msg(inf, "%s has no +Inf bucket", prefix);
    ck_assert_double_eq(last, count);
    return n;
}

/* Every sample line names a family announced by HELP and TYPE lines before it,
 * and carries shard="0" as its first label. */
static void check_format(const char *text)
{
    char types[64][64];
    int n_types = 0;
    for (const char *line = text; *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : "") {
        char name[64], type[16];
        if (sscanf(line, "# TYPE %63s %15s", name, type) == 2) {
            ck_assert_int_lt(n_types, 64);
            strcpy(types[n_types++], name);
            ck_assert_msg(strcmp(type, "counter") == 0 || strcmp(type, "gauge") == 0 ||
                              strcmp(type, "histogram") == 0,
                          "type %s", type);
            continue;
        }
        if (*line == '#' || *line == '\n')
            continue;
        size_t len = strcspn(line, "{ ");
        ck_assert_msg(strncmp(line + len, "{shard=\"0\"", 10) == 0, "no shard label: %.80s", line);
        bool known = false;
        for (int i = 0; i < n_types && !known; i++) {
            size_t tl = strlen(types[i]);
            const char *rest = line + tl;
            known = tl <= len && strncmp(line, types[i], tl) == 0 &&
                    (rest == line + len || strncmp(rest, "_bucket{", 8) == 0 ||
                     strncmp(rest, "_sum{", 5) == 0 || strncmp(rest, "_count{", 7) == 0);
        }
        ck_assert_msg(known, "sample before its TYPE line: %.80s", line);
    }
}

/* Scrapes /metrics until dcps_pushes_total and dcps_pulls_total read the
 * expected values (the server publishes every 500 ms), for at most 5 s; returns
 * the body of the last answer. */
static const char *scrape_until(int port, double pushes, double pulls)
{
    const char *r = "";
    for (int i = 0; i < 100; i++) {
        r = http(port, "GET", "/metrics");
        ck_assert_msg(status_of(r) == 200, "GET /metrics: %.200s", r);
        if (sample(body_of(r), "dcps_pushes_total{shard=\"0\"}") == pushes &&
            sample(body_of(r), "dcps_pulls_total{shard=\"0\"}") == pulls)
            break;
        nanosleep(&(struct timespec){0, 50000000}, NULL);
    }
    ck_assert_ptr_nonnull(strstr(r, "\r\nContent-Type: text/plain; version=0.0.4"));
    return body_of(r);
}

/* Starts the server of job j and opens rank 0 on it; *cfg is the loaded job. */
static dcps_client_t *start(const char *j, pid_t *server, dcps_config_t **cfg)
{
    char ep[256], shards[300], err[512];
    int rc;
    *server = h_server(j, 0, ep);
    ck_assert_msg(*server > 0, "server did not start: %s", h_slurp(h_path("server0", "err")));
    snprintf(shards, sizeof shards, "servers.shards=%s", ep);
    const char *ov[] = {shards};
    *cfg = malloc(sizeof **cfg);
    ck_assert_msg(dcps_config_load(*cfg, j, ov, 1, err, sizeof err) == 0, "%s", err);
    dcps_client_t *cl = dcps_client_new(*cfg, 0, &rc, err, sizeof err);
    ck_assert_msg(cl != NULL, "%s", err);
    return cl;
}

/* Closes rank 0's client, stops the server (status 0) and frees what start and
 * the test allocated. */
static void finish(dcps_client_t *cl, pid_t server, float *w, float *g, dcps_config_t *cfg)
{
    dcps_client_close(&cl);
    ck_assert_int_eq(h_stop(server, 5000), 0);
    free(w);
    free(g);
    free(cfg);
}

/* One message that is not a dcps header, from a raw DEALER; waits for the ERROR. */
static void send_garbage(const char *endpoint)
{
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_DEALER);
    int timeout = 5000, linger = 0;
    char reply[512];
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    ck_assert_int_eq(zmq_connect(s, endpoint), 0);
    ck_assert_int_eq(zmq_send(s, "garbage", 7, 0), 7);
    ck_assert_int_gt(zmq_recv(s, reply, sizeof reply, 0), 0);
    zmq_close(s);
    zmq_ctx_term(ctx);
}

/* N pushes (dense zeros) and M pulls in async mode: pull, 3 pushes, pull, 2
 * pushes, pull. The pushes are 0, 1, 2, 0 and 1 updates stale. */
START_TEST(scrape_counts_what_a_worker_did)
{
    enum { N = 5, M = 3 };
    int port = free_port();
    pid_t server;
    dcps_config_t *cfg;
    dcps_client_t *cl = start(job(port, 2, ""), &server, &cfg); /* rank 1 never comes */
    float *w = calloc(N_PARAMS, sizeof *w), *g = calloc(N_PARAMS, sizeof *g);
    ck_assert_uint_eq(dcps_client_num_params(cl), N_PARAMS);
    ck_assert_int_eq(dcps_client_init(cl, w), 0);
    ck_assert_int_eq(dcps_client_pull(cl, w), 0);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(dcps_client_push_dense(cl, g), 0);
    ck_assert_int_eq(dcps_client_pull(cl, w), 0);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(dcps_client_push_dense(cl, g), 0);
    ck_assert_int_eq(dcps_client_pull(cl, w), 0);
    send_garbage(cfg->shards[0]);

    const char *t = scrape_until(port, N, M);
    check_format(t);
    ck_assert_double_eq(sample(t, "dcps_pushes_total{shard=\"0\"}"), N);
    ck_assert_double_eq(sample(t, "dcps_pulls_total{shard=\"0\"}"), M);
    ck_assert_double_eq(sample(t, "dcps_delta_pulls_total{shard=\"0\"}"), 0);
    /* Replies of w without a copy: a buffer more in the memory report; a pull
     * whose reply buffer is still held by the previous reply is copied. */
    ck_assert_double_eq(sample(t, "dcps_memory_bytes{shard=\"0\",kind=\"reply_buffers\"}"),
                        N_PARAMS * 4.0);
    ck_assert_double_le(sample(t, "dcps_copied_pulls_total{shard=\"0\"}"), M);
    ck_assert_double_eq(sample(t, "dcps_duplicate_pushes_total{shard=\"0\"}"), 0);
    ck_assert_double_eq(sample(t, "dcps_version{shard=\"0\"}"), N);      /* async SGD */
    ck_assert_double_eq(sample(t, "dcps_live_workers{shard=\"0\"}"), 1); /* rank 1 never came */
    ck_assert_double_eq(sample(t, "dcps_workers{shard=\"0\"}"), 2);
    /* Every pull was answered with the range dense, and every push sent it. */
    ck_assert_double_ge(sample(t, "dcps_bytes_sent_total{shard=\"0\"}"), M * N_PARAMS * 4.0);
    ck_assert_double_ge(sample(t, "dcps_bytes_received_total{shard=\"0\"}"),
                        (N + 1) * N_PARAMS * 4.0);
    ck_assert_double_eq(sample(t, "dcps_errors_total{shard=\"0\",code=\"HEADER\"}"), 1);
    ck_assert_ptr_null(strstr(t, "dcps_errors_total{shard=\"0\",code=\"FRAMELEN\"}"));
    /* Without [security] curve nobody is refused (test_security counts refusals). */
    ck_assert_double_eq(sample(t, "dcps_auth_refused_total{shard=\"0\"}"), 0);

    ck_assert_double_eq(sample(t, "dcps_memory_bytes{shard=\"0\",kind=\"parameters\"}"),
                        4 * N_PARAMS);
    ck_assert_double_eq(sample(t, "dcps_memory_bytes{shard=\"0\",kind=\"optimizer_state\"}"), 0);
    ck_assert_double_eq(sample(t, "dcps_memory_bytes{shard=\"0\",kind=\"sync_sum\"}"), 0);
    ck_assert_double_eq(sample(t, "dcps_memory_bytes{shard=\"0\",kind=\"sequence_numbers\"}"),
                        2 * RANK_RECORDS); /* per rank */
    /* All the shard holds is malloc's, and the heap counts every thread's. */
    double held = 0;
    for (const char *k = "parameters\0optimizer_state\0worker_backups\0sync_sum\0delta_pull\0"
                         "update_buffer\0sequence_numbers\0";
         *k; k += strlen(k) + 1) {
        char series[96];
        snprintf(series, sizeof series, "dcps_memory_bytes{shard=\"0\",kind=\"%s\"}", k);
        held += sample(t, series);
    }
    ck_assert_double_ge(sample(t, "dcps_heap_bytes{shard=\"0\",kind=\"in_use\"}"), held);
    ck_assert_double_ge(sample(t, "dcps_heap_bytes{shard=\"0\",kind=\"free\"}"), 0);

    ck_assert_double_eq(sample(t, "dcps_staleness_count{shard=\"0\"}"), N);
    ck_assert_double_eq(sample(t, "dcps_staleness_sum{shard=\"0\"}"), 0 + 1 + 2 + 0 + 1);
    ck_assert_int_eq(check_buckets(t, "dcps_staleness_bucket{shard=\"0\",", N), 12);
    ck_assert_double_eq(sample(t, "dcps_staleness_bucket{shard=\"0\",le=\"0\"}"), 2);
    ck_assert_double_eq(sample(t, "dcps_staleness_bucket{shard=\"0\",le=\"1\"}"), 4);
    ck_assert_double_eq(sample(t, "dcps_staleness_bucket{shard=\"0\",le=\"3\"}"), 5);
    ck_assert_double_eq(sample(t, "dcps_staleness_bucket{shard=\"0\",le=\"1023\"}"), 5);

    ck_assert_double_eq(sample(t, "dcps_apply_seconds_count{shard=\"0\",kind=\"push\"}"), N);
    ck_assert_int_eq(check_buckets(t, "dcps_apply_seconds_bucket{shard=\"0\",kind=\"push\",", N),
                     22);
    double sum = sample(t, "dcps_apply_seconds_sum{shard=\"0\",kind=\"push\"}");
    ck_assert_msg(sum > 0 && sum < 1, "apply time %g s", sum);           /* 210 floats each */
    ck_assert_ptr_null(strstr(t, "_count{shard=\"0\",kind=\"round\"}")); /* async: no rounds */

    finish(cl, server, w, g, cfg);
}
END_TEST

/* [model] params = auto: before rank 0's HELLO the shard holds no parameters
 * and says the model has 0; after it, the size rank 0 gave. */
START_TEST(unsized_shard_reports_no_model_until_rank_0_sizes_it)
{
    int port = free_port(), rc;
    char ep[256], shards[300], err[512];
    const char *j = job_with(port, 1, "", "[model]\nparams = auto\n");
    pid_t server = h_server(j, 0, ep);
    ck_assert_msg(server > 0, "server did not start: %s", h_slurp(h_path("server0", "err")));
    const char *r = "";
    for (int i = 0; i < 100 && status_of(r) != 200; i++) {
        nanosleep(&(struct timespec){0, 50000000}, NULL);
        r = http(port, "GET", "/metrics");
    }
    const char *t = body_of(r);
    check_format(t);
    ck_assert_double_eq(sample(t, "dcps_model_params{shard=\"0\"}"), 0);
    ck_assert_double_eq(sample(t, "dcps_memory_bytes{shard=\"0\",kind=\"parameters\"}"), 0);
    ck_assert_double_eq(sample(t, "dcps_memory_bytes{shard=\"0\",kind=\"sequence_numbers\"}"),
                        RANK_RECORDS);

    snprintf(shards, sizeof shards, "servers.shards=%s", ep);
    const char *ov[] = {shards};
    dcps_config_t cfg;
    ck_assert_msg(dcps_config_load(&cfg, j, ov, 1, err, sizeof err) == 0, "%s", err);
    cfg.n_params = 300; /* the caller's model: not the 210 of the job's layers */
    dcps_client_t *cl = dcps_client_new(&cfg, 0, &rc, err, sizeof err);
    ck_assert_msg(cl != NULL, "%s", err);
    for (int i = 0; i < 100; i++) {
        t = body_of(http(port, "GET", "/metrics"));
        if (sample(t, "dcps_model_params{shard=\"0\"}") == 300)
            break;
        nanosleep(&(struct timespec){0, 50000000}, NULL);
    }
    ck_assert_double_eq(sample(t, "dcps_model_params{shard=\"0\"}"), 300);
    ck_assert_double_eq(sample(t, "dcps_memory_bytes{shard=\"0\",kind=\"parameters\"}"),
                        4 * 300);
    dcps_client_close(&cl);
    ck_assert_int_eq(h_stop(server, 5000), 0);
}
END_TEST

/* A worker's requests are its sign of life: while it pushes and pulls more often
 * than heartbeat_ms (100 ms here) its client sends the shard no HEARTBEAT; once it
 * falls silent, one every 100 ms, and it stays live. */
START_TEST(heartbeats_only_when_a_worker_is_silent)
{
    int port = free_port();
    pid_t server;
    dcps_config_t *cfg;
    dcps_client_t *cl = start(job_with(port, 1, "", "heartbeat_ms = 100\ndead_after_ms = 3000\n"),
                              &server, &cfg);
    float *w = calloc(N_PARAMS, sizeof *w), *g = calloc(N_PARAMS, sizeof *g);
    const char *hb = "dcps_heartbeats_total{shard=\"0\"}";
    ck_assert_int_eq(dcps_client_init(cl, w), 0);
    double before = h_metric(port, hb);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int steps = 0;
    do { /* 1 s of steps 20 ms apart */
        ck_assert_int_eq(dcps_client_pull(cl, w), 0);
        ck_assert_int_eq(dcps_client_push_dense(cl, g), 0);
        nanosleep(&(struct timespec){0, 20000000}, NULL);
        steps++;
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1e3 + (t.tv_nsec - t0.tv_nsec) / 1e6 < 1000);
    double busy = h_metric(port, hb) - before;
    /* 10 were due by the clock; a step stalled past 100 ms (make -j check on 2
     * cores) lets one through. */
    ck_assert_msg(busy <= 3, "%g heartbeats while the worker made %d steps in 1 s", busy, steps);

    nanosleep(&(struct timespec){1, 0}, NULL);
    double idle = h_metric(port, hb) - before - busy;
    ck_assert_msg(idle >= 5 && idle <= 12, "%g heartbeats in 1 s of silence (10 due)", idle);
    ck_assert_double_eq(h_metric(port, "dcps_live_workers{shard=\"0\"}"), 1);
    finish(cl, server, w, g, cfg);
}
END_TEST

/* Sync mode with one worker: every push closes a round, whose apply is timed
 * on its own. */
START_TEST(sync_rounds_are_timed_apart_from_the_pushes)
{
    enum { N = 4 };
    int port = free_port();
    pid_t server;
    dcps_config_t *cfg;
    dcps_client_t *cl = start(job(port, 1, "mode = sync\n"), &server, &cfg);
    float *w = calloc(N_PARAMS, sizeof *w), *g = calloc(N_PARAMS, sizeof *g);
    ck_assert_int_eq(dcps_client_init(cl, w), 0);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(dcps_client_pull(cl, w), 0);
        ck_assert_int_eq(dcps_client_push_dense(cl, g), 0);
    }
    const char *t = scrape_until(port, N, N);
    check_format(t);
    ck_assert_double_eq(sample(t, "dcps_version{shard=\"0\"}"), N);
    ck_assert_double_eq(sample(t, "dcps_apply_seconds_count{shard=\"0\",kind=\"push\"}"), N);
    ck_assert_double_eq(sample(t, "dcps_apply_seconds_count{shard=\"0\",kind=\"round\"}"), N);
    check_buckets(t, "dcps_apply_seconds_bucket{shard=\"0\",kind=\"round\",", N);
    ck_assert_double_eq(sample(t, "dcps_memory_bytes{shard=\"0\",kind=\"sync_sum\"}"),
                        4 * N_PARAMS);
    finish(cl, server, w, g, cfg);
}
END_TEST

START_TEST(other_paths_get_404_other_methods_405_and_sigterm_frees_the_port)
{
    char ep[256];
    int port = free_port();
    pid_t server = h_server(job(port, 2, ""), 0, ep);
    ck_assert_int_gt(server, 0);
    const char *r = http(port, "GET", "/");
    ck_assert_int_eq(status_of(r), 404);
    ck_assert_int_eq(status_of(http(port, "GET", "/metrics/x")), 404);
    r = http(port, "POST", "/metrics");
    ck_assert_int_eq(status_of(r), 405);
    ck_assert_ptr_nonnull(strstr(r, "\r\nAllow: GET, HEAD\r\n"));
    r = http(port, "HEAD", "/metrics");
    ck_assert_int_eq(status_of(r), 200);
    ck_assert_str_eq(body_of(r), "");
    /* There as soon as the server is up (published at the start); the query is
     * not part of the path. */
    r = http(port, "GET", "/metrics?x=1");
    ck_assert_int_eq(status_of(r), 200);
    ck_assert_double_eq(sample(body_of(r), "dcps_pushes_total{shard=\"0\"}"), 0);

    ck_assert_int_eq(h_stop(server, 5000), 0);
    ck_assert_int_eq(status_of(http(port, "GET", "/metrics")), 0); /* nobody listens */
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_ANY)};
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    close(fd);
}
END_TEST

/* 127.0.0.1 unless the job says otherwise: another address of this host (here
 * 127.0.0.2, also the loopback interface) is refused, and served with 0.0.0.0. */
START_TEST(metrics_listen_on_loopback_unless_told_otherwise)
{
    char ep[256];
    int port = free_port();
    pid_t server = h_server(job(port, 1, ""), 0, ep);
    ck_assert_int_gt(server, 0);
    ck_assert_int_eq(status_of(http_at("127.0.0.1", port, "GET", "/metrics")), 200);
    ck_assert_int_eq(status_of(http_at("127.0.0.2", port, "GET", "/metrics")), 0);
    ck_assert_int_eq(h_stop(server, 5000), 0);

    port = free_port();
    server = h_server(job_with(port, 1, "", "metrics_address = 0.0.0.0\n"), 0, ep);
    ck_assert_int_gt(server, 0);
    ck_assert_int_eq(status_of(http_at("127.0.0.2", port, "GET", "/metrics")), 200);
    ck_assert_int_eq(h_stop(server, 5000), 0);

    /* A value that is no IPv4 address stops it before it binds, naming the key. */
    const char *argv[] = {"--config", job_with(port, 1, "", "metrics_address = localhost\n"),
                          "--shard", "0", NULL};
    pid_t pid = h_spawn("dcps-server", "badaddr", argv);
    ck_assert_int_eq(h_wait(pid, 10000), 2);
    const char *log = h_slurp(h_path("badaddr", "err"));
    ck_assert_msg(strstr(log, "[server] metrics_address: \"localhost\" is not a dotted IPv4 "
                              "address"),
                  "%s", log);
}
END_TEST

/* A port some other program listens on: exit status 1, a message naming the
 * port and the reason, and no ZeroMQ endpoint (the endpoint file is written
 * right after the bind). */
START_TEST(taken_metrics_port_stops_the_server_before_it_binds)
{
    int port, fd = listener(&port);
    char want[128];
    const char *epf = h_path("taken", "endpoint");
    const char *argv[] = {"--config", job(port, 2, ""), "--shard", "0", "--endpoint-file", epf,
                          NULL};
    pid_t pid = h_spawn("dcps-server", "taken", argv);
    int st = h_wait(pid, 10000);
    const char *log = h_slurp(h_path("taken", "err"));
    ck_assert_msg(st == 1, "exit status %d: %s", st, log);
    snprintf(want, sizeof want, "metrics port 127.0.0.1:%d: Address already in use", port);
    ck_assert_msg(strstr(log, want) != NULL, "%s", log);
    ck_assert_ptr_null(strstr(log, "serves parameters"));
    ck_assert_int_ne(access(epf, F_OK), 0);
    close(fd);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("daemon");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, scrape_counts_what_a_worker_did);
    tcase_add_test(tc, sync_rounds_are_timed_apart_from_the_pushes);
    tcase_add_test(tc, heartbeats_only_when_a_worker_is_silent);
    tcase_add_test(tc, unsized_shard_reports_no_model_until_rank_0_sizes_it);
    tcase_add_test(tc, other_paths_get_404_other_methods_405_and_sigterm_frees_the_port);
    tcase_add_test(tc, taken_metrics_port_stops_the_server_before_it_binds);
    tcase_add_test(tc, metrics_listen_on_loopback_unless_told_otherwise);
    suite_add_tcase(s, tc);
    return dcps_test_run(s);
}
