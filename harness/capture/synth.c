/*
 * synth.c: synthetic captures with the structure of real activations (see
 * synth.h).
 *
 * Every layer is generated in the pre-RoPE space of one kv head g (and its
 * query heads h, g = h / (hq / hkv)) from per-layer parameters:
 *
 *   k_pre = k_base_g + k_sd_g (.) z + m * A_g s_g
 *   v     = v_sd_g (.) z * (m > 0 ? V_MASSIVE_SCALE : 1)
 *   q_pre = a_h u_g + b_h s_g + Q_NOISE_SD z
 *   k_base_g = K_DIR_GAIN sqrt(d) u_g + sum over outlier channels c of +-M_c e_c
 *
 * z is a fresh N(0,1) per element, u_g a unit "content" direction shared by
 * the group's keys and queries, s_g a unit "sink" direction that lives on
 * the lowest-frequency RoPE pairs, m the massive-activation weight of the
 * token (1 for a sequence's first token, MASSIVE2_FRACTION for one early
 * delimiter-like token, else 0). q and k are then rotated by RoPE at their
 * absolute positions and rounded once to bf16. The gains a_h, b_h, A_g are
 * solved from target logits (after sm_scale = 1/sqrt(d)), so the structure
 * is the same for every head dim.
 *
 * Randomness: xoshiro256** (Blackman & Vigna, "Scrambled linear
 * pseudorandom number generators", ACM TOMS 47(4), 2021; reference code at
 * prng.di.unimi.it) seeded through splitmix64 (kernels/rng.h), one stream
 * per layer (so layers can run on any thread; the bulk noise comes from
 * XOSHIRO_LANES jumped copies stepped together), normals by the ziggurat
 * method (Marsaglia & Tsang, "The Ziggurat Method for Generating Random
 * Variables", J. Stat. Softw. 5(8), 2000), two per 64-bit draw, with the
 * strip index, magnitude and sign taken from disjoint bits, which avoids the
 * index/value correlation of the original RNOR (Doornik, "An Improved
 * Ziggurat Method to Generate Normal Random Samples", 2005). libm (exp,
 * log, pow, cos, sin) is used only for the per-layer parameters, the RoPE
 * table and the ziggurat's rare path (~1% of samples); the elementwise work
 * is integer and fp32 arithmetic, explicitly vectorized where it pays (AVX2
 * gathers when the build targets AVX2) with results identical to the scalar
 * code, so the bytes depend neither on the thread count nor on the SIMD.
 */
#include "synth.h"

#include <math.h>
#include <stdarg.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "kernels/numerics.h"
#include "kernels/parallel.h"
#include "base/rng.h"
#include "safetensors.h"

/* ---- magnitudes --------------------------------------------------------
 * Unit: the per-channel noise sd of K and V (about 1, times the per-channel
 * scale). Logit targets are in units of the softmax input (after sm_scale). */

/* Sweep defaults of every preset: modest, the user raises them. */
#define SYNTH_DEFAULT_SEQS 2
#define SYNTH_DEFAULT_SEQ_LEN 256
#define SYNTH_DEFAULT_CONTEXT 0

/* K outlier channels (KIVI, Liu et al., ICML 2024, arXiv 2402.02750;
 * KVQuant, Hooper et al., arXiv 2401.18079): a few fixed key channels whose
 * magnitude is ~10-20x the others on every token (hence per-channel key
 * quantization in both), clearest before RoPE (KVQuant quantizes pre-RoPE
 * keys for that reason). Offset M_c drawn uniformly in [MIN, MAX] with a
 * random sign, applied before RoPE. */
#define K_OUTLIER_GAIN_MIN 12.0
#define K_OUTLIER_GAIN_MAX 20.0
/* Per-channel scale variation of K noise and of V: lognormal with this sd of
 * the natural log. Values have no fixed outlier channels (KIVI quantizes
 * them per token for that reason), only this milder variation. */
#define K_CHANNEL_LOG_SD 0.25
#define V_CHANNEL_LOG_SD 0.35
/* Shared key direction u_g: amplitude K_DIR_GAIN * sqrt(d), i.e. half the
 * norm of the noise, so that queries along u_g find the keys (below). */
#define K_DIR_GAIN 0.5
/* Query noise sd per channel: keeps q.k noise around one logit. */
#define Q_NOISE_SD 0.3
/* Logit that u_g gives a query and a key at distance 0; RoPE turns it into a
 * recency bias that fades over the high-frequency pairs (RoFormer's
 * long-term decay property). Queries correlated with keys make softmax
 * peaked rather than uniform, as in trained heads. */
#define LOCAL_LOGIT 4.0
/* Per-head strength multipliers of LOCAL_LOGIT and SINK_LOGIT, uniform in
 * [MIN, MAX]: heads differ in how local / sink-bound they are. */
#define HEAD_GAIN_MIN 0.5
#define HEAD_GAIN_MAX 1.5
/* Massive activations (Sun et al., "Massive Activations in Large Language
 * Models", arXiv 2402.17762): the first token (and the first delimiter)
 * carries activations orders of magnitude above the rest and attention
 * concentrates on it: the attention sink (Xiao et al., StreamingLLM, arXiv
 * 2309.17453). Here its key stands out and every query has a component along
 * it. The first token's key norm is this many times the typical key norm. */
#define SINK_KEY_NORM_RATIO 4.0
/* Logit the sink direction adds between a query and the first token. */
#define SINK_LOGIT 6.0
/* Lowest-frequency RoPE pairs that carry s_g: they barely rotate over the
 * context (pair d/2-4 of gpt-oss turns 0.25 rad in 8192 tokens), so every
 * query keeps finding the sink (Barbero et al., "Round and Round We Go! What
 * makes Rotary Positional Encodings useful?", arXiv 2410.06205: the lowest
 * frequencies act as nearly position-independent channels). */
#define SINK_ROPE_PAIRS 4
/* The second massive token (Sun et al.: the first "." or "\n") sits at a
 * position drawn in [1, SYNTH_MASSIVE_MAX_POS), with this fraction of the
 * sink amplitude; the same position in every layer of a sequence. */
#define MASSIVE2_FRACTION 0.5
/* Values of the massive tokens are small (Gu et al., "When Attention Sink
 * Emerges in Language Models", arXiv 2410.10781: the sink token's value norm
 * is far below the others; Sun et al.: attention to these tokens acts as a
 * fixed bias). */
