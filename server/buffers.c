/* dcps — the model's buffers on shard 0; see buffers.h. */
#include "server/buffers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"

#define HEAD_WORDS 5 /* mode + 1, n_floats, n_ints, sized, workers */
#define INT_MAX_EXACT 9007199254740992.0 /* 2^53: the integers a float64 holds exactly */

struct dcps_buffers {
    int workers;
    int mode;         /* enum dcps_buf_mode, or -1: no request yet */
    bool sized;       /* a rank has published: the sizes and the arrays below exist */
    size_t nf, ni;    /* values per rank */
    bool *has;        /* per rank: it published */
    float *f;         /* workers × nf: each rank's latest floating-point values */
    double *i;        /* workers × ni: each rank's latest integer values */
    float *mean;      /* nf: the average mode's reply */
    float *scratch_f; /* nf, ni: a publish's values, checked before they are kept */
    double *scratch_i;
};

static const char *mode_name(int mode)
{
    return mode == DCPS_BUF_AVERAGE ? "average" : mode == DCPS_BUF_LOCAL ? "local"
                                                                                : "rank0";
}

dcps_buffers_t *dcps_buffers_new(int workers)
{
    dcps_buffers_t *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->workers = workers;
    b->mode = -1;
    if (!(b->has = calloc((size_t)workers, sizeof *b->has))) {
        free(b);
        return NULL;
    }
    return b;
}

static void free_arrays(dcps_buffers_t *b)
{
    free(b->f);
    free(b->i);
    free(b->mean);
    free(b->scratch_f);
    free(b->scratch_i);
    b->f = b->mean = b->scratch_f = NULL;
    b->i = b->scratch_i = NULL;
}

void dcps_buffers_destroy(dcps_buffers_t **bp)
{
    dcps_buffers_t *b = *bp;
    if (!b)
        return;
    free_arrays(b);
    free(b->has);
    free(b);
    *bp = NULL;
}

int dcps_buffers_mode(const dcps_buffers_t *b)
{
    return b->mode;
}

/* Allocates the arrays of a table of nf and ni values per rank into t (its
 * other fields untouched). Returns 0 or DCPS_E_NOMEM with nothing allocated. */
static int alloc_arrays(dcps_buffers_t *t, int workers, size_t nf, size_t ni)
{
    /* One more element each, so that a model without one kind allocates too. */
    t->f = calloc((size_t)workers * nf + 1, sizeof *t->f);
    t->i = calloc((size_t)workers * ni + 1, sizeof *t->i);
    t->mean = calloc(nf + 1, sizeof *t->mean);
    t->scratch_f = calloc(nf + 1, sizeof *t->scratch_f);
    t->scratch_i = calloc(ni + 1, sizeof *t->scratch_i);
    if (t->f && t->i && t->mean && t->scratch_f && t->scratch_i)
        return 0;
    free_arrays(t);
    return DCPS_E_NOMEM;
}

/* Copies the values into the scratch arrays and checks them (checks 5 and 6). */
static int check_values(float *sf, double *si, const void *floats, size_t nf, const void *ints,
                        size_t ni, char *why, size_t whylen)
{
    memcpy(sf, floats, nf * sizeof *sf);
    memcpy(si, ints, ni * sizeof *si);
    for (size_t k = 0; k < nf; k++)
        if (!isfinite(sf[k]))
            return dcps_say(why, whylen, DCPS_E_NONFINITE,
                            "buffer value %g at offset %zu is not finite", (double)sf[k], k);
    for (size_t k = 0; k < ni; k++) {
        if (!isfinite(si[k]))
            return dcps_say(why, whylen, DCPS_E_NONFINITE,
                            "integer buffer value %g at offset %zu is not finite", si[k], k);
        if (si[k] != floor(si[k]) || fabs(si[k]) > INT_MAX_EXACT)
            return dcps_say(why, whylen, DCPS_E_FIELD,
                            "integer buffer value %.17g at offset %zu is not a whole number of "
                            "at most 2^53",
                            si[k], k);
    }
    return 0;
}

