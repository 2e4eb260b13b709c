/*
 * Table families (formats.h): synthetic tables of shapes the DLRM-matched
 * generator (synth.c) does not make, for profiling and pre-training a cost
 * model that must answer for tables it never saw, and for task sets that
 * test it.  Each family fixes how lookups are spread over the rows (its
 * popularity law) and how long bags are; rows, dims and dtypes range
 * widely in every family:
 *
 *  - rows log-uniform in [FAMILY_ROWS_MIN, FAMILY_ROWS_MAX]: from a table
 *    that fits in L1 to one past the last-level cache, capped where one cpu
 *    core still holds a shard of 15 of them;
 *  - dims: half from NeuroShard's {4, 8, .., 128}, half log-uniform over
 *    every multiple of 4 in [4, 1024] (a user's table is any of them);
 *  - dtype fp16 for 30 % of the tables (the cpu kernels time them in fp16,
 *    kernels.h).
 *
 * The families, with what a test checks of each (test_families.c):
 *  - dlrm: synth.c's tables, NeuroShard's benchmark statistics; the base of
 *    the augmentation (sample.c gives them every dim of sample_dims);
 *  - zipf: P(rank k) proportional to k^-s over every row, s uniform in
 *    [0.5, 2.0]: the top row takes a share 1 / H(rows, s) of the lookups;
 *  - exp: P(rank k) proportional to exp(-k / L), L a fraction 10^U(-3, -0.3)
 *    of the rows: ranks below L take a share 1 - 1/e (0.632) of them (less
 *    the tail past the last row);
 *  - uniform: every row of a random subset of 50-100 % of the rows equally
 *    likely: access counts are Poisson, so with N lookups over V rows the
 *    three bins around log2(N / V) hold at least 95 % of the accessed rows
 *    once N / V >= 16;
 *  - bimodal: a hot set of 0.1-10 % of the rows takes a share p uniform in
 *    [0.5, 0.95] of the lookups, the cold rows the rest, each set uniform:
 *    the histogram has two modes, the bins around each set's mean count
 *    holding that set's share of the accessed rows;
 *  - seq: long sequences, pooling factor log-uniform in [64, 384], bag
 *    lengths uniform in [ceil(pf/2), floor(3pf/2)], Zipf ids with s in
 *    [0.6, 1.2];
 *  - onehot: one id per bag (pooling factor 1 exactly), ids from one of the
 *    four laws above.
 * zipf, exp, uniform and bimodal tables have geometric bag lengths with a
 * pooling factor log-uniform in [1, 100].
 *
 * Table i of family f depends only on (seed, f, i); a "mix" pool holds the
 * families in turn: its table i is table i / FAMILY_COUNT of family
 * i % FAMILY_COUNT.  Names are "<family>_%04zu" with the family's index.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats_int.h"
#include "problem/problem.h"

#define FAMILY_COUNT_MAX  ((size_t)1 << 24)
#define FAMILY_BATCH_MAX  ((int64_t)1 << 24)
#define FAMILY_P_FP16     0.3
#define FAMILY_PF_MIN     1.0
#define FAMILY_PF_MAX     100.0
#define FAMILY_SEQ_PF_MIN 64.0
#define FAMILY_SEQ_PF_MAX 384.0
/* Stream tag of a family's tables, apart from synth.c's (which the dlrm
 * family uses as they are). */
#define FAMILY_STREAM 0x46414d494c59ull /* "FAMILY" */

static const char *const family_names[FAMILY_COUNT + 1] = {
    [FAMILY_DLRM] = "dlrm",       [FAMILY_ZIPF] = "zipf",
    [FAMILY_EXP] = "exp",         [FAMILY_UNIFORM] = "uniform",
    [FAMILY_BIMODAL] = "bimodal", [FAMILY_SEQ] = "seq",
    [FAMILY_ONEHOT] = "onehot",   [FAMILY_MIX] = "mix",
};

