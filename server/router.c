/* dcps — the shard daemon's message handling; see router.h. */
#include "server/router.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/error.h"
#include "common/frame.h"
#include "common/log.h"

/* A handler answers the request itself and returns 0, or returns a negative code
 * with a sentence in why, and the router answers ERROR. */
typedef int (*handler_fn)(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m,
                          char *why, size_t whylen);

static void send_reply(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *reply)
{
    int n = dcps_frames_send(r->sock, id, reply, NULL, NULL, ZMQ_DONTWAIT);
    if (n < 0) {
        DCPS_DEBUG("%s to rank %u not sent: %s", dcps_msg_type_name(reply->type), reply->rank,
                   zmq_strerror(errno));
        return;
    }
    r->bytes_out += (uint64_t)n;
}

static void send_ack(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m, uint32_t type,
                     uint32_t flags)
{
    dcps_msg_t reply;
    dcps_msg_reply(&reply, m, type);
    reply.shard = (uint32_t)r->shard->index;
    reply.param_version = r->shard->version;
    reply.flags = flags;
    send_reply(r, id, &reply);
}

static int on_hello(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m, char *why,
                    size_t whylen)
{
    const dcps_shard_t *s = r->shard;
    if (m->n_params != r->cfg->n_params) {
        snprintf(why, whylen, "worker's model has %llu parameters, this job has %llu",
                 (unsigned long long)m->n_params, (unsigned long long)r->cfg->n_params);
        return DCPS_E_SIZE;
    }
    if (m->shard != (uint32_t)s->index) {
        snprintf(why, whylen, "worker expected shard %u at this endpoint, this is shard %d",
                 m->shard, s->index);
        return DCPS_E_SIZE;
    }
    dcps_peer_t *p = &r->peers[m->rank];
    if (!p->hello)
        DCPS_INFO("worker %u joined", m->rank);
    p->hello = true;

    dcps_msg_t reply;
    dcps_msg_reply(&reply, m, DCPS_MSG_WELCOME);
    reply.shard = (uint32_t)s->index;
    reply.n_params = r->cfg->n_params;
    reply.range_lo = s->range.lo;
    reply.range_hi = s->range.hi;
    reply.workers = (uint32_t)r->cfg->workers;
    reply.initialized = s->initialized;
    reply.param_version = s->version;
    send_reply(r, id, &reply);
    return 0;
}

static int not_ready(char *why, size_t whylen)
{
    snprintf(why, whylen, "rank 0 has not initialised the parameters yet");
    return DCPS_E_NOTREADY;
}

static int on_init(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m, char *why,
                   size_t whylen)
{
    const float *w;
    int rc;
    if (m->rank != 0) {
        snprintf(why, whylen, "only rank 0 initialises parameters, not rank %u", m->rank);
        return DCPS_E_STATE;
    }
    if ((rc = dcps_codec_dense(m, r->shard->n, &w, why, whylen)) != 0)
        return rc;
    int set = dcps_shard_init(r->shard, w);
    if (set)
        DCPS_INFO("parameters initialised by rank 0 (%zu values)", r->shard->n);
    send_ack(r, id, m, DCPS_MSG_PUSH_ACK, set ? 0 : DCPS_FLAG_DUPLICATE);
    return 0;
}

static int on_push(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m, char *why,
                   size_t whylen)
{
    dcps_shard_t *s = r->shard;
    const float *v;
    const uint32_t *idx = NULL;
    size_t k = 0;
    int rc;

    /* The payload is checked first, so a malformed push is refused whatever the
     * shard's state, and never acknowledged. */
    if (m->nframes == 1)
        rc = dcps_codec_dense(m, s->n, &v, why, whylen);
    else
        rc = dcps_codec_sparse(m, s->range.lo, s->range.hi, &idx, &v, &k, why, whylen);
    if (rc != 0)
        return rc;
    if (!s->initialized)
        return not_ready(why, whylen);
    if (dcps_shard_is_duplicate(s, m->rank, m->seq)) {
        /* A retry of a push already applied: acknowledge, do not apply twice. */
        s->duplicates++;
        send_ack(r, id, m, DCPS_MSG_PUSH_ACK, DCPS_FLAG_DUPLICATE);
        return 0;
    }
    if (idx)
        dcps_shard_apply_sparse(s, m->rank, m->seq, idx, v, k);
    else
        dcps_shard_apply_dense(s, m->rank, m->seq, v);
    send_ack(r, id, m, DCPS_MSG_PUSH_ACK, 0);
    return 0;
}

