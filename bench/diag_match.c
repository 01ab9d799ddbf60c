/*
 * diag_match.c: the measurement behind DIAG_MATCH_REL_L2 (harness/diag_verdict.h):
 * on every layer of a capture, at the sweep's default quantized-mode options (the
 * capture's scales, else amax / 448), each pair of kernel profiles of one
 * mode that run on the layer, each as the other's reference: how far a real
 * kernel of the mode sits from another profile of it. Prints the largest
 * per mode with its pair and layer, then the time the sweep's diagnosis
 * (diag_layer_run, one external output) takes per layer. With SHARD, also
 * writes a capture shard whose external output layers.L.out.HYP (HYP a
 * hypothesis name, e.g. kv-scales-twice) is that hypothesis's output under
 * the same options: put it beside CAPTURE in a directory and sweep that.
 *
 * usage: diag_match CAPTURE [threads [HYP SHARD]]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/attn.h"
#include "kernels/attn_backend.h"
#include "kernels/attn_hypothesis.h"
#include "kernels/attn_profile.h"
#include "harness/capture/capture.h"
#include "harness/diagnose.h"
#include "kernels/parallel.h"
#include "harness/capture/safetensors.h"
#include "harness/sweep.h"
#include "base/variant.h"

/* Most profiles the table holds (attn_profile_count checked against it). */
#define MAX_PROFILES 32
/* Every mode's bit: the diagnosis asks every hypothesis. */
#define ALL_MODES ((1u << PG_MODE_COUNT) - 1u)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: diag_match CAPTURE [threads]\n");
        return 2;
    }
    const int threads = argc > 2 ? atoi(argv[2]) : parallel_default_threads();
    pg_err err = {0};
    capture *cap = NULL;
    if (capture_open(argv[1], &cap, &err) != PG_OK) {
        fprintf(stderr, "diag_match: %s\n", err.msg);
        return 1;
    }
    const size_t np = attn_profile_count();
    if (np > MAX_PROFILES) {
        fprintf(stderr, "diag_match: the profile table holds %zu profiles, more than its %d\n", np,
                MAX_PROFILES);
        return 1;
    }
    const sweep_options so = {.n_threads = threads};
    /* The hypotheses on the CPU specification, or on the GPU where it runs
     * them when DIAG_BACKEND=cuda. */
    attn_backend *cpu = NULL, *be = NULL;
    const char *be_name = getenv("DIAG_BACKEND") != NULL ? getenv("DIAG_BACKEND") : "cpu";
    if (attn_backend_open("cpu", threads, &cpu, NULL, 0, &err) != PG_OK ||
        (strcmp(be_name, "cpu") != 0 &&
         attn_backend_open(be_name, threads, &be, NULL, 0, &err) != PG_OK)) {
        fprintf(stderr, "diag_match: %s\n", err.msg);
        return 1;
    }
    if (be == NULL) be = cpu;
    const attn_hypothesis *write_h = argc > 4 ? attn_hypothesis_find(argv[3]) : NULL;
    if (argc > 4 && write_h == NULL) {
        fprintf(stderr, "diag_match: no hypothesis '%s'\n", argv[3]);
        return 2;
    }
    st_writer *w = NULL;
    if (write_h != NULL && st_writer_create(&w, &err) != PG_OK) return 1;
    uint16_t **keep = calloc((size_t)cap->n_layers, sizeof *keep);
    double worst[PG_MODE_COUNT] = {0};
    char worst_what[PG_MODE_COUNT][160] = {""};
    double diag_s = 0;
    int rc = 0;
    for (int li = 0; li < cap->n_layers && rc == 0; li++) {
        const capture_layer *L = &cap->layers[li];
        const attn_batch b = {cap->n_seqs, cap->seq_q, cap->seq_kv, L->hq, L->hkv, L->d,
                              L->window, L->sm_scale, L->sinks};
        attn_quant_options fo;
        sweep_layer_quant_options(cap, li, &so, &fo);
        const size_t nq = (size_t)cap->tq * (size_t)L->hq * (size_t)L->d;
        uint16_t *out[MAX_PROFILES] = {NULL};
        for (size_t p = 0; p < np && rc == 0; p++) {
            const attn_profile *pr = attn_profile_at(p);
            /* fp8kv@vllm-24197 emulates a bug (kv-scales-twice), not a kernel of the mode. */
            if (strcmp(attn_profile_variant(pr), variant_profile_name(VARIANT_FP8KV_VLLM_24197)) == 0)
                continue;
            out[p] = malloc(nq * 2);
            pg_err why = {0};
            const pg_status st = attn_variant_run(pr, &b, L->q, L->k, L->v, &fo, out[p], NULL,
                                                  threads, &why);
            if (st == PG_ERR_UNSUPPORTED) {  /* refuses the layer (no sinks) */
                free(out[p]);
                out[p] = NULL;
            } else if (st != PG_OK) {
                fprintf(stderr, "diag_match: layer %d %s: %s\n", li, attn_profile_variant(pr),
                        why.msg);
                rc = 1;
            }
        }
        for (size_t a = 0; a < np; a++)
            for (size_t c = 0; c < np; c++) {
                if (a == c || out[a] == NULL || out[c] == NULL) continue;
                const pg_mode m = attn_profile_mode(attn_profile_at(a));
                if (m != attn_profile_mode(attn_profile_at(c))) continue;
                const double d = metrics_rel_l2_bf16(out[a], out[c], nq);
                if (d > worst[m]) {
                    worst[m] = d;
                    snprintf(worst_what[m], sizeof worst_what[m], "%s against %s, layer %d",
                             attn_profile_variant(attn_profile_at(a)),
                             attn_profile_variant(attn_profile_at(c)), li);
                }
            }
        /* The diagnosis of one external output (the first profile's output). */
        const capture_ext_output ext = {"bench", out[0]};
        diag_layer dl = {0};
        const double t0 = now();
        if (rc == 0 && diag_layer_run(be, cpu, &b, L->q, L->k, L->v, &fo, ALL_MODES, 1, &ext, &dl,
                                      &err) != PG_OK) {
            fprintf(stderr, "diag_match: layer %d diagnosis: %s\n", li, err.msg);
            rc = 1;
        }
        diag_s += now() - t0;
        diag_layer_free(&dl);
        if (rc == 0 && write_h != NULL) {
            keep[li] = malloc(nq * 2);
            char name[96];
            snprintf(name, sizeof name, "layers.%d.out.%s", li, argv[3]);
            const int64_t shape[3] = {cap->tq, L->hq, L->d};
            if (attn_hypothesis_run(write_h, &b, L->q, L->k, L->v, &fo, keep[li], threads,
                                    &err) != PG_OK ||
                st_writer_add_tensor(w, name, ST_BF16, 3, shape, keep[li], &err) != PG_OK) {
                fprintf(stderr, "diag_match: %s\n", err.msg);
                rc = 1;
            }
        }
        for (size_t p = 0; p < np; p++) free(out[p]);
    }
    for (int m = 0; m < PG_MODE_COUNT && rc == 0; m++)
        printf("%-7s largest rel_l2 between two profiles: %.4g (%s)\n", pg_mode_name((pg_mode)m),
               worst[m],
               worst_what[m][0] ? worst_what[m] : "one profile runs");
    if (rc == 0)
        printf("diagnosis of one external output: %.3f s for %d layers (%.1f ms a layer, %d "
               "threads, hypotheses on %s where it runs them)\n", diag_s, cap->n_layers,
               1e3 * diag_s / cap->n_layers, threads, be_name);
    if (rc == 0 && w != NULL && st_writer_write(w, argv[4], &err) != PG_OK) {
        fprintf(stderr, "diag_match: %s\n", err.msg);
        rc = 1;
    }
    st_writer_free(w);
    for (int li = 0; li < cap->n_layers; li++) free(keep[li]);
    free(keep);
    capture_close(cap);
    if (be != cpu) attn_backend_close(be);
    attn_backend_close(cpu);
    return rc;
}
