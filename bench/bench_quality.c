/*
 * Plan quality on the NeuroShard protocol (neuroshard.md 2.4): seeded task
 * sets of 10-59 tables drawn from the 856 synthetic tables, planned on 4 and
 * 8 devices of 4 GiB by every algorithm.  For each algorithm and set it
 * prints the mean plan cost predicted by the embedded model and measured on
 * the device (each device's shard timed in turn on the cpu or cuda backend,
 * comm modelled), the mean per-task ratio of the measured cost to the best
 * greedy baseline's, to torchrec_greedy's and to neuroshard's (over the
 * tasks those could plan), the predicted cost over the plan's lower bound,
 * the measured cost over the task's measured floor ("/even": the least
 * measured compute of any algorithm's plan spread evenly over the devices,
 * with that plan's comm; a plan doing no less work cannot go below 1 but
 * by what its comm saves), its own work over that floor ("work": its
 * measured compute spread evenly, so /even over work is its imbalance as
 * measured), the search time, and how many tasks it could plan.  Mean costs are
 * over the tasks each algorithm planned, so compare the ratios across
 * algorithms.
 *
 * usage: bench_quality [tasks per set] [repeats] [backend|none] [rounds]
 *                      [model file] [policy file]
 *        bench_quality production [tasks per set] [model file]
 *        (bench_production.c: a production-like set, by the model)
 * (the model file, default the embedded model, is what plans and predicts:
 * candidate models compare on plan quality, not only on MAPE; the policy
 * file is dreamshard's, and must have been trained against that model:
 * without one, the policy compiled in for the model, if any; a policy
 * trained against another model, or none, leaves dreamshard planning
 * nothing, with a note saying why)
 * Each plan is measured on its tables' own lookups: the generator's trace
 * of each task table (synth_trace(), family_trace()), as the profile that
 * trained the model measured them.  With SHARDD_BENCH_REBUILT=1 they are
 * rebuilt from the tables' features instead (trace_from_table(), what
 * `shardctl eval` does with a tables file).
 *        (defaults: 5 tasks, 5 timed repeats after 2 warm-ups, auto backend,
 *         3 rounds; "none" skips the measurement and reports predictions
 *         only).  Each device's compute is the median of `rounds`
 *         interleaved measurements: on a shared machine one evaluation of a
 *         plan can be 40 % off the next.
 *
 * SHARDD_BENCH_FAMILIES=all, or a list such as zipf,seq,mix: task sets
 * drawn from the table families (formats.h, families.c) instead, 256
 * tables of each named family (mix: all of them in turn; "all" is every
 * family and mix), each at 4 and 8 devices: does a model's plan quality
 * carry over to tables of other shapes.
 *
 * SHARDD_BENCH_DEVICES=4 or 8: task sets on that many devices alone
 * (default 4,8: both).
 *
 * SHARDD_BENCH_MODEL_B=FILE: one more row, "neuroshard (B)": neuroshard
 * planning with the model in FILE (its own prediction), measured in the
 * same interleaved rounds as the rest, so its /neuroshard column is the
 * paired ratio of the two models' plans, B over A, free of the sitting's
 * speed (sittings of a shared VM move a cell by 0.02-0.05).  It must be
 * of the same batch as the model.
 *
 * SHARDD_BENCH_QUANTILE=Q (0..1): neuroshard plans for the Q-quantile of the
 * model's ensemble's costs (shardctl plan --quantile Q), a robust plan: the
 * model file's when it is an ensemble file (shardctl train --ensemble K;
 * member 0 is then the model), else the one compiled in for the model (the
 * embedded one's, the H200's).  Its "predicted" is then that quantile.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels.h"
#include "planner.h"
#include "profiler.h"

#define NALG PLAN_ALG_COUNT
/* The rows: the algorithms, then neuroshard with model B (ROW_B). */
#define NROW  (NALG + 1)
#define ROW_B NALG

/* SHARDD_BENCH_MODEL_B's model (NULL: no row B), read once in main(). */
static const struct cost_net *bench_net_b;

/* Whether row a is run: every algorithm's, row B with a model B. */
static bool row_on(int a)
{
    return a != ROW_B || bench_net_b != NULL;
}

static const char *row_name(int a)
{
    return a == ROW_B ? "neuroshard (B)" : plan_alg_name((enum plan_alg)a);
}

