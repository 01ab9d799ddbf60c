/*
 * eval_config.h: an eval run's configuration (runs.config_json of a run of
 * kind "eval"), typed, with one writer and one reader.
 *
 * eval_config_write is the only code that turns an eval's settings into
 * its config_json, and eval_config_read the only one that turns a stored
 * config back into fields; the keys are run_config.h's. The eval lifecycle
 * writes the config of a new run with it, --resume compares the writer's
 * tree with the stored one key by key and updates the stored one with
 * eval_config_doc_update, and the completeness check reads its plan.
 */
#ifndef PG_EVAL_CONFIG_H
#define PG_EVAL_CONFIG_H

#include <cjson/cJSON.h>

#include "base/status.h"
#include "db/run_config.h"

/* What "source" records: a replay of recorded completions, or a live run. */
#define EVAL_CONFIG_SOURCE_REPLAY "replay"
#define EVAL_CONFIG_SOURCE_LIVE "live"

/* One (mode, value) of a mode-keyed object: a server ("endpoints": its
 * URL) or a served model ("models": its name). */
typedef struct eval_config_pair {
    const char *mode, *value;  /* read: value NULL where the stored one is no string */
} eval_config_pair;

/* An eval's configuration. The writer's input: strings borrowed from the
 * caller, NULL where absent (not written). What eval_config_read fills:
 * strings borrowed from the eval_config_doc; NULL, -1 counts or the _known
 * flags 0 where the stored config lacks the key or holds another type.
 * Lists of strings read with NULL entries where the stored entry is none. */
typedef struct eval_run_config {
    int config_version, config_version_known;  /* known: a whole number */
    const char *traces, *traces_digest, *eval;
    int replay;           /* "source": "replay", else "live" */
    int source_known;     /* read: "source" is "replay" or "live" */
    const char *extractor;
    int limit;            /* > 0: --limit (written only then) */
    int limit_known;
    /* Written only live (replay 0). */
    const char *prompt_template;
    /* The modes: written as their distinct names sorted (their order
     * defines nothing); read as stored. */
    const char *const *modes;
    int n_modes;
    /* Every server, (mode, URL) in the order given: written as an object
     * keyed by mode in the order of their first server, a mode with one
     * server its URL, else the array of its URLs. Read: flattened back so,
     * endpoints_known when "endpoints" is an object. */
    const eval_config_pair *endpoints;
    int n_endpoints, endpoints_known;
    /* Each mode's served model, once its servers answered: written as an
     * object in this order (a mode's first pair counts). models_known:
     * "models" is an object. */
    const eval_config_pair *models;
    int n_models, models_known;
    const char *const *efforts;  /* written distinct and sorted, like modes */
    int n_efforts;
    int samples, samples_known;
    double temperature;
    int temperature_known;
    double top_p;         /* < 0: null, the server's default */
    int top_p_known;      /* read: a number or null */
    unsigned long long seed;  /* written as decimal text (a double cannot hold it) */
    int seed_known;
    long max_tokens;      /* <= 0: null, the server's default */
    int max_tokens_known; /* read: a number or null */
    const char *model, *api_key_env;  /* --model, the key's variable: informative */
    /* What the run must hold when whole (harness/run_complete.h): written
     * when plan_known, its modes and efforts distinct and sorted. Read:
     * plan_known when "plan" exists; its counts' flags say which are whole
     * numbers. */
    int plan_known;
    int plan_problems, plan_problems_known;
    const char *const *plan_modes;
    int n_plan_modes;
    const char *const *plan_efforts;
    int n_plan_efforts;
    int plan_samples, plan_samples_known;
    /* A part of a sharded job: part.count > 0, written with
     * "shard_problems", the ids it owns. Read: shard_problems_known when
     * "shard_problems" exists, n_shard_problems -1 when it is no array. */
    run_config_part part;
    const char *const *shard_problems;
    int n_shard_problems, shard_problems_known;
} eval_run_config;

/* The config c as a new JSON object (caller deletes), its keys in the order
 * eval runs have always recorded them; NULL when out of memory. */
cJSON *eval_config_write(const eval_run_config *c);

/* A stored eval config, parsed: c borrows from tree. */
typedef struct eval_config_doc {
    cJSON *tree;        /* the parsed config_json (owned): what --resume compares */
    eval_run_config c;  /* its typed fields */
    const char **storage[5];      /* the lists' storage (owned) */
    eval_config_pair *pairs[2];   /* endpoints' and models' storage (owned) */
} eval_config_doc;

/* Parses json (NULL: none) into *out (zeroed first): PG_ERR_USAGE when it
 * is NULL or no JSON object, PG_ERR_NOMEM when out of memory; missing or
 * mistyped keys are no error (their fields say so). Free with
 * eval_config_doc_free, also after a failure. */
pg_status eval_config_read(const char *json, eval_config_doc *out, pg_err *err);

/* Replaces keys[0 .. n-1] of d->tree (or appends those it lacks, in that
 * order) with their values in eval_config_write(c), the tree's other keys
 * kept as stored, then reads d's fields again (c may borrow from d: it is
 * written first). For a resume that records what it found (the servers'
 * models, where they are now, a plan the run lacked). PG_ERR_NOMEM. */
pg_status eval_config_doc_update(eval_config_doc *d, const eval_run_config *c,
                                 const char *const *keys, int n, pg_err *err);

/* Frees what d owns (not d itself); a zeroed doc is a no-op. */
void eval_config_doc_free(eval_config_doc *d);

#endif /* PG_EVAL_CONFIG_H */
