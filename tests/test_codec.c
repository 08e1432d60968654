/* Tests for proto/codec: every message type survives pack + unpack with every
 * header field, and each error code of the validator is reached by a crafted
 * message (headers built with dcps_codec_pack or directly with protobuf-c, frames
 * as raw buffers), with the sentence naming what was wrong. Then the payload
 * checks of dense and sparse pushes, dcps_msg_reply and the type names. */
#include "proto/codec.h"
#include "proto/quant.h"

#include <check.h>

#include "tests/check_run.h"
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "proto/dcps.pb-c.h"

#define JOB 0x1234567890abcdefull

/* --- helpers ------------------------------------------------------------------------ */

static uint8_t hbuf[4 * DCPS_HEADER_MAX];
static char why[DCPS_ERROR_TEXT_MAX];

/* Packs m into hbuf; fails the test if the codec refuses. */
static size_t pack(const dcps_msg_t *m)
{
    int len = dcps_codec_pack(m, hbuf, sizeof hbuf);
    ck_assert_int_gt(len, 0);
    return (size_t)len;
}

/* Packs a protobuf-c Header built by hand into hbuf. */
static size_t craft(const Dcps__Header *h)
{
    size_t len = dcps__header__get_packed_size(h);
    ck_assert_uint_le(len, sizeof hbuf);
    ck_assert_uint_eq(dcps__header__pack(h, hbuf), len);
    return len;
}

/* A valid hand-built header: protocol DCPS_PROTOCOL, PUSH of job JOB with nfd frame
 * descriptions taken from fd (already filled by the caller). */
static Dcps__Header base_header(Dcps__FrameDesc **fdp, size_t nfd)
{
    Dcps__Header h = DCPS__HEADER__INIT;
    h.has_protocol = 1;
    h.protocol = DCPS_PROTOCOL;
    h.has_type = 1;
    h.type = DCPS_MSG_PUSH;
    h.has_job_id = 1;
    h.job_id = JOB;
    h.has_rank = 1;
    h.rank = 3;
    h.has_seq = 1;
    h.seq = 77;
    h.n_frames = nfd;
    h.frames = fdp;
    return h;
}

static Dcps__FrameDesc frame_desc(uint32_t kind, uint32_t dtype, uint64_t count, uint64_t bytes)
{
    Dcps__FrameDesc d = DCPS__FRAME_DESC__INIT;
    d.has_kind = d.has_dtype = d.has_count = d.has_bytes = 1;
    d.kind = kind;
    d.dtype = dtype;
    d.count = count;
    d.bytes = bytes;
    return d;
}

/* A message of one frame (kind, dtype, count) with its payload. */
static dcps_msg_t msg1(uint32_t type, uint32_t kind, uint32_t dtype, uint64_t count,
                       const void *data, size_t len)
{
    dcps_msg_t m;
    memset(&m, 0, sizeof m);
    m.type = type;
    m.job_id = JOB;
    m.rank = 1;
    m.seq = 5;
    m.nframes = 1;
    m.frame[0] = (dcps_frame_desc_t){kind, dtype, count};
    m.payload[0] = (dcps_buf_t){data, len};
    return m;
}

/* Round-trips m (pack, then unpack with m's own payload frames) and expects rc. */
static int roundtrip(const dcps_msg_t *m, uint64_t expect_job, dcps_msg_t *out)
{
    size_t len = pack(m);
    why[0] = '\0';
    return dcps_codec_unpack(hbuf, len, m->payload, (size_t)m->nframes, expect_job, out, why,
                             sizeof why);
}

/* Unpacks hbuf[0..len) with the given frames, job JOB expected. */
static int unpack_raw(size_t len, const dcps_buf_t *frames, size_t nframes, dcps_msg_t *out)
{
    why[0] = '\0';
    return dcps_codec_unpack(hbuf, len, frames, nframes, JOB, out, why, sizeof why);
}

#define ck_assert_why_has(text)                                                                    \
    ck_assert_msg(strstr(why, (text)) != NULL, "why \"%s\" does not contain \"%s\"", why, (text))

/* A received sparse push: indices and values frames, decoded by the codec. */
static dcps_msg_t sparse_msg(const uint32_t *idx, size_t ni, const float *v, size_t nv)
{
    dcps_msg_t m, out;
    memset(&m, 0, sizeof m);
    m.type = DCPS_MSG_PUSH;
    m.job_id = JOB;
    m.nframes = 2;
    m.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_INDICES, DCPS_DTYPE_U32, ni};
    m.frame[1] = (dcps_frame_desc_t){DCPS_FRAME_VALUES, DCPS_DTYPE_F32, nv};
    m.payload[0] = (dcps_buf_t){idx, ni * 4};
    m.payload[1] = (dcps_buf_t){v, nv * 4};
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    return out;
}

/* A received dense push of n floats. */
static dcps_msg_t dense_msg(const float *v, size_t n)
{
    dcps_msg_t m = msg1(DCPS_MSG_PUSH, DCPS_FRAME_DENSE, DCPS_DTYPE_F32, n, v, n * 4), out;
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    return out;
}

/* --- round trips --------------------------------------------------------------------- */

/* The numbers in dcps.proto's enums are the ones the C code uses: the spec
 * (docs/protocol.md, generated code of other clients) and the shard cannot
 * disagree. */
START_TEST(proto_enums_are_the_c_constants)
{
    static const struct {
        const ProtobufCEnumDescriptor *d;
        const char *name;
        int value;
    } rows[] = {
        {&dcps__msg_type__descriptor, "HELLO", DCPS_MSG_HELLO},
        {&dcps__msg_type__descriptor, "WELCOME", DCPS_MSG_WELCOME},
        {&dcps__msg_type__descriptor, "PUSH", DCPS_MSG_PUSH},
        {&dcps__msg_type__descriptor, "PUSH_ACK", DCPS_MSG_PUSH_ACK},
        {&dcps__msg_type__descriptor, "PULL", DCPS_MSG_PULL},
        {&dcps__msg_type__descriptor, "PULL_REPLY", DCPS_MSG_PULL_REPLY},
        {&dcps__msg_type__descriptor, "BARRIER", DCPS_MSG_BARRIER},
        {&dcps__msg_type__descriptor, "HEARTBEAT", DCPS_MSG_HEARTBEAT},
        {&dcps__msg_type__descriptor, "BYE", DCPS_MSG_BYE},
        {&dcps__msg_type__descriptor, "ERROR", DCPS_MSG_ERROR},
        {&dcps__msg_type__descriptor, "INIT", DCPS_MSG_INIT},
        {&dcps__msg_type__descriptor, "DONE", DCPS_MSG_DONE},
        {&dcps__flag__descriptor, "FLAG_DUPLICATE", DCPS_FLAG_DUPLICATE},
        {&dcps__flag__descriptor, "FLAG_STALE", DCPS_FLAG_STALE},
        {&dcps__flag__descriptor, "FLAG_WAITING", DCPS_FLAG_WAITING},
        {&dcps__flag__descriptor, "FLAG_DELTA", DCPS_FLAG_DELTA},
        {&dcps__flag__descriptor, "FLAG_EXACT", DCPS_FLAG_EXACT},
        {&dcps__frame_kind__descriptor, "FRAME_DENSE", DCPS_FRAME_DENSE},
        {&dcps__frame_kind__descriptor, "FRAME_INDICES", DCPS_FRAME_INDICES},
        {&dcps__frame_kind__descriptor, "FRAME_VALUES", DCPS_FRAME_VALUES},
        {&dcps__dtype__descriptor, "DTYPE_FLOAT32", DCPS_DTYPE_F32},
        {&dcps__dtype__descriptor, "DTYPE_UINT32", DCPS_DTYPE_U32},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value_by_name(rows[i].d,
                                                                                 rows[i].name);
        ck_assert_msg(v != NULL, "%s is not in dcps.proto", rows[i].name);
        ck_assert_int_eq(v->value, rows[i].value);
    }
    ck_assert_uint_eq(dcps__msg_type__descriptor.n_values, DCPS_MSG_TYPE_END - 1);
    /* Every code but OK, by name and value, and nothing else. */
    size_t codes = 0;
    for (int c = -1; dcps_error_known(c); c--, codes++) {
        char name[64];
        snprintf(name, sizeof name, "E_%s", dcps_errname(c));
        const ProtobufCEnumValue *v =
            protobuf_c_enum_descriptor_get_value_by_name(&dcps__error_code__descriptor, name);
        ck_assert_msg(v != NULL, "%s is not in dcps.proto's ErrorCode", name);
        ck_assert_int_eq(v->value, -c);
    }
    ck_assert_uint_eq(dcps__error_code__descriptor.n_values, codes);
}
END_TEST

START_TEST(every_type_round_trips_with_every_header_field)
{
    uint32_t type = (uint32_t)_i; /* loop over HELLO .. INIT */
    static const float vals[5] = {1.0f, -2.5f, 3.25f, 0.0f, 1e30f};
    static const uint32_t idx[3] = {7, 100, 4000000000u};
    dcps_msg_t m, out;
    memset(&m, 0, sizeof m);
    m.type = type;
    m.job_id = JOB;
    m.rank = 1000 + type;
    m.seq = 0xfedcba9876543210ull + type;
    m.shard = 63;
    m.param_version = 123456789012ull;
    m.n_params = 235146;
    m.range_lo = 64;
    m.range_hi = 117632;
    m.initialized = true;
    m.error_code = (uint32_t)-DCPS_E_RANGE;
    snprintf(m.error_text, sizeof m.error_text, "index 7 for type %u", type);
    m.flags = DCPS_FLAG_DUPLICATE;
    m.workers = 32;
    m.step = 9999999999ull;
    m.want = 123456789ull;
    m.session = 0x8000000000000001ull + type;
    m.lr = 0.0123456789;
    m.nframes = 3;
    m.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_INDICES, DCPS_DTYPE_U32, 3};
    m.frame[1] = (dcps_frame_desc_t){DCPS_FRAME_VALUES, DCPS_DTYPE_F32, 3};
    m.frame[2] = (dcps_frame_desc_t){DCPS_FRAME_DENSE, DCPS_DTYPE_F32, 5};
    m.payload[0] = (dcps_buf_t){idx, sizeof idx};
    m.payload[1] = (dcps_buf_t){vals, 12};
    m.payload[2] = (dcps_buf_t){vals, sizeof vals};

    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    ck_assert_uint_eq(out.type, type);
    ck_assert_uint_eq(out.job_id, JOB);
    ck_assert_uint_eq(out.rank, 1000 + type);
    ck_assert_uint_eq(out.seq, 0xfedcba9876543210ull + type);
    ck_assert_uint_eq(out.shard, 63);
    ck_assert_uint_eq(out.param_version, 123456789012ull);
    ck_assert_uint_eq(out.n_params, 235146);
    ck_assert_uint_eq(out.range_lo, 64);
    ck_assert_uint_eq(out.range_hi, 117632);
    ck_assert(out.initialized);
    ck_assert_uint_eq(out.error_code, 14);
    ck_assert_str_eq(out.error_text, m.error_text);
    ck_assert_uint_eq(out.flags, DCPS_FLAG_DUPLICATE);
    ck_assert_uint_eq(out.workers, 32);
    ck_assert_uint_eq(out.step, 9999999999ull);
    ck_assert_uint_eq(out.want, 123456789ull);
    ck_assert_uint_eq(out.session, 0x8000000000000001ull + type);
    ck_assert_double_eq(out.lr, 0.0123456789); /* a double on the wire: exactly */
    ck_assert(out.has & DCPS_HAS_LR);
    ck_assert_int_eq(out.nframes, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq(out.frame[i].kind, m.frame[i].kind);
        ck_assert_uint_eq(out.frame[i].dtype, m.frame[i].dtype);
        ck_assert_uint_eq(out.frame[i].count, m.frame[i].count);
        /* Payloads are borrowed, not copied. */
        ck_assert_ptr_eq(out.payload[i].data, m.payload[i].data);
        ck_assert_uint_eq(out.payload[i].len, m.payload[i].len);
    }
}
END_TEST

