/* dcps — robustness: a client that sends garbage and malformed messages to a
 * real shard gets an ERROR reply for each, with the right code, nothing of them
 * is applied, and a worker training at the same time is not affected at all.
 * Identity: only the session a rank's HELLO opened speaks for it (a stranger
 * can neither push, pull, heartbeat nor say BYE for a live rank), sequence
 * numbers count within a session, a restarted worker's new session retires the
 * old one once that is silent, and a colliding routing id cuts nobody off. */
#include <check.h>

#include "tests/check_run.h"
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "common/config.h"
#include "common/error.h"
#include "proto/frame.h"
#include "common/shardmap.h"
#include "common/rng.h"
#include "dcps.pb-c.h"
#include "proto/codec.h"
#include "tests/harness.h"
#include "worker/dcps.h"

#define DATA "/usr/share/datasets/fashion-mnist/"

static const char *job(int workers, const char *shards)
{
    static char text[2048];
    snprintf(text, sizeof text,
             "[job]\nname = robust\nworkers = %d\n"
             "[servers]\nshards = %s\n"
             "[model]\nlayers = 784,32,10\n"
             "[data]\ntrain_images = " DATA "train-images-idx3-ubyte.gz\n"
             "train_labels = " DATA "train-labels-idx1-ubyte.gz\n"
             "test_images = " DATA "t10k-images-idx3-ubyte.gz\n"
             "test_labels = " DATA "t10k-labels-idx1-ubyte.gz\n"
             "batch_size = 32\nepochs = 1\ntrain_limit = 6000\n"
             "[optimizer]\nlr = 0.1\n[worker]\nlog_every = 50\n",
             workers, shards);
    return h_write("job.ini", text);
}

static dcps_config_t cfg;
static void *ctx, *sock;
static float *p0, *got;
/* The session sock's requests name (HELLO opens it); 0: a stranger's socket. */
static uint64_t session;
#define SESSION_A 0x3f2a9c01deadbeefull
#define SESSION_B 0x9c01beef00c0ffeeull

static void setup(void)
{
    ctx = zmq_ctx_new();
    session = 0;
}

static void teardown(void)
{
    if (sock)
        zmq_close(sock);
    sock = NULL;
    zmq_ctx_term(ctx);
    h_cleanup();
    free(p0);
    free(got);
    p0 = got = NULL;
}

/* A DEALER connected to endpoint, with routing id `id` (NULL: ZeroMQ's). */
static void *dealer(const char *endpoint, const char *id)
{
    int linger = 0, timeout = 5000;
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    if (id)
        ck_assert_int_eq(zmq_setsockopt(s, ZMQ_ROUTING_ID, id, strlen(id)), 0);
    ck_assert_int_eq(zmq_connect(s, endpoint), 0);
    return s;
}

static void connect_to(const char *endpoint)
{
    sock = dealer(endpoint, NULL);
}

/* Receives one reply into m (payload borrowed from f; caller closes f). */
static void receive(dcps_frames_t *f, dcps_msg_t *m)
{
    char why[256];
    ck_assert_msg(dcps_frames_recv(sock, f, 0) > 0, "no reply within 5 s");
    ck_assert_msg(dcps_frames_decode(f, 0, cfg.job_id, m, why, sizeof why) == 0, "%s", why);
}

/* Sends req on sock, naming `session` unless req names one, and receives the
 * reply. */
static void request(dcps_msg_t *req, dcps_frames_t *f, dcps_msg_t *reply)
{
    req->job_id = req->job_id ? req->job_id : cfg.job_id;
    req->session = req->session ? req->session : session;
    ck_assert_int_ge(dcps_frames_send(sock, NULL, req, NULL, NULL, 0), 0);
    receive(f, reply);
}

static void send_parts(const void *const *data, const size_t *len, int n)
{
    for (int i = 0; i < n; i++)
        ck_assert_int_ge(zmq_send(sock, data[i], len[i], i + 1 < n ? ZMQ_SNDMORE : 0), 0);
}

static void dense(dcps_msg_t *m, uint32_t type, const float *v, uint64_t n)
{
    memset(m, 0, sizeof *m);
    m->type = type;
    m->nframes = 1;
    m->frame[0] = (dcps_frame_desc_t){DCPS_FRAME_DENSE, DCPS_DTYPE_F32, n};
    m->payload[0] = (dcps_buf_t){v, n * sizeof(float)};
}

static void sparse(dcps_msg_t *m, const uint32_t *idx, const float *v, uint64_t k)
{
    memset(m, 0, sizeof *m);
    m->type = DCPS_MSG_PUSH;
    m->seq = 1000;
    m->nframes = 2;
    m->frame[0] = (dcps_frame_desc_t){DCPS_FRAME_INDICES, DCPS_DTYPE_U32, k};
    m->frame[1] = (dcps_frame_desc_t){DCPS_FRAME_VALUES, DCPS_DTYPE_F32, k};
    m->payload[0] = (dcps_buf_t){idx, k * 4};
    m->payload[1] = (dcps_buf_t){v, k * 4};
}

/* Pulls the shard's parameters into got; returns the version. */
static uint64_t pull(void)
{
    dcps_msg_t req = {.type = DCPS_MSG_PULL, .seq = 7}, reply;
    dcps_frames_t f;
    const float *v;
    char why[256];
    request(&req, &f, &reply);
    ck_assert_uint_eq(reply.type, DCPS_MSG_PULL_REPLY);
    ck_assert_int_eq(dcps_codec_dense(&reply, cfg.n_params, &v, why, sizeof why), 0);
    memcpy(got, v, cfg.n_params * sizeof(float));
    dcps_frames_close(&f);
    return reply.param_version;
}

/* The code of a bad message that the shard reads past the session check: its
 * own from a socket of the rank's session, SESSION from a stranger's. */
static int reached(int code)
{
    return session ? code : DCPS_E_SESSION;
}

/* Sends bad message number i (a raw multipart message) as rank 0, in `session`,
 * and returns the code the shard must answer with; NO_MORE after the last. */
