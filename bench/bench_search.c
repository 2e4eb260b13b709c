/*
 * Search time of the neuroshard algorithm with the embedded model: 856
 * synthetic tables on 8 devices and 2,000 on 128 (the targets are
 * 0.25 s and 2 s on 2 cores), each with the search's parts switched off in
 * turn so that every speed-up and every quality step is measured: the
 * table-wise grid alone, the beam without the local search, one thread;
 * and with constraints: every 20th table pinned, odd devices 1.25 x the
 * capacity of even ones.  Prints the plan cost (model ms), the lower bound
 * and the search figures.
 *
 * usage: bench_search [repeats]     (default 3; the median time is printed)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "planner.h"

struct variant {
    const char *name;
    bool splits, local;
    int32_t threads;
    bool constrained; /* pins and two capacities */
};

static const struct variant variants[] = {
    {"full (all threads)", true, true, 0, false},
    {"full, 1 thread", true, true, 1, false},
    {"no local search", true, false, 0, false},
    {"table-wise grid only", false, false, 0, false},
    {"pins + 2 capacities", true, true, 0, true},
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static int run_case(const struct cost_net *net, size_t ntables,
                    int32_t ndevices, double mem_gb, uint64_t seed, int repeats)
{
    struct synth_params sp;
    struct table *tables;
    struct topology topo;
    struct net_cost_model ncm;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t *caps = malloc((size_t)ndevices * sizeof(*caps));
    int32_t *pins = malloc(ntables * sizeof(*pins));
    size_t v, k;
    int rv, i;

    if (caps == NULL || pins == NULL) {
        fprintf(stderr, "bench_search: out of memory\n");
        free(caps);
        free(pins);
        return 1;
    }
    synth_params_default(&sp);
    sp.count = ntables;
    sp.seed = seed;
    sp.batch_size = net->batch_size;
    rv = synth_tables(&sp, ncpu > 0 ? (unsigned)ncpu : 1, &tables);
    if (rv != 0) {
        fprintf(stderr, "bench_search: synth_tables: %s\n", sd_strerror(rv));
        return 1;
    }
    topology_default(&topo, ndevices,
                     (uint64_t)(mem_gb * (double)(1ull << 30)));
    topo.batch_size = net->batch_size;
    for (i = 0; i < ndevices; i++)
        caps[i] = i % 2 ? topo.mem_bytes + topo.mem_bytes / 4 : topo.mem_bytes;
    for (k = 0; k < ntables; k++)
        pins[k] = k % 20 == 0 ? (int32_t)(k / 20 % (size_t)ndevices) : -1;
    net_cost_model_init(&ncm, net);
    printf("\n%zu tables on %d devices of %.0f GiB (seed %llu, %ld CPUs)\n",
           ntables, (int)ndevices, mem_gb, (unsigned long long)seed, ncpu);
    printf("%-22s %10s %10s %8s %7s %9s %7s %6s %6s\n", "variant", "median s",
           "cost ms", "bound ms", "gap %", "states", "greedy", "splits",
           "moves");
    for (v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
        double t[16], cost = 0;
        struct plan_options o;
        struct plan p;
        struct sd_diag d;
        struct plan_explain e = {0};
        struct plan_search_stats st = {0};

        plan_options_default(&o);
        o.alg = PLAN_ALG_NEUROSHARD;
        o.net = net;
        o.column_splits = variants[v].splits;
        o.local_search = variants[v].local;
        o.threads = variants[v].threads;
        o.pins = variants[v].constrained ? pins : NULL;
        topo.mem_by_device = variants[v].constrained ? caps : NULL;
        for (i = 0; i < repeats; i++) {
            rv = plan_run(tables, ntables, &topo, &o, &ncm.cm, &p, &d);
            if (rv != 0) {
                fprintf(stderr, "bench_search: %s\n", d.msg);
                goto out_free;
            }
            t[i] = p.stats.search_ms / 1e3;
            cost = p.cost_ms;
            e = p.explain;
            st = p.stats;
            plan_destroy(&p);
        }
        qsort(t, (size_t)repeats, sizeof(t[0]), cmp_double);
        printf("%-22s %10.3f %10.3f %8.3f %7.1f %9lld %7lld %6d %6d\n",
               variants[v].name, t[repeats / 2], cost, e.lower_bound_ms,
               100 * e.gap, (long long)st.states, (long long)st.greedy_runs,
               (int)st.splits, (int)st.moves);
    }
    rv = 0;
out_free:
    free(pins);
    free(caps);
    free(tables);
    return rv != 0;
}

int main(int argc, char **argv)
{
    int repeats = argc > 1 ? atoi(argv[1]) : 3;
    struct sd_diag d;
    const struct cost_net *net = net_embedded(&d);

    if (!net) {
        fprintf(stderr, "bench_search: %s\n", d.msg);
        return 1;
    }
    if (repeats < 1 || repeats > 16)
        repeats = 3;
    printf("bench_search: neuroshard with the embedded model %s\n",
           net->profile);
    /* Memory is generous: the bench measures search, not what fits. */
    if (run_case(net, 856, 8, 128, 0, repeats) != 0 ||
        run_case(net, 2000, 128, 16, 1, repeats) != 0)
        return 1;
    return 0;
}
