/* dcps — one allocation carved into aligned slices (STYLE: allocate at set-up).
 *
 * A layout function runs twice over a dcps_carver_t: first with base NULL, to
 * measure (used ends as the bytes to allocate), then over the allocation, to
 * hand out the slices in the same order. Every slice starts at a multiple of
 * DCPS_SLICE_ALIGN bytes from base. Header-only, for C and CUDA alike. */
#ifndef DCPS_CARVE_H
#define DCPS_CARVE_H

#include <stddef.h>

#define DCPS_SLICE_ALIGN 256 /* bytes: cache lines, and GPU memory transactions */

typedef struct {
    char *base; /* NULL: measure only */
    size_t used;
} dcps_carver_t;

/* The next slice of `bytes` (NULL while measuring); advances c->used. */
static inline void *dcps_carve(dcps_carver_t *c, size_t bytes)
{
    size_t at = (c->used + DCPS_SLICE_ALIGN - 1) / DCPS_SLICE_ALIGN * DCPS_SLICE_ALIGN;
    c->used = at + bytes;
    return c->base ? c->base + at : NULL;
}

#endif
