/* dcps — the wire codec; see codec.h. */
#include "proto/codec.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "dcps.pb-c.h"
#include "proto/quant.h"

static const char *const type_names[DCPS_MSG_TYPE_END] = {
    [DCPS_MSG_HELLO] = "HELLO",         [DCPS_MSG_WELCOME] = "WELCOME",
    [DCPS_MSG_PUSH] = "PUSH",           [DCPS_MSG_PUSH_ACK] = "PUSH_ACK",
    [DCPS_MSG_PULL] = "PULL",           [DCPS_MSG_PULL_REPLY] = "PULL_REPLY",
    [DCPS_MSG_BARRIER] = "BARRIER",     [DCPS_MSG_HEARTBEAT] = "HEARTBEAT",
    [DCPS_MSG_BYE] = "BYE",             [DCPS_MSG_ERROR] = "ERROR",
    [DCPS_MSG_INIT] = "INIT",           [DCPS_MSG_DONE] = "DONE",
    [DCPS_MSG_BUFFERS] = "BUFFERS",     [DCPS_MSG_ROUND] = "ROUND",
};

const char *dcps_msg_type_name(uint32_t type)
{
    return type > 0 && type < DCPS_MSG_TYPE_END ? type_names[type] : "unknown";
}


int dcps_codec_pack(const dcps_msg_t *m, uint8_t *buf, size_t cap)
{
    Dcps__Header h = DCPS__HEADER__INIT;
    Dcps__FrameDesc fd[DCPS_MAX_FRAMES];
    Dcps__FrameDesc *fdp[DCPS_MAX_FRAMES];

    if (m->nframes < 0 || m->nframes > DCPS_MAX_FRAMES)
        return DCPS_E_INVAL;
#define SET(field, value) (h.has_##field = 1, h.field = (value))
#define SEND(field, bit) (m->field || (m->has & (bit)))
    SET(protocol, DCPS_PROTOCOL);
    SET(type, m->type);
    SET(job_id, m->job_id);
    SET(rank, m->rank);
    SET(seq, m->seq);
    SET(shard, m->shard);
    SET(param_version, m->param_version);
    if (SEND(n_params, DCPS_HAS_N_PARAMS))
        SET(n_params, m->n_params);
    /* A range is sent whole: [0, hi) has a range_lo of 0. */
    if (m->range_lo || m->range_hi || (m->has & DCPS_HAS_RANGE_LO))
        SET(range_lo, m->range_lo);
    if (m->range_lo || m->range_hi || (m->has & DCPS_HAS_RANGE_HI))
        SET(range_hi, m->range_hi);
    if (SEND(initialized, DCPS_HAS_INITIALIZED))
        SET(initialized, m->initialized);
    if (SEND(error_code, DCPS_HAS_ERROR_CODE))
        SET(error_code, m->error_code);
    if (m->error_code || m->error_text[0] || (m->has & DCPS_HAS_ERROR_TEXT))
        h.error_text = (char *)m->error_text;
    if (SEND(flags, DCPS_HAS_FLAGS))
        SET(flags, m->flags);
    if (SEND(workers, DCPS_HAS_WORKERS))
        SET(workers, m->workers);
    if (SEND(step, DCPS_HAS_STEP))
        SET(step, m->step);
    if (SEND(want, DCPS_HAS_WANT))
        SET(want, m->want);
    if (SEND(session, DCPS_HAS_SESSION))
        SET(session, m->session);
    if (m->lr != 0 || (m->has & DCPS_HAS_LR))
        SET(lr, m->lr);
    if (m->has & DCPS_HAS_PART) {
        SET(part, m->part);
        SET(parts, m->parts);
        SET(part_lo, m->part_lo);
        SET(part_hi, m->part_hi);
    }
    if (SEND(checkpoint, DCPS_HAS_CHECKPOINT))
        SET(checkpoint, m->checkpoint);
    if (SEND(generation, DCPS_HAS_GENERATION))
        SET(generation, m->generation);
#undef SEND
#undef SET
    for (int i = 0; i < m->nframes; i++) {
        dcps__frame_desc__init(&fd[i]);
        fd[i].has_kind = fd[i].has_dtype = fd[i].has_count = fd[i].has_bytes = 1;
        fd[i].kind = m->frame[i].kind;
        fd[i].dtype = m->frame[i].dtype;
        fd[i].count = m->frame[i].count;
        fd[i].bytes = dcps_quant_bytes(m->frame[i].dtype, m->frame[i].count, m->block[i]);
        fd[i].has_block = m->block[i] != 0;
        fd[i].block = m->block[i];
        fdp[i] = &fd[i];
    }
    h.n_frames = (size_t)m->nframes;
    h.frames = fdp;
    size_t len = dcps__header__get_packed_size(&h);
    if (len > cap)
        return DCPS_E_INVAL;
    return (int)dcps__header__pack(&h, buf);
}

