/* dcps — top-k selection on the CPU; see topk.h.
 *
 * At low and moderate densities the selection starts from a pivot key t read from
 * a strided sample (the key ranked some standard deviations below where the k-th
 * would be), and makes one pass over the data in index order that copies every
 * entry with a key above t, to the output and, past k of them, to a spill area in
 * the workspace, and also the first entries equal to t, as many as could still be
 * selected. Then either fewer than k keys are above t and the threshold key T is t
 * itself: the selection is the copies above t merged by index with the first
 * k - above copies equal to it, however many entries equal t; or at least k are
 * above t: the copies are narrowed to T by histograms over their bits, and one pass
 * over the copies keeps those above T and the first ones equal to it, in order. A
 * sample that misleads (too few keys at or above t, or more above it than the
 * spill holds) costs a second selection by the general path, never the result.
 *
 * The general path (small n, high densities, a sample that misled) histograms the
 * top TOP_BITS bits of every key and finds the bin holding the k-th largest key.
 * Pass 2 goes over the data in index order, finds the entries in or above that bin
 * SPAN at a time with a loop compilers vectorise (most spans hold none), and copies
 * them as above; the copies in the bin are narrowed to T and kept as above. A bin
 * with more entries than the spill holds (few distinct magnitudes) is narrowed by
 * histograms over the data instead, before pass 2; if that ends at a single key,
 * pass 2 emits the selection directly, looking for keys equal to T only until the
 * last one it needs.
 *
 * Where an entry goes depends on its value, which the branch predictor cannot
 * guess, so the hot loops choose by arithmetic instead of branches. */
#include "kernels/topk.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "config.h"

enum {
    /* Pass 1 counts the top 12 bits of every key: the finer its bins, the fewer
     * entries pass 2 has to look at twice, while 4096 counters stay in L1. */
    TOP_BITS = 12,
    BINS = 1 << TOP_BITS,
    TOP_SHIFT = 31 - TOP_BITS, /* key >> TOP_SHIFT: the top bin */
    /* The smallest spill, so that small workspaces never narrow on the data. */
    MIN_CAP = 4096,
    /* Pass 2 finds the entries in or above the bin SPAN at a time, and handles them
     * a CHUNK at a time, while that part of the data is still in cache. */
    SPAN = 32,
    CHUNK = 4096,
    /* The pivot is read from a sample of SAMPLE keys, for n of at least MIN_PIVOT;
     * see pivot_key(). */
    SAMPLE = 4096,
    MIN_PIVOT = 1 << 16
};
/* Keys from this bin up are Inf or NaN: 0x7f800000 is the key of Inf. */
#define NONFINITE_BIN (0x7f800000u >> TOP_SHIFT)

struct dcps_topk_ws {
    size_t max_n;
    size_t cap; /* entries the spill holds: max_n / 8, at least MIN_CAP */
    uint32_t hist[BINS];
    /* The entries of one chunk a pass looks at; before a pass, the sample's keys. */
    uint32_t hit_idx[CHUNK + 1];
    float *sval; /* the spill: pass 2's copies past the k-th */
    uint32_t *sidx;
};

/* The bin still to be resolved: the keys with key >> shift == prefix. need of its
 * count entries are selected (1 <= need <= count); every key above the bin is. */
typedef struct {
    uint32_t prefix;
    int shift;
    size_t need, count;
} bin_t;

