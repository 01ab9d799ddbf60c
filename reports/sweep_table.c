/* sweep_table.c: a sweep run's layer x variant rel_l2 table (see sweep_table.h). */
#include "sweep_table.h"

#include "base/variant.h"

#include <math.h>
#include <sqlite3.h>
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

pg_status report_sweep_table(pg_store *store, int64_t run_id, FILE *out, pg_err *err)
{
    sqlite3 *db = store_handle(store);
    sqlite3_stmt *vs = NULL, *rs = NULL;
    char *variants[TABLE_MAX_VARIANTS];
    int nv = 0;
    pg_status st = PG_OK;
    if (sqlite3_prepare_v2(db,
                           "SELECT DISTINCT variant FROM layer_metrics WHERE run_id = ?1 AND head = -1",
                           -1, &vs, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "SELECT capture, layer, variant, rel_l2, nan_count + inf_count "
                           "FROM layer_metrics WHERE run_id = ?1 AND head = -1 "
                           "ORDER BY capture, layer",
                           -1, &rs, NULL) != SQLITE_OK) {
        st = pg_fail(err, PG_ERR_DB, "report: cannot prepare query: %s", sqlite3_errmsg(db));
        goto done;
    }
    sqlite3_bind_int64(vs, 1, run_id);
    while (sqlite3_step(vs) == SQLITE_ROW && nv < TABLE_MAX_VARIANTS)
        variants[nv++] = strdup((const char *)sqlite3_column_text(vs, 0));
    qsort(variants, (size_t)nv, sizeof variants[0], variant_cmp);

    /* A column is as wide as its variant's full name, at least TABLE_COL_WIDTH. */
    int width[TABLE_MAX_VARIANTS];
    for (int i = 0; i < nv; i++) {
        const int n = variants[i] != NULL ? (int)strlen(variants[i]) : 0;
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
    sqlite3_bind_int64(rs, 1, run_id);
    char cur_cap[256] = "";
    int cur_layer = -1, have_row = 0;
    int present[TABLE_MAX_VARIANTS] = {0};
    double val[TABLE_MAX_VARIANTS];
    int64_t bad[TABLE_MAX_VARIANTS];
    for (;;) {
        int rc = sqlite3_step(rs);
        const char *capn = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(rs, 0) : "";
        int layer = rc == SQLITE_ROW ? sqlite3_column_int(rs, 1) : -1;
        if (have_row && (rc != SQLITE_ROW || layer != cur_layer || strcmp(capn, cur_cap) != 0)) {
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
        if (rc == SQLITE_DONE) break;
        if (rc != SQLITE_ROW) {
            st = pg_fail(err, PG_ERR_DB, "report: reading layer_metrics: %s", sqlite3_errmsg(db));
            break;
        }
        snprintf(cur_cap, sizeof cur_cap, "%s", capn);
        cur_layer = layer;
        have_row = 1;
        const char *var = (const char *)sqlite3_column_text(rs, 2);
        for (int i = 0; i < nv; i++) {
            if (strcmp(var, variants[i]) != 0) continue;
            present[i] = 1;
            val[i] = sqlite3_column_type(rs, 3) == SQLITE_NULL ? NAN : sqlite3_column_double(rs, 3);
            bad[i] = sqlite3_column_int64(rs, 4);
            const double w = bad[i] > 0 ? INFINITY : val[i];
            if (w > worst[i]) {
                worst[i] = w;
                worst_layer[i] = layer;
            }
        }
    }
    if (st == PG_OK) {
        fprintf(out, "%-*s", TABLE_CAPTURE_WIDTH + 6, "worst layer");
        for (int i = 0; i < nv; i++) {
            char c[32];
            snprintf(c, sizeof c, "%d", worst_layer[i]);
            fprintf(out, " %*s", width[i], c);
        }
        fputc('\n', out);
    }
done:
    for (int i = 0; i < nv; i++) free(variants[i]);
    sqlite3_finalize(vs);
    sqlite3_finalize(rs);
    return st;
}
