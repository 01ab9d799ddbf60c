/*
 * attn_backend.h: the backends a sweep computes attention on, reached
 * through one interface, in the manner of ggml's backend: open,
 * supports(variant, shape), run a layer, close. "cpu" is the CPU
 * specification (attn.h, attn_profile.h); "cuda" is our CUDA kernels
 * (attn_cuda.h), held to it by tests/gpu_check.c. A caller names no backend
 * function of its own: what a backend cannot run it says through
 * attn_backend_supports, and the caller places that variant on another.
 */
#ifndef PG_ATTN_BACKEND_H
#define PG_ATTN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "attn_hypothesis.h"
#include "attn_profile.h"
#include "kv_cache.h"
#include "metrics.h"
#include "base/note.h"
#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attn_backend attn_backend;

/* Most extra runs one layer job takes: every attribution row of 32 fp8
 * variants (5 each beside "all", which the sweep measures: 160) and every
 * hypothesis of the table (33) fit. */
#define ATTN_LAYER_MAX_EXTRAS 256

/* Longest reason an extra run of a layer job refused the layer, NUL included. */
#define ATTN_EXTRA_WHY_MAX 192

/* One more run of a layer job beside its variants, on the same layer and
 * measured against the same reference: profile p with the job's options but
 * keep_bf16 (an attribution row: those tensors kept bf16), or, p NULL,
 * scale-plumbing hypothesis h with the job's options as they are (a
 * diagnosis; they must quantize, keep_bf16 0). A backend that takes extras
 * (attn_backend_takes_extras) computes them where it computes the variants,
 * with the layer's caches and reference already there, and gives back only
 * their results. */
typedef struct attn_layer_extra {
    const attn_profile *p;
    unsigned keep_bf16;
    const attn_hypothesis *h;
    double rel_l2;          /* out: whole-layer rel_l2 against the reference */
    double *ext_rel_l2;     /* NULL, or out [the job's n_diag_ext]: metrics_rel_l2_bf16 of
                             * each of the job's last n_diag_ext external outputs against
                             * this run's output */
    int refused;            /* out: 1 when the run refuses the layer (attn_variant_run's or
                             * attn_hypothesis_run's PG_ERR_USAGE / PG_ERR_UNSUPPORTED, e.g.
                             * a kernel without sinks on a layer with them): why says why,
                             * rel_l2 and ext_rel_l2 are NaN; else 0 */
    char why[ATTN_EXTRA_WHY_MAX];
    double seconds;         /* out: the run's wall seconds where the backend times runs
                             * apart (the CPU does), else 0 */
} attn_layer_extra;

/* Marks x refused for reason why (attn_layer_extra.refused): its results NaN,
 * the n_diag_ext entries of ext_rel_l2 included. */
void attn_layer_extra_refuse(attn_layer_extra *x, int n_diag_ext, const char *why);

/* One layer for attn_backend_run_layer. */
typedef struct attn_layer_job {
    const attn_batch *b;
    const uint16_t *q, *k, *v;          /* bf16 host arrays [Tq,hq,d], [Tkv,hkv,d] */
    const attn_quant_options *opt;
    int n_var;                          /* variants to run, each one the backend supports */
    const attn_profile *const *var;
    int n_ext;                          /* outputs computed elsewhere (bf16 [Tq,hq,d]), */
    const uint16_t *const *ext;         /* compared with the same reference */
    pg_metric_values *metrics;          /* out: (n_var + n_ext) x (hq + 1), each [0] whole
                                         * layer and [1 + h] head h, against the fp64
                                         * reference */
    attn_quant_report *rep;             /* out (may be NULL): the variants' reports folded
                                         * in job order (attn_quant_fold_add); zero else */
    uint16_t *const *out;               /* NULL, or [n_var] NULL or host copies of each
                                         * variant's output */
    const pg_notes *notes;              /* where a backend's warnings go (NULL: nowhere) */
    double *ref_out;                    /* NULL, or out: a host copy of the layer's fp64
                                         * reference [Tq,hq,d], the one every metric of the
                                         * job is measured against */
    int n_extra;                        /* runs beside the variants (attribution rows, */
    attn_layer_extra *extra;            /* hypotheses), each one the backend supports:
                                         * attn_backend_supports_kept /
                                         * attn_backend_supports_hypothesis */
    int n_diag_ext;                     /* how many of ext, the last ones, each hypothesis
                                         * extra is compared with (ext_rel_l2) */
} attn_layer_job;

