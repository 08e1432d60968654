/* dcps — the wire codec; see codec.h. */
#include "proto/codec.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "dcps.pb-c.h"

static const char *const type_names[DCPS_MSG_TYPE_END] = {
    [DCPS_MSG_HELLO] = "HELLO",         [DCPS_MSG_WELCOME] = "WELCOME",
    [DCPS_MSG_PUSH] = "PUSH",           [DCPS_MSG_PUSH_ACK] = "PUSH_ACK",
    [DCPS_MSG_PULL] = "PULL",           [DCPS_MSG_PULL_REPLY] = "PULL_REPLY",
    [DCPS_MSG_BARRIER] = "BARRIER",     [DCPS_MSG_HEARTBEAT] = "HEARTBEAT",
    [DCPS_MSG_BYE] = "BYE",             [DCPS_MSG_ERROR] = "ERROR",
    [DCPS_MSG_INIT] = "INIT",           [DCPS_MSG_DONE] = "DONE",
};

const char *dcps_msg_type_name(uint32_t type)
{
    return type > 0 && type < DCPS_MSG_TYPE_END ? type_names[type] : "unknown";
}

static size_t dtype_size(uint32_t dtype)
{
    return dtype == DCPS_DTYPE_F32 || dtype == DCPS_DTYPE_U32 ? 4 : 0;
}

int dcps_codec_pack(const dcps_msg_t *m, uint8_t *buf, size_t cap)
{
    Dcps__Header h = DCPS__HEADER__INIT;
    Dcps__FrameDesc fd[DCPS_MAX_FRAMES];
    Dcps__FrameDesc *fdp[DCPS_MAX_FRAMES];

    if (m->nframes < 0 || m->nframes > DCPS_MAX_FRAMES)
        return DCPS_E_INVAL;
#define SET(field, value) (h.has_##field = 1, h.field = (value))
    SET(protocol, DCPS_PROTOCOL);
    SET(type, m->type);
    SET(job_id, m->job_id);
    SET(rank, m->rank);
    SET(seq, m->seq);
    SET(shard, m->shard);
    SET(param_version, m->param_version);
    if (m->n_params)
        SET(n_params, m->n_params);
    if (m->range_lo || m->range_hi) {
        SET(range_lo, m->range_lo);
        SET(range_hi, m->range_hi);
    }
    if (m->initialized)
        SET(initialized, 1);
    if (m->error_code) {
        SET(error_code, m->error_code);
        h.error_text = (char *)m->error_text;
    }
    if (m->flags)
        SET(flags, m->flags);
    if (m->workers)
        SET(workers, m->workers);
    if (m->step)
        SET(step, m->step);
    if (m->want)
        SET(want, m->want);
    if (m->session)
        SET(session, m->session);
#undef SET
    for (int i = 0; i < m->nframes; i++) {
        dcps__frame_desc__init(&fd[i]);
        fd[i].has_kind = fd[i].has_dtype = fd[i].has_count = fd[i].has_bytes = 1;
        fd[i].kind = m->frame[i].kind;
        fd[i].dtype = m->frame[i].dtype;
        fd[i].count = m->frame[i].count;
        fd[i].bytes = m->frame[i].count * dtype_size(m->frame[i].dtype);
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

int dcps_codec_unpack(const void *hdr, size_t hdr_len, const dcps_buf_t *frames, size_t nframes,
                      uint64_t expect_job, dcps_msg_t *out, char *why, size_t whylen)
{
    Dcps__Header *h;
    int rc = 0;

    memset(out, 0, sizeof *out);
    if (hdr_len == 0 || hdr_len > DCPS_HEADER_MAX) {
        snprintf(why, whylen, "header of %zu bytes (expected 1 to %d)", hdr_len, DCPS_HEADER_MAX);
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
    for (size_t i = 0; i < nframes; i++) {
        const Dcps__FrameDesc *d = h->frames[i];
        size_t sz = dtype_size(d->dtype);
        if (d->kind < DCPS_FRAME_DENSE || d->kind > DCPS_FRAME_VALUES || sz == 0)
            FAIL(DCPS_E_FRAMELEN, "frame %zu has unknown kind %u or dtype %u", i, d->kind,
                 d->dtype);
        if (d->count > SIZE_MAX / sz || d->bytes != d->count * sz || d->bytes != frames[i].len)
            FAIL(DCPS_E_FRAMELEN,
                 "frame %zu: header says %llu elements in %llu bytes, frame has %zu bytes", i,
                 (unsigned long long)d->count, (unsigned long long)d->bytes, frames[i].len);
        out->frame[i].kind = d->kind;
        out->frame[i].dtype = d->dtype;
        out->frame[i].count = d->count;
        out->payload[i] = frames[i];
    }
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

int dcps_codec_dense(const dcps_msg_t *m, uint64_t count, const float **values, char *why,
                     size_t whylen)
{
    int rc = 0;
    if (m->nframes != 1 || m->frame[0].kind != DCPS_FRAME_DENSE)
        FAIL(DCPS_E_FRAMECOUNT, "%s needs one dense frame, got %d frames",
             dcps_msg_type_name(m->type), m->nframes);
    if (m->frame[0].dtype != DCPS_DTYPE_F32)
        FAIL(DCPS_E_FRAMELEN, "a dense frame must hold float32 values");
    if (m->frame[0].count != count)
        FAIL(DCPS_E_SIZE, "dense frame of %llu elements, the shard's range has %llu",
             (unsigned long long)m->frame[0].count, (unsigned long long)count);
    const float *v = m->payload[0].data;
    size_t bad = first_nonfinite(v, count);
    if (bad < count)
        FAIL(DCPS_E_NONFINITE, "value %g at offset %zu is not finite", (double)v[bad], bad);
    *values = v;
out:
    return rc;
}

int dcps_codec_sparse(const dcps_msg_t *m, uint64_t lo, uint64_t hi, const uint32_t **idx,
                      const float **values, size_t *k, char *why, size_t whylen)
{
    int rc = 0;
    if (m->nframes != 2 || m->frame[0].kind != DCPS_FRAME_INDICES ||
        m->frame[1].kind != DCPS_FRAME_VALUES)
        FAIL(DCPS_E_FRAMECOUNT, "a sparse %s needs an indices frame then a values frame",
             dcps_msg_type_name(m->type));
    if (m->frame[0].dtype != DCPS_DTYPE_U32 || m->frame[1].dtype != DCPS_DTYPE_F32)
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
    size_t bad = first_nonfinite(v, n);
    if (bad < n)
        FAIL(DCPS_E_NONFINITE, "value %g for index %u is not finite", (double)v[bad], ix[bad]);
    *idx = ix;
    *values = v;
    *k = n;
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
