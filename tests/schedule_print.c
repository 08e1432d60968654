/* dcps tests — f(t) of a job's schedule, for python/tests/test_schedule.py.
 *
 *   schedule_print N [section.key=value ...]
 *
 * loads the defaults with the overrides (as --set; [optimizer] lr is the base)
 * and prints one line per t = 0 … N − 1: t, f(t) and lr · f(t), both with 17
 * significant digits, which read back as the same doubles. Exit status 2 with
 * the load's sentence when the overrides are refused. */
#include "common/config.h"
#include "common/schedule.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    static dcps_config_t cfg;
    char err[512];
    if (argc < 2) {
        fprintf(stderr, "usage: %s N [section.key=value ...]\n", argv[0]);
        return 2;
    }
    uint64_t n = strtoull(argv[1], NULL, 10);
    if (dcps_config_load(&cfg, NULL, (const char *const *)argv + 2, (size_t)argc - 2, err,
                         sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    for (uint64_t t = 0; t < n; t++)
        printf("%" PRIu64 " %.17g %.17g\n", t, dcps_schedule_factor(&cfg.sched, cfg.lr, t),
               dcps_schedule_lr(&cfg.sched, cfg.lr, t));
    return 0;
}
