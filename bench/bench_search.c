/*
 * The neuroshard search at scale, with the embedded model: synthetic tables
 * (shardctl gen-tables at batch 4096) on devices whose memory is 1.5 x the
 * tables' total over the device count, from 856 tables on 8 devices to
 * 20,000 on 2,048 (issue #15's table).  For each case it prints the search's
 * wall time (the median of the repeats: stats.search_ms, the whole search
 * with the alternatives it weighed, the scheme passes, the searches around
 * their choices, the column search alone and TorchRec's proposal), the whole
 * plan_run()'s (that, the evaluation and the explanation: what an offline
 * plan waits for), the plan cost, its lower bound and the gap, the greedy
 * runs of all those searches and how many devices they scored per second
 * of the search (stats.evaluations: one per piece placed, one or two per
 * move or swap the local search tried) on all its threads and per thread.
 *
 * usage: bench_search [repeats] [threads] [max tables]
 *   repeats     runs per case, 1 to BENCH_REPEATS_MAX (default 3; 1 for
 *               cases of 10,000 tables and more); the median time is
 *               printed (many repeats: a profile of the search alone)
 *   threads     the search's threads (default 0: one per CPU)
 *   max tables  skip cases with more tables (default 20000)
 * With SHARDD_BENCH_VARIANTS=1 in the environment it also runs the search's
 * parts switched off in turn (one thread, no local search, no beam, the
 * table-wise grid alone, pins and two capacities) and "warm memo" (one
 * memo for all the repeats, filled by a plan not counted: a daemon's, for
 * a client that sends the same tables again); with a variant's name
 * (SHARDD_BENCH_VARIANTS="no beam") it runs that one alone.  With
 * SHARDD_BENCH_MODEL=FILE it plans with that model file instead of the
 * embedded one (a prior model, format 4, adds a square root to its head).
 * With SHARDD_BENCH_CASE=TABLES/DEVICES (856/8) it runs that case alone
 * (a profile of one case).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "planner.h"
#include "shardd/sort.h"

#define BENCH_REPEATS_MAX 1024

struct bench_case {
    size_t ntables;
    int32_t ndevices;
    uint64_t seed;
};

static const struct bench_case cases[] = {
    {856, 8, 0},    {856, 64, 0},     {2000, 128, 1},
    {5000, 256, 2}, {10000, 1024, 3}, {20000, 2048, 4},
};

struct variant {
    const char *name;
    bool splits, local;
    int32_t threads;    /* -1: the command line's */
    bool constrained;   /* pins and two capacities */
    int32_t beam_depth; /* -1: the default */
    bool warm;          /* one memo for every repeat: the daemon's, for a
                           client that sends the same tables again */
};

static const struct variant variants[] = {
    {"full", true, true, -1, false, -1, false},
    {"1 thread", true, true, 1, false, -1, false},
    {"no local search", true, false, -1, false, -1, false},
    {"no beam", true, true, -1, false, 0, false},
    {"table-wise grid only", false, false, -1, false, -1, false},
    {"pins + 2 capacities", true, true, -1, true, -1, false},
    {"warm memo", true, true, -1, false, -1, true},
};
#define NVARIANTS (sizeof(variants) / sizeof(variants[0]))

/* The case's tables, and its devices' memory: 1.5 x the total / devices. */
static int make_case(const struct cost_net *net, const struct bench_case *c,
                     struct table **tables, struct topology *topo)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    struct synth_params sp;
    uint64_t total = 0;
    size_t i;
    int rv;

    synth_params_default(&sp);
    sp.count = c->ntables;
    sp.seed = c->seed;
    sp.batch_size = net->batch_size;
    rv = synth_tables(&sp, ncpu > 0 ? (unsigned)ncpu : 1, tables);
    if (rv != 0)
        return rv;
    for (i = 0; i < c->ntables; i++)
        total += table_bytes(&(*tables)[i], (*tables)[i].dim);
    topology_default(topo, c->ndevices, total * 3 / 2 / (uint64_t)c->ndevices);
    topo->batch_size = net->batch_size;
    return 0;
}

struct result {
    double wall_s, plan_s;
    struct plan p; /* the last run's (destroyed by the caller) */
};

static int run(const struct cost_net *net, const struct table *tables, size_t n,
               const struct topology *topo, const struct variant *v,
               int32_t threads, const int32_t *pins, int repeats,
               struct result *out)
{
    struct net_cost_model ncm;
    struct plan_options o;
    struct net_memo *memo = NULL;
    struct sd_diag d;
    struct timespec t0, t1;
    double t[BENCH_REPEATS_MAX], all[BENCH_REPEATS_MAX];
    int i, rv = 0;

