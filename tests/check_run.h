/* dcps tests — the common end of every suite's main(). */
#ifndef DCPS_TEST_CHECK_RUN_H
#define DCPS_TEST_CHECK_RUN_H

#include <check.h>
#include <stdio.h>

#include "tests/scratch.h"

/* Runs every test of s with the summary line printed, each in a process of its
 * own (Check's default, which CK_FORK=no in the environment turns off) unless
 * forking is 0, inside a scratch directory for the run that is gone afterwards
 * unless a test failed (tests/scratch.h). Frees the runner. Returns the number
 * of tests that did not pass, or -1 when the scratch directory could not be
 * made (then no test ran). */
static inline int dcps_test_run_all(Suite *s, int forking)
{
    SRunner *sr = srunner_create(s);
    dcps_scratch_run_t run;
    int failed = -1;

    if (dcps_scratch_run_begin(&run) != 0) {
        perror("dcps-test: the run's scratch directory");
        goto fail_scratch;
    }
    if (!forking)
        srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    dcps_scratch_run_end(&run, failed);
fail_scratch:
    srunner_free(sr);
    return failed;
}

/* Runs every test of s as dcps_test_run_all does, in their own processes, and
 * returns main()'s exit status: 0 when all passed, else 1. */
static inline int dcps_test_run(Suite *s)
{
    return dcps_test_run_all(s, 1) ? 1 : 0;
}

#endif
