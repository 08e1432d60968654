/* dcps — the agreement of a sync job's shards on each round's members; see
 * rounds.h. */
#include "server/rounds.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"

int dcps_rounds_init(dcps_rounds_t *t, int shards, int workers)
{
    *t = (dcps_rounds_t){.shards = shards, .workers = workers};
    t->round = calloc((size_t)shards, sizeof *t->round);
    t->reported = calloc((size_t)shards, sizeof *t->reported);
    t->held = calloc((size_t)shards * (size_t)workers, sizeof *t->held);
    t->heard = calloc((size_t)shards, sizeof *t->heard);
    t->members = calloc((size_t)workers, sizeof *t->members);
    t->running = calloc((size_t)shards, sizeof *t->running);
    t->generation = calloc((size_t)shards, sizeof *t->generation);
    t->offer_count = calloc((size_t)shards, sizeof *t->offer_count);
    t->offer_newest = calloc((size_t)shards, sizeof *t->offer_newest);
    if (!t->round || !t->reported || !t->held || !t->heard || !t->members || !t->running ||
        !t->offer_count || !t->offer_newest || !t->generation) {
        dcps_rounds_free(t);
        return DCPS_E_NOMEM;
    }
    return 0;
}

void dcps_rounds_free(dcps_rounds_t *t)
{
    free(t->round);
    free(t->reported);
    free(t->held);
    free(t->heard);
    free(t->members);
    free(t->running);
    free(t->generation);
    free(t->offer_count);
    free(t->offer_newest);
    memset(t, 0, sizeof *t);
}

void dcps_rounds_report(dcps_rounds_t *t, int shard, uint64_t round, const bool *held,
                        uint64_t newest, uint64_t generation, double now)
{
    t->offer_count[shard] = newest > 0;
    t->offer_newest[shard] = newest;
    t->generation[shard] = generation;
    memcpy(&t->held[(size_t)shard * (size_t)t->workers], held, (size_t)t->workers * sizeof *held);
    t->round[shard] = round;
    t->reported[shard] = true;
    t->running[shard] = true;
    t->heard[shard] = now;
}

void dcps_rounds_offer(dcps_rounds_t *t, int shard, size_t count, uint64_t newest,
                       uint64_t generation, double now)
{
    t->generation[shard] = generation;
    t->offer_count[shard] = count;
    t->offer_newest[shard] = newest;
    t->reported[shard] = true;
    t->running[shard] = false;
    t->heard[shard] = now;
}

bool dcps_rounds_restored(const dcps_rounds_t *t, uint64_t generation)
{
    for (int s = 1; s < t->shards; s++)
        if (!t->reported[s] || t->running[s] || t->generation[s] != generation)
            return false;
    return true;
}

uint64_t dcps_rounds_common(const dcps_rounds_t *t, uint64_t own)
{
    uint64_t common = own;
    for (int s = 1; s < t->shards; s++) {
        if (!t->reported[s])
            return 0;
        if (t->offer_newest[s] < common)
            common = t->offer_newest[s];
    }
    return common;
}

enum dcps_cut dcps_rounds_cut(const dcps_rounds_t *t, size_t count, uint64_t newest,
                              uint64_t *cut, int *shard)
{
    bool any = count > 0;
    int running = 0;
    *cut = newest;
    *shard = 0; /* the first without a checkpoint, if any */
    for (int s = 1; s < t->shards; s++) {
        if (!t->reported[s])
            return DCPS_CUT_WAIT;
        if (t->running[s] && !running)
            running = s;
        any |= t->offer_count[s] > 0;
        if (t->offer_count[s] == 0 && count > 0 && *shard == 0)
            *shard = s;
        if (t->offer_newest[s] < *cut)
            *cut = t->offer_newest[s];
    }
    if (!any) {
        *shard = running;
        return running ? DCPS_CUT_RUNNING : DCPS_CUT_FRESH;
    }
    return count == 0 || *shard != 0 ? DCPS_CUT_NONE : DCPS_CUT_AT;
}

/* Whether every shard holds rank i's push for round r (the leader: c). */
static bool held_everywhere(const dcps_rounds_t *t, const dcps_consistency_t *c, uint32_t i)
{
    if (!c->m[i].contributed)
        return false;
    for (int s = 1; s < t->shards; s++)
        if (!t->reported[s] || t->round[s] != c->round ||
            !t->held[(size_t)s * (size_t)t->workers + i])
            return false;
    return true;
}

bool dcps_rounds_decide(const dcps_rounds_t *t, const dcps_consistency_t *c, bool *members)
{
    bool any = false;
    for (uint32_t i = 0; i < (uint32_t)t->workers; i++) {
        members[i] = held_everywhere(t, c, i);
        if (!members[i] && dcps_consistency_counted(c, i))
            return false;
        any |= members[i];
    }
    return any;
}

void dcps_rounds_closed(dcps_rounds_t *t, uint64_t round, const bool *members, double lr,
                        bool checkpoint)
{
    t->closed_any = true;
    t->closed = round;
    memcpy(t->members, members, (size_t)t->workers * sizeof *members);
    t->lr = lr;
    t->checkpoint = checkpoint;
}

int dcps_rounds_waiting_for(const dcps_rounds_t *t, uint64_t round, double now, double *silent)
{
    for (int s = 1; s < t->shards; s++)
        if (!t->reported[s] || t->round[s] != round) {
            *silent = t->reported[s] ? now - t->heard[s] : -1;
            return s;
        }
    return -1;
}

/* Folds the 8 bytes of x into h. */
static uint64_t fold(uint64_t h, uint64_t x)
{
    for (int b = 0; b < 8; b++)
        h = (h ^ (x >> (8 * b) & 0xff)) * 1099511628211ull;
    return h;
}

void dcps_rounds_digest(uint64_t *d, uint64_t round, const bool *members, int workers,
                        double lr)
{
    uint64_t h = fold(*d ? *d : 14695981039346656037ull, round), bits;
    memcpy(&bits, &lr, sizeof bits);
    h = fold(h, bits);
    for (int i = 0; i < workers; i++)
        h = (h ^ (members[i] ? 1u : 2u)) * 1099511628211ull;
    *d = h;
}
