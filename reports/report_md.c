/* report_md.c: a run's report as Markdown for a pull-request comment (see report_md.h). */
#include "report_md.h"

#include <inttypes.h>

#include "base/variant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report_divergence.h"
#include "svg.h"
#include "term.h"
#include "base/utf8.h"

/* Verdicts the gate writes, in the order the summary counts them. */
static const char *const VERDICTS[] = {"regression", "error",   "inconclusive",
                                       "improvement", "no change", "pass", "skipped"};
#define N_VERDICTS (sizeof VERDICTS / sizeof VERDICTS[0])

void report_md_put_escaped(FILE *out, const char *s)
{
    if (s == NULL) {
        fputc('-', out);
        return;
    }
    for (; *s != '\0'; s++) {
        unsigned long cp = 0;
        const size_t n = utf8_decode(s, &cp);
        if ((n == 0 || utf8_is_control(cp)) && *s != '\n' && *s != '\r') {
            s += term_put_char(out, s) - 1; /* as on a terminal: \x1b, \u{9b}, \xff */
            continue;
        }
        if (n > 1) { /* a whole multi-byte character */
            fwrite(s, 1, n, out);
            s += n - 1;
            continue;
        }
        switch (*s) {
        case '&': fputs("&amp;", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '\n':
        case '\r': fputc(' ', out); break;
        case '\\': case '`': case '*': case '_': case '[': case ']': case '|': case '~': case '#':
            fputc('\\', out);
            fputc(*s, out);
            break;
        default: fputc(*s, out);
        }
    }
}

/* Writes " v |" with v as "%.3g" (or NaN/inf). */
static void cell_num(FILE *out, double v)
{
    char b[SVG_NUM_LEN];
    fprintf(out, " %s |", svg_fmt_num(b, sizeof b, v));
}

/* Writes " s |" with s escaped, in bold ("**s**") when strong. */
static void cell_text_strong(FILE *out, const char *s, int strong)
{
    fputs(strong ? " **" : " ", out);
    report_md_put_escaped(out, s);
    fputs(strong ? "** |" : " |", out);
}

/* Writes " s |" with s escaped. */
static void cell_text(FILE *out, const char *s)
{
    cell_text_strong(out, s, 0);
}

/* Writes a table's separator row, one column per character of align:
 * 'l' left-aligned (text), 'r' right-aligned (numbers); then `extra_r` more
 * right-aligned columns (for a variable number of value columns). */
static void sep_row(FILE *out, const char *align, size_t extra_r)
{
    fputc('|', out);
    for (const char *a = align; *a != '\0'; a++) fputs(*a == 'r' ? " ---: |" : " --- |", out);
    for (size_t i = 0; i < extra_r; i++) fputs(" ---: |", out);
    fputc('\n', out);
}

/* ---- sections ---------------------------------------------------------------- */

/* The number of flags that fail the gate. */
static size_t n_failing(const report_data *d)
{
    size_t n = 0;
    for (size_t i = 0; i < d->n_flags; i++) n += (size_t)report_flag_fails(&d->flags[i]);
    return n;
}

/* Heading, the gate's verdict line and the run table. */
static void put_header(FILE *out, const report_data *d)
{
    const run_row *r = &d->run;
    fprintf(out, "## precgate report: run %lld (", (long long)r->id);
    report_md_put_escaped(out, r->kind);
    if (r->label != NULL) {
        fputs(", ", out);
        report_md_put_escaped(out, r->label);
    }
    fputs(")\n\n**Gate:** ", out);
    if (!d->gated) fputs("not gated", out);
    else {
        const size_t f = n_failing(d);
        if (f > 0) fprintf(out, "**FAIL**: %zu of %zu checks failed", f, d->n_flags);
        else fprintf(out, "**PASS**: no regressions in %zu checks", d->n_flags);
        if (d->flags[0].baseline_run_id >= 0)
            fprintf(out, " against baseline run %lld", (long long)d->flags[0].baseline_run_id);
    }
    fputs("\n\n| run | kind | label | status | started | finished | git rev | device |\n", out);
    sep_row(out, "rlllllll", 0);
    fprintf(out, "| %lld |", (long long)r->id);
    cell_text(out, r->kind);
    cell_text(out, r->label);
    cell_text(out, r->status);
    cell_text(out, r->started_at);
    cell_text(out, r->finished_at);
    cell_text(out, r->git_rev);
    cell_text(out, r->device);
    fputs("\n", out);
    if (r->error != NULL) {
        fputs("\n**Run error:** ", out);
        report_md_put_escaped(out, r->error);
        fputs("\n", out);
    }
}


/* A table of the run's flags: only the failing ones when failing_only. */
static void put_flag_table(FILE *out, const report_data *d, int failing_only)
{
    fputs("| verdict | scope | where | metric | value | baseline | threshold | baseline run | "
          "message |\n",
          out);
    sep_row(out, "llllrrrrl", 0);
    for (size_t i = 0; i < d->n_flags; i++) {
        const flag_row *f = &d->flags[i];
        if (failing_only && !report_flag_fails(f)) continue;
        fputc('|', out);
        cell_text_strong(out, f->verdict, report_flag_fails(f));
        cell_text(out, f->scope);
        fputc(' ', out);
        report_flag_where(out, f, report_md_put_escaped);
        fputs(" |", out);
        cell_text(out, f->metric);
        cell_num(out, f->value);
        cell_num(out, f->baseline_value);
        cell_num(out, f->threshold);
        if (f->baseline_run_id >= 0) fprintf(out, " %lld |", (long long)f->baseline_run_id);
        else fputs(" - |", out);
        cell_text(out, f->message);
        fputs("\n", out);
    }
}

/* The scale bugs the diagnosis names, first in the report (nothing without one). */
static void put_diagnosis_lead(FILE *out, const report_data *d)
{
    const report_diagnosis *g = &d->diag;
    if (g->n_bugs == 0) return;
    fprintf(out, "> **SCALE BUG**: %zu span%s of layers match%s a known scale misapplication\n",
            g->n_bugs, g->n_bugs == 1 ? "" : "s", g->n_bugs == 1 ? "es" : "");
    for (size_t i = 0; i < g->n_rows; i++) {
        if (!g->rows[i].is_bug) continue;
        fputs(">\n> - ", out);
        report_md_put_escaped(out, g->rows[i].capture);
        fputs(": ", out);
        report_md_put_escaped(out, g->rows[i].message);
        fputs("\n", out);
    }
    fputs("\n", out);
}

/* The diagnosis table: per span of layers of an external output, its verdict,
 * every hypothesis's largest distance and the verdict's line. */
static void put_diagnosis(FILE *out, const report_data *d)
{
    const report_diagnosis *g = &d->diag;
    if (g->n_rows == 0) return;
    fprintf(out, "\n### Scale-plumbing diagnosis\n\nrel_l2 of each external output against "
            "each hypothesis (largest over the layers); a hypothesis matches at rel_l2 <= %g "
            "and is named when %gx nearer than every one of the other side.\n\n"
            "| capture | output | layers | verdict |", g->match_rel_l2, g->margin);
    for (size_t h = 0; h < g->n_hyp; h++) cell_text(out, g->hypotheses[h]);
    fputs(" what it says |\n", out);
    fputs("| --- | --- | --- | --- |", out);
    for (size_t h = 0; h < g->n_hyp; h++) fputs(" ---: |", out);
    fputs(" --- |\n", out);
    for (size_t i = 0; i < g->n_rows; i++) {
        const report_diag_row *r = &g->rows[i];
        char ext[VARIANT_NAME_MAX];
        variant_name_ext(r->ext_name, ext, sizeof ext);
        fputs("|", out);
        cell_text(out, r->capture);
        cell_text(out, ext);
        cell_text(out, r->layers);
        cell_text_strong(out, r->verdict, r->is_bug);
        for (size_t h = 0; h < g->n_hyp; h++) cell_num(out, g->dist[i * g->n_hyp + h]);
        cell_text(out, r->message);
        fputs("\n", out);
    }
}

/* The gate's verdicts. */
static void put_regressions(FILE *out, const report_data *d)
{
    fputs("\n### Regressions\n\n", out);
    if (!d->gated) {
        fprintf(out, "not gated (%s)\n",
                d->flags_table ? "no gate verdicts were recorded for this run"
                               : "this database has no flags table");
        return;
    }
    size_t counts[N_VERDICTS] = {0}, other = 0;
    for (size_t i = 0; i < d->n_flags; i++) {
        size_t k = 0;
        while (k < N_VERDICTS &&
               (d->flags[i].verdict == NULL || strcmp(d->flags[i].verdict, VERDICTS[k]) != 0))
            k++;
        if (k < N_VERDICTS) counts[k]++;
        else other++;
    }
    for (size_t k = 0; k < N_VERDICTS; k++)
        fprintf(out, "%s%zu %s", k > 0 ? ", " : "", counts[k], VERDICTS[k]);
    if (other > 0) fprintf(out, ", %zu other", other);
    fputs("\n\n", out);
    if (n_failing(d) > 0) {
        put_flag_table(out, d, 1);
        fputs("\n", out);
    } else {
        fputs("No regressions.\n\n", out);
    }
    fprintf(out, "<details><summary>all %zu checks</summary>\n\n", d->n_flags);
    put_flag_table(out, d, 0);
    fputs("\n</details>\n", out);
}

/* Writes a whole-layer rel_l2 cell: the value, and the NaN/Inf output counts. */
static void cell_layer(FILE *out, const report_cell *c)
{
    char b[SVG_NUM_LEN];
    if (!c->present) {
        fputs(" - |", out);
        return;
    }
    const int bad = report_cell_nonfinite(c);
    char outputs[REPORT_CELL_OUTPUTS_MAX];
    fprintf(out, " %s%s%s", bad ? "**" : "", svg_fmt_num(b, sizeof b, c->rel_l2), bad ? "**" : "");
    if (report_cell_outputs(c, outputs, sizeof outputs)) fprintf(out, " %s", outputs);
    fputs(" |", out);
}

/* Whether the run's layers span more than one capture. */
static int several_captures(const report_data *d)
{
    for (size_t l = 1; l < d->n_layers; l++)
        if (strcmp(d->layers[l].capture, d->layers[0].capture) != 0) return 1;
    return 0;
}

/* One row per layer: rel_l2 per variant; the mean and worst layer after. */
static void put_layers(FILE *out, const report_data *d)
{
    fputs("\n### Per-layer rel_l2 (vs fp64 reference, whole layer)\n\n", out);
    if (d->n_layers == 0 || d->n_variants == 0) {
        fputs("No layer metrics in this run.\n", out);
        return;
    }
    const int caps = several_captures(d);
    fputs(caps ? "| capture | layer |" : "| layer |", out);
    for (size_t v = 0; v < d->n_variants; v++) cell_text(out, d->variants[v]);
    fputs("\n", out);
    sep_row(out, caps ? "lr" : "r", d->n_variants);
    for (size_t l = 0; l < d->n_layers; l++) {
        fputc('|', out);
        if (caps) cell_text(out, d->layers[l].capture);
        fprintf(out, " %d |", d->layers[l].layer);
        for (size_t v = 0; v < d->n_variants; v++) cell_layer(out, &d->cells[l * d->n_variants + v]);
        fputs("\n", out);
    }
    fputs(caps ? "| **mean** | |" : "| **mean** |", out);
    for (size_t v = 0; v < d->n_variants; v++) cell_num(out, report_variant_mean(d, v));
    fputs(caps ? "\n| **worst layer** | |" : "\n| **worst layer** |", out);
    for (size_t v = 0; v < d->n_variants; v++) {
        size_t w;
        if (report_worst_layers(d, v, &w, 1) == 1) fprintf(out, " %d |", d->layers[w].layer);
        else fputs(" - |", out);
    }
    fputs("\n", out);
}

/* Orders doubles ascending with NaN and +inf last. */
static int dbl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    if (!isfinite(x)) x = INFINITY;
    if (!isfinite(y)) y = INFINITY;
    return (x > y) - (x < y);
}

