/*
 * Sharding schemes: every (row, column) cell placed once and each scheme's
 * shape, the cost model's view of row blocks and replicas, the collectives'
 * alpha-beta costs against values worked by hand, a plan's exchanges, and
 * the plan formats (shardd's JSON round trip, TorchRec's 2-D shards).
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "harness.h"
#include "planner.h"

static struct table mk(const char *name, int64_t rows, int32_t dim, double pf)
{
    struct table t;

    memset(&t, 0, sizeof(t));
    snprintf(t.name, sizeof(t.name), "%s", name);
    t.rows = rows;
    t.dim = dim;
    t.pooling_factor = pf;
    t.bins[0] = 0.5;
    return t;
}

/* 4 devices, 2 a host; slow links, so that every term shows. */
static void topo4(struct topology *t)
{
    topology_default(t, 4, 1ull << 30);
    t->devices_per_host = 2;
    t->batch_size = 4096;
    t->intra_host_bw = 1000;
    t->inter_host_bw = 100;
    t->link_latency_ms = 0.01;
}

static void add(struct plan *p, uint32_t table, int32_t dev, int32_t col,
                int32_t w, int64_t row, int64_t rows, enum plan_scheme sc)
{
    struct shard s = {table, dev, col, w, row, rows, (uint8_t)sc, TIER_HBM, 0};

    CHECK(plan_add_shard(p, &s) == 0);
}

/* Hand-worked: ring steps move (k-1)/k of the buffer each, one latency a
 * step; a row group adds the reduced sums' trip to their owners. */
static void test_collectives(void)
{
    struct topology t;

    topo4(&t);
    CHECK_NEAR(collective_ring_ms(&t, 1000, 2, false), 0.5 + 0.01, 1e-12);
    CHECK_NEAR(collective_ring_ms(&t, 1000, 2, true), 5.0 + 0.01, 1e-12);
    CHECK_NEAR(collective_ring_ms(&t, 1000, 1, true), 0, 0);
    CHECK_NEAR(collective_all_reduce_ms(&t, 1000, 4, true),
               2 * (1000 * 0.75 / 100 + 3 * 0.01), 1e-12);
    /* 8 columns over a host: 4096 x 8 x 4 = 131072 bytes of partial sums;
     * reduce-scatter on the host's link, then half of each half to the
     * other host's devices on the slow one. */
    CHECK_NEAR(collective_row_group_ms(&t, 8, 2, false),
               131072 * 0.5 / 1000 + 0.01 + 65536 * 0.5 / 100 + 0.01, 1e-9);
    /* Over every device (row-wise): the ring alone, on the slow link. */
    CHECK_NEAR(collective_row_group_ms(&t, 8, 4, true),
               131072 * 0.75 / 100 + 3 * 0.01, 1e-9);
}

/* A plan's collectives: a TWRW table's group both ways on its devices, one
 * all-reduce of the replicated gradients on every device, nothing for a
 * table-wise one. */
static void test_plan_collectives(void)
{
    struct table tb[3] = {mk("rows", 1000, 8, 4), mk("dp", 100, 4, 1),
                          mk("tw", 50, 4, 1)};
    struct topology t;
    struct plan p;
    double fwd[4], bwd[4], group, ar;
    struct sd_diag d;
    int r;

    topo4(&t);
    plan_init(&p, 4);
    add(&p, 0, 0, 0, 8, 0, 500, SCHEME_TWRW);
    add(&p, 0, 1, 0, 8, 500, 500, SCHEME_TWRW);
    for (r = 0; r < 4; r++)
        add(&p, 1, r, 0, 4, 0, 0, SCHEME_DP);
    add(&p, 2, 2, 0, 4, 0, 0, SCHEME_TW);
    CHECK(plan_validate(&p, tb, 3, &t, OPTIMIZER_SGD, &d) == 0);
    CHECK(plan_collectives(&p, tb, &t, fwd, bwd) == 0);
    group = collective_row_group_ms(&t, 8, 2, false);
    ar = collective_all_reduce_ms(&t, 100 * 4 * 4, 4, true);
    for (r = 0; r < 4; r++) {
        CHECK_NEAR(fwd[r], r < 2 ? group : 0, 1e-12);
        CHECK_NEAR(bwd[r], (r < 2 ? group : 0) + ar, 1e-12);
    }
    /* Evaluated: the collectives are in the devices' exchanges, and only
     * the table-wise shard counts in the all-to-all's dims. */
    CHECK(plan_evaluate(&p, tb, 3, &t, OPTIMIZER_SGD, &cost_model_analytic) ==
          0);
    CHECK(p.devices[0].dim_sum == 0 && p.devices[2].dim_sum == 4);
    CHECK(p.devices[0].bwd_comm_ms > group + ar - 1e-9);
    /* Memory: a block's rows, a whole replica. */
    CHECK(p.devices[0].mem_bytes == 500 * 8 * 4 + 100 * 4 * 4);
    CHECK(p.devices[3].mem_bytes == 100 * 4 * 4);
    plan_destroy(&p);
}

