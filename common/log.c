/* dcps — logging to stderr; see log.h. */
#include "common/log.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

int dcps_log_level = DCPS_LOG_INFO;

static char ident[64] = "dcps";
static int journal; /* 1: "<N>" prefixes for journald; 0: human format */
static FILE *stream;

static const char *const names[] = {
    [DCPS_LOG_ERR] = "err",
    [DCPS_LOG_WARNING] = "warning",
    [DCPS_LOG_NOTICE] = "notice",
    [DCPS_LOG_INFO] = "info",
    [DCPS_LOG_DEBUG] = "debug",
};

void dcps_log_init(const char *id)
{
    snprintf(ident, sizeof ident, "%s", id);
    journal = getenv("JOURNAL_STREAM") != NULL;
}

void dcps_log_set_level(int level)
{
    if (level < DCPS_LOG_ERR)
        level = DCPS_LOG_ERR;
    if (level > DCPS_LOG_DEBUG)
        level = DCPS_LOG_DEBUG;
    dcps_log_level = level;
}

int dcps_log_level_parse(const char *name)
{
    for (int l = DCPS_LOG_ERR; l <= DCPS_LOG_DEBUG; l++)
        if (strcasecmp(name, names[l]) == 0)
            return l;
    return -1;
}

void dcps_log_set_stream(FILE *out)
{
    stream = out;
}

void dcps_log_write(int level, const char *fmt, ...)
{
    FILE *out = stream ? stream : stderr;
    char line[1024];
    va_list ap;
    int n;

    if (level < DCPS_LOG_ERR)
        level = DCPS_LOG_ERR;
    if (level > DCPS_LOG_DEBUG)
        level = DCPS_LOG_DEBUG;
    if (journal) {
        n = snprintf(line, sizeof line, "<%d>", level);
    } else {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        localtime_r(&ts.tv_sec, &tm);
        n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld %s %s: ", tm.tm_hour,
                     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, ident, names[level]);
    }
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* One fputs per line, so lines from several threads do not interleave. */
    fprintf(out, "%s\n", line);
    fflush(out);
}

int dcps_say(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}
