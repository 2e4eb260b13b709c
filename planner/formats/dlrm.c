/*
 * One batch of lookups of many tables in the layout of
 * facebookresearch/dlrm_datasets (formats.h; neuroshard.md 10), as TorchRec
 * and FBGEMM users dump it: every table's lookups concatenated table-major
 * in `indices`, `offsets` global into them (T x B + 1 entries: bag b of
 * table t is indices[offsets[t*B + b] .. offsets[t*B + b + 1])), and the
 * bag `lengths` (T x B).  The dataset itself is a pickled tuple of torch
 * tensors; no pickle is read here: the arrays come as NumPy .npy files
 * (a documented header, then raw little-endian data) or raw .bin files.
 *
 * Tables are read one at a time with stdio (offsets slice, then its
 * indices), so memory stays at one table's batch whatever the file's size.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/formats.h"
#include "problem/problem.h"

#define NPY_MAGIC      "\x93NUMPY"
#define NPY_HEADER_MAX 65536
#define DLRM_ROWS_MIN  100 /* gen_dlrm_data: max(100, max index + 1) */

/* One array file: where its data starts and how it is laid out. */
struct dlrm_array {
    FILE *f;
    char path[4096];
    int width;                /* bytes per element: 4 or 8 */
    bool is_signed;           /* i4/i8 (u4/u8 otherwise) */
    int64_t count;            /* elements */
    int64_t rows_2d, cols_2d; /* a 2-D .npy's shape; 0 otherwise */
    long data_at;             /* byte offset of element 0 */
    bool raw;                 /* a .bin: width still to be told */
    uint64_t size;            /* data bytes */
};

static void array_close(struct dlrm_array *a)
{
    if (a->f != NULL)
        fclose(a->f);
    a->f = NULL;
}

/* Element i as int64; false when it cannot be read or does not fit. */
static bool array_get(struct dlrm_array *a, int64_t i, int64_t *out)
{
    uint8_t b[8];
    uint64_t v = 0;
    int k;

    if (fseek(a->f, a->data_at + (long)(i * a->width), SEEK_SET) != 0 ||
        fread(b, 1, (size_t)a->width, a->f) != (size_t)a->width)
        return false;
    for (k = a->width - 1; k >= 0; k--)
        v = (v << 8) | b[k];
    if (a->is_signed && a->width == 4)
        v = (uint64_t)(int64_t)(int32_t)(uint32_t)v;
    if (!a->is_signed && v > (uint64_t)INT64_MAX)
        return false;
    *out = (int64_t)v;
    return true;
}

/* Elements [from, from + n) into out; false on a short read or a value
 * that does not fit int64. */
static bool array_read(struct dlrm_array *a, int64_t from, int64_t n,
                       int64_t *out)
{
    uint8_t buf[8 * 4096];
    int64_t done = 0, k, j;
    int b;

    if (n == 0)
        return true;
    if (fseek(a->f, a->data_at + (long)(from * a->width), SEEK_SET) != 0)
        return false;
    while (done < n) {
        k = n - done < 4096 ? n - done : 4096;
        if (fread(buf, (size_t)a->width, (size_t)k, a->f) != (size_t)k)
            return false;
        for (j = 0; j < k; j++) {
            uint64_t v = 0;

            for (b = a->width - 1; b >= 0; b--)
                v = (v << 8) | buf[j * a->width + b];
            if (a->is_signed && a->width == 4)
                v = (uint64_t)(int64_t)(int32_t)(uint32_t)v;
            if (!a->is_signed && v > (uint64_t)INT64_MAX)
                return false;
            out[done + j] = (int64_t)v;
        }
        done += k;
    }
    return true;
}

/* ---------------------------------------------------------------------- */
/* Opening: .npy headers and raw files                                     */

/* The value of 'key': in a .npy header dict, or NULL. */
static const char *npy_value(const char *hdr, const char *key)
{
    char pat[32];
    const char *p;

    snprintf(pat, sizeof(pat), "'%s'", key);
    p = strstr(hdr, pat);
    if (p == NULL)
        return NULL;
    p = strchr(p + strlen(pat), ':');
    if (p == NULL)
        return NULL;
    p++;
    while (*p == ' ')
        p++;
    return p;
}

