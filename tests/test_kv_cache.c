/*
 * test_kv_cache.c: kernels/kv_cache.c (paged KV-cache write in vLLM's HND
 * layout and the dequant gather of vLLM PR #24197) against expectations
 * built here element by element.
 *
 *   kv_paged_write: every (seq, token, head, dim) is read back through the
 *     block table and kv_paged_row and compared with the bf16 bits (bf16
 *     cache) or fp8_e4m3_encode_scaled(bf16_to_f32(x), scale) (e4m3 cache);
 *     page ids, unused table entries, NaN padding, page scattering and the
 *     quantization counters are checked too.
 *   kv_dequant_gather: the semantics of vLLM's
 *     tests/kernels/attention/test_trtllm_kvfp8_dequant.py: a compact cache of
 *     B*P+1 pages, table arange(1, B*P+1), mock page b*P+p+1 =
 *     bf16(decode(src) * scale) for src id > 0, untouched (NaN) otherwise.
 *
 * Loops count mismatches and report the first one, so a failure names an
 * input without making the passing path slow.
 */
#include "kernels/kv_cache.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/numerics.h"

/* bf16 bits of the NaN that unwritten bf16 cache slots must hold. */
#define BF16_NAN 0x7FC0u
/* e4m3 byte that unwritten e4m3 cache slots must hold. */
#define E4M3_NAN 0x7Fu
/* One in this many generated values is made large (x 64) so it saturates. */
#define LARGE_EVERY 37

/* ---- local data generator (independent of kernels/rng.h) ---------------- */

/* Advances *s (xorshift64*, Vigna 2016) and returns 64 random bits; *s != 0. */
static uint64_t t_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* A uniform double in [0, 1) from the top 53 bits of t_rand. */
static double t_unif(uint64_t *s)
{
    return (double)(t_rand(s) >> 11) * 0x1.0p-53;
}

/* Fills n bf16 values with roughly normal values (sum of 4 uniforms,
 * centred, times sigma); every LARGE_EVERY-th value on average is 64x larger
 * so that a scale calibrated on the typical values saturates. seed != 0. */
static void t_fill_bf16(uint16_t *x, size_t n, uint64_t seed, double sigma)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        double u = t_unif(&s) + t_unif(&s) + t_unif(&s) + t_unif(&s) - 2.0;
        double v = u * sigma * 1.7320508075688772; /* var of sum of 4 U = 1/3 */
        if (t_rand(&s) % LARGE_EVERY == 0) v *= 64.0;
        x[i] = bf16_from_f32((float)v);
    }
}

/* ---- fixtures ----------------------------------------------------------- */

/* A batch and its packed bf16 K and V [Tkv, hkv, d]; owns k and v. */
typedef struct t_batch {
    attn_batch b;
    int32_t seq_kv[8];
    int32_t seq_q[8];
    int64_t tkv;
    uint16_t *k, *v;
} t_batch;

/* Builds a batch of n (<= 8) sequences of seq_kv[i] kv tokens (seq_q = 1),
 * hkv kv heads (hq = hkv), head size d, with K and V from seeds derived from
 * data_seed. Free with t_batch_free. */
static void t_batch_make(t_batch *t, int n, const int32_t *seq_kv, int hkv, int d,
                         uint64_t data_seed)
{
    cr_assert(n >= 1 && n <= 8);
    memset(t, 0, sizeof *t);
    for (int i = 0; i < n; i++) {
        t->seq_kv[i] = seq_kv[i];
        t->seq_q[i] = 1;
        t->tkv += seq_kv[i];
    }
    t->b = (attn_batch){.n_seqs = n, .seq_q = t->seq_q, .seq_kv = t->seq_kv, .hq = hkv,
                        .hkv = hkv, .d = d, .window = 0, .sm_scale = 0.125f, .sinks = NULL};
    size_t ne = (size_t)t->tkv * (size_t)hkv * (size_t)d;
    t->k = malloc((ne ? ne : 1) * sizeof *t->k);
    t->v = malloc((ne ? ne : 1) * sizeof *t->v);
    cr_assert(t->k != NULL && t->v != NULL);
    t_fill_bf16(t->k, ne, data_seed * 2 + 1, 1.0);
    t_fill_bf16(t->v, ne, data_seed * 2 + 2, 3.0);
}

