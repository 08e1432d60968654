/* dcps — value formats on the wire; see quant.h. */
#include "proto/quant.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "proto/codec.h"

bool dcps_quant_is(uint32_t dtype)
{
    return dtype >= DCPS_DTYPE_F16 && dtype <= DCPS_DTYPE_LAST;
}

static bool scaled(uint32_t dtype)
{
    return dtype == DCPS_DTYPE_I8 || dtype == DCPS_DTYPE_TWOBIT;
}

uint64_t dcps_quant_blocks(uint32_t dtype, uint64_t count, uint32_t block)
{
    if (!scaled(dtype) || count == 0)
        return 0;
    return block == 0 ? 1 : count / block + (count % block != 0);
}

uint64_t dcps_quant_bytes(uint32_t dtype, uint64_t count, uint32_t block)
{
    uint64_t codes;
    switch (dtype) {
    case DCPS_DTYPE_F32:
    case DCPS_DTYPE_U32:
        return count > UINT64_MAX / 4 ? UINT64_MAX : count * 4;
    case DCPS_DTYPE_F64:
        return count > UINT64_MAX / 8 ? UINT64_MAX : count * 8;
    case DCPS_DTYPE_F16:
    case DCPS_DTYPE_BF16:
        return count > UINT64_MAX / 2 ? UINT64_MAX : count * 2;
    case DCPS_DTYPE_I8:
        codes = count;
        break;
    case DCPS_DTYPE_TWOBIT:
        codes = count / 4 + (count % 4 != 0);
        break;
    default:
        return 0;
    }
    uint64_t scales = dcps_quant_blocks(dtype, count, block);
    return scales > (UINT64_MAX - codes) / 4 ? UINT64_MAX : codes + 4 * scales;
}

const char *dcps_quant_name(uint32_t dtype)
{
    static const char *const names[] = {[DCPS_DTYPE_F32] = "fp32",
                                        [DCPS_DTYPE_F16] = "fp16",
                                        [DCPS_DTYPE_BF16] = "bf16",
                                        [DCPS_DTYPE_I8] = "int8",
                                        [DCPS_DTYPE_TWOBIT] = "twobit"};
    return dtype < sizeof names / sizeof names[0] && names[dtype] ? names[dtype] : "unknown";
}

static uint32_t bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* x >> s rounded to nearest, ties to even (1 <= s <= 31). */
static uint32_t shift_even(uint32_t x, unsigned s)
{
    uint32_t q = x >> s, rem = x & ((1u << s) - 1), half = 1u << (s - 1);
    return q + (rem > half || (rem == half && (q & 1)));
}

/* The conversions, static so that the loops below inline them (the public
 * names may be interposed in a shared library, which keeps a compiler from
 * inlining them). */
static inline uint16_t to_f16(float x)
{
    uint32_t u = bits(x), a = u & 0x7fffffffu;
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (a > 0x7f800000u) { /* NaN: its top payload bits, kept a NaN (as numpy) */
        uint16_t p = (uint16_t)(a >> 13 & 0x3ffu);
        return (uint16_t)(sign | 0x7c00u | (p ? p : 1u));
    }
    if (a >= 0x477ff000u) /* 65520 and up round to Inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) /* a normal half: rebias the exponent by 127 − 15 */
        return (uint16_t)(sign | shift_even(a - 0x38000000u, 13));
    unsigned e = a >> 23; /* a subnormal half, m · 2^−24, or 0 */
    if (e < 102)
        return sign; /* below 2^−25: 0 */
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    return (uint16_t)(sign | shift_even(m, 126 - e));
}

/* Exact for every code: the bits of a finite half moved into a float's
 * places, times 2^112, rebias the exponent (subnormal halves included). */
static inline float from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    if ((h & 0x7c00u) == 0x7c00u) /* Inf, NaN */
        return from_bits(sign | 0x7f800000u | (uint32_t)(h & 0x3ffu) << 13);
    return from_bits(sign | bits(from_bits((uint32_t)(h & 0x7fffu) << 13) * 0x1p112f));
}

