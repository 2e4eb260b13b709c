/*
 * The daemon's service without gRPC: request bytes in, response bytes out,
 * as the transport calls it (daemon/service.h).  A real service on a real
 * store in a fresh directory, with the embedded model, the cpu backend and
 * the profiler off unless a test turns it on.
 *
 *  - Plan and Estimate round trips; an unset PlanOptions means the
 *    documented defaults (column splits allowed); field-named refusals.
 *  - The plan cache: hits, eviction at the entry limit, a limit of 0, a plan
 *    cut short by the deadline not cached, trimming on reload; a hit is the
 *    stored reply byte for byte but for cache_hit; a model never answers
 *    from another model's plans.
 *  - Retraining: the gate keeps a worse model out unless forced, and the
 *    job moves QUEUED -> RUNNING -> SUCCEEDED.
 *  - Model hot-swap while other threads plan: every plan succeeds, each on
 *    one of the two models.
 *  - The profiler worker's proposal queue, full, keeps every entry whole;
 *    a request (or a pause) arriving while a sample is being timed drops
 *    that sample, and the worker measures again after; with no request
 *    yet it waits profiler_idle_ms from its start.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "grpc/health/v1/health.pb-c.h"
#include "grpc/reflection/v1alpha/reflection.pb-c.h"
#include "harness.h"
#include "jobs_int.h"
#include "service_int.h"
#include "shardd/log.h"
#include "shardd/v1/admin.pb-c.h"
#include "wire.h"

#define NTABLES 24   /* a request's tables */
#define POOL    1000 /* the tables of the longest search */
#define NDEV    4

static char dir[64];

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}
static struct table pool[POOL];

/* A fresh data directory and a configuration for it. */
static void setup(struct sd_config *c)
{
    snprintf(dir, sizeof(dir), "/tmp/test_service.XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        exit(1);
    }
    conf_default(c);
    free(c->data_dir);
    c->data_dir = strdup(dir);
    c->backend = CONF_BACKEND_CPU;
    c->profiler = false;
    c->retrain_every_samples = 0;
    c->retrain_every_hours = 0;
    c->retrain_min_interval_s = 0;
    c->backup_every_hours = 0;
    c->search_threads = 1;
    /* Policy retrains are test_dreamshard.py's: here they would only slow
     * every activation down. */
    c->policy_after_activation = false;
    /* One member a retrain but in test_retrain_ensemble(): the gate's and
     * the limits' tests retrain often. */
    c->retrain_ensemble = 1;
}

