/* dcps tests — delta pulls (server/shard.h dcps_shard_pull, docs/algorithms.md).
 *
 * Workers are played here by arrays that take each reply exactly as the client
 * library does (a dense range is copied, a delta is added with
 * dcps_scatter_add_cpu). After every reply a worker applied, its copy must
 * equal the shard's mirror of it bit for bit, and the version it names must be
 * the mirror's tag. A reply the worker never saw (lost) makes the next one
 * dense once the shard has changed, after which they agree again; before that
 * the worker may be sent the lost delta again. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/error.h"
#include "common/rng.h"
#include "kernels/topk.h"
#include "server/shard.h"
#include "tests/check_run.h"

#define N 1000 /* one shard, [0, N): model 1,500 has 1·500 + 500 */
#define P 3

typedef struct {
    float w[N];
    bool holds;
    uint64_t tag;
} worker_t;

/* A shard of mode, update rule and density, with one more override (or NULL). */
static dcps_shard_t *delta_shard_with(const char *mode, const char *kind, const char *density,
                                      const char *extra)
{
    dcps_config_t *cfg = malloc(sizeof *cfg);
    char err[512], m[64], k[64], d[64];
    snprintf(m, sizeof m, "job.mode=%s", mode);
    snprintf(k, sizeof k, "optimizer.kind=%s", kind);
    snprintf(d, sizeof d, "compression.density=%s", density);
    const char *ov[] = {"model.layers=1,500", "servers.shards=tcp://127.0.0.1:1", "job.workers=3",
                        "compression.pull=delta", "optimizer.lr=0.1", m, k, d, extra};
    ck_assert_ptr_nonnull(cfg);
    ck_assert_msg(dcps_config_load(cfg, NULL, ov, extra ? 9 : 8, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_uint_eq(cfg->n_params, N);
    int rc = 0;
    dcps_shard_t *s = dcps_shard_new(cfg, 0, &rc);
    free(cfg);
    ck_assert_msg(s != NULL, "%s", dcps_strerror(rc));
    float w0[N];
    for (int i = 0; i < N; i++)
        w0[i] = (float)sin(i * 0.37);
    ck_assert_int_eq(dcps_shard_init(s, w0), 1);
    return s;
}

static dcps_shard_t *delta_shard(const char *mode, const char *kind, const char *density)
{
    return delta_shard_with(mode, kind, density, NULL);
}

/* The shard's mirror of worker r. */
static const float *mirror(const dcps_shard_t *s, int r)
{
    const dcps_shard_view_t v = dcps_shard_view(s);
    return v.mirror ? v.mirror : v.bak + (size_t)r * dcps_shard_stats(s).n;
}

/* Worker r pulls; unless `lost`, it applies the reply. Returns the reply. */
static dcps_pull_t pull(dcps_shard_t *s, worker_t *wk, int r, bool lost)
{
    dcps_pull_t p;
    dcps_shard_pull(s, (uint32_t)r, wk->holds, wk->tag, 0, false, &p);
    if (!lost) {
        if (p.dense) {
            ck_assert_uint_eq(p.k, N);
            memcpy(wk->w, p.values, N * sizeof(float));
        } else {
            ck_assert_msg(wk->holds, "a delta for a worker that holds nothing");
            for (size_t j = 1; j < p.k; j++)
                ck_assert_uint_gt(p.idx[j], p.idx[j - 1]);
            dcps_scatter_add_cpu(wk->w, p.idx, p.values, p.k, 1.0f);
        }
        wk->holds = true;
        wk->tag = dcps_shard_stats(s).version;
        ck_assert_msg(memcmp(wk->w, mirror(s, r), sizeof wk->w) == 0,
                      "worker %d's copy differs from its mirror", r);
    }
    return p;
}

static void random_grad(dcps_rng_t *rng, float *g)
{
    for (int i = 0; i < N; i++)
        g[i] = dcps_rng_normal(rng);
}

START_TEST(async_copies_equal_their_mirrors_and_a_lost_reply_forces_a_dense_one)
{
    const char *kinds[] = {"sgd", "momentum", "dcasgd"};
    for (int kk = 0; kk < 3; kk++) {
        dcps_shard_t *s = delta_shard("async", kinds[kk], "0.02");
        ck_assert_uint_eq(dcps_shard_stats(s).k_pull, 20);
        static worker_t wk[P];
        memset(wk, 0, sizeof wk);
        dcps_rng_t rng;
        dcps_rng_seed(&rng, 11 + (uint64_t)kk);
        float g[N];
        uint64_t seq[P] = {0}, deltas = 0, forced = 0;
        bool lost[P] = {false};
        uint64_t lost_at[P] = {0};
        for (int step = 0; step < 400; step++) {
            int r = (int)dcps_rng_below(&rng, P);
            if (dcps_rng_below(&rng, 2)) {
                random_grad(&rng, g);
                dcps_shard_apply_dense(s, (uint32_t)r, ++seq[r], g);
                continue;
            }
            bool lose = dcps_rng_below(&rng, 10) == 0;
            uint64_t tag = dcps_shard_view(s).tag[r], version = dcps_shard_stats(s).version;
            bool current = wk[r].holds && wk[r].tag == tag;
            dcps_pull_t p = pull(s, &wk[r], r, lose);
            if (lost[r] && version != lost_at[r]) {
                ck_assert_msg(p.dense, "after a lost reply and an update the reply is dense");
                forced++;
            } else if (!p.dense) {
                /* The worker holds the mirror's tag, or the tag a lost delta
                 * started from while nothing changed since (it gets that delta again). */
                ck_assert(current || lost[r]);
                ck_assert_uint_eq(p.k, current && version == tag ? 0 : 20);
                deltas++;
            }
            /* A lost reply that moved the mirror leaves the worker behind it. */
            if (lose && !lost[r] && dcps_shard_view(s).tag[r] != tag)
                lost[r] = true, lost_at[r] = dcps_shard_stats(s).version;
            else if (!lose)
                lost[r] = false;
        }
        ck_assert_uint_gt(deltas, 50);
        ck_assert_uint_gt(forced, 3);
        dcps_shard_destroy(&s);
    }
}
END_TEST

START_TEST(a_delta_moves_the_largest_differences_and_an_unchanged_shard_sends_none)
{
    dcps_shard_t *s = delta_shard("async", "sgd", "0.01"); /* k = 10 */
    worker_t wk = {0};
    float g[N] = {0};
    pull(s, &wk, 0, false); /* dense: it held nothing */
    for (int i = 0; i < N; i++)
        g[i] = (float)(i % 100) * 1e-3f; /* entries 99, 199, ... move most */
    g[500] = 5.0f;
    dcps_shard_apply_dense(s, 1, 1, g);
    dcps_pull_t p = pull(s, &wk, 0, false);
    ck_assert(!p.dense);
    ck_assert_uint_eq(p.k, 10);
    /* 500 and the nine largest others: 99..999 step 100 minus the last (ties:
     * lower index first; |0.099·0.1| each). */
    const uint32_t want[10] = {99, 199, 299, 399, 499, 500, 599, 699, 799, 899};
    for (int j = 0; j < 10; j++)
        ck_assert_uint_eq(p.idx[j], want[j]);
    ck_assert_float_eq(p.values[5], dcps_shard_view(s).w[500] - (float)sin(500 * 0.37));
    /* No push since: the mirror stays, nothing is sent. */
    p = pull(s, &wk, 0, false);
    ck_assert(!p.dense);
    ck_assert_uint_eq(p.k, 0);
    /* The residual is kept, not lost: the next version sends entry 999. */
    memset(g, 0, sizeof g);
    dcps_shard_apply_dense(s, 1, 2, g);
    p = pull(s, &wk, 0, false);
    ck_assert(!p.dense);
    ck_assert_uint_eq(p.idx[9], 999);
    dcps_shard_destroy(&s);
}
END_TEST

/* One sync round: a random dense push from each of the P workers, then their
 * mean applied. */
static void sync_round(dcps_shard_t *s, dcps_rng_t *rng, uint64_t *seq)
{
    float g[N];
    for (int r = 0; r < P; r++) {
        random_grad(rng, g);
        ck_assert_int_eq(dcps_shard_accumulate_dense(s, (uint32_t)r, ++*seq, g), 0);
    }
    ck_assert_int_eq(dcps_shard_apply_round(s, P), 0);
}

START_TEST(sync_workers_share_one_mirror_and_one_delta_per_round)
{
    dcps_shard_t *s = delta_shard("sync", "dcasgd", "0.05");
    static worker_t wk[P];
    memset(wk, 0, sizeof wk);
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 3);
    uint64_t seq = 0;
    for (int r = 0; r < P; r++)
        ck_assert(pull(s, &wk[r], r, false).dense);
    for (int round = 1; round <= 30; round++) {
        sync_round(s, &rng, &seq);
        /* Worker 2 loses its reply in round 10: dense in round 11, deltas after. */
        dcps_pull_t first = pull(s, &wk[0], 0, false);
        ck_assert(!first.dense);
        ck_assert_uint_eq(first.k, 50);
        uint32_t idx0[50];
        memcpy(idx0, first.idx, sizeof idx0);
        for (int r = 1; r < P; r++) {
            dcps_pull_t p = pull(s, &wk[r], r, r == 2 && round == 10);
            ck_assert_msg(p.dense == (r == 2 && round == 11), "round %d worker %d", round, r);
            if (!p.dense)
                ck_assert_mem_eq(p.idx, idx0, sizeof idx0); /* the same delta */
        }
        /* Everyone who applied holds the same copy. */
        if (round != 10)
            for (int r = 1; r < P; r++)
                ck_assert_mem_eq(wk[r].w, wk[0].w, sizeof wk[0].w);
    }
    dcps_shard_destroy(&s);
}
END_TEST

START_TEST(an_exact_pull_sends_w_and_resets_an_async_mirror)
{
    dcps_shard_t *s = delta_shard("async", "dcasgd", "0.01");
    worker_t wk = {0};
    float g[N];
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 9);
    pull(s, &wk, 1, false);
    random_grad(&rng, g);
    dcps_shard_apply_dense(s, 0, 1, g);
    pull(s, &wk, 1, false);
    ck_assert(memcmp(wk.w, dcps_shard_view(s).w, sizeof wk.w) != 0); /* the mirror lags w */
    dcps_pull_t p;
    dcps_shard_pull(s, 1, true, wk.tag, 0, true, &p);
    ck_assert(p.dense);
    ck_assert_mem_eq(p.values, dcps_shard_view(s).w, N * sizeof(float));
    ck_assert_mem_eq(mirror(s, 1), dcps_shard_view(s).w,
                     N * sizeof(float)); /* DC-ASGD's w_bak(1) */
    dcps_shard_destroy(&s);
}
END_TEST