#define V_MASSIVE_SCALE 0.05
/* Learned-like per-head sink logits (gpt-oss): N(0, 1) + this offset, fp32. */
#define SINK_PARAM_MEAN 0.5

/* The smallest head dim leaves room for the sink pairs, the outliers and a
 * content direction on what remains. */
_Static_assert(2 * SINK_ROPE_PAIRS + SYNTH_K_OUTLIERS_MAX < SYNTH_MIN_D,
               "SYNTH_MIN_D too small for the sink pairs and outlier channels");

/* ---- random streams ---------------------------------------------------- */

/* Stream of the per-sequence layout (second massive token); layer L uses
 * SYNTH_STREAM_LAYER0 + L. */
#define SYNTH_STREAM_LAYOUT 0u
#define SYNTH_STREAM_LAYER0 1u

/* Seeds r for (seed, stream): the stream id is hashed by one splitmix64 step
 * and folded into the seed, which rng_xoshiro_seed expands. */
static void xoshiro_seed(rng_xoshiro256 *r, uint64_t seed, uint64_t stream)
{
    uint64_t h = stream;
    rng_xoshiro_seed(r, seed ^ rng_splitmix64(&h));
}

/* Uniform double in [lo, hi). */
static double uniform_range(rng_xoshiro256 *r, double lo, double hi)
{
    return lo + (hi - lo) * rng_xoshiro_open01(r);
}

/* Lanes of the bulk generator. */
#define XOSHIRO_LANES 4
typedef uint64_t u64xl __attribute__((vector_size(8 * XOSHIRO_LANES)));

/* XOSHIRO_LANES xoshiro256** generators stepped together (GCC/Clang vector
 * extensions; SIMD where the target has it): lane j is the layer's scalar
 * stream jumped j + 1 times, so no lane overlaps another or the scalar one. */
typedef struct xoshiro_bulk {
    u64xl s[4];
} xoshiro_bulk;

/* Seeds the lanes from r (r itself is left unchanged). */
static void xoshiro_bulk_seed(xoshiro_bulk *b, const rng_xoshiro256 *r)
{
    rng_xoshiro256 lane = *r;
    for (int j = 0; j < XOSHIRO_LANES; j++) {
        rng_xoshiro_jump(&lane);
        for (int i = 0; i < 4; i++) b->s[i][j] = lane.s[i];
    }
}

/* x rotated left by k bits in every lane, 0 < k < 64 (a macro: a function
 * passing 32-byte vectors by value would depend on the AVX calling ABI). */
#define ROTL_LANES(x, k) (((x) << (k)) | ((x) >> (64 - (k))))

/* One xoshiro256** step in every lane of the state s[4] (x * 5 and x * 9 as
 * shift-adds); lane j's output goes to lane j of the u64xl at out. A macro
 * so that the state can live in the caller's registers. */
#define XOSHIRO_BULK_STEP(s, out)                                                  \
    do {                                                                           \
        const u64xl x5_ = ((s)[1] << 2) + (s)[1];                                  \
        const u64xl r7_ = ROTL_LANES(x5_, 7);                                      \
        const u64xl res_ = (r7_ << 3) + r7_;                                       \
        const u64xl t_ = (s)[1] << 17;                                             \
        (s)[2] ^= (s)[0];                                                          \
        (s)[3] ^= (s)[1];                                                          \
        (s)[1] ^= (s)[2];                                                          \
        (s)[0] ^= (s)[3];                                                          \
        (s)[2] ^= t_;                                                              \
        (s)[3] = ROTL_LANES((s)[3], 45);                                           \
        memcpy((out), &res_, sizeof res_);                                         \
    } while (0)

/* Ziggurat constants for N(0,1) with 128 strips (Marsaglia & Tsang 2000,
 * zigset): right edge of the base strip, area of each strip, 2^31. */
#define ZIG_LAYERS 128
#define ZIG_R 3.442619855899
#define ZIG_V 9.91256303526217e-3
#define ZIG_M1 2147483648.0
/* Bits 7-30 of a word: the magnitude, a multiple of ZIG_LAYERS below 2^31. */
#define ZIG_MAG_MASK (0x7FFFFFFFu & ~(uint32_t)(ZIG_LAYERS - 1))

typedef struct zig_tables {
    uint32_t kn[ZIG_LAYERS]; /* fast-path bound on the magnitude per strip */
    double wn[ZIG_LAYERS];   /* magnitude -> x scale per strip */
    float wnf[ZIG_LAYERS];   /* wn rounded to fp32, for the fast path */
    double fn[ZIG_LAYERS];   /* exp(-x^2/2) at the strip edges */
} zig_tables;

/* Fills z exactly as Marsaglia & Tsang's zigset does for RNOR. */
static void zig_init(zig_tables *z)
{
    double dn = ZIG_R, tn = dn;
    const double q = ZIG_V / exp(-0.5 * dn * dn);
    z->kn[0] = (uint32_t)((dn / q) * ZIG_M1);
    z->kn[1] = 0;
    z->wn[0] = q / ZIG_M1;
    z->wn[ZIG_LAYERS - 1] = dn / ZIG_M1;
    z->fn[0] = 1.0;
    z->fn[ZIG_LAYERS - 1] = exp(-0.5 * dn * dn);
    for (int i = ZIG_LAYERS - 2; i >= 1; i--) {
        dn = sqrt(-2.0 * log(ZIG_V / dn + exp(-0.5 * dn * dn)));
        z->kn[i + 1] = (uint32_t)((dn / tn) * ZIG_M1);
        tn = dn;
        z->fn[i] = exp(-0.5 * dn * dn);
        z->wn[i] = dn / ZIG_M1;
    }
    for (int i = 0; i < ZIG_LAYERS; i++) z->wnf[i] = (float)z->wn[i];
}

/* The ziggurat's rare path (RNOR's nfix) for strip iz and magnitude mag:
 * the tail beyond ZIG_R or the wedge test, retrying with words from the
 * scalar stream r. Returns |x|; the caller applies the sign. */
