/* dcps bench/shardcap — what one shard can take: replayed traffic, no workers.
 *
 * For each configuration (mode × update rule × encoding) and each offered load
 * (a number of client sessions, each with one request in flight), it starts one
 * real dcps-server shard on 127.0.0.1, opens that many DEALER sockets, admits
 * each through the normal path (HELLO as its own rank and session; rank 0 sends
 * INIT), and replays pre-encoded pushes and pulls: a push's payload (a dense
 * gradient, or k ascending indices and their values) is made once before the
 * timed phases and sent zero-copy again and again; only the small header
 * (seq, step, version) is packed per message. Nothing computes a gradient or
 * a top-k, so the shard is the only thing measured. Values go as float32 or,
 * with --values, in a shorter format (fp16, bf16, int8 in blocks of 256),
 * encoded once like the rest; the shard then answers pulls in that format
 * too ([compression] values). The encoding `twobit` pushes dense 2-bit codes
 * (push = twobit) and pulls float32.
 *
 * By default the shard listens on 127.0.0.1. With --address A (and, as root,
 * --netns NS) it runs in network namespace NS through `ip netns exec`, listens
 * on A and serves its /metrics there, and shardcap reaches it over whatever
 * links join the namespaces: bench/netem.sh -x shardcap runs it that way,
 * the driver in one emulated host and the shard in another.
 *
 * Three phases per load, on the same shard:
 *   cycle  every session pushes, waits for the ack, pulls, waits for the reply,
 *          again: the throughput, bytes and latency columns;
 *   pull   every session pulls again and again: the shard's CPU per pull;
 *   push   every session pushes again and again (async and ssp; a sync round
 *          needs its pulls): the shard's CPU per push. In sync the CPU per push
 *          is the cycle's CPU less its pulls at the pull phase's cost.
 * The shard's CPU time is its process's (every thread: the loop and ZeroMQ's
 * I/O thread) from clock_getcpuclockid, read at each phase's ends.
 *
 * The load grows through --sessions until throughput stops growing: after two
 * levels in a row that add less than 5% to the best so far, the sweep of that
 * configuration ends; `saturated` marks the first level within 5% of the best.
 * At the end of each level the shard's /metrics are read and must agree with
 * what shardcap counted (pushes acknowledged, pulls answered, the version);
 * a disagreement is an error (exit 1).
 *
 * usage: see usage() below, and bench/README.md. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <zmq.h>

#include "bench/bench.h"
#include "common/config.h"
#include "common/error.h"
#include "common/rng.h"
#include "proto/codec.h"
#include "proto/frame.h"
#include "proto/quant.h"

#define MAX_LEVELS 16
#define MAX_LIST 16
#define MAX_SESSIONS 1000 /* below [job] workers' 1024 */
#define VARIANTS 4        /* different sparse index sets, sent in turn */
#define GROWTH 1.05       /* a level must add 5% to the best throughput so far */
#define WAIT_S 60.0       /* the longest wait for any reply: a stuck shard is an error */
/* push = twobit: the threshold, one standard deviation of the replayed gradient
 * (about a third of its entries are sent as +-tau). */
#define TWOBIT_TAU 0.001f

/* ---- what is measured: the tables ---------------------------------------------- */

/* An update rule: its name in the CSV and its [optimizer] lines. */
typedef struct {
    const char *name;
    const char *ini;
    bool backups; /* keeps a copy of the parameters per worker (delay compensation) */
} rule_t;

static const rule_t rules[] = {
    {"sgd", "kind = sgd\n", false},
    {"momentum", "kind = momentum\nmomentum = 0.9\n", false},
    {"nesterov", "kind = momentum\nmomentum = 0.9\nnesterov = true\n", false},
    {"adam", "kind = adam\n", false},
    {"adamw", "kind = adamw\n", false},
    {"adagrad", "kind = adagrad\n", false},
    {"momentum_lazy", "kind = momentum\nmomentum = 0.9\nlazy = true\n", false},
    {"adam_lazy", "kind = adam\nlazy = true\n", false},
    {"dcasgd", "kind = sgd\ndelay_compensation = constant\ndc_lambda = 0.04\n", true},
    {"dcasgd_a", "kind = sgd\ndelay_compensation = adaptive\ndc_lambda = 2\n", true},
    {"adam_dca", "kind = adam\ndelay_compensation = adaptive\ndc_lambda = 2\n", true},
};
#define N_RULES (sizeof rules / sizeof rules[0])

/* An encoding: what a push and a pull carry. */
typedef struct {
    const char *name;
    bool sparse_push;
    bool delta_pull;
    bool twobit; /* a dense push of 2-bit codes; the pull replies are float32 */
} encoding_t;

static const encoding_t encodings[] = {
    {"dense", false, false, false},
    {"topk", true, false, false},
    {"topk_delta", true, true, false},
    {"twobit", false, false, true},
};
#define N_ENCODINGS (sizeof encodings / sizeof encodings[0])

static const char *const modes[] = {"async", "sync", "ssp"};
#define N_MODES 3

/* A value format: its [compression] values name and the frames' dtype. */
typedef struct {
    const char *name;
    uint32_t dtype;
} format_t;

static const format_t formats[] = {
    {"fp32", DCPS_DTYPE_F32},
    {"fp16", DCPS_DTYPE_F16},
    {"bf16", DCPS_DTYPE_BF16},
    {"int8", DCPS_DTYPE_I8},
};
#define N_FORMATS (sizeof formats / sizeof formats[0])

/* ---- options ------------------------------------------------------------------------ */

typedef struct {
    const char *server;
    uint64_t n;     /* parameters on the shard */
    double density; /* sparse push and delta pull: k = ceil(density n) */
    int staleness;  /* ssp */
    double seconds; /* the cycle phase; the pull and push phases take half each */
    int levels[MAX_LEVELS], n_levels;
    int mode[MAX_LIST], n_mode;
    int rule[MAX_LIST], n_rule;
    int enc[MAX_LIST], n_enc;
    int fmt[MAX_LIST], n_fmt;
    const char *address; /* the shard's IPv4 address (127.0.0.1) */
    const char *netns;   /* the network namespace it runs in, or NULL */
    bool full_sweep; /* run every level, even past saturation */
    double mem_gb;   /* skip a level whose shard would need more */
} opts_t;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench/shardcap [options]   (run from the build directory)\n"
            "  --server PATH        the shard program (./dcps-server)\n"
            "  --params N           parameters on the shard, 64 to 2^30 (1048576; K, M suffixes)\n"
            "  --density D          sparse push and delta pull density, (0, 1] (0.01)\n"
            "  --modes LIST         async,sync,ssp (async)\n"
            "  --rules LIST         of:");
    for (size_t i = 0; i < N_RULES; i++)
        fprintf(f, " %s", rules[i].name);
    fprintf(f, "; or all (sgd)\n"
               "  --encodings LIST     dense,topk,topk_delta,twobit or all (dense)\n"
               "  --values LIST        fp32,fp16,bf16,int8 or all: the values' format on the\n"
               "                       wire, both ways (fp32; twobit runs once, with fp32)\n"
               "  --address A          the shard's IPv4 address, where it listens and serves\n"
               "                       its metrics (127.0.0.1)\n"
               "  --netns NS           run the shard in network namespace NS (ip netns exec;\n"
               "                       root); give --address, an address of NS\n"
               "  --sessions LIST      offered loads: client sessions, 1 to %d, ascending\n"
               "                       (1,2,4,8,16,32,64,128,256)\n"
               "  --seconds S          cycle phase per level, 0.05 to 600 (2)\n"
               "  --staleness S        ssp bound, 0 to 1000 (4)\n"
               "  --full-sweep         every level of --sessions, not only up to saturation\n"
               "  --mem-gb G           skip levels whose shard needs more, 0.01 to 1024 (4)\n",
            MAX_SESSIONS);
}

