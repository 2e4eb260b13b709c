/*
 * Training of the learned communication models (models.h, comm.c): an MLP
 * of NeuroShard's comm architecture (inputs -> 128 -> 64 -> 32 -> 16 -> N,
 * ReLU between) fitted to measured exchanges the way net_train() fits the
 * compute model: the same train_params, a seeded shuffle split into test,
 * validation and training samples, z-score constants from the training
 * inputs, Adam with decoupled weight decay on the weight matrices, minibatch
 * products through CBLAS, early stopping on the validation loss keeping the
 * best epoch's weights, and the loss on log(softplus(output)) - log(ms),
 * relative error, so a 2 ms exchange counts as much as a 40 ms one.  A
 * sample gives one target per device.
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/models_int.h"
#include "problem/problem.h"

#define MIN_SAMPLES 10

static const int32_t hidden[] = {128, 64, 32, 16}; /* neuroshard.md 5.2 */
#define NHIDDEN ((int32_t)(sizeof(hidden) / sizeof(hidden[0])))

/* The training run: data in split order (test, validation, training),
 * parameters in the file's layout, Adam state and the activations of one
 * minibatch. */
struct ctrain {
    const struct train_params *p;
    struct comm_net *c;
    size_t n, ntest, nval, ntrain, first;
    int32_t nin, nout;
    float *x; /* [n][nin] normalised inputs */
    float *y; /* [n][nout] targets, ms */
    float *w; /* [nparams] */
    float *g, *m, *v, *best;
    float *act[COMM_LAYERS_MAX + 1]; /* [bmax][sizes[l]] after ReLU */
    float *dact[COMM_LAYERS_MAX + 1];
    size_t bmax;
    size_t *pos;
    struct rng r;
};

static double softplus_inv(double y)
{
    return y > 20 ? y : log(expm1(y));
}

static double log_softplus(double o)
{
    return o < -30 ? o : log(net_softplus(o));
}

static double dlog_softplus(double o)
{
    return o < -30 ? 1 : 1 / (1 + exp(-o)) / net_softplus(o);
}

/* Layer l's weights and bias in t->w. */
static float *layer_w(const struct ctrain *t, int32_t l, float **bias)
{
    float *w = t->w;
    int32_t k;

    for (k = 0; k < l; k++)
        w += (size_t)t->c->sizes[k + 1] * t->c->sizes[k] + t->c->sizes[k + 1];
    *bias = w + (size_t)t->c->sizes[l + 1] * t->c->sizes[l];
    return w;
}

/* Forward over samples pos[0 .. nb): act[nlayers] the raw outputs. */
static void forward(struct ctrain *t, const size_t *pos, size_t nb)
{
    const struct comm_net *c = t->c;
    size_t b;
    int32_t l, o;

    for (b = 0; b < nb; b++)
        memcpy(t->act[0] + b * (size_t)t->nin, t->x + pos[b] * (size_t)t->nin,
               (size_t)t->nin * sizeof(float));
    for (l = 0; l < c->nlayers; l++) {
        int32_t nin = c->sizes[l], nout = c->sizes[l + 1];
        float *bias, *w = layer_w(t, l, &bias), *h = t->act[l + 1];

        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nb, nout, nin,
                    1.0f, t->act[l], nin, w, nin, 0.0f, h, nout);
        for (b = 0; b < nb; b++)
            for (o = 0; o < nout; o++) {
                float v = h[b * (size_t)nout + o] + bias[o];

                h[b * (size_t)nout + o] = l + 1 < c->nlayers && v < 0 ? 0 : v;
            }
    }
}

/* Loss of the forward pass and, when grad, its gradient into t->g.
 * Returns the sum of squared log errors; *ape the sum of |rel err|. */
