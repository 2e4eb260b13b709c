/*
 * The cost models, above the problem (problem.h, which has the conventions):
 * NeuroShard's neural compute model (inference, the model file and the
 * embedded default model: net.c), its training (train.c) and the sample
 * shards it is trained on (sample.c), and TorchRec's analytic perf and
 * storage estimators (trec.c).  Includes the problem room only.
 */
#ifndef SHARDD_PLANNER_MODELS_H
#define SHARDD_PLANNER_MODELS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "problem/problem.h"
#include "shardd/err.h"

/* ------------------------------------------------------------------------ */
/* Neural compute cost model (net.c, train.c)                               */

/*
 * NeuroShard's compute model (neuroshard.md 5.1): every table of a shard goes
 * through the same MLP 20 -> 128 -> 32 (ReLU after both layers), the 32-d
 * latents are summed over the shard, and a head 32 -> 64 -> 1 (ReLU between)
 * gives the shard's cost.  How inputs are transformed and the output
 * activated is the model's own (struct net_io, format 2); shardd's trainer
 * makes models with format 1's fixed choice, which differs from the
 * original in two deliberate ways:
 *  - inputs are table_features() with the pooling factor as log1p(pf) and
 *    rows as log(rows), then z-scored with constants stored in the model;
 *  - the head's output goes through softplus, so costs are always positive
 *    yet grow linearly (not exponentially) for shards larger than any it
 *    was trained on, and training fits relative error, not raw ms.
 * NeuroShard's released model (identity inputs, no activation) is held
 * exactly by format 2.  Parameters are one float array, row-major
 * [out][in] per layer, in this order (offsets below).  Format 3 adds
 * derived inputs after the 20 (struct net_extras; `train --features v2`):
 * their columns of the first layer are kept apart (cost_net.xw), so the
 * array and its offsets are the same for every model.
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

/*
 * Derived inputs (format 3): quantities a table's lookups physically cost
 * by, computed from the same table and the model's batch, each appended
 * after the 20 inputs (already transformed as its comment says) and
 * z-scored like them.  Row bytes are table_row_bytes() of the table's dtype
 * at the width; lookups L = pooling factor x the model's batch; unique rows
 * U = table_unique_rows() at that batch.
 */
enum net_extra {
    NET_X_ELEM_BYTES = 1,   /* bytes per element of the dtype: 4, 2, 1 */
    NET_X_LOOKUPS = 2,      /* log(1 + L) */
    NET_X_UNIQUE = 3,       /* log(1 + U) */
    NET_X_UNIQUE_BYTES = 4, /* log(1 + U x row bytes) */
    NET_X_TABLE_BYTES = 5,  /* log(rows x row bytes) */
    NET_X_LOG_DIM = 6,      /* log(width) */
    NET_X_LOOKUP_BYTES = 7, /* log(1 + L x row bytes) */
    /*
     * The physical prior's terms (format 4; "A physical prior" in
     * docs/models.md): what one table does in a step of B bags, untransformed,
     * each z-scored with mean 0.  They feed reserved units alone
     * (NET_PRIOR_H1()), whose weights are the prior's non-negative fitted
     * coefficients, so the unit is the table's physical ms; see
     * NET_ACT_PRIOR for how the head uses it.
     */
    NET_X_PHYS_TABLES = 8,        /* 1 */
    NET_X_PHYS_BAGS = 9,          /* B */
    NET_X_PHYS_BAG_COLS = 10,     /* B x width */
    NET_X_PHYS_LOOKUPS = 11,      /* L */
    NET_X_PHYS_LOOKUP_COLS = 12,  /* L x width */
    NET_X_PHYS_UNIQUE_BYTES = 13, /* U x row bytes */
    /* The re-reads of rows past the L2 (NET_PRIOR_L2_BYTES): (L - U) x row
     * bytes x (U x row bytes - L2) / (U x row bytes), 0 when they fit. */
    NET_X_PHYS_L2_REREADS = 14,
    NET_X_PHYS_HALF_COLS = 15, /* L x width of a 16-bit table, else 0 */
    /* A table's share of the pair term: L / (L + NET_PRIOR_PAIR_PF x B),
     * near 1 for long bags, 1/5 for one-hot ones.  Where a model has it,
     * the count unit reads it instead of phys_tables (NET_ACT_PRIOR). */
    NET_X_PHYS_PAIR_TABLES = 16,
    NET_X_COUNT
};
#define NET_XMAX           16 /* derived inputs of one model */
#define NET_PRIOR_L2_BYTES (2 << 20)
/* The pooling factor at which a table counts half in the pair term: fitted
 * on the families held out one at a time (docs/models.md, "The pair term
 * weighed by lookups"). */
#define NET_PRIOR_PAIR_PF 4.0
/* Whether derived input id is one of the physical prior's terms. */
#define NET_X_IS_PHYS(id)                                                      \
    ((id) >= NET_X_PHYS_TABLES && (id) <= NET_X_PHYS_PAIR_TABLES)
/* The derived inputs of `train --features v2`, in their order. */
#define NET_EXTRAS_V2                                                          \
    NET_X_ELEM_BYTES, NET_X_LOOKUPS, NET_X_UNIQUE, NET_X_UNIQUE_BYTES,         \
        NET_X_TABLE_BYTES
/* `train --features v3`: v2's, then the physical prior's terms. */
#define NET_EXTRAS_V3                                                          \
    NET_EXTRAS_V2, NET_X_PHYS_TABLES, NET_X_PHYS_BAGS, NET_X_PHYS_BAG_COLS,    \
        NET_X_PHYS_LOOKUPS, NET_X_PHYS_LOOKUP_COLS, NET_X_PHYS_UNIQUE_BYTES,   \
        NET_X_PHYS_L2_REREADS, NET_X_PHYS_HALF_COLS
/* `train --features v4`: v3's, then the pair term weighed by lookups. */
#define NET_EXTRAS_V4 NET_EXTRAS_V3, NET_X_PHYS_PAIR_TABLES
#define NET_IN_MAX    (NET_IN + NET_XMAX) /* inputs of any model */

/* A model's derived inputs, in their order after the 20 (n 0: none, the
 * original inputs alone). */
struct net_extras {
    int32_t n;
    uint8_t id[NET_XMAX]; /* enum net_extra */
};

/*
 * The model file's newest format version (docs/model-format.md): 1 holds a
 * compute model with format 1's fixed inputs and output; 2 adds per-input
 * transforms, the output activation, communication models and a notice; 3
 * adds derived inputs (struct net_extras) after the 20; 4 the physical
 * prior (NET_ACT_PRIOR).  All are read; net_serialize() writes the oldest
 * that holds the model.
 */
#define NET_FORMAT_VERSION 4
#define NET_PROFILE_MAX    128
#define NET_NOTICE_MAX     2048 /* bytes, terminating NUL included */

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

