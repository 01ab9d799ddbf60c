/* report_html.c: a run's report as one self-contained HTML page (see report_html.h). */
#include "report_html.h"


#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report_divergence.h"
#include "svg.h"

/* Longest x label of a chart (a layer number, "#run id", a mode and effort). */
#define LABEL_LEN 96
/* Verdicts the gate writes, in the order the summary counts them. */
static const char *const VERDICTS[] = {"regression", "error",   "inconclusive",
                                       "improvement", "no change", "pass", "skipped"};
#define N_VERDICTS (sizeof VERDICTS / sizeof VERDICTS[0])

/* The page's whole style sheet. */
static const char CSS[] =
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#222;"
    "max-width:1020px;margin:24px auto;padding:0 16px;background:#fff}"
    "h1{font-size:22px;margin:0 0 8px}"
    "h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:34px}"
    "table{border-collapse:collapse;margin:8px 0}"
    "th,td{border:1px solid #ddd;padding:3px 8px;text-align:right;vertical-align:top}"
    "th{background:#f5f5f5}.t{text-align:left}"
    "table.kv th{text-align:left;width:8em}table.kv td{text-align:left}"
    "nav a{margin-right:12px}"
    ".banner{padding:8px 12px;border-radius:4px;margin:8px 0;font-weight:bold}"
    ".bad{background:#fde0e0;color:#8a0000}.ok{background:#e3f4e3;color:#1d5b1d}"
    ".neutral{background:#f0f0f0;color:#444}"
    ".note{color:#666;font-size:13px}.nonfinite{color:#a40000;font-weight:bold}"
    ".verdict{font-weight:bold;padding:1px 6px;border-radius:3px;white-space:nowrap}"
    ".v-regression,.v-error{background:#fde0e0;color:#a40000}"
    ".v-pass,.v-nochange{background:#e3f4e3;color:#1d6b1d}"
    ".v-improvement{background:#e0ecfb;color:#0b4f9c}"
    ".v-inconclusive{background:#fff3d6;color:#7a5600}.v-skipped{background:#e8ecf4;color:#3a4a6a}"
    ".v-other{background:#eee}"
    ".st-complete{color:#1d6b1d}.st-failed,.st-incomplete{color:#a40000}"
    "svg.chart{display:block;max-width:100%;height:auto;margin:8px 0}"
    ".scroll{overflow-x:auto}"
    "details{margin:8px 0}summary{cursor:pointer}";

/* ---- small writers ------------------------------------------------------- */

/* Writes s escaped, or dflt (ours, not escaped) when s is NULL. */
static void esc(FILE *out, const char *s, const char *dflt)
{
    if (s == NULL) fputs(dflt, out);
    else svg_put_escaped(out, s);
}

/* Writes a <th> per name of names[0 .. n), escaped ("-" for NULL). */
static void th_names(FILE *out, char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        fputs("<th>", out);
        esc(out, names[i], "-");
        fputs("</th>", out);
    }
}

/* Writes a <td> holding v as "%.3g" (marked when not finite). */
static void td_num(FILE *out, double v)
{
    char b[SVG_NUM_LEN];
    fprintf(out, "<td%s>%s</td>", isfinite(v) || isnan(v) ? "" : " class=\"nonfinite\"",
            svg_fmt_num(b, sizeof b, v));
}

/* Writes a <td> holding an escaped string (left-aligned). */
static void td_text(FILE *out, const char *s)
{
    fputs("<td class=\"t\">", out);
    esc(out, s, "-");
    fputs("</td>", out);
}

/* Writes a rel_l2 <td> of a whole-layer cell: the value, marked and with the
 * mode's NaN/Inf output counts when the output was not finite; "-" when absent. */
static void td_cell(FILE *out, const report_cell *c)
{
    char b[SVG_NUM_LEN];
    if (!c->present) {
        fputs("<td>-</td>", out);
        return;
    }
    char outputs[REPORT_CELL_OUTPUTS_MAX];
    fprintf(out, "<td%s>%s", report_cell_nonfinite(c) ? " class=\"nonfinite\"" : "",
            svg_fmt_num(b, sizeof b, c->rel_l2));
    if (report_cell_outputs(c, outputs, sizeof outputs)) fprintf(out, " <small>%s</small>", outputs);
    fputs("</td>", out);
}

/* The CSS class of a verdict (a fixed name of ours, never database text). */
static const char *verdict_class(const char *v)
{
    if (v == NULL) return "v-other";
    if (strcmp(v, "regression") == 0) return "v-regression";
    if (strcmp(v, "error") == 0) return "v-error";
    if (strcmp(v, "pass") == 0) return "v-pass";
    if (strcmp(v, "no change") == 0) return "v-nochange";
    if (strcmp(v, "improvement") == 0) return "v-improvement";
    if (strcmp(v, "inconclusive") == 0) return "v-inconclusive";
    if (strcmp(v, "skipped") == 0) return "v-skipped";
    return "v-other";
}

/* The CSS class of a run status. */
static const char *status_class(const char *s)
{
    if (s == NULL) return "";
    if (strcmp(s, "complete") == 0) return "st-complete";
    if (strcmp(s, "failed") == 0) return "st-failed";
    if (strcmp(s, "incomplete") == 0) return "st-incomplete";
    return "";
}

/* Whether the run's layers span more than one capture (labels then name it). */
static int several_captures(const report_data *d)
{
    for (size_t l = 1; l < d->n_layers; l++)
        if (strcmp(d->layers[l].capture, d->layers[0].capture) != 0) return 1;
    return 0;
}

/* The chart label of layer l: its index, prefixed by the capture when several. */
static void layer_label(const report_data *d, size_t l, int with_capture, char *buf, size_t len)
{
    if (with_capture) snprintf(buf, len, "%s:%d", d->layers[l].capture, d->layers[l].layer);
    else snprintf(buf, len, "%d", d->layers[l].layer);
}

/* Writes the note under a chart about the values it could not place (none: nothing);
 * one and many name them ("point", "points"). */
