/* Whole files in and out (include/shardd/file.h). */
#define _XOPEN_SOURCE 700 /* realpath() */
#include "shardd/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shardd/bytes.h"

int sd_file_read(const char *path, size_t max, const char *what, void **out,
                 size_t *len, struct sd_diag *d)
{
    unsigned char *buf = NULL, *nb;
    size_t cap = 0, used = 0, got, want;
    char limit[SD_BYTES_TEXT];
    FILE *f;
    int rv = 0;

    f = fopen(path, "rb");
    if (f == NULL)
        return sd_diag_set(d, errno == ENOENT ? SD_ENOENT : SD_EIO, "%s: %s",
                           path, strerror(errno));
    /* Read until the end, not to a size asked of the file first: a pipe
     * (`--tables <(...)`) has none, /dev/zero one of 0.  One byte past max
     * is asked for, so that a file of max bytes is whole and one longer is
     * refused; one byte past the end is kept for the NUL. */
    errno = 0;
    for (;;) {
        if (used + 1 >= cap) {
            want = cap ? 2 * cap : (size_t)1 << 16;
            if (want > max + 2)
                want = max + 2;
            if (want <= cap) {
                rv = sd_diag_set(d, SD_EFORMAT, "%s: over %s: too large for %s",
                                 path, sd_bytes_text(max, limit), what);
                goto out_free;
            }
            nb = realloc(buf, want);
            if (nb == NULL) {
                rv = sd_diag_set(d, SD_ENOMEM, "%s: out of memory", path);
                goto out_free;
            }
            buf = nb;
            cap = want;
        }
        got = fread(buf + used, 1, cap - 1 - used, f);
        used += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        rv = sd_diag_set(d, SD_EIO, "%s: %s", path,
                         errno ? strerror(errno) : "read error");
        goto out_free;
    }
    buf[used] = '\0';
    *out = buf;
    *len = used;
    buf = NULL;
out_free:
    free(buf);
    fclose(f);
    return rv;
}

/*
 * A path that is there and is not a regular file (a device, a FIFO,
 * /dev/stdout) is written in place: a rename would replace the device
 * with a file, and such a file cannot be half written anyway.
 */
static int write_in_place(const char *path, const void *buf, size_t len,
                          struct sd_diag *d)
{
    FILE *f = fopen(path, "wb");
    int rv = 0;

    if (f == NULL)
        return sd_diag_set(d, SD_EINVAL, "%s: %s", path, strerror(errno));
    if (fwrite(buf, 1, len, f) != len || fflush(f) != 0)
        rv = sd_diag_set(d, SD_EIO, "%s: %s", path, strerror(errno));
    if (fclose(f) != 0 && rv == 0)
        rv = sd_diag_set(d, SD_EIO, "%s: %s", path, strerror(errno));
    return rv;
}

int sd_file_write(const char *path, const void *buf, size_t len,
                  struct sd_diag *d)
{
    struct stat st;
    char tmp[4096];
    FILE *f;

    /* A symbolic link is written through: the file it names is replaced
     * (renamed over where that is, so the link stays), or written in place
     * where it names no regular file (/dev/stdout, a pipe's /proc link, a
     * dangling link, whose target is created).  A rename over the link
     * itself would leave the target as it was and the link a file. */
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
        char *real = realpath(path, NULL);
        int rv;

        if (real == NULL || stat(real, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(real);
            return write_in_place(path, buf, len, d);
        }
        rv = sd_file_write(real, buf, len, d);
        free(real);
        return rv;
    }
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return write_in_place(path, buf, len, d);
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return sd_diag_set(d, SD_EINVAL, "%s: path is too long", path);
    f = fopen(tmp, "wb");
    if (f == NULL)
        return sd_diag_set(d, SD_EINVAL, "%s: %s", tmp, strerror(errno));
    if (fwrite(buf, 1, len, f) != len || fflush(f) != 0 ||
        fsync(fileno(f)) != 0) {
        int rv = sd_diag_set(d, SD_EIO, "%s: %s", tmp, strerror(errno));

        fclose(f);
        unlink(tmp);
        return rv;
    }
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        int rv = sd_diag_set(d, SD_EIO, "%s: %s", path, strerror(errno));

        unlink(tmp);
        return rv;
    }
    return 0;
}

void sd_file_prefix(const char *path, int rv, struct sd_diag *d)
{
    char msg[sizeof(d->msg)];

    if (d == NULL)
        return;
    memcpy(msg, d->msg, sizeof(msg));
    sd_diag_set(d, rv, "%s: %s", path, msg);
}
