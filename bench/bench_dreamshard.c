/*
 * dreamshard with the embedded model and policy (or the files given):
 *  1. inference time and plan cost at scale, as bench_search makes its
 *     cases (synthetic tables at the model's batch, each device 1.5 x the
 *     tables' total over the devices): 856 tables on 8 devices and 2,000 on
 *     128, beside size_lookup_greedy, the model-cost LPT (the policy's own
 *     order and fallback, no policy), neuroshard table-wise (its grid
 *     search alone, no column splits) and neuroshard in full;
 *  2. a policy trained on 4-device tasks planning 4, 8, 16 and 128 devices
 *     without retraining: seeded task sets from the test half of the 856
 *     tables (tables the embedded policy never saw in training) that fit a
 *     4 GiB device whole at any dim (rows <= 8 Mi: a whole-table placement
 *     exists at all), 10..59 tables per task up to 16 devices and 2 x to
 *     4 x the devices beyond, devices of 4 GiB; per algorithm the mean
 *     per-task ratio of its plan cost to the best greedy baseline's, to
 *     neuroshard's and to the model-cost LPT's, and how many tasks it
 *     placed.
 * Costs are the model's (predicted), in ms at its batch.
 *
 * usage: bench_dreamshard [repeats] [tasks per set] [model file] [policy file]
 *   (defaults: 5 repeats of each timing, the median printed; 10 tasks)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "planner.h"
#include "shardd/sort.h"

static double now_ms(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* The ways a case is planned: an algorithm and its options. */
enum way {
    WAY_DREAMSHARD,
    WAY_LPT, /* the model-cost LPT: policy_env_rollout() without a policy */
    WAY_SIZE_LOOKUP,
    WAY_BEST_GREEDY, /* the best of the four greedy baselines */
    WAY_NS_TABLEWISE,
    WAY_NEUROSHARD,
    WAY_COUNT
};

static const char *const way_names[WAY_COUNT] = {
    "dreamshard",  "model-cost LPT",        "size_lookup_greedy",
    "best greedy", "neuroshard table-wise", "neuroshard",
};

struct ctx {
    const struct cost_net *net;
    const struct policy_net *pn;
    struct net_cost_model ncm;
};

/* The model-cost LPT's plan cost, or NAN when a table fits nowhere. */
static double lpt_cost(const struct ctx *c, const struct table *t, size_t n,
                       const struct topology *topo)
{
    struct policy_env *e = NULL;
    double cost = NAN;

    if (policy_env_new(NULL, c->net, NULL, t, n, topo, OPTIMIZER_SGD, &e) != 0)
        return NAN;
    if (policy_env_rollout(e, NULL) == 0)
        cost = policy_env_cost(e);
    policy_env_free(e);
    return cost;
}

/* Plans with one way; returns the plan cost (NAN: no plan), the time of
 * plan_run() (or the LPT's placement) and of the placement alone
 * (dreamshard, neuroshard: stats.search_ms; else NAN). */
static double plan_way(const struct ctx *c, enum way w, const struct table *t,
                       size_t n, const struct topology *topo, double *ms,
                       double *place_ms)
{
    struct plan_options o;
    struct plan p;
    struct sd_diag d;
    double t0 = now_ms(), cost = NAN, best = INFINITY;
    int a;

    plan_options_default(&o);
    o.net = c->net;
    o.policy = c->pn;
    *place_ms = NAN;
    switch (w) {
    case WAY_LPT:
        cost = lpt_cost(c, t, n, topo);
        *ms = now_ms() - t0;
        return cost;
    case WAY_BEST_GREEDY:
        for (a = PLAN_ALG_DIM_GREEDY; a <= PLAN_ALG_SIZE_LOOKUP_GREEDY; a++) {
            o.alg = (enum plan_alg)a;
            if (plan_run(t, n, topo, &o, &c->ncm.cm, &p, &d) != 0)
                continue;
            if (p.cost_ms < best)
                best = p.cost_ms;
            plan_destroy(&p);
        }
        *ms = now_ms() - t0;
        return best < INFINITY ? best : NAN;
    case WAY_DREAMSHARD:
        o.alg = PLAN_ALG_DREAMSHARD;
        break;
    case WAY_SIZE_LOOKUP:
        o.alg = PLAN_ALG_SIZE_LOOKUP_GREEDY;
        break;
    case WAY_NS_TABLEWISE:
        o.alg = PLAN_ALG_NEUROSHARD;
        o.column_splits = false;
        o.local_search = false;
        break;
    default:
        o.alg = PLAN_ALG_NEUROSHARD;
        break;
    }
    if (plan_run(t, n, topo, &o, &c->ncm.cm, &p, &d) == 0) {
        cost = p.cost_ms;
        if (w == WAY_DREAMSHARD || w == WAY_NS_TABLEWISE || w == WAY_NEUROSHARD)
            *place_ms = p.stats.search_ms;
        plan_destroy(&p);
    }
    *ms = now_ms() - t0;
    return cost;
}

