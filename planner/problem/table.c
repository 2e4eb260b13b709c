/* Tables: validation, sizes, the column-split rule and the cost-model
 * features (problem.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "problem/problem.h"
#include "shardd/utf8.h"

static const char *const dtype_names[TABLE_DTYPE_COUNT] = {
    [TABLE_DTYPE_FP32] = "fp32",
    [TABLE_DTYPE_FP16] = "fp16",
    [TABLE_DTYPE_BF16] = "bf16",
    [TABLE_DTYPE_INT8] = "int8",
};

size_t table_dtype_size(enum table_dtype dtype)
{
    switch (dtype) {
    case TABLE_DTYPE_FP16:
    case TABLE_DTYPE_BF16:
        return 2;
    case TABLE_DTYPE_INT8:
        return 1;
    case TABLE_DTYPE_FP32:
    default:
        return 4;
    }
}

int table_dtype_parse(const char *s, enum table_dtype *out)
{
    int i;

    for (i = 0; i < TABLE_DTYPE_COUNT; i++)
        if (strcmp(s, dtype_names[i]) == 0) {
            *out = (enum table_dtype)i;
            return 0;
        }
    return SD_EINVAL;
}

const char *table_dtype_name(enum table_dtype dtype)
{
    return (unsigned)dtype < TABLE_DTYPE_COUNT ? dtype_names[dtype] : "fp32";
}

uint64_t table_row_bytes(enum table_dtype dtype, int32_t cols)
{
    uint64_t row = (uint64_t)cols * table_dtype_size(dtype);

    if (dtype == TABLE_DTYPE_INT8)
        row += TABLE_INT8_ROW_EXTRA;
    return row;
}

uint64_t table_bytes(const struct table *t, int32_t cols)
{
    return (uint64_t)t->rows * table_row_bytes(t->dtype, cols);
}

int32_t table_split_levels(int32_t dim)
{
    int32_t levels = 1;

    while (dim > 0 && dim % (2 * TABLE_DIM_ALIGN) == 0) {
        dim /= 2;
        levels++;
    }
    return levels;
}

static double bins_sum(const struct table *t)
{
    double sum = 0;
    int k;

    for (k = 0; k < TABLE_NBINS; k++)
        sum += t->bins[k];
    return sum;
}

void table_normalize_bins(struct table *t)
{
    double sum = bins_sum(t);
    int k, top = 0;

    if (!(sum > 1.0 && sum <= 1.0 + TABLE_BINS_SLACK))
        return;
    for (k = 0; k < TABLE_NBINS; k++) {
        t->bins[k] /= sum;
        if (t->bins[k] > t->bins[top])
            top = k;
    }
    /* The quotients may still sum to an ulp or two over 1: take those off
     * the largest bin, so that a second call changes nothing (bins written
     * out and read back stay the same bits). */
    while (bins_sum(t) > 1.0)
        t->bins[top] = nextafter(t->bins[top], 0.0);
}

int table_validate(const struct table *t, size_t idx, struct sd_diag *d)
{
    double sum = 0;
    int k;

    if (t->name[0] == '\0')
        return sd_diag_set(d, SD_EINVAL, "tables[%zu]: name is empty", idx);
    /* Names go into JSON, the human table and log lines: a control
     * character would break the lines, bytes that are not UTF-8 the JSON. */
    if (!sd_utf8_valid(t->name))
        return sd_diag_set(d, SD_EINVAL, "tables[%zu]: name is not UTF-8", idx);
    for (k = 0; t->name[k] != '\0'; k++)
        if ((unsigned char)t->name[k] < 0x20 || t->name[k] == 0x7f)
            return sd_diag_set(d, SD_EINVAL,
                               "tables[%zu]: name has a control character "
                               "(byte 0x%02x at %d)",
                               idx, (unsigned char)t->name[k], k);
    if (t->rows < 1 || t->rows > TABLE_ROWS_MAX)
        return sd_diag_set(
            d, SD_EINVAL, "tables[%zu] \"%s\": rows %lld is not in [1, %lld]",
            idx, t->name, (long long)t->rows, (long long)TABLE_ROWS_MAX);
    if (t->dim < TABLE_DIM_MIN || t->dim > TABLE_DIM_MAX ||
        t->dim % TABLE_DIM_ALIGN != 0)
        return sd_diag_set(d, SD_EINVAL,
                           "tables[%zu] \"%s\": dim %d is not a multiple of "
                           "%d in [%d, %d]",
                           idx, t->name, (int)t->dim, TABLE_DIM_ALIGN,
                           TABLE_DIM_MIN, TABLE_DIM_MAX);
    if (!isfinite(t->pooling_factor) || t->pooling_factor < 0 ||
        t->pooling_factor > TABLE_PF_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           "tables[%zu] \"%s\": pooling_factor %g is not in "
                           "[0, %g]",
                           idx, t->name, t->pooling_factor, TABLE_PF_MAX);
    for (k = 0; k < TABLE_NBINS; k++) {
        if (!isfinite(t->bins[k]) || t->bins[k] < 0 || t->bins[k] > 1)
            return sd_diag_set(d, SD_EINVAL,
                               "tables[%zu] \"%s\": bins[%d] %g is not in "
                               "[0, 1]",
                               idx, t->name, k, t->bins[k]);
        sum += t->bins[k];
    }
    if (sum > 1.0 + TABLE_BINS_SLACK)
        return sd_diag_set(d, SD_EINVAL,
                           "tables[%zu] \"%s\": bins sum to %.9g, more than 1 "
                           "(up to 1 + %g is taken for rounding)",
                           idx, t->name, sum, TABLE_BINS_SLACK);
    if ((unsigned)t->dtype >= TABLE_DTYPE_COUNT)
        return sd_diag_set(d, SD_EINVAL, "tables[%zu] \"%s\": dtype %d unknown",
                           idx, t->name, (int)t->dtype);
    if (t->tier >= TIER_COUNT ||
        (t->tier == TIER_UVM_CACHING &&
         !(t->cache_load_factor > 0 && t->cache_load_factor < 1)))
        return sd_diag_set(d, SD_EINVAL,
                           "tables[%zu] \"%s\": tier %d with cache load "
                           "factor %g (caching needs one in (0, 1))",
                           idx, t->name, (int)t->tier,
                           (double)t->cache_load_factor);
    return 0;
}

