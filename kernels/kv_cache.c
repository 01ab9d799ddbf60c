/* kv_cache.c: paged KV-cache write and vLLM PR #24197's dequant gather (see kv_cache.h). */
#include "kv_cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "parallel.h"
#include "rht.h"
#include "turboquant.h"

/* bf16 bits of a quiet NaN: what unwritten cache slots hold. */
#define KV_BF16_NAN_BITS 0x7FC0u
/* binary32 bits of a quiet NaN: what unwritten per-token-head scales hold. */
#define KV_F32_NAN_BITS 0x7FC00000u
/* Spare pages beyond those the batch needs, as a fraction of them, so that
 * page ids are sparse as in a cache shared with other requests. */
#define KV_SPARE_PAGE_FRACTION 4

size_t kv_elem_size(pg_number_format e)
{
    return fp_codec_of(e)->bytes;
}

/* Elements in one page (K and V). */
static size_t page_elems(const kv_paged *c)
{
    return (size_t)2 * (size_t)c->hkv * (size_t)c->block_size * (size_t)c->d;
}

const void *kv_paged_row(const kv_paged *c, int64_t page, int which, int head, int slot)
{
    size_t idx = (size_t)page * page_elems(c) +
                 (((size_t)which * (size_t)c->hkv + (size_t)head) * (size_t)c->block_size +
                  (size_t)slot) * (size_t)c->d;
    return (const char *)c->data + idx * kv_elem_size(c->elem);
}

/* Fills n elements at p with the NaN of elem. */
static void fill_nan(void *p, size_t n, pg_number_format elem)
{
    if (elem != PG_FORMAT_BF16) {
        memset(p, fp_codec_of(elem)->nan_code, n * fp_codec_of(elem)->bytes);
    } else {
        uint16_t *h = p;
        for (size_t i = 0; i < n; i++) h[i] = KV_BF16_NAN_BITS;
    }
}

/* Allocates c's page buffer (NaN-filled), a zeroed block table and, when
 * c->scales_per_row > 0, that many scales per row (NaN-filled). */
static pg_status kv_paged_alloc(kv_paged *c, pg_err *err)
{
    size_t n = (size_t)c->n_pages * page_elems(c);
    const size_t n_scales = n / (size_t)c->d * (size_t)c->scales_per_row;
    c->data = malloc(n * kv_elem_size(c->elem) + 1);
    c->block_table = calloc((size_t)c->n_seqs * (size_t)c->pages_per_seq + 1, sizeof(int32_t));
    if (c->scales_per_row > 0) c->scales = malloc(n_scales * sizeof(float) + 1);
    if (c->data == NULL || c->block_table == NULL || (c->scales_per_row > 0 && c->scales == NULL)) {
        kv_paged_free(c);
        return pg_fail(err, PG_ERR_NOMEM, "paged KV cache: cannot allocate %lld pages",
                       (long long)c->n_pages);
    }
    fill_nan(c->data, n, c->elem);
    if (c->scales != NULL) /* slots never written read a NaN scale */
        for (size_t i = 0; i < n_scales; i++) c->scales[i] = f32_from_bits(KV_F32_NAN_BITS);
    return PG_OK;
}

pg_status kv_block_table_build(const attn_batch *b, int block_size, uint64_t page_seed,
                               int64_t *n_pages, int *pages_per_seq, int32_t **table,
                               pg_err *err)
{
    *table = NULL;
    if (block_size <= 0)
        return pg_fail(err, PG_ERR_USAGE, "paged KV cache: block size %d must be positive",
                       block_size);
    int64_t needed = 0;
    int width = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        int pages = (b->seq_kv[s] + block_size - 1) / block_size;
        needed += pages;
        if (pages > width) width = pages;
    }
    const int64_t total = 1 + needed + needed / KV_SPARE_PAGE_FRACTION;
    if (total > INT32_MAX)
        return pg_fail(err, PG_ERR_SHAPE, "paged KV cache: %lld pages exceed int32 page ids",
                       (long long)needed);
    int32_t *bt = calloc((size_t)b->n_seqs * (size_t)width + 1, sizeof *bt);
    int32_t *ids = malloc((size_t)total * sizeof *ids);
    if (bt == NULL || ids == NULL) {
        free(bt);
        free(ids);
        return pg_fail(err, PG_ERR_NOMEM, "paged KV cache: cannot allocate the block table");
    }
    /* Scatter: a Fisher-Yates permutation of the ids 1..total-1. */
    const int64_t n_ids = total - 1;
    for (int64_t i = 0; i < n_ids; i++) ids[i] = (int32_t)(i + 1);
    uint64_t rng = page_seed;
    for (int64_t i = n_ids - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_below(&rng, (uint64_t)i + 1);
        int32_t t = ids[i];
        ids[i] = ids[j];
        ids[j] = t;
    }
    int64_t next = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        int pages = (b->seq_kv[s] + block_size - 1) / block_size;
        for (int p = 0; p < pages; p++) bt[(size_t)s * (size_t)width + (size_t)p] = ids[next++];
    }
    free(ids);
    *n_pages = total;
    *pages_per_seq = width;
    *table = bt;
    return PG_OK;
}