    plan_options_default(&o);
    o.alg = PLAN_ALG_NEUROSHARD;
    o.net = net;
    o.column_splits = v->splits;
    o.local_search = v->local;
    o.threads = v->threads >= 0 ? v->threads : threads;
    o.pins = v->constrained ? pins : NULL;
    if (v->beam_depth >= 0)
        o.beam_depth = v->beam_depth;
    o.time_budget_ms = 0; /* the whole search, however long */
    net_cost_model_init(&ncm, net);
    /* A warm variant's memo, made once and filled by a first plan that is
     * not counted. */
    if (v->warm) {
        memo = net_memo_for_tables(net, n);
        if (memo == NULL)
            return SD_ENOMEM;
        o.memo = memo;
        ncm.memo = memo;
        rv = plan_run(tables, n, topo, &o, &ncm.cm, &out->p, &d);
        if (rv != 0)
            goto free_memo;
    }
    for (i = 0; i < repeats; i++) {
        if (i > 0 || v->warm)
            plan_destroy(&out->p);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        /* Else a memo per plan, shared by its search, evaluation and
         * explanation, as `shardctl plan` has: no plan reuses another's. */
        if (!v->warm) {
            memo = net_memo_for_tables(net, n);
            o.memo = memo;
            ncm.memo = memo;
        }
        rv = plan_run(tables, n, topo, &o, &ncm.cm, &out->p, &d);
        if (!v->warm)
            net_memo_free(memo);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        all[i] = (double)(t1.tv_sec - t0.tv_sec) +
                 (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        if (rv != 0)
            goto free_memo;
        t[i] = out->p.stats.search_ms / 1e3;
    }
    qsort(t, (size_t)repeats, sizeof(t[0]), sd_cmp_double);
    qsort(all, (size_t)repeats, sizeof(all[0]), sd_cmp_double);
    out->wall_s = t[repeats / 2];
    out->plan_s = all[repeats / 2];
free_memo:
    if (v->warm)
        net_memo_free(memo);
    if (rv != 0)
        fprintf(stderr, "bench_search: %s\n", d.msg);
    return rv;
}

static void print_row(const char *name, const struct bench_case *c,
                      const struct result *r, int nthreads)
{
    const struct plan *p = &r->p;
    double evals = (double)p->stats.evaluations;
    double per_s = r->wall_s > 0 ? evals / r->wall_s : 0;

    printf("%-21s %7zu %7d %9.3f %9.3f %9.3f %9.3f %7.2f %9lld %8.2f %8.2f\n",
           name, c->ntables, (int)c->ndevices, r->wall_s, r->plan_s, p->cost_ms,
           p->explain.lower_bound_ms, 100 * p->explain.gap,
           (long long)p->stats.greedy_runs, per_s / 1e6,
           per_s / 1e6 / (nthreads > 0 ? nthreads : 1));
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int repeats = argc > 1 ? atoi(argv[1]) : 3;
    int32_t threads = argc > 2 ? atoi(argv[2]) : 0;
    size_t max_tables = argc > 3 ? (size_t)atoll(argv[3]) : 20000;
    const char *only = getenv("SHARDD_BENCH_VARIANTS");
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nthreads = threads > 0 ? threads : ncpu > 0 ? (int)ncpu : 1;
    const char *model = getenv("SHARDD_BENCH_MODEL");
    const char *one = getenv("SHARDD_BENCH_CASE");
    struct sd_diag d;
    struct cost_net *own = NULL;
    const struct cost_net *net;
    size_t c, v;

    if (model != NULL && net_read_file(model, &own, &d) != 0) {
        fprintf(stderr, "bench_search: SHARDD_BENCH_MODEL: %s\n", d.msg);
        return 1;
    }
    net = own != NULL ? own : net_embedded(&d);
    if (!net) {
        fprintf(stderr, "bench_search: %s\n", d.msg);
        return 1;
    }
    if (repeats < 1 || repeats > BENCH_REPEATS_MAX)
        repeats = 3;
    printf("bench_search: neuroshard with %s model %s, %d thread(s) of %ld "
           "CPUs\n",
           own != NULL ? model : "the embedded", net->profile, nthreads, ncpu);
    printf("%-21s %7s %7s %9s %9s %9s %9s %7s %9s %8s %8s\n", "variant",
           "tables", "devices", "wall s", "plan s", "cost ms", "bound ms",
           "gap %", "greedy", "Meval/s", "/thread");
    for (c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const struct bench_case *bc = &cases[c];
        struct table *tables = NULL;
        struct topology topo;
        int32_t *pins = NULL;
        uint64_t *caps = NULL;
        size_t k, nv = only ? NVARIANTS : 1;

        if (bc->ntables > max_tables)
            continue;
        if (one != NULL) {
            char want[32];

            snprintf(want, sizeof(want), "%zu/%d", bc->ntables,
                     (int)bc->ndevices);
            if (strcmp(one, want) != 0)
                continue;
        }
        if (make_case(net, bc, &tables, &topo) != 0) {
            fprintf(stderr, "bench_search: cannot make the tables\n");
            return 1;
        }
        pins = malloc(bc->ntables * sizeof(*pins));
        caps = malloc((size_t)bc->ndevices * sizeof(*caps));
        if (pins == NULL || caps == NULL) {
            fprintf(stderr, "bench_search: out of memory\n");
            return 1;
        }
        for (k = 0; k < bc->ntables; k++)
            pins[k] =
                k % 20 == 0 ? (int32_t)(k / 20 % (size_t)bc->ndevices) : -1;
        for (k = 0; k < (size_t)bc->ndevices; k++)
            caps[k] =
                k % 2 ? topo.mem_bytes + topo.mem_bytes / 4 : topo.mem_bytes;
        for (v = 0; v < nv; v++) {
            struct result r;
            int reps = bc->ntables >= 10000 ? 1 : repeats;

            if (only && strcmp(only, "1") != 0 &&
                strcmp(only, variants[v].name) != 0)
                continue;
            topo.mem_by_device = variants[v].constrained ? caps : NULL;
            if (run(net, tables, bc->ntables, &topo, &variants[v], threads,
                    pins, reps, &r) != 0)
                return 1;
            print_row(variants[v].name, bc, &r,
                      variants[v].threads > 0 ? variants[v].threads : nthreads);
            plan_destroy(&r.p);
        }
        free(caps);
        free(pins);
        free(tables);
    }
    free(own);
    return 0;
}
