/* attn_reference_sliced.c: the fp64 reference by int8 slices with exact int32 sums (see attn_reference_sliced.h). */
#include "attn_reference_sliced.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn_layout.h"
#include "numerics.h"
#include "parallel.h"

/* Bits of one slice: a digit in [-127, 127] (slice_values). */
#define SLICE_BITS 7
#define SLICE_RADIX_INT 128
/* A balanced digit's offset: digits below the top one in [-64, 63]. */
#define SLICE_HALF 64

const attn_sliced_config ATTN_SLICED_DEFAULT = {4, 5, 4, 4, 5, 64, ATTN_SLICE_NEAREST, 1};

pg_status attn_sliced_config_check(const attn_sliced_config *c, pg_err *err)
{
    if (c == NULL) return pg_fail(err, PG_ERR_USAGE, "sliced reference: no configuration");
    const struct {
        const char *name;
        int value, lo, hi;
    } f[] = {
        {"qk_slices", c->qk_slices, 1, ATTN_SLICED_MAX_SLICES},
        {"p_slices", c->p_slices, 1, ATTN_SLICED_MAX_SLICES},
        {"v_slices", c->v_slices, 1, ATTN_SLICED_MAX_SLICES},
        {"qk_max_order", c->qk_max_order, 2, 2 * ATTN_SLICED_MAX_SLICES},
        {"pv_max_order", c->pv_max_order, 2, 2 * ATTN_SLICED_MAX_SLICES},
        {"key_tile", c->key_tile, 1, ATTN_SLICED_MAX_KEY_TILE},
        {"rounding", (int)c->rounding, ATTN_SLICE_TRUNCATE, ATTN_SLICE_NEAREST},
        {"peak_keys", c->peak_keys, 0, ATTN_SLICED_MAX_PEAK_KEYS},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].value < f[i].lo || f[i].value > f[i].hi)
            return pg_fail(err, PG_ERR_USAGE, "sliced reference: %s is %d, expected %d .. %d",
                           f[i].name, f[i].value, f[i].lo, f[i].hi);
    return PG_OK;
}

/* Cuts x[0..n) into n_slices int8 slices, out[s * n + i] for slice s + 1,
 * on the exponent it returns (0 for an all-zero x, whose slices are zero):
 * x = 2^e sum_s out_s 2^(-7 (s + 1)) + r. Each x becomes one integer
 * N = x 2^(7 n_slices - e), cut toward zero (ATTN_SLICE_TRUNCATE) or to
 * nearest, ties to even (ATTN_SLICE_NEAREST), and N's digits are the slices:
 *   truncation: e is the smallest with every |x| < 2^e; the digits are the
 *     base-128 digits of |N| with x's sign, in [-127, 127], and
 *     |r| < 2^(e - 7 n) with x's sign;
 *   nearest: the digits are balanced, each below the top one in [-64, 63]
 *     (a = ((N + 64) mod 128) - 64, then N = (N - a) / 128), and the top one
 *     what is left; e is one more when the largest |N| would exceed
 *     127 * 128^(n - 1), which keeps the top one within [-127, 127] (the
 *     digits below it add up to within half of one top unit); |r| <=
 *     2^(e - 7 n - 1), of either sign.
 * One scaling by a power of two and one rounding to an integer per value,
 * then integer steps: what a kernel can do to P in registers (one cvt and a
 * few integer instructions per value, where a digit at a time in fp64 takes
 * three fp64 instructions per digit). An Inf or NaN in x sets *nonfinite
 * (and every slice zero). */