/* Sums over the tasks an algorithm planned; the ratios over those where
 * the reference planned too (counted apart). */
struct acc {
    double pred, meas, vs_greedy, vs_trec, vs_ns, vs_bound, vs_floor, work,
        search_ms;
    int ok, n_greedy, n_trec, n_ns, n_floor;
};

static bool is_greedy(int a)
{
    return a >= PLAN_ALG_DIM_GREEDY && a <= PLAN_ALG_SIZE_LOOKUP_GREEDY;
}

/* Where a task's tables come from: exactly one of the two is set. */
struct pool_source {
    const struct synth_params *synth; /* the dlrm tables (synth.c) */
    const struct family_params *fam;  /* a family's (families.c) */
};

/*
 * The lookups of task tk's tables: each table's generator trace (its
 * source in the pool), in *out (tk->ntables, trace_array_free() them);
 * NULL where SHARDD_BENCH_REBUILT asks for lookups rebuilt from the
 * features.  0 or the generator's error.
 */
static int task_traces(const struct pool_source *src, const struct task *tk,
                       struct trace **out)
{
    const char *rebuilt = getenv("SHARDD_BENCH_REBUILT");
    struct trace *tr;
    size_t i;
    int rv = 0;

    *out = NULL;
    if (rebuilt != NULL && strcmp(rebuilt, "1") == 0)
        return 0;
    tr = calloc(tk->ntables ? tk->ntables : 1, sizeof(*tr));
    if (tr == NULL)
        return SD_ENOMEM;
    for (i = 0; i < tk->ntables && rv == 0; i++)
        rv = src->fam != NULL
                 ? family_trace(src->fam, tk->source[i], &tr[i], NULL)
                 : synth_trace(src->synth, tk->source[i], &tr[i]);
    if (rv != 0) {
        trace_array_free(tr, tk->ntables);
        return rv;
    }
    *out = tr;
    return 0;
}

/*
 * The measured cost of every plan that exists (ok[a]): `rounds` rounds, each
 * timing every plan once in algorithm order; per device the median compute
 * over the rounds, then the plan cost of those (alpha-beta comm) in meas[a].
 * even[a]: the plan's cost had its measured compute been spread evenly
 * over its devices (the same comm): what no placement of the same work
 * can beat, comm aside.  A plan a round could not measure keeps meas[a]
 * NaN and even[a] INFINITY (its message printed): no zero times in its
 * medians.
 */
static void measure_rounds(const struct kern_backend *be, struct plan *plans,
                           const bool *ok, const struct task *tk,
                           const struct trace *traces,
                           const struct topology *topo,
                           const struct kern_timing_opts *to, int rounds,
                           double *meas, double *even)
{
    int32_t n = topo->ndevices, r;
    double *ms = calloc((size_t)NROW * (size_t)rounds * (size_t)n, sizeof(*ms));
    double *comp = calloc((size_t)n, sizeof(*comp));
    double *fwd = calloc((size_t)n, sizeof(*fwd));
    double *bwd = calloc((size_t)n, sizeof(*bwd));
    double *cfwd = calloc((size_t)n, sizeof(*cfwd));
    double *cbwd = calloc((size_t)n, sizeof(*cbwd));
    int32_t *dims = calloc((size_t)n, sizeof(*dims));
    bool failed[NROW] = {false};
    struct sd_diag d;
    int a, i;

    if (!ms || !comp || !fwd || !bwd || !cfwd || !cbwd || !dims)
        goto out_free;
    for (i = 0; i < rounds; i++)
        for (a = 0; a < NROW; a++) {
            if (!ok[a] || failed[a])
                continue;
            if (prof_eval_plan(be, &plans[a], tk->tables, tk->ntables, traces,
                               topo, OPTIMIZER_SGD, to, 1, NULL, &d) != 0) {
                fprintf(stderr, "bench_quality: %s: %s\n", row_name(a), d.msg);
                failed[a] = true;
                continue;
            }
            for (r = 0; r < n; r++)
                ms[((size_t)a * rounds + i) * n + r] =
                    plans[a].devices[r].compute_ms;
        }
    for (a = 0; a < NROW; a++) {
        double sum = 0;

        if (!ok[a] || failed[a])
            continue;
        for (r = 0; r < n; r++) {
            double v[64];
            int m = rounds < 64 ? rounds : 64, x, y;

            for (x = 0; x < m; x++)
                v[x] = ms[((size_t)a * rounds + x) * n + r];
            for (x = 1; x < m; x++) /* insertion sort: m is tiny */
                for (y = x; y > 0 && v[y] < v[y - 1]; y--) {
                    double t = v[y];

                    v[y] = v[y - 1];
                    v[y - 1] = t;
                }
            comp[r] = v[m / 2];
            dims[r] = plans[a].devices[r].dim_sum;
            sum += comp[r];
        }
        /* Collectives are modelled, as the all-to-all is. */
        if (plan_collectives(&plans[a], tk->tables, topo, cfwd, cbwd) != 0)
            goto out_free;
        meas[a] = cost_plan_ms(topo, comp, dims, cfwd, cbwd, fwd, bwd);
        for (r = 0; r < n; r++)
            comp[r] = sum / n;
        even[a] = cost_plan_ms(topo, comp, dims, cfwd, cbwd, fwd, bwd);
    }
out_free:
    free(ms);
    free(comp);
    free(cfwd);
    free(cbwd);
    free(fwd);
    free(bwd);
    free(dims);
}

