/*
 * The neural compute cost model: inference, its inputs and output, and the
 * embedded default model (models.h; the file format is netfile.c's).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/models.h"
#include "models/models_int.h"
#include "problem/problem.h"

/* The images made from models/cpu-default.sdcn, models/neuroshard-v100.sdcn
 * and models/cuda-h200-default.sdcn at build time (embed.cmake). */
extern const unsigned char sd_embedded_model[];
extern const size_t sd_embedded_model_len;
extern const unsigned char sd_reference_model[];
extern const size_t sd_reference_model_len;
extern const unsigned char sd_h200_model[];
extern const size_t sd_h200_model_len;

/* The inputs format 1 transforms (table_features()' order). */
#define NET_IN_PF   TABLE_FEATURE_PF
#define NET_IN_ROWS TABLE_FEATURE_ROWS

void net_io_format1(struct net_io *io)
{
    memset(io, 0, sizeof(*io));
    io->custom = true;
    io->transform[NET_IN_PF] = NET_TF_LOG1P;
    io->transform[NET_IN_ROWS] = NET_TF_LOG;
    io->activation = NET_ACT_SOFTPLUS;
    io->eps = 1e-6f;
}

enum net_transform net_io_transform(const struct cost_net *m, int i)
{
    if (m->io.custom)
        return (enum net_transform)m->io.transform[i];
    return i == NET_IN_PF     ? NET_TF_LOG1P
           : i == NET_IN_ROWS ? NET_TF_LOG
                              : NET_TF_IDENTITY;
}

enum net_activation net_io_activation(const struct cost_net *m)
{
    return m->io.custom ? (enum net_activation)m->io.activation
                        : NET_ACT_SOFTPLUS;
}

float net_io_eps(const struct cost_net *m)
{
    return m->io.custom ? m->io.eps : 1e-6f;
}

void net_features(const struct table *t, int32_t cols, float x[NET_IN])
{
    table_features(t, cols, x);
    x[NET_IN_PF] = (float)log1p(t->pooling_factor);
    x[NET_IN_ROWS] = (float)log((double)(t->rows > 0 ? t->rows : 1));
}

int net_nin(const struct cost_net *m)
{
    return NET_IN + m->x.n;
}

size_t net_packed_nparams(const struct cost_net *m)
{
    return NET_NPARAMS + (size_t)NET_H1 * (size_t)m->x.n;
}

void net_params_pack(const struct cost_net *m, float *out)
{
    size_t nin = (size_t)net_nin(m);
    int o;

    for (o = 0; o < NET_H1; o++) {
        memcpy(out + (size_t)o * nin, m->p + NET_W1 + (size_t)o * NET_IN,
               NET_IN * sizeof(float));
        memcpy(out + (size_t)o * nin + NET_IN, m->xw + (size_t)o * NET_XMAX,
               (size_t)m->x.n * sizeof(float));
    }
    memcpy(out + NET_H1 * nin, m->p + NET_B1,
           (NET_NPARAMS - NET_B1) * sizeof(float));
}

void net_params_unpack(struct cost_net *m, const float *in)
{
    size_t nin = (size_t)net_nin(m);
    int o;

    for (o = 0; o < NET_H1; o++) {
        memcpy(m->p + NET_W1 + (size_t)o * NET_IN, in + (size_t)o * nin,
               NET_IN * sizeof(float));
        memcpy(m->xw + (size_t)o * NET_XMAX, in + (size_t)o * nin + NET_IN,
               (size_t)m->x.n * sizeof(float));
    }
    memcpy(m->p + NET_B1, in + NET_H1 * nin,
           (NET_NPARAMS - NET_B1) * sizeof(float));
}

