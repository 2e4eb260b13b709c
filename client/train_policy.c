/*
 * shardctl train-policy (client.h): a placement policy for the dreamshard
 * algorithm, trained with REINFORCE on the estimated MDP of one compute
 * model (planner/models/policy_train.c), gated against size_lookup_greedy
 * on held-out tasks (search.h), and written as a policy file or stored as
 * a model version of kind policy:
 *   shardctl train-policy --db F [--profile P] [--activate]   the profile's
 *       active compute model (the embedded one for its own profile when
 *       none is active); the policy is stored bound to it
 *   shardctl train-policy [--model F] --out P                 no store
 * Tasks: DreamShard's protocol on the 856 synthetic benchmark tables made
 * at the model's batch (a seeded train / test split of the tables), or
 * --tasks FILE (every fifth task held out).  Ctrl-C stops training and
 * keeps nothing (exit 130).
 */
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "profiler.h"

#define TP_POOL  856
#define TP_TRAIN 200
#define TP_VAL   16
#define TP_GATE  40

static atomic_int
    stop_requested; /* lock-free: signal-safe, read by any thread */

static void on_signal(int sig)
{
    (void)sig;
    atomic_store(&stop_requested, 1);
}

static int on_validation(void *ctx, int32_t it, int32_t iterations,
                         double ratio)
{
    (void)ctx;
    fprintf(stderr,
            "train-policy: step %d/%d, validation: %.4f x the model-cost "
            "LPT's plan cost\n",
            (int)it, (int)iterations, ratio);
    return atomic_load(&stop_requested) != 0;
}

/* What the command trains for and on. */
struct tp_run {
    const struct cost_net *net;
    struct net_ensemble *owned; /* a stored model's: member 0 its model */
    struct ctl_model cm;        /* --model or the embedded one, without --db */
    int64_t base_id;            /* the model's store version; 0: embedded */
    struct store *st;           /* --db */
    struct store_profile prof;  /* --db */
    struct table *pool;         /* synthetic tables, or NULL */
    struct task *file_tasks;    /* --tasks */
    size_t nfile;
    struct task_split ts; /* synthetic task sets */
    struct policy_task *train, *val, *gate;
    size_t ntrain, nval, ngate;
};

static void run_free(struct tp_run *r)
{
    free(r->train);
    free(r->val);
    free(r->gate);
    task_split_free(&r->ts);
    task_array_free(r->file_tasks, r->nfile);
    free(r->pool);
    net_ensemble_free(r->owned);
    ctl_model_free(&r->cm);
    store_close(r->st);
}

/* The compute model: the profile's active one in the store, or --model /
 * the embedded one without a store. */
static int pick_model(const struct ctl_opts *o, struct tp_run *r)
{
    struct store_model *sm = NULL;
    struct sd_diag d;
    int rv;

    if (o->db == NULL) {
        rv = ctl_load_model(o, "train-policy", &r->cm);
        r->net = r->cm.net;
        return rv;
    }
    if (o->model != NULL)
        return ctl_fail(CTL_EXIT_USAGE,
                        "train-policy: --model is for training without "
                        "--db (a stored policy is bound to a stored model)");
    rv = store_open(o->db, STORE_OPEN_EXISTING, &r->st, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "train-policy: %s%s", d.msg,
                        rv == SD_ENOENT ? CTL_NO_STORE : "");
    rv = ctl_pick_profile(r->st, "train-policy", o->profile, &r->prof);
    if (rv != 0)
        return rv;
    rv = store_model_get_active(r->st, r->prof.id, STORE_KIND_COMPUTE, &sm, &d);
    if (rv == SD_ENOENT) {
        /* The embedded model answers for its own profile. */
        r->net = net_embedded(&d);
        if (r->net != NULL && strcmp(r->net->profile, r->prof.name) == 0)
            return 0;
        return ctl_fail(CTL_EXIT_USAGE,
                        "train-policy: profile %s has no active compute "
                        "model: train one first (shardctl train --activate)",
                        r->prof.name);
    }
    if (rv == 0)
        rv = net_ensemble_parse(sm->weights, sm->info.weights_bytes, &r->owned,
                                &d);
    if (rv == 0)
        r->base_id = sm->info.id;
    store_model_free(sm);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "train-policy: %s", d.msg);
    r->net = r->owned->m[0];
    return 0;
}

/* policy_task views of n tasks; NULL when out of memory. */
static struct policy_task *views(const struct task *t, size_t n)
{
    struct policy_task *v = calloc(n ? n : 1, sizeof(*v));
    size_t k;

    for (k = 0; v != NULL && k < n; k++) {
        v[k].tables = t[k].tables;
        v[k].ntables = t[k].ntables;
    }
    return v;
}

