/*
 * The tier pass (search_int.h): when the tables do not fit the devices'
 * memory (HBM) but the topology has host DRAM, which tables go to a UVM
 * cache over host DRAM, at which load factor, or to UVM alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "search/search_int.h"

/* Load factors weighed, from all in HBM down to none (UVM alone). */
static const double levels[] = {1.0, 0.8,  0.6,  0.4,  0.3,   0.2, 0.15,
                                0.1, 0.05, 0.02, 0.01, 0.005, 0.0};
#define NLEVELS     ((int)(sizeof(levels) / sizeof(levels[0])))
#define LEVEL_CACHE 1 /* the first caching level */

static enum table_tier level_tier(int l)
{
    return levels[l] >= 1.0   ? TIER_HBM
           : levels[l] <= 0.0 ? TIER_UVM
                              : TIER_UVM_CACHING;
}

/* The load factor of level l for a table under constraint c (NULL: none):
 * the constraint's own, when it fixes one. */
static double level_factor(const struct table_constraint *c, int l)
{
    if (level_tier(l) != TIER_UVM_CACHING)
        return 0;
    return c != NULL && c->cache_load_factor > 0 ? c->cache_load_factor
                                                 : levels[l];
}

/* The first level after l that c allows, or NLEVELS: a fixed load factor
 * makes the caching levels one (LEVEL_CACHE). */
static int next_level(const struct table_constraint *c, int l)
{
    for (l++; l < NLEVELS; l++) {
        bool fixed = c != NULL && c->cache_load_factor > 0;

        if (fixed && level_tier(l) == TIER_UVM_CACHING && l != LEVEL_CACHE)
            continue;
        if (constraint_allows_tier(c, level_tier(l), level_factor(c, l)))
            return l;
    }
    return NLEVELS;
}

/* Table tb (constraint c) at level l: its tier fields. */
static void set_level(struct table *tb, const struct table_constraint *c, int l)
{
    tb->tier = (uint8_t)level_tier(l);
    tb->cache_load_factor = (float)level_factor(c, l);
}

static const struct table_constraint *cons_of(const struct plan_options *o,
                                              size_t i)
{
    return o->constraints != NULL ? &o->constraints[i] : NULL;
}

int tier_pass(struct table *tables, size_t n, const struct topology *t,
              const struct plan_options *o, uint64_t target)
{
    int *at = calloc(n ? n : 1, sizeof(*at));
    uint64_t need = 0;
    size_t i;

    if (at == NULL)
        return SD_ENOMEM;
    /* Each table at the most HBM its constraint allows. */
    for (i = 0; i < n; i++) {
        at[i] = next_level(cons_of(o, i), -1);
        set_level(&tables[i], cons_of(o, i), at[i]);
        need += shard_bytes(&tables[i], tables[i].dim, o->optimizer);
    }
    /* Cheapest first: the step (one table one allowed level down) that adds
     * the least modelled time per HBM byte it frees, until the tables fit
     * the target. */
    while (need > target) {
        double best = -1, best_freed = 0;
        size_t bi = n;
        int bl = 0;

        for (i = 0; i < n; i++) {
            const struct table_constraint *c = cons_of(o, i);
            struct table *tb = &tables[i];
            int l = next_level(c, at[i]);
            uint64_t before, after;
            double ms0, ms1, ratio;

            if (l >= NLEVELS)
                continue;
            before = shard_bytes(tb, tb->dim, o->optimizer);
            ms0 = tier_table_ms(tb, t);
            set_level(tb, c, l);
            after = shard_bytes(tb, tb->dim, o->optimizer);
            ms1 = tier_table_ms(tb, t);
            set_level(tb, c, at[i]);
            if (after >= before)
                continue;
            ratio = (ms1 - ms0) / (double)(before - after);
            if (bi == n || ratio < best ||
                (ratio == best && (double)(before - after) > best_freed)) {
                best = ratio;
                best_freed = (double)(before - after);
                bi = i;
                bl = l;
            }
        }
        if (bi == n)
            break;
        need -= shard_bytes(&tables[bi], tables[bi].dim, o->optimizer);
        at[bi] = bl;
        set_level(&tables[bi], cons_of(o, bi), bl);
        need += shard_bytes(&tables[bi], tables[bi].dim, o->optimizer);
    }
    free(at);
    return need <= target ? 0 : SD_ENOSPACE;
}

