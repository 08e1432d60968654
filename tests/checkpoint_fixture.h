/* dcps tests — the fixture both checkpoint suites share (tests/test_checkpoint.c,
 * the files; tests/daemon/test_checkpoint.c, through the daemon): what dcps logs
 * in this process captured in memory, a checkpoint directory per test, and what
 * a test left removed by its teardown. Static inline, as tests/check_run.h, so
 * that a suite needs no extra source to link; its setup and teardown go to
 * tcase_add_checked_fixture. */
#ifndef DCPS_TEST_CHECKPOINT_FIXTURE_H
#define DCPS_TEST_CHECKPOINT_FIXTURE_H

#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "common/log.h"
#include "tests/harness.h"

static char *logbuf;
static size_t loglen;
static FILE *logstream;

/* Removes what a test left in h_dir() (the directory stays: without fork,
 * every test shares it). */
static inline int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag;
    return ftw->level > 0 ? remove(path) : 0;
}

static inline void setup(void)
{
    logstream = open_memstream(&logbuf, &loglen);
    ck_assert_ptr_nonnull(logstream);
    dcps_log_set_stream(logstream);
}

static inline void teardown(void)
{
    h_cleanup();
    dcps_log_set_stream(NULL);
    fclose(logstream);
    free(logbuf);
    nftw(h_dir(), remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* What was logged so far. */
static inline const char *logged(void)
{
    fflush(logstream);
    return logbuf;
}

/* A checkpoint directory of this test, created. */
static inline const char *ckdir(void)
{
    static char d[512];
    snprintf(d, sizeof d, "%s/ckpt", h_dir());
    mkdir(d, 0755);
    return d;
}

#endif
