/*
 * attn_reference.c: the fp64 reference every precision mode is measured against.
 *
 * From the bf16 inputs (exact in fp64), S = Q.K^T and O = P.V are fp64 sums;
 * the softmax is exact up to the exponential below. Built as register-blocked
 * tiles with GCC vector extensions (REF_ROWS query rows x REF_T_TILE keys for
 * S, REF_ROWS rows x REF_D_TILE dims for P.V), and this file alone may contract
 * a*b+c into fma (CMakeLists.txt): fp64 fma only makes the reference closer.
 *
 * Exponential: exp(x) = 2^n exp(r), n = round(x / ln 2), r = x - n ln 2 with
 * fdlibm's two-part ln 2 (n ln2_hi exact for |n| < 2^21), exp(r) by its Taylor
 * series to degree REF_EXP_DEGREE on |r| <= ln2/2 (truncation < 5e-18), so
 * under 2 ulp overall; arguments below REF_EXP_FLUSH (weights below e^-700
 * next to the row max's weight 1) give 0, changing l by less than 1e-300.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "attn_layout.h"
#include "parallel.h"

#define REF_LANES 8                 /* doubles per vector */
#define REF_ROWS 8                  /* query rows per register tile */
#define REF_T_TILE (2 * REF_LANES)  /* keys per S tile */
#define REF_PV_ROWS 4               /* query rows per P.V register tile */
#define REF_PV_VECS 4               /* vectors of output dims per P.V tile */
#define REF_D_TILE (REF_PV_VECS * REF_LANES)
#define REF_EXP_DEGREE 13
#define REF_EXP_FLUSH (-700.0)

typedef double v8d __attribute__((vector_size(REF_LANES * sizeof(double))));
typedef long long v8l __attribute__((vector_size(REF_LANES * sizeof(long long))));
/* The same vector type with 8-byte alignment, for loads and stores anywhere. */
typedef double v8d_u __attribute__((vector_size(REF_LANES * sizeof(double)), aligned(8)));

static inline v8d v8d_splat(double x)
{
    return (v8d){x, x, x, x, x, x, x, x};
}

static inline v8d v8d_load(const double *p)
{
    return *(const v8d_u *)p;
}

static inline void v8d_store(double *p, v8d x)
{
    *(v8d_u *)p = x;
}

/* exp of 8 lanes, under 2 ulp; lanes below REF_EXP_FLUSH (and -inf) give 0. */
static inline v8d ref_exp_v8d(v8d x)
{
    static const double shifter = 0x1.8p52;             /* round-to-int by addition */
    static const double log2e = 1.4426950408889634074;  /* 1 / ln 2 */
    static const double ln2_hi = 6.93147180369123816490e-01; /* fdlibm e_exp.c */
    static const double ln2_lo = 1.90821492927058770002e-10;
    const v8l flush = x < v8d_splat(REF_EXP_FLUSH);
    x = (v8d)(((v8l)x & ~flush) | ((v8l)v8d_splat(REF_EXP_FLUSH) & flush));
    const v8d kd = x * v8d_splat(log2e) + v8d_splat(shifter);
    const v8d n = kd - v8d_splat(shifter);
    v8d r = x - n * v8d_splat(ln2_hi);
    r = r - n * v8d_splat(ln2_lo);
    /* Horner over 1/k!, k = REF_EXP_DEGREE .. 0. */
    static const double inv_fact[REF_EXP_DEGREE + 1] = {
        1.0, 1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040,
        1.0 / 40320, 1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600,
        1.0 / 6227020800.0};
    v8d p = v8d_splat(inv_fact[REF_EXP_DEGREE]);
    for (int k = REF_EXP_DEGREE - 1; k >= 0; k--) p = p * r + v8d_splat(inv_fact[k]);
    const v8l ki = (v8l)kd - (v8l)v8d_splat(shifter);
    const v8l bits = (v8l)p + (ki << 52);
    return (v8d)(bits & ~flush);
}

/* Per-thread scratch of one work item. */
typedef struct ref_scratch {
    double *kt;   /* keys transposed in tiles: [t_pad / REF_T_TILE][d][REF_T_TILE], zero-padded */
    double *vv;   /* [t_pad][d_pad] values, zero-padded */
    double *sr;   /* [REF_ROWS][t_pad] scores, then weights */
    double *qd;   /* [group][max_q][d] this work item's queries, gathered once */
} ref_scratch;

typedef struct ref_job {
    const attn_batch *b;
    const attn_layout *lay;
    const uint16_t *q, *k, *v;
    double *out;
    int t_pad, d_pad;
    int max_q;                /* longest seq_q */
    ref_scratch *scratch;
} ref_job;

static int round_up(int x, int m)
{
    return (x + m - 1) / m * m;
}