#define FAIL(code, ...)                                                            \
    do {                                                                           \
        snprintf(why, whylen, __VA_ARGS__);                                        \
        rc = (code);                                                               \
        goto out;                                                                  \
    } while (0)

/* Frame i's description against its payload (kind, dtype, block, length), then
 * into out. */
static int take_frame(const Dcps__FrameDesc *d, size_t i, const dcps_buf_t *frame, dcps_msg_t *out,
                      char *why, size_t whylen)
{
    int rc = 0;
    uint64_t sz = dcps_quant_bytes(d->dtype, d->count, d->block);
    if (d->kind < DCPS_FRAME_DENSE || d->kind > DCPS_FRAME_KIND_LAST ||
        dcps_quant_bytes(d->dtype, 1, 0) == 0)
        FAIL(DCPS_E_FRAMELEN, "frame %zu has unknown kind %u or dtype %u", i, d->kind, d->dtype);
    if (dcps_quant_is(d->dtype) && d->kind != DCPS_FRAME_DENSE && d->kind != DCPS_FRAME_VALUES)
        FAIL(DCPS_E_FRAMELEN, "frame %zu: only DENSE and VALUES frames take the %s format", i,
             dcps_quant_name(d->dtype));
    if (d->block && dcps_quant_blocks(d->dtype, 1, 0) == 0)
        FAIL(DCPS_E_FRAMELEN, "frame %zu: block %u on a frame of dtype %u, which has no "
             "scales (only INT8 and TWOBIT have)", i, d->block, d->dtype);
    if (sz > SIZE_MAX || d->bytes != sz || d->bytes != frame->len)
        FAIL(DCPS_E_FRAMELEN, "frame %zu: header says %llu elements in %llu bytes, frame has %zu bytes",
             i, (unsigned long long)d->count, (unsigned long long)d->bytes, frame->len);
    out->frame[i].kind = d->kind;
    out->frame[i].dtype = d->dtype;
    out->frame[i].count = d->count;
    out->block[i] = d->block;
    out->payload[i] = *frame;
out:
    return rc;
}

