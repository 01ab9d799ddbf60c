/*
 * metrics.h: how far a precision mode's attention output is from the reference.
 *
 * For output O (bf16) and reference R (fp64) over the same elements:
 *   rel_l2 = |O-R|_2 / |R|_2          max_abs, mean_abs of |O-R|
 *   p99_abs = exact 99th percentile of |O-R| (nearest rank, ceil(0.99 n))
 *   cos_sim = <O,R> / (|O| |R|)       sqnr_db = 20 log10(|R| / |O-R|)
 *   nan_count, inf_count: non-finite elements of O.
 * Any non-finite O makes the error metrics +inf (sqnr -inf, cos_sim NaN):
 * a NaN output is never "close". Identical outputs give sqnr_db = +inf.
 * The metrics land in a pg_metric_values (base/metric.h), the one row type
 * the store and the reports share.
 */
#ifndef PG_METRICS_H
#define PG_METRICS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "base/metric.h"
#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The percentile that p99_abs reports. */
#define METRICS_PERCENTILE 0.99

/* The running sums metrics are made from (any summation order). */
typedef struct metrics_sums {
    double err2, ref2, out2, dot, sum_abs, max_abs;
    int64_t nan_count, inf_count;
} metrics_sums;

#ifdef __CUDACC__
#define METRICS_INLINE __host__ __device__ __forceinline__ static
#else
#define METRICS_INLINE static inline
#endif

/* Adds one element, output x (a bf16 widened) against reference y, to s and
 * returns its |x - y|: the one definition of the per-element sums, for the
 * CPU (metrics_compare_bf16) and the GPU (kernels/cuda_metrics.cu). A NaN
 * |x - y| leaves max_abs alone (e > max is false). The two backends agree
 * to rounding, not bit for bit: they sum in other orders, and nvcc fuses
 * the products into FMAs where the host build does not (-ffp-contract=off). */
METRICS_INLINE double metrics_add_element(metrics_sums *s, double x, double y)
{
    const double e = fabs(x - y);
    if (isnan(x)) s->nan_count++;
    else if (isinf(x)) s->inf_count++;
    s->err2 += e * e;
    s->ref2 += y * y;
    s->out2 += x * x;
    s->dot += x * y;
    s->sum_abs += e;
    if (e > s->max_abs) s->max_abs = e;
    return e;
}

/* 0-based index of the nearest-rank METRICS_PERCENTILE among n >= 1 values
 * (the ceil(p n)-th smallest). */
size_t metrics_p99_index(int64_t n);

/* Fills m from the sums of n elements and their p99 |O-R|, applying the
 * non-finite and empty rules above; shared by every backend (the GPU's
 * sums come back to the host and are finished here). */
void metrics_from_sums(const metrics_sums *s, int64_t n, double p99, pg_metric_values *m);

/* Metrics of n elements: out[i*out_stride + j], ref[i*ref_stride + j] for
 * rows i < n_rows and j < row_len (n = n_rows*row_len). scratch must hold n
 * doubles (for the exact percentile). */
void metrics_compare_bf16(const uint16_t *out, size_t out_stride, const double *ref,
                          size_t ref_stride, size_t n_rows, size_t row_len,
                          double *scratch, pg_metric_values *m);

/* Metrics of a [tq, hq, d] output against its reference: m[0] the whole
 * layer, m[1 + h] head h. scratch must hold tq*hq*d doubles. */
void metrics_compare_heads(const uint16_t *out, const double *ref, int64_t tq, int hq, int d,
                           double *scratch, pg_metric_values *m);

/* rel_l2 of bf16 output x against bf16 reference y (n elements each; the
 * scale-plumbing diagnosis measures an external output against a
 * hypothesis's output), from metrics_add_element's err2 and ref2 by
 * metrics_rel_l2_of. */
double metrics_rel_l2_bf16(const uint16_t *x, const uint16_t *y, size_t n);

/* The rel_l2 of sums err2 and ref2 when n_nonfinite elements of x or y were
 * NaN or Inf: +inf then (no output is near a non-finite one, nor a
 * non-finite output near anything), else metrics_from_sums's rule (0 / 0
 * is 0, e / 0 is +inf). One rule for the CPU and the GPU's sums. */
double metrics_rel_l2_of(double err2, double ref2, int64_t n_nonfinite);

#ifdef __cplusplus
}
#endif

#endif /* PG_METRICS_H */
