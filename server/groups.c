/* dcps — parameter groups; see groups.h. */
#include "server/groups.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"

static dcps_groups_t *alloc_groups(size_t n_groups, size_t n_segs)
{
    dcps_groups_t *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->opt = calloc(n_groups ? n_groups : 1, sizeof *g->opt);
    g->seg = calloc(n_segs ? n_segs : 1, sizeof *g->seg);
    if (!g->opt || !g->seg)
        dcps_groups_destroy(&g);
    return g;
}

/* The sentence for a group's option out of its bounds, or NULL if both fit. */
static const char *bad_option(const dcps_group_opt_t *o)
{
    if (!isfinite(o->lr_factor) || o->lr_factor <= 0 || o->lr_factor > DCPS_GROUP_LR_FACTOR_MAX)
        return "lr_factor must be above 0 and at most 1000";
    if (!isfinite(o->weight_decay) || o->weight_decay < 0 ||
        o->weight_decay > DCPS_GROUP_WEIGHT_DECAY_MAX)
        return "weight_decay must be from 0 to 1, as [optimizer] weight_decay";
    return NULL;
}

dcps_groups_t *dcps_groups_parse(const uint32_t *ranges, size_t n_ranges, const double *opts,
                                 size_t n_groups, uint64_t n_params, dcps_range_t mine, int *err,
                                 char *why, size_t whylen)
{
    dcps_groups_t *g = NULL;
    *err = DCPS_E_FIELD;
    if (n_groups < 1 || n_groups > DCPS_GROUPS_MAX || n_ranges < 1 ||
        n_ranges > DCPS_GROUP_RANGES_MAX) {
        dcps_say(why, whylen, DCPS_E_FIELD,
                 "a group table of %zu groups and %zu ranges: it has 1 to %d groups and 1 to "
                 "%d ranges",
                 n_groups, n_ranges, DCPS_GROUPS_MAX, DCPS_GROUP_RANGES_MAX);
        return NULL;
    }
    for (size_t j = 0; j < n_groups; j++) {
        const dcps_group_opt_t o = {opts[2 * j], opts[2 * j + 1]};
        const char *bad = bad_option(&o);
        if (bad) {
            dcps_say(why, whylen, DCPS_E_FIELD,
                     "group %zu has lr_factor %g and weight_decay %g: %s", j, o.lr_factor,
                     o.weight_decay, bad);
            return NULL;
        }
    }
    /* The ranges tile [0, n_params): each ends after the last, the last at n. */
    uint64_t lo = 0;
    size_t segs = 0;
    for (size_t j = 0; j < n_ranges; j++) {
        const uint64_t hi = ranges[2 * j];
        const uint32_t grp = ranges[2 * j + 1];
        if (hi <= lo || hi > n_params) {
            dcps_say(why, whylen, DCPS_E_FIELD,
                     "range %zu of the group table ends at %llu, after its start %llu: the "
                     "ranges must follow each other in order and end within the model's %llu "
                     "parameters",
                     j, (unsigned long long)hi, (unsigned long long)lo,
                     (unsigned long long)n_params);
            return NULL;
        }
        if (grp >= n_groups) {
            dcps_say(why, whylen, DCPS_E_FIELD,
                     "range %zu [%llu, %llu) of the group table names group %u; the table has "
                     "%zu groups",
                     j, (unsigned long long)lo, (unsigned long long)hi, grp, n_groups);
            return NULL;
        }
        segs += hi > mine.lo && lo < mine.hi;
        lo = hi;
    }
    if (lo != n_params) {
        dcps_say(why, whylen, DCPS_E_FIELD,
                 "the group table covers parameters [0, %llu), the model has %llu: every "
                 "parameter must be in one group",
                 (unsigned long long)lo, (unsigned long long)n_params);
        return NULL;
    }
    if (!(g = alloc_groups(n_groups, segs))) {
        *err = dcps_say(why, whylen, DCPS_E_NOMEM, "out of memory for the group table");
        return NULL;
    }
    g->n_groups = (uint32_t)n_groups;
    for (size_t j = 0; j < n_groups; j++)
        g->opt[j] = (dcps_group_opt_t){opts[2 * j], opts[2 * j + 1]};
    lo = 0;
    for (size_t j = 0; j < n_ranges; j++) {
        const uint64_t hi = ranges[2 * j];
        if (hi > mine.lo && lo < mine.hi) {
            const uint64_t a = lo > mine.lo ? lo : mine.lo, b = hi < mine.hi ? hi : mine.hi;
            g->seg[g->n_segs++] = (dcps_group_seg_t){(size_t)(a - mine.lo),
                                                     (size_t)(b - mine.lo), ranges[2 * j + 1]};
        }
        lo = hi;
    }
    *err = 0;
    return g;
}

/* The group of local parameter i (segments tile the range). */
static uint32_t group_at(const dcps_groups_t *g, size_t i)
{
    size_t a = 0, b = g->n_segs;
    while (b - a > 1) {
        size_t m = a + (b - a) / 2;
        if (g->seg[m].lo <= i)
            a = m;
        else
            b = m;
    }
    return g->seg[a].group;
}

