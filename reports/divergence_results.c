/* divergence_results.c: a divergence run's summary and results file (see divergence_results.h). */
#include "divergence_results.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "atomic_file.h"
#include "db/divergence_store.h"
#include "json_out.h"
#include "term.h"

/* Mode of the results file (less the umask), as eval's. */
#define DIVERGENCE_RESULTS_FILE_MODE 0666
/* Percent per unit, for the token probability lines (llama-perplexity prints %). */
#define PERCENT 100.0

/* The labels of DIV_PERCENTILES as llama-perplexity prints them, and as
 * the results file keys them. */
static const char *const PCT_LABEL[DIV_N_PERCENTILES] = {"Median", "90.0%", "95.0%", "99.0%",
                                                         "99.9%", "Maximum"};
static const char *const PCT_KEY[DIV_N_PERCENTILES] = {"50", "90", "95", "99", "99.9", "max"};

/* What a run's results are read into. */
typedef struct results {
    div_summary_stored *sm;
    size_t n_sm;
    div_sequence_stored *seq;
    size_t n_seq;
    const div_summary_stored *floor;   /* the noise floor's summary, or NULL */
} results;

static void results_free(results *r)
{
    divergence_store_summaries_free(r->sm, r->n_sm);
    divergence_store_sequences_free(r->seq, r->n_seq);
    *r = (results){0};
}

static pg_status results_read(pg_store *s, int64_t run_id, results *r, pg_err *err)
{
    *r = (results){0};
    pg_status st = divergence_store_read_summaries(s, run_id, &r->sm, &r->n_sm, err);
    if (st == PG_OK) st = divergence_store_read_sequences(s, run_id, &r->seq, &r->n_seq, err);
    if (st == PG_OK && r->n_sm == 0)
        st = pg_fail(err, PG_ERR_FORMAT, "run %" PRId64 " has no divergence summary (not "
                     "compared: its scoring did not finish)", run_id);
    for (size_t i = 0; st == PG_OK && i < r->n_sm; i++)
        if (strcmp(r->sm[i].role, div_role_name(DIV_ROLE_FLOOR)) == 0) r->floor = &r->sm[i];
    if (st != PG_OK) results_free(r);
    return st;
}

/* The first scored position (as a token index) of sequence q whose top-1
 * ids differ between the reference and mode, into *at (-1: none). */
static pg_status first_top_diff(pg_store *s, int64_t run_id, const char *mode, div_role role,
                                const div_sequence_stored *q, int64_t *at, pg_err *err)
{
    div_position *pos = NULL;
    size_t n = 0;
    pg_status st = divergence_store_read_positions(s, run_id, mode, role, q->seq_id, &pos, &n,
                                                   err);
    *at = -1;
    for (size_t i = 0; st == PG_OK && i < n && *at < 0; i++)
        if (!pos[i].same_top) *at = (int64_t)(q->score_from + i);
    free(pos);
    return st;
}

/* "v ± se" of a statistic with its SE, n/a for undefined parts. */
static void print_pm(FILE *out, const char *label, double v, double se, double scale,
                     const char *unit)
{
    if (isnan(v)) {
        fprintf(out, "%-12s:        n/a\n", label);
    } else if (isnan(se)) {
        fprintf(out, "%-12s: %10.6f%s\n", label, v * scale, unit);
    } else {
        fprintf(out, "%-12s: %10.6f ± %10.6f%s\n", label, v * scale, se * scale, unit);
    }
}

