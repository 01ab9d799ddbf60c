/*
 * advise.h: per-layer KV cache policy advice (`precgate advise`), as pure
 * functions of a run's whole-layer rows (db/gate_store.h gate_store_load)
 * and its layer shapes (layer_shapes, schema version 11). No I/O.
 *
 * The question: which layers must keep a bf16 KV cache so that every layer
 * left in fp8 is within a budget on one metric?
 *
 *   A layer is kept in bf16 when, in ANY capture of the run, the variant's
 *   row of that layer
 *     - had NaN/Inf in its output (nan_count + inf_count > 0),
 *     - has an undefined metric (NULL/NaN, e.g. the cosine of an all-zero
 *       output): no evidence that it is within the budget, or
 *     - is worse than the budget in the metric's direction
 *       (regress_worse: higher is worse for rel_l2, max_abs, mean_abs,
 *       p99_abs; lower is worse for cos_sim, sqnr_db). A value exactly at
 *       the budget is within it, as in the gate.
 *
 * The vLLM flag that implements it is --kv-cache-dtype-skip-layers (vLLM PR
 * #33695), read in vllm-project/vllm:
 *   - vllm/config/cache.py CacheConfig.kv_cache_dtype_skip_layers:
 *     list[str], "layer indices (e.g., '0', '2', '4') or attention type
 *     names (e.g., 'sliding_window')";
 *   - vllm/engine/arg_utils.py: a list[str] field becomes an argparse option
 *     with nargs "+" (collection_to_kwargs), so the indices are separate
 *     words, "--kv-cache-dtype-skip-layers 1 3 5"; one word "1,3,5" would be
 *     a single entry that matches no layer, silently;
 *   - vllm/model_executor/layers/attention/attention.py Attention.__init__:
 *     a layer's kv_cache_dtype becomes "auto" (the model's dtype) when
 *     str(extract_layer_index(prefix)) is in the list, or when the layer
 *     has a sliding window and "sliding_window" is in it.
 * precgate's layer L is the capture's layers.L, which tools/record_vllm.py
 * numbers by the same integer in vLLM's layer name (layer_index), so the
 * indices mean the same layers. The value is "sliding_window" when the kept
 * set is exactly the layers with window > 0 (and not empty), else the
 * indices.
 *
 * KV memory (advise_result.kv_bytes_*): per token and layer the cache holds
 * K and V, 2 x hkv x d elements, each of the bytes its mode's row gives
 * (base/mode.h k_element_bits: 16 in bf16, 8 in fp8, 4 in int4, a row
 * rounded up to whole bytes), plus, for a mode
 * with per-token-head scales, 2 x hkv inline scales of
 * k_row_scale_bytes each (vLLM carves them from the page:
 * fp8_per_token_head, 4 bytes a float32 scale).
 * kv_bytes_saved_vs_fp8_fraction compares the same mix with every layer in
 * ADVISE_FP8_REFERENCE_MODE (vLLM's --kv-cache-dtype fp8), the format a
 * rollout to a smaller one is weighed against.
 * kv_bytes_saved_fraction = (all_bf16 - mixed) / all_bf16 over the
 * layers of the run. Not counted: per-tensor scales (one per tensor and
 * layer), block padding, and that vLLM's hybrid KV
 * cache manager keeps only the window's tokens for a sliding-window layer:
 * at a context longer than the window those layers hold less than the per
 * token count says, so the fraction is that of the full-attention layout.
 */
#ifndef PG_ADVISE_H
#define PG_ADVISE_H

#include <stddef.h>
#include <stdint.h>

#include "regress.h"
#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The vLLM option, and its value for the sliding-window layers. */
#define ADVISE_VLLM_FLAG "--kv-cache-dtype-skip-layers"
#define ADVISE_VLLM_SLIDING_WINDOW "sliding_window"

/* One layer's shape in one capture (a layer_shapes row). Strings borrowed. */
typedef struct advise_shape {
    const char *capture;
    int layer;
    int hkv, d;   /* key/value heads, head dimension */
    int window;   /* 0: full attention, else a sliding-window layer */
} advise_shape;

