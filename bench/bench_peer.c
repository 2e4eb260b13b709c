/*
 * Plan quality under NeuroShard's own released models (issue 21): the
 * benchmark tasks of bench_quality's 4-device set (neuroshard.md 2.4: 10
 * seeded tasks of 10-59 tables drawn from the 856 synthetic tables, 4
 * devices of 4 GiB, fp32 weights) planned by every algorithm, each plan
 * costed by the imported set: compute by the released compute model, the
 * backward and forward all-to-all by the released comm models with the
 * wait for the slowest device (the original simulator's plan cost,
 * neuroshard.md 6.1).  It prints the mean plan cost, its ratio to the
 * best greedy baseline of each task, and the search time.
 *
 * Variants of neuroshard show where its quality comes from: held to whole
 * tables and column slices (the only schemes the released models and the
 * original's simulator know: row blocks and replicas add collectives that
 * shardd prices with its alpha-beta rings, outside the learned exchange),
 * searching with the alpha-beta comm model instead of the learned one
 * (judged under the learned one), without the final local search, a run
 * close to the original search (whole tables and column slices only,
 * top-10 candidates, no budget, no local search), one searched with
 * shardd's embedded cpu model and the alpha-beta comm (what shardd planned
 * before it could hold these models), and one followed by the bench's own
 * pass with halving moves.  torchrec_greedy held to table- and column-wise
 * is the baseline's comparable row.
 *
 * usage: bench_peer [tasks] [model file] [threads]
 *        (defaults: 10 tasks, the reference set neuroshard/V100/65536,
 *         threads 0 = one per CPU; the model file must hold comm models
 *         for 4 devices)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "planner.h"

#define NDEV 4

enum variant {
    V_DEFAULT = 0,
    V_TWCW,       /* table- and column-wise only, as the original's moves */
    V_ALPHA_BETA, /* searched with alpha-beta comm, judged learned */
    V_NO_LOCAL,
    V_ORIGINAL,      /* close to the original search */
    V_CPU,           /* searched with the embedded cpu model and alpha-beta */
    V_SPLIT,         /* the default, then the bench's pass with halving moves */
    V_TORCHREC_TWCW, /* torchrec_greedy held to table- and column-wise */
    V_COUNT
};

static const char *const variant_name[V_COUNT] = {
    "neuroshard",
    "neuroshard, TW/CW only",
    "neuroshard, alpha-beta search",
    "neuroshard, no local search",
    "neuroshard, original-like (TW/CW)",
    "neuroshard, embedded cpu model",
    "neuroshard + halving pass",
    "torchrec_greedy, TW/CW only",
};

/* The baselines (every algorithm before neuroshard), then neuroshard's
 * variants.  dreamshard is left out: its policies are bound to the compute
 * model they were trained against, and none is trained for this set. */
#define NROWS (PLAN_ALG_NEUROSHARD + V_COUNT)

struct acc {
    double cost, vs_greedy, search_ms, worst;
    int ok, n_greedy;
};

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}


/* ------------------------------------------------------------------------ */
/* A prototype pass with halving moves (bench only: what neuroshard could   */
/* add beyond its own all-pairs local search)                                */

/*
 * Every move of a shard to any other device with room, every swap of two
 * shards of different devices and (splits) every halving of a shard onto
 * another device, scored by the full plan cost (compute of the two devices
 * re-scored through their head pre-activations, the learned exchange of
 * all), the best step while it gains 0.01 %.
 */
#define WIDE_SPLITS 64 /* new column splits at most */

struct wide {
    const struct cost_net *net;
    const struct topology *t;
    const struct task *tk;
    bool splits;          /* try halving a shard onto another device */
    size_t n, cap;        /* shards, room for them */
    struct shard *sh;     /* [cap] the plan's shards, as they change */
    bool *fixed;          /* [cap] row blocks and replicas: never moved */
    double *cfwd, *cbwd;  /* [ndev] their collectives */
    uint32_t *table;      /* [cap] */
    int32_t *off;         /* [cap] column offset */
    int32_t *dev;         /* [cap] */
    int32_t *cols;        /* [cap] */
    uint64_t *bytes;      /* [cap] */
    float *proj;          /* [cap][NET_H2] */
    float *half;          /* [cap][NET_H2]: at half the width, if splittable */
    float *z;             /* [ndev][NET_H2] */
    int32_t *count, *dim; /* [ndev] */
    uint64_t *mem;        /* [ndev] */
    double *comp, *fwd, *bwd;
};

