/*
 * shardctl's online mode (client.h): online_run() opens the channel to the
 * daemon and runs the command; the planner's commands, plan and estimate,
 * are here, the others in online_admin.c.  The command line becomes
 * planner structs, those become the request (wire/), and the
 * response comes back as a plan that prints through the offline printers
 * (format.c, json_plan()), or as the response message (rpc_json.c).
 *
 * Exit status: rpc_exit_code() for a failed call; bad usage and bad input
 * files are 2, as offline.
 */
#include "online.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "shardd/v1/planner.pb-c.h"
#include "wire.h"

/*
 * Figures the API does not carry but the shared JSON printer (json_plan)
 * always writes are given values no real figure takes, and written as null
 * (unknown_to_null()): costs and counts are never negative, and no search
 * scores 987654321987654321 states (which must be positive for json_plan to
 * write the search at all).
 */
#define UNKNOWN_FIGURE     (-987654321)
#define UNKNOWN_FIGURE_STR "-987654321"
#define UNKNOWN_STATES     INT64_C(987654321987654321)
#define UNKNOWN_STATES_STR "987654321987654321"

/* ---------------------------------------------------------------------- */
/* What plan and estimate ask                                              */

/*
 * The topology of plan and estimate's command line: ndevices devices, their
 * capacities (devices of different ones in *caps, which the caller frees;
 * NULL otherwise) and, 0 where not given (the server's defaults), the
 * devices per host and the batch.  Returns 0 or an exit code.
 */
static int asked_topology(const struct ctl_opts *o, const char *cmd,
                          int32_t ndevices, struct topology *t, uint64_t **caps)
{
    int rv;

    topology_default(t, ndevices, 0);
    rv = ctl_capacities(o, cmd, t, caps);
    if (rv != 0)
        return rv;
    /* 0 asks for the server's: hosts, batch and links as it defaults. */
    t->devices_per_host = (int32_t)o->per_host;
    t->batch_size = o->batch;
    t->intra_host_bw = t->inter_host_bw = 0;
    t->link_latency_ms = t->device_mem_bw = 0;
    return 0;
}

/*
 * The printers' topology of a response's ndevices devices: each device's
 * capacity as the server reports it, else as asked, into *caps (the caller
 * free()s it), and the hosts asked for.  Returns 0 or SD_ENOMEM.
 */
static int shown_topology(const struct topology *asked,
                          Shardd__V1__DeviceCost *const *devs, int32_t ndevices,
                          struct topology *t, uint64_t **caps)
{
    int32_t r;

