/*
 * The shardd planning library: tables, features, traces, synthetic tables and
 * tasks, plans and their validation, cost functions, and the placement
 * algorithms.  Pure computation: no gRPC, no SQLite, no libuv, no threads
 * shared with callers.  JSON reading and writing of tables and plans lives
 * here too (jansson), because the plan format belongs to the planner.
 *
 * Conventions (reference/style.md): actions return 0 or a negative SD_E*
 * code; where a user must learn what was wrong, a struct sd_diag receives one
 * line naming the table and the field.  Out-parameters are untouched on
 * failure.  Every pointer a function returns through an out-parameter is owned
 * by the caller and released with the matching *_free().  Sizes are bytes,
 * times milliseconds, unless a name says otherwise.
 */
#ifndef SHARDD_PLANNER_H
#define SHARDD_PLANNER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shardd/err.h"

struct cost_net; /* the neural compute model, below */

/* ------------------------------------------------------------------------ */
/* Tables and features (table.c)                                             */

#define TABLE_NBINS     17  /* access-count histogram bins, neuroshard.md 1.1 */
#define TABLE_NFEATURES 20  /* cost-model input, neuroshard.md 1.2 */
#define TABLE_NAME_MAX  128 /* bytes, terminating NUL included */
#define TABLE_DIM_MIN   4
#define TABLE_DIM_MAX   1024
#define TABLE_DIM_ALIGN 4 /* dims and column slices are multiples of this */
#define TABLE_ROWS_MAX  ((int64_t)1 << 40)
#define TABLE_PF_MAX    1.0e6 /* mean bag length; larger is surely an error */

enum table_dtype {
    TABLE_DTYPE_FP32 = 0,
    TABLE_DTYPE_FP16 = 1,
};

/*
 * One embedding table.  bins[k] is the fraction of the unique rows that one
 * batch accessed (0,1] times for k = 0, (2^(k-1), 2^k] times for k = 1..15,
 * and more than 2^15 times for k = 16; all zero for a table never accessed.
 */
struct table {
    char name[TABLE_NAME_MAX];
    int64_t rows;          /* hash size */
    int32_t dim;           /* columns, a multiple of TABLE_DIM_ALIGN */
    double pooling_factor; /* mean bag length over the batch */
    double bins[TABLE_NBINS];
    enum table_dtype dtype;
};

/* Bytes per element of a dtype (4 or 2). */
size_t table_dtype_size(enum table_dtype dtype);

/* Parses "fp32"/"fp16"; returns SD_EINVAL for anything else. */
int table_dtype_parse(const char *s, enum table_dtype *out);
const char *table_dtype_name(enum table_dtype dtype);

/* Weight bytes of `cols` columns of t: rows * cols * element size. */
uint64_t table_bytes(const struct table *t, int32_t cols);

/*
 * Checks one table: name non-empty, rows in [1, TABLE_ROWS_MAX], dim a
 * multiple of 4 in [4, 1024], pooling factor finite in [0, TABLE_PF_MAX],
 * bins finite in [0, 1] summing to at most 1 (within 1e-6).  `idx` is the
 * table's position, used in the message.  Returns 0 or SD_EINVAL with d set.
 */
int table_validate(const struct table *t, size_t idx, struct sd_diag *d);

/*
 * Checks every table and that names are unique.  Returns 0 or SD_EINVAL with
 * d naming the first bad table and field.
 */
int table_validate_all(const struct table *tables, size_t n, struct sd_diag *d);

/*
 * The 20 cost-model features of t with its dim replaced by `dim`, in the
 * order of the released NeuroShard weights: bin_0, bin_1, bin_10 .. bin_16,
 * bin_2 .. bin_9, dim, pooling_factor, rows.
 */
void table_features(const struct table *t, int32_t dim,
                    float out[TABLE_NFEATURES]);

/* ------------------------------------------------------------------------ */
/* Traces: one batch of lookups of one table (trace.c)                       */

/*
 * Bag b of the batch looks up indices[offsets[b] .. offsets[b+1]).
 * offsets has nbags + 1 entries, offsets[0] == 0 and offsets[nbags] ==
 * nindices; every index is in [0, rows).
 */
struct trace {
    char name[TABLE_NAME_MAX];
    int64_t rows;
    int32_t dim;
    int64_t nbags;
    int64_t nindices;
    int64_t *offsets; /* owned */
    int64_t *indices; /* owned */
};

/* Releases what t owns (NULL-safe) and zeroes it. */
void trace_destroy(struct trace *t);

/* Checks the invariants above; SD_EFORMAT with d naming the bad field. */
int trace_validate(const struct trace *t, struct sd_diag *d);
/* The same, d's message starting with `where` instead of "trace" (e.g.
 * "trace[3]", or a file name and a trace index). */
int trace_validate_at(const struct trace *t, const char *where,
                      struct sd_diag *d);

/*
 * Computes the 17-bin access histogram and the pooling factor of a trace
 * (neuroshard.md 1.1: the denominator is the number of unique indices; an
 * empty trace gives all-zero bins).  Returns 0, SD_EINVAL for a trace that
 * breaks its invariants, or SD_ENOMEM.
 */
