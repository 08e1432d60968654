/* Tests for server/groups: the parameter group table, and the shard applying
 * it (server/shard.c). A table that does not tile the model, or has a bad
 * option, is refused with a sentence; the shard keeps its range's part; a
 * push with two groups (weight_decay 0.1 and 0, lr factors 1 and 2) equals the
 * rule applied to each range on its own, dense and sparse; a rank's table is
 * compared group by group. The checkpoint round trip is in test_checkpoint. */
#include "server/groups.h"

#include <check.h>

#include "tests/check_run.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/error.h"
#include "server/optimizer.h"
#include "server/shard.h"

static char why[512];
static int err;

#define ck_assert_why_has(s) ck_assert_msg(strstr(why, s) != NULL, "why: %s", why)

static const dcps_range_t ALL = {0, 72};

START_TEST(a_table_that_tiles_the_model_is_kept_for_the_shards_range)
{
    const uint32_t ranges[] = {10, 0, 64, 1, 72, 0};
    const double opts[] = {1, 0.1, 2, 0};
    dcps_groups_t *g = dcps_groups_parse(ranges, 3, opts, 2, 72, (dcps_range_t){8, 70}, &err,
                                         why, sizeof why);
    ck_assert_msg(g != NULL, "%s", why);
    ck_assert_uint_eq(g->n_groups, 2);
    ck_assert_uint_eq(g->n_segs, 3);
    ck_assert_uint_eq(g->seg[0].lo, 0);
    ck_assert_uint_eq(g->seg[0].hi, 2);
    ck_assert_uint_eq(g->seg[1].hi, 56);
    ck_assert_uint_eq(g->seg[1].group, 1);
    ck_assert_uint_eq(g->seg[2].hi, 62);
    ck_assert(g->opt[0].weight_decay == 0.1 && g->opt[1].lr_factor == 2);
    dcps_groups_destroy(&g);
    ck_assert_ptr_null(g);
}
END_TEST

START_TEST(a_table_that_does_not_cover_the_model_exactly_is_refused)
{
    const double opts[] = {1, 0.1, 1, 0};
    const uint32_t short_of[] = {10, 0, 60, 1};
    ck_assert_ptr_null(dcps_groups_parse(short_of, 2, opts, 2, 72, ALL, &err, why, sizeof why));
    ck_assert_int_eq(err, DCPS_E_FIELD);
    ck_assert_why_has("the group table covers parameters [0, 60), the model has 72");
    const uint32_t past[] = {10, 0, 80, 1};
    ck_assert_ptr_null(dcps_groups_parse(past, 2, opts, 2, 72, ALL, &err, why, sizeof why));
    ck_assert_why_has("range 1 of the group table ends at 80");
    const uint32_t back[] = {10, 0, 5, 1, 72, 0};
    ck_assert_ptr_null(dcps_groups_parse(back, 3, opts, 2, 72, ALL, &err, why, sizeof why));
    ck_assert_why_has("range 1 of the group table ends at 5, after its start 10");
    const uint32_t empty[] = {10, 0, 10, 1, 72, 0};
    ck_assert_ptr_null(dcps_groups_parse(empty, 3, opts, 2, 72, ALL, &err, why, sizeof why));
    ck_assert_int_eq(err, DCPS_E_FIELD);
    const uint32_t stranger[] = {10, 0, 72, 2};
    ck_assert_ptr_null(dcps_groups_parse(stranger, 2, opts, 2, 72, ALL, &err, why, sizeof why));
    ck_assert_why_has("names group 2; the table has 2 groups");
}
END_TEST

START_TEST(a_group_option_out_of_its_range_is_refused_naming_the_group)
{
    const uint32_t ranges[] = {72, 1};
    const double bad[][4] = {{1, 0, 0, 0}, {1, 0, 1, -0.1}, {1, 0, NAN, 0}, {1, 0, 1, 2},
                             {1, 0, 1001, 0}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_ptr_null(
            dcps_groups_parse(ranges, 1, bad[i], 2, 72, ALL, &err, why, sizeof why));
        ck_assert_int_eq(err, DCPS_E_FIELD);
        ck_assert_why_has("group 1 has lr_factor");
    }
}
END_TEST

