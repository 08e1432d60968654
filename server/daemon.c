/* dcps — the shard daemon; see daemon.h. */
#include "server/daemon.h"

#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
#include "server/auth.h"
#include "server/checkpoint.h"
#include "server/metrics.h"
#include "server/notify.h"
#include "server/router.h"
#include "server/shard.h"

/* How old a scrape may be: the loop renders and publishes the text this often
 * (a few kB: far below the cost of the messages it counts). */
#define METRICS_PUBLISH_MS 500

/* The messages (a dense push or pull reply is 4 bytes a parameter of the range)
 * are allocated by ZeroMQ's I/O thread and freed by this one. glibc keeps freed
 * blocks in their arena for later, so a busy shard's RSS follows the most that
 * was ever in flight at once, and creeps up as the arenas fragment
 * (bench/soak.sh: dcps_heap_bytes kind="free"). Every TRIM_MS the free pages go
 * back to the kernel: a few page faults later, against a flat RSS. */
#define TRIM_MS 5000

struct dcps_daemon {
    const dcps_daemon_options_t *opt; /* for a reload: the same file and overrides */
    dcps_config_t *cfg;      /* the running configuration, shared with router and shard */
    dcps_keyset_t *keys;     /* [security] curve: until the ZAP handler takes them */
    uint8_t secret[DCPS_KEY_BYTES]; /* until the socket has it */
    dcps_metrics_t *metrics; /* NULL: [server] metrics_port = 0 */
    dcps_shard_t *shard;
    void *ctx, *sock;
    void *peer;              /* sync, several shards, not shard 0: a DEALER to shard 0 */
    char endpoint[DCPS_ENDPOINT_MAX]; /* what the socket bound */
    dcps_auth_t auth;        /* [security] curve: the ZAP handler; else never opened */
    uv_loop_t loop;
    bool loop_open;
    dcps_router_t *router;
    uv_signal_t sigterm, sigint, sighup;
    uv_timer_t alive;        /* systemd: WATCHDOG=1 and STATUS= (started only under it) */
    uv_timer_t checkpoint;   /* every [server] checkpoint_every seconds */
    uv_timer_t metrics_tick; /* every METRICS_PUBLISH_MS */
    uv_timer_t trim;         /* every TRIM_MS: malloc_trim */
    int stopping;
    bool saved;              /* a checkpoint holds saved_version (written or restored) */
    uint64_t saved_version;
    int final_rc;            /* of the checkpoint written on SIGTERM */
};

/* Whether this shard agrees its sync rounds with others (server/rounds.h). */
static bool agrees_rounds(const dcps_config_t *cfg)
{
    return cfg->mode == DCPS_MODE_SYNC && cfg->n_shards > 1;
}

static void schedule_checkpoints(dcps_daemon_t *d);
static void log_checkpoint_room(const dcps_daemon_t *d);

/* --- what the log says ------------------------------------------------------------ */

