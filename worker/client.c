/* libdcps — the client; see dcps.h.
 *
 * Every call is an exchange: one request per shard involved, sent together, then
 * a zmq_poll over those sockets until each has answered with the request's
 * sequence number (late answers to earlier attempts are dropped). An attempt
 * that times out is resent with the same sequence number; a shard's HEARTBEAT
 * with that number and flag WAITING (it waits for other workers) starts the
 * attempt's time again.
 *
 * A client is one session (server/session.h): a random 64-bit number (top bit
 * set) drawn when it opens, named in its HELLO and in every later request to every
 * shard (the heartbeat thread's too), which is how a shard tells this worker
 * from anyone else who claims its rank. Sequence numbers count the client's
 * requests from 1, so its pushes carry increasing seqs. A shard that answers a
 * request with ERROR SESSION does not know the session (it restarted from a
 * checkpoint older than this worker's HELLO): the client says HELLO again, once,
 * with the same session, and resends the request; if that HELLO is refused (LIVE:
 * another session holds the rank) the call fails. The sockets leave routing ids
 * to ZeroMQ: they identify nothing.
 *
 * Each request socket has a monitor (zmq_socket_monitor) whose events the
 * exchange polls beside the replies. A refused TCP connection (nothing listens
 * at a shard's address) is known in milliseconds, long before a request times
 * out: it is said at once, once per connection, with how long the worker keeps
 * trying, and the retries go on (a shard may start after its workers).
 *
 * With [security] curve = true every socket is a CURVE client with the worker's
 * key pair and the shards' public key. A shard that refuses the key does not
 * answer at all (the handshake fails before any message), so the monitor also
 * reports the handshakes: a refusal ends the call at once with DCPS_E_AUTH and
 * a sentence that says why, instead of a timeout. */
#include "worker/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/error.h"
#include "common/keys.h"
#include "common/log.h"
#include "common/shardmap.h"
#include "kernels/topk.h"
#include "proto/frame.h"
#include "proto/quant.h"

typedef struct {
    void *sock;
    void *monitor;           /* PAIR receiving sock's connection (and curve: handshake) events */
    int closed_handshakes;   /* curve: handshakes the shard closed since one succeeded */
    bool told_refused;       /* a refused connection was said since the last one succeeded */
    dcps_range_t range;
    bool initialized;
    uint64_t version;        /* the shard's version in its last reply */
    uint64_t pulled_version; /* the version of the parameters last pulled */
    double lr;               /* the lr its last PULL_REPLY said; NaN: none said */
    uint32_t pull_flags;     /* of the last pull: DELTA, EXACT or none */
    bool holds;              /* pull = delta: the caller's range is the shard's mirror at
                                pulled_version, so a delta may be asked for */
    /* A dense PULL_REPLY in parts (docs/protocol.md, 17), as it arrives: the
     * parts asked for, then of the reply being taken its count, the next part
     * due, where it starts and the version every part names. */
    uint32_t asked_parts, reply_parts, reply_next;
    uint64_t reply_at, reply_version;
    bool more; /* the reply being taken has parts to come */
    atomic_int_fast64_t sent_us; /* when a request or heartbeat last went to the shard
                                    (CLOCK_MONOTONIC, microseconds): heartbeats are only
                                    sent after heartbeat_ms without one */
} conn_t;

struct dcps_client {
    dcps_config_t cfg;
    int rank;
    void *ctx;
    conn_t conn[DCPS_MAX_SHARDS];
    uint64_t session;    /* random, nonzero: named in every request */
    uint64_t seq;        /* of the last request sent; the first is 1 */
    uint64_t clock;      /* the step computed next */
    uint64_t back;       /* a pull's replies flagged STALE: the round to go back to */
    double pull_density; /* of a delta, asked for; 0: the job's */
    double lr;           /* dcps_client_lr: the shards' at the last pull; NaN before */
    atomic_int inflight; /* zero-copy payload frames ZeroMQ has not released */
    int monitors;        /* monitors made so far, to name each one's endpoint */
    double until_ms;     /* when the exchange in progress gives up if nobody answers */
    bool quiet_refusals; /* the exchange in progress is a farewell: refusals go unsaid */
    bool refused;        /* curve: a shard refused this worker's key, or its rank (AUTH) */
    pthread_t heartbeat;
    bool heartbeat_running;
    atomic_bool heartbeat_stop;
    dcps_client_stats_t stats;
    /* dcps_client_set_groups: the table every HELLO and INIT carries */
    uint32_t *group_ranges; /* n_ranges (end, group) pairs */
    double *group_opts;     /* n_groups (lr_factor, weight_decay) pairs */
    size_t n_ranges, n_groups;
    /* Values in a shorter format (proto/quant.h), allocated at first use: a
     * push's encoded frames (qcap bytes), and a reply's decoded values (the
     * largest shard range). */
    uint8_t *qbuf;
    size_t qcap;
    float *qdec;
    /* A push in given parts (dcps_client_parts_begin): one slot per shard and
     * DCPS_PARTS_MAX part sources per shard, allocated at the first one; and
     * how many parts a dense pull asks for its reply in (0: parts_of). */
    struct slot *given;
    dcps_push_part_t *given_src;
    struct coded *given_coded;
    uint32_t reply_parts;
    /* Pulls ahead (dcps_client_parts_begin's pull_parts, a job of dense
     * pulls): shard s's PULL goes as soon as every part of its push was given,
     * so that its reply moves while the caller still computes; ahead_ready
     * says, from the push's end, that those PULLs stand for the next pull. */
    struct slot *ahead;
    uint32_t ahead_parts;
    bool ahead_ready;
    /* [security] curve: the keys every socket gets; wiped on close. */
    uint8_t server_key[DCPS_KEY_BYTES], public_key[DCPS_KEY_BYTES], secret_key[DCPS_KEY_BYTES];
    char err[512];
};

/* A given part's values in a shorter format, as sent: its bytes (cap of
 * room, kept for the part of that number in later pushes) and its INT8 block.
 * Rewritten only when the part is given again, after the exchange of the push
 * before has settled (every frame released by ZeroMQ). */
typedef struct coded {
    uint8_t *bytes;
    size_t cap, len;
    uint32_t block;
} coded_t;

/* One request of an exchange and what became of it. */
typedef struct slot slot_t;
typedef int (*reply_fn)(dcps_client_t *c, int shard, const dcps_msg_t *reply, void *arg);
struct slot {
    bool active, done;
    bool alive; /* the shard said it is still waiting */
    bool early; /* its request went before its exchange (a pull ahead): the first attempt
                   only collects */
    dcps_msg_t req;
    uint32_t want;  /* expected reply type */
    uint32_t parts; /* a dense PUSH in this many parts (seq + i: part i); 0, 1: whole */
    uint64_t acked; /* bit i: part i acknowledged */
    /* A push in given parts: part i is src[i] (its own range and payload), and
     * bit i of given says it was given; NULL: the equal split of req's one
     * dense payload (part_range), every part given. */
    const dcps_push_part_t *src;
    const coded_t *coded; /* with src: part i's values in a shorter format */
    uint64_t given;
    int rc;
    int rejoin;       /* ERROR SESSION: 1 while hello is unanswered, 2 once req was resent */
    dcps_msg_t hello; /* the HELLO of a rejoin, with its own seq */
};

static int fail(dcps_client_t *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(dcps_client_t *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return code;
}

static void released(void *data, void *hint)
{
    (void)data;
    atomic_fetch_sub((atomic_int *)hint, 1);
}

/* --- [security] curve ------------------------------------------------------------- */

/* The events a monitor reports: the connection's always, the handshake's with
 * curve (ZMQ_EVENT_HANDSHAKE_*). CONNECT_RETRIED follows every failed connect
 * (ECONNREFUSED: nothing listens there), as libzmq schedules the next try. */
#define CONNECT_EVENTS (ZMQ_EVENT_CONNECTED | ZMQ_EVENT_CONNECT_RETRIED)
#define HANDSHAKE_EVENTS                                                                       \
    (ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |                    \
     ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)

/* A shard whose secret key is not the one server_public_key names cannot open
 * the client's CURVE HELLO, and a shard without CURVE does not take it: either closes
 * the connection without a word, and libzmq connects again. One such close may
 * be a shard stopping mid-handshake, so only this many in a row are blamed on
 * the keys. */
#define CLOSED_HANDSHAKES_MAX 3

/* Checks the job's keys for a worker and reads them into c. Returns 0, or a
 * code with a sentence naming the key or file. */
static int load_keys(dcps_client_t *c)
{
    char why[2 * DCPS_PATH_MAX];
    const char *pub = c->cfg.server_public_key;
    int rc;
    if (!dcps_keys_available())
        return fail(c, DCPS_E_CONFIG,
                    "[security] curve = true, but this libzmq was built without CURVE "
                    "(zmq_has(\"curve\") is false)");
    if (dcps_config_check_role(&c->cfg, NULL, DCPS_ROLE_WORKER, why, sizeof why) != 0)
        return fail(c, DCPS_E_CONFIG, "%s", why);
    if (dcps_key_parse(pub, strlen(pub), c->server_key, why, sizeof why) != 0)
        return fail(c, DCPS_E_CONFIG, "[security] server_public_key: %s", why);
    rc = dcps_key_read(c->cfg.worker_secret_key_file, true, c->secret_key, why, sizeof why);
    if (rc != 0)
        return fail(c, rc, "%s ([security] worker_secret_key_file)", why);
    if (dcps_key_public(c->secret_key, c->public_key) != 0)
        return fail(c, DCPS_E_ZMQ, "cannot derive this worker's public key: no CURVE in libzmq");
    return 0;
}

/* curve: makes sock a CURVE client of the shards with this worker's keys.
 * Returns 0, or -1 with errno. */
static int curve_client(const dcps_client_t *c, void *sock)
{
    if (!c->cfg.curve)
        return 0;
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, c->server_key, DCPS_KEY_BYTES) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, c->public_key, DCPS_KEY_BYTES) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, c->secret_key, DCPS_KEY_BYTES) != 0)
        return -1;
    return 0;
}

/* Starts a monitor of sock's connection and (curve) handshake events, before
 * it connects, so that none is missed, and returns the PAIR socket that
 * receives them; NULL with errno on failure. Every context has its own inproc
 * names. */