START_TEST(every_type_round_trips_without_payload)
{
    uint32_t type = (uint32_t)_i;
    dcps_msg_t m, out;
    memset(&m, 0, sizeof m);
    m.type = type;
    m.job_id = JOB;
    m.rank = 2;
    m.seq = 9;
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    ck_assert_uint_eq(out.type, type);
    ck_assert_uint_eq(out.rank, 2);
    ck_assert_uint_eq(out.seq, 9);
    ck_assert_int_eq(out.nframes, 0);
}
END_TEST

START_TEST(unset_fields_decode_as_zero)
{
    dcps_msg_t m, out;
    memset(&m, 0, sizeof m);
    m.type = DCPS_MSG_HEARTBEAT;
    m.job_id = JOB;
    /* A previous message's fields must not leak into out. */
    memset(&out, 0x5a, sizeof out);
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    ck_assert_uint_eq(out.type, DCPS_MSG_HEARTBEAT);
    ck_assert_uint_eq(out.rank, 0);
    ck_assert_uint_eq(out.seq, 0);
    ck_assert_uint_eq(out.shard, 0);
    ck_assert_uint_eq(out.param_version, 0);
    ck_assert_uint_eq(out.n_params, 0);
    ck_assert_uint_eq(out.range_lo, 0);
    ck_assert_uint_eq(out.range_hi, 0);
    ck_assert(!out.initialized);
    ck_assert_uint_eq(out.error_code, 0);
    ck_assert_str_eq(out.error_text, "");
    ck_assert_uint_eq(out.flags, 0);
    ck_assert_uint_eq(out.workers, 0);
    ck_assert_uint_eq(out.step, 0);
    ck_assert_uint_eq(out.want, 0);
    ck_assert_double_eq(out.lr, 0);
    ck_assert(!(out.has & DCPS_HAS_LR));
    ck_assert_int_eq(out.nframes, 0);
    /* lr 0 is sent when asked to (a PULL_REPLY's lr at min_lr 0), and known to be there. */
    m.lr = 0;
    m.has = DCPS_HAS_LR;
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    ck_assert(out.has & DCPS_HAS_LR);
    ck_assert_double_eq(out.lr, 0);
}
END_TEST

START_TEST(extreme_field_values_round_trip)
{
    dcps_msg_t m, out;
    memset(&m, 0, sizeof m);
    m.type = DCPS_MSG_WELCOME;
    m.job_id = UINT64_MAX;
    m.rank = UINT32_MAX;
    m.seq = UINT64_MAX;
    m.shard = UINT32_MAX;
    m.param_version = UINT64_MAX;
    m.n_params = UINT64_MAX;
    m.range_lo = 0;
    m.range_hi = UINT64_MAX;
    m.flags = UINT32_MAX;
    m.workers = UINT32_MAX;
    m.step = UINT64_MAX;
    ck_assert_int_eq(roundtrip(&m, UINT64_MAX, &out), 0);
    ck_assert_uint_eq(out.job_id, UINT64_MAX);
    ck_assert_uint_eq(out.rank, UINT32_MAX);
    ck_assert_uint_eq(out.seq, UINT64_MAX);
    ck_assert_uint_eq(out.shard, UINT32_MAX);
    ck_assert_uint_eq(out.param_version, UINT64_MAX);
    ck_assert_uint_eq(out.n_params, UINT64_MAX);
    ck_assert_uint_eq(out.range_lo, 0);
    ck_assert_uint_eq(out.range_hi, UINT64_MAX);
    ck_assert_uint_eq(out.flags, UINT32_MAX);
    ck_assert_uint_eq(out.workers, UINT32_MAX);
    ck_assert_uint_eq(out.step, UINT64_MAX);
}
END_TEST

START_TEST(longest_error_text_round_trips_and_longer_is_truncated)
{
    dcps_msg_t m, out;
    memset(&m, 0, sizeof m);
    m.type = DCPS_MSG_ERROR;
    m.job_id = JOB;
    m.error_code = (uint32_t)-DCPS_E_NONFINITE;
    memset(m.error_text, 'e', DCPS_ERROR_TEXT_MAX - 1);
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    ck_assert_uint_eq(out.error_code, 16);
    ck_assert_uint_eq(strlen(out.error_text), DCPS_ERROR_TEXT_MAX - 1);
    ck_assert_str_eq(out.error_text, m.error_text);

    /* A peer may send a longer text: it is cut, still terminated. */
    char longtext[600];
    memset(longtext, 'x', sizeof longtext - 1);
    longtext[sizeof longtext - 1] = '\0';
    Dcps__Header h = base_header(NULL, 0);
    h.type = DCPS_MSG_ERROR;
    h.has_error_code = 1;
    h.error_code = 16;
    h.error_text = longtext;
    size_t len = craft(&h);
    ck_assert_int_eq(unpack_raw(len, NULL, 0, &out), 0);
    ck_assert_uint_eq(strlen(out.error_text), DCPS_ERROR_TEXT_MAX - 1);
    ck_assert_uint_eq(out.error_code, 16);
}
END_TEST

START_TEST(pack_writes_protocol_and_frame_byte_lengths)
{
    static const float v[6] = {0};
    dcps_msg_t m = msg1(DCPS_MSG_PUSH, DCPS_FRAME_DENSE, DCPS_DTYPE_F32, 6, v, sizeof v);
    size_t len = pack(&m);
    Dcps__Header *h = dcps__header__unpack(NULL, len, hbuf);
    ck_assert_ptr_nonnull(h);
    ck_assert(h->has_protocol);
    ck_assert_uint_eq(h->protocol, DCPS_PROTOCOL);
    ck_assert_uint_eq(h->type, DCPS_MSG_PUSH);
    ck_assert_uint_eq(h->job_id, JOB);
    ck_assert_uint_eq(h->n_frames, 1);
    ck_assert_uint_eq(h->frames[0]->kind, DCPS_FRAME_DENSE);
    ck_assert_uint_eq(h->frames[0]->dtype, DCPS_DTYPE_F32);
    ck_assert_uint_eq(h->frames[0]->count, 6);
    ck_assert_uint_eq(h->frames[0]->bytes, 24);
    dcps__header__free_unpacked(h, NULL);
}
END_TEST

START_TEST(pack_refuses_bad_frame_counts_and_small_buffers)
{
    dcps_msg_t m;
    memset(&m, 0, sizeof m);
    m.type = DCPS_MSG_PUSH;
    m.job_id = JOB;
    m.nframes = -1;
    ck_assert_int_eq(dcps_codec_pack(&m, hbuf, sizeof hbuf), DCPS_E_INVAL);
    m.nframes = DCPS_MAX_FRAMES + 1;
    ck_assert_int_eq(dcps_codec_pack(&m, hbuf, sizeof hbuf), DCPS_E_INVAL);
    m.nframes = DCPS_MAX_FRAMES;
    int full = dcps_codec_pack(&m, hbuf, sizeof hbuf);
    ck_assert_int_gt(full, 0);
    /* Exactly the packed size fits; one byte less does not. */
    ck_assert_int_eq(dcps_codec_pack(&m, hbuf, (size_t)full), full);
    ck_assert_int_eq(dcps_codec_pack(&m, hbuf, (size_t)full - 1), DCPS_E_INVAL);
    ck_assert_int_eq(dcps_codec_pack(&m, hbuf, 0), DCPS_E_INVAL);
}
END_TEST

START_TEST(unknown_header_fields_are_ignored)
{
    dcps_msg_t m, out;
    memset(&m, 0, sizeof m);
    m.type = DCPS_MSG_PULL;
    m.job_id = JOB;
    m.seq = 11;
    size_t len = pack(&m);
    /* Field 100, varint 5: tag (100 << 3 | 0) = 800 = 0xa0 0x06. */
    hbuf[len++] = 0xa0;
    hbuf[len++] = 0x06;
    hbuf[len++] = 0x05;
    ck_assert_int_eq(unpack_raw(len, NULL, 0, &out), 0);
    ck_assert_uint_eq(out.type, DCPS_MSG_PULL);
    ck_assert_uint_eq(out.seq, 11);
}
END_TEST

START_TEST(header_of_exactly_header_max_bytes_is_accepted)
{
    /* Grow the error text until the packed header is exactly DCPS_HEADER_MAX. */
    char text[DCPS_HEADER_MAX + 1];
    Dcps__Header h = base_header(NULL, 0);
    h.type = DCPS_MSG_ERROR;
    h.error_text = text;
    size_t tl = 0, len = 0;
    for (tl = 900; tl < DCPS_HEADER_MAX; tl++) {
        memset(text, 't', tl);
        text[tl] = '\0';
        if (dcps__header__get_packed_size(&h) == DCPS_HEADER_MAX)
            break;
    }
    len = craft(&h);
    ck_assert_uint_eq(len, DCPS_HEADER_MAX);
    dcps_msg_t out;
    ck_assert_int_eq(unpack_raw(len, NULL, 0, &out), 0);
    ck_assert_uint_eq(out.type, DCPS_MSG_ERROR);

    /* One more character: refused as HEADER although it parses. */
    text[tl] = 't';
    text[tl + 1] = '\0';
    len = craft(&h);
    ck_assert_uint_eq(len, DCPS_HEADER_MAX + 1);
    ck_assert_int_eq(unpack_raw(len, NULL, 0, &out), DCPS_E_HEADER);
    ck_assert_why_has("header of 4097 bytes");
    ck_assert_why_has("1 to 4096 bytes, unknown fields included"); /* the cap, said */
}
END_TEST

/* "Unknown fields are ignored" holds within the cap: a valid PUSH with a long
 * text field of a later version (here 3000 bytes) is accepted. */
START_TEST(push_with_a_long_unknown_field_is_accepted_below_the_cap)
{
    static const float v[4] = {1, 2, 3, 4};
    dcps_msg_t m = msg1(DCPS_MSG_PUSH, DCPS_FRAME_DENSE, DCPS_DTYPE_F32, 4, v, sizeof v), out;
    size_t len = pack(&m);
    /* Field 100, wire type 2 (length-delimited): tag 802 = 0xa2 0x06; length
     * 3000 = 0xb8 0x17. */
    const uint8_t tag[] = {0xa2, 0x06, 0xb8, 0x17};
    memcpy(hbuf + len, tag, sizeof tag);
    memset(hbuf + len + sizeof tag, 'x', 3000);
    len += sizeof tag + 3000;
    ck_assert_uint_le(len, DCPS_HEADER_MAX);
    ck_assert_int_eq(unpack_raw(len, m.payload, 1, &out), 0);
    ck_assert_uint_eq(out.type, DCPS_MSG_PUSH);
    ck_assert_uint_eq(out.frame[0].count, 4);
}
END_TEST

