/* dcps — what the fuzz harnesses share (tests/fuzz/).
 *
 * Each harness defines libFuzzer's two entry points. They are built twice: by
 * clang with -fsanitize=fuzzer,address,undefined (`make fuzz`), where libFuzzer
 * provides main(), and by the normal compiler with tests/fuzz/replay.c, a main()
 * that feeds them every file of the corpora in every `make check`.
 *
 * An input is cut into parts at FUZZ_PART_SEP (and a router input into messages
 * at FUZZ_MSG_SEP). Separators instead of lengths: libFuzzer's mutations insert
 * and erase bytes, which would shift every later part of a length-prefixed
 * input, but leave a separated one's other parts as they were; the separators
 * are in the dictionary (tests/fuzz/dcps.dict) so that mutations add parts. Each
 * part is copied into an allocation of its exact size, so that AddressSanitizer
 * sees a read one byte past it, and malloc's alignment is what ZeroMQ's frames
 * get from proto/frame.c. */
#ifndef DCPS_FUZZ_H
#define DCPS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "proto/codec.h"

#define FUZZ_PART_SEP "\xf7PRT"
#define FUZZ_MSG_SEP "\xf7MSG"
#define FUZZ_SEP_LEN 4
#define FUZZ_MAX_PARTS 8 /* more than a message may have (DCPS_MAX_PARTS) */

/* The job id of the seed messages (tests/fuzz/seeds.c). */
#define FUZZ_JOB_ID 0x5eed5eed5eed5eedull
#define FUZZ_SESSION 0x8000000000005eedull /* rank r speaks in session FUZZ_SESSION + r */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant of dcps that the input broke: a bug. Stays on in every build. */
#define FUZZ_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Parts of one input, each in its own allocation. */
typedef struct {
    dcps_buf_t part[FUZZ_MAX_PARTS];
    size_t n;     /* parts held (at least 1: an empty input is one empty part) */
    size_t extra; /* parts beyond FUZZ_MAX_PARTS, counted, not kept */
} fuzz_parts_t;

/* The next occurrence of sep (FUZZ_SEP_LEN bytes) in [p, end), or end. */
static inline const uint8_t *fuzz_find(const uint8_t *p, const uint8_t *end, const char *sep)
{
    while ((size_t)(end - p) >= FUZZ_SEP_LEN) {
        const uint8_t *q = memchr(p, sep[0], (size_t)(end - p) - (FUZZ_SEP_LEN - 1));
        if (!q)
            break;
        if (memcmp(q, sep, FUZZ_SEP_LEN) == 0)
            return q;
        p = q + 1;
    }
    return end;
}

/* Cuts [data, data + size) at FUZZ_PART_SEP into out. */
static inline void fuzz_split(const uint8_t *data, size_t size, fuzz_parts_t *out)
{
    const uint8_t *p = data, *end = data + size;
    out->n = out->extra = 0;
    for (;;) {
        const uint8_t *q = fuzz_find(p, end, FUZZ_PART_SEP);
        size_t len = (size_t)(q - p);
        if (out->n < FUZZ_MAX_PARTS) {
            uint8_t *copy = malloc(len ? len : 1);
            FUZZ_ASSERT(copy != NULL);
            if (len)
                memcpy(copy, p, len);
            out->part[out->n++] = (dcps_buf_t){copy, len};
        } else {
            out->extra++;
        }
        if (q == end)
            return;
        p = q + FUZZ_SEP_LEN;
    }
}

static inline void fuzz_parts_free(fuzz_parts_t *f)
{
    for (size_t i = 0; i < f->n; i++)
        free((void *)f->part[i].data);
    f->n = 0;
}

/* A failing check's code is one of the table's, and its sentence is a
 * non-empty NUL-terminated string inside why[0, whylen). */
static inline void fuzz_check_failure(int rc, const char *why, size_t whylen)
{
    FUZZ_ASSERT(rc < 0);
    FUZZ_ASSERT(dcps_error_known(rc));
    FUZZ_ASSERT(memchr(why, '\0', whylen) != NULL);
    FUZZ_ASSERT(whylen < 2 || why[0] != '\0');
}

#endif
