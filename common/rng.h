/* dcps — a small deterministic pseudo-random number generator.
 *
 * xoshiro256** (Blackman & Vigna, 2018) with its state seeded from one 64-bit
 * value through splitmix64. The integer sequence depends only on the seed, so
 * every platform draws the same numbers; dcps_rng_normal() also goes through
 * libm's log/cos and may differ in the last bit between libm versions. Not for
 * cryptography. A generator is a plain value: copy it to fork a stream, and use
 * one per thread. */
#ifndef DCPS_RNG_H
#define DCPS_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t s[4];
} dcps_rng_t;

/* Sets the state from seed; any seed, 0 included, gives a usable state. */
void dcps_rng_seed(dcps_rng_t *r, uint64_t seed);

/* The next 64 random bits. */
uint64_t dcps_rng_next(dcps_rng_t *r);

/* Uniform in [0, 1), from the top 53 bits of one draw. */
double dcps_rng_uniform(dcps_rng_t *r);

/* Standard normal (mean 0, std 1) by Box-Muller; two draws per call. */
float dcps_rng_normal(dcps_rng_t *r);

/* Uniform in [0, n) without modulo bias; 0 when n is 0. */
uint64_t dcps_rng_below(dcps_rng_t *r, uint64_t n);

/* Permutes a[0..n) uniformly in place (Fisher-Yates). */
void dcps_rng_shuffle_u32(dcps_rng_t *r, uint32_t *a, size_t n);

#endif
