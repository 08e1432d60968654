/* dcps — a shard's view of the job's workers and its consistency model.
 *
 * For every worker rank this keeps whether it is in the job (joined, left, declared
 * dead, done with its batches), when it was last heard from, and its clock: how
 * many steps it has pushed. From that it decides, for the job's `[job] mode`
 * (docs/algorithms.md), which pushes belong to the open step and when a worker may start a
 * step:
 *   async  every push is applied at once; every step may start at once.
 *   sync   (BSP) the shard collects one push per counted worker for the open round
 *          r, applies their mean once, and only then lets step r + 1 start.
 *   ssp    pushes are applied at once; a worker may start step c once every other
 *          counted worker has pushed c − s steps (s = [job] staleness).
 * A worker is live unless it said BYE or was silent for dead_after_ms; it is
 * counted (waited for) while live and not done. Before rank 0 initialises the
 * parameters, or until the job's first dead_after_ms have passed, a rank that
 * has not joined yet is expected: live, so that the first rounds wait for it.
 *
 * Plain bookkeeping: no sockets, no clock of its own (callers pass now in ms), no
 * parameters. The router (router.h) calls it and does the talking. */
#ifndef DCPS_CONSISTENCY_H
#define DCPS_CONSISTENCY_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    bool joined; /* said HELLO (and not BYE since) */
    bool left;   /* said BYE */
    bool dead;   /* silent for dead_after_ms */
    bool done;   /* said DONE: no more pushes to wait for */
    bool contributed; /* sync: pushed for the open round */
    double last_seen; /* ms */
    uint64_t clock;   /* steps pushed: the last pushed step + 1 */
} dcps_member_t;

typedef struct {
    int mode; /* enum dcps_mode */
    int staleness;
    int workers;
    int dead_after_ms;
    uint64_t round;     /* sync: the step being collected */
    int contributions;  /* sync: pushes in the open round */
    uint64_t max_ahead; /* ssp: most steps a started step was ahead of the slowest */
    dcps_member_t *m;   /* one per rank */
} dcps_consistency_t;

/* What to do with a push for step `step`. */
enum dcps_push_verdict {
    DCPS_PUSH_ACCEPT = 0, /* apply (async, ssp) or add to the round (sync) */
    DCPS_PUSH_STALE,      /* sync: that round closed without it; drop, tell the worker */
    DCPS_PUSH_FUTURE,     /* sync: a step after the open round; refuse */
    DCPS_PUSH_AGAIN,      /* sync: a second, different push for the open round; refuse */
    DCPS_PUSH_DONE,       /* async, ssp: a step below the rank's clock, which it pushed
                             already (a restarted worker doing it again): not applied again */
};

/* Sets up cfg's workers, all expected from now. Returns 0 or DCPS_E_NOMEM. */
int dcps_consistency_init(dcps_consistency_t *c, int mode, int staleness, int workers,
                          int dead_after_ms, double now);
void dcps_consistency_free(dcps_consistency_t *c);

/* Live: not left, not dead. Counted: live and not done. */
bool dcps_consistency_live(const dcps_consistency_t *c, uint32_t rank);
bool dcps_consistency_counted(const dcps_consistency_t *c, uint32_t rank);

/* Workers that said HELLO and are live (not dead, no BYE): those connected now.
 * Unlike dcps_consistency_live it leaves out ranks only expected. */
int dcps_consistency_joined(const dcps_consistency_t *c);

/* Rank was heard from at now. Returns true if it had been declared dead (it is
 * live again: the caller logs its return). */
bool dcps_consistency_heard(dcps_consistency_t *c, uint32_t rank, double now);

/* HELLO, BYE and DONE from rank. */
void dcps_consistency_join(dcps_consistency_t *c, uint32_t rank);
void dcps_consistency_leave(dcps_consistency_t *c, uint32_t rank);
void dcps_consistency_done(dcps_consistency_t *c, uint32_t rank);

/* The job starts (rank 0 initialised the parameters): ranks that have not joined
 * are expected again, silent from now. */
void dcps_consistency_start(dcps_consistency_t *c, double now);

/* The shard itself did not run for `ms` (its loop was blocked: stopped, a
 * checkpoint written, the machine paused): that time is nobody's silence, so
 * every rank's last_seen moves forward by it. */
void dcps_consistency_paused(dcps_consistency_t *c, double ms);

/* Declares dead the next live rank silent for more than dead_after_ms at now and
 * returns it, or −1 if none is. Call until it returns −1. */
int dcps_consistency_reap(dcps_consistency_t *c, double now);

/* The verdict on a push from rank for step; does not record it. */
enum dcps_push_verdict dcps_consistency_check_push(const dcps_consistency_t *c, uint32_t rank,
                                                   uint64_t step);

/* Records an accepted push from rank for step (the clock; sync: the round). */
void dcps_consistency_pushed(dcps_consistency_t *c, uint32_t rank, uint64_t step);

/* Sync: whether every counted worker has pushed for the open round (and at least
 * one did, or counts as having pushed: see dcps_consistency_catch_up). Closing
 * it opens the next one; c->contributions says how many pushes it holds. */
bool dcps_consistency_round_full(const dcps_consistency_t *c);
void dcps_consistency_close_round(dcps_consistency_t *c);

/* Sync: opens `round` (later than the open one) at once, discarding the open
 * round's contributions: the job went on past them without this shard. */
void dcps_consistency_open_round(dcps_consistency_t *c, uint64_t round);

/* Whether rank may start step now (its pull can be answered). For ssp a granted
 * start updates max_ahead. */
bool dcps_consistency_may_start(dcps_consistency_t *c, uint32_t rank, uint64_t step);

/* After a restore from a checkpoint, what a request of rank shows of where the
 * job is: the shard's previous process may have gone on past the checkpoint. A
 * push for step `step` says rank computes that step; a pull for it (pull true)
 * says rank pushed every step before it, to the previous process too.
 *   sync   a push for a round after the open one opens that round, and so does a
 *          pull for the step after it; the open round's pushes are discarded. A
 *          rank that pulls for the step after the open round counts as having
 *          pushed for it: its push went to the previous process and is lost.
 *   ssp    a pull moves rank's clock up to step.
 *   async  nothing changes.
 * Returns whether anything changed (the caller then lets waiting pulls go on);
 * the caller sees a new round in c->round and clears the round's sum. */
bool dcps_consistency_catch_up(dcps_consistency_t *c, uint32_t rank, uint64_t step, bool pull);

/* What a checkpoint holds of the model, as 64-bit words: the round,
 * contributions and max_ahead, then every rank's clock and contributed flag.
 * Membership and liveness are not kept: a restarted shard learns them anew. */
#define DCPS_CONSISTENCY_WORDS(workers) (3 + 2 * (size_t)(workers))

/* Writes DCPS_CONSISTENCY_WORDS(c->workers) words; reads them back into a model
 * of as many workers. */
void dcps_consistency_save(const dcps_consistency_t *c, uint64_t *words);
void dcps_consistency_load(dcps_consistency_t *c, const uint64_t *words);

/* The step a (re)joining worker should compute next: sync the open round,
 * async and ssp its clock as known here (0 for a new worker). */
uint64_t dcps_consistency_next_step(const dcps_consistency_t *c, uint32_t rank);

#endif
