// cuda_kv_cache.cu: the paged KV-cache write, vLLM PR #24197's dequant gather
// and plain e4m3 quantization on the GPU, bit for bit the CPU specification
// of kernels/kv_cache.c and kernels/numerics.c.
//
// Formats: bf16 (bits copied), e4m3 and e5m2 (per-tensor scales: vLLM's
// fp8 and fp8_e5m2 cache dtypes). Bit-exactness with the CPU:
//   encode  y = __fdiv_rn(bf16 -> fp32 x, scale) (IEEE quotient, as the CPU's
//           fp32 x / scale), byte = __nv_cvt_float_to_fp8(y, __NV_SATFINITE,
//           __NV_E4M3) (RNE, saturating to +-448, NaN -> 0x7F), the rounding
//           that fp8_e4m3_encode implements with integer arithmetic.
//           e5m2: the same with __NV_E5M2 (RNE, saturating to +-57344, inf
//           too; NaN -> 0x7F), fp8_e5m2_encode's rounding.
//   decode  built from the byte's bits exactly as fp8_e4m3_decode /
//           fp8_e5m2_decode do (e5m2: 0x7C / 0xFC +-inf, NaN above).
//   dequant bf16 = __float2bfloat16_rn(__fmul_rn(decode(byte), scale)), one
//           fp32 multiply and one RNE rounding, as bf16_from_f32(decode * scale).
//           NaN bytes (0x7F / 0xFF, e.g. the NaN filling of unwritten slots)
//           are mapped directly to the CPU's result 0x7FC0 / 0xFFC0: the
//           GPU's fp32 multiply and cvt.bf16 would return the canonical NaN
//           0x7FFF instead and lose the sign.
// Preconditions (the CPU has the same ones): scales positive and finite;
// batches checked by attn_batch_check; device buffers from cudaMalloc.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

// Declares the launchers (extern "C") defined here.
#include "cuda_common.cuh"

// Threads per block of every kernel here (a multiple of the warp size).
#define KV_THREADS 256
#define KV_WARP 32
#define KV_WARPS (KV_THREADS / KV_WARP)
#define KV_FULL_MASK 0xFFFFFFFFu
// Grid-stride kernels launch at most this many blocks along x (per sequence
// for the cache write): enough to fill an H200 many times over.
#define KV_MAX_BLOCKS_X 2048
// Largest gridDim.y (CUDA limit).
#define KV_MAX_GRID_Y 65535
// Elements per vector in the gather: 4 e4m3 bytes (uchar4) -> 4 bf16 (ushort4),
// or 4 bf16 copied (ushort4).
#define KV_VEC 4

// e4m3fn and bf16 constants (numerics.c).
#define E4M3_ABS_MASK 0x7Fu
#define E4M3_SIGN_BIT 0x80u
#define E4M3_NAN_MAG 0x7Fu
#define E4M3_MAN_BITS 3u
#define E4M3_EXP_REBIAS (127u - 7u)   // binary32 bias - e4m3 bias
#define E4M3_SUBNORMAL_UNIT 0x1p-9f   // smallest e4m3 subnormal
#define E4M3_MAX_F32_BITS 0x43E00000u // 448.0f
#define E5M2_MAN_BITS 2u
#define E5M2_INF_MAG 0x7Cu
#define E5M2_EXP_REBIAS (127u - 15u)  // binary32 bias - e5m2 bias
#define E5M2_SUBNORMAL_UNIT 0x1p-16f  // smallest e5m2 subnormal
#define E5M2_MAX_F32_BITS 0x47600000u // 57344.0f
#define F32_ABS_MASK 0x7FFFFFFFu
#define F32_INF_BITS 0x7F800000u
#define F32_QNAN_BITS 0x7FC00000u
#define F32_MAN_BITS 23u
#define BF16_SHIFT 16u
#define BF16_QUIET_BIT 0x0040u
#define BF16_SIGN_BIT 0x8000u

// What a cache's elements are, to the write and gather kernels.
#define KV_CODES_BF16 0
#define KV_CODES_E4M3 1
#define KV_CODES_E5M2 2

namespace {  // kernels and helpers are private to this file

// ---- element conversions --------------------------------------------------

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t h)
{
    return __uint_as_float((uint32_t)h << BF16_SHIFT);
}

