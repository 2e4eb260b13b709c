/*
 * Plans: the building blocks every algorithm places tables with, the checks
 * of a finished plan, and the checks of the inputs every algorithm makes
 * first (problem.h).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "problem/problem.h"
#include "shardd/bytes.h"

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

int plan_add_shard(struct plan *p, const struct shard *sh)
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
    p->shards[p->nshards++] = *sh;
    return 0;
}

int plan_add(struct plan *p, uint32_t table, int32_t device, int32_t col_offset,
             int32_t col_width)
{
    struct shard s = {.table = table,
                      .device = device,
                      .col_offset = col_offset,
                      .col_width = col_width,
                      .scheme = SCHEME_TW};

    return plan_add_shard(p, &s);
}

static int cmp_shard(const void *a, const void *b)
{
    const struct shard *x = a, *y = b;

    if (x->table != y->table)
        return x->table < y->table ? -1 : 1;
    if (x->col_offset != y->col_offset)
        return x->col_offset < y->col_offset ? -1 : 1;
    if (x->row_offset != y->row_offset)
        return x->row_offset < y->row_offset ? -1 : 1;
    return (x->device > y->device) - (x->device < y->device);
}

int32_t plan_column_splits(const struct plan *p)
{
    int32_t n = 0;
    size_t k;

    for (k = 0; k < p->nshards; k++)
        n += p->shards[k].row_count == 0 && p->shards[k].scheme != SCHEME_DP &&
             p->shards[k].col_offset != 0;
    return n;
}

void plan_sort(struct plan *p)
{
    if (p->nshards > 1)
        qsort(p->shards, p->nshards, sizeof(*p->shards), cmp_shard);
}

void plan_note(struct plan *p, const char *fmt, ...)
{
    va_list ap;

    if (p->nnotes >= PLAN_NOTES_MAX)
        return;
    va_start(ap, fmt);
    vsnprintf(p->notes[p->nnotes++], PLAN_NOTE_LEN, fmt, ap);
    va_end(ap);
}

bool constraint_allows(const struct table_constraint *c, enum plan_scheme s)
{
    if (c == NULL)
        return true;
    if (c->no_split && s != SCHEME_TW)
        return false;
    if (c->min_row_shards > 1 && !scheme_splits_rows(s))
        return false;
    /* Replicas live in HBM. */
    if (s == SCHEME_DP && !constraint_allows_tier(c, TIER_HBM, 0))
        return false;
    return c->schemes == 0 || (c->schemes & (1u << s)) != 0;
}

bool constraint_allows_tier(const struct table_constraint *c,
                            enum table_tier tier, double f)
{
    if (c == NULL)
        return true;
    if (c->tiers != 0 && (c->tiers & (1u << tier)) == 0)
        return false;
    /* A load factor of the constraint's within float rounding. */
    return tier != TIER_UVM_CACHING || c->cache_load_factor <= 0 ||
           fabs(f - (double)c->cache_load_factor) < 1e-6;
}

/* The tier part of plan_check_constraints(): known tiers, a load factor in
 * [0, 1), host DRAM for a table held off HBM. */
static int check_constraint_tiers(const struct table_constraint *ci,
                                  const struct topology *t, const char *field,
                                  size_t i, const char *name, struct sd_diag *d)
{
    float f = ci->cache_load_factor;

    if (ci->tiers >= (1u << TIER_COUNT))
        return sd_diag_set(d, SD_EINVAL,
                           "%s[%zu] \"%s\": tiers 0x%x name a tier that is "
                           "not fused, fused_uvm or fused_uvm_caching",
                           field, i, name, (unsigned)ci->tiers);
    if (!(f >= 0 && f < 1))
        return sd_diag_set(d, SD_EINVAL,
                           "%s[%zu] \"%s\": cache load factor %g is not in "
                           "(0, 1)",
                           field, i, name, (double)f);
    if (ci->tiers != 0 && !(ci->tiers & (1u << TIER_HBM)) &&
        t->host_dram_bytes == 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s[%zu] \"%s\": the table may not be in device "
                           "memory (compute kernels without fused), but the "
                           "topology has no host DRAM: give host_dram_bytes "
                           "(--host-dram-gb), or allow fused",
                           field, i, name);
    return 0;
}

