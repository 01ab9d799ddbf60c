/* run_complete.c: the rows a run's config implies and those it lacks (see run_complete.h). */
#include "run_complete.h"

#include "db/divergence_store.h"
#include "db/diverge_config.h"
#include "db/run_config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/eval_store.h"

/* The count of table t (run_config_layer_tables) in r. */
static int64_t *table_count(store_layer_rows *r, size_t t)
{
    return (int64_t *)((char *)r + run_config_layer_tables[t].offset);
}

pg_status run_complete_layer_rows(const capture *cap, const sweep_options *so,
                                  store_layer_rows **out, pg_err *err)
{
    *out = calloc((size_t)cap->n_layers, sizeof **out);
    if (*out == NULL) return pg_fail(err, PG_ERR_NOMEM, "run: out of memory");
    for (int l = 0; l < cap->n_layers; l++) sweep_layer_rows(cap, l, so, &(*out)[l]);
    return PG_OK;
}

pg_status run_complete_add_layer_rows(cJSON *o, const capture *cap, const sweep_options *so,
                                      pg_err *err)
{
    store_layer_rows *rows = NULL;
    pg_status st = run_complete_layer_rows(cap, so, &rows, err);
    if (st == PG_OK) st = run_config_add_layer_rows(o, rows, cap->n_layers, err);
    free(rows);
    return st;
}

pg_status run_complete_eval_plan(eval_run_config *c, const eval_traces *t, const char ***names,
                                 pg_err *err)
{
    *names = NULL;
    c->plan_known = 1;
    c->plan_problems = t->n;
    if (!c->replay) {
        /* Live: the command's grid. */
        c->plan_modes = c->modes;
        c->n_plan_modes = c->n_modes;
        c->plan_efforts = c->efforts;
        c->n_plan_efforts = c->n_efforts;
        c->plan_samples = c->samples;
        return PG_OK;
    }
    /* Replay: the grid of the recorded completions (the writer keeps each
     * name once). */
    size_t n = 0;
    for (int p = 0; p < t->n; p++) n += (size_t)t->problems[p].n_completions;
    if ((*names = calloc(2 * n + 1, sizeof **names)) == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "eval: out of memory");
    int k = 0;
    size_t i = 0;
    for (int p = 0; p < t->n; p++)
        for (int j = 0; j < t->problems[p].n_completions; j++, i++) {
            const eval_completion *e = &t->problems[p].completions[j];
            (*names)[i] = e->mode;
            (*names)[n + i] = e->effort;
            if (e->sample + 1 > k) k = e->sample + 1;
        }
    c->plan_modes = *names;
    c->n_plan_modes = (int)n;
    c->plan_efforts = *names + n;
    c->n_plan_efforts = (int)n;
    c->plan_samples = k;
    return PG_OK;
}

/* Appends one missing unit's text to out's list (RUN_COMPLETE_LIST_UNITS at
 * most, then "..."); listed counts the units listed so far. */
__attribute__((format(printf, 3, 4)))
static void list_unit(run_missing *out, int *listed, const char *fmt, ...)
{
    const size_t at = strlen(out->list);
    if (*listed < RUN_COMPLETE_LIST_UNITS) {
        if (at > 0) snprintf(out->list + at, sizeof out->list - at, "; ");
        const size_t from = strlen(out->list);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(out->list + from, sizeof out->list - from, fmt, ap);
        va_end(ap);
    } else if (*listed == RUN_COMPLETE_LIST_UNITS) {
        snprintf(out->list + at, sizeof out->list - at, "; ...");
    }
    (*listed)++;
}

/* Says why a run cannot be verified (what its config lacks). */
static pg_status unverifiable(run_missing *out, const char *what)
{
    out->unverifiable = 1;
    snprintf(out->list, sizeof out->list, "its config_json records no %s (made by a precgate "
             "before runs recorded the rows they imply, or edited), so its completeness cannot "
             "be verified", what);
    return PG_OK;
}

/* A number member of o that is a whole number >= min, into *v; 0 when not. */
static int config_int(const cJSON *o, const char *key, int min, int *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x) || x->valuedouble < min || x->valuedouble > 1e9 ||
        x->valuedouble != (double)(int)x->valuedouble)
        return 0;
    *v = (int)x->valuedouble;
    return 1;
}

