/* Tests for server/session: a rank's session and last push, the verdict on a
 * push's seq, the session's short form and its words in a checkpoint; and what
 * a new session carries of the old one's push cut between its parts
 * (server/parts.h: tests/daemon and python/tests/test_parts.py send them). (The
 * shard's records, kept as pushes are applied and dropped, are
 * tests/test_shard.c's.) */
#include "server/session.h"

#include "server/parts.h"

#include <check.h>

#include "tests/check_run.h"
#include <stdint.h>

START_TEST(a_new_session_has_no_last_push_so_seq_0_is_a_new_push)
{
    dcps_session_t ss = {0};
    ck_assert_int_eq(dcps_session_seq(&ss, 0), DCPS_SEQ_NEW);
    dcps_session_open(&ss, 0x3f2a9c01deadbeefull);
    ck_assert_uint_eq(ss.id, 0x3f2a9c01deadbeefull);
    ck_assert_int_eq(dcps_session_seq(&ss, 0), DCPS_SEQ_NEW);
    dcps_session_pushed(&ss, 0, true);
    ck_assert_int_eq(dcps_session_seq(&ss, 0), DCPS_SEQ_APPLIED);
    ck_assert_int_eq(dcps_session_seq(&ss, 1), DCPS_SEQ_NEW);
    /* A new session forgets the old one's pushes. */
    dcps_session_open(&ss, 7);
    ck_assert_int_eq(dcps_session_seq(&ss, 0), DCPS_SEQ_NEW);
    ck_assert(!ss.pushed);
}
END_TEST

START_TEST(only_the_last_push_is_a_retry_and_an_earlier_seq_is_below)
{
    dcps_session_t ss;
    dcps_session_open(&ss, 1);
    dcps_session_pushed(&ss, 10, true);
    ck_assert_int_eq(dcps_session_seq(&ss, 10), DCPS_SEQ_APPLIED);
    ck_assert_int_eq(dcps_session_seq(&ss, 9), DCPS_SEQ_BELOW);
    ck_assert_int_eq(dcps_session_seq(&ss, 0), DCPS_SEQ_BELOW);
    ck_assert_int_eq(dcps_session_seq(&ss, 11), DCPS_SEQ_NEW);
    ck_assert_int_eq(dcps_session_seq(&ss, UINT64_MAX), DCPS_SEQ_NEW);
    /* Seqs may skip (a worker's pulls take numbers too). */
    dcps_session_pushed(&ss, 25, false);
    ck_assert_int_eq(dcps_session_seq(&ss, 25), DCPS_SEQ_DROPPED);
    ck_assert_int_eq(dcps_session_seq(&ss, 10), DCPS_SEQ_BELOW);
    ck_assert_int_eq(dcps_session_seq(&ss, 24), DCPS_SEQ_BELOW);
}
END_TEST

START_TEST(session_short_form_is_its_first_8_hex_digits)
{
    char out[DCPS_SESSION_SHORT];
    ck_assert_str_eq(dcps_session_short(0x3f2a9c01deadbeefull, out), "3f2a9c01");
    ck_assert_str_eq(dcps_session_short(0x1ull, out), "00000000");
    ck_assert_str_eq(dcps_session_short(0, out), "none");
}
END_TEST

/* A checkpoint holds a record as three words (server/checkpoint.h): read back,
 * it gives the same verdicts. */
START_TEST(a_record_reads_back_from_its_checkpoint_words)
{
    dcps_session_t a, b;
    uint64_t w[DCPS_SESSION_WORDS];
    dcps_session_open(&a, 0x3f2a9c01deadbeefull);
    dcps_session_save(&a, w);
    dcps_session_load(&b, w);
    ck_assert_uint_eq(b.id, a.id);
    ck_assert(!b.pushed);
    dcps_session_pushed(&a, 41, false);
    dcps_session_save(&a, w);
    ck_assert_uint_eq(w[0], 0x3f2a9c01deadbeefull);
    ck_assert_uint_eq(w[1], 41);
    ck_assert_uint_eq(w[2], DCPS_SESSION_PUSHED); /* dropped: not applied */
    dcps_session_load(&b, w);
    ck_assert_int_eq(dcps_session_seq(&b, 41), DCPS_SEQ_DROPPED);
    ck_assert_int_eq(dcps_session_seq(&b, 40), DCPS_SEQ_BELOW);
    dcps_session_pushed(&a, 42, true);
    dcps_session_save(&a, w);
    ck_assert_uint_eq(w[2], DCPS_SESSION_PUSHED | DCPS_SESSION_APPLIED);
    dcps_session_load(&b, w);
    ck_assert_int_eq(dcps_session_seq(&b, 42), DCPS_SEQ_APPLIED);
}
END_TEST