/* Writes one (token, KV head) row of d bf16 values src into the cache row
 * dst: bits copied (bf16), the codes of x / the per-tensor scale (its codec),
 * the nvfp4 codes and block scales (global scale 1 / scale) into scale_out,
 * or, with scale_out != NULL, the per-token-head codes and *scale_out. */
static void write_row(pg_number_format elem, const uint16_t *src, size_t d, float scale,
                      void *dst, float *scale_out, fp8_quant_stats *stats)
{
    const fp_codec *c = fp_codec_of(elem);
    if (elem == PG_FORMAT_NVFP4)
        nvfp4_quantize_bf16_row(src, d, 1.0f / scale, dst, scale_out, stats);
    else if (scale_out != NULL)
        *scale_out = c->quantize_bf16_per_token_head(src, d, dst, stats);
    else if (c->quantize_bf16 != NULL)
        c->quantize_bf16(src, d, scale, dst, stats);
    else
        memcpy(dst, src, d * sizeof(uint16_t));
}

/* kv_paged_write, kv_paged_write_per_token_head and kv_paged_write_nvfp4
 * (scales_per_row > 0: the rows' own scales, k_scale and v_scale unused
 * but for nvfp4's global scales). */
static pg_status paged_write(const attn_batch *b, const uint16_t *k, const uint16_t *v,
                             pg_number_format elem, int scales_per_row, float k_scale, float v_scale,
                             uint64_t page_seed, int block_size, kv_paged *out,
                             fp8_quant_stats *kstats, fp8_quant_stats *vstats, pg_err *err)
{
    memset(out, 0, sizeof *out);
    int64_t n_pages;
    int width;
    int32_t *table;
    pg_status st = kv_block_table_build(b, block_size, page_seed, &n_pages, &width, &table, err);
    if (st != PG_OK) return st;
    *out = (kv_paged){.elem = elem, .n_seqs = b->n_seqs, .hkv = b->hkv, .d = b->d,
                      .block_size = block_size, .n_pages = n_pages, .pages_per_seq = width,
                      .scales_per_row = scales_per_row};
    st = kv_paged_alloc(out, err);
    if (st != PG_OK) {
        free(table);
        return st;
    }
    memcpy(out->block_table, table, (size_t)b->n_seqs * (size_t)width * sizeof *table);
    free(table);

    int64_t kv_base = 0;
    const size_t d = (size_t)b->d;
    for (int s = 0; s < b->n_seqs; s++) {
        const int32_t *row = out->block_table + (size_t)s * (size_t)width;
        for (int t = 0; t < b->seq_kv[s]; t++) {
            int64_t page = row[t / block_size];
            int slot = t % block_size;
            for (int h = 0; h < b->hkv; h++) {
                size_t src = ((size_t)(kv_base + t) * (size_t)b->hkv + (size_t)h) * d;
                void *kd = (void *)kv_paged_row(out, page, 0, h, slot);
                void *vd = (void *)kv_paged_row(out, page, 1, h, slot);
                write_row(elem, k + src, d, k_scale, kd, kv_paged_scale_at(out, page, 0, h, slot),
                          kstats);
                write_row(elem, v + src, d, v_scale, vd, kv_paged_scale_at(out, page, 1, h, slot),
                          vstats);
            }
        }
        kv_base += b->seq_kv[s];
    }
    return PG_OK;
}