static int run_set(const struct cost_net *net,
                   const struct net_ensemble *file_ens,
                   const struct policy_net *pn, const struct kern_backend *be,
                   const struct table *pool, size_t npool,
                   const struct pool_source *src, const char *label,
                   int32_t ndevices, size_t ntasks,
                   const struct kern_timing_opts *to, int rounds)
{
    struct task_params tp;
    struct task *tasks;
    struct topology topo;
    struct net_cost_model ncm, ncm_b;
    struct net_ensemble_cost_model ecm;
    const char *qs = getenv("SHARDD_BENCH_QUANTILE");
    const struct net_ensemble *ens = NULL;
    struct acc acc[NROW];
    struct sd_diag d;
    size_t k;
    int a, rv;

    task_params_default(&tp);
    tp.count = ntasks;
    tp.seed = (uint64_t)ndevices;
    tp.max_bytes = (uint64_t)(4 * ndevices - 1) << 30; /* "4 * N - 1" GB */
    rv = task_generate(&tp, pool, npool, &tasks, &d);
    if (rv != 0) {
        fprintf(stderr, "bench_quality: %s\n", d.msg);
        return 1;
    }
    topology_default(&topo, ndevices, 4ull << 30);
    topo.batch_size = net->batch_size;
    net_cost_model_init(&ncm, net);
    if (bench_net_b != NULL)
        net_cost_model_init(&ncm_b, bench_net_b);
    if (qs != NULL) {
        ens = file_ens != NULL ? file_ens : net_ensemble_compiled(net);
        if (ens == NULL || !(atof(qs) >= 0) || !(atof(qs) <= 1)) {
            fprintf(stderr, "bench_quality: SHARDD_BENCH_QUANTILE needs a "
                            "quantile in [0, 1] and an ensemble: an "
                            "ensemble file as the model, or a model with "
                            "one compiled in (the embedded one, the "
                            "H200's)\n");
            return 1;
        }
        net_ensemble_cost_model_init(&ecm, ens, atof(qs));
    }
    memset(acc, 0, sizeof(acc));

    for (k = 0; k < ntasks; k++) {
        const struct task *tk = &tasks[k];
        double pred[NROW], meas[NROW], bound[NROW], search[NROW];
        double even[NROW], best_greedy = INFINITY, floor_ms = INFINITY;
        bool ok[NROW];
        struct plan plans[NROW];

        /* Plan with every algorithm first; then measure the plans in
         * interleaved rounds, so that a slow spell of a shared machine hits
         * every algorithm alike, and keep each device's median over the
         * rounds. */
        for (a = 0; a < NROW; a++) {
            const struct cost_model *cm = &ncm.cm;
            struct net_memo *emem[NET_ENSEMBLE_MAX] = {NULL};
            struct plan_options o;
            int32_t i;

            ok[a] = false;
            if (!row_on(a))
                continue;
            plan_options_default(&o);
            o.alg = a == ROW_B ? PLAN_ALG_NEUROSHARD : (enum plan_alg)a;
            o.net = a == ROW_B ? bench_net_b : net;
            o.policy = pn;
            o.seed = k;
            if (ens != NULL && a == PLAN_ALG_NEUROSHARD) {
                o.ensemble = ens;
                o.quantile = ecm.q;
                cm = &ecm.cm;
                /* Each member searched and scored through its own memo,
                 * as shardctl plan --quantile does. */
                for (i = 0; i < ens->k; i++)
                    emem[i] = net_memo_for_tables(ens->m[i], tk->ntables);
                o.ensemble_memos = emem;
                ecm.memos = emem;
            }
            if (a == ROW_B)
                cm = &ncm_b.cm;
            ok[a] = plan_run(tk->tables, tk->ntables, &topo, &o, cm, &plans[a],
                             &d) == 0;
            ecm.memos = NULL;
            for (i = 0; i < NET_ENSEMBLE_MAX; i++)
                net_memo_free(emem[i]);
            if (!ok[a])
                continue;
            pred[a] = plans[a].cost_ms;
            bound[a] = plans[a].explain.lower_bound_ms;
            search[a] = plans[a].stats.search_ms;
            meas[a] = NAN;
            even[a] = INFINITY;
        }
        if (be) {
            struct trace *traces;

            if (task_traces(src, tk, &traces) != 0) {
                fprintf(stderr, "bench_quality: cannot make the lookups\n");
                exit(1);
            }
            measure_rounds(be, plans, ok, tk, traces, &topo, to, rounds, meas,
                           even);
            trace_array_free(traces, tk->ntables);
        }
        for (a = 0; a < NROW; a++) {
            if (!ok[a])
                continue;
            plan_destroy(&plans[a]);
            if (be && isnan(meas[a])) {
                ok[a] = false; /* not measured: counted as not planned */
                continue;
            }
            if (even[a] < floor_ms)
                floor_ms = even[a];
            if (is_greedy(a)) {
                double c = be ? meas[a] : pred[a];

                if (c < best_greedy)
                    best_greedy = c;
            }
        }
        for (a = 0; a < NROW; a++) {
            double c;

            if (!ok[a])
                continue;
            c = be ? meas[a] : pred[a];
            acc[a].ok++;
            acc[a].pred += pred[a];
            acc[a].meas += be ? meas[a] : 0;
            if (best_greedy < INFINITY) {
                acc[a].vs_greedy += c / best_greedy;
                acc[a].n_greedy++;
            }
            if (ok[PLAN_ALG_TORCHREC_GREEDY]) {
                acc[a].vs_trec += c / (be ? meas[PLAN_ALG_TORCHREC_GREEDY]
                                          : pred[PLAN_ALG_TORCHREC_GREEDY]);
                acc[a].n_trec++;
            }
            if (ok[PLAN_ALG_NEUROSHARD]) {
                acc[a].vs_ns += c / (be ? meas[PLAN_ALG_NEUROSHARD]
                                        : pred[PLAN_ALG_NEUROSHARD]);
                acc[a].n_ns++;
            }
            acc[a].vs_bound += pred[a] / bound[a];
            if (be && floor_ms < INFINITY) {
                acc[a].vs_floor += c / floor_ms;
                acc[a].work += even[a] / floor_ms;
                acc[a].n_floor++;
            }
            acc[a].search_ms += search[a];
        }
        fprintf(stderr, "bench_quality: %d devices: task %zu/%zu done\n",
                (int)ndevices, k + 1, ntasks);
    }

    printf("\n%s%s%d devices of 4 GiB, %zu tasks (seed %d), costs in ms at "
           "batch %lld, %s\n",
           label, label[0] ? ": " : "", (int)ndevices, ntasks, (int)ndevices,
           (long long)net->batch_size,
           be ? "measured on the device (median of rounds)" : "predicted only");
    printf("%-20s %6s %10s %10s %11s %11s %11s %9s %8s %6s %10s\n", "algorithm",
           "valid", "predicted", "measured", "/best_greedy", "/torchrec",
           "/neuroshard", "/bound", "/even", "work", "search ms");
    for (a = 0; a < NROW; a++) {
        const struct acc *c = &acc[a];
        int n = c->ok ? c->ok : 1;

        if (!row_on(a))
            continue;
        printf("%-20s %3d/%-2zu %10.3f %10.3f %11.3f %11.3f %11.3f %9.3f "
               "%8.3f %6.3f %10.2f\n",
               row_name(a), c->ok, ntasks, c->pred / n, be ? c->meas / n : NAN,
               c->n_greedy ? c->vs_greedy / c->n_greedy : NAN,
               c->n_trec ? c->vs_trec / c->n_trec : NAN,
               c->n_ns ? c->vs_ns / c->n_ns : NAN, c->vs_bound / n,
               c->n_floor ? c->vs_floor / c->n_floor : NAN,
               c->n_floor ? c->work / c->n_floor : NAN, c->search_ms / n);
    }
    task_array_free(tasks, ntasks);
    return 0;
}