/* What advice is asked for. */
typedef struct advise_request {
    const char *variant;    /* the stored (full) variant name, e.g. "fp8kv@fixed" */
    pg_metric metric;
    double budget;          /* finite */
} advise_request;

/* Why a layer keeps bf16, in increasing precedence (a layer reports the
 * strongest reason over its captures). */
typedef enum advise_reason {
    ADVISE_FP8 = 0,          /* within the budget in every capture: fp8 */
    ADVISE_OVER_BUDGET,      /* worse than the budget */
    ADVISE_UNDEFINED,        /* the metric is NULL/NaN */
    ADVISE_NONFINITE         /* the output had NaN/Inf */
} advise_reason;

/* One layer of the advice. Strings borrowed from the rows. */
typedef struct advise_layer {
    int layer;
    int hkv, d, window;      /* the shape (the same in every capture) */
    advise_reason reason;    /* ADVISE_FP8: left in fp8; else kept in bf16 */
    double value;            /* the worst value over the captures (NaN: none defined) */
    const char *capture;     /* where value was (or, when kept, the reason) was seen */
} advise_layer;

/* The mode the memory is also compared with: vLLM's per-tensor e4m3 cache. */
#define ADVISE_FP8_REFERENCE_MODE PG_MODE_KV_FP8_REFERENCE

/* The advice. Free with advise_result_free. */
typedef struct advise_result {
    advise_layer *layers;    /* by layer index */
    size_t n_layers;
    size_t n_captures;       /* captures of the run holding the variant */
    size_t n_keep;           /* layers kept in bf16 */
    int sliding_window;      /* 1: the kept layers are exactly those with window > 0 */
    int64_t kv_bytes_bf16;   /* per token, every layer in bf16 */
    int64_t kv_bytes_mixed;  /* per token, the kept layers in bf16, the others fp8 */
    double kv_bytes_saved_fraction;  /* (bf16 - mixed) / bf16 */
    int64_t kv_bytes_fp8;    /* per token, every layer in ADVISE_FP8_REFERENCE_MODE */
    double kv_bytes_saved_vs_fp8_fraction; /* (fp8 - mixed) / fp8: negative when the mix
                                            * holds more than an all-fp8 cache */
    long worst_fp8;          /* index in layers of the worst layer left in fp8; -1: none */
} advise_result;

/* Computes the advice (the top of this file) for rq from rows[0..n_rows)
 * (whole-layer rows of any variants; only rq->variant's are read) and
 * shapes[0..n_shapes) into *out (zeroed first; free with advise_result_free,
 * also after a failure). Missing evidence is PG_ERR_USAGE naming it: no row
 * of rq->variant (the message lists the run's variants), no shapes at all,
 * a row without its layer's shape, or a layer whose shape a capture holds
 * without a row of the variant. Shapes of one layer that differ between
 * captures (hkv, d, or whether it has a window) are PG_ERR_SHAPE. A NaN or
 * infinite budget or an unknown metric is PG_ERR_INTERNAL; PG_ERR_NOMEM. */
pg_status advise_compute(const advise_request *rq, const layer_metric_row *rows, size_t n_rows,
                         const advise_shape *shapes, size_t n_shapes, advise_result *out,
                         pg_err *err);

/* Frees what advise_compute put in r and zeroes it; NULL is a no-op. */
void advise_result_free(advise_result *r);

/* The vLLM option that implements r, malloc'd: ADVISE_VLLM_FLAG and
 * ADVISE_VLLM_SLIDING_WINDOW, or the kept layers' indices as separate words
 * ("--kv-cache-dtype-skip-layers 1 3"); NULL when no layer is kept (no flag
 * is needed) or out of memory (*oom set to 1 then, else 0). */
char *advise_vllm_flag(const advise_result *r, int *oom);

/* A reason's words for output: "fp8", "worse than the budget", "undefined
 * (NULL/NaN) metric", "NaN/Inf in the output"; "?" outside the enum. */
const char *advise_reason_text(advise_reason r);

#ifdef __cplusplus
}
#endif

#endif /* PG_ADVISE_H */
