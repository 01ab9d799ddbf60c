/* gate_lifecycle.c: a gate's lifecycle (gate_lifecycle.h): the use case behind `precgate gate`. */
#include "gate_lifecycle.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/diagnosis_store.h"
#include "db/divergence_store.h"
#include "db/eval_store.h"
#include "db/gate_store.h"
#include "db/eval_config.h"
#include "db/run_config.h"
#include "db/store.h"
#include "evals/score.h"
#include "harness/gate_baseline.h"
#include "harness/regress.h"
#include "harness/run_complete.h"
#include "reports/junit.h"
#include "reports/term.h"

/* PG_ERR_USAGE unless run is complete, saying what it is instead. */
static pg_status require_complete(const gate_run *r, pg_err *err)
{
    if (strcmp(r->status, "complete") == 0) return PG_OK;
    if (strcmp(r->status, "running") == 0)
        return pg_fail(err, PG_ERR_USAGE, "gate: run %" PRId64 " is still running (or stopped "
                       "before it finished); only a complete run can be gated", r->id);
    if (strcmp(r->status, "failed") == 0)
        return pg_fail(err, PG_ERR_USAGE, "gate: run %" PRId64 " failed (%s); only a complete "
                       "run can be gated", r->id, r->error != NULL ? r->error : "no message");
    if (strcmp(r->status, "incomplete") == 0)
        return pg_fail(err, PG_ERR_USAGE, "gate: run %" PRId64 " is incomplete (samples failed "
                       "after every retry; precgate eval --resume %" PRId64 " retries them); only "
                       "a complete run can be gated", r->id, r->id);
    return pg_fail(err, PG_ERR_USAGE, "gate: run %" PRId64 " has status '%s'; only a complete "
                   "run can be gated", r->id, r->status);
}

/* The runs.kind of `precgate diverge` (harness/cmd_diverge.c). */
#define GATE_KIND_DIVERGE "diverge"

/* What the gate of a run of kind checks without a baseline run. */
static const char *without_baseline(const char *kind)
{
    if (strcmp(kind, GATE_KIND_DIVERGE) == 0)
        return "each mode is judged by the gate config's divergence budgets only (a mode "
               "without one is an error)";
    return "the layer scope checks NaN/Inf and configured bounds only, mode_pair records each "
           "mode's gap to bf16 (inconclusive unless --config bounds it), and the eval "
           "comparison with a baseline is skipped";
}

/* Says why there is no automatic baseline: runs of the kind and label
 * exist, but none with run's content (the newest differs as d says). */
static void print_no_content_match(FILE *out, const gate_run *run, int64_t newest,
                                   const gate_content_diff *d, const char *label,
                                   const char *no_label)
{
    term_printf(out, "baseline: none (no older complete %s run labelled '%s'%s with the same content: ",
           run->kind, label, no_label);
    const char *suffix = strrchr(d->field, '_');
    const int is_digest = suffix != NULL && strcmp(suffix, "_digest") == 0;
    if (is_digest && strcmp(d->other_value, GATE_CONTENT_NONE) == 0)
        term_printf(out, "the newest, run %" PRId64 ", has no %s in its config (recorded before content "
               "digests), so it cannot be an automatic baseline for run %" PRId64 " (%s %s)",
               newest, d->field, run->id, d->field, d->run_value);
    else
        term_printf(out, "the newest, run %" PRId64 ", has %s %s, run %" PRId64 " has %s", newest, d->field,
               d->other_value, run->id, d->run_value);
    term_printf(out, "); %s\n", without_baseline(run->kind));
}

/* Picks the baseline (explicit or automatic, gate_baseline.h) into
 * *base_id (-1: none) and prints which and why. An explicit baseline whose
 * content differs from run's is kept in *base_id with the difference in
 * *mismatch (field NULL when the contents match), for an error verdict. */
