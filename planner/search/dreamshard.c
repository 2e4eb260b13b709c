/*
 * DreamShard (neuroshard.md 9) as an algorithm of shardd (search.h): a
 * learned policy places whole tables one by one, costliest first, each on
 * the legal device of highest logit, in the estimated MDP of models.h
 * (the compute model and the alpha-beta exchange).  Pinned tables go to
 * their devices first, and devices of different capacities are legal only
 * while the table fits.  Also the gate a trained policy must pass before a
 * daemon activates it: a lower mean plan cost than size_lookup_greedy's on
 * held-out tasks.
 */
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "models/models.h"
#include "problem/problem.h"
#include "search/search.h"
#include "search/search_int.h"

/* Steps between two looks at the clock and the cancel flag. */
#define DS_CHECK_EVERY 16

/* Whether to stop asking the policy: cancelled or past the budget. */
static bool must_stop(const struct plan_options *o, const struct timespec *t0)
{
    if (o->cancel != NULL && atomic_load(o->cancel))
        return true;
    return o->time_budget_ms > 0 && search_elapsed_ms(t0) >= o->time_budget_ms;
}

/* The SD_ENOSPACE of a table that fits on no device, as the baselines
 * word it. */
static int no_room(const struct policy_env *e, const struct table *tb,
                   uint64_t need, const struct topology *t, struct sd_diag *d)
{
    uint64_t best = 0, used, cap;
    int32_t r;

    for (r = 0; r < t->ndevices; r++) {
        used = policy_env_used(e, r);
        cap = topology_mem(t, r);
        if (cap > used && cap - used > best)
            best = cap - used;
    }
    return search_no_room(tb->name, need, best, "", t, d);
}

/* Checks what dreamshard needs besides the tables: a model, a policy for
 * it, pins that fit. */
static int check_needs(const struct table *tables, size_t ntables,
                       const struct topology *t, const struct plan_options *o,
                       struct sd_diag *d)
{
    int rv;

    if (o->net == NULL)
        return sd_diag_set(d, SD_EINVAL,
                           "dreamshard needs a learned compute model");
    if (o->policy == NULL)
        return sd_diag_set(d, SD_EINVAL,
                           "dreamshard needs a placement policy trained for "
                           "the compute model of profile \"%.128s\": train "
                           "one (shardctl train-policy, or Admin.Retrain "
                           "with kind policy)",
                           o->net->profile);
    rv = policy_check_model(o->policy, o->net, d);
    if (rv == 0)
        rv = plan_check_pins(tables, ntables, t, o->pins, o->optimizer, d);
    return rv;
}

/*
 * The placement loop: every table not placed yet, in the env's order,
 * onto the policy's argmax, or the least loaded device once it must stop.
 * Counts the devices scored in *evaluations.
 */
static int place_all(struct policy_env *e, const struct table *tables,
                     size_t ntables, const struct topology *t,
                     const struct plan_options *o, const struct timespec *t0,
                     bool *stopped, int64_t *evaluations, struct sd_diag *d)
{
    const uint32_t *order = policy_env_order(e);
    const int32_t *dev = policy_env_devices(e);
    int32_t nd = t->ndevices, r;
    float *x = malloc((size_t)nd * POL_NCOST * sizeof(*x));
    bool *legal = malloc((size_t)nd * sizeof(*legal));
    double *logit = malloc((size_t)nd * sizeof(*logit));
    size_t k, steps = 0;
    int rv = 0;

    if (!x || !legal || !logit) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_free;
    }
    for (k = 0; k < ntables; k++) {
        uint32_t i = order[k];

        if (dev[i] >= 0)
            continue;
        if (!*stopped && steps++ % DS_CHECK_EVERY == 0)
            *stopped = must_stop(o, t0);
        if (*stopped) {
            r = policy_env_least_loaded(e, i);
        } else {
            policy_env_features(e, i, x, legal);
            policy_env_logits(e, x, legal, logit);
            r = policy_argmax_legal(logit, legal, nd);
            *evaluations += nd;
        }
        if (r < 0) {
            rv = no_room(e, &tables[i],
                         shard_bytes(&tables[i], tables[i].dim, o->optimizer),
                         t, d);
            goto out_free;
        }
        policy_env_place(e, i, r);
    }
out_free:
    free(x);
    free(legal);
    free(logit);
    return rv;
}

/* Pinned tables first (plan_check_pins() said they fit), whole. */
static void place_pins(struct policy_env *e, const int32_t *pins, size_t n)
{
    size_t i;

    for (i = 0; pins != NULL && i < n; i++)
        if (pins[i] >= 0)
            policy_env_place(e, (uint32_t)i, pins[i]);
}

