/* diff_divergence.c: the divergence rows of `precgate diff` of two diverge runs (see diff.h). */
#include "diff.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/variant.h"
#include "db/divergence_store.h"
#include "json_out.h"
#include "term.h"

/* Columns of the divergence table. */
#define DIV_MODE_WIDTH 26
#define DIV_KLD_WIDTH 12
#define DIV_RATIO_WIDTH 9
#define DIV_TOP_WIDTH 10
#define DIV_PPL_WIDTH 9
#define DIV_CELL_MAX 256

/* Whether summary x is the noise floor's. */
static int floor_row(const div_summary_stored *x)
{
    return strcmp(x->role, div_role_name(DIV_ROLE_FLOOR)) == 0;
}

/* Orders the rows: modes by name (variant order), then the noise floor. */
static int div_order(const void *p, const void *q)
{
    const diff_div *x = p, *y = q;
    if (x->floor != y->floor) return x->floor - y->floor;
    return variant_name_cmp(x->mode, y->mode);
}

/* Appends the row of (a, b) (either NULL: one side only) to r->div; 0 when out of memory. */
static int add_row(diff_result *r, const div_summary_stored *a, const div_summary_stored *b)
{
    const div_summary_stored *any = a != NULL ? a : b;
    diff_div *d = &r->div[r->n_div];
    *d = (diff_div){.floor = floor_row(any),
                    .presence = a == NULL ? DIFF_ONLY_B : b == NULL ? DIFF_ONLY_A : DIFF_BOTH,
                    .kld_a = NAN, .kld_b = NAN, .kld_delta = NAN, .kld_ratio = NAN,
                    .same_top_a = NAN, .same_top_b = NAN, .same_top_delta = NAN,
                    .ppl_a = NAN, .ppl_b = NAN};
    if ((d->mode = strdup(any->mode)) == NULL) return 0;
    if (a != NULL) {
        d->kld_a = a->s.kld_mean;
        d->same_top_a = a->s.same_top;
        d->ppl_a = a->s.ppl_ratio;
    }
    if (b != NULL) {
        d->kld_b = b->s.kld_mean;
        d->same_top_b = b->s.same_top;
        d->ppl_b = b->s.ppl_ratio;
    }
    d->kld_delta = d->kld_b - d->kld_a;
    d->kld_ratio = d->kld_b / d->kld_a;
    d->same_top_delta = d->same_top_b - d->same_top_a;
    r->n_div++;
    return 1;
}

pg_status diff_divergence_match(pg_store *s, diff_result *r, pg_err *err)
{
    div_summary_stored *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    pg_status st = divergence_store_read_summaries(s, r->run_a.id, &a, &na, err);
    if (st == PG_OK) st = divergence_store_read_summaries(s, r->run_b.id, &b, &nb, err);
    int ok = st == PG_OK;
    if (ok && na + nb > 0) ok = (r->div = calloc(na + nb, sizeof *r->div)) != NULL;
    if (ok && na > 0) {
        ok = (r->reference_a = strdup(a[0].reference)) != NULL;
        r->top_k_a = a[0].top_k;
    }
    if (ok && nb > 0) {
        ok = (r->reference_b = strdup(b[0].reference)) != NULL;
        r->top_k_b = b[0].top_k;
    }
    for (size_t i = 0; ok && i < na; i++) {
        const div_summary_stored *hit = NULL;
        for (size_t j = 0; j < nb && hit == NULL; j++)
            if (strcmp(a[i].mode, b[j].mode) == 0 && strcmp(a[i].role, b[j].role) == 0) hit = &b[j];
        ok = add_row(r, &a[i], hit);
    }
    for (size_t j = 0; ok && j < nb; j++) {
        int in_a = 0;
        for (size_t i = 0; i < na && !in_a; i++)
            in_a = strcmp(a[i].mode, b[j].mode) == 0 && strcmp(a[i].role, b[j].role) == 0;
        if (!in_a) ok = add_row(r, NULL, &b[j]);
    }
    if (ok && r->n_div > 1) qsort(r->div, r->n_div, sizeof *r->div, div_order);
    if (st == PG_OK && !ok) st = pg_fail(err, PG_ERR_NOMEM, "diff: out of memory");
    divergence_store_summaries_free(a, na);
    divergence_store_summaries_free(b, nb);
    return st;
}

void diff_divergence_free(diff_result *r)
{
    for (size_t i = 0; i < r->n_div; i++) free(r->div[i].mode);
    free(r->div);
    free(r->reference_a);
    free(r->reference_b);
    r->div = NULL;
    r->n_div = 0;
    r->reference_a = r->reference_b = NULL;
}

/* Formats v with fmt into buf ("-" when absent, "nan" for a NaN). */
static void fmt_cell(char *buf, size_t len, const char *fmt, double v, int present)
{
    if (!present) snprintf(buf, len, "-");
    else if (isnan(v)) snprintf(buf, len, "nan");
    else snprintf(buf, len, fmt, v);
}

