/* dcps — the shard daemon's Prometheus endpoint; see metrics.h. */
#include "server/metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/log.h"
#include "common/schedule.h"

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define MAX_CONNECTIONS 16u /* scrapers are few; the rest wait in the backlog */
#define IDLE_TIMEOUT_S 10u  /* a silent connection is closed after this */

struct dcps_metrics {
    struct MHD_Daemon *daemon;
    pthread_mutex_t lock; /* guards text, len and cap against the HTTP thread */
    char *text;           /* the last published exposition, len bytes */
    size_t len, cap;
    char *scratch; /* loop thread only: dcps_metrics_update renders here */
    size_t scratch_cap;
};

/* --- rendering ------------------------------------------------------------------- */

/* An snprintf that appends: len counts the whole text, buf holds what fits. */
typedef struct {
    char *buf;
    size_t cap, len;
} out_t;

static void put(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out_t *o, const char *fmt, ...)
{
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len += (size_t)n;
}

static void family(out_t *o, const char *name, const char *type, const char *help)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One family of a single sample; sh is the shard label (shard="0"). */
static void single(out_t *o, const char *sh, const char *name, const char *type, const char *help,
                   uint64_t v)
{
    family(o, name, type, help);
    put(o, "%s{%s} %" PRIu64 "\n", name, sh, v);
}

/* The staleness histogram: shard.h's buckets hold 0, then [2^(b−1), 2^b − 1] of
 * whole updates, so bucket b's upper bound `le` is 2^b − 1, and the last one is
 * +Inf. Prometheus buckets count everything up to their bound (cumulative). */
static void staleness(out_t *o, const char *sh, const dcps_staleness_t *st)
{
    uint64_t cum = 0;
    family(o, "dcps_staleness", "histogram",
           "Staleness of accepted pushes: updates applied between the parameter version a "
           "gradient was computed on and its arrival.");
    for (int b = 0; b < DCPS_STALENESS_BUCKETS - 1; b++) {
        cum += st->hist[b];
        put(o, "dcps_staleness_bucket{%s,le=\"%" PRIu64 "\"} %" PRIu64 "\n", sh,
            ((uint64_t)1 << b) - 1, cum);
    }
    cum += st->hist[DCPS_STALENESS_BUCKETS - 1];
    put(o, "dcps_staleness_bucket{%s,le=\"+Inf\"} %" PRIu64 "\n", sh, cum);
    put(o, "dcps_staleness_sum{%s} %" PRIu64 "\n", sh, st->sum);
    put(o, "dcps_staleness_count{%s} %" PRIu64 "\n", sh, st->count);
}

/* One series of dcps_apply_seconds: router.h's buckets end at 2^b µs, written
 * in seconds with exactly six decimals (0.000001 to 1.048576). */
static void latency(out_t *o, const char *sh, const char *kind, const dcps_latency_t *l)
{
    uint64_t cum = 0;
    for (int b = 0; b < DCPS_LATENCY_BUCKETS - 1; b++) {
        cum += l->hist[b];
        put(o, "dcps_apply_seconds_bucket{%s,kind=\"%s\",le=\"%.6f\"} %" PRIu64 "\n", sh, kind,
            (double)(1ull << b) / 1e6, cum);
    }
    cum += l->hist[DCPS_LATENCY_BUCKETS - 1];
    put(o, "dcps_apply_seconds_bucket{%s,kind=\"%s\",le=\"+Inf\"} %" PRIu64 "\n", sh, kind, cum);
    put(o, "dcps_apply_seconds_sum{%s,kind=\"%s\"} %.9f\n", sh, kind, (double)l->sum_ns / 1e9);
    put(o, "dcps_apply_seconds_count{%s,kind=\"%s\"} %" PRIu64 "\n", sh, kind, l->count);
}