static pg_status choose_baseline(pg_store *s, const gate_request *a, const gate_run *run,
                                 int64_t *base_id, gate_content_diff *mismatch, pg_err *err)
{
    const char *label = run->label != NULL ? run->label : "";
    const char *no_label = run->label != NULL ? "" : " (no label)";
    gate_baseline_choice c;
    const pg_status st = gate_baseline_choose(s, run, a->baseline, &c, err);
    *base_id = c.base_id;
    memset(mismatch, 0, sizeof *mismatch);
    if (st != PG_OK) return st;
    if (!c.automatic) {
        *mismatch = c.differs;
        term_printf(a->out, "baseline: run %" PRId64 " (--baseline %s%s)%s\n", c.base_id,
                    a->baseline, c.by_name ? ", by name" : "",
                    c.differs.field != NULL ? ": its content differs, nothing is compared" : "");
    } else if (c.base_id < 0 && c.differs.field != NULL) {
        print_no_content_match(a->out, run, c.newest, &c.differs, label, no_label);
    } else if (c.base_id < 0) {
        term_printf(a->out, "baseline: none (no older complete %s run labelled '%s'%s); %s\n",
                    run->kind, label, no_label, without_baseline(run->kind));
    } else if (c.passed) {
        term_printf(a->out, "baseline: run %" PRId64 " (automatic: the newest older complete %s run "
               "labelled '%s'%s that passed its gate)\n", c.base_id, run->kind, label, no_label);
    } else {
        term_printf(a->out, "baseline: run %" PRId64 " (automatic: no older %s run labelled '%s'%s "
               "passed a gate, so the newest older complete one; it is not known good)\n",
               c.base_id, run->kind, label, no_label);
    }
    return PG_OK;
}

/* Upper-case verdict for the terminal. */
static const char *loud(gate_verdict v)
{
    switch (v) {
    case GATE_VERDICT_REGRESSION: return "REGRESSION";
    case GATE_VERDICT_ERROR: return "ERROR";
    case GATE_VERDICT_IMPROVEMENT: return "improvement";
    case GATE_VERDICT_NO_CHANGE: return "no change";
    case GATE_VERDICT_INCONCLUSIVE: return "inconclusive";
    case GATE_VERDICT_SKIPPED: return "skipped";
    default: return "pass";
    }
}


/* Prints regressions, then errors, then the eval verdicts (few, and each states
 * its MDE; a "samples" check that passed is only counted), then the counts
 * per scope. */
static void print_summary(FILE *out, const gate_flags *f)
{
    const gate_verdict order[] = {GATE_VERDICT_REGRESSION, GATE_VERDICT_ERROR};
    for (size_t o = 0; o < sizeof order / sizeof order[0]; o++)
        for (size_t i = 0; i < f->n; i++)
            if (f->v[i].verdict == order[o])
                term_printf(out, "%-10s %-9s %s\n", loud(f->v[i].verdict),
                       gate_scope_name(f->v[i].scope), f->v[i].message);
    for (size_t i = 0; i < f->n; i++)
        if (f->v[i].scope == GATE_SCOPE_EVAL && f->v[i].verdict != GATE_VERDICT_REGRESSION &&
            f->v[i].verdict != GATE_VERDICT_ERROR &&
            !(f->v[i].verdict == GATE_VERDICT_PASS &&
              strcmp(f->v[i].metric, GATE_METRIC_SAMPLES) == 0))
            term_printf(out, "%-10s %-9s %s\n", loud(f->v[i].verdict), "eval", f->v[i].message);
    for (size_t i = 0; i < f->n; i++)
        if (f->v[i].scope == GATE_SCOPE_DIVERGENCE && f->v[i].verdict != GATE_VERDICT_REGRESSION &&
            f->v[i].verdict != GATE_VERDICT_ERROR)
            term_printf(out, "%-10s %-9s %s\n", loud(f->v[i].verdict), "divergence",
                        f->v[i].message);
    /* The diagnosis's inconclusive verdicts say why no bug was named; the
     * skipped ones what was not computed. */
    for (size_t i = 0; i < f->n; i++)
        if ((f->v[i].verdict == GATE_VERDICT_INCONCLUSIVE &&
             strcmp(f->v[i].metric, GATE_METRIC_SCALE_BUG) == 0) ||
            f->v[i].verdict == GATE_VERDICT_SKIPPED)
            term_printf(out, "%-10s %-9s %s\n", loud(f->v[i].verdict), "layer", f->v[i].message);
    for (int s = 0; s < GATE_SCOPE_COUNT; s++) {
        size_t c[GATE_VERDICT_COUNT] = {0}, total = 0;
        for (size_t i = 0; i < f->n; i++)
            if ((int)f->v[i].scope == s) {
                c[f->v[i].verdict]++;
                total++;
            }
        term_printf(out, "%-10s", gate_scope_name((gate_scope)s));
        if (total == 0) term_printf(out, " nothing compared");
        const char *sep = " ";
        for (int v = 0; v < GATE_VERDICT_COUNT; v++)
            if (c[v] > 0) {
                term_printf(out, "%s%zu %s", sep, c[v], gate_verdict_name((gate_verdict)v));
                sep = ", ";
            }
        fputc('\n', out);
    }
}