int trace_features(const struct trace *t, double bins[TABLE_NBINS],
                   double *pooling_factor);

/*
 * Fills `out` from a trace: name, rows and dim copied, bins and pooling factor
 * computed, dtype fp32.
 */
int trace_to_table(const struct trace *t, struct table *out);

/*
 * Trace files: a documented little-endian binary format, see trace.c and
 * docs/trace-format.md.  trace_file_write() writes n traces to path;
 * trace_file_read() reads every trace of a file into a new array (*out, *n
 * owned by the caller, free with trace_array_free()).  Errors: SD_EIO (with
 * errno text in d), SD_EFORMAT (d names the trace and field), SD_ENOMEM.
 */
int trace_file_write(const char *path, const struct trace *traces, size_t n,
                     struct sd_diag *d);
int trace_file_read(const char *path, struct trace **out, size_t *n,
                    struct sd_diag *d);
void trace_array_free(struct trace *traces, size_t n);

/* ------------------------------------------------------------------------ */
/* Random numbers (rng.c): seeded and reproducible on every platform.        */

struct rng {
    uint64_t s[4]; /* xoshiro256** state */
};

void rng_seed(struct rng *r, uint64_t seed);
uint64_t rng_next(struct rng *r);
double rng_uniform(struct rng *r);                 /* [0, 1) */
uint64_t rng_below(struct rng *r, uint64_t bound); /* [0, bound), unbiased */
double rng_normal(struct rng *r);                  /* standard normal */
double rng_gamma(struct rng *r, double shape);     /* scale 1 */
/* Derives an independent seed for stream `i` of a run seeded with `seed`. */
uint64_t rng_derive(uint64_t seed, uint64_t i);

/* ------------------------------------------------------------------------ */
/* Synthetic DLRM tables and tasks (synth.c)                                  */

/* The NeuroShard benchmark: 856 tables, batch 65536 (neuroshard.md 1.4). */
#define SYNTH_DEFAULT_TABLES 856
#define SYNTH_DEFAULT_BATCH  65536

struct synth_params {
    size_t count; /* tables to make */
    uint64_t seed;
    int64_t batch_size; /* bags per generated trace */
};

/* The defaults above and seed 0. */
void synth_params_default(struct synth_params *p);

/*
 * Generates one table's trace: its rows, pooling factor and Zipf-like skew are
 * drawn from distributions matched to the public statistics of the 856 DLRM
 * tables (rows mean 4.11 M / std 3.13 M, pooling factor mean 15.8 / std 25.6
 * and heavy-tailed, about 4 % never accessed).  Deterministic for (p->seed,
 * i).  On success *out owns its arrays (trace_destroy()).
 */
int synth_trace(const struct synth_params *p, size_t i, struct trace *out);

/*
 * Generates p->count tables: trace i is made, its features computed, and the
 * trace dropped.  Table i is named "table_%04zu" and gets a dim drawn from
 * {4, 8, .., 128}.  Uses up to `threads` worker threads (1 = none); the
 * result does not depend on the thread count.  *out is owned by the caller
 * (free()).  Returns 0, SD_EINVAL or SD_ENOMEM.
 */
int synth_tables(const struct synth_params *p, unsigned threads,
                 struct table **out);

/* One benchmark task: tables drawn from a pool, with dims reassigned. */
struct task {
    size_t ntables;
    size_t *source;       /* index into the pool of each table, owned */
    struct table *tables; /* owned; names unique within the task */
};

struct task_params {
    size_t count; /* tasks to make */
    uint64_t seed;
    size_t min_tables;  /* inclusive, default 10 */
    size_t max_tables;  /* inclusive, default 59 */
    uint64_t max_bytes; /* total size cap, default 15 GiB */
};

void task_params_default(struct task_params *p);

/*
 * NeuroShard's task generator (neuroshard.md 2.4): per task T uniform in
 * [min_tables, max_tables], T tables drawn with replacement from the pool,
 * dims from {4, 8, 16, 32, 64, 128}, redrawn until the fp32 total is within
 * max_bytes.  *out (an array of p->count tasks) is owned by the caller:
 * task_array_free().  Returns 0, SD_EINVAL (empty pool, bad bounds, a cap no
 * draw can meet; d says which) or SD_ENOMEM.
 */
int task_generate(const struct task_params *p, const struct table *pool,
                  size_t npool, struct task **out, struct sd_diag *d);
void task_array_free(struct task *tasks, size_t n);

/* ------------------------------------------------------------------------ */
/* Profiling samples and traces from features (sample.c)                     */

/* The dims of NeuroShard's table augmentation (neuroshard.md 2.1). */
#define SAMPLE_NDIMS 6
extern const int32_t sample_dims[SAMPLE_NDIMS]; /* 128, 64, .., 4 */

struct sample_params {
    size_t max_tables;  /* tables per shard drawn in [1, max], default 15 */
    uint64_t max_bytes; /* fp32 size cap of a shard, default 4 GiB */
};

void sample_params_default(struct sample_params *p);

