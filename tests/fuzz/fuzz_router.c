/* dcps — fuzzing a shard's handling of a whole sequence of messages, in process.
 *
 * The router (server/router.h) with its shard and consistency model, no socket
 * and no loop: messages go in through dcps_router_handle, replies come out
 * through its send function, capture() below; the clock (dcps_router_set_clock)
 * moves by the input's steps, and dcps_router_tick runs whenever heartbeat_ms
 * have passed on it, as the timer does (once, however far the clock jumped,
 * like a libuv timer).
 *
 * Input: three bytes that choose the job (mode, update rule, pull, workers 1-3,
 * model size and shard, restored from a checkpoint or not, learning rate,
 * staleness, timeouts, [compression] values: see job()), then messages separated by FUZZ_MSG_SEP. A
 * message is one control byte (which of four routing ids, or one from the input;
 * how far the clock moves first; whether a tick follows), then its parts
 * separated by FUZZ_PART_SEP: [routing id,] header, payload frames
 * (tests/fuzz/fuzz.h).
 *
 * What must hold after every message and every tick:
 *   - every reply packs, decodes with the codec as the job's, is of a type a
 *     shard sends, an ERROR carries a known code and a sentence, a PULL_REPLY
 *     carries the shard's version and a payload that passes the push checks
 *     (dense: the range's size, or in parts each part's of the split of
 *     docs/protocol.md section 17; delta: indices ascending in the range), its
 *     values in the job's format or float32, decoded as a worker decodes them;
 *   - the version never decreases and moves by at most one; it counts the
 *     applied pushes (async, ssp) or rounds (sync); every accepted push is
 *     counted once in pushes, staleness and apply times;
 *   - message, byte and error counters move by what happened: at most one
 *     ERROR per message, each counted unless it is an early HELLO's NOTREADY;
 *   - the open round, every worker's clock and last applied seq never go back;
 *     the barrier's count is the number of workers in it;
 *   - the parameters stay finite, whatever the pushes (an update that would
 *     make one NaN or Inf is refused with NONFINITE), so every PULL_REPLY's
 *     values are finite too.
 * And nothing leaks (LeakSanitizer, at the end of each input). */
#include <math.h>
#include <stdbool.h>
#include <sys/types.h>

#include "common/config.h"
#include "proto/frame.h"
#include "common/log.h"
#include "server/router.h"
#include "tests/fuzz/fuzz.h"

#define MAX_WORKERS 3
#define AUTO_MAX 4096 /* the largest model a params = auto HELLO may size here */
#define RESTORED_VERSION 5

static dcps_config_t base; /* defaults, loaded once */
static bool trace; /* DCPS_FUZZ_TRACE: each reply on stderr */

/* What the replies of one step (a message or a tick) were. */
static struct {
    int replies, errors;
    uint64_t bytes;
} cap;

