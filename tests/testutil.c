/* testutil.c: helpers shared by the Criterion tests (see testutil.h). */
#include "testutil.h"

#include <math.h>

#include <criterion/criterion.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/capture/safetensors.h"

/* Size of the argument string tu_run_precgatef builds. */
#define TU_ARGS_MAX 2048

char tu_dir[PATH_MAX];

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

void tu_scratch_setup(void)
{
    char *d = tu_tempdir();
    snprintf(tu_dir, sizeof tu_dir, "%s", d);
    free(d);
}

void tu_scratch_teardown(void)
{
    tu_rmtree(tu_dir);
}

/* Problems tu_write_sevens names a..z, and room for one line of each. */
#define TU_SEVENS_MAX 26
#define TU_SEVENS_LINE 64

const char *tu_write_sevens(int n)
{
    static char path[PATH_MAX + NAME_MAX + 2];
    snprintf(path, sizeof path, "%s", tu_in_dir("t.jsonl"));
    char lines[TU_SEVENS_MAX * TU_SEVENS_LINE] = "";
    cr_assert(n >= 1 && n <= TU_SEVENS_MAX, "tu_write_sevens: %d problems", n);
    for (int i = 0; i < n; i++)
        snprintf(lines + strlen(lines), sizeof lines - strlen(lines),
                 "{\"id\":\"%c\",\"problem\":\"%d+%d?\",\"answer\":7}\n", 'a' + i, i, 7 - i);
    tu_write_file(path, lines, strlen(lines));
    return path;
}

const char *tu_in_dir(const char *name)
{
    static char bufs[4][PATH_MAX + NAME_MAX + 2];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, sizeof bufs[0], "%s/%s", tu_dir, name);
    return b;
}

void tu_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot create %s", path);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}

/* The unprivileged user tu_unprivileged_prefix runs as: nobody. */
#define TU_NOBODY_ID "65534"

const char *tu_unprivileged_prefix(void)
{
    if (geteuid() != 0) return "";
    if (system("command -v setpriv >/dev/null 2>&1") != 0) return NULL;
    return "setpriv --reuid=" TU_NOBODY_ID " --regid=" TU_NOBODY_ID " --clear-groups ";
}

int tu_run_precgate(const char *args, char **output)
{
    return tu_run_precgate_as("", args, output);
}

