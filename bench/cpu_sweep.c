/*
 * cpu_sweep.c: times the CPU specification on a capture: the fp64 reference
 * and each precision mode, per layer, with GFLOP/s (4 * d flops per attended
 * (query, key) pair and head, attn_batch_flops), best of --reps runs.
 *
 * usage: cpu_sweep CAPTURE [threads] [reps]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/attn.h"
#include "kernels/attn_profile.h"
#include "harness/capture/capture.h"
#include "kernels/numerics.h"
#include "kernels/parallel.h"
#include "base/variant.h"

/* The rows timed: the fp64 reference, then each precision mode (base/variant.h). */
enum { MODE_REF, MODE_BF16, MODE_COUNT = 1 + PG_MODE_COUNT };

/* Row m's name: "reference", then the modes' names. */
static const char *mode_name(int m)
{
    return m == MODE_REF ? "reference" : pg_mode_name((pg_mode)(m - 1));
}

static double clock_seconds(clockid_t which)
{
    struct timespec t;
    clock_gettime(which, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double now(void) { return clock_seconds(CLOCK_MONOTONIC); }

/* Runs one mode on layer L once; returns wall seconds (and in *cpu the
 * process's CPU seconds, all threads: what a loaded machine does not inflate
 * as much), or -1 on error. */
static double run_mode(int mode, const capture *cap, const capture_layer *L, double *ref,
                       uint16_t *out, int threads, double *cpu)
{
    const attn_batch b = {cap->n_seqs, cap->seq_q, cap->seq_kv, L->hq, L->hkv, L->d,
                          L->window, L->sm_scale, L->sinks};
    const size_t nq = (size_t)cap->tq * (size_t)L->hq * (size_t)L->d;
    const size_t nkv = (size_t)cap->tkv * (size_t)L->hkv * (size_t)L->d;
    attn_quant_options fo = {1, fp8_e4m3_calibrated_scale(bf16_amax(L->q, nq)),
                           fp8_e4m3_calibrated_scale(bf16_amax(L->k, nkv)),
                           fp8_e4m3_calibrated_scale(bf16_amax(L->v, nkv)),
                           cap->block_size, 1, 0};
    pg_err err = {0};
    pg_status st = PG_OK;
    double t0 = now(), c0 = clock_seconds(CLOCK_PROCESS_CPUTIME_ID);
    switch (mode) {
    case MODE_REF: st = attn_reference(&b, L->q, L->k, L->v, ref, threads, &err); break;
    case MODE_BF16: st = attn_variant_bf16(&b, L->q, L->k, L->v, out, threads, &err); break;
    default: {
        const attn_profile *p; /* the mode's default profile */
        st = attn_profile_find(mode_name(mode), &p, &err);
        if (st == PG_OK) st = attn_variant_run(p, &b, L->q, L->k, L->v, &fo, out, NULL, threads, &err);
    }
    }
    double dt = now() - t0;
    *cpu = clock_seconds(CLOCK_PROCESS_CPUTIME_ID) - c0;
    if (st != PG_OK) {
        fprintf(stderr, "cpu_sweep: %s\n", err.msg);
        return -1;
    }
    return dt;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: cpu_sweep CAPTURE [threads] [reps]\n");
        return 2;
    }
    const int threads = argc > 2 ? atoi(argv[2]) : parallel_default_threads();
    const int reps = argc > 3 ? atoi(argv[3]) : 1;
    capture *cap = NULL;
    pg_err err = {0};
    if (capture_open(argv[1], &cap, &err) != PG_OK) {
        fprintf(stderr, "cpu_sweep: %s\n", err.msg);
        return 1;
    }
    double secs[MODE_COUNT] = {0}, cpus[MODE_COUNT] = {0}, flops = 0;
    for (int li = 0; li < cap->n_layers; li++) {
        const capture_layer *L = &cap->layers[li];
        const attn_batch b = {cap->n_seqs, cap->seq_q, cap->seq_kv, L->hq, L->hkv, L->d,
                              L->window, L->sm_scale, L->sinks};
        const size_t nq = (size_t)cap->tq * (size_t)L->hq * (size_t)L->d;
        double *ref = malloc(nq * sizeof *ref);
        uint16_t *out = malloc(nq * sizeof *out);
        flops += attn_batch_flops(&b);
        for (int m = 0; m < MODE_COUNT; m++) {
            double best = -1, best_cpu = -1;
            for (int r = 0; r < reps; r++) {
                double cpu;
                double dt = run_mode(m, cap, L, ref, out, threads, &cpu);
                if (dt < 0) return 1;
                if (best < 0 || dt < best) best = dt;
                if (best_cpu < 0 || cpu < best_cpu) best_cpu = cpu;
            }
            secs[m] += best;
            cpus[m] += best_cpu;
        }
        free(ref);
        free(out);
    }
    printf("capture %s: %d layers, %d seqs, %lld q tokens, %lld kv tokens, %d threads\n",
           argv[1], cap->n_layers, cap->n_seqs, (long long)cap->tq, (long long)cap->tkv, threads);
    printf("%-10s %10s %10s %12s\n", "mode", "seconds", "GFLOP/s", "cpu seconds");
    for (int m = 0; m < MODE_COUNT; m++)
        printf("%-10s %10.3f %10.2f %12.3f\n", mode_name(m), secs[m], flops / secs[m] / 1e9,
               cpus[m]);
    printf("attention GFLOP per mode: %.2f\n", flops / 1e9);
    capture_close(cap);
    return 0;
}