/* Frees t's K and V. */
static void t_batch_free(t_batch *t)
{
    free(t->k);
    free(t->v);
    t->k = t->v = NULL;
}

/* Elements per page of c (K and V together). */
static size_t t_page_elems(const kv_paged *c)
{
    return (size_t)2 * (size_t)c->hkv * (size_t)c->block_size * (size_t)c->d;
}

/* Whether element i of page `page` of c is the cache's NaN pattern
 * (0x7F for e4m3, 0x7FC0 for bf16), bit for bit. */
static int t_is_nan_elem(const kv_paged *c, int64_t page, size_t i)
{
    const char *base = (const char *)c->data + (size_t)page * t_page_elems(c) * kv_elem_size(c->elem);
    if (c->elem == PG_FORMAT_E4M3) return ((const uint8_t *)base)[i] == E4M3_NAN;
    return ((const uint16_t *)base)[i] == BF16_NAN;
}

/* Number of elements of page `page` of c that are not the NaN pattern. */
static size_t t_page_non_nan(const kv_paged *c, int64_t page)
{
    size_t bad = 0, n = t_page_elems(c);
    for (size_t i = 0; i < n; i++) bad += !t_is_nan_elem(c, page, i);
    return bad;
}

/* Expected cache element for bf16 input x: the bits (bf16 cache) or the
 * scaled e4m3 byte (e4m3 cache), widened to unsigned. */
static unsigned t_expect(pg_number_format elem, uint16_t x, float scale)
{
    return elem == PG_FORMAT_E4M3 ? fp8_e4m3_encode_scaled(bf16_to_f32(x), scale) : x;
}

/* The cache element at row pointer p, index j, widened to unsigned. */
static unsigned t_elem_at(pg_number_format elem, const void *p, int j)
{
    return elem == PG_FORMAT_E4M3 ? ((const uint8_t *)p)[j] : ((const uint16_t *)p)[j];
}

/* Writes t into a cache with kv_paged_write and checks every property of the
 * brief: element values through block table + kv_paged_row, page ids in
 * 1..n_pages-1 and unique, table padding 0, NaN in slots past each
 * sequence's end, in page 0 and in unused pages, and the stats n. Leaves the
 * cache in *out (caller frees). */
