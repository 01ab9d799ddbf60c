/* testutil.c: helpers shared by the Criterion tests (see testutil.h). */
#include "testutil.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

char *tu_tempdir(void)
{
    const char *base = getenv("TMPDIR");
    if (base == NULL || base[0] == '\0') base = "/tmp";
    char *path = malloc(strlen(base) + 32);
    cr_assert_not_null(path);
    sprintf(path, "%s/pgtest.XXXXXX", base);
    cr_assert_not_null(mkdtemp(path), "mkdtemp failed");
    return path;
}

char *tu_join(const char *dir, const char *name)
{
    const size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    cr_assert_not_null(p);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

void tu_rmtree(const char *dir)
{
    DIR *d = opendir(dir);
    if (d != NULL) {
        for (struct dirent *e; (e = readdir(d)) != NULL;) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char *p = tu_join(dir, e->d_name);
            struct stat st;
            if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) tu_rmtree(p);
            else if (unlink(p) != 0) cr_log_warn("could not remove %s", p);
            free(p);
        }
        closedir(d);
    }
    if (rmdir(dir) != 0) cr_log_warn("could not remove %s", dir);
}

void tu_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot create %s", path);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}

int tu_run_precgate(const char *args, char **output)
{
    size_t cap = strlen(PRECGATE_BIN) + strlen(args) + 16;
    char *cmd = malloc(cap);
    cr_assert_not_null(cmd);
    snprintf(cmd, cap, "'%s' %s 2>&1", PRECGATE_BIN, args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t len = 0, size = 4096;
    char *buf = malloc(size);
    cr_assert_not_null(buf);
    size_t got;
    while ((got = fread(buf + len, 1, size - len - 1, p)) > 0) {
        len += got;
        if (size - len < 2) {
            size *= 2;
            buf = realloc(buf, size);
            cr_assert_not_null(buf);
        }
    }
    buf[len] = '\0';
    int st = pclose(p);
    free(cmd);
    if (output) *output = buf; else free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}
