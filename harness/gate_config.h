/*
 * gate_config.h: the thresholds of the regression gate (`precgate gate`,
 * harness/regress.h) and their JSON file (`--config FILE`).
 *
 * The file is one JSON object; every key is optional and a key left out
 * keeps its default below. The whole grammar, with the defaults:
 *
 *   {
 *     "layer": {                         run against its baseline run, head = -1 rows
 *       "rel_tol": 0.10,                 GATE_DEFAULT_REL_TOL
 *       "metrics": ["rel_l2", "p99_abs"],  GATE_DEFAULT_LAYER_METRICS; any of rel_l2,
 *                                        max_abs, mean_abs, p99_abs, cos_sim, sqnr_db
 *       "abs": {"bf16": 1e-2, "fp8qkv": 2e-2, "fp8kv": 4e-2},
 *                                        per-variant absolute bound on rel_l2
 *       "metric_abs": {"p99_abs": {"fp8kv": 0.05}}
 *                                        per-metric, per-variant absolute bounds of the
 *                                        other metrics (none by default; rel_l2 is "abs")
 *     },
 *     "mode_pair": {                     each mode against bf16 in the same run
 *       "abs":   {"bf16": 1e-2, "fp8qkv": 2e-2, "fp8kv": 4e-2},   rel_l2 vs fp64 reference
 *       "ratio": {"fp8qkv": 16, "fp8kv": 16}                     x bf16's rel_l2
 *     },
 *     "eval": {"min_effect": 0.05}       GATE_DEFAULT_MIN_EFFECT
 *   }
 *
 * Bound maps ("abs", "metric_abs.M", "ratio") merge with the defaults key by
 * key: a variant given replaces its default, a variant set to null removes
 * it, the others stay. A variant key is bf16, fp8kv, fp8qkv, MODE~spec (layer
 * scope only: a GPU mode against the CPU specification, not against the
 * reference) or ext:NAME; "ratio" takes no bf16 (the reference itself).
 *
 * Validation (gate_config_parse): malformed JSON, an unknown key, a
 * duplicated key, a value of the wrong type or out of range are each
 * PG_ERR_FORMAT naming the source and the key's path, e.g.
 *     gate.json: layer.abs.fp8kv: expected a number >= 0 or null
 *     gate.json: layer.tolerance: unknown key (expected rel_tol, metrics, abs, metric_abs)
 *
 * Where the default bounds come from. vLLM's kernel test
 * tests/kernels/attention/test_flashinfer_trtllm_attention.py compares the
 * TRT-LLM attention output with FlashInfer's elementwise under
 * torch.testing.assert_close with rtol 1e-2 (bf16 throughout), rtol 2e-2
 * (fp8 query, bf16 output) and rtol 4e-2 (fp8 KV cache only); those rtol
 * values are the defaults of "abs" here: bf16 1e-2, fp8qkv 2e-2, fp8kv 4e-2.
 * This is a deliberate reuse with a different meaning: there they bound each
 * element of one kernel against another kernel fed the same (already
 * quantized) inputs; here they bound a whole layer's relative L2 error
 * against the fp64 reference on the unquantized inputs, quantization error
 * included. They are a starting point, not a derived limit: per-tensor e4m3
 * on activations with outlier channels can exceed them (precgate's synthetic
 * gpt-oss capture gives fp8kv ~5.5e-2 and fp8qkv ~6.7e-2), which is what
 * "mode_pair" then reports. Tune them per model with a config file.
 */
#ifndef PG_GATE_CONFIG_H
#define PG_GATE_CONFIG_H

#include <stddef.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The metrics of a layer_metrics row the gate can compare (harness/metrics.h). */
typedef enum regress_metric {
    REGRESS_REL_L2 = 0,  /* higher is worse */
    REGRESS_MAX_ABS,     /* higher is worse */
    REGRESS_MEAN_ABS,    /* higher is worse */
    REGRESS_P99_ABS,     /* higher is worse */
    REGRESS_COS_SIM,     /* lower is worse */
    REGRESS_SQNR_DB,     /* lower is worse */
    REGRESS_METRIC_COUNT
} regress_metric;

/* The reference mode: pairs are MODE-bf16, as evals pair every mode with bf16
 * (evals/eval_run.h EVAL_BASELINE_MODE). */
#define GATE_REFERENCE_MODE "bf16"

/* Relative tolerance of a layer metric against its baseline value: 10%. A
 * CPU run is bit-reproducible (kernels/attn.h), so only a changed kernel,
 * capture or option moves a value at all; 10% leaves room for a GPU run
 * against a CPU baseline (tests/gpu_check.c holds the GPU within 5% of the
 * specification's rel_l2) with a factor of two to spare. */
