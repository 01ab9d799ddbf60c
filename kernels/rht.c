/* rht.c: vLLM's randomized Hadamard transform (see rht.h). */
#include "rht.h"

#include <stdlib.h>
#include <string.h>

#include "numerics.h"

/* MT19937's parameters (Matsumoto & Nishimura, "Mersenne Twister", ACM
 * TOMACS 8(1), 1998; reference mt19937ar.c). */
#define MT_N 624
#define MT_M 397
#define MT_MATRIX_A 0x9908B0DFu
#define MT_UPPER_MASK 0x80000000u
#define MT_LOWER_MASK 0x7FFFFFFFu
#define MT_INIT_MULTIPLIER 1812433253u

/* The bit of a draw that decides a sign: the top bit of the 24 that
 * uniform_real<float> keeps, u < 0.5 exactly when it is 0 (rht.h). */
#define RHT_SIGN_BIT 23

int rht_dim_ok(int d)
{
    return d >= 2 && d <= RHT_MAX_DIM && (d & (d - 1)) == 0;
}

void rht_mt19937(uint32_t seed, uint32_t *out, size_t n)
{
    uint32_t mt[MT_N];
    mt[0] = seed;
    for (uint32_t i = 1; i < MT_N; i++)
        mt[i] = MT_INIT_MULTIPLIER * (mt[i - 1] ^ (mt[i - 1] >> 30)) + i;
    int next = MT_N;
    for (size_t k = 0; k < n; k++) {
        if (next >= MT_N) { /* regenerate the whole state */
            for (int i = 0; i < MT_N; i++) {
                const uint32_t y = (mt[i] & MT_UPPER_MASK) | (mt[(i + 1) % MT_N] & MT_LOWER_MASK);
                mt[i] = mt[(i + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? MT_MATRIX_A : 0u);
            }
            next = 0;
        }
        uint32_t y = mt[next++];
        y ^= y >> 11;
        y ^= (y << 7) & 0x9D2C5680u;
        y ^= (y << 15) & 0xEFC60000u;
        y ^= y >> 18;
        out[k] = y;
    }
}

void rht_signs(uint32_t seed, int d, float *signs)
{
    uint32_t draws[RHT_MAX_DIM];
    const int n = d < RHT_MAX_DIM ? d : RHT_MAX_DIM;
    rht_mt19937(seed, draws, (size_t)n);
    for (int i = 0; i < n; i++) signs[i] = ((draws[i] >> RHT_SIGN_BIT) & 1u) ? -1.0f : 1.0f;
}

void rht_fwht_f32(float *x, int d)
{
    for (int h = 1; h < d; h *= 2) {
        for (int base = 0; base < d; base += 2 * h) {
            for (int i = base; i < base + h; i++) {
                const float a = x[i], b = x[i + h];
                x[i] = a + b;
                x[i + h] = a - b;
            }
        }
    }
}

void rht_forward_bf16_rows(uint16_t *rows, size_t n, int d, const float *signs)
{
    float x[RHT_MAX_DIM];
    for (size_t r = 0; r < n; r++) {
        uint16_t *row = rows + r * (size_t)d;
        for (int i = 0; i < d; i++) x[i] = bf16_to_f32(row[i]) * signs[i];
        rht_fwht_f32(x, d);
        for (int i = 0; i < d; i++) row[i] = bf16_from_f32(x[i]);
    }
}

uint16_t *rht_forward_bf16_copy(const uint16_t *rows, size_t n, int d, const float *signs)
{
    const size_t bytes = n * (size_t)d * sizeof *rows;
    uint16_t *copy = malloc(bytes + 1);
    if (copy == NULL) return NULL;
    memcpy(copy, rows, bytes);
    rht_forward_bf16_rows(copy, n, d, signs);
    return copy;
}

void rht_inverse_bf16_rows(uint16_t *rows, size_t n, int d, const float *signs)
{
    float x[RHT_MAX_DIM];
    const float inv_d = 1.0f / (float)d; /* exact: d is a power of two */
    for (size_t r = 0; r < n; r++) {
        uint16_t *row = rows + r * (size_t)d;
        for (int i = 0; i < d; i++) x[i] = bf16_to_f32(row[i]);
        rht_fwht_f32(x, d);
        for (int i = 0; i < d; i++) row[i] = bf16_from_f32(x[i] * signs[i] * inv_d);
    }
}
