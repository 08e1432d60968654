/* dcps — writes the seed corpora of the fuzz harnesses.
 *
 *   tests/fuzz/seeds DIR
 *
 * Writes DIR/codec/ (one valid message each: every type a worker or a shard
 * sends, dense and sparse payloads, PULL with and without DELTA and EXACT, pushes
 * and replies in each shorter value format) and
 * DIR/router/ (whole conversations of a 1- or 2-worker job in each mode: HELLO,
 * INIT, PULL, dense and sparse PUSH, delta pulls, HEARTBEAT, BARRIER, DONE, BYE,
 * a worker that falls silent and comes back, dense pushes and replies in
 * parts with a part out of order and one retried, a push cut between its parts
 * and completed by the next session's, and jobs with [compression]
 * values whose workers push in the shorter formats), in the input formats of
 * tests/fuzz/fuzz_codec.c and tests/fuzz/fuzz_router.c. `make fuzz-seeds` writes
 * them into the source tree's tests/fuzz/corpus/, where they are kept. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/shardmap.h"
#include "proto/quant.h"
#include "tests/fuzz/fuzz.h"

/* An input being built. */
typedef struct {
    uint8_t b[16384];
    size_t len;
} out_t;

static void put(out_t *o, const void *data, size_t len)
{
    if (o->len + len > sizeof o->b) {
        fprintf(stderr, "seeds: input too long\n");
        exit(1);
    }
    memcpy(o->b + o->len, data, len);
    o->len += len;
}

/* Appends a part's bytes, which must not hold a separator. */
static void put_part(out_t *o, const void *data, size_t len)
{
    const uint8_t *p = data;
    if (fuzz_find(p, p + len, FUZZ_PART_SEP) != p + len ||
        fuzz_find(p, p + len, FUZZ_MSG_SEP) != p + len) {
        fprintf(stderr, "seeds: a part holds a separator\n");
        exit(1);
    }
    put(o, data, len);
}

static void put_byte(out_t *o, uint8_t c)
{
    put(o, &c, 1);
}

/* m's header, then each payload frame after FUZZ_PART_SEP. */
static void put_msg(out_t *o, const dcps_msg_t *m)
{
    uint8_t hdr[DCPS_HEADER_MAX];
    int len = dcps_codec_pack(m, hdr, sizeof hdr);
    if (len < 0) {
        fprintf(stderr, "seeds: %s does not pack\n", dcps_msg_type_name(m->type));
        exit(1);
    }
    put_part(o, hdr, (size_t)len);
    for (int i = 0; i < m->nframes; i++) {
        put(o, FUZZ_PART_SEP, FUZZ_SEP_LEN);
        put_part(o, m->payload[i].data, m->payload[i].len);
    }
}

