/*
 * shardctl's offline commands (client.h): the planning library in this
 * process, no daemon needed.
 *   shardctl gen-tables --count N [--seed S] [--family NAME|mix]
 *                       [--traces F] [--out F]
 *   shardctl gen-tasks  --count N [--seed S] --tables F [--out F]
 *   shardctl features   --trace FILE|DIR [--batch-size B] [--dim D]
 *   shardctl plan --offline --tables F --devices N --mem-gb G [--alg NAME]
 *                 [--model F] [--policy F] [--json | --torchrec]
 * Measuring on this machine's devices (profile, train, score, eval) is
 * measure.c's.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client.h"

/* gen-tables --traces: the traces the tables were made from, made again
 * (each depends on the seed and its index only) and written to path. */
static int write_traces(const struct synth_params *sp, const char *path)
{
    struct trace *traces = calloc(sp->count, sizeof(*traces));
    struct sd_diag d;
    size_t i;
    int rv = 0;

    if (traces == NULL)
        return ctl_fail(1, "gen-tables: out of memory");
    for (i = 0; i < sp->count && rv == 0; i++)
        rv = synth_trace(sp, i, &traces[i]);
    if (rv != 0)
        rv = ctl_fail(ctl_exit_for(rv), "gen-tables: %s", sd_strerror(rv));
    else if ((rv = trace_file_write(path, traces, sp->count, &d)) != 0)
        rv = ctl_fail(rv == SD_ENOMEM ? 1 : CTL_EXIT_USAGE,
                      "gen-tables: --traces: %s", d.msg);
    trace_array_free(traces, sp->count);
    return rv;
}

/* --family NAME|mix's tables (families.c) into *tables. */
static int family_gen(const struct ctl_opts *o, unsigned threads,
                      struct table **tables)
{
    struct family_params fp;
    struct sd_diag d;
    int rv;

    family_params_default(&fp);
    if (family_parse(o->family, &fp.family, &d) != 0)
        return ctl_fail(CTL_EXIT_USAGE, "gen-tables: --family: %s", d.msg);
    fp.count = (size_t)o->count;
    fp.seed = (uint64_t)o->seed;
    if (o->batch != 0)
        fp.batch_size = o->batch;
    rv = family_tables(&fp, threads, tables);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "gen-tables: %s", sd_strerror(rv));
    return 0;
}

int offline_gen_tables(const struct ctl_opts *o)
{
    struct synth_params sp;
    struct table *tables;
    unsigned threads;
    char *text;
    long ncpu;
    int rv;

    if (o->count == 0)
        return ctl_fail(CTL_EXIT_USAGE, "gen-tables: --count is required");
    /* The families make their tables without traces to write. */
    if (o->family != NULL && o->traces != NULL)
        return ctl_fail(CTL_EXIT_USAGE, "gen-tables: --traces is for the "
                                        "DLRM tables (no --family)");
    synth_params_default(&sp);
    sp.count = (size_t)o->count;
    sp.seed = (uint64_t)o->seed;
    if (o->batch != 0)
        sp.batch_size = o->batch;
    ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    threads =
        o->threads ? (unsigned)o->threads : (unsigned)(ncpu > 0 ? ncpu : 1);
    if (o->family != NULL) {
        rv = family_gen(o, threads, &tables);
        if (rv != 0)
            return rv;
    } else if ((rv = synth_tables(&sp, threads, &tables)) != 0) {
        return ctl_fail(ctl_exit_for(rv), "gen-tables: %s", sd_strerror(rv));
    }
    text = json_tables(tables, sp.count);
    free(tables);
    if (text == NULL)
        return ctl_fail(1, "gen-tables: out of memory");
    rv = o->traces != NULL ? write_traces(&sp, o->traces) : 0;
    if (rv == 0)
        rv = ctl_write_output(o->out, text);
    free(text);
    return rv;
}