/* Quantization reports folded by the rule the stored rows follow: k and v of
 * the first variant whose mode writes an e4m3 cache with the run's
 * per-tensor scales, q of the first such one that quantizes Q too (every
 * such profile writes the same e4m3 cache; Q's quantization differs between
 * profiles, attn_profile.h, so the fold order decides whose q is kept). The
 * other formats' caches (e5m2, per-token-head scales) are not what the
 * stored rows describe and are not folded. */
typedef struct attn_quant_fold {
    attn_quant_report rep;
    int have_kv, have_q;
} attn_quant_fold;

/* 1 when the fold takes variant p's k and v counters (the rule above). */
int attn_quant_fold_takes_kv(const attn_profile *p);

/* 1 when the fold takes variant p's q counters (the rule above). */
int attn_quant_fold_takes_q(const attn_profile *p);

/* Folds variant p's report r into f (a variant the rule above skips adds nothing). */
void attn_quant_fold_add(attn_quant_fold *f, const attn_profile *p, const attn_quant_report *r);

/* Opens backend name ("cpu" or "cuda") with n_threads CPU threads for its
 * host work; desc gets a description of the device. PG_ERR_DEVICE with the
 * reason when the backend cannot run here (no usable GPU), PG_ERR_USAGE for
 * an unknown name. */
pg_status attn_backend_open(const char *name, int n_threads, attn_backend **out, char *desc,
                            size_t desc_len, pg_err *err);

/* Releases be; NULL is a no-op. */
void attn_backend_close(attn_backend *be);

/* The backend's name as opened ("cpu", "cuda"), the stored rows' backend. */
const char *attn_backend_name(const attn_backend *be);

/* 1 when be runs profile p on a batch of b's shape as the profile states,
 * else 0 with *why (may be NULL) saying what it lacks. */
int attn_backend_supports(const attn_backend *be, const attn_profile *p, const attn_batch *b,
                          const char **why);

/* The same with the tensors of keep_bf16 (attn_tensor bits) kept bf16, as
 * attribution runs them (attn_quant_options.keep_bf16). */
int attn_backend_supports_kept(const attn_backend *be, const attn_profile *p,
                               const attn_batch *b, unsigned keep_bf16, const char **why);

/* Whether the GPU backend as built runs profile p at head dim d (on a layer
 * without sinks or window; no GPU needed to ask): 1, or 0 with *why (may be
 * NULL) saying why the CPU specification runs it beside the GPU instead.
 * The answer reads the mode table's traits and the profile's knobs;
 * keep_bf16: with those tensors kept bf16, as attribution runs them. */
int attn_backend_gpu_runs(const attn_profile *p, int d, unsigned keep_bf16, const char **why);

/* The same for scale-plumbing hypothesis h (diagnosis). */
int attn_backend_gpu_runs_hypothesis(const attn_hypothesis *h, int d, const char **why);

/* 1 when be's run_layer computes a job's extra runs (attn_layer_job.extra)
 * in the layer's own pass; 0 when a job with extras is refused and its
 * caller runs them one by one (attn_backend_run_variant /
 * attn_backend_run_hypothesis). The CPU takes them; the CUDA backend does
 * not. */
int attn_backend_takes_extras(const attn_backend *be);

/* The fp64 reference, every variant and extra run of job and the metrics of
 * each variant and external output against the reference, and the extras'
 * results, for one layer. PG_ERR_USAGE naming a variant or extra the backend
 * does not support, or for extras given to a backend that takes none. */
