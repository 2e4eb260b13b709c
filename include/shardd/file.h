/*
 * Whole files in and out, for the formats that are read and written as one
 * image (cost models, ensembles, placement policies, JSON inputs, PyTorch
 * checkpoints, nccl-tests outputs).
 *
 * sd_file_read: the bytes of path into *out (malloc()ed, the caller frees)
 * and *len, with a NUL after the last byte (so a text is a C string).  Read
 * to the end, so a pipe or a process substitution (`<(...)`) is read as a
 * file is.  SD_ENOENT or SD_EIO naming the file and the system's reason (a
 * directory: "Is a directory"), SD_EFORMAT when it is over max bytes
 * ("path: over 256 MiB: too large for `what`"; /dev/zero ends there),
 * SD_ENOMEM.
 *
 * sd_file_write: buf as path, atomically: written whole to path.tmp,
 * flushed and fsync()ed, then renamed over path, so that a crash leaves the
 * old file or the new one, never half of one.  A path that is there and is
 * not a regular file (a device, a FIFO) is written in place.  A symbolic
 * link is written through: the regular file it resolves to is replaced
 * the same way (the link stays a link); where it resolves to no regular
 * file (/dev/stdout, a dangling link) it is written in place.  SD_EINVAL
 * naming the file when it cannot be created (the path is too long, its
 * directory is missing or not writable), SD_EIO when writing it fails; the
 * temporary is removed on failure.
 *
 * sd_file_prefix: after a parse of path's bytes failed with d set, puts
 * "path: " in front of d's message.
 */
#ifndef SHARDD_FILE_H
#define SHARDD_FILE_H

#include <stddef.h>

#include "shardd/err.h"

int sd_file_read(const char *path, size_t max, const char *what, void **out,
                 size_t *len, struct sd_diag *d);
int sd_file_write(const char *path, const void *buf, size_t len,
                  struct sd_diag *d);
void sd_file_prefix(const char *path, int rv, struct sd_diag *d);

#endif