pg_status divergence_results_print(pg_store *s, int64_t run_id, FILE *out, pg_err *err)
{
    results r;
    pg_status st = results_read(s, run_id, &r, err);
    if (st != PG_OK) return st;
    for (size_t i = 0; st == PG_OK && i < r.n_sm; i++) {
        const div_summary_stored *m = &r.sm[i];
        if (m == r.floor) continue;
        const div_summary *d = &m->s;
        term_printf(out, "\n====== %s against %s: KL divergence statistics ======\n", m->mode,
                    m->reference);
        fprintf(out, "sequences %zu, scored positions %zu (given token on both sides: %zu)\n",
                d->n_sequences, d->n_positions, d->n_given);
        print_pm(out, "Mean    KLD", d->kld_mean, d->kld_mean_se, 1.0, "");
        if (!isnan(d->kld_ci_low))
            fprintf(out, "%-12s: [%.6f, %.6f] (SE clustered by sequence)\n", "95% CI  KLD",
                    d->kld_ci_low, d->kld_ci_high);
        for (int k = DIV_N_PERCENTILES - 1; k >= 0; k--) {
            char label[24];
            snprintf(label, sizeof label, "%-7s KLD", PCT_LABEL[k]);
            print_pm(out, label, d->kld_percentile[k], NAN, 1.0, "");
        }
        fprintf(out, "====== Token probability statistics ======\n");
        print_pm(out, "Mean    Δp", d->mean_dp, NAN, PERCENT, " %");
        print_pm(out, "RMS Δp", d->rms_dp, NAN, PERCENT, " %");
        print_pm(out, "Same top p", d->same_top, d->same_top_se, PERCENT, " %");
        print_pm(out, "Mean ln(PPL(Q)/PPL(base))", d->mean_dlogprob, NAN, -1.0, "");
        print_pm(out, "Mean PPL(Q)/PPL(base)", d->ppl_ratio, NAN, 1.0, "");
        fprintf(out, "KLD is a top-K lower bound (K = %" PRId64 "); median tail mass %.6f (the "
                "bound misses at most the tail's share of the KL)\n", m->top_k,
                d->tail_mass_median);
        if (r.floor != NULL)
            fprintf(out, "noise floor (%s scored again): Mean KLD %.6g ± %.3g, Same top p "
                    "%.3f %%\n", r.floor->mode, r.floor->s.kld_mean,
                    isnan(r.floor->s.kld_mean_se) ? 0.0 : r.floor->s.kld_mean_se,
                    r.floor->s.same_top * PERCENT);
        else
            fprintf(out, "noise floor: not measured (--no-noise-floor)\n");
        fprintf(out, "first top-1 difference:");
        for (size_t q = 0; st == PG_OK && q < r.n_seq && q < DIVERGENCE_FIRST_DIFF_SHOWN; q++) {
            int64_t at = -1;
            st = first_top_diff(s, run_id, m->mode, DIV_ROLE_MODE, &r.seq[q], &at, err);
            if (st != PG_OK) break;
            if (at >= 0) term_printf(out, " %s@%" PRId64, r.seq[q].seq_id, at);
            else term_printf(out, " %s:none", r.seq[q].seq_id);
        }
        if (r.n_seq > DIVERGENCE_FIRST_DIFF_SHOWN)
            fprintf(out, " ... (%zu more in --output)", r.n_seq - DIVERGENCE_FIRST_DIFF_SHOWN);
        fputc('\n', out);
    }
    results_free(&r);
    return st;
}

/* atomic_file_writer: the printed document plus a newline. */
static pg_status write_text(void *ctx, FILE *out, pg_err *err)
{
    (void)err;
    fputs(ctx, out);
    fputc('\n', out);
    return PG_OK;
}

