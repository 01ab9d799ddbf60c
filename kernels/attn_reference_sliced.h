/*
 * attn_reference_sliced.h: the fp64 reference of attn.h computed as a kernel
 * on int8 tensor cores would compute it (issue #31 item 5: a reference that
 * no longer dominates the sweep; ../shared/reference/notes-reference.md,
 * scheme A, after Ootomo, Ozaki and Yokota, IJHPCA 38(4) 2024).
 *
 * Where the fp64 reference sums products in fp64, this one cuts each operand
 * into int8 slices on a power-of-two grid and sums slice products exactly in
 * int32, as an int8 MMA (Hopper's wgmma s8.s8.s32) does:
 *   slices: x = 2^e sum_s a_s 2^(-7 s) + r, a_1..a_n int8, by truncation or
 *       to nearest (attn_slice_rounding; attn_reference_sliced.c,
 *       slice_values, has the exponent rule of each).
 *   S:  each Q row and each K row (one token and head, d values) gets its
 *       exponent and qk_slices slices. S_ij = sum over the slice pairs (s, t)
 *       with s + t <= qk_max_order of 2^(e_i + e_j - 7 (s + t)) I_st,
 *       I_st = sum_d a_ids b_jdt. The pairs of one order share a scale, so
 *       their I_st are summed in int32 (one accumulator that a kernel chains
 *       their MMAs into, exact), and the orders are taken into fp64 and added
 *       from the highest order down: one int32-to-fp64 step per order, not
 *       per pair.
 *   one pass: each query row takes its key tiles of key_tile keys (absolute
 *       key index / key_tile) in ascending order, as a flash kernel streams
 *       them; a sink is an initial logit (m = sink, l = 1), else m = -inf,
 *       l = 0, acc = 0. Per tile:
 *     scores: x = S * sm_scale in fp64, keys outside the row's range -inf.
 *     lazy maximum: when the tile's largest x exceeds m by more than
 *       ATTN_SLICED_RESCALE_MARGIN, alpha = exp(m - max) scales l and acc and
 *       m becomes that max (the fp64 reference kernel's rule).
 *     weights: p = exp(x - m) (0 outside the range), l += p in key order.
 *     peaks: the tile's peak_keys largest weights (the first of equal ones),
 *       one after another, each times its bf16 value row in fp64 into acc,
 *       then zero for the slices.
 *     P.V: P gets p_slices slices on the tile's exponent (per query row),
 *       V v_slices per (kv head, channel, tile); the pairs with s + t <=
 *       pv_max_order are int32 sums over the tile's keys, one per order as
 *       for S, each scaled into fp64 and added to acc.
 *   then O = acc * (1 / l).
 * A bf16 value is 8 significant bits, so 4 slices (28 bits) hold every
 * element of a row within 2^-21 of its largest exactly; what is dropped is
 * the rest of those below it, P's bits past its slices, and the pairs past
 * the order. This file is the specification such a GPU kernel is held to
 * (the int32 sums are exact, the fp64 steps in the order above), and its
 * distance to attn_reference is what the scheme costs
 * (bench/sliced_reference.c).
 */
#ifndef PG_ATTN_REFERENCE_SLICED_H
#define PG_ATTN_REFERENCE_SLICED_H

#include <stdint.h>

#include "attn.h"
#include "base/status.h"

/* Most slices of one operand: 5 x 7 bits. */
#define ATTN_SLICED_MAX_SLICES 5
/* Most keys per P.V tile: one order's int32 sum of at most
 * ATTN_SLICED_MAX_SLICES pairs, key_tile * 127 * 127 * 5, stays within
 * int32 (2^31 - 1). */
#define ATTN_SLICED_MAX_KEY_TILE 26628

/* The lazy maximum's margin: a row's m moves to a key tile's largest scaled
 * score only when that exceeds m by more than this, so weights stay below
 * e^256 (fp64 holds them); the fp64 reference kernel's REF_RESCALE_MARGIN
 * (kernels/cuda_attn_reference.cu), for the same one-pass structure. */
