/* status.c: result codes and the first-failure error buffer (see status.h). */
#include "base/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

pg_status pg_fail(pg_err *err, pg_status code, const char *fmt, ...)
{
    if (err == NULL) return code;
    if (err->code != PG_OK) return err->code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

const char *pg_status_str(pg_status code)
{
    switch (code) {
    case PG_OK: return "ok";
    case PG_ERR_USAGE: return "usage error";
    case PG_ERR_IO: return "I/O error";
    case PG_ERR_FORMAT: return "malformed input";
    case PG_ERR_SHAPE: return "inconsistent shapes";
    case PG_ERR_NUMERIC: return "invalid numeric value";
    case PG_ERR_NOMEM: return "out of memory";
    case PG_ERR_DB: return "database error";
    case PG_ERR_DEVICE: return "GPU error";
    case PG_ERR_HTTP: return "HTTP error";
    case PG_ERR_INTERNAL: return "internal error";
    case PG_ERR_INTERRUPTED: return "interrupted";
    case PG_ERR_UNSUPPORTED: return "unsupported by the kernel profile";
    }
    return "unknown error";
}

void pg_err_clear(pg_err *err)
{
    err->code = PG_OK;
    err->msg[0] = '\0';
}