static int slice_values(const double *x, int n, int n_slices, attn_slice_rounding rounding,
                        int8_t *out, int *nonfinite)
{
    double mx = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(x[i])) *nonfinite = 1; /* then every slice zero: the call fails */
        mx = fmax(mx, fabs(x[i]));
    }
    if (mx == 0 || *nonfinite) {
        memset(out, 0, (size_t)n_slices * (size_t)n);
        return 0;
    }
    const int bits = SLICE_BITS * n_slices;
    int e = ilogb(mx) + 1;
    if (rounding == ATTN_SLICE_NEAREST &&
        nearbyint(ldexp(mx, bits - e)) > ldexp(INT8_MAX, bits - SLICE_BITS))
        e++;
    for (int i = 0; i < n; i++) {
        const double scaled = ldexp(x[i], bits - e);
        if (rounding == ATTN_SLICE_NEAREST) {
            int64_t N = (int64_t)nearbyint(scaled);
            for (int s = n_slices - 1; s > 0; s--) {
                const int64_t a = ((N + SLICE_HALF) & (SLICE_RADIX_INT - 1)) - SLICE_HALF;
                out[(size_t)s * (size_t)n + (size_t)i] = (int8_t)a;
                N = (N - a) / SLICE_RADIX_INT;
            }
            out[i] = (int8_t)N;
        } else {
            const int64_t N = (int64_t)trunc(scaled), mag = N < 0 ? -N : N;
            for (int s = 0; s < n_slices; s++) {
                const int64_t a = (mag >> (SLICE_BITS * (n_slices - 1 - s))) & (SLICE_RADIX_INT - 1);
                out[(size_t)s * (size_t)n + (size_t)i] = (int8_t)(N < 0 ? -a : a);
            }
        }
    }
    return e;
}

/* Slices a[s] of one operand against slices b[t] of the other, [slices][n]
 * each: a Q row's and a K row's (n = d), or a tile's P row's and one V
 * channel's (n = key_tile); na and nb slices. */
typedef struct slice_pair {
    const int8_t *a, *b;
    int n, na, nb;
} slice_pair;

/* The sum over slice pairs (s, t) of p with orders (1-based s + t) <=
 * max_order of 2^(e - 7 (s + t)) I_st, I_st the exact int32 sum of a[s]
 * times b[t]: the pairs of one order summed in int32 (one accumulator a
 * kernel chains their MMAs into), each order's sum scaled into fp64 and
 * added from the highest order down. */
static double pairs_sum(const slice_pair *p, int max_order, int e)
{
    double sum = 0;
    for (int order = max_order; order >= 2; order--) {
        int32_t I = 0;
        for (int s = 1; s <= p->na; s++) {
            const int t = order - s;
            if (t < 1 || t > p->nb) continue;
            const int8_t *a = p->a + (size_t)(s - 1) * (size_t)p->n;
            const int8_t *b = p->b + (size_t)(t - 1) * (size_t)p->n;
            for (int i = 0; i < p->n; i++) I += (int32_t)a[i] * (int32_t)b[i];
        }
        if (I != 0) sum += ldexp((double)I, e - SLICE_BITS * order);
    }
    return sum;
}

typedef struct sliced_scratch {
    int8_t *ks;    /* [keys][qk_slices][d] */
    int *ek;       /* [keys] */
    int8_t *vs;    /* [tiles][d][v_slices][key_tile] */
    int *ev;       /* [tiles][d] */
    double *col;   /* [key_tile] one channel of V in a tile; then a tile's scores, weights */
    int8_t *ps;    /* [p_slices][key_tile] */
    int8_t *qs;    /* [qk_slices][d] */
    double *row;   /* [d] one Q or K row in fp64; then the output accumulator */
    int nonfinite; /* set once an operand held an Inf or NaN */
} sliced_scratch;

typedef struct sliced_job {
    const attn_batch *b;
    const attn_layout *lay;
    const uint16_t *q, *k, *v;
    const attn_sliced_config *c;
    double *out;
    sliced_scratch *scratch;
} sliced_job;

/* Key j's row (d values) of kv head g in x (K or V, [tkv, hkv, d]) for the
 * sequence whose first row is kv_row0. */
static const uint16_t *kv_row(const attn_batch *b, const uint16_t *x, size_t kv_row0, int j,
                              int g)
{
    return x + ((kv_row0 + (size_t)j) * (size_t)b->hkv + (size_t)g) * (size_t)b->d;
}

