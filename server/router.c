/* dcps — the shard daemon's message handling; see router.h. */
#include "server/router.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/schedule.h"
#include "proto/frame.h"
#include "proto/quant.h"
#include "server/bridge.h"
#include "server/checkpoint.h"
#include "server/loglimit.h"
#include "server/parts.h"
#include "server/rounds.h"
#include "server/session.h"
#include "server/snapshot.h"

#define ROUTING_ID_MAX 256

/* A routing id of the ROUTER socket. */
typedef struct {
    uint8_t b[ROUTING_ID_MAX];
    size_t len;
} route_t;

/* A pull as received: what the worker holds and what it asks for. */
typedef struct {
    uint64_t seq;
    uint64_t step; /* the step it will compute */
    bool holds;    /* flag DELTA: it holds the parameters tagged `held` */
    uint64_t held;
    uint64_t want; /* the most entries of a delta; 0: the job's pull density */
    bool exact;    /* flag EXACT: it wants w itself */
    uint32_t parts; /* a dense reply in this many parts (docs/protocol.md, 17); 0: whole */
} pull_req_t;

/* Where to answer a rank's request that waits (a pull for its step, a
 * barrier): routing, not session state (server/session.h), dropped when its
 * session is retired and never saved. */
typedef struct {
    route_t to;        /* the socket of its waiting request */
    bool in_barrier;   /* waiting in the current barrier */
    bool pulling;      /* a PULL waits for its step to start */
    uint64_t wait_seq; /* seq of the waiting request */
    pull_req_t pull;   /* the last pull */
    uint64_t caught;   /* seq of its first pull from a restored shard: what it sent
                          before comes from behind (from_behind); 0 in a new session */
} wait_t;

struct dcps_router {
    const dcps_config_t *cfg;
    dcps_shard_t *shard;
    void *sock;
    uv_loop_t *loop;
    dcps_bridge_t bridge;
    uv_timer_t tick;  /* every heartbeat_ms: dead workers, keepalives */
    double last_tick; /* ms, when it last ran */
    dcps_consistency_t cons;
    wait_t *waits;         /* one per rank */
    bool *counted;         /* one per rank: BUFFERS' scratch, whose values count in a mean */
    uint64_t barrier_step; /* valid while barrier_waiting > 0 */
    int barrier_waiting;
    bool *passed;          /* per rank: in the last barrier released */
    bool released;         /* a barrier was released: released_step, at released_version */
    uint64_t released_step, released_version;
    uint64_t messages, heartbeats, bytes_in, bytes_out;
    uint64_t errors[DCPS_ERROR_SLOTS]; /* by −code; every bad message */
    dcps_loglimit_t badlog;            /* the lines about them: at most a few per peer and 10 s */
    /* Checkpoints of the shard and cons (dcps_router_save, dcps_router_restore). */
    uint64_t checkpoint_failures;
    int64_t checkpoint_time;    /* Unix seconds of the newest good one; 0: none */
    int64_t started;            /* Unix seconds the router started */
    uint64_t restored_version;  /* the version restored from a checkpoint, or 0 */
    uint64_t lost_logged;       /* the most lost updates logged so far */
    const dcps_auth_t *auth;    /* [security] curve: the worker keys' ranks; else NULL */
    dcps_latency_t apply_push;  /* each push applied (async, ssp) or added to the round (sync) */
    dcps_latency_t apply_round; /* sync: each round's mean applied */
    dcps_router_send_fn *send;  /* where every reply goes (router.h) */
    double clock_ms;            /* the time in ms when there is no loop; the caller moves it */
    /* Sync mode with several shards (server/rounds.h): shard 0 leads, the
     * others follow it over a link of their own. */
    int role;                 /* enum role */
    dcps_rounds_t rounds;     /* the leader's view of the followers */
    route_t *follower;        /* leader: per shard, where its reports come from */
    void *peer;               /* follower: a DEALER connected to shard 0 */
    dcps_bridge_t peer_bridge;
    bool *members;            /* per rank: scratch for a round's members */
    uint32_t *ranks;          /* per rank: scratch for a ROUND's RANKS frame */
    double lr;                /* the lr base in force: [optimizer] lr, or the leader's */
    bool checkpoint_due;      /* leader: checkpoint after the next round it closes */
    dcps_router_checkpoint_fn *checkpoint; /* writes one (dcps_router_on_checkpoint) */
    void *checkpoint_data;
    uint64_t rounds_applied;  /* sync: rounds closed here */
    uint64_t digest;          /* of every round closed here: number and members */
    double waiting_logged;    /* leader: when it last said which shard a round waits for */
    /* A restart of a sync job's shards resumes at a round all of them hold. */
    bool settled;             /* restored (or fresh), serving workers */
    bool loaded;              /* not serving: restored at generation, waiting for the word
                                 to serve (a follower) or for every follower (the leader) */
    uint64_t generation;      /* the leader's restore decision this shard carried out */
    double unserved_since;    /* when it stopped serving workers */
    size_t ckpt_count;        /* until then: its checkpoints */
    uint64_t ckpt_newest;     /* the newest one's version (then: the newest it wrote) */
    uint64_t ckpt_common;     /* the newest version every shard holds: never pruned */
    dcps_router_restore_fn *restore_fn; /* restores one (dcps_router_defer_restore) */
    void *restore_data;
    bool cut_fresh;           /* leader: its decision: start fresh, or restore version cut */
    uint64_t cut;
    double unsettled_logged;  /* when it last said why it does not resume yet */
    double restore_failed;    /* when its restore last failed */
    float *decoded;           /* a push's shorter values, decoded (push_payload) */
    size_t decoded_cap;
};

enum role { ALONE, LEADER, FOLLOWER };

/* The shard as it is now (a copy: dcps_shard_stats). */
static dcps_shard_stats_t shard_now(const dcps_router_t *r)
{
    return dcps_shard_stats(r->shard);
}

/* A handler answers the request itself and returns 0, or returns a negative code
 * with a sentence in why, and the router answers ERROR. */
typedef int (*handler_fn)(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m,
                          char *why, size_t whylen);

/* The default send function: the ROUTER socket, never blocking. */
static int send_zmq(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *reply,
                    zmq_free_fn *ffn, void *hint)
{
    return dcps_frames_send(r->sock, id, reply, ffn, hint, ZMQ_DONTWAIT);
}

/* Sends reply; with ffn, its payload without a copy (dcps_router_send_fn). */
static void send_reply(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *reply,
                       zmq_free_fn *ffn, void *hint)
{
    int n = r->send(r, id, reply, ffn, hint);
    if (n < 0) {
        DCPS_DEBUG("%s to rank %u not sent: %s", dcps_msg_type_name(reply->type), reply->rank,
                   zmq_strerror(errno));
        return;
    }
    r->bytes_out += (uint64_t)n;
}

static void send_ack(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m, uint32_t type,
                     uint32_t flags)
{
    dcps_msg_t reply;
    dcps_msg_reply(&reply, m, type);
    const dcps_shard_stats_t s = shard_now(r);
    reply.shard = (uint32_t)s.index;
    reply.param_version = s.version;
    reply.flags = flags;
    send_reply(r, id, &reply, NULL, NULL);
}

static double now_ms(const dcps_router_t *r)
{
    return r->loop ? (double)uv_now(r->loop) : r->clock_ms;
}

/* Records one update that took ns nanoseconds since `since` (see dcps_latency_t). */
static void timed(dcps_latency_t *l, uint64_t since)
{
    uint64_t ns = dcps_now_ns() - since;
    int b = 0;
    while (b < DCPS_LATENCY_BUCKETS - 1 && ns > (1000ull << b))
        b++;
    l->hist[b]++;
    l->count++;
    l->sum_ns += ns;
}

static int route_set(route_t *a, const dcps_buf_t *id, char *why, size_t whylen)
{
    if (id->len > sizeof a->b) {
        snprintf(why, whylen, "routing id of %zu bytes", id->len);
        return DCPS_E_HEADER;
    }
    memcpy(a->b, id->data, id->len);
    a->len = id->len;
    return 0;
}

/* Answers a request that waited (a pull or a barrier): reply's other fields are
 * set by the caller. A waiting request is of the rank's session (a retired
 * session's waits are dropped), which the reply names as every reply does.
 * hold: a hold on the buffer of the reply's payload (dcps_shard_share), which
 * is then sent without a copy, or NULL. */
static void send_to(dcps_router_t *r, const route_t *to, uint32_t rank, uint64_t seq, uint32_t type,
                    dcps_msg_t *reply, void *hold)
{
    reply->type = type;
    reply->job_id = r->cfg->job_id;
    reply->rank = rank;
    reply->seq = seq;
    const dcps_shard_stats_t s = shard_now(r);
    reply->session = dcps_shard_session(r->shard, rank)->id;
    reply->shard = (uint32_t)s.index;
    reply->param_version = s.version;
    send_reply(r, &(dcps_buf_t){to->b, to->len}, reply, hold ? dcps_snapshot_release : NULL,
               hold);
}

/* Answers a dense pull in q->parts parts (at most one per parameter): part i
 * covers [lo + ⌊i·n/parts⌋, lo + ⌊(i+1)·n/parts⌋), sent in order, each a
 * PULL_REPLY of its own with reply's fields and its slice of values (w's
 * buffer itself where dcps_shard_share allows, one hold per part). */
static void send_parts(dcps_router_t *r, const route_t *to, uint32_t rank, const pull_req_t *q,
                       dcps_msg_t *reply, const float *values, uint64_t n)
{
    const uint32_t parts = q->parts < n ? q->parts : (uint32_t)n;
    const uint64_t lo = reply->range_lo;
    reply->has |= DCPS_HAS_PART;
    reply->parts = parts;
    reply->nframes = 1;
    for (uint32_t i = 0; i < parts; i++) {
        const uint64_t a = n * i / parts, b = n * (i + 1) / parts;
        void *hold = dcps_shard_share(r->shard, values);
        reply->part = i;
        reply->part_lo = lo + a;
        reply->part_hi = lo + b;
        reply->frame[0] = (dcps_frame_desc_t){DCPS_FRAME_DENSE, DCPS_DTYPE_F32, b - a};
        reply->payload[0] = (dcps_buf_t){values + a, (b - a) * sizeof *values};
        send_to(r, to, rank, q->seq, DCPS_MSG_PULL_REPLY, reply, hold);
    }
}

/* Answers a pull from rank (see dcps_shard_pull): dense, or a delta to add to
 * what it holds; `back`: flagged STALE with the open round, where the rank
 * goes back to (sent_back). */
static void send_params(dcps_router_t *r, const route_t *to, uint32_t rank, const pull_req_t *q,
                        bool back)
{
    dcps_shard_t *s = r->shard;
    const dcps_shard_stats_t st = dcps_shard_stats(s);
    dcps_pull_t p;
    dcps_msg_t reply = {0};
    if (back) {
        reply.flags = DCPS_FLAG_STALE;
        reply.step = r->cons.round;
    }
    dcps_shard_pull(s, rank, q->holds, q->held, q->want, q->exact, &p);
    reply.range_lo = st.range.lo;
    reply.range_hi = st.range.hi;
    /* The lr of the shard's next update: t is the version the reply names, and
     * the base is lr since the last reload (docs/protocol.md, 7.5). Sent also
     * when it is 0 (a schedule at min_lr 0), so a client tells 0 from absent. */
    reply.lr = dcps_schedule_lr(&r->cfg->sched, r->lr, st.version);
    reply.has |= DCPS_HAS_LR;
    /* w's buffer itself, held until ZeroMQ has sent it (no update writes it
     * meanwhile); a mirror, a delta, or w when replies hold the reply buffers
     * already, copied. */
    if (p.dense && !p.encoded && q->parts > 1) { /* shorter values go whole */
        send_parts(r, to, rank, q, &reply, p.values, st.n);
        return;
    }
    void *hold = p.dense && !p.encoded ? dcps_shard_share(s, p.values) : NULL;
    if (p.encoded) { /* [compression] values: the values as sent (copied) */
        int f = p.dense ? 0 : 1;
        reply.nframes = f + 1;
        reply.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_INDICES, DCPS_DTYPE_U32, p.k};
        reply.payload[0] = (dcps_buf_t){p.idx, p.k * sizeof *p.idx};
        reply.frame[f] = (dcps_frame_desc_t){f ? DCPS_FRAME_VALUES : DCPS_FRAME_DENSE, p.dtype, p.k};
        reply.block[f] = p.block;
        reply.payload[f] = (dcps_buf_t){p.encoded, p.bytes};
    } else if (p.dense) {
        reply.nframes = 1;
        reply.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_DENSE, DCPS_DTYPE_F32, st.n};
        reply.payload[0] = (dcps_buf_t){p.values, st.n * sizeof *p.values};
    } else {
        reply.nframes = 2;
        reply.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_INDICES, DCPS_DTYPE_U32, p.k};
        reply.frame[1] = (dcps_frame_desc_t){DCPS_FRAME_VALUES, DCPS_DTYPE_F32, p.k};
        reply.payload[0] = (dcps_buf_t){p.idx, p.k * sizeof *p.idx};
        reply.payload[1] = (dcps_buf_t){p.values, p.k * sizeof *p.values};
    }
    send_to(r, to, rank, q->seq, DCPS_MSG_PULL_REPLY, &reply, hold);
}

