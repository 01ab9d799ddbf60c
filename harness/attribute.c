/* attribute.c: attribution per quantized tensor, beside or inside the layer run (see attribute.h). */
#include "attribute.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/metrics.h"

/* The attn_tensor bit of each attribution_tensors entry (0: none, all). */
static const unsigned tensor_bit[ATTRIBUTION_N_TENSORS] = {0, ATTN_TENSOR_Q, ATTN_TENSOR_K,
                                                           ATTN_TENSOR_V, ATTN_TENSOR_P, 0};

/* Whether mode m quantizes the tensor of attribution index t (its row of
 * the mode table: base/mode.h). */
static int mode_quantizes(pg_mode m, int t)
{
    if (t == ATTRIBUTION_NONE || t == ATTRIBUTION_ALL) return pg_mode_quantizes(m);
    return (pg_mode_traits_of(m)->quantized & tensor_bit[t]) != 0;
}

/* Prefixes err's message (the failure of profile p's row t) with what ran. */
static void name_row(pg_err *err, const attn_profile *p, int t)
{
    if (err == NULL) return;
    char prefix[PG_ERR_MSG_MAX / 4];
    const int n = snprintf(prefix, sizeof prefix, "attribution of %s (%s): ",
                           attn_profile_variant(p), attribution_tensors[t]);
    const size_t plen = n < 0 ? 0 : (size_t)n < sizeof prefix ? (size_t)n : sizeof prefix - 1;
    size_t len = strlen(err->msg);
    if (plen + len >= sizeof err->msg) len = sizeof err->msg - plen - 1;
    memmove(err->msg + plen, err->msg, len);
    memcpy(err->msg, prefix, plen);
    err->msg[plen + len] = '\0';
}

int attribute_row_count(const attn_profile *p)
{
    int n = 0;
    for (int t = 0; t < ATTRIBUTION_N_TENSORS; t++) n += mode_quantizes(attn_profile_mode(p), t);
    return n;
}

unsigned attribute_keep_mask(int tensor)
{
    if (tensor == ATTRIBUTION_ALL) return 0;
    return ATTN_TENSORS_ALL & ~tensor_bit[tensor];
}

int attribute_rows_off(const attn_backend *be, const attn_profile *p, const attn_batch *b,
                       const char **why)
{
    int n = 0;
    for (int t = 0; t < ATTRIBUTION_N_TENSORS; t++)
        if (t != ATTRIBUTION_ALL && mode_quantizes(attn_profile_mode(p), t) &&
            !attn_backend_supports_kept(be, p, b, attribute_keep_mask(t), why))
            n++;
    return n;
}

/* PG_ERR_USAGE unless cpu is the CPU specification's backend. */
static pg_status require_cpu(const attn_backend *cpu, pg_err *err)
{
    if (cpu != NULL && strcmp(attn_backend_name(cpu), "cpu") == 0) return PG_OK;
    return pg_fail(err, PG_ERR_USAGE, "attribution: rows the backend cannot run go to the CPU "
                   "specification; backend %s given for it", cpu ? attn_backend_name(cpu) : "NULL");
}

void attribute_plan(const attn_backend *be, const attn_batch *b, const attn_profile *const *var,
                    int n_var, attribute_row *rows, int *n_rows, attn_layer_extra *extra,
                    int *row_of, int *n_extra)
{
    *n_rows = 0;
    if (n_extra != NULL) *n_extra = 0;
    for (int i = 0; i < n_var; i++) {
        const pg_mode mode = attn_profile_mode(var[i]);
        for (int t = 0; t < ATTRIBUTION_N_TENSORS; t++) {
            if (!mode_quantizes(mode, t)) continue;
            const int r = (*n_rows)++;
            rows[r] = (attribute_row){.p = var[i], .var = i, .tensor = t, .rel_l2 = NAN};
            const unsigned keep = attribute_keep_mask(t);
            if (t == ATTRIBUTION_ALL || be == NULL || n_extra == NULL ||
                !attn_backend_takes_extras(be) ||
                !attn_backend_supports_kept(be, var[i], b, keep, NULL))
                continue;
            extra[*n_extra] = (attn_layer_extra){.p = var[i], .keep_bf16 = keep};
            row_of[(*n_extra)++] = r;
        }
    }
}

