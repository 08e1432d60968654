/* Tests for server/shard: the parameter store. Range and settings from the
 * job, one-time init, versions, the record of each rank's last push
 * (server/session.h), sparse pushes equal to the dense push of the same
 * vector, DC-ASGD's backup per worker, the memory it reports; updates that
 * would make a parameter non-finite refused with nothing changed; a
 * checkpoint's spans; pull replies that send w without a copy. The rules of
 * torch.optim on the shard: adam's step size as torch computes it, kind =
 * dcasgd as sgd with delay compensation, delay compensation before momentum,
 * and refusals of updates that would make a parameter or its state
 * non-finite. */
#include "server/shard.h"

#include <check.h>

#include "tests/check_run.h"
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/error.h"
#include "common/rng.h"
#include "server/optimizer.h"
#include "server/snapshot.h"

static void assert_floats(const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i] && signbit(got[i]) == signbit(want[i]),
                      "element %zu: got %.9g, expected %.9g", i, (double)got[i], (double)want[i]);
}

/* model.layers 8,8: 8*8 + 8 = 72 parameters; two shards: [0, 64) and [64, 72). */
static void job(dcps_config_t *cfg)
{
    static const char *const overrides[] = {
        "model.layers=8,8",
        "servers.shards=tcp://127.0.0.1:1,tcp://127.0.0.1:2",
        "optimizer.lr=0.5",
        "job.workers=3",
    };
    char err[512];
    dcps_config_defaults(cfg);
    int rc = dcps_config_load(cfg, NULL, overrides, sizeof overrides / sizeof overrides[0], err,
                              sizeof err);
    ck_assert_msg(rc == 0, "config: %s", err);
    ck_assert_uint_eq(cfg->n_params, 72);
    ck_assert_int_eq(cfg->n_shards, 2);
    ck_assert_int_eq(cfg->workers, 3);
    ck_assert(cfg->lr == 0.5);
    ck_assert_int_eq(cfg->opt_kind, DCPS_OPT_SGD);
}

static dcps_shard_t *shard(int index)
{
    dcps_config_t *cfg = malloc(sizeof *cfg);
    ck_assert_ptr_nonnull(cfg);
    job(cfg);
    int err = 0;
    dcps_shard_t *s = dcps_shard_new(cfg, index, &err);
    free(cfg);
    ck_assert_msg(s != NULL, "dcps_shard_new: %s", dcps_strerror(err));
    return s;
}

START_TEST(new_shard_takes_range_workers_and_lr_from_the_job)
{
    dcps_shard_t *s0 = shard(0), *s1 = shard(1);
    ck_assert_int_eq(dcps_shard_stats(s0).index, 0);
    ck_assert_uint_eq(dcps_shard_stats(s0).range.lo, 0);
    ck_assert_uint_eq(dcps_shard_stats(s0).range.hi, 64);
    ck_assert_uint_eq(dcps_shard_stats(s0).n, 64);
    ck_assert_int_eq(dcps_shard_stats(s1).index, 1);
    ck_assert_uint_eq(dcps_shard_stats(s1).range.lo, 64);
    ck_assert_uint_eq(dcps_shard_stats(s1).range.hi, 72);
    ck_assert_uint_eq(dcps_shard_stats(s1).n, 8);
    ck_assert_int_eq(dcps_shard_stats(s1).workers, 3);
    ck_assert(dcps_shard_stats(s1).lr == 0.5f);
    ck_assert(!dcps_shard_stats(s1).initialized);
    ck_assert_uint_eq(dcps_shard_stats(s1).version, 0);
    ck_assert_ptr_nonnull(dcps_shard_view(s1).w);
    ck_assert_ptr_nonnull(dcps_shard_session(s1, 0)); /* a session record per rank */
    dcps_shard_destroy(&s0);
    dcps_shard_destroy(&s1);
}
END_TEST

START_TEST(destroy_clears_the_pointer_and_accepts_null)
{
    dcps_shard_t *s = shard(1);
    dcps_shard_destroy(&s);
    ck_assert_ptr_null(s);
    dcps_shard_destroy(&s);
    ck_assert_ptr_null(s);
}
END_TEST

