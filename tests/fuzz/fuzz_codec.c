/* dcps — fuzzing the wire codec (proto/codec.h): header and payload decoding.
 *
 * Input: one control byte, then the message's parts separated by FUZZ_PART_SEP
 * (tests/fuzz/fuzz.h): the header, then up to a few payload frames. The control
 * byte picks the job id to expect (the seeds' or none), the room for the
 * sentence (down to one byte), one of the sparse ranges tried, and whether the
 * message also goes through ZeroMQ (proto/frame.h): sent as parts from a DEALER
 * to a ROUTER over inproc://, received with dcps_frames_recv and decoded with
 * dcps_frames_decode as the shard does, then sent back with dcps_frames_send.
 *
 * What must hold, for any input:
 *   - dcps_codec_unpack returns 0 or a code of the table (common/error.h), and on
 *     failure writes a non-empty NUL-terminated sentence within the room given;
 *   - a message it accepts describes exactly the frames it was given, and packs
 *     again (dcps_codec_pack) into a header that decodes to the same fields and
 *     packs to the same bytes;
 *   - dcps_codec_dense and dcps_codec_sparse, for several counts and ranges,
 *     fail the same way or hand back exactly the frame's data, every value
 *     finite and, sparse, every index in range and strictly ascending; and
 *     dcps_codec_dense_to (the client's copy that checks as it copies) gives
 *     dcps_codec_dense's code and sentence, and copies the frame's bytes exactly
 *     when the frame's shape was right, nothing otherwise;
 *   - a frame of shorter values (proto/quant.h) decodes through the codec as
 *     dcps_quant_decode decodes it, to finite values its scales allow, and a
 *     float16 or bfloat16 one encodes back to its own bytes;
 *   - through ZeroMQ, the routing id comes first, every part's data is 8-byte
 *     aligned, the decoding gives the same code and fields with the same
 *     payload bytes, and the message sent back decodes to the same again.
 * AddressSanitizer and UndefinedBehaviorSanitizer watch every read. */
#include <math.h>
#include <stdbool.h>
#include <zmq.h>

#include "proto/frame.h"
#include "proto/quant.h"
#include "tests/fuzz/fuzz.h"

static const size_t whylens[4] = {DCPS_ERROR_TEXT_MAX, 40, 2, 1};
static void *zctx, *router, *dealer; /* one pair for every input */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    zctx = zmq_ctx_new();
    FUZZ_ASSERT(zctx != NULL);
    router = zmq_socket(zctx, ZMQ_ROUTER);
    dealer = zmq_socket(zctx, ZMQ_DEALER);
    FUZZ_ASSERT(router && dealer);
    FUZZ_ASSERT(zmq_setsockopt(dealer, ZMQ_ROUTING_ID, "fuzz", 4) == 0);
    FUZZ_ASSERT(zmq_bind(router, "inproc://fuzz_codec") == 0);
    FUZZ_ASSERT(zmq_connect(dealer, "inproc://fuzz_codec") == 0);
    return 0;
}

/* The fields that travel. error_text travels with an error code only
 * (dcps_codec_pack), so a text without a code is not compared. */
