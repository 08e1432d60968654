/* dcps — systemd notification (sd_notify), a no-op without libsystemd or when
 * not started by systemd (NOTIFY_SOCKET unset). */
#ifndef DCPS_NOTIFY_H
#define DCPS_NOTIFY_H

#include <stdbool.h>
#include <stdint.h>

/* Sends a state string such as "READY=1\nSTATUS=serving". */
void dcps_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Whether a service manager listens (NOTIFY_SOCKET set and libsystemd built in). */
bool dcps_notify_listening(void);

/* The watchdog interval the service manager asks for (WatchdogSec=), in
 * microseconds: WATCHDOG=1 is due at least this often. 0: no watchdog. */
uint64_t dcps_notify_watchdog_usec(void);

#endif
