/*
 * kv_cache.h: the paged KV cache of vLLM's FlashInfer/TRT-LLM path and the
 * dequant gather of vLLM PR #24197.
 *
 * Layout (HND, vllm/v1/attention/backends/flashinfer.py): elements
 * [n_pages, 2, hkv, block_size, d], K then V in each page; a block table
 * [n_seqs, pages_per_seq] maps a sequence's page p to a page id; id 0 is the
 * null page (vllm/v1/core/block_pool.py) and ids <= 0 mean "no page".
 */
#ifndef PG_KV_CACHE_H
#define PG_KV_CACHE_H

#include <stdint.h>

#include "attn.h"
#include "numerics.h"
#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A paged cache and its block table. */
typedef struct kv_paged {
    pg_number_format elem;    /* what one element is: bf16 bits or a code of the format */
    int n_seqs, hkv, d, block_size;
    int64_t n_pages;          /* including page 0 */
    int pages_per_seq;        /* block-table width */
    void *data;               /* [n_pages, 2, hkv, block_size, d] */
    int32_t *block_table;     /* [n_seqs, pages_per_seq] */
    float *scales;            /* per-token-head and block-scaled caches: scales_per_row fp32
                               * scales per (page, K or V, head, slot), [n_pages, 2, hkv,
                               * block_size, scales_per_row] (NaN where unwritten); NULL
                               * for per-tensor scales */
    int scales_per_row;       /* 1 per (token, KV head); d / NVFP4_BLOCK for nvfp4; 0: none */
} kv_paged;

/* Bytes of one element of format e (numerics.h fp_codec_of). */
size_t kv_elem_size(pg_number_format e);

/* Pointer to element 0 of (page, which = 0 K / 1 V, head, slot). */
const void *kv_paged_row(const kv_paged *c, int64_t page, int which, int head, int slot);

/* The scattered block table kv_paged_write uses: pages from a seeded
 * permutation of 1..n_pages-1 (n_pages includes page 0 and spare pages),
 * entries past a sequence's pages 0. *table is malloc'd [n_seqs, *pages_per_seq]. */
pg_status kv_block_table_build(const attn_batch *b, int block_size, uint64_t page_seed,
                               int64_t *n_pages, int *pages_per_seq, int32_t **table,
                               pg_err *err);

/* Writes packed bf16 k/v [Tkv, hkv, d] into a new paged cache of element
 * type elem (a code format: its codec's x / scale; bf16: bits copied, scales unused).
 * Pages come from a seeded permutation of 1..n_pages-1 so neighbours are not
 * adjacent; slots past a sequence's end and page 0 hold NaN so that a read
 * outside the batch shows in the output. Adds to kstats/vstats (may be NULL). */
pg_status kv_paged_write(const attn_batch *b, const uint16_t *k, const uint16_t *v, pg_number_format elem,
                         float k_scale, float v_scale, uint64_t page_seed, int block_size,
                         kv_paged *out, fp8_quant_stats *kstats, fp8_quant_stats *vstats,
                         pg_err *err);

/* The same for vLLM's per-token-head caches: codes of elem, each (token,
 * KV head) row with its own scale (its codec's quantize_bf16_per_token_head,
 * PG_ERR_UNSUPPORTED when it has none) in out->scales. */
pg_status kv_paged_write_per_token_head(const attn_batch *b, const uint16_t *k,
                                        const uint16_t *v, pg_number_format elem,
                                        uint64_t page_seed, int block_size,
                                        kv_paged *out, fp8_quant_stats *kstats,
                                        fp8_quant_stats *vstats, pg_err *err);

/* vLLM's nvfp4 cache of packed bf16 k/v (kv_paged_write's layout and
 * seeding): e2m1 codes with each row's e4m3 block scales (scales_per_row =
 * d / NVFP4_BLOCK, decoded) from nvfp4_quantize_bf16_row with the global
 * scales 1 / k_scale and 1 / v_scale; PG_ERR_SHAPE when d is no multiple of
 * NVFP4_BLOCK. Adds to kstats/vstats (may be NULL). */
pg_status kv_paged_write_nvfp4(const attn_batch *b, const uint16_t *k, const uint16_t *v,
                               float k_scale, float v_scale, uint64_t page_seed, int block_size,
                               kv_paged *out, fp8_quant_stats *kstats, fp8_quant_stats *vstats,
                               pg_err *err);

/* The e4m3 cache (same pages and block table, no scales) that an nvfp4
 * cache src becomes when a kernel converts it to its fp8 Q's type: each
 * code e4m3(e2m1 x block scale), or e4m3(e2m1) with block_scales_dropped;
 * unwritten slots stay NaN (trtllm-gen's transformsKv, inferred: kernels
 * /attn_profile.c nvfp4kv@trtllm-gen). */
