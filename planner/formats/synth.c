/*
 * Synthetic DLRM embedding tables.  The 856 tables of the NeuroShard
 * benchmark (Meta's dlrm_datasets) are not redistributable here, but their
 * per-table feature means and standard deviations are public (neuroshard.md
 * 1.4).  This generator draws, per table, a row count, a pooling factor and a
 * Zipf-like popularity skew from distributions fitted to those statistics,
 * generates one batch of lookups, and computes the table's access histogram
 * from that batch with trace_features(); no feature value is typed in.
 *
 * Table i depends only on (seed, i): its random stream is seeded with
 * rng_derive(seed, i), so the tables do not depend on the count asked for or
 * on the number of threads.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats_int.h"
#include "problem/problem.h"

/*
 * Targets: the public statistics over all 856 tables, empty ones included
 * (neuroshard.md 1.4).  The bin means sum to 0.958, so 4.2 % of the tables
 * were never accessed in the batch; such a table has 100 rows and pooling
 * factor 0.
 */
#define SYNTH_P_EMPTY    0.042
#define SYNTH_ROWS_EMPTY 100
#define SYNTH_ROWS_MEAN  4107472.25
#define SYNTH_ROWS_STD   3134816.25
#define SYNTH_ROWS_MIN   100 /* the benchmark's max(100, max index + 1) */
#define SYNTH_PF_MEAN    15.811706
#define SYNTH_PF_STD     25.594431

/*
 * Pooling factors of accessed tables: a lognormal truncated (by redrawing)
 * at SYNTH_PF_MAX bags.  Its parameters were solved numerically so the
 * truncated distribution has the mean and standard deviation of the accessed
 * tables implied by the targets above (16.50 and 25.93).  The truncation
 * keeps the sample standard deviation of a few hundred tables from being
 * dominated by one extreme draw, and bounds a trace's size.
 */
#define SYNTH_PF_LOG_MU    2.0328179
#define SYNTH_PF_LOG_SIGMA 1.3076907
#define SYNTH_PF_MAX       256.0

/*
 * Popularity: each table's lookups follow a Zipf law with exponent s over a
 * vocabulary of V = rows^f distinct rows (the values its feature takes),
 * with s and f uniform within one of two kinds of table:
 *
 *  - skewed (71 %): s in [1.4, 3.0], V about sqrt(rows).  A few rows take
 *    most lookups and the access counts follow a power law from 1 up, which
 *    fills the low bins in the proportions the benchmark's means show
 *    (bin_2 above bin_1, a slow decay after);
 *  - flat (29 %): s in [0.8, 1.15], V from rows^0.1 to rows^0.85.  With a
 *    small vocabulary every row is read many times, which fills the middle
 *    and upper bins one table at a time, as the large standard deviations
 *    of bin_7 .. bin_16 require.
 *
 * These ranges were fitted by a random search, at the benchmark's batch of
 * 65536 bags, against the 17 bin means and standard deviations of
 * neuroshard.md 1.4: over 856 tables each bin's mean lands within about
 * 0.03 of the benchmark's and its standard deviation within about 0.04.
 * The bins depend on the batch size; at smaller batches they shift down.
 */
#define SYNTH_P_SKEWED     0.71
#define SYNTH_SKEWED_S_MIN 1.4
#define SYNTH_SKEWED_S_MAX 3.0
#define SYNTH_SKEWED_F_MIN 0.45
#define SYNTH_SKEWED_F_MAX 0.55
#define SYNTH_FLAT_S_MIN   0.8
#define SYNTH_FLAT_S_MAX   1.15
#define SYNTH_FLAT_F_MIN   0.1
#define SYNTH_FLAT_F_MAX   0.85

#define SYNTH_BATCH_MAX ((int64_t)1 << 24)
#define SYNTH_COUNT_MAX ((size_t)1 << 24)
#define SYNTH_HEAD_MAX  ((size_t)1 << 16) /* tabulated Zipf ranks */

void synth_params_default(struct synth_params *p)
{
    p->count = SYNTH_DEFAULT_TABLES;
    p->seed = 0;
    p->batch_size = SYNTH_DEFAULT_BATCH;
}

