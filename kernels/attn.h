/*
 * attn.h: prefill attention in each precision mode, as a CPU specification.
 *
 * Each mode is a statement of where rounding happens; this CPU code is that
 * statement, and GPU kernels are held against it.
 *
 * Shared by all modes (one layer of a packed, causal, varlen batch):
 *   Query token j of sequence s (context c = seq_kv[s] - seq_q[s]) attends
 *   keys c+j-W+1 .. c+j when the window W > 0, else 0 .. c+j. Query head h
 *   reads kv head h / (hq / hkv) (grouped-query attention).
 *   Softmax uses the final row max (two passes: all scores first, then
 *   exponentials): m = max(sink_h, max_t S_t), l = exp(sink_h - m) + sum_t
 *   exp(S_t - m); the sink logit is not multiplied by sm_scale and has no
 *   value vector (gpt-oss, openai/gpt-oss gpt_oss/torch/model.py `sdpa`).
 *   The tiled fp8qkv profiles (@fa3, @fa3-1level, @trtllm, @flashinfer-fa3)
 *   keep a running max per key tile instead, as their kernels do.
 *
 * reference: fp64 throughout from the bf16 inputs, exact exp (see
 *   attn_reference.c for its error bound).
 * bf16:      S_t = (sum_d q_d k_td in fp32, d ascending) * sm_scale in fp32;
 *   P_t = expf(S_t - m) in fp32; l summed in fp32 (sink term first, then t
 *   ascending); O_d = bf16( (sum_t bf16(P_t) v_td in fp32, t ascending) / l ).
 * fp8kv:     K, V are written into a paged e4m3 cache (x / scale, saturating,
 *   nearest even) through a scattered block table (page 0 = null page); the
 *   dequant step of vLLM PR #24197 gathers this prefill's pages into a compact
 *   bf16 cache (bf16(fp8 * scale)) with block table 1..B*P; then bf16 runs on it
 *   with the scales of the profile (@fixed: sm_scale alone).
 * fp8qkv:    Q, K, V in e4m3 with their scales, K/V read straight from the
 *   paged fp8 cache; the profile says how S, the softmax, P's rounding and the
 *   sums are taken (@ideal: as bf16 above with exact fp32 sums of exact fp8
 *   products, S scaled by fp32(q_scale*k_scale*sm_scale), P = e4m3(expf(S - m))
 *   unscaled, O = bf16(acc * v_scale / l); the others: their kernel's tiles,
 *   P scaling and fp8 accumulation, kernels/fp8_mma.h).
 * Profiles (MODE@PROFILE), their rules and sources: attn_profile.h and
 * `precgate help profiles`; attn_variant_run runs one.
 * attn_quant_options.quantize = 0 (for the identity tests) means no fp8 anywhere:
 * Q, K, V stay bf16, P is rounded to bf16 where the profile rounds it to e4m3,
 * and the scales are not used (as if 1.0). Then fp8kv@fixed, fp8kv@vllm-24197
 * and fp8qkv@ideal equal bf16 bit for bit (tests/test_attn.c holds it).
 * attn_quant_options.keep_bf16 does the same for the tensors it names alone
 * (per-tensor attribution): all four kept equals quantize = 0 bit for bit
 * (tests/test_hypothesis.c).
 */
#ifndef PG_ATTN_H
#define PG_ATTN_H

#include <stdint.h>

#include "numerics.h"
#include "base/mode.h"
#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One layer's batch shape. */
typedef struct attn_batch {
    int n_seqs;
    const int32_t *seq_q;   /* [n_seqs] new tokens */
    const int32_t *seq_kv;  /* [n_seqs] context + new tokens */
    int hq, hkv, d;
    int window;             /* 0 = full causal, else keys seen including self */
    float sm_scale;
    const float *sinks;     /* [hq] sink logits, or NULL */
} attn_batch;

/* The tensors a quantized mode may quantize, as bits of attn_quant_options.keep_bf16. */
typedef enum attn_tensor {
    ATTN_TENSOR_Q = PG_TENSOR_Q,
    ATTN_TENSOR_K = PG_TENSOR_K,
    ATTN_TENSOR_V = PG_TENSOR_V,
    ATTN_TENSOR_P = PG_TENSOR_P
} attn_tensor;
/* Every bit of attn_tensor. */
#define ATTN_TENSORS_ALL 15u

/* Options of the quantized modes, whatever their format (base/mode.h): the
 * per-tensor scales, the paged cache's shape and what stays bf16. */
typedef struct attn_quant_options {
    int quantize;             /* 0: keep bf16 where fp8 would go (for the identity tests) */
    float q_scale, k_scale, v_scale;
    int block_size;           /* KV page size: 16, 32 or 64 */
    uint64_t page_seed;       /* scatters the pages of the paged cache */
    unsigned keep_bf16;       /* attn_tensor bits: tensors the profile would quantize that stay
                               * bf16 here, their scale unused (as 1.0), every other rounding of
                               * the profile kept (per-tensor attribution, run --attribute);
                               * 0: the profile as it is. The CPU specification only: other
                               * backends refuse a nonzero mask */
} attn_quant_options;

/* Checks quantized-mode options: present, block size 16/32/64, finite positive
 * scales, keep_bf16 within ATTN_TENSORS_ALL; PG_ERR_USAGE / PG_ERR_NUMERIC
 * naming what is wrong. Every backend
 * checks the same (the GPU's bf16 path needs them too, for its paged cache). */
pg_status attn_quant_options_check(const attn_quant_options *opt, pg_err *err);

/* What quantization did to each tensor (filled by the fp8 modes). */
typedef struct attn_quant_report {
    fp8_quant_stats q, k, v;  /* q stays zero for fp8kv */
} attn_quant_report;

/* Checks shapes and options: positive sizes, hq % hkv == 0, seq_kv >= seq_q >= 1,
 * window >= 0, finite positive sm_scale; PG_ERR_SHAPE / PG_ERR_USAGE otherwise. */
pg_status attn_batch_check(const attn_batch *b, pg_err *err);

/* Total query tokens and kv tokens of the batch. */
int64_t attn_batch_tq(const attn_batch *b);
int64_t attn_batch_tkv(const attn_batch *b);

/* fp64 reference: q bf16 [Tq,hq,d], k/v bf16 [Tkv,hkv,d] -> out fp64 [Tq,hq,d]. */
pg_status attn_reference(const attn_batch *b, const uint16_t *q, const uint16_t *k,
                         const uint16_t *v, double *out, int n_threads, pg_err *err);

/* bf16 mode -> out bf16 [Tq,hq,d] (attn_variant_run with the bf16 profile). */
pg_status attn_variant_bf16(const attn_batch *b, const uint16_t *q, const uint16_t *k,
                            const uint16_t *v, uint16_t *out, int n_threads, pg_err *err);

/* Floating-point operations of one attention pass over the batch
 * (4 * d per attended (query, key) pair, the usual attention count). */
double attn_batch_flops(const attn_batch *b);

#ifdef __cplusplus
}
#endif

#endif /* PG_ATTN_H */
