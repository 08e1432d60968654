/* dcps — a ZeroMQ socket on a libuv loop; see bridge.h. */
#include "server/bridge.h"

#include <zmq.h>

#include "common/error.h"
#include "common/log.h"

#define DEFAULT_BUDGET 256
/* Behind a flood, a timer then runs at most about 20 ms late (the default
 * heartbeat tick is 1000 ms), for one more loop iteration, a poll that does not
 * wait, per 20 ms of messages. */
#define DEFAULT_BUDGET_MS 20.0

static void on_idle(uv_idle_t *h);

static int readable(void *sock)
{
    int events = 0;
    size_t len = sizeof events;
    if (zmq_getsockopt(sock, ZMQ_EVENTS, &events, &len) != 0)
        return 0;
    return (events & ZMQ_POLLIN) != 0;
}

void dcps_bridge_drain(dcps_bridge_t *b)
{
    unsigned n = 0;
    uint64_t t0 = uv_hrtime(), limit = (uint64_t)(b->budget_ms * 1e6);
    if (b->closing)
        return;
    while (readable(b->sock)) {
        if (n++ == b->budget || (n > 1 && uv_hrtime() - t0 >= limit)) {
            /* Leave the rest for the next iteration; the idle handle keeps the
             * loop from sleeping on an edge that will not come again. */
            uv_idle_start(&b->idle, on_idle);
            return;
        }
        b->on_message(b);
        if (b->closing)
            return;
    }
    uv_idle_stop(&b->idle);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    dcps_bridge_t *b = h->data;
    if (status < 0)
        DCPS_WARN("poll on ZeroMQ socket: %s", uv_strerror(status));
    dcps_bridge_drain(b);
}

static void on_idle(uv_idle_t *h)
{
    dcps_bridge_drain(h->data);
}

int dcps_bridge_init(uv_loop_t *loop, dcps_bridge_t *b, void *sock, dcps_bridge_cb on_message,
                     void *data)
{
    int fd;
    size_t len = sizeof fd;
    int rc;

    b->sock = sock;
    b->on_message = on_message;
    b->data = data;
    b->budget = DEFAULT_BUDGET;
    b->budget_ms = DEFAULT_BUDGET_MS;
    b->closing = 0;
    if (zmq_getsockopt(sock, ZMQ_FD, &fd, &len) != 0)
        return DCPS_E_ZMQ;
    if ((rc = uv_poll_init(loop, &b->poll, fd)) != 0)
        return rc;
    uv_idle_init(loop, &b->idle);
    b->poll.data = b;
    b->idle.data = b;
    if ((rc = uv_poll_start(&b->poll, UV_READABLE, on_poll)) != 0)
        return rc;
    /* Messages may already be queued: the edge for them has passed. */
    uv_idle_start(&b->idle, on_idle);
    return 0;
}

static void on_closed(uv_handle_t *h)
{
    dcps_bridge_t *b = h->data;
    if (--b->pending_closes == 0 && b->close_cb)
        b->close_cb((uv_handle_t *)&b->poll);
}

void dcps_bridge_close(dcps_bridge_t *b, uv_close_cb close_cb)
{
    b->closing = 1;
    b->close_cb = close_cb;
    b->pending_closes = 2;
    uv_poll_stop(&b->poll);
    uv_idle_stop(&b->idle);
    uv_close((uv_handle_t *)&b->poll, on_closed);
    uv_close((uv_handle_t *)&b->idle, on_closed);
}