static void save(const char *dir, const char *kind, const char *name, const out_t *o)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/%s", dir, kind, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(o->b, 1, o->len, f) != o->len || fclose(f) != 0) {
        fprintf(stderr, "seeds: %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

static float values[256];
static uint32_t sparse_idx[4];
static float sparse_val[4] = {0.25f, -0.5f, 0.125f, 1.0f};

static dcps_msg_t msg(uint32_t type, uint32_t rank, uint64_t seq)
{
    /* Each rank speaks in a session of its own (FUZZ_SESSION + rank). */
    return (dcps_msg_t){.type = type, .job_id = FUZZ_JOB_ID, .rank = rank, .seq = seq,
                        .session = FUZZ_SESSION + rank};
}

static void dense(dcps_msg_t *m, size_t n)
{
    m->nframes = 1;
    m->frame[0] = (dcps_frame_desc_t){DCPS_FRAME_DENSE, DCPS_DTYPE_F32, n};
    m->payload[0] = (dcps_buf_t){values, n * sizeof *values};
}

/* Four ascending indices spread over [lo, hi). */
static void sparse(dcps_msg_t *m, uint64_t lo, uint64_t hi)
{
    for (int j = 0; j < 4; j++)
        sparse_idx[j] = (uint32_t)(lo + (hi - lo) * (uint64_t)(2 * j + 1) / 8);
    m->nframes = 2;
    m->frame[0] = (dcps_frame_desc_t){DCPS_FRAME_INDICES, DCPS_DTYPE_U32, 4};
    m->frame[1] = (dcps_frame_desc_t){DCPS_FRAME_VALUES, DCPS_DTYPE_F32, 4};
    m->payload[0] = (dcps_buf_t){sparse_idx, sizeof sparse_idx};
    m->payload[1] = (dcps_buf_t){sparse_val, sizeof sparse_val};
}

/* --- codec: one message each ------------------------------------------------------ */

static void codec_seed(const char *dir, const char *name, uint8_t ctl, const dcps_msg_t *m)
{
    out_t o = {.len = 0};
    put_byte(&o, ctl);
    put_msg(&o, m);
    save(dir, "codec", name, &o);
}

static void codec_seeds(const char *dir)
{
    dcps_msg_t m;

    m = msg(DCPS_MSG_HELLO, 0, 0);
    m.n_params = 64;
    codec_seed(dir, "hello", 1, &m);
    m = msg(DCPS_MSG_WELCOME, 1, 0);
    m.n_params = 130, m.range_lo = 64, m.range_hi = 130, m.workers = 2, m.shard = 1;
    m.initialized = true, m.param_version = 3, m.step = 1;
    codec_seed(dir, "welcome", 0, &m);
    m = msg(DCPS_MSG_INIT, 0, 1);
    dense(&m, 64);
    codec_seed(dir, "init", 1, &m);
    m = msg(DCPS_MSG_PUSH, 1, 2);
    m.param_version = 1, m.step = 1;
    dense(&m, 64);
    codec_seed(dir, "push_dense", 1 | 2 << 3, &m);
    m = msg(DCPS_MSG_PUSH, 0, 3);
    m.param_version = 2, m.step = 2;
    sparse(&m, 0, 64);
    codec_seed(dir, "push_sparse", 1 | 16 << 3, &m);
    m.range_lo = 0, m.range_hi = 64;
    codec_seed(dir, "push_sparse_range", 2, &m);
    m = msg(DCPS_MSG_PUSH, 1, 9);
    m.param_version = 1, m.step = 1, m.has = DCPS_HAS_PART;
    m.part = 1, m.parts = 2, m.part_lo = 32, m.part_hi = 64;
    dense(&m, 32);
    codec_seed(dir, "push_part", 1 | 2 << 3, &m);
    m = msg(DCPS_MSG_PUSH_ACK, 0, 3);
    m.param_version = 4, m.flags = DCPS_FLAG_DUPLICATE;
    codec_seed(dir, "push_ack", 1, &m);
    m = msg(DCPS_MSG_PULL, 1, 4);
    m.step = 2;
    codec_seed(dir, "pull", 1, &m);
    m.flags = DCPS_FLAG_DELTA, m.param_version = 4, m.want = 8;
    codec_seed(dir, "pull_delta", 1, &m);
    m.flags = DCPS_FLAG_EXACT, m.want = 0;
    codec_seed(dir, "pull_exact", 5, &m);
    m.flags = 0, m.has = DCPS_HAS_PART, m.parts = 4;
    codec_seed(dir, "pull_parts", 1, &m);
    m = msg(DCPS_MSG_PULL_REPLY, 1, 4);
    m.param_version = 4, m.range_lo = 0, m.range_hi = 64;
    dense(&m, 64);
    codec_seed(dir, "pull_reply_dense", 1, &m);
    sparse(&m, 0, 64);
    codec_seed(dir, "pull_reply_delta", 1 | 1 << 3, &m);
    m.has = DCPS_HAS_PART, m.part = 0, m.parts = 2, m.part_lo = 0, m.part_hi = 32;
    dense(&m, 32);
    codec_seed(dir, "pull_reply_part", 1, &m);
    /* Shorter values (docs/protocol.md, 17): a push and a reply in each format. */
    static const char *const qname[] = {"fp16", "bf16", "int8", "twobit"};
    static uint8_t qbuf[4][4 * 4 + 256 * 2];
    for (uint32_t t = DCPS_DTYPE_F16; t <= DCPS_DTYPE_LAST; t++) {
        uint8_t *b = qbuf[t - DCPS_DTYPE_F16];
        uint32_t block = t == DCPS_DTYPE_I8 ? 64 : 0;
        char name[64];
        m = msg(DCPS_MSG_PUSH, 1, 9);
        m.step = 1;
        dense(&m, 256);
        dcps_quant_encode(t, block, 0.25f, values, 256, b, NULL);
        m.frame[0].dtype = t;
        m.block[0] = block;
        m.payload[0] = (dcps_buf_t){b, (size_t)dcps_quant_bytes(t, 256, block)};
        snprintf(name, sizeof name, "push_dense_%s", qname[t - DCPS_DTYPE_F16]);
        codec_seed(dir, name, 1, &m);
        m = msg(DCPS_MSG_PULL_REPLY, 0, 9);
        sparse(&m, 0, 64);
        m.frame[1].dtype = t;
        m.payload[1] = (dcps_buf_t){b, (size_t)dcps_quant_bytes(t, 4, 0)};
        dcps_quant_encode(t, 0, 0.25f, sparse_val, 4, b, NULL);
        snprintf(name, sizeof name, "pull_reply_delta_%s", qname[t - DCPS_DTYPE_F16]);
        codec_seed(dir, name, 1, &m);
    }
    m = msg(DCPS_MSG_BARRIER, 0, 5);
    m.step = 3;
    codec_seed(dir, "barrier", 1, &m);
    m = msg(DCPS_MSG_HEARTBEAT, 0, 6);
    codec_seed(dir, "heartbeat", 1, &m);
    m.flags = DCPS_FLAG_WAITING;
    codec_seed(dir, "heartbeat_waiting", 0, &m);
    m = msg(DCPS_MSG_DONE, 1, 7);
    codec_seed(dir, "done", 1, &m);
    m = msg(DCPS_MSG_BYE, 1, 8);
    codec_seed(dir, "bye", 1, &m);
    m = msg(DCPS_MSG_ERROR, 1, 8);
    m.error_code = 13;
    snprintf(m.error_text, sizeof m.error_text, "payload frame length does not match the header");
    codec_seed(dir, "error", 3, &m);
}

/* --- router: conversations ---------------------------------------------------------- */

/* The job bytes of fuzz_router.c's job(). */
typedef struct {
    int mode, opt; /* opt: 0 sgd, 1 momentum, 2 DC-ASGD-c, 3 DC-ASGD-a */
    bool delta, restored;
    int workers, size; /* size: the row of job()'s table */
    bool fast;         /* heartbeat 250, dead after 300 ms */
    bool parts;        /* dense pushes in 3 parts (2, 0, 0 again, 1), replies asked in 2 */
    int values;        /* [compression] values: 0 fp32, 1 fp16, 2 bf16, 3 int8; the
                          pushes then alternate the shorter formats too */
} job_t;

static const struct {
    uint64_t n, hello_n; /* hello_n: what rank 0 says where n is auto (0) */
    int shards, index;
} sizes[8] = {{64, 64, 1, 0},   {97, 97, 1, 0}, {130, 130, 2, 0}, {130, 130, 2, 1},
              {256, 256, 2, 1}, {0, 128, 1, 0}, {0, 256, 2, 1},   {200, 200, 3, 2}};

/* A conversation being built: the next message's control byte starts it. */
typedef struct {
    out_t o;
    bool first;
} conv_t;

/* Message m from rank's own routing id, the clock moved by advance (an index
 * of fuzz_router.c's table). */
static void say(conv_t *c, uint32_t rank, int advance, const dcps_msg_t *m)
{
    if (!c->first)
        put(&c->o, FUZZ_MSG_SEP, FUZZ_SEP_LEN);
    c->first = false;
    put_byte(&c->o, (uint8_t)(rank | advance << 2));
    put_msg(&c->o, m);
}

/* Push m (its header) dense over range in 3 parts with seqs m->seq + i: part 2
 * first, then part 0, part 0 again (a retry), then part 1. */
static void push_parts(conv_t *c, uint32_t rank, const dcps_msg_t *m, dcps_range_t range,
                       bool silent)
{
    static const uint32_t order[4] = {2, 0, 0, 1};
    const uint64_t n = range.hi - range.lo;
    for (int k = 0; k < 4; k++) {
        dcps_msg_t p = *m;
        const uint32_t i = order[k];
        p.seq = m->seq + i;
        p.has = DCPS_HAS_PART, p.part = i, p.parts = 3;
        p.part_lo = range.lo + n * i / 3, p.part_hi = range.lo + n * (i + 1) / 3;
        dense(&p, p.part_hi - p.part_lo);
        say(c, rank, silent && k == 0 ? 7 : 1, &p);
    }
}

/* m's values (its last frame, float32) in the shorter format dtype, into a
 * buffer of its own per format (a conversation's pushes are written at once). */
static void shorter(dcps_msg_t *m, uint32_t dtype)
{
    static uint8_t buf[4][4 * 4 + 256 * 2];
    uint8_t *b = buf[dtype - DCPS_DTYPE_F16];
    int f = m->nframes - 1;
    size_t n = (size_t)m->frame[f].count;
    uint32_t block = dtype == DCPS_DTYPE_I8 && n > 64 ? 64 : 0;
    dcps_quant_encode(dtype, block, 0.25f, m->payload[f].data, n, b, NULL);
    m->frame[f].dtype = dtype;
    m->block[f] = block;
    m->payload[f] = (dcps_buf_t){b, (size_t)dcps_quant_bytes(dtype, n, block)};
}

static void conversation(const char *dir, const char *name, const job_t *j, int steps, bool silent)
{
    conv_t c = {.o = {.len = 0}, .first = true};
    const uint64_t n_params = sizes[j->size].hello_n;
    const int index = sizes[j->size].index;
    dcps_range_t range = dcps_shardmap_range(n_params, sizes[j->size].shards, index);
    const size_t n = (size_t)(range.hi - range.lo);
    uint64_t seq[2] = {0, 0};
    dcps_msg_t m;

    put_byte(&c.o, (uint8_t)(j->mode + 3 * j->opt + 12 * j->delta + 24 * j->restored));
    put_byte(&c.o, (uint8_t)(j->workers - 1 + 3 * j->size));
    put_byte(&c.o, (uint8_t)((j->fast ? 16 + 32 : 0) + 64 * j->values));

    for (uint32_t r = 0; r < (uint32_t)j->workers; r++) {
        m = msg(DCPS_MSG_HELLO, r, 0);
        m.n_params = n_params, m.shard = (uint32_t)index;
        say(&c, r, 1, &m);
    }
    m = msg(DCPS_MSG_INIT, 0, ++seq[0]);
    dense(&m, n);
    say(&c, 0, 1, &m);
    for (int step = 0; step < steps; step++) {
        for (uint32_t r = 0; r < (uint32_t)j->workers; r++) {
            m = msg(DCPS_MSG_PULL, r, ++seq[r]);
            m.step = (uint64_t)step;
            if (j->delta && step > 0) {
                m.flags = DCPS_FLAG_DELTA;
                m.param_version = (uint64_t)(step * j->workers);
            }
            if (j->parts)
                m.has = DCPS_HAS_PART, m.parts = 2;
            say(&c, r, 2, &m);
        }
        for (uint32_t r = 0; r < (uint32_t)j->workers; r++) {
            m = msg(DCPS_MSG_PUSH, r, ++seq[r]);
            m.step = (uint64_t)step;
            m.param_version = (uint64_t)step;
            if (j->parts && (step + (int)r) % 2 == 0) {
                push_parts(&c, r, &m, range, silent && step == 1 && r == 0);
                seq[r] += 2; /* parts 0, 1, 2: seq, seq + 1, seq + 2 */
                continue;
            }
            if ((step + (int)r) % 2)
                sparse(&m, range.lo, range.hi);
            else
                dense(&m, n);
            if (j->values) /* each push in another shorter format */
                shorter(&m, DCPS_DTYPE_F16 + (uint32_t)(step + (int)r) % 4);
            /* A worker that falls silent for longer than dead_after_ms
             * in the middle, and comes back. */
            say(&c, r, silent && step == 1 && r == 0 ? 7 : 1, &m);
        }
    }
    for (uint32_t r = 0; r < (uint32_t)j->workers; r++) {
        m = msg(DCPS_MSG_HEARTBEAT, r, ++seq[r]);
        say(&c, r, 3, &m);
    }
    for (uint32_t r = 0; r < (uint32_t)j->workers; r++) {
        m = msg(DCPS_MSG_BARRIER, r, ++seq[r]);
        m.step = (uint64_t)steps;
        say(&c, r, 1, &m);
    }
    m = msg(DCPS_MSG_PULL, 0, ++seq[0]);
    m.step = (uint64_t)steps, m.flags = DCPS_FLAG_EXACT;
    say(&c, 0, 1, &m);
    for (uint32_t r = 0; r < (uint32_t)j->workers; r++) {
        m = msg(DCPS_MSG_DONE, r, ++seq[r]);
        say(&c, r, 1, &m);
        m = msg(DCPS_MSG_BYE, r, ++seq[r]);
        say(&c, r, 1, &m);
    }
    save(dir, "router", name, &c.o);
}

/* Rank 0 of a 1-worker job of 64 parameters cut between the parts of its push
 * of step 0 twice (parts 2 and 0 of 3; then part 1 of 2), each time starting
 * again in a new session (BYE, HELLO), whose push of the step goes over what
 * the cut ones did not cover (async, ssp: docs/protocol.md 17); the last
 * session pushes it whole, then cuts step 1 after part 0 of 2, which a fourth
 * session pushes sparse. */
static void cut_conversation(const char *dir, const char *name, int mode)
{
    conv_t c = {.o = {.len = 0}, .first = true};
    uint64_t seq = 0;
    dcps_msg_t m;
    put_byte(&c.o, (uint8_t)(mode + 3 * 1)); /* momentum: a rule with state */
    put_byte(&c.o, 0);                       /* 1 worker, sizes[0] */
    put_byte(&c.o, 0);
    for (uint64_t session = 0; session < 3; session++) {
        const uint32_t parts = session == 0 ? 3 : 2;
        m = msg(DCPS_MSG_HELLO, 0, 0);
        m.session += 16 * session, m.n_params = 64, m.shard = 0;
        say(&c, 0, 1, &m);
        if (session == 0) {
            m = msg(DCPS_MSG_INIT, 0, ++seq);
            dense(&m, 64);
            say(&c, 0, 1, &m);
        }
        m = msg(DCPS_MSG_PULL, 0, ++seq);
        m.session += 16 * session;
        say(&c, 0, 2, &m);
        const uint64_t base = seq + 1;
        for (uint32_t i = 0; i < parts; i++) {
            if (session < 2 && (session == 0 ? i == 1 : i == 0))
                continue; /* cut: never sent */
            m = msg(DCPS_MSG_PUSH, 0, base + i);
            m.session += 16 * session;
            if (session < 2) {
                m.has = DCPS_HAS_PART, m.part = i, m.parts = parts;
                m.part_lo = 64 * i / parts, m.part_hi = 64 * (i + 1) / parts;
            }
            dense(&m, session < 2 ? m.part_hi - m.part_lo : 64);
            say(&c, 0, 1, &m);
            if (session == 2)
                break; /* whole */
        }
        seq = base + parts;
        if (session < 2) {
            m = msg(DCPS_MSG_BYE, 0, ++seq);
            m.session += 16 * session;
            say(&c, 0, 1, &m);
        }
    }
    /* Step 1: part 0 of 2, cut; the next session pushes it sparse. */
    m = msg(DCPS_MSG_PUSH, 0, ++seq);
    m.session += 32, m.step = 1, m.param_version = 1;
    m.has = DCPS_HAS_PART, m.part = 0, m.parts = 2, m.part_lo = 0, m.part_hi = 32;
    dense(&m, 32);
    say(&c, 0, 1, &m);
    m = msg(DCPS_MSG_BYE, 0, seq += 2);
    m.session += 32;
    say(&c, 0, 1, &m);
    m = msg(DCPS_MSG_HELLO, 0, 0);
    m.session += 48, m.n_params = 64, m.shard = 0;
    say(&c, 0, 1, &m);
    m = msg(DCPS_MSG_PUSH, 0, 1);
    m.session += 48, m.step = 1, m.param_version = 1;
    sparse(&m, 0, 64);
    say(&c, 0, 1, &m);
    save(dir, "router", name, &c.o);
}

static void router_seeds(const char *dir)
{
    static const char *const modes[3] = {"async", "sync", "ssp"};
    char name[64];
    for (int mode = 0; mode < 3; mode++)
        for (int workers = 1; workers <= 2; workers++) {
            job_t j = {.mode = mode,
                       .opt = (mode + workers) % 4,
                       .delta = workers == 2,
                       .workers = workers,
                       .size = workers == 2 ? 3 : 0};
            snprintf(name, sizeof name, "%s_%dw", modes[mode], workers);
            conversation(dir, name, &j, 3, false);
        }
    conversation(dir, "auto_async_2w",
                 &(job_t){.mode = 0, .opt = 3, .delta = true, .workers = 2, .size = 5}, 2, false);
    conversation(dir, "auto_sync_2w_shard1", &(job_t){.mode = 1, .opt = 0, .workers = 2, .size = 6},
                 2, false);
    conversation(dir, "restored_sync_2w",
                 &(job_t){.mode = 1, .opt = 1, .restored = true, .workers = 2, .size = 7}, 3,
                 false);
    conversation(
        dir, "restored_ssp_2w_delta",
        &(job_t){.mode = 2, .opt = 2, .delta = true, .restored = true, .workers = 2, .size = 4}, 3,
        false);
    conversation(dir, "parts_async_1w", &(job_t){.mode = 0, .opt = 1, .workers = 1, .parts = true},
                 3, false);
    conversation(dir, "parts_sync_2w",
                 &(job_t){.mode = 1, .opt = 0, .workers = 2, .size = 3, .parts = true}, 3, false);
    conversation(
        dir, "parts_ssp_2w",
        &(job_t){.mode = 2, .opt = 3, .delta = true, .workers = 2, .size = 4, .parts = true}, 3,
        false);
    conversation(
        dir, "parts_silent_sync_2w",
        &(job_t){.mode = 1, .opt = 0, .workers = 2, .size = 1, .fast = true, .parts = true}, 3,
        true);
    conversation(dir, "values_fp16_async_2w_delta",
                 &(job_t){.mode = 0, .opt = 0, .delta = true, .workers = 2, .size = 2, .values = 1},
                 4, false);
    conversation(dir, "values_int8_sync_2w",
                 &(job_t){.mode = 1, .opt = 2, .workers = 2, .size = 2, .values = 3}, 4, false);
    conversation(dir, "values_bf16_ssp_1w_delta",
                 &(job_t){.mode = 2, .opt = 1, .delta = true, .workers = 1, .size = 1, .values = 2},
                 4, false);
    cut_conversation(dir, "parts_cut_async_1w", 0);
    cut_conversation(dir, "parts_cut_ssp_1w", 2);
    conversation(dir, "silent_sync_2w",
                 &(job_t){.mode = 1, .opt = 0, .workers = 2, .size = 1, .fast = true}, 3, true);
    conversation(
        dir, "silent_ssp_2w",
        &(job_t){.mode = 2, .opt = 3, .delta = true, .workers = 2, .size = 2, .fast = true}, 3,
        true);
}

int main(int argc, char **argv)
{
    char path[4096];
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    for (size_t i = 0; i < sizeof values / sizeof *values; i++)
        values[i] = (float)((int)(i % 17) - 8) / 16.0f;
    const char *kinds[] = {"", "/codec", "/router"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s%s", argv[1], kinds[i]);
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            fprintf(stderr, "seeds: %s: %s\n", path, strerror(errno));
            return 1;
        }
    }
    codec_seeds(argv[1]);
    router_seeds(argv[1]);
    return 0;
}
