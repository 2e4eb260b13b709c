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
 * the lookups are dealt to bags at random (a bag's length is then about
 * Poisson), or with a pooling factor of exactly 1 (one-hot), one a bag in
 * a random order.  Deterministic for (t, nbags,
 * seed).  A table with pooling factor 0 or all-zero bins gets empty bags.
 * On success *out owns its arrays (trace_destroy()).  Returns 0, SD_EINVAL or
 * SD_ENOMEM.
 */
int trace_from_table(const struct table *t, int64_t nbags, uint64_t seed,
                     struct trace *out);

/* ------------------------------------------------------------------------ */
/* Access histograms from statistics (derive.c)                             */

/*
 * The popularity skew assumed where an input gives neither bins nor an
 * exponent.  Fitted: over the 856 tables of `shardctl gen-tables --seed 0`
 * (matched to the public DLRM statistics, neuroshard.md 1.4), deriving each
 * table's bins from its own rows and pooling factor at the batch its bins
 * were computed at (65,536 bags), s = 2.6 gives the smallest mean L1
 * distance to the computed bins (0.62; s = 1.05 gives 1.15, s = 2.0 0.72).
 * Real tables draw from a vocabulary far smaller than their rows, which a
 * steep law over all rows imitates best.
 */
#define DERIVE_ZIPF_DEFAULT 2.6
#define DERIVE_ZIPF_MAX     8.0

/*
 * The expected 17-bin access histogram of one batch when no trace exists:
 * nbags bags of pooling_factor lookups on average, each lookup an
 * independent draw of a row, the row of popularity rank i drawn with
 * probability i^-s / H(rows, s) (a Zipf law over all the rows; s = 0 is
 * uniform).  Each row's count is taken as Poisson with mean nbags x
 * pooling_factor x its probability; bins[k] is the expected number of rows
 * read a bin-k number of times (problem.h) over the expected number of rows
 * read at all.  Exact over the 1,024 most popular rows, Simpson's rule in
 * log rank beyond: a few thousand Poisson windows whatever rows is, and
 * deterministic.  A pooling factor of 0 gives all-zero bins (a table never
 * read).  Returns 0, or SD_EINVAL for rows outside [1, TABLE_ROWS_MAX],
 * nbags < 1, a pooling factor outside [0, TABLE_PF_MAX] or s outside
 * [0, DERIVE_ZIPF_MAX].  Thread-safe.
 */
int bins_derive(int64_t rows, double pooling_factor, int64_t nbags, double s,
                double bins[TABLE_NBINS]);

/* ------------------------------------------------------------------------ */
/* Inputs: tables as a user describes them (input.c)                        */

/*
 * What a note says.  Inputs are never silently half-read: a value assumed,
 * a constraint that changed the search, one read but not honoured yet, and
 * a key shardd does not know each leave a note that every output shows.
 */
enum note_kind {
    NOTE_ASSUMED = 1, /* a value the input left out was assumed */
    NOTE_APPLIED,     /* a constraint changed how the plan is searched */
    NOTE_NOT_APPLIED, /* read, but the planner cannot honour it yet */
    NOTE_UNKNOWN,     /* a key or value shardd does not know: not read */
};

#define NOTE_FIELD_MAX 48
#define NOTE_TEXT_MAX  256

struct input_note {
    enum note_kind kind;
    char table[TABLE_NAME_MAX]; /* the table it is about; "" for all */
    char field[NOTE_FIELD_MAX]; /* as in the input, within the table:
                                 * "bins", "constraints.cache_params" */
    char text[NOTE_TEXT_MAX];   /* one line for people */
};

/* A list of notes: zero-initialise it, input_notes_destroy() it. */
struct input_notes {
    size_t n, cap;
    struct input_note *v; /* owned */
};

/* Appends a note (table and field may be NULL for ""; text cut to fit).
 * Returns 0 or SD_ENOMEM. */
