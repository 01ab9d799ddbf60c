// cuda_common.cuh: what every CUDA file of precgate shares: the batch geometry
// as the kernels see it, the launchers' declarations, and CUDA_TRY, the one
// way a CUDA call's failure becomes a pg_status naming the kernel and call.
#ifndef PG_CUDA_COMMON_CUH
#define PG_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "attn_profile_impl.h"
#include "kv_cache.h"
#include "metrics.h"
#include "base/status.h"

// The one GPU the kernels are built for (CMakeLists.txt: CUDA architecture
// 90a): compute capability 9.0, with the sm_90a-only wgmma instructions.
#define CUDA_TARGET_SM 90

// Batch geometry on the device. Arrays are device pointers; the scalars are
// the same as attn_batch's, plus maxima the launchers size grids with.
typedef struct cuda_batch {
    int n_seqs, hq, hkv, d, window;
    float sm_scale;
    const int32_t *seq_q, *seq_kv;   // [n_seqs]
    const int64_t *q_off, *kv_off;   // [n_seqs] first row of each sequence in the packed tensors
    const float *sinks;              // [hq] or NULL
    int max_q, max_kv;               // longest seq_q / seq_kv
    int64_t tq, tkv;                 // sum of seq_q / seq_kv
} cuda_batch;

// A paged cache on the device, the layout of kv_cache.h.
typedef struct cuda_paged {
    pg_number_format elem;
    int block_size, pages_per_seq;
    int64_t n_pages;
    void *data;                      // [n_pages, 2, hkv, block_size, d]
    const int32_t *block_table;      // [n_seqs, pages_per_seq]
} cuda_paged;

// Quantization counters on the device, in fp8_quant_stats order.
enum { CUDA_QSTAT_N, CUDA_QSTAT_SAT, CUDA_QSTAT_NONZERO, CUDA_QSTAT_UNDERFLOW, CUDA_QSTAT_COUNT };

// Evaluates a CUDA runtime call; on failure records "WHAT: call: error" in err
// (first failure wins) and returns PG_ERR_DEVICE from the enclosing function.
#define CUDA_TRY(what, call)                                                              \
    do {                                                                                  \
        cudaError_t cuda_try_rc_ = (call);                                                \
        if (cuda_try_rc_ != cudaSuccess)                                                  \
            return pg_fail(err, PG_ERR_DEVICE, "%s: %s failed: %s (%s, %s:%d)", (what), #call, \
                           cudaGetErrorString(cuda_try_rc_), cudaGetErrorName(cuda_try_rc_), \
                           __FILE__, __LINE__);                                           \
    } while (0)

// Checks the launch just made (configuration errors) in the same way.
#define CUDA_TRY_LAUNCH(what) CUDA_TRY(what, cudaGetLastError())

// Like CUDA_TRY, but for functions that hold device buffers: records the
// failure in st and falls through, so the caller's cleanup still runs.
#define CUDA_STEP(st, what, call)                                                          \
    do {                                                                                   \
        if ((st) == PG_OK) {                                                               \
            cudaError_t step_rc_ = (call);                                                 \
            if (step_rc_ != cudaSuccess)                                                   \
                (st) = pg_fail(err, PG_ERR_DEVICE, "%s: %s failed: %s (%s)", (what), #call, \
                               cudaGetErrorString(step_rc_), cudaGetErrorName(step_rc_));  \
        }                                                                                  \
    } while (0)

// ---- the grid of the attention kernels ----

// Largest gridDim.y / gridDim.z (CUDA limit).
#define CUDA_MAX_GRID_YZ 65535