START_TEST(a_sync_exact_pull_sends_the_shared_mirror_brought_to_the_version)
{
    /* Sync: the workers compute on the shared mirror, so the final model (an
     * exact pull) is the mirror, not w, which also holds the unsent residual. */
    dcps_shard_t *s = delta_shard("sync", "sgd", "0.01");
    static worker_t wk[P];
    memset(wk, 0, sizeof wk);
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 5);
    uint64_t seq = 0;
    for (int round = 0; round <= 5; round++) {
        if (round > 0)
            sync_round(s, &rng, &seq);
        if (round < 5) /* round 5 closed before anyone pulled */
            for (int r = 0; r < P; r++)
                pull(s, &wk[r], r, false);
    }
    const uint64_t v = dcps_shard_stats(s).version;
    ck_assert_uint_ne(dcps_shard_view(s).tag[0], v);
    /* Worker 0 asks for the model: the mirror, advanced to v by the round's delta. */
    dcps_pull_t p;
    dcps_shard_pull(s, 0, false, wk[0].tag, 0, true, &p);
    ck_assert(p.dense);
    ck_assert_uint_eq(p.k, N);
    ck_assert_uint_eq(dcps_shard_view(s).tag[0], v);
    ck_assert_mem_eq(p.values, mirror(s, 0), N * sizeof(float));
    ck_assert(memcmp(p.values, dcps_shard_view(s).w, N * sizeof(float)) != 0);
    static float model[N];
    memcpy(model, p.values, sizeof model);
    /* The others still get that round's delta and hold the same model. */
    for (int r = 1; r < P; r++) {
        ck_assert(!pull(s, &wk[r], r, false).dense);
        ck_assert_mem_eq(wk[r].w, model, sizeof model);
    }
    /* Another exact pull: the same bytes, the mirror not moved again. */
    dcps_shard_pull(s, 2, false, wk[2].tag, 0, true, &p);
    ck_assert_mem_eq(p.values, model, sizeof model);
    dcps_shard_destroy(&s);
}
END_TEST