int dcps_codec_unpack(const void *hdr, size_t hdr_len, const dcps_buf_t *frames, size_t nframes,
                      uint64_t expect_job, dcps_msg_t *out, char *why, size_t whylen)
{
    Dcps__Header *h;
    int rc = 0;

    memset(out, 0, sizeof *out);
    if (hdr_len == 0 || hdr_len > DCPS_HEADER_MAX) {
        snprintf(why, whylen,
                 "header of %zu bytes: a header is 1 to %d bytes, unknown fields included",
                 hdr_len, DCPS_HEADER_MAX);
        return DCPS_E_HEADER;
    }
    h = dcps__header__unpack(NULL, hdr_len, hdr);
    if (!h) {
        snprintf(why, whylen, "header of %zu bytes does not parse as dcps.Header", hdr_len);
        return DCPS_E_HEADER;
    }
    out->type = h->type;
    out->rank = h->rank;
    out->seq = h->seq;
    if (!h->has_protocol || h->protocol != DCPS_PROTOCOL)
        FAIL(DCPS_E_PROTOVER, "protocol version %u, this shard speaks %d",
             h->has_protocol ? h->protocol : 0, DCPS_PROTOCOL);
    if (expect_job && h->job_id != expect_job)
        FAIL(DCPS_E_JOBID, "job id %llu, this is job %llu", (unsigned long long)h->job_id,
             (unsigned long long)expect_job);
    if (!h->has_type || h->type == 0 || h->type >= DCPS_MSG_TYPE_END)
        FAIL(DCPS_E_MSGTYPE, "message type %u is unknown", h->type);
    if (h->n_frames != nframes || nframes > DCPS_MAX_FRAMES)
        FAIL(DCPS_E_FRAMECOUNT, "%s header describes %zu payload frames, message has %zu",
             dcps_msg_type_name(h->type), h->n_frames, nframes);
    for (size_t i = 0; i < nframes; i++)
        if ((rc = take_frame(h->frames[i], i, &frames[i], out, why, whylen)) != 0)
            goto out;
    out->nframes = (int)nframes;
    out->job_id = h->job_id;
    out->shard = h->shard;
    out->param_version = h->param_version;
    out->n_params = h->n_params;
    out->range_lo = h->range_lo;
    out->range_hi = h->range_hi;
    out->initialized = h->initialized;
    out->error_code = h->error_code;
    if (h->error_text)
        snprintf(out->error_text, sizeof out->error_text, "%s", h->error_text);
    out->flags = h->flags;
    out->workers = h->workers;
    out->step = h->step;
    out->want = h->want;
    out->session = h->session;
    out->lr = h->lr;
    out->part = h->part, out->parts = h->parts;
    out->part_lo = h->part_lo, out->part_hi = h->part_hi;
    out->checkpoint = h->checkpoint;
    out->generation = h->generation;
#define HAS(field, bit) (h->has_##field ? (bit) : 0u)
    out->has = HAS(shard, DCPS_HAS_SHARD) | HAS(param_version, DCPS_HAS_PARAM_VERSION) |
               HAS(n_params, DCPS_HAS_N_PARAMS) | HAS(range_lo, DCPS_HAS_RANGE_LO) |
               HAS(range_hi, DCPS_HAS_RANGE_HI) | HAS(initialized, DCPS_HAS_INITIALIZED) |
               HAS(error_code, DCPS_HAS_ERROR_CODE) | HAS(flags, DCPS_HAS_FLAGS) |
               HAS(workers, DCPS_HAS_WORKERS) | HAS(step, DCPS_HAS_STEP) |
               HAS(want, DCPS_HAS_WANT) | HAS(session, DCPS_HAS_SESSION) |
               HAS(lr, DCPS_HAS_LR) | HAS(part, DCPS_HAS_PART) | HAS(parts, DCPS_HAS_PART) |
               HAS(part_lo, DCPS_HAS_PART) | HAS(part_hi, DCPS_HAS_PART) |
               HAS(checkpoint, DCPS_HAS_CHECKPOINT) | HAS(generation, DCPS_HAS_GENERATION) |
               (h->error_text ? DCPS_HAS_ERROR_TEXT : 0u);
#undef HAS
out:
    dcps__header__free_unpacked(h, NULL);
    return rc;
}

/* The first non-finite value's position, or n. */
static size_t first_nonfinite(const float *v, size_t n)
{
    /* One branch-free pass first, in integer arithmetic the compiler vectorises:
     * adding 1 to an exponent field of all ones (NaN, Inf) carries into bit 31. */
    uint32_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], sizeof u);
        acc |= (u & 0x7f800000u) + 0x00800000u;
    }
    if (!(acc & 0x80000000u))
        return n;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return i;
    return n;
}

/* Copies v into dst and returns the first non-finite value's position, or n:
 * the first pass of first_nonfinite with the copy fused into it. */
static size_t copy_first_nonfinite(float *restrict dst, const float *restrict v, size_t n)
{
    uint32_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], sizeof u);
        acc |= (u & 0x7f800000u) + 0x00800000u;
        memcpy(&dst[i], &u, sizeof u);
    }
    return acc & 0x80000000u ? first_nonfinite(v, n) : n;
}

/* What payload m carries, for a sentence: "no frames", "1 frame (INDICES)",
 * "2 frames (DENSE, VALUES)". Returns buf. */
