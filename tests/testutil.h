/* testutil.h: helpers shared by the Criterion tests. */
#ifndef PG_TESTUTIL_H
#define PG_TESTUTIL_H

#include <stddef.h>

/* A fresh empty directory under $TMPDIR (or /tmp); the caller frees the string. */
char *tu_tempdir(void);

/* A malloc'd "dir/name"; aborts the test when out of memory. */
char *tu_join(const char *dir, const char *name);

/* Removes dir and everything below it (no links followed); a failure is
 * logged as a warning, since it cannot change a test's verdict. */
void tu_rmtree(const char *dir);

/* Writes len bytes to path; aborts the test on failure. */
void tu_write_file(const char *path, const void *data, size_t len);

/* Runs the precgate binary with args (a shell-quoted string) and captures
 * stdout+stderr into a malloc'd string *output; returns the exit status. */
int tu_run_precgate(const char *args, char **output);

#endif
