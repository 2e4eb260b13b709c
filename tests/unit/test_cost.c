/* Costs: the alpha-beta all-to-all, the analytic compute model and the plan
 * cost with its wait-for-the-slowest term, all against hand-computed values. */
#include <string.h>

#include "harness.h"
#include "planner.h"

static void make(struct table *t, const char *name, int64_t rows, int32_t dim,
                 double pf)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->rows = rows;
    t->dim = dim;
    t->pooling_factor = pf;
}

/* 4 devices on 2 hosts, batch 65536: 16384 rows of 4 bytes per column go to
 * each peer, i.e. 65536 bytes per column per peer. */
static void test_alpha_beta(void)
{
    struct topology t;
    int32_t dims[4] = {8, 16, 0, 4};
    double fw[4], bw[4];

    topology_default(&t, 4, 1ull << 30);
    t.devices_per_host = 2;
    t.intra_host_bw = 1e6;
    t.inter_host_bw = 1e5;
    t.link_latency_ms = 0.01;
    cost_comm_alpha_beta(&t, dims, fw, bw);
    /* Device 0: intra max(send 8 cols, recv 16 cols) = 1048576 B / 1e6;
     * inter max(send 8 cols x 2 peers, recv 4 cols) = 1048576 B / 1e5;
     * the slower link plus 3 latencies. */
    CHECK_NEAR(fw[0], 10.48576 + 0.03, 1e-9);
    CHECK_NEAR(bw[0], fw[0], 1e-12);
    /* Device 2 sends nothing and receives 24 columns over the inter link. */
    CHECK_NEAR(fw[2], 1.572864 * 10 + 0.03, 1e-9);
    /* Device 3: intra max(4, 0) cols = 262144 B; inter max(8, 24) cols. */
    CHECK_NEAR(fw[3], 15.72864 + 0.03, 1e-9);

    /* One device: no exchange at all. */
    topology_default(&t, 1, 1ull << 30);
    cost_comm_alpha_beta(&t, dims, fw, bw);
    CHECK(fw[0] == 0 && bw[0] == 0);
}

static void test_analytic(void)
{
    struct topology t;
    struct table a;
    struct shard_item it[2];
    double ms;

    topology_default(&t, 1, 1ull << 30);
    t.batch_size = 1000;
    t.device_mem_bw = 1e6;
    make(&a, "a", 1000, 128, 2.0);
    /* 2000 lookups: 16000 B of indices + 2000 x 128 x 4 B of rows + 1000 x
     * 128 x 4 B of outputs = 1552000 B at 1e6 B/ms, x3 for fwd + bwd. */
    it[0] = (struct shard_item){&a, 128};
    ms = cost_model_analytic.shard_ms(NULL, &t, it, 1);
    CHECK_NEAR(ms, 4.656, 1e-9);
    /* A 16-column slice: rows read at 32 columns, 1.75 block penalty:
     * (16000 + 256000 + 64000) x 1.75 = 588000 B. */
    it[1] = (struct shard_item){&a, 16};
    ms = cost_model_analytic.shard_ms(NULL, &t, it + 1, 1);
    CHECK_NEAR(ms, 1.764, 1e-9);
    ms = cost_model_analytic.shard_ms(NULL, &t, it, 2);
    CHECK_NEAR(ms, 4.656 + 1.764, 1e-9);
    CHECK(cost_model_analytic.shard_ms(NULL, &t, it, 0) == 0);
}

/* A compute model of 1 ms per item, to see the plan cost alone. */
static double per_item_ms(void *ctx, const struct topology *t,
                          const struct shard_item *items, size_t n)
{
    return (double)n * *(const double *)ctx;
}

static void test_evaluate(void)
{
    double unit = 1.0;
    struct cost_model m = {"per_item", per_item_ms, &unit};
    struct table tb[3];
    struct topology t;
    struct plan p;
    double pure[2], bwd[2];
    int32_t dims[2] = {24, 8};

    make(&tb[0], "a", 100, 8, 1);
    make(&tb[1], "b", 100, 16, 1);
    make(&tb[2], "c", 100, 8, 1);
    topology_default(&t, 2, 1ull << 30);
    CHECK(plan_init(&p, 2) == 0);
    plan_add(&p, 0, 0, 0, 8);
    plan_add(&p, 1, 0, 0, 16);
    plan_add(&p, 2, 1, 0, 8);
    CHECK(plan_evaluate(&p, tb, 3, &t, OPTIMIZER_SGD, &m) == 0);
    cost_comm_alpha_beta(&t, dims, pure, bwd);

    CHECK(p.devices[0].nshards == 2 && p.devices[1].nshards == 1);
    CHECK(p.devices[0].dim_sum == 24 && p.devices[1].dim_sum == 8);
    CHECK(p.devices[0].mem_bytes == 100 * 24 * 4);
    CHECK_NEAR(p.devices[0].compute_ms, 2.0, 1e-12);
    CHECK_NEAR(p.devices[1].compute_ms, 1.0, 1e-12);
    CHECK_NEAR(p.devices[0].bwd_comm_ms, bwd[0], 1e-12);
    /* Device 1 is ready 1 ms + the bwd difference earlier and waits. */
    CHECK_NEAR(p.devices[1].fwd_comm_ms,
               pure[1] + (2.0 + bwd[0]) - (1.0 + bwd[1]), 1e-12);
    CHECK_NEAR(p.devices[0].fwd_comm_ms, pure[0], 1e-12);
    CHECK_NEAR(p.cost_ms,
               2.0 + bwd[0] + (pure[0] > pure[1] ? pure[0] : pure[1]), 1e-12);
    CHECK(strcmp(p.cost_model, "per_item") == 0);
    CHECK(strcmp(p.comm_model, "alpha_beta") == 0);
    plan_destroy(&p);
}

int main(void)
{
    test_alpha_beta();
    test_analytic();
    test_evaluate();
    return tap_done();
}