static void skipped_note(FILE *out, size_t skipped, const char *one, const char *many, int log_axis)
{
    if (skipped == 0) return;
    fprintf(out,
            "<p class=\"note nonfinite\">%zu %s not drawn: not finite (NaN/inf)%s; the table "
            "below has %s.</p>\n",
            skipped, skipped == 1 ? one : many, log_axis ? " or not positive on the log axis" : "",
            skipped == 1 ? "it" : "them");
}

/* Array of n label buffers of LABEL_LEN and the pointer table over them; NULL on no memory. */
static char **labels_new(size_t n, char **storage)
{
    *storage = calloc(n > 0 ? n : 1, LABEL_LEN);
    char **p = calloc(n > 0 ? n : 1, sizeof(char *));
    if (*storage == NULL || p == NULL) {
        free(*storage);
        free(p);
        *storage = NULL;
        return NULL;
    }
    for (size_t i = 0; i < n; i++) p[i] = *storage + i * LABEL_LEN;
    return p;
}

/* ---- sections -------------------------------------------------------------- */

/* The run's header table. */
static void put_header(FILE *out, const report_data *d)
{
    const run_row *r = &d->run;
    fprintf(out, "<header id=\"run\">\n<h1>precgate report: run %lld</h1>\n<table class=\"kv\">\n",
            (long long)r->id);
    const struct { const char *k, *v; } rows[] = {
        {"kind", r->kind}, {"label", r->label}, {"started", r->started_at},
        {"finished", r->finished_at}, {"git rev", r->git_rev}, {"host", r->host},
        {"device", r->device},
    };
    fprintf(out, "<tr><th>run</th><td>%lld</td></tr>\n", (long long)r->id);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        fprintf(out, "<tr><th>%s</th><td>", rows[i].k);
        esc(out, rows[i].v, "-");
        fputs("</td></tr>\n", out);
        if (i == 1) {
            fprintf(out, "<tr><th>status</th><td class=\"%s\">", status_class(r->status));
            esc(out, r->status, "-");
            fputs("</td></tr>\n", out);
        }
    }
    if (r->error != NULL) {
        fputs("<tr><th>error</th><td class=\"nonfinite\">", out);
        esc(out, r->error, "");
        fputs("</td></tr>\n", out);
    }
    fputs("</table>\n<nav><a href=\"#regressions\">regressions</a>", out);
    if (report_is_diverge(d)) fputs("<a href=\"#divergence\">divergence</a>", out);
    fputs("<a href=\"#layers\">layers</a>"
          "<a href=\"#heads\">heads</a><a href=\"#quant\">fp8 saturation</a>"
          "<a href=\"#evals\">accuracy</a><a href=\"#trend\">trend</a></nav>\n</header>\n",
          out);
}


/* A table of the run's flags: only the failing ones (regression, error) when
 * failing_only, else all of them. */
static void put_flag_table(FILE *out, const report_data *d, int failing_only)
{
    fputs("<table>\n<tr><th class=\"t\">verdict</th><th class=\"t\">scope</th>"
          "<th class=\"t\">where</th><th class=\"t\">metric</th><th>value</th><th>baseline</th>"
          "<th>threshold</th><th>baseline run</th><th class=\"t\">message</th></tr>\n",
          out);
    for (size_t i = 0; i < d->n_flags; i++) {
        const flag_row *f = &d->flags[i];
        if (failing_only && !report_flag_fails(f)) continue;
        fprintf(out, "<tr><td class=\"t\"><span class=\"verdict %s\">", verdict_class(f->verdict));
        esc(out, f->verdict, "-");
        fputs("</span></td>", out);
        td_text(out, f->scope);
        fputs("<td class=\"t\">", out);
        report_flag_where(out, f, svg_put_escaped);
        fputs("</td>", out);
        td_text(out, f->metric);
        td_num(out, f->value);
        td_num(out, f->baseline_value);
        td_num(out, f->threshold);
        if (f->baseline_run_id >= 0) fprintf(out, "<td>%lld</td>", (long long)f->baseline_run_id);
        else fputs("<td>-</td>", out);
        td_text(out, f->message);
        fputs("</tr>\n", out);
    }
    fputs("</table>\n", out);
}

/* The scale bugs the diagnosis names, first in the report (nothing without one). */
static void put_diagnosis_lead(FILE *out, const report_data *d)
{
    const report_diagnosis *g = &d->diag;
    if (g->n_bugs == 0) return;
    fprintf(out, "<section id=\"scale-bug\">\n<p class=\"banner bad\">scale bug: %zu span%s "
            "of layers match%s a known scale misapplication</p>\n<ul>\n", g->n_bugs,
            g->n_bugs == 1 ? "" : "s", g->n_bugs == 1 ? "es" : "");
    for (size_t i = 0; i < g->n_rows; i++) {
        if (!g->rows[i].is_bug) continue;
        fputs("<li>", out);
        esc(out, g->rows[i].capture, "-");
        fputs(": ", out);
        esc(out, g->rows[i].message, "-");
        fputs("</li>\n", out);
    }
    fputs("</ul>\n<p class=\"note\">The distances of every hypothesis are in the "
          "<a href=\"#diagnosis\">diagnosis</a> table.</p>\n</section>\n", out);
}

/* The diagnosis table: per span of layers of an external output, its verdict,
 * every hypothesis's largest distance and the verdict's line. */