static void t_write_and_check(const t_batch *t, pg_number_format elem, int block_size, float k_scale,
                              float v_scale, uint64_t page_seed, kv_paged *out)
{
    const attn_batch *b = &t->b;
    fp8_quant_stats ks = {0}, vs = {0};
    pg_err err = {0};
    pg_status st = kv_paged_write(b, t->k, t->v, elem, k_scale, v_scale, page_seed, block_size,
                                  out, &ks, &vs, &err);
    cr_assert_eq(st, PG_OK, "kv_paged_write failed: %s", err.msg);
    cr_assert_eq(out->elem, elem);
    cr_assert_eq(out->n_seqs, b->n_seqs);
    cr_assert_eq(out->hkv, b->hkv);
    cr_assert_eq(out->d, b->d);
    cr_assert_eq(out->block_size, block_size);

    int width = 0;
    int64_t needed = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        int pg = (b->seq_kv[s] + block_size - 1) / block_size;
        needed += pg;
        if (pg > width) width = pg;
    }
    cr_assert_eq(out->pages_per_seq, width, "pages_per_seq %d, expected %d", out->pages_per_seq,
                 width);
    cr_assert_geq(out->n_pages, needed + 1, "n_pages %lld < needed %lld + 1",
                  (long long)out->n_pages, (long long)needed);

    /* Page ids: in range, used once; padding entries 0. */
    unsigned char *used = calloc((size_t)out->n_pages, 1);
    cr_assert_not_null(used);
    for (int s = 0; s < b->n_seqs; s++) {
        int pg = (b->seq_kv[s] + block_size - 1) / block_size;
        for (int p = 0; p < width; p++) {
            int32_t id = out->block_table[(size_t)s * (size_t)width + (size_t)p];
            if (p < pg) {
                cr_assert(id >= 1 && id < out->n_pages,
                          "seq %d page %d: id %d outside 1..%lld", s, p, id,
                          (long long)out->n_pages - 1);
                cr_assert_eq(used[id], 0, "seq %d page %d: id %d used twice", s, p, id);
                used[id] = 1;
            } else {
                cr_assert_eq(id, 0, "seq %d entry %d past its %d pages is %d, not 0", s, p, pg,
                             id);
            }
        }
    }

    /* Every element, through the block table. */
    size_t bad = 0;
    int64_t base = 0;
    char first[256] = "";
    for (int s = 0; s < b->n_seqs; s++) {
        const int32_t *row = out->block_table + (size_t)s * (size_t)width;
        for (int tok = 0; tok < b->seq_kv[s]; tok++) {
            int64_t page = row[tok / block_size];
            for (int h = 0; h < b->hkv; h++) {
                size_t src = ((size_t)(base + tok) * (size_t)b->hkv + (size_t)h) * (size_t)b->d;
                const void *kr = kv_paged_row(out, page, 0, h, tok % block_size);
                const void *vr = kv_paged_row(out, page, 1, h, tok % block_size);
                for (int j = 0; j < b->d; j++) {
                    unsigned ek = t_expect(elem, t->k[src + j], k_scale);
                    unsigned ev = t_expect(elem, t->v[src + j], v_scale);
                    unsigned gk = t_elem_at(elem, kr, j), gv = t_elem_at(elem, vr, j);
                    if (gk != ek || gv != ev) {
                        if (bad++ == 0)
                            snprintf(first, sizeof first,
                                     "seq %d tok %d head %d dim %d: K got %#x want %#x, "
                                     "V got %#x want %#x",
                                     s, tok, h, j, gk, ek, gv, ev);
                    }
                }
            }
        }
        base += b->seq_kv[s];
    }
    cr_assert_eq(bad, 0, "%zu element mismatches; first: %s", bad, first);

    /* Slots past each sequence's end in its last page hold NaN (K and V). */
    for (int s = 0; s < b->n_seqs; s++) {
        int pg = (b->seq_kv[s] + block_size - 1) / block_size;
        if (pg == 0) continue;
        int64_t last = out->block_table[(size_t)s * (size_t)width + (size_t)pg - 1];
        for (int slot = b->seq_kv[s] - (pg - 1) * block_size; slot < block_size; slot++)
            for (int which = 0; which < 2; which++)
                for (int h = 0; h < b->hkv; h++) {
                    const void *r = kv_paged_row(out, last, which, h, slot);
                    for (int j = 0; j < b->d; j++) {
                        unsigned g = t_elem_at(elem, r, j);
                        unsigned want = elem == PG_FORMAT_E4M3 ? E4M3_NAN : BF16_NAN;
                        cr_assert_eq(g, want, "seq %d slot %d which %d head %d dim %d: %#x, "
                                     "not NaN %#x", s, slot, which, h, j, g, want);
                    }
                }
    }

    /* Page 0 and pages no sequence uses are all NaN. */
    cr_assert_eq(t_page_non_nan(out, 0), 0, "page 0 has non-NaN elements");
    for (int64_t p = 1; p < out->n_pages; p++)
        if (!used[p])
            cr_assert_eq(t_page_non_nan(out, p), 0, "unused page %lld has non-NaN elements",
                         (long long)p);
    free(used);

    /* Stats: e4m3 counts every value it quantized. */
    if (elem == PG_FORMAT_E4M3) {
        uint64_t n = (uint64_t)t->tkv * (uint64_t)b->hkv * (uint64_t)b->d;
        cr_assert_eq(ks.n, n, "K stats n %llu, expected %llu", (unsigned long long)ks.n,
                     (unsigned long long)n);
        cr_assert_eq(vs.n, n, "V stats n %llu, expected %llu", (unsigned long long)vs.n,
                     (unsigned long long)n);
    }
}

/* Runs t_write_and_check over the brief's grid for one element type:
 * block sizes 16/32/64, hkv 1 and 8, d 64 and 128, ragged seq_kv {1,17,40}. */