/* What an input goes through before it is z-scored. */
enum net_transform {
    NET_TF_IDENTITY = 0,
    NET_TF_LOG = 1,   /* log(x); 0 where x <= 0 */
    NET_TF_LOG1P = 2, /* log(1 + x); 0 where x <= 0 */
    NET_TF_COUNT
};

/* What a network's output goes through to become milliseconds. */
enum net_activation {
    NET_ACT_NONE = 0,     /* the raw output (NeuroShard's); a time below 0
                           * is read as 0 */
    NET_ACT_SOFTPLUS = 1, /* log(1 + e^x) */
    /*
     * squareplus(x) x the shard's physical ms (format 4, the physical prior):
     * the net learns the ratio of the time to the prior's.  The prior rides
     * in reserved units whose weights are fixed (net_prior_check()), three
     * of each layer (NET_PRIOR_*(k)): k = 0, the base, reads the prior's
     * inputs with their fitted coefficients as weights, so it is the
     * table's physical ms; k = 1 the table count (phys_tables, or
     * phys_pair_tables where the model has it: a table weighed by its
     * lookups) and k = 2 its bag columns (phys_bag_cols).  Each has a
     * hidden unit, a latent that copies it and a head unit that copies the
     * latents' sum (k = 1 scaled by the pair coefficient), so a shard's z
     * holds its base, count and bag columns whatever tables the search adds
     * and takes, and its physical ms is z[base] + z[count] x z[cols]: the
     * pair term, tables x bag columns, is what the output's [bags][all
     * columns] layout costs each table of a wide shard.  No other unit
     * reads the reserved ones or the prior's inputs, and W4 ignores them.
     * net_head_raw() is then the cost itself.
     */
    NET_ACT_PRIOR = 2,
    NET_ACT_COUNT
};
#define NET_PRIOR_UNITS  3
#define NET_PRIOR_BASE   0
#define NET_PRIOR_COUNT  1
#define NET_PRIOR_COLS   2
#define NET_PRIOR_H1(k)  (NET_H1 - 1 - (k))
#define NET_PRIOR_LAT(k) (NET_LAT - 1 - (k))
#define NET_PRIOR_H2(k)  (NET_H2 - 1 - (k))

/*
 * A compute model's inputs and output.  custom false (a zeroed struct, a
 * format-1 file, what net_train() makes): format 1's choice, log1p of the
 * pooling factor, log of rows, identity otherwise, z-scored as
 * (x - mean) / (std + 1e-6), softplus out.  custom true: transform[] (enum
 * net_transform) per input, eps in place of 1e-6 (NeuroShard stores its
 * stds with the 1e-6 added: 0 there) and the activation.
 */
struct net_io {
    bool custom;
    uint8_t transform[NET_IN];
    uint8_t activation;
    float eps;
};

/* Format 1's choice written out (custom true, the same effect). */
void net_io_format1(struct net_io *io);

/*
 * Learned communication models (comm.c; neuroshard.md 4, 5.2): plain MLPs
 * with a ReLU after every layer but the last, for one device count N.  The
 * backward one maps the devices' dim sums (N inputs) to each device's
 * backward all-to-all ms; the forward one maps the dim sums and each
 * device's wait before the exchange (2N inputs: dims, then waits) to each
 * device's forward all-to-all ms, the wait for the slowest device included.
 * Inputs are z-scored, (x - mean) / (std + eps), with the net's constants.
 * Dim sums are columns at the set's batch_size.
 */
#define COMM_NETS_MAX    4    /* in one model set */
#define COMM_LAYERS_MAX  8    /* linear layers */
#define COMM_WIDTH_MAX   1024 /* units of any layer */
#define COMM_DEVICES_MAX 64
#define COMM_IN_MAX      (2 * COMM_DEVICES_MAX)
#define COMM_PARAMS_MAX  49152 /* floats of one net */

enum comm_dir {
    COMM_FWD = 0,
    COMM_BWD = 1,
};

struct comm_net {
    int32_t dir;      /* enum comm_dir */
    int32_t ndevices; /* N */
    int32_t nlayers;  /* linear layers, 1 .. COMM_LAYERS_MAX */
    /* sizes[0] inputs (2N forward, N backward), sizes[nlayers] = N */
    int32_t sizes[COMM_LAYERS_MAX + 1];
    int32_t activation; /* enum net_activation of the outputs */
    float eps;          /* of the z-score: 0 imported, 1e-6 trained */
    float mean[COMM_IN_MAX];
    float std[COMM_IN_MAX];
    /* Its parameters: the set's comm_p + off, per layer W then b; W is
     * row-major [out][in] in the file (torch's) and [in][out] in memory,
     * so that a product runs down contiguous columns. */
    size_t off;
    size_t nparams;
    struct net_metrics metrics;
};

/* Parameters of an MLP of `nlayers` layers of these sizes. */
size_t comm_net_nparams(int32_t nlayers, const int32_t *sizes);

/*
 * A model set: the compute model and, optionally, communication models and
 * a notice (provenance and license of imported models; shown wherever the
 * set is).  One allocation (the comm parameters are its flexible tail), so
 * a set is released with free(); a cost_net declared on the stack holds no
 * comm models.
 */
struct cost_net {
    char profile[NET_PROFILE_MAX]; /* the hardware profile it answers for */
    int64_t batch_size;            /* the batch its samples were measured at */
    /* z-score of the transformed features: the 20, then the derived ones */
    float mean[NET_IN_MAX];
    float std[NET_IN_MAX];
    float p[NET_NPARAMS];
    /* The derived inputs (format 3) and their columns of the first layer:
     * xw[o * NET_XMAX + j] weighs derived input j in unit o (zero past
     * x.n); W1 in p holds the 20 others' columns. */
    struct net_extras x;
    float xw[NET_H1 * NET_XMAX];
    struct net_metrics metrics;
    struct net_io io;
    char notice[NET_NOTICE_MAX]; /* "" when none */
    int32_t ncomm;
    struct comm_net comm[COMM_NETS_MAX];
    size_t ncomm_p; /* floats in comm_p */
    float comm_p[];
};

/* A zeroed set without comm models (free()); NULL when memory is short. */
struct cost_net *net_alloc(void);

/*
 * Adds a copy of comm net c with parameters p (c->nparams floats; c->off is
 * ignored) to *m, which may move (realloc).  Returns 0, SD_EINVAL (a field
 * of c out of range or inconsistent, a parameter not finite, COMM_NETS_MAX
 * already, or the set has one for the same direction and device count; d
 * names it) or SD_ENOMEM (*m unchanged).
 */
int net_add_comm(struct cost_net **m, const struct comm_net *c, const float *p,
                 struct sd_diag *d);

/* Comm net c's parameters in the file's layout ([out][in] weights) into p
 * (c->nparams floats), and from it into m's memory layout. */
void comm_net_params_get(const struct cost_net *m, const struct comm_net *c,
                         float *p);
void comm_net_params_set(struct cost_net *m, const struct comm_net *c,
                         const float *p);

/* The comm net of m for a direction and device count; NULL when none. */
const struct comm_net *net_comm_find(const struct cost_net *m,
                                     enum comm_dir dir, int32_t ndevices);

