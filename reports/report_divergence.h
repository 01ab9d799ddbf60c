/*
 * report_divergence.h: the divergence section of a diverge run's report
 * (issue #28), in both formats: one table per run (each mode against the
 * reference, and the noise floor) with the line "KLD is a top-K lower
 * bound (K = ...)"; the HTML page adds three inline SVG charts (svg.h):
 * mean KLD along the sequence per mode, the KLD percentile curve, and
 * same-top along the sequence, each with the noise floor as a grey dashed
 * line. Numbers are svg_fmt_num's "%.3g" (a fraction shown as a percent is
 * multiplied by 100 first); database text is escaped by each format's rule.
 */
#ifndef PG_REPORT_DIVERGENCE_H
#define PG_REPORT_DIVERGENCE_H

#include <stdio.h>

#include "base/status.h"
#include "report_data.h"

/* The colour of the noise floor's line in every divergence chart. */
#define REPORT_FLOOR_COLOUR "#777777"

/* Writes d's divergence section as an HTML <section id="divergence">;
 * nothing when d's run is not a diverge run. PG_ERR_NOMEM. */
pg_status report_divergence_html(FILE *out, const report_data *d, pg_err *err);

/* Writes d's divergence section as Markdown (the table, no charts);
 * nothing when d's run is not a diverge run. */
void report_divergence_md(FILE *out, const report_data *d);

#endif /* PG_REPORT_DIVERGENCE_H */