#define NO_MORE 1
static int send_bad(int i, dcps_rng_t *rng)
{
    static uint32_t idx[4];
    static float val[4], *g;
    if (!g) /* zeros: a whole range, so that only the header is wrong */
        ck_assert_ptr_nonnull(g = calloc(cfg.n_params, sizeof *g));
    const uint64_t n = cfg.n_params;
    dcps_msg_t m;
    uint8_t hdr[DCPS_HEADER_MAX];

    switch (i) {
    case 0: { /* bytes that are no protobuf at all */
        static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
        send_parts((const void *[]){junk}, (size_t[]){sizeof junk}, 1);
        return DCPS_E_HEADER;
    }
    case 1: { /* a protocol version after this one */
        Dcps__Header h = DCPS__HEADER__INIT;
        h.has_protocol = h.has_type = h.has_job_id = 1;
        h.protocol = DCPS_PROTOCOL + 1;
        h.type = DCPS_MSG_PULL;
        h.job_id = cfg.job_id;
        size_t len = dcps__header__pack(&h, hdr);
        send_parts((const void *[]){hdr}, (size_t[]){len}, 1);
        return DCPS_E_PROTOVER;
    }
    case 2: /* another job */
        m = (dcps_msg_t){.type = DCPS_MSG_PULL, .job_id = cfg.job_id ^ 1};
        break;
    case 3: /* unknown type */
        m = (dcps_msg_t){.type = 99, .job_id = cfg.job_id};
        break;
    case 4: /* a reply type sent to a shard */
        m = (dcps_msg_t){.type = DCPS_MSG_PULL_REPLY, .job_id = cfg.job_id};
        break;
    case 5: /* rank outside the job */
        m = (dcps_msg_t){.type = DCPS_MSG_PULL, .job_id = cfg.job_id, .rank = 7};
        ck_assert_int_ge(dcps_frames_send(sock, NULL, &m, NULL, NULL, 0), 0);
        return DCPS_E_RANK;
    case 6: { /* header describes one frame, two arrive */
        m = (dcps_msg_t){.type = DCPS_MSG_PUSH, .job_id = cfg.job_id, .seq = 1000, .nframes = 1};
        m.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_DENSE, DCPS_DTYPE_F32, n};
        int len = dcps_codec_pack(&m, hdr, sizeof hdr);
        send_parts((const void *[]){hdr, p0, p0}, (size_t[]){(size_t)len, n * 4, n * 4}, 3);
        return DCPS_E_FRAMECOUNT;
    }
    case 7: /* frame shorter than its description */
        dense(&m, DCPS_MSG_PUSH, g, n);
        m.payload[0].len = 8 * sizeof *g;
        break;
    case 8: /* dense push of the wrong size */
        dense(&m, DCPS_MSG_PUSH, g, 8);
        break;
    case 9: { /* NaN in a dense push; the frame is copied, so p0 is restored after */
        float keep = p0[n / 2];
        dense(&m, DCPS_MSG_PUSH, p0, n);
        m.job_id = cfg.job_id;
        m.session = session;
        p0[n / 2] = NAN;
        int rc = dcps_frames_send(sock, NULL, &m, NULL, NULL, 0);
        p0[n / 2] = keep;
        ck_assert_int_ge(rc, 0);
        return reached(DCPS_E_NONFINITE);
    }
    case 10: /* index past the shard's range */
        idx[0] = 3, idx[1] = (uint32_t)n, val[0] = val[1] = 1;
        sparse(&m, idx, val, 2);
        break;
    case 11: /* indices not ascending */
        idx[0] = 9, idx[1] = 9, val[0] = val[1] = 1;
        sparse(&m, idx, val, 2);
        break;
    case 12: /* Inf in a sparse push */
        idx[0] = 1, idx[1] = 2, val[0] = 1, val[1] = INFINITY;
        sparse(&m, idx, val, 2);
        break;
    case 13: /* a push with no payload */
        m = (dcps_msg_t){.type = DCPS_MSG_PUSH, .job_id = cfg.job_id, .seq = 1000};
        break;
    case 14: /* HELLO for another model size */
        m = (dcps_msg_t){.type = DCPS_MSG_HELLO, .job_id = cfg.job_id, .n_params = n + 1};
        break;
    case 15: /* random bytes in random frames */
        for (int k = 0; k < 3; k++) {
            uint8_t b[64];
            for (size_t j = 0; j < sizeof b; j++)
                b[j] = (uint8_t)dcps_rng_next(rng);
            b[0] = 0xff; /* field 31, wire type 7: never a valid tag */
            ck_assert_int_ge(zmq_send(sock, b, 1 + dcps_rng_below(rng, sizeof b - 1), k < 2 ? ZMQ_SNDMORE : 0), 0);
        }
        return DCPS_E_HEADER;
    case 16: /* a gradient computed on a version the shard has not reached */
        dense(&m, DCPS_MSG_PUSH, p0, n);
        m.param_version = 1u << 30;
        break;
    case 17: { /* more entries than the shard's range (ascending, the last one past it) */
        static uint32_t *many;
        static float *ones;
        free(many), free(ones);
        many = malloc((n + 1) * sizeof *many);
        ones = malloc((n + 1) * sizeof *ones);
        ck_assert(many && ones);
        for (uint32_t j = 0; j <= n; j++)
            many[j] = j, ones[j] = 1;
        sparse(&m, many, ones, n + 1);
        break;
    }
    case 18: /* a good dense push that names shard 3: it was applied on shard 0 */
        dense(&m, DCPS_MSG_PUSH, g, n);
        m.shard = 3;
        m.seq = 1000;
        break;
    case 19: /* a PULL naming a range that is not this shard's */
        m = (dcps_msg_t){.type = DCPS_MSG_PULL, .range_lo = 0, .range_hi = 5};
        break;
    case 20: /* a PULL with a flag of the shard's (WAITING) */
        m = (dcps_msg_t){.type = DCPS_MSG_PULL, .flags = DCPS_FLAG_WAITING};
        break;
    case 21: /* want without DELTA */
        m = (dcps_msg_t){.type = DCPS_MSG_PULL, .want = 5};
        break;
    case 22: /* a reply's field in a request */
        m = (dcps_msg_t){.type = DCPS_MSG_BARRIER, .workers = 2};
        break;
    case 23: /* a step on a request that has none */
        m = (dcps_msg_t){.type = DCPS_MSG_HEARTBEAT, .step = 3};
        break;
    case 24: /* a push of an indices frame alone */
        idx[0] = 1;
        sparse(&m, idx, val, 1);
        m.nframes = 1;
        break;
    case 25: { /* a header over the cap: 5000 bytes of an unknown field */
        static uint8_t big[8192];
        dense(&m, DCPS_MSG_PUSH, g, n);
        m.job_id = cfg.job_id;
        m.seq = 1000;
        int len = dcps_codec_pack(&m, big, sizeof big);
        ck_assert_int_gt(len, 0);
        /* Field 100, length-delimited (tag 0xa2 0x06), 5000 bytes (0x88 0x27). */
        const uint8_t tag[] = {0xa2, 0x06, 0x88, 0x27};
        memcpy(big + len, tag, sizeof tag);
        memset(big + len + sizeof tag, 'x', 5000);
        send_parts((const void *[]){big, g}, (size_t[]){(size_t)len + sizeof tag + 5000, 8 * 4},
                   2);
        return DCPS_E_HEADER;
    }
    case 26: /* a PULL with a payload */
        dense(&m, DCPS_MSG_PULL, g, 8);
        break;
    default:
        return NO_MORE;
    }
    static const int codes[] = {0, 0, DCPS_E_JOBID, DCPS_E_MSGTYPE, DCPS_E_MSGTYPE, 0,
                                0, DCPS_E_FRAMELEN, DCPS_E_SIZE, 0, DCPS_E_RANGE, DCPS_E_ORDER,
                                DCPS_E_NONFINITE, DCPS_E_FRAMECOUNT, DCPS_E_SIZE, 0,
                                DCPS_E_VERSION, DCPS_E_SIZE, DCPS_E_FIELD, DCPS_E_FIELD,
                                DCPS_E_FIELD, DCPS_E_FIELD, DCPS_E_FIELD, DCPS_E_FIELD,
                                DCPS_E_FRAMECOUNT, 0, DCPS_E_FRAMECOUNT};
    m.job_id = m.job_id ? m.job_id : cfg.job_id;
    m.session = session;
    ck_assert_int_ge(dcps_frames_send(sock, NULL, &m, NULL, NULL, 0), 0);
    return i >= 8 ? reached(codes[i]) : codes[i]; /* 8 on: read by the handlers */
}

static void expect_error(int code, int i)
{
    dcps_frames_t f;
    dcps_msg_t reply;
    receive(&f, &reply);
    ck_assert_msg(reply.type == DCPS_MSG_ERROR, "case %d: got %s", i,
                  dcps_msg_type_name(reply.type));
    ck_assert_msg(reply.error_code == (uint32_t)-code, "case %d: expected %s, got %s: %s", i,
                  dcps_errname(code), dcps_errname((int)reply.error_code), reply.error_text);
    ck_assert_msg(strlen(reply.error_text) > strlen(dcps_strerror(code)), "case %d: %s", i,
                  reply.error_text);
    dcps_frames_close(&f);
}

static const float one_value[1] = {1};

/* Sends req and expects ERROR with code and a text that contains `has`. */
static void expect_text(dcps_msg_t *req, int code, const char *has)
{
    dcps_frames_t f;
    dcps_msg_t reply;
    request(req, &f, &reply);
    ck_assert_msg(reply.type == DCPS_MSG_ERROR && reply.error_code == (uint32_t)-code,
                  "expected %s, got %s %s", dcps_errname(code), dcps_msg_type_name(reply.type),
                  reply.error_text);
    ck_assert_msg(strstr(reply.error_text, has), "\"%s\" does not say \"%s\"", reply.error_text,
                  has);
    dcps_frames_close(&f);
}

static void load(const char *path)
{
    char err[512];
    ck_assert_msg(dcps_config_load(&cfg, path, NULL, 0, err, sizeof err) == 0, "%s", err);
    p0 = malloc(cfg.n_params * sizeof(float));
    got = malloc(cfg.n_params * sizeof(float));
    for (uint64_t i = 0; i < cfg.n_params; i++)
        p0[i] = (float)((double)(i % 97) / 97.0 - 0.5);
}

