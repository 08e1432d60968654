/* dcps — systemd notification (sd_notify), a no-op without libsystemd or when
 * not started by systemd (NOTIFY_SOCKET unset). */
#ifndef DCPS_NOTIFY_H
#define DCPS_NOTIFY_H

/* Sends a state string such as "READY=1\nSTATUS=serving". */
void dcps_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
