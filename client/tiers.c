/*
 * shardctl cache-curve: the miss-rate curve of a UVM cache over each table
 * (or --table NAME), as the planner models it (tier_miss_rate(): the
 * hottest rows cached, the access histogram of one batch as the steady
 * state), and the modelled host-link time of the table whole on one device,
 * at the batch `plan` would price it at: the model's (--model, --profile,
 * else the embedded one), or --batch-size: a curve at another batch would
 * disagree with the plan's host-link times.
 */
#include <stdio.h>
#include <string.h>

#include "client.h"

/* The load factors shown. */
static const double curve_f[] = {0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8};
#define NCURVE ((int)(sizeof(curve_f) / sizeof(curve_f[0])))

static void print_curve(const struct table *tb, const struct topology *t)
{
    struct shard s = {
        .col_width = tb->dim, .scheme = SCHEME_TW, .tier = TIER_UVM};
    int k;

    printf("%s: %lld rows x %d (%s), pooling factor %g, batch %lld; "
           "fused_uvm (no cache): %.4f ms\n",
           tb->name, (long long)tb->rows, (int)tb->dim,
           table_dtype_name(tb->dtype), tb->pooling_factor,
           (long long)t->batch_size, tier_shard_ms(tb, &s, t));
    printf("  %-12s %10s %14s\n", "load factor", "miss rate", "host link ms");
    s.tier = TIER_UVM_CACHING;
    for (k = 0; k < NCURVE; k++) {
        s.cache_load_factor = (float)curve_f[k];
        printf("  %-12g %9.3f%% %14.4f\n", curve_f[k],
               100.0 * tier_miss_rate(tb, t->batch_size, curve_f[k]),
               tier_shard_ms(tb, &s, t));
    }
}

int tiers_cache_curve(const struct ctl_opts *o)
{
    struct tables_input in;
    struct topology t;
    struct ctl_model cm;
    struct sd_diag d = {0};
    size_t i;
    int rv;

    if (o->tables == NULL)
        return ctl_fail(CTL_EXIT_USAGE, "cache-curve: --tables is required");
    rv = ctl_load_model_for_profile(o, "cache-curve", &cm);
    if (rv != 0)
        return rv;
    topology_default(&t, 1, 1);
    t.batch_size = o->batch > 0 ? o->batch : cm.net->batch_size;
    ctl_model_free(&cm); /* only its batch was wanted */
    t.host_link_bw = o->host_link_gbps * (double)(1ull << 30) / 1000.0;
    rv = ctl_read_tables(o, "cache-curve", &in);
    if (rv != 0)
        return rv;
    rv = tables_input_resolve(&in, t.batch_size, &d);
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "cache-curve: %s", d.msg);
        goto out_tables;
    }
    for (i = 0; o->table != NULL && i < in.n; i++)
        if (strcmp(o->table, in.tables[i].name) == 0)
            break;
    if (o->table != NULL && i == in.n) { /* before any output */
        rv = ctl_fail(CTL_EXIT_USAGE, "cache-curve: no table is called \"%s\"",
                      o->table);
        goto out_tables;
    }
    printf("miss rates modelled from each table's access histogram: the "
           "hottest rows cached, one batch's histogram as the steady state; "
           "misses read over the host link at %.1f GiB/s (modelled)\n\n",
           topology_host_link_bw(&t) * 1000.0 / (double)(1ull << 30));
    for (i = 0; i < in.n; i++)
        if (o->table == NULL || strcmp(o->table, in.tables[i].name) == 0)
            print_curve(&in.tables[i], &t);
out_tables:
    tables_input_destroy(&in);
    return rv;
}