static const char *const extra_names[NET_X_COUNT] = {
    [NET_X_ELEM_BYTES] = "elem_bytes",
    [NET_X_LOOKUPS] = "lookups",
    [NET_X_UNIQUE] = "unique_rows",
    [NET_X_UNIQUE_BYTES] = "unique_bytes",
    [NET_X_TABLE_BYTES] = "table_bytes",
    [NET_X_LOG_DIM] = "log_dim",
    [NET_X_LOOKUP_BYTES] = "lookup_bytes",
    [NET_X_PHYS_TABLES] = "phys_tables",
    [NET_X_PHYS_BAGS] = "phys_bags",
    [NET_X_PHYS_BAG_COLS] = "phys_bag_cols",
    [NET_X_PHYS_LOOKUPS] = "phys_lookups",
    [NET_X_PHYS_LOOKUP_COLS] = "phys_lookup_cols",
    [NET_X_PHYS_UNIQUE_BYTES] = "phys_unique_bytes",
    [NET_X_PHYS_L2_REREADS] = "phys_l2_rereads",
    [NET_X_PHYS_HALF_COLS] = "phys_half_cols",
    [NET_X_PHYS_PAIR_TABLES] = "phys_pair_tables",
};

const char *net_extra_name(int id)
{
    return id > 0 && id < NET_X_COUNT ? extra_names[id] : NULL;
}

int net_extra_parse(const char *name)
{
    int id;

    for (id = 1; id < NET_X_COUNT; id++)
        if (strcmp(name, extra_names[id]) == 0)
            return id;
    return 0;
}

int net_extras_check(const struct net_extras *x, const char *what,
                     struct sd_diag *d)
{
    int j, k;

    if (x->n < 0 || x->n > NET_XMAX)
        return sd_diag_set(d, SD_EINVAL, "%s.n %d is not in [0, %d]", what,
                           (int)x->n, NET_XMAX);
    for (j = 0; j < x->n; j++) {
        if (net_extra_name(x->id[j]) == NULL)
            return sd_diag_set(d, SD_EINVAL, "%s.id[%d] %d is unknown", what, j,
                               (int)x->id[j]);
        for (k = 0; k < j; k++)
            if (x->id[k] == x->id[j])
                return sd_diag_set(d, SD_EINVAL, "%s.id[%d] %s repeats id[%d]",
                                   what, j, net_extra_name(x->id[j]), k);
    }
    return 0;
}

int net_extras_parse(const char *s, struct net_extras *out, struct sd_diag *d)
{
    static const uint8_t v2[] = {NET_EXTRAS_V2}, v3[] = {NET_EXTRAS_V3},
                         v4[] = {NET_EXTRAS_V4};
    /* The named sets, v1 (none) to v4. */
    static const struct {
        const char *name;
        const uint8_t *id;
        size_t n;
    } sets[] = {{"v1", NULL, 0},
                {"v2", v2, sizeof(v2)},
                {"v3", v3, sizeof(v3)},
                {"v4", v4, sizeof(v4)}};
    struct net_extras x;
    char name[32];
    const char *p = s;
    size_t len, k;
    int id;

    memset(&x, 0, sizeof(x));
    for (k = 0; k < sizeof(sets) / sizeof(sets[0]); k++)
        if (strcmp(s, sets[k].name) == 0) {
            x.n = (int32_t)sets[k].n;
            if (sets[k].n > 0)
                memcpy(x.id, sets[k].id, sets[k].n);
            *out = x;
            return 0;
        }
    for (;;) {
        len = strcspn(p, ",");
        if (len == 0 || len >= sizeof(name))
            return sd_diag_set(d, SD_EINVAL,
                               "\"%s\": an empty or overlong name in the list",
                               s);
        memcpy(name, p, len);
        name[len] = '\0';
        id = net_extra_parse(name);
        if (id == 0) {
            char known[512] = "";
            size_t at = 0;

            for (id = 1; id < NET_X_COUNT && at < sizeof(known); id++)
                at += (size_t)snprintf(known + at, sizeof(known) - at, "%s%s",
                                       id > 1 ? ", " : "", extra_names[id]);
            return sd_diag_set(
                d, SD_EINVAL,
                "\"%s\" is not v1, v2, v3, v4 or a derived input (%s)", name,
                known);
        }
        if (x.n == NET_XMAX)
            return sd_diag_set(d, SD_EINVAL, "more than %d derived inputs",
                               NET_XMAX);
        x.id[x.n++] = (uint8_t)id;
        if (p[len] == '\0')
            break;
        p += len + 1;
    }
    if (net_extras_check(&x, "features", d) != 0)
        return SD_EINVAL;
    *out = x;
    return 0;
}

