// cuda_attn_fp8.cu: fp8 (e4m3) prefill attention, the fp8qkv mode of
// kernels/attn.h on the GPU: Q, K and V in e4m3, S = Q8.K8^T and O += P8.V8
// on fp8 tensor cores (mma.sync m16n8k32 e4m3, fp32 accumulators), P cast to
// e4m3 with no scale as FlashAttention-3's fp8 path does. K and V come
// straight from the paged e4m3 cache through the block table.
//
// Layout trick for P.V: the fp32 accumulator of S holds, per thread, keys
// 8i + 2q and 8i + 2q + 1 (i = 0..3, q = lane % 4) of each 32-key chunk,
// while the k32 A operand wants four consecutive k slots per register. The
// product does not care about the order of its k index, so slot s of each
// 16-key group is assigned key fp8_slot_key(s), and a pre-pass
// (fp8_vt_kernel) writes V transposed, [page][hkv][d][block_size], in that
// order: each thread packs its own P values with no shuffles, and V^T tiles
// stream in with cp.async like K's.
#include <cuda_fp8.h>
#include <math.h>

#include "cuda_common.cuh"
#include "cuda_mma.cuh"
#include "cuda_attn_tile.cuh"
#include "cuda_softmax.cuh"

namespace {

constexpr int F8_BM = 128;                // query rows per block (8 warps share each K/V tile)
constexpr int F8_BN = 64;                 // keys per tile
constexpr int F8_WARPS = F8_BM / 16;
constexpr int F8_THREADS = F8_WARPS * 32;
constexpr int F8_MIN_BLOCKS = 2;  // d 64: blocks per SM the register budget must allow (16 warps)
constexpr int F8_KCHUNK = 32;             // k of one e4m3 mma

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

// Shared-memory plan: byte rows padded by 16 for conflict-free ldmatrix.
template <int D>
struct fp8_smem {
    static constexpr int stride = D + 16;       // bytes per Q / K / V row
    static constexpr int vt_stride = F8_BN + 16; // bytes per transposed-V row (one dim)
    static constexpr int q_bytes = F8_BM * stride;
    static constexpr int kv_bytes = F8_BN * stride;
    static constexpr int vt_bytes = D * vt_stride;
    static constexpr size_t bytes = (size_t)q_bytes + 2 * kv_bytes + 2 * vt_bytes;
};

// Two floats to packed e4m3 (low byte first), saturating, nearest even.
__device__ __forceinline__ uint32_t pack_e4m3x2(float lo, float hi)
{
    return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3);
}

