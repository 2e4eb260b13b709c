/*
 * Tests of TorchRec's estimators and greedy partitioner
 * (planner/models/trec.c, planner/search/torchrec.c).
 * The golden numbers come from reference/torchrec_planner.md 2.7: the
 * notebook cases and the 16-rank table.  The doc prints six decimals, so
 * each is checked at that precision, and again at 1e-9 relative against the
 * full-precision values of an independent re-derivation of the same
 * formulas (2.2-2.5): tests/unit/torchrec_golden.py prints them, and the
 * ctest test torchrec_golden checks that every 17-digit constant below is
 * one it derives (and that each rounds to the doc's six decimals).
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "planner.h"
#include "shardd/bytes.h"

/* |a - b| <= rel * |b|: for the full-precision goldens. */
#define CHECK_REL(a, b, rel)                                                   \
    do {                                                                       \
        double a_ = (double)(a), b_ = (double)(b);                             \
        if (fabs(a_ - b_) <= (rel)*fabs(b_)) {                                 \
            tap_pass++;                                                        \
        } else {                                                               \
            tap_fail++;                                                        \
            fprintf(stderr, "%s:%d: CHECK_REL(%s, %s): %.17g vs %.17g\n",      \
                    __FILE__, __LINE__, #a, #b, a_, b_);                       \
        }                                                                      \
    } while (0)

#define DOC_TOL  5e-7 /* half a unit in the doc's sixth decimal */
#define FULL_TOL 1e-9

#define GIB ((double)(1ull << 30))


/* Table- and column-wise only, for up to 64 tables: the partitioner's
 * device order, as a TorchRec user gets it with sharding_types. */
static const struct table_constraint *twcw(void)
{
    static struct table_constraint c[64];
    int i;

    for (i = 0; i < 64; i++)
        c[i] = (struct table_constraint){
            .schemes = (1u << SCHEME_TW) | (1u << SCHEME_CW), .host = -1};
    return c;
}

static struct trec_shard_in shard(enum trec_sharding s, int64_t batch,
                                  double pf, int64_t rows, int32_t cols,
                                  int32_t ws, int32_t lws)
{
    struct trec_shard_in in;

    memset(&in, 0, sizeof(in));
    in.sharding = s;
    in.kernel = TREC_KERNEL_FUSED;
    in.batch_size = batch;
    in.pooling_factor = pf;
    in.rows = rows;
    in.cols = cols;
    in.elem_size = 4;
    in.world_size = ws;
    in.local_world_size = lws;
    return in;
}

/* Checks a perf against doc values (6 decimals) and full-precision ones. */
static void check_perf(const struct trec_perf *p, const double doc[5],
                       const double full[5])
{
    CHECK_NEAR(p->fwd_compute, doc[0], DOC_TOL);
    CHECK_NEAR(p->fwd_comms, doc[1], DOC_TOL);
    CHECK_NEAR(p->bwd_compute, doc[2], DOC_TOL);
    CHECK_NEAR(p->bwd_comms, doc[3], DOC_TOL);
    CHECK_NEAR(p->total, doc[4], DOC_TOL);
    CHECK_REL(p->fwd_compute, full[0], FULL_TOL);
    CHECK_REL(p->fwd_comms, full[1], FULL_TOL);
    CHECK_REL(p->bwd_compute, full[2], FULL_TOL);
    CHECK_REL(p->bwd_comms, full[3], FULL_TOL);
    CHECK_REL(p->total, full[4], FULL_TOL);
    CHECK_REL(p->total,
              p->fwd_compute + p->fwd_comms + p->bwd_compute + p->bwd_comms,
              1e-15);
}

/* The Planner_Introduction notebook: one 10M x 64 fp32 table, B = 512. */
static void test_notebook(void)
{
    struct trec_shard_in in;
    struct trec_perf p;

    /* TW, ws = 1, PF = 1: 0.001361 with its printed breakdown. */
    {
        static const double doc[5] = {0.000318, 0.000203, 0.000636, 0.000203,
                                      0.001361};
        static const double full[5] = {
            0.00031789143880208332, 0.00020345052083333334,
            0.00063578287760416663, 0.00020345052083333334,
            0.0013605753580729165};

        in = shard(TREC_TABLE_WISE, 512, 1.0, 10000000, 64, 1, 1);
        trec_shard_perf(&in, &p);
        check_perf(&p, doc, full);
    }
    /* TW, ws = 2 (forced by a constraint in the notebook): 0.002721. */
    in = shard(TREC_TABLE_WISE, 512, 1.0, 10000000, 64, 2, 2);
    trec_shard_perf(&in, &p);
    CHECK_NEAR(p.total, 0.002721, DOC_TOL);
    CHECK_REL(p.total, 0.002721150716145833, FULL_TOL);

    /* RW, ws = 2, PF = 1: 0.002720 per rank, 0.005439 per table. */
    in = shard(TREC_ROW_WISE, 512, 1.0, 5000000, 64, 2, 2);
    trec_shard_perf(&in, &p);
    CHECK_NEAR(p.total, 0.002720, DOC_TOL);
    CHECK_NEAR(2 * p.total, 0.005439, DOC_TOL);
    CHECK_REL(p.total, 0.0027195346794000839, FULL_TOL);
    CHECK_REL(p.fwd_compute, 0.00041251464299400781, FULL_TOL);
    CHECK_REL(p.bwd_comms, 0.0010750897087513935, FULL_TOL);

    /* RW, ws = 2, PF = 200: 0.086503 per rank, 0.173005 per table. */
    in = shard(TREC_ROW_WISE, 512, 200.0, 5000000, 64, 2, 2);
    trec_shard_perf(&in, &p);
    CHECK_NEAR(p.total, 0.086503, DOC_TOL);
    CHECK_NEAR(2 * p.total, 0.173005, DOC_TOL);
    CHECK_REL(p.total, 0.086502534489966559, FULL_TOL);
    CHECK_REL(p.fwd_compute, 0.028340181246516164, FULL_TOL);

    /* TW storage, ws = 1, SGD: 2,560,135,168 B = weights + 4096 in +
     * 131072 out, "2.4 (7%)" of 32 GiB in the notebook. */
    in = shard(TREC_TABLE_WISE, 512, 1.0, 10000000, 64, 1, 1);
    CHECK(trec_shard_storage(&in, OPTIMIZER_SGD) == 2560135168ull);
}

/* The 16-rank table: B = 512, PF = 20, d = 128 fp32, ws = 16, lws = 8. */
static void test_16_ranks(void)
{
    struct trec_shard_in in;
    struct trec_perf p;

    {
        static const double doc[5] = {0.092812, 0.312500, 0.185623, 0.312500,
                                      0.903435};
        static const double full[5] = {0.092811541945373471, 0.3125,
                                       0.18562308389074694, 0.3125,
                                       0.90343462583612044};

        in = shard(TREC_TABLE_WISE, 512, 20.0, 1000000, 128, 16, 8);
        trec_shard_perf(&in, &p);
        check_perf(&p, doc, full);
        /* Column-wise shards use the same formula (2.2). */
        in.sharding = TREC_COLUMN_WISE;
        trec_shard_perf(&in, &p);
        check_perf(&p, doc, full);
    }
    {
        static const double doc[5] = {0.009883, 0.312500, 0.019767, 0.323191,
                                      0.665341};
        static const double full[5] = {
            0.009883340518743032, 0.3125, 0.019766681037486064,
            0.32319101867335565, 0.66534104022958473};

        in = shard(TREC_ROW_WISE, 512, 20.0, 62500, 128, 16, 8);
        trec_shard_perf(&in, &p);
        check_perf(&p, doc, full);
    }
    {
        static const double doc[5] = {0.015412, 0.045573, 0.030824, 0.056264,
                                      0.148073};
        static const double full[5] = {
            0.015411887280518394, 0.045572916666666664, 0.030823774561036788,
            0.056263935340022296, 0.14807251384824416};

        in = shard(TREC_TABLE_ROW_WISE, 512, 20.0, 125000, 128, 16, 8);
        trec_shard_perf(&in, &p);
        check_perf(&p, doc, full);
    }
    {
        static const double doc[5] = {0.011601, 0.0, 0.023203, 0.016955,
                                      0.051759};
        static const double full[5] = {
            0.011601442743171684, 0.0, 0.023202885486343368,
            0.016955096054502419, 0.051759424284017475};

        in = shard(TREC_DATA_PARALLEL, 512, 20.0, 1000, 128, 16, 8);
        in.kernel = TREC_KERNEL_DENSE;
        trec_shard_perf(&in, &p);
        CHECK(p.fwd_comms == 0);
        CHECK_NEAR(p.fwd_compute, doc[0], DOC_TOL);
        CHECK_NEAR(p.bwd_compute, doc[2], DOC_TOL);
        CHECK_NEAR(p.bwd_comms, doc[3], DOC_TOL);
        CHECK_NEAR(p.total, doc[4], DOC_TOL);
        CHECK_REL(p.fwd_compute, full[0], FULL_TOL);
        CHECK_REL(p.bwd_compute, full[2], FULL_TOL);
        CHECK_REL(p.bwd_comms, full[3], FULL_TOL);
        CHECK_REL(p.total, full[4], FULL_TOL);
    }
}

/* Zero bandwidths mean TorchRec's constants; dense halves the kernel's,
 * the UVM kernels read the host link. */
static void test_defaults(void)
{
    struct trec_shard_in in =
        shard(TREC_TABLE_WISE, 512, 20.0, 1000, 128, 16, 8);
    struct trec_perf a, b;

    trec_shard_perf(&in, &a);
    in.hbm_bw = 897.0 * GIB / 1000.0;
    in.intra_bw = 600.0 * GIB / 1000.0;
    in.inter_bw = 12.5 * GIB / 1000.0;
    trec_shard_perf(&in, &b);
    CHECK(a.total == b.total && a.fwd_compute == b.fwd_compute);

    in.kernel = TREC_KERNEL_DENSE;
    trec_shard_perf(&in, &b);
    CHECK_REL(b.fwd_compute, 2 * a.fwd_compute, 1e-15);
    CHECK(b.fwd_comms == a.fwd_comms);

    /* The UVM kernels (2.1): the host link (32 GiB/s by default) at a
     * tenth; a cache at load factor 0.2 the mix of HBM and the link at a
     * tenth.  Only the compute changes. */
    in.kernel = TREC_KERNEL_FUSED_UVM;
    trec_shard_perf(&in, &b);
    CHECK_REL(b.fwd_compute, a.fwd_compute * 897.0 / (32.0 / 10), 1e-12);
    CHECK(b.fwd_comms == a.fwd_comms);
    in.ddr_bw = 64.0 * GIB / 1000.0;
    trec_shard_perf(&in, &b);
    CHECK_REL(b.fwd_compute, a.fwd_compute * 897.0 / (64.0 / 10), 1e-12);
    in.kernel = TREC_KERNEL_FUSED_UVM_CACHING;
    in.cache_load_factor = 0.2;
    trec_shard_perf(&in, &b);
    CHECK_REL(b.fwd_compute,
              a.fwd_compute * 897.0 / ((0.2 * 897.0 + 0.8 * 64.0) / 10), 1e-12);
    CHECK_REL(b.bwd_compute, 2 * b.fwd_compute, 1e-12);

    /* One host: the intra-host link (600 GiB/s). */
    in = shard(TREC_TABLE_WISE, 512, 1.0, 1000, 128, 8, 8);
    trec_shard_perf(&in, &a);
    CHECK_REL(a.fwd_comms, 512.0 * 8 * 128 * 4 / (600.0 * GIB / 1000.0), 1e-15);
    /* A user's inter-host bandwidth replaces the default. */
    in = shard(TREC_TABLE_WISE, 512, 1.0, 1000, 128, 16, 8);
    in.inter_bw = 1e6;
    trec_shard_perf(&in, &a);
    CHECK_REL(a.fwd_comms, 512.0 * 16 * 128 * 4 / 1e6, 1e-15);

    /* Block penalty (2.2): 1.75 below 64 columns, with the 32 floor. */
    in = shard(TREC_TABLE_WISE, 100, 1.0, 1000, 16, 1, 1);
    trec_shard_perf(&in, &a);
    CHECK_REL(a.fwd_compute,
              (100.0 * 8 + 100.0 * 32 * 4 + 100.0 * 16 * 4) * 1.75 /
                  (897.0 * GIB / 1000.0),
              1e-15);
}

static void test_storage(void)
{
    struct trec_shard_in in =
        shard(TREC_TABLE_WISE, 512, 1.0, 10000000, 64, 1, 1);
    const uint64_t w = 2560000000ull, io = 4096 + 131072;

    /* 1.6: optimizer state = tensor * (0, 2, 1, 1/dim). */
    CHECK(trec_shard_storage(&in, OPTIMIZER_SGD) == w + io);
    CHECK(trec_shard_storage(&in, OPTIMIZER_ADAM) == 3 * w + io);
    CHECK(trec_shard_storage(&in, OPTIMIZER_ADAGRAD) == 2 * w + io);
    CHECK(trec_shard_storage(&in, OPTIMIZER_ROWWISE_ADAGRAD) ==
          w + 10000000ull * 4 + io);

    /* CW: the shard's columns in weights and output; input as TW. */
    in = shard(TREC_COLUMN_WISE, 512, 3.0, 1000, 128, 4, 4);
    CHECK(trec_shard_storage(&in, OPTIMIZER_SGD) ==
          1000ull * 128 * 4 + 512 * 3 * 4 * 8 + 512 * 4 * 128 * 4);

    /* RW: ids / ws; an empty shard needs nothing. */
    in = shard(TREC_ROW_WISE, 512, 3.0, 250, 64, 4, 4);
    CHECK(trec_shard_storage(&in, OPTIMIZER_SGD) ==
          250ull * 64 * 4 + 512 * 3 * 8 + 512 * 4 * 64 * 4);
    in.rows = 0;
    CHECK(trec_shard_storage(&in, OPTIMIZER_ADAM) == 0);

    /* TWRW: ids / lws, times ws. */
    in = shard(TREC_TABLE_ROW_WISE, 512, 3.0, 250, 64, 8, 4);
    CHECK(trec_shard_storage(&in, OPTIMIZER_SGD) ==
          250ull * 64 * 4 + 512 * 3 * 2 * 8 + 512 * 8 * 64 * 4);

    /* DP: the full table and the local batch only. */
    in = shard(TREC_DATA_PARALLEL, 512, 3.0, 1000, 64, 8, 4);
    CHECK(trec_shard_storage(&in, OPTIMIZER_SGD) ==
          1000ull * 64 * 4 + 512 * 3 * 8 + 512 * 64 * 4);

    /* Absurd batches saturate instead of wrapping. */
    in = shard(TREC_TABLE_WISE, (int64_t)1 << 30, 1.0e6, 1000, 64, 4096, 8);
    CHECK(trec_shard_storage(&in, OPTIMIZER_SGD) == UINT64_MAX);

    /* fp16: two bytes per element, output too. */
    in = shard(TREC_TABLE_WISE, 512, 1.0, 1000, 64, 1, 1);
    in.elem_size = 2;
    CHECK(trec_shard_storage(&in, OPTIMIZER_SGD) ==
          1000ull * 64 * 2 + 512 * 8 + 512 * 64 * 2);
}

static void test_cw_block(void)
{
    CHECK(trec_cw_block(128, 0) == 128);
    CHECK(trec_cw_block(256, 0) == 128);
    CHECK(trec_cw_block(1024, 0) == 128);
    CHECK(trec_cw_block(96, 0) == 96);
    CHECK(trec_cw_block(384, 0) == 128);
    CHECK(trec_cw_block(200, 0) == 200); /* no divisor in [128, 200) */
    CHECK(trec_cw_block(192, 0) == 192);
    CHECK(trec_cw_block(640, 0) == 128);
    CHECK(trec_cw_block(4, 0) == 4);
    CHECK(trec_cw_block(1024, 256) == 256);
    CHECK(trec_cw_block(200, 100) == 100);
    CHECK(trec_cw_block(200, 64) == 100); /* 66.67 is not a divisor */
    CHECK(trec_cw_block(96, 128) == 96);
}

/* ------------------------------------------------------------------------ */
/* The greedy partitioner                                                     */

static struct table mk(const char *name, int64_t rows, int32_t dim, double pf)
{
    struct table t;

    memset(&t, 0, sizeof(t));
    snprintf(t.name, sizeof(t.name), "%s", name);
    t.rows = rows;
    t.dim = dim;
    t.pooling_factor = pf;
    t.dtype = TABLE_DTYPE_FP32;
    return t;
}

/* The device of the shard of table i at column offset `off`, or -1. */
static int32_t device_of(const struct plan *p, uint32_t i, int32_t off)
{
    size_t k;

    for (k = 0; k < p->nshards; k++) {
        if (p->shards[k].table == i && p->shards[k].col_offset == off)
            return p->shards[k].device;
    }
    return -1;
}

/* TorchRec storage of a `cols`-wide shard of tb on topology t, as the planner
 * charges it. */
static uint64_t trec_bytes(const struct table *tb, const struct topology *t,
                           int32_t cols, enum trec_sharding s)
{
    struct trec_shard_in in =
        shard(s, t->batch_size / t->ndevices, tb->pooling_factor, tb->rows,
              cols, t->ndevices, t->devices_per_host);

    return trec_shard_storage(&in, OPTIMIZER_SGD);
}

/* Four equal tables on two devices of one host: 0, 1, 0, 1. */
static void test_greedy_equal(void)
{
    struct table tb[4];
    struct topology t;
    struct sd_diag d = {{0}};
    struct plan p;
    int i;

    for (i = 0; i < 4; i++) {
        char name[16];

        snprintf(name, sizeof(name), "t%d", i);
        tb[i] = mk(name, 100000, 64, 2.0);
    }
    topology_default(&t, 2, 1ull << 30);
    if (CHECK_OK(plan_torchrec_greedy(tb, 4, &t, OPTIMIZER_SGD, NULL, twcw(),
                                      &p, &d),
                 d.msg)) {
        CHECK(p.nshards == 4);
        CHECK(strcmp(p.algorithm, "torchrec_greedy") == 0);
        CHECK(device_of(&p, 0, 0) == 0);
        CHECK(device_of(&p, 1, 0) == 1);
        CHECK(device_of(&p, 2, 0) == 0);
        CHECK(device_of(&p, 3, 0) == 1);
        CHECK(plan_validate(&p, tb, 4, &t, OPTIMIZER_SGD, &d) == 0);
        plan_destroy(&p);
    }

    /* Two hosts of two: ties go to local rank 0 first, so the hosts share
     * the load: ranks 0, 2, then 1, 3. */
    topology_default(&t, 4, 1ull << 30);
    t.devices_per_host = 2;
    if (CHECK_OK(plan_torchrec_greedy(tb, 4, &t, OPTIMIZER_SGD, NULL, twcw(),
                                      &p, &d),
                 d.msg)) {
        CHECK(device_of(&p, 0, 0) == 0);
        CHECK(device_of(&p, 1, 0) == 2);
        CHECK(device_of(&p, 2, 0) == 1);
        CHECK(device_of(&p, 3, 0) == 3);
        CHECK(plan_validate(&p, tb, 4, &t, OPTIMIZER_SGD, &d) == 0);
        plan_destroy(&p);
    }
}

/*
 * Largest storage first, then least perf: t1 (largest) and t2 take the two
 * empty devices, t0 (heavy lookups) ties and goes to rank 0, and t3 to the
 * now lighter rank 1.  Placing in index order would give another plan.
 */
static void test_greedy_order(void)
{
    struct table tb[4];
    struct topology t;
    struct sd_diag d = {{0}};
    struct plan p;

    tb[0] = mk("t0", 100000, 32, 10.0);
    tb[1] = mk("t1", 300000, 32, 1.0);
    tb[2] = mk("t2", 200000, 32, 1.0);
    tb[3] = mk("t3", 50000, 32, 1.0);
    topology_default(&t, 2, 1ull << 30);
    CHECK(trec_bytes(&tb[1], &t, 32, TREC_TABLE_WISE) >
          trec_bytes(&tb[2], &t, 32, TREC_TABLE_WISE));
    CHECK(trec_bytes(&tb[2], &t, 32, TREC_TABLE_WISE) >
          trec_bytes(&tb[0], &t, 32, TREC_TABLE_WISE));
    CHECK(trec_bytes(&tb[0], &t, 32, TREC_TABLE_WISE) >
          trec_bytes(&tb[3], &t, 32, TREC_TABLE_WISE));
    if (CHECK_OK(plan_torchrec_greedy(tb, 4, &t, OPTIMIZER_SGD, NULL, twcw(),
                                      &p, &d),
                 d.msg)) {
        CHECK(device_of(&p, 1, 0) == 0);
        CHECK(device_of(&p, 2, 0) == 1);
        CHECK(device_of(&p, 0, 0) == 0);
        CHECK(device_of(&p, 3, 0) == 1);
        plan_destroy(&p);
    }
}

/* Memory overrides perf: the third table does not fit beside the first. */
static void test_greedy_memory(void)
{
    struct table tb[3];
    struct topology t;
    struct sd_diag d = {{0}};
    struct plan p;
    uint64_t a, c;

    tb[0] = mk("a", 300000, 64, 1.0);
    tb[1] = mk("b", 200000, 64, 1.0);
    tb[2] = mk("c", 100000, 64, 1.0);
    topology_default(&t, 2, 1);
    a = trec_bytes(&tb[0], &t, 64, TREC_TABLE_WISE);
    c = trec_bytes(&tb[2], &t, 64, TREC_TABLE_WISE);
    t.mem_bytes = a + c - 1;
    if (CHECK_OK(plan_torchrec_greedy(tb, 3, &t, OPTIMIZER_SGD, NULL, twcw(),
                                      &p, &d),
                 d.msg)) {
        CHECK(device_of(&p, 0, 0) == 0);
        CHECK(device_of(&p, 1, 0) == 1);
        CHECK(device_of(&p, 2, 0) == 1);
        CHECK(plan_validate(&p, tb, 3, &t, OPTIMIZER_SGD, &d) == 0);
        plan_destroy(&p);
    }

    /* One byte more and it does. */
    t.mem_bytes = a + c;
    if (CHECK_OK(plan_torchrec_greedy(tb, 3, &t, OPTIMIZER_SGD, NULL, twcw(),
                                      &p, &d),
                 d.msg)) {
        CHECK(device_of(&p, 2, 0) == 0);
        plan_destroy(&p);
    }
}

/* A table that fits nowhere: SD_ENOSPACE naming it and the shortfall. */
static void test_greedy_nospace(void)
{
    struct table tb[2];
    struct topology t;
    struct sd_diag d = {{0}};
    struct plan p, before;
    char want[512], b0[SD_BYTES_TEXT], b1[SD_BYTES_TEXT], b2[SD_BYTES_TEXT];
    uint64_t need, mem = 100000000;

    tb[0] = mk("small", 1000, 64, 1.0);
    tb[1] = mk("huge", 1000000, 64, 1.0);
    topology_default(&t, 2, mem);
    need = trec_bytes(&tb[1], &t, 64, TREC_TABLE_WISE);
    CHECK(need > mem);
    memset(&p, 0x5a, sizeof(p));
    memcpy(&before, &p, sizeof(p));
    memset(&d, 0, sizeof(d));
    CHECK(plan_torchrec_greedy(tb, 2, &t, OPTIMIZER_SGD, NULL, twcw(), &p,
                               &d) == SD_ENOSPACE);
    snprintf(want, sizeof(want),
             "table \"huge\": needs %s with TorchRec's buffers but the largest "
             "free space on any device is %s (short by %s); give the "
             "devices more memory, or the hosts DRAM for the UVM tier",
             sd_bytes_text(need, b0), sd_bytes_text(mem, b1),
             sd_bytes_text(need - mem, b2));
    CHECK(strcmp(d.msg, want) == 0);
    if (strcmp(d.msg, want) != 0)
        fprintf(stderr, "got:  %s\nwant: %s\n", d.msg, want);
    CHECK(memcmp(&p, &before, sizeof(p)) == 0); /* out untouched */

    /* Neither TW nor 128-wide CW fits: the report is of the proposal of
     * least total storage, table-wise (CW reads the ids once per shard). */
    tb[1] = mk("wide", 1000000, 512, 1.0);
    topology_default(&t, 2, mem);
    need = trec_bytes(&tb[1], &t, 512, TREC_TABLE_WISE);
    CHECK(trec_bytes(&tb[1], &t, 128, TREC_COLUMN_WISE) > mem);
    CHECK(plan_torchrec_greedy(tb, 2, &t, OPTIMIZER_SGD, NULL, twcw(), &p,
                               &d) == SD_ENOSPACE);
    snprintf(want, sizeof(want),
             "table \"wide\": needs %s with TorchRec's buffers but the largest "
             "free space on any device is %s (short by %s); give the "
             "devices more memory, or the hosts DRAM for the UVM tier",
             sd_bytes_text(need, b0), sd_bytes_text(mem, b1),
             sd_bytes_text(need - mem, b2));
    CHECK(strcmp(d.msg, want) == 0);

    /* With Adam the optimizer state counts too. */
    tb[1] = mk("huge", 10000, 64, 1.0);
    topology_default(&t, 1, 1000ull * 64 * 4 * 3 + 10000ull * 64 * 4);
    CHECK(plan_torchrec_greedy(tb, 2, &t, OPTIMIZER_ADAM, NULL, twcw(), &p,
                               &d) == SD_ENOSPACE);
    CHECK(strstr(d.msg, "table \"huge\"") != NULL);
    CHECK(strstr(d.msg, "short by") != NULL);

    /* Bad input is refused before any planning. */
    topology_default(&t, 0, mem);
    CHECK(plan_torchrec_greedy(tb, 2, &t, OPTIMIZER_SGD, NULL, twcw(), &p,
                               &d) == SD_EINVAL);
    topology_default(&t, 2, mem);
    CHECK(plan_torchrec_greedy(tb, 0, &t, OPTIMIZER_SGD, NULL, twcw(), &p,
                               &d) == SD_EINVAL);
    CHECK(memcmp(&p, &before, sizeof(p)) == 0);
}

/* Column-wise: a dim-512 table splits into 128-wide shards. */
static void test_greedy_cw(void)
{
    struct table tb[1];
    struct topology t;
    struct sd_diag d = {{0}};
    struct plan p;
    uint64_t s128, s512;
    int32_t k;
    int seen = 0;

    tb[0] = mk("wide", 200000, 512, 4.0);
    topology_default(&t, 4, 1);
    s128 = trec_bytes(&tb[0], &t, 128, TREC_COLUMN_WISE);
    s512 = trec_bytes(&tb[0], &t, 512, TREC_TABLE_WISE);
    CHECK(s512 > 2 * s128);

    /* Room for one 128-wide shard per device only: TW cannot fit. */
    t.mem_bytes = 2 * s128 - 1;
    if (CHECK_OK(plan_torchrec_greedy(tb, 1, &t, OPTIMIZER_SGD, NULL, twcw(),
                                      &p, &d),
                 d.msg)) {
        CHECK(p.nshards == 4);
        for (k = 0; k < 4 && (size_t)k < p.nshards; k++) {
            CHECK(p.shards[k].col_offset == 128 * k);
            CHECK(p.shards[k].col_width == 128);
            if (p.shards[k].device >= 0 && p.shards[k].device < 4)
                seen |= 1 << p.shards[k].device;
        }
        CHECK(seen == 0xf);
        CHECK(plan_validate(&p, tb, 1, &t, OPTIMIZER_SGD, &d) == 0);
        plan_destroy(&p);
    }

    /* Plenty of room: CW still wins on perf and spreads in heap order. */
    t.mem_bytes = 1ull << 34;
    if (CHECK_OK(plan_torchrec_greedy(tb, 1, &t, OPTIMIZER_SGD, NULL, twcw(),
                                      &p, &d),
                 d.msg)) {
        CHECK(p.nshards == 4);
        for (k = 0; k < 4; k++)
            CHECK(device_of(&p, 0, 128 * k) == k);
        plan_destroy(&p);
    }

    /* Two devices: two shards each, kept apart, columns once each. */
    topology_default(&t, 2, 1ull << 34);
    if (CHECK_OK(plan_torchrec_greedy(tb, 1, &t, OPTIMIZER_SGD, NULL, twcw(),
                                      &p, &d),
                 d.msg)) {
        CHECK(p.nshards == 4);
        CHECK(device_of(&p, 0, 0) == 0);
        CHECK(device_of(&p, 0, 128) == 1);
        CHECK(device_of(&p, 0, 256) == 0);
        CHECK(device_of(&p, 0, 384) == 1);
        CHECK(plan_validate(&p, tb, 1, &t, OPTIMIZER_SGD, &d) == 0);
        plan_destroy(&p);
    }

    /* One device: four CW shards read the ids four times; TW is better. */
    topology_default(&t, 1, 1ull << 34);
    if (CHECK_OK(plan_torchrec_greedy(tb, 1, &t, OPTIMIZER_SGD, NULL, twcw(),
                                      &p, &d),
                 d.msg)) {
        CHECK(p.nshards == 1 && p.shards[0].col_width == 512);
        plan_destroy(&p);
    }

    /* dim 200 has no block: one shard. */
    tb[0] = mk("odd", 200000, 200, 4.0);
    topology_default(&t, 4, 1ull << 34);
    if (CHECK_OK(plan_torchrec_greedy(tb, 1, &t, OPTIMIZER_SGD, NULL, twcw(),
                                      &p, &d),
                 d.msg)) {
        CHECK(p.nshards == 1 && p.shards[0].col_width == 200);
        plan_destroy(&p);
    }
}

/* A mixed task on two hosts: valid, sorted and the same every run. */
static void test_greedy_deterministic(void)
{
    static const int32_t dims[] = {4, 16, 32, 64, 128, 256, 512, 1024};
    struct table tb[60];
    struct topology t;
    struct sd_diag d = {{0}};
    struct plan a, b;
    uint64_t x = 12345;
    size_t i;

    for (i = 0; i < 60; i++) {
        char name[16];

        snprintf(name, sizeof(name), "t%02zu", i);
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        tb[i] = mk(name, 1000 + (int64_t)(x >> 46), dims[(x >> 20) % 8],
                   (double)((x >> 8) % 64) / 4.0);
        tb[i].dtype = (x >> 30) % 3 == 0 ? TABLE_DTYPE_FP16 : TABLE_DTYPE_FP32;
    }
    topology_default(&t, 8, 4ull << 30);
    t.devices_per_host = 4;
    if (!CHECK_OK(plan_torchrec_greedy(tb, 60, &t, OPTIMIZER_ROWWISE_ADAGRAD,
                                       NULL, NULL, &a, &d),
                  d.msg))
        return;
    if (!CHECK_OK(plan_torchrec_greedy(tb, 60, &t, OPTIMIZER_ROWWISE_ADAGRAD,
                                       NULL, NULL, &b, &d),
                  d.msg)) {
        plan_destroy(&a);
        return;
    }
    CHECK(a.nshards == b.nshards && a.nshards >= 60);
    CHECK(a.nshards == b.nshards &&
          memcmp(a.shards, b.shards, a.nshards * sizeof(*a.shards)) == 0);
    for (i = 1; i < a.nshards; i++)
        CHECK(a.shards[i - 1].table < a.shards[i].table ||
              (a.shards[i - 1].table == a.shards[i].table &&
               a.shards[i - 1].col_offset < a.shards[i].col_offset));
    CHECK(plan_validate(&a, tb, 60, &t, OPTIMIZER_ROWWISE_ADAGRAD, &d) == 0);
    plan_destroy(&a);
    plan_destroy(&b);
}

/* Only scheme `sc` for the first n tables. */
static const struct table_constraint *only(enum plan_scheme sc, size_t n)
{
    static struct table_constraint c[8];
    size_t i;

    for (i = 0; i < n && i < 8; i++)
        c[i] = (struct table_constraint){.schemes = 1u << sc, .host = -1};
    return c;
}

/*
 * The schemes TorchRec's enumerator adds (1.2, 1.4): row-wise blocks of
 * ceil(rows / devices) rows, the remainder next and none after, shard i on
 * device i; table-row-wise the same over the host of least perf; data
 * parallel a replica on every device; and a table bigger than any device,
 * unconstrained, planned in row blocks.
 */
static void test_greedy_schemes(void)
{
    static const int64_t rw10[] = {3, 3, 3, 1}, rw5[] = {2, 2, 1};
    struct table tb[2];
    struct topology t;
    struct sd_diag d = {{0}};
    struct plan p;
    size_t k;

    tb[0] = mk("r", 10, 8, 1.0);
    tb[1] = mk("s", 5, 8, 1.0);
    topology_default(&t, 4, 1ull << 30);
    t.devices_per_host = 2;
    if (CHECK_OK(plan_torchrec_greedy(tb, 2, &t, OPTIMIZER_SGD, NULL,
                                      only(SCHEME_RW, 2), &p, &d),
                 d.msg)) {
        CHECK(p.nshards == 4 + 3);
        for (k = 0; k < p.nshards && p.nshards == 7; k++) {
            const struct shard *s = &p.shards[k];
            size_t b = k < 4 ? k : k - 4;

            CHECK(s->scheme == SCHEME_RW && s->device == (int32_t)b);
            CHECK(s->row_count == (k < 4 ? rw10[b] : rw5[b]));
            CHECK(s->row_offset == (int64_t)(3 * b) - (k < 4 ? 0 : (int64_t)b));
        }
        CHECK(plan_validate(&p, tb, 2, &t, OPTIMIZER_SGD, &d) == 0);
        plan_destroy(&p);
    }

    /* Table-row-wise: t0 pinned to device 0 loads host 0, so the blocks
     * of t1 (5 rows: 3 and 2) go to host 1's devices 2 and 3. */
    {
        int32_t pins[2] = {0, -1};
        struct table_constraint c[2] = {
            {.host = -1}, {.schemes = 1u << SCHEME_TWRW, .host = -1}};

        if (CHECK_OK(
                plan_torchrec_greedy(tb, 2, &t, OPTIMIZER_SGD, pins, c, &p, &d),
                d.msg)) {
            CHECK(p.nshards == 3);
            CHECK(p.shards[1].device == 2 && p.shards[1].row_count == 3);
            CHECK(p.shards[2].device == 3 && p.shards[2].row_count == 2);
            CHECK(p.shards[1].scheme == SCHEME_TWRW);
            CHECK(plan_validate(&p, tb, 2, &t, OPTIMIZER_SGD, &d) == 0);
            plan_destroy(&p);
        }
    }

    /* Data parallel: a whole replica on each of the four devices. */
    if (CHECK_OK(plan_torchrec_greedy(tb, 1, &t, OPTIMIZER_SGD, NULL,
                                      only(SCHEME_DP, 1), &p, &d),
                 d.msg)) {
        CHECK(p.nshards == 4);
        for (k = 0; k < p.nshards; k++)
            CHECK(p.shards[k].scheme == SCHEME_DP &&
                  p.shards[k].device == (int32_t)k &&
                  p.shards[k].row_count == 0);
        CHECK(plan_validate(&p, tb, 1, &t, OPTIMIZER_SGD, &d) == 0);
        plan_destroy(&p);
    }

    /* 4 GB on devices of 2 GB: no table- or column-wise option fits; the
     * planner finds row blocks. */
    tb[0] = mk("big", 8000000, 128, 4.0);
    topology_default(&t, 4, 2ull << 30);
    t.devices_per_host = 2;
    if (CHECK_OK(
            plan_torchrec_greedy(tb, 1, &t, OPTIMIZER_SGD, NULL, NULL, &p, &d),
            d.msg)) {
        CHECK(p.nshards >= 2 &&
              scheme_splits_rows((enum plan_scheme)p.shards[0].scheme));
        CHECK(plan_validate(&p, tb, 1, &t, OPTIMIZER_SGD, &d) == 0);
        plan_destroy(&p);
    }
    /* ... and refused, naming it, when only table-wise is allowed. */
    CHECK(plan_torchrec_greedy(tb, 1, &t, OPTIMIZER_SGD, NULL,
                               only(SCHEME_TW, 1), &p, &d) == SD_ENOSPACE);
    CHECK(strstr(d.msg, "\"big\"") != NULL);
}

int main(void)
{
    test_notebook();
    test_16_ranks();
    test_defaults();
    test_storage();
    test_cw_block();
    test_greedy_equal();
    test_greedy_order();
    test_greedy_memory();
    test_greedy_nospace();
    test_greedy_cw();
    test_greedy_deterministic();
    test_greedy_schemes();
    return tap_done();
}