/*
 * Draws one compute-cost sample shard (neuroshard.md 2.2): k uniform in
 * [1, max_tables], k (table, dim) pairs drawn with replacement from the pool
 * augmented with every dim of sample_dims, the whole draw repeated until the
 * shard's fp32 bytes are within max_bytes.  Writes k pool indices to idx[]
 * and dims to dims[] (both with room for max_tables), and *k.  Returns 0, or
 * SD_EINVAL (empty pool, max_tables 0, or no draw in 1000 met the cap).
 */
int sample_draw_shard(struct rng *g, const struct table *pool, size_t npool,
                      const struct sample_params *p, size_t *idx, int32_t *dims,
                      size_t *k);

/*
 * Makes a batch of lookups whose statistics follow a table's features when
 * no real trace exists: rows accessed in bin k are given access counts
 * inside that bin's range, the number of distinct rows is chosen so the
 * total is nbags x pooling factor, the rows are spread over [0, rows), and
 * the lookups are dealt to bags at random.  Deterministic for (t, nbags,
 * seed).  A table with pooling factor 0 or all-zero bins gets empty bags.
 * On success *out owns its arrays (trace_destroy()).  Returns 0, SD_EINVAL or
 * SD_ENOMEM.
 */
int trace_from_table(const struct table *t, int64_t nbags, uint64_t seed,
                     struct trace *out);

/* ------------------------------------------------------------------------ */
/* Topology and options (plan.c)                                             */

#define TOPO_DEVICES_MAX 4096
/* Sane ranges of the link figures: outside them a cost overflows or means
 * nothing (a subnormal bandwidth made comm costs inf, then NaN). */
#define TOPO_BW_MIN      1.0  /* bytes per ms: 1 kB/s */
#define TOPO_BW_MAX      1e15 /* bytes per ms: 1 EB/s */
#define TOPO_LATENCY_MAX 1e6  /* ms */

struct topology {
    int32_t ndevices;
    int32_t devices_per_host; /* local world size; ndevices if one host */
    uint64_t mem_bytes;       /* capacity of each device */
    /* Devices of different capacities: NULL, or ndevices capacities (each
     * > 0) that replace mem_bytes.  Borrowed: the caller keeps it alive as
     * long as the topology is used. */
    const uint64_t *mem_by_device;
    int64_t batch_size;     /* global batch of one training step */
    double intra_host_bw;   /* bytes per ms between devices of a host */
    double inter_host_bw;   /* bytes per ms between hosts */
    double link_latency_ms; /* per message, all-to-all alpha term */
    double device_mem_bw;   /* bytes per ms of a device's memory */
};

/*
 * Defaults for n devices of `mem_bytes` each on one host: batch 65536,
 * TorchRec's bandwidth constants (600 GiB/s intra-host, 12.5 GiB/s
 * inter-host, 897 GiB/s device memory) and 10 us link latency.
 */
void topology_default(struct topology *t, int32_t ndevices, uint64_t mem_bytes);

/* Checks the topology; SD_EINVAL with d naming the field. */
int topology_validate(const struct topology *t, struct sd_diag *d);

/* The memory capacity of device r, and the largest of any device. */
static inline uint64_t topology_mem(const struct topology *t, int32_t r)
{
    return t->mem_by_device != NULL ? t->mem_by_device[r] : t->mem_bytes;
}
uint64_t topology_mem_max(const struct topology *t);

enum optimizer {
    OPTIMIZER_SGD = 0,         /* no state */
    OPTIMIZER_ADAGRAD,         /* one value per weight */
    OPTIMIZER_ROWWISE_ADAGRAD, /* one value per row */
    OPTIMIZER_ADAM,            /* two values per weight */
};

int optimizer_parse(const char *s, enum optimizer *out);
const char *optimizer_name(enum optimizer o);

/*
 * The column-wise split rule (neuroshard.md 6.2): a table or slice of `dim`
 * columns halves while the half is a multiple of TABLE_DIM_ALIGN.  Returns
 * how many widths that gives, dim itself included (>= 1): widths dim >> k
 * for k below it.
 */
int32_t table_split_levels(int32_t dim);

/*
 * Bytes `cols` columns of t need on a device: weights plus optimizer state
 * (row-wise Adagrad keeps one element per row for each column slice).
 */
uint64_t shard_bytes(const struct table *t, int32_t cols, enum optimizer opt);

/* ------------------------------------------------------------------------ */
/* Plans (plan.c)                                                            */

/* Columns [col_offset, col_offset + col_width) of table `table` on `device`. */
struct shard {
    uint32_t table;
    int32_t device;
    int32_t col_offset;
    int32_t col_width;
};

/* Per-device figures of a plan. */
struct plan_device {
    uint64_t mem_bytes;
    double compute_ms;
    double fwd_comm_ms; /* includes waiting for the slowest device */
    double bwd_comm_ms;
    double total_ms;
    int32_t dim_sum; /* pooled columns the device produces */
    int32_t nshards;
};

