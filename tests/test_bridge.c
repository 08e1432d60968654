/* dcps — the ZeroMQ + libuv bridge: no message may stall.
 *
 * ZMQ_FD is edge-triggered. A bridge that handles one message per wake-up, or
 * forgets to drain after sending, leaves messages sitting in the socket with no
 * edge to come: these tests then time out instead of counting every message. */
#include <check.h>

#include "tests/check_run.h"
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <uv.h>
#include <zmq.h>

#include "server/bridge.h"
#include "proto/frame.h"

#define BURST 20000

typedef struct {
    void *ctx;
    const char *endpoint;
    int sent, echoed;
    int pre_sent; /* messages sent before the bridge started */
    int n;        /* messages to send: 0 means BURST */
} peer_t;

typedef struct {
    uv_loop_t loop;
    uv_timer_t deadline;
    dcps_bridge_t bridge;
    void *router;
    int received;
    int expect;
    int timed_out;
} server_t;

static void on_closed(uv_handle_t *h)
{
    (void)h;
}

static void finish(server_t *s)
{
    uv_timer_stop(&s->deadline);
    uv_close((uv_handle_t *)&s->deadline, on_closed);
    dcps_bridge_close(&s->bridge, on_closed);
}

/* Echoes every message back to its sender. */
static void on_message(dcps_bridge_t *b)
{
    server_t *s = b->data;
    zmq_msg_t id, body;
    zmq_msg_init(&id);
    zmq_msg_init(&body);
    if (zmq_msg_recv(&id, s->router, ZMQ_DONTWAIT) < 0)
        goto out;
    ck_assert_int_ge(zmq_msg_recv(&body, s->router, ZMQ_DONTWAIT), 0);
    s->received++;
    zmq_msg_send(&id, s->router, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_msg_send(&body, s->router, ZMQ_DONTWAIT);
    if (s->received == s->expect)
        finish(s);
out:
    zmq_msg_close(&id);
    zmq_msg_close(&body);
}

static void on_deadline(uv_timer_t *t)
{
    server_t *s = t->data;
    s->timed_out = 1;
    finish(s);
}

static void *burst(void *arg)
{
    peer_t *p = arg;
    void *d = zmq_socket(p->ctx, ZMQ_DEALER);
    int hwm = 0, timeout = 20000;
    zmq_setsockopt(d, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(d, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(d, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    zmq_connect(d, p->endpoint);
    int n = p->n ? p->n : BURST;
    for (int i = 0; i < n; i++)
        if (zmq_send(d, &i, sizeof i, 0) == sizeof i)
            p->sent++;
    for (int i = 0; i < n; i++) {
        int v;
        if (zmq_recv(d, &v, sizeof v, 0) != sizeof v)
            break;
        p->echoed++;
    }
    zmq_close(d);
    return NULL;
}

/* Runs the loop while peer p sends its messages; every one of the n must come
 * back, before the deadline. */
static void serve(server_t *s, peer_t *p, int n)
{
    pthread_t th;
    pthread_create(&th, NULL, burst, p);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    pthread_join(th, NULL);
    ck_assert_int_eq(s->timed_out, 0);
    ck_assert_int_eq(s->received, n);
    ck_assert_int_eq(p->echoed, n);
}

static void run_server(server_t *s, void *ctx, const char *endpoint, int expect)
{
    int hwm = 0;
    memset(s, 0, sizeof *s);
    s->expect = expect;
    s->router = zmq_socket(ctx, ZMQ_ROUTER);
    zmq_setsockopt(s->router, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s->router, ZMQ_RCVHWM, &hwm, sizeof hwm);
    ck_assert_int_eq(zmq_bind(s->router, endpoint), 0);
    uv_loop_init(&s->loop);
    uv_timer_init(&s->loop, &s->deadline);
    s->deadline.data = s;
}

START_TEST(burst_of_messages_is_received_and_answered_in_full)
{
    void *ctx = zmq_ctx_new();
    server_t s;
    peer_t p = {ctx, "inproc://bridge-burst", 0, 0, 0, 0};
    run_server(&s, ctx, p.endpoint, BURST);
    ck_assert_int_eq(dcps_bridge_init(&s.loop, &s.bridge, s.router, on_message, &s), 0);
    uv_timer_start(&s.deadline, on_deadline, 20000, 0);
    serve(&s, &p, BURST);
    uv_loop_close(&s.loop);
    zmq_close(s.router);
    zmq_ctx_term(ctx);
}
END_TEST

/* Messages that arrived before the bridge existed produced their edge already;
 * the bridge must still find them. */
START_TEST(messages_queued_before_the_bridge_starts_are_handled)
{
    void *ctx = zmq_ctx_new();
    server_t s;
    run_server(&s, ctx, "inproc://bridge-early", 50);
    void *d = zmq_socket(ctx, ZMQ_DEALER);
    zmq_connect(d, "inproc://bridge-early");
    for (int i = 0; i < 50; i++)
        ck_assert_int_eq(zmq_send(d, &i, sizeof i, 0), sizeof i);
    /* Let them arrive, and consume the edge, before the bridge starts. */
    zmq_pollitem_t it = {s.router, 0, ZMQ_POLLIN, 0};
    ck_assert_int_eq(zmq_poll(&it, 1, 2000), 1);
    ck_assert_int_eq(dcps_bridge_init(&s.loop, &s.bridge, s.router, on_message, &s), 0);
    uv_timer_start(&s.deadline, on_deadline, 5000, 0);
    uv_run(&s.loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(s.timed_out, 0);
    ck_assert_int_eq(s.received, 50);
    uv_loop_close(&s.loop);
    zmq_close(d);
    zmq_close(s.router);
    zmq_ctx_term(ctx);
}
END_TEST

/* Over TCP, with the budget forcing the idle path many times. */
START_TEST(burst_over_tcp_with_a_small_budget_does_not_stall)
{
    void *ctx = zmq_ctx_new();
    server_t s;
    char endpoint[256];
    size_t len = sizeof endpoint;
    run_server(&s, ctx, "tcp://127.0.0.1:*", BURST);
    zmq_getsockopt(s.router, ZMQ_LAST_ENDPOINT, endpoint, &len);
    peer_t p = {ctx, endpoint, 0, 0, 0, 0};
    ck_assert_int_eq(dcps_bridge_init(&s.loop, &s.bridge, s.router, on_message, &s), 0);
    s.bridge.budget = 3;
    uv_timer_start(&s.deadline, on_deadline, 30000, 0);
    serve(&s, &p, BURST);
    uv_loop_close(&s.loop);
    zmq_close(s.router);
    zmq_ctx_term(ctx);
}
END_TEST

/* Messages that each take a while (a shard's dense push or delta pull: tens of
 * ms) must not keep the loop's timers from running until the whole queue is
 * done: the bridge yields after budget_ms of them, whatever their count. */
#define SLOW 100      /* messages */
#define SLOW_MS 5     /* each */
static double tick_gap_ms, last_tick_ms;
static int ticks;

static void on_slow_message(dcps_bridge_t *b)
{
    uv_sleep(SLOW_MS);
    on_message(b);
}

/* The longest time so far without a tick, from the start to now. */
static void gap_to_now(void)
{
    double now = (double)uv_hrtime() / 1e6;
    if (now - last_tick_ms > tick_gap_ms)
        tick_gap_ms = now - last_tick_ms;
    last_tick_ms = now;
}

static void on_tick(uv_timer_t *t)
{
    gap_to_now();
    ticks++;
    (void)t;
}

static void on_slow_closed(uv_handle_t *h)
{
    (void)h;
}

static void on_slow_done(uv_check_t *c)
{
    server_t *s = c->data;
    if (s->received == s->expect || s->timed_out) {
        gap_to_now();
        uv_timer_stop((uv_timer_t *)c->loop->data);
        uv_close((uv_handle_t *)c->loop->data, on_slow_closed);
        uv_close((uv_handle_t *)c, on_slow_closed);
    }
}

START_TEST(timers_run_between_slow_messages)
{
    void *ctx = zmq_ctx_new();
    server_t s;
    uv_timer_t tick;
    uv_check_t done;
    char endpoint[256];
    size_t len = sizeof endpoint;
    run_server(&s, ctx, "tcp://127.0.0.1:*", SLOW);
    zmq_getsockopt(s.router, ZMQ_LAST_ENDPOINT, endpoint, &len);
    peer_t p = {ctx, endpoint, 0, 0, 0, SLOW};
    ck_assert_int_eq(dcps_bridge_init(&s.loop, &s.bridge, s.router, on_slow_message, &s), 0);
    uv_timer_start(&s.deadline, on_deadline, 30000, 0);
    uv_timer_init(&s.loop, &tick);
    uv_timer_start(&tick, on_tick, 10, 10);
    s.loop.data = &tick;
    uv_check_init(&s.loop, &done);
    done.data = &s;
    uv_check_start(&done, on_slow_done);
    tick_gap_ms = 0;
    ticks = 0;
    last_tick_ms = (double)uv_hrtime() / 1e6;
    serve(&s, &p, SLOW);
    /* The messages take SLOW * SLOW_MS = 500 ms in all; a tick every 10 ms
     * comes at most budget_ms (20) and a message late, give or take the
     * scheduler of a loaded machine: 250 ms would mean no yield at all. */
    ck_assert_msg(tick_gap_ms < 250 && ticks >= 5,
                  "%d ticks in %d ms of messages, the longest gap %.0f ms", ticks, SLOW * SLOW_MS,
                  tick_gap_ms);
    uv_loop_close(&s.loop);
    zmq_close(s.router);
    zmq_ctx_term(ctx);
}
END_TEST

/* Small messages share ZeroMQ's receive buffer, so their parts can start at
 * any address; dcps_frames_recv hands over 8-byte aligned data regardless. */
START_TEST(received_payloads_are_aligned)
{
    void *ctx = zmq_ctx_new();
    void *in = zmq_socket(ctx, ZMQ_DEALER), *out = zmq_socket(ctx, ZMQ_DEALER);
    char endpoint[256];
    size_t len = sizeof endpoint;
    ck_assert_int_eq(zmq_bind(in, "tcp://127.0.0.1:*"), 0);
    zmq_getsockopt(in, ZMQ_LAST_ENDPOINT, endpoint, &len);
    ck_assert_int_eq(zmq_connect(out, endpoint), 0);
    /* Parts of odd sizes, many messages back to back: a shared buffer puts
     * most of them at odd offsets. */
    float v[64];
    for (int i = 0; i < 64; i++)
        v[i] = (float)i * 0.5f;
    for (int m = 0; m < 200; m++) {
        char head[40];
        size_t hl = 1 + (size_t)(m % 37);
        memset(head, 'h', sizeof head);
        ck_assert_int_ge(zmq_send(out, head, hl, ZMQ_SNDMORE), 0);
        ck_assert_int_ge(zmq_send(out, v, sizeof(float) * (size_t)(9 + m % 50), 0), 0);
    }
    for (int m = 0; m < 200; m++) {
        dcps_frames_t f;
        ck_assert_int_eq(dcps_frames_recv(in, &f, 0), 2);
        size_t n = zmq_msg_size(&f.part[1]) / sizeof(float);
        ck_assert_uint_eq(n, (size_t)(9 + m % 50));
        const float *got = zmq_msg_data(&f.part[1]);
        for (int p = 0; p < 2; p++)
            ck_assert_msg((uintptr_t)zmq_msg_data(&f.part[p]) % 8 == 0,
                          "message %d part %d at %p", m, p, zmq_msg_data(&f.part[p]));
        for (size_t i = 0; i < n; i++)
            ck_assert_float_eq(got[i], v[i]);
        dcps_frames_close(&f);
    }
    zmq_close(in);
    zmq_close(out);
    zmq_ctx_term(ctx);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("bridge");
    TCase *tc = tcase_create("drain");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, burst_of_messages_is_received_and_answered_in_full);
    tcase_add_test(tc, messages_queued_before_the_bridge_starts_are_handled);
    tcase_add_test(tc, burst_over_tcp_with_a_small_budget_does_not_stall);
    tcase_add_test(tc, received_payloads_are_aligned);
    tcase_add_test(tc, timers_run_between_slow_messages);
    suite_add_tcase(su, tc);
    return dcps_test_run(su);
}