/* Whether SHARDD_BENCH_DEVICES asks for task sets on n devices: "4", "8"
 * or "4,8" (also unset, the default: both).  -1 when it is none of those. */
static int devices_wanted(int32_t n)
{
    const char *v = getenv("SHARDD_BENCH_DEVICES");

    if (v == NULL || strcmp(v, "4,8") == 0 || strcmp(v, "8,4") == 0)
        return 1;
    if (strcmp(v, "4") == 0 || strcmp(v, "8") == 0)
        return atoi(v) == n;
    return -1;
}

/* run_set() at each device count asked for (devices_wanted()). */
static int run_counts(const struct cost_net *net,
                      const struct net_ensemble *file_ens,
                      const struct policy_net *pn,
                      const struct kern_backend *be, const struct table *pool,
                      size_t npool, const struct pool_source *src,
                      const char *label, size_t ntasks,
                      const struct kern_timing_opts *to, int rounds)
{
    static const int32_t counts[] = {4, 8};
    size_t i;
    int rv = 0;

    for (i = 0; i < sizeof(counts) / sizeof(counts[0]) && rv == 0; i++)
        if (devices_wanted(counts[i]) > 0)
            rv = run_set(net, file_ens, pn, be, pool, npool, src, label,
                         counts[i], ntasks, to, rounds);
    return rv;
}