#define GATE_DEFAULT_REL_TOL 0.10
/* Layer metrics compared by default: rel_l2 (the sweep table's metric) and
 * p99_abs (catches a few bad elements that rel_l2 averages away). */
#define GATE_DEFAULT_LAYER_METRICS ((1u << REGRESS_REL_L2) | (1u << REGRESS_P99_ABS))
/* Default rel_l2 bounds per mode: vLLM's rtol values (see the top of this
 * file for the source and why this reuse is deliberate). */
#define GATE_DEFAULT_ABS_BF16 1e-2
#define GATE_DEFAULT_ABS_FP8QKV 2e-2
#define GATE_DEFAULT_ABS_FP8KV 4e-2
/* Default mode_pair ratio of an fp8 mode's rel_l2 to bf16's in the same layer:
 * 16 = the ratio of the formats' unit roundoffs, 2^-4 for e4m3 (3 stored
 * mantissa bits; OCP 8-bit Floating Point Specification, 2023) over 2^-8 for
 * bf16 (7 stored bits). It lets an fp8 mode's allowance grow with the
 * layer's own bf16 error where that error is large (long contexts). */
#define GATE_DEFAULT_PAIR_RATIO 16.0
/* Smallest accuracy change (absolute, 0..1) an eval verdict treats as real: 5
 * points, one problem in 20. */
#define GATE_DEFAULT_MIN_EFFECT 0.05

/* Longest variant name kept, NUL included (layer_metrics allows ext:NAME). */
#define GATE_VARIANT_MAX 64
/* Most variants one bound map holds. */
#define GATE_MAX_BOUNDS 16
/* Largest config file read. */
#define GATE_CONFIG_MAX_BYTES (1u << 20)

/* One variant's bound. */
typedef struct gate_bound {
    char variant[GATE_VARIANT_MAX];
    double value;
} gate_bound;

/* A variant -> bound map (variants unique). */
typedef struct gate_bounds {
    gate_bound b[GATE_MAX_BOUNDS];
    size_t n;
} gate_bounds;

/* Every threshold of a gate pass. */
typedef struct gate_config {
    struct {
        double rel_tol;                         /* >= 0 */
        unsigned metrics;                       /* bit (1u << regress_metric) per metric */
        gate_bounds abs[REGRESS_METRIC_COUNT];  /* [REGRESS_REL_L2] is "abs" */
    } layer;
    struct {
        gate_bounds abs;    /* rel_l2 against the fp64 reference, per mode */
        gate_bounds ratio;  /* per mode other than bf16: x bf16's rel_l2 */
    } mode_pair;
    struct {
        double min_effect;  /* in [0, 1] */
    } eval;
} gate_config;

/* Fills c with the defaults above. */
void gate_config_default(gate_config *c);

/* Parses the JSON text (source names it in messages, e.g. the file name)
 * onto the defaults into *c. PG_ERR_FORMAT as the top of this file says (c
 * is then the defaults with whatever was applied before the bad key: do not
 * use it); PG_ERR_INTERNAL for a NULL argument. */
pg_status gate_config_parse(const char *text, const char *source, gate_config *c, pg_err *err);

/* Reads path (at most GATE_CONFIG_MAX_BYTES) and parses it as
 * gate_config_parse with source = path. PG_ERR_IO when it cannot be read or
 * is larger. */
pg_status gate_config_load(const char *path, gate_config *c, pg_err *err);

/* The bound of variant in b, or NaN when b has none. */
double gate_bound_find(const gate_bounds *b, const char *variant);

/* Sets variant's bound in b (replacing one there); PG_ERR_INTERNAL when the
 * name does not fit GATE_VARIANT_MAX or b is full. */
pg_status gate_bound_set(gate_bounds *b, const char *variant, double value, pg_err *err);

/* Removes variant's bound from b; no-op when b has none. */
void gate_bound_remove(gate_bounds *b, const char *variant);

/* A metric's column name ("rel_l2", ...); "?" outside the enum. */
const char *regress_metric_name(regress_metric m);

/* The metric named name into *m: 1 when known, else 0. */
int regress_metric_parse(const char *name, regress_metric *m);

/* 1 when a higher value of m is worse (the error magnitudes), 0 when a
 * lower one is (cos_sim, sqnr_db). */
int regress_metric_higher_is_worse(regress_metric m);

/* 1 when v names a layer_metrics variant (bf16, fp8kv, fp8qkv, MODE~spec,
 * ext:NAME with NAME non-empty, shorter than GATE_VARIANT_MAX), else 0. */
int gate_variant_valid(const char *v);

/* 1 when v is a plain mode (bf16, fp8kv, fp8qkv), else 0. */
int gate_variant_is_mode(const char *v);

#ifdef __cplusplus
}
#endif

#endif /* PG_GATE_CONFIG_H */