static void t_grid(pg_number_format elem)
{
    static const int32_t seq_kv[3] = {1, 17, 40};
    static const int bss[3] = {16, 32, 64}, hkvs[2] = {1, 8}, ds[2] = {64, 128};
    for (int ib = 0; ib < 3; ib++)
        for (int ih = 0; ih < 2; ih++)
            for (int id = 0; id < 2; id++) {
                t_batch t;
                t_batch_make(&t, 3, seq_kv, hkvs[ih], ds[id], 100 + ib * 4 + ih * 2 + id);
                kv_paged c;
                t_write_and_check(&t, elem, bss[ib], 0.05f, 0.15f, 7 + ib, &c);
                kv_paged_free(&c);
                cr_assert_null(c.data);
                cr_assert_null(c.block_table);
                t_batch_free(&t);
            }
}

/* ---- kv_paged_write ----------------------------------------------------- */

Test(kv_paged_write, e4m3_grid_roundtrip)
{
    t_grid(PG_FORMAT_E4M3);
}

Test(kv_paged_write, bf16_grid_roundtrip)
{
    t_grid(PG_FORMAT_BF16);
}

Test(kv_paged_write, ragged_orders_and_exact_multiples)
{
    /* Sequences ending exactly on a page boundary, and a long one first. */
    static const int32_t seq_kv[4] = {64, 16, 33, 1};
    for (int e = 0; e < 2; e++) {
        t_batch t;
        t_batch_make(&t, 4, seq_kv, 2, 64, 55);
        kv_paged c;
        t_write_and_check(&t, e ? PG_FORMAT_BF16 : PG_FORMAT_E4M3, 16, 0.02f, 0.07f, 99, &c);
        kv_paged_free(&c);
        t_batch_free(&t);
    }
}

/* The in-use entries of c's block table, row-major, into ids (capacity cap);
 * returns how many. */
static int t_used_ids(const kv_paged *c, const attn_batch *b, int32_t *ids, int cap)
{
    int n = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        int pg = (b->seq_kv[s] + c->block_size - 1) / c->block_size;
        for (int p = 0; p < pg; p++) {
            cr_assert_lt(n, cap);
            ids[n++] = c->block_table[(size_t)s * (size_t)c->pages_per_seq + (size_t)p];
        }
    }
    return n;
}

Test(kv_paged_write, pages_are_scattered_and_seeded)
{
    static const int32_t seq_kv[3] = {100, 37, 200}; /* 7 + 3 + 13 = 23 pages of 16 */
    t_batch t;
    t_batch_make(&t, 3, seq_kv, 1, 64, 3);
    kv_paged a, a2, c;
    t_write_and_check(&t, PG_FORMAT_E4M3, 16, 0.05f, 0.15f, 1234, &a);
    t_write_and_check(&t, PG_FORMAT_E4M3, 16, 0.05f, 0.15f, 1234, &a2);
    t_write_and_check(&t, PG_FORMAT_E4M3, 16, 0.05f, 0.15f, 4321, &c);
    int32_t ia[64], ia2[64], ic[64];
    int na = t_used_ids(&a, &t.b, ia, 64);
    int na2 = t_used_ids(&a2, &t.b, ia2, 64);
    int nc = t_used_ids(&c, &t.b, ic, 64);
    cr_assert_eq(na, 23);
    cr_assert_eq(na2, 23);
    cr_assert_eq(nc, 23);

    int sequential = 1, adjacent = 0;
    for (int i = 0; i < na; i++) {
        if (ia[i] != i + 1) sequential = 0;
        if (i > 0 && ia[i] == ia[i - 1] + 1) adjacent++;
    }
    cr_assert(!sequential, "block table is 1, 2, 3, ...: pages not scattered");
    cr_assert_lt(adjacent, na / 2, "%d of %d neighbouring pages are adjacent ids", adjacent, na);
    cr_assert(memcmp(ia, ia2, sizeof(int32_t) * (size_t)na) == 0,
              "same page_seed gave different block tables");
    cr_assert(memcmp(ia, ic, sizeof(int32_t) * (size_t)na) != 0,
              "different page_seed gave the same block table");
    kv_paged_free(&a);
    kv_paged_free(&a2);
    kv_paged_free(&c);
    t_batch_free(&t);
}