/*
 * The family mode (SHARDD_BENCH_FAMILIES): for each family named in `list`
 * ("all": every family and mix), 256 tables of it at the model's batch,
 * then its task sets at 4 and 8 devices (devices_wanted()).
 */
static int run_families(const char *list, const struct cost_net *net,
                        const struct net_ensemble *file_ens,
                        const struct policy_net *pn,
                        const struct kern_backend *be, size_t ntasks,
                        const struct kern_timing_opts *to, int rounds,
                        unsigned threads)
{
    bool want[FAMILY_MIX + 1];
    struct family_params fp;
    struct pool_source src = {NULL, &fp};
    struct table *pool;
    struct sd_diag d;
    int f, rv = 0;

    if (strcmp(list, "all") == 0) {
        for (f = 0; f <= FAMILY_MIX; f++)
            want[f] = true;
    } else if (family_parse_list(list, want, &d) != 0) {
        fprintf(stderr, "bench_quality: SHARDD_BENCH_FAMILIES: %s\n", d.msg);
        return 2;
    }
    for (f = 0; f <= FAMILY_MIX && rv == 0; f++) {
        if (!want[f])
            continue;
        family_params_default(&fp);
        fp.family = f;
        fp.count = 256;
        fp.seed = 0;
        fp.batch_size = net->batch_size;
        if (family_tables(&fp, threads, &pool) != 0) {
            fprintf(stderr, "bench_quality: cannot make the %s tables\n",
                    family_name(f));
            return 1;
        }
        rv = run_counts(net, file_ens, pn, be, pool, fp.count, &src,
                        family_name(f), ntasks, to, rounds);
        free(pool);
    }
    return rv;
}

/* The production-like task set (bench_production.c). */
int bench_production(int argc, char **argv);

