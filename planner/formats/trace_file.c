/*
 * Trace files: the traces of problem/trace.c in a documented binary format.
 *
 * Trace file format, version 1 (docs/trace-format.md has the full text).
 * Every integer is unsigned little-endian, written byte by byte so the file
 * is the same on every host:
 *
 *   header   magic "SDTRACE1" (8 bytes), version u32 (= 1), count u32
 *   count ×  name_len u16 (1 .. TABLE_NAME_MAX - 1), name (name_len bytes,
 *            no NUL), rows u64, dim u32, nbags u64, nindices u64,
 *            offsets (nbags + 1) × u64, indices nindices × u64
 *
 * and nothing after the last trace.  A reader checks every field before it
 * trusts it: sizes are compared with the bytes left in the file before
 * anything is allocated, so a lying header cannot make it allocate more than
 * the file could hold.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/formats.h"
#include "problem/problem.h"

#define TRACE_MAGIC      "SDTRACE1"
#define TRACE_MAGIC_LEN  8
#define TRACE_VERSION    1u
#define TRACE_HEADER_LEN 16   /* magic, version, count */
#define TRACE_FIXED_LEN  30   /* name_len, rows, dim, nbags, nindices: bytes */
#define TRACE_IO_CHUNK   8192 /* u64 values per write buffer */

/* ------------------------------------------------------------------------ */
/* Writing                                                                   */