// fp8_e4m3_decode of numerics.c: the exact fp32 value of byte b, a quiet NaN
// with b's sign for 0x7F / 0xFF.
__device__ __forceinline__ float e4m3_decode(unsigned b)
{
    const unsigned mag = b & E4M3_ABS_MASK;
    const uint32_t sign = (uint32_t)(b & E4M3_SIGN_BIT) << 24;
    if (mag == E4M3_NAN_MAG) return __uint_as_float(F32_QNAN_BITS | sign);
    const unsigned e = mag >> E4M3_MAN_BITS;
    const unsigned m = mag & ((1u << E4M3_MAN_BITS) - 1u);
    if (e == 0u) {
        const float v = (float)m * E4M3_SUBNORMAL_UNIT;  // exact
        return sign ? -v : v;                            // 0x80 -> -0
    }
    return __uint_as_float(sign | ((e + E4M3_EXP_REBIAS) << F32_MAN_BITS) |
                           ((uint32_t)m << (F32_MAN_BITS - E4M3_MAN_BITS)));
}

// fp8_e5m2_decode of numerics.c: the exact fp32 value of byte b, +-inf for
// 0x7C / 0xFC, a quiet NaN with b's sign above them.
__device__ __forceinline__ float e5m2_decode(unsigned b)
{
    const unsigned mag = b & E4M3_ABS_MASK;
    const uint32_t sign = (uint32_t)(b & E4M3_SIGN_BIT) << 24;
    if (mag == E5M2_INF_MAG) return __uint_as_float(F32_INF_BITS | sign);
    if (mag > E5M2_INF_MAG) return __uint_as_float(F32_QNAN_BITS | sign);
    const unsigned e = mag >> E5M2_MAN_BITS;
    const unsigned m = mag & ((1u << E5M2_MAN_BITS) - 1u);
    if (e == 0u) {
        const float v = (float)m * E5M2_SUBNORMAL_UNIT;  // exact
        return sign ? -v : v;
    }
    return __uint_as_float(sign | ((e + E5M2_EXP_REBIAS) << F32_MAN_BITS) |
                           ((uint32_t)m << (F32_MAN_BITS - E5M2_MAN_BITS)));
}

