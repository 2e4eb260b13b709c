/*
 * The non-learned baselines (neuroshard.md 7): random and four LPT greedy
 * placements that differ only in the per-table cost they balance; the two
 * that balance lookups count a tiered table's host-link time too.
 */
#include <math.h>
#include <stdlib.h>

#include "problem/problem.h"
#include "search/search.h"
#include "search/search_int.h"
#include "shardd/bytes.h"

/* Fills d with the shortfall of a table that fits on no device. */
static int no_room(const struct table *tb, uint64_t need, const uint64_t *used,
                   const struct topology *t, struct sd_diag *d)
{
    uint64_t best = 0;
    int32_t r;

    for (r = 0; r < t->ndevices; r++) {
        uint64_t free_bytes = topology_mem(t, r) - used[r];

        if (free_bytes > best)
            best = free_bytes;
    }
    return search_no_room(tb->name, need, best, "", t, d);
}

int search_no_room(const char *table, uint64_t need, uint64_t largest_free,
                   const char *what, const struct topology *t,
                   struct sd_diag *d)
{
    char b0[SD_BYTES_TEXT], b1[SD_BYTES_TEXT], b2[SD_BYTES_TEXT];

    return sd_diag_set(
        d, SD_ENOSPACE,
        "table \"%s\": needs %s%s but the largest free space "
        "on any device is %s (short by %s); %s",
        table, sd_bytes_text(need, b0), what, sd_bytes_text(largest_free, b1),
        sd_bytes_text(need - largest_free, b2), topology_more_memory(t));
}

struct lpt_item {
    double cost;
    uint64_t size;
    uint32_t index;
};

/* Descending (cost, size, index): the original sorts ascending and pops. */
static int cmp_lpt_desc(const void *a, const void *b)
{
    const struct lpt_item *x = a, *y = b;

    if (x->cost != y->cost)
        return x->cost > y->cost ? -1 : 1;
    if (x->size != y->size)
        return x->size > y->size ? -1 : 1;
    return x->index > y->index ? -1 : x->index < y->index;
}

/*
 * Puts the pinned tables on their devices (their bytes into used[], their
 * cost, when cost is not NULL, into load[]).  plan_check_pins() has checked
 * that they fit.
 */
static int place_pins(const struct table *tables, size_t ntables,
                      const int32_t *pins, const double *cost,
                      enum optimizer opt, uint64_t *used, double *load,
                      struct plan *p)
{
    size_t i;
    int rv;

    for (i = 0; pins != NULL && i < ntables; i++) {
        if (pins[i] < 0)
            continue;
        used[pins[i]] += shard_bytes(&tables[i], tables[i].dim, opt);
        if (cost != NULL)
            load[pins[i]] += cost[i];
        rv = plan_add(p, (uint32_t)i, pins[i], 0, tables[i].dim);
        if (rv != 0)
            return rv;
    }
    return 0;
}

int plan_greedy_lpt(const struct table *tables, size_t ntables,
                    const double *cost, const int32_t *pins,
                    const struct topology *t, enum optimizer opt,
                    struct plan *out, struct sd_diag *d)
{
    struct lpt_item *items = NULL;
    uint64_t *used = NULL;
    double *load = NULL;
    struct plan p;
    size_t i, nitems = 0;
    int rv;

    rv = plan_check_pins(tables, ntables, t, pins, opt, d);
    if (rv != 0)
        return rv;
    rv = plan_init(&p, t->ndevices);
    if (rv != 0)
        return sd_diag_set(d, rv, "out of memory");
    items = malloc((ntables ? ntables : 1) * sizeof(*items));
    used = calloc((size_t)t->ndevices, sizeof(*used));
    load = calloc((size_t)t->ndevices, sizeof(*load));
    if (items == NULL || used == NULL || load == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_free;
    }
    rv = place_pins(tables, ntables, pins, cost, opt, used, load, &p);
    if (rv != 0) {
        sd_diag_set(d, rv, "out of memory");
        goto out_free;
    }
    for (i = 0; i < ntables; i++) {
        if (pins != NULL && pins[i] >= 0)
            continue;
        items[nitems].cost = cost[i];
        items[nitems].size = shard_bytes(&tables[i], tables[i].dim, opt);
        items[nitems].index = (uint32_t)i;
        nitems++;
    }
    qsort(items, nitems, sizeof(*items), cmp_lpt_desc);

    for (i = 0; i < nitems; i++) {
        const struct lpt_item *it = &items[i];
        int32_t r, best = -1;

        for (r = 0; r < t->ndevices; r++) {
            if (used[r] + it->size > topology_mem(t, r))
                continue;
            if (best < 0 || load[r] < load[best] ||
                (load[r] == load[best] && used[r] < used[best]))
                best = r;
        }
        if (best < 0) {
            rv = no_room(&tables[it->index], it->size, used, t, d);
            goto out_free;
        }
        used[best] += it->size;
        load[best] += it->cost;
        rv = plan_add(&p, it->index, best, 0, tables[it->index].dim);
        if (rv != 0) {
            sd_diag_set(d, rv, "out of memory");
            goto out_free;
        }
    }
    plan_sort(&p);
    *out = p;
    p.shards = NULL;
    p.devices = NULL;

out_free:
    plan_destroy(&p);
    free(load);
    free(used);
    free(items);
    return rv;
}

