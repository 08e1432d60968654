/* dcps — the shard daemon's Prometheus endpoint.
 *
 * With `[server] metrics_port` set, dcps-server answers GET /metrics on that TCP
 * port of `[server] metrics_address` (127.0.0.1 unless the job says otherwise)
 * with the Prometheus text format (version 0.0.4):
 * the shard's and the router's counters, gauges and histograms, each sample
 * labelled shard="<index>". Other paths get 404, methods other than GET and
 * HEAD 405.
 *
 * This module owns the HTTP side (libmicrohttpd with a polling thread of its
 * own) and the last published text. It does not own the numbers: they belong
 * to the server's loop thread, which takes snapshots of them, renders them
 * (dcps_metrics_render) and publishes the text (dcps_metrics_publish, or both
 * at once with dcps_metrics_update), from a timer. The HTTP thread only copies the last
 * published text under a mutex, so it never reads the shard while the loop
 * changes it, and a scrape is as old as the publish period at most.
 *
 * Names and units (docs/operating.md lists them): counters end in _total; bytes are
 * bytes, durations seconds. Errors are counted by the short name of their
 * code in common/error.h (code="FRAMELEN"); codes beyond the router's slots
 * count as code="UNKNOWN". */
#ifndef DCPS_METRICS_H
#define DCPS_METRICS_H

#include <stddef.h>

#include "common/config.h"
#include "server/router.h"
#include "server/shard.h"

typedef struct dcps_metrics dcps_metrics_t;

/* Binds TCP port (1 to 65535) of the dotted IPv4 address (0.0.0.0: every
 * interface) itself, so that a busy port is reported with its errno, and serves
 * it from a new thread; until the first publish /metrics is empty. Returns NULL
 * with a sentence in err that names the port ("metrics port 127.0.0.1:9100:
 * Address already in use") if the address is not one, the port cannot be bound
 * or the HTTP server cannot start; nothing is left open then. */
dcps_metrics_t *dcps_metrics_new(const char *address, int port, char *err, size_t errlen);

/* Serves a copy of text[0, len) from now on. Call from one thread at a time.
 * Returns 0, or DCPS_E_NOMEM with the previous text still served. */
int dcps_metrics_publish(dcps_metrics_t *m, const char *text, size_t len);

/* What one exposition shows: snapshots the loop thread takes of the router
 * and the shard (dcps_router_stats, dcps_shard_stats, dcps_shard_memory_kinds),
 * and the running job. */
typedef struct {
    const dcps_config_t *cfg;
    dcps_router_stats_t router;
    dcps_shard_stats_t shard;
    dcps_shard_memory_t memory;
} dcps_metrics_numbers_t;

/* Renders the exposition of n into buf, as snprintf does: at most cap bytes
 * with the terminating NUL, and returns the length of the whole text, so a
 * caller whose buffer was short grows it to the result + 1 and renders again. */
size_t dcps_metrics_render(const dcps_metrics_numbers_t *n, char *buf, size_t cap);

/* Renders n into a buffer that m keeps for the loop thread (grown when the
 * text grows) and publishes it. Loop thread. Returns 0, or DCPS_E_NOMEM with
 * the previous text still served. */
int dcps_metrics_update(dcps_metrics_t *m, const dcps_metrics_numbers_t *n);

/* Stops the HTTP thread (after the answer it is writing), closes the port,
 * frees m and sets *m to NULL. Does nothing if *m is NULL. */
void dcps_metrics_destroy(dcps_metrics_t **m);

#endif