static double zig_fix(rng_xoshiro256 *r, const zig_tables *z, uint32_t mag, unsigned iz)
{
    for (;;) {
        const double x = mag * z->wn[iz];
        if (iz == 0) {
            /* Tail: Marsaglia's method for x > ZIG_R. */
            double xx, y;
            do {
                xx = -log(rng_xoshiro_open01(r)) / ZIG_R;
                y = -log(rng_xoshiro_open01(r));
            } while (y + y < xx * xx);
            return ZIG_R + xx;
        }
        if (z->fn[iz] + rng_xoshiro_open01(r) * (z->fn[iz - 1] - z->fn[iz]) < exp(-0.5 * x * x))
            return x;
        const uint32_t w = (uint32_t)(rng_xoshiro_next(r) >> 32);
        iz = w & (ZIG_LAYERS - 1);
        mag = w & ZIG_MAG_MASK;
        if (mag < z->kn[iz]) return mag * z->wn[iz];
    }
}

/* Sign bit of a binary32 (and of the 32-bit words zig_normal reads). */
#define SIGN_BIT32 0x80000000u

/* Fast-path value of a word: (float)mag * wnf[iz], exact conversion (mag has
 * at most 24 significant bits) and one fp32 rounding, sign from bit 31. */
static inline float zig_fast(uint32_t mag, float wnf, uint32_t sign)
{
    float x = (float)mag * wnf;
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u ^= sign;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* One N(0,1) sample from a 32-bit word w: strip index from bits 0-6, the
 * magnitude from bits 7-30 (a multiple of 128 below 2^31, the scale of
 * RNOR's |hz|), the sign from bit 31 -- disjoint bits, which avoids the
 * index/value correlation of the original RNOR (Doornik 2005). ~99% take the
 * fast path (zig_fast); the rest draw more from r. */
static inline float zig_normal(uint32_t w, rng_xoshiro256 *r, const zig_tables *z)
{
    const unsigned iz = w & (ZIG_LAYERS - 1);
    const uint32_t mag = w & ZIG_MAG_MASK;
    if (__builtin_expect(mag < z->kn[iz], 1)) return zig_fast(mag, z->wnf[iz], w & SIGN_BIT32);
    const float x = (float)zig_fix(r, z, mag, iz);
    return (w & SIGN_BIT32) ? -x : x;
}

/* One N(0,1) sample from the scalar stream. */
static double normal(rng_xoshiro256 *r, const zig_tables *z)
{
    return zig_normal((uint32_t)(rng_xoshiro_next(r) >> 32), r, z);
}

#if defined(__AVX2__)
/* The fast path of eight zig_normal calls at once (AVX2 gathers of the
 * strip tables); lanes that miss it are finished by zig_normal in lane
 * order, so the result and the draws from r are those of the scalar loop.
 * kn and the magnitude are below 2^31, so the signed compare is exact. */
static inline void zig_normal8_avx2(const u64xl *v, rng_xoshiro256 *r, const zig_tables *z,
                                    float *out)
{
    __m256i w;
    memcpy(&w, v, sizeof w);
    const __m256i iz = _mm256_and_si256(w, _mm256_set1_epi32(ZIG_LAYERS - 1));
    const __m256i mag = _mm256_and_si256(w, _mm256_set1_epi32((int)ZIG_MAG_MASK));
    const __m256i kn = _mm256_i32gather_epi32((const int *)z->kn, iz, 4);
    const __m256 wn = _mm256_i32gather_ps(z->wnf, iz, 4);
    const __m256 x = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), wn);
    const __m256i sign = _mm256_and_si256(w, _mm256_set1_epi32((int)SIGN_BIT32));
    _mm256_storeu_ps(out, _mm256_xor_ps(x, _mm256_castsi256_ps(sign)));
    const __m256i fast = _mm256_cmpgt_epi32(kn, mag);
    const unsigned slow = ~(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(fast)) & 0xFFu;
    if (__builtin_expect(slow != 0, 0)) {
        uint32_t wa[2 * XOSHIRO_LANES];
        memcpy(wa, v, sizeof wa);
        for (int j = 0; j < 2 * XOSHIRO_LANES; j++)
            if (slow & (1u << j)) out[j] = zig_normal(wa[j], r, z);
    }
}
#endif

/* Fills out[0..n) with N(0,1) samples (zig_normal) from the bulk
 * generator: per step, lane j gives its low then its high 32-bit half
 * (words 2j and 2j + 1); a partial last step discards its unused words;
 * rare-path draws come from r, in word order. */
static void normal_fill(xoshiro_bulk *b, rng_xoshiro256 *r, const zig_tables *z, float *out, int n)
{
    u64xl st[4] = {b->s[0], b->s[1], b->s[2], b->s[3]};
    int i = 0;
    for (; i + 2 * XOSHIRO_LANES <= n; i += 2 * XOSHIRO_LANES) {
        u64xl v;
        XOSHIRO_BULK_STEP(st, &v);
#if defined(__AVX2__) && XOSHIRO_LANES == 4
        zig_normal8_avx2(&v, r, z, out + i);
#else
        for (int j = 0; j < XOSHIRO_LANES; j++) {
            out[i + 2 * j] = zig_normal((uint32_t)v[j], r, z);
            out[i + 2 * j + 1] = zig_normal((uint32_t)(v[j] >> 32), r, z);
        }
#endif
    }
    if (i < n) {
        u64xl v;
        XOSHIRO_BULK_STEP(st, &v);
        for (int k = 0; i + k < n; k++)
            out[i + k] = zig_normal((uint32_t)(k % 2 ? v[k / 2] >> 32 : v[k / 2]), r, z);
    }
    for (int k = 0; k < 4; k++) b->s[k] = st[k];
}

/* ---- RoPE -------------------------------------------------------------- */

void synth_rope_angles(int d, double theta, int64_t pos, float *cos_out, float *sin_out)
{
    const int half = d / 2;
    for (int i = 0; i < half; i++) {
        /* RoFormer eq. (15): theta_i = base^(-2i/d). */
        const double inv_freq = pow(theta, -(2.0 * i) / d);
        const double angle = (double)pos * inv_freq;
        cos_out[i] = (float)cos(angle);
        sin_out[i] = (float)sin(angle);
    }
}

/* Floats per explicit vector step of the elementwise loops (GCC/Clang vector
 * extensions: the same IEEE operations lane by lane as the scalar tails, so
 * the results do not depend on the split; -O2 does not vectorize loops of
 * unknown trip count by itself). */
#define F32_LANES 8
typedef float f32xl __attribute__((vector_size(4 * F32_LANES)));

