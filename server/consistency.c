/* dcps — a shard's view of the workers and its consistency model; see
 * consistency.h. */
#include "server/consistency.h"

#include <stdlib.h>

#include "common/config.h"
#include "common/error.h"

int dcps_consistency_init(dcps_consistency_t *c, int mode, int staleness, int workers,
                          int dead_after_ms, double now)
{
    *c = (dcps_consistency_t){.mode = mode, .staleness = staleness, .workers = workers,
                              .dead_after_ms = dead_after_ms};
    c->m = calloc((size_t)workers, sizeof *c->m);
    if (!c->m)
        return DCPS_E_NOMEM;
    dcps_consistency_start(c, now);
    return 0;
}

void dcps_consistency_free(dcps_consistency_t *c)
{
    free(c->m);
    c->m = NULL;
}

bool dcps_consistency_live(const dcps_consistency_t *c, uint32_t rank)
{
    return !c->m[rank].left && !c->m[rank].dead;
}

bool dcps_consistency_counted(const dcps_consistency_t *c, uint32_t rank)
{
    return dcps_consistency_live(c, rank) && !c->m[rank].done;
}

int dcps_consistency_joined(const dcps_consistency_t *c)
{
    int n = 0;
    for (int i = 0; i < c->workers; i++)
        n += c->m[i].joined && dcps_consistency_live(c, (uint32_t)i);
    return n;
}

bool dcps_consistency_heard(dcps_consistency_t *c, uint32_t rank, double now)
{
    dcps_member_t *m = &c->m[rank];
    bool back = m->dead;
    m->dead = false;
    m->last_seen = now;
    return back;
}

void dcps_consistency_join(dcps_consistency_t *c, uint32_t rank)
{
    c->m[rank].joined = true;
    c->m[rank].left = false;
}

void dcps_consistency_leave(dcps_consistency_t *c, uint32_t rank)
{
    c->m[rank].joined = false;
    c->m[rank].left = true;
}

void dcps_consistency_done(dcps_consistency_t *c, uint32_t rank)
{
    c->m[rank].done = true;
}

void dcps_consistency_start(dcps_consistency_t *c, double now)
{
    for (int i = 0; i < c->workers; i++)
        if (!c->m[i].joined) {
            c->m[i].dead = c->m[i].left = false;
            c->m[i].last_seen = now;
        }
}

void dcps_consistency_paused(dcps_consistency_t *c, double ms)
{
    for (int i = 0; i < c->workers; i++)
        c->m[i].last_seen += ms;
}

int dcps_consistency_reap(dcps_consistency_t *c, double now)
{
    for (int i = 0; i < c->workers; i++) {
        dcps_member_t *m = &c->m[i];
        if (dcps_consistency_live(c, (uint32_t)i) && now - m->last_seen > c->dead_after_ms) {
            m->dead = true;
            return i;
        }
    }
    return -1;
}

enum dcps_push_verdict dcps_consistency_check_push(const dcps_consistency_t *c, uint32_t rank,
                                                   uint64_t step)
{
    if (c->mode != DCPS_MODE_SYNC)
        return step < c->m[rank].clock ? DCPS_PUSH_DONE : DCPS_PUSH_ACCEPT;
    if (step < c->round)
        return DCPS_PUSH_STALE;
    if (step > c->round)
        return DCPS_PUSH_FUTURE;
    return c->m[rank].contributed ? DCPS_PUSH_AGAIN : DCPS_PUSH_ACCEPT;
}

void dcps_consistency_pushed(dcps_consistency_t *c, uint32_t rank, uint64_t step)
{
    dcps_member_t *m = &c->m[rank];
    if (step + 1 > m->clock)
        m->clock = step + 1;
    if (c->mode == DCPS_MODE_SYNC && !m->contributed) {
        m->contributed = true;
        c->contributions++;
    }
}

bool dcps_consistency_round_full(const dcps_consistency_t *c)
{
    if (c->mode != DCPS_MODE_SYNC)
        return false;
    bool any = false;
    for (uint32_t i = 0; i < (uint32_t)c->workers; i++) {
        if (dcps_consistency_counted(c, i) && !c->m[i].contributed)
            return false;
        any |= c->m[i].contributed;
    }
    return any;
}

void dcps_consistency_close_round(dcps_consistency_t *c)
{
    for (int i = 0; i < c->workers; i++)
        c->m[i].contributed = false;
    c->contributions = 0;
    c->round++;
}

void dcps_consistency_open_round(dcps_consistency_t *c, uint64_t round)
{
    for (int i = 0; i < c->workers; i++)
        c->m[i].contributed = false;
    c->contributions = 0;
    c->round = round;
}

bool dcps_consistency_may_start(dcps_consistency_t *c, uint32_t rank, uint64_t step)
{
    switch (c->mode) {
    case DCPS_MODE_SYNC:
        return step <= c->round;
    case DCPS_MODE_SSP: {
        uint64_t slowest = UINT64_MAX;
        for (uint32_t i = 0; i < (uint32_t)c->workers; i++)
            if (i != rank && dcps_consistency_counted(c, i) && c->m[i].clock < slowest)
                slowest = c->m[i].clock;
        if (slowest == UINT64_MAX || step <= slowest)
            return true;
        if (step - slowest > (uint64_t)c->staleness)
            return false;
        if (step - slowest > c->max_ahead)
            c->max_ahead = step - slowest;
        return true;
    }
    default:
        return true;
    }
}

bool dcps_consistency_catch_up(dcps_consistency_t *c, uint32_t rank, uint64_t step, bool pull)
{
    dcps_member_t *m = &c->m[rank];
    if (c->mode == DCPS_MODE_SSP) {
        if (!pull || step <= m->clock)
            return false;
        m->clock = step;
        return true;
    }
    if (c->mode != DCPS_MODE_SYNC || (pull && step == 0))
        return false;
    uint64_t open = pull ? step - 1 : step;
    bool changed = false;
    if (open > c->round) {
        dcps_consistency_open_round(c, open);
        changed = true;
    }
    if (pull && open == c->round && !m->contributed) {
        m->contributed = true; /* counted, but nothing of it is in the round's sum */
        changed = true;
    }
    return changed;
}

uint64_t dcps_consistency_next_step(const dcps_consistency_t *c, uint32_t rank)
{
    switch (c->mode) {
    case DCPS_MODE_SYNC:
        return c->round;
    default: /* async and ssp: where it left off (a restarted worker resumes) */
        return c->m[rank].clock;
    }
}

void dcps_consistency_save(const dcps_consistency_t *c, uint64_t *words)
{
    *words++ = c->round;
    *words++ = (uint64_t)c->contributions;
    *words++ = c->max_ahead;
    for (int r = 0; r < c->workers; r++) {
        *words++ = c->m[r].clock;
        *words++ = c->m[r].contributed;
    }
}

void dcps_consistency_load(dcps_consistency_t *c, const uint64_t *words)
{
    c->round = *words++;
    c->contributions = (int)*words++;
    c->max_ahead = *words++;
    for (int r = 0; r < c->workers; r++) {
        c->m[r].clock = *words++;
        c->m[r].contributed = *words++ != 0;
    }
}