/* 1 when row r is an "all" row that joint gives. */
static int joint_gives(const attribute_row *r, const double *joint)
{
    return r->tensor == ATTRIBUTION_ALL && joint != NULL && !isnan(joint[r->var]);
}

int attribute_left(const attribute_row *rows, int n_rows, int n_extra)
{
    int n = 0;
    for (int r = 0; r < n_rows; r++) n += rows[r].tensor != ATTRIBUTION_ALL;
    return n - n_extra; /* an extra is never an "all" row */
}

pg_status attribute_finish(attn_backend *be, attn_backend *cpu, const attn_batch *b,
                           const uint16_t *q, const uint16_t *k, const uint16_t *v,
                           const attn_quant_options *fo, const double *joint, const double *ref,
                           attribute_row *rows, int n_rows, const attn_layer_extra *extra,
                           const int *row_of, int n_extra, pg_err *err)
{
    pg_status st = require_cpu(cpu, err);
    if (st != PG_OK) return st;
    for (int r = 0; r < n_rows; r++)
        if (joint_gives(&rows[r], joint)) rows[r].rel_l2 = joint[rows[r].var];
    for (int j = 0; j < n_extra; j++) {
        attribute_row *r = &rows[row_of[j]];
        if (extra[j].refused) {
            pg_fail(err, PG_ERR_UNSUPPORTED, "%s", extra[j].why);
            name_row(err, r->p, r->tensor);
            return PG_ERR_UNSUPPORTED;
        }
        r->rel_l2 = extra[j].rel_l2;
    }
    int left = 0;
    for (int r = 0; r < n_rows; r++) left += isnan(rows[r].rel_l2);
    if (left == 0) return PG_OK;
    if (ref == NULL)
        return pg_fail(err, PG_ERR_USAGE, "attribution: %d rows for the CPU and no reference",
                       left);
    if (be == NULL) be = cpu;
    const int64_t tq = attn_batch_tq(b);
    const size_t nq = (size_t)tq * (size_t)b->hq * (size_t)b->d;
    uint16_t *out = malloc(nq * sizeof *out);
    pg_metric_values *m = malloc(((size_t)b->hq + 1) * sizeof *m);
    if (out == NULL || m == NULL)
        st = pg_fail(err, PG_ERR_NOMEM, "attribution: cannot allocate a layer of %zu values", nq);
    for (int r = 0; st == PG_OK && r < n_rows; r++) {
        if (!isnan(rows[r].rel_l2)) continue;
        attn_quant_options o = *fo;
        o.keep_bf16 = attribute_keep_mask(rows[r].tensor);
        attn_backend *on = attn_backend_supports_kept(be, rows[r].p, b, o.keep_bf16, NULL) ? be
                                                                                          : cpu;
        st = attn_backend_run_variant(on, rows[r].p, b, q, k, v, &o, out, NULL, err);
        if (st == PG_OK) st = attn_backend_metrics(be, out, ref, tq, b->hq, b->d, m, err);
        if (st != PG_OK) {
            name_row(err, rows[r].p, rows[r].tensor);
            break;
        }
        rows[r].rel_l2 = m[0].rel_l2;
    }
    free(out);
    free(m);
    return st;
}

pg_status attribute_layer(attn_backend *be, attn_backend *cpu, const attn_batch *b,
                          const uint16_t *q, const uint16_t *k, const uint16_t *v,
                          const attn_quant_options *fo, const attn_profile *const *var, int n_var,
                          const double *ref, const double *joint, attribute_row *rows,
                          int *n_rows, pg_err *err)
{
    *n_rows = 0;
    pg_status st = require_cpu(cpu, err);
    if (st != PG_OK) return st;
    attribute_plan(NULL, b, var, n_var, rows, n_rows, NULL, NULL, NULL);
    return attribute_finish(be, cpu, b, q, k, v, fo, joint, ref, rows, *n_rows, NULL, NULL, 0,
                            err);
}
