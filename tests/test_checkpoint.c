/* dcps — shard checkpoints (server/checkpoint.h): the CRC, a save and restore
 * that give the same state bit for bit (sessions and last pushes included), a
 * format 1 file read without sessions, the choice of the newest usable file,
 * refusals (flipped byte, truncation, another job, shard, size or rule),
 * pruning, no temporary file left, dense pulls after a restore, the checks of
 * the directory, the size of an unsized shard (params = auto) taken from a
 * file; then through the daemon: a restart serves the parameters it had,
 * recognises a retried push and the sessions it had, a worker whose session a
 * restarted shard does not know says HELLO again, an auto shard keeps the size
 * rank 0 gave, and a checkpoint_dir that is a file or holds only unusable
 * checkpoints stops it. */
#include <check.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/config.h"
#include "common/error.h"
#include "proto/frame.h"
#include "common/log.h"
#include "server/checkpoint.h"
#include "server/consistency.h"
#include "server/shard.h"
#include "tests/check_run.h"
#include "tests/harness.h"
#include "worker/internal.h"

#define MAXN 512

static char err[2048];
static char *logbuf;
static size_t loglen;
static FILE *logstream;

/* Removes what a test left in h_dir() (the directory stays: without fork,
 * every test shares it). */
static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag;
    return ftw->level > 0 ? remove(path) : 0;
}

static void setup(void)
{
    logstream = open_memstream(&logbuf, &loglen);
    ck_assert_ptr_nonnull(logstream);
    dcps_log_set_stream(logstream);
}

static void teardown(void)
{
    h_cleanup();
    dcps_log_set_stream(NULL);
    fclose(logstream);
    free(logbuf);
    nftw(h_dir(), remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* What was logged so far. */
static const char *logged(void)
{
    fflush(logstream);
    return logbuf;
}

/* A checkpoint directory of this test, created. */
static const char *ckdir(void)
{
    static char d[512];
    snprintf(d, sizeof d, "%s/ckpt", h_dir());
    mkdir(d, 0755);
    return d;
}

/* --- a shard and its consistency model, as the daemon holds them ----------------- */

typedef struct {
    dcps_config_t cfg;
    dcps_shard_t *s;
    dcps_consistency_t cons;
} box_t;

/* Shard `index` of a job of 220 parameters (layers 10,20) on 2 shards, 3
 * workers, DC-ASGD-a with delta pulls in async mode, unless the overrides in
 * extra (applied last) say otherwise. Parameters are not initialised. */
static void box_new_shard(box_t *b, const char *const *extra, size_t n_extra, int index)
{
    const char *ov[24] = {"job.name=ckpt",
                          "model.layers=10,20",
                          "servers.shards=tcp://127.0.0.1:1,tcp://127.0.0.1:2",
                          "job.workers=3",
                          "optimizer.kind=dcasgd",
                          "optimizer.dc_adaptive=true",
                          "compression.pull=delta",
                          "compression.density=0.1",
                          "optimizer.lr=0.1"};
    size_t n = 9;
    for (size_t i = 0; i < n_extra; i++)
        ov[n++] = extra[i];
    int rc = dcps_config_load(&b->cfg, NULL, ov, n, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    b->s = dcps_shard_new(&b->cfg, index, &rc);
    ck_assert_msg(b->s != NULL, "%s", dcps_strerror(rc));
    ck_assert_uint_le(dcps_shard_stats(b->s).n, MAXN);
    ck_assert_int_eq(dcps_consistency_init(&b->cons, b->cfg.mode, b->cfg.staleness, b->cfg.workers,
                                           b->cfg.dead_after_ms, 0),
                     0);
}

/* Shard 0 of that job. */
static void box_new(box_t *b, const char *const *extra, size_t n_extra)
{
    box_new_shard(b, extra, n_extra, 0);
}

static void box_free(box_t *b)
{
    dcps_shard_destroy(&b->s);
    dcps_consistency_free(&b->cons);
}

static void box_init(box_t *b)
{
    float w0[MAXN];
    for (size_t j = 0; j < dcps_shard_stats(b->s).n; j++)
        w0[j] = (float)sin(0.7 * (double)j);
    ck_assert_int_eq(dcps_shard_init(b->s, w0), 1);
    for (int r = 0; r < dcps_shard_stats(b->s).workers; r++) /* each rank said HELLO */
        dcps_shard_open_session(b->s, r, 0x5e55100000000000ull + (uint64_t)r);
}

/* Step i of a worker: a pull (every third a delta from the tag it holds), then
 * a dense or sparse push, as the router applies them in the job's mode. */
static void step(box_t *b, int i)
{
    dcps_shard_t *s = b->s;
    uint32_t r = (uint32_t)i % (uint32_t)dcps_shard_stats(s).workers;
    uint64_t seq = dcps_shard_session(s, r)->seq + 1;
    float g[MAXN], v[MAXN];
    uint32_t idx[MAXN];
    size_t k = 0;
    dcps_pull_t p;
    for (size_t j = 0; j < dcps_shard_stats(s).n; j++)
        g[j] = 0.1f * (float)sin(0.37 * (double)j + i);
    for (size_t j = (size_t)i % 3; j < dcps_shard_stats(s).n; j += 3, k++) {
        idx[k] = (uint32_t)(dcps_shard_stats(s).range.lo + j);
        v[k] = g[j];
    }
    bool holds = dcps_shard_stats(s).delta && i % 3 == 0;
    dcps_shard_pull(s, r, holds,
                    holds ? dcps_shard_view(s).tag[dcps_shard_view(s).mirror ? 0 : r] : 0, 0, false,
                    &p);
    if (b->cfg.mode == DCPS_MODE_SYNC) {
        ck_assert_int_eq(dcps_consistency_check_push(&b->cons, r, b->cons.round), DCPS_PUSH_ACCEPT);
        if (i % 2)
            dcps_shard_accumulate_sparse(s, r, seq, idx, v, k);
        else
            dcps_shard_accumulate_dense(s, r, seq, g);
        dcps_consistency_pushed(&b->cons, r, b->cons.round);
        if (dcps_consistency_round_full(&b->cons)) {
            dcps_shard_apply_round(s, b->cons.contributions);
            dcps_consistency_close_round(&b->cons);
        }
    } else {
        dcps_shard_note_staleness(
            s, dcps_shard_stats(s).version > 2 ? dcps_shard_stats(s).version - 2 : 0);
        if (i % 2)
            dcps_shard_apply_sparse(s, r, seq, idx, v, k);
        else
            dcps_shard_apply_dense(s, r, seq, g);
        dcps_consistency_pushed(&b->cons, r, b->cons.m[r].clock);
    }
}

static void train(box_t *b, int from, int steps)
{
    for (int i = from; i < from + steps; i++)
        step(b, i);
}

/* Everything a checkpoint carries is equal, bit for bit; with sessions false,
 * everything but the ranks' session records. */
static void assert_same_but(const box_t *a, const box_t *b, bool sessions)
{
    const dcps_shard_t *x = a->s, *y = b->s;
    const dcps_shard_stats_t sx = dcps_shard_stats(x), sy = dcps_shard_stats(y);
    dcps_span_t px[DCPS_SHARD_SPANS], py[DCPS_SHARD_SPANS];
    size_t k = dcps_shard_spans(x, px);
    ck_assert_uint_eq(sx.floats, sy.floats);
    ck_assert_uint_eq(dcps_shard_spans(y, py), k);
    for (size_t i = 0; i < k; i++) {
        ck_assert_uint_eq(px[i].n, py[i].n);
        ck_assert_int_eq(memcmp(px[i].p, py[i].p, px[i].n * sizeof *px[i].p), 0);
    }
    for (uint32_t r = 0; sessions && r < (uint32_t)sx.workers; r++) {
        const dcps_session_t *ax = dcps_shard_session(x, r), *ay = dcps_shard_session(y, r);
        ck_assert_uint_eq(ax->id, ay->id);
        ck_assert_int_eq(ax->pushed, ay->pushed);
        ck_assert_int_eq(ax->applied, ay->applied);
        ck_assert_uint_eq(ax->seq, ay->seq);
    }
    ck_assert_uint_eq(sx.version, sy.version);
    ck_assert_int_eq(sx.initialized, sy.initialized);
    ck_assert_uint_eq(sx.pushes, sy.pushes);
    ck_assert_uint_eq(sx.duplicates, sy.duplicates);
    ck_assert_uint_eq(sx.pulls, sy.pulls);
    ck_assert_uint_eq(sx.dropped, sy.dropped);
    ck_assert_uint_eq(sx.deltas, sy.deltas);
    ck_assert_int_eq(memcmp(&sx.staleness, &sy.staleness, sizeof sx.staleness), 0);
    ck_assert_uint_eq(a->cons.round, b->cons.round);
    ck_assert_int_eq(a->cons.contributions, b->cons.contributions);
    ck_assert_uint_eq(a->cons.max_ahead, b->cons.max_ahead);
    for (int r = 0; r < a->cons.workers; r++) {
        ck_assert_uint_eq(a->cons.m[r].clock, b->cons.m[r].clock);
        ck_assert_int_eq(a->cons.m[r].contributed, b->cons.m[r].contributed);
    }
}

static void assert_same(const box_t *a, const box_t *b)
{
    assert_same_but(a, b, true);
}

static void save(const box_t *b, int keep, char *path)
{
    int rc =
        dcps_checkpoint_save(ckdir(), &b->cfg, b->s, &b->cons, keep, path, 1024, err, sizeof err);
    ck_assert_msg(rc == 0, "save: %s", err);
}

/* Restores into a fresh box (same job and overrides); returns the code. */
static int restore(box_t *fresh, const char *const *extra, size_t n_extra, char *path)
{
    box_new(fresh, extra, n_extra);
    return dcps_checkpoint_restore(ckdir(), &fresh->cfg, fresh->s, &fresh->cons, path, 1024, err,
                                   sizeof err);
}

/* Names in the checkpoint directory that end with suffix. */
static int count(const char *suffix)
{
    DIR *d = opendir(ckdir());
    struct dirent *de;
    int n = 0;
    ck_assert_ptr_nonnull(d);
    while ((de = readdir(d)) != NULL) {
        size_t a = strlen(de->d_name), b = strlen(suffix);
        n += a >= b && strcmp(de->d_name + a - b, suffix) == 0;
    }
    closedir(d);
    return n;
}

static long file_size(const char *path)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    return (long)st.st_size;
}

static void flip_byte(const char *path, long at)
{
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, at, SEEK_SET), 0);
    int c = fgetc(f);
    ck_assert_int_ne(c, EOF);
    ck_assert_int_eq(fseek(f, at, SEEK_SET), 0);
    fputc(c ^ 0x10, f);
    fclose(f);
}