/*
 * Runs comm net c of set m on raw inputs in[c->sizes[0]] and writes
 * out[c->ndevices] ms.  Float arithmetic, as the original's fp32.
 */
void comm_net_run(const struct cost_net *m, const struct comm_net *c,
                  const double *in, double *out);

/* The effective transform of input i, output activation and z-score
 * epsilon of m. */
enum net_transform net_io_transform(const struct cost_net *m, int i);
enum net_activation net_io_activation(const struct cost_net *m);
float net_io_eps(const struct cost_net *m);

/* The inputs of m: NET_IN plus its derived ones. */
int net_nin(const struct cost_net *m);

/*
 * m's compute parameters packed as one [out][in] layer after another, W1
 * of net_nin(m) columns (each row the 20 inputs' weights, then the derived
 * ones'), then b1 .. b4: the model file's layout and the device kernels'
 * (kernels.h) and the trainer's.  net_packed_nparams(): NET_NPARAMS +
 * NET_H1 x the derived inputs; net_params_pack() writes that many floats
 * into out, net_params_unpack() reads them back into m (m->x set first).
 */
size_t net_packed_nparams(const struct cost_net *m);
void net_params_pack(const struct cost_net *m, float *out);
void net_params_unpack(struct cost_net *m, const float *in);

/* The transformed, normalised input of a table cut to `cols` columns: the
 * 20 of NeuroShard alone (what a placement policy encodes). */
void net_input(const struct cost_net *m, const struct table *t, int32_t cols,
               float x[NET_IN]);
/* The same with m's derived inputs after them: net_nin(m) floats. */
void net_input_all(const struct cost_net *m, const struct table *t,
                   int32_t cols, float x[NET_IN_MAX]);
/* The derived input `id` (enum net_extra) of a table cut to `cols` columns
 * at `batch` bags, transformed as its comment says; 0 for an unknown id. */
double net_extra_value(int id, const struct table *t, int32_t cols,
                       int64_t batch);
/* Whether derived input `id` reads the table's dtype (its element bytes):
 * what a memo of m's latents must key on (true for an unknown id). */
bool net_extra_reads_dtype(int id);
/* The name of derived input id ("lookups", ...), or NULL; and the id of a
 * name, or 0. */
const char *net_extra_name(int id);
int net_extra_parse(const char *name);
/*
 * The derived inputs a name gives: "v1" none (NeuroShard's 20 alone), "v2"
 * NET_EXTRAS_V2, or a comma-separated list of net_extra_name()s.  0, or
 * SD_EINVAL with d naming what is wrong.
 */
int net_extras_parse(const char *s, struct net_extras *out, struct sd_diag *d);

/* Checks derived inputs: n in [0, NET_XMAX], every id known, none twice.
 * 0, or SD_EINVAL with d naming the field after `what` ("what.id[2] 9 is
 * unknown"). */
int net_extras_check(const struct net_extras *x, const char *what,
                     struct sd_diag *d);
/* Format 1's transformed features (before z-scoring): what the mean/std of
 * a model net_train() makes are of. */
void net_features(const struct table *t, int32_t cols, float x[NET_IN]);
/* m's transformed features (before z-scoring): net_nin(m) floats. */
void net_features_of(const struct cost_net *m, const struct table *t,
                     int32_t cols, float x[NET_IN_MAX]);

/* The 32-d latent of one table cut to `cols` columns. */
void net_latent(const struct cost_net *m, const struct table *t, int32_t cols,
                float lat[NET_LAT]);
/* The same from the model's input (net_input_all(): net_nin(m) floats). */
void net_latent_of_input(const struct cost_net *m, const float x[NET_IN_MAX],
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
/* log(1 + e^x), format 1's output activation. */
double net_softplus(double x);
/* (x + sqrt(x^2 + 4)) / 2 (Barron 2021), a prior model's ratio
 * (NET_ACT_PRIOR): positive, smooth and monotone like softplus, about x
 * for large x, and a square root where softplus takes an exp and a log,
 * paid on every score the search makes. */
double net_squareplus(double x);
/* m's output activation of a raw head output: ms. */
double net_activate(const struct cost_net *m, double raw);
/* The head before its activation: cost = net_activate(raw), a monotone
 * map, so comparisons of shards can skip it. */
double net_head_raw(const struct cost_net *m, const float z[NET_H2]);
/* z += p (sign > 0) or z -= p, then net_head_raw(m, z), in one pass over z
 * (the search's step: a piece placed on or taken off a device); the same
 * z and result as the two apart. */
double net_head_step(const struct cost_net *m, float z[NET_H2],
                     const float p[NET_H2], int sign);
/* net_head_raw(m, t) of t = z + add[0] + add[1] - sub[0] - sub[1] (NULL
 * terms left out; each column summed in that order), in one pass and
 * without writing t (the local search's trial of a move or swap). */
double net_head_delta(const struct cost_net *m, const float z[NET_H2],
                      const float *const add[2], const float *const sub[2]);

struct net_memo; /* below: the memo of projected latents */
/* Predicted ms of one shard (items' tables cut to their cols); _memo
 * through mm (NULL: none, as net_shard_ms()). */
double net_shard_ms(const struct cost_net *m, const struct shard_item *items,
                    size_t n);
double net_shard_ms_memo(const struct cost_net *m, struct net_memo *mm,
                         const struct shard_item *items, size_t n);
/* The same for a shard given as whole tables, each at its own dim (the form
 * of a measured sample). */
double net_tables_ms(const struct cost_net *m, const struct table *tables,
                     size_t n);
/* A prior model's physical ms of that shard: what its prediction would be
 * with the net's ratio 1 (net_tables_ms() = squareplus(raw) x this).  NAN
 * when m has no prior (net_has_prior()). */
double net_tables_prior_ms(const struct cost_net *m, const struct table *tables,
                           size_t n);

/*
 * The format version net_serialize() writes for m: 4 when it has the
 * physical prior, 3 when it has derived inputs, else 1 when format 1 holds it
 * (format 1's inputs and output, no comm models, no notice), else 2.
 */
int net_format_version(const struct cost_net *m);

/*
 * Serialises m into a new buffer (*out, free()) of *len bytes: the model
 * file format (version net_format_version(m)), little-endian, with a
 * CRC-32 over everything before it.  Returns 0 or SD_ENOMEM.
 */
int net_serialize(const struct cost_net *m, void **out, size_t *len);

/*
 * Parses a model file image (format 1 to 4) into *out (owned: free()).
 * Returns 0, or SD_EFORMAT (not a model file, a damaged one: bad magic,
 * size or checksum, a field out of range, non-finite weights; d names the
 * field) or SD_ENEWER (a newer format version), or SD_ENOMEM.
 */
int net_parse(const void *buf, size_t len, struct cost_net **out,
              struct sd_diag *d);

/* Reads / writes a model file (write: to a temporary file, then rename). */
int net_read_file(const char *path, struct cost_net **out, struct sd_diag *d);
int net_write_file(const char *path, const struct cost_net *m,
                   struct sd_diag *d);

/* Whether m is a physical-prior model (NET_ACT_PRIOR, format 4), and
 * whether derived inputs x make one (a physical term among them). */
bool net_has_prior(const struct cost_net *m);
bool net_extras_have_prior(const struct net_extras *x);

/*
 * Checks a prior model's reserved units (NET_ACT_PRIOR says which): each
 * reserved hidden unit reads its inputs alone, with weights >= 0 and no
 * bias; the reserved latents and head units copy the unit before them;
 * nothing else reads the prior's inputs or units.  Also that m has prior
 * inputs exactly when its activation is NET_ACT_PRIOR.  0, or SD_EINVAL
 * with d naming the first weight that breaks it.
 */
int net_prior_check(const struct cost_net *m, struct sd_diag *d);

/* The prior's coefficient of physical term id (ms per unit of the term, as
 * NET_X_PHYS_* defines it) in m; 0 where m has no such input.  And the
 * pair term's: ms per table x bag column of the whole shard. */
double net_prior_coef(const struct cost_net *m, int id);
double net_prior_pair_coef(const struct cost_net *m);

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
 * The reference profile: NeuroShard's released models (models/
 * neuroshard-released/, MIT; compute and 4-device comm, V100, batch
 * 65536) converted to models/neuroshard-v100.sdcn and compiled in.  It
 * answers only when a request names its profile, never as a default.
 * Parsed on first use; NULL if the image is damaged (d says why).  Shared,
 * read-only, never freed.
 */
