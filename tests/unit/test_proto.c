/*
 * The public API's wire format (proto/shardd/v1/ through protobuf-c):
 * every field of the Planner messages survives pack and unpack, field numbers
 * stay where clients expect them, unset fields read as the documented
 * defaults, unknown fields are skipped, and malformed bytes are refused
 * without crashing.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "harness.h"
#include "shardd/v1/admin.pb-c.h"
#include "shardd/v1/planner.pb-c.h"
#include "shardd/v1/types.pb-c.h"

#define NBINS 17

/* Packs m into a new buffer (caller frees); *len gets its size. */
static uint8_t *pack(const ProtobufCMessage *m, size_t *len)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);

    if (buf == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    CHECK(protobuf_c_message_pack(m, buf) == n);
    *len = n;
    return buf;
}

/*
 * protobuf-c message fields are `char *`; literals are const.  str() returns
 * a writable copy that lives until exit (no free needed in the tests).
 */
static char *str(const char *s)
{
    static char arena[4096];
    static size_t used;
    size_t n = strlen(s) + 1;
    char *p;

    if (n > sizeof arena - used) {
        fprintf(stderr, "test string arena full\n");
        exit(1);
    }
    p = memcpy(arena + used, s, n);
    used += n;
    return p;
}

static int streq(const char *a, const char *b)
{
    return a != NULL && b != NULL && strcmp(a, b) == 0;
}

static void fill_bins(double *bins, double scale)
{
    int k;

    for (k = 0; k < NBINS; k++)
        bins[k] = scale / (double)((k + 1) * (k + 2));
}