const char *family_name(int f)
{
    return f >= 0 && f <= FAMILY_MIX ? family_names[f] : "?";
}

int family_parse(const char *s, int *out, struct sd_diag *d)
{
    int f;

    for (f = 0; f <= FAMILY_MIX; f++) {
        if (strcmp(s, family_names[f]) == 0) {
            *out = f;
            return 0;
        }
    }
    return sd_diag_set(d, SD_EINVAL,
                       "family \"%s\" is unknown (known: dlrm, zipf, exp, "
                       "uniform, bimodal, seq, onehot, mix)",
                       s);
}

int family_parse_list(const char *s, bool out[FAMILY_MIX + 1],
                      struct sd_diag *d)
{
    char word[FAMILY_NAME_MAX];
    const char *p = s;
    size_t len;
    int f = 0, rv;

    memset(out, 0, (FAMILY_MIX + 1) * sizeof(*out));
    for (;;) {
        len = strcspn(p, ",");
        if (len == 0 || len >= sizeof(word))
            return sd_diag_set(d, SD_EINVAL,
                               "\"%s\" is not a comma-separated list of "
                               "family names",
                               s);
        memcpy(word, p, len);
        word[len] = '\0';
        rv = family_parse(word, &f, d);
        if (rv != 0)
            return rv;
        out[f] = true;
        if (p[len] == '\0')
            return 0;
        p += len + 1;
    }
}

int family_of_index(int family, size_t i)
{
    return family == FAMILY_MIX ? (int)(i % FAMILY_COUNT) : family;
}

int family_label_mask(const char *label, uint32_t *mask)
{
    char word[FAMILY_NAME_MAX];
    const char *p = label;
    uint32_t m = 0;
    size_t len;
    int f = 0;

    while (*p != '\0') {
        len = strcspn(p, "+");
        if (len == 0 || len >= sizeof(word))
            return SD_EINVAL;
        memcpy(word, p, len);
        word[len] = '\0';
        if (family_parse(word, &f, NULL) != 0 || f == FAMILY_MIX)
            return SD_EINVAL;
        m |= 1u << f;
        p += len;
        if (*p == '+' && *++p == '\0')
            return SD_EINVAL;
    }
    *mask = m;
    return 0;
}

int family_label_group(const char *label)
{
    uint32_t m;
    int f;

    if (family_label_mask(label, &m) != 0 || m == 0)
        return FAMILY_OTHER;
    if (m & (m - 1))
        return FAMILY_MIX;
    for (f = 0; !(m & (1u << f)); f++)
        ;
    return f;
}

const char *family_group_name(int group)
{
    return group == FAMILY_OTHER ? "other" : family_name(group);
}

void family_params_default(struct family_params *p)
{
    p->family = FAMILY_MIX;
    p->count = SYNTH_DEFAULT_TABLES;
    p->seed = 0;
    p->batch_size = SYNTH_DEFAULT_BATCH;
}

