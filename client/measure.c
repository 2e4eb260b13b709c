/*
 * shardctl's measuring commands (client.h), on this machine's devices and a
 * store:
 *   shardctl profile --db F --samples N   measured compute-cost samples
 *   shardctl eval --tables F --plan F      a plan measured on the devices,
 *                                          beside the cost model's
 *                                          prediction
 * (train and score are fit.c's).  Long runs stop cleanly on Ctrl-C or
 * SIGTERM (exit 130).
 */
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "profiler.h"
#include "shardd/log.h"


/* A progress bar on a terminal; a line per 10 % elsewhere (logs). */
static void show_progress(void *ctx, uint64_t done, uint64_t target,
                          uint64_t added, double elapsed_s)
{
    double rate = elapsed_s > 0 ? (double)added / elapsed_s : 0;
    double eta = rate > 0 ? (double)(target - done) / rate : 0;
    int width = 30, fill = target ? (int)(width * done / target) : width;
    static int last_decile = -1;

    if (isatty(STDERR_FILENO)) {
        fprintf(stderr, "\r[%.*s%*s] %llu/%llu samples  %.2f/s  eta %.0f s ",
                fill, "==============================", width - fill, "",
                (unsigned long long)done, (unsigned long long)target, rate,
                eta);
        if (done == target)
            fputc('\n', stderr);
    } else if ((int)(10 * done / (target ? target : 1)) != last_decile) {
        last_decile = (int)(10 * done / (target ? target : 1));
        fprintf(stderr, "profile: %llu/%llu samples, %.2f/s\n",
                (unsigned long long)done, (unsigned long long)target, rate);
    }
}

/* The quiet check dropped a sample: say so once in a while (a busy machine
 * drops many in a row). */
static void show_busy(void *ctx, double slowdown)
{
    static int64_t last;
    int64_t now = sd_now_ms();

    (void)ctx;
    if (now - last < 10000)
        return;
    last = now;
    fprintf(stderr,
            "%sprofile: the device is busy (the probe runs %.2fx its quiet "
            "time): measuring again when it is quiet\n",
            isatty(STDERR_FILENO) ? "\n" : "", slowdown);
}

/* The timing options shared by profile and eval. */
static void timing_opts(const struct ctl_opts *o, struct kern_timing_opts *to)
{
    kern_timing_opts_default(to);
    if (o->warmup >= 0)
        to->warmup = (int)o->warmup;
    if (o->repeats)
        to->repeats = (int)o->repeats;
    if (o->no_flush)
        to->flush = false;
}

const struct kern_backend *ctl_pick_backend(const char *name)
{
    struct sd_diag d;
    const struct kern_backend *be = kern_backend_get(name, &d);

    if (be == NULL)
        ctl_fail(CTL_EXIT_USAGE, "--backend: %s", d.msg);
    return be;
}

