/* dcps tests — a shard's checkpoints on a small, then full, file system.
 *
 * checkpoint_dir is a tmpfs of 1,100 KB mounted in a mount namespace of this
 * test's own (so nothing outside sees it); a checkpoint of this job is about
 * 400 KB. With checkpoint_keep = 2 the shard must fit: it makes room before it
 * writes, so it never needs a third file. Then, with checkpoint_keep = 1 (which
 * keeps the only checkpoint until the new one is in place), the test fills the
 * file system: every checkpoint fails, each failure is logged with the free space and
 * counted in dcps_checkpoint_failures_total, and the shard goes on serving its
 * worker to the end. A restart restores the newest good one and says how old
 * it is. Where this process may not mount (no CAP_SYS_ADMIN, a container), the
 * test is skipped with status 77. The second test gives a sync job of two
 * shards a shard whose checkpoint_dir is that tmpfs, then makes it read-only. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tests/check_run.h"
#include "tests/harness.h"

static char ckpt[512]; /* the tmpfs */

static void teardown(void)
{
    h_cleanup();
}

static int count_of(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what))
        n++;
    return n;
}

static int files_in(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name), s = strlen(suffix);
        n += len > s && strcmp(e->d_name + len - s, suffix) == 0;
    }
    closedir(d);
    return n;
}

/* Waits up to 20 s until text occurs `times` times in the file at path. */
static bool wait_count(const char *path, const char *text, int times)
{
    for (int i = 0; i < 400; i++) {
        if (count_of(h_slurp(path), text) >= times)
            return true;
        nanosleep(&(struct timespec){0, 50000000}, NULL);
    }
    return false;
}