START_TEST(a_pull_gets_the_entries_it_asks_for_up_to_the_warmup_density)
{
    /* pull_density 0.01 of density 0.5: 10 entries, and no more without a warm-up. */
    dcps_shard_t *s = delta_shard_with("async", "sgd", "0.5", "compression.pull_density=0.01");
    ck_assert_uint_eq(dcps_shard_stats(s).k_pull, 10);
    ck_assert_uint_eq(dcps_shard_stats(s).k_max, 10);
    dcps_shard_destroy(&s);
    /* A density warm-up allows up to 25% (250). */
    s = delta_shard_with("async", "sgd", "0.01", "compression.density_warmup_epochs=3");
    ck_assert_uint_eq(dcps_shard_stats(s).k_pull, 10);
    ck_assert_uint_eq(dcps_shard_stats(s).k_max, 250);
    worker_t wk = {0};
    float g[N];
    dcps_rng_t rng;
    dcps_rng_seed(&rng, 4);
    pull(s, &wk, 0, false);
    const uint64_t want[] = {0, 100, 1000, 1};
    const size_t got[] = {10, 100, 250, 1};
    for (int i = 0; i < 4; i++) {
        random_grad(&rng, g);
        dcps_shard_apply_dense(s, 1, (uint64_t)i + 1, g);
        dcps_pull_t p;
        dcps_shard_pull(s, 0, true, wk.tag, want[i], false, &p);
        ck_assert(!p.dense);
        ck_assert_uint_eq(p.k, got[i]);
        dcps_scatter_add_cpu(wk.w, p.idx, p.values, p.k, 1.0f);
        wk.tag = dcps_shard_stats(s).version;
        ck_assert_mem_eq(wk.w, mirror(s, 0), sizeof wk.w);
    }
    dcps_shard_destroy(&s);
}
END_TEST

