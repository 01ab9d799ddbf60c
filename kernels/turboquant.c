/*
 * turboquant.c: TurboQuant's codebook, rotation and cache slots
 * (turboquant.h), each rule with the file it was read from.
 */
#include "turboquant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* CENTROIDS solve_lloyd_max's defaults and constants: max_iter 200, tol
 * 1e-10, _trapz's n 200, the initial range +-3.5 sigma, the outer edges at
 * 3x that range, and den > 1e-15 to take a new centroid. */
#define LLOYD_MAX_ITERATIONS 200
#define LLOYD_MAX_TOLERANCE 1e-10
#define LLOYD_MAX_TRAPEZOIDS 200
#define LLOYD_MAX_INIT_SIGMAS 3.5
#define LLOYD_MAX_EDGE_FACTOR 3.0
#define LLOYD_MAX_MIN_MASS 1e-15
/* STORE's launcher: x_hat = k / (norms + 1e-8). */
#define TQ_KEY_NORM_EPS 1e-8f
/* STORE _store_quantized_value: v_scale = max(v_scale, 1e-8) (a tl.where). */
#define TQ_VALUE_MIN_SCALE 1e-8f
/* STORE: an index per coordinate rounded by adding 0.5 before truncation. */
#define TQ_ROUND_HALF 0.5f
/* CONFIG slot_size_aligned: the slot rounded up to an even byte count; the
 * value part's fp16 scale and fp16 min; MSE keys' fp16 norm. */
#define TQ_SLOT_ALIGN 2
#define TQ_VALUE_META_BYTES 4
#define TQ_NORM_BYTES 2
#define BITS_PER_BYTE 8
/* math.pi, as _gaussian_pdf takes it. */
#define TQ_PI 3.14159265358979323846
#define FP8_KEY_BITS 8

/* The standard normal density of variance sigma2 at x, as _gaussian_pdf. */
static double gaussian_pdf(double x, double sigma2)
{
    return (1.0 / sqrt(2 * TQ_PI * sigma2)) * exp(-x * x / (2 * sigma2));
}

/* _trapz of pdf (moment 0) or x * pdf (moment 1) over [a, b]. */
static double trapz(int moment, double a, double b, double sigma2)
{
    const int n = LLOYD_MAX_TRAPEZOIDS;
    const double h = (b - a) / n;
    double fa = gaussian_pdf(a, sigma2), fb = gaussian_pdf(b, sigma2);
    if (moment) fa = a * fa, fb = b * fb;
    double r = 0.5 * (fa + fb);
    for (int i = 1; i < n; i++) {
        const double x = a + i * h;
        r += moment ? x * gaussian_pdf(x, sigma2) : gaussian_pdf(x, sigma2);
    }
    return r * h;
}

pg_status tq_codebook_solve(int d, int bits, tq_codebook *out, pg_err *err)
{
    if (bits < 1 || bits > TQ_MAX_BITS || d < 1)
        return pg_fail(err, PG_ERR_USAGE, "Lloyd-Max codebook: %d bits for d %d (1 .. %d bits, "
                       "d >= 1)", bits, d, TQ_MAX_BITS);
    const int n = 1 << bits;
    const double sigma2 = 1.0 / d, sigma = sqrt(sigma2);
    const double lo = -LLOYD_MAX_INIT_SIGMAS * sigma, hi = LLOYD_MAX_INIT_SIGMAS * sigma;
    double c[TQ_MAX_CENTROIDS], next[TQ_MAX_CENTROIDS], edges[TQ_MAX_CENTROIDS + 1];
    for (int i = 0; i < n; i++) c[i] = lo + (hi - lo) * (i + 0.5) / n;
    for (int it = 0; it < LLOYD_MAX_ITERATIONS; it++) {
        edges[0] = lo * LLOYD_MAX_EDGE_FACTOR;
        for (int i = 0; i + 1 < n; i++) edges[i + 1] = (c[i] + c[i + 1]) / 2.0;
        edges[n] = hi * LLOYD_MAX_EDGE_FACTOR;
        double moved = 0.0;
        for (int i = 0; i < n; i++) {
            const double num = trapz(1, edges[i], edges[i + 1], sigma2);
            const double den = trapz(0, edges[i], edges[i + 1], sigma2);
            next[i] = den > LLOYD_MAX_MIN_MASS ? num / den : c[i];
            const double dist = fabs(next[i] - c[i]);
            if (dist > moved) moved = dist;
        }
        if (moved < LLOYD_MAX_TOLERANCE) break; /* the old centroids are kept, as there */
        memcpy(c, next, sizeof c);
    }
    memset(out, 0, sizeof *out);
    out->d = d;
    out->bits = bits;
    out->n = n;
    for (int i = 0; i < n; i++) out->centroids[i] = (float)c[i];
    for (int i = 0; i + 1 < n; i++)
        out->midpoints[i] = (out->centroids[i] + out->centroids[i + 1]) / 2.0f;
    return PG_OK;
}