/* A whole decimal number with an optional K or M suffix (1024, 1048576), in
 * [lo, hi]; -1 with a sentence naming the option otherwise. */
static int parse_count(const char *opt, const char *v, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!*v || *v == '-' || *v == '+')
        goto bad;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v)
        goto bad;
    uint64_t mul = *end == 'K' ? 1024u : *end == 'M' ? 1048576u : 1u;
    if (mul != 1)
        end++;
    if (*end || x > hi / mul || x * mul < lo || x * mul > hi)
        goto bad;
    *out = x * mul;
    return 0;
bad:
    fprintf(stderr, "bench/shardcap: %s: \"%s\" is not a whole number from %" PRIu64
                    " to %" PRIu64 "\n",
            opt, v, lo, hi);
    return -1;
}

static int parse_real(const char *opt, const char *v, double lo, bool lo_open, double hi,
                      double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x) || (lo_open ? x <= lo : x < lo) || x > hi) {
        fprintf(stderr, "bench/shardcap: %s: \"%s\" is not a number in %c%g, %g]\n", opt, v,
                lo_open ? '(' : '[', lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

/* A comma-separated list of names from names[0..n) ("all": every one) into
 * out[], as indices. */
static int parse_names(const char *opt, const char *v, const char *const *names, size_t stride,
                       size_t n, int *out, int *count)
{
    char buf[512], *save = NULL;
    *count = 0;
    if (strcmp(v, "all") == 0) {
        for (size_t i = 0; i < n && i < MAX_LIST; i++)
            out[(*count)++] = (int)i;
        return 0;
    }
    if (strlen(v) >= sizeof buf || !*v)
        goto bad;
    snprintf(buf, sizeof buf, "%s", v);
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        size_t i = 0;
        while (i < n && strcmp(*(const char *const *)((const char *)names + i * stride), t) != 0)
            i++;
        if (i == n) {
            fprintf(stderr, "bench/shardcap: %s: unknown name \"%s\"\n", opt, t);
            return -1;
        }
        if (*count == MAX_LIST)
            goto bad;
        out[(*count)++] = (int)i;
    }
    if (*count > 0)
        return 0;
bad:
    fprintf(stderr, "bench/shardcap: %s: \"%s\" is not a list of names (see --help)\n", opt, v);
    return -1;
}

static int parse_levels(const char *v, opts_t *o)
{
    char buf[512], *save = NULL;
    o->n_levels = 0;
    if (strlen(v) >= sizeof buf || !*v) {
        fprintf(stderr, "bench/shardcap: --sessions: \"%s\" is not a list of counts\n", v);
        return -1;
    }
    snprintf(buf, sizeof buf, "%s", v);
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        uint64_t x;
        if (parse_count("--sessions", t, 1, MAX_SESSIONS, &x) != 0)
            return -1;
        if (o->n_levels == MAX_LEVELS) {
            fprintf(stderr, "bench/shardcap: --sessions: more than %d levels\n", MAX_LEVELS);
            return -1;
        }
        if (o->n_levels > 0 && (int)x <= o->levels[o->n_levels - 1]) {
            fprintf(stderr, "bench/shardcap: --sessions: \"%s\" does not ascend\n", v);
            return -1;
        }
        o->levels[o->n_levels++] = (int)x;
    }
    return 0;
}

