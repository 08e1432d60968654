/* dcps — the consistency models (server/consistency.h), the rules on their own
 * in this process: sync rounds, the SSP bound, silent ranks reaped and heard
 * again, and how a restored shard catches up with the workers' round or clock.
 * The same rules through real daemons are tests/daemon/test_consistency.c. */
#include <check.h>

#include "common/config.h"
#include "server/consistency.h"
#include "tests/check_run.h"

static dcps_consistency_t cons;

static void rules_teardown(void)
{
    dcps_consistency_free(&cons);
}

START_TEST(sync_round_closes_when_every_counted_worker_pushed)
{
    ck_assert_int_eq(dcps_consistency_init(&cons, DCPS_MODE_SYNC, 0, 3, 1000, 0), 0);
    ck_assert(!dcps_consistency_round_full(&cons)); /* no push yet */
    ck_assert_int_eq(dcps_consistency_check_push(&cons, 0, 0), DCPS_PUSH_ACCEPT);
    dcps_consistency_pushed(&cons, 0, 0);
    ck_assert_int_eq(dcps_consistency_check_push(&cons, 0, 0), DCPS_PUSH_AGAIN);
    ck_assert_int_eq(dcps_consistency_check_push(&cons, 1, 1), DCPS_PUSH_FUTURE);
    dcps_consistency_pushed(&cons, 1, 0);
    ck_assert(!dcps_consistency_round_full(&cons)); /* rank 2 is expected */
    ck_assert(!dcps_consistency_may_start(&cons, 0, 1));
    dcps_consistency_done(&cons, 2); /* out of batches: not waited for */
    ck_assert(dcps_consistency_round_full(&cons));
    dcps_consistency_close_round(&cons);
    ck_assert_uint_eq(cons.round, 1);
    ck_assert(dcps_consistency_may_start(&cons, 0, 1));
    ck_assert(!dcps_consistency_may_start(&cons, 0, 2));
    ck_assert_int_eq(dcps_consistency_check_push(&cons, 1, 0), DCPS_PUSH_STALE);
    ck_assert_uint_eq(dcps_consistency_next_step(&cons, 1), 1);
}
END_TEST

START_TEST(ssp_lets_a_worker_run_exactly_s_steps_ahead_of_the_slowest)
{
    ck_assert_int_eq(dcps_consistency_init(&cons, DCPS_MODE_SSP, 2, 3, 1000, 0), 0);
    /* Everyone at clock 0: steps 0, 1 and 2 may start, step 3 may not. */
    ck_assert(dcps_consistency_may_start(&cons, 0, 2));
    ck_assert(!dcps_consistency_may_start(&cons, 0, 3));
    dcps_consistency_pushed(&cons, 1, 0);
    ck_assert(!dcps_consistency_may_start(&cons, 0, 3)); /* rank 2 is still at 0 */
    dcps_consistency_pushed(&cons, 2, 0);
    ck_assert(dcps_consistency_may_start(&cons, 0, 3));
    ck_assert_uint_eq(cons.max_ahead, 2);
    /* The slowest leaves: the next slowest counts. */
    dcps_consistency_pushed(&cons, 1, 5);
    ck_assert(!dcps_consistency_may_start(&cons, 0, 4));
    dcps_consistency_leave(&cons, 2);
    ck_assert(dcps_consistency_may_start(&cons, 0, 8));
    ck_assert(!dcps_consistency_may_start(&cons, 0, 9));
    ck_assert_uint_eq(cons.max_ahead, 2);
}
END_TEST