// Attention kernels launch on grid (hq x query blocks of bm rows, n_seqs) and
// take their block from attn_block_of: heads innermost, query blocks
// outermost and the last first. Blocks start in linear order, so under a
// causal mask the longest blocks (the last rows, which see the most keys)
// start first and the short ones fill the tail, instead of one long block
// per head starting last (FlashAttention's schedule). Sets *grid, or fails
// with PG_ERR_SHAPE naming what when the sequences exceed CUDA_MAX_GRID_YZ
// or heads x query blocks exceed gridDim.x's limit.
#define CUDA_MAX_GRID_X 2147483647LL
static inline pg_status attn_grid(const cuda_batch *b, int bm, const char *what, dim3 *grid,
                                  pg_err *err)
{
    const int64_t q_blocks = ((int64_t)b->max_q + bm - 1) / bm;
    if (b->hq < 1 || q_blocks * b->hq > CUDA_MAX_GRID_X || b->n_seqs > CUDA_MAX_GRID_YZ)
        return pg_fail(err, PG_ERR_SHAPE,
                       "%s: %d heads x %lld query blocks of %d rows, or %d sequences, exceed the "
                       "grid's limits",
                       what, b->hq, (long long)q_blocks, bm, b->n_seqs);
    *grid = dim3((unsigned)(q_blocks * b->hq), (unsigned)b->n_seqs);
    return PG_OK;
}

// The block of an attention kernel on attn_grid's grid for a batch of hq heads.
struct attn_block {
    int h, s, qb;  // query head, sequence, query block (rows qb * bm ..)
};

__device__ __forceinline__ attn_block attn_block_of(int hq)
{
    const unsigned x = blockIdx.x, q_blocks = gridDim.x / (unsigned)hq;
    return attn_block{(int)(x % (unsigned)hq), (int)blockIdx.y, (int)(q_blocks - 1 - x / (unsigned)hq)};
}

// ---- launchers (each in its own .cu file); all enqueue on stream ----

