/*
 * capture.h: precgate capture format v1, a recorded prefill's per-layer
 * attention inputs, loaded from a safetensors file or a directory of shards.
 *
 * Tensors (per layer L):
 *   layers.L.q          BF16 [Tq, Hq, D]   queries after RoPE, packed over sequences
 *   layers.L.k / .v     BF16 [Tkv, Hkv, D] each sequence's context then its new tokens
 *   layers.L.sinks      F32  [Hq]          optional per-head sink logits (gpt-oss)
 *   layers.L.out.NAME   BF16 [Tq, Hq, D]   optional output of an external implementation
 * __metadata__: format = precgate.capture.v1, model, seq_q, seq_kv (JSON int
 * arrays), sm_scale, sliding_window / q_scale / k_scale / v_scale (JSON arrays,
 * one entry per layer), block_size (default 16).
 *
 * Query token j of a sequence with context c = seq_kv - seq_q attends keys
 * 0..c+j, and only the last W of them when the layer's window W > 0.
 *
 * A directory is read as shards: every *.safetensors in it (not dot files),
 * in strcmp order; tensors are unioned, a key two shards carry must agree.
 * Every tensor must be named as above (layers.L with L in decimal, no
 * leading zeros; NAME of [A-Za-z0-9_.-]); any other name is PG_ERR_FORMAT,
 * so that a typo such as "layer.0.q" cannot silently drop a tensor.
 * Metadata keys not listed above are ignored.
 */
#ifndef PG_CAPTURE_H
#define PG_CAPTURE_H

#include <stdint.h>

#include "base/status.h"

/* The format string a v1 capture carries in __metadata__["format"]. */
#define CAPTURE_FORMAT_V1 "precgate.capture.v1"
/* Longest NAME of layers.L.out.NAME (it becomes the stored variant "ext:NAME"). */
#define CAPTURE_EXT_NAME_MAX 64
/* KV page size when the capture names none (vLLM's default block size). */
#define CAPTURE_DEFAULT_BLOCK_SIZE 16
/* Number of entries in capture_block_sizes. */
#define CAPTURE_N_BLOCK_SIZES 3
/* Most layers a capture may have (far above any real model's depth). */
#define CAPTURE_MAX_LAYERS 4096
/* How capture.digest starts: the hash that made it. */
#define CAPTURE_DIGEST_PREFIX "xxh3-128:"
/* Room for capture.digest: the prefix, 32 hex digits and the NUL. */
#define CAPTURE_DIGEST_MAX 48

/* The KV page sizes "block_size" may name: 16, 32, 64 (vLLM's supported
 * block sizes for this attention path). */
extern const int capture_block_sizes[CAPTURE_N_BLOCK_SIZES];

/* An external implementation's recorded output for one layer. */
typedef struct capture_ext_output {
    char *name;             /* NAME of layers.L.out.NAME */
    const uint16_t *out;    /* bf16 [Tq, Hq, D] */
} capture_ext_output;

/* One layer's tensors; pointers are 2-byte / 4-byte aligned views owned by
 * the capture (into the mapping, or aligned copies). */
typedef struct capture_layer {
    int hq, hkv, d;         /* query heads, kv heads, head dim */
    const uint16_t *q;      /* bf16 [Tq, Hq, D] */
    const uint16_t *k;      /* bf16 [Tkv, Hkv, D] */
    const uint16_t *v;      /* bf16 [Tkv, Hkv, D] */
    const float *sinks;     /* [Hq] or NULL */
    int window;             /* 0 = full attention, else keys seen incl. self */
    float sm_scale;         /* softmax scale (metadata, else 1/sqrt(D)) */
    int has_scales;         /* 1 when q/k/v_scale came from the metadata */
    float q_scale, k_scale, v_scale; /* valid when has_scales */
    float q_amax, k_amax, v_amax;    /* largest |value| of q, k, v (read by the Inf/NaN scan) */
    int n_ext;
    capture_ext_output *ext;
} capture_layer;

/* A whole capture. */
typedef struct capture {
    char *path;             /* as given to capture_open */
    char *model;            /* metadata "model", "" when absent */
    int n_seqs;
    int32_t *seq_q;         /* [n_seqs] new (query) tokens */
    int32_t *seq_kv;        /* [n_seqs] context + new tokens */
    int64_t tq, tkv;        /* sums of seq_q and seq_kv */
    int block_size;
    int n_layers;           /* layers 0..n_layers-1, all present */
    capture_layer *layers;
    /* The content digest: "xxh3-128:" and 32 hex digits, over the metadata
     * and every tensor's name, dtype, shape and bytes (capture.c,
     * digest_capture). Not the path or the file's times: a copy, a move or
     * a resharding keeps it; any changed value or key changes it. */
    char digest[CAPTURE_DIGEST_MAX];
    void *impl;             /* open shards and owned copies */
} capture;

/* Opens and fully validates the capture at path (file or shard directory),
 * including a scan for NaN/Inf in q/k/v/sinks that also records each q/k/v
 * amax and, in the same pass over the data, the content digest; on failure
 * nothing is returned and err names the file, tensor and field. */
pg_status capture_open(const char *path, capture **out, pg_err *err);

/* capture_open with the scan on n_threads threads (capture_open: the online
 * CPUs, parallel_default_threads); nothing else depends on it. */
pg_status capture_open_threads(const char *path, int n_threads, capture **out, pg_err *err);

/* Releases everything capture_open made; NULL is a no-op. */
void capture_close(capture *c);

#endif /* PG_CAPTURE_H */
