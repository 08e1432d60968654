/* dcps — the agreement of a sync job's shards on each round (server/rounds.h),
 * the rule on its own in this process: the leader closes a round only with
 * members every shard holds, never waits for a rank it does not count, and a
 * shard takes a push the leader left out back out of its sum. Through real
 * daemons, at random moments: python/tests/test_faults.py. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "common/config.h"
#include "common/error.h"
#include "server/rounds.h"
#include "server/shard.h"
#include "tests/check_run.h"

static dcps_consistency_t cons;
static dcps_rounds_t t;
static bool members[3];

static void setup(void)
{
    /* The leader's view: 3 ranks, round 0; 2 shards. */
    ck_assert_int_eq(dcps_consistency_init(&cons, DCPS_MODE_SYNC, 0, 3, 1000, 0), 0);
    ck_assert_int_eq(dcps_rounds_init(&t, 2, 3), 0);
}

static void teardown(void)
{
    dcps_consistency_free(&cons);
    dcps_rounds_free(&t);
}

static void follower_holds(uint64_t round, bool r0, bool r1, bool r2)
{
    const bool held[3] = {r0, r1, r2};
    dcps_rounds_report(&t, 1, round, held, 0, 0, 0);
}

START_TEST(a_round_closes_only_with_pushes_every_shard_holds)
{
    for (uint32_t i = 0; i < 3; i++)
        dcps_consistency_pushed(&cons, i, 0);
    /* The leader holds all three; the follower has not reported: wait. */
    ck_assert(!dcps_rounds_decide(&t, &cons, members));
    double silent;
    ck_assert_int_eq(dcps_rounds_waiting_for(&t, 0, 0, &silent), 1);
    /* It holds ranks 0 and 1 only: rank 2 is counted, so wait for its push. */
    follower_holds(0, true, true, false);
    ck_assert(!dcps_rounds_decide(&t, &cons, members));
    /* Once it holds rank 2's too, the round closes with all three. */
    follower_holds(0, true, true, true);
    ck_assert(dcps_rounds_decide(&t, &cons, members));
    ck_assert(members[0] && members[1] && members[2]);
    ck_assert_int_eq(dcps_rounds_waiting_for(&t, 0, 0, &silent), -1);
    /* In round 1, holdings it reported for round 0 do not count. */
    dcps_consistency_close_round(&cons);
    for (uint32_t i = 0; i < 3; i++)
        dcps_consistency_pushed(&cons, i, 1);
    ck_assert(!dcps_rounds_decide(&t, &cons, members));
    ck_assert_int_eq(dcps_rounds_waiting_for(&t, 1, 0, &silent), 1);
}
END_TEST

START_TEST(a_rank_the_leader_does_not_count_never_holds_a_round_up)
{
    /* Rank 2 reached the leader only (stopped between its two sends), then
     * went silent: declared dead, it is left out although the leader has it. */
    for (uint32_t i = 0; i < 3; i++)
        dcps_consistency_pushed(&cons, i, 0);
    follower_holds(0, true, true, false);
    ck_assert(!dcps_rounds_decide(&t, &cons, members));
    ck_assert_int_eq(dcps_consistency_reap(&cons, 5000), 0);
    ck_assert_int_eq(dcps_consistency_reap(&cons, 5000), 1);
    ck_assert_int_eq(dcps_consistency_reap(&cons, 5000), 2);
    ck_assert(dcps_rounds_decide(&t, &cons, members));
    ck_assert(members[0] && members[1] && !members[2]);
}
END_TEST

START_TEST(a_dead_ranks_push_held_everywhere_is_a_member)
{
    dcps_consistency_pushed(&cons, 1, 0);
    follower_holds(0, false, true, false);
    dcps_consistency_leave(&cons, 0);
    dcps_consistency_leave(&cons, 2);
    ck_assert(dcps_rounds_decide(&t, &cons, members));
    ck_assert(!members[0] && members[1] && !members[2]);
    /* Nobody left, nothing held: no round to close. */
    dcps_consistency_close_round(&cons);
    dcps_consistency_leave(&cons, 1);
    follower_holds(1, false, false, false);
    ck_assert(!dcps_rounds_decide(&t, &cons, members));
}
END_TEST