int plan_check_constraints(const struct table *tables, size_t ntables,
                           const struct topology *t, const int32_t *pins,
                           const struct table_constraint *c, const char *field,
                           struct sd_diag *d)
{
    int32_t hosts = t->ndevices / t->devices_per_host;
    size_t i;
    int s;

    for (i = 0; c != NULL && i < ntables; i++) {
        const struct table_constraint *ci = &c[i];
        const char *name = tables[i].name;
        bool any = false;

        for (s = 0; s < SCHEME_COUNT; s++)
            any = any || constraint_allows(ci, (enum plan_scheme)s);
        if (ci->host < -1 || ci->host >= hosts)
            return sd_diag_set(d, SD_EINVAL,
                               "%s[%zu] \"%s\": host %d is not in [0, %d)",
                               field, i, name, (int)ci->host, (int)hosts);
        if (ci->min_row_shards < 0 || ci->min_row_shards > t->ndevices)
            return sd_diag_set(d, SD_EINVAL,
                               "%s[%zu] \"%s\": min_row_shards %d is not in "
                               "[0, %d] (the devices)",
                               field, i, name, (int)ci->min_row_shards,
                               (int)t->ndevices);
        if (ci->host >= 0 && ci->min_row_shards > t->devices_per_host)
            return sd_diag_set(d, SD_EINVAL,
                               "%s[%zu] \"%s\": min_row_shards %d is more "
                               "than the %d devices of host %d",
                               field, i, name, (int)ci->min_row_shards,
                               (int)t->devices_per_host, (int)ci->host);
        if (!any)
            return sd_diag_set(d, SD_EINVAL,
                               "%s[%zu] \"%s\": no scheme is left (no_split "
                               "allows table_wise only, min_row_shards a "
                               "row-wise scheme only)",
                               field, i, name);
        if (check_constraint_tiers(ci, t, field, i, name, d) != 0)
            return SD_EINVAL;
        if (pins != NULL && pins[i] >= 0 &&
            (!constraint_allows(ci, SCHEME_TW) ||
             (ci->host >= 0 && pins[i] / t->devices_per_host != ci->host)))
            return sd_diag_set(d, SD_EINVAL,
                               "%s[%zu] \"%s\": the table is pinned to "
                               "device %d, which this constraint forbids",
                               field, i, name, (int)pins[i]);
    }
    return 0;
}

enum plan_scheme plan_table_scheme(const struct plan *p, size_t first)
{
    enum plan_scheme sc = (enum plan_scheme)p->shards[first].scheme;
    size_t end = first + 1;

    if (sc != SCHEME_TW && sc != SCHEME_CW)
        return sc;
    while (end < p->nshards && p->shards[end].table == p->shards[first].table)
        end++;
    return end - first == 1 ? SCHEME_TW : SCHEME_CW;
}

/* What validation needs besides the plan. */
struct check {
    const struct table *t;
    const struct topology *topo;
    const char *what;
    uint8_t *seen; /* [ndevices]: devices of the current row group */
    struct sd_diag *d;
};

/* A data-parallel table: one whole replica on each device, in order. */
static int check_replicas(const struct plan *p, size_t a, size_t b,
                          const struct check *c)
{
    const struct table *t = c->t;
    size_t k;

    if (b - a != (size_t)c->topo->ndevices)
        return sd_diag_set(c->d, SD_EINVAL,
                           "%s: table \"%s\": data_parallel needs one "
                           "replica on each of the %d devices, not %zu",
                           c->what, t->name, (int)c->topo->ndevices, b - a);
    for (k = a; k < b; k++) {
        const struct shard *s = &p->shards[k];

        if (s->col_offset != 0 || s->col_width != t->dim ||
            s->row_offset != 0 || shard_rows(t, s) != t->rows)
            return sd_diag_set(c->d, SD_EINVAL,
                               "%s: table \"%s\": a data_parallel replica "
                               "holds every row and column",
                               c->what, t->name);
        if (s->device != (int32_t)(k - a))
            return sd_diag_set(c->d, SD_EINVAL,
                               "%s: table \"%s\": device %d holds two "
                               "data_parallel replicas",
                               c->what, t->name, (int)s->device);
    }
    return 0;
}

