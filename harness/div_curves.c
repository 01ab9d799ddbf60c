/* div_curves.c: a diverge run's report curves from its positions (see div_curves.h). */
#include "div_curves.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "db/divergence_store.h"
#include "evals/divergence.h"

/* Percent per unit (report_div_percentiles are in percent). */
#define PERCENT 100.0

size_t div_curves_bin_width(size_t n)
{
    const size_t w = (n + REPORT_DIV_MAX_BINS - 1) / REPORT_DIV_MAX_BINS;
    return w > 0 ? w : 1;
}

/* The role of summary row r. */
static div_role row_role(const div_summary_stored *r)
{
    return strcmp(r->role, div_role_name(DIV_ROLE_FLOOR)) == 0 ? DIV_ROLE_FLOOR : DIV_ROLE_MODE;
}

/* Orders doubles ascending (KLD values: finite, NaN never stored). */
static int dbl_cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The longest of run_id's stored sequences in scored positions, into *n. */
static pg_status longest(pg_store *s, int64_t run_id, size_t *n, pg_err *err)
{
    div_sequence_stored *seq = NULL;
    size_t n_seq = 0;
    const pg_status st = divergence_store_read_sequences(s, run_id, &seq, &n_seq, err);
    *n = 0;
    for (size_t q = 0; st == PG_OK && q < n_seq; q++)
        if (seq[q].n_tokens - seq[q].score_from > *n) *n = seq[q].n_tokens - seq[q].score_from;
    divergence_store_sequences_free(seq, n_seq);
    return st;
}

/* Row r's bins and percentiles from its positions p into v; PG_ERR_FORMAT
 * when a sequence has more positions than the longest stored sequence
 * scores (a damaged file). */
static pg_status fill_row(const div_mode_positions *p, size_t r, size_t width,
                          report_divergence *v, pg_err *err)
{
    for (size_t q = 0; q < p->n_seq; q++)
        if (p->seq_at[q + 1] - p->seq_at[q] > v->bin_last[v->n_bins - 1] + 1)
            return pg_fail(err, PG_ERR_FORMAT, "report: %s '%s' has %zu positions in a "
                           "sequence, more than any stored sequence scores (%zu)", v->rows[r].role,
                           v->rows[r].mode, p->seq_at[q + 1] - p->seq_at[q],
                           v->bin_last[v->n_bins - 1] + 1);
    double *kld = v->kld_bin + r * v->n_bins, *same = v->same_top_bin + r * v->n_bins;
    size_t *count = calloc(v->n_bins, sizeof *count);
    double *sorted = malloc((p->n > 0 ? p->n : 1) * sizeof *sorted);
    if (count == NULL || sorted == NULL) {
        free(count);
        free(sorted);
        return pg_fail(err, PG_ERR_NOMEM, "report: out of memory");
    }
    for (size_t q = 0; q < p->n_seq; q++)
        for (size_t i = p->seq_at[q]; i < p->seq_at[q + 1]; i++) {
            const size_t b = (i - p->seq_at[q]) / width;
            kld[b] += p->pos[i].kld_lb;
            same[b] += p->pos[i].same_top;
            count[b]++;
        }
    for (size_t b = 0; b < v->n_bins; b++) {
        kld[b] = count[b] > 0 ? kld[b] / (double)count[b] : NAN;
        same[b] = count[b] > 0 ? same[b] / (double)count[b] : NAN;
    }
    for (size_t i = 0; i < p->n; i++) sorted[i] = p->pos[i].kld_lb;
    qsort(sorted, p->n, sizeof *sorted, dbl_cmp);
    for (size_t k = 0; k < REPORT_DIV_N_PERCENTILES; k++)
        v->kld_percentile[r * REPORT_DIV_N_PERCENTILES + k] =
            div_interpolate(sorted, p->n, report_div_percentiles[k] / PERCENT);
    free(count);
    free(sorted);
    return PG_OK;
}

pg_status div_curves_fill(pg_store *s, report_data *d, pg_err *err)
{
    report_divergence *v = &d->div;
    if (v->n_rows == 0) return PG_OK;
    size_t n = 0;
    pg_status st = longest(s, d->run.id, &n, err);
    if (st != PG_OK || n == 0) return st;
    const size_t width = div_curves_bin_width(n);
    v->n_bins = (n + width - 1) / width;
    const size_t cells = v->n_rows * v->n_bins;
    v->bin_first = calloc(v->n_bins, sizeof *v->bin_first);
    v->bin_last = calloc(v->n_bins, sizeof *v->bin_last);
    v->kld_bin = calloc(cells, sizeof *v->kld_bin);
    v->same_top_bin = calloc(cells, sizeof *v->same_top_bin);
    v->kld_percentile = calloc(v->n_rows * REPORT_DIV_N_PERCENTILES, sizeof *v->kld_percentile);
    if (v->bin_first == NULL || v->bin_last == NULL || v->kld_bin == NULL ||
        v->same_top_bin == NULL || v->kld_percentile == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "report: out of memory");
    for (size_t b = 0; b < v->n_bins; b++) {
        v->bin_first[b] = b * width;
        v->bin_last[b] = (b + 1) * width < n ? (b + 1) * width - 1 : n - 1;
    }
    /* One row's positions at a time: a long run's modes need not all fit at once. */
    for (size_t r = 0; st == PG_OK && r < v->n_rows; r++) {
        div_mode_positions p;
        st = divergence_store_read_mode_positions(s, d->run.id, v->rows[r].mode,
                                                  row_role(&v->rows[r]), &p, err);
        if (st == PG_OK) st = fill_row(&p, r, width, v, err);
        div_mode_positions_free(&p);
    }
    return st;
}