static double backward(struct ctrain *t, const size_t *pos, size_t nb,
                       bool grad, double *ape)
{
    const struct comm_net *c = t->c;
    int32_t L = c->nlayers, l, o;
    float *out = t->act[L], *dout = t->dact[L];
    double sse = 0, scale = 1.0 / ((double)nb * t->nout);
    size_t b, k;

    *ape = 0;
    for (b = 0; b < nb; b++)
        for (o = 0; o < t->nout; o++) {
            double ov = out[b * (size_t)t->nout + o];
            double y = t->y[pos[b] * (size_t)t->nout + o];
            double e = log_softplus(ov) - log(y);

            sse += e * e;
            *ape += fabs(net_softplus(ov) / y - 1);
            dout[b * (size_t)t->nout + o] =
                (float)(2 * e * dlog_softplus(ov) * scale);
        }
    if (!grad)
        return sse;
    for (l = L - 1; l >= 0; l--) {
        int32_t nin = c->sizes[l], nout = c->sizes[l + 1];
        float *bias, *w = layer_w(t, l, &bias);
        float *gb, *gw = t->g + (w - t->w);

        gb = t->g + (bias - t->w);
        /* dW = dH^T X, db = column sums, dX = dH W (through ReLU) */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nout, nin, (int)nb,
                    1.0f, t->dact[l + 1], nout, t->act[l], nin, 0.0f, gw, nin);
        for (o = 0; o < nout; o++) {
            gb[o] = 0;
            for (b = 0; b < nb; b++)
                gb[o] += t->dact[l + 1][b * (size_t)nout + o];
        }
        if (l == 0)
            break;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nb, nin,
                    nout, 1.0f, t->dact[l + 1], nout, w, nin, 0.0f, t->dact[l],
                    nin);
        for (k = 0; k < nb * (size_t)nin; k++)
            if (!(t->act[l][k] > 0))
                t->dact[l][k] = 0;
    }
    return sse;
}

static void adam(struct ctrain *t, int64_t step)
{
    const struct comm_net *c = t->c;
    float keep = (float)(1.0 - t->p->lr * t->p->weight_decay);
    int32_t l;

    /* decoupled decay of the weight matrices, not the biases */
    for (l = 0; l < c->nlayers && t->p->weight_decay > 0; l++) {
        float *bias, *w = layer_w(t, l, &bias);

        for (; w < bias; w++)
            *w *= keep;
    }
    models__adam(t->w, t->g, t->m, t->v, c->nparams, step, t->p->lr);
}

/* Loss and MAPE over samples [first, first + n) in minibatches. */
static void evaluate(struct ctrain *t, size_t first, size_t n, double *loss,
                     double *mape)
{
    size_t i, nb, b, pos[512];
    double sse = 0, ape = 0, a;

    for (i = 0; i < n; i += nb) {
        nb = n - i < t->bmax ? n - i : t->bmax;
        nb = nb < 512 ? nb : 512;
        for (b = 0; b < nb; b++)
            pos[b] = first + i + b;
        forward(t, pos, nb);
        sse += backward(t, pos, nb, false, &a);
        ape += a;
    }
    *loss = n ? sse / ((double)n * t->nout) : 0;
    *mape = n ? ape / ((double)n * t->nout) : 0;
}

static void run_epochs(struct ctrain *t)
{
    const struct train_params *p = t->p;
    double best = INFINITY, loss, mape, a;
    int64_t step = 0;
    int32_t epoch, since = 0;
    size_t i, nb;

    memcpy(t->best, t->w, t->c->nparams * sizeof(float));
    for (i = 0; i < t->ntrain; i++)
        t->pos[i] = t->first + i;
    for (epoch = 1; epoch <= p->max_epochs; epoch++) {
        double sse = 0, watch;

        models__shuffle(&t->r, t->pos, t->ntrain);
        for (i = 0; i < t->ntrain; i += nb) {
            nb = t->ntrain - i < t->bmax ? t->ntrain - i : t->bmax;
            forward(t, t->pos + i, nb);
            sse += backward(t, t->pos + i, nb, true, &a);
            adam(t, ++step);
        }
        loss = sse / ((double)t->ntrain * t->nout);
        t->c->metrics.epochs = epoch;
        watch = loss;
        mape = 0;
        if (t->nval > 0) {
            evaluate(t, t->ntest, t->nval, &watch, &mape);
        }
        if (watch < best) {
            best = watch;
            t->c->metrics.best_epoch = epoch;
            memcpy(t->best, t->w, t->c->nparams * sizeof(float));
            since = 0;
        } else {
            since++;
        }
        if ((p->progress &&
             p->progress(p->ctx, epoch, p->max_epochs, loss, mape)) ||
            since >= p->patience || !isfinite(loss))
            break;
    }
    memcpy(t->w, t->best, t->c->nparams * sizeof(float));
}

