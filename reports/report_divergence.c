/* report_divergence.c: a diverge run's report section (see report_divergence.h). */
#include "report_divergence.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report_md.h"
#include "svg.h"

/* Percent per unit: same-top, delta p and the tail mass read as percents. */
#define PERCENT 100.0
/* Longest chart label: a bin "first-last", a percentile, a series name. */
#define DIV_LABEL_LEN 96
/* Indices into div_summary.kld_percentile (DIV_PERCENTILES: 50, 90, 95, 99, 99.9, 100). */
enum { PCT_MEDIAN = 0, PCT_90 = 1, PCT_99 = 3, PCT_MAX = DIV_N_PERCENTILES - 1 };

/* How a table is written in one format: the cell delimiters and the escaping. */
typedef struct table_fmt {
    const char *row_open, *row_close;
    const char *head_open, *head_close;   /* a header cell */
    const char *num_open, *text_open, *cell_close;
    void (*put_escaped)(FILE *out, const char *s);
    int markdown;                         /* a separator row follows the header */
} table_fmt;

static const table_fmt HTML_TABLE = {"<tr>", "</tr>\n", "<th>", "</th>", "<td>",
                                     "<td class=\"t\">", "</td>", svg_put_escaped, 0};
static const table_fmt MD_TABLE = {"|", "\n", " ", " |", " ", " ", " |",
                                   report_md_put_escaped, 1};

/* The table's columns, and how Markdown aligns each ('l' text, 'r' numbers). */
static const char *const COLUMNS[] = {
    "mode", "sequences", "positions", "mean KLD", "SE", "95% CI", "median KLD", "p90 KLD",
    "p99 KLD", "max KLD", "same top %", "mean Δp %", "RMS Δp %", "PPL ratio",
    "median tail mass"};
#define N_COLUMNS (sizeof COLUMNS / sizeof COLUMNS[0])
static const char COLUMN_ALIGN[] = "lrrrrrrrrrrrrrr";

/* Writes one numeric cell holding v (svg_fmt_num). */
static void cell_num(FILE *out, const table_fmt *f, double v)
{
    char b[SVG_NUM_LEN];
    fprintf(out, "%s%s%s", f->num_open, svg_fmt_num(b, sizeof b, v), f->cell_close);
}

/* Writes one text cell holding s escaped. */
static void cell_text(FILE *out, const table_fmt *f, const char *s)
{
    fputs(f->text_open, out);
    f->put_escaped(out, s);
    fputs(f->cell_close, out);
}

/* Whether row r is the noise floor. */
static int is_floor(const report_divergence *v, size_t r)
{
    return v->has_floor && r + 1 == v->n_rows;
}

/* The name row r is shown under, in the table and the charts' legends: the
 * mode, or "noise floor (MODE again)". */
static void row_name(const report_divergence *v, size_t r, char *buf, size_t len)
{
    if (is_floor(v, r)) snprintf(buf, len, "noise floor (%s again)", v->rows[r].mode);
    else snprintf(buf, len, "%s", v->rows[r].mode);
}

/* The table of every row of v: modes against the reference, then the floor. */
static void put_table(FILE *out, const report_divergence *v, const table_fmt *f)
{
    if (!f->markdown) fputs("<div class=\"scroll\"><table>\n", out);
    fputs(f->row_open, out);
    for (size_t c = 0; c < N_COLUMNS; c++)
        fprintf(out, "%s%s%s", f->head_open, COLUMNS[c], f->head_close);
    fputs(f->row_close, out);
    if (f->markdown) {
        fputc('|', out);
        for (size_t c = 0; c < N_COLUMNS; c++)
            fputs(COLUMN_ALIGN[c] == 'r' ? " ---: |" : " --- |", out);
        fputc('\n', out);
    }
    char lo[SVG_NUM_LEN], hi[SVG_NUM_LEN], ci[2 * SVG_NUM_LEN + 8];
    for (size_t r = 0; r < v->n_rows; r++) {
        const div_summary_stored *m = &v->rows[r];
        const div_summary *s = &m->s;
        fputs(f->row_open, out);
        char name[DIV_LABEL_LEN];
        row_name(v, r, name, sizeof name);
        cell_text(out, f, name);
        fprintf(out, "%s%zu%s%s%zu%s", f->num_open, s->n_sequences, f->cell_close, f->num_open,
                s->n_positions, f->cell_close);
        cell_num(out, f, s->kld_mean);
        cell_num(out, f, s->kld_mean_se);
        snprintf(ci, sizeof ci, "[%s, %s]", svg_fmt_num(lo, sizeof lo, s->kld_ci_low),
                 svg_fmt_num(hi, sizeof hi, s->kld_ci_high));
        fprintf(out, "%s%s%s", f->num_open, ci, f->cell_close);
        cell_num(out, f, s->kld_percentile[PCT_MEDIAN]);
        cell_num(out, f, s->kld_percentile[PCT_90]);
        cell_num(out, f, s->kld_percentile[PCT_99]);
        cell_num(out, f, s->kld_percentile[PCT_MAX]);
        cell_num(out, f, s->same_top * PERCENT);
        cell_num(out, f, s->mean_dp * PERCENT);
        cell_num(out, f, s->rms_dp * PERCENT);
        cell_num(out, f, s->ppl_ratio);
        cell_num(out, f, s->tail_mass_median);
        fputs(f->row_close, out);
    }
    if (!f->markdown) fputs("</table></div>\n", out);
}