/* The shard's and the router's counters. */
static void counters(out_t *o, const char *sh, const dcps_metrics_numbers_t *n)
{
    const dcps_shard_stats_t *s = &n->shard;
    const dcps_router_stats_t *r = &n->router;
    single(o, sh, "dcps_pushes_total", "counter",
           "Pushes accepted: applied (async, ssp) or added to the open round (sync).", s->pushes);
    single(o, sh, "dcps_duplicate_pushes_total", "counter",
           "Retried pushes that had been applied already: acknowledged, not applied again.",
           s->duplicates);
    single(o, sh, "dcps_dropped_pushes_total", "counter",
           "Sync pushes whose round had closed without them.", s->dropped);
    single(o, sh, "dcps_refused_rounds_total", "counter",
           "Sync rounds not applied: their mean would have made a parameter NaN or Inf.",
           s->rounds_refused);
    single(o, sh, "dcps_pulls_total", "counter", "Pulls answered, dense or delta.", s->pulls);
    single(o, sh, "dcps_delta_pulls_total", "counter",
           "Pulls answered with a delta ([compression] pull = delta).", s->deltas);
    single(o, sh, "dcps_copied_pulls_total", "counter",
           "Dense pulls of w answered with a copy: the reply buffers were held by replies of "
           "another version still being sent.",
           s->pulls_copied);
    single(o, sh, "dcps_messages_total", "counter", "Messages received.", r->messages);
    single(o, sh, "dcps_heartbeats_total", "counter",
           "HEARTBEATs of workers' sessions answered (a client sends one to a shard only after "
           "heartbeat_ms without a request to it).",
           r->heartbeats);
    single(o, sh, "dcps_bytes_received_total", "counter",
           "Bytes of the messages received, every frame.", r->bytes_in);
    single(o, sh, "dcps_bytes_sent_total", "counter", "Bytes of the messages sent, every frame.",
           r->bytes_out);
}

/* Bad messages by code, and connections the CURVE check refused. */
static void refusals(out_t *o, const char *sh, const dcps_router_stats_t *r)
{
    family(o, "dcps_errors_total", "counter",
           "Bad messages answered with ERROR, by the short name of their code (common/error.h).");
    for (int i = 0; i < DCPS_ERROR_SLOTS; i++)
        if (r->errors[i])
            put(o, "dcps_errors_total{%s,code=\"%s\"} %" PRIu64 "\n", sh,
                i ? dcps_errname(-i) : "UNKNOWN", r->errors[i]);

    single(o, sh, "dcps_auth_refused_total", "counter",
           "Connections refused by the CURVE check: keys not in [security] worker_keys_dir "
           "(always 0 without curve).",
           r->auth_refused);
}

/* With [server] checkpoint_dir: failures and the newest good checkpoint's age. */
static void checkpoints(out_t *o, const char *sh, const dcps_router_stats_t *r)
{
    single(o, sh, "dcps_checkpoint_failures_total", "counter",
           "Checkpoints that could not be written (the log says why, with the free space).",
           r->checkpoint_failures);
    int64_t since = r->checkpoint_time ? r->checkpoint_time : r->started;
    double age = difftime(time(NULL), (time_t)since);
    family(o, "dcps_checkpoint_age_seconds", "gauge",
           "Seconds since the newest good checkpoint was written (written or restored; "
           "since the shard started while there is none): what a restart now would lose.");
    put(o, "dcps_checkpoint_age_seconds{%s} %.0f\n", sh, age > 0 ? age : 0);
}

/* The shortest of %.15g..%.17g that reads back as x: 0.05, not 0.050000000000000003. */
static void put_double(out_t *o, const char *sh, const char *name, double x)
{
    char buf[32];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    put(o, "%s{%s} %s\n", name, sh, buf);
}

static void gauges(out_t *o, const char *sh, const dcps_metrics_numbers_t *n)
{
    single(o, sh, "dcps_version", "gauge", "Parameter version: updates applied to this shard.",
           n->shard.version);
    /* What a PULL_REPLY says now (server/router.c): t is the version. */
    family(o, "dcps_lr", "gauge",
           "Learning rate in force: [optimizer] lr (as last reloaded) times the schedule's "
           "f(t), t = dcps_version; the next update's.");
    put_double(o, sh, "dcps_lr",
               dcps_schedule_lr(&n->cfg->sched, n->cfg->lr, n->shard.version));
    single(o, sh, "dcps_model_params", "gauge",
           "Parameters of the model; 0 while the shard waits for rank 0 to size it ([model] "
           "params = auto).",
           n->shard.n_params);
    single(o, sh, "dcps_live_workers", "gauge",
           "Workers connected now: said HELLO, no BYE, not silent for dead_after_ms.",
           (uint64_t)n->router.live_workers);
    single(o, sh, "dcps_workers", "gauge", "Worker ranks of the job ([job] workers).",
           (uint64_t)n->cfg->workers);
}