/* Parses a .npy header: dtype, order and a 1-D or 2-D shape. */
/* The length of a header's shape value, "(2, 3, 4)": to its ')' (the
 * header's padding after it left out), at most 40 bytes. */
static size_t shape_len(const char *shape)
{
    size_t n = strcspn(shape, ")\n");

    if (shape[n] == ')')
        n++;
    return n < 40 ? n : 40;
}

static int npy_parse(struct dlrm_array *a, const char *hdr, struct sd_diag *d)
{
    const char *descr = npy_value(hdr, "descr");
    const char *order = npy_value(hdr, "fortran_order");
    const char *shape = npy_value(hdr, "shape");
    long long x, y;
    int used = 0;

    if (descr == NULL || order == NULL || shape == NULL)
        return sd_diag_set(d, SD_EFORMAT,
                           "%s: the .npy header lacks descr, fortran_order "
                           "or shape",
                           a->path);
    if (strncmp(descr, "'<i4'", 5) == 0 || strncmp(descr, "'<u4'", 5) == 0)
        a->width = 4;
    else if (strncmp(descr, "'<i8'", 5) == 0 || strncmp(descr, "'<u8'", 5) == 0)
        a->width = 8;
    else
        return sd_diag_set(d, SD_EFORMAT,
                           "%s: dtype %.6s is not a little-endian 4- or "
                           "8-byte integer ('<i4', '<i8', '<u4', '<u8')",
                           a->path, descr);
    a->is_signed = descr[2] == 'i';
    if (strncmp(order, "False", 5) != 0)
        return sd_diag_set(d, SD_EFORMAT,
                           "%s: fortran_order arrays are not read; save it in "
                           "C order",
                           a->path);
    if (sscanf(shape, "(%lld, %lld)%n", &x, &y, &used) == 2 && used > 0 &&
        x >= 0 && y >= 0) {
        a->rows_2d = x;
        a->cols_2d = y;
        a->count = x * y;
    } else if (sscanf(shape, "(%lld,)%n", &x, &used) == 1 && used > 0 &&
               x >= 0) {
        a->count = x;
    } else {
        return sd_diag_set(d, SD_EFORMAT, "%s: shape %.*s is not 1-D or 2-D",
                           a->path, (int)shape_len(shape), shape);
    }
    if (a->size != (uint64_t)a->count * (uint64_t)a->width)
        return sd_diag_set(d, SD_EFORMAT,
                           "%s: shape says %lld elements of %d bytes, the "
                           "file holds %llu bytes of data",
                           a->path, (long long)a->count, a->width,
                           (unsigned long long)a->size);
    return 0;
}

/* Reads a .npy's preamble (magic, version, header) and parses it. */
static int npy_open(struct dlrm_array *a, uint64_t fsize, struct sd_diag *d)
{
    uint8_t pre[12];
    char *hdr;
    size_t hlen, fixed;
    int rv;

    if (fread(pre, 1, 10, a->f) != 10 || memcmp(pre, NPY_MAGIC, 6) != 0)
        return sd_diag_set(d, SD_EFORMAT, "%s: not a .npy file", a->path);
    if (pre[6] == 1) {
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
        fixed = 10;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 10, 1, 2, a->f) != 2)
            return sd_diag_set(d, SD_EFORMAT, "%s: truncated", a->path);
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 |
               (size_t)pre[11] << 24;
        fixed = 12;
    } else {
        return sd_diag_set(d, SD_EFORMAT, "%s: .npy version %d is not read",
                           a->path, (int)pre[6]);
    }
    if (hlen > NPY_HEADER_MAX || fixed + hlen > fsize)
        return sd_diag_set(d, SD_EFORMAT, "%s: .npy header is too long",
                           a->path);
    hdr = calloc(1, hlen + 1);
    if (hdr == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    if (fread(hdr, 1, hlen, a->f) != hlen) {
        free(hdr);
        return sd_diag_set(d, SD_EFORMAT, "%s: truncated", a->path);
    }
    a->data_at = (long)(fixed + hlen);
    a->size = fsize - fixed - hlen;
    rv = npy_parse(a, hdr, d);
    free(hdr);
    return rv;
}