/* The sentences under the table: what KLD bounds, and what the floor is. */
static void put_bound_line(FILE *out, const report_divergence *v, const table_fmt *f)
{
    fprintf(out, "KLD is a top-K lower bound (K = %" PRId64 "): KL(P||Q) over the ids both "
            "sides report plus one bucket for the rest, P the reference ", v->rows[0].top_k);
    f->put_escaped(out, v->rows[0].reference);
    fputs(", Q the mode; the median tail mass is how much of P the top K leave out. ", out);
    if (v->has_floor)
        fputs("The noise floor is the reference scored a second time (batching noise): a mode "
              "is told apart from it only above it. ", out);
    else
        fputs("No noise floor was measured (--no-noise-floor). ", out);
    fputs("SE clustered by sequence.", out);
}

/* Why a diverge run has no table. */
static const char NO_SUMMARY[] =
    "No divergence summaries: the run's scoring did not finish, so nothing was compared.";

void report_divergence_md(FILE *out, const report_data *d)
{
    if (!report_is_diverge(d)) return;
    const report_divergence *v = &d->div;
    fputs("\n### Teacher-forced divergence\n\n", out);
    if (v->n_rows == 0) {
        fprintf(out, "%s\n", NO_SUMMARY);
        return;
    }
    put_table(out, v, &MD_TABLE);
    fputc('\n', out);
    put_bound_line(out, v, &MD_TABLE);
    fputc('\n', out);
}

/* ---- charts ------------------------------------------------------------- */

/* The series of v's rows over n_x points of values[r * n_x ..]: a mode's
 * colour, the floor grey and dashed; names into names (DIV_LABEL_LEN each). */
static void fill_series(const report_divergence *v, const double *values, size_t n_x,
                        svg_series *series, char *names)
{
    for (size_t r = 0; r < v->n_rows; r++) {
        const int fl = is_floor(v, r);
        char *name = names + r * DIV_LABEL_LEN;
        row_name(v, r, name, DIV_LABEL_LEN);
        series[r] = (svg_series){name, fl ? REPORT_FLOOR_COLOUR : report_colour(v->rows[r].mode),
                                 values + r * n_x, NULL, fl};
    }
}

/* Writes the note under a chart about the points it could not place. */
static void skipped_note(FILE *out, size_t skipped, int log_axis)
{
    if (skipped == 0) return;
    fprintf(out, "<p class=\"note\">%zu point%s not drawn: %s (the table has the "
            "summaries).</p>\n", skipped, skipped == 1 ? "" : "s",
            log_axis ? "0 (exact agreement) or not finite cannot sit on the log axis"
                     : "not finite");
}

/* Writes each bin's label into labels (DIV_LABEL_LEN each): "first-last",
 * or the one position of a bin of one. */
static void bin_labels(const report_divergence *v, char *labels)
{
    for (size_t b = 0; b < v->n_bins; b++) {
        char *l = labels + b * DIV_LABEL_LEN;
        if (v->bin_first[b] == v->bin_last[b]) snprintf(l, DIV_LABEL_LEN, "%zu", v->bin_first[b]);
        else snprintf(l, DIV_LABEL_LEN, "%zu-%zu", v->bin_first[b], v->bin_last[b]);
    }
}

