/*
 * gpu_kernels.c: times each CUDA kernel over every layer of a capture
 * (cuda_time_kernels: median of reps, device-resident data) and prints
 * TFLOP/s per attention kernel (attn_batch_flops: 4 d per attended pair and
 * head) and the dequant gather's bandwidth.
 *
 * usage: gpu_kernels CAPTURE [reps]
 */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/attn.h"
#include "kernels/attn_cuda.h"
#include "harness/capture/capture.h"
#include "kernels/numerics.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: gpu_kernels CAPTURE [reps]\n");
        return 2;
    }
    const int reps = argc > 2 ? atoi(argv[2]) : 5;
    pg_err err = {0};
    cuda_backend *be = NULL;
    char desc[256];
    capture *cap = NULL;
    if (cuda_backend_open(&be, desc, sizeof desc, &err) != PG_OK ||
        capture_open(argv[1], &cap, &err) != PG_OK) {
        fprintf(stderr, "gpu_kernels: %s\n", err.msg);
        return 1;
    }
    cuda_kernel_times sum = {0}, full = {0}; /* full: full-attention layers only */
    double flops = 0, flops_full = 0;
    for (int li = 0; li < cap->n_layers; li++) {
        const capture_layer *L = &cap->layers[li];
        const attn_batch b = {cap->n_seqs, cap->seq_q, cap->seq_kv, L->hq, L->hkv, L->d,
                              L->window, L->sm_scale, L->sinks};
        const size_t nq = (size_t)cap->tq * L->hq * L->d, nkv = (size_t)cap->tkv * L->hkv * L->d;
        attn_quant_options fo = {1, fp8_e4m3_calibrated_scale(bf16_amax(L->q, nq)),
                               fp8_e4m3_calibrated_scale(bf16_amax(L->k, nkv)),
                               fp8_e4m3_calibrated_scale(bf16_amax(L->v, nkv)),
                               cap->block_size, 1, 0};
        cuda_kernel_times t;
        if (cuda_time_kernels(be, &b, L->q, L->k, L->v, &fo, reps, &t, &err) != PG_OK) {
            fprintf(stderr, "gpu_kernels: layer %d: %s\n", li, err.msg);
            return 1;
        }
        sum.reference += t.reference;
        sum.cache_write_e4m3 += t.cache_write_e4m3;
        sum.dequant_gather += t.dequant_gather;
        sum.attn_bf16 += t.attn_bf16;
        sum.quantize_q += t.quantize_q;
        sum.attn_fp8 += t.attn_fp8;
        sum.metrics += t.metrics;
        sum.gather_bytes += t.gather_bytes;
        flops += attn_batch_flops(&b);
        if (L->window == 0) {
            flops_full += attn_batch_flops(&b);
            full.reference += t.reference;
            full.attn_bf16 += t.attn_bf16;
            full.attn_fp8 += t.attn_fp8;
        }
    }
    printf("%s; capture %s: %d layers, %lld q tokens, %lld kv tokens; median of %d\n", desc,
           argv[1], cap->n_layers, (long long)cap->tq, (long long)cap->tkv, reps);
    printf("attention TFLOP per pass: %.3f (full-attention layers %.3f)\n", flops / 1e12,
           flops_full / 1e12);
    printf("%-18s %10s %10s\n", "kernel", "ms", "rate");
    printf("%-18s %10.2f %7.1f TFLOP/s\n", "reference fp64", sum.reference, flops / sum.reference / 1e9);
    printf("%-18s %10.2f %7.1f TFLOP/s\n", "attn bf16", sum.attn_bf16, flops / sum.attn_bf16 / 1e9);
    printf("%-18s %10.2f %7.1f TFLOP/s\n", "attn fp8", sum.attn_fp8, flops / sum.attn_fp8 / 1e9);
    if (flops_full > 0) {
        printf("%-18s %10.2f %7.1f TFLOP/s   (full-attention layers only)\n", "reference fp64",
               full.reference, flops_full / full.reference / 1e9);
        printf("%-18s %10.2f %7.1f TFLOP/s   (full-attention layers only)\n", "attn bf16",
               full.attn_bf16, flops_full / full.attn_bf16 / 1e9);
        printf("%-18s %10.2f %7.1f TFLOP/s   (full-attention layers only)\n", "attn fp8",
               full.attn_fp8, flops_full / full.attn_fp8 / 1e9);
    }
    printf("%-18s %10.2f %7.1f GB/s\n", "dequant gather", sum.dequant_gather,
           sum.gather_bytes / sum.dequant_gather / 1e6);
    printf("%-18s %10.2f\n", "cache write e4m3", sum.cache_write_e4m3);
    printf("%-18s %10.2f\n", "quantize q", sum.quantize_q);
    printf("%-18s %10.2f   (one mode's comparison)\n", "metrics", sum.metrics);
    const double sweep = sum.reference + 2 * sum.cache_write_e4m3 + sum.dequant_gather +
                         2 * sum.attn_bf16 + sum.quantize_q + sum.attn_fp8 + 3 * sum.metrics;
    printf("%-18s %10.2f   (reference + 3 modes + 3 comparisons, kernels only)\n", "sweep kernels",
           sweep);
    capture_close(cap);
    cuda_backend_close(be);
    return 0;
}
