/*
 * The formats, beside the problem (problem.h, which has the conventions):
 * JSON of tables, tasks and plans on jansson (json.c; the plan format belongs
 * to the planner), trace files (trace_file.c), synthetic tables and
 * benchmark tasks (synth.c, task.c), and traces synthesised from a table's
 * features (trace_from_table.c).  Includes the problem room only.
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
 * What synth_trace() draws for table i before its lookups: its name, rows,
 * dim and expected pooling factor (0 for a table never accessed), dtype
 * fp32, all bins 0.  Cheap: no lookups are made.  0 or SD_EINVAL.
 */
int synth_table_shape(const struct synth_params *p, size_t i,
                      struct table *out);

/*
 * Generates p->count tables: trace i is made, its features computed, and the
 * trace dropped.  Table i is named "table_%04zu" and gets a dim drawn from
 * {4, 8, .., 128}.  Uses up to `threads` worker threads (1 = none); the
 * result does not depend on the thread count.  *out is owned by the caller
 * (free()).  Returns 0, SD_EINVAL or SD_ENOMEM.
 */
int synth_tables(const struct synth_params *p, unsigned threads,
                 struct table **out);

/* ------------------------------------------------------------------------ */
/* Shared by the generators (synth.c, families.c); not for other rooms      */

/*
 * A bijection of [0, rows): a keyed invertible mixer of k-bit words (k the
 * bit length of rows - 1), cycle-walked until it lands below rows.
 */
struct perm {
    uint64_t rows;
    uint64_t mask;
    uint64_t a, b, c; /* a and b odd */
    int shift;
};

/* Keys p for [0, rows) from r. */
void synth__perm_init(struct perm *p, uint64_t rows, struct rng *r);
uint64_t synth__perm_apply(const struct perm *p, uint64_t x);

/* Zipf sampling of ranks 1..n with exponent s > 0, mapped to rows. */
struct zipf_rank {
    double edge;   /* H(k + 0.5): the upper end of rank k's interval */
    double accept; /* u >= accept is accepted */
    int64_t row;   /* the row rank k is mapped to */
};

struct zipf {
    double s;
    double n;
    double h_x1;     /* H(1.5) - 1 */
    double h_n;      /* H(n + 0.5) */
    double s_accept; /* quick-acceptance distance */
    size_t nhead;    /* ranks 1 .. nhead are tabulated */
    struct zipf_rank *head;
    size_t nguide;
    uint32_t *guide;    /* nguide buckets over (h_x1, head[nhead-1].edge] */
    double guide_scale; /* buckets per unit of u */
    const struct perm *perm;
};

/*
 * Prepares sampling of ranks 1..n with exponent s, mapped to rows by perm
 * (borrowed: it must outlive z), with up to nhead ranks tabulated.
 * Returns 0 or SD_ENOMEM; release with synth__zipf_destroy().
 */
int synth__zipf_init(struct zipf *z, double s, uint64_t n, size_t nhead,
                     const struct perm *perm);
void synth__zipf_destroy(struct zipf *z);
/* A row: rank k in [1, n] drawn, then mapped through the permutation. */
int64_t synth__zipf_sample(const struct zipf *z, struct rng *r);

/* The ranks worth tabulating for a trace of n lookups. */
size_t synth__head_size(int64_t nindices);

/*
 * Bag lengths: geometric on {0, 1, ..} with mean pf, by inversion.  Fills
 * offsets[0 .. nbags] and returns the total.
 */
int64_t synth__draw_offsets(struct rng *r, double pf, int64_t nbags,
                            int64_t *offsets);

/* ------------------------------------------------------------------------ */
/* Table families (families.c)                                              */

/*
 * Families of synthetic tables for profiling, pre-training and task sets
 * that test a cost model on tables of shapes it never saw (families.c says
 * each family's laws and what is checked of them).  dlrm is synth.c's
 * generator, the base; FAMILY_MIX names a pool of all of them in turn.
 */
enum table_family {
    FAMILY_DLRM = 0, /* synth.c: the 856 DLRM tables' statistics */
    FAMILY_ZIPF,     /* Zipf over every row, exponent 0.5 .. 2.0 */
    FAMILY_EXP,      /* exponential popularity */
    FAMILY_UNIFORM,  /* near-uniform over 50-100 % of the rows */
    FAMILY_BIMODAL,  /* a hot set and cold rows */
    FAMILY_SEQ,      /* long sequences: pooling factor 64 .. 384 */
    FAMILY_ONEHOT,   /* one id per bag */
    FAMILY_COUNT
};
#define FAMILY_MIX      FAMILY_COUNT /* every family, in turn */
#define FAMILY_NAME_MAX 16           /* bytes, NUL included */
#define FAMILY_ROWS_MIN 100
#define FAMILY_ROWS_MAX 2000000 /* one cpu core holds a shard of them */

