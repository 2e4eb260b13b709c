/*
 * Tests of traces (planner/problem/trace.c, formats/trace_file.c): the access
 * histogram and pooling factor against hand-computed traces, trace_validate()
 * on each kind of broken trace, and the trace file format: round trip, and
 * truncated, corrupted or lying files rejected with SD_EFORMAT.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "planner.h"

/* A trace over the given arrays (copied, so the trace owns them). */
static struct trace make(const char *name, int64_t rows, const int64_t *off,
                         int64_t nbags, const int64_t *idx)
{
    struct trace t;

    memset(&t, 0, sizeof(t));
    snprintf(t.name, sizeof(t.name), "%s", name);
    t.rows = rows;
    t.dim = 16;
    t.nbags = nbags;
    t.nindices = off[nbags];
    t.offsets = malloc((size_t)(nbags + 1) * sizeof(*t.offsets));
    memcpy(t.offsets, off, (size_t)(nbags + 1) * sizeof(*off));
    t.indices =
        malloc((size_t)(t.nindices > 0 ? t.nindices : 1) * sizeof(*t.indices));
    if (t.nindices > 0)
        memcpy(t.indices, idx, (size_t)t.nindices * sizeof(*idx));
    return t;
}

/* One bag holding `count` copies of each of n indices, in order. */
static struct trace make_counts(int64_t rows, const int64_t *index,
                                const int64_t *count, int n)
{
    struct trace t;
    int64_t total = 0, k, j = 0;
    int i;

    for (i = 0; i < n; i++)
        total += count[i];
    memset(&t, 0, sizeof(t));
    snprintf(t.name, sizeof(t.name), "counts");
    t.rows = rows;
    t.dim = 8;
    t.nbags = 1;
    t.nindices = total;
    t.offsets = malloc(2 * sizeof(*t.offsets));
    t.offsets[0] = 0;
    t.offsets[1] = total;
    t.indices = malloc((size_t)total * sizeof(*t.indices));
    for (i = 0; i < n; i++)
        for (k = 0; k < count[i]; k++)
            t.indices[j++] = index[i];
    return t;
}

static void check_bins(const double *got, const double *want)
{
    int k;

    for (k = 0; k < TABLE_NBINS; k++)
        CHECK_NEAR(got[k], want[k], 1e-12);
}

static void test_features_small(void)
{
    /*
     * indices {0, 0, 1} {2, 2, 2, 2, 2}: counts 0 -> 2, 1 -> 1, 2 -> 5, so
     * 3 unique indices: count 1 is bin 0, count 2 bin 1 (2^0, 2^1], count 5
     * bin 3 (2^2, 2^3]; each bin 1/3.  Pooling factor 8 / 2 bags = 4.
     */
    static const int64_t off[] = {0, 3, 8};
    static const int64_t idx[] = {0, 0, 1, 2, 2, 2, 2, 2};
    double want[TABLE_NBINS] = {0}, bins[TABLE_NBINS], pf = -1;
    struct trace t = make("small", 10, off, 2, idx);

    want[0] = want[1] = want[3] = 1.0 / 3.0;
    CHECK(trace_features(&t, bins, &pf) == 0);
    check_bins(bins, want);
    CHECK_NEAR(pf, 4.0, 1e-12);
    trace_destroy(&t);
    CHECK(t.offsets == NULL && t.indices == NULL && t.nindices == 0);
    trace_destroy(&t); /* twice is harmless */
    trace_destroy(NULL);
}

static void test_features_edges(void)
{
    /*
     * Counts at every bin edge: 1 -> bin 0; 2 -> 1; 3, 4 -> 2; 5, 8 -> 3;
     * 9, 16 -> 4; 17 -> 5.  9 unique: bins 0, 1, 5 hold 1/9 each, bins 2, 3,
     * 4 hold 2/9 each.  One bag of 1+2+3+4+5+8+9+16+17 = 65 lookups.
     */
    static const int64_t index[] = {90, 80, 70, 60, 50, 40, 30, 20, 10};
    static const int64_t count[] = {1, 2, 3, 4, 5, 8, 9, 16, 17};
    double want[TABLE_NBINS] = {0}, bins[TABLE_NBINS], pf;
    struct trace t = make_counts(100, index, count, 9);

    want[0] = want[1] = want[5] = 1.0 / 9.0;
    want[2] = want[3] = want[4] = 2.0 / 9.0;
    CHECK(trace_features(&t, bins, &pf) == 0);
    check_bins(bins, want);
    CHECK_NEAR(pf, 65.0, 1e-12);
    trace_destroy(&t);
}