static void test_plan_request(void)
{
    double bins0[NBINS], bins1[NBINS];
    Shardd__V1__Table t0 = SHARDD__V1__TABLE__INIT;
    Shardd__V1__Table t1 = SHARDD__V1__TABLE__INIT;
    Shardd__V1__Table *tables[2] = {&t0, &t1};
    uint64_t mem_by_dev[4] = {16ULL << 30, 0, 8ULL << 30, 32ULL << 30};
    Shardd__V1__Topology topo = SHARDD__V1__TOPOLOGY__INIT;
    Shardd__V1__Pin pin0 = SHARDD__V1__PIN__INIT;
    Shardd__V1__Pin pin1 = SHARDD__V1__PIN__INIT;
    Shardd__V1__Pin *pins[2] = {&pin0, &pin1};
    Shardd__V1__Constraints cons = SHARDD__V1__CONSTRAINTS__INIT;
    Shardd__V1__PlanOptions opt = SHARDD__V1__PLAN_OPTIONS__INIT;
    Shardd__V1__PlanRequest req = SHARDD__V1__PLAN_REQUEST__INIT;
    Shardd__V1__PlanRequest *got;
    uint8_t *buf;
    size_t len, i;
    int k;

    fill_bins(bins0, 1.0);
    fill_bins(bins1, 0.5);
    bins1[NBINS - 1] = 0.0;

    t0.name = str("user_id");
    t0.rows = (int64_t)1 << 40;
    t0.dim = 128;
    t0.pooling_factor = 15.8;
    t0.n_bins = NBINS;
    t0.bins = bins0;
    t0.dtype = SHARDD__V1__DTYPE__DTYPE_FP32;
    t1.name = str("item_category");
    t1.rows = 1000;
    t1.dim = 4;
    t1.pooling_factor = 0.0;
    t1.n_bins = NBINS;
    t1.bins = bins1;
    t1.dtype = SHARDD__V1__DTYPE__DTYPE_FP16;

    topo.num_devices = 4;
    topo.devices_per_host = 2;
    topo.mem_bytes_per_device = 80ULL << 30;
    topo.batch_size = 65536;
    topo.intra_host_bw_bytes_per_ms = 600.0 * 1073741824.0 / 1000.0;
    topo.inter_host_bw_bytes_per_ms = 12.5 * 1073741824.0 / 1000.0;
    topo.link_latency_ms = 0.01;
    topo.device_mem_bw_bytes_per_ms = 897.0 * 1073741824.0 / 1000.0;
    topo.n_mem_bytes_by_device = 4;
    topo.mem_bytes_by_device = mem_by_dev;

    pin0.table = str("user_id");
    pin0.device = 3;
    pin1.table = str("item_category");
    pin1.device = 0;
    cons.n_pins = 2;
    cons.pins = pins;

    opt.algorithm = str("size_lookup_greedy");
    opt.whole_tables_only = 1;
    opt.time_budget_ms = 250;
    opt.seed = 0xdeadbeefcafef00dULL;
    opt.optimizer = SHARDD__V1__OPTIMIZER__OPTIMIZER_ROWWISE_ADAGRAD;
    opt.constraints = &cons;
    opt.profile = str("cuda/H100/65536");

    req.n_tables = 2;
    req.tables = tables;
    req.topology = &topo;
    req.options = &opt;

    buf = pack(&req.base, &len);
    CHECK(len > 0);
    got = shardd__v1__plan_request__unpack(NULL, len, buf);
    CHECK(got != NULL);
    if (got == NULL) {
        free(buf);
        return;
    }

    CHECK(got->n_tables == 2);
    for (i = 0; i < got->n_tables && i < 2; i++) {
        const Shardd__V1__Table *a = got->tables[i], *b = tables[i];

        CHECK(streq(a->name, b->name));
        CHECK(a->rows == b->rows);
        CHECK(a->dim == b->dim);
        CHECK(a->pooling_factor == b->pooling_factor);
        CHECK(a->dtype == b->dtype);
        CHECK(a->n_bins == NBINS);
        for (k = 0; k < NBINS && a->n_bins == NBINS; k++)
            CHECK(a->bins[k] == b->bins[k]);
    }
    CHECK(got->tables[0]->rows == (int64_t)1 << 40);
    CHECK(got->tables[1]->dtype == SHARDD__V1__DTYPE__DTYPE_FP16);

    CHECK(got->topology != NULL);
    if (got->topology != NULL) {
        const Shardd__V1__Topology *t = got->topology;

        CHECK(t->num_devices == 4);
        CHECK(t->devices_per_host == 2);
        CHECK(t->mem_bytes_per_device == 80ULL << 30);
        CHECK(t->batch_size == 65536);
        CHECK(t->intra_host_bw_bytes_per_ms == topo.intra_host_bw_bytes_per_ms);
        CHECK(t->inter_host_bw_bytes_per_ms == topo.inter_host_bw_bytes_per_ms);
        CHECK_NEAR(t->link_latency_ms, 0.01, 0.0);
        CHECK(t->device_mem_bw_bytes_per_ms == topo.device_mem_bw_bytes_per_ms);
        CHECK(t->n_mem_bytes_by_device == 4);
        for (i = 0; i < t->n_mem_bytes_by_device && i < 4; i++)
            CHECK(t->mem_bytes_by_device[i] == mem_by_dev[i]);
    }

    CHECK(got->options != NULL);
    if (got->options != NULL) {
        const Shardd__V1__PlanOptions *o = got->options;

        CHECK(streq(o->algorithm, "size_lookup_greedy"));
        CHECK(o->whole_tables_only);
        CHECK(o->time_budget_ms == 250);
        CHECK(o->seed == 0xdeadbeefcafef00dULL);
        CHECK(o->optimizer == SHARDD__V1__OPTIMIZER__OPTIMIZER_ROWWISE_ADAGRAD);
        CHECK(streq(o->profile, "cuda/H100/65536"));
        CHECK(o->constraints != NULL && o->constraints->n_pins == 2);
        if (o->constraints != NULL && o->constraints->n_pins == 2) {
            CHECK(streq(o->constraints->pins[0]->table, "user_id"));
            CHECK(o->constraints->pins[0]->device == 3);
            CHECK(streq(o->constraints->pins[1]->table, "item_category"));
            CHECK(o->constraints->pins[1]->device == 0);
        }
    }

    /* Packing the unpacked copy gives the same bytes. */
    CHECK(shardd__v1__plan_request__get_packed_size(got) == len);
    if (shardd__v1__plan_request__get_packed_size(got) == len) {
        uint8_t *again = malloc(len);

        CHECK(again != NULL);
        if (again != NULL) {
            shardd__v1__plan_request__pack(got, again);
            CHECK(memcmp(again, buf, len) == 0);
            free(again);
        }
    }

    shardd__v1__plan_request__free_unpacked(got, NULL);
    free(buf);
}