int input_notes_add(struct input_notes *ns, enum note_kind kind,
                    const char *table, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Appends a copy of every note of src.  0 or SD_ENOMEM. */
int input_notes_append(struct input_notes *dst, const struct input_notes *src);
void input_notes_destroy(struct input_notes *ns);
/* "assumed", "applied", "not applied", "unknown"; "?" for others. */
const char *note_kind_name(enum note_kind k);

/* TorchRec's sharding types (ShardingType values), as bits. */
enum trec_sharding_bit {
    TREC_ST_DATA_PARALLEL = 1u << 0,
    TREC_ST_TABLE_WISE = 1u << 1,
    TREC_ST_COLUMN_WISE = 1u << 2,
    TREC_ST_ROW_WISE = 1u << 3,
    TREC_ST_TABLE_ROW_WISE = 1u << 4,
    TREC_ST_TABLE_COLUMN_WISE = 1u << 5,
    TREC_ST_GRID_SHARD = 1u << 6,
};

/* TorchRec's compute kernels (EmbeddingComputeKernel values), as bits. */
enum trec_kernel_bit {
    TREC_CK_DENSE = 1u << 0,
    TREC_CK_FUSED = 1u << 1,
    TREC_CK_FUSED_UVM = 1u << 2,
    TREC_CK_FUSED_UVM_CACHING = 1u << 3,
    TREC_CK_QUANT = 1u << 4,
    TREC_CK_QUANT_UVM = 1u << 5,
    TREC_CK_QUANT_UVM_CACHING = 1u << 6,
    TREC_CK_KEY_VALUE = 1u << 7,
    TREC_CK_SSD_VIRTUAL_TABLE = 1u << 8,
    TREC_CK_DRAM_VIRTUAL_TABLE = 1u << 9,
};

/*
 * Keys of TorchRec's descriptions that shardd reads but does not model yet;
 * tables_input_resolve() notes each one given.
 */
enum trec_key {
    TREC_KEY_DEVICE_GROUP = 1u << 0,        /* constraints.device_group */
    TREC_KEY_OUTPUT_DTYPE = 1u << 1,        /* constraints.output_dtype */
    TREC_KEY_KEY_VALUE_PARAMS = 1u << 2,    /* constraints.key_value_params */
    TREC_KEY_VIRTUAL_TABLE = 1u << 3,       /* use_virtual_table */
    TREC_KEY_POST_PRUNING = 1u << 4,        /* num_embeddings_post_pruning */
    TREC_KEY_BUCKETS = 1u << 5,             /* total_num_buckets */
    TREC_KEY_ENFORCE_HBM = 1u << 6,         /* constraints.enforce_hbm true */
    TREC_KEY_STOCHASTIC_ROUNDING = 1u << 7, /* ... stochastic_rounding true */
    TREC_KEY_BOUNDS_CHECK = 1u << 8,        /* ... bounds_check_mode */
};

/* A sharding type's or kernel's bit from its name ("table_wise",
 * "fused"; TorchRec's spelling), or 0 when unknown.  The names of a set of
 * bits, comma-separated, into buf (cut to size). */
uint32_t trec_sharding_parse(const char *s);
uint32_t trec_kernel_parse(const char *s);
/* The memory tiers (bits 1 << enum table_tier) of a set of TREC_CK_* bits:
 * fused, fused_uvm and fused_uvm_caching; 0 when it has none of them. */
uint32_t trec_kernel_tiers(uint32_t kernels);
void trec_sharding_names(uint32_t bits, char *buf, size_t size);
void trec_kernel_names(uint32_t bits, char *buf, size_t size);

/*
 * TorchRec's data_type ("FP32", "fp16", "DataType.FP16") as a dtype.
 * FP32, FP16, BF16 and INT8 are planned; returns 0, SD_EUNSUPPORTED for
 * TorchRec's other precisions (INT4, INT2, UINT8: not planned yet) or
 * SD_EINVAL for anything else.
 */
int trec_dtype_parse(const char *s, enum table_dtype *out);
/* The precisions trec_dtype_parse() plans, for messages that refuse one. */
#define TREC_DTYPES_PLANNED "FP32, FP16, BF16 and INT8"
/* A dtype under TorchRec's name ("FP32", "FP16", "BF16", "INT8"). */
const char *trec_dtype_name(enum table_dtype dt);

/*
 * TorchRec's ParameterConstraints of one table, as read.  What the planner
 * honours today (the pooling factor; table_wise only on every table) is
 * applied by tables_input_resolve(); the rest is kept here for the sharding
 * schemes and memory tiers still to come, and noted.
 */
struct trec_constraints {
    bool given;               /* the input had constraints for the table */
    uint32_t sharding_types;  /* TREC_ST_* bits; 0: not given (any) */
    uint32_t compute_kernels; /* TREC_CK_* bits; 0: not given (any) */
    int64_t min_partition;    /* 0: not given */
    int32_t npooling;         /* pooling_factors given (features) */
    int32_t nnum_poolings;    /* num_poolings given */
    int64_t batch_size;       /* batch_sizes: the one every feature has; 0
                               * not given; -1 they differ */
    bool is_weighted;
    bool cache_params;          /* given (caching is a memory tier) */
    double cache_load_factor;   /* cache_params.load_factor; 0: not given */
    uint32_t keys;              /* TREC_KEY_* bits of keys given */
    char output_dtype[16];      /* as given, when not FP32 */
    char device_group[32];      /* as given (cut to fit) */
    char bounds_check_mode[32]; /* as given (cut to fit) */
};

/* Where the tables of an input came from. */
enum tables_form {
    TABLES_FORM_AUTO = 0, /* for readers: detect it */
    TABLES_FORM_NATIVE,   /* shardd's: name, rows, dim, pooling_factor,
                           * bins (optional), dtype, zipf_exponent */
    TABLES_FORM_TORCHREC, /* TorchRec's EmbeddingBagConfig and
                           * ParameterConstraints */
};

/* "auto", "shardd" (or "native") and "torchrec"; SD_EINVAL otherwise. */
int tables_form_parse(const char *s, enum tables_form *out);
const char *tables_form_name(enum tables_form f);

/* What an input said about a table beyond struct table. */
struct table_spec {
    bool has_bins;     /* false: tables_input_resolve() derives them */
    double zipf_s;     /* the exponent to derive with; 0: DERIVE_ZIPF_DEFAULT */
    bool torchrec;     /* read from TorchRec's form: the fields below */
    int32_t nfeatures; /* feature_names (0: not given) */
    struct trec_constraints c;
};

/*
 * Tables as read, before they can be planned: tables[i] has everything but
 * the bins of a table whose spec lacks them (zero until resolved), and a
 * TorchRec table's pooling factor is already the sum over its features.
 */
struct tables_input {
    enum tables_form form; /* never AUTO once read */
    size_t n;
    struct table *tables;     /* owned, n */
    struct table_spec *specs; /* owned, n */
    struct input_notes notes; /* owned: the reader's, then resolve's */
    bool whole_tables;        /* resolved: every table allows only
                               * table_wise, so none is split */
};

/* n zeroed tables and specs in *in (zeroed first).  0 or SD_ENOMEM. */
int tables_input_init(struct tables_input *in, enum tables_form form, size_t n);
/* Releases what in owns and zeroes it; NULL-safe. */
void tables_input_destroy(struct tables_input *in);

/*
 * TorchRec constraints as per-table constraints (plan_options.constraints),
 * for tables that have them and no constraint of that kind in *cons yet
 * (NULL: made here, owned by the caller, when any table has them): the
 * sharding types as schemes (table_column_wise counts as column_wise), the
 * compute kernels as tiers (trec_kernel_tiers()) and cache_params'
 * load_factor as the cache load factor where caching is allowed (one
 * outside (0, 1) is left out here; tables_input_resolve() refuses it).
 * Where a constraint in *cons wins, the notes that said the TorchRec one
 * was applied say it was not, and why.  0 or SD_ENOMEM.
 */
int tables_input_constraints(struct tables_input *in,
                             struct table_constraint **cons);

/*
 * Makes the tables plannable at a batch of `batch` bags (the job's global
 * batch), adding a note for each thing assumed or left unapplied:
 *  - bins: derived (bins_derive()) for every table without them, with the
 *    exponent given or DERIVE_ZIPF_DEFAULT: "bins of t7 derived: Zipf
 *    s=2.6 (the default) over 4,000,000 rows, 65,536 bags x 12.0 lookups";
 *  - TorchRec's form: a pooling factor not given (TorchRec's default 1.0),
 *    several features summed into one bag; sharding types: whole_tables
 *    when every table allows only table_wise, a note for each table whose
 *    types cannot be honoured; compute kernels: the tiers applied (noted
 *    unless fused alone), kernels without a tier noted as not applied;
 *    cache_params: its load_factor in (0, 1) (else SD_EINVAL) applied
 *    where caching is allowed; min_partition, batch sizes other than
 *    `batch`, is_weighted and the TREC_KEY_* keys: not applied yet, and
 *    why;
 * then checks every table (table_validate_all()).  Call it once.  Returns
 * 0, SD_EINVAL (d names the table and field) or SD_ENOMEM.
 */
int tables_input_resolve(struct tables_input *in, int64_t batch,
                         struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* The dlrm_datasets layout of traces (dlrm.c)                              */

/*
 * One batch of lookups of many tables in the layout TorchRec and FBGEMM
 * users dump (facebookresearch/dlrm_datasets; docs/trace-format.md), read
 * from the folder dir, one table at a time, into tables with their
 * features: dir/indices (every lookup, the tables one after the other),
 * dir/offsets (tables x nbags + 1 entries, into indices; required) and
 * optionally dir/lengths (tables x nbags bag lengths, checked against the
 * offsets), each NAME.npy (NumPy's format: '<i4', '<i8', '<u4' or '<u8', C
 * order) or NAME.bin (raw little-endian; the widths are those under which
 * offsets start at 0 and end at the number of indices).  The batch comes
 * from a 2-D lengths.npy [tables, nbags], else from nbags (> 0).  Table t is
 * named "table_%04d", has dim `dim` and max(100, largest index + 1) rows
 * (gen_dlrm_data's rule), which two notes say.  *out (owned, free()) and *n
 * on success.  Errors: SD_EIO (a file missing or unreadable), SD_EFORMAT
 * (d names the file, table and field), SD_EINVAL (no batch, a bad dim),
 * SD_ENOMEM.  notes may be NULL.
 */
int dlrm_read_tables(const char *dir, int64_t nbags, int32_t dim,
                     struct table **out, size_t *n, struct input_notes *notes,
                     struct sd_diag *d);

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
 * Reads tables as a user describes them, for plan and estimate, into *out
 * (initialised here; tables_input_destroy() it; tables_input_resolve() it
 * before planning):
 *  - shardd's form as above, bins optional (derived when absent, with an
 *    optional "zipf_exponent" in (0, DERIVE_ZIPF_MAX]), a tasks file too;
 *  - TorchRec's form: {"tables": [EmbeddingBagConfig as JSON: "name",
 *    "num_embeddings", "embedding_dim", "feature_names"?, "data_type"?
 *    (FP32, FP16; the other precisions are refused until they are
 *    planned), "pooling"? (SUM, MEAN), and shardd's "bins"? or
 *    "zipf_exponent"?], "constraints"?: {TABLE: ParameterConstraints as
 *    JSON}}; null fields count as absent.
 * form TABLES_FORM_AUTO tells them apart ("constraints", or
 * "num_embeddings" / "embedding_dim" in the first table, mean TorchRec's).
 * Keys shardd does not know are noted (NOTE_UNKNOWN) in out->notes, never
 * silently dropped.  Errors as json_read_tables(); a constraint naming no
 * table is SD_EINVAL.
 */
int json_read_tables_input(const char *path, size_t task_index,
                           enum tables_form form, struct tables_input *out,
                           struct sd_diag *d);
int json_parse_tables_input(const char *buf, size_t len, size_t task_index,
                            enum tables_form form, struct tables_input *out,
                            struct sd_diag *d);

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

/*
 * The same with the notes of the input (may be NULL or empty: then the
 * text is exactly the one above) as a last key, "notes": [{"kind":
 * "assumed" | "applied" | "not_applied" | "unknown", "table", "field",
 * "message"}].
 */
char *json_tables_noted(const struct table *tables, size_t n,
                        const struct input_notes *notes);
char *json_plan_noted(const struct plan *p, const struct table *tables,
                      const struct input_notes *notes);
char *json_plan_torchrec_noted(const struct plan *p, const struct table *tables,
                               const struct topology *t, const char *module,
                               const struct input_notes *notes);

#endif /* SHARDD_PLANNER_FORMATS_H */