struct name_ref {
    const char *name;
    size_t idx;
};

static int cmp_name_ref(const void *a, const void *b)
{
    const struct name_ref *x = a, *y = b;
    int c = strcmp(x->name, y->name);

    if (c != 0)
        return c;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

int table_validate_all(const struct table *tables, size_t n, struct sd_diag *d)
{
    struct name_ref *refs;
    size_t i;
    int rv;

    if (n == 0)
        return sd_diag_set(d, SD_EINVAL, "tables: the list is empty");
    for (i = 0; i < n; i++) {
        rv = table_validate(&tables[i], i, d);
        if (rv != 0)
            return rv;
    }
    refs = malloc(n * sizeof(*refs));
    if (refs == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    for (i = 0; i < n; i++) {
        refs[i].name = tables[i].name;
        refs[i].idx = i;
    }
    qsort(refs, n, sizeof(*refs), cmp_name_ref);
    rv = 0;
    for (i = 1; i < n; i++) {
        if (strcmp(refs[i - 1].name, refs[i].name) == 0) {
            rv = sd_diag_set(d, SD_EINVAL,
                             "tables[%zu] \"%s\": name repeats tables[%zu]",
                             refs[i].idx, refs[i].name, refs[i - 1].idx);
            break;
        }
    }
    free(refs);
    return rv;
}

void table_features(const struct table *t, int32_t dim,
                    float out[TABLE_NFEATURES])
{
    /* Lexicographic key order of the original's dict2tensor: bin_0, bin_1,
     * bin_10 .. bin_16, bin_2 .. bin_9, dim, pooling_factor, row. */
    static const int bin_order[TABLE_NBINS] = {0, 1, 10, 11, 12, 13, 14, 15, 16,
                                               2, 3, 4,  5,  6,  7,  8,  9};
    int k;

    for (k = 0; k < TABLE_NBINS; k++)
        out[k] = (float)t->bins[bin_order[k]];
    out[17] = (float)dim;
    out[18] = (float)t->pooling_factor;
    out[19] = (float)t->rows;
}

/* table_bin_count()'s values, written out: every latent's inputs (through
 * table_unique_rows()) and every tier's miss curve read all 17, and each
 * was an ldexp() call (docs/models.md, "A plan's memo that keeps its
 * keys"). */
static const double bin_counts[TABLE_NBINS] = {
    1.0,   2.0,   3.5,    6.5,    12.5,   24.5,    48.5,    96.5,   192.5,
    384.5, 768.5, 1536.5, 3072.5, 6144.5, 12288.5, 24576.5, 65536.0};
_Static_assert(TABLE_NBINS == 17, "bin_counts[] has one count a bin");

double table_bin_count(int k)
{
    return bin_counts[k <= 0 ? 0 : k >= TABLE_NBINS ? TABLE_NBINS - 1 : k];
}

double table_unique_rows(const struct table *t, int64_t batch)
{
    double per_row = 0, lookups = t->pooling_factor * (double)batch, unique;
    int k;

    for (k = 0; k < TABLE_NBINS; k++)
        per_row += t->bins[k] * table_bin_count(k);
    if (!(per_row > 0) || !(lookups > 0))
        return 0;
    unique = lookups / per_row;
    return unique < (double)t->rows ? unique : (double)t->rows;
}