static void test_plan_response(void)
{
    Shardd__V1__Shard s0 = SHARDD__V1__SHARD__INIT;
    Shardd__V1__Shard s1 = SHARDD__V1__SHARD__INIT;
    Shardd__V1__Shard s2 = SHARDD__V1__SHARD__INIT;
    Shardd__V1__Shard *shards0[2] = {&s0, &s1}, *shards1[1] = {&s2};
    Shardd__V1__TablePlacement p0 = SHARDD__V1__TABLE_PLACEMENT__INIT;
    Shardd__V1__TablePlacement p1 = SHARDD__V1__TABLE_PLACEMENT__INIT;
    Shardd__V1__TablePlacement *placements[2] = {&p0, &p1};
    Shardd__V1__DeviceCost d0 = SHARDD__V1__DEVICE_COST__INIT;
    Shardd__V1__DeviceCost d1 = SHARDD__V1__DEVICE_COST__INIT;
    Shardd__V1__DeviceCost *devices[2] = {&d0, &d1};
    Shardd__V1__CostBasis basis = SHARDD__V1__COST_BASIS__INIT;
    Shardd__V1__SearchStats search = SHARDD__V1__SEARCH_STATS__INIT;
    Shardd__V1__Explanation expl = SHARDD__V1__EXPLANATION__INIT;
    char *bottleneck[2];
    Shardd__V1__PlanResponse resp = SHARDD__V1__PLAN_RESPONSE__INIT;
    Shardd__V1__PlanResponse *got;
    uint8_t *buf;
    size_t len, i;

    s0.device = 0;
    s0.col_offset = 0;
    s0.col_width = 64;
    s1.device = 1;
    s1.col_offset = 64;
    s1.col_width = 64;
    s2.device = 1;
    s2.col_offset = 0;
    s2.col_width = 4;
    p0.table = str("user_id");
    p0.n_shards = 2;
    p0.shards = shards0;
    p1.table = str("item_category");
    p1.n_shards = 1;
    p1.shards = shards1;

    d0.device = 0;
    d0.memory_bytes = 281474976710656ULL;
    d0.memory_capacity_bytes = 80ULL << 30;
    d0.compute_ms = 12.5;
    d0.fwd_comm_ms = 3.25;
    d0.bwd_comm_ms = 2.125;
    d0.total_ms = 17.875;
    d0.dim_sum = 64;
    d0.num_shards = 1;
    d1.device = 1;
    d1.memory_bytes = 123456789;
    d1.memory_capacity_bytes = 40ULL << 30;
    d1.compute_ms = 13.0;
    d1.fwd_comm_ms = 2.75;
    d1.bwd_comm_ms = 2.5;
    d1.total_ms = 18.25;
    d1.dim_sum = 68;
    d1.num_shards = 2;

    basis.model_version = str("m-20240101-0001");
    basis.profile = str("cuda/H100/65536");
    basis.cost_model = str("neuroshard-mlp");
    basis.comm_model = str("alpha-beta");
    basis.compute_source = SHARDD__V1__COST_SOURCE__COST_SOURCE_LEARNED;
    basis.comm_source = SHARDD__V1__COST_SOURCE__COST_SOURCE_ANALYTIC;

    search.search_time_ms = 41.5;
    search.candidates_evaluated = 5000000000ULL;
    search.time_budget_exhausted = 1;

    bottleneck[0] = str("user_id");
    bottleneck[1] = str("item_category");
    expl.bottleneck_device = 1;
    expl.n_bottleneck_tables = 2;
    expl.bottleneck_tables = bottleneck;
    expl.lower_bound_ms = 16.0;
    expl.gap_ratio = 0.140625;

    resp.n_tables = 2;
    resp.tables = placements;
    resp.n_devices = 2;
    resp.devices = devices;
    resp.plan_cost_ms = 18.25;
    resp.algorithm = str("neuroshard");
    resp.basis = &basis;
    resp.search = &search;
    resp.explanation = &expl;
    resp.request_hash = str("9f86d081884c7d659a2feaa0c55ad015");
    resp.cache_hit = 1;

    buf = pack(&resp.base, &len);
    got = shardd__v1__plan_response__unpack(NULL, len, buf);
    CHECK(got != NULL);
    if (got == NULL) {
        free(buf);
        return;
    }

    CHECK(got->n_tables == 2);
    for (i = 0; i < got->n_tables && i < 2; i++) {
        const Shardd__V1__TablePlacement *a = got->tables[i];
        const Shardd__V1__TablePlacement *b = placements[i];
        size_t j;

        CHECK(streq(a->table, b->table));
        CHECK(a->n_shards == b->n_shards);
        for (j = 0; j < a->n_shards && j < b->n_shards; j++) {
            CHECK(a->shards[j]->device == b->shards[j]->device);
            CHECK(a->shards[j]->col_offset == b->shards[j]->col_offset);
            CHECK(a->shards[j]->col_width == b->shards[j]->col_width);
        }
    }

    CHECK(got->n_devices == 2);
    for (i = 0; i < got->n_devices && i < 2; i++) {
        const Shardd__V1__DeviceCost *a = got->devices[i], *b = devices[i];

        CHECK(a->device == b->device);
        CHECK(a->memory_bytes == b->memory_bytes);
        CHECK(a->memory_capacity_bytes == b->memory_capacity_bytes);
        CHECK(a->compute_ms == b->compute_ms);
        CHECK(a->fwd_comm_ms == b->fwd_comm_ms);
        CHECK(a->bwd_comm_ms == b->bwd_comm_ms);
        CHECK(a->total_ms == b->total_ms);
        CHECK(a->dim_sum == b->dim_sum);
        CHECK(a->num_shards == b->num_shards);
    }

    CHECK(got->plan_cost_ms == 18.25);
    CHECK(streq(got->algorithm, "neuroshard"));
    CHECK(streq(got->request_hash, "9f86d081884c7d659a2feaa0c55ad015"));
    CHECK(got->cache_hit);

    CHECK(got->basis != NULL);
    if (got->basis != NULL) {
        CHECK(streq(got->basis->model_version, "m-20240101-0001"));
        CHECK(streq(got->basis->profile, "cuda/H100/65536"));
        CHECK(streq(got->basis->cost_model, "neuroshard-mlp"));
        CHECK(streq(got->basis->comm_model, "alpha-beta"));
        CHECK(got->basis->compute_source ==
              SHARDD__V1__COST_SOURCE__COST_SOURCE_LEARNED);
        CHECK(got->basis->comm_source ==
              SHARDD__V1__COST_SOURCE__COST_SOURCE_ANALYTIC);
    }

    CHECK(got->search != NULL);
    if (got->search != NULL) {
        CHECK(got->search->search_time_ms == 41.5);
        CHECK(got->search->candidates_evaluated == 5000000000ULL);
        CHECK(got->search->time_budget_exhausted);
    }

    CHECK(got->explanation != NULL);
    if (got->explanation != NULL) {
        const Shardd__V1__Explanation *e = got->explanation;

        CHECK(e->bottleneck_device == 1);
        CHECK(e->n_bottleneck_tables == 2);
        if (e->n_bottleneck_tables == 2) {
            CHECK(streq(e->bottleneck_tables[0], "user_id"));
            CHECK(streq(e->bottleneck_tables[1], "item_category"));
        }
        CHECK(e->lower_bound_ms == 16.0);
        CHECK(e->gap_ratio == 0.140625);
    }

    shardd__v1__plan_response__free_unpacked(got, NULL);
    free(buf);
}