START_TEST(the_digest_tells_rounds_and_members_apart)
{
    const bool a[3] = {true, true, true}, b[3] = {true, true, false};
    uint64_t d1 = 0, d2 = 0, d3 = 0, d4 = 0, d5 = 0;
    dcps_rounds_digest(&d1, 7, a, 3, 0.1);
    dcps_rounds_digest(&d2, 7, a, 3, 0.1);
    dcps_rounds_digest(&d3, 7, b, 3, 0.1);
    dcps_rounds_digest(&d4, 8, a, 3, 0.1);
    dcps_rounds_digest(&d5, 7, a, 3, 0.05);
    ck_assert_uint_eq(d1, d2);
    ck_assert_uint_ne(d1, d3);
    ck_assert_uint_ne(d1, d4);
    ck_assert_uint_ne(d1, d5);
}
END_TEST

/* A sync shard of 72 parameters (model 8,8), one shard, 3 workers. */
static dcps_shard_t *sync_shard(void)
{
    static const char *const set[] = {"model.layers=8,8", "servers.shards=tcp://127.0.0.1:1",
                                      "optimizer.lr=0.5", "job.workers=3", "job.mode=sync"};
    dcps_config_t *cfg = malloc(sizeof *cfg);
    char err[512];
    int rc = 0;
    ck_assert_ptr_nonnull(cfg);
    ck_assert_msg(dcps_config_load(cfg, NULL, set, sizeof set / sizeof *set, err, sizeof err) ==
                      0,
                  "%s", err);
    dcps_shard_t *s = dcps_shard_new(cfg, 0, &rc);
    free(cfg);
    ck_assert_ptr_nonnull(s);
    float w[72] = {0};
    dcps_shard_init(s, w);
    return s;
}

START_TEST(the_common_checkpoint_is_the_oldest_newest_once_every_shard_said)
{
    /* Not known until the follower has reported: the leader's own newest
     * alone would let the follower remove a checkpoint only it lacks. */
    ck_assert_uint_eq(dcps_rounds_common(&t, 60), 0);
    const bool none[3] = {false, false, false};
    dcps_rounds_report(&t, 1, 61, none, 40, 0, 0);
    ck_assert_uint_eq(dcps_rounds_common(&t, 60), 40); /* the follower is behind */
    ck_assert_uint_eq(dcps_rounds_common(&t, 30), 30); /* the leader is */
    ck_assert_uint_eq(dcps_rounds_common(&t, 0), 0);   /* the leader holds none */
    dcps_rounds_report(&t, 1, 62, none, 60, 0, 0);     /* it wrote one since */
    ck_assert_uint_eq(dcps_rounds_common(&t, 60), 60);
    dcps_rounds_report(&t, 1, 63, none, 0, 0, 0); /* restarted with none: nothing in common */
    ck_assert_uint_eq(dcps_rounds_common(&t, 60), 0);
    dcps_rounds_offer(&t, 1, 2, 50, 0, 0); /* an offer counts as its report */
    ck_assert_uint_eq(dcps_rounds_common(&t, 60), 50);
}
END_TEST