static int check_params(const struct family_params *p)
{
    if (p == NULL || p->family < 0 || p->family > FAMILY_MIX ||
        p->batch_size < 1 || p->batch_size > FAMILY_BATCH_MAX)
        return SD_EINVAL;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Shapes                                                                    */

/* A draw log-uniform in [lo, hi]. */
static double log_uniform(struct rng *r, double lo, double hi)
{
    return exp(log(lo) + (log(hi) - log(lo)) * rng_uniform(r));
}

static int32_t draw_dim(struct rng *r)
{
    static const int32_t pow2[] = {4, 8, 16, 32, 64, 128};
    int32_t units;

    if (rng_uniform(r) < 0.5)
        return pow2[rng_below(r, sizeof(pow2) / sizeof(pow2[0]))];
    /* Multiples of 4: 4 x units, units log-uniform in [1, 256]. */
    units = (int32_t)floor(log_uniform(r, 1.0, 257.0));
    if (units > TABLE_DIM_MAX / TABLE_DIM_ALIGN)
        units = TABLE_DIM_MAX / TABLE_DIM_ALIGN;
    return units * TABLE_DIM_ALIGN;
}

/* One of the four popularity laws, with its parameters. */
static void draw_law(struct rng *r, enum family_law law,
                     struct family_shape *sh)
{
    double rows = (double)sh->rows;

    sh->law = law;
    switch (law) {
    case FAMILY_LAW_ZIPF:
        sh->zipf_s = 0.5 + 1.5 * rng_uniform(r);
        sh->vocab = (uint64_t)sh->rows;
        break;
    case FAMILY_LAW_EXP:
        sh->exp_scale = rows * pow(10.0, -3.0 + 2.7 * rng_uniform(r));
        if (sh->exp_scale < 1.0)
            sh->exp_scale = 1.0;
        sh->vocab = (uint64_t)sh->rows;
        break;
    case FAMILY_LAW_UNIFORM:
        sh->vocab = (uint64_t)floor(rows * (0.5 + 0.5 * rng_uniform(r)));
        if (sh->vocab < 1)
            sh->vocab = 1;
        break;
    case FAMILY_LAW_BIMODAL:
        sh->hot_rows =
            (uint64_t)floor(rows * pow(10.0, -3.0 + 2.0 * rng_uniform(r)));
        if (sh->hot_rows < 1)
            sh->hot_rows = 1;
        sh->hot_share = 0.5 + 0.45 * rng_uniform(r);
        sh->vocab = (uint64_t)sh->rows;
        break;
    }
}

int family_draw_shape(int family, uint64_t seed, size_t i,
                      struct family_shape *sh)
{
    struct rng r;

    if (family < FAMILY_ZIPF || family >= FAMILY_COUNT)
        return SD_EINVAL;
    memset(sh, 0, sizeof(*sh));
    rng_seed(&r, rng_derive(rng_derive(seed, FAMILY_STREAM + (uint64_t)family),
                            (uint64_t)i));
    sh->family = family;
    /* The same draws, in the same order, for every family. */
    sh->rows = (int64_t)floor(
        log_uniform(&r, FAMILY_ROWS_MIN, (double)FAMILY_ROWS_MAX + 1.0));
    if (sh->rows > FAMILY_ROWS_MAX)
        sh->rows = FAMILY_ROWS_MAX;
    sh->dim = draw_dim(&r);
    sh->dtype =
        rng_uniform(&r) < FAMILY_P_FP16 ? TABLE_DTYPE_FP16 : TABLE_DTYPE_FP32;
    sh->bags = FAMILY_BAGS_GEOMETRIC;
    sh->pf = log_uniform(&r, FAMILY_PF_MIN, FAMILY_PF_MAX);
    switch (family) {
    case FAMILY_ZIPF:
        draw_law(&r, FAMILY_LAW_ZIPF, sh);
        break;
    case FAMILY_EXP:
        draw_law(&r, FAMILY_LAW_EXP, sh);
        break;
    case FAMILY_UNIFORM:
        draw_law(&r, FAMILY_LAW_UNIFORM, sh);
        break;
    case FAMILY_BIMODAL:
        draw_law(&r, FAMILY_LAW_BIMODAL, sh);
        break;
    case FAMILY_SEQ:
        sh->bags = FAMILY_BAGS_RANGE;
        sh->pf = log_uniform(&r, FAMILY_SEQ_PF_MIN, FAMILY_SEQ_PF_MAX);
        draw_law(&r, FAMILY_LAW_ZIPF, sh);
        sh->zipf_s = 0.6 + 0.6 * rng_uniform(&r);
        break;
    case FAMILY_ONEHOT:
        sh->bags = FAMILY_BAGS_ONE;
        sh->pf = 1.0;
        draw_law(&r, (enum family_law)rng_below(&r, 4), sh);
        break;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Lookups                                                                   */

/* What draws one row of a shape's law. */
struct law_sampler {
    const struct family_shape *sh;
    struct perm pm;
    struct zipf z;
    bool zipf_ready;
};

static int sampler_init(struct law_sampler *ls, const struct family_shape *sh,
                        int64_t nindices, struct rng *r)
{
    ls->sh = sh;
    ls->zipf_ready = false;
    synth__perm_init(&ls->pm, (uint64_t)sh->rows, r);
    if (sh->law != FAMILY_LAW_ZIPF)
        return 0;
    if (synth__zipf_init(&ls->z, sh->zipf_s, sh->vocab,
                         synth__head_size(nindices), &ls->pm) != 0)
        return SD_ENOMEM;
    ls->zipf_ready = true;
    return 0;
}

static void sampler_destroy(struct law_sampler *ls)
{
    if (ls->zipf_ready)
        synth__zipf_destroy(&ls->z);
}

static int64_t sample_row(const struct law_sampler *ls, struct rng *r)
{
    const struct family_shape *sh = ls->sh;
    uint64_t rows = (uint64_t)sh->rows, rank;
    double k;

    switch (sh->law) {
    case FAMILY_LAW_ZIPF:
        return synth__zipf_sample(&ls->z, r);
    case FAMILY_LAW_EXP:
        do
            k = floor(-sh->exp_scale * log1p(-rng_uniform(r)));
        while (k >= (double)rows);
        rank = (uint64_t)k;
        break;
    case FAMILY_LAW_UNIFORM:
        rank = rng_below(r, sh->vocab);
        break;
    case FAMILY_LAW_BIMODAL:
    default:
        if (rng_uniform(r) < sh->hot_share || sh->hot_rows >= rows)
            rank = rng_below(r, sh->hot_rows);
        else
            rank = sh->hot_rows + rng_below(r, rows - sh->hot_rows);
        break;
    }
    return (int64_t)synth__perm_apply(&ls->pm, rank);
}

/* Bag lengths of the shape into offsets[0 .. nbags]; returns the total. */
static int64_t draw_bags(const struct family_shape *sh, struct rng *r,
                         int64_t nbags, int64_t *offsets)
{
    int64_t b, lo, hi;

    if (sh->bags == FAMILY_BAGS_GEOMETRIC)
        return synth__draw_offsets(r, sh->pf, nbags, offsets);
    lo = (int64_t)ceil(sh->pf / 2);
    hi = (int64_t)floor(3 * sh->pf / 2);
    offsets[0] = 0;
    for (b = 0; b < nbags; b++)
        offsets[b + 1] =
            offsets[b] +
            (sh->bags == FAMILY_BAGS_ONE
                 ? 1
                 : lo + (int64_t)rng_below(r, (uint64_t)(hi - lo + 1)));
    return offsets[nbags];
}

int family_trace(const struct family_params *p, size_t i, struct trace *out,
                 struct family_shape *shape)
{
    struct synth_params sp;
    struct law_sampler ls;
    struct family_shape sh;
    struct trace t;
    struct rng r;
    size_t j = i;
    int64_t k;
    int f, rv;

    if (check_params(p) != 0)
        return SD_EINVAL;
    f = family_of_index(p->family, i);
    if (p->family == FAMILY_MIX)
        j = i / FAMILY_COUNT;
    if (f == FAMILY_DLRM) {
        /* The base family: synth.c's table j as it is. */
        synth_params_default(&sp);
        sp.seed = p->seed;
        sp.batch_size = p->batch_size;
        rv = synth_trace(&sp, j, out);
        if (rv == 0) {
            snprintf(out->name, sizeof(out->name), "dlrm_%04zu", j);
            if (shape != NULL) {
                memset(shape, 0, sizeof(*shape));
                shape->family = FAMILY_DLRM;
                shape->rows = out->rows;
                shape->dim = out->dim;
                shape->pf =
                    out->nbags ? (double)out->nindices / (double)out->nbags : 0;
            }
        }
        return rv;
    }
    rv = family_draw_shape(f, p->seed, j, &sh);
    if (rv != 0)
        return rv;
    /* Lookups from their own stream, apart from the shape's draws. */
    rng_seed(&r,
             rng_derive(rng_derive(p->seed, FAMILY_STREAM + 16 + (uint64_t)f),
                        (uint64_t)j));
    memset(&t, 0, sizeof(t));
    snprintf(t.name, sizeof(t.name), "%s_%04zu", family_names[f], j);
    t.rows = sh.rows;
    t.dim = sh.dim;
    t.nbags = p->batch_size;
    t.offsets = malloc((size_t)(t.nbags + 1) * sizeof(*t.offsets));
    if (t.offsets == NULL)
        return SD_ENOMEM;
    t.nindices = draw_bags(&sh, &r, t.nbags, t.offsets);
    if (t.nindices > 0) {
        t.indices = malloc((size_t)t.nindices * sizeof(*t.indices));
        rv = t.indices == NULL ? SD_ENOMEM
                               : sampler_init(&ls, &sh, t.nindices, &r);
        if (rv != 0) {
            trace_destroy(&t);
            return rv;
        }
        for (k = 0; k < t.nindices; k++)
            t.indices[k] = sample_row(&ls, &r);
        sampler_destroy(&ls);
    }
    if (shape != NULL)
        *shape = sh;
    *out = t;
    return 0;
}

int family_table_shape(const struct family_params *p, size_t i,
                       struct table *out)
{
    struct synth_params sp;
    struct family_shape sh;
    size_t j = p->family == FAMILY_MIX ? i / FAMILY_COUNT : i;
    int f, rv;

    if (check_params(p) != 0)
        return SD_EINVAL;
    f = family_of_index(p->family, i);
    if (f == FAMILY_DLRM) {
        synth_params_default(&sp);
        sp.seed = p->seed;
        sp.batch_size = p->batch_size;
        rv = synth_table_shape(&sp, j, out);
        if (rv == 0)
            snprintf(out->name, sizeof(out->name), "dlrm_%04zu", j);
        return rv;
    }
    rv = family_draw_shape(f, p->seed, j, &sh);
    if (rv != 0)
        return rv;
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s_%04zu", family_names[f], j);
    out->rows = sh.rows;
    out->dim = sh.dim;
    out->dtype = sh.dtype;
    out->pooling_factor = sh.pf;
    return 0;
}

int family_shapes(const struct family_params *p, struct table **out)
{
    struct table *t;
    size_t i;
    int rv;

    if (check_params(p) != 0 || p->count == 0 || p->count > FAMILY_COUNT_MAX)
        return SD_EINVAL;
    t = calloc(p->count, sizeof(*t));
    if (t == NULL)
        return SD_ENOMEM;
    for (i = 0; i < p->count; i++) {
        rv = family_table_shape(p, i, &t[i]);
        if (rv != 0) {
            free(t);
            return rv;
        }
    }
    *out = t;
    return 0;
}

/* Table i of a pool: its trace made, its features computed, the trace
 * dropped; dtype the shape's. */
static int family_one(const void *ctx, size_t i, struct table *out)
{
    const struct family_params *p = ctx;
    struct family_shape sh;
    struct trace t;
    int rv;

    rv = family_trace(p, i, &t, &sh);
    if (rv != 0)
        return rv;
    rv = trace_to_table(&t, out);
    if (rv == 0)
        out->dtype = sh.dtype;
    trace_destroy(&t);
    return rv;
}

int family_tables(const struct family_params *p, unsigned threads,
                  struct table **out)
{
    if (check_params(p) != 0 || p->count == 0 || p->count > FAMILY_COUNT_MAX)
        return SD_EINVAL;
    return formats__make_tables(p->count, threads, family_one, p, out);
}