/* Estimate reuses the placement and cost messages; one round trip. */
static void test_estimate(void)
{
    Shardd__V1__Shard s = SHARDD__V1__SHARD__INIT;
    Shardd__V1__Shard *shards[1] = {&s};
    Shardd__V1__TablePlacement p = SHARDD__V1__TABLE_PLACEMENT__INIT;
    Shardd__V1__TablePlacement *placement[1] = {&p};
    Shardd__V1__Table t = SHARDD__V1__TABLE__INIT;
    Shardd__V1__Table *tables[1] = {&t};
    Shardd__V1__Topology topo = SHARDD__V1__TOPOLOGY__INIT;
    Shardd__V1__EstimateRequest req = SHARDD__V1__ESTIMATE_REQUEST__INIT;
    Shardd__V1__EstimateRequest *got;
    Shardd__V1__DeviceCost d = SHARDD__V1__DEVICE_COST__INIT;
    Shardd__V1__DeviceCost *devices[1] = {&d};
    Shardd__V1__EstimateResponse resp = SHARDD__V1__ESTIMATE_RESPONSE__INIT;
    Shardd__V1__EstimateResponse *rgot;
    double bins[NBINS];
    uint8_t *buf;
    size_t len;

    fill_bins(bins, 1.0);
    t.name = str("t0");
    t.rows = 10;
    t.dim = 8;
    t.n_bins = NBINS;
    t.bins = bins;
    topo.num_devices = 1;
    topo.mem_bytes_per_device = 1 << 20;
    s.col_width = 8;
    p.table = str("t0");
    p.n_shards = 1;
    p.shards = shards;
    req.n_tables = 1;
    req.tables = tables;
    req.topology = &topo;
    req.n_placement = 1;
    req.placement = placement;
    req.optimizer = SHARDD__V1__OPTIMIZER__OPTIMIZER_ADAM;
    req.profile = str("cpu/x86/65536");

    buf = pack(&req.base, &len);
    got = shardd__v1__estimate_request__unpack(NULL, len, buf);
    CHECK(got != NULL);
    if (got != NULL) {
        CHECK(got->n_tables == 1 && streq(got->tables[0]->name, "t0"));
        CHECK(got->topology != NULL && got->topology->num_devices == 1);
        CHECK(got->n_placement == 1);
        if (got->n_placement == 1) {
            CHECK(streq(got->placement[0]->table, "t0"));
            CHECK(got->placement[0]->n_shards == 1);
            CHECK(got->placement[0]->shards[0]->device == 0);
            CHECK(got->placement[0]->shards[0]->col_width == 8);
        }
        CHECK(got->optimizer == SHARDD__V1__OPTIMIZER__OPTIMIZER_ADAM);
        CHECK(streq(got->profile, "cpu/x86/65536"));
        shardd__v1__estimate_request__free_unpacked(got, NULL);
    }
    free(buf);

    d.memory_bytes = 2 << 20;
    d.memory_capacity_bytes = 1 << 20;
    d.total_ms = 1.5;
    resp.n_devices = 1;
    resp.devices = devices;
    resp.plan_cost_ms = 1.5;
    resp.fits_memory = 0;
    buf = pack(&resp.base, &len);
    rgot = shardd__v1__estimate_response__unpack(NULL, len, buf);
    CHECK(rgot != NULL);
    if (rgot != NULL) {
        CHECK(rgot->n_devices == 1);
        CHECK(rgot->n_devices == 1 && rgot->devices[0]->total_ms == 1.5);
        CHECK(rgot->plan_cost_ms == 1.5);
        CHECK(!rgot->fits_memory);
        CHECK(rgot->basis == NULL);
        shardd__v1__estimate_response__free_unpacked(rgot, NULL);
    }
    free(buf);
}

