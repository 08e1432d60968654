/* dcps — the agreement of a sync job's shards on each round's members.
 *
 * Each shard holds one part of the model, and every worker pushes its part of
 * step r to each of them. In sync mode a shard applies round r's mean once it
 * has a push of every counted worker (server/consistency.h); but which workers
 * are counted is each shard's own view (who it heard from lately), and a worker
 * stalled or killed between its sends to two shards leaves one holding its push
 * and the other not. Shards that decided alone split rounds: the same round
 * applied with different members on different parts of the model, or a round
 * one shard closed and another waits for forever (docs/algorithms.md, "Rounds
 * every shard agrees on").
 *
 * So with more than one shard, shard 0 decides for all (the leader). The others
 * (followers) never close a round on their own view: each tells the leader
 * which ranks' pushes it holds for its open round (ROUND messages on a link of
 * their own, docs/protocol.md §15), and applies a round when the leader says
 * which ranks it has. The leader's rule for round r: a rank is a member when
 * every shard holds its push (the leader too); the round closes when every rank
 * the leader counts (server/consistency.h: live, not done) is a member, and at
 * least one rank is. A rank that is not counted (declared dead, gone) and is not
 * held everywhere is left out; any shard holding its push takes it back out of
 * the round's sum. As every shard applies exactly the leader's members, and the
 * leader names only pushes every shard holds, no round is split; as a rank the
 * leader does not count never holds a round up, and a follower waits only for
 * the leader's word, no round waits forever for a worker.
 *
 * Plain bookkeeping, as consistency.h is: the router (router.h) does the
 * talking and the applying. */
#ifndef DCPS_ROUNDS_H
#define DCPS_ROUNDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/consistency.h"

typedef struct {
    int shards;  /* in the job; the leader is shard 0 */
    int workers; /* ranks */
    /* The leader's view of each follower (index 1 .. shards − 1; 0 unused). */
    uint64_t *round;  /* per shard: the open round it last reported */
    bool *reported;   /* per shard: it has reported since this leader started */
    bool *held;       /* shards × workers: shard s holds rank i's push for round[s] */
    double *heard;    /* per shard: when it last reported (ms) */
    bool *running;    /* per shard: its last report was of a running shard, not an offer */
    uint64_t *generation; /* per shard: the leader's restore decision it last carried out */
    size_t *offer_count;   /* per shard: its checkpoints (running: 1 if it wrote one) */
    uint64_t *offer_newest; /* per shard: its newest checkpoint's version (offers and
                               reports; 0: none) */
    /* The last round the leader closed, for followers that have not applied it. */
    bool closed_any;
    uint64_t closed;  /* its number */
    bool *members;    /* workers: its members */
    double lr;        /* the lr base it was closed with */
    bool checkpoint;  /* whether shards checkpoint after applying it */
} dcps_rounds_t;

/* Sets up the leader's table for shards and workers. Returns 0 or DCPS_E_NOMEM. */
int dcps_rounds_init(dcps_rounds_t *t, int shards, int workers);
void dcps_rounds_free(dcps_rounds_t *t);

/* Follower `shard` reports at now that its open round is `round`, that it
 * holds the pushes of the ranks set in held (workers entries) for it, that
 * its newest checkpoint is of version `newest` (0: none), and that it runs
 * since the leader's restore decision `generation` (0: none). */
void dcps_rounds_report(dcps_rounds_t *t, int shard, uint64_t round, const bool *held,
                        uint64_t newest, uint64_t generation, double now);

/* The newest checkpoint version every shard holds, as far as the leader knows:
 * the oldest of the shards' newest (the leader's own is `own`), since every
 * shard checkpoints after the same rounds and none removes its checkpoint of
 * this version (docs/algorithms.md, "Restarts"). 0 while a follower has not
 * reported or a shard holds none. */
uint64_t dcps_rounds_common(const dcps_rounds_t *t, uint64_t own);

/* Follower `shard` does not serve workers: it offers its checkpoints (count
 * of them, the newest one's version), having carried out the leader's restore
 * decision `generation` last (0: none; the current one: it waits for the word
 * to serve). */
void dcps_rounds_offer(dcps_rounds_t *t, int shard, size_t count, uint64_t newest,
                       uint64_t generation, double now);

/* Whether every follower has carried out restore decision `generation` and
 * waits for the word to serve. */
bool dcps_rounds_restored(const dcps_rounds_t *t, uint64_t generation);

/* Where a sync job's shards resume (docs/algorithms.md): the leader, holding
 * count checkpoints whose newest is of version newest, at start or when a
 * shard restarted alone; followers that run count with the newest checkpoint
 * they wrote. */
enum dcps_cut {
    DCPS_CUT_WAIT,    /* a follower has not reported yet */
    DCPS_CUT_FRESH,   /* no shard holds a checkpoint, none runs: every shard starts fresh */
    DCPS_CUT_AT,      /* every shard restores its checkpoint of version *cut, the
                         newest version all of them hold (the oldest newest) */
    DCPS_CUT_RUNNING, /* no shard holds a checkpoint while follower *shard runs: the
                         job cannot go back to a round every shard holds */
    DCPS_CUT_NONE,    /* shard *shard holds none while others do: no common round */
};
enum dcps_cut dcps_rounds_cut(const dcps_rounds_t *t, size_t count, uint64_t newest,
                              uint64_t *cut, int *shard);

/* The leader's decision on its open round c->round: whether it may close now,
 * and if so its members (members[rank], workers entries). The leader's own
 * holdings are c's contributed flags. */
bool dcps_rounds_decide(const dcps_rounds_t *t, const dcps_consistency_t *c, bool *members);

/* Remembers that the leader closed `round` with members, lr and checkpoint. */
void dcps_rounds_closed(dcps_rounds_t *t, uint64_t round, const bool *members, double lr,
                        bool checkpoint);

/* The first follower the open round `round` waits for (it has not reported that
 * round), with how long it has been silent at now; −1 if none. */
int dcps_rounds_waiting_for(const dcps_rounds_t *t, uint64_t round, double now, double *silent);

/* A digest of one closed round: its number, members and lr base, folded into
 * *d (FNV-1a). Shards that applied the same rounds with the same members at the
 * same lr have equal digests (each logs its own at exit). */
void dcps_rounds_digest(uint64_t *d, uint64_t round, const bool *members, int workers,
                        double lr);

#endif
