/* dcps — ZeroMQ framing: one dcps message as one multipart message.
 *
 * Layout: [routing id (ROUTER side only)] [header] [payload 0] ... Sending packs
 * the header (proto/codec.h) and sends payload frames either copied or zero-copy
 * with the caller's free callback. Receiving takes the whole multipart message,
 * also when it has more parts than any dcps message may have (the surplus is
 * received and counted, so the socket is never left mid-message); every part's
 * data it hands over is 8-byte aligned (copied where ZeroMQ's is not). A copy
 * has none of ZeroMQ's metadata, so the message's last part is also kept as it
 * came, for dcps_frames_gets. */
#ifndef DCPS_FRAME_H
#define DCPS_FRAME_H

#include <zmq.h>

#include "proto/codec.h"

#define DCPS_MAX_PARTS (2 + DCPS_MAX_FRAMES)

/* Room for ZeroMQ's Peer-Address: an IPv6 address in text, and more. */
#define DCPS_PEER_MAX 64

typedef struct {
    zmq_msg_t part[DCPS_MAX_PARTS];
    int n;        /* parts held in part[] */
    size_t extra; /* parts received beyond DCPS_MAX_PARTS and dropped */
    zmq_msg_t meta; /* the last part as received, for its metadata */
    /* The sender's address: the Peer-Address of the first part that carries one
     * (a ROUTER's routing id does not; tcp parts do, ipc and inproc ones do not),
     * taken before a part is copied for alignment, which loses it. "" if none. */
    char peer[DCPS_PEER_MAX];
} dcps_frames_t;

/* Receives one multipart message with zmq flags (ZMQ_DONTWAIT or 0). Returns the
 * number of parts (≥ 1), 0 if none was ready (EAGAIN), or DCPS_E_ZMQ. On a
 * positive return the caller owns f and calls dcps_frames_close. */
int dcps_frames_recv(void *sock, dcps_frames_t *f, int flags);

void dcps_frames_close(dcps_frames_t *f);

/* A metadata property of the received message, as zmq_msg_gets gives it
 * ("User-Id", "Peer-Address"), or NULL. Valid until dcps_frames_close. */
const char *dcps_frames_gets(const dcps_frames_t *f, const char *property);

/* Decodes the message whose header is part[first] (first is 1 on a ROUTER, 0 on a
 * DEALER); see dcps_codec_unpack. m->payload borrows f's parts. */
int dcps_frames_decode(const dcps_frames_t *f, int first, uint64_t expect_job, dcps_msg_t *m,
                       char *why, size_t whylen);

/* Sends m: the routing id if id is non-NULL, the packed header, then
 * m->payload[0 .. m->nframes). With ffn NULL the payload is copied; otherwise each
 * payload frame is sent zero-copy and ffn(data, hint) runs once per frame when
 * ZeroMQ no longer needs it (from ZeroMQ's I/O thread), or on this thread for a
 * frame not sent (a failure, here or before it). Never blocks when flags
 * has ZMQ_DONTWAIT. Returns the bytes sent (header and payload; at most INT_MAX)
 * or DCPS_E_ZMQ (errno set by ZeroMQ). */
int dcps_frames_send(void *sock, const dcps_buf_t *id, const dcps_msg_t *m, zmq_free_fn *ffn,
                     void *hint, int flags);

#endif
