/*
 * eval_results.h: an eval run's results file (`precgate eval --output
 * FILE.json`), the way lm-evaluation-harness writes its results JSON: the
 * run, its configuration, and every stored score and pair, read back from
 * the store so the file says what the database says.
 */
#ifndef PG_EVAL_RESULTS_H
#define PG_EVAL_RESULTS_H

#include <stdint.h>

#include "db/store.h"
#include "base/status.h"

/* Version of the file's layout, written as "format". */
#define EVAL_RESULTS_FORMAT "precgate.eval-results.v1"

/* Writes path (atomically, atomic_file.h) as one JSON object:
 *   {"format", "run_id", "status", "eval", "config" (config_json parsed, or
 *    null), "scores": [{mode, effort, n_problems, k, accuracy, stderr,
 *    ci_low, ci_high, ci_method, pass_at {k: value}, n_errors, n_truncated,
 *    n_empty, n_missing}], "pairs": [{effort, mode_a, mode_b, n_problems,
 *    mean_diff, stderr, ci_low, ci_high, wins, losses, ties, sign_p, mde}],
 *    "servers": [{mode, server, answered, errors}] (per server that answered
 *    live samples, eval_store_read_server_counts; [] for a replay)}
 * with the stored rows of (run_id, eval); undefined statistics are null (with
 * KEY_nonfinite, as every JSON output: report_json_number, json_out.h).
 * PG_ERR_FORMAT when config_json or a stored pass_at_json is not JSON;
 * PG_ERR_IO naming path when it cannot be written. */
pg_status eval_results_write_json(pg_store *s, int64_t run_id, const char *eval,
                                  const char *status, const char *config_json, const char *path,
                                  pg_err *err);

#endif /* PG_EVAL_RESULTS_H */
