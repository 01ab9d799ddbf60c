/*
 * sliced_reference.c: how far the int8-sliced reference
 * (kernels/attn_reference_sliced.h) sits from the fp64 reference on every
 * layer of a capture, with the default scheme and with one slice or pair
 * order fewer of each operand, and the CPU time of both (the sliced one
 * emulates int8 MMAs on the CPU: its speed there says nothing of a GPU
 * kernel's). Per layer: rel_l2 over the layer and the largest |diff| over
 * the layer's largest |ref|.
 *
 * usage: sliced_reference CAPTURE [threads [SCHEME...]]
 *   SCHEME: QK/ORDER:PxV/ORDER:TILE:ROUNDING:PEAKS, the fields of
 *   attn_sliced_config in order, ROUNDING t (truncate) or n (nearest);
 *   without any, the default (4/5:4x4/5:64:n:1) and schemes with a part
 *   less (default_schemes).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness/capture/capture.h"
#include "kernels/attn.h"
#include "kernels/attn_reference_sliced.h"
#include "base/clock.h"

/* The schemes measured without SCHEME arguments: the default
 * (ATTN_SLICED_DEFAULT), then with one of its parts less (the fields that
 * differ from it; V in 3 is notes-reference.md's scheme A as this file's
 * rules take it), and 87ba427's default (truncation, no peak key, P 5 x V 4
 * / 6). */
enum { N_DEFAULT_SCHEMES = 10, MAX_SCHEMES = 32 };
static void default_schemes(attn_sliced_config *c)
{
    for (int s = 0; s < N_DEFAULT_SCHEMES; s++) c[s] = ATTN_SLICED_DEFAULT;
    c[1].peak_keys = 0;
    c[2].rounding = ATTN_SLICE_TRUNCATE;
    c[3].p_slices = 3;
    c[4].v_slices = 3; /* notes' scheme A: P 4 x V 3, the 9 pairs of order <= 5 */
    c[5].v_slices = 2;
    c[6].pv_max_order = 4;
    c[7].qk_max_order = 4;
    c[8].qk_slices = 3;
    c[9] = (attn_sliced_config){4, 5, 5, 4, 6, 64, ATTN_SLICE_TRUNCATE, 0};
}

/* Parses "QK/ORDER:PxV/ORDER:TILE:ROUNDING:PEAKS" (ROUNDING t or n) into c;
 * 0 on success. */
static int scheme_parse(const char *text, attn_sliced_config *c)
{
    char r = 0;
    int used = 0;
    if (sscanf(text, "%d/%d:%dx%d/%d:%d:%c:%d%n", &c->qk_slices, &c->qk_max_order, &c->p_slices,
               &c->v_slices, &c->pv_max_order, &c->key_tile, &r, &c->peak_keys, &used) != 8 ||
        text[used] != '\0' || (r != 't' && r != 'n'))
        return 1;
    c->rounding = r == 'n' ? ATTN_SLICE_NEAREST : ATTN_SLICE_TRUNCATE;
    return 0;
}

/* Slice pairs (s, t), 1-based, of na x nb slices with s + t <= order: the
 * int8 MMAs one element takes. */
static int pair_count(int na, int nb, int order)
{
    int n = 0;
    for (int s = 1; s <= na; s++)
        for (int t = 1; t <= nb; t++) n += s + t <= order;
    return n;
}

/* Distinct orders among those pairs: the int32 accumulators one element
 * takes into fp64 (attn_reference_sliced.h). */
static int order_count(int na, int nb, int order)
{
    const int hi = na + nb < order ? na + nb : order;
    return hi - 1;
}

static void scheme_print(FILE *f, const attn_sliced_config *c)
{
    fprintf(f, "%d/%d:%dx%d/%d:%d:%c:%d (%d + %d MMAs, %d + %d orders)", c->qk_slices,
            c->qk_max_order, c->p_slices, c->v_slices, c->pv_max_order, c->key_tile,
            c->rounding == ATTN_SLICE_NEAREST ? 'n' : 't', c->peak_keys,
            pair_count(c->qk_slices, c->qk_slices, c->qk_max_order),
            pair_count(c->p_slices, c->v_slices, c->pv_max_order),
            order_count(c->qk_slices, c->qk_slices, c->qk_max_order),
            order_count(c->p_slices, c->v_slices, c->pv_max_order));
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3 + MAX_SCHEMES) {
        fprintf(stderr, "usage: sliced_reference CAPTURE [threads [SCHEME...]] (at most %d)\n",
                MAX_SCHEMES);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* a layer's line as it is measured */
    const int threads = argc > 2 ? atoi(argv[2]) : 2;
    attn_sliced_config scheme[MAX_SCHEMES];
    int n_schemes = N_DEFAULT_SCHEMES;
    default_schemes(scheme);
    if (argc > 3) {
        n_schemes = argc - 3;
        for (int s = 0; s < n_schemes; s++) {
            pg_err perr = {0};
            scheme[s] = ATTN_SLICED_DEFAULT;
            if (scheme_parse(argv[3 + s], &scheme[s]) != 0 ||
                attn_sliced_config_check(&scheme[s], &perr) != PG_OK) {
                fprintf(stderr, "sliced_reference: scheme '%s': %s\n", argv[3 + s],
                        perr.msg[0] ? perr.msg : "expected QK/ORDER:PxV/ORDER:TILE:t|n:PEAKS");
                return 2;
            }
        }
    }
    capture *cap = NULL;
    pg_err err = {0};
    if (capture_open(argv[1], &cap, &err) != PG_OK) {
        fprintf(stderr, "sliced_reference: %s\n", err.msg);
        return 1;
    }
    double worst[MAX_SCHEMES] = {0};
    double t_ref = 0, t_sliced = 0;
    int rc = 0;
    for (int li = 0; li < cap->n_layers && rc == 0; li++) {
        const capture_layer *L = &cap->layers[li];
        const attn_batch b = {cap->n_seqs, cap->seq_q, cap->seq_kv, L->hq, L->hkv, L->d, L->window,
                              L->sm_scale, L->sinks};
        const size_t nq = (size_t)attn_batch_tq(&b) * (size_t)L->hq * (size_t)L->d;
        double *ref = malloc(nq * sizeof *ref), *sl = malloc(nq * sizeof *sl);
        double t0 = pg_clock_mono_s();
        if (ref == NULL || sl == NULL ||
            attn_reference(&b, L->q, L->k, L->v, ref, threads, &err) != PG_OK) {
            fprintf(stderr, "sliced_reference: layer %d: %s\n", li, err.msg);
            rc = 1;
        }
        t_ref += pg_clock_mono_s() - t0;
        printf("layer %d (window %d%s):", li, L->window, L->sinks ? ", sinks" : "");
        for (int s = 0; s < n_schemes && rc == 0; s++) {
            t0 = pg_clock_mono_s();
            if (attn_reference_sliced(&b, L->q, L->k, L->v, &scheme[s], sl, threads, &err) !=
                PG_OK) {
                fprintf(stderr, "sliced_reference: layer %d: %s\n", li, err.msg);
                rc = 1;
                break;
            }
            if (s == 0) t_sliced += pg_clock_mono_s() - t0; /* the first scheme */
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
    for (int s = 0; s < n_schemes && rc == 0; s++) {
        printf("worst layer rel_l2 %.3e: ", worst[s]);
        scheme_print(stdout, &scheme[s]);
        printf("\n");
    }
    if (rc == 0)
        printf("CPU time on %d threads: fp64 reference %.2f s, sliced (first scheme) %.2f s\n", threads,
               t_ref, t_sliced);
    capture_close(cap);
    return rc;
}