START_TEST(a_ranks_table_is_compared_group_by_group)
{
    const uint32_t ranges[] = {64, 0, 72, 1}, other[] = {60, 0, 72, 1};
    const double opts[] = {1, 0.1, 1, 0}, opts2[] = {1, 0.1, 0.5, 0};
    dcps_groups_t *a = dcps_groups_parse(ranges, 2, opts, 2, 72, ALL, &err, why, sizeof why);
    dcps_groups_t *b = dcps_groups_parse(ranges, 2, opts2, 2, 72, ALL, &err, why, sizeof why);
    dcps_groups_t *c = dcps_groups_parse(other, 2, opts, 2, 72, ALL, &err, why, sizeof why);
    dcps_groups_t *d = dcps_groups_parse(ranges, 2, opts, 2, 72, ALL, &err, why, sizeof why);
    ck_assert_int_eq(dcps_groups_compare(a, d, 1, why, sizeof why), 0);
    ck_assert_int_eq(dcps_groups_compare(a, b, 1, why, sizeof why), DCPS_E_FIELD);
    ck_assert_why_has("parameter group 1 differs from rank 0's: rank 1 gives it lr_factor 0.5");
    ck_assert_int_eq(dcps_groups_compare(a, c, 2, why, sizeof why), DCPS_E_FIELD);
    ck_assert_why_has("rank 0 put this shard's parameter 60 in group 0, rank 2 puts it in group 1");
    ck_assert_int_eq(dcps_groups_compare(NULL, a, 3, why, sizeof why), DCPS_E_FIELD);
    ck_assert_why_has("rank 3 gives 2 parameter groups, rank 0 gave 0");
    ck_assert_int_eq(dcps_groups_compare(NULL, NULL, 3, why, sizeof why), 0);
    dcps_groups_destroy(&a);
    dcps_groups_destroy(&b);
    dcps_groups_destroy(&c);
    dcps_groups_destroy(&d);
}
END_TEST

/* One shard of 72 parameters (8,8), adamw at lr 0.01, job weight decay 0.05. */
static dcps_shard_t *adamw_shard(const char *lazy)
{
    const char *const ov[] = {"model.layers=8,8", "servers.shards=tcp://127.0.0.1:1",
                              "optimizer.kind=adamw", "optimizer.lr=0.01",
                              "optimizer.weight_decay=0.05", lazy};
    dcps_config_t cfg;
    ck_assert_int_eq(dcps_config_load(&cfg, NULL, ov, 6, why, sizeof why), 0);
    dcps_shard_t *s = dcps_shard_new(&cfg, 0, &err);
    ck_assert_ptr_nonnull(s);
    return s;
}

static void with_groups(dcps_shard_t *s)
{
    const uint32_t ranges[] = {64, 0, 72, 1};
    const double opts[] = {1, 0.1, 2, 0};
    dcps_groups_t *g = dcps_groups_parse(ranges, 2, opts, 2, 72, ALL, &err, why, sizeof why);
    ck_assert_int_eq(dcps_shard_set_groups(s, &g, why, sizeof why), 0);
    ck_assert_ptr_null(g);
}

static void init(dcps_shard_t *s, float *w)
{
    for (int i = 0; i < 72; i++)
        w[i] = (float)sin(0.3 * i);
    ck_assert_int_eq(dcps_shard_init(s, w), 1);
}

/* The two ranges updated on their own: adamw with wd 0.1 at lr 0.01 on
 * [0, 64), wd 0 at lr 0.02 on [64, 72); m, v their state. */
static void reference(float *w, float *m, float *v, const float *g, uint64_t t)
{
    /* the shard keeps [optimizer] lr in double, as torch keeps a Python float */
    const double wd[2] = {0.1, 0}, lr[2] = {0.01, 0.01 * 2};
    const size_t lo[2] = {0, 64}, hi[2] = {64, 72};
    float out[72];
    for (int k = 0; k < 2; k++) {
        dcps_rule_t r = dcps_rule_new(DCPS_OPT_ADAMW, 0, false, 0.9, 0.999, 1e-8, wd[k]);
        dcps_rule_at(&r, lr[k], t);
        float *const st[2] = {m + lo[k], v + lo[k]};
        ck_assert_uint_eq(
            dcps_rule_dense_to(&r, out + lo[k], w + lo[k], st, g + lo[k], hi[k] - lo[k]),
            hi[k] - lo[k]);
        dcps_rule_dense_state(&r, st, w + lo[k], g + lo[k], hi[k] - lo[k]);
    }
    memcpy(w, out, sizeof out);
}

static void assert_w(const dcps_shard_t *s, const float *want)
{
    const float *w = dcps_shard_view(s).w;
    for (int i = 0; i < 72; i++)
        ck_assert_msg(w[i] == want[i], "parameter %d: %.9g, expected %.9g", i, (double)w[i],
                      (double)want[i]);
}

