/* Tests for server/loglimit: at most DCPS_LOGLIMIT_LINES lines per peer and
 * window, a summary line with the count and the codes of what was suppressed
 * once the window is over (or at a flush), peers apart, and a full table that
 * makes room by saying the oldest peer's count first. */
#include "server/loglimit.h"

#include <check.h>

#include "tests/check_run.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"

static FILE *out;
static long at; /* what logged() has read of out */
static char text[65536];

static void setup(void)
{
    out = tmpfile();
    at = 0;
    ck_assert_ptr_nonnull(out);
    dcps_log_set_stream(out);
}

static void teardown(void)
{
    dcps_log_set_stream(NULL);
    fclose(out);
}

/* What was logged since the last call. */
static const char *logged(void)
{
    fflush(out);
    if (fseek(out, at, SEEK_SET) != 0)
        ck_abort_msg("fseek");
    size_t n = fread(text, 1, sizeof text - 1, out);
    text[n] = '\0';
    at += (long)n;
    return text;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

START_TEST(five_lines_per_window_then_one_summary_with_the_codes)
{
    static dcps_loglimit_t l;
    dcps_loglimit_init(&l);
    int allowed = 0;
    for (int i = 0; i < 1000; i++)
        allowed += dcps_loglimit_allow(&l, "10.0.0.7", i % 4 ? DCPS_E_HEADER : DCPS_E_FRAMELEN,
                                       (double)i);
    ck_assert_int_eq(allowed, DCPS_LOGLIMIT_LINES);
    ck_assert_uint_eq(l.suppressed, 995);
    dcps_loglimit_flush(&l, 5000, false); /* the window is not over: nothing yet */
    ck_assert_str_eq(logged(), "");
    dcps_loglimit_flush(&l, 10000, false);
    const char *t = logged();
    ck_assert_int_eq(count(t, "\n"), 1);
    ck_assert_msg(strstr(t, "995 more bad messages from 10.0.0.7 suppressed in the last 10 s "
                            "(codes HEADER 747, FRAMELEN 248)"),
                  "%s", t);
    /* A new window: five lines again. */
    for (int i = 0; i < 6; i++)
        ck_assert(dcps_loglimit_allow(&l, "10.0.0.7", DCPS_E_HEADER, 20000) == (i < 5));
}
END_TEST

START_TEST(a_message_after_the_window_says_the_summary_and_starts_again)
{
    static dcps_loglimit_t l;
    dcps_loglimit_init(&l);
    for (int i = 0; i < 7; i++)
        dcps_loglimit_allow(&l, "::1", DCPS_E_RANGE, 100);
    ck_assert_str_eq(logged(), "");
    ck_assert(dcps_loglimit_allow(&l, "::1", DCPS_E_RANGE, 100 + DCPS_LOGLIMIT_WINDOW_MS));
    ck_assert_msg(strstr(logged(), "2 more bad messages from ::1 suppressed"), "%s", text);
}
END_TEST

START_TEST(peers_have_limits_of_their_own)
{
    static dcps_loglimit_t l;
    dcps_loglimit_init(&l);
    for (int i = 0; i < 5; i++)
        ck_assert(dcps_loglimit_allow(&l, "10.0.0.1", DCPS_E_HEADER, 0));
    ck_assert(!dcps_loglimit_allow(&l, "10.0.0.1", DCPS_E_HEADER, 0));
    ck_assert(dcps_loglimit_allow(&l, "10.0.0.2", DCPS_E_HEADER, 0));
    ck_assert(dcps_loglimit_allow(&l, NULL, DCPS_E_HEADER, 0)); /* no address: "?" */
    for (int i = 0; i < 5; i++)
        dcps_loglimit_allow(&l, "", DCPS_E_HEADER, 0);
    dcps_loglimit_flush(&l, 1, true);
    const char *t = logged();
    ck_assert_int_eq(count(t, "\n"), 2);
    ck_assert(strstr(t, "1 more bad message from 10.0.0.1 suppressed in the last 0 s "
                        "(codes HEADER 1)"));
    ck_assert(strstr(t, "1 more bad message from ? suppressed"));
}
END_TEST

/* More peers than the table holds: the one whose window started first makes
 * room, and its count is said then, not lost. */
START_TEST(a_full_table_says_the_oldest_peers_count_and_reuses_it)
{
    static dcps_loglimit_t l;
    char peer[32];
    dcps_loglimit_init(&l);
    for (int p = 0; p < DCPS_LOGLIMIT_PEERS; p++) {
        snprintf(peer, sizeof peer, "10.1.0.%d", p);
        for (int i = 0; i < 6; i++)
            dcps_loglimit_allow(&l, peer, DCPS_E_ORDER, (double)p);
    }
    ck_assert_str_eq(logged(), "");
    ck_assert(dcps_loglimit_allow(&l, "10.2.0.1", DCPS_E_ORDER, 100));
    const char *t = logged();
    ck_assert_int_eq(count(t, "\n"), 1);
    ck_assert_msg(strstr(t, "1 more bad message from 10.1.0.0 suppressed"), "%s", t);
    /* 10.1.0.1 is still tracked: its sixth message is still suppressed. */
    ck_assert(!dcps_loglimit_allow(&l, "10.1.0.1", DCPS_E_ORDER, 101));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("loglimit");
    TCase *tc = tcase_create("limit");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, five_lines_per_window_then_one_summary_with_the_codes);
    tcase_add_test(tc, a_message_after_the_window_says_the_summary_and_starts_again);
    tcase_add_test(tc, peers_have_limits_of_their_own);
    tcase_add_test(tc, a_full_table_says_the_oldest_peers_count_and_reuses_it);
    suite_add_tcase(s, tc);
    return dcps_test_run(s);
}