static void put_diagnosis(FILE *out, const report_data *d)
{
    const report_diagnosis *g = &d->diag;
    if (g->n_rows == 0) return;
    fprintf(out, "<section id=\"diagnosis\">\n<h2>Scale-plumbing diagnosis</h2>\n<p "
            "class=\"note\">rel_l2 of each external output against each hypothesis (largest "
            "over the layers); a hypothesis matches at rel_l2 &lt;= %g and is named when %gx "
            "nearer than every one of the other side (intended against bugs).</p>\n<table>\n"
            "<tr><th class=\"t\">capture</th><th class=\"t\">output</th><th class=\"t\">"
            "layers</th><th class=\"t\">verdict</th>", g->match_rel_l2, g->margin);
    th_names(out, g->hypotheses, g->n_hyp);
    fputs("<th class=\"t\">what it says</th></tr>\n", out);
    for (size_t i = 0; i < g->n_rows; i++) {
        const report_diag_row *r = &g->rows[i];
        fputs("<tr>", out);
        td_text(out, r->capture);
        fputs("<td class=\"t\">ext:", out);
        esc(out, r->ext_name, "-");
        fputs("</td>", out);
        td_text(out, r->layers);
        fprintf(out, "<td class=\"t\"><span class=\"verdict %s\">%s</span></td>",
                r->is_bug ? "regression" : r->is_intended ? "pass" : "inconclusive", r->verdict);
        for (size_t h = 0; h < g->n_hyp; h++) td_num(out, g->dist[i * g->n_hyp + h]);
        td_text(out, r->message);
        fputs("</tr>\n", out);
    }
    fputs("</table>\n</section>\n", out);
}

/* The gate's verdicts: failing flags first, "not gated" without flags. */
static void put_regressions(FILE *out, const report_data *d)
{
    fputs("<section id=\"regressions\">\n<h2>Regressions</h2>\n", out);
    if (!d->gated) {
        fprintf(out, "<p class=\"banner neutral\">not gated</p>\n<p class=\"note\">%s</p>\n",
                d->flags_table ? "No gate verdicts were recorded for this run."
                               : "This database has no flags table: no gate has compared "
                                 "this run with a baseline.");
        fputs("</section>\n", out);
        return;
    }
    size_t failing = 0, counts[N_VERDICTS] = {0}, other = 0;
    for (size_t i = 0; i < d->n_flags; i++) {
        const flag_row *f = &d->flags[i];
        failing += (size_t)report_flag_fails(f);
        size_t k = 0;
        while (k < N_VERDICTS && (f->verdict == NULL || strcmp(f->verdict, VERDICTS[k]) != 0)) k++;
        if (k < N_VERDICTS) counts[k]++;
        else other++;
    }
    const int64_t base = d->flags[0].baseline_run_id;
    if (failing > 0)
        fprintf(out, "<p class=\"banner bad\">%zu of %zu checks failed", failing, d->n_flags);
    else fprintf(out, "<p class=\"banner ok\">no regressions: %zu checks", d->n_flags);
    if (base >= 0) fprintf(out, " against baseline run %lld", (long long)base);
    fputs("</p>\n<p class=\"note\">", out);
    for (size_t k = 0; k < N_VERDICTS; k++)
        fprintf(out, "%s%zu %s", k > 0 ? ", " : "", counts[k], VERDICTS[k]);
    if (other > 0) fprintf(out, ", %zu other", other);
    fputs("</p>\n", out);
    if (failing > 0) put_flag_table(out, d, 1);
    fprintf(out, "<details><summary>all %zu checks</summary>\n", d->n_flags);
    put_flag_table(out, d, 0);
    fputs("</details>\n</section>\n", out);
}

/* rel_l2 per layer and variant: log chart and table. */
static pg_status put_layers(FILE *out, const report_data *d, pg_err *err)
{
    fputs("<section id=\"layers\">\n<h2>Per-layer error by mode</h2>\n", out);
    if (d->n_layers == 0 || d->n_variants == 0) {
        fputs("<p class=\"note\">No layer metrics in this run.</p>\n</section>\n", out);
        return PG_OK;
    }
    const int caps = several_captures(d);
    char *storage = NULL;
    char **labels = labels_new(d->n_layers, &storage);
    svg_series *series = calloc(d->n_variants, sizeof *series);
    double *ys = calloc(d->n_layers * d->n_variants, sizeof(double));
    unsigned char *pres = calloc(d->n_layers * d->n_variants, 1);
    pg_status s = PG_OK;
    if (labels == NULL || series == NULL || ys == NULL || pres == NULL) {
        s = pg_fail(err, PG_ERR_NOMEM, "report: out of memory");
        goto done;
    }
    for (size_t l = 0; l < d->n_layers; l++) layer_label(d, l, caps, labels[l], LABEL_LEN);
    for (size_t v = 0; v < d->n_variants; v++) {
        for (size_t l = 0; l < d->n_layers; l++) {
            const report_cell *c = &d->cells[l * d->n_variants + v];
            pres[v * d->n_layers + l] = (unsigned char)c->present;
            ys[v * d->n_layers + l] = c->nan_count + c->inf_count > 0 ? INFINITY : c->rel_l2;
        }
        series[v] = (svg_series){d->variants[v], report_colour(d->variants[v]),
                                 ys + v * d->n_layers, pres + v * d->n_layers, 0};
    }
    fputs("<p class=\"note\">Relative L2 error of each layer's attention output against the "
          "fp64 reference (whole layer), log scale.</p>\n",
          out);
    const svg_line_chart chart = {"rel_l2 per layer and mode (log scale)",
                                  caps ? "capture:layer" : "layer", "rel_l2 (log10)",
                                  d->n_layers, (const char *const *)labels, series, d->n_variants,
                                  SVG_SCALE_LOG10, NAN, NAN};
    skipped_note(out, svg_write_line_chart(out, &chart), "point", "points", 1);

    fputs("<table>\n<tr>", out);
    if (caps) fputs("<th class=\"t\">capture</th>", out);
    fputs("<th>layer</th>", out);
    th_names(out, d->variants, d->n_variants);
    fputs("</tr>\n", out);
    for (size_t l = 0; l < d->n_layers; l++) {
        fputs("<tr>", out);
        if (caps) td_text(out, d->layers[l].capture);
        fprintf(out, "<td>%d</td>", d->layers[l].layer);
        for (size_t v = 0; v < d->n_variants; v++) td_cell(out, &d->cells[l * d->n_variants + v]);
        fputs("</tr>\n", out);
    }
    fprintf(out, "<tr><th%s>layer mean</th>", caps ? " colspan=\"2\"" : "");
    for (size_t v = 0; v < d->n_variants; v++) td_num(out, report_variant_mean(d, v));
    fprintf(out, "</tr>\n<tr><th%s>worst layer</th>", caps ? " colspan=\"2\"" : "");
    for (size_t v = 0; v < d->n_variants; v++) {
        size_t worst;
        if (report_worst_layers(d, v, &worst, 1) == 1) fprintf(out, "<td>%d</td>", d->layers[worst].layer);
        else fputs("<td>-</td>", out);
    }
    fputs("</tr>\n</table>\n</section>\n", out);
done:
    free(storage);
    free(labels);
    free(series);
    free(ys);
    free(pres);
    return s;
}

