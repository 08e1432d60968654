/* dcps — the shard daemon's message handling.
 *
 * The router owns the shard's ROUTER socket's traffic: it receives each message
 * through the bridge (common/bridge.h), validates it completely, hands it to the
 * handler of its type and answers. A bad message gets an ERROR reply with a code
 * and a sentence, one log line naming the peer, and a count; nothing of it is
 * applied and every other client is served as before. The barrier and the set of
 * workers that said HELLO or BYE live here too.
 *
 * Single-threaded: everything runs on the loop thread that owns the socket. */
#ifndef DCPS_ROUTER_H
#define DCPS_ROUTER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/bridge.h"
#include "common/config.h"
#include "server/shard.h"

#define DCPS_ROUTING_ID_MAX 256
#define DCPS_ERROR_SLOTS 32 /* counters for codes 0 .. −31 */

typedef struct {
    bool hello;   /* said HELLO and not BYE since */
    bool waiting; /* in the current barrier */
    uint64_t wait_seq;
    uint8_t id[DCPS_ROUTING_ID_MAX];
    size_t id_len;
} dcps_peer_t;

typedef struct dcps_router {
    const dcps_config_t *cfg;
    dcps_shard_t *shard;
    void *sock;
    dcps_bridge_t bridge;
    dcps_peer_t *peers;    /* one per rank */
    uint64_t barrier_step; /* valid while barrier_waiting > 0 */
    int barrier_waiting;
    uint64_t messages, bytes_in, bytes_out;
    uint64_t errors[DCPS_ERROR_SLOTS]; /* by −code */
} dcps_router_t;

/* Starts serving sock (a bound ROUTER) on loop. Borrows cfg, shard and sock until
 * dcps_router_close's callback has run. Returns 0 or a negative code. */
int dcps_router_init(dcps_router_t *r, uv_loop_t *loop, void *sock, const dcps_config_t *cfg,
                     dcps_shard_t *shard);

/* Stops serving; close_cb runs when the loop handles are closed. */
void dcps_router_close(dcps_router_t *r, uv_close_cb close_cb);

/* Total bad messages answered with ERROR so far. */
uint64_t dcps_router_error_count(const dcps_router_t *r);

#endif