static int parse_opts(int argc, char **argv, opts_t *o)
{
    enum { O_SERVER = 256, O_PARAMS, O_DENSITY, O_MODES, O_RULES, O_ENC, O_VALUES, O_ADDRESS,
           O_NETNS, O_SESSIONS, O_SECONDS, O_STALE, O_FULL, O_MEM, O_HELP };
    static const struct option lo[] = {
        {"server", required_argument, NULL, O_SERVER},
        {"params", required_argument, NULL, O_PARAMS},
        {"density", required_argument, NULL, O_DENSITY},
        {"modes", required_argument, NULL, O_MODES},
        {"rules", required_argument, NULL, O_RULES},
        {"encodings", required_argument, NULL, O_ENC},
        {"values", required_argument, NULL, O_VALUES},
        {"address", required_argument, NULL, O_ADDRESS},
        {"netns", required_argument, NULL, O_NETNS},
        {"sessions", required_argument, NULL, O_SESSIONS},
        {"seconds", required_argument, NULL, O_SECONDS},
        {"staleness", required_argument, NULL, O_STALE},
        {"full-sweep", no_argument, NULL, O_FULL},
        {"mem-gb", required_argument, NULL, O_MEM},
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0},
    };
    *o = (opts_t){.server = "./dcps-server", .n = 1048576, .density = 0.01, .staleness = 4,
                  .seconds = 2, .n_levels = 9, .levels = {1, 2, 4, 8, 16, 32, 64, 128, 256},
                  .n_mode = 1, .n_rule = 1, .n_enc = 1, .n_fmt = 1, .address = "127.0.0.1",
                  .mem_gb = 4};
    uint64_t x;
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case O_SERVER: o->server = optarg; break;
        case O_PARAMS: rc = parse_count("--params", optarg, 64, 1u << 30, &o->n); break;
        case O_DENSITY: rc = parse_real("--density", optarg, 0, true, 1, &o->density); break;
        case O_MODES:
            rc = parse_names("--modes", optarg, modes, sizeof modes[0], N_MODES, o->mode,
                             &o->n_mode);
            break;
        case O_RULES:
            rc = parse_names("--rules", optarg, &rules[0].name, sizeof rules[0], N_RULES, o->rule,
                             &o->n_rule);
            break;
        case O_ENC:
            rc = parse_names("--encodings", optarg, &encodings[0].name, sizeof encodings[0],
                             N_ENCODINGS, o->enc, &o->n_enc);
            break;
        case O_VALUES:
            rc = parse_names("--values", optarg, &formats[0].name, sizeof formats[0], N_FORMATS,
                             o->fmt, &o->n_fmt);
            break;
        case O_ADDRESS: o->address = optarg; break;
        case O_NETNS: o->netns = optarg; break;
        case O_SESSIONS: rc = parse_levels(optarg, o); break;
        case O_SECONDS: rc = parse_real("--seconds", optarg, 0.05, false, 600, &o->seconds); break;
        case O_STALE:
            rc = parse_count("--staleness", optarg, 0, 1000, &x);
            o->staleness = (int)x;
            break;
        case O_FULL: o->full_sweep = true; break;
        case O_MEM: rc = parse_real("--mem-gb", optarg, 0.01, false, 1024, &o->mem_gb); break;
        case O_HELP: usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
        if (rc != 0)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "bench/shardcap: unexpected argument \"%s\"\n", argv[optind]);
        return -1;
    }
    struct in_addr a;
    if (inet_pton(AF_INET, o->address, &a) != 1) {
        fprintf(stderr, "bench/shardcap: --address: \"%s\" is not an IPv4 address\n", o->address);
        return -1;
    }
    if (o->netns && strcmp(o->address, "127.0.0.1") == 0) {
        fprintf(stderr,
                "bench/shardcap: --netns needs --address, an address of %s that this "
                "namespace reaches\n",
                o->netns);
        return -1;
    }
    if (access(o->server, X_OK) != 0) {
        fprintf(stderr, "bench/shardcap: --server: cannot run \"%s\": %s\n", o->server,
                strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- the shard process ------------------------------------------------------------- */

/* The scratch paths and the shard's pid, in statics for the exit and signal
 * paths (which only call kill, waitpid, unlink and rmdir). */
enum { F_JOB, F_ENDPOINT, F_ENDPOINT_TMP, F_LOG, N_FILES };
static const char *const file_names[N_FILES] = {"job.ini", "shard.endpoint",
                                                "shard.endpoint.tmp", "shard.log"};
static char dir[256], files[N_FILES][300];
#define job_path files[F_JOB]
#define ep_path files[F_ENDPOINT]
#define log_path files[F_LOG]
static volatile pid_t shard_pid;

/* Kills the shard and removes the scratch directory (the shard writes its
 * endpoint to the .tmp file, then renames it). */
static void cleanup(void)
{
    bench_kill_child(&shard_pid);
    for (int i = 0; dir[0] && i < N_FILES; i++)
        unlink(files[i]);
    if (dir[0])
        rmdir(dir);
}

static int make_scratch(void)
{
    if (bench_scratch_dir("shardcap", dir, sizeof dir) != 0)
        return -1;
    for (int i = 0; i < N_FILES; i++)
        snprintf(files[i], sizeof files[i], "%s/%s", dir, file_names[i]);
    return 0;
}

static void on_signal(int sig)
{
    cleanup();
    _exit(128 + sig);
}

/* One level's job: what the shard serves. */
typedef struct {
    int mode, rule, enc, fmt, sessions;
} level_t;

/* A TCP port that was free a moment ago on 127.0.0.1, for the metrics endpoint;
 * 0 if none could be found. */
static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* The job file: one shard on an ephemeral port, `sessions` workers, nobody
 * declared dead during a run, and a learning rate small enough that no rule
 * leaves the finite range however long the replay. */
static int write_job(const opts_t *o, const level_t *l, int metrics_port)
{
    const encoding_t *e = &encodings[l->enc];
    FILE *f = fopen(job_path, "w");
    if (!f)
        return -1;
    fprintf(f, "[job]\nname = shardcap\nworkers = %d\nmode = %s\nstaleness = %d\n"
               "log_level = warning\n",
            l->sessions, modes[l->mode], o->staleness);
    fprintf(f, "[servers]\nshards = tcp://%s:*\n", o->address);
    fprintf(f, "[model]\nparams = %" PRIu64 "\n", o->n);
    fprintf(f, "[optimizer]\n%slr = 1e-6\n", rules[l->rule].ini);
    fprintf(f, "[compression]\npush = %s\npull = %s\ndensity = %g\nvalues = %s\n",
            e->twobit ? "twobit" : e->sparse_push ? "topk" : "dense",
            e->delta_pull ? "delta" : "dense", o->density, formats[l->fmt].name);
    if (e->twobit)
        fprintf(f, "threshold = %g\n", (double)TWOBIT_TAU);
    fprintf(f,
            "[server]\nheartbeat_ms = 600000\ndead_after_ms = 3600000\nmetrics_port = %d\n"
            "metrics_address = %s\n",
            metrics_port, o->address);
    return fclose(f) == 0 ? 0 : -1;
}

static void show_log(void)
{
    char line[512];
    FILE *f = fopen(log_path, "r");
    while (f && fgets(line, sizeof line, f))
        fprintf(stderr, "  shard: %s", line);
    if (f)
        fclose(f);
}

/* Starts the shard (in o->netns when set) and waits at most 30 s for its
 * endpoint (into ep). */
static int start_shard(const opts_t *o, char *ep)
{
    const char *server = o->server;
    unlink(ep_path);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
#ifdef __linux__
        prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
            _exit(126);
        if (o->netns) /* ip execs the shard: its pid stays this child's */
            execlp("ip", "ip", "netns", "exec", o->netns, server, "--config", job_path, "--shard",
                   "0", "--endpoint-file", ep_path, (char *)NULL);
        else
            execl(server, server, "--config", job_path, "--shard", "0", "--endpoint-file",
                  ep_path, (char *)NULL);
        _exit(127);
    }
    shard_pid = pid;
    for (int i = 0; i < 3000; i++) {
        if (bench_first_line(ep_path, ep, DCPS_ENDPOINT_MAX) == 0)
            return 0;
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            shard_pid = 0;
            break;
        }
        usleep(10000);
    }
    fprintf(stderr, "bench/shardcap: the shard (%s) did not start\n", server);
    show_log();
    bench_kill_child(&shard_pid);
    return -1;
}