/* The cost model's view: a block sees its share of the lookups, a replica
 * its device's local batch; the histogram stays. */
static void test_views(void)
{
    struct table tb = mk("t", 1000, 16, 10), v;
    struct shard s = {0, 0, 4, 8, 250, 250, SCHEME_RW, TIER_HBM, 0};

    shard_table(&tb, &s, 4, &v);
    CHECK(v.rows == 250 && v.dim == 8);
    CHECK_NEAR(v.pooling_factor, 2.5, 1e-12);
    CHECK(v.bins[0] == 0.5);
    CHECK(shard_block_bytes(&tb, &s, OPTIMIZER_SGD) == 250 * 8 * 4);
    CHECK(shard_block_bytes(&tb, &s, OPTIMIZER_ADAM) == 3 * 250 * 8 * 4);
    s = (struct shard){0, 0, 0, 16, 0, 0, SCHEME_DP, TIER_HBM, 0};
    shard_table(&tb, &s, 4, &v);
    CHECK(v.rows == 1000);
    CHECK_NEAR(v.pooling_factor, 2.5, 1e-12);
    CHECK(shard_rows(&tb, &s) == 1000);
}

/* Each malformed plan is refused with the words that say what is wrong. */
static void test_validation(void)
{
    static const struct {
        const char *words;
        int shards[6][7]; /* table dev col width row rows scheme; -1 ends */
    } bad[] = {
        {"rows [50, 100) at column 0 are placed twice",
         {{0, 0, 0, 8, 0, 100, SCHEME_RW},
          {0, 1, 0, 8, 50, 950, SCHEME_RW},
          {-1}}},
        {"rows [100, 200) at column 0 are not placed",
         {{0, 0, 0, 8, 0, 100, SCHEME_RW},
          {0, 1, 0, 8, 200, 800, SCHEME_RW},
          {-1}}},
        {"a row block at row 1000, past its 1000 rows",
         {{0, 0, 0, 8, 0, 1000, SCHEME_RW},
          {0, 1, 0, 8, 1000, 0, SCHEME_RW},
          {-1}}},
        {"900 of 1000 rows placed",
         {{0, 0, 0, 8, 0, 100, SCHEME_RW},
          {0, 1, 0, 8, 100, 800, SCHEME_RW},
          {-1}}},
        {"are on hosts 0 and 1, not one",
         {{0, 1, 0, 8, 0, 500, SCHEME_TWRW},
          {0, 2, 0, 8, 500, 500, SCHEME_TWRW},
          {-1}}},
        {"device 1 holds two row blocks",
         {{0, 1, 0, 8, 0, 500, SCHEME_RW},
          {0, 1, 0, 8, 500, 500, SCHEME_RW},
          {-1}}},
        {"a table has one scheme",
         {{0, 0, 0, 8, 0, 500, SCHEME_RW},
          {0, 1, 0, 8, 500, 500, SCHEME_TWRW},
          {-1}}},
        {"its rows are split, so its scheme is row_wise",
         {{0, 0, 0, 8, 0, 500, SCHEME_TW},
          {0, 1, 0, 8, 500, 500, SCHEME_TW},
          {-1}}},
        {"column slices split in rows are grid_shard",
         {{0, 0, 0, 4, 0, 500, SCHEME_RW},
          {0, 1, 0, 4, 500, 500, SCHEME_RW},
          {0, 2, 4, 4, 0, 0, SCHEME_RW},
          {-1}}},
        {"data_parallel needs one replica on each of the 4 devices, not 3",
         {{0, 0, 0, 8, 0, 0, SCHEME_DP},
          {0, 1, 0, 8, 0, 0, SCHEME_DP},
          {0, 2, 0, 8, 0, 0, SCHEME_DP},
          {-1}}},
        {"a data_parallel replica holds every row and column",
         {{0, 0, 0, 8, 0, 0, SCHEME_DP},
          {0, 1, 0, 8, 0, 0, SCHEME_DP},
          {0, 2, 0, 8, 0, 0, SCHEME_DP},
          {0, 3, 0, 8, 0, 10, SCHEME_DP},
          {-1}}},
        {"columns [4, 8) are placed twice",
         {{0, 0, 0, 8, 0, 1000, SCHEME_CW},
          {0, 1, 4, 4, 0, 1000, SCHEME_CW},
          {-1}}},
        {"rows from 900 (200 of them) run past its 1000 rows",
         {{0, 0, 0, 8, 0, 900, SCHEME_RW},
          {0, 1, 0, 8, 900, 200, SCHEME_RW},
          {-1}}},
    };
    struct table tb = mk("t", 1000, 8, 1);
    struct topology t;
    struct sd_diag d;
    struct plan p;
    size_t i;
    int k;

    topo4(&t);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        plan_init(&p, 4);
        for (k = 0; bad[i].shards[k][0] >= 0; k++) {
            const int *v = bad[i].shards[k];

            add(&p, (uint32_t)v[0], v[1], v[2], v[3], v[4], v[5],
                (enum plan_scheme)v[6]);
        }
        d.msg[0] = '\0';
        CHECK(plan_validate(&p, &tb, 1, &t, OPTIMIZER_SGD, &d) == SD_EINVAL);
        if (strstr(d.msg, bad[i].words) == NULL)
            fprintf(stderr, "case %zu: \"%s\"\n", i, d.msg);
        CHECK(strstr(d.msg, bad[i].words) != NULL);
        plan_destroy(&p);
    }

    /* A grid: two column slices, each in blocks on one host. */
    plan_init(&p, 4);
    add(&p, 0, 0, 0, 4, 0, 600, SCHEME_GRID);
    add(&p, 0, 1, 0, 4, 600, 400, SCHEME_GRID);
    add(&p, 0, 2, 4, 4, 0, 500, SCHEME_GRID);
    add(&p, 0, 3, 4, 4, 500, 500, SCHEME_GRID);
    CHECK(plan_validate(&p, &tb, 1, &t, OPTIMIZER_SGD, &d) == 0);
    CHECK(plan_table_scheme(&p, 0) == SCHEME_GRID);
    plan_destroy(&p);
    /* Shards of every row: marked column-wise together. */
    plan_init(&p, 4);
    CHECK(plan_add(&p, 0, 0, 0, 4) == 0 && plan_add(&p, 0, 3, 4, 4) == 0);
    CHECK(plan_validate(&p, &tb, 1, &t, OPTIMIZER_SGD, &d) == 0);
    CHECK(p.shards[0].scheme == SCHEME_CW && p.shards[1].scheme == SCHEME_CW);
    plan_destroy(&p);
}

