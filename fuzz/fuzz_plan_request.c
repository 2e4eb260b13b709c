/*
 * Fuzz target: request decoding and validation in the daemon's Planner
 * methods (daemon/planning.c, daemon/health.c), called the way the rpc layer
 * calls them: request bytes in, response bytes or an SD_E* code with a message
 * out.
 *
 * The first byte picks the method, the rest is its protobuf request:
 *   0 mod 4: svc_plan (PlanRequest)
 *   1 mod 4: svc_estimate (EstimateRequest)
 *   2 mod 4: svc_health (grpc.health.v1.HealthCheckRequest)
 *   3 mod 4: svc_reflect (one ServerReflectionRequest of the stream)
 *
 * One struct svc serves every input: a store in a private directory, the
 * embedded model, no worker threads, one search thread, a 5 ms default
 * search budget, 256 tables at most and a 4-entry plan cache; the plan
 * audit records are dropped every PRUNE_EVERY inputs.  A client may
 * ask for a budget of up to 2^32 ms, so each call gets a deadline 60 ms
 * away: the daemon cuts the search to what is left after its 50 ms reply
 * margin, and a slow input cannot stall the fuzzer.
 *
 * Invariants: a refusal is one of the codes daemon.h lists with a message;
 * a success is a response that unpacks.  A plan answers the request: one
 * device entry per device, finite costs, and for every requested table
 * shards on existing devices covering its columns exactly once.  An
 * estimate has one device entry per device and finite costs.  A reflection
 * answer echoes the request and carries exactly one kind of answer.
 */
#include <dirent.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include <protobuf-c/protobuf-c.h>

#include "fuzz.h"
#include "grpc/health/v1/health.pb-c.h"
#include "grpc/reflection/v1alpha/reflection.pb-c.h"
#include "service_int.h"
#include "shardd/log.h"
#include "shardd/v1/planner.pb-c.h"

#define DEADLINE_MS 60 /* the daemon keeps 50 for its reply */
/* Every plan is audited into the store; dropping the records every so
 * often keeps a million-run store small. */
#define PRUNE_EVERY 1024

static struct svc *svc;
static char dir[256];