/* SIGTERM, then SIGKILL after 10 s. 0 if it exited with status 0. */
static int stop_shard(void)
{
    int status = 0;
    pid_t pid = shard_pid;
    kill(pid, SIGTERM);
    for (int i = 0; i < 1000 && waitpid(pid, &status, WNOHANG) == 0; i++)
        usleep(10000);
    if (waitpid(pid, &status, WNOHANG) == 0) {
        bench_kill_child(&shard_pid);
        return -1;
    }
    shard_pid = 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* The shard's counters from its /metrics endpoint. */
typedef struct {
    double pushes, pulls, version, errors;
} shard_metrics_t;

/* The value of the sample `name` (with or without labels) in a Prometheus text
 * body; the sum over its label sets; NAN if absent. */
static double metric(const char *body, const char *name)
{
    double sum = NAN;
    size_t len = strlen(name);
    for (const char *p = body; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, name, len) != 0 || (p[len] != ' ' && p[len] != '{'))
            continue;
        const char *eol = strchr(p, '\n'), *sp = p + len;
        for (const char *q = p + len; *q && (!eol || q < eol); q++)
            if (*q == ' ')
                sp = q;
        sum = (isnan(sum) ? 0 : sum) + strtod(sp, NULL);
    }
    return sum;
}

static int read_metrics(const char *address, int port, shard_metrics_t *m)
{
    static char body[1 << 20];
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, address, &a.sin_addr); /* checked by parse_opts */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    size_t got = 0;
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        fprintf(stderr, "bench/shardcap: cannot reach the shard's metrics on port %d: %s\n", port,
                strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    static const char req[] = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, req, sizeof req - 1) != (ssize_t)(sizeof req - 1)) {
        close(fd);
        return -1;
    }
    for (ssize_t r; got < sizeof body - 1 && (r = read(fd, body + got, sizeof body - 1 - got)) > 0;)
        got += (size_t)r;
    close(fd);
    body[got] = '\0';
    m->pushes = metric(body, "dcps_pushes_total");
    m->pulls = metric(body, "dcps_pulls_total");
    m->version = metric(body, "dcps_version");
    m->errors = metric(body, "dcps_errors_total");
    if (isnan(m->errors))
        m->errors = 0;
    if (isnan(m->pushes) || isnan(m->pulls) || isnan(m->version)) {
        fprintf(stderr, "bench/shardcap: the shard's /metrics lack dcps_pushes_total, "
                        "dcps_pulls_total or dcps_version\n");
        return -1;
    }
    return 0;
}

/* ---- the sessions ------------------------------------------------------------------- */

/* The payloads, made once: sent zero-copy, never freed before the context. */
typedef struct {
    float *init;                  /* n: INIT's values */
    float *dense;                 /* n: a dense gradient */
    uint32_t *idx[VARIANTS];      /* k ascending indices each */
    float *val;                   /* k values */
    size_t k;
    /* The same values in each format of --values (NULL where not asked for; the
     * fp32 slot stays NULL: dense and val are sent as they are), and the dense
     * gradient as 2-bit codes (encoding twobit). */
    void *dense_as[N_FORMATS], *val_as[N_FORMATS], *twobit;
} payload_t;

/* The block of a frame of `count` values in dtype, as libdcps's client sends it. */
static uint32_t block_of(uint32_t dtype, uint64_t count)
{
    return dtype == DCPS_DTYPE_I8 && count > DCPS_QUANT_BLOCK ? DCPS_QUANT_BLOCK : 0;
}

/* Points frame f of m at `count` values in dtype, of kind DENSE or VALUES: the
 * float32 array, or its encoded copy. */
static void set_values(dcps_msg_t *m, int f, uint32_t kind, uint32_t dtype, uint64_t count,
                       const void *data)
{
    m->frame[f] = (dcps_frame_desc_t){kind, dtype, count};
    m->block[f] = block_of(dtype, count);
    m->payload[f] = (dcps_buf_t){(void *)data, (size_t)dcps_quant_bytes(dtype, count, m->block[f])};
}

static void no_free(void *data, void *hint) {}

enum { IDLE, PUSHING, PULLING };
enum { PH_CYCLE, PH_PULL, PH_PUSH };

typedef struct {
    void *sock;
    uint32_t rank;
    uint64_t session, seq;
    uint64_t step;    /* the next step to push */
    uint64_t version; /* of the parameters last pulled */
    int state;
    double sent;      /* when the request in flight was sent */
    uint64_t pushes;  /* pushes sent */
} sess_t;

/* Growable arrays of latencies (seconds). */
typedef struct {
    double *t;
    size_t n, cap;
} lat_t;

static int lat_add(lat_t *l, double x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 4096;
        double *t = realloc(l->t, cap * sizeof *t);
        if (!t)
            return -1;
        l->t = t, l->cap = cap;
    }
    l->t[l->n++] = x;
    return 0;
}

/* The q-quantile by nearest rank, in milliseconds (sorts); NAN if empty. */
static double lat_q(lat_t *l, double q)
{
    if (l->n == 0)
        return NAN;
    qsort(l->t, l->n, sizeof l->t[0], bench_cmp);
    size_t at = (size_t)ceil(q * (double)l->n);
    return 1e3 * l->t[at > 0 ? at - 1 : 0];
}

/* What one run of a level has: its sockets and sessions, counters per phase. */
typedef struct {
    const opts_t *o;
    const level_t *l;
    const payload_t *p;
    uint64_t job_id;
    void *ctx;
    sess_t *s;
    zmq_pollitem_t *items;
    int n;
    dcps_rng_t rng;
    /* the phase in progress */
    int phase;
    bool stopping;
    bool lockstep;      /* sync or ssp: a stopping cycle catches up to stop_step */
    uint64_t stop_step;
    uint64_t acks, replies, flagged; /* flagged: DUPLICATE or STALE acks */
    uint64_t bytes_out, bytes_in, push_bytes, pull_bytes;
    lat_t push_lat, pull_lat;
    /* over every phase */
    uint64_t total_acks, total_replies, rounds_seen;
} run_t;

/* Sends request m on session s (zero-copy payload); counts its bytes. */
static int send_msg(run_t *r, sess_t *s, dcps_msg_t *m)
{
    m->job_id = r->job_id;
    m->rank = s->rank;
    m->session = s->session;
    m->seq = ++s->seq;
    m->shard = 0;
    m->has |= DCPS_HAS_SHARD;
    int n = dcps_frames_send(s->sock, NULL, m, no_free, NULL, 0);
    if (n < 0) {
        fprintf(stderr, "bench/shardcap: send to the shard failed: %s\n", zmq_strerror(errno));
        return -1;
    }
    r->bytes_out += (uint64_t)n;
    s->sent = bench_now();
    return n;
}