static void same_fields(const dcps_msg_t *a, const dcps_msg_t *b)
{
    FUZZ_ASSERT(a->type == b->type);
    FUZZ_ASSERT(a->job_id == b->job_id);
    FUZZ_ASSERT(a->rank == b->rank);
    FUZZ_ASSERT(a->seq == b->seq);
    FUZZ_ASSERT(a->shard == b->shard);
    FUZZ_ASSERT(a->param_version == b->param_version);
    FUZZ_ASSERT(a->n_params == b->n_params);
    FUZZ_ASSERT(a->range_lo == b->range_lo);
    FUZZ_ASSERT(a->range_hi == b->range_hi);
    FUZZ_ASSERT(a->initialized == b->initialized);
    FUZZ_ASSERT(a->error_code == b->error_code);
    if (a->error_code)
        FUZZ_ASSERT(strcmp(a->error_text, b->error_text) == 0);
    FUZZ_ASSERT(a->flags == b->flags);
    FUZZ_ASSERT(a->workers == b->workers);
    FUZZ_ASSERT(a->step == b->step);
    FUZZ_ASSERT(a->want == b->want);
    FUZZ_ASSERT(a->nframes == b->nframes);
    for (int i = 0; i < a->nframes; i++) {
        FUZZ_ASSERT(a->frame[i].kind == b->frame[i].kind);
        FUZZ_ASSERT(a->frame[i].dtype == b->frame[i].dtype);
        FUZZ_ASSERT(a->frame[i].count == b->frame[i].count);
        FUZZ_ASSERT(a->block[i] == b->block[i]);
        FUZZ_ASSERT(a->payload[i].data == b->payload[i].data);
        FUZZ_ASSERT(a->payload[i].len == b->payload[i].len);
    }
}

/* m, decoded from frames, packs into a header that decodes to the same
 * fields; that one packs to the same bytes (the packed form is canonical). */
static void roundtrip(const dcps_msg_t *m, const dcps_buf_t *frames, size_t nframes)
{
    uint8_t a[DCPS_HEADER_MAX], b[DCPS_HEADER_MAX];
    char why[DCPS_ERROR_TEXT_MAX];
    dcps_msg_t again;

    int la = dcps_codec_pack(m, a, sizeof a);
    FUZZ_ASSERT(la > 0);
    int rc = dcps_codec_unpack(a, (size_t)la, frames, nframes, m->job_id, &again, why, sizeof why);
    FUZZ_ASSERT(rc == 0);
    same_fields(m, &again);
    int lb = dcps_codec_pack(&again, b, sizeof b);
    FUZZ_ASSERT(lb == la && memcmp(a, b, (size_t)la) == 0);
}

static void check_dense(const dcps_msg_t *m, uint64_t count, size_t whylen)
{
    char why[DCPS_ERROR_TEXT_MAX], why_to[DCPS_ERROR_TEXT_MAX];
    const float *v = NULL;
    memset(why, 0x55, sizeof why);
    int rc = dcps_codec_dense(m, count, &v, why, whylen);
    /* The client's copy that checks as it goes: the same verdict and sentence;
     * dst untouched unless the frame's shape was right, then its bytes. */
    enum { TO_MAX = 64 };
    float dst[TO_MAX + 1];
    if (count <= TO_MAX) {
        memset(dst, 0x55, sizeof dst);
        memset(why_to, 0x55, sizeof why_to);
        int rc_to = dcps_codec_dense_to(m, count, dst, why_to, whylen);
        FUZZ_ASSERT(rc_to == rc);
        FUZZ_ASSERT(rc == 0 || whylen == 0 || strcmp(why, why_to) == 0);
        uint32_t marker;
        memset(&marker, 0x55, sizeof marker);
        if ((rc == 0 || rc == DCPS_E_NONFINITE) && count > 0)
            FUZZ_ASSERT(memcmp(dst, m->payload[0].data, count * sizeof *dst) == 0);
        else if (rc != 0 && rc != DCPS_E_NONFINITE)
            for (uint64_t i = 0; i < count; i++)
                FUZZ_ASSERT(memcmp(&dst[i], &marker, sizeof marker) == 0);
        FUZZ_ASSERT(memcmp(&dst[count], &marker, sizeof marker) == 0);
    }
    if (rc != 0) {
        fuzz_check_failure(rc, why, whylen);
        return;
    }
    FUZZ_ASSERT(m->nframes == 1 && m->frame[0].kind == DCPS_FRAME_DENSE);
    FUZZ_ASSERT(m->frame[0].dtype == DCPS_DTYPE_F32 && m->frame[0].count == count);
    FUZZ_ASSERT(v == m->payload[0].data && m->payload[0].len == count * sizeof *v);
    for (uint64_t i = 0; i < count; i++)
        FUZZ_ASSERT(isfinite(v[i]));
}

