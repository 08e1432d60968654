/* dcps — the shard daemon's message handling.
 *
 * The router owns the shard's ROUTER socket's traffic: it receives each message
 * through the bridge (server/bridge.h), validates it completely (every header
 * field: dcps_codec_check_fields), hands it to the handler of its type and
 * answers. Whether a request may apply is decided in one place, router.c, by
 * two ordered lists of small named checks in the order docs/protocol.md
 * promises: request_checks for every message (7.1), then push_checks for a
 * push (7.4). A bad message gets an ERROR reply with a code and a sentence, a
 * count, and a log line naming the peer's address (at most DCPS_LOGLIMIT_LINES
 * per peer in 10 s, then one line saying how many were not logged:
 * server/loglimit.h); nothing of it is applied and every other client is
 * served as before.
 *
 * It runs the job's consistency model (server/consistency.h): pulls that may not
 * start yet (sync, ssp) and barriers wait here, with the routing id to answer
 * them later; every heartbeat_ms a timer declares silent workers dead (time the loop itself
 * did not run, stopped or blocked, is excused: dcps_consistency_paused) and tells
 * each waiting worker that it is still waiting (a HEARTBEAT with the request's
 * seq and flag WAITING), so its client keeps waiting instead of timing out.
 *
 * Who may speak for a rank: under [security] curve, only a worker key whose
 * file's name lists the rank (server/auth.h), checked first for every request;
 * then, for every request but HELLO, the rank's session (server/session.h):
 * HELLO binds a rank to a session, and a request that names another one, or
 * comes before any HELLO, is answered ERROR SESSION and changes nothing (it is
 * not even a sign of life). Routing ids identify nothing: a reply goes to the
 * routing id its request came from, a waiting pull's or barrier's to the one
 * of the latest request it waits for.
 *
 * With [model] params = auto the shard is unsized until rank 0's HELLO sizes it
 * (server/shard.h); meanwhile a HELLO of another rank is answered NOTREADY,
 * which its client asks again after, and is not counted as a bad message.
 *
 * Single-threaded: everything runs on the loop thread that owns the socket. */
#ifndef DCPS_ROUTER_H
#define DCPS_ROUTER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "server/bridge.h"
#include "common/config.h"
#include "proto/codec.h"
#include "server/auth.h"
#include "server/consistency.h"
#include "server/loglimit.h"
#include "server/shard.h"

#define DCPS_ROUTING_ID_MAX 256
#define DCPS_ERROR_SLOTS 32 /* counters for codes 0 .. −31 */

/* A routing id of the ROUTER socket. */
typedef struct {
    uint8_t b[DCPS_ROUTING_ID_MAX];
    size_t len;
} dcps_route_t;

/* Durations of one kind of update, in log2 buckets of microseconds: hist[0]
 * counts up to 1 µs, hist[b] (2^(b−1), 2^b] µs, the last bucket everything above
 * 2^(BUCKETS−2) µs (about 1 s). Measured with CLOCK_MONOTONIC. */
#define DCPS_LATENCY_BUCKETS 22
typedef struct {
    uint64_t count, sum_ns;
    uint64_t hist[DCPS_LATENCY_BUCKETS];
} dcps_latency_t;

/* A pull as received: what the worker holds and what it asks for. */
typedef struct {
    uint64_t seq;
    uint64_t step;  /* the step it will compute */
    bool holds;     /* flag DELTA: it holds the parameters tagged `held` */
    uint64_t held;
    uint64_t want;  /* the most entries of a delta; 0: the job's pull density */
    bool exact;     /* flag EXACT: it wants w itself */
} dcps_pull_req_t;

/* What the router remembers of a worker rank (its membership is in cons, its
 * session in the shard). */
typedef struct {
    dcps_route_t wait;  /* the socket of its waiting request */
    bool in_barrier;    /* waiting in the current barrier */
    bool pulling;       /* a PULL waits for its step to start */
    uint64_t wait_seq;  /* seq of the waiting request */
    dcps_pull_req_t pull; /* the last pull */
} dcps_peer_t;

typedef struct dcps_router {
    const dcps_config_t *cfg;
    dcps_shard_t *shard;
    void *sock;
    uv_loop_t *loop;
    dcps_bridge_t bridge;
    uv_timer_t tick;       /* every heartbeat_ms: dead workers, keepalives */
    double last_tick;      /* ms, when it last ran */
    dcps_consistency_t cons;
    dcps_peer_t *peers;    /* one per rank */
    uint64_t barrier_step; /* valid while barrier_waiting > 0 */
    int barrier_waiting;
    uint64_t messages, heartbeats, bytes_in, bytes_out;
    uint64_t errors[DCPS_ERROR_SLOTS]; /* by −code; every bad message */
    dcps_loglimit_t badlog; /* the lines about them: at most a few per peer and 10 s */
    /* Checkpoints of the shard and cons (dcps_router_save, dcps_router_restore). */
    uint64_t checkpoint_failures;
    int64_t checkpoint_time;   /* Unix seconds of the newest good one; 0: none */
    int64_t started;           /* Unix seconds the router started */
    uint64_t restored_version; /* the version restored from a checkpoint, or 0 */
    uint64_t lost_logged;      /* the most lost updates logged so far */
    const dcps_auth_t *auth; /* [security] curve: the worker keys' ranks; else NULL */
    dcps_latency_t apply_push;  /* each push applied (async, ssp) or added to the round (sync) */
    dcps_latency_t apply_round; /* sync: each round's mean applied */
    /* Where every reply goes: returns the bytes sent or a negative code. init
     * sets a non-blocking send on sock; a caller without a socket sets its own.
     * With ffn non-NULL (a dense pull reply of w) the payload is borrowed, to be
     * sent without a copy: ffn(data, hint) must run once per payload frame when
     * it is no longer read, whether it was sent or not, on any thread. */
    int (*send)(struct dcps_router *r, const dcps_buf_t *id, const dcps_msg_t *reply,
                zmq_free_fn *ffn, void *hint);
    double clock_ms; /* the time in ms when there is no loop; the caller moves it */
} dcps_router_t;