/* The sweep half of run_complete_check. */
static pg_status check_sweep(pg_store *s, int64_t run_id, const cJSON *cfg, run_missing *out,
                             pg_err *err)
{
    const cJSON *cap_name = cJSON_GetObjectItemCaseSensitive(cfg, RUN_CONFIG_CAPTURE);
    const cJSON *lr = cJSON_GetObjectItemCaseSensitive(cfg, RUN_CONFIG_LAYER_ROWS);
    const cJSON *owned = cJSON_GetObjectItemCaseSensitive(cfg, RUN_CONFIG_SHARD_LAYERS);
    int n_layers = 0;
    if (!cJSON_IsString(cap_name) || !config_int(cfg, RUN_CONFIG_LAYERS, 1, &n_layers))
        return unverifiable(out, "capture and layers");
    const cJSON *want[RUN_CONFIG_LAYER_TABLES];
    for (size_t t = 0; t < RUN_CONFIG_LAYER_TABLES; t++) {
        want[t] = cJSON_GetObjectItemCaseSensitive(lr, run_config_layer_tables[t].table);
        if (want[t] == NULL && run_config_layer_tables[t].since_schema > 0)
            continue;  /* a config written before the table existed */
        if (!cJSON_IsArray(want[t]) || cJSON_GetArraySize(want[t]) != n_layers)
            return unverifiable(out, "layer_rows for each of its layers");
    }
    if (owned != NULL && !cJSON_IsArray(owned))
        return unverifiable(out, "readable shard_layers");
    store_layer_rows *rows = calloc((size_t)n_layers, sizeof *rows);
    if (rows == NULL) return pg_fail(err, PG_ERR_NOMEM, "out of memory");
    pg_status st = store_sweep_layer_rows(s, run_id, cap_name->valuestring, n_layers, rows, err);
    const int n_owned = owned != NULL ? cJSON_GetArraySize(owned) : n_layers;
    int listed = 0;
    for (int i = 0; st == PG_OK && i < n_owned; i++) {
        int l = i;
        if (owned != NULL) {
            const cJSON *x = cJSON_GetArrayItem(owned, i);
            if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble >= n_layers) {
                free(rows);
                return unverifiable(out, "shard_layers within its layers");
            }
            l = (int)x->valuedouble;
        }
        out->n_expected++;
        char detail[RUN_COMPLETE_LIST_MAX] = "";
        for (size_t t = 0; t < RUN_CONFIG_LAYER_TABLES; t++) {
            if (want[t] == NULL) continue;
            const int64_t w = (int64_t)cJSON_GetArrayItem(want[t], l)->valuedouble;
            const int64_t have = *table_count(&rows[l], t);
            const size_t at = strlen(detail);
            if (have != w)
                snprintf(detail + at, sizeof detail - at, "%s%s %lld of %lld", at ? ", " : "",
                         run_config_layer_tables[t].table, (long long)have, (long long)w);
        }
        if (detail[0] == '\0') continue;
        out->n_units++;
        list_unit(out, &listed, "layer %d (%s)", l, detail);
    }
    free(rows);
    return st;
}

/* Whether id is among t's problem ids; its row into *row. */
static int find_problem(const eval_table *t, const char *id, size_t *row)
{
    for (size_t i = 0; i < t->n_problems; i++)
        if (strcmp(t->problem_ids[i], id) == 0) {
            *row = i;
            return 1;
        }
    return 0;
}

/* Lists the samples of problem row r (NULL row: none stored) of one
 * (mode, effort) table t that the plan's k samples lack. */
static void check_problem(const eval_table *t, const size_t *r, const char *id,
                          const char *mode, const char *effort, int k, run_missing *out,
                          int *listed)
{
    char which[RUN_COMPLETE_LIST_MAX] = "";
    int n = 0;
    for (int j = 0; j < k; j++) {
        if (r != NULL && t->cells[*r * t->k + (size_t)j].status != EVAL_SAMPLE_MISSING) continue;
        const size_t at = strlen(which);
        snprintf(which + at, sizeof which - at, "%s%d", n ? ", " : "", j);
        n++;
    }
    out->n_units += n;
    if (n == k) list_unit(out, listed, "problem %s (%s, %s): no sample", id, mode, effort);
    else if (n > 0)
        list_unit(out, listed, "problem %s (%s, %s): sample%s %s of %d", id, mode, effort,
                  n > 1 ? "s" : "", which, k);
}