static int on_pull(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m, char *why,
                   size_t whylen)
{
    dcps_shard_t *s = r->shard;
    if (!s->initialized)
        return not_ready(why, whylen);
    dcps_msg_t reply;
    dcps_msg_reply(&reply, m, DCPS_MSG_PULL_REPLY);
    reply.shard = (uint32_t)s->index;
    reply.param_version = s->version;
    reply.range_lo = s->range.lo;
    reply.range_hi = s->range.hi;
    reply.nframes = 1;
    reply.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_DENSE, DCPS_DTYPE_F32, s->n};
    /* Copied, not zero-copy: the next push changes w while ZeroMQ may still be
     * sending this reply. */
    reply.payload[0] = (dcps_buf_t){s->w, s->n * sizeof *s->w};
    dcps_shard_pulled(s, m->rank);
    s->pulls++;
    send_reply(r, id, &reply);
    return 0;
}

/* Releases the barrier once every worker that is in the job has arrived. */
static void barrier_check(dcps_router_t *r)
{
    int live = 0;
    for (int i = 0; i < r->cfg->workers; i++)
        live += r->peers[i].hello;
    if (r->barrier_waiting == 0 || r->barrier_waiting < live)
        return;
    for (uint32_t i = 0; i < (uint32_t)r->cfg->workers; i++) {
        dcps_peer_t *p = &r->peers[i];
        if (!p->waiting)
            continue;
        dcps_msg_t reply = {0};
        reply.type = DCPS_MSG_BARRIER;
        reply.job_id = r->cfg->job_id;
        reply.rank = i;
        reply.seq = p->wait_seq;
        reply.shard = (uint32_t)r->shard->index;
        reply.step = r->barrier_step;
        reply.param_version = r->shard->version;
        send_reply(r, &(dcps_buf_t){p->id, p->id_len}, &reply);
        p->waiting = false;
    }
    DCPS_DEBUG("barrier %llu released", (unsigned long long)r->barrier_step);
    r->barrier_waiting = 0;
}

static int on_barrier(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m, char *why,
                      size_t whylen)
{
    dcps_peer_t *p = &r->peers[m->rank];
    if (!p->hello) {
        snprintf(why, whylen, "rank %u entered a barrier without HELLO", m->rank);
        return DCPS_E_STATE;
    }
    if (r->barrier_waiting > 0 && m->step != r->barrier_step) {
        snprintf(why, whylen, "barrier %llu requested while barrier %llu is open",
                 (unsigned long long)m->step, (unsigned long long)r->barrier_step);
        return DCPS_E_STATE;
    }
    if (id->len > sizeof p->id) {
        snprintf(why, whylen, "routing id of %zu bytes", id->len);
        return DCPS_E_HEADER;
    }
    r->barrier_step = m->step;
    if (!p->waiting)
        r->barrier_waiting++;
    p->waiting = true;
    p->wait_seq = m->seq; /* a retried BARRIER replaces the earlier one */
    memcpy(p->id, id->data, id->len);
    p->id_len = id->len;
    barrier_check(r);
    return 0;
}

static int on_heartbeat(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m, char *why,
                        size_t whylen)
{
    send_ack(r, id, m, DCPS_MSG_HEARTBEAT, 0);
    return 0;
}

static int on_bye(dcps_router_t *r, const dcps_buf_t *id, const dcps_msg_t *m, char *why,
                  size_t whylen)
{
    dcps_peer_t *p = &r->peers[m->rank];
    if (p->hello)
        DCPS_INFO("worker %u left", m->rank);
    p->hello = false;
    if (p->waiting) {
        p->waiting = false;
        r->barrier_waiting--;
    }
    send_ack(r, id, m, DCPS_MSG_BYE, 0);
    barrier_check(r); /* the others no longer wait for this worker */
    return 0;
}

