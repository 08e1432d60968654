/* dcps — one shard's parameter store.
 *
 * A shard owns the parameters [lo, hi) of the model, their version, the state of
 * the job's update rule (server/optimizer.h) and what it needs to apply each push
 * exactly once: every worker rank's session and its last push (server/session.h),
 * recorded by the functions that apply or drop a push.
 *
 * Memory, in floats of the shard's size n: the parameters (1); momentum's u or
 * DC-ASGD-a's mean square (1); in async and ssp mode with DC-ASGD or delta pulls
 * the backup of what every worker holds (P); in sync mode the sum of the open
 * round's pushes (1), and with delta pulls the shared mirror (1). Delta pulls
 * also need w − mirror (1) and k_pull index/value pairs. Every job has the
 * update buffer (1, below) and a reply buffer (1, DCPS_SHARD_REPLY_BUFFERS:
 * pull replies send w without a copy). So SGD holds 3n, momentum 4n,
 * DC-ASGD-c (3 + P) n and DC-ASGD-a (4 + P) n, plus n in sync mode, all
 * allocated at start: w, the sum, the update and reply buffers as one set
 * (server/snapshot.h), the rest in one allocation.
 *
 * Parameters stay finite: an update that would make any parameter (or DC-ASGD-a's
 * mean square, or sync mode's sum) NaN or Inf is refused with DCPS_E_NONFINITE
 * and changes nothing: not w, not the optimizer state, not the version, the
 * sequence numbers or the counters. A dense update (and sparse momentum, which
 * moves every parameter) writes the new w into the update buffer with the check
 * fused into the same pass, and the two swap (pointers) if it passed; the state
 * is written after, recomputed with the same arithmetic (server/optimizer.h).
 * Sync mode adds a dense push to the round's sum the same way, into the buffer,
 * which then swaps with the sum. Sparse updates that touch only their entries
 * are checked before they are applied. So w and the sum move between buffers;
 * dcps_shard_spans gives a checkpoint the floats in a fixed order.
 *
 * Pull replies without a copy: a dense reply of w sends w's buffer itself and
 * holds it until ZeroMQ has sent it (dcps_shard_share). No update writes a
 * buffer a reply holds: the dense ones write another (the update buffer is
 * always one that no reply holds), and one in place (sparse SGD and DC-ASGD)
 * first moves w to such a buffer with a copy, if a reply holds w's. So a reply
 * sends exactly the w of the version it names. Replies hold at most
 * DCPS_SHARD_REPLY_BUFFERS buffers at once; a pull that would hold one more is
 * answered with a copy, as every reply of a mirror or a delta is.
 *   async, ssp  a push is refused (ERROR NONFINITE) if applying it would make a
 *               parameter non-finite.
 *   sync        a push is refused at once if adding it would make the round's
 *               sum non-finite; the round still waits for that rank (its worker
 *               sees the error and may push again for the step). A round whose mean would make a parameter
 *               non-finite is not applied: w and the state stay, the sum is
 *               cleared, the version does not move (no update was applied; the
 *               next round starts from the same w), and rounds_refused counts it.
 * Pulls therefore never serve NaN or Inf, and nor do deltas (each is checked
 * before its mirror moves).
 *
 * An empty sparse push (k = 0: the client sends one to every shard when none of
 * its Top-k entries falls in that shard's range) is no update: in async and
 * ssp mode it changes nothing here (no version, no count, no sequence number;
 * the router still acknowledges it and moves the rank's clock), in sync mode it
 * is the rank's contribution to the round, a zero gradient in the mean, and
 * counted like any other push.
 *
 * Sizing: the range and the allocation follow from the model's size n
 * (n_params). With [model] params = auto a shard starts unsized (n_params 0:
 * an empty range, nothing allocated) and is sized once, when it learns n from
 * rank 0's HELLO (server/router.c) or from a checkpoint (server/checkpoint.h);
 * every other job's shard is sized by dcps_shard_new. An unsized shard is never
 * initialised, so no push, pull or INIT reaches it.
 *
 * Pull = delta (docs/algorithms.md): a worker holds the shard's mirror of it, tagged
 * with the version the mirror was last brought to. A pull from a worker that
 * holds the current tag is answered with a delta: the top k entries of
 * w − mirror (k as the pull asks, at most k_max; by default k_pull), which are
 * added to the mirror. The mirror moves at most once per
 * version, so a tag names one content: any other pull gets the mirror dense,
 * and so does a session's first pull (server/session.h): a tag is trusted only
 * from a session this process gave it to.
 * In async and ssp mode worker m's mirror is its DC-ASGD backup w_bak(m); in
 * sync mode all workers share one, and the delta of a round is computed once.
 *
 * A shard restored from a checkpoint (server/checkpoint.h) repeats versions it
 * had before the stop, with other contents, so no tag a worker held before then
 * is trusted: dcps_shard_restored makes each worker's next pull dense. Until
 * that pull a worker is behind (dcps_shard_behind): it may push gradients on
 * versions this shard has not reached, and its requests tell the router where
 * the job went on without the shard.
 *
 * It is single-owner (the server's loop thread) and takes no locks. It checks
 * nothing that comes from the network: the router validates every message
 * (proto/codec.h) before it reaches these functions. */
