/* dcps — what dcps's own programs use of the client and the step beyond the
 * installed headers.
 *
 * The installed API (worker/dcps.h, worker/step.h) opens a job from its file;
 * the trainer, the benchmarks and the tests hold a job already loaded
 * (common/config.h, which is not installed) and open the client or the step
 * from it. These calls are in libdcps's convenience libraries but not exported
 * from the installed libdcps, so no installed header names an uninstalled
 * type. */
#ifndef DCPS_WORKER_INTERNAL_H
#define DCPS_WORKER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "worker/dcps.h"
#include "worker/step.h"

/* dcps_client_open from a loaded job; cfg is copied.
 *
 * The model's size n is cfg->n_params, sent in every HELLO; it must not be 0
 * (DCPS_E_CONFIG). With [model] params = auto the loaded job has n_params 0:
 * the caller sets it to its model's parameter count before this call, on
 * every rank. The shards learn n from rank 0's HELLO; until then they answer
 * another rank's HELLO with DCPS_E_NOTREADY, and this call asks again every
 * 100 ms (heartbeat_ms if shorter) for as long as the retries of an unanswered
 * request would wait (timeout_ms · (1 + 2 + 4 + 4 + …), [worker] retries + 1
 * terms), then fails with DCPS_E_NOTREADY; so ranks may start in any order. A
 * shard whose n differs refuses with DCPS_E_SIZE and a sentence naming both
 * sizes, before anything is pushed; so does one that cannot take rank 0's n
 * (more than 2^30 parameters, or too few for the shards: 64 per shard). */
dcps_client_t *dcps_client_new(const dcps_config_t *cfg, int rank, int *err, char *errbuf,
                               size_t errlen);

/* Pushes k values for the current step in value format dtype (FrameDesc.dtype:
 * 1 float32, or a shorter one of proto/quant.h; TWOBIT with tau > 0): dense
 * when idx is NULL (k is then n), else at the k global indices idx, strictly
 * ascending. Each shard's message is encoded on its own (an INT8 frame has
 * its scales, per DCPS_QUANT_BLOCK values, from its first value). When lost
 * is not NULL it receives, for every value, val[j] minus the value the
 * shards decode: what rounding took, for the caller's error feedback (all 0
 * in float32). dcps_client_push_dense and _sparse are this with the job's
 * [compression] values and no lost. */
int dcps_client_push_as(dcps_client_t *c, const uint32_t *idx, const float *val, size_t k,
                        uint32_t dtype, float tau, float *lost);

/* A push in parts given one at a time (dcps_step_push_range, worker/step.h):
 * the step sends each part as soon as the caller gives it and collects the
 * acknowledgements at the end, with the retries of any push.
 *
 * dcps_client_parts_begin starts the current step's push: shard s gets
 * parts[s] parts (1 to DCPS_PARTS_MAX), numbered from 0 in the order of their
 * ranges, with the seqs of docs/protocol.md section 17. dcps_client_parts_send
 * sends part i of shard s now, without waiting: its global range [lo, hi)
 * inside the shard's, and either hi - lo values (idx NULL) or k entries at
 * ascending global indices inside it, in the wire format dtype (float32, or a
 * shorter one of proto/quant.h, as dcps_client_push_as sends it: INT8's blocks
 * count from the part's first value). The parts of one push are all dense or
 * all sparse, do not overlap and cover the shard's range: the caller answers
 * for that (the shard refuses what breaks it). idx, and float32 values, are
 * borrowed until dcps_client_parts_end returns, which a resent part reads
 * again; values in a shorter format are encoded at once into the client's room
 * for that part, kept until the part is given in a later push, and with lost
 * not NULL what rounding took from each value is written there (all 0 in
 * float32), before the part is sent. dcps_client_parts_end, once every part
 * was given, waits for every acknowledgement (resending what is not
 * acknowledged, as dcps_client_push does) and moves the clock on. A part given
 * twice or out of range, or an end with parts not given: DCPS_E_STATE; a dtype
 * that is no format, or TWOBIT without a threshold: DCPS_E_INVAL; no room for
 * the encoded values: DCPS_E_NOMEM.
 *
 * With pull_parts > 0 in a job of dense pulls, the client pulls ahead: as
 * soon as every part of shard s's push was given, shard s's PULL for the next
 * step goes too (its dense reply asked in pull_parts parts, as
 * dcps_client_set_reply_parts says), so that the reply moves while the caller
 * computes the rest of its gradient. The next pull (dcps_client_pull,
 * dcps_client_pull_to), right after dcps_client_parts_end, collects those
 * replies instead of asking again; any other exchange first, an exact pull,
 * or a push that was not taken for its step (sync: stale, sent back) drops
 * them (their replies are then ignored). */
typedef struct {
    uint64_t lo, hi;     /* the part's global range, inside its shard's */
    const uint32_t *idx; /* sparse: k ascending global indices in [lo, hi); NULL: dense */
    const float *val;    /* dense: hi - lo values; sparse: k values */
    size_t k;            /* sparse: entries */
    uint32_t dtype;      /* the values' wire format: DCPS_DTYPE_F32 or one of proto/quant.h */
    float tau;           /* TWOBIT: the threshold, above 0 */
    float *lost;         /* NULL, or a float per value: what rounding took from it */
} dcps_push_part_t;
/* The parts a dense message over len of a shard's shard_len values goes in:
 * [compression] parts' share of it (parts × len / shard_len, rounded), or by
 * size, one per 524,288 values, 1 to 16; at least 1, at most one per value. A
 * message over the whole range (len = shard_len) goes in [compression] parts. */
uint32_t dcps_parts_for(const dcps_config_t *cfg, uint64_t len, uint64_t shard_len);
int dcps_client_parts_begin(dcps_client_t *c, const uint32_t *parts, uint32_t pull_parts);
int dcps_client_parts_send(dcps_client_t *c, int s, uint32_t i, const dcps_push_part_t *p);
int dcps_client_parts_end(dcps_client_t *c);

/* The first position in idx[0..k) (ascending) whose index is >= x: where a
 * sparse push splits at a shard's or a part's start. */
size_t dcps_lower_bound(const uint32_t *idx, size_t k, uint64_t x);

/* Dense pulls ask for their replies in `parts` parts per shard (at most one a
 * parameter and DCPS_PARTS_MAX), instead of [compression] parts' choice; 0:
 * that choice again. A reply in parts lands front first, so that a caller
 * watching a pull sink sees the front of each shard's range first. */
void dcps_client_set_reply_parts(dcps_client_t *c, uint32_t parts);

/* dcps_step_open from a loaded job; cfg is copied. */
dcps_step_t *dcps_step_new(const dcps_config_t *cfg, int rank, size_t n, int *err, char *errbuf,
                           size_t errlen);

/* What the job module (worker/job.h) reads of a step beyond its public calls:
 * the step's copy of its job (with n_params set to n; valid until
 * dcps_step_close), its rank, its model's size, and when dcps_step_start
 * returned (dcps_now_s(), common/clock.h; 0 before). */
typedef struct {
    const dcps_config_t *cfg;
    int rank;
    size_t n;
    double started_s;
} dcps_step_info_t;
void dcps_step_info(const dcps_step_t *s, dcps_step_info_t *out);

#endif