/* ------------------------------------------------------------------------ */
/* A cheap bijection of [0, rows)                                            */

/*
 * Scatters Zipf ranks over the rows so the hot rows of a table are not rows
 * 0, 1, 2, ..: a keyed invertible mixer of k-bit words (k the bit length of
 * rows - 1), cycle-walked until it lands below rows.  Each step (odd
 * multiply-add and xorshift, modulo 2^k) is a bijection of [0, 2^k), so
 * cycle walking gives a bijection of [0, rows); fewer than two rounds are
 * needed on average since rows > 2^(k-1).
 */

void synth__perm_init(struct perm *p, uint64_t rows, struct rng *r)
{
    int k = 1;

    while (k < 63 && ((uint64_t)1 << k) < rows)
        k++;
    p->rows = rows;
    p->mask = ((uint64_t)1 << k) - 1;
    p->a = rng_next(r) | 1;
    p->b = rng_next(r) | 1;
    p->c = rng_next(r);
    p->shift = (k + 1) / 2;
}

uint64_t synth__perm_apply(const struct perm *p, uint64_t x)
{
    do {
        x = (x * p->a + p->c) & p->mask;
        x ^= x >> p->shift;
        x = (x * p->b) & p->mask;
        x ^= x >> p->shift;
    } while (x >= p->rows);
    return x;
}

/* ------------------------------------------------------------------------ */
/* Zipf sampling by rejection-inversion                                      */

/*
 * Hörmann and Derflinger, "Rejection-inversion to generate variates from
 * monotone discrete distributions" (ACM TOMACS 1996), as in Apache Commons
 * RNG's RejectionInversionZipfSampler: P(k) proportional to k^-s on
 * {1, .., n}, O(1) expected time per sample for any n and s > 0.
 *
 * A uniform u on (h_x1, h_n] is mapped through the inverse of the integral
 * H of x^-s; rank k owns the interval (H(k - 0.5), H(k + 0.5)] of u (rank 1:
 * (h_x1, H(1.5)]) and accepts u >= H(k + 0.5) - k^-s.  Computing H^-1 costs
 * a log1p and an exp, so the first `nhead` ranks, which take most of the
 * samples, are tabulated: their interval ends, acceptance thresholds and
 * rows, found through a guide table (Chen and Asau 1974).  The tabulated and
 * the computed path draw from the same intervals, so the samples have the
 * same distribution either way.
 */


/* log1p(x) / x, continuous at 0. */
static double helper1(double x)
{
    if (fabs(x) > 1e-8)
        return log1p(x) / x;
    return 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}

/* expm1(x) / x, continuous at 0. */
static double helper2(double x)
{
    if (fabs(x) > 1e-8)
        return expm1(x) / x;
    return 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
}

/* The density x^-s, its integral H(x) = (x^(1-s) - 1) / (1 - s) and H^-1. */
static double zipf_h(const struct zipf *z, double x)
{
    return exp(-z->s * log(x));
}

static double zipf_hint(const struct zipf *z, double x)
{
    double lx = log(x);

    return helper2((1.0 - z->s) * lx) * lx;
}

static double zipf_hinv(const struct zipf *z, double x)
{
    double t = x * (1.0 - z->s);

    if (t < -1.0)
        t = -1.0; /* rounding; the exact value is >= -1 */
    return exp(helper1(t) * x);
}

/*
 * Prepares sampling of ranks 1..n with exponent s, mapped to rows by perm,
 * with up to nhead ranks tabulated.  Returns 0 or SD_ENOMEM.
 */
