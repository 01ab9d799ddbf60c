/*
 * run_config.h: the run's configuration (runs.config_json), declared once.
 *
 * A run records what defines its numbers as one JSON object in
 * runs.config_json. Every key of it is named here, and nowhere else: the
 * commands that write a config (a sweep, an eval, a diverge run, a shard
 * part), the lifecycles that read one back (--resume, merge, the gate's
 * completeness check) and the store's SQL that reads a field in place
 * (the gate's automatic baseline, merge's parts, schema migrations) all
 * take the key from these names, so that the dependency of db/ on what a
 * run records is a header the layers can see.
 *
 * Every kind's config is typed, with one writer and one reader: a sweep's
 * here (run_config_write, run_config_read), an eval's in db/eval_config.h,
 * a diverge run's in db/diverge_config.h. What else touches a stored
 * config as JSON (--resume's key-by-key comparison, merge's and the gate's
 * comparison of whole configs, the SQL below) takes its keys from the
 * names here.
 */
#ifndef PG_RUN_CONFIG_H
#define PG_RUN_CONFIG_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "base/status.h"
#include "db/store.h"

/* ---- keys every kind of run may record ---------------------------------- */
#define RUN_CONFIG_GIT_REV "git_rev"            /* the precgate build */
#define RUN_CONFIG_THREADS "threads"            /* CPU threads: speed only */
#define RUN_CONFIG_JOB "job"                    /* a shard part's job key */
#define RUN_CONFIG_SHARD "shard"                /* a shard part's {"index", "count"} */
#define RUN_CONFIG_SHARD_INDEX "index"          /* inside "shard" */
#define RUN_CONFIG_SHARD_COUNT "count"          /* inside "shard" */
#define RUN_CONFIG_MODES "modes"                /* eval and diverge modes */
#define RUN_CONFIG_SCALES "scales"              /* a sweep's --scales policy */
#define RUN_CONFIG_VARIANTS "variants"          /* a sweep's kernel profiles, full names */
#define RUN_CONFIG_KIND "kind"                  /* a diverge run's "diverge" */

/* ---- a sweep (precgate run) --------------------------------------------- */
#define RUN_CONFIG_CAPTURE "capture"            /* the capture as given: its rows' name */
#define RUN_CONFIG_CAPTURE_DIGEST "capture_digest"
#define RUN_CONFIG_MODEL "model"
#define RUN_CONFIG_BACKEND_REQUESTED "backend_requested"
#define RUN_CONFIG_BACKEND "backend"            /* the backend that ran */
#define RUN_CONFIG_CHECK_SPEC "check_spec"
#define RUN_CONFIG_ATTRIBUTE "attribute"
#define RUN_CONFIG_PAGE_SEED "page_seed"        /* a JSON number: informative */
#define RUN_CONFIG_PAGE_SEED_DECIMAL "page_seed_decimal"  /* exact, as decimal text */
#define RUN_CONFIG_LAYERS "layers"
#define RUN_CONFIG_SEQUENCES "sequences"
#define RUN_CONFIG_TOKENS_Q "tokens_q"
#define RUN_CONFIG_TOKENS_KV "tokens_kv"
#define RUN_CONFIG_BLOCK_SIZE "block_size"
#define RUN_CONFIG_LAYER_ROWS "layer_rows"      /* {table: [rows of each layer]} */
#define RUN_CONFIG_SHARD_LAYERS "shard_layers"  /* the layers a sweep part owns */
/* Recorded by runs before kernel profiles (migration 10 reads it). */
#define RUN_CONFIG_P_ROUNDING "p_rounding"

