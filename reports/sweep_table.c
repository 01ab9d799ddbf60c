/* sweep_table.c: a sweep run's layer x variant rel_l2 table (see sweep_table.h). */
#include "sweep_table.h"

#include "base/variant.h"
#include "db/report_store.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Most variant columns shown (profiles plus external outputs). */
#define TABLE_MAX_VARIANTS 16

/* Orders variants: the profiles in the table's order, then the others
 * (ext:*, ~spec) by name (variant_name_cmp). */
static int variant_cmp(const void *a, const void *b)
{
    return variant_name_cmp(*(const char *const *)a, *(const char *const *)b);
}

/* Formats one cell: rel_l2, or NaN/inf counts when the output was not finite. */
static void cell(char *buf, size_t len, int present, double v, int64_t nonfinite)
{
    if (!present) snprintf(buf, len, "-");
    else if (nonfinite > 0) snprintf(buf, len, "nonfinite:%lld", (long long)nonfinite);
    else snprintf(buf, len, "%.3e", v);
}

/* The length of the capture name a row group keeps (longer ones are cut). */
#define TABLE_CAPTURE_KEPT 256

/* Prints the table of the run's variants (names, as the store lists them) and
 * whole-layer rows (by capture and layer). */
static void print_table(FILE *out, char *const *names, size_t n_names,
                        const layer_metric_row *rows, size_t n_rows)
{
    /* The first TABLE_MAX_VARIANTS variants in the order the store lists them. */
    const char *variants[TABLE_MAX_VARIANTS];
    int nv = 0;
    for (size_t i = 0; i < n_names && nv < TABLE_MAX_VARIANTS; i++)
        if (names[i] != NULL) variants[nv++] = names[i];
    qsort(variants, (size_t)nv, sizeof variants[0], variant_cmp);

    /* A column is as wide as its variant's full name, at least TABLE_COL_WIDTH. */
    int width[TABLE_MAX_VARIANTS];
    for (int i = 0; i < nv; i++) {
        const int n = (int)strlen(variants[i]);
        width[i] = n > TABLE_COL_WIDTH ? n : TABLE_COL_WIDTH;
    }
    fprintf(out, "%-*s %5s", TABLE_CAPTURE_WIDTH, "capture", "layer");
    for (int i = 0; i < nv; i++) fprintf(out, " %*s", width[i], variants[i]);
    fprintf(out, "   (rel_l2 vs fp64 reference, whole layer)\n");

    double worst[TABLE_MAX_VARIANTS];
    int worst_layer[TABLE_MAX_VARIANTS];
    for (int i = 0; i < nv; i++) {
        worst[i] = -1;
        worst_layer[i] = -1;
    }
    char cur_cap[TABLE_CAPTURE_KEPT] = "";
    int cur_layer = -1, have_row = 0;
    int present[TABLE_MAX_VARIANTS] = {0};
    double val[TABLE_MAX_VARIANTS];
    int64_t bad[TABLE_MAX_VARIANTS];
    /* Rows come by capture and layer: a line per (capture, layer), printed
     * when the next row starts another one (or after the last row). */
    for (size_t r = 0; r <= n_rows; r++) {
        const layer_metric_row *row = r < n_rows ? &rows[r] : NULL;
        const char *capn = row != NULL && row->capture != NULL ? row->capture : "";
        const int layer = row != NULL ? row->layer : -1;
        if (have_row && (row == NULL || layer != cur_layer || strcmp(capn, cur_cap) != 0)) {
            /* Long paths keep their tail: the file name tells captures apart. */
            const size_t cl = strlen(cur_cap);
            if (cl > TABLE_CAPTURE_WIDTH)
                fprintf(out, "...%-*s %5d", TABLE_CAPTURE_WIDTH - 3,
                        cur_cap + cl - (TABLE_CAPTURE_WIDTH - 3), cur_layer);
            else
                fprintf(out, "%-*s %5d", TABLE_CAPTURE_WIDTH, cur_cap, cur_layer);
            for (int i = 0; i < nv; i++) {
                char c[32];
                cell(c, sizeof c, present[i], val[i], bad[i]);
                fprintf(out, " %*s", width[i], c);
            }
            fputc('\n', out);
            memset(present, 0, sizeof present);
            have_row = 0;
        }
        if (row == NULL) break;
        snprintf(cur_cap, sizeof cur_cap, "%s", capn);
        cur_layer = layer;
        have_row = 1;
        for (int i = 0; i < nv; i++) {
            if (row->variant == NULL || strcmp(row->variant, variants[i]) != 0) continue;
            present[i] = 1;
            val[i] = row->v.rel_l2;
            bad[i] = pg_metric_nonfinite(&row->v);
            const double w = bad[i] > 0 ? INFINITY : val[i];
            if (w > worst[i]) {
                worst[i] = w;
                worst_layer[i] = layer;
            }
        }
    }
    fprintf(out, "%-*s", TABLE_CAPTURE_WIDTH + 6, "worst layer");
    for (int i = 0; i < nv; i++) {
        char c[32];
        snprintf(c, sizeof c, "%d", worst_layer[i]);
        fprintf(out, " %*s", width[i], c);
    }
    fputc('\n', out);
}

pg_status report_sweep_table(pg_store *store, int64_t run_id, FILE *out, pg_err *err)
{
    char **names = NULL;
    size_t n_names = 0, n_rows = 0;
    layer_metric_row *rows = NULL;
    pg_status st = report_store_variants(store, run_id, REPORT_VARIANTS_WHOLE_LAYER, &names,
                                         &n_names, err);
    if (st == PG_OK) st = report_store_whole_layers(store, run_id, NULL, &rows, &n_rows, err);
    unsupported_summary *u = NULL;
    size_t n_u = 0;
    if (st == PG_OK) st = report_store_unsupported(store, run_id, &u, &n_u, err);
    if (st == PG_OK) print_table(out, names, n_names, rows, n_rows);
    /* The cells no kernel computed, which the table has no column for. */
    for (size_t i = 0; st == PG_OK && i < n_u; i++)
        fprintf(out, "not computed: %s on %d layer%s of %s (%s): %s\n", u[i].variant,
                u[i].n_layers, u[i].n_layers == 1 ? "" : "s", u[i].capture, u[i].layers,
                u[i].reason);
    unsupported_summaries_free(u, n_u);
    report_names_free(names, n_names);
    layer_metric_rows_free(rows, n_rows);
    return st;
}