/* Per-head heatmap of the worst layers of the worst fp8 mode. */
static pg_status put_heads(FILE *out, const report_data *d, pg_err *err)
{
    fputs("<section id=\"heads\">\n<h2>Per-head error of the worst layers</h2>\n", out);
    const int wv = report_worst_fp8_variant(d);
    if (wv < 0 || d->n_heads == 0) {
        fprintf(out, "<p class=\"note\">%s</p>\n</section>\n",
                wv < 0 ? "No fp8 mode (fp8kv, fp8qkv) in this run."
                       : "No per-head metrics in this run.");
        return PG_OK;
    }
    size_t rows[REPORT_HEATMAP_LAYERS];
    const size_t nr = report_worst_layers(d, (size_t)wv, rows, REPORT_HEATMAP_LAYERS);
    const size_t nh = (size_t)d->n_heads;
    char *storage = NULL;
    char **labels = labels_new(nr, &storage);
    double *vals = calloc(nr * nh + 1, sizeof(double));
    unsigned char *pres = calloc(nr * nh + 1, 1);
    pg_status s = PG_OK;
    if (labels == NULL || vals == NULL || pres == NULL) {
        s = pg_fail(err, PG_ERR_NOMEM, "report: out of memory");
        goto done;
    }
    char b[SVG_NUM_LEN];
    fputs("<p class=\"note\">rel_l2 of each query head in the ", out);
    fprintf(out, "%zu worst layers of the worst fp8 mode, <b>", nr);
    svg_put_escaped(out, d->variants[wv]);
    fprintf(out, "</b> (layer-mean rel_l2 %s); log colour scale.</p>\n",
            svg_fmt_num(b, sizeof b, report_variant_mean(d, (size_t)wv)));
    const int caps = several_captures(d);
    for (size_t r = 0; r < nr; r++) {
        const size_t l = rows[r];
        if (caps) snprintf(labels[r], LABEL_LEN, "%s layer %d", d->layers[l].capture, d->layers[l].layer);
        else snprintf(labels[r], LABEL_LEN, "layer %d", d->layers[l].layer);
        const size_t base = (l * d->n_variants + (size_t)wv) * nh;
        memcpy(vals + r * nh, d->head_rel_l2 + base, nh * sizeof(double));
        memcpy(pres + r * nh, d->head_present + base, nh);
    }
    const svg_heatmap h = {"per-head rel_l2 of the worst layers", "head", "rel_l2", nr, nh,
                           (const char *const *)labels, vals, pres};
    const size_t off = svg_write_heatmap(out, &h);
    if (off > 0)
        fprintf(out,
                "<p class=\"note nonfinite\">%zu %s off the log colour scale (0, NaN or inf): "
                "shown in the swatch colours of the legend.</p>\n",
                off, off == 1 ? "head is" : "heads are");
    fputs("</section>\n", out);
done:
    free(storage);
    free(labels);
    free(vals);
    free(pres);
    return s;
}

/* Each swept mode's K and V cache over the run's layers (kv_format_stats),
 * as report_md.c's table. */
static void put_kv_formats(FILE *out, const report_data *d)
{
    if (d->n_kv_formats == 0) return;
    fputs("<section id=\"kv-formats\">\n<h2>KV cache formats</h2>\n<p class=\"note\">Each "
          "swept mode's cache write on every layer's K and V (means over the layers, the worst "
          "layer in brackets).</p>\n<table>\n<tr><th>mode</th><th>tensor</th><th>format</th>"
          "<th>saturated</th><th>underflow</th><th>codes used</th><th>entropy (bits)</th>"
          "<th>scales</th><th>at floor</th><th>scale min / mean / max</th></tr>\n", out);
    char a[SVG_NUM_LEN], b[SVG_NUM_LEN], c[SVG_NUM_LEN], f[SVG_NUM_LEN];
    for (size_t i = 0; i < d->n_kv_formats; i++) {
        const kv_format_summary *r = &d->kv_formats[i];
        fputs("<tr><td>", out);
        svg_put_escaped(out, r->mode ? r->mode : "");
        fputs("</td><td>", out);
        svg_put_escaped(out, r->tensor ? r->tensor : "");
        fputs("</td><td>", out);
        svg_put_escaped(out, r->format ? r->format : "");
        fprintf(out, "</td><td>%s (%s)</td>", svg_fmt_num(a, sizeof a, r->saturated_mean),
                svg_fmt_num(b, sizeof b, r->saturated_max));
        fprintf(out, "<td>%s (%s)</td>", svg_fmt_num(a, sizeof a, r->underflow_mean),
                svg_fmt_num(b, sizeof b, r->underflow_max));
        fprintf(out, "<td>%d of %d</td><td>%.2f of %d</td>", r->codes_used, 1 << r->code_bits,
                r->entropy_bits, r->code_bits);
        if (r->n_scales == 0)
            fprintf(out, "<td>%s</td><td>-</td><td>-</td></tr>\n", report_kv_scales_word(r->mode));
        else
            fprintf(out, "<td>%lld</td><td>%s</td><td>%s / %s / %s</td></tr>\n",
                    (long long)r->n_scales, svg_fmt_num(f, sizeof f, r->scale_floor_frac),
                    svg_fmt_num(a, sizeof a, r->scale_min), svg_fmt_num(b, sizeof b, r->scale_mean),
                    svg_fmt_num(c, sizeof c, r->scale_max));
    }
    fputs("</table>\n</section>\n", out);
}

