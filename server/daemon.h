/* dcps — the shard daemon: one shard of a job, served on a libuv loop.
 *
 * The daemon owns everything dcps-server runs: the job's configuration, the
 * worker keys, the metrics port, the shard, the ZeroMQ context and ROUTER
 * socket, the ZAP handler, the router, and the loop with its timers and
 * signals. dcps_daemon_new builds it in named steps, each undone in reverse
 * when a later one fails:
 *   config     the job file and overrides, checked for a server (exit status 2)
 *   keys       [security] curve: this shard's secret key, the workers' keys
 *   metrics    [server] metrics_port, bound before anything else
 *   shard      the parameter store, and [server] checkpoint_dir made usable
 *   sockets    the ZAP handler, then the ROUTER socket, bound
 *   router     the loop and the router serving the socket
 *   timers     metrics, malloc_trim, checkpoints and the systemd watchdog
 *   restore    the newest usable checkpoint, once bound and before READY=1
 *   signals    SIGTERM, SIGINT (stop) and SIGHUP (reload); periodic checkpoints
 *   endpoint   --endpoint-file, written once the signals are handled
 * and then says it serves (the log, READY=1). Every step but config fails with
 * exit status 1, after logging why.
 *
 * dcps_daemon_run serves until SIGTERM or SIGINT, which write a last
 * checkpoint (with [server] checkpoint_dir) and close every handle. SIGHUP
 * reads the job file again: the reloadable keys take effect, and with curve
 * the worker keys are read again. Single-threaded but for libzmq's and the
 * metrics port's own threads. */
#ifndef DCPS_DAEMON_H
#define DCPS_DAEMON_H

#include <stddef.h>

/* What dcps-server's command line chose (server/main.c). */
typedef struct {
    const char *config;        /* the job file */
    int shard;                 /* the shard index */
    const char *endpoint_file; /* NULL: none */
    const char *leader;        /* --leader: shard 0's endpoint; NULL: [servers] shards' */
    const char *const *overrides; /* --set SECTION.KEY=V, in order */
    size_t n_overrides;
} dcps_daemon_options_t;

typedef struct dcps_daemon dcps_daemon_t;

/* Builds the daemon of opt's shard (opt is borrowed until the daemon is
 * destroyed: a reload reads the same file and overrides). Returns it serving,
 * its READY=1 sent; or NULL with the exit status in *status (2: the job or
 * the options are wrong; 1: anything else) after saying why. */
dcps_daemon_t *dcps_daemon_new(const dcps_daemon_options_t *opt, int *status);

/* Serves until SIGTERM or SIGINT and logs a summary. Returns the exit status:
 * 0, or 1 if the last checkpoint could not be written. */
int dcps_daemon_run(dcps_daemon_t *d);

/* Frees what dcps_daemon_new built, in reverse, and sets *d to NULL. Does
 * nothing if *d is NULL. */
void dcps_daemon_destroy(dcps_daemon_t **d);

#endif