int offline_gen_tasks(const struct ctl_opts *o)
{
    struct task_params tp;
    struct table *pool;
    struct task *tasks;
    struct sd_diag d;
    size_t npool;
    char *text;
    int rv;

    rv = ctl_require("gen-tasks", "--count", o->count != 0, "--tables",
                     o->tables != NULL, NULL);
    if (rv != 0)
        return rv;
    rv = json_read_tables(o->tables, 0, &pool, &npool, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "gen-tasks: %s", d.msg);
    task_params_default(&tp);
    tp.count = (size_t)o->count;
    tp.seed = (uint64_t)o->seed;
    if (o->min_tables)
        tp.min_tables = (size_t)o->min_tables;
    if (o->max_tables)
        tp.max_tables = (size_t)o->max_tables;
    if (o->max_gb > 0)
        tp.max_bytes = (uint64_t)(o->max_gb * (double)(1ull << 30));
    if (tp.min_tables > tp.max_tables) {
        free(pool);
        if (o->min_tables && o->max_tables)
            return ctl_fail(CTL_EXIT_USAGE,
                            "gen-tasks: --min-tables %zu is above "
                            "--max-tables %zu",
                            tp.min_tables, tp.max_tables);
        return o->min_tables
                   ? ctl_fail(CTL_EXIT_USAGE,
                              "gen-tasks: --min-tables %zu is above the "
                              "default --max-tables %zu: give --max-tables "
                              "too",
                              tp.min_tables, tp.max_tables)
                   : ctl_fail(CTL_EXIT_USAGE,
                              "gen-tasks: --max-tables %zu is below the "
                              "default --min-tables %zu: give --min-tables "
                              "too",
                              tp.max_tables, tp.min_tables);
    }
    rv = task_generate(&tp, pool, npool, &tasks, &d);
    if (rv != 0) {
        free(pool);
        return ctl_fail(ctl_exit_for(rv), "gen-tasks: %s", d.msg);
    }
    text = json_tasks(tasks, tp.count);
    task_array_free(tasks, tp.count);
    free(pool);
    if (text == NULL)
        return ctl_fail(1, "gen-tasks: out of memory");
    rv = ctl_write_output(o->out, text);
    free(text);
    return rv;
}

/* The plan in the format asked for, with the input's notes and, in the
 * human table, the ensemble's spread sp (NULL: none). */
static int write_plan(const struct ctl_opts *o, const struct plan *p,
                      const struct tables_input *in,
                      const struct topology *topo, const struct plan_spread *sp)
{
    char *text = NULL;
    int rv;

    if (o->json)
        text = json_plan_noted(p, in->tables, &in->notes);
    else if (o->torchrec)
        text = json_plan_torchrec_noted(p, in->tables, topo, o->torchrec_module,
                                        &in->notes);
    if (o->json || o->torchrec) {
        rv = text ? ctl_write_output(o->out, text)
                  : ctl_fail(1, "plan: out of memory");
    } else {
        struct ctl_text out;

        rv = ctl_text_begin(&out, o->out);
        if (rv == 0) {
            format_plan_spread(out.f, p, in->tables, in->n, topo, sp);
            format_notes(out.f, &in->notes);
            rv = ctl_text_end(&out, 0);
        }
    }
    free(text);
    return rv;
}

/*
 * dreamshard's policy into po: --policy, else the one compiled in for
 * po->net (the embedded model's, the H200's: with another --model,
 * plan_run() says to train one).  *owned is what the caller frees.
 */
static int pick_policy(const struct ctl_opts *o, struct plan_options *po,
                       struct policy_net **owned)
{
    if (po->alg != PLAN_ALG_DREAMSHARD)
        return o->policy == NULL
                   ? 0
                   : ctl_fail(CTL_EXIT_USAGE, "plan: --policy is for --alg "
                                              "dreamshard");
    return ctl_load_policy(o, "plan", po->net, &po->policy, owned);
}

/* The search's options from the command line; 0 or an exit code. */
static int plan_opts(const struct ctl_opts *o, struct plan_options *po)
{
    struct sd_diag d;

    plan_options_default(po);
    po->alg = PLAN_ALG_NEUROSHARD;
    if (o->alg != NULL && plan_alg_parse(o->alg, &po->alg, &d) != 0)
        return ctl_fail(CTL_EXIT_USAGE, "plan: --alg: %s", d.msg);
    if (o->optimizer != NULL && optimizer_parse(o->optimizer, &po->optimizer))
        return ctl_fail(CTL_EXIT_USAGE,
                        "plan: --optimizer \"%s\" is unknown (sgd, "
                        "adagrad, rowwise_adagrad, adam)",
                        o->optimizer);
    po->seed = (uint64_t)o->seed;
    po->time_budget_ms = o->time_budget_ms;
    po->column_splits = !o->no_splits;
    po->local_search = !o->no_local_search;
    po->weigh_torchrec = !o->no_torchrec;
    po->threads = (int32_t)o->threads;
    return 0;
}