/* --- the unit ---------------------------------------------------------------------- */

START_TEST(crc32c_is_castagnolis_and_chains)
{
    const char *check = "123456789";
    ck_assert_uint_eq(dcps_checkpoint_crc32c(0, check, 9), 0xE3069283u);
    ck_assert_uint_eq(dcps_checkpoint_crc32c(0, "", 0), 0);
    uint8_t buf[1000];
    for (int i = 0; i < 1000; i++)
        buf[i] = (uint8_t)(i * 131 + 7);
    uint32_t whole = dcps_checkpoint_crc32c(0, buf, sizeof buf);
    for (size_t cut = 0; cut <= 17; cut++) /* every alignment of the 8-byte loop */
        ck_assert_uint_eq(dcps_checkpoint_crc32c(dcps_checkpoint_crc32c(0, buf, cut), buf + cut,
                                                 sizeof buf - cut),
                          whole);
}
END_TEST

START_TEST(save_and_restore_give_the_same_state_bit_for_bit)
{
    box_t a, b;
    char saved[1024], got[1024];
    box_new(&a, NULL, 0);
    box_init(&a);
    train(&a, 0, 40);
    ck_assert_ptr_nonnull(dcps_shard_view(a.s).bak);   /* DC-ASGD backups */
    ck_assert_ptr_nonnull(dcps_shard_view(a.s).state); /* DC-ASGD-a's mean square */
    ck_assert_uint_gt(dcps_shard_stats(a.s).staleness.count, 0);
    save(&a, 3, saved);
    ck_assert_int_eq(restore(&b, NULL, 0, got), 1);
    ck_assert_str_eq(got, saved);
    ck_assert(dcps_shard_stats(b.s).restored);
    assert_same(&a, &b);
    /* Both go on alike: rank 1 pushes against its restored backup. */
    float g[MAXN];
    for (size_t j = 0; j < dcps_shard_stats(a.s).n; j++)
        g[j] = 0.01f * (float)j;
    dcps_shard_apply_dense(a.s, 1, dcps_shard_session(a.s, 1)->seq + 1, g);
    dcps_shard_apply_dense(b.s, 1, dcps_shard_session(b.s, 1)->seq + 1, g);
    ck_assert_int_eq(memcmp(dcps_shard_view(a.s).w, dcps_shard_view(b.s).w,
                            dcps_shard_stats(a.s).n * sizeof(float)),
                     0);
    box_free(&a);
    box_free(&b);
}
END_TEST

START_TEST(open_sync_round_survives_a_restore)
{
    const char *ov[] = {"job.mode=sync", "optimizer.kind=momentum"};
    box_t a, b;
    char saved[1024];
    box_new(&a, ov, 2);
    box_init(&a);
    train(&a, 0, 3 * 4 + 2); /* four rounds, and two of three pushes of the fifth */
    ck_assert_uint_eq(a.cons.round, 4);
    ck_assert_int_eq(a.cons.contributions, 2);
    save(&a, 3, saved);
    ck_assert_int_eq(restore(&b, ov, 2, NULL), 1);
    assert_same(&a, &b); /* the sum of the open round and its contributors too */
    step(&a, 14);        /* the third push closes the round on both */
    step(&b, 14);
    ck_assert_uint_eq(b.cons.round, 5);
    ck_assert_int_eq(memcmp(dcps_shard_view(a.s).w, dcps_shard_view(b.s).w,
                            dcps_shard_stats(a.s).n * sizeof(float)),
                     0);
    box_free(&a);
    box_free(&b);
}
END_TEST