/*
 * The row group of one column slice, shards [a, *end): rows [0, rows)
 * tiled, each device once, on one host where the scheme says so.
 */
static int check_rows(const struct plan *p, size_t a, size_t b, size_t *end,
                      const struct check *c)
{
    const struct table *t = c->t;
    const struct shard *first = &p->shards[a];
    int32_t per_host = c->topo->devices_per_host, off = first->col_offset;
    bool one_host =
        first->scheme == SCHEME_TWRW || first->scheme == SCHEME_GRID;
    int64_t next = 0;
    size_t k;
    int rv = 0;

    for (k = a; k < b && p->shards[k].col_offset == off; k++) {
        const struct shard *s = &p->shards[k];
        int64_t rows = shard_rows(t, s);

        if (s->col_width != first->col_width)
            rv = sd_diag_set(c->d, SD_EINVAL,
                             "%s: table \"%s\": the shards at column %d "
                             "differ in width (%d and %d)",
                             c->what, t->name, (int)off, (int)first->col_width,
                             (int)s->col_width);
        else if (s->row_offset != next) /* a gap before it, or an overlap */
            rv = sd_diag_set(
                c->d, SD_EINVAL,
                "%s: table \"%s\": rows [%lld, %lld) at column %d %s", c->what,
                t->name,
                (long long)(s->row_offset > next ? next : s->row_offset),
                (long long)(s->row_offset > next ? s->row_offset : next),
                (int)off,
                s->row_offset > next ? "are not placed" : "are placed twice");
        else if (s->row_offset >= t->rows)
            rv = sd_diag_set(c->d, SD_EINVAL,
                             "%s: table \"%s\": a row block at row %lld, "
                             "past its %lld rows",
                             c->what, t->name, (long long)s->row_offset,
                             (long long)t->rows);
        else if (rows <= 0 || rows > t->rows - s->row_offset)
            rv = sd_diag_set(c->d, SD_EINVAL,
                             "%s: table \"%s\": rows from %lld (%lld of "
                             "them) run past its %lld rows",
                             c->what, t->name, (long long)s->row_offset,
                             (long long)rows, (long long)t->rows);
        else if (c->seen[s->device])
            rv = sd_diag_set(c->d, SD_EINVAL,
                             "%s: table \"%s\": device %d holds two row "
                             "blocks of column %d",
                             c->what, t->name, (int)s->device, (int)off);
        else if (one_host && s->device / per_host != first->device / per_host)
            rv = sd_diag_set(c->d, SD_EINVAL,
                             "%s: table \"%s\": %s row blocks of column %d "
                             "are on hosts %d and %d, not one",
                             c->what, t->name,
                             scheme_name((enum plan_scheme)s->scheme), (int)off,
                             (int)(first->device / per_host),
                             (int)(s->device / per_host));
        if (rv != 0)
            break;
        c->seen[s->device] = 1;
        next += rows;
    }
    *end = k;
    for (k = a; k < *end; k++)
        c->seen[p->shards[k].device] = 0;
    if (rv == 0 && next != t->rows)
        rv = sd_diag_set(c->d, SD_EINVAL,
                         "%s: table \"%s\": %lld of %lld rows placed at "
                         "column %d",
                         c->what, t->name, (long long)next, (long long)t->rows,
                         (int)off);
    return rv;
}

/*
 * The sorted shards [a, b) of table i: every (row, column) cell exactly
 * once, in its scheme's shape; shards of every row are marked table- or
 * column-wise as they are.
 */