START_TEST(init_sets_parameters_once)
{
    dcps_shard_t *s = shard(1);
    const float w0[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const float other[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    ck_assert_int_eq(dcps_shard_init(s, w0), 1);
    ck_assert(dcps_shard_stats(s).initialized);
    assert_floats(dcps_shard_view(s).w, w0, 8);
    ck_assert_ptr_ne(dcps_shard_view(s).w, w0); /* copied, not borrowed */
    uint64_t v = dcps_shard_stats(s).version;

    ck_assert_int_eq(dcps_shard_init(s, other), 0);
    ck_assert(dcps_shard_stats(s).initialized);
    assert_floats(dcps_shard_view(s).w, w0, 8);
    ck_assert_uint_eq(dcps_shard_stats(s).version, v);

    /* Also after updates: a late INIT does not reset the parameters. */
    const float g[8] = {2, 2, 2, 2, 2, 2, 2, 2};
    dcps_shard_apply_dense(s, 0, 1, g);
    ck_assert_int_eq(dcps_shard_init(s, other), 0);
    const float want[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    assert_floats(dcps_shard_view(s).w, want, 8);
    dcps_shard_destroy(&s);
}
END_TEST

START_TEST(apply_dense_gives_hand_computed_values_and_bumps_version)
{
    dcps_shard_t *s = shard(1);
    const float w0[8] = {1, 2, -3, 0.25f, 0, 100, -0.5f, 8};
    ck_assert_int_eq(dcps_shard_init(s, w0), 1);
    uint64_t v0 = dcps_shard_stats(s).version;

    const float g1[8] = {2, -4, 1, 0.5f, 1, 8, -1, 16};
    dcps_shard_apply_dense(s, 0, 1, g1);
    const float w1[8] = {0, 4, -3.5f, 0, -0.5f, 96, 0, 0};
    assert_floats(dcps_shard_view(s).w, w1, 8);
    ck_assert_uint_eq(dcps_shard_stats(s).version, v0 + 1);

    const float g2[8] = {1, 1, -1, 8, -3, 0.5f, 2, -2};
    dcps_shard_apply_dense(s, 1, 1, g2);
    const float w2[8] = {-0.5f, 3.5f, -3, -4, 1, 95.75f, -1, 1};
    assert_floats(dcps_shard_view(s).w, w2, 8);
    ck_assert_uint_eq(dcps_shard_stats(s).version, v0 + 2);

    dcps_shard_apply_dense(s, 0, 2, g2);
    const float w3[8] = {-1, 3, -2.5f, -8, 2.5f, 95.5f, -2, 2};
    assert_floats(dcps_shard_view(s).w, w3, 8);
    ck_assert_uint_eq(dcps_shard_stats(s).version, v0 + 3);
    ck_assert_uint_eq(dcps_shard_stats(s).pushes, 3);
    dcps_shard_destroy(&s);
}
END_TEST

START_TEST(apply_sparse_uses_global_indices)
{
    dcps_shard_t *s = shard(1); /* [64, 72) */
    const float w0[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    ck_assert_int_eq(dcps_shard_init(s, w0), 1);
    uint64_t v0 = dcps_shard_stats(s).version;

    const uint32_t i1[3] = {64, 66, 71};
    const float v1[3] = {2, -2, 4};
    dcps_shard_apply_sparse(s, 2, 10, i1, v1, 3);
    const float w1[8] = {-1, 1, 3, 3, 4, 5, 6, 5};
    assert_floats(dcps_shard_view(s).w, w1, 8);
    ck_assert_uint_eq(dcps_shard_stats(s).version, v0 + 1);

    const uint32_t i2[2] = {65, 67};
    const float v2[2] = {0.5f, -9};
    dcps_shard_apply_sparse(s, 2, 11, i2, v2, 2);
    const float w2[8] = {-1, 0.75f, 3, 7.5f, 4, 5, 6, 5};
    assert_floats(dcps_shard_view(s).w, w2, 8);
    ck_assert_uint_eq(dcps_shard_stats(s).version, v0 + 2);

    /* An empty sparse push is no update (shard.h): w, version, count and
     * sequence numbers stay. */
    ck_assert_int_eq(dcps_shard_apply_sparse(s, 2, 12, NULL, NULL, 0), 0);
    assert_floats(dcps_shard_view(s).w, w2, 8);
    ck_assert_uint_eq(dcps_shard_stats(s).version, v0 + 2);
    ck_assert_uint_eq(dcps_shard_stats(s).pushes, 2);
    ck_assert_int_eq(dcps_session_seq(dcps_shard_session(s, 2), 12), DCPS_SEQ_NEW);
    dcps_shard_destroy(&s);
}
END_TEST

START_TEST(shard_records_each_ranks_last_push_applied_or_dropped)
{
    dcps_shard_t *s = shard(1);
    const float z[8] = {0};
    ck_assert_int_eq(dcps_shard_init(s, z), 1);
    for (uint32_t r = 0; r < 3; r++) {
        dcps_shard_open_session(s, r, 100 + r);
        ck_assert_int_eq(dcps_session_seq(dcps_shard_session(s, r), 1), DCPS_SEQ_NEW);
    }

    const float g[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    dcps_shard_apply_dense(s, 1, 10, g);
    ck_assert_int_eq(dcps_session_seq(dcps_shard_session(s, 1), 10), DCPS_SEQ_APPLIED);
    ck_assert_int_eq(dcps_session_seq(dcps_shard_session(s, 1), 9), DCPS_SEQ_BELOW);
    ck_assert_int_eq(dcps_session_seq(dcps_shard_session(s, 1), 11), DCPS_SEQ_NEW);
    /* Other ranks are not affected. */
    ck_assert_int_eq(dcps_session_seq(dcps_shard_session(s, 0), 5), DCPS_SEQ_NEW);
    ck_assert_int_eq(dcps_session_seq(dcps_shard_session(s, 2), 10), DCPS_SEQ_NEW);

    const uint32_t ix[1] = {70};
    const float v[1] = {1};
    dcps_shard_apply_sparse(s, 2, 1000, ix, v, 1);
    ck_assert_int_eq(dcps_session_seq(dcps_shard_session(s, 2), 1000), DCPS_SEQ_APPLIED);
    ck_assert_int_eq(dcps_session_seq(dcps_shard_session(s, 1), 10), DCPS_SEQ_APPLIED);
    dcps_shard_drop(s, 0, 4);
    ck_assert_int_eq(dcps_session_seq(dcps_shard_session(s, 0), 4), DCPS_SEQ_DROPPED);
    ck_assert_uint_eq(dcps_shard_stats(s).dropped, 1);
    ck_assert_uint_eq(dcps_shard_session(s, 0)->id, 100); /* pushes do not touch the session */
    dcps_shard_destroy(&s);
}
END_TEST

START_TEST(large_seqs_are_tracked_in_64_bits)
{
    dcps_shard_t *s = shard(1);
    const float z[8] = {0};
    ck_assert_int_eq(dcps_shard_init(s, z), 1);
    dcps_shard_open_session(s, 0, 1);
    uint64_t seq = 1700000000000000ull;
    dcps_shard_apply_dense(s, 0, seq, z);
    ck_assert_int_eq(dcps_session_seq(dcps_shard_session(s, 0), seq), DCPS_SEQ_APPLIED);
    ck_assert_int_eq(dcps_session_seq(dcps_shard_session(s, 0), seq - 1), DCPS_SEQ_BELOW);
    ck_assert_int_eq(dcps_session_seq(dcps_shard_session(s, 0), seq + 1), DCPS_SEQ_NEW);
    ck_assert_int_eq(dcps_session_seq(dcps_shard_session(s, 0), seq - (1ull << 32)),
                     DCPS_SEQ_BELOW);
    dcps_shard_destroy(&s);
}
END_TEST

START_TEST(sparse_push_equals_dense_push_of_the_same_vector)
{
    dcps_shard_t *a = shard(0), *b = shard(0); /* [0, 64) */
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 2024);
    float w0[64];
    for (int i = 0; i < 64; i++)
        w0[i] = dcps_rng_normal(&rng);
    w0[5] = -0.0f; /* untouched signed zeros stay as they are */
    ck_assert_int_eq(dcps_shard_init(a, w0), 1);
    ck_assert_int_eq(dcps_shard_init(b, w0), 1);

    for (uint64_t step = 1; step <= 50; step++) {
        uint32_t idx[64];
        float val[64], dense[64];
        size_t k = 0;
        memset(dense, 0, sizeof dense);
        for (uint32_t i = 0; i < 64; i++)
            if (dcps_rng_below(&rng, 4) == 0) {
                idx[k] = i;
                val[k] = dcps_rng_normal(&rng);
                dense[i] = val[k];
                k++;
            }
        dcps_shard_apply_dense(a, (uint32_t)(step % 3), step, dense);
        dcps_shard_apply_sparse(b, (uint32_t)(step % 3), step, idx, val, k);
        ck_assert_msg(memcmp(dcps_shard_view(a).w, dcps_shard_view(b).w, 64 * sizeof(float)) == 0,
                      "step %llu differs", (unsigned long long)step);
        ck_assert_uint_eq(dcps_shard_stats(a).version, dcps_shard_stats(b).version);
    }
    dcps_shard_destroy(&a);
    dcps_shard_destroy(&b);
}
END_TEST

/* What a shard holds per worker beside the floats: its session record, restore
 * flag and records of pushes in parts. */
#define PER_WORKER                                                                                \
    (sizeof(dcps_session_t) + sizeof(bool) + sizeof(dcps_parts_t) + sizeof(dcps_carried_t))

START_TEST(memory_counts_parameters_and_per_worker_state)
{
    /* SGD: n floats of parameters, n of the update buffer, n of the reply
     * buffer, and per worker a session record (its session and last push), a
     * restore flag and records of pushes in parts. */
    dcps_shard_t *s0 = shard(0), *s1 = shard(1);
    const size_t per_worker = PER_WORKER;
    ck_assert_int_eq(DCPS_SHARD_REPLY_BUFFERS, 1);
    ck_assert_uint_eq(dcps_shard_memory(s0), 3 * 64 * sizeof(float) + 3 * per_worker);
    ck_assert_uint_eq(dcps_shard_memory(s1), 3 * 8 * sizeof(float) + 3 * per_worker);
    ck_assert_uint_eq(dcps_shard_memory(s1), 9627); /* 3 · 32 + 3 · (24 + 1 + 1080 + 2072) */
    dcps_shard_memory_t k;
    dcps_shard_memory_kinds(s1, &k);
    ck_assert_uint_eq(k.parameters, 32);
    ck_assert_uint_eq(k.update_buffer, 32);
    ck_assert_uint_eq(k.reply_buffers, 32);
    dcps_shard_destroy(&s0);
    dcps_shard_destroy(&s1);
}
END_TEST

static dcps_shard_t *dc_shard(bool adaptive)
{
    dcps_config_t *cfg = malloc(sizeof *cfg);
    char err[512];
    const char *ov[] = {"model.layers=8,8", "servers.shards=tcp://127.0.0.1:1", "job.workers=2",
                        "optimizer.kind=dcasgd", "optimizer.lr=0.5", "optimizer.dc_lambda=0.25",
                        adaptive ? "optimizer.dc_adaptive=true" : "optimizer.dc_adaptive=false"};
    ck_assert_msg(dcps_config_load(cfg, NULL, ov, 7, err, sizeof err) == 0, "%s", err);
    int rc = 0;
    dcps_shard_t *s = dcps_shard_new(cfg, 0, &rc);
    free(cfg);
    ck_assert_ptr_nonnull(s);
    return s;
}

/* The backup is per worker: a worker that pulled after another's update is
 * corrected against what it received, not against the shard's previous w. */
START_TEST(shard_dcasgd_keeps_one_backup_per_worker)
{
    dcps_shard_t *s = dc_shard(false);
    float w0[72], g[72], bak0[72], bak1[72], expect[72];
    for (int i = 0; i < 72; i++) {
        w0[i] = (float)(i % 7) * 0.25f;
        g[i] = (float)(i % 5) - 2.0f;
    }
    ck_assert_int_eq(dcps_shard_init(s, w0), 1);
    memcpy(bak1, w0, sizeof w0); /* both workers start from the initial parameters */
    memcpy(expect, w0, sizeof w0);
    const dcps_dcasgd_t p = {0.5f, 0.25f, false, 0.95f, 1e-7f};

    /* Worker 0 pushes: its backup equals w, so the step is plain SGD. */
    dcps_shard_apply_dense(s, 0, 1, g);
    dcps_sgd_dense(expect, g, 72, 0.5f);
    ck_assert_mem_eq(dcps_shard_view(s).w, expect, sizeof expect);

    /* Worker 0 pulls (backup 0 = w); worker 1 pushes, corrected against w0. */
    dcps_pull_t reply;
    dcps_shard_pull(s, 0, false, 0, 0, false, &reply);
    ck_assert(reply.dense && reply.values == dcps_shard_view(s).w);
    memcpy(bak0, dcps_shard_view(s).w, sizeof bak0);
    dcps_shard_apply_dense(s, 1, 1, g);
    dcps_dcasgd_dense(expect, bak1, NULL, g, 72, &p);
    ck_assert_mem_eq(dcps_shard_view(s).w, expect, sizeof expect);

    /* Worker 0 pushes again: corrected against what it pulled. */
    dcps_shard_apply_dense(s, 0, 2, g);
    dcps_dcasgd_dense(expect, bak0, NULL, g, 72, &p);
    ck_assert_mem_eq(dcps_shard_view(s).w, expect, sizeof expect);
    ck_assert_uint_eq(dcps_shard_stats(s).version, 3);
    dcps_shard_destroy(&s);
}
END_TEST

START_TEST(memory_of_dcasgd_is_four_plus_p_times_the_shard)
{
    /* w, MS, P backups, the update buffer and the reply buffer; constant λ:
     * no MS. */
    dcps_shard_t *s = dc_shard(true);
    const size_t per_worker = PER_WORKER;
    ck_assert_uint_eq(dcps_shard_memory(s), (4 + 2) * 72 * sizeof(float) + 2 * per_worker);
    dcps_shard_destroy(&s);
    s = dc_shard(false);
    ck_assert_uint_eq(dcps_shard_memory(s), (3 + 2) * 72 * sizeof(float) + 2 * per_worker);
    dcps_shard_destroy(&s);
}
END_TEST

/* --- parameters stay finite ------------------------------------------------------------ */

/* The rules the finite tests run: 0.1's, then the rules of torch.optim,
 * lazy and not, and one with delay compensation before it. */
static const struct {
    const char *name;
    const char *set[3];
} rules[] = {
    {"sgd", {"optimizer.kind=sgd"}},
    {"momentum", {"optimizer.kind=momentum"}},
    {"dcasgd_c", {"optimizer.kind=dcasgd", "optimizer.dc_adaptive=false"}},
    {"dcasgd_a", {"optimizer.kind=dcasgd", "optimizer.dc_adaptive=true"}},
    {"adam", {"optimizer.kind=adam"}},
    {"adamw lazy", {"optimizer.kind=adamw", "optimizer.lazy=true"}},
    {"adagrad", {"optimizer.kind=adagrad"}},
    {"nesterov weight_decay",
     {"optimizer.kind=momentum", "optimizer.nesterov=true", "optimizer.weight_decay=0.01"}},
    {"adam delay_compensation",
     {"optimizer.kind=adam", "optimizer.delay_compensation=adaptive", "optimizer.lazy=true"}},
};
enum { RULES = sizeof rules / sizeof rules[0] };

/* A shard of shard.c's test job (72 parameters, 3 workers, one shard) with
 * rules[rule] in `mode`, lr 0.1. */
static dcps_shard_t *rule_shard(int rule, const char *mode)
{
    dcps_config_t *cfg = malloc(sizeof *cfg);
    char err[512], m[64];
    snprintf(m, sizeof m, "job.mode=%s", mode);
    const char *ov[8] = {"model.layers=8,8", "servers.shards=tcp://127.0.0.1:1", "job.workers=3",
                         "optimizer.lr=0.1", m};
    size_t n = 5;
    for (int j = 0; j < 3 && rules[rule].set[j]; j++)
        ov[n++] = rules[rule].set[j];
    ck_assert_ptr_nonnull(cfg);
    ck_assert_msg(dcps_config_load(cfg, NULL, ov, n, err, sizeof err) == 0, "%s", err);
    int rc = 0;
    dcps_shard_t *s = dcps_shard_new(cfg, 0, &rc);
    free(cfg);
    ck_assert_msg(s != NULL, "%s", dcps_strerror(rc));
    float w0[72];
    for (int i = 0; i < 72; i++)
        w0[i] = (float)(i % 9) * 0.125f - 0.5f;
    ck_assert_int_eq(dcps_shard_init(s, w0), 1);
    return s;
}

/* What a refused update must leave as it was. */
typedef struct {
    float w[72], state[3 * 72], acc[72]; /* state: the rule's arrays, then DC's mean square */
    uint64_t version, pushes, stale_count;
    dcps_session_t session[3];
} snap_t;

/* Floats of state the shard s of 72 parameters keeps (view.state). */
static size_t state_floats(const dcps_shard_t *s)
{
    const dcps_shard_stats_t st = dcps_shard_stats(s);
    return 72 * (size_t)(dcps_rule_states(st.kind) + st.adaptive);
}

static void snap(const dcps_shard_t *s, snap_t *t)
{
    memset(t, 0, sizeof *t);
    memcpy(t->w, dcps_shard_view(s).w, sizeof t->w);
    if (dcps_shard_view(s).state)
        memcpy(t->state, dcps_shard_view(s).state, state_floats(s) * sizeof(float));
    if (dcps_shard_view(s).acc)
        memcpy(t->acc, dcps_shard_view(s).acc, sizeof t->acc);
    t->version = dcps_shard_stats(s).version;
    t->pushes = dcps_shard_stats(s).pushes;
    for (uint32_t r = 0; r < 3; r++) /* as bytes: the snaps are compared with memcmp */
        memcpy(&t->session[r], dcps_shard_session(s, r), sizeof t->session[r]);
    t->stale_count = dcps_shard_stats(s).staleness.count;
}

static void assert_all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(isfinite(x[i]), "element %zu is %g", i, (double)x[i]);
}

/* Issue 18: ten pushes of −FLT_MAX at lr 0.1 made every parameter +Inf. Now,
 * for every rule and both payloads (dense, and sparse of every entry), the push
 * that would make a parameter non-finite is refused with a sentence naming it,
 * and changes nothing: parameters, state, version, counters, sequence numbers,
 * staleness. Every later one too (nothing moved), and pulls serve finite w. */
START_TEST(pushes_of_minus_flt_max_are_refused_before_a_parameter_overflows)
{
    const char *kind = rules[_i / 2].name;
    const bool sparse = _i % 2;
    dcps_shard_t *s = rule_shard(_i / 2, "async");
    float g[72];
    uint32_t idx[72];
    for (uint32_t i = 0; i < 72; i++)
        g[i] = -FLT_MAX, idx[i] = i;
    int accepted = 0, refused = 0;
    char why[256];
    snap_t before, after;
    for (int p = 0; p < 10; p++) {
        snap(s, &before);
        int rc = dcps_shard_push(s, false, 1, (uint64_t)p + 1, dcps_shard_stats(s).version,
                                 sparse ? idx : NULL, g, 72, why, sizeof why);
        if (rc == 0) {
            ck_assert_msg(refused == 0, "%s: push %d applied after a refusal", kind, p);
            accepted++;
            ck_assert_uint_eq(dcps_shard_stats(s).version, before.version + 1);
        } else {
            ck_assert_int_eq(rc, DCPS_E_NONFINITE);
            ck_assert_msg(strstr(why, "parameter ") && strstr(why, "nothing applied"), "%s", why);
            refused++;
            snap(s, &after);
            ck_assert_msg(memcmp(&before, &after, sizeof before) == 0,
                          "%s: a refused push changed the shard", kind);
        }
        assert_all_finite(dcps_shard_view(s).w, 72);
        if (dcps_shard_view(s).state)
            assert_all_finite(dcps_shard_view(s).state, state_floats(s));
    }
    ck_assert_msg(refused > 0, "%s: no push refused", kind);
    ck_assert_uint_eq(dcps_shard_stats(s).pushes, (uint64_t)accepted);
    if (accepted) /* DC-ASGD, adam and adagrad refuse the first push already (g⊙g overflows) */
        ck_assert_int_eq(dcps_session_seq(dcps_shard_session(s, 1), (uint64_t)accepted),
                         DCPS_SEQ_APPLIED);
    ck_assert_int_eq(dcps_session_seq(dcps_shard_session(s, 1), (uint64_t)accepted + 1),
                     DCPS_SEQ_NEW);
    dcps_pull_t reply;
    dcps_shard_pull(s, 1, false, 0, 0, false, &reply);
    ck_assert(reply.dense);
    assert_all_finite(reply.values, 72);
    dcps_shard_destroy(&s);
}
END_TEST

/* Sync: the second push of −FLT_MAX in a round would make the sum −Inf: refused
 * at once, the sum unchanged. A round of one push is applied while w stays
 * finite; the round whose mean would make it Inf is not applied (w, state and
 * version stay, the sum is cleared, rounds_refused counts it). */
START_TEST(sync_refuses_a_sum_and_a_round_that_would_not_be_finite)
{
    const char *kind = rules[_i / 2].name;
    const bool sparse = _i % 2;
    dcps_shard_t *s = rule_shard(_i / 2, "sync");
    float g[72];
    uint32_t idx[72];
    for (uint32_t i = 0; i < 72; i++)
        g[i] = -FLT_MAX, idx[i] = i;
    char why[256];
    snap_t before, after;
    uint64_t seq = 0;

    ck_assert_int_eq(dcps_shard_push(s, true, 0, ++seq, 0, sparse ? idx : NULL, g, 72, why,
                                     sizeof why),
                     0);
    snap(s, &before);
    ck_assert_int_eq(dcps_shard_push(s, true, 1, ++seq, 0, sparse ? idx : NULL, g, 72, why,
                                     sizeof why),
                     DCPS_E_NONFINITE);
    ck_assert_msg(strstr(why, "round's sum") && strstr(why, "not added"), "%s", why);
    snap(s, &after);
    ck_assert(memcmp(&before, &after, sizeof before) == 0);
    ck_assert_int_eq(dcps_session_seq(dcps_shard_session(s, 1), seq), DCPS_SEQ_NEW);
    dcps_shard_clear_round(s);

    int applied = 0, refused = 0;
    for (int round = 0; round < 10; round++) {
        ck_assert_int_eq(dcps_shard_accumulate_dense(s, 2, ++seq, g), 0);
        snap(s, &before);
        int rc = dcps_shard_apply_round(s, 1);
        snap(s, &after);
        if (rc == 0) {
            ck_assert_msg(refused == 0, "%s: round %d applied after a refusal", kind, round);
            applied++;
            ck_assert_uint_eq(after.version, before.version + 1);
        } else {
            ck_assert_int_eq(rc, DCPS_E_NONFINITE);
            ck_assert_msg(strstr(dcps_shard_why(s), "the round's mean gradient"), "%s",
                          dcps_shard_why(s));
            refused++;
            ck_assert_mem_eq(after.w, before.w, sizeof before.w);
            ck_assert_mem_eq(after.state, before.state, sizeof before.state);
            ck_assert_uint_eq(after.version, before.version);
            ck_assert_uint_eq(dcps_shard_stats(s).rounds_refused, (uint64_t)refused);
        }
        for (int i = 0; i < 72; i++)
            ck_assert(after.acc[i] == 0.0f); /* cleared either way */
        assert_all_finite(dcps_shard_view(s).w, 72);
    }
    ck_assert_msg(refused > 0, "%s: no round refused", kind);
    ck_assert_uint_eq(dcps_shard_stats(s).version, (uint64_t)applied);
    dcps_shard_destroy(&s);
}
END_TEST

/* An empty sparse push is no update in async and ssp mode (the router still
 * acknowledges it); in sync mode it is the rank's zero contribution to the
 * round: counted, its seq recorded, and the mean divides by it. */
START_TEST(empty_sparse_push_is_no_update_but_counts_in_a_sync_round)
{
    char why[64];
    static const uint32_t no_idx[1] = {0};
    static const float no_val[1] = {0};
    dcps_shard_t *s = rule_shard(1, "async"); /* momentum */
    snap_t before, after;
    snap(s, &before);
    ck_assert_int_eq(dcps_shard_push(s, false, 1, 5, 0, no_idx, no_val, 0, why,
                                     sizeof why),
                     0);
    snap(s, &after);
    ck_assert(memcmp(&before, &after, sizeof before) == 0); /* momentum did not decay */
    dcps_shard_destroy(&s);

    s = rule_shard(0, "sync"); /* sgd */
    float g[72] = {0};
    g[3] = 8;
    const float w3 = dcps_shard_view(s).w[3];
    ck_assert_int_eq(dcps_shard_push(s, true, 0, 1, 0, NULL, g, 72, why, sizeof why), 0);
    ck_assert_int_eq(dcps_shard_push(s, true, 1, 1, 0, no_idx, no_val, 0, why,
                                     sizeof why),
                     0);
    ck_assert_uint_eq(dcps_shard_stats(s).pushes, 2);
    ck_assert_int_eq(dcps_session_seq(dcps_shard_session(s, 1), 1), DCPS_SEQ_APPLIED);
    ck_assert_int_eq(dcps_shard_apply_round(s, 2), 0);
    ck_assert_float_eq(dcps_shard_view(s).w[3], w3 - 0.1f * 4.0f); /* the mean of 8 and nothing */
    ck_assert_uint_eq(dcps_shard_stats(s).version, 1);
    dcps_shard_destroy(&s);
}
END_TEST

/* The update buffer swaps with w: a checkpoint's spans follow w and the sum
 * wherever they are, and add up to floats. */
START_TEST(spans_follow_w_and_the_sum_and_add_up_to_floats)
{
    dcps_shard_t *s = rule_shard(1, "sync"); /* momentum */
    dcps_span_t sp[DCPS_SHARD_SPANS];
    float g[72];
    for (int i = 0; i < 72; i++)
        g[i] = 1;
    for (int round = 0; round < 3; round++) {
        ck_assert_int_eq(dcps_shard_accumulate_dense(s, 0, (uint64_t)round + 1, g), 0);
        size_t k = dcps_shard_spans(s, sp), total = 0;
        ck_assert_uint_eq(k, 3); /* w, u, the sum */
        ck_assert_ptr_eq(sp[0].p, dcps_shard_view(s).w);
        ck_assert_ptr_eq(sp[1].p, dcps_shard_view(s).state);
        ck_assert_ptr_eq(sp[2].p, dcps_shard_view(s).acc);
        for (size_t i = 0; i < k; i++) {
            total += sp[i].n;
            ck_assert_ptr_ne(sp[i].p, dcps_shard_view(s).spare);
        }
        ck_assert_uint_eq(total, dcps_shard_stats(s).floats);
        ck_assert_int_eq(dcps_shard_apply_round(s, 1), 0);
    }
    dcps_shard_destroy(&s);
}
END_TEST

/* ---- every rule of [optimizer] kind (issue 27) ----------------------------------------- */

/* A shard of 72 parameters (one shard, 2 workers, async) of the job with
 * these overrides on top, initialised with w0 (72 values). */
static dcps_shard_t *opt_shard(const char *const *set, size_t k, const float *w0)
{
    dcps_config_t *cfg = malloc(sizeof *cfg);
    char err[512];
    const char *ov[16] = {"model.layers=8,8", "servers.shards=tcp://127.0.0.1:1",
                          "job.workers=2"};
    ck_assert_uint_le(k, 13);
    memcpy(ov + 3, set, k * sizeof *set);
    ck_assert_ptr_nonnull(cfg);
    ck_assert_msg(dcps_config_load(cfg, NULL, ov, 3 + k, err, sizeof err) == 0, "%s", err);
    int rc = 0;
    dcps_shard_t *s = dcps_shard_new(cfg, 0, &rc);
    free(cfg);
    ck_assert_msg(s != NULL, "%s", dcps_strerror(rc));
    ck_assert_int_eq(dcps_shard_init(s, w0), 1);
    return s;
}

/* torch.optim.Adam computes its step size lr / (1 − β1^t) from the Python
 * float lr, in double, and rounds it to float once; so does the shard, from
 * [optimizer] lr as read. (It used to start from lr rounded to float: at lr
 * 0.001, steps 1 and 3 then took a step size one ulp off torch's.) Three
 * steps against torch's float arithmetic, written out. */
START_TEST(adam_step_size_is_computed_from_the_lr_in_double_as_torch_does)
{
    const char *set[] = {"optimizer.kind=adam", "optimizer.lr=0.001"};
    float w[72], m[72] = {0}, v[72] = {0}, g[72];
    for (int i = 0; i < 72; i++)
        w[i] = 0.01f * (float)(i % 13) - 0.05f;
    dcps_shard_t *s = opt_shard(set, 2, w);
    const double lr = 0.001;
    ck_assert((float)(lr / (1 - 0.9)) != (float)((double)(float)lr / (1 - 0.9)));
    for (uint64_t t = 1; t <= 3; t++) {
        const float step_size = (float)(lr / (1 - pow(0.9, (double)t)));
        const float bc2_sqrt = (float)sqrt(1 - pow(0.999, (double)t));
        for (int i = 0; i < 72; i++) {
            g[i] = 0.5f * (float)((i * 7 + (int)t) % 11) - 2.5f;
            m[i] = m[i] * 0.9f + (float)(1 - 0.9) * g[i];                /* exp_avg */
            v[i] = v[i] * 0.999f + (float)(1 - 0.999) * g[i] * g[i];     /* exp_avg_sq */
            const float denom = sqrtf(v[i]) / bc2_sqrt + (float)1e-8;    /* denom */
            w[i] = w[i] + -step_size * m[i] / denom;                      /* addcdiv_ */
        }
        ck_assert_int_eq(dcps_shard_apply_dense(s, 0, t, g), 0);
        assert_floats(dcps_shard_view(s).w, w, 72);
        ck_assert_mem_eq(dcps_shard_view(s).state, m, sizeof m);
        ck_assert_mem_eq(dcps_shard_view(s).state + 72, v, sizeof v);
    }
    dcps_shard_destroy(&s);
}
END_TEST

/* Runs the same 24 updates from two workers on shards a and b (pulls now and
 * then, so that the workers' backups differ from w; dense and sparse pushes)
 * and checks after each that both hold the same bits: w and state. */
static void same_run(dcps_shard_t *a, dcps_shard_t *b)
{
    const size_t floats = state_floats(a) * sizeof(float);
    const uint32_t idx[5] = {0, 5, 9, 40, 71};
    float g[72];
    char why[DCPS_SHARD_WHY_MAX];
    ck_assert_uint_eq(state_floats(a), state_floats(b));
    for (int step = 0; step < 24; step++) {
        const uint32_t rank = (uint32_t)step % 2;
        if (step % 3 != 2) {
            dcps_pull_t pa, pb;
            dcps_shard_pull(a, rank, false, 0, 0, false, &pa);
            dcps_shard_pull(b, rank, false, 0, 0, false, &pb);
        }
        for (int i = 0; i < 72; i++)
            g[i] = 0.25f * (float)((i * 5 + step * 3) % 9) - 1.0f;
        const uint32_t *pi = step % 4 == 3 ? idx : NULL;
        const size_t k = pi ? 5 : 72;
        const uint64_t seq = (uint64_t)step / 2 + 1;
        ck_assert_int_eq(dcps_shard_push(a, false, rank, seq, 0, pi, g, k, why, sizeof why), 0);
        ck_assert_int_eq(dcps_shard_push(b, false, rank, seq, 0, pi, g, k, why, sizeof why), 0);
        ck_assert_msg(memcmp(dcps_shard_view(a).w, dcps_shard_view(b).w, sizeof g) == 0,
                      "step %d: w differs", step);
        ck_assert_msg(memcmp(dcps_shard_view(a).state, dcps_shard_view(b).state, floats) == 0,
                      "step %d: state differs", step);
    }
}

/* kind = dcasgd is sgd with delay compensation: each spelling of DC-ASGD-a,
 * and of DC-ASGD-c, gives the same shard, bit for bit. */
START_TEST(dcasgd_is_sgd_with_delay_compensation_bit_for_bit)
{
    const char *const spell[][5] = {
        {"optimizer.kind=sgd", "optimizer.delay_compensation=adaptive"},
        {"optimizer.kind=dcasgd", "optimizer.dc_adaptive=true"},
        {"optimizer.kind=dcasgd", "optimizer.delay_compensation=adaptive"},
        {"optimizer.kind=sgd", "optimizer.delay_compensation=adaptive", "optimizer.dc_adaptive=1"},
        {"optimizer.kind=sgd", "optimizer.delay_compensation=constant"},
        {"optimizer.kind=dcasgd"},
    };
    const bool adaptive = _i < 3;
    const int first = adaptive ? 0 : 4, second = adaptive ? 1 + _i : 5;
    float w0[72];
    for (int i = 0; i < 72; i++)
        w0[i] = 0.125f * (float)(i % 9) - 0.5f;
    const char *common[] = {"optimizer.lr=0.1", "optimizer.dc_lambda=0.5",
                            "optimizer.dc_ms_decay=0.9"};
    const char *set_a[8], *set_b[8];
    size_t ka = 0, kb = 0;
    for (int j = 0; j < 3; j++)
        set_a[ka++] = set_b[kb++] = common[j];
    for (int j = 0; j < 5 && spell[first][j]; j++)
        set_a[ka++] = spell[first][j];
    for (int j = 0; j < 5 && spell[second][j]; j++)
        set_b[kb++] = spell[second][j];
    dcps_shard_t *a = opt_shard(set_a, ka, w0), *b = opt_shard(set_b, kb, w0);
    for (dcps_shard_t *s = a; s; s = s == a ? b : NULL) {
        ck_assert_int_eq(dcps_shard_stats(s).kind, DCPS_OPT_SGD);
        ck_assert_int_eq(dcps_shard_stats(s).delay,
                         adaptive ? DCPS_DELAY_ADAPTIVE : DCPS_DELAY_CONSTANT);
        ck_assert_int_eq(dcps_shard_stats(s).adaptive, adaptive);
    }
    same_run(a, b);
    ck_assert_msg(memcmp(dcps_shard_view(a).w, w0, sizeof w0) != 0, "nothing moved");
    dcps_shard_destroy(&a);
    dcps_shard_destroy(&b);
}
END_TEST

/* Delay compensation before another rule: momentum with constant λ is
 * momentum (torch.optim.SGD's) applied to gc = g + λ g⊙g⊙(w − w_bak(m)),
 * w_bak(m) what worker m last pulled; a sparse push corrects its entries
 * (gc is 0 where g is). Against a reference written here, in torch's order
 * of float operations; the correction is not zero (the reference without it
 * ends elsewhere). */
START_TEST(momentum_with_constant_delay_compensation_is_momentum_of_the_corrected_gradient)
{
    const char *set[] = {"optimizer.kind=momentum", "optimizer.momentum=0.9",
                         "optimizer.lr=0.05", "optimizer.delay_compensation=constant",
                         "optimizer.dc_lambda=0.5"};
    const float lr = 0.05f, mu = 0.9f, lambda = 0.5f;
    float w[72], u[72] = {0}, bak[2][72], plain[72], plain_u[72] = {0}, g[72];
    const uint32_t idx[4] = {2, 5, 33, 70};
    char why[DCPS_SHARD_WHY_MAX];
    for (int i = 0; i < 72; i++)
        w[i] = plain[i] = bak[0][i] = bak[1][i] = 0.125f * (float)(i % 9) - 0.5f;
    dcps_shard_t *s = opt_shard(set, 5, w); /* INIT sets every backup to w0 */
    ck_assert_int_eq(dcps_shard_stats(s).delay, DCPS_DELAY_CONSTANT);
    for (int step = 0; step < 20; step++) {
        const uint32_t rank = (uint32_t)step % 2;
        if (step % 3 == 0) { /* rank pulls: its backup is w now */
            dcps_pull_t p;
            dcps_shard_pull(s, rank, false, 0, 0, false, &p);
            memcpy(bak[rank], w, sizeof w);
        }
        const bool sparse = step % 5 == 4;
        float dense[72] = {0};
        for (int i = 0; i < 72; i++)
            g[i] = 0.25f * (float)((i * 7 + step * 5) % 13) - 1.5f;
        for (int i = 0; i < 72; i++)
            dense[i] = sparse ? 0 : g[i];
        for (int j = 0; sparse && j < 4; j++)
            dense[idx[j]] = g[j];
        for (int i = 0; i < 72; i++) {
            const float gc = dense[i] + lambda * dense[i] * dense[i] * (w[i] - bak[rank][i]);
            u[i] = mu * u[i] + gc; /* buf.mul_(momentum).add_(d_p) */
            w[i] = w[i] + -lr * u[i]; /* param.add_(buf, alpha=-lr) */
            plain_u[i] = mu * plain_u[i] + dense[i];
            plain[i] = plain[i] + -lr * plain_u[i];
        }
        ck_assert_int_eq(dcps_shard_push(s, false, rank, (uint64_t)step / 2 + 1, 0,
                                         sparse ? idx : NULL, g, sparse ? 4 : 72,
                                         why, sizeof why),
                         0);
        assert_floats(dcps_shard_view(s).w, w, 72);
        ck_assert_mem_eq(dcps_shard_view(s).state, u, sizeof u);
    }
    ck_assert_msg(memcmp(plain, w, sizeof w) != 0, "the correction changed nothing");
    dcps_shard_destroy(&s);
}
END_TEST

/* A generic rule refuses a push that would make a parameter, or its state
 * alone, non-finite: adam's v and adagrad's sum overflow while the parameter
 * stays finite (the step divides by √Inf), nesterov momentum overflows the
 * parameter, and adaptive delay compensation its mean square. Dense, sparse
 * non-lazy and lazy: DCPS_E_NONFINITE, a sentence naming the parameter, and
 * nothing changed (w, every state array, version, counters, sessions), after a
 * push that made the state nonzero; the next good push is applied. */
START_TEST(generic_rules_refuse_a_push_that_would_make_a_parameter_or_its_state_non_finite)
{
    static const struct {
        const char *set[3];
        float big;
        const char *says;
    } cases[] = {
        {{"optimizer.kind=adam"}, 1e21f, "adam state of parameter 5 non-finite"},
        {{"optimizer.kind=adagrad"}, 2e19f, "adagrad state of parameter 5 non-finite"},
        {{"optimizer.kind=momentum", "optimizer.nesterov=true"}, -FLT_MAX,
         "would make parameter 5 inf"},
        {{"optimizer.kind=adamw", "optimizer.delay_compensation=adaptive"}, 1e20f,
         "delay compensation would make the gradient of parameter 5 or its mean square "
         "non-finite"},
    };
    const int form = _i % 3; /* dense, sparse, sparse lazy */
    const char *set[6] = {"optimizer.lr=0.1", form == 2 ? "optimizer.lazy=true"
                                                        : "optimizer.lazy=false"};
    size_t k = 2;
    for (int j = 0; j < 3 && cases[_i / 3].set[j]; j++)
        set[k++] = cases[_i / 3].set[j];
    float w0[72], g[72];
    const uint32_t idx[5] = {1, 5, 9, 30, 71};
    for (int i = 0; i < 72; i++)
        w0[i] = 0.125f * (float)(i % 9) - 0.5f, g[i] = 0.5f - 0.125f * (float)(i % 5);
    dcps_shard_t *s = opt_shard(set, k, w0);
    char why[DCPS_SHARD_WHY_MAX];
    const uint32_t *pi = form ? idx : NULL;
    const size_t n = form ? 5 : 72;
    dcps_pull_t p;
    dcps_shard_pull(s, 1, false, 0, 0, false, &p);
    ck_assert_int_eq(dcps_shard_push(s, false, 0, 1, 0, pi, g, n, why, sizeof why), 0);
    snap_t before, after;
    snap(s, &before);
    float bad[72];
    memcpy(bad, g, sizeof bad);
    if (form) /* the sparse values are v[j] for idx[j]: 5 and 9 */
        bad[1] = bad[2] = cases[_i / 3].big;
    else
        bad[5] = bad[9] = cases[_i / 3].big;
    ck_assert_int_eq(dcps_shard_push(s, false, 1, 1, 0, pi, bad, n, why, sizeof why),
                     DCPS_E_NONFINITE);
    ck_assert_msg(strstr(why, cases[_i / 3].says) && strstr(why, "nothing applied"), "%s", why);
    snap(s, &after);
    ck_assert_msg(memcmp(&before, &after, sizeof before) == 0, "a refused push changed the shard");
    ck_assert_int_eq(dcps_session_seq(dcps_shard_session(s, 1), 1), DCPS_SEQ_NEW);
    ck_assert_int_eq(dcps_shard_push(s, false, 1, 1, 0, pi, g, n, why, sizeof why), 0);
    ck_assert_uint_eq(dcps_shard_stats(s).version, before.version + 1);
    assert_all_finite(dcps_shard_view(s).w, 72);
    assert_all_finite(dcps_shard_view(s).state, state_floats(s));
    dcps_shard_destroy(&s);
}
END_TEST

/* ---- pull replies without a copy (dcps_shard_share) -------------------------------- */

/* The jobs the next test runs: each update rule, async and sync; the rules of
 * torch.optim lazy (in place) and not (out of place). */
static const char *const held_jobs[][3] = {
    {"job.mode=async", "optimizer.kind=sgd", "optimizer.dc_adaptive=false"},
    {"job.mode=async", "optimizer.kind=momentum", "optimizer.dc_adaptive=false"},
    {"job.mode=async", "optimizer.kind=dcasgd", "optimizer.dc_adaptive=false"},
    {"job.mode=async", "optimizer.kind=dcasgd", "optimizer.dc_adaptive=true"},
    {"job.mode=sync", "optimizer.kind=sgd", "optimizer.dc_adaptive=false"},
    {"job.mode=sync", "optimizer.kind=momentum", "optimizer.dc_adaptive=false"},
    {"job.mode=async", "optimizer.kind=adam", "optimizer.lazy=true"},
    {"job.mode=async", "optimizer.kind=adamw", "optimizer.lazy=false"},
    {"job.mode=sync", "optimizer.kind=adagrad", "optimizer.lazy=true"},
    {"job.mode=async", "optimizer.kind=momentum", "optimizer.delay_compensation=constant"},
};

static dcps_shard_t *held_shard(int job_i)
{
    dcps_config_t *cfg = malloc(sizeof *cfg);
    char err[512];
    const char *ov[] = {"model.layers=8,8", "servers.shards=tcp://127.0.0.1:1", "job.workers=2",
                        "optimizer.lr=0.5", "optimizer.momentum=0.9",
                        held_jobs[job_i][0], held_jobs[job_i][1], held_jobs[job_i][2]};
    ck_assert_ptr_nonnull(cfg);
    ck_assert_msg(dcps_config_load(cfg, NULL, ov, 8, err, sizeof err) == 0, "%s", err);
    int rc = 0;
    dcps_shard_t *s = dcps_shard_new(cfg, 0, &rc);
    free(cfg);
    ck_assert_ptr_nonnull(s);
    return s;
}

typedef struct {
    const float *buf;
    void *hint;
    float sent[72]; /* what the buffer held when the reply took it */
} held_t;

/* A reply holds w's buffer from its pull until ZeroMQ has sent it, while the
 * pushes of other workers go on (dense and sparse, in place and out of
 * place): the buffer keeps exactly the w the reply names, and the parameters
 * are bit for bit those of a shard whose replies are copied at once. A pull
 * while the reply buffer is held by another version is copied (counted). */
START_TEST(held_replies_keep_their_w_and_change_no_update)
{
    dcps_shard_t *a = held_shard(_i), *b = held_shard(_i);
    bool sync = strcmp(held_jobs[_i][0], "job.mode=sync") == 0;
    const size_t n = dcps_shard_stats(a).n;
    float w0[72], g[72];
    uint32_t idx[] = {1, 5, 9, 40, 71};
    held_t h[16];
    int nh = 0;
    char why[DCPS_SHARD_WHY_MAX];
    ck_assert_uint_eq(n, 72);
    for (size_t i = 0; i < n; i++)
        w0[i] = 0.01f * (float)(i % 7) - 0.03f;
    ck_assert_int_eq(dcps_shard_init(a, w0), 1);
    ck_assert_int_eq(dcps_shard_init(b, w0), 1);
    for (int step = 0; step < 60; step++) {
        uint32_t rank = (uint32_t)step % 2;
        if (step % 3 == 0 || step % 7 == 1) {
            dcps_pull_t pa, pb;
            dcps_shard_pull(a, rank, false, 0, 0, false, &pa);
            dcps_shard_pull(b, rank, false, 0, 0, false, &pb);
            ck_assert(pa.dense && pa.values == dcps_shard_view(a).w);
            ck_assert_mem_eq(pa.values, pb.values, n * sizeof(float));
            void *hint = dcps_shard_share(a, pa.values);
            if (hint) {
                ck_assert_int_lt(nh, 16);
                h[nh] = (held_t){.buf = pa.values, .hint = hint};
                memcpy(h[nh++].sent, pa.values, n * sizeof(float));
            }
        }
        for (size_t i = 0; i < n; i++)
            g[i] = 0.001f * (float)((i * 31 + (size_t)step * 17) % 13) - 0.006f;
        const uint32_t *pi = step % 4 == 1 ? idx : NULL;
        size_t k = pi ? sizeof idx / sizeof idx[0] : n;
        uint64_t seq = (uint64_t)step + 1;
        ck_assert_int_eq(dcps_shard_push(a, sync, rank, seq, dcps_shard_stats(a).version, pi, g, k,
                                         why, sizeof why),
                         0);
        ck_assert_int_eq(dcps_shard_push(b, sync, rank, seq, dcps_shard_stats(b).version, pi, g, k,
                                         why, sizeof why),
                         0);
        if (sync && rank == 1) {
            ck_assert_int_eq(dcps_shard_apply_round(a, 2), 0);
            ck_assert_int_eq(dcps_shard_apply_round(b, 2), 0);
        }
        ck_assert_msg(memcmp(dcps_shard_view(a).w, dcps_shard_view(b).w, n * sizeof(float)) == 0,
                      "step %d: w differs", step);
        if (dcps_shard_view(a).state)
            ck_assert_mem_eq(dcps_shard_view(a).state, dcps_shard_view(b).state,
                             state_floats(a) * sizeof(float));
        ck_assert_uint_eq(dcps_shard_stats(a).version, dcps_shard_stats(b).version);
        for (int j = 0; j < nh; j++)
            ck_assert_msg(memcmp(h[j].buf, h[j].sent, n * sizeof(float)) == 0,
                          "step %d: a held reply's buffer was written", step);
        if (step % 5 == 4 && nh > 0) { /* ZeroMQ is done with the oldest reply */
            dcps_snapshot_release((void *)h[0].buf, h[0].hint);
            memmove(h, h + 1, (size_t)--nh * sizeof h[0]);
        }
    }
    ck_assert_uint_gt(dcps_shard_stats(a).version, 10);
    ck_assert_uint_gt(dcps_shard_stats(a).pulls_copied, 0);
    ck_assert_uint_eq(dcps_shard_stats(b).pulls_copied, 0);
    /* Replies may outlive their shard: the set goes with the last release. */
    dcps_shard_destroy(&a);
    for (int j = 0; j < nh; j++)
        dcps_snapshot_release((void *)h[j].buf, h[j].hint);
    dcps_shard_destroy(&b);
}
END_TEST

/* Replies hold at most DCPS_SHARD_REPLY_BUFFERS buffers; more replies of the
 * same w share its buffer; once released, the next pull shares again. */
START_TEST(replies_share_one_held_w_and_copy_another)
{
    dcps_shard_t *s = held_shard(0);
    float g[72] = {0}, w0[72] = {0};
    char why[DCPS_SHARD_WHY_MAX];
    dcps_pull_t p;
    dcps_shard_init(s, w0);
    dcps_shard_pull(s, 0, false, 0, 0, false, &p);
    void *h1 = dcps_shard_share(s, p.values), *h2 = dcps_shard_share(s, p.values);
    const float *v1 = p.values;
    ck_assert_ptr_nonnull(h1);
    ck_assert_ptr_eq(h1, h2); /* the same buffer, held twice */
    g[0] = 1;
    ck_assert_int_eq(dcps_shard_push(s, false, 0, 1, 0, NULL, g, 72, why, sizeof why), 0);
    ck_assert_ptr_ne(dcps_shard_view(s).w, v1);
    ck_assert_int_eq(dcps_shard_push(s, false, 0, 2, 1, NULL, g, 72, why, sizeof why), 0);
    ck_assert_float_eq(v1[0], 0); /* the version it was pulled at */
    ck_assert_float_eq(dcps_shard_view(s).w[0], -1); /* two steps of lr 0.5 */
    dcps_shard_pull(s, 1, false, 0, 0, false, &p);
    ck_assert_ptr_null(dcps_shard_share(s, p.values)); /* another version: copied */
    ck_assert_uint_eq(dcps_shard_stats(s).pulls_copied, 1);
    dcps_snapshot_release((void *)v1, h1);
    ck_assert_ptr_null(dcps_shard_share(s, p.values)); /* still held once */
    dcps_snapshot_release((void *)v1, h2);
    void *h3 = dcps_shard_share(s, p.values);
    ck_assert_ptr_nonnull(h3);
    ck_assert_uint_eq(dcps_shard_stats(s).pulls_copied, 2);
    /* Not w (a mirror, a delta): never shared. */
    ck_assert_ptr_null(dcps_shard_share(s, dcps_shard_view(s).spare));
    dcps_snapshot_release((void *)p.values, h3);
    dcps_shard_destroy(&s);
}
END_TEST

static Suite *shard_suite(void)
{
    Suite *s = suite_create("shard");
    TCase *tc = tcase_create("store");
    tcase_add_test(tc, new_shard_takes_range_workers_and_lr_from_the_job);
    tcase_add_test(tc, destroy_clears_the_pointer_and_accepts_null);
    tcase_add_test(tc, init_sets_parameters_once);
    tcase_add_test(tc, apply_dense_gives_hand_computed_values_and_bumps_version);
    tcase_add_test(tc, apply_sparse_uses_global_indices);
    tcase_add_test(tc, shard_records_each_ranks_last_push_applied_or_dropped);
    tcase_add_test(tc, large_seqs_are_tracked_in_64_bits);
    tcase_add_test(tc, sparse_push_equals_dense_push_of_the_same_vector);
    tcase_add_test(tc, memory_counts_parameters_and_per_worker_state);
    tcase_add_test(tc, shard_dcasgd_keeps_one_backup_per_worker);
    tcase_add_test(tc, memory_of_dcasgd_is_four_plus_p_times_the_shard);
    suite_add_tcase(s, tc);

    tc = tcase_create("finite");
    tcase_add_loop_test(tc, pushes_of_minus_flt_max_are_refused_before_a_parameter_overflows, 0,
                        2 * RULES);
    tcase_add_loop_test(tc, sync_refuses_a_sum_and_a_round_that_would_not_be_finite, 0,
                        2 * RULES);
    tcase_add_test(tc, empty_sparse_push_is_no_update_but_counts_in_a_sync_round);
    tcase_add_test(tc, spans_follow_w_and_the_sum_and_add_up_to_floats);
    suite_add_tcase(s, tc);

    tc = tcase_create("every rule");
    tcase_add_test(tc, adam_step_size_is_computed_from_the_lr_in_double_as_torch_does);
    tcase_add_loop_test(tc, dcasgd_is_sgd_with_delay_compensation_bit_for_bit, 0, 4);
    tcase_add_test(tc,
                   momentum_with_constant_delay_compensation_is_momentum_of_the_corrected_gradient);
    tcase_add_loop_test(
        tc, generic_rules_refuse_a_push_that_would_make_a_parameter_or_its_state_non_finite, 0,
        12);
    suite_add_tcase(s, tc);

    tc = tcase_create("replies without a copy");
    tcase_add_loop_test(tc, held_replies_keep_their_w_and_change_no_update, 0,
                        (int)(sizeof held_jobs / sizeof held_jobs[0]));
    tcase_add_test(tc, replies_share_one_held_w_and_copy_another);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return dcps_test_run(shard_suite());
}
