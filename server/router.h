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
#include <zmq.h>

#include "common/config.h"
#include "proto/codec.h"
#include "server/auth.h"
#include "server/consistency.h"
#include "server/shard.h"

#define DCPS_ERROR_SLOTS 32 /* counters for codes 0 .. −31 */

/* Durations of one kind of update, in log2 buckets of microseconds: hist[0]
 * counts up to 1 µs, hist[b] (2^(b−1), 2^b] µs, the last bucket everything above
 * 2^(BUCKETS−2) µs (about 1 s). Measured with CLOCK_MONOTONIC. */
#define DCPS_LATENCY_BUCKETS 22
typedef struct {
    uint64_t count, sum_ns;
    uint64_t hist[DCPS_LATENCY_BUCKETS];
} dcps_latency_t;

/* The router of one shard: opaque (router.c). It owns the consistency model
 * (server/consistency.h), where each rank's waiting pull or barrier is to be
 * answered, and the counters; it borrows the job, the shard and the socket. */
typedef struct dcps_router dcps_router_t;

/* Where every reply goes: returns the bytes sent or a negative code. By
 * default a non-blocking send on the socket; a caller without a socket sets
 * its own (dcps_router_set_send). With ffn non-NULL (a dense pull reply of w)
 * the payload is borrowed, to be sent without a copy: ffn(data, hint) must run
 * once per payload frame when it is no longer read, whether it was sent or
 * not, on any thread. */
typedef int dcps_router_send_fn(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *reply,
                                zmq_free_fn *ffn, void *hint);

/* Starts serving sock (a bound ROUTER) on loop. Borrows cfg, shard and sock until
 * dcps_router_destroy. Returns NULL on failure, with a negative code in *err.
 * In process (tests, the fuzzer): with sock NULL nothing is received and no
 * timer runs; the caller sets the send function, passes messages to
 * dcps_router_handle and runs dcps_router_tick, and with loop NULL the clock is
 * dcps_router_set_clock's. */
dcps_router_t *dcps_router_new(uv_loop_t *loop, void *sock, const dcps_config_t *cfg,
                               dcps_shard_t *shard, int *err);

/* Stops serving; close_cb runs when the bridge's handles are closed (the timer
 * closes in the same loop iteration). Without a socket nothing is left open
 * and close_cb is not called. The stats stay readable. */
void dcps_router_close(dcps_router_t *r, uv_close_cb close_cb);

/* Frees r, closed and with close_cb run (at once without a socket), and sets
 * *r to NULL. Does nothing if *r is NULL. */
void dcps_router_destroy(dcps_router_t **r);

/* Replaces where replies go (in process: see dcps_router_new). */
void dcps_router_set_send(dcps_router_t *r, dcps_router_send_fn *send);

/* In process without a loop: the time in ms, which only the caller moves. */
void dcps_router_set_clock(dcps_router_t *r, double ms);

/* Handles one received message: parts[0] is the routing id, parts[1] the header,
 * then the payload frames; n (at least 1) counts every part received, also those
 * beyond DCPS_MAX_PARTS, which are not read. peer is the sender's address for the
 * log, or NULL or ""; user_id the CURVE key (ZAP User-Id) it came with, or NULL.
 * Replies go through the send function. Borrows parts for the call only. */
void dcps_router_handle(dcps_router_t *r, const dcps_buf_t *parts, size_t n, const char *peer,
                        const char *user_id);

/* What the timer does every heartbeat_ms: declares silent workers dead, closes
 * what that completes, and tells each waiting worker it still waits. */
void dcps_router_tick(dcps_router_t *r);

/* Sync mode with several shards (server/rounds.h). Shard 0 leads: it decides
 * every round's members for all shards (dcps_router_lead). Every other shard
 * follows over peer, a DEALER socket connected to shard 0 (NULL in process),
 * closing a round only when shard 0 says so (dcps_router_follow). Both keep
 * each rank's push of the open round. Called once, before the first message.
 * Return 0, DCPS_E_NOMEM, or a libuv code. */
int dcps_router_lead(dcps_router_t *r);
int dcps_router_follow(dcps_router_t *r, void *peer);