/* "dlrm", .., "onehot", "mix" for FAMILY_MIX; "?" for anything else. */
const char *family_name(int family);
/* A family name (or "mix") to its number; SD_EINVAL listing the names. */
int family_parse(const char *s, int *out, struct sd_diag *d);
/* "a,b,c" into out[FAMILY_MIX + 1] (true for each named; "mix" included);
 * SD_EINVAL for an empty or unknown name. */
int family_parse_list(const char *s, bool out[FAMILY_MIX + 1],
                      struct sd_diag *d);
/* The family of table i of a pool of `family` (FAMILY_MIX: i in turn). */
int family_of_index(int family, size_t i);

/*
 * A sample's family label (store_sample.family: names joined by '+', ""
 * for none) as a mask, bit f for family f.  SD_EINVAL for a name that is
 * not a family's.
 */
int family_label_mask(const char *label, uint32_t *mask);
/*
 * The group a label is reported under: its family's number for one family,
 * FAMILY_MIX for several, FAMILY_OTHER for none or an unknown name.
 */
#define FAMILY_OTHER (FAMILY_MIX + 1)
int family_label_group(const char *label);
/* family_name() with "other" for FAMILY_OTHER. */
const char *family_group_name(int group);

struct family_params {
    int family;   /* enum table_family or FAMILY_MIX */
    size_t count; /* tables to make */
    uint64_t seed;
    int64_t batch_size; /* bags per generated trace */
};

/* FAMILY_MIX, 856 tables, seed 0, batch 65536. */
void family_params_default(struct family_params *p);

enum family_law {
    FAMILY_LAW_ZIPF = 0,
    FAMILY_LAW_EXP,
    FAMILY_LAW_UNIFORM,
    FAMILY_LAW_BIMODAL,
};

enum family_bags {
    FAMILY_BAGS_GEOMETRIC = 0, /* geometric lengths, mean pf */
    FAMILY_BAGS_RANGE,         /* uniform in [ceil(pf/2), floor(3pf/2)] */
    FAMILY_BAGS_ONE,           /* exactly one id */
};

/* What is drawn for a table before its lookups are. */
struct family_shape {
    int family;
    int64_t rows;
    int32_t dim;
    enum table_dtype dtype;
    enum family_bags bags;
    double pf; /* expected bag length */
    enum family_law law;
    double zipf_s;     /* zipf: exponent */
    double exp_scale;  /* exp: mean rank L (rows) */
    uint64_t vocab;    /* rows the law draws from (uniform: a subset) */
    uint64_t hot_rows; /* bimodal: the hot set's size */
    double hot_share;  /* bimodal: its share of the lookups */
};

/*
 * The shape of table i of family (not dlrm, not mix) for a seed.
 * Deterministic.  Returns 0 or SD_EINVAL.
 */
int family_draw_shape(int family, uint64_t seed, size_t i,
                      struct family_shape *out);

/*
 * Table i of a pool of p->family: its trace (*out owns its arrays:
 * trace_destroy()), and its shape when `shape` is not NULL (for dlrm only
 * family, rows, dim and pf are set).  Deterministic for (p->seed, family,
 * index within the family).  Returns 0, SD_EINVAL or SD_ENOMEM.
 */
int family_trace(const struct family_params *p, size_t i, struct trace *out,
                 struct family_shape *shape);

/*
 * Table i of a pool before its lookups are made: name, rows, dim, dtype and
 * the expected pooling factor of its shape (synth_table_shape() for dlrm),
 * all bins 0.  What a sampler needs to draw shards (sizes and work) without
 * making a trace per table.  0 or SD_EINVAL.
 */
int family_table_shape(const struct family_params *p, size_t i,
                       struct table *out);

/* family_table_shape() of every table of a pool into *out (owned:
 * free()).  0, SD_EINVAL or SD_ENOMEM. */
int family_shapes(const struct family_params *p, struct table **out);

/*
 * Generates p->count tables of a pool (family_trace(), features computed,
 * dtype the shape's) on up to `threads` threads; the result does not depend
 * on the thread count.  *out is owned by the caller (free()).  Returns 0,
 * SD_EINVAL or SD_ENOMEM.
 */
int family_tables(const struct family_params *p, unsigned threads,
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
char *json_plan_torchrec(const struct plan *p, const struct table *tables,
                         const struct topology *t, const char *module);

#endif /* SHARDD_PLANNER_FORMATS_H */