/* Worst, median and best head of the worst layers of the worst fp8 mode. */
static pg_status put_heads(FILE *out, const report_data *d, pg_err *err)
{
    fputs("\n### Per-head error of the worst layers\n\n", out);
    const int wv = report_worst_fp8_variant(d);
    if (wv < 0 || d->n_heads == 0) {
        fputs(wv < 0 ? "No fp8 mode (fp8kv, fp8qkv) in this run.\n" : "No per-head metrics in this run.\n",
              out);
        return PG_OK;
    }
    const size_t nh = (size_t)d->n_heads;
    double *sorted = malloc(nh * sizeof(double));
    if (sorted == NULL) return pg_fail(err, PG_ERR_NOMEM, "report: out of memory");
    size_t rows[REPORT_HEATMAP_LAYERS];
    const size_t nr = report_worst_layers(d, (size_t)wv, rows, REPORT_HEATMAP_LAYERS);
    fputs("Worst fp8 mode: **", out);
    report_md_put_escaped(out, d->variants[wv]);
    fputs("**.\n\n| layer | layer rel_l2 | worst head | its rel_l2 | median head rel_l2 | best head | "
          "its rel_l2 | non-finite heads |\n",
          out);
    sep_row(out, "rrrrrrrr", 0);
    for (size_t r = 0; r < nr; r++) {
        const size_t l = rows[r], base = (l * d->n_variants + (size_t)wv) * nh;
        size_t n = 0, bad = 0;
        long worst = -1, best = -1;
        for (size_t h = 0; h < nh; h++) {
            if (!d->head_present[base + h]) continue;
            const double v = d->head_rel_l2[base + h];
            sorted[n++] = v;
            if (!isfinite(v)) {
                bad++;
                if (worst < 0 || isfinite(d->head_rel_l2[base + (size_t)worst])) worst = (long)h;
                continue;
            }
            if (worst < 0 || (isfinite(d->head_rel_l2[base + (size_t)worst]) &&
                              v > d->head_rel_l2[base + (size_t)worst]))
                worst = (long)h;
            if (best < 0 || v < d->head_rel_l2[base + (size_t)best]) best = (long)h;
        }
        if (n > 1) qsort(sorted, n, sizeof(double), dbl_cmp);
        fprintf(out, "| %d |", d->layers[l].layer);
        cell_num(out, d->cells[l * d->n_variants + (size_t)wv].rel_l2);
        if (worst >= 0) {
            fprintf(out, " %ld |", worst);
            cell_num(out, d->head_rel_l2[base + (size_t)worst]);
        } else {
            fputs(" - | - |", out);
        }
        if (n > 0) cell_num(out, n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2);
        else fputs(" - |", out);
        if (best >= 0) {
            fprintf(out, " %ld |", best);
            cell_num(out, d->head_rel_l2[base + (size_t)best]);
        } else {
            fputs(" - | - |", out);
        }
        fprintf(out, " %zu |\n", bad);
    }
    free(sorted);
    return PG_OK;
}