static void check_sparse(const dcps_msg_t *m, uint64_t lo, uint64_t hi, size_t whylen)
{
    char why[DCPS_ERROR_TEXT_MAX];
    const uint32_t *idx = NULL;
    const float *v = NULL;
    size_t k = 0;
    memset(why, 0x55, sizeof why);
    int rc = dcps_codec_sparse(m, lo, hi, &idx, &v, &k, why, whylen);
    if (rc != 0) {
        fuzz_check_failure(rc, why, whylen);
        return;
    }
    FUZZ_ASSERT(m->nframes == 2 && m->frame[0].kind == DCPS_FRAME_INDICES &&
                m->frame[1].kind == DCPS_FRAME_VALUES);
    FUZZ_ASSERT(k == m->frame[0].count && k == m->frame[1].count && k <= hi - lo);
    FUZZ_ASSERT(idx == m->payload[0].data && v == m->payload[1].data);
    FUZZ_ASSERT(m->payload[0].len == k * sizeof *idx && m->payload[1].len == k * sizeof *v);
    for (size_t j = 0; j < k; j++) {
        FUZZ_ASSERT(idx[j] >= lo && idx[j] < hi);
        FUZZ_ASSERT(j == 0 || idx[j] > idx[j - 1]);
        FUZZ_ASSERT(isfinite(v[j]));
    }
}

/* A frame of shorter values (proto/quant.h), decoded as a shard does: the same
 * code as dcps_quant_decode; on success every value finite, of its block's
 * scale (INT8: |v| <= 127 s; TWOBIT: 0 or ±tau), and FLOAT16 and BFLOAT16
 * encode back to the same bytes (every finite code is exact in float32). */
static void check_quant(const dcps_msg_t *m, size_t whylen)
{
    enum { ROOM = 1024 };
    static float room[ROOM], direct[ROOM];
    static uint8_t again[2 * ROOM];
    char why[DCPS_ERROR_TEXT_MAX];
    int f = m->nframes - 1;
    if (f < 0 || !dcps_quant_is(m->frame[f].dtype) || m->frame[f].count > ROOM)
        return;
    const uint32_t dtype = m->frame[f].dtype, block = m->block[f];
    const size_t n = (size_t)m->frame[f].count;
    dcps_msg_t q = *m;
    q.decode_to = room;
    const float *v;
    const uint32_t *idx;
    size_t k;
    int rc = m->frame[f].kind == DCPS_FRAME_DENSE
                 ? dcps_codec_dense(&q, n, &v, why, whylen)
                 : dcps_codec_sparse(&q, 0, (uint64_t)UINT32_MAX + 1, &idx, &v, &k, why, whylen);
    if (rc != 0) {
        fuzz_check_failure(rc, why, whylen);
        return;
    }
    FUZZ_ASSERT(dcps_quant_decode(dtype, block, m->payload[f].data, n, direct, why, whylen) == 0);
    FUZZ_ASSERT(v == room);
    FUZZ_ASSERT(memcmp(room, direct, n * sizeof *room) == 0);
    const uint8_t *p = m->payload[f].data;
    size_t per = block ? block : n;
    for (size_t i = 0; i < n; i++) {
        float s;
        FUZZ_ASSERT(isfinite(room[i]));
        if (dtype == DCPS_DTYPE_I8 || dtype == DCPS_DTYPE_TWOBIT) {
            memcpy(&s, p + 4 * (i / per), sizeof s);
            FUZZ_ASSERT(dtype == DCPS_DTYPE_I8 ? fabsf(room[i]) <= 127.0f * s * 1.000001f
                                               : room[i] == 0 || fabsf(room[i]) == s);
        }
    }
    if (dtype == DCPS_DTYPE_F16 || dtype == DCPS_DTYPE_BF16) {
        dcps_quant_encode(dtype, 0, 0, room, n, again, NULL);
        FUZZ_ASSERT(memcmp(again, p, 2 * n) == 0);
    }
}

