/*
 * Traces made from a table's features, for measuring tables that come
 * without a real trace (formats.h).
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "problem/problem.h"

/* Access counts of bin k: [lo, hi] (bin 16 is capped at 2^16). */
static void bin_range(int k, int64_t *lo, int64_t *hi)
{
    if (k == 0) {
        *lo = *hi = 1;
        return;
    }
    *lo = ((int64_t)1 << (k - 1)) + 1;
    *hi = (int64_t)1 << k;
}

static uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b != 0) {
        uint64_t r = a % b;

        a = b;
        b = r;
    }
    return a;
}

/*
 * Draws the distinct rows' access counts: rows_in_bin[k] rows get counts
 * uniform in bin k's range.  Returns the counts array (n entries) or NULL.
 */
static int64_t *draw_counts(struct rng *g, const int64_t *rows_in_bin,
                            int64_t n)
{
    int64_t *count = malloc((size_t)(n ? n : 1) * sizeof(*count));
    int64_t u = 0, j, lo, hi;
    int k;

    if (count == NULL)
        return NULL;
    for (k = 0; k < TABLE_NBINS; k++) {
        bin_range(k, &lo, &hi);
        for (j = 0; j < rows_in_bin[k]; j++)
            count[u++] = lo + (int64_t)rng_below(g, (uint64_t)(hi - lo + 1));
    }
    return count;
}

/*
 * Moves the drawn counts (rows_in_bin[k] rows of bin k, in bin order)
 * toward a total of `want`, each within its bin's range, the widest bins'
 * rows first: uniform draws in ranges up to 2^15 wide left a few hot rows
 * to decide the total, and a one-hot table of 4,096 bags got 5,763
 * lookups.  The histogram is kept; the pooling factor is met as nearly as
 * the ranges allow.
 */
static void fit_total(int64_t *count, const int64_t *rows_in_bin, int64_t total,
                      int64_t want)
{
    int64_t u = 0, lo, hi, j, step;
    int k;

    for (k = 0; k < TABLE_NBINS; k++)
        u += rows_in_bin[k];
    for (k = TABLE_NBINS - 1; k > 0 && total != want; k--) {
        bin_range(k, &lo, &hi);
        u -= rows_in_bin[k];
        for (j = u; j < u + rows_in_bin[k] && total != want; j++) {
            step = want - total;
            if (step > hi - count[j])
                step = hi - count[j];
            if (step < lo - count[j])
                step = lo - count[j];
            count[j] += step;
            total += step;
        }
    }
}

/* How many distinct rows fall in each bin so that the counts add up to
 * about `lookups` (each bin's mean count is its range's midpoint). */
static int64_t plan_rows(const struct table *t, double lookups,
                         int64_t rows_in_bin[TABLE_NBINS])
{
    double sum = 0, mean = 0, unique;
    int64_t lo, hi, n = 0;
    int k;

    for (k = 0; k < TABLE_NBINS; k++)
        sum += t->bins[k];
    for (k = 0; k < TABLE_NBINS; k++) {
        bin_range(k, &lo, &hi);
        mean += t->bins[k] / sum * (double)(lo + hi) / 2.0;
    }
    unique = lookups / mean;
    if (unique > (double)t->rows)
        unique = (double)t->rows;
    if (unique < 1)
        unique = 1;
    for (k = 0; k < TABLE_NBINS; k++) {
        rows_in_bin[k] = (int64_t)llround(unique * t->bins[k] / sum);
        n += rows_in_bin[k];
    }
    /* Rounding may overshoot the table. */
    for (k = TABLE_NBINS - 1; k >= 0 && n > t->rows; k--) {
        int64_t cut =
            rows_in_bin[k] < n - t->rows ? rows_in_bin[k] : n - t->rows;

        rows_in_bin[k] -= cut;
        n -= cut;
    }
    return n;
}

/* Reorders indices[] (lookup j belongs to bag[j]) into CSR order given
 * the bags' prefix offsets.  Replaces *indices; 0 or SD_ENOMEM. */
