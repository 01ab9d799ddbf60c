/*
 * rng.h: the deterministic random numbers precgate uses (page scattering,
 * synthetic data, the bootstrap, the HTTP client's retry jitter; part of
 * base/, the foundation every folder may use): splitmix64 (Steele, Lea, Flood, "Fast
 * splittable pseudorandom number generators", OOPSLA 2014; constants from
 * Vigna's reference splitmix64.c) and xoshiro256** (Blackman & Vigna,
 * "Scrambled linear pseudorandom number generators", ACM TOMS 47(4), 2021;
 * reference xoshiro256starstar.c, prng.di.unimi.it).
 */
#ifndef PG_RNG_H
#define PG_RNG_H

#include <stdint.h>

/* Advances *state and returns the next 64 random bits. */
static inline uint64_t rng_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A uniform integer in [0, n) (n > 0), by Lemire's multiply-shift (bias < n / 2^64). */
static inline uint64_t rng_below(uint64_t *state, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)rng_splitmix64(state) * n) >> 64);
}

/* xoshiro256** state. */
typedef struct rng_xoshiro256 {
    uint64_t s[4];
} rng_xoshiro256;

/* x rotated left by k bits, 0 < k < 64. */
static inline uint64_t rng_rotl64(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* Seeds r with four splitmix64 outputs from seed (the seeding Blackman &
 * Vigna recommend; the state is never all zero). */
static inline void rng_xoshiro_seed(rng_xoshiro256 *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) r->s[i] = rng_splitmix64(&seed);
}

/* The next 64 random bits of xoshiro256**. */
static inline uint64_t rng_xoshiro_next(rng_xoshiro256 *r)
{
    uint64_t *s = r->s;
    const uint64_t result = rng_rotl64(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rng_rotl64(s[3], 45);
    return result;
}

/* A uniform double in the open interval (0, 1): 53 random bits plus half an ulp. */
static inline double rng_xoshiro_open01(rng_xoshiro256 *r)
{
    return ((double)(rng_xoshiro_next(r) >> 11) + 0.5) * 0x1.0p-53;
}

/* A uniform integer in [0, n) (n > 0), by Lemire's multiply-shift (bias <
 * n / 2^64): what the synthetic captures are drawn with. */
static inline uint64_t rng_xoshiro_below(rng_xoshiro256 *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)rng_xoshiro_next(r) * n) >> 64);
}

/* A uniform integer in [0, bound) (bound > 0), exactly, by rejection of the
 * 2^64 mod bound lowest draws: what the stored bootstrap intervals are drawn with. */
static inline uint64_t rng_xoshiro_below_exact(rng_xoshiro256 *r, uint64_t bound)
{
    const uint64_t threshold = (0 - bound) % bound; /* 2^64 mod bound */
    for (;;) {
        const uint64_t v = rng_xoshiro_next(r);
        if (v >= threshold) return v % bound;
    }
}

/* Advances r by 2^128 draws, for non-overlapping parallel streams (the jump
 * polynomial of the reference xoshiro256starstar.c, jump()). */
static inline void rng_xoshiro_jump(rng_xoshiro256 *r)
{
    static const uint64_t jump[4] = {0x180ec6d33cfd0abaull, 0xd5a61266f0c9392cull,
                                     0xa9582618e03fc9aaull, 0x39abdc4529b1661cull};
    uint64_t t[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++)
        for (int b = 0; b < 64; b++) {
            if (jump[i] & ((uint64_t)1 << b))
                for (int j = 0; j < 4; j++) t[j] ^= r->s[j];
            (void)rng_xoshiro_next(r);
        }
    for (int j = 0; j < 4; j++) r->s[j] = t[j];
}

#endif /* PG_RNG_H */