static int check_table(struct plan *p, size_t a, size_t b,
                       const struct check *c)
{
    const struct table *t = c->t;
    enum plan_scheme sc = (enum plan_scheme)p->shards[a].scheme;
    int32_t next = 0, slices = 0;
    bool split_rows = false;
    size_t k, end;
    int rv;

    for (k = a; k < b; k++)
        if (p->shards[k].scheme != sc)
            return sd_diag_set(
                c->d, SD_EINVAL,
                "%s: table \"%s\": its shards say %s and %s; "
                "a table has one scheme",
                c->what, t->name, scheme_name(sc),
                scheme_name((enum plan_scheme)p->shards[k].scheme));
    if (sc == SCHEME_DP)
        return check_replicas(p, a, b, c);
    for (k = a; k < b; k = end) {
        const struct shard *s = &p->shards[k];

        if (s->col_offset != next)
            return sd_diag_set(
                c->d, SD_EINVAL, "%s: table \"%s\": columns [%d, %d) %s",
                c->what, t->name,
                (int)(s->col_offset > next ? next : s->col_offset),
                (int)(s->col_offset > next ? s->col_offset : next),
                s->col_offset > next ? "are not placed" : "are placed twice");
        rv = check_rows(p, k, b, &end, c);
        if (rv != 0)
            return rv;
        split_rows = split_rows || end - k > 1;
        next += s->col_width;
        slices++;
    }
    if (next != t->dim)
        return sd_diag_set(c->d, SD_EINVAL,
                           "%s: table \"%s\": %d of %d columns placed", c->what,
                           t->name, (int)next, (int)t->dim);
    if (split_rows && (sc == SCHEME_TW || sc == SCHEME_CW))
        return sd_diag_set(c->d, SD_EINVAL,
                           "%s: table \"%s\": its rows are split, so its "
                           "scheme is row_wise, table_row_wise or "
                           "grid_shard, not %s",
                           c->what, t->name, scheme_name(sc));
    if (slices > 1 && (sc == SCHEME_RW || sc == SCHEME_TWRW))
        return sd_diag_set(c->d, SD_EINVAL,
                           "%s: table \"%s\": %s blocks span every column; "
                           "column slices split in rows are grid_shard",
                           c->what, t->name, scheme_name(sc));
    if (!scheme_splits_rows(sc))
        for (k = a; k < b; k++)
            p->shards[k].scheme = slices == 1 ? SCHEME_TW : SCHEME_CW;
    return 0;
}

/* Each shard's own fields: table, device, column alignment and range. */
static int check_shard(const struct plan *p, size_t k,
                       const struct table *tables, size_t ntables,
                       const struct topology *t, const char *what,
                       struct sd_diag *d)
{
    const struct shard *s = &p->shards[k];

    if (s->table >= ntables)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: shards[%zu]: table %u does not exist", what, k,
                           (unsigned)s->table);
    if (s->device < 0 || s->device >= t->ndevices)
        return sd_diag_set(
            d, SD_EINVAL, "%s: table \"%s\": device %d is not in [0, %d)", what,
            tables[s->table].name, (int)s->device, (int)t->ndevices);
    if (s->scheme >= SCHEME_COUNT)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: table \"%s\": scheme %d is not one of "
                           "table_wise .. data_parallel",
                           what, tables[s->table].name, (int)s->scheme);
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
    if (s->row_offset < 0 || s->row_count < 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: table \"%s\": rows from %lld (%lld of "
                           "them): neither may be negative",
                           what, tables[s->table].name,
                           (long long)s->row_offset, (long long)s->row_count);
    return 0;
}

/*
 * Gives every shard its table's tier where the table names one (the tier
 * pass's copy of the tables; a replica stays in HBM) and checks the tiers:
 * known, a caching load factor in (0, 1), no replica off HBM, and a host
 * tier in the topology for any shard off HBM.
 */
static int check_tiers(struct plan *p, const struct table *tables,
                       const struct topology *t, const char *what,
                       struct sd_diag *d)
{
    size_t k;

