/* Tests for common/schedule: f(t) of each schedule at points computed by hand,
 * the boundaries of the warm-up (t = W − 1, W) and of the decay (t = T and
 * beyond), no warm-up at all, and that the lr of an update is lr · f(t) with f
 * of cosine and linear following the base lr (a reload). The comparison with
 * torch.optim.lr_scheduler is python/tests/test_schedule.py. */
#include "common/schedule.h"
#include "tests/check_run.h"

#include <check.h>
#include <math.h>

/* Relative tolerance of values that libm's cos, pow or sqrt produce, or that
 * are not exact in binary: a few units in the last place of a double. */
#define TOL 1e-15

static double f(const dcps_schedule_t *s, double lr, uint64_t t)
{
    return dcps_schedule_factor(s, lr, t);
}

static void near(double got, double want)
{
    ck_assert_msg(fabs(got - want) <= TOL * fabs(want) + 1e-300, "got %.17g, want %.17g", got,
                  want);
}

START_TEST(constant_is_one_after_the_warmup)
{
    dcps_schedule_t s = {.kind = DCPS_SCHED_CONSTANT, .step_every = 1000, .step_gamma = 0.1};
    ck_assert_double_eq(f(&s, 0.05, 0), 1);
    ck_assert_double_eq(f(&s, 0.05, 123456789), 1);
    s.warmup_steps = 4;
    ck_assert_double_eq(f(&s, 0.05, 0), 0.25); /* (t + 1) / W */
    ck_assert_double_eq(f(&s, 0.05, 1), 0.5);
    ck_assert_double_eq(f(&s, 0.05, 2), 0.75);
    ck_assert_double_eq(f(&s, 0.05, 3), 1); /* t = W − 1: the last warm-up update, W / W */
    ck_assert_double_eq(f(&s, 0.05, 4), 1); /* t = W: the first after */
    ck_assert_double_eq(dcps_schedule_lr(&s, 0.05, 1), 0.05 * 0.5);
}
END_TEST

START_TEST(warmup_of_one_update_is_no_ramp)
{
    dcps_schedule_t s = {.kind = DCPS_SCHED_CONSTANT, .warmup_steps = 1, .step_every = 1};
    ck_assert_double_eq(f(&s, 1, 0), 1);
    ck_assert_double_eq(f(&s, 1, 1), 1);
    s.warmup_steps = 3;
    ck_assert_double_eq(f(&s, 1, 0), 1.0 / 3);
    ck_assert_double_eq(f(&s, 1, 1), 2.0 / 3);
}
END_TEST

START_TEST(step_multiplies_by_gamma_every_step_every_updates_after_the_warmup)
{
    dcps_schedule_t s = {.kind = DCPS_SCHED_STEP, .step_every = 10, .step_gamma = 0.5};
    ck_assert_double_eq(f(&s, 0.1, 0), 1);
    ck_assert_double_eq(f(&s, 0.1, 9), 1);
    ck_assert_double_eq(f(&s, 0.1, 10), 0.5);
    ck_assert_double_eq(f(&s, 0.1, 19), 0.5);
    ck_assert_double_eq(f(&s, 0.1, 25), 0.25);
    ck_assert_double_eq(f(&s, 0.1, 30), 0.125);
    /* After a warm-up of 5 the periods count from t = 5 (u = t − W). */
    s.warmup_steps = 5;
    s.step_gamma = 0.1;
    ck_assert_double_eq(f(&s, 0.1, 4), 1);    /* t = W − 1 */
    ck_assert_double_eq(f(&s, 0.1, 5), 1);    /* u = 0 */
    ck_assert_double_eq(f(&s, 0.1, 14), 1);   /* u = 9 */
    ck_assert_double_eq(f(&s, 0.1, 15), 0.1); /* u = 10: γ¹ is γ itself */
    near(f(&s, 0.1, 25), 0.01);
    ck_assert(fabs(f(&s, 0.1, 1004) - 1e-99) < 1e-112); /* γ^99: 99 roundings of 0.1 */
    /* γ = 1: no decay, however long. */
    s.step_gamma = 1;
    ck_assert_double_eq(f(&s, 0.1, (uint64_t)1 << 40), 1);
    /* So many periods that γ^n underflows: 0, not NaN. */
    s.step_gamma = 0.5;
    s.step_every = 1;
    ck_assert_double_eq(f(&s, 0.1, (uint64_t)1 << 40), 0);
}
END_TEST