#define NET_REFERENCE_PROFILE "neuroshard/V100/65536"
const struct cost_net *net_reference(struct sd_diag *d);

/*
 * The compiled-in model that answers for `profile` alone: the reference
 * (NET_REFERENCE_PROFILE) or one trained on a GPU, models/
 * cuda-h200-default.sdcn (NET_H200_PROFILE: 16,166 samples profiled on an
 * H200, docs/gpu.md), which a server on that GPU serves by default until
 * it has a model of its own.  NULL for any other profile (and for the
 * default model's: net_embedded()), or where the image is damaged (d says
 * why, when given).  Shared, read-only, never freed.
 */
#define NET_H200_PROFILE "cuda/NVIDIA H200/4096"
const struct cost_net *net_compiled(const char *profile, struct sd_diag *d);

/*
 * A memo of one model's projected latents (net_project(net_latent())), the
 * part of scoring that depends on a table and a width alone: scoring a
 * shard then costs its 64-wide head, not an MLP per table.  A search, the
 * plan's evaluation, its explanation and its bound all ask for the same
 * (table, width) pairs, and clients resend the same tables: a memo kept
 * with a model answers them once (memo.c).  Keyed by the model's input
 * (compared exactly), bounded to `entries` (rounded up to a multiple of 4;
 * older entries are replaced), safe to share between threads.  It answers
 * for the model it was made with (borrowed: it must not outlive it); asked
 * about another, it computes and stores nothing.
 */
struct net_memo;
struct net_memo_stats {
    uint64_t hits, misses;
    size_t entries, capacity;
};
/* NULL where m is NULL, entries is 0 or memory is short. */
struct net_memo *net_memo_new(const struct cost_net *m, size_t entries);
/* A memo for one plan of ntables tables: room for each at a few widths
 * (the scheme pass, the searches and the plan's evaluation and explanation
 * ask for these); a plan that overflows it only recomputes. */
struct net_memo *net_memo_for_tables(const struct cost_net *m, size_t ntables);
void net_memo_free(struct net_memo *mm); /* NULL: nothing */
void net_memo_stats(const struct net_memo *mm, struct net_memo_stats *out);
/* W3 * the latent of t cut to `cols` columns, through mm (NULL: none). */
void net_projected(const struct cost_net *m, struct net_memo *mm,
                   const struct table *t, int32_t cols, float proj[NET_H2]);

/*
 * A cost_model answering with m (borrowed).  Costs are for the topology's
 * batch: m's prediction is scaled by batch_size / m->batch_size (the
 * fused op's time is linear in the lookups), and the name says so.  memo
 * (borrowed, NULL after init) may be set to one made for m.  cm.ctx points
 * at ncm: it must not move while cm is used.
 */
struct net_cost_model {
    struct cost_model cm;
    const struct cost_net *net;
    struct net_memo *memo;
    char name[NET_PROFILE_MAX + 16];
};
void net_cost_model_init(struct net_cost_model *ncm, const struct cost_net *m);

/*
 * A comm_model (problem.h) answering with m's learned forward and backward
 * comm nets for t's device count (comm.c).  Dim sums are scaled by
 * t->batch_size / m->batch_size, the same bytes at the nets' batch (the
 * name says so); waits are ms.  Returns true and fills ncm when m has both
 * nets for t->ndevices, false (ncm untouched) when not: the caller keeps
 * the alpha-beta model.  cm.ctx points at ncm and cm.name into it: it must
 * not move while cm is used, nor m be freed.
 */
struct net_comm_model {
    struct comm_model cm;
    const struct cost_net *net;
    const struct comm_net *fwd, *bwd;
    double dim_scale; /* t's batch / the set's */
    char name[NET_PROFILE_MAX + 96];
};
bool net_comm_model_init(struct net_comm_model *ncm, const struct cost_net *m,
                         const struct topology *t);

/* ------------------------------------------------------------------------ */
/* Ensembles: K models, every prediction with a spread (ensemble.c)         */

/*
 * K nets of one profile and batch (the members): member 0 is the plain
 * model of a seed, members 1 .. K-1 bootstraps with their own streams
 * (train_params.member).  Owns its members.
 */
#define NET_ENSEMBLE_MAX 16
struct net_ensemble {
    int32_t k;
    struct cost_net *m[NET_ENSEMBLE_MAX];
};
void net_ensemble_free(struct net_ensemble *e); /* NULL: nothing */

/*
 * The ensemble file (docs/model-format.md): "SDCE", version, K, each
 * member's model file image with its length, a CRC-32.  serialize: *out
 * (free()) of *len bytes; an ensemble of one is its member's model file
 * (what readers from before ensembles take); 0, SD_EINVAL (K out of range)
 * or SD_ENOMEM.
 * parse: an ensemble file, or a model file as an ensemble of one; every
 * member must answer for member 0's profile and batch; *out owned
 * (net_ensemble_free()); 0, SD_EFORMAT, SD_ENEWER or SD_ENOMEM with d set.
 * read / write: the same through a file (write: a temporary, then rename).
 */
int net_ensemble_serialize(const struct net_ensemble *e, void **out,
                           size_t *len);
int net_ensemble_parse(const void *buf, size_t len, struct net_ensemble **out,
                       struct sd_diag *d);
int net_ensemble_read_file(const char *path, struct net_ensemble **out,
                           struct sd_diag *d);
