/*
 * attn_reference_sliced.h: the fp64 reference of attn.h computed as a kernel
 * on int8 tensor cores would compute it (issue #31 item 5: a reference that
 * no longer dominates the sweep; ../shared/reference/notes-reference.md,
 * scheme A, after Ootomo, Ozaki and Yokota, IJHPCA 38(4) 2024).
 *
 * Where the fp64 reference sums products in fp64, this one cuts each operand
 * into int8 slices on a power-of-two grid and sums slice products exactly in
 * int32, as an int8 MMA (Hopper's wgmma s8.s8.s32) does:
 *   S:  each Q row and each K row (one token and head, d values) gets the
 *       exponent e of the smallest power of two above its largest |x| and
 *       qk_slices slices a_1..a_n in [-127, 127] with x = 2^e sum_s a_s
 *       2^(-7 s) + r (truncation: |r| < 2^(e - 7 n)). S_ij = sum over the
 *       slice pairs (s, t) with s + t <= qk_max_order of
 *       2^(e_i + e_j - 7 (s + t)) I_st, I_st = sum_d a_ids b_jdt exact in
 *       int32, taken in fp64 from the highest order down (s ascending within).
 *   softmax: in fp64 from S * sm_scale, as the reference: masks, the final
 *       row max with the sink, exp, l.
 *   P.V: the keys in tiles of key_tile (absolute key index / key_tile). Per
 *       (query row, tile) P gets p_slices slices on its tile's exponent, per
 *       (kv head, channel, tile) V gets v_slices; each tile's pairs with
 *       s + t <= pv_max_order are int32 sums over the tile's keys, scaled and
 *       added in fp64 tile by tile (ascending), then O = acc * (1 / l).
 * A bf16 value is 8 significant bits, so 4 slices (28 bits) hold every
 * element of a row within 2^-21 of its largest exactly; what is dropped is
 * the rest of those below it, P's bits past its slices, and the pairs past
 * the order. This file is the
 * specification such a GPU kernel is held to (the int32 sums are exact, the
 * fp64 steps in the order above), and its distance to attn_reference is
 * what the scheme costs (bench/sliced_reference.c).
 */
#ifndef PG_ATTN_REFERENCE_SLICED_H
#define PG_ATTN_REFERENCE_SLICED_H

#include <stdint.h>

#include "attn.h"
#include "base/status.h"

/* Most slices of one operand: 5 x 7 bits, what P needs (below). */
#define ATTN_SLICED_MAX_SLICES 5
/* Most keys per P.V tile: key_tile * 127 * 127 stays within int32 (2^31 - 1). */
#define ATTN_SLICED_MAX_KEY_TILE 133143

/* How a sliced reference cuts its operands (the header's rules). */
typedef struct attn_sliced_config {
    int qk_slices;      /* slices of each Q and K row, 1 .. ATTN_SLICED_MAX_SLICES */
    int qk_max_order;   /* slice pairs (s, t), 1-based, with s + t <= this */
    int p_slices;       /* slices of P per (query row, key tile) */
    int v_slices;       /* slices of V per (kv head, channel, key tile) */
    int pv_max_order;   /* P.V slice pairs with s + t <= this */
    int key_tile;       /* keys per P.V tile, 1 .. ATTN_SLICED_MAX_KEY_TILE */
} attn_sliced_config;

/* Q and K in 4 slices with the 10 pairs of order <= 5; P in 5 and V in 4
 * with the 14 pairs of order <= 6; 64-key tiles (two int8 wgmma K steps of
 * 32): 24 int8 MMAs per score and output element where the fp64 reference
 * takes 2 DMMAs. notes-reference.md's scheme (P in 4, V in 3, 9 pairs)
 * models 2.7e-9 to 8e-8; on the synthetic llama-3-8b layer of 1,024 tokens
 * it is 9.1e-7 from fp64 (bench/sliced_reference.c, bench/RESULTS.md): P's
 * grid is its tile's largest weight, and the many weights far below it keep
 * too few of their bits in 28; V in 3 loses the small values of a tile with
 * one large row. Each further slice or pair order removed leaves 1e-7. */
extern const attn_sliced_config ATTN_SLICED_DEFAULT;

/* PG_OK when c is a configuration attn_reference_sliced takes, else
 * PG_ERR_USAGE naming the field and its range. */
pg_status attn_sliced_config_check(const attn_sliced_config *c, pg_err *err);

/* The reference of batch b (attn_reference's contract and layout) by the
 * sliced scheme c on n_threads threads: out [Tq, hq, d] fp64. */
pg_status attn_reference_sliced(const attn_batch *b, const uint16_t *q, const uint16_t *k,
                                const uint16_t *v, const attn_sliced_config *c, double *out,
                                int n_threads, pg_err *err);

#endif /* PG_ATTN_REFERENCE_SLICED_H */