/* The physical prior's terms (enum net_extra's NET_X_PHYS_*). */
static double phys_value(int id, const struct table *t, int32_t cols,
                         int64_t batch, double lookups, double row)
{
    double unique, ubytes;

    switch (id) {
    case NET_X_PHYS_TABLES:
        return 1;
    case NET_X_PHYS_BAGS:
        return (double)batch;
    case NET_X_PHYS_BAG_COLS:
        return (double)batch * (double)cols;
    case NET_X_PHYS_LOOKUPS:
        return lookups;
    case NET_X_PHYS_LOOKUP_COLS:
        return lookups * (double)cols;
    case NET_X_PHYS_HALF_COLS:
        return t->dtype == TABLE_DTYPE_FP16 || t->dtype == TABLE_DTYPE_BF16
                   ? lookups * (double)cols
                   : 0;
    case NET_X_PHYS_PAIR_TABLES:
        return lookups > 0
                   ? lookups / (lookups + NET_PRIOR_PAIR_PF * (double)batch)
                   : 0;
    default:
        break;
    }
    unique = table_unique_rows(t, batch);
    ubytes = unique * row;
    if (id == NET_X_PHYS_UNIQUE_BYTES)
        return ubytes;
    /* NET_X_PHYS_L2_REREADS: the share of the distinct rows past the L2
     * is read again from further out on every lookup after the first. */
    if (!(ubytes > NET_PRIOR_L2_BYTES) || !(lookups > unique))
        return 0;
    return (lookups - unique) * row * (ubytes - NET_PRIOR_L2_BYTES) / ubytes;
}

double net_extra_value(int id, const struct table *t, int32_t cols,
                       int64_t batch)
{
    double row = (double)table_row_bytes(t->dtype, cols);
    double lookups = t->pooling_factor * (double)batch;

    if (!(lookups > 0))
        lookups = 0;
    if (NET_X_IS_PHYS(id))
        return phys_value(id, t, cols, batch, lookups, row);
    switch (id) {
    case NET_X_ELEM_BYTES:
        return (double)table_dtype_size(t->dtype);
    case NET_X_LOOKUPS:
        return log1p(lookups);
    case NET_X_UNIQUE:
        return log1p(table_unique_rows(t, batch));
    case NET_X_UNIQUE_BYTES:
        return log1p(table_unique_rows(t, batch) * row);
    case NET_X_TABLE_BYTES:
        return log((double)(t->rows > 0 ? t->rows : 1) * row);
    case NET_X_LOG_DIM:
        return log((double)(cols > 0 ? cols : 1));
    case NET_X_LOOKUP_BYTES:
        return log1p(lookups * row);
    default:
        return 0;
    }
}

bool net_extra_reads_dtype(int id)
{
    return id != NET_X_UNIQUE && id != NET_X_LOOKUPS && id != NET_X_LOG_DIM &&
           id != NET_X_PHYS_TABLES && id != NET_X_PHYS_BAGS &&
           id != NET_X_PHYS_BAG_COLS && id != NET_X_PHYS_LOOKUPS &&
           id != NET_X_PHYS_LOOKUP_COLS && id != NET_X_PHYS_PAIR_TABLES;
}

/* The 20 transformed features of t (m's transforms) into x. */
static void base_features(const struct cost_net *m, const struct table *t,
                          int32_t cols, float x[NET_IN])
{
    int i;

    if (!m->io.custom) {
        net_features(t, cols, x);
        return;
    }
    table_features(t, cols, x);
    for (i = 0; i < NET_IN; i++) {
        /* Pooling factor and rows from their exact values, not their
         * floats: format 1's choice written as custom is format 1. */
        double v = i == NET_IN_PF     ? t->pooling_factor
                   : i == NET_IN_ROWS ? (double)t->rows
                                      : (double)x[i];

        switch ((enum net_transform)m->io.transform[i]) {
        case NET_TF_LOG:
            x[i] = (float)(v > 0 ? log(v) : 0);
            break;
        case NET_TF_LOG1P:
            x[i] = (float)(v > 0 ? log1p(v) : 0);
            break;
        default: /* identity: table_features()' float */
            break;
        }
    }
}

