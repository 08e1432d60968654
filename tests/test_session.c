/* Tests for server/session: a rank's session and last push, the verdict on a
 * push's seq, the session's short form and its words in a checkpoint. (The
 * shard's records, kept as pushes are applied and dropped, are
 * tests/test_shard.c's.) */
#include "server/session.h"

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

static Suite *session_suite(void)
{
    Suite *s = suite_create("session");
    TCase *tc = tcase_create("session");
    tcase_add_test(tc, a_new_session_has_no_last_push_so_seq_0_is_a_new_push);
    tcase_add_test(tc, only_the_last_push_is_a_retry_and_an_earlier_seq_is_below);
    tcase_add_test(tc, session_short_form_is_its_first_8_hex_digits);
    tcase_add_test(tc, a_record_reads_back_from_its_checkpoint_words);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return dcps_test_run(session_suite());
}