/* to_f16 of a value within ±65504: a normal half's rounding in integers; a
 * subnormal one's by the FPU, adding 0.5, whose ulp (2^−24) is the subnormal
 * halves' spacing, so the sum's low bits are the code rounded to nearest even
 * (1024, when it rounds up to the smallest normal, is that code too). */
static inline uint16_t to_f16_clamped(float x)
{
    uint32_t u = bits(x), a = u & 0x7fffffffu;
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t h = a >= 0x38800000u ? (a - 0x38000000u + 0xfffu + (a >> 13 & 1u)) >> 13
                                  : bits(from_bits(a) + 0.5f) - 0x3f000000u;
    return (uint16_t)(sign | h);
}

static inline uint16_t to_bf16(float x)
{
    uint32_t u = bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0x7fc0u; /* NaN, as torch writes it */
    return (uint16_t)((u + 0x7fffu + (u >> 16 & 1u)) >> 16);
}

static inline float from_bf16(uint16_t h)
{
    return from_bits((uint32_t)h << 16);
}

uint16_t dcps_quant_f16(float x)
{
    return to_f16(x);
}

float dcps_quant_from_f16(uint16_t h)
{
    return from_f16(h);
}

uint16_t dcps_quant_bf16(float x)
{
    return to_bf16(x);
}

float dcps_quant_from_bf16(uint16_t h)
{
    return from_bf16(h);
}

/* x rounded to an integer, ties to even, for |x| < 2^22: the float addition
 * of 1.5 · 2^23 rounds away the fraction in the default rounding mode (what
 * nearbyintf does, without a library call on CPUs before SSE4.1). */
static inline float round_even(float x)
{
    volatile float big = 12582912.0f; /* read once per call: no folding */
    return (x + big) - big;
}

static float clampf(float x, float limit)
{
    return x > limit ? limit : x < -limit ? -limit : x;
}

/* Writes the 16-bit codes of x[0..n) little-endian; dec gets their values. */
/* The little-endian 16-bit codes of x[0..n), clamped to the format's largest
 * finite value; dec (when not NULL) gets their values. In chunks through a
 * local array, so that each loop is simple enough to vectorise. */
static void encode16(bool bf, const float *x, size_t n, uint8_t *out, float *dec)
{
    enum { CHUNK = 256 };
    uint16_t h[CHUNK];
    for (size_t a = 0; a < n; a += CHUNK) {
        size_t m = n - a < CHUNK ? n - a : CHUNK;
        if (bf)
            for (size_t i = 0; i < m; i++)
                h[i] = to_bf16(clampf(x[a + i], from_bits(0x7f7f0000u)));
        else
            for (size_t i = 0; i < m; i++)
                h[i] = to_f16_clamped(clampf(x[a + i], 65504.0f));
        for (size_t i = 0; i < m; i++) { /* little-endian on any host */
            out[2 * (a + i)] = (uint8_t)(h[i] & 0xffu);
            out[2 * (a + i) + 1] = (uint8_t)(h[i] >> 8);
        }
        if (dec && bf)
            for (size_t i = 0; i < m; i++)
                dec[a + i] = from_bf16(h[i]);
        else if (dec) /* finite codes only (clamped): no Inf or NaN branch */
            for (size_t i = 0; i < m; i++)
                dec[a + i] =
                    from_bits((uint32_t)(h[i] & 0x8000u) << 16 |
                              bits(from_bits((uint32_t)(h[i] & 0x7fffu) << 13) * 0x1p112f));
    }
}

/* One INT8 block: its scale and n codes. */
static void encode_i8(const float *x, size_t n, uint8_t *scale_at, int8_t *q, float *dec)
{
    float amax = 0.0f; /* x is finite: plain comparisons, no fmaxf calls */
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        amax = a > amax ? a : amax;
    }
    float scale = amax / 127.0f;
    if (!isfinite(127.0f * scale)) /* max|x| near FLT_MAX: 127 · scale must decode finite */
        scale = nextafterf(scale, 0.0f);
    memcpy(scale_at, &scale, sizeof scale);
    for (size_t i = 0; i < n; i++) {
        float c = scale > 0 ? round_even(x[i] / scale) : 0.0f;
        c = c > 127.0f ? 127.0f : c < -127.0f ? -127.0f : c;
        q[i] = (int8_t)c;
        if (dec) /* from the code, as a receiver decodes it (no -0 for a code 0) */
            dec[i] = (float)q[i] * scale;
    }
}