static int send_push(run_t *r, sess_t *s)
{
    const payload_t *p = r->p;
    dcps_msg_t m = {.type = DCPS_MSG_PUSH, .step = s->step, .param_version = s->version,
                    .has = DCPS_HAS_STEP | DCPS_HAS_PARAM_VERSION};
    int fmt = r->l->fmt;
    uint32_t dtype = formats[fmt].dtype;
    if (encodings[r->l->enc].sparse_push) {
        m.nframes = 2;
        m.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_INDICES, DCPS_DTYPE_U32, p->k};
        m.payload[0] = (dcps_buf_t){p->idx[s->pushes % VARIANTS], p->k * sizeof(uint32_t)};
        set_values(&m, 1, DCPS_FRAME_VALUES, dtype, p->k, p->val_as[fmt] ? p->val_as[fmt] : p->val);
    } else if (encodings[r->l->enc].twobit) {
        m.nframes = 1;
        set_values(&m, 0, DCPS_FRAME_DENSE, DCPS_DTYPE_TWOBIT, r->o->n, p->twobit);
    } else {
        m.nframes = 1;
        set_values(&m, 0, DCPS_FRAME_DENSE, dtype, r->o->n,
                   p->dense_as[fmt] ? p->dense_as[fmt] : p->dense);
    }
    int n = send_msg(r, s, &m);
    if (n < 0)
        return -1;
    r->push_bytes += (uint64_t)n;
    s->pushes++;
    s->step++;
    s->state = PUSHING;
    return 0;
}

/* A pull for the step the session computes next; a delta once it holds a version
 * (dense the first time: `first`). */
static int send_pull(run_t *r, sess_t *s, bool first)
{
    dcps_msg_t m = {.type = DCPS_MSG_PULL, .step = s->step, .has = DCPS_HAS_STEP};
    if (encodings[r->l->enc].delta_pull && !first) {
        m.flags = DCPS_FLAG_DELTA;
        m.param_version = s->version;
        m.has |= DCPS_HAS_FLAGS | DCPS_HAS_PARAM_VERSION;
    }
    int n = send_msg(r, s, &m);
    if (n < 0)
        return -1;
    r->pull_bytes += (uint64_t)n;
    s->state = PULLING;
    return 0;
}

/* The next request of session s in the current phase, or none when stopping.
 * A cycle that stops still ends with its pull; in sync and ssp every session
 * first catches up with the step the furthest one had reached when the phase
 * ended (r->stop_step), or the last round, or the slowest clock, would wait for
 * the sessions that stopped behind it. */
static int next_request(run_t *r, sess_t *s, int just_done)
{
    s->state = IDLE;
    if (r->stopping) {
        if (r->phase != PH_CYCLE)
            return 0;
        if (just_done == PUSHING)
            return send_pull(r, s, false);
        return r->lockstep && s->step < r->stop_step ? send_push(r, s) : 0;
    }
    switch (r->phase) {
    case PH_CYCLE: return just_done == PUSHING ? send_pull(r, s, false) : send_push(r, s);
    case PH_PULL: return send_pull(r, s, false);
    default: return send_push(r, s);
    }
}

/* Handles one message from the shard on session s. */
static int on_reply(run_t *r, sess_t *s, const dcps_frames_t *f, int bytes)
{
    dcps_msg_t m;
    char why[300];
    int rc = dcps_frames_decode(f, 0, r->job_id, &m, why, sizeof why);
    if (rc != 0) {
        fprintf(stderr, "bench/shardcap: a reply to rank %u does not decode: %s\n", s->rank, why);
        return -1;
    }
    if (m.type == DCPS_MSG_HEARTBEAT)
        return 0; /* WAITING: the request still waits (sync, ssp) */
    if (m.type == DCPS_MSG_ERROR) {
        fprintf(stderr, "bench/shardcap: the shard answered rank %u's seq %" PRIu64
                        " with ERROR %u: %s\n",
                s->rank, m.seq, m.error_code, m.error_text);
        return -1;
    }
    if (m.seq != s->seq) {
        fprintf(stderr, "bench/shardcap: rank %u got a %s for seq %" PRIu64 ", its request in "
                        "flight is seq %" PRIu64 "\n",
                s->rank, dcps_msg_type_name(m.type), m.seq, s->seq);
        return -1;
    }
    double lat = bench_now() - s->sent;
    r->bytes_in += (uint64_t)bytes;
    if (m.type == DCPS_MSG_PUSH_ACK && s->state == PUSHING) {
        r->push_bytes += (uint64_t)bytes;
        r->acks++;
        if (m.flags & (DCPS_FLAG_DUPLICATE | DCPS_FLAG_STALE))
            r->flagged++;
        if (r->phase == PH_CYCLE && lat_add(&r->push_lat, lat) != 0)
            return -1;
        return next_request(r, s, PUSHING);
    }
    if (m.type == DCPS_MSG_PULL_REPLY && s->state == PULLING) {
        r->pull_bytes += (uint64_t)bytes;
        r->replies++;
        s->version = m.param_version;
        if (r->phase == PH_CYCLE && lat_add(&r->pull_lat, lat) != 0)
            return -1;
        return next_request(r, s, PULLING);
    }
    fprintf(stderr, "bench/shardcap: unexpected %s for rank %u\n", dcps_msg_type_name(m.type),
            s->rank);
    return -1;
}

/* Receives and handles everything that is ready, waiting at most timeout_ms for
 * the first message. Returns the messages handled, or -1. */
static int pump(run_t *r, long timeout_ms)
{
    int ready = zmq_poll(r->items, r->n, timeout_ms);
    if (ready < 0)
        return errno == EINTR ? 0 : -1;
    int handled = 0;
    for (int i = 0; i < r->n && ready > 0; i++) {
        if (!(r->items[i].revents & ZMQ_POLLIN))
            continue;
        dcps_frames_t f;
        int parts;
        while ((parts = dcps_frames_recv(r->s[i].sock, &f, ZMQ_DONTWAIT)) > 0) {
            int bytes = 0;
            for (int j = 0; j < f.n; j++)
                bytes += (int)zmq_msg_size(&f.part[j]);
            int rc = on_reply(r, &r->s[i], &f, bytes);
            dcps_frames_close(&f);
            if (rc != 0)
                return -1;
            handled++;
        }
        if (parts < 0)
            return -1;
    }
    return handled;
}

static bool all_idle(const run_t *r)
{
    for (int i = 0; i < r->n; i++)
        if (r->s[i].state != IDLE)
            return false;
    return true;
}

/* Handles replies until `until` (a bench_now() time) has passed, or with until
 * 0, until every session is idle; -1 after WAIT_S without any reply. */
static int pump_until(run_t *r, double until)
{
    double last = bench_now();
    while (until > 0 ? bench_now() < until : !all_idle(r)) {
        int h = pump(r, 50);
        if (h < 0)
            return -1;
        if (h > 0)
            last = bench_now();
        else if (bench_now() - last > WAIT_S) {
            fprintf(stderr, "bench/shardcap: no reply for %.0f s\n", WAIT_S);
            return -1;
        }
    }
    return 0;
}

static int drain(run_t *r)
{
    return pump_until(r, 0);
}