/* Appends the scale_bug flags of run_id's ext_diagnosis rows (regress.h)
 * to flags; rows are the run's, for its ext:NAME variants. */
static pg_status gate_diagnosis(pg_store *store, int64_t run_id, const gate_rows *rows,
                                gate_flags *flags, pg_err *err)
{
    diagnosis_row *dr = NULL;
    size_t n = 0, n_spans = 0;
    diag_span *spans = NULL;
    pg_status st = diagnosis_store_load(store, run_id, &dr, &n, err);
    if (st == PG_OK) st = diag_spans(dr, n, &spans, &n_spans, err);
    if (st == PG_OK)
        st = regress_diagnosis(spans, n_spans, rows->layers, rows->n_layers, flags, err);
    diag_spans_free(spans, n_spans);
    diagnosis_rows_free(dr, n);
    return st;
}

/* Appends the skipped flags of run_id's unsupported cells (regress.h). */
static pg_status gate_unsupported(pg_store *store, int64_t run_id, gate_flags *flags, pg_err *err)
{
    unsupported_summary *u = NULL;
    size_t n = 0;
    pg_status st = report_store_unsupported(store, run_id, &u, &n, err);
    if (st == PG_OK) st = regress_unsupported(u, n, flags, err);
    unsupported_summaries_free(u, n);
    return st;
}

/* Appends the "complete" error flag (regress_incomplete) when run lacks
 * rows its config implies, or its config cannot say (run_complete.h). */
static pg_status gate_completeness(pg_store *store, const char *db_path, const gate_run *run,
                                   gate_flags *flags, pg_err *err)
{
    store_run_state rs = {0};
    run_missing miss;
    pg_status st = store_run_read(store, run->id, &rs, err);
    if (st == PG_OK) st = run_complete_check(store, run->id, run->kind, rs.config_json, &miss, err);
    if (st == PG_OK && (miss.unverifiable || miss.n_units > 0)) {
        const int is_eval = strcmp(run->kind, "eval") == 0;
        const int is_diverge = strcmp(run->kind, GATE_KIND_DIVERGE) == 0;
        char cmd[RUN_COMPLETE_RESUME_MAX], remedy[RUN_COMPLETE_RESUME_MAX + 96];
        const int resumes = run_complete_resume(run->kind, run->id, rs.config_json, db_path,
                                                cmd, sizeof cmd);
        snprintf(remedy, sizeof remedy, "%s%s, or %s again",
                 !resumes ? "" : miss.unverifiable ? "records it: " : "resume it: ", cmd,
                 is_eval ? "run the eval" : is_diverge ? "run diverge" : "sweep the capture");
        st = regress_incomplete(is_eval ? GATE_SCOPE_EVAL
                                : is_diverge ? GATE_SCOPE_DIVERGENCE
                                             : GATE_SCOPE_LAYER,
                                run->id, miss.unverifiable, miss.n_units, miss.n_expected,
                                is_eval ? "samples" : is_diverge ? "scorings" : "layers", miss.list,
                                remedy, flags, err);
    }
    store_run_state_free(&rs);
    return st;
}

/* Longest problem id a reason quotes. */
#define GATE_ID_QUOTE_MAX 40

/* Eval run run_id's stored config into *doc (zeroed first; free with
 * eval_config_doc_free). A config that is missing or no JSON object reads
 * as every field unknown, not as an error; PG_ERR_NOMEM and store errors
 * are. */