/* A sample's inputs (dims, then the waits for a forward net) and targets
 * into x[nin] and y[nout]; false when a figure is unusable. */
static bool sample_row(const struct comm_sample *s, enum comm_dir dir, float *x,
                       float *y)
{
    int32_t r, n = s->ndevices;

    for (r = 0; r < n; r++) {
        double ms = dir == COMM_FWD ? s->fwd_ms[r] : s->bwd_ms[r];

        if (!(ms > 0) || !isfinite(ms) || s->dim_sum[r] < 0 ||
            (dir == COMM_FWD && !isfinite(s->wait_ms[r])))
            return false;
        x[r] = (float)s->dim_sum[r];
        if (dir == COMM_FWD)
            x[n + r] = (float)s->wait_ms[r];
        y[r] = (float)ms;
    }
    return true;
}

/* The samples of t->c's device count, shuffled and split, normalised;
 * SD_EINVAL when fewer than MIN_SAMPLES. */
static int prepare(struct ctrain *t, const struct comm_sample *s, size_t n,
                   struct sd_diag *d)
{
    struct comm_net *c = t->c;
    size_t i, k, m = 0, *idx = malloc((n ? n : 1) * sizeof(*idx));
    int32_t j;

    if (idx == NULL)
        return SD_ENOMEM;
    for (i = 0; i < n; i++)
        if (s[i].ndevices == c->ndevices)
            idx[m++] = i;
    if (m < MIN_SAMPLES) {
        free(idx);
        return sd_diag_set(d, SD_EINVAL,
                           "train comm: %zu samples of %d devices, at least "
                           "%d are needed",
                           m, (int)c->ndevices, MIN_SAMPLES);
    }
    models__shuffle(&t->r, idx, m);
    t->x = malloc(m * (size_t)t->nin * sizeof(float));
    t->y = malloc(m * (size_t)t->nout * sizeof(float));
    if (t->x == NULL || t->y == NULL) {
        free(idx);
        return SD_ENOMEM;
    }
    for (k = 0; k < m; k++)
        if (!sample_row(&s[idx[k]], (enum comm_dir)c->dir,
                        t->x + k * (size_t)t->nin,
                        t->y + k * (size_t)t->nout)) {
            j = sd_diag_set(d, SD_EINVAL,
                            "train comm: samples[%zu]: a time is not > 0 or "
                            "a figure is not finite",
                            idx[k]);
            free(idx);
            return j;
        }
    free(idx);
    t->n = m;
    t->ntest = models__split_count(m, t->p->test_frac);
    t->nval = models__split_count(m, t->p->val_frac);
    t->first = t->ntest + t->nval;
    t->ntrain = m - t->first;
    /* z-score constants of the training inputs (unbiased std) */
    for (j = 0; j < t->nin; j++) {
        double mean = 0, var = 0;

        for (k = t->first; k < m; k++)
            mean += t->x[k * (size_t)t->nin + j];
        mean /= (double)t->ntrain;
        for (k = t->first; k < m; k++) {
            double e = t->x[k * (size_t)t->nin + j] - mean;

            var += e * e;
        }
        var = t->ntrain > 1 ? var / (double)(t->ntrain - 1) : 0;
        c->mean[j] = (float)mean;
        c->std[j] = sqrt(var) < 1e-6 ? 1.0f : (float)sqrt(var);
    }
    for (k = 0; k < m * (size_t)t->nin; k++)
        t->x[k] = (t->x[k] - c->mean[k % (size_t)t->nin]) /
                  (c->std[k % (size_t)t->nin] + c->eps);
    return 0;
}

/* He-uniform weights, zero biases, the last bias at the training targets'
 * geometric mean. */
static void init_weights(struct ctrain *t)
{
    double sum = 0;
    size_t k;
    int32_t l, i;

    for (l = 0; l < t->c->nlayers; l++) {
        float *bias, *w = layer_w(t, l, &bias);

        (void)bias;
        models__init_layer(&t->r, w, t->c->sizes[l + 1], t->c->sizes[l]);
    }
    for (k = t->first * (size_t)t->nout; k < t->n * (size_t)t->nout; k++)
        sum += log(t->y[k]);
    {
        float *bias;

        layer_w(t, t->c->nlayers - 1, &bias);
        for (i = 0; i < t->nout; i++)
            bias[i] = (float)softplus_inv(
                exp(sum / ((double)t->ntrain * (double)t->nout)));
    }
}

