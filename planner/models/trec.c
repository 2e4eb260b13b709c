/*
 * TorchRec's analytic estimators, re-implemented for its planner (the
 * torchrec_greedy baseline, search/torchrec.c): the EmbeddingPerfEstimator
 * and storage estimator for one shard, and the column-wise block rule.
 * Section numbers refer to reference/torchrec_planner.md, which describes
 * TorchRec 2025-10; the formulas follow its shard_estimators.py term by term
 * and in the same order of floating-point operations, so the numbers match
 * the Python planner's.
 */
#include <math.h>

#include "models/models.h"
#include "problem/problem.h"

#define GIB ((double)(1ull << 30))

/* Constants of constants.py (1.5); bandwidths are X GiB/s as bytes per ms. */
#define TREC_HBM_BW                (897.0 * GIB / 1000.0)
#define TREC_INTRA_BW              (600.0 * GIB / 1000.0)
#define TREC_INTER_BW              (12.5 * GIB / 1000.0)
#define TREC_HBM_TO_DDR_BW         (32.0 * GIB / 1000.0)
#define TREC_MIN_CW_DIM            128
#define TREC_FULL_BLOCK_EMB_DIM    128
#define TREC_HALF_BLOCK_PENALTY    1.15
#define TREC_QUARTER_BLOCK_PENALTY 1.75
#define TREC_BWD_COMPUTE_MULT      2.0
#define TREC_BATCHED_COPY_FACTOR   2.455
#define TREC_DP_ELEMENTWISE_FACTOR 9.22
#define TREC_INDEX_BYTES           8.0 /* BIGINT_DTYPE: ids are int64 */

/* ------------------------------------------------------------------------ */
/* The per-shard estimators                                                  */

/*
 * The inputs of one estimate with TorchRec's defaults filled in.  The
 * planner's one feature per table has num_poolings 1, so PF * NP * B = PF * B.
 */
struct perf_env {
    int32_t ws;       /* world size */
    int32_t lws;      /* local world size */
    double device_bw; /* kernel bandwidth (2.1), bytes/ms */
    double intra_bw;  /* bytes/ms */
    double inter_bw;  /* bytes/ms */
    double esz;       /* table element bytes, also every comm dtype */
    double inputs;    /* batch_inputs = PF * NP * B of one rank */
    double outputs;   /* batch_outputs = NP * B (pooled) */
    double rows;      /* the shard's rows */
    double cols;      /* the shard's columns, TorchRec's emb_dim */
};

static void perf_env_init(const struct trec_shard_in *in, struct perf_env *e)
{
    double hbm = in->hbm_bw > 0 ? in->hbm_bw : TREC_HBM_BW;
    double ddr = in->ddr_bw > 0 ? in->ddr_bw : TREC_HBM_TO_DDR_BW;
    double clf = in->cache_load_factor;

    e->ws = in->world_size > 0 ? in->world_size : 1;
    e->lws = in->local_world_size > 0 ? in->local_world_size : e->ws;
    /* kernel_bw_lookup on cuda (2.1): fused reads HBM at full speed, UVM
     * the host link at a tenth, a UVM cache the mix of both by its load
     * factor at a tenth. */
    switch (in->kernel) {
    case TREC_KERNEL_DENSE:
        e->device_bw = 0.5 * hbm;
        break;
    case TREC_KERNEL_FUSED_UVM:
        e->device_bw = ddr / 10;
        break;
    case TREC_KERNEL_FUSED_UVM_CACHING:
        e->device_bw = (clf * hbm + (1 - clf) * ddr) / 10;
        break;
    default:
        e->device_bw = hbm;
    }
    e->intra_bw = in->intra_bw > 0 ? in->intra_bw : TREC_INTRA_BW;
    e->inter_bw = in->inter_bw > 0 ? in->inter_bw : TREC_INTER_BW;
    e->esz = (double)in->elem_size;
    e->inputs = in->pooling_factor * 1.0 * (double)in->batch_size;
    e->outputs = 1.0 * (double)in->batch_size;
    e->rows = in->rows > 0 ? (double)in->rows : 0.0;
    e->cols = in->cols > 0 ? (double)in->cols : 0.0;
}

/*
 * BasicCommsBandwidths.get_bw (1.5) for every collective but all-reduce: the
 * intra-host link when the group fits in one host, else the inter-host one.
 */