/* fp8 saturation and underflow per layer and tensor. */
static void put_quant(FILE *out, const report_data *d)
{
    fputs("\n### fp8 saturation and underflow\n\n", out);
    if (!d->has_quant) {
        fputs("No quantization statistics in this run.\n", out);
        return;
    }
    fputs("| layer | q saturated | q underflow | k saturated | k underflow | v saturated | "
          "v underflow | scale source |\n",
          out);
    sep_row(out, "rrrrrrrl", 0);
    for (size_t l = 0; l < d->n_layers; l++) {
        if (!report_quant_present(d, l)) continue;
        const report_quant *q = &d->quant[l * REPORT_N_TENSORS];
        fprintf(out, "| %d |", d->layers[l].layer);
        for (int t = 0; t < REPORT_N_TENSORS; t++) {
            if (!q[t].present) {
                fputs(" - | - |", out);
                continue;
            }
            cell_num(out, q[t].saturated_frac);
            cell_num(out, q[t].underflow_frac);
        }
        fputc(' ', out);
        report_quant_source(out, d, l, report_md_put_escaped);
        fputs(" |\n", out);
    }
}

/* What each swept mode's cache write did to K and V, fitted to its format
 * (kv_format_stats), one row per mode and tensor over the run's layers. */
static void put_kv_formats(FILE *out, const report_data *d)
{
    if (d->n_kv_formats == 0) return;
    fputs("\n### KV cache formats\n\n"
          "Each swept mode's cache write on every layer's K and V (means over the layers, the "
          "worst layer in brackets): values past the format's range, nonzero values written "
          "as zero, the codes used of the format's, the entropy of their histogram, and the "
          "row or block scales.\n\n"
          "| mode | tensor | format | saturated | underflow | codes used | entropy (bits) | "
          "scales | at floor | scale min / mean / max |\n", out);
    sep_row(out, "lllrrrrrrl", 0);
    for (size_t i = 0; i < d->n_kv_formats; i++) {
        const kv_format_summary *r = &d->kv_formats[i];
        fputs("| ", out);
        report_md_put_escaped(out, r->mode ? r->mode : "");
        fprintf(out, " | %s | %s |", r->tensor ? r->tensor : "", r->format ? r->format : "");
        char mean[SVG_NUM_LEN], worst[SVG_NUM_LEN];
        fprintf(out, " %s (%s) |", svg_fmt_num(mean, sizeof mean, r->saturated_mean),
                svg_fmt_num(worst, sizeof worst, r->saturated_max));
        fprintf(out, " %s (%s) |", svg_fmt_num(mean, sizeof mean, r->underflow_mean),
                svg_fmt_num(worst, sizeof worst, r->underflow_max));
        fprintf(out, " %d of %d | %.2f of %d |", r->codes_used, 1 << r->code_bits,
                r->entropy_bits, r->code_bits);
        if (r->n_scales == 0) {
            fprintf(out, " %s | - | - |\n", report_kv_scales_word(r->mode));
            continue;
        }
        fprintf(out, " %" PRId64 " |", r->n_scales);
        cell_num(out, r->scale_floor_frac);
        fprintf(out, " %.3g / %.3g / %.3g |\n", r->scale_min, r->scale_mean, r->scale_max);
    }
}

