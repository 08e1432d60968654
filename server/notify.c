/* dcps — systemd notification; see notify.h. */
#include "server/notify.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <config.h> /* autoconf's; "config.h" here would be common/config.h */
#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

void dcps_notify(const char *fmt, ...)
{
#ifdef HAVE_SYSTEMD
    char state[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(state, sizeof state, fmt, ap);
    va_end(ap);
    sd_notify(0, state);
#else
    (void)fmt;
#endif
}

bool dcps_notify_listening(void)
{
#ifdef HAVE_SYSTEMD
    const char *sock = getenv("NOTIFY_SOCKET");
    return sock && *sock;
#else
    return false;
#endif
}

uint64_t dcps_notify_watchdog_usec(void)
{
#ifdef HAVE_SYSTEMD
    uint64_t usec = 0;
    return sd_watchdog_enabled(0, &usec) > 0 ? usec : 0;
#else
    return 0;
#endif
}
