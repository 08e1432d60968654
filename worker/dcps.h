/* libdcps — the dcps client library.
 *
 * A client is one worker rank of a job. It holds one DEALER socket per shard
 * and speaks the dcps protocol (proto/dcps.proto): it pushes gradients, pulls
 * parameters and meets the other workers at barriers. Every call blocks until
 * each shard involved has answered, or fails after [worker] retries resends. The
 * first attempt waits [worker] timeout_ms, each resend twice as long as the one
 * before, up to 4 × timeout_ms, so a shard that restarts has time to come back
 * (ZeroMQ reconnects by itself). A resent push carries the same sequence number,
 * so a shard applies it once.
 *
 * A client is one session: a random 64-bit number drawn when it opens and named
 * in every request, which is how the shards tell this worker from anyone else
 * claiming its rank. A second process of the same rank is refused
 * (DCPS_E_LIVE, asked again for up to dead_after_ms) while this one is heard
 * from; a restarted worker is a new session, admitted once the old one has been
 * silent for dead_after_ms. A shard that restarted from a checkpoint older than
 * this client's HELLO is told HELLO again, once, with the same session.
 *
 * Errors are values: calls return 0 or a negative DCPS_E_… code (common/error.h,
 * installed as <dcps/error.h> beside this header's <dcps/dcps.h>) and
 * dcps_client_error() gives a sentence that names the shard and what went wrong.
 * The library never exits the process. A client is used by one thread.
 *
 * Vectors are the whole model: n = dcps_client_num_params() float32 values in
 * the job's global index order; the client splits and joins them by shard.
 *
 * The client keeps the worker's clock, the step it computes next: a push is for
 * that step and moves the clock on, a pull asks for the parameters to compute it.
 * Under `[job] mode = sync` or `ssp` a pull waits until the step may start; the
 * shards say every heartbeat_ms that they are still waiting for other workers, so
 * such a wait lasts as long as it must and fails only when the shards fall silent
 * for all those attempts. A background thread with its own sockets sends
 * HEARTBEAT to a shard whenever [server] heartbeat_ms pass without a request to
 * it while the client is open, so a worker busy computing is not declared dead.
 *
 * With [security] curve = true every connection is a CURVE client with the
 * worker's key pair (worker_secret_key_file) and the shards' public key
 * (server_public_key). A shard that refuses the key, or closes the handshake
 * a few times in a row, fails the call at once with DCPS_E_AUTH and a sentence
 * that says which shard and what to check, rather than after the retries. */
#ifndef DCPS_CLIENT_H
#define DCPS_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dcps_client dcps_client_t;

typedef struct {
    uint64_t bytes_pushed;  /* PUSH and INIT messages and their acks, headers included */
    uint64_t bytes_pulled;  /* PULL and PULL_REPLY messages, headers included */
    uint64_t bytes_pushed_dense; /* what bytes_pushed would be with dense payloads */
    uint64_t bytes_pulled_dense; /* what bytes_pulled would be with dense replies */
    uint64_t bytes_sent;    /* every message sent */
    uint64_t bytes_received; /* every message received */
    uint64_t pushes, pulls; /* completed calls */
    uint64_t retries;       /* requests sent again after a timeout */
    uint64_t duplicates;    /* pushes a shard had already applied */
    uint64_t version;       /* sum of the shards' versions at the last pull */
    uint64_t staleness_sum; /* per push and shard: updates by others since the pull */
    uint64_t staleness_count;
    uint64_t staleness_max;
    uint64_t dropped;       /* sync: pushes whose round had closed without them */
    uint64_t clock;         /* the step computed next */
} dcps_client_stats_t;

/* Opens rank `rank` of the job in job_file (with "section.key=value"
 * overrides), connects to every shard and says HELLO. Returns NULL on failure
 * with the code in *err and a sentence in errbuf: DCPS_E_CONFIG for a bad job
 * or a [security] key it lacks, DCPS_E_IO or DCPS_E_DATA for a key file it
 * cannot use, DCPS_E_AUTH for a shard that refused it, DCPS_E_SIZE for a model
 * size that is not the shards'. A job with [model] params = auto gives no size
 * to open it with: DCPS_E_CONFIG; pass the override "model.params=N" with
 * the model's size N (the shards learn it from rank 0's HELLO), or open the
 * worker's step with dcps_step_open, which takes the size. */