/* The cells a kernel cannot compute (report_data.h d->unsupported). */
static void put_unsupported(FILE *out, const report_data *d)
{
    if (d->n_unsupported == 0) return;
    fputs("\n### Not computed\n\n", out);
    report_md_put_escaped(out, report_unsupported_caption);
    fputs("\n\n| capture | variant | layers | why |\n", out);
    sep_row(out, "llll", 0);
    for (size_t i = 0; i < d->n_unsupported; i++) {
        const unsupported_summary *u = &d->unsupported[i];
        fputs("| ", out);
        report_md_put_escaped(out, u->capture);
        fputs(" | ", out);
        report_md_put_escaped(out, u->variant);
        fprintf(out, " | %d: ", u->n_layers);
        report_md_put_escaped(out, u->layers);
        fputs(" | ", out);
        report_md_put_escaped(out, u->reason);
        fputs(" |\n", out);
    }
}

/* Each swept mode's KV cache size per token over the run's layers, against
 * bf16 and fp8 (report_data.h report_kv_memory). */
static void put_kv_memory(FILE *out, const report_data *d)
{
    if (d->n_kv_memory == 0) return;
    fputs("\n### KV cache memory\n\n", out);
    report_md_put_escaped(out, report_kv_memory_caption);
    fputs("\n\n| mode | bytes per token | saved vs bf16 | saved vs fp8 |\n", out);
    sep_row(out, "lrrr", 0);
    for (size_t i = 0; i < d->n_kv_memory; i++) {
        const report_kv_memory *r = &d->kv_memory[i];
        fputs("| ", out);
        report_md_put_escaped(out, r->mode);
        fprintf(out, " | %lld | %.1f%% | %.1f%% |\n", r->bytes,
                100.0 * report_kv_saved_fraction(r->bytes, r->bytes_bf16),
                100.0 * report_kv_saved_fraction(r->bytes, r->bytes_fp8));
    }
}