static const char *frames_of(const dcps_msg_t *m, char *buf, size_t len)
{
    static const char *const kinds[] = {[DCPS_FRAME_DENSE] = "DENSE",
                                        [DCPS_FRAME_INDICES] = "INDICES",
                                        [DCPS_FRAME_VALUES] = "VALUES",
                                        [DCPS_FRAME_GROUP_RANGES] = "GROUP_RANGES",
                                        [DCPS_FRAME_GROUP_OPTIONS] = "GROUP_OPTIONS",
                                        [DCPS_FRAME_BUFFER_FLOATS] = "BUFFER_FLOATS",
                                        [DCPS_FRAME_BUFFER_INTS] = "BUFFER_INTS",
                                        [DCPS_FRAME_RANKS] = "RANKS"};
    if (m->nframes <= 0) {
        snprintf(buf, len, "no frames");
        return buf;
    }
    int at = snprintf(buf, len, "%d frame%s (", m->nframes, m->nframes == 1 ? "" : "s");
    for (int i = 0; i < m->nframes && at >= 0 && (size_t)at < len; i++) {
        uint32_t k = m->frame[i].kind;
        at += snprintf(buf + at, len - (size_t)at, "%s%s", i ? ", " : "",
                       k >= DCPS_FRAME_DENSE && k <= DCPS_FRAME_KIND_LAST ? kinds[k] : "unknown");
    }
    if (at >= 0 && (size_t)at < len)
        snprintf(buf + at, len - (size_t)at, ")");
    return buf;
}

/* dcps_codec_dense's checks of the frame, and the check of its values with
 * them copied into dst if dst is not NULL. */
static int dense(const dcps_msg_t *m, uint64_t count, const float **values, float *dst,
                 bool check, char *why, size_t whylen)
{
    char got[64];
    int rc = 0;
    if (m->nframes != 1 || m->frame[0].kind != DCPS_FRAME_DENSE)
        FAIL(DCPS_E_FRAMECOUNT, "%s needs one DENSE frame, got %s", dcps_msg_type_name(m->type),
             frames_of(m, got, sizeof got));
    if (m->frame[0].dtype != DCPS_DTYPE_F32 && !(m->decode_to && dcps_quant_is(m->frame[0].dtype)))
        FAIL(DCPS_E_FRAMELEN, "a dense frame must hold float32 values");
    if (m->frame[0].count != count)
        FAIL(DCPS_E_SIZE, "dense frame of %llu elements, the shard's range has %llu",
             (unsigned long long)m->frame[0].count, (unsigned long long)count);
    if (m->frame[0].dtype != DCPS_DTYPE_F32) {
        float *to = dst ? dst : m->decode_to;
        if ((rc = dcps_quant_decode(m->frame[0].dtype, m->block[0], m->payload[0].data,
                                    count, to, why, whylen)) == 0)
            *values = to;
        return rc;
    }
    const float *v = m->payload[0].data;
    size_t bad = dst ? copy_first_nonfinite(dst, v, count) : check ? first_nonfinite(v, count) : count;
    if (bad < count)
        FAIL(DCPS_E_NONFINITE, "value %g at offset %zu is not finite", (double)v[bad], bad);
    *values = v;
out:
    return rc;
}

int dcps_codec_dense(const dcps_msg_t *m, uint64_t count, const float **values, char *why,
                     size_t whylen)
{
    return dense(m, count, values, NULL, true, why, whylen);
}

int dcps_codec_dense_to(const dcps_msg_t *m, uint64_t count, float *dst, char *why,
                        size_t whylen)
{
    const float *v;
    return dense(m, count, &v, dst, true, why, whylen);
}

