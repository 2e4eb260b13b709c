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
#define NLEVELS ((int)(sizeof(levels) / sizeof(levels[0])))

/* Table tb at level l: its tier fields. */
static void set_level(struct table *tb, int l)
{
    tb->tier = levels[l] >= 1.0   ? TIER_HBM
               : levels[l] <= 0.0 ? TIER_UVM
                                  : TIER_UVM_CACHING;
    tb->cache_load_factor =
        (float)(tb->tier == TIER_UVM_CACHING ? levels[l] : 0.0);
}

/* The modelled host-link time of tb whole on one device at its tier. */
static double whole_ms(const struct table *tb, const struct topology *t)
{
    struct shard s = {.col_width = tb->dim,
                      .scheme = SCHEME_TW,
                      .tier = tb->tier,
                      .cache_load_factor = tb->cache_load_factor};

    return tier_shard_ms(tb, &s, t);
}

int tier_pass(struct table *tables, size_t n, const struct topology *t,
              const struct plan_options *o, uint64_t target)
{
    int *at = calloc(n ? n : 1, sizeof(*at));
    uint64_t need = 0;
    size_t i;

    if (at == NULL)
        return SD_ENOMEM;
    for (i = 0; i < n; i++) {
        set_level(&tables[i], 0);
        need += shard_bytes(&tables[i], tables[i].dim, o->optimizer);
    }
    /* Cheapest first: the step (one table one level down) that adds the
     * least modelled time per HBM byte it frees, until the tables fit the
     * target. */
    while (need > target) {
        double best = -1, best_freed = 0;
        size_t bi = n;

        for (i = 0; i < n; i++) {
            struct table *tb = &tables[i];
            uint64_t before, after;
            double ms0, ms1, ratio;

            if (at[i] + 1 >= NLEVELS)
                continue;
            before = shard_bytes(tb, tb->dim, o->optimizer);
            ms0 = whole_ms(tb, t);
            set_level(tb, at[i] + 1);
            after = shard_bytes(tb, tb->dim, o->optimizer);
            ms1 = whole_ms(tb, t);
            set_level(tb, at[i]);
            if (after >= before)
                continue;
            ratio = (ms1 - ms0) / (double)(before - after);
            if (bi == n || ratio < best ||
                (ratio == best && (double)(before - after) > best_freed)) {
                best = ratio;
                best_freed = (double)(before - after);
                bi = i;
            }
        }
        if (bi == n)
            break;
        need -= shard_bytes(&tables[bi], tables[bi].dim, o->optimizer);
        set_level(&tables[bi], ++at[bi]);
        need += shard_bytes(&tables[bi], tables[bi].dim, o->optimizer);
    }
    free(at);
    return need <= target ? 0 : SD_ENOSPACE;
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
