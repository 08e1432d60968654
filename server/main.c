/* dcps-server — the daemon for one shard.
 *
 * dcps-server --config FILE --shard S [--set section.key=value]... [--endpoint-file F]
 * dcps-server --keygen PATH
 *
 * Reads the job file, binds shard S's endpoint with a ROUTER socket, and serves
 * it on a libuv loop until SIGTERM or SIGINT, after which it logs a summary and
 * exits 0. Under systemd it sends READY=1 once bound. A bad job file or option
 * stops it before it binds anything, with exit status 2; a [server] metrics_port
 * that cannot be bound (in use, say) with exit status 1, before the ZeroMQ bind.
 *
 * With [security] curve = true the socket is a CURVE server with the secret key
 * of server_secret_key_file, and admits only the workers whose public keys are
 * in worker_keys_dir, each for the ranks its file's name gives (server/auth.h).
 * A key file or directory it cannot use
 * stops it before it binds anything, with status 1. --keygen writes a new key
 * pair (common/keys.h) and prints its public key.
 *
 * With [server] checkpoint_dir (server/checkpoint.h): a directory it cannot
 * create or write stops it before it binds, with status 1; once bound, before
 * READY=1, it restores the newest usable checkpoint of its shard, and stops
 * with status 1 if the directory holds checkpoints of the shard but none is
 * usable (starting fresh would prune them later). It writes a checkpoint every
 * checkpoint_every seconds if the version moved, and a last one on SIGTERM or
 * SIGINT before it stops; if that last one fails it exits 1.
 *
 * With [model] params = auto the shard starts unsized and learns the model's
 * size from rank 0's HELLO (server/router.c), or from the checkpoint it
 * restores; until then its log, STATUS= line and /metrics say that it waits
 * for rank 0.
 *
 * SIGHUP reads the job file again (reload below). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/error.h"
#include "common/keys.h"
#include "common/log.h"
#include "config.h"
#include "server/auth.h"
#include "server/checkpoint.h"
#include "server/metrics.h"
#include "server/notify.h"
#include "server/router.h"
#include "server/shard.h"

#define MAX_OVERRIDES 128

typedef struct {
    const char *config;
    int shard;
    const char *endpoint_file;
    const char *keygen; /* --keygen PATH: make a key pair instead of serving */
    const char *overrides[MAX_OVERRIDES];
    size_t n_overrides;
} options_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: dcps-server --config FILE --shard S [options]\n"
            "       dcps-server --keygen PATH\n"
            "  -c, --config FILE        the job file (INI, see dcps.conf(5)); the shards and\n"
            "                           workers of one job read the same file\n"
            "  -s, --shard S            the shard index: the position, from 0, of this shard's\n"
            "                           endpoint in [servers] shards (under systemd, the\n"
            "                           instance: dcps-server@0 serves shard 0)\n"
            "      --set SECTION.KEY=V  override a key of the job file, checked as the file is;\n"
            "                           repeatable, a later --set of the same key wins\n"
            "      --endpoint-file F    once serving, write the endpoint actually bound to F\n"
            "                           (useful with port '*'), through a temporary file and a\n"
            "                           rename\n"
            "      --dump-config        print every key of the job file with its default, range\n"
            "                           and description, as a valid job file, and exit\n"
            "      --keygen PATH        write a new CURVE key pair and exit: the secret key to\n"
            "                           PATH (mode 0600), the public key to PATH.pub (0644) and\n"
            "                           standard output; an existing file is never replaced\n"
            "                           (exit 1, nothing written)\n"
            "  -V, --version            print the version and exit\n"
            "  -h, --help               print this summary of the options and exit\n");
}

