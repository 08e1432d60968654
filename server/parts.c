/* dcps — a rank's push in parts; see parts.h. */
#include "server/parts.h"

#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"

dcps_part_t dcps_part_of(const dcps_msg_t *m, uint64_t lo, uint64_t hi)
{
    dcps_part_t q = {.seq = m->seq,
                     .step = m->step,
                     .part = 0,
                     .parts = 1,
                     .lo = lo,
                     .hi = hi,
                     .sparse = m->nframes == 2};
    if (m->has & DCPS_HAS_PART) {
        q.part = m->part;
        q.parts = m->parts;
        q.lo = m->part_lo;
        q.hi = m->part_hi;
        q.fields = true;
    }
    return q;
}

void dcps_parts_reset(dcps_parts_t *p)
{
    memset(p, 0, sizeof *p);
}

static uint64_t all(uint32_t parts)
{
    return parts >= 64 ? ~0ull : (1ull << parts) - 1;
}

bool dcps_parts_open(const dcps_parts_t *p)
{
    return p->any && ((p->applied | p->dropped) & all(p->parts)) != all(p->parts);
}

/* Whether seq is one of the latest push's. */
static bool ours(const dcps_parts_t *p, uint64_t seq)
{
    return p->any && seq >= p->base && seq - p->base < p->parts;
}

int dcps_parts_verdict(const dcps_parts_t *p, const dcps_part_t *q, char *why, size_t whylen)
{
    if (!q->fields || !ours(p, q->seq))
        return DCPS_PART_OTHER;
    const uint64_t i = q->seq - p->base;
    if (q->part != i || q->parts != p->parts || q->step != p->step || q->sparse != p->sparse)
        return dcps_say(why, whylen, DCPS_E_FIELD,
                        "seq %llu is part %llu of the push of step %llu in %u %s parts from seq "
                        "%llu, this message says part %u of %u of step %llu, %s",
                        (unsigned long long)q->seq, (unsigned long long)i,
                        (unsigned long long)p->step, p->parts, p->sparse ? "sparse" : "dense",
                        (unsigned long long)p->base, q->part, q->parts, (unsigned long long)q->step,
                        q->sparse ? "sparse" : "dense");
    if (p->applied >> i & 1)
        return DCPS_PART_APPLIED;
    if (p->dropped >> i & 1)
        return DCPS_PART_DROPPED;
    return DCPS_PART_NEW;
}

int dcps_parts_check(const dcps_parts_t *p, const dcps_part_t *q, uint64_t n, char *why,
                     size_t whylen)
{
    if (!q->fields || !ours(p, q->seq)) {
        /* A new push: its part 0's seq and all its others after the latest's. */
        if (q->fields && (q->seq < q->part || (p->any && q->seq - q->part < p->base + p->parts)))
            return dcps_say(why, whylen, DCPS_E_FIELD,
                            "part %u with seq %llu would make seq %llu its push's part 0, which "
                            "is not after the latest push's seqs (%llu to %llu)",
                            q->part, (unsigned long long)q->seq,
                            (unsigned long long)(q->seq - q->part), (unsigned long long)p->base,
                            (unsigned long long)(p->base + p->parts - 1));
        if (dcps_parts_open(p) && q->step == p->step)
            return dcps_say(why, whylen, DCPS_E_FIELD,
                            "a second push for step %llu while its push in %u parts from seq "
                            "%llu has parts to come",
                            (unsigned long long)q->step, p->parts, (unsigned long long)p->base);
        if (q->parts == 1 && q->hi - q->lo != n)
            return dcps_say(why, whylen, DCPS_E_FIELD,
                            "a push in 1 part covers [%llu, %llu), not the shard's %llu "
                            "parameters",
                            (unsigned long long)q->lo, (unsigned long long)q->hi,
                            (unsigned long long)n);
        return 0;
    }
    const uint64_t came = p->applied | p->dropped;
    for (uint32_t i = 0; i < p->parts; i++)
        if ((came >> i & 1) && q->lo < p->hi[i] && p->lo[i] < q->hi)
            return dcps_say(why, whylen, DCPS_E_FIELD,
                            "part %u covers [%llu, %llu), which overlaps part %u's [%llu, %llu)",
                            q->part, (unsigned long long)q->lo, (unsigned long long)q->hi, i,
                            (unsigned long long)p->lo[i], (unsigned long long)p->hi[i]);
    if (dcps_parts_completes(p, q) && p->covered + (q->hi - q->lo) != n)
        return dcps_say(why, whylen, DCPS_E_FIELD,
                        "the %u parts of the push from seq %llu cover %llu of the shard's %llu "
                        "parameters",
                        p->parts, (unsigned long long)p->base,
                        (unsigned long long)(p->covered + (q->hi - q->lo)), (unsigned long long)n);
    return 0;
}

