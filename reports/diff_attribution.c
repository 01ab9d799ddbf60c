/* diff_attribution.c: the attribution rows of `precgate diff` (see diff.h). */
#include "diff.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "db/attribution_store.h"
#include "json_out.h"
#include "term.h"

/* Columns of the attribution table. */
#define ATTR_VARIANT_WIDTH 26
#define ATTR_TENSOR_WIDTH 6
#define ATTR_VALUE_WIDTH 13
#define ATTR_RATIO_WIDTH 9
#define ATTR_CELL_MAX 64

/* Whether row x of A and y of B are one comparison under r and req. */
static int rows_match(const diff_result *r, const attribution_row *x, const attribution_row *y)
{
    if (x->layer != y->layer || x->tensor != y->tensor) return 0;
    if (!r->captures_mapped && strcmp(x->capture, y->capture) != 0) return 0;
    if (r->modes)
        return strcmp(x->variant, r->variant_a) == 0 && strcmp(y->variant, r->variant_b) == 0;
    return strcmp(x->variant, y->variant) == 0;
}

pg_status diff_attribution_match(pg_store *s, const diff_request *req, diff_result *r,
                                 pg_err *err)
{
    attribution_rows a = {0}, b = {0};
    pg_status st = attribution_store_load(s, req->run_a, &a, err);
    if (st == PG_OK) st = attribution_store_load(s, req->run_b, &b, err);
    if (st == PG_OK && a.n > 0 && b.n > 0 &&
        (r->attribution = calloc(a.n, sizeof *r->attribution)) == NULL)
        st = pg_fail(err, PG_ERR_NOMEM, "diff: out of memory");
    /* Both sides are in (capture, layer, variant, tensor) order, but a modes
     * diff or mapped captures match across that order: each A row looks its
     * partner up (a run holds a few hundred rows). */
    for (size_t i = 0; st == PG_OK && b.n > 0 && i < a.n; i++) {
        const attribution_row *x = &a.rows[i], *y = NULL;
        for (size_t j = 0; y == NULL && j < b.n; j++)
            if (rows_match(r, x, &b.rows[j])) y = &b.rows[j];
        if (y == NULL) continue;
        diff_attribution *d = &r->attribution[r->n_attribution++];
        *d = (diff_attribution){.layer = x->layer, .tensor = x->tensor, .a = x->rel_l2,
                                .b = y->rel_l2, .delta = y->rel_l2 - x->rel_l2,
                                .ratio = y->rel_l2 / x->rel_l2};
        d->capture = strdup(x->capture);
        d->variant_a = strdup(x->variant);
        d->variant_b = strdup(y->variant);
        if (d->capture == NULL || d->variant_a == NULL || d->variant_b == NULL)
            st = pg_fail(err, PG_ERR_NOMEM, "diff: out of memory");
    }
    attribution_rows_free(&a);
    attribution_rows_free(&b);
    return st;
}

void diff_attribution_free(diff_result *r)
{
    for (size_t i = 0; i < r->n_attribution; i++) {
        free(r->attribution[i].capture);
        free(r->attribution[i].variant_a);
        free(r->attribution[i].variant_b);
    }
    free(r->attribution);
    r->attribution = NULL;
    r->n_attribution = 0;
}

void diff_attribution_print(const diff_result *r, FILE *out)
{
    if (r->n_attribution == 0) return;
    fprintf(out, "\nattribution (rel_l2 with one tensor alone quantized; none: every tensor "
                 "bf16, all: the variant), layer mean:\n");
    term_cell(out, NULL, -ATTR_VARIANT_WIDTH, "variant");
    fputc(' ', out);
    term_cell(out, NULL, -ATTR_TENSOR_WIDTH, "tensor");
    term_cell(out, NULL, ATTR_VALUE_WIDTH, "A");
    term_cell(out, NULL, ATTR_VALUE_WIDTH, "B");
    term_cell(out, NULL, ATTR_RATIO_WIDTH, "B/A");
    fputs("  largest B/A\n", out);
    unsigned char *done = calloc(r->n_attribution, 1);
    if (done == NULL) {
        fputs("(out of memory)\n", out);
        return;
    }
    for (size_t i = 0; i < r->n_attribution; i++) {
        if (done[i]) continue;
        const diff_attribution *g = &r->attribution[i];
        double sum_a = 0, sum_b = 0, worst = -INFINITY;
        int worst_layer = -1;
        size_t n = 0;
        for (size_t j = i; j < r->n_attribution; j++) {
            const diff_attribution *x = &r->attribution[j];
            if (done[j] || x->tensor != g->tensor || strcmp(x->variant_a, g->variant_a) != 0 ||
                strcmp(x->variant_b, g->variant_b) != 0)
                continue;
            done[j] = 1;
            sum_a += x->a;
            sum_b += x->b;
            n++;
            if (!(x->ratio <= worst)) {  /* NaN ratios count as the largest */
                worst = x->ratio;
                worst_layer = x->layer;
            }
        }
        char var[ATTR_CELL_MAX], raw[ATTR_CELL_MAX], a[ATTR_CELL_MAX], b[ATTR_CELL_MAX],
            q[ATTR_CELL_MAX];
        if (strcmp(g->variant_a, g->variant_b) == 0) snprintf(raw, sizeof raw, "%s", g->variant_a);
        else snprintf(raw, sizeof raw, "%s-%s", g->variant_b, g->variant_a);
        term_fit(var, sizeof var, raw, ATTR_VARIANT_WIDTH, 0);
        snprintf(a, sizeof a, "%.4e", sum_a / (double)n);
        snprintf(b, sizeof b, "%.4e", sum_b / (double)n);
        snprintf(q, sizeof q, "%.4g", sum_b / sum_a);
        term_cell(out, NULL, -ATTR_VARIANT_WIDTH, var);
        fputc(' ', out);
        term_cell(out, NULL, -ATTR_TENSOR_WIDTH, attribution_tensors[g->tensor]);
        term_cell(out, NULL, ATTR_VALUE_WIDTH, a);
        term_cell(out, NULL, ATTR_VALUE_WIDTH, b);
        term_cell(out, NULL, ATTR_RATIO_WIDTH, q);
        fprintf(out, "  %.4g (layer %d)\n", worst, worst_layer);
    }
    free(done);
}

int diff_attribution_json(const diff_result *r, struct cJSON *arr)
{
    for (size_t i = 0; i < r->n_attribution; i++) {
        const diff_attribution *x = &r->attribution[i];
        cJSON *o = report_json_row("attribution", r->run_a.id, r->run_b.id);
        int ok = o != NULL && cJSON_AddStringToObject(o, "capture", x->capture) != NULL &&
                 cJSON_AddNumberToObject(o, "layer", x->layer) != NULL &&
                 cJSON_AddStringToObject(o, "variant_a", x->variant_a) != NULL &&
                 cJSON_AddStringToObject(o, "variant_b", x->variant_b) != NULL &&
                 cJSON_AddStringToObject(o, "tensor", attribution_tensors[x->tensor]) != NULL &&
                 report_json_number(o, "a", x->a) && report_json_number(o, "b", x->b) &&
                 report_json_number(o, "delta", x->delta) &&
                 report_json_number(o, "ratio", x->ratio);
        if (ok) ok = cJSON_AddItemToArray(arr, o);
        if (!ok) {
            cJSON_Delete(o);
            return 0;
        }
    }
    return 1;
}