/* Work item: sequence item / hkv, kv head item % hkv. */
static void sliced_item(void *ctx, int item, int thread)
{
    const sliced_job *job = ctx;
    const attn_batch *b = job->b;
    const attn_sliced_config *c = job->c;
    sliced_scratch *sc = &job->scratch[thread];
    const int s = item / b->hkv, g = item % b->hkv, d = b->d, n = b->seq_kv[s];
    const int kt = c->key_tile, n_tiles = (n + kt - 1) / kt;
    const size_t kv_row0 = (size_t)job->lay->kv_off[s];
    /* K rows' slices */
    for (int j = 0; j < n; j++) {
        const uint16_t *kr = kv_row(b, job->k, kv_row0, j, g);
        for (int i = 0; i < d; i++) sc->row[i] = bf16_to_f32(kr[i]);
        sc->ek[j] = slice_values(sc->row, d, c->qk_slices, c->rounding,
                                 sc->ks + (size_t)j * (size_t)c->qk_slices * (size_t)d,
                                 &sc->nonfinite);
    }
    /* V's slices per (tile, channel); keys past n are zero */
    for (int tile = 0; tile < n_tiles; tile++)
        for (int ch = 0; ch < d; ch++) {
            for (int jj = 0; jj < kt; jj++) {
                const int j = tile * kt + jj;
                sc->col[jj] = j < n ? bf16_to_f32(kv_row(b, job->v, kv_row0, j, g)[ch]) : 0.0;
            }
            const size_t at = (size_t)tile * (size_t)d + (size_t)ch;
            sc->ev[at] = slice_values(sc->col, kt, c->v_slices, c->rounding,
                                      sc->vs + at * (size_t)c->v_slices * (size_t)kt, &sc->nonfinite);
        }
    const int group = b->hq / b->hkv;
    for (int hh = 0; hh < group; hh++) {
        const int h = g * group + hh;
        const double sink = b->sinks != NULL ? (double)b->sinks[h] : -INFINITY;
        for (int j = 0; j < b->seq_q[s]; j++) {
            const size_t orow = ((size_t)(job->lay->q_off[s] + j) * (size_t)b->hq + (size_t)h) *
                                (size_t)d;
            for (int i = 0; i < d; i++) sc->row[i] = bf16_to_f32(job->q[orow + (size_t)i]);
            const int eq = slice_values(sc->row, d, c->qk_slices, c->rounding, sc->qs,
                                        &sc->nonfinite);
            int lo, hi;
            attn_key_range(b, s, j, &lo, &hi);
            /* one pass over the row's key tiles, ascending: a sink is an
             * initial logit (m = sink, l = exp(sink - m) = 1) */
            double m = sink, l = b->sinks != NULL ? 1.0 : 0.0;
            double *acc = sc->row;
            for (int i = 0; i < d; i++) acc[i] = 0;
            for (int tile = lo / kt; tile <= hi / kt; tile++) {
                /* the tile's scores, scaled (keys outside [lo, hi] -inf) */
                double tmax = -INFINITY;
                for (int jj = 0; jj < kt; jj++) {
                    const int t = tile * kt + jj;
                    sc->col[jj] = -INFINITY;
                    if (t < lo || t > hi) continue;
                    const slice_pair pr = {sc->qs,
                                           sc->ks + (size_t)t * (size_t)c->qk_slices * (size_t)d,
                                           d, c->qk_slices, c->qk_slices};
                    sc->col[jj] = pairs_sum(&pr, c->qk_max_order, eq + sc->ek[t]) *
                                  (double)b->sm_scale;
                    tmax = fmax(tmax, sc->col[jj]);
                }
                /* the lazy maximum: m moves to the tile's only past the
                 * margin (from -inf always: alpha = 0) */
                if (tmax - m > ATTN_SLICED_RESCALE_MARGIN) {
                    const double alpha = exp(m - tmax);
                    l *= alpha;
                    for (int i = 0; i < d; i++) acc[i] *= alpha;
                    m = tmax;
                }
                /* weights, l in key order */
                for (int jj = 0; jj < kt; jj++) {
                    sc->col[jj] = sc->col[jj] == -INFINITY ? 0.0 : exp(sc->col[jj] - m);
                    l += sc->col[jj];
                }
                /* the tile's peak_keys largest weights (the first of equal
                 * ones), each times its value row in fp64 into acc, in the
                 * order taken, then zero for the slices */
                for (int pk = 0; pk < c->peak_keys; pk++) {
                    int at = -1;
                    for (int jj = 0; jj < kt; jj++)
                        if (sc->col[jj] > 0 && (at < 0 || sc->col[jj] > sc->col[at])) at = jj;
                    if (at < 0) break;
                    const uint16_t *vr = kv_row(b, job->v, kv_row0, tile * kt + at, g);
                    for (int i = 0; i < d; i++) acc[i] += sc->col[at] * (double)bf16_to_f32(vr[i]);
                    sc->col[at] = 0;
                }
                /* P.V: the tile's slice pairs, one int32 sum per order */
                const int ep = slice_values(sc->col, kt, c->p_slices, c->rounding, sc->ps,
                                            &sc->nonfinite);
                for (int ch = 0; ch < d; ch++) {
                    const size_t at = (size_t)tile * (size_t)d + (size_t)ch;
                    const slice_pair pr = {sc->ps, sc->vs + at * (size_t)c->v_slices * (size_t)kt,
                                           kt, c->p_slices, c->v_slices};
                    acc[ch] += pairs_sum(&pr, c->pv_max_order, ep + sc->ev[at]);
                }
            }
            const double inv_l = 1.0 / l;
            for (int i = 0; i < d; i++) job->out[orow + (size_t)i] = acc[i] * inv_l;
        }
    }
}

