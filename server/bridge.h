/* dcps — a ZeroMQ socket on a libuv loop.
 *
 * The bridge watches the socket's ZMQ_FD with a uv_poll_t and calls on_message
 * once per message that can be received. ZMQ_FD is edge-triggered and only says
 * "something changed": after every wake-up the bridge receives while ZMQ_EVENTS
 * reports ZMQ_POLLIN. A send can also consume the edge, so code that sends from
 * outside on_message (a timer, a signal) calls dcps_bridge_drain afterwards.
 * To keep timers running under a flood, one wake-up handles at most `budget`
 * messages, and stops after the message that takes it past `budget_ms` of wall
 * time; the rest are handled from a uv_idle_t on the next loop iteration, after
 * the timers that fell due. The count alone bounds nothing in time: a shard's
 * messages cost microseconds (an ack) to tens of milliseconds (a dense push of
 * 12M parameters, a delta pull's pass over the range), and 256 of the latter
 * kept a shard's heartbeat tick from running for seconds.
 *
 * The bridge does not own the socket. Its handles are embedded, so the struct
 * must stay in place until close_cb of dcps_bridge_close has run. */
#ifndef DCPS_BRIDGE_H
#define DCPS_BRIDGE_H

#include <uv.h>

typedef struct dcps_bridge dcps_bridge_t;

/* Called when a message is ready: receive it (ZMQ_DONTWAIT) from b->sock. */
typedef void (*dcps_bridge_cb)(dcps_bridge_t *b);

struct dcps_bridge {
    uv_poll_t poll;
    uv_idle_t idle;
    void *sock;
    dcps_bridge_cb on_message;
    void *data; /* the caller's */
    unsigned budget;  /* messages per wake-up */
    double budget_ms; /* wall time per wake-up, checked after each message */
    int closing;
    uv_close_cb close_cb;
    int pending_closes;
};

/* Starts watching sock. Returns 0, or a negative libuv/dcps code. */
int dcps_bridge_init(uv_loop_t *loop, dcps_bridge_t *b, void *sock, dcps_bridge_cb on_message,
                     void *data);

/* Handles every message ready now (up to the budgets); call after sending from
 * outside on_message. */
void dcps_bridge_drain(dcps_bridge_t *b);

/* Stops watching; close_cb((uv_handle_t *)&b->poll) runs once both handles are
 * closed, after which b may be freed. */
void dcps_bridge_close(dcps_bridge_t *b, uv_close_cb close_cb);

#endif
