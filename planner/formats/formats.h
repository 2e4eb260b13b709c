/*
 * The formats, beside the problem (problem.h, which has the conventions):
 * JSON of tables, tasks and plans on jansson (json.c; the plan format belongs
 * to the planner), trace files (trace_file.c), synthetic tables and
 * benchmark tasks (synth.c, task.c), and traces synthesised from a table's
 * features (trace_from_table.c).  Includes the problem room only.
 */
#ifndef SHARDD_PLANNER_FORMATS_H
#define SHARDD_PLANNER_FORMATS_H

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

/*
 * DreamShard's split of a pool of tables (neuroshard.md 9): the indices
 * shuffled with the seed, the first half the training pool (*train), the
 * rest the test pool (*test); tasks drawn from each (task_generate()) never
 * share a table.  Both arrays are owned by the caller (free()).  Returns 0,
 * SD_EINVAL (fewer than 2 tables) or SD_ENOMEM.
 */
int task_split_pool(const struct table *pool, size_t npool, uint64_t seed,
                    struct table **train, size_t *ntrain, struct table **test,
                    size_t *ntest);

/* Training, validation and held-out tasks of one pool (owned). */
struct task_split {
    struct task *train, *val, *test;
    size_t ntrain, nval, ntest;
};

/*
 * The task sets a placement policy is trained, validated and gated on:
 * the pool split with p->seed (task_split_pool()), then task_generate()
 * with p's bounds of ntrain and nval tasks from the training half and ntest
 * from the test half, each set with its own seed derived from p->seed
 * (p->count is ignored).  *out is released with task_split_free().  Returns
 * 0, SD_EINVAL (d says why) or SD_ENOMEM.
 */
int task_generate_split(const struct task_params *p, size_t ntrain, size_t nval,
                        size_t ntest, const struct table *pool, size_t npool,
                        struct task_split *out, struct sd_diag *d);
void task_split_free(struct task_split *s); /* NULL-safe */

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
 * Reads every task of a tasks file ({"tasks": [{"tables": [...]}, ...]},
 * other keys ignored) into a new array (*out, *n; task_array_free(); the
 * tasks' source is NULL).  Errors as json_read_tables(), the message naming
 * the task.
 */
int json_read_tasks(const char *path, struct task **out, size_t *n,
                    struct sd_diag *d);
int json_parse_tasks(const char *buf, size_t len, struct task **out, size_t *n,
                     struct sd_diag *d);

/*
 * Reads a plan in the json_plan() format back against its tables: the
 * device count is the length of "devices" (required, 1..TOPO_DEVICES_MAX),
 * every table name must be one of `tables`, and shards keep their device and
 * columns.  Costs in the file are ignored.  The plan is not validated here
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
 *    "bwd_comm", "total"}}], "tables": [{"name", "shards": [{"device",
 *    "col_offset", "col_width"}]}]}, and after plan_run() (search.h)
 *    "explanation": {"critical_device", "drivers": [{"table", "col_offset",
 *    "col_width", "cost_ms"}], "lower_bound_ms", "gap"} and, for
 *    neuroshard, "search":
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

#endif /* SHARDD_PLANNER_FORMATS_H */