static inline uint32_t bits(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

static inline float from_bits(uint32_t u)
{
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static inline uint32_t key(float v)
{
    return bits(v) & 0x7fffffffu;
}

dcps_topk_ws_t *dcps_topk_ws_new(size_t max_n, int *err)
{
    if (max_n == 0 || max_n > DCPS_TOPK_MAX_N) {
        *err = DCPS_E_INVAL;
        return NULL;
    }
    size_t cap = max_n / 8 > MIN_CAP ? max_n / 8 : MIN_CAP;
    if (cap > max_n)
        cap = max_n;
    dcps_topk_ws_t *ws = malloc(sizeof *ws + cap * (sizeof(float) + sizeof(uint32_t)));
    if (!ws) {
        *err = DCPS_E_NOMEM;
        return NULL;
    }
    ws->max_n = max_n;
    ws->cap = cap;
    ws->sval = (float *)(ws + 1);
    ws->sidx = (uint32_t *)(ws->sval + cap);
    *err = 0;
    return ws;
}

void dcps_topk_ws_destroy(dcps_topk_ws_t **ws)
{
    if (ws) {
        free(*ws);
        *ws = NULL;
    }
}

/* The bin of h[0..nbins) that holds the need-th largest key counted there
 * (1 <= need <= the total), scanning from the top; need becomes the rank
 * inside that bin. */
static uint32_t pick(const uint32_t *h, uint32_t nbins, size_t *need)
{
    uint32_t b = nbins;
    while (h[--b] < *need)
        *need -= h[b];
    return b;
}

/* Bit l of the result is set when v[l] has a key of at least lo, for l < len <=
 * SPAN. With len == SPAN the loop is one compilers vectorise (a table of bits,
 * since shifting each lane by its own count is not in baseline SIMD). */
static inline uint32_t hits(const float *v, size_t len, uint32_t lo)
{
    static const uint32_t bit[SPAN] = {
        1u << 0,  1u << 1,  1u << 2,  1u << 3,  1u << 4,  1u << 5,  1u << 6,  1u << 7,
        1u << 8,  1u << 9,  1u << 10, 1u << 11, 1u << 12, 1u << 13, 1u << 14, 1u << 15,
        1u << 16, 1u << 17, 1u << 18, 1u << 19, 1u << 20, 1u << 21, 1u << 22, 1u << 23,
        1u << 24, 1u << 25, 1u << 26, 1u << 27, 1u << 28, 1u << 29, 1u << 30, 1u << 31};
    uint32_t m = 0;
    if (len == SPAN) {
        for (int l = 0; l < SPAN; l++)
            m |= bit[l] & -(uint32_t)(key(v[l]) >= lo);
        return m;
    }
    for (size_t l = 0; l < len; l++)
        m |= bit[l] & -(uint32_t)(key(v[l]) >= lo);
    return m;
}

static inline size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

/* Writes to hit_idx the indices in [c0, c1) (c1 - c0 <= CHUNK) of the entries of x with
 * a key of at least lo, ascending, and returns their count. */
static size_t find(const float *x, size_t c0, size_t c1, uint32_t lo, uint32_t *hit_idx)
{
    size_t nh = 0;
    for (size_t i0 = c0; i0 < c1; i0 += SPAN) {
        uint32_t hit = hits(x + i0, min_size(c1 - i0, SPAN), lo);
        /* Most spans hold at most two: those are written without a branch, since
         * whether there is one is unpredictable. Without one, an index is written
         * and not counted; hit_idx has a spare slot for that. */
        for (int s = 0; s < 2; s++) {
            size_t l = (size_t)__builtin_ctzll(hit | (uint64_t)1 << SPAN) & (SPAN - 1);
            hit_idx[nh] = (uint32_t)(i0 + l);
            nh += hit != 0;
            hit &= hit - 1;
        }
        for (; hit; hit &= hit - 1)
            hit_idx[nh++] = (uint32_t)(i0 + (size_t)__builtin_ctz(hit));
    }
    return nh;
}

/* Counts the top bins of v[0..4) in h. Two keys come from each 64-bit load, fewer
 * instructions than four loads; which half holds which key depends on the byte
 * order, which a histogram does not care about. */
static inline void count4(uint32_t *h, const float *v)
{
    uint64_t a, b;
    memcpy(&a, v, sizeof a);
    memcpy(&b, v + 2, sizeof b);
    h[a >> TOP_SHIFT & (BINS - 1)]++;
    h[a >> (32 + TOP_SHIFT) & (BINS - 1)]++;
    h[b >> TOP_SHIFT & (BINS - 1)]++;
    h[b >> (32 + TOP_SHIFT) & (BINS - 1)]++;
}

/* r[i] ← r[i] + g[i], and its top bin counted in h. */
static inline void add_count(uint32_t *h, float *r, const float *g, size_t i)
{
    r[i] += g[i];
    h[key(r[i]) >> TOP_SHIFT]++;
}

/* Adds to h the top bins of every key of x, or of r ← r + g when g is given (then
 * x is r). */
static void count_all(uint32_t *h, const float *x, float *r, const float *g, size_t n)
{
    size_t i = 0;
    if (g) {
        for (; i + 4 <= n; i += 4) {
            add_count(h, r, g, i);
            add_count(h, r, g, i + 1);
            add_count(h, r, g, i + 2);
            add_count(h, r, g, i + 3);
        }
        for (; i < n; i++)
            add_count(h, r, g, i);
    } else {
        for (; i + 4 <= n; i += 4)
            count4(h, x + i);
        for (; i < n; i++)
            h[key(x[i]) >> TOP_SHIFT]++;
    }
}

/* The pivot for selecting k of x[0..n) (of x + g when g is given), or NO_PIVOT where
 * the general path is used: n below MIN_PIVOT, or a density at which the copies
 * above the pivot would not fit in the spill. Of a strided sample of SAMPLE keys,
 * about r = k / step are expected among the top k; the pivot is the key of rank
 * r + 4 sqrt(r) + 8, so that the top k hold fewer sample keys than that only once
 * in many millions of calls for data in random order, and the keys above the pivot
 * number about k + (4 sqrt(r) + 8) step. It is found by radix selection over the
 * sample's keys, kept in ws->hit_idx, with ws->hist as the histogram. */
#define NO_PIVOT UINT32_MAX
static uint32_t pivot_key(dcps_topk_ws_t *ws, const float *x, const float *g, size_t n, size_t k)
{
    if (n < MIN_PIVOT || k > ws->cap)
        return NO_PIVOT;
    size_t step = n / SAMPLE, r = k / step;
    size_t rank = r + (size_t)(4.0 * sqrt((double)r)) + 8;
    if (rank > SAMPLE / 2 || (rank + 1) * step > k + ws->cap / 2)
        return NO_PIVOT;
    uint32_t *s = ws->hit_idx, *h = ws->hist, prefix = 0;
    for (size_t j = 0; j < SAMPLE; j++) {
        size_t i = j * step;
        s[j] = key(g ? x[i] + g[i] : x[i]);
    }
    for (int shift = 31; shift > 0;) {
        const int w = shift < TOP_BITS ? shift : TOP_BITS;
        shift -= w;
        memset(h, 0, sizeof *h << w);
        for (size_t j = 0; j < SAMPLE; j++)
            h[(s[j] >> shift) & ((1u << w) - 1)] += s[j] >> shift >> w == prefix;
        prefix = prefix << w | pick(h, 1u << w, &rank);
    }
    /* NaN and Inf are left to the general path, which refuses them. */
    return prefix < 0x7f800000u ? prefix : NO_PIVOT;
}

/* Pass 1 of the general path over x, or over r ← r + g when g is given (then x is
 * r): the histogram of the top bits of every key in ws->hist, and the bin holding
 * the k-th largest key. Returns 0 or DCPS_E_NONFINITE. */
static int pass1(dcps_topk_ws_t *ws, const float *x, float *r, const float *g, size_t n, size_t k,
                 bin_t *b)
{
    uint32_t *h = ws->hist;
    memset(h, 0, sizeof(uint32_t[BINS]));
    count_all(h, x, r, g, n);
    for (uint32_t c = NONFINITE_BIN; c < BINS; c++)
        if (h[c])
            return DCPS_E_NONFINITE;
    b->need = k;
    b->prefix = pick(h, BINS, &b->need);
    b->shift = TOP_SHIFT;
    b->count = h[b->prefix];
    return 0;
}

/* Adds to h the histogram of the w key bits from bit shift up, over the entries of
 * v[0..n) whose key >> (shift + w) is prefix. Every entry adds 0 or 1 to its bin,
 * without a branch: which ones match is unpredictable. */
static void count_sub(uint32_t *h, const float *v, size_t n, int shift, int w, uint32_t prefix)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t kk = key(v[i]);
        h[(kk >> shift) & ((1u << w) - 1)] += kk >> shift >> w == prefix;
    }
}