/* The eval half of run_complete_check, over run_id's config c. */
static pg_status check_eval(pg_store *s, int64_t run_id, const eval_run_config *c,
                            run_missing *out, pg_err *err)
{
    if (c->eval == NULL || c->n_plan_modes < 0 || c->n_plan_efforts < 0 ||
        !c->plan_problems_known || c->plan_problems < 0 || !c->plan_samples_known ||
        c->plan_samples < 1)
        return unverifiable(out, "plan (problems, modes, efforts, samples)");
    if (c->shard_problems_known && c->n_shard_problems < 0)
        return unverifiable(out, "readable shard_problems");
    const int owned = c->shard_problems_known;
    const int n_problems = c->plan_problems, k = c->plan_samples;
    const int n_owned = owned ? c->n_shard_problems : n_problems;
    out->n_expected = (int64_t)n_owned * c->n_plan_modes * c->n_plan_efforts * k;
    int listed = 0;
    size_t n_stored = 0;
    pg_status st = PG_OK;
    for (int mi = 0; mi < c->n_plan_modes; mi++)
        for (int ei = 0; ei < c->n_plan_efforts; ei++) {
            if (st != PG_OK) break;
            const char *m = c->plan_modes[mi], *e = c->plan_efforts[ei];
            if (m == NULL || e == NULL)
                return unverifiable(out, "plan with mode and effort names");
            eval_table t = {0};
            st = eval_store_load(s, run_id, c->eval, m, e, (size_t)k, &t, err);
            n_stored = t.n_problems;
            /* A whole run: every problem stored is its own; too few is said below. */
            const int n = owned ? n_owned : (int)t.n_problems;
            for (int i = 0; st == PG_OK && i < n; i++) {
                const char *id = owned ? c->shard_problems[i] : NULL;
                const char *name = owned ? (id != NULL ? id : "") : t.problem_ids[i];
                size_t r = (size_t)i;
                const int found = !owned || find_problem(&t, name, &r);
                check_problem(&t, found ? &r : NULL, name, m, e, k, out, &listed);
            }
            eval_table_free(&t);
        }
    /* A whole run's problems have no ids in its config: those short of the
     * plan are named by their number. */
    if (st == PG_OK && !owned && (int64_t)n_stored < n_problems) {
        const int64_t gone = n_problems - (int64_t)n_stored;
        out->n_units += gone * c->n_plan_modes * c->n_plan_efforts * k;
        list_unit(out, &listed, "%lld of the plan's %d problems %s no sample",
                  (long long)gone, n_problems, gone == 1 ? "holds" : "hold");
    }
    return st;
}

/* bsearch order of stored sequences: by seq_id. */
static int by_seq_id(const void *a, const void *b)
{
    return strcmp(((const div_sequence_stored *)a)->seq_id,
                  ((const div_sequence_stored *)b)->seq_id);
}

/* A diverge run (db/diverge_config.h: its reference, modes and noise
 * floor): every stored sequence scored by every mode (pass 0) and, with
 * the floor, by the reference again (pass 1); a unit is one (mode, pass,
 * sequence). A part of a sharded job (shard_sequences: the ids it owns)
 * lacks each owned sequence it did not store; any other run that stored no
 * sequence lacks them all. */
static pg_status check_diverge(pg_store *s, int64_t run_id, const diverge_run_config *c,
                               run_missing *out, pg_err *err)
{
    if (c->n_modes < 0 || c->reference == NULL || !c->noise_floor_known)
        return unverifiable(out, "\"modes\", \"reference\" and \"noise_floor\"");
    div_sequence_stored *seqs = NULL;
    size_t n_seq = 0;
    pg_status st = divergence_store_read_sequences(s, run_id, &seqs, &n_seq, err);
    int listed = 0;
    for (int i = 0; st == PG_OK && i < c->n_shard_sequences; i++) {
        /* seqs come sorted by seq_id (SQLite's BINARY order: strcmp's). */
        const div_sequence_stored key = {.seq_id = (char *)c->shard_sequences[i]};  /* a key only */
        const int found = key.seq_id != NULL &&
                          bsearch(&key, seqs, n_seq, sizeof *seqs, by_seq_id) != NULL;
        out->n_expected++;
        if (!found) {
            out->n_units++;
            list_unit(out, &listed, "owned sequence '%s' not stored",
                      key.seq_id != NULL ? key.seq_id : "(not a string)");
        }
    }
    if (st == PG_OK && n_seq == 0 && c->n_shard_sequences < 0) {
        out->n_units = out->n_expected = 1;
        list_unit(out, &listed, "no sequence stored (the run stopped before scoring)");
    }
    for (size_t i = 0; st == PG_OK && i < n_seq; i++) {
        for (int mi = 0; st == PG_OK && mi < c->n_modes; mi++) {
            const char *m = c->modes[mi];
            if (m == NULL) continue;
            const int passes = c->noise_floor && strcmp(m, c->reference) == 0 ? 2 : 1;
            for (int pass = 0; st == PG_OK && pass < passes; pass++) {
                int has = 0;
                st = divergence_store_has_scores(s, run_id, m, pass, seqs[i].seq_id, &has, err);
                out->n_expected++;
                if (st == PG_OK && !has) {
                    out->n_units++;
                    list_unit(out, &listed, "%s%s of sequence '%s'", m,
                              pass ? " (noise floor)" : "", seqs[i].seq_id);
                }
            }
        }
    }
    divergence_store_sequences_free(seqs, n_seq);
    return st;
}