/* Stats of quantizing n bf16 values x with scale, computed here from the
 * definitions in numerics.h (saturated: |x/scale| > 448 in fp32, inf
 * included; nonzero: x != 0; underflow: nonzero but encoded to +-0). */
static fp8_quant_stats t_stats(const uint16_t *x, size_t n, float scale)
{
    fp8_quant_stats st = {0};
    for (size_t i = 0; i < n; i++) {
        float xf = bf16_to_f32(x[i]);
        float y = xf / scale;
        uint8_t b = fp8_e4m3_encode_scaled(xf, scale);
        st.n++;
        st.n_saturated += !isnan(y) && fabsf(y) > FP8_E4M3_MAX;
        st.n_nonzero += xf != 0.0f;
        st.n_underflow += xf != 0.0f && (b & 0x7Fu) == 0;
    }
    return st;
}

Test(kv_paged_write, stats_count_and_saturation)
{
    static const int32_t seq_kv[3] = {1, 17, 40};
    t_batch t;
    t_batch_make(&t, 3, seq_kv, 8, 128, 77);
    size_t n = (size_t)t.tkv * 8 * 128;
    /* K sigma 1 and V sigma 3 with 64x outliers up to ~6.9 and ~20.8 (x 64):
     * these scales leave typical values in range and saturate the outliers. */
    const float k_scale = 1.0f / 256, v_scale = 3.0f / 256;
    fp8_quant_stats ks = {0}, vs = {0};
    kv_paged c;
    pg_err err = {0};
    cr_assert_eq(kv_paged_write(&t.b, t.k, t.v, PG_FORMAT_E4M3, k_scale, v_scale, 5, 32, &c, &ks,
                                &vs, &err),
                 PG_OK, "%s", err.msg);
    fp8_quant_stats ek = t_stats(t.k, n, k_scale), ev = t_stats(t.v, n, v_scale);
    cr_assert_eq(ks.n, (uint64_t)n);
    cr_assert_eq(vs.n, (uint64_t)n);
    cr_assert_gt(ek.n_saturated, 0, "test data does not saturate K: pick a smaller scale");
    cr_assert_gt(ev.n_saturated, 0, "test data does not saturate V: pick a smaller scale");
    cr_assert_eq(ks.n_saturated, ek.n_saturated, "K saturated %llu, expected %llu",
                 (unsigned long long)ks.n_saturated, (unsigned long long)ek.n_saturated);
    cr_assert_eq(vs.n_saturated, ev.n_saturated, "V saturated %llu, expected %llu",
                 (unsigned long long)vs.n_saturated, (unsigned long long)ev.n_saturated);
    cr_assert_eq(ks.n_nonzero, ek.n_nonzero);
    cr_assert_eq(vs.n_nonzero, ev.n_nonzero);
    cr_assert_eq(ks.n_underflow, ek.n_underflow);
    cr_assert_eq(vs.n_underflow, ev.n_underflow);
    kv_paged_free(&c);

    /* Counters add up across calls; NULL stats are accepted. */
    cr_assert_eq(kv_paged_write(&t.b, t.k, t.v, PG_FORMAT_E4M3, k_scale, v_scale, 6, 16, &c, &ks,
                                NULL, &err),
                 PG_OK, "%s", err.msg);
    cr_assert_eq(ks.n, 2 * (uint64_t)n);
    cr_assert_eq(ks.n_saturated, 2 * ek.n_saturated);
    cr_assert_eq(vs.n, (uint64_t)n);
    kv_paged_free(&c);

    /* A generous scale saturates nothing: |K| < 3.47 * 64 = 222 and
     * |V| < 3 * 3.47 * 64 = 666, so 2.0 keeps both under 448. */
    fp8_quant_stats k2 = {0}, v2 = {0};
    cr_assert_eq(kv_paged_write(&t.b, t.k, t.v, PG_FORMAT_E4M3, 2.0f, 2.0f, 5, 64, &c, &k2, &v2,
                                &err),
                 PG_OK, "%s", err.msg);
    cr_assert_eq(k2.n_saturated, 0);
    cr_assert_eq(v2.n_saturated, 0);
    cr_assert_eq(k2.n, (uint64_t)n);
    kv_paged_free(&c);
    t_batch_free(&t);
}