/* Unaligned vector load / store of F32_LANES floats. */
#define F32_LOAD(v, p) memcpy(&(v), (p), sizeof(f32xl))
#define F32_STORE(p, v) memcpy((p), &(v), sizeof(f32xl))

void synth_rope_apply(float *x, int d, const float *cos_row, const float *sin_row)
{
    const int half = d / 2;
    float *restrict x1p = x, *restrict x2p = x + half;
    int i = 0;
    for (; i + F32_LANES <= half; i += F32_LANES) {
        f32xl x1, x2, c, s;
        F32_LOAD(x1, x1p + i);
        F32_LOAD(x2, x2p + i);
        F32_LOAD(c, cos_row + i);
        F32_LOAD(s, sin_row + i);
        const f32xl y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
        F32_STORE(x1p + i, y1);
        F32_STORE(x2p + i, y2);
    }
    for (; i < half; i++) {
        const float x1 = x1p[i], x2 = x2p[i];
        x1p[i] = x1 * cos_row[i] - x2 * sin_row[i];
        x2p[i] = x2 * cos_row[i] + x1 * sin_row[i];
    }
}

/* x[i] = base[i] + sd[i] * z[i] + w * add[i] for i < n (add may be NULL:
 * then without the last term). */
static void row_affine(float *restrict x, const float *restrict base, const float *restrict sd,
                       const float *restrict z, const float *restrict add, float w, size_t n)
{
    size_t i = 0;
    if (add != NULL) {
        for (; i + F32_LANES <= n; i += F32_LANES) {
            f32xl b, s, zz, a;
            F32_LOAD(b, base + i);
            F32_LOAD(s, sd + i);
            F32_LOAD(zz, z + i);
            F32_LOAD(a, add + i);
            const f32xl y = b + s * zz + w * a;
            F32_STORE(x + i, y);
        }
        for (; i < n; i++) x[i] = base[i] + sd[i] * z[i] + w * add[i];
    } else {
        for (; i + F32_LANES <= n; i += F32_LANES) {
            f32xl b, s, zz;
            F32_LOAD(b, base + i);
            F32_LOAD(s, sd + i);
            F32_LOAD(zz, z + i);
            const f32xl y = b + s * zz;
            F32_STORE(x + i, y);
        }
        for (; i < n; i++) x[i] = base[i] + sd[i] * z[i];
    }
}

/* x[i] = sd[i] * z[i] * w for i < n. */
static void row_scale(float *restrict x, const float *restrict sd, const float *restrict z,
                      float w, size_t n)
{
    size_t i = 0;
    for (; i + F32_LANES <= n; i += F32_LANES) {
        f32xl s, zz;
        F32_LOAD(s, sd + i);
        F32_LOAD(zz, z + i);
        const f32xl y = s * zz * w;
        F32_STORE(x + i, y);
    }
    for (; i < n; i++) x[i] = sd[i] * z[i] * w;
}

/* Rounds x[0..n) to bf16 into out[0..n) with bf16_from_f32 (numerics.h),
 * the one rounding of every value. */
static void to_bf16(const float *restrict x, size_t n, uint16_t *restrict out)
{
    for (size_t i = 0; i < n; i++) out[i] = bf16_from_f32(x[i]);
}

/* ---- presets ----------------------------------------------------------- */

typedef struct synth_preset_row {
    const char *name;
    int n_layers, hq, hkv, d;
    int window, window_even_only, sinks;
    double rope_theta;
} synth_preset_row;

/* Shapes from the models' Hugging Face config.json. gpt-oss-120b
 * (openai/gpt-oss-120b): num_hidden_layers 36, num_attention_heads 64,
 * num_key_value_heads 8, head_dim 64, sliding_window 128 on the
 * "sliding_attention" layers (layer_types alternates, starting with layer 0),
 * learned attention sinks, rope_theta 150000 (its YaRN scaling is not
 * modelled). Llama-3-8B (meta-llama/Meta-Llama-3-8B): 32 layers, 32 heads,
 * 8 kv heads, hidden 4096 / 32 = head dim 128, rope_theta 500000, full
 * attention, no sinks. sm_scale is 1/sqrt(d) for both (1/8 for gpt-oss). */
static const synth_preset_row synth_presets[] = {
    {"gpt-oss-120b", 36, 64, 8, 64, 128, 1, 1, 150000.0},
    {"llama-3-8b", 32, 32, 8, 128, 0, 0, 0, 500000.0},
};
#define SYNTH_N_PRESETS ((int)(sizeof synth_presets / sizeof synth_presets[0]))

static const char *const synth_preset_name_list[] = {"gpt-oss-120b", "llama-3-8b", NULL};

const char *const *synth_preset_names(void)
{
    return synth_preset_name_list;
}

pg_status synth_preset(const char *name, synth_config *cfg, pg_err *err)
{
    for (int i = 0; i < SYNTH_N_PRESETS; i++) {
        const synth_preset_row *p = &synth_presets[i];
        if (name == NULL || strcmp(p->name, name) != 0) continue;
        *cfg = (synth_config){
            .preset = p->name,
            .model = NULL,
            .n_layers = p->n_layers,
            .hq = p->hq,
            .hkv = p->hkv,
            .d = p->d,
            .window = p->window,
            .window_even_only = p->window_even_only,
            .sinks = p->sinks,
            .n_seqs = SYNTH_DEFAULT_SEQS,
            .seq_len = SYNTH_DEFAULT_SEQ_LEN,
            .context = SYNTH_DEFAULT_CONTEXT,
            .block_size = CAPTURE_DEFAULT_BLOCK_SIZE,
            .write_scales = 0,
            .seed = 0,
            .rope_theta = p->rope_theta,
        };
        return PG_OK;
    }
    char list[256] = "";
    size_t len = 0;
    for (int i = 0; i < SYNTH_N_PRESETS; i++) {
        int n = snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "",
                         synth_presets[i].name);
        if (n < 0 || (size_t)n >= sizeof list - len) break;
        len += (size_t)n;
    }
    return pg_fail(err, PG_ERR_USAGE, "--preset: unknown preset '%s' (presets: %s)",
                   name ? name : "(null)", list);
}

/* ---- validation -------------------------------------------------------- */