void net_features_of(const struct cost_net *m, const struct table *t,
                     int32_t cols, float x[NET_IN_MAX])
{
    int j;

    base_features(m, t, cols, x);
    for (j = 0; j < m->x.n; j++)
        x[NET_IN + j] =
            (float)net_extra_value(m->x.id[j], t, cols, m->batch_size);
}

void net_input(const struct cost_net *m, const struct table *t, int32_t cols,
               float x[NET_IN])
{
    float eps = net_io_eps(m);
    int i;

    base_features(m, t, cols, x);
    for (i = 0; i < NET_IN; i++)
        x[i] = (x[i] - m->mean[i]) / (m->std[i] + eps);
}

void net_input_all(const struct cost_net *m, const struct table *t,
                   int32_t cols, float x[NET_IN_MAX])
{
    float eps = net_io_eps(m);
    int i, n = net_nin(m);

    net_features_of(m, t, cols, x);
    for (i = 0; i < n; i++)
        x[i] = (x[i] - m->mean[i]) / (m->std[i] + eps);
}

/*
 * s[k] += sum over i < n of w[k stride + i] x[i], k < NET_ROWS: rows of
 * NET_ROWS outputs at once, each row's sum in the order i = 0, 1, ...  One
 * output at a time, each sum waits on its previous add; eight independent
 * sums keep the adder busy, with the same results.
 */
#define NET_ROWS 8

static void dot_rows(const float *w, size_t stride, const float *x, int n,
                     float s[NET_ROWS])
{
    int i, k;

    for (i = 0; i < n; i++)
        for (k = 0; k < NET_ROWS; k++)
            s[k] += w[(size_t)k * stride + (size_t)i] * x[i];
}

/* y = relu(W x + b) for W [nout][nin], nout a multiple of NET_ROWS. */
static void dense_relu(const float *w, const float *b, const float *x, int nin,
                       int nout, float *y)
{
    float s[NET_ROWS];
    int o, k;

    for (o = 0; o < nout; o += NET_ROWS) {
        memcpy(s, b + o, sizeof(s));
        dot_rows(w + (size_t)o * (size_t)nin, (size_t)nin, x, nin, s);
        for (k = 0; k < NET_ROWS; k++)
            y[o + k] = s[k] > 0 ? s[k] : 0;
    }
}

/* The first layer: y = relu(W1 x + xw x' + b1), x the 20 inputs and x'
 * the derived ones after them (the same sums as dense_relu() when there
 * are none). */
static void first_layer(const struct cost_net *m, const float *x, float *y)
{
    const float *w = m->p + NET_W1, *b = m->p + NET_B1;
    float s[NET_ROWS];
    int o, k;

    for (o = 0; o < NET_H1; o += NET_ROWS) {
        memcpy(s, b + o, sizeof(s));
        dot_rows(w + (size_t)o * NET_IN, NET_IN, x, NET_IN, s);
        dot_rows(m->xw + (size_t)o * NET_XMAX, NET_XMAX, x + NET_IN, m->x.n, s);
        for (k = 0; k < NET_ROWS; k++)
            y[o + k] = s[k] > 0 ? s[k] : 0;
    }
}

void net_latent_of_input(const struct cost_net *m, const float x[NET_IN_MAX],
                         float lat[NET_LAT])
{
    float h[NET_H1];

    first_layer(m, x, h);
    dense_relu(m->p + NET_W2, m->p + NET_B2, h, NET_H1, NET_LAT, lat);
}

void net_latent(const struct cost_net *m, const struct table *t, int32_t cols,
                float lat[NET_LAT])
{
    float x[NET_IN_MAX];

    net_input_all(m, t, cols, x);
    net_latent_of_input(m, x, lat);
}

void net_project(const struct cost_net *m, const float lat[NET_LAT],
                 float proj[NET_H2])
{
    int o;

    for (o = 0; o < NET_H2; o += NET_ROWS) {
        memset(proj + o, 0, NET_ROWS * sizeof(*proj));
        dot_rows(m->p + NET_W3 + (size_t)o * NET_LAT, NET_LAT, lat, NET_LAT,
                 proj + o);
    }
}

/* Layer [nout][nin] at w (row stride `stride`) into 8-row blocks,
 * input-major. */