/* --- HEADER ------------------------------------------------------------------------------ */

START_TEST(unpack_rejects_empty_header)
{
    dcps_msg_t out;
    ck_assert_int_eq(dcps_codec_unpack(hbuf, 0, NULL, 0, JOB, &out, why, sizeof why),
                     DCPS_E_HEADER);
    ck_assert_why_has("0 bytes");
}
END_TEST

START_TEST(unpack_rejects_header_that_does_not_parse)
{
    /* Each of these is refused by protobuf-c. */
    static const struct {
        uint8_t b[12];
        size_t n;
    } bad[] = {
        /* A tag varint of 11 bytes. */
        {{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 11},
        /* Field 1 (varint) with its value missing. */
        {{0x08}, 1},
        /* Field 1 varint whose continuation bit never ends. */
        {{0x08, 0x80, 0x80}, 3},
        /* Wire type 7 does not exist. */
        {{0x0f, 0x00}, 2},
        /* error_text (field 14) says 16 bytes, 1 follows. */
        {{0x72, 0x10, 'a'}, 3},
        /* frames (field 8) says 200 bytes, 2 follow. */
        {{0x42, 0xc8, 0x01, 0x08, 0x01}, 5},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dcps_msg_t out;
        memcpy(hbuf, bad[i].b, bad[i].n);
        ck_assert_msg(unpack_raw(bad[i].n, NULL, 0, &out) == DCPS_E_HEADER,
                      "garbage header %zu accepted", i);
        ck_assert_why_has("does not parse");
    }
}
END_TEST

START_TEST(unpack_rejects_header_longer_than_header_max)
{
    dcps_msg_t out;
    memset(hbuf, 0, DCPS_HEADER_MAX + 1);
    ck_assert_int_eq(unpack_raw(DCPS_HEADER_MAX + 1, NULL, 0, &out), DCPS_E_HEADER);
    ck_assert_int_eq(unpack_raw(sizeof hbuf, NULL, 0, &out), DCPS_E_HEADER);
}
END_TEST

/* --- PROTOVER ---------------------------------------------------------------------------- */

START_TEST(unpack_rejects_protocol_2_and_4)
{
    Dcps__Header h = base_header(NULL, 0);
    h.protocol = 2; /* version 2 had no parts */
    dcps_msg_t out;
    ck_assert_int_eq(unpack_raw(craft(&h), NULL, 0, &out), DCPS_E_PROTOVER);
    ck_assert_why_has("protocol version 2, this shard speaks 3");
    h.protocol = 4;
    ck_assert_int_eq(unpack_raw(craft(&h), NULL, 0, &out), DCPS_E_PROTOVER);
    ck_assert_why_has("protocol version 4");
    /* On failure type, rank and seq are still filled in for the reply. */
    ck_assert_uint_eq(out.type, DCPS_MSG_PUSH);
    ck_assert_uint_eq(out.rank, 3);
    ck_assert_uint_eq(out.seq, 77);
}
END_TEST

START_TEST(unpack_rejects_missing_protocol_field)
{
    Dcps__Header h = base_header(NULL, 0);
    h.has_protocol = 0;
    dcps_msg_t out;
    ck_assert_int_eq(unpack_raw(craft(&h), NULL, 0, &out), DCPS_E_PROTOVER);
    ck_assert_why_has("protocol version 0");
}
END_TEST

START_TEST(unpack_rejects_protocol_0_and_max)
{
    Dcps__Header h = base_header(NULL, 0);
    dcps_msg_t out;
    h.protocol = 0;
    ck_assert_int_eq(unpack_raw(craft(&h), NULL, 0, &out), DCPS_E_PROTOVER);
    h.protocol = UINT32_MAX;
    ck_assert_int_eq(unpack_raw(craft(&h), NULL, 0, &out), DCPS_E_PROTOVER);
}
END_TEST

/* --- JOBID ------------------------------------------------------------------------------- */

START_TEST(unpack_rejects_wrong_job_id)
{
    dcps_msg_t m, out;
    memset(&m, 0, sizeof m);
    m.type = DCPS_MSG_HELLO;
    m.job_id = 4242;
    m.rank = 6;
    m.seq = 8;
    ck_assert_int_eq(roundtrip(&m, 4243, &out), DCPS_E_JOBID);
    ck_assert_why_has("4242");
    ck_assert_why_has("4243");
    ck_assert_uint_eq(out.type, DCPS_MSG_HELLO);
    ck_assert_uint_eq(out.rank, 6);
    ck_assert_uint_eq(out.seq, 8);
}
END_TEST

START_TEST(unpack_rejects_missing_job_id_when_one_is_expected)
{
    Dcps__Header h = base_header(NULL, 0);
    h.has_job_id = 0;
    h.job_id = 0;
    dcps_msg_t out;
    ck_assert_int_eq(unpack_raw(craft(&h), NULL, 0, &out), DCPS_E_JOBID);
}
END_TEST

START_TEST(expect_job_zero_accepts_any_job_id)
{
    dcps_msg_t m, out;
    memset(&m, 0, sizeof m);
    m.type = DCPS_MSG_HELLO;
    m.job_id = 99;
    ck_assert_int_eq(roundtrip(&m, 0, &out), 0);
    ck_assert_uint_eq(out.job_id, 99);
    m.job_id = 0;
    ck_assert_int_eq(roundtrip(&m, 0, &out), 0);
    ck_assert_uint_eq(out.job_id, 0);
}
END_TEST

/* --- MSGTYPE ----------------------------------------------------------------------------- */

START_TEST(unpack_rejects_type_0_99_and_end)
{
    static const uint32_t bad[] = {0, 99, DCPS_MSG_TYPE_END, UINT32_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        Dcps__Header h = base_header(NULL, 0);
        h.type = bad[i];
        dcps_msg_t out;
        ck_assert_int_eq(unpack_raw(craft(&h), NULL, 0, &out), DCPS_E_MSGTYPE);
        char want[32];
        snprintf(want, sizeof want, "type %u", bad[i]);
        ck_assert_why_has(want);
    }
}
END_TEST

START_TEST(unpack_rejects_missing_type)
{
    Dcps__Header h = base_header(NULL, 0);
    h.has_type = 0;
    h.type = 0;
    dcps_msg_t out;
    ck_assert_int_eq(unpack_raw(craft(&h), NULL, 0, &out), DCPS_E_MSGTYPE);
}
END_TEST

/* --- FRAMECOUNT -------------------------------------------------------------------------- */

START_TEST(unpack_rejects_fewer_frames_than_header_describes)
{
    static const float v[4] = {1, 2, 3, 4};
    dcps_msg_t m = msg1(DCPS_MSG_PUSH, DCPS_FRAME_DENSE, DCPS_DTYPE_F32, 4, v, sizeof v), out;
    size_t len = pack(&m);
    ck_assert_int_eq(unpack_raw(len, m.payload, 0, &out), DCPS_E_FRAMECOUNT);
    ck_assert_why_has("1 payload frames");
}
END_TEST

START_TEST(unpack_rejects_more_frames_than_header_describes)
{
    static const float v[4] = {1, 2, 3, 4};
    dcps_msg_t m = msg1(DCPS_MSG_PUSH, DCPS_FRAME_DENSE, DCPS_DTYPE_F32, 4, v, sizeof v), out;
    dcps_buf_t two[2] = {{v, sizeof v}, {v, sizeof v}};
    size_t len = pack(&m);
    ck_assert_int_eq(unpack_raw(len, two, 2, &out), DCPS_E_FRAMECOUNT);
    ck_assert_why_has("has 2");
}
END_TEST

START_TEST(unpack_rejects_more_than_max_frames_even_if_described)
{
    static const float v[1] = {1};
    Dcps__FrameDesc fd[DCPS_MAX_FRAMES + 1], *fdp[DCPS_MAX_FRAMES + 1];
    dcps_buf_t fr[DCPS_MAX_FRAMES + 1];
    for (int i = 0; i <= DCPS_MAX_FRAMES; i++) {
        fd[i] = frame_desc(DCPS_FRAME_DENSE, DCPS_DTYPE_F32, 1, 4);
        fdp[i] = &fd[i];
        fr[i] = (dcps_buf_t){v, 4};
    }
    Dcps__Header h = base_header(fdp, DCPS_MAX_FRAMES + 1);
    dcps_msg_t out;
    ck_assert_int_eq(unpack_raw(craft(&h), fr, DCPS_MAX_FRAMES + 1, &out), DCPS_E_FRAMECOUNT);

    /* DCPS_MAX_FRAMES itself is fine. */
    h.n_frames = DCPS_MAX_FRAMES;
    ck_assert_int_eq(unpack_raw(craft(&h), fr, DCPS_MAX_FRAMES, &out), 0);
    ck_assert_int_eq(out.nframes, DCPS_MAX_FRAMES);
}
END_TEST

/* --- FRAMELEN ---------------------------------------------------------------------------- */

START_TEST(unpack_rejects_bytes_not_count_times_size)
{
    static const float v[3] = {1, 2, 3};
    Dcps__FrameDesc fd = frame_desc(DCPS_FRAME_DENSE, DCPS_DTYPE_F32, 3, 8), *fdp = &fd;
    Dcps__Header h = base_header(&fdp, 1);
    dcps_buf_t fr = {v, 8};
    dcps_msg_t out;
    ck_assert_int_eq(unpack_raw(craft(&h), &fr, 1, &out), DCPS_E_FRAMELEN);
    ck_assert_why_has("frame 0");
    /* Also when bytes and the frame agree on 12 but count says 4. */
    fd = frame_desc(DCPS_FRAME_DENSE, DCPS_DTYPE_F32, 4, 12);
    fr.len = 12;
    ck_assert_int_eq(unpack_raw(craft(&h), &fr, 1, &out), DCPS_E_FRAMELEN);
}
END_TEST

START_TEST(unpack_rejects_frame_shorter_than_header_says)
{
    static const float v[4] = {1, 2, 3, 4};
    dcps_msg_t m = msg1(DCPS_MSG_PUSH, DCPS_FRAME_DENSE, DCPS_DTYPE_F32, 4, v, sizeof v), out;
    size_t len = pack(&m);
    dcps_buf_t fr = {v, 12};
    ck_assert_int_eq(unpack_raw(len, &fr, 1, &out), DCPS_E_FRAMELEN);
    ck_assert_why_has("12 bytes");
}
END_TEST

START_TEST(unpack_rejects_frame_longer_than_header_says)
{
    static const float v[4] = {1, 2, 3, 4};
    dcps_msg_t m = msg1(DCPS_MSG_PUSH, DCPS_FRAME_DENSE, DCPS_DTYPE_F32, 3, v, 12), out;
    size_t len = pack(&m);
    dcps_buf_t fr = {v, 16};
    ck_assert_int_eq(unpack_raw(len, &fr, 1, &out), DCPS_E_FRAMELEN);
    /* One stray byte is enough. */
    fr.len = 13;
    ck_assert_int_eq(unpack_raw(len, &fr, 1, &out), DCPS_E_FRAMELEN);
}
END_TEST

START_TEST(unpack_rejects_second_frame_with_wrong_length)
{
    static const uint32_t ix[2] = {1, 2};
    static const float v[2] = {1, 2};
    dcps_msg_t m, out;
    memset(&m, 0, sizeof m);
    m.type = DCPS_MSG_PUSH;
    m.job_id = JOB;
    m.nframes = 2;
    m.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_INDICES, DCPS_DTYPE_U32, 2};
    m.frame[1] = (dcps_frame_desc_t){DCPS_FRAME_VALUES, DCPS_DTYPE_F32, 2};
    size_t len = pack(&m);
    dcps_buf_t fr[2] = {{ix, 8}, {v, 4}};
    ck_assert_int_eq(unpack_raw(len, fr, 2, &out), DCPS_E_FRAMELEN);
    ck_assert_why_has("frame 1");
}
END_TEST