pg_status synth_validate(const synth_config *cfg, pg_err *err)
{
    if (cfg == NULL) return pg_fail(err, PG_ERR_INTERNAL, "synth: no config");
    if (cfg->n_layers < 1 || cfg->n_layers > SYNTH_MAX_LAYERS)
        return pg_fail(err, PG_ERR_USAGE, "--layers: %d is outside [1, %d]", cfg->n_layers,
                       SYNTH_MAX_LAYERS);
    if (cfg->hq < 1 || cfg->hq > SYNTH_MAX_HEADS)
        return pg_fail(err, PG_ERR_USAGE, "synth: query heads %d outside [1, %d] (--preset)",
                       cfg->hq, SYNTH_MAX_HEADS);
    if (cfg->hkv < 1 || cfg->hkv > SYNTH_MAX_HEADS)
        return pg_fail(err, PG_ERR_USAGE, "synth: kv heads %d outside [1, %d] (--preset)",
                       cfg->hkv, SYNTH_MAX_HEADS);
    if (cfg->hq % cfg->hkv != 0)
        return pg_fail(err, PG_ERR_USAGE,
                       "synth: query heads %d not a multiple of kv heads %d (--preset)", cfg->hq,
                       cfg->hkv);
    if (cfg->d < SYNTH_MIN_D || cfg->d > SYNTH_MAX_D || cfg->d % 2 != 0)
        return pg_fail(err, PG_ERR_USAGE,
                       "synth: head dim %d must be even and in [%d, %d] (--preset)", cfg->d,
                       SYNTH_MIN_D, SYNTH_MAX_D);
    if (cfg->n_seqs < 1)
        return pg_fail(err, PG_ERR_USAGE, "--seqs: must be positive (got %d)", cfg->n_seqs);
    if (cfg->seq_len < 1)
        return pg_fail(err, PG_ERR_USAGE, "--seq-len: must be positive (got %d)",
                       cfg->seq_len);
    if (cfg->context < 0)
        return pg_fail(err, PG_ERR_USAGE, "--context: must not be negative (got %d)",
                       cfg->context);
    if (cfg->window < 0)
        return pg_fail(err, PG_ERR_USAGE, "--window: must not be negative (got %d)",
                       cfg->window);
    int block_ok = 0;
    for (int i = 0; i < CAPTURE_N_BLOCK_SIZES; i++)
        block_ok |= cfg->block_size == capture_block_sizes[i];
    if (!block_ok)
        return pg_fail(err, PG_ERR_USAGE, "--block-size: must be 16, 32 or 64 (got %d)",
                       cfg->block_size);
    if (!(cfg->rope_theta >= 0.0 && cfg->rope_theta <= 1e12) ||
        (cfg->rope_theta > 0.0 && cfg->rope_theta <= 1.0))
        return pg_fail(err, PG_ERR_USAGE,
                       "synth: rope_theta %g must be 0 (default) or in (1, 1e12] (--preset)",
                       cfg->rope_theta);
    const int64_t per_seq = (int64_t)cfg->context + cfg->seq_len;
    const int64_t total = per_seq * cfg->n_seqs;
    if (total > INT32_MAX)
        return pg_fail(err, PG_ERR_USAGE,
                       "--seqs/--context/--seq-len: %d x (%d + %d) = %lld tokens exceed %d",
                       cfg->n_seqs, cfg->context, cfg->seq_len, (long long)total, INT32_MAX);
    return PG_OK;
}

/* ---- generation -------------------------------------------------------- */

/* Everything every layer shares, read-only during generation. */
typedef struct synth_shared {
    const synth_config *cfg;
    int64_t seq_kv;          /* context + seq_len */
    int64_t tq, tkv;         /* packed token counts */
    float sm_scale;          /* 1/sqrt(d) */
    const float *cos_tab;    /* [seq_kv][d/2] */
    const float *sin_tab;
    const int *massive2;     /* [n_seqs] second massive position, -1 when none */
    zig_tables zig;
} synth_shared;

/* One layer's tensors (owned) and what the writer needs to reference. */
typedef struct synth_layer_out {
    uint16_t *q, *k, *v;
    float *sinks;            /* NULL without sinks */
    float q_amax, k_amax, v_amax;
    char name_q[32], name_k[32], name_v[32], name_sinks[40];
    int64_t shape_q[3], shape_kv[3], shape_sinks[1];
} synth_layer_out;

/* Per-thread scratch, allocated before the parallel loop. */
typedef struct synth_scratch {
    float *k_base, *k_sd, *k_sink, *v_sd; /* [hkv][d] */
    float *q_base, *q_sd;                 /* [hq][d] */
    float *z;                             /* [max(hq, hkv)][d] */
    float *x;                             /* [max(hq, hkv)][d] */
    int *chan;                            /* [d] channel shuffle */
} synth_scratch;

typedef struct synth_job {
    const synth_shared *sh;
    synth_layer_out *layers;
    synth_scratch *scratch;               /* [n_threads] */
} synth_job;

/* Fills dir[0..d) with a random unit vector supported on the channels where
 * mask[c] != 0 (Gaussian direction, normalized in fp64). */
static void random_direction(rng_xoshiro256 *r, const zig_tables *z, const unsigned char *mask,
                             int d, float *dir)
{
    double norm2 = 0.0;
    double tmp[SYNTH_MAX_D];
    for (int c = 0; c < d; c++) {
        tmp[c] = mask[c] ? normal(r, z) : 0.0;
        norm2 += tmp[c] * tmp[c];
    }
    const double inv = norm2 > 0.0 ? 1.0 / sqrt(norm2) : 0.0;
    for (int c = 0; c < d; c++) dir[c] = (float)(tmp[c] * inv);
}

/* Draws the per-kv-head parameters of one layer (k_base, k_sd, k_sink, v_sd)
 * and the per-query-head q_base, and the sink logits. Order of draws is part
 * of the output's definition. */
