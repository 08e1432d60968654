/* dcps tests — the common end of every suite's main(). */
#ifndef DCPS_TEST_CHECK_RUN_H
#define DCPS_TEST_CHECK_RUN_H

#include <check.h>

/* Runs every test of s (each in its own process, Check's default) with the
 * summary line printed, frees the runner and returns main()'s exit status. */
static inline int dcps_test_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

#endif