START_TEST(silent_ranks_are_reaped_once_and_come_back_when_heard)
{
    ck_assert_int_eq(dcps_consistency_init(&cons, DCPS_MODE_SYNC, 0, 2, 1000, 0), 0);
    dcps_consistency_join(&cons, 0);
    dcps_consistency_heard(&cons, 0, 900);
    ck_assert_int_eq(dcps_consistency_reap(&cons, 1000), -1);
    ck_assert_int_eq(dcps_consistency_reap(&cons, 1001), 1); /* never joined */
    ck_assert_int_eq(dcps_consistency_reap(&cons, 1001), -1);
    ck_assert(!dcps_consistency_live(&cons, 1));
    /* The job starts: ranks that have not joined are expected again. */
    dcps_consistency_start(&cons, 1500);
    ck_assert(dcps_consistency_live(&cons, 1));
    ck_assert_int_eq(dcps_consistency_reap(&cons, 1950), 0);
    ck_assert(!dcps_consistency_counted(&cons, 0));
    ck_assert(dcps_consistency_heard(&cons, 0, 2000)); /* it was dead */
    ck_assert(!dcps_consistency_heard(&cons, 0, 2001));
    ck_assert(dcps_consistency_counted(&cons, 0));
}
END_TEST

START_TEST(joined_counts_connected_ranks_not_expected_dead_or_gone_ones)
{
    ck_assert_int_eq(dcps_consistency_init(&cons, DCPS_MODE_ASYNC, 0, 4, 1000, 0), 0);
    ck_assert_int_eq(dcps_consistency_joined(&cons), 0); /* all four only expected */
    for (uint32_t r = 0; r < 3; r++) {
        dcps_consistency_join(&cons, r);
        dcps_consistency_heard(&cons, r, 500);
    }
    ck_assert_int_eq(dcps_consistency_joined(&cons), 3);
    dcps_consistency_done(&cons, 0); /* out of batches, still connected */
    dcps_consistency_leave(&cons, 1);
    ck_assert_int_eq(dcps_consistency_joined(&cons), 2);
    dcps_consistency_heard(&cons, 0, 1400);
    ck_assert_int_eq(dcps_consistency_reap(&cons, 1600), 2); /* silent since 500 */
    ck_assert_int_eq(dcps_consistency_joined(&cons), 1);
    dcps_consistency_heard(&cons, 2, 1700); /* back */
    ck_assert_int_eq(dcps_consistency_joined(&cons), 2);
}
END_TEST

/* A restored sync shard at round 3 with rank 0's push in it; the workers had gone
 * on to round 7 with the shard's previous process. */
START_TEST(restored_sync_shard_catches_up_with_the_workers_round)
{
    ck_assert_int_eq(dcps_consistency_init(&cons, DCPS_MODE_SYNC, 0, 3, 1000, 0), 0);
    cons.round = 3;
    dcps_consistency_pushed(&cons, 0, 3);
    /* A pull for step 0 or for a step the open round allows shows nothing new. */
    ck_assert(!dcps_consistency_catch_up(&cons, 1, 0, true));
    ck_assert(!dcps_consistency_catch_up(&cons, 1, 3, false));
    ck_assert_uint_eq(cons.round, 3);
    /* Rank 1 pulls for step 8: it pushed round 7 to the previous process. */
    ck_assert(dcps_consistency_catch_up(&cons, 1, 8, true));
    ck_assert_uint_eq(cons.round, 7);
    ck_assert_int_eq(cons.contributions, 0); /* round 3's push is gone */
    ck_assert(!cons.m[0].contributed);
    ck_assert(cons.m[1].contributed); /* lost, but not waited for */
    ck_assert(!dcps_consistency_catch_up(&cons, 1, 8, true)); /* its retry */
    ck_assert(!dcps_consistency_round_full(&cons));
    ck_assert(!dcps_consistency_may_start(&cons, 1, 8));
    /* Rank 0 had not pushed round 7 yet: its push is taken there. */
    ck_assert(!dcps_consistency_catch_up(&cons, 0, 7, false));
    ck_assert_int_eq(dcps_consistency_check_push(&cons, 0, 7), DCPS_PUSH_ACCEPT);
    dcps_consistency_pushed(&cons, 0, 7);
    ck_assert(!dcps_consistency_round_full(&cons)); /* rank 2 */
    /* Rank 2 pulls for step 8 too: the round is full with one push in it. */
    ck_assert(dcps_consistency_catch_up(&cons, 2, 8, true));
    ck_assert(dcps_consistency_round_full(&cons));
    ck_assert_int_eq(cons.contributions, 1);
    dcps_consistency_close_round(&cons);
    ck_assert(dcps_consistency_may_start(&cons, 1, 8));
    /* A push for a round after the open one opens it. */
    ck_assert(dcps_consistency_catch_up(&cons, 2, 10, false));
    ck_assert_uint_eq(cons.round, 10);
    ck_assert_int_eq(dcps_consistency_check_push(&cons, 2, 10), DCPS_PUSH_ACCEPT);
}
END_TEST