#ifndef DCPS_SHARD_H
#define DCPS_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "common/shardmap.h"
#include "kernels/topk.h"
#include "server/buffers.h"
#include "server/groups.h"
#include "server/optimizer.h"
#include "server/parts.h"
#include "server/session.h"

/* Buffers of n floats beyond w and the update buffer, so that pull replies
 * send w without a copy (dcps_shard_share): with one, replies may hold one
 * version of w at a time while the next updates are written. */
#define DCPS_SHARD_REPLY_BUFFERS 1

/* Room for the sentence of a refused update (it goes into an ERROR's text). */
#define DCPS_SHARD_WHY_MAX 160

/* Staleness of applied pushes: the updates applied between the version a
 * gradient was computed on and its arrival. hist[0] counts 0, hist[b] counts
 * [2^(b−1), 2^b), the last bucket everything from 2^(BUCKETS−2) up. */
#define DCPS_STALENESS_BUCKETS 12
typedef struct {
    uint64_t count, sum, max;
    uint64_t hist[DCPS_STALENESS_BUCKETS];
} dcps_staleness_t;

/* The store of one shard: opaque (shard.c). Other modules read it through
 * dcps_shard_stats, dcps_shard_view and dcps_shard_session, and a checkpoint
 * through dcps_shard_spans and dcps_shard_save. */
typedef struct dcps_shard dcps_shard_t;

/* Allocates the store of shard `index` for cfg, sized for cfg->n_params, or
 * unsized if that is 0 (params = auto). Returns NULL on allocation failure
 * (DCPS_E_NOMEM in *err). */
dcps_shard_t *dcps_shard_new(const dcps_config_t *cfg, int index, int *err);

/* Sizes an unsized shard for a model of n_params parameters (n_params >= 1, and
 * every shard of cfg owning some: dcps_config_check_size): its range of the
 * shard map and the allocation dcps_shard_new makes for a sized one, once.
 * Returns 0; DCPS_E_STATE if s is sized already, DCPS_E_INVAL if n_params is 0
 * (nothing changes); DCPS_E_NOMEM if an allocation fails (s stays unsized). */
int dcps_shard_size(dcps_shard_t *s, const dcps_config_t *cfg, uint64_t n_params);

/* [model] params = auto: dcps_shard_size for a model size that came from the
 * network (rank 0's HELLO) or a file (a checkpoint), once it passes the checks
 * a job's own count does: at most DCPS_PARAMS_AUTO_MAX, else DCPS_E_SIZE with
 * "N parameters, more than the M that [model] params = auto accepts" and then
 * `advice` in why; and enough for every shard of cfg to own some, else
 * DCPS_E_SIZE with dcps_config_check_size's sentence. Returns 0, those, or
 * dcps_shard_size's codes; nothing changes unless it returns 0. */
int dcps_shard_size_auto(dcps_shard_t *s, const dcps_config_t *cfg, uint64_t n_params,
                         const char *advice, char *why, size_t whylen);

/* Frees what dcps_shard_size allocated: s is unsized again (a checkpoint that
 * sized it was refused). Counters, sequence numbers and version stay. */
void dcps_shard_unsize(dcps_shard_t *s);

/* Frees the store and sets *s to NULL. */
void dcps_shard_destroy(dcps_shard_t **s);

/* Sets the initial parameters (n values) if none were set, and every worker's
 * DC-ASGD backup to them. Returns 1 if it set them, 0 if the shard was already
 * initialised (nothing changed). */
int dcps_shard_init(dcps_shard_t *s, const float *w);

