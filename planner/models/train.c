/*
 * Training of the neural compute cost model (models.h, net.c): fits the
 * per-table MLP and the shard head to measured shard times with Adam on the
 * squared error of log(predicted ms) - log(measured ms), the prediction
 * being softplus of the head's output as in net_head_z(), and keeps the
 * weights of the epoch with the best validation loss.  A prior model's
 * (derived inputs with physical terms, models.h NET_ACT_PRIOR) fits the
 * prior first (fit_prior(), prior.c) and the head to the ratio of the
 * measured time to it, through squareplus, its reserved units pinned.
 *
 * Why it looks the way it does:
 *  - The table MLP runs once per table of every shard in a minibatch, so its
 *    three big products (forward H1 = X W1^T, L = H1 W2^T; backward dW1,
 *    dW2, dH1) are single sgemm calls over all the minibatch's tables
 *    gathered into one matrix; the head, one row per shard, is small.
 *    Every product goes through the train_params' gemm hook (models.h):
 *    CBLAS by default, a device's (cuBLAS) when the caller gives one.
 *  - Features are computed and z-scored once, after the training split's
 *    mean and std are known, with exactly the float operations of
 *    net_input(), so what the model was fitted on is what it is asked.
 *  - Decoupled weight decay (AdamW, Loshchilov and Hutter 2019) on the
 *    weight matrices, not the biases: with ~1,000 measured shards and ~9,000
 *    parameters plain Adam memorises the training split (on a real CPU
 *    profile, 928 samples: train MAPE 0.18, validation and test 0.42);
 *    weight_decay 1.0 brings both held-out MAPEs to ~0.27.  With 5,000 and
 *    more, 0.3 fits better (train_decay()).  Biases are left
 *    alone because the output bias carries the profile's time scale.
 *  - Everything random comes from one seeded struct rng and nothing runs
 *    in parallel here: a seed and a sample order give bitwise-identical
 *    weights (with a BLAS whose sgemm is itself deterministic, as the
 *    reference netlib one is).
 */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/models_int.h"
#include "problem/problem.h"
#include "shardd/sort.h"

#define ADAM_BETA1        0.9
#define ADAM_BETA2        0.999
#define ADAM_EPS          1e-8f
#define TRAIN_MIN_SAMPLES 10

static int cblas_hook(void *ctx, bool trans_a, bool trans_b, int m, int n,
                      int k, float alpha, const float *a, int lda,
                      const float *b, int ldb, float beta, float *c, int ldc)
{
    (void)ctx;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
                ldb, beta, c, ldc);
    return 0;
}

const struct net_gemm net_gemm_cblas = {"cblas", cblas_hook, NULL};

void train_params_default(struct train_params *p)
{
    p->seed = 0;
    p->max_epochs = 400;
    p->patience = 40;
    p->batch = 128;
    p->lr = 2e-3;
    p->weight_decay = TRAIN_DECAY_BY_SAMPLES;
    p->val_frac = 0.1;
    p->test_frac = 0.1;
    p->progress = NULL;
    p->ctx = NULL;
    p->gemm = NULL;
    p->member = 0;
    p->split = NULL;
    memset(&p->extras, 0, sizeof(p->extras)); /* NeuroShard's 20 alone */
}

double net_mape(const struct cost_net *m, const struct train_sample *s,
                size_t n)
{
    double sum = 0;
    size_t i;

    if (n == 0)
        return 0;
    for (i = 0; i < n; i++)
        sum += fabs(net_tables_ms(m, s[i].tables, s[i].ntables) - s[i].ms) /
               s[i].ms;
    return sum / (double)n;
}

int net_errors(const double *pred, const double *meas, size_t n,
               struct net_errors *out)
{
    double *ape, *err, sum = 0;
    size_t i;