pg_status attn_backend_run_layer(attn_backend *be, const attn_layer_job *job, pg_err *err);

/* Profile p's output alone on batch b (as attn_variant_run): out bf16
 * [Tq,hq,d]; rep may be NULL. */
pg_status attn_backend_run_variant(attn_backend *be, const attn_profile *p, const attn_batch *b,
                                   const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                   const attn_quant_options *opt, uint16_t *out,
                                   attn_quant_report *rep, pg_err *err);

/* 1 when be runs scale-plumbing hypothesis h (attn_hypothesis.h) on a batch
 * of b's shape, else 0 with *why (may be NULL). */
int attn_backend_supports_hypothesis(const attn_backend *be, const attn_hypothesis *h,
                                     const attn_batch *b, const char **why);

/* Hypothesis h's output on batch b (as attn_hypothesis_run): out bf16 [Tq,hq,d]. */
pg_status attn_backend_run_hypothesis(attn_backend *be, const attn_hypothesis *h,
                                      const attn_batch *b, const uint16_t *q, const uint16_t *k,
                                      const uint16_t *v, const attn_quant_options *opt,
                                      uint16_t *out, pg_err *err);

/* The fp64 reference of batch b (attn_reference's contract): out [Tq,hq,d]. */
pg_status attn_backend_reference(attn_backend *be, const attn_batch *b, const uint16_t *q,
                                 const uint16_t *k, const uint16_t *v, double *out, pg_err *err);

/* The paged cache write of kv_paged_write's contract, done by the backend,
 * into host memory (*out; kv_paged_free it); rep (may be NULL) gets the k
 * and v counters. */
pg_status attn_backend_paged_write(attn_backend *be, const attn_batch *b, const uint16_t *k,
                                   const uint16_t *v, pg_number_format elem, float k_scale, float v_scale,
                                   uint64_t page_seed, int block_size, kv_paged *out,
                                   attn_quant_report *rep, pg_err *err);

/* The dequant gather of kv_dequant_gather's contract, done by the backend,
 * from and into host memory (*out; kv_paged_free it). */
pg_status attn_backend_dequant_gather(attn_backend *be, const kv_paged *src, float k_scale,
                                      float v_scale, kv_paged *out, pg_err *err);

/* The metrics of out (bf16) against ref (fp64), host arrays [tq,hq,d],
 * computed by the backend: m[0] whole layer, m[1 + h] head h (metrics.h). */
pg_status attn_backend_metrics(attn_backend *be, const uint16_t *out, const double *ref,
                               int64_t tq, int hq, int d, pg_metric_values *m, pg_err *err);

/* Starts moving a coming layer's q, k, v (which must not change until its
 * run_layer) to the backend's memory while another layer computes; PG_OK and
 * nothing done where the backend computes in host memory. */
pg_status attn_backend_prefetch(attn_backend *be, const attn_batch *b, const uint16_t *q,
                                const uint16_t *k, const uint16_t *v, pg_err *err);

/* Prepares host memory [p, p + bytes) for fast transfers to the backend
 * (page-locking on the GPU); PG_OK and nothing done on the CPU. An error
 * leaves the memory usable, only slower. */
pg_status attn_backend_pin(attn_backend *be, void *p, size_t bytes, pg_err *err);

/* Undoes attn_backend_pin of p (after the backend's pending work on it). */
void attn_backend_unpin(attn_backend *be, void *p);

/* Caps the device memory one layer may plan with at bytes (0: no cap, the
 * backend's share of its free memory): a layer that needs more runs in
 * pieces. The caller reads the cap (the CLI: $PRECGATE_CUDA_MEM_LIMIT);
 * backends in host memory ignore it. */
void attn_backend_limit_memory(attn_backend *be, double bytes);

#ifdef __cplusplus
}
#endif

#endif /* PG_ATTN_BACKEND_H */