dcps_client_t *dcps_client_open(const char *job_file, int rank, const char *const *overrides,
                                size_t n_overrides, int *err, char *errbuf, size_t errlen);

/* Sends BYE to every shard (best effort), closes the sockets, frees the client
 * and sets *c to NULL. */
void dcps_client_close(dcps_client_t **c);

/* The model's parameter count n. */
uint64_t dcps_client_num_params(const dcps_client_t *c);

/* 1 if every shard reported initialised parameters at HELLO or since, else 0. */
int dcps_client_initialized(const dcps_client_t *c);

/* Sets the initial parameters (n values) on every shard that has none; shards
 * that already have parameters keep them. Only rank 0 may call it. */
int dcps_client_init(dcps_client_t *c, const float *params);

/* Gives the job's parameter groups (docs/protocol.md, "Parameter groups"):
 * n_ranges (end, group) pairs tiling [0, n) in the model's order, and n_groups
 * (lr_factor, weight_decay) pairs. Copied; every later HELLO carries them, and
 * rank 0's INIT sets them on the shards. Says HELLO again at once, so a table
 * that differs from the one the shards have (rank 0's, or a checkpoint's) is
 * refused now: DCPS_E_FIELD, with the shard's sentence naming the first group
 * that differs in dcps_client_error. Call it before
 * dcps_client_init or dcps_client_wait_ready. */
int dcps_client_set_groups(dcps_client_t *c, const uint32_t *ranges, size_t n_ranges,
                           const double *opts, size_t n_groups);

/* Waits until every shard has parameters (rank 0 initialises them), asking
 * again every 50 ms, for at most timeout_ms. */
int dcps_client_wait_ready(dcps_client_t *c, int timeout_ms);

/* Pushes a dense gradient of n values for the current step and moves the clock
 * on. With [compression] values other than fp32 the values travel in that
 * format (docs/protocol.md, 17) and the shards apply them as decoded; what the
 * rounding takes is lost here (the step, worker/step.h, keeps it in its
 * residual). `grad` is borrowed (sent zero-copy) until the call returns. In sync mode
 * a shard whose round for this step has closed without it (this worker was
 * declared dead meanwhile) drops it and moves the clock to its open round.
 * Each shard's range goes in [compression] parts parts (0: by the range's
 * size), each sent at once and acknowledged on its own; a part whose
 * acknowledgement does not come is sent again, alone (docs/protocol.md, 17).
 * Dense pulls ask for their replies in as many parts. */
int dcps_client_push_dense(dcps_client_t *c, const float *grad);

/* Pushes k entries: global indices strictly ascending, below n, and their
 * values (in the job's [compression] values, as above). Every shard receives a
 * push, possibly empty. */
int dcps_client_push_sparse(dcps_client_t *c, const uint32_t *idx, const float *val, size_t k);

/* Pulls the parameters for the current step into params (n values), waiting
 * first in sync and ssp modes. On failure params may be partly updated.
 * With [compression] pull = delta, params must be the array the previous pull
 * filled, unchanged since: a shard then sends only the largest changes of its
 * mirror of that copy (docs/algorithms.md), which are added in place, and its range
 * dense whenever the versions disagree (the first pull, a lost reply, a
 * restarted worker). The copy is then the shard's mirror, not exactly w. With
 * [compression] values other than fp32 the shards send a dense w and the
 * deltas in that format, and params holds what they decode to. */
int dcps_client_pull(dcps_client_t *c, float *params);