static void encode_twobit(float tau, const float *x, size_t n, size_t blocks, uint8_t *out,
                          float *dec)
{
    for (size_t b = 0; b < blocks; b++)
        memcpy(out + 4 * b, &tau, sizeof tau);
    uint8_t *codes = out + 4 * blocks;
    const float value[3] = {0.0f, tau, -tau};
    for (size_t i = 0; i < n; i += 4) { /* a byte of four codes at a time */
        unsigned byte = 0;
        for (size_t j = i; j < i + 4 && j < n; j++) {
            unsigned c = x[j] >= tau ? 1u : x[j] <= -tau ? 2u : 0u;
            byte |= c << (2 * (j - i));
            if (dec)
                dec[j] = value[c];
        }
        codes[i / 4] = (uint8_t)byte;
    }
}

void dcps_quant_encode(uint32_t dtype, uint32_t block, float tau, const float *x, size_t n,
                       void *out, float *dec)
{
    uint8_t *o = out;
    size_t blocks = (size_t)dcps_quant_blocks(dtype, n, block);
    size_t per = block ? block : n;
    switch (dtype) {
    case DCPS_DTYPE_F16:
    case DCPS_DTYPE_BF16:
        encode16(dtype == DCPS_DTYPE_BF16, x, n, o, dec);
        break;
    case DCPS_DTYPE_I8:
        for (size_t b = 0; b < blocks; b++) {
            size_t a = b * per, len = n - a < per ? n - a : per;
            encode_i8(x + a, len, o + 4 * b, (int8_t *)(o + 4 * blocks + a), dec ? dec + a : NULL);
        }
        break;
    case DCPS_DTYPE_TWOBIT:
        encode_twobit(tau, x, n, blocks, o, dec);
        break;
    default:
        memmove(o, x, n * sizeof *x);
        if (dec && dec != x)
            memcpy(dec, x, n * sizeof *x);
    }
}

#define FAIL(code, ...)                                                                            \
    do {                                                                                           \
        snprintf(why, whylen, __VA_ARGS__);                                                        \
        return (code);                                                                             \
    } while (0)

/* Reads and checks the scales of a frame with `blocks` of them. */
static int scales_ok(uint32_t dtype, const uint8_t *in, size_t blocks, size_t per, char *why,
                     size_t whylen)
{
    for (size_t b = 0; b < blocks; b++) {
        float s;
        memcpy(&s, in + 4 * b, sizeof s);
        const char *what = dtype == DCPS_DTYPE_I8 ? "scale" : "tau";
        if (!isfinite(s))
            FAIL(DCPS_E_NONFINITE, "%s %s of block %zu (values %zu on) is not finite",
                 dcps_quant_name(dtype), what, b, b * per);
        if (s < 0)
            FAIL(DCPS_E_ENCODING, "%s %s %g of block %zu (values %zu on) is negative",
                 dcps_quant_name(dtype), what, (double)s, b, b * per);
    }
    return 0;
}

/* INT8 codes after checked scales: refuses a code -128 and a value that
 * overflows. */
