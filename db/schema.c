/* schema.c: the SQL of precgate's schema migrations (see schema.h); version N is entry N-1. */
#include "schema.h"

#include "run_config.h"

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
    /* End-task evals (db/eval_store.h, evals/score.h): one row per sample as
     * it completes (the resume key is the UNIQUE tuple), and the statistics
     * a scoring pass derives from them, replaced when a run is re-scored. */
    SCHEMA_MIGRATION(4,
        "CREATE TABLE eval_samples (\n"
        "    run_id            INTEGER NOT NULL REFERENCES runs (id),\n"
        "    eval              TEXT    NOT NULL,   -- 'aime25', ...\n"
        "    mode              TEXT    NOT NULL,   -- precision mode: 'bf16', 'fp8kv', ...\n"
        "    effort            TEXT    NOT NULL,   -- reasoning effort: 'low', 'medium', 'high'\n"
        "    problem_id        TEXT    NOT NULL,\n"
        "    sample            INTEGER NOT NULL CHECK (sample >= 0),  -- 0 .. K-1\n"
        "    -- ok: answered; truncated: cut at the token limit (graded, counted);\n"
        "    -- error: no answer (left out of every denominator, retried on --resume).\n"
        "    status            TEXT    NOT NULL CHECK (status IN ('ok', 'truncated', 'error')),\n"
        "    attempts          INTEGER,            -- requests made, retries included\n"
        "    latency_ms        REAL,               -- of the last attempt\n"
        "    finish_reason     TEXT,               -- the server's: 'stop', 'length', ...\n"
        "    prompt_tokens     INTEGER,\n"
        "    completion_tokens INTEGER,\n"
        "    content           TEXT,               -- the answer text as received\n"
        "    extracted         INTEGER,            -- the answer parsed from content; NULL: none\n"
        "    correct           INTEGER CHECK (correct IN (0, 1) OR correct IS NULL),\n"
        "                                          -- NULL only for status 'error'\n"
        "    error             TEXT,               -- why it failed (status 'error')\n"
        "    UNIQUE (run_id, eval, mode, effort, problem_id, sample)\n"
        ");\n"
        "\n"
        "CREATE TABLE eval_scores (\n"
        "    run_id       INTEGER NOT NULL REFERENCES runs (id),\n"
        "    eval         TEXT    NOT NULL,\n"
        "    mode         TEXT    NOT NULL,\n"
        "    effort       TEXT    NOT NULL,\n"
        "    n_problems   INTEGER NOT NULL,  -- problems scored (>= 1 ok/truncated sample)\n"
        "    k            INTEGER NOT NULL,  -- samples per problem (K)\n"
        "    accuracy     REAL,     -- avg@K: mean of per-problem means; NULL: nothing scored\n"
        "    stderr       REAL,     -- clustered by problem: sd(per-problem means)/sqrt(n)\n"
        "    ci_low       REAL,     -- 95% interval of accuracy (method: ci_method);\n"
        "    ci_high      REAL,     -- stderr and the interval are NULL below 2 problems\n"
        "    n_errors     INTEGER NOT NULL,  -- error samples (excluded, not wrong)\n"
        "    n_truncated  INTEGER NOT NULL,  -- truncated samples (counted)\n"
        "    ci_method    TEXT    NOT NULL,\n"
        "    pass_at_json TEXT    NOT NULL,  -- {\"1\": pass@1, \"2\": ...}, k = 1..K; null: undefined\n"
        "    n_empty      INTEGER NOT NULL,  -- problems with no ok/truncated sample (excluded)\n"
        "    n_missing    INTEGER NOT NULL,  -- planned samples not stored when scored\n"
        "    UNIQUE (run_id, eval, mode, effort)\n"
        ");\n"
        "\n"
        "CREATE TABLE eval_pairs (\n"
        "    run_id     INTEGER NOT NULL REFERENCES runs (id),\n"
        "    eval       TEXT    NOT NULL,\n"
        "    effort     TEXT    NOT NULL,\n"
        "    mode_a     TEXT    NOT NULL,\n"
        "    mode_b     TEXT    NOT NULL,\n"
        "    n_problems INTEGER NOT NULL,   -- problems scored in both modes\n"
        "    mean_diff  REAL,   -- mean over problems of (mean_a - mean_b): A minus B\n"
        "    stderr     REAL,   -- paired: sd(differences)/sqrt(n)\n"
        "    ci_low     REAL,   -- 95% paired percentile bootstrap over problems\n"
        "    ci_high    REAL,\n"
        "    wins       INTEGER NOT NULL,   -- problems where A's mean is higher\n"
        "    losses     INTEGER NOT NULL,   -- problems where B's mean is higher\n"
        "    ties       INTEGER NOT NULL,\n"
        "    sign_p     REAL    NOT NULL,   -- exact two-sided sign test (ties dropped)\n"
        "    mde        REAL,   -- smallest |diff| detectable: 2.8016 * sd/sqrt(n) (80% power, alpha .05)\n"
        "    CHECK (mode_a <> mode_b),\n"
        "    UNIQUE (run_id, eval, effort, mode_a, mode_b)\n"
        ");\n"),
    /* An eval run with samples that failed after every retry is 'incomplete'
     * (its scores exclude them and say how many); the runs CHECK is rebuilt
     * to allow it (lang_altertable.html, section 7; foreign keys are off). */
    SCHEMA_MIGRATION(5,
        "CREATE TABLE runs_v5 (\n"
        "    id          INTEGER PRIMARY KEY,\n"
        "    kind        TEXT NOT NULL,         -- 'sweep', 'eval', ...\n"
        "    label       TEXT,\n"
        "    -- 'incomplete': finished, but some samples failed after every retry\n"
        "    status      TEXT NOT NULL CHECK (status IN ('running', 'complete', 'incomplete',\n"
        "                                                'failed')),\n"
        "    started_at  TEXT NOT NULL,         -- UTC, 'YYYY-MM-DDTHH:MM:SS.sssZ'\n"
        "    finished_at TEXT,                  -- same format; NULL while running\n"
        "    git_rev     TEXT,\n"
        "    host        TEXT,\n"
        "    device      TEXT,\n"
        "    config_json TEXT,\n"
        "    error       TEXT,                  -- why it failed; NULL unless 'failed'\n"
        "    CHECK ((status = 'running') = (finished_at IS NULL))\n"
        ");\n"
        "INSERT INTO runs_v5 (id, kind, label, status, started_at, finished_at, git_rev, host,\n"
        "                     device, config_json, error)\n"
        "    SELECT id, kind, label, status, started_at, finished_at, git_rev, host, device,\n"
        "           config_json, error FROM runs;\n"
        "DROP TABLE runs;\n"
        "ALTER TABLE runs_v5 RENAME TO runs;\n"
        "CREATE INDEX runs_kind_started ON runs (kind, started_at);\n"),
    /* The regression gate (harness/regress.h, db/gate_store.h): named
     * baselines, and every verdict of `precgate gate`, one row per
     * comparison; gating a run again replaces its rows in one transaction. */
    SCHEMA_MIGRATION(6,
        "CREATE TABLE baselines (\n"
        "    name    TEXT PRIMARY KEY,     -- 'default', a run label, ...\n"
        "    run_id  INTEGER NOT NULL REFERENCES runs (id),\n"
        "    set_at  TEXT NOT NULL         -- UTC, 'YYYY-MM-DDTHH:MM:SS.sssZ'\n"
        ");\n"
        "\n"
        "CREATE TABLE flags (\n"
        "    id              INTEGER PRIMARY KEY,\n"
        "    run_id          INTEGER NOT NULL REFERENCES runs (id),   -- the gated run\n"
        "    baseline_run_id INTEGER REFERENCES runs (id),   -- NULL: no baseline run\n"
        "    -- layer: against the baseline run; mode_pair: a mode against bf16 in the\n"
        "    -- same run; eval: end-task accuracy (within the run and against the baseline).\n"
        "    scope           TEXT NOT NULL CHECK (scope IN ('layer', 'mode_pair', 'eval')),\n"
        "    capture         TEXT,     -- layer and mode_pair scopes\n"
        "    layer           INTEGER,\n"
        "    variant         TEXT,     -- 'fp8kv', or 'fp8kv-bf16' for a pair\n"
        "    eval            TEXT,     -- eval scope\n"
        "    mode            TEXT,\n"
        "    effort          TEXT,\n"
        "    metric          TEXT NOT NULL,  -- 'rel_l2', 'nonfinite', 'present', 'accuracy',\n"
        "                                    -- 'diff_vs_bf16', ...\n"
        "    value           REAL,     -- this run's value (eval diff_vs_*: the difference)\n"
        "    baseline_value  REAL,     -- what it was compared with\n"
        "    threshold       REAL,     -- the bound applied (eval: min_effect)\n"
        "    verdict         TEXT NOT NULL CHECK (verdict IN ('pass', 'regression', 'improvement',\n"
        "                                                     'no change', 'inconclusive',\n"
        "                                                     'error')),\n"
        "    message         TEXT NOT NULL   -- the numbers and why, as printed\n"
        ");\n"
        "CREATE INDEX flags_run ON flags (run_id, verdict);\n"),
    /* Per-problem means of an eval, the unit every score above averages over
     * (errors excluded, truncated samples counted as graded), as a view so it
     * can never disagree with eval_samples. */
    SCHEMA_MIGRATION(7,
        "CREATE VIEW eval_problem_means AS\n"
        "SELECT run_id, eval, mode, effort, problem_id,\n"
        "       sum(status <> 'error') AS n_valid,      -- ok + truncated samples\n"
        "       sum(status = 'error') AS n_errors,\n"
        "       sum(CASE WHEN status <> 'error' THEN correct ELSE 0 END) AS n_correct,\n"
        "       avg(CASE WHEN status <> 'error' THEN correct END) AS mean  -- NULL: no valid sample\n"
        "FROM eval_samples GROUP BY run_id, eval, mode, effort, problem_id;\n"),
    /* Interrupted runs (store.h): a run stopped by SIGINT/SIGTERM says so
     * ('interrupted', finished, its error naming the signal); one killed
     * outright cannot, so every run records its process id and a heartbeat,
     * and readers probe whether a 'running' run's process still exists on
     * its host. The runs CHECK is rebuilt as in migration 5. Rows written
     * before this step keep pid and heartbeat_at NULL: their process cannot
     * be probed, so a 'running' one still needs --force to be resumed. */
    SCHEMA_MIGRATION(8,
        "CREATE TABLE runs_v8 (\n"
        "    id           INTEGER PRIMARY KEY,\n"
        "    kind         TEXT NOT NULL,        -- 'sweep', 'eval', ...\n"
        "    label        TEXT,\n"
        "    -- 'incomplete': finished, but some samples failed after every retry;\n"
        "    -- 'interrupted': stopped by a signal (error names it), resumable\n"
        "    status       TEXT NOT NULL CHECK (status IN ('running', 'complete', 'incomplete',\n"
        "                                                 'failed', 'interrupted')),\n"
        "    started_at   TEXT NOT NULL,        -- UTC, 'YYYY-MM-DDTHH:MM:SS.sssZ'\n"
        "    finished_at  TEXT,                 -- same format; NULL while running\n"
        "    git_rev      TEXT,\n"
        "    host         TEXT,                 -- gethostname() of the process that ran it\n"
        "    device       TEXT,\n"
        "    config_json  TEXT,\n"
        "    error        TEXT,                 -- why it failed or what interrupted it;\n"
        "                                       -- NULL unless 'failed' or 'interrupted'\n"
        "    pid          INTEGER,              -- process id on host (of the last resume);\n"
        "                                       -- NULL: recorded before schema version 8\n"
        "    heartbeat_at TEXT,                 -- same format as started_at: the last sign\n"
        "                                       -- of life (begin, resume, stored batch/layer)\n"
        "    CHECK ((status = 'running') = (finished_at IS NULL))\n"
        ");\n"
        "INSERT INTO runs_v8 (id, kind, label, status, started_at, finished_at, git_rev, host,\n"
        "                     device, config_json, error)\n"
        "    SELECT id, kind, label, status, started_at, finished_at, git_rev, host, device,\n"
        "           config_json, error FROM runs;\n"
        "DROP TABLE runs;\n"
        "ALTER TABLE runs_v8 RENAME TO runs;\n"
        "CREATE INDEX runs_kind_started ON runs (kind, started_at);\n"),
    /* run --scales (harness/sweep.h sweep_scales): quant_stats.scale_source
     * names the policy, so its CHECK is rebuilt as layer_metrics' was in
     * migration 3. 'calibrated' (amax / 448, the only rule besides the
     * capture's before this step) becomes 'amax', the same rule. A sweep run
     * whose config_json lacks "scales" gets it from its quant_stats rows when
     * they all name one policy, so that resume and the gate's defining
     * content (db/gate_store.h) see the policy it ran under; a run without
     * such rows (bf16 only, or mixed) keeps no "scales". */
    SCHEMA_MIGRATION(9,
        "CREATE TABLE quant_stats_v9 (\n"
        "    run_id         INTEGER NOT NULL REFERENCES runs (id),\n"
        "    capture        TEXT    NOT NULL,\n"
        "    layer          INTEGER NOT NULL CHECK (layer >= 0),\n"
        "    tensor         TEXT    NOT NULL CHECK (tensor IN ('q', 'k', 'v')),\n"
        "    scale          REAL    NOT NULL,\n"
        "    -- run --scales: the capture's metadata, amax / 448, vLLM's calc_kv_scales\n"
        "    -- (amax / 200 for q and k, / 100 for v) or 1.0\n"
        "    scale_source   TEXT NOT NULL\n"
        "                   CHECK (scale_source IN ('capture', 'amax', 'vllm-dynamic', 'unit')),\n"
        "    saturated_frac REAL,   -- NULL: the fraction was NaN (nothing to count)\n"
        "    underflow_frac REAL,   -- NULL: the fraction was NaN (nothing to count)\n"
        "    UNIQUE (run_id, capture, layer, tensor)\n"
        ");\n"
        "INSERT INTO quant_stats_v9\n"
        "    SELECT run_id, capture, layer, tensor, scale,\n"
        "           CASE scale_source WHEN 'calibrated' THEN 'amax' ELSE scale_source END,\n"
        "           saturated_frac, underflow_frac FROM quant_stats;\n"
        "DROP TABLE quant_stats;\n"
        "ALTER TABLE quant_stats_v9 RENAME TO quant_stats;\n"
        "UPDATE runs SET config_json = json_set(config_json, " RUN_CONFIG_SQL_PATH(RUN_CONFIG_SCALES) ",\n"
        "        (SELECT min(q.scale_source) FROM quant_stats q WHERE q.run_id = runs.id))\n"
        "    WHERE kind = 'sweep' AND json_valid(config_json)\n"
        "      AND json_type(config_json) = 'object'\n"
        "      AND json_extract(config_json, " RUN_CONFIG_SQL_PATH(RUN_CONFIG_SCALES) ") IS NULL\n"
        "      AND (SELECT count(DISTINCT q.scale_source) FROM quant_stats q\n"
        "           WHERE q.run_id = runs.id) = 1;\n"),
    /* Kernel profiles (harness/variant_name.h): a variant is stored under its
     * full name, MODE@PROFILE, so that runs of different numerics are never
     * one variant. layer_metrics' CHECK takes the grammar's forms (a
     * profile's name is the table's: kernels/attn_profile.h), rebuilt as in
     * migration 3. Older rows are renamed where a variant is stored: the
     * layer_metrics rows, the gate's layer and mode_pair flags ('fp8kv-bf16'
     * pairs too; their message keeps the text printed then) and sweep runs'
     * config_json "variants". 'fp8kv' was what fp8kv@fixed is; 'fp8qkv' with
     * P in e4m3 (run --p-rounding's default, the only rounding before it, and
     * the only one the GPU ran, so every 'fp8qkv~spec') was fp8qkv@ideal; a
     * run with --p-rounding bf16 or none becomes fp8qkv@ideal-p-bf16 or
     * fp8qkv@ideal-p-none, named for what it was and no profile of the table.
     * quant_stats has no variant; eval modes (eval_samples.mode and the
     * tables after it) are the serving stack's switch, not profiles. */
    SCHEMA_MIGRATION(10,
        "CREATE TEMP TABLE fp8qkv_v10 (run_id INTEGER PRIMARY KEY, name TEXT NOT NULL);\n"
        "INSERT INTO fp8qkv_v10\n"
        "    SELECT id, CASE coalesce(CASE WHEN json_valid(config_json)\n"
        "                                  AND json_type(config_json) = 'object'\n"
        "                             THEN json_extract(config_json, " RUN_CONFIG_SQL_PATH(RUN_CONFIG_P_ROUNDING) ") END,\n"
        "                             'e4m3')\n"
        "               WHEN 'e4m3' THEN 'fp8qkv@ideal'\n"
        "               ELSE 'fp8qkv@ideal-p-' || json_extract(config_json, " RUN_CONFIG_SQL_PATH(RUN_CONFIG_P_ROUNDING) ") END\n"
        "    FROM runs;\n"
        "CREATE TABLE layer_metrics_v10 (\n"
        "    run_id    INTEGER NOT NULL REFERENCES runs (id),\n"
        "    capture   TEXT    NOT NULL,\n"
        "    layer     INTEGER NOT NULL CHECK (layer >= 0),\n"
        "    head      INTEGER NOT NULL CHECK (head >= -1),  -- -1: the whole layer\n"
        "    -- A kernel profile against the fp64 reference ('bf16', 'fp8kv@fixed',\n"
        "    -- 'fp8qkv@fa3', ...: `precgate help profiles`), an external output\n"
        "    -- (ext:NAME), or a GPU profile against the CPU specification's output\n"
        "    -- (PROFILE~spec).\n"
        "    variant   TEXT    NOT NULL CHECK (variant IN ('bf16', 'bf16~spec')\n"
        "                                      OR variant GLOB 'fp8kv@?*'\n"
        "                                      OR variant GLOB 'fp8qkv@?*'\n"
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
        "INSERT INTO layer_metrics_v10\n"
        "    SELECT lm.run_id, lm.capture, lm.layer, lm.head,\n"
        "           CASE lm.variant WHEN 'fp8kv' THEN 'fp8kv@fixed'\n"
        "                           WHEN 'fp8kv~spec' THEN 'fp8kv@fixed~spec'\n"
        "                           WHEN 'fp8qkv' THEN coalesce(q.name, 'fp8qkv@ideal')\n"
        "                           WHEN 'fp8qkv~spec' THEN 'fp8qkv@ideal~spec'\n"
        "                           ELSE lm.variant END,\n"
        "           lm.backend, lm.rel_l2, lm.max_abs, lm.mean_abs, lm.p99_abs, lm.cos_sim,\n"
        "           lm.sqnr_db, lm.nan_count, lm.inf_count\n"
        "    FROM layer_metrics lm LEFT JOIN fp8qkv_v10 q ON q.run_id = lm.run_id;\n"
        "DROP TABLE layer_metrics;\n"
        "ALTER TABLE layer_metrics_v10 RENAME TO layer_metrics;\n"
        "CREATE INDEX layer_metrics_run_variant ON layer_metrics (run_id, variant);\n"
        "UPDATE flags SET variant =\n"
        "    CASE variant WHEN 'fp8kv' THEN 'fp8kv@fixed'\n"
        "                 WHEN 'fp8kv~spec' THEN 'fp8kv@fixed~spec'\n"
        "                 WHEN 'fp8kv-bf16' THEN 'fp8kv@fixed-bf16'\n"
        "                 WHEN 'fp8qkv~spec' THEN 'fp8qkv@ideal~spec'\n"
        "                 WHEN 'fp8qkv' THEN (SELECT name FROM fp8qkv_v10 WHERE run_id = flags.run_id)\n"
        "                 WHEN 'fp8qkv-bf16' THEN\n"
        "                     (SELECT name FROM fp8qkv_v10 WHERE run_id = flags.run_id) || '-bf16'\n"
        "    END\n"
        "    WHERE scope IN ('layer', 'mode_pair')\n"
        "      AND variant IN ('fp8kv', 'fp8kv~spec', 'fp8kv-bf16', 'fp8qkv', 'fp8qkv~spec',\n"
        "                      'fp8qkv-bf16');\n"
        "UPDATE runs SET config_json = json_set(config_json, " RUN_CONFIG_SQL_PATH(RUN_CONFIG_VARIANTS) ", json(\n"
        "        (SELECT json_group_array(name) FROM (\n"
        "             SELECT CASE e.value WHEN 'fp8kv' THEN 'fp8kv@fixed'\n"
        "                                 WHEN 'fp8qkv' THEN q.name\n"
        "                                 ELSE e.value END AS name\n"
        "             FROM json_each(runs.config_json, " RUN_CONFIG_SQL_PATH(RUN_CONFIG_VARIANTS) ") e, fp8qkv_v10 q\n"
        "             WHERE q.run_id = runs.id ORDER BY e.key))))\n"
        "    WHERE kind = 'sweep' AND json_valid(config_json)\n"
        "      AND json_type(config_json) = 'object'\n"
        "      AND json_type(config_json, " RUN_CONFIG_SQL_PATH(RUN_CONFIG_VARIANTS) ") = 'array';\n"
        "DROP TABLE fp8qkv_v10;\n"),
    /* Attribution per quantized tensor (run --attribute, harness/attribute.h):
     * each fp8 variant of a sweep run again with one tensor alone quantized,
     * the others kept bf16 (attn_quant_options.keep_bf16), on the CPU
     * specification; 'none' keeps all four (the profile's arithmetic alone:
     * the floor), 'all' none (the variant itself: the joint error). */
    SCHEMA_MIGRATION(11,
        "CREATE TABLE attribution (\n"
        "    run_id  INTEGER NOT NULL REFERENCES runs (id),\n"
        "    capture TEXT    NOT NULL,\n"
        "    layer   INTEGER NOT NULL CHECK (layer >= 0),\n"
        "    -- the fp8 profile attributed (its layer_metrics variant)\n"
        "    variant TEXT    NOT NULL CHECK (variant GLOB 'fp8kv@?*' OR variant GLOB 'fp8qkv@?*'),\n"
        "    -- the one tensor quantized ('q', 'k', 'v', 'p'), 'none' (every tensor bf16:\n"
        "    -- the profile's arithmetic alone) or 'all' (the variant itself: the joint error)\n"
        "    tensor  TEXT    NOT NULL CHECK (tensor IN ('none', 'q', 'k', 'v', 'p', 'all')),\n"
        "    -- whole layer against the fp64 reference (harness/metrics.h); +inf when\n"
        "    -- the output had NaN/Inf\n"
        "    rel_l2  REAL    NOT NULL,\n"
        "    UNIQUE (run_id, capture, layer, variant, tensor)\n"
        ");\n"),
    /* Each swept layer's attention shape (harness/sweep.c store_layer, in the
     * layer's transaction; counted by store_sweep_layer_rows for --resume),
     * for `precgate advise` (harness/advise.h): the KV bytes per token a
     * layer holds (2 x hkv x d elements) and whether it is a sliding-window
     * layer, which vLLM's --kv-cache-dtype-skip-layers sliding_window names.
     * Runs swept before this step have no rows; a resume records them. */
    SCHEMA_MIGRATION(12,
        "CREATE TABLE layer_shapes (\n"
        "    run_id    INTEGER NOT NULL REFERENCES runs (id),\n"
        "    capture   TEXT    NOT NULL,\n"
        "    layer     INTEGER NOT NULL CHECK (layer >= 0),\n"
        "    hq        INTEGER NOT NULL CHECK (hq > 0),      -- query heads\n"
        "    hkv       INTEGER NOT NULL CHECK (hkv > 0),     -- key/value heads\n"
        "    d         INTEGER NOT NULL CHECK (d > 0),       -- head dimension\n"
        "    window    INTEGER NOT NULL CHECK (window >= 0), -- 0: full attention, else keys seen\n"
        "    has_sinks INTEGER NOT NULL CHECK (has_sinks IN (0, 1)),  -- attention sinks\n"
        "    UNIQUE (run_id, capture, layer)\n"
        ");\n"),
    /* Issue #16 part 1: the scale-plumbing diagnosis of external outputs
     * (harness/diagnose.h): per (capture, layer, ext:NAME), the distance of
     * the recorded output to each hypothesis of kernels/attn_hypothesis.h,
     * written by the sweep in the layer's transaction. */
    SCHEMA_MIGRATION(13,
        "CREATE TABLE ext_diagnosis (\n"
        "    run_id     INTEGER NOT NULL REFERENCES runs (id),\n"
        "    capture    TEXT    NOT NULL,\n"
        "    layer      INTEGER NOT NULL CHECK (layer >= 0),\n"
        "    ext_name   TEXT    NOT NULL CHECK (ext_name <> ''),  -- NAME of variant ext:NAME\n"
        "    -- A hypothesis of kernels/attn_hypothesis.h: 'intended-fp8kv',\n"
        "    -- 'kv-scales-twice', ...\n"
        "    hypothesis TEXT    NOT NULL CHECK (hypothesis <> ''),\n"
        "    -- ||ext - H|| / ||H|| over the whole layer, H the hypothesis's output on\n"
        "    -- the layer's q/k/v and the sweep's fp8 scales; +inf when either output\n"
        "    -- has NaN/Inf; NULL when the hypothesis cannot run on the layer.\n"
        "    rel_l2     REAL CHECK (rel_l2 IS NULL OR rel_l2 >= 0),\n"
        "    not_run    TEXT,   -- why it cannot run on the layer; NULL when it ran\n"
        "    CHECK ((rel_l2 IS NULL) = (not_run IS NOT NULL)),\n"
        "    UNIQUE (run_id, capture, layer, ext_name, hypothesis)\n"
        ");\n"),
    /* Issue #18: several servers per mode (eval --endpoint MODE=URL given more
     * than once). Each sample records the base URL of the server that
     * answered it (its last attempt); NULL for a replayed sample and for
     * samples stored before this step. */
    SCHEMA_MIGRATION(14,
        "-- The server (base URL) whose reply this sample is; NULL: replayed, or\n"
        "-- stored before schema version 14.\n"
        "ALTER TABLE eval_samples ADD COLUMN server TEXT;\n"),
    /* Issue #18: `precgate merge` folds the parts of a sharded job (run or
     * eval --shard I/N, each in a database of its own) into one run. Each
     * part merged is recorded here, so that merging it again is a no-op and
     * a different part under the same index is refused (db/merge_store.h). */
    SCHEMA_MIGRATION(15,
        "CREATE TABLE merged_shards (\n"
        "    run_id        INTEGER NOT NULL REFERENCES runs (id),  -- the merged run\n"
        "    job           TEXT    NOT NULL,   -- the parts' job key (config_json \"job\")\n"
        "    shard_index   INTEGER NOT NULL CHECK (shard_index >= 0),\n"
        "    shard_count   INTEGER NOT NULL CHECK (shard_count > shard_index),\n"
        "    source        TEXT    NOT NULL,   -- the shard database, as given to merge\n"
        "    source_run_id INTEGER NOT NULL,   -- the part's run id in it\n"
        "    -- xxh3-128 of the part's rows (db/merge_store.h): equal digests, equal rows\n"
        "    digest        TEXT    NOT NULL,\n"
        "    merged_at     TEXT    NOT NULL,   -- UTC, 'YYYY-MM-DDTHH:MM:SS.sssZ'\n"
        "    UNIQUE (job, shard_index)\n"
        ");\n"),
    /* Issue #28: teacher-forced divergence between servers (evals/divergence.h,
     * db/divergence_store.h). The sequences every server scored, each mode's
     * per-position values against the reference as one packed blob per
     * (mode, sequence) (a 30k-token sequence is one row, not 30k), and each
     * mode's summary. role 'mode' compares a mode with the reference;
     * 'floor' is the reference against itself scored again (the noise
     * floor of batched serving). */
    SCHEMA_MIGRATION(16,
        "CREATE TABLE div_sequences (\n"
        "    run_id     INTEGER NOT NULL REFERENCES runs (id),\n"
        "    seq_id     TEXT    NOT NULL CHECK (seq_id <> ''),\n"
        "    source     TEXT    NOT NULL CHECK (source <> ''),  -- the file, or the eval run and sample\n"
        "    n_tokens   INTEGER NOT NULL CHECK (n_tokens >= 2),\n"
        "    score_from INTEGER NOT NULL CHECK (score_from >= 1 AND score_from < n_tokens),\n"
        "    tokens     BLOB    NOT NULL CHECK (length(tokens) = 4 * n_tokens),  -- int32, little-endian\n"
        "    UNIQUE (run_id, seq_id)\n"
        ");\n"
        "\n"
        "-- What one server reported over one sequence's scored positions, as it\n"
        "-- came: pass 0 for every mode, pass 1 the reference scored again (the\n"
        "-- noise floor). Per position, little-endian: given (int32), n_top (int32),\n"
        "-- the given token's logprob (float64, NaN: not reported), then n_top x\n"
        "-- (id int32, logprob float64). The evidence the comparisons are computed\n"
        "-- from, kept so that they can be computed again.\n"
        "CREATE TABLE div_scores (\n"
        "    run_id      INTEGER NOT NULL REFERENCES runs (id),\n"
        "    mode        TEXT    NOT NULL CHECK (mode <> ''),\n"
        "    pass        INTEGER NOT NULL CHECK (pass IN (0, 1)),\n"
        "    seq_id      TEXT    NOT NULL CHECK (seq_id <> ''),\n"
        "    server      TEXT    NOT NULL CHECK (server <> ''),  -- the base URL that answered\n"
        "    top_k       INTEGER NOT NULL CHECK (top_k >= 1),\n"
        "    n_positions INTEGER NOT NULL CHECK (n_positions >= 1),\n"
        "    packed      BLOB    NOT NULL CHECK (length(packed) >= 16 * n_positions),\n"
        "    UNIQUE (run_id, mode, pass, seq_id)\n"
        ");\n"
        "\n"
        "CREATE TABLE div_positions (\n"
        "    run_id      INTEGER NOT NULL REFERENCES runs (id),\n"
        "    mode        TEXT    NOT NULL CHECK (mode <> ''),\n"
        "    role        TEXT    NOT NULL CHECK (role IN ('mode', 'floor')),\n"
        "    seq_id      TEXT    NOT NULL CHECK (seq_id <> ''),\n"
        "    n_positions INTEGER NOT NULL CHECK (n_positions >= 1),\n"
        "    -- per scored position, little-endian: kld_lb, tail_p, lp, lq, dlogprob, dp\n"
        "    -- (float64; the last four NaN when a server did not report the given\n"
        "    -- token), top_p, top_q (int32): DIV_POSITION_BYTES = 56 each\n"
        "    packed      BLOB    NOT NULL CHECK (length(packed) = 56 * n_positions),\n"
        "    UNIQUE (run_id, mode, role, seq_id)\n"
        ");\n"
        "\n"
        "CREATE TABLE div_summaries (\n"
        "    run_id           INTEGER NOT NULL REFERENCES runs (id),\n"
        "    mode             TEXT    NOT NULL CHECK (mode <> ''),\n"
        "    role             TEXT    NOT NULL CHECK (role IN ('mode', 'floor')),\n"
        "    reference        TEXT    NOT NULL CHECK (reference <> ''),\n"
        "    top_k            INTEGER NOT NULL CHECK (top_k >= 1),\n"
        "    n_sequences      INTEGER NOT NULL CHECK (n_sequences >= 0),\n"
        "    n_positions      INTEGER NOT NULL CHECK (n_positions >= 0),\n"
        "    n_given          INTEGER NOT NULL CHECK (n_given >= 0 AND n_given <= n_positions),\n"
        "    -- NULL: undefined (no position; an SE of fewer than 2 sequences)\n"
        "    kld_mean REAL, kld_mean_se REAL, kld_ci_low REAL, kld_ci_high REAL,\n"
        "    kld_p50 REAL, kld_p90 REAL, kld_p95 REAL, kld_p99 REAL, kld_p999 REAL, kld_max REAL,\n"
        "    same_top REAL, same_top_se REAL, mean_dp REAL, rms_dp REAL, mean_dlogprob REAL,\n"
        "    ppl_ratio REAL, tail_mass_median REAL,\n"
        "    UNIQUE (run_id, mode, role)\n"
        ");\n"
        "\n"
        "-- The token ids a server reported for a live sample (vLLM's\n"
        "-- return_token_ids), int32 little-endian, for teacher-forced divergence\n"
        "-- from an eval run; token_ids_error: why they are unusable.\n"
        "ALTER TABLE eval_samples ADD COLUMN prompt_token_ids BLOB\n"
        "    CHECK (prompt_token_ids IS NULL OR length(prompt_token_ids) % 4 = 0);\n"
        "ALTER TABLE eval_samples ADD COLUMN token_ids BLOB\n"
        "    CHECK (token_ids IS NULL OR length(token_ids) % 4 = 0);\n"
        "ALTER TABLE eval_samples ADD COLUMN token_ids_error TEXT;\n"
        "\n"
        "-- The gate's divergence scope: the flags CHECK is rebuilt to take it.\n"
        "CREATE TABLE flags_v16 (\n"
        "    id              INTEGER PRIMARY KEY,\n"
        "    run_id          INTEGER NOT NULL REFERENCES runs (id),   -- the gated run\n"
        "    baseline_run_id INTEGER REFERENCES runs (id),   -- NULL: no baseline run\n"
        "    -- layer: against the baseline run; mode_pair: a mode against bf16 in the\n"
        "    -- same run; eval: end-task accuracy (within the run and against the baseline);\n"
        "    -- divergence: a diverge run's mode against its reference (mode, variant).\n"
        "    scope           TEXT NOT NULL CHECK (scope IN ('layer', 'mode_pair', 'eval',\n"
        "                                                'divergence')),\n"
        "    capture         TEXT,     -- layer and mode_pair scopes\n"
        "    layer           INTEGER,\n"
        "    variant         TEXT,     -- 'fp8kv', or 'fp8kv-bf16' for a pair\n"
        "    eval            TEXT,     -- eval scope\n"
        "    mode            TEXT,\n"
        "    effort          TEXT,\n"
        "    metric          TEXT NOT NULL,  -- 'rel_l2', 'nonfinite', 'present', 'accuracy',\n"
        "                                    -- 'diff_vs_bf16', ...\n"
        "    value           REAL,     -- this run's value (eval diff_vs_*: the difference)\n"
        "    baseline_value  REAL,     -- what it was compared with\n"
        "    threshold       REAL,     -- the bound applied (eval: min_effect)\n"
        "    verdict         TEXT NOT NULL CHECK (verdict IN ('pass', 'regression', 'improvement',\n"
        "                                                     'no change', 'inconclusive',\n"
        "                                                     'error')),\n"
        "    message         TEXT NOT NULL   -- the numbers and why, as printed\n"
        ");\n"
        "INSERT INTO flags_v16 SELECT * FROM flags;\n"
        "DROP TABLE flags;\n"
        "ALTER TABLE flags_v16 RENAME TO flags;\n"
        "CREATE INDEX flags_run ON flags (run_id, verdict);\n"),
    /* Mode names leave the schema (issue #29): a precision mode is a row of
     * the mode table (base/mode.h) and its profiles are base/variant.h's,
     * which validate every name before it is stored; the CHECKs that froze
     * 'fp8kv@' and 'fp8qkv@' (migrations 10 and 11) would refuse a new
     * format's rows. layer_metrics and attribution are rebuilt as in
     * migration 3, their rows copied as they are. */
    SCHEMA_MIGRATION(17,
        "CREATE TABLE layer_metrics_v17 (\n"
        "    run_id    INTEGER NOT NULL REFERENCES runs (id),\n"
        "    capture   TEXT    NOT NULL,\n"
        "    layer     INTEGER NOT NULL CHECK (layer >= 0),\n"
        "    head      INTEGER NOT NULL CHECK (head >= -1),  -- -1: the whole layer\n"
        "    -- A kernel profile against the fp64 reference ('bf16', 'fp8kv@fixed',\n"
        "    -- 'fp8qkv@fa3', ...: `precgate help profiles`), an external output\n"
        "    -- (ext:NAME), or a GPU profile against the CPU specification's output\n"
        "    -- (PROFILE~spec): base/variant.h's grammar, checked before it is stored.\n"
        "    variant   TEXT    NOT NULL CHECK (variant <> ''),\n"
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
        "INSERT INTO layer_metrics_v17 SELECT * FROM layer_metrics;\n"
        "DROP TABLE layer_metrics;\n"
        "ALTER TABLE layer_metrics_v17 RENAME TO layer_metrics;\n"
        "CREATE INDEX layer_metrics_run_variant ON layer_metrics (run_id, variant);\n"
        "CREATE TABLE attribution_v17 (\n"
        "    run_id  INTEGER NOT NULL REFERENCES runs (id),\n"
        "    capture TEXT    NOT NULL,\n"
        "    layer   INTEGER NOT NULL CHECK (layer >= 0),\n"
        "    -- the quantizing profile attributed (its layer_metrics variant)\n"
        "    variant TEXT    NOT NULL CHECK (variant <> ''),\n"
        "    -- the one tensor quantized ('q', 'k', 'v', 'p'), 'none' (every tensor bf16:\n"
        "    -- the profile's arithmetic alone) or 'all' (the variant itself: the joint error)\n"
        "    tensor  TEXT    NOT NULL CHECK (tensor IN ('none', 'q', 'k', 'v', 'p', 'all')),\n"
        "    -- whole layer against the fp64 reference (harness/metrics.h); +inf when\n"
        "    -- the output had NaN/Inf\n"
        "    rel_l2  REAL    NOT NULL,\n"
        "    UNIQUE (run_id, capture, layer, variant, tensor)\n"
        ");\n"
        "INSERT INTO attribution_v17 SELECT * FROM attribution;\n"
        "DROP TABLE attribution;\n"
        "ALTER TABLE attribution_v17 RENAME TO attribution;\n"),
    /* What each swept mode's cache write does to a layer's K and V, fitted
     * to its format (issue #30; kernels/kv_cache.h kv_mode_code_stats):
     * quant_stats describes the e4m3 per-tensor cache alone. */
    SCHEMA_MIGRATION(18,
        "CREATE TABLE kv_format_stats (\n"
        "    run_id  INTEGER NOT NULL REFERENCES runs (id),\n"
        "    capture TEXT    NOT NULL,\n"
        "    layer   INTEGER NOT NULL CHECK (layer >= 0),\n"
        "    mode    TEXT    NOT NULL CHECK (mode <> ''),   -- base/mode.h's name\n"
        "    tensor  TEXT    NOT NULL CHECK (tensor IN ('k', 'v')),\n"
        "    format  TEXT    NOT NULL CHECK (format <> ''), -- its number format\n"
        "    n_values INTEGER NOT NULL CHECK (n_values >= 0),\n"
        "    saturated_frac REAL,  -- of n_values; NULL: nothing to count\n"
        "    underflow_frac REAL,  -- of the nonzero values; NULL: none\n"
        "    code_bits   INTEGER NOT NULL CHECK (code_bits BETWEEN 1 AND 8),\n"
        "    codes_used  INTEGER NOT NULL CHECK (codes_used >= 0),\n"
        "    code_entropy_bits REAL NOT NULL CHECK (code_entropy_bits >= 0),\n"
        "    -- the row (per token and KV head) or block scales; 0 and NULLs: per-tensor\n"
        "    n_scales    INTEGER NOT NULL CHECK (n_scales >= 0),\n"
        "    scale_floor_frac REAL,  -- of n_scales at the format's floor (1e-6 row, 0 block)\n"
        "    scale_min   REAL,\n"
        "    scale_mean  REAL,\n"
        "    scale_max   REAL,\n"
        "    UNIQUE (run_id, capture, layer, mode, tensor)\n"
        ");\n"),
    /* A cell the kernel cannot compute is data, not a failure (issue #31):
     * a variant whose kernel refuses a layer's shape (no sinks, no window:
     * kernels/attn_profile.h attn_profile_computes) is stored with the
     * reason, the run completes, and the gate says 'skipped', never a pass.
     * The flags CHECK is rebuilt to take that verdict, as in migration 16. */
    SCHEMA_MIGRATION(19,
        "CREATE TABLE unsupported_cells (\n"
        "    run_id  INTEGER NOT NULL REFERENCES runs (id),\n"
        "    capture TEXT    NOT NULL,\n"
        "    layer   INTEGER NOT NULL CHECK (layer >= 0),\n"
        "    variant TEXT    NOT NULL CHECK (variant <> ''),  -- the profile refused\n"
        "    reason  TEXT    NOT NULL CHECK (reason <> ''),   -- what the kernel lacks\n"
        "    UNIQUE (run_id, capture, layer, variant)\n"
        ");\n"
        "CREATE TABLE flags_v19 (\n"
        "    id              INTEGER PRIMARY KEY,\n"
        "    run_id          INTEGER NOT NULL REFERENCES runs (id),   -- the gated run\n"
        "    baseline_run_id INTEGER REFERENCES runs (id),   -- NULL: no baseline run\n"
        "    -- layer: against the baseline run; mode_pair: a mode against bf16 in the\n"
        "    -- same run; eval: end-task accuracy (within the run and against the baseline);\n"
        "    -- divergence: a diverge run's mode against its reference (mode, variant).\n"
        "    scope           TEXT NOT NULL CHECK (scope IN ('layer', 'mode_pair', 'eval',\n"
        "                                                'divergence')),\n"
        "    capture         TEXT,     -- layer and mode_pair scopes\n"
        "    layer           INTEGER,\n"
        "    variant         TEXT,     -- 'fp8kv', or 'fp8kv-bf16' for a pair\n"
        "    eval            TEXT,     -- eval scope\n"
        "    mode            TEXT,\n"
        "    effort          TEXT,\n"
        "    metric          TEXT NOT NULL,  -- 'rel_l2', 'nonfinite', 'present', 'accuracy',\n"
        "                                    -- 'diff_vs_bf16', 'supported', ...\n"
        "    value           REAL,     -- this run's value (eval diff_vs_*: the difference)\n"
        "    baseline_value  REAL,     -- what it was compared with\n"
        "    threshold       REAL,     -- the bound applied (eval: min_effect)\n"
        "    -- skipped: the kernel cannot compute the cell (unsupported_cells)\n"
        "    verdict         TEXT NOT NULL CHECK (verdict IN ('pass', 'regression', 'improvement',\n"
        "                                                     'no change', 'inconclusive',\n"
        "                                                     'error', 'skipped')),\n"
        "    message         TEXT NOT NULL   -- the numbers and why, as printed\n"
        ");\n"
        "INSERT INTO flags_v19 SELECT * FROM flags;\n"
        "DROP TABLE flags;\n"
        "ALTER TABLE flags_v19 RENAME TO flags;\n"
        "CREATE INDEX flags_run ON flags (run_id, verdict);\n"),
};

const int schema_migration_count = (int)(sizeof schema_migrations / sizeof schema_migrations[0]);
