/*
 * sweep.h: the per-layer precision sweep: for every layer of a capture, the
 * fp64 reference and each precision mode, their error metrics per head and
 * per layer, and the quantization statistics, one SQLite transaction a layer.
 */
#ifndef PG_SWEEP_H
#define PG_SWEEP_H

#include <signal.h>
#include <stdint.h>

#include "db/store.h"
#include "kernels/attn.h"
#include "kernels/attn_profile.h"
#include "kernels/attn_backend.h"
#include "harness/capture/capture.h"
#include "base/note.h"
#include "base/status.h"

/* Where a sweep's time went (seconds), for `precgate run`'s timing line. */
typedef struct sweep_stats {
    double compute_s;   /* reference, modes and metrics (CPU or GPU, uploads included) */
    double lock_s;      /* of compute_s, page-locking the GPU's upload buffers */
    double diagnose_s;  /* of compute_s, the external outputs' scale-plumbing diagnosis
                         * (harness/diagnose.h): its runs after the layer runs, and
                         * those inside them where the backend times them apart */
    double store_s;     /* SQLite transactions (a layer is stored while the next computes) */
    int layers_stored;  /* layers this sweep_run computed and committed */
    int layers_skipped; /* layers it left alone: already stored (sweep_options.stored) */
    double attribute_s; /* of compute_s, --attribute's runs, counted as diagnose_s is */
} sweep_stats;

/* Most variants one sweep runs (room for every profile of the table;
 * sweep_variants_parse refuses a table that outgrows it). */
#define SWEEP_MAX_VARIANTS 32
/* run's default --variants: one per mode, each mode's default profile
 * (bf16, fp8kv@fixed, fp8qkv@fa3). */
#define SWEEP_DEFAULT_VARIANTS "bf16,fp8kv,fp8qkv"

/* The kernel profiles a sweep runs, in the profile table's order, each
 * once. Their full names (attn_profile_variant) are the stored variants. */
typedef struct sweep_variants {
    const attn_profile *p[SWEEP_MAX_VARIANTS];
    int n;
} sweep_variants;

/* Host buffers for a GPU sweep's uploads (sweep_stage_open). */
typedef struct sweep_stage sweep_stage;

/* Where a sweep's fp8 q/k/v scales come from (run --scales); the name of
 * each is its quant_stats.scale_source and config_json "scales" value. */
typedef enum sweep_scales {
    SWEEP_SCALES_DEFAULT = 0,   /* the capture's when it has them, else amax */
    SWEEP_SCALES_CAPTURE,       /* "capture": the layers' q_scale/k_scale/v_scale metadata */
    SWEEP_SCALES_AMAX,          /* "amax": amax / 448 per tensor (fp8_e4m3_calibrated_scale) */
    SWEEP_SCALES_VLLM_DYNAMIC,  /* "vllm-dynamic": vLLM's calc_kv_scales, amax / 200 for q
                                 * and k, amax / 100 for v */
    SWEEP_SCALES_UNIT,          /* "unit": 1.0 (vLLM's default without checkpoint scales) */
} sweep_scales;

typedef struct sweep_options {
    sweep_variants variants;      /* the profiles to run */
    int n_threads;
    uint64_t page_seed;           /* scatters the paged cache's pages */
    const pg_notes *notes;        /* where warnings and progress go (NULL: nowhere) */
    attn_backend *backend;        /* run on this backend (attn_backend_open, e.g. "cuda");
                                   * NULL or a "cpu" backend: the CPU specification. The backend runs the
                                   * profiles it supports (attn_backend_supports); the
                                   * others run on the CPU specification beside it, said
                                   * through notes */
    int check_spec;               /* backend only: also store each profile it ran against
                                   * the CPU specification's output on a sample of heads */
    sweep_stats *stats;           /* added to when not NULL */
    sweep_stage *stage;           /* GPU only: sweep_stage_open(cap)'s, or NULL (opened here) */
    const unsigned char *stored;  /* [n_layers] or NULL: 1 = the layer is stored, skip it
                                   * (run --resume; sweep_layer_rows says what a whole one holds) */
    const volatile sig_atomic_t *stop; /* NULL, or nonzero once the sweep must stop
                                   * (interrupt_flag()): polled before each layer */
    sweep_scales scales;          /* where the fp8 scales come from (DEFAULT: resolved per
                                   * capture, sweep_scales_resolve) */
    int attribute;                /* run --attribute: also store each fp8 variant's error
                                   * with one tensor alone quantized (harness/attribute.h),
                                   * on the CPU specification whatever the backend */
} sweep_options;

/* The ring of host buffers one GPU sweep_run of cap uploads from (four
 * layers' q, k and v), with its first three layers already copied in. Needs no GPU, so
 * it can run while the backend starts; sweep_run page-locks it. NULL, said
 * through notes, when the buffers would take more than a quarter of the memory
 * or cannot be mapped: the GPU then uploads from the capture's mapping,
 * slower, with the same results. */