/* The attribution table (run --attribute): per fp8 variant and layer the
 * single-tensor errors, their sum and root-sum-square beside the joint. */
static void put_attribution(FILE *out, const report_data *d)
{
    if (d->n_attribution == 0) return;  /* a run without --attribute */
    fputs("\n### Attribution per quantized tensor\n\n", out);
    report_md_put_escaped(out, report_attribution_caption);
    fputs("\n\n| variant | layer |", out);
    for (int t = 0; t < ATTRIBUTION_ALL; t++) fprintf(out, " %s |", attribution_tensors[t]);
    fputs(" sum | rss | joint | largest |\n", out);
    sep_row(out, "lr", ATTRIBUTION_ALL + 4);  /* none..p, sum, rss, joint, largest */
    for (size_t i = 0; i < d->n_attribution; i++) {
        const report_attribution *a = &d->attribution[i];
        fputc('|', out);
        cell_text(out, a->variant);
        fprintf(out, " %d |", a->layer);
        for (int t = 0; t < ATTRIBUTION_ALL; t++) {
            if (isnan(a->rel_l2[t])) fputs(" - |", out);
            else cell_num(out, a->rel_l2[t]);
        }
        cell_num(out, a->sum);
        cell_num(out, a->rss);
        cell_num(out, a->rel_l2[ATTRIBUTION_ALL]);
        cell_text(out, a->dominant >= 0 ? attribution_tensors[a->dominant] : "-");
        fputc('\n', out);
    }
}

