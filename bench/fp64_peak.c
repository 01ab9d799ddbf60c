/*
 * fp64_peak.c: measures this machine's fp64 peak, the yardstick of the CPU
 * reference's efficiency: independent fma chains on 8-wide vectors (enough
 * chains to cover the fma latency), one thread per CPU, best of several runs.
 *
 * usage: fp64_peak [threads]     prints GFLOP/s (2 flops per lane per fma)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define PEAK_CHAINS 12              /* independent accumulators: > latency x pipes */
#define PEAK_ITERS 50000000L        /* fma rounds per thread and run */
#define PEAK_RUNS 3

typedef double v8d __attribute__((vector_size(64)));

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static volatile double sink;

/* Runs PEAK_ITERS rounds of PEAK_CHAINS vector fmas. */
static void *peak_thread(void *arg)
{
    (void)arg;
    v8d acc[PEAK_CHAINS];
    const v8d a = {1.0000001, 1.0000001, 1.0000001, 1.0000001, 1.0000001, 1.0000001, 1.0000001, 1.0000001};
    const v8d b = {1e-9, 1e-9, 1e-9, 1e-9, 1e-9, 1e-9, 1e-9, 1e-9};
    for (int c = 0; c < PEAK_CHAINS; c++) acc[c] = b * (double)c;
    for (long i = 0; i < PEAK_ITERS; i++) {
#pragma GCC unroll 12
        for (int c = 0; c < PEAK_CHAINS; c++) acc[c] = acc[c] * a + b;
    }
    double s = 0;
    for (int c = 0; c < PEAK_CHAINS; c++)
        for (int l = 0; l < 8; l++) s += acc[c][l];
    sink = s;
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1) threads = 1;
    pthread_t *tid = malloc(sizeof *tid * (size_t)threads);
    double best = 0;
    for (int r = 0; r < PEAK_RUNS; r++) {
        double t0 = now();
        for (int t = 0; t < threads; t++) pthread_create(&tid[t], NULL, peak_thread, NULL);
        for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
        double dt = now() - t0;
        double gflops = 2.0 * 8 * PEAK_CHAINS * (double)PEAK_ITERS * threads / dt / 1e9;
        if (gflops > best) best = gflops;
    }
    printf("fp64 peak: %.1f GFLOP/s on %d threads\n", best, threads);
    free(tid);
    return 0;
}
