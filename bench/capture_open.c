/*
 * capture_open.c: times capture_open (map, validate, the NaN/Inf scan and
 * amax, and the content digest) on a capture, with the page cache warm:
 * best and median of --reps opens after one untimed open, in wall time and
 * in CPU time (user + system, all threads: the measure that other work on a
 * shared machine disturbs least).
 *
 * usage: capture_open CAPTURE [reps]
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "harness/capture/capture.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* CPU seconds (user + system) this process has used, all threads. */
static double cpu_seconds(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec +
           (double)u.ru_stime.tv_sec + 1e-6 * (double)u.ru_stime.tv_usec;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: capture_open CAPTURE [reps]\n");
        return 2;
    }
    const int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (reps < 1 || reps > 1000) {
        fprintf(stderr, "capture_open: reps must be 1..1000\n");
        return 2;
    }
    double *t = calloc((size_t)reps, sizeof *t), *cpu = calloc((size_t)reps, sizeof *cpu);
    if (t == NULL || cpu == NULL) return 1;
    for (int r = -1; r < reps; r++) {  /* r = -1: warms the page cache, untimed */
        pg_err err = {0};
        capture *c = NULL;
        const double t0 = now(), c0 = cpu_seconds();
        if (capture_open(argv[1], &c, &err) != PG_OK) {
            fprintf(stderr, "capture_open: %s\n", err.msg);
            free(t);
            free(cpu);
            return 1;
        }
        const double dt = now() - t0, dc = cpu_seconds() - c0;
        if (r >= 0) {
            t[r] = dt;
            cpu[r] = dc;
        }
        if (r == reps - 1) printf("%s: %d layers\n", argv[1], c->n_layers);
        capture_close(c);
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    qsort(cpu, (size_t)reps, sizeof *cpu, cmp_double);
    printf("capture_open: wall best %.1f ms, median %.1f ms; cpu best %.1f ms, median %.1f ms "
           "(%d opens)\n", 1e3 * t[0], 1e3 * t[reps / 2], 1e3 * cpu[0], 1e3 * cpu[reps / 2], reps);
    free(t);
    free(cpu);
    return 0;
}
