/*
 * turboquant.h: vLLM's TurboQuant KV cache (the turboquant_* --kv-cache-dtype
 * presets), bit for bit: the Lloyd-Max codebook, the Hadamard rotation, the
 * cache write of one (token, KV head) slot and its unpacking as the decode
 * kernel reads it. The attention over it is attn_turboquant.c's.
 *
 * The method is Zandieh et al., "TurboQuant: Online Vector Quantization with
 * Near-optimal Distortion Rate" (ICLR 2026, arXiv:2504.19874): a key row is
 * split into its norm and its direction, the direction rotated so that each
 * coordinate is close to N(0, 1/d), and each coordinate quantized by the
 * Lloyd-Max quantizer of that distribution. vLLM's presets keep the norm in
 * fp16, use no QJL residual, and quantize values by a plain min/max grid.
 *
 * Sources (vllm-project/vllm; commits in kernels/attn_profile.c):
 *   CENTROIDS vllm/model_executor/layers/quantization/turboquant/centroids.py
 *   BACKEND   vllm/v1/attention/backends/turboquant_attn.py (_build_hadamard,
 *             _ensure_on_device, triton_turboquant_store's caller)
 *   STORE     vllm/v1/attention/ops/triton_turboquant_store.py
 *   DECODE    vllm/v1/attention/ops/triton_turboquant_decode.py
 *   CONFIG    vllm/model_executor/layers/quantization/turboquant/config.py
 */
#ifndef PG_TURBOQUANT_H
#define PG_TURBOQUANT_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "kv_cache.h"
#include "numerics.h"
#include "base/mode.h"
#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The widest Lloyd-Max codebook a preset uses (4 bits, 16 centroids). */
#define TQ_MAX_BITS 4
#define TQ_MAX_CENTROIDS (1 << TQ_MAX_BITS)
/* The head dims the rotation takes: powers of two up to this. */
#define TQ_MAX_DIM 512

/* The Lloyd-Max quantizer of N(0, 1/d) with 2^bits levels (CENTROIDS
 * solve_lloyd_max): its centroids as float32, ascending, and the midpoints
 * the cache write searches, fp32 (c_i + c_{i+1}) / 2 of the float32
 * centroids (BACKEND _ensure_on_device). */
typedef struct tq_codebook {
    int d, bits, n;                          /* n = 2^bits */
    float centroids[TQ_MAX_CENTROIDS];
    float midpoints[TQ_MAX_CENTROIDS - 1];
} tq_codebook;

/* Solves the Lloyd-Max conditions for N(0, 1/d) with 2^bits levels as
 * solve_lloyd_max does, in double (up to 200 iterations, tolerance 1e-10,
 * trapezoids of 200 steps), into *out; PG_ERR_USAGE for bits outside 1 ..
 * TQ_MAX_BITS or d < 1. */
pg_status tq_codebook_solve(int d, int bits, tq_codebook *out, pg_err *err);

/* The index of y in cb: how many midpoints are <= y (the store's binary
 * search, ties going up); 0 for NaN. */
int tq_codebook_index(const tq_codebook *cb, float y);

/* y = x . Pi^T for one row of d floats (d a power of two <= TQ_MAX_DIM):
 * Pi = H / sqrt(d), Sylvester's Hadamard matrix, symmetric, each entry
 * +-fp32(1 / fp32(sqrt(d))); fp32 products summed in j order (cuBLAS's order
 * is not public). x and y must not overlap. */
void tq_rotate_row(const float *x, int d, float *y);

/* One preset's slot layout for head dim d (CONFIG, DECODE _get_layout). */
typedef struct tq_layout {
    int d;
    int key_fp8;          /* K stored as raw e4m3 codes (turboquant_k8v4) */
    int k_bits, v_bits;   /* bits of a K index (8 for fp8) and of a V code */
    int norm_correction;  /* the "_nc" presets */
    int key_bytes;        /* MSE_BYTES: ceil(d * k_bits / 8), or d for fp8 */
    int kps;              /* key_packed_size: key_bytes, + 2 for the fp16 norm */
    int val_data_bytes;   /* ceil(d * v_bits / 8) */
    int slot_bytes;       /* kps + val_data_bytes + 4 (fp16 scale, min), rounded up to even */
} tq_layout;

