/* dcps — a limit on the log lines about one peer's bad messages; see loglimit.h. */
#include "server/loglimit.h"

#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"

void dcps_loglimit_init(dcps_loglimit_t *l)
{
    memset(l, 0, sizeof *l);
}

/* Says what e's window suppressed, if anything, and forgets it. */
static void say(dcps_loglimit_peer_t *e, double now)
{
    char codes[256];
    size_t at = 0;
    codes[0] = '\0';
    for (int c = 0; c < DCPS_LOGLIMIT_CODES && at < sizeof codes; c++)
        if (e->codes[c]) {
            int n = snprintf(codes + at, sizeof codes - at, "%s%s %u", at ? ", " : "",
                             c ? dcps_errname(-c) : "UNKNOWN", e->codes[c]);
            if (n < 0)
                break;
            at += (size_t)n;
        }
    if (e->suppressed)
        DCPS_WARN("%u more bad message%s from %s suppressed in the last %.0f s (codes %s)",
                  e->suppressed, e->suppressed == 1 ? "" : "s", e->peer[0] ? e->peer : "?",
                  (now - e->start) / 1000.0, codes);
    memset(e, 0, sizeof *e);
}

bool dcps_loglimit_allow(dcps_loglimit_t *l, const char *peer, int code, double now)
{
    dcps_loglimit_peer_t *e = NULL, *oldest = &l->peer[0], *unused = NULL;
    if (!peer)
        peer = "";
    for (int i = 0; i < DCPS_LOGLIMIT_PEERS && !e; i++) {
        dcps_loglimit_peer_t *p = &l->peer[i];
        if (!p->used) {
            if (!unused)
                unused = p;
        } else if (strncmp(p->peer, peer, sizeof p->peer - 1) == 0) {
            e = p;
        } else if (p->start < oldest->start || !oldest->used) {
            oldest = p;
        }
    }
    if (e && now - e->start >= DCPS_LOGLIMIT_WINDOW_MS)
        say(e, now); /* its window is over: e is unused now, and starts again */
    if (!e || !e->used) {
        if (!e)
            e = unused ? unused : oldest;
        if (e->used)
            say(e, now);
        e->used = true;
        snprintf(e->peer, sizeof e->peer, "%s", peer);
        e->start = now;
    }
    if (e->logged < DCPS_LOGLIMIT_LINES) {
        e->logged++;
        return true;
    }
    int c = -code;
    e->suppressed++;
    e->codes[c > 0 && c < DCPS_LOGLIMIT_CODES ? c : 0]++;
    l->suppressed++;
    return false;
}

void dcps_loglimit_flush(dcps_loglimit_t *l, double now, bool all)
{
    for (int i = 0; i < DCPS_LOGLIMIT_PEERS; i++) {
        dcps_loglimit_peer_t *e = &l->peer[i];
        if (e->used && (all || now - e->start >= DCPS_LOGLIMIT_WINDOW_MS))
            say(e, now);
    }
}