static double wide_comp(const struct wide *w, int32_t r, const float *add,
                        const float *sub, int count)
{
    float z[NET_H2];
    int o;

    if (count == 0)
        return 0;
    for (o = 0; o < NET_H2; o++)
        z[o] = w->z[(size_t)r * NET_H2 + o] + (add ? add[o] : 0) -
               (sub ? sub[o] : 0);
    return net_activate(w->net, net_head_raw(w->net, z)) *
           ((double)w->t->batch_size / (double)w->net->batch_size);
}

/* The plan cost with shard a moved to y and, if b >= 0, shard b to a's
 * device. */
static double wide_try(struct wide *w, size_t a, int32_t y, long b)
{
    int32_t x = w->dev[a];
    const float *pa = w->proj + a * NET_H2;
    const float *pb = b >= 0 ? w->proj + (size_t)b * NET_H2 : NULL;
    double cx = w->comp[x], cy = w->comp[y], c;
    int32_t dx = w->dim[x], dy = w->dim[y];
    int32_t moved = w->cols[a] - (b >= 0 ? w->cols[b] : 0);

    w->comp[x] = wide_comp(w, x, pb, pa, w->count[x] - 1 + (b >= 0));
    w->comp[y] = wide_comp(w, y, pa, pb, w->count[y] + 1 - (b >= 0));
    w->dim[x] -= moved;
    w->dim[y] += moved;
    c = cost_plan_ms(w->t, w->comp, w->dim, w->cfwd, w->cbwd, w->fwd, w->bwd);
    w->comp[x] = cx;
    w->comp[y] = cy;
    w->dim[x] = dx;
    w->dim[y] = dy;
    return c;
}

/* Whether shard a may halve (the half a multiple of 4). */
static bool wide_splittable(const struct wide *w, size_t a)
{
    return !w->fixed[a] && w->splits && w->n < w->cap &&
           (w->cols[a] / 2) % 4 == 0 && w->cols[a] >= 8;
}

/* The plan cost with shard a halved, its second half on y. */
static double wide_try_split(struct wide *w, size_t a, int32_t y)
{
    int32_t x = w->dev[a], h = w->cols[a] / 2, o;
    const float *pa = w->proj + a * NET_H2, *ph = w->half + a * NET_H2;
    double cx = w->comp[x], cy = w->comp[y], c;
    float delta[NET_H2];

    for (o = 0; o < NET_H2; o++)
        delta[o] = ph[o] - pa[o];
    w->comp[x] = wide_comp(w, x, delta, NULL, w->count[x]);
    w->comp[y] = wide_comp(w, y, ph, NULL, w->count[y] + 1);
    w->dim[x] -= h;
    w->dim[y] += h;
    c = cost_plan_ms(w->t, w->comp, w->dim, w->cfwd, w->cbwd, w->fwd, w->bwd);
    w->comp[x] = cx;
    w->comp[y] = cy;
    w->dim[x] += h;
    w->dim[y] -= h;
    return c;
}

/* Projections of shard k at its width and half of it. */
static void wide_project(struct wide *w, size_t k)
{
    const struct table *tb = &w->tk->tables[w->table[k]];
    struct table blk;

    if (w->fixed[k]) { /* the cost model's view of a row block, a replica */
        shard_table(tb, &w->sh[k], w->t->ndevices, &blk);
        net_projected(w->net, NULL, &blk, w->cols[k], w->proj + k * NET_H2);
        w->bytes[k] = shard_block_bytes(tb, &w->sh[k], OPTIMIZER_SGD);
        return;
    }
    net_projected(w->net, NULL, tb, w->cols[k], w->proj + k * NET_H2);
    if (w->cols[k] >= 8 && (w->cols[k] / 2) % 4 == 0)
        net_projected(w->net, NULL, tb, w->cols[k] / 2, w->half + k * NET_H2);
    w->bytes[k] = shard_bytes(tb, w->cols[k], OPTIMIZER_SGD);
}

