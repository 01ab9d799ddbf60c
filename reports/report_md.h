/*
 * report_md.h: a run's report as GitHub-flavoured Markdown, for a
 * pull-request comment: the same verdicts and tables as the HTML report
 * (reports/report_html.h), no charts.
 *
 * Order: a heading and the gate's one-line verdict, the run table, then
 * "Regressions" (failing flags first, every check in a <details> block;
 * "not gated" without flags), a diverge run's "Teacher-forced divergence"
 * (reports/report_divergence.h), "Per-layer rel_l2" (one row per layer), "Per-head
 * error" (worst, median and best head of the worst 3 layers of the worst fp8
 * mode), "fp8 saturation and underflow", "End-task accuracy" (scores and
 * paired differences) and "Trend". Database text is escaped for Markdown
 * and HTML (a label cannot break a table or inject markup); numbers are
 * "%.3g" with NaN/inf written as text.
 */
#ifndef PG_REPORT_MD_H
#define PG_REPORT_MD_H

#include <stdio.h>

#include "base/status.h"
#include "report_data.h"

/* Writes s to out escaped for Markdown text and table cells: & < > as HTML
 * entities, \ ` * _ [ ] | ~ # backslash-escaped, line breaks as spaces,
 * other control characters and bytes that are not valid UTF-8 as term.h's
 * escapes (\x1b, \u{9b}, \xff); NULL writes "-". */
void report_md_put_escaped(FILE *out, const char *s);

/* Writes d's report to out. PG_ERR_IO when out reports a write error
 * (ferror) afterwards; PG_ERR_NOMEM; the caller names the file. */
pg_status report_md_write(const report_data *d, FILE *out, pg_err *err);

#endif /* PG_REPORT_MD_H */
