/*
 * The planning problem, the lowest room of the planner (planner.h): tables
 * and their features, traces, random numbers, topologies and optimizers,
 * plans with their building blocks and checks, the compute cost-model
 * interface with the analytic model, the alpha-beta comm model, and plan
 * evaluation and explanation.  It includes no other room.
 *
 * Conventions (reference/style.md): actions return 0 or a negative SD_E*
 * code; where a user must learn what was wrong, a struct sd_diag receives one
 * line naming the table and the field.  Out-parameters are untouched on
 * failure.  Every pointer a function returns through an out-parameter is owned
 * by the caller and released with the matching *_free().  Sizes are bytes,
 * times milliseconds, unless a name says otherwise.
 */
#ifndef SHARDD_PLANNER_PROBLEM_H
#define SHARDD_PLANNER_PROBLEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shardd/err.h"

/* ------------------------------------------------------------------------ */
/* Tables and features (table.c)                                            */

#define TABLE_NBINS     17  /* access-count histogram bins, neuroshard.md 1.1 */
#define TABLE_NFEATURES 20  /* cost-model input, neuroshard.md 1.2 */
#define TABLE_NAME_MAX  128 /* bytes, terminating NUL included */
#define TABLE_DIM_MIN   4
#define TABLE_DIM_MAX   1024
#define TABLE_DIM_ALIGN 4 /* dims and column slices are multiples of this */
#define TABLE_ROWS_MAX  ((int64_t)1 << 40)
#define TABLE_PF_MAX    1.0e6 /* mean bag length; larger is surely an error */

/*
 * Element types of a table's weights (and, for comm precision, of the pooled
 * embeddings a step exchanges).  int8 rows carry a per-row fp32 scale and
 * bias (8 bytes per row and column slice, as FBGEMM's quantised rows do);
 * int8 is for weights only.
 */
enum table_dtype {
    TABLE_DTYPE_FP32 = 0,
    TABLE_DTYPE_FP16 = 1,
    TABLE_DTYPE_BF16 = 2,
    TABLE_DTYPE_INT8 = 3,
    TABLE_DTYPE_COUNT
};
#define TABLE_INT8_ROW_EXTRA 8 /* bytes: fp32 scale and bias per row */

/*
 * Where a table's weights live (TorchRec's compute kernels,
 * torchrec_planner.md 1.2): in device memory (HBM, "fused"), in host DRAM
 * read over the host link through UVM ("fused_uvm"), or in host DRAM with a
 * cache of load factor f (a share of the rows) in HBM ("fused_uvm_caching").
 */
enum table_tier { TIER_HBM = 0, TIER_UVM, TIER_UVM_CACHING, TIER_COUNT };

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
    /*
     * The tier the search gives the table (the tier pass sets it on its own
     * copy of the tables; inputs leave it TIER_HBM, 0) and, for
     * TIER_UVM_CACHING, the cache load factor in (0, 1).  shard_bytes()
     * honours it; a plan's shards carry the tier they got (struct shard).
     */
    uint8_t tier; /* enum table_tier */
    float cache_load_factor;
};

/* Bytes per element of a dtype (4, 2 or 1). */
size_t table_dtype_size(enum table_dtype dtype);

/* Parses "fp32"/"fp16"/"bf16"/"int8"; returns SD_EINVAL for anything else. */
int table_dtype_parse(const char *s, enum table_dtype *out);
const char *table_dtype_name(enum table_dtype dtype);

/* Weight bytes of `cols` columns of t: rows * cols * element size (int8:
 * plus TABLE_INT8_ROW_EXTRA per row). */
uint64_t table_bytes(const struct table *t, int32_t cols);
/* The same for one row of `cols` columns of dtype. */
uint64_t table_row_bytes(enum table_dtype dtype, int32_t cols);

/* TorchRec's kernel names: "fused", "fused_uvm", "fused_uvm_caching". */
const char *tier_name(enum table_tier tier);
int tier_parse(const char *s, enum table_tier *out);

