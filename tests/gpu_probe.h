/* dcps tests — asking whether a GPU is usable, for the GPU suites. */
#ifndef DCPS_TEST_GPU_PROBE_H
#define DCPS_TEST_GPU_PROBE_H

#include <check.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/gpu.h"

/* Whether a GPU is usable (and, if extra is not NULL, extra() returns 0 on it),
 * asked in a child process: a CUDA context does not survive fork(), and Check
 * forks once per test, so the parent must not initialise CUDA itself. Prints
 * the GPU's name. Returns 1 (usable), 0 (not), or −1 when it could not ask. */
static inline int dcps_test_gpu_probe(int (*extra)(void))
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char name[256];
        int n = dcps_gpu_count(), ok = 0;
        if (n > 0 && dcps_gpu_name(name, sizeof name) == 0) {
            ok = !extra || extra() == 0;
            printf("GPU: %s (%d usable)%s\n", name, n, ok ? "" : "; not usable for this suite");
        }
        fflush(stdout);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* The main() of a suite that needs a GPU: exit status 77 (SKIP) without one,
 * else runs s (in this process if the probe could not fork) and returns 0 or 1. */
static inline int dcps_test_run_gpu(Suite *s)
{
    int gpu = dcps_test_gpu_probe(NULL);
    if (gpu < 0)
        gpu = dcps_gpu_count() > 0 ? -1 : 0;
    if (gpu == 0) {
        printf("no GPU: skipped\n");
        return 77;
    }
    SRunner *sr = srunner_create(s);
    if (gpu < 0)
        srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

#endif
