/*
 * Traces: one batch of embedding-bag lookups of one table.  This file checks
 * their invariants and turns a trace into the table features the cost models
 * read (neuroshard.md 1.1); formats/trace_file.c reads and writes them.
 */
#include <stdlib.h>
#include <string.h>

#include "problem/problem.h"

void trace_destroy(struct trace *t)
{
    if (t == NULL)
        return;
    free(t->offsets);
    free(t->indices);
    memset(t, 0, sizeof(*t));
}

void trace_array_free(struct trace *traces, size_t n)
{
    size_t i;

    if (traces == NULL)
        return;
    for (i = 0; i < n; i++)
        trace_destroy(&traces[i]);
    free(traces);
}

/*
 * The name of a trace for a message: its bytes up to the first NUL or the
 * end of the array, so an unterminated name cannot overrun.
 */
static int name_len(const struct trace *t)
{
    const char *nul = memchr(t->name, '\0', sizeof(t->name));

    return nul != NULL ? (int)(nul - t->name) : (int)sizeof(t->name);
}

int trace_validate_at(const struct trace *t, const char *where,
                      struct sd_diag *d)
{
    int nl = name_len(t);
    int64_t b, i;

    if (nl == 0 || nl == (int)sizeof(t->name))
        return sd_diag_set(d, SD_EFORMAT,
                           "%s: name is empty or not NUL-terminated", where);
    if (t->rows < 1 || t->rows > TABLE_ROWS_MAX)
        return sd_diag_set(
            d, SD_EFORMAT, "%s \"%.*s\": rows %lld not in [1, %lld]", where, nl,
            t->name, (long long)t->rows, (long long)TABLE_ROWS_MAX);
    if (t->dim < TABLE_DIM_MIN || t->dim > TABLE_DIM_MAX ||
        t->dim % TABLE_DIM_ALIGN != 0)
        return sd_diag_set(d, SD_EFORMAT,
                           "%s \"%.*s\": dim %d is not a multiple of %d in "
                           "[%d, %d]",
                           where, nl, t->name, (int)t->dim, TABLE_DIM_ALIGN,
                           TABLE_DIM_MIN, TABLE_DIM_MAX);
    if (t->nbags < 0 || t->nbags == INT64_MAX)
        return sd_diag_set(d, SD_EFORMAT, "%s \"%.*s\": nbags %lld invalid",
                           where, nl, t->name, (long long)t->nbags);
    if (t->nindices < 0)
        return sd_diag_set(d, SD_EFORMAT,
                           "%s \"%.*s\": nindices %lld is negative", where, nl,
                           t->name, (long long)t->nindices);
    if (t->offsets == NULL)
        return sd_diag_set(d, SD_EFORMAT, "%s \"%.*s\": offsets missing", where,
                           nl, t->name);
    if (t->indices == NULL && t->nindices > 0)
        return sd_diag_set(d, SD_EFORMAT, "%s \"%.*s\": indices missing", where,
                           nl, t->name);
    if (t->offsets[0] != 0)
        return sd_diag_set(d, SD_EFORMAT,
                           "%s \"%.*s\": offsets[0] is %lld, not 0", where, nl,
                           t->name, (long long)t->offsets[0]);
    for (b = 0; b < t->nbags; b++)
        if (t->offsets[b + 1] < t->offsets[b])
            return sd_diag_set(d, SD_EFORMAT,
                               "%s \"%.*s\": offsets[%lld] = %lld is less "
                               "than offsets[%lld] = %lld",
                               where, nl, t->name, (long long)(b + 1),
                               (long long)t->offsets[b + 1], (long long)b,
                               (long long)t->offsets[b]);
    if (t->offsets[t->nbags] != t->nindices)
        return sd_diag_set(d, SD_EFORMAT,
                           "%s \"%.*s\": offsets[nbags] = %lld differs from "
                           "nindices %lld",
                           where, nl, t->name, (long long)t->offsets[t->nbags],
                           (long long)t->nindices);
    for (i = 0; i < t->nindices; i++)
        if (t->indices[i] < 0 || t->indices[i] >= t->rows)
            return sd_diag_set(d, SD_EFORMAT,
                               "%s \"%.*s\": indices[%lld] = %lld not in "
                               "[0, rows %lld)",
                               where, nl, t->name, (long long)i,
                               (long long)t->indices[i], (long long)t->rows);
    return 0;
}

int trace_validate(const struct trace *t, struct sd_diag *d)
{
    return trace_validate_at(t, "trace", d);
}

/*
 * Access counts of the unique indices of a trace, in an open-addressing hash
 * table with linear probing.  The table starts small and doubles at half
 * load, so a skewed trace with few unique rows stays cache-resident.
 */
struct count_slot {
    uint64_t key;   /* index + 1; 0 marks an empty slot */
    uint64_t count; /* accesses of that index */
};

struct count_map {
    struct count_slot *slots;
    uint64_t mask; /* capacity - 1, capacity a power of two */
    int shift;     /* 64 - log2(capacity), for Fibonacci hashing */
    uint64_t used;
};

static int count_map_init(struct count_map *m, int bits)
{
    m->slots = calloc((size_t)1 << bits, sizeof(*m->slots));
    if (m->slots == NULL)
        return SD_ENOMEM;
    m->mask = ((uint64_t)1 << bits) - 1;
    m->shift = 64 - bits;
    m->used = 0;
    return 0;
}

static uint64_t count_map_home(const struct count_map *m, uint64_t key)
{
    return (key * UINT64_C(0x9e3779b97f4a7c15)) >> m->shift;
}

