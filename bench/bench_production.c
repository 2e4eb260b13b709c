/*
 * bench_quality's production-like task set (issue #16), by the model only:
 * seeded tasks of a few huge tables (one per 32 devices, up to four times a
 * device), hot
 * tables (long bags), many tiny ones and medium ones, on 64 devices (8
 * hosts of 8) and 512 (64 of 8) of 80 GiB at batch 65,536.  Each task is
 * planned by neuroshard with every scheme, by torchrec_greedy with every
 * scheme, and by neuroshard held to table- and column-wise; it prints the
 * mean predicted cost of each, the ratios per task averaged, and the search
 * times.
 *
 * usage: bench_quality production [tasks per set] [model file]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"

struct prod_set {
    int32_t devices;
    size_t tables;
};

static const struct prod_set sets[] = {{64, 800}, {512, 3000}};

/* One table of the mix, drawn with g; table i < nhuge is a huge one. */
static void draw(struct rng *g, size_t i, size_t nhuge, struct table *t)
{
    static const int32_t small_dims[] = {8, 16, 32};
    static const int32_t dims[] = {32, 64, 128, 256};
    double u = rng_uniform(g), left = 1, skew;
    int k;

    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "p%05zu", i);
    if (i < nhuge) { /* huge id tables: up to ~4 devices of 80 GiB */
        t->rows = 50000000 + (int64_t)(rng_uniform(g) * 250e6);
        t->dim = dims[2 + (int)(rng_uniform(g) * 2)];
        t->pooling_factor = 1 + rng_uniform(g) * 10;
    } else if (u < 0.1) { /* hot: long bags */
        t->rows = 1000000 + (int64_t)(rng_uniform(g) * 9e6);
        t->dim = dims[(int)(rng_uniform(g) * 3)];
        t->pooling_factor = 50 + rng_uniform(g) * 150;
    } else if (u < 0.7) { /* tiny categorical features */
        t->rows = 10 + (int64_t)(rng_uniform(g) * 5000);
        t->dim = small_dims[(int)(rng_uniform(g) * 3)];
        t->pooling_factor = 1 + rng_uniform(g) * 2;
    } else { /* medium */
        t->rows = 100000 + (int64_t)(rng_uniform(g) * 4.9e6);
        t->dim = dims[(int)(rng_uniform(g) * 3)];
        t->pooling_factor = 1 + rng_uniform(g) * 20;
    }
    /* A decaying access histogram of random skew. */
    skew = 0.3 + 0.5 * rng_uniform(g);
    for (k = 0; k < TABLE_NBINS - 1 && left > 1e-6; k++) {
        t->bins[k] = left * skew;
        left -= t->bins[k];
    }
}

struct prod_alg {
    const char *name;
    enum plan_alg alg;
    bool twcw; /* held to table- and column-wise */
};

static const struct prod_alg algs[] = {
    {"neuroshard", PLAN_ALG_NEUROSHARD, false},
    {"torchrec_greedy", PLAN_ALG_TORCHREC_GREEDY, false},
    {"neuroshard tw/cw", PLAN_ALG_NEUROSHARD, true},
};
#define NPALG (sizeof(algs) / sizeof(algs[0]))

int bench_production(int argc, char **argv); /* bench_quality.c calls it */

int bench_production(int argc, char **argv)
{
    size_t ntasks = argc > 2 ? (size_t)atoi(argv[2]) : 3, s, k, i;
    struct cost_net *owned = NULL;
    const struct cost_net *net;
    struct sd_diag d;

    net = argc > 3 ? (net_read_file(argv[3], &owned, &d) == 0 ? owned : NULL)
                   : net_embedded(&d);
    if (net == NULL || ntasks < 1) {
        fprintf(stderr, "bench_quality production: %s\n",
                net ? "tasks must be >= 1" : d.msg);
        return 1;
    }
    printf("bench_quality production: model %s, predicted costs (ms) at "
           "batch 65536, %zu tasks a set\n",
           net->profile, ntasks);
    for (s = 0; s < sizeof(sets) / sizeof(sets[0]); s++) {
        double cost[NPALG] = {0}, ms[NPALG] = {0}, r_trec = 0, r_twcw = 0,
               r_twcw_trec = 0;
        int dp = 0, rows = 0, ok = 0;

        for (k = 0; k < ntasks; k++) {
            size_t n = sets[s].tables;
            struct table *tb = calloc(n, sizeof(*tb));
            struct table_constraint *twcw = calloc(n, sizeof(*twcw));
            struct topology topo;
            struct net_cost_model ncm;
            struct rng g;
            double c[NPALG];
            size_t a;
            bool all = true;

            if (tb == NULL || twcw == NULL) {
                fprintf(stderr, "bench_quality production: out of memory\n");
                return 1;
            }
            rng_seed(&g, 1000 * s + k);
            for (i = 0; i < n; i++) {
                draw(&g, i, (size_t)sets[s].devices / 32, &tb[i]);
                twcw[i] = (struct table_constraint){
                    .schemes = (1u << SCHEME_TW) | (1u << SCHEME_CW),
                    .host = -1};
            }
            topology_default(&topo, sets[s].devices, 80ull << 30);
            topo.devices_per_host = 8;
            topo.batch_size = 65536;
            net_cost_model_init(&ncm, net);
            for (a = 0; a < NPALG; a++) {
                struct plan_options o;
                struct plan p;

                plan_options_default(&o);
                o.alg = algs[a].alg;
                o.net = net;
                o.time_budget_ms = 0;
                o.constraints = algs[a].twcw ? twcw : NULL;
                if (plan_run(tb, n, &topo, &o, &ncm.cm, &p, &d) != 0) {
                    printf("  %d devices, task %zu: %s: %s\n",
                           (int)sets[s].devices, k, algs[a].name, d.msg);
                    all = false;
                    continue;
                }
                c[a] = p.cost_ms;
                ms[a] += p.stats.search_ms;
                if (a == 0)
                    for (i = 0; i < p.nshards; i++)
                        if (i == 0 ||
                            p.shards[i].table != p.shards[i - 1].table) {
                            dp += p.shards[i].scheme == SCHEME_DP;
                            rows += scheme_splits_rows(
                                (enum plan_scheme)p.shards[i].scheme);
                        }
                plan_destroy(&p);
            }
            if (all) {
                for (a = 0; a < NPALG; a++)
                    cost[a] += c[a];
                r_trec += c[0] / c[1];
                r_twcw += c[0] / c[2];
                r_twcw_trec += c[2] / c[1];
                ok++;
            }
            free(twcw);
            free(tb);
        }
        printf("\n%d devices (%d hosts of 8), %zu tables a task, %d of %zu "
               "tasks planned by all\n",
               (int)sets[s].devices, (int)sets[s].devices / 8, sets[s].tables,
               ok, ntasks);
        printf("%-18s %12s %12s\n", "algorithm", "mean cost", "search ms");
        for (k = 0; k < NPALG && ok > 0; k++)
            printf("%-18s %12.3f %12.1f\n", algs[k].name, cost[k] / ok,
                   ms[k] / (double)ntasks);
        if (ok > 0)
            printf("neuroshard / torchrec_greedy %.3f; neuroshard / "
                   "neuroshard tw/cw %.3f; tw/cw / torchrec_greedy %.3f "
                   "(means of per-task ratios); neuroshard split %.1f tables "
                   "in rows and replicated %.1f a task\n",
                   r_trec / ok, r_twcw / ok, r_twcw_trec / ok,
                   (double)rows / (double)ntasks, (double)dp / (double)ntasks);
    }
    free(owned);
    return 0;
}
