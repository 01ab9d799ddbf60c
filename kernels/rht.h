/*
 * rht.h: the randomized Hadamard transform of vLLM's int4_per_token_head
 * cache (issue #30), bit for bit where vLLM's arithmetic is known.
 *
 * vLLM (vllm/v1/attention/ops/triton_quant_kv/_hadamard.py, PR #40835):
 *   single_rht(x) = fast_hadamard_transform(x * signs), inverse
 *   fast_hadamard_transform(x) * signs; H is Sylvester's d x d matrix,
 *   unnormalized (H H = d I), d a power of two; the signs are
 *   2 * torch.bernoulli(torch.full((d,), 0.5), generator=gen) - 1 with a CPU
 *   torch.Generator seeded RHT_SIGN_SEED, the same vector for every layer
 *   and for Q, K and V.
 * The signs are PyTorch's: MT19937 seeded with the seed's low 32 bits
 * (aten/src/ATen/core/MT19937RNGEngine.h), one 32-bit draw per element,
 * u = (draw & (2^24 - 1)) * 2^-24 (transformation::uniform_real for float),
 * bernoulli = u < p (at::bernoulli_distribution<float>); with p = 0.5 a sign
 * is +1 exactly when bit 23 of the draw is 0. bench/gpu_formats.sh checks
 * them against torch on the device.
 */
#ifndef PG_RHT_H
#define PG_RHT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The seed of vLLM's sign generator: 0x9E3779B9 + round_idx * 0x517CC1B7
 * with round_idx 0 (_hadamard.py). */
#define RHT_SIGN_SEED 0x9E3779B9u

/* Largest head dim the transform takes (vLLM serves up to 256; 512 spare). */
#define RHT_MAX_DIM 512

/* 1 when d is a power of two in [2, RHT_MAX_DIM] (vLLM asserts d & (d - 1) == 0). */
int rht_dim_ok(int d);

/* The first n outputs of MT19937 seeded with seed (the reference
 * init_genrand of Matsumoto and Nishimura, as PyTorch's engine). */
void rht_mt19937(uint32_t seed, uint32_t *out, size_t n);

/* vLLM's d signs (+1.0f / -1.0f) into signs[d] for the generator seeded
 * seed (RHT_SIGN_SEED in vLLM); d <= RHT_MAX_DIM. */
void rht_signs(uint32_t seed, int d, float *signs);

/* Sylvester's unnormalized Hadamard transform of x[d] in place, in fp32:
 * radix-2 butterflies (a + b, a - b) with strides 1, 2, 4, ... (the order
 * of _hadamard.py's PyTorch fallback). rht_dim_ok(d). */
void rht_fwht_f32(float *x, int d);

/* The forward transform of vLLM's cache write and Q: bf16 rows [n][d] to
 * bf16(fwht(x * signs)) in place (`single_rht(x.float()).to(x.dtype)`). */
void rht_forward_bf16_rows(uint16_t *rows, size_t n, int d, const float *signs);

/* A malloc'd copy of bf16 rows [n][d] through rht_forward_bf16_rows; NULL
 * when it cannot be allocated. Free with free(). */
uint16_t *rht_forward_bf16_copy(const uint16_t *rows, size_t n, int d, const float *signs);

/* The output's inverse: bf16 rows [n][d] to bf16(fwht(x) * signs / d) in
 * place (`single_rht(out.float(), inverse=True) / head_size`). */
void rht_inverse_bf16_rows(uint16_t *rows, size_t n, int d, const float *signs);

#ifdef __cplusplus
}
#endif

#endif /* PG_RHT_H */