/* Narrows b, TOP_BITS bits at a time, with histograms over the entries of a[0..na)
 * and c[0..nc) (those of b among them), until b holds at most limit entries or is a
 * single key (shift 0). h has room for BINS. */
static void narrow(uint32_t *h, const float *a, size_t na, const float *c, size_t nc, size_t limit,
                   bin_t *b)
{
    while (b->shift > 0 && b->count > limit) {
        const int w = b->shift < TOP_BITS ? b->shift : TOP_BITS, shift = b->shift - w;
        memset(h, 0, sizeof *h << w);
        count_sub(h, a, na, shift, w, b->prefix);
        count_sub(h, c, nc, shift, w, b->prefix);
        uint32_t sub = pick(h, 1u << w, &b->need);
        b->prefix = b->prefix << w | sub;
        b->shift = shift;
        b->count = h[sub];
    }
}

/* Whether an entry of key kk is selected once the threshold key t is known: it is
 * above t, or equal to t while need, the count of equal keys still to take, lasts.
 * Without branches: whether an entry is taken is unpredictable. */
static inline int taken(uint32_t kk, uint32_t t, size_t *need)
{
    int eq = (kk == t) & (*need > 0);
    *need -= (size_t)eq;
    return (kk > t) | eq;
}

/* Pass 2 when the bin is the single key t: emits, in index order, every key above t
 * and the first need keys equal to it, clearing them in clear when given. Once the
 * last of those is taken it looks only for keys above t, so that its cost does not
 * grow with the number of keys equal to t. */