START_TEST(cosine_falls_from_lr_to_min_lr_between_warmup_and_total_steps)
{
    /* lr 1 and min_lr 0: f is (1 + cos πc) / 2 itself. */
    dcps_schedule_t s = {.kind = DCPS_SCHED_COSINE, .total_steps = 100, .step_every = 1};
    ck_assert_double_eq(f(&s, 1, 0), 1);
    near(f(&s, 1, 25), (1 + sqrt(0.5)) / 2); /* cos(π/4) = √½ */
    near(f(&s, 1, 50), 0.5);
    near(f(&s, 1, 75), (1 - sqrt(0.5)) / 2);
    ck_assert_double_eq(f(&s, 1, 100), 0); /* t = T: cos π = −1 */
    ck_assert_double_eq(f(&s, 1, 1000), 0);
    /* A warm-up of 10 to T = 110, lr 0.1 to min_lr 0.01. */
    s = (dcps_schedule_t){.kind = DCPS_SCHED_COSINE, .warmup_steps = 10, .total_steps = 110,
                          .step_every = 1, .min_lr = 0.01};
    ck_assert_double_eq(f(&s, 0.1, 0), 0.1);
    ck_assert_double_eq(f(&s, 0.1, 9), 1); /* t = W − 1 */
    near(f(&s, 0.1, 10), 1);               /* t = W: c = 0 */
    near(f(&s, 0.1, 60), 0.55);            /* c = ½: halfway between 0.1 and 0.01, over 0.1 */
    near(f(&s, 0.1, 110), 0.1);            /* t = T: min_lr / lr */
    near(f(&s, 0.1, 111), 0.1);            /* beyond T: stays */
    near(f(&s, 0.1, (uint64_t)1 << 50), 0.1);
    near(dcps_schedule_lr(&s, 0.1, 60), 0.055);
    near(dcps_schedule_lr(&s, 0.1, 110), 0.01);
}
END_TEST

START_TEST(linear_falls_from_lr_to_min_lr_between_warmup_and_total_steps)
{
    dcps_schedule_t s = {.kind = DCPS_SCHED_LINEAR, .total_steps = 100, .step_every = 1};
    ck_assert_double_eq(f(&s, 0.1, 0), 1);
    ck_assert_double_eq(f(&s, 0.1, 50), 0.5);
    near(dcps_schedule_lr(&s, 0.1, 75), 0.025);
    ck_assert_double_eq(f(&s, 0.1, 100), 0);
    ck_assert_double_eq(f(&s, 0.1, 200), 0);
    s = (dcps_schedule_t){.kind = DCPS_SCHED_LINEAR, .warmup_steps = 10, .total_steps = 20,
                          .step_every = 1, .min_lr = 0.5};
    ck_assert_double_eq(f(&s, 1, 0), 0.1);
    ck_assert_double_eq(f(&s, 1, 9), 1);     /* t = W − 1 */
    ck_assert_double_eq(f(&s, 1, 10), 1);    /* t = W: c = 0 */
    ck_assert_double_eq(f(&s, 1, 15), 0.75); /* c = ½ */
    ck_assert_double_eq(f(&s, 1, 20), 0.5);  /* t = T */
    ck_assert_double_eq(f(&s, 1, 21), 0.5);  /* beyond */
}
END_TEST

