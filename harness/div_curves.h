/*
 * div_curves.h: the curves of a diverge run's report section (issue #28),
 * computed from the run's stored per-position values (div_positions) into
 * the plain arrays of reports/report_data.h's report_divergence: mean KLD
 * and same-top along the sequence (binned), and the KLD percentile curve.
 * It lives in harness/ because the percentiles interpolate exactly as the
 * stored summaries' do (evals/divergence.h, div_interpolate), which
 * reports/ may not include.
 */
#ifndef PG_DIV_CURVES_H
#define PG_DIV_CURVES_H

#include <stddef.h>

#include "base/status.h"
#include "db/store.h"
#include "reports/report_data.h"

/* The bin width that keeps n scored positions within REPORT_DIV_MAX_BINS
 * bins (at least 1), and so the number of bins: ceil(n / width). */
size_t div_curves_bin_width(size_t n);

/* Fills d->div's curves from the positions of every row of d->div.rows
 * (d loaded by report_data_load), one row's at a time: bins of
 * div_curves_bin_width over the longest stored sequence's scored
 * positions, each row's mean KLD and same-top fraction per bin over every
 * sequence's positions in it (NaN where a row has none), and its KLD at
 * report_div_percentiles. A run without summaries or sequences is left as
 * it is. The store's errors; PG_ERR_FORMAT for a sequence of more
 * positions than any stored sequence scores; PG_ERR_NOMEM. */
pg_status div_curves_fill(pg_store *s, report_data *d, pg_err *err);

#endif /* PG_DIV_CURVES_H */