/* The members an ensemble or model file holds, read from its first bytes
 * (12 are enough): 1 for a model file, 0 for neither (nothing checked past
 * the header: a listing's figure, not a parse). */
int32_t net_ensemble_members(const void *head, size_t len);
int net_ensemble_write_file(const char *path, const struct net_ensemble *e,
                            struct sd_diag *d);

/*
 * The q-quantile (q in [0, 1]) of v[0 .. k): linear between the order
 * statistics around position q (k - 1); q <= 0 the least, q >= 1 the
 * largest.  Sorts v.  0 for k < 1.
 */
double net_quantile(double *v, int32_t k, double q);

/* One prediction of an ensemble: member 0's, the chosen quantile of the
 * members', and the members' range. */
struct net_spread {
    double point;    /* member 0 */
    double quantile; /* net_quantile(members, q) */
    double lo, hi;   /* the least and the largest member */
};

/* The ms of one shard by every member (at the ensemble's batch), each
 * through memos[i] (memos NULL, or e->k memos made for member i, or NULL). */
void net_ensemble_shard(const struct net_ensemble *e,
                        struct net_memo *const *memos,
                        const struct shard_item *items, size_t n, double q,
                        struct net_spread *out);

/*
 * A cost_model answering with the q-quantile of the members' costs of a
 * device's shard, scaled to the topology's batch as net_cost_model's.  q
 * 0.5 is the members' median, 0.9 a cautious plan's cost.  e borrowed;
 * ecm must not move while used.
 */
struct net_ensemble_cost_model {
    struct cost_model cm;
    const struct net_ensemble *e;
    double q;
    /* NULL (init's), or e->k memos, memos[i] made for member i (or NULL),
     * borrowed: set after init so that a plan's tables are scored once per
     * member (a robust plan evaluates every member's plan with all K). */
    struct net_memo *const *memos;
    char name[NET_PROFILE_MAX + 32];
};
void net_ensemble_cost_model_init(struct net_ensemble_cost_model *ecm,
                                  const struct net_ensemble *e, double q);

/*
 * A plan's spread under an ensemble: per device the least and largest
 * compute ms over the members (lo[r], hi[r]), and the least and largest
 * plan cost, each member scoring the whole plan (plan_evaluate()).
 */
struct plan_spread {
    int32_t ndevices;
    int32_t members;
    double *lo, *hi; /* owned, one block: plan_spread_free() */
    double cost_lo, cost_hi;
};
/* p evaluated or not (it is not changed); memos (NULL: none) holds e->k
 * memos, memos[i] made for member i (or NULL), so that a daemon scores
 * resent tables once per member.  member0_scored: p was evaluated with a
 * model of member 0's parameters, on these tables, topology and optimizer
 * (a plan of the model the ensemble was made with), so its devices' costs
 * stand for member 0's, not evaluated again.  Once *stop (NULL: never) is
 * set, checked before each member, the spread is given up: out->members 0,
 * returned 0 (a stopping daemon answers without it).  Returns 0, SD_EINVAL
 * or SD_ENOMEM; *out is filled on success. */
int net_ensemble_plan_spread(const struct net_ensemble *e,
                             struct net_memo *const *memos,
                             const struct plan *p, bool member0_scored,
                             const struct table *tables, size_t ntables,
                             const struct topology *t, enum optimizer opt,
                             const atomic_bool *stop, struct plan_spread *out);
void plan_spread_free(struct plan_spread *s);

/*
 * The ensemble committed with shardd (models/cpu-default.sdce, docs/
 * models.md), parsed on first use: NULL when it is damaged or its member 0
 * is not net_embedded() (d says why).  Shared, read-only, never freed.
 */
const struct net_ensemble *net_ensemble_embedded(struct sd_diag *d);

/*
 * The compiled-in ensemble whose member 0 is model m, parameter for
 * parameter, with two members or more: the embedded ensemble beside the cpu
 * default, models/cuda-h200-default.sdce beside the H200's model
 * (net_compiled()).  NULL for any other model (a stored or file model has
 * its own, or none).  Shared, read-only, never freed.
 */
const struct net_ensemble *net_ensemble_compiled(const struct cost_net *m);

/* One measured shard for training. */
struct train_sample {
    const struct table *tables; /* the shard; each table's dim is its width */
    size_t ntables;
    double ms; /* measured, > 0 */
};

/*
 * The matrix products of training, as a hook: C = alpha op(A) op(B) +
 * beta C on row-major float matrices, op(X) = X or X^T, with the arguments
 * and meaning of cblas_sgemm(CblasRowMajor, ...).  train.c makes every
 * product through one (the table MLP's over all a minibatch's tables, the
 * head's over its shards: eight per step), so a device can do them while
 * the planner stays pure: net_gemm_cblas (the default) is the reference
 * CBLAS, and profiler/ makes one from a kernels/ device (cuBLAS on a GPU).
 * sgemm returns 0, or a negative SD_E* code that stops training with that
 * code (a device that failed); ctx is the hook's.
 */
struct net_gemm {
    const char *name;
    int (*sgemm)(void *ctx, bool trans_a, bool trans_b, int m, int n, int k,
                 float alpha, const float *a, int lda, const float *b, int ldb,
                 float beta, float *c, int ldc);
    void *ctx;
};
extern const struct net_gemm net_gemm_cblas;

#define TRAIN_DECAY_BY_SAMPLES (-1.0)
#define TRAIN_DECAY_SAMPLES    4000
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
     * and lr * weight_decay < 1.  Default TRAIN_DECAY_BY_SAMPLES: 1.0
     * under TRAIN_DECAY_SAMPLES samples, 0.3 from there (what the best of
     * them was on the Zen 5 VM's profile at 1,000 and 3,000 samples, and
     * at 5,000 and 10,000: docs/models.md, "Weight decay by sample
     * count"). */
    double weight_decay;
    /* Called after every epoch; returning non-zero stops training (the best
     * weights so far are kept).  May be NULL. */
    int (*progress)(void *ctx, int32_t epoch, int32_t max_epochs,
                    double train_loss, double val_mape);
    void *ctx;
    /* Where the matrix products run; NULL: net_gemm_cblas.  Borrowed for
     * the call.  Another sgemm rounds differently, so the weights differ
     * from the default's by fp32 rounding that the epochs amplify
     * (docs/gpu.md has the tolerance). */
    const struct net_gemm *gemm;
    /*
     * An ensemble's member (0: a plain model).  Every member of a seed has
     * the same train / validation / test split (the seed's); member k > 0
     * trains on a bootstrap of the training split (as many draws with
     * replacement) and starts from weights and epoch orders of its own
     * stream, rng_derive(seed, k).  Member 0 is the plain model, bit for
     * bit.
     */
    uint32_t member;
    /* When not NULL, receives each sample's split (n entries, in the
     * caller's order): TRAIN_SPLIT_*. */
    uint8_t *split;
    /* The model's derived inputs (n 0, the default: NeuroShard's 20
     * alone, a model of format 1). */
    struct net_extras extras;
};
enum train_split {
    TRAIN_SPLIT_TRAIN = 0,
    TRAIN_SPLIT_VAL = 1,
    TRAIN_SPLIT_TEST = 2,
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
 * batch_size < 1; d says which), SD_ENOMEM, or the code of a p->gemm
 * product that failed (nothing is returned then).
 */