int measure_profile(const struct ctl_opts *o)
{
    struct prof_run_params pp;
    struct prof_run_result res;
    struct ctl_model cm = {0};
    struct store *st;
    struct sd_diag d;
    int rv;

    rv = ctl_require("profile", "--db", o->db != NULL, "--samples",
                     o->samples != 0, NULL);
    if (rv != 0)
        return rv;
    prof_run_params_default(&pp);
    if (o->family != NULL) {
        int fam;

        if (family_parse(o->family, &fam, &d) != 0)
            return ctl_fail(CTL_EXIT_USAGE, "profile: --family: %s", d.msg);
        prof_run_params_family(&pp, fam);
    }
    if (o->row_blocks >= 0)
        pp.p_rows = o->row_blocks;
    if (o->quiet_tolerance >= 0)
        pp.quiet_tolerance = o->quiet_tolerance;
    pp.be = ctl_pick_backend(o->backend);
    if (pp.be == NULL)
        return CTL_EXIT_USAGE;
    if (o->device >= pp.be->device_count())
        return ctl_fail(CTL_EXIT_USAGE,
                        "profile: --device %lld: the %s backend has "
                        "%d devices",
                        (long long)o->device, pp.be->name,
                        pp.be->device_count());
    pp.device = (int32_t)o->device;
    if (o->batch)
        pp.batch_size = o->batch;
    pp.seed = (uint64_t)o->seed;
    pp.target_samples = (uint64_t)o->samples;
    pp.max_seconds = o->seconds;
    if (o->max_gb > 0)
        pp.shape.max_bytes = (uint64_t)(o->max_gb * (double)(1ull << 30));
    if (o->max_tables > PROF_SHARD_TABLES)
        return ctl_fail(CTL_EXIT_USAGE,
                        "profile: --max-tables %lld: a shard has at most %d "
                        "tables",
                        (long long)o->max_tables, PROF_SHARD_TABLES);
    if (o->max_tables)
        pp.shape.max_tables = (size_t)o->max_tables;
    pp.plan_devices = (int32_t)o->plan_devices;
    if (o->alg != NULL && strcmp(o->alg, "greedy") != 0) {
        enum plan_alg a;

        if (plan_alg_parse(o->alg, &a, &d) != 0)
            return ctl_fail(CTL_EXIT_USAGE, "profile: --alg: %s", d.msg);
        if (o->plan_devices == 0 || a == PLAN_ALG_DREAMSHARD)
            return ctl_fail(CTL_EXIT_USAGE, "profile: --alg %s: %s", o->alg,
                            a == PLAN_ALG_DREAMSHARD
                                ? "dreamshard's plans are not profiled "
                                  "(its policy follows a model: profile "
                                  "neuroshard's)"
                                : "shapes shards like the devices of plans: "
                                  "give --plan-devices N");
        pp.plan_alg = (int)a;
    }
    if (pp.plan_alg == PLAN_ALG_NEUROSHARD) {
        rv = ctl_load_model(o, "profile", &cm);
        if (rv != 0)
            return rv;
        pp.plan_net = cm.net;
    } else if (o->model != NULL) {
        return ctl_fail(CTL_EXIT_USAGE,
                        "profile: --model plans the shards of --alg "
                        "neuroshard; give that too, or leave --model out");
    }
    timing_opts(o, &pp.timing);
    pp.stop = &ctl_stop_requested;
    pp.progress = show_progress;
    pp.busy = show_busy;

    rv = store_open(o->db, 0, &st, &d);
    if (rv != 0) {
        ctl_model_free(&cm);
        return ctl_fail(ctl_exit_for(rv), "profile: %s", d.msg);
    }
    ctl_catch_stop_signals();
    rv = prof_run(st, &pp, &res, &d);
    store_close(st);
    ctl_model_free(&cm);
    fprintf(stderr, "profile %s: %llu samples added, %llu in the store\n",
            res.profile, (unsigned long long)res.added,
            (unsigned long long)(res.existing + res.added));
    if (res.remeasured > 0)
        fprintf(stderr,
                "profile: %llu measurements dropped and made again while the "
                "device was busy (probe up to %.2fx its quiet time)\n",
                (unsigned long long)res.remeasured, res.max_slowdown);
    if (res.kept_busy > 0)
        fprintf(stderr,
                "profile: %llu samples kept after half an hour of retries "
                "(the device stayed slower)\n",
                (unsigned long long)res.kept_busy);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv),
                        "profile: %s (committed samples are kept)", d.msg);
    if (res.interrupted) {
        fprintf(stderr, "profile: stopped early; every committed sample is "
                        "kept, and the same command resumes\n");
        return atomic_load(&ctl_stop_requested) ? 130 : 0;
    }
    return 0;
}

/*
 * The model's prediction of the plan measured as p (a copy of its shards,
 * scored at the same topology) beside the measured figures: per device
 * compute and total, and the plan cost, with the error of each.
 */
static int eval_compare(FILE *out, const struct plan *p,
                        const struct table *tables, size_t n,
                        const struct topology *topo, enum optimizer opt,
                        const struct cost_net *net)
{
    struct net_cost_model ncm;
    struct plan pred;
    size_t k;
    int32_t r;
    int rv;

    rv = plan_init(&pred, p->ndevices);
    for (k = 0; rv == 0 && k < p->nshards; k++)
        rv = plan_add_shard(&pred, &p->shards[k]);
    net_cost_model_init(&ncm, net);
    if (rv == 0)
        rv = plan_evaluate(&pred, tables, n, topo, opt, &ncm.cm);
    if (rv != 0) {
        plan_destroy(&pred);
        return rv;
    }
    /* pred's name says how tables off HBM were costed: modelled */
    fprintf(out,
            "\npredicted (%s model, batch %lld) beside measured, ms; error "
            "= predicted / measured - 1\n",
            pred.cost_model, (long long)topo->batch_size);
    fprintf(out, "%6s %11s %11s %8s %11s %11s %8s\n", "device", "compute",
            "measured", "error", "total", "measured", "error");
    for (r = 0; r < p->ndevices; r++) {
        const struct plan_device *m = &p->devices[r], *q = &pred.devices[r];

        fprintf(out, "%6d %11.3f %11.3f %+7.1f%% %11.3f %11.3f %+7.1f%%\n",
                (int)r, q->compute_ms, m->compute_ms,
                m->compute_ms > 0 ? 100 * (q->compute_ms / m->compute_ms - 1)
                                  : 0.0,
                q->total_ms, m->total_ms,
                m->total_ms > 0 ? 100 * (q->total_ms / m->total_ms - 1) : 0.0);
    }
    fprintf(out, "%6s %11s %11s %8s %11.3f %11.3f %+7.1f%%\n", "plan", "", "",
            "", pred.cost_ms, p->cost_ms,
            p->cost_ms > 0 ? 100 * (pred.cost_ms / p->cost_ms - 1) : 0.0);
    plan_destroy(&pred);
    return 0;
}