static void *monitor(dcps_client_t *c, void *sock)
{
    char endpoint[64];
    int linger = 0, unlimited = 0;
    snprintf(endpoint, sizeof endpoint, "inproc://dcps-monitor.%d", c->monitors++);
    if (zmq_socket_monitor(sock, endpoint,
                           CONNECT_EVENTS | (c->cfg.curve ? HANDSHAKE_EVENTS : 0)) != 0)
        return NULL;
    void *pair = zmq_socket(c->ctx, ZMQ_PAIR);
    if (!pair)
        return NULL;
    zmq_setsockopt(pair, ZMQ_LINGER, &linger, sizeof linger);
    /* libzmq's I/O thread sends the events and would block on a full queue;
     * they are read at the next exchange, and are few (one per handshake, one
     * per reconnect interval while a shard is down). */
    zmq_setsockopt(pair, ZMQ_RCVHWM, &unlimited, sizeof unlimited);
    if (zmq_connect(pair, endpoint) != 0) {
        int e = errno;
        zmq_close(pair);
        errno = e;
        return NULL;
    }
    return pair;
}

/* Reads one event of a monitor (two frames: event and value, then the
 * endpoint). Returns 1 with *event and *value, or 0 if none is waiting. */
static int next_event(void *monitor, uint16_t *event, uint32_t *value)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, monitor, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return 0;
    }
    *event = 0;
    *value = 0;
    if (zmq_msg_size(&m) >= 6) {
        memcpy(event, zmq_msg_data(&m), sizeof *event);
        memcpy(value, (const char *)zmq_msg_data(&m) + 2, sizeof *value);
    }
    while (zmq_msg_more(&m)) { /* the endpoint, known already */
        zmq_msg_close(&m);
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, monitor, ZMQ_DONTWAIT) < 0)
            break;
    }
    zmq_msg_close(&m);
    return 1;
}

/* A refused connection to shard s, said once until a connection succeeds: the
 * address, and how long this worker keeps trying (the exchange's retries). */
static void refused(dcps_client_t *c, int s)
{
    conn_t *k = &c->conn[s];
    if (k->told_refused || c->quiet_refusals)
        return;
    k->told_refused = true;
    double left = c->until_ms - dcps_now_ms();
    DCPS_WARN("shard %d (%s) refused the connection: nothing listens there (yet); this worker "
              "keeps trying for %.0f s more ([worker] timeout_ms = %d and retries = %d set how "
              "long): is dcps-server running there, and is [servers] shards right?",
              s, c->cfg.shards[s], left > 0 ? left / 1000 : 0, c->cfg.timeout_ms,
              c->cfg.retries);
}

/* Reads the events of shard s's socket. Returns 0, or DCPS_E_AUTH with a
 * sentence once the shard has refused this worker. */
static int check_events(dcps_client_t *c, int s)
{
    conn_t *k = &c->conn[s];
    const char *at = c->cfg.shards[s];
    uint16_t event;
    uint32_t value;
    while (next_event(k->monitor, &event, &value)) {
        switch (event) {
        case ZMQ_EVENT_CONNECTED:
            k->told_refused = false;
            break;
        case ZMQ_EVENT_CONNECT_RETRIED:
            refused(c, s);
            break;
        case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
            k->closed_handshakes = 0;
            break;
        case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
            c->refused = true;
            return fail(c, DCPS_E_AUTH,
                        "shard %d (%s) refused this worker's CURVE key (handshake failed: %u): "
                        "is its public key, the .pub file of [security] worker_secret_key_file, "
                        "in the shard's worker_keys_dir?",
                        s, at, value);
        case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
            c->refused = true;
            if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
                return fail(c, DCPS_E_AUTH,
                            "shard %d (%s) does not use CURVE (handshake failed: mechanism "
                            "mismatch): is [security] curve = true in its job file?",
                            s, at);
            return fail(c, DCPS_E_AUTH,
                        "the CURVE handshake with shard %d (%s) failed: ZeroMQ protocol error "
                        "0x%08x",
                        s, at, value);
        case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            if (++k->closed_handshakes < CLOSED_HANDSHAKES_MAX)
                break;
            c->refused = true;
            return fail(c, DCPS_E_AUTH,
                        "shard %d (%s) closed the connection during the CURVE handshake %d times "
                        "in a row: does its job file say [security] curve = true, and is "
                        "server_public_key the public key of its server_secret_key_file?",
                        s, at, k->closed_handshakes);
        }
    }
    return 0;
}

/* --- connections ------------------------------------------------------------------ */

static int connect_shard(dcps_client_t *c, int s)
{
    int linger = 0, immediate = 0, e;
    conn_t *k = &c->conn[s];
    void *sock = zmq_socket(c->ctx, ZMQ_DEALER);
    if (!sock)
        return fail(c, DCPS_E_ZMQ, "cannot create a socket: %s", zmq_strerror(errno));
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(sock, ZMQ_IMMEDIATE, &immediate, sizeof immediate);
    if (curve_client(c, sock) != 0 || !(k->monitor = monitor(c, sock))) {
        e = errno;
        zmq_close(sock);
        return fail(c, DCPS_E_ZMQ, "cannot set up %s for shard %d (%s): %s",
                    c->cfg.curve ? "CURVE" : "a monitor", s, c->cfg.shards[s], zmq_strerror(e));
    }
    k->closed_handshakes = 0;
    k->told_refused = false;
    if (zmq_connect(sock, c->cfg.shards[s]) != 0) {
        e = errno;
        zmq_close(sock);
        if (k->monitor)
            zmq_close(k->monitor);
        k->monitor = NULL;
        return fail(c, DCPS_E_ZMQ, "cannot connect to shard %d at %s: %s", s, c->cfg.shards[s],
                    zmq_strerror(e));
    }
    k->sock = sock;
    return 0;
}

/* Closes shard s's socket and its monitor, if open. */
static void disconnect_shard(dcps_client_t *c, int s)
{
    conn_t *k = &c->conn[s];
    if (k->sock)
        zmq_close(k->sock);
    if (k->monitor)
        zmq_close(k->monitor);
    k->sock = k->monitor = NULL;
}

/* Waits until ZeroMQ has released every zero-copy frame, so the caller's buffers
 * may change. After a timeout frames can sit in a socket's queue for a shard that
 * is gone; closing the socket (linger 0) drops them, and it is connected anew. */
static void settle(dcps_client_t *c)
{
    double until = dcps_now_ms() + 200;
    while (atomic_load(&c->inflight) > 0 && dcps_now_ms() < until)
        nanosleep(&(struct timespec){0, 20000}, NULL);
    if (atomic_load(&c->inflight) == 0)
        return;
    for (int s = 0; s < c->cfg.n_shards; s++) {
        disconnect_shard(c, s);
        if (connect_shard(c, s) != 0)
            DCPS_WARN("%s", c->err);
    }
    while (atomic_load(&c->inflight) > 0)
        nanosleep(&(struct timespec){0, 20000}, NULL);
}

/* Counts n bytes of a push or pull exchange (request or reply, message m of
 * type `type`) with what it would have been dense: the same header, and the
 * range as one DENSE frame where a payload is carried. */
static void account(dcps_client_t *c, int s, uint32_t type, uint64_t n, const dcps_msg_t *m)
{
    uint64_t dense = n;
    if (m && m->nframes > 0 && (type == DCPS_MSG_PUSH || type == DCPS_MSG_PULL_REPLY)) {
        for (int i = 0; i < m->nframes; i++)
            dense -= m->payload[i].len;
        dense += (m->has & DCPS_HAS_PART ? m->part_hi - m->part_lo
                                         : c->conn[s].range.hi - c->conn[s].range.lo) *
                 sizeof(float);
    }
    if (type == DCPS_MSG_PUSH || type == DCPS_MSG_PUSH_ACK || type == DCPS_MSG_INIT) {
        c->stats.bytes_pushed += n;
        c->stats.bytes_pushed_dense += dense;
    } else if (type == DCPS_MSG_PULL || type == DCPS_MSG_PULL_REPLY) {
        c->stats.bytes_pulled += n;
        c->stats.bytes_pulled_dense += dense;
    }
}

static int send_msg(dcps_client_t *c, int s, const dcps_msg_t *m);

/* The global range [*lo, *hi) of part i of `parts` of shard s's range: part i
 * covers ⌊i·n/parts⌋ to ⌊(i+1)·n/parts⌋ of its n parameters. */
static void part_range(const dcps_client_t *c, int s, uint32_t i, uint32_t parts, uint64_t *lo,
                       uint64_t *hi)
{
    const dcps_range_t *r = &c->conn[s].range;
    const uint64_t n = r->hi - r->lo;
    *lo = r->lo + n * i / parts;
    *hi = r->lo + n * (i + 1) / parts;
}

/* Sends part i of the slot's PUSH in parts, with seq req.seq + i: its slice
 * of the one dense payload, or its given source (dense or sparse). */
static int send_part(dcps_client_t *c, int s, const slot_t *sl, uint32_t i)
{
    dcps_msg_t m = sl->req;
    m.has |= DCPS_HAS_PART;
    m.parts = sl->parts;
    m.part = i;
    m.seq = sl->req.seq + i;
    if (!sl->src) {
        const float *v = sl->req.payload[0].data;
        part_range(c, s, i, sl->parts, &m.part_lo, &m.part_hi);
        m.frame[0].count = m.part_hi - m.part_lo;
        m.payload[0] = (dcps_buf_t){v + (m.part_lo - c->conn[s].range.lo),
                                    m.frame[0].count * sizeof *v};
        return send_msg(c, s, &m);
    }
    const dcps_push_part_t *p = &sl->src[i];
    m.part_lo = p->lo;
    m.part_hi = p->hi;
    m.nframes = 0;
    if (p->idx) {
        m.frame[m.nframes] = (dcps_frame_desc_t){DCPS_FRAME_INDICES, DCPS_DTYPE_U32, p->k};
        m.payload[m.nframes++] = (dcps_buf_t){p->idx, p->k * sizeof *p->idx};
    }
    const size_t count = p->idx ? p->k : (size_t)(p->hi - p->lo);
    m.frame[m.nframes] =
        (dcps_frame_desc_t){p->idx ? DCPS_FRAME_VALUES : DCPS_FRAME_DENSE, p->dtype, count};
    if (p->dtype == DCPS_DTYPE_F32) {
        m.block[m.nframes] = 0;
        m.payload[m.nframes++] = (dcps_buf_t){p->val, count * sizeof *p->val};
    } else {
        m.block[m.nframes] = sl->coded[i].block;
        m.payload[m.nframes++] = (dcps_buf_t){sl->coded[i].bytes, sl->coded[i].len};
    }
    return send_msg(c, s, &m);
}

/* Sends the parts of the slot's PUSH in parts that were given and are not yet
 * acknowledged. */