/* Answers the waiting pulls whose step may start now. */
static void serve_pulls(dcps_router_t *r)
{
    for (uint32_t i = 0; i < (uint32_t)r->cfg->workers; i++) {
        wait_t *p = &r->waits[i];
        if (p->pulling && dcps_consistency_may_start(&r->cons, i, p->pull.step)) {
            p->pulling = false;
            send_params(r, &p->to, i, &p->pull, false);
        }
    }
}

/* Releases the barrier once every live worker has arrived. */
static void barrier_check(dcps_router_t *r)
{
    if (r->barrier_waiting == 0)
        return;
    for (uint32_t i = 0; i < (uint32_t)r->cfg->workers; i++)
        if (dcps_consistency_live(&r->cons, i) && !r->waits[i].in_barrier)
            return;
    /* A rank that passes the barrier again when the others had passed it
     * without it, and the parameters moved since, learns so (flag STALE). */
    bool again = r->released && r->barrier_step == r->released_step;
    bool moved = shard_now(r).version != r->released_version;
    for (uint32_t i = 0; i < (uint32_t)r->cfg->workers; i++) {
        wait_t *p = &r->waits[i];
        if (!again)
            r->passed[i] = p->in_barrier;
        if (!p->in_barrier)
            continue;
        dcps_msg_t reply = {.step = r->barrier_step,
                            .flags = again && moved && !r->passed[i] ? DCPS_FLAG_STALE : 0};
        send_to(r, &p->to, i, p->wait_seq, DCPS_MSG_BARRIER, &reply, NULL);
        p->in_barrier = false;
    }
    if (!again) {
        r->released = true;
        r->released_step = r->barrier_step;
        r->released_version = shard_now(r).version;
    }
    DCPS_DEBUG("barrier %llu released", (unsigned long long)r->barrier_step);
    r->barrier_waiting = 0;
}

/* Closes the open sync round with members (per rank): a push held here of a
 * rank that is not a member is taken back out of the sum first (only a leader's
 * or a follower's: they keep the pushes), then the members' mean is applied. */
static void close_round(dcps_router_t *r, const bool *members)
{
    const uint64_t round = r->cons.round;
    int pushes = 0;
    for (uint32_t i = 0; i < (uint32_t)r->cfg->workers; i++) {
        bool held = r->cons.m[i].contributed;
        if (held && !members[i] && dcps_shard_round_remove(r->shard, i))
            DCPS_NOTICE("round %llu: rank %u's push is taken back out: not every shard has "
                        "it and rank %u is not counted (shard 0's decision)",
                        (unsigned long long)round, i, i);
        else if (!held && !members[i] && dcps_shard_round_remove(r->shard, i)) {
            DCPS_NOTICE("round %llu: rank %u's push in parts is taken back out: the round "
                        "closed before all its parts came",
                        (unsigned long long)round, i);
            dcps_parts_drop_open(dcps_shard_parts(r->shard, i));
        } else if (!held && members[i])
            DCPS_WARN("round %llu: rank %u's push is not here (lost with this shard's "
                      "previous process); the round's mean goes without it on this shard",
                      (unsigned long long)round, i);
        pushes += held && members[i];
    }
    /* A round of ranks whose pushes were all lost with a restarted shard's
     * previous process holds nothing to apply. */
    if (pushes > 0) {
        uint64_t t0 = dcps_now_ns();
        if (dcps_shard_apply_round(r->shard, pushes) == 0)
            timed(&r->apply_round, t0);
        else
            DCPS_ERR("round %llu (%d pushes) not applied, the version stays %llu: %s",
                     (unsigned long long)round, pushes,
                     (unsigned long long)shard_now(r).version, dcps_shard_why(r->shard));
    } else {
        dcps_shard_clear_round(r->shard);
    }
    dcps_rounds_digest(&r->digest, round, members, r->cfg->workers, r->lr);
    r->rounds_applied++;
    dcps_consistency_close_round(&r->cons);
}

static void lead(dcps_router_t *r);

/* Closes the open sync round if it may close: alone, when every counted rank
 * has pushed for it; the leader, by its rule (server/rounds.h); a follower
 * never here, only on the leader's word. */
static void close_ready_round(dcps_router_t *r)
{
    if (r->role == LEADER) {
        lead(r);
    } else if (r->role == ALONE && dcps_consistency_round_full(&r->cons)) {
        for (int i = 0; i < r->cfg->workers; i++)
            r->members[i] = r->cons.m[i].contributed;
        close_round(r, r->members);
    }
}

/* After any change of membership or clocks: closes the sync round if it may
 * close, then answers what may go on. */
static void progress(dcps_router_t *r)
{
    close_ready_round(r);
    serve_pulls(r);
    barrier_check(r);
}

/* Forgets what rank was waiting for (it left or is dead). */
static void drop_waits(dcps_router_t *r, uint32_t rank)
{
    wait_t *p = &r->waits[rank];
    p->pulling = false;
    if (p->in_barrier) {
        p->in_barrier = false;
        r->barrier_waiting--;
    }
}

static void heard(dcps_router_t *r, uint32_t rank)
{
    const dcps_member_t *m = &r->cons.m[rank];
    double silent = now_ms(r) - m->last_seen;
    if (dcps_consistency_heard(&r->cons, rank, now_ms(r)))
        DCPS_NOTICE("worker %u is back after %.0f ms of silence; admitted again", rank, silent);
}

/* --- sync rounds that every shard agrees on (server/rounds.h) ----------------------- */

/* A ROUND message of this shard for `round`: the ranks set in `set` as its
 * RANKS frame (in r->ranks), this shard's version, the lr base in force and the
 * restore decision it carried out. */
static void round_msg(dcps_router_t *r, dcps_msg_t *m, uint64_t round, const bool *set)
{
    size_t k = 0;
    for (uint32_t i = 0; i < (uint32_t)r->cfg->workers; i++)
        if (set[i])
            r->ranks[k++] = i;
    *m = (dcps_msg_t){.type = DCPS_MSG_ROUND, .job_id = r->cfg->job_id,
                      .shard = (uint32_t)shard_now(r).index, .param_version = shard_now(r).version,
                      .step = round, .lr = r->lr, .generation = r->generation,
                      .has = DCPS_HAS_STEP | DCPS_HAS_LR, .nframes = 1};
    m->frame[0] = (dcps_frame_desc_t){DCPS_FRAME_RANKS, DCPS_DTYPE_U32, k};
    m->payload[0] = (dcps_buf_t){r->ranks, k * sizeof *r->ranks};
}

/* A ROUND's RANKS frame as a set (r->members). */
static int ranks_of(dcps_router_t *r, const dcps_msg_t *m, char *why, size_t whylen)
{
    if (m->nframes != 1 || m->frame[0].kind != DCPS_FRAME_RANKS ||
        m->frame[0].dtype != DCPS_DTYPE_U32) {
        snprintf(why, whylen, "ROUND carries one RANKS frame of uint32");
        return DCPS_E_FRAMECOUNT;
    }
    memset(r->members, 0, (size_t)r->cfg->workers * sizeof *r->members);
    for (uint64_t j = 0; j < m->frame[0].count; j++) {
        uint32_t rank;
        memcpy(&rank, (const uint8_t *)m->payload[0].data + j * sizeof rank, sizeof rank);
        if (rank >= (uint32_t)r->cfg->workers) {
            snprintf(why, whylen, "ROUND names rank %u, the job has ranks 0 to %d", rank,
                     r->cfg->workers - 1);
            return DCPS_E_RANK;
        }
        r->members[rank] = true;
    }
    return 0;
}

/* A follower tells the leader its open round and whose pushes it holds. */
static void report(dcps_router_t *r)
{
    dcps_msg_t m;
    if (!r->peer)
        return;
    for (int i = 0; i < r->cfg->workers; i++)
        r->members[i] = r->cons.m[i].contributed;
    round_msg(r, &m, r->cons.round, r->members);
    if (!r->settled) { /* an offer: how many checkpoints, the newest's version */
        m.flags = DCPS_FLAG_RESTORE;
        m.step = r->ckpt_count;
        m.param_version = r->ckpt_newest;
        m.generation = r->loaded ? r->generation : 0; /* restored as told: waits to serve */
    } else {
        m.checkpoint = r->ckpt_newest;
    }
    if (dcps_frames_send(r->peer, NULL, &m, NULL, NULL, ZMQ_DONTWAIT) < 0)
        DCPS_DEBUG("ROUND to shard 0 not sent: %s", zmq_strerror(errno));
}

/* The leader sends m to follower s, where its last report came from. */
static void to_follower(dcps_router_t *r, int s, const dcps_msg_t *m)
{
    const route_t *to = &r->follower[s];
    send_reply(r, &(dcps_buf_t){to->b, to->len}, m, NULL, NULL);
}

/* The leader tells follower s the last round it closed (again, if s has not
 * applied it yet). */
static void send_close(dcps_router_t *r, int s)
{
    dcps_msg_t m;
    const dcps_rounds_t *t = &r->rounds;
    round_msg(r, &m, t->closed, t->members);
    m.lr = t->lr;
    m.flags = t->checkpoint ? DCPS_FLAG_CHECKPOINT : 0;
    m.checkpoint = r->ckpt_common = dcps_rounds_common(t, r->ckpt_newest);
    to_follower(r, s, &m);
}

/* The leader closes its open round when its rule says so, and tells every
 * follower. */
static void lead(dcps_router_t *r)
{
    const uint64_t round = r->cons.round;
    if (!dcps_rounds_decide(&r->rounds, &r->cons, r->members))
        return;
    bool checkpoint = r->checkpoint_due;
    close_round(r, r->members);
    dcps_rounds_closed(&r->rounds, round, r->members, r->lr, checkpoint);
    for (int s = 1; s < r->rounds.shards; s++)
        if (r->rounds.reported[s])
            send_close(r, s);
    if (checkpoint) {
        r->checkpoint_due = false;
        if (r->checkpoint)
            r->checkpoint(r->checkpoint_data);
    }
}

/* The leader was restored from an older checkpoint than a follower's round:
 * the rounds between are lost on the leader's part of the model. */
static void skip_to(dcps_router_t *r, uint64_t round, const char *who)
{
    DCPS_NOTICE("%s is at round %llu, this shard at round %llu (restored from an older "
                "checkpoint): rounds %llu to %llu are lost on this shard's part of the model",
                who, (unsigned long long)round, (unsigned long long)r->cons.round,
                (unsigned long long)r->cons.round, (unsigned long long)round - 1);
    dcps_shard_clear_round(r->shard);
    dcps_consistency_open_round(&r->cons, round);
}

static void restarted(dcps_router_t *r);