static void log_memory(const dcps_shard_t *s, const char *when)
{
    dcps_shard_memory_t k;
    if (!dcps_shard_stats(s).n_params) {
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

/* One line: mean, max and the histogram's non-empty buckets ("0:12 1:40 2-3:7"). */
static void log_staleness(const dcps_daemon_t *d)
{
    const dcps_staleness_t st = dcps_shard_stats(d->shard).staleness;
    char hist[512] = "";
    size_t at = 0;
    for (int b = 0; b < DCPS_STALENESS_BUCKETS && at < sizeof hist - 40; b++) {
        if (!st.hist[b])
            continue;
        uint64_t lo = b ? 1ull << (b - 1) : 0, hi = b ? (1ull << b) - 1 : 0;
        if (b == DCPS_STALENESS_BUCKETS - 1)
            at += (size_t)snprintf(hist + at, sizeof hist - at, " %" PRIu64 "+:%" PRIu64, lo,
                                   st.hist[b]);
        else if (lo == hi)
            at += (size_t)snprintf(hist + at, sizeof hist - at, " %" PRIu64 ":%" PRIu64, lo,
                                   st.hist[b]);
        else
            at += (size_t)snprintf(hist + at, sizeof hist - at, " %" PRIu64 "-%" PRIu64
                                   ":%" PRIu64, lo, hi, st.hist[b]);
    }
    DCPS_NOTICE("staleness: mean %.3f max %" PRIu64 " over %" PRIu64 " pushes; histogram%s",
                st.count ? (double)st.sum / (double)st.count : 0.0, st.max, st.count,
                *hist ? hist : " empty");
    if (d->cfg->mode == DCPS_MODE_SSP)
        DCPS_NOTICE("ssp: most steps ahead of the slowest worker %" PRIu64 " (bound %d)",
                    dcps_router_stats(d->router).max_ahead, d->cfg->staleness);
}

/* The job, what this shard serves and where; then READY=1. */
static void announce(const dcps_daemon_t *d)
{
    const dcps_config_t *cfg = d->cfg;
    const dcps_shard_stats_t s = dcps_shard_stats(d->shard);
    char rule[64];
    snprintf(rule, sizeof rule, "%s%s%s", dcps_config_optimizer_name(dcps_config_rule(cfg)),
             dcps_config_delay(cfg) ? " with delay compensation " : "",
             dcps_config_delay(cfg) ? dcps_config_delay_name(dcps_config_delay(cfg)) : "");
    if (s.n_params)
        DCPS_NOTICE("job %s (id %" PRIu64 "): shard %d of %d serves parameters [%" PRIu64
                    ", %" PRIu64 ") of %" PRIu64 " at %s; %d workers, optimizer %s, mode %s",
                    cfg->job_name, cfg->job_id, s.index, cfg->n_shards, s.range.lo, s.range.hi,
                    s.n_params, d->endpoint, cfg->workers, rule, dcps_config_mode_name(cfg->mode));
    else
        DCPS_NOTICE("job %s (id %" PRIu64 "): shard %d of %d at %s waits for rank 0 to size the "
                    "model ([model] params = auto); %d workers, optimizer %s, mode %s",
                    cfg->job_name, cfg->job_id, s.index, cfg->n_shards, d->endpoint,
                    cfg->workers, rule, dcps_config_mode_name(cfg->mode));
    log_memory(d->shard, "start");
    dcps_notify("READY=1\nSTATUS=serving shard %d at %s", s.index, d->endpoint);
}

/* --- [server] metrics_port: /metrics (server/metrics.h) ---------------------------- */

static void metrics_publish(dcps_daemon_t *d)
{
    dcps_metrics_numbers_t n = {
        .cfg = d->cfg, .router = dcps_router_stats(d->router), .shard = dcps_shard_stats(d->shard)};
    dcps_shard_memory_kinds(d->shard, &n.memory);
    int rc = dcps_metrics_update(d->metrics, &n);
    if (rc != 0)
        DCPS_WARN("metrics not updated: %s", dcps_strerror(rc));
}

static void on_metrics_tick(uv_timer_t *t)
{
    metrics_publish(t->data);
}

/* Publishes now and every METRICS_PUBLISH_MS (the router is serving). */
static void metrics_start(dcps_daemon_t *d)
{
    if (!d->metrics)
        return;
    metrics_publish(d);
    uv_timer_init(&d->loop, &d->metrics_tick);
    d->metrics_tick.data = d;
    uv_timer_start(&d->metrics_tick, on_metrics_tick, METRICS_PUBLISH_MS, METRICS_PUBLISH_MS);
    DCPS_INFO("metrics at http://%s:%d/metrics", d->cfg->metrics_address, d->cfg->metrics_port);
}

static void on_trim(uv_timer_t *t)
{
    (void)t;
    malloc_trim(0);
}

/* --- systemd: the watchdog and STATUS= ------------------------------------------- */

/* From the loop itself, so a loop that stopped turning stops the watchdog too. */
static void on_alive(uv_timer_t *h)
{
    dcps_daemon_t *d = h->data;
    const dcps_shard_stats_t s = dcps_shard_stats(d->shard);
    int live = dcps_router_stats(d->router).live_workers;
    if (!s.n_params) {
        dcps_notify("%sSTATUS=waiting for rank 0 to size the model; %d of %d workers live",
                    dcps_notify_watchdog_usec() ? "WATCHDOG=1\n" : "", live, d->cfg->workers);
        return;
    }
    dcps_notify("%sSTATUS=version %" PRIu64 ", %" PRIu64 " pushes, %" PRIu64
                " pulls, %d of %d workers live",
                dcps_notify_watchdog_usec() ? "WATCHDOG=1\n" : "", s.version, s.pushes, s.pulls,
                live, d->cfg->workers);
}

/* Under systemd: WATCHDOG=1 at half the interval it asks for, and a STATUS=
 * line with it (every 10 s without a watchdog). */
static void start_alive(dcps_daemon_t *d)
{
    uv_timer_init(&d->loop, &d->alive);
    d->alive.data = d;
    if (!dcps_notify_listening())
        return;
    uint64_t wd = dcps_notify_watchdog_usec();
    uint64_t every = wd ? wd / 2000 : 10000;
    uv_timer_start(&d->alive, on_alive, every ? every : 1, every ? every : 1);
    if (wd)
        DCPS_INFO("systemd watchdog: %.1f s; WATCHDOG=1 every %" PRIu64 " ms", wd / 1e6, every);
}

/* --- checkpoints (server/checkpoint.h, written through the router) ------------------ */

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
static void describe_newest(const dcps_daemon_t *d, char *buf, size_t len)
{
    int64_t when = dcps_router_stats(d->router).checkpoint_time;
    if (!d->saved)
        snprintf(buf, len, "there is no good checkpoint yet");
    else
        snprintf(buf, len, "the newest good one is version %" PRIu64 ", %.0f s old",
                 d->saved_version, difftime(time(NULL), (time_t)when));
}

/* Says at start (and after a reload) how much room the checkpoints need, and
 * warns when checkpoint_dir does not have it. */
static void log_checkpoint_room(const dcps_daemon_t *d)
{
    const dcps_config_t *cfg = d->cfg;
    char a[32], b[32], c[32];
    if (!*cfg->checkpoint_dir || !dcps_shard_stats(d->shard).n_params)
        return;
    /* keep, and in a sync job of several shards the one every shard holds */
    int files = (cfg->checkpoint_keep > 1 ? cfg->checkpoint_keep : 2) + agrees_rounds(cfg);
    double one = (double)dcps_checkpoint_bytes(d->shard), need = one * files;
    double have = free_bytes(cfg->checkpoint_dir);
    dcps_log(have >= 0 && have < need ? DCPS_LOG_WARNING : DCPS_LOG_INFO,
             "checkpoints: %s each; %d of them (keep = %d) need %s in %s, which has %s free",
             megabytes(one, a, sizeof a), files, cfg->checkpoint_keep, megabytes(need, b, sizeof b), cfg->checkpoint_dir,
             have >= 0 ? megabytes(have, c, sizeof c) : "an unknown amount");
}

/* Writes a checkpoint of the shard now and logs it at `level` with the time it
 * took ("periodic", "final"), or the failure as an error. Returns 0 or the
 * code of dcps_checkpoint_save. Blocks the loop while it writes. */
static int checkpoint_now(dcps_daemon_t *d, int level, const char *what)
{
    const dcps_config_t *cfg = d->cfg;
    uint64_t version = dcps_shard_stats(d->shard).version;
    char path[DCPS_PATH_MAX + 128], err[2 * DCPS_PATH_MAX + 256];
    uint64_t t0 = dcps_now_ns();
    int rc = dcps_router_save(d->router, path, sizeof path, err, sizeof err);
    if (rc != 0) {
        char room[32], need[32], newest[96];
        double have = free_bytes(cfg->checkpoint_dir);
        describe_newest(d, newest, sizeof newest);
        DCPS_ERR("%s checkpoint of version %" PRIu64 " failed: %s (%s free in %s, a checkpoint "
                 "takes %s); %s",
                 what, version, err, have >= 0 ? megabytes(have, room, sizeof room) : "?",
                 cfg->checkpoint_dir,
                 megabytes((double)dcps_checkpoint_bytes(d->shard), need, sizeof need), newest);
        return rc;
    }
    d->saved = true;
    d->saved_version = version;
    dcps_log(level, "%s checkpoint %s (version %" PRIu64 ") written in %.1f ms", what, path,
             version, (double)(dcps_now_ns() - t0) / 1e6);
    return 0;
}

/* The periodic checkpoint: only of initialised parameters whose version moved
 * since the last one (a sync round still open is not a reason on its own). */
static void on_checkpoint_timer(uv_timer_t *t)
{
    dcps_daemon_t *d = t->data;
    const dcps_shard_stats_t s = dcps_shard_stats(d->shard);
    if (!s.initialized || (d->saved && s.version == d->saved_version) ||
        dcps_router_checkpoint_by_round(d->router))
        return;
    checkpoint_now(d, DCPS_LOG_INFO, "periodic");
}

/* A round shard 0 marked (its periodic checkpoint was due): every shard of a
 * sync job writes its periodic checkpoint after applying it. */
static void on_round_checkpoint(void *data)
{
    checkpoint_now(data, DCPS_LOG_INFO, "periodic");
}

/* (Re)starts the periodic checkpoints from the job's [server] checkpoint_dir
 * and checkpoint_every, or stops them when either is unset (0 or empty): call
 * again after the job changes. */
static void schedule_checkpoints(dcps_daemon_t *d)
{
    const dcps_config_t *cfg = d->cfg;
    uv_timer_stop(&d->checkpoint);
    if (*cfg->checkpoint_dir && cfg->checkpoint_every > 0) {
        uint64_t ms = (uint64_t)cfg->checkpoint_every * 1000;
        uv_timer_start(&d->checkpoint, on_checkpoint_timer, ms, ms);
    }
}

/* --- stopping and reloading ------------------------------------------------------- */

static void on_closed(uv_handle_t *h)
{
    (void)h;
}

/* Closes every handle, so that uv_run returns. */
static void stop_serving(dcps_daemon_t *d)
{
    d->stopping = 1;
    uv_close((uv_handle_t *)&d->sigterm, on_closed);
    uv_close((uv_handle_t *)&d->sigint, on_closed);
    uv_close((uv_handle_t *)&d->sighup, on_closed);
    uv_close((uv_handle_t *)&d->alive, on_closed);
    uv_close((uv_handle_t *)&d->checkpoint, on_closed);
    uv_close((uv_handle_t *)&d->trim, on_closed);
    if (d->metrics)
        uv_close((uv_handle_t *)&d->metrics_tick, NULL);
    if (d->auth.started)
        dcps_auth_close(&d->auth, on_closed);
    dcps_router_close(d->router, on_closed);
}

/* SIGHUP: reads the job file again. Reloadable keys take effect and are
 * logged; if any other key changed, or the file does not load, nothing
 * changes (dcps_config_reload). With curve, the workers' keys are read again
 * too, from the directory the new file names: a directory that cannot be used
 * refuses the whole reload. */
static void reload(dcps_daemon_t *d)
{
    const dcps_daemon_options_t *o = d->opt;
    char err[2 * DCPS_PATH_MAX], changes[1024];
    dcps_keyset_t *keys = NULL;
    int rc;
    dcps_config_t *next = malloc(sizeof *next);
    if (!next) {
        DCPS_ERR("reload: out of memory; the running configuration stays");
        return;
    }
    if (dcps_config_load(next, o->config, o->overrides, o->n_overrides, err, sizeof err) != 0 ||
        dcps_config_supported(next, o->config, err, sizeof err) != 0 ||
        dcps_config_check_role(next, o->config, DCPS_ROLE_SERVER, err, sizeof err) != 0) {
        DCPS_ERR("reload refused: %s; the running configuration stays", err);
    } else if (d->cfg->curve && next->curve &&
               !(keys = dcps_keyset_load(next->worker_keys_dir, next->workers, &rc, err,
                                         sizeof err))) {
        DCPS_ERR("reload refused: %s ([security] worker_keys_dir); the running configuration "
                 "and worker keys stay", err);
    } else if (dcps_config_reload(d->cfg, next, changes, sizeof changes, err, sizeof err) != 0) {
        DCPS_ERR("reload refused: %s cannot change while running; the running configuration "
                 "stays (restart the shard to change it)", err);
    } else {
        if (keys)
            dcps_auth_set_keys(&d->auth, &keys, d->cfg->worker_keys_dir);
        if (!*changes) {
            DCPS_NOTICE("reload: %s unchanged", o->config);
        } else {
            dcps_log_set_level(dcps_log_level_parse(d->cfg->log_level));
            dcps_router_set_lr(d->router, d->cfg->lr);
            schedule_checkpoints(d);
            log_checkpoint_room(d);
            DCPS_NOTICE("reload: %s", changes);
        }
    }
    dcps_keyset_destroy(&keys);
    free(next);
}

/* SIGTERM and SIGINT: write the last checkpoint, then close every handle.
 * SIGHUP: reload. */
static void on_signal(uv_signal_t *h, int signum)
{
    dcps_daemon_t *d = h->data;
    if (d->stopping)
        return;
    if (signum == SIGHUP) {
        dcps_notify("RELOADING=1");
        reload(d);
        dcps_notify("READY=1");
        return;
    }
    DCPS_NOTICE("%s received, stopping", strsignal(signum));
    dcps_notify("STOPPING=1");
    if (*d->cfg->checkpoint_dir) {
        if (dcps_shard_stats(d->shard).initialized)
            d->final_rc = checkpoint_now(d, DCPS_LOG_NOTICE, "final");
        else
            DCPS_NOTICE("no final checkpoint: the parameters were never initialised");
    }
    stop_serving(d);
}

/* --- the setup steps, in dcps_daemon_new's order ----------------------------------- */

/* The job file with the options' overrides, checked for a server, and the
 * shard index against it; then the log's name and level. Returns 0; 2 after
 * printing why; 1 out of memory. */
static int setup_config(dcps_daemon_t *d)
{
    const dcps_daemon_options_t *o = d->opt;
    char err[2 * DCPS_PATH_MAX], ident[32];
    if (!(d->cfg = malloc(sizeof *d->cfg))) {
        fprintf(stderr, "dcps-server: out of memory\n");
        return 1;
    }
    if (dcps_config_load(d->cfg, o->config, o->overrides, o->n_overrides, err, sizeof err) != 0 ||
        dcps_config_supported(d->cfg, o->config, err, sizeof err) != 0 ||
        dcps_config_check_role(d->cfg, o->config, DCPS_ROLE_SERVER, err, sizeof err) != 0) {
        fprintf(stderr, "dcps-server: %s\n", err);
        return 2;
    }
    if (o->shard >= d->cfg->n_shards) {
        fprintf(stderr, "dcps-server: --shard %d: %s lists %d shard endpoints ([servers] shards)\n",
                o->shard, o->config, d->cfg->n_shards);
        return 2;
    }
    snprintf(ident, sizeof ident, "dcps-server[%d]", o->shard);
    dcps_log_init(ident);
    dcps_log_set_level(dcps_log_level_parse(d->cfg->log_level));
    return 0;
}

/* [security] curve: reads the shard's secret key and the workers' public keys,
 * before anything is bound. A server_public_key in the job must be this secret
 * key's: the workers use it. Returns 0, or -1 after logging why, naming the
 * file. */
static int setup_keys(dcps_daemon_t *d)
{
    const dcps_config_t *cfg = d->cfg;
    char err[2 * DCPS_PATH_MAX], text[DCPS_KEY_Z85 + 1];
    uint8_t pub[DCPS_KEY_BYTES], want[DCPS_KEY_BYTES];
    int rc;
    if (!cfg->curve)
        return 0;
    if (dcps_key_read(cfg->server_secret_key_file, true, d->secret, err, sizeof err) != 0) {
        DCPS_ERR("%s ([security] server_secret_key_file); not starting", err);
        return -1;
    }
    if (dcps_key_public(d->secret, pub) != 0) {
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
    if (!(d->keys = dcps_keyset_load(cfg->worker_keys_dir, cfg->workers, &rc, err, sizeof err))) {
        DCPS_ERR("%s ([security] worker_keys_dir); not starting", err);
        return -1;
    }
    DCPS_NOTICE("CURVE: this shard's public key is %s; %zu worker keys in %s", text,
                dcps_keyset_count(d->keys), cfg->worker_keys_dir);
    return 0;
}

/* Binds the metrics port, if one is set, before anything else is bound.
 * Returns 0, or -1 after logging why, naming the port. */
static int setup_metrics(dcps_daemon_t *d)
{
    const dcps_config_t *cfg = d->cfg;
    char err[256];
    if (cfg->metrics_port &&
        !(d->metrics = dcps_metrics_new(cfg->metrics_address, cfg->metrics_port, err,
                                        sizeof err))) {
        DCPS_ERR("%s ([server] metrics_address, metrics_port); not starting", err);
        return -1;
    }
    return 0;
}

/* The parameter store, and a [server] checkpoint_dir this process can write.
 * Returns 0, or -1 after logging why. */
static int setup_shard(dcps_daemon_t *d)
{
    char err[2 * DCPS_PATH_MAX];
    int rc;
    if (!(d->shard = dcps_shard_new(d->cfg, d->opt->shard, &rc))) {
        DCPS_ERR("cannot allocate shard %d: %s", d->opt->shard, dcps_strerror(rc));
        return -1;
    }
    if (*d->cfg->checkpoint_dir &&
        dcps_checkpoint_prepare(d->cfg->checkpoint_dir, err, sizeof err) != 0) {
        DCPS_ERR("%s ([server] checkpoint_dir); not starting", err);
        return -1;
    }
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

/* Sync mode with several shards: shard 0 admits the shards' own key (theirs
 * is the job's one server key pair), and every other shard makes its link to
 * shard 0 a CURVE client with that pair. Returns 0, or -1 with errno. */
static int setup_peer_keys(dcps_daemon_t *d)
{
    uint8_t pub[DCPS_KEY_BYTES];
    if (!agrees_rounds(d->cfg) || dcps_key_public(d->secret, pub) != 0)
        return 0;
    if (d->opt->shard == 0) {
        dcps_auth_set_peer(&d->auth, pub);
        return 0;
    }
    if (!(d->peer = zmq_socket(d->ctx, ZMQ_DEALER)) ||
        zmq_setsockopt(d->peer, ZMQ_CURVE_SERVERKEY, pub, DCPS_KEY_BYTES) != 0 ||
        zmq_setsockopt(d->peer, ZMQ_CURVE_PUBLICKEY, pub, DCPS_KEY_BYTES) != 0 ||
        zmq_setsockopt(d->peer, ZMQ_CURVE_SECRETKEY, d->secret, DCPS_KEY_BYTES) != 0)
        return -1;
    return 0;
}

/* A follower's link to shard 0: connected (ZeroMQ reconnects by itself while
 * shard 0 is down or restarts). Returns 0, or -1 after logging why. */
static int setup_peer(dcps_daemon_t *d)
{
    const dcps_config_t *cfg = d->cfg;
    int linger = 0;
    if (!agrees_rounds(cfg) || d->opt->shard == 0)
        return 0;
    if (!d->peer && !(d->peer = zmq_socket(d->ctx, ZMQ_DEALER))) {
        DCPS_ERR("cannot create a ZeroMQ socket: %s", zmq_strerror(errno));
        return -1;
    }
    zmq_setsockopt(d->peer, ZMQ_LINGER, &linger, sizeof linger);
    const char *leader = d->opt->leader ? d->opt->leader : cfg->shards[0];
    if (strchr(leader, '*')) {
        DCPS_ERR("shard 0's address %s names no port to connect to: in a sync job with "
                 "several shards the others connect to shard 0, which leads the rounds; give "
                 "its address as the workers see it ([servers] shards), or --leader ENDPOINT",
                 leader);
        return -1;
    }
    if (zmq_connect(d->peer, leader) != 0) {
        DCPS_ERR("cannot connect to shard 0 at %s, which leads this sync job's rounds: %s",
                 leader, zmq_strerror(errno));
        return -1;
    }
    return 0;
}

/* The ZeroMQ context and ROUTER socket, with the ZAP handler bound first under
 * curve (until it is, libzmq admits every client); the socket bound to the
 * shard's endpoint. Returns 0, or -1 after logging why. */
static int setup_sockets(dcps_daemon_t *d)
{
    const dcps_config_t *cfg = d->cfg;
    const char *at = cfg->shards[d->opt->shard];
    char err[2 * DCPS_PATH_MAX];
    d->ctx = zmq_ctx_new();
    d->sock = d->ctx ? zmq_socket(d->ctx, ZMQ_ROUTER) : NULL;
    if (!d->sock) {
        DCPS_ERR("cannot create a ZeroMQ socket: %s", zmq_strerror(errno));
        return -1;
    }
    if (cfg->curve) {
        if (dcps_auth_open(&d->auth, d->ctx, &d->keys, cfg->worker_keys_dir, err, sizeof err) !=
            0) {
            DCPS_ERR("%s", err);
            return -1;
        }
        int rc = curve_server(d->sock, d->secret);
        if (rc == 0)
            rc = setup_peer_keys(d);
        explicit_bzero(d->secret, sizeof d->secret); /* libzmq keeps its own copy */
        if (rc != 0) {
            DCPS_ERR("cannot make %s a CURVE server: %s", at, zmq_strerror(errno));
            return -1;
        }
    }
    int linger = 0;
    /* A message larger than the biggest valid one (a dense range, or indices and
     * values of the whole range) is refused by ZeroMQ, which drops the sender.
     * The limit holds for the connections of this bind: an unsized shard
     * (params = auto) allows the largest range it may learn, one block more
     * than its range at DCPS_PARAMS_AUTO_MAX (dcps_shardmap_range). */
    const dcps_shard_stats_t s = dcps_shard_stats(d->shard);
    dcps_range_t most = dcps_shardmap_range(DCPS_PARAMS_AUTO_MAX, cfg->n_shards, d->opt->shard);
    uint64_t range_max = s.n_params ? s.n : most.hi - most.lo + DCPS_SHARD_ALIGN;
    int64_t maxmsg = (int64_t)range_max * 8 + 65536;
    zmq_setsockopt(d->sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(d->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    /* No ZMQ_ROUTER_HANDOVER: a worker is its session (server/session.h), not
     * its routing id, so a connection that names a routing id already in use is
     * refused by ZeroMQ (its messages are never read) instead of taking the id,
     * and with it the replies, from the live worker. */
    if (zmq_bind(d->sock, at) != 0) {
        int e = errno;
        /* ZeroMQ binds an address or an interface name, never a host name; it
         * says "No such device" for one. */
        DCPS_ERR("cannot bind %s: %s%s", at, zmq_strerror(e),
                 e == ENODEV ? ": a shard binds an IP address (tcp://127.0.0.1:17501), an "
                               "interface name (tcp://eth0:17501) or every interface "
                               "(tcp://*:17501), not a host name; workers may connect to a "
                               "host name"
                             : "");
        return -1;
    }
    size_t len = sizeof d->endpoint;
    zmq_getsockopt(d->sock, ZMQ_LAST_ENDPOINT, d->endpoint, &len);
    return 0;
}

/* The loop, and the router serving the socket on it; under curve the ZAP
 * handler answers from the same loop. Returns 0, or -1 after logging why (the
 * loop's handles closed again). */
static int setup_router(dcps_daemon_t *d)
{
    int rc;
    uv_loop_init(&d->loop);
    d->loop_open = true;
    if (!(d->router = dcps_router_new(&d->loop, d->sock, d->cfg, d->shard, &rc))) {
        DCPS_ERR("cannot start serving: %s", rc < -1000 ? uv_strerror(rc) : dcps_strerror(rc));
        return -1;
    }
    if (agrees_rounds(d->cfg)) {
        rc = d->opt->shard == 0 ? dcps_router_lead(d->router)
                                : dcps_router_follow(d->router, d->peer);
        if (rc != 0) {
            DCPS_ERR("cannot set up the rounds' agreement: %s",
                     rc < -1000 ? uv_strerror(rc) : dcps_strerror(rc));
            dcps_router_close(d->router, on_closed);
            uv_run(&d->loop, UV_RUN_DEFAULT);
            return -1;
        }
        dcps_router_on_checkpoint(d->router, on_round_checkpoint, d);
        DCPS_INFO("sync rounds: %s", d->opt->shard == 0 ? "this shard leads them (shard 0)"
                                                        : "shard 0 leads them");
    }
    if (!d->cfg->curve)
        return 0;
    dcps_router_set_auth(d->router, &d->auth); /* which ranks each worker key may speak for */
    if ((rc = dcps_auth_start(&d->auth, &d->loop)) != 0) {
        DCPS_ERR("cannot start the ZAP handler: %s",
                 rc < -1000 ? uv_strerror(rc) : dcps_strerror(rc));
        dcps_router_close(d->router, on_closed);
        uv_run(&d->loop, UV_RUN_DEFAULT);
        return -1;
    }
    return 0;
}

/* The loop's other handles: metrics published, malloc_trim, the checkpoint
 * timer (started by schedule_checkpoints), the signals (started by
 * setup_signals) and the systemd watchdog. */
static void setup_timers(dcps_daemon_t *d)
{
    metrics_start(d);
    uv_signal_init(&d->loop, &d->sigterm);
    uv_signal_init(&d->loop, &d->sigint);
    uv_signal_init(&d->loop, &d->sighup);
    uv_timer_init(&d->loop, &d->checkpoint);
    uv_timer_init(&d->loop, &d->trim);
    uv_timer_start(&d->trim, on_trim, TRIM_MS, TRIM_MS);
    d->sigterm.data = d->sigint.data = d->sighup.data = d->checkpoint.data = d;
    start_alive(d);
}

/* Restores the newest usable checkpoint in [server] checkpoint_dir (any), or
 * its newest of `version`, through the router (server/router.h). Returns 1
 * restored, 0 none there, -1 logged: do not serve. */
static int restore_now(dcps_daemon_t *d, bool any, uint64_t version)
{
    const dcps_config_t *cfg = d->cfg;
    char path[DCPS_PATH_MAX + 256], err[2 * DCPS_PATH_MAX + 512];
    uint64_t t0 = dcps_now_ns();
    int rc = dcps_router_restore(d->router, any, version, path, sizeof path, err, sizeof err);
    d->shard = dcps_router_shard(d->router); /* a new one, if it restored into a serving one */
    if (rc == DCPS_E_DATA) {
        DCPS_ERR("%s; not starting: move them out of %s to start fresh", err, cfg->checkpoint_dir);
        return -1;
    }
    if (rc < 0) {
        DCPS_ERR("cannot restore a checkpoint: %s", err);
        return -1;
    }
    if (rc == 0) {
        if (any)
            DCPS_NOTICE("no checkpoint in %s: starting fresh", cfg->checkpoint_dir);
        return 0;
    }
    /* How old it is says how much the job may have lost: every update applied
     * after it was written. The workers tell exactly how many once they come
     * back (server/router.c). */
    const dcps_shard_stats_t s = dcps_shard_stats(d->shard);
    int64_t written = dcps_router_stats(d->router).checkpoint_time;
    DCPS_NOTICE("restored %s (version %" PRIu64 ", %s) in %.1f ms; it was written %.0f s ago: "
                "updates applied after it by the previous process are lost",
                path, s.version, s.initialized ? "initialised" : "not initialised yet",
                (double)(dcps_now_ns() - t0) / 1e6, difftime(time(NULL), (time_t)written));
    d->saved = true;
    d->saved_version = s.version;
    return 1;
}

/* dcps_router_restore_fn: a sync job's shards agreed where to resume. */
static int restore_agreed(void *data, bool any, uint64_t version)
{
    return restore_now(data, any, version);
}

/* Restores the newest usable checkpoint in [server] checkpoint_dir through the
 * router (server/router.h), or, in a sync job with several shards, offers the
 * checkpoints to the round the shards agree on (dcps_router_defer_restore).
 * Returns 0 (restored, deferred, or nothing to restore) or -1 (logged: do not
 * serve). */
static int setup_restore(dcps_daemon_t *d)
{
    const dcps_config_t *cfg = d->cfg;
    char err[2 * DCPS_PATH_MAX + 512];
    size_t count;
    uint64_t newest;
    if (!*cfg->checkpoint_dir)
        return 0;
    if (!agrees_rounds(cfg))
        return restore_now(d, true, 0) < 0 ? -1 : 0;
    if (dcps_checkpoint_newest(cfg->checkpoint_dir, d->opt->shard, &count, &newest, err,
                               sizeof err) != 0) {
        DCPS_ERR("cannot restore a checkpoint: %s", err);
        return -1;
    }
    DCPS_NOTICE("%zu checkpoints in %s (the newest of version %" PRIu64 "): waiting for the "
                "shards to agree on the newest version all of them hold",
                count, cfg->checkpoint_dir, newest);
    dcps_router_defer_restore(d->router, count, newest, restore_agreed, d);
    return 0;
}

/* SIGTERM, SIGINT and SIGHUP handled from now on; periodic checkpoints. */
static void setup_signals(dcps_daemon_t *d)
{
    uv_signal_start(&d->sigterm, on_signal, SIGTERM);
    uv_signal_start(&d->sigint, on_signal, SIGINT);
    uv_signal_start(&d->sighup, on_signal, SIGHUP);
    schedule_checkpoints(d);
    log_checkpoint_room(d);
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

/* --endpoint-file, written once the signals are handled: whoever waits for
 * this file may stop the server at once. Returns 0, or -1 after logging why. */
static int setup_endpoint(dcps_daemon_t *d)
{
    const char *path = d->opt->endpoint_file;
    if (path && write_endpoint(path, d->endpoint) != 0) {
        DCPS_ERR("cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* --- the daemon -------------------------------------------------------------------- */

dcps_daemon_t *dcps_daemon_new(const dcps_daemon_options_t *opt, int *status)
{
    dcps_daemon_t *d = calloc(1, sizeof *d);
    *status = 1;
    if (!d) {
        fprintf(stderr, "dcps-server: out of memory\n");
        return NULL;
    }
    d->opt = opt;
    if ((*status = setup_config(d)) != 0)
        goto fail;
    *status = 1;
    if (setup_keys(d) != 0 || setup_metrics(d) != 0 || setup_shard(d) != 0 ||
        setup_sockets(d) != 0 || setup_peer(d) != 0 || setup_router(d) != 0)
        goto fail;
    setup_timers(d);
    if (setup_restore(d) != 0)
        goto fail_serving;
    setup_signals(d);
    if (setup_endpoint(d) != 0)
        goto fail_serving;
    announce(d);
    return d;

fail_serving:
    stop_serving(d);
    uv_run(&d->loop, UV_RUN_DEFAULT);
fail:
    dcps_daemon_destroy(&d);
    return NULL;
}

int dcps_daemon_run(dcps_daemon_t *d)
{
    uv_run(&d->loop, UV_RUN_DEFAULT);

    const dcps_shard_stats_t s = dcps_shard_stats(d->shard);
    const dcps_router_stats_t r = dcps_router_stats(d->router);
    log_staleness(d);
    log_memory(d->shard, "end");
    if (d->cfg->mode == DCPS_MODE_SYNC)
        DCPS_NOTICE("rounds: %" PRIu64 " closed, digest %016" PRIx64, r.rounds, r.digest);
    DCPS_NOTICE("stopped: version %" PRIu64 ", %" PRIu64 " pushes (%" PRIu64 " duplicates, %" PRIu64
                " dropped), %" PRIu64 " pulls (%" PRIu64 " deltas), %" PRIu64
                " bad messages, %" PRIu64 " bytes in, %" PRIu64 " bytes out",
                s.version, s.pushes, s.duplicates, s.dropped, s.pulls, s.deltas,
                dcps_router_error_count(d->router), r.bytes_in, r.bytes_out);
    return d->final_rc != 0; /* 1: the last checkpoint is missing */
}

void dcps_daemon_destroy(dcps_daemon_t **dp)
{
    dcps_daemon_t *d = *dp;
    if (!d)
        return;
    dcps_router_destroy(&d->router);
    if (d->loop_open)
        uv_loop_close(&d->loop);
    if (d->sock)
        zmq_close(d->sock);
    if (d->peer)
        zmq_close(d->peer);
    dcps_auth_destroy(&d->auth); /* after the ROUTER socket: see server/auth.h */
    if (d->ctx)
        zmq_ctx_term(d->ctx);
    dcps_shard_destroy(&d->shard);
    dcps_metrics_destroy(&d->metrics);
    dcps_keyset_destroy(&d->keys);
    explicit_bzero(d->secret, sizeof d->secret);
    free(d->cfg);
    free(d);
    *dp = NULL;
}