static pg_status gate_eval_config(pg_store *store, int64_t run_id, eval_config_doc *doc,
                                  pg_err *err)
{
    store_run_state rs = {0};
    memset(doc, 0, sizeof *doc);
    pg_status st = store_run_read(store, run_id, &rs, err);
    pg_err read_err = {0};
    if (st == PG_OK && rs.config_json != NULL &&
        eval_config_read(rs.config_json, doc, &read_err) == PG_ERR_NOMEM)
        st = pg_fail(err, PG_ERR_NOMEM, "gate: %s", read_err.msg);
    store_run_state_free(&rs);
    return st;
}

/* 1 when run_id's config records a traces digest (a string), else 0. */
static pg_status has_traces_digest(pg_store *store, int64_t run_id, int *has, pg_err *err)
{
    eval_config_doc doc;
    const pg_status st = gate_eval_config(store, run_id, &doc, err);
    *has = doc.c.traces_digest != NULL;
    eval_config_doc_free(&doc);
    return st;
}

/* Compares the problems of tables t (run run_id) and b (baseline base_id):
 * 1 when they are the same problem ids in the same order, else 0 with why
 * in buf. */
static int same_problems(const eval_table *t, const eval_table *b, int64_t base_id, char *buf,
                         size_t len)
{
    if (t->n_problems != b->n_problems) {
        snprintf(buf, len, "this run stored samples of %zu problems, baseline run %" PRId64
                 " of %zu", t->n_problems, base_id, b->n_problems);
        return 0;
    }
    for (size_t i = 0; i < t->n_problems; i++) {
        const char *x = t->problem_ids[i], *y = b->problem_ids[i];
        if (x == NULL || y == NULL || strcmp(x, y) != 0) {
            snprintf(buf, len, "their problems differ: problem %zu is '%.*s' in this run, "
                     "'%.*s' in baseline run %" PRId64, i + 1, GATE_ID_QUOTE_MAX,
                     x != NULL ? x : "", GATE_ID_QUOTE_MAX, y != NULL ? y : "", base_id);
            return 0;
        }
    }
    return 1;
}

/* The problem-level comparison (regress_base_pair; regress.h says when it
 * is paired) of every score of run run_id that base_id scored too, from
 * both runs' samples, into *out (malloc'd, *n entries, keys borrowed from
 * rows; free() it, also after a failure). PG_ERR_NOMEM; the store's errors. */
static pg_status gate_base_pairs(pg_store *store, int64_t run_id, int64_t base_id,
                                 const gate_rows *rows, const gate_rows *base,
                                 regress_base_pair **out, size_t *n, pg_err *err)
{
    *out = NULL;
    *n = 0;
    if (rows->n_scores == 0 || base->n_scores == 0) return PG_OK;
    regress_base_pair *bp = calloc(rows->n_scores, sizeof *bp);
    if (bp == NULL) return pg_fail(err, PG_ERR_NOMEM, "gate: out of memory for eval pairs");
    *out = bp;
    int run_digest = 0, base_digest = 0;
    pg_status st = has_traces_digest(store, run_id, &run_digest, err);
    if (st == PG_OK) st = has_traces_digest(store, base_id, &base_digest, err);
    for (size_t i = 0; st == PG_OK && i < rows->n_scores; i++) {
        const eval_score_stored *x = &rows->scores[i];
        int in_base = 0;
        for (size_t j = 0; j < base->n_scores && !in_base; j++)
            in_base = strcmp(base->scores[j].eval, x->eval) == 0 &&
                      strcmp(base->scores[j].mode, x->mode) == 0 &&
                      strcmp(base->scores[j].effort, x->effort) == 0;
        if (!in_base) continue;
        regress_base_pair *p = &bp[(*n)++];
        p->eval = x->eval;
        p->mode = x->mode;
        p->effort = x->effort;
        if (!run_digest || !base_digest) {
            /* Same ids need not be the same problems without the content digest. */
            snprintf(p->unpaired, sizeof p->unpaired, "%s %" PRId64 "'s config records no %s "
                     "(recorded before content digests), so the same problem ids need not be "
                     "the same problems", !run_digest ? "run" : "baseline run",
                     !run_digest ? run_id : base_id, RUN_CONFIG_TRACES_DIGEST);
            continue;
        }
        eval_table t = {0}, b = {0};
        st = eval_store_load(store, run_id, x->eval, x->mode, x->effort, 0, &t, err);
        if (st == PG_OK)
            st = eval_store_load(store, base_id, x->eval, x->mode, x->effort, 0, &b, err);
        if (st == PG_OK && same_problems(&t, &b, base_id, p->unpaired, sizeof p->unpaired)) {
            st = eval_pair_compute(&t, &b, &p->pair, err);
            p->paired = st == PG_OK;
        }
        eval_table_free(&t);
        eval_table_free(&b);
    }
    return st;
}

