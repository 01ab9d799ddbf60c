/* schema.c: the SQL of precgate's schema migrations (see schema.h); version N is entry N-1. */
#include "schema.h"

/* A migration entry whose recorded version is spelled from the same literal. */
#define SCHEMA_MIGRATION(v, body) { (v), (body), "PRAGMA user_version = " #v }

/*
 * The comments inside each CREATE statement are kept by SQLite in
 * sqlite_schema, so `.schema` in the sqlite3 shell shows them to users.
 *
 * Migrations run with foreign_keys OFF (store.c checks foreign_key_check
 * before committing each one), so a later step may rebuild a table the way
 * https://www.sqlite.org/lang_altertable.html describes. Plain CREATE (no
 * IF NOT EXISTS): a step applied twice fails loudly instead of passing.
 */
const schema_migration schema_migrations[] = {
    SCHEMA_MIGRATION(1,
        "CREATE TABLE runs (\n"
        "    id          INTEGER PRIMARY KEY,\n"
        "    kind        TEXT NOT NULL,         -- 'sweep', 'eval', ...\n"
        "    label       TEXT,\n"
        "    status      TEXT NOT NULL CHECK (status IN ('running', 'complete', 'failed')),\n"
        "    started_at  TEXT NOT NULL,         -- UTC, 'YYYY-MM-DDTHH:MM:SS.sssZ'\n"
        "    finished_at TEXT,                  -- same format; NULL while running\n"
        "    git_rev     TEXT,\n"
        "    host        TEXT,\n"
        "    device      TEXT,\n"
        "    config_json TEXT,\n"
        "    CHECK ((status = 'running') = (finished_at IS NULL))\n"
        ");\n"
        "CREATE INDEX runs_kind_started ON runs (kind, started_at);\n"
        "\n"
        "CREATE TABLE layer_metrics (\n"
        "    run_id    INTEGER NOT NULL REFERENCES runs (id),\n"
        "    capture   TEXT    NOT NULL,\n"
        "    layer     INTEGER NOT NULL CHECK (layer >= 0),\n"
        "    head      INTEGER NOT NULL CHECK (head >= -1),  -- -1: the whole layer\n"
        "    variant   TEXT    NOT NULL\n"
        "              CHECK (variant IN ('bf16', 'fp8kv', 'fp8qkv') OR variant GLOB 'ext:?*'),\n"
        "    backend   TEXT    NOT NULL CHECK (backend IN ('cpu', 'cuda')),\n"
        "    -- Error metrics (harness/metrics.h); +inf when the output had NaN/Inf.\n"
        "    rel_l2    REAL,\n"
        "    max_abs   REAL,\n"
        "    mean_abs  REAL,\n"
        "    p99_abs   REAL,\n"
        "    cos_sim   REAL,    -- NULL: the cosine was NaN (zero or non-finite output)\n"
        "    sqnr_db   REAL,    -- +inf: identical output; -inf: non-finite output\n"
        "    nan_count INTEGER NOT NULL CHECK (nan_count >= 0),\n"
        "    inf_count INTEGER NOT NULL CHECK (inf_count >= 0),\n"
        "    UNIQUE (run_id, capture, layer, head, variant, backend)\n"
        ");\n"
        "CREATE INDEX layer_metrics_run_variant ON layer_metrics (run_id, variant);\n"
        "\n"
        "CREATE TABLE quant_stats (\n"
        "    run_id         INTEGER NOT NULL REFERENCES runs (id),\n"
        "    capture        TEXT    NOT NULL,\n"
        "    layer          INTEGER NOT NULL CHECK (layer >= 0),\n"
        "    tensor         TEXT    NOT NULL CHECK (tensor IN ('q', 'k', 'v')),\n"
        "    scale          REAL    NOT NULL,\n"
        "    scale_source   TEXT    NOT NULL CHECK (scale_source IN ('capture', 'calibrated')),\n"
        "    saturated_frac REAL,   -- NULL: the fraction was NaN (nothing to count)\n"
        "    underflow_frac REAL,   -- NULL: the fraction was NaN (nothing to count)\n"
        "    UNIQUE (run_id, capture, layer, tensor)\n"
        ");\n"),
    SCHEMA_MIGRATION(2,
        "-- Why a run failed: the message precgate printed, NULL unless status = 'failed'.\n"
        "ALTER TABLE runs ADD COLUMN error TEXT;\n"),
    /* The GPU backend's --check-spec rows ('bf16~spec': a GPU mode against the
     * CPU specification's output) need a wider variant CHECK: SQLite cannot
     * alter a CHECK, so the table is rebuilt (lang_altertable.html, section 7). */
    SCHEMA_MIGRATION(3,
        "CREATE TABLE layer_metrics_v3 (\n"
        "    run_id    INTEGER NOT NULL REFERENCES runs (id),\n"
        "    capture   TEXT    NOT NULL,\n"
        "    layer     INTEGER NOT NULL CHECK (layer >= 0),\n"
        "    head      INTEGER NOT NULL CHECK (head >= -1),  -- -1: the whole layer\n"
        "    -- A mode against the fp64 reference, an external output (ext:NAME), or a\n"
        "    -- GPU mode against the CPU specification's output (MODE~spec).\n"
        "    variant   TEXT    NOT NULL CHECK (variant IN ('bf16', 'fp8kv', 'fp8qkv',\n"
        "                                                  'bf16~spec', 'fp8kv~spec', 'fp8qkv~spec')\n"
        "                                      OR variant GLOB 'ext:?*'),\n"
        "    backend   TEXT    NOT NULL CHECK (backend IN ('cpu', 'cuda')),\n"
        "    -- Error metrics (harness/metrics.h); +inf when the output had NaN/Inf.\n"
        "    rel_l2    REAL,\n"
        "    max_abs   REAL,\n"
        "    mean_abs  REAL,\n"
        "    p99_abs   REAL,\n"
        "    cos_sim   REAL,    -- NULL: the cosine was NaN (zero or non-finite output)\n"
        "    sqnr_db   REAL,    -- +inf: identical output; -inf: non-finite output\n"
        "    nan_count INTEGER NOT NULL CHECK (nan_count >= 0),\n"
        "    inf_count INTEGER NOT NULL CHECK (inf_count >= 0),\n"
        "    UNIQUE (run_id, capture, layer, head, variant, backend)\n"
        ");\n"
        "INSERT INTO layer_metrics_v3 SELECT * FROM layer_metrics;\n"
        "DROP TABLE layer_metrics;\n"
        "ALTER TABLE layer_metrics_v3 RENAME TO layer_metrics;\n"
        "CREATE INDEX layer_metrics_run_variant ON layer_metrics (run_id, variant);\n"),
};

const int schema_migration_count = (int)(sizeof schema_migrations / sizeof schema_migrations[0]);
