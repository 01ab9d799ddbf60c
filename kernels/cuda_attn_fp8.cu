// cuda_attn_fp8.cu: fp8 (e4m3) prefill attention on the GPU, the tiled
// fp8qkv profiles of kernels/attn_profile.h (@fa3, @fa3-1level, @trtllm,
// @flashinfer-fa3), one kernel templated on what they differ in. The CPU
// specification's row_tiled (attn_modes.c) states the same rules, with their
// sources (attn_profile.c); common to all of them:
//   - S = Q8.K8^T on Hopper's fp8 tensor cores (wgmma m64nNk32 e4m3, fp32
//     accumulators, one chain of k = 32 steps over d from zero; the hardware's
//     accumulation is the rule of kernels/fp8_mma.h);
//   - key tiles of the profile's kBlockN keys aligned at key 0
//     (attn_profile_block_n: FA3 128 / 192, upstream FA3 160, TRT-LLM 256,
//     FlashInfer 128 at d 64 / 128), 160 and 256 issued as column pieces
//     (cuda_wgmma.cuh wgmma_e4m3_cols: no result bit changes);
//   - a running max m of the raw scores over the tiles seen; O and l
//     rescaled by corr = exp2((m_old - m_new) * s) when it grows;
//   - P cast to e4m3 (cvt.rn.satfinite) for O += P8.V8.
// What the template arguments choose (attn_softmax KIND, TWO_LEVEL):
//   - FA3 (vllm-project/flash-attention hopper/, read at 617264c1): tiles
//     last to first (mainloop_fwd_sm90_tma_gmma_ws.hpp mma: n_block from
//     n_block_max - 1 down); P = exp2(S*s - (m*s - 8)) in [0, 256]
//     (hopper/softmax.h scale_apply_exp2, Max_offset 8, both a*b - c fused);
//     the sink joins l only, against the final max (finalize_aux); O =
//     acc * ((1 / l) * v_descale). @fa3 is the fork's two-level P.V
//     (hopper/utils.h gemm: each tile's O_tile from zero, then O += O_tile in
//     fp32); @fa3-1level chains O through every tile's wgmma.
//   - TRT-LLM (fmha_v2 warpspec/epilogue.h): tiles first to last; P =
//     exp2(fma.rz(S, s, -fma(m, s, -8))); l = fma(l, corr, tile sum); the
//     sink term exp2(sink log2e - m s + 8) in double; O = (acc (1 / l))
//     bmm2_scale; single-level.
//   - FlashInfer (hopper/attention_updater.cuh, variants.cuh): tiles last to
//     first; P = exp2(S*s - m*s) in [0, 1] summed into l, then P * p_scale
//     cast; O = acc * (pv_scale / l); no sinks; single-level.
// K and V come straight from the paged e4m3 cache through the block table. A
// block is two warpgroups (128 query rows); each issues its own wgmma with A
// (Q, then P) from registers and B (K, then V^T) from the shared-memory stage
// of the current key tile.
//
// Layout trick for P.V: the fp32 accumulator of S holds, per thread, keys
// 8i + 2q and 8i + 2q + 1 (i = 0..3, q = lane % 4) of each 32-key chunk,
// while the k32 A operand wants four consecutive k slots per register. The
// product does not care about the order of its k index (one alignment over
// the 32 products of a k step, kernels/fp8_mma.h), so slot s of each 16-key
// group is assigned key fp8_slot_key(s), and a pre-pass (fp8_vt_kernel)
// writes V transposed, [page][hkv][d][block_size], in that order: each
// thread packs its own P values with no shuffles, and V^T tiles stream in
// with cp.async like K's.
#include <cuda_fp8.h>
#include <math.h>

#include "attn_profile_impl.h"
#include "cuda_common.cuh"
#include "cuda_mma.cuh"
#include "cuda_attn_tile.cuh"
#include "cuda_softmax.cuh"
#include "cuda_wgmma.cuh"