START_TEST(restore_takes_the_newest_of_several)
{
    box_t a, b;
    char p[3][1024], got[1024];
    box_new(&a, NULL, 0);
    box_init(&a);
    for (int i = 0; i < 3; i++) {
        train(&a, 10 * i, 10);
        save(&a, 10, p[i]);
    }
    ck_assert_int_eq(count(".ckpt"), 3);
    ck_assert_int_eq(restore(&b, NULL, 0, got), 1);
    ck_assert_str_eq(got, p[2]);
    ck_assert_uint_eq(dcps_shard_stats(b.s).version, 30);
    assert_same(&a, &b);
    box_free(&a);
    box_free(&b);
}
END_TEST

START_TEST(flipped_byte_is_refused_and_the_previous_one_is_used)
{
    box_t a, b, c;
    char p1[1024], p2[1024], got[1024], want[1200];
    box_new(&a, NULL, 0);
    box_init(&a);
    train(&a, 0, 5);
    save(&a, 3, p1);
    train(&a, 5, 5);
    save(&a, 3, p2);
    flip_byte(p2, 128 + 4 * 37); /* a parameter */
    ck_assert_int_eq(restore(&b, NULL, 0, got), 1);
    ck_assert_str_eq(got, p1);
    ck_assert_uint_eq(dcps_shard_stats(b.s).version, 5);
    snprintf(want, sizeof want, "checkpoint %s refused: checksum mismatch", p2);
    ck_assert_msg(strstr(logged(), want), "log: %s", logged());
    /* A flipped byte in the header (the job id) is caught by the header's own CRC. */
    flip_byte(p2, 128 + 4 * 37);
    flip_byte(p2, 17);
    ck_assert_int_eq(restore(&c, NULL, 0, got), 1);
    ck_assert_str_eq(got, p1);
    snprintf(want, sizeof want, "checkpoint %s refused: header checksum mismatch", p2);
    ck_assert_msg(strstr(logged(), want), "log: %s", logged());
    box_free(&a);
    box_free(&b);
    box_free(&c);
}
END_TEST

START_TEST(truncated_checkpoint_is_refused)
{
    box_t a, b, c;
    char p1[1024], p2[1024], got[1024], want[1200];
    box_new(&a, NULL, 0);
    box_init(&a);
    save(&a, 3, p1);
    train(&a, 0, 5);
    save(&a, 3, p2);
    long size = file_size(p2);
    ck_assert_int_eq(truncate(p2, size - 100), 0);
    ck_assert_int_eq(restore(&b, NULL, 0, got), 1);
    ck_assert_str_eq(got, p1);
    ck_assert_uint_eq(dcps_shard_stats(b.s).version, 0);
    ck_assert(dcps_shard_stats(b.s).initialized);
    snprintf(want, sizeof want, "checkpoint %s refused: truncated: %ld of %ld bytes", p2,
             size - 100, size);
    ck_assert_msg(strstr(logged(), want), "log: %s", logged());
    /* Only unusable ones: an error that names the newest and why; s stays new. */
    ck_assert_int_eq(truncate(p1, 60), 0);
    ck_assert_int_eq(restore(&c, NULL, 0, got), DCPS_E_DATA);
    ck_assert_msg(strstr(err, "none of the 2 checkpoints of shard 0 in "), "%s", err);
    ck_assert_msg(strstr(err, "truncated: "), "%s", err);
    ck_assert(!dcps_shard_stats(c.s).initialized);
    ck_assert_uint_eq(dcps_shard_stats(c.s).version, 0);
    box_free(&a);
    box_free(&b);
    box_free(&c);
}
END_TEST

START_TEST(sessions_and_last_pushes_survive_a_restore)
{
    box_t a, b;
    box_new(&a, NULL, 0);
    box_init(&a);
    train(&a, 0, 7);                                /* rank 0 pushed last seq 3 */
    dcps_shard_drop(a.s, 2, 77);                    /* a push of rank 2 dropped */
    dcps_shard_open_session(a.s, 1, 0x42ull);       /* rank 1 restarted: no push yet */
    save(&a, 3, NULL);
    ck_assert_int_eq(restore(&b, NULL, 0, NULL), 1);
    assert_same(&a, &b);
    ck_assert_uint_eq(dcps_shard_session(b.s, 0)->id, 0x5e55100000000000ull);
    ck_assert_int_eq(dcps_session_seq(dcps_shard_session(b.s, 0), 3), DCPS_SEQ_APPLIED);
    ck_assert_int_eq(dcps_session_seq(dcps_shard_session(b.s, 2), 77), DCPS_SEQ_DROPPED);
    ck_assert_uint_eq(dcps_shard_session(b.s, 1)->id, 0x42);
    ck_assert(!dcps_shard_session(b.s, 1)->pushed);
    box_free(&a);
    box_free(&b);
}
END_TEST

static void put32(uint8_t *b, size_t at, uint32_t v)
{
    memcpy(b + at, &v, 4);
}

/* Rewrites the checkpoint at path, of shard s, as format 1 wrote it: one word
 * per rank (the highest applied seq) where format 2 has a session record of
 * three (session, seq, flags). The header is 128 bytes: format at 8, payload
 * length at 104, its CRC at 124; the payload's rank records follow the floats. */
static void as_format_1(const char *path, const dcps_shard_t *s)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    static uint8_t in[1 << 16], out[1 << 16];
    size_t n = fread(in, 1, sizeof in, f);
    fclose(f);
    size_t records = 128 + dcps_shard_stats(s).floats * sizeof(float),
           workers = (size_t)dcps_shard_stats(s).workers;
    size_t rest = records + 24 * workers, m = 0;
    ck_assert_uint_lt(n, sizeof in);
    memcpy(out, in, records);
    m = records;
    for (size_t r = 0; r < workers; r++, m += 8)
        memcpy(out + m, in + records + 24 * r + 8, 8); /* the seq */
    memcpy(out + m, in + rest, n - 4 - rest);
    m += n - 4 - rest;
    uint64_t payload;
    memcpy(&payload, out + 104, 8);
    payload -= 16 * workers;
    memcpy(out + 104, &payload, 8);
    put32(out, 8, 1);
    put32(out, 124, dcps_checkpoint_crc32c(0, out, 124));
    put32(out, m, dcps_checkpoint_crc32c(0, out, m));
    m += 4;
    f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(out, 1, m, f), m);
    fclose(f);
}

START_TEST(format_1_checkpoint_is_read_without_sessions)
{
    box_t a, b;
    char p[1024], want[1200];
    box_new(&a, NULL, 0);
    box_init(&a);
    train(&a, 0, 9);
    save(&a, 3, p);
    as_format_1(p, a.s);
    ck_assert_int_eq(restore(&b, NULL, 0, NULL), 1);
    /* Everything but the sessions, which format 1 did not have. */
    assert_same_but(&a, &b, false);
    box_free(&b);
    ck_assert_int_eq(restore(&b, NULL, 0, NULL), 1);
    for (int r = 0; r < dcps_shard_stats(b.s).workers; r++) {
        ck_assert_uint_eq(dcps_shard_session(b.s, r)->id, 0);
        ck_assert(!dcps_shard_session(b.s, r)->pushed);
    }
    snprintf(want, sizeof want,
             "%s is a checkpoint of format 1, which holds no sessions: every worker says HELLO "
             "again",
             p);
    ck_assert_msg(strstr(logged(), want), "log: %s", logged());
    /* A format this dcps does not know is refused. */
    FILE *f = fopen(p, "r+b");
    uint8_t h[128];
    ck_assert_uint_eq(fread(h, 1, sizeof h, f), sizeof h);
    put32(h, 8, 3);
    put32(h, 124, dcps_checkpoint_crc32c(0, h, 124));
    fseek(f, 0, SEEK_SET);
    ck_assert_uint_eq(fwrite(h, 1, sizeof h, f), sizeof h);
    fclose(f);
    box_free(&b);
    ck_assert_int_eq(restore(&b, NULL, 0, NULL), DCPS_E_DATA);
    ck_assert_msg(strstr(err, "format 3 with a header of 128 bytes, this dcps reads formats 1 and 2"),
                  "%s", err);
    box_free(&a);
    box_free(&b);
}
END_TEST

