/*
 * The algorithm dispatch: names and options of the algorithms, and
 * plan_run(), which checks the inputs, runs one algorithm, and checks,
 * evaluates and explains its plan (search.h).  Nothing below this file
 * calls it: the algorithms are built from the problem's building blocks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "problem/problem.h"
#include "search/search_int.h"

static const char *const alg_names[PLAN_ALG_COUNT] = {
    [PLAN_ALG_RANDOM] = "random",
    [PLAN_ALG_DIM_GREEDY] = "dim_greedy",
    [PLAN_ALG_SIZE_GREEDY] = "size_greedy",
    [PLAN_ALG_LOOKUP_GREEDY] = "lookup_greedy",
    [PLAN_ALG_SIZE_LOOKUP_GREEDY] = "size_lookup_greedy",
    [PLAN_ALG_TORCHREC_GREEDY] = "torchrec_greedy",
    [PLAN_ALG_NEUROSHARD] = "neuroshard",
    [PLAN_ALG_DREAMSHARD] = "dreamshard",
};

void plan_options_default(struct plan_options *o)
{
    memset(o, 0, sizeof(*o));
    o->alg = PLAN_ALG_SIZE_LOOKUP_GREEDY;
    o->optimizer = OPTIMIZER_SGD;
    o->column_splits = true;
    o->local_search = true;
    o->weigh_torchrec = true;
    o->beam_width = 3;
    o->beam_depth = 10;
    o->candidates = 10;
    o->beam_evaluations = PLAN_BEAM_EVALUATIONS;
    o->parallel_min = PLAN_PARALLEL_MIN;
}

int plan_alg_parse(const char *s, enum plan_alg *out, struct sd_diag *d)
{
    char known[256] = "";
    size_t len = 0;
    int i;

    for (i = 0; i < PLAN_ALG_COUNT; i++) {
        if (strcmp(s, alg_names[i]) == 0) {
            *out = (enum plan_alg)i;
            return 0;
        }
    }
    for (i = 0; i < PLAN_ALG_COUNT; i++)
        len += (size_t)snprintf(known + len, sizeof(known) - len, "%s%s",
                                i ? ", " : "", alg_names[i]);
    return sd_diag_set(d, SD_EINVAL, "algorithm \"%s\" is unknown (known: %s)",
                       s, known);
}

const char *plan_alg_name(enum plan_alg a)
{
    return (unsigned)a < PLAN_ALG_COUNT ? alg_names[a] : "unknown";
}

/* Whether every pinned table is one whole shard on its device (p sorted). */
static bool pins_kept(const struct plan *p, const struct table *tables,
                      const int32_t *pins)
{
    size_t k;

    if (pins == NULL)
        return true;
    for (k = 0; k < p->nshards; k++) {
        const struct shard *s = &p->shards[k];

        if (pins[s->table] >= 0 &&
            (s->device != pins[s->table] || s->col_offset != 0 ||
             s->col_width != tables[s->table].dim))
            return false;
    }
    return true;
}

/*
 * neuroshard once with each member of o->ensemble, keeping the plan that
 * costs least under m (the first on ties): a plan for the quantile m
 * answers with, among plans each member thinks best.  *out is a valid,
 * evaluated plan on success, its stats those of every search summed (time,
 * greedy runs, states, evaluations) and the kept one's levels, splits and
 * moves, as one search's stats count what it weighed.
 */
static int plan_robust(const struct table *tables, size_t ntables,
                       const struct topology *t, const struct plan_options *o,
                       const struct cost_model *m, struct plan *out,
                       struct sd_diag *d)
{
    const struct net_ensemble *e = o->ensemble;
    struct plan_options mo = *o;
    struct plan_search_stats all = {0};
    struct plan cand;
    bool have = false;
    int32_t i;
    int rv = 0;