int dcps_codec_sparse(const dcps_msg_t *m, uint64_t lo, uint64_t hi, const uint32_t **idx,
                      const float **values, size_t *k, char *why, size_t whylen)
{
    char got[64];
    int rc = 0;
    if (m->nframes != 2 || m->frame[0].kind != DCPS_FRAME_INDICES ||
        m->frame[1].kind != DCPS_FRAME_VALUES)
        FAIL(DCPS_E_FRAMECOUNT, "a sparse %s needs an INDICES frame then a VALUES frame, got %s",
             dcps_msg_type_name(m->type), frames_of(m, got, sizeof got));
    bool quant = m->decode_to && dcps_quant_is(m->frame[1].dtype);
    if (m->frame[0].dtype != DCPS_DTYPE_U32 || (m->frame[1].dtype != DCPS_DTYPE_F32 && !quant))
        FAIL(DCPS_E_FRAMELEN, "sparse frames must be uint32 indices and float32 values");
    uint64_t n = m->frame[0].count;
    if (m->frame[1].count != n)
        FAIL(DCPS_E_FRAMELEN, "%llu indices but %llu values", (unsigned long long)n,
             (unsigned long long)m->frame[1].count);
    if (n > hi - lo)
        FAIL(DCPS_E_SIZE, "%llu entries, more than the shard's %llu parameters",
             (unsigned long long)n, (unsigned long long)(hi - lo));
    const uint32_t *ix = m->payload[0].data;
    const float *v = m->payload[1].data;
    for (uint64_t j = 0; j < n; j++) {
        if (ix[j] < lo || ix[j] >= hi)
            FAIL(DCPS_E_RANGE, "index %u at position %llu is outside the shard's range [%llu, %llu)",
                 ix[j], (unsigned long long)j, (unsigned long long)lo, (unsigned long long)hi);
        if (j > 0 && ix[j] <= ix[j - 1])
            FAIL(DCPS_E_ORDER, "index %u at position %llu follows %u", ix[j],
                 (unsigned long long)j, ix[j - 1]);
    }
    if (quant) {
        if ((rc = dcps_quant_decode(m->frame[1].dtype, m->block[1], m->payload[1].data,
                                    (size_t)n, m->decode_to, why, whylen)) != 0)
            goto out;
        v = m->decode_to;
    }
    size_t bad = quant ? n : first_nonfinite(v, n);
    if (bad < n)
        FAIL(DCPS_E_NONFINITE, "value %g for index %u is not finite", (double)v[bad], ix[bad]);
    *idx = ix;
    *values = v;
    *k = n;
out:
    return rc;
}

int dcps_codec_groups(const dcps_msg_t *m, int first, const uint32_t **ranges, size_t *n_ranges,
                      const double **opts, size_t *n_groups, char *why, size_t whylen)
{
    char got[96];
    int rc = 0;
    *n_ranges = *n_groups = 0;
    if (m->nframes == first)
        return 0;
    const dcps_frame_desc_t *f = &m->frame[first];
    if (m->nframes != first + 2 || f[0].kind != DCPS_FRAME_GROUP_RANGES ||
        f[1].kind != DCPS_FRAME_GROUP_OPTIONS)
        FAIL(DCPS_E_FRAMECOUNT,
             "%s carries %s: a group table is a GROUP_RANGES frame then a GROUP_OPTIONS frame%s",
             dcps_msg_type_name(m->type), frames_of(m, got, sizeof got),
             first ? ", after the DENSE frame" : "");
    if (f[0].dtype != DCPS_DTYPE_U32 || f[1].dtype != DCPS_DTYPE_F64 || f[0].count % 2 ||
        f[1].count % 2)
        FAIL(DCPS_E_FRAMELEN, "a group table's frames are uint32 (end, group) pairs and float64 "
                              "(lr_factor, weight_decay) pairs");
    *ranges = m->payload[first].data;
    *n_ranges = (size_t)(f[0].count / 2);
    *opts = m->payload[first + 1].data;
    *n_groups = (size_t)(f[1].count / 2);
out:
    return rc;
}

int dcps_codec_buffers(const dcps_msg_t *m, const void **floats, size_t *n_floats,
                       const void **ints, size_t *n_ints, bool *publish, char *why,
                       size_t whylen)
{
    char got[96];
    int rc = 0;
    *floats = *ints = NULL;
    *n_floats = *n_ints = 0;
    *publish = false;
    if (m->nframes == 0)
        return 0;
    if (m->nframes != 2 || m->frame[0].kind != DCPS_FRAME_BUFFER_FLOATS ||
        m->frame[1].kind != DCPS_FRAME_BUFFER_INTS)
        FAIL(DCPS_E_FRAMECOUNT,
             "BUFFERS carries no frames (it asks) or a BUFFER_FLOATS frame then a BUFFER_INTS "
             "frame (it publishes); got %s",
             frames_of(m, got, sizeof got));
    if (m->frame[0].dtype != DCPS_DTYPE_F32 || m->frame[1].dtype != DCPS_DTYPE_F64)
        FAIL(DCPS_E_FRAMELEN, "a BUFFER_FLOATS frame holds float32 values and a BUFFER_INTS "
                              "frame float64 values");
    *floats = m->payload[0].data;
    *n_floats = (size_t)m->frame[0].count;
    *ints = m->payload[1].data;
    *n_ints = (size_t)m->frame[1].count;
    *publish = true;
out:
    return rc;
}