/* --quantile: plans for that quantile of the ensemble's costs, scored by
 * *ecm; without it *scorer stays.  0 or an exit code. */
static int pick_quantile(const struct ctl_opts *o, const struct ctl_model *cm,
                         struct plan_options *po,
                         struct net_ensemble_cost_model *ecm,
                         const struct cost_model **scorer)
{
    if (o->quantile < 0)
        return 0;
    if (cm->ens == NULL)
        return ctl_fail(CTL_EXIT_USAGE,
                        "plan: --quantile needs an ensemble: --model an "
                        "ensemble file from train --ensemble, or a "
                        "compiled-in model that has one (the embedded cpu "
                        "model, --profile \"%s\")",
                        NET_H200_PROFILE);
    po->ensemble = cm->ens;
    po->quantile = o->quantile;
    net_ensemble_cost_model_init(ecm, cm->ens, o->quantile);
    *scorer = &ecm->cm;
    return 0;
}

int offline_plan(const struct ctl_opts *o)
{
    struct plan_options po;
    struct tables_input in = {0};
    struct table *tables;
    struct topology topo;
    struct sd_diag d;
    struct plan p;
    const struct cost_net *net;
    struct ctl_model cm;
    struct policy_net *owned_pol = NULL;
    struct net_cost_model ncm;
    struct net_comm_model ncomm;
    struct net_ensemble_cost_model ecm;
    const struct cost_model *scorer;
    struct plan_spread spread = {0};
    uint64_t *caps = NULL;
    int32_t *pins = NULL;
    struct table_constraint *cons = NULL;
    struct net_memo *memo = NULL, *emem[NET_ENSEMBLE_MAX] = {NULL};
    size_t n;
    int32_t i;
    int rv;

    rv = ctl_require("plan", "--tables", o->tables != NULL, "--devices",
                     o->devices != 0, "--mem-gb", o->mem_gb > 0, NULL);
    if (rv != 0)
        return rv;
    if (o->json && o->torchrec)
        return ctl_fail(CTL_EXIT_USAGE,
                        "plan: --json and --torchrec exclude each "
                        "other");
    rv = plan_opts(o, &po);
    if (rv != 0)
        return rv;
    rv = ctl_load_model_for_profile(o, "plan", &cm);
    if (rv != 0)
        return rv;
    net = cm.net;
    po.net = net;
    net_cost_model_init(&ncm, net);
    scorer = &ncm.cm;
    rv = pick_quantile(o, &cm, &po, &ecm, &scorer);
    if (rv == 0)
        rv = pick_policy(o, &po, &owned_pol);
    if (rv != 0)
        goto out_model;

    topology_default(&topo, (int32_t)o->devices, 0);
    rv = ctl_capacities(o, "plan", &topo, &caps);
    if (rv != 0)
        goto out_model;
    /* Costs are the model's, at its profile's batch unless asked. */
    topo.batch_size = o->batch ? o->batch : net->batch_size;
    if (o->per_host)
        topo.devices_per_host = (int32_t)o->per_host;
    if (topology_validate(&topo, &d) != 0) {
        rv = ctl_fail(CTL_EXIT_USAGE, "plan: %s", d.msg);
        goto out_model;
    }
    ctl_attach_comm(net, &topo, &ncomm);

    rv = ctl_read_tables(o, "plan", &in);
    if (rv != 0)
        goto out_model;
    tables = in.tables;
    n = in.n;
    rv = tables_input_resolve(&in, topo.batch_size, &d);
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "plan: %s", d.msg);
        goto out_tables;
    }
    if (in.whole_tables)
        po.column_splits = false;
    rv = ctl_pins(o, "plan", tables, n, topo.ndevices, &pins);
    if (rv != 0)
        goto out_tables;
    po.pins = pins;
    if (tables_input_constraints(&in, &cons) != 0) {
        rv = ctl_fail(CTL_EXIT_USAGE, "plan: out of memory");
        goto out_tables;
    }
    po.constraints = cons;
    /* One memo for the search, the evaluation and the explanation (NULL
     * when memory is short: each then computes its own latents). */
    memo = net_memo_for_tables(net, n);
    po.memo = memo;
    ncm.memo = memo;
    /* With --quantile, one for each member of the ensemble (a memo answers
     * for its own net only): its search, every plan's score under the
     * quantile, then the spread; they took 40 % of an 856-table plan. */
    for (i = 0; po.ensemble != NULL && i < po.ensemble->k; i++)
        emem[i] = net_memo_for_tables(po.ensemble->m[i], n);
    if (po.ensemble != NULL) {
        po.ensemble_memos = emem;
        ecm.memos = emem;
    }
    rv = plan_run(tables, n, &topo, &po, scorer, &p, &d);
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "plan: %s", d.msg);
        goto out_tables;
    }
    /* Every prediction's spread, where the model has an ensemble (its
     * member 0 is the model: a plan scored by it has member 0's costs). */
    if (cm.ens != NULL &&
        net_ensemble_plan_spread(cm.ens, emem, &p, scorer == &ncm.cm, tables, n,
                                 &topo, po.optimizer, NULL, &spread) != 0) {
        rv = ctl_fail(1, "plan: out of memory");
        goto out_plan;
    }
    if (topo.batch_size != net->batch_size) {
        size_t len = strlen(p.cost_model);

        snprintf(p.cost_model + len, sizeof(p.cost_model) - len,
                 " (scaled from batch %lld)", (long long)net->batch_size);
    }
    rv = ctl_write_svg(o, "plan", &p, &topo);
    if (rv == 0)
        rv = write_plan(o, &p, &in, &topo, cm.ens != NULL ? &spread : NULL);