/*
 * Opens dir/NAME.npy, else dir/NAME.bin; *found false (and 0) when neither
 * exists and !required.
 */
static int array_open(const char *dir, const char *name, bool required,
                      struct dlrm_array *a, bool *found, struct sd_diag *d)
{
    struct stat st;
    int k;

    memset(a, 0, sizeof(*a));
    *found = false;
    for (k = 0; k < 2; k++) {
        if ((size_t)snprintf(a->path, sizeof(a->path), "%s/%s.%s", dir, name,
                             k == 0 ? "npy" : "bin") >= sizeof(a->path))
            return sd_diag_set(d, SD_EINVAL, "%s: the path is too long", dir);
        if (stat(a->path, &st) == 0)
            break;
    }
    if (k == 2) {
        if (!required)
            return 0;
        return sd_diag_set(d, SD_EIO, "%s: no %s.npy or %s.bin", dir, name,
                           name);
    }
    a->f = fopen(a->path, "rb");
    if (a->f == NULL)
        return sd_diag_set(d, SD_EIO, "%s: %s", a->path, strerror(errno));
    *found = true;
    a->raw = k == 1;
    if (a->raw) {
        a->size = (uint64_t)st.st_size;
        a->is_signed = true;
        return 0;
    }
    return npy_open(a, (uint64_t)st.st_size, d);
}

/* ---------------------------------------------------------------------- */
/* Element widths of raw files                                             */

/* The widths a file may have: its .npy dtype's, or both for a raw one. */
static int width_choices(const struct dlrm_array *a, int w[2])
{
    if (!a->raw) {
        w[0] = a->width;
        return 1;
    }
    w[0] = 8;
    w[1] = 4;
    return 2;
}

/*
 * Raw files carry no dtype: the widths of offsets and indices are those
 * under which offsets start at 0 and end at the number of indices, and
 * lengths has one element fewer than offsets.  Exactly one pair must fit.
 */
static int raw_widths(struct dlrm_array *off, struct dlrm_array *idx,
                      struct dlrm_array *len, bool has_len, struct sd_diag *d)
{
    int wo[2], wi[2], no, ni, k, j, fit = 0, fo = 0, fi = 0;
    int64_t first, last;