/* What one phase measured. */
typedef struct {
    double wall, shard_cpu, self_cpu;
    uint64_t acks, replies, flagged, bytes, push_bytes, pull_bytes;
} phase_t;

/* Runs a phase for `seconds`: every session starts its first request, and each
 * reply brings the next; then no new request, and the ones in flight finish. */
static int run_phase(run_t *r, int phase, double seconds, phase_t *out)
{
    r->phase = phase;
    r->stopping = false;
    r->acks = r->replies = r->flagged = 0;
    r->bytes_out = r->bytes_in = r->push_bytes = r->pull_bytes = 0;
    r->push_lat.n = r->pull_lat.n = 0;
    double cpu0 = bench_cpu_seconds(shard_pid), self0 = bench_cpu_seconds(0), t0 = bench_now();
    for (int i = 0; i < r->n; i++)
        if ((phase == PH_PULL ? send_pull(r, &r->s[i], false) : send_push(r, &r->s[i])) != 0)
            return -1;
    if (pump_until(r, t0 + seconds) != 0)
        return -1;
    r->stop_step = 0;
    for (int i = 0; i < r->n; i++)
        if (r->s[i].step > r->stop_step)
            r->stop_step = r->s[i].step;
    r->stopping = true;
    if (drain(r) != 0)
        return -1;
    out->wall = bench_now() - t0;
    out->shard_cpu = bench_cpu_seconds(shard_pid) - cpu0;
    out->self_cpu = bench_cpu_seconds(0) - self0;
    out->acks = r->acks, out->replies = r->replies, out->flagged = r->flagged;
    out->bytes = r->bytes_out + r->bytes_in;
    out->push_bytes = r->push_bytes, out->pull_bytes = r->pull_bytes;
    r->total_acks += r->acks;
    r->total_replies += r->replies;
    return 0;
}

/* Opens the sessions: a DEALER each, HELLO as rank i, rank 0's INIT, then a
 * first (dense) pull each, which also sets the shard's copy of what each holds. */
static int open_sessions(run_t *r, const char *ep)
{
    int linger = 0, zero = 0;
    for (int i = 0; i < r->n; i++) {
        sess_t *s = &r->s[i];
        s->sock = zmq_socket(r->ctx, ZMQ_DEALER);
        if (!s->sock || zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
            zmq_setsockopt(s->sock, ZMQ_SNDHWM, &zero, sizeof zero) != 0 ||
            zmq_setsockopt(s->sock, ZMQ_RCVHWM, &zero, sizeof zero) != 0 ||
            zmq_connect(s->sock, ep) != 0) {
            fprintf(stderr, "bench/shardcap: socket %d to %s: %s\n", i, ep, zmq_strerror(errno));
            return -1;
        }
        r->items[i] = (zmq_pollitem_t){.socket = s->sock, .events = ZMQ_POLLIN};
        s->rank = (uint32_t)i;
        s->session = dcps_rng_next(&r->rng) | 1ull << 63;
    }
    for (int i = 0; i < r->n; i++) {
        sess_t *s = &r->s[i];
        dcps_msg_t m = {.type = DCPS_MSG_HELLO, .n_params = r->o->n, .has = DCPS_HAS_N_PARAMS};
        if (send_msg(r, s, &m) < 0)
            return -1;
    }
    /* The WELCOMEs, then INIT: read by hand (the phase machinery takes only acks
     * and pull replies). */
    int welcomed = 0;
    double t0 = bench_now();
    while (welcomed < r->n) {
        if (zmq_poll(r->items, r->n, 100) < 0)
            return -1;
        for (int i = 0; i < r->n; i++) {
            dcps_frames_t f;
            while (dcps_frames_recv(r->s[i].sock, &f, ZMQ_DONTWAIT) > 0) {
                dcps_msg_t m;
                char why[300];
                int rc = dcps_frames_decode(&f, 0, r->job_id, &m, why, sizeof why);
                if (rc == 0 && m.type == DCPS_MSG_WELCOME) {
                    r->s[i].step = m.step;
                    welcomed++;
                } else {
                    fprintf(stderr, "bench/shardcap: HELLO of rank %d: %s\n", i,
                            rc ? why : m.type == DCPS_MSG_ERROR ? m.error_text : "not WELCOME");
                    dcps_frames_close(&f);
                    return -1;
                }
                dcps_frames_close(&f);
            }
        }
        if (bench_now() - t0 > WAIT_S) {
            fprintf(stderr, "bench/shardcap: %d of %d sessions welcomed in %.0f s\n", welcomed,
                    r->n, WAIT_S);
            return -1;
        }
    }
    dcps_msg_t init = {.type = DCPS_MSG_INIT, .nframes = 1};
    init.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_DENSE, DCPS_DTYPE_F32, r->o->n};
    init.payload[0] = (dcps_buf_t){r->p->init, r->o->n * sizeof(float)};
    if (send_msg(r, &r->s[0], &init) < 0)
        return -1;
    r->s[0].state = PUSHING; /* its PUSH_ACK ends it like a push's, and nothing follows */
    r->phase = PH_PULL;
    r->stopping = true;
    if (drain(r) != 0)
        return -1;
    for (int i = 0; i < r->n; i++)
        if (send_pull(r, &r->s[i], true) != 0)
            return -1;
    r->total_replies += (uint64_t)r->n; /* the shard counts these pulls too */
    return drain(r);
}

/* ---- one level, one row ------------------------------------------------------------ */

typedef struct {
    int sessions;
    bool skipped;
    phase_t cycle, pull, push; /* push.wall 0: no push phase (sync) */
    double push_p50, push_p99, pull_p50, pull_p99;
    shard_metrics_t metrics;
    uint64_t total_acks, total_replies;
    double load1;
} row_t;

/* The memory the shard needs, roughly: parameters, the update's buffer, the rule's
 * state (up to 3 copies) and one copy per worker where it keeps one. */
static double shard_gb(const opts_t *o, const level_t *l)
{
    bool per_worker = rules[l->rule].backups ||
                      (encodings[l->enc].delta_pull && strcmp(modes[l->mode], "sync") != 0);
    double copies = 5 + (per_worker ? l->sessions : 0);
    return copies * 4.0 * (double)o->n / 1e9;
}

static double loadavg(void)
{
    double l = NAN;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = NAN;
        fclose(f);
    }
    return l;
}

/* Checks the shard's counters against shardcap's: every acknowledged push of
 * this level was counted by the shard, every reply too (the first pulls
 * included), and its version is what those pushes make. */