static int decode_i8(const uint8_t *p, size_t n, size_t blocks, size_t per, float *out, char *why,
                     size_t whylen)
{
    for (size_t b = 0, i = 0; b < blocks; b++) {
        float s;
        bool bad = false;
        memcpy(&s, p + 4 * b, sizeof s);
        for (size_t end = i + per < n ? i + per : n; i < end; i++) {
            int8_t q = (int8_t)p[4 * blocks + i];
            bad |= q == -128;
            out[i] = (float)q * s;
        }
        for (size_t j = b * per; bad && j < i; j++)
            if ((int8_t)p[4 * blocks + j] == -128)
                FAIL(DCPS_E_ENCODING, "int8 code -128 at offset %zu: codes are -127 to 127", j);
        /* code · scale may overflow from FLT_MAX / 128 on (127 · s rounds up to Inf) */
        for (size_t j = b * per; s >= FLT_MAX / 128 && j < i; j++)
            if (!isfinite(out[j]))
                FAIL(DCPS_E_NONFINITE,
                     "int8 value %g at offset %zu (code %d times scale %g) "
                     "is not finite",
                     (double)out[j], j, (int8_t)p[4 * blocks + j], (double)s);
    }
    return 0;
}

/* TWOBIT codes after checked taus: refuses a code 3 and unused bits not 0. */
static int decode_twobit(const uint8_t *p, size_t n, size_t blocks, size_t per, float *out,
                         char *why, size_t whylen)
{
    for (size_t b = 0, i = 0; b < blocks; b++) {
        float value[4];
        unsigned seen = 0;
        memcpy(&value[1], p + 4 * b, sizeof value[1]);
        value[0] = 0.0f, value[2] = -value[1], value[3] = 0.0f;
        for (size_t end = i + per < n ? i + per : n; i < end; i++) {
            unsigned c = p[4 * blocks + i / 4] >> (2 * (i % 4)) & 3u;
            seen |= 1u << c;
            out[i] = value[c];
        }
        for (size_t j = b * per; (seen & 8u) && j < i; j++)
            if ((p[4 * blocks + j / 4] >> (2 * (j % 4)) & 3u) == 3)
                FAIL(DCPS_E_ENCODING,
                     "twobit code 3 at offset %zu: codes are 0, 1 (+tau) "
                     "and 2 (-tau)",
                     j);
    }
    if (n % 4 && p[4 * blocks + n / 4] >> (2 * (n % 4)))
        FAIL(DCPS_E_ENCODING,
             "twobit frame of %zu values: the unused bits of its last byte "
             "are not 0",
             n);
    return 0;
}

int dcps_quant_decode(uint32_t dtype, uint32_t block, const void *in, size_t n, float *out,
                      char *why, size_t whylen)
{
    const uint8_t *p = in;
    size_t blocks = (size_t)dcps_quant_blocks(dtype, n, block);
    size_t per = block ? block : n;
    int rc;
    switch (dtype) {
    case DCPS_DTYPE_F16:
    case DCPS_DTYPE_BF16: {
        /* The exponent field all ones is NaN or Inf: noted in the pass, found after. */
        const uint16_t top = dtype == DCPS_DTYPE_F16 ? 0x7c00u : 0x7f80u;
        bool bad = false;
        for (size_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
            bad |= (h & top) == top;
            out[i] = dtype == DCPS_DTYPE_F16 ? from_f16(h) : from_bf16(h);
        }
        for (size_t i = 0; bad && i < n; i++)
            if (!isfinite(out[i]))
                FAIL(DCPS_E_NONFINITE, "%s value %g (0x%04x) at offset %zu is not finite",
                     dcps_quant_name(dtype), (double)out[i], p[2 * i] | p[2 * i + 1] << 8, i);
        return 0;
    }
    case DCPS_DTYPE_I8:
        if ((rc = scales_ok(dtype, p, blocks, per, why, whylen)) != 0)
            return rc;
        return decode_i8(p, n, blocks, per, out, why, whylen);
    case DCPS_DTYPE_TWOBIT:
        if ((rc = scales_ok(dtype, p, blocks, per, why, whylen)) != 0)
            return rc;
        return decode_twobit(p, n, blocks, per, out, why, whylen);
    default:
        memcpy(out, in, n * sizeof *out);
        for (size_t i = 0; i < n; i++)
            if (!isfinite(out[i]))
                FAIL(DCPS_E_NONFINITE, "value %g at offset %zu is not finite", (double)out[i], i);
        return 0;
    }
}