/* Marks the state as restored from a checkpoint: every mirror's tag becomes
 * UINT64_MAX (a version no reply names), the kept delta is dropped, and each
 * worker's next pull is answered dense whatever version it says it holds, since
 * a restored shard repeats versions with other contents. */
void dcps_shard_restored(dcps_shard_t *s);

/* Whether rank has not pulled from this shard since it was restored. */
bool dcps_shard_behind(const dcps_shard_t *s, uint32_t rank);

/* Rank's session and last push (server/session.h), borrowed until the next
 * call that changes it. */
const dcps_session_t *dcps_shard_session(const dcps_shard_t *s, uint32_t rank);

/* Binds rank to session id (nonzero) with no push seen yet: the router's
 * HELLO, which decides whether it may (server/router.h). */
void dcps_shard_open_session(dcps_shard_t *s, uint32_t rank, uint64_t id);

/* Rank's latest push in parts and what it carries of a cut one (server/parts.h):
 * kept here, with the sessions, so that a checkpoint holds them; the router
 * reads and records them. */
dcps_parts_t *dcps_shard_parts(dcps_shard_t *s, uint32_t rank);
dcps_carried_t *dcps_shard_carried(dcps_shard_t *s, uint32_t rank);

/* Every rank's records in a checkpoint's words (dcps_parts_save, rank by rank):
 * how many, writing them, and reading them back (0, or 1 with why: no rank then
 * holds any). */
size_t dcps_shard_parts_words(const dcps_shard_t *s);
void dcps_shard_parts_save(const dcps_shard_t *s, uint64_t *w);
int dcps_shard_parts_load(dcps_shard_t *s, const uint64_t *w, size_t words, char *why,
                          size_t whylen);

/* Counts a retry of a push that was applied already: acknowledged DUPLICATE,
 * not applied again. */
void dcps_shard_duplicate(dcps_shard_t *s);

/* The sentence of the last refused update (DCPS_E_NONFINITE), or "". */
const char *dcps_shard_why(const dcps_shard_t *s);

/* The router's call for a push it accepted: applies it (async, ssp: sync false)
 * or adds it to the open round (sync), and records its staleness (based_on: the
 * version it was computed on, at most the shard's version). Dense when idx is
 * NULL (v has n values), else k entries as below. Returns 0, or
 * DCPS_E_NONFINITE with a sentence in why (and in dcps_shard_why) and nothing
 * changed. */
int dcps_shard_push(dcps_shard_t *s, bool sync, uint32_t rank, uint64_t seq, uint64_t based_on,
                    const uint32_t *idx, const float *v, size_t k, char *why, size_t whylen);

/* The router's call for a part of a push in parts (server/parts.h), checked:
 * the global range [lo, hi) of the shard's, dense (idx NULL: v has hi − lo
 * values) or k sparse entries inside it; `push` names the push (the seq of
 * its part 0). Async and ssp: applied at once with the job's rule, at the
 * version's lr, the rule's state moving at once; a dense part's new values
 * are written out of place into the update buffer with the check (staged),
 * and the update buffer becomes w (a swap) when the push's `last` part comes,
 * so the pass over a part is the update's only pass. Until then pulls send
 * the w before the push. Anything else that updates w (another push or part,
 * a sparse part) first settles the staged parts into w (dcps_shard_settle).
 * The version rises by 1 with the push's last part, so a push in parts moves
 * it once, as the push sent whole would, and every dense part computes what
 * the whole push computes for its parameters, bit for bit. A sparse part is a
 * sparse push of its own to the rule: rules that move parameters off a sparse
 * push's entries (momentum, and every rule of dcps_rule_* that is not lazy)
 * move them once per part. Sync: added to the open round's sum, and kept (as
 * the pushes dcps_shard_keep_pushes keeps) until the round is applied or
 * cleared, so that dcps_shard_round_remove takes an incomplete push back out.
 * Records (rank, seq) as applied; with `last` counts the push and its
 * staleness. Returns 0, or DCPS_E_NONFINITE (or DCPS_E_NOMEM keeping a sync
 * part) with a sentence in why, and nothing of the part changed. */
int dcps_shard_push_part(dcps_shard_t *s, bool sync, uint32_t rank, uint64_t seq,
                         uint64_t push, uint64_t based_on, uint64_t lo, uint64_t hi, const uint32_t *idx,
                         const float *v, size_t k, bool last, char *why, size_t whylen);