// bf16_from_f32 of numerics.c: RNE; a NaN keeps its sign and top payload with
// the quiet bit forced (cvt.rn.bf16.f32 would give the canonical 0x7FFF).
__device__ __forceinline__ uint16_t f32_to_bf16_bits(float x)
{
    const uint32_t u = __float_as_uint(x);
    if ((u & F32_ABS_MASK) > F32_INF_BITS) return (uint16_t)((u >> BF16_SHIFT) | BF16_QUIET_BIT);
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

// The dequant of one byte of format E5M2 (else e4m3):
// bf16_from_f32(decode(b) * scale).
template <bool E5M2>
__device__ __forceinline__ uint16_t fp8_dequant_bf16(unsigned b, float scale)
{
    // CPU: the NaN operand of an SSE multiply comes through unchanged
    // (0x7FC00000 | sign), and bf16_from_f32 turns it into 0x7FC0 | sign.
    const unsigned mag = b & E4M3_ABS_MASK;
    if (E5M2 ? mag > E5M2_INF_MAG : mag == E4M3_NAN_MAG)
        return (uint16_t)(((b & E4M3_SIGN_BIT) ? BF16_SIGN_BIT : 0u) | (F32_QNAN_BITS >> BF16_SHIFT));
    return f32_to_bf16_bits(__fmul_rn(E5M2 ? e5m2_decode(b) : e4m3_decode(b), scale));
}

// fp8_e4m3_quantize_bf16 (E5M2: fp8_e5m2_quantize_bf16) of one value: returns
// the byte and adds to the four counters c[CUDA_QSTAT_*] exactly as the CPU
// does (saturation: |y| above the format's largest finite value).
template <bool E5M2>
__device__ __forceinline__ uint8_t fp8_quantize_count(uint16_t xbits, float scale, unsigned *c,
                                                      bool by_inverse = false)
{
    const float x = bf16_bits_to_f32(xbits);
    const float y = by_inverse ? __fmul_rn(x, scale) : __fdiv_rn(x, scale);
    const uint8_t b =
        (uint8_t)__nv_cvt_float_to_fp8(y, __NV_SATFINITE, E5M2 ? __NV_E5M2 : __NV_E4M3);
    const uint32_t ay = __float_as_uint(y) & F32_ABS_MASK;
    const unsigned nz = (x != 0.0f);  // a NaN counts as nonzero
    c[CUDA_QSTAT_N] += 1u;
    c[CUDA_QSTAT_SAT] += (ay > (E5M2 ? E5M2_MAX_F32_BITS : E4M3_MAX_F32_BITS) && ay <= F32_INF_BITS);
    c[CUDA_QSTAT_NONZERO] += nz;
    c[CUDA_QSTAT_UNDERFLOW] += (nz && (b & E4M3_ABS_MASK) == 0u);
    return b;
}

// Adds each thread's N counters (32-bit per thread) into stats[0..N) with one
// atomicAdd per counter per block. Every thread of the block must call it
// (it has a __syncthreads); blockDim.x == KV_THREADS.
template <int N>
__device__ void block_add_counters(const unsigned (&c)[N], unsigned long long *stats)
{
    __shared__ unsigned long long part[KV_WARPS][N];
    const int lane = (int)threadIdx.x % KV_WARP, warp = (int)threadIdx.x / KV_WARP;
#pragma unroll
    for (int n = 0; n < N; n++) {
        unsigned long long x = c[n];
#pragma unroll
        for (int off = KV_WARP / 2; off > 0; off >>= 1) x += __shfl_xor_sync(KV_FULL_MASK, x, off);
        if (lane == 0) part[warp][n] = x;
    }
    __syncthreads();
    if ((int)threadIdx.x < N) {
        unsigned long long sum = 0;
        for (int w = 0; w < KV_WARPS; w++) sum += part[w][threadIdx.x];
        if (sum != 0) atomicAdd(&stats[threadIdx.x], sum);
    }
}

// ---- kernels -----------------------------------------------------------------

// Cache write. grid (x: grid-stride over one sequence's elements, y: sequence
// s), KV_THREADS threads. Element e of sequence s is (t, g, i) = kv token t,
// kv head g, dim i of the packed row kv_off[s] + t; consecutive threads take
// consecutive i. K goes to page block_table[s*P + t/bs], slot t % bs, half 0;
// V to half 1. e4m3 / e5m2 (mode KV_CODES_*): encoded with the scale and
// counted into stats[0..4) (K) / stats[4..8) (V) when stats != NULL; bf16:
// bits copied, no stats (the CPU counts nothing there either). A page id <= 0 is not written (vLLM skips
// negative slots); its values are still counted.
__global__ void __launch_bounds__(KV_THREADS)
kv_write_kernel(const int32_t *__restrict__ seq_kv, const int64_t *__restrict__ kv_off, int hkv,
                int d, const uint16_t *__restrict__ k, const uint16_t *__restrict__ v,
                float k_scale, float v_scale, int mode, int block_size, int pages_per_seq,
                const int32_t *__restrict__ block_table, void *__restrict__ data,
                unsigned long long *__restrict__ stats)
{
    const int s = blockIdx.y;
    const int64_t row_elems = (int64_t)hkv * d;
    const int64_t n = (int64_t)seq_kv[s] * row_elems;
    const int64_t src0 = kv_off[s] * row_elems;
    const int64_t half = (int64_t)hkv * block_size * d;  // elements of a page's K (or V) part
    const int32_t *bt = block_table + (int64_t)s * pages_per_seq;
    unsigned c[2 * CUDA_QSTAT_COUNT] = {0u};

    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int t = (int)(e / row_elems);
        const int64_t rem = e - (int64_t)t * row_elems;
        const int g = (int)(rem / d);
        const int i = (int)(rem - (int64_t)g * d);
        const int64_t page = bt[t / block_size];
        const int slot = t % block_size;
        const int64_t kdst = (page * 2 * hkv + g) * (int64_t)block_size * d + (int64_t)slot * d + i;
        const int64_t vdst = kdst + half;
        const uint16_t kx = k[src0 + e], vx = v[src0 + e];
        if (mode != KV_CODES_BF16) {
            const bool e5 = mode == KV_CODES_E5M2;
            const uint8_t kb = e5 ? fp8_quantize_count<true>(kx, k_scale, c)
                                  : fp8_quantize_count<false>(kx, k_scale, c);
            const uint8_t vb = e5 ? fp8_quantize_count<true>(vx, v_scale, c + CUDA_QSTAT_COUNT)
                                  : fp8_quantize_count<false>(vx, v_scale, c + CUDA_QSTAT_COUNT);
            if (page > 0) {
                ((uint8_t *)data)[kdst] = kb;
                ((uint8_t *)data)[vdst] = vb;
            }
        } else if (page > 0) {
            ((uint16_t *)data)[kdst] = kx;
            ((uint16_t *)data)[vdst] = vx;
        }
    }
    if (mode != KV_CODES_BF16 && stats != NULL) block_add_counters<2 * CUDA_QSTAT_COUNT>(c, stats);
}