/* The KV cache policy advice (report_data.advice, filled by cmd_report). */
static void put_advice(FILE *out, const report_data *d)
{
    if (!d->advice_shown) return;
    fputs("\n### KV cache policy advice\n\n", out);
    if (d->advice_note != NULL) {
        report_md_put_escaped(out, d->advice_note);
        fputc('\n', out);
        return;
    }
    fputs("Which layers keep a bf16 KV cache so that every layer left in fp8 is within the "
          "layer bound of ", out);
    report_md_put_escaped(out, d->advice_config);
    fputs(" in every capture (precgate advise). ", out);
    report_md_put_escaped(out, report_advice_counts);
    fputs("\n\n| variant | metric | budget | keep bf16 | vLLM | KV saved | worst fp8 layer | "
          "its value |\n", out);
    sep_row(out, "llrllrrr", 0);
    for (size_t i = 0; i < d->n_advice; i++) {
        const report_advice *a = &d->advice[i];
        fputc('|', out);
        cell_text(out, a->variant);
        cell_text(out, a->metric != NULL ? a->metric : "-");
        if (isnan(a->budget)) cell_text(out, "-");
        else cell_num(out, a->budget);
        if (a->note != NULL) {
            cell_text(out, a->note);
            fputs(" | | | |\n", out);
            continue;
        }
        cell_text(out, a->keep[0] != '\0' ? a->keep : "none");
        fputs(" `", out);
        fputs(a->flag != NULL ? a->flag : "no flag needed", out);
        fputs("` |", out);
        cell_num(out, a->saved_fraction);
        if (a->worst_layer >= 0) fprintf(out, " %d |", a->worst_layer);
        else fputs(" none |", out);
        cell_num(out, a->worst_value);
        fputc('\n', out);
    }
}