bool dcps_parts_completes(const dcps_parts_t *p, const dcps_part_t *q)
{
    if (!q->fields || !ours(p, q->seq))
        return q->parts == 1;
    return ((p->applied | p->dropped) | 1ull << q->part) == all(p->parts);
}

bool dcps_parts_record(dcps_parts_t *p, const dcps_part_t *q, bool applied)
{
    if (!q->fields || !ours(p, q->seq)) {
        dcps_parts_reset(p);
        p->any = true;
        p->base = q->seq - q->part;
        p->step = q->step;
        p->parts = q->parts;
        p->sparse = q->sparse;
    }
    p->lo[q->part] = q->lo;
    p->hi[q->part] = q->hi;
    p->covered += q->hi - q->lo;
    if (applied)
        p->applied |= 1ull << q->part;
    else
        p->dropped |= 1ull << q->part;
    return !dcps_parts_open(p);
}

void dcps_parts_drop_open(dcps_parts_t *p)
{
    if (!dcps_parts_open(p))
        return;
    p->dropped |= p->applied;
    p->applied = 0;
}

/* Adds [lo, hi) to c's ranges, joining those it overlaps or touches. */
static bool carry(dcps_carried_t *c, uint64_t lo, uint64_t hi)
{
    uint32_t i = 0, j;
    while (i < c->n && c->hi[i] < lo)
        i++;
    for (j = i; j < c->n && c->lo[j] <= hi; j++) {
        lo = c->lo[j] < lo ? c->lo[j] : lo;
        hi = c->hi[j] > hi ? c->hi[j] : hi;
    }
    if (i == j && c->n == DCPS_CARRIED_MAX)
        return false;
    /* [lo, hi) replaces ranges i .. j − 1 (none: it goes in before range i). */
    memmove(c->lo + i + 1, c->lo + j, (c->n - j) * sizeof *c->lo);
    memmove(c->hi + i + 1, c->hi + j, (c->n - j) * sizeof *c->hi);
    c->lo[i] = lo;
    c->hi[i] = hi;
    c->n = c->n - (j - i) + 1;
    return true;
}

bool dcps_carried_take(dcps_carried_t *c, const dcps_parts_t *p)
{
    if (!dcps_parts_open(p))
        return true;
    if (c->any && c->step != p->step)
        memset(c, 0, sizeof *c);
    c->any = true;
    c->step = p->step;
    for (uint32_t i = 0; i < p->parts; i++)
        if ((p->applied >> i & 1) && !carry(c, p->lo[i], p->hi[i])) {
            memset(c, 0, sizeof *c);
            return false;
        }
    return true;
}

size_t dcps_carried_rest(const dcps_carried_t *c, uint64_t lo, uint64_t hi, uint64_t *rest_lo,
                         uint64_t *rest_hi)
{
    size_t n = 0;
    uint64_t at = lo;
    for (uint32_t i = 0; i < c->n && c->lo[i] < hi; i++) {
        if (c->lo[i] > at)
            rest_lo[n] = at, rest_hi[n++] = c->lo[i];
        if (c->hi[i] > at)
            at = c->hi[i];
    }
    if (at < hi)
        rest_lo[n] = at, rest_hi[n++] = hi;
    return n;
}

#define SAVED_LATEST 1u
#define SAVED_SPARSE 2u
#define SAVED_CARRIED 4u

size_t dcps_parts_words(const dcps_parts_t *p, const dcps_carried_t *c)
{
    size_t n = 1;
    if (p->any)
        n += 5 + 2 * (size_t)__builtin_popcountll((p->applied | p->dropped) & all(p->parts));
    if (c->any)
        n += 2 + 2 * (size_t)c->n;
    return n;
}