namespace {

constexpr int F8_BM = 128;                // query rows per block (8 warps share each K/V tile)
constexpr int F8_WARPS = F8_BM / 16;      // 16 rows per warp, 4 warps per warpgroup
constexpr int F8_THREADS = F8_WARPS * 32;
constexpr int F8_KCHUNK = 32;             // k of one e4m3 mma
// log2(e) as FA3's finalize_aux multiplies the sink by it (float(M_LOG2E)).
constexpr float F8_LOG2E_F32 = (float)ATTN_LOG2E_F64;

// Key (within a 16-key group) that k slot s of the P.V product stands for.
__device__ __forceinline__ int fp8_slot_key(int s)
{
    const int q = s / 4, e = s % 4;
    return (e / 2) * 8 + 2 * q + (e % 2);
}

constexpr int F8_GROUP = 16;            // keys per permuted group (one ldmatrix row)
constexpr int F8_VT_THREADS = 256;

// V^T in slot order, one page per block (grid: pages_per_seq, n_seqs):
// vt[((page * hkv + g) * D + dim) * bs + grp * 16 + slot] = V[key][dim] with
// key = grp * 16 + fp8_slot_key(slot); keys past the sequence's end get 0, so
// that P = 0 there never meets the cache's NaN fill (0 * NaN = NaN).
__global__ void __launch_bounds__(F8_VT_THREADS)
fp8_vt_kernel(const cuda_batch b, const uint8_t *__restrict__ cache,
              const int32_t *__restrict__ block_table, int block_size, int pages_per_seq,
              uint8_t *__restrict__ vt)
{
    const int p = blockIdx.x, s = blockIdx.y, d = b.d;
    const int skv = b.seq_kv[s];
    if (p * block_size >= skv) return;
    const int64_t page = block_table[(int64_t)s * pages_per_seq + p];
    if (page <= 0) return;
    const int groups = block_size / F8_GROUP;
    const int64_t half = (int64_t)b.hkv * block_size * d;
    const uint8_t *v = cache + page * 2 * half + half;   // the page's V part [hkv][bs][d]
    for (int w = threadIdx.x; w < b.hkv * d * groups; w += F8_VT_THREADS) {
        const int grp = w % groups, dim = (w / groups) % d, g = w / (groups * d);
        uint32_t word[F8_GROUP / 4];
#pragma unroll
        for (int i = 0; i < F8_GROUP / 4; i++) {
            uint32_t packed = 0;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int slot = grp * F8_GROUP + fp8_slot_key(4 * i + e);
                const uint32_t byte = p * block_size + slot < skv
                                          ? v[((int64_t)g * block_size + slot) * d + dim]
                                          : 0u;
                packed |= byte << (8 * e);
            }
            word[i] = packed;
        }
        uint4 *dst = reinterpret_cast<uint4 *>(
            vt + ((page * b.hkv + g) * (int64_t)d + dim) * block_size + grp * F8_GROUP);
        *dst = make_uint4(word[0], word[1], word[2], word[3]);
    }
}

// Shared-memory plan. Q rows are padded by 16 bytes for conflict-free
// ldmatrix; the K tile ([BN keys][D]) and the V^T tile ([D][BN keys])
// are in wgmma's no-swizzle core-matrix layout (wgmma_tile_offset).
template <int D, int BN>
struct fp8_smem {
    static constexpr int stride = D + 16;       // bytes per Q row
    static constexpr int q_bytes = F8_BM * stride;
    static constexpr int kv_bytes = BN * D;     // one K tile, and one V^T tile
    static constexpr size_t bytes = (size_t)q_bytes + 4 * kv_bytes;
};