    no = width_choices(off, wo);
    ni = width_choices(idx, wi);
    for (k = 0; k < no; k++) {
        if (off->size % (uint64_t)wo[k] != 0 || off->size == 0)
            continue;
        off->width = wo[k];
        off->count = (int64_t)(off->size / (uint64_t)wo[k]);
        if (!array_get(off, 0, &first) || first != 0 ||
            !array_get(off, off->count - 1, &last) || last < 0)
            continue;
        for (j = 0; j < ni; j++) {
            if (idx->size != (uint64_t)wi[j] * (uint64_t)last)
                continue;
            fit++;
            fo = wo[k];
            fi = wi[j];
            if (last == 0)
                break; /* no indices: any width reads them */
        }
    }
    if (fit != 1)
        return sd_diag_set(d, SD_EFORMAT,
                           "%s and %s: %s: read as 4- or 8-byte integers, "
                           "the offsets must start at 0 and end at the "
                           "number of indices; check that the two belong "
                           "together, or save them as .npy (which says the "
                           "width)",
                           off->path, idx->path,
                           fit == 0 ? "no element width fits"
                                    : "several element widths fit");
    off->width = fo;
    off->count = (int64_t)(off->size / (uint64_t)fo);
    idx->width = fi;
    idx->count = (int64_t)(idx->size / (uint64_t)fi);
    if (!has_len || !len->raw)
        return 0;
    len->count = off->count - 1;
    len->width = 0;
    for (k = 4; k <= 8; k += 4)
        if (len->size == (uint64_t)k * (uint64_t)len->count)
            len->width = k;
    if (len->count == 0)
        len->width = 4;
    if (len->width == 0)
        return sd_diag_set(d, SD_EFORMAT,
                           "%s: %llu bytes are not %lld bag lengths of 4 or "
                           "8 bytes (one per offset but the last)",
                           len->path, (unsigned long long)len->size,
                           (long long)len->count);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Tables                                                                  */

struct dlrm_read {
    struct dlrm_array off, idx, len;
    bool has_len;
    int64_t ntables, nbags;
    int64_t *offsets; /* one table's nbags + 1, rebased to 0 */
    int64_t *lengths; /* one table's nbags */
    int64_t *indices; /* one table's lookups (grown as needed) */
    int64_t icap;
};

static void dlrm_read_close(struct dlrm_read *r)
{
    array_close(&r->off);
    array_close(&r->idx);
    array_close(&r->len);
    free(r->offsets);
    free(r->lengths);
    free(r->indices);
}

/* The table count and batch: from a 2-D lengths.npy, else from nbags. */
static int dlrm_shape(struct dlrm_read *r, int64_t nbags, struct sd_diag *d)
{
    int64_t bags = r->off.count - 1;

    if (r->has_len && r->len.count != bags)
        return sd_diag_set(d, SD_EFORMAT,
                           "%s: %lld bag lengths, %s has %lld offsets (one "
                           "more than the bags)",
                           r->len.path, (long long)r->len.count, r->off.path,
                           (long long)r->off.count);
    if (r->has_len && r->len.rows_2d > 0) {
        if (nbags > 0 && nbags != r->len.cols_2d)
            return sd_diag_set(d, SD_EINVAL,
                               "%s: its shape says %lld bags per table, "
                               "the batch asked is %lld",
                               r->len.path, (long long)r->len.cols_2d,
                               (long long)nbags);
        nbags = r->len.cols_2d;
    }
    if (nbags <= 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: raw arrays carry no shape: give the batch "
                           "(bags per table), or save lengths as a 2-D .npy "
                           "[tables, batch]",
                           r->off.path);
    if (bags == 0 || bags % nbags != 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: %lld bags are not a whole number of tables "
                           "of %lld bags",
                           r->off.path, (long long)bags, (long long)nbags);
    r->nbags = nbags;
    r->ntables = bags / nbags;
    r->offsets = malloc((size_t)(nbags + 1) * sizeof(*r->offsets));
    r->lengths = malloc((size_t)nbags * sizeof(*r->lengths));
    if (r->offsets == NULL || r->lengths == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    return 0;
}

/* Table t's bags and lookups into r's buffers, checked. */
static int read_table(struct dlrm_read *r, int64_t t, int64_t *nidx,
                      struct sd_diag *d)
{
    int64_t b, base, n, *grown;

    if (!array_read(&r->off, t * r->nbags, r->nbags + 1, r->offsets))
        return sd_diag_set(d, SD_EFORMAT,
                           "%s: table %lld: cannot read its "
                           "offsets (or one exceeds 2^63 - 1)",
                           r->off.path, (long long)t);
    base = r->offsets[0];
    for (b = 0; b < r->nbags; b++)
        if (r->offsets[b + 1] < r->offsets[b])
            return sd_diag_set(d, SD_EFORMAT,
                               "%s: table %lld: offsets[%lld] is less than "
                               "the one before",
                               r->off.path, (long long)t,
                               (long long)(t * r->nbags + b + 1));
    for (b = 0; b <= r->nbags; b++)
        r->offsets[b] -= base;
    n = r->offsets[r->nbags];
    if (base + n > r->idx.count)
        return sd_diag_set(d, SD_EFORMAT,
                           "%s: table %lld: offsets reach %lld, there are "
                           "%lld indices",
                           r->off.path, (long long)t, (long long)(base + n),
                           (long long)r->idx.count);
    if (r->has_len) {
        if (!array_read(&r->len, t * r->nbags, r->nbags, r->lengths))
            return sd_diag_set(d, SD_EFORMAT,
                               "%s: table %lld: cannot read "
                               "its lengths",
                               r->len.path, (long long)t);
        for (b = 0; b < r->nbags; b++)
            if (r->lengths[b] != r->offsets[b + 1] - r->offsets[b])
                return sd_diag_set(
                    d, SD_EFORMAT,
                    "%s: table %lld, bag %lld: length %lld, "
                    "the offsets say %lld",
                    r->len.path, (long long)t, (long long)b,
                    (long long)r->lengths[b],
                    (long long)(r->offsets[b + 1] - r->offsets[b]));
    }
    if (n > r->icap) {
        grown = realloc(r->indices, (size_t)n * sizeof(*grown));
        if (grown == NULL)
            return sd_diag_set(d, SD_ENOMEM, "out of memory");
        r->indices = grown;
        r->icap = n;
    }
    if (!array_read(&r->idx, base, n, r->indices))
        return sd_diag_set(d, SD_EFORMAT,
                           "%s: table %lld: cannot read its indices (or one "
                           "exceeds 2^63 - 1)",
                           r->idx.path, (long long)t);
    *nidx = n;
    return 0;
}

/* Table t's features into out. */
static int table_of(struct dlrm_read *r, int64_t t, int32_t dim,
                    struct table *out, struct sd_diag *d)
{
    struct trace tr;
    int64_t n = 0, j, top = -1;
    int rv;

    rv = read_table(r, t, &n, d);
    if (rv != 0)
        return rv;
    for (j = 0; j < n; j++) {
        if (r->indices[j] < 0)
            return sd_diag_set(
                d, SD_EFORMAT, "%s: table %lld: index %lld is negative",
                r->idx.path, (long long)t, (long long)r->indices[j]);
        if (r->indices[j] > top)
            top = r->indices[j];
    }
    if (top >= TABLE_ROWS_MAX)
        return sd_diag_set(d, SD_EFORMAT,
                           "%s: table %lld: index %lld is past %lld rows",
                           r->idx.path, (long long)t, (long long)top,
                           (long long)TABLE_ROWS_MAX);
    memset(&tr, 0, sizeof(tr));
    snprintf(tr.name, sizeof(tr.name), "table_%04lld", (long long)t);
    tr.rows = top + 1 > DLRM_ROWS_MIN ? top + 1 : DLRM_ROWS_MIN;
    tr.dim = dim;
    tr.nbags = r->nbags;
    tr.nindices = n;
    tr.offsets = r->offsets;
    tr.indices = r->indices;
    rv = trace_to_table(&tr, out);
    if (rv != 0)
        return sd_diag_set(d, rv, "table %lld: %s", (long long)t,
                           sd_strerror(rv));
    return 0;
}

int dlrm_read_tables(const char *dir, int64_t nbags, int32_t dim,
                     struct table **out, size_t *n, struct input_notes *notes,
                     struct sd_diag *d)
{
    struct dlrm_read r;
    struct table *tables = NULL;
    bool found;
    int64_t t;
    int rv;

    memset(&r, 0, sizeof(r));
    if (dim < TABLE_DIM_MIN || dim > TABLE_DIM_MAX ||
        dim % TABLE_DIM_ALIGN != 0)
        return sd_diag_set(
            d, SD_EINVAL, "dim %d is not a multiple of %d in [%d, %d]",
            (int)dim, TABLE_DIM_ALIGN, TABLE_DIM_MIN, TABLE_DIM_MAX);
    rv = array_open(dir, "offsets", true, &r.off, &found, d);
    if (rv == 0)
        rv = array_open(dir, "indices", true, &r.idx, &found, d);
    if (rv == 0)
        rv = array_open(dir, "lengths", false, &r.len, &r.has_len, d);
    if (rv == 0)
        rv = raw_widths(&r.off, &r.idx, &r.len, r.has_len, d);
    if (rv == 0)
        rv = dlrm_shape(&r, nbags, d);
    if (rv != 0)
        goto out_close;
    tables = calloc((size_t)r.ntables, sizeof(*tables));
    if (tables == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_close;
    }
    for (t = 0; t < r.ntables && rv == 0; t++)
        rv = table_of(&r, t, dim, &tables[t], d);
    if (rv == 0 && notes != NULL &&
        (input_notes_add(notes, NOTE_ASSUMED, NULL, "rows",
                         "rows of each table: max(100, its largest index + "
                         "1), as gen_dlrm_data counts them (the layout has "
                         "no hash sizes)") != 0 ||
         input_notes_add(notes, NOTE_ASSUMED, NULL, "dim",
                         "dim of every table: %d (the layout has no "
                         "dims)",
                         (int)dim) != 0))
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
    if (rv != 0) {
        free(tables);
        goto out_close;
    }
    *out = tables;
    *n = (size_t)r.ntables;

out_close:
    dlrm_read_close(&r);
    return rv;
}