/* The job's buffers now, by its mode (buffers.h). */
static void compose(dcps_buffers_t *b, const bool *counted, dcps_buffers_view_t *out)
{
    memset(out, 0, sizeof *out);
    if (!b->sized || b->mode == DCPS_BUF_LOCAL)
        return;
    if (b->mode == DCPS_BUF_RANK0) {
        if (!b->has[0])
            return;
        *out = (dcps_buffers_view_t){b->f, b->nf, b->i, b->ni, 1};
        return;
    }
    /* average: the mean over the ranks counted, each rank's values added in
     * rank order in double and the sum rounded once, so every reply of the
     * same table holds the same bytes. Integer buffers: rank 0's, or before
     * rank 0 published, the lowest counted rank's. */
    int m = 0, first = -1;
    for (int r = 0; r < b->workers; r++)
        if (b->has[r] && counted[r]) {
            m++;
            if (first < 0)
                first = r;
        }
    if (m == 0)
        return;
    for (size_t k = 0; k < b->nf; k++) {
        double sum = 0;
        for (int r = 0; r < b->workers; r++)
            if (b->has[r] && counted[r])
                sum += (double)b->f[(size_t)r * b->nf + k];
        b->mean[k] = (float)(sum / m);
    }
    int ir = b->has[0] ? 0 : first;
    *out = (dcps_buffers_view_t){b->mean, b->nf, b->i + (size_t)ir * b->ni, b->ni, m};
}

int dcps_buffers_request(dcps_buffers_t *b, uint32_t rank, int mode, bool publish,
                         const void *floats, size_t n_floats, const void *ints, size_t n_ints,
                         const bool *counted, dcps_buffers_view_t *out, char *why, size_t whylen)
{
    int rc;
    if (b->mode >= 0 && mode != b->mode)
        return dcps_say(why, whylen, DCPS_E_FIELD,
                        "rank %u's buffers are %s, the job's are %s (the first BUFFERS request "
                        "this shard took): every worker of a job is given the same buffers=",
                        rank, mode_name(mode), mode_name(b->mode));
    if (publish && mode == DCPS_BUF_LOCAL)
        return dcps_say(why, whylen, DCPS_E_STATE,
                        "with buffers = local every rank keeps its own: nothing is published");
    if (publish && mode == DCPS_BUF_RANK0 && rank != 0)
        return dcps_say(why, whylen, DCPS_E_STATE,
                        "with buffers = rank0 only rank 0 publishes buffers, not rank %u", rank);
    if (publish) {
        if (n_floats > DCPS_BUFFERS_MAX || n_ints > DCPS_BUFFERS_MAX)
            return dcps_say(why, whylen, DCPS_E_SIZE,
                            "rank %u's buffers are %zu floating-point and %zu integer values, "
                            "more than the %u of each a shard keeps",
                            rank, n_floats, n_ints, DCPS_BUFFERS_MAX);
        if (b->sized && (n_floats != b->nf || n_ints != b->ni))
            return dcps_say(why, whylen, DCPS_E_SIZE,
                            "rank %u's buffers are %zu floating-point and %zu integer values, "
                            "the job's %zu and %zu (the first publisher's)",
                            rank, n_floats, n_ints, b->nf, b->ni);
        dcps_buffers_t t = *b;
        if (!b->sized && (rc = alloc_arrays(&t, b->workers, n_floats, n_ints)) != 0)
            return dcps_say(why, whylen, rc, "out of memory for %zu + %zu buffer values",
                            n_floats, n_ints);
        if ((rc = check_values(t.scratch_f, t.scratch_i, floats, n_floats, ints, n_ints, why,
                               whylen)) != 0) {
            if (!b->sized)
                free_arrays(&t);
            return rc;
        }
        if (!b->sized) { /* the first publisher sizes the table */
            b->f = t.f, b->i = t.i, b->mean = t.mean;
            b->scratch_f = t.scratch_f, b->scratch_i = t.scratch_i;
            b->nf = n_floats, b->ni = n_ints;
            b->sized = true;
        }
        memcpy(b->f + (size_t)rank * b->nf, b->scratch_f, b->nf * sizeof *b->f);
        memcpy(b->i + (size_t)rank * b->ni, b->scratch_i, b->ni * sizeof *b->i);
        b->has[rank] = true;
    }
    b->mode = mode;
    compose(b, counted, out);
    return 0;
}

