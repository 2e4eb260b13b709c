/*
 * shardctl's offline commands (client.h): the planning library in this
 * process, no daemon needed.
 *   shardctl gen-tables --count N --seed S [--family NAME|mix] [--out F]
 *   shardctl gen-tasks  --count N --seed S --tables F [--out F]
 *   shardctl plan --offline --tables F --devices N --mem-gb G [--alg NAME]
 *                 [--model F] [--json | --torchrec]
 * Measuring on this machine's devices (profile, train, score, eval) is
 * measure.c's.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"

/* The tables of --family NAME|mix (families.c), or without it synth.c's
 * DLRM tables under their old names. */
static int make_tables(const struct ctl_opts *o, unsigned threads,
                       struct table **tables)
{
    struct family_params fp;
    struct synth_params sp;
    struct sd_diag d;

    if (o->family == NULL) {
        synth_params_default(&sp);
        sp.count = (size_t)o->count;
        sp.seed = (uint64_t)o->seed;
        if (o->batch != 0)
            sp.batch_size = o->batch;
        return synth_tables(&sp, threads, tables);
    }
    family_params_default(&fp);
    if (family_parse(o->family, &fp.family, &d) != 0)
        return ctl_fail(CTL_EXIT_USAGE, "gen-tables: --family: %s", d.msg);
    fp.count = (size_t)o->count;
    fp.seed = (uint64_t)o->seed;
    if (o->batch != 0)
        fp.batch_size = o->batch;
    return family_tables(&fp, threads, tables);
}

int offline_gen_tables(const struct ctl_opts *o)
{
    struct table *tables;
    char *text;
    long ncpu;
    int rv;

    if (o->count == 0)
        return ctl_fail(CTL_EXIT_USAGE, "gen-tables: --count is required");
    ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    rv = make_tables(
        o, o->threads ? (unsigned)o->threads : (unsigned)(ncpu > 0 ? ncpu : 1),
        &tables);
    if (rv == CTL_EXIT_USAGE)
        return rv;
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "gen-tables: %s", sd_strerror(rv));
    text = json_tables(tables, (size_t)o->count);
    free(tables);
    if (text == NULL)
        return ctl_fail(1, "gen-tables: out of memory");
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

    if (o->count == 0 || o->tables == NULL)
        return ctl_fail(CTL_EXIT_USAGE, "gen-tasks: --count and --tables are "
                                        "required");
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

int offline_plan(const struct ctl_opts *o)
{
    struct plan_options po;
    struct table *tables = NULL;
    struct topology topo;
    struct sd_diag d;
    struct plan p;
    const struct cost_net *net;
    struct ctl_model cm;
    struct net_cost_model ncm;
    struct net_ensemble_cost_model ecm;
    const struct cost_model *scorer;
    struct plan_spread spread = {0};
    uint64_t *caps = NULL;
    int32_t *pins = NULL;
    size_t n;
    char *text = NULL;
    int rv;

    if (o->tables == NULL || o->devices == 0 || o->mem_gb <= 0)
        return ctl_fail(CTL_EXIT_USAGE,
                        "plan: --tables, --devices and --mem-gb are "
                        "required");
    if (o->json && o->torchrec)
        return ctl_fail(CTL_EXIT_USAGE,
                        "plan: --json and --torchrec exclude each "
                        "other");
    plan_options_default(&po);
    po.alg = PLAN_ALG_NEUROSHARD;
    if (o->alg != NULL && plan_alg_parse(o->alg, &po.alg, &d) != 0)
        return ctl_fail(CTL_EXIT_USAGE, "plan: --alg: %s", d.msg);
    if (o->optimizer != NULL && optimizer_parse(o->optimizer, &po.optimizer))
        return ctl_fail(CTL_EXIT_USAGE,
                        "plan: --optimizer \"%s\" is unknown (sgd, "
                        "adagrad, rowwise_adagrad, adam)",
                        o->optimizer);
    po.seed = (uint64_t)o->seed;
    po.time_budget_ms = o->time_budget_ms;
    po.column_splits = !o->no_splits;
    po.local_search = !o->no_local_search;
    po.threads = (int32_t)o->threads;

    rv = ctl_load_model(o, "plan", &cm);
    if (rv != 0)
        return rv;
    net = cm.net;
    /* --profile: the plan must be for that hardware; a model of another
     * profile would answer for the wrong machine. */
    if (o->profile != NULL && net_check_profile(net, o->profile, &d) != 0) {
        rv = ctl_fail(CTL_EXIT_USAGE, "plan: --profile: %s", d.msg);
        goto out_model;
    }
    po.net = net;
    net_cost_model_init(&ncm, net);
    scorer = &ncm.cm;
    /* --quantile: plans for that quantile of the ensemble's costs. */
    if (o->quantile >= 0) {
        if (cm.ens == NULL) {
            rv = ctl_fail(CTL_EXIT_USAGE,
                          "plan: --quantile needs an ensemble (--model an "
                          "ensemble file from train --ensemble; the embedded "
                          "one is missing)");
            goto out_model;
        }
        po.ensemble = cm.ens;
        po.quantile = o->quantile;
        net_ensemble_cost_model_init(&ecm, cm.ens, o->quantile);
        scorer = &ecm.cm;
    }

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

    rv = json_read_tables(o->tables, (size_t)o->task, &tables, &n, &d);
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "plan: %s", d.msg);
        goto out_model;
    }
    rv = ctl_pins(o, "plan", tables, n, topo.ndevices, &pins);
    if (rv != 0)
        goto out_tables;
    po.pins = pins;
    rv = plan_run(tables, n, &topo, &po, scorer, &p, &d);
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "plan: %s", d.msg);
        goto out_tables;
    }
    /* Every prediction's spread, where the model has an ensemble. */
    if (cm.ens != NULL &&
        net_ensemble_plan_spread(cm.ens, &p, tables, n, &topo, po.optimizer,
                                 &spread) != 0) {
        rv = ctl_fail(1, "plan: out of memory");
        goto out_plan;
    }
    if (topo.batch_size != net->batch_size) {
        size_t len = strlen(p.cost_model);

        snprintf(p.cost_model + len, sizeof(p.cost_model) - len,
                 " (scaled from batch %lld)", (long long)net->batch_size);
    }
    rv = ctl_write_svg(o, "plan", &p, &topo);
    if (rv != 0)
        goto out_plan;
    if (o->json)
        text = json_plan(&p, tables);
    else if (o->torchrec)
        text = json_plan_torchrec(&p, tables, &topo, o->torchrec_module);

    if (o->json || o->torchrec) {
        rv = text ? ctl_write_output(o->out, text)
                  : ctl_fail(1, "plan: out of memory");
    } else if (o->out != NULL) {
        rv = ctl_fail(CTL_EXIT_USAGE, "plan: --out needs --json or --torchrec");
    } else {
        format_plan_spread(stdout, &p, tables, n, &topo,
                           cm.ens != NULL ? &spread : NULL);
        rv = fflush(stdout) == 0 ? 0 : ctl_fail(1, "cannot write to stdout");
    }
    free(text);
out_plan:
    plan_spread_free(&spread);
    plan_destroy(&p);
out_tables:
    free(pins);
    free(tables);
out_model:
    free(caps);
    ctl_model_free(&cm);
    return rv;
}