/* Longest list of one mode's endpoint URLs a message quotes. */
#define GATE_SERVED_MAX 256

/* Appends the "identical_to_B" flags (regress_identical_modes) of run_id's
 * pairs of modes that answered alike, naming where the samples came from
 * as its config records it: the replayed traces, or each mode's endpoints. */
static pg_status gate_identical(pg_store *store, int64_t run_id, const gate_config *cfg,
                                gate_flags *flags, pg_err *err)
{
    eval_mode_agreement *rows = NULL;
    size_t n = 0;
    pg_status st = eval_store_read_mode_agreement(store, run_id, NULL, &rows, &n, err);
    eval_config_doc doc = {0};
    if (st == PG_OK && n > 0) st = gate_eval_config(store, run_id, &doc, err);
    const eval_run_config *ec = &doc.c;
    const char *replayed = NULL;
    if (ec->source_known && ec->replay)
        replayed = ec->traces != NULL ? ec->traces : "(path not recorded)";
    const size_t n_eps = ec->n_endpoints > 0 ? (size_t)ec->n_endpoints : 0;
    regress_mode_source *src = n_eps > 0 ? calloc(n_eps, sizeof *src) : NULL;
    char (*served)[GATE_SERVED_MAX] = n_eps > 0 ? calloc(n_eps, sizeof *served) : NULL;
    if (st == PG_OK && n_eps > 0 && (src == NULL || served == NULL))
        st = pg_fail(err, PG_ERR_NOMEM, "gate: out of memory for the modes' endpoints");
    /* One source per stored mode: its URLs, which the reader lists in a
     * row (they share the stored key's string), joined by '+'. */
    size_t n_src = 0, len = 0;
    for (size_t i = 0; st == PG_OK && i < n_eps; i++) {
        const eval_config_pair *e = &ec->endpoints[i];
        if (n_src == 0 || src[n_src - 1].mode != e->mode) {
            src[n_src++].mode = e->mode;
            len = 0;
        }
        if (e->value == NULL || len >= GATE_SERVED_MAX) continue;
        const int w = snprintf(served[n_src - 1] + len, GATE_SERVED_MAX - len, "%s%s",
                               len > 0 ? "+" : "", e->value);
        len += w > 0 ? (size_t)w : 0;
    }
    for (size_t i = 0; i < n_src; i++) src[i].served = served[i][0] != '\0' ? served[i] : NULL;
    if (st == PG_OK) st = regress_identical_modes(rows, n, replayed, src, n_src, cfg, flags, err);
    free(served);
    free(src);
    eval_config_doc_free(&doc);
    eval_store_mode_agreement_free(rows, n);
    return st;
}

/* Appends the divergence-scope flags of diverge run run_id: its summaries,
 * and with baseline run base_id >= 0 each mode paired with it over the
 * same sequences (diverge_pair_runs). */
static pg_status gate_divergence(pg_store *store, int64_t run_id, int64_t base_id,
                                 const gate_config *cfg, gate_flags *flags, pg_err *err)
{
    div_summary_stored *sm = NULL;
    size_t n = 0;
    pg_status st = divergence_store_read_summaries(store, run_id, &sm, &n, err);
    regress_div_pair *pairs = NULL;
    size_t n_pairs = 0;
    if (st == PG_OK && base_id >= 0 && n > 0) {
        pairs = calloc(n, sizeof *pairs);
        if (pairs == NULL) st = pg_fail(err, PG_ERR_NOMEM, "gate: out of memory");
    }
    for (size_t i = 0; st == PG_OK && pairs != NULL && i < n; i++) {
        if (strcmp(sm[i].role, div_role_name(DIV_ROLE_MODE)) != 0) continue;
        regress_div_pair *p = &pairs[n_pairs++];
        p->mode = sm[i].mode;
        st = diverge_pair_runs(store, run_id, base_id, sm[i].mode, &p->p, p->unpaired, err);
    }
    if (st == PG_OK) st = regress_divergence(sm, n, pairs, n_pairs, base_id, cfg, flags, err);
    free(pairs);
    divergence_store_summaries_free(sm, n);
    return st;
}

