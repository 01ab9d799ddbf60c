/* junit.c: a gate pass's verdicts as JUnit XML (see junit.h). */
#include "junit.h"

#include "atomic_file.h"
#include "base/utf8.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Mode of the written file: readable by the CI user, like a plain fopen. */
#define JUNIT_FILE_MODE 0644

void junit_escape(FILE *out, const char *s, int in_attribute)
{
    if (s == NULL) return;
    const char *p = s;
    while (*p != '\0') {
        size_t span = 1;
        const size_t n = utf8_markup_len(p, &span);
        if (n == 0) {
            fputc('?', out);
            p += span;
            continue;
        }
        if (n > 1) {
            fwrite(p, 1, n, out);
            p += n;
            continue;
        }
        switch (*p) {
        case '&': fputs("&amp;", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '"': fputs("&quot;", out); break;
        case '\'': fputs("&apos;", out); break;
        case '\n': fputs(in_attribute ? "&#10;" : "\n", out); break;
        case '\t': fputs(in_attribute ? "&#9;" : "\t", out); break;
        case '\r': fputs("&#13;", out); break;
        default: fputc(*p, out); break;
        }
        p++;
    }
}

/* strcmp with NULL first. */
static int str_cmp0(const char *a, const char *b)
{
    if (a == NULL || b == NULL) return (a != NULL) - (b != NULL);
    return strcmp(a, b);
}

/* Orders flags by testcase: scope, then its key; equal keys keep array order. */
static int testcase_cmp(const gate_flag *x, const gate_flag *y)
{
    if (x->scope != y->scope) return x->scope < y->scope ? -1 : 1;
    int c;
    if (x->scope == GATE_SCOPE_EVAL) {
        if ((c = str_cmp0(x->eval, y->eval)) != 0) return c;
        if ((c = str_cmp0(x->effort, y->effort)) != 0) return c;
        return str_cmp0(x->mode, y->mode);
    }
    if ((c = str_cmp0(x->capture, y->capture)) != 0) return c;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return str_cmp0(x->variant, y->variant);
}

/* qsort comparator over pointers into one flags array: testcase_cmp, then
 * array order (the pointers' order), so a testcase keeps its flags' order. */
static int flag_ptr_cmp(const void *a, const void *b)
{
    const gate_flag *x = *(const gate_flag *const *)a, *y = *(const gate_flag *const *)b;
    const int c = testcase_cmp(x, y);
    if (c != 0) return c;
    return x < y ? -1 : x > y;
}

/* What a testcase's flags add up to. */
typedef struct tc_state {
    const gate_flag *first_error, *first_regression;
    const gate_flag *first_skipped;  /* a cell not computed: JUnit's <skipped> */
} tc_state;

/* The first error and first regression among the n flags g[0..n) (NULL when none). */
static tc_state testcase_state(const gate_flag *const *g, size_t n)
{
    tc_state t = {NULL, NULL, NULL};
    for (size_t i = 0; i < n; i++) {
        if (g[i]->verdict == GATE_VERDICT_SKIPPED && t.first_skipped == NULL) t.first_skipped = g[i];
        if (g[i]->verdict == GATE_VERDICT_ERROR && t.first_error == NULL) t.first_error = g[i];
        /* A scale bug names the cause of the layer's other regressions: it leads. */
        if (g[i]->verdict == GATE_VERDICT_REGRESSION &&
            (t.first_regression == NULL ||
             (strcmp(g[i]->metric, GATE_METRIC_SCALE_BUG) == 0 &&
              strcmp(t.first_regression->metric, GATE_METRIC_SCALE_BUG) != 0)))
            t.first_regression = g[i];
    }
    return t;
}

/* Writes one testcase of the n flags g[0..n) (one key). */
static void write_testcase(FILE *out, const gate_flag *const *g, size_t n)
{
    const gate_flag *k = g[0];
    fprintf(out, "    <testcase classname=\"precgate.%s\" name=\"", gate_scope_name(k->scope));
    if (k->scope == GATE_SCOPE_DIVERGENCE) {
        junit_escape(out, k->mode, 1);
    } else if (k->scope == GATE_SCOPE_EVAL) {
        junit_escape(out, k->eval, 1);
        fputc(' ', out);
        junit_escape(out, k->effort, 1);
        fputc(' ', out);
        junit_escape(out, k->mode, 1);
    } else {
        junit_escape(out, k->capture, 1);
        fprintf(out, " layer %d ", k->layer);
        junit_escape(out, k->variant, 1);
    }
    fputs("\">\n", out);
    const tc_state t = testcase_state(g, n);
    const gate_flag *lead = t.first_error != NULL ? t.first_error : t.first_regression;
    if (lead != NULL) {
        const char *tag = t.first_error != NULL ? "error" : "failure";
        fprintf(out, "      <%s type=\"%s\" message=\"", tag, gate_verdict_name(lead->verdict));
        junit_escape(out, lead->message, 1);
        fputs("\">", out);
        for (size_t i = 0; i < n; i++) {
            if (g[i]->verdict != GATE_VERDICT_ERROR && g[i]->verdict != GATE_VERDICT_REGRESSION) continue;
            fprintf(out, "%s: %s: ", gate_verdict_name(g[i]->verdict), g[i]->metric);
            junit_escape(out, g[i]->message, 0);
            fputc('\n', out);
        }
        fprintf(out, "</%s>\n", tag);
    } else if (t.first_skipped != NULL) {
        fputs("      <skipped message=\"", out);
        junit_escape(out, t.first_skipped->message, 1);
        fputs("\"/>\n", out);
    }
    fputs("      <system-out>", out);
    for (size_t i = 0; i < n; i++) {
        fprintf(out, "%s: ", gate_verdict_name(g[i]->verdict));
        junit_escape(out, g[i]->message, 0);
        fputc('\n', out);
    }
    fputs("</system-out>\n    </testcase>\n", out);
}

/* Testcase counts of one suite. */
typedef struct suite_counts {
    size_t tests, failures, errors, skipped;
} suite_counts;

/* Counts the testcases of p[lo..hi) (flags of one scope, sorted), writing each
 * one to out when out is non-NULL. */
static suite_counts walk_suite(FILE *out, const gate_flag *const *p, size_t lo, size_t hi)
{
    suite_counts c = {0, 0, 0, 0};
    for (size_t i = lo; i < hi;) {
        size_t j = i + 1;
        while (j < hi && testcase_cmp(p[i], p[j]) == 0) j++;
        const tc_state t = testcase_state(p + i, j - i);
        c.tests++;
        if (t.first_error != NULL) c.errors++;
        else if (t.first_regression != NULL) c.failures++;
        else if (t.first_skipped != NULL) c.skipped++;
        if (out != NULL) write_testcase(out, p + i, j - i);
        i = j;
    }
    return c;
}

/* The testcase junit_write_skipped adds: NULL message for none. */
typedef struct junit_skip {
    gate_scope scope;
    const char *name, *message;
} junit_skip;

/* Writes the skipped testcase of skip (message non-NULL). */
static void write_skipped(FILE *out, const junit_skip *skip)
{
    fprintf(out, "    <testcase classname=\"precgate.%s\" name=\"", gate_scope_name(skip->scope));
    junit_escape(out, skip->name, 1);
    fputs("\">\n      <skipped message=\"", out);
    junit_escape(out, skip->message, 1);
    fputs("\"/>\n      <system-out>skipped: ", out);
    junit_escape(out, skip->message, 0);
    fputs("\n</system-out>\n    </testcase>\n", out);
}

/* Writes the document for sorted flags p[0..n) (and skip's testcase, when
 * it has a message) to out. */
static void write_document(FILE *out, const gate_flag *const *p, size_t n, int64_t run_id,
                           int64_t base_id, const junit_skip *skip)
{
    const int has_skip = skip->message != NULL;
    size_t lo[GATE_SCOPE_COUNT + 1];
    suite_counts sc[GATE_SCOPE_COUNT], total = {0, 0, 0, 0};
    size_t i = 0;
    for (int s = 0; s < GATE_SCOPE_COUNT; s++) {
        lo[s] = i;
        while (i < n && (int)p[i]->scope == s) i++;
        sc[s] = walk_suite(NULL, p, lo[s], i);
        total.tests += sc[s].tests;
        total.failures += sc[s].failures;
        total.errors += sc[s].errors;
        total.skipped += sc[s].skipped;
    }
    lo[GATE_SCOPE_COUNT] = i;
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", out);
    fprintf(out, "<testsuites name=\"precgate gate run %" PRId64 "\" tests=\"%zu\" failures=\"%zu\""
                 " errors=\"%zu\"", run_id, total.tests + (size_t)has_skip, total.failures,
            total.errors);
    if (has_skip || total.skipped > 0)
        fprintf(out, " skipped=\"%zu\"", total.skipped + (size_t)has_skip);
    fputs(">\n", out);
    for (int s = 0; s < GATE_SCOPE_COUNT; s++) {
        const int skip_here = has_skip && (int)skip->scope == s;
        fprintf(out, "  <testsuite name=\"%s\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\""
                     " skipped=\"%zu\">\n", gate_scope_name((gate_scope)s),
                sc[s].tests + (size_t)skip_here, sc[s].failures, sc[s].errors,
                sc[s].skipped + (size_t)skip_here);
        fprintf(out, "    <properties>\n      <property name=\"run_id\" value=\"%" PRId64 "\"/>\n",
                run_id);
        if (base_id >= 0)
            fprintf(out, "      <property name=\"baseline_run_id\" value=\"%" PRId64 "\"/>\n",
                    base_id);
        else
            fputs("      <property name=\"baseline\" value=\"none\"/>\n", out);
        fputs("    </properties>\n", out);
        if (skip_here) write_skipped(out, skip);
        walk_suite(out, p, lo[s], lo[s + 1]);
        fputs("  </testsuite>\n", out);
    }
    fputs("</testsuites>\n", out);
}

/* What atomic_file_write hands write_junit. */
typedef struct junit_job {
    const gate_flag *const *p;
    size_t n;
    int64_t run_id, baseline_run_id;
    junit_skip skip;
} junit_job;

/* atomic_file_writer: the document of a junit_job. */
static pg_status write_junit(void *ctx, FILE *out, pg_err *err)
{
    (void)err;
    const junit_job *j = ctx;
    write_document(out, j->p, j->n, j->run_id, j->baseline_run_id, &j->skip);
    return PG_OK;
}

pg_status junit_write(const char *path, int64_t run_id, int64_t baseline_run_id,
                      const gate_flags *f, pg_err *err)
{
    return junit_write_skipped(path, run_id, baseline_run_id, f, GATE_SCOPE_LAYER, NULL, NULL,
                               err);
}

pg_status junit_write_skipped(const char *path, int64_t run_id, int64_t baseline_run_id,
                              const gate_flags *f, gate_scope skip_scope, const char *skip_name,
                              const char *skip_message, pg_err *err)
{
    if (path == NULL || f == NULL || (skip_message != NULL && skip_name == NULL))
        return pg_fail(err, PG_ERR_INTERNAL, "junit_write: NULL argument");
    if (skip_message != NULL && (unsigned)skip_scope >= GATE_SCOPE_COUNT)
        return pg_fail(err, PG_ERR_INTERNAL, "junit_write: skipped testcase of scope %d",
                       (int)skip_scope);
    for (size_t i = 0; i < f->n; i++)
        if ((unsigned)f->v[i].scope >= GATE_SCOPE_COUNT)
            return pg_fail(err, PG_ERR_INTERNAL, "junit_write: flag %zu has scope %d", i,
                           (int)f->v[i].scope);
    const gate_flag **p = f->n > 0 ? malloc(f->n * sizeof *p) : NULL;
    if (f->n > 0 && p == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory writing the JUnit report", path);
    for (size_t i = 0; i < f->n; i++) p[i] = &f->v[i];
    if (f->n > 0) qsort(p, f->n, sizeof *p, flag_ptr_cmp);
    junit_job job = {(const gate_flag *const *)p, f->n, run_id, baseline_run_id,
                     {skip_scope, skip_name, skip_message}};
    const pg_status st = atomic_file_write(path, JUNIT_FILE_MODE, write_junit, &job, err);
    free(p);
    return st;
}