pg_status kv_paged_write(const attn_batch *b, const uint16_t *k, const uint16_t *v, pg_number_format elem,
                         float k_scale, float v_scale, uint64_t page_seed, int block_size,
                         kv_paged *out, fp8_quant_stats *kstats, fp8_quant_stats *vstats,
                         pg_err *err)
{
    return paged_write(b, k, v, elem, 0, k_scale, v_scale, page_seed, block_size, out, kstats,
                       vstats, err);
}

pg_status kv_paged_write_nvfp4(const attn_batch *b, const uint16_t *k, const uint16_t *v,
                               float k_scale, float v_scale, uint64_t page_seed, int block_size,
                               kv_paged *out, fp8_quant_stats *kstats, fp8_quant_stats *vstats,
                               pg_err *err)
{
    memset(out, 0, sizeof *out);
    if (b->d % NVFP4_BLOCK != 0)
        return pg_fail(err, PG_ERR_SHAPE, "kv cache: nvfp4 takes a head dim that is a multiple "
                       "of %d, and this layer's d is %d", NVFP4_BLOCK, b->d);
    return paged_write(b, k, v, PG_FORMAT_NVFP4, b->d / NVFP4_BLOCK, k_scale, v_scale, page_seed,
                       block_size, out, kstats, vstats, err);
}

pg_status kv_nvfp4_to_e4m3(const kv_paged *src, int block_scales_dropped, kv_paged *out,
                           pg_err *err)
{
    memset(out, 0, sizeof *out);
    if (src->elem != PG_FORMAT_NVFP4 || src->scales == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "nvfp4 conversion: the source is a %s cache",
                       pg_number_format_name(src->elem));
    *out = (kv_paged){.elem = PG_FORMAT_E4M3, .n_seqs = src->n_seqs, .hkv = src->hkv,
                      .d = src->d, .block_size = src->block_size, .n_pages = src->n_pages,
                      .pages_per_seq = src->pages_per_seq};
    pg_status st = kv_paged_alloc(out, err);
    if (st != PG_OK) return st;
    memcpy(out->block_table, src->block_table,
           (size_t)src->n_seqs * (size_t)src->pages_per_seq * sizeof *src->block_table);
    const size_t rows = (size_t)src->n_pages * page_elems(src) / (size_t)src->d;
    const size_t d = (size_t)src->d;
    const uint8_t *codes = src->data;
    uint8_t *to = out->data;
    for (size_t r = 0; r < rows; r++) {
        const float *sf = src->scales + r * (size_t)src->scales_per_row;
        if (sf[0] != sf[0]) continue; /* an unwritten row stays NaN */
        for (size_t i = 0; i < d; i++) {
            const float e = fp4_e2m1_decode(codes[r * d + i]);
            to[r * d + i] = fp8_e4m3_encode(block_scales_dropped ? e : e * sf[i / NVFP4_BLOCK]);
        }
    }
    return PG_OK;
}

pg_status kv_paged_write_per_token_head(const attn_batch *b, const uint16_t *k,
                                        const uint16_t *v, pg_number_format elem,
                                        uint64_t page_seed, int block_size,
                                        kv_paged *out, fp8_quant_stats *kstats,
                                        fp8_quant_stats *vstats, pg_err *err)
{
    memset(out, 0, sizeof *out);
    if (fp_codec_of(elem)->quantize_bf16_per_token_head == NULL)
        return pg_fail(err, PG_ERR_UNSUPPORTED, "kv cache: %s has no per-token-head cache write",
                       pg_number_format_name(elem));
    return paged_write(b, k, v, elem, 1, 1.0f, 1.0f, page_seed, block_size, out, kstats,
                       vstats, err);
}

float *kv_paged_scale_at(const kv_paged *c, int64_t page, int which, int head, int slot)
{
    if (c->scales == NULL) return NULL;
    const size_t per_page = (size_t)2 * (size_t)c->hkv * (size_t)c->block_size;
    return c->scales + ((size_t)page * per_page +
                        ((size_t)which * (size_t)c->hkv + (size_t)head) * (size_t)c->block_size +
                        (size_t)slot) * (size_t)c->scales_per_row;
}