static int check_metrics(const run_t *r, const row_t *row, bool quiet)
{
    const shard_metrics_t *m = &row->metrics;
    bool sync = strcmp(modes[r->l->mode], "sync") == 0;
    uint64_t rounds = sync ? r->total_acks / (uint64_t)r->n : r->total_acks;
    const char *bad = NULL;
    if (m->pushes != (double)r->total_acks)
        bad = "dcps_pushes_total is not the pushes acknowledged";
    else if (m->pulls != (double)r->total_replies)
        bad = "dcps_pulls_total is not the pull replies received";
    else if (m->version != (double)rounds)
        bad = sync ? "dcps_version is not the rounds (pushes / sessions)"
                   : "dcps_version is not the pushes acknowledged";
    else if (m->errors != 0)
        bad = "the shard counted errors";
    if (!bad || quiet)
        return bad ? -1 : 0;
    fprintf(stderr, "bench/shardcap: %s: shard pushes %.0f pulls %.0f version %.0f errors %.0f; "
                    "shardcap acks %" PRIu64 " replies %" PRIu64 " (%d sessions)\n",
            bad, m->pushes, m->pulls, m->version, m->errors, r->total_acks, r->total_replies,
            r->n);
    return -1;
}

static int run_level(const opts_t *o, const level_t *l, const payload_t *p, row_t *row)
{
    char ep[DCPS_ENDPOINT_MAX], err[512];
    int rc = -1, port = free_port();
    run_t r = {.o = o, .l = l, .p = p, .n = l->sessions};
    dcps_config_t cfg;
    *row = (row_t){.sessions = l->sessions, .load1 = loadavg()};
    if (shard_gb(o, l) > o->mem_gb) {
        row->skipped = true;
        return 0;
    }
    if (port == 0 || write_job(o, l, port) != 0) {
        fprintf(stderr, "bench/shardcap: cannot write %s or find a free port\n", job_path);
        return -1;
    }
    if (dcps_config_load(&cfg, job_path, NULL, 0, err, sizeof err) != 0) {
        fprintf(stderr, "bench/shardcap: %s\n", err);
        return -1;
    }
    r.job_id = cfg.job_id;
    r.lockstep = strcmp(modes[l->mode], "async") != 0;
    if (start_shard(o, ep) != 0)
        return -1;
    dcps_rng_seed(&r.rng, (uint64_t)getpid() ^ (uint64_t)(bench_now() * 1e6));
    r.ctx = zmq_ctx_new();
    r.s = calloc((size_t)r.n, sizeof *r.s);
    r.items = calloc((size_t)r.n, sizeof *r.items);
    int max_sockets = r.n + 16;
    if (!r.ctx || !r.s || !r.items ||
        zmq_ctx_set(r.ctx, ZMQ_MAX_SOCKETS, max_sockets < 1024 ? 1024 : max_sockets) != 0) {
        fprintf(stderr, "bench/shardcap: out of memory or ZeroMQ context\n");
        goto out;
    }
    if (open_sessions(&r, ep) != 0)
        goto fail;
    if (run_phase(&r, PH_CYCLE, o->seconds, &row->cycle) != 0)
        goto fail;
    row->push_p50 = lat_q(&r.push_lat, 0.5), row->push_p99 = lat_q(&r.push_lat, 0.99);
    row->pull_p50 = lat_q(&r.pull_lat, 0.5), row->pull_p99 = lat_q(&r.pull_lat, 0.99);
    if (run_phase(&r, PH_PULL, o->seconds / 2, &row->pull) != 0)
        goto fail;
    if (strcmp(modes[l->mode], "sync") != 0 &&
        run_phase(&r, PH_PUSH, o->seconds / 2, &row->push) != 0)
        goto fail;
    /* The shard publishes its metrics every 500 ms: read until they agree, or
     * for 3 s (then the disagreement is the result). */
    row->total_acks = r.total_acks, row->total_replies = r.total_replies;
    for (int tries = 0;; tries++) {
        if (read_metrics(o->address, port, &row->metrics) != 0)
            goto fail;
        if (check_metrics(&r, row, tries < 15) == 0)
            break;
        if (tries == 15)
            goto fail;
        usleep(200000);
    }
    rc = 0;
fail:
    if (rc != 0)
        show_log();
out:
    for (int i = 0; r.s && i < r.n; i++)
        if (r.s[i].sock)
            zmq_close(r.s[i].sock);
    if (r.ctx)
        zmq_ctx_term(r.ctx);
    if (shard_pid > 0 && stop_shard() != 0 && rc == 0) {
        fprintf(stderr, "bench/shardcap: the shard did not stop cleanly\n");
        show_log();
        rc = -1;
    }
    free(r.s);
    free(r.items);
    free(r.push_lat.t);
    free(r.pull_lat.t);
    return rc;
}

/* ---- output ------------------------------------------------------------------------- */

static void print_header(const opts_t *o)
{
    char cpu[256];
    bench_cpu_model(cpu, sizeof cpu);
    printf("# machine: %s, %ld cores\n", cpu, sysconf(_SC_NPROCESSORS_ONLN));
    printf("# shardcap: one dcps-server shard on %s%s%s, %" PRIu64
           " parameters, density %g (k = %" PRIu64 "), ssp staleness %d, cycle phase %g s, "
           "pull and push phases %g s each; lr 1e-6\n",
           o->address, o->netns ? " in network namespace " : "", o->netns ? o->netns : "", o->n,
           o->density, (uint64_t)ceil(o->density * (double)o->n), o->staleness, o->seconds,
           o->seconds / 2);
    printf("mode,rule,encoding,params,density,sessions,pushes_per_s,pulls_per_s,bytes_per_s,"
           "push_bytes,pull_bytes,push_p50_ms,push_p99_ms,pull_p50_ms,pull_p99_ms,"
           "cpu_us_per_cycle,cpu_us_per_push,cpu_us_per_pull,shard_cpu_frac,driver_cpu_frac,"
           "flagged_acks,total_pushes,total_pulls,shard_pushes,shard_pulls,shard_version,"
           "saturated,load1,values\n");
}