static const handler_fn handlers[DCPS_MSG_TYPE_END] = {
    [DCPS_MSG_HELLO] = on_hello,     [DCPS_MSG_PUSH] = on_push,
    [DCPS_MSG_PULL] = on_pull,       [DCPS_MSG_BARRIER] = on_barrier,
    [DCPS_MSG_HEARTBEAT] = on_heartbeat, [DCPS_MSG_BYE] = on_bye,
    [DCPS_MSG_INIT] = on_init,
};

static void reply_error(dcps_router_t *r, const dcps_frames_t *f, const dcps_msg_t *m, int code,
                        const char *why)
{
    /* Metadata rides on frames that came off the wire, not on the routing id the
     * ROUTER socket made up. */
    const char *peer = zmq_msg_gets((zmq_msg_t *)&f->part[f->n > 1 ? 1 : 0], "Peer-Address");
    r->errors[-code < DCPS_ERROR_SLOTS ? -code : 0]++;
    DCPS_WARN("bad %s from rank %u at %s: %s: %s", dcps_msg_type_name(m->type), m->rank,
              peer ? peer : "?", dcps_errname(code), why);
    dcps_msg_t reply;
    dcps_msg_reply(&reply, m, DCPS_MSG_ERROR);
    reply.job_id = r->cfg->job_id;
    reply.shard = (uint32_t)r->shard->index;
    reply.error_code = (uint32_t)-code;
    snprintf(reply.error_text, sizeof reply.error_text, "%s: %s", dcps_strerror(code), why);
    send_reply(r, &(dcps_buf_t){zmq_msg_data((zmq_msg_t *)&f->part[0]),
                                zmq_msg_size((zmq_msg_t *)&f->part[0])},
               &reply);
}

static void on_message(dcps_bridge_t *b)
{
    dcps_router_t *r = b->data;
    dcps_frames_t f;
    dcps_msg_t m;
    char why[DCPS_ERROR_TEXT_MAX - 64] = "";
    int rc;

    rc = dcps_frames_recv(r->sock, &f, ZMQ_DONTWAIT);
    if (rc <= 0) {
        if (rc < 0)
            DCPS_WARN("receive: %s", zmq_strerror(errno));
        return;
    }
    r->messages++;
    for (int i = 0; i < f.n; i++)
        r->bytes_in += zmq_msg_size(&f.part[i]);
    const dcps_buf_t id = {zmq_msg_data(&f.part[0]), zmq_msg_size(&f.part[0])};

    rc = dcps_frames_decode(&f, 1, r->cfg->job_id, &m, why, sizeof why);
    if (rc == 0 && m.rank >= (uint32_t)r->cfg->workers) {
        snprintf(why, sizeof why, "rank %u, the job has ranks 0 to %d", m.rank,
                 r->cfg->workers - 1);
        rc = DCPS_E_RANK;
    }
    if (rc == 0 && !handlers[m.type]) {
        snprintf(why, sizeof why, "a shard does not accept %s", dcps_msg_type_name(m.type));
        rc = DCPS_E_MSGTYPE;
    }
    if (rc == 0)
        rc = handlers[m.type](r, &id, &m, why, sizeof why);
    if (rc != 0)
        reply_error(r, &f, &m, rc, why);
    dcps_frames_close(&f);
}

int dcps_router_init(dcps_router_t *r, uv_loop_t *loop, void *sock, const dcps_config_t *cfg,
                     dcps_shard_t *shard)
{
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    r->shard = shard;
    r->sock = sock;
    r->peers = calloc((size_t)cfg->workers, sizeof *r->peers);
    if (!r->peers)
        return DCPS_E_NOMEM;
    int rc = dcps_bridge_init(loop, &r->bridge, sock, on_message, r);
    if (rc != 0) {
        free(r->peers);
        r->peers = NULL;
    }
    return rc;
}

void dcps_router_close(dcps_router_t *r, uv_close_cb close_cb)
{
    free(r->peers);
    r->peers = NULL;
    dcps_bridge_close(&r->bridge, close_cb);
}

uint64_t dcps_router_error_count(const dcps_router_t *r)
{
    uint64_t n = 0;
    for (int i = 0; i < DCPS_ERROR_SLOTS; i++)
        n += r->errors[i];
    return n;
}
