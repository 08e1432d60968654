/* dcps — value formats on the wire: float32 and its shorter encodings.
 *
 * A DENSE or VALUES frame carries its values as float32, or in one of four
 * shorter formats ([compression] values, push = twobit; docs/protocol.md,
 * section 18; docs/algorithms.md, "Fewer bits per value"):
 *   FLOAT16   IEEE 754 binary16, 2 bytes a value, round to nearest even;
 *   BFLOAT16  the top half of a binary32, 2 bytes a value, round to nearest even;
 *   INT8      symmetric 8-bit codes in -127..127 with a float32 scale per block
 *             of `block` values (0: one block, the whole frame): the frame is the
 *             blocks' scales, then the codes;
 *   TWOBIT    2-bit codes (0: 0, 1: +tau, 2: -tau; 3 is refused) packed four to a
 *             byte from the low bits up, after a float32 tau per block.
 * This module encodes (a worker's push, a shard's pull reply: it never fails)
 * and decodes with every check a value from the network needs (it refuses with
 * a code and a sentence). It owns nothing and allocates nothing. */
#ifndef DCPS_QUANT_H
#define DCPS_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The dtypes past proto/codec.h's DCPS_DTYPE_F64 (FrameDesc.dtype). */
enum dcps_qtype {
    DCPS_DTYPE_F16 = 4,
    DCPS_DTYPE_BF16 = 5,
    DCPS_DTYPE_I8 = 6,
    DCPS_DTYPE_TWOBIT = 7,
    DCPS_DTYPE_LAST = DCPS_DTYPE_TWOBIT
};

/* The block a sender of INT8 frames uses: a float32 scale per 256 values
 * (1.6% more bytes than one scale per frame; an outlier coarsens only the 255
 * values beside it, not the whole range). A receiver takes any block. */
#define DCPS_QUANT_BLOCK 256u

/* Whether dtype is one of the shorter formats above. */
bool dcps_quant_is(uint32_t dtype);

/* The blocks of a frame of `count` values: ⌈count / block⌉ for a format with
 * scales (block 0: 1 if count > 0), 0 for the others. */
uint64_t dcps_quant_blocks(uint32_t dtype, uint64_t count, uint32_t block);

/* The bytes of a frame of `count` values in dtype (float32, uint32, float64
 * or a format above) with that block, scales included; 0 for an unknown
 * dtype; UINT64_MAX when it would not fit in 64 bits. */
uint64_t dcps_quant_bytes(uint32_t dtype, uint64_t count, uint32_t block);

/* The name of a format as the job file spells it ("fp16"), or "unknown". */
const char *dcps_quant_name(uint32_t dtype);

/* One value's conversions (round to nearest even; NaN stays NaN, the
 * float16 of a value beyond ±65504 is ±Inf). */
uint16_t dcps_quant_f16(float x);
float dcps_quant_from_f16(uint16_t h);
uint16_t dcps_quant_bf16(float x);
float dcps_quant_from_bf16(uint16_t h);

/* Encodes x[0..n) (finite) in dtype into out (dcps_quant_bytes(dtype, n,
 * block) bytes, any alignment) and, when dec is not NULL, writes the values a
 * receiver decodes into dec[0..n) (dec may be x). float16 and bfloat16 clamp
 * to the largest finite value first (±65504, ±FLT_MAX), so a finite value
 * never becomes Inf; INT8's scale is max|x| / 127 over the block, rounded to
 * float32, and a code is x / scale rounded to nearest even, clamped to
 * ±127 (scale 0: every code 0); TWOBIT's tau (> 0) gives +tau to x >= tau,
 * -tau to x <= -tau and 0 to the rest. dtype DCPS_DTYPE_F32 (1) copies. */
void dcps_quant_encode(uint32_t dtype, uint32_t block, float tau, const float *x, size_t n,
                       void *out, float *dec);

/* Decodes a frame of n values in dtype (as dcps_quant_bytes sizes it; any
 * alignment) into out[0..n), checking every scale (finite, else
 * DCPS_E_NONFINITE; not negative, else DCPS_E_ENCODING), every code (INT8
 * -128 and TWOBIT 3 are DCPS_E_ENCODING, as are TWOBIT's unused high bits of
 * its last byte when not 0) and every value (a float16 or bfloat16 NaN or
 * Inf: DCPS_E_NONFINITE). Returns 0, or the code with a sentence in why
 * naming the offset; out is then partly written. dtype 1 (float32) copies
 * and checks finiteness too. */
int dcps_quant_decode(uint32_t dtype, uint32_t block, const void *in, size_t n, float *out,
                      char *why, size_t whylen);

#endif