static int push(const dcps_msg_t *m, uint64_t lo, uint64_t hi, const uint32_t **idx,
                const float **values, size_t *k, bool check_dense, char *why, size_t whylen)
{
    char got[64];
    if (m->nframes == 1 && m->frame[0].kind == DCPS_FRAME_DENSE) {
        *idx = NULL;
        *k = (size_t)(hi - lo);
        return dense(m, hi - lo, values, NULL, check_dense, why, whylen);
    }
    if (m->nframes == 2 && m->frame[0].kind == DCPS_FRAME_INDICES &&
        m->frame[1].kind == DCPS_FRAME_VALUES)
        return dcps_codec_sparse(m, lo, hi, idx, values, k, why, whylen);
    snprintf(why, whylen,
             "%s needs one DENSE frame, or an INDICES frame then a VALUES frame; got %s",
             dcps_msg_type_name(m->type), frames_of(m, got, sizeof got));
    return DCPS_E_FRAMECOUNT;
}

int dcps_codec_push(const dcps_msg_t *m, uint64_t lo, uint64_t hi, const uint32_t **idx,
                    const float **values, size_t *k, char *why, size_t whylen)
{
    return push(m, lo, hi, idx, values, k, true, why, whylen);
}

int dcps_codec_push_unchecked(const dcps_msg_t *m, uint64_t lo, uint64_t hi,
                              const uint32_t **idx, const float **values, size_t *k, char *why,
                              size_t whylen)
{
    return push(m, lo, hi, idx, values, k, false, why, whylen);
}

/* --- the header fields of requests ---------------------------------------------------------
 *
 * Every header field of every request is checked or documented as ignored here:
 * this table is the protocol's (docs/protocol.md, section 6).
 *
 *   field          HELLO  PUSH   PULL   BARRIER HEARTBEAT BYE   INIT   DONE   (BUFFERS)
 *   protocol       =2     =2     =2     =2      =2        =2    =2     =2     PROTOVER
 *   type, job_id   req    req    req    req     req       req   req    req    MSGTYPE, JOBID
 *   rank           <P     <P     <P     <P      <P        <P    0      <P     RANK (INIT: STATE)
 *   seq            echo   dup    echo   echo    echo      echo  echo   echo   not checked
 *   session        sess   sess   sess   sess    sess      sess  sess   sess   the session rules
 *   shard          SIZE   =      =      =       =         =     =      =
 *   n_params       SIZE   =      =      =       =         =     =      =
 *   range_lo, _hi  =      =      =      =       =         =     =      =
 *   param_version  0      VER    held   0       0         0     0      0
 *   step           0      used   used   used    0         0     0      0
 *   flags          0      0      D|E    0       0         0     0      0
 *   want           0      0      D      0       0         0     0      0
 *   BUFFERS: as DONE, but flags A|L (AVERAGE 32 or LOCAL 64, not both: FIELD) and
 *   frames buf (none, or BUFFER_FLOATS then BUFFER_INTS: dcps_codec_buffers).
 *   initialized, workers, error_code, error_text, lr, checkpoint, generation: 0 in every
 *   request
 *   frames         groups push   none   none    none      none  dense  none   FRAMECOUNT
 *
 *   =2, req, <P  required: the protocol version 2; present; a rank below the job's
 *                workers. Checked by dcps_codec_unpack and the router.
 *   echo, dup    any value, copied into the reply; PUSH: (rank, seq) finds duplicates.
 *   =            optional; when present (also as 0) it must be the shard's own value
 *                (index; n_params and range once the shard knows its size: until
 *                then, with [model] params = auto, ignored): FIELD.
 *   SIZE         HELLO checks shard and n_params itself (required; wrong: SIZE): a
 *                worker whose job file differs from the shard's.
 *   0            no meaning for the type: absent or 0 (or false, or empty), else FIELD.
 *   VER          the version the gradient was computed on: ahead of the shard's is
 *                VERSION (unless the shard was restored and the worker is behind).
 *   held         with DELTA the version the worker holds; without DELTA ignored (the
 *                client sends its last version anyway).
 *   used         the step (PUSH, PULL) or the barrier (BARRIER); any value.
 *   D|E          DELTA (8) or EXACT (16), not both; any other bit: FIELD.
 *   D            only with DELTA: the most entries of the delta (0: the job's
 *                density; above the shard's most, k_max: clamped).
 *   push, dense  one DENSE frame of the range, or INDICES then VALUES (PUSH); one
 *                DENSE frame (INIT): FRAMECOUNT, FRAMELEN, SIZE, RANGE, ORDER,
 *                NONFINITE (dcps_codec_push, dcps_codec_dense); INIT may add a
 *                group table (dcps_codec_groups).
 *   groups       none, or a group table (dcps_codec_groups): FRAMECOUNT, FRAMELEN.
 *   none         no payload frame: FRAMECOUNT.
 * Fields this version does not know are ignored, within DCPS_HEADER_MAX. */

