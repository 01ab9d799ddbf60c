/*
 * gate_lifecycle.h: a gate's lifecycle, the use case behind `precgate gate`:
 * read the run (it must be complete), choose its baseline (explicit or
 * automatic, harness/gate_baseline.h), compare the run with it and within
 * itself (layers, mode pairs, eval pairs, divergence, completeness, the
 * scale diagnosis), store the verdicts as the run's flags (unless the
 * database is read-only), write the JUnit file, and decide the exit status.
 *
 * It works on a store the caller opened (the CLI: cli_with_store, which
 * says when the database is read-only) and writes the gate's report (the
 * baseline chosen, the regressions first, the counts, the verdict) to the
 * request's out. The CLI (harness/cli/cmd_gate.c) parses argv and the
 * thresholds file into the request and calls gate_lifecycle_run.
 */
#ifndef PG_GATE_LIFECYCLE_H
#define PG_GATE_LIFECYCLE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"
#include "db/store.h"
#include "harness/gate_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A gate to make. */
typedef struct gate_request {
    long run;                 /* the run to gate (it must be complete) */
    const char *baseline;     /* a baseline name or run id; NULL: the automatic choice */
    const char *config;       /* the thresholds file's path, for the report; NULL: defaults */
    const gate_config *cfg;   /* the thresholds (gate_config_load or gate_config_default) */
    const char *junit;        /* the JUnit XML file to write; NULL for none */
    int require_baseline;     /* no baseline run is an error verdict (CI) */
    FILE *out;                /* the gate's report; required */
} gate_request;

/* What a gate decided, filled once it succeeded. */
typedef struct gate_result {
    int exit_status;   /* GATE_EXIT_PASS, _REGRESSION or _ERROR (harness/regress.h) */
    int64_t base_id;   /* the baseline run compared with; -1 for none */
    size_t n_flags;    /* the verdicts */
} gate_result;

/* Gates run rq->run in store (db_path names it in the report): PG_OK when
 * the verdicts were made (res->exit_status says which); PG_ERR_USAGE when
 * the run does not exist or is not complete, or the baseline named does
 * not; any other code when a read, the flags' write or the JUnit file
 * failed (res->exit_status is then GATE_EXIT_ERROR). */
pg_status gate_lifecycle_run(pg_store *store, const char *db_path, const gate_request *rq,
                             gate_result *res, pg_err *err);

#ifdef __cplusplus
}
#endif

#endif /* PG_GATE_LIFECYCLE_H */