static void test_features_top_bins(void)
{
    /*
     * The last bins: 16384 -> bin 14 (2^13, 2^14]; 16385 and 32768 -> bin
     * 15 (2^14, 2^15]; 32769 -> bin 16 (> 2^15); 3 and 4 -> bin 2.  Six
     * unique: bin 2 = 2/6, bin 14 = 1/6, bin 15 = 2/6, bin 16 = 1/6.
     */
    static const int64_t index[] = {5, 9, 0, 1, 7, 3};
    static const int64_t count[] = {3, 4, 16384, 16385, 32768, 32769};
    double want[TABLE_NBINS] = {0}, bins[TABLE_NBINS], pf;
    struct trace t = make_counts(10, index, count, 6);

    want[2] = want[15] = 2.0 / 6.0;
    want[14] = want[16] = 1.0 / 6.0;
    CHECK(trace_features(&t, bins, &pf) == 0);
    check_bins(bins, want);
    CHECK_NEAR(pf, 3.0 + 4 + 16384 + 16385 + 32768 + 32769, 1e-12);
    trace_destroy(&t);
}

static void test_features_empty(void)
{
    /* No lookups in 4 bags: all bins 0, pooling factor 0. */
    static const int64_t off[] = {0, 0, 0, 0, 0};
    static const int64_t none[] = {0};
    double zero[TABLE_NBINS] = {0}, bins[TABLE_NBINS], pf = -1;
    struct trace t = make("empty", 100, off, 4, none);

    bins[3] = 7.0;
    CHECK(trace_features(&t, bins, &pf) == 0);
    check_bins(bins, zero);
    CHECK(pf == 0.0);
    trace_destroy(&t);
    /* No bags at all. */
    t = make("nobags", 100, off, 0, none);
    CHECK(trace_features(&t, bins, &pf) == 0);
    check_bins(bins, zero);
    CHECK(pf == 0.0);
    trace_destroy(&t);
}

/*
 * Many distinct indices (the hash table grows several times) against a
 * dense count array.
 */
static void test_features_large(void)
{
    const int64_t rows = 300000, n = 1000000;
    uint32_t *count = calloc((size_t)rows, sizeof(*count));
    double want[TABLE_NBINS] = {0}, bins[TABLE_NBINS], pf;
    int64_t hist[TABLE_NBINS] = {0}, unique = 0, i, c;
    struct trace t;
    struct rng r;
    int k;

    memset(&t, 0, sizeof(t));
    snprintf(t.name, sizeof(t.name), "large");
    t.rows = rows;
    t.dim = 4;
    t.nbags = 1000;
    t.nindices = n;
    t.offsets = malloc((size_t)(t.nbags + 1) * sizeof(*t.offsets));
    t.indices = malloc((size_t)n * sizeof(*t.indices));
    for (i = 0; i <= t.nbags; i++)
        t.offsets[i] = i * (n / t.nbags);
    rng_seed(&r, 7);
    for (i = 0; i < n; i++) {
        /* Skewed: half the lookups on 1000 rows, half on all of them. */
        t.indices[i] = (int64_t)rng_below(&r, i % 2 ? 1000 : (uint64_t)rows);
        count[t.indices[i]]++;
    }
    for (i = 0; i < rows; i++) {
        if (count[i] == 0)
            continue;
        unique++;
        for (k = 0, c = count[i] - 1; c > 0 && k < 16; k++)
            c >>= 1;
        hist[k]++;
    }
    for (k = 0; k < TABLE_NBINS; k++)
        want[k] = (double)hist[k] / (double)unique;
    CHECK(trace_features(&t, bins, &pf) == 0);
    check_bins(bins, want);
    CHECK_NEAR(pf, 1000.0, 1e-12);
    trace_destroy(&t);
    free(count);
}