/* --tasks: every fifth task held out, the first TP_VAL others validate. */
static int file_tasks(const struct ctl_opts *o, struct tp_run *r)
{
    struct sd_diag d;
    size_t k;
    int rv;

    rv = json_read_tasks(o->tasks, &r->file_tasks, &r->nfile, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "train-policy: --tasks: %s", d.msg);
    if (r->nfile < 2)
        return ctl_fail(CTL_EXIT_USAGE,
                        "train-policy: --tasks: %zu tasks; at least 2 (one "
                        "held out) are needed",
                        r->nfile);
    r->train = calloc(r->nfile, sizeof(*r->train));
    r->gate = calloc(r->nfile, sizeof(*r->gate));
    if (r->train == NULL || r->gate == NULL)
        return ctl_fail(1, "train-policy: out of memory");
    for (k = 0; k < r->nfile; k++) {
        struct policy_task v = {r->file_tasks[k].tables,
                                r->file_tasks[k].ntables};

        if (k % 5 == 4 || (r->nfile < 5 && k == r->nfile - 1))
            r->gate[r->ngate++] = v;
        else
            r->train[r->ntrain++] = v;
    }
    r->nval = r->ntrain < TP_VAL ? r->ntrain : TP_VAL;
    r->val = calloc(r->nval ? r->nval : 1, sizeof(*r->val));
    if (r->val == NULL)
        return ctl_fail(1, "train-policy: out of memory");
    memcpy(r->val, r->train, r->nval * sizeof(*r->val));
    return 0;
}

/* DreamShard's task sets from the synthetic tables at the model's batch. */
static int synth_tasks(const struct ctl_opts *o, struct tp_run *r)
{
    struct synth_params sp;
    struct task_params tp;
    struct sd_diag d;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int rv;

    synth_params_default(&sp);
    sp.count = TP_POOL;
    sp.seed = 0;
    sp.batch_size = r->net->batch_size;
    rv = synth_tables(&sp, ncpu > 0 ? (unsigned)ncpu : 1, &r->pool);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "train-policy: making the tables: %s",
                        sd_strerror(rv));
    task_params_default(&tp);
    tp.seed = (uint64_t)o->seed;
    tp.max_bytes = (uint64_t)(4 * (o->devices ? o->devices : 4) - 1) << 30;
    rv = task_generate_split(&tp, TP_TRAIN, TP_VAL, TP_GATE, r->pool, sp.count,
                             &r->ts, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "train-policy: %s", d.msg);
    r->train = views(r->ts.train, r->ts.ntrain);
    r->val = views(r->ts.val, r->ts.nval);
    r->gate = views(r->ts.test, r->ts.ntest);
    if (r->train == NULL || r->val == NULL || r->gate == NULL)
        return ctl_fail(1, "train-policy: out of memory");
    r->ntrain = r->ts.ntrain;
    r->nval = r->ts.nval;
    r->ngate = r->ts.ntest;
    return 0;
}

/* Stores pn bound to the model, activating it when asked and it passed. */
static int store_it(const struct ctl_opts *o, struct tp_run *r,
                    const struct policy_net *pn,
                    const struct dreamshard_gate *g, int64_t *id)
{
    struct store_model sm;
    struct sd_diag d;
    void *img = NULL;
    size_t len;
    int rv;

    if (policy_serialize(pn, &img, &len) != 0)
        return ctl_fail(1, "train-policy: out of memory");
    memset(&sm, 0, sizeof(sm));
    sm.info.profile_id = r->prof.id;
    sm.info.kind = STORE_KIND_POLICY;
    sm.info.format_version = POLICY_FORMAT_VERSION;
    sm.info.base_model_id = r->base_id;
    sm.info.metrics.train_samples = (int64_t)r->ntrain;
    sm.info.metrics.val_samples = g->tasks;
    sm.info.metrics.gate_ratio = pn->metrics.gate_ratio;
    sm.info.weights_bytes = len;
    sm.weights = img;
    rv = store_model_put(r->st, &sm, id, &d);
    if (rv == 0 && o->activate && g->pass)
        rv = store_model_activate(r->st, *id, NULL, &d);
    free(img);
    return rv ? ctl_fail(ctl_exit_for(rv), "train-policy: %s", d.msg) : 0;
}