int tq_codebook_index(const tq_codebook *cb, float y)
{
    int lo = 0;
    while (lo < cb->n - 1 && y >= cb->midpoints[lo]) lo++;
    return lo;
}

/* popcount(i & j) is odd: Sylvester's H[i][j] is -1. */
static inline int hadamard_negative(int i, int j) { return __builtin_parity((unsigned)(i & j)); }

void tq_rotate_row(const float *x, int d, float *y)
{
    /* BACKEND _build_hadamard_cached: H (fp32) / math.sqrt(d), on the CPU */
    const float inv = 1.0f / (float)sqrt((double)d);
    for (int i = 0; i < d; i++) {
        float acc = 0.0f;
        for (int j = 0; j < d; j++) acc += x[j] * (hadamard_negative(j, i) ? -inv : inv);
        y[i] = acc;
    }
}

static int is_pow2(int d) { return d > 0 && (d & (d - 1)) == 0; }

pg_status tq_layout_of(pg_mode m, int d, tq_layout *out, pg_err *err)
{
    const pg_mode_traits *t = pg_mode_traits_of(m);
    if (t->kv_consumption != PG_KV_CENTROID_SCORES)
        return pg_fail(err, PG_ERR_USAGE, "TurboQuant layout: mode %s is not a TurboQuant preset",
                       t->name);
    memset(out, 0, sizeof *out);
    out->d = d;
    out->key_fp8 = t->k_format == PG_FORMAT_E4M3;
    out->k_bits = t->k_element_bits;
    out->v_bits = t->v_element_bits;
    out->norm_correction = t->kv_norm_correction;
    if (!is_pow2(d) || d > TQ_MAX_DIM)
        return pg_fail(err, PG_ERR_SHAPE, "mode %s: TurboQuant's Hadamard rotation and its "
                       "kernels' BLOCK_D need a power-of-two head dim up to %d, and d is %d",
                       t->name, TQ_MAX_DIM, d);
    if ((out->k_bits == 3 || out->v_bits == 3) && d % BITS_PER_BYTE != 0)
        return pg_fail(err, PG_ERR_SHAPE, "mode %s: 3-bit codes pack in groups of 8 and d is %d",
                       t->name, d);
    out->key_bytes = out->key_fp8 ? d : (d * out->k_bits + BITS_PER_BYTE - 1) / BITS_PER_BYTE;
    out->kps = out->key_bytes + (out->key_fp8 ? 0 : TQ_NORM_BYTES);
    out->val_data_bytes = (d * out->v_bits + BITS_PER_BYTE - 1) / BITS_PER_BYTE;
    const int raw = out->kps + out->val_data_bytes + TQ_VALUE_META_BYTES;
    out->slot_bytes = (raw + TQ_SLOT_ALIGN - 1) / TQ_SLOT_ALIGN * TQ_SLOT_ALIGN;
    return PG_OK;
}