static void scratch_free(sliced_scratch *sc)
{
    free(sc->ks);
    free(sc->ek);
    free(sc->vs);
    free(sc->ev);
    free(sc->col);
    free(sc->ps);
    free(sc->qs);
    free(sc->row);
}

pg_status attn_reference_sliced(const attn_batch *b, const uint16_t *q, const uint16_t *k,
                                const uint16_t *v, const attn_sliced_config *c, double *out,
                                int n_threads, pg_err *err)
{
    pg_status st = attn_batch_check(b, err);
    if (st == PG_OK) st = attn_sliced_config_check(c, err);
    if (st != PG_OK) return st;
    attn_layout lay;
    st = attn_layout_make(b, &lay, err);
    if (st != PG_OK) return st;
    const int items = b->n_seqs * b->hkv;
    n_threads = attn_item_threads(b, n_threads);
    const size_t keys = (size_t)lay.max_kv, d = (size_t)b->d, kt = (size_t)c->key_tile;
    const size_t tiles = (keys + kt - 1) / kt;
    sliced_job job = {b, &lay, q, k, v, c, out, calloc((size_t)n_threads, sizeof(sliced_scratch))};
    if (job.scratch == NULL) st = pg_fail(err, PG_ERR_NOMEM, "sliced reference: out of memory");
    for (int t = 0; st == PG_OK && t < n_threads; t++) {
        sliced_scratch *sc = &job.scratch[t];
        sc->ks = malloc(keys * (size_t)c->qk_slices * d + 1);
        sc->ek = malloc((keys + 1) * sizeof *sc->ek);
        sc->vs = malloc(tiles * d * (size_t)c->v_slices * kt + 1);
        sc->ev = malloc((tiles * d + 1) * sizeof *sc->ev);
        sc->col = malloc(kt * sizeof *sc->col);
        sc->ps = malloc((size_t)c->p_slices * kt);
        sc->qs = malloc((size_t)c->qk_slices * d + 1);
        sc->row = malloc((d + 1) * sizeof *sc->row);
        if (!sc->ks || !sc->ek || !sc->vs || !sc->ev || !sc->col || !sc->ps || !sc->qs ||
            !sc->row)
            st = pg_fail(err, PG_ERR_NOMEM, "sliced reference: cannot allocate scratch for %d "
                         "keys", lay.max_kv);
    }
    if (st == PG_OK) st = parallel_for(items, n_threads, sliced_item, &job, err);
    for (int t = 0; st == PG_OK && t < n_threads; t++)
        if (job.scratch[t].nonfinite)
            st = pg_fail(err, PG_ERR_NUMERIC, "sliced reference: an Inf or NaN in Q, K or V (or "
                         "a score or weight from them); the reference takes finite inputs only");
    for (int t = 0; job.scratch != NULL && t < n_threads; t++) scratch_free(&job.scratch[t]);
    free(job.scratch);
    attn_layout_free(&lay);
    return st;
}
