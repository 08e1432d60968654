/* Tests for proto/quant: the value formats of the wire against references
 * written here independently of quant.c — float16 and bfloat16 round to nearest
 * even at every midpoint between two neighbours (all 2^16 codes), int8 and
 * twobit against hand-computed frames — and the decoder's refusals. The numpy
 * reference of the same formats is python/tests/test_values.py. */
#include "proto/quant.h"

#include <check.h>

#include "tests/check_run.h"
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/error.h"
#include "proto/codec.h"

static char why[256];

static float fbits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* float16 code h's value, from the definition: (-1)^s 2^(e-15) (1 + m/1024), or
 * 2^-14 m/1024 for e = 0. In double, exactly. */
static double half_value(uint16_t h)
{
    int e = h >> 10 & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return h & 0x8000 ? -v : v;
}

START_TEST(f16_decodes_every_code_by_the_definition)
{
    for (uint32_t h = 0; h < 65536; h++) {
        int e = h >> 10 & 31;
        float f = dcps_quant_from_f16((uint16_t)h);
        if (e == 31) {
            ck_assert((h & 1023) ? isnan(f) : isinf(f));
            continue;
        }
        ck_assert_msg((double)f == half_value((uint16_t)h), "code 0x%04x", h);
        ck_assert_uint_eq(dcps_quant_f16(f), h); /* and back, exactly (-0 too) */
    }
}
END_TEST

/* Between two neighbouring finite halves a < b (positive codes h, h + 1): the
 * midpoint goes to the even code, anything below it to a, above it to b. */
START_TEST(f16_rounds_to_nearest_even_at_every_midpoint)
{
    for (uint16_t h = 0; h < 0x7bff; h++) {
        double a = half_value(h), b = half_value((uint16_t)(h + 1)), mid = (a + b) / 2;
        float fm = (float)mid; /* exact: a midpoint of halves needs 12 bits */
        ck_assert((double)fm == mid);
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : h;
        ck_assert_msg(dcps_quant_f16(fm) == even, "midpoint after 0x%04x", h);
        ck_assert_uint_eq(dcps_quant_f16(-fm), even | 0x8000u);
        ck_assert_uint_eq(dcps_quant_f16(nextafterf(fm, 0)), h);
        ck_assert_uint_eq(dcps_quant_f16(nextafterf(fm, INFINITY)), h + 1);
    }
    /* Beyond the largest half, 65504: below 65520 (its midpoint with 2^16) it
     * stays, from there on it is Inf; the encoder clamps instead. */
    ck_assert_uint_eq(dcps_quant_f16(nextafterf(65520.0f, 0)), 0x7bff);
    ck_assert_uint_eq(dcps_quant_f16(65520.0f), 0x7c00);
    ck_assert_uint_eq(dcps_quant_f16(-1e30f), 0xfc00);
    ck_assert_uint_eq(dcps_quant_f16(fbits(0x00000001)), 0); /* the smallest float: 0 */
    ck_assert(isnan(dcps_quant_from_f16(dcps_quant_f16(NAN))));
    float x[3] = {1e30f, -70000.0f, 65519.0f}, dec[3];
    uint8_t out[6];
    dcps_quant_encode(DCPS_DTYPE_F16, 0, 0, x, 3, out, dec);
    ck_assert(dec[0] == 65504.0f && dec[1] == -65504.0f && dec[2] == 65504.0f);
}
END_TEST

START_TEST(bf16_is_the_top_half_rounded_to_nearest_even)
{
    for (uint32_t h = 0; h < 0x7f7f; h++) {
        float a = dcps_quant_from_bf16((uint16_t)h), b = dcps_quant_from_bf16((uint16_t)(h + 1));
        ck_assert(a == fbits(h << 16));
        ck_assert_uint_eq(dcps_quant_bf16(a), h);
        float mid = fbits(h << 16 | 0x8000u); /* exactly between a and b */
        ck_assert(mid > a && mid < b);
        ck_assert_uint_eq(dcps_quant_bf16(mid), (h & 1) ? h + 1 : h);
        ck_assert_uint_eq(dcps_quant_bf16(nextafterf(mid, 0)), h);
        ck_assert_uint_eq(dcps_quant_bf16(nextafterf(mid, INFINITY)), h + 1);
    }
    ck_assert_uint_eq(dcps_quant_bf16(NAN), 0x7fc0); /* as torch */
    float x[2] = {FLT_MAX, -FLT_MAX}, dec[2];
    uint8_t out[4];
    dcps_quant_encode(DCPS_DTYPE_BF16, 0, 0, x, 2, out, dec); /* clamped: finite */
    ck_assert(dec[0] == fbits(0x7f7f0000u) && dec[1] == -fbits(0x7f7f0000u));
    ck_assert(out[0] == 0x7f && out[1] == 0x7f); /* little-endian */
}
END_TEST