static int sort_by_bag(const int64_t *offsets, int64_t nbags,
                       const int64_t *bag, int64_t **indices, int64_t total)
{
    int64_t *fill = calloc((size_t)nbags, sizeof(*fill));
    int64_t *sorted = malloc((size_t)(total ? total : 1) * sizeof(*sorted));
    int64_t j;

    if (fill == NULL || sorted == NULL) {
        free(fill);
        free(sorted);
        return SD_ENOMEM;
    }
    for (j = 0; j < total; j++)
        sorted[offsets[bag[j]] + fill[bag[j]]++] = (*indices)[j];
    free(fill);
    free(*indices);
    *indices = sorted;
    return 0;
}

int trace_from_table(const struct table *t, int64_t nbags, uint64_t seed,
                     struct trace *out)
{
    int64_t rows_in_bin[TABLE_NBINS], nrows = 0, total = 0, j, c;
    int64_t *count = NULL, *offsets = NULL, *indices = NULL, *bag = NULL;
    uint64_t a, b;
    struct rng g;
    double sum = 0;
    bool one_hot = t->pooling_factor == 1.0; /* bags of one (below) */
    int k, rv = SD_ENOMEM;

    if (nbags < 1 || t->rows < 1)
        return SD_EINVAL;
    for (k = 0; k < TABLE_NBINS; k++)
        sum += t->bins[k];
    rng_seed(&g, seed);
    if (sum > 0 && t->pooling_factor > 0)
        nrows = plan_rows(t, (double)nbags * t->pooling_factor, rows_in_bin);
    else
        memset(rows_in_bin, 0, sizeof(rows_in_bin));

    count = draw_counts(&g, rows_in_bin, nrows);
    offsets = calloc((size_t)nbags + 1, sizeof(*offsets));
    if (count == NULL || offsets == NULL)
        goto out_free;
    for (j = 0; j < nrows; j++)
        total += count[j];
    if (nrows > 0) {
        fit_total(count, rows_in_bin, total,
                  llround((double)nbags * t->pooling_factor));
        for (j = 0, total = 0; j < nrows; j++)
            total += count[j];
    }
    indices = malloc((size_t)(total ? total : 1) * sizeof(*indices));
    bag = malloc((size_t)(total ? total : 1) * sizeof(*bag));
    if (indices == NULL || bag == NULL)
        goto out_free;

    /* Distinct rows spread over the table by an affine bijection of
     * [0, rows); each lookup then goes to a uniformly drawn bag, or, for a
     * one-hot table (pooling factor exactly 1), the lookups are dealt
     * round the bags in a random order: one a bag (as many lookups as bags
     * where the histogram's ranges allow).  Bags of random lengths cost a
     * narrow table's lookups some 9 % more than bags of one (the bag loop
     * mispredicts: docs/models.md, "One-hot bags and Poisson bags"), and
     * one-hot features have bags of one. */
    a = 1 + rng_below(&g, (uint64_t)t->rows);
    while (gcd(a, (uint64_t)t->rows) != 1)
        a++;
    b = rng_below(&g, (uint64_t)t->rows);
    total = 0;
    for (j = 0; j < nrows; j++) {
        int64_t row = (int64_t)(((unsigned __int128)a * (uint64_t)j + b) %
                                (uint64_t)t->rows);

        for (c = 0; c < count[j]; c++) {
            bag[total] = one_hot ? total % nbags
                                 : (int64_t)rng_below(&g, (uint64_t)nbags);
            indices[total++] = row;
        }
    }
    if (one_hot)
        for (j = total - 1; j > 0; j--) { /* Fisher-Yates */
            int64_t r = (int64_t)rng_below(&g, (uint64_t)j + 1), x = bag[j];

            bag[j] = bag[r];
            bag[r] = x;
        }
    for (j = 0; j < total; j++)
        offsets[bag[j] + 1]++;
    for (j = 0; j < nbags; j++)
        offsets[j + 1] += offsets[j];
    if (sort_by_bag(offsets, nbags, bag, &indices, total) != 0)
        goto out_free;

    memset(out, 0, sizeof(*out));
    memcpy(out->name, t->name, sizeof(out->name));
    out->rows = t->rows;
    out->dim = t->dim;
    out->nbags = nbags;
    out->nindices = total;
    out->offsets = offsets;
    out->indices = indices;
    offsets = indices = NULL;
    rv = 0;

out_free:
    free(bag);
    free(indices);
    free(offsets);
    free(count);
    return rv;
}