int net_train(const struct train_params *p, const struct train_sample *s,
              size_t n, const char *profile, int64_t batch_size,
              struct cost_net **out, struct sd_diag *d);

/* Checks train_params: SD_EINVAL naming the field out of range. */
int train_params_check(const struct train_params *p, struct sd_diag *d);
/* The weight decay training on n samples with p uses: p's own, or by the
 * sample count (TRAIN_DECAY_BY_SAMPLES). */
double train_decay(const struct train_params *p, size_t n);

/* One measured exchange for training comm models (a store comm sample). */
struct comm_sample {
    int32_t ndevices;
    const int32_t *dim_sum; /* ndevices each */
    const double *wait_ms;  /* the forward's wait input: how late the device
                             * was (its compute skew; the profiler's sleep) */
    const double *fwd_ms;   /* measured, waiting included */
    const double *bwd_ms;
};

/*
 * Trains a comm net of direction dir for `ndevices` devices on the samples
 * of that device count (others are skipped) with NeuroShard's comm
 * architecture (inputs -> 128 -> 64 -> 32 -> 16 -> N) through the compute
 * model's training path (train_comm.c): p's seed, split, Adam with weight
 * decay, patience and progress; the loss on log ms, softplus outputs.  *c
 * gets the net (its metrics: MAPE over samples and devices), *params
 * (owned: free()) its c->nparams floats in the file's layout, for
 * net_add_comm().  Returns 0, SD_EINVAL (bad params, fewer than 10 samples
 * of the count, a time not > 0; d says which) or SD_ENOMEM.
 */
int comm_train(const struct train_params *p, const struct comm_sample *s,
               size_t n, enum comm_dir dir, int32_t ndevices,
               struct comm_net *c, float **params, struct sd_diag *d);

/* Mean absolute percentage error (fraction) of m over samples. */
double net_mape(const struct cost_net *m, const struct train_sample *s,
                size_t n);

/*
 * Errors of predictions pred[i] against measurements meas[i] > 0 (n >= 1):
 * the mean, median and 90th percentile of |pred - meas| / meas, and the
 * median of (pred - meas) / meas (> 0: predicted more than measured; a
 * drift of the whole machine shows here, scatter does not).  Percentiles
 * are order statistics: the element at floor(q x (n - 1)) of the sorted
 * errors (the median of an even count is the upper middle one).  Returns 0,
 * SD_EINVAL (n 0) or SD_ENOMEM.
 */
struct net_errors {
    size_t n;
    double mape;
    double median;
    double p90;
    double signed_median;
};
int net_errors(const double *pred, const double *meas, size_t n,
               struct net_errors *out);

/* ------------------------------------------------------------------------ */
/* PyTorch checkpoints and NeuroShard's models (torch.c, import.c)          */

/*
 * A PyTorch checkpoint (torch.save()'s zip format: <dir>/data.pkl, a pickle
 * of protocol 2, and one raw little-endian storage <dir>/data/<key> per
 * tensor), read without torch: the top-level dict's float32 tensors,
 * integers and lists of integers, nested dicts flattened to keys joined by
 * "." ("state_dict.hidden.0.weight").  The unpickler takes exactly the
 * opcodes torch.save() of a dict of tensors and numbers uses, the globals
 * collections.OrderedDict, torch._utils._rebuild_tensor_v2 and
 * torch.FloatStorage, and refuses anything else, naming the opcode or
 * global and its offset: nothing in a file is ever called.
 */
#define TORCH_KEY_MAX  128
#define TORCH_DIMS_MAX 4

enum torch_kind {
    TORCH_TENSOR = 0, /* contiguous float32, row-major */
    TORCH_INT,
    TORCH_INTS, /* a list or tuple of integers */
};

struct torch_entry {
    char key[TORCH_KEY_MAX];
    enum torch_kind kind;
    int32_t ndim; /* tensor: shape[0 .. ndim) */
    int64_t shape[TORCH_DIMS_MAX];
    size_t n;   /* tensor elements, or integers */
    float *f;   /* tensor: n floats (NULL before torch_read() loads them) */
    int64_t *i; /* TORCH_INT: one, TORCH_INTS: n */
    /* where a tensor's floats are: storage key, first element */
    char storage[32];
    int64_t storage_offset;
};

struct torch_ckpt {
    size_t n;
    struct torch_entry *e;
};

/*
 * Unpickles a data.pkl image into *out (torch_free()); tensors are described,
 * not loaded (f NULL).  Returns 0, SD_EFORMAT (an opcode, global or value
 * outside the subset, a malformed pickle; d names it and its offset) or
 * SD_ENOMEM.
 */
int torch_unpickle(const void *pkl, size_t len, struct torch_ckpt **out,
                   struct sd_diag *d);

/*
 * Reads a checkpoint from a zip image / a file: the pickle, then each
 * tensor's floats from its storage (sizes, bounds and zip CRCs checked).
 * Returns 0, SD_EFORMAT (d names the entry or field), SD_ENOENT / SD_EIO
 * (the file) or SD_ENOMEM.
 */
int torch_load(const void *zip, size_t len, struct torch_ckpt **out,
               struct sd_diag *d);
int torch_read(const char *path, struct torch_ckpt **out, struct sd_diag *d);
void torch_free(struct torch_ckpt *c); /* NULL-safe */

/* The entry of `key`, or NULL. */
const struct torch_entry *torch_find(const struct torch_ckpt *c,
                                     const char *key);

/*
 * NeuroShard's models (neuroshard.md 5.1-5.4) as one model set: the
 * compute checkpoint (ComputeCostNet: t_hidden 20-128-32, c_hidden
 * 32-64-1) with identity inputs and no output activation, and optionally
 * the forward and backward comm checkpoints (CommCostNet of one device
 * count), exactly as trained.  profile, batch_size and notice (may be NULL)
 * go into the set.  Returns 0, SD_EINVAL (a checkpoint that is not the
 * architecture it should be, or the comm pair of different device counts;
 * d names the file's key and what was expected) or SD_ENOMEM.  *out:
 * free().
 */
int net_import_neuroshard(const struct torch_ckpt *compute,
                          const struct torch_ckpt *comm_fw,
                          const struct torch_ckpt *comm_bw, const char *profile,
                          int64_t batch_size, const char *notice,
                          struct cost_net **out, struct sd_diag *d);
/* DreamShard's placement policy (policy.c, policy_train.c)                 */