/* Part i of a push of `parts` from seq 10 over [lo, hi), applied. */
static void came(dcps_parts_t *p, uint32_t i, uint32_t parts, uint64_t lo, uint64_t hi)
{
    const dcps_part_t q = {.seq = 10 + i, .step = 3, .part = i, .parts = parts, .lo = lo,
                           .hi = hi, .fields = true};
    dcps_parts_record(p, &q, true);
}

START_TEST(a_cut_push_carries_what_came_and_the_rest_is_what_did_not)
{
    dcps_parts_t p = {0};
    dcps_carried_t c = {0};
    uint64_t lo[DCPS_CARRIED_MAX + 1], hi[DCPS_CARRIED_MAX + 1];
    came(&p, 2, 4, 500, 750);
    came(&p, 0, 4, 0, 250);
    ck_assert(dcps_carried_take(&c, &p));
    ck_assert(c.any && c.step == 3 && c.n == 2);
    ck_assert_uint_eq(dcps_carried_rest(&c, 0, 1000, lo, hi), 2);
    ck_assert(lo[0] == 250 && hi[0] == 500 && lo[1] == 750 && hi[1] == 1000);
    ck_assert_uint_eq(dcps_carried_rest(&c, 100, 600, lo, hi), 1); /* inside one part */
    ck_assert(lo[0] == 250 && hi[0] == 500);
    ck_assert_uint_eq(dcps_carried_rest(&c, 0, 250, lo, hi), 0);
    /* The next session's push cut too, in another layout: its part [200, 500)
     * joins both ranges around it into one. */
    dcps_parts_reset(&p);
    came(&p, 1, 3, 200, 500);
    ck_assert(dcps_carried_take(&c, &p));
    ck_assert(c.n == 1 && c.lo[0] == 0 && c.hi[0] == 750);
    /* A complete push leaves nothing to carry; one of another step replaces it. */
    dcps_parts_reset(&p);
    came(&p, 0, 1, 0, 1000);
    ck_assert(dcps_carried_take(&c, &p) && c.n == 1);
    dcps_parts_reset(&p);
    came(&p, 0, 2, 0, 10);
    p.step = 4;
    ck_assert(dcps_carried_take(&c, &p));
    ck_assert(c.step == 4 && c.n == 1 && c.hi[0] == 10);
}
END_TEST

START_TEST(ranges_too_scattered_to_keep_are_forgotten_all_at_once)
{
    dcps_parts_t p = {0};
    dcps_carried_t c = {0};
    uint64_t lo[DCPS_CARRIED_MAX + 1], hi[DCPS_CARRIED_MAX + 1];
    /* Sessions cut after every other part of 64, each layout's ranges one
     * apart from the last's: 32 more ranges apart from the others each time. */
    for (uint64_t shift = 0; shift < 4; shift++) {
        dcps_parts_reset(&p);
        for (uint32_t i = 0; i < DCPS_PARTS_MAX; i += 2)
            came(&p, i, DCPS_PARTS_MAX, 1000 * i + 3 * shift, 1000 * i + 3 * shift + 1);
        ck_assert(dcps_carried_take(&c, &p));
        ck_assert_uint_eq(c.n, 32 * (shift + 1));
    }
    dcps_parts_reset(&p);
    came(&p, 0, DCPS_PARTS_MAX, 20, 21); /* one more than DCPS_CARRIED_MAX */
    ck_assert(!dcps_carried_take(&c, &p));
    ck_assert(!c.any && c.n == 0);
    ck_assert_uint_eq(dcps_carried_rest(&c, 0, 100, lo, hi), 1);
}
END_TEST

static Suite *session_suite(void)
{
    Suite *s = suite_create("session");
    TCase *tc = tcase_create("session");
    tcase_add_test(tc, a_new_session_has_no_last_push_so_seq_0_is_a_new_push);
    tcase_add_test(tc, only_the_last_push_is_a_retry_and_an_earlier_seq_is_below);
    tcase_add_test(tc, session_short_form_is_its_first_8_hex_digits);
    tcase_add_test(tc, a_record_reads_back_from_its_checkpoint_words);
    tcase_add_test(tc, a_cut_push_carries_what_came_and_the_rest_is_what_did_not);
    tcase_add_test(tc, ranges_too_scattered_to_keep_are_forgotten_all_at_once);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return dcps_test_run(session_suite());
}