/*
 * The miss-rate curve of a cache over t (tiers.c).  The 17 bins are shares
 * of the unique rows one batch touched, by access count; each bin's rows are
 * taken to be accessed its bin's mean count (1 for bin 0, the mean integer
 * of (2^(k-1), 2^k], 0.75 * 2^k + 0.5, for k = 1..15, and 2^16 for bin 16).
 * With L = pooling factor x batch lookups a batch, the unique rows are U =
 * min(rows, L / sum_k bins[k] * count_k).  The rows touched more than once
 * (bins 1..16) are taken as the table's hot rows, the same every batch; a
 * cache of f x rows rows holds them hottest first (ideal LFU).  The rows
 * touched once (bin 0) are taken as a fresh draw from the table's other rows
 * each batch: the cache's room left after the hot rows holds each of them
 * with the chance room / (rows - hot rows).  The miss rate is the share of
 * the lookups the cache does not hold.  f >= 1 gives 0, f <= 0 gives 1 (UVM
 * with no cache); a table never accessed gives 0.
 */
double tier_miss_rate(const struct table *t, int64_t batch, double f);

/*
 * Checks one table: name non-empty, rows in [1, TABLE_ROWS_MAX], dim a
 * multiple of 4 in [4, 1024], pooling factor finite in [0, TABLE_PF_MAX],
 * bins finite in [0, 1] summing to at most 1 + TABLE_BINS_SLACK.  `idx` is
 * the table's position, used in the message.  Returns 0 or SD_EINVAL with d
 * set.
 */
int table_validate(const struct table *t, size_t idx, struct sd_diag *d);

/*
 * Bins a user wrote rounded (to 6 decimals, say) can sum to a little over
 * 1: a sum in (1, 1 + TABLE_BINS_SLACK] is scaled back to at most 1.
 * Inputs call it before validating; anything else is left as it is, so a
 * second call changes nothing.
 */
#define TABLE_BINS_SLACK 1e-3
void table_normalize_bins(struct table *t);

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
#define TABLE_FEATURE_PF   18 /* pooling_factor's place among them */
#define TABLE_FEATURE_ROWS 19 /* rows' */

/*
 * The mean access count of the unique rows of bin k (struct table): 1 for
 * bin 0, the mean integer of (2^(k-1), 2^k], 0.75 * 2^k + 0.5, for k =
 * 1..15, and 2^16 for bin 16.
 */
double table_bin_count(int k);

/*
 * The unique rows one batch of `batch` bags touches, estimated from the
 * bins: the batch makes L = pooling factor x batch lookups, each unique row
 * is accessed sum_k bins[k] x table_bin_count(k) times on average, so
 * U = min(rows, L / that).  0 for a table never accessed.
 */
double table_unique_rows(const struct table *t, int64_t batch);

/*
 * The column-wise split rule (neuroshard.md 6.2): a table or slice of `dim`
 * columns halves while the half is a multiple of TABLE_DIM_ALIGN.  Returns
 * how many widths that gives, dim itself included (>= 1): widths dim >> k
 * for k below it.
 */
int32_t table_split_levels(int32_t dim);

/* ------------------------------------------------------------------------ */
/* Traces: one batch of lookups of one table (trace.c)                      */

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

/* Releases n traces (trace_destroy()) and the array; NULL-safe. */
void trace_array_free(struct trace *traces, size_t n);

/*
 * The lookups one row block of t sees: rows [first, first + count) of t as
 * a table of `count` rows (ids shifted down by first), every bag of t kept
 * with the ids that fall in the block (so some bags may be empty).  What
 * the device holding that block of a row-wise sharded table looks up, for
 * measuring it and for its exact features (trace_to_table()).  *out owns
 * its arrays (trace_destroy()).  Returns 0, SD_EINVAL (a block outside t,
 * or t breaks its invariants) or SD_ENOMEM.
 */
int trace_row_block(const struct trace *t, int64_t first, int64_t count,
                    struct trace *out);