/*
 * DreamShard's policy network (neuroshard.md 9), placing whole tables one
 * by one, costliest first (by the compute model's cost of the table alone),
 * each onto the device with the highest logit among those with room.  For
 * device r and the table about to be placed:
 *  - a table encoder 20 -> 128 -> 32 (ReLU, ReLU) over the compute model's
 *    own input (net_input(): the same 20 features, z-scored with the
 *    compute model's constants), summed over the tables already on r and
 *    scaled by devices / tables of the task, so that a device holding its
 *    share of the tables looks the same at 4 devices and at 128;
 *  - POL_NCOST cost features of r's shard now and with the table added, as
 *    the compute model and the topology's alpha-beta exchange estimate
 *    them, times in units of the task's mean load per device (policy.c
 *    lists them) -> 32 -> 32 (ReLU, ReLU);
 *  - the two 32-d parts concatenated -> 32 (ReLU) -> 1: the logit.
 * Illegal devices (no room) get no logit: a softmax over the legal ones is
 * the policy, its argmax the placement.
 * Parameters are one float array, row-major [out][in] per layer, in this
 * order (offsets below).
 */
#define POL_IN      NET_IN
#define POL_H1      128
#define POL_LAT     32
#define POL_NCOST   10
#define POL_C1      32
#define POL_C2      32
#define POL_HH      32
#define POL_E1W     0
#define POL_E1B     (POL_E1W + POL_H1 * POL_IN)
#define POL_E2W     (POL_E1B + POL_H1)
#define POL_E2B     (POL_E2W + POL_LAT * POL_H1)
#define POL_C1W     (POL_E2B + POL_LAT)
#define POL_C1B     (POL_C1W + POL_C1 * POL_NCOST)
#define POL_C2W     (POL_C1B + POL_C1)
#define POL_C2B     (POL_C2W + POL_C2 * POL_C1)
#define POL_H1W     (POL_C2B + POL_C2)
#define POL_H1B     (POL_H1W + POL_HH * (POL_LAT + POL_C2))
#define POL_H2W     (POL_H1B + POL_HH)
#define POL_H2B     (POL_H2W + POL_HH)
#define POL_NPARAMS (POL_H2B + 1) /* 10,337 */

/* The policy file's format version (docs/model-format.md). */
#define POLICY_FORMAT_VERSION 1

/* How a policy was trained and gated. */
struct policy_metrics {
    uint64_t seed;
    int32_t iterations;     /* Adam steps run */
    int32_t best_iteration; /* whose weights were kept (0: the initial) */
    int32_t train_devices;  /* devices of the training tasks */
    int32_t train_tasks;
    int32_t val_tasks;
    int32_t gate_tasks; /* held-out tasks of the gate; 0: not gated */
    /* On the validation tasks: the policy's mean plan cost over the
     * model-cost LPT's (policy_lpt_cost()); on the gate's held-out tasks:
     * its mean plan cost over size_lookup_greedy's.  0: not measured. */
    double val_ratio;
    double gate_ratio;
};

struct policy_net {
    /* The compute model it was trained against: its profile and
     * policy_model_crc().  It answers for that model only. */
    char profile[NET_PROFILE_MAX];
    uint32_t model_crc;
    struct policy_metrics metrics;
    float p[POL_NPARAMS];
};

/* One training or held-out task: tables to place (borrowed). */
struct policy_task {
    const struct table *tables;
    size_t ntables;
};

/*
 * The identity of a compute model a policy is bound to: CRC-32 of its
 * z-score constants and parameters as little-endian floats (the bytes of
 * its file, without the header).
 */
uint32_t policy_model_crc(const struct cost_net *m);

/*
 * Checks that pn was trained against m (profile and parameters); SD_EINVAL
 * with d saying which model it was trained for and what to do.
 */
int policy_check_model(const struct policy_net *pn, const struct cost_net *m,
                       struct sd_diag *d);

/*
 * The policy file: serialise (a new buffer, free()) and parse (*out owned,
 * free()).  Parse returns 0, SD_EFORMAT (not a policy file, damaged, another
 * architecture, an empty profile, non-finite values: d names the field),
 * SD_ENEWER (a newer format version) or SD_ENOMEM.
 */
int policy_serialize(const struct policy_net *pn, void **out, size_t *len);
int policy_parse(const void *buf, size_t len, struct policy_net **out,
                 struct sd_diag *d);
int policy_read_file(const char *path, struct policy_net **out,
                     struct sd_diag *d);
int policy_write_file(const char *path, const struct policy_net *pn,
                      struct sd_diag *d);

/*
 * The policy committed with shardd (models/cpu-default.sdpol), trained
 * against the embedded compute model; parsed on first use; NULL if the
 * image is damaged (d says why).  Shared, read-only, never freed.
 */
const struct policy_net *policy_embedded(struct sd_diag *d);

/*
 * The compiled-in policy trained against compute model m (its profile and
 * policy_model_crc()): policy_embedded() for the embedded cpu model,
 * models/cuda-h200-default.sdpol for the H200's (net_compiled()); NULL for
 * any other model, or where the image is damaged (d says why, when given).
 * Shared, read-only, never freed.
 */
const struct policy_net *policy_compiled(const struct cost_net *m,
                                         struct sd_diag *d);

/*
 * The estimated MDP of one task (DreamShard's environment): the devices'
 * shards as the compute model and the alpha-beta exchange see them, the
 * order the tables are placed in, and the policy's features and logits.
 * Costs are at the topology's batch (the model's scaled linearly, as
 * net_cost_model does), so policy_env_cost() is plan_evaluate()'s plan cost
 * of the same placement.  tables, t, m, memo and pn are borrowed; pn may be
 * NULL (costs and features only).  Not thread-safe: one per thread.
 */
struct policy_env;

int policy_env_new(const struct policy_net *pn, const struct cost_net *m,
                   struct net_memo *memo, const struct table *tables, size_t n,
                   const struct topology *t, enum optimizer opt,
                   struct policy_env **out);
void policy_env_free(struct policy_env *e); /* NULL: nothing */
/* Empties every device (tables and their data kept). */
void policy_env_reset(struct policy_env *e);
/* Recomputes the tables' encoder latents after pn's parameters changed. */
void policy_env_reencode(struct policy_env *e);
/* The placing order: table indices, costliest alone first (ties: larger,
 * then lower index).  n entries, owned by e. */
const uint32_t *policy_env_order(const struct policy_env *e);
/*
 * Re-sorts the placing order largest first (ties: the order above), for a
 * second try when the first met a table with no room.  0 or SD_ENOMEM.
 */
int policy_env_order_by_size(struct policy_env *e);
/*
 * The cost features of placing table i on each device into x (ndevices x
 * POL_NCOST) and whether it fits (legal, ndevices).  Returns the number of
 * legal devices.
 */
int32_t policy_env_features(const struct policy_env *e, uint32_t i, float *x,
                            bool *legal);
/* The policy's logits from policy_env_features()' x (NAN where illegal). */
void policy_env_logits(const struct policy_env *e, const float *x,
                       const bool *legal, double *logit);
