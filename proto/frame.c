/* dcps — ZeroMQ framing; see frame.h. */
#include "proto/frame.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"

/* ZeroMQ receives small messages into one shared buffer, so their data may
 * start at any address; payloads are read as uint32 and float arrays. Moves
 * the data of part p to its own allocation (aligned as malloc aligns) if it is
 * not 8-byte aligned. Returns 0 or -1 (out of memory, errno set). */
static int align_part(zmq_msg_t *p)
{
    size_t len = zmq_msg_size(p);
    if (len == 0 || (uintptr_t)zmq_msg_data(p) % 8 == 0)
        return 0;
    zmq_msg_t copy;
    if (zmq_msg_init_size(&copy, len) != 0)
        return -1;
    memcpy(zmq_msg_data(&copy), zmq_msg_data(p), len);
    return zmq_msg_move(p, &copy); /* releases p's old data */
}

int dcps_frames_recv(void *sock, dcps_frames_t *f, int flags)
{
    bool nomem = false;
    f->n = 0;
    f->extra = 0;
    zmq_msg_init(&f->meta);
    f->peer[0] = '\0';
    for (;;) {
        zmq_msg_t scratch;
        zmq_msg_t *p = f->n < DCPS_MAX_PARTS ? &f->part[f->n] : &scratch;
        zmq_msg_init(p);
        if (zmq_msg_recv(p, sock, f->n == 0 && f->extra == 0 ? flags : 0) < 0) {
            int e = errno;
            zmq_msg_close(p);
            dcps_frames_close(f);
            if (e == EAGAIN)
                return 0;
            errno = e;
            return DCPS_E_ZMQ;
        }
        int more = zmq_msg_more(p);
        if (!more) /* before align_part: a copy has no metadata */
            zmq_msg_copy(&f->meta, p);
        if (!f->peer[0]) {
            const char *a = zmq_msg_gets(p, "Peer-Address");
            if (a)
                snprintf(f->peer, sizeof f->peer, "%s", a);
        }
        if (p != &scratch && align_part(p) != 0)
            nomem = true; /* the rest is still received: never leave a socket mid-message */
        if (p == &scratch) {
            zmq_msg_close(p);
            f->extra++;
        } else {
            f->n++;
        }
        if (!more && nomem) {
            dcps_frames_close(f);
            errno = ENOMEM;
            return DCPS_E_ZMQ;
        }
        if (!more)
            return f->n;
    }
}

void dcps_frames_close(dcps_frames_t *f)
{
    zmq_msg_close(&f->meta);
    zmq_msg_init(&f->meta); /* empty: closing f again is harmless */
    for (int i = 0; i < f->n; i++)
        zmq_msg_close(&f->part[i]);
    f->n = 0;
}

const char *dcps_frames_gets(const dcps_frames_t *f, const char *property)
{
    return zmq_msg_gets(&f->meta, property);
}

int dcps_frames_decode(const dcps_frames_t *f, int first, uint64_t expect_job, dcps_msg_t *m,
                       char *why, size_t whylen)
{
    dcps_buf_t pay[DCPS_MAX_PARTS];
    if (f->n <= first) {
        memset(m, 0, sizeof *m);
        snprintf(why, whylen, "message has no header frame");
        return DCPS_E_HEADER;
    }
    size_t np = (size_t)(f->n - first - 1) + f->extra;
    for (int i = first + 1; i < f->n; i++) {
        zmq_msg_t *p = (zmq_msg_t *)&f->part[i];
        pay[i - first - 1] = (dcps_buf_t){zmq_msg_data(p), zmq_msg_size(p)};
    }
    zmq_msg_t *h = (zmq_msg_t *)&f->part[first];
    /* np may exceed DCPS_MAX_FRAMES (parts beyond the array were dropped): the
     * codec refuses such a count before it reads any frame, and says it. */
    return dcps_codec_unpack(zmq_msg_data(h), zmq_msg_size(h), pay, np, expect_job, m, why,
                             whylen);
}

static int send_part(void *sock, const void *data, size_t len, zmq_free_fn *ffn, void *hint,
                     int flags)
{
    zmq_msg_t msg;
    if (ffn) {
        if (zmq_msg_init_data(&msg, (void *)data, len, ffn, hint) != 0) {
            int e = errno;
            ffn((void *)data, hint); /* ZeroMQ never took it */
            errno = e;
            return DCPS_E_ZMQ;
        }
    } else {
        if (zmq_msg_init_size(&msg, len) != 0)
            return DCPS_E_ZMQ;
        if (len)
            memcpy(zmq_msg_data(&msg), data, len);
    }
    if (zmq_msg_send(&msg, sock, flags) < 0) {
        int e = errno;
        zmq_msg_close(&msg);
        errno = e;
        return DCPS_E_ZMQ;
    }
    return 0;
}

int dcps_frames_send(void *sock, const dcps_buf_t *id, const dcps_msg_t *m, zmq_free_fn *ffn,
                     void *hint, int flags)
{
    uint8_t hdr[DCPS_HEADER_MAX];
    int len = dcps_codec_pack(m, hdr, sizeof hdr);
    int rc;

    if (len < 0)
        return len;
    if (id && (rc = send_part(sock, id->data, id->len, NULL, NULL, flags | ZMQ_SNDMORE)) != 0)
        return rc;
    rc = send_part(sock, hdr, (size_t)len, NULL, NULL, flags | (m->nframes ? ZMQ_SNDMORE : 0));
    size_t bytes = (size_t)len;
    for (int i = 0; i < m->nframes; i++) {
        if (rc == 0)
            rc = send_part(sock, m->payload[i].data, m->payload[i].len, ffn, hint,
                           flags | (i + 1 < m->nframes ? ZMQ_SNDMORE : 0));
        else if (ffn) /* not handed to ZeroMQ after a failure: released here */
            ffn((void *)m->payload[i].data, hint);
        bytes += m->payload[i].len;
    }
    return rc == 0 ? (bytes > INT_MAX ? INT_MAX : (int)bytes) : rc;
}