/* What an accepted message says about its frames. */
static void check_decoded(const dcps_msg_t *m, const fuzz_parts_t *in, size_t nframes,
                          uint64_t expect)
{
    FUZZ_ASSERT(m->type > 0 && m->type < DCPS_MSG_TYPE_END);
    FUZZ_ASSERT(strcmp(dcps_msg_type_name(m->type), "unknown") != 0);
    FUZZ_ASSERT(expect == 0 || m->job_id == expect);
    FUZZ_ASSERT(m->nframes >= 0 && (size_t)m->nframes == nframes);
    FUZZ_ASSERT(memchr(m->error_text, '\0', sizeof m->error_text) != NULL);
    for (int i = 0; i < m->nframes; i++) {
        const dcps_frame_desc_t *d = &m->frame[i];
        FUZZ_ASSERT(d->kind >= DCPS_FRAME_DENSE && d->kind <= DCPS_FRAME_KIND_LAST);
        FUZZ_ASSERT(d->dtype >= DCPS_DTYPE_F32 && d->dtype <= DCPS_DTYPE_LAST);
        FUZZ_ASSERT(!dcps_quant_is(d->dtype) || d->kind == DCPS_FRAME_DENSE ||
                    d->kind == DCPS_FRAME_VALUES);
        FUZZ_ASSERT(m->block[i] == 0 || dcps_quant_blocks(d->dtype, 1, 0) == 1);
        FUZZ_ASSERT(m->payload[i].data == in->part[i + 1].data);
        FUZZ_ASSERT(m->payload[i].len == in->part[i + 1].len &&
                    dcps_quant_bytes(d->dtype, d->count, m->block[i]) == m->payload[i].len);
    }
    dcps_msg_t reply;
    dcps_msg_reply(&reply, m, DCPS_MSG_ERROR);
    FUZZ_ASSERT(reply.type == DCPS_MSG_ERROR && reply.job_id == m->job_id &&
                reply.rank == m->rank && reply.seq == m->seq && reply.shard == m->shard &&
                reply.nframes == 0);
}

/* The same fields as want, from other copies of the same payload bytes. */
static void same_message(const dcps_msg_t *want, const dcps_msg_t *got)
{
    dcps_msg_t copy = *got;
    for (int i = 0; i < got->nframes && i < want->nframes; i++) {
        FUZZ_ASSERT((uintptr_t)got->payload[i].data % 8 == 0 || got->payload[i].len == 0);
        FUZZ_ASSERT(got->payload[i].len == want->payload[i].len);
        FUZZ_ASSERT(want->payload[i].len == 0 ||
                    memcmp(got->payload[i].data, want->payload[i].data, want->payload[i].len) == 0);
        copy.payload[i] = want->payload[i];
    }
    same_fields(want, &copy);
}

static int send_part(void *sock, const void *data, size_t len, int more)
{
    return zmq_send(sock, data, len, more ? ZMQ_SNDMORE : 0) == (int)len ? 0 : -1;
}

/* The input's parts through ZeroMQ, as a worker sends them and a shard takes
 * them; rc and m are what dcps_codec_unpack made of them. */