/* ---- an eval (precgate eval) -------------------------------------------- */
#define RUN_CONFIG_CONFIG_VERSION "config_version"
#define RUN_CONFIG_TRACES "traces"
#define RUN_CONFIG_TRACES_DIGEST "traces_digest"
#define RUN_CONFIG_EVAL "eval"
#define RUN_CONFIG_SOURCE "source"              /* "replay" or "live" */
#define RUN_CONFIG_EXTRACTOR "extractor"
#define RUN_CONFIG_LIMIT "limit"
#define RUN_CONFIG_PROMPT_TEMPLATE "prompt_template"
#define RUN_CONFIG_ENDPOINTS "endpoints"
#define RUN_CONFIG_MODELS "models"
#define RUN_CONFIG_EFFORTS "efforts"
#define RUN_CONFIG_SAMPLES "samples"
#define RUN_CONFIG_TEMPERATURE "temperature"
#define RUN_CONFIG_TOP_P "top_p"
#define RUN_CONFIG_SEED "seed"
#define RUN_CONFIG_MAX_TOKENS "max_tokens"
#define RUN_CONFIG_EVAL_MODEL "model"
#define RUN_CONFIG_API_KEY_ENV "api_key_env"
#define RUN_CONFIG_PLAN "plan"                  /* {"problems", "modes", "efforts", "samples"} */
#define RUN_CONFIG_PLAN_PROBLEMS "problems"     /* inside "plan" */
#define RUN_CONFIG_SHARD_PROBLEMS "shard_problems"

/* ---- a diverge run (precgate diverge) ----------------------------------- */
#define RUN_CONFIG_SEQUENCES_DIGEST "sequences_digest"
#define RUN_CONFIG_REFERENCE "reference"
#define RUN_CONFIG_TOP_K "top_k"
#define RUN_CONFIG_NOISE_FLOOR "noise_floor"
#define RUN_CONFIG_SHARD_SEQUENCES "shard_sequences"

/* The SQL text of the JSON path of top-level key, a quoted literal for
 * json_extract/json_type: RUN_CONFIG_SQL_PATH(RUN_CONFIG_SCALES) is '$.scales'. */
#define RUN_CONFIG_SQL_PATH(key) "'$." key "'"
/* The same for key inside object parent: '$.shard.index'. */
#define RUN_CONFIG_SQL_SUBPATH(parent, key) "'$." parent "." key "'"

/* Longest JSON path run_config_path builds, its NUL included. */
#define RUN_CONFIG_PATH_MAX 64

/* The JSON path of top-level key ("$.KEY") into out, for a path bound as a
 * parameter; PG_ERR_INTERNAL when key is NULL or the path does not fit. */
pg_status run_config_path(const char *key, char out[RUN_CONFIG_PATH_MAX], pg_err *err);

/* Largest magnitude of a whole number the readers take as an int (a
 * count, a K, an index); beyond it the field reads as unknown. */
#define RUN_CONFIG_INT_MAX 1000000000

/* String member key of o, or NULL (missing or no string). For the readers. */
const char *run_config_string(const cJSON *o, const char *key);

/* Whether member key of o is a whole number within +-RUN_CONFIG_INT_MAX,
 * into *out (untouched when not). For the readers. */
int run_config_int(const cJSON *o, const char *key, int *out);

/* Whether text (NULL: absent) is an unsigned integer as --seed takes one
 * (strtoull, base prefixes included, never negative), into *out. */
int run_config_u64_text(const char *text, unsigned long long *out);

/* The array member key of o as a list: *n its size, -1 when key is no
 * array; (*storage)[i] the i-th entry's string, NULL where it is none.
 * *list points at the storage (owned by the caller: free it). PG_ERR_NOMEM. */
pg_status run_config_read_strings(const cJSON *o, const char *key, const char ***storage,
                                  const char *const **list, int *n, pg_err *err);

/* The distinct strings of names[0 .. n-1] (NULL entries skipped), sorted by
 * strcmp, added to o as array key (lists whose order defines nothing: the
 * modes, the efforts); 0 when out of memory. */
int run_config_add_sorted(cJSON *o, const char *key, const char *const *names, int n);

/* Adds names[0 .. n-1], in their order, to o as array key; 0 when out of memory. */
int run_config_add_strings(cJSON *o, const char *key, const char *const *names, int n);

/* A stored run's place in a sharded job, one shape for every run kind.
 * Written (run_config_add_part) when count > 0: "job" and "shard":
 * {"index", "count"}. Read (run_config_read_part): known when "shard"
 * exists; readable when index and count are numbers and job a string;
 * job NULL when no string, index and count 0 where no number. */
typedef struct run_config_part {
    const char *job;
    int index, count;
    int known, readable;
} run_config_part;