    if (o->time_budget_ms > 0)
        mo.time_budget_ms = o->time_budget_ms / e->k;
    for (i = 0; i < e->k; i++) {
        mo.net = e->m[i];
        /* A memo answers for one net. */
        mo.memo = o->ensemble_memos != NULL ? o->ensemble_memos[i]
                  : i == 0                  ? o->memo
                                            : NULL;
        rv = plan_neuroshard(tables, ntables, t, &mo, &cand, d);
        if (rv != 0)
            break;
        rv = plan_validate(&cand, tables, ntables, t, o->optimizer, d);
        if (rv == 0)
            rv = plan_evaluate(&cand, tables, ntables, t, o->optimizer, m);
        if (rv != 0) {
            plan_destroy(&cand);
            break;
        }
        all.search_ms += cand.stats.search_ms;
        search_stats_merge(&all, &cand.stats);
        if (!have || cand.cost_ms < out->cost_ms) {
            if (have)
                plan_destroy(out);
            *out = cand;
            have = true;
        } else {
            plan_destroy(&cand);
        }
    }
    if (rv != 0 && have)
        plan_destroy(out);
    if (rv == 0) {
        all.levels = out->stats.levels;
        all.splits = out->stats.splits;
        all.moves = out->stats.moves;
        out->stats = all;
    }
    return rv;
}

/* Whether every table's shards keep its constraint (p sorted): an allowed
 * scheme, its host, its row blocks, its tiers. */
static bool constraints_kept(const struct plan *p, const struct topology *t,
                             const struct table_constraint *c)
{
    size_t k = 0, first;

    if (c == NULL)
        return true;
    while (k < p->nshards) {
        const struct table_constraint *ci = &c[p->shards[k].table];
        enum plan_scheme sc = plan_table_scheme(p, k);
        int32_t blocks = 0;

        if (!constraint_allows(ci, sc))
            return false;
        for (first = k;
             k < p->nshards && p->shards[k].table == p->shards[first].table;
             k++) {
            if ((ci->host >= 0 &&
                 p->shards[k].device / t->devices_per_host != ci->host) ||
                !constraint_allows_tier(ci, (enum table_tier)p->shards[k].tier,
                                        p->shards[k].cache_load_factor))
                return false;
            blocks += p->shards[k].col_offset == 0;
        }
        if (ci->min_row_shards > 1 && blocks < ci->min_row_shards)
            return false;
    }
    return true;
}

/*
 * The baselines and dreamshard place whole tables anywhere: a table whose
 * constraint forbids that is refused, naming it and what can plan it.
 */
static int baseline_constraints(const struct table *tables, size_t n,
                                const struct plan_options *o, struct sd_diag *d)
{
    size_t i;

    for (i = 0; o->constraints != NULL && i < n; i++)
        if (!constraint_allows(&o->constraints[i], SCHEME_TW) ||
            o->constraints[i].host >= 0)
            return sd_diag_set(d, SD_EINVAL,
                               "%s places tables whole on any device: table "
                               "\"%s\" may not be (its constraint); plan with "
                               "neuroshard or torchrec_greedy",
                               plan_alg_name(o->alg), tables[i].name);
    return 0;
}

/* Runs o's algorithm on the tables as they are. */
static int run_alg(const struct table *tables, size_t ntables,
                   const struct topology *t, const struct plan_options *o,
                   const struct cost_model *m, struct plan *p,
                   struct sd_diag *d)
{
    int rv;

    switch (o->alg) {
    case PLAN_ALG_TORCHREC_GREEDY:
        return plan_torchrec_greedy(tables, ntables, t, o->optimizer, o->pins,
                                    o->constraints, p, d);
    case PLAN_ALG_RANDOM:
    case PLAN_ALG_DIM_GREEDY:
    case PLAN_ALG_SIZE_GREEDY:
    case PLAN_ALG_LOOKUP_GREEDY:
    case PLAN_ALG_SIZE_LOOKUP_GREEDY:
        rv = baseline_constraints(tables, ntables, o, d);
        return rv != 0 ? rv : plan_baseline(tables, ntables, t, o, p, d);
    case PLAN_ALG_NEUROSHARD:
        /* With an ensemble: the plan robust to the members' spread. */
        if (o->ensemble != NULL && o->ensemble->k > 1)
            return plan_robust(tables, ntables, t, o, m, p, d);
        return plan_neuroshard(tables, ntables, t, o, p, d);
    case PLAN_ALG_DREAMSHARD:
        rv = baseline_constraints(tables, ntables, o, d);
        return rv != 0 ? rv : plan_dreamshard(tables, ntables, t, o, p, d);
    default:
        return sd_diag_set(d, SD_EINVAL, "algorithm %d is unknown",
                           (int)o->alg);
    }
}