/* Loads run's rows (and base_id's, when >= 0) into *rows and *base and
 * appends every scope's verdicts to flags. */
static pg_status gate_compare(pg_store *store, const gate_run *run, int64_t base_id,
                              const gate_config *cfg, gate_rows *rows, gate_rows *base,
                              gate_flags *flags, pg_err *err)
{
    if (strcmp(run->kind, GATE_KIND_DIVERGE) == 0)
        return gate_divergence(store, run->id, base_id, cfg, flags, err);
    pg_status st = gate_store_load(store, run->id, rows, err);
    if (st == PG_OK && base_id >= 0) st = gate_store_load(store, base_id, base, err);
    /* Without a baseline run, base stays empty and base_id -1 (regress.h). */
    if (st == PG_OK)
        st = regress_layers(rows->layers, rows->n_layers, base->layers, base->n_layers, base_id,
                            cfg, flags, err);
    if (st == PG_OK)
        st = regress_mode_pairs(rows->layers, rows->n_layers, base->layers, base->n_layers,
                                base_id, cfg, flags, err);
    if (st == PG_OK) st = gate_diagnosis(store, run->id, rows, flags, err);
    if (st == PG_OK) st = gate_unsupported(store, run->id, flags, err);
    regress_base_pair *bp = NULL;
    size_t n_bp = 0;
    if (st == PG_OK && base_id >= 0)
        st = gate_base_pairs(store, run->id, base_id, rows, base, &bp, &n_bp, err);
    if (st == PG_OK)
        st = regress_evals(rows->pairs, rows->n_pairs, rows->scores, rows->n_scores,
                           base_id >= 0 ? base->scores : NULL, base_id >= 0 ? base->n_scores : 0,
                           bp, n_bp, base_id, cfg, flags, err);
    if (st == PG_OK && rows->n_scores > 0) st = gate_identical(store, run->id, cfg, flags, err);
    free(bp);
    return st;
}

/* What a PASS without a baseline run checked, for the terminal and the
 * JUnit file of a run of kind (regress.h: what each scope does without one). */
static const char *pass_without_baseline(const char *kind)
{
    if (strcmp(kind, "eval") == 0)
        return "PASS without a baseline: nothing was compared against an earlier run; only "
               "each mode against bf16 in the same run and the degenerate-eval checks were made "
               "(--require-baseline makes this an error)";
    if (strcmp(kind, GATE_KIND_DIVERGE) == 0)
        return "PASS without a baseline: nothing was compared against an earlier run; each "
               "mode met its divergence budgets in this run (--require-baseline makes this an "
               "error)";
    return "PASS without a baseline: nothing was compared against an earlier run; only NaN/Inf, "
           "rel_l2 >= 1, the scale diagnosis and configured bounds were checked "
           "(--require-baseline makes this an error)";
}

