/* dcps — a limit on the log lines about one peer's bad messages.
 *
 * A shard logs a line for each bad message it answers with ERROR
 * (server/router.c). A peer sending garbage at full speed would turn that into a
 * flood of journal lines, so each peer address gets at most DCPS_LOGLIMIT_LINES
 * lines per window of DCPS_LOGLIMIT_WINDOW_MS, starting at its first bad message.
 * What is not logged is counted by code and said in one line once the window
 * has ended (dcps_loglimit_allow of the peer's next bad message, or
 * dcps_loglimit_flush from the router's timer and at close):
 *   "37 more bad messages from 10.0.0.7 suppressed in the last 10 s (codes
 *   HEADER 30, FRAMELEN 7)"
 * It limits lines only: the router's metrics count every bad message.
 *
 * Peers are told apart by address (ZeroMQ's Peer-Address: the IP without the
 * port, so the workers of one host share a limit; "" for a peer without one, as
 * over ipc:// and inproc://). The table is fixed and embedded in its owner's
 * struct: when it is full, a new address takes the entry whose window started
 * longest ago, after that entry's count is said. Plain bookkeeping: no clock of
 * its own (callers pass now, in ms), no threads. */
#ifndef DCPS_LOGLIMIT_H
#define DCPS_LOGLIMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "proto/frame.h"

#define DCPS_LOGLIMIT_LINES 5         /* lines per peer and window */
#define DCPS_LOGLIMIT_WINDOW_MS 10000 /* a window's length */
#define DCPS_LOGLIMIT_PEERS 32        /* peers tracked at once */
#define DCPS_LOGLIMIT_CODES 32        /* codes 0 .. −31 counted apart; others as 0 */

typedef struct {
    bool used;
    char peer[DCPS_PEER_MAX];
    double start;        /* ms: the window's start */
    uint32_t logged;     /* lines allowed in this window */
    uint32_t suppressed; /* lines refused in this window */
    uint32_t codes[DCPS_LOGLIMIT_CODES]; /* the refused ones by −code */
} dcps_loglimit_peer_t;

typedef struct {
    dcps_loglimit_peer_t peer[DCPS_LOGLIMIT_PEERS];
    uint64_t suppressed; /* lines refused since init, all peers */
} dcps_loglimit_t;

void dcps_loglimit_init(dcps_loglimit_t *l);

/* Whether the line about a bad message with `code` from `peer` (NULL or "": no
 * address) at `now` may be written. If not, it is counted for the peer's summary
 * line. A peer whose window has ended gets its summary line written first (at
 * warning level) and a new window. */
bool dcps_loglimit_allow(dcps_loglimit_t *l, const char *peer, int code, double now);

/* Writes the summary line of every peer whose window has ended at `now`, and
 * forgets those peers; with `all`, of every peer (the router closes). */
void dcps_loglimit_flush(dcps_loglimit_t *l, double now, bool all);

#endif
