/*
 * shardctl's online mode (client.h): every RPC of shardd from the command
 * line.  Options become protobuf-c requests, calls go through rpc.c, and
 * responses come back as the offline printers' structs (plans) or as human
 * tables and JSON objects that mirror the response messages (the rest).
 *
 * Exit status: rpc_exit_code() for a failed call; a job or health check that
 * reports failure is 1; bad usage and bad input files are 2, as offline.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "grpc/health/v1/health.pb-c.h"
#include "online_msg.h"
#include "shardd/v1/admin.pb-c.h"
#include "shardd/v1/planner.pb-c.h"
#include "shardd/v1/types.pb-c.h"

#define DEFAULT_ADDR "127.0.0.1:7411"
#define GIB          ((double)(1ull << 30))

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

/* One online command being run. */
struct online {
    const struct ctl_opts *o;
    const char *cmd;
    const char *addr;
    struct rpc_client *cli;
    int64_t deadline_ms; /* 0: none */
};

/* protobuf-c string fields are `char *`; packing only reads them. */
static char *mstr(const char *s)
{
    return (char *)s;
}

/* ---------------------------------------------------------------------- */
/* Calls                                                                   */

/* Reads a token file: its first line, white space around it dropped (as
 * the daemon reads its admin_token_file). */
static int read_token_file(const char *path, char *buf, size_t cap,
                           struct sd_diag *d)
{
    FILE *f = fopen(path, "r");
    size_t n, lead;

    if (f == NULL)
        return sd_diag_set(d, SD_EIO, "--token-file: %s: %s", path,
                           strerror(errno));
    if (fgets(buf, (int)cap, f) == NULL)
        buf[0] = '\0';
    fclose(f);
    n = strlen(buf);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' ||
                     buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        buf[--n] = '\0';
    lead = strspn(buf, " \t");
    memmove(buf, buf + lead, n - lead + 1);
    if (n == lead)
        return sd_diag_set(d, SD_EINVAL, "--token-file: %s: no token in it",
                           path);
    return 0;
}

/* Connects (lazily: gRPC connects at the first call) to the daemon. */
static int online_open(struct online *on, double default_timeout_s)
{
    const struct ctl_opts *o = on->o;
    const char *token = o->token;
    char tokbuf[4096];
    struct sd_diag d;
    double t;
    int rv;

    on->addr = o->addr != NULL ? o->addr : getenv("SHARDD_ADDR");
    if (on->addr == NULL || on->addr[0] == '\0')
        on->addr = DEFAULT_ADDR;
    if (o->token != NULL && o->token_file != NULL)
        return ctl_fail(CTL_EXIT_USAGE,
                        "%s: --token and --token-file exclude each other",
                        on->cmd);
    if (o->token_file != NULL) {
        if (read_token_file(o->token_file, tokbuf, sizeof(tokbuf), &d) != 0)
            return ctl_fail(CTL_EXIT_USAGE, "%s: %s", on->cmd, d.msg);
        token = tokbuf;
    } else if (token == NULL) {
        token = getenv("SHARDD_TOKEN");
    }
    t = o->timeout_s > 0 ? o->timeout_s : default_timeout_s;
    on->deadline_ms = t > 0 ? (int64_t)ceil(t * 1e3) : 0;
    rv = rpc_client_open(on->addr, token, &on->cli, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "%s: %s", on->cmd, d.msg);
    return 0;
}

/*
 * Calls method with req and unpacks the response (*resp: the caller frees
 * it with protobuf_c_message_free_unpacked()).  Returns 0 or the exit
 * status, with the server's message printed.
 */
static int online_call(struct online *on, const char *method,
                       const ProtobufCMessage *req,
                       const ProtobufCMessageDescriptor *resp_desc,
                       ProtobufCMessage **resp)
{
    size_t len = protobuf_c_message_get_packed_size(req), rlen;
    uint8_t *buf = malloc(len ? len : 1), *rbuf;
    struct sd_diag d;
    int rv, status;

    if (buf == NULL)
        return ctl_fail(1, "%s: out of memory", on->cmd);
    protobuf_c_message_pack(req, buf);
    rv = rpc_client_call(on->cli, method, buf, len, on->deadline_ms, &rbuf,
                         &rlen, &status, &d);
    free(buf);
    if (rv != 0)
        return ctl_fail(rpc_exit_code(status), "%s", d.msg);
    *resp = protobuf_c_message_unpack(resp_desc, NULL, rlen, rbuf);
    free(rbuf);
    if (*resp == NULL)
        return ctl_fail(1, "%s: the response is not a valid %s", method,
                        resp_desc->name);
    return 0;
}