/* Restoring a's one checkpoint under the overrides `ov` is refused with why. */
static void expect_refused(const char *ov, const char *why)
{
    box_t b;
    char want[512];
    ck_assert_int_eq(restore(&b, &ov, 1, NULL), DCPS_E_DATA);
    ck_assert_msg(strstr(err, why), "%s: got \"%s\", want \"%s\"", ov, err, why);
    snprintf(want, sizeof want, "refused: %s", why);
    ck_assert_msg(strstr(logged(), want), "log: %s", logged());
    ck_assert(!dcps_shard_stats(b.s).initialized);
    box_free(&b);
}

START_TEST(checkpoint_of_another_job_shard_size_or_rule_is_refused)
{
    box_t a;
    char p[1024], why[256];
    box_new(&a, NULL, 0);
    box_init(&a);
    train(&a, 0, 6);
    save(&a, 3, p);
    uint64_t id = a.cfg.job_id;
    snprintf(why, sizeof why, "job id %llu, this job is 9", (unsigned long long)id);
    expect_refused("job.id=9", why);
    expect_refused("model.layers=10,30",
                   "range [0, 128) of 220 parameters, this shard serves [0, 192) of 330");
    expect_refused("servers.shards=tcp://127.0.0.1:1",
                   "range [0, 128) of 220 parameters, this shard serves [0, 220) of 220");
    expect_refused("job.workers=4", "3 workers, this job has 4");
    expect_refused("optimizer.kind=momentum", "optimizer dcasgd, this job uses momentum");
    expect_refused("job.mode=ssp", "mode async, this job runs ssp");
    expect_refused("compression.pull=dense", "pull delta, this job uses dense");
    expect_refused("optimizer.dc_adaptive=false", "dc_adaptive true, this job has false");
    /* Another shard's file under this shard's name. */
    char other[1200];
    snprintf(other, sizeof other, "%s/shard-1-0000000009-v000000000006.ckpt", ckdir());
    box_t b;
    box_new_shard(&b, NULL, 0, 1);
    ck_assert_int_eq(rename(p, other), 0);
    ck_assert_int_eq(
        dcps_checkpoint_restore(ckdir(), &b.cfg, b.s, &b.cons, NULL, 0, err, sizeof err),
        DCPS_E_DATA);
    ck_assert_msg(strstr(err, "shard 0, this is shard 1"), "%s", err);
    box_free(&a);
    box_free(&b);
}
END_TEST

/* [model] params = auto: an unsized shard takes its size from the file it
 * restores, and is unsized again when that file is refused. */
START_TEST(unsized_shard_is_sized_by_the_checkpoint_it_restores)
{
    box_t a, b, c;
    char p[1024], got[1024];
    box_new(&a, NULL, 0);
    box_init(&a);
    train(&a, 0, 7);
    save(&a, 3, p);
    const char *auto_[] = {"model.params=auto"};
    ck_assert_int_eq(restore(&b, auto_, 1, got), 1);
    ck_assert_str_eq(got, p);
    ck_assert_uint_eq(dcps_shard_stats(b.s).n_params, 220);
    ck_assert_uint_eq(dcps_shard_stats(b.s).range.lo, dcps_shard_stats(a.s).range.lo);
    ck_assert_uint_eq(dcps_shard_stats(b.s).range.hi, dcps_shard_stats(a.s).range.hi);
    assert_same(&a, &b);
    ck_assert(dcps_shard_stats(b.s).initialized);

    /* Refused after it was sized: unsized again, nothing allocated. */
    const char *other[] = {"model.params=auto", "job.workers=4"};
    ck_assert_int_eq(restore(&c, other, 2, NULL), DCPS_E_DATA);
    ck_assert_msg(strstr(err, "3 workers, this job has 4"), "%s", err);
    ck_assert_uint_eq(dcps_shard_stats(c.s).n_params, 0);
    ck_assert_ptr_null(dcps_shard_view(c.s).w);
    ck_assert_uint_eq(dcps_shard_stats(c.s).n, 0);
    ck_assert_uint_eq(dcps_shard_memory(c.s), (size_t)dcps_shard_stats(c.s).workers *
                                                  (sizeof(dcps_session_t) + sizeof(bool)));
    box_free(&a);
    box_free(&b);
    box_free(&c);
}
END_TEST

START_TEST(a_file_that_is_no_checkpoint_is_refused)
{
    box_t b;
    char path[1200];
    snprintf(path, sizeof path, "%s/shard-0-0000000001-v000000000000.ckpt", ckdir());
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("this is not a checkpoint, but it is long enough to hold a header of 128 bytes, so "
          "only its magic tells that it is none. ............................................",
          f);
    fclose(f);
    ck_assert_int_eq(restore(&b, NULL, 0, NULL), DCPS_E_DATA);
    ck_assert_msg(strstr(err, "not a dcps checkpoint (bad magic)"), "%s", err);
    box_free(&b);
}
END_TEST

START_TEST(empty_directory_means_starting_fresh)
{
    box_t b;
    ck_assert_int_eq(restore(&b, NULL, 0, NULL), 0);
    ck_assert(!dcps_shard_stats(b.s).initialized);
    ck_assert(!dcps_shard_stats(b.s).restored);
    ck_assert_msg(strstr(err, "no checkpoint of shard 0 in "), "%s", err);
    box_free(&b);
}
END_TEST

START_TEST(restore_into_a_shard_that_has_parameters_is_refused)
{
    box_t a;
    char p[1024];
    box_new(&a, NULL, 0);
    box_init(&a);
    save(&a, 3, p);
    ck_assert_int_eq(
        dcps_checkpoint_restore(ckdir(), &a.cfg, a.s, &a.cons, NULL, 0, err, sizeof err),
        DCPS_E_STATE);
    box_free(&a);
}
END_TEST