int synth__zipf_init(struct zipf *z, double s, uint64_t n, size_t nhead,
                     const struct perm *perm)
{
    size_t k, g, nguide;
    double lo;

    z->s = s;
    z->n = (double)n;
    z->h_x1 = zipf_hint(z, 1.5) - 1.0;
    z->h_n = zipf_hint(z, z->n + 0.5);
    z->s_accept = 2.0 - zipf_hinv(z, zipf_hint(z, 2.5) - zipf_h(z, 2.0));
    z->perm = perm;
    z->nhead = nhead < n ? nhead : (size_t)n;
    if (z->nhead < 1)
        z->nhead = 1;
    nguide = z->nhead * 4;
    z->head = malloc(z->nhead * sizeof(*z->head));
    z->nguide = nguide;
    z->guide = malloc(nguide * sizeof(*z->guide));
    if (z->head == NULL || z->guide == NULL) {
        free(z->head);
        free(z->guide);
        return SD_ENOMEM;
    }
    for (k = 1; k <= z->nhead; k++) {
        z->head[k - 1].edge = zipf_hint(z, (double)k + 0.5);
        z->head[k - 1].accept =
            k == 1 ? z->h_x1 : z->head[k - 1].edge - zipf_h(z, (double)k);
        z->head[k - 1].row = (int64_t)synth__perm_apply(perm, k - 1);
    }
    /* Rank n's interval ends at h_n exactly, as in the computed path. */
    if (z->nhead == n)
        z->head[n - 1].edge = z->h_n;
    z->guide_scale = (double)nguide / (z->head[z->nhead - 1].edge - z->h_x1);
    for (g = 0, k = 0; g < nguide; g++) {
        lo = z->h_x1 + (double)g / z->guide_scale;
        while (k + 1 < z->nhead && z->head[k].edge < lo)
            k++;
        z->guide[g] = (uint32_t)k;
    }
    return 0;
}

void synth__zipf_destroy(struct zipf *z)
{
    free(z->head);
    free(z->guide);
}

/* A row: rank k in [1, n] drawn, then mapped through the permutation. */
int64_t synth__zipf_sample(const struct zipf *z, struct rng *r)
{
    const struct zipf_rank *head = z->head;
    double u, x, k, gd, top = head[z->nhead - 1].edge;
    size_t g, i;

    for (;;) {
        u = z->h_n + rng_uniform(r) * (z->h_x1 - z->h_n);
        if (u <= top) {
            /* u - h_x1 may round below 0; a negative double must not be
             * converted to size_t. */
            gd = (u - z->h_x1) * z->guide_scale;
            g = gd > 0.0 ? (size_t)gd : 0;
            i = z->guide[g < z->nguide ? g : z->nguide - 1];
            while (u > head[i].edge && i + 1 < z->nhead)
                i++;
            if (u >= head[i].accept)
                return head[i].row;
            continue;
        }
        x = zipf_hinv(z, u);
        k = floor(x + 0.5);
        if (k < 1.0)
            k = 1.0;
        else if (k > z->n)
            k = z->n;
        if (k - x <= z->s_accept || u >= zipf_hint(z, k + 0.5) - zipf_h(z, k))
            return (int64_t)synth__perm_apply(z->perm, (uint64_t)k - 1);
    }
}

/* ------------------------------------------------------------------------ */
/* One table                                                                 */

/* What is drawn for a table before its lookups are. */
struct synth_shape {
    bool empty;
    int32_t dim;
    int64_t rows;
    double pf;      /* expected bag length */
    double zipf_s;  /* popularity exponent */
    uint64_t vocab; /* distinct values, <= rows */
};

/* The point a fraction u of the way from lo to hi. */
static double uniform_in(double lo, double hi, double u)
{
    return lo + (hi - lo) * u;
}

/*
 * Draws a table's shape.  Every draw is made in the same order for every
 * table, empty or not, so that the stream is easy to reason about.
 */