/* Async, ssp: makes the parts staged by dcps_shard_push_part part of w now
 * (copying what is cheaper: the staged ranges into w, or the rest of w beside
 * them and a swap), without moving the version: before a checkpoint is
 * written, and before any other update. Nothing when nothing is staged. */
void dcps_shard_settle(dcps_shard_t *s);

/* Applies a gradient from (rank, seq) with the job's rule, records it as rank's
 * session's last push (applied) and bumps the version. Dense: g has n values.
 * Sparse: global indices in [lo, hi), strictly ascending; k = 0 changes nothing
 * (above). Returns 0, or
 * DCPS_E_NONFINITE if a parameter would not be finite: nothing changed, the
 * sentence (naming the first such parameter's global index and its values) in
 * dcps_shard_why. */
int dcps_shard_apply_dense(dcps_shard_t *s, uint32_t rank, uint64_t seq, const float *g);
int dcps_shard_apply_sparse(dcps_shard_t *s, uint32_t rank, uint64_t seq, const uint32_t *idx,
                            const float *v, size_t k);

/* Sync mode: adds a push from (rank, seq) to the open round's sum and records
 * it as applied; nothing changes w until dcps_shard_apply_round. Same arguments and
 * returns as above: refused if the sum would not be finite. */
int dcps_shard_accumulate_dense(dcps_shard_t *s, uint32_t rank, uint64_t seq, const float *g);
int dcps_shard_accumulate_sparse(dcps_shard_t *s, uint32_t rank, uint64_t seq,
                                 const uint32_t *idx, const float *v, size_t k);

/* Sync mode: applies the mean of the round's `pushes` gradients once with the
 * job's rule, bumps the version and clears the sum. Every worker pulled the same
 * parameters for the round, so DC-ASGD's correction is zero here (its MS still
 * moves). If the mean would make a parameter non-finite, returns
 * DCPS_E_NONFINITE with the sentence in dcps_shard_why: the sum is cleared,
 * and nothing else changes but rounds_refused. */
int dcps_shard_apply_round(dcps_shard_t *s, int pushes);

/* Sync mode: empties the open round's sum without applying it (after a restore,
 * when the workers are in a later round: dcps_consistency_catch_up). */
void dcps_shard_clear_round(dcps_shard_t *s);

/* Sync mode with several shards (server/rounds.h): from now on every rank's
 * push of the open round is kept, as received, until the round is applied or
 * cleared, so that dcps_shard_round_remove can take it back out. Costs up to
 * workers × n floats (dense pushes). Returns 0 or DCPS_E_NOMEM. */
int dcps_shard_keep_pushes(dcps_shard_t *s);

/* Whether rank's push is in the open round's sum (kept pushes only). */
bool dcps_shard_round_holds(const dcps_shard_t *s, uint32_t rank);

/* Takes rank's kept push back out of the open round's sum (the leader left
 * rank out of the round). The sum then differs from one that never had it by
 * float rounding. Returns whether a push was held. */
bool dcps_shard_round_remove(dcps_shard_t *s, uint32_t rank);

/* Records a push (rank, seq) that is not applied (sync: its round closed without
 * it) as rank's session's last push, dropped: a retry of it is answered STALE
 * again. */
void dcps_shard_drop(dcps_shard_t *s, uint32_t rank, uint64_t seq);

/* Records that a push computed on parameter version `based_on` (at most the
 * current version) arrives now. */
void dcps_shard_note_staleness(dcps_shard_t *s, uint64_t based_on);

/* What a pull is answered with: n dense values, or k (global index, value)
 * pairs to add to what the worker holds. Borrowed from the shard: valid until
 * its next call. */
typedef struct {
    bool dense;
    const float *values; /* dense: n values; delta: k values (as the worker decodes them) */
    const uint32_t *idx; /* delta: k ascending global indices */
    size_t k;
    /* [compression] values other than fp32: the values as sent, in that format
     * (dtype, and INT8's block: proto/quant.h), `bytes` long; NULL for float32. */
    const void *encoded;
    size_t bytes;
    uint32_t dtype, block;
} dcps_pull_t;