/* The layout of TurboQuant mode m at head dim d; PG_ERR_USAGE for a mode that
 * is not TurboQuant's, PG_ERR_SHAPE naming d when the preset cannot take it
 * (the rotation needs a power of two up to TQ_MAX_DIM; 3-bit packing, groups
 * of 8; 4-bit, pairs). */
pg_status tq_layout_of(pg_mode m, int d, tq_layout *out, pg_err *err);

/* Writes the K half of a slot from one bf16 row (STORE): fp8 keys as
 * e4m3(x) unscaled (Triton's fp32 -> float8e4nv, nearest even, saturating);
 * MSE keys as norm = sqrt(sum k^2), y = (k / (norm + 1e-8)) . Pi^T, the
 * indices of y packed k_bits each from bit 0, then fp16(norm). The row's
 * counters go to *st (may be NULL): for MSE keys n_saturated counts the y
 * beyond the outermost centroids. */
void tq_store_key(const tq_layout *lay, const tq_codebook *cb, const uint16_t *k, uint8_t *slot,
                  fp8_quant_stats *st);

/* Writes the V half of a slot from one bf16 row (STORE _store_quantized_value):
 * scale = max((max - min) / (2^v_bits - 1), 1e-8), codes trunc((v - min) /
 * scale + 0.5) clamped, packed v_bits each, then fp16(scale), fp16(min);
 * counters to *st (may be NULL: n_underflow counts nonzero v read back as 0). */
void tq_store_value(const tq_layout *lay, const uint16_t *v, uint8_t *slot, fp8_quant_stats *st);

/* The n-bit field j of a packed array as the decode kernel reads it: two
 * bytes from bit j*bits, little endian, shifted and masked. */
unsigned tq_unpack(const uint8_t *packed, int bits, int j);

/* A slot's key indices (or e4m3 codes) into idx[d] and its fp16 norm (1 for
 * fp8 keys) as fp32. */
float tq_read_key(const tq_layout *lay, const uint8_t *slot, uint8_t *idx);

/* A slot's value codes into codes[d], its fp16 scale and min as fp32. */
void tq_read_value(const tq_layout *lay, const uint8_t *slot, uint8_t *codes, float *scale,
                   float *min);

/* One layer's TurboQuant cache: a slot per (token, KV head), [Tkv][hkv] in
 * the batch's packed token order (pages do not change a value here: the
 * decode kernel reads every slot through the block table alike). */
typedef struct tq_cache {
    tq_layout lay;
    tq_codebook cb;     /* MSE keys only */
    size_t n_rows;      /* Tkv * hkv */
    int hkv;
    uint8_t *slots;     /* [n_rows][lay.slot_bytes] */
} tq_cache;

/* Writes batch b's packed bf16 k/v [Tkv, hkv, d] into a new cache of mode m
 * (tq_layout_of's errors), the counters of each tensor added to kq / vq (may
 * be NULL). */
pg_status tq_cache_write(pg_mode m, const attn_batch *b, const uint16_t *k, const uint16_t *v,
                         tq_cache *out, fp8_quant_stats *kq, fp8_quant_stats *vq, pg_err *err);

/* The slot of packed key row `row` (token * hkv + head). */
static inline const uint8_t *tq_cache_slot(const tq_cache *c, size_t row)
{
    return c->slots + row * (size_t)c->lay.slot_bytes;
}

/* Adds the codes (which = 0 K indices or e4m3 codes, 1 V codes) and row
 * scales (K's norms, V's scales; at the floor: a zero norm, a 1e-8 scale) of
 * every slot of c to *st (zeroed by the caller). */
void tq_cache_code_stats(const tq_cache *c, int which, kv_code_stats *st);

/* Frees the cache's slots and zeroes it. */
void tq_cache_free(tq_cache *c);

#ifdef __cplusplus
}
#endif

#endif /* PG_TURBOQUANT_H */