/* Why a plan costs what it does (plan_explain()). */
#define PLAN_DRIVERS_MAX 3
struct plan_explain {
    int32_t critical_device; /* the one the others wait for: max compute +
                              * backward comm; -1 before plan_explain() */
    int32_t ndrivers;
    /* Indices into plan.shards of the critical device's costliest shards,
     * costliest first (by their cost alone). */
    size_t drivers[PLAN_DRIVERS_MAX];
    double driver_ms[PLAN_DRIVERS_MAX];
    /*
     * max(sum of the devices' compute / N, the costliest table at its
     * narrowest legal width) + the forward comm of perfectly balanced dims:
     * no rearrangement of this plan's load beats it.  gap = cost / bound - 1.
     */
    double lower_bound_ms;
    double gap;
};

/* What a search did (neuroshard; zero for the baselines). */
struct plan_search_stats {
    double search_ms;
    int64_t greedy_runs;   /* table-wise greedy placements */
    int64_t states;        /* distinct column-split states scored */
    int32_t levels;        /* beam levels run */
    int32_t splits;        /* column splits in the plan */
    int32_t moves;         /* local-search moves and swaps applied */
    bool budget_exhausted; /* stopped by the time budget */
};

/*
 * A placement of every column of every table.  shards is kept sorted by
 * (table, col_offset) once the plan is finished (plan_sort()).  devices has
 * ndevices entries, filled by plan_evaluate().
 */
struct plan {
    size_t nshards;
    size_t cap;
    struct shard *shards; /* owned */
    int32_t ndevices;
    struct plan_device *devices; /* owned */
    double cost_ms;              /* max over devices of total_ms */
    const char *algorithm;       /* static string */
    char cost_model[160];        /* names the compute model (a copy) */
    const char *comm_model;      /* static string naming the comm model */
    struct plan_explain explain;
    struct plan_search_stats stats;
};

/* Makes an empty plan for ndevices devices.  Returns 0 or SD_ENOMEM. */
int plan_init(struct plan *p, int32_t ndevices);
void plan_destroy(struct plan *p);
/* Appends one shard.  Returns 0 or SD_ENOMEM. */
int plan_add(struct plan *p, uint32_t table, int32_t device, int32_t col_offset,
             int32_t col_width);
/* Sorts shards by (table, col_offset). */
void plan_sort(struct plan *p);

/*
 * Checks a plan against its tables and topology: every shard names an
 * existing table and device, widths are positive multiples of 4, every
 * column of every table is placed exactly once, and each device's bytes
 * (shard_bytes()) are within its capacity.  Returns 0, or SD_EINVAL (a
 * malformed plan) or SD_ENOSPACE (memory) with d naming table, device and
 * bytes.  Sorts the plan.
 */
int plan_validate(struct plan *p, const struct table *tables, size_t ntables,
                  const struct topology *t, enum optimizer opt,
                  struct sd_diag *d);
/* The same, with messages naming the plan `what` ("placement") instead of
 * "plan". */