/* Starts serving sock (a bound ROUTER) on loop. Borrows cfg, shard and sock until
 * dcps_router_close's callback has run. Returns 0 or a negative code.
 * In process (tests/fuzz): with sock NULL nothing is received and no timer runs;
 * the caller sets r->send, passes messages to dcps_router_handle and runs
 * dcps_router_tick, and with loop NULL the clock is r->clock_ms. */
int dcps_router_init(dcps_router_t *r, uv_loop_t *loop, void *sock, const dcps_config_t *cfg,
                     dcps_shard_t *shard);

/* Stops serving; close_cb runs when the bridge's handles are closed (the timer
 * closes in the same loop iteration). Without a socket nothing is left open:
 * close_cb is not called and r may go at once. */
void dcps_router_close(dcps_router_t *r, uv_close_cb close_cb);

/* Handles one received message: parts[0] is the routing id, parts[1] the header,
 * then the payload frames; n (at least 1) counts every part received, also those
 * beyond DCPS_MAX_PARTS, which are not read. peer is the sender's address for the
 * log, or NULL or ""; user_id the CURVE key (ZAP User-Id) it came with, or NULL.
 * Replies go through r->send. Borrows parts for the call only. */
void dcps_router_handle(dcps_router_t *r, const dcps_buf_t *parts, size_t n, const char *peer,
                        const char *user_id);

/* What the timer does every heartbeat_ms: declares silent workers dead, closes
 * what that completes, and tells each waiting worker it still waits. */
void dcps_router_tick(dcps_router_t *r);

/* Total bad messages answered with ERROR so far. */
uint64_t dcps_router_error_count(const dcps_router_t *r);

/* [security] curve: the ZAP handler whose key set says which ranks each worker
 * key may speak for (checked for every request) and whose refusals the stats
 * report. Borrowed until dcps_router_close's callback has run. */
void dcps_router_set_auth(dcps_router_t *r, const dcps_auth_t *auth);

/* Writes a checkpoint of the shard and the consistency model into the job's
 * [server] checkpoint_dir, keeping checkpoint_keep (dcps_checkpoint_save), and
 * records it: the time of the newest good one, or one more failure. Returns 0
 * with the file's path in path, or dcps_checkpoint_save's code with a sentence
 * in err. Blocks the loop while it writes. */
int dcps_router_save(dcps_router_t *r, char *path, size_t pathlen, char *err, size_t errlen);

/* Restores the newest usable checkpoint of [server] checkpoint_dir into the
 * shard and the consistency model (dcps_checkpoint_restore), before anything
 * was served. With one restored (returns 1, its path in path) the router
 * records its version (updates a worker shows beyond it are lost) and its
 * file's time as the newest good checkpoint's, and a job that had started
 * starts again as at INIT: workers not heard yet are expected from now.
 * Returns what dcps_checkpoint_restore returns, with err. */
int dcps_router_restore(dcps_router_t *r, char *path, size_t pathlen, char *err, size_t errlen);

/* What the router counts and knows of the job, for /metrics, the daemon's log
 * and tests: a copy, taken on the loop thread. */
typedef struct {
    uint64_t messages, heartbeats, bytes_in, bytes_out;
    uint64_t errors[DCPS_ERROR_SLOTS]; /* bad messages by −code (0: beyond the slots) */
    uint64_t auth_refused;             /* connections the ZAP handler refused */
    uint64_t checkpoint_failures;
    int64_t checkpoint_time;   /* Unix seconds of the newest good checkpoint; 0: none */
    int64_t started;           /* Unix seconds the router started */
    uint64_t restored_version; /* the version restored from a checkpoint, or 0 */
    dcps_latency_t apply_push, apply_round;
    int live_workers;   /* said HELLO, no BYE, not dead (dcps_consistency_joined) */
    uint64_t max_ahead; /* ssp: most steps a started step was ahead of the slowest */
    int barrier_waiting; /* workers the open barrier counts */
    int in_barrier;      /* workers whose BARRIER waits for an answer */
} dcps_router_stats_t;

dcps_router_stats_t dcps_router_stats(const dcps_router_t *r);

#endif