static void wide_apply(struct wide *w, size_t a, int32_t y);

/* Shard a halved: it keeps the first half, a new shard the second on y. */
static void wide_split(struct wide *w, size_t a, int32_t y)
{
    int32_t x = w->dev[a], h = w->cols[a] / 2, o;
    size_t k = w->n++;

    for (o = 0; o < NET_H2; o++)
        w->z[(size_t)x * NET_H2 + o] -= w->proj[a * NET_H2 + o];
    w->mem[x] -= w->bytes[a];
    w->dim[x] -= w->cols[a];
    w->count[x]--;
    w->table[k] = w->table[a];
    w->sh[a].scheme = SCHEME_CW; /* a table in slices is column-wise */
    w->sh[k] = w->sh[a];
    w->fixed[k] = false;
    w->off[k] = w->off[a] + h;
    w->cols[k] = w->cols[a] = h;
    w->dev[k] = x;
    wide_project(w, a);
    wide_project(w, k);
    for (o = 0; o < NET_H2; o++)
        w->z[(size_t)x * NET_H2 + o] +=
            w->proj[a * NET_H2 + o] + w->proj[k * NET_H2 + o];
    w->mem[x] += w->bytes[a] + w->bytes[k];
    w->dim[x] += 2 * h;
    w->count[x] += 2;
    wide_apply(w, k, y);
}

static void wide_apply(struct wide *w, size_t a, int32_t y)
{
    int32_t x = w->dev[a];
    int o;

    for (o = 0; o < NET_H2; o++) {
        w->z[(size_t)x * NET_H2 + o] -= w->proj[a * NET_H2 + o];
        w->z[(size_t)y * NET_H2 + o] += w->proj[a * NET_H2 + o];
    }
    w->count[x]--;
    w->count[y]++;
    w->dim[x] -= w->cols[a];
    w->dim[y] += w->cols[a];
    w->mem[x] -= w->bytes[a];
    w->mem[y] += w->bytes[a];
    w->dev[a] = y;
    w->comp[x] = wide_comp(w, x, NULL, NULL, w->count[x]);
    w->comp[y] = wide_comp(w, y, NULL, NULL, w->count[y]);
}

static void wide_search(struct wide *w)
{
    int32_t nd = w->t->ndevices, y;
    int iter;

    for (iter = 0; iter < 1000; iter++) {
        double best = cost_plan_ms(w->t, w->comp, w->dim, w->cfwd, w->cbwd,
                                   w->fwd, w->bwd) *
                      (1 - 1e-4);
        size_t a, ba = SIZE_MAX;
        long b, bb = -1;
        int32_t by = -1;
        bool split = false;

        for (a = 0; a < w->n; a++) {
            int32_t x = w->dev[a];

            if (w->fixed[a])
                continue;
            for (y = 0; y < nd; y++) {
                double c;

                if (y == x || w->mem[y] + w->bytes[a] > topology_mem(w->t, y))
                    continue;
                c = wide_try(w, a, y, -1);
                if (c < best) {
                    best = c;
                    ba = a;
                    by = y;
                    bb = -1;
                    split = false;
                }
                /* the halves: memory checked by halves' bytes (half) */
                if (!wide_splittable(w, a) ||
                    w->mem[y] + w->bytes[a] / 2 > topology_mem(w->t, y))
                    continue;
                c = wide_try_split(w, a, y);
                if (c < best) {
                    best = c;
                    ba = a;
                    by = y;
                    bb = -1;
                    split = true;
                }
            }
            for (b = (long)a + 1; b < (long)w->n; b++) {
                double c;

                y = w->dev[b];
                if (y == x || w->fixed[b] ||
                    w->mem[y] - w->bytes[b] + w->bytes[a] >
                        topology_mem(w->t, y) ||
                    w->mem[x] - w->bytes[a] + w->bytes[b] >
                        topology_mem(w->t, x))
                    continue;
                c = wide_try(w, a, y, b);
                if (c < best) {
                    best = c;
                    ba = a;
                    by = y;
                    bb = b;
                    split = false;
                }
            }
        }
        if (ba == SIZE_MAX)
            break;
        if (split) {
            wide_split(w, ba, by);
            continue;
        }
        if (bb >= 0)
            wide_apply(w, (size_t)bb, w->dev[ba]);
        wide_apply(w, ba, by);
    }
}

