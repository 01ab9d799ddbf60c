/*
 * attn_layout.h: where each sequence's tokens sit in the packed tensors, and
 * which keys a query sees. Shared by every attention implementation.
 */
#ifndef PG_ATTN_LAYOUT_H
#define PG_ATTN_LAYOUT_H

#include <stdint.h>

#include "attn.h"

typedef struct attn_layout {
    int64_t *q_off;   /* [n_seqs] first query row of each sequence */
    int64_t *kv_off;  /* [n_seqs] first kv row of each sequence */
    int max_kv;       /* longest seq_kv */
} attn_layout;

/* Prefix sums of the batch's sequence lengths (batch already checked). */
pg_status attn_layout_make(const attn_batch *b, attn_layout *l, pg_err *err);

/* Frees the layout's arrays. */
void attn_layout_free(attn_layout *l);

/* Keys [*lo, *hi] (inclusive) seen by query j of sequence s. */
static inline void attn_key_range(const attn_batch *b, int s, int j, int *lo, int *hi)
{
    int ctx = b->seq_kv[s] - b->seq_q[s];
    *hi = ctx + j;
    *lo = (b->window > 0 && *hi - b->window + 1 > 0) ? *hi - b->window + 1 : 0;
}

/* The threads for work items of one (sequence, kv head) each, as the
 * references split a layer: n_threads within [1, n_seqs * hkv]. */
static inline int attn_item_threads(const attn_batch *b, int n_threads)
{
    const int items = b->n_seqs * b->hkv;
    if (n_threads > items) n_threads = items;
    return n_threads < 1 ? 1 : n_threads;
}

#endif /* PG_ATTN_LAYOUT_H */
