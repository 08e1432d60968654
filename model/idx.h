/* dcps — MNIST-format IDX files and the labelled data set built from them.
 *
 * An IDX file is a big-endian header (magic 0x00000801 for a vector of labels,
 * 0x00000803 for a stack of images; the third byte is the element type, the
 * fourth the number of dimensions), one 32-bit size per dimension, then the
 * elements. Only unsigned bytes (type 0x08) are read. Files may be plain or
 * gzip-compressed; zlib tells them apart. This module loads whole files into
 * memory; it does no batching or shuffling.
 *
 * Errors return DCPS_E_IO when a file cannot be opened or read, DCPS_E_DATA when
 * its content is malformed, DCPS_E_NOMEM, or DCPS_E_INVAL for bad arguments,
 * and write one sentence that starts with the file's path into err (when err is
 * not NULL). On failure the output struct is zeroed and owns nothing. */
#ifndef DCPS_IDX_H
#define DCPS_IDX_H

#include <stddef.h>
#include <stdint.h>

/* Largest element count accepted, so that a corrupt header cannot ask for an
 * absurd allocation. */
#define DCPS_IDX_MAX_BYTES (1u << 30)

typedef struct {
    uint32_t count;      /* labels or images */
    uint32_t rows, cols; /* 0, 0 for labels */
    uint8_t *data;       /* count * rows * cols bytes (count for labels); owned */
} dcps_idx_t;

/* Reads the labels or images file at path into *out. The file must hold exactly
 * the elements its header announces: a short file and trailing bytes are both
 * DCPS_E_DATA. Free with dcps_idx_free(). */
int dcps_idx_load(const char *path, dcps_idx_t *out, char *err, size_t errlen);

/* Releases x's data and zeroes it; safe on a zeroed or already freed struct. */
void dcps_idx_free(dcps_idx_t *x);

/* A labelled data set: n samples of dim floats each. */
typedef struct {
    uint32_t n, dim;
    float *x;   /* n * dim, row-major, pixel / 255 in [0, 1]; owned */
    uint8_t *y; /* n labels in 0..9; owned */
} dcps_dataset_t;

/* Loads an images file and its labels file into *ds, keeping the first limit
 * samples (0, or a limit above the file's count, keeps all). The files must
 * hold the same number of entries and every label must be below 10 (the error
 * names the first bad index). Free with dcps_dataset_free(). */
int dcps_dataset_load(const char *images, const char *labels, uint32_t limit, dcps_dataset_t *ds,
                      char *err, size_t errlen);

/* Releases ds's arrays and zeroes it; safe on a zeroed struct. */
void dcps_dataset_free(dcps_dataset_t *ds);

#endif
