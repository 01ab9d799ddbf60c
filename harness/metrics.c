/* metrics.c: error metrics of a bf16 output against the fp64 reference (see metrics.h). */
#include "metrics.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "../kernels/numerics.h"

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

void metrics_compare_bf16(const uint16_t *out, size_t out_stride, const double *ref,
                          size_t ref_stride, size_t n_rows, size_t row_len,
                          double *scratch, attn_error_metrics *m)
{
    double err2 = 0, ref2 = 0, out2 = 0, dot = 0, sum_abs = 0, max_abs = 0;
    int64_t nan = 0, inf = 0;
    size_t n = 0;
    for (size_t i = 0; i < n_rows; i++) {
        const uint16_t *o = out + i * out_stride;
        const double *r = ref + i * ref_stride;
        for (size_t j = 0; j < row_len; j++) {
            const double x = bf16_to_f32(o[j]), y = r[j];
            if (isnan(x)) nan++;
            else if (isinf(x)) inf++;
            const double e = fabs(x - y);
            err2 += e * e;
            ref2 += y * y;
            out2 += x * x;
            dot += x * y;
            sum_abs += e;
            if (e > max_abs) max_abs = e;
            scratch[n++] = e;
        }
    }
    m->n = (int64_t)n;
    m->nan_count = nan;
    m->inf_count = inf;
    if (nan + inf > 0) {
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
    const double e_norm = sqrt(err2), r_norm = sqrt(ref2), o_norm = sqrt(out2);
    m->rel_l2 = r_norm > 0 ? e_norm / r_norm : (e_norm > 0 ? INFINITY : 0);
    m->max_abs = max_abs;
    m->mean_abs = sum_abs / (double)n;
    /* Nearest rank: the ceil(p n)-th smallest, 1-based. */
    size_t rank = (size_t)ceil(METRICS_PERCENTILE * (double)n);
    if (rank < 1) rank = 1;
    m->p99_abs = select_kth(scratch, n, rank - 1);
    /* One square root of the product: exactly 1 when out == ref. */
    m->cos_sim = (r_norm > 0 && o_norm > 0) ? dot / sqrt(ref2 * out2)
                                            : (r_norm == o_norm ? 1.0 : 0.0);
    m->sqnr_db = e_norm > 0 ? 20.0 * log10(r_norm / e_norm) : INFINITY;
}
