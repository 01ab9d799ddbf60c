/*
 * attn_cuda.h: the CUDA backend: the precision modes, the fp64 reference and
 * the metrics on one GPU, held against the CPU specification (attn.h).
 *
 * Names run parallel to the CPU's (attn_variant_run / cuda_variant_run).
 * The cuda_variant_* and cuda_reference functions take and return host
 * arrays, for the agreement tests; cuda_sweep_layer keeps a whole layer on the
 * device and returns only numbers. Every CUDA call is checked: a failure is
 * PG_ERR_DEVICE naming the kernel or call. In a build without CUDA every
 * function returns PG_ERR_DEVICE saying so.
 */
#ifndef PG_ATTN_CUDA_H
#define PG_ATTN_CUDA_H

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

typedef struct cuda_backend cuda_backend;

/* Opens GPU 0 (a stream and its properties); PG_ERR_DEVICE with the reason
 * when no GPU is usable. desc gets the device's description. */
pg_status cuda_backend_open(cuda_backend **out, char *desc, size_t desc_len, pg_err *err);

/* Releases the backend; NULL is a no-op. */
void cuda_backend_close(cuda_backend *be);

/* Caps the bytes cuda_sweep_layer plans a layer with at bytes (0, the
 * default: no cap, CUDA_PLAN_FRACTION of the free memory); tests force
 * layers into pieces with it. */
void cuda_backend_limit_memory(cuda_backend *be, double bytes);

/* fp64 reference on the GPU; out fp64 [Tq, hq, d] on the host. */
pg_status cuda_reference(cuda_backend *be, const attn_batch *b, const uint16_t *q,
                         const uint16_t *k, const uint16_t *v, double *out, pg_err *err);

/* Whether the GPU runs profile p on batch b as the profile states, with the
 * tensors of keep_bf16 kept bf16 (attribution; 0: none), read from the mode
 * table's traits and the profile's knobs (`precgate help profiles` prints
 * the answer): 1, else 0 with *why (may be NULL) saying what it lacks. Needs
 * no GPU. */
int cuda_supports(const attn_profile *p, const attn_batch *b, unsigned keep_bf16,
                  const char **why);

/* Profile p on the GPU with host arrays in and out (as attn_variant_run):
 * out bf16 [Tq, hq, d]; rep (may be NULL) gets the quantization counters.
 * PG_ERR_USAGE naming p when cuda_supports says no. */
pg_status cuda_variant_run(cuda_backend *be, const attn_profile *p, const attn_batch *b,
                           const uint16_t *q, const uint16_t *k, const uint16_t *v,
                           const attn_quant_options *opt, uint16_t *out, attn_quant_report *rep,
                           pg_err *err);

/* Whether the GPU runs scale-plumbing hypothesis h (attn_hypothesis.h) on
 * batch b: those that are a GPU profile's run with a forced fp8kv plumbing
 * or q_scale; 0 with *why (may be NULL) for the others. Needs no GPU. */
int cuda_hypothesis_supports(const attn_hypothesis *h, const attn_batch *b, const char **why);

/* Hypothesis h on the GPU with host arrays in and out (as
 * attn_hypothesis_run); PG_ERR_USAGE naming h when cuda_hypothesis_supports
 * says no. */
pg_status cuda_hypothesis_run(cuda_backend *be, const attn_hypothesis *h, const attn_batch *b,
                              const uint16_t *q, const uint16_t *k, const uint16_t *v,
                              const attn_quant_options *opt, uint16_t *out, pg_err *err);

/* The dequant gather alone, from a host paged cache (e.g. kv_paged_write's)
 * into out (host, allocated here like kv_dequant_gather's, NaN where unwritten). */
pg_status cuda_dequant_gather(cuda_backend *be, const kv_paged *src, float k_scale, float v_scale,
                              kv_paged *out, pg_err *err);

/* The paged cache write alone: into out (host, same block table and size as
 * kv_paged_write with the same seed), for the bit-identity check. */
pg_status cuda_paged_write(cuda_backend *be, const attn_batch *b, const uint16_t *k,
                           const uint16_t *v, pg_number_format elem, float k_scale, float v_scale,
                           uint64_t page_seed, int block_size, kv_paged *out,
                           attn_quant_report *rep, pg_err *err);