/* Forgets what every rank waits for and what the open round holds: the shard
 * was restored (at start, or it goes back with the others to a checkpoint all
 * of them hold), and its rounds count from there (the digest too, so that the
 * shards' digests compare the rounds since). */
static void reloaded(dcps_router_t *r)
{
    for (uint32_t i = 0; i < (uint32_t)r->cfg->workers; i++) {
        drop_waits(r, i);
        /* Parts of the open round that came are dropped with it (below), and
         * their retries answered STALE again, which sends the rank back. */
        dcps_parts_drop_open(dcps_shard_parts(r->shard, i));
    }
    /* A checkpoint may have been written in the middle of the open round (the
     * one SIGTERM writes), the other shards' at its start: every shard starts
     * it again empty, and a rank whose push it held is sent back to it
     * (sent_back) when it asks for a later step. */
    dcps_shard_clear_round(r->shard);
    dcps_consistency_open_round(&r->cons, r->cons.round);
    r->barrier_waiting = 0;
    r->rounds.closed_any = false;
    r->digest = 0;
    r->rounds_applied = 0;
    r->lost_logged = 0;
}

/* Restores this shard's checkpoint of `version` through the daemon (also into
 * a shard that serves already: the daemon swaps in a new one), or starts it
 * fresh (fresh); says so and stays unsettled if it cannot (and tries again 10
 * s later at the earliest). Returns whether it restored. */
static bool load(dcps_router_t *r, bool fresh, uint64_t version)
{
    if (!fresh && now_ms(r) - r->restore_failed < 10000)
        return false; /* it failed less than 10 s ago: not again yet */
    int rc = fresh ? 0 : r->restore_fn(r->restore_data, false, version);
    if (rc <= 0 && !fresh) {
        r->restore_failed = now_ms(r);
        if (rc == 0)
            DCPS_ERR("this shard holds no checkpoint of version %llu, the newest one every "
                     "shard of this sync job holds: it cannot resume with them (move the "
                     "checkpoints out of every shard's checkpoint_dir to start fresh)",
                     (unsigned long long)version);
        return false;
    }
    /* Checkpoints of later versions are of rounds the job goes back on: this
     * shard's newest of the rounds it goes on with is that version. */
    if (!fresh)
        r->ckpt_newest = version;
    reloaded(r);
    return true;
}

/* Stops serving workers (their requests wait unanswered until it serves again). */
static void unserve(dcps_router_t *r)
{
    if (r->settled)
        r->unserved_since = now_ms(r);
    r->settled = r->loaded = false;
}

/* Serves workers again: the time it did not is nobody's silence. */
static void serve(dcps_router_t *r)
{
    r->settled = true;
    r->loaded = false;
    restarted(r);
    if (r->unserved_since > 0)
        dcps_consistency_paused(&r->cons, now_ms(r) - r->unserved_since);
    r->unserved_since = 0;
}

/* A ROUND with RESTORE from the leader to follower s: the decision in force
 * (start fresh: step 0; restore version cut: step 1), or the word to serve
 * (step 2), with its generation. */
static void send_restore(dcps_router_t *r, int s, int step)
{
    dcps_msg_t m;
    memset(r->members, 0, (size_t)r->cfg->workers * sizeof *r->members);
    round_msg(r, &m, (uint64_t)step, r->members); /* no ranks */
    m.flags = DCPS_FLAG_RESTORE;
    m.param_version = r->cut;
    m.generation = r->generation;
    to_follower(r, s, &m);
}

/* The leader's decision in force to follower s, or, once the leader serves and
 * s has carried it out (it said so last), the word to serve. */
static void send_decision(dcps_router_t *r, int s)
{
    bool done = r->rounds.generation[s] == r->generation;
    send_restore(r, s, r->settled && done ? 2 : r->cut_fresh ? 0 : 1);
}

/* A restore decision's number: above every one made before, by this process
 * or another (the followers say theirs). */
static uint64_t new_generation(const dcps_router_t *r)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t g = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    if (g <= r->generation)
        g = r->generation + 1;
    for (int s = 1; s < r->rounds.shards; s++)
        if (g <= r->rounds.generation[s])
            g = r->rounds.generation[s] + 1;
    return g;
}

/* The leader, not serving, decides where the shards resume once every
 * follower has reported (dcps_rounds_cut): at start, and when a shard
 * restarted alone while the others ran, every shard goes to its checkpoint of
 * the newest version all of them hold. It restores itself there, tells the
 * followers, and serves once every follower says it has restored too (then
 * tells them to serve): no worker meets shards of two decisions. While it
 * cannot decide, it says why every 10 s. */
static void lead_restore(dcps_router_t *r)
{
    uint64_t cut;
    int shard;
    if (r->loaded) {
        if (!dcps_rounds_restored(&r->rounds, r->generation))
            return;
        serve(r);
        for (int s = 1; s < r->rounds.shards; s++)
            send_decision(r, s);
        return;
    }
    enum dcps_cut c = dcps_rounds_cut(&r->rounds, r->ckpt_count, r->ckpt_newest, &cut, &shard);
    bool now = now_ms(r) - r->unsettled_logged >= 10000;
    if ((c == DCPS_CUT_NONE || c == DCPS_CUT_RUNNING) && now) {
        r->unsettled_logged = now_ms(r);
        if (c == DCPS_CUT_NONE)
            DCPS_ERR("shard %d holds no checkpoint while other shards of this sync job do: "
                     "the job cannot resume at a round every shard holds, and waits (move the "
                     "checkpoints out of every shard's checkpoint_dir to start it fresh)",
                     shard);
        else
            DCPS_ERR("no shard of this sync job holds a checkpoint while shard %d runs: the "
                     "job cannot go back to a round every shard holds, and waits (restart "
                     "every shard to start it fresh)",
                     shard);
    }
    if (c != DCPS_CUT_FRESH && c != DCPS_CUT_AT)
        return;
    if (!load(r, c == DCPS_CUT_FRESH, cut))
        return;
    r->loaded = true;
    r->generation = new_generation(r);
    r->cut_fresh = c == DCPS_CUT_FRESH;
    r->cut = c == DCPS_CUT_AT ? cut : 0;
    if (c == DCPS_CUT_AT)
        DCPS_NOTICE("every shard resumes at version %llu, the newest checkpoint all of them "
                    "hold", (unsigned long long)cut);
    for (int s = 1; s < r->rounds.shards; s++)
        send_decision(r, s);
}

/* The leader, serving, hears that follower s restarted (an offer of no
 * decision it made): every shard goes back to the newest checkpoint all of
 * them hold, so that no part of the model is at another round than the
 * others (docs/algorithms.md, "Restarts"). */
static void go_back(dcps_router_t *r, int s)
{
    DCPS_NOTICE("shard %d restarted while the job ran (at round %llu): every shard goes back "
                "to the newest checkpoint all of them hold",
                s, (unsigned long long)r->cons.round);
    unserve(r);
    lead_restore(r);
}

/* The leader hears from follower m->shard: its open round and what it holds. */
static int on_round(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m,
                    const char *user_id, char *why, size_t whylen)
{
    char who[32];
    if (r->role != LEADER) {
        snprintf(why, whylen, "ROUND goes to shard 0 of a sync job with several shards");
        return DCPS_E_MSGTYPE;
    }
    if (r->auth && !dcps_auth_is_peer(r->auth, user_id)) {
        snprintf(why, whylen, "ROUND from a CURVE key that is not the shards' own");
        return DCPS_E_AUTH;
    }
    if (m->shard == 0 || m->shard >= (uint32_t)r->rounds.shards) {
        snprintf(why, whylen, "ROUND from shard %u, the followers are shards 1 to %d", m->shard,
                 r->rounds.shards - 1);
        return DCPS_E_FIELD;
    }
    int rc = ranks_of(r, m, why, whylen);
    if (rc == 0)
        rc = route_set(&r->follower[m->shard], id, why, whylen);
    if (rc != 0)
        return rc;
    const int s = (int)m->shard;
    if (m->flags & DCPS_FLAG_RESTORE) { /* it does not serve: an offer */
        dcps_rounds_offer(&r->rounds, s, m->step, m->param_version, m->generation, now_ms(r));
        if (r->generation && m->generation == r->generation) { /* restored as told */
            if (r->settled)
                send_decision(r, s); /* the word to serve, again */
            else
                lead_restore(r);
        } else if (r->settled) {
            go_back(r, s); /* it restarted alone */
        } else if (r->loaded) {
            send_decision(r, s); /* it missed the decision, or restarted since */
        } else {
            lead_restore(r);
        }
        return 0;
    }
    dcps_rounds_report(&r->rounds, s, m->step, r->members, m->checkpoint, m->generation,
                       now_ms(r));
    if (!r->settled) {
        if (r->loaded) /* it runs on an older decision: it missed this one */
            send_decision(r, s);
        else
            lead_restore(r);
        return 0;
    }
    if (m->generation != r->generation)
        return 0; /* sent before it carried out the decision in force (it has: see
                     lead_restore), on its way meanwhile */
    snprintf(who, sizeof who, "shard %u", m->shard);
    if (m->step > r->cons.round)
        skip_to(r, m->step, who);
    else if (m->step < r->cons.round && r->rounds.closed_any && m->step == r->rounds.closed)
        send_close(r, s);
    progress(r);
    return 0;
}

/* A follower hears from the leader: round m->step closed with the members in
 * RANKS, at the lr base m->lr; it applies the same round here. */
static int follow(dcps_router_t *r, const dcps_msg_t *m, char *why, size_t whylen)
{
    if (m->type == DCPS_MSG_ERROR) {
        snprintf(why, whylen, "%s", m->error_text);
        return -(int)m->error_code;
    }
    if (m->type != DCPS_MSG_ROUND || m->shard != 0) {
        snprintf(why, whylen, "%s from shard %u, expected ROUND from shard 0",
                 dcps_msg_type_name(m->type), m->shard);
        return DCPS_E_MSGTYPE;
    }
    int rc = ranks_of(r, m, why, whylen);
    if (rc != 0)
        return rc;
    if (m->flags & DCPS_FLAG_RESTORE) {
        if (m->step == 2) { /* the word to serve: every shard restored */
            if (r->loaded && m->generation == r->generation)
                serve(r);
        } else if (m->generation != r->generation || !(r->loaded || r->settled)) {
            unserve(r); /* a new decision: restore (again, if it serves) */
            if (load(r, m->step == 0, m->param_version)) {
                r->loaded = true;
                r->generation = m->generation;
            }
        }
        report(r);
        return 0;
    }
    r->ckpt_common = m->checkpoint;
    if (!r->settled || m->generation != r->generation || m->step < r->cons.round ||
        !shard_now(r).initialized)
        return 0; /* not serving, of another decision, or applied already */
    if (m->step > r->cons.round)
        skip_to(r, m->step, "shard 0");
    if (m->lr != r->lr) {
        r->lr = m->lr;
        dcps_shard_set_lr(r->shard, m->lr);
    }
    close_round(r, r->members);
    uint64_t version = shard_now(r).version;
    if (version != m->param_version)
        DCPS_WARN("after round %llu this shard is at version %llu, shard 0 at %llu",
                  (unsigned long long)m->step, (unsigned long long)version,
                  (unsigned long long)m->param_version);
    if ((m->flags & DCPS_FLAG_CHECKPOINT) && r->checkpoint)
        r->checkpoint(r->checkpoint_data);
    report(r);
    progress(r); /* a follower closes nothing there: it answers what may go on */
    return 0;
}

/* The follower's link: a message from the leader. */
static void on_peer(dcps_bridge_t *b)
{
    dcps_router_t *r = b->data;
    dcps_frames_t f;
    dcps_msg_t m;
    char why[DCPS_ERROR_TEXT_MAX] = "";
    int rc = dcps_frames_recv(r->peer, &f, ZMQ_DONTWAIT);
    if (rc <= 0)
        return;
    rc = dcps_frames_decode(&f, 0, r->cfg->job_id, &m, why, sizeof why);
    if (rc == 0)
        rc = follow(r, &m, why, sizeof why);
    if (rc != 0)
        DCPS_WARN("from shard 0: %s: %s", dcps_errname(rc), why);
    dcps_frames_close(&f);
}