pg_status gate_lifecycle_run(pg_store *store, const char *db_path, const gate_request *a,
                             gate_result *res, pg_err *err)
{
    *res = (gate_result){.exit_status = GATE_EXIT_ERROR, .base_id = -1};
    gate_run run = {0};
    pg_status st = gate_store_run(store, a->run, &run, err);
    if (st == PG_OK) st = require_complete(&run, err);
    if (st == PG_OK) {
        term_printf(a->out, "gate run %" PRId64 " (%s, label %s%s%s) in %s, thresholds: %s\n", run.id,
               run.kind, run.label ? "'" : "", run.label ? run.label : "none",
               run.label ? "'" : "", db_path, a->config != NULL ? a->config : "defaults");
        fflush(a->out);
    }
    int64_t base_id = -1;
    gate_content_diff mismatch = {0};
    const int is_diverge = run.kind != NULL && strcmp(run.kind, GATE_KIND_DIVERGE) == 0;
    if (st == PG_OK) st = choose_baseline(store, a, &run, &base_id, &mismatch, err);
    if (st == PG_OK && base_id >= 0 && mismatch.field == NULL) {
        /* A sweep of the same capture name recorded again (new activations or
         * scales) is compared, and said so: that is how a scale regression
         * of a serving stack shows. */
        static const char *const data_field[] = {GATE_DATA_FIELD};
        gate_content_diff data = {0};
        st = gate_store_content_diff(store, run.id, base_id, data_field, 1, &data, err);
        if (st == PG_OK && data.field != NULL)
            term_printf(a->out, "note: baseline run %" PRId64 " swept other capture content (%s %s, run %"
                   PRId64 " has %s): the same layers are compared on other recorded data or "
                   "scales\n", base_id, data.field, data.other_value, run.id, data.run_value);
    }

    gate_rows rows = {0}, base = {0};
    gate_flags flags = {0};
    const gate_scope base_scope = run.kind != NULL && strcmp(run.kind, "eval") == 0
                                      ? GATE_SCOPE_EVAL
                                  : is_diverge ? GATE_SCOPE_DIVERGENCE
                                               : GATE_SCOPE_LAYER;
    /* For CI: a first run's PASS compares nothing with an earlier run. */
    if (st == PG_OK && base_id < 0 && a->require_baseline)
        st = regress_no_baseline(base_scope, run.kind, run.id, &flags, err);
    if (st == PG_OK && mismatch.field != NULL) {
        /* Different traces, source or --limit (a comparison would be of other
         * problems) or a sweep's other scale policy (of another
         * quantization): one error verdict instead. */
        st = regress_content_mismatch(base_scope, mismatch.field, mismatch.run_value, mismatch.other_value,
                                      run.id, base_id, a->baseline, &flags, err);
    } else if (st == PG_OK) {
        st = gate_compare(store, &run, base_id, a->cfg, &rows, &base, &flags, err);
    }
    if (st == PG_OK) st = gate_completeness(store, db_path, &run, &flags, err);
    /* A read-only database (cli_with_store said so) keeps its flags: the
     * verdicts are printed and decide the exit status, but are not stored. */
    const int store_flags = store_access_mode(store) == STORE_READ_WRITE;
    if (st == PG_OK && store_flags) st = gate_store_put_flags(store, run.id, base_id, &flags, err);
    const int rc = regress_exit_status(&flags);
    const char *unbaselined = st == PG_OK && rc == GATE_EXIT_PASS && base_id < 0
                                  ? pass_without_baseline(run.kind) : NULL;
    if (st == PG_OK && a->junit != NULL)
        st = junit_write_skipped(a->junit, run.id, base_id, &flags, base_scope,
                                 "baseline comparison", unbaselined, err);

    if (st == PG_OK) {
        print_summary(a->out, &flags);
        size_t c[GATE_VERDICT_COUNT];
        regress_count(&flags, c);
        char skipped[64] = "";
        if (c[GATE_VERDICT_SKIPPED] > 0)
            snprintf(skipped, sizeof skipped, ", %zu skipped (not computed)",
                     c[GATE_VERDICT_SKIPPED]);
        term_printf(a->out, "gate run %" PRId64 ": %s (%zu regression%s, %zu error%s%s; %zu flags %s%s%s)\n",
               run.id, rc == GATE_EXIT_PASS ? "PASS" : rc == GATE_EXIT_REGRESSION ? "REGRESSION"
                                                                                  : "ERROR",
               c[GATE_VERDICT_REGRESSION], c[GATE_VERDICT_REGRESSION] == 1 ? "" : "s", c[GATE_VERDICT_ERROR],
               c[GATE_VERDICT_ERROR] == 1 ? "" : "s", skipped, flags.n,
               store_flags ? "stored" : "not stored: the database is read-only",
               a->junit ? ", JUnit: " : "",
               a->junit ? a->junit : "");
        if (flags.n == 0)
            term_printf(a->out, "gate run %" PRId64 ": nothing was compared (no baseline, no mode pair, no "
                   "eval pair); a later gate will not take it as a baseline that passed\n", run.id);
        if (unbaselined != NULL) term_printf(a->out, "gate run %" PRId64 ": %s\n", run.id, unbaselined);
        res->exit_status = rc;
        res->n_flags = flags.n;
    }
    res->base_id = base_id;
    gate_flags_free(&flags);
    gate_rows_free(&rows);
    gate_rows_free(&base);
    gate_run_free(&run);
    return st;
}