/* Ors code into the packed array at field j of `bits` (from bit j * bits,
 * little endian: the store's pairs and its 3-byte groups of 8). */
static void pack_field(uint8_t *packed, int bits, int j, unsigned code)
{
    const int bit = j * bits;
    const unsigned v = (code & ((1u << bits) - 1u)) << (bit % BITS_PER_BYTE);
    packed[bit / BITS_PER_BYTE] |= (uint8_t)(v & 0xFFu);
    if (v >> BITS_PER_BYTE) packed[bit / BITS_PER_BYTE + 1] |= (uint8_t)(v >> BITS_PER_BYTE);
}

unsigned tq_unpack(const uint8_t *packed, int bits, int j)
{
    const int bit = j * bits;
    /* the kernel loads byte + 1 too (masked off unless the field spans it); a
     * field that ends in its byte never reads past the array here */
    const int byte = bit / BITS_PER_BYTE, shift = bit % BITS_PER_BYTE;
    unsigned raw = packed[byte];
    if (shift + bits > BITS_PER_BYTE) raw |= (unsigned)packed[byte + 1] << BITS_PER_BYTE;
    return (raw >> shift) & ((1u << bits) - 1u);
}

static void put_f16(uint8_t *p, float x)
{
    const uint16_t h = fp16_from_f32(x);
    p[0] = (uint8_t)(h & 0xFFu);
    p[1] = (uint8_t)(h >> BITS_PER_BYTE);
}

static float get_f16(const uint8_t *p)
{
    return fp16_to_f32((uint16_t)(p[0] | (p[1] << BITS_PER_BYTE)));
}

void tq_store_key(const tq_layout *lay, const tq_codebook *cb, const uint16_t *k, uint8_t *slot,
                  fp8_quant_stats *st)
{
    const int d = lay->d;
    if (lay->key_fp8) {
        fp8_e4m3_quantize_bf16(k, (size_t)d, 1.0f, slot, st);
        return;
    }
    float x[TQ_MAX_DIM] = {0}, y[TQ_MAX_DIM];
    float sumsq = 0.0f;
    for (int i = 0; i < d; i++) {
        x[i] = bf16_to_f32(k[i]);
        sumsq += x[i] * x[i];
    }
    /* torch.norm(dim=1) in fp32 (its reduction order inferred: in index order) */
    const float norm = sqrtf(sumsq);
    for (int i = 0; i < d; i++) x[i] = x[i] / (norm + TQ_KEY_NORM_EPS);
    tq_rotate_row(x, d, y);
    memset(slot, 0, (size_t)lay->key_bytes);
    const float edge = cb->centroids[cb->n - 1];
    for (int i = 0; i < d; i++) {
        pack_field(slot, lay->k_bits, i, (unsigned)tq_codebook_index(cb, y[i]));
        if (st != NULL) {
            st->n++;
            st->n_saturated += fabsf(y[i]) > edge;
            st->n_nonzero += (k[i] & 0x7FFFu) != 0; /* +-0 is zero, a NaN is not */
        }
    }
    put_f16(slot + lay->key_bytes, norm);
}

void tq_store_value(const tq_layout *lay, const uint16_t *v, uint8_t *slot, fp8_quant_stats *st)
{
    const int d = lay->d;
    const int top = (1 << lay->v_bits) - 1;
    float x[TQ_MAX_DIM], mn = INFINITY, mx = -INFINITY;
    for (int i = 0; i < d; i++) {
        x[i] = bf16_to_f32(v[i]);
        mn = fminf(mn, x[i]);
        mx = fmaxf(mx, x[i]);
    }
    float scale = (mx - mn) / (float)top;
    scale = scale > TQ_VALUE_MIN_SCALE ? scale : TQ_VALUE_MIN_SCALE;
    uint8_t *data = slot + lay->kps;
    memset(data, 0, (size_t)lay->val_data_bytes);
    const float scale16 = fp16_to_f32(fp16_from_f32(scale)), min16 = fp16_to_f32(fp16_from_f32(mn));
    for (int i = 0; i < d; i++) {
        const float r = (x[i] - mn) / scale + TQ_ROUND_HALF;
        int q = (int)r; /* .to(tl.int32): toward zero */
        const int clamped = q < 0 ? 0 : q > top ? top : q;
        pack_field(data, lay->v_bits, i, (unsigned)clamped);
        if (st != NULL) {
            st->n++;
            st->n_saturated += clamped != q;
            const int nonzero = x[i] != 0.0f;
            st->n_nonzero += nonzero;
            st->n_underflow += nonzero && fmaf((float)clamped, scale16, min16) == 0.0f;
        }
    }
    put_f16(data + lay->val_data_bytes, scale);
    put_f16(data + lay->val_data_bytes + 2, mn);
}

