/* dcps — shard checkpoints (server/checkpoint.h), the files: the CRC, a save
 * and restore that give the same state bit for bit (sessions and last pushes
 * included), a format 1 file read without sessions, the choice of the newest
 * usable file, refusals (flipped byte, truncation, another job, shard, size or
 * rule), pruning, no temporary file left, dense pulls after a restore, the
 * checks of the directory, the size of an unsized shard (params = auto) taken
 * from a file. Through the daemon: tests/daemon/test_checkpoint.c. */
#include <check.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"
#include "common/error.h"
#include "server/checkpoint.h"
#include "server/consistency.h"
#include "server/shard.h"
#include "tests/check_run.h"
#include "tests/checkpoint_fixture.h"
#include "tests/harness.h"

#define MAXN 512
/* Format 3's tables of a shard of 3 workers without groups, buffers and pushes
 * in parts: the groups' word count, the buffers' word count and their five
 * words of a table nobody published, then the parts records' word count and
 * each rank's word saying it has none. */
#define PARTS3 (8 * (1 + 3))
#define TABLES3 (8 + 8 * (1 + 5) + PARTS3)

static char err[2048];

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

/* Saves b, never removing a checkpoint of version hold (0: none). */
static void save_holding(const box_t *b, int keep, uint64_t hold, char *path)
{
    int rc = dcps_checkpoint_save(ckdir(), &b->cfg, b->s, &b->cons, keep, hold, path, 1024, err,
                                  sizeof err);
    ck_assert_msg(rc == 0, "save: %s", err);
}

static void save(const box_t *b, int keep, char *path)
{
    save_holding(b, keep, 0, path);
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

/* Rewrites the header h (128 bytes) as formats 1 and 2 had it: a job with delay
 * compensation had kind dcasgd (2), and flags knew no bit 4; format at 8. */
static void as_old_header(uint8_t *h, uint32_t format)
{
    uint32_t flags;
    memcpy(&flags, h + 68, 4);
    if (flags & 4u) {
        put32(h, 56, 2);
        put32(h, 68, flags & ~4u);
    }
    put32(h, 8, format);
    put32(h, 124, dcps_checkpoint_crc32c(0, h, 124));
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
    /* Without format 3's tables (no groups, no buffers). */
    memcpy(out + m, in + rest, n - 4 - TABLES3 - rest);
    m += n - 4 - TABLES3 - rest;
    uint64_t payload;
    memcpy(&payload, out + 104, 8);
    payload -= 16 * workers + TABLES3;
    memcpy(out + 104, &payload, 8);
    as_old_header(out, 1);
    put32(out, m, dcps_checkpoint_crc32c(0, out, m));
    m += 4;
    f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(out, 1, m, f), m);
    fclose(f);
}

/* The buffers of shard 0 go into format 3 after the groups and come back:
 * mode, sizes and each rank's latest values. */
START_TEST(buffers_are_saved_and_restored)
{
    box_t a, b;
    char p[1024];
    box_new(&a, NULL, 0);
    box_init(&a);
    const float f[3] = {1.5f, -2, 3};
    const double i[1] = {7};
    bool counted[8] = {true, true, true, true, true, true, true, true};
    dcps_buffers_view_t v;
    ck_assert_int_eq(dcps_buffers_request(dcps_shard_buffers(a.s), 0, DCPS_BUF_AVERAGE, true, f,
                                          3, i, 1, counted, &v, err, sizeof err),
                     0);
    save(&a, 3, p);
    ck_assert_int_eq(restore(&b, NULL, 0, NULL), 1);
    dcps_buffers_t *bb = dcps_shard_buffers(b.s);
    ck_assert_int_eq(dcps_buffers_mode(bb), DCPS_BUF_AVERAGE);
    ck_assert_int_eq(dcps_buffers_request(bb, 0, DCPS_BUF_AVERAGE, false, NULL, 0, NULL, 0,
                                          counted, &v, err, sizeof err),
                     0);
    ck_assert_uint_eq(v.n_floats, 3);
    ck_assert_uint_eq(v.n_ints, 1);
    ck_assert_mem_eq(v.floats, f, sizeof f);
    ck_assert_mem_eq(v.ints, i, sizeof i);
    /* Another mode is refused after the restore too. */
    ck_assert_int_eq(dcps_buffers_request(bb, 1, DCPS_BUF_RANK0, false, NULL, 0, NULL, 0,
                                          counted, &v, err, sizeof err),
                     DCPS_E_FIELD);
    box_free(&a);
    box_free(&b);
}
END_TEST

/* Ranks' records of pushes in parts (the router's, kept by the shard) go into
 * format 3 after the buffers and come back; a file written before they were
 * kept restores with none; a record that does not hold together is refused. */