static void draw_shape(struct rng *r, struct synth_shape *sh)
{
    static const int32_t dims[] = {4, 8, 16, 32, 64, 128};
    /* Accessed tables alone: mean and std with the empty ones taken out. */
    double m = (SYNTH_ROWS_MEAN - SYNTH_P_EMPTY * SYNTH_ROWS_EMPTY) /
               (1.0 - SYNTH_P_EMPTY);
    double m2 =
        (SYNTH_ROWS_STD * SYNTH_ROWS_STD + SYNTH_ROWS_MEAN * SYNTH_ROWS_MEAN -
         SYNTH_P_EMPTY * SYNTH_ROWS_EMPTY * SYNTH_ROWS_EMPTY) /
        (1.0 - SYNTH_P_EMPTY);
    double var = m2 - m * m;
    double rows, pf, u_s, u_f, f;
    bool skewed;

    sh->empty = rng_uniform(r) < SYNTH_P_EMPTY;
    sh->dim = dims[rng_below(r, sizeof(dims) / sizeof(dims[0]))];
    /* Gamma with the accessed tables' mean and variance: shape m^2 / var,
     * scale var / m. */
    rows = rng_gamma(r, m * m / var) * (var / m);
    rows = floor(rows + 0.5);
    if (rows < SYNTH_ROWS_MIN)
        rows = SYNTH_ROWS_MIN;
    if (rows > (double)((int64_t)1 << 40))
        rows = (double)((int64_t)1 << 40);
    sh->rows = (int64_t)rows;
    do {
        pf = exp(SYNTH_PF_LOG_MU + SYNTH_PF_LOG_SIGMA * rng_normal(r));
    } while (pf > SYNTH_PF_MAX);
    sh->pf = pf;
    skewed = rng_uniform(r) < SYNTH_P_SKEWED;
    u_s = rng_uniform(r);
    u_f = rng_uniform(r);
    if (skewed) {
        sh->zipf_s = uniform_in(SYNTH_SKEWED_S_MIN, SYNTH_SKEWED_S_MAX, u_s);
        f = uniform_in(SYNTH_SKEWED_F_MIN, SYNTH_SKEWED_F_MAX, u_f);
    } else {
        sh->zipf_s = uniform_in(SYNTH_FLAT_S_MIN, SYNTH_FLAT_S_MAX, u_s);
        f = uniform_in(SYNTH_FLAT_F_MIN, SYNTH_FLAT_F_MAX, u_f);
    }
    sh->vocab = (uint64_t)floor(exp(f * log(rows)));
    if (sh->vocab < 1)
        sh->vocab = 1;
    if (sh->vocab > (uint64_t)sh->rows)
        sh->vocab = (uint64_t)sh->rows;
    if (sh->empty) {
        sh->rows = SYNTH_ROWS_EMPTY;
        sh->pf = 0.0;
    }
}

/*
 * Bag lengths: geometric on {0, 1, ..} with mean pf, by inversion.  Fills
 * offsets[0 .. nbags] and returns the total.
 */
int64_t synth__draw_offsets(struct rng *r, double pf, int64_t nbags,
                            int64_t *offsets)
{
    double lq = pf > 0.0 ? -log1p(1.0 / pf) : 0.0; /* log(pf / (1 + pf)) */
    double len;
    int64_t b;

    offsets[0] = 0;
    for (b = 0; b < nbags; b++) {
        len = 0.0;
        if (lq < 0.0)
            len = floor(log(1.0 - rng_uniform(r)) / lq);
        /* Even u = 1 - 2^-53 gives under 10^4 at SYNTH_PF_MAX; the clamp
         * only guards the conversion. */
        if (len > 1e6)
            len = 1e6;
        offsets[b + 1] = offsets[b] + (int64_t)len;
    }
    return offsets[nbags];
}

static int check_params(const struct synth_params *p)
{
    if (p == NULL || p->batch_size < 1 || p->batch_size > SYNTH_BATCH_MAX)
        return SD_EINVAL;
    return 0;
}

/*
 * Ranks tabulated for a trace of n lookups: tabulating costs about as much
 * per rank as computing one sample, so at most a quarter of the lookups, and
 * the table stays within a core's L2 cache.
 */
size_t synth__head_size(int64_t nindices)
{
    int64_t nhead = nindices / 4 + 256;

    return (uint64_t)nhead < SYNTH_HEAD_MAX ? (size_t)nhead : SYNTH_HEAD_MAX;
}

int synth_table_shape(const struct synth_params *p, size_t i, struct table *out)
{
    struct synth_shape sh;
    struct rng r;

    if (check_params(p) != 0)
        return SD_EINVAL;
    rng_seed(&r, rng_derive(p->seed, (uint64_t)i));
    draw_shape(&r, &sh);
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "table_%04zu", i);
    out->rows = sh.rows;
    out->dim = sh.dim;
    out->pooling_factor = sh.pf;
    out->dtype = TABLE_DTYPE_FP32;
    return 0;
}