Test(kv_paged_write, rejects_nonpositive_block_size)
{
    static const int32_t seq_kv[1] = {5};
    t_batch t;
    t_batch_make(&t, 1, seq_kv, 1, 64, 9);
    kv_paged c;
    pg_err err = {0};
    cr_assert_eq(kv_paged_write(&t.b, t.k, t.v, PG_FORMAT_E4M3, 1, 1, 1, 0, &c, NULL, NULL, &err),
                 PG_ERR_USAGE);
    cr_assert_null(c.data);
    cr_assert_null(c.block_table);
    t_batch_free(&t);
}

/* ---- kv_dequant_gather -------------------------------------------------- */

/* Checks the gathered cache g against src: shape, table arange(1, B*P+1),
 * page 0 NaN, and for every (b, p): mock page b*P+p+1 equals
 * bf16(decode(byte) * scale) (e4m3 src) or src's bits (bf16 src) for K with
 * k_scale and V with v_scale when src's id > 0, else all NaN. */
static void t_check_gather(const kv_paged *src, float k_scale, float v_scale, const kv_paged *g)
{
    const int B = src->n_seqs, P = src->pages_per_seq;
    cr_assert_eq(g->elem, PG_FORMAT_BF16);
    cr_assert_eq(g->n_seqs, B);
    cr_assert_eq(g->pages_per_seq, P);
    cr_assert_eq(g->hkv, src->hkv);
    cr_assert_eq(g->d, src->d);
    cr_assert_eq(g->block_size, src->block_size);
    cr_assert_eq(g->n_pages, (int64_t)B * P + 1, "n_pages %lld, expected %lld",
                 (long long)g->n_pages, (long long)B * P + 1);
    for (int i = 0; i < B * P; i++)
        cr_assert_eq(g->block_table[i], i + 1, "block table[%d] = %d, expected %d", i,
                     g->block_table[i], i + 1);
    cr_assert_eq(t_page_non_nan(g, 0), 0, "mock page 0 was written");

    const size_t half = (size_t)src->hkv * (size_t)src->block_size * (size_t)src->d;
    for (int b = 0; b < B; b++)
        for (int p = 0; p < P; p++) {
            int64_t mock = (int64_t)b * P + p + 1;
            int32_t id = src->block_table[(size_t)b * (size_t)P + (size_t)p];
            if (id <= 0) {
                cr_assert_eq(t_page_non_nan(g, mock), 0,
                             "seq %d page %d: src id %d <= 0 but mock page %lld was written", b,
                             p, id, (long long)mock);
                continue;
            }
            size_t bad = 0;
            char first[200] = "";
            for (int which = 0; which < 2; which++) {
                const float scale = which == 0 ? k_scale : v_scale;
                const uint16_t *dst = kv_paged_row(g, mock, which, 0, 0);
                const void *from = kv_paged_row(src, id, which, 0, 0);
                for (size_t i = 0; i < half; i++) {
                    uint16_t want = src->elem == PG_FORMAT_E4M3
                                        ? bf16_from_f32(fp8_e4m3_decode(((const uint8_t *)from)[i]) *
                                                        scale)
                                        : ((const uint16_t *)from)[i];
                    if (dst[i] != want && bad++ == 0)
                        snprintf(first, sizeof first, "%s elem %zu: got %#x want %#x",
                                 which ? "V" : "K", i, dst[i], want);
                }
            }
            cr_assert_eq(bad, 0, "seq %d page %d (src %d -> mock %lld): %zu mismatches; first %s",
                         b, p, id, (long long)mock, bad, first);
        }
}