/* One block of up to REF_ROWS query rows j0.. of head h in sequence s. */
static void ref_rows(const ref_job *job, ref_scratch *sc, int s, int h, int j0, int rows)
{
    const attn_batch *b = job->b;
    const int d = b->d, tp = job->t_pad, dp = job->d_pad;
    int lo_r[REF_ROWS], hi_r[REF_ROWS];
    const double *qb[REF_ROWS]; /* this block's query rows; pad rows repeat the last one */
    for (int r = 0; r < REF_ROWS; r++) {
        int j = j0 + (r < rows ? r : rows - 1);
        attn_key_range(b, s, j, &lo_r[r], &hi_r[r]);
        qb[r] = sc->qd + ((size_t)(h % (b->hq / b->hkv)) * (size_t)job->max_q + (size_t)j) *
                             (size_t)d;
    }
    const int t0 = lo_r[0] / REF_T_TILE * REF_T_TILE;
    const int t1 = round_up(hi_r[REF_ROWS - 1] + 1, REF_T_TILE);
    const int len = t1 - t0;

    /* S tiles: REF_ROWS x REF_T_TILE accumulators, d ascending. */
    for (int t = t0; t < t1; t += REF_T_TILE) {
        v8d acc[REF_ROWS][2];
#pragma GCC unroll 8
        for (int r = 0; r < REF_ROWS; r++) acc[r][0] = acc[r][1] = v8d_splat(0.0);
        for (int i = 0; i < d; i++) {
            const double *kr = sc->kt + (size_t)t * (size_t)d + (size_t)i * REF_T_TILE;
            const v8d k0 = v8d_load(kr), k1 = v8d_load(kr + REF_LANES);
#pragma GCC unroll 8
            for (int r = 0; r < REF_ROWS; r++) {
                const v8d qv = v8d_splat(qb[r][i]);
                acc[r][0] += qv * k0;
                acc[r][1] += qv * k1;
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < REF_ROWS; r++) {
            v8d_store(sc->sr + (size_t)r * (size_t)tp + (size_t)(t - t0), acc[r][0]);
            v8d_store(sc->sr + (size_t)r * (size_t)tp + (size_t)(t - t0) + REF_LANES, acc[r][1]);
        }
    }

    /* Mask, scale, exact softmax weights with the final row max. */
    double inv_l[REF_ROWS];
    for (int r = 0; r < REF_ROWS; r++) {
        double *sr = sc->sr + (size_t)r * (size_t)tp;
        /* Keys outside this row's range get -inf (weight 0); only the edges need it. */
        for (int t = 0; t < lo_r[r] - t0; t++) sr[t] = -INFINITY;
        for (int t = hi_r[r] + 1 - t0; t < len; t++) sr[t] = -INFINITY;
        v8d mv = v8d_splat(b->sinks != NULL ? (double)b->sinks[h] : -INFINITY);
        const v8d scale = v8d_splat((double)b->sm_scale);
        for (int t = 0; t < len; t += REF_LANES) {
            const v8d x = v8d_load(sr + t) * scale;
            v8d_store(sr + t, x);
            const v8l gt = x > mv;
            mv = (v8d)(((v8l)x & gt) | ((v8l)mv & ~gt));
        }
        double m = mv[0];
        for (int i = 1; i < REF_LANES; i++)
            if (mv[i] > m) m = mv[i];
        v8d lsum = v8d_splat(0.0);
        for (int t = 0; t < len; t += REF_LANES) {
            const v8d w = ref_exp_v8d(v8d_load(sr + t) - v8d_splat(m));
            v8d_store(sr + t, w);
            lsum += w;
        }
        double l = b->sinks != NULL ? exp((double)b->sinks[h] - m) : 0.0;
        for (int i = 0; i < REF_LANES; i++) l += lsum[i];
        inv_l[r] = 1.0 / l;
    }

    /* O = P.V / l, REF_ROWS x REF_D_TILE accumulators, keys ascending. */
    for (int r0 = 0; r0 < rows; r0 += REF_PV_ROWS)
        for (int c = 0; c < dp; c += REF_D_TILE) {
            v8d acc[REF_PV_ROWS][REF_PV_VECS];
#pragma GCC unroll 4
            for (int r = 0; r < REF_PV_ROWS; r++)
#pragma GCC unroll 4
                for (int u = 0; u < REF_PV_VECS; u++) acc[r][u] = v8d_splat(0.0);
            const double *pr = sc->sr + (size_t)r0 * (size_t)tp;
            for (int t = 0; t < len; t++) {
                const double *vr = sc->vv + (size_t)(t0 + t) * (size_t)dp + (size_t)c;
                v8d vv[REF_PV_VECS];
#pragma GCC unroll 4
                for (int u = 0; u < REF_PV_VECS; u++) vv[u] = v8d_load(vr + u * REF_LANES);
#pragma GCC unroll 4
                for (int r = 0; r < REF_PV_ROWS; r++) {
                    const v8d p = v8d_splat(pr[(size_t)r * (size_t)tp + (size_t)t]);
#pragma GCC unroll 4
                    for (int u = 0; u < REF_PV_VECS; u++) acc[r][u] += p * vv[u];
                }
            }
            for (int r = 0; r < REF_PV_ROWS && r0 + r < rows; r++) {
                double *o = job->out + ((size_t)(job->lay->q_off[s] + j0 + r0 + r) *
                                            (size_t)b->hq + (size_t)h) * (size_t)d;
                const v8d il = v8d_splat(inv_l[r0 + r]);
                for (int u = 0; u < REF_PV_VECS; u++) {
                    const int col = c + u * REF_LANES;
                    if (col + REF_LANES <= d) {
                        v8d_store(o + col, acc[r][u] * il);
                    } else {
                        for (int i = 0; i < REF_LANES && col + i < d; i++)
                            o[col + i] = acc[r][u][i] * inv_l[r0 + r];
                    }
                }
            }
        }
}

/* Work item: sequence item / hkv, kv head item % hkv. */
static void ref_item(void *ctx, int item, int thread)
{
    const ref_job *job = ctx;
    const attn_batch *b = job->b;
    ref_scratch *sc = &job->scratch[thread];
    const int s = item / b->hkv, g = item % b->hkv, d = b->d, n = b->seq_kv[s];
    const int tp = job->t_pad, dp = job->d_pad;
    memset(sc->kt, 0, (size_t)d * (size_t)tp * sizeof(double));
    memset(sc->vv, 0, (size_t)tp * (size_t)dp * sizeof(double));
    for (int t = 0; t < n; t++) {
        const size_t row = ((size_t)(job->lay->kv_off[s] + t) * (size_t)b->hkv + (size_t)g) *
                           (size_t)d;
        for (int i = 0; i < d; i++) {
            sc->kt[(size_t)(t / REF_T_TILE) * (size_t)(d * REF_T_TILE) + (size_t)i * REF_T_TILE +
                   (size_t)(t % REF_T_TILE)] = bf16_to_f32(job->k[row + (size_t)i]);
            sc->vv[(size_t)t * (size_t)dp + (size_t)i] = bf16_to_f32(job->v[row + (size_t)i]);
        }
    }
    const int group = b->hq / b->hkv;
    for (int hh = 0; hh < group; hh++)
        for (int j = 0; j < b->seq_q[s]; j++) {
            const uint16_t *qs = job->q + ((size_t)(job->lay->q_off[s] + j) * (size_t)b->hq +
                                           (size_t)(g * group + hh)) * (size_t)d;
            double *qo = sc->qd + ((size_t)hh * (size_t)job->max_q + (size_t)j) * (size_t)d;
            for (int i = 0; i < d; i++) qo[i] = bf16_to_f32(qs[i]);
        }
    for (int hh = 0; hh < group; hh++)
        for (int j0 = 0; j0 < b->seq_q[s]; j0 += REF_ROWS) {
            const int rows = b->seq_q[s] - j0 < REF_ROWS ? b->seq_q[s] - j0 : REF_ROWS;
            ref_rows(job, sc, s, g * group + hh, j0, rows);
        }
}

pg_status attn_reference(const attn_batch *b, const uint16_t *q, const uint16_t *k,
                         const uint16_t *v, double *out, int n_threads, pg_err *err)
{
    pg_status st = attn_batch_check(b, err);
    if (st != PG_OK) return st;
    attn_layout lay;
    st = attn_layout_make(b, &lay, err);
    if (st != PG_OK) return st;
    const int items = b->n_seqs * b->hkv;
    n_threads = attn_item_threads(b, n_threads);
    int max_q = 0;
    for (int i = 0; i < b->n_seqs; i++)
        if (b->seq_q[i] > max_q) max_q = b->seq_q[i];
    ref_job job = {b, &lay, q, k, v, out, round_up(lay.max_kv, REF_T_TILE),
                   round_up(b->d, REF_D_TILE), max_q, NULL};
    job.scratch = calloc((size_t)n_threads, sizeof *job.scratch);
    if (job.scratch == NULL) st = pg_fail(err, PG_ERR_NOMEM, "reference: out of memory");
    for (int t = 0; st == PG_OK && t < n_threads; t++) {
        ref_scratch *sc = &job.scratch[t];
        sc->kt = malloc((size_t)b->d * (size_t)job.t_pad * sizeof(double));
        sc->vv = malloc((size_t)job.t_pad * (size_t)job.d_pad * sizeof(double));
        sc->sr = malloc((size_t)REF_ROWS * (size_t)job.t_pad * sizeof(double));
        sc->qd = malloc((size_t)(b->hq / b->hkv) * (size_t)max_q * (size_t)b->d * sizeof(double));
        if (!sc->kt || !sc->vv || !sc->sr || !sc->qd)
            st = pg_fail(err, PG_ERR_NOMEM, "reference: cannot allocate scratch for %d keys",
                         lay.max_kv);
    }
    if (st == PG_OK) st = parallel_for(items, n_threads, ref_item, &job, err);
    if (job.scratch != NULL) {
        for (int t = 0; t < n_threads; t++) {
            free(job.scratch[t].kt);
            free(job.scratch[t].vv);
            free(job.scratch[t].sr);
            free(job.scratch[t].qd);
        }
        free(job.scratch);
    }
    attn_layout_free(&lay);
    return st;
}
