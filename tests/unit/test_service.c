/*
 * The daemon's service without gRPC: request bytes in, response bytes out,
 * as the transport calls it (daemon/service.h).  A real service on a real
 * store in a fresh directory, with the embedded model, the cpu backend and
 * the profiler off unless a test turns it on.
 *
 *  - Plan and Estimate round trips; an unset PlanOptions means the
 *    documented defaults (column splits allowed); field-named refusals.
 *  - The plan cache: hits, eviction at the entry limit, a limit of 0, a plan
 *    cut short by the deadline not cached, trimming on reload.
 *  - Retraining: the gate keeps a worse model out unless forced, and the
 *    job moves QUEUED -> RUNNING -> SUCCEEDED.
 *  - Model hot-swap while other threads plan: every plan succeeds, each on
 *    one of the two models.
 *  - The profiler worker's proposal queue, full, keeps every entry whole.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "grpc/health/v1/health.pb-c.h"
#include "harness.h"
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
};

static int plan_bytes(struct svc *s, const struct ask *a,
                      const struct svc_call *call,
                      Shardd__V1__PlanResponse **out, struct sd_diag *d)
{
    Shardd__V1__PlanRequest rq = SHARDD__V1__PLAN_REQUEST__INIT;
    Shardd__V1__PlanOptions po = SHARDD__V1__PLAN_OPTIONS__INIT;
    struct wire_arena arena = WIRE_ARENA_INIT;
    struct topology t;
    uint8_t *req = NULL, *resp = NULL;
    size_t len, resp_len;
    int rv;

    topology_default(&t, NDEV, a->mem_bytes ? a->mem_bytes : (8ull << 30));
    t.batch_size = 0; /* the model's */
    rq.n_tables = a->ntables;
    rq.tables = wire_tables_out(&arena, pool, a->ntables);
    rq.topology = wire_topology_out(&arena, &t);
    if (!a->no_options) {
        po.algorithm = (char *)(a->algorithm ? a->algorithm : "");
        po.seed = a->seed;
        po.whole_tables_only = a->whole_tables_only;
        if (a->pins != NULL)
            po.constraints = wire_pins_out(&arena, a->pins, pool, a->ntables);
        rq.options = &po;
    }
    rv = wire_pack(&rq.base, &req, &len, d);
    wire_arena_free(&arena);
    if (rv != 0)
        return rv;
    rv = svc_plan(s, call, req, len, &resp, &resp_len, d);
    free(req);
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

static void test_cache_policy(void)
{
    struct sd_config c;
    struct svc *s;
    Shardd__V1__PlanResponse *r = NULL;
    struct svc_call call = {INT64_MAX, NULL, NULL};
    struct ask big = {.ntables = NTABLES};
    struct sd_diag d;
    int rv;

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
     * not cached.  70 ms leaves 20 ms after the daemon's 50 ms reply
     * margin: time to read the request, too little for a search of 1,000
     * tables (some 100 ms on one thread)... */
    c.plan_cache_entries = 8;
    CHECK(svc_reconfigure(s, &c) == 0);
    big.ntables = POOL;
    call.deadline_ms = sd_now_ms() + 70;
    rv = plan_bytes(s, &big, &call, &r, &d);
    CHECK(rv == 0);
    if (rv == 0) {
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

static void test_proposal_ring(void)
{
    struct sd_config c;
    struct conf_snap *cf;
    struct profw pw;
    struct profw_proposal pr;
    struct plan p;
    struct sd_diag d;
    const struct kern_backend *be = kern_backend_get("cpu", &d);
    int i, taken = 0, empty = 0;

    conf_default(&c);
    CHECK(conf_snap_new(&c, &cf) == 0);
    profw_init(&pw, be, "/nonexistent", "p", 1, "cpu", 4096, 0, cf);
    /* Eight 4-device plans fill the ring (32 shards)... */
    for (i = 0; i < 8; i++) {
        one_plan(&p, 4, 4);
        profw_propose(&pw, &p, pool, 4096);
        plan_destroy(&p);
    }
    /* ... then a 2-device plan whose device 1 is empty. */
    one_plan(&p, 2, 1);
    profw_propose(&pw, &p, pool, 4096);
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
        profw_propose(&pw, &p, &huge, 4096);
        plan_destroy(&p);
    }
    /* A plan at another batch is not the profile's: ignored. */
    one_plan(&p, 4, 4);
    profw_propose(&pw, &p, pool, 65536);
    plan_destroy(&p);
    while (profw_take_proposal(&pw, &pr)) {
        taken++;
        if (pr.n == 0)
            empty++;
    }
    CHECK(taken == PROFW_PROPOSALS);
    CHECK(empty == 0);
    {
        uint64_t kept, budget, skipped;

        profw_memory(&pw, &kept, &budget, &skipped);
        CHECK(budget == (uint64_t)768 << 20);
        CHECK(skipped == 1);
    }
    profw_destroy(&pw);
    conf_snap_unref(cf);
    conf_free(&c);
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
    test_pins_named(s);
    CHECK(svc_start_workers(s, NULL) == 0);
    test_retrain_gate(s);
    test_hot_swap(s);
    test_retrain_limits(s, &c);
    test_retrain_families(s);
    test_health(s);
    teardown(s, &c);

    test_cache_policy();
    test_proposal_ring();
    return tap_done();
}