/* Returns 0, or 2 after printing why; -1 for a normal early exit (help). */
static int parse_args(int argc, char **argv, options_t *o)
{
    enum { OPT_SET = 256, OPT_ENDPOINT_FILE, OPT_DUMP, OPT_KEYGEN };
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},
        {"shard", required_argument, NULL, 's'},
        {"set", required_argument, NULL, OPT_SET},
        {"endpoint-file", required_argument, NULL, OPT_ENDPOINT_FILE},
        {"dump-config", no_argument, NULL, OPT_DUMP},
        {"keygen", required_argument, NULL, OPT_KEYGEN},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    char *end;

    memset(o, 0, sizeof *o);
    o->shard = -1;
    while ((c = getopt_long(argc, argv, "c:s:Vh", longopts, NULL)) != -1) {
        switch (c) {
        case 'c':
            o->config = optarg;
            break;
        case 's':
            errno = 0;
            long v = strtol(optarg, &end, 10);
            if (errno || *end || end == optarg || v < 0 || v >= DCPS_MAX_SHARDS) {
                fprintf(stderr, "dcps-server: --shard: \"%s\" is not a shard index (0 to %d)\n",
                        optarg, DCPS_MAX_SHARDS - 1);
                return 2;
            }
            o->shard = (int)v;
            break;
        case OPT_SET:
            if (o->n_overrides == MAX_OVERRIDES) {
                fprintf(stderr, "dcps-server: more than %d --set options\n", MAX_OVERRIDES);
                return 2;
            }
            o->overrides[o->n_overrides++] = optarg;
            break;
        case OPT_ENDPOINT_FILE:
            o->endpoint_file = optarg;
            break;
        case OPT_DUMP:
            dcps_config_dump(stdout);
            return -1;
        case OPT_KEYGEN:
            o->keygen = optarg;
            break;
        case 'V':
            printf("dcps-server %s\n", PACKAGE_VERSION);
            return -1;
        case 'h':
            usage(stdout);
            return -1;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "dcps-server: unexpected argument \"%s\"\n", argv[optind]);
        return 2;
    }
    if (o->keygen && (o->config || o->shard >= 0 || o->n_overrides || o->endpoint_file)) {
        fprintf(stderr, "dcps-server: --keygen takes no other option\n");
        return 2;
    }
    if (!o->keygen && (!o->config || o->shard < 0)) {
        fprintf(stderr, "dcps-server: --config and --shard are required\n");
        usage(stderr);
        return 2;
    }
    return 0;
}

/* Writes the endpoint to path through a temporary file and a rename, so a reader
 * never sees half of it. */