START_TEST(two_groups_equal_each_rule_applied_to_its_range)
{
    dcps_shard_t *s = adamw_shard("optimizer.lazy=false");
    float w[72], m[72] = {0}, v[72] = {0}, g[72];
    with_groups(s);
    init(s, w);
    for (uint64_t t = 1; t <= 3; t++) {
        for (int i = 0; i < 72; i++)
            g[i] = (float)cos(0.7 * i + (double)t);
        ck_assert_int_eq(dcps_shard_apply_dense(s, 0, t, g), 0);
        reference(w, m, v, g, t);
        assert_w(s, w);
    }
    /* A sparse push across both groups: the dense rule on a gradient zero
     * elsewhere, per group. */
    const uint32_t idx[] = {3, 63, 64, 70};
    const float val[] = {0.5f, -1, 2, 0.25f};
    memset(g, 0, sizeof g);
    for (int j = 0; j < 4; j++)
        g[idx[j]] = val[j];
    ck_assert_int_eq(dcps_shard_apply_sparse(s, 0, 4, idx, val, 4), 0);
    reference(w, m, v, g, 4);
    assert_w(s, w);
    dcps_shard_destroy(&s);
}
END_TEST

START_TEST(groups_are_set_once_before_the_parameters)
{
    dcps_shard_t *s = adamw_shard("optimizer.lazy=false");
    float w[72];
    init(s, w);
    const uint32_t ranges[] = {72, 0};
    const double opts[] = {1, 0};
    dcps_groups_t *g = dcps_groups_parse(ranges, 1, opts, 1, 72, ALL, &err, why, sizeof why);
    ck_assert_int_eq(dcps_shard_set_groups(s, &g, why, sizeof why), DCPS_E_STATE);
    ck_assert_ptr_null(g);
    ck_assert_ptr_null(dcps_shard_groups(s));
    dcps_shard_destroy(&s);
}
END_TEST

START_TEST(adamw_refuses_a_group_whose_lr_times_decay_reaches_one)
{
    dcps_shard_t *s = adamw_shard("optimizer.lazy=false");
    const uint32_t ranges[] = {72, 0};
    const double opts[] = {1000, 0.5}; /* 0.01 * 1000 * 0.5 = 5 */
    dcps_groups_t *g = dcps_groups_parse(ranges, 1, opts, 1, 72, ALL, &err, why, sizeof why);
    ck_assert_int_eq(dcps_shard_set_groups(s, &g, why, sizeof why), DCPS_E_FIELD);
    ck_assert_why_has("parameter group 0: lr 0.01 times its lr_factor 1000");
    dcps_shard_destroy(&s);
}
END_TEST

START_TEST(saved_words_load_back_as_the_same_table)
{
    const uint32_t ranges[] = {10, 0, 64, 1, 72, 0};
    const double opts[] = {1, 0.1, 2, 0};
    dcps_groups_t *g = dcps_groups_parse(ranges, 3, opts, 2, 72, (dcps_range_t){8, 70}, &err,
                                         why, sizeof why);
    uint64_t words[64];
    size_t used;
    ck_assert_uint_le(dcps_groups_words(g), 64);
    dcps_groups_save(g, words);
    dcps_groups_t *h = dcps_groups_load(words, dcps_groups_words(g), 62, &used, &err, why,
                                        sizeof why);
    ck_assert_msg(h != NULL, "%s", why);
    ck_assert_uint_eq(used, dcps_groups_words(g));
    ck_assert_int_eq(dcps_groups_compare(g, h, 0, why, sizeof why), 0);
    /* Of another shard's size: not this shard's table. */
    ck_assert_ptr_null(dcps_groups_load(words, dcps_groups_words(g), 61, &used, &err, why,
                                        sizeof why));
    ck_assert_int_eq(err, DCPS_E_DATA);
    dcps_groups_destroy(&g);
    dcps_groups_destroy(&h);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("groups");
    TCase *tc = tcase_create("groups");
    tcase_add_test(tc, a_table_that_tiles_the_model_is_kept_for_the_shards_range);
    tcase_add_test(tc, a_table_that_does_not_cover_the_model_exactly_is_refused);
    tcase_add_test(tc, a_group_option_out_of_its_range_is_refused_naming_the_group);
    tcase_add_test(tc, a_ranks_table_is_compared_group_by_group);
    tcase_add_test(tc, two_groups_equal_each_rule_applied_to_its_range);
    tcase_add_test(tc, groups_are_set_once_before_the_parameters);
    tcase_add_test(tc, adamw_refuses_a_group_whose_lr_times_decay_reaches_one);
    tcase_add_test(tc, saved_words_load_back_as_the_same_table);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return dcps_test_run(suite());
}
