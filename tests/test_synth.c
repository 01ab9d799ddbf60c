/*
 * test_synth.c: harness/capture/synth.c and `precgate synth`.
 *
 * The structure tests measure the written file (through capture_open) the
 * way one would measure a real capture, with thresholds set well inside what
 * the generator's constants imply and well outside what unstructured
 * Gaussian data would give, so that each of them fails when its property is
 * removed from the generator.
 */
#include "harness/capture/synth.h"

#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/capture/capture.h"
#include "harness/cli/cli.h"
#include "kernels/numerics.h"
#include "kernels/parallel.h"
#include "testutil.h"

/* ---- helpers ------------------------------------------------------------ */

/* Positions per sequence that may hold a massive token, skipped where a
 * property of the ordinary tokens is measured. */
#define MASSIVE_SKIP SYNTH_MASSIVE_MAX_POS

/* Most temporary directories one test makes. */
#define MAX_TEMP_DIRS 16
static char *temp_dirs[MAX_TEMP_DIRS];
static int n_temp_dirs;

/* Removes the directories temp_file made (at the test process's exit). */
static void remove_temp_dirs(void)
{
    for (int i = 0; i < n_temp_dirs; i++) {
        tu_rmtree(temp_dirs[i]);
        free(temp_dirs[i]);
    }
    n_temp_dirs = 0;
}

/* A fresh path NAME inside a new temporary directory, removed when the
 * test's process exits (caller frees the path). */
static char *temp_file(const char *name)
{
    char *dir = tu_tempdir();
    cr_assert_lt(n_temp_dirs, MAX_TEMP_DIRS);
    if (n_temp_dirs == 0) atexit(remove_temp_dirs);
    temp_dirs[n_temp_dirs++] = dir;
    return tu_join(dir, name);
}

/* The preset with the given sweep shape. */
static synth_config make_cfg(const char *preset, int layers, int seqs, int seq_len, int context,
                             uint64_t seed)
{
    synth_config c;
    pg_err err = {0};
    cr_assert_eq(synth_preset(preset, &c, &err), PG_OK, "%s", err.msg);
    c.n_layers = layers;
    c.n_seqs = seqs;
    c.seq_len = seq_len;
    c.context = context;
    c.seed = seed;
    return c;
}

/* Writes cfg to a new temporary file and returns its path (caller frees). */
static char *write_synth(const synth_config *cfg)
{
    char *path = temp_file("synth.safetensors");
    pg_err err = {0};
    cr_assert_eq(synth_write(cfg, path, parallel_default_threads(), &err), PG_OK,
                 "synth_write: %s", err.msg);
    return path;
}

/* Writes cfg and opens it with capture_open. */
static capture *open_synth(const synth_config *cfg)
{
    char *path = write_synth(cfg);
    capture *cap = NULL;
    pg_err err = {0};
    cr_assert_eq(capture_open(path, &cap, &err), PG_OK, "capture_open: %s", err.msg);
    free(path);
    return cap;
}