static void through_zmq(const fuzz_parts_t *in, uint64_t expect, size_t whylen, int rc,
                        const dcps_msg_t *m)
{
    dcps_frames_t f, back;
    dcps_msg_t got;
    char why[DCPS_ERROR_TEXT_MAX];
    size_t total = in->n + in->extra;

    for (size_t i = 0; i < total; i++) {
        const dcps_buf_t *p = i < in->n ? &in->part[i] : &(dcps_buf_t){NULL, 0};
        FUZZ_ASSERT(send_part(dealer, p->data, p->len, i + 1 < total) == 0);
    }
    int n = dcps_frames_recv(router, &f, 0);
    FUZZ_ASSERT(n >= 2 && (size_t)n == (total + 1 < DCPS_MAX_PARTS ? total + 1 : DCPS_MAX_PARTS));
    FUZZ_ASSERT(f.extra == total + 1 - (size_t)n);
    FUZZ_ASSERT(zmq_msg_size(&f.part[0]) == 4 && memcmp(zmq_msg_data(&f.part[0]), "fuzz", 4) == 0);
    for (int i = 0; i < n; i++)
        FUZZ_ASSERT((uintptr_t)zmq_msg_data(&f.part[i]) % 8 == 0 || zmq_msg_size(&f.part[i]) == 0);

    memset(why, 0x55, sizeof why);
    int rc2 = dcps_frames_decode(&f, 1, expect, &got, why, whylen);
    FUZZ_ASSERT(rc2 == rc);
    if (rc2 != 0) {
        fuzz_check_failure(rc2, why, whylen);
        dcps_frames_close(&f);
        return;
    }
    same_message(m, &got);

    /* Back to the worker: the routing id, the header packed again, the payload. */
    const dcps_buf_t id = {zmq_msg_data(&f.part[0]), zmq_msg_size(&f.part[0])};
    int sent = dcps_frames_send(router, &id, &got, NULL, NULL, ZMQ_DONTWAIT);
    FUZZ_ASSERT(sent > 0);
    n = dcps_frames_recv(dealer, &back, 0);
    FUZZ_ASSERT(n == 1 + got.nframes && back.extra == 0);
    dcps_msg_t again;
    FUZZ_ASSERT(dcps_frames_decode(&back, 0, m->job_id, &again, why, sizeof why) == 0);
    same_message(m, &again);
    dcps_frames_close(&back);
    dcps_frames_close(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_parts_t in;
    dcps_msg_t m;
    char why[DCPS_ERROR_TEXT_MAX];

    if (size == 0)
        return 0;
    const uint8_t ctl = data[0];
    const uint64_t expect = ctl & 1 ? FUZZ_JOB_ID : 0;
    const size_t whylen = whylens[(ctl >> 1) & 3];
    fuzz_split(data + 1, size - 1, &in);
    const size_t nframes = in.n - 1 + in.extra;

    memset(why, 0x55, sizeof why);
    int rc = dcps_codec_unpack(in.part[0].data, in.part[0].len, in.part + 1, nframes, expect, &m,
                               why, whylen);
    if (ctl & 0x80)
        through_zmq(&in, expect, whylen, rc, &m);
    if (rc != 0) {
        fuzz_check_failure(rc, why, whylen);
        goto out;
    }
    check_decoded(&m, &in, nframes, expect);
    roundtrip(&m, in.part + 1, nframes);

    /* The payload checks as the shard makes them (its range's size and bounds),
     * and around them. */
    uint64_t count = m.nframes > 0 ? m.frame[0].count : 0;
    check_dense(&m, count, whylen);
    check_dense(&m, count + 1, whylen);
    check_dense(&m, 0, whylen);
    check_dense(&m, m.n_params, whylen);
    check_sparse(&m, 0, (uint64_t)UINT32_MAX + 1, whylen);
    check_quant(&m, whylen);
    check_sparse(&m, 0, 0, whylen);
    if (m.range_lo <= m.range_hi)
        check_sparse(&m, m.range_lo, m.range_hi, whylen);
    if (m.nframes > 0 && m.frame[0].count > 0 && m.frame[0].dtype == DCPS_DTYPE_U32) {
        uint32_t first = *(const uint32_t *)m.payload[0].data;
        uint64_t span = (ctl >> 3) & 15;
        check_sparse(&m, first, first + span, whylen);
        check_sparse(&m, first + 1ull, first + 1ull + span, whylen);
    }
out:
    fuzz_parts_free(&in);
    return 0;
}
