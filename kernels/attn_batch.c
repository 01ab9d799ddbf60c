/* attn_batch.c: batch checks, token layout and FLOP counts (see attn.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "attn_layout.h"

pg_status attn_batch_check(const attn_batch *b, pg_err *err)
{
    if (b->n_seqs < 1) return pg_fail(err, PG_ERR_SHAPE, "attention batch has no sequences");
    if (b->hq < 1 || b->hkv < 1 || b->d < 1)
        return pg_fail(err, PG_ERR_SHAPE, "attention heads/dim must be positive (hq %d, hkv %d, d %d)",
                       b->hq, b->hkv, b->d);
    if (b->hq % b->hkv != 0)
        return pg_fail(err, PG_ERR_SHAPE, "query heads %d are not a multiple of kv heads %d",
                       b->hq, b->hkv);
    if (b->window < 0) return pg_fail(err, PG_ERR_SHAPE, "window %d is negative", b->window);
    if (!(isfinite(b->sm_scale) && b->sm_scale > 0))
        return pg_fail(err, PG_ERR_NUMERIC, "sm_scale %g is not a finite positive number",
                       (double)b->sm_scale);
    for (int s = 0; s < b->n_seqs; s++) {
        if (b->seq_q[s] < 1 || b->seq_kv[s] < b->seq_q[s])
            return pg_fail(err, PG_ERR_SHAPE,
                           "sequence %d: seq_q %d and seq_kv %d need 1 <= seq_q <= seq_kv", s,
                           b->seq_q[s], b->seq_kv[s]);
    }
    return PG_OK;
}

int64_t attn_batch_tq(const attn_batch *b)
{
    int64_t t = 0;
    for (int s = 0; s < b->n_seqs; s++) t += b->seq_q[s];
    return t;
}

int64_t attn_batch_tkv(const attn_batch *b)
{
    int64_t t = 0;
    for (int s = 0; s < b->n_seqs; s++) t += b->seq_kv[s];
    return t;
}

double attn_batch_flops(const attn_batch *b)
{
    double pairs = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        for (int j = 0; j < b->seq_q[s]; j++) {
            int lo, hi;
            attn_key_range(b, s, j, &lo, &hi);
            pairs += hi - lo + 1;
        }
    }
    return 4.0 * b->d * (double)b->hq * pairs;
}

pg_status attn_layout_make(const attn_batch *b, attn_layout *l, pg_err *err)
{
    l->q_off = malloc((size_t)b->n_seqs * sizeof *l->q_off);
    l->kv_off = malloc((size_t)b->n_seqs * sizeof *l->kv_off);
    if (l->q_off == NULL || l->kv_off == NULL) {
        attn_layout_free(l);
        return pg_fail(err, PG_ERR_NOMEM, "attention layout: out of memory");
    }
    int64_t q = 0, kv = 0;
    l->max_kv = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        l->q_off[s] = q;
        l->kv_off[s] = kv;
        q += b->seq_q[s];
        kv += b->seq_kv[s];
        if (b->seq_kv[s] > l->max_kv) l->max_kv = b->seq_kv[s];
    }
    return PG_OK;
}

void attn_layout_free(attn_layout *l)
{
    free(l->q_off);
    free(l->kv_off);
    l->q_off = l->kv_off = NULL;
}