START_TEST(int8_frame_by_hand)
{
    /* One block of 5: max |x| = 2.54, scale = 2.54f / 127 = 0.02 (float32). */
    const float x[5] = {2.54f, -1.0f, -0.01f, 0.03f, -2.54f}; /* -0.01: code 0, value +0 */
    float scale = 2.54f / 127.0f, dec[5], back[5];
    uint8_t out[9];
    ck_assert_uint_eq(dcps_quant_bytes(DCPS_DTYPE_I8, 5, 0), 9);
    dcps_quant_encode(DCPS_DTYPE_I8, 0, 0, x, 5, out, dec);
    float got;
    memcpy(&got, out, 4);
    ck_assert(got == scale);
    for (int i = 0; i < 5; i++) {
        float q = nearbyintf(x[i] / scale);
        ck_assert_int_eq((int8_t)out[4 + i], (int)q);
        ck_assert(dec[i] == q * scale);
    }
    ck_assert_int_eq((int8_t)out[4], 127);
    ck_assert_int_eq((int8_t)out[8], -127);
    ck_assert_int_eq(dcps_quant_decode(DCPS_DTYPE_I8, 0, out, 5, back, why, sizeof why), 0);
    ck_assert(memcmp(back, dec, sizeof dec) == 0);
}
END_TEST

START_TEST(int8_blocks_have_their_own_scales)
{
    /* Blocks of 4 over 10 values: 3 scales (the last block has 2 values). */
    float x[10], dec[10], back[10];
    for (int i = 0; i < 10; i++)
        x[i] = (float)(i + 1) * (i < 4 ? 1e-3f : 1.0f);
    uint8_t out[3 * 4 + 10];
    ck_assert_uint_eq(dcps_quant_blocks(DCPS_DTYPE_I8, 10, 4), 3);
    ck_assert_uint_eq(dcps_quant_bytes(DCPS_DTYPE_I8, 10, 4), sizeof out);
    dcps_quant_encode(DCPS_DTYPE_I8, 4, 0, x, 10, out, dec);
    const float want[3] = {4e-3f / 127.0f, 8.0f / 127.0f, 10.0f / 127.0f};
    for (int b = 0; b < 3; b++) {
        float s;
        memcpy(&s, out + 4 * b, 4);
        ck_assert(s == want[b]);
        ck_assert_int_eq((int8_t)out[12 + (b == 2 ? 9 : 4 * b + 3)], 127); /* each block's max */
    }
    for (int i = 0; i < 10; i++) /* each within half a step of its block */
        ck_assert(fabsf(dec[i] - x[i]) <= want[i / 4] / 2 * 1.0001f);
    ck_assert_int_eq(dcps_quant_decode(DCPS_DTYPE_I8, 4, out, 10, back, why, sizeof why), 0);
    ck_assert(memcmp(back, dec, sizeof dec) == 0);
    /* max|x| = FLT_MAX: the scale is one float below FLT_MAX / 127 where 127
     * times it would round to Inf, so the frame decodes finite (fuzz_router). */
    float top[2] = {FLT_MAX, -1.0f}, topdec[2], topback[2];
    uint8_t topq[6];
    dcps_quant_encode(DCPS_DTYPE_I8, 0, 0, top, 2, topq, topdec);
    ck_assert(isfinite(topdec[0]) && topdec[0] > 0);
    ck_assert_int_eq(dcps_quant_decode(DCPS_DTYPE_I8, 0, topq, 2, topback, why, sizeof why), 0);
    ck_assert(memcmp(topback, topdec, sizeof topdec) == 0);
    /* All zero: scale 0, codes 0 (no 0/0). */
    float z[3] = {0, -0.0f, 0};
    dcps_quant_encode(DCPS_DTYPE_I8, 0, 0, z, 3, out, dec);
    ck_assert(dec[0] == 0 && dec[1] == 0 && dec[2] == 0 && out[4] == 0 && out[5] == 0);
}
END_TEST