/* Each table onto a device drawn uniformly from those with room left. */
static int plan_random(const struct table *tables, size_t ntables,
                       const struct topology *t, const struct plan_options *o,
                       struct plan *out, struct sd_diag *d)
{
    uint64_t *used = NULL;
    int32_t *fits = NULL;
    struct plan p;
    struct rng g;
    size_t i;
    int rv;

    rv = plan_check_pins(tables, ntables, t, o->pins, o->optimizer, d);
    if (rv != 0)
        return rv;
    rv = plan_init(&p, t->ndevices);
    if (rv != 0)
        return sd_diag_set(d, rv, "out of memory");
    used = calloc((size_t)t->ndevices, sizeof(*used));
    fits = malloc((size_t)t->ndevices * sizeof(*fits));
    if (used == NULL || fits == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_free;
    }
    rv = place_pins(tables, ntables, o->pins, NULL, o->optimizer, used, NULL,
                    &p);
    if (rv != 0) {
        sd_diag_set(d, rv, "out of memory");
        goto out_free;
    }
    rng_seed(&g, o->seed);
    for (i = 0; i < ntables; i++) {
        uint64_t need = shard_bytes(&tables[i], tables[i].dim, o->optimizer);
        int32_t r, nfit = 0, pick;

        if (o->pins != NULL && o->pins[i] >= 0)
            continue;
        for (r = 0; r < t->ndevices; r++)
            if (used[r] + need <= topology_mem(t, r))
                fits[nfit++] = r;
        if (nfit == 0) {
            rv = no_room(&tables[i], need, used, t, d);
            goto out_free;
        }
        pick = fits[rng_below(&g, (uint64_t)nfit)];
        used[pick] += need;
        rv = plan_add(&p, (uint32_t)i, pick, 0, tables[i].dim);
        if (rv != 0) {
            sd_diag_set(d, rv, "out of memory");
            goto out_free;
        }
    }
    plan_sort(&p);
    *out = p;
    p.shards = NULL;
    p.devices = NULL;

out_free:
    plan_destroy(&p);
    free(fits);
    free(used);
    return rv;
}

/* The per-table cost each greedy baseline balances. */
static double greedy_cost(enum plan_alg alg, const struct table *t)
{
    double dim = (double)t->dim;

    switch (alg) {
    case PLAN_ALG_SIZE_GREEDY:
        return (double)table_bytes(t, t->dim) / (double)(1ull << 30);
    case PLAN_ALG_LOOKUP_GREEDY:
        return dim * t->pooling_factor;
    case PLAN_ALG_SIZE_LOOKUP_GREEDY:
        return dim * t->pooling_factor * log10((double)t->rows);
    case PLAN_ALG_DIM_GREEDY:
    default:
        return dim;
    }
}

/*
 * lookup_greedy and size_lookup_greedy balance lookups, a proxy for a
 * device's compute.  A table the tier pass moved off HBM (plan_run() runs
 * it before the algorithm, which gets the tables with their tiers) also
 * costs its device the host-link time of its misses, which the proxy does
 * not see: blind to it, the LPT can stack the cold, cheap-looking UVM
 * tables on the device the hot ones leave light.  So each table's cost
 * gains its host-link ms in the proxy's units, at one rate for the task:
 * the tables' summed cost over their summed compute ms, each table alone,
 * by the compute model the caller plans with (o->net) or, without one,
 * the analytic model.  The rate must come from the model that prices the
 * plan: the analytic model's ms are a bandwidth bound well below the
 * learned model's, and at its rate a plan that the learned model prices
 * overweighs the host link (docs/models.md, "Memory tiers in the
 * search").  With every table in HBM the costs stay as they were.
 * size_greedy and dim_greedy balance bytes and columns, not time, and are
 * left as they are.
 */
static void add_tier_time(const struct table *tables, size_t n,
                          const struct topology *t,
                          const struct plan_options *o, double *cost)
{
    double sum_cost = 0, sum_ms = 0, rate;
    struct net_cost_model ncm;
    const struct cost_model *m = &cost_model_analytic;
    struct shard_item it;
    size_t i;

    for (i = 0; i < n && tables[i].tier == TIER_HBM; i++)
        ;
    if (i == n)
        return;
    if (o->net != NULL) {
        net_cost_model_init(&ncm, o->net);
        m = &ncm.cm;
    }
    for (i = 0; i < n; i++) {
        it.table = &tables[i];
        it.cols = tables[i].dim;
        sum_cost += cost[i];
        sum_ms += m->shard_ms(m->ctx, t, &it, 1);
    }
    rate = sum_ms > 0 ? sum_cost / sum_ms : 0;
    for (i = 0; i < n; i++)
        cost[i] += rate * tier_table_ms(&tables[i], t);
}

int plan_baseline(const struct table *tables, size_t ntables,
                  const struct topology *t, const struct plan_options *o,
                  struct plan *out, struct sd_diag *d)
{
    double *cost;
    size_t i;
    int rv;

    if (o->alg == PLAN_ALG_RANDOM)
        return plan_random(tables, ntables, t, o, out, d);
    cost = malloc(ntables * sizeof(*cost));
    if (cost == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    for (i = 0; i < ntables; i++)
        cost[i] = greedy_cost(o->alg, &tables[i]);
    if (o->alg == PLAN_ALG_LOOKUP_GREEDY ||
        o->alg == PLAN_ALG_SIZE_LOOKUP_GREEDY)
        add_tier_time(tables, ntables, t, o, cost);
    rv = plan_greedy_lpt(tables, ntables, cost, o->pins, t, o->optimizer, out,
                         d);
    free(cost);
    return rv;
}