START_TEST(records_of_pushes_in_parts_are_saved_and_restored)
{
    box_t a, b;
    char p[1024];
    box_new(&a, NULL, 0);
    box_init(&a);
    const uint64_t lo = dcps_shard_stats(a.s).range.lo, hi = dcps_shard_stats(a.s).range.hi;
    dcps_parts_t *latest = dcps_shard_parts(a.s, 1);
    for (uint32_t i = 0; i < 3; i += 2) { /* parts 0 and 2 of 3 came; part 1 did not */
        const dcps_part_t q = {.seq = 20 + i, .step = 4, .part = i, .parts = 3,
                               .lo = lo + (hi - lo) * i / 3, .hi = lo + (hi - lo) * (i + 1) / 3,
                               .fields = true};
        dcps_parts_record(latest, &q, true);
    }
    ck_assert(dcps_carried_take(dcps_shard_carried(a.s, 2), latest));
    save(&a, 3, p);
    ck_assert_int_eq(restore(&b, NULL, 0, NULL), 1);
    for (uint32_t r = 0; r < 3; r++) {
        ck_assert_mem_eq(dcps_shard_parts(b.s, r), dcps_shard_parts(a.s, r), sizeof *latest);
        ck_assert_mem_eq(dcps_shard_carried(b.s, r), dcps_shard_carried(a.s, r),
                         sizeof(dcps_carried_t));
    }
    ck_assert(dcps_parts_open(dcps_shard_parts(b.s, 1)));
    box_free(&b);
    /* Without the records (a file written before they were kept): none. */
    FILE *f = fopen(p, "rb");
    static uint8_t all[1 << 16];
    size_t size = fread(all, 1, sizeof all, f);
    fclose(f);
    const size_t words = dcps_shard_parts_words(a.s), cut = 8 * (1 + words);
    uint64_t payload;
    memcpy(&payload, all + 104, 8);
    payload -= cut;
    memcpy(all + 104, &payload, 8);
    put32(all, 124, dcps_checkpoint_crc32c(0, all, 124));
    size -= cut;
    put32(all, size - 4, dcps_checkpoint_crc32c(0, all, size - 4));
    f = fopen(p, "wb");
    ck_assert_uint_eq(fwrite(all, 1, size, f), size);
    fclose(f);
    ck_assert_int_eq(restore(&b, NULL, 0, NULL), 1);
    ck_assert(!dcps_shard_parts(b.s, 1)->any && !dcps_shard_carried(b.s, 2)->any);
    box_free(&b);
    /* Parts that overlap: the file is no checkpoint of a shard that took them. */
    latest->hi[0] = latest->lo[2] + 1;
    latest->covered = (latest->hi[0] - latest->lo[0]) + (latest->hi[2] - latest->lo[2]);
    ck_assert_int_eq(remove(p), 0);
    save(&a, 3, p);
    ck_assert_int_eq(restore(&b, NULL, 0, NULL), DCPS_E_DATA);
    ck_assert_msg(strstr(err, "its record of a push in parts has parts that overlap"), "%s", err);
    box_free(&b);
    box_free(&a);
}
END_TEST

/* A shard's parameter groups go into format 3 and come back: the restored
 * shard has the same table and applies it (the same w after the same pushes). */