// Dequant gather. grid (x: b*P + p, y: 0 = K / 1 = V half), KV_THREADS
// threads. src id = src_bt[b*P + p]; id <= 0: nothing (the Triton kernel
// returns early). Else out page b*P + p + 1, half y = dequant (e4m3, e5m2:
// mode KV_CODES_*) or copy (bf16) of src page id, half y; half_elems = hkv * bs * d. vec: half_elems %
// KV_VEC == 0 and both buffers 8-byte aligned, so 4-element vectors are
// aligned everywhere; else one element per step. Only the halves whose bit
// is set in halves (1 K, 2 V) are written.
__global__ void __launch_bounds__(KV_THREADS)
kv_gather_kernel(const int32_t *__restrict__ src_bt, int64_t half_elems, int mode,
                 const void *__restrict__ src, float k_scale, float v_scale, unsigned halves,
                 uint16_t *__restrict__ dst, int vec)
{
    const int64_t bp = blockIdx.x;
    const int which = blockIdx.y;
    const int64_t id = src_bt[bp];
    if (id <= 0 || !((halves >> which) & 1u)) return;
    const int64_t from = (id * 2 + which) * half_elems;
    const int64_t to = ((bp + 1) * 2 + which) * half_elems;
    const float scale = which == 0 ? k_scale : v_scale;
    uint16_t *o = dst + to;
    if (mode != KV_CODES_BF16) {
        const bool e5 = mode == KV_CODES_E5M2;
        const uint8_t *in = (const uint8_t *)src + from;
        if (vec) {
            const int64_t nv = half_elems / KV_VEC;
            for (int64_t q = threadIdx.x; q < nv; q += blockDim.x) {
                const uchar4 x = ((const uchar4 *)in)[q];
                ushort4 y;
                if (e5) {
                    y.x = fp8_dequant_bf16<true>(x.x, scale);
                    y.y = fp8_dequant_bf16<true>(x.y, scale);
                    y.z = fp8_dequant_bf16<true>(x.z, scale);
                    y.w = fp8_dequant_bf16<true>(x.w, scale);
                } else {
                    y.x = fp8_dequant_bf16<false>(x.x, scale);
                    y.y = fp8_dequant_bf16<false>(x.y, scale);
                    y.z = fp8_dequant_bf16<false>(x.z, scale);
                    y.w = fp8_dequant_bf16<false>(x.w, scale);
                }
                ((ushort4 *)o)[q] = y;
            }
        } else {
            for (int64_t q = threadIdx.x; q < half_elems; q += blockDim.x)
                o[q] = e5 ? fp8_dequant_bf16<true>(in[q], scale)
                          : fp8_dequant_bf16<false>(in[q], scale);
        }
    } else {
        const uint16_t *in = (const uint16_t *)src + from;
        if (vec) {
            const int64_t nv = half_elems / KV_VEC;
            for (int64_t q = threadIdx.x; q < nv; q += blockDim.x)
                ((ushort4 *)o)[q] = ((const ushort4 *)in)[q];
        } else {
            for (int64_t q = threadIdx.x; q < half_elems; q += blockDim.x) o[q] = in[q];
        }
    }
}

// e4m3 quantization of n bf16 values, grid-stride; stats (may be NULL) gets
// the four counters of fp8_e4m3_quantize_bf16. by_inverse: scale is the
// inverse, multiplied (fp8_e4m3_quantize_bf16_inverse).
__global__ void __launch_bounds__(KV_THREADS)
quantize_e4m3_kernel(const uint16_t *__restrict__ x, int64_t n, float scale, bool by_inverse,
                     uint8_t *__restrict__ out, unsigned long long *__restrict__ stats)
{
    unsigned c[CUDA_QSTAT_COUNT] = {0u};
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x)
        out[e] = fp8_quantize_count<false>(x[e], scale, c, by_inverse);
    if (stats != NULL) block_add_counters<CUDA_QSTAT_COUNT>(c, stats);
}

