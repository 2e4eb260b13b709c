/*
 * Plans: the building blocks every algorithm places tables with, the checks
 * of a finished plan, and the checks of the inputs every algorithm makes
 * first (problem.h).
 */
#include <stdlib.h>
#include <string.h>

#include "problem/problem.h"

int plan_init(struct plan *p, int32_t ndevices)
{
    memset(p, 0, sizeof(*p));
    p->devices = calloc((size_t)ndevices, sizeof(*p->devices));
    if (p->devices == NULL)
        return SD_ENOMEM;
    p->ndevices = ndevices;
    p->algorithm = "";
    p->comm_model = "";
    p->explain.critical_device = -1;
    return 0;
}

void plan_destroy(struct plan *p)
{
    if (p == NULL)
        return;
    free(p->shards);
    free(p->devices);
    memset(p, 0, sizeof(*p));
}

int plan_add(struct plan *p, uint32_t table, int32_t device, int32_t col_offset,
             int32_t col_width)
{
    struct shard *s;

    if (p->nshards == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;

        s = realloc(p->shards, cap * sizeof(*s));
        if (s == NULL)
            return SD_ENOMEM;
        p->shards = s;
        p->cap = cap;
    }
    s = &p->shards[p->nshards++];
    s->table = table;
    s->device = device;
    s->col_offset = col_offset;
    s->col_width = col_width;
    return 0;
}

static int cmp_shard(const void *a, const void *b)
{
    const struct shard *x = a, *y = b;

    if (x->table != y->table)
        return x->table < y->table ? -1 : 1;
    if (x->col_offset != y->col_offset)
        return x->col_offset < y->col_offset ? -1 : 1;
    return (x->device > y->device) - (x->device < y->device);
}

void plan_sort(struct plan *p)
{
    if (p->nshards > 1)
        qsort(p->shards, p->nshards, sizeof(*p->shards), cmp_shard);
}

/* Checks that the sorted shards of table i tile [0, dim) exactly; *pos is
 * the first shard of table i and is advanced past its shards. */
static int check_columns(const struct plan *p, size_t *pos, uint32_t i,
                         const struct table *t, const char *what,
                         struct sd_diag *d)
{
    int32_t next = 0;
    size_t k = *pos;

    for (; k < p->nshards && p->shards[k].table == i; k++) {
        const struct shard *s = &p->shards[k];

        if (s->col_offset != next)
            return sd_diag_set(
                d, SD_EINVAL, "%s: table \"%s\": columns [%d, %d) %s", what,
                t->name, (int)next, (int)s->col_offset,
                s->col_offset > next ? "are not placed" : "are placed twice");
        next += s->col_width;
    }
    if (next != t->dim)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: table \"%s\": %d of %d columns placed", what,
                           t->name, (int)next, (int)t->dim);
    *pos = k;
    return 0;
}

int plan_validate(struct plan *p, const struct table *tables, size_t ntables,
                  const struct topology *t, enum optimizer opt,
                  struct sd_diag *d)
{
    return plan_validate_as(p, tables, ntables, t, opt, "plan", d);
}

