/*
 * test_backend.c: the backend interface (kernels/attn_backend.h) over the
 * CPU specification: names, what it supports, and that a layer run gives
 * the metrics of the specification's outputs against its reference, with
 * external outputs measured against the same reference. (The CUDA backend
 * is held to the CPU one by tests/gpu_check.c.)
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn_backend.h"
#include "kernels/attn_hypothesis.h"
#include "kernels/metrics.h"
#include "kernels/numerics.h"
#include "base/rng.h"

enum { NSEQ = 2, HQ = 4, HKV = 2, D = 64 };
static int32_t seq_q[NSEQ] = {20, 9}, seq_kv[NSEQ] = {20, 30};

/* Random bf16 q, k, v for the batch (gaussian-ish: sums of uniforms). */
static uint16_t *fill(size_t n, uint64_t *s)
{
    uint16_t *x = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        double u = 0;
        for (int j = 0; j < 4; j++) u += (double)(rng_splitmix64(s) >> 11) / 9007199254740992.0;
        x[i] = bf16_from_f32((float)(2.0 * (u - 2.0)));
    }
    return x;
}

static const attn_profile *profile(const char *name)
{
    const attn_profile *p;
    pg_err err = {0};
    cr_assert_eq(attn_profile_find(name, &p, &err), PG_OK, "%s", err.msg);
    return p;
}

Test(backend, an_unknown_name_is_refused_naming_the_choices)
{
    attn_backend *be = (attn_backend *)1;
    pg_err err = {0};
    cr_assert_eq(attn_backend_open("tpu", 1, &be, NULL, 0, &err), PG_ERR_USAGE);
    cr_assert_null(be);
    cr_assert_not_null(strstr(err.msg, "'tpu' is not one of cpu, cuda"), "%s", err.msg);
}

Test(backend, cuda_without_a_gpu_is_a_device_error_with_the_reason)
{
    attn_backend *be = NULL;
    char desc[128];
    pg_err err = {0};
    const pg_status st = attn_backend_open("cuda", 1, &be, desc, sizeof desc, &err);
    if (st == PG_OK) {  /* a usable GPU here: nothing to check */
        cr_assert_str_eq(attn_backend_name(be), "cuda");
        attn_backend_close(be);
        return;
    }
    cr_assert_eq(st, PG_ERR_DEVICE);
    cr_assert_null(be);
    cr_assert_gt(strlen(err.msg), 0);
}

/* Where --backend cuda runs each profile (attn_backend_gpu_runs), from the
 * mode table's traits and the profile knobs: a build with CUDA runs the
 * bf16 cache, the e4m3 / e5m2 dequant-to-bf16 caches and the fp8 matmuls
 * of e4m3 caches (each tiled profile's compiled kernel, @ideal on the bf16
 * kernel) at d 64 and 128, nothing at another head dim, and names a reason
 * for the rest (per-token-head, nvfp4, TurboQuant); a build without CUDA
 * runs none and says so. */
Test(backend, the_gpu_placement_of_each_profile_follows_its_traits)
{
    static const char *const on_gpu[] = {
        "bf16", "fp8kv@fixed", "fp8kv@vllm-24197", "fp8kv_e5m2@fixed", "fp8qkv@fa3",
        "fp8qkv@fa3-1level", "fp8qkv@trtllm", "fp8qkv@flashinfer-fa3", "fp8qkv@ideal"};
    size_t n_on = 0;
    for (size_t i = 0; i < attn_profile_count(); i++) {
        const attn_profile *p = attn_profile_at(i);
        int expect = 0;
        for (size_t j = 0; j < sizeof on_gpu / sizeof on_gpu[0]; j++)
            expect |= strcmp(attn_profile_variant(p), on_gpu[j]) == 0;
#ifndef PG_HAVE_CUDA
        expect = 0;
#endif
        n_on += (size_t)expect;
        for (int d = 64; d <= 128; d += 64) {
            const char *why = NULL;
            const int runs = attn_backend_gpu_runs(p, d, 0, &why);
            cr_expect_eq(runs, expect, "%s at d %d: runs %d (%s)", attn_profile_variant(p), d,
                         runs, why ? why : "-");
            if (!runs)
                cr_expect(why != NULL && strlen(why) > 10, "%s: no reason given",
                          attn_profile_variant(p));
        }
        const char *why = NULL;
        cr_expect_eq(attn_backend_gpu_runs(p, 96, 0, &why), 0, "%s at d 96",
                     attn_profile_variant(p));
        cr_expect_not_null(why);
    }
#ifdef PG_HAVE_CUDA
    cr_expect_eq(n_on, sizeof on_gpu / sizeof on_gpu[0], "a profile of the list was renamed");
#endif
}

