/* gate_baseline.c: the gate's choice of baseline among the store's candidates (see gate_baseline.h). */
#include "gate_baseline.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* --limit first: it changes the digest, and is the cause to name. */
const char *const gate_content_fields[GATE_CONTENT_FIELD_COUNT] = {
    RUN_CONFIG_LIMIT,  RUN_CONFIG_SOURCE,           RUN_CONFIG_TRACES_DIGEST, RUN_CONFIG_SCALES,
    RUN_CONFIG_SEQUENCES_DIGEST, RUN_CONFIG_REFERENCE, RUN_CONFIG_TOP_K};
const char *const gate_auto_fields[GATE_AUTO_FIELD_COUNT] = {
    RUN_CONFIG_LIMIT,    RUN_CONFIG_SOURCE,           RUN_CONFIG_TRACES_DIGEST,
    RUN_CONFIG_SCALES,   RUN_CONFIG_VARIANTS,         RUN_CONFIG_SEQUENCES_DIGEST,
    RUN_CONFIG_REFERENCE, RUN_CONFIG_TOP_K};

/* The automatic rule over the store's candidates (newest first): the newest
 * of run's content that passed its gate, else the newest of its content;
 * without one, the newest of any content and how it differs. */
static pg_status choose_automatic(pg_store *s, const gate_run *run, gate_baseline_choice *out,
                                  pg_err *err)
{
    out->automatic = 1;
    gate_candidate *c = NULL;
    size_t n = 0;
    pg_status st = gate_store_baseline_candidates(s, run, gate_auto_fields,
                                                  GATE_AUTO_FIELD_COUNT, &c, &n, err);
    for (size_t i = 0; st == PG_OK && i < n && !out->passed; i++)
        if (c[i].same_content && c[i].passed) {
            out->base_id = c[i].id;
            out->passed = 1;
        }
    for (size_t i = 0; st == PG_OK && i < n && out->base_id < 0; i++)
        if (c[i].same_content) out->base_id = c[i].id;
    if (st == PG_OK && out->base_id < 0 && n > 0) {
        out->newest = c[0].id;
        st = gate_store_content_diff(s, run->id, out->newest, gate_auto_fields,
                                     GATE_AUTO_FIELD_COUNT, &out->differs, err);
    }
    free(c);
    return st;
}

/* --baseline spec: resolved, checked against run, its content compared. */
static pg_status choose_explicit(pg_store *s, const gate_run *run, const char *spec,
                                 gate_baseline_choice *out, pg_err *err)
{
    pg_status st = gate_store_resolve_baseline(s, spec, &out->base_id, &out->by_name, err);
    gate_run b = {0};
    if (st == PG_OK) st = gate_store_run(s, out->base_id, &b, err);
    if (st == PG_OK && out->base_id == run->id)
        st = pg_fail(err, PG_ERR_USAGE, "gate: --baseline %s is run %" PRId64 " itself", spec,
                     run->id);
    if (st == PG_OK && strcmp(b.kind, run->kind) != 0)
        st = pg_fail(err, PG_ERR_USAGE, "gate: --baseline %s is run %" PRId64 " of kind %s; run "
                     "%" PRId64 " is %s", spec, out->base_id, b.kind, run->id, run->kind);
    if (st == PG_OK && strcmp(b.status, "complete") != 0)
        st = pg_fail(err, PG_ERR_USAGE, "gate: --baseline %s is run %" PRId64 ", which is %s; a "
                     "baseline must be complete", spec, out->base_id, b.status);
    if (st == PG_OK)
        st = gate_store_content_diff(s, run->id, out->base_id, gate_content_fields,
                                     GATE_CONTENT_FIELD_COUNT, &out->differs, err);
    gate_run_free(&b);
    return st;
}

pg_status gate_baseline_choose(pg_store *s, const gate_run *run, const char *spec,
                               gate_baseline_choice *out, pg_err *err)
{
    memset(out, 0, sizeof *out);
    out->base_id = -1;
    out->newest = -1;
    const pg_status st = spec == NULL ? choose_automatic(s, run, out, err)
                                      : choose_explicit(s, run, spec, out, err);
    if (st != PG_OK) out->base_id = -1;
    return st;
}