START_TEST(bad_messages_get_errors_and_change_nothing)
{
    char ep[256];
    const char *j = job(2, "tcp://127.0.0.1:*");
    load(j);
    pid_t s = h_server(j, 0, ep);
    ck_assert_int_gt(s, 0);
    connect_to(ep);

    dcps_msg_t req, reply;
    dcps_frames_t f;
    session = SESSION_A;
    req = (dcps_msg_t){.type = DCPS_MSG_HELLO, .n_params = cfg.n_params};
    request(&req, &f, &reply);
    ck_assert_uint_eq(reply.type, DCPS_MSG_WELCOME);
    ck_assert_uint_eq(reply.session, SESSION_A);
    dcps_frames_close(&f);
    /* Before INIT, a pull is refused, not answered with zeros. */
    req = (dcps_msg_t){.type = DCPS_MSG_PULL, .seq = 1};
    request(&req, &f, &reply);
    ck_assert_uint_eq(reply.error_code, (uint32_t)-DCPS_E_NOTREADY);
    dcps_frames_close(&f);
    dense(&req, DCPS_MSG_INIT, p0, cfg.n_params);
    request(&req, &f, &reply);
    ck_assert_uint_eq(reply.type, DCPS_MSG_PUSH_ACK);
    dcps_frames_close(&f);

    dcps_rng_t rng;
    dcps_rng_seed(&rng, 5);
    int cases = 0;
    for (int i = 0;; i++) {
        int code = send_bad(i, &rng);
        if (code == NO_MORE)
            break;
        expect_error(code, i);
        cases++;
    }
    ck_assert_int_eq(cases, 27);
    ck_assert_uint_eq(pull(), 0);
    ck_assert_mem_eq(got, p0, cfg.n_params * sizeof(float));

    /* Payload shapes are told what arrived and what a PUSH needs. */
    req = (dcps_msg_t){.type = DCPS_MSG_PUSH, .seq = 1000};
    expect_text(&req, DCPS_E_FRAMECOUNT,
                "PUSH needs one DENSE frame, or an INDICES frame then a VALUES frame; got no "
                "frames");
    static const uint32_t one[1] = {3};
    sparse(&req, one, one_value, 1);
    req.nframes = 1;
    expect_text(&req, DCPS_E_FRAMECOUNT, "got 1 frame (INDICES)");
    req = (dcps_msg_t){.type = DCPS_MSG_PULL, .shard = 3};
    expect_text(&req, DCPS_E_FIELD, "PULL names shard 3, this is shard 0");

    /* A good push is applied once; the same (rank, seq) again is acknowledged as
     * a duplicate and not applied. */
    req = (dcps_msg_t){.type = DCPS_MSG_HELLO, .rank = 1, .session = SESSION_B,
                       .n_params = cfg.n_params};
    request(&req, &f, &reply);
    ck_assert_uint_eq(reply.type, DCPS_MSG_WELCOME);
    dcps_frames_close(&f);
    float *g = calloc(cfg.n_params, sizeof(float));
    g[5] = 2.0f;
    dense(&req, DCPS_MSG_PUSH, g, cfg.n_params);
    req.rank = 1;
    req.session = SESSION_B;
    req.seq = 42;
    for (int k = 0; k < 2; k++) {
        request(&req, &f, &reply);
        ck_assert_uint_eq(reply.type, DCPS_MSG_PUSH_ACK);
        ck_assert_uint_eq(reply.param_version, 1);
        ck_assert_uint_eq(reply.flags, k == 0 ? 0 : DCPS_FLAG_DUPLICATE);
        dcps_frames_close(&f);
    }
    free(g);
    ck_assert_uint_eq(pull(), 1);
    ck_assert_float_eq(got[5], p0[5] - 0.1f * 2.0f);
    got[5] = p0[5];
    ck_assert_mem_eq(got, p0, cfg.n_params * sizeof(float));

    ck_assert_int_eq(h_stop(s, 5000), 0);
    const char *log = h_slurp(h_path("server0", "err"));
    ck_assert_ptr_nonnull(strstr(log, "31 bad messages")); /* 27 + 3 + the early PULL */
    ck_assert_ptr_nonnull(strstr(log, "at 127.0.0.1"));     /* the peer is named */
}
END_TEST

/* Starts a shard of job text `extra` appended to job(workers), loads it, connects
 * and initialises the parameters to p0. Returns the server's pid. */
static pid_t start_with(int workers, const char *extra)
{
    char ep[256], text[4096];
    dcps_msg_t req, reply;
    dcps_frames_t f;
    snprintf(text, sizeof text, "%s%s", h_slurp(job(workers, "tcp://127.0.0.1:*")), extra);
    const char *j = h_write("job-extra.ini", text);
    load(j);
    pid_t s = h_server(j, 0, ep);
    ck_assert_int_gt(s, 0);
    connect_to(ep);
    session = SESSION_A; /* rank 0's */
    req = (dcps_msg_t){.type = DCPS_MSG_HELLO, .n_params = cfg.n_params};
    request(&req, &f, &reply);
    ck_assert_uint_eq(reply.type, DCPS_MSG_WELCOME);
    dcps_frames_close(&f);
    dense(&req, DCPS_MSG_INIT, p0, cfg.n_params);
    request(&req, &f, &reply);
    ck_assert_uint_eq(reply.type, DCPS_MSG_PUSH_ACK);
    dcps_frames_close(&f);
    return s;
}

/* A flood of bad messages from one peer: every one is answered and counted,
 * the log gets at most DCPS_LOGLIMIT_LINES lines about them, each naming the
 * peer's address (tiny messages are copied for alignment, which lost it), and
 * one line with the count of the others. */
START_TEST(a_flood_of_bad_messages_is_counted_and_logged_within_a_limit)
{
    pid_t s = start_with(1, "");
    /* 40 bytes: more than ZeroMQ keeps inside a zmq_msg_t, so the frame points
     * into its receive buffer, 2 bytes past a frame header: not aligned. */
    uint8_t junk[40];
    memset(junk, 0xff, sizeof junk);
    for (int i = 0; i < 1000; i++) {
        send_parts((const void *[]){junk}, (size_t[]){sizeof junk}, 1);
        expect_error(DCPS_E_HEADER, i);
    }
    ck_assert_int_eq(h_stop(s, 5000), 0);
    const char *log = h_slurp(h_path("server0", "err"));
    int lines = 0;
    for (const char *l = strstr(log, "bad unknown from rank"); l;
         l = strstr(l + 1, "bad unknown from rank")) {
        const char *eol = strchr(l, '\n');
        ck_assert_msg(eol && memmem(l, (size_t)(eol - l), " at 127.0.0.1: ", 15),
                      "a line without the peer's address: %.*s", (int)(eol ? eol - l : 80), l);
        lines++;
    }
    ck_assert_int_ge(lines, 1);
    ck_assert_int_le(lines, 5);
    char want[128];
    snprintf(want, sizeof want, "%d more bad messages from 127.0.0.1 suppressed in the last",
             1000 - lines);
    ck_assert_msg(strstr(log, want), "no \"%s\" in %s", want, log);
    ck_assert_msg(strstr(log, "(codes HEADER "), "%s", log);
    ck_assert_msg(strstr(log, " 1000 bad messages"), "%s", log); /* counted, every one */
}
END_TEST

/* The case through a real shard: ten pushes of −FLT_MAX at lr 0.1. In
 * async and ssp mode the push that would make a parameter Inf is answered
 * NONFINITE (and every later one, as nothing moved); in sync mode the round
 * whose mean would is not applied, and says so in the log. Pulls serve finite
 * parameters throughout (a pull reply with Inf fails the client's check). */
static const struct {
    const char *kind, *mode;
    bool sparse;
} flt_max_cases[] = {
    {"sgd", "async", false},     {"sgd", "ssp", true},        {"sgd", "sync", false},
    {"momentum", "async", true}, {"dcasgd_c", "ssp", false},  {"dcasgd_a", "sync", true},
};

START_TEST(pushes_of_minus_flt_max_are_refused_and_pulls_stay_finite)
{
    const char *kind = flt_max_cases[_i].kind, *mode = flt_max_cases[_i].mode;
    const bool sync = strcmp(mode, "sync") == 0, dc = strncmp(kind, "dcasgd", 6) == 0;
    char extra[256];
    snprintf(extra, sizeof extra, "[job]\nmode = %s\n[optimizer]\nkind = %s\n%s", mode,
             dc ? "dcasgd" : kind,
             strcmp(kind, "dcasgd_a") == 0 ? "dc_adaptive = true\n" : "");
    pid_t s = start_with(1, extra);
    const uint64_t n = cfg.n_params;
    float *g = malloc(n * sizeof *g);
    uint32_t *idx = malloc(n * sizeof *idx);
    ck_assert(g && idx);
    for (uint64_t i = 0; i < n; i++)
        g[i] = -FLT_MAX, idx[i] = (uint32_t)i;
    uint64_t accepted = 0, version = 0;
    int refused = 0;
    for (int p = 0; p < 10; p++) {
        dcps_msg_t req, reply;
        dcps_frames_t f;
        if (flt_max_cases[_i].sparse)
            sparse(&req, idx, g, n);
        else
            dense(&req, DCPS_MSG_PUSH, g, n);
        req.seq = 100 + (uint64_t)p;
        req.step = sync ? (uint64_t)p : accepted;
        req.param_version = version;
        request(&req, &f, &reply);
        if (reply.type == DCPS_MSG_PUSH_ACK) {
            ck_assert_msg(refused == 0, "%s %s: push %d acknowledged after a refusal", kind,
                          mode, p);
            accepted++;
        } else {
            ck_assert_msg(!sync && reply.error_code == (uint32_t)-DCPS_E_NONFINITE,
                          "%s %s: push %d: %s %s", kind, mode, p,
                          dcps_msg_type_name(reply.type), reply.error_text);
            ck_assert_msg(strstr(reply.error_text, "would make parameter") ||
                              strstr(reply.error_text, "mean square"),
                          "%s", reply.error_text);
            refused++;
        }
        dcps_frames_close(&f);
        version = pull(); /* dense, checked finite */
    }
    ck_assert_int_eq(h_stop(s, 5000), 0);
    const char *log = h_slurp(h_path("server0", "err"));
    if (sync) {
        ck_assert_uint_eq(accepted, 10);
        ck_assert_msg(strstr(log, "not applied, the version stays"), "%s", log);
        ck_assert_uint_lt(version, 10);
    } else {
        ck_assert_msg(refused > 0, "%s %s: nothing refused", kind, mode);
        ck_assert_uint_eq(version, accepted);
    }
    free(g);
    free(idx);
}
END_TEST

/* An empty sparse push (k = 0) is acknowledged and changes nothing in async
 * mode (it raised the version); in sync mode it is the rank's contribution, a
 * zero gradient in the round's mean. */