static void put_le(uint8_t *p, uint64_t v, int nbytes)
{
    int i;

    for (i = 0; i < nbytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int nbytes)
{
    uint64_t v = 0;
    int i;

    for (i = nbytes - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* Writes n int64 values as u64 little-endian through buf. */
static bool write_u64s(FILE *f, const int64_t *v, int64_t n, uint8_t *buf)
{
    int64_t done = 0, k, i;

    while (done < n) {
        k = n - done < TRACE_IO_CHUNK ? n - done : TRACE_IO_CHUNK;
        for (i = 0; i < k; i++)
            put_le(buf + 8 * i, (uint64_t)v[done + i], 8);
        if (fwrite(buf, 8, (size_t)k, f) != (size_t)k)
            return false;
        done += k;
    }
    return true;
}

/* Writes one trace, already validated: its name is NUL-terminated. */
static bool write_trace(FILE *f, const struct trace *t, uint8_t *buf)
{
    size_t nl = strlen(t->name);

    put_le(buf, nl, 2);
    memcpy(buf + 2, t->name, nl);
    put_le(buf + 2 + nl, (uint64_t)t->rows, 8);
    put_le(buf + 10 + nl, (uint64_t)t->dim, 4);
    put_le(buf + 14 + nl, (uint64_t)t->nbags, 8);
    put_le(buf + 22 + nl, (uint64_t)t->nindices, 8);
    if (fwrite(buf, 1, TRACE_FIXED_LEN + nl, f) != TRACE_FIXED_LEN + nl)
        return false;
    return write_u64s(f, t->offsets, t->nbags + 1, buf) &&
           write_u64s(f, t->indices, t->nindices, buf);
}

int trace_file_write(const char *path, const struct trace *traces, size_t n,
                     struct sd_diag *d)
{
    char where[64];
    uint8_t *buf = NULL;
    FILE *f = NULL;
    size_t i;
    int rv;

    if (n > UINT32_MAX)
        return sd_diag_set(d, SD_EINVAL, "%s: %zu traces, at most %lu fit",
                           path, n, (unsigned long)UINT32_MAX);
    for (i = 0; i < n; i++) {
        snprintf(where, sizeof(where), "trace[%zu]", i);
        rv = trace_validate_at(&traces[i], where, d);
        if (rv != 0)
            return rv;
    }
    /* Large enough for one trace's fixed part with its name, too. */
    buf = malloc(8 * TRACE_IO_CHUNK);
    if (buf == NULL)
        return SD_ENOMEM;
    f = fopen(path, "wb");
    if (f == NULL) {
        rv = sd_diag_set(d, SD_EIO, "%s: %s", path, strerror(errno));
        goto out_free_buf;
    }
    memcpy(buf, TRACE_MAGIC, TRACE_MAGIC_LEN);
    put_le(buf + 8, TRACE_VERSION, 4);
    put_le(buf + 12, n, 4);
    if (fwrite(buf, 1, TRACE_HEADER_LEN, f) != TRACE_HEADER_LEN)
        goto out_write_error;
    for (i = 0; i < n; i++)
        if (!write_trace(f, &traces[i], buf))
            goto out_write_error;
    if (fflush(f) != 0 || ferror(f))
        goto out_write_error;
    rv = fclose(f) == 0
             ? 0
             : sd_diag_set(d, SD_EIO, "%s: %s", path, strerror(errno));
    f = NULL;
    if (rv != 0)
        remove(path);
    goto out_free_buf;

out_write_error:
    rv = sd_diag_set(d, SD_EIO, "%s: write failed: %s", path, strerror(errno));
    fclose(f);
    remove(path); /* leave no truncated file behind */
out_free_buf:
    free(buf);
    return rv;
}

/* ------------------------------------------------------------------------ */
/* Reading                                                                   */

/* A file being read, with the bytes not yet consumed. */
struct reader {
    FILE *f;
    const char *path;
    uint64_t left; /* bytes of the file after the read position */
};

/*
 * Reads exactly len bytes.  Running out of file is a format error (the file
 * is truncated); a failing read is an I/O error.
 */
static int read_bytes(struct reader *r, void *p, size_t len, const char *what,
                      size_t idx, struct sd_diag *d)
{
    if (len > r->left)
        return sd_diag_set(d, SD_EFORMAT,
                           "%s: trace[%zu]: file truncated in %s", r->path, idx,
                           what);
    if (len > 0 && fread(p, 1, len, r->f) != len) {
        if (ferror(r->f))
            return sd_diag_set(d, SD_EIO, "%s: read failed: %s", r->path,
                               strerror(errno));
        return sd_diag_set(d, SD_EFORMAT,
                           "%s: trace[%zu]: file truncated in %s", r->path, idx,
                           what);
    }
    r->left -= len;
    return 0;
}

/*
 * Reads n u64 values into v (int64), decoding in place, and rejects a value
 * above INT64_MAX.
 */
static int read_u64s(struct reader *r, int64_t *v, int64_t n, const char *what,
                     size_t idx, struct sd_diag *d)
{
    uint8_t *p = (uint8_t *)v;
    uint64_t x;
    int64_t i;
    int rv;

    rv = read_bytes(r, v, (size_t)n * 8, what, idx, d);
    if (rv != 0)
        return rv;
    for (i = 0; i < n; i++) {
        x = get_le(p + 8 * i, 8);
        if (x > (uint64_t)INT64_MAX)
            return sd_diag_set(
                d, SD_EFORMAT, "%s: trace[%zu]: %s[%lld] = %llu too large",
                r->path, idx, what, (long long)i, (unsigned long long)x);
        v[i] = (int64_t)x;
    }
    return 0;
}

/*
 * Reads the fixed part of trace idx into t (no arrays yet) and checks the
 * sizes against the bytes left in the file.
 */
static int read_trace_head(struct reader *r, size_t idx, struct trace *t,
                           struct sd_diag *d)
{
    uint8_t b[TRACE_FIXED_LEN - 2];
    uint64_t nl, rows, dim, nbags, nindices;
    int rv;

    rv = read_bytes(r, b, 2, "name_len", idx, d);
    if (rv != 0)
        return rv;
    nl = get_le(b, 2);
    if (nl == 0 || nl >= TABLE_NAME_MAX)
        return sd_diag_set(
            d, SD_EFORMAT, "%s: trace[%zu]: name_len %llu not in [1, %d]",
            r->path, idx, (unsigned long long)nl, TABLE_NAME_MAX - 1);
    rv = read_bytes(r, t->name, (size_t)nl, "name", idx, d);
    if (rv != 0)
        return rv;
    if (memchr(t->name, '\0', (size_t)nl) != NULL)
        return sd_diag_set(d, SD_EFORMAT,
                           "%s: trace[%zu]: name contains a NUL byte", r->path,
                           idx);
    rv = read_bytes(r, b, sizeof(b), "header", idx, d);
    if (rv != 0)
        return rv;
    rows = get_le(b, 8);
    dim = get_le(b + 8, 4);
    nbags = get_le(b + 12, 8);
    nindices = get_le(b + 20, 8);
    /* Every count must fit in what is left of the file before it is used
     * as a size: (nbags + 1) offsets and nindices indices, 8 bytes each. */
    if (nbags >= r->left / 8)
        return sd_diag_set(d, SD_EFORMAT,
                           "%s: trace[%zu] \"%s\": nbags %llu exceeds the file "
                           "size",
                           r->path, idx, t->name, (unsigned long long)nbags);
    if (nindices > (r->left - 8 * (nbags + 1)) / 8)
        return sd_diag_set(d, SD_EFORMAT,
                           "%s: trace[%zu] \"%s\": nindices %llu exceeds the "
                           "file size",
                           r->path, idx, t->name, (unsigned long long)nindices);
    /* Checked here, before the arrays are read, and again by
     * trace_validate_at(). */
    if (rows < 1 || rows > (uint64_t)TABLE_ROWS_MAX)
        return sd_diag_set(d, SD_EFORMAT,
                           "%s: trace[%zu] \"%s\": rows %llu not in [1, %lld]",
                           r->path, idx, t->name, (unsigned long long)rows,
                           (long long)TABLE_ROWS_MAX);
    if (dim < TABLE_DIM_MIN || dim > TABLE_DIM_MAX || dim % TABLE_DIM_ALIGN)
        return sd_diag_set(d, SD_EFORMAT,
                           "%s: trace[%zu] \"%s\": dim %llu is not a multiple "
                           "of %d in [%d, %d]",
                           r->path, idx, t->name, (unsigned long long)dim,
                           TABLE_DIM_ALIGN, TABLE_DIM_MIN, TABLE_DIM_MAX);
    t->rows = (int64_t)rows;
    t->dim = (int32_t)dim;
    t->nbags = (int64_t)nbags;
    t->nindices = (int64_t)nindices;
    return 0;
}

/* Reads trace idx into t; on failure t owns whatever was allocated. */
static int read_trace(struct reader *r, size_t idx, struct trace *t,
                      struct sd_diag *d)
{
    char where[TABLE_NAME_MAX + 64];
    int rv;

    rv = read_trace_head(r, idx, t, d);
    if (rv != 0)
        return rv;
    t->offsets = malloc((size_t)(t->nbags + 1) * sizeof(*t->offsets));
    t->indices =
        malloc(t->nindices > 0 ? (size_t)t->nindices * sizeof(*t->indices) : 1);
    if (t->offsets == NULL || t->indices == NULL)
        return SD_ENOMEM;
    rv = read_u64s(r, t->offsets, t->nbags + 1, "offsets", idx, d);
    if (rv != 0)
        return rv;
    rv = read_u64s(r, t->indices, t->nindices, "indices", idx, d);
    if (rv != 0)
        return rv;
    snprintf(where, sizeof(where), "%s: trace[%zu]", r->path, idx);
    return trace_validate_at(t, where, d);
}

/* Opens path and reads and checks the file header. */
static int read_header(struct reader *r, uint32_t *count, struct sd_diag *d)
{
    uint8_t b[TRACE_HEADER_LEN];
    struct stat st;
    uint64_t version;

    if (fstat(fileno(r->f), &st) != 0)
        return sd_diag_set(d, SD_EIO, "%s: %s", r->path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return sd_diag_set(d, SD_EIO,
                           "%s: not a regular file (a trace's counts are "
                           "checked against its size: save it to a file "
                           "first)",
                           r->path);
    r->left = (uint64_t)st.st_size;
    if (r->left < TRACE_HEADER_LEN ||
        fread(b, 1, TRACE_HEADER_LEN, r->f) != TRACE_HEADER_LEN)
        return sd_diag_set(d, SD_EFORMAT, "%s: file truncated in header",
                           r->path);
    r->left -= TRACE_HEADER_LEN;
    if (memcmp(b, TRACE_MAGIC, TRACE_MAGIC_LEN) != 0)
        return sd_diag_set(d, SD_EFORMAT,
                           "%s: magic: not a trace file (no \"%s\")", r->path,
                           TRACE_MAGIC);
    version = get_le(b + 8, 4);
    if (version == 0 || version > TRACE_VERSION)
        return sd_diag_set(d, SD_EFORMAT,
                           "%s: version %llu is not supported (newest %u)",
                           r->path, (unsigned long long)version, TRACE_VERSION);
    *count = (uint32_t)get_le(b + 12, 4);
    if (*count > r->left / TRACE_FIXED_LEN)
        return sd_diag_set(d, SD_EFORMAT, "%s: count %u exceeds the file size",
                           r->path, *count);
    return 0;
}

int trace_file_read(const char *path, struct trace **out, size_t *n,
                    struct sd_diag *d)
{
    struct reader r = {NULL, path, 0};
    struct trace *traces = NULL;
    uint32_t count = 0, i = 0;
    int rv;

    r.f = fopen(path, "rb");
    if (r.f == NULL)
        return sd_diag_set(d, SD_EIO, "%s: %s", path, strerror(errno));
    rv = read_header(&r, &count, d);
    if (rv != 0)
        goto out_close;
    traces = calloc(count > 0 ? count : 1, sizeof(*traces));
    if (traces == NULL) {
        rv = SD_ENOMEM;
        goto out_close;
    }
    for (i = 0; i < count; i++) {
        rv = read_trace(&r, i, &traces[i], d);
        if (rv != 0) {
            i++; /* the failed trace owns arrays too */
            goto out_free_traces;
        }
    }
    if (r.left != 0) {
        rv = sd_diag_set(d, SD_EFORMAT,
                         "%s: %llu trailing bytes after the last of %u traces",
                         path, (unsigned long long)r.left, count);
        goto out_free_traces;
    }
    *out = traces;
    *n = count;
    traces = NULL;
    rv = 0;
out_free_traces:
    trace_array_free(traces, i);
out_close:
    fclose(r.f);
    return rv;
}