/* With a tensor kept bf16 (attribution) the GPU runs what its kernels compute
 * as the specification states: fp8kv's and @ideal's rows (exact fp32 sums),
 * not a tiled fp8 profile's (the fp8 accumulation rule on bf16 values); the
 * scale-plumbing hypotheses that are GPU profiles' runs likewise, never the
 * misreads only the CPU models. The CPU runs everything. Needs no GPU. */
Test(backend, attribution_and_hypotheses_go_where_their_kernels_run)
{
    int32_t one = 1;
    const attn_batch b = {1, &one, &one, 1, 1, 64, 0, 1.0f, NULL};
    attn_backend *cpu = NULL;
    pg_err err = {0};
    cr_assert_eq(attn_backend_open("cpu", 1, &cpu, NULL, 0, &err), PG_OK, "%s", err.msg);
    const unsigned k_alone = ATTN_TENSORS_ALL & ~(unsigned)ATTN_TENSOR_K;
    static const struct {
        const char *name;
        int on_gpu;
    } kept[] = {{"fp8kv@fixed", 1}, {"fp8kv@vllm-24197", 1}, {"fp8kv_e5m2@fixed", 1},
                {"fp8qkv@ideal", 1}, {"fp8qkv@fa3", 0}, {"fp8qkv@trtllm", 0},
                {"fp8qkv@flashinfer-fa3", 0}, {"fp8kv_per_token_head@triton", 0}};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        const attn_profile *p = profile(kept[i].name);
        cr_expect(attn_backend_supports_kept(cpu, p, &b, k_alone, NULL), "cpu: %s", kept[i].name);
#ifdef PG_HAVE_CUDA
        const char *why = NULL;
        const int runs = attn_backend_gpu_runs(p, 64, k_alone, &why);
        cr_expect_eq(runs, kept[i].on_gpu, "%s with K alone quantized: %d (%s)", kept[i].name,
                     runs, why ? why : "-");
        if (!runs) cr_expect(why != NULL && strlen(why) > 10, "%s: no reason", kept[i].name);
        cr_expect_eq(attn_backend_gpu_runs(p, 64, 0, NULL),
                     strstr(kept[i].name, "per_token") == NULL,
                     "%s unkept", kept[i].name);
#endif
    }
    static const struct {
        const char *name;
        int on_gpu;
    } hyp[] = {{"intended-fp8kv", 1}, {"kv-scales-twice", 1}, {"kv-scales-missing", 1},
               {"k-scale-on-bf16", 1}, {"q-scale-on-bf16-q", 1}, {"q-cast-unscaled", 1},
               {"e5m2-kv-scales-twice", 1}, {"pth-scales-missing", 0},
               {"nvfp4-block-scales-lost", 0}, {"tq-q-unrotated", 0}};
    for (size_t i = 0; i < sizeof hyp / sizeof hyp[0]; i++) {
        const attn_hypothesis *h = attn_hypothesis_find(hyp[i].name);
        cr_assert_not_null(h, "%s", hyp[i].name);
        cr_expect(attn_backend_supports_hypothesis(cpu, h, &b, NULL), "cpu: %s", hyp[i].name);
#ifdef PG_HAVE_CUDA
        const char *why = NULL;
        const int runs = attn_backend_gpu_runs_hypothesis(h, 64, &why);
        cr_expect_eq(runs, hyp[i].on_gpu, "hypothesis %s: %d (%s)", hyp[i].name, runs,
                     why ? why : "-");
        if (!runs) cr_expect(why != NULL && strlen(why) > 10, "%s: no reason", hyp[i].name);
#endif
    }
    attn_backend_close(cpu);
}

