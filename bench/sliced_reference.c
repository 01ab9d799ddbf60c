/*
 * sliced_reference.c: how far the int8-sliced reference
 * (kernels/attn_reference_sliced.h) sits from the fp64 reference on every
 * layer of a capture, with the default scheme and with one slice or pair
 * order fewer of each operand, and the CPU time of both (the sliced one
 * emulates int8 MMAs on the CPU: its speed there says nothing of a GPU
 * kernel's). Per layer: rel_l2 over the layer and the largest |diff| over
 * the layer's largest |ref|.
 *
 * usage: sliced_reference CAPTURE [threads]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "harness/capture/capture.h"
#include "kernels/attn.h"
#include "kernels/attn_reference_sliced.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The schemes measured: the default (ATTN_SLICED_DEFAULT), then each
 * operand with less (the fields that differ from it). */
enum { N_SCHEMES = 7 };
static void schemes_of(attn_sliced_config *c, const char **name)
{
    for (int s = 0; s < N_SCHEMES; s++) c[s] = ATTN_SLICED_DEFAULT;
    name[0] = "default (qk 4 / order 5, p 5 x v 4 / order 6)";
    name[1] = "notes' scheme A (p 4 x v 3 / order 5)";
    c[1].p_slices = 4, c[1].v_slices = 3, c[1].pv_max_order = 5;
    name[2] = "p 4 slices";
    c[2].p_slices = 4;
    name[3] = "v 3 slices, order 7";
    c[3].v_slices = 3, c[3].pv_max_order = 7;
    name[4] = "p.v order 5";
    c[4].pv_max_order = 5;
    name[5] = "qk 3 slices, order 4";
    c[5].qk_slices = 3, c[5].qk_max_order = 4;
    name[6] = "qk order 4";
    c[6].qk_max_order = 4;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: sliced_reference CAPTURE [threads]\n");
        return 2;
    }
    const int threads = argc > 2 ? atoi(argv[2]) : 2;
    capture *cap = NULL;
    pg_err err = {0};
    if (capture_open(argv[1], &cap, &err) != PG_OK) {
        fprintf(stderr, "sliced_reference: %s\n", err.msg);
        return 1;
    }
    attn_sliced_config scheme[N_SCHEMES];
    const char *name[N_SCHEMES];
    schemes_of(scheme, name);
    const int n_schemes = N_SCHEMES;
    double worst[N_SCHEMES] = {0};
    double t_ref = 0, t_sliced = 0;
    int rc = 0;
    for (int li = 0; li < cap->n_layers && rc == 0; li++) {
        const capture_layer *L = &cap->layers[li];
        const attn_batch b = {cap->n_seqs, cap->seq_q, cap->seq_kv, L->hq, L->hkv, L->d, L->window,
                              L->sm_scale, L->sinks};
        const size_t nq = (size_t)attn_batch_tq(&b) * (size_t)L->hq * (size_t)L->d;
        double *ref = malloc(nq * sizeof *ref), *sl = malloc(nq * sizeof *sl);
        double t0 = now();
        if (ref == NULL || sl == NULL ||
            attn_reference(&b, L->q, L->k, L->v, ref, threads, &err) != PG_OK) {
            fprintf(stderr, "sliced_reference: layer %d: %s\n", li, err.msg);
            rc = 1;
        }
        t_ref += now() - t0;
        printf("layer %d (window %d%s):", li, L->window, L->sinks ? ", sinks" : "");
        for (int s = 0; s < n_schemes && rc == 0; s++) {
            t0 = now();
            if (attn_reference_sliced(&b, L->q, L->k, L->v, &scheme[s], sl, threads, &err) !=
                PG_OK) {
                fprintf(stderr, "sliced_reference: layer %d: %s\n", li, err.msg);
                rc = 1;
                break;
            }
            if (s == 0) t_sliced += now() - t0;
            double num = 0, den = 0, mx = 0, big = 0;
            for (size_t i = 0; i < nq; i++) {
                num += (sl[i] - ref[i]) * (sl[i] - ref[i]);
                den += ref[i] * ref[i];
                mx = fmax(mx, fabs(sl[i] - ref[i]));
                big = fmax(big, fabs(ref[i]));
            }
            const double rel = sqrt(num / den);
            worst[s] = fmax(worst[s], rel);
            printf(" %s%.2e (max %.2e)", s == 0 ? "" : "| ", rel, mx / big);
        }
        printf("\n");
        free(ref);
        free(sl);
    }
    for (int s = 0; s < n_schemes && rc == 0; s++)
        printf("worst layer rel_l2, %s: %.3e\n", name[s], worst[s]);
    if (rc == 0)
        printf("CPU time on %d threads: fp64 reference %.2f s, sliced (default) %.2f s\n", threads,
               t_ref, t_sliced);
    capture_close(cap);
    return rc;
}
