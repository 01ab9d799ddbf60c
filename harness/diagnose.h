/*
 * diagnose.h: the scale-plumbing diagnosis of external outputs (issue #16
 * part 1). For a layer with recorded external outputs (capture
 * layers.L.out.NAME), every hypothesis of kernels/attn_hypothesis.h runs
 * once on the CPU specification from the layer's q/k/v and the sweep's fp8
 * options (the scales the fp8 variants get), and each external output is
 * measured against each: rel_l2 = ||ext - H|| / ||H|| over the whole layer,
 * H the hypothesis's output as the reference (as layer_metrics measures a
 * mode against the fp64 reference; the per-element sums of
 * harness/metrics.h). The sweep stores the distances in ext_diagnosis
 * (db/diagnosis_store.h) in the layer's transaction; harness/diag_verdict.h
 * says what they mean.
 */
#ifndef PG_DIAGNOSE_H
#define PG_DIAGNOSE_H

#include <stdint.h>
#include <stdio.h>

#include "db/store.h"
#include "kernels/attn.h"
#include "kernels/attn_backend.h"
#include "harness/capture/capture.h"
#include "base/status.h"

/* Longest reason a hypothesis could not run, NUL included. */
#define DIAG_WHY_MAX 192

/* One layer's distances: rel_l2[e * n_hyp + h] for external output e and
 * hypothesis h (table order); why[h] is "" when h ran, else why it could
 * not run on the layer (its rel_l2 entries are then NaN). */
typedef struct diag_layer {
    int n_ext;
    int n_hyp;
    double *rel_l2;
    char (*why)[DIAG_WHY_MAX];
    unsigned char *asked;   /* [n_hyp] 1 where h ran or refused (attn_hypothesis_is_asked);
                             * 0: not asked for this run, nothing stored */
    double *planned;        /* [n_hyp * n_ext]: where a hypothesis run inside the layer's
                             * job puts its distances (diag_layer_plan) */
} diag_layer;

/* The ext_diagnosis rows a layer with n_ext external outputs holds in a run
 * sweeping the modes of swept_modes (bits 1u << pg_mode): n_ext x the
 * hypotheses asked (attn_hypothesis_is_asked); 0 without external outputs. */
int64_t diag_layer_rows(int n_ext, unsigned swept_modes);

/* Runs every hypothesis asked for a run sweeping swept_modes
 * (attn_hypothesis_is_asked; the others are marked not asked) on layer b
 * (q, k, v; fo the sweep's quantized-mode options for it), each on backend
 * be where be runs it (attn_backend_supports_hypothesis), else on cpu (a
 * "cpu" backend), and measures ext[0..n_ext)'s outputs ([Tq,hq,d] bf16 each) against each,
 * into *out (zeroed first; free with diag_layer_free, also after a failure).
 * A hypothesis that refuses the layer (attn_hypothesis_run's PG_ERR_USAGE or
 * PG_ERR_UNSUPPORTED, e.g. a kernel without sinks on a layer with them) is recorded in why[h],
 * never skipped silently; any other failure is returned. A hypothesis output
 * or an external output with NaN/Inf gives +inf. n_ext 0: nothing runs.
 * fo NULL, not quantizing or with a keep_bf16 mask is PG_ERR_INTERNAL.
 * It is diag_layer_plan without extras, then diag_layer_finish. */
pg_status diag_layer_run(attn_backend *be, attn_backend *cpu, const attn_batch *b,
                         const uint16_t *q, const uint16_t *k, const uint16_t *v,
                         const attn_quant_options *fo, unsigned swept_modes, int n_ext,
                         const capture_ext_output *ext, diag_layer *out, pg_err *err);

/* diag_layer_run in steps around a layer's job, so that a backend that
 * takes extra runs (attn_backend_takes_extras) computes its hypotheses in
 * the layer's own pass, on its caches:
 *   diag_layer_plan    sizes *out (zeroed first) for n_ext outputs and
 *                      marks the hypotheses asked; where be (may be NULL:
 *                      none) takes extras, each asked hypothesis be runs
 *                      becomes an extra run of the job, extra[0 .. *n_extra)
 *                      (room for attn_hypothesis_count()), hyp_of[j] its
 *                      hypothesis, compared with the job's last n_ext
 *                      external outputs (attn_layer_job.n_diag_ext = n_ext;
 *                      they must be ext's, in order). fo's checks and
 *                      PG_ERR_NOMEM.
 *   (the layer's job, with those extras)
 *   diag_layer_finish  takes the extras' distances and refusals into *out
 *                      and runs every other asked hypothesis on be where be
 *                      runs it, else on cpu. */
pg_status diag_layer_plan(const attn_backend *be, const attn_batch *b,
                          const attn_quant_options *fo, unsigned swept_modes, int n_ext,
                          diag_layer *out, attn_layer_extra *extra, int *hyp_of, int *n_extra,
                          pg_err *err);
pg_status diag_layer_finish(attn_backend *be, attn_backend *cpu, const attn_batch *b,
                            const uint16_t *q, const uint16_t *k, const uint16_t *v,
                            const attn_quant_options *fo, int n_ext,
                            const capture_ext_output *ext, diag_layer *out,
                            const attn_layer_extra *extra, const int *hyp_of, int n_extra,
                            pg_err *err);

/* Frees what diag_layer_run allocated in d; NULL-safe. */
void diag_layer_free(diag_layer *d);

/* Stores d's rows for layer `layer` of capture_name under run_id, ext[e].name
 * naming output e (NAME of ext:NAME), in the caller's transaction. */
pg_status diag_layer_store(pg_store *s, int64_t run_id, const char *capture_name, int layer,
                           const capture_ext_output *ext, const diag_layer *d, pg_err *err);

/* Prints run_id's diagnosis to out: "diagnosis of external outputs
 * (capture C):" and one line per span of layers (diag_span_message);
 * nothing when the run has no ext_diagnosis rows. */
pg_status diag_print_run(pg_store *s, int64_t run_id, FILE *out, pg_err *err);

#endif /* PG_DIAGNOSE_H */