START_TEST(int8_ties_go_to_even_codes)
{
    /* scale = 127 / 127 = 1: x / scale is x, so 2.5 is a tie between 2 and 3. */
    const float x[4] = {127.0f, 2.5f, -3.5f, 0.5f};
    uint8_t out[8];
    float dec[4];
    dcps_quant_encode(DCPS_DTYPE_I8, 0, 0, x, 4, out, dec);
    ck_assert_int_eq((int8_t)out[5], 2);
    ck_assert_int_eq((int8_t)out[6], -4);
    ck_assert_int_eq((int8_t)out[7], 0);
}
END_TEST

START_TEST(twobit_frame_by_hand)
{
    const float x[6] = {0.5f, -0.5f, 0.49f, -0.6f, 0.0f, 3.0f}, tau = 0.5f;
    uint8_t out[4 + 2];
    float dec[6], back[6];
    ck_assert_uint_eq(dcps_quant_bytes(DCPS_DTYPE_TWOBIT, 6, 0), sizeof out);
    dcps_quant_encode(DCPS_DTYPE_TWOBIT, 0, tau, x, 6, out, dec);
    float t;
    memcpy(&t, out, 4);
    ck_assert(t == tau);
    /* codes 1, 2, 0, 2 | 0, 1, pad: low bits first */
    ck_assert_uint_eq(out[4], 1u | 2u << 2 | 0u << 4 | 2u << 6);
    ck_assert_uint_eq(out[5], 0u | 1u << 2);
    const float want[6] = {0.5f, -0.5f, 0, -0.5f, 0, 0.5f};
    ck_assert(memcmp(dec, want, sizeof want) == 0);
    ck_assert_int_eq(dcps_quant_decode(DCPS_DTYPE_TWOBIT, 0, out, 6, back, why, sizeof why), 0);
    ck_assert(memcmp(back, want, sizeof want) == 0);
}
END_TEST

/* Refuses `bad` (n values of dtype, block) with code and a sentence containing text. */
static void refused(uint32_t dtype, uint32_t block, const void *bad, size_t n, int code,
                    const char *text)
{
    float out[16];
    why[0] = '\0';
    ck_assert_int_eq(dcps_quant_decode(dtype, block, bad, n, out, why, sizeof why), code);
    ck_assert_msg(strstr(why, text) != NULL, "why \"%s\" lacks \"%s\"", why, text);
}