/* Ends stdout's output; returns 0 or the exit status for a failed write. */
static int finish_stdout(void)
{
    if (ferror(stdout) || fflush(stdout) != 0)
        return ctl_fail(1, "cannot write to stdout: %s", strerror(errno));
    return 0;
}

/* A response as JSON (rpc_json.c) on stdout. */
static int print_json(const ProtobufCMessage *m)
{
    char *text = rpc_json_message(m);

    if (text == NULL)
        return ctl_fail(1, "out of memory");
    fputs(text, stdout);
    fputc('\n', stdout);
    free(text);
    return finish_stdout();
}

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
    t->devices_per_host = (int32_t)o->per_host;
    t->batch_size = o->batch;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* plan                                                                    */

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
static char *plan_json(const struct plan *p, const struct table *tables)
{
    struct plan q = *p; /* shallow: only the marked figures change */
    char *text;
    int32_t i;

    for (i = 0; i < q.explain.ndrivers; i++)
        if (q.explain.driver_ms[i] < 0)
            q.explain.driver_ms[i] = UNKNOWN_FIGURE;
    if (q.stats.states < 0) {
        q.stats.states = UNKNOWN_STATES;
        q.stats.levels = UNKNOWN_FIGURE;
        q.stats.moves = UNKNOWN_FIGURE;
    }
    text = json_plan(&q, tables);
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
    if (o->no_local_search)
        strcat(names, ", --no-local-search");
    if (o->threads != 0)
        strcat(names, ", --threads");
    if (names[0] == '\0')
        return 0;
    return ctl_fail(CTL_EXIT_USAGE,
                    "plan: %s work only with --offline (the daemon plans "
                    "with its own model and threads)",
                    names + 2);
}

/* The plan options of the command line, for online_msg_plan_options(). */
static int asked_options(const struct ctl_opts *o, struct plan_options *po)
{
    plan_options_default(po);
    if (o->optimizer != NULL && optimizer_parse(o->optimizer, &po->optimizer))
        return ctl_fail(CTL_EXIT_USAGE,
                        "plan: --optimizer \"%s\" is unknown (sgd, "
                        "adagrad, rowwise_adagrad, adam)",
                        o->optimizer);
    po->column_splits = !o->no_splits;
    po->time_budget_ms = o->time_budget_ms;
    po->seed = (uint64_t)o->seed;
    return 0;
}