static void emit(dcps_topk_ws_t *ws, const float *x, float *clear, size_t n, uint32_t t,
                 size_t need, uint32_t *idx, float *val)
{
    size_t o = 0;
    for (size_t c0 = 0; c0 < n; c0 += CHUNK) {
        size_t nh = find(x, c0, min_size(n, c0 + CHUNK), t + (need == 0), ws->hit_idx);
        for (size_t j = 0; j < nh; j++) {
            uint32_t i = ws->hit_idx[j];
            if (taken(key(x[i]), t, &need)) {
                idx[o] = i;
                val[o++] = x[i];
                if (clear)
                    clear[i] = 0.0f;
            }
        }
    }
}

/* Of nv copies in index order, the first k in idx/val and the rest in the spill,
 * keeps at the front of idx/val, still in order, those above the threshold key
 * b->prefix (b narrowed to a single key) and the first b->need equal to it. Whether
 * one is kept is unpredictable, so each is written at the next place and counted
 * or not; each write lands at or before the entry read (and below k), and clear
 * gets +0 for a kept entry, its own value back otherwise. */
static void keep(dcps_topk_ws_t *ws, size_t nv, size_t k, const bin_t *b, uint32_t *idx, float *val,
                 float *clear)
{
    const uint32_t *sidx = ws->sidx;
    const float *sval = ws->sval;
    size_t kept = 0, need = b->need;
    for (size_t j = 0; j < nv && kept < k; j++) {
        uint32_t i = j < k ? idx[j] : sidx[j - k];
        float v = j < k ? val[j] : sval[j - k];
        uint32_t sel = (uint32_t)taken(key(v), b->prefix, &need);
        idx[kept] = i;
        val[kept] = v;
        if (clear)
            clear[i] = from_bits(bits(v) & (sel - 1));
        kept += sel;
    }
}

/* Pass 2 for a bin of more than one key, b->count <= ws->cap entries: copies the
 * entries in or above the bin, in index order, to idx/val and, past k of them, to
 * the spill. The bin is narrowed to the threshold key among the copies, and the
 * selected ones are kept (keep()). Selected entries are cleared in clear when
 * given. */