// The online softmax of profile kind KIND on one key tile of raw scores sc
// (wgmma m64nN accumulator layout, cuda_softmax.cuh): masks keys outside each
// row's range to -inf, takes the tile max tm of each row (quad-reduced), and
// when it exceeds the running max m rescales the row's O accumulators and
// partial sum by corr = exp2((m - tm) * s) (0 for a row's first keys: m =
// -inf); then replaces sc by P (the kind's rule, in the header) and adds it
// to the partial sums l (TRT-LLM: l = fma(l, corr, tile sum)); FlashInfer's
// P leaves multiplied by p_scale, after the sum.
template <attn_softmax KIND, int BN, int D>
__device__ __forceinline__ void fp8_softmax_tile(float (&sc)[BN / 8][4], float (&m)[2],
                                                 float (&l)[2], float (&o)[D / 8][4],
                                                 const cuda_batch &b, int row0, int n0, int sq,
                                                 int ctx, const attn_tiled_scales &ts)
{
    const int lane = threadIdx.x % 32;
    const float s = ts.scale_log2;
    float tm[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int j = row0 + (e / 2) * 8;
            const int t = n0 + nt * 8 + (lane % 4) * 2 + (e & 1);
            if (!softmax_key_visible(b, j, t, sq, ctx)) sc[nt][e] = -INFINITY;
            tm[e / 2] = fmaxf(tm[e / 2], sc[nt][e]);
        }
    float max_scaled[2], corr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        tm[r] = fmaxf(tm[r], __shfl_xor_sync(0xffffffffu, tm[r], 1));
        tm[r] = fmaxf(tm[r], __shfl_xor_sync(0xffffffffu, tm[r], 2));
        corr[r] = 1.f;
        if (tm[r] > m[r]) {
            corr[r] = fast_exp2((m[r] - tm[r]) * s);  // m = -inf: 0
#pragma unroll
            for (int i = 0; i < D / 8; i++) {
                o[i][2 * r] *= corr[r];
                o[i][2 * r + 1] *= corr[r];
            }
            m[r] = tm[r];
        }
        if (KIND != ATTN_SOFTMAX_TRTLLM) l[r] *= corr[r];
        // a row with no key yet: every P of this tile is exp2(-inf) = 0
        const float mr = m[r] == -INFINITY ? 0.f : m[r];
        max_scaled[r] = KIND == ATTN_SOFTMAX_FLASHINFER ? mr * s : __fmaf_rn(mr, s, -ts.max_offset);
    }
    float tile_sum[2] = {0.f, 0.f};
#pragma unroll
    for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float p;
            if (KIND == ATTN_SOFTMAX_TRTLLM) {
                p = fast_exp2(__fmaf_rz(sc[nt][e], s, -max_scaled[e / 2]));
                tile_sum[e / 2] += p;
            } else {
                p = fast_exp2(__fmaf_rn(sc[nt][e], s, -max_scaled[e / 2]));
                l[e / 2] += p;
            }
            sc[nt][e] = KIND == ATTN_SOFTMAX_FLASHINFER ? p * ts.p_scale : p;
        }
    if (KIND == ATTN_SOFTMAX_TRTLLM)
#pragma unroll
        for (int r = 0; r < 2; r++) l[r] = __fmaf_rn(l[r], corr[r], tile_sum[r]);
}

// Row r's output factors (store_row's mul and mul2) from this thread's
// partial sum l and the final max m, the kind's finalize (header): the
// quad's sums, the sink (FA3, TRT-LLM), then 1 / l and the V descale.
template <attn_softmax KIND>
__device__ __forceinline__ void fp8_finish(const float (&l)[2], const float (&m)[2], int r,
                                           const float *sinks, int h,
                                           const attn_tiled_scales &ts, float *mul, float *mul2)
{
    float lr = l[r];
    lr += __shfl_xor_sync(0xffffffffu, lr, 1);
    lr += __shfl_xor_sync(0xffffffffu, lr, 2);
    const float mr = m[r] == -INFINITY ? 0.f : m[r];
    const float s = ts.scale_log2;
    *mul2 = 1.f;
    if (KIND == ATTN_SOFTMAX_FA3) {
        if (sinks != nullptr)
            lr += fast_exp2(__fmaf_rn(F8_LOG2E_F32, sinks[h], -__fmaf_rn(mr, s, -ts.max_offset)));
        *mul = ((lr == 0.f || lr != lr) ? 0.f : 1.f / lr) * ts.v_descale;
    } else if (KIND == ATTN_SOFTMAX_TRTLLM) {
        if (sinks != nullptr)
            lr += fast_exp2((float)((double)sinks[h] * ATTN_LOG2E_F64 - (double)(mr * s) +
                                    (double)ts.max_offset));
        *mul = lr == 0.f ? 1.f : 1.f / lr;
        *mul2 = ts.v_descale;
    } else {
        *mul = lr > 0.f ? ts.v_descale / lr : 0.f;
    }
}

