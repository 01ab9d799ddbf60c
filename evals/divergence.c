/* divergence.c: teacher-forced divergence per position and per mode (see divergence.h). */
#include "divergence.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One reported token: its id, logprob and probability exp(logprob),
 * computed once (a position's terms use each probability up to three
 * times: the mass, the shared sum, the KL term). */
typedef struct view_entry {
    int32_t id;
    double lp, p;
} view_entry;

/* qsort order of entries by id. */
static int entry_id_cmp(const void *a, const void *b)
{
    const int32_t x = ((const view_entry *)a)->id, y = ((const view_entry *)b)->id;
    return (x > y) - (x < y);
}

/* qsort order of doubles, ascending. */
static int double_cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Checks one logprob of side (name) at what: not NaN, not above 0 beyond rounding. */
static pg_status check_logprob(double lp, char side, const char *what, pg_err *err)
{
    if (isnan(lp) || lp > DIV_MASS_TOL)
        return pg_fail(err, PG_ERR_NUMERIC, "divergence: side %c: %s logprob %g is not a "
                       "log-probability (NaN or above 0)", side, what, lp);
    return PG_OK;
}

/* Lists up to this long are sorted by insertion (no call per comparison)
 * and held on the stack: K = 20 is vLLM's default --max-logprobs. */
#define DIV_SMALL_LIST 64

/* Sorts e[0..n) by id: insertion for short lists, qsort otherwise. */
static void sort_by_id(view_entry *e, size_t n)
{
    if (n > DIV_SMALL_LIST) {
        qsort(e, n, sizeof *e, entry_id_cmp);
        return;
    }
    for (size_t i = 1; i < n; i++) {
        const view_entry x = e[i];
        size_t j = i;
        for (; j > 0 && e[j - 1].id > x.id; j--) e[j] = e[j - 1];
        e[j] = x;
    }
}

/* One side sorted by id, checked, with its top-1, top-K mass and the given
 * token's logprob (NaN when not reported) and probability. */
typedef struct side_view {
    view_entry *sorted;     /* small or malloc'd */
    view_entry small[DIV_SMALL_LIST];
    size_t n;
    int32_t top1;
    double mass;     /* sum of the top-K probabilities */
    double given_lp, given_p;
} side_view;