/* p's shards placed by wide_search(); p re-evaluated. */
static int wide_improve(struct plan *p, const struct task *tk,
                        const struct cost_net *net, const struct topology *t,
                        const struct cost_model *cm, bool splits)
{
    struct wide w;
    struct sd_diag d;
    size_t k, n = p->nshards, nd = (size_t)t->ndevices, cap;
    int32_t r;
    int rv = -1;

    memset(&w, 0, sizeof(w));
    w.net = net;
    w.t = t;
    w.tk = tk;
    w.splits = splits;
    w.n = n;
    w.cap = cap = n + WIDE_SPLITS;
    w.sh = calloc(cap, sizeof(*w.sh));
    w.fixed = calloc(cap, sizeof(*w.fixed));
    w.cfwd = calloc(nd, sizeof(*w.cfwd));
    w.cbwd = calloc(nd, sizeof(*w.cbwd));
    w.table = calloc(cap, sizeof(*w.table));
    w.off = calloc(cap, sizeof(*w.off));
    w.dev = calloc(cap, sizeof(*w.dev));
    w.cols = calloc(cap, sizeof(*w.cols));
    w.bytes = calloc(cap, sizeof(*w.bytes));
    w.proj = calloc(cap * NET_H2, sizeof(*w.proj));
    w.half = calloc(cap * NET_H2, sizeof(*w.half));
    w.z = calloc(nd * NET_H2, sizeof(*w.z));
    w.count = calloc(nd, sizeof(*w.count));
    w.dim = calloc(nd, sizeof(*w.dim));
    w.mem = calloc(nd, sizeof(*w.mem));
    w.comp = calloc(nd, sizeof(*w.comp));
    w.fwd = calloc(nd, sizeof(*w.fwd));
    w.bwd = calloc(nd, sizeof(*w.bwd));
    if (!w.sh || !w.fixed || !w.cfwd || !w.cbwd || !w.table || !w.off ||
        !w.dev || !w.cols || !w.bytes || !w.proj || !w.half || !w.z ||
        !w.count || !w.dim || !w.mem || !w.comp || !w.fwd || !w.bwd ||
        plan_collectives(p, tk->tables, t, w.cfwd, w.cbwd) != 0)
        goto out;
    for (r = 0; r < t->ndevices; r++)
        net_head_init(net, w.z + (size_t)r * NET_H2);
    for (k = 0; k < n; k++) {
        const struct shard *s = &p->shards[k];
        int o;

        w.sh[k] = *s;
        w.fixed[k] = !(s->scheme == SCHEME_TW || s->scheme == SCHEME_CW);
        w.table[k] = s->table;
        w.off[k] = s->col_offset;
        w.dev[k] = s->device;
        w.cols[k] = s->col_width;
        wide_project(&w, k);
        for (o = 0; o < NET_H2; o++)
            w.z[(size_t)s->device * NET_H2 + o] += w.proj[k * NET_H2 + o];
        w.count[s->device]++;
        w.dim[s->device] += w.fixed[k] ? 0 : s->col_width;
        w.mem[s->device] += w.bytes[k];
    }
    for (r = 0; r < t->ndevices; r++)
        w.comp[r] = wide_comp(&w, r, NULL, NULL, w.count[r]);
    wide_search(&w);
    p->nshards = 0;
    for (k = 0; k < w.n; k++) {
        struct shard s = w.sh[k];

        s.device = w.dev[k];
        s.col_offset = w.off[k];
        s.col_width = w.cols[k];
        if (plan_add_shard(p, &s) != 0)
            goto out;
    }
    /* schemes marked again (a split table is column-wise), memory checked */
    if (plan_validate(p, tk->tables, tk->ntables, t, OPTIMIZER_SGD, &d) != 0) {
        fprintf(stderr, "bench_peer: all-pairs: %s\n", d.msg);
        goto out;
    }
    rv = plan_evaluate(p, tk->tables, tk->ntables, t, OPTIMIZER_SGD, cm);
out:
    free(w.sh);
    free(w.fixed);
    free(w.cfwd);
    free(w.cbwd);
    free(w.table);
    free(w.off);
    free(w.half);
    free(w.dev);
    free(w.cols);
    free(w.bytes);
    free(w.proj);
    free(w.z);
    free(w.count);
    free(w.dim);
    free(w.mem);
    free(w.comp);
    free(w.fwd);
    free(w.bwd);
    return rv;
}