/* What a request type carries; a type without `request` is not one. */
static const struct {
    bool request;
    uint32_t flags;     /* the flag bits it defines */
    bool step, version; /* step and param_version mean something */
    bool frames;        /* it carries a payload (its shape: the handler's check) */
} requests[DCPS_MSG_TYPE_END] = {
    [DCPS_MSG_HELLO] = {true, 0, false, false, true},
    [DCPS_MSG_PUSH] = {true, 0, true, true, true},
    [DCPS_MSG_PULL] = {true, DCPS_FLAG_DELTA | DCPS_FLAG_EXACT, true, true, false},
    [DCPS_MSG_BARRIER] = {true, 0, true, false, false},
    [DCPS_MSG_HEARTBEAT] = {true, 0, false, false, false},
    [DCPS_MSG_BYE] = {true, 0, false, false, false},
    [DCPS_MSG_INIT] = {true, 0, false, false, true},
    [DCPS_MSG_DONE] = {true, 0, false, false, false},
    [DCPS_MSG_BUFFERS] = {true, DCPS_FLAG_AVERAGE | DCPS_FLAG_LOCAL, false, false, true},
};

/* The part fields of a request (docs/protocol.md, 17): a PUSH's part i of n
 * covers [part_lo, part_hi) inside the shard's range (not known yet on an
 * unsized shard: the push is NOTREADY later); a PULL asks for its reply in
 * `parts` parts and has no other part field; no other request has parts. */
static int check_part(const dcps_msg_t *m, const dcps_field_ctx_t *ctx, const char *t, char *why,
                      size_t whylen)
{
    int rc = 0;
    if (m->type != DCPS_MSG_PUSH && m->type != DCPS_MSG_PULL)
        FAIL(DCPS_E_FIELD, "%s carries part fields: only PUSH, PULL and PULL_REPLY have parts", t);
    if (m->parts == 0 || m->parts > DCPS_PARTS_MAX)
        FAIL(DCPS_E_FIELD, "%s in %u parts: a push or reply has 1 to %d parts", t, m->parts,
             DCPS_PARTS_MAX);
    if (m->type == DCPS_MSG_PULL) {
        if (m->part || m->part_lo || m->part_hi)
            FAIL(DCPS_E_FIELD, "PULL with part %u [%llu, %llu): a PULL only asks for its reply "
                               "in `parts` parts",
                 m->part, (unsigned long long)m->part_lo, (unsigned long long)m->part_hi);
        return 0;
    }
    if (m->part >= m->parts)
        FAIL(DCPS_E_FIELD, "PUSH part %u of %u: parts are numbered 0 to %u", m->part, m->parts,
             m->parts - 1);
    if (ctx->n_params && (m->part_lo >= m->part_hi || m->part_lo < ctx->lo || m->part_hi > ctx->hi))
        FAIL(DCPS_E_FIELD, "PUSH part %u covers [%llu, %llu), not a nonempty range inside the "
                           "shard's [%llu, %llu)",
             m->part, (unsigned long long)m->part_lo, (unsigned long long)m->part_hi,
             (unsigned long long)ctx->lo, (unsigned long long)ctx->hi);
out:
    return rc;
}

