/* dcps — the model's buffers: what BatchNorm's running statistics become on a shard.
 *
 * A model has, beside its parameters, buffers that training changes but no
 * gradient does (BatchNorm's running mean and variance, its batch count). A
 * worker that keeps its own drifts apart from the others, and every rank then
 * evaluates another model. Shard 0 keeps them for the job (docs/protocol.md,
 * "Buffers"): each rank's latest floating-point values (float32) and integer
 * values (carried as float64: integers up to 2^53 exactly), and answers with
 * the job's: rank 0's (mode rank0, DDP's broadcast_buffers) or the element-wise
 * mean of the latest values of the ranks not declared dead (mode average;
 * integer buffers follow rank 0 there too). In mode local every rank keeps its
 * own and nothing is kept here.
 *
 * This module owns that table: the job's mode (set by the first BUFFERS
 * request, or a checkpoint), the sizes (set by the first publisher), one slot
 * per rank and the reply's staging arrays, allocated once at the first
 * publish. It checks what comes from the network before anything of it is
 * kept, composes the job's buffers, and saves itself as 64-bit words. It knows
 * nothing of sessions or liveness: the caller says which ranks count. */
#ifndef DCPS_BUFFERS_H
#define DCPS_BUFFERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The job's buffer mode; the wire's flags: none, AVERAGE, LOCAL. */
enum dcps_buf_mode { DCPS_BUF_RANK0 = 0, DCPS_BUF_AVERAGE = 1, DCPS_BUF_LOCAL = 2 };

/* The most values of each kind a table takes (what a checkpoint may hold). */
#define DCPS_BUFFERS_MAX (1u << 26)

typedef struct dcps_buffers dcps_buffers_t;

/* The job's buffers as a reply carries them: borrowed from the table until its
 * next call; n_floats = n_ints = 0 and NULL when nobody has published. */
typedef struct {
    const float *floats;
    size_t n_floats;
    const double *ints;
    size_t n_ints;
    int ranks; /* how many ranks' values the floats are (average: the mean's count) */
} dcps_buffers_view_t;

/* A table for a job of `workers` ranks: no mode, nothing published. NULL when
 * out of memory. */
dcps_buffers_t *dcps_buffers_new(int workers);

/* Frees *bp and sets it to NULL; NULL is fine. */
void dcps_buffers_destroy(dcps_buffers_t **bp);

/* The job's mode, or -1 before the first request set it. */
int dcps_buffers_mode(const dcps_buffers_t *b);

/* One BUFFERS request of `rank` in `mode` (docs/protocol.md 7.9, checks 3 to
 * 6): the mode against the job's (FIELD), who may publish (STATE), the sizes
 * against the first publisher's (SIZE), every value finite (NONFINITE) and
 * every integer value a whole number of at most 2^53 (FIELD). With publish,
 * floats and ints (n_floats float32 and n_ints float64 values, borrowed, any
 * alignment) become the rank's latest. counted[i]: rank i's values count in a
 * mean (it is not declared dead). Then *out is the job's buffers. Returns 0,
 * or a code with why and nothing changed (DCPS_E_NOMEM: the first publish
 * could not allocate the table). */
int dcps_buffers_request(dcps_buffers_t *b, uint32_t rank, int mode, bool publish,
                         const void *floats, size_t n_floats, const void *ints, size_t n_ints,
                         const bool *counted, dcps_buffers_view_t *out, char *why, size_t whylen);

/* The 64-bit words dcps_buffers_save writes for b. */
size_t dcps_buffers_words(const dcps_buffers_t *b);

/* Writes b into w (dcps_buffers_words of them): the mode + 1 (0: none), the
 * float and integer counts, the workers, then per rank whether it published,
 * its floats two to a word and its integers one to a word. */
void dcps_buffers_save(const dcps_buffers_t *b, uint64_t *w);

/* Reads a table of `workers` ranks from `words` words of a checkpoint into b,
 * replacing what it held. Returns 0, 1 with why if the words are no such table
 * (b unchanged), or DCPS_E_NOMEM. */
int dcps_buffers_load(dcps_buffers_t *b, const uint64_t *w, size_t words, char *why,
                      size_t whylen);

/* The most words a table of `workers` ranks may take in a checkpoint. */
size_t dcps_buffers_words_max(int workers);

#endif