Test(kv_dequant_gather, e4m3_from_paged_write_distinct_scales)
{
    static const int32_t seq_kv[3] = {1, 17, 40};
    for (int ib = 0; ib < 3; ib++) {
        static const int bss[3] = {16, 32, 64};
        t_batch t;
        t_batch_make(&t, 3, seq_kv, 8, 128, 31 + ib);
        kv_paged src, g;
        pg_err err = {0};
        cr_assert_eq(kv_paged_write(&t.b, t.k, t.v, PG_FORMAT_E4M3, 0.01f, 0.03f, 11 + ib, bss[ib],
                                    &src, NULL, NULL, &err),
                     PG_OK, "%s", err.msg);
        cr_assert_eq(kv_dequant_gather(&src, 0.5f, 2.0f, &g, &err), PG_OK, "%s", err.msg);
        t_check_gather(&src, 0.5f, 2.0f, &g);

        /* Each token read through the compact table: bf16(decode(enc(x)) * s). */
        int64_t base = 0;
        for (int s = 0; s < 3; s++) {
            for (int tok = 0; tok < seq_kv[s]; tok++) {
                int32_t mp = g.block_table[(size_t)s * (size_t)g.pages_per_seq +
                                           (size_t)(tok / g.block_size)];
                for (int h = 0; h < 8; h++) {
                    const uint16_t *kr = kv_paged_row(&g, mp, 0, h, tok % g.block_size);
                    const uint16_t *vr = kv_paged_row(&g, mp, 1, h, tok % g.block_size);
                    size_t o = ((size_t)(base + tok) * 8 + (size_t)h) * 128;
                    for (int j = 0; j < 128; j++) {
                        uint16_t wk = bf16_from_f32(
                            fp8_e4m3_decode(fp8_e4m3_encode_scaled(bf16_to_f32(t.k[o + j]), 0.01f)) *
                            0.5f);
                        uint16_t wv = bf16_from_f32(
                            fp8_e4m3_decode(fp8_e4m3_encode_scaled(bf16_to_f32(t.v[o + j]), 0.03f)) *
                            2.0f);
                        cr_assert_eq(kr[j], wk, "seq %d tok %d head %d dim %d K %#x want %#x", s,
                                     tok, h, j, kr[j], wk);
                        cr_assert_eq(vr[j], wv, "seq %d tok %d head %d dim %d V %#x want %#x", s,
                                     tok, h, j, vr[j], wv);
                    }
                }
            }
            base += seq_kv[s];
        }
        kv_paged_free(&g);
        kv_paged_free(&src);
        t_batch_free(&t);
    }
}

/* A hand-built e4m3 source cache of n_pages pages (hkv 2, block 16, d 64)
 * whose K half of page p holds bytes (i + 3p) & 0xFF and V half
 * (i * 7 + p) & 0xFF, so every code (subnormals, 448, both NaNs, -0) appears;
 * block table B x P all set to `fill`. Caller frees with kv_paged_free. */
static void t_hand_src(kv_paged *c, int64_t n_pages, int B, int P, int32_t fill)
{
    *c = (kv_paged){.elem = PG_FORMAT_E4M3, .n_seqs = B, .hkv = 2, .d = 64, .block_size = 16,
                    .n_pages = n_pages, .pages_per_seq = P};
    size_t half = 2 * 16 * 64;
    c->data = malloc((size_t)n_pages * 2 * half);
    c->block_table = malloc((size_t)B * (size_t)P * sizeof(int32_t));
    cr_assert(c->data != NULL && c->block_table != NULL);
    uint8_t *d = c->data;
    for (int64_t p = 0; p < n_pages; p++)
        for (size_t i = 0; i < half; i++) {
            d[(size_t)p * 2 * half + i] = (uint8_t)((i + 3 * (size_t)p) & 0xFF);
            d[(size_t)p * 2 * half + half + i] = (uint8_t)((i * 7 + (size_t)p) & 0xFF);
        }
    for (int i = 0; i < B * P; i++) c->block_table[i] = fill;
}

Test(kv_dequant_gather, all_codes_and_nonpositive_ids)
{
    kv_paged src, g;
    pg_err err = {0};
    t_hand_src(&src, 9, 3, 3, 0);
    /* Row 0: 5, 2, 8; row 1: 0, 7, -1; row 2: -1, 1, 0. */
    const int32_t table[9] = {5, 2, 8, 0, 7, -1, -1, 1, 0};
    memcpy(src.block_table, table, sizeof table);
    cr_assert_eq(kv_dequant_gather(&src, 0.5f, 2.0f, &g, &err), PG_OK, "%s", err.msg);
    t_check_gather(&src, 0.5f, 2.0f, &g);
    /* Spot checks with literal numbers: src page 5 K byte 0x38 (1.0) at
     * element 0x38 - 15 = 41 -> 0.5; V half of page 5, element 1: byte 12 ->
     * decode(12) = 2^-6 * 1.5 ... times 2 -> 2^-5 * 1.5. */
    const uint16_t *k0 = kv_paged_row(&g, 1, 0, 0, 0);
    const uint16_t *v0 = kv_paged_row(&g, 1, 1, 0, 0);
    cr_assert_eq(k0[0x38 - 15], bf16_from_f32(0.5f), "K 1.0 * k_scale 0.5: got %#x", k0[41]);
    cr_assert_eq(v0[1], bf16_from_f32(0x1.8p-6f * 2.0f), "V byte 12 * v_scale 2: got %#x", v0[1]);
    kv_paged_free(&g);
    kv_paged_free(&src);
}