static void print_row(const opts_t *o, const level_t *l, const row_t *w, bool saturated)
{
    const phase_t *c = &w->cycle, *pl = &w->pull, *ps = &w->push;
    double per_cycle = c->acks ? 1e6 * c->shard_cpu / (double)c->acks : NAN;
    double per_pull = pl->replies ? 1e6 * pl->shard_cpu / (double)pl->replies : NAN;
    double per_push = ps->wall > 0 && ps->acks ? 1e6 * ps->shard_cpu / (double)ps->acks
                      : c->acks ? (1e6 * c->shard_cpu - per_pull * (double)c->replies) /
                                      (double)c->acks
                                : NAN;
    printf("%s,%s,%s,%" PRIu64 ",%g,%d,%.1f,%.1f,%.0f,%.0f,%.0f,%.3f,%.3f,%.3f,%.3f,%.1f,%.1f,"
           "%.1f,%.3f,%.3f,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%.0f,%.0f,%.0f,%d,%.2f,%s\n",
           modes[l->mode], rules[l->rule].name, encodings[l->enc].name, o->n,
           encodings[l->enc].sparse_push || encodings[l->enc].delta_pull ? o->density : 1.0,
           w->sessions, (double)c->acks / c->wall, (double)c->replies / c->wall,
           (double)c->bytes / c->wall, c->acks ? (double)c->push_bytes / (double)c->acks : NAN,
           c->replies ? (double)c->pull_bytes / (double)c->replies : NAN, w->push_p50,
           w->push_p99, w->pull_p50, w->pull_p99, per_cycle, per_push, per_pull,
           c->shard_cpu / c->wall, c->self_cpu / c->wall, c->flagged + pl->flagged + ps->flagged,
           w->total_acks, w->total_replies, w->metrics.pushes, w->metrics.pulls,
           w->metrics.version, saturated ? 1 : 0, w->load1,
           encodings[l->enc].twobit ? "twobit" : formats[l->fmt].name);
    fflush(stdout);
}

/* One configuration: levels until throughput stops growing (or all of them). */
static int sweep(const opts_t *o, int mode, int rule, int enc, int fmt, const payload_t *p)
{
    row_t rows[MAX_LEVELS];
    level_t lv[MAX_LEVELS];
    int n = 0, flat = 0;
    double best = 0;
    for (int i = 0; i < o->n_levels; i++) {
        lv[n] = (level_t){mode, rule, enc, fmt, o->levels[i]};
        if (run_level(o, &lv[n], p, &rows[n]) != 0) {
            fprintf(stderr, "bench/shardcap: failed at %s %s %s %s with %d sessions\n",
                    modes[mode], rules[rule].name, encodings[enc].name, formats[fmt].name,
                    o->levels[i]);
            return -1;
        }
        if (rows[n].skipped) {
            printf("# skipped: %s %s %s %s with %d sessions: the shard would need about %.1f GB "
                   "(--mem-gb %g)\n",
                   modes[mode], rules[rule].name, encodings[enc].name, formats[fmt].name,
                   o->levels[i], shard_gb(o, &lv[n]), o->mem_gb);
            break;
        }
        double tput = (double)rows[n].cycle.acks / rows[n].cycle.wall;
        flat = tput < GROWTH * best ? flat + 1 : 0;
        if (tput > best)
            best = tput;
        n++;
        if (flat >= 2 && !o->full_sweep)
            break;
    }
    bool marked = false;
    for (int i = 0; i < n; i++) {
        bool sat = !marked && (double)rows[i].cycle.acks / rows[i].cycle.wall >= best / GROWTH;
        marked |= sat;
        print_row(o, &lv[i], &rows[i], sat);
    }
    return 0;
}

/* The payloads: INIT's values and a dense gradient, small normal values; sparse
 * pushes of k entries, one index drawn in each of k equal slices of [0, n), so
 * they ascend and spread over the range, VARIANTS different sets. */
static int make_payloads(const opts_t *o, payload_t *p)
{
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 31);
    p->k = (size_t)ceil(o->density * (double)o->n);
    p->init = malloc(o->n * sizeof(float));
    p->dense = malloc(o->n * sizeof(float));
    p->val = malloc(p->k * sizeof(float));
    if (!p->init || !p->dense || !p->val)
        return -1;
    for (uint64_t i = 0; i < o->n; i++) {
        p->init[i] = 0.01f * dcps_rng_normal(&rng);
        p->dense[i] = 0.001f * dcps_rng_normal(&rng);
    }
    for (size_t j = 0; j < p->k; j++)
        p->val[j] = 0.001f * dcps_rng_normal(&rng);
    for (int v = 0; v < VARIANTS; v++) {
        if (!(p->idx[v] = malloc(p->k * sizeof(uint32_t))))
            return -1;
        for (size_t j = 0; j < p->k; j++) {
            uint64_t lo = j * o->n / p->k, hi = (j + 1) * o->n / p->k;
            p->idx[v][j] = (uint32_t)(lo + dcps_rng_below(&rng, hi - lo));
        }
    }
    for (int i = 0; i < o->n_fmt; i++) {
        int f = o->fmt[i];
        uint32_t t = formats[f].dtype;
        if (t == DCPS_DTYPE_F32 || p->dense_as[f])
            continue;
        p->dense_as[f] = malloc((size_t)dcps_quant_bytes(t, o->n, block_of(t, o->n)));
        p->val_as[f] = malloc((size_t)dcps_quant_bytes(t, p->k, block_of(t, p->k)));
        if (!p->dense_as[f] || !p->val_as[f])
            return -1;
        dcps_quant_encode(t, block_of(t, o->n), 0, p->dense, o->n, p->dense_as[f], NULL);
        dcps_quant_encode(t, block_of(t, p->k), 0, p->val, p->k, p->val_as[f], NULL);
    }
    for (int i = 0; i < o->n_enc; i++) {
        if (!encodings[o->enc[i]].twobit || p->twobit)
            continue;
        uint64_t bytes = dcps_quant_bytes(DCPS_DTYPE_TWOBIT, o->n, 0);
        if (!(p->twobit = malloc((size_t)bytes)))
            return -1;
        dcps_quant_encode(DCPS_DTYPE_TWOBIT, 0, TWOBIT_TAU, p->dense, o->n, p->twobit, NULL);
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o;
    payload_t p = {0};
    if (parse_opts(argc, argv, &o) != 0)
        return 2;
    if (make_payloads(&o, &p) != 0) {
        fprintf(stderr, "bench/shardcap: out of memory for %" PRIu64 " parameters\n", o.n);
        return 1;
    }
    if (make_scratch() != 0)
        return 1;
    atexit(cleanup);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    signal(SIGPIPE, SIG_IGN);
    print_header(&o);
    int rc = 0;
    for (int m = 0; m < o.n_mode && rc == 0; m++)
        for (int r = 0; r < o.n_rule && rc == 0; r++)
            for (int e = 0; e < o.n_enc && rc == 0; e++)
                for (int f = 0; f < o.n_fmt && rc == 0; f++) {
                    /* twobit's replies are float32: it runs once, with fp32 */
                    bool twobit = encodings[o.enc[e]].twobit;
                    if (twobit && f > 0)
                        continue;
                    rc = sweep(&o, o.mode[m], o.rule[r], o.enc[e], twobit ? 0 : o.fmt[f], &p);
                }
    for (int v = 0; v < VARIANTS; v++)
        free(p.idx[v]);
    for (size_t f = 0; f < N_FORMATS; f++)
        free(p.dense_as[f]), free(p.val_as[f]);
    free(p.twobit);
    free(p.init), free(p.dense), free(p.val);
    return rc == 0 ? 0 : 1;
}