START_TEST(unpack_rejects_unknown_frame_kind)
{
    static const float v[2] = {1, 2};
    static const uint32_t kinds[] = {0, DCPS_FRAME_KIND_LAST + 1, 1000};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        Dcps__FrameDesc fd = frame_desc(kinds[i], DCPS_DTYPE_F32, 2, 8), *fdp = &fd;
        Dcps__Header h = base_header(&fdp, 1);
        dcps_buf_t fr = {v, 8};
        dcps_msg_t out;
        ck_assert_int_eq(unpack_raw(craft(&h), &fr, 1, &out), DCPS_E_FRAMELEN);
        ck_assert_why_has("unknown kind");
    }
}
END_TEST


/* --- shorter values (proto/quant.h) in DENSE and VALUES frames ------------------------ */

START_TEST(quantized_frames_roundtrip_with_their_block)
{
    const float x[300] = {[0] = 1.0f, [299] = -3.0f};
    uint8_t q[300 + 8];
    float dec[300], got[300];
    dcps_quant_encode(DCPS_DTYPE_I8, 256, 0, x, 300, q, dec);
    dcps_msg_t m = msg1(DCPS_MSG_PUSH, DCPS_FRAME_DENSE, DCPS_DTYPE_I8, 300, q, sizeof q), out;
    m.block[0] = 256;
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    ck_assert_uint_eq(out.block[0], 256);
    ck_assert_uint_eq(out.frame[0].dtype, DCPS_DTYPE_I8);
    const float *v;
    /* Without room to decode into, a receiver takes float32 only (INIT's rule). */
    ck_assert_int_eq(dcps_codec_dense(&out, 300, &v, why, sizeof why), DCPS_E_FRAMELEN);
    ck_assert_why_has("float32");
    out.decode_to = got;
    ck_assert_int_eq(dcps_codec_dense(&out, 300, &v, why, sizeof why), 0);
    ck_assert_ptr_eq(v, got);
    ck_assert(memcmp(got, dec, sizeof dec) == 0);
    /* dense_to decodes straight into the destination. */
    float dst[300];
    ck_assert_int_eq(dcps_codec_dense_to(&out, 300, dst, why, sizeof why), 0);
    ck_assert(memcmp(dst, dec, sizeof dec) == 0);
}
END_TEST

START_TEST(quantized_sparse_values_decode_after_the_index_checks)
{
    const uint32_t idx[3] = {5, 9, 12};
    const float x[3] = {0.5f, -0.25f, 2.0f};
    uint8_t q[6];
    float dec[3], room[3];
    dcps_quant_encode(DCPS_DTYPE_F16, 0, 0, x, 3, q, dec);
    dcps_msg_t m = msg1(DCPS_MSG_PUSH, DCPS_FRAME_INDICES, DCPS_DTYPE_U32, 3, idx, sizeof idx), out;
    m.nframes = 2;
    m.frame[1] = (dcps_frame_desc_t){DCPS_FRAME_VALUES, DCPS_DTYPE_F16, 3};
    m.payload[1] = (dcps_buf_t){q, sizeof q};
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    out.decode_to = room;
    const uint32_t *ix;
    const float *v;
    size_t k;
    ck_assert_int_eq(dcps_codec_push(&out, 0, 16, &ix, &v, &k, why, sizeof why), 0);
    ck_assert_uint_eq(k, 3);
    ck_assert(v == room && memcmp(room, dec, sizeof dec) == 0);
    ck_assert_int_eq(dcps_codec_push(&out, 6, 16, &ix, &v, &k, why, sizeof why), DCPS_E_RANGE);
    q[5] = 0x7c; /* the third value +Inf (0x7c00): NONFINITE, from the decoder */
    q[4] = 0x00;
    ck_assert_int_eq(dcps_codec_push(&out, 0, 16, &ix, &v, &k, why, sizeof why),
                     DCPS_E_NONFINITE);
    ck_assert_why_has("fp16 value inf (0x7c00) at offset 2");
}
END_TEST

START_TEST(unpack_checks_quantized_frame_shapes)
{
    static const uint8_t b[64];
    dcps_buf_t fr = {b, 0};
    dcps_msg_t out;
    /* An int8 frame of 10 values is 10 bytes of codes and 4 of its one scale. */
    Dcps__FrameDesc fd = frame_desc(DCPS_FRAME_DENSE, DCPS_DTYPE_I8, 10, 10), *fdp = &fd;
    Dcps__Header h = base_header(&fdp, 1);
    fr.len = 10;
    ck_assert_int_eq(unpack_raw(craft(&h), &fr, 1, &out), DCPS_E_FRAMELEN);
    ck_assert_why_has("10 elements in 10 bytes");
    fd.bytes = fr.len = 14;
    ck_assert_int_eq(unpack_raw(craft(&h), &fr, 1, &out), 0);
    fd.has_block = 1; /* blocks of 4: 3 scales */
    fd.block = 4;
    ck_assert_int_eq(unpack_raw(craft(&h), &fr, 1, &out), DCPS_E_FRAMELEN);
    fd.bytes = fr.len = 22;
    ck_assert_int_eq(unpack_raw(craft(&h), &fr, 1, &out), 0);
    ck_assert_uint_eq(out.block[0], 4);
    /* A block on a format without scales, and a short format on INDICES. */
    fd = frame_desc(DCPS_FRAME_DENSE, DCPS_DTYPE_F16, 4, 8);
    fd.has_block = 1;
    fd.block = 2;
    fr.len = 8;
    ck_assert_int_eq(unpack_raw(craft(&h), &fr, 1, &out), DCPS_E_FRAMELEN);
    ck_assert_why_has("no scales");
    fd = frame_desc(DCPS_FRAME_INDICES, DCPS_DTYPE_BF16, 4, 8);
    ck_assert_int_eq(unpack_raw(craft(&h), &fr, 1, &out), DCPS_E_FRAMELEN);
    ck_assert_why_has("only DENSE and VALUES frames take the bf16 format");
    fd = frame_desc(DCPS_FRAME_DENSE, DCPS_DTYPE_TWOBIT, 9, 7); /* 3 bytes of codes + tau */
    fr.len = 7;
    ck_assert_int_eq(unpack_raw(craft(&h), &fr, 1, &out), 0);
}
END_TEST

START_TEST(unpack_rejects_unknown_dtype)
{
    static const float v[2] = {1, 2};
    static const uint32_t dtypes[] = {0, 8, 1000};
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
        Dcps__FrameDesc fd = frame_desc(DCPS_FRAME_DENSE, dtypes[i], 2, 8), *fdp = &fd;
        Dcps__Header h = base_header(&fdp, 1);
        dcps_buf_t fr = {v, 8};
        dcps_msg_t out;
        ck_assert_int_eq(unpack_raw(craft(&h), &fr, 1, &out), DCPS_E_FRAMELEN);
        ck_assert_why_has("dtype");
    }
}
END_TEST

START_TEST(unpack_rejects_frame_desc_without_fields)
{
    static const float v[1] = {1};
    Dcps__FrameDesc fd = DCPS__FRAME_DESC__INIT, *fdp = &fd;
    Dcps__Header h = base_header(&fdp, 1);
    dcps_buf_t fr = {v, 0};
    dcps_msg_t out;
    ck_assert_int_eq(unpack_raw(craft(&h), &fr, 1, &out), DCPS_E_FRAMELEN);
}
END_TEST

START_TEST(unpack_rejects_count_that_overflows_byte_length)
{
    static const float v[1] = {1};
    dcps_msg_t out;
    /* 2^62 elements of 4 bytes wrap to 0 bytes in 64 bits. */
    Dcps__FrameDesc fd = frame_desc(DCPS_FRAME_DENSE, DCPS_DTYPE_F32, 1ull << 62, 0), *fdp = &fd;
    Dcps__Header h = base_header(&fdp, 1);
    dcps_buf_t fr = {v, 0};
    ck_assert_int_eq(unpack_raw(craft(&h), &fr, 1, &out), DCPS_E_FRAMELEN);
    /* 2^62 + 1 elements wrap to 4 bytes, matching a 4-byte frame. */
    fd = frame_desc(DCPS_FRAME_DENSE, DCPS_DTYPE_F32, (1ull << 62) + 1, 4);
    fr.len = 4;
    ck_assert_int_eq(unpack_raw(craft(&h), &fr, 1, &out), DCPS_E_FRAMELEN);
    /* The largest count. */
    fd = frame_desc(DCPS_FRAME_INDICES, DCPS_DTYPE_U32, UINT64_MAX, UINT64_MAX * 4);
    fr.len = (size_t)(UINT64_MAX * 4);
    ck_assert_int_eq(unpack_raw(craft(&h), &fr, 1, &out), DCPS_E_FRAMELEN);
}
END_TEST

START_TEST(failed_unpack_attaches_no_payload)
{
    static const float v[4] = {1, 2, 3, 4};
    dcps_msg_t m = msg1(DCPS_MSG_PUSH, DCPS_FRAME_DENSE, DCPS_DTYPE_F32, 4, v, sizeof v), out;
    size_t len = pack(&m);
    dcps_buf_t fr = {v, 12};
    memset(&out, 0x77, sizeof out);
    ck_assert_int_eq(unpack_raw(len, &fr, 1, &out), DCPS_E_FRAMELEN);
    ck_assert_int_eq(out.nframes, 0);
}
END_TEST

/* --- dcps_codec_dense -------------------------------------------------------------------- */

START_TEST(dense_returns_pointer_to_the_frame)
{
    static const float v[5] = {1.0f, -1.0f, 0.0f, -0.0f, 3.4e38f};
    dcps_msg_t m = dense_msg(v, 5);
    const float *got = NULL;
    ck_assert_int_eq(dcps_codec_dense(&m, 5, &got, why, sizeof why), 0);
    ck_assert_ptr_eq(got, v);
}
END_TEST

