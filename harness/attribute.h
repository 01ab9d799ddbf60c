/*
 * attribute.h: attribution per quantized tensor (run --attribute, issue #16).
 *
 * For one layer and each fp8 variant, the variant runs again with only one
 * tensor quantized: attn_quant_options.keep_bf16 =
 * ATTN_TENSORS_ALL & ~T for each tensor T its mode quantizes (fp8kv: K, V;
 * fp8qkv: Q, K, V, P), plus "none" (every tensor kept bf16: the profile's
 * arithmetic alone, e.g. its tiling and fp8 MMA accumulation rule applied to
 * bf16 values, the floor) and "all" (keep_bf16 = 0: the variant itself, the
 * joint error). Each is measured as whole-layer rel_l2 against the layer's
 * fp64 reference, computed once per layer.
 *
 * What the split means: each single-tensor error is the error the layer
 * would have if only that tensor were fp8 (the floor included). What it does
 * not mean: a share of the joint error. The parts are not additive when the
 * tensors interact: independent errors add roughly in quadrature (the joint
 * near the root-sum-square of the parts), and saturation of one tensor can
 * mask or amplify another's rounding, so readers show the joint error beside
 * the sum of the parts, never the parts as its fractions.
 *
 * Every row is measured against the layer's one reference, the one the
 * sweep's variants were measured against, so "all" is the variant's
 * layer_metrics rel_l2 bit for bit on either backend. The GPU runs the rows
 * its kernels compute as the specification states (fp8kv's and @ideal's,
 * whose sums are exact fp32) inside the layer's own run, as extra runs of
 * its job (attn_layer_extra): on the layer's caches and reference already
 * on the device, only each row's rel_l2 coming back. A tiled fp8 profile's
 * rows with a tensor kept bf16 apply the fp8 tensor cores' accumulation
 * rule to bf16 values, which no GPU instruction computes, and run on the
 * CPU specification after the layer run, against its reference.
 */
#ifndef PG_ATTRIBUTE_H
#define PG_ATTRIBUTE_H

#include <stdint.h>

#include "db/attribution_store.h"
#include "kernels/attn.h"
#include "kernels/attn_backend.h"
#include "kernels/attn_profile.h"
#include "base/status.h"

/* Most rows one variant gives: none, q, k, v, p, all. */
#define ATTRIBUTE_MAX_ROWS ATTRIBUTION_N_TENSORS

/* One attribution result. */
typedef struct attribute_row {
    const attn_profile *p;   /* the fp8 variant */
    int var;                 /* its index in the var[] it was planned from */
    int tensor;              /* index into attribution_tensors */
    double rel_l2;           /* whole layer, against the fp64 reference */
} attribute_row;

/* The rows attribute_layer gives for profile p: 0 for bf16, 4 for an fp8kv
 * profile (none, k, v, all), 6 for an fp8qkv one (none, q, k, v, p, all). */
int attribute_row_count(const attn_profile *p);

/* The keep_bf16 mask of row tensor (an attribution_tensors index):
 * ATTN_TENSORS_ALL for "none", 0 for "all", else every tensor but that one. */
unsigned attribute_keep_mask(int tensor);

/* How many of profile p's attribution rows (its "all" row aside, which the
 * sweep measures) backend be cannot run on a batch of b's shape, so that
 * attribute_layer gives them to the CPU specification; *why (may be NULL)
 * gets be's reason for the last of them. */
int attribute_rows_off(const attn_backend *be, const attn_profile *p, const attn_batch *b,
                       const char **why);

/* The rows of one layer's attribution, in three steps around the layer's
 * run (attn_backend_run_layer), so that a backend that takes extra runs
 * (attn_backend_takes_extras) computes its rows in the layer's own pass, on
 * its caches and against its one reference:
 *   attribute_plan    every row of the n_var profiles var (bf16 ones give
 *                     none) in attribution_tensors' order, into rows (room
 *                     for n_var * ATTRIBUTE_MAX_ROWS; *n_rows), rel_l2 NaN.
 *                     Where be (may be NULL: none) takes extras, each row but
 *                     "all" that be runs (attn_backend_supports_kept) becomes
 *                     an extra run of the layer's job: extra[0 .. *n_extra)
 *                     (room for n_var * ATTRIBUTE_MAX_ROWS), row_of[j] its row.
 *   (the layer's job, with those extras)
 *   attribute_finish  var[i]'s "all" row is joint[i] where joint (NULL, or
 *                     [n_var]) has it (not NaN): the whole-layer rel_l2 the
 *                     layer run measured for var[i] with fo against ref, not
 *                     run again; the extras' results go into their rows; every
 *                     row still NaN runs with fo and the row's keep_bf16 mask
 *                     on be where be runs it (attn_backend_supports_kept), else
 *                     on cpu (a "cpu" backend), measured against ref (the layer
 *                     run's reference, attn_layer_job.ref_out; NULL only when
 *                     attribute_left is 0) by be's metrics (cpu's without be).
 * fo is the sweep's quantized-mode options of the layer (its keep_bf16 is
 * replaced per row). PG_ERR_USAGE when cpu is not the CPU backend or ref is
 * missing; PG_ERR_UNSUPPORTED naming the row when an extra refused the layer
 * (a variant the layer ran refuses none of its rows); PG_ERR_NOMEM; a row's
 * own failure, naming the variant and row. */
void attribute_plan(const attn_backend *be, const attn_batch *b, const attn_profile *const *var,
                    int n_var, attribute_row *rows, int *n_rows, attn_layer_extra *extra,
                    int *row_of, int *n_extra);

/* How many of rows[0 .. n_rows) attribute_finish runs itself when the layer
 * run measures every variant (so joint gives every "all" row): those that
 * are neither "all" nor among the n_extra extras attribute_plan made. */
int attribute_left(const attribute_row *rows, int n_rows, int n_extra);

pg_status attribute_finish(attn_backend *be, attn_backend *cpu, const attn_batch *b,
                           const uint16_t *q, const uint16_t *k, const uint16_t *v,
                           const attn_quant_options *fo, const double *joint, const double *ref,
                           attribute_row *rows, int n_rows, const attn_layer_extra *extra,
                           const int *row_of, int n_extra, pg_err *err);

/* Attributes one layer against ref with no layer job: attribute_plan
 * without extras, then attribute_finish (each row on be where be runs it,
 * else on cpu). */
pg_status attribute_layer(attn_backend *be, attn_backend *cpu, const attn_batch *b,
                          const uint16_t *q, const uint16_t *k, const uint16_t *v,
                          const attn_quant_options *fo, const attn_profile *const *var, int n_var,
                          const double *ref, const double *joint, attribute_row *rows,
                          int *n_rows, pg_err *err);

#endif /* PG_ATTRIBUTE_H */
