/*
 * divergence_results.h: a teacher-forced divergence run's results (issue
 * #28), read back from the store: the terminal summary in llama-perplexity's
 * layout (`llama-perplexity --kl-divergence`, tools/perplexity/perplexity.cpp)
 * and the results file of `precgate diverge --output FILE.json`.
 */
#ifndef PG_DIVERGENCE_RESULTS_H
#define PG_DIVERGENCE_RESULTS_H

#include <stdint.h>
#include <stdio.h>

#include "base/status.h"
#include "db/store.h"

/* Version of the results file's layout, written as "format". */
#define DIVERGENCE_RESULTS_FORMAT "precgate.divergence-results.v1"
/* Sequences whose first top-1 difference the terminal summary lists (all
 * are in the results file). */
#define DIVERGENCE_FIRST_DIFF_SHOWN 10

/* Prints run_id's summaries to out: per mode (against the reference) one
 * block of KL divergence and token probability statistics with the noise
 * floor beside each, the line "KLD is a top-K lower bound (K = k); median
 * tail mass ...", and the first position of each sequence whose top-1
 * differs. PG_ERR_FORMAT when the run has no summary (not compared). */
pg_status divergence_results_print(pg_store *s, int64_t run_id, FILE *out, pg_err *err);

/* Writes path (atomically, atomic_file.h) as {"format", "run", "reference",
 * "top_k", "modes": {MODE: {"sequences", "positions", "kld_mean",
 * "kld_mean_se", "kld_ci": [lo, hi], "kld_percentiles": {"50", "90", "95",
 * "99", "99.9", "max"}, "same_top", "same_top_se", "mean_dp", "rms_dp",
 * "mean_dlogprob", "ppl_ratio", "tail_mass_median", "first_top_diff": {SEQ:
 * position or null}}}, "noise_floor": {"kld_mean", "kld_mean_se",
 * "same_top"} or null}; undefined numbers are null (report_json_number).
 * PG_ERR_FORMAT when the run has no summary; PG_ERR_IO naming path. */
pg_status divergence_results_write_json(pg_store *s, int64_t run_id, const char *path,
                                        pg_err *err);

#endif /* PG_DIVERGENCE_RESULTS_H */