pg_status kv_nvfp4_to_e4m3(const kv_paged *src, int block_scales_dropped, kv_paged *out,
                           pg_err *err);

/* The first scale of row (page, which = 0 K / 1 V, head, slot) of a cache
 * with scales (scales_per_row of them); NULL when c has per-tensor scales. */
float *kv_paged_scale_at(const kv_paged *c, int64_t page, int which, int head, int slot);

/* vLLM PR #24197's dequant: from src (codes of any format, or bf16; per-tensor scales) build a compact bf16
 * cache of n_seqs*pages_per_seq + 1 pages, block table arange(1, B*P+1);
 * page b*P+p+1 = bf16(decode(src page) * scale) when src id > 0, else left
 * unwritten (NaN here; uninitialised torch.empty there). */
pg_status kv_dequant_gather(const kv_paged *src, float k_scale, float v_scale, kv_paged *out,
                            pg_err *err);

/* The cache write of a mode whose K/V format is elem at granularity g
 * (base/mode.h): kv_paged_write with the per-tensor scales, kv_paged_write_nvfp4
 * with them as global scales, or kv_paged_write_per_token_head; PG_ERR_INTERNAL
 * for a granularity without scales. */
pg_status kv_paged_write_mode(const attn_batch *b, const uint16_t *k, const uint16_t *v,
                              pg_number_format elem, pg_scale_granularity g, float k_scale,
                              float v_scale, uint64_t page_seed, int block_size, kv_paged *out,
                              fp8_quant_stats *kstats, fp8_quant_stats *vstats, pg_err *err);

/* Codes a histogram holds: every byte value. */
#define KV_CODE_VALUES 256

/* What a cache holds for one tensor, beside the write's fp8_quant_stats:
 * how often each code was written and the spread of its row or block
 * scales (issue #30: quant_stats fitted to the format). */
typedef struct kv_code_stats {
    uint64_t hist[KV_CODE_VALUES]; /* written codes, by code byte */
    uint64_t n_codes;              /* their sum */
    uint64_t n_scales;             /* row or block scales written (0: per-tensor) */
    uint64_t n_scales_at_floor;    /* of them: a per-token-head row at its 1e-6 floor, or an
                                    * nvfp4 block whose scale is 0 (an all-zero block) */
    double scale_min, scale_max, scale_sum; /* over the scales, as the reader splits them */
} kv_code_stats;

/* Adds one row or block scale x to *st's count, min, max and sum, and to
 * its floor count when at_floor. */
void kv_code_stats_add_scale(kv_code_stats *st, double x, int at_floor);

/* Adds the codes and scales that batch b's tokens occupy in c (which = 0 K,
 * 1 V) to *st (zeroed by the caller before the first add). */
void kv_paged_code_stats(const kv_paged *c, const attn_batch *b, int which, kv_code_stats *st);

/* Distinct codes written, and the Shannon entropy of their histogram in bits
 * (0 when nothing was written). */
int kv_code_stats_used(const kv_code_stats *st);
double kv_code_stats_entropy_bits(const kv_code_stats *st);

/* What mode m's cache write does to one layer's packed bf16 k and v: a
 * TurboQuant preset's slots (turboquant.h tq_cache_write, which ignores the
 * scales and paging); else its rotation when it has one (rht.h), then kv_paged_write_mode with the
 * per-tensor scales k_scale / v_scale where the mode uses them; the write's
 * counters into *kq / *vq and its codes and scales into *kc / *vc (all
 * zeroed first). A per-tensor format without rotation (e4m3, e5m2) is
 * counted straight from k and v on n_threads threads, without a cache: the
 * same numbers as the write's (its codes do not depend on the paging).
 * PG_ERR_USAGE for a mode that keeps K and V bf16; the write's errors (a
 * head dim the format or rotation cannot take); PG_ERR_NOMEM. */
pg_status kv_mode_code_stats(pg_mode m, const attn_batch *b, const uint16_t *k, const uint16_t *v,
                             float k_scale, float v_scale, uint64_t page_seed, int block_size,
                             int n_threads, fp8_quant_stats *kq, fp8_quant_stats *vq,
                             kv_code_stats *kc, kv_code_stats *vc, pg_err *err);

/* 1 when kv_mode_code_stats gives modes a and b the same numbers for the
 * same inputs: their cache writes are one (format, scale granularity,
 * rotation; a TurboQuant preset only itself), e.g. fp8kv and fp8qkv. */
int kv_mode_same_cache_write(pg_mode a, pg_mode b);

/* Frees the cache's buffers and zeroes it. */
void kv_paged_free(kv_paged *c);

#ifdef __cplusplus
}
#endif

#endif /* PG_KV_CACHE_H */