/* Part 1: one case of bench_search's, timed. */
static int at_scale(const struct ctx *c, size_t ntables, int32_t ndevices,
                    uint64_t seed, int repeats)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    struct synth_params sp;
    struct topology topo;
    struct table *t;
    uint64_t total = 0;
    double ms[64], place[64], cost = NAN, dream = NAN;
    size_t i;
    int w, k;

    synth_params_default(&sp);
    sp.count = ntables;
    sp.seed = seed;
    sp.batch_size = c->net->batch_size;
    if (synth_tables(&sp, ncpu > 0 ? (unsigned)ncpu : 1, &t) != 0)
        return 1;
    for (i = 0; i < ntables; i++)
        total += table_bytes(&t[i], t[i].dim);
    topology_default(&topo, ndevices, total * 3 / 2 / (uint64_t)ndevices);
    topo.batch_size = c->net->batch_size;
    printf("\n%zu tables on %d devices (seed %llu), costs in ms at batch "
           "%lld\n",
           ntables, (int)ndevices, (unsigned long long)seed,
           (long long)c->net->batch_size);
    printf("%-24s %10s %12s %14s %13s\n", "way", "plan cost", "/dreamshard",
           "plan_run ms", "placing ms");
    for (w = 0; w < WAY_COUNT; w++) {
        int n = w == WAY_DREAMSHARD || w == WAY_LPT ? repeats : 1;

        for (k = 0; k < n && k < 64; k++)
            cost =
                plan_way(c, (enum way)w, t, ntables, &topo, &ms[k], &place[k]);
        qsort(ms, (size_t)n, sizeof(ms[0]), sd_cmp_double);
        qsort(place, (size_t)n, sizeof(place[0]), sd_cmp_double);
        if (w == WAY_DREAMSHARD)
            dream = cost;
        printf("%-24s %10.3f %12.4f %14.2f %13.2f\n", way_names[w], cost,
               cost / dream, ms[n / 2],
               w == WAY_LPT ? ms[n / 2] : place[n / 2]);
    }
    printf("(plan_run: placing, checking, evaluating and explaining; the "
           "LPT's is its placement alone; medians)\n");
    free(t);
    return 0;
}

/* Part 2: one task set on nd devices. */
static int generalise(const struct ctx *c, const struct table *pool,
                      size_t npool, int32_t nd, size_t ntasks)
{
    struct task_params tp;
    struct topology topo;
    struct task *tasks;
    struct sd_diag d;
    double sum[WAY_COUNT][3] = {{0}}, cost[WAY_COUNT], ms, place;
    int ok[WAY_COUNT] = {0}, nref[WAY_COUNT][3] = {{0}};
    size_t k;
    int w;

    task_params_default(&tp);
    tp.count = ntasks;
    tp.seed = (uint64_t)nd;
    if (nd > 16) {
        tp.min_tables = 2 * (size_t)nd;
        tp.max_tables = 4 * (size_t)nd;
    }
    tp.max_bytes = (uint64_t)(4 * nd - 1) << 30;
    if (task_generate(&tp, pool, npool, &tasks, &d) != 0) {
        fprintf(stderr, "bench_dreamshard: %s\n", d.msg);
        return 1;
    }
    topology_default(&topo, nd, (uint64_t)4 << 30);
    topo.batch_size = c->net->batch_size;
    for (k = 0; k < ntasks; k++) {
        for (w = 0; w < WAY_COUNT; w++) {
            cost[w] = plan_way(c, (enum way)w, tasks[k].tables,
                               tasks[k].ntables, &topo, &ms, &place);
            ok[w] += !isnan(cost[w]);
        }
        for (w = 0; w < WAY_COUNT; w++) {
            static const enum way refs[3] = {WAY_BEST_GREEDY, WAY_NEUROSHARD,
                                             WAY_LPT};
            int r;

            for (r = 0; r < 3; r++)
                if (!isnan(cost[w]) && !isnan(cost[refs[r]])) {
                    sum[w][r] += cost[w] / cost[refs[r]];
                    nref[w][r]++;
                }
        }
        fprintf(stderr, "bench_dreamshard: %d devices: task %zu/%zu\n", (int)nd,
                k + 1, ntasks);
    }
    printf("\n%d devices of 4 GiB, %zu tasks of %zu..%zu tables (seed %d, "
           "the test pool)\n",
           (int)nd, ntasks, tp.min_tables, tp.max_tables, (int)nd);
    printf("%-24s %7s %12s %12s %12s\n", "way", "placed", "/best_greedy",
           "/neuroshard", "/model_LPT");
    for (w = 0; w < WAY_COUNT; w++)
        printf("%-24s %3d/%-3zu %12.4f %12.4f %12.4f\n", way_names[w], ok[w],
               ntasks, nref[w][0] ? sum[w][0] / nref[w][0] : NAN,
               nref[w][1] ? sum[w][1] / nref[w][1] : NAN,
               nref[w][2] ? sum[w][2] / nref[w][2] : NAN);
    task_array_free(tasks, ntasks);
    return 0;
}