static void layer_params(const synth_shared *sh, rng_xoshiro256 *r, synth_scratch *s,
                         float *sinks)
{
    const synth_config *cfg = sh->cfg;
    const int d = cfg->d, half = d / 2, group = cfg->hq / cfg->hkv;
    const zig_tables *z = &sh->zig;
    unsigned char sink_mask[SYNTH_MAX_D], free_mask[SYNTH_MAX_D];
    float u[SYNTH_MAX_D], sdir[SYNTH_MAX_D];

    /* The sink direction lives on the SINK_ROPE_PAIRS lowest-frequency
     * pairs: channels half-P..half-1 and their partners d-P..d-1. */
    for (int c = 0; c < d; c++) {
        const int pair = c % half;
        sink_mask[c] = pair >= half - SINK_ROPE_PAIRS;
    }
    for (int g = 0; g < cfg->hkv; g++) {
        float *kb = s->k_base + (size_t)g * d, *ksd = s->k_sd + (size_t)g * d;
        float *ks = s->k_sink + (size_t)g * d, *vsd = s->v_sd + (size_t)g * d;
        /* Outlier channels: a partial Fisher-Yates shuffle of the non-sink
         * channels picks n_out distinct ones. */
        int n_free = 0;
        for (int c = 0; c < d; c++)
            if (!sink_mask[c]) s->chan[n_free++] = c;
        const int n_out =
            SYNTH_K_OUTLIERS_MIN +
            (int)rng_xoshiro_below(r, (uint64_t)(SYNTH_K_OUTLIERS_MAX - SYNTH_K_OUTLIERS_MIN + 1));
        for (int c = 0; c < d; c++) free_mask[c] = !sink_mask[c];
        for (int i = 0; i < n_out; i++) {
            const int j = i + (int)rng_xoshiro_below(r, (uint64_t)(n_free - i));
            const int t = s->chan[i];
            s->chan[i] = s->chan[j];
            s->chan[j] = t;
            free_mask[s->chan[i]] = 0;
        }
        /* Content direction u_g on the remaining channels, sink direction
         * s_g on the lowest-frequency pairs: orthogonal by construction. */
        random_direction(r, z, free_mask, d, u);
        random_direction(r, z, sink_mask, d, sdir);
        const double a_k = K_DIR_GAIN * sqrt((double)d);
        double typical2 = 0.0;
        for (int c = 0; c < d; c++) {
            ksd[c] = (float)exp(K_CHANNEL_LOG_SD * normal(r, z));
            vsd[c] = (float)exp(V_CHANNEL_LOG_SD * normal(r, z));
            kb[c] = (float)(a_k * u[c]);
        }
        for (int i = 0; i < n_out; i++) {
            const double mag = uniform_range(r, K_OUTLIER_GAIN_MIN, K_OUTLIER_GAIN_MAX);
            const double sign = (rng_xoshiro_next(r) >> 63) ? -1.0 : 1.0;
            kb[s->chan[i]] = (float)(sign * mag);
        }
        /* Expected squared norm of an ordinary key: base plus noise. */
        for (int c = 0; c < d; c++) typical2 += (double)kb[c] * kb[c] + (double)ksd[c] * ksd[c];
        /* Sink amplitude: |k_sink|^2 ~ typical2 + A^2 = RATIO^2 typical2. */
        const double a_sink =
            sqrt(typical2 * (SINK_KEY_NORM_RATIO * SINK_KEY_NORM_RATIO - 1.0));
        for (int c = 0; c < d; c++) ks[c] = (float)(a_sink * sdir[c]);
        /* Queries of this group: a_h u_g + b_h s_g, gains solved so that
         * sm_scale * q.k hits the target logits. */
        for (int j = 0; j < group; j++) {
            float *qb = s->q_base + (size_t)(g * group + j) * d;
            const double lam = uniform_range(r, HEAD_GAIN_MIN, HEAD_GAIN_MAX);
            const double mu = uniform_range(r, HEAD_GAIN_MIN, HEAD_GAIN_MAX);
            const double a_q = lam * LOCAL_LOGIT / (sh->sm_scale * a_k);
            const double b_q = mu * SINK_LOGIT / (sh->sm_scale * a_sink);
            float *qsd = s->q_sd + (size_t)(g * group + j) * d;
            for (int c = 0; c < d; c++) {
                qb[c] = (float)(a_q * u[c] + b_q * sdir[c]);
                qsd[c] = (float)Q_NOISE_SD;
            }
        }
    }
    if (sinks != NULL)
        for (int h = 0; h < cfg->hq; h++) sinks[h] = (float)(normal(r, z) + SINK_PARAM_MEAN);
}

/* Generates layer `item` into job->layers[item]; cannot fail (buffers and
 * scratch are allocated beforehand). */
static void synth_layer(void *ctx, int item, int thread)
{
    const synth_job *job = ctx;
    const synth_shared *sh = job->sh;
    const synth_config *cfg = sh->cfg;
    synth_layer_out *out = &job->layers[item];
    synth_scratch *s = &job->scratch[thread];
    const int d = cfg->d, half = d / 2, hq = cfg->hq, hkv = cfg->hkv;
    const zig_tables *z = &sh->zig;

    rng_xoshiro256 r;
    xoshiro_bulk bulk;
    xoshiro_seed(&r, cfg->seed, SYNTH_STREAM_LAYER0 + (uint64_t)item);
    xoshiro_bulk_seed(&bulk, &r);
    layer_params(sh, &r, s, out->sinks);

    const size_t kv_row = (size_t)hkv * d, q_row = (size_t)hq * d;
    for (int seq = 0; seq < cfg->n_seqs; seq++) {
        for (int64_t t = 0; t < sh->seq_kv; t++) {
            /* Absolute position: context tokens 0..c-1, new tokens c..c+n-1. */
            const float *cs = sh->cos_tab + (size_t)t * half;
            const float *sn = sh->sin_tab + (size_t)t * half;
            const float m = t == 0                   ? 1.0f
                            : t == sh->massive2[seq] ? (float)MASSIVE2_FRACTION
                                                     : 0.0f;
            const size_t row = (size_t)seq * (size_t)sh->seq_kv + (size_t)t;
            uint16_t *k_out = out->k + row * kv_row;
            uint16_t *v_out = out->v + row * kv_row;

            normal_fill(&bulk, &r, z, s->z, (int)kv_row);
            row_affine(s->x, s->k_base, s->k_sd, s->z, m != 0.0f ? s->k_sink : NULL, m, kv_row);
            for (int g = 0; g < hkv; g++) synth_rope_apply(s->x + (size_t)g * d, d, cs, sn);
            to_bf16(s->x, kv_row, k_out);

            normal_fill(&bulk, &r, z, s->z, (int)kv_row);
            row_scale(s->x, s->v_sd, s->z, m > 0.0f ? (float)V_MASSIVE_SCALE : 1.0f, kv_row);
            to_bf16(s->x, kv_row, v_out);

            if (t < cfg->context) continue;
            const size_t qrow = (size_t)seq * (size_t)cfg->seq_len + (size_t)(t - cfg->context);
            uint16_t *q_out = out->q + qrow * q_row;
            normal_fill(&bulk, &r, z, s->z, (int)q_row);
            row_affine(s->x, s->q_base, s->q_sd, s->z, NULL, 0.0f, q_row);
            for (int h = 0; h < hq; h++) synth_rope_apply(s->x + (size_t)h * d, d, cs, sn);
            to_bf16(s->x, q_row, q_out);
        }
    }
    if (cfg->write_scales) {
        out->q_amax = bf16_amax(out->q, (size_t)sh->tq * q_row);
        out->k_amax = bf16_amax(out->k, (size_t)sh->tkv * kv_row);
        out->v_amax = bf16_amax(out->v, (size_t)sh->tkv * kv_row);
    }
}