int tu_run_precgate_as(const char *prefix, const char *args, char **output)
{
    size_t cap = strlen(prefix) + strlen(PRECGATE_BIN) + strlen(args) + 16;
    char *cmd = malloc(cap);
    cr_assert_not_null(cmd);
    snprintf(cmd, cap, "%s'%s' %s 2>&1", prefix, PRECGATE_BIN, args);
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

int tu_spawn_precgate(const char *args, const char *out, const char *err)
{
    char cmd[TU_ARGS_MAX + 2 * PATH_MAX + 64];
    if (err != NULL)
        snprintf(cmd, sizeof cmd, "exec '%s' %s >'%s' 2>'%s'", PRECGATE_BIN, args, out, err);
    else
        snprintf(cmd, sizeof cmd, "exec '%s' %s >'%s' 2>&1", PRECGATE_BIN, args, out);
    const pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

int tu_run_precgatef(char **output, const char *fmt, ...)
{
    char args[TU_ARGS_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return tu_run_precgate(args, output);
}

void tu_flip_tensor_bit(const char *path, const char *name, size_t at)
{
    pg_err err = {0};
    st_file *f = NULL;
    cr_assert_eq(st_open(path, &f, &err), PG_OK, "%s", err.msg);
    const st_tensor *t = st_find(f, name);
    cr_assert_not_null(t, "%s has no tensor %s", path, name);
    cr_assert_lt(at, t->nbytes);
    const long off = (long)((const unsigned char *)t->data - (const unsigned char *)f->map) +
                     (long)at;
    st_close(f);
    FILE *fp = fopen(path, "r+b");
    cr_assert_not_null(fp);
    cr_assert_eq(fseek(fp, off, SEEK_SET), 0);
    const int b = fgetc(fp);
    cr_assert_neq(b, EOF);
    cr_assert_eq(fseek(fp, off, SEEK_SET), 0);
    cr_assert_neq(fputc(b ^ 1, fp), EOF);
    cr_assert_eq(fclose(fp), 0);
}

void tu_sql_exec(sqlite3 *db, const char *sql)
{
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    cr_assert_eq(rc, SQLITE_OK, "%s: %s", sql, msg ? msg : "?");
    sqlite3_free(msg);
}

sqlite3_stmt *tu_sql_vprepare(sqlite3 *db, const char *fmt, va_list ap)
{
    char *sql = sqlite3_vmprintf(fmt, ap);
    cr_assert_not_null(sql);
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
    cr_assert_eq(rc, SQLITE_OK, "%s: %s", sql, sqlite3_errmsg(db));
    sqlite3_free(sql);
    return s;
}

long long tu_sql_int(sqlite3 *db, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sqlite3_stmt *s = tu_sql_vprepare(db, fmt, ap);
    va_end(ap);
    cr_assert_eq(sqlite3_step(s), SQLITE_ROW, "no row for %s", sqlite3_sql(s));
    long long v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return v;
}

char *tu_sql_text(sqlite3 *db, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sqlite3_stmt *s = tu_sql_vprepare(db, fmt, ap);
    va_end(ap);
    cr_assert_eq(sqlite3_step(s), SQLITE_ROW, "no row for %s", sqlite3_sql(s));
    const unsigned char *t = sqlite3_column_text(s, 0);
    char *v = t ? strdup((const char *)t) : NULL;
    cr_assert(t == NULL || v != NULL, "out of memory");
    sqlite3_finalize(s);
    return v;
}

double tu_sql_double(sqlite3 *db, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sqlite3_stmt *s = tu_sql_vprepare(db, fmt, ap);
    va_end(ap);
    cr_assert_eq(sqlite3_step(s), SQLITE_ROW, "no row for %s", sqlite3_sql(s));
    double v = sqlite3_column_double(s, 0);
    sqlite3_finalize(s);
    return v;
}

sqlite3 *tu_db_open(const char *name)
{
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(tu_in_dir(name), &db), SQLITE_OK, "open %s", name);
    sqlite3_busy_timeout(db, 5000);
    return db;
}

pg_status tu_feed_cut(tu_feed_fn feed, void *parser, const char *data, size_t n,
                      const size_t *cuts, size_t n_cuts, pg_err *err)
{
    pg_status st = PG_OK;
    size_t at = 0;
    for (size_t i = 0; i <= n_cuts && st == PG_OK; i++) {
        const size_t to = i < n_cuts ? cuts[i] : n;
        st = feed(parser, data + at, to - at, err);
        at = to;
    }
    return st;
}

size_t tu_random_cuts(uint64_t *seed, size_t n, size_t *cuts)
{
    size_t n_cuts = 0;
    for (size_t at = 1 + rng_below(seed, 7); at < n; at += 1 + rng_below(seed, 7))
        cuts[n_cuts++] = at;
    return n_cuts;
}

char *tu_slurp(const char *name)
{
    FILE *f = fopen(tu_in_dir(name), "rb");
    cr_assert_not_null(f, "open %s", name);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    const long n = ftell(f);
    cr_assert_geq(n, 0);
    cr_assert_eq(fseek(f, 0, SEEK_SET), 0);
    char *s = malloc((size_t)n + 1);
    cr_assert_not_null(s);
    cr_assert_eq(fread(s, 1, (size_t)n, f), (size_t)n, "read %s", name);
    s[n] = '\0';
    fclose(f);
    return s;
}

double tu_gauss(rng_xoshiro256 *r)
{
    double x = 0;
    for (int i = 0; i < 4; i++) x += (double)(rng_xoshiro_next(r) >> 11) * 0x1p-53;
    return (x - 2.0) * sqrt(3.0);
}

void tu_layer_init(tu_layer *L, uint64_t seed, double spread)
{
    memset(L, 0, sizeof *L);
    L->sq[0] = 40, L->skv[0] = 40, L->sq[1] = 24, L->skv[1] = 70;
    for (int h = 0; h < 4; h++) L->sinks[h] = 0.5f * (float)h - 0.5f;
    L->b = (attn_batch){2, L->sq, L->skv, 4, 2, TU_LAYER_D, 0, 0.125f, L->sinks};
    L->nq = (size_t)(40 + 24) * 4 * TU_LAYER_D;
    L->nkv = (size_t)(40 + 70) * 2 * TU_LAYER_D;
    L->q = malloc(L->nq * 2);
    L->k = malloc(L->nkv * 2);
    L->v = malloc(L->nkv * 2);
    cr_assert(L->q && L->k && L->v, "tu_layer_init: out of memory");
    rng_xoshiro256 r;
    rng_xoshiro_seed(&r, seed);
    for (size_t i = 0; i < L->nq; i++) L->q[i] = bf16_from_f32((float)(spread * tu_gauss(&r)));
    for (size_t i = 0; i < L->nkv; i++) L->k[i] = bf16_from_f32((float)(spread * tu_gauss(&r)));
    for (size_t i = 0; i < L->nkv; i++) L->v[i] = bf16_from_f32((float)(spread * tu_gauss(&r)));
}

void tu_layer_free(tu_layer *L)
{
    free(L->q);
    free(L->k);
    free(L->v);
}