static int write_endpoint(const char *path, const char *endpoint)
{
    char tmp[DCPS_PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    int ok = fprintf(f, "%s\n", endpoint) > 0;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

typedef struct {
    uv_loop_t loop;
    uv_signal_t sigterm, sigint, sighup;
    uv_timer_t alive;      /* systemd: WATCHDOG=1 and STATUS= (started only under it) */
    uv_timer_t checkpoint; /* every [server] checkpoint_every seconds */
    dcps_router_t router;
    const options_t *opt;  /* for a reload: the same file and overrides */
    dcps_config_t *cfg;    /* the running configuration, shared with router and shard */
    int stopping;
    dcps_metrics_t *metrics; /* NULL: [server] metrics_port = 0 */
    uv_timer_t metrics_tick;
    uv_timer_t trim;        /* every TRIM_MS: malloc_trim */
    bool saved;             /* a checkpoint holds saved_version (written or restored) */
    uint64_t saved_version;
    int final_rc;           /* of the checkpoint written on SIGTERM */
    dcps_auth_t auth;       /* [security] curve: the ZAP handler; else never opened */
} server_t;

static void log_memory(const dcps_shard_t *s, const char *when)
{
    dcps_shard_memory_t k;
    if (!s->n_params) {
        DCPS_INFO("memory at %s: %zu bytes (sequence numbers): waiting for rank 0 to size the "
                  "model ([model] params = auto)",
                  when, dcps_shard_memory(s));
        return;
    }
    dcps_shard_memory_kinds(s, &k);
    DCPS_INFO("memory at %s: %zu bytes (parameters %zu, optimizer state %zu, worker backups %zu, "
              "sync sum %zu, delta pulls %zu, update buffer %zu, reply buffers %zu, sequence numbers "
              "%zu)",
              when, dcps_shard_memory(s), k.parameters, k.optimizer_state, k.worker_backups,
              k.sync_sum, k.delta_pull, k.update_buffer, k.reply_buffers, k.sequence_numbers);
}

/* --- [server] metrics_port: /metrics (server/metrics.h) ---------------------------- */

/* How old a scrape may be: the loop renders and publishes the text this often
 * (a few kB: far below the cost of the messages it counts). */
#define METRICS_PUBLISH_MS 500

/* Binds the metrics port, if one is set, into *m (else NULL), before anything
 * else is bound. Returns 0, or -1 after logging why, naming the port. */
static int metrics_open(const dcps_config_t *cfg, dcps_metrics_t **m)
{
    char err[256];
    *m = NULL;
    if (cfg->metrics_port &&
        !(*m = dcps_metrics_new(cfg->metrics_address, cfg->metrics_port, err, sizeof err))) {
        DCPS_ERR("%s ([server] metrics_address, metrics_port); not starting", err);
        return -1;
    }
    return 0;
}

static void metrics_publish(server_t *s)
{
    int rc = dcps_metrics_update(s->metrics, &s->router);
    if (rc != 0)
        DCPS_WARN("metrics not updated: %s", dcps_strerror(rc));
}

static void on_metrics_tick(uv_timer_t *t)
{
    metrics_publish(t->data);
}

/* Publishes now and every METRICS_PUBLISH_MS (the router is serving). */
static void metrics_start(server_t *s, int port)
{
    if (!s->metrics)
        return;
    metrics_publish(s);
    uv_timer_init(&s->loop, &s->metrics_tick);
    s->metrics_tick.data = s;
    uv_timer_start(&s->metrics_tick, on_metrics_tick, METRICS_PUBLISH_MS, METRICS_PUBLISH_MS);
    DCPS_INFO("metrics at http://%s:%d/metrics", s->cfg->metrics_address, port);
}

static void metrics_stop(server_t *s)
{
    if (s->metrics)
        uv_close((uv_handle_t *)&s->metrics_tick, NULL);
}

/* The messages (a dense push or pull reply is 4 bytes a parameter of the range)
 * are allocated by ZeroMQ's I/O thread and freed by this one. glibc keeps freed
 * blocks in their arena for later, so a busy shard's RSS follows the most that
 * was ever in flight at once, and creeps up as the arenas fragment
 * (bench/soak.sh: dcps_heap_bytes kind="free"). Every TRIM_MS the free pages go
 * back to the kernel: a few page faults later, against a flat RSS. */
#define TRIM_MS 5000

static void on_trim(uv_timer_t *t)
{
    (void)t;
    malloc_trim(0);
}

/* One line: mean, max and the histogram's non-empty buckets ("0:12 1:40 2-3:7"). */
static void log_staleness(const dcps_shard_t *s, const dcps_router_t *r)
{
    const dcps_staleness_t *st = &s->staleness;
    char hist[512] = "";
    size_t at = 0;
    for (int b = 0; b < DCPS_STALENESS_BUCKETS && at < sizeof hist - 40; b++) {
        if (!st->hist[b])
            continue;
        uint64_t lo = b ? 1ull << (b - 1) : 0, hi = b ? (1ull << b) - 1 : 0;
        if (b == DCPS_STALENESS_BUCKETS - 1)
            at += (size_t)snprintf(hist + at, sizeof hist - at, " %" PRIu64 "+:%" PRIu64, lo,
                                   st->hist[b]);
        else if (lo == hi)
            at += (size_t)snprintf(hist + at, sizeof hist - at, " %" PRIu64 ":%" PRIu64, lo,
                                   st->hist[b]);
        else
            at += (size_t)snprintf(hist + at, sizeof hist - at, " %" PRIu64 "-%" PRIu64
                                   ":%" PRIu64, lo, hi, st->hist[b]);
    }
    DCPS_NOTICE("staleness: mean %.3f max %" PRIu64 " over %" PRIu64 " pushes; histogram%s",
                st->count ? (double)st->sum / (double)st->count : 0.0, st->max, st->count,
                *hist ? hist : " empty");
    if (r->cfg->mode == DCPS_MODE_SSP)
        DCPS_NOTICE("ssp: most steps ahead of the slowest worker %" PRIu64 " (bound %d)",
                    r->cons.max_ahead, r->cfg->staleness);
}

static void on_closed(uv_handle_t *h)
{
    (void)h;
}

/* Closes every handle, so that uv_run returns. */
static void stop_serving(server_t *s)
{
    s->stopping = 1;
    uv_close((uv_handle_t *)&s->sigterm, on_closed);
    uv_close((uv_handle_t *)&s->sigint, on_closed);
    uv_close((uv_handle_t *)&s->sighup, on_closed);
    uv_close((uv_handle_t *)&s->alive, on_closed);
    uv_close((uv_handle_t *)&s->checkpoint, on_closed);
    uv_close((uv_handle_t *)&s->trim, on_closed);
    metrics_stop(s);
    if (s->auth.started)
        dcps_auth_close(&s->auth, on_closed);
    dcps_router_close(&s->router, on_closed);
}

/* From the loop itself, so a loop that stopped turning stops the watchdog too. */
static void on_alive(uv_timer_t *h)
{
    server_t *s = h->data;
    const dcps_shard_t *sh = s->router.shard;
    if (!sh->n_params) {
        dcps_notify("%sSTATUS=waiting for rank 0 to size the model; %d of %d workers live",
                    dcps_notify_watchdog_usec() ? "WATCHDOG=1\n" : "",
                    dcps_consistency_joined(&s->router.cons), s->cfg->workers);
        return;
    }
    dcps_notify("%sSTATUS=version %" PRIu64 ", %" PRIu64 " pushes, %" PRIu64
                " pulls, %d of %d workers live",
                dcps_notify_watchdog_usec() ? "WATCHDOG=1\n" : "", sh->version, sh->pushes,
                sh->pulls, dcps_consistency_joined(&s->router.cons), s->cfg->workers);
}

/* Under systemd: WATCHDOG=1 at half the interval it asks for, and a STATUS=
 * line with it (every 10 s without a watchdog). */
static void start_alive(server_t *s)
{
    uv_timer_init(&s->loop, &s->alive);
    s->alive.data = s;
    if (!dcps_notify_listening())
        return;
    uint64_t wd = dcps_notify_watchdog_usec();
    uint64_t every = wd ? wd / 2000 : 10000;
    uv_timer_start(&s->alive, on_alive, every ? every : 1, every ? every : 1);
    if (wd)
        DCPS_INFO("systemd watchdog: %.1f s; WATCHDOG=1 every %" PRIu64 " ms", wd / 1e6, every);
}

static void schedule_checkpoints(server_t *srv);
static void log_checkpoint_room(const server_t *srv);

/* SIGHUP: reads the job file again. Reloadable keys take effect and are
 * logged; if any other key changed, or the file does not load, nothing
 * changes (dcps_config_reload). With curve, the workers' keys are read again
 * too, from the directory the new file names: a directory that cannot be used
 * refuses the whole reload. */
static void reload(server_t *s)
{
    char err[2 * DCPS_PATH_MAX], changes[1024];
    dcps_keyset_t *keys = NULL;
    int rc;
    dcps_config_t *next = malloc(sizeof *next);
    if (!next) {
        DCPS_ERR("reload: out of memory; the running configuration stays");
        return;
    }
    if (dcps_config_load(next, s->opt->config, s->opt->overrides, s->opt->n_overrides, err,
                         sizeof err) != 0 ||
        dcps_config_supported(next, s->opt->config, err, sizeof err) != 0 ||
        dcps_config_check_role(next, s->opt->config, DCPS_ROLE_SERVER, err, sizeof err) != 0) {
        DCPS_ERR("reload refused: %s; the running configuration stays", err);
    } else if (s->cfg->curve && next->curve &&
               !(keys = dcps_keyset_load(next->worker_keys_dir, next->workers, &rc, err,
                                         sizeof err))) {
        DCPS_ERR("reload refused: %s ([security] worker_keys_dir); the running configuration "
                 "and worker keys stay", err);
    } else if (dcps_config_reload(s->cfg, next, changes, sizeof changes, err, sizeof err) != 0) {
        DCPS_ERR("reload refused: %s cannot change while running; the running configuration "
                 "stays (restart the shard to change it)", err);
    } else {
        if (keys)
            dcps_auth_set_keys(&s->auth, &keys, s->cfg->worker_keys_dir);
        if (!*changes) {
            DCPS_NOTICE("reload: %s unchanged", s->opt->config);
        } else {
            dcps_log_set_level(dcps_log_level_parse(s->cfg->log_level));
            dcps_shard_set_lr(s->router.shard, s->cfg->lr);
            schedule_checkpoints(s);
            log_checkpoint_room(s);
            DCPS_NOTICE("reload: %s", changes);
        }
    }
    dcps_keyset_destroy(&keys);
    free(next);
}

/* Bytes free for an unprivileged user in dir's file system, or -1. */
static double free_bytes(const char *dir)
{
    struct statvfs v;
    return statvfs(dir, &v) == 0 ? (double)v.f_bavail * (double)v.f_frsize : -1;
}

/* "1.5 MB" into buf. */
static const char *megabytes(double bytes, char *buf, size_t len)
{
    snprintf(buf, len, "%.1f MB", bytes / 1e6);
    return buf;
}

/* What the newest good checkpoint is, for a failure's log line. */
static void describe_newest(const server_t *srv, char *buf, size_t len)
{
    const dcps_router_t *r = &srv->router;
    if (!srv->saved)
        snprintf(buf, len, "there is no good checkpoint yet");
    else
        snprintf(buf, len, "the newest good one is version %" PRIu64 ", %.0f s old",
                 srv->saved_version, difftime(time(NULL), (time_t)r->checkpoint_time));
}

/* Says at start (and after a reload) how much room the checkpoints need, and
 * warns when checkpoint_dir does not have it. */
static void log_checkpoint_room(const server_t *srv)
{
    const dcps_config_t *cfg = srv->router.cfg;
    const dcps_shard_t *s = srv->router.shard;
    char a[32], b[32], c[32];
    if (!*cfg->checkpoint_dir || !s->n_params)
        return;
    int files = cfg->checkpoint_keep > 1 ? cfg->checkpoint_keep : 2;
    double one = (double)dcps_checkpoint_bytes(s), need = one * files;
    double have = free_bytes(cfg->checkpoint_dir);
    dcps_log(have >= 0 && have < need ? DCPS_LOG_WARNING : DCPS_LOG_INFO,
             "checkpoints: %s each; keep = %d needs %s in %s, which has %s free", megabytes(one, a, sizeof a),
             cfg->checkpoint_keep, megabytes(need, b, sizeof b), cfg->checkpoint_dir,
             have >= 0 ? megabytes(have, c, sizeof c) : "an unknown amount");
}

/* Writes a checkpoint of the shard now and logs it at `level` with the time it
 * took ("periodic", "final"), or the failure as an error. Returns 0 or the
 * code of dcps_checkpoint_save. Blocks the loop while it writes. */
static int checkpoint_now(server_t *srv, int level, const char *what)
{
    const dcps_config_t *cfg = srv->router.cfg;
    const dcps_shard_t *s = srv->router.shard;
    char path[DCPS_PATH_MAX + 128], err[2 * DCPS_PATH_MAX + 256];
    uint64_t t0 = dcps_now_ns();
    int rc = dcps_checkpoint_save(cfg->checkpoint_dir, cfg, s, &srv->router.cons,
                                  cfg->checkpoint_keep, path, sizeof path, err, sizeof err);
    if (rc != 0) {
        char room[32], need[32], newest[96];
        double have = free_bytes(cfg->checkpoint_dir);
        describe_newest(srv, newest, sizeof newest);
        srv->router.checkpoint_failures++;
        DCPS_ERR("%s checkpoint of version %" PRIu64 " failed: %s (%s free in %s, a checkpoint "
                 "takes %s); %s",
                 what, s->version, err, have >= 0 ? megabytes(have, room, sizeof room) : "?",
                 cfg->checkpoint_dir,
                 megabytes((double)dcps_checkpoint_bytes(s), need, sizeof need), newest);
        return rc;
    }
    srv->saved = true;
    srv->saved_version = s->version;
    srv->router.checkpoint_time = (int64_t)time(NULL);
    dcps_log(level, "%s checkpoint %s (version %" PRIu64 ") written in %.1f ms", what, path,
             s->version, (double)(dcps_now_ns() - t0) / 1e6);
    return 0;
}

/* The periodic checkpoint: only of initialised parameters whose version moved
 * since the last one (a sync round still open is not a reason on its own). */
static void on_checkpoint_timer(uv_timer_t *t)
{
    server_t *srv = t->data;
    const dcps_shard_t *s = srv->router.shard;
    if (!s->initialized || (srv->saved && s->version == srv->saved_version))
        return;
    checkpoint_now(srv, DCPS_LOG_INFO, "periodic");
}

/* (Re)starts the periodic checkpoints from the job's [server] checkpoint_dir
 * and checkpoint_every, or stops them when either is unset (0 or empty): call
 * again after the job changes. */
static void schedule_checkpoints(server_t *srv)
{
    const dcps_config_t *cfg = srv->router.cfg;
    uv_timer_stop(&srv->checkpoint);
    if (*cfg->checkpoint_dir && cfg->checkpoint_every > 0) {
        uint64_t ms = (uint64_t)cfg->checkpoint_every * 1000;
        uv_timer_start(&srv->checkpoint, on_checkpoint_timer, ms, ms);
    }
}

/* Restores the newest usable checkpoint in [server] checkpoint_dir into the
 * shard and the router's consistency model; a restored job that had started
 * starts again as at INIT (workers not heard yet are expected from now).
 * Returns 0 (restored, or nothing to restore) or -1 (logged: do not serve). */
static int restore(server_t *srv)
{
    const dcps_config_t *cfg = srv->router.cfg;
    dcps_shard_t *s = srv->router.shard;
    char path[DCPS_PATH_MAX + 256], err[2 * DCPS_PATH_MAX + 512];
    uint64_t t0 = dcps_now_ns();
    int rc = dcps_checkpoint_restore(cfg->checkpoint_dir, cfg, s, &srv->router.cons, path,
                                     sizeof path, err, sizeof err);
    if (rc == DCPS_E_DATA) {
        DCPS_ERR("%s; not starting: move them out of %s to start fresh", err, cfg->checkpoint_dir);
        return -1;
    }
    if (rc < 0) {
        DCPS_ERR("cannot restore a checkpoint: %s", err);
        return -1;
    }
    if (rc == 0) {
        DCPS_NOTICE("no checkpoint in %s: starting fresh", cfg->checkpoint_dir);
        return 0;
    }
    /* How old it is says how much the job may have lost: every update applied
     * after it was written. The workers tell exactly how many once they come
     * back (server/router.c). */
    struct stat st;
    time_t written = stat(path, &st) == 0 ? st.st_mtime : time(NULL);
    DCPS_NOTICE("restored %s (version %" PRIu64 ", %s) in %.1f ms; it was written %.0f s ago: "
                "updates applied after it by the previous process are lost",
                path, s->version, s->initialized ? "initialised" : "not initialised yet",
                (double)(dcps_now_ns() - t0) / 1e6, difftime(time(NULL), written));
    srv->saved = true;
    srv->saved_version = s->version;
    srv->router.checkpoint_time = (int64_t)written;
    srv->router.restored_version = s->version;
    uv_update_time(&srv->loop); /* the restore may have taken a while */
    if (s->initialized)
        dcps_consistency_start(&srv->router.cons, (double)uv_now(&srv->loop));
    return 0;
}

/* SIGTERM and SIGINT: stop serving, write the last checkpoint (while the
 * consistency model still exists: closing the router frees it), close. */
static void on_signal(uv_signal_t *h, int signum)
{
    server_t *s = h->data;
    if (s->stopping)
        return;
    if (signum == SIGHUP) {
        dcps_notify("RELOADING=1");
        reload(s);
        dcps_notify("READY=1");
        return;
    }
    DCPS_NOTICE("%s received, stopping", strsignal(signum));
    dcps_notify("STOPPING=1");
    if (*s->router.cfg->checkpoint_dir) {
        if (s->router.shard->initialized)
            s->final_rc = checkpoint_now(s, DCPS_LOG_NOTICE, "final");
        else
            DCPS_NOTICE("no final checkpoint: the parameters were never initialised");
    }
    stop_serving(s);
}

/* --keygen PATH: a new key pair in PATH and PATH.pub; the public key on stdout.
 * Returns the exit status. */
static int keygen(const char *path)
{
    char pub[DCPS_KEY_Z85 + 1], err[2 * DCPS_PATH_MAX];
    if (dcps_key_generate(path, pub, err, sizeof err) != 0) {
        fprintf(stderr, "dcps-server: --keygen: %s\n", err);
        return 1;
    }
    printf("%s\n", pub);
    fprintf(stderr, "dcps-server: secret key in %s (mode 0600), public key in %s.pub\n", path,
            path);
    return 0;
}

/* [security] curve: reads the shard's secret key into secret and the workers'
 * public keys into *keys, before anything is bound. A server_public_key in the
 * job must be this secret key's: the workers use it. Returns 0, or -1 after
 * logging why, naming the file. */
static int keys_load(const dcps_config_t *cfg, uint8_t *secret, dcps_keyset_t **keys)
{
    char err[2 * DCPS_PATH_MAX], text[DCPS_KEY_Z85 + 1];
    uint8_t pub[DCPS_KEY_BYTES], want[DCPS_KEY_BYTES];
    int rc;
    if (dcps_key_read(cfg->server_secret_key_file, true, secret, err, sizeof err) != 0) {
        DCPS_ERR("%s ([security] server_secret_key_file); not starting", err);
        return -1;
    }
    if (dcps_key_public(secret, pub) != 0) {
        DCPS_ERR("cannot derive the public key: this libzmq has no CURVE; not starting");
        return -1;
    }
    dcps_key_text(pub, text);
    if (*cfg->server_public_key &&
        (dcps_key_parse(cfg->server_public_key, strlen(cfg->server_public_key), want, err,
                        sizeof err) != 0 ||
         memcmp(want, pub, sizeof pub) != 0)) {
        DCPS_ERR("[security] server_public_key %.8s\u2026 is not the public key of "
                 "server_secret_key_file %s, which is %s: the workers could not connect; not "
                 "starting",
                 cfg->server_public_key, cfg->server_secret_key_file, text);
        return -1;
    }
    if (!(*keys = dcps_keyset_load(cfg->worker_keys_dir, cfg->workers, &rc, err, sizeof err))) {
        DCPS_ERR("%s ([security] worker_keys_dir); not starting", err);
        return -1;
    }
    DCPS_NOTICE("CURVE: this shard's public key is %s; %zu worker keys in %s", text,
                dcps_keyset_count(*keys), cfg->worker_keys_dir);
    return 0;
}

/* Makes sock a CURVE server with the secret key whose clients the ZAP handler
 * of domain DCPS_ZAP_DOMAIN checks. Returns 0, or -1 with errno. */
static int curve_server(void *sock, const uint8_t *secret)
{
    int one = 1;
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, secret, DCPS_KEY_BYTES) != 0 ||
        zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, DCPS_ZAP_DOMAIN, strlen(DCPS_ZAP_DOMAIN)) != 0)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    options_t opt;
    dcps_config_t *cfg = NULL;
    dcps_shard_t *shard = NULL;
    dcps_metrics_t *metrics = NULL;
    dcps_keyset_t *keys = NULL;
    uint8_t secret[DCPS_KEY_BYTES];
    void *ctx = NULL, *sock = NULL;
    server_t srv;
    char err[2 * DCPS_PATH_MAX], ident[32], endpoint[DCPS_ENDPOINT_MAX];
    int rc, status = 1;

    memset(&srv, 0, sizeof srv);
    dcps_log_init("dcps-server");
    rc = parse_args(argc, argv, &opt);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    if (opt.keygen)
        return keygen(opt.keygen);
    cfg = malloc(sizeof *cfg);
    if (!cfg) {
        fprintf(stderr, "dcps-server: out of memory\n");
        return 1;
    }
    if (dcps_config_load(cfg, opt.config, opt.overrides, opt.n_overrides, err, sizeof err) != 0 ||
        dcps_config_supported(cfg, opt.config, err, sizeof err) != 0 ||
        dcps_config_check_role(cfg, opt.config, DCPS_ROLE_SERVER, err, sizeof err) != 0) {
        fprintf(stderr, "dcps-server: %s\n", err);
        free(cfg);
        return 2;
    }
    if (opt.shard >= cfg->n_shards) {
        fprintf(stderr, "dcps-server: --shard %d: %s lists %d shard endpoints ([servers] shards)\n",
                opt.shard, opt.config, cfg->n_shards);
        free(cfg);
        return 2;
    }
    snprintf(ident, sizeof ident, "dcps-server[%d]", opt.shard);
    dcps_log_init(ident);
    dcps_log_set_level(dcps_log_level_parse(cfg->log_level));

    if (cfg->curve && keys_load(cfg, secret, &keys) != 0)
        goto fail_metrics;
    if (metrics_open(cfg, &metrics) != 0)
        goto fail_metrics;
    shard = dcps_shard_new(cfg, opt.shard, &rc);
    if (!shard) {
        DCPS_ERR("cannot allocate shard %d: %s", opt.shard, dcps_strerror(rc));
        goto fail_shard;
    }
    if (*cfg->checkpoint_dir &&
        dcps_checkpoint_prepare(cfg->checkpoint_dir, err, sizeof err) != 0) {
        DCPS_ERR("%s ([server] checkpoint_dir); not starting", err);
        goto fail_socket;
    }
    ctx = zmq_ctx_new();
    sock = ctx ? zmq_socket(ctx, ZMQ_ROUTER) : NULL;
    if (!sock) {
        DCPS_ERR("cannot create a ZeroMQ socket: %s", zmq_strerror(errno));
        goto fail_socket;
    }
    /* The ZAP handler is bound first: until it is, libzmq admits every client. */
    if (cfg->curve) {
        if (dcps_auth_open(&srv.auth, ctx, &keys, cfg->worker_keys_dir,
                           &srv.router.auth_refused, err, sizeof err) != 0) {
            DCPS_ERR("%s", err);
            goto fail_socket;
        }
        rc = curve_server(sock, secret);
        explicit_bzero(secret, sizeof secret); /* libzmq keeps its own copy */
        if (rc != 0) {
            DCPS_ERR("cannot make %s a CURVE server: %s", cfg->shards[opt.shard],
                     zmq_strerror(errno));
            goto fail_socket;
        }
    }
    int linger = 0;
    /* A message larger than the biggest valid one (a dense range, or indices and
     * values of the whole range) is refused by ZeroMQ, which drops the sender.
     * The limit holds for the connections of this bind: an unsized shard
     * (params = auto) allows the largest range it may learn, one block more
     * than its range at DCPS_PARAMS_AUTO_MAX (dcps_shardmap_range). */
    dcps_range_t most = dcps_shardmap_range(DCPS_PARAMS_AUTO_MAX, cfg->n_shards, opt.shard);
    uint64_t range_max = shard->n_params ? shard->n : most.hi - most.lo + DCPS_SHARD_ALIGN;
    int64_t maxmsg = (int64_t)range_max * 8 + 65536;
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    /* No ZMQ_ROUTER_HANDOVER: a worker is its session (server/session.h), not
     * its routing id, so a connection that names a routing id already in use is
     * refused by ZeroMQ (its messages are never read) instead of taking the id,
     * and with it the replies, from the live worker. */
    if (zmq_bind(sock, cfg->shards[opt.shard]) != 0) {
        int e = errno;
        /* ZeroMQ binds an address or an interface name, never a host name; it
         * says "No such device" for one. */
        DCPS_ERR("cannot bind %s: %s%s", cfg->shards[opt.shard], zmq_strerror(e),
                 e == ENODEV ? ": a shard binds an IP address (tcp://127.0.0.1:17501), an "
                               "interface name (tcp://eth0:17501) or every interface "
                               "(tcp://*:17501), not a host name; workers may connect to a "
                               "host name"
                             : "");
        goto fail_socket;
    }
    size_t len = sizeof endpoint;
    zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, endpoint, &len);

    srv.opt = &opt;
    srv.cfg = cfg;
    srv.metrics = metrics;
    uv_loop_init(&srv.loop);
    if ((rc = dcps_router_init(&srv.router, &srv.loop, sock, cfg, shard)) != 0) {
        DCPS_ERR("cannot start serving: %s", rc < -1000 ? uv_strerror(rc) : dcps_strerror(rc));
        goto fail_loop;
    }
    if (cfg->curve)
        srv.router.auth = &srv.auth; /* which ranks each worker key may speak for */
    if (cfg->curve && (rc = dcps_auth_start(&srv.auth, &srv.loop)) != 0) {
        DCPS_ERR("cannot start the ZAP handler: %s",
                 rc < -1000 ? uv_strerror(rc) : dcps_strerror(rc));
        dcps_router_close(&srv.router, on_closed);
        uv_run(&srv.loop, UV_RUN_DEFAULT);
        goto fail_loop;
    }
    metrics_start(&srv, cfg->metrics_port);
    uv_signal_init(&srv.loop, &srv.sigterm);
    uv_signal_init(&srv.loop, &srv.sigint);
    uv_signal_init(&srv.loop, &srv.sighup);
    uv_timer_init(&srv.loop, &srv.checkpoint);
    uv_timer_init(&srv.loop, &srv.trim);
    uv_timer_start(&srv.trim, on_trim, TRIM_MS, TRIM_MS);
    srv.sigterm.data = srv.sigint.data = srv.sighup.data = srv.checkpoint.data = &srv;
    start_alive(&srv);
    if (*cfg->checkpoint_dir && restore(&srv) != 0) {
        stop_serving(&srv);
        uv_run(&srv.loop, UV_RUN_DEFAULT);
        goto fail_loop;
    }
    uv_signal_start(&srv.sigterm, on_signal, SIGTERM);
    uv_signal_start(&srv.sigint, on_signal, SIGINT);
    uv_signal_start(&srv.sighup, on_signal, SIGHUP);
    schedule_checkpoints(&srv);
    log_checkpoint_room(&srv);
    /* Written once the signals are handled: whoever waits for this file may stop
     * the server at once. */
    if (opt.endpoint_file && write_endpoint(opt.endpoint_file, endpoint) != 0) {
        DCPS_ERR("cannot write %s: %s", opt.endpoint_file, strerror(errno));
        stop_serving(&srv);
        uv_run(&srv.loop, UV_RUN_DEFAULT);
        goto fail_loop;
    }

    if (shard->n_params)
        DCPS_NOTICE("job %s (id %" PRIu64 "): shard %d of %d serves parameters [%" PRIu64
                    ", %" PRIu64 ") of %" PRIu64 " at %s; %d workers, optimizer %s, mode %s",
                    cfg->job_name, cfg->job_id, opt.shard, cfg->n_shards, shard->range.lo,
                    shard->range.hi, shard->n_params, endpoint, cfg->workers,
                    dcps_config_optimizer_name(cfg->opt_kind), dcps_config_mode_name(cfg->mode));
    else
        DCPS_NOTICE("job %s (id %" PRIu64 "): shard %d of %d at %s waits for rank 0 to size the "
                    "model ([model] params = auto); %d workers, optimizer %s, mode %s",
                    cfg->job_name, cfg->job_id, opt.shard, cfg->n_shards, endpoint, cfg->workers,
                    dcps_config_optimizer_name(cfg->opt_kind), dcps_config_mode_name(cfg->mode));
    log_memory(shard, "start");
    dcps_notify("READY=1\nSTATUS=serving shard %d at %s", opt.shard, endpoint);

    uv_run(&srv.loop, UV_RUN_DEFAULT);

    log_staleness(shard, &srv.router);
    log_memory(shard, "end");
    DCPS_NOTICE("stopped: version %" PRIu64 ", %" PRIu64 " pushes (%" PRIu64
                " duplicates, %" PRIu64 " dropped), %" PRIu64 " pulls (%" PRIu64 " deltas), %" PRIu64
                " bad messages, %" PRIu64 " bytes in, %" PRIu64 " bytes out",
                shard->version, shard->pushes, shard->duplicates, shard->dropped, shard->pulls,
                shard->deltas, dcps_router_error_count(&srv.router), srv.router.bytes_in, srv.router.bytes_out);
    status = srv.final_rc != 0; /* 1: the last checkpoint is missing */
fail_loop:
    uv_loop_close(&srv.loop);
fail_socket:
    if (sock)
        zmq_close(sock);
    dcps_auth_destroy(&srv.auth); /* after the ROUTER socket: see server/auth.h */
    if (ctx)
        zmq_ctx_term(ctx);
    dcps_shard_destroy(&shard);
fail_shard:
    dcps_metrics_destroy(&metrics);
fail_metrics:
    dcps_keyset_destroy(&keys);
    explicit_bzero(secret, sizeof secret);
    free(cfg);
    return status;
}