START_TEST(dense_accepts_extreme_finite_values)
{
    /* Large values and denormals are finite; the check must not overflow into a
     * false alarm. */
    float v[6] = {3.4028235e38f, -3.4028235e38f, 1e-45f, -1e-45f, 1.17549435e-38f, 0.0f};
    dcps_msg_t m = dense_msg(v, 6);
    const float *got = NULL;
    ck_assert_int_eq(dcps_codec_dense(&m, 6, &got, why, sizeof why), 0);
    ck_assert_ptr_eq(got, v);
}
END_TEST

/* dcps_codec_dense_to: the values copied bit for bit in the pass that checks
 * them; a frame of the wrong shape leaves the destination alone. */
START_TEST(dense_to_copies_what_it_checks)
{
    float v[37], dst[37];
    for (int i = 0; i < 37; i++)
        v[i] = i % 3 ? (float)i * -1.5e36f : (i % 2 ? 1e-45f : -0.0f);
    v[36] = 3.4028235e38f;
    dcps_msg_t m = dense_msg(v, 37);
    memset(dst, 0x55, sizeof dst);
    ck_assert_int_eq(dcps_codec_dense_to(&m, 37, dst, why, sizeof why), 0);
    ck_assert_mem_eq(dst, v, sizeof v);
    memset(dst, 0x55, sizeof dst);
    ck_assert_int_eq(dcps_codec_dense_to(&m, 36, dst, why, sizeof why), DCPS_E_SIZE);
    for (int i = 0; i < 37; i++)
        ck_assert_uint_eq(((const unsigned char *)dst)[4 * i], 0x55);
}
END_TEST

START_TEST(dense_rejects_wrong_count)
{
    static const float v[5] = {1, 2, 3, 4, 5};
    dcps_msg_t m = dense_msg(v, 5);
    const float *got = NULL;
    ck_assert_int_eq(dcps_codec_dense(&m, 4, &got, why, sizeof why), DCPS_E_SIZE);
    ck_assert_why_has("5 elements");
    ck_assert_int_eq(dcps_codec_dense(&m, 6, &got, why, sizeof why), DCPS_E_SIZE);
    ck_assert_ptr_null(got);
}
END_TEST

START_TEST(dense_rejects_uint32_dense_frame)
{
    static const uint32_t v[2] = {1, 2};
    dcps_msg_t m = msg1(DCPS_MSG_PUSH, DCPS_FRAME_DENSE, DCPS_DTYPE_U32, 2, v, 8), out;
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    const float *got = NULL;
    ck_assert_int_eq(dcps_codec_dense(&out, 2, &got, why, sizeof why), DCPS_E_FRAMELEN);
}
END_TEST

static void expect_dense_nonfinite(float bad, size_t n, size_t at)
{
    float *v = calloc(n, sizeof *v);
    ck_assert_ptr_nonnull(v);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)i * 0.5f - 3.0f;
    v[at] = bad;
    dcps_msg_t m = dense_msg(v, n);
    const float *got = NULL;
    ck_assert_int_eq(dcps_codec_dense(&m, n, &got, why, sizeof why), DCPS_E_NONFINITE);
    char want[48];
    snprintf(want, sizeof want, "offset %zu", at);
    ck_assert_why_has(want);
    /* The fused check and copy finds the same value, and copies everything. */
    float *dst = calloc(n, sizeof *dst);
    ck_assert_ptr_nonnull(dst);
    why[0] = '\0';
    ck_assert_int_eq(dcps_codec_dense_to(&m, n, dst, why, sizeof why), DCPS_E_NONFINITE);
    ck_assert_why_has(want);
    ck_assert_mem_eq(dst, v, n * sizeof *v);
    free(dst);
    free(v);
}

START_TEST(dense_rejects_nan_at_first_middle_and_last)
{
    expect_dense_nonfinite(NAN, 1001, 0);
    expect_dense_nonfinite(NAN, 1001, 500);
    expect_dense_nonfinite(NAN, 1001, 1000);
    expect_dense_nonfinite(-NAN, 7, 3);
    expect_dense_nonfinite(NAN, 1, 0);
}
END_TEST

START_TEST(dense_rejects_plus_and_minus_infinity)
{
    expect_dense_nonfinite(INFINITY, 100, 0);
    expect_dense_nonfinite(INFINITY, 100, 42);
    expect_dense_nonfinite(-INFINITY, 100, 99);
    expect_dense_nonfinite(-INFINITY, 100, 17);
}
END_TEST

START_TEST(dense_reports_the_first_of_several_bad_values)
{
    float v[8] = {0, 1, 2, INFINITY, 4, NAN, 6, -INFINITY};
    dcps_msg_t m = dense_msg(v, 8);
    const float *got = NULL;
    ck_assert_int_eq(dcps_codec_dense(&m, 8, &got, why, sizeof why), DCPS_E_NONFINITE);
    ck_assert_why_has("offset 3");
    /* +Inf and -Inf cancel in a sum: the check must still see them. */
    float w[4] = {1, INFINITY, -INFINITY, 2};
    m = dense_msg(w, 4);
    ck_assert_int_eq(dcps_codec_dense(&m, 4, &got, why, sizeof why), DCPS_E_NONFINITE);
    ck_assert_why_has("offset 1");
}
END_TEST

START_TEST(dense_accepts_the_extreme_finite_values)
{
    /* The largest exponent that is not all ones, subnormals and both zeros. */
    float v[6] = {FLT_MAX, -FLT_MAX, FLT_TRUE_MIN, -FLT_TRUE_MIN, 0.0f, -0.0f};
    dcps_msg_t m = dense_msg(v, 6);
    const float *got = NULL;
    ck_assert_int_eq(dcps_codec_dense(&m, 6, &got, why, sizeof why), 0);
    ck_assert_ptr_eq(got, v);
}
END_TEST

START_TEST(dense_rejects_two_frames_and_no_frame)
{
    static const float v[3] = {1, 2, 3};
    dcps_msg_t m, out;
    const float *got = NULL;
    memset(&m, 0, sizeof m);
    m.type = DCPS_MSG_PUSH;
    m.job_id = JOB;
    m.nframes = 2;
    m.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_DENSE, DCPS_DTYPE_F32, 3};
    m.frame[1] = (dcps_frame_desc_t){DCPS_FRAME_DENSE, DCPS_DTYPE_F32, 3};
    m.payload[0] = m.payload[1] = (dcps_buf_t){v, sizeof v};
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    ck_assert_int_eq(dcps_codec_dense(&out, 3, &got, why, sizeof why), DCPS_E_FRAMECOUNT);
    ck_assert_why_has("2 frames");

    m.nframes = 0;
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    ck_assert_int_eq(dcps_codec_dense(&out, 3, &got, why, sizeof why), DCPS_E_FRAMECOUNT);
    ck_assert_ptr_null(got);
}
END_TEST

START_TEST(dense_rejects_a_values_frame)
{
    static const float v[3] = {1, 2, 3};
    dcps_msg_t m = msg1(DCPS_MSG_PUSH, DCPS_FRAME_VALUES, DCPS_DTYPE_F32, 3, v, 12), out;
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    const float *got = NULL;
    ck_assert_int_eq(dcps_codec_dense(&out, 3, &got, why, sizeof why), DCPS_E_FRAMECOUNT);
}
END_TEST

/* --- dcps_codec_sparse ------------------------------------------------------------------- */

static int sparse(const dcps_msg_t *m, uint64_t lo, uint64_t hi, size_t *k)
{
    const uint32_t *ix = NULL;
    const float *v = NULL;
    why[0] = '\0';
    return dcps_codec_sparse(m, lo, hi, &ix, &v, k, why, sizeof why);
}

START_TEST(sparse_returns_indices_values_and_count)
{
    static const uint32_t ix[4] = {64, 65, 100, 127};
    static const float v[4] = {0.5f, -0.25f, 3.0f, -0.0f};
    dcps_msg_t m = sparse_msg(ix, 4, v, 4);
    const uint32_t *gi = NULL;
    const float *gv = NULL;
    size_t k = 99;
    ck_assert_int_eq(dcps_codec_sparse(&m, 64, 128, &gi, &gv, &k, why, sizeof why), 0);
    ck_assert_ptr_eq(gi, ix);
    ck_assert_ptr_eq(gv, v);
    ck_assert_uint_eq(k, 4);
}
END_TEST

START_TEST(sparse_accepts_every_index_of_the_range)
{
    /* hi - lo entries is the maximum and is allowed. */
    uint32_t ix[8];
    float v[8];
    for (int i = 0; i < 8; i++) {
        ix[i] = 3000000000u + (uint32_t)i; /* above 2^31: compared unsigned */
        v[i] = (float)i;
    }
    dcps_msg_t m = sparse_msg(ix, 8, v, 8);
    size_t k = 0;
    ck_assert_int_eq(sparse(&m, 3000000000u, 3000000008u, &k), 0);
    ck_assert_uint_eq(k, 8);
}
END_TEST

START_TEST(sparse_accepts_empty_push)
{
    dcps_msg_t m = sparse_msg(NULL, 0, NULL, 0);
    size_t k = 99;
    ck_assert_int_eq(sparse(&m, 0, 64, &k), 0);
    ck_assert_uint_eq(k, 0);
}
END_TEST

START_TEST(sparse_rejects_index_below_lo)
{
    static const uint32_t ix[3] = {7, 70, 80};
    static const float v[3] = {1, 2, 3};
    dcps_msg_t m = sparse_msg(ix, 3, v, 3);
    size_t k = 99;
    ck_assert_int_eq(sparse(&m, 64, 128, &k), DCPS_E_RANGE);
    ck_assert_why_has("index 7");
    ck_assert_why_has("position 0");
    ck_assert_uint_eq(k, 99);
}
END_TEST

START_TEST(sparse_rejects_index_equal_to_hi)
{
    static const uint32_t ix[3] = {64, 100, 128};
    static const float v[3] = {1, 2, 3};
    dcps_msg_t m = sparse_msg(ix, 3, v, 3);
    size_t k = 0;
    ck_assert_int_eq(sparse(&m, 64, 128, &k), DCPS_E_RANGE);
    ck_assert_why_has("index 128");
    ck_assert_why_has("position 2");
    /* hi - 1 is fine. */
    static const uint32_t ok[3] = {64, 100, 127};
    m = sparse_msg(ok, 3, v, 3);
    ck_assert_int_eq(sparse(&m, 64, 128, &k), 0);
    ck_assert_uint_eq(k, 3);
}
END_TEST

START_TEST(sparse_rejects_largest_index)
{
    static const uint32_t ix[2] = {5, UINT32_MAX};
    static const float v[2] = {1, 2};
    dcps_msg_t m = sparse_msg(ix, 2, v, 2);
    size_t k = 0;
    ck_assert_int_eq(sparse(&m, 0, 1000, &k), DCPS_E_RANGE);
    ck_assert_why_has("index 4294967295");
}
END_TEST