/* One mode's object of the results file. */
static pg_status mode_json(pg_store *s, int64_t run_id, const results *r,
                           const div_summary_stored *m, cJSON *o, pg_err *err)
{
    const div_summary *d = &m->s;
    int ok = cJSON_AddNumberToObject(o, "sequences", (double)d->n_sequences) != NULL &&
             cJSON_AddNumberToObject(o, "positions", (double)d->n_positions) != NULL &&
             report_json_number(o, "kld_mean", d->kld_mean) &&
             report_json_number(o, "kld_mean_se", d->kld_mean_se);
    cJSON *ci = ok ? cJSON_AddArrayToObject(o, "kld_ci") : NULL;
    ok = ci != NULL;
    const double lohi[2] = {d->kld_ci_low, d->kld_ci_high};
    for (int k = 0; ok && k < 2; k++)
        ok = cJSON_AddItemToArray(ci, isnan(lohi[k]) ? cJSON_CreateNull()
                                                     : cJSON_CreateNumber(lohi[k]));
    cJSON *pct = ok ? cJSON_AddObjectToObject(o, "kld_percentiles") : NULL;
    ok = pct != NULL;
    for (int k = 0; ok && k < DIV_N_PERCENTILES; k++)
        ok = report_json_number(pct, PCT_KEY[k], d->kld_percentile[k]);
    ok = ok && report_json_number(o, "same_top", d->same_top) &&
         report_json_number(o, "same_top_se", d->same_top_se) &&
         report_json_number(o, "mean_dp", d->mean_dp) && report_json_number(o, "rms_dp", d->rms_dp) &&
         report_json_number(o, "mean_dlogprob", d->mean_dlogprob) &&
         report_json_number(o, "ppl_ratio", d->ppl_ratio) &&
         report_json_number(o, "tail_mass_median", d->tail_mass_median);
    cJSON *fd = ok ? cJSON_AddObjectToObject(o, "first_top_diff") : NULL;
    if (fd == NULL) return pg_fail(err, PG_ERR_NOMEM, "divergence results: out of memory");
    pg_status st = PG_OK;
    for (size_t q = 0; st == PG_OK && q < r->n_seq; q++) {
        int64_t at = -1;
        st = first_top_diff(s, run_id, m->mode, DIV_ROLE_MODE, &r->seq[q], &at, err);
        if (st == PG_OK &&
            !cJSON_AddItemToObject(fd, r->seq[q].seq_id,
                                   at >= 0 ? cJSON_CreateNumber((double)at) : cJSON_CreateNull()))
            st = pg_fail(err, PG_ERR_NOMEM, "divergence results: out of memory");
    }
    return st;
}

pg_status divergence_results_write_json(pg_store *s, int64_t run_id, const char *path,
                                        pg_err *err)
{
    results r;
    pg_status st = results_read(s, run_id, &r, err);
    if (st != PG_OK) return st;
    cJSON *doc = cJSON_CreateObject(), *modes = NULL;
    int ok = doc != NULL && cJSON_AddStringToObject(doc, "format", DIVERGENCE_RESULTS_FORMAT) &&
             cJSON_AddNumberToObject(doc, "run", (double)run_id) &&
             cJSON_AddStringToObject(doc, "reference", r.sm[0].reference) &&
             cJSON_AddNumberToObject(doc, "top_k", (double)r.sm[0].top_k) &&
             (modes = cJSON_AddObjectToObject(doc, "modes")) != NULL;
    if (!ok) st = pg_fail(err, PG_ERR_NOMEM, "divergence results: out of memory");
    for (size_t i = 0; st == PG_OK && i < r.n_sm; i++) {
        if (&r.sm[i] == r.floor) continue;
        cJSON *o = cJSON_AddObjectToObject(modes, r.sm[i].mode);
        st = o != NULL ? mode_json(s, run_id, &r, &r.sm[i], o, err)
                       : pg_fail(err, PG_ERR_NOMEM, "divergence results: out of memory");
    }
    if (st == PG_OK && r.floor == NULL && !cJSON_AddNullToObject(doc, "noise_floor"))
        st = pg_fail(err, PG_ERR_NOMEM, "divergence results: out of memory");
    if (st == PG_OK && r.floor != NULL) {
        cJSON *f = cJSON_AddObjectToObject(doc, "noise_floor");
        if (f == NULL || !report_json_number(f, "kld_mean", r.floor->s.kld_mean) ||
            !report_json_number(f, "kld_mean_se", r.floor->s.kld_mean_se) ||
            !report_json_number(f, "same_top", r.floor->s.same_top))
            st = pg_fail(err, PG_ERR_NOMEM, "divergence results: out of memory");
    }
    char *text = st == PG_OK ? cJSON_Print(doc) : NULL;
    if (st == PG_OK && text == NULL)
        st = pg_fail(err, PG_ERR_NOMEM, "divergence results: out of memory");
    if (st == PG_OK)
        st = atomic_file_write(path, DIVERGENCE_RESULTS_FILE_MODE, write_text, text, err);
    free(text);
    cJSON_Delete(doc);
    results_free(&r);
    return st;
}
