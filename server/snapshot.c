/* dcps — buffers that pull replies send without a copy; see snapshot.h. */
#include "server/snapshot.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

/* One buffer's holds, and the way back to its set from a release's hint. */
typedef struct {
    atomic_uint holds;
    dcps_snapshot_t *set;
} slot_t;

struct dcps_snapshot {
    /* The owner (1 until dcps_snapshot_drop) and every hold: at 0 the set goes. */
    atomic_uint users;
    int count;
    size_t n;
    float *buf[DCPS_SNAPSHOT_MAX];
    slot_t slot[DCPS_SNAPSHOT_MAX];
    float *mem; /* what calloc gave: the buffers lie in it, aligned */
};

#define ALIGN_FLOATS 16 /* 64 bytes: a cache line */

dcps_snapshot_t *dcps_snapshot_new(size_t n, int count)
{
    if (count < 1 || count > DCPS_SNAPSHOT_MAX)
        return NULL;
    dcps_snapshot_t *set = calloc(1, sizeof *set);
    size_t stride = (n + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
    if (!set)
        return NULL;
    set->mem = calloc(stride * (size_t)count + ALIGN_FLOATS, sizeof *set->mem);
    if (!set->mem) {
        free(set);
        return NULL;
    }
    uintptr_t at = ((uintptr_t)set->mem + 63) & ~(uintptr_t)63;
    atomic_init(&set->users, 1);
    set->count = count;
    set->n = n;
    for (int i = 0; i < count; i++) {
        set->buf[i] = (float *)at + stride * (size_t)i;
        atomic_init(&set->slot[i].holds, 0);
        set->slot[i].set = set;
    }
    return set;
}

int dcps_snapshot_count(const dcps_snapshot_t *set)
{
    return set->count;
}

float *dcps_snapshot_buf(const dcps_snapshot_t *set, int i)
{
    return set->buf[i];
}

int dcps_snapshot_find(const dcps_snapshot_t *set, const float *p)
{
    for (int i = 0; i < set->count; i++)
        if (set->buf[i] == p)
            return i;
    return -1;
}

void *dcps_snapshot_hold(dcps_snapshot_t *set, int i)
{
    /* Relaxed: the loop thread wrote the buffer before it hands the message to
     * ZeroMQ, whose queue orders those writes before the I/O thread's reads. */
    atomic_fetch_add_explicit(&set->users, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&set->slot[i].holds, 1, memory_order_relaxed);
    return &set->slot[i];
}

static void unuse(dcps_snapshot_t *set)
{
    if (atomic_fetch_sub_explicit(&set->users, 1, memory_order_acq_rel) == 1) {
        free(set->mem);
        free(set);
    }
}

void dcps_snapshot_release(void *data, void *hint)
{
    slot_t *slot = hint;
    dcps_snapshot_t *set = slot->set;
    (void)data;
    /* Release: the I/O thread's reads of the buffer come before a write that
     * follows the loop thread's acquiring load of the count (held). */
    atomic_fetch_sub_explicit(&slot->holds, 1, memory_order_release);
    unuse(set);
}

bool dcps_snapshot_held(const dcps_snapshot_t *set, int i)
{
    return atomic_load_explicit(&set->slot[i].holds, memory_order_acquire) != 0;
}

int dcps_snapshot_held_count(const dcps_snapshot_t *set)
{
    int k = 0;
    for (int i = 0; i < set->count; i++)
        k += dcps_snapshot_held(set, i);
    return k;
}

void dcps_snapshot_drop(dcps_snapshot_t **set)
{
    if (!*set)
        return;
    unuse(*set);
    *set = NULL;
}
