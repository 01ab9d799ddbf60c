/* diagnose.c: the scale-plumbing diagnosis of external outputs (see diagnose.h). */
#include "diagnose.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "db/diagnosis_store.h"
#include "kernels/attn_hypothesis.h"
#include "kernels/numerics.h"
#include "diag_verdict.h"
#include "kernels/metrics.h"

int64_t diag_layer_rows(int n_ext, unsigned swept_modes)
{
    int64_t asked = 0;
    for (size_t h = 0; h < attn_hypothesis_count(); h++)
        asked += attn_hypothesis_is_asked(attn_hypothesis_at(h), swept_modes);
    return n_ext > 0 ? (int64_t)n_ext * asked : 0;
}

void diag_layer_free(diag_layer *d)
{
    if (d == NULL) return;
    free(d->rel_l2);
    free(d->why);
    free(d->asked);
    free(d->planned);
    memset(d, 0, sizeof *d);
}

pg_status diag_layer_plan(const attn_backend *be, const attn_batch *b,
                          const attn_quant_options *fo, unsigned swept_modes, int n_ext,
                          diag_layer *out, attn_layer_extra *extra, int *hyp_of, int *n_extra,
                          pg_err *err)
{
    memset(out, 0, sizeof *out);
    *n_extra = 0;
    if (n_ext <= 0) return PG_OK;
    /* Options the stack's quantization cannot have are the caller's bug, not
     * a layer a hypothesis refuses (which PG_ERR_USAGE means). */
    if (fo == NULL || !fo->quantize || fo->keep_bf16 != 0)
        return pg_fail(err, PG_ERR_INTERNAL, "diagnosis: the fp8 options must quantize as the "
                       "fp8 variants do (quantize 1, keep_bf16 0)");
    const int n_hyp = (int)attn_hypothesis_count();
    out->n_ext = n_ext;
    out->n_hyp = n_hyp;
    out->rel_l2 = malloc((size_t)n_ext * (size_t)n_hyp * sizeof *out->rel_l2);
    out->planned = malloc((size_t)n_ext * (size_t)n_hyp * sizeof *out->planned);
    out->why = calloc((size_t)n_hyp, sizeof *out->why);
    out->asked = calloc((size_t)n_hyp, sizeof *out->asked);
    if (out->rel_l2 == NULL || out->planned == NULL || out->why == NULL || out->asked == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "diagnosis: %d hypotheses x %d outputs", n_hyp, n_ext);
    for (int h = 0; h < n_hyp; h++) {
        const attn_hypothesis *hy = attn_hypothesis_at((size_t)h);
        out->asked[h] = (unsigned char)attn_hypothesis_is_asked(hy, swept_modes);
        for (int e = 0; e < n_ext; e++) out->rel_l2[(size_t)e * n_hyp + h] = NAN;
        if (!out->asked[h] || be == NULL || !attn_backend_takes_extras(be) ||
            !attn_backend_supports_hypothesis(be, hy, b, NULL))
            continue;
        extra[*n_extra] = (attn_layer_extra){.h = hy, .ext_rel_l2 = out->planned + (size_t)h * n_ext};
        hyp_of[(*n_extra)++] = h;
    }
    return PG_OK;
}