/* What a config that reads as no JSON object (readers' PG_ERR_USAGE)
 * makes of the check: unverifiable; any other failure is the caller's. */
static pg_status unreadable(run_missing *out, pg_status read, const pg_err *why, pg_err *err)
{
    if (read == PG_ERR_USAGE) return unverifiable(out, "readable object");
    *err = *why;
    return read;
}

pg_status run_complete_check(pg_store *s, int64_t run_id, const char *kind,
                             const char *config_json, run_missing *out, pg_err *err)
{
    memset(out, 0, sizeof *out);
    pg_err why = {0};
    pg_status st;
    if (kind != NULL && strcmp(kind, "eval") == 0) {
        eval_config_doc d;
        st = eval_config_read(config_json, &d, &why);
        st = st == PG_OK ? check_eval(s, run_id, &d.c, out, err) : unreadable(out, st, &why, err);
        eval_config_doc_free(&d);
        return st;
    }
    if (kind != NULL && strcmp(kind, "diverge") == 0) {
        diverge_config_doc d;
        st = diverge_config_read(config_json, &d, &why);
        st = st == PG_OK ? check_diverge(s, run_id, &d.c, out, err)
                         : unreadable(out, st, &why, err);
        diverge_config_doc_free(&d);
        return st;
    }
    cJSON *cfg = config_json != NULL ? cJSON_Parse(config_json) : NULL;
    st = cJSON_IsObject(cfg) ? check_sweep(s, run_id, cfg, out, err)
                             : unverifiable(out, "readable object");
    cJSON_Delete(cfg);
    return st;
}

int run_complete_resume(const char *kind, int64_t run_id, const char *config_json,
                        const char *db, char *buf, size_t len)
{
    cJSON *cfg = config_json != NULL ? cJSON_Parse(config_json) : NULL;
    const cJSON *shard = cJSON_GetObjectItemCaseSensitive(cfg, RUN_CONFIG_SHARD);
    const int merged = cJSON_IsObject(shard) && !cJSON_HasObjectItem(shard, RUN_CONFIG_SHARD_INDEX);
    cJSON_Delete(cfg);
    if (merged) {
        /* A merged run (cmd_merge.c) is no part: its parts are what resume. */
        snprintf(buf, len, "run %lld of %s is a merge of shards: resume the incomplete part "
                 "in its shard database and merge the parts again into a fresh database",
                 (long long)run_id, db);
        return 0;
    }
    if (kind != NULL && strcmp(kind, "diverge") == 0) {
        snprintf(buf, len, "precgate diverge --resume %lld --db %s, with its --endpoint and "
                 "--sequences", (long long)run_id, db);
        return 1;
    }
    if (kind != NULL && strcmp(kind, "eval") == 0) {
        snprintf(buf, len, "precgate eval --resume %lld --db %s, with its options: "
                 "--traces, and --replay or --endpoint", (long long)run_id, db);
        return 1;
    }
    cfg = config_json != NULL ? cJSON_Parse(config_json) : NULL;
    const cJSON *cap_name = cJSON_GetObjectItemCaseSensitive(cfg, RUN_CONFIG_CAPTURE);
    snprintf(buf, len, "precgate run --resume %lld --capture %s --db %s", (long long)run_id,
             cJSON_IsString(cap_name) ? cap_name->valuestring : "CAPTURE", db);
    cJSON_Delete(cfg);
    return 1;
}