int tier_held(const struct table *tables, size_t n,
              const struct plan_options *o, const struct topology *t,
              struct table **out)
{
    struct table *copy;
    size_t i;

    *out = NULL;
    for (i = 0; o->constraints != NULL && i < n; i++)
        if (!constraint_allows_tier(&o->constraints[i], TIER_HBM, 0))
            break;
    if (o->constraints == NULL || i == n)
        return 0;
    copy = malloc(n * sizeof(*copy));
    if (copy == NULL)
        return SD_ENOMEM;
    memcpy(copy, tables, n * sizeof(*copy));
    /* No budget: every table at its first allowed level. */
    (void)tier_pass(copy, n, t, o, UINT64_MAX);
    *out = copy;
    return 0;
}

int tier_refusal(const struct table *tables, size_t n, const struct topology *t,
                 const struct plan_options *o, struct sd_diag *d)
{
    double cap = 0, held = 0, big = 0, gib = (double)(1ull << 30);
    size_t i, nheld = 0, bi = 0;
    int32_t r;

    for (r = 0; r < t->ndevices; r++)
        cap += (double)topology_mem(t, r);
    /* The tables whose constraint keeps them above UVM alone, at the least
     * HBM it allows. */
    for (i = 0; o->constraints != NULL && i < n; i++) {
        const struct table_constraint *c = &o->constraints[i];
        struct table tb = tables[i];
        int l = next_level(c, -1), m;
        double bytes;

        while ((m = next_level(c, l)) < NLEVELS)
            l = m;
        if (level_tier(l) == TIER_UVM)
            continue;
        set_level(&tb, c, l);
        bytes = (double)shard_bytes(&tb, tb.dim, o->optimizer);
        nheld++;
        held += bytes;
        if (bytes > big) {
            big = bytes;
            bi = i;
        }
    }
    if (nheld == 0)
        return sd_diag_set(d, SD_ENOSPACE,
                           "the tables fit neither the devices' memory nor, "
                           "in UVM caches, the host DRAM (%llu bytes per "
                           "host)",
                           (unsigned long long)t->host_dram_bytes);
    return sd_diag_set(
        d, SD_ENOSPACE,
        "the tables do not fit with what their constraints allow: %zu "
        "tables keep %.3g GiB in the devices' memory (%.3g GiB) at the "
        "least (compute_kernels without fused_uvm, or a fixed "
        "cache_params.load_factor), table \"%s\" the largest (%.3g GiB): "
        "allow fused_uvm_caching or fused_uvm for them, or give more devices "
        "or memory",
        nheld, held / gib, cap / gib, tables[bi].name, big / gib);
}

void tier_pass_note(struct plan *p, const struct table *tiered, size_t n,
                    const struct topology *t, enum optimizer opt)
{
    size_t i, cached = 0, uvm = 0;
    double lo = 1, hi = 0, ms = 0, hbm = 0, all = 0, cap = 0;
    int32_t r;

    for (r = 0; r < t->ndevices; r++) {
        cap += (double)topology_mem(t, r);
        ms += p->devices != NULL ? p->devices[r].tier_ms : 0;
    }
    for (i = 0; i < n; i++) {
        struct table whole = tiered[i];

        whole.tier = TIER_HBM;
        all += (double)shard_bytes(&whole, whole.dim, opt);
        hbm += (double)shard_bytes(&tiered[i], tiered[i].dim, opt);
        if (tiered[i].tier == TIER_UVM)
            uvm++;
        if (tiered[i].tier == TIER_UVM_CACHING) {
            double f = tiered[i].cache_load_factor;

            cached++;
            lo = f < lo ? f : lo;
            hi = f > hi ? f : hi;
        }
    }
    plan_note(
        p,
        "tiers: the tables need %.3g GiB, the devices' HBM holds %.3g "
        "GiB: %zu tables in a UVM cache over host DRAM (load factors "
        "%.3g to %.3g), %zu in UVM alone, %.3g GiB left in HBM; host-link "
        "misses add %.4g ms over the devices (modelled)",
        all / (double)(1ull << 30), cap / (double)(1ull << 30), cached,
        cached ? lo : 0.0, cached ? hi : 0.0, uvm, hbm / (double)(1ull << 30),
        ms);
}
