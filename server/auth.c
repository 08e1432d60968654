/* dcps — the shard's ZAP handler; see auth.h.
 *
 * A ZAP request (RFC 27) is one multipart message: version "1.0", request id,
 * domain, the peer's address, its routing id, the mechanism and its
 * credentials, for CURVE the client's 32-byte public key. The reply is version,
 * request id, status code ("200" admits, "400" refuses), status text, user id
 * and metadata. The user id of an admitted worker is its key in Z85, which
 * libzmq attaches to every message of the connection as the property "User-Id":
 * dcps_auth_check finds the key's ranks from it, in the key set in force then. */
#include "server/auth.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "common/error.h"
#include "common/log.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ZAP_FRAMES 7 /* kept of a request; more are read and dropped */

enum { F_VERSION, F_REQUEST_ID, F_DOMAIN, F_ADDRESS, F_ROUTING_ID, F_MECHANISM, F_CREDENTIALS };

int dcps_auth_open(dcps_auth_t *a, void *ctx, dcps_keyset_t **keys, const char *dir, char *err,
                   size_t errlen)
{
    int linger = 0;
    memset(a, 0, sizeof *a);
    a->sock = zmq_socket(ctx, ZMQ_REP);
    if (!a->sock) {
        snprintf(err, errlen, "cannot create the ZAP socket: %s", zmq_strerror(errno));
        return DCPS_E_ZMQ;
    }
    zmq_setsockopt(a->sock, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(a->sock, ZAP_ENDPOINT) != 0) {
        snprintf(err, errlen, "cannot bind the ZAP handler at %s: %s", ZAP_ENDPOINT,
                 zmq_strerror(errno));
        zmq_close(a->sock);
        a->sock = NULL;
        return DCPS_E_ZMQ;
    }
    a->keys = *keys;
    *keys = NULL;
    snprintf(a->dir, sizeof a->dir, "%s", dir);
    return 0;
}

/* Frame i of a request as text (at most n - 1 bytes of it); "" if absent. */
static void text_of(zmq_msg_t *part, int n_parts, int i, char *buf, size_t n)
{
    size_t len = i < n_parts ? zmq_msg_size(&part[i]) : 0;
    if (len > n - 1)
        len = n - 1;
    if (len)
        memcpy(buf, zmq_msg_data(&part[i]), len);
    buf[len] = '\0';
}

/* Sends the reply to a request whose request id is `id` (absent: empty). */
static void reply(dcps_auth_t *a, zmq_msg_t *id, const char *status, const char *text,
                  const char *user)
{
    const void *idp = id ? zmq_msg_data(id) : "";
    size_t idn = id ? zmq_msg_size(id) : 0;
    int f = ZMQ_SNDMORE | ZMQ_DONTWAIT;
    if (zmq_send(a->sock, "1.0", 3, f) < 0 || zmq_send(a->sock, idp, idn, f) < 0 ||
        zmq_send(a->sock, status, strlen(status), f) < 0 ||
        zmq_send(a->sock, text, strlen(text), f) < 0 ||
        zmq_send(a->sock, user, strlen(user), f) < 0 || zmq_send(a->sock, "", 0, ZMQ_DONTWAIT) < 0)
        DCPS_WARN("cannot answer a ZAP request: %s", zmq_strerror(errno));
}

/* Decides on a complete request part[0, n): admits a CURVE key of the set. */
static void decide(dcps_auth_t *a, zmq_msg_t *part, int n)
{
    char version[8], mechanism[16], address[64], key[DCPS_KEY_Z85 + 1];
    text_of(part, n, F_VERSION, version, sizeof version);
    text_of(part, n, F_MECHANISM, mechanism, sizeof mechanism);
    text_of(part, n, F_ADDRESS, address, sizeof address);
    /* Only libzmq writes to this socket: a request of another shape is a bug
     * there, answered (a REP must) and logged rather than trusted. */
    if (n < ZAP_FRAMES || strcmp(version, "1.0") != 0 || strcmp(mechanism, "CURVE") != 0 ||
        zmq_msg_size(&part[F_CREDENTIALS]) != DCPS_KEY_BYTES) {
        DCPS_WARN("refused a connection from %s: ZAP request of %d frames, version \"%s\", "
                  "mechanism \"%s\" (expected CURVE with a 32-byte key)",
                  *address ? address : "an unknown address", n, version, mechanism);
        a->refused++;
        reply(a, n > F_REQUEST_ID ? &part[F_REQUEST_ID] : NULL, "400", "bad ZAP request", "");
        return;
    }
    const uint8_t *client = zmq_msg_data(&part[F_CREDENTIALS]);
    const char *name = a->has_peer && memcmp(client, a->peer, DCPS_KEY_BYTES) == 0
                           ? "another shard of this job"
                           : dcps_keyset_find(a->keys, client);
    dcps_key_text(client, key);
    if (!name) {
        DCPS_WARN("refused a connection from %s: CURVE key %.8s\u2026 is not in worker_keys_dir %s",
                  address, key, a->dir);
        a->refused++;
        reply(a, &part[F_REQUEST_ID], "400", "this CURVE key is not admitted", "");
        return;
    }
    DCPS_INFO("admitted a connection from %s: CURVE key %.8s\u2026 (%s)", address, key, name);
    a->admitted++;
    reply(a, &part[F_REQUEST_ID], "200", "OK", key);
}