int main(int argc, char **argv)
{
    size_t ntasks;
    int repeats = argc > 2 ? atoi(argv[2]) : 5;
    int rounds = argc > 4 ? atoi(argv[4]) : 3;
    const char *bname = argc > 3 ? argv[3] : "auto";
    const struct kern_backend *be = NULL;
    struct kern_timing_opts to;
    struct synth_params sp;
    struct pool_source src = {&sp, NULL};
    struct table *pool;
    struct sd_diag d = {{0}};
    struct net_ensemble *owned = NULL;   /* the model file's: k >= 1 */
    struct net_ensemble *owned_b = NULL; /* SHARDD_BENCH_MODEL_B's */
    struct policy_net *owned_pn = NULL;
    const struct cost_net *net;
    const struct policy_net *pn;
    const struct net_ensemble *fens; /* the model file's, if an ensemble */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int rv = 1;

    if (argc > 1 && strcmp(argv[1], "production") == 0)
        return bench_production(argc, argv);
    ntasks = argc > 1 ? (size_t)atoi(argv[1]) : 5;
    if (argc > 5)
        net = net_ensemble_read_file(argv[5], &owned, &d) == 0 ? owned->m[0]
                                                               : NULL;
    else
        net = net_embedded(&d);
    if (!net) {
        fprintf(stderr, "bench_quality: %s\n", d.msg);
        return 1;
    }
    fens = owned != NULL && owned->k > 1 ? owned : NULL;
    if (getenv("SHARDD_BENCH_MODEL_B") != NULL) {
        if (net_ensemble_read_file(getenv("SHARDD_BENCH_MODEL_B"), &owned_b,
                                   &d) != 0) {
            fprintf(stderr, "bench_quality: SHARDD_BENCH_MODEL_B: %s\n", d.msg);
            goto out_model;
        }
        bench_net_b = owned_b->m[0];
        if (bench_net_b->batch_size != net->batch_size) {
            fprintf(stderr,
                    "bench_quality: SHARDD_BENCH_MODEL_B is of batch %lld, "
                    "the model of %lld: give one of the same batch\n",
                    (long long)bench_net_b->batch_size,
                    (long long)net->batch_size);
            rv = 2;
            goto out_model;
        }
    }
    /* dreamshard's policy, trained against this model: the file's, else
     * the one compiled in for it; without one it plans nothing (0 valid). */
    if (argc > 6) {
        pn = policy_read_file(argv[6], &owned_pn, &d) == 0 ? owned_pn : NULL;
        if (pn && policy_check_model(pn, net, &d) != 0)
            pn = NULL;
    } else {
        d.msg[0] = '\0';
        pn = policy_compiled(net, &d);
        if (!pn && d.msg[0] == '\0')
            snprintf(d.msg, sizeof(d.msg),
                     "no policy compiled in for this model (give one "
                     "trained against it: shardctl train-policy)");
    }
    if (!pn)
        fprintf(stderr, "bench_quality: %s: dreamshard will plan nothing\n",
                d.msg);
    if (devices_wanted(4) < 0) {
        fprintf(stderr,
                "bench_quality: SHARDD_BENCH_DEVICES is \"%s\": give 4, 8 "
                "or 4,8\n",
                getenv("SHARDD_BENCH_DEVICES"));
        rv = 2;
        goto out_model;
    }
    if (ntasks < 1 || repeats < 1 || rounds < 1 || rounds > 64) {
        fprintf(stderr, "usage: bench_quality [tasks] [repeats] [backend] "
                        "[rounds] [model file] [policy file]\n");
        rv = 2;
        goto out_model;
    }
    if (strcmp(bname, "none") != 0) {
        be = kern_backend_get(bname, &d);
        if (!be) {
            fprintf(stderr, "bench_quality: %s\n", d.msg);
            goto out_model;
        }
    }
    kern_timing_opts_default(&to);
    to.warmup = 2;
    to.repeats = repeats;

    synth_params_default(&sp);
    sp.count = 856;
    sp.seed = 0;
    sp.batch_size = net->batch_size;
    if (synth_tables(&sp, ncpu > 0 ? (unsigned)ncpu : 1, &pool) != 0) {
        fprintf(stderr, "bench_quality: cannot make the tables\n");
        goto out_model;
    }
    printf("bench_quality: model %s (%s); backend %s\n", net->profile,
           argc > 5 ? argv[5] : "embedded", be ? be->name : "none");
    if (bench_net_b != NULL)
        printf("bench_quality: model B %s (%s): the row neuroshard (B)\n",
               bench_net_b->profile, getenv("SHARDD_BENCH_MODEL_B"));
    if (getenv("SHARDD_BENCH_FAMILIES") != NULL) {
        rv = run_families(getenv("SHARDD_BENCH_FAMILIES"), net, fens, pn, be,
                          ntasks, &to, rounds, ncpu > 0 ? (unsigned)ncpu : 1);
    } else {
        rv = run_counts(net, fens, pn, be, pool, sp.count, &src, "", ntasks,
                        &to, rounds);
    }
    free(pool);
out_model:
    free(owned_pn);
    net_ensemble_free(owned_b);
    net_ensemble_free(owned);
    return rv;
}