template <int D>
__global__ void __launch_bounds__(F8_THREADS, D == 64 ? F8_MIN_BLOCKS : 1)
attn_fp8_kernel(const cuda_batch b, const uint8_t *__restrict__ q8,
                const uint8_t *__restrict__ cache, const uint8_t *__restrict__ vt,
                const int32_t *__restrict__ block_table,
                const int block_size, const int pages_per_seq, const float qk_scale,
                const float v_scale, uint16_t *__restrict__ out)
{
    using sm = fp8_smem<D>;
    constexpr int CH = D / 16;  // 16-byte chunks per row
    const int s = blockIdx.z, h = blockIdx.y, m0 = blockIdx.x * F8_BM;
    const int sq = b.seq_q[s];
    if (m0 >= sq) return;
    const int skv = b.seq_kv[s], ctx = skv - sq;
    const int g = h / (b.hq / b.hkv);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

    extern __shared__ __align__(16) uint8_t smem_fp8[];
    uint8_t *sQ = smem_fp8;
    uint8_t *sK2 = sQ + sm::q_bytes;             // stage st's K tile at st * kv_bytes
    uint8_t *sVt2 = sK2 + 2 * sm::kv_bytes;      // stage st's V^T tile [D][F8_BN] at st * vt_bytes

    load_q_tile<F8_BM, F8_THREADS, D>(sQ, sm::stride, q8, b, s, h, m0, sq);
    const key_tiles kt = key_tiles_of<F8_BM, F8_BN>(b, m0, sq, ctx);
    const int n_begin = kt.n_begin, n_end = kt.n_end, n_tiles = kt.n_tiles;

    auto load_kv = [&](int tile, int stage) {
        const int n0 = n_begin + tile * F8_BN;
        for (int c = tid; c < F8_BN * CH; c += F8_THREADS) {
            const int r = c / CH, cc = c % CH, t = n0 + r;
            const bool ok = t < n_end;
            const int tt = ok ? t : 0;
            const int64_t page = block_table[(int64_t)s * pages_per_seq + tt / block_size];
            const int64_t base = (page * 2 * b.hkv + g) * (int64_t)block_size * D +
                                 (int64_t)(tt % block_size) * D + cc * 16;
            cp_async_16(sK2 + stage * sm::kv_bytes + r * sm::stride + cc * 16, cache + base,
                        ok ? 16 : 0);
        }
        // V^T: D rows of F8_BN keys, 16-key groups from their pages.
        for (int c = tid; c < D * (F8_BN / F8_GROUP); c += F8_THREADS) {
            const int dim = c / (F8_BN / F8_GROUP), grp = c % (F8_BN / F8_GROUP);
            const int kb = n0 + grp * F8_GROUP;
            const bool ok = kb < n_end;
            const int kk = ok ? kb : 0;
            const int64_t page = block_table[(int64_t)s * pages_per_seq + kk / block_size];
            const uint8_t *src = vt + ((page * b.hkv + g) * (int64_t)D + dim) * block_size +
                                 kk % block_size;
            cp_async_16(sVt2 + stage * sm::vt_bytes + dim * sm::vt_stride + grp * F8_GROUP, src,
                        ok ? 16 : 0);
        }
    };

    load_kv(0, 0);
    cp_async_commit();

    const float scale_log2 = qk_scale * SOFTMAX_LOG2E;
    const int row0 = m0 + warp * 16 + lane / 4;
    softmax_rows sm_rows = {{-INFINITY, -INFINITY}, {0.f, 0.f}};
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    uint32_t qf[D / F8_KCHUNK][4];

    for (int tile = 0; tile < n_tiles; tile++) {
        const int stage = tile & 1;
        if (tile + 1 < n_tiles) {
            load_kv(tile + 1, stage ^ 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (tile == 0) {
#pragma unroll
            for (int kk = 0; kk < D / F8_KCHUNK; kk++)
                ldmatrix_x4(qf[kk], sQ + (warp * 16 + lane % 16) * sm::stride + kk * 32 +
                                        (lane / 16) * 16);
        }
        float sc[F8_BN / 8][4];
#pragma unroll
        for (int i = 0; i < F8_BN / 8; i++) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.f;
        const uint8_t *sK = sK2 + stage * sm::kv_bytes;
        const uint8_t *sVt = sVt2 + stage * sm::vt_bytes;
#pragma unroll
        for (int kk = 0; kk < D / F8_KCHUNK; kk++) {
#pragma unroll
            for (int np = 0; np < F8_BN / 16; np++) {
                uint32_t kb[4];
                const int mi = lane / 8;
                ldmatrix_x4(kb, sK + (np * 16 + (mi >> 1) * 8 + lane % 8) * sm::stride +
                                    kk * 32 + (mi & 1) * 16);
                mma_e4m3_16832(sc[2 * np], qf[kk], kb[0], kb[1]);
                mma_e4m3_16832(sc[2 * np + 1], qf[kk], kb[2], kb[3]);
            }
        }

        const int n0 = n_begin + tile * F8_BN;
        float alpha[2];
        softmax_tile<F8_BN>(sc, sm_rows, alpha, b, m0, warp, lane, n0, sq, ctx, scale_log2);
        softmax_rescale<D>(o, alpha);

        // O += e4m3(P).V8, one 32-key chunk (four accumulator tiles) per mma.
#pragma unroll
        for (int kc = 0; kc < F8_BN / F8_KCHUNK; kc++) {
            const int t0 = 4 * kc;
            uint32_t pa[4] = {
                pack_e4m3x2(sc[t0][0], sc[t0][1]) | pack_e4m3x2(sc[t0 + 1][0], sc[t0 + 1][1]) << 16,
                pack_e4m3x2(sc[t0][2], sc[t0][3]) | pack_e4m3x2(sc[t0 + 1][2], sc[t0 + 1][3]) << 16,
                pack_e4m3x2(sc[t0 + 2][0], sc[t0 + 2][1]) |
                    pack_e4m3x2(sc[t0 + 3][0], sc[t0 + 3][1]) << 16,
                pack_e4m3x2(sc[t0 + 2][2], sc[t0 + 2][3]) |
                    pack_e4m3x2(sc[t0 + 3][2], sc[t0 + 3][3]) << 16};
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                uint32_t vb[4];
                const int mi = lane / 8;
                ldmatrix_x4(vb, sVt + (dp * 16 + (mi >> 1) * 8 + lane % 8) * sm::vt_stride +
                                    kc * 32 + (mi & 1) * 16);
                mma_e4m3_16832(o[2 * dp], pa, vb[0], vb[1]);
                mma_e4m3_16832(o[2 * dp + 1], pa, vb[2], vb[3]);
            }
        }
        __syncthreads();  // the stage is overwritten by the load two tiles on
    }

    store_rows<D>(out, o, sm_rows, v_scale, b, s, h, row0, sq);
}

template <int D>
pg_status launch_fp8(const cuda_batch *b, const uint8_t *q8, const cuda_paged *kv,
                     const uint8_t *vt, float qk_scale, float v_scale, uint16_t *out,
                     cudaStream_t stream, pg_err *err)
{
    const size_t smem = fp8_smem<D>::bytes;
    CUDA_TRY("attn_fp8", cudaFuncSetAttribute(attn_fp8_kernel<D>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)smem));
    const dim3 grid((unsigned)((b->max_q + F8_BM - 1) / F8_BM), (unsigned)b->hq,
                    (unsigned)b->n_seqs);
    attn_fp8_kernel<D><<<grid, F8_THREADS, smem, stream>>>(
        *b, q8, static_cast<const uint8_t *>(kv->data), vt, kv->block_table, kv->block_size,
        kv->pages_per_seq, qk_scale, v_scale, out);
    CUDA_TRY_LAUNCH("attn_fp8");
    return PG_OK;
}

}  // namespace

extern "C" pg_status cuda_attn_fp8(const cuda_batch *b, const uint8_t *q8, const cuda_paged *kv,
                                   float qk_scale, float v_scale, int p_rounding, uint16_t *out,
                                   cudaStream_t stream, pg_err *err)
{
    if (kv->elem != KV_ELEM_E4M3)
        return pg_fail(err, PG_ERR_INTERNAL, "attn_fp8: the cache must hold e4m3");
    if (p_rounding != ATTN_P_E4M3)
        return pg_fail(err, PG_ERR_USAGE, "attn_fp8: the GPU kernel rounds P to e4m3 only "
                                          "(--p-rounding e4m3)");
    if (b->d != 64 && b->d != 128)
        return pg_fail(err, PG_ERR_SHAPE, "attn_fp8: head dim %d is not supported on the GPU "
                                          "(64 or 128)", b->d);
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
    if (st == PG_OK)
        st = b->d == 64 ? launch_fp8<64>(b, q8, kv, vt, qk_scale, v_scale, out, stream, err)
                        : launch_fp8<128>(b, q8, kv, vt, qk_scale, v_scale, out, stream, err);
    cudaFreeAsync(vt, stream);
    return st;
}