// Two floats to packed e4m3 (low byte first), saturating, nearest even.
__device__ __forceinline__ uint32_t pack_e4m3x2(float lo, float hi)
{
    return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3);
}

// One block: 128 query rows of one (sequence, head), every key tile they see,
// by profile kind KIND with BN-key tiles; TWO_LEVEL: each tile's P.V from
// zero, added into O in fp32 (else chained through O).
template <int D, int BN, attn_softmax KIND, bool TWO_LEVEL>
__global__ void __launch_bounds__(F8_THREADS, 1)
attn_fp8_kernel(const cuda_batch b, const uint8_t *__restrict__ q8,
                const uint8_t *__restrict__ cache, const uint8_t *__restrict__ vt,
                const int32_t *__restrict__ block_table,
                const int block_size, const int pages_per_seq, const attn_tiled_scales ts,
                uint16_t *__restrict__ out)
{
    using sm = fp8_smem<D, BN>;
    // the kinds that visit their tiles from the last to the first
    constexpr bool DESCENDING = KIND != ATTN_SOFTMAX_TRTLLM;
    constexpr int CH = D / 16;  // 16-byte chunks per row
    const attn_block blk = attn_block_of(b.hq);
    const int s = blk.s, h = blk.h, m0 = blk.qb * F8_BM;
    const int sq = b.seq_q[s];
    if (m0 >= sq) return;
    const int skv = b.seq_kv[s], ctx = skv - sq;
    const int g = h / (b.hq / b.hkv);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

    extern __shared__ __align__(128) uint8_t smem_fp8[];
    uint8_t *sQ = smem_fp8;
    uint8_t *sK2 = sQ + sm::q_bytes;             // stage st's K tile at st * kv_bytes
    uint8_t *sVt2 = sK2 + 2 * sm::kv_bytes;      // stage st's V^T tile at st * kv_bytes

    load_q_tile<F8_BM, F8_THREADS, D>(sQ, sm::stride, q8, b, s, h, m0, sq);
    const key_tiles kt = key_tiles_of<F8_BM, BN>(b, m0, sq, ctx);
    const int n_begin = kt.n_begin, n_end = kt.n_end, n_tiles = kt.n_tiles;

    constexpr int VT_CH = BN / F8_GROUP;  // 16-key chunks per V^T row
    // the i-th tile visited (FA3 and FlashInfer: from the last to the first)
    auto tile_n0 = [&](int i) { return n_begin + (DESCENDING ? n_tiles - 1 - i : i) * BN; };
    auto load_kv = [&](int i, int stage) {
        const int n0 = tile_n0(i);
        uint8_t *sK = sK2 + stage * sm::kv_bytes;
        for (int c = tid; c < BN * CH; c += F8_THREADS) {
            const int r = c / CH, cc = c % CH, t = n0 + r;
            const bool ok = t < n_end;
            const int tt = ok ? t : 0;
            const int64_t page = block_table[(int64_t)s * pages_per_seq + tt / block_size];
            const int64_t base = (page * 2 * b.hkv + g) * (int64_t)block_size * D +
                                 (int64_t)(tt % block_size) * D + cc * 16;
            cp_async_16(sK + wgmma_tile_offset(r, cc, CH), cache + base, ok ? 16 : 0);
        }
        // V^T: D rows of BN keys, 16-key groups from their pages.
        uint8_t *sVt = sVt2 + stage * sm::kv_bytes;
        for (int c = tid; c < D * VT_CH; c += F8_THREADS) {
            const int dim = c / VT_CH, grp = c % VT_CH;
            const int kb = n0 + grp * F8_GROUP;
            const bool ok = kb < n_end;
            const int kk = ok ? kb : 0;
            const int64_t page = block_table[(int64_t)s * pages_per_seq + kk / block_size];
            const uint8_t *src = vt + ((page * b.hkv + g) * (int64_t)D + dim) * block_size +
                                 kk % block_size;
            cp_async_16(sVt + wgmma_tile_offset(dim, grp, VT_CH), src, ok ? 16 : 0);
        }
    };

    load_kv(0, 0);
    cp_async_commit();

    const int row0 = m0 + warp * 16 + lane / 4;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    for (int tile = 0; tile < n_tiles; tile++) {
        const int stage = tile & 1;
        if (tile + 1 < n_tiles) {
            load_kv(tile + 1, stage ^ 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        fence_proxy_async();  // this thread's tile bytes, before the tensor cores read them
        __syncthreads();
        uint32_t qf[D / F8_KCHUNK][4];
#pragma unroll
        for (int kk = 0; kk < D / F8_KCHUNK; kk++)
            ldmatrix_x4(qf[kk], sQ + (warp * 16 + lane % 16) * sm::stride + kk * 32 +
                                    (lane / 16) * 16);
        const uint8_t *sK = sK2 + stage * sm::kv_bytes;
        const uint8_t *sVt = sVt2 + stage * sm::kv_bytes;

        // S = Q8.K8^T: one m64nBNk32 per 32 dims, chained from zero.
        float sc[BN / 8][4];
        wgmma_e4m3_tile(sc, qf, sK, CH, 0);
        fp8_softmax_tile<KIND, BN, D>(sc, m, l, o, b, row0, tile_n0(tile), sq, ctx, ts);

        // e4m3(P).V8, one 32-key chunk per wgmma: two-level O_tile from zero,
        // then O += O_tile; else chained through O.
        uint32_t pa[BN / F8_KCHUNK][4];
#pragma unroll
        for (int kc = 0; kc < BN / F8_KCHUNK; kc++) {
            const int t0 = 4 * kc;
            pa[kc][0] = pack_e4m3x2(sc[t0][0], sc[t0][1]) |
                        pack_e4m3x2(sc[t0 + 1][0], sc[t0 + 1][1]) << 16;
            pa[kc][1] = pack_e4m3x2(sc[t0][2], sc[t0][3]) |
                        pack_e4m3x2(sc[t0 + 1][2], sc[t0 + 1][3]) << 16;
            pa[kc][2] = pack_e4m3x2(sc[t0 + 2][0], sc[t0 + 2][1]) |
                        pack_e4m3x2(sc[t0 + 3][0], sc[t0 + 3][1]) << 16;
            pa[kc][3] = pack_e4m3x2(sc[t0 + 2][2], sc[t0 + 2][3]) |
                        pack_e4m3x2(sc[t0 + 3][2], sc[t0 + 3][3]) << 16;
        }
        if (TWO_LEVEL) {
            float ot[D / 8][4];
            wgmma_e4m3_tile(ot, pa, sVt, VT_CH, 0);
#pragma unroll
            for (int i = 0; i < D / 8; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) o[i][e] += ot[i][e];
        } else {
            wgmma_e4m3_tile(o, pa, sVt, VT_CH, 1);
        }
        __syncthreads();  // the stage is overwritten by the load two tiles on
    }

    // finalize (fp8_finish), then bf16((O * mul) * mul2)
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mul, mul2;
        fp8_finish<KIND>(l, m, r, b.sinks, h, ts, &mul, &mul2);  // all lanes: shuffles
        store_row<D>(out, o, r, mul, mul2, 1.f, b, s, h, row0, sq);
    }
}

template <int D, int BN, attn_softmax KIND, bool TWO_LEVEL>
pg_status launch_fp8(const cuda_batch *b, const uint8_t *q8, const cuda_paged *kv,
                     const uint8_t *vt, const attn_tiled_scales &ts, uint16_t *out,
                     cudaStream_t stream, pg_err *err)
{
    const size_t smem = fp8_smem<D, BN>::bytes;
    CUDA_TRY("attn_fp8", cudaFuncSetAttribute(attn_fp8_kernel<D, BN, KIND, TWO_LEVEL>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)smem));
    dim3 grid;
    const pg_status st = attn_grid(b, F8_BM, "attn_fp8", &grid, err);
    if (st != PG_OK) return st;
    attn_fp8_kernel<D, BN, KIND, TWO_LEVEL><<<grid, F8_THREADS, smem, stream>>>(
        *b, q8, static_cast<const uint8_t *>(kv->data), vt, kv->block_table, kv->block_size,
        kv->pages_per_seq, ts, out);
    CUDA_TRY_LAUNCH("attn_fp8");
    return PG_OK;
}

