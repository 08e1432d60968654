/* dcps benchmarks — what every benchmark program needs: a clock, the median of
 * timings, and the CPU's name for the `# machine:` line. */
#ifndef DCPS_BENCH_H
#define DCPS_BENCH_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>

/* Seconds on the monotonic clock. */
static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline int bench_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of t[0..n) (sorts t). */
static inline double bench_median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof t[0], bench_cmp);
    return t[n / 2];
}

/* The CPU's model name from /proc/cpuinfo into buf ("unknown" if none). */
static inline void bench_cpu_model(char *buf, size_t len)
{
    char line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");
    snprintf(buf, len, "unknown");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            snprintf(buf, len, "%s", strchr(line, ':') + 2);
            buf[strcspn(buf, "\n")] = 0;
            break;
        }
    if (f)
        fclose(f);
}

/* CPU seconds that process pid has used, every thread (pid 0: this process), or
 * -1 if it cannot be read. */
static inline double bench_cpu_seconds(pid_t pid)
{
    clockid_t id = CLOCK_PROCESS_CPUTIME_ID;
    struct timespec ts;
    if ((pid != 0 && clock_getcpuclockid(pid, &id) != 0) || clock_gettime(id, &ts) != 0)
        return -1;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The first line of file path, without its newline, into buf (len bytes).
 * Returns 0, or -1 if the file cannot be read or is empty. */
static inline int bench_first_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char *ok = fgets(buf, (int)len, f);
    fclose(f);
    if (!ok)
        return -1;
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

/* Kills the child *pid (if positive) with SIGKILL, reaps it and sets *pid to 0.
 * Async-signal-safe: exit and signal paths call it. */
static inline void bench_kill_child(volatile pid_t *pid)
{
    if (*pid > 0) {
        kill(*pid, SIGKILL);
        waitpid(*pid, NULL, 0);
        *pid = 0;
    }
}

/* Makes a fresh directory dcps-NAME-XXXXXX under TMPDIR (/tmp when unset or
 * empty) into dir (len bytes). Returns 0, or -1 with a sentence on stderr and
 * dir emptied. */
static inline int bench_scratch_dir(const char *name, char *dir, size_t len)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, len, "%s/dcps-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
    if (!mkdtemp(dir)) {
        fprintf(stderr, "bench/%s: cannot create %s: %s\n", name, dir, strerror(errno));
        dir[0] = '\0';
        return -1;
    }
    return 0;
}

#endif
