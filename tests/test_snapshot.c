/* Tests for server/snapshot: a set of buffers that pull replies send without
 * a copy, held by the loop thread and released from any thread. */
#include "server/snapshot.h"

#include <check.h>

#include "tests/check_run.h"
#include <pthread.h>
#include <stdint.h>
#include <time.h>

static void *release_later(void *arg)
{
    void **a = arg;
    nanosleep(&(struct timespec){0, 2000000}, NULL);
    dcps_snapshot_release(a[0], a[1]);
    return NULL;
}

/* The set's holds, released from another thread (as ZeroMQ's I/O thread does). */
START_TEST(snapshot_holds_are_counted_and_released_on_any_thread)
{
    dcps_snapshot_t *set = dcps_snapshot_new(1000, 3);
    ck_assert_ptr_nonnull(set);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq((int)((uintptr_t)dcps_snapshot_buf(set, i) % 64), 0);
        ck_assert_int_eq(dcps_snapshot_find(set, dcps_snapshot_buf(set, i)), i);
        ck_assert_float_eq(dcps_snapshot_buf(set, i)[999], 0);
    }
    ck_assert_int_eq(dcps_snapshot_find(set, dcps_snapshot_buf(set, 1) + 1), -1);
    ck_assert_ptr_null(dcps_snapshot_new(10, DCPS_SNAPSHOT_MAX + 1));
    void *h = dcps_snapshot_hold(set, 2);
    ck_assert(dcps_snapshot_held(set, 2));
    ck_assert(!dcps_snapshot_held(set, 0));
    ck_assert_int_eq(dcps_snapshot_held_count(set), 1);
    void *arg[2] = {dcps_snapshot_buf(set, 2), h};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, release_later, arg), 0);
    while (dcps_snapshot_held(set, 2))
        nanosleep(&(struct timespec){0, 100000}, NULL);
    pthread_join(th, NULL);
    ck_assert_int_eq(dcps_snapshot_held_count(set), 0);
    /* Dropped while held: freed by the last release (valgrind and ASan check). */
    h = dcps_snapshot_hold(set, 0);
    float *b0 = dcps_snapshot_buf(set, 0);
    dcps_snapshot_drop(&set);
    ck_assert_ptr_null(set);
    b0[0] = 1; /* still there */
    dcps_snapshot_release(b0, h);
    dcps_snapshot_drop(&set); /* NULL: nothing */
}
END_TEST

static Suite *snapshot_suite(void)
{
    Suite *s = suite_create("snapshot");
    TCase *tc = tcase_create("holds");
    tcase_add_test(tc, snapshot_holds_are_counted_and_released_on_any_thread);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return dcps_test_run(snapshot_suite());
}