START_TEST(empty_sparse_push_changes_nothing_in_async_and_counts_in_sync)
{
    static const uint32_t no_idx[1] = {0};
    static const float no_val[1] = {0};
    dcps_msg_t req, reply;
    dcps_frames_t f;
    pid_t s = start_with(1, "");
    sparse(&req, no_idx, no_val, 0);
    request(&req, &f, &reply);
    ck_assert_uint_eq(reply.type, DCPS_MSG_PUSH_ACK);
    ck_assert_uint_eq(reply.param_version, 0);
    dcps_frames_close(&f);
    ck_assert_uint_eq(pull(), 0);
    ck_assert_mem_eq(got, p0, cfg.n_params * sizeof(float));
    ck_assert_int_eq(h_stop(s, 5000), 0);
    ck_assert_ptr_nonnull(strstr(h_slurp(h_path("server0", "err")), "version 0, 0 pushes"));
    zmq_close(sock);
    sock = NULL;
    free(p0);
    free(got);

    s = start_with(2, "[job]\nmode = sync\n");
    float *g = calloc(cfg.n_params, sizeof *g);
    g[5] = 2.0f;
    dense(&req, DCPS_MSG_PUSH, g, cfg.n_params);
    req.seq = 1;
    request(&req, &f, &reply);
    ck_assert_uint_eq(reply.type, DCPS_MSG_PUSH_ACK);
    dcps_frames_close(&f);
    req = (dcps_msg_t){.type = DCPS_MSG_HELLO, .rank = 1, .session = SESSION_B,
                       .n_params = cfg.n_params};
    request(&req, &f, &reply);
    ck_assert_uint_eq(reply.type, DCPS_MSG_WELCOME);
    dcps_frames_close(&f);
    sparse(&req, no_idx, no_val, 0);
    req.rank = 1;
    req.session = SESSION_B;
    req.seq = 1;
    request(&req, &f, &reply);
    ck_assert_uint_eq(reply.type, DCPS_MSG_PUSH_ACK);
    dcps_frames_close(&f);
    ck_assert_uint_eq(pull(), 1); /* the round of both is applied */
    ck_assert_float_eq(got[5], p0[5] - 0.1f * 1.0f); /* the mean of 2 and nothing */
    got[5] = p0[5];
    ck_assert_mem_eq(got, p0, cfg.n_params * sizeof(float));
    ck_assert_int_eq(h_stop(s, 5000), 0);
    ck_assert_ptr_nonnull(strstr(h_slurp(h_path("server0", "err")), "version 1, 2 pushes"));
    free(g);
}
END_TEST

/* "Unknown fields are ignored" within the 4096-byte header cap: a PUSH with a
 * 3000-byte field of a later version is applied (it was refused as HEADER at
 * 1024 bytes). */
START_TEST(a_push_with_a_long_unknown_field_is_applied)
{
    pid_t s = start_with(1, "");
    float *g = calloc(cfg.n_params, sizeof *g);
    static uint8_t hdr[DCPS_HEADER_MAX];
    dcps_msg_t m, reply;
    dcps_frames_t f;
    g[7] = 4.0f;
    dense(&m, DCPS_MSG_PUSH, g, cfg.n_params);
    m.job_id = cfg.job_id;
    m.seq = 9;
    m.session = session;
    int len = dcps_codec_pack(&m, hdr, sizeof hdr);
    ck_assert_int_gt(len, 0);
    const uint8_t tag[] = {0xa2, 0x06, 0xb8, 0x17}; /* field 100, 3000 bytes */
    memcpy(hdr + len, tag, sizeof tag);
    memset(hdr + len + sizeof tag, 'x', 3000);
    send_parts((const void *[]){hdr, g},
               (size_t[]){(size_t)len + sizeof tag + 3000, cfg.n_params * sizeof *g}, 2);
    receive(&f, &reply);
    ck_assert_msg(reply.type == DCPS_MSG_PUSH_ACK, "%s: %s", dcps_msg_type_name(reply.type),
                  reply.error_text);
    dcps_frames_close(&f);
    ck_assert_uint_eq(pull(), 1);
    ck_assert_float_eq(got[7], p0[7] - 0.1f * 4.0f);
    ck_assert_int_eq(h_stop(s, 5000), 0);
    free(g);
}
END_TEST

/* The client library passes every header-field check on every path: dense and
 * sparse (also empty) pushes, dense, delta (with want) and exact pulls (without
 * want: it needs DELTA), barrier, done. Not one bad message. */
START_TEST(the_client_library_passes_every_field_check)
{
    char ep[256], set[300], e[512], text[4096];
    int rc = 0;
    snprintf(text, sizeof text, "%s[compression]\npull = delta\n",
             h_slurp(job(1, "tcp://127.0.0.1:*")));
    const char *j = h_write("job-delta.ini", text);
    load(j);
    pid_t s = h_server(j, 0, ep);
    ck_assert_int_gt(s, 0);
    snprintf(set, sizeof set, "servers.shards=%s", ep);
    const char *ov[] = {set};
    dcps_client_t *c = dcps_client_open(j, 0, ov, 1, &rc, e, sizeof e);
    ck_assert_msg(c != NULL, "%s", e);
    float *g = calloc(cfg.n_params, sizeof *g);
    const uint32_t idx[2] = {3, 700};
    const float val[2] = {1, -1};
    g[9] = 1;
    ck_assert_int_eq(dcps_client_init(c, p0), 0);
    dcps_client_set_pull_density(c, 0.01);
    ck_assert_msg(dcps_client_pull(c, got) == 0, "%s", dcps_client_error(c));
    ck_assert_msg(dcps_client_push_dense(c, g) == 0, "%s", dcps_client_error(c));
    ck_assert_msg(dcps_client_pull(c, got) == 0, "%s", dcps_client_error(c)); /* delta */
    ck_assert_msg(dcps_client_push_sparse(c, idx, val, 2) == 0, "%s", dcps_client_error(c));
    ck_assert_msg(dcps_client_push_sparse(c, idx, val, 0) == 0, "%s", dcps_client_error(c));
    ck_assert_msg(dcps_client_pull_exact(c, got) == 0, "%s", dcps_client_error(c));
    ck_assert_msg(dcps_client_barrier(c, 1) == 0, "%s", dcps_client_error(c));
    ck_assert_msg(dcps_client_done(c) == 0, "%s", dcps_client_error(c));
    dcps_client_close(&c);
    free(g);
    ck_assert_int_eq(h_stop(s, 5000), 0);
    const char *log = h_slurp(h_path("server0", "err"));
    ck_assert_msg(strstr(log, "version 2, 2 pushes") && strstr(log, " 0 bad messages"), "%s",
                  log);
}
END_TEST

/* One worker on one shard is deterministic, so a run with garbage arriving all
 * along must end exactly like a run without. */
START_TEST(worker_trains_unaffected_while_garbage_arrives)
{
    char ep[256], set[300];
    const char *j = job(1, "tcp://127.0.0.1:*");
    load(j);
    double acc[2], loss[2];
    int bad = 0;
    for (int run = 0; run < 2; run++) {
        pid_t s = h_server(j, 0, ep);
        ck_assert_int_gt(s, 0);
        snprintf(set, sizeof set, "servers.shards=%s", ep);
        const char *argv[] = {"--config", j, "--rank", "0", "--set", set, NULL};
        pid_t w = h_spawn("dcps-worker", "worker", argv);
        if (run == 1) {
            dcps_rng_t rng;
            dcps_rng_seed(&rng, 9);
            connect_to(ep);
            for (int i = 0; h_running(w) && i < 1000000; i++) {
                expect_error(send_bad(i % 17, &rng), i % 17);
                bad++;
            }
        }
        int st = h_wait(w, 120000);
        ck_assert_msg(st == 0, "worker exited %d: %s", st, h_slurp(h_path("worker", "err")));
        const char *out = h_slurp(h_path("worker", "out"));
        acc[run] = h_final(out, "test_acc");
        loss[run] = h_final(out, "train_loss");
        ck_assert_int_eq(h_stop(s, 5000), 0);
    }
    ck_assert_int_ge(bad, 20);
    ck_assert_double_ge(acc[0], 0.6);
    ck_assert_double_eq(acc[0], acc[1]);
    ck_assert_double_eq(loss[0], loss[1]);
}
END_TEST

/* HELLO as `rank` in session sid on socket `on`; returns the reply's type and
 * error code. */
static uint32_t hello_on(void *on, uint32_t rank, uint64_t sid, uint32_t *code)
{
    dcps_msg_t req = {.type = DCPS_MSG_HELLO, .job_id = cfg.job_id, .rank = rank, .seq = 1,
                      .session = sid, .n_params = cfg.n_params}, reply;
    dcps_frames_t f;
    void *keep = sock;
    sock = on;
    request(&req, &f, &reply);
    sock = keep;
    *code = reply.error_code;
    dcps_frames_close(&f);
    return reply.type;
}

/* Rank 1 says HELLO in session A. A HELLO for rank 1 in session B is refused
 * while A is heard from (DCPS_E_LIVE), once logged; A's HELLO again is fine,
 * from any socket. Once A has been silent for dead_after_ms, B is admitted;
 * after B's BYE, A is again. */