/* Fills the file system of dir, appending to one file; returns its path. */
static const char *fill(const char *dir)
{
    static char path[600];
    static char chunk[4096];
    snprintf(path, sizeof path, "%s/filler", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    ck_assert_int_ge(fd, 0);
    while (write(fd, chunk, sizeof chunk) > 0)
        ;
    ck_assert_int_eq(errno, ENOSPC);
    close(fd);
    return path;
}

START_TEST(checkpoints_fit_in_keep_files_and_a_full_disk_is_counted_and_survived)
{
    int port = h_free_port();
    char text[1024], ep[256], shards[300];
    ck_assert_int_gt(port, 0);
    /* 100,000 parameters (400 KB a checkpoint), SGD, one worker of emulated
     * compute: 8 epochs of 200 steps, a few seconds at 5 ms a step. */
    snprintf(text, sizeof text,
             "[job]\nname = diskfull\nworkers = 1\n"
             "[servers]\nshards = tcp://127.0.0.1:*\n"
             "[model]\nparams = 100000\n"
             "[data]\nbatch_size = 32\nepochs = 8\ntrain_limit = 6400\n"
             "[worker]\ncompute_ms = 5\nlog_every = 50\n"
             "[server]\ncheckpoint_dir = %s\ncheckpoint_every = 1\ncheckpoint_keep = 2\n"
             "metrics_port = %d\n",
             ckpt, port);
    static char job[512]; /* h_write's path is in a rotating buffer */
    snprintf(job, sizeof job, "%s", h_write("job.ini", text));
    pid_t srv = h_server(job, 0, ep);
    ck_assert_int_gt(srv, 0);
    snprintf(shards, sizeof shards, "servers.shards=%s", ep);
    const char *argv[] = {"--config", job, "--rank", "0", "--set", shards, NULL};
    pid_t w = h_spawn("dcps-worker", "w0", argv);
    const char *log = h_path("server0", "err");

    /* Room for two and no more: three good checkpoints in a row, no failure. */
    ck_assert_msg(wait_count(log, "periodic checkpoint", 3), "the shard said: %s", h_slurp(log));
    ck_assert_msg(!strstr(h_slurp(log), "failed"), "the shard said: %s", h_slurp(log));
    ck_assert_int_le(files_in(ckpt, ".ckpt"), 2);
    ck_assert_double_eq(h_metric(port, "dcps_checkpoint_failures_total{shard=\"0\"}"), 0);

    /* Full, with checkpoint_keep = 1 (a reload): the only checkpoint stays
     * until a new one is in place, so there is no room for the new one. Each
     * try fails, is logged with the free space, and is counted. */
    strstr(text, "checkpoint_keep = 2")[18] = '1';
    ck_assert_str_eq(h_write("job.ini", text), job);
    kill(srv, SIGHUP);
    ck_assert_msg(wait_count(log, "reload:", 1), "the shard said: %s", h_slurp(log));
    const char *filler = NULL;
    for (int i = 0; i < 200 && count_of(h_slurp(log), "periodic checkpoint of version") < 2; i++) {
        filler = fill(ckpt); /* again: the last good write pruned its predecessor */
        nanosleep(&(struct timespec){0, 100000000}, NULL);
    }
    ck_assert_msg(count_of(h_slurp(log), "periodic checkpoint of version") >= 2,
                  "the shard said: %s", h_slurp(log));
    const char *line = strstr(h_slurp(log), "periodic checkpoint of version");
    ck_assert_msg(strstr(line, "failed") && strstr(line, "free in") &&
                      strstr(line, "the newest good one is version"),
                  "the failure said: %.400s", line);
    /* The metrics are published every second or so. */
    double failures = 0;
    for (int i = 0; i < 50 && !(failures >= 2); i++) {
        nanosleep(&(struct timespec){0, 100000000}, NULL);
        failures = h_metric(port, "dcps_checkpoint_failures_total{shard=\"0\"}");
    }
    ck_assert_msg(failures >= 2, "dcps_checkpoint_failures_total %g", failures);
    ck_assert_double_ge(h_metric(port, "dcps_checkpoint_age_seconds{shard=\"0\"}"), 1);

    /* The shard serves its worker to the end meanwhile. */
    int st = h_wait(w, 120000);
    ck_assert_msg(st == 0, "the worker exited with %d: %s", st, h_slurp(h_path("w0", "err")));

    /* Room again: the last checkpoint is written, and a restart restores it
     * and says how old it is. */
    ck_assert_int_eq(unlink(filler), 0);
    ck_assert_int_eq(h_stop(srv, 20000), 0);
    ck_assert_int_le(files_in(ckpt, ".ckpt"), 2);
    sleep(1);
    pid_t again = h_spawn("dcps-server",
                          "server0b", (const char *[]){"--config", job, "--shard", "0", NULL});
    ck_assert_msg(wait_count(h_path("server0b", "err"), "restored", 1), "the restart said: %s",
                  h_slurp(h_path("server0b", "err")));
    const char *r = strstr(h_slurp(h_path("server0b", "err")), "restored");
    ck_assert_msg(strstr(r, "it was written") && strstr(r, " s ago"), "the restart said: %.300s",
                  r);
    ck_assert_int_eq(h_stop(again, 20000), 0);
}
END_TEST

/* The newest checkpoint version in dir of shard `shard` (its file names:
 * shard-<index>-<seq>-v<version>.ckpt), 0 if none. */
static unsigned long long newest_in(const char *dir, int shard, int *files)
{
    char prefix[32];
    unsigned long long best = 0;
    snprintf(prefix, sizeof prefix, "shard-%d-", shard);
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    *files = 0;
    for (struct dirent *e; (e = readdir(d));) {
        const char *v = strstr(e->d_name, "-v");
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 || !v || len < 5 ||
            strcmp(e->d_name + len - 5, ".ckpt") != 0)
            continue;
        (*files)++;
        unsigned long long version = strtoull(v + 2, NULL, 10);
        if (version > best)
            best = version;
    }
    closedir(d);
    return best;
}

/* Whether dir holds shard `shard`'s checkpoint of version. */
static bool holds(const char *dir, int shard, unsigned long long version)
{
    char name[64];
    snprintf(name, sizeof name, "-v%012llu.ckpt", version);
    DIR *d = opendir(dir);
    bool found = false;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name), n = strlen(name);
        found |= strncmp(e->d_name, "shard-", 6) == 0 && atoi(e->d_name + 6) == shard &&
                 len > n && strcmp(e->d_name + len - n, name) == 0;
    }
    if (d)
        closedir(d);
    return found;
}

/* A sync job of two shards whose shard 1 cannot write checkpoints any more (its
 * checkpoint_dir is the tmpfs, made read-only): shard 0 keeps writing its own, with
 * checkpoint_keep = 1, but never removes its checkpoint of shard 1's newest
 * version, the newest both hold; so after everything is killed and started
 * again, both shards resume there, instead of waiting for a version shard 0
 * pruned. */