/* The shard's bytes by kind, and the process's heap. */
static void memory(out_t *o, const char *sh, const dcps_shard_memory_t *mem)
{
    const struct {
        const char *kind;
        size_t bytes;
    } kinds[] = {
        {"parameters", mem->parameters},         {"optimizer_state", mem->optimizer_state},
        {"worker_backups", mem->worker_backups}, {"sync_sum", mem->sync_sum},
        {"delta_pull", mem->delta_pull},         {"update_buffer", mem->update_buffer},
        {"reply_buffers", mem->reply_buffers},   {"sequence_numbers", mem->sequence_numbers},
    };
    family(o, "dcps_memory_bytes", "gauge",
           "Bytes the shard holds, by what they are for; 0 for a kind the job does not use.");
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        put(o, "dcps_memory_bytes{%s,kind=\"%s\"} %zu\n", sh, kinds[i].kind, kinds[i].bytes);

    /* glibc's count over every arena: ZeroMQ's I/O threads allocate the messages. */
    struct mallinfo2 heap = mallinfo2();
    family(o, "dcps_heap_bytes", "gauge",
           "The process's heap by glibc malloc, every thread's (ZeroMQ's messages too): "
           "kind=\"in_use\" allocated now, kind=\"free\" kept by the allocator unused "
           "(resident as far as touched; RSS less in_use is mostly this).");
    put(o, "dcps_heap_bytes{%s,kind=\"in_use\"} %zu\n", sh, heap.uordblks + heap.hblkhd);
    put(o, "dcps_heap_bytes{%s,kind=\"free\"} %zu\n", sh, heap.fordblks);
}

size_t dcps_metrics_render(const dcps_metrics_numbers_t *n, char *buf, size_t cap)
{
    out_t o = {buf, cap, 0};
    char sh[32];

    if (cap)
        buf[0] = '\0';
    snprintf(sh, sizeof sh, "shard=\"%d\"", n->shard.index);
    counters(&o, sh, n);
    refusals(&o, sh, &n->router);
    if (*n->cfg->checkpoint_dir)
        checkpoints(&o, sh, &n->router);
    gauges(&o, sh, n);
    memory(&o, sh, &n->memory);
    staleness(&o, sh, &n->shard.staleness);
    family(&o, "dcps_apply_seconds", "histogram",
           "Time to apply one update: kind=\"push\" each push (applied, or added to the sync "
           "round), kind=\"round\" each sync round's mean.");
    latency(&o, sh, "push", &n->router.apply_push);
    if (n->cfg->mode == DCPS_MODE_SYNC)
        latency(&o, sh, "round", &n->router.apply_round);
    return o.len;
}

/* --- publishing -------------------------------------------------------------------- */

int dcps_metrics_publish(dcps_metrics_t *m, const char *text, size_t len)
{
    int rc = 0;
    pthread_mutex_lock(&m->lock);
    if (len > m->cap) {
        char *p = realloc(m->text, len);
        if (!p) {
            rc = DCPS_E_NOMEM;
            goto out;
        }
        m->text = p;
        m->cap = len;
    }
    if (len)
        memcpy(m->text, text, len);
    m->len = len;
out:
    pthread_mutex_unlock(&m->lock);
    return rc;
}

int dcps_metrics_update(dcps_metrics_t *m, const dcps_metrics_numbers_t *n)
{
    size_t len = dcps_metrics_render(n, m->scratch, m->scratch_cap);
    if (len >= m->scratch_cap) {
        size_t cap = len + 1 + len / 2; /* room for more error codes and digits */
        char *p = realloc(m->scratch, cap);
        if (!p)
            return DCPS_E_NOMEM;
        m->scratch = p;
        m->scratch_cap = cap;
        len = dcps_metrics_render(n, m->scratch, m->scratch_cap);
    }
    return dcps_metrics_publish(m, m->scratch, len);
}