START_TEST(parameter_groups_are_saved_and_restored)
{
    box_t a, b;
    char p[1024];
    box_new(&a, NULL, 0);
    const dcps_shard_stats_t st = dcps_shard_stats(a.s);
    const uint32_t ranges[] = {100, 0, (uint32_t)st.n_params, 1};
    const double opts[] = {1, 0.1, 0.5, 0};
    int e;
    dcps_groups_t *g = dcps_groups_parse(ranges, 2, opts, 2, st.n_params, st.range, &e, err,
                                         sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    ck_assert_int_eq(dcps_shard_set_groups(a.s, &g, err, sizeof err), 0);
    box_init(&a);
    train(&a, 0, 9);
    save(&a, 3, p);
    ck_assert_int_eq(restore(&b, NULL, 0, NULL), 1);
    ck_assert_ptr_nonnull(dcps_shard_groups(b.s));
    ck_assert_int_eq(dcps_groups_compare(dcps_shard_groups(a.s), dcps_shard_groups(b.s), 0, err,
                                         sizeof err),
                     0);
    assert_same_but(&a, &b, true);
    box_free(&a);
    box_free(&b);
}
END_TEST

/* Format 2 (0.1 and 0.2's) is read as it was written: kind dcasgd is sgd with
 * adaptive delay compensation, and everything comes back, sessions too. */
START_TEST(format_2_checkpoint_restores_exactly)
{
    box_t a, b;
    char p[1024];
    box_new(&a, NULL, 0);
    box_init(&a);
    train(&a, 0, 9);
    save(&a, 3, p);
    FILE *f = fopen(p, "r+b");
    uint8_t h[128];
    ck_assert_uint_eq(fread(h, 1, sizeof h, f), sizeof h);
    ck_assert_uint_eq(h[56], DCPS_OPT_SGD);
    uint64_t payload; /* without format 3's tables (no groups, no buffers) */
    memcpy(&payload, h + 104, 8);
    payload -= TABLES3;
    memcpy(h + 104, &payload, 8);
    as_old_header(h, 2);
    ck_assert_uint_eq(h[56], DCPS_OPT_DCASGD);
    /* The trailer's CRC covers the header: recompute it over the whole file. */
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    static uint8_t all[1 << 16];
    ck_assert_int_lt(size, (long)sizeof all);
    rewind(f);
    ck_assert_uint_eq(fread(all, 1, (size_t)size, f), (size_t)size);
    memcpy(all, h, sizeof h);
    size -= TABLES3;
    put32(all, (size_t)size - 4, dcps_checkpoint_crc32c(0, all, (size_t)size - 4));
    fclose(f);
    f = fopen(p, "wb");
    ck_assert_uint_eq(fwrite(all, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    ck_assert_int_eq(restore(&b, NULL, 0, NULL), 1);
    assert_same_but(&a, &b, true);
    box_free(&a);
    box_free(&b);
}
END_TEST

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
    put32(h, 8, 4);
    put32(h, 124, dcps_checkpoint_crc32c(0, h, 124));
    fseek(f, 0, SEEK_SET);
    ck_assert_uint_eq(fwrite(h, 1, sizeof h, f), sizeof h);
    fclose(f);
    box_free(&b);
    ck_assert_int_eq(restore(&b, NULL, 0, NULL), DCPS_E_DATA);
    ck_assert_msg(strstr(err, "format 4 with a header of 128 bytes, this dcps reads formats 1 to 3"),
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
    expect_refused("optimizer.kind=momentum", "optimizer sgd, this job uses momentum");
    expect_refused("optimizer.kind=adam", "optimizer sgd, this job uses adam");
    expect_refused("job.mode=ssp", "mode async, this job runs ssp");
    expect_refused("compression.pull=dense", "pull delta, this job uses dense");
    expect_refused("optimizer.dc_adaptive=false",
                   "delay_compensation adaptive, this job has constant");
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
    ck_assert_uint_eq(dcps_shard_memory(c.s),
                      (size_t)dcps_shard_stats(c.s).workers *
                          (sizeof(dcps_session_t) + sizeof(bool) + sizeof(dcps_parts_t) +
                           sizeof(dcps_carried_t)));
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

START_TEST(the_checkpoint_every_shard_holds_is_never_pruned)
{
    /* A sync job's shards keep the newest version all of them hold (here the
     * second one written, as if another shard's newest were that) beyond keep,
     * until a newer common one exists. */
    box_t a;
    char p[5][1024];
    box_new(&a, NULL, 0);
    box_init(&a);
    uint64_t common = 0, newest = 0;
    for (int i = 0; i < 5; i++) {
        train(&a, i, 1);
        save_holding(&a, 2, common, p[i]);
        newest = dcps_shard_stats(a.s).version;
        if (i == 1)
            common = newest;
    }
    ck_assert_int_eq(count(".ckpt"), 3); /* keep = 2, and the common one */
    ck_assert_int_eq(access(p[1], F_OK), 0);
    ck_assert_int_eq(access(p[0], F_OK) != 0 && access(p[2], F_OK) != 0, 1);
    ck_assert_int_eq(access(p[3], F_OK) == 0 && access(p[4], F_OK) == 0, 1);
    /* Restoring that version finds it. */
    box_t b;
    box_new(&b, NULL, 0);
    char got[1024];
    ck_assert_int_eq(dcps_checkpoint_restore_version(ckdir(), &b.cfg, b.s, &b.cons, common, got,
                                                     sizeof got, err, sizeof err),
                     1);
    ck_assert_str_eq(got, p[1]);
    /* Once a newer one is common, the old one goes at the next save. */
    train(&a, 5, 1);
    save_holding(&a, 2, newest, NULL);
    ck_assert_int_ne(access(p[1], F_OK), 0);
    ck_assert_int_eq(count(".ckpt"), 2);
    box_free(&b);
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
    tcase_add_test(tc, format_2_checkpoint_restores_exactly);
    tcase_add_test(tc, parameter_groups_are_saved_and_restored);
    tcase_add_test(tc, buffers_are_saved_and_restored);
    tcase_add_test(tc, records_of_pushes_in_parts_are_saved_and_restored);
    tcase_add_test(tc, checkpoint_of_another_job_shard_size_or_rule_is_refused);
    tcase_add_test(tc, unsized_shard_is_sized_by_the_checkpoint_it_restores);
    tcase_add_test(tc, a_file_that_is_no_checkpoint_is_refused);
    tcase_add_test(tc, empty_directory_means_starting_fresh);
    tcase_add_test(tc, restore_into_a_shard_that_has_parameters_is_refused);
    tcase_add_test(tc, pruning_keeps_exactly_keep_checkpoints);
    tcase_add_test(tc, the_checkpoint_every_shard_holds_is_never_pruned);
    tcase_add_test(tc, no_temporary_file_is_left_behind);
    tcase_add_test(tc, after_a_restore_every_worker_is_answered_dense_once);
    tcase_add_test(tc, prepare_creates_checks_and_refuses_the_directory);
    suite_add_tcase(s, tc);
    return dcps_test_run(s);
}