static void pass2(dcps_topk_ws_t *ws, const float *x, float *clear, size_t n, size_t k, bin_t *b,
                  uint32_t *idx, float *val)
{
    uint32_t *sidx = ws->sidx;
    float *sval = ws->sval;
    size_t nv = 0; /* entries copied */
    for (size_t c0 = 0; c0 < n; c0 += CHUNK) {
        size_t nh = find(x, c0, min_size(n, c0 + CHUNK), b->prefix << b->shift, ws->hit_idx);
        for (size_t j = 0; j < nh; j++, nv++) {
            uint32_t i = ws->hit_idx[j];
            if (nv < k) {
                idx[nv] = i;
                val[nv] = x[i];
            } else {
                sidx[nv - k] = i;
                sval[nv - k] = x[i];
            }
        }
    }
    /* k - need entries are above the bin, so the spill holds fewer than count. */
    assert(nv == k - b->need + b->count);
    size_t nk = min_size(nv, k);
    narrow(ws->hist, val, nk, sval, nv - nk, 0, b);
    keep(ws, nv, k, b, idx, val, clear);
}

/* The selection around pivot t (see the file's opening comment), over x, or over
 * r ← r + g when g is given (then x is r; the additions are all made, whatever the
 * result). Returns 0 with the selection made, DCPS_E_NONFINITE, or 1 where the
 * general path must select: fewer than k keys at or above t, or more above it than
 * idx/val and the spill hold. */
static int around(dcps_topk_ws_t *ws, const float *x, float *r, const float *g, size_t n, size_t k,
                  uint32_t t, uint32_t *idx, float *val)
{
    uint32_t *sidx = ws->sidx;
    float *sval = ws->sval;
    /* na copies above t: idx/val, then the spill, up to lim. While na < k the first
     * nb entries equal to t are copied to the spill, as long as nb < k - na: no more
     * than that can be selected, since na only grows. Once na reaches k, T is above t
     * and the spill takes copies above t instead. */
    size_t na = 0, nb = 0, lim = k + ws->cap;
    for (size_t c0 = 0; c0 < n; c0 += CHUNK) {
        size_t c1 = min_size(n, c0 + CHUNK);
        if (g)
            for (size_t i = c0; i < c1; i++)
                r[i] += g[i];
        if (na > lim)
            continue;
        int ties = na < k && nb < k - na; /* entries equal to t are still wanted */
        size_t nh = find(x, c0, c1, t + !ties, ws->hit_idx);
        for (size_t j = 0; j < nh; j++) {
            uint32_t i = ws->hit_idx[j];
            float v = x[i];
            if (key(v) > t) {
                if (na < k) {
                    idx[na] = i;
                    val[na] = v;
                } else if (na < lim) {
                    sidx[na - k] = i;
                    sval[na - k] = v;
                }
                na++;
            } else if (na < k && nb < k - na) {
                sidx[nb] = i;
                sval[nb] = v;
                nb++;
            }
        }
    }
    if (na > lim || (na < k && nb < k - na))
        return 1;
    /* Inf and NaN have keys above any pivot, so they are among the copies. */
    size_t nk = min_size(na, k);
    uint32_t top = 0;
    for (size_t j = 0; j < nk; j++)
        top |= -(uint32_t)(key(val[j]) >= 0x7f800000u);
    for (size_t j = 0; j < na - nk; j++)
        top |= -(uint32_t)(key(sval[j]) >= 0x7f800000u);
    if (top)
        return DCPS_E_NONFINITE;

    if (na >= k) {
        bin_t b = {.prefix = 0, .shift = 31, .need = k, .count = na};
        narrow(ws->hist, val, k, sval, na - k, 0, &b);
        keep(ws, na, k, &b, idx, val, r);
        return 0;
    }
    /* T is t: the na copies above it and the first k - na equal to it, merged by
     * index from the back (the copies above t stay put once the others are placed). */
    size_t a = na, e = k - na, o = k;
    while (e > 0) {
        o--;
        if (a > 0 && idx[a - 1] > sidx[e - 1]) {
            a--;
            idx[o] = idx[a];
            val[o] = val[a];
        } else {
            e--;
            idx[o] = sidx[e];
            val[o] = sval[e];
        }
    }
    if (r)
        for (size_t j = 0; j < k; j++)
            r[idx[j]] = 0.0f;
    return 0;
}