int plan_validate_as(struct plan *p, const struct table *tables, size_t ntables,
                     const struct topology *t, enum optimizer opt,
                     const char *what, struct sd_diag *d)
{
    uint64_t *used;
    size_t k, pos = 0;
    uint32_t i;
    int rv = 0;

    for (k = 0; k < p->nshards; k++) {
        const struct shard *s = &p->shards[k];

        if (s->table >= ntables)
            return sd_diag_set(d, SD_EINVAL,
                               "%s: shards[%zu]: table %u does not exist", what,
                               k, (unsigned)s->table);
        if (s->device < 0 || s->device >= t->ndevices)
            return sd_diag_set(d, SD_EINVAL,
                               "%s: table \"%s\": device %d is not in "
                               "[0, %d)",
                               what, tables[s->table].name, (int)s->device,
                               (int)t->ndevices);
        if (s->col_width <= 0 || s->col_width % TABLE_DIM_ALIGN != 0 ||
            s->col_offset < 0 || s->col_offset % TABLE_DIM_ALIGN != 0)
            return sd_diag_set(d, SD_EINVAL,
                               "%s: table \"%s\": shard at column %d of "
                               "width %d is not aligned to %d columns",
                               what, tables[s->table].name, (int)s->col_offset,
                               (int)s->col_width, TABLE_DIM_ALIGN);
        /* Checked here, in 64 bits, so that summing widths cannot overflow
         * whatever a plan file says. */
        if ((int64_t)s->col_offset + s->col_width > tables[s->table].dim)
            return sd_diag_set(d, SD_EINVAL,
                               "%s: table \"%s\": shard at column %d of "
                               "width %d runs past its %d columns",
                               what, tables[s->table].name, (int)s->col_offset,
                               (int)s->col_width, (int)tables[s->table].dim);
    }
    plan_sort(p);
    for (i = 0; i < ntables; i++) {
        rv = check_columns(p, &pos, i, &tables[i], what, d);
        if (rv != 0)
            return rv;
    }

    used = calloc((size_t)t->ndevices, sizeof(*used));
    if (used == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    for (k = 0; k < p->nshards; k++) {
        const struct shard *s = &p->shards[k];

        uint64_t cap = topology_mem(t, s->device);

        used[s->device] += shard_bytes(&tables[s->table], s->col_width, opt);
        if (used[s->device] > cap) {
            rv = sd_diag_set(d, SD_ENOSPACE,
                             "%s: device %d: %llu bytes placed, capacity "
                             "%llu (over by %llu at table \"%s\")",
                             what, (int)s->device,
                             (unsigned long long)used[s->device],
                             (unsigned long long)cap,
                             (unsigned long long)(used[s->device] - cap),
                             tables[s->table].name);
            break;
        }
    }
    free(used);
    return rv;
}

int plan_check_inputs(const struct table *tables, size_t ntables,
                      const struct topology *t, struct sd_diag *d)
{
    int rv;

    rv = table_validate_all(tables, ntables, d);
    if (rv != 0)
        return rv;
    rv = topology_validate(t, d);
    if (rv != 0)
        return rv;
    if (ntables > UINT32_MAX)
        return sd_diag_set(d, SD_EINVAL, "tables: too many (%zu)", ntables);
    return 0;
}

int plan_check_pins(const struct table *tables, size_t ntables,
                    const struct topology *t, const int32_t *pins,
                    enum optimizer opt, struct sd_diag *d)
{
    return plan_check_pins_as(tables, ntables, t, pins, opt, "pins", d);
}

int plan_check_pins_as(const struct table *tables, size_t ntables,
                       const struct topology *t, const int32_t *pins,
                       enum optimizer opt, const char *field, struct sd_diag *d)
{
    uint64_t *used;
    size_t i;
    int rv = 0;

    if (pins == NULL)
        return 0;
    used = calloc((size_t)t->ndevices, sizeof(*used));
    if (used == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    for (i = 0; i < ntables && rv == 0; i++) {
        int32_t r = pins[i];
        uint64_t cap;

        if (r == -1)
            continue;
        if (r < 0 || r >= t->ndevices) {
            rv = sd_diag_set(d, SD_EINVAL,
                             "%s: table \"%s\": device %d is not in "
                             "[0, %d)",
                             field, tables[i].name, (int)r, (int)t->ndevices);
            break;
        }
        cap = topology_mem(t, r);
        used[r] += shard_bytes(&tables[i], tables[i].dim, opt);
        if (used[r] > cap)
            rv = sd_diag_set(
                d, SD_ENOSPACE,
                "%s: device %d: the tables pinned to it need "
                "%llu bytes up to table \"%s\", %llu more than "
                "its capacity of %llu",
                field, (int)r, (unsigned long long)used[r], tables[i].name,
                (unsigned long long)(used[r] - cap), (unsigned long long)cap);
    }
    free(used);
    return rv;
}