static double comms_bw(const struct perf_env *e, int32_t world_size,
                       int32_t local_world_size)
{
    return world_size <= local_world_size ? e->intra_bw : e->inter_bw;
}

/* FBGEMM's kernel runs 32 threads x 4-vectors; narrower rows waste it (2.2). */
static double block_penalty(double cols)
{
    if (cols >= TREC_FULL_BLOCK_EMB_DIM)
        return 1.0;
    return cols >= 64 ? TREC_HALF_BLOCK_PENALTY : TREC_QUARTER_BLOCK_PENALTY;
}

/*
 * Table-wise and column-wise (2.2): the shard serves every rank's lookups,
 * hence the factor ws, and sends its pooled output to every rank.
 */
static void tw_perf(const struct perf_env *e, struct trec_perf *p)
{
    double in_read = ceil(e->inputs * e->ws * TREC_INDEX_BYTES);
    double lookup = e->inputs * e->ws * fmax(e->cols, 32.0) * e->esz;
    double out = e->outputs * e->ws * e->cols * e->esz;
    double bw = comms_bw(e, e->ws, e->lws);

    p->fwd_compute =
        (in_read + lookup + out) * block_penalty(e->cols) / e->device_bw;
    p->fwd_comms = out / bw;
    p->bwd_compute = p->fwd_compute * TREC_BWD_COMPUTE_MULT;
    p->bwd_comms = out / bw;
}

/*
 * Row-wise (2.3): each shard sees 1/ws of the ids, with neither the 32-column
 * floor nor the block penalty; the pooled partial sums are reduce-scattered
 * forward, all-gathered backward, plus a batched copy of the gradients.
 */
static void rw_perf(const struct perf_env *e, struct trec_perf *p)
{
    double inputs = e->inputs / e->ws;
    double in_read = ceil(inputs * e->ws * TREC_INDEX_BYTES);
    double lookup = inputs * e->ws * e->cols * e->esz;
    double out = e->outputs * e->ws * e->cols * e->esz;
    double bw = comms_bw(e, e->ws, e->lws);

    p->fwd_compute = (in_read + lookup + out) / e->device_bw;
    p->fwd_comms = out / bw;
    p->bwd_compute = p->fwd_compute * TREC_BWD_COMPUTE_MULT;
    p->bwd_comms = out / bw + out * TREC_BATCHED_COPY_FACTOR / e->device_bw;
}

/*
 * Table-row-wise (2.4): row-wise inside one host (ids / lws), reduce-scatter
 * and all-gather on the intra-host link, and when there are several hosts an
 * all-to-all among hosts, whose group size is int(ws / lws).
 */
static void twrw_perf(const struct perf_env *e, struct trec_perf *p)
{
    double inputs = e->inputs / e->lws;
    double in_read = ceil(inputs * e->ws * TREC_INDEX_BYTES);
    double lookup = inputs * e->ws * e->cols * e->esz;
    double out = e->outputs * e->ws * e->cols * e->esz;
    double nhosts = (double)e->ws / e->lws;
    double intra = comms_bw(e, e->lws, e->lws);
    double inter = comms_bw(e, (int32_t)nhosts, 1);
    double fwd_comms = out / intra;
    double bwd_comms = out / intra;

    if (e->ws > e->lws) {
        double cross = e->outputs * nhosts * e->cols * e->esz;

        fwd_comms += cross / inter;
        bwd_comms += cross / inter;
    }
    p->fwd_compute = (in_read + lookup + out) / e->device_bw;
    p->fwd_comms = fwd_comms;
    p->bwd_compute = p->fwd_compute * TREC_BWD_COMPUTE_MULT;
    p->bwd_comms = bwd_comms + out * TREC_BATCHED_COPY_FACTOR / e->device_bw;
}

/*
 * Data-parallel (2.5): the local batch only, no forward comms; backward
 * all-reduces the whole table's gradient (one NIC per GPU, so the bandwidth
 * is inter * lws) and runs the element-wise optimizer kernels over it.
 */