// e4m3 codes as bf16 values, grid-stride: out[i] = bf16(fp8_e4m3_decode(x[i]))
// (exact: every e4m3 value is a bf16; NaN codes as fp8_dequant_bf16).
__global__ void __launch_bounds__(KV_THREADS)
e4m3_values_kernel(const uint8_t *__restrict__ x, int64_t n, uint16_t *__restrict__ out)
{
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x)
        out[e] = fp8_dequant_bf16<false>(x[e], 1.0f);
}

// The kv_write_kernel / kv_gather_kernel mode of a cache element type, or -1.
int kv_codes_of(pg_number_format e)
{
    return e == PG_FORMAT_BF16   ? KV_CODES_BF16
           : e == PG_FORMAT_E4M3 ? KV_CODES_E4M3
           : e == PG_FORMAT_E5M2 ? KV_CODES_E5M2
                                 : -1;
}

// ---- launchers ----------------------------------------------------------------

// Blocks for a grid-stride loop over n elements (n > 0).
unsigned grid_stride_blocks(int64_t n)
{
    const int64_t blocks = (n + KV_THREADS - 1) / KV_THREADS;
    return (unsigned)(blocks < KV_MAX_BLOCKS_X ? blocks : KV_MAX_BLOCKS_X);
}

}  // namespace

// Contract (cuda_common.cuh): b->seq_kv, b->kv_off, k, v, c->data,
// c->block_table on the device; k/v packed bf16 [b->tkv, hkv, d]; c has
// c->block_table [n_seqs, pages_per_seq] with pages_per_seq >= ceil(max_kv /
// block_size) and every page id it uses < c->n_pages. Only the slots of the
// batch's tokens are written. stats: 8 device counters, K then V, added to
// (e4m3 only). Asynchronous on stream.
extern "C" pg_status cuda_kv_cache_write(const cuda_batch *b, const uint16_t *k,
                                         const uint16_t *v, float k_scale, float v_scale,
                                         cuda_paged *c, unsigned long long *stats,
                                         cudaStream_t stream, pg_err *err)
{
    static const char what[] = "cuda_kv_cache_write";
    const int mode = kv_codes_of(c->elem);
    if (mode < 0)
        return pg_fail(err, PG_ERR_INTERNAL, "%s: unknown cache element type %d", what, (int)c->elem);
    if (b->n_seqs < 0 || b->hkv < 1 || b->d < 1 || c->block_size < 1 || b->max_kv < 0)
        return pg_fail(err, PG_ERR_SHAPE, "%s: bad shape (n_seqs %d, hkv %d, d %d, block %d)", what,
                       b->n_seqs, b->hkv, b->d, c->block_size);
    if (b->n_seqs > KV_MAX_GRID_Y)
        return pg_fail(err, PG_ERR_SHAPE, "%s: %d sequences exceed %d", what, b->n_seqs,
                       KV_MAX_GRID_Y);
    const int64_t need = ((int64_t)b->max_kv + c->block_size - 1) / c->block_size;
    if (need > c->pages_per_seq)
        return pg_fail(err, PG_ERR_SHAPE, "%s: %d kv tokens need %lld pages, block table has %d",
                       what, b->max_kv, (long long)need, c->pages_per_seq);
    if (b->n_seqs == 0 || b->max_kv == 0) return PG_OK;
    const dim3 grid(grid_stride_blocks((int64_t)b->max_kv * b->hkv * b->d), (unsigned)b->n_seqs);
    kv_write_kernel<<<grid, KV_THREADS, 0, stream>>>(
        b->seq_kv, b->kv_off, b->hkv, b->d, k, v, k_scale, v_scale, mode,
        c->block_size, c->pages_per_seq, c->block_table, c->data, stats);
    CUDA_TRY_LAUNCH(what);
    return PG_OK;
}

