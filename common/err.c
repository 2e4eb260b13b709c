/* Error code names and the diagnostic line (include/shardd/err.h). */
#include "shardd/err.h"

#include <stdarg.h>
#include <stdio.h>

const char *sd_strerror(int err)
{
    switch (err) {
    case SD_OK:
        return "success";
#define XX(name, val, msg)                                                     \
    case SD_E##name:                                                           \
        return msg;
        SD_ERRNO_MAP(XX)
#undef XX
    default:
        return "unknown error";
    }
}

const char *sd_err_name(int err)
{
    switch (err) {
    case SD_OK:
        return "OK";
#define XX(name, val, msg)                                                     \
    case SD_E##name:                                                           \
        return #name;
        SD_ERRNO_MAP(XX)
#undef XX
    default:
        return "UNKNOWN";
    }
}

int sd_diag_set(struct sd_diag *d, int err, const char *fmt, ...)
{
    va_list ap;

    if (d == NULL)
        return err;
    va_start(ap, fmt);
    vsnprintf(d->msg, sizeof(d->msg), fmt, ap);
    va_end(ap);
    return err;
}