/* Plans a task with row `row` (a baseline, or a variant of neuroshard);
 * *cost the plan's cost under the learned set.  false when it failed. */
static bool plan_row(int row, const struct task *tk, const struct cost_net *net,
                     const struct topology *learned, int32_t threads,
                     double *cost, double *search_ms)
{
    struct net_cost_model ncm, search_cm;
    struct table_constraint *tw_cw = NULL;
    struct plan_options o;
    size_t k;
    struct topology search = *learned;
    struct plan p;
    struct sd_diag d;
    double t0;
    int rv;

    net_cost_model_init(&ncm, net);
    plan_options_default(&o);
    o.net = net;
    o.threads = threads;
    o.seed = 0;
    o.alg =
        row < PLAN_ALG_NEUROSHARD ? (enum plan_alg)row : PLAN_ALG_NEUROSHARD;
    if (row == PLAN_ALG_NEUROSHARD + V_TORCHREC_TWCW)
        o.alg = PLAN_ALG_TORCHREC_GREEDY;
    if (row == PLAN_ALG_NEUROSHARD + V_ALPHA_BETA)
        search.comm = NULL;
    if (row == PLAN_ALG_NEUROSHARD + V_NO_LOCAL)
        o.local_search = false;
    if (row == PLAN_ALG_NEUROSHARD + V_ORIGINAL ||
        row == PLAN_ALG_NEUROSHARD + V_TWCW ||
        row == PLAN_ALG_NEUROSHARD + V_TORCHREC_TWCW) {
        /* the original's moves: whole tables and column slices only */
        tw_cw = calloc(tk->ntables, sizeof(*tw_cw));
        for (k = 0; tw_cw != NULL && k < tk->ntables; k++)
            tw_cw[k] = (struct table_constraint){
                .schemes = (1u << SCHEME_TW) | (1u << SCHEME_CW), .host = -1};
        o.constraints = tw_cw;
    }
    if (row == PLAN_ALG_NEUROSHARD + V_ORIGINAL) {
        o.local_search = false;
        o.candidates = 10;
        o.beam_evaluations = 0;
    }
    search_cm = ncm;
    if (row == PLAN_ALG_NEUROSHARD + V_CPU) {
        o.net = net_embedded(&d);
        if (o.net == NULL)
            return false;
        net_cost_model_init(&search_cm, o.net);
        search.comm = NULL;
    }
    search_cm.cm.ctx = &search_cm;
    t0 = now_ms();
    rv = plan_run(tk->tables, tk->ntables, &search, &o, &search_cm.cm, &p, &d);
    free(tw_cw);
    if (rv == 0 && row == PLAN_ALG_NEUROSHARD + V_SPLIT &&
        wide_improve(&p, tk, net, learned, &ncm.cm, true) != 0)
        rv = -1;
    *search_ms = now_ms() - t0;
    if (rv != 0)
        return false;
    /* Judged under the learned set whatever it searched with. */
    rv = plan_evaluate(&p, tk->tables, tk->ntables, learned, OPTIMIZER_SGD,
                       &ncm.cm);
    *cost = p.cost_ms;
    plan_destroy(&p);
    return rv == 0;
}

static const char *row_name(int row)
{
    return row < PLAN_ALG_NEUROSHARD ? plan_alg_name((enum plan_alg)row)
                                     : variant_name[row - PLAN_ALG_NEUROSHARD];
}