/* The three charts of v (its curves filled). */
static pg_status put_charts(FILE *out, const report_divergence *v, pg_err *err)
{
    const size_t nb = v->n_bins, np = REPORT_DIV_N_PERCENTILES;
    const size_t n_labels = nb > np ? nb : np;
    char *labels = calloc(n_labels, DIV_LABEL_LEN), *names = calloc(v->n_rows, DIV_LABEL_LEN);
    const char **lp = calloc(n_labels, sizeof *lp);
    svg_series *series = calloc(v->n_rows, sizeof *series);
    if (labels == NULL || names == NULL || lp == NULL || series == NULL) {
        free(labels), free(names), free(lp), free(series);
        return pg_fail(err, PG_ERR_NOMEM, "report: out of memory");
    }
    for (size_t i = 0; i < n_labels; i++) lp[i] = labels + i * DIV_LABEL_LEN;
    bin_labels(v, labels);
    const int binned = nb > 0 && v->bin_last[0] > v->bin_first[0];
    fprintf(out, "<h3>KLD along the sequence</h3>\n<p class=\"note\">Mean KLD per scored "
            "position index within the sequence (0 = a sequence's first scored position), over "
            "every sequence that reaches it%s; log scale. The later points average fewer, "
            "longer sequences.</p>\n", binned ? ", in bins of consecutive positions" : "");
    fill_series(v, v->kld_bin, nb, series, names);
    const svg_line_chart along = {"mean KLD along the sequence per mode (log scale)",
                                  "scored position in the sequence", "mean KLD (log10)", nb, lp,
                                  series, v->n_rows, SVG_SCALE_LOG10, NAN, NAN};
    skipped_note(out, svg_write_line_chart(out, &along), 1);

    fputs("<h3>KLD percentile curve</h3>\n<p class=\"note\">The KLD at percentile p of all "
          "scored positions (linear interpolation, as the table's percentiles), dense in the "
          "upper tail; log scale. A mode whose curve lies on the floor's is within batching "
          "noise there.</p>\n", out);
    for (size_t k = 0; k < np; k++)
        snprintf(labels + k * DIV_LABEL_LEN, DIV_LABEL_LEN, "%g", report_div_percentiles[k]);
    fill_series(v, v->kld_percentile, np, series, names);
    const svg_line_chart pct = {"KLD percentile curve per mode (log scale)", "percentile",
                                "KLD (log10)", np, lp, series, v->n_rows, SVG_SCALE_LOG10, NAN,
                                NAN};
    skipped_note(out, svg_write_line_chart(out, &pct), 1);

    bin_labels(v, labels);  /* again: the percentile curve wrote over them */
    fputs("<h3>Same top-1 along the sequence</h3>\n<p class=\"note\">The fraction of scored "
          "positions whose most likely token is the reference's, per position (bins as above), "
          "beside the noise floor: where a mode starts to pick other tokens than the reference "
          "along the sequence, which a single same-top number hides.</p>\n", out);
    fill_series(v, v->same_top_bin, nb, series, names);
    const svg_line_chart same = {"same top-1 along the sequence per mode",
                                 "scored position in the sequence", "same top-1 fraction", nb,
                                 lp, series, v->n_rows, SVG_SCALE_LINEAR, 0.0, 1.0};
    skipped_note(out, svg_write_line_chart(out, &same), 0);
    free(labels), free(names), free(lp), free(series);
    return PG_OK;
}

pg_status report_divergence_html(FILE *out, const report_data *d, pg_err *err)
{
    if (!report_is_diverge(d)) return PG_OK;
    const report_divergence *v = &d->div;
    fputs("<section id=\"divergence\">\n<h2>Teacher-forced divergence</h2>\n", out);
    if (v->n_rows == 0) {
        fprintf(out, "<p class=\"note\">%s</p>\n</section>\n", NO_SUMMARY);
        return PG_OK;
    }
    put_table(out, v, &HTML_TABLE);
    fputs("<p class=\"note\">", out);
    put_bound_line(out, v, &HTML_TABLE);
    fputs("</p>\n", out);
    pg_status st = PG_OK;
    if (v->n_bins > 0 && v->kld_percentile != NULL) st = put_charts(out, v, err);
    else fputs("<p class=\"note\">No stored positions to plot.</p>\n", out);
    fputs("</section>\n", out);
    return st;
}
