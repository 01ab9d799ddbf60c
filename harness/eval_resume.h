/*
 * eval_resume.h: what `precgate eval --resume RUN` must find unchanged.
 *
 * A run's config_json (db/eval_config.h) records what defines the eval: the
 * traces' content digest (traces_digest), eval name, extractor, prompt
 * template, the set of modes, efforts, samples, seed, temperature, top_p,
 * max_tokens and, once the servers have answered, each mode's served model.
 * A resume builds the same object from its own command line and must match
 * every one of those fields, or it is refused (PG_ERR_USAGE, exit 2) before
 * anything is sent, naming the field and both values. The servers are not
 * compared: neither their URLs (a server restarted on another port is the
 * same mode) nor how many a mode has (servers are infrastructure, not part
 * of the numbers; the set of modes is compared), and neither are the traces' path, --concurrency, timeouts, the API key
 * variable or --label. A config without "config_version" was written before
 * these checks: it cannot vouch for its traces, so such a run is refused.
 */
#ifndef PG_EVAL_RESUME_H
#define PG_EVAL_RESUME_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "db/eval_config.h"

/* A field of a run's config_json that a resume must repeat: its key, and
 * how the user sets it (quoted in the refusal). */
typedef struct resume_field {
    const char *key, *option;
} resume_field;

/* Compares fields[0..n-1] of stored (a run's parsed config_json) and now
 * (this command's, same layout; a field absent from both matches) with
 * cJSON_Compare: PG_OK when all match, else PG_ERR_USAGE "CMD: --resume RUN:
 * KEY (OPTION) differs: the run has X, this command gives Y (also differ:
 * ...)". For any command that resumes a run (eval; a sweep's run --resume). */
pg_status resume_check_fields(const char *cmd, int64_t run_id, const cJSON *stored,
                              const cJSON *now, const resume_field *fields, size_t n,
                              pg_err *err);

/* config_version of the configs this precgate writes; a stored config with
 * another (or none) is refused by eval_resume_check_config. */
#define EVAL_CONFIG_VERSION 2

/* Compares the defining fields of stored (run run_id's config, read; a
 * config that did not read has no config_version) with now (this command's
 * config, from eval_config_write): PG_OK when all match, else PG_ERR_USAGE
 * naming the first differing field with both values and listing the others
 * that differ. Models are not compared here (see eval_resume_check_models). */
pg_status eval_resume_check_config(int64_t run_id, const eval_config_doc *stored,
                                   const cJSON *now, pg_err *err);

/* Compares the model each contacted mode serves now (models[m] for
 * modes[m]; NULL: not contacted) with stored's models into merged (room for
 * stored->n_models + n pairs; *n_merged of them): stored's, then those it
 * lacks. PG_ERR_USAGE naming the mode and both model names when one differs,
 * or when stored has no models object. A mode stored lacks (its server never
 * answered, so it has no sample) is accepted and added, and *added is set. */
pg_status eval_resume_check_models(int64_t run_id, const eval_run_config *stored, int n,
                                   const char *const *modes, const char *const *models,
                                   eval_config_pair *merged, int *n_merged, int *added,
                                   pg_err *err);

#endif /* PG_EVAL_RESUME_H */
