// cuda_attn_tile.cuh: what both tensor-core attention kernels (cuda_attn_bf16.cu,
// cuda_attn_fp8.cu) do around their main loop: the key tiles a block of query
// rows sees, the cp.async load of the Q tile, and the store of the normalised
// output rows. Rows are handled as bytes, so one code path serves bf16 and
// e4m3. (The K/V loads stay in each kernel: shared, they cost the d-64 bf16
// kernel registers and with them its second block per SM.)
#ifndef PG_CUDA_ATTN_TILE_CUH
#define PG_CUDA_ATTN_TILE_CUH

#include <stdint.h>

#include "cuda_common.cuh"
#include "cuda_mma.cuh"
#include "cuda_softmax.cuh"

// Bytes of one cp.async copy.
#define TILE_CHUNK 16

// The key tiles of BN keys that the query rows m0 .. m0+BM-1 of a sequence
// (seq_q sq, context ctx) see: tiles start at multiples of BN from n_begin;
// keys at or past n_end are never read.
struct key_tiles {
    int n_begin, n_end, n_tiles;
};

template <int BM, int BN>
__device__ __forceinline__ key_tiles key_tiles_of(const cuda_batch &b, int m0, int sq, int ctx)
{
    key_tiles k;
    const int j_last = min(m0 + BM, sq) - 1;
    k.n_end = ctx + j_last + 1;
    const int lo_first = b.window > 0 ? max(0, ctx + m0 - b.window + 1) : 0;
    k.n_begin = lo_first / BN * BN;
    k.n_tiles = (k.n_end - k.n_begin + BN - 1) / BN;
    return k;
}

// The Q tile: rows m0 .. m0+BM-1 of head h of sequence s, ROW_BYTES each,
// from q (packed [tq, hq, ROW_BYTES]) into dst rows of stride bytes; rows past
// the sequence are zero (and never written out).
template <int BM, int THREADS, int ROW_BYTES>
__device__ __forceinline__ void load_q_tile(uint8_t *dst, int stride, const uint8_t *q,
                                            const cuda_batch &b, int s, int h, int m0, int sq)
{
    constexpr int CH = ROW_BYTES / TILE_CHUNK;
    const int64_t q_row0 = b.q_off[s] + m0;
    for (int c = threadIdx.x; c < BM * CH; c += THREADS) {
        const int r = c / CH, cc = c % CH;
        const bool ok = m0 + r < sq;
        const uint8_t *src = q + ((q_row0 + (ok ? r : 0)) * b.hq + h) * (int64_t)ROW_BYTES +
                             cc * TILE_CHUNK;
        cp_async_16(dst + r * stride + cc * TILE_CHUNK, src, ok ? TILE_CHUNK : 0);
    }
}

// Writes row r (0: row0, 1: row0 + 8) of this thread's O accumulators, each
// value as bf16(((o * mul) * mul2) / div), into out (packed [tq, hq, D]); a
// row past the sequence is skipped. Each kernel's finalize is one form of it:
// the bf16 kernel's bf16((acc * v_scale) / l) (mul2 = 1), FA3's acc * ((1 /
// l) * v_descale) and TRT-LLM's (acc * (1 / l)) * bmm2_scale (div = 1); a
// factor or divisor of 1 changes no bit.
template <int D>
__device__ __forceinline__ void store_row(uint16_t *out, const float (&o)[D / 8][4], int r,
                                          float mul, float mul2, float div, const cuda_batch &b,
                                          int s, int h, int row0, int sq)
{
    const int j = row0 + r * 8;
    if (j >= sq) return;
    uint16_t *dst = out + ((b.q_off[s] + j) * b.hq + h) * (int64_t)D + (threadIdx.x % 4) * 2;
#pragma unroll
    for (int nt = 0; nt < D / 8; nt++)
        *reinterpret_cast<uint32_t *>(dst + nt * 8) =
            pack_bf16x2(((o[nt][2 * r] * mul) * mul2) / div,
                        ((o[nt][2 * r + 1] * mul) * mul2) / div);
}

#endif  // PG_CUDA_ATTN_TILE_CUH