static void ctrain_free(struct ctrain *t)
{
    int32_t l;

    free(t->x);
    free(t->y);
    free(t->g);
    free(t->m);
    free(t->v);
    free(t->best);
    free(t->pos);
    for (l = 0; l <= COMM_LAYERS_MAX; l++) {
        free(t->act[l]);
        free(t->dact[l]);
    }
}

/* Buffers for the parameters, the Adam state and one minibatch. */
static int ctrain_alloc(struct ctrain *t)
{
    size_t np = t->c->nparams;
    int32_t l;

    t->bmax = (size_t)t->p->batch < t->ntrain ? (size_t)t->p->batch : t->ntrain;
    if (t->bmax < 512 && t->nval + t->ntest > t->bmax)
        t->bmax = t->nval + t->ntest < 512 ? t->nval + t->ntest : 512;
    t->g = calloc(np, sizeof(float));
    t->m = calloc(np, sizeof(float));
    t->v = calloc(np, sizeof(float));
    t->best = calloc(np, sizeof(float));
    t->pos = calloc(t->n, sizeof(size_t));
    if (!t->g || !t->m || !t->v || !t->best || !t->pos)
        return SD_ENOMEM;
    for (l = 0; l <= t->c->nlayers; l++) {
        t->act[l] = calloc(t->bmax * (size_t)t->c->sizes[l], sizeof(float));
        t->dact[l] = calloc(t->bmax * (size_t)t->c->sizes[l], sizeof(float));
        if (!t->act[l] || !t->dact[l])
            return SD_ENOMEM;
    }
    return 0;
}

int comm_train(const struct train_params *p, const struct comm_sample *s,
               size_t n, enum comm_dir dir, int32_t ndevices,
               struct comm_net *c, float **params, struct sd_diag *d)
{
    struct ctrain t;
    double loss, mape;
    int32_t l;
    int rv;

    rv = train_params_check(p, d);
    if (rv != 0)
        return rv;
    if (ndevices < 2 || ndevices > COMM_DEVICES_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           "train comm: %d devices is not in [2, %d]",
                           (int)ndevices, COMM_DEVICES_MAX);
    memset(c, 0, sizeof(*c));
    c->dir = (int32_t)dir;
    c->ndevices = ndevices;
    c->nlayers = NHIDDEN + 1;
    c->sizes[0] = dir == COMM_FWD ? 2 * ndevices : ndevices;
    for (l = 0; l < NHIDDEN; l++)
        c->sizes[l + 1] = hidden[l];
    c->sizes[c->nlayers] = ndevices;
    c->activation = NET_ACT_SOFTPLUS;
    c->eps = 1e-6f;
    c->nparams = comm_net_nparams(c->nlayers, c->sizes);
    memset(&t, 0, sizeof(t));
    t.p = p;
    t.c = c;
    t.nin = c->sizes[0];
    t.nout = ndevices;
    rng_seed(&t.r, p->seed);
    /* the rng's draws, in order: split, weights, every epoch's shuffle */
    rv = prepare(&t, s, n, d);
    if (rv == 0)
        rv = (t.w = calloc(c->nparams, sizeof(float))) ? ctrain_alloc(&t)
                                                       : SD_ENOMEM;
    if (rv != 0)
        goto out;
    init_weights(&t);
    run_epochs(&t);
    evaluate(&t, 0, t.ntest, &loss, &c->metrics.test_mape);
    evaluate(&t, t.ntest, t.nval, &loss, &c->metrics.val_mape);
    evaluate(&t, t.first, t.ntrain, &loss, &mape);
    c->metrics.train_mape = mape;
    c->metrics.test_samples = (int64_t)t.ntest;
    c->metrics.val_samples = (int64_t)t.nval;
    c->metrics.train_samples = (int64_t)t.ntrain;
    c->metrics.seed = p->seed;
    *params = t.w;
    t.w = NULL;
out:
    if (rv == SD_ENOMEM)
        sd_diag_set(d, SD_ENOMEM, "out of memory");
    free(t.w);
    ctrain_free(&t);
    return rv;
}