/* The leader, every tick: says (every 10 s at most) which follower a round
 * that all counted workers have pushed waits for, once it is silent. */
static void leader_tick(dcps_router_t *r)
{
    double silent, now = now_ms(r);
    if (!r->settled) {
        lead_restore(r);
        return;
    }
    int s = dcps_rounds_waiting_for(&r->rounds, r->cons.round, now, &silent);
    if (s < 0 || now - r->waiting_logged < 10000 ||
        (silent >= 0 && silent < r->cfg->dead_after_ms))
        return;
    r->waiting_logged = now;
    if (silent < 0)
        DCPS_NOTICE("round %llu waits for shard %d, which has not reported to this shard yet",
                    (unsigned long long)r->cons.round, s);
    else
        DCPS_NOTICE("round %llu waits for shard %d, silent for %.0f ms",
                    (unsigned long long)r->cons.round, s, silent);
}

int dcps_router_lead(dcps_router_t *r)
{
    int rc = dcps_rounds_init(&r->rounds, r->cfg->n_shards, r->cfg->workers);
    if (rc == 0 && !(r->follower = calloc((size_t)r->cfg->n_shards, sizeof *r->follower)))
        rc = DCPS_E_NOMEM;
    if (rc == 0)
        rc = dcps_shard_keep_pushes(r->shard);
    if (rc == 0)
        r->role = LEADER;
    return rc;
}

int dcps_router_follow(dcps_router_t *r, void *peer)
{
    int rc = dcps_shard_keep_pushes(r->shard);
    if (rc != 0)
        return rc;
    r->peer = peer;
    r->role = FOLLOWER;
    if (peer && r->loop && (rc = dcps_bridge_init(r->loop, &r->peer_bridge, peer, on_peer, r)) != 0)
        r->peer = NULL;
    return rc;
}

void dcps_router_defer_restore(dcps_router_t *r, size_t count, uint64_t newest,
                               dcps_router_restore_fn *fn, void *data)
{
    r->settled = false;
    r->ckpt_count = count;
    r->ckpt_newest = newest;
    r->restore_fn = fn;
    r->restore_data = data;
    report(r); /* a follower's offer, at once (ZeroMQ queues it until connected) */
}

void dcps_router_on_checkpoint(dcps_router_t *r, dcps_router_checkpoint_fn *fn, void *data)
{
    r->checkpoint = fn;
    r->checkpoint_data = data;
}

bool dcps_router_checkpoint_by_round(dcps_router_t *r)
{
    if (r->role == LEADER)
        r->checkpoint_due = true;
    return r->role != ALONE;
}

void dcps_router_set_lr(dcps_router_t *r, double lr)
{
    if (r->role == FOLLOWER) {
        if (lr != r->lr)
            DCPS_NOTICE("lr %g: this shard takes the lr of shard 0, which leads the rounds, "
                        "with its next round", lr);
        return;
    }
    r->lr = lr;
    dcps_shard_set_lr(r->shard, lr);
}

void dcps_router_tick(dcps_router_t *r)
{
    int rank;
    /* A tick far later than its period means this loop did not run meanwhile
     * (SIGSTOP, a long checkpoint write, a paused VM): the workers' silence
     * over that time is the shard's own, and what they sent meanwhile is still
     * queued. So that time is excused, and the queue is read before anyone is
     * declared dead. */
    double late = now_ms(r) - r->last_tick - r->cfg->heartbeat_ms;
    r->last_tick = now_ms(r);
    if (late > r->cfg->heartbeat_ms) {
        DCPS_WARN("this shard did not run for %.0f ms (stopped, or its loop was blocked): "
                  "that time does not count as any worker's silence",
                  late + r->cfg->heartbeat_ms);
        dcps_consistency_paused(&r->cons, late);
    }
    if (r->sock)
        dcps_bridge_drain(&r->bridge);
    /* A shard that does not serve (it waits to restore) hears nobody: their
     * silence is not theirs (serve excuses it). */
    while (r->settled && (rank = dcps_consistency_reap(&r->cons, now_ms(r))) >= 0) {
        if (r->cons.m[rank].joined)
            DCPS_NOTICE("worker %d declared dead: silent for more than %d ms; not waiting for it",
                        rank, r->cfg->dead_after_ms);
        else
            DCPS_INFO("worker %d has not joined within %d ms; not waiting for it", rank,
                      r->cfg->dead_after_ms);
        drop_waits(r, (uint32_t)rank);
    }
    progress(r);
    if (r->role == LEADER)
        leader_tick(r);
    report(r);
    dcps_loglimit_flush(&r->badlog, now_ms(r), false);
    for (uint32_t i = 0; i < (uint32_t)r->cfg->workers; i++) {
        const wait_t *p = &r->waits[i];
        if (p->pulling || p->in_barrier) {
            dcps_msg_t ka = {.flags = DCPS_FLAG_WAITING};
            send_to(r, &p->to, i, p->wait_seq, DCPS_MSG_HEARTBEAT, &ka, NULL);
        }
    }
}

static void on_tick(uv_timer_t *t)
{
    dcps_router_tick(t->data);
}

/* [model] params = auto: an unsized shard learns the model's size from rank 0's
 * HELLO and sizes itself. The size comes from the network: it is bounded
 * (DCPS_PARAMS_AUTO_MAX) and checked against the shard map before anything is
 * allocated. Another rank's HELLO before that is answered NOTREADY, which its
 * client asks again after (worker/client.c). Returns 0 or a code with why. */
static int learn_size(dcps_router_t *r, const dcps_msg_t *m, char *why, size_t whylen)
{
    char size[192];
    if (m->rank != 0) {
        snprintf(why, whylen,
                 "the model's size is not known yet: [model] params = auto, and rank 0 has not "
                 "said HELLO to this shard");
        return DCPS_E_NOTREADY;
    }
    int rc = dcps_shard_size_auto(r->shard, r->cfg, m->n_params,
                                  ": give the count as [model] params", size, sizeof size);
    if (rc == DCPS_E_SIZE) {
        snprintf(why, whylen, "rank 0's model has %s", size);
        return rc;
    }
    if (rc != 0) {
        snprintf(why, whylen, "cannot allocate this shard for rank 0's model of %llu parameters",
                 (unsigned long long)m->n_params);
        return DCPS_E_NOMEM;
    }
    const dcps_shard_stats_t s = shard_now(r);
    DCPS_NOTICE("rank 0's model has %llu parameters: this shard serves [%llu, %llu) and holds "
                "%zu bytes",
                (unsigned long long)s.n_params, (unsigned long long)s.range.lo,
                (unsigned long long)s.range.hi, dcps_shard_memory(r->shard));
    return 0;
}

/* The group table a request carries from frame `first` on (dcps_codec_groups),
 * parsed for this shard (server/groups.h) into *g; *g stays NULL when it
 * carries none. Returns 0, or the code with why. */
static int groups_of(dcps_router_t *r, const dcps_msg_t *m, int first, dcps_groups_t **g,
                     char *why, size_t whylen)
{
    const uint32_t *ranges = NULL;
    const double *opts = NULL;
    size_t n_ranges, n_groups;
    int rc = dcps_codec_groups(m, first, &ranges, &n_ranges, &opts, &n_groups, why, whylen);
    *g = NULL;
    if (rc != 0 || (n_ranges == 0 && n_groups == 0 && m->nframes == first))
        return rc;
    const dcps_shard_stats_t s = shard_now(r);
    *g = dcps_groups_parse(ranges, n_ranges, opts, n_groups, s.n_params, s.range, &rc, why,
                           whylen);
    return rc;
}

/* A rank's group table against the job's, once the shard has the job's (rank
 * 0's INIT, or a checkpoint): a rank that gives none is not checked (it
 * trains with the job's groups, as a client without groups does). */
static int groups_match(dcps_router_t *r, const dcps_msg_t *m, int first, char *why,
                        size_t whylen)
{
    dcps_groups_t *g;
    int rc = groups_of(r, m, first, &g, why, whylen);
    if (rc == 0 && g && shard_now(r).initialized)
        rc = dcps_groups_compare(dcps_shard_groups(r->shard), g, m->rank, why, whylen);
    dcps_groups_destroy(&g);
    return rc;
}

/* What a HELLO must fit before it binds anything (docs/protocol.md 7.2, checks
 * 1 to 5): a session, this shard, the model's size, which an unsized shard
 * learns from rank 0 here, and the rank's parameter groups, if it gives any. */
static int hello_fits(dcps_router_t *r, const dcps_msg_t *m, char *why, size_t whylen)
{
    const dcps_shard_stats_t s = shard_now(r);
    int rc;
    if (m->session == 0) {
        snprintf(why, whylen,
                 "HELLO names no session: a worker opens a random nonzero 64-bit session and "
                 "names it in its HELLO and every later request");
        return DCPS_E_SESSION;
    }
    if (!(m->has & DCPS_HAS_SHARD)) { /* absent is not 0: a HELLO says which shard it expects */
        snprintf(why, whylen,
                 "HELLO names no shard: a worker names the index of the shard it expects at "
                 "this endpoint, this is shard %d",
                 s.index);
        return DCPS_E_SIZE;
    }
    if (m->shard != (uint32_t)s.index) {
        snprintf(why, whylen, "worker expected shard %u at this endpoint, this is shard %d",
                 m->shard, s.index);
        return DCPS_E_SIZE;
    }
    if (!s.n_params && (rc = learn_size(r, m, why, whylen)) != 0)
        return rc;
    uint64_t n = shard_now(r).n_params;
    if (m->n_params != n) {
        snprintf(why, whylen, "worker's model has %llu parameters, this job has %llu",
                 (unsigned long long)m->n_params, (unsigned long long)n);
        return DCPS_E_SIZE;
    }
    return groups_match(r, m, 0, why, whylen);
}

/* HELLO binds the rank to the session it names (server/session.h): the first
 * session, the same one again (a retry whose WELCOME was lost, or a worker
 * coming back), or a new one, which retires the old session once that one has
 * been silent for dead_after_ms or said BYE (a restarted worker). */
static int hello_bind(dcps_router_t *r, const dcps_msg_t *m, char *why, size_t whylen)
{
    const dcps_member_t *mb = &r->cons.m[m->rank];
    const uint64_t bound = dcps_shard_session(r->shard, m->rank)->id;
    char old[DCPS_SESSION_SHORT], new[DCPS_SESSION_SHORT];
    double silent = now_ms(r) - mb->last_seen;
    dcps_session_short(bound, old);
    dcps_session_short(m->session, new);
    if (bound != m->session && mb->joined && dcps_consistency_live(&r->cons, m->rank)) {
        snprintf(why, whylen,
                 "rank %u is already connected in session %s\u2026 (heard %.0f ms ago); another "
                 "session is admitted once that one has been silent for %d ms or said BYE",
                 m->rank, old, silent, r->cfg->dead_after_ms);
        return DCPS_E_LIVE;
    }
    if (bound != m->session) {
        if (bound)
            DCPS_NOTICE("worker %u joined in session %s\u2026, which retires session %s\u2026 "
                        "(%s %.0f ms ago)",
                        m->rank, new, old, mb->left ? "it said BYE" : "last heard", silent);
        else
            DCPS_INFO("worker %u joined (session %s\u2026)", m->rank, new);
        drop_waits(r, m->rank); /* what the old session waited for is not answered */
        r->waits[m->rank].caught = 0; /* seqs start again */
        /* Parts of an incomplete push of the old session leave the open round
         * (sync); in async and ssp they stay applied, and the new session's
         * push of that step is applied over the rest only (push_apply). */
        if (!r->cons.m[m->rank].contributed)
            dcps_shard_round_remove(r->shard, m->rank);
        dcps_parts_t *cut = dcps_shard_parts(r->shard, m->rank);
        if (r->cfg->mode != DCPS_MODE_SYNC && dcps_parts_open(cut)) {
            if (dcps_carried_take(dcps_shard_carried(r->shard, m->rank), cut))
                DCPS_NOTICE("rank %u's push of step %llu was cut after %llu of its parameters: "
                            "the new session's push of that step goes over the rest only",
                            m->rank, (unsigned long long)cut->step,
                            (unsigned long long)cut->covered);
            else
                DCPS_WARN("rank %u's push of step %llu came in parts too scattered to keep: "
                          "the new session's push of that step counts for all of it",
                          m->rank, (unsigned long long)cut->step);
        }
        dcps_parts_reset(cut);
        dcps_shard_open_session(r->shard, m->rank, m->session);
    } else if (!mb->joined) {
        DCPS_INFO("worker %u joined again (session %s\u2026)", m->rank, new);
    } else if (mb->dead) {
        DCPS_NOTICE("worker %u is back after %.0f ms of silence; admitted again", m->rank,
                    silent);
    }
    dcps_consistency_heard(&r->cons, m->rank, now_ms(r));
    dcps_consistency_join(&r->cons, m->rank);
    return 0;
}

