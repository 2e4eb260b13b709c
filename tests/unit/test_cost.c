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
    struct table tb[4];
    struct topology t;
    struct plan p;

    make(&tb[0], "a", 100, 8, 1);
    make(&tb[1], "b", 100, 16, 1);
    make(&tb[2], "c", 100, 8, 1);
    make(&tb[3], "d", 100, 4, 1);
    /* 3 devices on one host, batch 3000: 1000 rows of 4 bytes per column
     * go to each peer, i.e. 4000 bytes per column per peer, at 1000 B/ms
     * and 0.5 ms a peer: 4 ms per column per peer plus 1 ms. */
    topology_default(&t, 3, 1ull << 30);
    t.batch_size = 3000;
    t.intra_host_bw = 1000;
    t.link_latency_ms = 0.5;
    CHECK(plan_init(&p, 3) == 0);
    plan_add(&p, 0, 0, 0, 8); /* device 0: a (8) + b (16) = 24 columns */
    plan_add(&p, 1, 0, 0, 16);
    plan_add(&p, 2, 1, 0, 8); /* device 1: c, 8 columns */
    plan_add(&p, 3, 2, 0, 4); /* device 2: d, 4 columns */
    CHECK(plan_evaluate(&p, tb, 4, &t, OPTIMIZER_SGD, &m) == 0);

    CHECK(p.devices[0].nshards == 2 && p.devices[1].nshards == 1 &&
          p.devices[2].nshards == 1);
    CHECK(p.devices[0].dim_sum == 24 && p.devices[1].dim_sum == 8 &&
          p.devices[2].dim_sum == 4);
    CHECK(p.devices[0].mem_bytes == 100 * 24 * 4);
    CHECK(p.devices[2].mem_bytes == 100 * 4 * 4);
    CHECK_NEAR(p.devices[0].compute_ms, 2.0, 1e-12);
    CHECK_NEAR(p.devices[1].compute_ms, 1.0, 1e-12);
    CHECK_NEAR(p.devices[2].compute_ms, 1.0, 1e-12);
    /* The exchange, both ways alike (busier direction x 4 ms + 1 ms):
     * device 0 sends 24 x 2 peers, receives 8 + 4: 48 x 4 + 1 = 193 ms;
     * device 1 sends 8 x 2 = 16, receives 28: 28 x 4 + 1 = 113 ms;
     * device 2 sends 4 x 2 = 8, receives 32: 32 x 4 + 1 = 129 ms. */
    CHECK_NEAR(p.devices[0].bwd_comm_ms, 193.0, 1e-12);
    CHECK_NEAR(p.devices[1].bwd_comm_ms, 113.0, 1e-12);
    CHECK_NEAR(p.devices[2].bwd_comm_ms, 129.0, 1e-12);
    /* Ready (compute + backward): 195, 114, 130.  The forward exchange
     * waits for the slowest (195): 193, 113 + 81, 129 + 65. */
    CHECK_NEAR(p.devices[0].fwd_comm_ms, 193.0, 1e-12);
    CHECK_NEAR(p.devices[1].fwd_comm_ms, 194.0, 1e-12);
    CHECK_NEAR(p.devices[2].fwd_comm_ms, 194.0, 1e-12);
    /* Totals: 195 + 193 = 388; 114 + 194 = 308; 130 + 194 = 324. */
    CHECK_NEAR(p.devices[0].total_ms, 388.0, 1e-12);
    CHECK_NEAR(p.devices[1].total_ms, 308.0, 1e-12);
    CHECK_NEAR(p.devices[2].total_ms, 324.0, 1e-12);
    CHECK_NEAR(p.cost_ms, 388.0, 1e-12);
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