pg_status kv_dequant_gather(const kv_paged *src, float k_scale, float v_scale, kv_paged *out,
                            pg_err *err)
{
    if (src->scales != NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "dequant gather: a per-token-head cache is read "
                       "in registers, never gathered (kv_cache.h)");
    const int B = src->n_seqs, P = src->pages_per_seq;
    *out = (kv_paged){.elem = PG_FORMAT_BF16, .n_seqs = B, .hkv = src->hkv, .d = src->d,
                      .block_size = src->block_size, .n_pages = (int64_t)B * P + 1,
                      .pages_per_seq = P};
    pg_status st = kv_paged_alloc(out, err);
    if (st != PG_OK) return st;
    const size_t half = page_elems(src) / 2; /* K or V part of one page */
    for (int b = 0; b < B; b++) {
        for (int p = 0; p < P; p++) {
            int64_t mock = (int64_t)b * P + p + 1;
            out->block_table[(size_t)b * (size_t)P + (size_t)p] = (int32_t)mock;
            int32_t orig = src->block_table[(size_t)b * (size_t)P + (size_t)p];
            if (orig <= 0) continue; /* null page: the kernel returns early */
            for (int which = 0; which < 2; which++) {
                const float scale = which == 0 ? k_scale : v_scale;
                uint16_t *dst = (uint16_t *)kv_paged_row(out, mock, which, 0, 0);
                const void *from = kv_paged_row(src, orig, which, 0, 0);
                const uint8_t *code = from;
                float (*decode)(uint8_t) = fp_codec_of(src->elem)->decode;
                if (decode == NULL) memcpy(dst, from, half * sizeof(uint16_t));
                else
                    for (size_t i = 0; i < half; i++)
                        dst[i] = bf16_from_f32(decode(code[i]) * scale);
            }
        }
    }
    return PG_OK;
}

pg_status kv_paged_write_mode(const attn_batch *b, const uint16_t *k, const uint16_t *v,
                              pg_number_format elem, pg_scale_granularity g, float k_scale,
                              float v_scale, uint64_t page_seed, int block_size, kv_paged *out,
                              fp8_quant_stats *kstats, fp8_quant_stats *vstats, pg_err *err)
{
    switch (g) {
    case PG_SCALES_PER_TENSOR:
        return kv_paged_write(b, k, v, elem, k_scale, v_scale, page_seed, block_size, out, kstats,
                              vstats, err);
    case PG_SCALES_PER_BLOCK_AND_TENSOR:
        return kv_paged_write_nvfp4(b, k, v, k_scale, v_scale, page_seed, block_size, out, kstats,
                                    vstats, err);
    case PG_SCALES_PER_TOKEN_HEAD:
        return kv_paged_write_per_token_head(b, k, v, elem, page_seed, block_size, out, kstats,
                                             vstats, err);
    case PG_SCALES_NONE: break;
    }
    memset(out, 0, sizeof *out);
    return pg_fail(err, PG_ERR_INTERNAL, "kv cache: a %s cache with %s scales has no write",
                   pg_number_format_name(elem), pg_scale_granularity_name(g));
}

/* Adds one scale as the reader takes it to *st. */
static void code_stats_scale(const kv_paged *c, float stored, kv_code_stats *st)
{
    float scale = stored, zero;
    void (*split)(float, float *, float *) = fp_codec_of(c->elem)->split_scale;
    if (split != NULL) split(stored, &scale, &zero);
    /* the floors: vLLM's per-token-head tl.maximum(..., 1e-6), nvfp4's sf of 0 */
    kv_code_stats_add_scale(st, scale, c->elem == PG_FORMAT_NVFP4
                                           ? scale == 0.0f
                                           : scale <= FP8_PER_TOKEN_HEAD_MIN_SCALE);
}

void kv_code_stats_add_scale(kv_code_stats *st, double x, int at_floor)
{
    if (st->n_scales == 0 || x < st->scale_min) st->scale_min = x;
    if (st->n_scales == 0 || x > st->scale_max) st->scale_max = x;
    st->scale_sum += x;
    st->n_scales++;
    st->n_scales_at_floor += at_floor != 0;
}

void kv_paged_code_stats(const kv_paged *c, const attn_batch *b, int which, kv_code_stats *st)
{
    const size_t d = (size_t)c->d, bytes = kv_elem_size(c->elem);
    for (int s = 0; s < b->n_seqs && s < c->n_seqs; s++) {
        const int32_t *row = c->block_table + (size_t)s * (size_t)c->pages_per_seq;
        for (int t = 0; t < b->seq_kv[s]; t++) {
            const int64_t page = row[t / c->block_size];
            const int slot = t % c->block_size;
            for (int h = 0; h < c->hkv; h++) {
                const uint8_t *codes = kv_paged_row(c, page, which, h, slot);
                if (bytes == 1)
                    for (size_t i = 0; i < d; i++) st->hist[codes[i]]++;
                st->n_codes += bytes == 1 ? d : 0;
                const float *sc = kv_paged_scale_at(c, page, which, h, slot);
                for (int j = 0; sc != NULL && j < c->scales_per_row; j++)
                    code_stats_scale(c, sc[j], st);
            }
        }
    }
}