float tq_read_key(const tq_layout *lay, const uint8_t *slot, uint8_t *idx)
{
    if (lay->key_fp8) {
        memcpy(idx, slot, (size_t)lay->d);
        return 1.0f;
    }
    for (int i = 0; i < lay->d; i++) idx[i] = (uint8_t)tq_unpack(slot, lay->k_bits, i);
    return get_f16(slot + lay->key_bytes);
}

void tq_read_value(const tq_layout *lay, const uint8_t *slot, uint8_t *codes, float *scale,
                   float *min)
{
    const uint8_t *data = slot + lay->kps;
    for (int i = 0; i < lay->d; i++) codes[i] = (uint8_t)tq_unpack(data, lay->v_bits, i);
    *scale = get_f16(data + lay->val_data_bytes);
    *min = get_f16(data + lay->val_data_bytes + 2);
}

pg_status tq_cache_write(pg_mode m, const attn_batch *b, const uint16_t *k, const uint16_t *v,
                         tq_cache *out, fp8_quant_stats *kq, fp8_quant_stats *vq, pg_err *err)
{
    memset(out, 0, sizeof *out);
    pg_status st = tq_layout_of(m, b->d, &out->lay, err);
    if (st == PG_OK && !out->lay.key_fp8) st = tq_codebook_solve(b->d, out->lay.k_bits, &out->cb, err);
    if (st != PG_OK) return st;
    out->hkv = b->hkv;
    out->n_rows = (size_t)attn_batch_tkv(b) * (size_t)b->hkv;
    out->slots = calloc(out->n_rows ? out->n_rows : 1, (size_t)out->lay.slot_bytes);
    if (out->slots == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "TurboQuant cache: cannot allocate %zu slots of %d "
                       "bytes", out->n_rows, out->lay.slot_bytes);
    for (size_t r = 0; r < out->n_rows; r++) {
        uint8_t *slot = out->slots + r * (size_t)out->lay.slot_bytes;
        tq_store_key(&out->lay, &out->cb, k + r * (size_t)b->d, slot, kq);
        tq_store_value(&out->lay, v + r * (size_t)b->d, slot, vq);
    }
    return PG_OK;
}

void tq_cache_code_stats(const tq_cache *c, int which, kv_code_stats *st)
{
    uint8_t codes[TQ_MAX_DIM];
    const float floor16 = fp16_to_f32(fp16_from_f32(TQ_VALUE_MIN_SCALE));
    for (size_t r = 0; r < c->n_rows; r++) {
        const uint8_t *slot = tq_cache_slot(c, r);
        if (which == 0) {
            const float norm = tq_read_key(&c->lay, slot, codes);
            if (!c->lay.key_fp8) kv_code_stats_add_scale(st, norm, norm == 0.0f);
        } else {
            float scale, min;
            tq_read_value(&c->lay, slot, codes, &scale, &min);
            kv_code_stats_add_scale(st, scale, scale <= floor16);
        }
        for (int i = 0; i < c->lay.d; i++) st->hist[codes[i]]++;
        st->n_codes += (uint64_t)c->lay.d;
    }
}

void tq_cache_free(tq_cache *c)
{
    free(c->slots);
    memset(c, 0, sizeof *c);
}