START_TEST(sparse_rejects_equal_neighbours)
{
    static const uint32_t ix[4] = {1, 3, 5, 5};
    static const float v[4] = {1, 2, 3, 4};
    dcps_msg_t m = sparse_msg(ix, 4, v, 4);
    size_t k = 0;
    ck_assert_int_eq(sparse(&m, 0, 64, &k), DCPS_E_ORDER);
    ck_assert_why_has("index 5 at position 3");
}
END_TEST

START_TEST(sparse_rejects_descending_indices)
{
    static const uint32_t ix[3] = {10, 9, 20};
    static const float v[3] = {1, 2, 3};
    dcps_msg_t m = sparse_msg(ix, 3, v, 3);
    size_t k = 0;
    ck_assert_int_eq(sparse(&m, 0, 64, &k), DCPS_E_ORDER);
    ck_assert_why_has("index 9 at position 1");
    ck_assert_why_has("follows 10");
}
END_TEST

START_TEST(sparse_rejects_nonfinite_values)
{
    static const uint32_t ix[3] = {2, 7, 9};
    const float bad[] = {NAN, INFINITY, -INFINITY};
    for (int at = 0; at < 3; at++)
        for (size_t b = 0; b < 3; b++) {
            float v[3] = {1, 2, 3};
            v[at] = bad[b];
            dcps_msg_t m = sparse_msg(ix, 3, v, 3);
            size_t k = 99;
            ck_assert_int_eq(sparse(&m, 0, 64, &k), DCPS_E_NONFINITE);
            char want[32];
            snprintf(want, sizeof want, "index %u", ix[at]);
            ck_assert_why_has(want);
            ck_assert_uint_eq(k, 99);
        }
}
END_TEST

START_TEST(sparse_rejects_count_mismatch_between_indices_and_values)
{
    static const uint32_t ix[3] = {1, 2, 3};
    static const float v[2] = {1, 2};
    dcps_msg_t m = sparse_msg(ix, 3, v, 2);
    size_t k = 0;
    ck_assert_int_eq(sparse(&m, 0, 64, &k), DCPS_E_FRAMELEN);
    ck_assert_why_has("3 indices but 2 values");
    m = sparse_msg(ix, 2, v, 1);
    ck_assert_int_eq(sparse(&m, 0, 64, &k), DCPS_E_FRAMELEN);
}
END_TEST

START_TEST(sparse_rejects_more_entries_than_the_range)
{
    static const uint32_t ix[5] = {10, 11, 12, 13, 14};
    static const float v[5] = {1, 2, 3, 4, 5};
    dcps_msg_t m = sparse_msg(ix, 5, v, 5);
    size_t k = 0;
    ck_assert_int_eq(sparse(&m, 10, 14, &k), DCPS_E_SIZE);
    ck_assert_why_has("5 entries");
}
END_TEST

START_TEST(sparse_rejects_wrong_frame_kinds)
{
    static const uint32_t ix[2] = {1, 2};
    static const float v[2] = {1, 2};
    dcps_msg_t m, out;
    size_t k = 0;
    memset(&m, 0, sizeof m);
    m.type = DCPS_MSG_PUSH;
    m.job_id = JOB;

    /* Values before indices. */
    m.nframes = 2;
    m.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_VALUES, DCPS_DTYPE_F32, 2};
    m.frame[1] = (dcps_frame_desc_t){DCPS_FRAME_INDICES, DCPS_DTYPE_U32, 2};
    m.payload[0] = (dcps_buf_t){v, 8};
    m.payload[1] = (dcps_buf_t){ix, 8};
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    ck_assert_int_eq(sparse(&out, 0, 64, &k), DCPS_E_FRAMECOUNT);

    /* One dense frame. */
    m.nframes = 1;
    m.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_DENSE, DCPS_DTYPE_F32, 2};
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    ck_assert_int_eq(sparse(&out, 0, 64, &k), DCPS_E_FRAMECOUNT);

    /* Indices alone. */
    m.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_INDICES, DCPS_DTYPE_U32, 2};
    m.payload[0] = (dcps_buf_t){ix, 8};
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    ck_assert_int_eq(sparse(&out, 0, 64, &k), DCPS_E_FRAMECOUNT);

    /* Indices, values and one more. */
    m.nframes = 3;
    m.frame[1] = (dcps_frame_desc_t){DCPS_FRAME_VALUES, DCPS_DTYPE_F32, 2};
    m.frame[2] = (dcps_frame_desc_t){DCPS_FRAME_VALUES, DCPS_DTYPE_F32, 2};
    m.payload[1] = m.payload[2] = (dcps_buf_t){v, 8};
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    ck_assert_int_eq(sparse(&out, 0, 64, &k), DCPS_E_FRAMECOUNT);

    /* Two indices frames. */
    m.nframes = 2;
    m.frame[1] = (dcps_frame_desc_t){DCPS_FRAME_INDICES, DCPS_DTYPE_U32, 2};
    m.payload[1] = (dcps_buf_t){ix, 8};
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    ck_assert_int_eq(sparse(&out, 0, 64, &k), DCPS_E_FRAMECOUNT);
}
END_TEST

START_TEST(sparse_rejects_wrong_dtypes)
{
    static const uint32_t ix[2] = {1, 2};
    static const float v[2] = {1, 2};
    dcps_msg_t m, out;
    size_t k = 0;
    memset(&m, 0, sizeof m);
    m.type = DCPS_MSG_PUSH;
    m.job_id = JOB;
    m.nframes = 2;
    m.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_INDICES, DCPS_DTYPE_F32, 2};
    m.frame[1] = (dcps_frame_desc_t){DCPS_FRAME_VALUES, DCPS_DTYPE_F32, 2};
    m.payload[0] = (dcps_buf_t){ix, 8};
    m.payload[1] = (dcps_buf_t){v, 8};
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    ck_assert_int_eq(sparse(&out, 0, 64, &k), DCPS_E_FRAMELEN);
    m.frame[0].dtype = DCPS_DTYPE_U32;
    m.frame[1].dtype = DCPS_DTYPE_U32;
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    ck_assert_int_eq(sparse(&out, 0, 64, &k), DCPS_E_FRAMELEN);
}
END_TEST

/* --- presence, header fields and payload shapes ------------------------------------------- */

/* proto2 keeps whether a field was sent: a shard field of 0 on the wire is not
 * the same as no shard field. */
START_TEST(unpack_says_which_fields_were_present)
{
    dcps_msg_t out;
    Dcps__Header h = base_header(NULL, 0);
    h.type = DCPS_MSG_PULL;
    size_t len = craft(&h);
    ck_assert_int_eq(unpack_raw(len, NULL, 0, &out), 0);
    ck_assert_uint_eq(out.has, 0);

    h.has_shard = h.has_range_lo = h.has_step = h.has_error_code = 1; /* all as 0 */
    h.error_text = "";
    len = craft(&h);
    ck_assert_int_eq(unpack_raw(len, NULL, 0, &out), 0);
    ck_assert_uint_eq(out.has, DCPS_HAS_SHARD | DCPS_HAS_RANGE_LO | DCPS_HAS_STEP |
                                   DCPS_HAS_ERROR_CODE | DCPS_HAS_ERROR_TEXT);
    ck_assert_uint_eq(out.shard, 0);
    ck_assert_uint_eq(out.range_lo, 0);
}
END_TEST

/* A sender marks a field to send as 0; nonzero fields are sent as before. */
START_TEST(pack_sends_a_zero_field_whose_bit_is_set)
{
    dcps_msg_t m, out;
    memset(&m, 0, sizeof m);
    m.type = DCPS_MSG_PULL;
    m.job_id = JOB;
    m.want = 0;
    m.step = 9;
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    ck_assert_uint_eq(out.has & (DCPS_HAS_WANT | DCPS_HAS_RANGE_LO | DCPS_HAS_STEP),
                      DCPS_HAS_STEP);
    /* shard and param_version are always sent. */
    ck_assert_uint_eq(out.has & (DCPS_HAS_SHARD | DCPS_HAS_PARAM_VERSION),
                      DCPS_HAS_SHARD | DCPS_HAS_PARAM_VERSION);
    m.has = DCPS_HAS_WANT | DCPS_HAS_RANGE_LO;
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    ck_assert_uint_eq(out.has & (DCPS_HAS_WANT | DCPS_HAS_RANGE_LO | DCPS_HAS_RANGE_HI),
                      DCPS_HAS_WANT | DCPS_HAS_RANGE_LO);
}
END_TEST

/* Shard 1 of a 72-parameter model: [64, 72). */
static const dcps_field_ctx_t ctx1 = {1, 72, 64, 72};

/* A request of `type` as the client library sends it to shard 1, decoded. */
static dcps_msg_t request_to_1(uint32_t type)
{
    static const float v[8] = {0};
    dcps_msg_t m, out;
    memset(&m, 0, sizeof m);
    m.type = type;
    m.job_id = JOB;
    m.rank = 2;
    m.seq = 40;
    m.shard = 1;
    m.session = 77;
    if (type == DCPS_MSG_HELLO)
        m.n_params = 72;
    if (type == DCPS_MSG_PUSH || type == DCPS_MSG_INIT) {
        m.nframes = 1;
        m.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_DENSE, DCPS_DTYPE_F32, 8};
        m.payload[0] = (dcps_buf_t){v, sizeof v};
    }
    if (type == DCPS_MSG_PUSH || type == DCPS_MSG_PULL) {
        m.param_version = 12;
        m.step = 3;
    }
    if (type == DCPS_MSG_BARRIER)
        m.step = 5;
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    return out;
}

static const uint32_t request_types[] = {DCPS_MSG_HELLO,     DCPS_MSG_PUSH, DCPS_MSG_PULL,
                                         DCPS_MSG_BARRIER,   DCPS_MSG_HEARTBEAT,
                                         DCPS_MSG_BYE,       DCPS_MSG_INIT, DCPS_MSG_DONE};
#define N_REQUEST_TYPES (sizeof request_types / sizeof request_types[0])

static int check_fields(const dcps_msg_t *m, const dcps_field_ctx_t *ctx)
{
    why[0] = '\0';
    return dcps_codec_check_fields(m, ctx, why, sizeof why);
}

/* What the client library sends passes, for every request type: the checks
 * refuse nothing a real worker sends (a PULL without DELTA names its last
 * version: ignored). */
START_TEST(fields_of_every_request_the_client_sends_pass)
{
    for (size_t i = 0; i < N_REQUEST_TYPES; i++) {
        dcps_msg_t m = request_to_1(request_types[i]);
        ck_assert_msg(check_fields(&m, &ctx1) == 0, "%s: %s",
                      dcps_msg_type_name(request_types[i]), why);
    }
    dcps_msg_t m = request_to_1(DCPS_MSG_PULL);
    m.flags = DCPS_FLAG_DELTA;
    m.want = 3;
    ck_assert_int_eq(check_fields(&m, &ctx1), 0);
    m.flags = DCPS_FLAG_EXACT;
    m.want = 0;
    ck_assert_int_eq(check_fields(&m, &ctx1), 0);
    /* Replies are not checked here (the router refuses them as MSGTYPE). */
    m.type = DCPS_MSG_WELCOME;
    m.workers = 4;
    ck_assert_int_eq(check_fields(&m, &ctx1), 0);
}
END_TEST