    if (n == 0)
        return SD_EINVAL;
    ape = malloc(2 * n * sizeof(*ape));
    if (ape == NULL)
        return SD_ENOMEM;
    err = ape + n;
    for (i = 0; i < n; i++) {
        err[i] = (pred[i] - meas[i]) / meas[i];
        ape[i] = fabs(err[i]);
        sum += ape[i];
    }
    qsort(ape, n, sizeof(*ape), sd_cmp_double);
    qsort(err, n, sizeof(*err), sd_cmp_double);
    out->n = n;
    out->mape = sum / (double)n;
    out->median = ape[n / 2];
    out->p90 = ape[(size_t)(0.9 * (double)(n - 1))];
    out->signed_median = err[n / 2];
    free(ape);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Minibatch forward and backward passes                                     */

/*
 * Where each layer lies in the trainer's parameter array: models.h's
 * NET_W1 .. NET_B4 for NeuroShard's 20 inputs.  A model with derived
 * inputs has a W1 of nin columns, and everything after it moves by their
 * columns; net_train() copies the result into the model's p and xw.
 */
struct layout {
    int nin;
    size_t w1, b1, w2, b2, w3, b3, w4, b4, n;
};

static void layout_of(struct layout *l, int nin)
{
    l->nin = nin;
    l->w1 = 0;
    l->b1 = l->w1 + (size_t)NET_H1 * nin;
    l->w2 = l->b1 + NET_H1;
    l->b2 = l->w2 + NET_LAT * NET_H1;
    l->w3 = l->b2 + NET_LAT;
    l->b3 = l->w3 + NET_H2 * NET_LAT;
    l->w4 = l->b3 + NET_H2;
    l->b4 = l->w4 + NET_H2;
    l->n = l->b4 + 1;
}

/*
 * Scratch for one minibatch: every matrix is row-major, one row per table of
 * the minibatch (x .. dh1) or per shard (lsum .. out).  Sized for the most
 * tables any minibatch can hold (work_floats()).
 */
struct work {
    float *x;     /* [rows][nin] gathered normalised inputs */
    float *h1;    /* [rows][NET_H1] after ReLU */
    float *lat;   /* [rows][NET_LAT] after ReLU */
    float *dlat;  /* [rows][NET_LAT] loss gradient before ReLU */
    float *dh1;   /* [rows][NET_H1] loss gradient before ReLU */
    float *lsum;  /* [shards][NET_LAT] latent sums */
    float *z;     /* [shards][NET_H2] after ReLU */
    float *dlsum; /* [shards][NET_LAT] loss gradient of lsum */
    float *dz;    /* [shards][NET_H2] loss gradient before ReLU */
    float *out;   /* [shards] head output: softplus(out) = ms, or a prior
                   * model's squareplus(out) = ms / physical ms */
    const struct net_gemm *g; /* where the products run */
    const struct layout *l;   /* of the parameters, and nin */
    int err; /* the first failed product's code (0: none); the passes'
              * results are garbage once it is set */
};

/* w's product C = op(A) op(B) through the hook; after a failure the rest
 * are skipped and w->err keeps the first code. */
static void mm(struct work *w, bool ta, bool tb, int m, int n, int k,
               const float *a, int lda, const float *b, int ldb, float *c,
               int ldc)
{
    if (w->err == 0)
        w->err = w->g->sgemm(w->g->ctx, ta, tb, m, n, k, 1.0f, a, lda, b, ldb,
                             0.0f, c, ldc);
}

/* Floats in a work area for `rows` tables and `shards` shards, or 0 when
 * that many would overflow a size_t of bytes. */
static size_t work_floats(size_t rows, size_t shards)
{
    const size_t per_row = NET_IN_MAX + 2 * NET_H1 + 2 * NET_LAT;
    const size_t per_shard = 2 * NET_LAT + 2 * NET_H2 + 1;
    const size_t max = SIZE_MAX / sizeof(float);

    if (rows > max / per_row || shards > max / per_shard ||
        rows * per_row > max - shards * per_shard)
        return 0;
    return rows * per_row + shards * per_shard;
}

/* Carves a work area out of one block of work_floats(rows, shards). */
static void work_carve(struct work *w, float *block, size_t rows, size_t shards)
{
    w->x = block;
    w->h1 = w->x + rows * NET_IN_MAX;
    w->lat = w->h1 + rows * NET_H1;
    w->dlat = w->lat + rows * NET_LAT;
    w->dh1 = w->dlat + rows * NET_LAT;
    w->lsum = w->dh1 + rows * NET_H1;
    w->z = w->lsum + shards * NET_LAT;
    w->dlsum = w->z + shards * NET_H2;
    w->dz = w->dlsum + shards * NET_LAT;
    w->out = w->dz + shards * NET_H2;
}

/* The training set seen by the passes: samples in split order and the
 * normalised inputs of their tables, sample k's at rows off[k] ..
 * off[k + 1] of x. */
struct dataset {
    const struct train_sample *ord;
    const size_t *off;
    const float *x;     /* [tables][nin] */
    const double *phys; /* a prior model's: sample k's physical ms; or NULL */
};

/* What the head learns of sample k: its ms, or of a prior model (NET_ACT_PRIOR)
 * the ratio of its ms to the prior's, whose relative error is the model's. */
static double label(const struct dataset *ds, size_t k)
{
    return ds->phys != NULL ? ds->ord[k].ms / ds->phys[k] : ds->ord[k].ms;
}

/* What the head's output o predicts of a label: softplus(o), or of a
 * prior model (ds->phys) squareplus(o). */
static double act(const struct dataset *ds, double o)
{
    return ds->phys != NULL ? net_squareplus(o) : net_softplus(o);
}

/* log(act(o)), exact also where softplus(o) underflows to 0. */
static double log_act(const struct dataset *ds, double o)
{
    return ds->phys == NULL && o < -30 ? o : log(act(ds, o));
}

/* The derivative of log_act(): sigmoid(o) / softplus(o), or
 * squareplus'(o) / squareplus(o) = 1 / sqrt(o^2 + 4). */
static double dlog_act(const struct dataset *ds, double o)
{
    if (ds->phys != NULL)
        return 1 / sqrt(o * o + 4);
    return o < -30 ? 1 : 1 / (1 + exp(-o)) / net_softplus(o);
}

/* Adds b to every row of an [n][cols] matrix and applies ReLU. */
static void bias_relu(float *y, const float *b, size_t n, int cols)
{
    size_t r;
    int c;

    for (r = 0; r < n; r++) {
        float *row = y + r * (size_t)cols;

        for (c = 0; c < cols; c++) {
            float v = row[c] + b[c];

            row[c] = v > 0 ? v : 0;
        }
    }
}

/*
 * Forward pass of shards pos[0 .. nb) of ds with parameters p: fills every
 * activation of w and w->out.  The caller guarantees the shards' tables fit
 * the work area (at most INT_MAX of them).  Returns the number of tables.
 */
static int forward(const float *p, const struct dataset *ds, const size_t *pos,
                   size_t nb, struct work *w)
{
    const struct layout *l = w->l;
    const int nin = l->nin;
    size_t b, r = 0, rows;
    int o, c;

    for (b = 0; b < nb; b++) {
        size_t k = pos[b], nt = ds->off[k + 1] - ds->off[k];

        memcpy(w->x + r * nin, ds->x + ds->off[k] * nin,
               nt * nin * sizeof(float));
        r += nt;
    }
    rows = r;

    /* The table MLP over every table of the minibatch at once. */
    mm(w, false, true, (int)rows, NET_H1, nin, w->x, nin, p + l->w1, nin, w->h1,
       NET_H1);
    bias_relu(w->h1, p + l->b1, rows, NET_H1);
    mm(w, false, true, (int)rows, NET_LAT, NET_H1, w->h1, NET_H1, p + l->w2,
       NET_H1, w->lat, NET_LAT);
    bias_relu(w->lat, p + l->b2, rows, NET_LAT);

    /* Segment sums: shard b's latent is the sum over its tables. */
    memset(w->lsum, 0, nb * NET_LAT * sizeof(float));
    r = 0;
    for (b = 0; b < nb; b++) {
        size_t k = pos[b], end = r + ds->off[k + 1] - ds->off[k];
        float *sb = w->lsum + b * NET_LAT;

        for (; r < end; r++)
            for (c = 0; c < NET_LAT; c++)
                sb[c] += w->lat[r * NET_LAT + c];
    }

    /* The head, one row per shard. */
    mm(w, false, true, (int)nb, NET_H2, NET_LAT, w->lsum, NET_LAT, p + l->w3,
       NET_LAT, w->z, NET_H2);
    bias_relu(w->z, p + l->b3, nb, NET_H2);
    for (b = 0; b < nb; b++) {
        float v = p[l->b4];

        for (o = 0; o < NET_H2; o++)
            v += p[l->w4 + o] * w->z[b * NET_H2 + o];
        w->out[b] = v;
    }
    return (int)rows;
}

/* Adds the column sums of an [n][cols] matrix to g. */
static void add_col_sums(float *g, const float *y, size_t n, int cols)
{
    size_t r;
    int c;

    for (c = 0; c < cols; c++)
        g[c] = 0;
    for (r = 0; r < n; r++)
        for (c = 0; c < cols; c++)
            g[c] += y[r * (size_t)cols + c];
}

/*
 * Backward pass after forward() over the same shards: writes into g (every
 * entry, w->l->n) the gradient of mean((log_act(out) - log ms)^2)
 * over the nb shards, and returns the sum of their squared errors.
 */
static double backward(const float *p, const struct dataset *ds,
                       const size_t *pos, size_t nb, int rows, struct work *w,
                       float *g)
{
    const struct layout *l = w->l;
    const int nin = l->nin;
    double sse = 0;
    size_t b, r;
    int o, c;

    g[l->b4] = 0;
    for (o = 0; o < NET_H2; o++)
        g[l->w4 + o] = 0;
    for (b = 0; b < nb; b++) {
        double y = w->out[b];
        double e = log_act(ds, y) - log(label(ds, pos[b]));
        float dout = (float)(2.0 * e * dlog_act(ds, y) / (double)nb);
        const float *zb = w->z + b * NET_H2;
        float *dzb = w->dz + b * NET_H2;

        sse += e * e;
        g[l->b4] += dout;
        for (o = 0; o < NET_H2; o++) {
            g[l->w4 + o] += dout * zb[o];
            dzb[o] = zb[o] > 0 ? dout * p[l->w4 + o] : 0;
        }
    }

    /* Head: dW3 = dZ^T S, dS = dZ W3. */
    mm(w, true, false, NET_H2, NET_LAT, (int)nb, w->dz, NET_H2, w->lsum,
       NET_LAT, g + l->w3, NET_LAT);
    add_col_sums(g + l->b3, w->dz, nb, NET_H2);
    mm(w, false, false, (int)nb, NET_LAT, NET_H2, w->dz, NET_H2, p + l->w3,
       NET_LAT, w->dlsum, NET_LAT);

    /* Every table of a shard gets the shard's dS, through its ReLU. */
    r = 0;
    for (b = 0; b < nb; b++) {
        size_t k = pos[b], end = r + ds->off[k + 1] - ds->off[k];
        const float *dsb = w->dlsum + b * NET_LAT;

        for (; r < end; r++)
            for (c = 0; c < NET_LAT; c++)
                w->dlat[r * NET_LAT + c] =
                    w->lat[r * NET_LAT + c] > 0 ? dsb[c] : 0;
    }

    /* Table MLP: dW2 = dL^T H1, dH1 = dL W2 (through ReLU), dW1 = dH1^T X. */
    mm(w, true, false, NET_LAT, NET_H1, rows, w->dlat, NET_LAT, w->h1, NET_H1,
       g + l->w2, NET_H1);
    add_col_sums(g + l->b2, w->dlat, (size_t)rows, NET_LAT);
    mm(w, false, false, rows, NET_H1, NET_LAT, w->dlat, NET_LAT, p + l->w2,
       NET_H1, w->dh1, NET_H1);
    for (r = 0; r < (size_t)rows * NET_H1; r++)
        if (!(w->h1[r] > 0))
            w->dh1[r] = 0;
    mm(w, true, false, NET_H1, nin, rows, w->dh1, NET_H1, w->x, nin, g + l->w1,
       nin);
    add_col_sums(g + l->b1, w->dh1, (size_t)rows, NET_H1);
    return sse;
}

/*
 * Loss (mean squared error of log ms, as backward()) and MAPE of p over
 * shards first .. first + n of ds, in minibatches of at most `batch`.
 */
static void evaluate(const float *p, const struct dataset *ds, size_t *pos,
                     size_t first, size_t n, size_t batch, struct work *w,
                     double *loss, double *mape)
{
    double sse = 0, ape = 0;
    size_t i, b, nb;

    for (i = 0; i < n; i += nb) {
        nb = n - i < batch ? n - i : batch;
        for (b = 0; b < nb; b++)
            pos[b] = first + i + b;
        forward(p, ds, pos, nb, w);
        for (b = 0; b < nb; b++) {
            double ms = label(ds, pos[b]);
            double e = log_act(ds, w->out[b]) - log(ms);

            sse += e * e;
            ape += fabs(act(ds, w->out[b]) - ms) / ms;
        }
    }
    *loss = n ? sse / (double)n : 0;
    *mape = n ? ape / (double)n : 0;
}

/* ------------------------------------------------------------------------ */
/* Training                                                                  */

/* The parameters, optimiser state and best weights (l.n floats each, ~140
 * KiB) and every table's normalised inputs, in one block. */
struct adam {
    struct layout l;
    float *p;    /* the parameters being trained */
    float *g;    /* gradient of the current minibatch */
    float *m;    /* first moment */
    float *v;    /* second moment */
    float *best; /* the best epoch's parameters */
    float *x;    /* [tables][nin] */
};

void models__adam(float *p, const float *g, float *m, float *v, size_t n,
                  int64_t step, double lr)
{
    /* Bias-corrected moments. */
    float c1 = (float)(1.0 / (1.0 - pow(ADAM_BETA1, (double)step)));
    float c2 = (float)(1.0 / (1.0 - pow(ADAM_BETA2, (double)step)));
    float b1 = (float)ADAM_BETA1, b2 = (float)ADAM_BETA2, lrf = (float)lr;
    size_t i;

    for (i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        p[i] -= lrf * (m[i] * c1) / (sqrtf(v[i] * c2) + ADAM_EPS);
    }
}

/* The state of a model of nin inputs and room for the inputs of ntables
 * tables (bounded in check_samples), zeroed, in one allocation (free());
 * NULL when memory is short. */
static struct adam *adam_new(int nin, size_t ntables)
{
    struct layout l;
    struct adam *a;