START_TEST(memory_counts_the_mirror_and_the_delta)
{
    dcps_shard_t *a = delta_shard("async", "sgd", "0.01"), *y = delta_shard("sync", "sgd", "0.01");
    /* async: w, P mirrors, diff, a tag per mirror; sync: w, sum, the shared
     * mirror, diff, one tag. Both: the update and reply buffers, P session
     * records, P restore flags (behind), P records of pushes in parts, k = 10
     * index/value pairs and the selection's workspace (n bytes). */
    size_t extra = 2 * N * 4 + P * (sizeof(dcps_session_t) + sizeof(bool) + sizeof(dcps_parts_t) +
                                     sizeof(dcps_carried_t)) +
                   10 * 8 + N;
    ck_assert_uint_eq(dcps_shard_memory(a), (1 + P + 1) * N * 4 + extra + P * 8);
    ck_assert_uint_eq(dcps_shard_memory(y), (1 + 1 + 1 + 1) * N * 4 + extra + 8);
    /* By kind (the server's log and /metrics): the same bytes, each once. */
    dcps_shard_memory_t ka, ky;
    dcps_shard_memory_kinds(a, &ka);
    dcps_shard_memory_kinds(y, &ky);
    ck_assert_uint_eq(ka.parameters, N * 4);
    ck_assert_uint_eq(ka.optimizer_state, 0);
    ck_assert_uint_eq(ka.worker_backups, P * N * 4);
    ck_assert_uint_eq(ka.sync_sum, 0);
    ck_assert_uint_eq(ka.delta_pull, N * 4 + P * 8 + 10 * 8 + N);
    ck_assert_uint_eq(ka.sequence_numbers, P * (sizeof(dcps_session_t) + sizeof(bool) +
                                                sizeof(dcps_parts_t) + sizeof(dcps_carried_t)));
    ck_assert_uint_eq(ky.worker_backups, 0);
    ck_assert_uint_eq(ky.sync_sum, N * 4);
    ck_assert_uint_eq(ky.delta_pull, 2 * N * 4 + 8 + 10 * 8 + N);
    dcps_shard_destroy(&a);
    dcps_shard_destroy(&y);
}
END_TEST