int synth_trace(const struct synth_params *p, size_t i, struct trace *out)
{
    struct synth_shape sh;
    struct trace t;
    struct zipf z;
    struct perm pm;
    struct rng r;
    int64_t j;
    int rv;

    if (check_params(p) != 0)
        return SD_EINVAL;
    memset(&t, 0, sizeof(t));
    rng_seed(&r, rng_derive(p->seed, (uint64_t)i));
    draw_shape(&r, &sh);
    synth__perm_init(&pm, (uint64_t)sh.rows, &r);
    snprintf(t.name, sizeof(t.name), "table_%04zu", i);
    t.rows = sh.rows;
    t.dim = sh.dim;
    t.nbags = p->batch_size;
    t.offsets = malloc((size_t)(t.nbags + 1) * sizeof(*t.offsets));
    if (t.offsets == NULL)
        return SD_ENOMEM;
    t.nindices = synth__draw_offsets(&r, sh.pf, t.nbags, t.offsets);
    if (t.nindices > 0) {
        t.indices = malloc((size_t)t.nindices * sizeof(*t.indices));
        if (t.indices == NULL) {
            rv = SD_ENOMEM;
            goto out_destroy_trace;
        }
        rv = synth__zipf_init(&z, sh.zipf_s, sh.vocab,
                              synth__head_size(t.nindices), &pm);
        if (rv != 0)
            goto out_destroy_trace;
        for (j = 0; j < t.nindices; j++)
            t.indices[j] = synth__zipf_sample(&z, &r);
        synth__zipf_destroy(&z);
    }
    *out = t;
    return 0;

out_destroy_trace:
    trace_destroy(&t);
    return rv;
}

/* ------------------------------------------------------------------------ */
/* Many tables, on worker threads                                            */

/* The pool's work: tables [0, count) by one(), the first error kept. */
struct make_job {
    formats__table_fn one;
    const void *ctx;
    size_t count;
    struct table *tables;
    atomic_size_t next; /* next table to make */
    atomic_int err;     /* first error, 0 while none */
};

static void *make_worker(void *arg)
{
    struct make_job *job = arg;
    size_t i;
    int rv, none;

    while (atomic_load(&job->err) == 0) {
        i = atomic_fetch_add(&job->next, 1);
        if (i >= job->count)
            break;
        rv = job->one(job->ctx, i, &job->tables[i]);
        if (rv != 0) {
            none = 0;
            atomic_compare_exchange_strong(&job->err, &none, rv);
        }
    }
    return NULL;
}

int formats__make_tables(size_t count, unsigned threads, formats__table_fn one,
                         const void *ctx, struct table **out)
{
    pthread_t tid[FORMATS_THREADS_MAX];
    struct make_job job;
    unsigned nt, started = 0;
    int rv;

    nt = threads == 0 ? 1 : threads;
    if (nt > FORMATS_THREADS_MAX)
        nt = FORMATS_THREADS_MAX;
    if (nt > count)
        nt = (unsigned)count;
    job.one = one;
    job.ctx = ctx;
    job.count = count;
    job.tables = calloc(count ? count : 1, sizeof(*job.tables));
    if (job.tables == NULL)
        return SD_ENOMEM;
    atomic_init(&job.next, 0);
    atomic_init(&job.err, 0);
    /* The calling thread is worker 0; a thread that fails to start only
     * leaves its share to the others. */
    while (started + 1 < nt &&
           pthread_create(&tid[started], NULL, make_worker, &job) == 0)
        started++;
    make_worker(&job);
    while (started > 0)
        pthread_join(tid[--started], NULL);
    rv = atomic_load(&job.err);
    if (rv != 0) {
        free(job.tables);
        return rv;
    }
    *out = job.tables;
    return 0;
}

/* Makes table i of the synth_params at ctx: its trace, then the trace's
 * features. */
static int synth_one(const void *ctx, size_t i, struct table *out)
{
    struct trace t;
    int rv;

    rv = synth_trace(ctx, i, &t);
    if (rv != 0)
        return rv;
    rv = trace_to_table(&t, out);
    trace_destroy(&t);
    return rv;
}

int synth_tables(const struct synth_params *p, unsigned threads,
                 struct table **out)
{
    if (check_params(p) != 0 || p->count == 0 || p->count > SYNTH_COUNT_MAX)
        return SD_EINVAL;
    return formats__make_tables(p->count, threads, synth_one, p, out);
}
