/* dcps tests — asking whether a GPU is usable, for the GPU suites. */
#ifndef DCPS_TEST_GPU_PROBE_H
#define DCPS_TEST_GPU_PROBE_H

#include <check.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/gpu.h"
#include "tests/check_run.h"

/* Built with DCPS_EMU, a GPU suite runs under the SIMT emulator of
 * tests/cuda-emu instead (the tests/test_*_gpu_emu and
 * tests/daemon/test_*_gpu_emu programs): DCPS_TEST_SIZE picks the size it can
 * afford, DCPS_TEST_EMU_SWEEP() at the top of main() runs the suite under every
 * configuration of dcps_test_emu_configs, and the test sources may add
 * emulator-only cases (tests/cuda-emu/emu_hooks.h). */
#ifdef DCPS_EMU
#define DCPS_TEST_SIZE(gpu, emu) (emu)

/* Interleaving seeds and SM counts: the emulator's default (2), an H100's 132,
 * and an odd count; each with its own seed. */
static const char *const dcps_test_emu_configs[][2] = {{"1", "2"}, {"2", "132"}, {"3", "7"}};

/* Where the stand-in cuBLAS is, relative to the program's own folder: a suite in
 * tests/daemon/ is built with DCPS_TEST_EMU_FAKE "../cuda-emu/fake". */
#ifndef DCPS_TEST_EMU_FAKE
#define DCPS_TEST_EMU_FAKE "cuda-emu/fake"
#endif

/* First makes sure that the stand-in cuBLAS of tests/cuda-emu/fake comes first
 * in LD_LIBRARY_PATH (the dynamic loader reads it at start, so the program
 * runs itself again with it). Then, if EMU_SEED is set, returns -1: main() goes
 * on to run the suite once, under that seed. Else it runs this program again
 * once per configuration with EMU_SEED and EMU_SMS set, and returns main()'s
 * exit status: 1 if any run failed, 77 if all skipped, else 0. */
static inline int dcps_test_emu_sweep(void)
{
    char self[PATH_MAX], dir[PATH_MAX], fake[PATH_MAX + 64], path[2 * PATH_MAX + 64];
    ssize_t len;
    int worst = 77;
    if ((len = readlink("/proc/self/exe", self, sizeof self - 1)) < 0) {
        perror("readlink /proc/self/exe");
        return 1;
    }
    self[len] = '\0';
    memcpy(dir, self, (size_t)len + 1);
    snprintf(fake, sizeof fake, "%s/" DCPS_TEST_EMU_FAKE, dirname(dir));
    const char *old = getenv("LD_LIBRARY_PATH");
    if (!old || strncmp(old, fake, strlen(fake)) != 0) {
        snprintf(path, sizeof path, "%s%s%s", fake, old && *old ? ":" : "", old ? old : "");
        setenv("LD_LIBRARY_PATH", path, 1);
        fflush(stdout);
        execl(self, self, (char *)NULL);
        perror(self);
        return 1;
    }
    if (getenv("EMU_SEED"))
        return -1;
    for (size_t i = 0; i < sizeof dcps_test_emu_configs / sizeof dcps_test_emu_configs[0]; i++) {
        int status = 0;
        printf("emulator: EMU_SEED=%s EMU_SMS=%s\n", dcps_test_emu_configs[i][0],
               dcps_test_emu_configs[i][1]);
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            setenv("EMU_SEED", dcps_test_emu_configs[i][0], 1);
            setenv("EMU_SMS", dcps_test_emu_configs[i][1], 1);
            execl(self, self, (char *)NULL);
            perror(self);
            _exit(1);
        }
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
            (WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 77)) {
            printf("emulator: EMU_SEED=%s EMU_SMS=%s failed\n", dcps_test_emu_configs[i][0],
                   dcps_test_emu_configs[i][1]);
            worst = 1;
        } else if (WEXITSTATUS(status) == 0 && worst == 77) {
            worst = 0;
        }
    }
    return worst;
}
#define DCPS_TEST_EMU_SWEEP()                                                                      \
    do {                                                                                           \
        int sweep_ = dcps_test_emu_sweep();                                                        \
        if (sweep_ >= 0)                                                                           \
            return sweep_;                                                                         \
    } while (0)
#else
#define DCPS_TEST_SIZE(gpu, emu) (gpu)
#define DCPS_TEST_EMU_SWEEP() ((void)0)
#endif

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

/* The main() of a suite that needs a GPU (on which extra(), if not NULL,
 * returns 0): exit status 77 (SKIP) without one, else runs s (in this process
 * if the probe could not fork) and returns 0 or 1. */
static inline int dcps_test_run_gpu_if(Suite *s, int (*extra)(void))
{
    int gpu = dcps_test_gpu_probe(extra);
    if (gpu < 0)
        gpu = dcps_gpu_count() > 0 ? -1 : 0;
    if (gpu == 0) {
        printf("no GPU: skipped\n");
        return 77;
    }
    return dcps_test_run_all(s, gpu > 0) ? 1 : 0;
}

/* dcps_test_run_gpu_if for a suite that needs only a GPU. */
static inline int dcps_test_run_gpu(Suite *s)
{
    return dcps_test_run_gpu_if(s, NULL);
}

#endif
