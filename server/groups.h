/* dcps — parameter groups: per-range options of the update rule.
 *
 * A job may split the model into groups, as torch.optim's param_groups do,
 * each with its own weight decay and a factor of the learning rate (the
 * shard's lr, which the schedule scales, times lr_factor). The table is given
 * over the model's flat order (docs/protocol.md, "Parameter groups"): ranges
 * [lo, hi) that tile [0, n_params), sorted, each naming a group, and per group
 * its (lr_factor, weight_decay). On the wire a range is its end and group,
 * (hi, group) in a uint32 pair: the first starts at 0, each next one where the
 * last ended.
 *
 * This module owns one shard's part of a table: the options of every group
 * (they are few, and a rank's table is compared group by group) and the
 * segments of the table inside the shard's range [lo, hi), in local offsets.
 * It parses and checks a table that came from the network or a checkpoint,
 * compares two, and saves one as 64-bit words. It applies nothing: the shard
 * (server/shard.c) runs its rule once per segment with the group's options. */
#ifndef DCPS_GROUPS_H
#define DCPS_GROUPS_H

#include <stddef.h>
#include <stdint.h>

#include "common/shardmap.h"

/* Bounds of a table: groups and ranges (a range per parameter tensor at
 * most, adjacent tensors of one group merged), and the options' ranges:
 * weight_decay as [optimizer] weight_decay's, lr_factor in (0, 1000]. */
#define DCPS_GROUPS_MAX 1024
#define DCPS_GROUP_RANGES_MAX 8192
#define DCPS_GROUP_LR_FACTOR_MAX 1000.0
#define DCPS_GROUP_WEIGHT_DECAY_MAX 1.0

typedef struct {
    double lr_factor;    /* the group's lr is the shard's times this */
    double weight_decay; /* the rule's weight decay for the group */
} dcps_group_opt_t;

typedef struct {
    size_t lo, hi;  /* local offsets in the shard's range: [lo, hi) */
    uint32_t group; /* index into opt */
} dcps_group_seg_t;

typedef struct {
    uint32_t n_groups;
    dcps_group_opt_t *opt; /* n_groups */
    size_t n_segs;
    dcps_group_seg_t *seg; /* n_segs, tiling [0, hi − lo) of the shard in order */
} dcps_groups_t;

/* Parses a table: n_ranges (hi, group) pairs in `ranges` and n_groups
 * (lr_factor, weight_decay) pairs in `opts`, for a model of n_params, keeping
 * the part of the shard's range `mine`. Checks that there are 1 to
 * DCPS_GROUPS_MAX groups and 1 to DCPS_GROUP_RANGES_MAX ranges, that the ends
 * ascend strictly and the last is n_params (the ranges tile the model), that
 * every range names a group of the table, and that every option is finite and
 * in its bounds. Returns the table, or NULL with DCPS_E_FIELD (a table that
 * breaks one of those, with a sentence naming the range or group) or
 * DCPS_E_NOMEM in *err and the sentence in why. */
dcps_groups_t *dcps_groups_parse(const uint32_t *ranges, size_t n_ranges, const double *opts,
                                 size_t n_groups, uint64_t n_params, dcps_range_t mine, int *err,
                                 char *why, size_t whylen);

/* Compares a rank's table (`theirs`, parsed for the same shard; NULL: it gave
 * none) with the job's (`job`, rank 0's; NULL: the job has none). Returns 0 if
 * they are equal, else DCPS_E_FIELD with a sentence naming the first group
 * that differs and how: the count of groups, then each group's options in
 * index order, then the first parameter of this shard's range whose group
 * differs. */
int dcps_groups_compare(const dcps_groups_t *job, const dcps_groups_t *theirs, uint32_t rank,
                        char *why, size_t whylen);

/* The 64-bit words dcps_groups_save writes: n_groups, n_segs, each group's two
 * options (the doubles' bits), each segment's lo, hi and group. */
size_t dcps_groups_words(const dcps_groups_t *g);
void dcps_groups_save(const dcps_groups_t *g, uint64_t *words);

/* Reads what dcps_groups_save wrote for a shard of n parameters (n_words
 * available): the table, or NULL with DCPS_E_DATA (words that are no such
 * table: counts, bounds, segments that do not tile [0, n)) or DCPS_E_NOMEM in
 * *err and a sentence in why. *used gets the words it read. */
dcps_groups_t *dcps_groups_load(const uint64_t *words, size_t n_words, size_t n, size_t *used,
                                int *err, char *why, size_t whylen);

void dcps_groups_destroy(dcps_groups_t **g);

#endif