using fp8_launcher = pg_status (*)(const cuda_batch *, const uint8_t *, const cuda_paged *,
                                   const uint8_t *, const attn_tiled_scales &, uint16_t *,
                                   cudaStream_t, pg_err *);

// The compiled instances: each tiled profile's core at head dims 64 and 128
// with its kBlockN there (attn_profile.c's tile tables; cuda_supports holds
// a profile to this list through cuda_attn_fp8_supports).
struct fp8_instance {
    int d, block_n;
    attn_softmax softmax;
    int two_level;
    fp8_launcher launch;
};
#define FP8_INSTANCE(D, BN, KIND, TWO)                                                         \
    {D, BN, KIND, TWO, launch_fp8<D, BN, KIND, TWO>}
const fp8_instance fp8_instances[] = {
    FP8_INSTANCE(64, 128, ATTN_SOFTMAX_FA3, true),          // @fa3
    FP8_INSTANCE(128, 192, ATTN_SOFTMAX_FA3, true),
    FP8_INSTANCE(64, 160, ATTN_SOFTMAX_FA3, false),         // @fa3-1level
    FP8_INSTANCE(128, 160, ATTN_SOFTMAX_FA3, false),
    FP8_INSTANCE(64, 256, ATTN_SOFTMAX_TRTLLM, false),      // @trtllm
    FP8_INSTANCE(128, 256, ATTN_SOFTMAX_TRTLLM, false),
    FP8_INSTANCE(64, 128, ATTN_SOFTMAX_FLASHINFER, false),  // @flashinfer-fa3
    FP8_INSTANCE(128, 128, ATTN_SOFTMAX_FLASHINFER, false),
};
#undef FP8_INSTANCE

