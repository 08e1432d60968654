/* dcps — IDX loading through zlib; see idx.h. */
#include "model/idx.h"

#include "common/error.h"
#include "common/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define IDX_LABELS 0x00000801u
#define IDX_IMAGES 0x00000803u
#define IDX_UBYTE 0x08u

/* Reads up to len bytes, stopping early only at the end of the data. Returns
 * the count read, or a negative DCPS_E code with err written. A gzip stream that
 * ends early reads as end of data so the caller reports it as truncated.
 * gzread() counts in unsigned and returns int, hence pieces of at most 1 GiB. */
static int64_t readall(gzFile f, const char *path, uint8_t *buf, uint64_t len, char *err,
                       size_t errlen)
{
    uint64_t got = 0;
    while (got < len) {
        uint64_t want = len - got;
        int n = gzread(f, buf + got, (unsigned)(want > (1u << 30) ? (1u << 30) : want));
        if (n > 0) {
            got += (uint64_t)n;
            continue;
        }
        if (n == 0)
            break;
        int zerr;
        const char *msg = gzerror(f, &zerr);
        if (zerr == Z_BUF_ERROR)
            break;
        if (zerr == Z_ERRNO)
            return dcps_say(err, errlen, DCPS_E_IO, "%s: read failed: %s", path, strerror(errno));
        return dcps_say(err, errlen, DCPS_E_DATA, "%s: corrupt gzip stream: %s", path, msg);
    }
    return (int64_t)got;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads and checks the header: the magic (unsigned bytes, 1 or 3 dimensions)
 * and the dimensions, none zero, whose product, *total bytes of data, is
 * within DCPS_IDX_MAX_BYTES. Sets dim[0..ndim) and leaves the rest as it is. */
static int read_header(gzFile f, const char *path, uint32_t dim[3], uint64_t *total, char *err,
                       size_t errlen)
{
    uint8_t hdr[16];
    int64_t n = readall(f, path, hdr, 4, err, errlen);
    if (n < 0)
        return (int)n;
    if (n < 4)
        return dcps_say(err, errlen, DCPS_E_DATA,
                        "%s: truncated: expected a 4-byte magic, got %lld", path, (long long)n);
    uint32_t magic = be32(hdr);
    if (hdr[0] != 0 || hdr[1] != 0 || (hdr[3] != 1 && hdr[3] != 3))
        return dcps_say(err, errlen, DCPS_E_DATA,
                        "%s: bad magic 0x%08x (expected 0x%08x for labels or 0x%08x for images)",
                        path, magic, IDX_LABELS, IDX_IMAGES);
    if (hdr[2] != IDX_UBYTE)
        return dcps_say(err, errlen, DCPS_E_DATA,
                        "%s: unsupported element type 0x%02x (only unsigned byte 0x08)", path,
                        hdr[2]);

    int ndim = hdr[3];
    n = readall(f, path, hdr + 4, 4u * (unsigned)ndim, err, errlen);
    if (n < 0)
        return (int)n;
    if (n < 4 * ndim)
        return dcps_say(err, errlen, DCPS_E_DATA,
                        "%s: truncated: expected %d bytes of dimensions, got %lld", path, 4 * ndim,
                        (long long)n);
    *total = 1;
    for (int i = 0; i < ndim; i++) {
        dim[i] = be32(hdr + 4 + 4 * i);
        if (dim[i] == 0)
            return dcps_say(err, errlen, DCPS_E_DATA, "%s: dimension %d of %d is zero", path, i + 1,
                            ndim);
        /* Checked at every step: total <= 2^30 times a dimension < 2^32 cannot
         * overflow 64 bits. */
        *total *= dim[i];
        if (*total > DCPS_IDX_MAX_BYTES)
            return dcps_say(err, errlen, DCPS_E_DATA,
                            "%s: data size exceeds the %u-byte limit (dimensions too large)", path,
                            DCPS_IDX_MAX_BYTES);
    }
    return 0;
}

/* Reads the total bytes of data into data and checks that nothing follows. */
static int read_data(gzFile f, const char *path, uint8_t *data, uint64_t total, char *err,
                     size_t errlen)
{
    int64_t n = readall(f, path, data, total, err, errlen);
    if (n < 0)
        return (int)n;
    if ((uint64_t)n < total)
        return dcps_say(err, errlen, DCPS_E_DATA,
                        "%s: truncated: expected %llu bytes of data, got %lld", path,
                        (unsigned long long)total, (long long)n);
    /* Count what follows rather than stop at the first extra byte, so the
     * message says how much is wrong. */
    uint8_t tail[4096];
    uint64_t extra = 0;
    do {
        n = readall(f, path, tail, sizeof tail, err, errlen);
        if (n < 0)
            return (int)n;
        extra += (uint64_t)n;
    } while (n == (int64_t)sizeof tail);
    if (extra)
        return dcps_say(err, errlen, DCPS_E_DATA,
                        "%s: %llu trailing bytes after the %llu bytes of data", path,
                        (unsigned long long)extra, (unsigned long long)total);
    return 0;
}

/* Parses the header, reads the data and checks for trailing bytes; the caller
 * zeroes *out and closes f. */
static int load(gzFile f, const char *path, dcps_idx_t *out, char *err, size_t errlen)
{
    uint32_t dim[3] = {0, 0, 0};
    uint64_t total = 0;
    int rc = read_header(f, path, dim, &total, err, errlen);
    if (rc != 0)
        return rc;
    uint8_t *data = malloc(total);
    if (!data)
        return dcps_say(err, errlen, DCPS_E_NOMEM, "%s: cannot allocate %llu bytes", path,
                        (unsigned long long)total);
    if ((rc = read_data(f, path, data, total, err, errlen)) != 0) {
        free(data);
        return rc;
    }
    out->count = dim[0];
    out->rows = dim[1];
    out->cols = dim[2];
    out->data = data;
    return 0;
}

int dcps_idx_load(const char *path, dcps_idx_t *out, char *err, size_t errlen)
{
    if (!out)
        return dcps_say(err, errlen, DCPS_E_INVAL, "%s: no output struct", path ? path : "(null)");
    memset(out, 0, sizeof *out);
    if (!path)
        return dcps_say(err, errlen, DCPS_E_INVAL, "(null): no path given");
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f) {
        /* errno 0 means zlib itself could not allocate its state. */
        if (errno == 0)
            return dcps_say(err, errlen, DCPS_E_NOMEM, "%s: cannot open: out of memory", path);
        return dcps_say(err, errlen, DCPS_E_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    gzbuffer(f, 1u << 17);
    int rc = load(f, path, out, err, errlen);
    gzclose(f);
    return rc;
}

void dcps_idx_free(dcps_idx_t *x)
{
    if (!x)
        return;
    free(x->data);
    memset(x, 0, sizeof *x);
}

int dcps_dataset_load(const char *images, const char *labels, uint32_t limit, dcps_dataset_t *ds,
                      char *err, size_t errlen)
{
    if (!ds || !images || !labels)
        return dcps_say(err, errlen, DCPS_E_INVAL, "%s: missing argument",
                        images ? images : "(null)");
    memset(ds, 0, sizeof *ds);

    dcps_idx_t img, lab;
    int rc = dcps_idx_load(images, &img, err, errlen);
    if (rc)
        return rc;
    rc = dcps_idx_load(labels, &lab, err, errlen);
    if (rc)
        goto fail_labels;
    if (img.rows == 0) {
        rc = dcps_say(err, errlen, DCPS_E_DATA, "%s: is a labels file, expected images", images);
        goto fail_check;
    }
    if (lab.rows != 0) {
        rc = dcps_say(err, errlen, DCPS_E_DATA, "%s: is an images file, expected labels", labels);
        goto fail_check;
    }
    if (img.count != lab.count) {
        rc = dcps_say(err, errlen, DCPS_E_DATA, "%s: %u labels but %s has %u images", labels,
                      lab.count, images, img.count);
        goto fail_check;
    }
    /* The whole file is checked, not only the kept prefix: a bad label anywhere
     * means a bad file. */
    for (uint32_t i = 0; i < lab.count; i++)
        if (lab.data[i] >= 10) {
            rc = dcps_say(err, errlen, DCPS_E_DATA, "%s: label %u at index %u is not in 0..9",
                          labels, lab.data[i], i);
            goto fail_check;
        }

    uint32_t n = (limit && limit < img.count) ? limit : img.count;
    uint32_t dim = img.rows * img.cols;
    float *x = malloc((size_t)n * dim * sizeof *x);
    if (!x) {
        rc = dcps_say(err, errlen, DCPS_E_NOMEM, "%s: cannot allocate %u x %u floats", images, n,
                      dim);
        goto fail_check;
    }
    float scale[256];
    for (int v = 0; v < 256; v++)
        scale[v] = (float)v / 255.0f;
    for (size_t i = 0; i < (size_t)n * dim; i++)
        x[i] = scale[img.data[i]];

    dcps_idx_free(&img);
    ds->n = n;
    ds->dim = dim;
    ds->x = x;
    ds->y = lab.data; /* keeps the whole label array; only the first n are used */
    return 0;

fail_check:
    dcps_idx_free(&lab);
fail_labels:
    dcps_idx_free(&img);
    return rc;
}

void dcps_dataset_free(dcps_dataset_t *ds)
{
    if (!ds)
        return;
    free(ds->x);
    free(ds->y);
    memset(ds, 0, sizeof *ds);
}
