/*
 * rht_signs.c: prints the signs of vLLM's int4 rotation (kernels/rht.h) for
 * each head dim given, one line "d: +-+-..." each, so that bench/gpu_formats.sh
 * can compare them with torch's on the GPU machine (which has PyTorch).
 */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/rht.h"

int main(int argc, char **argv)
{
    for (int a = 1; a < argc; a++) {
        const int d = atoi(argv[a]);
        if (!rht_dim_ok(d)) {
            fprintf(stderr, "rht_signs: %s is not a power of two in [2, %d]\n", argv[a],
                    RHT_MAX_DIM);
            return 2;
        }
        float s[RHT_MAX_DIM];
        rht_signs(RHT_SIGN_SEED, d, s);
        printf("%d: ", d);
        for (int i = 0; i < d; i++) putchar(s[i] > 0 ? '+' : '-');
        putchar('\n');
    }
    return 0;
}