static size_t slot_words(size_t nf, size_t ni)
{
    return 1 + (nf + 1) / 2 + ni;
}

size_t dcps_buffers_words(const dcps_buffers_t *b)
{
    return HEAD_WORDS + (b->sized ? (size_t)b->workers * slot_words(b->nf, b->ni) : 0);
}

size_t dcps_buffers_words_max(int workers)
{
    return HEAD_WORDS + (size_t)workers * slot_words(DCPS_BUFFERS_MAX, DCPS_BUFFERS_MAX);
}

void dcps_buffers_save(const dcps_buffers_t *b, uint64_t *w)
{
    w[0] = (uint64_t)(b->mode + 1);
    w[1] = b->nf;
    w[2] = b->ni;
    w[3] = b->sized;
    w[4] = (uint64_t)b->workers;
    w += HEAD_WORDS;
    for (int r = 0; b->sized && r < b->workers; r++) {
        w[0] = b->has[r];
        memset(w + 1, 0, (b->nf + 1) / 2 * 8);
        memcpy(w + 1, b->f + (size_t)r * b->nf, b->nf * sizeof *b->f);
        memcpy(w + 1 + (b->nf + 1) / 2, b->i + (size_t)r * b->ni, b->ni * sizeof *b->i);
        w += slot_words(b->nf, b->ni);
    }
}

int dcps_buffers_load(dcps_buffers_t *b, const uint64_t *w, size_t words, char *why,
                      size_t whylen)
{
    if (words < HEAD_WORDS || w[0] > DCPS_BUF_LOCAL + 1 || w[1] > DCPS_BUFFERS_MAX ||
        w[2] > DCPS_BUFFERS_MAX || w[3] > 1 || w[4] != (uint64_t)b->workers)
        return dcps_say(why, whylen, 1, "its buffers are not a table of %d ranks", b->workers);
    const size_t nf = (size_t)w[1], ni = (size_t)w[2];
    const bool sized = w[3] == 1;
    if (words != HEAD_WORDS + (sized ? (size_t)b->workers * slot_words(nf, ni) : 0))
        return dcps_say(why, whylen, 1, "its buffers' length does not fit the file");
    dcps_buffers_t t = {.workers = b->workers};
    if (sized && alloc_arrays(&t, b->workers, nf, ni) != 0)
        return DCPS_E_NOMEM;
    const uint64_t *s = w + HEAD_WORDS;
    for (int r = 0; sized && r < b->workers; r++) {
        char ignored[8];
        if (s[0] > 1 ||
            check_values(t.f + (size_t)r * nf, t.i + (size_t)r * ni, s + 1, nf,
                         s + 1 + (nf + 1) / 2, ni, ignored, sizeof ignored) != 0) {
            free_arrays(&t);
            return dcps_say(why, whylen, 1, "its buffers of rank %d are not finite numbers", r);
        }
        s += slot_words(nf, ni);
    }
    s = w + HEAD_WORDS;
    for (int r = 0; r < b->workers; r++, s += sized ? slot_words(nf, ni) : 0)
        b->has[r] = sized && s[0] == 1;
    free_arrays(b);
    b->f = t.f, b->i = t.i, b->mean = t.mean, b->scratch_f = t.scratch_f;
    b->scratch_i = t.scratch_i;
    b->mode = (int)w[0] - 1;
    b->nf = nf, b->ni = ni, b->sized = sized;
    return 0;
}