const fp8_instance *fp8_instance_of(int d, const cuda_fp8_core *core)
{
    for (const fp8_instance &in : fp8_instances)
        if (in.d == d && in.block_n == core->block_n && in.softmax == core->softmax &&
            in.two_level == core->two_level)
            return &in;
    return nullptr;
}

}  // namespace

int cuda_attn_fp8_supports(int d, const cuda_fp8_core *core)
{
    return fp8_instance_of(d, core) != nullptr;
}

extern "C" pg_status cuda_attn_fp8(const cuda_batch *b, const uint8_t *q8, const cuda_paged *kv,
                                   const cuda_fp8_core *core, uint16_t *out,
                                   cudaStream_t stream, pg_err *err)
{
    if (kv->elem != PG_FORMAT_E4M3)
        return pg_fail(err, PG_ERR_INTERNAL, "attn_fp8: the cache must hold e4m3");
    const fp8_instance *in = fp8_instance_of(b->d, core);
    if (in == nullptr)
        return pg_fail(err, PG_ERR_SHAPE, "attn_fp8: no kernel for head dim %d with %d-key "
                       "tiles of this softmax", b->d, core->block_n);
    // V^T in slot order (fp8_vt_kernel), one byte per cached V element.
    uint8_t *vt = nullptr;
    const size_t vt_bytes = (size_t)kv->n_pages * b->hkv * kv->block_size * b->d;
    CUDA_TRY("attn_fp8: V^T", cudaMallocAsync((void **)&vt, vt_bytes, stream));
    fp8_vt_kernel<<<dim3((unsigned)kv->pages_per_seq, (unsigned)b->n_seqs), F8_VT_THREADS, 0,
                    stream>>>(*b, static_cast<const uint8_t *>(kv->data), kv->block_table,
                              kv->block_size, kv->pages_per_seq, vt);
    pg_status st = PG_OK;
    cudaError_t rc = cudaGetLastError();
    if (rc != cudaSuccess)
        st = pg_fail(err, PG_ERR_DEVICE, "attn_fp8: fp8_vt_kernel launch: %s",
                     cudaGetErrorString(rc));
    if (st == PG_OK) st = in->launch(b, q8, kv, vt, core->scales, out, stream, err);
    cudaFreeAsync(vt, stream);
    return st;
}