/* A sync job's shards with [server] checkpoint_dir resume at the newest round
 * all of them hold (docs/algorithms.md): so such a shard does not restore at
 * start but waits (leaving workers' requests unanswered: their clients ask
 * again after timeout_ms) until the leader has heard every
 * follower's offer (count checkpoints, the newest of version newest) and says
 * which version every shard restores, or that all start fresh. fn restores:
 * its newest checkpoint (any) or the one of version, returning 1 restored, 0
 * none there, or a negative code (logged). Call after dcps_router_lead or
 * dcps_router_follow. */
typedef int dcps_router_restore_fn(void *data, bool any, uint64_t version);
void dcps_router_defer_restore(dcps_router_t *r, size_t count, uint64_t newest,
                               dcps_router_restore_fn *fn, void *data);

/* What writes a checkpoint when a round says so (leader and followers). */
typedef void dcps_router_checkpoint_fn(void *data);
void dcps_router_on_checkpoint(dcps_router_t *r, dcps_router_checkpoint_fn *fn, void *data);

/* The periodic checkpoint is due. A shard that agrees rounds with others does
 * not write it now: the leader marks its next round, and every shard writes
 * one after applying that round (a consistent cut). Returns true then; false
 * when the caller writes it now. */
bool dcps_router_checkpoint_by_round(dcps_router_t *r);

/* SIGHUP changed [optimizer] lr: the schedule's base from now on. A follower
 * keeps the leader's, which each round carries, so that every shard changes lr
 * at the same round. */
void dcps_router_set_lr(dcps_router_t *r, double lr);

/* Total bad messages answered with ERROR so far. */
uint64_t dcps_router_error_count(const dcps_router_t *r);

/* [security] curve: the ZAP handler whose key set says which ranks each worker
 * key may speak for (checked for every request) and whose refusals the stats
 * report. Borrowed until dcps_router_destroy. */
void dcps_router_set_auth(dcps_router_t *r, const dcps_auth_t *auth);

/* Writes a checkpoint of the shard and the consistency model into the job's
 * [server] checkpoint_dir, keeping checkpoint_keep (dcps_checkpoint_save), and
 * records it: the time of the newest good one, or one more failure. Returns 0
 * with the file's path in path, or dcps_checkpoint_save's code with a sentence
 * in err. Blocks the loop while it writes. */
int dcps_router_save(dcps_router_t *r, char *path, size_t pathlen, char *err, size_t errlen);

/* Restores the newest usable checkpoint of [server] checkpoint_dir (any), or
 * the newest of `version` (dcps_checkpoint_restore_version), into the shard
 * and the consistency model: at start, or when the shards agreed where to
 * resume (dcps_router_defer_restore), also after the shard served (a sync
 * job's shards going back to the checkpoint all of them hold): then into a new
 * shard, which replaces the router's (dcps_router_shard) only once restored;
 * the old one is destroyed. With one restored (returns 1, its path in path) the router
 * records its version (updates a worker shows beyond it are lost) and its
 * file's time as the newest good checkpoint's, and a job that had started
 * starts again as at INIT: workers not heard yet are expected from now.
 * Returns what dcps_checkpoint_restore returns, with err. */
int dcps_router_restore(dcps_router_t *r, bool any, uint64_t version, char *path, size_t pathlen,
                        char *err, size_t errlen);

/* The shard the router serves (another after a restore into a shard that had
 * served: dcps_router_restore). */
dcps_shard_t *dcps_router_shard(const dcps_router_t *r);

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
    uint64_t rounds;     /* sync: rounds closed by this process */
    uint64_t digest;     /* sync: of those rounds' numbers and members (rounds.h) */
    int in_barrier;      /* workers whose BARRIER waits for an answer */
} dcps_router_stats_t;

dcps_router_stats_t dcps_router_stats(const dcps_router_t *r);

/* The consistency model, read-only (tests, the fuzzer's invariants): borrowed
 * until the router's next call. */
const dcps_consistency_t *dcps_router_consistency(const dcps_router_t *r);

/* In process (tests, the fuzzer): what dcps_router_restore does with a
 * checkpoint's consistency model, from the words dcps_consistency_save wrote
 * and without a file: loads them into a router that served nothing yet and, if
 * the shard is initialised, starts the job again as at INIT. It records no
 * checkpoint (no time, no restored version). */
void dcps_router_load(dcps_router_t *r, const uint64_t *words);

#endif