/* A job, as Retrain, GetJob and WatchJob return it. */
static void test_job(void)
{
    Shardd__V1__Job job = SHARDD__V1__JOB__INIT;
    Shardd__V1__Job *got;
    uint8_t *buf;
    size_t len;

    job.id = str("job-42");
    job.kind = SHARDD__V1__JOB_KIND__JOB_KIND_RETRAIN;
    job.state = SHARDD__V1__JOB_STATE__JOB_STATE_SUCCEEDED;
    job.progress = 1.0;
    job.message = str("validation MAPE 4.2 %");
    job.profile = str("cuda/H100/65536");
    job.created_unix_ms = 1700000000000;
    job.started_unix_ms = 1700000001000;
    job.finished_unix_ms = 1700000060000;
    job.result_model_version = str("m-2");

    buf = pack(&job.base, &len);
    got = shardd__v1__job__unpack(NULL, len, buf);
    CHECK(got != NULL);
    if (got != NULL) {
        CHECK(streq(got->id, "job-42"));
        CHECK(got->kind == SHARDD__V1__JOB_KIND__JOB_KIND_RETRAIN);
        CHECK(got->state == SHARDD__V1__JOB_STATE__JOB_STATE_SUCCEEDED);
        CHECK(got->progress == 1.0);
        CHECK(streq(got->message, "validation MAPE 4.2 %"));
        CHECK(streq(got->profile, "cuda/H100/65536"));
        CHECK(got->created_unix_ms == 1700000000000);
        CHECK(got->started_unix_ms == 1700000001000);
        CHECK(got->finished_unix_ms == 1700000060000);
        CHECK(streq(got->result_model_version, "m-2"));
        shardd__v1__job__free_unpacked(got, NULL);
    }
    free(buf);
}

/*
 * Field numbers are the wire contract: a Shard {device 3, col_offset 4,
 * col_width 8} is tags 1, 2, 3 as varints, and a Table's bins are packed
 * doubles under field 5.
 */
