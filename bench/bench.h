/* dcps benchmarks — what every benchmark program needs: a clock, the median of
 * timings, and the CPU's name for the `# machine:` line. */
#ifndef DCPS_BENCH_H
#define DCPS_BENCH_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

#endif
