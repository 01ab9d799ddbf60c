// wgmma_fp8_accum.cu: how Hopper's fp8 tensor cores accumulate (issue #15,
// "Hopper fp8 accumulation, measured"). One warpgroup per block runs ONE
// wgmma.mma_async m64n64k32 .f32.e4m3.e4m3 (kernels/cuda_wgmma.cuh; the
// smallest N its wrapper has) on chosen operands and a chosen fp32 initial
// accumulator: D[r][n] = C[r][n] + sum_k A[r][k] * B[n][k], 32 products each.
// The host compares the fp32 result bits with CPU models of the accumulation.
//
// Output, in order (every table prints the hardware bits, so the truth can be
// read off by hand even where every model below is wrong):
//   0. a layout self-check (small integers: every model must be exact) and
//      0b. whether subnormal e4m3 inputs are taken exactly;
//   1. gap sweeps: big product 2^8 (k=0) plus one small product 2^(8-g) (k=1; and
//      +-1.5*2^(8-g)), the accumulator large or small: "kept" is
//      (hw - big) / small, 1 = kept whole, 0 = dropped, fractions = cut;
//   2. position matrix: the small product at k = p after the big one at k = 0,
//      kept (1) / dropped (0) / partly (~) per gap g: shows the group size;
//   3. model search over >= 10^6 random cases (wide exponent spread, random
//      signs and accumulators): the family alignment x kept bits x cut x
//      accumulator x group x final rounding, best models first;
//   4. the best model, exact-fp32 (sequential) and exact-rounded-once over all
//      random cases: mismatch counts and the first mismatches with operands;
//   5. SUMMARY line.
//
// usage: wgmma_fp8_accum [random-blocks]   (4096 cases per block, default 320)
//        wgmma_fp8_accum --simulate KEPT CUT ACC GROUP FIN EXP [random-blocks]
//            no GPU: that model (enum numbers below) plays the hardware, to
//            check that the analysis finds it (a dry run of the program).
//        wgmma_fp8_accum --dump FILE [random-blocks]
//            on the GPU, also writes every hardware result (the bits, in the
//            order the cases are generated) to FILE;
//        wgmma_fp8_accum --load FILE [random-blocks]
//            no GPU: the hardware results come from a --dump FILE of the same
//            random-blocks (the operands are regenerated from the same seed),
//            so models can be searched on any machine after one GPU run.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda_wgmma.cuh"
#include "kernels/fp8_mma.h"

#define PROBE_M 64             // wgmma rows (A rows, D rows)
#define PROBE_N 64             // wgmma_e4m3_m64n64k32: the smallest N the wrapper has
#define PROBE_K 32             // one k32 step: 32 products per output
#define PROBE_CHUNKS 2         // 16-byte chunks per B row (32 e4m3 = 32 bytes)
#define PROBE_THREADS 128      // one warpgroup
#define CASES_PER_BLOCK (PROBE_M * PROBE_N)
#define DEFAULT_RANDOM_BLOCKS 320  // 320 * 4096 = 1.31M random cases (>= 10^6, issue #15)
#define SEARCH_BLOCKS 8            // the model search runs on the first 8 blocks (32k cases)
#define SEARCH_FINALISTS 12        // models re-checked over every random case
#define SHOW_MISMATCHES 5
#define UNIT_SHIFT 80              // fixed point: values held as integers of 2^-80
#define ACC_EXP_MIN (-24)          // random accumulators: |acc| in [2^-24, 2^25)
#define ACC_EXP_MAX 24
#define BIG_EXP 8                  // gap sweeps: the big product is 2^8 = 16 * 16
#define GAP_MAX 40

