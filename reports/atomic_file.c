/* atomic_file.c: output files written whole or not at all (see atomic_file.h). */
#include "atomic_file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkstemp's template appended to the target's name. */
#define ATOMIC_TMP_SUFFIX ".tmp.XXXXXX"

pg_status atomic_file_write(const char *path, unsigned mode, atomic_file_writer write, void *ctx,
                            pg_err *err)
{
    const size_t len = strlen(path) + sizeof ATOMIC_TMP_SUFFIX;
    char *tmp = malloc(len);
    if (tmp == NULL) return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory writing it", path);
    snprintf(tmp, len, "%s" ATOMIC_TMP_SUFFIX, path);
    const int fd = mkstemp(tmp);
    if (fd < 0) {
        const pg_status s = pg_fail(err, PG_ERR_IO, "cannot write %s: cannot create %s: %s", path,
                                    tmp, strerror(errno));
        free(tmp);
        return s;
    }
    const mode_t um = umask(0);
    umask(um);
    pg_status s = PG_OK;
    if (fchmod(fd, (mode_t)mode & ~um) != 0)
        s = pg_fail(err, PG_ERR_IO, "cannot write %s: chmod %s: %s", path, tmp, strerror(errno));
    FILE *f = s == PG_OK ? fdopen(fd, "w") : NULL;
    if (s == PG_OK && f == NULL)
        s = pg_fail(err, PG_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    if (f == NULL) close(fd);
    if (s == PG_OK) {
        pg_err w = {0};
        if (write(ctx, f, &w) != PG_OK) s = pg_fail(err, w.code, "%s: %s", path, w.msg);
    }
    if (f != NULL) {
        /* The first failure's errno; EIO when a stream error left none. */
        int e = 0;
        errno = 0;
        if (fflush(f) != 0 || ferror(f)) e = errno != 0 ? errno : EIO;
        if (e == 0 && fsync(fileno(f)) != 0) e = errno;
        if (fclose(f) != 0 && e == 0) e = errno != 0 ? errno : EIO;
        if (e != 0 && s == PG_OK)
            s = pg_fail(err, PG_ERR_IO, "cannot write %s: %s", path, strerror(e));
    }
    if (s == PG_OK && rename(tmp, path) != 0)
        s = pg_fail(err, PG_ERR_IO, "cannot write %s: rename from %s: %s", path, tmp,
                    strerror(errno));
    if (s != PG_OK) unlink(tmp);
    free(tmp);
    return s;
}