/* Answered WELCOME: the shard's range and state, and the step to compute. */
static int on_hello(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m, char *why,
                    size_t whylen)
{
    int rc = hello_fits(r, m, why, whylen);
    if (rc != 0 || (rc = hello_bind(r, m, why, whylen)) != 0)
        return rc;
    const dcps_shard_stats_t s = shard_now(r);
    dcps_msg_t reply;
    dcps_msg_reply(&reply, m, DCPS_MSG_WELCOME);
    reply.shard = (uint32_t)s.index;
    reply.n_params = s.n_params;
    reply.range_lo = s.range.lo;
    reply.range_hi = s.range.hi;
    reply.workers = (uint32_t)r->cfg->workers;
    reply.initialized = s.initialized;
    reply.param_version = s.version;
    reply.step = dcps_consistency_next_step(&r->cons, m->rank);
    send_reply(r, id, &reply, NULL, NULL);
    return 0;
}

static int not_ready(char *why, size_t whylen)
{
    snprintf(why, whylen, "rank 0 has not initialised the parameters yet");
    return DCPS_E_NOTREADY;
}

static int on_init(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m, char *why,
                   size_t whylen)
{
    const float *w;
    int rc;
    if (m->rank != 0) {
        snprintf(why, whylen, "only rank 0 initialises parameters, not rank %u", m->rank);
        return DCPS_E_STATE;
    }
    const dcps_shard_stats_t s = shard_now(r);
    if (!s.n_params) /* unsized: nothing to initialise, and no HELLO came first */
        return not_ready(why, whylen);
    /* The DENSE frame, then the group table after it, if any. */
    dcps_msg_t values = *m;
    if (values.nframes > 1 && m->frame[1].kind == DCPS_FRAME_GROUP_RANGES)
        values.nframes = 1;
    if ((rc = dcps_codec_dense(&values, s.n, &w, why, whylen)) != 0)
        return rc;
    if (s.initialized) { /* answered DUPLICATE, its table checked as a HELLO's */
        if ((rc = groups_match(r, m, 1, why, whylen)) != 0)
            return rc;
    } else {
        dcps_groups_t *g;
        if ((rc = groups_of(r, m, 1, &g, why, whylen)) != 0)
            return rc;
        if (g && (rc = dcps_shard_set_groups(r->shard, &g, why, whylen)) != 0)
            return rc;
        if (dcps_shard_groups(r->shard))
            DCPS_INFO("rank 0's parameter groups: %u, in %zu segments of this shard's range",
                      dcps_shard_groups(r->shard)->n_groups, dcps_shard_groups(r->shard)->n_segs);
    }
    int set = dcps_shard_init(r->shard, w);
    if (set) {
        DCPS_INFO("parameters initialised by rank 0 (%zu values)", s.n);
        dcps_consistency_start(&r->cons, now_ms(r));
    }
    send_ack(r, id, m, DCPS_MSG_PUSH_ACK, set ? 0 : DCPS_FLAG_DUPLICATE);
    return 0;
}

/* Whether rank's request `seq` comes from behind this shard's restore: the rank
 * has not pulled from this process, or sent the request before its first pull
 * from it (a part of a push retried after a pull sent ahead of the push's
 * acknowledgements: docs/protocol.md 17), so that the versions and rounds it
 * names are the previous process's. */
static bool from_behind(const dcps_router_t *r, uint32_t rank, uint64_t seq)
{
    return dcps_shard_behind(r->shard, rank) || seq < r->waits[rank].caught;
}

/* A worker of a shard restored from a checkpoint names a version the previous
 * process had reached: the updates between the checkpoint and it are lost.
 * Only a rank that has not pulled from this process (dcps_shard_behind) names
 * the previous process's versions; once it has, the versions it names are this
 * process's own, which reuse the same numbers and lose nothing. Logged when a
 * worker first shows more of them than logged so far: one line per loss, and
 * one more only for a rank that had seen further. */
static void note_lost(dcps_router_t *r, uint32_t rank, uint64_t seq, uint64_t seen)
{
    if (!shard_now(r).restored || !from_behind(r, rank, seq) ||
        seen <= r->restored_version)
        return;
    uint64_t lost = seen - r->restored_version;
    if (lost <= r->lost_logged)
        return;
    r->lost_logged = lost;
    DCPS_WARN("rank %u had version %llu of the previous process: the %llu updates after the "
              "restored checkpoint (version %llu) are lost",
              rank, (unsigned long long)seen, (unsigned long long)lost,
              (unsigned long long)r->restored_version);
}

/* Whether a request of rank for a step goes back to the open round: in a sync
 * job of several shards, every shard restored the checkpoint all of them
 * hold (docs/algorithms.md, "Restarts"), and rank, which has not pulled since,
 * pushes a round at or after the open one (what it pushed before the restore
 * is gone on every shard) or pulls after it. Its push is dropped STALE and
 * its pull answered at once, flagged STALE, both with the open round: the
 * worker goes on from there. `after`: the push's step + 1, the pull's step. */
static bool sent_back(const dcps_router_t *r, uint32_t rank, uint64_t seq, uint64_t after)
{
    return r->role != ALONE && from_behind(r, rank, seq) && after > r->cons.round;
}

/* A shard restored from a checkpoint learns from a rank's requests, until that
 * rank has pulled from it, where the job went on without it (sync: the round;
 * ssp: the clock); not in a sync job of several shards, whose shards send the
 * rank back instead (sent_back). Returns whether waiting pulls may go on now. */
static bool catch_up(dcps_router_t *r, uint32_t rank, uint64_t step, bool pull)
{
    if (!dcps_shard_behind(r->shard, rank) || r->role != ALONE)
        return false;
    uint64_t round = r->cons.round;
    int pushes = r->cons.contributions;
    if (!dcps_consistency_catch_up(&r->cons, rank, step, pull))
        return false;
    if (r->cons.round != round) {
        DCPS_NOTICE("rank %u is in round %llu: round %llu of the checkpoint (%d pushes) is "
                    "dropped, later ones were lost with the previous process",
                    rank, (unsigned long long)r->cons.round, (unsigned long long)round, pushes);
        dcps_shard_clear_round(r->shard);
    }
    return true;
}

/* Answers a push that is not applied because its round closed without it (sync):
 * PUSH_ACK with flag STALE, and the open round, which the worker computes next. */
static void send_stale(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m)
{
    dcps_msg_t reply;
    dcps_msg_reply(&reply, m, DCPS_MSG_PUSH_ACK);
    const dcps_shard_stats_t s = shard_now(r);
    reply.shard = (uint32_t)s.index;
    reply.param_version = s.version;
    reply.flags = DCPS_FLAG_STALE;
    reply.step = r->cons.round;
    send_reply(r, id, &reply, NULL, NULL);
}

/* --- a push: one ordered list of checks (docs/protocol.md, section 7.4) ---------- */

/* A push on its way through push_checks below. */
typedef struct {
    const dcps_buf_t *id; /* where the answer goes */
    const dcps_msg_t *m;
    const uint32_t *idx; /* the payload: NULL (dense) or k global indices */
    const float *v;      /* n dense values or k sparse ones, borrowed from m */
    size_t k;
    bool unread;       /* dense values not checked on their own yet (values_first) */
    uint64_t based_on; /* the version it counts as computed on */
    dcps_part_t q;     /* the part it is (a push sent whole: one part) */
    int verdict;       /* enum dcps_part_verdict: what it is to the rank's latest push */
} push_t;

/* What a check of a push returns: GO_ON (0) lets the push on to the next row;
 * a negative code refuses it, with a sentence in why; a positive outcome (ACT,
 * or the check's own) asks the row's act to carry it out. An act returns
 * GO_ON, ANSWERED (the push was answered without an error) or a negative code. */
enum { GO_ON = 0, ACT = 1, ANSWERED = 2, DONE_BEFORE = 3 };

/* One row: check decides without changing anything the push should not (a
 * restored shard's catch-up aside: round below), act carries out what it
 * decided; NULL check: act always runs. values_first: a dense gradient's values
 * are read once, by the update, which refuses a non-finite result as every
 * non-finite value makes it; so they are checked on their own only before any
 * other outcome than going on (and after a refused update: update_act), and a
 * push gets the code the order of checks gives all the same. */
typedef struct {
    int (*check)(dcps_router_t *r, push_t *p, char *why, size_t whylen);
    int (*act)(dcps_router_t *r, push_t *p, int outcome, char *why, size_t whylen);
    bool values_first;
} push_check_t;

/* The values of a dense push that dcps_codec_push_unchecked left unread, checked
 * on their own (once): 0 if they are finite or were checked already. */
static int values_first(push_t *p, char *why, size_t whylen)
{
    const float *v;
    if (!p->unread)
        return 0;
    p->unread = false;
    return dcps_codec_dense(p->m, p->k, &v, why, whylen);
}

/* An unsized shard (params = auto) has no range to check a payload against. */
static int push_sized(dcps_router_t *r, push_t *p, char *why, size_t whylen)
{
    return shard_now(r).n_params ? GO_ON : not_ready(why, whylen);
}

/* The payload's frames, indices and sparse values, whatever the shard's state,
 * over the part's range (the shard's, for a push sent whole); then the part
 * against the rank's latest push (server/parts.h): a malformed push is never
 * acknowledged. Dense values stay unread. */
static int push_payload(dcps_router_t *r, push_t *p, char *why, size_t whylen)
{
    const dcps_range_t range = shard_now(r).range;
    const dcps_parts_t *latest = dcps_shard_parts(r->shard, p->m->rank);
    p->q = dcps_part_of(p->m, range.lo, range.hi);
    const int f = p->m->nframes - 1;
    int rc;
    if (f >= 0 && dcps_quant_is(p->m->frame[f].dtype)) {
        /* Shorter values ([compression] values, push = twobit), decoded with
         * every check into the router's room for a range, made at the first. */
        size_t n = (size_t)(range.hi - range.lo);
        if (r->decoded_cap < n) {
            float *d = realloc(r->decoded, n * sizeof *d);
            if (!d) {
                snprintf(why, whylen, "no room to decode %s values",
                         dcps_quant_name(p->m->frame[f].dtype));
                return DCPS_E_NOMEM;
            }
            r->decoded = d;
            r->decoded_cap = n;
        }
        dcps_msg_t m = *p->m;
        m.decode_to = r->decoded;
        rc = dcps_codec_push(&m, p->q.lo, p->q.hi, &p->idx, &p->v, &p->k, why, whylen);
        p->unread = false;
    } else {
        rc = dcps_codec_push_unchecked(p->m, p->q.lo, p->q.hi, &p->idx, &p->v, &p->k, why,
                                       whylen);
        p->unread = rc == 0 && p->idx == NULL;
    }
    if (rc == 0)
        rc = p->verdict = dcps_parts_verdict(latest, &p->q, why, whylen);
    if (rc == DCPS_PART_NEW || rc == DCPS_PART_OTHER)
        rc = dcps_parts_check(latest, &p->q, range.hi - range.lo, why, whylen);
    return rc < 0 ? rc : GO_ON;
}

