/* Tests for common/error: the table's codes are distinct and stable, every code
 * has its own sentence and name, and the lookups accept the positive wire form of
 * a code and answer "unknown" for values outside the table. */
#include "common/error.h"

#include <check.h>

#include "tests/check_run.h"
#include <stdlib.h>
#include <string.h>

struct entry {
    const char *name;
    int value;
    const char *msg;
};

/* The table as the header spells it, expanded here independently of error.c. */
static const struct entry table[] = {
#define ROW(name, value, msg) {#name, (value), (msg)},
    DCPS_ERRORS(ROW)
#undef ROW
};
#define N_ENTRIES (sizeof table / sizeof table[0])

START_TEST(every_code_has_a_distinct_value)
{
    for (size_t i = 0; i < N_ENTRIES; i++)
        for (size_t j = i + 1; j < N_ENTRIES; j++)
            ck_assert_msg(table[i].value != table[j].value, "%s and %s share the value %d",
                          table[i].name, table[j].name, table[i].value);
}
END_TEST

START_TEST(codes_are_zero_then_consecutive_negatives)
{
    /* Values are appended, never renumbered: the table is 0, -1, -2, ... */
    for (size_t i = 0; i < N_ENTRIES; i++)
        ck_assert_int_eq(table[i].value, -(int)i);
    ck_assert_int_eq(DCPS_OK, 0);
    ck_assert_int_eq(DCPS_E_OK, 0);
}
END_TEST

START_TEST(wire_values_are_pinned)
{
    /* Peers send these numbers in ERROR replies; they must never change. */
    ck_assert_int_eq(DCPS_E_NOMEM, -1);
    ck_assert_int_eq(DCPS_E_INVAL, -2);
    ck_assert_int_eq(DCPS_E_CONFIG, -4);
    ck_assert_int_eq(DCPS_E_NOGPU, -8);
    ck_assert_int_eq(DCPS_E_HEADER, -10);
    ck_assert_int_eq(DCPS_E_MSGTYPE, -11);
    ck_assert_int_eq(DCPS_E_FRAMECOUNT, -12);
    ck_assert_int_eq(DCPS_E_FRAMELEN, -13);
    ck_assert_int_eq(DCPS_E_RANGE, -14);
    ck_assert_int_eq(DCPS_E_ORDER, -15);
    ck_assert_int_eq(DCPS_E_NONFINITE, -16);
    ck_assert_int_eq(DCPS_E_JOBID, -17);
    ck_assert_int_eq(DCPS_E_PROTOVER, -18);
    ck_assert_int_eq(DCPS_E_SIZE, -19);
    ck_assert_int_eq(DCPS_E_STATE, -24);
    ck_assert_int_eq(DCPS_E_VERSION, -25);
    ck_assert_int_eq(DCPS_E_LIVE, -26);
    ck_assert_int_eq(DCPS_E_AUTH, -27);
    ck_assert_int_eq(DCPS_E_SESSION, -28);
    ck_assert_int_eq(DCPS_E_FIELD, -29);
    ck_assert_int_eq(DCPS_E_ENCODING, -30);
}
END_TEST

START_TEST(every_code_has_its_own_nonempty_message)
{
    for (size_t i = 0; i < N_ENTRIES; i++) {
        const char *m = dcps_strerror(table[i].value);
        ck_assert_ptr_nonnull(m);
        ck_assert_uint_gt(strlen(m), 0);
        ck_assert_str_eq(m, table[i].msg);
        ck_assert_str_ne(m, "unknown error");
        for (size_t j = 0; j < i; j++)
            ck_assert_str_ne(m, dcps_strerror(table[j].value));
    }
}
END_TEST

START_TEST(known_messages_are_the_table_sentences)
{
    ck_assert_str_eq(dcps_strerror(0), "success");
    ck_assert_str_eq(dcps_strerror(DCPS_E_NOMEM), "out of memory");
    ck_assert_str_eq(dcps_strerror(DCPS_E_FRAMELEN),
                     "payload frame length does not match the header");
    ck_assert_str_eq(dcps_strerror(DCPS_E_STATE), "request not valid in the current state");
}
END_TEST

START_TEST(strerror_accepts_positive_wire_values)
{
    for (size_t i = 0; i < N_ENTRIES; i++) {
        int code = table[i].value;
        ck_assert_str_eq(dcps_strerror(-code), dcps_strerror(code));
        ck_assert_str_eq(dcps_strerror(-code), table[i].msg);
    }
    ck_assert_str_eq(dcps_strerror(13), "payload frame length does not match the header");
}
END_TEST

START_TEST(unknown_values_give_unknown_error)
{
    static const int unknown[] = {-31, 31, -100, 100, -1000000, 1000000, -2147483647, 2147483647};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        ck_assert_str_eq(dcps_strerror(unknown[i]), "unknown error");
        ck_assert_str_eq(dcps_errname(unknown[i]), "UNKNOWN");
        ck_assert_int_eq(dcps_error_known(unknown[i]), 0);
    }
}
END_TEST

START_TEST(int_min_is_unknown_and_does_not_crash)
{
    /* -INT_MIN does not exist; the lookup must still answer. */
    int code = -2147483647 - 1;
    ck_assert_str_eq(dcps_strerror(code), "unknown error");
    ck_assert_str_eq(dcps_errname(code), "UNKNOWN");
    ck_assert_int_eq(dcps_error_known(code), 0);
}
END_TEST

START_TEST(errname_gives_the_short_name_of_each_code)
{
    for (size_t i = 0; i < N_ENTRIES; i++) {
        ck_assert_str_eq(dcps_errname(table[i].value), table[i].name);
        ck_assert_str_eq(dcps_errname(-table[i].value), table[i].name);
        for (size_t j = 0; j < i; j++)
            ck_assert_str_ne(dcps_errname(table[i].value), dcps_errname(table[j].value));
    }
    ck_assert_str_eq(dcps_errname(DCPS_E_FRAMELEN), "FRAMELEN");
    ck_assert_str_eq(dcps_errname(DCPS_E_NONFINITE), "NONFINITE");
    ck_assert_str_eq(dcps_errname(0), "OK");
}
END_TEST

START_TEST(error_known_is_one_exactly_for_table_values)
{
    for (size_t i = 0; i < N_ENTRIES; i++) {
        ck_assert_int_eq(dcps_error_known(table[i].value), 1);
        ck_assert_int_eq(dcps_error_known(-table[i].value), 1);
    }
    int min = 0;
    for (size_t i = 0; i < N_ENTRIES; i++)
        if (table[i].value < min)
            min = table[i].value;
    ck_assert_int_eq(dcps_error_known(min - 1), 0);
    ck_assert_int_eq(dcps_error_known(-(min - 1)), 0);
}
END_TEST

static Suite *error_suite(void)
{
    Suite *s = suite_create("error");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, every_code_has_a_distinct_value);
    tcase_add_test(tc, codes_are_zero_then_consecutive_negatives);
    tcase_add_test(tc, wire_values_are_pinned);
    tcase_add_test(tc, every_code_has_its_own_nonempty_message);
    tcase_add_test(tc, known_messages_are_the_table_sentences);
    tcase_add_test(tc, strerror_accepts_positive_wire_values);
    tcase_add_test(tc, unknown_values_give_unknown_error);
    tcase_add_test(tc, int_min_is_unknown_and_does_not_crash);
    tcase_add_test(tc, errname_gives_the_short_name_of_each_code);
    tcase_add_test(tc, error_known_is_one_exactly_for_table_values);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return dcps_test_run(error_suite());
}