#define ATTN_SLICED_RESCALE_MARGIN 256.0

/* Most peak keys per tile (attn_sliced_config.peak_keys): each costs a row a
 * d-long fp64 axpy per tile beside the tile's d * key_tile MACs of P.V. */
#define ATTN_SLICED_MAX_PEAK_KEYS 4

/* How a value becomes its slices (attn_reference_sliced.c, slice_values). */
typedef enum attn_slice_rounding {
    ATTN_SLICE_TRUNCATE = 0, /* x cut toward zero on its grid, plain digits: |r| < 2^-7n */
    ATTN_SLICE_NEAREST = 1   /* x rounded once on its grid, balanced digits: |r| <= 2^-(7n+1) */
} attn_slice_rounding;

/* How a sliced reference cuts its operands (the header's rules). */
typedef struct attn_sliced_config {
    int qk_slices;      /* slices of each Q and K row, 1 .. ATTN_SLICED_MAX_SLICES */
    int qk_max_order;   /* slice pairs (s, t), 1-based, with s + t <= this */
    int p_slices;       /* slices of P per (query row, key tile) */
    int v_slices;       /* slices of V per (kv head, channel, key tile) */
    int pv_max_order;   /* P.V slice pairs with s + t <= this */
    int key_tile;       /* keys per P.V tile, 1 .. ATTN_SLICED_MAX_KEY_TILE */
    attn_slice_rounding rounding; /* of every operand's slices */
    int peak_keys;      /* a tile's largest weights taken exactly, 0 .. ATTN_SLICED_MAX_PEAK_KEYS */
} attn_sliced_config;

/* Q and K in 4 slices with the 10 pairs of order <= 5; one peak key per
 * tile; P and V in 4 slices with the 10 pairs of order <= 5; 64-key tiles
 * (two int8 wgmma K steps of 32); to nearest: 20 int8 MMAs and 8
 * int32-to-fp64 steps per score and output element where the fp64
 * reference takes 2 DMMAs, and a d-long fp64 axpy per row and tile.
 * On the synthetic captures of bench/RESULTS.md it is within 1.1e-8 of
 * fp64, 8,192 tokens included. The peak key is what lets P keep 4 slices:
 * a massive key (a first token that takes most of a row's weight, with a
 * small value row) otherwise sets its tile's grid, the tile's other weights
 * keep too few bits, and the distance is 2.2e-7 (9.1e-7 with
 * notes-reference.md's scheme A and truncation); a fifth P slice and the
 * pairs of order 6 (24 MMAs, 87ba427) had been the way round it. Rounding to
 * nearest halves the distance at no cost. A P or Q/K slice or a pair order
 * fewer leaves 1e-7. V in 3 slices (scheme A's, 19 MMAs) stays within it
 * too, at 1.9e-8 against 1.1e-8: V keeps 4 for the margin, at 5% of the
 * MMAs. */
extern const attn_sliced_config ATTN_SLICED_DEFAULT;

/* PG_OK when c is a configuration attn_reference_sliced takes, else
 * PG_ERR_USAGE naming the field and its range. */
pg_status attn_sliced_config_check(const attn_sliced_config *c, pg_err *err);

/* The reference of batch b (attn_reference's contract and layout) by the
 * sliced scheme c on n_threads threads: out [Tq, hq, d] fp64. PG_ERR_USAGE
 * for a bad c, PG_ERR_NUMERIC when Q, K or V holds an Inf or NaN (out is
 * then not the reference). */
pg_status attn_reference_sliced(const attn_batch *b, const uint16_t *q, const uint16_t *k,
                                const uint16_t *v, const attn_sliced_config *c, double *out,
                                int n_threads, pg_err *err);

#endif /* PG_ATTN_REFERENCE_SLICED_H */