START_TEST(inverse_sqrt_decays_from_the_end_of_the_warmup)
{
    dcps_schedule_t s = {.kind = DCPS_SCHED_INVERSE_SQRT, .warmup_steps = 4, .step_every = 1};
    ck_assert_double_eq(f(&s, 0.1, 0), 0.25);
    ck_assert_double_eq(f(&s, 0.1, 3), 1);    /* t = W − 1 */
    near(f(&s, 0.1, 4), 2 / sqrt(5));         /* t = W: √4 / √5 */
    ck_assert_double_eq(f(&s, 0.1, 15), 0.5); /* √4 / √16 */
    ck_assert_double_eq(f(&s, 0.1, 99), 0.2); /* √4 / √100 */
    /* No warm-up: √1 / √(t + 1). */
    s.warmup_steps = 0;
    ck_assert_double_eq(f(&s, 0.1, 0), 1);
    ck_assert_double_eq(f(&s, 0.1, 3), 0.5);
    ck_assert_double_eq(f(&s, 0.1, 8), 1.0 / 3);
    near(f(&s, 0.1, 999999), 1e-3);
}
END_TEST

/* f of cosine and linear is over the base lr, so lr · f ends at min_lr for any
 * base: a reload that changes lr moves the whole schedule; the others scale. */
START_TEST(the_schedule_follows_the_base_lr)
{
    dcps_schedule_t cos_s = {.kind = DCPS_SCHED_COSINE, .warmup_steps = 10, .total_steps = 110,
                             .step_every = 1, .min_lr = 0.01};
    near(dcps_schedule_lr(&cos_s, 0.2, 110), 0.01);
    near(dcps_schedule_lr(&cos_s, 0.2, 60), 0.105); /* halfway between 0.2 and 0.01 */
    ck_assert_double_eq(dcps_schedule_lr(&cos_s, 0.2, 4), 0.2 * 0.5);
    dcps_schedule_t lin = {.kind = DCPS_SCHED_LINEAR, .total_steps = 100, .step_every = 1,
                           .min_lr = 0.01};
    near(dcps_schedule_lr(&lin, 0.05, 50), 0.03);
    near(dcps_schedule_lr(&lin, 0.09, 50), 0.05);
    near(dcps_schedule_lr(&lin, 0.09, 100), 0.01);
    dcps_schedule_t step = {.kind = DCPS_SCHED_STEP, .step_every = 10, .step_gamma = 0.5};
    ck_assert_double_eq(dcps_schedule_lr(&step, 0.25, 20), 0.0625);
    ck_assert_double_eq(dcps_schedule_lr(&step, 0.5, 20), 0.125);
}
END_TEST

/* T ≤ W is refused by the load; a hand-made one ends at min_lr after the
 * warm-up rather than dividing by zero. */
START_TEST(cosine_and_linear_without_a_decay_span_stay_at_min_lr)
{
    dcps_schedule_t s = {.kind = DCPS_SCHED_COSINE, .warmup_steps = 10, .total_steps = 10,
                         .step_every = 1, .min_lr = 0.01};
    ck_assert_double_eq(f(&s, 0.1, 9), 1);
    near(f(&s, 0.1, 10), 0.1);
    s.kind = DCPS_SCHED_LINEAR;
    s.total_steps = 0;
    near(f(&s, 0.1, 12), 0.1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("schedule");
    TCase *tc = tcase_create("schedule");
    tcase_add_test(tc, constant_is_one_after_the_warmup);
    tcase_add_test(tc, warmup_of_one_update_is_no_ramp);
    tcase_add_test(tc, step_multiplies_by_gamma_every_step_every_updates_after_the_warmup);
    tcase_add_test(tc, cosine_falls_from_lr_to_min_lr_between_warmup_and_total_steps);
    tcase_add_test(tc, linear_falls_from_lr_to_min_lr_between_warmup_and_total_steps);
    tcase_add_test(tc, inverse_sqrt_decays_from_the_end_of_the_warmup);
    tcase_add_test(tc, the_schedule_follows_the_base_lr);
    tcase_add_test(tc, cosine_and_linear_without_a_decay_span_stay_at_min_lr);
    suite_add_tcase(s, tc);
    return dcps_test_run(s);
}