int kv_code_stats_used(const kv_code_stats *st)
{
    int used = 0;
    for (int i = 0; i < KV_CODE_VALUES; i++) used += st->hist[i] != 0;
    return used;
}

double kv_code_stats_entropy_bits(const kv_code_stats *st)
{
    if (st->n_codes == 0) return 0.0;
    double h = 0.0;
    for (int i = 0; i < KV_CODE_VALUES; i++) {
        if (st->hist[i] == 0) continue;
        const double p = (double)st->hist[i] / (double)st->n_codes;
        h -= p * log2(p);
    }
    return h;
}

/* Values one work item of flat_code_stats quantizes. */
#define KV_STATS_CHUNK ((size_t)1 << 16)

/* flat_code_stats's work: K (which 0) and V (1) in chunks, each thread its
 * own counters and code buffer. */
typedef struct flat_stats_job {
    const uint16_t *x[2];
    float scale[2];
    size_t n;
    int n_chunks;
    const fp_codec *codec;
    fp8_quant_stats *q; /* [thread * 2 + which] */
    kv_code_stats *c;   /* [thread * 2 + which] */
    uint8_t *codes;     /* [thread * KV_STATS_CHUNK] */
} flat_stats_job;

static void flat_stats_item(void *ctx, int item, int thread)
{
    const flat_stats_job *j = ctx;
    const int which = item % 2;
    const size_t start = (size_t)(item / 2) * KV_STATS_CHUNK;
    const size_t len = j->n - start < KV_STATS_CHUNK ? j->n - start : KV_STATS_CHUNK;
    uint8_t *codes = j->codes + (size_t)thread * KV_STATS_CHUNK;
    j->codec->quantize_bf16(j->x[which] + start, len, j->scale[which], codes,
                            &j->q[thread * 2 + which]);
    kv_code_stats *st = &j->c[thread * 2 + which];
    for (size_t i = 0; i < len; i++) st->hist[codes[i]]++;
    st->n_codes += len;
}

/* kv_mode_code_stats of a per-tensor one-byte format: the codes of every
 * value of k and v (n each) with its scale, counted without a cache. */
static pg_status flat_code_stats(const fp_codec *codec, const uint16_t *k, const uint16_t *v,
                                 size_t n, float k_scale, float v_scale, int n_threads,
                                 fp8_quant_stats *kq, fp8_quant_stats *vq, kv_code_stats *kc,
                                 kv_code_stats *vc, pg_err *err)
{
    if (n_threads < 1) n_threads = 1;
    const size_t chunks = (n + KV_STATS_CHUNK - 1) / KV_STATS_CHUNK;
    if (chunks > (size_t)INT32_MAX / 2)
        return pg_fail(err, PG_ERR_SHAPE, "kv statistics: %zu values exceed the work items", n);
    flat_stats_job j = {{k, v}, {k_scale, v_scale}, n, (int)chunks, codec,
                        calloc((size_t)n_threads * 2, sizeof(fp8_quant_stats)),
                        calloc((size_t)n_threads * 2, sizeof(kv_code_stats)),
                        malloc((size_t)n_threads * KV_STATS_CHUNK)};
    pg_status st = j.q && j.c && j.codes
                       ? parallel_for(2 * j.n_chunks, n_threads, flat_stats_item, &j, err)
                       : pg_fail(err, PG_ERR_NOMEM, "kv statistics: per-thread counters");
    for (int t = 0; st == PG_OK && t < n_threads; t++)
        for (int w = 0; w < 2; w++) {
            const fp8_quant_stats *a = &j.q[t * 2 + w];
            const kv_code_stats *c = &j.c[t * 2 + w];
            fp8_quant_stats *qo = w == 0 ? kq : vq;
            kv_code_stats *co = w == 0 ? kc : vc;
            qo->n += a->n;
            qo->n_saturated += a->n_saturated;
            qo->n_nonzero += a->n_nonzero;
            qo->n_underflow += a->n_underflow;
            for (int b = 0; b < KV_CODE_VALUES; b++) co->hist[b] += c->hist[b];
            co->n_codes += c->n_codes;
        }
    free(j.q);
    free(j.c);
    free(j.codes);
    return st;
}