/* Scores and paired differences. */
static void put_evals(FILE *out, const report_data *d)
{
    fputs("\n### End-task accuracy\n\n", out);
    if (d->n_scores == 0) {
        fputs("No end-task evals in this run.\n", out);
        return;
    }
    char lo[SVG_NUM_LEN], hi[SVG_NUM_LEN];
    fputs("| eval | mode | effort | accuracy | 95% CI | SE | problems | K | errors | truncated |\n", out);
    sep_row(out, "lllrrrrrrr", 0);
    for (size_t i = 0; i < d->n_scores; i++) {
        const eval_score_stored *r = &d->scores[i];
        fputc('|', out);
        cell_text(out, r->eval);
        cell_text(out, r->mode);
        cell_text(out, r->effort);
        cell_num(out, r->accuracy);
        fprintf(out, " [%s, %s] |", svg_fmt_num(lo, sizeof lo, r->ci_low),
                svg_fmt_num(hi, sizeof hi, r->ci_high));
        cell_num(out, r->stderr_);
        fprintf(out, " %lld | %lld | %lld | %lld |\n", (long long)r->n_problems, (long long)r->k,
                (long long)r->n_errors, (long long)r->n_truncated);
    }
    if (d->n_pairs == 0) return;
    fputs("\nPaired on the same problems (A − B):\n\n| eval | effort | A − B | mean diff | 95% CI | "
          "SE | W/L/T | sign p | MDE | problems |\n",
          out);
    sep_row(out, "lllrrrrrrr", 0);
    for (size_t i = 0; i < d->n_pairs; i++) {
        const eval_pair_stored *p = &d->pairs[i];
        fputc('|', out);
        cell_text(out, p->eval);
        cell_text(out, p->effort);
        fputc(' ', out);
        report_md_put_escaped(out, p->mode_a);
        fputs(" − ", out);
        report_md_put_escaped(out, p->mode_b);
        fputs(" |", out);
        if (p->n_problems == 0) {  /* nothing to pair: no NaN and no sign p of 1 */
            fputs(" no pairs (no problem scored in both modes) | | | | | | 0 |\n", out);
            continue;
        }
        cell_num(out, p->mean_diff);
        fprintf(out, " [%s, %s] |", svg_fmt_num(lo, sizeof lo, p->ci_low),
                svg_fmt_num(hi, sizeof hi, p->ci_high));
        cell_num(out, p->stderr_);
        fprintf(out, " %lld/%lld/%lld |", (long long)p->wins, (long long)p->losses, (long long)p->ties);
        cell_num(out, p->sign_p);
        cell_num(out, p->mde);
        fprintf(out, " %lld |\n", (long long)p->n_problems);
    }
}

/* The trend table. */
static void put_trend(FILE *out, const report_data *d)
{
    const report_trend *t = &d->trend;
    fputs("\n### Trend\n\n", out);
    if (t->metric == REPORT_TREND_NONE || t->n_runs == 0 || t->n_series == 0) {
        fputs("No complete runs of this kind and label to follow.\n", out);
        return;
    }
    fprintf(out, "%s over the last %zu complete runs of kind ",
            t->metric == REPORT_TREND_REL_L2 ? "Layer-mean rel_l2 per mode"
            : t->metric == REPORT_TREND_KLD  ? "Mean KLD per mode against the reference"
                                             : "Accuracy per mode and effort",
            t->n_runs);
    report_md_put_escaped(out, d->run.kind);
    fputs(" with label ", out);
    if (d->run.label != NULL) report_md_put_escaped(out, d->run.label);
    else fputs("(none)", out);
    fprintf(out, ", up to run %lld.\n\n| run | started | git rev |", (long long)d->run.id);
    for (size_t s = 0; s < t->n_series; s++) cell_text(out, t->series[s]);
    fputs("\n", out);
    sep_row(out, "rll", t->n_series);
    for (size_t r = 0; r < t->n_runs; r++) {
        fprintf(out, "| %lld |", (long long)t->runs[r].id);
        cell_text(out, t->runs[r].started_at);
        cell_text(out, t->runs[r].git_rev);
        for (size_t s = 0; s < t->n_series; s++) {
            if (t->present[s * t->n_runs + r]) cell_num(out, t->values[s * t->n_runs + r]);
            else fputs(" - |", out);
        }
        fputs("\n", out);
    }
}

pg_status report_md_write(const report_data *d, FILE *out, pg_err *err)
{
    if (d == NULL || out == NULL) return pg_fail(err, PG_ERR_INTERNAL, "report: no data or output");
    put_diagnosis_lead(out, d);
    put_header(out, d);
    put_regressions(out, d);
    put_diagnosis(out, d);
    report_divergence_md(out, d);
    put_layers(out, d);
    put_unsupported(out, d);
    pg_status s = put_heads(out, d, err);
    if (s != PG_OK) return s;
    put_quant(out, d);
    put_kv_formats(out, d);
    put_kv_memory(out, d);
    put_attribution(out, d);
    put_advice(out, d);
    put_evals(out, d);
    put_trend(out, d);
    fprintf(out, "\n<sub>Generated by precgate %s from ", PRECGATE_VERSION);
    report_md_put_escaped(out, d->db_name);
    fputs(".</sub>\n", out);
    if (ferror(out)) return pg_fail(err, PG_ERR_IO, "report: write error");
    return PG_OK;
}
