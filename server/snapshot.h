/* dcps — buffers of parameters that pull replies send without a copy.
 *
 * A shard keeps w, its update buffer and sync mode's sum in a set of equal
 * buffers of n floats, and moves them between the buffers by swapping
 * pointers (server/shard.h). A dense pull reply hands the buffer that holds w
 * to ZeroMQ as it is (zmq_msg_init_data), holding it: ZeroMQ's I/O thread
 * sends from it and then calls dcps_snapshot_release, which lets it go. While
 * a buffer is held nobody writes it; the shard writes its next w into one that
 * is not.
 *
 * The holds are the only thing the two threads share, as atomic counts: the
 * loop thread holds and reads them, the I/O thread releases. The set is freed
 * when its owner has let it go (dcps_snapshot_drop) and the last hold is
 * released, whichever comes later, so a reply in flight may outlive its shard.
 *
 * The set does not decide how many buffers may be held at once; its owner
 * does, so that one it may write is always there (dcps_shard_share). */
#ifndef DCPS_SNAPSHOT_H
#define DCPS_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>

/* Buffers in a set, at most: w, the update buffer, sync mode's sum and the
 * ones that let replies send from an older w. */
#define DCPS_SNAPSHOT_MAX 6

typedef struct dcps_snapshot dcps_snapshot_t;

/* A set of `count` (1 to DCPS_SNAPSHOT_MAX) buffers of n floats each, zeroed,
 * each 64-byte aligned, in one allocation; NULL if out of memory. */
dcps_snapshot_t *dcps_snapshot_new(size_t n, int count);

/* How many buffers the set has (its count at dcps_snapshot_new). */
int dcps_snapshot_count(const dcps_snapshot_t *set);

/* Buffer i (0 <= i < count). */
float *dcps_snapshot_buf(const dcps_snapshot_t *set, int i);

/* The number of the buffer that starts at p, or -1 if none does. */
int dcps_snapshot_find(const dcps_snapshot_t *set, const float *p);

/* Holds buffer i for one reply; returns the hint to pass, with the buffer's
 * data, to dcps_snapshot_release (ZeroMQ's zmq_free_fn) exactly once. Loop
 * thread only. */
void *dcps_snapshot_hold(dcps_snapshot_t *set, int i);

/* Releases one hold (any thread; never blocks). The last release of a set
 * whose owner dropped it frees it. */
void dcps_snapshot_release(void *data, void *hint);

/* Whether buffer i is held by a reply now. When it returns false, everything
 * the releasing threads did with the buffer happened before this call returns,
 * and the caller may write it. Loop thread only. */
bool dcps_snapshot_held(const dcps_snapshot_t *set, int i);

/* How many buffers are held now. Loop thread only. */
int dcps_snapshot_held_count(const dcps_snapshot_t *set);

/* The owner lets the set go and sets *set to NULL; it is freed now, or by the
 * last release if replies still hold buffers. NULL is ignored. */
void dcps_snapshot_drop(dcps_snapshot_t **set);

#endif