/* A tag counts only from a session this process gave it to (server/session.h):
 * a session's first pull is dense whatever it names, in async (per-rank
 * mirrors) and sync (the shared one), and a rank's next session does not
 * inherit the tag of its previous one. */
START_TEST(a_sessions_first_pull_is_dense_whatever_tag_it_names)
{
    const char *modes[] = {"async", "sync"};
    for (int m = 0; m < 2; m++) {
        dcps_shard_t *s = delta_shard(modes[m], "sgd", "0.01");
        dcps_pull_t p;
        float g[N];
        for (int i = 0; i < N; i++)
            g[i] = 1.0f;
        dcps_shard_open_session(s, 0, 11);
        dcps_shard_pull(s, 0, true, 0, 0, false, &p); /* "holds" the INIT's version */
        ck_assert_msg(p.dense, "%s: a session's first pull", modes[m]);
        dcps_shard_pull(s, 0, true, 0, 0, false, &p);
        ck_assert_msg(!p.dense && p.k == 0, "%s: then a delta, empty", modes[m]);
        if (m == 0)
            ck_assert_int_eq(dcps_shard_apply_dense(s, 1, 1, g), 0);
        else
            ck_assert_int_eq(dcps_shard_accumulate_dense(s, 1, 1, g) ||
                                 dcps_shard_apply_round(s, 1),
                             0);
        dcps_shard_open_session(s, 0, 12); /* rank 0's next process */
        dcps_shard_pull(s, 0, true, 0, 0, false, &p);
        ck_assert_msg(p.dense, "%s: a new session's first pull", modes[m]);
        dcps_shard_destroy(&s);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("delta");
    TCase *tc = tcase_create("pull");
    tcase_add_test(tc, async_copies_equal_their_mirrors_and_a_lost_reply_forces_a_dense_one);
    tcase_add_test(tc, a_delta_moves_the_largest_differences_and_an_unchanged_shard_sends_none);
    tcase_add_test(tc, sync_workers_share_one_mirror_and_one_delta_per_round);
    tcase_add_test(tc, an_exact_pull_sends_w_and_resets_an_async_mirror);
    tcase_add_test(tc, a_sync_exact_pull_sends_the_shared_mirror_brought_to_the_version);
    tcase_add_test(tc, a_pull_gets_the_entries_it_asks_for_up_to_the_warmup_density);
    tcase_add_test(tc, memory_counts_the_mirror_and_the_delta);
    tcase_add_test(tc, a_sessions_first_pull_is_dense_whatever_tag_it_names);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return dcps_test_run(suite());
}