#define CHECK(x)                                                                        \
    do {                                                                                \
        cudaError_t e_ = (x);                                                           \
        if (e_ != cudaSuccess) {                                                        \
            fprintf(stderr, "wgmma_fp8_accum: %s: %s\n", #x, cudaGetErrorString(e_));   \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

typedef __int128 i128;

// ---------------------------------------------------------------- device
// One block: A 64x32 bytes row-major, B 64 (n) x 32 (k) bytes row-major,
// C and D 64x64 fp32 row-major [r][n].
__global__ void __launch_bounds__(PROBE_THREADS)
    wgmma_probe(const uint8_t *A, const uint8_t *B, const float *C, float *D)
{
    __shared__ __align__(128) uint8_t tile[PROBE_N * PROBE_K];
    const int blk = blockIdx.x, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const uint8_t *a = A + (size_t)blk * PROBE_M * PROBE_K;
    const uint8_t *b = B + (size_t)blk * PROBE_N * PROBE_K;
    const float *c = C + (size_t)blk * CASES_PER_BLOCK;
    float *d_out = D + (size_t)blk * CASES_PER_BLOCK;
    for (int i = tid; i < PROBE_N * PROBE_K; i += PROBE_THREADS) {
        const int n = i / PROBE_K, k = i % PROBE_K;
        tile[wgmma_tile_offset(n, k / 16, PROBE_CHUNKS) + k % 16] = b[i];
    }
    fence_proxy_async();
    __syncthreads();
    // A fragments (cuda_wgmma.cuh): a0 row lane/4, k 4(lane%4)..+3; a1 row +8;
    // a2, a3 the same at k + 16; bytes little-endian in k.
    const int row = 16 * warp + lane / 4, k0 = 4 * (lane % 4);
    uint32_t af[1][4];
    af[0][0] = *(const uint32_t *)(a + row * PROBE_K + k0);
    af[0][1] = *(const uint32_t *)(a + (row + 8) * PROBE_K + k0);
    af[0][2] = *(const uint32_t *)(a + row * PROBE_K + k0 + 16);
    af[0][3] = *(const uint32_t *)(a + (row + 8) * PROBE_K + k0 + 16);
    float acc[PROBE_N / 8][4];
#pragma unroll
    for (int j = 0; j < PROBE_N / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            acc[j][e] = c[(row + 8 * (e / 2)) * PROBE_N + 8 * j + 2 * (lane % 4) + e % 2];
    wgmma_e4m3_tile<PROBE_N / 8, 1>(acc, af, tile, PROBE_CHUNKS, 1);
#pragma unroll
    for (int j = 0; j < PROBE_N / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            d_out[(row + 8 * (e / 2)) * PROBE_N + 8 * j + 2 * (lane % 4) + e % 2] = acc[j][e];
}

// ---------------------------------------------------------------- e4m3
// e4m3 (OCP FP8 E4M3): bias 7, no infinities, S.1111.111 = NaN.
static int e4m3_is_nan(uint8_t c) { return (c & 0x7F) == 0x7F; }
static int e4m3_mant(uint8_t c)  // integer significand (3 fraction bits)
{
    const int e = (c >> 3) & 15, m = c & 7;
    return e ? 8 + m : m;
}
static int e4m3_lsb_exp(uint8_t c)  // value = mant * 2^lsb_exp
{
    const int e = (c >> 3) & 15;
    return (e ? e - 7 : -6) - 3;
}
static int e4m3_raw_exp(uint8_t c)  // the exponent field as the unit's exponent (subnormal -6)
{
    const int e = (c >> 3) & 15;
    return e ? e - 7 : -6;
}
static int e4m3_neg(uint8_t c) { return c >> 7; }
static double e4m3_value(uint8_t c)
{
    const double v = ldexp((double)e4m3_mant(c), e4m3_lsb_exp(c));
    return e4m3_neg(c) ? -v : v;
}
// a, b codes with a * b == target exactly (a as large as possible), both
// normal where that can be (so the sweeps do not hinge on subnormal inputs);
// 0 if none.
static int e4m3_split(double target, uint8_t *a, uint8_t *b)
{
    for (int allow_subnormal = 0; allow_subnormal < 2; allow_subnormal++)
        for (int ca = 0x7E; ca >= 0; ca--)
            for (int cb = 0; cb <= 0xFE; cb++) {
                if (e4m3_is_nan((uint8_t)cb)) continue;
                if (!allow_subnormal && (((ca >> 3) & 15) == 0 || ((cb >> 3) & 15) == 0)) continue;
                if (e4m3_value((uint8_t)ca) * e4m3_value((uint8_t)cb) == target) {
                    *a = (uint8_t)ca;
                    *b = (uint8_t)cb;
                    return 1;
                }
            }
    return 0;
}

// ---------------------------------------------------------------- cases
struct Case {
    uint8_t a[PROBE_K], b[PROBE_K];
    float acc;
    float hw;  // the hardware's result
};

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// ---------------------------------------------------------------- models
enum Cut { CUT_ZERO, CUT_FLOOR, CUT_RNE, CUT_ONCE_ZERO, CUT_ONCE_RNE, CUT_COUNT };
static const char *cut_name[] = {"per-term truncate toward zero", "per-term floor (two's complement)",
                                 "per-term round-nearest-even", "exact sum, truncated toward zero once",
                                 "exact sum, rounded nearest-even once"};
enum AccMode { ACC_ALIGNED, ACC_ALIGNED_EXACT, ACC_AFTER, ACC_COUNT };
static const char *acc_name[] = {
    "aligned and cut with the products (sets the max exponent too)",
    "sets the max exponent, added uncut", "not aligned: added exactly to the products' cut sum"};
enum Fin { FIN_RNE, FIN_ZERO, FIN_COUNT };
static const char *fin_name[] = {"round-nearest-even", "truncate"};
enum ExpDef { EXP_NORM, EXP_RAW, EXP_COUNT };
static const char *exp_name[] = {"floor(log2|p|)", "ea+eb (significand product in [1,4))"};
static const int group_sizes[] = {32, 16, 8, 4};
#define N_GROUPS 4
#define KEPT_MIN 8
#define KEPT_MAX 31

// sub > 0: a two-level tree. The products are first summed in sub-groups of
// `sub` (exactly, or cut toward zero at sub_kept bits below the sub-group's
// largest exponent when sub_kept > 0); each sub-group sum, normalized, is
// then one term of the alignment above (kept bits below the largest term).
// sub = 0: every product is a term (one level).
static const int sub_sizes[] = {2, 4, 8, 16};
#define N_SUBS 4
#define SUB_KEPT_MIN 12
#define SUB_KEPT_MAX 26

// norm_bits > 0: the group's sum, normalized, is cut toward zero to
// norm_bits fraction bits (below its own leading bit) before it becomes the
// fp32 result: a narrow accumulator register after a wider adder.
#define NORM_BITS_MIN 11
#define NORM_BITS_MAX 16

struct Model {
    int kept, cut, accm, group, fin, expdef;
    int sub, sub_kept;
    int norm_bits;
};

static void model_print(FILE *f, const Model &m)
{
    fprintf(f, "kept=%d cut=[%s] acc=[%s] group=%d final=[%s] exp=[%s]", m.kept, cut_name[m.cut],
            acc_name[m.accm], m.group, fin_name[m.fin], exp_name[m.expdef]);
    if (m.sub) fprintf(f, " sub-groups of %d summed %s%.0d", m.sub, m.sub_kept ? "cut at " : "exactly",
                       m.sub_kept);
    if (m.norm_bits) fprintf(f, " sum normalized and cut toward zero to %d fraction bits", m.norm_bits);
}


static int msb128(unsigned __int128 u)
{
    const uint64_t hi = (uint64_t)(u >> 64);
    return hi ? 127 - __builtin_clzll(hi) : 63 - __builtin_clzll((uint64_t)u);
}

// v (units of 2^-80) to the nearest multiple of 2^s by the cut mode.
static i128 cut_to(i128 v, int s, int mode)
{
    if (s <= 0) return v;
    const i128 one = (i128)1 << s;
    switch (mode) {
    case CUT_ZERO:
    case CUT_ONCE_ZERO:
        return v >= 0 ? (v >> s) << s : -(((-v) >> s) << s);
    case CUT_FLOOR: return (v >> s) << s;
    default: {
        const i128 base = (v >> s) << s, low = v - base, half = one >> 1;
        return (low > half || (low == half && ((base >> s) & 1))) ? base + one : base;
    }
    }
}

// v cut toward zero to `bits` fraction bits below its leading bit.
static i128 cut_normalized(i128 v, int bits)
{
    if (v == 0) return 0;
    const int lead = msb128(v < 0 ? -(unsigned __int128)v : (unsigned __int128)v);
    return cut_to(v, lead - bits, CUT_ZERO);
}

// v (units of 2^-80) to fp32 by fin; exact zero is +0.
static float units_to_float(i128 v, int fin)
{
    if (v == 0) return 0.0f;
    const int neg = v < 0;
    unsigned __int128 u = neg ? -(unsigned __int128)v : (unsigned __int128)v;
    const int p = msb128(u);
    int sh = 0;
    if (p > 23) {
        sh = p - 23;
        const unsigned __int128 rem = u & (((unsigned __int128)1 << sh) - 1),
                                half = (unsigned __int128)1 << (sh - 1);
        u >>= sh;
        if (fin == FIN_RNE && (rem > half || (rem == half && (u & 1)))) u++;
    }
    const float r = (float)ldexp((double)(uint64_t)u, sh - UNIT_SHIFT);
    return neg ? -r : r;
}

static i128 float_to_units(float f)
{
    if (f == 0.0f) return 0;
    int e;
    const double m = frexp((double)f, &e);  // f = m * 2^e, |m| in [0.5, 1)
    const int64_t mi = (int64_t)ldexp(m, 24);
    const int sh = e - 24 + UNIT_SHIFT;
    return sh >= 0 ? (i128)mi << sh : (i128)mi >> -sh;  // >= 0 for |f| >= 2^-56
}

static int float_exp(float f)  // floor(log2|f|), f != 0
{
    int e;
    frexp((double)f, &e);
    return e - 1;
}

struct Product {
    i128 v;    // units of 2^-80
    int e;     // exponent by the model's definition
    int zero;
};

static void products_of(const Case &c, int expdef, Product *p)
{
    for (int k = 0; k < PROBE_K; k++) {
        const int m = e4m3_mant(c.a[k]) * e4m3_mant(c.b[k]);
        p[k].zero = m == 0;
        i128 v = (i128)m << (e4m3_lsb_exp(c.a[k]) + e4m3_lsb_exp(c.b[k]) + UNIT_SHIFT);
        if (e4m3_neg(c.a[k]) ^ e4m3_neg(c.b[k])) v = -v;
        p[k].v = v;
        if (m == 0)
            p[k].e = 0;
        else if (expdef == EXP_NORM)
            p[k].e = msb128((unsigned __int128)m) + e4m3_lsb_exp(c.a[k]) + e4m3_lsb_exp(c.b[k]);
        else
            p[k].e = e4m3_raw_exp(c.a[k]) + e4m3_raw_exp(c.b[k]);
    }
}

// The terms of one alignment group under m: the products themselves, or
// the normalized sums of their sub-groups (Model.sub); returns the count.
static int group_terms(const Model &m, const Product *p, int g0, Product *t)
{
    if (m.sub == 0) {
        memcpy(t, p + g0, sizeof *t * (size_t)m.group);
        return m.group;
    }
    int n = 0;
    for (int s0 = g0; s0 < g0 + m.group; s0 += m.sub, n++) {
        int se = -100000;
        for (int k = s0; k < s0 + m.sub; k++)
            if (!p[k].zero && p[k].e > se) se = p[k].e;
        i128 sum = 0;
        for (int k = s0; k < s0 + m.sub; k++)
            sum += m.sub_kept ? cut_to(p[k].v, se - m.sub_kept + UNIT_SHIFT, CUT_ZERO) : p[k].v;
        t[n].v = sum;
        t[n].zero = sum == 0;
        t[n].e = sum == 0 ? 0
                          : msb128(sum < 0 ? -(unsigned __int128)sum : (unsigned __int128)sum) -
                                UNIT_SHIFT;
    }
    return n;
}

// The candidate accumulation over precomputed products.
static float model_eval(const Model &m, const Product *prods, float acc_in)
{
    float r = acc_in;
    Product p_terms[PROBE_K];
    for (int g0 = 0; g0 < PROBE_K; g0 += m.group) {
        const int nt = group_terms(m, prods, g0, p_terms);
        const Product *p = p_terms;  // p[0 .. nt) are the terms
        const int have_acc = r != 0.0f;
        const i128 acc_units = float_to_units(r);
        int emax = -100000;
        for (int k = 0; k < nt; k++)
            if (!p[k].zero && p[k].e > emax) emax = p[k].e;
        if (m.accm != ACC_AFTER && have_acc) emax = std::max(emax, float_exp(r));
        if (emax == -100000) continue;  // all zero: r unchanged
        const int s = emax - m.kept + UNIT_SHIFT;
        const int once = m.cut == CUT_ONCE_ZERO || m.cut == CUT_ONCE_RNE;
        i128 sum = 0;
        for (int k = 0; k < nt; k++) sum += once ? p[k].v : cut_to(p[k].v, s, m.cut);
        if (m.accm == ACC_ALIGNED)
            sum += once ? acc_units : cut_to(acc_units, s, m.cut);
        if (once) sum = cut_to(sum, s, m.cut);
        if (m.accm != ACC_ALIGNED) sum += acc_units;
        if (m.norm_bits) sum = cut_normalized(sum, m.norm_bits);
        r = units_to_float(sum, m.fin);
    }
    return r;
}

static Model g_best;

static float exact_fp32_sequential(const Case &c)
{
    float r = c.acc;
    for (int k = 0; k < PROBE_K; k++) {
        const float prod = (float)(e4m3_value(c.a[k]) * e4m3_value(c.b[k]));  // exact
        volatile float t = r + prod;
        r = t;
    }
    return r;
}

static float exact_rounded_once(const Case &c)
{
    Product p[PROBE_K];
    products_of(c, EXP_NORM, p);
    i128 sum = float_to_units(c.acc);
    for (int k = 0; k < PROBE_K; k++) sum += p[k].v;
    return units_to_float(sum, FIN_RNE);
}

static float model_case(const Model &m, const Case &c)
{
    Product p[PROBE_K];
    products_of(c, m.expdef, p);
    return model_eval(m, p, c.acc);
}

static void print_case(const Case &c, float model_r)
{
    printf("      acc_in %a (%.9g)  hw %a [%08x]  model %a [%08x]  exact-once %a\n", c.acc, c.acc,
           c.hw, f2u(c.hw), model_r, f2u(model_r), exact_rounded_once(c));
    printf("      products (k:value, nonzero):");
    for (int k = 0; k < PROBE_K; k++) {
        const double v = e4m3_value(c.a[k]) * e4m3_value(c.b[k]);
        if (v != 0) printf(" %d:%a[%02x*%02x]", k, v, c.a[k], c.b[k]);
    }
    printf("\n");
}

// ---------------------------------------------------------------- running
// Runs cases: diag = 1 puts case i at block i/64, row = column = i%64 (the
// rest of the block is zeros), else block-full cases (row r, column n).
static const Model *g_simulate;  // --simulate: this model plays the hardware
static FILE *g_dump;             // --dump: every hardware result is written here
static FILE *g_load;             // --load: every hardware result is read from here

// One batch of results in a dump: its case count, then each result's bits.
static void dump_results(const std::vector<Case> &cases)
{
    const uint64_t n = cases.size();
    int ok = fwrite(&n, sizeof n, 1, g_dump) == 1;
    for (const Case &c : cases) {
        const uint32_t u = f2u(c.hw);
        ok = ok && fwrite(&u, sizeof u, 1, g_dump) == 1;
    }
    if (!ok) {
        fprintf(stderr, "wgmma_fp8_accum: cannot write the dump\n");
        exit(1);
    }
}

static void load_results(std::vector<Case> &cases)
{
    uint64_t n = 0;
    if (fread(&n, sizeof n, 1, g_load) != 1 || n != cases.size()) {
        fprintf(stderr, "wgmma_fp8_accum: the dump holds %llu results where %zu cases were made "
                        "(another random-blocks, or a truncated file)\n",
                (unsigned long long)n, cases.size());
        exit(2);
    }
    for (Case &c : cases) {
        uint32_t u;
        if (fread(&u, sizeof u, 1, g_load) != 1) {
            fprintf(stderr, "wgmma_fp8_accum: the dump ends early\n");
            exit(2);
        }
        memcpy(&c.hw, &u, 4);
    }
}

static void run_on_gpu(std::vector<Case> &cases, int diag)
{
    if (g_simulate) {
        for (Case &c : cases) c.hw = model_case(*g_simulate, c);
        return;
    }
    if (g_load) {
        load_results(cases);
        return;
    }
    const size_t nblocks = diag ? (cases.size() + PROBE_M - 1) / PROBE_M
                                : cases.size() / CASES_PER_BLOCK;
    std::vector<uint8_t> A(nblocks * PROBE_M * PROBE_K, 0), B(nblocks * PROBE_N * PROBE_K, 0);
    std::vector<float> C(nblocks * CASES_PER_BLOCK, 0.0f), D(nblocks * CASES_PER_BLOCK, 0.0f);
    if (diag) {
        for (size_t i = 0; i < cases.size(); i++) {
            const size_t blk = i / PROBE_M, r = i % PROBE_M;
            memcpy(&A[(blk * PROBE_M + r) * PROBE_K], cases[i].a, PROBE_K);
            memcpy(&B[(blk * PROBE_N + r) * PROBE_K], cases[i].b, PROBE_K);
            C[blk * CASES_PER_BLOCK + r * PROBE_N + r] = cases[i].acc;
        }
    } else {
        // block-full cases were generated from the block's A rows and B columns
        for (size_t blk = 0; blk < nblocks; blk++)
            for (int r = 0; r < PROBE_M; r++)
                for (int n = 0; n < PROBE_N; n++) {
                    const Case &c = cases[blk * CASES_PER_BLOCK + r * PROBE_N + n];
                    if (n == 0) memcpy(&A[(blk * PROBE_M + r) * PROBE_K], c.a, PROBE_K);
                    if (r == 0) memcpy(&B[(blk * PROBE_N + n) * PROBE_K], c.b, PROBE_K);
                    C[blk * CASES_PER_BLOCK + r * PROBE_N + n] = c.acc;
                }
    }
    uint8_t *dA, *dB;
    float *dC, *dD;
    CHECK(cudaMalloc(&dA, A.size()));
    CHECK(cudaMalloc(&dB, B.size()));
    CHECK(cudaMalloc(&dC, C.size() * 4));
    CHECK(cudaMalloc(&dD, D.size() * 4));
    CHECK(cudaMemcpy(dA, A.data(), A.size(), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dB, B.data(), B.size(), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dC, C.data(), C.size() * 4, cudaMemcpyHostToDevice));
    wgmma_probe<<<(unsigned)nblocks, PROBE_THREADS>>>(dA, dB, dC, dD);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(D.data(), dD, D.size() * 4, cudaMemcpyDeviceToHost));
    CHECK(cudaFree(dA));
    CHECK(cudaFree(dB));
    CHECK(cudaFree(dC));
    CHECK(cudaFree(dD));
    for (size_t i = 0; i < cases.size(); i++) {
        const size_t blk = diag ? i / PROBE_M : i / CASES_PER_BLOCK;
        const size_t idx = diag ? (i % PROBE_M) * PROBE_N + i % PROBE_M : i % CASES_PER_BLOCK;
        cases[i].hw = D[blk * CASES_PER_BLOCK + idx];
    }
    if (g_dump) dump_results(cases);
}

// xorshift64*: reproducible operands.
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng()
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}
static uint8_t rand_code(int exp_lo, int exp_hi)  // exponent field in [lo, hi], random sign
{
    for (;;) {
        const int e = exp_lo + (int)(rng() % (uint64_t)(exp_hi - exp_lo + 1));
        const uint8_t c = (uint8_t)((rng() & 1) << 7 | e << 3 | (rng() & 7));
        if (!e4m3_is_nan(c)) return c;
    }
}
static float rand_acc(int exp_lo, int exp_hi)
{
    const int e = exp_lo + (int)(rng() % (uint64_t)(exp_hi - exp_lo + 1));
    const float m = 1.0f + (float)(rng() & 0x7FFFFF) / 8388608.0f;
    const float v = ldexpf(m, e);
    return (rng() & 1) ? -v : v;
}

// Block kinds of the random set (blk % RANDOM_KINDS): 0 all codes, 1 close
// exponents, 2 sparse, 3 one large product over small ones, 4 mid band,
// 5 two products only (any exponents; where the alignment reference shows
// alone), 6 same-sign close exponents (the carry of 32 terms: up to 5 bits).
#define RANDOM_KINDS 7
static void gen_random_block(Case *out, int kind)
{
    uint8_t A[PROBE_M][PROBE_K], B[PROBE_N][PROBE_K];
    for (int r = 0; r < PROBE_M; r++)
        for (int k = 0; k < PROBE_K; k++) {
            switch (kind) {
            case 0: A[r][k] = rand_code(0, 15); B[r][k] = rand_code(0, 15); break;  // all codes
            case 1: A[r][k] = rand_code(6, 9); B[r][k] = rand_code(6, 9); break;    // close exponents
            case 2:  // sparse: half zeros
                A[r][k] = (rng() & 1) ? 0 : rand_code(0, 15);
                B[r][k] = rand_code(0, 15);
                break;
            case 3:  // one large product at a random k per row/column, the rest far below
                A[r][k] = rand_code(0, 8);
                B[r][k] = rand_code(0, 8);
                break;
            case 5: A[r][k] = 0; B[r][k] = rand_code(0, 15); break;  // A gets 2 codes below
            case 6: A[r][k] = rand_code(6, 9) & 0x7F; B[r][k] = rand_code(6, 9) & 0x7F; break;
            default: A[r][k] = rand_code(3, 12); B[r][k] = rand_code(3, 12); break;
            }
        }
    if (kind == 5)
        for (int r = 0; r < PROBE_M; r++) {
            A[r][rng() % PROBE_K] = rand_code(0, 15);
            A[r][rng() % PROBE_K] = rand_code(0, 15);
        }
    if (kind == 3)
        for (int r = 0; r < PROBE_M; r++) {
            A[r][rng() % PROBE_K] = rand_code(12, 15);
            B[r][rng() % PROBE_K] = rand_code(12, 15);
        }
    for (int r = 0; r < PROBE_M; r++)
        for (int n = 0; n < PROBE_N; n++) {
            Case &c = out[r * PROBE_N + n];
            memcpy(c.a, A[r], PROBE_K);
            memcpy(c.b, B[n], PROBE_K);
            const uint64_t pick = rng() % 10;
            if (pick == 0)
                c.acc = 0.0f;
            else if (kind == 1 || kind == 4 || kind == 6)
                c.acc = rand_acc(-4, 14);  // near the products' sums
            else
                c.acc = rand_acc(ACC_EXP_MIN, ACC_EXP_MAX);
        }
}

// ---------------------------------------------------------------- designed cases
struct Term {
    int k;
    double value;  // must be an exact e4m3 product
};
static int make_case(Case &c, const std::vector<Term> &terms, float acc)
{
    memset(&c, 0, sizeof c);
    c.acc = acc;
    for (const Term &t : terms)
        if (!e4m3_split(t.value, &c.a[t.k], &c.b[t.k])) return 0;
    return 1;
}

static double case_exact(const Case &c)  // exact in double for the designed cases
{
    double s = c.acc;
    for (int k = 0; k < PROBE_K; k++) s += e4m3_value(c.a[k]) * e4m3_value(c.b[k]);
    return s;
}

// One gap sweep: for g = 0..GAP_MAX, case(g); valid[g] says whether it exists.
struct Sweep {
    const char *title;
    const char *what;  // what "kept" measures
    double big;        // subtracted from the result
    double small_sign; // small = small_sign * small_mul * 2^(BIG_EXP - g)
    double small_mul;
    int small_in_acc;  // the small value is the accumulator (big is a product)
    int big_in_acc;    // the big value is the accumulator
    std::vector<Case> cases;
    std::vector<int> valid;
};

static void build_sweep(Sweep &s)
{
    s.cases.resize(GAP_MAX + 1);
    s.valid.resize(GAP_MAX + 1);
    for (int g = 0; g <= GAP_MAX; g++) {
        const double small = s.small_sign * s.small_mul * ldexp(1.0, BIG_EXP - g);
        std::vector<Term> terms;
        float acc = 0.0f;
        if (s.big_in_acc) acc = (float)s.big; else terms.push_back({0, s.big});
        if (s.small_in_acc) acc = (float)small; else terms.push_back({1, small});
        s.valid[g] = make_case(s.cases[g], terms, acc);
    }
}

static double kept_of(const Sweep &s, int g, float result)
{
    const double small = s.small_sign * s.small_mul * ldexp(1.0, BIG_EXP - g);
    return ((double)result - s.big) / small;
}

// Largest g at which the small value is kept whole (-1 if never).
static int last_whole(const Sweep &s)
{
    int last = -1;
    for (int g = 0; g <= GAP_MAX; g++)
        if (s.valid[g] && kept_of(s, g, s.cases[g].hw) == 1.0) last = g;
        else if (s.valid[g]) break;
    return last;
}

static void print_sweep(const Sweep &s, const Model &best)
{
    printf("\n-- %s\n   %s\n", s.title, s.what);
    printf("   %3s %-14s %-12s %-16s %8s %8s %8s %8s\n", "g", "hw result", "hw bits", "exact", "kept:hw",
           "model", "fp32seq", "status");
    for (int g = 0; g <= GAP_MAX; g++) {
        if (!s.valid[g]) continue;
        const Case &c = s.cases[g];
        const float m = model_case(best, c), f = exact_fp32_sequential(c);
        printf("   %3d %-14a %08x     %-16a %8.4g %8.4g %8.4g %8s\n", g, c.hw, f2u(c.hw),
               case_exact(c), kept_of(s, g, c.hw), kept_of(s, g, m), kept_of(s, g, f),
               f2u(m) == f2u(c.hw) ? "model=hw" : "MODEL!=HW");
    }
}

// ---------------------------------------------------------------- search
struct Scored {
    Model m;
    long mismatches;
};

// Mismatches of m over cs, stopping at cap + 1; prods (if given) holds each
// case's products for both exponent definitions (the search's cache).
static long count_mismatches(const Model &m, const std::vector<Case> &cs, long cap,
                             const std::vector<Product> *prods)
{
    long bad = 0;
    for (size_t i = 0; i < cs.size(); i++) {
        const float r = prods ? model_eval(m, &prods[m.expdef][i * PROBE_K], cs[i].acc)
                              : model_case(m, cs[i]);
        if (f2u(r) != f2u(cs[i].hw) && ++bad > cap) return bad;
    }
    return bad;
}

int main(int argc, char **argv)
{
    Model simulated;
    int argi = 1;
    if (argc > 1 && !strcmp(argv[1], "--simulate")) {
        if (argc < 8) {
            fprintf(stderr, "usage: wgmma_fp8_accum --simulate KEPT CUT ACC GROUP FIN EXP [blocks]\n");
            return 2;
        }
        simulated = {atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]),
                     atoi(argv[7]), 0, 0, argc > 8 && argv[8][0] == 'n' ? atoi(argv[8] + 1) : 0};
        if (simulated.norm_bits) argi++;
        g_simulate = &simulated;
        argi = 8;
    } else if (argc > 2 && (!strcmp(argv[1], "--dump") || !strcmp(argv[1], "--load"))) {
        const int dump = !strcmp(argv[1], "--dump");
        FILE *f = fopen(argv[2], dump ? "wb" : "rb");
        if (f == NULL) {
            fprintf(stderr, "wgmma_fp8_accum: cannot open %s\n", argv[2]);
            return 2;
        }
        (dump ? g_dump : g_load) = f;
        argi = 3;
    }
    const int random_blocks = argc > argi ? atoi(argv[argi]) : DEFAULT_RANDOM_BLOCKS;
    if (random_blocks < SEARCH_BLOCKS) {
        fprintf(stderr, "wgmma_fp8_accum: random-blocks %d < %d\n", random_blocks, SEARCH_BLOCKS);
        return 2;
    }
    cudaDeviceProp prop;
    if (g_load) {
        printf("wgmma_fp8_accum: hardware results LOADED from %s (no GPU)\n", argv[2]);
        prop.major = 9;
    } else if (g_simulate) {
        printf("wgmma_fp8_accum: SIMULATED hardware (no GPU): ");
        model_print(stdout, simulated);
        printf("\n");
        prop.major = 9;
    } else {
        CHECK(cudaGetDeviceProperties(&prop, 0));
        printf("wgmma_fp8_accum: %s (sm_%d%d), one wgmma.mma_async.m64n64k32.f32.e4m3.e4m3 per block\n",
               prop.name, prop.major, prop.minor);
    }
    if (prop.major != 9) {
        fprintf(stderr, "wgmma_fp8_accum: needs sm_90 (Hopper), found sm_%d%d\n", prop.major,
                prop.minor);
        return 1;
    }

    // 0. layout self-check: small integer products (<= 16) and accumulators
    // (< 16), |sums| < 2^10: exact for any accumulation that keeps >= 5 bits
    // below the largest term, so hw must equal the exact sum; a wrong operand
    // layout gives other sums.
    std::vector<Case> layout(CASES_PER_BLOCK);
    {
        uint8_t A[PROBE_M][PROBE_K], B[PROBE_N][PROBE_K];
        for (int r = 0; r < PROBE_M; r++)
            for (int k = 0; k < PROBE_K; k++) {
                A[r][k] = (uint8_t)((rng() & 1) << 7 | (7 + rng() % 3) << 3);  // +-1, 2, 4
                B[r][k] = (uint8_t)((7 + (r + 3 * k) % 3) << 3);
            }
        for (int r = 0; r < PROBE_M; r++)
            for (int n = 0; n < PROBE_N; n++) {
                Case &c = layout[r * PROBE_N + n];
                memcpy(c.a, A[r], PROBE_K);
                memcpy(c.b, B[n], PROBE_K);
                c.acc = (float)((r * PROBE_N + n) % 16);  // exact for any kept bits >= 5
            }
    }
    run_on_gpu(layout, 0);
    long layout_bad = 0;
    for (const Case &c : layout)
        if ((double)c.hw != case_exact(c)) {
            if (layout_bad < SHOW_MISMATCHES) print_case(c, exact_rounded_once(c));
            layout_bad++;
        }
    printf("0. layout self-check (exact small-integer sums, 4096 outputs): %ld wrong -> %s\n",
           layout_bad,
           layout_bad ? "LAYOUT CHECK FAILED: operands may not sit where the models assume; "
                        "read the findings below with care" : "ok");

    // 0b. subnormal inputs: one product s * x (s subnormal, x = 1, 2^-6, 2^8),
    // acc 0: the exact value unless the tensor core flushes subnormals.
    std::vector<Case> subn;
    for (int sc = 1; sc <= 7; sc++)
        for (int sign = 0; sign < 2; sign++)
            for (const uint8_t x : {(uint8_t)0x38, (uint8_t)0x08, (uint8_t)0x78}) {
                Case c;
                memset(&c, 0, sizeof c);
                c.a[5] = (uint8_t)(sign << 7 | sc);
                c.b[5] = x;
                subn.push_back(c);
            }
    run_on_gpu(subn, 1);
    long subn_bad = 0;
    for (const Case &c : subn)
        if ((double)c.hw != case_exact(c)) {
            if (subn_bad < SHOW_MISMATCHES) print_case(c, exact_rounded_once(c));
            subn_bad++;
        }
    printf("0b. subnormal e4m3 inputs (one product each, %zu cases): %ld not exact -> %s\n",
           subn.size(), subn_bad, subn_bad ? "SUBNORMALS FLUSHED or altered (models assume exact)" : "ok");

    // 1. gap sweeps (diagonal cases).
    Sweep sweeps[] = {
        {"1a. products 2^8 + 2^(8-g), acc 0 (alignment, kept bits)",
         "kept = (hw-2^8)/2^(8-g): 1 kept whole, 0 dropped; the last g with 1 = kept bits", 256.0, 1,
         1.0, 0, 0, {}, {}},
        {"1b. products 2^8 + 1.5*2^(8-g), acc 0 (cut, positive)",
         "at the cut: 0.667 = truncated, 1.333 = rounded up, 0 = dropped", 256.0, 1, 1.5, 0, 0, {}, {}},
        {"1c. products 2^8 - 1.5*2^(8-g), acc 0 (cut, negative term, positive sum)",
         "0.667 = toward zero (sign-magnitude), 1.333 = floor or round", 256.0, -1, 1.5, 0, 0, {}, {}},
        {"1d. products -2^8 - 1.5*2^(8-g), acc 0 (cut, negative sum)",
         "0.667 = toward zero, 1.333 = away (floor of a negative, or round)", -256.0, -1, 1.5, 0, 0, {},
         {}},
        {"1e. acc 2^8, product 1.5*2^(8-g) (accumulator larger than the products)",
         "last g kept whole ~ kept bits: acc aligned with products; ~23: added in fp32", 256.0, 1, 1.5,
         0, 1, {}, {}},
        {"1f. product 2^8, acc 1.5*2^(8-g) (accumulator smaller than the products)",
         "last g kept ~ kept bits: acc cut with the products; ~23: added in fp32", 256.0, 1, 1.5, 1, 0,
         {}, {}},
        {"1g. acc 2^8, product -1.5*2^(8-g) (negative product under a larger acc)",
         "0.667 toward zero, 1.333 floor/round", 256.0, -1, 1.5, 0, 1, {}, {}},
    };
    const int n_sweeps = sizeof sweeps / sizeof sweeps[0];
    std::vector<Case> designed;
    for (Sweep &s : sweeps) {
        build_sweep(s);
        designed.insert(designed.end(), s.cases.begin(), s.cases.end());
    }
    // 2. position matrix: 2^8 at k = 0, 2^(8-g) at k = p (1..31), acc 0.
    const int pos_g_lo = 10, pos_g_hi = 26;
    std::vector<Case> posm;
    for (int g = pos_g_lo; g <= pos_g_hi; g++)
        for (int p = 1; p < PROBE_K; p++) {
            Case c;
            if (!make_case(c, {{0, 256.0}, {p, ldexp(1.0, BIG_EXP - g)}}, 0.0f)) memset(&c, 0, sizeof c);
            posm.push_back(c);
        }
    designed.insert(designed.end(), posm.begin(), posm.end());
    run_on_gpu(designed, 1);
    {
        size_t at = 0;
        for (Sweep &s : sweeps)
            for (Case &c : s.cases) c = designed[at++];
        for (Case &c : posm) c = designed[at++];
    }

    // 3. random cases and the model search.
    const size_t n_random = (size_t)random_blocks * CASES_PER_BLOCK;
    std::vector<Case> rnd(n_random);
    for (int blk = 0; blk < random_blocks; blk++) gen_random_block(&rnd[(size_t)blk * CASES_PER_BLOCK], blk % RANDOM_KINDS);
    run_on_gpu(rnd, 0);
    // the search subset: the first SEARCH_BLOCKS blocks plus every designed case
    std::vector<Case> search(rnd.begin(), rnd.begin() + (size_t)SEARCH_BLOCKS * CASES_PER_BLOCK);
    search.insert(search.end(), designed.begin(), designed.end());
    std::vector<Product> search_prods[EXP_COUNT];
    for (int e = 0; e < EXP_COUNT; e++) {
        search_prods[e].resize(search.size() * PROBE_K);
        for (size_t i = 0; i < search.size(); i++) products_of(search[i], e, &search_prods[e][i * PROBE_K]);
    }
    std::vector<Scored> scored;
    long best_bad = (long)search.size();
    for (int gi = 0; gi < N_GROUPS; gi++)
        for (int accm = 0; accm < ACC_COUNT; accm++)
            for (int cut = 0; cut < CUT_COUNT; cut++)
                for (int fin = 0; fin < FIN_COUNT; fin++)
                    for (int expdef = 0; expdef < EXP_COUNT; expdef++)
                        for (int kept = KEPT_MIN; kept <= KEPT_MAX; kept++) {
                            const Model m = {kept, cut, accm, group_sizes[gi], fin, expdef, 0, 0, 0};
                            const long cap = std::max(best_bad * 4 + 64, 256L);
                            const long bad = count_mismatches(m, search, cap, search_prods);
                            if (bad < best_bad) best_bad = bad;
                            scored.push_back({m, bad});
                        }
    // two-level trees (Model.sub), over one group of 32 with the cut the
    // designed cases show (truncation toward zero, the accumulator aligned)
    for (int si = 0; si < N_SUBS; si++)
        for (int sk = SUB_KEPT_MIN - 1; sk <= SUB_KEPT_MAX; sk++)
            for (int fin = 0; fin < FIN_COUNT; fin++)
                for (int expdef = 0; expdef < EXP_COUNT; expdef++)
                    for (int kept = KEPT_MIN; kept <= KEPT_MAX; kept++) {
                        const Model m = {kept, CUT_ZERO, ACC_ALIGNED, PROBE_K, fin, expdef,
                                         sub_sizes[si], sk < SUB_KEPT_MIN ? 0 : sk, 0};
                        const long cap = std::max(best_bad * 4 + 64, 256L);
                        const long bad = count_mismatches(m, search, cap, search_prods);
                        if (bad < best_bad) best_bad = bad;
                        scored.push_back({m, bad});
                    }
    // a wide adder, then a narrow normalized register (Model.norm_bits)
    for (int nb = NORM_BITS_MIN; nb <= NORM_BITS_MAX; nb++)
        for (int gi = 0; gi < 2; gi++)
            for (int accm = 0; accm < ACC_COUNT; accm++)
                for (int cut = CUT_ZERO; cut <= CUT_FLOOR; cut++)
                    for (int expdef = 0; expdef < EXP_COUNT; expdef++)
                        for (int kept = nb; kept <= KEPT_MAX; kept++) {
                            const Model m = {kept, cut, accm, group_sizes[gi], FIN_ZERO, expdef, 0, 0, nb};
                            const long cap = std::max(best_bad * 4 + 64, 256L);
                            const long bad = count_mismatches(m, search, cap, search_prods);
                            if (bad < best_bad) best_bad = bad;
                            scored.push_back({m, bad});
                        }
    std::stable_sort(scored.begin(), scored.end(),
                     [](const Scored &x, const Scored &y) { return x.mismatches < y.mismatches; });
    printf("\n3. model search: %zu models on %zu cases (%d random blocks + the designed cases);\n"
           "   best first (a count > the cap is shown as the cap+1):\n",
           scored.size(), search.size(), SEARCH_BLOCKS);
    for (int i = 0; i < SEARCH_FINALISTS && i < (int)scored.size(); i++) {
        printf("   %6ld  ", scored[i].mismatches);
        model_print(stdout, scored[i].m);
        printf("\n");
    }
    // finalists over every random case
    long best_full = -1;
    int ties = 0;  // finalists as good as the best over every random case
    for (int i = 0; i < SEARCH_FINALISTS && i < (int)scored.size(); i++) {
        const long bad = count_mismatches(scored[i].m, rnd, best_full < 0 ? (long)rnd.size() : best_full, NULL);
        if (best_full >= 0 && bad > best_full)
            printf("   finalist %2d over all %zu random cases: > %ld mismatches (stopped)\n", i,
                   rnd.size(), best_full);
        else
            printf("   finalist %2d over all %zu random cases: %ld mismatches\n", i, rnd.size(), bad);
        if (best_full < 0 || bad < best_full) {
            best_full = bad;
            g_best = scored[i].m;
            ties = 1;
        } else if (bad == best_full) {
            ties++;
        }
    }
    const Model best = g_best;

    // 1. and 2. printed with the best model's column.
    printf("\n1. gap sweeps: the big value at k=0 (or the accumulator), the small at k=1\n"
           "   columns: kept = (result - big)/small for hw, the best model (section 4), exact fp32\n");
    for (int i = 0; i < n_sweeps; i++) print_sweep(sweeps[i], best);
    printf("\n2. position matrix: 2^8 at k=0 and 2^(8-g) at k=p, acc 0: 1 kept whole, 0 dropped, ~ partly\n"
           "   (products in one alignment group drop together; a later group keeps the small one)\n");
    printf("   g\\p ");
    for (int p = 1; p < PROBE_K; p++) printf("%d", p % 10);
    printf("\n");
    for (int g = pos_g_lo, at = 0; g <= pos_g_hi; g++) {
        printf("   %3d ", g);
        for (int p = 1; p < PROBE_K; p++, at++) {
            const double kept = ((double)posm[at].hw - 256.0) / ldexp(1.0, BIG_EXP - g);
            printf("%c", !posm[at].a[0] ? '?' : kept == 1.0 ? '1' : kept == 0.0 ? '0' : '~');
        }
        printf("\n");
    }

    // 4. the best model and the baselines over every random case.
    printf("\n4. bit-for-bit over %zu random cases (%d blocks; kinds: all codes, close exponents,\n"
           "   sparse, one large product over small ones, mid band; accumulators 0 or +-2^[%d,%d])\n",
           n_random, random_blocks, ACC_EXP_MIN, ACC_EXP_MAX);
    printf("   best model: ");
    model_print(stdout, best);
    printf("\n");
    const char *names[] = {"best model", "exact fp32 sequential (acc, then k = 0..31)",
                           "exact sum rounded once to fp32 (RNE)"};
    long bad_counts[3] = {0, 0, 0}, zero_sign[3] = {0, 0, 0};
    long bad_by_kind[3][RANDOM_KINDS] = {};
    for (int which = 0; which < 3; which++) {
        int shown = 0;
        for (size_t i = 0; i < rnd.size(); i++) {
            const Case &c = rnd[i];
            const float r = which == 0 ? model_case(best, c)
                            : which == 1 ? exact_fp32_sequential(c) : exact_rounded_once(c);
            if (f2u(r) == f2u(c.hw)) continue;
            bad_counts[which]++;
            bad_by_kind[which][(i / CASES_PER_BLOCK) % RANDOM_KINDS]++;
            if (r == 0.0f && c.hw == 0.0f) zero_sign[which]++;
            if (which == 0 && shown++ < SHOW_MISMATCHES) print_case(c, r);
        }
        printf("   %-45s mismatches %ld of %zu (%ld only the sign of zero); by kind:", names[which],
               bad_counts[which], n_random, zero_sign[which]);
        for (int k = 0; k < RANDOM_KINDS; k++) printf(" %ld", bad_by_kind[which][k]);
        printf("\n");
    }
    // the CPU specification's rule (kernels/fp8_mma.c) over every case
    long spec_bad = 0, spec_n = 0;
    for (const std::vector<Case> *set : {&rnd, &designed})
        for (const Case &c : *set) {
            spec_n++;
            const float r = fp8_mma_e4m3_dot(c.a, c.b, PROBE_K, c.acc);
            if (f2u(r) == f2u(c.hw)) continue;
            if (spec_bad++ < SHOW_MISMATCHES) print_case(c, r);
        }
    printf("   kernels/fp8_mma.c fp8_mma_e4m3_dot (the CPU specification's rule): %ld mismatches of %ld"
           " (random and designed cases)\n", spec_bad, spec_n);

    // 5. summary from the sweeps (hand-readable facts) and the best model.
    const int kept_1a = last_whole(sweeps[0]), kept_acc_big = last_whole(sweeps[4]);
    const int kept_acc_small = last_whole(sweeps[5]);
    auto kept_at = [&](int sw, int g) {
        return g >= 0 && g <= GAP_MAX && sweeps[sw].valid[g] ? kept_of(sweeps[sw], g, sweeps[sw].cases[g].hw)
                                                              : NAN;
    };
    const int gc = kept_1a;  // 1.5 * 2^(8-g) at g = kept bits: 1.5 quanta
    printf("\n5. facts: 1a last gap kept whole %d (= kept bits); 1e (acc big) %d, 1f (acc small) %d\n"
           "   (1.5*2^(8-g) kept whole: kept bits - 1 where the acc is aligned, 22 where added in fp32);\n"
           "   at g=%d (1.5 quanta) kept: 1b %.4g, 1c %.4g, 1d %.4g, 1g %.4g (0.667 = cut to 1 quantum)\n",
           kept_1a, kept_acc_big, kept_acc_small, gc, kept_at(1, gc), kept_at(2, gc), kept_at(3, gc),
           kept_at(6, gc));
    const char *cut_word = (best.cut == CUT_ZERO || best.cut == CUT_ONCE_ZERO) ? "truncate"
                           : best.cut == CUT_FLOOR                        ? "floor"
                                                                          : "round";
    if (layout_bad) printf("SUMMARY: LAYOUT CHECK FAILED (%ld of 4096) -- ", layout_bad);
    if (subn_bad) printf("SUMMARY: SUBNORMAL INPUTS NOT EXACT (%ld of %zu) -- ", subn_bad, subn.size());
    printf("SUMMARY: alignment: %s, group %d products; kept bits: %d (quantum 2^(emax-%d), emax by %s);"
           " cut: %s (%s; final fp32 %s); accumulator: %s; model mismatches: %ld of %zu"
           " (exact-fp32 %ld, exact-once %ld); %d finalist model(s) tie at the best (section 3: they"
           " differ where these cases cannot tell)\n",
           best.accm == ACC_AFTER ? "to the largest product" : "to the largest of products and accumulator",
           best.group, best.kept, best.kept, exp_name[best.expdef], cut_word, cut_name[best.cut],
           fin_name[best.fin], acc_name[best.accm], bad_counts[0], n_random, bad_counts[1],
           bad_counts[2], ties);
    printf("SPEC: kernels/fp8_mma.c %ld mismatches of %ld cases\n", spec_bad, spec_n);
    if (g_dump && fclose(g_dump) != 0) {
        fprintf(stderr, "wgmma_fp8_accum: cannot write the dump\n");
        return 1;
    }
    return layout_bad ? 1 : 0;
}