/* shardd's JSON keeps scheme and rows; TorchRec's has 2-D offsets, the
 * module path asked for, and no shards for a replicated table. */
static void test_formats(void)
{
    struct table tb[2] = {mk("r", 1000, 8, 4), mk("dp", 100, 4, 1)};
    struct topology t;
    struct plan p, q;
    struct sd_diag d;
    json_t *doc, *r, *dp;
    json_error_t err;
    size_t k;
    char *s;
    int i;

    topo4(&t);
    plan_init(&p, 4);
    add(&p, 0, 2, 0, 8, 0, 600, SCHEME_TWRW);
    add(&p, 0, 3, 0, 8, 600, 400, SCHEME_TWRW);
    for (i = 0; i < 4; i++)
        add(&p, 1, i, 0, 4, 0, 0, SCHEME_DP);
    CHECK(plan_validate(&p, tb, 2, &t, OPTIMIZER_SGD, &d) == 0);
    CHECK(plan_evaluate(&p, tb, 2, &t, OPTIMIZER_SGD, &cost_model_analytic) ==
          0);
    s = json_plan(&p, tb);
    CHECK(s != NULL && json_parse_plan(s, strlen(s), tb, 2, &q, &d) == 0);
    CHECK(q.nshards == p.nshards);
    CHECK(plan_validate(&q, tb, 2, &t, OPTIMIZER_SGD, &d) == 0);
    for (k = 0; k < p.nshards && q.nshards == p.nshards; k++)
        CHECK(q.shards[k].device == p.shards[k].device &&
              q.shards[k].row_offset == p.shards[k].row_offset &&
              q.shards[k].row_count == p.shards[k].row_count &&
              q.shards[k].scheme == p.shards[k].scheme);
    plan_destroy(&q);
    free(s);

    s = json_plan_torchrec(&p, tb, &t, "model.sparse.ebc");
    doc = s ? json_loads(s, 0, &err) : NULL;
    CHECK(doc != NULL);
    r = json_object_get(
        json_object_get(json_object_get(doc, "plan"), "model.sparse.ebc"), "r");
    dp = json_object_get(
        json_object_get(json_object_get(doc, "plan"), "model.sparse.ebc"),
        "dp");
    CHECK(strcmp(json_string_value(json_object_get(r, "sharding_type")),
                 "table_row_wise") == 0);
    {
        json_t *sh = json_array_get(json_object_get(r, "shards"), 1);

        CHECK(json_integer_value(json_array_get(
                  json_object_get(sh, "shard_offsets"), 0)) == 600);
        CHECK(json_integer_value(json_array_get(
                  json_object_get(sh, "shard_sizes"), 0)) == 400);
        CHECK(strcmp(json_string_value(json_object_get(sh, "placement")),
                     "rank:3/cuda:1") == 0);
    }
    CHECK(strcmp(json_string_value(json_object_get(dp, "sharding_type")),
                 "data_parallel") == 0);
    CHECK(strcmp(json_string_value(json_object_get(dp, "compute_kernel")),
                 "dense") == 0);
    CHECK(json_object_get(dp, "shards") == NULL);
    CHECK(json_array_size(json_object_get(dp, "ranks")) == 4);
    json_decref(doc);
    free(s);
    plan_destroy(&p);
}

int main(void)
{
    test_collectives();
    test_plan_collectives();
    test_views();
    test_validation();
    test_formats();
    return tap_done();
}