START_TEST(second_hello_for_a_live_rank_is_refused)
{
    char ep[256], text[4096];
    snprintf(text, sizeof text, "%s[server]\nheartbeat_ms = 50\ndead_after_ms = 400\n",
             h_slurp(job(2, "tcp://127.0.0.1:*")));
    const char *j = h_write("job2.ini", text);
    load(j);
    pid_t s = h_server(j, 0, ep);
    ck_assert_int_gt(s, 0);
    connect_to(ep);
    void *a = sock;
    connect_to(ep);
    void *b = sock;
    sock = a;
    uint32_t code;

    ck_assert_uint_eq(hello_on(a, 1, SESSION_A, &code), DCPS_MSG_WELCOME);
    ck_assert_uint_eq(hello_on(b, 1, SESSION_B, &code), DCPS_MSG_ERROR);
    ck_assert_uint_eq(code, (uint32_t)-DCPS_E_LIVE);
    ck_assert_uint_eq(hello_on(a, 1, SESSION_A, &code), DCPS_MSG_WELCOME); /* a retry */
    /* The session, not the socket, is the worker: A's HELLO from b is fine too. */
    ck_assert_uint_eq(hello_on(b, 1, SESSION_A, &code), DCPS_MSG_WELCOME);
    ck_assert_uint_eq(hello_on(b, 0, SESSION_B, &code), DCPS_MSG_WELCOME); /* another rank */
    nanosleep(&(struct timespec){0, 700000000}, NULL); /* A falls silent: declared dead */
    ck_assert_uint_eq(hello_on(b, 1, SESSION_B, &code), DCPS_MSG_WELCOME);
    ck_assert_uint_eq(hello_on(a, 1, SESSION_A, &code), DCPS_MSG_ERROR);
    dcps_msg_t bye = {.type = DCPS_MSG_BYE, .job_id = cfg.job_id, .rank = 1, .seq = 2,
                      .session = SESSION_B}, reply;
    dcps_frames_t f;
    sock = b;
    request(&bye, &f, &reply);
    ck_assert_uint_eq(reply.type, DCPS_MSG_BYE);
    dcps_frames_close(&f);
    ck_assert_uint_eq(hello_on(a, 1, SESSION_A, &code), DCPS_MSG_WELCOME);
    zmq_close(a);

    ck_assert_int_eq(h_stop(s, 5000), 0);
    const char *log = h_slurp(h_path("server0", "err"));
    ck_assert_ptr_nonnull(strstr(log, "2 bad messages"));
    const char *first = strstr(log, "rank 1 is already connected");
    ck_assert_ptr_nonnull(first);
    ck_assert_ptr_nonnull(strstr(first + 1, "rank 1 is already connected"));
    ck_assert_ptr_null(strstr(strstr(first + 1, "rank 1 is already connected") + 1,
                              "rank 1 is already connected"));
}
END_TEST

/* --- identity: sessions, sequence numbers, routing ids ----------------------------- */

/* A job of 2 workers in `mode` whose silent workers are dead after dead_ms. */
static const char *fast_job(const char *mode, int dead_ms)
{
    char text[4096];
    snprintf(text, sizeof text,
             "%s[server]\nheartbeat_ms = 50\ndead_after_ms = %d\n[job]\nmode = %s\n",
             h_slurp(job(2, "tcp://127.0.0.1:*")), dead_ms, mode);
    const char *j = h_write("identity.ini", text);
    load(j);
    return j;
}

/* Sends req on socket `on` (job id filled) and receives its reply into m,
 * skipping what answers other requests (a waiting pull's heartbeats); the
 * caller closes f. */
static void ask(void *on, dcps_msg_t *req, dcps_frames_t *f, dcps_msg_t *m)
{
    char why[256];
    req->job_id = cfg.job_id;
    ck_assert_int_ge(dcps_frames_send(on, NULL, req, NULL, NULL, 0), 0);
    for (;;) {
        ck_assert_msg(dcps_frames_recv(on, f, 0) > 0, "no reply within 5 s");
        ck_assert_msg(dcps_frames_decode(f, 0, cfg.job_id, m, why, sizeof why) == 0, "%s", why);
        if (m->seq == req->seq)
            return;
        dcps_frames_close(f);
    }
}

/* Asks req on `on` and checks the reply's type and, for ERROR, code; returns
 * the reply's flags. With text, the error text must contain it. */
static uint32_t expect(void *on, dcps_msg_t req, uint32_t type, int code, const char *text)
{
    dcps_frames_t f;
    dcps_msg_t m;
    ask(on, &req, &f, &m);
    ck_assert_msg(m.type == type, "%s: got %s: %s", dcps_msg_type_name(req.type),
                  dcps_msg_type_name(m.type), m.error_text);
    if (type == DCPS_MSG_ERROR)
        ck_assert_msg(m.error_code == (uint32_t)-code, "%s: expected %s, got %s: %s",
                      dcps_msg_type_name(req.type), dcps_errname(code),
                      dcps_errname(-(int)m.error_code), m.error_text);
    if (text)
        ck_assert_msg(strstr(m.error_text, text), "want \"%s\" in \"%s\"", text, m.error_text);
    uint32_t flags = m.flags;
    dcps_frames_close(&f);
    return flags;
}

/* A request of type to rank in session sid with sequence number seq. */
static dcps_msg_t req_of(uint32_t type, uint32_t rank, uint64_t sid, uint64_t seq)
{
    return (dcps_msg_t){.type = type, .rank = rank, .session = sid, .seq = seq,
                        .n_params = cfg.n_params};
}

/* A dense push from rank in session sid for step with seq, of gradient g. */
static dcps_msg_t push_of(uint32_t rank, uint64_t sid, uint64_t seq, uint64_t step, const float *g)
{
    dcps_msg_t m;
    dense(&m, DCPS_MSG_PUSH, g, cfg.n_params);
    m.rank = rank, m.session = sid, m.seq = seq, m.step = step;
    return m;
}

/* The shard's parameters as a pull of rank in session sid on `on` gets them
 * (into got); returns their version. */
static uint64_t pull_as(void *on, uint32_t rank, uint64_t sid)
{
    void *keep = sock;
    uint64_t keep_session = session;
    sock = on;
    session = sid;
    dcps_msg_t req = {.type = DCPS_MSG_PULL, .rank = rank, .seq = 7}, reply;
    dcps_frames_t f;
    const float *v;
    char why[256];
    request(&req, &f, &reply);
    ck_assert_msg(reply.type == DCPS_MSG_PULL_REPLY, "%s", reply.error_text);
    ck_assert_int_eq(dcps_codec_dense(&reply, cfg.n_params, &v, why, sizeof why), 0);
    memcpy(got, v, cfg.n_params * sizeof(float));
    dcps_frames_close(&f);
    sock = keep;
    session = keep_session;
    return reply.param_version;
}

/* Nothing arrives on `on` within ms. */
static void hears_nothing(void *on, int ms)
{
    zmq_pollitem_t item = {on, 0, ZMQ_POLLIN, 0};
    ck_assert_int_eq(zmq_poll(&item, 1, ms), 0);
}

/* Rank 0 and 1 are workers with sessions A and B (sync mode); a socket that
 * never said HELLO cannot push, pull (in sync mode it would take the reply the
 * real worker waits for), heartbeat or say BYE for them, nor HELLO without a
 * session; each attempt is answered SESSION, counted, and changes nothing. */