int plan_dreamshard(const struct table *tables, size_t ntables,
                    const struct topology *t, const struct plan_options *o,
                    struct plan *out, struct sd_diag *d)
{
    struct policy_env *e = NULL;
    struct timespec t0;
    const int32_t *dev;
    struct plan p;
    struct sd_diag why;
    bool stopped = false;
    int64_t evaluations = 0;
    size_t i;
    int rv;

    rv = check_needs(tables, ntables, t, o, d);
    if (rv != 0)
        return rv;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rv = plan_init(&p, t->ndevices);
    if (rv != 0)
        return sd_diag_set(d, rv, "out of memory");
    rv = policy_env_new(o->policy, o->net, o->memo, tables, ntables, t,
                        o->optimizer, &e);
    if (rv != 0) {
        rv = sd_diag_set(d, rv, "out of memory");
        goto out_free;
    }
    place_pins(e, o->pins, ntables);
    rv = place_all(e, tables, ntables, t, o, &t0, &stopped, &evaluations, d);
    /* Costliest first can leave no room for a large table that a packing
     * largest first would have: once more in that order (the policy still
     * picks the devices), and the first failure is the error. */
    if (rv == SD_ENOSPACE) {
        policy_env_reset(e);
        place_pins(e, o->pins, ntables);
        if (policy_env_order_by_size(e) != 0) {
            rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
            goto out_free;
        }
        rv = place_all(e, tables, ntables, t, o, &t0, &stopped, &evaluations,
                       &why);
    }
    if (rv != 0)
        goto out_free;
    dev = policy_env_devices(e);
    for (i = 0; i < ntables && rv == 0; i++)
        rv = plan_add(&p, (uint32_t)i, dev[i], 0, tables[i].dim);
    if (rv != 0) {
        rv = sd_diag_set(d, rv, "out of memory");
        goto out_free;
    }
    plan_sort(&p);
    p.cost_ms = policy_env_cost(e);
    p.stats.search_ms = search_elapsed_ms(&t0);
    p.stats.evaluations = evaluations;
    p.stats.budget_exhausted = stopped;
    *out = p;
    p.shards = NULL;
    p.devices = NULL;
out_free:
    plan_destroy(&p);
    policy_env_free(e);
    return rv;
}

/* ------------------------------------------------------------------------ */
/* The gate                                                                  */

int dreamshard_gate(const struct policy_net *pn, const struct cost_net *m,
                    const struct policy_task *tasks, size_t n,
                    const struct topology *t, enum optimizer opt,
                    struct dreamshard_gate *out, struct sd_diag *d)
{
    struct net_cost_model ncm;
    struct plan_options o;
    struct dreamshard_gate g = {0};
    double sum_ratio = 0;
    size_t k;
    int rv;

    rv = policy_check_model(pn, m, d);
    if (rv != 0)
        return rv;
    if (n == 0)
        return sd_diag_set(d, SD_EINVAL, "gate: no held-out tasks");
    net_cost_model_init(&ncm, m);
    for (k = 0; k < n; k++) {
        struct plan pp, pg;
        struct sd_diag why;
        bool pok, gok;

        plan_options_default(&o);
        o.optimizer = opt;
        o.net = m;
        o.policy = pn;
        o.alg = PLAN_ALG_DREAMSHARD;
        pok = plan_run(tasks[k].tables, tasks[k].ntables, t, &o, &ncm.cm, &pp,
                       &why) == 0;
        o.alg = PLAN_ALG_SIZE_LOOKUP_GREEDY;
        gok = plan_run(tasks[k].tables, tasks[k].ntables, t, &o, &ncm.cm, &pg,
                       &why) == 0;
        g.tasks++;
        g.policy_failed += !pok;
        g.greedy_failed += !gok;
        if (pok && gok) {
            g.planned_both++;
            g.policy_ms += pp.cost_ms;
            g.greedy_ms += pg.cost_ms;
            sum_ratio += pp.cost_ms / pg.cost_ms;
        }
        /* A task only the greedy could place counts against the policy. */
        if (!pok && gok)
            g.lost++;
        if (pok)
            plan_destroy(&pp);
        if (gok)
            plan_destroy(&pg);
    }
    if (g.planned_both > 0) {
        g.policy_ms /= g.planned_both;
        g.greedy_ms /= g.planned_both;
        g.ratio = sum_ratio / g.planned_both;
    }
    g.pass = g.planned_both > 0 && g.lost == 0 && g.policy_ms < g.greedy_ms;
    *out = g;
    return 0;
}