static void dp_perf(const struct perf_env *e, struct trec_perf *p)
{
    double in_read = ceil(e->inputs * TREC_INDEX_BYTES);
    double lookup = e->inputs * e->cols * e->esz;
    double out = e->outputs * e->cols * e->esz;
    double table_size = e->rows * e->cols * e->esz;
    double num_nodes = fmin((double)e->ws / e->lws, 2.0);
    double all_reduce_bw = e->inter_bw * e->lws;
    double all_reduce =
        table_size * (2 * num_nodes - 1) / num_nodes / all_reduce_bw;

    if (e->ws > 2 * e->lws)
        all_reduce *= 2;
    p->fwd_compute = (in_read + lookup + out) / e->device_bw;
    p->fwd_comms = 0;
    p->bwd_compute = p->fwd_compute * TREC_BWD_COMPUTE_MULT;
    p->bwd_comms =
        all_reduce + table_size * TREC_DP_ELEMENTWISE_FACTOR / e->device_bw;
}

void trec_shard_perf(const struct trec_shard_in *in, struct trec_perf *out)
{
    struct trec_perf p = {0};
    struct perf_env e;

    perf_env_init(in, &e);
    switch (in->sharding) {
    case TREC_TABLE_WISE:
    case TREC_COLUMN_WISE:
        tw_perf(&e, &p);
        break;
    case TREC_ROW_WISE:
        rw_perf(&e, &p);
        break;
    case TREC_TABLE_ROW_WISE:
        twrw_perf(&e, &p);
        break;
    case TREC_DATA_PARALLEL:
        dp_perf(&e, &p);
        break;
    }
    p.total =
        trec_perf_total(p.fwd_compute, p.fwd_comms, p.bwd_compute, p.bwd_comms);
    *out = p;
}

/* A byte count from a double: TorchRec's math.ceil, saturated to uint64. */
static uint64_t bytes_of(double x)
{
    double c = ceil(x);

    if (!(c > 0))
        return 0;
    return c >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)c;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

uint64_t trec_shard_storage(const struct trec_shard_in *in, enum optimizer opt)
{
    struct perf_env e;
    uint64_t rows = in->rows > 0 ? (uint64_t)in->rows : 0;
    uint64_t cols = in->cols > 0 ? (uint64_t)in->cols : 0;
    uint64_t tensor = rows * cols * in->elem_size;
    uint64_t optimizer = 0, io_in = 0, io_out = 0;
    double inputs;

    perf_env_init(in, &e);
    /* _get_optimizer_multipler (1.6): state bytes = tensor bytes * mult. */
    switch (opt) {
    case OPTIMIZER_ADAM:
        optimizer = 2 * tensor;
        break;
    case OPTIMIZER_ADAGRAD:
        optimizer = tensor;
        break;
    case OPTIMIZER_ROWWISE_ADAGRAD:
        /* mult = 1/dim: one element per row.  TorchRec divides by the
         * table's dim even for a column slice; the slice's own width is
         * used here, as FBGEMM keeps a state row per slice (shard_bytes()). */
        optimizer = rows * in->elem_size;
        break;
    case OPTIMIZER_SGD:
    default:
        break;
    }

    /* _calculate_*_shard_io_sizes (1.6): int64 ids in, pooled rows out. */
    switch (in->sharding) {
    case TREC_TABLE_WISE:
    case TREC_COLUMN_WISE:
        io_in = bytes_of(e.inputs * e.ws * TREC_INDEX_BYTES);
        io_out = bytes_of(e.outputs * e.ws * e.cols * e.esz);
        break;
    case TREC_ROW_WISE:
    case TREC_TABLE_ROW_WISE:
        inputs = e.inputs / (in->sharding == TREC_ROW_WISE ? e.ws : e.lws);
        if (rows * cols != 0) {
            io_in = bytes_of(inputs * e.ws * TREC_INDEX_BYTES);
            io_out = bytes_of(e.outputs * e.ws * e.cols * e.esz);
        }
        break;
    case TREC_DATA_PARALLEL:
        io_in = bytes_of(e.inputs * TREC_INDEX_BYTES);
        io_out = bytes_of(e.outputs * e.cols * e.esz);
        break;
    }
    /* calculate_pipeline_io_cost with pipeline NONE: in + out. */
    return add_sat(add_sat(tensor, optimizer), add_sat(io_in, io_out));
}

int32_t trec_cw_block(int32_t cols, int32_t min_partition)
{
    int32_t d;

    /* _find_base_dim (1.2): the first divisor from the lower bound up. */
    if (min_partition <= 0)
        min_partition = TREC_MIN_CW_DIM;
    for (d = min_partition; d < cols; d++) {
        if (cols % d == 0 && d % 4 == 0)
            return d;
    }
    return cols;
}
