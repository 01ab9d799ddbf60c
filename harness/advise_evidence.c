/* advise_evidence.c: one run's rows and shapes for the advice (see advise_evidence.h). */
#include "advise_evidence.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

pg_status advise_evidence_load(pg_store *s, int64_t run_id, advise_evidence *ev, pg_err *err)
{
    if (ev == NULL) return pg_fail(err, PG_ERR_INTERNAL, "advise_evidence_load: ev is NULL");
    memset(ev, 0, sizeof *ev);
    pg_status st = gate_store_run(s, run_id, &ev->run, err);
    if (st == PG_OK && strcmp(ev->run.status, "complete") != 0)
        st = pg_fail(err, PG_ERR_USAGE, "run %" PRId64 " is %s, not complete: its layers may "
                     "not all be stored (resume it first: precgate run --resume %" PRId64 ")",
                     run_id, ev->run.status, run_id);
    if (st == PG_OK) st = gate_store_load(s, run_id, &ev->rows, err);
    if (st == PG_OK) st = shape_store_load(s, run_id, &ev->shape_rows, &ev->n_shapes, err);
    if (st == PG_OK && ev->n_shapes > 0 &&
        (ev->shapes = calloc(ev->n_shapes, sizeof *ev->shapes)) == NULL)
        st = pg_fail(err, PG_ERR_NOMEM, "advise: out of memory");
    for (size_t i = 0; st == PG_OK && i < ev->n_shapes; i++) {
        const shape_row *r = &ev->shape_rows[i];
        ev->shapes[i] = (advise_shape){.capture = r->capture, .layer = r->layer,
                                       .hkv = r->shape.hkv, .d = r->shape.d,
                                       .window = r->shape.window};
    }
    if (st != PG_OK) advise_evidence_free(ev);
    return st;
}

void advise_evidence_free(advise_evidence *ev)
{
    if (ev == NULL) return;
    gate_run_free(&ev->run);
    gate_rows_free(&ev->rows);
    shape_rows_free(ev->shape_rows, ev->n_shapes);
    free(ev->shapes);
    memset(ev, 0, sizeof *ev);
}

pg_status advise_evidence_compute(const advise_evidence *ev, const advise_request *rq,
                                  advise_result *out, pg_err *err)
{
    return advise_compute(rq, ev->rows.layers, ev->rows.n_layers, ev->shapes, ev->n_shapes, out,
                          err);
}

double advise_config_budget(const gate_config *c, const char *variant, pg_metric m)
{
    return gate_bound_find(&c->layer.abs[m], variant);
}