int plan_validate_as(struct plan *p, const struct table *tables, size_t ntables,
                     const struct topology *t, enum optimizer opt,
                     const char *what, struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* Costs (cost.c)                                                            */

/* One table, or a column slice of it, inside a device's shard. */
struct shard_item {
    const struct table *table;
    int32_t cols;
};

/*
 * A compute cost model: the time (ms) of forward + backward + SGD of the
 * fused embedding-bag op over all items of one device, for the topology's
 * batch.  Must return a finite value >= 0 (0 for no items).
 */
struct cost_model {
    const char *name;
    double (*shard_ms)(void *ctx, const struct topology *t,
                       const struct shard_item *items, size_t n);
    void *ctx;
};

/*
 * The analytic compute model: TorchRec's table-wise fused-kernel estimate
 * (torchrec_planner.md 2.2) for the whole batch on one device, summed over
 * items: (index reads + row reads at max(cols, 32) + pooled writes) * block
 * penalty / device bandwidth, backward twice the forward.
 */
extern const struct cost_model cost_model_analytic;

/*
 * The alpha-beta all-to-all model: device r sends batch/N * dim_sum[r]
 * elements to each peer and receives batch/N * dim_sum[j] from each peer j;
 * intra-host and inter-host traffic run on their own links, each costs
 * bytes / bandwidth, plus one latency per peer.  Writes the pure (no waiting)
 * forward and backward times of every device.
 */
void cost_comm_alpha_beta(const struct topology *t, const int32_t *dim_sum,
                          double *fwd_ms, double *bwd_ms);

/*
 * The plan cost of per-device compute and dim sums (neuroshard.md 6.1, the
 * alpha-beta comm): max_r(compute_r + bwd_r) + max_r fwd_r.  O(N).
 */
double cost_plan_ms(const struct topology *t, const double *compute_ms,
                    const int32_t *dim_sum, double *fwd_scratch,
                    double *bwd_scratch);

/*
 * Fills p->explain from an evaluated plan: the critical device, its driving
 * shards and the lower bound, with m's cost of single shards.  Returns 0 or
 * SD_ENOMEM.
 */
int plan_explain(struct plan *p, const struct table *tables,
                 const struct topology *t, const struct cost_model *m);

/*
 * Fills p->devices and p->cost_ms (neuroshard.md 6.1): compute_r from the
 * model, bwd_r from the comm model, ready_r = compute_r + bwd_r, forward
 * comm fw_r = pure_r + (max_j ready_j - ready_r), total_r = compute_r + bwd_r
 * + fw_r.  Memory per device from shard_bytes().  Returns 0 or SD_ENOMEM.
 */
int plan_evaluate(struct plan *p, const struct table *tables, size_t ntables,
                  const struct topology *t, enum optimizer opt,
                  const struct cost_model *m);

/* ------------------------------------------------------------------------ */
/* TorchRec's analytic perf and storage estimator (torchrec.c)               */

enum trec_sharding {
    TREC_TABLE_WISE = 0,
    TREC_COLUMN_WISE,
    TREC_ROW_WISE,
    TREC_TABLE_ROW_WISE,
    TREC_DATA_PARALLEL,
};

enum trec_kernel {
    TREC_KERNEL_FUSED = 0, /* HBM_BW on cuda */
    TREC_KERNEL_DENSE,     /* 0.5 * HBM_BW on cuda */
};

/* TorchRec's Perf: all in ms. */
struct trec_perf {
    double fwd_compute;
    double fwd_comms;
    double bwd_compute;
    double bwd_comms;
    double total;
};

/* Inputs of one shard's estimate (torchrec_planner.md 2.2-2.5). */
struct trec_shard_in {
    enum trec_sharding sharding;
    enum trec_kernel kernel;
    int64_t batch_size; /* per rank (TorchRec's B) */
    double pooling_factor;
    int64_t rows;     /* the shard's rows (DP: the table's) */
    int32_t cols;     /* the shard's columns */
    size_t elem_size; /* table element bytes, also comm dtype */
    int32_t world_size;
    int32_t local_world_size;
    double hbm_bw;   /* bytes/ms; 0 = TorchRec's 897 GiB/s */
    double intra_bw; /* bytes/ms; 0 = 600 GiB/s */
    double inter_bw; /* bytes/ms; 0 = 12.5 GiB/s */
};

/* Perf.total (2.7), summed in TorchRec's order so that totals are the
 * Python planner's to the last bit. */
static inline double trec_perf_total(double fwd_compute, double fwd_comms,
                                     double bwd_compute, double bwd_comms)
{
    return fwd_compute + bwd_compute + fwd_comms + bwd_comms;
}

/* EmbeddingPerfEstimator for one shard (fp32, pooled, unweighted). */
void trec_shard_perf(const struct trec_shard_in *in, struct trec_perf *out);

/*
 * TorchRec's per-shard HBM storage (torchrec_planner.md 1.6, pipeline NONE):
 * weights + optimizer state + input and output buffers.
 */
uint64_t trec_shard_storage(const struct trec_shard_in *in, enum optimizer opt);

/*
 * Column-wise block width: the smallest d >= min_partition (128 when 0) with
 * cols % d == 0 and d % 4 == 0, else cols.
 */
int32_t trec_cw_block(int32_t cols, int32_t min_partition);

/* ------------------------------------------------------------------------ */
/* Algorithms (baseline.c, torchrec.c)                                        */

enum plan_alg {
    PLAN_ALG_RANDOM = 0,
    PLAN_ALG_DIM_GREEDY,
    PLAN_ALG_SIZE_GREEDY,
    PLAN_ALG_LOOKUP_GREEDY,
    PLAN_ALG_SIZE_LOOKUP_GREEDY,
    PLAN_ALG_TORCHREC_GREEDY,
    PLAN_ALG_NEUROSHARD,
    PLAN_ALG_COUNT
};

/* Parses an algorithm name; SD_EINVAL with d listing the known names. */
int plan_alg_parse(const char *s, enum plan_alg *out, struct sd_diag *d);
const char *plan_alg_name(enum plan_alg a);

struct plan_options {
    enum plan_alg alg;
    enum optimizer optimizer;
    uint64_t seed; /* for random */
    /* neuroshard: the model searched with (borrowed; required). */
    const struct cost_net *net;
    double time_budget_ms; /* neuroshard: stop the beam after this; 0: none */
    bool column_splits;    /* neuroshard: allow column-wise splits */
    bool local_search;     /* neuroshard: final move/swap pass */
    int32_t beam_width;    /* 3 */
    int32_t beam_depth;    /* 10 */
    int32_t candidates;    /* top-k by size and by cost to split; 10 */
    int32_t threads;       /* neuroshard: scoring threads; 0: one per CPU */
    /*
     * Pins (borrowed; NULL: none): pins[i] is the device table i must go
     * to whole, or -1 where it may go anywhere.  Every algorithm places
     * the pinned tables first and never splits them.
     */
    const int32_t *pins;
    /*
     * When not NULL and set (by another thread), the search stops as if
     * its time budget ran out: the caller no longer wants the plan.  The
     * baselines finish (they take microseconds).
     */
    const atomic_bool *cancel;
};

/* alg size_lookup_greedy, sgd, seed 0, neuroshard defaults as above. */
void plan_options_default(struct plan_options *o);

/*
 * The inputs every algorithm needs checked: table_validate_all(),
 * topology_validate() and a table count that fits a shard's index.
 */
int plan_check_inputs(const struct table *tables, size_t ntables,
                      const struct topology *t, struct sd_diag *d);

/*
 * Checks pins (ntables entries, -1 for none) against the topology: every
 * device in range, and each device's pinned tables, whole, within its
 * capacity.  SD_EINVAL (a bad device) or SD_ENOSPACE naming the device, its
 * pinned bytes and the first table over.  NULL pins pass.  Every algorithm
 * that takes pins calls it first.
 */
int plan_check_pins(const struct table *tables, size_t ntables,
                    const struct topology *t, const int32_t *pins,
                    enum optimizer opt, struct sd_diag *d);
/* The same, with messages naming the pins `field`
 * ("options.constraints.pins") instead of "pins". */
int plan_check_pins_as(const struct table *tables, size_t ntables,
                       const struct topology *t, const int32_t *pins,
                       enum optimizer opt, const char *field,
                       struct sd_diag *d);

/*
 * Places tables on the topology's devices with one algorithm and fills *out
 * (initialised here; plan_destroy() it) with a sorted, validated plan.  The
 * plan's costs are filled with plan_evaluate() and model m.  Returns 0,
 * SD_EINVAL (bad tables or topology, d says which), SD_ENOSPACE (a table fits
 * on no device: d names it and the shortfall in bytes), or SD_ENOMEM.
 */
int plan_run(const struct table *tables, size_t ntables,
             const struct topology *t, const struct plan_options *o,
             const struct cost_model *m, struct plan *out, struct sd_diag *d);

/*
 * The non-learned baselines of neuroshard.md 7, table-wise only: random
 * (uniform over the devices with room) and LPT greedy by dim, size,
 * dim * pooling factor, or dim * pooling factor * log10(rows).  Unlike the
 * original, a table that fits nowhere is an error, never an overflow onto
 * the last device.  *out is initialised here; same returns as plan_run().
 */
int plan_baseline(const struct table *tables, size_t ntables,
                  const struct topology *t, const struct plan_options *o,
                  struct plan *out, struct sd_diag *d);

/*
 * LPT placement used by the greedy baselines (neuroshard.md 7): the pinned
 * tables (pins may be NULL) onto their devices, then the others in
 * descending (cost, size, index) order, each onto the device with the least
 * accumulated cost among those with room (ties: less memory, lower id).
 * Exposed for tests.  Same returns as plan_run(); *out is initialised here.
 */
int plan_greedy_lpt(const struct table *tables, size_t ntables,
                    const double *cost, const int32_t *pins,
                    const struct topology *t, enum optimizer opt,
                    struct plan *out, struct sd_diag *d);

/*
 * NeuroShard's search (neuroshard.md 6.3-6.4) with o->net: a beam search
 * over column-wise splits whose every state is scored by a table-wise
 * greedy grid search, then a local search of moves and swaps off the
 * critical device.  Faster than the original by construction: cached
 * per-(table, width) latents projected through the head's first layer, so
 * placing a table is 64 additions; split states deduplicated; grid scales
 * that cannot change the greedy skipped.  Deterministic for the same inputs
 * unless the time budget cuts it short.  Fills out->stats, and
 * out->cost_ms with the search's own score (plan_evaluate() replaces it with
 * the same figure computed afresh).  *out is
 * initialised here; same returns as plan_run() (SD_EINVAL without a model).
 */
int plan_neuroshard(const struct table *tables, size_t ntables,
                    const struct topology *t, const struct plan_options *o,
                    struct plan *out, struct sd_diag *d);

/*
 * TorchRec's GreedyPerfPartitioner over its estimator, for table-wise and
 * column-wise options (torchrec_planner.md 1.2-1.4): proposals all-TW,
 * all-CW and per-table best, each partitioned largest-storage first onto the
 * device heap ordered by (perf, rank % local, rank); the best rated plan
 * (max rank total perf) wins.  Pinned tables (pins may be NULL) are
 * table-wise in every proposal and go to their devices first, as a
 * TorchRec user would place them by hand.  *out is initialised here.
 */
int plan_torchrec_greedy(const struct table *tables, size_t ntables,
                         const struct topology *t, enum optimizer opt,
                         const int32_t *pins, struct plan *out,
                         struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* Neural compute cost model (net.c, train.c)                                */

/*
 * NeuroShard's compute model (neuroshard.md 5.1): every table of a shard goes
 * through the same MLP 20 -> 128 -> 32 (ReLU after both layers), the 32-d
 * latents are summed over the shard, and a head 32 -> 64 -> 1 (ReLU between)
 * gives the shard's cost.  Two deliberate differences from the original:
 *  - inputs are table_features() with the pooling factor as log1p(pf) and
 *    rows as log(rows), then z-scored with constants stored in the model;
 *  - the head's output goes through softplus, so costs are always positive
 *    yet grow linearly (not exponentially) for shards larger than any it
 *    was trained on, and training fits relative error, not raw ms.
 * Parameters are one float array, row-major [out][in] per layer, in this
 * order (offsets below).
 */
#define NET_IN      TABLE_NFEATURES
#define NET_H1      128
#define NET_LAT     32
#define NET_H2      64
#define NET_W1      0
#define NET_B1      (NET_W1 + NET_H1 * NET_IN)
#define NET_W2      (NET_B1 + NET_H1)
#define NET_B2      (NET_W2 + NET_LAT * NET_H1)
#define NET_W3      (NET_B2 + NET_LAT)
#define NET_B3      (NET_W3 + NET_H2 * NET_LAT)
#define NET_W4      (NET_B3 + NET_H2)
#define NET_B4      (NET_W4 + NET_H2)
#define NET_NPARAMS (NET_B4 + 1) /* 8,993 */

/* The model file's format version (docs/model-format.md). */
#define NET_FORMAT_VERSION 1
#define NET_PROFILE_MAX    128

/* How a model was trained; fractions (0.05 = 5 %) and counts of samples. */
struct net_metrics {
    double train_mape;
    double val_mape;
    double test_mape;
    int64_t train_samples;
    int64_t val_samples;
    int64_t test_samples;
    int32_t epochs;     /* run */
    int32_t best_epoch; /* whose weights were kept */
    uint64_t seed;
};

struct cost_net {
    char profile[NET_PROFILE_MAX]; /* the hardware profile it answers for */
    int64_t batch_size;            /* the batch its samples were measured at */
    float mean[NET_IN];            /* z-score of the transformed features */
    float std[NET_IN];
    float p[NET_NPARAMS];
    struct net_metrics metrics;
};

/* The transformed, normalised input of a table cut to `cols` columns. */
void net_input(const struct cost_net *m, const struct table *t, int32_t cols,
               float x[NET_IN]);
/* Raw transformed features (before z-scoring): what the mean/std are of. */
void net_features(const struct table *t, int32_t cols, float x[NET_IN]);

/* The 32-d latent of one table cut to `cols` columns. */
void net_latent(const struct cost_net *m, const struct table *t, int32_t cols,
                float lat[NET_LAT]);

/*
 * The head's first layer is linear in the latent sum, so a shard can be
 * carried as z = b3 + W3 * sum(latents): net_project() gives W3 * lat (64-d)
 * for one table, net_head_z() the cost (ms) from z.  Adding a table to a
 * shard is then 64 additions and scoring it 64 multiply-adds.
 */
void net_project(const struct cost_net *m, const float lat[NET_LAT],
                 float proj[NET_H2]);
void net_head_init(const struct cost_net *m, float z[NET_H2]); /* z = b3 */
double net_head_z(const struct cost_net *m, const float z[NET_H2]);
/* log(1 + e^x), the output activation. */
double net_softplus(double x);
/* The head before its activation: cost = softplus(raw), a monotone map, so
 * comparisons of shards can skip it. */
double net_head_raw(const struct cost_net *m, const float z[NET_H2]);

/* Predicted ms of one shard (items' tables cut to their cols). */
double net_shard_ms(const struct cost_net *m, const struct shard_item *items,
                    size_t n);
/* The same for a shard given as whole tables, each at its own dim (the form
 * of a measured sample). */
double net_tables_ms(const struct cost_net *m, const struct table *tables,
                     size_t n);

/*
 * Serialises m into a new buffer (*out, free()) of *len bytes: the model
 * file format, little-endian, with a CRC-32 over everything before it.
 * Returns 0 or SD_ENOMEM.
 */
int net_serialize(const struct cost_net *m, void **out, size_t *len);

/*
 * Parses a model file image into *out (owned: free()).  Returns 0, or
 * SD_EFORMAT (not a model file, a damaged one: bad magic, size or checksum,
 * non-finite weights; d says which) or SD_ENEWER (a newer format version),
 * or SD_ENOMEM.
 */
int net_parse(const void *buf, size_t len, struct cost_net **out,
              struct sd_diag *d);

/* Reads / writes a model file (write: to a temporary file, then rename). */
int net_read_file(const char *path, struct cost_net **out, struct sd_diag *d);
int net_write_file(const char *path, const struct cost_net *m,
                   struct sd_diag *d);

/*
 * Checks that m answers for `profile`; SD_EINVAL with both names in d when
 * not.
 */
int net_check_profile(const struct cost_net *m, const char *profile,
                      struct sd_diag *d);

/*
 * The model committed with shardd (models/, docs/models.md), parsed on first
 * use; NULL if the embedded image is damaged (d says why).  Shared, read-only,
 * never freed.
 */
const struct cost_net *net_embedded(struct sd_diag *d);

/*
 * A cost_model answering with m (borrowed).  Costs are for the topology's
 * batch: m's prediction is scaled by batch_size / m->batch_size (the
 * fused op's time is linear in the lookups), and the name says so.
 */
struct net_cost_model {
    struct cost_model cm;
    const struct cost_net *net;
    char name[NET_PROFILE_MAX + 16];
};
void net_cost_model_init(struct net_cost_model *ncm, const struct cost_net *m);

/* One measured shard for training. */
struct train_sample {
    const struct table *tables; /* the shard; each table's dim is its width */
    size_t ntables;
    double ms; /* measured, > 0 */
};

struct train_params {
    uint64_t seed;
    int32_t max_epochs; /* default 400 */
    int32_t patience;   /* epochs without a better validation loss; 40 */
    int32_t batch;      /* shards per Adam step; 128 */
    double lr;          /* Adam step size; 2e-3 */
    double val_frac;    /* 0.1 */
    double test_frac;   /* 0.1 */
    /* Decoupled (AdamW) decay of the weight matrices, not the biases: every
     * step multiplies them by 1 - lr * weight_decay.  0 is plain Adam; >= 0
     * and lr * weight_decay < 1.  Default 1.0, which the small measured data
     * sets (~1,000 shards) need against overfitting. */
    double weight_decay;
    /* Called after every epoch; returning non-zero stops training (the best
     * weights so far are kept).  May be NULL. */
    int (*progress)(void *ctx, int32_t epoch, int32_t max_epochs,
                    double train_loss, double val_mape);
    void *ctx;
};
void train_params_default(struct train_params *p);

/*
 * Trains a compute model on n samples: a seeded shuffle split into
 * train / validation / test, z-score constants from the training tables,
 * Adam on the mean squared error of log(predicted ms) - log(measured ms)
 * (relative error) with decoupled weight decay, early stopping on the
 * validation loss keeping the best epoch's weights (best_epoch 0: no epoch
 * had a finite loss, the initial weights are kept).  Deterministic for a
 * seed and sample order with the reference BLAS (libblas3; a threaded BLAS
 * may add its thread count to the inputs).  *out (owned: free()) gets
 * profile, batch_size and the metrics (MAPE on every split).  Returns 0,
 * SD_EINVAL (fewer than 10 samples, a sample with no tables, an invalid
 * table or ms <= 0, bad params, weight_decay included, an empty profile or
 * batch_size < 1; d says which) or SD_ENOMEM.
 */
int net_train(const struct train_params *p, const struct train_sample *s,
              size_t n, const char *profile, int64_t batch_size,
              struct cost_net **out, struct sd_diag *d);

/* Mean absolute percentage error (fraction) of m over samples. */
double net_mape(const struct cost_net *m, const struct train_sample *s,
                size_t n);

/* ------------------------------------------------------------------------ */
/* JSON formats (json.c)                                                     */

/*
 * Reads a tables file: {"tables": [{"name", "rows", "dim",
 * "pooling_factor", "bins": [17 numbers], "dtype"?}]}, or a tasks file
 * ({"tasks": [{"name", "tables": [...]}]}) from which task `task_index` is
 * taken.  Validates every table.  *out (owned, free()) and *n are set on
 * success.  Errors: SD_EIO (cannot read; d has errno text), SD_EFORMAT
 * (malformed JSON: d has line and column), SD_EINVAL (a missing or bad field:
 * d names the table and field), SD_ENOMEM.
 */
int json_read_tables(const char *path, size_t task_index, struct table **out,
                     size_t *n, struct sd_diag *d);

/* Same, from a buffer (used by tests and the fuzzer). */
int json_parse_tables(const char *buf, size_t len, size_t task_index,
                      struct table **out, size_t *n, struct sd_diag *d);

/*
 * Reads a plan in the json_plan() format back against its tables: the
 * device count is the length of "devices" (required, 1..TOPO_DEVICES_MAX),
 * every table name must be one of `tables`, and
 * shards keep their device and columns.  Costs in the file are ignored.  The
 * plan is not validated here (plan_validate() does that against a
 * topology).  *out is initialised here; plan_destroy() it.  Errors as for
 * json_read_tables(); SD_EINVAL names the table and shard.
 */
int json_read_plan(const char *path, const struct table *tables, size_t ntables,
                   struct plan *out, struct sd_diag *d);
int json_parse_plan(const char *buf, size_t len, const struct table *tables,
                    size_t ntables, struct plan *out, struct sd_diag *d);

/*
 * Writers return a NUL-terminated string owned by the caller (free()), or
 * NULL when out of memory.
 *  - json_tables: the tables format above.
 *  - json_tasks: {"tasks": [{"name", "source": [pool indices], "tables"}]}.
 *  - json_plan: {"algorithm", "plan_cost_ms", "cost_model", "comm_model",
 *    "devices": [{"id", "memory_bytes", "cost_ms": {"compute", "fwd_comm",
 *    "bwd_comm", "total"}}], "tables": [{"name", "shards": [{"device",
 *    "col_offset", "col_width"}]}]}, and after plan_run() "explanation":
 *    {"critical_device", "drivers": [{"table", "col_offset", "col_width",
 *    "cost_ms"}], "lower_bound_ms", "gap"} and, for neuroshard, "search":
 *    {"time_ms", "states", "greedy_runs", "beam_levels", "column_splits",
 *    "local_moves", "budget_exhausted"}.
 *  - json_plan_torchrec: TorchRec's serialized ShardingPlan for module
 *    "embedding_bags" (sharding_type, compute_kernel, ranks, shards with
 *    shard_offsets, shard_sizes, placement).
 */
char *json_tables(const struct table *tables, size_t n);
char *json_tasks(const struct task *tasks, size_t n);
char *json_plan(const struct plan *p, const struct table *tables);
char *json_plan_torchrec(const struct plan *p, const struct table *tables,
                         const struct topology *t);

#endif /* SHARDD_PLANNER_H */
