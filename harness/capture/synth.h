/*
 * synth.h: synthetic captures with the structure of real activations.
 *
 * synth_write generates a capture (format v1, see capture.h) whose q/k/v
 * carry the properties that make low-precision attention hard on real
 * models: RoPE at absolute positions, fixed large-magnitude key channels, a
 * massive-activation first token that becomes an attention sink, queries
 * correlated with keys (peaked softmax) and per-channel value scales. The
 * magnitudes and their published sources are documented in synth.c.
 *
 * The output is a pure function of the config: the same config (seed
 * included) gives a byte-identical file, whatever the thread count.
 */
#ifndef PG_SYNTH_H
#define PG_SYNTH_H

#include <stdint.h>

#include "capture.h"
#include "base/status.h"

/* Outlier key channels per kv head, inclusive range (KIVI / KVQuant: a few). */
#define SYNTH_K_OUTLIERS_MIN 2
#define SYNTH_K_OUTLIERS_MAX 4
/* The massive-activation tokens of a sequence sit at positions below this
 * (the first token and one early delimiter-like token). */
#define SYNTH_MASSIVE_MAX_POS 16
/* Smallest head dim accepted: room for the sink and outlier channels. */
#define SYNTH_MIN_D 16
/* Largest head dim, head count and layer count accepted (keeps every size
 * product far from overflow; real models stay far below). */
#define SYNTH_MAX_D 1024
#define SYNTH_MAX_HEADS 4096
#define SYNTH_MAX_LAYERS CAPTURE_MAX_LAYERS
/* RoPE base when the config leaves rope_theta 0 (RoFormer, arXiv 2104.09864). */
#define SYNTH_DEFAULT_ROPE_THETA 10000.0

/* What to synthesize; a preset fills the model shape, options override. */
typedef struct synth_config {
    const char *preset;     /* "gpt-oss-120b", "llama-3-8b", ... */
    const char *model;      /* metadata "model"; NULL = "synth:" + preset */
    int n_layers;
    int hq, hkv, d;         /* d even, >= SYNTH_MIN_D */
    int window;             /* on even layers when window_even_only, else all; 0 = none */
    int window_even_only;
    int sinks;              /* 1: per-head sink logits */
    int n_seqs;
    int seq_len;            /* new tokens per sequence */
    int context;            /* cached tokens before them (chunked prefill) */
    int block_size;         /* 16, 32 or 64 */
    int write_scales;       /* 1: write calibrated q/k/v_scale metadata */
    uint64_t seed;
    double rope_theta;      /* RoPE base; 0 = SYNTH_DEFAULT_ROPE_THETA */
} synth_config;

/* Fills cfg from the named preset (model shape and the modest sweep
 * defaults: 2 sequences x 256 new tokens, context 0, block 16, seed 0);
 * PG_ERR_USAGE listing the presets when the name is unknown. */
pg_status synth_preset(const char *name, synth_config *cfg, pg_err *err);

/* Names of the presets, NULL-terminated. */
const char *const *synth_preset_names(void);

/* Checks cfg: positive sizes within the SYNTH_MAX_* limits, d even and
 * >= SYNTH_MIN_D, hq % hkv == 0, context >= 0, window >= 0, block_size in
 * capture_block_sizes (16/32/64), n_seqs * (context + seq_len) <= INT32_MAX;
 * PG_ERR_USAGE naming the offending field and its command-line option. */
pg_status synth_validate(const synth_config *cfg, pg_err *err);

/* The checks synth_write makes before it writes anything: synth_validate,
 * and PG_ERR_USAGE for a NULL or empty path. */
pg_status synth_check(const synth_config *cfg, const char *path, pg_err *err);

/* Generates the capture described by cfg and writes it to path (through
 * the safetensors writer), after synth_check. Layers are generated in
 * parallel on n_threads threads (within [1, layers]); the bytes do not
 * depend on it. */
pg_status synth_write(const synth_config *cfg, const char *path, int n_threads, pg_err *err);

/* RoPE angles for one position (RoFormer, Su et al., arXiv 2104.09864):
 * cos_out[i] = cos(pos * theta^(-2i/d)), sin_out[i] likewise, i < d/2,
 * computed in fp64 and rounded to fp32. d even and > 0. */
void synth_rope_angles(int d, double theta, int64_t pos, float *cos_out, float *sin_out);

/* Rotates x[0..d) in place by the angles of one position, NeoX half split
 * as in gpt-oss / Llama (HF rotate_half): the pair (x[i], x[i + d/2]) turns
 * by angle i, i < d/2. fp32 arithmetic, no contraction. */
void synth_rope_apply(float *x, int d, const float *cos_row, const float *sin_row);

#endif /* PG_SYNTH_H */
