/* dcps — the one monotonic clock of the processes.
 *
 * CLOCK_MONOTONIC: never jumps with the wall clock, so intervals and timeouts
 * measured with it are right across NTP steps. Its zero is arbitrary: only
 * differences mean anything. (The shard's loop keeps its own cached time,
 * uv_now, for its timers; these are for everything else.) */
#ifndef DCPS_CLOCK_H
#define DCPS_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds of the monotonic clock. */
static inline uint64_t dcps_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The same in microseconds, milliseconds and seconds. */
static inline int64_t dcps_now_us(void)
{
    return (int64_t)(dcps_now_ns() / 1000u);
}

static inline double dcps_now_ms(void)
{
    return (double)dcps_now_ns() / 1e6;
}

static inline double dcps_now_s(void)
{
    return (double)dcps_now_ns() / 1e9;
}

#endif
