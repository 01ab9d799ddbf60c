/* testutil.h: helpers shared by the Criterion tests. */
#ifndef PG_TESTUTIL_H
#define PG_TESTUTIL_H

#include <stddef.h>

/* A fresh empty directory under $TMPDIR (or /tmp); the caller frees the string. */
char *tu_tempdir(void);

/* Writes len bytes to path; aborts the test on failure. */
void tu_write_file(const char *path, const void *data, size_t len);

/* Runs the precgate binary with args (a shell-quoted string) and captures
 * stdout+stderr into a malloc'd string *output; returns the exit status. */
int tu_run_precgate(const char *args, char **output);

#endif