/* Places table i on device r (no check of room: callers mask). */
void policy_env_place(struct policy_env *e, uint32_t i, int32_t r);
/* The number of tables, and their compute-model inputs (n x POL_IN). */
size_t policy_env_ntables(const struct policy_env *e);
const float *policy_env_inputs(const struct policy_env *e);
/* Device of each table (-1: not placed), n entries, owned by e. */
const int32_t *policy_env_devices(const struct policy_env *e);
/* Bytes on device r. */
uint64_t policy_env_used(const struct policy_env *e, int32_t r);
/* The plan cost of the tables placed so far. */
double policy_env_cost(const struct policy_env *e);
/*
 * The model-cost LPT's device for table i: the legal device whose ready
 * time (compute + backward exchange) with it added is lowest (ties: less
 * memory used, lower id); -1 if none fits.  The fallback of a cut-short
 * inference and the reference of training's validation.
 */
int32_t policy_env_lpt(const struct policy_env *e, uint32_t i);
/*
 * The least loaded legal device for table i now: the lowest ready time
 * (compute as placed + backward exchange with the table's columns added),
 * ties as policy_env_lpt(); -1 if none fits.  No network runs, so a
 * stopped inference places the rest of a large task at once.
 */
int32_t policy_env_least_loaded(const struct policy_env *e, uint32_t i);
/* The legal device with the highest logit (ties: the lower id); -1 when
 * none is legal.  What the policy picks from policy_env_logits(). */
int32_t policy_argmax_legal(const double *logit, const bool *legal, int32_t n);

/*
 * Places every table of e in its order with the policy's argmax (pn) or,
 * pn NULL in e, the model-cost LPT, starting from what is placed already
 * (pinned tables, say); tables already placed are skipped.  SD_ENOSPACE
 * when a table fits nowhere (d names it).
 */
int policy_env_rollout(struct policy_env *e, struct sd_diag *d);

/* The mean over tasks of the policy's argmax plan cost over the model-cost
 * LPT's on n devices of mem_bytes (batch_size 0: the model's); a task
 * either cannot place counts as 2.  Returns 0 or SD_ENOMEM. */
int policy_lpt_ratio(const struct policy_net *pn, const struct cost_net *m,
                     const struct policy_task *tasks, size_t n,
                     int32_t ndevices, uint64_t mem_bytes, int64_t batch_size,
                     double *ratio);

struct policy_train_params {
    uint64_t seed;
    int32_t iterations; /* Adam steps, each on one task; default 600 */
    int32_t episodes;   /* sampled placements per step; 10 */
    int32_t ndevices;   /* devices of every training task; 4 */
    uint64_t mem_bytes; /* capacity of each device; 4 GiB */
    int64_t batch_size; /* the topology's batch; 0: the model's */
    double lr;          /* Adam step size, decayed linearly to lr / 10; 1e-3 */
    double entropy;     /* weight of the entropy bonus; 1e-3 */
    int32_t eval_every; /* validate every this many steps; 25 */
    /* Called after every validation; non-zero stops training (the best
     * weights so far are kept).  May be NULL. */
    int (*progress)(void *ctx, int32_t iteration, int32_t iterations,
                    double val_ratio);
    void *ctx;
};
void policy_train_params_default(struct policy_train_params *p);

/*
 * Trains a policy for compute model m with REINFORCE on the estimated MDP
 * (no hardware in the loop): every step takes a task of `train` (seeded),
 * samples `episodes` placements from the policy, scores each with the
 * model's plan cost, and follows the gradient of the log-probability of
 * every action weighted by its episode's return minus the step's mean
 * (divided by their spread), plus an entropy bonus; Adam.  Every
 * eval_every steps the argmax placements of `val` are scored against the
 * model-cost LPT and the best weights are kept.  Deterministic for a seed
 * with the reference BLAS.  *out (owned: free()) is bound to m
 * (policy_model_crc()); its metrics say how it was trained (gate_* are 0:
 * the gate is search.h's).  Returns 0, SD_EINVAL (no tasks, a task with no
 * table or an invalid one, bad params: d says which) or SD_ENOMEM.
 */
int policy_train(const struct policy_train_params *p, const struct cost_net *m,
                 const struct policy_task *train, size_t ntrain,
                 const struct policy_task *val, size_t nval,
                 struct policy_net **out, struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* Profiling samples (sample.c)                                             */

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
 * Every allowed dim, for tables of any shape: half the time one of
 * sample_dims, else 4 x u with u log-uniform in [1, 256] (every multiple of
 * 4 in [4, 1024], smaller ones likelier).
 */
int32_t sample_any_dim(struct rng *g);

/*
 * A pool whose tables come in groups (the table families of formats.h):
 * group[i] < ngroups is pool table i's.  A shard is drawn from one group
 * (uniform over the groups that have tables) or, with probability p_mixed,
 * from the whole pool; that choice is made once a shard, before the caps
 * below are tried.  Tables of a group whose bit is set in any_dims get
 * sample_any_dim() widths, the others sample_dims'.  A draw is kept when
 * its weights (rows x width x 4 bytes: the kernel's fp32, whatever the
 * dtype) are within max_bytes and, when max_work > 0, the sum of pooling
 * factor x width over its tables (the lookups' columns per bag) is within
 * max_work; else everything is drawn again.
 */
struct sample_groups {
    const uint8_t *group; /* npool entries */
    int ngroups;          /* at most 32 */
    uint32_t any_dims;    /* bit g: group g draws every allowed dim */
    double p_mixed;
    double max_work; /* 0: none */
};

/*
 * Draws a shard as above: k in [1, max_tables], k (table, dim) pairs,
 * written as for sample_draw_shard().  Returns 0, or SD_EINVAL (empty pool,
 * a group out of range, or no draw in 1000 met the caps).
 */
int sample_draw_grouped(struct rng *g, const struct table *pool, size_t npool,
                        const struct sample_groups *gr,
                        const struct sample_params *p, size_t *idx,
                        int32_t *dims, size_t *k);

/* ------------------------------------------------------------------------ */
/* TorchRec's analytic perf and storage estimator (trec.c)                  */

enum trec_sharding {
    TREC_TABLE_WISE = 0,
    TREC_COLUMN_WISE,
    TREC_ROW_WISE,
    TREC_TABLE_ROW_WISE,
    TREC_DATA_PARALLEL,
};

enum trec_kernel {
    TREC_KERNEL_FUSED = 0,         /* HBM_BW on cuda */
    TREC_KERNEL_DENSE,             /* 0.5 * HBM_BW on cuda */
    TREC_KERNEL_FUSED_UVM,         /* HBM_TO_DDR_BW / 10 */
    TREC_KERNEL_FUSED_UVM_CACHING, /* (clf HBM_BW + (1 - clf) HBM_TO_DDR_BW)
                                    * / 10 */
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
    double ddr_bw;   /* HBM<->host, bytes/ms; 0 = 32 GiB/s (the UVM kernels) */
    double cache_load_factor; /* fused_uvm_caching's clf, in (0, 1] */
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

#endif /* SHARDD_PLANNER_MODELS_H */