static void pack_rows(const float *w, size_t stride, int nin, int nout,
                      float *out)
{
    int o, i, k;

    for (o = 0; o < nout; o += NET_ROWS)
        for (i = 0; i < nin; i++)
            for (k = 0; k < NET_ROWS; k++)
                out[((size_t)o * (size_t)nin) + (size_t)i * NET_ROWS +
                    (size_t)k] = w[(size_t)(o + k) * stride + (size_t)i];
}

void models__rows_pack(const struct cost_net *m, struct models__rows *r)
{
    int o, i, k;

    r->nin = net_nin(m);
    /* The first layer: the 20 inputs' columns (W1), then the derived
     * ones' (xw), in dot_rows()'s order. */
    for (o = 0; o < NET_H1; o += NET_ROWS)
        for (i = 0; i < r->nin; i++)
            for (k = 0; k < NET_ROWS; k++)
                r->w1[(size_t)o * (size_t)r->nin + (size_t)i * NET_ROWS +
                      (size_t)k] =
                    i < NET_IN ? m->p[NET_W1 + (o + k) * NET_IN + i]
                               : m->xw[(o + k) * NET_XMAX + (i - NET_IN)];
    pack_rows(m->p + NET_W2, NET_H1, NET_H1, NET_LAT, r->w2);
    pack_rows(m->p + NET_W3, NET_LAT, NET_LAT, NET_H2, r->w3);
}

_Static_assert(NET_H1 % 32 == 0 && NET_LAT % 32 == 0 && NET_H2 % 32 == 0,
               "rows_dense() takes 32 units at a time");

/*
 * y = W x (+ b, then ReLU, where b is not NULL) of a packed [nout][nin]
 * layer: each unit's bias (or 0) then its products in input order, as
 * dense_relu() and net_project() add them.
 */
#if defined(__GNUC__)
/* Eight floats in one vector (two SSE registers, one AVX register). */
typedef float net_v8 __attribute__((vector_size(32)));
typedef int32_t net_v8i __attribute__((vector_size(32)));

/* nb blocks of eight units from unit o: nb independent sums, one vector
 * each, so the adder is kept busy while each sum waits on its previous
 * add.  Inlined where nb is a constant. */
__attribute__((always_inline)) static inline void
rows_blocks(const float *w, const float *b, const float *x, int nin, int o,
            int nb, float *y)
{
    const float *wb = w + (size_t)o * (size_t)nin;
    size_t bs = (size_t)NET_ROWS * (size_t)nin; /* a block's floats */
    net_v8 acc[8], zero = {0, 0, 0, 0, 0, 0, 0, 0};
    int q, i;

    for (q = 0; q < nb; q++)
        if (b != NULL)
            memcpy(&acc[q], b + o + NET_ROWS * q, sizeof(acc[q]));
        else
            acc[q] = zero;
    for (i = 0; i < nin; i++) {
        net_v8 xi = {x[i], x[i], x[i], x[i], x[i], x[i], x[i], x[i]}, wq;

        for (q = 0; q < nb; q++) {
            memcpy(&wq, wb + (size_t)q * bs + (size_t)i * NET_ROWS, sizeof(wq));
            acc[q] += wq * xi;
        }
    }
    for (q = 0; q < nb; q++) {
        if (b != NULL)
            acc[q] = (net_v8)((net_v8i)acc[q] & (acc[q] > zero));
        memcpy(y + o + NET_ROWS * q, &acc[q], sizeof(acc[q]));
    }
}
#endif

/*
 * NET_CLONES: built twice on x86-64 (GCC): for AVX2, where a vector of
 * eight is one register, and for the baseline, where it is two; the loader
 * picks the one the CPU runs.  The same adds and multiplies in the same
 * order either way (no FMA: a fused multiply-add rounds once), so the same
 * floats.  A latent's three layers took 0.47 us with four-float vectors, a
 * tenth of an 856-table plan's search.  Not in sanitizer builds: the loader
 * runs the clones' resolver before TSan's runtime is up, and it crashed
 * there (SIGSEGV at start).
 */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) &&         \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#    define NET_CLONES __attribute__((target_clones("avx2", "default")))