/* A PUSH naming shard 3 was applied on shard 0 (issue 18): now any request
 * naming another shard is FIELD, also shard 0 sent as 0; an absent shard is
 * fine. HELLO says its shard itself (SIZE: the job files differ). */
START_TEST(fields_another_shard_is_refused)
{
    for (size_t i = 0; i < N_REQUEST_TYPES; i++) {
        uint32_t t = request_types[i];
        dcps_msg_t m = request_to_1(t);
        m.shard = 3;
        ck_assert_int_eq(check_fields(&m, &ctx1), t == DCPS_MSG_HELLO ? 0 : DCPS_E_FIELD);
        if (t != DCPS_MSG_HELLO)
            ck_assert_why_has("names shard 3, this is shard 1");
        m.shard = 0;
        ck_assert_int_eq(check_fields(&m, &ctx1), t == DCPS_MSG_HELLO ? 0 : DCPS_E_FIELD);
        m.has &= ~(uint32_t)DCPS_HAS_SHARD;
        ck_assert_int_eq(check_fields(&m, &ctx1), 0);
    }
}
END_TEST

/* range_lo, range_hi and n_params, when present, must be the shard's; before
 * the shard knows its size (params = auto) they are not checked. */
START_TEST(fields_range_and_size_must_be_the_shards)
{
    for (size_t i = 0; i < N_REQUEST_TYPES; i++) {
        uint32_t t = request_types[i];
        dcps_msg_t m = request_to_1(t);
        m.has |= DCPS_HAS_RANGE_LO | DCPS_HAS_RANGE_HI;
        m.range_lo = 64;
        m.range_hi = 72;
        ck_assert_msg(check_fields(&m, &ctx1) == 0, "%s: %s", dcps_msg_type_name(t), why);
        m.range_lo = 0; /* present as 0: [0, 72) is not this shard's */
        ck_assert_int_eq(check_fields(&m, &ctx1), DCPS_E_FIELD);
        ck_assert_why_has("this shard serves [64, 72)");
        m.range_lo = 64;
        m.range_hi = 71;
        ck_assert_int_eq(check_fields(&m, &ctx1), DCPS_E_FIELD);
        const dcps_field_ctx_t unsized = {1, 0, 0, 0};
        ck_assert_int_eq(check_fields(&m, &unsized), 0);

        m = request_to_1(t);
        m.n_params = 73;
        m.has |= DCPS_HAS_N_PARAMS;
        ck_assert_int_eq(check_fields(&m, &ctx1), t == DCPS_MSG_HELLO ? 0 : DCPS_E_FIELD);
        ck_assert_int_eq(check_fields(&m, &unsized), 0);
        m.n_params = 72;
        ck_assert_int_eq(check_fields(&m, &ctx1), 0);
    }
}
END_TEST

/* A reply's fields mean nothing in a request. */
START_TEST(fields_of_replies_are_refused_in_requests)
{
    for (size_t i = 0; i < N_REQUEST_TYPES; i++) {
        uint32_t t = request_types[i];
        dcps_msg_t m = request_to_1(t);
        m.initialized = true;
        ck_assert_int_eq(check_fields(&m, &ctx1), DCPS_E_FIELD);
        ck_assert_why_has("initialized, a field of WELCOME only");
        m = request_to_1(t);
        m.workers = 2;
        ck_assert_int_eq(check_fields(&m, &ctx1), DCPS_E_FIELD);
        m = request_to_1(t);
        m.error_code = 16;
        ck_assert_int_eq(check_fields(&m, &ctx1), DCPS_E_FIELD);
        ck_assert_why_has("error_code, a field of ERROR only");
        m = request_to_1(t);
        snprintf(m.error_text, sizeof m.error_text, "hello");
        ck_assert_int_eq(check_fields(&m, &ctx1), DCPS_E_FIELD);
        m = request_to_1(t);
        m.lr = 0.5;
        m.has |= DCPS_HAS_LR;
        ck_assert_int_eq(check_fields(&m, &ctx1), DCPS_E_FIELD);
        ck_assert_why_has("carries lr 0.5, a field of PULL_REPLY only");
        m.lr = NAN;
        ck_assert_int_eq(check_fields(&m, &ctx1), DCPS_E_FIELD);
        /* Present as 0, false or empty is the same as absent. */
        m = request_to_1(t);
        m.has |= DCPS_HAS_INITIALIZED | DCPS_HAS_WORKERS | DCPS_HAS_ERROR_CODE |
                 DCPS_HAS_ERROR_TEXT | DCPS_HAS_LR;
        ck_assert_int_eq(check_fields(&m, &ctx1), 0);
    }
}
END_TEST

/* Flags: a PULL has DELTA and EXACT (not both); no other request has any. want
 * only with DELTA; step only on PUSH, PULL, BARRIER; param_version only on
 * PUSH, PULL. */
START_TEST(fields_flags_want_step_and_version_only_where_they_mean_something)
{
    for (size_t i = 0; i < N_REQUEST_TYPES; i++) {
        uint32_t t = request_types[i];
        bool pull = t == DCPS_MSG_PULL;
        dcps_msg_t m = request_to_1(t);
        m.flags = DCPS_FLAG_DELTA;
        ck_assert_int_eq(check_fields(&m, &ctx1), pull ? 0 : DCPS_E_FIELD);
        m.flags = DCPS_FLAG_DUPLICATE; /* a reply's flag */
        ck_assert_int_eq(check_fields(&m, &ctx1), DCPS_E_FIELD);
        m.flags = 1u << 20; /* no flag at all */
        ck_assert_int_eq(check_fields(&m, &ctx1), DCPS_E_FIELD);
        ck_assert_why_has(pull ? "only DELTA (8) and EXACT (16)" : "it has no flags");

        m = request_to_1(t);
        m.want = 10;
        ck_assert_int_eq(check_fields(&m, &ctx1), DCPS_E_FIELD);
        ck_assert_why_has("want 10");

        m = request_to_1(t);
        m.step = 4;
        bool stepped = t == DCPS_MSG_PUSH || pull || t == DCPS_MSG_BARRIER;
        ck_assert_int_eq(check_fields(&m, &ctx1), stepped ? 0 : DCPS_E_FIELD);

        m = request_to_1(t);
        m.param_version = 4;
        ck_assert_int_eq(check_fields(&m, &ctx1),
                         t == DCPS_MSG_PUSH || pull ? 0 : DCPS_E_FIELD);
    }
    dcps_msg_t m = request_to_1(DCPS_MSG_PULL);
    m.flags = DCPS_FLAG_DELTA | DCPS_FLAG_EXACT;
    ck_assert_int_eq(check_fields(&m, &ctx1), DCPS_E_FIELD);
    ck_assert_why_has("both DELTA");
    m.flags = DCPS_FLAG_EXACT;
    m.want = 5;
    ck_assert_int_eq(check_fields(&m, &ctx1), DCPS_E_FIELD);
}
END_TEST

/* A request without a payload that carries frames is told so. */
START_TEST(fields_payload_on_a_request_without_one_is_framecount)
{
    static const float v[8] = {0};
    for (size_t i = 0; i < N_REQUEST_TYPES; i++) {
        uint32_t t = request_types[i];
        if (t == DCPS_MSG_PUSH || t == DCPS_MSG_INIT || t == DCPS_MSG_HELLO)
            continue; /* HELLO's payload, a group table, is its handler's to check */
        dcps_msg_t m = request_to_1(t);
        m.nframes = 1;
        m.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_DENSE, DCPS_DTYPE_F32, 8};
        m.payload[0] = (dcps_buf_t){v, sizeof v};
        ck_assert_int_eq(check_fields(&m, &ctx1), DCPS_E_FRAMECOUNT);
        ck_assert_why_has("carries no payload, got 1 frame (DENSE)");
    }
}
END_TEST

/* A PUSH of either shape is taken; any other shape is told what arrived and
 * what a PUSH needs (issue 18: "a sparse PUSH needs…" for no frames at all,
 * "needs one dense frame" for INDICES alone). */
START_TEST(push_payload_says_what_arrived_and_what_is_expected)
{
    static const float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    static const uint32_t ix[2] = {65, 70};
    const uint32_t *idx = NULL;
    const float *val = NULL;
    size_t k = 99;
    dcps_msg_t m = request_to_1(DCPS_MSG_PUSH), out;
    ck_assert_int_eq(dcps_codec_push(&m, 64, 72, &idx, &val, &k, why, sizeof why), 0);
    ck_assert_ptr_null(idx);
    ck_assert_ptr_eq(val, m.payload[0].data);
    ck_assert_uint_eq(k, 8);

    memset(&m, 0, sizeof m);
    m.type = DCPS_MSG_PUSH;
    m.job_id = JOB;
    m.nframes = 2;
    m.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_INDICES, DCPS_DTYPE_U32, 2};
    m.frame[1] = (dcps_frame_desc_t){DCPS_FRAME_VALUES, DCPS_DTYPE_F32, 2};
    m.payload[0] = (dcps_buf_t){ix, sizeof ix};
    m.payload[1] = (dcps_buf_t){v, 8};
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    ck_assert_int_eq(dcps_codec_push(&out, 64, 72, &idx, &val, &k, why, sizeof why), 0);
    ck_assert_ptr_eq(idx, ix);
    ck_assert_uint_eq(k, 2);

    static const struct {
        int n;
        uint32_t kinds[3];
        const char *got;
    } bad[] = {
        {0, {0}, "got no frames"},
        {1, {DCPS_FRAME_INDICES}, "got 1 frame (INDICES)"},
        {1, {DCPS_FRAME_VALUES}, "got 1 frame (VALUES)"},
        {2, {DCPS_FRAME_VALUES, DCPS_FRAME_INDICES}, "got 2 frames (VALUES, INDICES)"},
        {2, {DCPS_FRAME_DENSE, DCPS_FRAME_DENSE}, "got 2 frames (DENSE, DENSE)"},
        {3, {DCPS_FRAME_INDICES, DCPS_FRAME_VALUES, DCPS_FRAME_VALUES},
         "got 3 frames (INDICES, VALUES, VALUES)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        m.nframes = bad[i].n;
        for (int f = 0; f < bad[i].n; f++) {
            bool u32 = bad[i].kinds[f] == DCPS_FRAME_INDICES;
            m.frame[f] = (dcps_frame_desc_t){bad[i].kinds[f], u32 ? DCPS_DTYPE_U32 : DCPS_DTYPE_F32,
                                             2};
            m.payload[f] = (dcps_buf_t){u32 ? (const void *)ix : (const void *)v, 8};
        }
        ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
        ck_assert_int_eq(dcps_codec_push(&out, 64, 72, &idx, &val, &k, why, sizeof why),
                         DCPS_E_FRAMECOUNT);
        ck_assert_why_has("PUSH needs one DENSE frame, or an INDICES frame then a VALUES frame");
        ck_assert_why_has(bad[i].got);
    }
    /* The dense and sparse checks on their own say what arrived too. */
    m.nframes = 1;
    m.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_INDICES, DCPS_DTYPE_U32, 2};
    m.payload[0] = (dcps_buf_t){ix, 8};
    ck_assert_int_eq(roundtrip(&m, JOB, &out), 0);
    ck_assert_int_eq(dcps_codec_dense(&out, 2, &val, why, sizeof why), DCPS_E_FRAMECOUNT);
    ck_assert_why_has("needs one DENSE frame, got 1 frame (INDICES)");
    ck_assert_int_eq(sparse(&out, 64, 72, &k), DCPS_E_FRAMECOUNT);
    ck_assert_why_has("needs an INDICES frame then a VALUES frame, got 1 frame (INDICES)");
}
END_TEST