/* Adds p's "job" and "shard" to o; 0 when out of memory. Every kind's
 * writer records a part with it. */
int run_config_add_part(cJSON *o, const run_config_part *p);

/* run_config_add_part, then owned_key: the ids owned[0 .. n-1] the part
 * owns (an eval's problems, a diverge run's sequences); 0 when out of
 * memory. */
int run_config_add_part_owning(cJSON *o, const run_config_part *p, const char *owned_key,
                               const char *const *owned, int n);

/* Reads o's "job" and "shard" into *p (zeroed first). */
void run_config_read_part(const cJSON *o, run_config_part *p);

/* A sweep's configuration. The writer's input: every string borrowed from
 * the caller, NULL where absent. What run_config_read fills: strings
 * borrowed from the run_config_doc; NULL (or the _known flags 0) where the
 * stored config lacks the key or holds another type. */
typedef struct run_config {
    const char *capture, *capture_digest, *model;
    const char *const *variants;  /* n_variants full profile names */
    int n_variants;               /* read: -1 when "variants" is no non-empty list of strings */
    const char *backend_requested, *backend;
    int check_spec, check_spec_known;  /* known: the stored value is a JSON bool */
    const char *scales;                /* the policy's name */
    int attribute, attribute_known;    /* known: "attribute" is recorded (runs before
                                          --attribute lack it) */
    long threads;
    unsigned long long page_seed;      /* written as a number and as exact decimal text;
                                          read from the text */
    int page_seed_known;               /* read only: the text is an unsigned integer */
    const char *git_rev;
    int layers, sequences;
    long long tokens_q, tokens_kv;
    int block_size;
    /* What each layer holds when whole (run_complete.h): layers entries;
     * NULL when not written. Read: only layer_rows_known (the key exists). */
    const store_layer_rows *layer_rows;
    int layer_rows_known;
    /* A part of a sharded job: part.count > 0, written with the
     * shard_layers it owns. Read: n_shard_layers -1 when "shard_layers" is
     * no array; an entry that is no number reads as -1. */
    run_config_part part;
    const int *shard_layers;
    int n_shard_layers;
    const char *p_rounding;            /* read only: runs before kernel profiles */
} run_config;

/* The tables of "layer_rows", in their order, and where each one's count
 * lands in a store_layer_rows. */
typedef struct run_config_layer_table {
    const char *table;
    size_t offset;  /* of its int64_t count in store_layer_rows */
    int since_schema; /* 0, or the schema version that made the table: a config
                         written before it has no array for it, and its count
                         is then not checked */
} run_config_layer_table;
#define RUN_CONFIG_LAYER_TABLES 6
extern const run_config_layer_table run_config_layer_tables[RUN_CONFIG_LAYER_TABLES];

/* Adds "layer_rows" to o from rows[0 .. n_layers-1] (one array per
 * run_config_layer_tables entry); PG_ERR_NOMEM
 * when out of memory. For the writer, and for a run resumed from before
 * runs recorded it. */
pg_status run_config_add_layer_rows(cJSON *o, const store_layer_rows *rows, int n_layers,
                                    pg_err *err);

/* The config c as a new JSON object (caller deletes), its keys in the order
 * runs have always recorded them; NULL when out of memory. */
cJSON *run_config_write(const run_config *c);

/* A stored sweep config, parsed: c borrows from tree. */
typedef struct run_config_doc {
    cJSON *tree;   /* the parsed config_json (owned): what --resume compares key by key */
    run_config c;  /* its typed fields */
    const char **variant_names;  /* c.variants' storage (owned) */
    int *shard_layer_ids;        /* c.shard_layers' storage (owned) */
} run_config_doc;

/* Parses json (NULL: none) into *out (zeroed first): PG_ERR_USAGE when it
 * is NULL or not JSON, PG_ERR_NOMEM when out of memory; missing or
 * mistyped keys are no error (their fields say so). Free with
 * run_config_doc_free, also after a failure. */
pg_status run_config_read(const char *json, run_config_doc *out, pg_err *err);

/* Frees what d owns (not d itself); a zeroed doc is a no-op. */
void run_config_doc_free(run_config_doc *d);

#endif /* PG_RUN_CONFIG_H */