static int run(const struct cost_net *net, const struct table *pool,
               size_t npool, size_t ntasks, int32_t threads)
{
    struct task_params tp;
    struct task *tasks;
    struct topology topo;
    struct net_comm_model ncomm;
    struct acc acc[NROWS];
    struct sd_diag d;
    size_t k;
    int row;

    task_params_default(&tp);
    tp.count = ntasks;
    tp.seed = NDEV; /* bench_quality's 4-device set */
    tp.max_bytes = (uint64_t)(4 * NDEV - 1) << 30;
    if (task_generate(&tp, pool, npool, &tasks, &d) != 0) {
        fprintf(stderr, "bench_peer: %s\n", d.msg);
        return 1;
    }
    topology_default(&topo, NDEV, 4ull << 30);
    topo.batch_size = net->batch_size;
    if (!net_comm_model_init(&ncomm, net, &topo)) {
        fprintf(stderr,
                "bench_peer: model %s has no comm models for %d "
                "devices\n",
                net->profile, NDEV);
        task_array_free(tasks, ntasks);
        return 1;
    }
    topo.comm = &ncomm.cm;
    memset(acc, 0, sizeof(acc));
    printf("%-5s %-8s", "task", "tables");
    for (row = 0; row < NROWS; row++)
        printf(" %9.9s", row_name(row));
    printf("\n");
    for (k = 0; k < ntasks; k++) {
        double cost[NROWS], ms[NROWS], best = INFINITY;
        bool ok[NROWS];

        for (row = 0; row < NROWS; row++) {
            ok[row] = plan_row(row, &tasks[k], net, &topo, threads, &cost[row],
                               &ms[row]);
            if (ok[row] && row >= PLAN_ALG_DIM_GREEDY &&
                row <= PLAN_ALG_SIZE_LOOKUP_GREEDY && cost[row] < best)
                best = cost[row];
        }
        printf("%-5zu %-8zu", k, tasks[k].ntables);
        for (row = 0; row < NROWS; row++) {
            struct acc *a = &acc[row];

            if (!ok[row]) {
                printf(" %9s", "-");
                continue;
            }
            printf(" %9.3f", cost[row]);
            a->ok++;
            a->cost += cost[row];
            a->search_ms += ms[row];
            if (best < INFINITY) {
                a->vs_greedy += cost[row] / best;
                a->worst = fmax(a->worst, cost[row] / best);
                a->n_greedy++;
            }
        }
        printf("\n");
    }
    printf("\n%d devices of 4 GiB, %zu tasks (seed %d), plan cost in ms "
           "under %s (compute + learned comm)\n",
           NDEV, ntasks, NDEV, net->profile);
    printf("%-32s %6s %10s %12s %10s %11s\n", "algorithm", "valid", "mean ms",
           "/best_greedy", "worst", "search ms");
    for (row = 0; row < NROWS; row++) {
        const struct acc *a = &acc[row];
        int n = a->ok ? a->ok : 1;

        printf("%-32s %3d/%-2zu %10.3f %12.4f %10.4f %11.2f\n", row_name(row),
               a->ok, ntasks, a->cost / n,
               a->n_greedy ? a->vs_greedy / a->n_greedy : NAN, a->worst,
               a->search_ms / n);
    }
    task_array_free(tasks, ntasks);
    return 0;
}

int main(int argc, char **argv)
{
    size_t ntasks = argc > 1 ? (size_t)atoi(argv[1]) : 10;
    int32_t threads = argc > 3 ? (int32_t)atoi(argv[3]) : 0;
    struct synth_params sp;
    struct table *pool;
    struct sd_diag d;
    struct cost_net *owned = NULL;
    const struct cost_net *net;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int rv = 1;

    if (argc > 2 && strcmp(argv[2], "-") != 0)
        net = net_read_file(argv[2], &owned, &d) == 0 ? owned : NULL;
    else
        net = net_reference(&d);
    if (!net) {
        fprintf(stderr, "bench_peer: %s\n", d.msg);
        return 1;
    }
    if (ntasks < 1) {
        fprintf(stderr, "usage: bench_peer [tasks] [model file|-] "
                        "[threads]\n");
        free(owned);
        return 2;
    }
    synth_params_default(&sp);
    sp.count = 856;
    sp.seed = 0;
    sp.batch_size = net->batch_size;
    if (synth_tables(&sp, ncpu > 0 ? (unsigned)ncpu : 1, &pool) != 0) {
        fprintf(stderr, "bench_peer: cannot make the tables\n");
        free(owned);
        return 1;
    }
    printf("bench_peer: model set %s (%s), %ld CPUs\n", net->profile,
           argc > 2 ? argv[2] : "the reference profile, compiled in", ncpu);
    rv = run(net, pool, sp.count, ntasks, threads);
    free(pool);
    free(owned);
    return rv;
}
