/*
 * The cache of a table in host memory with its hottest rows in device
 * memory (kernels.h, kern_cache_layout()): which rows it holds and where
 * each lookup of a batch reads.  Shared by the backends that time
 * KERN_TIER_UVM_CACHING; pure host code.
 */
#include <stdlib.h>
#include <string.h>

#include "kern_internal.h"

/* A row the batch reads more than once, and how often. */
struct hot_row {
    int64_t row;
    int64_t n;
};

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* Most-read first; ties, the lower row first. */
static int cmp_hotness(const void *a, const void *b)
{
    const struct hot_row *x = a, *y = b;

    if (x->n != y->n)
        return x->n < y->n ? 1 : -1;
    return (x->row > y->row) - (x->row < y->row);
}

/* By row. */
static int cmp_row(const void *a, const void *b)
{
    const struct hot_row *x = a, *y = b;

    return (x->row > y->row) - (x->row < y->row);
}

/*
 * The rows t's batch reads more than once, most-read first, into *out (n
 * of them; NULL when none).  Returns 0 or SD_ENOMEM.
 */
static int hot_rows(const struct kern_table_desc *t, struct hot_row **out,
                    int64_t *n)
{
    int64_t *sorted, i, j, k = 0;
    struct hot_row *hot;

    *out = NULL;
    *n = 0;
    if (t->nindices == 0)
        return 0;
    sorted = malloc((size_t)t->nindices * sizeof(*sorted));
    hot = malloc((size_t)t->nindices * sizeof(*hot));
    if (sorted == NULL || hot == NULL) {
        free(sorted);
        free(hot);
        return SD_ENOMEM;
    }
    memcpy(sorted, t->indices, (size_t)t->nindices * sizeof(*sorted));
    qsort(sorted, (size_t)t->nindices, sizeof(*sorted), cmp_i64);
    for (i = 0; i < t->nindices; i = j) {
        for (j = i + 1; j < t->nindices && sorted[j] == sorted[i]; j++)
            ;
        if (j - i > 1)
            hot[k++] = (struct hot_row){sorted[i], j - i};
    }
    free(sorted);
    qsort(hot, (size_t)k, sizeof(*hot), cmp_hotness);
    *out = hot;
    *n = k;
    return 0;
}

/*
 * The slot of `row` in a cache whose first nheld slots hold the rows of
 * held (sorted by row, each with its slot in .n) and whose room after them
 * holds the other rows below fill_end in order: -1 where it is not cached.
 */
static int64_t slot_of(int64_t row, const struct hot_row *held, int64_t nheld,
                       int64_t fill_end)
{
    int64_t lo = 0, hi = nheld, mid;

    /* lo: the held rows below `row` */
    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        if (held[mid].row < row)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < nheld && held[lo].row == row)
        return held[lo].n;
    return row < fill_end ? nheld + row - lo : -1;
}

int kern_cache_layout(const struct kern_table_desc *t, int64_t *cached,
                      int64_t *loc, int64_t *nmiss)
{
    struct hot_row *hot = NULL;
    int64_t nhot, nheld, room, fill_end = 0, h = 0, i, s, misses = 0;
    int rv;

    rv = hot_rows(t, &hot, &nhot);
    if (rv != 0)
        return rv;
    nheld = nhot < t->cache_rows ? nhot : t->cache_rows;
    /* The held hot rows take slots 0 .. nheld - 1, hottest first; then
     * sorted by row, each remembering its slot. */
    for (s = 0; s < nheld; s++) {
        if (cached != NULL)
            cached[s] = hot[s].row;
        hot[s].n = s;
    }
    qsort(hot, (size_t)nheld, sizeof(*hot), cmp_row);
    /* The room left: the other rows from row 0, up to fill_end. */
    room = t->cache_rows - nheld;
    for (s = nheld; room > 0; fill_end++) {
        if (h < nheld && hot[h].row == fill_end) {
            h++;
            continue;
        }
        if (cached != NULL)
            cached[s] = fill_end;
        s++;
        room--;
    }
    for (i = 0; i < t->nindices; i++) {
        s = slot_of(t->indices[i], hot, nheld, fill_end);
        misses += s < 0;
        if (loc != NULL)
            loc[i] = s;
    }
    free(hot);
    if (nmiss != NULL)
        *nmiss = misses;
    return 0;
}