int dcps_codec_check_fields(const dcps_msg_t *m, const dcps_field_ctx_t *ctx, char *why,
                            size_t whylen)
{
    char got[64];
    int rc = 0;
    if (m->type >= DCPS_MSG_TYPE_END || !requests[m->type].request)
        return 0;
    const char *t = dcps_msg_type_name(m->type);
    const bool hello = m->type == DCPS_MSG_HELLO;
    const uint32_t flags = requests[m->type].flags;
    if (!requests[m->type].frames && m->nframes > 0)
        FAIL(DCPS_E_FRAMECOUNT, "%s carries no payload, got %s", t, frames_of(m, got, sizeof got));
    if (!hello && (m->has & DCPS_HAS_SHARD) && m->shard != ctx->shard)
        FAIL(DCPS_E_FIELD, "%s names shard %u, this is shard %u", t, m->shard, ctx->shard);
    if (ctx->n_params) {
        if (!hello && (m->has & DCPS_HAS_N_PARAMS) && m->n_params != ctx->n_params)
            FAIL(DCPS_E_FIELD, "%s says n_params %llu, this shard's model has %llu", t,
                 (unsigned long long)m->n_params, (unsigned long long)ctx->n_params);
        if (((m->has & DCPS_HAS_RANGE_LO) && m->range_lo != ctx->lo) ||
            ((m->has & DCPS_HAS_RANGE_HI) && m->range_hi != ctx->hi))
            FAIL(DCPS_E_FIELD, "%s names the range [%llu, %llu), this shard serves [%llu, %llu)",
                 t, (unsigned long long)m->range_lo, (unsigned long long)m->range_hi,
                 (unsigned long long)ctx->lo, (unsigned long long)ctx->hi);
    }
    if (m->initialized || m->workers)
        FAIL(DCPS_E_FIELD, "%s carries %s, a field of WELCOME only", t,
             m->initialized ? "initialized" : "workers");
    if (m->error_code || m->error_text[0])
        FAIL(DCPS_E_FIELD, "%s carries %s, a field of ERROR only", t,
             m->error_code ? "error_code" : "error_text");
    if (m->lr != 0) /* NaN too */
        FAIL(DCPS_E_FIELD, "%s carries lr %g, a field of PULL_REPLY only", t, m->lr);
    if (m->checkpoint || m->generation)
        FAIL(DCPS_E_FIELD, "%s carries %s %llu, a field of ROUND only", t,
             m->checkpoint ? "checkpoint" : "generation",
             (unsigned long long)(m->checkpoint ? m->checkpoint : m->generation));
    if (m->flags & ~flags)
        FAIL(DCPS_E_FIELD, "%s with flags %u: %s", t, m->flags,
             m->type == DCPS_MSG_PULL      ? "a PULL has only DELTA (8) and EXACT (16)"
             : m->type == DCPS_MSG_BUFFERS ? "BUFFERS has only AVERAGE (32) and LOCAL (64)"
                                           : "it has no flags");
    if ((m->flags & DCPS_FLAG_DELTA) && (m->flags & DCPS_FLAG_EXACT))
        FAIL(DCPS_E_FIELD, "PULL with both DELTA (a delta, please) and EXACT (the parameters "
                           "themselves, please)");
    if ((m->flags & DCPS_FLAG_AVERAGE) && (m->flags & DCPS_FLAG_LOCAL))
        FAIL(DCPS_E_FIELD, "BUFFERS with both AVERAGE (the ranks' mean) and LOCAL (every rank "
                           "its own)");
    if (m->want && !(m->flags & DCPS_FLAG_DELTA))
        FAIL(DCPS_E_FIELD, "%s with want %llu: only a PULL with DELTA asks for a delta's size", t,
             (unsigned long long)m->want);
    if (m->step && !requests[m->type].step)
        FAIL(DCPS_E_FIELD, "%s with step %llu: only PUSH, PULL and BARRIER have a step", t,
             (unsigned long long)m->step);
    if (m->param_version && !requests[m->type].version)
        FAIL(DCPS_E_FIELD, "%s with param_version %llu: only PUSH and PULL name a version", t,
             (unsigned long long)m->param_version);
    if (m->has & DCPS_HAS_PART)
        rc = check_part(m, ctx, t, why, whylen);
out:
    return rc;
}

void dcps_msg_reply(dcps_msg_t *reply, const dcps_msg_t *req, uint32_t type)
{
    memset(reply, 0, sizeof *reply);
    reply->type = type;
    reply->job_id = req->job_id;
    reply->rank = req->rank;
    reply->seq = req->seq;
    reply->session = req->session;
    reply->shard = req->shard;
}