/* A version this shard has not reached, or a rank behind a restored shard,
 * whose version may be one the previous process reached after the restored
 * checkpoint (lost updates: note_lost) and whose push may move the round or
 * its clock (push_round): each is an outcome, decided in push_version_act once
 * the values are checked. */
static int push_version(dcps_router_t *r, push_t *p, char *why, size_t whylen)
{
    return p->based_on > shard_now(r).version || from_behind(r, p->m->rank, p->m->seq) ? ACT
                                                                                     : GO_ON;
}

/* A shard restored from a checkpoint is behind what its workers pulled before
 * it went down: until a worker has pulled from it, a gradient on a later
 * version is taken as computed on the current one. */
static int push_version_act(dcps_router_t *r, push_t *p, int outcome, char *why, size_t whylen)
{
    const uint64_t version = shard_now(r).version;
    note_lost(r, p->m->rank, p->m->seq, p->based_on);
    if (p->based_on <= version)
        return GO_ON;
    if (!from_behind(r, p->m->rank, p->m->seq)) {
        snprintf(why, whylen, "gradient computed on version %llu, this shard is at version %llu",
                 (unsigned long long)p->m->param_version, (unsigned long long)version);
        return DCPS_E_VERSION;
    }
    p->based_on = version;
    return GO_ON;
}

static int push_initialised(dcps_router_t *r, push_t *p, char *why, size_t whylen)
{
    return shard_now(r).initialized ? GO_ON : not_ready(why, whylen);
}

/* The push's seq against its session's last push (server/session.h), or for a
 * part of the rank's latest push, against what became of that part. */
static int push_sequence(dcps_router_t *r, push_t *p, char *why, size_t whylen)
{
    if (p->verdict == DCPS_PART_APPLIED)
        return DCPS_SEQ_APPLIED;
    if (p->verdict == DCPS_PART_DROPPED)
        return DCPS_SEQ_DROPPED;
    if (p->verdict == DCPS_PART_NEW)
        return GO_ON; /* a part that has not come, also one sent again below the last seq */
    const dcps_session_t *ss = dcps_shard_session(r->shard, p->m->rank);
    enum dcps_seq_verdict seq = dcps_session_seq(ss, p->m->seq);
    switch (seq) {
    case DCPS_SEQ_NEW:
        return GO_ON;
    case DCPS_SEQ_BELOW:
        snprintf(why, whylen,
                 "seq %llu is below this session's last push, %llu: the pushes of a session "
                 "carry increasing seqs; nothing applied",
                 (unsigned long long)p->m->seq, (unsigned long long)ss->seq);
        return DCPS_E_STATE;
    default:
        return (int)seq; /* DCPS_SEQ_APPLIED or DCPS_SEQ_DROPPED, both above GO_ON */
    }
}

/* A retry of the session's last push is answered as that push was: applied,
 * acknowledged DUPLICATE and not applied twice; dropped, dropped again. */
static int push_retry_act(dcps_router_t *r, push_t *p, int outcome, char *why, size_t whylen)
{
    if (outcome == DCPS_SEQ_APPLIED) {
        dcps_shard_duplicate(r->shard);
        send_ack(r, p->id, p->m, DCPS_MSG_PUSH_ACK, DCPS_FLAG_DUPLICATE);
    } else {
        send_stale(r, p->id, p->m);
    }
    return ANSWERED;
}

/* The push's step against the consistency model, once a restored shard has
 * learnt from it where the job went on (catch_up). */
static int push_round(dcps_router_t *r, push_t *p, char *why, size_t whylen)
{
    const dcps_msg_t *m = p->m;
    if (sent_back(r, m->rank, m->seq, m->step + 1))
        return ACT;
    catch_up(r, m->rank, m->step, false);
    switch (dcps_consistency_check_push(&r->cons, m->rank, m->step)) {
    case DCPS_PUSH_ACCEPT:
        return GO_ON;
    case DCPS_PUSH_FUTURE:
        snprintf(why, whylen, "push for step %llu, the open round is %llu",
                 (unsigned long long)m->step, (unsigned long long)r->cons.round);
        return DCPS_E_STATE;
    case DCPS_PUSH_AGAIN:
        snprintf(why, whylen, "a second push from rank %u for step %llu", m->rank,
                 (unsigned long long)m->step);
        return DCPS_E_STATE;
    case DCPS_PUSH_DONE:
        return DONE_BEFORE;
    default:
        return ACT; /* DCPS_PUSH_STALE */
    }
}

/* A step the rank pushed already (async, ssp): acknowledged DUPLICATE, not
 * applied again; or its round closed without it (sync: it was declared dead,
 * or left): dropped, and the worker learns the open round. */
static int push_round_act(dcps_router_t *r, push_t *p, int outcome, char *why, size_t whylen)
{
    if (outcome == DONE_BEFORE) {
        dcps_shard_duplicate(r->shard);
        send_ack(r, p->id, p->m, DCPS_MSG_PUSH_ACK, DCPS_FLAG_DUPLICATE);
        return ANSWERED;
    }
    DCPS_INFO("push of rank %u for step %llu dropped: the open round is %llu", p->m->rank,
              (unsigned long long)p->m->step, (unsigned long long)r->cons.round);
    dcps_shard_drop(r->shard, p->m->rank, p->m->seq);
    dcps_parts_record(dcps_shard_parts(r->shard, p->m->rank), &p->q, false);
    send_stale(r, p->id, p->m);
    return ANSWERED;
}

/* Hands the push (or part) to the shard. The first push of a step that an
 * earlier session of the rank pushed in parts it did not complete (async,
 * ssp: dcps_shard_carried) goes only over the ranges those parts did not
 * cover: dense, as a part per range (a dense part gives each parameter what the whole push
 * gives it); sparse, as one part of its entries there. Its dense values are
 * checked first, so that a refusal comes before any range is applied. */
static int push_apply(dcps_router_t *r, push_t *p, bool sync, bool last, char *why,
                      size_t whylen)
{
    static const uint32_t none[1];
    dcps_shard_t *s = r->shard;
    const dcps_msg_t *m = p->m;
    const dcps_carried_t *c = dcps_shard_carried(s, m->rank);
    const uint64_t push = m->seq - p->q.part;
    if (sync || !c->any || c->step != m->step)
        return p->q.parts == 1
                   ? dcps_shard_push(s, sync, m->rank, m->seq, p->based_on, p->idx, p->v, p->k,
                                     why, whylen)
                   : dcps_shard_push_part(s, sync, m->rank, m->seq, push, p->based_on, p->q.lo,
                                          p->q.hi, p->idx, p->v, p->k, last, why, whylen);
    uint64_t lo[DCPS_CARRIED_MAX + 1], hi[DCPS_CARRIED_MAX + 1];
    const size_t n = dcps_carried_rest(c, p->q.lo, p->q.hi, lo, hi);
    int rc = values_first(p, why, whylen);
    if (rc != 0)
        return rc;
    if (p->idx || n == 0) { /* sparse: its entries there; dense with no range left: none */
        const size_t cap = p->idx ? p->k : 0;
        uint32_t *idx = cap ? malloc(cap * sizeof *idx) : NULL;
        float *v = cap ? malloc(cap * sizeof *v) : NULL;
        size_t k = 0;
        if (cap && (!idx || !v)) {
            free(idx);
            free(v);
            return dcps_say(why, whylen, DCPS_E_NOMEM, "no room for a push's %zu entries", p->k);
        }
        for (size_t e = 0, i = 0; p->idx && e < p->k; e++) {
            while (i < n && hi[i] <= p->idx[e])
                i++;
            if (i < n && lo[i] <= p->idx[e])
                idx[k] = p->idx[e], v[k++] = p->v[e];
        }
        rc = dcps_shard_push_part(s, false, m->rank, m->seq, push, p->based_on, p->q.lo, p->q.hi,
                                  idx ? idx : none, v, k, last, why, whylen);
        free(idx);
        free(v);
        return rc;
    }
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = dcps_shard_push_part(s, false, m->rank, m->seq, push, p->based_on, lo[i], hi[i],
                                  NULL, p->v + (lo[i] - p->q.lo), hi[i] - lo[i],
                                  last && i == n - 1, why, whylen);
    return rc;
}

/* Applies the push (async, ssp) or adds it to the round (sync), refused
 * (NONFINITE) if a parameter or the sync sum would not be finite: then nothing
 * changes, and neither does the rank's clock. */
static int push_update_act(dcps_router_t *r, push_t *p, int outcome, char *why, size_t whylen)
{
    dcps_shard_t *s = r->shard;
    const dcps_msg_t *m = p->m;
    dcps_parts_t *latest = dcps_shard_parts(s, m->rank);
    dcps_carried_t *carried = dcps_shard_carried(s, m->rank);
    const bool sync = r->cfg->mode == DCPS_MODE_SYNC;
    const bool last = p->q.parts == 1 || dcps_parts_completes(latest, &p->q);
    uint64_t t0 = dcps_now_ns(), pushes = dcps_shard_stats(s).pushes;
    int rc = push_apply(r, p, sync, last, why, whylen);
    if (rc == DCPS_E_NONFINITE) /* the gradient's own sentence, if its values are to blame */
        values_first(p, why, whylen);
    if (rc != 0)
        return rc;
    if (carried->any && carried->step != m->step)
        DCPS_NOTICE("rank %u's push of step %llu, in parts of which an earlier session sent "
                    "some, stays incomplete: a push of step %llu came first",
                    m->rank, (unsigned long long)carried->step, (unsigned long long)m->step);
    if (carried->any && (carried->step != m->step || last))
        memset(carried, 0, sizeof *carried);
    if (p->verdict == DCPS_PART_OTHER && dcps_parts_open(latest))
        DCPS_NOTICE("rank %u's push of step %llu in %u parts from seq %llu stays incomplete: "
                    "a push of step %llu came before its other parts",
                    m->rank, (unsigned long long)latest->step, latest->parts,
                    (unsigned long long)latest->base, (unsigned long long)m->step);
    dcps_parts_record(latest, &p->q, true);
    if (dcps_shard_stats(s).pushes != pushes) /* not an empty async push (shard.h) */
        timed(&r->apply_push, t0);
    if (!last) { /* the push is not complete: nothing moves but the part */
        send_ack(r, p->id, m, DCPS_MSG_PUSH_ACK, 0);
        return ANSWERED;
    }
    dcps_consistency_pushed(&r->cons, m->rank, m->step);
    /* The ack names the version after this push (docs/protocol.md, 7.4): in
     * sync, after the round it closes here, as the pulls that round releases
     * do; it goes before them, so a rank whose own pull waits gets the ack
     * first. (A follower closes rounds on shard 0's word, not on a push: it
     * tells shard 0 it holds this one.) */
    close_ready_round(r);
    send_ack(r, p->id, m, DCPS_MSG_PUSH_ACK, 0);
    report(r);
    progress(r);
    return ANSWERED;
}

/* The order docs/protocol.md (7.4) promises, after what every request goes
 * through (request_checks). */
static const push_check_t push_checks[] = {
    /* check          act               values first */
    {push_sized,       NULL,             false}, /* NOTREADY: no range yet (params = auto) */
    {push_payload,     NULL,             false}, /* 1: FRAMECOUNT, FRAMELEN, SIZE, RANGE, ORDER */
    {push_version,     push_version_act, true},  /* 2: VERSION; a restored shard adopts */
    {push_initialised, NULL,             true},  /* 3: NOTREADY */
    {push_sequence,    push_retry_act,   true},  /* 4: DUPLICATE, STALE again, STATE */
    {push_round,       push_round_act,   true},  /* 5: DUPLICATE (async, ssp), STALE, STATE (sync) */
    {NULL,             push_update_act,  false}, /* 6: applied, or NONFINITE */
};