void dcps_parts_save(const dcps_parts_t *p, const dcps_carried_t *c, uint64_t *w)
{
    *w++ = (p->any ? SAVED_LATEST | (p->sparse ? SAVED_SPARSE : 0) | (uint64_t)p->parts << 8 : 0) |
           (c->any ? SAVED_CARRIED : 0);
    if (p->any) {
        const uint64_t came = (p->applied | p->dropped) & all(p->parts);
        *w++ = p->base, *w++ = p->step, *w++ = p->applied, *w++ = p->dropped, *w++ = p->covered;
        for (uint32_t i = 0; i < p->parts; i++)
            if (came >> i & 1)
                *w++ = p->lo[i], *w++ = p->hi[i];
    }
    if (c->any) {
        *w++ = c->step, *w++ = c->n;
        for (uint32_t i = 0; i < c->n; i++)
            *w++ = c->lo[i], *w++ = c->hi[i];
    }
}

/* Whether [a, b) is a nonempty range inside [lo, hi). */
static bool inside(uint64_t a, uint64_t b, uint64_t lo, uint64_t hi)
{
    return lo <= a && a < b && b <= hi;
}

static int bad(char *why, size_t whylen, const char *what)
{
    snprintf(why, whylen, "its record of a push in parts %s", what);
    return 1;
}

int dcps_parts_load(dcps_parts_t *p, dcps_carried_t *c, uint64_t lo, uint64_t hi, const uint64_t *w,
                    size_t words, size_t *used, char *why, size_t whylen)
{
    const uint64_t *const start = w, *const end = w + words;
    memset(p, 0, sizeof *p);
    memset(c, 0, sizeof *c);
    if (words < 1 || w[0] >> 16 || (w[0] & 0xf8))
        return bad(why, whylen, "has unknown flags");
    const uint64_t flags = *w++;
    if (!(flags & SAVED_LATEST) && (flags & (0xff00 | SAVED_SPARSE)))
        return bad(why, whylen, "has unknown flags");
    if (flags & SAVED_LATEST) {
        p->any = true;
        p->sparse = (flags & SAVED_SPARSE) != 0;
        p->parts = (uint32_t)(flags >> 8 & 0xff);
        if (p->parts < 1 || p->parts > DCPS_PARTS_MAX || end - w < 5)
            return bad(why, whylen, "does not fit the file");
        p->base = *w++, p->step = *w++, p->applied = *w++, p->dropped = *w++;
        const uint64_t covered = *w++;
        if ((p->applied & p->dropped) || ((p->applied | p->dropped) & ~all(p->parts)))
            return bad(why, whylen, "marks a part both applied and dropped, or past its count");
        for (uint32_t i = 0; i < p->parts; i++) {
            if (!((p->applied | p->dropped) >> i & 1))
                continue;
            if (end - w < 2 || !inside(w[0], w[1], lo, hi))
                return bad(why, whylen, "has a part outside the shard's range");
            p->lo[i] = *w++, p->hi[i] = *w++;
            for (uint32_t j = 0; j < i; j++)
                if (((p->applied | p->dropped) >> j & 1) && p->lo[i] < p->hi[j] &&
                    p->lo[j] < p->hi[i])
                    return bad(why, whylen, "has parts that overlap");
            p->covered += p->hi[i] - p->lo[i];
        }
        if (p->covered != covered)
            return bad(why, whylen, "counts other parameters than its parts cover");
    }
    if (flags & SAVED_CARRIED) {
        if (end - w < 2 || w[1] > DCPS_CARRIED_MAX)
            return bad(why, whylen, "does not fit the file");
        c->any = true;
        c->step = *w++, c->n = (uint32_t)*w++;
        for (uint32_t i = 0; i < c->n; i++) {
            if (end - w < 2 || !inside(w[0], w[1], lo, hi) || (i > 0 && w[0] <= c->hi[i - 1]))
                return bad(why, whylen, "has ranges out of order or outside the shard's");
            c->lo[i] = *w++, c->hi[i] = *w++;
        }
    }
    *used = (size_t)(w - start);
    return 0;
}