/* Metrics on the GPU of out (bf16) against ref (fp64), host arrays [tq, hq, d]:
 * m[0] whole layer, m[1 + h] head h. */
pg_status cuda_metrics_host(cuda_backend *be, const uint16_t *out, const double *ref, int64_t tq,
                            int hq, int d, pg_metric_values *m, pg_err *err);

/* Most variants one cuda_sweep_layer call runs. */
#define CUDA_MAX_VARIANTS 16

/* One layer of the sweep on the GPU: uploads q/k/v (or takes the copies
 * cuda_prefetch_qkv made of the same arrays), computes the reference and the
 * n_var profiles var[] (each one cuda_supports; PG_ERR_USAGE otherwise),
 * compares each (and each external output ext[i], bf16 [Tq, hq, d] on the
 * host) with the reference on the device. metrics: (var in order, then ext)
 * x (hq + 1). mode_out (may be NULL; entries may be NULL): host copies of
 * each variant's output in the same order, for --check-spec. ref_out (may be
 * NULL): a host copy of the layer's reference [Tq, hq, d]. Times in ms per
 * stage go to ms_ref / ms_modes[n_var] / ms_metrics when non-NULL. */
pg_status cuda_sweep_layer(cuda_backend *be, const attn_batch *b, const uint16_t *q,
                           const uint16_t *k, const uint16_t *v, const attn_quant_options *opt,
                           int n_var, const attn_profile *const *var, int n_ext,
                           const uint16_t *const *ext, pg_metric_values *metrics,
                           attn_quant_report *rep, uint16_t *const *mode_out, double *ref_out,
                           double *ms_ref,
                           double *ms_modes, double *ms_metrics, const pg_notes *notes,
                           pg_err *err);

/* Starts copying q, k, v of batch b (host, [tq, hq, d] / [tkv, hkv, d]) to
 * the GPU on a copy stream beside the kernels, so that the cuda_sweep_layer
 * call for the same arrays finds them there and skips its own upload (each
 * copy is used once). Call it for layer l+1 before sweeping layer l: two
 * layers' copies are held, so at most one may be ahead of the layer being
 * swept. The arrays must not change until then, and should be page-locked
 * (cuda_host_register): copies from pageable memory hold the calling thread.
 * Stages nothing (PG_OK) when two copies would take more than
 * CUDA_PREFETCH_MAX_SHARE of the free device memory. */
pg_status cuda_prefetch_qkv(cuda_backend *be, const attn_batch *b, const uint16_t *q,
                            const uint16_t *k, const uint16_t *v, pg_err *err);

/* Page-locks the host memory [p, p + bytes) (cudaHostRegister), for the
 * arrays a sweep uploads: copies from it run at the bus rate (53 GB/s on the
 * H200 machine, 2026-12-02, against 6 GB/s from a capture's mapping; locking
 * took 134 ms for 3 GB, and cudaMallocHost 115-121 ms for 252 MB, where
 * anonymous huge-page memory locked took 40-54 ms). PG_ERR_NOMEM /
 * PG_ERR_DEVICE with the reason. Needs a backend open. */
pg_status cuda_host_register(void *p, size_t bytes, pg_err *err);

/* Waits for the device's work (a copy from p may be in flight after a failed
 * layer), then unlocks what cuda_host_register locked; NULL is a no-op. */
void cuda_host_unregister(void *p);

/* Median milliseconds of each kernel of a layer, for bench/ (device-resident data). */
typedef struct cuda_kernel_times {
    double reference, cache_write_e4m3, dequant_gather, attn_bf16, quantize_q, attn_fp8, metrics;
    double gather_bytes;  /* bytes one dequant gather reads plus writes */
} cuda_kernel_times;

/* Times each kernel of one layer reps times (after a warm-up) with events. */
pg_status cuda_time_kernels(cuda_backend *be, const attn_batch *b, const uint16_t *q,
                            const uint16_t *k, const uint16_t *v, const attn_quant_options *opt,
                            int reps, cuda_kernel_times *t, pg_err *err);

#ifdef __cplusplus
}
#endif

#endif /* PG_ATTN_CUDA_H */