/* Each swept mode's KV cache size per token, as report_md.c's table. */
static void put_kv_memory(FILE *out, const report_data *d)
{
    if (d->n_kv_memory == 0) return;
    fputs("<section id=\"kv-memory\">\n<h2>KV cache memory</h2>\n<p class=\"note\">", out);
    svg_put_escaped(out, report_kv_memory_caption);
    fputs("</p>\n<table>\n<tr><th>mode</th><th>bytes per token</th><th>saved vs bf16</th>"
          "<th>saved vs fp8</th></tr>\n", out);
    for (size_t i = 0; i < d->n_kv_memory; i++) {
        const report_kv_memory *r = &d->kv_memory[i];
        fputs("<tr><td>", out);
        svg_put_escaped(out, r->mode);
        fprintf(out, "</td><td>%lld</td><td>%.1f%%</td><td>%.1f%%</td></tr>\n", r->bytes,
                100.0 * report_kv_saved_fraction(r->bytes, r->bytes_bf16),
                100.0 * report_kv_saved_fraction(r->bytes, r->bytes_fp8));
    }
    fputs("</table>\n</section>\n", out);
}

/* The cells a kernel cannot compute (report_data.h d->unsupported). */
static void put_unsupported(FILE *out, const report_data *d)
{
    if (d->n_unsupported == 0) return;
    fputs("<section id=\"not-computed\">\n<h2>Not computed</h2>\n<p class=\"note\">", out);
    svg_put_escaped(out, report_unsupported_caption);
    fputs("</p>\n<table>\n<tr><th>capture</th><th>variant</th><th>layers</th><th>why</th>"
          "</tr>\n", out);
    for (size_t i = 0; i < d->n_unsupported; i++) {
        const unsupported_summary *u = &d->unsupported[i];
        fputs("<tr><td>", out);
        svg_put_escaped(out, u->capture);
        fputs("</td><td>", out);
        svg_put_escaped(out, u->variant);
        fprintf(out, "</td><td>%d: ", u->n_layers);
        svg_put_escaped(out, u->layers);
        fputs("</td><td>", out);
        svg_put_escaped(out, u->reason);
        fputs("</td></tr>\n", out);
    }
    fputs("</table>\n</section>\n", out);
}

/* fp8 saturation and underflow per layer and tensor. */
static void put_quant(FILE *out, const report_data *d)
{
    fputs("<section id=\"quant\">\n<h2>fp8 saturation and underflow</h2>\n", out);
    if (!d->has_quant) {
        fputs("<p class=\"note\">No quantization statistics in this run.</p>\n</section>\n", out);
        return;
    }
    static const char *const tn[REPORT_N_TENSORS] = {"q", "k", "v"};
    double worst_sat = -1, worst_under = -1;
    size_t ws = 0, wu = 0;
    for (size_t i = 0; i < d->n_layers * REPORT_N_TENSORS; i++) {
        const report_quant *q = &d->quant[i];
        if (!q->present) continue;
        if (isfinite(q->saturated_frac) && q->saturated_frac > worst_sat) {
            worst_sat = q->saturated_frac;
            ws = i;
        }
        if (isfinite(q->underflow_frac) && q->underflow_frac > worst_under) {
            worst_under = q->underflow_frac;
            wu = i;
        }
    }
    char b[SVG_NUM_LEN];
    fputs("<p class=\"note\">Fraction of each tensor's elements that saturate at the e4m3 "
          "maximum (448 after scaling) or underflow to zero. ",
          out);
    if (worst_sat >= 0)
        fprintf(out, "Largest saturation %s (layer %d, %s); ", svg_fmt_num(b, sizeof b, worst_sat),
                d->layers[ws / REPORT_N_TENSORS].layer, tn[ws % REPORT_N_TENSORS]);
    if (worst_under >= 0)
        fprintf(out, "largest underflow %s (layer %d, %s).", svg_fmt_num(b, sizeof b, worst_under),
                d->layers[wu / REPORT_N_TENSORS].layer, tn[wu % REPORT_N_TENSORS]);
    fputs("</p>\n<table>\n<tr><th rowspan=\"2\">layer</th>", out);
    for (int t = 0; t < REPORT_N_TENSORS; t++)
        fprintf(out, "<th colspan=\"3\">%s</th>", tn[t]);
    fputs("<th rowspan=\"2\" class=\"t\">scale source</th></tr>\n<tr>", out);
    for (int t = 0; t < REPORT_N_TENSORS; t++) fputs("<th>scale</th><th>saturated</th><th>underflow</th>", out);
    fputs("</tr>\n", out);
    for (size_t l = 0; l < d->n_layers; l++) {
        if (!report_quant_present(d, l)) continue;
        const report_quant *q = &d->quant[l * REPORT_N_TENSORS];
        fprintf(out, "<tr><td>%d</td>", d->layers[l].layer);
        for (int t = 0; t < REPORT_N_TENSORS; t++) {
            if (!q[t].present) {
                fputs("<td>-</td><td>-</td><td>-</td>", out);
                continue;
            }
            td_num(out, q[t].scale);
            td_num(out, q[t].saturated_frac);
            td_num(out, q[t].underflow_frac);
        }
        fputs("<td class=\"t\">", out);
        report_quant_source(out, d, l, svg_put_escaped);
        fputs("</td></tr>\n", out);
    }
    fputs("</table>\n</section>\n", out);
}