/* ------------------------------------------------------------------------ */
/* Random numbers (rng.c): seeded and reproducible on every platform.       */

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
/* Topologies and optimizers (topology.c)                                   */

#define TOPO_DEVICES_MAX 4096
/* Sane ranges of the link figures: outside them a cost overflows or means
 * nothing (a subnormal bandwidth made comm costs inf, then NaN). */
#define TOPO_BW_MIN      1.0  /* bytes per ms: 1 kB/s */
#define TOPO_BW_MAX      1e15 /* bytes per ms: 1 EB/s */
#define TOPO_LATENCY_MAX 1e6  /* ms */

struct comm_model; /* cost.c */

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
    /*
     * The host tier (tiers.c): host DRAM per host for tables in UVM (0, the
     * default: no host tier, every table in HBM as before) and the
     * HBM<->host link (bytes per ms; 0 takes TOPO_HOST_LINK_BW, TorchRec's
     * HBM_TO_DDR_MEM_BW of 32 GiB/s).
     */
    uint64_t host_dram_bytes;
    double host_link_bw;
    /* Precision of the pooled embeddings and their gradients in the
     * forward/backward exchanges: fp32 (the default), fp16 or bf16.  The
     * alpha-beta model honours it; a learned comm model answers as
     * measured (fp32). */
    uint8_t comm_dtype; /* enum table_dtype */
    /* How the all-to-all costs: NULL, the alpha-beta model of the link
     * figures above (cost_comm_alpha_beta()); else a model that answers
     * for ndevices devices (borrowed, like mem_by_device). */
    const struct comm_model *comm;
};

#define TOPO_HOST_LINK_BW (32.0 * (double)(1ull << 30) / 1000.0)

/* The host link's bandwidth (host_link_bw, or its default). */
double topology_host_link_bw(const struct topology *t);
/* Bytes of one exchanged element (4 or 2). */
double topology_comm_esz(const struct topology *t);

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
/* What would help a task that fits no device's memory, for messages: more
 * of it, or, where the topology has no host DRAM, that tier (tables go
 * there only when it is given). */
const char *topology_more_memory(const struct topology *t);

enum optimizer {
    OPTIMIZER_SGD = 0,         /* no state */
    OPTIMIZER_ADAGRAD,         /* one value per weight */
    OPTIMIZER_ROWWISE_ADAGRAD, /* one value per row */
    OPTIMIZER_ADAM,            /* two values per weight */
};

int optimizer_parse(const char *s, enum optimizer *out);
const char *optimizer_name(enum optimizer o);

/*
 * Bytes `cols` columns of t need in a device's memory (HBM): weights plus
 * optimizer state (row-wise Adagrad keeps one element per row for each
 * column slice), as t's tier has them: all of them in HBM, none for UVM, the
 * load factor's share (rounded up) for a UVM cache.
 */
uint64_t shard_bytes(const struct table *t, int32_t cols, enum optimizer opt);
/* The same bytes in host DRAM: all of them for UVM and UVM caching (the
 * cache is a copy), none in HBM. */
uint64_t shard_ddr_bytes(const struct table *t, int32_t cols,
                         enum optimizer opt);

/* ------------------------------------------------------------------------ */
/* Plans (plan.c)                                                           */

/*
 * How a table is split (TorchRec's sharding types, torchrec_planner.md 1.2,
 * under TorchRec's names: scheme_name()).
 */
enum plan_scheme {
    SCHEME_TW = 0, /* whole, on one device */
    SCHEME_CW,     /* column slices, each whole in rows */
    SCHEME_RW,     /* one column slice (all columns) in row blocks */
    SCHEME_TWRW,   /* row blocks on the devices of one host */
    SCHEME_GRID,   /* column slices, each in row blocks on one host */
    SCHEME_DP,     /* a whole replica on every device */
    SCHEME_COUNT
};

const char *scheme_name(enum plan_scheme s);
/* TorchRec's name ("row_wise", ...) to the scheme; SD_EINVAL if unknown. */
int scheme_parse(const char *s, enum plan_scheme *out);
/* RW, TWRW and grid: blocks of rows. */
bool scheme_splits_rows(enum plan_scheme s);

