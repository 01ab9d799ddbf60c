/*
 * rng.h: the deterministic random numbers precgate uses (page scattering,
 * synthetic data): splitmix64 (Steele, Lea, Flood, "Fast splittable
 * pseudorandom number generators", OOPSLA 2014; constants from Vigna's
 * reference splitmix64.c).
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

#endif /* PG_RNG_H */