int kv_mode_same_cache_write(pg_mode a, pg_mode b)
{
    const pg_mode_traits *x = pg_mode_traits_of(a), *y = pg_mode_traits_of(b);
    if (x->kv_consumption == PG_KV_CENTROID_SCORES || y->kv_consumption == PG_KV_CENTROID_SCORES)
        return a == b;
    return x->k_format == y->k_format && x->v_format == y->v_format &&
           x->kv_scales == y->kv_scales && x->kv_rotation == y->kv_rotation;
}

pg_status kv_mode_code_stats(pg_mode m, const attn_batch *b, const uint16_t *k, const uint16_t *v,
                             float k_scale, float v_scale, uint64_t page_seed, int block_size,
                             int n_threads, fp8_quant_stats *kq, fp8_quant_stats *vq,
                             kv_code_stats *kc, kv_code_stats *vc, pg_err *err)
{
    memset(kq, 0, sizeof *kq);
    memset(vq, 0, sizeof *vq);
    memset(kc, 0, sizeof *kc);
    memset(vc, 0, sizeof *vc);
    const pg_mode_traits *t = pg_mode_traits_of(m);
    if (t->k_format == PG_FORMAT_BF16)
        return pg_fail(err, PG_ERR_USAGE, "kv statistics: mode %s keeps K and V in bf16", t->name);
    if (t->kv_consumption == PG_KV_CENTROID_SCORES) {
        tq_cache c;
        pg_status st = tq_cache_write(m, b, k, v, &c, kq, vq, err);
        if (st != PG_OK) return st;
        tq_cache_code_stats(&c, 0, kc);
        tq_cache_code_stats(&c, 1, vc);
        tq_cache_free(&c);
        return PG_OK;
    }
    uint16_t *kr = NULL, *vr = NULL;
    const size_t n = (size_t)attn_batch_tkv(b) * (size_t)b->hkv * (size_t)b->d;
    const fp_codec *codec = fp_codec_of(t->k_format);
    if (t->kv_scales == PG_SCALES_PER_TENSOR && t->kv_rotation == PG_ROTATION_NONE &&
        t->v_format == t->k_format && codec->quantize_bf16 != NULL && codec->bytes == 1) {
        if (block_size <= 0)  /* as the cache write would refuse it */
            return pg_fail(err, PG_ERR_USAGE, "paged KV cache: block size %d must be positive",
                           block_size);
        return flat_code_stats(codec, k, v, n, k_scale, v_scale, n_threads, kq, vq, kc, vc, err);
    }
    if (t->kv_rotation == PG_ROTATION_RHT) {
        if (!rht_dim_ok(b->d))
            return pg_fail(err, PG_ERR_SHAPE, "kv statistics: mode %s rotates by a Hadamard "
                           "transform of a power-of-two head dim, and d is %d", t->name, b->d);
        float signs[RHT_MAX_DIM];
        rht_signs(RHT_SIGN_SEED, b->d, signs);
        kr = rht_forward_bf16_copy(k, n / (size_t)b->d, b->d, signs);
        vr = rht_forward_bf16_copy(v, n / (size_t)b->d, b->d, signs);
        if (kr == NULL || vr == NULL) {
            free(kr);
            free(vr);
            return pg_fail(err, PG_ERR_NOMEM, "kv statistics: cannot copy K and V to rotate");
        }
        k = kr;
        v = vr;
    }
    kv_paged c;
    pg_status st = kv_paged_write_mode(b, k, v, t->k_format, t->kv_scales, k_scale, v_scale,
                                       page_seed, block_size, &c, kq, vq, err);
    free(kr);
    free(vr);
    if (st != PG_OK) return st;
    kv_paged_code_stats(&c, b, 0, kc);
    kv_paged_code_stats(&c, b, 1, vc);
    kv_paged_free(&c);
    return PG_OK;
}

void kv_paged_free(kv_paged *c)
{
    free(c->data);
    free(c->block_table);
    free(c->scales);
    c->data = NULL;
    c->block_table = NULL;
    c->scales = NULL;
}