static void test_to_table(void)
{
    static const int64_t off[] = {0, 3, 8};
    static const int64_t idx[] = {0, 0, 1, 2, 2, 2, 2, 2};
    struct trace t = make("to_table", 10, off, 2, idx);
    struct table tab, keep;

    CHECK(trace_to_table(&t, &tab) == 0);
    CHECK(strcmp(tab.name, "to_table") == 0);
    CHECK(tab.rows == 10 && tab.dim == 16);
    CHECK(tab.dtype == TABLE_DTYPE_FP32);
    CHECK_NEAR(tab.pooling_factor, 4.0, 1e-12);
    CHECK_NEAR(tab.bins[3], 1.0 / 3.0, 1e-12);
    /* A broken trace: SD_EINVAL and the output untouched. */
    t.indices[4] = 10;
    keep = tab;
    CHECK(trace_to_table(&t, &tab) == SD_EINVAL);
    CHECK(memcmp(&keep, &tab, sizeof(tab)) == 0);
    CHECK(trace_features(&t, tab.bins, &tab.pooling_factor) == SD_EINVAL);
    trace_destroy(&t);
}

/* trace_validate() must fail with SD_EFORMAT and name `field`. */
static void check_invalid(const struct trace *t, const char *field)
{
    struct sd_diag d = {{0}};
    double bins[TABLE_NBINS], pf;
    int rv = trace_validate(t, &d);

    CHECK(rv == SD_EFORMAT);
    if (strstr(d.msg, field) == NULL) {
        CHECK(!"diag names the field");
        fprintf(stderr, "  want \"%s\" in: %s\n", field, d.msg);
    }
    /* The feature code must refuse whatever validation refuses, except
     * the name and dim it does not read. */
    if (strcmp(field, "name") != 0 && strcmp(field, "dim") != 0)
        CHECK(trace_features(t, bins, &pf) == SD_EINVAL);
}

static void test_validate(void)
{
    static const int64_t off[] = {0, 2, 5};
    static const int64_t idx[] = {1, 2, 3, 4, 0};
    struct trace t = make("valid", 5, off, 2, idx), b;
    struct sd_diag d;
    int64_t *saved;

    CHECK(trace_validate(&t, &d) == 0);
    b = t;
    b.name[0] = '\0';
    check_invalid(&b, "name");
    b = t;
    memset(b.name, 'x', sizeof(b.name));
    check_invalid(&b, "name");
    b = t;
    b.rows = 0;
    check_invalid(&b, "rows");
    b.rows = TABLE_ROWS_MAX + 1;
    check_invalid(&b, "rows");
    b = t;
    b.dim = 6;
    check_invalid(&b, "dim");
    b.dim = 0;
    check_invalid(&b, "dim");
    b.dim = TABLE_DIM_MAX + 4;
    check_invalid(&b, "dim");
    b = t;
    b.nbags = -1;
    check_invalid(&b, "nbags");
    b = t;
    b.nindices = -1;
    check_invalid(&b, "nindices");
    b = t;
    b.offsets = NULL;
    check_invalid(&b, "offsets");
    b = t;
    b.indices = NULL;
    check_invalid(&b, "indices");
    b = t;
    b.nindices = 4; /* offsets[nbags] = 5 */
    check_invalid(&b, "nindices");
    t.offsets[0] = 1;
    check_invalid(&t, "offsets[0]");
    t.offsets[0] = 0;
    t.offsets[1] = 6;
    check_invalid(&t, "offsets[2]");
    t.offsets[1] = 2;
    t.indices[3] = -1;
    check_invalid(&t, "indices[3]");
    t.indices[3] = 5; /* == rows */
    check_invalid(&t, "indices[3]");
    t.indices[3] = 4;
    CHECK(trace_validate(&t, NULL) == 0);
    /* An empty trace needs no indices array. */
    saved = t.indices;
    t.indices = NULL;
    t.nbags = 1;
    t.nindices = 0;
    t.offsets[1] = 0;
    CHECK(trace_validate(&t, &d) == 0);
    t.indices = saved;
    trace_destroy(&t);
}