START_TEST(a_running_follower_counts_with_its_newest_checkpoint_in_the_cut)
{
    /* The leader restarted alone, or a follower did: the others run, and the
     * job goes back to the newest version every shard holds. */
    const bool none[3] = {false, false, false};
    uint64_t cut;
    int shard;
    ck_assert_int_eq(dcps_rounds_cut(&t, 2, 60, &cut, &shard), DCPS_CUT_WAIT);
    dcps_rounds_report(&t, 1, 70, none, 40, 3, 0);
    ck_assert_int_eq(dcps_rounds_cut(&t, 2, 60, &cut, &shard), DCPS_CUT_AT);
    ck_assert_uint_eq(cut, 40);
    ck_assert_int_eq(dcps_rounds_cut(&t, 1, 20, &cut, &shard), DCPS_CUT_AT);
    ck_assert_uint_eq(cut, 20);
    /* The leader holds none while the follower wrote one: no common round. */
    ck_assert_int_eq(dcps_rounds_cut(&t, 0, 0, &cut, &shard), DCPS_CUT_NONE);
    /* Nobody holds one and the follower runs: nothing to go back to together. */
    dcps_rounds_report(&t, 1, 70, none, 0, 3, 0);
    ck_assert_int_eq(dcps_rounds_cut(&t, 0, 0, &cut, &shard), DCPS_CUT_RUNNING);
    ck_assert_int_eq(shard, 1);
    /* Restored at decision 4 and waiting for the word to serve: only an offer
     * that says so counts. */
    ck_assert(!dcps_rounds_restored(&t, 4));
    dcps_rounds_offer(&t, 1, 1, 40, 3, 0);
    ck_assert(!dcps_rounds_restored(&t, 4));
    dcps_rounds_offer(&t, 1, 1, 40, 4, 0);
    ck_assert(dcps_rounds_restored(&t, 4));
}
END_TEST

START_TEST(a_push_left_out_is_taken_back_out_of_the_sum)
{
    dcps_shard_t *s = sync_shard(), *ref = sync_shard();
    ck_assert_int_eq(dcps_shard_keep_pushes(s), 0);
    float g0[72], g2[72];
    for (int i = 0; i < 72; i++) {
        g0[i] = (float)i / 7.0f;
        g2[i] = -3.0f + (float)i / 3.0f;
    }
    const uint32_t idx[2] = {3, 40};
    const float v[2] = {0.25f, -8.5f};
    ck_assert_int_eq(dcps_shard_accumulate_dense(s, 0, 1, g0), 0);
    ck_assert_int_eq(dcps_shard_accumulate_sparse(s, 1, 1, idx, v, 2), 0);
    ck_assert_int_eq(dcps_shard_accumulate_dense(s, 2, 1, g2), 0);
    ck_assert(dcps_shard_round_holds(s, 1));
    /* Ranks 1 (sparse) and 2 (dense) out: the mean of rank 0's push alone. */
    ck_assert(dcps_shard_round_remove(s, 1));
    ck_assert(dcps_shard_round_remove(s, 2));
    ck_assert(!dcps_shard_round_remove(s, 2));
    ck_assert_int_eq(dcps_shard_apply_round(s, 1), 0);
    ck_assert_int_eq(dcps_shard_accumulate_dense(ref, 0, 1, g0), 0);
    ck_assert_int_eq(dcps_shard_apply_round(ref, 1), 0);
    const float *w = dcps_shard_view(s).w, *want = dcps_shard_view(ref).w;
    for (int i = 0; i < 72; i++) /* the sum differs from one without them by rounding */
        ck_assert_msg(fabsf(w[i] - want[i]) <= 4e-6f * (1 + fabsf(want[i])),
                      "w[%d] = %.9g, expected %.9g", i, (double)w[i], (double)want[i]);
    /* A new round starts with nothing held. */
    ck_assert(!dcps_shard_round_holds(s, 0));
    dcps_shard_destroy(&s);
    dcps_shard_destroy(&ref);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rounds");
    TCase *tc = tcase_create("leader");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, a_round_closes_only_with_pushes_every_shard_holds);
    tcase_add_test(tc, a_rank_the_leader_does_not_count_never_holds_a_round_up);
    tcase_add_test(tc, a_dead_ranks_push_held_everywhere_is_a_member);
    tcase_add_test(tc, the_digest_tells_rounds_and_members_apart);
    tcase_add_test(tc, the_common_checkpoint_is_the_oldest_newest_once_every_shard_said);
    tcase_add_test(tc, a_running_follower_counts_with_its_newest_checkpoint_in_the_cut);
    suite_add_tcase(s, tc);
    tc = tcase_create("shard");
    tcase_add_test(tc, a_push_left_out_is_taken_back_out_of_the_sum);
    suite_add_tcase(s, tc);
    return dcps_test_run(s);
}
