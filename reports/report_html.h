/*
 * report_html.h: a run's report as ONE self-contained HTML5 page: inline CSS
 * and inline SVG (reports/svg.h), no script, no network reference, readable
 * in any browser or mail client with nothing else.
 *
 * Sections, in order, each a <section> with a fixed id and an <h2>:
 *   header#run          id, kind, label, status, times, git rev, host, device
 *   #regressions        the gate's failing flags first ("not gated" without any)
 *   #divergence         a diverge run's: the table per mode and the noise floor, KLD
 *                       along the sequence, the percentile curve, same-top along the
 *                       sequence (reports/report_divergence.h)
 *   #layers             rel_l2 per layer and variant: log-scale line chart + table
 *   #heads              per-head rel_l2 heatmap of the worst 3 layers of the worst fp8 mode
 *   #quant              fp8 saturation and underflow per layer and tensor (table)
 *   #evals              end-task accuracy with 95% intervals per mode and effort
 *   #trend              layer-mean rel_l2 (accuracy, a diverge run's mean KLD) over the
 *                       last runs alike
 * Every string from the database is HTML-escaped; numbers are "%.3g" with
 * NaN/inf written as text; a value a log chart cannot place is skipped and
 * the section says how many were.
 */
#ifndef PG_REPORT_HTML_H
#define PG_REPORT_HTML_H

#include <stdio.h>

#include "base/status.h"
#include "report_data.h"

/* Writes d's report to out. PG_ERR_IO when out reports a write error
 * (ferror) afterwards; the caller names the file. */
pg_status report_html_write(const report_data *d, FILE *out, pg_err *err);

#endif /* PG_REPORT_HTML_H */