/*
 * Columns [col_offset, col_offset + col_width) and rows [row_offset,
 * row_offset + row_count) of table `table` on `device`; row_count 0 means
 * every row.  Every shard of a table has the table's scheme.
 */
struct shard {
    uint32_t table;
    int32_t device;
    int32_t col_offset;
    int32_t col_width;
    int64_t row_offset;
    int64_t row_count;
    uint8_t scheme; /* enum plan_scheme */
    /* Where the shard's weights live (TIER_HBM unless the table's tier says
     * otherwise, plan_validate()) and its cache load factor. */
    uint8_t tier; /* enum table_tier */
    float cache_load_factor;
};

/*
 * What a user allows for one table (TorchRec's ParameterConstraints,
 * torchrec_planner.md 5): the schemes (bit 1 << scheme each; 0: any), a
 * minimum of row blocks (0 or 1: none), no split at all (table-wise only),
 * and one host for all its shards (-1: any).
 */
struct table_constraint {
    uint32_t schemes;
    int32_t min_row_shards;
    bool no_split;
    int32_t host;
    /*
     * The memory tiers the table may have (TorchRec's compute_kernels: bit
     * 1 << enum table_tier each; 0: any, the tier pass deciding when HBM is
     * short) and, when it is cached, its cache load factor (TorchRec's
     * cache_params.load_factor: in (0, 1); 0: the tier pass chooses).  A
     * table whose tiers leave out TIER_HBM goes to host DRAM even when HBM
     * would hold it.
     */
    uint32_t tiers;
    float cache_load_factor;
};

/* c (NULL: no constraint) allows scheme s for its table. */
bool constraint_allows(const struct table_constraint *c, enum plan_scheme s);
/* c (NULL: no constraint) allows tier `tier` for its table (and, for
 * TIER_UVM_CACHING, load factor f: the constraint's, when it has one). */
bool constraint_allows_tier(const struct table_constraint *c,
                            enum table_tier tier, double f);

/* The rows shard s of t holds. */
int64_t shard_rows(const struct table *t, const struct shard *s);

/*
 * The table the cost model sees for shard s of t on n devices: its columns
 * and rows; a row block sees its share of the lookups (ids hashed evenly
 * over the rows: pooling factor x rows / all rows, the access histogram
 * unchanged), a data-parallel replica its device's local batch (pooling
 * factor / n).  Stated in docs/api.md as the assumption it is.
 */
void shard_table(const struct table *t, const struct shard *s, int32_t ndevices,
                 struct table *out);

/* Bytes shard s of t needs on its device (shard_bytes() of its rows, at
 * the shard's tier), and in its host's DRAM (shard_ddr_bytes()). */
uint64_t shard_block_bytes(const struct table *t, const struct shard *s,
                           enum optimizer opt);
uint64_t shard_block_ddr_bytes(const struct table *t, const struct shard *s,
                               enum optimizer opt);

/*
 * The modelled time (ms) a step spends on the host link for shard s of t
 * (tiers.c): the lookups that miss the cache (tier_miss_rate() of the
 * shard's table at its load factor; every lookup for UVM) each read a row of
 * its columns over the link in the forward pass and move it twice in the
 * backward (read and write back the update, the analytic model's backward
 * of twice the forward).  0 for a shard in HBM.
 */
double tier_shard_ms(const struct table *t, const struct shard *s,
                     const struct topology *topo);

/* tier_shard_ms() of table t whole (table-wise) on one device, at the tier
 * and load factor t carries. */
double tier_table_ms(const struct table *t, const struct topology *topo);

/* Shard s's cache load factor for outputs: the float it is kept in, to its
 * 6 significant digits (0.2, not 0.200000003). */
double tier_load_factor(const struct shard *s);