Test(kv_dequant_gather, all_zero_table_writes_nothing)
{
    kv_paged src, g;
    pg_err err = {0};
    t_hand_src(&src, 4, 2, 3, 0);
    cr_assert_eq(kv_dequant_gather(&src, 0.5f, 2.0f, &g, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(g.n_pages, 7);
    for (int64_t p = 0; p < g.n_pages; p++)
        cr_assert_eq(t_page_non_nan(&g, p), 0, "page %lld written for an all-zero table",
                     (long long)p);
    for (int i = 0; i < 6; i++) cr_assert_eq(g.block_table[i], i + 1);
    kv_paged_free(&g);
    kv_paged_free(&src);
}

Test(kv_dequant_gather, bf16_source_copies_bits)
{
    static const int32_t seq_kv[3] = {1, 17, 40};
    t_batch t;
    t_batch_make(&t, 3, seq_kv, 8, 64, 61);
    kv_paged src, g;
    pg_err err = {0};
    cr_assert_eq(kv_paged_write(&t.b, t.k, t.v, PG_FORMAT_BF16, 1, 1, 17, 16, &src, NULL, NULL,
                                &err),
                 PG_OK, "%s", err.msg);
    /* Knock out two real pages by hand: a 0 and a -1. */
    cr_assert_geq(src.pages_per_seq, 3);
    src.block_table[2 * src.pages_per_seq + 1] = 0;
    src.block_table[1 * src.pages_per_seq + 0] = -1;
    cr_assert_eq(kv_dequant_gather(&src, 0.5f, 2.0f, &g, &err), PG_OK, "%s", err.msg);
    t_check_gather(&src, 0.5f, 2.0f, &g);
    /* Sequence 0's token 0 reads back bit for bit through the compact table. */
    const uint16_t *kr = kv_paged_row(&g, g.block_table[0], 0, 3, 0);
    const uint16_t *vr = kv_paged_row(&g, g.block_table[0], 1, 3, 0);
    cr_assert(memcmp(kr, t.k + 3 * 64, 64 * sizeof(uint16_t)) == 0);
    cr_assert(memcmp(vr, t.v + 3 * 64, 64 * sizeof(uint16_t)) == 0);
    kv_paged_free(&g);
    kv_paged_free(&src);
    t_batch_free(&t);
}

Test(kv_dequant_gather, e4m3_write_with_hand_knockouts)
{
    static const int32_t seq_kv[3] = {40, 17, 33};
    t_batch t;
    t_batch_make(&t, 3, seq_kv, 1, 64, 83);
    kv_paged src, g;
    pg_err err = {0};
    cr_assert_eq(kv_paged_write(&t.b, t.k, t.v, PG_FORMAT_E4M3, 0.02f, 0.05f, 23, 16, &src, NULL,
                                NULL, &err),
                 PG_OK, "%s", err.msg);
    src.block_table[0] = 0;                      /* seq 0 page 0 */
    src.block_table[src.pages_per_seq + 1] = -1; /* seq 1 page 1 */
    cr_assert_eq(kv_dequant_gather(&src, 0.5f, 2.0f, &g, &err), PG_OK, "%s", err.msg);
    t_check_gather(&src, 0.5f, 2.0f, &g);
    cr_assert_eq(t_page_non_nan(&g, 1), 0);
    cr_assert_eq(t_page_non_nan(&g, (int64_t)src.pages_per_seq + 2), 0);
    kv_paged_free(&g);
    kv_paged_free(&src);
    t_batch_free(&t);
}