/* --- reply and names ----------------------------------------------------------------------- */

START_TEST(reply_copies_identity_and_clears_the_rest)
{
    static const float v[2] = {1, 2};
    dcps_msg_t req, reply, want;
    memset(&req, 0, sizeof req);
    req.type = DCPS_MSG_PUSH;
    req.job_id = JOB;
    req.rank = 17;
    req.seq = 123456789;
    req.shard = 3;
    req.param_version = 55;
    req.n_params = 1000;
    req.range_lo = 64;
    req.range_hi = 128;
    req.initialized = true;
    req.error_code = 13;
    snprintf(req.error_text, sizeof req.error_text, "stale text");
    req.flags = 1;
    req.workers = 4;
    req.step = 8;
    req.nframes = 1;
    req.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_DENSE, DCPS_DTYPE_F32, 2};
    req.payload[0] = (dcps_buf_t){v, 8};

    memset(&reply, 0xab, sizeof reply);
    dcps_msg_reply(&reply, &req, DCPS_MSG_PUSH_ACK);

    memset(&want, 0, sizeof want);
    want.type = DCPS_MSG_PUSH_ACK;
    want.job_id = JOB;
    want.rank = 17;
    want.seq = 123456789;
    want.shard = 3;
    ck_assert_uint_eq(reply.type, DCPS_MSG_PUSH_ACK);
    ck_assert_uint_eq(reply.job_id, JOB);
    ck_assert_uint_eq(reply.rank, 17);
    ck_assert_uint_eq(reply.seq, 123456789);
    ck_assert_uint_eq(reply.shard, 3);
    ck_assert_uint_eq(reply.param_version, 0);
    ck_assert_uint_eq(reply.n_params, 0);
    ck_assert_uint_eq(reply.range_lo, 0);
    ck_assert_uint_eq(reply.range_hi, 0);
    ck_assert(!reply.initialized);
    ck_assert_uint_eq(reply.error_code, 0);
    ck_assert_str_eq(reply.error_text, "");
    ck_assert_uint_eq(reply.flags, 0);
    ck_assert_uint_eq(reply.workers, 0);
    ck_assert_uint_eq(reply.step, 0);
    ck_assert_int_eq(reply.nframes, 0);
    ck_assert_ptr_null(reply.payload[0].data);
    ck_assert_int_eq(memcmp(&reply, &want, sizeof want), 0);
}
END_TEST

START_TEST(type_names_for_every_type)
{
    ck_assert_str_eq(dcps_msg_type_name(DCPS_MSG_HELLO), "HELLO");
    ck_assert_str_eq(dcps_msg_type_name(DCPS_MSG_WELCOME), "WELCOME");
    ck_assert_str_eq(dcps_msg_type_name(DCPS_MSG_PUSH), "PUSH");
    ck_assert_str_eq(dcps_msg_type_name(DCPS_MSG_PUSH_ACK), "PUSH_ACK");
    ck_assert_str_eq(dcps_msg_type_name(DCPS_MSG_PULL), "PULL");
    ck_assert_str_eq(dcps_msg_type_name(DCPS_MSG_PULL_REPLY), "PULL_REPLY");
    ck_assert_str_eq(dcps_msg_type_name(DCPS_MSG_BARRIER), "BARRIER");
    ck_assert_str_eq(dcps_msg_type_name(DCPS_MSG_HEARTBEAT), "HEARTBEAT");
    ck_assert_str_eq(dcps_msg_type_name(DCPS_MSG_BYE), "BYE");
    ck_assert_str_eq(dcps_msg_type_name(DCPS_MSG_ERROR), "ERROR");
    ck_assert_str_eq(dcps_msg_type_name(DCPS_MSG_INIT), "INIT");
    for (uint32_t t = 1; t < DCPS_MSG_TYPE_END; t++)
        ck_assert_ptr_nonnull(dcps_msg_type_name(t));
}
END_TEST

START_TEST(type_name_of_unknown_types_is_unknown)
{
    ck_assert_str_eq(dcps_msg_type_name(0), "unknown");
    ck_assert_str_eq(dcps_msg_type_name(DCPS_MSG_TYPE_END), "unknown");
    ck_assert_str_eq(dcps_msg_type_name(99), "unknown");
    ck_assert_str_eq(dcps_msg_type_name(UINT32_MAX), "unknown");
}
END_TEST

static Suite *codec_suite(void)
{
    Suite *s = suite_create("codec");
    TCase *tc;

    tc = tcase_create("roundtrip");
    tcase_add_test(tc, proto_enums_are_the_c_constants);
    tcase_add_loop_test(tc, every_type_round_trips_with_every_header_field, DCPS_MSG_HELLO,
                        DCPS_MSG_TYPE_END);
    tcase_add_loop_test(tc, every_type_round_trips_without_payload, DCPS_MSG_HELLO,
                        DCPS_MSG_TYPE_END);
    tcase_add_test(tc, unset_fields_decode_as_zero);
    tcase_add_test(tc, extreme_field_values_round_trip);
    tcase_add_test(tc, longest_error_text_round_trips_and_longer_is_truncated);
    tcase_add_test(tc, pack_writes_protocol_and_frame_byte_lengths);
    tcase_add_test(tc, pack_refuses_bad_frame_counts_and_small_buffers);
    tcase_add_test(tc, unknown_header_fields_are_ignored);
    tcase_add_test(tc, header_of_exactly_header_max_bytes_is_accepted);
    tcase_add_test(tc, push_with_a_long_unknown_field_is_accepted_below_the_cap);
    suite_add_tcase(s, tc);

    tc = tcase_create("fields");
    tcase_add_test(tc, unpack_says_which_fields_were_present);
    tcase_add_test(tc, pack_sends_a_zero_field_whose_bit_is_set);
    tcase_add_test(tc, fields_of_every_request_the_client_sends_pass);
    tcase_add_test(tc, fields_another_shard_is_refused);
    tcase_add_test(tc, fields_range_and_size_must_be_the_shards);
    tcase_add_test(tc, fields_of_replies_are_refused_in_requests);
    tcase_add_test(tc, fields_flags_want_step_and_version_only_where_they_mean_something);
    tcase_add_test(tc, fields_payload_on_a_request_without_one_is_framecount);
    tcase_add_test(tc, push_payload_says_what_arrived_and_what_is_expected);
    suite_add_tcase(s, tc);

    tc = tcase_create("unpack_errors");
    tcase_add_test(tc, unpack_rejects_empty_header);
    tcase_add_test(tc, unpack_rejects_header_that_does_not_parse);
    tcase_add_test(tc, unpack_rejects_header_longer_than_header_max);
    tcase_add_test(tc, unpack_rejects_protocol_2_and_4);
    tcase_add_test(tc, unpack_rejects_missing_protocol_field);
    tcase_add_test(tc, unpack_rejects_protocol_0_and_max);
    tcase_add_test(tc, unpack_rejects_wrong_job_id);
    tcase_add_test(tc, unpack_rejects_missing_job_id_when_one_is_expected);
    tcase_add_test(tc, expect_job_zero_accepts_any_job_id);
    tcase_add_test(tc, unpack_rejects_type_0_99_and_end);
    tcase_add_test(tc, unpack_rejects_missing_type);
    tcase_add_test(tc, unpack_rejects_fewer_frames_than_header_describes);
    tcase_add_test(tc, unpack_rejects_more_frames_than_header_describes);
    tcase_add_test(tc, unpack_rejects_more_than_max_frames_even_if_described);
    tcase_add_test(tc, unpack_rejects_bytes_not_count_times_size);
    tcase_add_test(tc, unpack_rejects_frame_shorter_than_header_says);
    tcase_add_test(tc, unpack_rejects_frame_longer_than_header_says);
    tcase_add_test(tc, unpack_rejects_second_frame_with_wrong_length);
    tcase_add_test(tc, unpack_rejects_unknown_frame_kind);
    tcase_add_test(tc, unpack_rejects_unknown_dtype);
    tcase_add_test(tc, unpack_rejects_frame_desc_without_fields);
    tcase_add_test(tc, unpack_rejects_count_that_overflows_byte_length);
    tcase_add_test(tc, failed_unpack_attaches_no_payload);
    suite_add_tcase(s, tc);

    tc = tcase_create("dense");
    tcase_add_test(tc, dense_returns_pointer_to_the_frame);
    tcase_add_test(tc, dense_accepts_extreme_finite_values);
    tcase_add_test(tc, dense_to_copies_what_it_checks);
    tcase_add_test(tc, dense_rejects_wrong_count);
    tcase_add_test(tc, dense_rejects_uint32_dense_frame);
    tcase_add_test(tc, dense_rejects_nan_at_first_middle_and_last);
    tcase_add_test(tc, dense_rejects_plus_and_minus_infinity);
    tcase_add_test(tc, dense_reports_the_first_of_several_bad_values);
    tcase_add_test(tc, dense_accepts_the_extreme_finite_values);
    tcase_add_test(tc, dense_rejects_two_frames_and_no_frame);
    tcase_add_test(tc, dense_rejects_a_values_frame);
    suite_add_tcase(s, tc);

    tc = tcase_create("sparse");
    tcase_add_test(tc, sparse_returns_indices_values_and_count);
    tcase_add_test(tc, sparse_accepts_every_index_of_the_range);
    tcase_add_test(tc, sparse_accepts_empty_push);
    tcase_add_test(tc, sparse_rejects_index_below_lo);
    tcase_add_test(tc, sparse_rejects_index_equal_to_hi);
    tcase_add_test(tc, sparse_rejects_largest_index);
    tcase_add_test(tc, sparse_rejects_equal_neighbours);
    tcase_add_test(tc, sparse_rejects_descending_indices);
    tcase_add_test(tc, sparse_rejects_nonfinite_values);
    tcase_add_test(tc, sparse_rejects_count_mismatch_between_indices_and_values);
    tcase_add_test(tc, sparse_rejects_more_entries_than_the_range);
    tcase_add_test(tc, sparse_rejects_wrong_frame_kinds);
    tcase_add_test(tc, sparse_rejects_wrong_dtypes);
    suite_add_tcase(s, tc);

    tc = tcase_create("reply");
    tcase_add_test(tc, reply_copies_identity_and_clears_the_rest);
    tcase_add_test(tc, type_names_for_every_type);
    tcase_add_test(tc, type_name_of_unknown_types_is_unknown);
    tcase_add_test(tc, quantized_frames_roundtrip_with_their_block);
    tcase_add_test(tc, quantized_sparse_values_decode_after_the_index_checks);
    tcase_add_test(tc, unpack_checks_quantized_frame_shapes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return dcps_test_run(codec_suite());
}
