/* run_complete.c: the rows a run's config implies and those it lacks (see run_complete.h). */
#include "run_complete.h"

#include "db/divergence_store.h"
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

/* Adds name to the sorted array of distinct strings a (NULL a: no-op); 0 when out of memory. */
static int add_distinct(cJSON *a, const char *name)
{
    cJSON *at = NULL, *x;
    cJSON_ArrayForEach(x, a) {
        const int c = strcmp(x->valuestring, name);
        if (c == 0) return 1;
        if (c > 0) {
            at = x;
            break;
        }
    }
    cJSON *s = cJSON_CreateString(name);
    if (s == NULL) return 0;
    if (at == NULL) return cJSON_AddItemToArray(a, s);
    int i = 0;
    for (cJSON *y = a->child; y != at; y = y->next) i++;
    return cJSON_InsertItemInArray(a, i, s);
}

pg_status run_complete_add_eval_plan(cJSON *o, const eval_traces *t, pg_err *err)
{
    cJSON *plan = cJSON_AddObjectToObject(o, RUN_CONFIG_PLAN);
    int ok = plan != NULL && cJSON_AddNumberToObject(plan, RUN_CONFIG_PLAN_PROBLEMS, t->n) != NULL;
    const cJSON *modes = cJSON_GetObjectItemCaseSensitive(o, RUN_CONFIG_MODES);
    const cJSON *efforts = cJSON_GetObjectItemCaseSensitive(o, RUN_CONFIG_EFFORTS);
    const cJSON *samples = cJSON_GetObjectItemCaseSensitive(o, RUN_CONFIG_SAMPLES);
    if (ok && modes != NULL && efforts != NULL && cJSON_IsNumber(samples)) {
        /* Live: the command's grid. */
        ok = cJSON_AddItemToObject(plan, RUN_CONFIG_MODES, cJSON_Duplicate(modes, 1)) &&
             cJSON_AddItemToObject(plan, RUN_CONFIG_EFFORTS, cJSON_Duplicate(efforts, 1)) &&
             cJSON_AddNumberToObject(plan, RUN_CONFIG_SAMPLES, samples->valuedouble) != NULL;
    } else if (ok) {
        /* Replay: the grid of the recorded completions. */
        cJSON *m = cJSON_AddArrayToObject(plan, RUN_CONFIG_MODES);
        cJSON *e = cJSON_AddArrayToObject(plan, RUN_CONFIG_EFFORTS);
        int k = 0;
        ok = m != NULL && e != NULL;
        for (int p = 0; ok && p < t->n; p++)
            for (int j = 0; ok && j < t->problems[p].n_completions; j++) {
                const eval_completion *c = &t->problems[p].completions[j];
                ok = add_distinct(m, c->mode) && add_distinct(e, c->effort);
                if (c->sample + 1 > k) k = c->sample + 1;
            }
        ok = ok && cJSON_AddNumberToObject(plan, RUN_CONFIG_SAMPLES, k) != NULL;
    }
    return ok ? PG_OK : pg_fail(err, PG_ERR_NOMEM, "eval: out of memory");
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

/* The eval half of run_complete_check. */
static pg_status check_eval(pg_store *s, int64_t run_id, const cJSON *cfg, run_missing *out,
                            pg_err *err)
{
    const cJSON *eval = cJSON_GetObjectItemCaseSensitive(cfg, RUN_CONFIG_EVAL);
    const cJSON *plan = cJSON_GetObjectItemCaseSensitive(cfg, RUN_CONFIG_PLAN);
    const cJSON *modes = cJSON_GetObjectItemCaseSensitive(plan, RUN_CONFIG_MODES);
    const cJSON *efforts = cJSON_GetObjectItemCaseSensitive(plan, RUN_CONFIG_EFFORTS);
    const cJSON *owned = cJSON_GetObjectItemCaseSensitive(cfg, RUN_CONFIG_SHARD_PROBLEMS);
    int n_problems = 0, k = 0;
    if (!cJSON_IsString(eval) || !cJSON_IsArray(modes) || !cJSON_IsArray(efforts) ||
        !config_int(plan, RUN_CONFIG_PLAN_PROBLEMS, 0, &n_problems) || !config_int(plan, RUN_CONFIG_SAMPLES, 1, &k))
        return unverifiable(out, "plan (problems, modes, efforts, samples)");
    if (owned != NULL && !cJSON_IsArray(owned))
        return unverifiable(out, "readable shard_problems");
    const int n_owned = owned != NULL ? cJSON_GetArraySize(owned) : n_problems;
    out->n_expected = (int64_t)n_owned * cJSON_GetArraySize(modes) *
                      cJSON_GetArraySize(efforts) * k;
    int listed = 0;
    size_t n_stored = 0;
    pg_status st = PG_OK;
    const cJSON *m, *e;
    cJSON_ArrayForEach(m, modes) cJSON_ArrayForEach(e, efforts) {
        if (st != PG_OK) break;
        if (!cJSON_IsString(m) || !cJSON_IsString(e))
            return unverifiable(out, "plan with mode and effort names");
        eval_table t = {0};
        st = eval_store_load(s, run_id, eval->valuestring, m->valuestring, e->valuestring,
                             (size_t)k, &t, err);
        n_stored = t.n_problems;
        /* A whole run: every problem stored is its own; too few is said below. */
        const int n = owned != NULL ? n_owned : (int)t.n_problems;
        for (int i = 0; st == PG_OK && i < n; i++) {
            const cJSON *id = owned != NULL ? cJSON_GetArrayItem(owned, i) : NULL;
            const char *name = owned != NULL ? (cJSON_IsString(id) ? id->valuestring : "")
                                             : t.problem_ids[i];
            size_t r = (size_t)i;
            const int found = owned == NULL || find_problem(&t, name, &r);
            check_problem(&t, found ? &r : NULL, name, m->valuestring, e->valuestring, k, out,
                          &listed);
        }
        eval_table_free(&t);
    }
    /* A whole run's problems have no ids in its config: those short of the
     * plan are named by their number. */
    if (st == PG_OK && owned == NULL && (int64_t)n_stored < n_problems) {
        const int64_t gone = n_problems - (int64_t)n_stored;
        out->n_units += gone * cJSON_GetArraySize(modes) * cJSON_GetArraySize(efforts) * k;
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

/* A diverge run (harness/cmd_diverge.c's config: "reference", "modes",
 * "noise_floor"): every stored sequence scored by every mode (pass 0) and,
 * with the floor, by the reference again (pass 1); a unit is one (mode,
 * pass, sequence). A part of a sharded job ("shard_sequences": the ids it
 * owns) lacks each owned sequence it did not store; any other run that
 * stored no sequence lacks them all. */
static pg_status check_diverge(pg_store *s, int64_t run_id, const cJSON *cfg, run_missing *out,
                               pg_err *err)
{
    const cJSON *modes = cJSON_GetObjectItemCaseSensitive(cfg, RUN_CONFIG_MODES);
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(cfg, RUN_CONFIG_REFERENCE);
    const cJSON *floor_on = cJSON_GetObjectItemCaseSensitive(cfg, RUN_CONFIG_NOISE_FLOOR);
    if (!cJSON_IsArray(modes) || !cJSON_IsString(ref) || !cJSON_IsBool(floor_on))
        return unverifiable(out, "\"modes\", \"reference\" and \"noise_floor\"");
    div_sequence_stored *seqs = NULL;
    size_t n_seq = 0;
    pg_status st = divergence_store_read_sequences(s, run_id, &seqs, &n_seq, err);
    int listed = 0;
    const cJSON *owned = cJSON_GetObjectItemCaseSensitive(cfg, RUN_CONFIG_SHARD_SEQUENCES);
    for (const cJSON *o = cJSON_IsArray(owned) ? owned->child : NULL; st == PG_OK && o != NULL;
         o = o->next) {
        /* seqs come sorted by seq_id (SQLite's BINARY order: strcmp's). */
        const div_sequence_stored key = {.seq_id = cJSON_IsString(o) ? o->valuestring : NULL};
        const int found = key.seq_id != NULL &&
                          bsearch(&key, seqs, n_seq, sizeof *seqs, by_seq_id) != NULL;
        out->n_expected++;
        if (!found) {
            out->n_units++;
            list_unit(out, &listed, "owned sequence '%s' not stored",
                      cJSON_IsString(o) ? o->valuestring : "(not a string)");
        }
    }
    if (st == PG_OK && n_seq == 0 && !cJSON_IsArray(owned)) {
        out->n_units = out->n_expected = 1;
        list_unit(out, &listed, "no sequence stored (the run stopped before scoring)");
    }
    for (size_t i = 0; st == PG_OK && i < n_seq; i++) {
        for (const cJSON *m = modes->child; st == PG_OK && m != NULL; m = m->next) {
            if (!cJSON_IsString(m)) continue;
            const int passes = cJSON_IsTrue(floor_on) && strcmp(m->valuestring, ref->valuestring) == 0
                                   ? 2 : 1;
            for (int pass = 0; st == PG_OK && pass < passes; pass++) {
                int has = 0;
                st = divergence_store_has_scores(s, run_id, m->valuestring, pass, seqs[i].seq_id,
                                                 &has, err);
                out->n_expected++;
                if (st == PG_OK && !has) {
                    out->n_units++;
                    list_unit(out, &listed, "%s%s of sequence '%s'", m->valuestring,
                              pass ? " (noise floor)" : "", seqs[i].seq_id);
                }
            }
        }
    }
    divergence_store_sequences_free(seqs, n_seq);
    return st;
}

pg_status run_complete_check(pg_store *s, int64_t run_id, const char *kind,
                             const char *config_json, run_missing *out, pg_err *err)
{
    memset(out, 0, sizeof *out);
    cJSON *cfg = config_json != NULL ? cJSON_Parse(config_json) : NULL;
    pg_status st;
    if (!cJSON_IsObject(cfg)) st = unverifiable(out, "readable object");
    else if (kind != NULL && strcmp(kind, "eval") == 0) st = check_eval(s, run_id, cfg, out, err);
    else if (kind != NULL && strcmp(kind, "diverge") == 0)
        st = check_diverge(s, run_id, cfg, out, err);
    else st = check_sweep(s, run_id, cfg, out, err);
    cJSON_Delete(cfg);
    return st;
}

int run_complete_resume(const char *kind, int64_t run_id, const char *config_json,
                        const char *db, char *buf, size_t len)
{
    cJSON *cfg = config_json != NULL ? cJSON_Parse(config_json) : NULL;
    const cJSON *shard = cJSON_GetObjectItemCaseSensitive(cfg, "shard");
    const int merged = cJSON_IsObject(shard) && !cJSON_HasObjectItem(shard, "index");
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