/* Whether some shard of p is off HBM. */
static bool has_host_tier(const struct plan *p)
{
    size_t k;

    for (k = 0; k < p->nshards; k++)
        if (p->shards[k].tier != TIER_HBM)
            return true;
    return false;
}

/* Reads the tables and the plan, and the topology they are measured at:
 * the model's batch unless --batch-size says otherwise, as plan's. */
static int eval_inputs(const struct ctl_opts *o, const struct cost_net *net,
                       struct table **tables, size_t *n, struct plan *p,
                       struct topology *topo, uint64_t **caps)
{
    struct sd_diag d;
    int rv;

    rv = json_read_tables(o->tables, (size_t)o->task, tables, n, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "eval: %s", d.msg);
    rv = json_read_plan(o->plan, *tables, *n, p, &d);
    if (rv != 0) {
        free(*tables);
        return ctl_fail(ctl_exit_for(rv), "eval: %s", d.msg);
    }
    /* Without --mem-gb the plan is measured whatever memory it needs, host
     * DRAM for its tables off HBM included unless --host-dram-gb bounds it;
     * --host-link-gbps is the link of their modelled time. */
    topology_default(topo, p->ndevices, UINT64_MAX / 2);
    rv = o->mem_gb > 0 ? ctl_capacities(o, "eval", topo, caps) : 0;
    if (o->mem_gb <= 0) {
        topo->host_dram_bytes =
            o->host_dram_gb > 0
                ? (uint64_t)(o->host_dram_gb * (double)(1ull << 30))
            : has_host_tier(p) ? UINT64_MAX / 2
                               : 0;
        topo->host_link_bw = o->host_link_gbps * (double)(1ull << 30) / 1000.0;
    }
    if (o->per_host)
        topo->devices_per_host = (int32_t)o->per_host;
    topo->batch_size = o->batch ? o->batch : net->batch_size;
    if (rv == 0 && topology_validate(topo, &d) != 0)
        rv = ctl_fail(CTL_EXIT_USAGE, "eval: %s", d.msg);
    if (rv != 0) {
        plan_destroy(p);
        free(*tables);
    }
    return rv;
}

/*
 * eval --traces F: the lookups of each of the n tables, by name, from trace
 * file F, into *out (n shallow copies of the file's traces, whose arrays
 * *file owns: free(*out), trace_array_free(*file, *nfile)).  A table
 * without a trace, or whose trace has other rows or another batch, is a
 * usage error naming it.  0 or an exit status (printed).
 */
static int eval_traces(const char *path, const struct table *tables, size_t n,
                       int64_t batch, struct trace **out, struct trace **file,
                       size_t *nfile)
{
    struct sd_diag d;
    size_t i, j;
    int rv;

    *out = NULL;
    rv = trace_file_read(path, file, nfile, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "eval: --traces: %s", d.msg);
    *out = calloc(n ? n : 1, sizeof(**out));
    if (*out == NULL)
        return ctl_fail(1, "eval: out of memory");
    for (i = 0; i < n; i++) {
        for (j = 0; j < *nfile; j++)
            if (strcmp((*file)[j].name, tables[i].name) == 0)
                break;
        if (j == *nfile)
            return ctl_fail(CTL_EXIT_USAGE,
                            "eval: --traces: %s has no trace of table \"%s\"",
                            path, tables[i].name);
        if ((*file)[j].rows != tables[i].rows)
            return ctl_fail(CTL_EXIT_USAGE,
                            "eval: --traces: table \"%s\" has %lld rows, its "
                            "trace %lld",
                            tables[i].name, (long long)tables[i].rows,
                            (long long)(*file)[j].rows);
        if ((*file)[j].nbags != batch)
            return ctl_fail(CTL_EXIT_USAGE,
                            "eval: --traces: the trace of table \"%s\" has "
                            "%lld bags, eval measures at batch %lld: pass "
                            "--batch-size %lld",
                            tables[i].name, (long long)(*file)[j].nbags,
                            (long long)batch, (long long)(*file)[j].nbags);
        (*out)[i] = (*file)[j];
    }
    return 0;
}