START_TEST(a_sync_job_keeps_the_checkpoint_every_shard_holds_when_one_cannot_write)
{
    char text[1024], dir0[512], ep[2][256], shards[600];
    static char job0[512], job1[512];
    snprintf(dir0, sizeof dir0, "%s/ckpt0", h_dir());
    DIR *d = opendir(ckpt); /* what the test before left on the tmpfs */
    for (struct dirent *e; d && (e = readdir(d));) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", ckpt, e->d_name);
        if (e->d_name[0] != '.')
            unlink(path);
    }
    if (d)
        closedir(d);
    for (int s = 0; s < 2; s++) {
        snprintf(text, sizeof text,
                 "[job]\nname = common\nworkers = 1\nmode = sync\n"
                 "[servers]\nshards = tcp://127.0.0.1:*, tcp://127.0.0.1:*\n"
                 "[model]\nparams = 50000\n"
                 "[data]\nbatch_size = 32\nepochs = 400\ntrain_limit = 6400\n"
                 "[worker]\ncompute_ms = 5\nlog_every = 50\n"
                 "[server]\ncheckpoint_dir = %s\ncheckpoint_every = 1\ncheckpoint_keep = 1\n",
                 s ? ckpt : dir0);
        snprintf(s ? job1 : job0, sizeof job0, "%s", h_write(s ? "common1.ini" : "common0.ini", text));
    }
    pid_t srv[2];
    for (int s = 0; s < 2; s++) {
        srv[s] = h_server(s ? job1 : job0, s, ep[s]);
        ck_assert_int_gt(srv[s], 0);
    }
    snprintf(shards, sizeof shards, "servers.shards=%s,%s", ep[0], ep[1]);
    const char *argv[] = {"--config", job0, "--rank", "0", "--set", shards, NULL};
    pid_t w = h_spawn("dcps-worker", "w0", argv);
    const char *log0 = h_path("server0", "err"), *log1 = h_path("server1", "err");
    ck_assert_msg(wait_count(log1, "periodic checkpoint", 2), "shard 1 said: %s", h_slurp(log1));

    /* Shard 1's file system read-only: its writes fail from now on. */
    ck_assert_int_eq(mount("none", ckpt, NULL, MS_REMOUNT | MS_RDONLY, "size=1100k"), 0);
    ck_assert_msg(wait_count(log1, "failed", 1), "shard 1 said: %.300s", h_slurp(log1));
    int files;
    unsigned long long common = newest_in(ckpt, 1, &files);
    ck_assert_uint_gt(common, 0);
    /* Shard 0 goes on writing newer ones, and keeps that one too. */
    int written = count_of(h_slurp(log0), "periodic checkpoint");
    ck_assert_msg(wait_count(log0, "periodic checkpoint", written + 3), "shard 0 said: %s",
                  h_slurp(log0));
    ck_assert_uint_gt(newest_in(dir0, 0, &files), common);
    ck_assert_msg(holds(dir0, 0, common), "shard 0 removed version %llu, the newest shard 1 holds",
                  common);
    ck_assert_int_eq(files, 2); /* keep = 1, and the common one */

    /* A power cut, then everything again: both resume at that version. */
    kill(w, SIGKILL);
    for (int s = 0; s < 2; s++)
        kill(srv[s], SIGKILL);
    h_wait(w, 10000);
    for (int s = 0; s < 2; s++)
        h_wait(srv[s], 10000);
    ck_assert_int_eq(mount("none", ckpt, NULL, MS_REMOUNT, "size=1100k"), 0);
    for (int s = 0; s < 2; s++) {
        char tag[16];
        snprintf(tag, sizeof tag, "server%d", s);
        unlink(h_path(tag, "err"));
        srv[s] = h_server(s ? job1 : job0, s, ep[s]);
        ck_assert_int_gt(srv[s], 0);
    }
    char want[96];
    snprintf(want, sizeof want, "every shard resumes at version %llu", common);
    ck_assert_msg(wait_count(log0, want, 1), "shard 0 said: %s", h_slurp(log0));
    for (int s = 0; s < 2; s++)
        h_stop(srv[s], 20000);
}
END_TEST

/* A tmpfs of 1,100 KB at ckpt in a mount namespace of this process (and its
 * children) only. Returns false where mounting is not allowed. */
static bool mount_small_fs(void)
{
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", h_dir());
    if (mkdir(ckpt, 0755) != 0)
        return false;
    if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("dcps-test", ckpt, "tmpfs", 0, "size=1100k") != 0) {
        printf("SKIP: cannot mount a tmpfs here (%s): the full-disk test needs CAP_SYS_ADMIN\n",
               strerror(errno));
        return false;
    }
    return true;
}

int main(void)
{
    if (!mount_small_fs())
        return 77;
    Suite *s = suite_create("disk_full");
    TCase *tc = tcase_create("checkpoints");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, checkpoints_fit_in_keep_files_and_a_full_disk_is_counted_and_survived);
    tcase_add_test(tc, a_sync_job_keeps_the_checkpoint_every_shard_holds_when_one_cannot_write);
    suite_add_tcase(s, tc);
    int status = dcps_test_run(s);
    /* h_dir() goes when this process exits with status 0, but not while the
     * tmpfs is mounted inside it. */
    umount2(ckpt, MNT_DETACH);
    return status;
}
