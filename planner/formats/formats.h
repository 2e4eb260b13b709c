/*
 * The formats, beside the problem (problem.h, which has the conventions):
 * JSON of tables, tasks and plans on jansson (json.c; the plan format belongs
 * to the planner), trace files (trace_file.c), synthetic tables and
 * benchmark tasks (synth.c, task.c), traces synthesised from a table's
 * features (trace_from_table.c), and nccl-tests outputs with their
 * alpha-beta fit (nccl.c).  Includes the problem room only.
 */
#ifndef SHARDD_PLANNER_FORMATS_H
#define SHARDD_PLANNER_FORMATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "problem/problem.h"
#include "shardd/err.h"

/* ------------------------------------------------------------------------ */
/* Trace files (trace_file.c)                                               */

/*
 * Trace files: a documented little-endian binary format, see trace_file.c
 * and docs/trace-format.md.  trace_file_write() writes n traces to path;
 * trace_file_read() reads every trace of a file into a new array (*out, *n
 * owned by the caller, free with trace_array_free()).  Errors: SD_EIO (with
 * errno text in d), SD_EFORMAT (d names the trace and field), SD_ENOMEM.
 */
int trace_file_write(const char *path, const struct trace *traces, size_t n,
                     struct sd_diag *d);
int trace_file_read(const char *path, struct trace **out, size_t *n,
                    struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* nccl-tests outputs and their alpha-beta fit (nccl.c)                      */

/*
 * What NVIDIA's nccl-tests binaries (all_reduce_perf, ...) print, read as
 * it is posted: launcher prefixes ("0: ", "[1,0]<stdout>:"), markdown
 * indentation, foreign lines (NCCL INFO, MPI warnings, shell prompts) and
 * several tables in one file are taken; only the rows' numbers matter
 * (docs/models.md, "comm-fit").
 */
enum nccl_coll {
    NCCL_ALL_REDUCE = 0,
    NCCL_ALL_GATHER,
    NCCL_REDUCE_SCATTER,
    NCCL_ALL_TO_ALL,
    NCCL_COLL_COUNT
};

/* "all_reduce", "all_gather", "reduce_scatter", "alltoall". */
const char *nccl_coll_name(enum nccl_coll c);
/* Parses those names (and "all_to_all"); SD_EINVAL for others. */
int nccl_coll_parse(const char *s, enum nccl_coll *out);

/* One size of a table: the out-of-place figures. */
struct nccl_row {
    uint64_t bytes; /* the size column: bytes per rank (max of send, recv) */
    double time_us;
    double algbw, busbw; /* GB/s (1e9 bytes), as printed */
};

#define NCCL_DEVICE_MAX 96

struct nccl_run {
    enum nccl_coll coll;
    int32_t nranks; /* from the rank lines, else from busbw / algbw */
    int32_t nhosts; /* distinct hosts of the rank lines; 0: not given */
    char device[NCCL_DEVICE_MAX]; /* rank 0's GPU; "" when not given */
    size_t nrows;                 /* rows of size > 0 */
    struct nccl_row *rows;        /* owned: nccl_run_free() */
};

/*
 * Parses one output (text of len bytes).  The collective is the one the
 * text names ("Collective test starting: X_perf", a command line, any
 * "X_perf"), else `hint` (a file name, say) when it names one, else what
 * busbw / algbw says when only all_reduce fits it.  Returns 0, SD_EINVAL
 * (no data row, or no way to tell the collective or the ranks; d says
 * which) or SD_ENOMEM.
 */
int nccl_parse(const char *text, size_t len, const char *hint,
               struct nccl_run *out, struct sd_diag *d);
void nccl_run_free(struct nccl_run *r); /* NULL-safe */

/*
 * An alpha-beta fit per size band: time = alpha + bytes / beta within each
 * band of consecutive sizes (NCCL switches protocol and algorithm with the
 * size, each with its own latency and bandwidth).  Bands are chosen by
 * dynamic programming to minimise the squared relative error, each fitted
 * by least squares on the relative error (alpha >= 0).
 */
#define NCCL_BANDS_MAX 4

struct nccl_band {
    uint64_t from_bytes, to_bytes; /* the band's first and last size */
    double alpha_us;               /* latency */
    double beta_gbps;              /* bytes / time in GB/s (algbw) */
};

struct nccl_fit {
    int32_t nbands;
    struct nccl_band band[NCCL_BANDS_MAX];
    double mape;    /* mean |predicted / measured - 1| over the rows */
    double max_err; /* the largest of those */
    size_t nrows;
};

/* Fits r's rows with at most `bands` bands (1 .. NCCL_BANDS_MAX; fewer when
 * there are too few rows: two a band).  SD_EINVAL when r has fewer than 2
 * rows. */
int nccl_fit(const struct nccl_run *r, int32_t bands, struct nccl_fit *out,
             struct sd_diag *d);
/* A fit's time for `bytes` (the band holding it, or the nearest). */
double nccl_fit_us(const struct nccl_fit *f, uint64_t bytes);

/* ------------------------------------------------------------------------ */
/* Synthetic DLRM tables and tasks (synth.c, task.c)                        */

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
/* Traces from features (trace_from_table.c)                                */

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
/* JSON formats (json.c)                                                    */

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
 * every table name must be one of `tables`, and shards keep their device,
 * columns, rows (every row where a shard gives none) and their table's
 * "scheme" (table_wise where none is given).  Costs in the file are
 * ignored.  The plan is not validated here
 * (plan_validate() does that against a topology).  *out is initialised here;
 * plan_destroy() it.  Errors as for json_read_tables(); SD_EINVAL names the
 * table and shard.
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
 *    "bwd_comm", "total"}}], "tables": [{"name", "scheme", "shards":
 *    [{"device", "col_offset", "col_width"[, "row_offset", "row_count"]}]}]}
 *    (rows only for row blocks), and after plan_run() (search.h)
 *    "explanation": {"critical_device", "drivers": [{"table", "col_offset",
 *    "col_width", "cost_ms"}], "lower_bound_ms", "gap"} and, for
 *    neuroshard, "search":
 *    {"time_ms", "states", "greedy_runs", "beam_levels", "column_splits",
 *    "local_moves", "budget_exhausted"}.
 *  - json_plan_torchrec: TorchRec's serialized ShardingPlan for the
 *    module path `module` (NULL or "": "embedding_bags"): per table
 *    sharding_type (TorchRec's names), compute_kernel (dense for
 *    data_parallel, else fused), ranks and, except for data_parallel,
 *    shards with 2-D shard_offsets [row, column], shard_sizes [rows,
 *    columns] and placement.
 */
char *json_tables(const struct table *tables, size_t n);
char *json_tasks(const struct task *tasks, size_t n);
char *json_plan(const struct plan *p, const struct table *tables);
/* comm-fit's result: {"fits": [{"file", "collective", "ranks", "hosts",
 * "device", "sizes", "bands": [{"from_bytes", "to_bytes", "alpha_us",
 * "beta_gbps"}], "mape", "max_error", "one_band_mape"}]}, one per run. */
char *json_comm_fit(const char *const *names, const struct nccl_run *runs,
                    const struct nccl_fit *fits, const struct nccl_fit *one,
                    size_t n);
char *json_plan_torchrec(const struct plan *p, const struct table *tables,
                         const struct topology *t, const char *module);

#endif /* SHARDD_PLANNER_FORMATS_H */