/*
 * The host tier: the tables did not fit the devices' memory, the topology
 * has host DRAM.  The tier pass moves tables to UVM caches for HBM budgets of
 * 90 %, 80 %, ... 0 % of the devices' memory (the slack leaves the placement
 * room to pack), and the algorithm runs again on each until one plans.
 * *tiered (owned by the caller) is the tables with their tiers.
 */
static int run_tiered(const struct table *tables, size_t ntables,
                      const struct topology *t, const struct plan_options *o,
                      const struct cost_model *m, struct table **tiered,
                      struct plan *p, struct sd_diag *d)
{
    size_t bytes = (ntables ? ntables : 1) * sizeof(struct table);
    struct table *copy = malloc(bytes), *last = malloc(bytes);
    double cap = 0;
    int32_t r, step;
    int rv = SD_ENOSPACE;

    if (copy == NULL || last == NULL) {
        rv = SD_ENOMEM;
        goto out_free;
    }
    for (r = 0; r < t->ndevices; r++)
        cap += (double)topology_mem(t, r);
    memset(last, 0, bytes);
    for (step = 9; step >= 0; step--) {
        memcpy(copy, tables, bytes);
        rv = tier_pass(copy, ntables, t, o, (uint64_t)(cap * step / 10.0));
        if (rv == SD_ENOMEM)
            goto out_free;
        if (rv != 0 || memcmp(copy, last, bytes) == 0)
            continue; /* nothing new to try at this budget */
        memcpy(last, copy, bytes);
        rv = run_alg(copy, ntables, t, o, m, p, d);
        if (rv == 0) {
            *tiered = copy;
            copy = NULL;
            break;
        }
        if (rv != SD_ENOSPACE)
            break;
    }
    if (rv == SD_ENOSPACE)
        tier_refusal(tables, ntables, t, o, d);
out_free:
    free(last);
    free(copy);
    return rv;
}

int plan_run(const struct table *tables, size_t ntables,
             const struct topology *t, const struct plan_options *o,
             const struct cost_model *m, struct plan *out, struct sd_diag *d)
{
    struct table *tiered = NULL; /* the tables with tiers, when moved */
    const struct table *use = tables;
    struct plan p;
    int rv;

    rv = plan_check_inputs(tables, ntables, t, d);
    if (rv == 0)
        rv = plan_check_constraints(tables, ntables, t, o->pins, o->constraints,
                                    "constraints", d);
    if (rv != 0)
        return rv;

    /* Tables their constraints keep out of HBM start in host DRAM. */
    rv = tier_held(tables, ntables, o, t, &tiered);
    if (rv == 0)
        rv = run_alg(tiered != NULL ? tiered : tables, ntables, t, o, m, &p, d);
    /* Only a plan that does not fit HBM goes to the host tier: where HBM
     * suffices the tables stay there (no tier is cheaper in this model). */
    if (rv == SD_ENOSPACE && t->host_dram_bytes > 0) {
        free(tiered);
        tiered = NULL;
        rv = run_tiered(tables, ntables, t, o, m, &tiered, &p, d);
    }
    if (rv != 0) {
        if (rv == SD_ENOMEM)
            sd_diag_set(d, rv, "out of memory");
        free(tiered);
        return rv;
    }
    if (tiered != NULL)
        use = tiered;
    p.algorithm = plan_alg_name(o->alg);

    /* Every algorithm's output is checked before anyone sees it: a plan
     * that drops a column or overfills a device is a bug, not a result.
     * Tiered tables give their shards their tiers here. */
    rv = plan_validate_as(&p, use, ntables, t, o->optimizer, p.algorithm, d);
    if (rv == 0 && !pins_kept(&p, tables, o->pins))
        rv = sd_diag_set(d, SD_EINVAL, "%s: a pinned table was moved or split",
                         p.algorithm);
    if (rv == 0 && !constraints_kept(&p, t, o->constraints))
        rv = sd_diag_set(d, SD_EINVAL, "%s: a table's constraint was not kept",
                         p.algorithm);
    if (rv == 0)
        rv = plan_evaluate(&p, use, ntables, t, o->optimizer, m);
    if (rv == 0)
        rv = plan_explain(&p, use, t, m);
    if (rv == 0 && tiered != NULL)
        tier_pass_note(&p, tiered, ntables, t, o->optimizer);
    free(tiered);
    if (rv != 0) {
        if (rv == SD_ENOMEM)
            sd_diag_set(d, rv, "out of memory");
        plan_destroy(&p);
        return rv;
    }
    *out = p;
    return 0;
}