#else
#    define NET_CLONES
#endif

NET_CLONES static void rows_dense(const float *w, const float *b,
                                  const float *x, int nin, int nout, float *y)
{
    int o;

#if defined(__GNUC__)
    /* 64 units (eight sums) at a time, 32 where that is all that is left
     * (the latent's 32). */
    for (o = 0; o + 64 <= nout; o += 64)
        rows_blocks(w, b, x, nin, o, 8, y);
    for (; o < nout; o += 32)
        rows_blocks(w, b, x, nin, o, 4, y);
#else
    int k, i;

    for (o = 0; o < nout; o += NET_ROWS)
        for (k = 0; k < NET_ROWS; k++) {
            float s = b != NULL ? b[o + k] : 0;

            for (i = 0; i < nin; i++)
                s += w[(size_t)o * (size_t)nin + (size_t)i * NET_ROWS +
                       (size_t)k] *
                     x[i];
            y[o + k] = b == NULL || s > 0 ? s : 0;
        }
#endif
}

void models__rows_project(const struct cost_net *m,
                          const struct models__rows *r,
                          const float x[NET_IN_MAX], float proj[NET_H2])
{
    float h[NET_H1], lat[NET_LAT];

    rows_dense(r->w1, m->p + NET_B1, x, r->nin, NET_H1, h);
    rows_dense(r->w2, m->p + NET_B2, h, NET_H1, NET_LAT, lat);
    rows_dense(r->w3, NULL, lat, NET_LAT, NET_H2, proj);
}

void net_head_init(const struct cost_net *m, float z[NET_H2])
{
    memcpy(z, m->p + NET_B3, NET_H2 * sizeof(float));
}

/* A prior model's physical ms from its reserved head units: base + count x
 * columns, never below 0. */
static double prior_phys(float base, float count, float cols)
{
    double phys = (double)base + (double)count * (double)cols;

    return phys > 0 ? phys : 0;
}