static int on_push(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m, char *why,
                   size_t whylen)
{
    push_t p = {.id = id, .m = m, .based_on = m->param_version};
    for (size_t i = 0; i < sizeof push_checks / sizeof push_checks[0]; i++) {
        const push_check_t *c = &push_checks[i];
        int rc = c->check ? c->check(r, &p, why, whylen) : ACT, bad;
        if (rc == GO_ON)
            continue;
        if (c->values_first && (bad = values_first(&p, why, whylen)) != 0)
            return bad;
        if (rc < 0)
            return rc;
        if ((rc = c->act(r, &p, rc, why, whylen)) != GO_ON)
            return rc > 0 ? 0 : rc; /* ANSWERED, or refused */
    }
    return 0;
}

static int on_pull(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m, char *why,
                   size_t whylen)
{
    wait_t *p = &r->waits[m->rank];
    if (!shard_now(r).initialized)
        return not_ready(why, whylen);
    int rc = route_set(&p->to, id, why, whylen);
    if (rc != 0)
        return rc;
    p->pull = (pull_req_t){m->seq,           m->step, (m->flags & DCPS_FLAG_DELTA) != 0,
                           m->param_version, m->want, (m->flags & DCPS_FLAG_EXACT) != 0,
                           m->parts};
    const bool back = sent_back(r, m->rank, m->seq, m->step);
    if (dcps_shard_behind(r->shard, m->rank))
        p->caught = m->seq; /* its first pull from this process */
    if (back) {
        p->pulling = false;
        send_params(r, &p->to, m->rank, &p->pull, true);
        return 0;
    }
    bool moved = catch_up(r, m->rank, m->step, true);
    if (dcps_consistency_may_start(&r->cons, m->rank, m->step)) {
        p->pulling = false;
        send_params(r, &p->to, m->rank, &p->pull, false);
    } else {
        /* Answered when the step may start; a retry (same seq) replaces this entry. */
        p->pulling = true;
        p->wait_seq = m->seq;
    }
    if (moved)
        progress(r); /* a round may be full now, or another rank's step may start */
    return 0;
}

static int on_barrier(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m, char *why,
                      size_t whylen)
{
    wait_t *p = &r->waits[m->rank];
    if (!r->cons.m[m->rank].joined) {
        snprintf(why, whylen, "rank %u entered a barrier without HELLO", m->rank);
        return DCPS_E_STATE;
    }
    if (r->barrier_waiting > 0 && m->step != r->barrier_step) {
        snprintf(why, whylen, "barrier %llu requested while barrier %llu is open",
                 (unsigned long long)m->step, (unsigned long long)r->barrier_step);
        return DCPS_E_STATE;
    }
    int rc = route_set(&p->to, id, why, whylen);
    if (rc != 0)
        return rc;
    r->barrier_step = m->step;
    if (!p->in_barrier)
        r->barrier_waiting++;
    p->in_barrier = true;
    p->wait_seq = m->seq; /* a retried BARRIER replaces the earlier one */
    barrier_check(r);
    return 0;
}

static int on_heartbeat(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m, char *why,
                        size_t whylen)
{
    r->heartbeats++;
    send_ack(r, id, m, DCPS_MSG_HEARTBEAT, 0);
    return 0;
}

static int on_done(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m, char *why,
                   size_t whylen)
{
    if (!r->cons.m[m->rank].done)
        DCPS_INFO("worker %u has no more batches", m->rank);
    dcps_consistency_done(&r->cons, m->rank);
    send_ack(r, id, m, DCPS_MSG_DONE, 0);
    progress(r); /* the others no longer wait for its pushes */
    return 0;
}

static int on_bye(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m, char *why,
                  size_t whylen)
{
    if (r->cons.m[m->rank].joined)
        DCPS_INFO("worker %u left", m->rank);
    dcps_consistency_leave(&r->cons, m->rank);
    drop_waits(r, m->rank);
    send_ack(r, id, m, DCPS_MSG_BYE, 0);
    progress(r); /* the others no longer wait for this worker */
    return 0;
}

/* BUFFERS (docs/protocol.md 7.9): the model's buffers, which shard 0 keeps
 * (server/buffers.h). A publish and the job's buffers in one exchange: the
 * reply carries them (copied: the table may change at the next request). */
static int on_buffers(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m, char *why,
                      size_t whylen)
{
    const void *floats, *ints;
    size_t nf, ni;
    bool publish;
    const dcps_shard_stats_t s = shard_now(r);
    if (s.index != 0) {
        snprintf(why, whylen, "the model's buffers are kept by shard 0; this is shard %d",
                 s.index);
        return DCPS_E_STATE;
    }
    int rc = dcps_codec_buffers(m, &floats, &nf, &ints, &ni, &publish, why, whylen);
    if (rc != 0)
        return rc;
    int mode = m->flags & DCPS_FLAG_AVERAGE ? DCPS_BUF_AVERAGE
               : m->flags & DCPS_FLAG_LOCAL ? DCPS_BUF_LOCAL
                                             : DCPS_BUF_RANK0;
    /* A rank declared dead leaves the mean; one that said BYE stays in it:
     * its latest values are its final ones, and every rank that asks after
     * the final barrier must get the same mean. */
    for (int i = 0; i < r->cfg->workers; i++)
        r->counted[i] = !r->cons.m[i].dead;
    dcps_buffers_view_t v;
    if ((rc = dcps_buffers_request(dcps_shard_buffers(r->shard), m->rank, mode, publish, floats,
                                   nf, ints, ni, r->counted, &v, why, whylen)) != 0)
        return rc;
    dcps_msg_t reply;
    dcps_msg_reply(&reply, m, DCPS_MSG_BUFFERS);
    reply.shard = (uint32_t)s.index;
    reply.param_version = s.version;
    reply.flags = m->flags;
    if (v.floats) {
        reply.nframes = 2;
        reply.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_BUFFER_FLOATS, DCPS_DTYPE_F32, v.n_floats};
        reply.payload[0] = (dcps_buf_t){v.floats, v.n_floats * sizeof *v.floats};
        reply.frame[1] = (dcps_frame_desc_t){DCPS_FRAME_BUFFER_INTS, DCPS_DTYPE_F64, v.n_ints};
        reply.payload[1] = (dcps_buf_t){v.ints, v.n_ints * sizeof *v.ints};
    }
    send_reply(r, id, &reply, NULL, NULL);
    return 0;
}

static const handler_fn handlers[DCPS_MSG_TYPE_END] = {
    [DCPS_MSG_HELLO] = on_hello,     [DCPS_MSG_PUSH] = on_push,
    [DCPS_MSG_PULL] = on_pull,       [DCPS_MSG_BARRIER] = on_barrier,
    [DCPS_MSG_HEARTBEAT] = on_heartbeat, [DCPS_MSG_BYE] = on_bye,
    [DCPS_MSG_INIT] = on_init,       [DCPS_MSG_DONE] = on_done,
    [DCPS_MSG_BUFFERS] = on_buffers,
};

static void reply_error(dcps_router_t *r, const dcps_buf_t *id, const char *peer,
                        const dcps_msg_t *m, int code, const char *why)
{
    peer = peer && *peer ? peer : "?";
    /* A HELLO before rank 0's (params = auto) is asked again every 100 ms or
     * so until the shard is sized: a state, not a bad message, so neither
     * counted nor logged above debug. Bad messages are all counted, and logged
     * within a limit per peer (server/loglimit.h). */
    bool waiting = code == DCPS_E_NOTREADY && m->type == DCPS_MSG_HELLO;
    if (!waiting)
        r->errors[-code < DCPS_ERROR_SLOTS ? -code : 0]++;
    if (waiting || dcps_loglimit_allow(&r->badlog, peer, code, now_ms(r)))
        dcps_log(waiting ? DCPS_LOG_DEBUG : DCPS_LOG_WARNING, "%s %s from rank %u at %s: %s: %s",
                 waiting ? "early" : "bad", dcps_msg_type_name(m->type), m->rank, peer,
                 dcps_errname(code), why);
    dcps_msg_t reply;
    dcps_msg_reply(&reply, m, DCPS_MSG_ERROR);
    reply.job_id = r->cfg->job_id;
    reply.shard = (uint32_t)shard_now(r).index;
    reply.error_code = (uint32_t)-code;
    snprintf(reply.error_text, sizeof reply.error_text, "%s: %s", dcps_strerror(code), why);
    send_reply(r, id, &reply, NULL, NULL);
}

static void on_message(dcps_bridge_t *b)
{
    dcps_router_t *r = b->data;
    dcps_frames_t f;
    dcps_buf_t parts[DCPS_MAX_PARTS];

    int rc = dcps_frames_recv(r->sock, &f, ZMQ_DONTWAIT);
    if (rc <= 0) {
        if (rc < 0)
            DCPS_WARN("receive: %s", zmq_strerror(errno));
        return;
    }
    for (int i = 0; i < f.n; i++)
        parts[i] = (dcps_buf_t){zmq_msg_data(&f.part[i]), zmq_msg_size(&f.part[i])};
    /* Metadata (the address, the CURVE key) rides on frames as they came off
     * the wire (proto/frame.h). */
    dcps_router_handle(r, parts, (size_t)f.n + f.extra, f.peer,
                       dcps_frames_gets(&f, "User-Id"));
    dcps_frames_close(&f);
}

/* --- every request: one ordered list of checks (docs/protocol.md, section 7.1) ---- */

/* A request on its way through request_checks below. */
typedef struct {
    const dcps_buf_t *parts; /* [0] the routing id, [1] the header, then payload frames */
    size_t n;                /* every part received, also those beyond DCPS_MAX_PARTS */
    const char *user_id;     /* the CURVE key it came with, or NULL */
    dcps_msg_t m;            /* decoded by the first check */
} request_t;

/* Decodes parts[1] as the header and parts[2 ..] as the payload frames, like
 * dcps_frames_decode: n counts parts beyond DCPS_MAX_PARTS, which are not read. */
static int req_decode(dcps_router_t *r, request_t *q, char *why, size_t whylen)
{
    if (q->n < 2) {
        memset(&q->m, 0, sizeof q->m);
        snprintf(why, whylen, "message has no header frame");
        return DCPS_E_HEADER;
    }
    /* n - 2 may exceed DCPS_MAX_FRAMES (parts beyond the array were not kept):
     * the codec refuses that count before it reads any frame, and names it. */
    return dcps_codec_unpack(q->parts[1].data, q->parts[1].len, q->parts + 2, q->n - 2,
                             r->cfg->job_id, &q->m, why, whylen);
}

static int req_rank(dcps_router_t *r, request_t *q, char *why, size_t whylen)
{
    if (q->m.rank < (uint32_t)r->cfg->workers)
        return 0;
    snprintf(why, whylen, "rank %u, the job has ranks 0 to %d", q->m.rank, r->cfg->workers - 1);
    return DCPS_E_RANK;
}

static int req_type(dcps_router_t *r, request_t *q, char *why, size_t whylen)
{
    if (handlers[q->m.type])
        return 0;
    snprintf(why, whylen, "a shard does not accept %s", dcps_msg_type_name(q->m.type));
    return DCPS_E_MSGTYPE;
}

/* Every header field: checked or ignored, by proto/codec.c's table. */
static int req_fields(dcps_router_t *r, request_t *q, char *why, size_t whylen)
{
    const dcps_shard_stats_t s = shard_now(r);
    dcps_field_ctx_t ctx = {(uint32_t)s.index, s.n_params, s.range.lo, s.range.hi};
    return dcps_codec_check_fields(&q->m, &ctx, why, whylen);
}

/* Who may speak for the rank, before anything of the request is used: the
 * CURVE key's ranks (server/auth.h), then the rank's session. */
static int req_curve(dcps_router_t *r, request_t *q, char *why, size_t whylen)
{
    return r->auth ? dcps_auth_check(r->auth, q->user_id, q->m.rank, why, whylen) : 0;
}

