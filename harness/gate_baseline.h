/*
 * gate_baseline.h: which run a gate compares with (the gate's baseline
 * choice), decided here from the candidates the store lists
 * (db/gate_store.h).
 *
 * Automatic (no --baseline): the newest complete run of the same kind,
 * label (NULL labels match each other) and defining content
 * (gate_auto_fields: the traces' content digest, replay or live, --limit,
 * a sweep's --scales and its variants, the full profile names; a diverge
 * run's sequences_digest, reference and top_k; each equal or absent in
 * both, so an eval recorded before digests never baselines one with a
 * digest, and a sweep of other profiles never baselines one) that is older
 * than the run and passed its gate (it has flags and none with verdict
 * regression or error). When no such run passed, the newest complete run
 * of the same kind, label and content that is older: a first gate after
 * runs that were never gated still has something to compare with, and the
 * choice is printed as "not gated" so that a baseline that itself never
 * passed is visible.
 *
 * Explicit (--baseline B): a baseline name or a run id, of the same kind,
 * complete, not the run itself; one of other defining content
 * (gate_content_fields) is kept, with the difference, for an error verdict.
 */
#ifndef PG_GATE_BASELINE_H
#define PG_GATE_BASELINE_H

#include <stdint.h>

#include "base/status.h"
#include "db/gate_store.h"
#include "db/run_config.h"

/* The runs.config_json fields that define what a run measured: runs that
 * differ in one are not compared, named in this order (limit: eval --limit
 * N, the first N problems, which also changes the digest; source: replay
 * or live; traces_digest: eval runs' --traces content after --limit).
 * Accuracy over other problems says nothing about a change. scales: a
 * sweep's run --scales policy (capture, amax, vllm-dynamic, unit): errors
 * under unit scales against a baseline under amax scales measure the policy,
 * not a change. A sweep's
 * capture_digest is not among them: a sweep is judged per layer of the
 * capture it names, and a capture recorded again (new activations, new
 * scales from the serving stack) against the last one is exactly the
 * comparison that catches a scale regression; the gate prints a note when
 * the baseline swept other content (GATE_DATA_FIELD). sequences_digest,
 * reference, top_k: a diverge run's sequences, the mode its KLD is against,
 * and K (the top-K bound grows with K): another of any is another measure. */
#define GATE_CONTENT_FIELD_COUNT 7
extern const char *const gate_content_fields[GATE_CONTENT_FIELD_COUNT];
/* What the automatic baseline must share besides: gate_content_fields and
 * a sweep's "variants" (its kernel profiles, full names in the table's
 * order). An explicit --baseline of other profiles is compared: each
 * variant it lacks is the layer scope's error (harness/regress.h). */
#define GATE_AUTO_FIELD_COUNT 8
extern const char *const gate_auto_fields[GATE_AUTO_FIELD_COUNT];
/* The config_json field of a sweep's capture content digest. */
#define GATE_DATA_FIELD RUN_CONFIG_CAPTURE_DIGEST

/* The baseline a gate compares with, and why. */
typedef struct gate_baseline_choice {
    int64_t base_id;   /* the baseline run; -1: none */
    int automatic;     /* 1: chosen by the rule above; 0: --baseline */
    int passed;        /* automatic: the baseline passed its gate (0: the fallback) */
    int by_name;       /* explicit: the spec named a baseline (0: a run id) */
    /* Automatic without a baseline: the newest older complete run of the
     * kind and label whatever its content (-1: none), and the first
     * gate_auto_fields field in which it differs. Explicit: the first
     * gate_content_fields field in which the baseline differs (field NULL:
     * the same content). */
    int64_t newest;
    gate_content_diff differs;
} gate_baseline_choice;

/* Chooses run's baseline (spec: --baseline's value; NULL: automatic) into
 * *out (zeroed first, base_id and newest -1). PG_ERR_USAGE when spec names
 * no baseline or run, run itself, a run of another kind or one that is not
 * complete (the message says which); store failures as db/gate_store.h
 * says. Reads only. */
pg_status gate_baseline_choose(pg_store *s, const gate_run *run, const char *spec,
                               gate_baseline_choice *out, pg_err *err);

#endif /* PG_GATE_BASELINE_H */