/* A pull's destination other than a host array (device memory, say): each
 * shard's reply that passed every check is handed over once, on the calling
 * thread, before dcps_client_pull_to returns; a dense reply in parts
 * ([compression] parts, docs/protocol.md section 17) part by part as each
 * arrives and passes its checks (a reply refused at a later part leaves the
 * earlier ones handed over). dense: the range [lo, lo + n) of the model is v; delta: add val[j] at global index idx[j] (ascending, within
 * one shard's range), as the shard did to its mirror. v, idx and val are valid
 * only during the call. A nonzero return fails the pull with that code. */
typedef struct {
    int (*dense)(void *arg, uint64_t lo, const float *v, size_t n);
    int (*delta)(void *arg, const uint32_t *idx, const float *val, size_t k);
    void *arg;
} dcps_pull_sink_t;

/* dcps_client_pull (exact = 0) or dcps_client_pull_exact (exact != 0) into a
 * sink. The same rules: with pull = delta the sink's target must be what the
 * previous pull left there. */
int dcps_client_pull_to(dcps_client_t *c, const dcps_pull_sink_t *sink, int exact);

/* With pull = delta: asks each shard for deltas of ⌈density · its range⌉
 * entries from now on (a shard allows up to its k_max); 0 (the start): the
 * job's [compression] pull_density. */
void dcps_client_set_pull_density(dcps_client_t *c, double density);

/* Pulls the model itself, dense, whatever [compression] pull is (for a final
 * evaluation, say): the shards' parameters, or in sync mode with delta pulls
 * the shared mirror every worker computes on (docs/protocol.md, section 10).
 * The next pull is then dense too. */
int dcps_client_pull_exact(dcps_client_t *c, float *params);

/* Tells every shard that this worker has no more batches, so no step waits for
 * its pushes any more. It still takes part in barriers and may pull. */
int dcps_client_done(dcps_client_t *c);

/* Waits until every live worker of the job has reached barrier `step` on every
 * shard (workers declared dead or gone are not waited for). */
int dcps_client_barrier(dcps_client_t *c, uint64_t step);

/* The model's buffers (BatchNorm's running statistics: docs/pytorch.md,
 * "Buffers"), which shard 0 keeps for the job in one of three modes; every
 * worker of a job uses the same one, and a shard refuses another (DCPS_E_FIELD). */
enum dcps_buffers_mode {
    DCPS_BUFFERS_RANK0 = 0,   /* the job's are rank 0's latest; only rank 0 publishes */
    DCPS_BUFFERS_AVERAGE = 1, /* the mean of every live rank's latest (integers: rank 0's) */
    DCPS_BUFFERS_LOCAL = 2    /* every rank keeps its own; nothing is published */
};

/* One BUFFERS exchange with shard 0 (docs/protocol.md 7.9). With publish, this
 * rank's floating-point values `floats` (n_floats) and integer values `ints`
 * (n_ints, whole numbers as double) become its latest there (borrowed until
 * the call returns). Then, if the shard has the job's buffers, they are
 * written to out_floats and out_ints (n_floats and n_ints of them; they may be
 * floats and ints themselves) and the call returns 1; 0 if it has none yet
 * (nobody published; mode local). Else a negative code: DCPS_E_FIELD for a
 * mode other than the job's, DCPS_E_STATE for a publish the mode does not
 * allow, DCPS_E_SIZE for sizes other than the job's, DCPS_E_NONFINITE. */
int dcps_client_buffers(dcps_client_t *c, int mode, int publish, const float *floats,
                        size_t n_floats, const double *ints, size_t n_ints, float *out_floats,
                        double *out_ints);

void dcps_client_stats(const dcps_client_t *c, dcps_client_stats_t *out);

/* The learning rate in force on the shards at the last pull: each shard's
 * PULL_REPLY says the lr its next update uses, [optimizer] lr times its
 * schedule's f(t) at its version t (docs/algorithms.md, Schedules); this is
 * their mean (shards whose versions differ, async with sparse pushes, may
 * differ a little). NaN before the first pull, or when no shard said it (a
 * shard of an older dcps). */
double dcps_client_lr(const dcps_client_t *c);

/* The sentence for the last failure of c; "" if none. Valid until the next call. */
const char *dcps_client_error(const dcps_client_t *c);

#ifdef __cplusplus
}
#endif
#endif