/* Prints a daemon's plan the way offline plan does. */
static int print_plan(const struct ctl_opts *o, const struct plan *p,
                      const struct table *tables, size_t n,
                      const struct topology *topo)
{
    char *text;
    int rv;

    if (!o->json && !o->torchrec) {
        format_plan_text(stdout, p, tables, n, topo);
        return finish_stdout();
    }
    text = o->json ? plan_json(p, tables) : json_plan_torchrec(p, tables, topo);
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
    Shardd__V1__Topology tm;
    Shardd__V1__PlanOptions pom;
    Shardd__V1__Table *tmsgs = NULL, **tptrs = NULL;
    Shardd__V1__PlanResponse *resp = NULL;
    struct online_msg_pins pm = {0};
    struct plan_options po;
    struct table *tables = NULL;
    struct topology asked, topo;
    struct sd_diag d;
    struct plan p;
    uint64_t *caps = NULL, *shown = NULL;
    int32_t *pins = NULL;
    size_t n;
    int rv;

    rv = reject_offline_only(o);
    if (rv != 0)
        return rv;
    if (o->tables == NULL || o->devices == 0 || o->mem_gb <= 0)
        return ctl_fail(CTL_EXIT_USAGE, "plan: --tables, --devices and "
                                        "--mem-gb are required");
    if (o->json && o->torchrec)
        return ctl_fail(CTL_EXIT_USAGE, "plan: --json and --torchrec "
                                        "exclude each other");
    if (o->out != NULL && !o->json && !o->torchrec)
        return ctl_fail(CTL_EXIT_USAGE, "plan: --out needs --json or "
                                        "--torchrec");
    rv = asked_options(o, &po);
    if (rv != 0)
        return rv;
    rv = json_read_tables(o->tables, (size_t)o->task, &tables, &n, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "plan: %s", d.msg);
    rv = ctl_pins(o, "plan", tables, n, (int32_t)o->devices, &pins);
    if (rv == 0)
        rv = asked_topology(o, "plan", (int32_t)o->devices, &asked, &caps);
    if (rv != 0)
        goto out_tables;
    if (online_msg_tables(tables, n, &tmsgs, &tptrs) != 0 ||
        (pins != NULL && online_msg_pins(pins, tables, n, &pm) != 0)) {
        rv = ctl_fail(1, "plan: out of memory");
        goto out_request;
    }
    online_msg_topology(&asked, &tm);
    online_msg_plan_options(o->alg, &po, o->profile, &pom);
    if (pins != NULL)
        pom.constraints = &pm.cons;
    rq.n_tables = n;
    rq.tables = tptrs;
    rq.topology = &tm;
    rq.options = &pom;

    rv = online_call(on, "/shardd.v1.Planner/Plan", &rq.base,
                     &shardd__v1__plan_response__descriptor,
                     (ProtobufCMessage **)&resp);
    if (rv != 0)
        goto out_request;
    rv = online_msg_plan_from(resp, tables, n, (int32_t)o->devices, &p, &d);
    if (rv != 0) {
        rv = ctl_fail(1, "plan: %s", d.msg); /* the daemon's fault */
        goto out_response;
    }
    /* The printers take the capacities and hosts from a topology. */
    if (online_msg_topology_from(&asked, resp->devices, (int32_t)o->devices,
                                 &topo, &shown) != 0)
        rv = ctl_fail(1, "plan: out of memory");
    else
        rv = print_plan(o, &p, tables, n, &topo);
    free(shown);
    plan_destroy(&p);
out_response:
    shardd__v1__plan_response__free_unpacked(resp, NULL);
out_request:
    online_msg_pins_free(&pm);
    free(tmsgs);
    free(tptrs);
out_tables:
    free(caps);
    free(pins);
    free(tables);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* estimate                                                                */

/* The plan file's shards on ndev devices, sorted; *p initialised here. */
static int read_placement(const struct ctl_opts *o, const struct table *tables,
                          size_t n, struct plan *p, int32_t *ndev)
{
    struct sd_diag d;
    struct plan in;
    size_t k;
    int rv;

    rv = json_read_plan(o->plan, tables, n, &in, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "estimate: --plan: %s", d.msg);
    *ndev = o->devices ? (int32_t)o->devices : in.ndevices;
    rv = plan_init(p, *ndev);
    for (k = 0; rv == 0 && k < in.nshards; k++)
        rv = plan_add(p, in.shards[k].table, in.shards[k].device,
                      in.shards[k].col_offset, in.shards[k].col_width);
    plan_destroy(&in);
    if (rv != 0) {
        plan_destroy(p);
        return ctl_fail(1, "estimate: out of memory");
    }
    plan_sort(p);
    return 0;
}

/* The human report: the offline plan table, and whether it all fits. */
static int print_estimate(const Shardd__V1__EstimateResponse *r, struct plan *p,
                          const struct table *tables, size_t n,
                          const struct topology *topo)
{
    int32_t dev;
    bool first = true;

    online_msg_estimate_from(r, p);
    p->algorithm = "estimate";
    p->explain.critical_device = -1;
    format_plan_text(stdout, p, tables, n, topo);
    if (r->fits_memory) {
        printf("memory: every device fits\n");
        return finish_stdout();
    }
    printf("memory: over capacity on device");
    for (dev = 0; dev < p->ndevices; dev++) {
        if (p->devices[dev].mem_bytes <= topology_mem(topo, dev))
            continue;
        printf("%s %d", first ? "" : ",", (int)dev);
        first = false;
    }
    printf("\n");
    return finish_stdout();
}

static int online_estimate(struct online *on)
{
    const struct ctl_opts *o = on->o;
    Shardd__V1__EstimateRequest rq = SHARDD__V1__ESTIMATE_REQUEST__INIT;
    Shardd__V1__EstimateResponse *resp = NULL;
    Shardd__V1__Topology tm;
    Shardd__V1__Table *tmsgs = NULL, **tptrs = NULL;
    struct online_msg_placement pm = {0};
    enum optimizer opt = OPTIMIZER_SGD;
    struct table *tables = NULL;
    struct topology asked, topo;
    struct sd_diag d;
    struct plan p;
    uint64_t *caps = NULL, *shown = NULL;
    int32_t ndev = 0;
    size_t n;
    int rv;

    if (o->tables == NULL || o->plan == NULL || o->mem_gb <= 0)
        return ctl_fail(CTL_EXIT_USAGE, "estimate: --tables, --plan and "
                                        "--mem-gb are required");
    if (o->optimizer != NULL && optimizer_parse(o->optimizer, &opt) != 0)
        return ctl_fail(CTL_EXIT_USAGE,
                        "estimate: --optimizer \"%s\" is unknown (sgd, "
                        "adagrad, rowwise_adagrad, adam)",
                        o->optimizer);
    rv = json_read_tables(o->tables, (size_t)o->task, &tables, &n, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "estimate: %s", d.msg);
    rv = read_placement(o, tables, n, &p, &ndev);
    if (rv != 0)
        goto out_tables;
    if (online_msg_tables(tables, n, &tmsgs, &tptrs) != 0 ||
        online_msg_placement(&p, tables, n, &pm) != 0) {
        rv = ctl_fail(1, "estimate: out of memory");
        goto out_request;
    }
    rv = asked_topology(o, "estimate", ndev, &asked, &caps);
    if (rv != 0)
        goto out_request;
    online_msg_topology(&asked, &tm);
    rq.n_tables = n;
    rq.tables = tptrs;
    rq.topology = &tm;
    rq.n_placement = n;
    rq.placement = pm.tp_ptrs;
    rq.optimizer = online_msg_optimizer(opt);
    rq.profile = mstr(o->profile != NULL ? o->profile : "");

    rv = online_call(on, "/shardd.v1.Planner/Estimate", &rq.base,
                     &shardd__v1__estimate_response__descriptor,
                     (ProtobufCMessage **)&resp);
    if (rv != 0)
        goto out_request;
    if (resp->n_devices != (size_t)ndev) {
        rv = ctl_fail(1, "estimate: the response has %zu devices, not %d",
                      resp->n_devices, (int)ndev);
    } else if (o->json) {
        rv = print_json(&resp->base);
    } else if (online_msg_topology_from(&asked, resp->devices, ndev, &topo,
                                        &shown) != 0) {
        rv = ctl_fail(1, "estimate: out of memory");
    } else {
        rv = print_estimate(resp, &p, tables, n, &topo);
    }
    free(shown);
    shardd__v1__estimate_response__free_unpacked(resp, NULL);
out_request:
    free(caps);
    online_msg_placement_free(&pm);
    free(tmsgs);
    free(tptrs);
    plan_destroy(&p);
out_tables:
    free(tables);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* Admin: status, models, activate, profiler                               */

/*
 * An enum value's name for people: "JOB_STATE_RUNNING" -> "running".  The
 * API's enums prefix every value with the enum's name, which their
 * UNSPECIFIED value (number 0) shows; other enums keep their names.
 */
static const char *enum_word(const ProtobufCEnumDescriptor *ed, int v,
                             char *buf, size_t cap)
{
    static const char unspec[] = "UNSPECIFIED";
    const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(ed, v);
    const ProtobufCEnumValue *zero =
        protobuf_c_enum_descriptor_get_value(ed, 0);
    const char *name;
    size_t i, plen = 0;

    if (ev == NULL) {
        snprintf(buf, cap, "%d", v);
        return buf;
    }
    name = ev->name;
    if (zero != NULL && strlen(zero->name) > strlen(unspec) &&
        strcmp(zero->name + strlen(zero->name) - strlen(unspec), unspec) == 0)
        plen = strlen(zero->name) - strlen(unspec);
    if (plen > 0 && strncmp(name, zero->name, plen) == 0)
        name += plen;
    for (i = 0; name[i] != '\0' && i + 1 < cap; i++)
        buf[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] - 'A' + 'a'
                                                         : name[i]);
    buf[i] = '\0';
    return buf;
}

/* Local time of a _unix_ms field; "-" for 0 (not reached). */
static const char *time_text(int64_t unix_ms, char *buf, size_t cap)
{
    time_t t = (time_t)(unix_ms / 1000);
    struct tm tm;

    if (unix_ms <= 0)
        return "-";
    if (localtime_r(&t, &tm) == NULL ||
        strftime(buf, cap, "%Y-%m-%d %H:%M:%S", &tm) == 0)
        snprintf(buf, cap, "%lld ms", (long long)unix_ms);
    return buf;
}

static int online_status(struct online *on)
{
    Shardd__V1__GetStatusRequest rq = SHARDD__V1__GET_STATUS_REQUEST__INIT;
    Shardd__V1__GetStatusResponse *r = NULL;
    char word[32];
    size_t i;
    int rv;

    rv = online_call(on, "/shardd.v1.Admin/GetStatus", &rq.base,
                     &shardd__v1__get_status_response__descriptor,
                     (ProtobufCMessage **)&r);
    if (rv != 0)
        return rv;
    if (on->o->json) {
        rv = print_json(&r->base);
        goto out_response;
    }
    printf("shardd %s at %s, up %llu h %02llu min\n", r->version, on->addr,
           (unsigned long long)(r->uptime_s / 3600),
           (unsigned long long)(r->uptime_s / 60 % 60));
    printf("backend: %s, %zu device%s\n", r->backend, r->n_devices,
           r->n_devices == 1 ? "" : "s");
    for (i = 0; i < r->n_devices; i++) {
        printf("  %3d  %s", (int)r->devices[i]->index, r->devices[i]->name);
        if (r->devices[i]->memory_bytes > 0)
            printf(" (%.1f GiB)", (double)r->devices[i]->memory_bytes / GIB);
        printf("\n");
    }
    printf("profile: %s, active model: %s\n", r->profile,
           r->active_model_version[0] ? r->active_model_version : "none");
    if (strcmp(r->serving_profile, r->profile) != 0)
        printf("serving: model %s of profile %s (requests naming no "
               "profile)\n",
               r->serving_model_version[0] ? r->serving_model_version : "none",
               r->serving_profile);
    printf("profiler: %s; samples: %llu compute, %llu comm\n",
           enum_word(&shardd__v1__profiler_state__descriptor, (int)r->profiler,
                     word, sizeof(word)),
           (unsigned long long)r->compute_samples,
           (unsigned long long)r->comm_samples);
    printf("jobs: %u queued, %u running\n", (unsigned)r->jobs_queued,
           (unsigned)r->jobs_running);
    rv = finish_stdout();
out_response:
    shardd__v1__get_status_response__free_unpacked(r, NULL);
    return rv;
}

/* A MAPE for people: "4.21%", or "-" where the model has none. */
static const char *mape_text(double mape, char *buf, size_t cap)
{
    if (!(mape > 0))
        return "-";
    snprintf(buf, cap, "%.2f%%", 100 * mape);
    return buf;
}

static int online_models(struct online *on)
{
    Shardd__V1__ListModelsRequest rq = SHARDD__V1__LIST_MODELS_REQUEST__INIT;
    Shardd__V1__ListModelsResponse *r = NULL;
    char when[32], mape[32], comm[32], samples[48];
    int wv = 7, wp = 7;
    size_t i;
    int rv;

    rq.profile = mstr(on->o->profile != NULL ? on->o->profile : "");
    rq.limit = (uint32_t)on->o->limit;
    rv = online_call(on, "/shardd.v1.Admin/ListModels", &rq.base,
                     &shardd__v1__list_models_response__descriptor,
                     (ProtobufCMessage **)&r);
    if (rv != 0)
        return rv;
    if (on->o->json) {
        rv = print_json(&r->base);
        goto out_response;
    }
    if (r->n_models == 0) {
        printf("no models%s%s\n", rq.profile[0] ? " for profile " : "",
               rq.profile);
        rv = finish_stdout();
        goto out_response;
    }
    for (i = 0; i < r->n_models; i++) {
        if ((int)strlen(r->models[i]->version) > wv)
            wv = (int)strlen(r->models[i]->version);
        if ((int)strlen(r->models[i]->profile) > wp)
            wp = (int)strlen(r->models[i]->profile);
    }
    printf("  %-*s  %-*s  %-19s  %8s  %9s  %s\n", wv, "version", wp, "profile",
           "created", "MAPE", "comm MAPE", "samples (train/val)");
    for (i = 0; i < r->n_models; i++) {
        const Shardd__V1__ModelInfo *m = r->models[i];

        snprintf(samples, sizeof(samples), "%llu/%llu",
                 (unsigned long long)m->train_samples,
                 (unsigned long long)m->validation_samples);
        printf("%c %-*s  %-*s  %-19s  %8s  %9s  %s\n", m->active ? '*' : ' ',
               wv, m->version, wp, m->profile,
               time_text(m->created_unix_ms, when, sizeof(when)),
               mape_text(m->validation_mape, mape, sizeof(mape)),
               mape_text(m->comm_validation_mape, comm, sizeof(comm)), samples);
    }
    printf("(* active; MAPE on held-out measured samples)\n");
    rv = finish_stdout();
out_response:
    shardd__v1__list_models_response__free_unpacked(r, NULL);
    return rv;
}

static int online_activate(struct online *on)
{
    Shardd__V1__ActivateModelRequest rq =
        SHARDD__V1__ACTIVATE_MODEL_REQUEST__INIT;
    Shardd__V1__ActivateModelResponse *r = NULL;
    int rv;

    rq.version = mstr(on->o->args[1]);
    rv = online_call(on, "/shardd.v1.Admin/ActivateModel", &rq.base,
                     &shardd__v1__activate_model_response__descriptor,
                     (ProtobufCMessage **)&r);
    if (rv != 0)
        return rv;
    if (on->o->json) {
        rv = print_json(&r->base);
    } else {
        printf("model %s is active for profile %s", rq.version,
               r->model != NULL ? r->model->profile : "?");
        if (r->previous_version[0] != '\0')
            printf(" (was %s)\n", r->previous_version);
        else
            printf(" (none was before)\n");
        rv = finish_stdout();
    }
    shardd__v1__activate_model_response__free_unpacked(r, NULL);
    return rv;
}

static int online_profiler(struct online *on)
{
    Shardd__V1__SetProfilerRequest rq = SHARDD__V1__SET_PROFILER_REQUEST__INIT;
    Shardd__V1__SetProfilerResponse *r = NULL;
    const char *what = on->o->args[1];
    char word[32];
    int rv;

    if (strcmp(what, "pause") != 0 && strcmp(what, "resume") != 0)
        return ctl_fail(CTL_EXIT_USAGE,
                        "profiler: \"%s\" is neither pause nor resume", what);
    rq.paused = strcmp(what, "pause") == 0;
    rv = online_call(on, "/shardd.v1.Admin/SetProfiler", &rq.base,
                     &shardd__v1__set_profiler_response__descriptor,
                     (ProtobufCMessage **)&r);
    if (rv != 0)
        return rv;
    if (on->o->json) {
        rv = print_json(&r->base);
    } else {
        printf("profiler: %s\n",
               enum_word(&shardd__v1__profiler_state__descriptor,
                         (int)r->profiler, word, sizeof(word)));
        rv = finish_stdout();
    }
    shardd__v1__set_profiler_response__free_unpacked(r, NULL);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* Jobs: retrain, job, and watching one                                    */

static bool job_terminal(Shardd__V1__JobState s)
{
    return s == SHARDD__V1__JOB_STATE__JOB_STATE_SUCCEEDED ||
           s == SHARDD__V1__JOB_STATE__JOB_STATE_FAILED ||
           s == SHARDD__V1__JOB_STATE__JOB_STATE_CANCELLED;
}

static void print_job(const Shardd__V1__Job *j)
{
    char kind[32], state[32], t1[32], t2[32], t3[32];

    printf("job %s: %s of profile %s, %s", j->id,
           enum_word(&shardd__v1__job_kind__descriptor, (int)j->kind, kind,
                     sizeof(kind)),
           j->profile,
           enum_word(&shardd__v1__job_state__descriptor, (int)j->state, state,
                     sizeof(state)));
    if (!job_terminal(j->state))
        printf(" (%.0f%%)", 100 * j->progress);
    printf("\n");
    if (j->message[0] != '\0')
        printf("  %s\n", j->message);
    printf("  created %s, started %s, finished %s\n",
           time_text(j->created_unix_ms, t1, sizeof(t1)),
           time_text(j->started_unix_ms, t2, sizeof(t2)),
           time_text(j->finished_unix_ms, t3, sizeof(t3)));
    if (j->result_model_version[0] != '\0')
        printf("  model: %s\n", j->result_model_version);
}

/*
 * Prints a job (human or JSON) and returns the exit status its state
 * gives: 1 for FAILED and CANCELLED (with the reason on stderr), 1 for a
 * watch that ended before the job did, else 0.
 */
static int report_job(const struct online *on, const Shardd__V1__Job *j,
                      bool watched)
{
    char state[32];
    int rv;

    if (on->o->json) {
        rv = print_json(&j->base);
    } else {
        print_job(j);
        rv = finish_stdout();
    }
    if (rv != 0)
        return rv;
    enum_word(&shardd__v1__job_state__descriptor, (int)j->state, state,
              sizeof(state));
    if (j->state == SHARDD__V1__JOB_STATE__JOB_STATE_FAILED ||
        j->state == SHARDD__V1__JOB_STATE__JOB_STATE_CANCELLED)
        return ctl_fail(1, "job %s %s: %s", j->id, state,
                        j->message[0] ? j->message : "(no reason given)");
    if (watched && !job_terminal(j->state))
        return ctl_fail(1, "job %s: the watch ended while it was %s", j->id,
                        state);
    return 0;
}

/* What a watch keeps between messages. */
struct watch {
    Shardd__V1__Job *last; /* owned */
    bool tty;
    int shown_state, shown_decile;
    struct sd_diag d;
};

/* A progress bar on a terminal; a line per change of state or 10 % in
 * logs. */
static void show_job_progress(struct watch *w, const Shardd__V1__Job *j)
{
    int width = 30, fill, decile;
    double pr = j->progress < 0 ? 0 : j->progress > 1 ? 1 : j->progress;
    char state[32];

    enum_word(&shardd__v1__job_state__descriptor, (int)j->state, state,
              sizeof(state));
    fill = (int)(width * pr);
    decile = (int)(10 * pr);
    if (w->tty) {
        fprintf(stderr, "\r[%.*s%*s] %3.0f%% %-9s %-32.32s", fill,
                "==============================", width - fill, "", 100 * pr,
                state, j->message);
        if (job_terminal(j->state))
            fputc('\n', stderr);
    } else if ((int)j->state != w->shown_state || decile != w->shown_decile) {
        fprintf(stderr, "job %s: %s %.0f%%%s%s\n", j->id, state, 100 * pr,
                j->message[0] ? ": " : "", j->message);
    }
    w->shown_state = (int)j->state;
    w->shown_decile = decile;
}

static int on_job_message(void *ctx, const uint8_t *msg, size_t len)
{
    struct watch *w = ctx;
    Shardd__V1__Job *j = shardd__v1__job__unpack(NULL, len, msg);

    if (j == NULL)
        return sd_diag_set(&w->d, SD_EFORMAT,
                           "WatchJob: a message is not a valid Job");
    show_job_progress(w, j);
    if (w->last != NULL)
        shardd__v1__job__free_unpacked(w->last, NULL);
    w->last = j;
    return 0;
}

/* Follows job id until it ends (WatchJob), then reports it. */
static int watch_job(struct online *on, const char *id)
{
    Shardd__V1__WatchJobRequest rq = SHARDD__V1__WATCH_JOB_REQUEST__INIT;
    struct watch w = {NULL, false, -1, -1, {{0}}};
    struct sd_diag d;
    size_t len;
    uint8_t *buf;
    int rv, status;
    /* A watch lasts as long as the job unless --timeout-s says otherwise. */
    int64_t deadline_ms =
        on->o->timeout_s > 0 ? (int64_t)ceil(on->o->timeout_s * 1e3) : 0;

    rq.id = mstr(id);
    len = protobuf_c_message_get_packed_size(&rq.base);
    buf = malloc(len ? len : 1);
    if (buf == NULL)
        return ctl_fail(1, "job: out of memory");
    protobuf_c_message_pack(&rq.base, buf);
    w.tty = isatty(STDERR_FILENO) != 0;
    rv = rpc_client_stream(on->cli, "/shardd.v1.Admin/WatchJob", buf, len,
                           deadline_ms, on_job_message, &w, &status, &d);
    free(buf);
    if (w.tty && w.last != NULL && !job_terminal(w.last->state))
        fputc('\n', stderr); /* end the bar's line */
    if (rv != 0 && status == RPC_CANCELLED && w.d.msg[0] != '\0')
        rv = ctl_fail(1, "%s", w.d.msg);
    else if (rv != 0)
        rv = ctl_fail(rpc_exit_code(status), "%s", d.msg);
    else if (w.last == NULL)
        rv = ctl_fail(1, "job %s: the watch ended without any state", id);
    else
        rv = report_job(on, w.last, true);
    if (w.last != NULL)
        shardd__v1__job__free_unpacked(w.last, NULL);
    return rv;
}

static int online_job(struct online *on)
{
    Shardd__V1__GetJobRequest rq = SHARDD__V1__GET_JOB_REQUEST__INIT;
    Shardd__V1__Job *j = NULL;
    int rv;

    if (on->o->watch)
        return watch_job(on, on->o->args[1]);
    rq.id = mstr(on->o->args[1]);
    rv = online_call(on, "/shardd.v1.Admin/GetJob", &rq.base,
                     &shardd__v1__job__descriptor, (ProtobufCMessage **)&j);
    if (rv != 0)
        return rv;
    rv = report_job(on, j, false);
    shardd__v1__job__free_unpacked(j, NULL);
    return rv;
}

static int online_retrain(struct online *on)
{
    Shardd__V1__RetrainRequest rq = SHARDD__V1__RETRAIN_REQUEST__INIT;
    Shardd__V1__Job *j = NULL;
    int rv;

    rq.profile = mstr(on->o->profile != NULL ? on->o->profile : "");
    rq.force = on->o->force;
    rv = online_call(on, "/shardd.v1.Admin/Retrain", &rq.base,
                     &shardd__v1__job__descriptor, (ProtobufCMessage **)&j);
    if (rv != 0)
        return rv;
    if (on->o->wait && !job_terminal(j->state)) {
        if (!on->o->json)
            fprintf(stderr, "job %s started; watching it\n", j->id);
        rv = watch_job(on, j->id);
    } else {
        rv = report_job(on, j, false);
    }
    shardd__v1__job__free_unpacked(j, NULL);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* health                                                                  */

static int online_health(struct online *on)
{
    Grpc__Health__V1__HealthCheckRequest rq =
        GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    Grpc__Health__V1__HealthCheckResponse *r = NULL;
    const ProtobufCEnumValue *ev;
    const char *name;
    int rv;

    rq.service = mstr(on->o->nargs > 1 ? on->o->args[1] : "");
    rv = online_call(on, "/grpc.health.v1.Health/Check", &rq.base,
                     &grpc__health__v1__health_check_response__descriptor,
                     (ProtobufCMessage **)&r);
    if (rv != 0)
        return rv;
    ev = protobuf_c_enum_descriptor_get_value(
        &grpc__health__v1__health_check_response__serving_status__descriptor,
        (int)r->status);
    name = ev != NULL ? ev->name : "UNKNOWN";
    if (on->o->json) {
        rv = print_json(&r->base);
    } else {
        printf("%s\n", name);
        rv = finish_stdout();
    }
    if (rv == 0 &&
        r->status !=
            GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING)
        rv = ctl_fail(1, "shardd at %s is %s%s%s", on->addr, name,
                      rq.service[0] ? " for " : "", rq.service);
    grpc__health__v1__health_check_response__free_unpacked(r, NULL);
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
    rpc_client_close(on.cli);
    return rv;
}
