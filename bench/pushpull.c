/* dcps bench/pushpull — push and pull through real dcps-server daemons.
 *
 * For each model size n, it starts 1 or 2 shards (the dcps-server program, on
 * tcp://127.0.0.1 ephemeral ports) and 1, 2 or 4 workers (threads, each with its
 * own client from worker/dcps.h), and times a dense push then a dense pull, again
 * and again; with 1 worker also a sparse push (density 0.01 and 0.001, ascending
 * random indices) then a dense pull. Each row gives worker 0's median and 99th
 * percentile time per push and per pull, the wire bytes of one push+pull, the
 * payload moved per second by all workers together, the ratio to a memcpy of
 * the same payload measured just before the row, and the CPU time the bench and
 * the servers used per round trip beside that of a bare ZeroMQ floor. The job
 * is async SGD with a learning rate of 1e-9, so the parameters stay where they
 * are. A last comment line, `# headline:`, gives the round trip for 1M floats,
 * 1 shard, 1 worker.
 *
 * The servers are started and stopped here; on failure, SIGINT, SIGTERM or SIGHUP
 * they are killed, and on Linux they die with this process whatever ends it.
 *
 * With --parts N the workers send every dense push, and ask for every dense
 * pull reply, in N parts per shard ([compression] parts, docs/protocol.md
 * section 17; 0: the client's choice by size); without it, whole (parts = 1).
 * With --values FMT the job's [compression] values is FMT (fp32, fp16, bf16,
 * int8): pushes and dense pull replies carry their values in that format
 * (docs/protocol.md, section 18). The CSV columns are the same (bytes_per_op
 * says the format's size); the `# setup:` line says the parts and the values.
 *
 * usage: bench/pushpull [--server PATH] [--sizes N,N,...] [--shards N,...]
 *                       [--workers N,...] [--parts N] [--values FMT] [--quick] */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "bench/bench.h"
#include "common/config.h"
#include "common/error.h"
#include "common/rng.h"
#include "worker/internal.h"

#include <zmq.h>

#define MAX_SIZES 16
#define MAX_SHARDS 2
#define MAX_WORKERS 4
#define LAYER_MAX 65536 /* the largest [model] layers size (common/config.c) */
#define WARMUP 3        /* untimed round trips; their median sets the repeat count */
#define MIN_ITERS 5
#define MAX_ITERS 20000
#define HEADLINE_N 1048576 /* 4 MiB of float32 each way */

static int shard_counts[MAX_SHARDS] = {1, 2}, n_shard_counts = 2;
static int worker_counts[MAX_WORKERS] = {1, 2, 4}, n_worker_counts = 3;
static const double densities[] = {0.01, 0.001};
static int parts = 1; /* [compression] parts of the workers: --parts */
static const char *values = "fp32"; /* [compression] values of the job */

/* ---- the servers ----------------------------------------------------------------
 * One group at a time. The paths and pids live in statics so that the exit and
 * signal paths can reach them; the signal handler only calls kill, waitpid,
 * unlink and rmdir, which are async-signal-safe. */

static char dir[256], job_path[300];
static char ep_path[MAX_SHARDS][300], ep_tmp[MAX_SHARDS][300], log_path[MAX_SHARDS][300];
static volatile pid_t server_pid[MAX_SHARDS];

static void remove_files(void)
{
    unlink(job_path);
    for (int s = 0; s < MAX_SHARDS; s++) {
        unlink(ep_tmp[s]); /* the server writes its endpoint there, then renames it */
        unlink(ep_path[s]);
        unlink(log_path[s]);
    }
    rmdir(dir);
}

static void kill_servers(void)
{
    for (int s = 0; s < MAX_SHARDS; s++)
        bench_kill_child(&server_pid[s]);
}

static void at_exit(void)
{
    kill_servers();
    if (dir[0])
        remove_files();
}

static void on_signal(int sig)
{
    at_exit();
    _exit(128 + sig);
}

/* The scratch directory for job file, endpoint files and server logs. */
static int scratch_dir(void)
{
    if (bench_scratch_dir("pushpull", dir, sizeof dir) != 0)
        return -1;
    snprintf(job_path, sizeof job_path, "%s/job.ini", dir);
    for (int s = 0; s < MAX_SHARDS; s++) {
        snprintf(ep_path[s], sizeof ep_path[s], "%s/shard%d.endpoint", dir, s);
        snprintf(ep_tmp[s], sizeof ep_tmp[s], "%s/shard%d.endpoint.tmp", dir, s);
        snprintf(log_path[s], sizeof log_path[s], "%s/shard%d.log", dir, s);
    }
    return 0;
}

/* What one group of servers serves: the job file's variable part. */
typedef struct {
    int a, b; /* [model] layers = a,b: n = a*b + b parameters */
    uint64_t n;
    int shards, workers;
} job_t;

/* The job for the servers and the clients. The timeouts are long because two
 * cores carry the servers and up to four workers: a slow reply is a result,
 * not an error. */