    *caps = malloc((size_t)ndevices * sizeof(**caps));
    if (*caps == NULL)
        return SD_ENOMEM;
    for (r = 0; r < ndevices; r++)
        (*caps)[r] = devs[r]->memory_capacity_bytes > 0
                         ? devs[r]->memory_capacity_bytes
                         : topology_mem(asked, r);
    topology_default(t, ndevices, (*caps)[0]);
    t->mem_by_device = *caps;
    if (asked->devices_per_host)
        t->devices_per_host = asked->devices_per_host;
    t->host_dram_bytes = asked->host_dram_bytes;
    t->host_link_bw = asked->host_link_bw;
    t->comm_dtype = asked->comm_dtype;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* plan                                                                    */

/* The batch shardd planned at: the one asked, else the answering model's,
 * the last part of its profile ("cpu/MODEL/4096"); 0 when neither is
 * known. */
static int64_t served_batch(int64_t asked, const Shardd__V1__CostBasis *basis)
{
    const char *slash = basis != NULL && basis->profile != NULL
                            ? strrchr(basis->profile, '/')
                            : NULL;

    if (asked > 0)
        return asked;
    return slash != NULL ? strtoll(slash + 1, NULL, 10) : 0;
}

/* The bins shardd derived for the tables sent without them, derived here
 * the same way (at its batch) for the printers: a cached table's miss rate
 * comes from them. */
static void shown_bins(struct tables_input *in, int64_t batch)
{
    size_t i;

    for (i = 0; batch > 0 && i < in->n; i++) {
        const struct table_spec *sp = &in->specs[i];
        struct table *t = &in->tables[i];

        if (!sp->has_bins &&
            bins_derive(t->rows, t->pooling_factor, batch,
                        sp->zipf_s > 0 ? sp->zipf_s : DERIVE_ZIPF_DEFAULT,
                        t->bins) != 0)
            memset(t->bins, 0, sizeof(t->bins));
    }
}

/*
 * Rewrites the unknown figures of a JSON text as null.  Patterns include
 * their key, so that no table name can match: inside a JSON string every
 * quote is escaped.
 */
static void unknown_to_null(char *text)
{
    static const char *const pats[] = {
        "\"cost_ms\": " UNKNOWN_FIGURE_STR ".0",
        "\"states\": " UNKNOWN_STATES_STR,
        "\"beam_levels\": " UNKNOWN_FIGURE_STR,
        "\"local_moves\": " UNKNOWN_FIGURE_STR,
    };
    size_t k, keylen, plen;
    char *at;

    for (k = 0; k < sizeof(pats) / sizeof(pats[0]); k++) {
        plen = strlen(pats[k]);
        keylen = (size_t)(strchr(pats[k], ' ') - pats[k]) + 1;
        while ((at = strstr(text, pats[k])) != NULL) {
            memcpy(at + keylen, "null", 4);
            memmove(at + keylen + 4, at + plen, strlen(at + plen) + 1);
        }
    }
}

/*
 * The offline plan JSON (json_plan()) of a daemon's plan, with the figures
 * the API does not carry written as null.  NULL when out of memory.
 */
static char *plan_json(const struct plan *p, const struct table *tables,
                       const struct input_notes *notes,
                       const struct topology *topo)
{
    struct plan q = *p; /* shallow: only the marked figures change */
    char *text;
    int32_t i;

    /* The hosts, for the per-host figures, as the topology shown has them. */
    q.devices_per_host = topo->devices_per_host;
    q.host_dram_bytes = topo->host_dram_bytes;
    for (i = 0; i < q.explain.ndrivers; i++)
        if (q.explain.driver_ms[i] < 0)
            q.explain.driver_ms[i] = UNKNOWN_FIGURE;
    if (q.stats.states < 0) {
        q.stats.states = UNKNOWN_STATES;
        q.stats.levels = UNKNOWN_FIGURE;
        q.stats.moves = UNKNOWN_FIGURE;
    }
    text = json_plan_noted(&q, tables, notes);
    if (text != NULL)
        unknown_to_null(text);
    return text;
}

/* Options that only an in-process plan has; a daemon plans its own way. */
static int reject_offline_only(const struct ctl_opts *o)
{
    char names[96] = "";

    if (o->model != NULL)
        strcat(names, ", --model");
    if (o->policy != NULL)
        strcat(names, ", --policy");
    if (o->no_local_search)
        strcat(names, ", --no-local-search");
    if (o->no_torchrec)
        strcat(names, ", --no-torchrec");
    if (o->threads != 0)
        strcat(names, ", --threads");
    if (names[0] == '\0')
        return 0;
    return ctl_fail(CTL_EXIT_USAGE,
                    "plan: %s %s only with --offline (the daemon plans "
                    "with its own model and threads)",
                    names + 2, strchr(names + 2, ',') ? "work" : "works");
}

/* The PlanOptions of the command line; strings borrowed from o, the
 * quantile (--quantile) in *q. */
static int asked_options(const struct ctl_opts *o, Shardd__V1__PlanOptions *m,
                         Shardd__V1__EnsembleQuantile *q)
{
    enum optimizer opt = OPTIMIZER_SGD;

    if (o->optimizer != NULL && optimizer_parse(o->optimizer, &opt))
        return ctl_fail(CTL_EXIT_USAGE,
                        "plan: --optimizer \"%s\" is unknown (sgd, "
                        "adagrad, rowwise_adagrad, adam)",
                        o->optimizer);
    shardd__v1__plan_options__init(m);
    m->algorithm = mstr(o->alg != NULL ? o->alg : "");
    m->whole_tables_only = o->no_splits;
    /* Whole milliseconds on the wire; never round a budget down to 0,
     * which would mean the server's default. */
    if (o->time_budget_ms > 0)
        m->time_budget_ms = o->time_budget_ms >= 4294967295.0
                                ? UINT32_MAX
                                : (uint32_t)ceil(o->time_budget_ms);
    m->seed = (uint64_t)o->seed;
    m->optimizer = wire_optimizer_out(opt);
    m->profile = mstr(o->profile != NULL ? o->profile : "");
    if (o->quantile >= 0) {
        shardd__v1__ensemble_quantile__init(q);
        q->value = o->quantile;
        m->quantile = q;
    }
    return 0;
}

/* Prints a daemon's plan the way offline plan does. */
static int print_plan(const struct ctl_opts *o, const struct plan *p,
                      const struct tables_input *in,
                      const struct topology *topo,
                      const Shardd__V1__PredictionSpread *spread)
{
    const struct table *tables = in->tables;
    struct plan_spread sp;
    struct sd_diag d;
    char *text;
    int rv;

    rv = ctl_write_svg(o, "plan", p, topo);
    if (rv != 0)
        return rv;
    if (!o->json && !o->torchrec) {
        struct ctl_text out;

        rv = wire_spread_in(spread, p->ndevices, &sp, &d);
        if (rv != 0)
            return ctl_fail(1, "plan: the response's %s", d.msg);
        rv = ctl_text_begin(&out, o->out);
        if (rv == 0) {
            format_plan_spread(out.f, p, tables, in->n, topo,
                               sp.members > 0 ? &sp : NULL);
            format_notes(out.f, &in->notes);
            rv = ctl_text_end(&out, 0);
        }
        plan_spread_free(&sp);
        return rv;
    }
    text = o->json ? plan_json(p, tables, &in->notes, topo)
                   : json_plan_torchrec_noted(p, tables, topo,
                                              o->torchrec_module, &in->notes);
    if (text == NULL)
        return ctl_fail(1, "plan: out of memory");
    rv = ctl_write_output(o->out, text);
    free(text);
    return rv;
}

static int online_plan(struct online *on)
{
    const struct ctl_opts *o = on->o;
    Shardd__V1__PlanRequest rq = SHARDD__V1__PLAN_REQUEST__INIT;
    Shardd__V1__PlanOptions pom;
    Shardd__V1__EnsembleQuantile pq;
    Shardd__V1__PlanResponse *resp = NULL;
    struct wire_arena arena = WIRE_ARENA_INIT;
    struct tables_input in = {0};
    struct table *tables;
    struct topology asked, topo;
    struct sd_diag d;
    struct plan p;
    uint64_t *caps = NULL, *shown = NULL;
    int32_t *pins = NULL;
    int64_t batch;
    size_t n;
    int rv;

    rv = reject_offline_only(o);
    if (rv != 0)
        return rv;
    rv = ctl_require("plan", "--tables", o->tables != NULL, "--devices",
                     o->devices != 0, "--mem-gb", o->mem_gb > 0, NULL);
    if (rv != 0)
        return rv;
    if (o->json && o->torchrec)
        return ctl_fail(CTL_EXIT_USAGE, "plan: --json and --torchrec "
                                        "exclude each other");
    rv = asked_options(o, &pom, &pq);
    if (rv != 0)
        return rv;
    rv = ctl_read_tables(o, "plan", &in);
    if (rv != 0)
        return rv;
    tables = in.tables;
    n = in.n;
    rv = ctl_pins(o, "plan", tables, n, (int32_t)o->devices, &pins);
    if (rv == 0)
        rv = asked_topology(o, "plan", (int32_t)o->devices, &asked, &caps);
    if (rv != 0)
        goto out_tables;
    rv = wire_tables_input_out(&arena, &in, &rq.tables, &rq.n_tables,
                               &rq.torchrec_tables, &rq.n_torchrec_tables);
    rq.topology = wire_topology_out(&arena, &asked);
    if (pins != NULL)
        pom.constraints = wire_pins_out(&arena, pins, tables, n);
    rq.options = &pom;
    if (rv != 0 || rq.topology == NULL ||
        (pins != NULL && pom.constraints == NULL)) {
        rv = ctl_fail(1, "plan: out of memory");
        goto out_request;
    }

    rv = online_call(on, "/shardd.v1.Planner/Plan", &rq.base,
                     &shardd__v1__plan_response__descriptor,
                     (ProtobufCMessage **)&resp);
    if (rv != 0)
        goto out_request;
    rv = wire_plan_response_in(resp, tables, n, (int32_t)o->devices, &p, &d);
    if (rv != 0) {
        rv = ctl_fail(1, "plan: %s", d.msg); /* the daemon's fault */
        goto out_response;
    }
    /* The daemon's notes after this reader's own (keys it did not know). */
    if (wire_notes_in(resp->notes, resp->n_notes, &in.notes) != 0) {
        rv = ctl_fail(1, "plan: out of memory");
        plan_destroy(&p);
        goto out_response;
    }
    /* The printers take the capacities and hosts from a topology. */
    batch = served_batch(o->batch, resp->basis);
    shown_bins(&in, batch);
    if (shown_topology(&asked, resp->devices, (int32_t)o->devices, &topo,
                       &shown) != 0) {
        rv = ctl_fail(1, "plan: out of memory");
    } else {
        if (batch > 0)
            topo.batch_size = batch;
        rv = print_plan(o, &p, &in, &topo, resp->spread);
    }
    free(shown);
    plan_destroy(&p);
out_response:
    shardd__v1__plan_response__free_unpacked(resp, NULL);
out_request:
    wire_arena_free(&arena);
out_tables:
    free(caps);
    free(pins);
    tables_input_destroy(&in);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* estimate                                                                */

/* The human report: the offline plan table, and whether it all fits. */
static int print_estimate(const Shardd__V1__EstimateResponse *r, struct plan *p,
                          struct tables_input *in, const struct topology *topo)
{
    struct plan_spread sp;
    struct sd_diag d;
    int32_t dev;
    bool first = true;

    wire_devices_in(p, r->devices, r->n_devices);
    p->cost_ms = r->plan_cost_ms;
    wire_basis_in(p, r->basis);
    p->algorithm = "estimate";
    p->explain.critical_device = -1;
    if (wire_spread_in(r->spread, p->ndevices, &sp, &d) != 0)
        return ctl_fail(1, "estimate: the response's %s", d.msg);
    format_plan_spread(stdout, p, in->tables, in->n, topo,
                       sp.members > 0 ? &sp : NULL);
    plan_spread_free(&sp);
    if (wire_notes_in(r->notes, r->n_notes, &in->notes) != 0)
        return ctl_fail(1, "estimate: out of memory");
    if (r->fits_memory) {
        printf("memory: every device fits\n");
        format_notes(stdout, &in->notes);
        return online_finish_stdout();
    }
    printf("memory: over capacity on device");
    for (dev = 0; dev < p->ndevices; dev++) {
        if (p->devices[dev].mem_bytes <= topology_mem(topo, dev))
            continue;
        printf("%s %d", first ? "" : ",", (int)dev);
        first = false;
    }
    printf("\n");
    format_notes(stdout, &in->notes);
    return online_finish_stdout();
}

static int online_estimate(struct online *on)
{
    const struct ctl_opts *o = on->o;
    Shardd__V1__EstimateRequest rq = SHARDD__V1__ESTIMATE_REQUEST__INIT;
    Shardd__V1__EstimateResponse *resp = NULL;
    struct wire_arena arena = WIRE_ARENA_INIT;
    enum optimizer opt = OPTIMIZER_SGD;
    struct tables_input in = {0};
    struct topology asked, topo;
    struct plan p;
    uint64_t *caps = NULL, *shown = NULL;
    int32_t ndev = 0;
    int rv;

    rv = ctl_require("estimate", "--tables", o->tables != NULL, "--plan",
                     o->plan != NULL, "--mem-gb", o->mem_gb > 0, NULL);
    if (rv != 0)
        return rv;
    if (o->model != NULL || o->out != NULL)
        return ctl_fail(CTL_EXIT_USAGE,
                        "estimate: --model and --out work only with "
                        "--offline (the daemon answers with its own model)");
    if (o->optimizer != NULL && optimizer_parse(o->optimizer, &opt) != 0)
        return ctl_fail(CTL_EXIT_USAGE,
                        "estimate: --optimizer \"%s\" is unknown (sgd, "
                        "adagrad, rowwise_adagrad, adam)",
                        o->optimizer);
    rv = ctl_read_tables(o, "estimate", &in);
    if (rv != 0)
        return rv;
    rv = ctl_read_placement(o, "estimate", in.tables, in.n, &p, &ndev);
    if (rv != 0)
        goto out_tables;
    rv = asked_topology(o, "estimate", ndev, &asked, &caps);
    if (rv != 0)
        goto out_request;
    rv = wire_tables_input_out(&arena, &in, &rq.tables, &rq.n_tables,
                               &rq.torchrec_tables, &rq.n_torchrec_tables);
    rq.topology = wire_topology_out(&arena, &asked);
    rq.n_placement = in.n;
    rq.placement = wire_placements_out(&arena, &p, in.tables, in.n);
    rq.optimizer = wire_optimizer_out(opt);
    rq.profile = mstr(o->profile != NULL ? o->profile : "");
    if (rv != 0 || rq.topology == NULL || rq.placement == NULL) {
        rv = ctl_fail(1, "estimate: out of memory");
        goto out_request;
    }

    rv = online_call(on, "/shardd.v1.Planner/Estimate", &rq.base,
                     &shardd__v1__estimate_response__descriptor,
                     (ProtobufCMessage **)&resp);
    if (rv != 0)
        goto out_request;
    if (resp->n_devices != (size_t)ndev) {
        rv = ctl_fail(1, "estimate: the response has %zu devices, not %d",
                      resp->n_devices, (int)ndev);
    } else if (shown_topology(&asked, resp->devices, ndev, &topo, &shown) !=
               0) {
        rv = ctl_fail(1, "estimate: out of memory");
    } else {
        wire_devices_in(&p, resp->devices, resp->n_devices);
        p.cost_ms = resp->plan_cost_ms;
        p.algorithm = "estimate";
        p.explain.critical_device = -1;
        rv = ctl_write_svg(o, "estimate", &p, &topo);
        if (rv == 0)
            rv = o->json ? online_print_json(&resp->base)
                         : print_estimate(resp, &p, &in, &topo);
    }
    free(shown);
    shardd__v1__estimate_response__free_unpacked(resp, NULL);
out_request:
    free(caps);
    wire_arena_free(&arena);
    plan_destroy(&p);
out_tables:
    tables_input_destroy(&in);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* Dispatch                                                                */

/* The online commands of ctl_opts_parse() and the default deadline of
 * their calls. */
static const struct online_cmd {
    int (*run)(struct online *on);
    double timeout_s;
} online_cmds[CTL_CMD_COUNT] = {
    [CTL_CMD_PLAN] = {online_plan, 60},
    [CTL_CMD_ESTIMATE] = {online_estimate, 60},
    [CTL_CMD_STATUS] = {online_status, 10},
    [CTL_CMD_MODELS] = {online_models, 10},
    [CTL_CMD_ACTIVATE] = {online_activate, 10},
    [CTL_CMD_RETRAIN] = {online_retrain, 10},
    [CTL_CMD_JOB] = {online_job, 10},
    [CTL_CMD_PROFILER] = {online_profiler, 10},
    [CTL_CMD_HEALTH] = {online_health, 10},
};

int online_run(const struct ctl_opts *o)
{
    const struct online_cmd *c = &online_cmds[o->cmd];
    struct online on;
    int rv;

    if (c->run == NULL) /* not an online command: a caller's mistake */
        return ctl_fail(1, "%s: not an online command", o->args[0]);
    memset(&on, 0, sizeof(on));
    on.o = o;
    on.cmd = o->args[0];
    rv = online_open(&on, c->timeout_s);
    if (rv != 0)
        return rv;
    rv = c->run(&on);
    online_close(&on);
    return rv;
}