sweep_stage *sweep_stage_open(const capture *cap, const pg_notes *notes);

/* Where layer li's q, k, v are staged in s (qkv[0..2]); they hold li's data
 * from the copy that staged it until the copy of li + 3 (the first two after
 * sweep_stage_open). */
void sweep_stage_layer(const sweep_stage *s, int li, const uint16_t *qkv[3]);

/* Releases s (unlocking it) after the sweep that used it, before the GPU
 * backend closes; NULL is a no-op. */
void sweep_stage_close(sweep_stage *s);

/* Parses a --scales name (capture, amax, vllm-dynamic, unit) into *out;
 * PG_ERR_USAGE naming the value and the choices otherwise. */
pg_status sweep_scales_parse(const char *name, sweep_scales *out, pg_err *err);

/* The name of a policy other than DEFAULT ("capture", "amax", ...). */
const char *sweep_scales_name(sweep_scales s);

/* s with DEFAULT resolved for cap: CAPTURE when cap's layers carry
 * q/k/v_scale metadata, else AMAX; any other s as it is. */
sweep_scales sweep_scales_resolve(const capture *cap, sweep_scales s);

/* PG_OK when cap can give the scales of policy s; CAPTURE on a capture
 * without scale metadata is PG_ERR_USAGE naming capture_name. */
pg_status sweep_scales_check(const capture *cap, const char *capture_name, sweep_scales s,
                             pg_err *err);

/* Parses run --variants' comma-separated list of profile names (bf16,
 * MODE@PROFILE, or a bare MODE: its default profile; harness/variant_name.h)
 * into *out, in the table's order; PG_ERR_USAGE naming the entry and the
 * choices for an unknown name, naming both entries for two that expand to
 * one profile, and for an empty list or entry. */
pg_status sweep_variants_parse(const char *list, sweep_variants *out, pg_err *err);

/* The quantized-mode options the sweep gives layer li of cap under opt (its scales
 * under opt->scales, resolved; the paging seed opt->page_seed + li), into
 * *fo: what the fp8 variants and the diagnosis's hypotheses run with.
 * Returns the scale policy's name (quant_stats.scale_source). */
const char *sweep_layer_quant_options(const capture *cap, int li, const sweep_options *opt,
                                    attn_quant_options *fo);

/* The rows sweep_run stores for layer li of cap under opt (every variant's
 * whole-layer and per-head layer_metrics rows, the --check-spec rows on their
 * sampled heads, the external outputs'; the quant_stats rows of the fp8
 * profiles: k and v for any, q for an fp8qkv one; one layer_shapes row; with
 * opt->attribute the attribution rows, attribute_row_count per variant; the
 * ext_diagnosis rows, one per external output and hypothesis): what a stored
 * layer holds, for run --resume. */
void sweep_layer_rows(const capture *cap, int li, const sweep_options *opt,
                      store_layer_rows *want);

/* Layer li of cap's shape as sweep_run stores it in layer_shapes. */
void sweep_layer_shape(const capture *cap, int li, store_layer_shape *out);

/* Runs the sweep over every layer of cap not marked in opt->stored, storing
 * rows under run_id with capture name capture_name and the backend's name
 * (attn_backend_name) for what ran on opt->backend, else "cpu" (a sweep on
 * a backend says through opt->notes which profiles it runs on the CPU specification:
 * those attn_backend_supports refuses).
 * Each layer is one transaction, with the run's heartbeat
 * (store_run_heartbeat), written on a thread of its own while the next
 * layer computes: on failure the failing layer is rolled
 * back, earlier layers stay stored, later ones are not stored, and err
 * names the layer and what failed. Once *opt->stop is set, no further layer
 * starts: the layer computing and the one being written finish and are
 * stored, and the result is PG_ERR_INTERRUPTED saying how many layers are
 * stored (a failure of those writes wins over it). The counts go to
 * opt->stats.
 * The fp8 scales follow opt->scales (sweep_scales_check: PG_ERR_USAGE
 * before anything is stored when the capture cannot give them); amax-based
 * ones use the amax that capture_open read, with no pass over the data. On the GPU, CPU threads copy each layer's q/k/v into
 * a ring of four page-locked buffers three layers ahead, and the next layer's
 * buffer copies to the GPU while a layer computes (attn_backend_prefetch).
 * With opt->attribute each layer's attribution rows (attribute_layer) are
 * computed on the CPU specification after its variants and stored in the
 * layer's transaction; a sweep on another backend says so through opt->notes
 * once. Progress goes to opt->notes. */
pg_status sweep_run(pg_store *store, int64_t run_id, const capture *cap,
                    const char *capture_name, const sweep_options *opt, pg_err *err);

#endif /* PG_SWEEP_H */