/* The reply to a pull from worker `rank`, which holds the parameters tagged
 * `held` (holds) or nothing and wants deltas of at most `want` entries (0:
 * k_pull). holds counts only once this process answered a pull of rank's
 * session: its first pull (also its first after a restore) is dense. Pull =
 * dense: w, which becomes DC-ASGD's w_bak(rank). Pull = delta: see above;
 * `exact` asks for the model itself, dense: in async and ssp mode w (the
 * worker's mirror becomes w); in sync mode the shared mirror every worker
 * computes on, first brought to this version as a delta pull would bring it
 * (w is the mirror plus what no delta has sent yet). The reply's version is
 * the shard's. With [compression] values other than fp32, a reply of w
 * (pull = dense) and a delta carry their values in that format (out->encoded),
 * and what the worker holds is what it decodes: w_bak(rank), or the mirror
 * a delta moves, gains the decoded values, so that what rounding took is
 * part of the next delta. A reply of a mirror, or an exact one, is float32:
 * the mirror is what some worker holds already, bit for bit. */
void dcps_shard_pull(dcps_shard_t *s, uint32_t rank, bool holds, uint64_t held, uint64_t want,
                     bool exact, dcps_pull_t *out);

/* For a pull reply whose dense values are `values` (from dcps_shard_pull): if
 * they are w, a hold on w's buffer, which the reply then sends without a copy:
 * pass the buffer and the returned hint to dcps_snapshot_release once ZeroMQ
 * is done with it (zmq_free_fn), on any thread. Until then the shard writes
 * no update into that buffer. NULL when the reply must copy them: they are not
 * w (a mirror, a delta), or w's buffer is not held yet and replies hold
 * DCPS_SHARD_REPLY_BUFFERS buffers already (counted in pulls_copied): so an
 * update always finds a buffer to write, and memory stays bounded however
 * many replies wait in ZeroMQ's queues. */
void *dcps_shard_share(dcps_shard_t *s, const float *values);

/* A run of floats of the shard. */
typedef struct {
    float *p;
    size_t n;
} dcps_span_t;

#define DCPS_SHARD_SPANS 6

/* The floats a checkpoint holds, in this order: w, the optimizer state, the
 * backups, the round's sum, the shared mirror, w − mirror (those the job has;
 * not the update buffer). Fills out and returns how many spans; their lengths
 * add up to the stats' floats. Valid until the next update. Written (a
 * checkpoint restored, or refused and zeroed) only before the shard answers a
 * pull, while no reply holds w. */
size_t dcps_shard_spans(const dcps_shard_t *s, dcps_span_t out[DCPS_SHARD_SPANS]);

/* What a checkpoint holds of the shard besides its floats and the header
 * fields of dcps_shard_stats, as 64-bit words: every rank's session record
 * (DCPS_SESSION_WORDS each: dcps_session_save), then the counters pushes,
 * duplicates, pulls, dropped and deltas, then the staleness histogram's count,
 * sum, max and buckets. */
#define DCPS_SHARD_WORDS(workers)                                                                  \
    ((size_t)(workers)*DCPS_SESSION_WORDS + 5 + 3 + DCPS_STALENESS_BUCKETS)

/* Writes those words of s (DCPS_SHARD_WORDS(workers) of them) to words. */
void dcps_shard_save(const dcps_shard_t *s, uint64_t *words);

/* Restores what dcps_shard_save wrote into a shard that dcps_shard_new made
 * (and sized), together with its version and whether it was initialised; the
 * floats go in through dcps_shard_spans. `stride` is the words per rank: with
 * DCPS_SESSION_WORDS each rank's session record is restored; with fewer (a
 * format that held no sessions) every rank is left without a session. The
 * caller then marks the shard restored (dcps_shard_restored). */
void dcps_shard_load(dcps_shard_t *s, uint64_t version, bool initialized, const uint64_t *words,
                     size_t stride);

/* Parameter groups (server/groups.h): from now on the rule runs once per
 * segment of g in this range, with the group's weight decay and the shard's
 * lr times its lr_factor (the generic rules, even for sgd and momentum, whose
 * fast paths know one rule). Set before the parameters, at rank 0's INIT or
 * from a checkpoint. Takes g (and clears *g) whatever it returns: 0;
 * DCPS_E_STATE if the shard has groups or parameters already; DCPS_E_FIELD if
 * a group's lr times lr_factor times weight_decay is 1 or more with adamw;
 * DCPS_E_NOMEM. A sentence goes to why; nothing changes unless it returns 0.
 * dcps_shard_unsize drops the groups with the size. */
int dcps_shard_set_groups(dcps_shard_t *s, dcps_groups_t **g, char *why, size_t whylen);