// Contract (cuda_common.cuh): src e4m3, e5m2 or bf16 with block table [n_seqs,
// P = src->pages_per_seq] (ids < src->n_pages); out bf16, same block size,
// pages_per_seq P, n_pages >= n_seqs*P + 1. Writes the K (halves bit 1) and V
// (bit 2) parts of page b*P+p+1 of out for every src id > 0 and nothing else. out->block_table is NOT written here: the
// caller fills it with arange(1, n_seqs*P + 1) (the host builds it, as the CPU
// kv_dequant_gather does). Asynchronous on stream.
extern "C" pg_status cuda_kv_dequant_gather(const cuda_batch *b, const cuda_paged *src,
                                            float k_scale, float v_scale, unsigned halves,
                                            cuda_paged *out, cudaStream_t stream, pg_err *err)
{
    static const char what[] = "cuda_kv_dequant_gather";
    const int mode = kv_codes_of(src->elem);
    if (mode < 0)
        return pg_fail(err, PG_ERR_INTERNAL, "%s: unknown source element type %d", what,
                       (int)src->elem);
    if (out->elem != PG_FORMAT_BF16)
        return pg_fail(err, PG_ERR_INTERNAL, "%s: the output cache must be bf16", what);
    const int64_t B = b->n_seqs, P = src->pages_per_seq;
    if (B < 0 || P < 0 || b->hkv < 1 || b->d < 1 || src->block_size < 1 ||
        out->block_size != src->block_size || out->pages_per_seq != src->pages_per_seq ||
        out->n_pages < B * P + 1)
        return pg_fail(err, PG_ERR_SHAPE,
                       "%s: caches do not match (block %d/%d, pages per seq %d/%d, out pages %lld "
                       "for %lld x %lld)",
                       what, src->block_size, out->block_size, src->pages_per_seq,
                       out->pages_per_seq, (long long)out->n_pages, (long long)B, (long long)P);
    if (B * P > INT32_MAX)
        return pg_fail(err, PG_ERR_SHAPE, "%s: %lld pages exceed the grid", what,
                       (long long)(B * P));
    if (B * P == 0) return PG_OK;
    const int64_t half = (int64_t)b->hkv * src->block_size * b->d;
    const int vec = half % KV_VEC == 0 && (uintptr_t)src->data % 8 == 0 &&
                    (uintptr_t)out->data % 8 == 0;
    const dim3 grid((unsigned)(B * P), 2);
    kv_gather_kernel<<<grid, KV_THREADS, 0, stream>>>(src->block_table, half,
                                                      mode, src->data, k_scale, v_scale,
                                                      halves, (uint16_t *)out->data, vec);
    CUDA_TRY_LAUNCH(what);
    return PG_OK;
}

// Contract (cuda_common.cuh): x (n bf16), out (n bytes), stats (4 counters or
// NULL) on the device; out[i] = e4m3(x[i] / scale), or e4m3(x[i] * (1.0f /
// scale)) when by_inverse, with SATFINITE, RNE.
// Asynchronous on stream.
extern "C" pg_status cuda_quantize_e4m3(const uint16_t *x, int64_t n, float scale, int by_inverse,
                                        uint8_t *out, unsigned long long *stats,
                                        cudaStream_t stream, pg_err *err)
{
    static const char what[] = "cuda_quantize_e4m3";
    if (n < 0) return pg_fail(err, PG_ERR_SHAPE, "%s: negative count %lld", what, (long long)n);
    if (n == 0) return PG_OK;
    // the inverse as fp8_e4m3_quantize_bf16_inverse takes it: 1.0f / scale in fp32
    const float s = by_inverse ? 1.0f / scale : scale;
    quantize_e4m3_kernel<<<grid_stride_blocks(n), KV_THREADS, 0, stream>>>(x, n, s, by_inverse != 0,
                                                                            out, stats);
    CUDA_TRY_LAUNCH(what);
    return PG_OK;
}

// Contract (cuda_common.cuh): x (n e4m3 bytes) and out (n bf16) on the
// device. Asynchronous on stream.
extern "C" pg_status cuda_e4m3_values_bf16(const uint8_t *x, int64_t n, uint16_t *out,
                                           cudaStream_t stream, pg_err *err)
{
    static const char what[] = "cuda_e4m3_values_bf16";
    if (n < 0) return pg_fail(err, PG_ERR_SHAPE, "%s: negative count %lld", what, (long long)n);
    if (n == 0) return PG_OK;
    e4m3_values_kernel<<<grid_stride_blocks(n), KV_THREADS, 0, stream>>>(x, n, out);
    CUDA_TRY_LAUNCH(what);
    return PG_OK;
}