static ssize_t discard(void *cookie, const char *buf, size_t size)
{
    return (ssize_t)size;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char err[512];
    const char *set[] = {"job.name=fuzz"};
    if (dcps_config_load(&base, NULL, set, 1, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_router: %s\n", err);
        abort();
    }
    base.job_id = FUZZ_JOB_ID;
    /* Every log line is formatted (DEBUG) and dropped, unless DCPS_FUZZ_LOG asks
     * for them on stderr. Dropped without a system call: a stream that writes
     * nothing, and the journal's format, which reads no clock. */
    dcps_log_set_level(DCPS_LOG_DEBUG);
    if (!getenv("DCPS_FUZZ_LOG")) {
        FILE *sink = fopencookie(NULL, "w", (cookie_io_functions_t){.write = discard});
        FUZZ_ASSERT(sink != NULL);
        setenv("JOURNAL_STREAM", "0:0", 1);
        dcps_log_init("fuzz_router");
        unsetenv("JOURNAL_STREAM");
        dcps_log_set_stream(sink);
    }
    trace = getenv("DCPS_FUZZ_TRACE") != NULL;
    return 0;
}

/* The job of an input's first three bytes. Returns whether the shard starts as
 * if restored from a checkpoint. */
static bool job(const uint8_t c[3], dcps_config_t *cfg, int *index)
{
    static const struct {
        uint64_t n; /* 0: params = auto */
        int shards, index;
    } sizes[8] = {{64, 1, 0},  {97, 1, 0}, {130, 2, 0}, {130, 2, 1},
                  {256, 2, 1}, {0, 1, 0},  {0, 2, 1},   {200, 3, 2}};
    static const double lrs[4] = {0.1, 1e-3, 10, 1};
    static const double densities[4] = {0.01, 0.1, 0.5, 1};

    *cfg = base;
    cfg->mode = c[0] % 3;
    cfg->opt_kind = (c[0] / 3) % 4 == 3 ? DCPS_OPT_DCASGD : (c[0] / 3) % 4;
    cfg->dc_adaptive = (c[0] / 3) % 4 == 3;
    cfg->pull = (c[0] / 12) % 2 ? DCPS_PULL_DELTA : DCPS_PULL_DENSE;
    bool restored = (c[0] / 24) % 2;
    cfg->staleness = (c[0] / 48) % 4;

    cfg->workers = c[1] % 3 + 1;
    int sz = (c[1] / 3) % 8;
    cfg->params = sizes[sz].n ? sizes[sz].n : DCPS_PARAMS_AUTO;
    cfg->n_params = sizes[sz].n;
    cfg->n_shards = sizes[sz].shards;
    *index = sizes[sz].index;
    cfg->pull_density = densities[(c[1] / 24) % 4];
    cfg->density_warmup_epochs = (c[1] / 96) % 2 ? 2 : 0;

    cfg->lr = lrs[c[2] % 4];
    cfg->momentum = (c[2] / 4) % 2 ? 0 : 0.9;
    cfg->dc_lambda = (c[2] / 8) % 2 ? 2 : 0.04;
    cfg->dead_after_ms = (c[2] / 16) % 2 ? 300 : 1000;
    cfg->heartbeat_ms = (c[2] / 32) % 2 ? 250 : 100;
    cfg->values = (c[2] / 64) % 4; /* fp32, fp16, bf16, int8: the pull replies' format */
    return restored;
}

/* As dcps_checkpoint_restore leaves a shard of a job that had started, then
 * the router: initialised at a version of the previous process, with sequence
 * numbers, clocks and the round it had reached (what a checkpoint's words
 * hold: dcps_shard_load, dcps_router_load). */
static void restore(dcps_router_t *r, dcps_shard_t *s, const dcps_config_t *cfg)
{
    static float w[256];
    uint64_t words[DCPS_SHARD_WORDS(MAX_WORKERS)] = {0};
    uint64_t cons[DCPS_CONSISTENCY_WORDS(MAX_WORKERS)] = {0};
    const dcps_shard_stats_t st = dcps_shard_stats(s);
    if (!st.n_params)
        return;
    for (size_t i = 0; i < st.n; i++)
        w[i] = 0.5f - (float)(i % 7) * 0.125f;
    dcps_shard_init(s, w);
    for (int i = 0; i < st.workers; i++) {
        dcps_session_t ss = {
            .id = FUZZ_SESSION + (uint64_t)i, .seq = 3, .pushed = true, .applied = true};
        dcps_session_save(&ss, words + (size_t)i * DCPS_SESSION_WORDS);
        cons[3 + 2 * i] = 2; /* rank i's clock */
    }
    if (cfg->mode == DCPS_MODE_SYNC)
        cons[0] = 2; /* the round */
    dcps_shard_load(s, RESTORED_VERSION, true, words, DCPS_SESSION_WORDS);
    dcps_shard_restored(s);
    dcps_router_load(r, cons);
}

static bool all_finite(const dcps_shard_t *s)
{
    const dcps_shard_stats_t st = dcps_shard_stats(s);
    const float *w = dcps_shard_view(s).w;
    for (size_t i = 0; st.initialized && i < st.n; i++)
        if (!isfinite(w[i]))
            return false;
    return true;
}

/* The input's shard and job, for capture(), which gets only the router. */
static const dcps_shard_t *shard;
static const dcps_config_t *job_cfg;

/* The router's send function: checks each reply as a worker's codec would take it, then releases
 * a payload lent without a copy (only a dense pull reply's). */
static int capture(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *reply,
                   zmq_free_fn *ffn, void *hint)
{
    const dcps_shard_stats_t s = dcps_shard_stats(shard);
    uint8_t hdr[DCPS_HEADER_MAX];
    char why[DCPS_ERROR_TEXT_MAX];
    dcps_msg_t d;

    int len = dcps_codec_pack(reply, hdr, sizeof hdr);
    FUZZ_ASSERT(len > 0);
    int rc = dcps_codec_unpack(hdr, (size_t)len, reply->payload, (size_t)reply->nframes,
                               job_cfg->job_id, &d, why, sizeof why);
    FUZZ_ASSERT(rc == 0);
    if (trace)
        fprintf(stderr, "  -> %s rank %u seq %llu version %llu step %llu flags %u frames %d%s%s\n",
                dcps_msg_type_name(d.type), d.rank, (unsigned long long)d.seq,
                (unsigned long long)d.param_version, (unsigned long long)d.step, d.flags, d.nframes,
                d.error_code ? ": " : "", d.error_text);
    uint64_t bytes = (uint64_t)len; /* as dcps_frames_send counts them */
    for (int i = 0; i < d.nframes; i++)
        bytes += d.payload[i].len;
    cap.bytes += bytes;
    switch (d.type) {
    case DCPS_MSG_ERROR:
        FUZZ_ASSERT(d.error_code > 0 && d.error_code < 1000 &&
                    dcps_error_known(-(int)d.error_code));
        FUZZ_ASSERT(d.error_text[0] != '\0' && d.nframes == 0);
        cap.errors++;
        break;
    case DCPS_MSG_PULL_REPLY: {
        static float room[256]; /* the largest range of job()'s sizes */
        const float *v;
        const uint32_t *idx;
        size_t k;
        d.decode_to = room; /* values in the job's format (section 18), as a worker takes them */
        FUZZ_ASSERT(job_cfg->values != DCPS_VALUES_FP32 ||
                    d.frame[d.nframes > 0 ? d.nframes - 1 : 0].dtype == DCPS_DTYPE_F32 ||
                    d.nframes == 0);
        FUZZ_ASSERT(s.initialized && d.rank < (uint32_t)job_cfg->workers);
        FUZZ_ASSERT(d.param_version == s.version);
        FUZZ_ASSERT(d.range_lo == s.range.lo && d.range_hi == s.range.hi);
        if (d.has & DCPS_HAS_PART) { /* a dense reply in parts: part i of the split */
            const uint64_t a = s.n * d.part / d.parts, b = s.n * (d.part + 1) / d.parts;
            FUZZ_ASSERT(d.parts >= 1 && d.parts <= DCPS_PARTS_MAX && d.part < d.parts);
            FUZZ_ASSERT(d.part_lo == s.range.lo + a && d.part_hi == s.range.lo + b);
            rc = dcps_codec_dense(&d, b - a, &v, why, sizeof why);
        } else if (d.nframes == 1)
            rc = dcps_codec_dense(&d, s.n, &v, why, sizeof why);
        else
            rc = dcps_codec_sparse(&d, s.range.lo, s.range.hi, &idx, &v, &k, why, sizeof why);
        if (rc != 0 && trace)
            fprintf(stderr, "  the reply does not decode: %s\n", why);
        FUZZ_ASSERT(rc == 0);
        break;
    }
    case DCPS_MSG_BUFFERS: { /* shard 0's: none, or the job's buffers, finite */
        const void *f, *iv;
        size_t nf, ni;
        bool any;
        FUZZ_ASSERT(s.index == 0);
        FUZZ_ASSERT(dcps_codec_buffers(&d, &f, &nf, &iv, &ni, &any, why, sizeof why) == 0);
        for (size_t k = 0; k < nf; k++) {
            float x;
            memcpy(&x, (const float *)f + k, sizeof x);
            FUZZ_ASSERT(isfinite(x));
        }
        break;
    }
    case DCPS_MSG_WELCOME:
    case DCPS_MSG_PUSH_ACK:
    case DCPS_MSG_BARRIER:
    case DCPS_MSG_HEARTBEAT:
    case DCPS_MSG_BYE:
    case DCPS_MSG_DONE:
        FUZZ_ASSERT(d.nframes == 0);
        break;
    default:
        FUZZ_ASSERT(!"a type a shard does not send");
    }
    FUZZ_ASSERT(!ffn || (d.type == DCPS_MSG_PULL_REPLY && d.nframes == 1));
    for (int i = 0; ffn && i < reply->nframes; i++)
        ffn((void *)reply->payload[i].data, hint);
    cap.replies++;
    return (int)bytes;
}

/* One input's router, with what the checks compare against. */
typedef struct {
    dcps_router_t *r;
    dcps_shard_t *s;
    const dcps_config_t *cfg;
    uint64_t version0; /* the shard's version at the start */
    double clock_ms;   /* the router's clock */
    double next_tick;  /* when the timer fires next */
} run_t;

/* What must not go back, or moves only by what happened. */
typedef struct {
    uint64_t version, messages, errors, bytes_in, bytes_out, pushes, pulls, round, n_params;
    uint64_t clock[MAX_WORKERS];
    dcps_session_t session[MAX_WORKERS];
    bool initialized;
} snap_t;

static void snap(const run_t *run, snap_t *b)
{
    const dcps_shard_stats_t s = dcps_shard_stats(run->s);
    const dcps_router_stats_t r = dcps_router_stats(run->r);
    const dcps_consistency_t *cons = dcps_router_consistency(run->r);
    *b = (snap_t){.version = s.version,
                  .messages = r.messages,
                  .errors = dcps_router_error_count(run->r),
                  .bytes_in = r.bytes_in,
                  .bytes_out = r.bytes_out,
                  .pushes = s.pushes,
                  .pulls = s.pulls,
                  .round = cons->round,
                  .n_params = s.n_params};
    for (int i = 0; i < run->cfg->workers; i++) {
        b->clock[i] = cons->m[i].clock;
        b->session[i] = *dcps_shard_session(run->s, (uint32_t)i);
    }
    b->initialized = s.initialized;
    cap.replies = cap.errors = 0;
    cap.bytes = 0;
}

static void check(const run_t *run, const snap_t *b, bool message, uint64_t bytes_in)
{
    const dcps_shard_stats_t s = dcps_shard_stats(run->s);
    const dcps_router_stats_t r = dcps_router_stats(run->r);
    const dcps_consistency_t *cons = dcps_router_consistency(run->r);
    const uint64_t version0 = run->version0;
    const int P = run->cfg->workers;

    FUZZ_ASSERT(s.version >= b->version && s.version <= b->version + 1);
    if (run->cfg->mode == DCPS_MODE_SYNC)
        FUZZ_ASSERT(s.version - version0 == r.apply_round.count);
    else
        FUZZ_ASSERT(s.version - version0 == s.pushes && r.apply_round.count == 0);
    FUZZ_ASSERT(s.staleness.count == s.pushes && r.apply_push.count == s.pushes);
    FUZZ_ASSERT(s.pushes >= b->pushes && s.pulls >= b->pulls);
    FUZZ_ASSERT(s.initialized >= b->initialized);
    FUZZ_ASSERT(b->n_params == 0 || s.n_params == b->n_params);
    FUZZ_ASSERT(!s.initialized || s.n_params > 0);

    uint64_t errors = dcps_router_error_count(run->r);
    FUZZ_ASSERT(r.messages == b->messages + message);
    FUZZ_ASSERT(r.bytes_in == b->bytes_in + bytes_in);
    FUZZ_ASSERT(r.bytes_out == b->bytes_out + cap.bytes);
    FUZZ_ASSERT(errors >= b->errors && errors - b->errors <= (uint64_t)cap.errors);
    FUZZ_ASSERT(cap.errors <= (message ? 1 : 0));

    FUZZ_ASSERT(cons->round >= b->round);
    int contributed = 0;
    for (int i = 0; i < P; i++) {
        const dcps_session_t *ss = dcps_shard_session(run->s, (uint32_t)i);
        FUZZ_ASSERT(cons->m[i].clock >= b->clock[i]);
        /* Within a session, the last push's seq never goes back. */
        FUZZ_ASSERT(ss->id != b->session[i].id || !b->session[i].pushed ||
                    ss->seq >= b->session[i].seq);
        contributed += cons->m[i].contributed;
    }
    /* A restored shard counts a worker that pulled for the next round as having
     * pushed for this one, with nothing in the sum (dcps_consistency_catch_up). */
    FUZZ_ASSERT(cons->contributions >= 0 && cons->contributions <= contributed);
    /* The barrier's count is the number of workers in it. */
    FUZZ_ASSERT(r.barrier_waiting == r.in_barrier);

    FUZZ_ASSERT(all_finite(run->s));
}

static void tick(run_t *run)
{
    snap_t b;
    snap(run, &b);
    dcps_router_tick(run->r);
    check(run, &b, false, 0);
    run->next_tick = run->clock_ms + run->cfg->heartbeat_ms;
}

/* Whether the harness passes this message on: a HELLO that would size an
 * unsized shard (params = auto) beyond AUTO_MAX is not, to keep each input's
 * memory small (the shard accepts up to DCPS_PARAMS_AUTO_MAX, 2^30). */
static bool pass_on(const run_t *run, const dcps_buf_t *parts, size_t n)
{
    dcps_msg_t m;
    char why[DCPS_ERROR_TEXT_MAX];
    if (dcps_shard_stats(run->s).n_params || n < 2)
        return true;
    if (dcps_codec_unpack(parts[1].data, parts[1].len, parts + 2,
                          n - 2 > DCPS_MAX_FRAMES ? DCPS_MAX_FRAMES + 1 : n - 2, run->cfg->job_id,
                          &m, why, sizeof why) != 0)
        return true;
    return m.type != DCPS_MSG_HELLO || m.n_params <= AUTO_MAX;
}

static void message(run_t *run, const uint8_t *data, size_t size)
{
    dcps_router_t *r = run->r;
    static const char *const ids[4] = {"w0", "w1", "w2", "w3"};
    static const uint32_t advance_ms[8] = {0, 1, 30, 100, 250, 700, 2000, 15000};
    fuzz_parts_t in;
    dcps_buf_t parts[FUZZ_MAX_PARTS + 1];
    size_t n = 0;

    if (size == 0)
        return;
    const uint8_t ctl = data[0];
    fuzz_split(data + 1, size - 1, &in);
    if (!(ctl & 0x80))
        parts[n++] = (dcps_buf_t){ids[ctl & 3], 2};
    for (size_t i = 0; i < in.n; i++)
        parts[n++] = in.part[i];
    size_t total = n + in.extra;
    uint64_t bytes = 0;
    for (size_t i = 0; i < n && i < DCPS_MAX_PARTS; i++)
        bytes += parts[i].len;

    /* The clock moves; the timer fires if its time has come. */
    run->clock_ms += advance_ms[(ctl >> 2) & 7];
    dcps_router_set_clock(r, run->clock_ms);
    if (run->clock_ms >= run->next_tick)
        tick(run);
    if (pass_on(run, parts, total)) {
        snap_t b;
        snap(run, &b);
        if (trace)
            fprintf(stderr, "t=%.0f ms: message %llu from id %u (%zu parts)\n", run->clock_ms,
                    (unsigned long long)b.messages + 1, ctl & 3, total);
        dcps_router_handle(r, parts, total, ctl & 0x20 ? NULL : "tcp://127.0.0.1:40000", NULL);
        check(run, &b, true, bytes);
    }
    if (ctl & 0x40)
        tick(run);
    fuzz_parts_free(&in);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static dcps_config_t cfg;
    run_t run;
    int index, err;

    if (size < 3)
        return 0;
    bool restored = job(data, &cfg, &index);
    dcps_shard_t *s = dcps_shard_new(&cfg, index, &err);
    FUZZ_ASSERT(s != NULL);
    run = (run_t){.r = dcps_router_new(NULL, NULL, &cfg, s, &err), .s = s, .cfg = &cfg};
    FUZZ_ASSERT(run.r != NULL);
    shard = s;
    job_cfg = &cfg;
    dcps_router_set_send(run.r, capture);
    if (restored)
        restore(run.r, s, &cfg);
    run.version0 = dcps_shard_stats(s).version;
    run.next_tick = cfg.heartbeat_ms; /* the timer's first time, from init */

    const uint8_t *p = data + 3, *end = data + size;
    for (;;) {
        const uint8_t *q = fuzz_find(p, end, FUZZ_MSG_SEP);
        message(&run, p, (size_t)(q - p));
        if (q == end)
            break;
        p = q + FUZZ_SEP_LEN;
    }
    dcps_router_close(run.r, NULL);
    dcps_router_destroy(&run.r);
    dcps_shard_destroy(&s);
    return 0;
}