/* --- HTTP (libmicrohttpd's thread) ------------------------------------------------- */

static struct MHD_Response *static_text(const char *text)
{
    return MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
}

/* Answers every request at its first call: GET /metrics with the last published
 * text, anything else with 404 or 405. A request body is never read. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    dcps_metrics_t *m = cls;
    struct MHD_Response *res;
    unsigned int status = MHD_HTTP_OK;

    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
        status = MHD_HTTP_METHOD_NOT_ALLOWED;
        res = static_text("only GET and HEAD\n");
        if (res)
            MHD_add_response_header(res, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    } else if (strcmp(url, "/metrics") != 0) {
        status = MHD_HTTP_NOT_FOUND;
        res = static_text("not found: this server serves /metrics\n");
    } else {
        pthread_mutex_lock(&m->lock);
        res = m->len ? MHD_create_response_from_buffer(m->len, m->text, MHD_RESPMEM_MUST_COPY)
                     : static_text("");
        pthread_mutex_unlock(&m->lock);
    }
    if (!res)
        return MHD_NO; /* out of memory: MHD closes the connection */
    MHD_add_response_header(res, MHD_HTTP_HEADER_CONTENT_TYPE,
                            status == MHD_HTTP_OK ? CONTENT_TYPE : "text/plain; charset=utf-8");
    enum MHD_Result rc = MHD_queue_response(c, status, res);
    MHD_destroy_response(res);
    return rc;
}

static void on_log(void *cls, const char *fmt, va_list ap)
{
    char line[256];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    DCPS_WARN("metrics: %s", line);
}

/* A listening socket on address:port (name: the two, for messages), or -1 with
 * the reason. */
static int listen_on(const char *address, int port, const char *name, char *err, size_t errlen)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int one = 1, e, fd = -1;
    if (inet_pton(AF_INET, address, &a.sin_addr) != 1) {
        snprintf(err, errlen, "metrics port %s: not a dotted IPv4 address", name);
        return -1;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        goto fail;
    /* A restarted server need not wait for the old connections' TIME_WAIT; a
     * socket that still listens on the port is refused all the same. */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 16) != 0)
        goto fail;
    return fd;

fail:
    e = errno;
    if (fd >= 0)
        close(fd);
    snprintf(err, errlen, "metrics port %s: %s", name, strerror(e));
    return -1;
}

dcps_metrics_t *dcps_metrics_new(const char *address, int port, char *err, size_t errlen)
{
    char name[64];
    snprintf(name, sizeof name, "%s:%d", address, port);
    if (port < 1 || port > 65535) {
        snprintf(err, errlen, "metrics port %s: not a TCP port (1 to 65535)", name);
        return NULL;
    }
    dcps_metrics_t *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "metrics port %s: %s", name, dcps_strerror(DCPS_E_NOMEM));
        return NULL;
    }
    pthread_mutex_init(&m->lock, NULL);
    int fd = listen_on(address, port, name, err, errlen);
    if (fd < 0)
        goto fail_listen;
    /* MHD takes the socket over and closes it in MHD_stop_daemon. */
    m->daemon = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG, (uint16_t)port,
                                 NULL, NULL, on_request, m, MHD_OPTION_EXTERNAL_LOGGER, on_log, m,
                                 MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
                                 MHD_OPTION_CONNECTION_LIMIT, MAX_CONNECTIONS,
                                 MHD_OPTION_CONNECTION_TIMEOUT, IDLE_TIMEOUT_S, MHD_OPTION_END);
    if (!m->daemon) {
        snprintf(err, errlen, "metrics port %s: the HTTP server (libmicrohttpd) did not start",
                 name);
        goto fail_daemon;
    }
    return m;

fail_daemon:
    close(fd);
fail_listen:
    pthread_mutex_destroy(&m->lock);
    free(m);
    return NULL;
}

void dcps_metrics_destroy(dcps_metrics_t **mp)
{
    dcps_metrics_t *m = *mp;
    if (!m)
        return;
    MHD_stop_daemon(m->daemon);
    pthread_mutex_destroy(&m->lock);
    free(m->scratch);
    free(m->text);
    free(m);
    *mp = NULL;
}