START_TEST(decode_refuses_what_no_encoder_makes)
{
    uint8_t f[12];
    float s = 0.5f, neg = -0.5f, inf = INFINITY;
    memcpy(f, &s, 4);
    memset(f + 4, 0, 8);
    f[6] = 0x80; /* int8 -128 at offset 2 */
    refused(DCPS_DTYPE_I8, 0, f, 8, DCPS_E_ENCODING, "int8 code -128 at offset 2");
    memcpy(f, &neg, 4);
    f[6] = 0;
    refused(DCPS_DTYPE_I8, 0, f, 8, DCPS_E_ENCODING, "scale -0.5 of block 0");
    memcpy(f, &inf, 4);
    refused(DCPS_DTYPE_I8, 0, f, 8, DCPS_E_NONFINITE, "int8 scale of block 0");
    float nan = NAN;
    memcpy(f, &nan, 4);
    refused(DCPS_DTYPE_TWOBIT, 0, f, 3, DCPS_E_NONFINITE, "twobit tau of block 0");
    memcpy(f, &s, 4);
    f[4] = 3u << 2; /* code 3 at offset 1 */
    refused(DCPS_DTYPE_TWOBIT, 0, f, 3, DCPS_E_ENCODING, "twobit code 3 at offset 1");
    f[4] = 1u << 6; /* a code in the unused fourth slot of 3 values */
    refused(DCPS_DTYPE_TWOBIT, 0, f, 3, DCPS_E_ENCODING, "unused bits");
    const uint8_t h[4] = {0x00, 0x3c, 0x00, 0x7c}; /* 1.0, +Inf */
    refused(DCPS_DTYPE_F16, 0, h, 2, DCPS_E_NONFINITE, "fp16 value inf (0x7c00) at offset 1");
    const uint8_t b[4] = {0x80, 0x3f, 0xc0, 0x7f}; /* 1.0, NaN */
    refused(DCPS_DTYPE_BF16, 0, b, 2, DCPS_E_NONFINITE, "offset 1");
    /* A finite scale whose product with a code overflows (found by fuzz_codec). */
    float huge = FLT_MAX / 2;
    memcpy(f, &huge, 4);
    memset(f + 4, 0, 8);
    f[5] = 3;
    refused(DCPS_DTYPE_I8, 0, f, 8, DCPS_E_NONFINITE, "int8 value inf at offset 1 (code 3");
    /* A second block's bad scale is named as that block's. */
    uint8_t two[8 + 4];
    memcpy(two, &s, 4);
    memcpy(two + 4, &neg, 4);
    memset(two + 8, 0, 4);
    refused(DCPS_DTYPE_I8, 2, two, 4, DCPS_E_ENCODING, "block 1 (values 2 on)");
}
END_TEST

START_TEST(sizes_and_names)
{
    ck_assert_uint_eq(dcps_quant_bytes(DCPS_DTYPE_F16, 3, 0), 6);
    ck_assert_uint_eq(dcps_quant_bytes(DCPS_DTYPE_BF16, 3, 0), 6);
    ck_assert_uint_eq(dcps_quant_bytes(DCPS_DTYPE_I8, 0, 0), 0);
    ck_assert_uint_eq(dcps_quant_bytes(DCPS_DTYPE_I8, 512, 256), 512 + 8);
    ck_assert_uint_eq(dcps_quant_bytes(DCPS_DTYPE_I8, 513, 256), 513 + 12);
    ck_assert_uint_eq(dcps_quant_bytes(DCPS_DTYPE_TWOBIT, 5, 0), 2 + 4);
    ck_assert_uint_eq(dcps_quant_bytes(DCPS_DTYPE_TWOBIT, 8, 4), 2 + 8);
    ck_assert_uint_eq(dcps_quant_bytes(DCPS_DTYPE_F32, 3, 0), 12);
    ck_assert_uint_eq(dcps_quant_bytes(DCPS_DTYPE_F64, 3, 0), 24);
    ck_assert_uint_eq(dcps_quant_bytes(8, 3, 0), 0);
    ck_assert_uint_eq(dcps_quant_bytes(DCPS_DTYPE_F16, UINT64_MAX / 2 + 1, 0), UINT64_MAX);
    ck_assert_uint_eq(dcps_quant_bytes(DCPS_DTYPE_I8, UINT64_MAX, 1), UINT64_MAX);
    ck_assert(!dcps_quant_is(DCPS_DTYPE_F32) && dcps_quant_is(DCPS_DTYPE_TWOBIT));
    ck_assert_str_eq(dcps_quant_name(DCPS_DTYPE_I8), "int8");
    ck_assert_str_eq(dcps_quant_name(9), "unknown");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("quant");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, f16_decodes_every_code_by_the_definition);
    tcase_add_test(tc, f16_rounds_to_nearest_even_at_every_midpoint);
    tcase_add_test(tc, bf16_is_the_top_half_rounded_to_nearest_even);
    tcase_add_test(tc, int8_frame_by_hand);
    tcase_add_test(tc, int8_blocks_have_their_own_scales);
    tcase_add_test(tc, int8_ties_go_to_even_codes);
    tcase_add_test(tc, twobit_frame_by_hand);
    tcase_add_test(tc, decode_refuses_what_no_encoder_makes);
    tcase_add_test(tc, sizes_and_names);
    suite_add_tcase(s, tc);
    return dcps_test_run(s);
}
