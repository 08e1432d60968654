/* dcps — the shard's ZAP handler: which workers may connect.
 *
 * With [security] curve = true the shard's ROUTER socket is a CURVE server in
 * the ZAP domain "dcps". Once a client has proved that it holds the secret key
 * of a public key, libzmq asks the ZAP handler (RFC 27) bound at
 * inproc://zeromq.zap.01 of the same context whether that key may connect. This
 * handler admits the keys of its key set (the *.pub files of [security]
 * worker_keys_dir, common/keys.h) and refuses every other one with status 400,
 * which the client's socket reports as ZMQ_EVENT_HANDSHAKE_FAILED_AUTH. Each
 * refusal is one warning naming the peer's address and the start of its key,
 * and is counted.
 *
 * A key speaks only for the ranks its file's name gives (NAME@RANKS.pub): the
 * router (server/router.h) checks every request's rank with dcps_auth_check,
 * against the key set in force when the request arrives, so a reload that
 * removes a key or changes its ranks applies from the next request on, also on
 * connections already admitted.
 *
 * Without a handler libzmq admits every CURVE client (docs/operating.md, Security), so the handler
 * is bound before the ROUTER socket and closed after it.
 *
 * It runs on the server's loop through a bridge (server/bridge.h), as the router
 * does: the key set and the counters belong to the loop thread, and a reload
 * replaces the key set between two requests, with no lock. */
#ifndef DCPS_AUTH_H
#define DCPS_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "server/bridge.h"
#include "common/keys.h"

#define DCPS_ZAP_DOMAIN "dcps"

typedef struct dcps_auth {
    void *sock;           /* REP at inproc://zeromq.zap.01 */
    dcps_bridge_t bridge; /* started by dcps_auth_start */
    bool started;
    dcps_keyset_t *keys; /* owned */
    char dir[1024];      /* where keys came from, for the log */
    uint64_t admitted;   /* connections admitted */
    uint64_t refused;    /* connections refused (the router's stats report them) */
    bool has_peer;       /* the shards' own public key is admitted (dcps_auth_set_peer) */
    uint8_t peer[DCPS_KEY_BYTES];
} dcps_auth_t;

/* Binds the handler in ctx (before the ROUTER socket of ctx binds) and takes
 * *keys (read from dir), setting *keys to NULL. Returns 0, or DCPS_E_ZMQ with
 * a sentence in err; then nothing is bound and *keys is still the caller's. */
int dcps_auth_open(dcps_auth_t *a, void *ctx, dcps_keyset_t **keys, const char *dir, char *err,
                   size_t errlen);

/* Admits the shards' own public key too (server_public_key), with which the
 * other shards of a sync job connect to shard 0 (server/rounds.h): it speaks
 * for no rank, only for ROUND messages (dcps_auth_is_peer). */
void dcps_auth_set_peer(dcps_auth_t *a, const uint8_t *key);

/* Whether a request's key (user_id, as in dcps_auth_check) is that peer key. */
bool dcps_auth_is_peer(const dcps_auth_t *a, const char *user_id);

/* Answers requests from the loop from now on (they wait in the socket until
 * then). Returns 0 or a negative libuv/dcps code. */
int dcps_auth_start(dcps_auth_t *a, uv_loop_t *loop);

/* Replaces the key set with *keys (read from dir; taken, *keys set to NULL):
 * connections made and requests received from now on are checked against it
 * (connections already admitted stay open). Logs the keys added and removed.
 * Loop thread. */
void dcps_auth_set_keys(dcps_auth_t *a, dcps_keyset_t **keys, const char *dir);

/* Whether the worker key of a request (user_id: the message's "User-Id"
 * metadata, which this handler set to the key's Z85 text) may speak for rank
 * under the key set in force. Returns 0, or DCPS_E_AUTH with a sentence in why
 * ("the CURVE key of gpu-node-3@4-7.pub may not speak for rank 2"). */
int dcps_auth_check(const dcps_auth_t *a, const char *user_id, uint32_t rank, char *why,
                    size_t n);

/* Stops answering; close_cb runs once the bridge's handles are closed. Only
 * after dcps_auth_start returned 0. */
void dcps_auth_close(dcps_auth_t *a, uv_close_cb close_cb);

/* Closes the socket (after the ROUTER socket: see above) and frees the key
 * set. Safe on a zeroed a. */
void dcps_auth_destroy(dcps_auth_t *a);

#endif
