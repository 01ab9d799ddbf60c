/* eval_results.c: an eval run's results JSON (see eval_results.h). */
#include "eval_results.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

#include "db/eval_store.h"
#include "atomic_file.h"
#include "diff.h"

/* Mode of the written file before the umask (as fopen would create it). */
#define EVAL_RESULTS_FILE_MODE 0666

/* A new object appended to array a; NULL (a unchanged) when out of memory. */
static cJSON *append_object(cJSON *a)
{
    cJSON *o = cJSON_CreateObject();
    if (o != NULL && !cJSON_AddItemToArray(a, o)) {
        cJSON_Delete(o);
        o = NULL;
    }
    return o;
}

/* The scores array of the stored rows; NULL when out of memory or a row's
 * pass_at_json is not JSON (err says which). */
static cJSON *scores_json(const eval_score_stored *r, size_t n, pg_err *err)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a != NULL && i < n; i++) {
        cJSON *o = append_object(a);
        if (o == NULL) {
            cJSON_Delete(a);
            a = NULL;
            break;
        }
        cJSON_AddStringToObject(o, "mode", r[i].mode);
        cJSON_AddStringToObject(o, "effort", r[i].effort);
        cJSON_AddNumberToObject(o, "n_problems", (double)r[i].n_problems);
        cJSON_AddNumberToObject(o, "k", (double)r[i].k);
        report_json_number(o, "accuracy", r[i].accuracy);
        report_json_number(o, "stderr", r[i].stderr_);
        report_json_number(o, "ci_low", r[i].ci_low);
        report_json_number(o, "ci_high", r[i].ci_high);
        cJSON_AddStringToObject(o, "ci_method", r[i].ci_method ? r[i].ci_method : "");
        cJSON *pass = cJSON_Parse(r[i].pass_at_json ? r[i].pass_at_json : "");
        if (pass == NULL) {
            pg_fail(err, PG_ERR_FORMAT, "eval results: the stored pass_at_json of %s/%s is not "
                                        "JSON", r[i].mode, r[i].effort);
            cJSON_Delete(a);
            return NULL;
        }
        cJSON_AddItemToObject(o, "pass_at", pass);
        cJSON_AddNumberToObject(o, "n_errors", (double)r[i].n_errors);
        cJSON_AddNumberToObject(o, "n_truncated", (double)r[i].n_truncated);
        cJSON_AddNumberToObject(o, "n_empty", (double)r[i].n_empty);
        cJSON_AddNumberToObject(o, "n_missing", (double)r[i].n_missing);
    }
    if (a == NULL) pg_fail(err, PG_ERR_NOMEM, "eval results: out of memory");
    return a;
}

/* The pairs array of the stored rows; NULL when out of memory. */
static cJSON *pairs_json(const eval_pair_stored *r, size_t n, pg_err *err)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a != NULL && i < n; i++) {
        cJSON *o = append_object(a);
        if (o == NULL) {
            cJSON_Delete(a);
            a = NULL;
            break;
        }
        cJSON_AddStringToObject(o, "effort", r[i].effort);
        cJSON_AddStringToObject(o, "mode_a", r[i].mode_a);
        cJSON_AddStringToObject(o, "mode_b", r[i].mode_b);
        cJSON_AddNumberToObject(o, "n_problems", (double)r[i].n_problems);
        report_json_number(o, "mean_diff", r[i].mean_diff);
        report_json_number(o, "stderr", r[i].stderr_);
        report_json_number(o, "ci_low", r[i].ci_low);
        report_json_number(o, "ci_high", r[i].ci_high);
        cJSON_AddNumberToObject(o, "wins", (double)r[i].wins);
        cJSON_AddNumberToObject(o, "losses", (double)r[i].losses);
        cJSON_AddNumberToObject(o, "ties", (double)r[i].ties);
        report_json_number(o, "sign_p", r[i].sign_p);
        report_json_number(o, "mde", r[i].mde);
    }
    if (a == NULL) pg_fail(err, PG_ERR_NOMEM, "eval results: out of memory");
    return a;
}

/* atomic_file_writer: the printed document plus a newline. */
static pg_status write_text(void *ctx, FILE *out, pg_err *err)
{
    (void)err;
    fputs(ctx, out);
    fputc('\n', out);
    return PG_OK;
}

pg_status eval_results_write_json(pg_store *s, int64_t run_id, const char *eval,
                                  const char *status, const char *config_json, const char *path,
                                  pg_err *err)
{
    eval_score_stored *sc = NULL;
    eval_pair_stored *pr = NULL;
    size_t n_sc = 0, n_pr = 0;
    pg_status st = eval_store_read_scores(s, run_id, eval, &sc, &n_sc, err);
    if (st == PG_OK) st = eval_store_read_pairs(s, run_id, eval, &pr, &n_pr, err);
    cJSON *doc = st == PG_OK ? cJSON_CreateObject() : NULL;
    if (st == PG_OK && doc == NULL) st = pg_fail(err, PG_ERR_NOMEM, "eval results: out of memory");
    if (st == PG_OK) {
        cJSON_AddStringToObject(doc, "format", EVAL_RESULTS_FORMAT);
        cJSON_AddNumberToObject(doc, "run_id", (double)run_id);
        cJSON_AddStringToObject(doc, "status", status);
        cJSON_AddStringToObject(doc, "eval", eval);
        cJSON *cfg = NULL;
        if (config_json != NULL && (cfg = cJSON_Parse(config_json)) == NULL)
            st = pg_fail(err, PG_ERR_FORMAT, "eval results: run %lld's config_json is not JSON",
                         (long long)run_id);
        else if (cfg != NULL) cJSON_AddItemToObject(doc, "config", cfg);
        else cJSON_AddNullToObject(doc, "config");
    }
    cJSON *a = st == PG_OK ? scores_json(sc, n_sc, err) : NULL;
    if (st == PG_OK && a == NULL) st = err != NULL ? err->code : PG_ERR_NOMEM;
    if (a != NULL) cJSON_AddItemToObject(doc, "scores", a);
    a = st == PG_OK ? pairs_json(pr, n_pr, err) : NULL;
    if (st == PG_OK && a == NULL) st = err != NULL ? err->code : PG_ERR_NOMEM;
    if (a != NULL) cJSON_AddItemToObject(doc, "pairs", a);
    char *text = st == PG_OK ? cJSON_Print(doc) : NULL;
    if (st == PG_OK && text == NULL) st = pg_fail(err, PG_ERR_NOMEM, "eval results: out of memory");
    if (st == PG_OK) st = atomic_file_write(path, EVAL_RESULTS_FILE_MODE, write_text, text, err);
    free(text);
    cJSON_Delete(doc);
    eval_store_scores_free(sc, n_sc);
    eval_store_pairs_free(pr, n_pr);
    return st;
}