extern "C" {

// kv cache write (cuda_kv_cache.cu): packed bf16 k/v [tkv, hkv, d] into c
// through c->block_table; e4m3 / e5m2: x / scale with SATFINITE, nearest
// even; bf16: bits copied. stats (may be NULL): 2 x CUDA_QSTAT_COUNT counters, K then V,
// added to. Slots the batch does not fill are left as they were.
pg_status cuda_kv_cache_write(const cuda_batch *b, const uint16_t *k, const uint16_t *v,
                              float k_scale, float v_scale, cuda_paged *c,
                              unsigned long long *stats, cudaStream_t stream, pg_err *err);

// vLLM PR #24197's dequant gather (cuda_kv_cache.cu): mock page b*P+p+1 of
// out (bf16) = bf16(decode(src page) * scale) for src ids > 0; other pages untouched.
// halves: which parts are written, CUDA_HALF_K | CUDA_HALF_V (a compact copy
// mixed from two caches, for a tensor kept bf16).
#define CUDA_HALF_K 1u
#define CUDA_HALF_V 2u
pg_status cuda_kv_dequant_gather(const cuda_batch *b, const cuda_paged *src, float k_scale,
                                 float v_scale, unsigned halves, cuda_paged *out,
                                 cudaStream_t stream, pg_err *err);

// The e4m3 codes x [n] as their values in bf16 (cuda_kv_cache.cu): out[i] =
// bf16(fp8_e4m3_decode(x[i])), exact (fp8qkv@ideal's Q on the bf16 kernel).
pg_status cuda_e4m3_values_bf16(const uint8_t *x, int64_t n, uint16_t *out, cudaStream_t stream,
                                pg_err *err);

// e4m3 quantization of n bf16 values with a scale (cuda_kv_cache.cu): x / scale,
// or x * (1.0f / scale) when by_inverse (fp8_e4m3_quantize_bf16_inverse, vLLM's
// scaled_fp8_quant); stats as above (one set).
pg_status cuda_quantize_e4m3(const uint16_t *x, int64_t n, float scale, int by_inverse,
                             uint8_t *out, unsigned long long *stats, cudaStream_t stream,
                             pg_err *err);

// fp64 reference attention (cuda_attn_reference.cu): packed bf16 q [tq,hq,d],
// k/v [tkv,hkv,d] -> out fp64 [tq,hq,d]; d <= 128.
pg_status cuda_attn_reference(const cuda_batch *b, const uint16_t *q, const uint16_t *k,
                              const uint16_t *v, double *out, cudaStream_t stream, pg_err *err);

// Device bytes cuda_attn_reference allocates for a batch of n_seqs sequences
// with tkv keys in all, hkv kv heads of dim d (its fp64 K/V).
double cuda_attn_reference_scratch(int64_t tkv, int n_seqs, int hkv, int d);

// bf16 prefill attention through a bf16 paged cache (cuda_attn_bf16.cu), the
// specification's row_final_max: S scaled by b->sm_scale, P rounded to e4m3
// when p_e4m3 (fp8qkv@ideal) else bf16, out bf16((O * out_scale) / l)
// [tq,hq,d] (out_scale: 1 but for a bmm2_scale).
pg_status cuda_attn_bf16(const cuda_batch *b, const uint16_t *q, const cuda_paged *kv,
                         float out_scale, int p_e4m3, uint16_t *out, cudaStream_t stream,
                         pg_err *err);

// The fp8-matmul core a tiled fp8qkv profile runs (cuda_attn_fp8.cu): its
// softmax kind (FA3, TRTLLM or FLASHINFER), P.V accumulation, kBlockN at the
// batch's head dim, and its scales (attn_tiled_scales_of).
struct cuda_fp8_core {
    attn_softmax softmax;
    int two_level;       // ATTN_ACCUM_MMA_2LEVEL, else single-level
    int block_n;         // attn_profile_block_n
    attn_tiled_scales scales;
};

// Whether cuda_attn_fp8 has a kernel for head dim d and core's softmax,
// accumulation and tile width.
int cuda_attn_fp8_supports(int d, const cuda_fp8_core *core);

// Tiled fp8qkv prefill attention (cuda_attn_fp8.cu): e4m3 q8 [tq,hq,d] and an
// e4m3 paged cache, by core (cuda_attn_fp8_supports); out bf16. PG_ERR_SHAPE
// where no kernel is compiled for it.
pg_status cuda_attn_fp8(const cuda_batch *b, const uint8_t *q8, const cuda_paged *kv,
                        const cuda_fp8_core *core, uint16_t *out, cudaStream_t stream,
                        pg_err *err);

// Error metrics of out (bf16) against ref (fp64), [tq, hq, d] both
// (cuda_metrics.cu): m[0] whole layer, m[1 + h] head h, the definitions of
// metrics.h; p99 is the exact nearest-rank percentile of |out - ref| rounded to
// fp32. Synchronizes stream; scratch is allocated inside.
pg_status cuda_metrics(const uint16_t *out, const double *ref, int64_t tq, int hq, int d,
                       pg_metric_values *m, cudaStream_t stream, pg_err *err);

// The same in two steps, so that several comparisons share one wait:
// cuda_metrics_enqueue puts one comparison on stream (its kernels in scratch,
// cuda_metrics_scratch_bytes(tq, hq, d) device bytes) and the copy of its
// results into results (cuda_metrics_result_bytes(hq) host bytes, page-locked
// for the copy to stay asynchronous); after the stream has reached that copy,
// cuda_metrics_collect turns results into m[0 .. hq]. scratch may be reused
// by the next comparison on the same stream; results may not until collected.
// scratch is 256-byte aligned (as cudaMalloc's are); the sizes are those of
// a shape cuda_metrics accepts (tq, hq, d >= 0 within its limits).
size_t cuda_metrics_scratch_bytes(int64_t tq, int hq, int d);
size_t cuda_metrics_result_bytes(int hq);
pg_status cuda_metrics_enqueue(const uint16_t *out, const double *ref, int64_t tq, int hq, int d,
                               void *scratch, void *results, cudaStream_t stream, pg_err *err);
pg_status cuda_metrics_collect(const void *results, int64_t tq, int hq, int d,
                               pg_metric_values *m, pg_err *err);

}  // extern "C"

#endif  // PG_CUDA_COMMON_CUH