static int write_job(const job_t *j)
{
    FILE *f = fopen(job_path, "w");
    if (!f)
        return -1;
    fprintf(f, "[job]\nname = pushpull\nworkers = %d\nmode = async\nlog_level = warning\n",
            j->workers);
    fprintf(f, "[servers]\nshards = tcp://127.0.0.1:*%s\n",
            j->shards > 1 ? ",tcp://127.0.0.1:*" : "");
    fprintf(f, "[model]\nlayers = %d,%d\n", j->a, j->b);
    fprintf(f, "[optimizer]\nkind = sgd\nlr = 1e-9\n");
    fprintf(f, "[compression]\nvalues = %s\n", values);
    fprintf(f, "[worker]\ntimeout_ms = 60000\nretries = 0\n");
    fprintf(f, "[server]\nheartbeat_ms = 1000\ndead_after_ms = 600000\n");
    return fclose(f) == 0 ? 0 : -1;
}

/* Copies a server's log to stderr, for a failure's explanation. */
static void show_log(int s)
{
    char line[512];
    FILE *f = fopen(log_path[s], "r");
    while (f && fgets(line, sizeof line, f))
        fprintf(stderr, "  shard %d: %s", s, line);
    if (f)
        fclose(f);
}

static pid_t spawn_server(const char *server, int s)
{
    char shard[8];
    snprintf(shard, sizeof shard, "%d", s);
    unlink(ep_path[s]);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* even if this process is killed with SIGKILL */
#endif
    int fd = open(log_path[s], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
        _exit(126);
    execl(server, server, "--config", job_path, "--shard", shard, "--endpoint-file", ep_path[s],
          (char *)NULL);
    fprintf(stderr, "cannot run %s: %s\n", server, strerror(errno));
    _exit(127);
}

/* Waits at most 10 s for shard s to write its bound endpoint into ep (256 bytes). */
static int await_endpoint(int s, char *ep)
{
    for (int i = 0; i < 1000; i++) {
        if (bench_first_line(ep_path[s], ep, DCPS_ENDPOINT_MAX) == 0)
            return 0;
        if (waitpid(server_pid[s], NULL, WNOHANG) == server_pid[s]) {
            server_pid[s] = 0;
            return -1;
        }
        usleep(10000);
    }
    return -1;
}

/* SIGTERM, then SIGKILL after 5 s. Returns the exit status, or -1 if killed. */
static int stop_server(int s)
{
    int status = 0;
    pid_t pid = server_pid[s];
    kill(pid, SIGTERM);
    for (int i = 0; i < 500 && waitpid(pid, &status, WNOHANG) == 0; i++)
        usleep(10000);
    if (waitpid(pid, &status, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        status = -1;
    }
    server_pid[s] = 0;
    return status < 0 || !WIFEXITED(status) ? -1 : WEXITSTATUS(status);
}

static void stop_servers(void)
{
    for (int s = 0; s < MAX_SHARDS; s++)
        if (server_pid[s] > 0 && stop_server(s) != 0)
            fprintf(stderr, "bench/pushpull: shard %d did not stop cleanly\n", s);
}

/* Starts the shards of job j and loads the clients' view of it (the same job
 * file, with the endpoints the shards bound) into cfg. On failure the shards
 * started are killed, after the log of the one that did not start is shown. */
static int start_servers(const char *server, const job_t *j, dcps_config_t *cfg)
{
    char ep[MAX_SHARDS][DCPS_ENDPOINT_MAX], shards[2 * DCPS_ENDPOINT_MAX + 32], err[512];
    if (write_job(j) != 0) {
        fprintf(stderr, "bench/pushpull: cannot write %s\n", job_path);
        return -1;
    }
    for (int s = 0; s < j->shards; s++) {
        server_pid[s] = spawn_server(server, s);
        if (server_pid[s] < 0 || await_endpoint(s, ep[s]) != 0) {
            fprintf(stderr, "bench/pushpull: shard %d of %s did not start\n", s, server);
            show_log(s);
            goto fail;
        }
    }
    snprintf(shards, sizeof shards, "servers.shards=%s%s%s", ep[0], j->shards > 1 ? "," : "",
             j->shards > 1 ? ep[1] : "");
    char in_parts[64];
    snprintf(in_parts, sizeof in_parts, "compression.parts=%d", parts);
    const char *over[] = {shards, in_parts};
    if (dcps_config_load(cfg, job_path, over, 2, err, sizeof err) != 0) {
        fprintf(stderr, "bench/pushpull: %s\n", err);
        goto fail;
    }
    return 0;
fail:
    kill_servers();
    return -1;
}

/* The CPU time of this process and of the first `shards` servers together. */
static double cpu_all(int shards)
{
    double sum = bench_cpu_seconds(0);
    for (int s = 0; s < shards && sum >= 0; s++) {
        double c = bench_cpu_seconds(server_pid[s]);
        sum = c < 0 ? -1 : sum + c;
    }
    return sum;
}

/* ---- the workers ---------------------------------------------------------------- */

typedef struct row row_t;

/* One worker thread: its client, its copy of the parameters, its timings. */
typedef struct {
    row_t *row;
    int rank;
    dcps_client_t *client;
    float *params;
    double *push_t, *pull_t, *trip_t; /* seconds, per timed round trip */
    double warm[WARMUP];
    double start, end;
    double cpu_start, cpu_end; /* cpu_all then */
    dcps_client_stats_t before, after;
    int rc;
    char err[600];
} worker_t;

/* One measurement: what is pushed, by how many workers, and how often. */
struct row {
    dcps_config_t cfg;
    int workers;
    const float *x;      /* n values: the initial parameters and the dense gradient */
    const uint32_t *idx; /* sparse push: k ascending indices and their values; NULL: dense */
    const float *val;
    size_t k;
    int iters; /* set by the main thread between the warm-up and the timed loop */
    pthread_barrier_t gate;
    worker_t w[MAX_WORKERS];
};

/* One push then one pull; their times in seconds in t[0] and t[1]. */
static int round_trip(worker_t *w, double t[2])
{
    const row_t *r = w->row;
    double t0 = bench_now();
    int rc = r->idx ? dcps_client_push_sparse(w->client, r->idx, r->val, r->k)
                    : dcps_client_push_dense(w->client, r->x);
    double t1 = bench_now();
    if (rc == 0)
        rc = dcps_client_pull(w->client, w->params);
    t[0] = t1 - t0;
    t[1] = bench_now() - t1;
    return rc;
}

/* Keeps the client's sentence for the failure of `what`; w->rc holds the code. */
static void worker_failed(worker_t *w, const char *what)
{
    snprintf(w->err, sizeof w->err, "rank %d: %s: %s", w->rank, what, dcps_client_error(w->client));
}

/* Opens the client (rank 0 sets the parameters), warms up, and runs the timed
 * loop. Every worker passes every barrier, failed or not, so none waits forever. */
static void *worker_main(void *arg)
{
    worker_t *w = arg;
    row_t *r = w->row;
    double t[2];
    char why[512];
    int code = 0;

    w->client = dcps_client_new(&r->cfg, w->rank, &code, why, sizeof why);
    if (!w->client) {
        w->rc = code;
        snprintf(w->err, sizeof w->err, "rank %d: open: %s", w->rank, why);
    } else if (w->rank == 0 && (w->rc = dcps_client_init(w->client, r->x)) != 0)
        worker_failed(w, "init");
    else if (w->rank > 0 && (w->rc = dcps_client_wait_ready(w->client, 60000)) != 0)
        worker_failed(w, "wait for parameters");
    pthread_barrier_wait(&r->gate); /* 1: every client is open */
    for (int i = 0; i < WARMUP && w->rc == 0; i++) {
        if ((w->rc = round_trip(w, t)) != 0)
            worker_failed(w, "warm-up");
        w->warm[i] = t[0] + t[1];
    }
    pthread_barrier_wait(&r->gate); /* 2: warm; the main thread sets r->iters */
    pthread_barrier_wait(&r->gate); /* 3: go */
    if (w->client)
        dcps_client_stats(w->client, &w->before);
    w->start = bench_now();
    w->cpu_start = cpu_all(r->cfg.n_shards);
    for (int i = 0; i < r->iters && w->rc == 0; i++) {
        if ((w->rc = round_trip(w, t)) != 0)
            worker_failed(w, "round trip");
        w->push_t[i] = t[0];
        w->pull_t[i] = t[1];
        w->trip_t[i] = t[0] + t[1];
    }
    w->cpu_end = cpu_all(r->cfg.n_shards);
    w->end = bench_now();
    if (w->client)
        dcps_client_stats(w->client, &w->after);
    dcps_client_close(&w->client);
    return NULL;
}

/* ---- the measurement -------------------------------------------------------------- */

/* The q-quantile of t[0..n) by nearest rank (sorts t). */
static double quantile(double *t, int n, double q)
{
    int at = (int)ceil(q * n) - 1;
    bench_median(t, n);
    return t[at < 0 ? 0 : at];
}

/* Grow-only buffers for the memcpy baseline. */
typedef struct {
    char *src, *dst;
    size_t cap;
} copybuf_t;

/* The median time in seconds of copying `bytes` with memcpy. Small copies are
 * timed in batches of about 16 MiB, so each timing is well above the clock's
 * resolution; one untimed batch first. */
/* Makes both buffers at least `bytes` long. Returns 0, or -1 out of memory. */
static int copybuf_grow(copybuf_t *cb, size_t bytes)
{
    if (bytes <= cb->cap)
        return 0;
    free(cb->src);
    free(cb->dst);
    cb->src = malloc(bytes), cb->dst = malloc(bytes);
    if (!cb->src || !cb->dst)
        return -1;
    memset(cb->src, 1, bytes);
    memset(cb->dst, 0, bytes);
    cb->cap = bytes;
    return 0;
}

static double memcpy_time(copybuf_t *cb, size_t bytes)
{
    double t[11];
    if (copybuf_grow(cb, bytes) != 0)
        return -1;
    size_t batch = bytes < ((size_t)16 << 20) ? ((size_t)16 << 20) / bytes : 1;
    for (int r = -1; r < 11; r++) {
        double t0 = bench_now();
        for (size_t i = 0; i < batch; i++) {
            memcpy(cb->dst, cb->src, bytes);
            __asm__ volatile("" : : "r"(cb->dst) : "memory"); /* keep every copy */
        }
        if (r >= 0)
            t[r] = (bench_now() - t0) / (double)batch;
    }
    return bench_median(t, 11);
}

/* The median time in seconds of the least a shard does for a dense push of n
 * floats: one SGD pass out of place, out = w − η g, with w and g (set to 1 here)
 * in cb->src and out in cb->dst. Small passes are timed in batches of about 16
 * MiB of output, as memcpy_time does. Returns -1 out of memory. */
static double update_time(copybuf_t *cb, uint64_t n)
{
    if (copybuf_grow(cb, 8 * n) != 0)
        return -1;
    float *w = (float *)cb->src, *g = w + n, *out = (float *)cb->dst;
    const float lr = 1e-9f;
    double t[11];
    for (uint64_t i = 0; i < 2 * n; i++)
        w[i] = 1.0f;
    uint64_t batch = n < ((uint64_t)4 << 20) ? ((uint64_t)4 << 20) / n : 1;
    for (int r = -1; r < 11; r++) {
        double t0 = bench_now();
        for (uint64_t b = 0; b < batch; b++) {
            for (uint64_t i = 0; i < n; i++)
                out[i] = w[i] - lr * g[i];
            __asm__ volatile("" : : "r"(out) : "memory"); /* keep every pass */
        }
        if (r >= 0)
            t[r] = (bench_now() - t0) / (double)batch;
    }
    return bench_median(t, 11);
}

/* The transport's floor: the same two round trips as a push and a pull of
 * worker 0 (up bytes out and 4 back, then 4 out and down bytes back) through
 * bare ZeroMQ over tcp://127.0.0.1, DEALER to a ROUTER that receives the
 * message and answers from a buffer it never copies, and the client drops the
 * reply unread. No header, no checksum, no update, no copy into the caller's
 * array: what is left is what ZeroMQ and the kernel cost. The ROUTER runs in
 * a thread of this process with a context of its own, ended by shutting that
 * context down. */
typedef struct {
    void *ctx;
    void *sock;
    const char *reply;
    size_t down;
} echo_t;

static void *echo_main(void *arg)
{
    echo_t *e = arg;
    for (;;) {
        zmq_msg_t id, m, out;
        zmq_msg_init(&id);
        zmq_msg_init(&m);
        if (zmq_msg_recv(&id, e->sock, 0) < 0 || zmq_msg_recv(&m, e->sock, 0) < 0)
            break;
        size_t len = zmq_msg_size(&m);
        zmq_msg_close(&m);
        zmq_msg_init_data(&out, (void *)e->reply, len == 4 ? e->down : 4, NULL, NULL);
        zmq_msg_send(&id, e->sock, ZMQ_SNDMORE);
        zmq_msg_send(&out, e->sock, 0);
    }
    return NULL;
}

/* One client of the floor: a thread with a context and a DEALER of its own, as
 * each worker has its own dcps client. */
typedef struct {
    const char *ep;
    const char *buf;
    size_t up, down;
    double target_s;
    pthread_barrier_t *gate;
    double *t; /* MAX_ITERS round trip times, seconds */
    int n, rc;
    double start, end;
    double cpu_start, cpu_end; /* this process's CPU seconds then */
} zclient_t;

static void *zclient_main(void *arg)
{
    zclient_t *z = arg;
    void *ctx = zmq_ctx_new(), *c = NULL;
    z->rc = !ctx || !(c = zmq_socket(ctx, ZMQ_DEALER)) || zmq_connect(c, z->ep) != 0;
    for (int i = -WARMUP; z->rc == 0; i++) {
        if (i == 0) {
            pthread_barrier_wait(z->gate); /* every client warm: go */
            z->start = bench_now();
            z->cpu_start = bench_cpu_seconds(0);
        }
        if (i >= MAX_ITERS || (i >= MIN_ITERS && bench_now() >= z->start + z->target_s))
            break;
        zmq_msg_t m;
        double t0 = bench_now();
        if (zmq_send(c, z->buf, z->up, 0) < 0 || zmq_msg_init(&m) != 0 ||
            zmq_msg_recv(&m, c, 0) < 0 || zmq_msg_close(&m) != 0 ||
            zmq_send(c, z->buf, 4, 0) < 0 || zmq_msg_init(&m) != 0 ||
            zmq_msg_recv(&m, c, 0) < 0 || zmq_msg_close(&m) != 0)
            z->rc = -1;
        else if (i >= 0)
            z->t[z->n++] = bench_now() - t0;
    }
    z->cpu_end = bench_cpu_seconds(0);
    z->end = bench_now();
    if (z->rc != 0 && z->start == 0)
        pthread_barrier_wait(z->gate); /* failed before the gate: do not hold the others */
    if (c)
        zmq_close(c);
    if (ctx)
        zmq_ctx_term(ctx);
    return NULL;
}

/* The transport's floor for `clients` clients at once, each doing push-sized
 * then pull-sized round trips (up > 4) for about target_s seconds: the median
 * seconds of client 0's round trip into *trip, and the payload (up + down per
 * round trip) all clients moved per second, in 10^9 bits per second, into
 * *gbps, and the CPU seconds this process used per round trip over the same
 * time (the clients, the ROUTER and ZeroMQ's I/O threads) into *cpu. Returns 0,
 * or -1 if ZeroMQ fails. */
static int zmq_floor(int clients, size_t up, size_t down, double target_s, double *trip,
                     double *gbps, double *cpu)
{
    char ep[64];
    size_t len = sizeof ep;
    zclient_t z[MAX_WORKERS];
    pthread_t th, cth[MAX_WORKERS];
    pthread_barrier_t gate;
    int started = 0, rc = -1;
    char *buf = calloc(up > down ? up : down, 1);
    double *t = malloc((size_t)clients * MAX_ITERS * sizeof *t);
    echo_t e = {.ctx = zmq_ctx_new(), .reply = buf, .down = down};
    if (!buf || !t || !e.ctx || !(e.sock = zmq_socket(e.ctx, ZMQ_ROUTER)) ||
        zmq_bind(e.sock, "tcp://127.0.0.1:*") != 0 ||
        zmq_getsockopt(e.sock, ZMQ_LAST_ENDPOINT, ep, &len) != 0 ||
        pthread_create(&th, NULL, echo_main, &e) != 0)
        goto out;
    pthread_barrier_init(&gate, NULL, (unsigned)clients);
    for (; started < clients; started++) {
        z[started] = (zclient_t){.ep = ep, .buf = buf, .up = up, .down = down,
                                 .target_s = target_s, .gate = &gate,
                                 .t = t + started * MAX_ITERS};
        if (pthread_create(&cth[started], NULL, zclient_main, &z[started]) != 0)
            break;
    }
    if (started < clients) {
        fprintf(stderr, "bench/pushpull: cannot start client thread %d\n", started);
        exit(1); /* the others wait at the gate (at_exit stops the servers) */
    }
    double first = 0, last = 0, cpu0 = 0, cpu1 = 0;
    uint64_t trips = 0;
    rc = 0;
    for (int i = 0; i < clients; i++) {
        pthread_join(cth[i], NULL);
        rc |= z[i].rc;
        first = i == 0 || z[i].start < first ? z[i].start : first;
        last = z[i].end > last ? z[i].end : last;
        cpu0 = i == 0 || z[i].cpu_start < cpu0 ? z[i].cpu_start : cpu0;
        cpu1 = z[i].cpu_end > cpu1 ? z[i].cpu_end : cpu1;
        trips += (uint64_t)z[i].n;
    }
    pthread_barrier_destroy(&gate);
    if (rc == 0) {
        *cpu = (cpu1 - cpu0) / (double)trips;
        *trip = bench_median(z[0].t, z[0].n);
        *gbps = 8.0 * (double)(up + down) * (double)trips / (last - first) / 1e9;
    }
    zmq_ctx_shutdown(e.ctx); /* the ROUTER's blocking receive returns ETERM */
    pthread_join(th, NULL);
out:
    if (e.sock)
        zmq_close(e.sock);
    if (e.ctx)
        zmq_ctx_term(e.ctx);
    free(t);
    free(buf);
    return rc;
}

typedef struct {
    const char *kind;
    int shards, workers, iters;
    uint64_t n;
    double density, bytes_per_op;
    double push_med, push_p99, pull_med, pull_p99, trip_med; /* seconds */
    double gbps, memcpy_s, zmq_s, zmq_gbps, update_s;
    double cpu_s, zmq_cpu_s; /* CPU seconds per round trip: dcps (all processes), the floor */
} result_t;

static void print_row(const result_t *o)
{
    printf("%s,%d,%d,%llu,%g,%.0f,%.4f,%.4f,%.4f,%.4f,%.3f,%.4f,%.2f,%d,%.4f,%.2f,%.3f,%.2f,"
           "%.4f,%.2f,%.4f,%.4f,%.2f\n",
           o->kind,
           o->shards, o->workers, (unsigned long long)o->n, o->density, o->bytes_per_op,
           o->push_med * 1e3, o->push_p99 * 1e3, o->pull_med * 1e3, o->pull_p99 * 1e3, o->gbps,
           o->memcpy_s * 1e3, (o->push_med + o->pull_med) / o->memcpy_s, o->iters,
           o->zmq_s * 1e3, (o->push_med + o->pull_med) / o->zmq_s, o->zmq_gbps,
           o->gbps / o->zmq_gbps, o->update_s * 1e3,
           (o->push_med + o->pull_med) / (o->zmq_s + o->update_s), o->cpu_s * 1e3,
           o->zmq_cpu_s * 1e3, o->cpu_s / o->zmq_cpu_s);
    fflush(stdout);
}

/* Starts r->workers threads, lets them open their clients and warm up, sets
 * r->iters from worker 0's warm-up so that the timed loop takes about target_s,
 * and joins them. Returns 0, or -1 after saying why. */
static int run_workers(row_t *r, double target_s)
{
    pthread_t th[MAX_WORKERS];
    int started = 0, rc = 0;

    r->iters = 0;
    pthread_barrier_init(&r->gate, NULL, (unsigned)r->workers + 1);
    for (; started < r->workers; started++)
        if (pthread_create(&th[started], NULL, worker_main, &r->w[started]) != 0)
            break;
    if (started < r->workers) {
        /* The threads started wait at a barrier that the missing ones would have
         * to pass too: nothing to do but exit (at_exit stops the servers). */
        fprintf(stderr, "bench/pushpull: cannot start worker thread %d\n", started);
        exit(1);
    }
    pthread_barrier_wait(&r->gate); /* 1 */
    pthread_barrier_wait(&r->gate); /* 2 */
    double per = bench_median(r->w[0].warm, WARMUP);
    double want = per > 0 ? target_s / per : MAX_ITERS;
    r->iters = want < MIN_ITERS ? MIN_ITERS : want > MAX_ITERS ? MAX_ITERS : (int)want;
    for (int i = 0; i < r->workers; i++)
        if (r->w[i].rc)
            r->iters = 0;
    pthread_barrier_wait(&r->gate); /* 3 */
    for (int i = 0; i < r->workers; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&r->gate);

    for (int i = 0; i < r->workers; i++) {
        const worker_t *w = &r->w[i];
        if (w->rc) {
            fprintf(stderr, "bench/pushpull: %s (%s)\n", w->err, dcps_strerror(w->rc));
            rc = -1;
        } else if (w->after.retries > w->before.retries)
            fprintf(stderr, "bench/pushpull: warning: rank %d resent %llu requests\n", i,
                    (unsigned long long)(w->after.retries - w->before.retries));
    }
    return rc;
}

/* Worker 0's latencies and bytes, and the payload all workers moved per second
 * between the first start and the last end, into out (sorts the timings). */
static void summarise(row_t *r, size_t payload, result_t *out)
{
    worker_t *w = &r->w[0];
    int k = r->iters;
    double first = w->start, last = w->end, cpu0 = w->cpu_start, cpu1 = w->cpu_end;
    bool unread = false; /* a server's CPU clock could not be read: no cpu_ms */
    for (int i = 0; i < r->workers; i++) {
        first = r->w[i].start < first ? r->w[i].start : first;
        last = r->w[i].end > last ? r->w[i].end : last;
        cpu0 = r->w[i].cpu_start < cpu0 ? r->w[i].cpu_start : cpu0;
        cpu1 = r->w[i].cpu_end > cpu1 ? r->w[i].cpu_end : cpu1;
        unread |= r->w[i].cpu_start < 0 || r->w[i].cpu_end < 0;
    }
    uint64_t bytes = w->after.bytes_sent - w->before.bytes_sent + w->after.bytes_received -
                     w->before.bytes_received;
    out->iters = k;
    out->n = r->cfg.n_params;
    out->bytes_per_op = (double)bytes / k;
    out->push_med = bench_median(w->push_t, k);
    out->push_p99 = quantile(w->push_t, k, 0.99);
    out->pull_med = bench_median(w->pull_t, k);
    out->pull_p99 = quantile(w->pull_t, k, 0.99);
    out->trip_med = bench_median(w->trip_t, k);
    out->gbps = 8.0 * (double)payload * k * r->workers / (last - first) / 1e9;
    out->cpu_s = unread ? NAN : (cpu1 - cpu0) / ((double)k * r->workers);
}

/* One row against running servers: the memcpy baseline, then the workers. The
 * payload of a round trip is what push and pull carry without headers: 4n + 4n
 * bytes dense, 8k + 4n sparse. */
static int measure(row_t *r, double target_s, copybuf_t *cb, result_t *out)
{
    uint64_t n = r->cfg.n_params;
    size_t payload = (r->idx ? 8 * r->k : 4 * n) + 4 * n;
    int rc = 0;

    out->memcpy_s = memcpy_time(cb, payload);
    out->update_s = update_time(cb, n);
    int zrc = zmq_floor(r->workers, r->idx ? 8 * r->k : 4 * n, 4 * n, target_s / 4, &out->zmq_s,
                        &out->zmq_gbps, &out->zmq_cpu_s);
    for (int i = 0; i < r->workers; i++) {
        worker_t *w = &r->w[i];
        *w = (worker_t){.row = r, .rank = i};
        w->params = malloc(n * sizeof *w->params);
        w->push_t = malloc(3 * MAX_ITERS * sizeof(double));
        if (!w->params || !w->push_t)
            rc = -1;
        else
            w->pull_t = w->push_t + MAX_ITERS, w->trip_t = w->pull_t + MAX_ITERS;
    }
    if (zrc != 0) {
        fprintf(stderr, "bench/pushpull: the bare ZeroMQ baseline failed: %s\n",
                zmq_strerror(zmq_errno()));
        rc = -1;
    } else if (rc != 0 || out->memcpy_s < 0 || out->update_s < 0)
        fprintf(stderr, "bench/pushpull: out of memory for n = %llu\n", (unsigned long long)n);
    else if ((rc = run_workers(r, target_s)) == 0)
        summarise(r, payload, out);
    for (int i = 0; i < r->workers; i++) {
        free(r->w[i].params);
        free(r->w[i].push_t);
    }
    return rc != 0 || out->memcpy_s < 0 || out->update_s < 0 ? -1 : 0;
}

/* ---- the grid ---------------------------------------------------------------------- */

/* Layer sizes a,b in [1, LAYER_MAX] whose MLP, b*(a+1) parameters, comes
 * closest to target (exact for every power of two this program accepts). */
static void pick_layers(uint64_t target, job_t *j)
{
    uint64_t best_err = UINT64_MAX;
    for (uint64_t b = LAYER_MAX; b >= 1; b--) {
        uint64_t a1 = (target + b / 2) / b; /* a + 1, rounded */
        a1 = a1 < 2 ? 2 : a1 > LAYER_MAX + 1 ? LAYER_MAX + 1 : a1;
        uint64_t n = b * a1, err = n > target ? n - target : target - n;
        if (err < best_err) {
            best_err = err;
            j->a = (int)(a1 - 1), j->b = (int)b, j->n = n;
        }
    }
}

/* k ascending indices drawn uniformly without repetition from [0, n)
 * (selection sampling, Knuth's Algorithm S). */
static void sample_indices(dcps_rng_t *rng, uint64_t n, size_t k, uint32_t *idx)
{
    size_t got = 0;
    for (uint64_t i = 0; i < n && got < k; i++)
        if (dcps_rng_below(rng, n - i) < k - got)
            idx[got++] = (uint32_t)i;
}

typedef struct {
    const char *server;
    uint64_t sizes[MAX_SIZES];
    int n_sizes;
    double target_s; /* seconds of timed round trips per row */
    copybuf_t copy;
    bool have_headline;
    result_t headline;
} bench_t;

/* Every row for the model nearest to size: dense rows for each shard and worker
 * count, sparse rows with one worker. */
static int rows_for_size(bench_t *b, uint64_t size, bool headline_only)
{
    job_t j;
    pick_layers(size, &j);
    size_t kmax = (size_t)ceil(densities[0] * (double)j.n);
    float *x = malloc(j.n * sizeof *x), *val = malloc(kmax * sizeof *val);
    uint32_t *idx = malloc(kmax * sizeof *idx);
    row_t *r = malloc(sizeof *r);
    int rc = 0;
    if (!x || !val || !idx || !r) {
        fprintf(stderr, "bench/pushpull: out of memory for n = %llu\n", (unsigned long long)j.n);
        rc = -1;
        goto out;
    }
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 1);
    for (uint64_t i = 0; i < j.n; i++)
        x[i] = 1e-3f * dcps_rng_normal(&rng);
    for (size_t i = 0; i < kmax; i++)
        val[i] = x[i];

    for (int si = 0; si < n_shard_counts && rc == 0; si++)
        for (int wi = 0; wi < n_worker_counts && rc == 0; wi++) {
            j.shards = shard_counts[si], j.workers = worker_counts[wi];
            bool is_headline = j.n == HEADLINE_N && j.shards == 1 && j.workers == 1;
            if (headline_only && !is_headline)
                continue;
            if ((rc = start_servers(b->server, &j, &r->cfg)) != 0)
                break;
            r->workers = j.workers, r->x = x, r->val = val, r->idx = NULL, r->k = 0;
            result_t o = {.kind = "dense", .shards = j.shards, .workers = j.workers, .density = 1};
            rc = measure(r, b->target_s, &b->copy, &o);
            if (rc == 0 && is_headline)
                b->headline = o, b->have_headline = true;
            if (rc == 0 && !headline_only)
                print_row(&o);
            for (size_t d = 0; d < sizeof densities / sizeof densities[0] && rc == 0 &&
                               j.workers == 1 && !headline_only;
                 d++) {
                r->k = (size_t)ceil(densities[d] * (double)j.n);
                r->idx = idx;
                dcps_rng_seed(&rng, 2);
                sample_indices(&rng, j.n, r->k, idx);
                o = (result_t){
                    .kind = "sparse", .shards = j.shards, .workers = 1, .density = densities[d]};
                if ((rc = measure(r, b->target_s, &b->copy, &o)) == 0)
                    print_row(&o);
            }
            if (rc != 0)
                for (int s = 0; s < j.shards; s++)
                    show_log(s);
            stop_servers();
        }
out:
    free(x);
    free(val);
    free(idx);
    free(r);
    return rc;
}

/* ---- the program ------------------------------------------------------------------- */

static void usage(FILE *out)
{
    fprintf(out, "usage: bench/pushpull [--server PATH] [--sizes N,N,...] [--shards N,...]\n"
                 "                      [--workers N,...] [--parts N] [--values FMT] [--quick]\n"
                 "  --server PATH  the dcps-server program (default ./dcps-server)\n"
                 "  --sizes LIST   model sizes in floats, K and M suffixes (x1024, x1048576);\n"
                 "                 default 1K,64K,1M,4M,16M\n"
                 "  --shards LIST  shard counts, each 1 or 2 (default 1,2)\n"
                 "  --workers LIST worker counts, each 1 to 4 (default 1,2,4)\n"
                 "  --parts N      dense pushes and pull replies in N parts per shard, 0 to 64\n"
                 "                 (0: by size; default 1: whole)\n"
                 "  --values FMT   [compression] values: fp32 (default), fp16, bf16, int8\n"
                 "  --quick        sizes 1K,64K,1M and about 0.25 s per row\n");
}

/* "1K,64K,1M" into b->sizes. Returns 0, or -1 after saying why. */
static int parse_sizes(bench_t *b, const char *list)
{
    const char *p = list;
    b->n_sizes = 0;
    while (*p) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(p, &end, 10);
        if (*end == 'K' || *end == 'k')
            v <<= 10, end++;
        else if (*end == 'M' || *end == 'm')
            v <<= 20, end++;
        if (errno || end == p || (*end && *end != ',') || v < 128 || v > (1ull << 28) ||
            b->n_sizes == MAX_SIZES) {
            fprintf(stderr,
                    "bench/pushpull: --sizes: \"%s\": want up to %d sizes in "
                    "[128, 256M], comma separated\n",
                    list, MAX_SIZES);
            return -1;
        }
        b->sizes[b->n_sizes++] = v;
        p = *end ? end + 1 : end;
    }
    return b->n_sizes ? 0 : -1;
}