    for (k = 0; k < p->nshards; k++) {
        struct shard *s = &p->shards[k];
        const struct table *tb = &tables[s->table];

        if (tb->tier != TIER_HBM && s->scheme != SCHEME_DP) {
            s->tier = tb->tier;
            s->cache_load_factor = tb->cache_load_factor;
        }
        if (s->tier >= TIER_COUNT ||
            (s->tier == TIER_UVM_CACHING &&
             !(s->cache_load_factor > 0 && s->cache_load_factor < 1)) ||
            (s->tier != TIER_HBM && s->scheme == SCHEME_DP))
            return sd_diag_set(d, SD_EINVAL,
                               "%s: table \"%s\": tier %d, cache load factor "
                               "%g on a %s shard: a tier is fused, fused_uvm "
                               "or fused_uvm_caching with a load factor in "
                               "(0, 1), and replicas are fused",
                               what, tb->name, (int)s->tier,
                               (double)s->cache_load_factor,
                               scheme_name((enum plan_scheme)s->scheme));
        if (s->tier != TIER_HBM && t->host_dram_bytes == 0)
            return sd_diag_set(d, SD_ENOSPACE,
                               "%s: table \"%s\" is in %s, but the topology "
                               "has no host DRAM (host_dram_bytes 0)",
                               what, tb->name,
                               tier_name((enum table_tier)s->tier));
    }
    return 0;
}

/* Each host's DRAM holds the weights its devices keep in UVM. */
static int check_host_dram(const struct plan *p, const struct table *tables,
                           const struct topology *t, enum optimizer opt,
                           const char *what, struct sd_diag *d)
{
    int32_t nhosts = t->ndevices / t->devices_per_host, h;
    char b0[SD_BYTES_TEXT], b1[SD_BYTES_TEXT];
    uint64_t *used;
    size_t k;
    int rv = 0;

    used = calloc((size_t)nhosts, sizeof(*used));
    if (used == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    for (k = 0; k < p->nshards; k++) {
        const struct shard *s = &p->shards[k];

        used[s->device / t->devices_per_host] +=
            shard_block_ddr_bytes(&tables[s->table], s, opt);
    }
    for (h = 0; h < nhosts && rv == 0; h++)
        if (used[h] > t->host_dram_bytes)
            rv = sd_diag_set(
                d, SD_ENOSPACE,
                "%s: host %d: %s of tables in host DRAM (UVM), where the "
                "host has %s: give the hosts more DRAM or the devices more "
                "memory",
                what, (int)h, sd_bytes_text(used[h], b0),
                sd_bytes_text(t->host_dram_bytes, b1));
    free(used);
    return rv;
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
    struct check c = {.topo = t, .what = what, .d = d};
    uint64_t *used;
    size_t k, a = 0, b;
    uint32_t i;
    int rv = 0;

    for (k = 0; k < p->nshards; k++) {
        rv = check_shard(p, k, tables, ntables, t, what, d);
        if (rv != 0)
            return rv;
    }
    rv = check_tiers(p, tables, t, what, d);
    if (rv != 0)
        return rv;
    plan_sort(p);
    c.seen = calloc((size_t)t->ndevices, 1);
    if (c.seen == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    for (i = 0; i < ntables && rv == 0; i++) {
        for (b = a; b < p->nshards && p->shards[b].table == i; b++)
            ;
        c.t = &tables[i];
        rv = b == a ? sd_diag_set(d, SD_EINVAL,
                                  "%s: table \"%s\": 0 of %d columns placed",
                                  what, tables[i].name, (int)tables[i].dim)
                    : check_table(p, a, b, &c);
        a = b;
    }
    free(c.seen);
    if (rv != 0)
        return rv;

    used = calloc((size_t)t->ndevices, sizeof(*used));
    if (used == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    for (k = 0; k < p->nshards; k++) {
        const struct shard *s = &p->shards[k];

        uint64_t cap = topology_mem(t, s->device);

        used[s->device] += shard_block_bytes(&tables[s->table], s, opt);
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
    if (rv == 0 && t->host_dram_bytes > 0)
        rv = check_host_dram(p, tables, t, opt, what, d);
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
