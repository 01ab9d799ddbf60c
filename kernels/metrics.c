/* metrics.c: error metrics of a bf16 output against the fp64 reference (see metrics.h). */
#include "metrics.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "kernels/numerics.h"

/* The k-th smallest (0-based) of a[0..n) by quickselect (Hoare partition,
 * median-of-three pivot); reorders a. */
static double select_kth(double *a, size_t n, size_t k)
{
    ptrdiff_t lo = 0, hi = (ptrdiff_t)n - 1;
    const ptrdiff_t kk = (ptrdiff_t)k;
    while (lo < hi) {
        const ptrdiff_t mid = lo + (hi - lo) / 2;
        const double x = a[lo], y = a[mid], z = a[hi];
        const double pivot = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        ptrdiff_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot) i++;
            while (a[j] > pivot) j--;
            if (i <= j) {
                const double t = a[i];
                a[i] = a[j];
                a[j] = t;
                i++;
                j--;
            }
        }
        /* Now a[lo..j] <= pivot <= a[i..hi], and j < i. */
        if (kk <= j) hi = j;
        else if (kk >= i) lo = i;
        else return a[kk];
    }
    return a[kk];
}

size_t metrics_p99_index(int64_t n)
{
    size_t rank = (size_t)ceil(METRICS_PERCENTILE * (double)n);
    if (rank < 1) rank = 1;
    return rank - 1;
}

void metrics_from_sums(const metrics_sums *s, int64_t n, double p99, pg_metric_values *m)
{
    m->nan_count = s->nan_count;
    m->inf_count = s->inf_count;
    if (s->nan_count + s->inf_count > 0) {
        m->rel_l2 = m->max_abs = m->mean_abs = m->p99_abs = INFINITY;
        m->sqnr_db = -INFINITY;
        m->cos_sim = NAN;
        return;
    }
    if (n == 0) {
        m->rel_l2 = m->max_abs = m->mean_abs = m->p99_abs = 0;
        m->cos_sim = 1;
        m->sqnr_db = INFINITY;
        return;
    }
    const double e_norm = sqrt(s->err2), r_norm = sqrt(s->ref2), o_norm = sqrt(s->out2);
    m->rel_l2 = metrics_rel_l2_of(s->err2, s->ref2, 0);
    m->max_abs = s->max_abs;
    m->mean_abs = s->sum_abs / (double)n;
    m->p99_abs = p99;
    /* One square root of the product: exactly 1 when out == ref. */
    m->cos_sim = (r_norm > 0 && o_norm > 0) ? s->dot / sqrt(s->ref2 * s->out2)
                                            : (r_norm == o_norm ? 1.0 : 0.0);
    m->sqnr_db = e_norm > 0 ? 20.0 * log10(r_norm / e_norm) : INFINITY;
}

void metrics_compare_bf16(const uint16_t *out, size_t out_stride, const double *ref,
                          size_t ref_stride, size_t n_rows, size_t row_len,
                          double *scratch, pg_metric_values *m)
{
    metrics_sums s = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t n = 0;
    for (size_t i = 0; i < n_rows; i++) {
        const uint16_t *o = out + i * out_stride;
        const double *r = ref + i * ref_stride;
        for (size_t j = 0; j < row_len; j++) {
            scratch[n++] = metrics_add_element(&s, bf16_to_f32(o[j]), r[j]);
        }
    }
    const int finite = s.nan_count + s.inf_count == 0 && n > 0;
    const double p99 = finite ? select_kth(scratch, n, metrics_p99_index((int64_t)n)) : 0;
    metrics_from_sums(&s, (int64_t)n, p99, m);
}

void metrics_compare_heads(const uint16_t *out, const double *ref, int64_t tq, int hq, int d,
                           double *scratch, pg_metric_values *m)
{
    const size_t row = (size_t)hq * (size_t)d;
    metrics_compare_bf16(out, row, ref, row, (size_t)tq, row, scratch, &m[0]);
    for (int h = 0; h < hq; h++)
        metrics_compare_bf16(out + (size_t)h * (size_t)d, row, ref + (size_t)h * (size_t)d, row,
                             (size_t)tq, (size_t)d, scratch, &m[1 + h]);
}

double metrics_rel_l2_of(double err2, double ref2, int64_t n_nonfinite)
{
    if (n_nonfinite > 0) return INFINITY;
    const double e_norm = sqrt(err2), r_norm = sqrt(ref2);
    return r_norm > 0 ? e_norm / r_norm : (e_norm > 0 ? INFINITY : 0);
}

double metrics_rel_l2_bf16(const uint16_t *x, const uint16_t *y, size_t n)
{
    metrics_sums s = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        const double xi = bf16_to_f32(x[i]), yi = bf16_to_f32(y[i]);
        nonfinite += !isfinite(xi) || !isfinite(yi);
        metrics_add_element(&s, xi, yi);
    }
    return metrics_rel_l2_of(s.err2, s.ref2, nonfinite);
}