static void teardown(struct svc *s, struct sd_config *c)
{
    char cmd[128];

    svc_close(s);
    conf_free(c);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* Removes the data directory of a test that opened no service. */
static void teardown_dir(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

static struct svc *open_svc(const struct sd_config *c)
{
    struct svc *s = NULL;
    struct sd_diag d;

    if (svc_open(c, &s, &d) != 0) {
        fprintf(stderr, "svc_open: %s\n", d.msg);
        exit(1);
    }
    return s;
}

/* ---------------------------------------------------------------------- */
/* Requests as bytes                                                       */

/* The options a request carries; NULL fields are left unset. */
struct ask {
    size_t ntables;
    uint64_t mem_bytes;
    bool no_options; /* send no PlanOptions at all */
    const char *algorithm;
    uint64_t seed;
    bool whole_tables_only;
    const int32_t *pins;
    const char *profile; /* NULL: the server's default */
    int32_t ndevices;    /* 0: NDEV */
    double quantile;     /* options.quantile where > 0; else unset */
};

/* The request bytes of a (owned by the caller, free()). */
static int ask_pack(const struct ask *a, uint8_t **req, size_t *len,
                    struct sd_diag *d)
{
    Shardd__V1__PlanRequest rq = SHARDD__V1__PLAN_REQUEST__INIT;
    Shardd__V1__PlanOptions po = SHARDD__V1__PLAN_OPTIONS__INIT;
    Shardd__V1__EnsembleQuantile q = SHARDD__V1__ENSEMBLE_QUANTILE__INIT;
    struct wire_arena arena = WIRE_ARENA_INIT;
    struct topology t;
    int rv;

    topology_default(&t, a->ndevices ? a->ndevices : NDEV,
                     a->mem_bytes ? a->mem_bytes : (8ull << 30));
    t.batch_size = 0; /* the model's */
    rq.n_tables = a->ntables;
    rq.tables = wire_tables_out(&arena, pool, a->ntables);
    rq.topology = wire_topology_out(&arena, &t);
    if (!a->no_options) {
        po.algorithm = (char *)(a->algorithm ? a->algorithm : "");
        po.seed = a->seed;
        po.whole_tables_only = a->whole_tables_only;
        po.profile = (char *)(a->profile ? a->profile : "");
        if (a->pins != NULL)
            po.constraints = wire_pins_out(&arena, a->pins, pool, a->ntables);
        if (a->quantile > 0) {
            q.value = a->quantile;
            po.quantile = &q;
        }
        rq.options = &po;
    }
    rv = wire_pack(&rq.base, req, len, d);
    wire_arena_free(&arena);
    return rv;
}

/* The reply bytes of a (owned by the caller, free()). */
static int plan_raw(struct svc *s, const struct ask *a,
                    const struct svc_call *call, uint8_t **resp,
                    size_t *resp_len, struct sd_diag *d)
{
    uint8_t *req = NULL;
    size_t len;
    int rv;

    rv = ask_pack(a, &req, &len, d);
    if (rv != 0)
        return rv;
    rv = svc_plan(s, call, req, len, resp, resp_len, d);
    free(req);
    return rv;
}

static int plan_bytes(struct svc *s, const struct ask *a,
                      const struct svc_call *call,
                      Shardd__V1__PlanResponse **out, struct sd_diag *d)
{
    uint8_t *resp = NULL;
    size_t resp_len;
    int rv;

    rv = plan_raw(s, a, call, &resp, &resp_len, d);
    if (rv != 0)
        return rv;
    *out = shardd__v1__plan_response__unpack(NULL, resp_len, resp);
    free(resp);
    return *out != NULL ? 0 : SD_EFORMAT;
}

static Shardd__V1__PlanResponse *plan_ok(struct svc *s, const struct ask *a)
{
    Shardd__V1__PlanResponse *r = NULL;
    struct sd_diag d;
    int rv = plan_bytes(s, a, NULL, &r, &d);

    if (rv != 0)
        fprintf(stderr, "plan: %s: %s\n", sd_err_name(rv), d.msg);
    CHECK(rv == 0);
    return r;
}

/* Every table's shards cover its columns once, on existing devices. */
static bool covers(const Shardd__V1__PlanResponse *r, size_t n)
{
    size_t i, k;

    if (r->n_tables != n || r->n_devices != NDEV)
        return false;
    for (i = 0; i < n; i++) {
        int32_t next = 0;

        if (strcmp(r->tables[i]->table, pool[i].name) != 0)
            return false;
        for (k = 0; k < r->tables[i]->n_shards; k++) {
            const Shardd__V1__Shard *sh = r->tables[i]->shards[k];

            if (sh->col_offset != next || sh->device < 0 || sh->device >= NDEV)
                return false;
            next += sh->col_width;
        }
        if (next != pool[i].dim)
            return false;
    }
    return true;
}

/* ---------------------------------------------------------------------- */
/* Plan and Estimate                                                       */

/*
 * A Plan's lane is read from its bytes: tables x num_devices against
 * small_search_work.  The topology last in the message, with per-device
 * capacities (a packed, length-delimited field inside it): the skim must
 * stop at the topology's end, not at the end of the capacities (it read
 * past the message; ASan saw it).
 */
static void test_plan_lane(struct svc *s, struct sd_config *c)
{
    Shardd__V1__PlanRequest rq = SHARDD__V1__PLAN_REQUEST__INIT;
    struct wire_arena arena = WIRE_ARENA_INIT;
    uint64_t caps[NDEV];
    struct topology t;
    struct sd_diag d;
    uint8_t *req = NULL, *exact;
    size_t len = 0;
    int r;

    topology_default(&t, NDEV, 8ull << 30);
    for (r = 0; r < NDEV; r++)
        caps[r] = (uint64_t)(r + 1) << 30;
    t.mem_by_device = caps;
    rq.n_tables = 6;
    rq.tables = wire_tables_out(&arena, pool, 6);
    rq.topology = wire_topology_out(&arena, &t);
    CHECK(rq.topology != NULL && rq.topology->n_mem_bytes_by_device == NDEV);
    CHECK(wire_pack(&rq.base, &req, &len, &d) == 0);
    wire_arena_free(&arena);
    exact = malloc(len); /* exactly the message: a read past it is caught */
    memcpy(exact, req, len);
    c->small_search_work = 6 * NDEV;
    CHECK(svc_reconfigure(s, c) == 0);
    CHECK(svc_plan_lane(s, exact, len) == SVC_LANE_SMALL);
    c->small_search_work = 6 * NDEV - 1;
    CHECK(svc_reconfigure(s, c) == 0);
    CHECK(svc_plan_lane(s, exact, len) == SVC_LANE_BIG);
    c->small_search_work = 100000;
    CHECK(svc_reconfigure(s, c) == 0);
    free(exact);
    free(req);
}

static void test_plan_round_trip(struct svc *s)
{
    struct ask a = {.ntables = NTABLES};
    Shardd__V1__PlanResponse *r1 = plan_ok(s, &a), *r2;

    if (r1 == NULL)
        return;
    CHECK(covers(r1, NTABLES));
    CHECK(strcmp(r1->algorithm, "neuroshard") == 0);
    CHECK(strlen(r1->request_hash) == 16);
    CHECK(!r1->cache_hit);
    CHECK(r1->plan_cost_ms > 0 && isfinite(r1->plan_cost_ms));
    CHECK(strcmp(r1->basis->model_version, "embedded") == 0);
    /* The same request again: the cache answers, with the same plan. */
    r2 = plan_ok(s, &a);
    if (r2 != NULL) {
        CHECK(r2->cache_hit);
        CHECK(strcmp(r2->request_hash, r1->request_hash) == 0);
        CHECK(r2->plan_cost_ms == r1->plan_cost_ms);
        shardd__v1__plan_response__free_unpacked(r2, NULL);
    }
    shardd__v1__plan_response__free_unpacked(r1, NULL);
}

/*
 * A request without PlanOptions is the request with every option at its
 * default (docs/api.md): same hash, same plan.  It used to plan whole
 * tables only.
 */
static void test_unset_options_are_defaults(struct svc *s)
{
    struct ask none = {.ntables = NTABLES, .no_options = true, .seed = 0};
    struct ask dflt = {.ntables = NTABLES};
    Shardd__V1__PlanResponse *a = plan_ok(s, &none), *b = plan_ok(s, &dflt);

    if (a != NULL && b != NULL) {
        CHECK(strcmp(a->request_hash, b->request_hash) == 0);
        CHECK(a->plan_cost_ms == b->plan_cost_ms);
    }
    shardd__v1__plan_response__free_unpacked(a, NULL);
    shardd__v1__plan_response__free_unpacked(b, NULL);
}

static int estimate_bytes(struct svc *s, Shardd__V1__TablePlacement **pl,
                          size_t npl, Shardd__V1__EstimateResponse **out,
                          struct sd_diag *d)
{
    Shardd__V1__EstimateRequest rq = SHARDD__V1__ESTIMATE_REQUEST__INIT;
    struct wire_arena arena = WIRE_ARENA_INIT;
    struct topology t;
    uint8_t *req = NULL, *resp = NULL;
    size_t len, resp_len;
    int rv;

    topology_default(&t, NDEV, 8ull << 30);
    t.batch_size = 0;
    rq.n_tables = NTABLES;
    rq.tables = wire_tables_out(&arena, pool, NTABLES);
    rq.topology = wire_topology_out(&arena, &t);
    rq.n_placement = npl;
    rq.placement = pl;
    rv = wire_pack(&rq.base, &req, &len, d);
    wire_arena_free(&arena);
    if (rv != 0)
        return rv;
    rv = svc_estimate(s, NULL, req, len, &resp, &resp_len, d);
    free(req);
    if (rv == 0) {
        *out = shardd__v1__estimate_response__unpack(NULL, resp_len, resp);
        rv = *out != NULL ? 0 : SD_EFORMAT;
    }
    free(resp);
    return rv;
}

static void test_estimate(struct svc *s)
{
    struct ask a = {.ntables = NTABLES};
    Shardd__V1__PlanResponse *r = plan_ok(s, &a);
    Shardd__V1__EstimateResponse *e = NULL;
    Shardd__V1__TablePlacement *second;
    Shardd__V1__Shard *sh;
    struct sd_diag d;
    int32_t width;
    int rv;

    if (r == NULL)
        return;
    /* The plan's own placement costs what the plan said. */
    rv = estimate_bytes(s, r->tables, r->n_tables, &e, &d);
    CHECK(rv == 0);
    if (rv == 0) {
        CHECK_NEAR(e->plan_cost_ms, r->plan_cost_ms, 1e-9);
        CHECK(e->fits_memory);
        shardd__v1__estimate_response__free_unpacked(e, NULL);
    }
    /* A table placed twice is named with the request's field. */
    second = r->tables[1];
    r->tables[1] = r->tables[0];
    rv = estimate_bytes(s, r->tables, r->n_tables, &e, &d);
    CHECK(rv == SD_EINVAL);
    CHECK(strstr(d.msg, "placement[1]: table") == d.msg);
    CHECK(strstr(d.msg, "is placed twice") != NULL);
    r->tables[1] = second;
    /* Columns left out: the planner's coverage check, named "placement". */
    sh = r->tables[0]->shards[r->tables[0]->n_shards - 1];
    width = sh->col_width;
    sh->col_width = width - 4 > 0 ? width - 4 : width;
    if (width > 4) {
        rv = estimate_bytes(s, r->tables, r->n_tables, &e, &d);
        CHECK(rv == SD_EINVAL);
        CHECK(strncmp(d.msg, "placement: table \"", 18) == 0);
        CHECK(strstr(d.msg, "columns placed") != NULL);
    }
    sh->col_width = width;
    shardd__v1__plan_response__free_unpacked(r, NULL);
}

/*
 * The reference profile (NeuroShard's released models) answers when a
 * request names it, with its learned comm models at 4 devices, and plans
 * as the library does with that set; a request naming no profile gets the
 * default, never the reference.
 */
/*
 * A server whose own profile is the H200's serves the model compiled in for
 * it by default, as its embedded one (what a rollback returns to), with its
 * compiled-in ensemble, and the cpu default still answers when named; its
 * compiled-in policy answers for it, as the cpu default's does for that one.
 * models_init() on a real store, as open_parts() calls it with the profile the
 * backend names.
 */
static void test_hardware_model(void)
{
    const struct cost_net *hw = net_compiled(NET_H200_PROFILE, NULL);
    const struct cost_net *cpu = net_embedded(NULL);
    char db[96], prev[MODELS_VERSION_MAX];
    struct store *st = NULL;
    struct store_profile prof;
    struct models ms;
    struct jobs jb;
    struct dmodel *m = NULL;
    struct dpolicy *pol = NULL;
    struct sd_diag d = {{0}};

    memset(&prof, 0, sizeof(prof));
    memset(&jb, 0, sizeof(jb));
    CHECK(hw != NULL && cpu != NULL && hw != cpu);
    snprintf(db, sizeof(db), "%s/hardware.db", dir);
    CHECK(store_open(db, 0, &st, &d) == 0);
    if (hw == NULL || cpu == NULL || st == NULL)
        goto out_store;
    CHECK(models_init(&ms, st, NET_H200_PROFILE, 1024, NULL, &d) == 0);
    CHECK(models_acquire(&ms, NULL, &m, &d) == 0);
    CHECK(m != NULL && m->net == hw && strcmp(m->version, "embedded") == 0);
    /* With its own ensemble: its plans carry a spread, and a quantile
     * plans. */
    CHECK(m != NULL && m->ens != NULL && m->ens == net_ensemble_compiled(hw) &&
          m->ens != net_ensemble_embedded(NULL));
    dmodel_release(m);
    CHECK(models_acquire(&ms, cpu->profile, &m, &d) == 0);
    CHECK(m != NULL && m->net == cpu && m->ens == net_ensemble_embedded(NULL));
    dmodel_release(m);
    /* The rollback keeps the H200's model answering by default. */
    CHECK(models_activate_embedded(&ms, st, prev, &d) == 0);
    CHECK(strcmp(prev, "embedded") == 0);
    CHECK(models_acquire(&ms, NULL, &m, &d) == 0);
    CHECK(m != NULL && m->net == hw);
    dmodel_release(m);
    /* Its policy is compiled in too: dreamshard serves at once, and a
     * policy retrain has nothing to do. */
    CHECK(models_acquire(&ms, NULL, &m, &d) == 0);
    pol = NULL;
    CHECK(m != NULL && models_acquire_policy(&ms, m, &pol, &d) == 0);
    CHECK(pol != NULL && pol->embedded && pol->pn == policy_compiled(hw, NULL));
    dpolicy_release(pol);
    dmodel_release(m);
    jb.models = &ms;
    snprintf(prof.name, sizeof(prof.name), "%s", NET_H200_PROFILE);
    CHECK(jobs__policy_check(&jb, &prof, &d) == SD_ESTATE);
    models_destroy(&ms);
    /* Any other hardware: the cpu default, as before. */
    CHECK(models_init(&ms, st, "cuda/NVIDIA H100 80GB HBM3/4096", 1024, NULL,
                      &d) == 0);
    CHECK(models_acquire(&ms, NULL, &m, &d) == 0);
    CHECK(m != NULL && m->net == cpu);
    dmodel_release(m);
    /* The cpu default's policy is compiled in: nothing to retrain. */
    snprintf(prof.name, sizeof(prof.name), "%s", cpu->profile);
    CHECK(jobs__policy_check(&jb, &prof, &d) == SD_ESTATE);
    CHECK(strstr(d.msg, "compiled in") != NULL);
    models_destroy(&ms);
out_store:
    store_close(st);
}

static void test_reference_profile(struct svc *s)
{
    struct ask dflt = {.ntables = NTABLES};
    struct ask ref = {.ntables = NTABLES, .profile = NET_REFERENCE_PROFILE};
    Shardd__V1__PlanResponse *a = plan_ok(s, &dflt), *b = plan_ok(s, &ref);
    const struct cost_net *net = net_reference(NULL);
    struct net_cost_model ncm;
    struct net_comm_model ncomm;
    struct plan_options o;
    struct topology t;
    struct sd_diag d = {{0}};
    struct plan p;

    if (a == NULL || b == NULL || net == NULL) {
        CHECK(0);
        goto out;
    }
    CHECK(strcmp(a->basis->profile, NET_REFERENCE_PROFILE) != 0);
    CHECK(strcmp(a->basis->comm_model, "alpha_beta") == 0);
    CHECK(a->basis->comm_source ==
          SHARDD__V1__COST_SOURCE__COST_SOURCE_ANALYTIC);
    CHECK(strcmp(b->basis->profile, NET_REFERENCE_PROFILE) == 0);
    CHECK(strcmp(b->basis->model_version, "reference") == 0);
    CHECK(strcmp(b->basis->comm_model,
                 "neural_comm:" NET_REFERENCE_PROFILE " (4 devices)") == 0);
    CHECK(b->basis->comm_source ==
          SHARDD__V1__COST_SOURCE__COST_SOURCE_LEARNED);
    /* The same plan in-process, with the same set and topology. */
    topology_default(&t, NDEV, 8ull << 30);
    t.batch_size = net->batch_size;
    CHECK(net_comm_model_init(&ncomm, net, &t));
    t.comm = &ncomm.cm;
    net_cost_model_init(&ncm, net);
    plan_options_default(&o);
    o.alg = PLAN_ALG_NEUROSHARD;
    o.net = net;
    o.threads = 1;
    if (CHECK_OK(plan_run(pool, NTABLES, &t, &o, &ncm.cm, &p, &d), d.msg)) {
        CHECK_NEAR(b->plan_cost_ms, p.cost_ms, 1e-9);
        plan_destroy(&p);
    }
out:
    if (a != NULL)
        shardd__v1__plan_response__free_unpacked(a, NULL);
    if (b != NULL)
        shardd__v1__plan_response__free_unpacked(b, NULL);
}

static void test_pins_named(struct svc *s)
{
    int32_t pins[NTABLES];
    struct ask a = {.ntables = NTABLES, .pins = pins};
    Shardd__V1__PlanResponse *r = NULL;
    struct sd_diag d;
    size_t i;
    int rv;

    /* Every table pinned to device 0, which cannot hold them all. */
    for (i = 0; i < NTABLES; i++)
        pins[i] = 0;
    a.mem_bytes = table_bytes(&pool[0], pool[0].dim) + 1;
    rv = plan_bytes(s, &a, NULL, &r, &d);
    CHECK(rv == SD_ENOSPACE);
    CHECK(strncmp(d.msg, "options.constraints.pins: device 0: ", 36) == 0);
    /* A device out of range, named by its pin's index. */
    pins[3] = NDEV;
    rv = plan_bytes(s, &a, NULL, &r, &d);
    CHECK(rv == SD_EINVAL);
    CHECK(strstr(d.msg, "options.constraints.pins[3]: device 4 is not in") ==
          d.msg);
}

static void test_health(struct svc *s)
{
    Grpc__Health__V1__HealthCheckRequest rq =
        GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    Grpc__Health__V1__HealthCheckResponse *r;
    uint8_t *req = NULL, *resp = NULL;
    size_t len, resp_len;
    struct sd_diag d;
    int k;

    for (k = 0; k < 2; k++) {
        if (k == 1)
            svc_set_draining(s);
        CHECK(wire_pack(&rq.base, &req, &len, &d) == 0);
        CHECK(svc_health(s, NULL, req, len, &resp, &resp_len, &d) == 0);
        r = grpc__health__v1__health_check_response__unpack(NULL, resp_len,
                                                            resp);
        CHECK(
            r != NULL &&
            (int)r->status ==
                (k == 0
                     ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                     : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING));
        grpc__health__v1__health_check_response__free_unpacked(r, NULL);
        free(req);
        free(resp);
    }
}

/* ---------------------------------------------------------------------- */
/* The plan cache                                                          */

static bool plan_hit(struct svc *s, uint64_t seed)
{
    struct ask a = {.ntables = 8, .algorithm = "random", .seed = seed};
    Shardd__V1__PlanResponse *r = plan_ok(s, &a);
    bool hit = r != NULL && r->cache_hit;

    shardd__v1__plan_response__free_unpacked(r, NULL);
    return hit;
}

/*
 * A reflection request with an unknown field of the invalid tag 0 (a
 * non-canonical varint, which protobuf-c keeps as unknown): the answer
 * echoes the request without it, so it still parses (fuzz_plan_request
 * found the unreadable answer; the input is in its corpus).
 */
static void test_reflection_unknown_field(struct svc *s)
{
    static const uint8_t req[] = {0x80, 0x00, 0x00};
    Grpc__Reflection__V1alpha__ServerReflectionResponse *r;
    uint8_t *resp = NULL;
    size_t len = 0;
    struct sd_diag d;

    CHECK(svc_reflect(s, req, sizeof(req), &resp, &len, &d) == 0);
    r = grpc__reflection__v1alpha__server_reflection_response__unpack(NULL, len,
                                                                      resp);
    CHECK(r != NULL && r->original_request != NULL &&
          r->original_request->base.n_unknown_fields == 0);
    if (r != NULL)
        grpc__reflection__v1alpha__server_reflection_response__free_unpacked(
            r, NULL);
    free(resp);
}

static void test_cache_policy(void)
{
    struct sd_config c;
    struct svc *s;
    Shardd__V1__PlanResponse *r = NULL;
    struct svc_call call = {INT64_MAX, NULL, NULL};
    struct ask big = {.ntables = NTABLES};
    struct sd_diag d;
    int64_t ms;
    int rv, tries;

    setup(&c);
    c.plan_cache_entries = 2;
    s = open_svc(&c);
    /* Three requests into two entries: the least recently used goes. */
    CHECK(!plan_hit(s, 1));
    CHECK(!plan_hit(s, 2));
    CHECK(plan_hit(s, 1));  /* 1 is now the most recent */
    CHECK(!plan_hit(s, 3)); /* evicts 2 */
    CHECK(!plan_hit(s, 2)); /* evicts 1 */
    CHECK(plan_hit(s, 3));
    /* A reload to one entry keeps only the most recently used: 3. */
    c.plan_cache_entries = 1;
    CHECK(svc_reconfigure(s, &c) == 0);
    CHECK(plan_hit(s, 3));
    CHECK(!plan_hit(s, 2));
    /* A limit of 0: nothing is kept. */
    c.plan_cache_entries = 0;
    CHECK(svc_reconfigure(s, &c) == 0);
    CHECK(!plan_hit(s, 5));
    CHECK(!plan_hit(s, 5));
    /* A plan cut short by the call's deadline is not the request's answer:
     * not cached.  The deadline must leave time to read the request (or
     * the call is refused before any search, SD_ETIMEDOUT) but too little
     * for a search of 1,000 tables on 64 devices (some 40 ms on one
     * thread, more on a loaded machine), after the daemon's 50 ms reply
     * margin.  Where that window is depends on the machine: from 70 ms the
     * deadline grows by a quarter while calls are refused and shrinks by a
     * fifth where a search finished in time (that plan, complete, is
     * cached: the next try asks with another seed, another request). */
    c.plan_cache_entries = 8;
    CHECK(svc_reconfigure(s, &c) == 0);
    big.ntables = POOL;
    big.ndevices = 64;
    for (ms = 70, tries = 0; tries < 40; tries++) {
        big.seed = 100 + (uint64_t)tries;
        call.deadline_ms = sd_now_ms() + ms;
        rv = plan_bytes(s, &big, &call, &r, &d);
        if (rv == 0 && r->search->time_budget_exhausted)
            break;
        if (rv == 0) {
            shardd__v1__plan_response__free_unpacked(r, NULL);
            ms = ms * 4 / 5;
        } else {
            ms = ms * 5 / 4;
        }
        CHECK(rv == 0 || rv == SD_ETIMEDOUT);
    }
    CHECK(tries < 40);
    if (tries < 40) {
        CHECK(r->search->time_budget_exhausted);
        shardd__v1__plan_response__free_unpacked(r, NULL);
        /* ... so the same request without a deadline searches again. */
        r = plan_ok(s, &big);
        CHECK(r != NULL && !r->cache_hit && !r->search->time_budget_exhausted);
        shardd__v1__plan_response__free_unpacked(r, NULL);
        CHECK(plan_hit(s, 0) == false); /* a random plan: another request */
        r = plan_ok(s, &big);
        CHECK(r != NULL && r->cache_hit);
        shardd__v1__plan_response__free_unpacked(r, NULL);
    }
    teardown(s, &c);
}

static int activate_bytes(struct svc *s, const char *version);

/* A reply, as bytes. */
struct reply {
    uint8_t *b;
    size_t n;
    bool hit;
    char model[32];
};

static void reply_of(struct svc *s, const struct ask *a, struct reply *r)
{
    Shardd__V1__PlanResponse *m = NULL;
    struct sd_diag d;

    memset(r, 0, sizeof(*r));
    CHECK(plan_raw(s, a, NULL, &r->b, &r->n, &d) == 0);
    if (r->b != NULL)
        m = shardd__v1__plan_response__unpack(NULL, r->n, r->b);
    CHECK(m != NULL);
    if (m == NULL)
        return;
    r->hit = m->cache_hit;
    snprintf(r->model, sizeof(r->model), "%s", m->basis->model_version);
    shardd__v1__plan_response__free_unpacked(m, NULL);
}

/* Whether two replies are the same bytes once cache_hit is cleared in the
 * second (a hit is the stored reply, search figures and hash included). */
static bool same_but_hit(const struct reply *a, const struct reply *b)
{
    Shardd__V1__PlanResponse *m;
    uint8_t *again = NULL;
    size_t n = 0;
    bool same;
    struct sd_diag d;

    if (a->b == NULL || b->b == NULL)
        return false; /* a call that failed (reply_of() said so) */
    m = shardd__v1__plan_response__unpack(NULL, b->n, b->b);
    if (m == NULL)
        return false;
    m->cache_hit = false;
    same = wire_pack(&m->base, &again, &n, &d) == 0 && n == a->n &&
           memcmp(again, a->b, n) == 0;
    free(again);
    shardd__v1__plan_response__free_unpacked(m, NULL);
    return same;
}

/*
 * A hit is the stored answer, byte for byte apart from cache_hit, and a
 * model answers only from its own plans: after an activation the same
 * request is planned again by the new model; activating the first model
 * again brings its own plan back.  Runs where stored model 1 exists (after
 * test_retrain_gate).
 */
static void test_cache_keys_on_model(struct svc *s)
{
    struct ask a = {.ntables = 12, .seed = 4242};
    struct reply first, hit, other, other_hit, back;

    CHECK(activate_bytes(s, "embedded") == 0);
    reply_of(s, &a, &first);
    reply_of(s, &a, &hit);
    CHECK(!first.hit && hit.hit);
    CHECK(strcmp(first.model, "embedded") == 0);
    CHECK(strcmp(hit.model, "embedded") == 0);
    CHECK(same_but_hit(&first, &hit));

    CHECK(activate_bytes(s, "1") == 0);
    reply_of(s, &a, &other);
    CHECK(!other.hit && strcmp(other.model, "1") == 0);
    reply_of(s, &a, &other_hit);
    CHECK(other_hit.hit && strcmp(other_hit.model, "1") == 0);
    CHECK(same_but_hit(&other, &other_hit));

    CHECK(activate_bytes(s, "embedded") == 0);
    reply_of(s, &a, &back);
    CHECK(back.hit && strcmp(back.model, "embedded") == 0);
    CHECK(same_but_hit(&first, &back));
    free(first.b);
    free(hit.b);
    free(other.b);
    free(other_hit.b);
    free(back.b);
}

/*
 * The lane of a Plan comes from its bytes, within them: a topology with
 * per-device capacities (a packed, length-delimited field) is read to its
 * end and no further.  The bytes after the request (here a field 1 varint
 * of 65535 that would read as num_devices) are not the request's.
 */
static void test_lane_reads_within(struct svc *s)
{
    static const uint8_t tail[] = {0x08, 0xff, 0xff, 0x03};
    Shardd__V1__PlanRequest rq = SHARDD__V1__PLAN_REQUEST__INIT;
    Shardd__V1__Topology topo = SHARDD__V1__TOPOLOGY__INIT;
    struct wire_arena arena = WIRE_ARENA_INIT;
    uint64_t caps[2] = {8ull << 30, 4ull << 30};
    uint8_t *req = NULL, *buf;
    size_t len = 0;
    struct sd_diag d;

    rq.n_tables = 10;
    rq.tables = wire_tables_out(&arena, pool, 10);
    topo.num_devices = 2;
    topo.n_mem_bytes_by_device = 2;
    topo.mem_bytes_by_device = caps;
    rq.topology = &topo; /* the last field: the tail follows it */
    CHECK(wire_pack(&rq.base, &req, &len, &d) == 0);
    buf = malloc(len + sizeof(tail));
    CHECK(buf != NULL && req != NULL);
    if (buf != NULL && req != NULL) {
        memcpy(buf, req, len);
        memcpy(buf + len, tail, sizeof(tail));
        /* 10 tables x 2 devices: small (the default limit is 100000). */
        CHECK(svc_plan_lane(s, buf, len) == SVC_LANE_SMALL);
    }
    free(buf);
    free(req);
    req = NULL;
    /* 10 tables x 20000 devices: big. */
    topo.num_devices = 20000;
    CHECK(wire_pack(&rq.base, &req, &len, &d) == 0);
    CHECK(req != NULL && svc_plan_lane(s, req, len) == SVC_LANE_BIG);
    free(req);
    wire_arena_free(&arena);
}

/* ---------------------------------------------------------------------- */
/* Retraining and the hot swap                                             */

/* Stores n samples of the embedded model's profile whose measured times
 * are the embedded model's own predictions: it is exact on them. */
static int64_t store_exact_samples(struct svc *s, size_t n)
{
    const struct cost_net *emb = net_embedded(NULL);
    struct store_profile p;
    struct store_sample smp;
    struct table shard[4];
    struct sd_diag d;
    int64_t id = 0;
    size_t i, k;

    memset(&p, 0, sizeof(p));
    snprintf(p.name, sizeof(p.name), "%s", emb->profile);
    snprintf(p.backend, sizeof(p.backend), "cpu");
    snprintf(p.device_model, sizeof(p.device_model), "test");
    p.batch_size = emb->batch_size;
    pthread_mutex_lock(&s->store_mu);
    /* The server's own profile where it measures this cpu model. */
    if (store_profile_get(s->st, p.name, &p, &d) == 0)
        id = p.id;
    else
        CHECK(store_profile_get_or_create(s->st, &p, &id, &d) == 0);
    for (i = 0; i < n; i++) {
        size_t nt = 1 + i % 4;

        for (k = 0; k < nt; k++)
            shard[k] = pool[(i * 7 + k * 3) % NTABLES];
        memset(&smp, 0, sizeof(smp));
        smp.profile_id = id;
        smp.kind = STORE_KIND_COMPUTE;
        smp.tables = shard;
        smp.ntables = nt;
        smp.measured_ms = net_tables_ms(emb, shard, nt);
        snprintf(smp.device, sizeof(smp.device), "test");
        snprintf(smp.source, sizeof(smp.source), "test");
        CHECK(store_sample_add(s->st, &smp, NULL, &d) == 0);
    }
    pthread_mutex_unlock(&s->store_mu);
    return id;
}

static int retrain_bytes(struct svc *s, bool force, Shardd__V1__Job **out,
                         struct sd_diag *d)
{
    Shardd__V1__RetrainRequest rq = SHARDD__V1__RETRAIN_REQUEST__INIT;
    uint8_t *req = NULL, *resp = NULL;
    size_t len, resp_len;
    int rv;

    rq.profile = (char *)net_embedded(NULL)->profile;
    rq.force = force;
    CHECK(wire_pack(&rq.base, &req, &len, d) == 0);
    rv = admin_retrain(s, NULL, req, len, &resp, &resp_len, d);
    free(req);
    if (rv == 0)
        *out = shardd__v1__job__unpack(NULL, resp_len, resp);
    free(resp);
    return rv;
}

/* Polls GetJob until the job ends; the states seen, as a bit set. */
static Shardd__V1__Job *wait_job(struct svc *s, const char *id, int *seen)
{
    Shardd__V1__GetJobRequest rq = SHARDD__V1__GET_JOB_REQUEST__INIT;
    Shardd__V1__Job *j = NULL;
    uint8_t *req = NULL, *resp = NULL;
    size_t len, resp_len;
    struct sd_diag d;
    int i;

    rq.id = (char *)id;
    CHECK(wire_pack(&rq.base, &req, &len, &d) == 0);
    for (i = 0; i < 6000; i++) { /* 60 s at most */
        shardd__v1__job__free_unpacked(j, NULL);
        j = NULL;
        if (admin_get_job(s, NULL, req, len, &resp, &resp_len, &d) != 0)
            break;
        j = shardd__v1__job__unpack(NULL, resp_len, resp);
        free(resp);
        if (j == NULL)
            break;
        *seen |= 1 << j->state;
        if (j->state >= SHARDD__V1__JOB_STATE__JOB_STATE_SUCCEEDED)
            break;
        sleep_ms(10);
    }
    free(req);
    return j;
}

static void test_retrain_gate(struct svc *s)
{
    Shardd__V1__Job *j = NULL, *done;
    struct sd_diag d;
    int seen = 0, rv;

    /* Nothing stored: refused, nothing queued. */
    rv = retrain_bytes(s, false, &j, &d);
    CHECK(rv == SD_ESTATE);
    store_exact_samples(s, 60);
    /* The embedded model is exact on these samples: a new model can only
     * be worse on the held-out ones, and the gate keeps it out. */
    rv = retrain_bytes(s, false, &j, &d);
    CHECK(rv == 0 && j != NULL);
    if (j == NULL)
        return;
    CHECK(j->state == SHARDD__V1__JOB_STATE__JOB_STATE_QUEUED ||
          j->state == SHARDD__V1__JOB_STATE__JOB_STATE_RUNNING);
    done = wait_job(s, j->id, &seen);
    CHECK(done != NULL &&
          done->state == SHARDD__V1__JOB_STATE__JOB_STATE_SUCCEEDED);
    CHECK(done != NULL && strstr(done->message, "not activated") != NULL);
    CHECK(done != NULL && done->result_model_version[0] != '\0');
    CHECK(seen & (1 << SHARDD__V1__JOB_STATE__JOB_STATE_SUCCEEDED));
    if (done != NULL)
        fprintf(stderr, "    [gate] %s\n", done->message);
    shardd__v1__job__free_unpacked(j, NULL);
    shardd__v1__job__free_unpacked(done, NULL);
    /* Still the embedded model answers. */
    {
        struct ask a = {.ntables = 6, .seed = 11};
        Shardd__V1__PlanResponse *r = plan_ok(s, &a);

        CHECK(r != NULL && strcmp(r->basis->model_version, "embedded") == 0);
        shardd__v1__plan_response__free_unpacked(r, NULL);
    }
    /* No sample newer than the model just stored: refused unless forced. */
    rv = retrain_bytes(s, false, &j, &d);
    CHECK(rv == SD_ESTATE);
    CHECK(strstr(d.msg, "set force") != NULL);
    rv = retrain_bytes(s, true, &j, &d);
    CHECK(rv == 0 && j != NULL);
    if (j == NULL)
        return;
    done = wait_job(s, j->id, &seen);
    CHECK(done != NULL &&
          done->state == SHARDD__V1__JOB_STATE__JOB_STATE_SUCCEEDED);
    CHECK(done != NULL && strstr(done->message, "activated") != NULL &&
          strstr(done->message, "not activated") == NULL);
    shardd__v1__job__free_unpacked(j, NULL);
    shardd__v1__job__free_unpacked(done, NULL);
}

/*
 * The threads of this process at nice `ni` (Linux: /proc/self/task/TID/stat,
 * field 19; the comm field, in parentheses, may hold spaces).
 */
static int threads_at_nice(long ni)
{
    DIR *task = opendir("/proc/self/task");
    struct dirent *e;
    int n = 0;

    while (task != NULL && (e = readdir(task)) != NULL) {
        char path[300], buf[1024];
        const char *p;
        FILE *f;
        size_t len;
        long v;
        int field;

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
        f = fopen(path, "r");
        if (f == NULL)
            continue;
        len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[len] = '\0';
        p = strrchr(buf, ')');
        /* After "pid (comm)": state is field 3, nice field 19. */
        for (field = 2; p != NULL && field < 19; field++)
            p = strchr(p + 1, ' ');
        if (p != NULL && sscanf(p + 1, "%ld", &v) == 1 && v == ni)
            n++;
    }
    if (task != NULL)
        closedir(task);
    return n;
}

/*
 * A retrain with retrain_ensemble 2 stores and serves an ensemble: the
 * stored blob is an ensemble file of 2 members whose member 0 is the served
 * model, its plans carry the members' spread, a quantile plans with them,
 * and a restart (the models loaded from the store) serves them again.
 */
static void test_retrain_ensemble(struct svc *s, struct sd_config *c)
{
    Shardd__V1__Job *j = NULL, *done = NULL;
    Shardd__V1__PlanResponse *r;
    struct store_model *sm = NULL;
    struct dmodel *m = NULL;
    struct models ms;
    struct sd_diag d;
    int64_t id = 0;
    int seen = 0;

    /* The job thread trains at the lowest priority, as the profiler's
     * worker waits there (off here, its thread still runs): two threads at
     * nice 19. */
    CHECK(threads_at_nice(19) == 2);
    c->retrain_ensemble = 2;
    CHECK(svc_reconfigure(s, c) == 0);
    CHECK(retrain_bytes(s, true, &j, &d) == 0 && j != NULL);
    if (j == NULL)
        goto out;
    done = wait_job(s, j->id, &seen);
    CHECK(done != NULL &&
          done->state == SHARDD__V1__JOB_STATE__JOB_STATE_SUCCEEDED &&
          strstr(done->message, "not activated") == NULL);
    if (done == NULL || done->result_model_version[0] == '\0')
        goto out;
    id = atoll(done->result_model_version);
    CHECK(models_acquire(&s->models, NULL, &m, &d) == 0);
    CHECK(m != NULL && m->id == id && m->stored != NULL && m->ens != NULL &&
          m->ens->k == 2 && m->ens->m[0] == m->net);
    dmodel_release(m);
    pthread_mutex_lock(&s->store_mu);
    CHECK(store_model_get(s->st, id, &sm, &d) == 0);
    CHECK(sm != NULL && sm->info.weights_bytes > 4 &&
          memcmp(sm->weights, "SDCE", 4) == 0);
    store_model_free(sm);
    pthread_mutex_unlock(&s->store_mu);
    {
        struct ask a = {.ntables = 12, .seed = 3};

        r = plan_ok(s, &a);
        CHECK(r != NULL &&
              strcmp(r->basis->model_version, done->result_model_version) == 0);
        CHECK(r != NULL && r->spread != NULL && r->spread->members == 2 &&
              r->spread->plan_cost_low_ms <= r->spread->plan_cost_high_ms);
        shardd__v1__plan_response__free_unpacked(r, NULL);
        a.quantile = 0.5;
        r = plan_ok(s, &a);
        CHECK(r != NULL &&
              strstr(r->basis->cost_model, "(q0.50 of 2)") != NULL);
        shardd__v1__plan_response__free_unpacked(r, NULL);
    }
    /* ListModels tells the members: 2 for it, 1 for the single model
     * before it, 5 for the embedded one. */
    {
        Shardd__V1__ListModelsRequest lrq =
            SHARDD__V1__LIST_MODELS_REQUEST__INIT;
        Shardd__V1__ListModelsResponse *lr = NULL;
        uint8_t *req = NULL, *resp = NULL;
        size_t len, resp_len, i;
        int seen_members = 0;

        CHECK(wire_pack(&lrq.base, &req, &len, &d) == 0);
        CHECK(admin_list_models(s, NULL, req, len, &resp, &resp_len, &d) == 0);
        lr = shardd__v1__list_models_response__unpack(NULL, resp_len, resp);
        for (i = 0; lr != NULL && i < lr->n_models; i++) {
            const Shardd__V1__ModelInfo *mi = lr->models[i];

            if (strcmp(mi->version, done->result_model_version) == 0)
                seen_members |= mi->members == 2 ? 1 : 8;
            else if (strcmp(mi->version, "embedded") == 0)
                seen_members |= mi->members == 5 ? 2 : 8;
            else
                seen_members |= mi->members == 1 ? 4 : 8;
        }
        CHECK(seen_members == 7);
        shardd__v1__list_models_response__free_unpacked(lr, NULL);
        free(req);
        free(resp);
    }
    /* A restart: the models as models_init() loads them from the store. */
    pthread_mutex_lock(&s->store_mu);
    CHECK(models_init(&ms, s->st, "", 1024, NULL, &d) == 0);
    pthread_mutex_unlock(&s->store_mu);
    m = NULL;
    CHECK(models_acquire(&ms, net_embedded(NULL)->profile, &m, &d) == 0);
    CHECK(m != NULL && m->id == id && m->ens != NULL && m->ens->k == 2);
    dmodel_release(m);
    models_destroy(&ms);
out:
    c->retrain_ensemble = 1;
    CHECK(svc_reconfigure(s, c) == 0);
    shardd__v1__job__free_unpacked(j, NULL);
    shardd__v1__job__free_unpacked(done, NULL);
}

/*
 * Retrains are rate-limited, forced ones too (each stores a model), and
 * model versions past models_keep are pruned, never the active one.
 */
static void test_retrain_limits(struct svc *s, struct sd_config *c)
{
    Shardd__V1__Job *j = NULL, *done;
    Shardd__V1__ListModelsRequest lrq = SHARDD__V1__LIST_MODELS_REQUEST__INIT;
    Shardd__V1__ListModelsResponse *lr;
    uint8_t *req = NULL, *resp = NULL;
    size_t len, resp_len, i, stored = 0, active = 0;
    struct sd_diag d;
    int seen = 0, k, rv;

    c->models_keep = 2;
    CHECK(svc_reconfigure(s, c) == 0);
    for (k = 0; k < 3; k++) {
        rv = retrain_bytes(s, true, &j, &d);
        CHECK(rv == 0 && j != NULL);
        if (j == NULL)
            return;
        done = wait_job(s, j->id, &seen);
        CHECK(done != NULL &&
              done->state == SHARDD__V1__JOB_STATE__JOB_STATE_SUCCEEDED);
        shardd__v1__job__free_unpacked(done, NULL);
        shardd__v1__job__free_unpacked(j, NULL);
    }
    /* Two versions kept, plus the active one if it is older: never more. */
    lrq.profile = (char *)net_embedded(NULL)->profile;
    CHECK(wire_pack(&lrq.base, &req, &len, &d) == 0);
    CHECK(admin_list_models(s, NULL, req, len, &resp, &resp_len, &d) == 0);
    lr = shardd__v1__list_models_response__unpack(NULL, resp_len, resp);
    CHECK(lr != NULL);
    for (i = 0; lr != NULL && i < lr->n_models; i++) {
        if (strcmp(lr->models[i]->version, "embedded") == 0)
            continue;
        stored++;
        active += lr->models[i]->active;
    }
    CHECK(stored == 2);
    CHECK(active == 1);
    shardd__v1__list_models_response__free_unpacked(lr, NULL);
    free(req);
    free(resp);
    /* One an hour: the next, even forced, is refused and says when. */
    c->retrain_min_interval_s = 3600;
    CHECK(svc_reconfigure(s, c) == 0);
    rv = retrain_bytes(s, true, &j, &d);
    CHECK(rv == SD_EBUSY);
    CHECK(strstr(d.msg, "retrain_min_interval_s") != NULL);
    c->retrain_min_interval_s = 0;
    c->models_keep = 20;
    CHECK(svc_reconfigure(s, c) == 0);
}

/*
 * The gate by family (docs/daemon.md): with samples of two families, 21
 * gate samples each (families alternate every ten samples, as the gate
 * takes every tenth), the job compares the worst family's MAPE, says so,
 * and stores the new model with the gate's figures per family.  The
 * embedded model is exact on the zipf samples and 33 % low on the seq ones
 * (measured 1.5 x its prediction).
 */
static void test_retrain_families(struct svc *s)
{
    const struct cost_net *emb = net_embedded(NULL);
    Shardd__V1__Job *j = NULL, *done;
    struct store_profile p;
    struct store_sample smp;
    struct store_model *m = NULL;
    struct table shard[4];
    struct sd_diag d;
    size_t i, k, nt;
    int seen = 0, rv, fam_seen = 0;

    pthread_mutex_lock(&s->store_mu);
    CHECK(store_profile_get(s->st, emb->profile, &p, &d) == 0);
    for (i = 0; i < 420; i++) {
        nt = 1 + i % 3;
        for (k = 0; k < nt; k++)
            shard[k] = pool[(i * 5 + k * 11) % NTABLES];
        memset(&smp, 0, sizeof(smp));
        smp.profile_id = p.id;
        smp.kind = STORE_KIND_COMPUTE;
        smp.tables = shard;
        smp.ntables = nt;
        smp.measured_ms =
            net_tables_ms(emb, shard, nt) * ((i / 10) % 2 == 0 ? 1.0 : 1.5);
        snprintf(smp.device, sizeof(smp.device), "test");
        snprintf(smp.source, sizeof(smp.source), "random");
        snprintf(smp.family, sizeof(smp.family), "%s",
                 (i / 10) % 2 == 0 ? "zipf" : "seq");
        CHECK(store_sample_add(s->st, &smp, NULL, &d) == 0);
    }
    pthread_mutex_unlock(&s->store_mu);
    rv = retrain_bytes(s, true, &j, &d);
    CHECK(rv == 0 && j != NULL);
    if (j == NULL)
        return;
    done = wait_job(s, j->id, &seen);
    CHECK(done != NULL &&
          done->state == SHARDD__V1__JOB_STATE__JOB_STATE_SUCCEEDED);
    CHECK(done != NULL && strstr(done->message, "worst family") != NULL);
    if (done != NULL)
        fprintf(stderr, "    [gate by family] %s\n", done->message);
    pthread_mutex_lock(&s->store_mu);
    if (done != NULL &&
        store_model_get(s->st, atoll(done->result_model_version), &m, &d) ==
            0) {
        for (i = 0; i < m->info.metrics.nfamilies; i++) {
            const struct store_family_metrics *f = &m->info.metrics.families[i];

            if (strcmp(f->family, "zipf") == 0 || strcmp(f->family, "seq") == 0)
                fam_seen += f->samples >= 20 && !f->held_out && f->mape >= 0;
        }
        store_model_free(m);
    }
    pthread_mutex_unlock(&s->store_mu);
    CHECK(fam_seen == 2);
    shardd__v1__job__free_unpacked(j, NULL);
    shardd__v1__job__free_unpacked(done, NULL);
}

struct swap_worker {
    struct svc *s;
    atomic_bool *stop;
    int plans, failures, embedded, stored;
};

static void *swap_plans(void *arg)
{
    struct swap_worker *w = arg;
    Shardd__V1__PlanResponse *r;
    struct sd_diag d;
    uint64_t seed = 100;

    while (!atomic_load(w->stop)) {
        struct ask a = {.ntables = 10, .seed = seed++};

        r = NULL;
        if (plan_bytes(w->s, &a, NULL, &r, &d) != 0) {
            w->failures++;
            continue;
        }
        w->plans++;
        if (strcmp(r->basis->model_version, "embedded") == 0)
            w->embedded++;
        else
            w->stored++;
        shardd__v1__plan_response__free_unpacked(r, NULL);
    }
    return NULL;
}

static int activate_bytes(struct svc *s, const char *version)
{
    Shardd__V1__ActivateModelRequest rq =
        SHARDD__V1__ACTIVATE_MODEL_REQUEST__INIT;
    uint8_t *req = NULL, *resp = NULL;
    size_t len, resp_len;
    struct sd_diag d;
    int rv;

    rq.version = (char *)version;
    CHECK(wire_pack(&rq.base, &req, &len, &d) == 0);
    rv = admin_activate(s, NULL, req, len, &resp, &resp_len, &d);
    if (rv != 0)
        fprintf(stderr, "activate %s: %s\n", version, d.msg);
    free(req);
    free(resp);
    return rv;
}

/* After activating `version`, the served model is resident on the
 * daemon's backend and scores there as the host scorer does. */
static void check_resident(struct svc *s, const char *version)
{
    struct train_sample ts[3] = {
        {pool, 1, 1}, {pool + 1, 3, 1}, {pool + 4, 4, 1}};
    struct dmodel *m = NULL;
    struct sd_diag d;
    double ms[3];
    int i;

    CHECK(activate_bytes(s, version) == 0);
    CHECK(models_acquire(&s->models, NULL, &m, &d) == 0);
    if (m == NULL)
        return;
    CHECK(strcmp(m->version, version) == 0);
    CHECK(m->resident != NULL);
    if (m->resident != NULL) {
        CHECK(kern_net_backend(m->resident) == s->be);
        CHECK(prof_net_score_tables(m->resident, m->net, ts, 3, ms, &d) == 0);
        for (i = 0; i < 3; i++)
            CHECK(ms[i] == net_tables_ms(m->net, ts[i].tables, ts[i].ntables));
    }
    dmodel_release(m);
}

static void test_hot_swap(struct svc *s)
{
    struct swap_worker w[2];
    pthread_t th[2];
    atomic_bool stop;
    int i, k;

    atomic_init(&stop, false);
    for (k = 0; k < 2; k++) {
        memset(&w[k], 0, sizeof(w[k]));
        w[k].s = s;
        w[k].stop = &stop;
        pthread_create(&th[k], NULL, swap_plans, &w[k]);
    }
    /* Stored model 1 (from the retrain test) and the embedded one, back
     * and forth under the planners' feet. */
    for (i = 0; i < 40; i++) {
        CHECK(activate_bytes(s, i % 2 == 0 ? "1" : "embedded") == 0);
        sleep_ms(5);
    }
    atomic_store(&stop, true);
    for (k = 0; k < 2; k++) {
        pthread_join(th[k], NULL);
        CHECK(w[k].failures == 0);
        CHECK(w[k].plans > 0);
        CHECK(w[k].embedded + w[k].stored == w[k].plans);
    }
    fprintf(stderr, "    [swap] %d + %d plans, %d + %d on the stored model\n",
            w[0].plans, w[1].plans, w[0].stored, w[1].stored);
    CHECK(w[0].stored + w[1].stored > 0 && w[0].embedded + w[1].embedded > 0);
    /* Each swap brought its model's resident copy with it. */
    check_resident(s, "1");
    check_resident(s, "embedded");
}

/* ---------------------------------------------------------------------- */
/* The profiler worker's queue                                             */

/* A plan of `ndev` devices with table t on device t % used (devices
 * >= used stay empty). */
static void one_plan(struct plan *p, int32_t ndev, int32_t used)
{
    size_t t;

    CHECK(plan_init(p, ndev) == 0);
    for (t = 0; t < 8; t++)
        CHECK(plan_add(p, (uint32_t)t, (int32_t)(t % (size_t)used), 0,
                       pool[t].dim) == 0);
    plan_sort(p);
}

/* A profiler worker of the default configuration on the cpu backend at
 * batch 4096, for its proposal queue (its store is never opened). */
struct queue_fixture {
    struct sd_config c;
    struct conf_snap *cf;
    struct profw pw;
};

static void queue_open(struct queue_fixture *f)
{
    struct sd_diag d;

    conf_default(&f->c);
    CHECK(conf_snap_new(&f->c, &f->cf) == 0);
    profw_init(&f->pw, kern_backend_get("cpu", &d), "/nonexistent", "p", 1,
               "cpu", 4096, 0, f->cf);
}

static void queue_close(struct queue_fixture *f)
{
    profw_destroy(&f->pw);
    conf_snap_unref(f->cf);
    conf_free(&f->c);
}

static void test_proposal_ring(void)
{
    struct queue_fixture f;
    struct profw *pw = &f.pw;
    struct profw_proposal pr;
    struct plan p;
    int i, taken = 0, empty = 0;

    queue_open(&f);
    /* Eight 4-device plans fill the ring (32 shards)... */
    for (i = 0; i < 8; i++) {
        one_plan(&p, 4, 4);
        profw_propose(pw, &p, pool, 4096);
        plan_destroy(&p);
    }
    /* ... then a 2-device plan whose device 1 is empty. */
    one_plan(&p, 2, 1);
    profw_propose(pw, &p, pool, 4096);
    plan_destroy(&p);
    /* A shard whose lookups alone would take more than the memory budget
     * (rows 1e6, dim 4, 20,000 lookups a bag: about 1.3 GB of trace at
     * batch 4096) is not queued, however small its weights. */
    {
        struct table huge = pool[0];

        huge.rows = 1000000;
        huge.dim = 4;
        huge.pooling_factor = 20000;
        CHECK(plan_init(&p, 1) == 0);
        CHECK(plan_add(&p, 0, 0, 0, 4) == 0);
        profw_propose(pw, &p, &huge, 4096);
        plan_destroy(&p);
    }
    /* A plan at another batch is not the profile's: ignored. */
    one_plan(&p, 4, 4);
    profw_propose(pw, &p, pool, 65536);
    plan_destroy(&p);
    while (profw_take_proposal(pw, &pr)) {
        taken++;
        if (pr.n == 0)
            empty++;
    }
    CHECK(taken == PROFW_PROPOSALS);
    CHECK(empty == 0);
    {
        uint64_t kept, budget, skipped, measured, samples, remeasured;

        profw_memory(pw, &kept, &budget, &skipped);
        CHECK(budget == (uint64_t)768 << 20);
        CHECK(skipped == 1);
        profw_counts(pw, &measured, &samples, &remeasured);
        CHECK(remeasured == 0); /* nothing measured */
    }
    queue_close(&f);
}

/*
 * A proposal is what the plan's device does: a row block with its rows and
 * their share of the lookups, a replica with its local batch (the pooling
 * factor over the devices), a column slice at its width.
 */
static void test_proposal_pieces(void)
{
    struct queue_fixture f;
    struct profw *pw = &f.pw;
    struct profw_proposal pr;
    struct plan p;
    int64_t half = pool[0].rows / 2;
    int32_t r;
    size_t i;

    queue_open(&f);
    CHECK(plan_init(&p, 2) == 0);
    for (r = 0; r < 2; r++) {
        struct shard rw = {.table = 0,
                           .device = r,
                           .col_width = pool[0].dim,
                           .row_offset = r * half,
                           .row_count = r == 0 ? half : pool[0].rows - half,
                           .scheme = SCHEME_RW};
        struct shard dp = {.table = 1,
                           .device = r,
                           .col_width = pool[1].dim,
                           .scheme = SCHEME_DP};
        struct shard cw = {.table = 2,
                           .device = r,
                           .col_offset = r * pool[2].dim / 2,
                           .col_width = pool[2].dim / 2,
                           .scheme = SCHEME_CW};

        CHECK(plan_add_shard(&p, &rw) == 0);
        CHECK(plan_add_shard(&p, &dp) == 0);
        CHECK(plan_add_shard(&p, &cw) == 0);
    }
    plan_sort(&p);
    profw_propose(pw, &p, pool, 4096);
    plan_destroy(&p);
    CHECK(profw_take_proposal(pw, &pr)); /* device 0's */
    CHECK(pr.n == 3);
    for (i = 0; i < pr.n; i++) {
        const struct table *tb = &pr.tables[i];

        if (strcmp(tb->name, pool[0].name) == 0) {
            CHECK(tb->rows == half);
            CHECK(fabs(tb->pooling_factor - pool[0].pooling_factor *
                                                (double)half /
                                                (double)pool[0].rows) < 1e-9);
        } else if (strcmp(tb->name, pool[1].name) == 0) {
            CHECK(tb->rows == pool[1].rows);
            CHECK(fabs(tb->pooling_factor - pool[1].pooling_factor / 2) < 1e-9);
        } else {
            CHECK(strcmp(tb->name, pool[2].name) == 0);
            CHECK(tb->dim == pool[2].dim / 2);
            CHECK(tb->pooling_factor == pool[2].pooling_factor);
        }
    }
    queue_close(&f);
}

/* ---------------------------------------------------------------------- */
/* The profiler worker steps aside                                         */

/*
 * The worker's thread runs at nice 19 (daemon/profw.c): where the CPUs are
 * busy with other work at nice 0 (ctest -j2, other users of the machine)
 * it gets about 1.5 % of a CPU, and these tests take some 70 times the
 * CPU time it spends.  At the daemon's batch of 4096 and a 384 MiB shard
 * budget that was 2 s of CPU (its table pool, traces and timing): over
 * ctest's 120 s.  The profile here is at batch PROFW_TEST_BATCH, shards
 * within the smallest budget (profiler_max_mb 64), timed in three steps:
 * about 0.1 s of CPU, what stepping aside needs (none of it depends on the
 * figures measured).
 */
#define PROFW_TEST_BATCH 512

/*
 * The cpu backend with a gate in its timing: the profiler thread, once in
 * shard_time, says so (gate_in); finding the gate closed (gate_open 0) it
 * counts that too (gate_held) and waits for the test to open it; then it
 * times for real, where the abort flag is honoured.  While it is held
 * nothing can be committed, so the test knows exactly what the store
 * holds at the moment a request arrives.  A test that closes the gate
 * waits for one more gate_held, not one more gate_in: the worker may have
 * counted itself in just before the gate closed and be held on that same
 * sample, and no other would come.
 */
static atomic_int gate_in, gate_open, gate_held;
static struct kern_backend gated;

static int gated_time(struct kern_shard *sh, const struct kern_timing_opts *o,
                      struct kern_timing *out)
{
    struct kern_timing_opts few = *o; /* the abort flag included */

    atomic_fetch_add(&gate_in, 1);
    if (!atomic_load(&gate_open)) {
        atomic_fetch_add(&gate_held, 1);
        while (!atomic_load(&gate_open))
            sleep_ms(1);
    }
    few.warmup = 1;
    few.repeats = 2;
    return kern_backend_cpu.shard_time(sh, &few, out);
}

/* Compute samples of the profile the worker measures (0 before it made
 * the profile). */
static uint64_t stored_samples(const char *db, const char *profile)
{
    struct store *st = NULL;
    struct store_profile prof;
    struct sd_diag d;
    uint64_t n = 0;

    if (store_open(db, STORE_OPEN_READONLY, &st, &d) != 0)
        return 0;
    if (store_profile_get(st, profile, &prof, &d) == 0)
        CHECK(store_sample_count(st, prof.id, STORE_KIND_COMPUTE, 0, &n, &d) ==
              0);
    store_close(st);
    return n;
}

/* Waits up to ms for *flag to reach at least want; whether it did.  The
 * waits below take 60 s at most, half of ctest's limit for this test, so
 * that one that runs out says which it was before ctest stops the test. */
static bool wait_for(atomic_int *flag, int want, long ms)
{
    long t;

    for (t = 0; t < ms && atomic_load(flag) < want; t += 5)
        sleep_ms(5);
    return atomic_load(flag) >= want;
}

/*
 * The samples the worker counts as stored, once it has taken in what its
 * last measurement stored, waiting up to ms for that count to be want: it
 * clears `measuring` before it counts (daemon/profw.c, measure_once() and
 * its caller), so for a moment after the flag the count is the one from
 * before the measurement.
 */
static uint64_t worker_count(struct profw *pw, uint64_t want, long ms)
{
    uint64_t measured, counted, remeasured;
    long t;

    for (t = 0;; t += 5) {
        profw_counts(pw, &measured, &counted, &remeasured);
        if (counted == want || t >= ms)
            return counted;
        sleep_ms(5);
    }
}

/*
 * A request arriving while a sample is being timed: the worker drops that
 * sample (the store holds what it held when the request came), marks when
 * it was asked (abort_ms), and measures again once the request has ended
 * (profiler_idle_ms 0 here).  A pause steps it aside the same way.
 */
static void test_profiler_steps_aside(void)
{
    struct sd_config c;
    struct conf_snap *cf;
    struct profw pw;
    struct sd_diag d;
    char db[96], profile[STORE_NAME_MAX];
    enum profw_state now;
    uint64_t before, after, counted;
    int k;

    setup(&c);
    c.profiler = true;
    c.profiler_idle_ms = 0;
    c.profiler_max_samples = 1000;
    c.profiler_max_mb = 64;   /* small shards: see PROFW_TEST_BATCH */
    c.profiler_quiet_pct = 0; /* the gate counts the samples' timings only */
    CHECK(conf_snap_new(&c, &cf) == 0);
    gated = kern_backend_cpu;
    gated.shard_time = gated_time;
    atomic_store(&gate_in, 0);
    atomic_store(&gate_open, 1);
    atomic_store(&gate_held, 0);
    snprintf(db, sizeof(db), "%s/shardd.db", dir);
    CHECK(prof_profile_name(&gated, 0, PROFW_TEST_BATCH, profile,
                            sizeof(profile), &d) == 0);
    profw_init(&pw, &gated, db, profile, 0, "cpu", PROFW_TEST_BATCH, 0, cf);
    CHECK(profw_start(&pw, &d) == 0);
    /* Two samples stored freely, then the gate closes on the third (or a
     * later one, if the third passed it before it closed). */
    CHECK(wait_for(&gate_in, 2, 60000));
    atomic_store(&gate_open, 0);
    CHECK(wait_for(&gate_held, 1, 60000)); /* held at it */
    CHECK(atomic_load(&pw.measuring));
    before = stored_samples(db, profile);
    CHECK(before >= 1);
    profw_request_begin(&pw);
    CHECK(atomic_load(&pw.abort_ms) > 0); /* it was measuring: step aside */
    atomic_store(&gate_open, 1);
    for (k = 0; k < 12000 && atomic_load(&pw.measuring); k++)
        sleep_ms(5);
    CHECK(!atomic_load(&pw.measuring)); /* it stepped aside */
    after = stored_samples(db, profile);
    CHECK(after == before); /* the sample being timed is dropped */
    counted = worker_count(&pw, after, 60000);
    CHECK(counted == after);
    fprintf(stderr,
            "    [profiler] a request during the timing of sample %llu: %llu "
            "stored before it, %llu after the worker stepped aside\n",
            (unsigned long long)before + 1, (unsigned long long)before,
            (unsigned long long)after);
    /* Measuring again once the request has ended. */
    k = atomic_load(&gate_in);
    profw_request_end(&pw);
    CHECK(wait_for(&gate_in, k + 1, 60000));
    /* A pause steps aside the same way: the gate is closed, the pause
     * comes, the sample is dropped. */
    k = atomic_load(&gate_held);
    atomic_store(&gate_open, 0);
    CHECK(wait_for(&gate_held, k + 1, 60000));
    before = stored_samples(db, profile);
    CHECK(profw_set_paused(&pw, true, &now, &d) == 0 && now == PROFW_PAUSED);
    atomic_store(&gate_open, 1);
    for (k = 0; k < 12000 && atomic_load(&pw.measuring); k++)
        sleep_ms(5);
    CHECK(!atomic_load(&pw.measuring));
    CHECK(stored_samples(db, profile) == before);
    profw_destroy(&pw);
    conf_snap_unref(cf);
    conf_free(&c);
    teardown_dir();
}

/*
 * profiler_idle_ms holds from the start too: a worker that has seen no
 * request yet waits that long before it measures (the daemon's start is
 * not an hour of idle).  Seen only where the host has been up longer than
 * the idle time, as the monotonic clock counts from boot.
 */
static void test_profiler_idle_at_start(void)
{
    struct sd_config c;
    struct conf_snap *cf;
    struct profw pw;
    struct sd_diag d;
    char db[96], profile[STORE_NAME_MAX];

    if (sd_now_ms() < 120000) {
        tap_skip("the host booted less than 2 minutes ago: a profiler that "
                 "counts idle time from boot would look the same");
        return;
    }
    setup(&c);
    c.profiler = true;
    c.profiler_idle_ms = 60000;
    c.profiler_max_mb = 64;   /* small shards: see PROFW_TEST_BATCH */
    c.profiler_quiet_pct = 0; /* the gate counts the samples' timings only */
    CHECK(conf_snap_new(&c, &cf) == 0);
    gated = kern_backend_cpu;
    gated.shard_time = gated_time;
    atomic_store(&gate_in, 0);
    atomic_store(&gate_open, 1);
    atomic_store(&gate_held, 0);
    snprintf(db, sizeof(db), "%s/shardd.db", dir);
    CHECK(prof_profile_name(&gated, 0, PROFW_TEST_BATCH, profile,
                            sizeof(profile), &d) == 0);
    profw_init(&pw, &gated, db, profile, 0, "cpu", PROFW_TEST_BATCH, 0, cf);
    CHECK(profw_start(&pw, &d) == 0);
    /* Its table pool made (some 10 ms of CPU at this batch, a second at
     * nice 19 on busy CPUs), it would be timing by now. */
    CHECK(!wait_for(&gate_in, 1, 5000));
    CHECK(stored_samples(db, profile) == 0);
    profw_destroy(&pw);
    conf_snap_unref(cf);
    conf_free(&c);
    teardown_dir();
}

/*
 * The quiet check in the daemon's profiler, with a scripted probe: the
 * probe (the one shard opened outside the weight arena) takes 1 ms, or
 * 2 ms on its 8th and 9th timings (calls 1-5 are its calibration, sample k
 * is timed between calls 6 + 2k and 7 + 2k): both probes of sample 1 are
 * slow, so it is dropped and measured again, the profile gets its 3
 * samples, and the drop is counted where the metric and the status read
 * it.
 */
static struct kern_shard *quiet_probe;
static atomic_int quiet_calls;

static int quiet_open(int32_t device, const struct kern_shard_desc *desc,
                      struct kern_shard **out, struct sd_diag *d)
{
    int rv = kern_backend_cpu.shard_open(device, desc, out, d);

    if (rv == 0 && !desc->reuse_weights)
        quiet_probe = *out;
    return rv;
}

static int quiet_time(struct kern_shard *sh, const struct kern_timing_opts *o,
                      struct kern_timing *out)
{
    struct kern_timing_opts few = *o;
    int rv;

    few.warmup = 1;
    few.repeats = 2;
    rv = kern_backend_cpu.shard_time(sh, &few, out);
    if (rv == 0 && sh == quiet_probe) {
        int call = atomic_fetch_add(&quiet_calls, 1) + 1;

        out->median_ms = call == 8 || call == 9 ? 2 : 1;
    }
    return rv;
}

static void test_profiler_quiet(void)
{
    struct sd_config c;
    struct conf_snap *cf;
    struct profw pw;
    struct kern_backend be = kern_backend_cpu;
    struct sd_diag d;
    char db[96], profile[STORE_NAME_MAX];
    uint64_t measured, counted, remeasured;

    setup(&c);
    c.profiler = true;
    c.profiler_idle_ms = 0;
    c.profiler_max_samples = 3;
    c.profiler_max_mb = 64;            /* small shards: see PROFW_TEST_BATCH */
    CHECK(c.profiler_quiet_pct == 10); /* the default */
    CHECK(conf_snap_new(&c, &cf) == 0);
    be.shard_open = quiet_open;
    be.shard_time = quiet_time;
    atomic_store(&quiet_calls, 0);
    snprintf(db, sizeof(db), "%s/shardd.db", dir);
    CHECK(prof_profile_name(&be, 0, PROFW_TEST_BATCH, profile, sizeof(profile),
                            &d) == 0);
    profw_init(&pw, &be, db, profile, 0, "cpu", PROFW_TEST_BATCH, 0, cf);
    CHECK(profw_start(&pw, &d) == 0);
    CHECK(worker_count(&pw, 3, 60000) == 3);
    profw_counts(&pw, &measured, &counted, &remeasured);
    CHECK(remeasured == 1);
    CHECK(atomic_load(&quiet_calls) == 5 + 2 * 4);
    CHECK(stored_samples(db, profile) == 3);
    profw_destroy(&pw);
    conf_snap_unref(cf);
    conf_free(&c);
    teardown_dir();
}

int main(void)
{
    struct synth_params sp;
    struct table *tables = NULL;
    struct sd_config c;
    struct svc *s;
    size_t i;

    sd_log_set_level(SD_LOG_WARN);
    synth_params_default(&sp);
    sp.count = POOL;
    sp.seed = 7;
    sp.batch_size = 4096;
    if (synth_tables(&sp, 1, &tables) != 0)
        return 1;
    for (i = 0; i < POOL; i++) {
        pool[i] = tables[i];
        /* Wide enough to split, small enough for any device. */
        pool[i].dim = 16 << (i % 3);
        if (pool[i].rows > 100000)
            pool[i].rows = 100000;
    }
    free(tables);

    setup(&c);
    s = open_svc(&c);
    test_plan_round_trip(s);
    test_unset_options_are_defaults(s);
    test_estimate(s);
    test_reference_profile(s);
    test_hardware_model();
    test_pins_named(s);
    test_lane_reads_within(s);
    test_plan_lane(s, &c);
    CHECK(svc_start_workers(s, NULL) == 0);
    test_retrain_gate(s);
    test_retrain_ensemble(s, &c);
    test_hot_swap(s);
    test_cache_keys_on_model(s);
    test_retrain_limits(s, &c);
    test_retrain_families(s);
    test_health(s);
    test_reflection_unknown_field(s);
    teardown(s, &c);

    test_cache_policy();
    test_proposal_ring();
    test_proposal_pieces();
    test_profiler_steps_aside();
    test_profiler_idle_at_start();
    test_profiler_quiet();
    return tap_done();
}