/* "1,2" into counts (each in [1, max], at most max of them). Returns how many,
 * or -1 after saying why. */
static int parse_counts(const char *opt, const char *list, int max, int *counts)
{
    int n = 0;
    for (const char *p = list; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || v < 1 || v > max || n == max) {
            fprintf(stderr, "bench/pushpull: %s: \"%s\": want up to %d counts in [1, %d]\n",
                    opt, list, max, max);
            return -1;
        }
        counts[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return n ? n : -1;
}

static int parse_args(int argc, char **argv, bench_t *b)
{
    static const struct option longopts[] = {
        {"server", required_argument, NULL, 's'},
        {"sizes", required_argument, NULL, 'n'},
        {"shards", required_argument, NULL, 'S'},
        {"workers", required_argument, NULL, 'W'},
        {"quick", no_argument, NULL, 'q'},
        {"parts", required_argument, NULL, 'p'},
        {"values", required_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *sizes = "1K,64K,1M,4M,16M";
    bool quick = false, sizes_given = false;
    int c;
    b->server = "./dcps-server";
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 's')
            b->server = optarg;
        else if (c == 'n')
            sizes = optarg, sizes_given = true;
        else if (c == 'S') {
            n_shard_counts = parse_counts("--shards", optarg, MAX_SHARDS, shard_counts);
            if (n_shard_counts < 0)
                return 2;
        } else if (c == 'W') {
            n_worker_counts = parse_counts("--workers", optarg, MAX_WORKERS, worker_counts);
            if (n_worker_counts < 0)
                return 2;
        } else if (c == 'p') {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || v < 0 || v > 64) {
                fprintf(stderr, "bench/pushpull: --parts: \"%s\": want a count from 0 to 64\n",
                        optarg);
                return 2;
            }
            parts = (int)v;
        } else if (c == 'v') {
            if (strcmp(optarg, "fp32") && strcmp(optarg, "fp16") && strcmp(optarg, "bf16") &&
                strcmp(optarg, "int8")) {
                fprintf(stderr, "bench/pushpull: --values: \"%s\" is not one of fp32, fp16, "
                                "bf16, int8\n", optarg);
                return 2;
            }
            values = optarg;
        } else if (c == 'q')
            quick = true;
        else {
            usage(c == 'h' ? stdout : stderr);
            return c == 'h' ? 1 : 2; /* 1: help given, exit 0 */
        }
    }
    if (optind < argc) {
        fprintf(stderr, "bench/pushpull: unexpected argument \"%s\"\n", argv[optind]);
        return 2;
    }
    if (quick && !sizes_given)
        sizes = "1K,64K,1M";
    b->target_s = quick ? 0.25 : 1.5;
    if (parse_sizes(b, sizes) != 0)
        return 2;
    if (access(b->server, X_OK) != 0) {
        fprintf(stderr, "bench/pushpull: %s: %s (give the program with --server)\n", b->server,
                strerror(errno));
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    bench_t *b = calloc(1, sizeof *b);
    char model[256];
    int rc;
    if (!b)
        return 1;
    if ((rc = parse_args(argc, argv, b)) != 0) {
        free(b);
        return rc == 1 ? 0 : rc;
    }
    if (scratch_dir() != 0) {
        free(b);
        return 1;
    }
    atexit(at_exit);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);

    bench_cpu_model(model, sizeof model);
    printf("# machine: %s, %ld cores shared by the servers and the workers, no GPU used\n", model,
           sysconf(_SC_NPROCESSORS_ONLN));
    printf("# setup: %s on tcp://127.0.0.1, async sgd lr 1e-9, values %s, worker threads each "
           "with its own client; dense pushes and replies in %d part%s per shard%s; n = a*b + b "
           "for [model] layers a,b:",
           b->server, values, parts, parts == 1 ? "" : "s", parts == 0 ? " (0: by size)" : "");
    for (int i = 0; i < b->n_sizes; i++) {
        job_t j;
        pick_layers(b->sizes[i], &j);
        printf(" %d,%d=%llu", j.a, j.b, (unsigned long long)j.n);
    }
    printf("\nkind,shards,workers,n,density,bytes_per_op,push_median_ms,push_p99_ms,"
           "pull_median_ms,pull_p99_ms,gbps,memcpy_ms,ratio,iters,zmq_ms,ratio_zmq,zmq_gbps,"
           "gbps_ratio_zmq,update_ms,ratio_zmq_update,cpu_ms,zmq_cpu_ms,cpu_ratio_zmq\n");
    fflush(stdout);

    rc = 0;
    for (int i = 0; i < b->n_sizes && rc == 0; i++)
        rc = rows_for_size(b, b->sizes[i], false);
    if (rc == 0 && !b->have_headline)
        rc = rows_for_size(b, HEADLINE_N, true);
    if (rc == 0 && b->have_headline) {
        const result_t *h = &b->headline;
        printf("# headline: 4 MiB each way (n = %d floats), 1 shard, 1 worker: push then pull "
               "%.3f ms median per round trip (push %.3f + pull %.3f ms), memcpy of the 8 MiB "
               "%.3f ms, bare ZeroMQ round trips of the same sizes %.3f ms\n",
               HEADLINE_N, h->trip_med * 1e3, h->push_med * 1e3, h->pull_med * 1e3,
               h->memcpy_s * 1e3, h->zmq_s * 1e3);
    }
    free(b->copy.src);
    free(b->copy.dst);
    free(b);
    return rc == 0 ? 0 : 1;
}