/* The selection after the argument checks; see the file's opening comment. */
static int topk(const float *x, float *r, const float *g, size_t n, size_t k, uint32_t *idx,
                float *val, dcps_topk_ws_t *ws)
{
    uint32_t t = pivot_key(ws, x, g, n, k);
    if (t != NO_PIVOT) {
        int rc = around(ws, x, r, g, n, k, t, idx, val);
        if (rc <= 0)
            return rc;
        g = NULL; /* added */
    }
    bin_t b;
    int rc = pass1(ws, x, r, g, n, k, &b);
    if (rc)
        return rc;
    narrow(ws->hist, x, n, NULL, 0, ws->cap, &b);
    if (b.shift == 0)
        emit(ws, x, r, n, b.prefix, b.need, idx, val);
    else
        pass2(ws, x, r, n, k, &b, idx, val);
    return 0;
}

static int bad_args(size_t n, size_t k, const void *idx, const void *val, const dcps_topk_ws_t *ws)
{
    return !ws || !idx || !val || n == 0 || n > ws->max_n || k == 0 || k > n;
}

int dcps_topk_cpu(const float *x, size_t n, size_t k, uint32_t *idx, float *val, dcps_topk_ws_t *ws)
{
    if (!x || bad_args(n, k, idx, val, ws))
        return DCPS_E_INVAL;
    return topk(x, NULL, NULL, n, k, idx, val, ws);
}

int dcps_topk_ef_cpu(float *r, const float *g, size_t n, size_t k, uint32_t *idx, float *val,
                     dcps_topk_ws_t *ws)
{
    if (!r || bad_args(n, k, idx, val, ws))
        return DCPS_E_INVAL;
    return topk(r, r, g, n, k, idx, val, ws);
}

void dcps_scatter_add_cpu(float *w, const uint32_t *idx, const float *val, size_t k, float alpha)
{
    /* Built with -std=c11, so alpha * val is never contracted into an FMA: the
     * product is rounded, as on the GPU. */
    for (size_t j = 0; j < k; j++)
        w[idx[j]] += alpha * val[j];
}

void dcps_gather_cpu(const float *w, const uint32_t *idx, size_t k, float *out)
{
    for (size_t j = 0; j < k; j++)
        out[j] = w[idx[j]];
}

float dcps_topk_read_cpu(const float *x, size_t n)
{
    /* Eight independent sums, so the pass runs at the speed of the loads rather
     * than of one chain of additions. */
    float s[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            s[l] += fabsf(x[i + l]);
    for (; i < n; i++)
        s[0] += fabsf(x[i]);
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

#ifndef HAVE_CUDA
dcps_topk_gpu_ws_t *dcps_topk_gpu_ws_new(size_t max_n, int *err)
{
    *err = DCPS_E_NOGPU;
    return NULL;
}

void dcps_topk_gpu_ws_destroy(dcps_topk_gpu_ws_t **ws)
{
    if (ws)
        *ws = NULL;
}

int dcps_topk_gpu(const float *d_x, size_t n, size_t k, uint32_t *d_idx, float *d_val,
                  dcps_topk_gpu_ws_t *ws, dcps_stream_t stream)
{
    return DCPS_E_NOGPU;
}

int dcps_topk_ef_gpu(float *d_r, const float *d_g, size_t n, size_t k, uint32_t *d_idx,
                     float *d_val, dcps_topk_gpu_ws_t *ws, dcps_stream_t stream)
{
    return DCPS_E_NOGPU;
}

int dcps_scatter_add_gpu(float *d_w, const uint32_t *d_idx, const float *d_val, size_t k,
                         float alpha, dcps_stream_t stream)
{
    return DCPS_E_NOGPU;
}

int dcps_gather_gpu(const float *d_w, const uint32_t *d_idx, size_t k, float *d_out,
                    dcps_stream_t stream)
{
    return DCPS_E_NOGPU;
}

int dcps_topk_read_gpu(const float *d_x, size_t n, float *d_sum, const dcps_topk_gpu_ws_t *ws,
                       dcps_stream_t stream)
{
    return DCPS_E_NOGPU;
}
#endif
