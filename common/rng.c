/* dcps — xoshiro256** seeded by splitmix64; see rng.h.
 *
 * Reference: https://prng.di.unimi.it/xoshiro256starstar.c and splitmix64.c. */
#include "common/rng.h"

#include <math.h>

static const double two_pi = 6.283185307179586476925;

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

void dcps_rng_seed(dcps_rng_t *r, uint64_t seed)
{
    /* splitmix64 never yields four zero words, the one state xoshiro must avoid. */
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

uint64_t dcps_rng_next(dcps_rng_t *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double dcps_rng_uniform(dcps_rng_t *r)
{
    return (double)(dcps_rng_next(r) >> 11) * 0x1.0p-53;
}

float dcps_rng_normal(dcps_rng_t *r)
{
    /* u1 in (0, 1] keeps log() finite. Only the cosine half is used, so the
     * state advances by exactly two draws per call. */
    double u1 = 1.0 - dcps_rng_uniform(r);
    double u2 = dcps_rng_uniform(r);
    return (float)(sqrt(-2.0 * log(u1)) * cos(two_pi * u2));
}

uint64_t dcps_rng_below(dcps_rng_t *r, uint64_t n)
{
    if (n == 0)
        return 0;
    /* Reject the lowest 2^64 mod n values so that the rest split evenly into n
     * classes; the loop runs more than once with probability below n / 2^64. */
    uint64_t threshold = -n % n;
    for (;;) {
        uint64_t x = dcps_rng_next(r);
        if (x >= threshold)
            return x % n;
    }
}

void dcps_rng_shuffle_u32(dcps_rng_t *r, uint32_t *a, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)dcps_rng_below(r, i);
        uint32_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}
