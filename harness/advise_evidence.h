/*
 * advise_evidence.h: what `precgate advise` and the reports' advice read
 * from the store for one run (harness/advise.h decides from it): the run,
 * its whole-layer rows (db/gate_store.h gate_store_load) and its layer
 * shapes (db/shape_store.h), loaded once for any number of advice.
 */
#ifndef PG_ADVISE_EVIDENCE_H
#define PG_ADVISE_EVIDENCE_H

#include <stddef.h>
#include <stdint.h>

#include "db/gate_store.h"
#include "db/shape_store.h"
#include "db/store.h"
#include "advise.h"
#include "gate_config.h"
#include "base/status.h"

/* One run's evidence. Zero-initialise; free with advise_evidence_free. */
typedef struct advise_evidence {
    gate_run run;
    gate_rows rows;          /* rows.layers: the whole-layer rows */
    shape_row *shape_rows;
    size_t n_shapes;
    advise_shape *shapes;    /* [n_shapes], borrowing shape_rows' strings */
} advise_evidence;

/* Loads run_id's evidence into *ev (zeroed first; free with
 * advise_evidence_free, also after a failure). PG_ERR_USAGE "no run N in
 * PATH" when there is none, and naming its status when the run is not
 * complete (a running, failed or interrupted sweep lacks layers, which the
 * advice would silently leave out). */
pg_status advise_evidence_load(pg_store *s, int64_t run_id, advise_evidence *ev, pg_err *err);

/* Frees what advise_evidence_load put in ev and zeroes it; NULL is a no-op. */
void advise_evidence_free(advise_evidence *ev);

/* advise_compute on ev's rows and shapes. */
pg_status advise_evidence_compute(const advise_evidence *ev, const advise_request *rq,
                                  advise_result *out, pg_err *err);

/* The budget a gate config gives variant (its full name) on metric m: the
 * layer scope's absolute bound (layer.abs for rel_l2, layer.metric_abs.M
 * for the others; harness/gate_config.h); NaN when the config has none. */
double advise_config_budget(const gate_config *c, const char *variant, pg_metric m);

#endif /* PG_ADVISE_EVIDENCE_H */