START_TEST(a_socket_that_never_said_hello_cannot_speak_for_a_live_rank)
{
    char ep[256];
    const char *j = fast_job("sync", 5000);
    pid_t s = h_server(j, 0, ep);
    ck_assert_int_gt(s, 0);
    void *w0 = dealer(ep, NULL), *w1 = dealer(ep, NULL), *stranger = dealer(ep, NULL);
    float *g = calloc(cfg.n_params, sizeof(float));
    g[3] = 1.0f;

    expect(stranger, req_of(DCPS_MSG_HELLO, 0, 0, 1), DCPS_MSG_ERROR, DCPS_E_SESSION,
           "HELLO names no session");
    expect(w0, req_of(DCPS_MSG_HELLO, 0, SESSION_A, 1), DCPS_MSG_WELCOME, 0, NULL);
    expect(w1, req_of(DCPS_MSG_HELLO, 1, SESSION_B, 1), DCPS_MSG_WELCOME, 0, NULL);
    dcps_msg_t init;
    dense(&init, DCPS_MSG_INIT, p0, cfg.n_params);
    init.session = SESSION_A;
    init.seq = 2;
    expect(w0, init, DCPS_MSG_PUSH_ACK, 0, NULL);

    /* Pushes: none applied, the parameters stay p0. */
    expect(stranger, push_of(0, 0, 5, 0, g), DCPS_MSG_ERROR, DCPS_E_SESSION,
           "rank 0's session is 3f2a9c01\u2026, this request names none");
    expect(stranger, push_of(1, 0x77ull << 40, 5, 0, g), DCPS_MSG_ERROR, DCPS_E_SESSION,
           "rank 1's session is 9c01beef\u2026, this request names 00007700\u2026");

    /* Sync: rank 1 waits for step 1 until round 0 closes; a stranger's PULL for
     * rank 1 neither takes nor replaces that wait. */
    expect(w0, push_of(0, SESSION_A, 3, 0, g), DCPS_MSG_PUSH_ACK, 0, NULL);
    dcps_msg_t wait = req_of(DCPS_MSG_PULL, 1, SESSION_B, 2);
    wait.job_id = cfg.job_id;
    wait.step = 1;
    ck_assert_int_ge(dcps_frames_send(w1, NULL, &wait, NULL, NULL, 0), 0);
    dcps_msg_t steal = req_of(DCPS_MSG_PULL, 1, 0, 2);
    steal.step = 1;
    expect(stranger, steal, DCPS_MSG_ERROR, DCPS_E_SESSION, NULL);
    expect(stranger, req_of(DCPS_MSG_HEARTBEAT, 1, 0, 2), DCPS_MSG_ERROR, DCPS_E_SESSION, NULL);
    ck_assert_uint_eq(pull_as(w0, 0, SESSION_A), 0); /* round 0 still open: nothing applied */
    ck_assert_mem_eq(got, p0, cfg.n_params * sizeof(float));
    dcps_frames_t f;
    dcps_msg_t m;
    expect(w1, push_of(1, SESSION_B, 3, 0, g), DCPS_MSG_PUSH_ACK, 0, NULL);
    char why[256];
    do { /* the waiting pull's answer, after WAITING heartbeats perhaps */
        ck_assert_msg(dcps_frames_recv(w1, &f, 0) > 0, "rank 1's pull was never answered");
        ck_assert_int_eq(dcps_frames_decode(&f, 0, cfg.job_id, &m, why, sizeof why), 0);
        if (m.type == DCPS_MSG_HEARTBEAT)
            dcps_frames_close(&f);
    } while (m.type == DCPS_MSG_HEARTBEAT);
    ck_assert_uint_eq(m.type, DCPS_MSG_PULL_REPLY);
    ck_assert_uint_eq(m.seq, 2);
    ck_assert_uint_eq(m.param_version, 1);
    dcps_frames_close(&f);
    hears_nothing(stranger, 200);

    /* BYE: refused, so rank 0 stays connected and another session's HELLO is LIVE. */
    expect(stranger, req_of(DCPS_MSG_BYE, 0, 0, 4), DCPS_MSG_ERROR, DCPS_E_SESSION, NULL);
    expect(stranger, req_of(DCPS_MSG_DONE, 0, 0, 4), DCPS_MSG_ERROR, DCPS_E_SESSION, NULL);
    expect(stranger, req_of(DCPS_MSG_BARRIER, 0, 0, 4), DCPS_MSG_ERROR, DCPS_E_SESSION, NULL);
    expect(stranger, req_of(DCPS_MSG_HELLO, 0, 0x1234ull, 5), DCPS_MSG_ERROR, DCPS_E_LIVE,
           "rank 0 is already connected in session 3f2a9c01\u2026");
    expect(w0, req_of(DCPS_MSG_HEARTBEAT, 0, SESSION_A, 6), DCPS_MSG_HEARTBEAT, 0, NULL);
    free(g);
    zmq_close(w0), zmq_close(w1), zmq_close(stranger);

    ck_assert_int_eq(h_stop(s, 5000), 0);
    const char *log = h_slurp(h_path("server0", "err"));
    ck_assert_msg(strstr(log, " 9 bad messages"), "%s", log); /* 8 SESSION, 1 LIVE */
    ck_assert_msg(strstr(log, "worker 0 joined (session 3f2a9c01\u2026)"), "%s", log);
    ck_assert_ptr_null(strstr(log, "worker 0 left"));
}
END_TEST

/* Seqs count within a session: a stranger's push with a huge seq changes
 * nothing for the worker; its first push may have seq 0; DUPLICATE answers
 * only an exact retry of the push applied last, a lower seq is STATE; in sync
 * mode a retried push that was dropped is answered STALE again. */
START_TEST(sequence_numbers_count_within_a_session)
{
    char ep[256];
    const char *j = fast_job("async", 5000);
    pid_t s = h_server(j, 0, ep);
    ck_assert_int_gt(s, 0);
    void *w = dealer(ep, NULL), *stranger = dealer(ep, NULL);
    float *g = calloc(cfg.n_params, sizeof(float));
    g[3] = 1.0f;
    expect(w, req_of(DCPS_MSG_HELLO, 0, SESSION_A, 1), DCPS_MSG_WELCOME, 0, NULL);
    dcps_msg_t init;
    dense(&init, DCPS_MSG_INIT, p0, cfg.n_params);
    init.session = SESSION_A;
    ck_assert_uint_eq(expect(w, init, DCPS_MSG_PUSH_ACK, 0, NULL), 0);
    /* INIT again (a retry, or another session of rank 0): acknowledged, not applied. */
    ck_assert_uint_eq(expect(w, init, DCPS_MSG_PUSH_ACK, 0, NULL), DCPS_FLAG_DUPLICATE);

    expect(stranger, push_of(0, 0, UINT64_MAX - 1, 0, g), DCPS_MSG_ERROR, DCPS_E_SESSION, NULL);
    ck_assert_uint_eq(expect(w, push_of(0, SESSION_A, 0, 0, g), DCPS_MSG_PUSH_ACK, 0, NULL), 0);
    ck_assert_uint_eq(expect(w, push_of(0, SESSION_A, 5, 1, g), DCPS_MSG_PUSH_ACK, 0, NULL), 0);
    ck_assert_uint_eq(expect(w, push_of(0, SESSION_A, 5, 1, g), DCPS_MSG_PUSH_ACK, 0, NULL),
                      DCPS_FLAG_DUPLICATE);
    expect(w, push_of(0, SESSION_A, 3, 2, g), DCPS_MSG_ERROR, DCPS_E_STATE,
           "seq 3 is below this session's last push, 5");
    expect(w, push_of(0, SESSION_A, 0, 2, g), DCPS_MSG_ERROR, DCPS_E_STATE, NULL);
    ck_assert_uint_eq(pull_as(w, 0, SESSION_A), 2); /* two pushes applied */
    ck_assert_float_eq(got[3], (p0[3] - 0.1f * 1.0f) - 0.1f * 1.0f);
    ck_assert_uint_eq(expect(w, push_of(0, SESSION_A, 6, 2, g), DCPS_MSG_PUSH_ACK, 0, NULL), 0);
    ck_assert_uint_eq(pull_as(w, 0, SESSION_A), 3);
    zmq_close(w), zmq_close(stranger);
    ck_assert_int_eq(h_stop(s, 5000), 0);
    const char *log = h_slurp(h_path("server0", "err"));
    ck_assert_msg(strstr(log, " 3 bad messages"), "%s", log); /* SESSION, STATE, STATE */
    ck_assert_msg(strstr(log, " 3 pushes (1 duplicates, 0 dropped)"), "%s", log);

    /* Sync: rank 1 leaves, so round 0 closes with rank 0's push alone; rank 1's
     * push for round 0 after that is dropped (STALE), and so is its retry,
     * which is not a DUPLICATE: it was never applied. */
    j = fast_job("sync", 5000);
    s = h_server(j, 0, ep);
    ck_assert_int_gt(s, 0);
    void *w0 = dealer(ep, NULL), *w1 = dealer(ep, NULL);
    expect(w0, req_of(DCPS_MSG_HELLO, 0, SESSION_A, 1), DCPS_MSG_WELCOME, 0, NULL);
    expect(w1, req_of(DCPS_MSG_HELLO, 1, SESSION_B, 1), DCPS_MSG_WELCOME, 0, NULL);
    expect(w0, init, DCPS_MSG_PUSH_ACK, 0, NULL);
    expect(w0, push_of(0, SESSION_A, 2, 0, g), DCPS_MSG_PUSH_ACK, 0, NULL);
    expect(w1, req_of(DCPS_MSG_BYE, 1, SESSION_B, 2), DCPS_MSG_BYE, 0, NULL);
    ck_assert_uint_eq(expect(w1, push_of(1, SESSION_B, 3, 0, g), DCPS_MSG_PUSH_ACK, 0, NULL),
                      DCPS_FLAG_STALE);
    ck_assert_uint_eq(expect(w1, push_of(1, SESSION_B, 3, 0, g), DCPS_MSG_PUSH_ACK, 0, NULL),
                      DCPS_FLAG_STALE);
    ck_assert_uint_eq(pull_as(w0, 0, SESSION_A), 1);
    free(g);
    zmq_close(w0), zmq_close(w1);
    ck_assert_int_eq(h_stop(s, 5000), 0);
    log = h_slurp(h_path("server0", "err"));
    ck_assert_msg(strstr(log, " 1 pushes (0 duplicates, 1 dropped)"), "%s", log);
}
END_TEST

/* A restarted worker opens a new session: refused (LIVE) while the old one is
 * heard, and its refused requests do not keep the old one alive; admitted once
 * the old session has been silent for dead_after_ms, which is then refused. A
 * rank's first HELLO after it was given up on is "joined", not "back". */