START_TEST(pruning_keeps_exactly_keep_checkpoints)
{
    box_t a;
    char p[6][1024], other[1200];
    box_new(&a, NULL, 0);
    box_init(&a);
    /* Another shard's checkpoint and an unrelated file are left alone. */
    snprintf(other, sizeof other, "%s/shard-1-0000000001-v000000000000.ckpt", ckdir());
    fclose(fopen(other, "w"));
    snprintf(other, sizeof other, "%s/notes.txt", ckdir());
    fclose(fopen(other, "w"));
    for (int i = 0; i < 6; i++) {
        train(&a, i, 1);
        save(&a, 2, p[i]);
        ck_assert_int_eq(count(".ckpt"), 1 + (i < 1 ? 1 : 2));
    }
    ck_assert_int_eq(access(p[5], F_OK), 0);
    ck_assert_int_eq(access(p[4], F_OK), 0);
    for (int i = 0; i < 4; i++)
        ck_assert_int_ne(access(p[i], F_OK), 0);
    ck_assert_int_eq(access(other, F_OK), 0);
    save(&a, 1, p[0]); /* keep = 1: only the new one */
    ck_assert_int_eq(count(".ckpt"), 2);
    ck_assert_int_eq(access(p[0], F_OK), 0);
    box_free(&a);
}
END_TEST

START_TEST(no_temporary_file_is_left_behind)
{
    box_t a;
    char p[1024], stale[1200];
    box_new(&a, NULL, 0);
    box_init(&a);
    save(&a, 3, p);
    ck_assert_int_eq(count(".tmp"), 0);
    ck_assert_int_eq(count(".ckpt"), 1);
    /* One a crash left while writing is removed by the next save. */
    snprintf(stale, sizeof stale, "%s/shard-0-0000000007-v000000000003.ckpt.tmp", ckdir());
    fclose(fopen(stale, "w"));
    save(&a, 3, p);
    ck_assert_int_eq(count(".tmp"), 0);
    ck_assert_int_eq(count(".ckpt"), 2);
    /* Names sort by their sequence number, which the name carries. */
    ck_assert_ptr_nonnull(strstr(p, "/shard-0-0000000002-v000000000000.ckpt"));
    box_free(&a);
}
END_TEST

START_TEST(after_a_restore_every_worker_is_answered_dense_once)
{
    for (int sync = 0; sync < 2; sync++) {
        const char *ov[] = {sync ? "job.mode=sync" : "job.mode=async"};
        box_t a, b;
        char p[1024];
        dcps_pull_t q;
        box_new(&a, ov, 1);
        box_init(&a);
        train(&a, 0, 9);
        save(&a, 3, p);
        ck_assert_int_eq(restore(&b, ov, 1, NULL), 1);
        dcps_shard_t *s = b.s;
        int mirrors = dcps_shard_view(s).mirror ? 1 : dcps_shard_stats(s).workers;
        for (int mi = 0; mi < mirrors; mi++)
            ck_assert_uint_eq(dcps_shard_view(s).tag[mi], UINT64_MAX);
        ck_assert_int_eq(dcps_shard_view(s).delta_of, -1);
        /* Every worker says it holds the current version, as it may from before
         * the stop (with other contents): each gets w dense, once. */
        for (uint32_t r = 0; r < 3; r++) {
            dcps_shard_pull(s, r, true, dcps_shard_stats(s).version, 0, false, &q);
            ck_assert_msg(q.dense, "%s: rank %u answered with a delta", ov[0], r);
            ck_assert_uint_eq(q.k, dcps_shard_stats(s).n);
            ck_assert_int_eq(
                memcmp(q.values, dcps_shard_view(s).w, dcps_shard_stats(s).n * sizeof(float)), 0);
        }
        /* From then on tags are trusted again. */
        dcps_shard_pull(s, 1, true, dcps_shard_stats(s).version, 0, false, &q);
        ck_assert(!q.dense);
        /* The same pull without the restore would have been a delta as well: the
         * test above is not vacuous. */
        dcps_shard_pull(a.s, 1, true, dcps_shard_view(a.s).tag[dcps_shard_view(a.s).mirror ? 0 : 1],
                        0, false, &q);
        ck_assert(!q.dense);
        box_free(&a);
        box_free(&b);
    }
}
END_TEST

START_TEST(prepare_creates_checks_and_refuses_the_directory)
{
    char d[1024], f[1100];
    snprintf(d, sizeof d, "%s/new", h_dir());
    ck_assert_int_eq(dcps_checkpoint_prepare(d, err, sizeof err), 0);
    struct stat st;
    ck_assert_int_eq(stat(d, &st), 0);
    ck_assert(S_ISDIR(st.st_mode));
    ck_assert_int_eq(dcps_checkpoint_prepare(d, err, sizeof err), 0); /* again: fine */

    snprintf(f, sizeof f, "%s/missing/deeper", h_dir());
    ck_assert_int_eq(dcps_checkpoint_prepare(f, err, sizeof err), DCPS_E_IO);
    ck_assert_msg(strstr(err, "cannot create checkpoint directory ") && strstr(err, f), "%s", err);

    snprintf(f, sizeof f, "%s/a-file", h_dir());
    fclose(fopen(f, "w"));
    ck_assert_int_eq(dcps_checkpoint_prepare(f, err, sizeof err), DCPS_E_IO);
    ck_assert_msg(strstr(err, f) && strstr(err, "is not a directory"), "%s", err);

    ck_assert_int_eq(chmod(d, 0500), 0);
    int rc = dcps_checkpoint_prepare(d, err, sizeof err);
    chmod(d, 0755);
    if (geteuid() != 0) { /* root writes anywhere */
        ck_assert_int_eq(rc, DCPS_E_IO);
        ck_assert_msg(strstr(err, d) && strstr(err, "is not writable: Permission denied"), "%s",
                      err);
    }
    snprintf(f, sizeof f, "%s/.dcps-probe-%ld", d, (long)getpid());
    ck_assert_int_ne(access(f, F_OK), 0); /* the probe is gone */
}
END_TEST

/* --- through the daemon --------------------------------------------------------- */

static const char *server_job(const char *dir)
{
    static char text[2048];
    snprintf(text, sizeof text,
             "[job]\nname = ckpt-itest\nworkers = 1\n"
             "[servers]\nshards = tcp://127.0.0.1:*\n"
             "[model]\nlayers = 20,10\n"
             "[optimizer]\nkind = dcasgd\nlr = 0.1\n"
             "[worker]\ntimeout_ms = 5000\n"
             "[server]\ncheckpoint_dir = %s\ncheckpoint_every = 1\nheartbeat_ms = 100\n"
             "dead_after_ms = 2000\n",
             dir);
    return h_write("job.ini", text);
}

static dcps_client_t *connect_to(const char *job, const char *endpoint)
{
    char set[300], e[512];
    int rc;
    snprintf(set, sizeof set, "servers.shards=%s", endpoint);
    const char *ov[] = {set};
    dcps_client_t *c = dcps_client_open(job, 0, ov, 1, &rc, e, sizeof e);
    ck_assert_msg(c != NULL, "%s", e);
    return c;
}

/* The newest checkpoint file's path in dir ("" if none). */
static const char *newest(const char *dir)
{
    static char best[1024];
    char name[256] = "";
    DIR *d = opendir(dir);
    struct dirent *de;
    ck_assert_ptr_nonnull(d);
    while ((de = readdir(d)) != NULL)
        if (strstr(de->d_name, ".ckpt") && strcmp(de->d_name, name) > 0)
            snprintf(name, sizeof name, "%s", de->d_name);
    closedir(d);
    snprintf(best, sizeof best, "%s/%s", dir, name);
    return *name ? best : "";
}