static int send_parts(dcps_client_t *c, int s, slot_t *sl)
{
    for (uint32_t i = 0; i < sl->parts; i++) {
        if (sl->acked >> i & 1 || (sl->src && !(sl->given >> i & 1)))
            continue;
        int rc = send_part(c, s, sl, i);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Sends the slot's request, or the HELLO of its rejoin while that is unanswered. */
static int send_slot(dcps_client_t *c, int s, slot_t *sl)
{
    if (sl->rejoin != 1 && (sl->parts > 1 || sl->src))
        return send_parts(c, s, sl);
    return send_msg(c, s, sl->rejoin == 1 ? &sl->hello : &sl->req);
}

/* Sends m to shard s, its payload without a copy. */
static int send_msg(dcps_client_t *c, int s, const dcps_msg_t *m)
{
    bool zerocopy = m->nframes > 0;
    if (zerocopy)
        atomic_fetch_add(&c->inflight, m->nframes);
    int n = dcps_frames_send(c->conn[s].sock, NULL, m, zerocopy ? released : NULL, &c->inflight,
                             ZMQ_DONTWAIT);
    if (n < 0)
        return fail(c, DCPS_E_ZMQ, "cannot send %s to shard %d (%s): %s",
                    dcps_msg_type_name(m->type), s, c->cfg.shards[s], zmq_strerror(errno));
    atomic_store(&c->conn[s].sent_us, dcps_now_us());
    c->stats.bytes_sent += (uint64_t)n;
    account(c, s, m->type, (uint64_t)n, m);
    return 0;
}

static int on_welcome(dcps_client_t *c, int s, const dcps_msg_t *m, void *arg);

/* ERROR SESSION for the slot's request: the shard does not know this worker's
 * session. Says HELLO again with it (the reply is taken by rejoined). Returns 0,
 * or a code if the HELLO cannot be sent. */
static int rejoin(dcps_client_t *c, int s, slot_t *sl, const char *text)
{
    DCPS_WARN("shard %d (%s) does not know this worker's session (%s): saying HELLO again, then "
              "%s again",
              s, c->cfg.shards[s], text, dcps_msg_type_name(sl->req.type));
    sl->rejoin = 1;
    sl->hello = (dcps_msg_t){.type = DCPS_MSG_HELLO, .job_id = c->cfg.job_id,
                             .rank = (uint32_t)c->rank, .seq = ++c->seq,
                             .session = c->session, .shard = (uint32_t)s,
                             .n_params = c->cfg.n_params};
    return send_slot(c, s, sl);
}

/* The answer m to a rejoin's HELLO. WELCOME: the request is sent again, and the
 * slot waits for its reply (returns 0). Anything else ends the slot with an
 * error (returns 1). */
static int rejoined(dcps_client_t *c, int s, slot_t *sl, const dcps_msg_t *m)
{
    const char *at = c->cfg.shards[s];
    uint64_t first = UINT64_MAX;
    if (m->type == DCPS_MSG_WELCOME) {
        if ((sl->rc = on_welcome(c, s, m, &first)) != 0)
            return 1;
        sl->rejoin = 2;
        sl->rc = send_slot(c, s, sl);
        return sl->rc != 0;
    }
    if (m->type != DCPS_MSG_ERROR) {
        sl->rc = fail(c, DCPS_E_MSGTYPE, "shard %d (%s) answered HELLO with %s", s, at,
                      dcps_msg_type_name(m->type));
        return 1;
    }
    int code = -(int)m->error_code;
    sl->rc = fail(c, dcps_error_known(code) ? code : DCPS_E_REMOTE,
                  "shard %d (%s) did not know this worker's session, and refused its HELLO "
                  "again: %s%s",
                  s, at, m->error_text,
                  code == DCPS_E_LIVE ? "; is another process running as this rank?" : "");
    return 1;
}

/* Whether reply m answers a part of the slot's PUSH in parts that was not
 * acknowledged yet; with `ack`, marks it and says whether parts remain unacknowledged. */
static bool part_acked(slot_t *sl, const dcps_msg_t *m, bool ack)
{
    if (sl->parts <= 1 || m->seq < sl->req.seq || m->seq - sl->req.seq >= sl->parts)
        return false;
    const uint64_t bit = 1ull << (m->seq - sl->req.seq);
    if (!ack)
        return !(sl->acked & bit);
    sl->acked |= bit;
    return sl->acked != (sl->parts >= 64 ? ~0ull : (1ull << sl->parts) - 1);
}

/* A PULL_REPLY whose values are in a shorter format (the shard's [compression]
 * values) is decoded into qdec: allocated at the first one, for the largest
 * range. */
static int reply_room(dcps_client_t *c, dcps_msg_t *m, char *why, size_t whylen)
{
    uint32_t dtype = 0;
    for (int i = 0; i < m->nframes; i++)
        if (dcps_quant_is(m->frame[i].dtype))
            dtype = m->frame[i].dtype;
    if (!dtype)
        return 0;
    if (!c->qdec) {
        uint64_t most = 0;
        for (int s = 0; s < c->cfg.n_shards; s++)
            if (c->conn[s].range.hi - c->conn[s].range.lo > most)
                most = c->conn[s].range.hi - c->conn[s].range.lo;
        if (!(c->qdec = malloc((size_t)(most ? most : 1) * sizeof *c->qdec))) {
            snprintf(why, whylen, "out of memory for its %s values", dcps_quant_name(dtype));
            return DCPS_E_NOMEM;
        }
    }
    m->decode_to = c->qdec;
    return 0;
}

/* Receives what shard s sent; returns 1 if it answered the slot. */
static int take_reply(dcps_client_t *c, int s, slot_t *sl, reply_fn fn, void *arg)
{
    dcps_frames_t f;
    dcps_msg_t m;
    char why[DCPS_ERROR_TEXT_MAX];
    int n = dcps_frames_recv(c->conn[s].sock, &f, ZMQ_DONTWAIT);
    if (n <= 0)
        return 0;
    size_t bytes = 0;
    for (int i = 0; i < f.n; i++)
        bytes += zmq_msg_size(&f.part[i]);
    c->stats.bytes_received += bytes;
    int rc = dcps_frames_decode(&f, 0, c->cfg.job_id, &m, why, sizeof why);
    if (rc == 0 && m.type == DCPS_MSG_PULL_REPLY)
        rc = reply_room(c, &m, why, sizeof why);
    if (rc != 0) {
        sl->rc = fail(c, rc, "shard %d (%s) sent a bad reply: %s", s, c->cfg.shards[s], why);
    } else if (sl->rejoin == 1 && m.seq == sl->hello.seq) {
        if (!rejoined(c, s, sl, &m)) {
            dcps_frames_close(&f);
            return 0;
        }
    } else if (m.seq != sl->req.seq && !part_acked(sl, &m, false)) {
        dcps_frames_close(&f); /* an answer to an earlier attempt */
        return 0;
    } else if (m.type == DCPS_MSG_HEARTBEAT && (m.flags & DCPS_FLAG_WAITING)) {
        sl->alive = true;
        dcps_frames_close(&f);
        return 0;
    } else if (m.type == DCPS_MSG_ERROR && m.error_code == (uint32_t)-DCPS_E_SESSION &&
               sl->rejoin == 1 && sl->parts > 1) {
        dcps_frames_close(&f); /* another part's: every part is sent again after WELCOME */
        return 0;
    } else if (m.type == DCPS_MSG_ERROR && m.error_code == (uint32_t)-DCPS_E_SESSION &&
               sl->rejoin == 0 && sl->req.type != DCPS_MSG_HELLO &&
               sl->req.type != DCPS_MSG_BYE) {
        if ((sl->rc = rejoin(c, s, sl, m.error_text)) == 0) {
            dcps_frames_close(&f);
            return 0;
        }
    } else if (m.type == DCPS_MSG_ERROR) {
        int code = -(int)m.error_code;
        c->refused |= code == DCPS_E_AUTH; /* its key may not speak for this rank */
        sl->rc = fail(c, dcps_error_known(code) ? code : DCPS_E_REMOTE,
                      "shard %d (%s) refused %s: %s", s, c->cfg.shards[s],
                      dcps_msg_type_name(sl->req.type), m.error_text);
    } else if (m.type != sl->want) {
        sl->rc = fail(c, DCPS_E_MSGTYPE, "shard %d (%s) answered %s with %s", s,
                      c->cfg.shards[s], dcps_msg_type_name(sl->req.type),
                      dcps_msg_type_name(m.type));
    } else {
        account(c, s, m.type, bytes, &m);
        c->conn[s].version = m.param_version;
        sl->rc = fn ? fn(c, s, &m, arg) : 0;
        /* A push's part or a reply's part, with more of them to come. */
        if (sl->rc == 0 && (part_acked(sl, &m, true) || c->conn[s].more)) {
            c->conn[s].more = false;
            dcps_frames_close(&f);
            return 0;
        }
    }
    dcps_frames_close(&f);
    sl->done = true;
    return 1;
}

/* How long attempt a (from 0) waits for its replies: attempt_ms · 2^a, at most
 * 4 · attempt_ms. A lost message is resent soon; a shard that restarts (systemd
 * brings it back, it restores its checkpoint) gets time to come back. */
static int attempt_wait(int attempt_ms, int attempt)
{
    return attempt_ms << (attempt < 2 ? attempt : 2);
}

/* Gives every active slot a fresh request header: this job, rank and session,
 * its shard, and the next sequence number. */
static void stamp_one(dcps_client_t *c, int s, slot_t *sl)
{
    sl->done = false;
    sl->rc = 0;
    sl->rejoin = 0;
    sl->req.job_id = c->cfg.job_id;
    sl->req.rank = (uint32_t)c->rank;
    sl->req.shard = (uint32_t)s;
    sl->req.seq = ++c->seq;
    sl->req.session = c->session;
    sl->acked = 0;
    if (sl->parts > 1)
        c->seq += sl->parts - 1; /* part i: seq + i */
}

static void stamp(dcps_client_t *c, slot_t *slots)
{
    for (int s = 0; s < c->cfg.n_shards; s++)
        if (slots[s].active)
            stamp_one(c, s, &slots[s]);
}

/* Attempt `attempt` (from 0) of `attempts`: sends every slot not yet answered,
 * counting them in *pending; a retry says first which shard is silent, and
 * since when (waited ms), so that it is said at once, not only when the
 * retries run out. Returns the first send's error, or 0. */
static int send_round(dcps_client_t *c, slot_t *slots, int attempt, int attempts, double waited,
                      int wait, int *pending)
{
    int rc = 0;
    for (int s = 0; s < c->cfg.n_shards && rc == 0; s++)
        if (slots[s].active && !slots[s].done) {
            if (attempt == 0 && slots[s].early) { /* sent ahead */
                (*pending)++;
                continue;
            }
            if (attempt > 0)
                DCPS_WARN("shard %d (%s) has not answered %s for %.1f s; asking again "
                          "(attempt %d of %d), waiting up to %d ms",
                          s, c->cfg.shards[s], dcps_msg_type_name(slots[s].req.type),
                          waited / 1000.0, attempt + 1, attempts, wait);
            rc = send_slot(c, s, &slots[s]);
            (*pending)++;
        }
    return rc;
}

/* Whether every slot still waiting for its reply has said, since the last
 * wait began, that its shard is still waiting (HEARTBEAT WAITING). Only then
 * does the wait start again: one shard that still waits must not excuse
 * another's silence, whose request (lost with a restarted shard, say) is sent
 * again when the wait ends. */
static bool all_alive(const dcps_client_t *c, const slot_t *slots)
{
    for (int s = 0; s < c->cfg.n_shards; s++)
        if (slots[s].active && !slots[s].done && !slots[s].alive)
            return false;
    return true;
}

/* Waits up to wait ms for the replies of the *pending slots not yet answered,
 * watching their sockets and (for the handshake's failures) their monitors;
 * takes each reply (take_reply, which calls fn for a good one) and counts the
 * slots it ends off *pending. Once every shard still pending has said it is
 * still working on its request (a HEARTBEAT with WAITING), the wait starts
 * again (all_alive). Returns the first
 * error of a slot, a monitor or the poll, or 0 when the wait is over. */
static int collect(dcps_client_t *c, slot_t *slots, reply_fn fn, void *arg, int wait,
                   int *pending)
{
    zmq_pollitem_t items[2 * DCPS_MAX_SHARDS]; /* the sockets, then their monitors */
    int who[2 * DCPS_MAX_SHARDS];
    int rc = 0;
    double deadline = dcps_now_ms() + wait;
    while (rc == 0 && *pending > 0) {
        int n = 0, socks;
        for (int s = 0; s < c->cfg.n_shards; s++)
            if (slots[s].active && !slots[s].done) {
                items[n] = (zmq_pollitem_t){c->conn[s].sock, 0, ZMQ_POLLIN, 0};
                who[n++] = s;
            }
        socks = n;
        for (int i = 0; i < socks; i++)
            if (c->conn[who[i]].monitor) {
                items[n] = (zmq_pollitem_t){c->conn[who[i]].monitor, 0, ZMQ_POLLIN, 0};
                who[n++] = who[i];
            }
        double left = deadline - dcps_now_ms();
        if (left <= 0)
            break;
        if (zmq_poll(items, n, (long)left + 1) < 0 && errno != EINTR)
            return fail(c, DCPS_E_ZMQ, "poll: %s", zmq_strerror(errno));
        for (int i = socks; i < n && rc == 0; i++)
            if (items[i].revents & ZMQ_POLLIN)
                rc = check_events(c, who[i]);
        for (int i = 0; i < socks; i++) {
            int s = who[i];
            if (!(items[i].revents & ZMQ_POLLIN))
                continue;
            while (!slots[s].done && take_reply(c, s, &slots[s], fn, arg))
                ;
            if (slots[s].done) {
                (*pending)--;
                if (slots[s].rc && !rc)
                    rc = slots[s].rc;
            }
            if (slots[s].alive && all_alive(c, slots)) {
                deadline = dcps_now_ms() + wait;
                for (int t = 0; t < c->cfg.n_shards; t++)
                    slots[t].alive = false;
            }
        }
    }
    return rc;
}

/* The first slot still unanswered after `attempts` attempts over waited ms
 * fails with DCPS_E_TIMEOUT and a sentence; 0 if every slot was answered. */
static int unanswered(dcps_client_t *c, const slot_t *slots, int attempts, double waited,
                      int attempt_ms)
{
    for (int s = 0; s < c->cfg.n_shards; s++)
        if (slots[s].active && !slots[s].done) {
            bool first = slots[s].req.type == DCPS_MSG_HELLO;
            return fail(c, DCPS_E_TIMEOUT,
                        "shard %d (%s) did not answer %s: %d attempts over %.1f s (the first "
                        "waited %d ms)%s%s",
                        s, c->cfg.shards[s], dcps_msg_type_name(slots[s].req.type), attempts,
                        waited / 1000.0, attempt_ms,
                        c->conn[s].told_refused ? "; it refused every connection" : "",
                        first ? "; is dcps-server running there, and is [servers] shards "
                                "right?"
                              : "");
        }
    return 0;
}

/* Sends every active slot, collects the replies (calling fn for each good one)
 * and resends what is unanswered, up to `attempts` times with backoff
 * (attempt_wait). Returns the first slot's error, or 0. With `sent`, the
 * slots were stamped and their first attempt sent already (a push in given
 * parts): the first attempt only collects. */
static int exchange_sent(dcps_client_t *c, slot_t *slots, reply_fn fn, void *arg, int attempt_ms,
                         int attempts, bool sent)
{
    int rc = 0, attempt = 0;
    double waited = 0;

    c->until_ms = dcps_now_ms();
    for (int a = 0; a < attempts; a++)
        c->until_ms += attempt_wait(attempt_ms, a);
    c->quiet_refusals = false;
    for (int s = 0; s < c->cfg.n_shards; s++)
        c->quiet_refusals |= slots[s].active && slots[s].req.type == DCPS_MSG_BYE;
    for (; attempt < attempts && rc == 0; attempt++) {
        int pending = 0;
        int wait = attempt_wait(attempt_ms, attempt);
        if (attempt == 0 && sent)
            for (int s = 0; s < c->cfg.n_shards; s++)
                pending += slots[s].active && !slots[s].done;
        else
            rc = send_round(c, slots, attempt, attempts, waited, wait, &pending);
        if (attempt > 0)
            c->stats.retries += (uint64_t)pending;
        waited += wait;
        if (rc == 0)
            rc = collect(c, slots, fn, arg, wait, &pending);
        if (rc == 0 && pending == 0)
            break;
    }
    if (rc == 0)
        rc = unanswered(c, slots, attempt, waited, attempt_ms);
    settle(c);
    return rc;
}

static int exchange(dcps_client_t *c, slot_t *slots, reply_fn fn, void *arg, int attempt_ms,
                    int attempts)
{
    c->ahead_ready = false; /* pulls ahead stand only for the pull right after their push */
    stamp(c, slots);
    return exchange_sent(c, slots, fn, arg, attempt_ms, attempts, false);
}

static void slots_all(dcps_client_t *c, slot_t *slots, uint32_t type, uint32_t want)
{
    memset(slots, 0, sizeof(slot_t) * DCPS_MAX_SHARDS);
    for (int s = 0; s < c->cfg.n_shards; s++) {
        slots[s].active = true;
        slots[s].req.type = type;
        slots[s].want = want;
    }
}

/* What to do when a shard's WELCOME describes another job shape than this
 * worker's: the first of the differences that decides it. */
static const char *shape_advice(const dcps_client_t *c, const dcps_msg_t *m)
{
    if (m->workers != (uint32_t)c->cfg.workers)
        return "the shards and this worker read different [job] workers: give every shard and "
               "worker the same job file and the same --set overrides (launch-local.sh -w N "
               "sets it for all of them), and restart the shards after changing it (a running "
               "shard keeps the count it started with)";
    if (m->n_params != c->cfg.n_params)
        return "the shards and this worker read different [model] params or layers: give them "
               "the same job file and overrides";
    return "the shards and this worker split the model differently: is [servers] shards the "
           "same list, in the same order, for both?";
}

static int on_welcome(dcps_client_t *c, int s, const dcps_msg_t *m, void *arg)
{
    conn_t *k = &c->conn[s];
    if (m->range_lo != k->range.lo || m->range_hi != k->range.hi ||
        m->n_params != c->cfg.n_params || m->workers != (uint32_t)c->cfg.workers)
        return fail(c, DCPS_E_SIZE,
                    "shard %d (%s) serves [%llu, %llu) of %llu parameters for %u workers; this "
                    "job expects [%llu, %llu) of %llu for %d: %s",
                    s, c->cfg.shards[s], (unsigned long long)m->range_lo,
                    (unsigned long long)m->range_hi, (unsigned long long)m->n_params, m->workers,
                    (unsigned long long)k->range.lo, (unsigned long long)k->range.hi,
                    (unsigned long long)c->cfg.n_params, c->cfg.workers, shape_advice(c, m));
    k->initialized = m->initialized;
    uint64_t *first = arg;
    if (m->step < *first)
        *first = m->step;
    return 0;
}

/* Adds the parameter group table, if the worker has one, as m's next two
 * frames (docs/protocol.md, "Parameter groups"). */
static void add_groups(const dcps_client_t *c, dcps_msg_t *m)
{
    if (!c->n_groups)
        return;
    m->frame[m->nframes] = (dcps_frame_desc_t){DCPS_FRAME_GROUP_RANGES, DCPS_DTYPE_U32,
                                               2 * c->n_ranges};
    m->payload[m->nframes++] = (dcps_buf_t){c->group_ranges, 2 * c->n_ranges * sizeof(uint32_t)};
    m->frame[m->nframes] = (dcps_frame_desc_t){DCPS_FRAME_GROUP_OPTIONS, DCPS_DTYPE_F64,
                                               2 * c->n_groups};
    m->payload[m->nframes++] = (dcps_buf_t){c->group_opts, 2 * c->n_groups * sizeof(double)};
}

/* How often a HELLO is asked again while a shard waits for rank 0 to size the
 * model (NOTREADY), at most. */
#define NOTREADY_EVERY_MS 100

/* Says HELLO to every shard. A shard that still hears this rank's previous
 * process refuses (DCPS_E_LIVE) until that one has been silent for
 * dead_after_ms: asked again until then. A shard of a [model] params = auto
 * job that has not heard rank 0 yet does not know the model's size and answers
 * DCPS_E_NOTREADY: asked again every NOTREADY_EVERY_MS (or heartbeat_ms, if
 * shorter) for as long as the retries of an unanswered request would wait, so
 * the ranks may start in any order. The clock starts at the earliest step a
 * shard expects from this rank. */
static int hello(dcps_client_t *c)
{
    slot_t slots[DCPS_MAX_SHARDS];
    double start = dcps_now_ms(), until = start + c->cfg.dead_after_ms + 2.0 * c->cfg.heartbeat_ms;
    double patience = 0;
    for (int a = 0; a <= c->cfg.retries; a++)
        patience += attempt_wait(c->cfg.timeout_ms, a);
    int every = c->cfg.heartbeat_ms < NOTREADY_EVERY_MS ? c->cfg.heartbeat_ms : NOTREADY_EVERY_MS;
    uint64_t first = UINT64_MAX;
    int rc;
    bool told = false;
    for (;;) {
        slots_all(c, slots, DCPS_MSG_HELLO, DCPS_MSG_WELCOME);
        for (int s = 0; s < c->cfg.n_shards; s++) {
            slots[s].req.n_params = c->cfg.n_params;
            add_groups(c, &slots[s].req);
        }
        rc = exchange(c, slots, on_welcome, &first, c->cfg.timeout_ms, c->cfg.retries + 1);
        if (rc == DCPS_E_LIVE && dcps_now_ms() <= until) {
            nanosleep(&(struct timespec){c->cfg.heartbeat_ms / 1000,
                                         (c->cfg.heartbeat_ms % 1000) * 1000000L},
                      NULL);
        } else if (rc == DCPS_E_NOTREADY && dcps_now_ms() <= start + patience) {
            if (!told)
                DCPS_INFO("%s; waiting up to %.1f s", c->err, patience / 1000);
            told = true;
            nanosleep(&(struct timespec){every / 1000, (every % 1000) * 1000000L}, NULL);
        } else {
            break;
        }
    }
    if (rc == DCPS_E_NOTREADY) {
        char why[sizeof c->err];
        snprintf(why, sizeof why, "%s", c->err);
        fail(c, rc, "%s; asked for %.1f s: is rank 0 running?", why, (dcps_now_ms() - start) / 1000);
    }
    if (rc == 0 && first != UINT64_MAX && first > c->clock)
        c->clock = first;
    return rc;
}

/* The heartbeat thread: its own socket per shard, a HEARTBEAT to a shard once
 * heartbeat_ms have passed without a request or heartbeat to it (a busy worker's
 * requests are its sign of life: a second connection that carried a message a
 * second for nothing would only cost the shard), echoes read and dropped. */
static void *heartbeat_main(void *arg)
{
    dcps_client_t *c = arg;
    void *sock[DCPS_MAX_SHARDS] = {0};
    zmq_pollitem_t items[DCPS_MAX_SHARDS];
    int n = c->cfg.n_shards, linger = 0;
    int64_t every = (int64_t)c->cfg.heartbeat_ms * 1000;
    uint64_t seq = 0;
    for (int s = 0; s < n; s++) {
        sock[s] = zmq_socket(c->ctx, ZMQ_DEALER);
        if (!sock[s] || curve_client(c, sock[s]) != 0 ||
            zmq_connect(sock[s], c->cfg.shards[s]) != 0) {
            DCPS_WARN("heartbeats to shard %d (%s) not sent: %s", s, c->cfg.shards[s],
                      zmq_strerror(errno));
            n = s + (sock[s] != NULL);
            goto out;
        }
        zmq_setsockopt(sock[s], ZMQ_LINGER, &linger, sizeof linger);
        items[s] = (zmq_pollitem_t){sock[s], 0, ZMQ_POLLIN, 0};
    }
    while (!atomic_load(&c->heartbeat_stop)) {
        int64_t now = dcps_now_us(), next = now + every;
        for (int s = 0; s < n; s++) {
            int64_t due = atomic_load(&c->conn[s].sent_us) + every;
            if (due <= now) {
                dcps_msg_t m = {.type = DCPS_MSG_HEARTBEAT, .job_id = c->cfg.job_id,
                                .rank = (uint32_t)c->rank, .seq = ++seq,
                                .session = c->session, .shard = (uint32_t)s};
                dcps_frames_send(sock[s], NULL, &m, NULL, NULL, ZMQ_DONTWAIT);
                atomic_store(&c->conn[s].sent_us, now);
                due = now + every;
            }
            if (due < next)
                next = due;
        }
        /* Until the next is due, in steps of at most 50 ms to see heartbeat_stop. */
        int64_t left;
        while (!atomic_load(&c->heartbeat_stop) && (left = next - dcps_now_us()) > 0) {
            if (zmq_poll(items, n, left < 50000 ? (long)(left / 1000) + 1 : 50) <= 0)
                continue;
            for (int s = 0; s < n; s++) {
                dcps_frames_t f;
                while (dcps_frames_recv(sock[s], &f, ZMQ_DONTWAIT) > 0)
                    dcps_frames_close(&f);
            }
        }
    }
out:
    for (int s = 0; s < n; s++)
        zmq_close(sock[s]);
    return NULL;
}

dcps_client_t *dcps_client_new(const struct dcps_config *cfg, int rank, int *err, char *errbuf,
                               size_t errlen)
{
    dcps_client_t *c = calloc(1, sizeof *c);
    int rc;
    if (!c) {
        *err = DCPS_E_NOMEM;
        snprintf(errbuf, errlen, "out of memory");
        return NULL;
    }
    c->cfg = *cfg;
    c->rank = rank;
    c->lr = NAN;
    for (int s = 0; s < DCPS_MAX_SHARDS; s++)
        c->conn[s].lr = NAN;
    if (cfg->n_params == 0) {
        rc = fail(c, DCPS_E_CONFIG,
                  "the model's size is not known: with [model] params = auto, the program "
                  "sets the configuration's n_params to its model's parameter count before "
                  "it opens the client");
        goto fail;
    }
    if (rank < 0 || rank >= cfg->workers) {
        rc = fail(c, DCPS_E_RANK, "rank %d is outside the job's %d workers", rank, cfg->workers);
        goto fail;
    }
    if (cfg->curve && (rc = load_keys(c)) != 0)
        goto fail;
    /* A restarted worker is a new session: its seqs may start from 1 again. The
     * top bit is set: never 0, and every header has the same size (a varint of
     * 10 bytes), so byte counts do not depend on the draw. */
    ssize_t got;
    while ((got = getrandom(&c->session, sizeof c->session, 0)) < 0 && errno == EINTR)
        ;
    if (got != (ssize_t)sizeof c->session) {
        rc = fail(c, DCPS_E_IO, "cannot draw a random session: %s",
                  got < 0 ? strerror(errno) : "short read");
        goto fail;
    }
    c->session |= 1ull << 63;
    c->ctx = zmq_ctx_new();
    if (!c->ctx) {
        rc = fail(c, DCPS_E_ZMQ, "cannot create a ZeroMQ context: %s", zmq_strerror(errno));
        goto fail;
    }
    for (int s = 0; s < cfg->n_shards; s++) {
        c->conn[s].range = dcps_shardmap_range(cfg->n_params, cfg->n_shards, s);
        if ((rc = connect_shard(c, s)) != 0)
            goto fail;
    }
    if ((rc = hello(c)) != 0)
        goto fail;
    if ((rc = pthread_create(&c->heartbeat, NULL, heartbeat_main, c)) != 0) {
        rc = fail(c, DCPS_E_NOMEM, "cannot start the heartbeat thread: %s", strerror(rc));
        goto fail;
    }
    c->heartbeat_running = true;
    return c;

fail:
    *err = rc;
    snprintf(errbuf, errlen, "%s", c->err);
    dcps_client_close(&c);
    return NULL;
}

dcps_client_t *dcps_client_open(const char *job_file, int rank, const char *const *overrides,
                                size_t n_overrides, int *err, char *errbuf, size_t errlen)
{
    dcps_config_t *cfg = malloc(sizeof *cfg);
    if (!cfg) {
        *err = DCPS_E_NOMEM;
        snprintf(errbuf, errlen, "out of memory");
        return NULL;
    }
    dcps_client_t *c = NULL;
    *err = dcps_config_load(cfg, job_file, overrides, n_overrides, errbuf, errlen);
    if (*err == 0 && cfg->n_params == 0) {
        /* dcps_client_new's sentence speaks of the loaded configuration, which
         * a caller of this function never holds. */
        *err = DCPS_E_CONFIG;
        snprintf(errbuf, errlen,
                 "%s: [model] params = auto, and dcps_client_open has no model to take the size "
                 "from: pass the override \"model.params=N\" with the model's parameter count "
                 "N, or open the worker with dcps_step_open (<dcps/step.h>), which takes it",
                 job_file);
    } else if (*err == 0) {
        c = dcps_client_new(cfg, rank, err, errbuf, errlen);
    }
    free(cfg);
    return c;
}

void dcps_client_close(dcps_client_t **cp)
{
    dcps_client_t *c = *cp;
    if (!c)
        return;
    if (c->heartbeat_running) {
        atomic_store(&c->heartbeat_stop, true);
        pthread_join(c->heartbeat, NULL);
    }
    if (c->ctx && c->conn[c->cfg.n_shards - 1].sock && !c->refused) {
        /* Best effort and brief: a shard that is gone must not delay the exit
         * (nor one that refused this worker's key, which would never answer). */
        slot_t slots[DCPS_MAX_SHARDS];
        slots_all(c, slots, DCPS_MSG_BYE, DCPS_MSG_BYE);
        exchange(c, slots, NULL, NULL, c->cfg.timeout_ms < 500 ? c->cfg.timeout_ms : 500, 1);
    }
    for (int s = 0; s < c->cfg.n_shards; s++)
        disconnect_shard(c, s);
    if (c->ctx)
        zmq_ctx_term(c->ctx);
    explicit_bzero(c->secret_key, sizeof c->secret_key);
    free(c->group_ranges);
    free(c->group_opts);
    free(c->qbuf);
    free(c->qdec);
    free(c->given);
    free(c->ahead);
    free(c->given_src);
    for (size_t i = 0; c->given_coded && i < (size_t)c->cfg.n_shards * DCPS_PARTS_MAX; i++)
        free(c->given_coded[i].bytes);
    free(c->given_coded);
    free(c);
    *cp = NULL;
}

uint64_t dcps_client_num_params(const dcps_client_t *c)
{
    return c->cfg.n_params;
}

int dcps_client_initialized(const dcps_client_t *c)
{
    for (int s = 0; s < c->cfg.n_shards; s++)
        if (!c->conn[s].initialized)
            return 0;
    return 1;
}

static void set_dense(dcps_msg_t *m, const float *v, uint64_t n)
{
    m->nframes = 1;
    m->frame[0] = (dcps_frame_desc_t){DCPS_FRAME_DENSE, DCPS_DTYPE_F32, n};
    m->payload[0] = (dcps_buf_t){v, n * sizeof *v};
}

static int on_init_ack(dcps_client_t *c, int s, const dcps_msg_t *m, void *arg)
{
    c->conn[s].initialized = true;
    return 0;
}

int dcps_client_init(dcps_client_t *c, const float *params)
{
    slot_t slots[DCPS_MAX_SHARDS];
    if (c->rank != 0)
        return fail(c, DCPS_E_STATE, "only rank 0 initialises parameters");
    slots_all(c, slots, DCPS_MSG_INIT, DCPS_MSG_PUSH_ACK);
    for (int s = 0; s < c->cfg.n_shards; s++) {
        const dcps_range_t *r = &c->conn[s].range;
        slots[s].active = !c->conn[s].initialized;
        set_dense(&slots[s].req, params + r->lo, r->hi - r->lo);
        add_groups(c, &slots[s].req);
    }
    return exchange(c, slots, on_init_ack, NULL, c->cfg.timeout_ms, c->cfg.retries + 1);
}

int dcps_client_set_groups(dcps_client_t *c, const uint32_t *ranges, size_t n_ranges,
                           const double *opts, size_t n_groups)
{
    uint32_t *r = NULL;
    double *o = NULL;
    if (n_ranges == 0 || n_groups == 0)
        return fail(c, DCPS_E_INVAL, "a group table has at least one range and one group");
    if (!(r = malloc(2 * n_ranges * sizeof *r)) || !(o = malloc(2 * n_groups * sizeof *o))) {
        free(r);
        return fail(c, DCPS_E_NOMEM, "out of memory for the group table");
    }
    memcpy(r, ranges, 2 * n_ranges * sizeof *r);
    memcpy(o, opts, 2 * n_groups * sizeof *o);
    free(c->group_ranges);
    free(c->group_opts);
    c->group_ranges = r, c->group_opts = o;
    c->n_ranges = n_ranges, c->n_groups = n_groups;
    return hello(c);
}

int dcps_client_wait_ready(dcps_client_t *c, int timeout_ms)
{
    double until = dcps_now_ms() + timeout_ms;
    for (;;) {
        int rc = hello(c);
        if (rc != 0)
            return rc;
        if (dcps_client_initialized(c))
            return 0;
        if (dcps_now_ms() >= until)
            return fail(c, DCPS_E_NOTREADY,
                        "parameters not initialised after %d ms: is rank 0 running?", timeout_ms);
        nanosleep(&(struct timespec){0, 50 * 1000000}, NULL);
    }
}

/* What the shards made of one push. */
typedef struct {
    uint64_t next;      /* the clock after it: the open round, when that is later */
    uint64_t stale;     /* bit s: shard s dropped it (sync: its round had closed) */
    uint64_t back;      /* sync: the round the shards went back to (UINT64_MAX: none) */
} push_acks_t;

static int on_push_ack(dcps_client_t *c, int s, const dcps_msg_t *m, void *arg)
{
    push_acks_t *acks = arg;
    if (m->flags & DCPS_FLAG_DUPLICATE) {
        c->stats.duplicates++;
        return 0;
    }
    if (m->flags & DCPS_FLAG_STALE) {
        c->stats.dropped++;
        acks->stale |= 1ull << s;
        if (m->step <= c->clock && m->step < acks->back)
            acks->back = m->step; /* the shards went back: see push */
        else if (m->step > acks->next)
            acks->next = m->step;
        return 0;
    }
    /* Updates applied between this worker's last pull and its push, its own push
     * not counted: how stale the gradient was when it arrived. (A sync shard
     * names the version before the round, or after it to the push that
     * completed it: 0 either way.) */
    uint64_t pulled = c->conn[s].pulled_version;
    uint64_t st = m->param_version > pulled ? m->param_version - pulled - 1 : 0;
    c->stats.staleness_sum += st;
    c->stats.staleness_count++;
    if (st > c->stats.staleness_max)
        c->stats.staleness_max = st;
    return 0;
}

/* The shards of a sync job went back to round `round`, at or before this
 * worker's clock (docs/algorithms.md, "Restarts"): it goes on from there. */
static void went_back(dcps_client_t *c, uint64_t round)
{
    DCPS_WARN("rank %d: the shards went back to round %" PRIu64 " (a shard restarted, and every "
              "shard restored the newest checkpoint all of them hold): it goes on from there, "
              "at round %" PRIu64 " before",
              c->rank, round, c->clock);
    c->clock = round;
}

/* Gives the pushes for the current step their version and step. */
static void push_stamp(dcps_client_t *c, slot_t *slots)
{
    for (int s = 0; s < c->cfg.n_shards; s++) {
        slots[s].req.param_version = c->conn[s].pulled_version;
        slots[s].req.step = c->clock;
    }
    stamp(c, slots);
}

/* Sends the prepared pushes for the current step (with `sent`: collects the
 * acknowledgements of pushes sent already) and moves the clock on. */
static int push_sent(dcps_client_t *c, slot_t *slots, bool sent)
{
    push_acks_t acks = {c->clock + 1, 0, UINT64_MAX};
    c->ahead_ready = false;
    int rc =
        exchange_sent(c, slots, on_push_ack, &acks, c->cfg.timeout_ms, c->cfg.retries + 1, sent);
    if (rc != 0)
        return rc;
    c->stats.pushes++;
    if (acks.back != UINT64_MAX) {
        /* Sync, several shards: a shard restarted, and every shard went back to
         * the newest checkpoint all of them hold, whose open round is not
         * after this one; what this worker pushed since is gone everywhere. */
        went_back(c, acks.back);
        return 0;
    }
    if (acks.stale) {
        /* Sync: the job went on without this worker (it was declared dead, or
         * stopped): the rounds it missed are gone for it. */
        char dropped[256] = "", took[256] = "";
        for (int s = 0; s < c->cfg.n_shards; s++) {
            char *list = acks.stale >> s & 1 ? dropped : took;
            size_t at = strlen(list);
            snprintf(list + at, sizeof dropped - at, "%s%d", at ? ", " : "", s);
        }
        if (*took)
            DCPS_ERR("step %" PRIu64 ": shards %s dropped this push (their round had closed "
                     "without it) and shards %s applied it: this round's update differs between "
                     "the parts of the model",
                     c->clock, dropped, took);
        DCPS_WARN("rank %d missed rounds %" PRIu64 " to %" PRIu64 ": the job went on without it; "
                  "it goes on at round %" PRIu64,
                  c->rank, c->clock, acks.next - 1, acks.next);
    }
    c->clock = acks.next;
    return 0;
}

static int push(dcps_client_t *c, slot_t *slots)
{
    push_stamp(c, slots);
    return push_sent(c, slots, false);
}

#define DCPS_PART_FLOATS 524288
#define DCPS_PARTS_AUTO 16

uint32_t dcps_parts_for(const dcps_config_t *cfg, uint64_t len, uint64_t shard_len)
{
    uint64_t p = cfg->parts > 0 ? ((uint64_t)cfg->parts * len + shard_len / 2) / shard_len
                                : len / DCPS_PART_FLOATS;
    if (cfg->parts == 0 && p > DCPS_PARTS_AUTO)
        p = DCPS_PARTS_AUTO;
    if (p > len)
        p = len;
    return p < 1 ? 1 : (uint32_t)p;
}

/* The parts a dense message of shard s's range goes in (dcps_parts_for the
 * whole range). */
static uint32_t parts_of(const dcps_client_t *c, int s)
{
    const uint64_t n = c->conn[s].range.hi - c->conn[s].range.lo;
    return dcps_parts_for(&c->cfg, n, n);
}

/* dcps_client_set_reply_parts's count for shard s: at most one part per
 * parameter and DCPS_PARTS_MAX. */
static uint32_t reply_parts(const dcps_client_t *c, int s, uint32_t parts)
{
    const uint64_t n = c->conn[s].range.hi - c->conn[s].range.lo;
    uint64_t p = parts < DCPS_PARTS_MAX ? parts : DCPS_PARTS_MAX;
    return (uint32_t)(p < n ? p : n);
}

size_t dcps_lower_bound(const uint32_t *idx, size_t k, uint64_t x)
{
    size_t lo = 0, hi = k;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (idx[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Makes room for `bytes` of encoded frames in qbuf (kept between pushes). */
static int reserve(dcps_client_t *c, size_t bytes)
{
    if (bytes <= c->qcap)
        return 0;
    uint8_t *p = realloc(c->qbuf, bytes);
    if (!p)
        return fail(c, DCPS_E_NOMEM, "out of memory for %zu bytes of encoded values", bytes);
    c->qbuf = p;
    c->qcap = bytes;
    return 0;
}

/* Whether a push may send its values in dtype: 0, or DCPS_E_INVAL with a
 * sentence (no such format; TWOBIT without a threshold above 0). */
static int value_format(dcps_client_t *c, uint32_t dtype, float tau)
{
    if (dtype != DCPS_DTYPE_F32 && !dcps_quant_is(dtype))
        return fail(c, DCPS_E_INVAL, "no value format %u", dtype);
    if (dtype == DCPS_DTYPE_TWOBIT && !(tau > 0 && isfinite(tau)))
        return fail(c, DCPS_E_INVAL, "twobit needs a threshold above 0, not %g", (double)tau);
    return 0;
}

/* The block of a frame of `count` values in dtype as this client sends it:
 * INT8 in blocks of DCPS_QUANT_BLOCK (one block when the frame has no more). */
static uint32_t block_of(uint32_t dtype, size_t count)
{
    return dtype == DCPS_DTYPE_I8 && count > DCPS_QUANT_BLOCK ? DCPS_QUANT_BLOCK : 0;
}

/* Encodes val[0..count) in the shorter format dtype into out; with lost not
 * NULL, what rounding took from each value (val[j] minus what a shard
 * decodes) goes to lost[0..count). */
static void encode_values(uint32_t dtype, uint32_t block, float tau, const float *val, size_t count,
                          void *out, float *lost)
{
    dcps_quant_encode(dtype, block, tau, val, count, out, lost);
    for (size_t j = 0; lost && j < count; j++)
        lost[j] = val[j] - lost[j];
}

int dcps_client_push_as(dcps_client_t *c, const uint32_t *idx, const float *val, size_t k,
                        uint32_t dtype, float tau, float *lost)
{
    slot_t slots[DCPS_MAX_SHARDS];
    size_t at[DCPS_MAX_SHARDS + 1] = {0}, bytes = 0;
    int rc = value_format(c, dtype, tau);
    if (rc != 0)
        return rc;
    slots_all(c, slots, DCPS_MSG_PUSH, DCPS_MSG_PUSH_ACK);
    for (int s = 0; s < c->cfg.n_shards; s++) {
        const dcps_range_t *r = &c->conn[s].range;
        size_t a = idx ? dcps_lower_bound(idx, k, r->lo) : r->lo;
        size_t b = idx ? dcps_lower_bound(idx, k, r->hi) : r->hi;
        dcps_msg_t *m = &slots[s].req;
        int f = idx ? 1 : 0;
        if (idx) {
            m->frame[0] = (dcps_frame_desc_t){DCPS_FRAME_INDICES, DCPS_DTYPE_U32, b - a};
            m->payload[0] = (dcps_buf_t){idx + a, (b - a) * sizeof *idx};
        }
        m->nframes = f + 1;
        m->frame[f] = (dcps_frame_desc_t){idx ? DCPS_FRAME_VALUES : DCPS_FRAME_DENSE, dtype, b - a};
        m->block[f] = block_of(dtype, b - a);
        m->payload[f] = (dcps_buf_t){val + a, (b - a) * sizeof *val};
        if (!idx && dtype == DCPS_DTYPE_F32) /* shorter values go whole */
            slots[s].parts = parts_of(c, s);
        at[s] = a;
        bytes += dtype == DCPS_DTYPE_F32 ? 0 : (size_t)dcps_quant_bytes(dtype, b - a, m->block[f]);
    }
    if (dtype != DCPS_DTYPE_F32) {
        if ((rc = reserve(c, bytes)) != 0)
            return rc;
        uint8_t *q = c->qbuf;
        for (int s = 0; s < c->cfg.n_shards; s++) {
            dcps_msg_t *m = &slots[s].req;
            int f = m->nframes - 1;
            size_t count = (size_t)m->frame[f].count;
            size_t len = (size_t)dcps_quant_bytes(dtype, count, m->block[f]);
            encode_values(dtype, m->block[f], tau, val + at[s], count, q,
                          lost ? lost + at[s] : NULL);
            m->payload[f] = (dcps_buf_t){q, len};
            q += len;
        }
    } else if (lost) {
        memset(lost, 0, k * sizeof *lost);
    }
    return push(c, slots);
}

int dcps_client_push_dense(dcps_client_t *c, const float *grad)
{
    return dcps_client_push_as(c, NULL, grad, (size_t)c->cfg.n_params,
                               dcps_config_values_dtype(&c->cfg), 0, NULL);
}

int dcps_client_push_sparse(dcps_client_t *c, const uint32_t *idx, const float *val, size_t k)
{
    return dcps_client_push_as(c, idx, val, k, dcps_config_values_dtype(&c->cfg), 0, NULL);
}

static int host_dense(void *arg, uint64_t lo, const float *v, size_t n);

/* Takes part m of a dense PULL_REPLY in parts from shard s: checked against
 * what was asked and the parts before it (the parts of a reply come in order
 * 0, 1, …, each starting where the one before ended, the first at the range's
 * start and the last ending at its end, all naming one count and one version;
 * a part 0 starts the reply again, as the shard sends a retried pull's reply
 * whole), then copied into place at once, while ZeroMQ receives the next.
 * Sets k->more while parts are to come. Returns 0, or a code with a sentence. */
static int reply_part(dcps_client_t *c, int s, const dcps_msg_t *m, const dcps_pull_sink_t *sink,
                      char *why, size_t whylen)
{
    conn_t *k = &c->conn[s];
    const dcps_range_t *r = &k->range;
    if (k->asked_parts <= 1)
        return dcps_say(why, whylen, DCPS_E_FIELD, "part %u of %u, but this pull asked for its "
                        "reply whole", m->part, m->parts);
    if (m->parts == 0 || m->parts > k->asked_parts || m->part >= m->parts)
        return dcps_say(why, whylen, DCPS_E_FIELD, "part %u of %u, this pull asked for %u parts",
                        m->part, m->parts, k->asked_parts);
    if (m->part == 0) {
        k->reply_next = 0;
        k->reply_parts = m->parts;
        k->reply_at = r->lo;
        k->reply_version = m->param_version;
    }
    if (m->part != k->reply_next || m->parts != k->reply_parts ||
        m->param_version != k->reply_version)
        return dcps_say(why, whylen, DCPS_E_FIELD,
                        "part %u of %u of version %llu came where part %u of %u of version %llu "
                        "was due (a part missing, repeated or out of order)",
                        m->part, m->parts, (unsigned long long)m->param_version, k->reply_next,
                        k->reply_parts, (unsigned long long)k->reply_version);
    const bool last = m->part + 1 == m->parts;
    if (m->part_lo != k->reply_at || m->part_hi <= m->part_lo || m->part_hi > r->hi ||
        (last && m->part_hi != r->hi))
        return dcps_say(why, whylen, DCPS_E_FIELD,
                        "part %u of %u covers [%llu, %llu), where [%llu, …) of the range [%llu, "
                        "%llu) was due%s",
                        m->part, m->parts, (unsigned long long)m->part_lo,
                        (unsigned long long)m->part_hi, (unsigned long long)k->reply_at,
                        (unsigned long long)r->lo, (unsigned long long)r->hi,
                        last ? ", up to its end" : "");
    const uint64_t n = m->part_hi - m->part_lo;
    const float *v;
    int rc;
    if (sink->dense == host_dense) {
        rc = dcps_codec_dense_to(m, n, (float *)sink->arg + m->part_lo, why, whylen);
    } else {
        rc = dcps_codec_dense(m, n, &v, why, whylen);
        if (rc == 0 && (rc = sink->dense(sink->arg, m->part_lo, v, n)) != 0)
            snprintf(why, whylen, "%s", dcps_strerror(rc));
    }
    if (rc != 0)
        return rc;
    k->reply_next++;
    k->reply_at = m->part_hi;
    k->more = !last;
    return 0;
}

static int on_pull_reply(dcps_client_t *c, int s, const dcps_msg_t *m, void *arg)
{
    const dcps_pull_sink_t *sink = arg;
    conn_t *k = &c->conn[s];
    const dcps_range_t *r = &k->range;
    const float *v;
    const uint32_t *idx;
    size_t n;
    char why[DCPS_ERROR_TEXT_MAX] = "";
    int rc;
    bool held = k->holds;
    k->holds = false; /* until this reply is known good */
    if ((m->flags & DCPS_FLAG_STALE) && m->step < c->back)
        c->back = m->step; /* the shards went back (pull): still the parameters */
    if (m->has & DCPS_HAS_PART) {
        if ((rc = reply_part(c, s, m, sink, why, sizeof why)) != 0)
            return fail(c, rc, "shard %d (%s) sent a bad PULL_REPLY part: %s", s,
                        c->cfg.shards[s], why);
        if (k->more) {
            k->holds = held; /* until the last part */
            return 0;
        }
        rc = 0;
    } else if (m->nframes == 2) {
        rc = dcps_codec_sparse(m, r->lo, r->hi, &idx, &v, &n, why, sizeof why);
        if (rc == 0 && !held) {
            snprintf(why, sizeof why, "a delta, but this worker holds no copy to add it to");
            rc = DCPS_E_STATE;
        }
        if (rc == 0)
            rc = sink->delta(sink->arg, idx, v, n);
    } else if (sink->dense == host_dense) {
        /* A host array: checked in the pass that copies it, one read of the reply
         * (on failure the array may be partly updated, as dcps_client_pull says). */
        rc = dcps_codec_dense_to(m, r->hi - r->lo, (float *)sink->arg + r->lo, why, sizeof why);
    } else {
        rc = dcps_codec_dense(m, r->hi - r->lo, &v, why, sizeof why);
        if (rc == 0)
            rc = sink->dense(sink->arg, r->lo, v, r->hi - r->lo);
    }
    if (rc != 0 && *why == '\0') /* the sink's own failure */
        return fail(c, rc, "shard %d (%s): taking its PULL_REPLY: %s", s, c->cfg.shards[s],
                    dcps_strerror(rc));
    if (rc != 0)
        return fail(c, rc, "shard %d (%s) sent a bad PULL_REPLY: %s", s, c->cfg.shards[s], why);
    k->pulled_version = m->param_version;
    k->holds = c->cfg.pull == DCPS_PULL_DELTA && !(k->pull_flags & DCPS_FLAG_EXACT);
    k->lr = m->has & DCPS_HAS_LR ? m->lr : NAN;
    return 0;
}

/* The mean of the lrs the shards said in their last PULL_REPLY; NaN if none did. */
static double shards_lr(const dcps_client_t *c)
{
    double sum = 0;
    int n = 0;
    for (int s = 0; s < c->cfg.n_shards; s++)
        if (!isnan(c->conn[s].lr)) {
            sum += c->conn[s].lr;
            n++;
        }
    return n ? sum / n : NAN;
}

/* The sink of a pull into a host array: what the shard sent, in place. */
static int host_dense(void *arg, uint64_t lo, const float *v, size_t n)
{
    memcpy((float *)arg + lo, v, n * sizeof *v);
    return 0;
}

static int host_delta(void *arg, const uint32_t *idx, const float *val, size_t k)
{
    dcps_scatter_add_cpu(arg, idx, val, k, 1.0f); /* as the shard did to its mirror */
    return 0;
}

/* Shard s's PULL for step `step` in sl, its reply in `parts` parts if dense
 * (0: [compression] parts' choice). */
static void pull_slot(dcps_client_t *c, int s, slot_t *sl, bool exact, uint64_t step,
                      uint32_t parts)
{
    conn_t *k = &c->conn[s];
    k->pull_flags = exact ? DCPS_FLAG_EXACT : k->holds ? DCPS_FLAG_DELTA : 0;
    sl->req.flags = k->pull_flags;
    if (k->pull_flags == DCPS_FLAG_DELTA && c->pull_density > 0) /* want needs DELTA */
        sl->req.want = dcps_config_entries(c->pull_density, (size_t)(k->range.hi - k->range.lo));
    sl->req.param_version = k->pulled_version;
    sl->req.step = step;
    /* replies in a shorter format ([compression] values) come whole */
    if (dcps_config_values_dtype(&c->cfg) != DCPS_DTYPE_F32)
        k->asked_parts = 1;
    else
        k->asked_parts = parts ? reply_parts(c, s, parts) : parts_of(c, s);
    k->reply_next = 0;
    if (k->asked_parts > 1) {
        sl->req.has |= DCPS_HAS_PART;
        sl->req.parts = k->asked_parts;
    }
}

/* Sends shard s's PULL of the step after the push in parts being given (a
 * pull ahead: its push's parts were all given). The pull after the push's
 * end collects its reply. */
static int pull_ahead(dcps_client_t *c, int s)
{
    slot_t *sl = &c->ahead[s];
    pull_slot(c, s, sl, false, c->clock + 1, c->ahead_parts);
    stamp_one(c, s, sl);
    sl->early = true;
    return send_msg(c, s, &sl->req);
}

static int pull(dcps_client_t *c, const dcps_pull_sink_t *sink, bool exact)
{
    slot_t slots[DCPS_MAX_SHARDS];
    int rc;
    c->back = UINT64_MAX;
    if (c->ahead_ready && !exact) {
        memcpy(slots, c->ahead, sizeof slots);
        c->ahead_ready = false;
        rc = exchange_sent(c, slots, on_pull_reply, (void *)sink, c->cfg.timeout_ms,
                           c->cfg.retries + 1, false);
    } else {
        slots_all(c, slots, DCPS_MSG_PULL, DCPS_MSG_PULL_REPLY);
        for (int s = 0; s < c->cfg.n_shards; s++)
            pull_slot(c, s, &slots[s], exact, c->clock, c->reply_parts);
        rc = exchange(c, slots, on_pull_reply, (void *)sink, c->cfg.timeout_ms,
                      c->cfg.retries + 1);
    }
    if (rc == 0 && c->back <= c->clock) {
        /* Sync, several shards: they went back to a checkpoint all of them
         * hold; a shard that answered before it did is asked again. */
        went_back(c, c->back);
        return pull(c, sink, exact);
    }
    if (rc == 0) {
        c->stats.pulls++;
        c->stats.version = 0;
        for (int s = 0; s < c->cfg.n_shards; s++)
            c->stats.version += c->conn[s].version;
        c->lr = shards_lr(c);
    }
    return rc;
}

void dcps_client_set_pull_density(dcps_client_t *c, double density)
{
    c->pull_density = density;
}

int dcps_client_pull(dcps_client_t *c, float *params)
{
    dcps_pull_sink_t sink = {host_dense, host_delta, params};
    return pull(c, &sink, false);
}

int dcps_client_pull_exact(dcps_client_t *c, float *params)
{
    dcps_pull_sink_t sink = {host_dense, host_delta, params};
    return pull(c, &sink, true);
}

int dcps_client_pull_to(dcps_client_t *c, const dcps_pull_sink_t *sink, int exact)
{
    return pull(c, sink, exact != 0);
}

int dcps_client_done(dcps_client_t *c)
{
    slot_t slots[DCPS_MAX_SHARDS];
    slots_all(c, slots, DCPS_MSG_DONE, DCPS_MSG_DONE);
    return exchange(c, slots, NULL, NULL, c->cfg.timeout_ms, c->cfg.retries + 1);
}

/* A BARRIER answered STALE: the others passed this barrier without this rank
 * (it was declared dead meanwhile), and the parameters have moved since. */
static int on_barrier(dcps_client_t *c, int s, const dcps_msg_t *m, void *arg)
{
    if (m->flags & DCPS_FLAG_STALE)
        *(int *)arg |= 1 << s;
    return 0;
}

int dcps_client_barrier(dcps_client_t *c, uint64_t step)
{
    slot_t slots[DCPS_MAX_SHARDS];
    int late = 0;
    slots_all(c, slots, DCPS_MSG_BARRIER, DCPS_MSG_BARRIER);
    for (int s = 0; s < c->cfg.n_shards; s++)
        slots[s].req.step = step;
    int rc = exchange(c, slots, on_barrier, &late, c->cfg.timeout_ms, c->cfg.retries + 1);
    if (rc == 0 && late)
        DCPS_WARN("rank %d reached barrier %" PRIu64 " after the other ranks had passed it "
                  "without it (it was declared dead meanwhile), and the parameters have moved "
                  "since: what this rank evaluates after it is not what they evaluated",
                  c->rank, step);
    return rc;
}

/* Where a BUFFERS reply goes, and whether it carried the job's buffers. */
typedef struct {
    float *floats;
    double *ints;
    size_t n_floats, n_ints;
    int took;
} buffers_sink_t;

static int on_buffers(dcps_client_t *c, int s, const dcps_msg_t *m, void *arg)
{
    buffers_sink_t *b = arg;
    const void *f, *i;
    size_t nf, ni;
    bool any;
    char why[DCPS_ERROR_TEXT_MAX] = "";
    int rc = dcps_codec_buffers(m, &f, &nf, &i, &ni, &any, why, sizeof why);
    if (rc != 0)
        return fail(c, rc, "shard %d (%s) sent a bad BUFFERS reply: %s", s, c->cfg.shards[s],
                    why);
    if (!any)
        return 0;
    if (nf != b->n_floats || ni != b->n_ints)
        return fail(c, DCPS_E_SIZE,
                    "the job's buffers are %zu floating-point and %zu integer values, this "
                    "worker's model has %zu and %zu: every rank's model must have the same buffers",
                    nf, ni, b->n_floats, b->n_ints);
    memcpy(b->floats, f, nf * sizeof *b->floats);
    memcpy(b->ints, i, ni * sizeof *b->ints);
    b->took = 1;
    return 0;
}

int dcps_client_buffers(dcps_client_t *c, int mode, int publish, const float *floats,
                        size_t n_floats, const double *ints, size_t n_ints, float *out_floats,
                        double *out_ints)
{
    static const uint32_t flags[] = {[DCPS_BUFFERS_RANK0] = 0,
                                     [DCPS_BUFFERS_AVERAGE] = DCPS_FLAG_AVERAGE,
                                     [DCPS_BUFFERS_LOCAL] = DCPS_FLAG_LOCAL};
    slot_t slots[DCPS_MAX_SHARDS];
    buffers_sink_t sink = {out_floats, out_ints, n_floats, n_ints, 0};
    if (mode < DCPS_BUFFERS_RANK0 || mode > DCPS_BUFFERS_LOCAL)
        return fail(c, DCPS_E_INVAL, "buffers mode %d is none of rank0, average, local", mode);
    slots_all(c, slots, DCPS_MSG_BUFFERS, DCPS_MSG_BUFFERS);
    for (int s = 1; s < c->cfg.n_shards; s++)
        slots[s].active = false; /* shard 0 keeps them */
    dcps_msg_t *m = &slots[0].req;
    m->flags = flags[mode];
    if (publish) {
        m->nframes = 2;
        m->frame[0] = (dcps_frame_desc_t){DCPS_FRAME_BUFFER_FLOATS, DCPS_DTYPE_F32, n_floats};
        m->payload[0] = (dcps_buf_t){floats, n_floats * sizeof *floats};
        m->frame[1] = (dcps_frame_desc_t){DCPS_FRAME_BUFFER_INTS, DCPS_DTYPE_F64, n_ints};
        m->payload[1] = (dcps_buf_t){ints, n_ints * sizeof *ints};
    }
    int rc = exchange(c, slots, on_buffers, &sink, c->cfg.timeout_ms, c->cfg.retries + 1);
    return rc != 0 ? rc : sink.took;
}

void dcps_client_stats(const dcps_client_t *c, dcps_client_stats_t *out)
{
    *out = c->stats;
    out->clock = c->clock;
}

double dcps_client_lr(const dcps_client_t *c)
{
    return c->lr;
}

const char *dcps_client_error(const dcps_client_t *c)
{
    return c->err;
}

int dcps_client_parts_begin(dcps_client_t *c, const uint32_t *parts, uint32_t pull_parts)
{
    const int S = c->cfg.n_shards;
    for (int s = 0; s < S; s++)
        if (parts[s] < 1 || parts[s] > DCPS_PARTS_MAX)
            return fail(c, DCPS_E_INVAL, "shard %d: a push in %u parts (1 to %d)", s, parts[s],
                        DCPS_PARTS_MAX);
    if (!c->given) {
        c->given = calloc(DCPS_MAX_SHARDS, sizeof *c->given); /* as slots_all clears */
        c->ahead = calloc(DCPS_MAX_SHARDS, sizeof *c->ahead);
        c->given_src = calloc((size_t)S * DCPS_PARTS_MAX, sizeof *c->given_src);
        c->given_coded = calloc((size_t)S * DCPS_PARTS_MAX, sizeof *c->given_coded);
        if (!c->given || !c->ahead || !c->given_src || !c->given_coded) {
            free(c->given);
            free(c->ahead);
            free(c->given_src);
            free(c->given_coded);
            c->given = c->ahead = NULL;
            c->given_src = NULL;
            c->given_coded = NULL;
            return fail(c, DCPS_E_NOMEM, "out of memory for a push in parts");
        }
    }
    settle(c); /* a push in parts that failed may have left frames of its coded parts */
    slots_all(c, c->given, DCPS_MSG_PUSH, DCPS_MSG_PUSH_ACK);
    slots_all(c, c->ahead, DCPS_MSG_PULL, DCPS_MSG_PULL_REPLY);
    /* A dense pull changes nothing on the shard: one whose push is refused
     * or sent back (sync) is dropped, and its reply with it. A delta or dense
     * pull of a job of delta pulls moves the shard's mirror of this worker. */
    c->ahead_parts = c->cfg.pull == DCPS_PULL_DENSE ? pull_parts : 0;
    c->ahead_ready = false;
    for (int s = 0; s < S; s++) {
        c->given[s].parts = parts[s];
        c->given[s].src = c->given_src + (size_t)s * DCPS_PARTS_MAX;
        c->given[s].coded = c->given_coded + (size_t)s * DCPS_PARTS_MAX;
    }
    push_stamp(c, c->given);
    return 0;
}

/* The mask of a push's parts 0 .. parts - 1. */
static uint64_t all_parts(uint32_t parts)
{
    return parts >= 64 ? ~0ull : (1ull << parts) - 1;
}

int dcps_client_parts_send(dcps_client_t *c, int s, uint32_t i, const dcps_push_part_t *p)
{
    slot_t *sl = c->given ? &c->given[s] : NULL;
    if (!sl || !sl->active || i >= sl->parts || (sl->given >> i & 1))
        return fail(c, DCPS_E_STATE, "part %u of shard %d: no push in parts expects it", i, s);
    int rc = value_format(c, p->dtype, p->tau);
    if (rc != 0)
        return rc;
    const size_t count = p->idx ? p->k : (size_t)(p->hi - p->lo);
    if (p->dtype != DCPS_DTYPE_F32) {
        coded_t *q = &c->given_coded[(size_t)s * DCPS_PARTS_MAX + i];
        const uint32_t block = block_of(p->dtype, count);
        const size_t len = (size_t)dcps_quant_bytes(p->dtype, count, block);
        if (len > q->cap || !q->bytes) { /* an empty part's frame points somewhere too */
            uint8_t *b = realloc(q->bytes, len ? len : 1);
            if (!b)
                return fail(c, DCPS_E_NOMEM, "out of memory for %zu bytes of part %u of shard %d",
                            len, i, s);
            q->bytes = b;
            q->cap = len ? len : 1;
        }
        encode_values(p->dtype, block, p->tau, p->val, count, q->bytes, p->lost);
        q->len = len;
        q->block = block;
    } else if (p->lost) {
        memset(p->lost, 0, count * sizeof *p->lost);
    }
    c->given_src[(size_t)s * DCPS_PARTS_MAX + i] = *p;
    sl->given |= 1ull << i;
    rc = send_part(c, s, sl, i);
    if (rc == 0 && c->ahead_parts && sl->given == all_parts(sl->parts))
        rc = pull_ahead(c, s);
    return rc;
}

int dcps_client_parts_end(dcps_client_t *c)
{
    for (int s = 0; c->given && s < c->cfg.n_shards; s++)
        if (c->given[s].given != all_parts(c->given[s].parts))
            return fail(c, DCPS_E_STATE, "shard %d: parts of the push were not given", s);
    if (!c->given)
        return fail(c, DCPS_E_STATE, "no push in parts was begun");
    const uint64_t next = c->clock + 1;
    int rc = push_sent(c, c->given, true);
    for (int s = 0; s < c->cfg.n_shards; s++)
        c->given[s].active = false;
    /* the pulls ahead asked for the step the push was for plus one */
    c->ahead_ready = rc == 0 && c->ahead_parts && c->clock == next;
    return rc;
}

void dcps_client_set_reply_parts(dcps_client_t *c, uint32_t parts)
{
    c->reply_parts = parts;
}