/* A prior model's cost from its raw head and its reserved head units:
 * squareplus(raw) x (base + count x columns), each unit a sum of units >=
 * 0, so never below 0.  Out of line, with no pointer from the pass: a
 * plain model's head pays nothing for it. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static double
prior_cost(double raw, float base, float count, float cols)
{
    return net_squareplus(raw) * prior_phys(base, count, cols);
}

/* The head's output from its eight lane sums, added in one fixed order. */
static double head_sum(const struct cost_net *m, const float acc[8])
{
    return (double)m->p[NET_B4] + ((acc[0] + acc[4]) + (acc[1] + acc[5])) +
           ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/*
 * The raw head over t = z + add[0] + add[1] - sub[0] - sub[1] (NULL terms
 * left out; each column summed in that order), t written to out (NULL: not
 * kept).  Eight independent sums (a single running sum would serialise the
 * 64 steps): lane k adds the products of columns o + k, o = 0, 8, ..., the
 * same order with or without vectors, so the same result.
 */
#if defined(__GNUC__)
/* Inlined into each caller, where the NULL terms are constants: the steps
 * for them fold away (called, the pass tested them and ran 9 % slower at
 * 856 tables on 8 devices). */
__attribute__((always_inline))
#endif
static inline double
head_pass(const struct cost_net *m, const float *z, const float *const add[2],
          const float *const sub[2], float *out)
{
    const float *w4 = m->p + NET_W4;
    float acc[8] = {0};
    int o, q;

#if defined(__GNUC__)
    net_v8 a = {0, 0, 0, 0, 0, 0, 0, 0}, zero = {0, 0, 0, 0, 0, 0, 0, 0};

    for (o = 0; o < NET_H2; o += 8) {
        net_v8 v, wo;

        memcpy(&v, z + o, sizeof(v));
        for (q = 0; q < 2; q++)
            if (add[q] != NULL) {
                net_v8 t;

                memcpy(&t, add[q] + o, sizeof(t));
                v += t;
            }
        for (q = 0; q < 2; q++)
            if (sub[q] != NULL) {
                net_v8 t;

                memcpy(&t, sub[q] + o, sizeof(t));
                v -= t;
            }
        if (out != NULL)
            memcpy(out + o, &v, sizeof(v));
        /* max(t, 0): the lanes where t > 0 kept, the others +0. */
        v = (net_v8)((net_v8i)v & (v > zero));
        memcpy(&wo, w4 + o, sizeof(wo));
        a += wo * v;
    }
    memcpy(acc, &a, sizeof(a));
#else
    int k;

    for (o = 0; o < NET_H2; o += 8)
        for (k = 0; k < 8; k++) {
            float v = z[o + k];

            for (q = 0; q < 2; q++)
                if (add[q] != NULL)
                    v += add[q][o + k];
            for (q = 0; q < 2; q++)
                if (sub[q] != NULL)
                    v -= sub[q][o + k];
            if (out != NULL)
                out[o + k] = v;
            acc[k] += w4[o + k] * (v > 0 ? v : 0);
        }
#endif
    /* A prior model (NET_ACT_PRIOR): its reserved units of t, from out
     * where the pass wrote t, else summed again in the pass's order (the
     * same floats). */
    if (m->io.activation == NET_ACT_PRIOR && m->io.custom) {
        float t[NET_PRIOR_UNITS];
        int k;

        for (k = 0; k < NET_PRIOR_UNITS; k++) {
            int i = NET_PRIOR_H2(k);
            float v = out != NULL ? out[i] : z[i];

            for (q = 0; q < 2 && out == NULL; q++)
                if (add[q] != NULL)
                    v += add[q][i];
            for (q = 0; q < 2 && out == NULL; q++)
                if (sub[q] != NULL)
                    v -= sub[q][i];
            t[k] = v;
        }
        return prior_cost(head_sum(m, acc), t[NET_PRIOR_BASE],
                          t[NET_PRIOR_COUNT], t[NET_PRIOR_COLS]);
    }
    return head_sum(m, acc);
}

NET_CLONES double net_head_raw(const struct cost_net *m, const float z[NET_H2])
{
    const float *none[2] = {NULL, NULL};

    return head_pass(m, z, none, none, NULL);
}

NET_CLONES double net_head_step(const struct cost_net *m, float z[NET_H2],
                                const float p[NET_H2], int sign)
{
    const float *on[2] = {p, NULL}, *none[2] = {NULL, NULL};

    return sign > 0 ? head_pass(m, z, on, none, z)
                    : head_pass(m, z, none, on, z);
}

NET_CLONES double net_head_delta(const struct cost_net *m,
                                 const float z[NET_H2],
                                 const float *const add[2],
                                 const float *const sub[2])
{
    return head_pass(m, z, add, sub, NULL);
}

double net_head_z(const struct cost_net *m, const float z[NET_H2])
{
    return net_activate(m, net_head_raw(m, z));
}

double net_activate(const struct cost_net *m, double raw)
{
    if (net_io_activation(m) == NET_ACT_SOFTPLUS)
        return net_softplus(raw);
    /* none: no time is below 0; a prior model's raw head is its ms */
    return raw > 0 ? raw : 0;
}

double net_squareplus(double x)
{
    /* (x + sqrt(x^2 + 4)) / 2, and for x < 0 the same as 2 / (sqrt(x^2 +
     * 4) - x), which does not cancel */
    double r = sqrt(x * x + 4);

    return x >= 0 ? (x + r) / 2 : 2 / (r - x);
}

double net_softplus(double x)
{
    /* log(1 + e^x) without overflow; e^-20 is below double's precision
     * relative to x. */
    return x > 20 ? x : log1p(exp(x));
}

/* Adds the projected latent of t cut to `cols` columns to z. */
static void head_add(const struct cost_net *m, struct net_memo *mm,
                     const struct table *t, int32_t cols, float z[NET_H2])
{
    float proj[NET_H2];
    int o;

    net_projected(m, mm, t, cols, proj);
    for (o = 0; o < NET_H2; o++)
        z[o] += proj[o];
}

static double shard_ms(const struct cost_net *m, struct net_memo *mm,
                       const struct shard_item *items, size_t n)
{
    float z[NET_H2];
    size_t k;

    if (n == 0)
        return 0;
    net_head_init(m, z);
    for (k = 0; k < n; k++)
        head_add(m, mm, items[k].table, items[k].cols, z);
    return net_head_z(m, z);
}

double net_shard_ms(const struct cost_net *m, const struct shard_item *items,
                    size_t n)
{
    return shard_ms(m, NULL, items, n);
}

double net_shard_ms_memo(const struct cost_net *m, struct net_memo *mm,
                         const struct shard_item *items, size_t n)
{
    return shard_ms(m, mm, items, n);
}

/* z of a shard of whole tables, each at its own dim. */
static void tables_z(const struct cost_net *m, const struct table *tables,
                     size_t n, float z[NET_H2])
{
    size_t k;

    net_head_init(m, z);
    for (k = 0; k < n; k++)
        head_add(m, NULL, &tables[k], tables[k].dim, z);
}

double net_tables_ms(const struct cost_net *m, const struct table *tables,
                     size_t n)
{
    float z[NET_H2];

    if (n == 0)
        return 0;
    tables_z(m, tables, n, z);
    return net_head_z(m, z);
}

double net_tables_prior_ms(const struct cost_net *m, const struct table *tables,
                           size_t n)
{
    float z[NET_H2];

    if (!net_has_prior(m))
        return NAN;
    if (n == 0)
        return 0;
    tables_z(m, tables, n, z);
    return prior_phys(z[NET_PRIOR_H2(NET_PRIOR_BASE)],
                      z[NET_PRIOR_H2(NET_PRIOR_COUNT)],
                      z[NET_PRIOR_H2(NET_PRIOR_COLS)]);
}

/*
 * The compiled-in models, parsed together on first use: the default (cpu)
 * model first, then those that answer only for their own profile.  Each
 * keeps why it did not parse.  Written once, under images_once.
 */
struct net_image {
    const char *what; /* for errors */
    const unsigned char *bytes;
    const size_t *len;
    struct cost_net *net; /* NULL: damaged */
    struct sd_diag err;
};

static struct net_image images[] = {
    {"embedded model", sd_embedded_model, &sd_embedded_model_len, NULL, {{0}}},
    {"reference model",
     sd_reference_model,
     &sd_reference_model_len,
     NULL,
     {{0}}},
    {"embedded H200 model", sd_h200_model, &sd_h200_model_len, NULL, {{0}}},
};
#define NIMAGES (sizeof(images) / sizeof(images[0]))

static pthread_once_t images_once = PTHREAD_ONCE_INIT;

static void images_parse(void)
{
    size_t i;

    for (i = 0; i < NIMAGES; i++)
        if (net_parse(images[i].bytes, *images[i].len, &images[i].net,
                      &images[i].err) < 0)
            images[i].net = NULL;
}

/* Image i's model, or NULL with why in d (when given). */
static const struct cost_net *image_get(size_t i, struct sd_diag *d)
{
    pthread_once(&images_once, images_parse);
    if (images[i].net == NULL && d)
        snprintf(d->msg, sizeof(d->msg), "%s: %.480s", images[i].what,
                 images[i].err.msg);
    return images[i].net;
}

const struct cost_net *net_embedded(struct sd_diag *d)
{
    return image_get(0, d);
}

const struct cost_net *net_reference(struct sd_diag *d)
{
    return image_get(1, d);
}

const struct cost_net *net_compiled(const char *profile, struct sd_diag *d)
{
    const struct cost_net *m;
    size_t i;

    for (i = 1; profile != NULL && i < NIMAGES; i++) {
        m = image_get(i, d);
        if (m != NULL && strcmp(m->profile, profile) == 0)
            return m;
    }
    return NULL;
}

static double net_cm_shard_ms(void *ctx, const struct topology *t,
                              const struct shard_item *items, size_t n)
{
    const struct net_cost_model *ncm = ctx;

    return shard_ms(ncm->net, ncm->memo, items, n) * (double)t->batch_size /
           (double)ncm->net->batch_size;
}

void net_cost_model_init(struct net_cost_model *ncm, const struct cost_net *m)
{
    snprintf(ncm->name, sizeof(ncm->name), "neural:%s", m->profile);
    ncm->net = m;
    ncm->memo = NULL;
    ncm->cm.name = ncm->name;
    ncm->cm.shard_ms = net_cm_shard_ms;
    ncm->cm.ctx = ncm;
}