/* Per-device figures of a plan. */
struct plan_device {
    uint64_t mem_bytes; /* in HBM */
    uint64_t ddr_bytes; /* in its host's DRAM (tables in UVM) */
    double tier_ms;     /* of compute_ms, the modelled host-link time */
    /* Some shard's host-memory time is in compute_ms as the cost model
     * measured it, not in tier_ms (plan_evaluate_tiers()). */
    bool tier_measured;
    double compute_ms;
    double fwd_comm_ms; /* includes waiting for the slowest device */
    double bwd_comm_ms;
    double total_ms;
    int32_t dim_sum; /* pooled columns the device produces */
    int32_t nshards;
};

#define PLAN_NOTES_MAX 4
#define PLAN_NOTE_LEN  320

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

/*
 * What a search did (neuroshard; zero for the baselines).  Plain data kept
 * here so that a plan carries it; only the algorithms (search.h) fill it.
 */
struct plan_search_stats {
    double search_ms;      /* all of it, the alternatives it weighed too;
                            * greedy_runs, states and evaluations are
                            * summed over every search it ran, levels,
                            * splits and moves are the kept plan's */
    int64_t greedy_runs;   /* table-wise greedy placements */
    int64_t states;        /* distinct column-split states scored */
    int64_t evaluations;   /* devices scored: one per piece placed, one
                            * or two per move or swap the local search
                            * tries (the second not where the first
                            * already rules it out) */
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
    /* Names the comm model: static, or its comm_model's name (valid while
     * that model is). */
    const char *comm_model;
    struct plan_explain explain;
    struct plan_search_stats stats;
    /* Sentences on choices the algorithm made beyond placing (why tables
     * are split in rows or replicated), for outputs. */
    int32_t nnotes;
    char notes[PLAN_NOTES_MAX][PLAN_NOTE_LEN];
    /* What per-host figures need (plan_evaluate() sets them from the
     * topology; 0 before): devices per host, each host's DRAM for tables
     * (0: no host tier). */
    int32_t devices_per_host;
    uint64_t host_dram_bytes;
};

/* Appends a note (printf-style; cut to PLAN_NOTE_LEN; dropped beyond
 * PLAN_NOTES_MAX). */