pg_status diag_layer_finish(attn_backend *be, attn_backend *cpu, const attn_batch *b,
                            const uint16_t *q, const uint16_t *k, const uint16_t *v,
                            const attn_quant_options *fo, int n_ext,
                            const capture_ext_output *ext, diag_layer *out,
                            const attn_layer_extra *extra, const int *hyp_of, int n_extra,
                            pg_err *err)
{
    if (n_ext <= 0) return PG_OK;
    if (cpu == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "diagnosis: no CPU backend for the hypotheses "
                       "the backend does not run");
    if (out->n_ext != n_ext)
        return pg_fail(err, PG_ERR_INTERNAL, "diagnosis: planned for %d outputs, given %d",
                       out->n_ext, n_ext);
    const int n_hyp = out->n_hyp;
    unsigned char *done = calloc((size_t)n_hyp, 1);
    const size_t nq = (size_t)attn_batch_tq(b) * (size_t)b->hq * (size_t)b->d;
    uint16_t *h_out = malloc(nq * sizeof *h_out);
    pg_status st = PG_OK;
    if (done == NULL || h_out == NULL)
        st = pg_fail(err, PG_ERR_NOMEM, "diagnosis: cannot allocate a hypothesis output of %zu "
                     "elements", nq);
    for (int j = 0; st == PG_OK && j < n_extra; j++) {
        const int h = hyp_of[j];
        done[h] = 1;
        if (extra[j].refused) {
            snprintf(out->why[h], sizeof out->why[h], "%.*s", DIAG_WHY_MAX - 1, extra[j].why);
            continue;
        }
        for (int e = 0; e < n_ext; e++) out->rel_l2[(size_t)e * n_hyp + h] = extra[j].ext_rel_l2[e];
    }
    for (int h = 0; st == PG_OK && h < n_hyp; h++) {
        if (!out->asked[h] || done[h]) continue;
        pg_err why = {0};
        const attn_hypothesis *hy = attn_hypothesis_at((size_t)h);
        attn_backend *on = be != NULL && attn_backend_supports_hypothesis(be, hy, b, NULL) ? be : cpu;
        const pg_status hs = attn_backend_run_hypothesis(on, hy, b, q, k, v, fo, h_out, &why);
        if (hs == PG_ERR_USAGE || hs == PG_ERR_UNSUPPORTED) {
            /* It refuses this layer: said in the row, never skipped. */
            snprintf(out->why[h], sizeof out->why[h], "%.*s", DIAG_WHY_MAX - 1, why.msg);
            continue;
        }
        if (hs != PG_OK) {
            if (err != NULL) *err = why;
            st = hs;
            break;
        }
        for (int e = 0; e < n_ext; e++)
            out->rel_l2[(size_t)e * n_hyp + h] = metrics_rel_l2_bf16(ext[e].out, h_out, nq);
    }
    free(h_out);
    free(done);
    return st;
}

pg_status diag_layer_run(attn_backend *be, attn_backend *cpu, const attn_batch *b,
                         const uint16_t *q, const uint16_t *k, const uint16_t *v,
                         const attn_quant_options *fo, unsigned swept_modes, int n_ext,
                         const capture_ext_output *ext, diag_layer *out, pg_err *err)
{
    int n_extra = 0;
    pg_status st = diag_layer_plan(NULL, b, fo, swept_modes, n_ext, out, NULL, NULL, &n_extra, err);
    if (st == PG_OK)
        st = diag_layer_finish(be, cpu, b, q, k, v, fo, n_ext, ext, out, NULL, NULL, 0, err);
    return st;
}

pg_status diag_layer_store(pg_store *s, int64_t run_id, const char *capture_name, int layer,
                           const capture_ext_output *ext, const diag_layer *d, pg_err *err)
{
    pg_status st = PG_OK;
    for (int e = 0; st == PG_OK && e < d->n_ext; e++)
        for (int h = 0; st == PG_OK && h < d->n_hyp; h++) {
            if (!d->asked[h]) continue;
            const char *why = d->why[h][0] != '\0' ? d->why[h] : NULL;
            st = diagnosis_store_put(s, run_id, capture_name, layer, ext[e].name,
                                     attn_hypothesis_name(attn_hypothesis_at((size_t)h)),
                                     d->rel_l2[(size_t)e * d->n_hyp + h], why, err);
        }
    return st;
}

pg_status diag_print_run(pg_store *s, int64_t run_id, FILE *out, pg_err *err)
{
    diagnosis_row *rows = NULL;
    size_t n = 0, n_spans = 0;
    diag_span *spans = NULL;
    pg_status st = diagnosis_store_load(s, run_id, &rows, &n, err);
    if (st == PG_OK) st = diag_spans(rows, n, &spans, &n_spans, err);
    const char *cap_name = NULL;
    for (size_t i = 0; st == PG_OK && i < n_spans; i++) {
        if (cap_name == NULL || strcmp(cap_name, spans[i].capture) != 0) {
            cap_name = spans[i].capture;
            fprintf(out, "diagnosis of external outputs (capture %s; a match is rel_l2 <= %g, "
                    "named when %gx nearer than the other side):\n", cap_name, DIAG_MATCH_REL_L2,
                    DIAG_MARGIN);
        }
        char line[1024];
        diag_span_message(&spans[i], line, sizeof line);
        fprintf(out, "  %s%s\n", spans[i].verdict == DIAG_BUG ? "SCALE BUG: " : "", line);
    }
    diag_spans_free(spans, n_spans);
    diagnosis_rows_free(rows, n);
    return st;
}
