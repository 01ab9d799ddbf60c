/*
 * junit.h: a gate pass's verdicts (harness/regress.h) as JUnit XML, the
 * format CI systems (GitLab, Jenkins, GitHub test reporters) read.
 *
 * Layout: <testsuites> holds one <testsuite> per scope (layer, mode_pair,
 * eval; always all three, an empty one with tests="0"); a suite holds one
 * <testcase> per (capture, layer, variant) or per (eval, mode, effort),
 * named "CAPTURE layer L VARIANT" / "EVAL EFFORT MODE" with classname
 * "precgate.SCOPE". A testcase with an error verdict carries <error>, else
 * one with a regression carries <failure>; the element's message is the
 * first such flag's message (metric, value, baseline and threshold; a
 * "scale_bug" regression, which names the hypothesis and the layers it
 * spans, leads over the others of its testcase) and its
 * text lists every failing flag. <system-out> lists every flag of the
 * testcase as "verdict: message". Counts (tests, failures, errors) are
 * per testcase. Without a baseline run every suite has the property
 * baseline = none (else baseline_run_id); junit_write_skipped adds one
 * testcase carrying <skipped message="..."/> (what CI systems list as
 * skipped, with the message), e.g. a PASS reached without a baseline.
 *
 * Text: &, <, >, " and ' are escaped everywhere; bytes that are not valid
 * UTF-8, and control characters other than tab, newline and carriage return
 * (C0, DEL, C1: utf8_markup_len), are written as '?' (so capture paths of
 * any bytes still give a well-formed document).
 */
#ifndef PG_JUNIT_H
#define PG_JUNIT_H

#include <stdint.h>
#include <stdio.h>

#include "db/gate_store.h"
#include "base/status.h"

/* Writes s to out as XML character data or attribute text (the escapes
 * above; newline, tab and carriage return as character references when
 * in_attribute is non-zero, so attribute values keep them). NULL writes
 * nothing. */
void junit_escape(FILE *out, const char *s, int in_attribute);

/* Writes the JUnit document of f (run_id gated against baseline_run_id,
 * < 0 for none) to path: into a temporary file in the same directory, then
 * renamed over path, so a reader never sees half a file. PG_ERR_IO naming
 * path (and errno's text) when it cannot be created, written or renamed
 * (the temporary file is removed); PG_ERR_NOMEM; PG_ERR_INTERNAL for a
 * NULL argument. */
pg_status junit_write(const char *path, int64_t run_id, int64_t baseline_run_id,
                      const gate_flags *f, pg_err *err);

/* junit_write, plus one testcase first in suite skip_scope, classname
 * "precgate.SCOPE", name skip_name, that holds <skipped message=skip_message/>
 * and the message as system-out, counted in tests and skipped (the suite's
 * and the document's). skip_message NULL: junit_write's document.
 * PG_ERR_INTERNAL also for a NULL skip_name with a message, or a scope
 * outside the enum. */
pg_status junit_write_skipped(const char *path, int64_t run_id, int64_t baseline_run_id,
                              const gate_flags *f, gate_scope skip_scope, const char *skip_name,
                              const char *skip_message, pg_err *err);

#endif /* PG_JUNIT_H */