/* The whole file at path; *len its size (caller frees). */
static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    cr_assert_geq(n, 0);
    rewind(f);
    unsigned char *buf = malloc((size_t)n + 1);
    cr_assert_not_null(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* Element c of head h of token t in a [T, H, D] bf16 tensor, as double. */
static double at(const uint16_t *x, int64_t t, int h, int c, int hn, int d)
{
    return bf16_to_f32(x[((size_t)t * hn + h) * d + c]);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of x[0..n) (sorts x). */
static double median(double *x, size_t n)
{
    qsort(x, n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* Euclidean norm of head h of token t. */
static double head_norm(const uint16_t *x, int64_t t, int h, int hn, int d)
{
    double s = 0.0;
    for (int c = 0; c < d; c++) {
        double v = at(x, t, h, c, hn, d);
        s += v * v;
    }
    return sqrt(s);
}

/* Attention logits sm_scale * q.k of query token qt (head h) of sequence
 * seq against its keys 0..c+j (causal, no window), into logit[]; returns
 * the key count. Sequences all have the same layout here. */
static int logits_of(const capture *cap, const capture_layer *L, int seq, int j, int h,
                     double *logit)
{
    const int64_t seq_kv = cap->seq_kv[seq], ctx = seq_kv - cap->seq_q[seq];
    const int64_t qt = (int64_t)seq * cap->seq_q[seq] + j, k0 = (int64_t)seq * seq_kv;
    const int g = h / (L->hq / L->hkv);
    const int n = (int)(ctx + j + 1);
    for (int t = 0; t < n; t++) {
        double s = 0.0;
        for (int c = 0; c < L->d; c++)
            s += at(L->q, qt, h, c, L->hq, L->d) * at(L->k, k0 + t, g, c, L->hkv, L->d);
        logit[t] = L->sm_scale * s;
    }
    return n;
}

/* ---- determinism -------------------------------------------------------- */

Test(synth, same_seed_same_bytes_different_seed_differs)
{
    synth_config c = make_cfg("gpt-oss-120b", 3, 2, 48, 16, 42);
    c.write_scales = 1;
    setenv("PRECGATE_THREADS", "1", 1);
    char *a = write_synth(&c);
    setenv("PRECGATE_THREADS", "3", 1); /* layers on other threads: same bytes */
    char *b = write_synth(&c);
    c.seed = 43;
    char *d = write_synth(&c);
    size_t na, nb, nd;
    unsigned char *ba = slurp(a, &na), *bb = slurp(b, &nb), *bd = slurp(d, &nd);
    cr_assert_eq(na, nb);
    cr_assert(memcmp(ba, bb, na) == 0, "same seed gave different bytes");
    /* The data differ, not just the scales (whose text, hence the header
     * length, may differ too): compare the last 1 KiB, the last layer's v. */
    cr_assert(na > 1024 && nd > 1024);
    cr_assert(memcmp(ba + na - 1024, bd + nd - 1024, 1024) != 0,
              "different seeds gave the same data");
    free(ba), free(bb), free(bd), free(a), free(b), free(d);
}

/* FNV-1a 64 (Fowler, Noll, Vo) of n bytes, continuing from h. */
static uint64_t fnv1a64(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* The generator's output is part of the benchmark's definition: a capture
 * synthesized today must be the one synthesized by the next version, on any
 * machine and build (the AVX2 and the scalar paths give the same bits).
 * This pins the tensor data of a small capture (not the header, whose
 * formatting belongs to the writer). A deliberate change to the generator
 * updates the constant, and says so. */
#define SYNTH_GOLDEN_FNV 0x224a6fa672abc5bcull

Test(synth, golden_tensor_checksum)
{
    synth_config c = make_cfg("gpt-oss-120b", 2, 2, 24, 8, 2024);
    capture *cap = open_synth(&c);
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a offset basis */
    for (int l = 0; l < cap->n_layers; l++) {
        const capture_layer *L = &cap->layers[l];
        h = fnv1a64(h, L->q, (size_t)cap->tq * L->hq * L->d * 2);
        h = fnv1a64(h, L->k, (size_t)cap->tkv * L->hkv * L->d * 2);
        h = fnv1a64(h, L->v, (size_t)cap->tkv * L->hkv * L->d * 2);
        h = fnv1a64(h, L->sinks, (size_t)L->hq * sizeof(float));
    }
    cr_assert_eq(h, SYNTH_GOLDEN_FNV,
                 "synthetic data changed: FNV-1a 0x%016llx, pinned 0x%016llx (update the "
                 "constant only for a deliberate change to the generator)",
                 (unsigned long long)h, (unsigned long long)SYNTH_GOLDEN_FNV);
    capture_close(cap);
}

Test(synth, layers_are_different_streams)
{
    synth_config c = make_cfg("llama-3-8b", 2, 1, 32, 0, 5);
    capture *cap = open_synth(&c);
    const size_t n = (size_t)cap->tq * cap->layers[0].hq * cap->layers[0].d;
    cr_assert(memcmp(cap->layers[0].q, cap->layers[1].q, n * 2) != 0);
    capture_close(cap);
}

/* ---- format ------------------------------------------------------------- */

Test(synth, gpt_oss_loads_through_capture_open)
{
    synth_config c = make_cfg("gpt-oss-120b", 3, 2, 40, 24, 1);
    c.write_scales = 1;
    capture *cap = open_synth(&c);
    cr_assert_eq(cap->n_layers, 3);
    cr_assert_eq(cap->n_seqs, 2);
    cr_assert_eq(cap->tq, 80);
    cr_assert_eq(cap->tkv, 128);
    for (int s = 0; s < 2; s++) {
        cr_assert_eq(cap->seq_q[s], 40);
        cr_assert_eq(cap->seq_kv[s], 64);
    }
    cr_assert_eq(cap->block_size, 16);
    cr_assert_str_eq(cap->model, "synth:gpt-oss-120b");
    static const int windows[3] = {128, 0, 128};
    for (int l = 0; l < 3; l++) {
        const capture_layer *L = &cap->layers[l];
        cr_assert_eq(L->hq, 64);
        cr_assert_eq(L->hkv, 8);
        cr_assert_eq(L->d, 64);
        cr_assert_eq(L->window, windows[l], "layer %d window %d", l, L->window);
        cr_assert_float_eq(L->sm_scale, 0.125f, 0.0f);
        cr_assert_not_null(L->sinks);
        double mean = 0.0;
        for (int h = 0; h < 64; h++) {
            cr_assert(isfinite(L->sinks[h]));
            mean += L->sinks[h] / 64.0;
        }
        cr_assert(mean > -1.0 && mean < 2.0, "sink logits mean %g", mean);
        cr_assert_neq(L->sinks[0], L->sinks[1]);
        /* Scales: amax / 448 of the tensor as written, round-tripped exactly. */
        cr_assert_eq(L->has_scales, 1);
        float qs = fp8_e4m3_calibrated_scale(bf16_amax(L->q, (size_t)80 * 64 * 64));
        float ks = fp8_e4m3_calibrated_scale(bf16_amax(L->k, (size_t)128 * 8 * 64));
        float vs = fp8_e4m3_calibrated_scale(bf16_amax(L->v, (size_t)128 * 8 * 64));
        cr_assert(L->q_scale == qs && L->k_scale == ks && L->v_scale == vs,
                  "layer %d scales %g %g %g, expected %g %g %g", l, L->q_scale, L->k_scale,
                  L->v_scale, qs, ks, vs);
        cr_assert(L->k_scale > L->v_scale, "the K outliers should set a larger scale");
    }
    capture_close(cap);
}

Test(synth, llama_preset_and_overrides)
{
    synth_config c = make_cfg("llama-3-8b", 2, 3, 20, 0, 9);
    c.block_size = 32;
    c.model = "my model";
    capture *cap = open_synth(&c);
    cr_assert_eq(cap->n_layers, 2);
    cr_assert_eq(cap->tq, 60);
    cr_assert_eq(cap->tkv, 60);
    cr_assert_eq(cap->block_size, 32);
    cr_assert_str_eq(cap->model, "my model");
    for (int l = 0; l < 2; l++) {
        const capture_layer *L = &cap->layers[l];
        cr_assert_eq(L->hq, 32);
        cr_assert_eq(L->hkv, 8);
        cr_assert_eq(L->d, 128);
        cr_assert_eq(L->window, 0);
        cr_assert_null(L->sinks);
        cr_assert_eq(L->has_scales, 0);
        cr_assert_float_eq(L->sm_scale, (float)(1.0 / sqrt(128.0)), 0.0f);
    }
    capture_close(cap);
}

Test(synth, window_and_sink_options)
{
    synth_config c = make_cfg("gpt-oss-120b", 4, 1, 16, 0, 3);
    c.window = 64;
    c.sinks = 0;
    capture *cap = open_synth(&c);
    static const int windows[4] = {64, 0, 64, 0};
    for (int l = 0; l < 4; l++) {
        cr_assert_eq(cap->layers[l].window, windows[l]);
        cr_assert_null(cap->layers[l].sinks);
    }
    capture_close(cap);
    c = make_cfg("llama-3-8b", 2, 1, 16, 0, 3);
    c.window = 8; /* a preset without windows: every layer */
    cap = open_synth(&c);
    cr_assert_eq(cap->layers[0].window, 8);
    cr_assert_eq(cap->layers[1].window, 8);
    capture_close(cap);
}

/* ---- structure ---------------------------------------------------------- */

/* KIVI / KVQuant: a few key channels per kv head with a much larger mean
 * magnitude than the median channel, in every layer. (Partners of a RoPE
 * pair share the magnitude after rotation, hence up to twice the count.) */
Test(synth, k_has_outlier_channels)
{
    synth_config c = make_cfg("gpt-oss-120b", 2, 2, 192, 64, 11);
    capture *cap = open_synth(&c);
    for (int l = 0; l < cap->n_layers; l++) {
        const capture_layer *L = &cap->layers[l];
        for (int g = 0; g < L->hkv; g++) {
            double mean_abs[SYNTH_MAX_D], sorted[SYNTH_MAX_D];
            for (int ch = 0; ch < L->d; ch++) {
                double s = 0.0;
                for (int64_t t = 0; t < cap->tkv; t++) s += fabs(at(L->k, t, g, ch, L->hkv, L->d));
                mean_abs[ch] = sorted[ch] = s / (double)cap->tkv;
            }
            const double med = median(sorted, (size_t)L->d);
            int n_big = 0;
            double top = 0.0;
            for (int ch = 0; ch < L->d; ch++) {
                n_big += mean_abs[ch] >= 5.0 * med;
                top = fmax(top, mean_abs[ch]);
            }
            cr_log_info("layer %d kv head %d: %d outlier channels, top %.2f, median %.3f", l, g,
                        n_big, top, med);
            cr_assert(n_big >= SYNTH_K_OUTLIERS_MIN && n_big <= 2 * SYNTH_K_OUTLIERS_MAX,
                      "layer %d kv head %d: %d channels >= 5x the median %g", l, g, n_big, med);
        }
    }
    capture_close(cap);
}

/* Massive activations / attention sink: each sequence's first key has a
 * norm far above the median key, its value a norm far below the median. */
Test(synth, first_token_is_massive_with_small_value)
{
    synth_config c = make_cfg("gpt-oss-120b", 2, 3, 96, 32, 12);
    capture *cap = open_synth(&c);
    for (int l = 0; l < cap->n_layers; l++) {
        const capture_layer *L = &cap->layers[l];
        for (int g = 0; g < L->hkv; g++) {
            double *kn = malloc((size_t)cap->tkv * sizeof *kn);
            double *vn = malloc((size_t)cap->tkv * sizeof *vn);
            cr_assert(kn && vn);
            for (int64_t t = 0; t < cap->tkv; t++) {
                kn[t] = head_norm(L->k, t, g, L->hkv, L->d);
                vn[t] = head_norm(L->v, t, g, L->hkv, L->d);
            }
            double first_k[3], first_v[3];
            for (int s = 0; s < 3; s++) {
                first_k[s] = kn[(int64_t)s * cap->seq_kv[s]];
                first_v[s] = vn[(int64_t)s * cap->seq_kv[s]];
            }
            const double mk = median(kn, (size_t)cap->tkv), mv = median(vn, (size_t)cap->tkv);
            cr_log_info("layer %d kv head %d: |k0| / median %.2f, |v0| / median %.3f", l, g,
                        first_k[0] / mk, first_v[0] / mv);
            for (int s = 0; s < 3; s++) {
                cr_assert(first_k[s] >= 3.0 * mk, "layer %d head %d seq %d: |k0| %g, median %g",
                          l, g, s, first_k[s], mk);
                cr_assert(first_v[s] <= 0.2 * mv, "layer %d head %d seq %d: |v0| %g, median %g",
                          l, g, s, first_v[s], mv);
            }
            free(kn);
            free(vn);
        }
    }
    capture_close(cap);
}

/* Queries correlated with keys: softmax is peaked (entropy well below the
 * uniform log n), the first token draws a large share (the sink), and the
 * logit at distance 0 beats the far keys (RoPE recency), which also checks
 * that q and k sit at the same absolute positions (context > 0 here). */
Test(synth, attention_is_peaked_with_sink_and_recency)
{
    synth_config c = make_cfg("gpt-oss-120b", 2, 1, 128, 128, 13);
    capture *cap = open_synth(&c);
    const capture_layer *L = &cap->layers[1]; /* full attention */
    double logit[256], ent_ratio = 0.0, sink_share = 0.0, uniform_share = 0.0;
    double near = 0.0, far = 0.0;
    int n_rows = 0, n_far = 0;
    for (int h = 0; h < L->hq; h += 4) {
        for (int j = 0; j < 128; j += 8) {
            const int n = logits_of(cap, L, 0, j, h, logit);
            double mx = -INFINITY, z = 0.0, ent = 0.0;
            for (int t = 0; t < n; t++) mx = fmax(mx, logit[t]);
            for (int t = 0; t < n; t++) z += exp(logit[t] - mx);
            for (int t = 0; t < n; t++) {
                const double p = exp(logit[t] - mx) / z;
                if (p > 0) ent -= p * log(p);
            }
            ent_ratio += ent / log((double)n);
            sink_share += exp(logit[0] - mx) / z;
            uniform_share += 1.0 / n;
            near += logit[n - 1];
            for (int t = 16; t < n - 64; t++, n_far++) far += logit[t];
            n_rows++;
        }
    }
    ent_ratio /= n_rows;
    sink_share /= n_rows;
    uniform_share /= n_rows;
    near /= n_rows;
    far /= n_far;
    cr_log_info("entropy ratio %.3f, sink share %.3f (uniform %.4f), logit near %.2f far %.2f",
                ent_ratio, sink_share, uniform_share, near, far);
    cr_assert(ent_ratio < 0.85, "normalized entropy %g (uniform = 1)", ent_ratio);
    cr_assert(sink_share > 10.0 * uniform_share, "first-token share %g, uniform %g", sink_share,
              uniform_share);
    cr_assert(near > far + 1.0, "mean logit at distance 0: %g, at distance > 64: %g", near, far);
    capture_close(cap);
}

/* Un-rotating the file's keys at their absolute positions (context tokens
 * 0..c-1, new tokens c..c+n-1) recovers the fixed pre-RoPE channels: the
 * per-channel signed means of the context part and of the new part agree.
 * Shifting the new tokens' positions (as if they restarted at 0) breaks it,
 * which shows the check can tell. */
Test(synth, k_roped_at_absolute_positions)
{
    synth_config c = make_cfg("gpt-oss-120b", 1, 1, 96, 96, 14);
    const double theta = c.rope_theta;
    capture *cap = open_synth(&c);
    const capture_layer *L = &cap->layers[0];
    const int d = L->d;
    for (int shift = 0; shift <= 1; shift++) {
        double worst = 0.0;
        for (int g = 0; g < L->hkv; g++) {
            double mean[2][SYNTH_MAX_D] = {{0}};
            int count[2] = {0, 0};
            for (int64_t t = MASSIVE_SKIP; t < cap->tkv; t++) {
                float x[SYNTH_MAX_D], cs[SYNTH_MAX_D / 2], sn[SYNTH_MAX_D / 2];
                for (int ch = 0; ch < d; ch++) x[ch] = (float)at(L->k, t, g, ch, L->hkv, d);
                const int part = t >= 96;
                const int64_t pos = (shift && part) ? t - 96 : t;
                synth_rope_angles(d, theta, pos, cs, sn);
                for (int i = 0; i < d / 2; i++) sn[i] = -sn[i]; /* inverse rotation */
                synth_rope_apply(x, d, cs, sn);
                for (int ch = 0; ch < d; ch++) mean[part][ch] += x[ch];
                count[part]++;
            }
            for (int ch = 0; ch < d; ch++)
                worst = fmax(worst, fabs(mean[0][ch] / count[0] - mean[1][ch] / count[1]));
        }
        cr_log_info("positions %s: worst channel-mean difference %.3f",
                    shift ? "shifted" : "absolute", worst);
        if (shift == 0)
            cr_assert(worst < 2.0, "absolute positions: channel means differ by %g", worst);
        else
            cr_assert(worst > 4.0, "shifted positions should break it, worst %g", worst);
    }
    capture_close(cap);
}

/* Values: Gaussian per channel (kurtosis ~3) with channel scales that vary. */
Test(synth, values_gaussian_with_channel_scales)
{
    synth_config c = make_cfg("llama-3-8b", 1, 2, 256, 0, 15);
    capture *cap = open_synth(&c);
    const capture_layer *L = &cap->layers[0];
    double kurt_sum = 0.0, sd_min = INFINITY, sd_max = 0.0;
    int n_ch = 0;
    for (int g = 0; g < L->hkv; g++) {
        for (int ch = 0; ch < L->d; ch++) {
            double s2 = 0.0, s4 = 0.0;
            int n = 0;
            for (int64_t t = 0; t < cap->tkv; t++) {
                if (t % 256 < MASSIVE_SKIP) continue; /* the massive tokens */
                const double v = at(L->v, t, g, ch, L->hkv, L->d);
                s2 += v * v;
                s4 += v * v * v * v;
                n++;
            }
            const double var = s2 / n;
            kurt_sum += (s4 / n) / (var * var);
            sd_min = fmin(sd_min, sqrt(var));
            sd_max = fmax(sd_max, sqrt(var));
            n_ch++;
        }
    }
    const double kurt = kurt_sum / n_ch;
    cr_log_info("value kurtosis %.3f, channel sd [%.3f, %.3f]", kurt, sd_min, sd_max);
    cr_assert(kurt > 2.8 && kurt < 3.2, "mean per-channel kurtosis %g (Gaussian: 3)", kurt);
    cr_assert(sd_min > 0.2 && sd_max < 5.0, "channel sd in [%g, %g]", sd_min, sd_max);
    cr_assert(sd_max > 1.5 * sd_min, "channel sd should vary: [%g, %g]", sd_min, sd_max);
    capture_close(cap);
}

/* ---- RoPE helpers ------------------------------------------------------- */

/* Dot product of x[0..d) and y[0..d) in double. */
static double dot(const float *x, const float *y, int d)
{
    double s = 0.0;
    for (int i = 0; i < d; i++) s += (double)x[i] * y[i];
    return s;
}

/* a rotated at position p into out. */
static void rope_at(const float *a, int d, double theta, int64_t p, float *out)
{
    float cs[SYNTH_MAX_D / 2], sn[SYNTH_MAX_D / 2];
    memcpy(out, a, (size_t)d * sizeof *out);
    synth_rope_angles(d, theta, p, cs, sn);
    synth_rope_apply(out, d, cs, sn);
}

Test(rope, dot_depends_only_on_relative_position)
{
    enum { D = 64 };
    float a[D], b[D], qa[D], kb[D];
    for (int i = 0; i < D; i++) {
        a[i] = (float)sin(1.0 + i * 0.37);
        b[i] = (float)cos(0.5 + i * 0.91);
    }
    const double theta = 150000.0;
    static const int64_t rel[] = {0, 1, 3, 17, 200};
    double at_rel[5];
    for (int r = 0; r < 5; r++) {
        double ref = 0.0;
        static const int64_t base[] = {0, 5, 300, 4000, 8000};
        for (int k = 0; k < 5; k++) {
            rope_at(a, D, theta, base[k] + rel[r], qa);
            rope_at(b, D, theta, base[k], kb);
            const double v = dot(qa, kb, D);
            if (k == 0) ref = v;
            cr_assert(fabs(v - ref) < 1e-4 * sqrt(dot(a, a, D) * dot(b, b, D)),
                      "m - n = %lld: dot %g at n = %lld, %g at n = 0", (long long)rel[r], v,
                      (long long)base[k], ref);
        }
        at_rel[r] = ref;
    }
    /* ... and it does depend on m - n (a no-op rotation would pass the above). */
    for (int r = 1; r < 5; r++)
        cr_assert(fabs(at_rel[r] - at_rel[0]) > 1e-2, "dot at m - n = %lld equals m - n = 0",
                  (long long)rel[r]);
}

Test(rope, neox_pairs_preserve_norm)
{
    enum { D = 8 };
    float cs[D / 2], sn[D / 2];
    synth_rope_angles(D, 10000.0, 1, cs, sn);
    /* Pair 0 has frequency 1: angle = 1 radian at position 1. */
    cr_assert_float_eq(cs[0], (float)cos(1.0), 0.0f);
    cr_assert_float_eq(sn[0], (float)sin(1.0), 0.0f);
    cr_assert_float_eq(cs[1], (float)cos(pow(10000.0, -2.0 / D)), 0.0f);
    /* e_0 rotates within the pair (0, D/2), nothing else moves. */
    float x[D] = {1, 0, 0, 0, 0, 0, 0, 0};
    synth_rope_apply(x, D, cs, sn);
    cr_assert_float_eq(x[0], (float)cos(1.0), 1e-7f);
    cr_assert_float_eq(x[D / 2], (float)sin(1.0), 1e-7f);
    for (int i = 1; i < D; i++)
        if (i != D / 2) cr_assert_eq(x[i], 0.0f, "channel %d moved", i);
    /* Norm preserved at a large position. */
    float y[D] = {1, -2, 3, -4, 5, -6, 7, -8}, y0[D];
    memcpy(y0, y, sizeof y);
    synth_rope_angles(D, 10000.0, 123456, cs, sn);
    synth_rope_apply(y, D, cs, sn);
    cr_assert(fabs(dot(y, y, D) - dot(y0, y0, D)) < 1e-4 * dot(y0, y0, D));
    /* Position 0 is the identity. */
    synth_rope_angles(D, 10000.0, 0, cs, sn);
    memcpy(y, y0, sizeof y);
    synth_rope_apply(y, D, cs, sn);
    cr_assert(memcmp(y, y0, sizeof y) == 0);
}

/* ---- validation --------------------------------------------------------- */

/* synth_write on a config broken by one field: PG_ERR_USAGE naming `word`. */
static void expect_usage(synth_config c, const char *word)
{
    pg_err err = {0};
    char *path = temp_file("bad.safetensors");
    cr_assert_eq(synth_write(&c, path, parallel_default_threads(), &err), PG_ERR_USAGE,
                 "expected a usage error (%s)", word);
    cr_assert(strstr(err.msg, word) != NULL, "message '%s' does not name %s", err.msg, word);
    cr_assert_neq(access(path, F_OK), 0, "nothing should be written");
    free(path);
}

Test(synth, bad_config_is_usage_error)
{
    const synth_config good = make_cfg("gpt-oss-120b", 1, 1, 8, 0, 0);
    synth_config c;
    c = good, c.n_layers = 0, expect_usage(c, "--layers");
    c = good, c.n_seqs = 0, expect_usage(c, "--seqs");
    c = good, c.seq_len = 0, expect_usage(c, "--seq-len");
    c = good, c.context = -1, expect_usage(c, "--context");
    c = good, c.window = -5, expect_usage(c, "--window");
    c = good, c.block_size = 24, expect_usage(c, "--block-size");
    c = good, c.block_size = 128, expect_usage(c, "--block-size");
    c = good, c.hkv = 7, expect_usage(c, "kv heads");
    c = good, c.hq = 0, expect_usage(c, "query heads");
    c = good, c.d = 63, expect_usage(c, "head dim");
    c = good, c.d = 8, expect_usage(c, "head dim");
    c = good, c.rope_theta = -1.0, expect_usage(c, "rope_theta");
    c = good, c.n_seqs = 65536, c.seq_len = 32768, expect_usage(c, "tokens");
    pg_err err = {0};
    cr_assert_eq(synth_preset("gpt-oss-20b-typo", &c, &err), PG_ERR_USAGE);
    cr_assert(strstr(err.msg, "llama-3-8b") != NULL, "should list the presets: %s", err.msg);
    cr_assert_eq(synth_validate(&good, &err), PG_OK);
}

Test(synth, preset_names_table)
{
    const char *const *names = synth_preset_names();
    int n = 0;
    for (; names[n] != NULL; n++) {
        synth_config c;
        pg_err err = {0};
        cr_assert_eq(synth_preset(names[n], &c, &err), PG_OK, "%s", names[n]);
        cr_assert_eq(synth_validate(&c, &err), PG_OK, "%s: %s", names[n], err.msg);
    }
    cr_assert_eq(n, 2);
}

/* ---- command line ------------------------------------------------------- */

/* Runs cmd_synth on a NULL-terminated argument list. */
static int run_synth(const char **args)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)"synth";
    for (; args[argc - 1] != NULL; argc++) argv[argc] = (char *)args[argc - 1];
    argv[argc] = NULL;
    return cmd_synth(argc, argv);
}

Test(synth_cli, writes_file_and_reports_it, .init = cr_redirect_stdout)
{
    char *path = temp_file("cli.safetensors");
    const char *args[] = {"-o", path, "--preset", "llama-3-8b", "--layers", "2", "--seqs", "1",
                          "--seq-len", "16", "--context", "8", "--seed", "7", "--scales", NULL};
    cr_assert_eq(run_synth(args), 0);
    fflush(stdout);
    capture *cap = NULL;
    pg_err err = {0};
    cr_assert_eq(capture_open(path, &cap, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(cap->n_layers, 2);
    cr_assert_eq(cap->tq, 16);
    cr_assert_eq(cap->tkv, 24);
    cr_assert_eq(cap->layers[0].has_scales, 1);
    capture_close(cap);
    char line[1024] = "";
    FILE *out = cr_get_redirected_stdout();
    cr_assert_not_null(fgets(line, sizeof line, out));
    cr_assert(strstr(line, path) != NULL && strstr(line, "2 layers") != NULL &&
                  strstr(line, "bytes") != NULL,
              "output line: %s", line);
    free(path);
}

Test(synth_cli, bad_options_exit_2, .init = cr_redirect_stderr)
{
    char *path = temp_file("cli.safetensors");
    const char *no_out[] = {"--layers", "2", NULL};
    const char *bad_int[] = {"-o", path, "--layers", "two", NULL};
    const char *bad_block[] = {"-o", path, "--block-size", "48", NULL};
    const char *bad_preset[] = {"-o", path, "--preset", "gpt-5", NULL};
    const char *unknown[] = {"-o", path, "--frobnicate", NULL};
    const char *missing[] = {"-o", path, "--seed", NULL};
    const char *extra[] = {"-o", path, "stray", NULL};
    cr_assert_eq(run_synth(no_out), 2);
    cr_assert_eq(run_synth(bad_int), 2);
    cr_assert_eq(run_synth(bad_block), 2);
    cr_assert_eq(run_synth(bad_preset), 2);
    cr_assert_eq(run_synth(unknown), 2);
    cr_assert_eq(run_synth(missing), 2);
    cr_assert_eq(run_synth(extra), 2);
    cr_assert_neq(access(path, F_OK), 0);
    fflush(stderr);
    char buf[4096] = "";
    size_t n = fread(buf, 1, sizeof buf - 1, cr_get_redirected_stderr());
    buf[n] = '\0';
    cr_assert(strstr(buf, "precgate: error: ") == buf, "stderr: %s", buf);
    cr_assert(strstr(buf, "--block-size") && strstr(buf, "--frobnicate") && strstr(buf, "--seed"),
              "stderr: %s", buf);
    free(path);
}