/* Frees the service and removes its store (the database and its WAL). */
static void cleanup(void)
{
    char path[600];
    struct dirent *e;
    DIR *dp;

    svc_close(svc);
    dp = opendir(dir);
    if (dp != NULL) {
        while ((e = readdir(dp)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(dp);
    }
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *base = getenv("TMPDIR");
    struct sd_config cfg;
    struct sd_diag d;
    int rv;

    (void)argc;
    (void)argv;
    if (base == NULL || base[0] == '\0')
        base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof(dir), "%s/shardd-fuzz-svc-XXXXXX", base);
    FUZZ_CHECK(mkdtemp(dir) != NULL);

    conf_default(&cfg);
    free(cfg.data_dir);
    cfg.data_dir = strdup(dir);
    FUZZ_CHECK(cfg.data_dir != NULL);
    cfg.backend = CONF_BACKEND_CPU;
    cfg.profiler = false;
    cfg.retrain_every_samples = 0;
    cfg.retrain_every_hours = 0;
    cfg.plan_cache_entries = 4;
    cfg.default_time_budget_ms = 5;
    cfg.max_tables = 256;
    cfg.search_threads = 1;
    d.msg[0] = '\0';
    rv = svc_open(&cfg, &svc, &d);
    conf_free(&cfg);
    if (rv != 0)
        fprintf(stderr, "fuzz_plan_request: svc_open: %s\n", d.msg);
    FUZZ_CHECK(rv == 0);
    atexit(cleanup);
    return 0;
}

/* The codes service.h says a method returns. */
static void check_method_refusal(int rv, const struct sd_diag *d)
{
    fuzz_check_refusal(rv, d);
    FUZZ_CHECK(rv == SD_EINVAL || rv == SD_EFORMAT || rv == SD_ENOENT ||
               rv == SD_ESTATE || rv == SD_ENOSPACE || rv == SD_ERANGE ||
               rv == SD_ENOMEM || rv == SD_EBUSY || rv == SD_ETIMEDOUT ||
               rv == SD_EUNSUPPORTED);
}

static void check_devices(Shardd__V1__DeviceCost *const *devs, size_t n,
                          int32_t ndevices, double plan_cost_ms)
{
    size_t r;

    FUZZ_CHECK(n == (size_t)ndevices);
    FUZZ_CHECK(isfinite(plan_cost_ms) && plan_cost_ms >= 0);
    for (r = 0; r < n; r++) {
        if (!isfinite(devs[r]->total_ms) || devs[r]->total_ms < 0 ||
            devs[r]->total_ms > plan_cost_ms)
            fprintf(stderr,
                    "device %zu: compute %g fwd %g bwd %g total %g ms, "
                    "plan %g ms\n",
                    r, devs[r]->compute_ms, devs[r]->fwd_comm_ms,
                    devs[r]->bwd_comm_ms, devs[r]->total_ms, plan_cost_ms);
        FUZZ_CHECK(devs[r]->device == (int32_t)r);
        FUZZ_CHECK(isfinite(devs[r]->total_ms) && devs[r]->total_ms >= 0);
        FUZZ_CHECK(devs[r]->total_ms <= plan_cost_ms);
    }
}

/*
 * Every (row, column) cell of table t is placed once: per column the rows
 * of the shards over it add up to the table's, each block inside it; a
 * data-parallel table has a whole replica on every device.
 */
static void check_table_cover(const Shardd__V1__Table *t,
                              const Shardd__V1__TablePlacement *tp,
                              int32_t ndevices)
{
    int64_t *rows = calloc((size_t)t->dim, sizeof(*rows));
    size_t k;
    int32_t c;

    FUZZ_CHECK(rows != NULL);
    FUZZ_CHECK(tp->scheme != SHARDD__V1__SCHEME__SCHEME_UNSPECIFIED);
    if (tp->scheme == SHARDD__V1__SCHEME__SCHEME_DATA_PARALLEL)
        FUZZ_CHECK(tp->n_shards == (size_t)ndevices);
    for (k = 0; k < tp->n_shards; k++) {
        const Shardd__V1__Shard *sh = tp->shards[k];

        FUZZ_CHECK(sh->device >= 0 && sh->device < ndevices);
        FUZZ_CHECK(sh->col_offset >= 0 && sh->col_width > 0 &&
                   sh->col_offset <= t->dim - sh->col_width);
        FUZZ_CHECK(sh->row_offset >= 0 && sh->row_count > 0 &&
                   sh->row_offset <= t->rows - sh->row_count);
        for (c = sh->col_offset; c < sh->col_offset + sh->col_width; c++)
            rows[c] += sh->row_count;
    }
    for (c = 0; c < t->dim; c++)
        FUZZ_CHECK(rows[c] ==
                   (tp->scheme == SHARDD__V1__SCHEME__SCHEME_DATA_PARALLEL
                        ? ndevices * t->rows
                        : t->rows));
    free(rows);
}

static void check_plan(const uint8_t *req, size_t len, const uint8_t *resp,
                       size_t resp_len)
{
    Shardd__V1__PlanRequest *rq;
    Shardd__V1__PlanResponse *rs;
    size_t i, k;

    rq = shardd__v1__plan_request__unpack(NULL, len, req);
    rs = shardd__v1__plan_response__unpack(NULL, resp_len, resp);
    FUZZ_CHECK(rq != NULL && rq->topology != NULL);
    FUZZ_CHECK(rs != NULL);
    check_devices(rs->devices, rs->n_devices, rq->topology->num_devices,
                  rs->plan_cost_ms);
    FUZZ_CHECK(rs->request_hash != NULL && strlen(rs->request_hash) == 16);
    FUZZ_CHECK(rs->algorithm != NULL && rs->algorithm[0] != '\0');
    FUZZ_CHECK(rs->n_tables == rq->n_tables);
    for (i = 0; i < rq->n_tables; i++) {
        const Shardd__V1__TablePlacement *tp = NULL;

        /* Names are unique (the daemon validated them). */
        for (k = 0; k < rs->n_tables && tp == NULL; k++)
            if (strcmp(rs->tables[k]->table, rq->tables[i]->name) == 0)
                tp = rs->tables[k];
        FUZZ_CHECK(tp != NULL);
        check_table_cover(rq->tables[i], tp, rq->topology->num_devices);
        /* A pinned table is one whole shard on its device. */
        if (rq->options != NULL && rq->options->constraints != NULL)
            for (k = 0; k < rq->options->constraints->n_pins; k++) {
                const Shardd__V1__Pin *pin = rq->options->constraints->pins[k];

                if (strcmp(pin->table, rq->tables[i]->name) != 0)
                    continue;
                FUZZ_CHECK(tp->n_shards == 1);
                FUZZ_CHECK(tp->shards[0]->device == pin->device);
                FUZZ_CHECK(tp->shards[0]->col_width == rq->tables[i]->dim);
            }
    }
    /* Every device within its own capacity. */
    for (i = 0; i < rs->n_devices; i++)
        FUZZ_CHECK(rs->devices[i]->memory_bytes <=
                   rs->devices[i]->memory_capacity_bytes);
    shardd__v1__plan_response__free_unpacked(rs, NULL);
    shardd__v1__plan_request__free_unpacked(rq, NULL);
}

static void check_estimate(const uint8_t *req, size_t len, const uint8_t *resp,
                           size_t resp_len)
{
    Shardd__V1__EstimateRequest *rq;
    Shardd__V1__EstimateResponse *rs;

    rq = shardd__v1__estimate_request__unpack(NULL, len, req);
    rs = shardd__v1__estimate_response__unpack(NULL, resp_len, resp);
    FUZZ_CHECK(rq != NULL && rq->topology != NULL);
    FUZZ_CHECK(rs != NULL);
    check_devices(rs->devices, rs->n_devices, rq->topology->num_devices,
                  rs->plan_cost_ms);
    shardd__v1__estimate_response__free_unpacked(rs, NULL);
    shardd__v1__estimate_request__free_unpacked(rq, NULL);
}

static void check_health(const uint8_t *resp, size_t resp_len)
{
    Grpc__Health__V1__HealthCheckResponse *rs;

    rs = grpc__health__v1__health_check_response__unpack(NULL, resp_len, resp);
    FUZZ_CHECK(rs != NULL);
    FUZZ_CHECK(
        rs->status ==
        GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
    grpc__health__v1__health_check_response__free_unpacked(rs, NULL);
}

static void check_reflection(const uint8_t *resp, size_t resp_len)
{
    Grpc__Reflection__V1alpha__ServerReflectionResponse *rs =
        grpc__reflection__v1alpha__server_reflection_response__unpack(
            NULL, resp_len, resp);

    FUZZ_CHECK(rs != NULL);
    FUZZ_CHECK(rs->original_request != NULL);
    FUZZ_CHECK(
        rs->message_response_case !=
        GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE__NOT_SET);
    grpc__reflection__v1alpha__server_reflection_response__free_unpacked(rs,
                                                                         NULL);
}

/* Reflection is a bidi method; one message of it, as a unary one. */
static int reflect_one(struct svc *s, const struct svc_call *call,
                       const uint8_t *req, size_t len, uint8_t **resp,
                       size_t *resp_len, struct sd_diag *d)
{
    (void)call;
    return svc_reflect(s, req, len, resp, resp_len, d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const svc_method_fn methods[4] = {svc_plan, svc_estimate, svc_health,
                                             reflect_one};
    static uint64_t runs;
    struct svc_call call = {0, NULL, NULL};
    struct sd_diag d;
    uint8_t *resp = NULL, *req;
    size_t resp_len = 0, len;
    int which, rv;

    if (size == 0)
        return 0;
    if (++runs % PRUNE_EVERY == 0) {
        uint64_t n;

        pthread_mutex_lock(&svc->store_mu);
        store_plan_audit_prune(svc->st, sd_wall_ms() + 1, &n, NULL);
        pthread_mutex_unlock(&svc->store_mu);
    }
    which = data[0] % 4;
    len = size - 1;
    /* An exact-size copy, so that a read past the end is caught. */
    req = malloc(len ? len : 1);
    FUZZ_CHECK(req != NULL);
    memcpy(req, data + 1, len);

    call.deadline_ms = sd_now_ms() + DEADLINE_MS;
    d.msg[0] = '\0';
    rv = methods[which](svc, &call, req, len, &resp, &resp_len, &d);
    if (rv != 0) {
        FUZZ_CHECK(resp == NULL);
        check_method_refusal(rv, &d);
    } else {
        FUZZ_CHECK(resp != NULL);
        if (which == 0)
            check_plan(req, len, resp, resp_len);
        else if (which == 1)
            check_estimate(req, len, resp, resp_len);
        else if (which == 2)
            check_health(resp, resp_len);
        else
            check_reflection(resp, resp_len);
        free(resp);
    }
    free(req);
    return 0;
}