/* The shard's groups, or NULL: borrowed until the shard is unsized or freed. */
const dcps_groups_t *dcps_shard_groups(const dcps_shard_t *s);

/* The model's buffers (server/buffers.h), which shard 0 serves to BUFFERS
 * requests and every shard saves in its checkpoints: the shard's, kept across
 * dcps_shard_unsize (they are not of the parameters' size), freed with it. */
dcps_buffers_t *dcps_shard_buffers(const dcps_shard_t *s);

/* Sets the learning rate of every update rule (a reload changed it). */
void dcps_shard_set_lr(dcps_shard_t *s, double lr);

/* What the shard is and counts, for /metrics, the daemon's log, checkpoints
 * and tests: a copy. */
typedef struct {
    int index;
    uint64_t n_params; /* the model's size; 0: unsized (params = auto, not learnt yet) */
    dcps_range_t range;
    size_t n;          /* hi − lo */
    int workers;
    int kind;          /* the rule: enum dcps_optimizer, never dcasgd (dcps_config_rule) */
    int delay;         /* enum dcps_delay: dcps_config_delay */
    bool adaptive;     /* delay = adaptive */
    float lr;
    bool initialized;  /* by the first INIT, or a checkpoint */
    bool restored;     /* from a checkpoint (dcps_shard_restored) */
    bool delta;        /* pull = delta */
    uint64_t version;  /* incremented by every applied update */
    size_t floats;     /* what a checkpoint holds, in floats (dcps_shard_spans) */
    size_t k_pull;     /* entries of a delta: ⌈pull density · n⌉ */
    size_t k_max;      /* the most a pull may ask for */
    uint64_t pushes, duplicates, pulls, dropped;
    uint64_t pulls_copied;   /* dense pulls whose reply copied w (dcps_shard_share) */
    uint64_t rounds_refused; /* sync rounds not applied: w would not be finite */
    uint64_t deltas;         /* pulls answered with a delta */
    dcps_staleness_t staleness;
} dcps_shard_stats_t;

dcps_shard_stats_t dcps_shard_stats(const dcps_shard_t *s);

/* The shard's arrays, read-only, for readers that check or time its
 * arithmetic (tests, benchmarks): valid until its next call that writes, since
 * an update may move w to another buffer. */
typedef struct {
    const float *w;      /* n parameters; NULL while unsized */
    const float *spare;  /* the update buffer: where the next update is written */
    const float *state;  /* momentum's u or DC-ASGD-a's mean square; NULL otherwise */
    const float *bak;    /* workers × n: DC-ASGD's w_bak(m), the async mirrors; or NULL */
    const float *acc;    /* sync: the open round's sum; NULL otherwise */
    const float *mirror; /* sync with delta pulls: the shared mirror; NULL otherwise */
    const uint64_t *tag; /* per mirror: the version it was brought to; NULL without deltas */
    int delta_of;        /* the mirror the kept delta advanced; −1: none */
} dcps_shard_view_t;

dcps_shard_view_t dcps_shard_view(const dcps_shard_t *s);

/* Bytes the shard holds, by what they are for (server log, /metrics). They add
 * up to dcps_shard_memory; a kind the job does not use is 0. */
typedef struct {
    size_t parameters;       /* w: n floats */
    size_t optimizer_state;  /* momentum's u or DC-ASGD-a's mean square: n floats */
    size_t worker_backups;   /* w_bak(m) of every worker: P·n floats */
    size_t sync_sum;         /* sync mode's sum of the open round: n floats */
    size_t delta_pull;       /* w − mirror, sync's shared mirror, the tags, the last
                                delta's pairs (and its values as sent, with [compression]
                                values) and the selection's workspace */
    size_t update_buffer;    /* where an update is computed and checked: n floats */
    size_t reply_buffers;    /* where w stays while pull replies send it and the next
                                update is written beside it: n floats per
                                DCPS_SHARD_REPLY_BUFFERS; with [compression] values
                                and dense pulls, w as sent too */
    size_t sequence_numbers; /* every rank's session, last push, restore flag and records
                                of pushes in parts */
} dcps_shard_memory_t;

void dcps_shard_memory_kinds(const dcps_shard_t *s, dcps_shard_memory_t *out);

/* Bytes the shard holds (parameters and per-worker state): the sum of the kinds. */
size_t dcps_shard_memory(const dcps_shard_t *s);

#endif
