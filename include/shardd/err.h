/*
 * shardd error codes and diagnostics, shared by every module.
 *
 * Functions that act return int: 0 on success or one negative SD_E* code.
 * Each module maps foreign errors (errno, SQLite, CUDA, gRPC) to these codes
 * once, at its boundary.  Where the caller needs to tell a user *what* was
 * wrong (which table, which field), the function also fills a struct sd_diag
 * with one human-readable line.
 */
#ifndef SHARDD_ERR_H
#define SHARDD_ERR_H

#include <stddef.h>

#define SD_ERRNO_MAP(XX)                                                       \
    XX(NOMEM, -1, "out of memory")                                             \
    XX(INVAL, -2, "invalid argument")                                          \
    XX(NOENT, -3, "no such object")                                            \
    XX(IO, -4, "input/output error")                                           \
    XX(NOSPACE, -5, "does not fit in device memory")                           \
    XX(FORMAT, -6, "malformed input")                                          \
    XX(RANGE, -7, "value out of range")                                        \
    XX(UNSUPPORTED, -8, "not supported")                                       \
    XX(DEVICE, -9, "compute device error")                                     \
    XX(STORE, -10, "store error")                                              \
    XX(BUSY, -11, "resource busy")                                             \
    XX(NEWER, -12, "made by a newer version")                                  \
    XX(CANCELED, -13, "cancelled")                                             \
    XX(STATE, -14, "not possible in the current state")                        \
    XX(AUTH, -15, "not authorised")                                            \
    XX(TIMEDOUT, -16, "deadline passed")                                       \
    XX(CORRUPT, -17, "the store is damaged")

enum sd_err {
    SD_OK = 0,
#define XX(name, val, msg) SD_E##name = (val),
    SD_ERRNO_MAP(XX)
#undef XX
};

/* Returns a static description of an SD_E* code ("unknown error" else). */
const char *sd_strerror(int err);

/* Returns the code's name without the SD_E prefix, e.g. "INVAL". */
const char *sd_err_name(int err);

/*
 * One line of diagnostic text for a user: names the object and the field,
 * e.g. `tables[3] "t3": dim 30 is not a multiple of 4`.  Fixed size so it can
 * live on the stack and never fails to allocate.
 */
struct sd_diag {
    char msg[512];
};

/*
 * Formats the message into d (when d is not NULL) and returns err, so that a
 * failure path reads `return sd_diag_set(d, SD_EINVAL, "...", ...);`.
 */
int sd_diag_set(struct sd_diag *d, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* SHARDD_ERR_H */