/* Every request but HELLO names the session its rank's HELLO bound. */
static int req_session(dcps_router_t *r, request_t *q, char *why, size_t whylen)
{
    const dcps_msg_t *m = &q->m;
    const dcps_session_t *ss = dcps_shard_session(r->shard, m->rank);
    char bound[DCPS_SESSION_SHORT], named[DCPS_SESSION_SHORT];
    if (m->type == DCPS_MSG_HELLO || (ss->id != 0 && m->session == ss->id))
        return 0;
    if (ss->id == 0)
        snprintf(why, whylen, "rank %u has not said HELLO to this shard", m->rank);
    else
        snprintf(why, whylen, "rank %u's session is %s\u2026, this request names %s%s", m->rank,
                 dcps_session_short(ss->id, bound), dcps_session_short(m->session, named),
                 m->session ? "\u2026" : "");
    return DCPS_E_SESSION;
}

/* A request of the rank's session is a sign of life, even if refused below;
 * HELLO decides for itself. */
static int req_alive(dcps_router_t *r, request_t *q, char *why, size_t whylen)
{
    if (q->m.type != DCPS_MSG_HELLO)
        heard(r, q->m.rank);
    return 0;
}

/* A shard restored from a checkpoint does not know who joined: a worker that
 * goes on talking in a session of the checkpoint said HELLO to its previous
 * process. */
static int req_rejoin(dcps_router_t *r, request_t *q, char *why, size_t whylen)
{
    const dcps_msg_t *m = &q->m;
    char sid[DCPS_SESSION_SHORT];
    if (!shard_now(r).restored || m->type == DCPS_MSG_HELLO || m->type == DCPS_MSG_BYE ||
        r->cons.m[m->rank].joined)
        return 0;
    DCPS_NOTICE("worker %u rejoins in session %s\u2026, which it opened before this shard "
                "restarted",
                m->rank, dcps_session_short(m->session, sid));
    dcps_consistency_join(&r->cons, m->rank);
    return 0;
}

/* What every request goes through after req_decode, in the order
 * docs/protocol.md (7.1) promises; then its type's handler (a push: push_checks). Each returns 0 or a
 * negative code with a sentence in why, which the ERROR reply carries. */
static int (*const request_checks[])(dcps_router_t *r, request_t *q, char *why,
                                     size_t whylen) = {
    /* req_decode first: 2-8: HEADER, PROTOVER, JOBID, MSGTYPE, FRAMECOUNT, FRAMELEN;
     * then a ROUND (another shard's) goes to on_round */
    req_rank,    /* 9: RANK */
    req_type,    /* 10: MSGTYPE, a reply's type */
    req_fields,  /* 11: FIELD, FRAMECOUNT */
    req_curve,   /* 12: AUTH */
    req_session, /* 13: SESSION */
    req_alive,   /* 14: a sign of life */
    req_rejoin,  /* a restored shard's worker joins again */
};

void dcps_router_handle(dcps_router_t *r, const dcps_buf_t *parts, size_t n, const char *peer,
                        const char *user_id)
{
    request_t q = {.parts = parts, .n = n, .user_id = user_id};
    char why[DCPS_ERROR_TEXT_MAX - 64] = "";
    int rc = 0;

    r->messages++;
    for (size_t i = 0; i < n && i < DCPS_MAX_PARTS; i++)
        r->bytes_in += parts[i].len;
    rc = req_decode(r, &q, why, sizeof why);
    if (rc == 0 && q.m.type == DCPS_MSG_ROUND) { /* another shard's, not a worker's */
        if ((rc = on_round(r, &parts[0], &q.m, user_id, why, sizeof why)) != 0)
            reply_error(r, &parts[0], peer, &q.m, rc, why);
        return;
    }
    if (!r->settled) {
        /* Not restored yet (dcps_router_defer_restore): a worker's request is
         * left unanswered, and its client asks again after timeout_ms, by
         * when the shards have agreed where to resume (a round trip to
         * shard 0). Answering it now would tell the worker of a shard that
         * knows no session and no parameters. */
        DCPS_DEBUG("%s from rank %u left unanswered: not restored yet",
                   dcps_msg_type_name(q.m.type), q.m.rank);
        return;
    }
    for (size_t i = 0; rc == 0 && i < sizeof request_checks / sizeof request_checks[0]; i++)
        rc = request_checks[i](r, &q, why, sizeof why);
    if (rc == 0)
        rc = handlers[q.m.type](r, &parts[0], &q.m, why, sizeof why);
    if (rc != 0)
        reply_error(r, &parts[0], peer, &q.m, rc, why);
}

dcps_router_t *dcps_router_new(uv_loop_t *loop, void *sock, const dcps_config_t *cfg,
                               dcps_shard_t *shard, int *err)
{
    dcps_router_t *r = calloc(1, sizeof *r);
    *err = DCPS_E_NOMEM;
    if (!r)
        return NULL;
    r->cfg = cfg;
    r->shard = shard;
    r->sock = sock;
    r->loop = loop;
    r->started = (int64_t)time(NULL);
    dcps_loglimit_init(&r->badlog);
    r->send = send_zmq;
    if ((*err = dcps_consistency_init(&r->cons, cfg->mode, cfg->staleness, cfg->workers,
                                      cfg->dead_after_ms, now_ms(r))) != 0)
        goto fail_cons;
    r->lr = cfg->lr;
    r->settled = true;
    r->unsettled_logged = r->waiting_logged = r->restore_failed = -1e18; /* never */
    if (!(r->waits = calloc((size_t)cfg->workers, sizeof *r->waits)) ||
        !(r->counted = calloc((size_t)cfg->workers, sizeof *r->counted)) ||
        !(r->members = calloc((size_t)cfg->workers, sizeof *r->members)) ||
        !(r->passed = calloc((size_t)cfg->workers, sizeof *r->passed)) ||
        !(r->ranks = calloc((size_t)cfg->workers, sizeof *r->ranks))) {
        *err = DCPS_E_NOMEM;
        goto fail_waits;
    }
    if (!sock)
        return r; /* in process: no bridge, no timer (see dcps_router_handle) */
    if ((*err = dcps_bridge_init(loop, &r->bridge, sock, on_message, r)) != 0)
        goto fail_bridge;
    uv_timer_init(loop, &r->tick);
    r->tick.data = r;
    r->last_tick = now_ms(r);
    uv_timer_start(&r->tick, on_tick, (uint64_t)cfg->heartbeat_ms, (uint64_t)cfg->heartbeat_ms);
    return r;

fail_bridge:
fail_waits:
    free(r->passed);
    free(r->ranks);
    free(r->members);
    free(r->counted);
    free(r->waits);
    dcps_consistency_free(&r->cons);
fail_cons:
    free(r);
    return NULL;
}

void dcps_router_close(dcps_router_t *r, uv_close_cb close_cb)
{
    dcps_loglimit_flush(&r->badlog, now_ms(r), true);
    if (!r->sock)
        return;
    uv_close((uv_handle_t *)&r->tick, NULL);
    if (r->peer)
        dcps_bridge_close(&r->peer_bridge, NULL);
    dcps_bridge_close(&r->bridge, close_cb);
}

void dcps_router_destroy(dcps_router_t **rp)
{
    dcps_router_t *r = *rp;
    if (!r)
        return;
    dcps_rounds_free(&r->rounds);
    free(r->decoded);
    free(r->follower);
    free(r->passed);
    free(r->ranks);
    free(r->members);
    free(r->counted);
    free(r->waits);
    dcps_consistency_free(&r->cons);
    free(r);
    *rp = NULL;
}

void dcps_router_set_send(dcps_router_t *r, dcps_router_send_fn *send)
{
    r->send = send;
}

void dcps_router_set_clock(dcps_router_t *r, double ms)
{
    r->clock_ms = ms;
}

uint64_t dcps_router_error_count(const dcps_router_t *r)
{
    uint64_t n = 0;
    for (int i = 0; i < DCPS_ERROR_SLOTS; i++)
        n += r->errors[i];
    return n;
}

void dcps_router_set_auth(dcps_router_t *r, const dcps_auth_t *auth)
{
    r->auth = auth;
}

int dcps_router_save(dcps_router_t *r, char *path, size_t pathlen, char *err, size_t errlen)
{
    const dcps_config_t *cfg = r->cfg;
    dcps_shard_settle(r->shard); /* the parts of a push that came so far, into w */
    int rc = dcps_checkpoint_save(cfg->checkpoint_dir, cfg, r->shard, &r->cons,
                                  cfg->checkpoint_keep, r->ckpt_common, path, pathlen, err, errlen);
    if (rc != 0) {
        r->checkpoint_failures++;
    } else {
        r->checkpoint_time = (int64_t)time(NULL);
        r->ckpt_newest = shard_now(r).version;
        if (r->ckpt_count == 0) /* it holds one now (dcps_rounds_cut asks whether) */
            r->ckpt_count = 1;
    }
    return rc;
}

/* After a restore: a job that had started starts again as at INIT, workers
 * not heard yet expected from now. */
static void restarted(dcps_router_t *r)
{
    if (r->loop)
        uv_update_time(r->loop); /* the restore may have taken a while */
    if (shard_now(r).initialized)
        dcps_consistency_start(&r->cons, now_ms(r));
}

int dcps_router_restore(dcps_router_t *r, bool any, uint64_t version, char *path, size_t pathlen,
                        char *err, size_t errlen)
{
    struct stat st;
    const dcps_config_t *cfg = r->cfg;
    dcps_shard_t *into = r->shard;
    int rc;
    if (shard_now(r).initialized) { /* it served: into a new shard, swapped in once restored */
        if (!(into = dcps_shard_new(cfg, shard_now(r).index, &rc)))
            return dcps_say(err, errlen, rc, "out of memory for a second copy of the shard to "
                                             "restore into");
        if (r->role != ALONE && (rc = dcps_shard_keep_pushes(into)) != 0) {
            dcps_shard_destroy(&into);
            return dcps_say(err, errlen, rc, "out of memory for the pushes of a round");
        }
    }
    rc = any ? dcps_checkpoint_restore(cfg->checkpoint_dir, cfg, into, &r->cons, path, pathlen,
                                       err, errlen)
             : dcps_checkpoint_restore_version(cfg->checkpoint_dir, cfg, into, &r->cons, version,
                                               path, pathlen, err, errlen);
    if (into != r->shard) {
        dcps_shard_t *old = rc == 1 ? r->shard : into;
        if (rc == 1)
            r->shard = into;
        dcps_shard_destroy(&old); /* a reply that holds its buffer keeps that alive */
    }
    if (rc != 1)
        return rc;
    /* How old it is says how much the job may have lost: every update applied
     * after it was written. The workers tell exactly how many (note_lost). */
    r->checkpoint_time = stat(path, &st) == 0 ? (int64_t)st.st_mtime : (int64_t)time(NULL);
    r->restored_version = shard_now(r).version;
    restarted(r);
    return rc;
}

void dcps_router_load(dcps_router_t *r, const uint64_t *words)
{
    dcps_consistency_load(&r->cons, words);
    restarted(r);
}

dcps_shard_t *dcps_router_shard(const dcps_router_t *r)
{
    return r->shard;
}

const dcps_consistency_t *dcps_router_consistency(const dcps_router_t *r)
{
    return &r->cons;
}

dcps_router_stats_t dcps_router_stats(const dcps_router_t *r)
{
    dcps_router_stats_t st = {
        .messages = r->messages,
        .heartbeats = r->heartbeats,
        .bytes_in = r->bytes_in,
        .bytes_out = r->bytes_out,
        .auth_refused = r->auth ? r->auth->refused : 0,
        .checkpoint_failures = r->checkpoint_failures,
        .checkpoint_time = r->checkpoint_time,
        .started = r->started,
        .restored_version = r->restored_version,
        .apply_push = r->apply_push,
        .apply_round = r->apply_round,
        .live_workers = dcps_consistency_joined(&r->cons),
        .max_ahead = r->cons.max_ahead,
        .barrier_waiting = r->barrier_waiting,
        .rounds = r->rounds_applied,
        .digest = r->digest,
    };
    memcpy(st.errors, r->errors, sizeof st.errors);
    for (int i = 0; i < r->cfg->workers; i++)
        st.in_barrier += r->waits[i].in_barrier;
    return st;
}