void plan_note(struct plan *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Makes an empty plan for ndevices devices.  Returns 0 or SD_ENOMEM. */
int plan_init(struct plan *p, int32_t ndevices);
void plan_destroy(struct plan *p);
/* Appends one shard of every row, scheme table-wise (plan_validate() makes
 * it column-wise where the table has several).  0 or SD_ENOMEM. */
int plan_add(struct plan *p, uint32_t table, int32_t device, int32_t col_offset,
             int32_t col_width);
/* Appends one shard as given.  0 or SD_ENOMEM. */
int plan_add_shard(struct plan *p, const struct shard *s);
/* Sorts shards by (table, col_offset, row_offset, device). */
void plan_sort(struct plan *p);
/* The column splits in p: its column pieces (shards of every row, not
 * replicas) beyond the first of each table, the one at column 0.  Row
 * blocks and replicas are not column splits (stats.splits). */
int32_t plan_column_splits(const struct plan *p);
/*
 * The scheme of the table whose sorted shards start at `first`: as they
 * say, except that shards of every row are table-wise alone and column-wise
 * together (before plan_validate() they all say table-wise).
 */
enum plan_scheme plan_table_scheme(const struct plan *p, size_t first);

/*
 * Checks a plan against its tables and topology: every shard names an
 * existing table and device, widths are positive multiples of 4, every
 * (row, column) cell of every table is placed exactly once (a
 * data-parallel table: once on every device), a table's shards agree on its
 * scheme and the scheme's shape (row blocks of TWRW and of each grid slice
 * on one host, on distinct devices), and each device's bytes
 * (shard_block_bytes()) are within its capacity.  Shards of every row are
 * marked table-wise or column-wise as their table's are.  Returns 0, or
 * SD_EINVAL (a malformed plan) or SD_ENOSPACE (memory) with d naming table,
 * device and bytes.  Sorts the plan.
 */
int plan_validate(struct plan *p, const struct table *tables, size_t ntables,
                  const struct topology *t, enum optimizer opt,
                  struct sd_diag *d);
/* The same, with messages naming the plan `what` ("placement") instead of
 * "plan". */
int plan_validate_as(struct plan *p, const struct table *tables, size_t ntables,
                     const struct topology *t, enum optimizer opt,
                     const char *what, struct sd_diag *d);

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
/*
 * Checks per-table constraints (ntables entries; NULL passes) against the
 * topology and the pins: a host in range, at least one scheme allowed, no
 * split and pins only with table_wise, a pinned device on the constraint's
 * host, a minimum of row blocks at most the devices it may use and only with
 * a row-wise scheme allowed, tiers known and a load factor in [0, 1), and a
 * table held off HBM (tiers without fused) only where the topology has host
 * DRAM.  SD_EINVAL naming `field`[i] and the table.
 */
int plan_check_constraints(const struct table *tables, size_t ntables,
                           const struct topology *t, const int32_t *pins,
                           const struct table_constraint *c, const char *field,
                           struct sd_diag *d);

/* The same, with messages naming the pins `field`
 * ("options.constraints.pins") instead of "pins". */
int plan_check_pins_as(const struct table *tables, size_t ntables,
                       const struct topology *t, const int32_t *pins,
                       enum optimizer opt, const char *field,
                       struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* Costs (cost.c)                                                           */

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
 * A communication cost model: per device the backward all-to-all (from the
 * devices' dim sums) and the forward one, which starts when the slowest
 * device is ready (compute + backward exchange) and so includes the wait
 * for it (from the dim sums and each device's compute).  fwd_ms and bwd_ms
 * (ndevices each) receive finite values >= 0.  name is shown in outputs
 * (plan.comm_model) and must live as long as the model.
 */
struct comm_model {
    const char *name;
    void (*exchange)(void *ctx, const struct topology *t,
                     const int32_t *dim_sum, const double *compute_ms,
                     double *fwd_ms, double *bwd_ms);
    void *ctx;
};

/*
 * t's exchange (t->comm, else alpha-beta) plus fixed_fwd and fixed_bwd
 * (NULL: none; the collectives every device has whatever the dims):
 * bwd_ms[r], and fwd_ms[r] with the wait for the slowest device included,
 * so device r finishes at compute_ms[r] + bwd_ms[r] + fwd_ms[r].
 * compute_ms NULL: no compute.  Returns t's comm model name
 * ("alpha_beta").
 */
const char *cost_comm_exchange(const struct topology *t, const int32_t *dim_sum,
                               const double *compute_ms,
                               const double *fixed_fwd, const double *fixed_bwd,
                               double *fwd_ms, double *bwd_ms);

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
 * One device's exchange of the model above (forward and backward alike):
 * its own dim, the sum of its host's dims and of all dims.  O(1), for a
 * search that changes a few devices at a time.
 */
double cost_comm_alpha_beta_one(const struct topology *t, int32_t dim,
                                double host_dims, double total_dims);

/*
 * The plan cost of per-device compute and dim sums (neuroshard.md 6.1):
 * max_r(compute_r + bwd_r + fwd_r) with t's all-to-all (cost_comm_exchange:
 * the forward waiting for the slowest device); with the alpha-beta model
 * that is max_r(compute_r + bwd_r) + max_r fwd_r (the pure exchange).
 * fixed_fwd and fixed_bwd (NULL: none) are exchanges every device has
 * whatever the dims, added to the all-to-all's (the collectives of
 * row-split and replicated tables, plan_collectives()); a learned forward
 * model sees the backward ones in the readiness it waits for.  O(N) for
 * alpha-beta.  Leaves the backward all-to-all in bwd_scratch.
 */
double cost_plan_ms(const struct topology *t, const double *compute_ms,
                    const int32_t *dim_sum, const double *fixed_fwd,
                    const double *fixed_bwd, double *fwd_scratch,
                    double *bwd_scratch);

/* The link a group of devices talks over (bytes per ms): the inter-host
 * one as soon as it spans hosts, else the intra-host one. */
double collective_link_bw(const struct topology *t, bool spans_hosts);

/*
 * Collectives (alpha-beta, ring algorithms): a group of k devices on the
 * intra-host link, or the inter-host one if it spans hosts.  A reduce-scatter
 * or all-gather of a buffer of `bytes` moves (k-1)/k of it per device in k-1
 * steps; an all-reduce is both.
 */
double collective_ring_ms(const struct topology *t, double bytes, int32_t k,
                          bool spans_hosts);
double collective_all_reduce_ms(const struct topology *t, double bytes,
                                int32_t k, bool spans_hosts);
/*
 * The forward (and, the same bytes back, backward) exchange of one column
 * slice of `cols` split in rows over a group of k devices: a reduce-scatter
 * of the blocks' partial pooled sums for the whole batch (in the topology's
 * comm precision, topology_comm_esz()) inside the
 * group, then, when the group is not every device, the reduced sums sent to
 * the devices that own their samples.  TWRW is this with the group one
 * host: intra-host reduce-scatter, then an inter-host all-to-all.
 */
double collective_row_group_ms(const struct topology *t, int32_t cols,
                               int32_t k, bool spans_hosts);
/*
 * Per device, the forward and backward exchanges a sorted, valid plan's
 * row-split and replicated tables add: each row group's
 * collective_row_group_ms() on its members both ways, and one bucketed
 * all-reduce of every replicated table's gradient on every device.  Table-
 * and column-wise shards add nothing here (theirs is the all-to-all of the
 * dims).  0 or SD_ENOMEM.
 */
int plan_collectives(const struct plan *p, const struct table *tables,
                     const struct topology *t, double *fwd_ms, double *bwd_ms);

/*
 * Fills p->explain from an evaluated plan: the critical device, its driving
 * shards and the lower bound, with m's cost of single shards.  Returns 0 or
 * SD_ENOMEM.
 */
int plan_explain(struct plan *p, const struct table *tables,
                 const struct topology *t, const struct cost_model *m);

/*
 * Fills p->devices and p->cost_ms (neuroshard.md 6.1): compute_r from the
 * model, bwd_r and the forward comm fw_r from t's comm model (alpha-beta:
 * ready_r = compute_r + bwd_r, fw_r = pure_r + (max_j ready_j - ready_r)),
 * total_r = compute_r + bwd_r + fw_r.  Memory per device from shard_bytes().
 * Returns 0 or SD_ENOMEM.
 */
int plan_evaluate(struct plan *p, const struct table *tables, size_t ntables,
                  const struct topology *t, enum optimizer opt,
                  const struct cost_model *m);

/*
 * plan_evaluate() with a cost model that times memory tiers itself (the
 * profiler's, measuring on a device that holds tables in host memory): a
 * shard whose tier is in `timed` (bit 1 << enum table_tier) reaches m as a
 * copy of its table carrying the shard's tier and load factor
 * (item.table->tier, ->cache_load_factor), m's time includes its reads of
 * host memory, and no modelled tier_shard_ms() is added for it: its device
 * has tier_measured set, and the plan's cost_model ends in " + host-link
 * misses (measured)".  Shards in other tiers are costed as plan_evaluate()
 * does, which is this with timed 0.
 */
int plan_evaluate_tiers(struct plan *p, const struct table *tables,
                        size_t ntables, const struct topology *t,
                        enum optimizer opt, const struct cost_model *m,
                        uint32_t timed);

/*
 * Whether some device of p computes `bound` ms or more under m, its shards
 * priced as plan_evaluate() prices them (without the host-link time of
 * tables off HBM), the devices in turn, stopping at the first: p then
 * costs at least `bound`, a device's total being its compute plus
 * exchanges of 0 or more.  Nothing of p is written.  0 or SD_ENOMEM.
 */
int plan_device_reaches(const struct plan *p, const struct table *tables,
                        const struct topology *t, const struct cost_model *m,
                        double bound, bool *reaches);

#endif /* SHARDD_PLANNER_PROBLEM_H */