START_TEST(restarted_server_serves_exactly_the_parameters_it_had)
{
    char ep[256], ep2[256], job[512];
    const char *dir = ckdir();
    snprintf(job, sizeof job, "%s", server_job(dir)); /* h_path's buffers rotate */
    pid_t srv = h_server(job, 0, ep);
    ck_assert_msg(srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    dcps_client_t *c = connect_to(job, ep);
    size_t n = dcps_client_num_params(c);
    ck_assert_uint_eq(n, 210);
    float w[210], g[210], before[210], after[210];
    for (size_t j = 0; j < n; j++)
        w[j] = (float)cos(0.3 * (double)j);
    ck_assert_int_eq(dcps_client_init(c, w), 0);
    for (int step = 0; step < 6; step++) {
        ck_assert_int_eq(dcps_client_pull(c, w), 0);
        for (size_t j = 0; j < n; j++)
            g[j] = w[j] * 0.5f + 0.01f * (float)step; /* DC-ASGD's correction acts too */
        ck_assert_int_eq(dcps_client_push_dense(c, g), 0);
    }
    ck_assert_int_eq(dcps_client_pull(c, before), 0);
    /* A periodic checkpoint within checkpoint_every = 1 s. */
    for (int i = 0; i < 40 && !strstr(h_slurp(h_path("server0", "err")), "periodic checkpoint");
         i++)
        nanosleep(&(struct timespec){0, 100000000L}, NULL);
    dcps_client_close(&c);
    ck_assert_int_eq(h_stop(srv, 10000), 0);
    const char *log = h_slurp(h_path("server0", "err"));
    ck_assert_msg(strstr(log, "no checkpoint in "), "%s", log);
    ck_assert_msg(strstr(log, "periodic checkpoint "), "%s", log);
    ck_assert_msg(strstr(log, "final checkpoint "), "%s", log);
    char file[1024];
    snprintf(file, sizeof file, "%s", newest(dir));
    ck_assert_msg(*file && strstr(log, file), "newest %s; log: %s", file, log);

    srv = h_server(job, 0, ep2);
    ck_assert_msg(srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    c = connect_to(job, ep2);
    ck_assert_int_eq(dcps_client_initialized(c), 1);
    ck_assert_int_eq(dcps_client_pull(c, after), 0);
    ck_assert_int_eq(memcmp(before, after, sizeof before), 0);
    dcps_client_close(&c);
    log = h_slurp(h_path("server0", "err"));
    char want[1200];
    snprintf(want, sizeof want, "restored %s (version 6, initialised)", file);
    ck_assert_msg(strstr(log, want), "want \"%s\" in %s", want, log);
    ck_assert_int_eq(h_stop(srv, 10000), 0);
}
END_TEST

/* A raw DEALER of this test's context, connected to endpoint. */
static void *raw_ctx;
static void *raw_dealer(const char *endpoint)
{
    int linger = 0, timeout = 5000;
    if (!raw_ctx)
        raw_ctx = zmq_ctx_new();
    void *s = zmq_socket(raw_ctx, ZMQ_DEALER);
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    ck_assert_int_eq(zmq_connect(s, endpoint), 0);
    return s;
}

/* Sends m (job id, rank 0 and session sid filled in) on sock and checks that
 * the reply is of type `type` (ERROR: with `code`); returns the reply's flags
 * and, in *version if not NULL, its param_version. */
static uint32_t raw_ask(void *sock, const dcps_config_t *cfg, dcps_msg_t m, uint64_t sid,
                        uint32_t type, int code, uint64_t *version)
{
    dcps_frames_t f;
    dcps_msg_t r;
    char why[256];
    m.job_id = cfg->job_id;
    m.session = sid;
    m.n_params = cfg->n_params;
    ck_assert_int_ge(dcps_frames_send(sock, NULL, &m, NULL, NULL, 0), 0);
    ck_assert_msg(dcps_frames_recv(sock, &f, 0) > 0, "no answer to %s", dcps_msg_type_name(m.type));
    ck_assert_int_eq(dcps_frames_decode(&f, 0, cfg->job_id, &r, why, sizeof why), 0);
    ck_assert_msg(r.type == type, "%s answered with %s: %s", dcps_msg_type_name(m.type),
                  dcps_msg_type_name(r.type), r.error_text);
    if (type == DCPS_MSG_ERROR)
        ck_assert_msg(r.error_code == (uint32_t)-code, "%s", r.error_text);
    if (version)
        *version = r.param_version;
    dcps_frames_close(&f);
    return r.flags;
}

/* A push of rank 0 with seq, whose gradient is g (n values). */
static dcps_msg_t raw_push(uint64_t seq, const float *g, size_t n)
{
    dcps_msg_t m = {.type = DCPS_MSG_PUSH, .seq = seq, .nframes = 1};
    m.frame[0] = (dcps_frame_desc_t){DCPS_FRAME_DENSE, DCPS_DTYPE_F32, n};
    m.payload[0] = (dcps_buf_t){g, n * sizeof *g};
    return m;
}

/* A push applied before the shard stopped and retried after it restored its
 * checkpoint is answered DUPLICATE, not applied twice: the checkpoint holds the
 * rank's session and its last push, and the restored shard takes requests of
 * that session without a new HELLO. Another session is not taken. */
START_TEST(restarted_shard_recognises_a_retried_push_and_its_session)
{
    char ep[256], job[512], e[512];
    const uint64_t sid = 0x5e55100000000001ull;
    const char *dir = ckdir();
    snprintf(job, sizeof job, "%s", server_job(dir));
    dcps_config_t cfg;
    ck_assert_msg(dcps_config_load(&cfg, job, NULL, 0, e, sizeof e) == 0, "%s", e);
    float w[210], g[210];
    uint64_t v;
    for (size_t j = 0; j < 210; j++)
        w[j] = (float)cos(0.3 * (double)j), g[j] = 0.01f;
    pid_t srv = h_server(job, 0, ep);
    ck_assert_msg(srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    void *d = raw_dealer(ep);
    raw_ask(d, &cfg, (dcps_msg_t){.type = DCPS_MSG_HELLO, .seq = 1}, sid, DCPS_MSG_WELCOME, 0,
            NULL);
    dcps_msg_t init = raw_push(2, w, 210);
    init.type = DCPS_MSG_INIT;
    raw_ask(d, &cfg, init, sid, DCPS_MSG_PUSH_ACK, 0, NULL);
    ck_assert_uint_eq(raw_ask(d, &cfg, raw_push(5, g, 210), sid, DCPS_MSG_PUSH_ACK, 0, &v), 0);
    ck_assert_uint_eq(v, 1);
    zmq_close(d);
    ck_assert_int_eq(h_stop(srv, 10000), 0); /* the final checkpoint */

    srv = h_server(job, 0, ep);
    ck_assert_msg(srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    d = raw_dealer(ep);
    ck_assert_uint_eq(raw_ask(d, &cfg, raw_push(5, g, 210), sid, DCPS_MSG_PUSH_ACK, 0, &v),
                      DCPS_FLAG_DUPLICATE);
    ck_assert_uint_eq(v, 1);
    raw_ask(d, &cfg, raw_push(4, g, 210), sid, DCPS_MSG_ERROR, DCPS_E_STATE, NULL);
    raw_ask(d, &cfg, raw_push(9, g, 210), sid ^ 1, DCPS_MSG_ERROR, DCPS_E_SESSION, NULL);
    ck_assert_uint_eq(raw_ask(d, &cfg, raw_push(6, g, 210), sid, DCPS_MSG_PUSH_ACK, 0, &v), 0);
    ck_assert_uint_eq(v, 2);
    zmq_close(d);
    ck_assert_int_eq(h_stop(srv, 10000), 0);
    const char *log = h_slurp(h_path("server0", "err"));
    ck_assert_msg(strstr(log, "worker 0 rejoins in session 5e551000\u2026, which it opened "
                              "before this shard restarted"),
                  "%s", log);
    ck_assert_msg(strstr(log, "2 pushes (1 duplicates, 0 dropped)"), "%s", log);
    zmq_ctx_term(raw_ctx);
    raw_ctx = NULL;
}
END_TEST

/* A shard that restarts from a checkpoint written before a worker's HELLO does
 * not know the worker's session: the client says HELLO again with it, once,
 * and its call goes on. If another session holds the rank by then, the call
 * fails with LIVE and a sentence that says so. */
START_TEST(client_says_hello_again_to_a_shard_that_lost_its_session)
{
    char ep[256], job[512], e[512], text[2048];
    const char *dir = ckdir();
    int port = h_free_port();
    snprintf(text, sizeof text,
             "[job]\nname = ckpt-itest\nworkers = 1\n"
             "[servers]\nshards = tcp://127.0.0.1:%d\n"
             "[model]\nlayers = 20,10\n"
             "[optimizer]\nlr = 0.1\n"
             "[worker]\ntimeout_ms = 1000\nretries = 6\n"
             "[server]\ncheckpoint_dir = %s\ncheckpoint_every = 3600\nheartbeat_ms = 100\n"
             "dead_after_ms = 2000\n",
             port, dir);
    snprintf(job, sizeof job, "%s", h_write("lost.ini", text));
    float w[210] = {0}, g[210];
    for (size_t j = 0; j < 210; j++)
        g[j] = 0.01f;
    pid_t srv = h_server(job, 0, ep);
    ck_assert_msg(srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    dcps_client_t *c = dcps_client_open(job, 0, NULL, 0, &(int){0}, e, sizeof e);
    ck_assert_msg(c != NULL, "%s", e);
    ck_assert_int_eq(dcps_client_init(c, w), 0);
    ck_assert_int_eq(dcps_client_push_dense(c, g), 0);
    dcps_client_close(&c);
    ck_assert_int_eq(h_stop(srv, 10000), 0); /* a checkpoint of the first session */

    srv = h_server(job, 0, ep);
    ck_assert_msg(srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    c = dcps_client_open(job, 0, NULL, 0, &(int){0}, e, sizeof e);
    ck_assert_msg(c != NULL, "%s", e);
    ck_assert_int_eq(dcps_client_pull(c, w), 0);
    ck_assert_int_eq(dcps_client_push_dense(c, g), 0);
    kill(srv, SIGKILL); /* no checkpoint of this session */
    ck_assert_int_ne(h_wait(srv, 10000), 0);

    srv = h_server(job, 0, ep);
    ck_assert_msg(srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    ck_assert_msg(dcps_client_pull(c, w) == 0, "%s", dcps_client_error(c));
    ck_assert_msg(dcps_client_push_dense(c, g) == 0, "%s", dcps_client_error(c));
    ck_assert_msg(strstr(logged(), "does not know this worker's session (request outside the "
                                   "rank's session: rank 0's session is "),
                  "%s", logged());
    kill(srv, SIGKILL);
    ck_assert_int_ne(h_wait(srv, 10000), 0);

    /* Again, but another process takes rank 0 first. */
    srv = h_server(job, 0, ep);
    ck_assert_msg(srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    dcps_client_t *other = dcps_client_open(job, 0, NULL, 0, &(int){0}, e, sizeof e);
    ck_assert_msg(other != NULL, "%s", e);
    int rc = dcps_client_pull(c, w);
    ck_assert_int_eq(rc, DCPS_E_LIVE);
    ck_assert_msg(strstr(dcps_client_error(c), "did not know this worker's session, and refused "
                                               "its HELLO again: ") &&
                      strstr(dcps_client_error(c), "is another process running as this rank?"),
                  "%s", dcps_client_error(c));
    dcps_client_close(&other);
    dcps_client_close(&c);
    ck_assert_int_eq(h_stop(srv, 10000), 0);
}
END_TEST

/* A client of rank 0 whose model has n parameters, for a job with params =
 * auto (dcps_client_open has no size to give). NULL with *rc and e if refused. */
static dcps_client_t *connect_sized(const char *job, const char *endpoint, uint64_t n, int *rc,
                                    char *e, size_t elen)
{
    char set[300];
    dcps_config_t cfg;
    snprintf(set, sizeof set, "servers.shards=%s", endpoint);
    const char *ov[] = {set};
    ck_assert_int_eq(dcps_config_load(&cfg, job, ov, 1, e, elen), 0);
    ck_assert_uint_eq(cfg.n_params, 0);
    cfg.n_params = n;
    return dcps_client_new(&cfg, 0, rc, e, elen);
}

/* Starts shard 0 of job into *srv (its endpoint in ep) and returns its log so far. */
static const char *restart(const char *job, char *ep, pid_t *srv)
{
    *srv = h_server(job, 0, ep);
    ck_assert_msg(*srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    return h_slurp(h_path("server0", "err"));
}

/* [model] params = auto: the size rank 0 gave survives a restart through the
 * checkpoint (a worker of another size is refused, naming both); a restart
 * without a checkpoint is unsized again. */
START_TEST(auto_shard_restarted_from_a_checkpoint_keeps_its_size)
{
    char ep[256], e[512], job[512];
    int rc;
    const char *dir = ckdir();
    const char *text = h_slurp(server_job(dir));
    char with_auto[4096];
    snprintf(with_auto, sizeof with_auto, "%s[model]\n", text);
    /* server_job's [model] section comes before; a second [model] header is
     * the same section to libinih. */
    snprintf(with_auto + strlen(with_auto), sizeof with_auto - strlen(with_auto),
             "params = auto\n");
    snprintf(job, sizeof job, "%s", h_write("auto.ini", with_auto));
    pid_t srv = h_server(job, 0, ep);
    ck_assert_msg(srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    /* 300, not the 210 of the job's layers: the size comes from rank 0. */
    dcps_client_t *c = connect_sized(job, ep, 300, &rc, e, sizeof e);
    ck_assert_msg(c != NULL, "%s", e);
    float w[300], g[300], before[300], after[300];
    for (size_t j = 0; j < 300; j++)
        w[j] = (float)cos(0.3 * (double)j);
    ck_assert_int_eq(dcps_client_init(c, w), 0);
    for (int step = 0; step < 4; step++) {
        ck_assert_int_eq(dcps_client_pull(c, w), 0);
        for (size_t j = 0; j < 300; j++)
            g[j] = w[j] * 0.5f + 0.01f * (float)step;
        ck_assert_int_eq(dcps_client_push_dense(c, g), 0);
    }
    ck_assert_int_eq(dcps_client_pull(c, before), 0);
    dcps_client_close(&c);
    ck_assert_int_eq(h_stop(srv, 10000), 0); /* the final checkpoint */
    const char *log = h_slurp(h_path("server0", "err"));
    ck_assert_msg(strstr(log, "waits for rank 0 to size the model"), "%s", log);
    ck_assert_msg(strstr(log, "rank 0's model has 300 parameters: this shard serves [0, 300)"),
                  "%s", log);
    ck_assert_msg(strstr(log, "final checkpoint "), "%s", log);

    log = restart(job, ep, &srv);
    ck_assert_msg(strstr(log, "(version 4, initialised)") &&
                      strstr(log, "serves parameters [0, 300) of 300"),
                  "%s", log);
    /* Whoever comes first, the size is the checkpoint's. */
    ck_assert_ptr_null(connect_sized(job, ep, 210, &rc, e, sizeof e));
    ck_assert_int_eq(rc, DCPS_E_SIZE);
    ck_assert_msg(strstr(e, "worker's model has 210 parameters, this job has 300"), "%s", e);
    c = connect_sized(job, ep, 300, &rc, e, sizeof e);
    ck_assert_msg(c != NULL, "%s", e);
    ck_assert_int_eq(dcps_client_initialized(c), 1);
    ck_assert_int_eq(dcps_client_pull(c, after), 0);
    ck_assert_int_eq(memcmp(before, after, sizeof before), 0);
    dcps_client_close(&c);
    ck_assert_int_eq(h_stop(srv, 10000), 0);

    /* Without a checkpoint, nothing says the size: unsized until rank 0. */
    char moved[600];
    snprintf(moved, sizeof moved, "%s/../ckpt-old", dir);
    ck_assert_int_eq(rename(dir, moved), 0);
    log = restart(job, ep, &srv);
    ck_assert_msg(strstr(log, "no checkpoint in ") &&
                      strstr(log, "waits for rank 0 to size the model"),
                  "%s", log);
    ck_assert_int_eq(h_stop(srv, 10000), 0);
}
END_TEST

START_TEST(failed_final_checkpoint_makes_the_exit_status_1)
{
    char ep[256], job[512], moved[600];
    const char *dir = ckdir();
    snprintf(job, sizeof job, "%s", server_job(dir));
    pid_t srv = h_server(job, 0, ep);
    ck_assert_msg(srv > 0, "server: %s", h_slurp(h_path("server0", "err")));
    dcps_client_t *c = connect_to(job, ep);
    float w[210] = {0};
    ck_assert_int_eq(dcps_client_init(c, w), 0);
    dcps_client_close(&c);
    /* The directory goes away and a file takes its name: nothing can be written. */
    snprintf(moved, sizeof moved, "%s.moved", dir);
    ck_assert_int_eq(rename(dir, moved), 0);
    fclose(fopen(dir, "w"));
    ck_assert_int_eq(h_stop(srv, 10000), 1);
    const char *log = h_slurp(h_path("server0", "err"));
    char want[1200];
    snprintf(want, sizeof want,
             "final checkpoint of version 0 failed: cannot read checkpoint directory %s: Not a "
             "directory",
             dir);
    ck_assert_msg(strstr(log, want), "want \"%s\" in %s", want, log);
    ck_assert_msg(strstr(log, "stopped: version 0"), "%s", log);
}
END_TEST

static void expect_no_start(const char *dir, const char *const *whys, int n_whys)
{
    const char *job = server_job(dir);
    const char *argv[] = {
        "--config", job, "--shard", "0", "--endpoint-file", h_path("bad", "endpoint"), NULL};
    pid_t p = h_spawn("dcps-server", "bad", argv);
    ck_assert_int_gt(p, 0);
    int st = h_wait(p, 10000);
    const char *log = h_slurp(h_path("bad", "err"));
    ck_assert_msg(st == 1, "exit %d: %s", st, log);
    for (int i = 0; i < n_whys; i++)
        ck_assert_msg(strstr(log, whys[i]), "want \"%s\" in %s", whys[i], log);
    ck_assert_int_ne(access(h_path("bad", "endpoint"), F_OK), 0);
}

START_TEST(server_with_a_checkpoint_dir_that_is_a_file_does_not_start)
{
    const char *f = h_write("not-a-dir", "x\n");
    char why[1024];
    snprintf(why, sizeof why, "checkpoint directory %s is not a directory", f);
    const char *whys[] = {why, "not starting"};
    expect_no_start(f, whys, 2);
}
END_TEST

START_TEST(server_with_only_unusable_checkpoints_does_not_start)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/shard-0-0000000001-v000000000000.ckpt", ckdir());
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("DCPSCKPT and then nothing", f);
    fclose(f);
    const char *whys[] = {"refused: truncated: 25 of at least 128 bytes",
                          "none of the 1 checkpoints of shard 0", "move them out of"};
    expect_no_start(ckdir(), whys, 3);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_create("files");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, crc32c_is_castagnolis_and_chains);
    tcase_add_test(tc, save_and_restore_give_the_same_state_bit_for_bit);
    tcase_add_test(tc, open_sync_round_survives_a_restore);
    tcase_add_test(tc, restore_takes_the_newest_of_several);
    tcase_add_test(tc, flipped_byte_is_refused_and_the_previous_one_is_used);
    tcase_add_test(tc, truncated_checkpoint_is_refused);
    tcase_add_test(tc, sessions_and_last_pushes_survive_a_restore);
    tcase_add_test(tc, format_1_checkpoint_is_read_without_sessions);
    tcase_add_test(tc, checkpoint_of_another_job_shard_size_or_rule_is_refused);
    tcase_add_test(tc, unsized_shard_is_sized_by_the_checkpoint_it_restores);
    tcase_add_test(tc, a_file_that_is_no_checkpoint_is_refused);
    tcase_add_test(tc, empty_directory_means_starting_fresh);
    tcase_add_test(tc, restore_into_a_shard_that_has_parameters_is_refused);
    tcase_add_test(tc, pruning_keeps_exactly_keep_checkpoints);
    tcase_add_test(tc, no_temporary_file_is_left_behind);
    tcase_add_test(tc, after_a_restore_every_worker_is_answered_dense_once);
    tcase_add_test(tc, prepare_creates_checks_and_refuses_the_directory);
    suite_add_tcase(s, tc);
    TCase *daemon = tcase_create("daemon");
    tcase_add_checked_fixture(daemon, setup, teardown);
    tcase_set_timeout(daemon, 60);
    tcase_add_test(daemon, restarted_server_serves_exactly_the_parameters_it_had);
    tcase_add_test(daemon, restarted_shard_recognises_a_retried_push_and_its_session);
    tcase_add_test(daemon, client_says_hello_again_to_a_shard_that_lost_its_session);
    tcase_add_test(daemon, auto_shard_restarted_from_a_checkpoint_keeps_its_size);
    tcase_add_test(daemon, failed_final_checkpoint_makes_the_exit_status_1);
    tcase_add_test(daemon, server_with_a_checkpoint_dir_that_is_a_file_does_not_start);
    tcase_add_test(daemon, server_with_only_unusable_checkpoints_does_not_start);
    suite_add_tcase(s, daemon);
    return dcps_test_run(s);
}
