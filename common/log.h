/* dcps — logging to stderr.
 *
 * One line per event, on stderr. Under systemd (JOURNAL_STREAM is set) each line
 * starts with a syslog priority prefix ("<3>") so journald keeps the priority;
 * elsewhere it starts with a time stamp, the program's identity and the level
 * name. Lines above the current level are not formatted at all. */
#ifndef DCPS_LOG_H
#define DCPS_LOG_H

#include <stdio.h>

/* syslog(3) priorities. */
enum {
    DCPS_LOG_ERR = 3,
    DCPS_LOG_WARNING = 4,
    DCPS_LOG_NOTICE = 5,
    DCPS_LOG_INFO = 6,
    DCPS_LOG_DEBUG = 7,
};

extern int dcps_log_level;

/* Sets the identity shown in each line ("dcps-server[1]"); copied. The output
 * format is chosen here, from JOURNAL_STREAM. */
void dcps_log_init(const char *ident);

/* Lines with a priority above level are dropped. */
void dcps_log_set_level(int level);

/* Parses "err", "warning", "notice", "info" or "debug"; -1 if none of them. */
int dcps_log_level_parse(const char *name);

/* Writes the line to `out` instead of stderr (tests); NULL restores stderr. */
void dcps_log_set_stream(FILE *out);

void dcps_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Formats a sentence into err[0, errlen) (nothing if err is NULL or errlen 0) and
 * returns code, so that a failing check is one line: return dcps_say(...). */
int dcps_say(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define dcps_log(level, ...)                                                       \
    do {                                                                           \
        if ((level) <= dcps_log_level)                                             \
            dcps_log_write((level), __VA_ARGS__);                                  \
    } while (0)

#define DCPS_ERR(...) dcps_log(DCPS_LOG_ERR, __VA_ARGS__)
#define DCPS_WARN(...) dcps_log(DCPS_LOG_WARNING, __VA_ARGS__)
#define DCPS_NOTICE(...) dcps_log(DCPS_LOG_NOTICE, __VA_ARGS__)
#define DCPS_INFO(...) dcps_log(DCPS_LOG_INFO, __VA_ARGS__)
#define DCPS_DEBUG(...) dcps_log(DCPS_LOG_DEBUG, __VA_ARGS__)

#endif