static void print_result(const struct ctl_opts *o, const struct tp_run *r,
                         const struct policy_net *pn,
                         const struct dreamshard_gate *g, int64_t id,
                         double secs)
{
    const struct policy_metrics *mx = &pn->metrics;
    char base[32];

    snprintf(base, sizeof(base), "%lld", (long long)r->base_id);
    if (id != 0)
        printf("policy %lld for profile %s, trained against model %s%s\n",
               (long long)id, pn->profile, r->base_id ? base : "embedded",
               o->activate && g->pass ? " (active)" : "");
    else
        printf("policy for profile %s, trained against compute model "
               "%08x\n",
               pn->profile, (unsigned)pn->model_crc);
    printf("tasks: %d train, %d validation, %d held out, on %d devices\n"
           "steps: %d (best %d), seed %llu, %.1f s\n"
           "validation: %.4f x the model-cost LPT's plan cost\n"
           "gate: held-out mean plan cost %.4f ms, size_lookup_greedy "
           "%.4f ms (%.4fx over %d tasks; %d only the greedy placed): %s\n",
           (int)mx->train_tasks, (int)mx->val_tasks, (int)g->tasks,
           (int)mx->train_devices, (int)mx->iterations, (int)mx->best_iteration,
           (unsigned long long)mx->seed, secs, mx->val_ratio, g->policy_ms,
           g->greedy_ms, mx->gate_ratio, (int)g->planned_both, (int)g->lost,
           g->pass ? "passed" : "FAILED");
}

/* Trains and gates; *out owned by the caller. */
static int train_gate(const struct ctl_opts *o, struct tp_run *r,
                      struct policy_net **out, struct dreamshard_gate *g)
{
    struct policy_train_params pp;
    struct topology topo;
    struct sd_diag d;
    int rv;

    policy_train_params_default(&pp);
    pp.seed = (uint64_t)o->seed;
    if (o->iterations)
        pp.iterations = (int32_t)o->iterations;
    if (o->devices)
        pp.ndevices = (int32_t)o->devices;
    if (o->mem_gb > 0)
        pp.mem_bytes = (uint64_t)(o->mem_gb * (double)(1ull << 30));
    pp.progress = on_validation;
    rv = policy_train(&pp, r->net, r->train, r->ntrain, r->val, r->nval, out,
                      &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "train-policy: %s", d.msg);
    if (atomic_load(&stop_requested))
        return 0;
    topology_default(&topo, pp.ndevices, pp.mem_bytes);
    topo.batch_size = r->net->batch_size;
    rv = dreamshard_gate(*out, r->net, r->gate, r->ngate, &topo, OPTIMIZER_SGD,
                         g, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "train-policy: gate: %s", d.msg);
    (*out)->metrics.gate_tasks = g->tasks;
    (*out)->metrics.gate_ratio =
        g->greedy_ms > 0 ? g->policy_ms / g->greedy_ms : 0;
    return 0;
}

int train_policy_run(const struct ctl_opts *o)
{
    struct tp_run r;
    struct policy_net *pn = NULL;
    struct dreamshard_gate g;
    struct sigaction sa;
    struct sd_diag d;
    struct timespec t0, t1;
    int64_t id = 0;
    int rv;

    memset(&r, 0, sizeof(r));
    memset(&g, 0, sizeof(g));
    if (o->db == NULL && o->out == NULL)
        return ctl_fail(CTL_EXIT_USAGE,
                        "train-policy: --db or --out is required (where "
                        "would the policy go?)");
    if (o->db == NULL && (o->activate || o->profile != NULL))
        return ctl_fail(CTL_EXIT_USAGE,
                        "train-policy: --activate and --profile need --db");
    rv = pick_model(o, &r);
    if (rv == 0)
        rv = o->tasks != NULL ? file_tasks(o, &r) : synth_tasks(o, &r);
    if (rv != 0)
        goto out;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    fprintf(stderr,
            "train-policy: model %s (%s), %zu training tasks, %zu to "
            "validate, %zu held out\n",
            r.net->profile, r.base_id ? "stored" : "embedded or file", r.ntrain,
            r.nval, r.ngate);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rv = train_gate(o, &r, &pn, &g);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rv != 0)
        goto out;
    if (atomic_load(&stop_requested)) {
        fprintf(stderr, "train-policy: interrupted; nothing kept\n");
        rv = 130;
        goto out;
    }
    if (r.st != NULL && (rv = store_it(o, &r, pn, &g, &id)) != 0)
        goto out;
    if (o->out != NULL && (rv = policy_write_file(o->out, pn, &d)) != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "train-policy: --out: %s", d.msg);
        goto out;
    }
    print_result(o, &r, pn, &g, id,
                 (double)(t1.tv_sec - t0.tv_sec) +
                     (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    rv = fflush(stdout) == 0 ? 0 : ctl_fail(1, "cannot write to stdout");
    /* Asked to activate one that failed its gate: said, and exit 1. */
    if (rv == 0 && o->activate && !g.pass)
        rv = ctl_fail(1, "train-policy: not activated: it does not beat "
                         "size_lookup_greedy on the held-out tasks");
out:
    free(pn);
    run_free(&r);
    return rv;
}