/* The name a row is shown under: the mode, or "noise floor (MODE again)". */
static void row_name(char *buf, size_t len, const diff_div *d)
{
    char raw[DIV_CELL_MAX];
    if (d->floor) snprintf(raw, sizeof raw, "noise floor (%s again)", d->mode);
    else snprintf(raw, sizeof raw, "%s", d->mode);
    term_fit(buf, len, raw, DIV_MODE_WIDTH, 0);
}

/* One row of the table. */
static void print_row(FILE *out, const diff_div *d)
{
    const int has_a = d->presence != DIFF_ONLY_B, has_b = d->presence != DIFF_ONLY_A;
    const int both = d->presence == DIFF_BOTH;
    char name[DIV_CELL_MAX], ka[DIV_CELL_MAX], kb[DIV_CELL_MAX], kd[DIV_CELL_MAX],
        kr[DIV_CELL_MAX], ta[DIV_CELL_MAX], tb[DIV_CELL_MAX], td[DIV_CELL_MAX], pa[DIV_CELL_MAX],
        pb[DIV_CELL_MAX];
    row_name(name, sizeof name, d);
    fmt_cell(ka, sizeof ka, "%.4e", d->kld_a, has_a);
    fmt_cell(kb, sizeof kb, "%.4e", d->kld_b, has_b);
    fmt_cell(kr, sizeof kr, "%.4g", d->kld_ratio, both);
    fmt_cell(ta, sizeof ta, "%.4f", d->same_top_a, has_a);
    fmt_cell(tb, sizeof tb, "%.4f", d->same_top_b, has_b);
    fmt_cell(td, sizeof td, "%+.4f", d->same_top_delta, both);
    fmt_cell(pa, sizeof pa, "%.5f", d->ppl_a, has_a);
    fmt_cell(pb, sizeof pb, "%.5f", d->ppl_b, has_b);
    if (both) fmt_cell(kd, sizeof kd, "%+.3e", d->kld_delta, 1);
    else snprintf(kd, sizeof kd, "only in %c", has_a ? 'A' : 'B');
    term_cell(out, NULL, -DIV_MODE_WIDTH, name);
    term_cell(out, NULL, DIV_KLD_WIDTH, ka);
    term_cell(out, NULL, DIV_KLD_WIDTH, kb);
    term_cell(out, NULL, DIV_KLD_WIDTH, kd);
    term_cell(out, NULL, DIV_RATIO_WIDTH, kr);
    term_cell(out, NULL, DIV_TOP_WIDTH, ta);
    term_cell(out, NULL, DIV_TOP_WIDTH, tb);
    term_cell(out, NULL, DIV_TOP_WIDTH, td);
    term_cell(out, NULL, DIV_PPL_WIDTH, pa);
    term_cell(out, NULL, DIV_PPL_WIDTH, pb);
    fputc('\n', out);
}

/* The line under the table of a mode in both runs: its paired change, or why not. */
static void print_pairing(FILE *out, const diff_div *d)
{
    char name[DIV_CELL_MAX];
    term_fit(name, sizeof name, d->mode, 0, 0);
    if (!d->paired) {
        char why[DIV_CELL_MAX * 2];
        term_fit(why, sizeof why, d->unpaired, 0, 0);
        fprintf(out, "  %s: unpaired: %s\n", name, why);
        return;
    }
    const diff_div_paired *p = &d->pair;
    char v[6][DIV_CELL_MAX];
    fmt_cell(v[0], sizeof v[0], "%+.4e", p->kld_diff_low, 1);
    fmt_cell(v[1], sizeof v[1], "%+.4e", p->kld_diff_high, 1);
    fmt_cell(v[2], sizeof v[2], "%.3e", p->kld_diff_se, 1);
    fmt_cell(v[3], sizeof v[3], "%+.4f", p->same_top_diff_low, 1);
    fmt_cell(v[4], sizeof v[4], "%+.4f", p->same_top_diff_high, 1);
    fmt_cell(v[5], sizeof v[5], "%+.4f", p->same_top_diff, 1);
    fprintf(out, "  %s: paired over %zu sequences (%zu positions): mean KLD B-A %+.4e, 95%% "
            "interval [%s, %s], SE %s; same top B-A %s [%s, %s]\n", name, p->n_sequences,
            p->n_positions, p->kld_diff, v[0], v[1], v[2], v[5], v[3], v[4]);
}

