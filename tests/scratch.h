/* dcps tests — scratch directories, and who removes them.
 *
 * A passing test leaves nothing in TMPDIR; a failing one keeps its directory
 * and the directory's path is printed once. Each directory has one owner:
 *
 * - The run of a suite (dcps_test_run_all in tests/check_run.h) owns one
 *   directory, $TMPDIR/dcps-test-XXXXXX, and points TMPDIR at it while the
 *   tests run, so that whatever a test or a program it starts writes under
 *   TMPDIR lands inside. At the end it removes that directory if every test
 *   passed; otherwise it keeps it and prints the path of each thing left in it.
 * - A test's own directory (dcps_scratch_new; h_dir in tests/harness.c) is
 *   made inside the run's directory by the process that runs the test, which
 *   removes it when it exits with status 0. In Check's fork mode (the default)
 *   that happens for a passing test and for nothing else: the child calls
 *   exit(0) only after setup, test and teardown returned, while a failed
 *   assertion leaves with _exit(1), and a timeout or a crash by a signal, none
 *   of which runs exit handlers. Without fork, the status is main()'s: 0 when
 *   every test passed.
 *
 * The shell tests do the same through tests/scratch.sh, the Python tests
 * through python/tests/harness.py. Everything here is static inline, as in
 * tests/check_run.h, so that a suite needs no extra source to link. */
#ifndef DCPS_TEST_SCRATCH_H
#define DCPS_TEST_SCRATCH_H

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* A test's directory. `owner` is the process that made it: a process forked
 * from that one inherits the exit handler and must leave the directory to it. */
typedef struct {
    pid_t owner;
    char path[PATH_MAX];
} dcps_scratch_t;

/* The run of a suite: its directory and the TMPDIR it stands in for. */
typedef struct {
    char path[PATH_MAX];
    char *old_tmpdir; /* a copy; NULL when TMPDIR was not set */
} dcps_scratch_run_t;

static inline int dcps_scratch_remove_one_(const char *path, const struct stat *st, int flag,
                                           struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

/* Removes path and everything under it, without following links; a path that
 * is not there counts as removed. Returns 0, or -1 with errno set by the first
 * thing that could not be removed (what was removed before it stays removed). */
static inline int dcps_scratch_remove(const char *path)
{
    if (nftw(path, dcps_scratch_remove_one_, 16, FTW_DEPTH | FTW_PHYS) == 0)
        return 0;
    return errno == ENOENT ? 0 : -1;
}

/* dcps_scratch_new's exit handler: removes s->path when the process that made
 * it exits with 0 (passed) or 77 (skipped: nothing there a reader would want). */
static inline void dcps_scratch_at_exit_(int status, void *arg)
{
    const dcps_scratch_t *s = arg;
    if ((status == 0 || status == 77) && s->owner == getpid())
        dcps_scratch_remove(s->path);
}

/* Makes s->path a fresh directory $TMPDIR/test-XXXXXX (/tmp when TMPDIR is
 * unset or empty) that this process removes when it exits with status 0 or 77
 * and keeps otherwise. s must stay valid until the process exits (static
 * storage). Called again in the same process, s names the newer directory, and
 * the older one is left to the run's directory. Returns 0, or -1 with errno
 * set and nothing made. */
static inline int dcps_scratch_new(dcps_scratch_t *s)
{
    const char *tmp = getenv("TMPDIR");
    int n = snprintf(s->path, sizeof s->path, "%s/test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (n < 0 || (size_t)n >= sizeof s->path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (!mkdtemp(s->path))
        return -1;
    if (s->owner != getpid()) {
        s->owner = getpid();
        if (on_exit(dcps_scratch_at_exit_, s) != 0) {
            int e = errno;
            rmdir(s->path);
            s->owner = 0;
            errno = e;
            return -1;
        }
    }
    return 0;
}

/* Makes the run's directory, $TMPDIR/dcps-test-XXXXXX (/tmp when TMPDIR is
 * unset or empty), and sets TMPDIR to it until dcps_scratch_run_end. Returns 0,
 * or -1 with errno set, nothing made and TMPDIR unchanged. */
static inline int dcps_scratch_run_begin(dcps_scratch_run_t *run)
{
    const char *tmp = getenv("TMPDIR");
    int n =
        snprintf(run->path, sizeof run->path, "%s/dcps-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    run->old_tmpdir = NULL;
    if (n < 0 || (size_t)n >= sizeof run->path) {
        errno = ENAMETOOLONG;
        goto fail_name;
    }
    if (tmp && !(run->old_tmpdir = strdup(tmp)))
        goto fail_copy;
    if (!mkdtemp(run->path))
        goto fail_dir;
    if (setenv("TMPDIR", run->path, 1) != 0)
        goto fail_env;
    return 0;

fail_env:
    rmdir(run->path);
fail_dir:
    free(run->old_tmpdir);
    run->old_tmpdir = NULL;
fail_copy:
fail_name:
    return -1;
}

/* Gives TMPDIR back its value from before dcps_scratch_run_begin. If no test
 * failed (failed is 0), removes the run's directory with all it holds;
 * otherwise prints "kept: PATH" once for each thing left in it (the
 * directories of the tests that did not pass, and whatever they wrote
 * directly under TMPDIR) and keeps it, or removes it when nothing is left. */
static inline void dcps_scratch_run_end(dcps_scratch_run_t *run, int failed)
{
    if (run->old_tmpdir)
        setenv("TMPDIR", run->old_tmpdir, 1);
    else
        unsetenv("TMPDIR");
    free(run->old_tmpdir);
    run->old_tmpdir = NULL;

    if (!failed) {
        if (dcps_scratch_remove(run->path) != 0)
            printf("dcps-test: could not remove %s: %s\n", run->path, strerror(errno));
        return;
    }
    DIR *d = opendir(run->path);
    int kept = 0;
    if (!d) {
        printf("kept: %s (%s)\n", run->path, strerror(errno));
        return;
    }
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            printf("kept: %s/%s\n", run->path, e->d_name);
            kept++;
        }
    closedir(d);
    if (!kept)
        rmdir(run->path);
}

#endif