/* Doubles the capacity, moving every slot.  Returns 0 or SD_ENOMEM. */
static int count_map_grow(struct count_map *m)
{
    struct count_map next;
    uint64_t i, h;
    int rv;

    rv = count_map_init(&next, 64 - m->shift + 1);
    if (rv != 0)
        return rv;
    for (i = 0; i <= m->mask; i++) {
        if (m->slots[i].key == 0)
            continue;
        h = count_map_home(&next, m->slots[i].key);
        while (next.slots[h].key != 0)
            h = (h + 1) & next.mask;
        next.slots[h] = m->slots[i];
    }
    next.used = m->used;
    free(m->slots);
    *m = next;
    return 0;
}

/* The bin of an access count c >= 1: 0 for c = 1, ceil(log2(c)) up to 16. */
static int count_bin(uint64_t c)
{
    uint64_t v = c - 1;
    int k = 0;

    while (v != 0 && k < TABLE_NBINS - 1) {
        k++;
        v >>= 1;
    }
    return k;
}

/* Structural checks of trace_features(): trace_validate_at() without
 * messages. */
static bool is_well_formed(const struct trace *t)
{
    int64_t b;

    if (t->rows < 1 || t->rows > TABLE_ROWS_MAX || t->nbags < 0 ||
        t->nbags == INT64_MAX || t->nindices < 0 || t->offsets == NULL ||
        (t->indices == NULL && t->nindices > 0) || t->offsets[0] != 0 ||
        t->offsets[t->nbags] != t->nindices)
        return false;
    for (b = 0; b < t->nbags; b++)
        if (t->offsets[b + 1] < t->offsets[b])
            return false;
    return true;
}

int trace_features(const struct trace *t, double bins[TABLE_NBINS],
                   double *pooling_factor)
{
    struct count_map m = {0};
    uint64_t hist[TABLE_NBINS] = {0};
    uint64_t key, h, i;
    int64_t j;
    int k, rv;

    if (!is_well_formed(t))
        return SD_EINVAL;
    if (t->nindices == 0) {
        for (k = 0; k < TABLE_NBINS; k++)
            bins[k] = 0.0;
        *pooling_factor = 0.0;
        return 0;
    }
    rv = count_map_init(&m, 12);
    if (rv != 0)
        return rv;
    for (j = 0; j < t->nindices; j++) {
        if (t->indices[j] < 0 || t->indices[j] >= t->rows) {
            rv = SD_EINVAL;
            goto out_free_map;
        }
        key = (uint64_t)t->indices[j] + 1;
        h = count_map_home(&m, key);
        while (m.slots[h].key != key && m.slots[h].key != 0)
            h = (h + 1) & m.mask;
        if (m.slots[h].key == key) {
            m.slots[h].count++;
            continue;
        }
        m.slots[h].key = key;
        m.slots[h].count = 1;
        if (++m.used * 2 > m.mask + 1) {
            rv = count_map_grow(&m);
            if (rv != 0)
                goto out_free_map;
        }
    }
    for (i = 0; i <= m.mask; i++)
        if (m.slots[i].key != 0)
            hist[count_bin(m.slots[i].count)]++;
    for (k = 0; k < TABLE_NBINS; k++)
        bins[k] = (double)hist[k] / (double)m.used;
    *pooling_factor =
        t->nbags > 0 ? (double)t->nindices / (double)t->nbags : 0.0;
    rv = 0;
out_free_map:
    free(m.slots);
    return rv;
}

int trace_to_table(const struct trace *t, struct table *out)
{
    struct table tab;
    int nl, rv;

    memset(&tab, 0, sizeof(tab));
    nl = name_len(t);
    if (nl == 0 || nl == (int)sizeof(t->name))
        return SD_EINVAL;
    rv = trace_features(t, tab.bins, &tab.pooling_factor);
    if (rv != 0)
        return rv;
    memcpy(tab.name, t->name, (size_t)nl);
    tab.rows = t->rows;
    tab.dim = t->dim;
    tab.dtype = TABLE_DTYPE_FP32;
    *out = tab;
    return 0;
}

int trace_row_block(const struct trace *t, int64_t first, int64_t count,
                    struct trace *out)
{
    struct trace b;
    int64_t j, bag, n = 0;

    if (!is_well_formed(t) || first < 0 || count < 1 || first >= t->rows ||
        count > t->rows - first)
        return SD_EINVAL;
    for (j = 0; j < t->nindices; j++)
        if (t->indices[j] >= first && t->indices[j] - first < count)
            n++;
    memset(&b, 0, sizeof(b));
    memcpy(b.name, t->name, sizeof(b.name));
    b.rows = count;
    b.dim = t->dim;
    b.nbags = t->nbags;
    b.nindices = n;
    b.offsets = malloc(((size_t)t->nbags + 1) * sizeof(*b.offsets));
    b.indices = malloc((n ? (size_t)n : 1) * sizeof(*b.indices));
    if (b.offsets == NULL || b.indices == NULL) {
        trace_destroy(&b);
        return SD_ENOMEM;
    }
    n = 0;
    for (bag = 0; bag < t->nbags; bag++) {
        b.offsets[bag] = n;
        for (j = t->offsets[bag]; j < t->offsets[bag + 1]; j++)
            if (t->indices[j] >= first && t->indices[j] - first < count)
                b.indices[n++] = t->indices[j] - first;
    }
    b.offsets[t->nbags] = n;
    *out = b;
    return 0;
}