void diff_divergence_print(const diff_result *r, FILE *out)
{
    if (!r->divergence) return;
    if (r->n_div == 0) {
        fprintf(out, "\nno divergence summaries in run %lld or run %lld (not compared: their "
                "scoring did not finish)\n", (long long)r->run_a.id, (long long)r->run_b.id);
        return;
    }
    fputs("\ndivergence: mean KLD of each mode against its run's reference (a top-K lower "
          "bound), same top-1 and PPL ratio; the noise floor is the reference scored again\n",
          out);
    if (r->reference_a != NULL && r->reference_b != NULL &&
        (strcmp(r->reference_a, r->reference_b) != 0 || r->top_k_a != r->top_k_b)) {
        char ra[DIV_CELL_MAX], rb[DIV_CELL_MAX];
        term_fit(ra, sizeof ra, r->reference_a, 0, 0);
        term_fit(rb, sizeof rb, r->reference_b, 0, 0);
        fprintf(out, "note: A is against %s at K = %" PRId64 ", B against %s at K = %" PRId64
                ": not the same measure\n", ra, r->top_k_a, rb, r->top_k_b);
    }
    term_cell(out, NULL, -DIV_MODE_WIDTH, "mode");
    term_cell(out, NULL, DIV_KLD_WIDTH, "KLD A");
    term_cell(out, NULL, DIV_KLD_WIDTH, "KLD B");
    term_cell(out, NULL, DIV_KLD_WIDTH, "B-A");
    term_cell(out, NULL, DIV_RATIO_WIDTH, "B/A");
    term_cell(out, NULL, DIV_TOP_WIDTH, "top A");
    term_cell(out, NULL, DIV_TOP_WIDTH, "top B");
    term_cell(out, NULL, DIV_TOP_WIDTH, "top B-A");
    term_cell(out, NULL, DIV_PPL_WIDTH, "PPL A");
    term_cell(out, NULL, DIV_PPL_WIDTH, "PPL B");
    fputc('\n', out);
    for (size_t i = 0; i < r->n_div; i++) print_row(out, &r->div[i]);
    for (size_t i = 0; i < r->n_div; i++)
        if (r->div[i].presence == DIFF_BOTH && !r->div[i].floor) print_pairing(out, &r->div[i]);
}

/* The JSON object of row d; NULL when out of memory. */
static cJSON *div_json(const diff_result *r, const diff_div *d)
{
    cJSON *o = report_json_row("divergence", r->run_a.id, r->run_b.id);
    const int has_a = d->presence != DIFF_ONLY_B, has_b = d->presence != DIFF_ONLY_A;
    const int both = d->presence == DIFF_BOTH, pr = d->paired;
    const diff_div_paired *p = &d->pair;
    const int pairable = both && !d->floor;
    const struct {
        const char *key;
        double v;
        int present;
    } nums[] = {
        {"kld_mean_a", d->kld_a, has_a},
        {"kld_mean_b", d->kld_b, has_b},
        {"kld_delta", d->kld_delta, both},
        {"kld_ratio", d->kld_ratio, both},
        {"same_top_a", d->same_top_a, has_a},
        {"same_top_b", d->same_top_b, has_b},
        {"same_top_delta", d->same_top_delta, both},
        {"ppl_ratio_a", d->ppl_a, has_a},
        {"ppl_ratio_b", d->ppl_b, has_b},
        {"paired_sequences", (double)p->n_sequences, pr},
        {"paired_positions", (double)p->n_positions, pr},
        {"paired_kld_delta", p->kld_diff, pr},
        {"paired_kld_delta_se", p->kld_diff_se, pr},
        {"paired_kld_ci_low", p->kld_diff_low, pr},
        {"paired_kld_ci_high", p->kld_diff_high, pr},
        {"paired_same_top_delta", p->same_top_diff, pr},
        {"paired_same_top_delta_se", p->same_top_diff_se, pr},
        {"paired_same_top_ci_low", p->same_top_diff_low, pr},
        {"paired_same_top_ci_high", p->same_top_diff_high, pr},
    };
    const div_role role = d->floor ? DIV_ROLE_FLOOR : DIV_ROLE_MODE;
    int ok = o != NULL && report_json_string(o, "mode", d->mode) &&
             report_json_string(o, "role", div_role_name(role)) &&
             report_json_string(o, "presence", diff_presence_name(d->presence)) &&
             cJSON_AddBoolToObject(o, "paired", pr) != NULL &&
             report_json_string(o, "unpaired", pairable && !pr ? d->unpaired : NULL);
    for (size_t i = 0; ok && i < sizeof nums / sizeof nums[0]; i++)
        ok = report_json_side_number(o, nums[i].key, nums[i].v, nums[i].present);
    if (ok) return o;
    cJSON_Delete(o);
    return NULL;
}

int diff_divergence_json(const diff_result *r, struct cJSON *arr)
{
    for (size_t i = 0; i < r->n_div; i++) {
        cJSON *o = div_json(r, &r->div[i]);
        if (o == NULL) return 0;
        if (!cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            return 0;
        }
    }
    return 1;
}