/* The entry of id in v, or NULL (binary search: v is sorted by id). */
static const view_entry *find_id(const side_view *v, int32_t id)
{
    size_t lo = 0, hi = v->n;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (v->sorted[mid].id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < v->n && v->sorted[lo].id == id ? &v->sorted[lo] : NULL;
}

/* Frees what view_side allocated. */
static void view_free(side_view *v)
{
    if (v->sorted != v->small) free(v->sorted);
    v->sorted = NULL;
}

/* Builds *v from s (name: 'P' or 'Q'); view_free it, also after a failure. */
static pg_status view_side(const div_side *s, char name, side_view *v, pg_err *err)
{
    v->sorted = NULL;
    v->n = 0;
    v->mass = 0;
    if (s->top == NULL || s->n_top == 0)
        return pg_fail(err, PG_ERR_INTERNAL, "divergence: side %c has an empty top-K list", name);
    v->sorted = s->n_top <= DIV_SMALL_LIST ? v->small : malloc(s->n_top * sizeof *v->sorted);
    if (v->sorted == NULL) return pg_fail(err, PG_ERR_NOMEM, "divergence: out of memory");
    v->n = s->n_top;
    for (size_t i = 0; i < v->n; i++) {
        const double lp = s->top[i].logprob;
        pg_status st = check_logprob(lp, name, "a top-K", err);
        if (st != PG_OK) return st;
        v->sorted[i] = (view_entry){s->top[i].id, lp, exp(lp)};
    }
    sort_by_id(v->sorted, v->n);
    double best = -INFINITY;
    v->top1 = v->sorted[0].id;
    for (size_t i = 0; i < v->n; i++) {
        const view_entry *e = &v->sorted[i];
        if (i > 0 && e->id == v->sorted[i - 1].id)
            return pg_fail(err, PG_ERR_FORMAT, "divergence: side %c lists token %d twice", name,
                           (int)e->id);
        if (e->lp > best) {  /* ascending ids: the first of equal logprobs wins */
            best = e->lp;
            v->top1 = e->id;
        }
        v->mass += e->p;
    }
    const view_entry *g = find_id(v, s->given);
    v->given_lp = s->given_logprob;
    v->given_p = NAN;
    if (!isnan(v->given_lp)) {
        pg_status st = check_logprob(v->given_lp, name, "the given token's", err);
        if (st != PG_OK) return st;
        if (g != NULL && fabs(g->lp - v->given_lp) > DIV_MASS_TOL)
            return pg_fail(err, PG_ERR_FORMAT, "divergence: side %c reports token %d at logprob "
                           "%g in its list and %g as the given token", name, (int)s->given,
                           g->lp, v->given_lp);
        v->given_p = g != NULL && g->lp == v->given_lp ? g->p : exp(v->given_lp);
    } else if (g != NULL) {
        v->given_lp = g->lp;
        v->given_p = g->p;
    }
    const double total = v->mass + (g == NULL && !isnan(v->given_lp) ? v->given_p : 0);
    if (total > 1 + DIV_MASS_TOL)
        return pg_fail(err, PG_ERR_NUMERIC, "divergence: side %c's reported probabilities sum "
                       "to %.9g, over 1 (not a softmax)", name, total);
    return PG_OK;
}

/* p ln(p/q) from logprobs lp, lq and p = exp(lp); 0 when p = 0. */
static double kl_term(double lp, double p, double lq)
{
    return lp == -INFINITY ? 0 : p * (lp - lq);
}

/* The bucket term r_P ln(r_P/r_Q) (divergence.h), or PG_ERR_NUMERIC. */
static pg_status bucket_term(double r_p, double r_q, double *out, pg_err *err)
{
    *out = 0;
    if (r_p <= 0) return PG_OK;
    if (r_q <= 0) {
        if (r_p <= DIV_MASS_TOL) return PG_OK;  /* both within rounding of 0 */
        return pg_fail(err, PG_ERR_NUMERIC, "divergence: Q puts all its mass on the tokens both "
                       "sides report while P leaves %.6g outside them (infinite KL: not a "
                       "softmax)", r_p);
    }
    *out = r_p * (log(r_p) - log(r_q));
    return PG_OK;
}

pg_status div_position_compute(const div_side *p, const div_side *q, div_position *out,
                               pg_err *err)
{
    if (p == NULL || q == NULL || out == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "div_position_compute: NULL argument");
    if (p->given != q->given)
        return pg_fail(err, PG_ERR_INTERNAL, "div_position_compute: the sides score different "
                       "tokens (%d, %d)", (int)p->given, (int)q->given);
    side_view vp, vq;
    vq.sorted = NULL;
    pg_status st = view_side(p, 'P', &vp, err);
    if (st == PG_OK) st = view_side(q, 'Q', &vq, err);
    double kl = 0, sum_p = 0, sum_q = 0;
    int given_in_both_lists = 0;
    /* The ids in both lists, by merging the id-sorted copies. */
    for (size_t i = 0, j = 0; st == PG_OK && i < vp.n && j < vq.n;) {
        const view_entry *a = &vp.sorted[i], *b = &vq.sorted[j];
        if (a->id < b->id) { i++; continue; }
        if (b->id < a->id) { j++; continue; }
        kl += kl_term(a->lp, a->p, b->lp);
        sum_p += a->p;
        sum_q += b->p;
        given_in_both_lists |= a->id == p->given;
        i++;
        j++;
    }
    const int given_known = !isnan(vp.given_lp) && !isnan(vq.given_lp);
    if (st == PG_OK && given_known && !given_in_both_lists) {
        kl += kl_term(vp.given_lp, vp.given_p, vq.given_lp);
        sum_p += vp.given_p;
        sum_q += vq.given_p;
    }
    double bucket = 0;
    if (st == PG_OK) st = bucket_term(1 - sum_p, 1 - sum_q, &bucket, err);
    if (st == PG_OK) {
        memset(out, 0, sizeof *out);
        out->kld_lb = fmax(0, kl + bucket);
        out->tail_p = fmin(1, fmax(0, 1 - vp.mass));
        out->lp = vp.given_lp;
        out->lq = vq.given_lp;
        out->dlogprob = given_known ? vq.given_lp - vp.given_lp : NAN;
        out->dp = given_known ? vq.given_p - vp.given_p : NAN;
        out->top_p = vp.top1;
        out->top_q = vq.top1;
        out->same_top = vp.top1 == vq.top1;
    }
    view_free(&vp);
    view_free(&vq);
    return st;
}

double div_interpolate(const double *sorted, size_t n, double f)
{
    if (sorted == NULL || n == 0 || !(f >= 0 && f <= 1)) return NAN;
    const double x = f * (double)(n - 1);
    const size_t lo = (size_t)floor(x);
    if (lo + 1 >= n) return sorted[n - 1];
    return sorted[lo] + (x - (double)lo) * (sorted[lo + 1] - sorted[lo]);
}

/* The SE of sum(x)/sum(n_s) clustered by sequence: sums[s] of x over
 * sequence s's count[s] positions (divergence.h); NaN for fewer than 2. */
static double clustered_se(const double *sums, const size_t *count, size_t n_seq_slots,
                           double mean, size_t n_total)
{
    size_t c = 0;
    double ss = 0;
    for (size_t s = 0; s < n_seq_slots; s++) {
        if (count[s] == 0) continue;
        const double r = sums[s] - mean * (double)count[s];
        ss += r * r;
        c++;
    }
    if (c < 2 || n_total == 0) return NAN;
    return sqrt((double)c / (double)(c - 1) * ss) / (double)n_total;
}

pg_status div_summary_compute(const div_position *pos, const size_t *seq, size_t n,
                              div_summary *out, pg_err *err)
{
    if (out == NULL || (n > 0 && (pos == NULL || seq == NULL)))
        return pg_fail(err, PG_ERR_INTERNAL, "div_summary_compute: NULL argument");
    memset(out, 0, sizeof *out);
    out->n_positions = n;
    for (size_t i = 0; i < n; i++)
        if (seq[i] >= n)
            return pg_fail(err, PG_ERR_INTERNAL, "div_summary_compute: sequence index %zu of "
                           "position %zu is not below %zu", seq[i], i, n);
    const size_t slots = n > 0 ? n : 1;
    double *kld = malloc(slots * sizeof *kld), *tail = malloc(slots * sizeof *tail);
    double *kl_sum = calloc(slots, sizeof *kl_sum), *top_sum = calloc(slots, sizeof *top_sum);
    size_t *count = calloc(slots, sizeof *count);
    pg_status st = PG_OK;
    if (!kld || !tail || !kl_sum || !top_sum || !count)
        st = pg_fail(err, PG_ERR_NOMEM, "divergence: out of memory for %zu positions", n);
    double kl_total = 0, same = 0, dp = 0, dp2 = 0, dlp = 0;
    for (size_t i = 0; st == PG_OK && i < n; i++) {
        const div_position *x = &pos[i];
        kld[i] = x->kld_lb;
        tail[i] = x->tail_p;
        kl_total += x->kld_lb;
        same += x->same_top;
        kl_sum[seq[i]] += x->kld_lb;
        top_sum[seq[i]] += x->same_top;
        count[seq[i]]++;
        if (!isnan(x->dlogprob) && !isnan(x->dp)) {
            out->n_given++;
            dp += x->dp;
            dp2 += x->dp * x->dp;
            dlp += x->dlogprob;
        }
    }
    const double undefined = NAN;
    out->kld_mean = out->kld_mean_se = out->kld_ci_low = out->kld_ci_high = undefined;
    out->same_top = out->same_top_se = out->tail_mass_median = undefined;
    out->mean_dp = out->rms_dp = out->mean_dlogprob = out->ppl_ratio = undefined;
    for (int k = 0; k < DIV_N_PERCENTILES; k++) out->kld_percentile[k] = undefined;
    if (st == PG_OK && n > 0) {
        for (size_t s = 0; s < n; s++) out->n_sequences += count[s] > 0;
        out->kld_mean = kl_total / (double)n;
        out->kld_mean_se = clustered_se(kl_sum, count, n, out->kld_mean, n);
        out->kld_ci_low = out->kld_mean - DIV_Z_975 * out->kld_mean_se;
        out->kld_ci_high = out->kld_mean + DIV_Z_975 * out->kld_mean_se;
        out->same_top = same / (double)n;
        out->same_top_se = clustered_se(top_sum, count, n, out->same_top, n);
        qsort(kld, n, sizeof *kld, double_cmp);
        qsort(tail, n, sizeof *tail, double_cmp);
        static const double pct[DIV_N_PERCENTILES] = DIV_PERCENTILES;
        for (int k = 0; k < DIV_N_PERCENTILES; k++)
            out->kld_percentile[k] = div_interpolate(kld, n, pct[k] / 100.0);
        out->tail_mass_median = div_interpolate(tail, n, 0.5);
        if (out->n_given > 0) {
            const double g = (double)out->n_given;
            out->mean_dp = dp / g;
            out->rms_dp = sqrt(dp2 / g);
            out->mean_dlogprob = dlp / g;
            out->ppl_ratio = exp(-out->mean_dlogprob);
        }
    }
    free(kld);
    free(tail);
    free(kl_sum);
    free(top_sum);
    free(count);
    return st;
}

div_seq_total div_seq_total_of(const div_position *pos, size_t n)
{
    div_seq_total t = {.n = n};
    for (size_t i = 0; i < n; i++) {
        t.kld_sum += pos[i].kld_lb;
        t.same_top += pos[i].same_top;
    }
    return t;
}

pg_status div_paired_compute(const div_seq_total *run, const div_seq_total *base, size_t n,
                             div_paired *out, pg_err *err)
{
    if (out == NULL || (n > 0 && (run == NULL || base == NULL)))
        return pg_fail(err, PG_ERR_INTERNAL, "div_paired_compute: NULL argument");
    memset(out, 0, sizeof *out);
    const size_t slots = n > 0 ? n : 1;
    double *dk = malloc(slots * sizeof *dk), *dt = malloc(slots * sizeof *dt);
    size_t *count = malloc(slots * sizeof *count);
    pg_status st = dk && dt && count ? PG_OK
                                     : pg_fail(err, PG_ERR_NOMEM, "divergence: out of memory "
                                               "for %zu sequence pairs", n);
    double kr = 0, kb = 0, tr = 0, tb = 0;
    size_t total = 0;
    for (size_t i = 0; st == PG_OK && i < n; i++) {
        if (run[i].n != base[i].n) {
            st = pg_fail(err, PG_ERR_FORMAT, "divergence: pair %zu: %zu scored positions in the "
                         "run, %zu in the baseline: not the same sequence", i, run[i].n,
                         base[i].n);
            break;
        }
        dk[i] = run[i].kld_sum - base[i].kld_sum;
        dt[i] = run[i].same_top - base[i].same_top;
        count[i] = run[i].n;
        kr += run[i].kld_sum;
        kb += base[i].kld_sum;
        tr += run[i].same_top;
        tb += base[i].same_top;
        total += run[i].n;
        out->n_sequences += run[i].n > 0;
    }
    const double undefined = NAN;
    out->kld_run = out->kld_base = out->kld_diff = out->kld_diff_se = undefined;
    out->kld_diff_low = out->kld_diff_high = undefined;
    out->same_top_run = out->same_top_base = out->same_top_diff = undefined;
    out->same_top_diff_se = out->same_top_diff_low = out->same_top_diff_high = undefined;
    out->n_positions = total;
    if (st == PG_OK && total > 0) {
        const double N = (double)total;
        out->kld_run = kr / N;
        out->kld_base = kb / N;
        /* The difference of the sums, not of the rounded means: an identical
         * run differs by exactly 0. */
        double d = 0, e = 0;
        for (size_t i = 0; i < n; i++) {
            d += dk[i];
            e += dt[i];
        }
        out->kld_diff = d / N;
        out->kld_diff_se = clustered_se(dk, count, n, out->kld_diff, total);
        out->kld_diff_low = out->kld_diff - DIV_Z_975 * out->kld_diff_se;
        out->kld_diff_high = out->kld_diff + DIV_Z_975 * out->kld_diff_se;
        out->same_top_run = tr / N;
        out->same_top_base = tb / N;
        out->same_top_diff = e / N;
        out->same_top_diff_se = clustered_se(dt, count, n, out->same_top_diff, total);
        out->same_top_diff_low = out->same_top_diff - DIV_Z_975 * out->same_top_diff_se;
        out->same_top_diff_high = out->same_top_diff + DIV_Z_975 * out->same_top_diff_se;
    }
    free(dk);
    free(dt);
    free(count);
    return st;
}