out_plan:
    plan_spread_free(&spread);
    plan_destroy(&p);
out_tables:
    net_memo_free(memo);
    for (i = 0; i < NET_ENSEMBLE_MAX; i++)
        net_memo_free(emem[i]);
    free(pins);
    free(cons);
    tables_input_destroy(&in);
out_model:
    free(caps);
    free(owned_pol);
    ctl_model_free(&cm);
    return rv;
}

/* Where the evaluated plan does not fit: "memory: ..." after the report. */
static void print_fit(FILE *f, const struct plan *p, const struct topology *t)
{
    bool first = true;
    int32_t r;

    for (r = 0; r < p->ndevices; r++) {
        if (p->devices[r].mem_bytes <= topology_mem(t, r))
            continue;
        fprintf(f, "%s %d", first ? "memory: over capacity on device" : ",",
                (int)r);
        first = false;
    }
    fprintf(f, "%s\n", first ? "memory: every device fits" : "");
}

/* The topology of estimate --offline for ndev devices: capacities, batch
 * (the model's unless given) and hosts.  Returns 0 or an exit code. */
static int estimate_topology(const struct ctl_opts *o,
                             const struct cost_net *net, int32_t ndev,
                             struct topology *t, uint64_t **caps)
{
    struct sd_diag d;
    int rv;

    topology_default(t, ndev, 0);
    rv = ctl_capacities(o, "estimate", t, caps);
    if (rv != 0)
        return rv;
    t->batch_size = o->batch ? o->batch : net->batch_size;
    if (o->per_host)
        t->devices_per_host = (int32_t)o->per_host;
    if (topology_validate(t, &d) != 0)
        return ctl_fail(CTL_EXIT_USAGE, "estimate: %s", d.msg);
    return 0;
}