START_TEST(a_new_session_retires_the_old_one_once_that_is_silent)
{
    char ep[256];
    const char *j = fast_job("async", 400);
    pid_t s = h_server(j, 0, ep);
    ck_assert_int_gt(s, 0);
    void *old = dealer(ep, NULL), *restarted = dealer(ep, NULL);
    expect(old, req_of(DCPS_MSG_HELLO, 1, SESSION_A, 1), DCPS_MSG_WELCOME, 0, NULL);
    expect(restarted, req_of(DCPS_MSG_HELLO, 1, SESSION_B, 1), DCPS_MSG_ERROR, DCPS_E_LIVE,
           "rank 1 is already connected in session 3f2a9c01\u2026");
    /* The new session's heartbeats are refused and are no sign of life for the
     * old one, which is declared dead after 400 ms. */
    for (int i = 0; i < 8; i++) {
        expect(restarted, req_of(DCPS_MSG_HEARTBEAT, 1, SESSION_B, 2 + (uint64_t)i),
               DCPS_MSG_ERROR, DCPS_E_SESSION, NULL);
        nanosleep(&(struct timespec){0, 100000000}, NULL);
    }
    expect(restarted, req_of(DCPS_MSG_HELLO, 1, SESSION_B, 10), DCPS_MSG_WELCOME, 0, NULL);
    expect(old, req_of(DCPS_MSG_HEARTBEAT, 1, SESSION_A, 2), DCPS_MSG_ERROR, DCPS_E_SESSION,
           "rank 1's session is 9c01beef\u2026, this request names 3f2a9c01\u2026");
    expect(old, req_of(DCPS_MSG_HELLO, 1, SESSION_A, 3), DCPS_MSG_ERROR, DCPS_E_LIVE, NULL);
    expect(restarted, req_of(DCPS_MSG_HEARTBEAT, 1, SESSION_B, 11), DCPS_MSG_HEARTBEAT, 0, NULL);
    /* Rank 0 has not said HELLO in all that time: its first is a join. */
    expect(old, req_of(DCPS_MSG_HELLO, 0, SESSION_A, 4), DCPS_MSG_WELCOME, 0, NULL);
    zmq_close(old), zmq_close(restarted);
    ck_assert_int_eq(h_stop(s, 5000), 0);
    const char *log = h_slurp(h_path("server0", "err"));
    ck_assert_msg(strstr(log, "worker 1 declared dead"), "%s", log);
    ck_assert_msg(strstr(log, "worker 1 joined in session 9c01beef\u2026, which retires session "
                              "3f2a9c01\u2026 (last heard "),
                  "%s", log);
    ck_assert_msg(strstr(log, "worker 0 has not joined within 400 ms"), "%s", log);
    ck_assert_msg(strstr(log, "worker 0 joined (session 3f2a9c01\u2026)"), "%s", log);
    ck_assert_ptr_null(strstr(log, "is back"));
}
END_TEST

/* Without ROUTER_HANDOVER a second connection that names a routing id in use is
 * refused by ZeroMQ (nothing it sends is read), and the live worker with that
 * id is served as before. */
START_TEST(a_colliding_routing_id_does_not_cut_off_a_live_worker)
{
    char ep[256];
    const char *j = fast_job("async", 5000);
    pid_t s = h_server(j, 0, ep);
    ck_assert_int_gt(s, 0);
    void *live = dealer(ep, "worker-7");
    expect(live, req_of(DCPS_MSG_HELLO, 0, SESSION_A, 1), DCPS_MSG_WELCOME, 0, NULL);
    void *twin = dealer(ep, "worker-7");
    dcps_msg_t hello = req_of(DCPS_MSG_HELLO, 0, SESSION_A, 1);
    hello.job_id = cfg.job_id;
    dcps_msg_t beat = req_of(DCPS_MSG_HEARTBEAT, 0, SESSION_A, 2);
    beat.job_id = cfg.job_id;
    ck_assert_int_ge(dcps_frames_send(twin, NULL, &hello, NULL, NULL, 0), 0);
    ck_assert_int_ge(dcps_frames_send(twin, NULL, &beat, NULL, NULL, 0), 0);
    hears_nothing(twin, 500);
    for (uint64_t seq = 3; seq < 6; seq++)
        expect(live, req_of(DCPS_MSG_HEARTBEAT, 0, SESSION_A, seq), DCPS_MSG_HEARTBEAT, 0, NULL);
    hears_nothing(twin, 100);
    zmq_close(live), zmq_close(twin);
    ck_assert_int_eq(h_stop(s, 5000), 0);
}
END_TEST

/* What `on` receives next that answers seq (other messages are dropped), into
 * m; the caller closes f. */
static void reply_to(void *on, uint64_t seq, dcps_frames_t *f, dcps_msg_t *m)
{
    char why[256];
    for (;;) {
        ck_assert_msg(dcps_frames_recv(on, f, 0) > 0, "no reply to seq %llu within 5 s",
                      (unsigned long long)seq);
        ck_assert_msg(dcps_frames_decode(f, 0, cfg.job_id, m, why, sizeof why) == 0, "%s", why);
        if (m->seq == seq)
            return;
        dcps_frames_close(f);
    }
}

/* m is a `type` from shard 1 to session sid; closes f. */
static void from_shard_1(dcps_frames_t *f, const dcps_msg_t *m, uint32_t type, uint64_t sid)
{
    ck_assert_msg(m->type == type, "expected %s, got %s: %s", dcps_msg_type_name(type),
                  dcps_msg_type_name(m->type), m->error_text);
    ck_assert_msg(m->shard == 1, "%s names shard %u", dcps_msg_type_name(type), m->shard);
    ck_assert_msg(m->session == sid, "%s names session %llx, not %llx", dcps_msg_type_name(type),
                  (unsigned long long)m->session, (unsigned long long)sid);
    dcps_frames_close(f);
}

/* Sends a request of rank in session sid with seq (and step; n values of v as
 * one DENSE frame unless v is NULL) whose header has no shard field: a
 * client may leave it out (docs/protocol.md §6). */
static void send_without_shard(void *on, uint32_t type, uint32_t rank, uint64_t sid, uint64_t seq,
                               uint64_t step, const float *v, uint64_t n)
{
    Dcps__FrameDesc fd = DCPS__FRAME_DESC__INIT, *fdp = &fd;
    Dcps__Header h = DCPS__HEADER__INIT;
    uint8_t buf[DCPS_HEADER_MAX];
    fd.has_kind = fd.has_dtype = fd.has_count = fd.has_bytes = 1;
    fd.kind = DCPS_FRAME_DENSE, fd.dtype = DCPS_DTYPE_F32, fd.count = n, fd.bytes = n * 4;
    h.has_protocol = h.has_type = h.has_job_id = h.has_rank = h.has_seq = h.has_session = 1;
    h.protocol = DCPS_PROTOCOL, h.type = type, h.job_id = cfg.job_id, h.rank = rank;
    h.seq = seq, h.session = sid;
    h.has_step = step != 0, h.step = step;
    h.n_frames = v ? 1 : 0, h.frames = &fdp;
    size_t len = dcps__header__pack(&h, buf);
    ck_assert_int_ge(zmq_send(on, buf, len, v ? ZMQ_SNDMORE : 0), 0);
    if (v)
        ck_assert_int_ge(zmq_send(on, v, n * 4, 0), 0);
}

/* Shard 0 of the sync job of replies_name_their_shard_and_session, which
 * decides its rounds (server/rounds.h): ranks 0 and 1 say to it what they say
 * to shard 1 that moves a round (HELLO, INIT, PUSH, a sign of life), on
 * sockets of their own, and its answers are read and left. */
static void to_shard_0(void *on, uint32_t type, uint32_t rank, uint64_t sid, uint64_t seq,
                       uint64_t step, const float *v)
{
    dcps_frames_t f;
    dcps_msg_t m, req = req_of(type, rank, sid, seq);
    dcps_range_t r0 = dcps_shardmap_range(cfg.n_params, 2, 0);
    req.step = step;
    if (v)
        dense(&req, type, v, r0.hi - r0.lo);
    req.rank = rank, req.session = sid, req.seq = seq, req.step = step;
    ask(on, &req, &f, &m);
    ck_assert_msg(m.type != DCPS_MSG_ERROR, "shard 0: %s", m.error_text);
    dcps_frames_close(&f);
}

/* Every reply names the shard that sends it, and every reply but an ERROR the
 * request's session (docs/protocol.md §7): a pull answered at once and one
 * answered after waiting, its WAITING heartbeats, a barrier, and a push
 * acknowledged STALE whose request left out the shard field. A message of 6
 * payload frames is told it has 6. Shard 1 of 2, sync mode (shard 0, which
 * decides the rounds, is told the same pushes: to_shard_0). */