/* ---- metadata ---------------------------------------------------------- */

/* A growing string; oom latches on the first failed allocation. */
typedef struct strbuf {
    char *p;
    size_t len, cap;
    int oom;
} strbuf;

/* Appends printf-style text to b. */
static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const size_t room = b->cap - b->len;
        const int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->p != NULL && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + (size_t)n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

/* Resets b to the empty string (keeps the allocation). */
static void sb_reset(strbuf *b)
{
    b->len = 0;
    if (b->p) b->p[0] = '\0';
}

/* Adds key = b's text to the writer; PG_ERR_NOMEM when b ran out of memory. */
static pg_status sb_meta(st_writer *w, const char *key, strbuf *b, pg_err *err)
{
    if (b->oom || b->p == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "synth: out of memory building metadata '%s'", key);
    return st_writer_add_meta(w, key, b->p, err);
}

/* Which of a layer's scales a metadata array holds. */
typedef enum scale_kind { SCALE_Q, SCALE_K, SCALE_V } scale_kind;

/* Writes every metadata entry of the capture. */
static pg_status write_metadata(st_writer *w, const synth_shared *sh,
                                const synth_layer_out *layers, pg_err *err)
{
    const synth_config *cfg = sh->cfg;
    strbuf b = {0};
    pg_status st = st_writer_add_meta(w, "format", CAPTURE_FORMAT_V1, err);

    if (st == PG_OK) {
        sb_reset(&b);
        if (cfg->model != NULL) sb_printf(&b, "%s", cfg->model);
        else sb_printf(&b, "synth:%s", cfg->preset ? cfg->preset : "custom");
        st = sb_meta(w, "model", &b, err);
    }
    for (int which = 0; which < 2 && st == PG_OK; which++) {
        sb_reset(&b);
        sb_printf(&b, "[");
        for (int i = 0; i < cfg->n_seqs; i++)
            sb_printf(&b, "%s%lld", i ? "," : "",
                      (long long)(which == 0 ? cfg->seq_len : sh->seq_kv));
        sb_printf(&b, "]");
        st = sb_meta(w, which == 0 ? "seq_q" : "seq_kv", &b, err);
    }
    if (st == PG_OK) {
        sb_reset(&b);
        sb_printf(&b, "%.9g", (double)sh->sm_scale);
        st = sb_meta(w, "sm_scale", &b, err);
    }
    if (st == PG_OK) {
        sb_reset(&b);
        sb_printf(&b, "[");
        for (int l = 0; l < cfg->n_layers; l++) {
            const int win = (cfg->window > 0 && (!cfg->window_even_only || l % 2 == 0))
                                ? cfg->window : 0;
            sb_printf(&b, "%s%d", l ? "," : "", win);
        }
        sb_printf(&b, "]");
        st = sb_meta(w, "sliding_window", &b, err);
    }
    if (st == PG_OK) {
        sb_reset(&b);
        sb_printf(&b, "%d", cfg->block_size);
        st = sb_meta(w, "block_size", &b, err);
    }
    static const char *const scale_keys[] = {"q_scale", "k_scale", "v_scale"};
    for (int kind = SCALE_Q; kind <= SCALE_V && cfg->write_scales && st == PG_OK; kind++) {
        sb_reset(&b);
        sb_printf(&b, "[");
        for (int l = 0; l < cfg->n_layers; l++) {
            const float amax = kind == SCALE_Q ? layers[l].q_amax
                               : kind == SCALE_K ? layers[l].k_amax : layers[l].v_amax;
            sb_printf(&b, "%s%.9g", l ? "," : "", (double)fp8_e4m3_calibrated_scale(amax));
        }
        sb_printf(&b, "]");
        st = sb_meta(w, scale_keys[kind], &b, err);
    }
    free(b.p);
    return st;
}

/* ---- synth_write ------------------------------------------------------- */

/* malloc that records PG_ERR_NOMEM naming what failed. */
static void *synth_alloc(size_t n, const char *what, pg_status *st, pg_err *err)
{
    if (*st != PG_OK) return NULL;
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        *st = pg_fail(err, PG_ERR_NOMEM, "synth: cannot allocate %zu bytes for %s", n, what);
    return p;
}

/* Draws each sequence's second massive-token position from the layout
 * stream: uniform in [1, SYNTH_MASSIVE_MAX_POS), -1 when beyond the sequence. */
static void draw_massive2(const synth_config *cfg, int64_t seq_kv, int *massive2)
{
    rng_xoshiro256 r;
    xoshiro_seed(&r, cfg->seed, SYNTH_STREAM_LAYOUT);
    for (int s = 0; s < cfg->n_seqs; s++) {
        const int pos = 1 + (int)rng_xoshiro_below(&r, (uint64_t)(SYNTH_MASSIVE_MAX_POS - 1));
        massive2[s] = pos < seq_kv ? pos : -1;
    }
}

pg_status synth_check(const synth_config *cfg, const char *path, pg_err *err)
{
    pg_status st = synth_validate(cfg, err);
    if (st != PG_OK) return st;
    if (path == NULL || path[0] == '\0')
        return pg_fail(err, PG_ERR_USAGE, "synth: no output path (-o)");
    return PG_OK;
}