static void test_wire_numbers(void)
{
    static const uint8_t shard_wire[] = {0x08, 0x03, 0x10, 0x04, 0x18, 0x08};
    Shardd__V1__Shard s = SHARDD__V1__SHARD__INIT;
    Shardd__V1__Table t = SHARDD__V1__TABLE__INIT;
    double bins[1] = {0.5};
    uint8_t *buf;
    size_t len;

    s.device = 3;
    s.col_offset = 4;
    s.col_width = 8;
    buf = pack(&s.base, &len);
    CHECK(len == sizeof shard_wire);
    CHECK(len == sizeof shard_wire && memcmp(buf, shard_wire, len) == 0);
    free(buf);

    t.n_bins = 1;
    t.bins = bins;
    buf = pack(&t.base, &len);
    /* tag (5 << 3 | 2), length 8, then the little-endian double */
    CHECK(len == 10);
    CHECK(len == 10 && buf[0] == 0x2a && buf[1] == 0x08);
    free(buf);

    CHECK(SHARDD__V1__DTYPE__DTYPE_FP32 == 1);
    CHECK(SHARDD__V1__OPTIMIZER__OPTIMIZER_SGD == 1);
    CHECK(SHARDD__V1__OPTIMIZER__OPTIMIZER_ADAM == 4);
    CHECK(SHARDD__V1__JOB_STATE__JOB_STATE_CANCELLED == 5);
}

/*
 * proto3 has no presence: unset fields read as zero, which the API documents
 * as "use the default" (algorithm "" = neuroshard, optimizer UNSPECIFIED =
 * SGD, dtype UNSPECIFIED = fp32, 0 = server default for the topology's
 * tunables), and a message of defaults packs to nothing.
 */
static void test_defaults(void)
{
    static const uint8_t empty[1] = {0};
    Shardd__V1__PlanRequest *req;
    Shardd__V1__PlanOptions *opt;
    Shardd__V1__Table *t;
    Shardd__V1__Topology *topo;
    Shardd__V1__PlanOptions def = SHARDD__V1__PLAN_OPTIONS__INIT;

    CHECK(shardd__v1__plan_options__get_packed_size(&def) == 0);

    req = shardd__v1__plan_request__unpack(NULL, 0, empty);
    CHECK(req != NULL);
    if (req != NULL) {
        CHECK(req->n_tables == 0);
        CHECK(req->topology == NULL);
        CHECK(req->options == NULL);
        shardd__v1__plan_request__free_unpacked(req, NULL);
    }

    opt = shardd__v1__plan_options__unpack(NULL, 0, empty);
    CHECK(opt != NULL);
    if (opt != NULL) {
        CHECK(opt->algorithm != NULL && opt->algorithm[0] == '\0');
        CHECK(opt->optimizer == SHARDD__V1__OPTIMIZER__OPTIMIZER_UNSPECIFIED);
        CHECK(opt->optimizer == 0);
        CHECK(!opt->whole_tables_only);
        CHECK(opt->time_budget_ms == 0);
        CHECK(opt->seed == 0);
        CHECK(opt->constraints == NULL);
        CHECK(opt->profile != NULL && opt->profile[0] == '\0');
        shardd__v1__plan_options__free_unpacked(opt, NULL);
    }

    t = shardd__v1__table__unpack(NULL, 0, empty);
    CHECK(t != NULL);
    if (t != NULL) {
        CHECK(t->dtype == SHARDD__V1__DTYPE__DTYPE_UNSPECIFIED);
        CHECK(t->n_bins == 0);
        shardd__v1__table__free_unpacked(t, NULL);
    }

    topo = shardd__v1__topology__unpack(NULL, 0, empty);
    CHECK(topo != NULL);
    if (topo != NULL) {
        CHECK(topo->devices_per_host == 0);
        CHECK(topo->batch_size == 0);
        CHECK(topo->link_latency_ms == 0.0);
        CHECK(topo->n_mem_bytes_by_device == 0);
        shardd__v1__topology__free_unpacked(topo, NULL);
    }
}

/* A newer client's unknown field 50 is skipped; known fields still read. */
static void test_unknown_field(void)
{
    /* name "ab" (field 1), field 50 varint 7, dim 8 (field 3) */
    static const uint8_t wire[] = {0x0a, 0x02, 'a',  'b', 0x90,
                                   0x03, 0x07, 0x18, 0x08};
    Shardd__V1__Table *t = shardd__v1__table__unpack(NULL, sizeof wire, wire);

    CHECK(t != NULL);
    if (t != NULL) {
        CHECK(streq(t->name, "ab"));
        CHECK(t->dim == 8);
        shardd__v1__table__free_unpacked(t, NULL);
    }
}

