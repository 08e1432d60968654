/* dcps — a rank's push in parts (docs/protocol.md, section 17).
 *
 * A push may come as n parts (1 ≤ n ≤ DCPS_PARTS_MAX), each its own PUSH message
 * covering a contiguous sub-range of the shard's range. Part i of a push carries
 * the sequence number base + i, so that a shard tells every part of one push,
 * and a retry of any of them, by its seq alone. The parts of a push do not
 * overlap and, once all have come, cover the shard's whole range. A push sent
 * whole is one part covering the range (what every message without part fields
 * is).
 *
 * This module is the record of a rank's latest push and its rules, nothing else:
 * which parts came and what became of each (applied, or added to a sync round;
 * or dropped as STALE), so that a retried part is answered as it was the first
 * time and a malformed part is refused before anything of it is used. The
 * router (server/router.c) keeps one record per rank, reset when a new session
 * binds the rank; applying a part is the shard's (server/shard.h). Records are
 * not saved in checkpoints: a shard restored from one knows a session's last
 * push by its seq alone (server/session.h). */
#ifndef DCPS_PARTS_H
#define DCPS_PARTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/codec.h"

/* One part as received: the push it belongs to and the range it covers. A
 * message without part fields is part 0 of 1 covering [lo, hi) of the shard. */
typedef struct {
    uint64_t seq, step;
    uint32_t part, parts;
    uint64_t lo, hi; /* global */
    bool sparse;
    bool fields; /* the message had part fields (else: a push sent whole) */
} dcps_part_t;

/* A rank's latest push: the push its last new part belonged to. */
typedef struct {
    bool any;      /* a push was recorded since the record was reset */
    uint64_t base; /* seq of its part 0 */
    uint64_t step;
    uint32_t parts;
    bool sparse;
    uint64_t applied; /* bit i: part i applied (or added to the open sync round) */
    uint64_t dropped; /* bit i: part i dropped (STALE) */
    uint64_t covered; /* parameters its parts cover so far */
    uint64_t lo[DCPS_PARTS_MAX], hi[DCPS_PARTS_MAX];
} dcps_parts_t;

/* What a part is to the rank's record. */
enum dcps_part_verdict {
    DCPS_PART_OTHER = 0, /* not of the latest push: the session's rules decide */
    DCPS_PART_NEW,       /* a part of the latest push that has not come yet */
    DCPS_PART_APPLIED,   /* a retry of a part that was applied: DUPLICATE */
    DCPS_PART_DROPPED,   /* a retry of a part that was dropped: STALE again */
};

/* The part that message m (a PUSH whose header fields passed
 * dcps_codec_check_fields) is, on a shard of range [lo, hi). */
dcps_part_t dcps_part_of(const dcps_msg_t *m, uint64_t lo, uint64_t hi);

/* Forgets the record (a new session). */
void dcps_parts_reset(dcps_parts_t *p);

/* Whether the latest push has parts that have not come. */
bool dcps_parts_open(const dcps_parts_t *p);

/* The verdict on part q. A push sent whole without part fields is always
 * OTHER: its seq alone decides, by the session's rules, as in protocol 2. A
 * part whose seq falls among the latest push's seqs
 * but names another part index, another part count, step or shape is refused
 * here: returns DCPS_E_FIELD with a sentence in why. Else the verdict (≥ 0). */
int dcps_parts_verdict(const dcps_parts_t *p, const dcps_part_t *q, char *why, size_t whylen);

/* Checks a part that is NEW or OTHER before anything of it is used: a NEW part
 * must not overlap a part that came, and the last part to come must leave the
 * push covering the whole range (n parameters); an OTHER part must start a push
 * whose seqs all follow the latest push's, and may not be a second push for
 * the step of an incomplete one. Returns 0 or DCPS_E_FIELD with a sentence. */
int dcps_parts_check(const dcps_parts_t *p, const dcps_part_t *q, uint64_t n, char *why,
                     size_t whylen);

/* Whether part q (checked, NEW or OTHER) is the last of its push to come. */
bool dcps_parts_completes(const dcps_parts_t *p, const dcps_part_t *q);

/* Records part q (checked) as applied or dropped; an OTHER part starts a new
 * latest push (the incomplete one before it, if any, stays as it is: its parts
 * that came were applied, the others never will be). Returns whether every part
 * of the push has now come. */
bool dcps_parts_record(dcps_parts_t *p, const dcps_part_t *q, bool applied);

/* Marks every applied part of an incomplete latest push dropped (sync: its
 * round closed without the rank, and they were taken back out of the sum). */
void dcps_parts_drop_open(dcps_parts_t *p);

/* Async, ssp: what came of a rank's push in parts whose session ended before
 * its other parts came (a worker killed between them and started again). The
 * ranges its parts covered were applied; the new session, whose WELCOME step is
 * still that push's step, pushes the step again, and the shard applies that
 * push only over the rest, so that every parameter takes exactly one gradient
 * of the step (docs/protocol.md, 17). Ranges ascending and apart. */
#define DCPS_CARRIED_MAX (2 * DCPS_PARTS_MAX)
typedef struct {
    bool any;
    uint64_t step;
    uint32_t n;
    uint64_t lo[DCPS_CARRIED_MAX], hi[DCPS_CARRIED_MAX]; /* global */
} dcps_carried_t;

/* At a new session of the rank: adds what came of p's latest push, if it has
 * parts to come, to c (which then holds that push's step: a record of another
 * step is dropped first). Returns false, and c forgets everything, when the
 * ranges do not fit (more than DCPS_CARRIED_MAX apart: the parts that came then
 * count again). */
bool dcps_carried_take(dcps_carried_t *c, const dcps_parts_t *p);

/* The ranges of [lo, hi) that c does not cover, ascending, into rest_lo and
 * rest_hi (room for DCPS_CARRIED_MAX + 1 each); returns how many. */
size_t dcps_carried_rest(const dcps_carried_t *c, uint64_t lo, uint64_t hi, uint64_t *rest_lo,
                         uint64_t *rest_hi);

/* A rank's two records in a checkpoint (server/checkpoint.h), in 8-byte words:
 * a word of flags (1: a latest push, 2: it is sparse, 4: a carried push; the
 * latest push's part count in bits 8 to 15); with a latest push, its base, step,
 * applied and dropped bits, covered count, then [lo, hi) of each part that came,
 * in part order; with a carried push, its step, its range count, then the
 * ranges. At most DCPS_PARTS_WORDS_MAX words. */
#define DCPS_PARTS_WORDS_MAX (1 + 5 + 2 * DCPS_PARTS_MAX + 2 + 2 * DCPS_CARRIED_MAX)
size_t dcps_parts_words(const dcps_parts_t *p, const dcps_carried_t *c);
void dcps_parts_save(const dcps_parts_t *p, const dcps_carried_t *c, uint64_t *w);

/* Reads a rank's records saved by dcps_parts_save from the `words` words at w,
 * for a shard of the range [lo, hi); *used: the words they took. Returns 0, or
 * 1 with a sentence in why if they are not records of such a shard (p and c
 * then hold what was read so far: dcps_shard_parts_load forgets every rank's). */
int dcps_parts_load(dcps_parts_t *p, dcps_carried_t *c, uint64_t lo, uint64_t hi,
                    const uint64_t *w, size_t words, size_t *used, char *why, size_t whylen);

#endif