void dcps_auth_set_peer(dcps_auth_t *a, const uint8_t *key)
{
    memcpy(a->peer, key, DCPS_KEY_BYTES);
    a->has_peer = true;
}

bool dcps_auth_is_peer(const dcps_auth_t *a, const char *user_id)
{
    char text[DCPS_KEY_Z85 + 1];
    if (!a->has_peer || !user_id)
        return false;
    dcps_key_text(a->peer, text);
    return strcmp(text, user_id) == 0;
}

/* The bridge's callback: one request, read whole, then answered. */
static void on_request(dcps_bridge_t *b)
{
    dcps_auth_t *a = b->data;
    zmq_msg_t part[ZAP_FRAMES];
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, a->sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            if (n == 0)
                return; /* nothing after all */
            break;
        }
        more = zmq_msg_more(&m);
        if (n < ZAP_FRAMES)
            part[n++] = m;
        else
            zmq_msg_close(&m);
    }
    decide(a, part, n);
    for (int i = 0; i < n; i++)
        zmq_msg_close(&part[i]);
}

int dcps_auth_start(dcps_auth_t *a, uv_loop_t *loop)
{
    int rc = dcps_bridge_init(loop, &a->bridge, a->sock, on_request, a);
    a->started = rc == 0;
    return rc;
}

void dcps_auth_set_keys(dcps_auth_t *a, dcps_keyset_t **keys, const char *dir)
{
    size_t added = 0, removed = 0, n = dcps_keyset_count(*keys);
    for (size_t i = 0; i < n; i++)
        added += !dcps_keyset_find(a->keys, dcps_keyset_key(*keys, i));
    for (size_t i = 0; i < dcps_keyset_count(a->keys); i++)
        removed += !dcps_keyset_find(*keys, dcps_keyset_key(a->keys, i));
    dcps_keyset_destroy(&a->keys);
    a->keys = *keys;
    *keys = NULL;
    snprintf(a->dir, sizeof a->dir, "%s", dir);
    DCPS_NOTICE("worker keys: %zu in %s, %zu added, %zu removed; every request from now on is "
                "checked against them",
                n, dir, added, removed);
}

int dcps_auth_check(const dcps_auth_t *a, const char *user_id, uint32_t rank, char *why,
                    size_t n)
{
    uint8_t key[DCPS_KEY_BYTES];
    /* libzmq gives every message of an admitted connection the user id this
     * handler answered; a message without one would be a bug there. */
    if (!user_id || dcps_key_parse(user_id, strlen(user_id), key, NULL, 0) != 0) {
        snprintf(why, n, "the message carries no CURVE key as its ZAP user id");
        return DCPS_E_AUTH;
    }
    switch (dcps_keyset_admits(a->keys, key, rank)) {
    case 1:
        return 0;
    case 0:
        snprintf(why, n, "the CURVE key of %s may not speak for rank %u",
                 dcps_keyset_find(a->keys, key), rank);
        return DCPS_E_AUTH;
    default:
        snprintf(why, n,
                 "the CURVE key %.8s\u2026 is no longer in worker_keys_dir %s (a reload "
                 "removed it)",
                 user_id, a->dir);
        return DCPS_E_AUTH;
    }
}

void dcps_auth_close(dcps_auth_t *a, uv_close_cb close_cb)
{
    dcps_bridge_close(&a->bridge, close_cb);
}

void dcps_auth_destroy(dcps_auth_t *a)
{
    if (a->sock)
        zmq_close(a->sock);
    a->sock = NULL;
    dcps_keyset_destroy(&a->keys);
}