/* m packed, unpacked with its own descriptor and packed again: the same
 * bytes. */
static bool repacks_same(const ProtobufCMessage *m)
{
    size_t n1, n2;
    uint8_t *b1 = pack(m, &n1), *b2;
    ProtobufCMessage *again =
        protobuf_c_message_unpack(m->descriptor, NULL, n1, b1);
    bool same = false;

    if (again != NULL) {
        b2 = pack(again, &n2);
        same = n1 == n2 && memcmp(b1, b2, n1) == 0;
        free(b2);
        protobuf_c_message_free_unpacked(again, NULL);
    }
    free(b1);
    return same;
}

static void test_garbage(void)
{
    /* varint that never ends */
    static const uint8_t g1[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
                                 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    /* length-delimited field claiming 100 bytes, 2 present */
    static const uint8_t g2[] = {0x0a, 0x64, 'a', 'b'};
    /* wire type 7 does not exist */
    static const uint8_t g3[] = {0x0f, 0x01};
    /* field number 0 is invalid */
    static const uint8_t g4[] = {0x00, 0x01};
    /* tables (field 1, a message) with a truncated inner field */
    static const uint8_t g5[] = {0x0a, 0x03, 0x0a, 0x05, 'x'};
    /* field 1 (tables, a message) sent as a varint */
    static const uint8_t g6[] = {0x08, 0x01};
    const struct {
        const uint8_t *p;
        size_t n;
    } cases[] = {{g1, sizeof g1}, {g2, sizeof g2}, {g3, sizeof g3},
                 {g4, sizeof g4}, {g5, sizeof g5}, {g6, sizeof g6}};
    Shardd__V1__PlanRequest *req;
    Shardd__V1__PlanResponse *resp;
    uint8_t noise[256];
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    size_t i, j, accepted = 0, refused = 0;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        req = shardd__v1__plan_request__unpack(NULL, cases[i].n, cases[i].p);
        if (req != NULL)
            fprintf(stderr, "garbage case %zu unpacked\n", i);
        CHECK(req == NULL);
        if (req != NULL)
            shardd__v1__plan_request__free_unpacked(req, NULL);
    }

    /* A valid request cut short inside its last submessage is refused. */
    {
        Shardd__V1__Topology topo = SHARDD__V1__TOPOLOGY__INIT;
        Shardd__V1__PlanRequest r = SHARDD__V1__PLAN_REQUEST__INIT;
        uint8_t *buf;
        size_t len;

        topo.num_devices = 8;
        topo.mem_bytes_per_device = 1ULL << 34;
        r.topology = &topo;
        buf = pack(&r.base, &len);
        req = shardd__v1__plan_request__unpack(NULL, len - 1, buf);
        CHECK(req == NULL);
        if (req != NULL)
            shardd__v1__plan_request__free_unpacked(req, NULL);
        free(buf);
    }

    /*
     * Seeded noise: whatever it decodes to, unpacking must return NULL or a
     * message that frees cleanly (the sanitizer build checks that), and a
     * message it decodes to is a real one: packed again it decodes to the
     * same bytes (protobuf-c packs fields in one canonical order).
     */
    for (i = 0; i < 2000; i++) {
        size_t n = (size_t)(i % sizeof noise);

        for (j = 0; j < n; j++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            noise[j] = (uint8_t)x;
        }
        req = shardd__v1__plan_request__unpack(NULL, n, noise);
        if (req != NULL) {
            accepted++;
            CHECK(repacks_same(&req->base));
            shardd__v1__plan_request__free_unpacked(req, NULL);
        } else {
            refused++;
        }
        resp = shardd__v1__plan_response__unpack(NULL, n, noise);
        if (resp != NULL) {
            CHECK(repacks_same(&resp->base));
            shardd__v1__plan_response__free_unpacked(resp, NULL);
        }
    }
    /* The empty inputs (i % 256 == 0) are empty requests; most noise is
     * not a request at all. */
    CHECK(accepted >= 2000 / sizeof noise);
    CHECK(refused > 1000);
    fprintf(stderr, "noise: %zu requests decoded, %zu refused\n", accepted,
            refused);
}

int main(void)
{
    test_plan_request();
    test_plan_response();
    test_estimate();
    test_job();
    test_wire_numbers();
    test_defaults();
    test_unknown_field();
    test_garbage();
    return tap_done();
}
