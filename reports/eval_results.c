/* eval_results.c: an eval run's results JSON (see eval_results.h). */
#include "eval_results.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

#include "db/eval_store.h"
#include "atomic_file.h"
#include "json_out.h"

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

/* Fills the JSON object o from row i of rows; PG_OK, or a failure in err. */
typedef pg_status (*row_json_fill)(cJSON *o, const void *rows, size_t i, pg_err *err);

/* An array of n objects, the i-th filled by fill from row i of rows; NULL
 * when out of memory or fill fails (err says which). */
static cJSON *rows_json(const void *rows, size_t n, row_json_fill fill, pg_err *err)
{
    cJSON *a = cJSON_CreateArray();
    if (a == NULL) pg_fail(err, PG_ERR_NOMEM, "eval results: out of memory");
    for (size_t i = 0; a != NULL && i < n; i++) {
        cJSON *o = append_object(a);
        const pg_status st = o == NULL ? pg_fail(err, PG_ERR_NOMEM, "eval results: out of memory")
                                       : fill(o, rows, i, err);
        if (st != PG_OK) {
            cJSON_Delete(a);
            a = NULL;
        }
    }
    return a;
}

/* A stored estimate's standard error and 95% interval into o. */
static void put_interval(cJSON *o, double stderr_, double ci_low, double ci_high)
{
    report_json_number(o, "stderr", stderr_);
    report_json_number(o, "ci_low", ci_low);
    report_json_number(o, "ci_high", ci_high);
}

/* row_json_fill over eval_score_stored rows: PG_ERR_FORMAT when the row's
 * pass_at_json is not JSON. */
static pg_status score_json(cJSON *o, const void *rows, size_t i, pg_err *err)
{
    const eval_score_stored *r = (const eval_score_stored *)rows + i;
    cJSON_AddStringToObject(o, "mode", r->mode);
    cJSON_AddStringToObject(o, "effort", r->effort);
    cJSON_AddNumberToObject(o, "n_problems", (double)r->n_problems);
    cJSON_AddNumberToObject(o, "k", (double)r->k);
    report_json_number(o, "accuracy", r->accuracy);
    put_interval(o, r->stderr_, r->ci_low, r->ci_high);
    cJSON_AddStringToObject(o, "ci_method", r->ci_method ? r->ci_method : "");
    cJSON *pass = cJSON_Parse(r->pass_at_json ? r->pass_at_json : "");
    if (pass == NULL)
        return pg_fail(err, PG_ERR_FORMAT, "eval results: the stored pass_at_json of %s/%s is "
                                           "not JSON", r->mode, r->effort);
    cJSON_AddItemToObject(o, "pass_at", pass);
    cJSON_AddNumberToObject(o, "n_errors", (double)r->n_errors);
    cJSON_AddNumberToObject(o, "n_truncated", (double)r->n_truncated);
    cJSON_AddNumberToObject(o, "n_empty", (double)r->n_empty);
    cJSON_AddNumberToObject(o, "n_missing", (double)r->n_missing);
    return PG_OK;
}

/* row_json_fill over eval_pair_stored rows; never fails. */
static pg_status pair_json(cJSON *o, const void *rows, size_t i, pg_err *err)
{
    (void)err;
    const eval_pair_stored *r = (const eval_pair_stored *)rows + i;
    cJSON_AddStringToObject(o, "effort", r->effort);
    cJSON_AddStringToObject(o, "mode_a", r->mode_a);
    cJSON_AddStringToObject(o, "mode_b", r->mode_b);
    cJSON_AddNumberToObject(o, "n_problems", (double)r->n_problems);
    report_json_number(o, "mean_diff", r->mean_diff);
    put_interval(o, r->stderr_, r->ci_low, r->ci_high);
    cJSON_AddNumberToObject(o, "wins", (double)r->wins);
    cJSON_AddNumberToObject(o, "losses", (double)r->losses);
    cJSON_AddNumberToObject(o, "ties", (double)r->ties);
    report_json_number(o, "sign_p", r->sign_p);
    report_json_number(o, "mde", r->mde);
    return PG_OK;
}

/* row_json_fill over eval_server_count rows; never fails. */
static pg_status server_json(cJSON *o, const void *rows, size_t i, pg_err *err)
{
    (void)err;
    const eval_server_count *r = (const eval_server_count *)rows + i;
    cJSON_AddStringToObject(o, "mode", r->mode);
    cJSON_AddStringToObject(o, "server", r->server);
    cJSON_AddNumberToObject(o, "answered", (double)r->answered);
    cJSON_AddNumberToObject(o, "errors", (double)r->errors);
    return PG_OK;
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
    eval_server_count *sv = NULL;
    size_t n_sc = 0, n_pr = 0, n_sv = 0;
    pg_status st = eval_store_read_scores(s, run_id, eval, &sc, &n_sc, err);
    if (st == PG_OK) st = eval_store_read_pairs(s, run_id, eval, &pr, &n_pr, err);
    if (st == PG_OK) st = eval_store_read_server_counts(s, run_id, eval, &sv, &n_sv, err);
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
    cJSON *a = st == PG_OK ? rows_json(sc, n_sc, score_json, err) : NULL;
    if (st == PG_OK && a == NULL) st = err != NULL ? err->code : PG_ERR_NOMEM;
    if (a != NULL) cJSON_AddItemToObject(doc, "scores", a);
    a = st == PG_OK ? rows_json(pr, n_pr, pair_json, err) : NULL;
    if (st == PG_OK && a == NULL) st = err != NULL ? err->code : PG_ERR_NOMEM;
    if (a != NULL) cJSON_AddItemToObject(doc, "pairs", a);
    a = st == PG_OK ? rows_json(sv, n_sv, server_json, err) : NULL;
    if (st == PG_OK && a == NULL) st = err != NULL ? err->code : PG_ERR_NOMEM;
    if (a != NULL) cJSON_AddItemToObject(doc, "servers", a);
    char *text = st == PG_OK ? cJSON_Print(doc) : NULL;
    if (st == PG_OK && text == NULL) st = pg_fail(err, PG_ERR_NOMEM, "eval results: out of memory");
    if (st == PG_OK) st = atomic_file_write(path, EVAL_RESULTS_FILE_MODE, write_text, text, err);
    free(text);
    cJSON_Delete(doc);
    eval_store_scores_free(sc, n_sc);
    eval_store_pairs_free(pr, n_pr);
    eval_store_server_counts_free(sv, n_sv);
    return st;
}