/*
 * eval's model, for the prediction beside the measurement: --model or
 * --profile as plan's, else the one compiled in for the measuring device
 * where shardd has one (an H200's: a cpu model does not price a GPU),
 * else the embedded one.
 */
static int eval_model(const struct ctl_opts *o, const struct kern_backend *be,
                      struct ctl_model *cm)
{
    struct ctl_opts eo = *o;
    struct prof_run_params pp;
    struct sd_diag d;
    char name[256];

    prof_run_params_default(&pp);
    if (o->model == NULL && o->profile == NULL &&
        prof_profile_name(be, 0, pp.batch_size, name, sizeof(name), &d) == 0 &&
        net_compiled(name, NULL) != NULL)
        eo.profile = name;
    return ctl_load_model_for_profile(&eo, "eval", cm);
}

int measure_eval(const struct ctl_opts *o)
{
    enum optimizer opt = OPTIMIZER_SGD;
    const struct kern_backend *be;
    struct kern_timing_opts to;
    struct table *tables = NULL;
    struct topology topo;
    struct ctl_model cm;
    struct sd_diag d;
    struct plan p;
    uint64_t *caps = NULL;
    struct trace *traces = NULL, *file = NULL;
    size_t n, nfile = 0;
    char *text;
    int rv;

    rv = ctl_require("eval", "--tables", o->tables != NULL, "--plan",
                     o->plan != NULL, NULL);
    if (rv != 0)
        return rv;
    if (o->optimizer != NULL && optimizer_parse(o->optimizer, &opt) != 0)
        return ctl_fail(CTL_EXIT_USAGE, "eval: --optimizer \"%s\" is unknown",
                        o->optimizer);
    be = ctl_pick_backend(o->backend);
    if (be == NULL)
        return CTL_EXIT_USAGE;
    rv = eval_model(o, be, &cm);
    if (rv != 0)
        return rv;
    rv = eval_inputs(o, cm.net, &tables, &n, &p, &topo, &caps);
    if (rv != 0)
        goto out_model;
    if (o->traces != NULL) {
        rv = eval_traces(o->traces, tables, n, topo.batch_size, &traces, &file,
                         &nfile);
        if (rv != 0)
            goto out_plan;
    }
    rv = plan_validate(&p, tables, n, &topo, opt, &d);
    if (rv == 0) {
        timing_opts(o, &to);
        rv = prof_eval_plan(be, &p, tables, n, traces, &topo, opt, &to,
                            (uint64_t)o->seed, NULL, &d);
    }
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "eval: %s", d.msg);
        goto out_plan;
    }
    p.algorithm = "eval";
    if (o->json) {
        text = json_plan(&p, tables);
        rv = text ? ctl_write_output(o->out, text)
                  : ctl_fail(1, "eval: out of memory");
        free(text);
    } else {
        struct ctl_text out;

        rv = ctl_text_begin(&out, o->out);
        if (rv != 0)
            goto out_plan;
        fprintf(out.f, "measured at batch %lld (%s), on %s\n",
                (long long)topo.batch_size,
                o->batch ? "--batch-size" : "the model's",
                traces ? "the traces' lookups"
                       : "lookups made from the tables' features");
        format_plan_text(out.f, &p, tables, n, &topo);
        rv = eval_compare(out.f, &p, tables, n, &topo, opt, cm.net);
        rv = ctl_text_end(&out,
                          rv != 0 ? ctl_fail(1, "eval: out of memory") : 0);
    }
out_plan:
    free(traces); /* shallow copies: the arrays are file's */
    trace_array_free(file, nfile);
    plan_destroy(&p);
    free(caps);
    free(tables);
out_model:
    ctl_model_free(&cm);
    return rv;
}
