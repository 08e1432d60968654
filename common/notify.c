/* dcps — systemd notification; see notify.h. */
#include "common/notify.h"

#include <stdarg.h>
#include <stdio.h>

#include "config.h"
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