Test(backend, the_cpu_runs_every_profile_and_a_layer_is_the_specification)
{
    attn_backend *be;
    char desc[128];
    pg_err err = {0};
    cr_assert_eq(attn_backend_open("cpu", 2, &be, desc, sizeof desc, &err), PG_OK, "%s", err.msg);
    cr_assert_str_eq(attn_backend_name(be), "cpu");
    cr_assert_not_null(strstr(desc, "cpu"), "%s", desc);
    const float sinks[HQ] = {0.5f, 1.0f, -0.5f, 2.0f};
    const attn_batch b = {NSEQ, seq_q, seq_kv, HQ, HKV, D, 0, 0.125f, sinks};
    for (size_t i = 0; i < attn_profile_count(); i++) {
        const char *why = "unset";
        cr_assert(attn_backend_supports(be, attn_profile_at(i), &b, &why));
        cr_assert_null(why);
    }
    uint64_t s = 7;
    const size_t nq = (size_t)attn_batch_tq(&b) * HQ * D, nkv = (size_t)attn_batch_tkv(&b) * HKV * D;
    uint16_t *q = fill(nq, &s), *k = fill(nkv, &s), *v = fill(nkv, &s);
    attn_quant_options opt = {1, fp8_e4m3_calibrated_scale(bf16_amax(q, nq)),
                            fp8_e4m3_calibrated_scale(bf16_amax(k, nkv)),
                            fp8_e4m3_calibrated_scale(bf16_amax(v, nkv)), 16, 3, 0};
    const attn_profile *var[3] = {profile("bf16"), profile("fp8kv"), profile("fp8qkv@ideal")};
    /* the specification by hand: reference, outputs, metrics */
    double *ref = malloc(nq * sizeof *ref), *scratch = malloc(nq * sizeof *scratch);
    cr_assert_eq(attn_reference(&b, q, k, v, ref, 2, &err), PG_OK);
    uint16_t *want_out[3];
    pg_metric_values want[3][HQ + 1];
    attn_quant_report want_rep[3];
    for (int i = 0; i < 3; i++) {
        want_out[i] = malloc(nq * 2);
        cr_assert_eq(attn_variant_run(var[i], &b, q, k, v, &opt, want_out[i], &want_rep[i], 2, &err),
                     PG_OK, "%s", err.msg);
        metrics_compare_heads(want_out[i], ref, attn_batch_tq(&b), HQ, D, scratch, want[i]);
    }
    /* the layer through the interface, the bf16 output given back as an external one */
    uint16_t *outs[3] = {malloc(nq * 2), NULL, malloc(nq * 2)};
    const uint16_t *ext[1] = {want_out[0]};
    pg_metric_values got[4][HQ + 1];
    attn_quant_report rep;
    const attn_layer_job job = {.b = &b, .q = q, .k = k, .v = v, .opt = &opt, .n_var = 3,
                                .var = var, .n_ext = 1, .ext = ext, .metrics = &got[0][0],
                                .rep = &rep, .out = outs};
    cr_assert_eq(attn_backend_run_layer(be, &job, &err), PG_OK, "%s", err.msg);
    for (int i = 0; i < 3; i++)
        for (int h = 0; h <= HQ; h++) {
            cr_assert_eq(got[i][h].rel_l2, want[i][h].rel_l2, "variant %d head %d", i, h - 1);
            cr_assert_eq(got[i][h].max_abs, want[i][h].max_abs);
        }
    for (int h = 0; h <= HQ; h++) cr_assert_eq(got[3][h].rel_l2, want[0][h].rel_l2);
    cr_assert_eq(memcmp(outs[0], want_out[0], nq * 2), 0);
    cr_assert_eq(memcmp(outs[2], want_out[2], nq * 2), 0);
    /* the report: k and v of the first fp8 variant, q of the fp8qkv one */
    cr_assert_eq(rep.k.n, want_rep[1].k.n);
    cr_assert_eq(rep.k.n_underflow, want_rep[1].k.n_underflow);
    cr_assert_eq(rep.v.n_nonzero, want_rep[1].v.n_nonzero);
    cr_assert_eq(rep.q.n, want_rep[2].q.n);
    cr_assert_eq(rep.q.n_underflow, want_rep[2].q.n_underflow);
    cr_assert_gt(rep.q.n, 0);
    /* one variant alone gives the same output */
    uint16_t *one = malloc(nq * 2);
    cr_assert_eq(attn_backend_run_variant(be, var[2], &b, q, k, v, &opt, one, NULL, &err), PG_OK);
    cr_assert_eq(memcmp(one, want_out[2], nq * 2), 0);
    /* the interface's other operations on the CPU: nothing to move, nothing to pin */
    cr_assert_eq(attn_backend_prefetch(be, &b, q, k, v, &err), PG_OK);
    cr_assert_eq(attn_backend_pin(be, q, nq * 2, &err), PG_OK);
    attn_backend_unpin(be, q);
    free(one);
    for (int i = 0; i < 3; i++) {
        free(want_out[i]);
        free(outs[i]);
    }
    free(ref);
    free(scratch);
    free(q);
    free(k);
    free(v);
    attn_backend_close(be);
}

