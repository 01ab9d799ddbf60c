/*
 * run_complete.h: which rows a run's config implies, and which of them the
 * store lacks (issue #27): the one rule `precgate merge` holds each part to
 * and `precgate gate` holds every run to, whatever made it.
 *
 * What a run must hold is recorded in its config_json when it starts, from
 * the same rules its resume uses:
 *   sweep  "layer_rows": {"layer_metrics": [n per capture layer], "quant_stats",
 *          "layer_shapes", "attribution", "ext_diagnosis"}: what sweep_layer_rows
 *          (harness/sweep.h) says a whole layer holds, for every layer of the
 *          capture (each variant's whole-layer and per-head rows, ~spec rows,
 *          ext:NAME outputs, quant rows, attribution, the diagnosis, the shape).
 *          The layers a run owns are "shard_layers" for a part, else 0 ..
 *          "layers"-1; each must hold exactly its recorded counts (counted by
 *          store_sweep_layer_rows, as --resume counts them).
 *   eval   "plan": {"problems": N (after --limit, before --shard), "modes",
 *          "efforts", "samples"}: live, the command's; replay, the distinct modes
 *          and efforts of the recorded completions and 1 + their largest sample
 *          (the grid every score is taken over, evals/score.h). The problems a
 *          run owns are "shard_problems" for a part (each must be stored), else
 *          any N problems; each owned problem must hold a row, of any status,
 *          for every (mode, effort, sample) of the plan.
 * A config without its record (a run made before it existed) cannot be
 * verified: run_complete_check says so (unverifiable), and the gate makes
 * that an error, never a pass. `run --resume` of such a sweep records it.
 */
#ifndef PG_RUN_COMPLETE_H
#define PG_RUN_COMPLETE_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "db/eval_config.h"
#include "db/store.h"
#include "evals/traces.h"
#include "harness/capture/capture.h"
#include "sweep.h"

/* Most missing units a list names before "...". */
#define RUN_COMPLETE_LIST_UNITS 6
/* Room for that list (each unit a few table counts or sample numbers). */
#define RUN_COMPLETE_LIST_MAX 480

/* What a run lacks of the rows its config implies. */
typedef struct run_missing {
    int unverifiable;     /* 1: the config does not record what it implies (list says why) */
    int64_t n_units;      /* missing units: layers (sweep) or samples (eval) */
    int64_t n_expected;   /* the units its config implies */
    char list[RUN_COMPLETE_LIST_MAX];  /* the missing units, capped with "..." */
} run_missing;

/* What each layer of cap holds when whole under so (sweep_layer_rows), as a
 * new array of cap->n_layers entries into *out (caller frees); PG_ERR_NOMEM. */
pg_status run_complete_layer_rows(const capture *cap, const sweep_options *so,
                                  store_layer_rows **out, pg_err *err);

/* Adds "layer_rows" (db/run_config.h) to the sweep config o, from
 * run_complete_layer_rows. PG_ERR_NOMEM. */
pg_status run_complete_add_layer_rows(cJSON *o, const capture *cap, const sweep_options *so,
                                      pg_err *err);

/* Sets the plan (the top of this file) of the eval config c, from t (the
 * problems after --limit, before --shard) and c's own modes, efforts and
 * samples when live, else t's recorded completions (replay): those names
 * are kept in *names (NULL when live; caller frees), which c then borrows.
 * PG_ERR_NOMEM. */
pg_status run_complete_eval_plan(eval_run_config *c, const eval_traces *t, const char ***names,
                                 pg_err *err);

/* Compares the rows run_id holds in s with those its config_json (kind
 * "eval" or a sweep) implies, into *out: n_units 0 when whole. A config
 * that records no "layer_rows" / "plan" (or no readable capture, layers,
 * eval) sets unverifiable, its reason in list. PG_ERR_DB when a read
 * fails; PG_ERR_SHAPE when a stored sample lies beyond the plan. */
pg_status run_complete_check(pg_store *s, int64_t run_id, const char *kind,
                             const char *config_json, run_missing *out, pg_err *err);

/* Room for run_complete_resume's command. */
#define RUN_COMPLETE_RESUME_MAX 1200

/* The command that resumes run_id (kind "eval" or a sweep) of the database
 * db into buf: "precgate run --resume N --capture CAPTURE --db DB" (the
 * capture its config records) or "precgate eval --resume N --db DB, with its
 * options"; returns 1. For a merged run (a "shard" without "index"), which
 * no command resumes, says that its parts resume and merge again; returns 0. */
int run_complete_resume(const char *kind, int64_t run_id, const char *config_json,
                        const char *db, char *buf, size_t len);

#endif /* PG_RUN_COMPLETE_H */
