/*
 * diverge_config.h: a diverge run's configuration (runs.config_json of a
 * run of kind "diverge"), typed, with one writer and one reader.
 *
 * diverge_config_write is the only code that turns what defines a
 * divergence run into its config_json, diverge_config_read the only one
 * that turns a stored config back into fields; the keys are run_config.h's.
 * `precgate diverge` writes it and compares it on --resume (the writer's
 * tree against the stored one, key by key); merge and the completeness
 * check read it.
 */
#ifndef PG_DIVERGE_CONFIG_H
#define PG_DIVERGE_CONFIG_H

#include <cjson/cJSON.h>

#include "base/status.h"
#include "db/run_config.h"

/* What "kind" records. */
#define DIVERGE_CONFIG_KIND "diverge"

/* A diverge run's configuration. The writer's input: strings borrowed from
 * the caller. What diverge_config_read fills: strings borrowed from the
 * diverge_config_doc; NULL, -1 counts or the _known flags 0 where the
 * stored config lacks the key or holds another type; lists of strings with
 * NULL entries where the stored entry is none. */
typedef struct diverge_run_config {
    const char *kind;              /* read only: the writer records DIVERGE_CONFIG_KIND */
    const char *reference;         /* the mode compared against */
    int top_k, top_k_known;        /* known: a whole number */
    int noise_floor, noise_floor_known;  /* known: a JSON bool */
    const char *sequences_digest;  /* before any --shard */
    /* The modes: written as their distinct names sorted (the order of the
     * --endpoint options defines nothing); read as stored. */
    const char *const *modes;
    int n_modes;
    /* A part of a sharded job: part.count > 0, written with
     * "shard_sequences", the ids it owns. Read: n_shard_sequences -1 when
     * "shard_sequences" is no array. */
    run_config_part part;
    const char *const *shard_sequences;
    int n_shard_sequences;
} diverge_run_config;

/* The config c as a new JSON object (caller deletes), its keys in the order
 * diverge runs have always recorded them; NULL when out of memory. */
cJSON *diverge_config_write(const diverge_run_config *c);

/* A stored diverge config, parsed: c borrows from tree. */
typedef struct diverge_config_doc {
    cJSON *tree;           /* the parsed config_json (owned): what --resume compares */
    diverge_run_config c;  /* its typed fields */
    const char **storage[2];  /* the modes' and shard_sequences' storage (owned) */
} diverge_config_doc;

/* Parses json (NULL: none) into *out (zeroed first): PG_ERR_USAGE when it
 * is NULL or no JSON object, PG_ERR_NOMEM when out of memory; missing or
 * mistyped keys are no error (their fields say so). Free with
 * diverge_config_doc_free, also after a failure. */
pg_status diverge_config_read(const char *json, diverge_config_doc *out, pg_err *err);

/* Frees what d owns (not d itself); a zeroed doc is a no-op. */
void diverge_config_doc_free(diverge_config_doc *d);

#endif /* PG_DIVERGE_CONFIG_H */
