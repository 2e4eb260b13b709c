/*
 * Memory tiers (problem.h): kernel names, the miss-rate curve a table's
 * access histogram gives, and the modelled host-link time of a shard whose
 * weights live in host DRAM.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "problem/problem.h"

static const char *const tier_names[TIER_COUNT] = {
    [TIER_HBM] = "fused",
    [TIER_UVM] = "fused_uvm",
    [TIER_UVM_CACHING] = "fused_uvm_caching",
};

const char *tier_name(enum table_tier tier)
{
    return (unsigned)tier < TIER_COUNT ? tier_names[tier] : "unknown";
}

int tier_parse(const char *s, enum table_tier *out)
{
    int i;

    for (i = 0; i < TIER_COUNT; i++)
        if (strcmp(s, tier_names[i]) == 0) {
            *out = (enum table_tier)i;
            return 0;
        }
    return SD_EINVAL;
}

double tier_miss_rate(const struct table *t, int64_t batch, double f)
{
    double unique = table_unique_rows(t, batch), cache, hot = 0, hits = 0;
    double total = 0, room, cold_rows;
    int k;

    if (!(unique > 0) || f >= 1)
        return 0;
    if (f <= 0)
        return 1;
    /* The hot rows (bins 1 to 16) fill the cache, hottest first. */
    cache = f * (double)t->rows;
    for (k = TABLE_NBINS - 1; k >= 1; k--) {
        double rows = t->bins[k] * unique, held = rows < cache ? rows : cache;

        total += rows * table_bin_count(k);
        hits += held * table_bin_count(k);
        hot += rows;
        cache -= held;
    }
    /* The rows touched once are a fresh draw from the other rows each batch:
     * the room left holds each with the chance room / other rows. */
    room = cache;
    cold_rows = (double)t->rows - hot;
    total += t->bins[0] * unique;
    if (cold_rows > 0)
        hits += t->bins[0] * unique * (room < cold_rows ? room / cold_rows : 1);
    return total > 0 ? 1.0 - hits / total : 0;
}

double tier_load_factor(const struct shard *s)
{
    char buf[32];

    /* Most shards are in HBM, at 0 (its sign kept, as printing would):
     * every placement of every Plan reply comes here. */
    if (s->cache_load_factor == 0)
        return (double)s->cache_load_factor;
    snprintf(buf, sizeof(buf), "%.6g", (double)s->cache_load_factor);
    return strtod(buf, NULL);
}

double tier_shard_ms(const struct table *t, const struct shard *s,
                     const struct topology *topo)
{
    struct table b;
    double miss, row_bytes, lookups;

    if (s->tier == TIER_HBM)
        return 0;
    shard_table(t, s, topo->ndevices, &b);
    miss = s->tier == TIER_UVM
               ? 1.0
               : tier_miss_rate(&b, topo->batch_size, s->cache_load_factor);
    row_bytes = (double)s->col_width * (double)table_dtype_size(t->dtype);
    lookups = b.pooling_factor * (double)topo->batch_size;
    /* Forward: read the row; backward: read and write back its update. */
    return 3.0 * miss * lookups * row_bytes / topology_host_link_bw(topo);
}

double tier_table_ms(const struct table *t, const struct topology *topo)
{
    struct shard s = {.col_width = t->dim,
                      .scheme = SCHEME_TW,
                      .tier = t->tier,
                      .cache_load_factor = t->cache_load_factor};

    return tier_shard_ms(t, &s, topo);
}