pg_status synth_write(const synth_config *cfg, const char *path, int n_threads, pg_err *err)
{
    pg_status st = synth_check(cfg, path, err);
    if (st != PG_OK) return st;

    synth_config c = *cfg;
    if (c.rope_theta == 0.0) c.rope_theta = SYNTH_DEFAULT_ROPE_THETA;
    const int d = c.d, half = d / 2, L = c.n_layers;
    synth_shared sh = {
        .cfg = &c,
        .seq_kv = (int64_t)c.context + c.seq_len,
        .sm_scale = (float)(1.0 / sqrt((double)d)),
    };
    sh.tq = (int64_t)c.n_seqs * c.seq_len;
    sh.tkv = (int64_t)c.n_seqs * sh.seq_kv;
    zig_init(&sh.zig);

    if (n_threads > L) n_threads = L;
    if (n_threads < 1) n_threads = 1;
    const int hmax = c.hq > c.hkv ? c.hq : c.hkv;

    float *cos_tab = synth_alloc((size_t)sh.seq_kv * half * sizeof(float), "RoPE table", &st, err);
    float *sin_tab = synth_alloc((size_t)sh.seq_kv * half * sizeof(float), "RoPE table", &st, err);
    int *massive2 = synth_alloc((size_t)c.n_seqs * sizeof(int), "layout", &st, err);
    synth_layer_out *layers = NULL;
    synth_scratch *scratch = NULL;
    if (st == PG_OK) layers = calloc((size_t)L, sizeof *layers);
    if (st == PG_OK && layers == NULL)
        st = pg_fail(err, PG_ERR_NOMEM, "synth: cannot allocate %d layers", L);
    if (st == PG_OK) scratch = calloc((size_t)n_threads, sizeof *scratch);
    if (st == PG_OK && scratch == NULL)
        st = pg_fail(err, PG_ERR_NOMEM, "synth: cannot allocate scratch");

    const size_t q_elems = (size_t)sh.tq * c.hq * d, kv_elems = (size_t)sh.tkv * c.hkv * d;
    for (int l = 0; l < L && st == PG_OK; l++) {
        layers[l].q = synth_alloc(q_elems * sizeof(uint16_t), "q", &st, err);
        layers[l].k = synth_alloc(kv_elems * sizeof(uint16_t), "k", &st, err);
        layers[l].v = synth_alloc(kv_elems * sizeof(uint16_t), "v", &st, err);
        if (c.sinks) layers[l].sinks = synth_alloc((size_t)c.hq * sizeof(float), "sinks", &st, err);
    }
    for (int t = 0; t < n_threads && st == PG_OK; t++) {
        const size_t kvd = (size_t)c.hkv * d * sizeof(float);
        scratch[t].k_base = synth_alloc(kvd, "scratch", &st, err);
        scratch[t].k_sd = synth_alloc(kvd, "scratch", &st, err);
        scratch[t].k_sink = synth_alloc(kvd, "scratch", &st, err);
        scratch[t].v_sd = synth_alloc(kvd, "scratch", &st, err);
        scratch[t].q_base = synth_alloc((size_t)c.hq * d * sizeof(float), "scratch", &st, err);
        scratch[t].q_sd = synth_alloc((size_t)c.hq * d * sizeof(float), "scratch", &st, err);
        scratch[t].z = synth_alloc((size_t)hmax * d * sizeof(float), "scratch", &st, err);
        scratch[t].x = synth_alloc((size_t)hmax * d * sizeof(float), "scratch", &st, err);
        scratch[t].chan = synth_alloc((size_t)d * sizeof(int), "scratch", &st, err);
    }

    if (st == PG_OK) {
        /* RoPE cos/sin once per position of the (shared) sequence layout. */
        for (int64_t p = 0; p < sh.seq_kv; p++)
            synth_rope_angles(d, c.rope_theta, p, cos_tab + (size_t)p * half,
                              sin_tab + (size_t)p * half);
        draw_massive2(&c, sh.seq_kv, massive2);
        sh.cos_tab = cos_tab;
        sh.sin_tab = sin_tab;
        sh.massive2 = massive2;
        synth_job job = {.sh = &sh, .layers = layers, .scratch = scratch};
        st = parallel_for(L, n_threads, synth_layer, &job, err);
    }

    st_writer *w = NULL;
    if (st == PG_OK) st = st_writer_create(&w, err);
    for (int l = 0; l < L && st == PG_OK; l++) {
        synth_layer_out *o = &layers[l];
        snprintf(o->name_q, sizeof o->name_q, "layers.%d.q", l);
        snprintf(o->name_k, sizeof o->name_k, "layers.%d.k", l);
        snprintf(o->name_v, sizeof o->name_v, "layers.%d.v", l);
        snprintf(o->name_sinks, sizeof o->name_sinks, "layers.%d.sinks", l);
        o->shape_q[0] = sh.tq;
        o->shape_q[1] = c.hq;
        o->shape_q[2] = d;
        o->shape_kv[0] = sh.tkv;
        o->shape_kv[1] = c.hkv;
        o->shape_kv[2] = d;
        o->shape_sinks[0] = c.hq;
        st = st_writer_add_tensor(w, o->name_q, ST_BF16, 3, o->shape_q, o->q, err);
        if (st == PG_OK)
            st = st_writer_add_tensor(w, o->name_k, ST_BF16, 3, o->shape_kv, o->k, err);
        if (st == PG_OK)
            st = st_writer_add_tensor(w, o->name_v, ST_BF16, 3, o->shape_kv, o->v, err);
        if (st == PG_OK && c.sinks)
            st = st_writer_add_tensor(w, o->name_sinks, ST_F32, 1, o->shape_sinks, o->sinks, err);
    }
    if (st == PG_OK) st = write_metadata(w, &sh, layers, err);
    if (st == PG_OK) st = st_writer_write(w, path, err);
    st_writer_free(w);

    for (int l = 0; layers != NULL && l < L; l++) {
        free(layers[l].q);
        free(layers[l].k);
        free(layers[l].v);
        free(layers[l].sinks);
    }
    for (int t = 0; scratch != NULL && t < n_threads; t++) {
        free(scratch[t].k_base);
        free(scratch[t].k_sd);
        free(scratch[t].k_sink);
        free(scratch[t].v_sd);
        free(scratch[t].q_base);
        free(scratch[t].q_sd);
        free(scratch[t].z);
        free(scratch[t].x);
        free(scratch[t].chan);
    }
    free(layers);
    free(scratch);
    free(cos_tab);
    free(sin_tab);
    free(massive2);
    return st;
}