/* A layer job's extra runs (attribution rows, hypotheses) are measured as
 * attribution and diagnosis measure them on their own: each row's rel_l2 is
 * the kept run's whole-layer metric against the layer's reference, each
 * hypothesis's distances are metrics_rel_l2_bf16 of the diagnosed outputs
 * against its output, bit for bit; a hypothesis that refuses the layer (a
 * TurboQuant kernel has no sinks) is marked so with the reason, its results
 * NaN; the variants' metrics do not move. */
Test(backend, extra_runs_of_a_layer_job_are_attribution_rows_and_hypotheses)
{
    attn_backend *be;
    pg_err err = {0};
    cr_assert_eq(attn_backend_open("cpu", 2, &be, NULL, 0, &err), PG_OK, "%s", err.msg);
    const float sinks[HQ] = {0.5f, 1.0f, -0.5f, 2.0f};
    const attn_batch b = {NSEQ, seq_q, seq_kv, HQ, HKV, D, 0, 0.125f, sinks};
    uint64_t s = 11;
    const int64_t tq = attn_batch_tq(&b);
    const size_t row = (size_t)HQ * D, nq = (size_t)tq * row, nkv = (size_t)attn_batch_tkv(&b) * HKV * D;
    uint16_t *q = fill(nq, &s), *k = fill(nkv, &s), *v = fill(nkv, &s);
    const attn_quant_options opt = {1, fp8_e4m3_calibrated_scale(bf16_amax(q, nq)),
                                    fp8_e4m3_calibrated_scale(bf16_amax(k, nkv)),
                                    fp8_e4m3_calibrated_scale(bf16_amax(v, nkv)), 16, 3, 0};
    const attn_profile *var[1] = {profile("fp8kv")};
    /* two diagnosed outputs: the bf16 mode's and the fp8kv mode's, beside one not diagnosed */
    uint16_t *o_bf16 = malloc(nq * 2), *o_fp8 = malloc(nq * 2);
    cr_assert_eq(attn_variant_run(profile("bf16"), &b, q, k, v, &opt, o_bf16, NULL, 2, &err), PG_OK);
    cr_assert_eq(attn_variant_run(var[0], &b, q, k, v, &opt, o_fp8, NULL, 2, &err), PG_OK);
    const uint16_t *ext[3] = {o_fp8, o_bf16, o_fp8};
    double dist[3][2];
    attn_layer_extra x[5] = {
        {.p = var[0], .keep_bf16 = ATTN_TENSORS_ALL & ~ATTN_TENSOR_V},
        {.p = profile("fp8qkv@ideal"), .keep_bf16 = ATTN_TENSORS_ALL},
        {.h = attn_hypothesis_find("intended-bf16"), .ext_rel_l2 = dist[0]},
        {.h = attn_hypothesis_find("kv-scales-twice"), .ext_rel_l2 = dist[1]},
        {.h = attn_hypothesis_find("intended-tq_k8v4"), .ext_rel_l2 = dist[2]},
    };
    pg_metric_values got[4][HQ + 1];
    double *ref = malloc(nq * sizeof *ref);
    const attn_layer_job job = {.b = &b, .q = q, .k = k, .v = v, .opt = &opt, .n_var = 1,
                                .var = var, .n_ext = 3, .ext = ext, .metrics = &got[0][0],
                                .ref_out = ref, .n_extra = 5, .extra = x, .n_diag_ext = 2};
    cr_assert_eq(attn_backend_run_layer(be, &job, &err), PG_OK, "%s", err.msg);
    double *scratch = malloc(nq * sizeof *scratch);
    uint16_t *o = malloc(nq * 2);
    pg_metric_values want;
    for (int i = 0; i < 2; i++) {
        attn_quant_options kept = opt;
        kept.keep_bf16 = x[i].keep_bf16;
        cr_assert_eq(attn_variant_run(x[i].p, &b, q, k, v, &kept, o, NULL, 2, &err), PG_OK);
        metrics_compare_bf16(o, row, ref, row, (size_t)tq, row, scratch, &want);
        cr_assert_eq(x[i].refused, 0);
        cr_assert(x[i].rel_l2 == want.rel_l2, "row %d: %.17g, alone %.17g", i, x[i].rel_l2,
                  want.rel_l2);
    }
    /* V alone quantized is far from bf16; every tensor kept, @ideal is bf16's own error */
    cr_assert_gt(x[0].rel_l2, 4 * x[1].rel_l2);
    for (int h = 2; h < 4; h++) {
        cr_assert_eq(attn_hypothesis_run(x[h].h, &b, q, k, v, &opt, o, 2, &err), PG_OK, "%s",
                     err.msg);
        cr_assert_eq(x[h].refused, 0);
        for (int e = 0; e < 2; e++)
            cr_assert(dist[h - 2][e] == metrics_rel_l2_bf16(ext[1 + e], o, nq), "hyp %d ext %d", h, e);
    }
    /* the bf16 output is intended-bf16's own, the fp8kv output is not */
    cr_assert_eq(dist[0][0], 0.0);
    cr_assert_gt(dist[0][1], 0.01);
    cr_assert_eq(x[4].refused, 1);
    cr_assert_not_null(strstr(x[4].why, "sinks"), "%s", x[4].why);
    cr_assert(isnan(x[4].rel_l2) && isnan(dist[2][0]) && isnan(dist[2][1]));
    /* the variant's metric is the one it has without extras */
    pg_metric_values heads[HQ + 1];
    metrics_compare_heads(o_fp8, ref, tq, HQ, D, scratch, heads);
    cr_assert_eq(got[0][0].rel_l2, heads[0].rel_l2);
    /* an extra naming neither a profile nor a hypothesis is the caller's bug */
    attn_layer_extra bad = {.keep_bf16 = 0};
    const attn_layer_job bad_job = {.b = &b, .q = q, .k = k, .v = v, .opt = &opt,
                                    .metrics = &got[0][0], .n_extra = 1, .extra = &bad};
    cr_assert_eq(attn_backend_run_layer(be, &bad_job, &err), PG_ERR_INTERNAL);
    cr_assert_not_null(strstr(err.msg, "neither"), "%s", err.msg);
    free(o);
    free(scratch);
    free(ref);
    free(o_bf16);
    free(o_fp8);
    free(q);
    free(k);
    free(v);
    attn_backend_close(be);
}