/* The colour of each single-tensor part in the attribution chart (q, k, v, p). */
static const char *const ATTRIBUTION_COLOURS[ATTRIBUTION_N_TENSORS] = {
    "#bbbbbb", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#222222"};

/* The attribution of each fp8 variant: one chart per variant (a stacked bar
 * of the single-tensor errors per layer, the joint beside it, the
 * root-sum-square as a tick) and the table of every row. */
static pg_status put_attribution(FILE *out, const report_data *d, pg_err *err)
{
    if (d->n_attribution == 0) return PG_OK;  /* a run without --attribute */
    fputs("<section id=\"attribution\">\n<h2>Attribution per quantized tensor</h2>\n"
          "<p class=\"note\">", out);
    svg_put_escaped(out, report_attribution_caption);
    fputs("</p>\n", out);
    const size_t n = d->n_attribution;
    char *storage = NULL;
    char **labels = labels_new(n, &storage);
    double *parts = calloc(n * (ATTRIBUTION_N_TENSORS - 2), sizeof *parts);
    double *joint = calloc(n, sizeof *joint), *rss = calloc(n, sizeof *rss);
    unsigned char *done = calloc(n, 1);
    if (labels == NULL || parts == NULL || joint == NULL || rss == NULL || done == NULL) {
        free(storage), free(labels), free(parts), free(joint), free(rss), free(done);
        return pg_fail(err, PG_ERR_NOMEM, "report: out of memory");
    }
    /* One chart per variant, in the order the variants first appear, of
     * the tensors its mode quantizes (rows present in any of its layers). */
    for (size_t first = 0; first < n; first++) {
        if (done[first]) continue;
        const char *variant = d->attribution[first].variant;
        int tensor[ATTRIBUTION_N_TENSORS - 2];
        const char *names[ATTRIBUTION_N_TENSORS - 2], *colours[ATTRIBUTION_N_TENSORS - 2];
        size_t n_parts = 0;
        for (int t = ATTRIBUTION_NONE + 1; t < ATTRIBUTION_ALL; t++) {
            int used = 0;
            for (size_t i = first; i < n && !used; i++)
                used = strcmp(d->attribution[i].variant, variant) == 0 &&
                       !isnan(d->attribution[i].rel_l2[t]);
            if (!used) continue;
            tensor[n_parts] = t;
            names[n_parts] = attribution_tensors[t];
            colours[n_parts++] = ATTRIBUTION_COLOURS[t];
        }
        if (n_parts == 0) continue;  /* only none / all rows: nothing to stack */
        size_t m = 0;
        for (size_t i = first; i < n; i++) {
            const report_attribution *a = &d->attribution[i];
            if (done[i] || strcmp(a->variant, variant) != 0) continue;
            done[i] = 1;
            if (several_captures(d)) snprintf(labels[m], LABEL_LEN, "%s:%d", a->capture, a->layer);
            else snprintf(labels[m], LABEL_LEN, "%d", a->layer);
            for (size_t j = 0; j < n_parts; j++) parts[m * n_parts + j] = a->rel_l2[tensor[j]];
            joint[m] = a->rel_l2[ATTRIBUTION_ALL];
            rss[m] = a->rss;
            m++;
        }
        char title[LABEL_LEN + 64];
        snprintf(title, sizeof title, "%s: single-tensor rel_l2 stacked, joint beside", variant);
        fputs("<h3>", out);
        svg_put_escaped(out, variant);
        fputs("</h3>\n", out);
        const svg_stacked_bars chart = {title, "layer", "rel_l2", m, (const char *const *)labels,
                                        n_parts, names, colours, parts,
                                        "joint (the variant)", ATTRIBUTION_COLOURS[ATTRIBUTION_ALL],
                                        joint, "root-sum-square", rss};
        skipped_note(out, svg_write_stacked_bars(out, &chart), "bar", "bars", 0);
    }
    fputs("<table>\n<tr><th class=\"t\">variant</th>", out);
    if (several_captures(d)) fputs("<th class=\"t\">capture</th>", out);
    fputs("<th>layer</th>", out);
    for (int t = 0; t < ATTRIBUTION_ALL; t++) fprintf(out, "<th>%s</th>", attribution_tensors[t]);
    fputs("<th>sum</th><th>rss</th><th>joint</th><th class=\"t\">largest</th></tr>\n", out);
    for (size_t i = 0; i < n; i++) {
        const report_attribution *a = &d->attribution[i];
        fputs("<tr>", out);
        td_text(out, a->variant);
        if (several_captures(d)) td_text(out, a->capture);
        fprintf(out, "<td>%d</td>", a->layer);
        for (int t = 0; t < ATTRIBUTION_ALL; t++) {
            if (isnan(a->rel_l2[t])) fputs("<td>-</td>", out);
            else td_num(out, a->rel_l2[t]);
        }
        td_num(out, a->sum);
        td_num(out, a->rss);
        td_num(out, a->rel_l2[ATTRIBUTION_ALL]);
        td_text(out, a->dominant >= 0 ? attribution_tensors[a->dominant] : NULL);
        fputs("</tr>\n", out);
    }
    fputs("</table>\n</section>\n", out);
    free(storage), free(labels), free(parts), free(joint), free(rss), free(done);
    return PG_OK;
}

/* The KV cache policy advice (report_data.advice, filled by cmd_report). */
static void put_advice(FILE *out, const report_data *d)
{
    if (!d->advice_shown) return;
    fputs("<section id=\"advice\">\n<h2>KV cache policy advice</h2>\n", out);
    if (d->advice_note != NULL) {
        fputs("<p class=\"note\">", out);
        svg_put_escaped(out, d->advice_note);
        fputs("</p>\n</section>\n", out);
        return;
    }
    fputs("<p class=\"note\">Which layers keep a bf16 KV cache so that every layer left in "
          "fp8 is within the layer bound of ", out);
    esc(out, d->advice_config, "-");
    fputs(" in every capture (precgate advise). ", out);
    svg_put_escaped(out, report_advice_counts);
    fputs("</p>\n<table>\n"
          "<tr><th class=\"t\">variant</th><th class=\"t\">metric</th><th>budget</th>"
          "<th class=\"t\">keep bf16</th><th class=\"t\">vLLM</th><th>KV saved</th>"
          "<th>worst fp8 layer</th><th>its value</th></tr>\n", out);
    for (size_t i = 0; i < d->n_advice; i++) {
        const report_advice *a = &d->advice[i];
        fputs("<tr>", out);
        td_text(out, a->variant);
        td_text(out, a->metric);
        if (isnan(a->budget)) td_text(out, "-");
        else td_num(out, a->budget);
        if (a->note != NULL) {
            fputs("<td class=\"t\" colspan=\"5\">", out);
            svg_put_escaped(out, a->note);
            fputs("</td></tr>\n", out);
            continue;
        }
        td_text(out, a->keep[0] != '\0' ? a->keep : "none");
        td_text(out, a->flag != NULL ? a->flag : "no flag needed");
        td_num(out, a->saved_fraction);
        if (a->worst_layer >= 0) fprintf(out, "<td>%d</td>", a->worst_layer);
        else fputs("<td>none</td>", out);
        td_num(out, a->worst_value);
        fputs("</tr>\n", out);
    }
    fputs("</table>\n</section>\n", out);
}

/* Whether two optional strings differ (NULL equals only NULL). */
static int str_differs(const char *a, const char *b)
{
    if (a == NULL || b == NULL) return a != b;
    return strcmp(a, b) != 0;
}

/* Whether the run's scores span more than one eval (labels then name it). */
static int several_evals(const report_data *d)
{
    for (size_t i = 1; i < d->n_scores; i++)
        if (str_differs(d->scores[i].eval, d->scores[0].eval)) return 1;
    return 0;
}

/* End-task accuracy: error-bar chart, scores table, paired differences. */
static pg_status put_evals(FILE *out, const report_data *d, pg_err *err)
{
    fputs("<section id=\"evals\">\n<h2>End-task accuracy</h2>\n", out);
    if (d->n_scores == 0) {
        fputs("<p class=\"note\">No end-task evals in this run (<code>precgate eval</code> "
              "stores them in runs of kind eval).</p>\n</section>\n",
              out);
        return PG_OK;
    }
    const int evals = several_evals(d);
    char *storage = NULL;
    char **labels = labels_new(d->n_scores, &storage);
    svg_interval *items = calloc(d->n_scores, sizeof *items);
    if (labels == NULL || items == NULL) {
        free(storage);
        free(labels);
        free(items);
        return pg_fail(err, PG_ERR_NOMEM, "report: out of memory");
    }
    size_t no_ci = 0;
    for (size_t i = 0; i < d->n_scores; i++) {
        const eval_score_stored *r = &d->scores[i];
        if (evals)
            snprintf(labels[i], LABEL_LEN, "%s %s %s", r->eval != NULL ? r->eval : "-",
                     r->mode != NULL ? r->mode : "-", r->effort != NULL ? r->effort : "-");
        else
            snprintf(labels[i], LABEL_LEN, "%s %s", r->mode != NULL ? r->mode : "-",
                     r->effort != NULL ? r->effort : "-");
        items[i] = (svg_interval){labels[i], report_colour(r->mode), r->accuracy, r->ci_low, r->ci_high};
        no_ci += isfinite(r->accuracy) && !(isfinite(r->ci_low) && isfinite(r->ci_high));
    }
    fputs("<p class=\"note\">avg@K accuracy per precision mode and reasoning effort; bars are "
          "95% intervals (percentile bootstrap over problems).</p>\n",
          out);
    const svg_error_bars chart = {"accuracy per mode and effort with 95% intervals", "accuracy",
                                  items, d->n_scores, 0.0, 1.0};
    skipped_note(out, svg_write_error_bars(out, &chart), "score", "scores", 0);
    if (no_ci > 0)
        fprintf(out, "<p class=\"note\">%zu scores have no interval (fewer than 2 problems).</p>\n",
                no_ci);
    free(storage);
    free(labels);
    free(items);

    fputs("<table>\n<tr><th class=\"t\">eval</th><th class=\"t\">mode</th><th class=\"t\">effort"
          "</th><th>accuracy</th><th>95% CI</th><th>SE</th><th>problems</th><th>K</th>"
          "<th>errors</th><th>truncated</th></tr>\n",
          out);
    char lo[SVG_NUM_LEN], hi[SVG_NUM_LEN];
    for (size_t i = 0; i < d->n_scores; i++) {
        const eval_score_stored *r = &d->scores[i];
        fputs("<tr>", out);
        td_text(out, r->eval);
        td_text(out, r->mode);
        td_text(out, r->effort);
        td_num(out, r->accuracy);
        fprintf(out, "<td>[%s, %s]</td>", svg_fmt_num(lo, sizeof lo, r->ci_low),
                svg_fmt_num(hi, sizeof hi, r->ci_high));
        td_num(out, r->stderr_);
        fprintf(out, "<td>%lld</td><td>%lld</td><td%s>%lld</td><td>%lld</td></tr>\n",
                (long long)r->n_problems, (long long)r->k,
                r->n_errors > 0 ? " class=\"nonfinite\"" : "", (long long)r->n_errors,
                (long long)r->n_truncated);
    }
    fputs("</table>\n", out);
    if (d->n_pairs > 0) {
        fputs("<p class=\"note\">Paired on the same problems (A &minus; B): mean difference, "
              "its 95% interval, wins/losses/ties of A, exact sign test, smallest detectable "
              "drop (80% power).</p>\n<table>\n<tr><th class=\"t\">eval</th><th class=\"t\">effort"
              "</th><th class=\"t\">A &minus; B</th><th>mean diff</th><th>95% CI</th><th>SE</th>"
              "<th>W/L/T</th><th>sign p</th><th>MDE</th><th>problems</th></tr>\n",
              out);
        for (size_t i = 0; i < d->n_pairs; i++) {
            const eval_pair_stored *p = &d->pairs[i];
            fputs("<tr>", out);
            td_text(out, p->eval);
            td_text(out, p->effort);
            fputs("<td class=\"t\">", out);
            esc(out, p->mode_a, "-");
            fputs(" &minus; ", out);
            esc(out, p->mode_b, "-");
            fputs("</td>", out);
            if (p->n_problems == 0) {  /* nothing to pair: no NaN and no sign p of 1 */
                fputs("<td class=\"t\" colspan=\"6\">no pairs (no problem scored in both "
                      "modes)</td><td>0</td></tr>\n", out);
                continue;
            }
            td_num(out, p->mean_diff);
            fprintf(out, "<td>[%s, %s]</td>", svg_fmt_num(lo, sizeof lo, p->ci_low),
                    svg_fmt_num(hi, sizeof hi, p->ci_high));
            td_num(out, p->stderr_);
            fprintf(out, "<td>%lld/%lld/%lld</td>", (long long)p->wins, (long long)p->losses,
                    (long long)p->ties);
            td_num(out, p->sign_p);
            td_num(out, p->mde);
            fprintf(out, "<td>%lld</td></tr>\n", (long long)p->n_problems);
        }
        fputs("</table>\n", out);
    }
    fputs("</section>\n", out);
    return PG_OK;
}

/* The trend over the last complete runs of the same kind and label. */
static pg_status put_trend(FILE *out, const report_data *d, pg_err *err)
{
    const report_trend *t = &d->trend;
    fputs("<section id=\"trend\">\n<h2>Trend</h2>\n<p class=\"note\">", out);
    if (t->metric == REPORT_TREND_NONE || t->n_runs == 0 || t->n_series == 0) {
        fputs("No complete runs of this kind and label to follow.</p>\n</section>\n", out);
        return PG_OK;
    }
    const int rel = t->metric == REPORT_TREND_REL_L2, kld = t->metric == REPORT_TREND_KLD;
    const int log_y = rel || kld;  /* errors and divergences span decades */
    fprintf(out, "%s over the last %zu complete runs of kind ",
            rel ? "Layer-mean rel_l2 per mode (log scale)"
            : kld ? "Mean KLD per mode against the reference (log scale)"
                  : "Accuracy per mode and effort",
            t->n_runs);
    esc(out, d->run.kind, "-");
    fputs(" with label ", out);
    if (d->run.label != NULL) {
        fputs("&quot;", out);
        svg_put_escaped(out, d->run.label);
        fputs("&quot;", out);
    } else {
        fputs("(none)", out);
    }
    fprintf(out, ", up to run %lld.", (long long)d->run.id);
    if (t->runs[t->n_runs - 1].id != d->run.id) fputs(" This run is not complete, so it is not among them.", out);
    fputs("</p>\n", out);

    char *storage = NULL;
    char **labels = labels_new(t->n_runs, &storage);
    svg_series *series = calloc(t->n_series, sizeof *series);
    if (labels == NULL || series == NULL) {
        free(storage);
        free(labels);
        free(series);
        return pg_fail(err, PG_ERR_NOMEM, "report: out of memory");
    }
    for (size_t r = 0; r < t->n_runs; r++) snprintf(labels[r], LABEL_LEN, "#%lld", (long long)t->runs[r].id);
    for (size_t s = 0; s < t->n_series; s++) {
        const char *mode = t->series[s];
        char first[LABEL_LEN];
        /* An eval series is "mode effort": colour by the mode. */
        snprintf(first, sizeof first, "%s", mode);
        if (t->metric == REPORT_TREND_ACCURACY) first[strcspn(first, " ")] = '\0';
        series[s] = (svg_series){t->series[s], report_colour(first),
                                 t->values + s * t->n_runs, t->present + s * t->n_runs, 0};
    }
    const svg_line_chart chart = {rel   ? "layer-mean rel_l2 per run (log scale)"
                                  : kld ? "mean KLD per run (log scale)"
                                        : "accuracy per run",
                                  "run",
                                  rel   ? "layer-mean rel_l2 (log10)"
                                  : kld ? "mean KLD (log10)"
                                        : "accuracy",
                                  t->n_runs, (const char *const *)labels, series, t->n_series,
                                  log_y ? SVG_SCALE_LOG10 : SVG_SCALE_LINEAR, log_y ? NAN : 0.0,
                                  log_y ? NAN : 1.0};
    skipped_note(out, svg_write_line_chart(out, &chart), "point", "points", log_y);
    free(storage);
    free(labels);
    free(series);

    fputs("<table>\n<tr><th>run</th><th class=\"t\">started</th><th class=\"t\">git rev</th>", out);
    th_names(out, t->series, t->n_series);
    fputs("</tr>\n", out);
    for (size_t r = 0; r < t->n_runs; r++) {
        fprintf(out, "<tr><td>%lld</td>", (long long)t->runs[r].id);
        td_text(out, t->runs[r].started_at);
        td_text(out, t->runs[r].git_rev);
        for (size_t s = 0; s < t->n_series; s++) {
            if (t->present[s * t->n_runs + r]) td_num(out, t->values[s * t->n_runs + r]);
            else fputs("<td>-</td>", out);
        }
        fputs("</tr>\n", out);
    }
    fputs("</table>\n</section>\n", out);
    return PG_OK;
}

/* ---- the page ---------------------------------------------------------------- */

pg_status report_html_write(const report_data *d, FILE *out, pg_err *err)
{
    if (d == NULL || out == NULL) return pg_fail(err, PG_ERR_INTERNAL, "report: no data or output");
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>",
          out);
    fprintf(out, "precgate run %lld: ", (long long)d->run.id);
    esc(out, d->run.kind, "-");
    if (d->run.label != NULL) {
        fputc(' ', out);
        svg_put_escaped(out, d->run.label);
    }
    fprintf(out, "</title>\n<style>%s</style>\n</head>\n<body>\n", CSS);
    put_diagnosis_lead(out, d);
    put_header(out, d);
    put_regressions(out, d);
    put_diagnosis(out, d);
    pg_status s = report_divergence_html(out, d, err);
    if (s == PG_OK) s = put_layers(out, d, err);
    if (s == PG_OK) put_unsupported(out, d);
    if (s == PG_OK) s = put_heads(out, d, err);
    if (s == PG_OK) put_quant(out, d);
    if (s == PG_OK) put_kv_formats(out, d);
    if (s == PG_OK) put_kv_memory(out, d);
    if (s == PG_OK) s = put_attribution(out, d, err);
    if (s == PG_OK) put_advice(out, d);
    if (s == PG_OK) s = put_evals(out, d, err);
    if (s == PG_OK) s = put_trend(out, d, err);
    if (s != PG_OK) return s;
    fprintf(out, "<footer><p class=\"note\">Generated by precgate %s from ", PRECGATE_VERSION);
    esc(out, d->db_name, "-");
    fputs(".</p></footer>\n</body>\n</html>\n", out);
    if (ferror(out)) return pg_fail(err, PG_ERR_IO, "report: write error");
    return PG_OK;
}