START_TEST(replies_name_their_shard_and_session)
{
    char ep[256], ep0[256], text[4096];
    snprintf(text, sizeof text,
             "%s[server]\nheartbeat_ms = 50\ndead_after_ms = 400\n[job]\nmode = sync\n",
             h_slurp(job(2, "tcp://127.0.0.1:*,tcp://127.0.0.1:*")));
    const char *j = h_write("replies.ini", text);
    load(j);
    pid_t s0 = h_server(j, 0, ep0);
    ck_assert_int_gt(s0, 0);
    pid_t s = h_server(j, 1, ep);
    ck_assert_int_gt(s, 0);
    dcps_range_t r = dcps_shardmap_range(cfg.n_params, 2, 1);
    const uint64_t n = r.hi - r.lo;
    void *w0 = dealer(ep, NULL), *w1 = dealer(ep, NULL);
    void *v0 = dealer(ep0, NULL), *v1 = dealer(ep0, NULL);
    float *g = calloc(cfg.n_params, sizeof(float));
    dcps_frames_t f;
    dcps_msg_t m;

    dcps_msg_t hello = req_of(DCPS_MSG_HELLO, 0, SESSION_A, 1);
    hello.shard = 1;
    ask(w0, &hello, &f, &m);
    from_shard_1(&f, &m, DCPS_MSG_WELCOME, SESSION_A);
    hello = req_of(DCPS_MSG_HELLO, 1, SESSION_B, 1);
    hello.shard = 1;
    ask(w1, &hello, &f, &m);
    from_shard_1(&f, &m, DCPS_MSG_WELCOME, SESSION_B);
    to_shard_0(v0, DCPS_MSG_HELLO, 0, SESSION_A, 1, 0, NULL);
    to_shard_0(v1, DCPS_MSG_HELLO, 1, SESSION_B, 1, 0, NULL);
    to_shard_0(v0, DCPS_MSG_INIT, 0, SESSION_A, 2, 0, g);
    send_without_shard(w0, DCPS_MSG_INIT, 0, SESSION_A, 2, 0, g, n);
    reply_to(w0, 2, &f, &m);
    from_shard_1(&f, &m, DCPS_MSG_PUSH_ACK, SESSION_A);
    send_without_shard(w0, DCPS_MSG_PULL, 0, SESSION_A, 3, 0, NULL, 0);
    reply_to(w0, 3, &f, &m);
    from_shard_1(&f, &m, DCPS_MSG_PULL_REPLY, SESSION_A);

    /* Round 0: rank 0's pull for step 1 waits for rank 1's push. */
    to_shard_0(v0, DCPS_MSG_PUSH, 0, SESSION_A, 4, 0, g);
    send_without_shard(w0, DCPS_MSG_PUSH, 0, SESSION_A, 4, 0, g, n);
    reply_to(w0, 4, &f, &m);
    from_shard_1(&f, &m, DCPS_MSG_PUSH_ACK, SESSION_A);
    send_without_shard(w0, DCPS_MSG_PULL, 0, SESSION_A, 5, 1, NULL, 0);
    reply_to(w0, 5, &f, &m);
    ck_assert_uint_eq(m.flags, DCPS_FLAG_WAITING);
    from_shard_1(&f, &m, DCPS_MSG_HEARTBEAT, SESSION_A);
    to_shard_0(v1, DCPS_MSG_PUSH, 1, SESSION_B, 2, 0, g);
    send_without_shard(w1, DCPS_MSG_PUSH, 1, SESSION_B, 2, 0, g, n);
    reply_to(w1, 2, &f, &m);
    from_shard_1(&f, &m, DCPS_MSG_PUSH_ACK, SESSION_B);
    do
        reply_to(w0, 5, &f, &m);
    while (m.type == DCPS_MSG_HEARTBEAT && (dcps_frames_close(&f), 1));
    from_shard_1(&f, &m, DCPS_MSG_PULL_REPLY, SESSION_A);

    /* Rank 1 falls silent and round 1 closes without it: its push is STALE. */
    for (uint64_t seq = 6; seq < 14; seq++) {
        nanosleep(&(struct timespec){0, 100000000}, NULL);
        send_without_shard(w0, DCPS_MSG_HEARTBEAT, 0, SESSION_A, seq, 0, NULL, 0);
        reply_to(w0, seq, &f, &m);
        from_shard_1(&f, &m, DCPS_MSG_HEARTBEAT, SESSION_A);
        to_shard_0(v0, DCPS_MSG_HEARTBEAT, 0, SESSION_A, seq, 0, NULL);
    }
    to_shard_0(v0, DCPS_MSG_PUSH, 0, SESSION_A, 14, 1, g);
    send_without_shard(w0, DCPS_MSG_PUSH, 0, SESSION_A, 14, 1, g, n);
    reply_to(w0, 14, &f, &m);
    from_shard_1(&f, &m, DCPS_MSG_PUSH_ACK, SESSION_A);
    /* Shard 1 closes round 1 on shard 0's word: rank 0's pull for step 2 says when. */
    send_without_shard(w0, DCPS_MSG_PULL, 0, SESSION_A, 15, 2, NULL, 0);
    do
        reply_to(w0, 15, &f, &m);
    while (m.type == DCPS_MSG_HEARTBEAT && (dcps_frames_close(&f), 1));
    from_shard_1(&f, &m, DCPS_MSG_PULL_REPLY, SESSION_A);
    send_without_shard(w1, DCPS_MSG_PUSH, 1, SESSION_B, 3, 1, g, n);
    reply_to(w1, 3, &f, &m);
    ck_assert_uint_eq(m.flags, DCPS_FLAG_STALE);
    ck_assert_uint_eq(m.step, 2);
    from_shard_1(&f, &m, DCPS_MSG_PUSH_ACK, SESSION_B);

    /* A barrier: rank 0 waits for rank 1, which is back. */
    dcps_msg_t b0 = req_of(DCPS_MSG_BARRIER, 0, SESSION_A, 16), b1;
    b0.shard = 1, b0.step = 9, b0.job_id = cfg.job_id;
    ck_assert_int_ge(dcps_frames_send(w0, NULL, &b0, NULL, NULL, 0), 0);
    b1 = req_of(DCPS_MSG_BARRIER, 1, SESSION_B, 4);
    b1.shard = 1, b1.step = 9;
    ask(w1, &b1, &f, &m);
    from_shard_1(&f, &m, DCPS_MSG_BARRIER, SESSION_B);
    do
        reply_to(w0, 16, &f, &m);
    while (m.type == DCPS_MSG_HEARTBEAT && (dcps_frames_close(&f), 1));
    from_shard_1(&f, &m, DCPS_MSG_BARRIER, SESSION_A);

    /* Six payload frames: the ERROR says six. */
    dcps_msg_t beat = req_of(DCPS_MSG_HEARTBEAT, 0, SESSION_A, 17);
    beat.shard = 1, beat.job_id = cfg.job_id;
    uint8_t hdr[DCPS_HEADER_MAX];
    int len = dcps_codec_pack(&beat, hdr, sizeof hdr);
    ck_assert_int_gt(len, 0);
    ck_assert_int_ge(zmq_send(w0, hdr, (size_t)len, ZMQ_SNDMORE), 0);
    for (int i = 0; i < 6; i++)
        ck_assert_int_ge(zmq_send(w0, g, 4, i < 5 ? ZMQ_SNDMORE : 0), 0);
    reply_to(w0, 17, &f, &m);
    ck_assert_uint_eq(m.error_code, (uint32_t)-DCPS_E_FRAMECOUNT);
    ck_assert_msg(strstr(m.error_text, "HEARTBEAT header describes 0 payload frames, message has 6"),
                  "%s", m.error_text);
    ck_assert_uint_eq(m.shard, 1);
    dcps_frames_close(&f);

    free(g);
    zmq_close(w0), zmq_close(w1), zmq_close(v0), zmq_close(v1);
    ck_assert_int_eq(h_stop(s, 5000), 0);
    ck_assert_int_eq(h_stop(s0, 5000), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("robustness");
    TCase *tc = tcase_create("garbage");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, bad_messages_get_errors_and_change_nothing);
    tcase_add_test(tc, worker_trains_unaffected_while_garbage_arrives);
    tcase_add_test(tc, second_hello_for_a_live_rank_is_refused);
    tcase_add_test(tc, a_socket_that_never_said_hello_cannot_speak_for_a_live_rank);
    tcase_add_test(tc, sequence_numbers_count_within_a_session);
    tcase_add_test(tc, a_new_session_retires_the_old_one_once_that_is_silent);
    tcase_add_test(tc, a_colliding_routing_id_does_not_cut_off_a_live_worker);
    tcase_add_test(tc, a_flood_of_bad_messages_is_counted_and_logged_within_a_limit);
    tcase_add_loop_test(tc, pushes_of_minus_flt_max_are_refused_and_pulls_stay_finite, 0,
                        (int)(sizeof flt_max_cases / sizeof flt_max_cases[0]));
    tcase_add_test(tc, empty_sparse_push_changes_nothing_in_async_and_counts_in_sync);
    tcase_add_test(tc, a_push_with_a_long_unknown_field_is_applied);
    tcase_add_test(tc, the_client_library_passes_every_field_check);
    tcase_add_test(tc, replies_name_their_shard_and_session);
    suite_add_tcase(s, tc);
    return dcps_test_run(s);
}