/* ------------------------------------------------------------------------ */
/* Files                                                                     */

static char tmp_path[64];

static void tmp_make(void)
{
    int fd;

    snprintf(tmp_path, sizeof(tmp_path), "/tmp/test_trace.XXXXXX");
    fd = mkstemp(tmp_path);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf;
    long n;

    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    *len = fread(buf, 1, (size_t)n, f);
    fclose(f);
    return buf;
}

static void spit(const char *path, const unsigned char *buf, size_t len)
{
    FILE *f = fopen(path, "wb");

    if (f == NULL)
        return;
    fwrite(buf, 1, len, f);
    fclose(f);
}

static void put64(unsigned char *p, uint64_t v)
{
    int i;

    for (i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static bool traces_equal(const struct trace *a, const struct trace *b)
{
    return strcmp(a->name, b->name) == 0 && a->rows == b->rows &&
           a->dim == b->dim && a->nbags == b->nbags &&
           a->nindices == b->nindices &&
           memcmp(a->offsets, b->offsets,
                  (size_t)(a->nbags + 1) * sizeof(*a->offsets)) == 0 &&
           (a->nindices == 0 ||
            memcmp(a->indices, b->indices,
                   (size_t)a->nindices * sizeof(*a->indices)) == 0);
}

/*
 * The three traces of the round trip: hand-made, empty, and one with
 * indices that need all 8 bytes' worth of a large table.
 */
static void make_three(struct trace t[3])
{
    static const int64_t off[] = {0, 3, 8};
    static const int64_t idx[] = {0, 0, 1, 2, 2, 2, 2, 2};
    static const int64_t eoff[] = {0, 0, 0};
    static const int64_t big_off[] = {0, 2, 3};
    static const int64_t big_idx[] = {((int64_t)1 << 40) - 1, 0x0102030405, 77};

    t[0] = make("first", 10, off, 2, idx);
    t[1] = make("empty_table", 100, eoff, 2, big_idx);
    t[2] = make("big", (int64_t)1 << 40, big_off, 2, big_idx);
}

/* Offset of trace 0's nbags field: header, name_len, "first", rows, dim. */
#define T0_NBAGS (16 + 2 + 5 + 8 + 4)

/* Reads path expecting SD_EFORMAT with `field` in the message. */
static void check_read_fails(const char *field)
{
    static struct trace sentinel;
    struct trace *out = &sentinel;
    struct sd_diag d = {{0}};
    size_t n = 12345;
    int rv = trace_file_read(tmp_path, &out, &n, &d);

    CHECK(rv == SD_EFORMAT);
    CHECK(out == &sentinel && n == 12345);
    if (field != NULL && strstr(d.msg, field) == NULL) {
        CHECK(!"diag names the field");
        fprintf(stderr, "  want \"%s\" in: %s\n", field, d.msg);
    }
}

static void test_file_round_trip(void)
{
    struct trace t[3], *back = NULL;
    struct sd_diag d;
    unsigned char *buf;
    size_t n = 0, len = 0, i;

    make_three(t);
    tmp_make();
    CHECK(trace_file_write(tmp_path, t, 3, &d) == 0);
    CHECK(trace_file_read(tmp_path, &back, &n, &d) == 0);
    CHECK(n == 3);
    for (i = 0; i < 3 && i < n; i++)
        CHECK(traces_equal(&t[i], &back[i]));
    trace_array_free(back, n);

    /* The bytes: magic, version 1 and count 3 little-endian, exact size. */
    buf = slurp(tmp_path, &len);
    CHECK(buf != NULL && memcmp(buf, "SDTRACE1", 8) == 0);
    CHECK(buf[8] == 1 && buf[9] == 0 && buf[10] == 0 && buf[11] == 0);
    CHECK(buf[12] == 3 && buf[13] == 0 && buf[14] == 0 && buf[15] == 0);
    CHECK(len == 16 + (30 + 5 + 8 * 3 + 8 * 8) + (30 + 11 + 8 * 3) +
                     (30 + 3 + 8 * 3 + 8 * 3));
    /* Trace 0's nbags (2) is little-endian at its offset. */
    CHECK(buf[T0_NBAGS] == 2 && buf[T0_NBAGS + 1] == 0);
    free(buf);

    /* No traces at all is a valid file. */
    CHECK(trace_file_write(tmp_path, t, 0, &d) == 0);
    CHECK(trace_file_read(tmp_path, &back, &n, &d) == 0);
    CHECK(n == 0);
    trace_array_free(back, n);

    /* An invalid trace is not written. */
    t[0].indices[0] = 10;
    CHECK(trace_file_write(tmp_path, t, 3, &d) == SD_EFORMAT);
    CHECK(strstr(d.msg, "trace[0]") != NULL);
    CHECK(strstr(d.msg, "indices[0]") != NULL);
    /* Nor to a directory that does not exist. */
    t[0].indices[0] = 0;
    CHECK(trace_file_write("/nonexistent/dir/x", t, 3, &d) == SD_EIO);
    for (i = 0; i < 3; i++)
        trace_destroy(&t[i]);
    remove(tmp_path);
}

static void test_file_corrupt(void)
{
    struct trace t[3], *back;
    struct sd_diag d;
    unsigned char *good, *bad;
    size_t len = 0, cut, i, n, ok = 0;
    int rv;

    make_three(t);
    tmp_make();
    CHECK(trace_file_write(tmp_path, t, 3, &d) == 0);
    good = slurp(tmp_path, &len);
    bad = malloc(len + 1);

    /* Every truncation is a format error. */
    for (cut = 0; cut < len; cut++) {
        spit(tmp_path, good, cut);
        check_read_fails(NULL);
    }
    /* So is a byte too many. */
    memcpy(bad, good, len);
    bad[len] = 0;
    spit(tmp_path, bad, len + 1);
    check_read_fails("trailing");

    /* Bad magic, a newer version, version 0. */
    memcpy(bad, good, len);
    bad[0] = 'X';
    spit(tmp_path, bad, len);
    check_read_fails("magic");
    memcpy(bad, good, len);
    bad[8] = 2;
    spit(tmp_path, bad, len);
    check_read_fails("version 2");
    bad[8] = 0;
    spit(tmp_path, bad, len);
    check_read_fails("version 0");

    /* A count the file cannot hold. */
    memcpy(bad, good, len);
    bad[15] = 0x10;
    spit(tmp_path, bad, len);
    check_read_fails("count");

    /* Lying sizes: 2^40 indices or 2^62 bags in a file of a few hundred
     * bytes are refused before anything is allocated (an 8 TiB malloc
     * would give SD_ENOMEM, or abort under ASan). */
    memcpy(bad, good, len);
    put64(bad + T0_NBAGS + 8, (uint64_t)1 << 40);
    spit(tmp_path, bad, len);
    check_read_fails("nindices");
    memcpy(bad, good, len);
    put64(bad + T0_NBAGS, (uint64_t)1 << 62);
    spit(tmp_path, bad, len);
    check_read_fails("nbags");
    put64(bad + T0_NBAGS, UINT64_MAX);
    spit(tmp_path, bad, len);
    check_read_fails("nbags");

    /* rows 0 and dim 6 in trace 0 (rows at 23, dim at 31). */
    memcpy(bad, good, len);
    put64(bad + T0_NBAGS - 12, 0);
    spit(tmp_path, bad, len);
    check_read_fails("rows 0");
    memcpy(bad, good, len);
    bad[T0_NBAGS - 4] = 6;
    spit(tmp_path, bad, len);
    check_read_fails("dim 6");

    /* name_len 0. */
    memcpy(bad, good, len);
    bad[16] = 0;
    spit(tmp_path, bad, len);
    check_read_fails("name_len");

    /* Offsets going backwards: trace 0's offsets[1] = 9 > offsets[2] = 8. */
    memcpy(bad, good, len);
    put64(bad + T0_NBAGS + 16 + 8, 9);
    spit(tmp_path, bad, len);
    check_read_fails("offsets[2]");
    /* An index out of range: trace 0's indices[1] = 10 = rows. */
    memcpy(bad, good, len);
    put64(bad + T0_NBAGS + 16 + 24 + 8, 10);
    spit(tmp_path, bad, len);
    check_read_fails("indices[1]");
    /* An index above INT64_MAX. */
    put64(bad + T0_NBAGS + 16 + 24 + 8, UINT64_MAX);
    spit(tmp_path, bad, len);
    check_read_fails("indices[1]");

    /* Any single flipped byte: success or a clean error, never a crash. */
    for (i = 0; i < len; i++) {
        memcpy(bad, good, len);
        bad[i] ^= 0xa5;
        spit(tmp_path, bad, len);
        back = NULL;
        n = 0;
        rv = trace_file_read(tmp_path, &back, &n, &d);
        CHECK(rv == 0 || rv == SD_EFORMAT);
        if (rv == 0) {
            ok++;
            trace_array_free(back, n);
        }
    }
    /* Only a flip inside an index value or name can leave a valid file. */
    CHECK(ok < len / 2);

    /* A file that is not there. */
    remove(tmp_path);
    CHECK(trace_file_read(tmp_path, &back, &n, &d) == SD_EIO);
    CHECK(strstr(d.msg, tmp_path) != NULL);
    free(good);
    free(bad);
    for (i = 0; i < 3; i++)
        trace_destroy(&t[i]);
}

/* A row block keeps every bag, with the ids that fall in it shifted down
 * to the block's first row, in their order; blocks outside the table are
 * refused. */
static void test_row_block(void)
{
    /* rows 0..9; bags {1, 7, 3}, {}, {9, 4, 4}, {0} */
    static const int64_t off[] = {0, 3, 3, 6, 7};
    static const int64_t idx[] = {1, 7, 3, 9, 4, 4, 0};
    static const int64_t want_off[] = {0, 1, 1, 3, 3};
    static const int64_t want_idx[] = {0, 1, 1}; /* rows 3, 4, 4 of [3, 6) */
    struct trace t = make("rb", 10, off, 4, idx), b, last;
    double pf = 0;
    int k;

    CHECK(trace_row_block(&t, 3, 3, &b) == 0);
    CHECK(b.rows == 3 && b.nbags == 4 && b.nindices == 3 && b.dim == 16);
    CHECK(strcmp(b.name, "rb") == 0);
    for (k = 0; k <= 4; k++)
        CHECK(b.offsets[k] == want_off[k]);
    for (k = 0; k < 3 && k < b.nindices; k++)
        CHECK(b.indices[k] == want_idx[k]);
    CHECK(trace_validate(&b, NULL) == 0);
    /* its features are the block's own: 3 lookups over 4 bags, 2 rows */
    {
        double bins[TABLE_NBINS];

        CHECK(trace_features(&b, bins, &pf) == 0);
        CHECK_NEAR(pf, 0.75, 1e-12);
    }
    /* the last rows, and a block no lookup lands in */
    CHECK(trace_row_block(&t, 9, 1, &last) == 0);
    CHECK(last.nindices == 1 && last.indices[0] == 0 && last.offsets[3] == 1);
    trace_destroy(&last);
    CHECK(trace_row_block(&t, 5, 2, &last) == 0);
    CHECK(last.nindices == 0 && last.offsets[4] == 0);
    trace_destroy(&last);
    CHECK(trace_row_block(&t, 8, 3, &last) == SD_EINVAL);
    CHECK(trace_row_block(&t, -1, 2, &last) == SD_EINVAL);
    CHECK(trace_row_block(&t, 0, 0, &last) == SD_EINVAL);
    CHECK(trace_row_block(&t, 10, 1, &last) == SD_EINVAL);
    trace_destroy(&b);
    trace_destroy(&t);
}

int main(void)
{
    test_features_small();
    test_features_edges();
    test_features_top_bins();
    test_features_empty();
    test_features_large();
    test_to_table();
    test_row_block();
    test_validate();
    test_file_round_trip();
    test_file_corrupt();
    return tap_done();
}