int dcps_groups_compare(const dcps_groups_t *job, const dcps_groups_t *theirs, uint32_t rank,
                        char *why, size_t whylen)
{
    if (!job && !theirs)
        return 0;
    if (!job || !theirs || job->n_groups != theirs->n_groups)
        return dcps_say(why, whylen, DCPS_E_FIELD,
                        "rank %u gives %u parameter groups, rank 0 gave %u: every rank must give "
                        "rank 0's groups",
                        rank, theirs ? theirs->n_groups : 0, job ? job->n_groups : 0);
    for (uint32_t j = 0; j < job->n_groups; j++) {
        const dcps_group_opt_t *a = &job->opt[j], *b = &theirs->opt[j];
        if (a->lr_factor != b->lr_factor)
            return dcps_say(why, whylen, DCPS_E_FIELD,
                            "parameter group %u differs from rank 0's: rank %u gives it "
                            "lr_factor %.17g, rank 0 gave %.17g",
                            j, rank, b->lr_factor, a->lr_factor);
        if (a->weight_decay != b->weight_decay)
            return dcps_say(why, whylen, DCPS_E_FIELD,
                            "parameter group %u differs from rank 0's: rank %u gives it "
                            "weight_decay %.17g, rank 0 gave %.17g",
                            j, rank, b->weight_decay, a->weight_decay);
    }
    /* The first parameter whose group differs: at a segment's start of one. */
    for (int side = 0; side < 2; side++) {
        const dcps_groups_t *g = side ? theirs : job;
        for (size_t j = 0; j < g->n_segs; j++) {
            const size_t i = g->seg[j].lo;
            const uint32_t mine = group_at(job, i), other = group_at(theirs, i);
            if (mine != other)
                return dcps_say(why, whylen, DCPS_E_FIELD,
                                "parameter group %u differs from rank 0's: rank 0 put this "
                                "shard's parameter %zu in group %u, rank %u puts it in group %u",
                                mine, i, mine, rank, other);
        }
    }
    return 0;
}

size_t dcps_groups_words(const dcps_groups_t *g)
{
    return 2 + 2 * (size_t)g->n_groups + 3 * g->n_segs;
}

static uint64_t bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static double real(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

void dcps_groups_save(const dcps_groups_t *g, uint64_t *words)
{
    *words++ = g->n_groups;
    *words++ = g->n_segs;
    for (uint32_t j = 0; j < g->n_groups; j++) {
        *words++ = bits(g->opt[j].lr_factor);
        *words++ = bits(g->opt[j].weight_decay);
    }
    for (size_t j = 0; j < g->n_segs; j++) {
        *words++ = g->seg[j].lo;
        *words++ = g->seg[j].hi;
        *words++ = g->seg[j].group;
    }
}

dcps_groups_t *dcps_groups_load(const uint64_t *words, size_t n_words, size_t n, size_t *used,
                                int *err, char *why, size_t whylen)
{
    *err = DCPS_E_DATA;
    if (n_words < 2 || words[0] < 1 || words[0] > DCPS_GROUPS_MAX || words[1] > n ||
        words[1] > DCPS_GROUP_RANGES_MAX || (n > 0) != (words[1] > 0) ||
        n_words < 2 + 2 * words[0] + 3 * words[1]) {
        dcps_say(why, whylen, DCPS_E_DATA, "its group table's counts do not fit the shard");
        return NULL;
    }
    dcps_groups_t *g = alloc_groups(words[0], words[1]);
    if (!g) {
        *err = dcps_say(why, whylen, DCPS_E_NOMEM, "out of memory for the group table");
        return NULL;
    }
    g->n_groups = (uint32_t)words[0];
    g->n_segs = words[1];
    const uint64_t *w = words + 2;
    for (uint32_t j = 0; j < g->n_groups; j++, w += 2) {
        g->opt[j] = (dcps_group_opt_t){real(w[0]), real(w[1])};
        if (bad_option(&g->opt[j]))
            goto bad;
    }
    size_t at = 0;
    for (size_t j = 0; j < g->n_segs; j++, w += 3) {
        if (w[0] != at || w[1] <= w[0] || w[1] > n || w[2] >= g->n_groups)
            goto bad;
        g->seg[j] = (dcps_group_seg_t){(size_t)w[0], (size_t)w[1], (uint32_t)w[2]};
        at = (size_t)w[1];
    }
    if (at != n)
        goto bad;
    *used = (size_t)(w - words);
    *err = 0;
    return g;

bad:
    dcps_groups_destroy(&g);
    dcps_say(why, whylen, DCPS_E_DATA, "its group table is not one for this shard's range");
    return NULL;
}

void dcps_groups_destroy(dcps_groups_t **gp)
{
    dcps_groups_t *g = *gp;
    if (!g)
        return;
    free(g->opt);
    free(g->seg);
    free(g);
    *gp = NULL;
}