START_TEST(a_round_whose_pushes_were_all_lost_is_full_with_none)
{
    ck_assert_int_eq(dcps_consistency_init(&cons, DCPS_MODE_SYNC, 0, 2, 1000, 0), 0);
    ck_assert(dcps_consistency_catch_up(&cons, 0, 5, true));
    ck_assert(!dcps_consistency_round_full(&cons));
    ck_assert(dcps_consistency_catch_up(&cons, 1, 5, true));
    ck_assert(dcps_consistency_round_full(&cons));
    ck_assert_int_eq(cons.contributions, 0);
}
END_TEST

START_TEST(restored_ssp_shard_takes_the_clock_a_pull_shows)
{
    ck_assert_int_eq(dcps_consistency_init(&cons, DCPS_MODE_SSP, 1, 2, 1000, 0), 0);
    /* Restored clocks 2 and 2; both workers had reached step 9. */
    dcps_consistency_pushed(&cons, 0, 1);
    dcps_consistency_pushed(&cons, 1, 1);
    ck_assert(!dcps_consistency_may_start(&cons, 0, 9));
    ck_assert(dcps_consistency_catch_up(&cons, 1, 9, true));
    ck_assert_uint_eq(cons.m[1].clock, 9);
    ck_assert(dcps_consistency_may_start(&cons, 0, 9));
    ck_assert(!dcps_consistency_catch_up(&cons, 1, 9, true));
    ck_assert(!dcps_consistency_catch_up(&cons, 1, 4, true)); /* never backwards */
    ck_assert(!dcps_consistency_catch_up(&cons, 0, 12, false)); /* pushes move clocks */
    ck_assert_uint_eq(cons.m[0].clock, 2);
}
END_TEST

START_TEST(restored_async_shard_changes_nothing)
{
    ck_assert_int_eq(dcps_consistency_init(&cons, DCPS_MODE_ASYNC, 0, 2, 1000, 0), 0);
    ck_assert(!dcps_consistency_catch_up(&cons, 1, 9, true));
    ck_assert(!dcps_consistency_catch_up(&cons, 1, 9, false));
    ck_assert_uint_eq(cons.m[1].clock, 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("consistency");
    TCase *rules = tcase_create("rules");
    tcase_add_checked_fixture(rules, NULL, rules_teardown);
    tcase_add_test(rules, sync_round_closes_when_every_counted_worker_pushed);
    tcase_add_test(rules, ssp_lets_a_worker_run_exactly_s_steps_ahead_of_the_slowest);
    tcase_add_test(rules, silent_ranks_are_reaped_once_and_come_back_when_heard);
    tcase_add_test(rules, joined_counts_connected_ranks_not_expected_dead_or_gone_ones);
    tcase_add_test(rules, restored_sync_shard_catches_up_with_the_workers_round);
    tcase_add_test(rules, a_round_whose_pushes_were_all_lost_is_full_with_none);
    tcase_add_test(rules, restored_ssp_shard_takes_the_clock_a_pull_shows);
    tcase_add_test(rules, restored_async_shard_changes_nothing);
    suite_add_tcase(s, rules);
    return dcps_test_run(s);
}