int offline_estimate(const struct ctl_opts *o)
{
    enum optimizer opt = OPTIMIZER_SGD;
    const struct cost_net *net;
    struct ctl_model cm;
    struct net_cost_model ncm;
    struct net_comm_model ncomm;
    struct topology topo, unbounded;
    struct table *tables = NULL;
    uint64_t *caps = NULL;
    struct sd_diag d;
    struct plan p;
    int32_t ndev = 0;
    char *text = NULL;
    size_t n, len;
    int rv;

    rv = ctl_require("estimate", "--tables", o->tables != NULL, "--plan",
                     o->plan != NULL, "--mem-gb", o->mem_gb > 0, NULL);
    if (rv != 0)
        return rv;
    if (o->optimizer != NULL && optimizer_parse(o->optimizer, &opt) != 0)
        return ctl_fail(CTL_EXIT_USAGE,
                        "estimate: --optimizer \"%s\" is unknown (sgd, "
                        "adagrad, rowwise_adagrad, adam)",
                        o->optimizer);
    rv = ctl_load_model_for_profile(o, "estimate", &cm);
    if (rv != 0)
        return rv;
    net = cm.net;
    rv = json_read_tables(o->tables, (size_t)o->task, &tables, &n, &d);
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "estimate: %s", d.msg);
        goto out_model;
    }
    rv = ctl_read_placement(o, "estimate", tables, n, &p, &ndev);
    if (rv != 0)
        goto out_tables;
    rv = estimate_topology(o, net, ndev, &topo, &caps);
    if (rv != 0)
        goto out_plan;
    ctl_attach_comm(net, &topo, &ncomm);
    /* An over-full device is costed, not refused (as online). */
    unbounded = topo;
    unbounded.mem_bytes = UINT64_MAX;
    unbounded.mem_by_device = NULL;
    net_cost_model_init(&ncm, net);
    if (plan_validate_as(&p, tables, n, &unbounded, opt, "placement", &d) !=
        0) {
        rv = ctl_fail(CTL_EXIT_USAGE, "estimate: %s", d.msg);
        goto out_plan;
    }
    if (plan_evaluate(&p, tables, n, &topo, opt, &ncm.cm) != 0 ||
        plan_explain(&p, tables, &topo, &ncm.cm) != 0) {
        rv = ctl_fail(1, "estimate: out of memory");
        goto out_plan;
    }
    p.algorithm = "estimate";
    if (topo.batch_size != net->batch_size) {
        len = strlen(p.cost_model);
        snprintf(p.cost_model + len, sizeof(p.cost_model) - len,
                 " (scaled from batch %lld)", (long long)net->batch_size);
    }
    rv = ctl_write_svg(o, "estimate", &p, &topo);
    if (rv != 0)
        goto out_plan;
    if (o->json) {
        text = json_plan(&p, tables);
        rv = text ? ctl_write_output(o->out, text)
                  : ctl_fail(1, "estimate: out of memory");
        free(text);
    } else {
        struct ctl_text out;

        rv = ctl_text_begin(&out, o->out);
        if (rv == 0) {
            format_plan_text(out.f, &p, tables, n, &topo);
            print_fit(out.f, &p, &topo);
            rv = ctl_text_end(&out, 0);
        }
    }
out_plan:
    plan_destroy(&p);
out_tables:
    free(tables);
out_model:
    free(caps);
    ctl_model_free(&cm);
    return rv;
}

/* The tables of a trace file: each trace's features. */
static int trace_file_tables(const char *path, struct table **out, size_t *n)
{
    struct trace *traces = NULL;
    struct table *tables;
    struct sd_diag d;
    size_t i;
    int rv;

    rv = trace_file_read(path, &traces, n, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "features: %s", d.msg);
    tables = calloc(*n ? *n : 1, sizeof(*tables));
    rv = tables == NULL ? SD_ENOMEM : 0;
    for (i = 0; i < *n && rv == 0; i++)
        rv = trace_to_table(&traces[i], &tables[i]);
    trace_array_free(traces, *n);
    if (rv != 0) {
        free(tables);
        return ctl_fail(ctl_exit_for(rv), "features: %s: %s", path,
                        sd_strerror(rv));
    }
    *out = tables;
    return 0;
}

int offline_features(const struct ctl_opts *o)
{
    struct input_notes notes = {0};
    struct table *tables = NULL;
    struct sd_diag d;
    struct stat st;
    size_t n = 0;
    char *text;
    int rv;

    if (o->trace == NULL)
        return ctl_fail(CTL_EXIT_USAGE, "features: --trace is required");
    if (stat(o->trace, &st) != 0)
        return ctl_fail(CTL_EXIT_USAGE, "features: --trace: %s: %s", o->trace,
                        strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        rv = dlrm_read_tables(o->trace, o->batch,
                              o->dim ? (int32_t)o->dim : CTL_DLRM_DIM, &tables,
                              &n, &notes, &d);
        if (rv != 0)
            rv = ctl_fail(ctl_exit_for(rv), "features: %s", d.msg);
    } else if (o->batch != 0 || o->dim != 0) {
        rv = ctl_fail(CTL_EXIT_USAGE,
                      "features: --batch-size and --dim are for the dlrm "
                      "layout (a folder); a trace file has both");
    } else {
        rv = trace_file_tables(o->trace, &tables, &n);
    }
    if (rv != 0) {
        input_notes_destroy(&notes);
        return rv;
    }
    rv = table_validate_all(tables, n, &d);
    text = rv == 0 ? json_tables_noted(tables, n, &notes) : NULL;
    if (rv != 0)
        rv = ctl_fail(ctl_exit_for(rv), "features: %s", d.msg);
    else if (text == NULL)
        rv = ctl_fail(1, "features: out of memory");
    else
        rv = ctl_write_output(o->out, text);
    free(text);
    free(tables);
    input_notes_destroy(&notes);
    return rv;
}