int main(int argc, char **argv)
{
    int repeats = argc > 1 ? atoi(argv[1]) : 5;
    size_t ntasks = argc > 2 ? (size_t)atoi(argv[2]) : 10;
    struct cost_net *owned_net = NULL;
    struct policy_net *owned_pn = NULL;
    struct table *pool = NULL, *train = NULL, *test = NULL;
    size_t i, nfit = 0;
    struct synth_params sp;
    struct sd_diag d = {{0}};
    struct ctx c;
    size_t ntrain, ntest;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    static const int32_t sizes[] = {4, 8, 16, 128};
    int rv = 1, k;

    c.net = argc > 3 && net_read_file(argv[3], &owned_net, &d) == 0
                ? owned_net
                : (argc > 3 ? NULL : net_embedded(&d));
    c.pn = argc > 4 && policy_read_file(argv[4], &owned_pn, &d) == 0
               ? owned_pn
               : (argc > 4 ? NULL : policy_embedded(&d));
    if (c.net == NULL || c.pn == NULL || repeats < 1 || repeats > 64 ||
        ntasks < 1) {
        fprintf(stderr,
                "bench_dreamshard: %s\nusage: bench_dreamshard "
                "[repeats] [tasks] [model file] [policy file]\n",
                d.msg);
        goto out;
    }
    net_cost_model_init(&c.ncm, c.net);
    printf("bench_dreamshard: model %s, policy trained on %d-device tasks "
           "(%d steps, gate %.3f)\n",
           c.net->profile, (int)c.pn->metrics.train_devices,
           (int)c.pn->metrics.iterations, c.pn->metrics.gate_ratio);
    if (at_scale(&c, 856, 8, 0, repeats) != 0 ||
        at_scale(&c, 2000, 128, 1, repeats) != 0)
        goto out;
    /* The embedded policy's protocol: tables of seed 0, split with seed 0;
     * its held-out tasks come from the test half. */
    synth_params_default(&sp);
    sp.count = 856;
    sp.batch_size = c.net->batch_size;
    if (synth_tables(&sp, ncpu > 0 ? (unsigned)ncpu : 1, &pool) != 0 ||
        task_split_pool(pool, sp.count, 0, &train, &ntrain, &test, &ntest) != 0)
        goto out;
    /* Tables a 4 GiB device holds whole at dim 128 (fp32, sgd). */
    for (i = 0; i < ntest; i++)
        if (test[i].rows <= ((int64_t)4 << 30) / (128 * 4))
            test[nfit++] = test[i];
    printf("\ntest pool: %zu of %zu tables fit a 4 GiB device whole\n", nfit,
           ntest);
    for (k = 0; k < 4; k++)
        if (generalise(&c, test, nfit, sizes[k], ntasks) != 0)
            goto out;
    rv = 0;
out:
    free(pool);
    free(train);
    free(test);
    free(owned_pn);
    free(owned_net);
    return rv;
}