    layout_of(&l, nin);
    a = calloc(1,
               sizeof(*a) + (5 * l.n + ntables * (size_t)nin) * sizeof(float));
    if (a == NULL)
        return NULL;
    a->l = l;
    a->p = (float *)(a + 1);
    a->g = a->p + l.n;
    a->m = a->g + l.n;
    a->v = a->m + l.n;
    a->best = a->v + l.n;
    a->x = a->best + l.n;
    return a;
}

static void adam_step(struct adam *a, int64_t step, double lr,
                      double weight_decay)
{
    /* Decoupled decay (AdamW): w -= lr * wd * w, apart from the Adam step
     * and from the loss, so the gradient stays that of the honest loss.
     * The weight matrices' [begin, end): the biases between them are not
     * decayed. */
    const size_t ranges[][2] = {
        {a->l.w1, a->l.b1},
        {a->l.w2, a->l.b2},
        {a->l.w3, a->l.b3},
        {a->l.w4, a->l.b4},
    };
    float keep = (float)(1.0 - lr * weight_decay);
    size_t r, i;

    if (weight_decay > 0)
        for (r = 0; r < sizeof(ranges) / sizeof(ranges[0]); r++)
            for (i = ranges[r][0]; i < ranges[r][1]; i++)
                a->p[i] *= keep;
    models__adam(a->p, a->g, a->m, a->v, a->l.n, step, lr);
}

void models__init_layer(struct rng *g, float *w, int nout, int nin)
{
    double bound = sqrt(6.0 / nin);
    int i;

    for (i = 0; i < nout * nin; i++)
        w[i] = (float)((2.0 * rng_uniform(g) - 1.0) * bound);
}

void models__shuffle(struct rng *g, size_t *a, size_t n)
{
    size_t i, j, t;

    for (i = n; i > 1; i--) {
        j = (size_t)rng_below(g, i);
        t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

size_t models__split_count(size_t n, double frac)
{
    size_t k = (size_t)llround((double)n * frac);

    return frac > 0 && k == 0 ? 1 : k;
}

static int cmp_size_desc(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;

    return (x < y) - (x > y);
}

int train_params_check(const struct train_params *p, struct sd_diag *d)
{
    if (p->max_epochs < 1)
        return sd_diag_set(d, SD_EINVAL, "train: max_epochs %d is not >= 1",
                           (int)p->max_epochs);
    if (p->patience < 1)
        return sd_diag_set(d, SD_EINVAL, "train: patience %d is not >= 1",
                           (int)p->patience);
    if (p->batch < 1)
        return sd_diag_set(d, SD_EINVAL, "train: batch %d is not >= 1",
                           (int)p->batch);
    if (!isfinite(p->lr) || !(p->lr > 0))
        return sd_diag_set(d, SD_EINVAL,
                           "train: lr %g is not a finite number > 0", p->lr);
    /* lr * weight_decay < 1: one step's decay must shrink, not flip, the
     * weights (by sample count: at most 1.0). */
    if (p->weight_decay != TRAIN_DECAY_BY_SAMPLES &&
        (!isfinite(p->weight_decay) || !(p->weight_decay >= 0) ||
         !(p->lr * p->weight_decay < 1)))
        return sd_diag_set(d, SD_EINVAL,
                           "train: weight_decay %g is not a finite number >= 0 "
                           "below 1 / lr",
                           p->weight_decay);
    if (p->weight_decay == TRAIN_DECAY_BY_SAMPLES && !(p->lr < 1))
        return sd_diag_set(d, SD_EINVAL,
                           "train: lr %g is not below 1, which the weight "
                           "decay by sample count (up to 1.0) needs",
                           p->lr);
    if (!(p->val_frac >= 0 && p->val_frac < 0.5))
        return sd_diag_set(
            d, SD_EINVAL, "train: val_frac %g is not in [0, 0.5)", p->val_frac);
    if (!(p->test_frac >= 0 && p->test_frac < 0.5))
        return sd_diag_set(d, SD_EINVAL,
                           "train: test_frac %g is not in [0, 0.5)",
                           p->test_frac);
    if (!(p->val_frac + p->test_frac < 0.9))
        return sd_diag_set(d, SD_EINVAL,
                           "train: val_frac + test_frac = %g is not below 0.9",
                           p->val_frac + p->test_frac);
    return net_extras_check(&p->extras, "train: extras", d);
}

/* Checks every sample; sets *ntables to the tables of all of them. */
static int check_samples(const struct train_sample *s, size_t n,
                         size_t *ntables, struct sd_diag *d)
{
    struct sd_diag sub;
    size_t i, j, total = 0;
    int rv;

    if (n < TRAIN_MIN_SAMPLES)
        return sd_diag_set(d, SD_EINVAL,
                           "train: %zu samples, at least %d are needed", n,
                           TRAIN_MIN_SAMPLES);
    for (i = 0; i < n; i++) {
        if (s[i].ntables < 1 || s[i].tables == NULL)
            return sd_diag_set(d, SD_EINVAL,
                               "samples[%zu]: shard has no tables", i);
        if (!isfinite(s[i].ms) || !(s[i].ms > 0))
            return sd_diag_set(d, SD_EINVAL,
                               "samples[%zu]: ms %g is not a finite time > 0",
                               i, s[i].ms);
        for (j = 0; j < s[i].ntables; j++) {
            rv = table_validate(&s[i].tables[j], j, &sub);
            if (rv != 0)
                return sd_diag_set(d, rv, "samples[%zu]: %s", i, sub.msg);
        }
        if (s[i].ntables > SIZE_MAX / NET_IN_MAX / sizeof(float) - total)
            return sd_diag_set(d, SD_EINVAL, "train: too many tables in all");
        total += s[i].ntables;
    }
    *ntables = total;
    return 0;
}

/*
 * The most tables any `batch` samples can hold: the sum of the largest
 * `batch` counts.  Uses tmp (n entries) as scratch.  Returns 0 when it does
 * not fit an int, the dimension type of cblas_sgemm.
 */
static size_t max_batch_rows(const struct train_sample *s, size_t n,
                             size_t batch, size_t *tmp)
{
    size_t i, rows = 0;

    for (i = 0; i < n; i++)
        tmp[i] = s[i].ntables;
    qsort(tmp, n, sizeof(*tmp), cmp_size_desc);
    for (i = 0; i < batch && i < n; i++) {
        if (tmp[i] > (size_t)INT32_MAX - rows)
            return 0;
        rows += tmp[i];
    }
    return rows;
}

/* z-score constants of the training rows x[first .. first + n). */
static void fit_normaliser(struct cost_net *m, const float *x, int nin,
                           size_t first, size_t n)
{
    double mean, var;
    size_t r;
    int c;

    for (c = 0; c < nin; c++) {
        mean = 0;
        for (r = first; r < first + n; r++)
            mean += x[r * nin + c];
        mean /= (double)n;
        var = 0;
        for (r = first; r < first + n; r++) {
            double e = x[r * nin + c] - mean;

            var += e * e;
        }
        var = n > 1 ? var / (double)(n - 1) : 0;
        m->mean[c] = (float)mean;
        m->std[c] = sqrt(var) < 1e-6 ? 1.0f : (float)sqrt(var);
    }
}

/* One training run's state, borrowed from net_train(). */
struct trainer {
    const struct train_params *p;
    struct cost_net *m;
    struct adam *a;
    struct dataset ds;
    struct work w;
    struct rng g;
    size_t *pos;  /* n entries: the split shuffle, then epoch orders */
    size_t *boot; /* a member's bootstrap (ntrain entries), or NULL */
    size_t ntest; /* split order: test, validation, training */
    size_t nval;
    size_t ntrain;
    size_t first; /* position of the first training sample */
    size_t bmax;  /* largest minibatch */
    double decay; /* the weight decay (p's, or by the sample count) */
    /* A prior model's (p->extras has physical terms): each sample's
     * physical ms in split order (n entries), and the reserved units'
     * weights; phys NULL otherwise. */
    double *phys;
    struct models__prior prior;
};

/* Few samples need more decay against overfitting, many need less to
 * fit (models.h). */
double train_decay(const struct train_params *p, size_t n)
{
    if (p->weight_decay != TRAIN_DECAY_BY_SAMPLES)
        return p->weight_decay;
    return n < TRAIN_DECAY_SAMPLES ? 1.0 : 0.3;
}

/*
 * The physical prior of a prior model, from the features x (before they
 * are z-scored) of n samples in split order: its terms z-scored with mean
 * 0 and their root mean square over the training rows (so the reserved
 * units' weights are the coefficients scaled back), the coefficients
 * fitted on the training samples (each term's sum over a shard's tables,
 * and the pair term: tables x bag columns, where both are inputs), and
 * every sample's physical ms into t->phys.  0, or SD_EINVAL (no term fits,
 * or a sample the prior gives no time) or SD_ENOMEM, d says.
 */
static int fit_prior(struct trainer *t, const struct train_sample *ord,
                     const size_t *off, const float *x, size_t n,
                     struct sd_diag *d)
{
    struct cost_net *m = t->m;
    const struct net_extras *xs = &t->p->extras;
    const int nin = NET_IN + xs->n;
    const size_t r0 = off[t->first], r1 = off[n];
    double coef[NET_XMAX + 1], *terms, *ms;
    const int count_id = models__prior_count_id(xs);
    int col[NET_XMAX], nt = 0, ntab = -1, ncols = -1, nall, j, q;
    size_t k, r;
    int rv;

    for (j = 0; j < xs->n; j++)
        if (NET_X_IS_PHYS(xs->id[j])) {
            ntab = xs->id[j] == count_id ? nt : ntab;
            ncols = xs->id[j] == NET_X_PHYS_BAG_COLS ? nt : ncols;
            col[nt++] = NET_IN + j;
        }
    nall = nt + (ntab >= 0 && ncols >= 0); /* the pair term last */
    for (q = 0; q < nt; q++) {
        double ss = 0;

        for (r = r0; r < r1; r++)
            ss += (double)x[r * nin + col[q]] * x[r * nin + col[q]];
        ss = r1 > r0 ? sqrt(ss / (double)(r1 - r0)) : 0;
        m->mean[col[q]] = 0;
        m->std[col[q]] = ss > 1e-6 ? (float)ss : 1.0f;
    }
    terms = calloc(n * (size_t)nall, sizeof(*terms));
    ms = malloc(n * sizeof(*ms));
    if (terms == NULL || ms == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "train: out of memory");
        goto out_free;
    }
    for (k = 0; k < n; k++) {
        double *tk = terms + k * (size_t)nall;

        ms[k] = ord[k].ms;
        for (r = off[k]; r < off[k + 1]; r++)
            for (q = 0; q < nt; q++)
                tk[q] += x[r * nin + col[q]];
        if (nall > nt)
            tk[nt] = tk[ntab] * tk[ncols];
    }
    rv = models__prior_fit(terms + t->first * (size_t)nall, ms + t->first,
                           t->ntrain, nall, coef, d);
    if (rv != 0)
        goto out_free;
    for (k = 0; k < n; k++) {
        t->phys[k] = 0;
        for (q = 0; q < nall; q++)
            t->phys[k] += coef[q] * terms[k * (size_t)nall + q];
        if (!(t->phys[k] > 0)) {
            rv = sd_diag_set(d, SD_EINVAL,
                             "train: the physical prior gives a shard of %zu "
                             "tables (%.4g ms measured) no time; train without "
                             "the prior (--features v2)",
                             ord[k].ntables, ord[k].ms);
            goto out_free;
        }
    }
    /* The units add v x coefficient per table: their weights on x = v /
     * (std + eps) are the coefficient x (std + eps); the count and
     * columns units pass the raw counts, and the pair coefficient rides
     * on the count head unit. */
    memset(&t->prior, 0, sizeof(t->prior));
    for (q = 0; q < nt; q++)
        t->prior.base[col[q] - NET_IN] =
            (float)(coef[q] * ((double)m->std[col[q]] + 1e-6));
    if (nall > nt) {
        t->prior.count = (float)((double)m->std[col[ntab]] + 1e-6);
        t->prior.cols = (float)((double)m->std[col[ncols]] + 1e-6);
        t->prior.pair = (float)coef[nt];
    }
    t->ds.phys = t->phys;
out_free:
    free(ms);
    free(terms);
    return rv;
}

/*
 * Shuffles and splits the samples into ord[] (split order), computes every
 * table's features into x (rows off[k] .. off[k + 1] for ord[k]), fits the
 * z-score constants on the training rows (and a prior model's prior,
 * fit_prior()) and normalises every row.  0, or fit_prior()'s error.
 */
static int prepare(struct trainer *t, const struct train_sample *s, size_t n,
                   struct train_sample *ord, size_t *off, float *x,
                   struct sd_diag *d)
{
    struct cost_net *m = t->m;
    const int nin = t->a->l.nin;
    float f[NET_IN_MAX];
    size_t i, j, k;
    int c, rv;

    for (i = 0; i < n; i++)
        t->pos[i] = i;
    models__shuffle(&t->g, t->pos, n);
    if (t->p->split != NULL)
        for (k = 0; k < n; k++)
            t->p->split[t->pos[k]] = k < t->ntest ? TRAIN_SPLIT_TEST
                                     : k < t->ntest + t->nval
                                         ? TRAIN_SPLIT_VAL
                                         : TRAIN_SPLIT_TRAIN;
    if (t->p->member > 0) {
        /* A member's own stream from here on: its bootstrap of the
         * training split, its weights, its epoch orders. */
        size_t *boot = t->pos + t->first, ntr = t->ntrain;

        rng_seed(&t->g, rng_derive(t->p->seed, t->p->member));
        for (k = 0; k < ntr; k++)
            t->boot[k] = boot[rng_below(&t->g, ntr)];
        memcpy(boot, t->boot, ntr * sizeof(*boot));
    }
    off[0] = 0;
    for (k = 0; k < n; k++) {
        ord[k] = s[t->pos[k]];
        off[k + 1] = off[k] + ord[k].ntables;
    }
    /* m's features: format 1's, with its derived inputs after them. */
    m->x = t->p->extras;
    for (k = 0; k < n; k++)
        for (j = 0; j < ord[k].ntables; j++) {
            net_features_of(m, &ord[k].tables[j], ord[k].tables[j].dim, f);
            memcpy(x + (off[k] + j) * nin, f, (size_t)nin * sizeof(*f));
        }
    fit_normaliser(m, x, nin, off[t->first], off[n] - off[t->first]);
    rv = t->phys != NULL ? fit_prior(t, ord, off, x, n, d) : 0;
    if (rv != 0)
        return rv;
    /* The same float expression as net_input_all(), so the model is fitted
     * on exactly what it will be asked. */
    for (i = 0; i < off[n]; i++)
        for (c = 0; c < nin; c++)
            x[i * nin + c] =
                (x[i * nin + c] - m->mean[c]) / (m->std[c] + 1e-6f);
    t->ds.ord = ord;
    t->ds.off = off;
    t->ds.x = x;
    return 0;
}

/* The inverse of softplus, for y > 0. */
static double softplus_inv(double y)
{
    return y > 20 ? y : log(expm1(y));
}

/* He-uniform weights, zero biases, and the output bias where the initial
 * prediction is the training samples' geometric mean time, so the first
 * steps fit shape rather than scale. */
static void init_params(struct trainer *t)
{
    const struct layout *l = &t->a->l;
    float *p = t->a->p;
    double sum = 0;
    size_t k;

    models__init_layer(&t->g, p + l->w1, NET_H1, l->nin);
    models__init_layer(&t->g, p + l->w2, NET_LAT, NET_H1);
    models__init_layer(&t->g, p + l->w3, NET_H2, NET_LAT);
    models__init_layer(&t->g, p + l->w4, 1, NET_H2);
    if (t->phys != NULL)
        models__prior_pin(p, &t->p->extras, &t->prior);
    for (k = t->first; k < t->first + t->ntrain; k++)
        sum += log(label(&t->ds, k));
    /* squareplus(x) = y at x = y - 1 / y */
    sum = exp(sum / (double)t->ntrain);
    p[l->b4] = (float)(t->phys != NULL ? sum - 1 / sum : softplus_inv(sum));
}

/*
 * Adam over minibatches until patience runs out, max_epochs, the progress
 * callback says stop, or the training loss stops being finite (diverged
 * weights stay diverged).  Leaves the best epoch's weights in a->p (the
 * initial ones, best_epoch 0, if no epoch had a finite loss).
 */
static void run_epochs(struct trainer *t)
{
    const struct train_params *p = t->p;
    struct cost_net *m = t->m;
    struct adam *a = t->a;
    const size_t pbytes = a->l.n * sizeof(float);
    double best_loss = INFINITY;
    int64_t step = 0;
    int32_t epoch, since_best = 0;
    size_t i, nb;

    memcpy(a->best, a->p, pbytes);
    /* pos[0 .. ntrain) holds the training positions, reshuffled every epoch;
     * evaluate() uses the nval <= n - ntrain entries after them. */
    for (i = 0; i < t->ntrain; i++)
        t->pos[i] = t->first + i;
    for (epoch = 1; epoch <= p->max_epochs; epoch++) {
        double sse = 0, train_loss, val_loss, val_mape = 0, watch;
        int stop;

        models__shuffle(&t->g, t->pos, t->ntrain);
        for (i = 0; i < t->ntrain; i += nb) {
            int rows;

            nb = t->ntrain - i < t->bmax ? t->ntrain - i : t->bmax;
            rows = forward(a->p, &t->ds, t->pos + i, nb, &t->w);
            sse += backward(a->p, &t->ds, t->pos + i, nb, rows, &t->w, a->g);
            if (t->w.err != 0)
                return; /* a product failed: nothing more is computed */
            adam_step(a, ++step, p->lr, t->decay);
            if (t->phys != NULL) /* the prior's units stay as fitted */
                models__prior_pin(a->p, &p->extras, &t->prior);
        }
        train_loss = sse / (double)t->ntrain;
        m->metrics.epochs = epoch;

        /* Without a validation split the training loss decides. */
        watch = train_loss;
        if (t->nval > 0) {
            evaluate(a->p, &t->ds, t->pos + t->ntrain, t->ntest, t->nval,
                     t->bmax, &t->w, &val_loss, &val_mape);
            watch = val_loss;
        }
        if (watch < best_loss) {
            best_loss = watch;
            m->metrics.best_epoch = epoch;
            memcpy(a->best, a->p, pbytes);
            since_best = 0;
        } else {
            since_best++;
        }
        stop = p->progress &&
               p->progress(p->ctx, epoch, p->max_epochs, train_loss, val_mape);
        if (stop || since_best >= p->patience || !isfinite(train_loss))
            break;
    }
    memcpy(a->p, a->best, pbytes);
}

/* The trained model's name and batch; 0 or SD_EINVAL naming the field. */
static int check_identity(const char *profile, int64_t batch_size,
                          struct sd_diag *d)
{
    if (profile == NULL || profile[0] == '\0')
        return sd_diag_set(d, SD_EINVAL, "train: profile is empty");
    if (batch_size < 1)
        return sd_diag_set(d, SD_EINVAL, "train: batch_size %lld is not >= 1",
                           (long long)batch_size);
    return 0;
}

/* Names the trained model and records its error on each split of ord
 * (test, validation, then training samples). */
static void finish_model(struct trainer *t, const struct train_sample *ord,
                         const char *profile, int64_t batch_size)
{
    struct net_metrics *mx = &t->m->metrics;

    snprintf(t->m->profile, sizeof(t->m->profile), "%s", profile);
    t->m->batch_size = batch_size;
    mx->test_mape = net_mape(t->m, ord, t->ntest);
    mx->val_mape = net_mape(t->m, ord + t->ntest, t->nval);
    mx->train_mape = net_mape(t->m, ord + t->first, t->ntrain);
    mx->test_samples = (int64_t)t->ntest;
    mx->val_samples = (int64_t)t->nval;
    mx->train_samples = (int64_t)t->ntrain;
    mx->seed = t->p->seed;
}

/* A bootstrap may hold the largest shard ntrain times: its tables are
 * bounded by n times the largest shard's, as a minibatch's rows are by
 * rows_max.  0, or SD_EINVAL when that overflows. */
static int boot_tables(const struct trainer *t, size_t rows_max, size_t n,
                       size_t *ntables, struct sd_diag *d)
{
    size_t nt_max = rows_max / t->bmax;

    if (nt_max > SIZE_MAX / NET_IN_MAX / sizeof(float) / n)
        return sd_diag_set(d, SD_EINVAL, "train: too many tables in all");
    *ntables = nt_max * n;
    return 0;
}

int net_train(const struct train_params *p, const struct train_sample *s,
              size_t n, const char *profile, int64_t batch_size,
              struct cost_net **out, struct sd_diag *d)
{
    struct trainer t;
    struct train_sample *ord;
    size_t *off, ntables = 0, rows_max, nwork;
    float *block;
    int rv;

    rv = train_params_check(p, d);
    if (rv == 0)
        rv = check_identity(profile, batch_size, d);
    if (rv == 0)
        rv = check_samples(s, n, &ntables, d);
    if (rv != 0)
        return rv;

    memset(&t, 0, sizeof(t));
    t.p = p;
    t.ntest = models__split_count(n, p->test_frac);
    t.nval = models__split_count(n, p->val_frac);
    if (t.ntest + t.nval >= n) /* cannot happen for n >= 10, fracs < 0.9 */
        return sd_diag_set(d, SD_EINVAL, "train: no samples left to train on");
    t.first = t.ntest + t.nval;
    t.ntrain = n - t.first;
    t.bmax = (size_t)p->batch < n ? (size_t)p->batch : n;
    t.decay = train_decay(p, n);
    rng_seed(&t.g, p->seed);

    t.m = calloc(1, sizeof(*t.m));
    if (t.m == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    if (n > SIZE_MAX / sizeof(*ord)) { /* also bounds pos and off */
        rv = sd_diag_set(d, SD_ENOMEM, "train: %zu samples are too many", n);
        goto out_free_net;
    }
    t.pos = malloc(n * sizeof(*t.pos));
    if (t.pos == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_free_net;
    }
    /* A bootstrap may repeat the largest shard in one minibatch. */
    rows_max = max_batch_rows(s, n, p->member > 0 ? 1 : t.bmax, t.pos);
    if (p->member > 0)
        rows_max =
            rows_max <= (size_t)INT32_MAX / t.bmax ? rows_max * t.bmax : 0;
    nwork = work_floats(rows_max, t.bmax);
    if (rows_max == 0 || nwork == 0) {
        rv = sd_diag_set(d, SD_EINVAL,
                         "train: a minibatch of %zu shards has too many tables",
                         t.bmax);
        goto out_free_pos;
    }
    ord = malloc(n * sizeof(*ord));
    t.boot = p->member > 0 ? malloc(t.ntrain * sizeof(*t.boot)) : NULL;
    if (ord == NULL || (p->member > 0 && t.boot == NULL)) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_free_ord;
    }
    off = malloc((n + 1) * sizeof(*off));
    if (off == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_free_ord;
    }
    if (p->member > 0 && boot_tables(&t, rows_max, n, &ntables, d) != 0) {
        rv = SD_EINVAL;
        goto out_free_off;
    }
    t.a = adam_new(NET_IN + p->extras.n, ntables);
    if (t.a == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_free_off;
    }
    block = malloc(nwork * sizeof(*block));
    if (block == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_free_adam;
    }
    work_carve(&t.w, block, rows_max, t.bmax);
    t.w.g = p->gemm != NULL ? p->gemm : &net_gemm_cblas;
    t.w.l = &t.a->l;
    t.m->batch_size = batch_size; /* what the derived inputs read */
    if (net_extras_have_prior(&p->extras)) {
        t.phys = malloc(n * sizeof(*t.phys));
        if (t.phys == NULL) {
            rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
            goto out_free_block;
        }
        net_io_format1(&t.m->io);
        t.m->io.activation = NET_ACT_PRIOR;
    }

    /* The rng's draws, in order: split, weights, every epoch's shuffle. */
    rv = prepare(&t, s, n, ord, off, t.a->x, d);
    if (rv != 0)
        goto out_free_block;
    init_params(&t);
    run_epochs(&t);
    if (t.w.err != 0) {
        rv = sd_diag_set(d, t.w.err, "train: a matrix product on %s failed: %s",
                         t.w.g->name, sd_strerror(t.w.err));
        goto out_free_block;
    }

    net_params_unpack(t.m, t.a->p); /* t.m->x is the extras trained */
    finish_model(&t, ord, profile, batch_size);
    *out = t.m;
    t.m = NULL;
    rv = 0;

out_free_block:
    free(t.phys);
    free(block);
out_free_adam:
    free(t.a);
out_free_off:
    free(off);
out_free_ord:
    free(t.boot);
    free(ord);
out_free_pos:
    free(t.pos);
out_free_net:
    free(t.m);
    return rv;
}
