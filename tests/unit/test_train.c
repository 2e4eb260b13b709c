/*
 * Training of the neural compute cost model (train.c): it learns a known
 * sub-additive cost function, is deterministic for a seed, rejects bad
 * input with a diagnostic, stops when the progress callback says so, and
 * its result survives the model file format.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "planner.h"

#define NSAMPLES   1000
#define MAX_TABLES 6

struct data {
    struct table tables[NSAMPLES * MAX_TABLES];
    struct train_sample s[NSAMPLES];
};

static int cmp_double_desc(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x < y) - (x > y);
}

/*
 * The ground truth: a fixed overhead plus one term per table that grows
 * with dim, pooling factor and log rows, the k-th largest term discounted
 * by 0.9^(k-1).  Sorting makes it a function of the set of tables, which is
 * all the model sees.
 */
static double truth_ms(const struct table *t, size_t n)
{
    double term[MAX_TABLES] = {0}, ms = 0.05, f = 1;
    size_t i;

    for (i = 0; i < n; i++)
        term[i] = 1e-4 * t[i].dim * t[i].pooling_factor *
                  (1 + 0.1 * log10((double)t[i].rows));
    qsort(term, n, sizeof(term[0]), cmp_double_desc);
    for (i = 0; i < n; i++, f *= 0.9)
        ms += term[i] * f;
    return ms;
}

static void make_data(struct data *dt, uint64_t seed)
{
    struct rng g;
    size_t i, j, k = 0;

    rng_seed(&g, seed);
    for (i = 0; i < NSAMPLES; i++) {
        size_t nt = 1 + (size_t)rng_below(&g, MAX_TABLES);

        dt->s[i].tables = &dt->tables[k];
        dt->s[i].ntables = nt;
        for (j = 0; j < nt; j++, k++) {
            struct table *t = &dt->tables[k];
            double sum = 0, keep = 0.8 + 0.2 * rng_uniform(&g);
            double skew = 0.5 + 3.5 * rng_uniform(&g);
            int b;

            memset(t, 0, sizeof(*t));
            snprintf(t->name, sizeof(t->name), "t%zu", k);
            t->rows = (int64_t)pow(10.0, 3.0 + 4.0 * rng_uniform(&g));
            t->dim = 4 * (int32_t)(1 + rng_below(&g, 32));
            t->pooling_factor = 1 + 49 * rng_uniform(&g);
            for (b = 0; b < TABLE_NBINS; b++) {
                t->bins[b] = exp(-b / skew);
                sum += t->bins[b];
            }
            for (b = 0; b < TABLE_NBINS; b++)
                t->bins[b] *= keep / sum; /* sums to keep <= 1 */
            t->dtype = TABLE_DTYPE_FP32;
        }
        dt->s[i].ms = truth_ms(dt->s[i].tables, nt);
    }
}

static void fast_params(struct train_params *p, uint64_t seed, int32_t epochs)
{
    train_params_default(p);
    p->seed = seed;
    p->max_epochs = epochs;
    p->patience = 20;
    p->batch = 16;
}

static void test_defaults(void)
{
    struct train_params p;

    memset(&p, 0xff, sizeof(p));
    train_params_default(&p);
    CHECK(p.seed == 0 && p.max_epochs == 400 && p.patience == 40);
    CHECK(p.batch == 128 && p.lr == 2e-3 &&
          p.weight_decay == TRAIN_DECAY_BY_SAMPLES);
    /* By the sample count: 1.0 for few samples, 0.3 for many; a value
     * given is used as it is. */
    CHECK(train_decay(&p, 1) == 1.0 &&
          train_decay(&p, TRAIN_DECAY_SAMPLES - 1) == 1.0);
    CHECK(train_decay(&p, TRAIN_DECAY_SAMPLES) == 0.3 &&
          train_decay(&p, 100000) == 0.3);
    p.weight_decay = 0.5;
    CHECK(train_decay(&p, 1) == 0.5 && train_decay(&p, 100000) == 0.5);
    CHECK(p.val_frac == 0.1 && p.test_frac == 0.1);
    CHECK(p.progress == NULL);
    CHECK(p.extras.n == 0); /* NeuroShard's 20 inputs, format 1 */
}

/* The MAPE of net_shard_ms() over samples, computed the plain way. */
static double plain_mape(const struct cost_net *m, const struct train_sample *s,
                         size_t n)
{
    struct shard_item items[MAX_TABLES];
    double sum = 0;
    size_t i, j;

    for (i = 0; i < n; i++) {
        for (j = 0; j < s[i].ntables; j++) {
            items[j].table = &s[i].tables[j];
            items[j].cols = s[i].tables[j].dim;
        }
        sum += fabs(net_shard_ms(m, items, s[i].ntables) - s[i].ms) / s[i].ms;
    }
    return sum / (double)n;
}

static void test_fit(const struct data *dt, struct cost_net **kept)
{
    struct train_params p;
    struct sd_diag d = {""};
    struct cost_net *m = NULL;
    struct net_metrics *mt;
    double naive = 0, logmean = 0;
    size_t i;

    fast_params(&p, 1, 40);
    CHECK(net_train(&p, dt->s, NSAMPLES, "test-gpu", 4096, &m, &d) == 0);
    if (m == NULL) {
        fprintf(stderr, "net_train: %s\n", d.msg);
        return;
    }
    mt = &m->metrics;
    printf("# fit: epochs %d best %d, MAPE train %.4f val %.4f test %.4f\n",
           (int)mt->epochs, (int)mt->best_epoch, mt->train_mape, mt->val_mape,
           mt->test_mape);
    CHECK(strcmp(m->profile, "test-gpu") == 0 && m->batch_size == 4096);
    CHECK(mt->train_samples + mt->val_samples + mt->test_samples == NSAMPLES);
    CHECK(mt->val_samples == 100 && mt->test_samples == 100);
    CHECK(mt->epochs >= 1 && mt->epochs <= 40);
    CHECK(mt->best_epoch >= 1 && mt->best_epoch <= mt->epochs);
    CHECK(mt->seed == 1);
    CHECK(isfinite(mt->val_mape) && isfinite(mt->train_mape));
    /* Training seeds 1-3 on data seeds 3, 7, 42 gave test MAPEs of
     * 0.07-0.15 (netlib BLAS); 0.25 leaves room for another BLAS. */
    CHECK(mt->test_mape < 0.25);
    CHECK(mt->val_mape < 0.25);
    CHECK(mt->train_mape < 0.25);

    /* Far better than predicting the geometric mean time for every shard. */
    for (i = 0; i < NSAMPLES; i++)
        logmean += log(dt->s[i].ms) / NSAMPLES;
    for (i = 0; i < NSAMPLES; i++)
        naive += fabs(exp(logmean) - dt->s[i].ms) / dt->s[i].ms / NSAMPLES;
    printf("# constant predictor MAPE %.4f\n", naive);
    CHECK(mt->test_mape < naive / 3);

    /* net_mape() is the MAPE of net_shard_ms(). */
    CHECK(net_mape(m, dt->s, NSAMPLES) == plain_mape(m, dt->s, NSAMPLES));
    CHECK(net_mape(m, dt->s, 0) == 0);

    /* The stored z-score constants are finite and std positive. */
    for (i = 0; i < NET_IN; i++)
        CHECK(isfinite(m->mean[i]) && m->std[i] > 0);
    *kept = m;
}

static void test_deterministic(const struct data *dt)
{
    struct train_params p;
    struct cost_net *a = NULL, *b = NULL, *c = NULL;

    fast_params(&p, 7, 6);
    CHECK(net_train(&p, dt->s, 300, "x", 1, &a, NULL) == 0);
    CHECK(net_train(&p, dt->s, 300, "x", 1, &b, NULL) == 0);
    p.seed = 8;
    CHECK(net_train(&p, dt->s, 300, "x", 1, &c, NULL) == 0);
    if (a && b && c) {
        CHECK(memcmp(a->p, b->p, sizeof(a->p)) == 0);
        CHECK(memcmp(a->mean, b->mean, sizeof(a->mean)) == 0);
        CHECK(memcmp(a->std, b->std, sizeof(a->std)) == 0);
        CHECK(a->metrics.test_mape == b->metrics.test_mape);
        CHECK(a->metrics.best_epoch == b->metrics.best_epoch);
        CHECK(memcmp(a->p, c->p, sizeof(a->p)) != 0);
        CHECK(c->metrics.seed == 8);
    }
    free(a);
    free(b);
    free(c);
}

static void test_bad_input(struct data *dt)
{
    struct cost_net sentinel, *m = &sentinel;
    struct train_params p;
    struct sd_diag d;
    double saved;
    size_t saved_nt;
    int32_t saved_dim;

    fast_params(&p, 0, 2);

    d.msg[0] = '\0';
    CHECK(net_train(&p, dt->s, 9, "x", 1, &m, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "9 samples") != NULL);
    CHECK(m == &sentinel);

    saved = dt->s[17].ms;
    dt->s[17].ms = 0;
    d.msg[0] = '\0';
    CHECK(net_train(&p, dt->s, NSAMPLES, "x", 1, &m, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "samples[17]") != NULL && strstr(d.msg, "ms") != NULL);
    dt->s[17].ms = -1;
    CHECK(net_train(&p, dt->s, NSAMPLES, "x", 1, &m, &d) == SD_EINVAL);
    dt->s[17].ms = NAN;
    CHECK(net_train(&p, dt->s, NSAMPLES, "x", 1, &m, &d) == SD_EINVAL);
    dt->s[17].ms = saved;
    CHECK(m == &sentinel);

    saved_nt = dt->s[5].ntables;
    dt->s[5].ntables = 0;
    d.msg[0] = '\0';
    CHECK(net_train(&p, dt->s, NSAMPLES, "x", 1, &m, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "samples[5]") != NULL);
    dt->s[5].ntables = saved_nt;

    saved_dim = dt->tables[0].dim;
    dt->tables[0].dim = 30; /* sample 0's first table */
    d.msg[0] = '\0';
    CHECK(net_train(&p, dt->s, NSAMPLES, "x", 1, &m, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "samples[0]") != NULL && strstr(d.msg, "dim") != NULL);
    dt->tables[0].dim = saved_dim;

    p.lr = 0;
    d.msg[0] = '\0';
    CHECK(net_train(&p, dt->s, NSAMPLES, "x", 1, &m, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "lr") != NULL);
    p.lr = -1e-3;
    CHECK(net_train(&p, dt->s, NSAMPLES, "x", 1, &m, &d) == SD_EINVAL);
    p.lr = INFINITY;
    CHECK(net_train(&p, dt->s, NSAMPLES, "x", 1, &m, &d) == SD_EINVAL);
    p.lr = 2e-3;

    p.weight_decay = -0.1;
    d.msg[0] = '\0';
    CHECK(net_train(&p, dt->s, NSAMPLES, "x", 1, &m, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "weight_decay") != NULL);
    p.weight_decay = NAN;
    CHECK(net_train(&p, dt->s, NSAMPLES, "x", 1, &m, &d) == SD_EINVAL);
    p.weight_decay = INFINITY;
    CHECK(net_train(&p, dt->s, NSAMPLES, "x", 1, &m, &d) == SD_EINVAL);
    p.weight_decay = 1 / p.lr; /* one step would zero every weight */
    CHECK(net_train(&p, dt->s, NSAMPLES, "x", 1, &m, &d) == SD_EINVAL);
    p.weight_decay = 1.0;

    p.val_frac = 0.5;
    d.msg[0] = '\0';
    CHECK(net_train(&p, dt->s, NSAMPLES, "x", 1, &m, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "val_frac") != NULL);
    p.val_frac = 0.45;
    p.test_frac = 0.45;
    CHECK(net_train(&p, dt->s, NSAMPLES, "x", 1, &m, &d) == SD_EINVAL);
    p.val_frac = p.test_frac = 0.1;

    p.batch = 0;
    CHECK(net_train(&p, dt->s, NSAMPLES, "x", 1, &m, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "batch") != NULL);
    p.batch = 16;
    p.patience = 0;
    CHECK(net_train(&p, dt->s, NSAMPLES, "x", 1, &m, &d) == SD_EINVAL);
    p.patience = 20;
    p.max_epochs = 0;
    CHECK(net_train(&p, dt->s, NSAMPLES, "x", 1, &m, &d) == SD_EINVAL);
    p.max_epochs = 2;

    CHECK(net_train(&p, dt->s, NSAMPLES, "", 1, &m, &d) == SD_EINVAL);
    CHECK(net_train(&p, dt->s, NSAMPLES, "x", 0, &m, &d) == SD_EINVAL);
    CHECK(m == &sentinel);
}

struct progress_log {
    int calls;
    int32_t last_epoch;
    int32_t max_epochs;
    int finite;
};

static int stop_at_3(void *ctx, int32_t epoch, int32_t max_epochs,
                     double train_loss, double val_mape)
{
    struct progress_log *l = ctx;

    l->calls++;
    l->last_epoch = epoch;
    l->max_epochs = max_epochs;
    l->finite &= isfinite(train_loss) && isfinite(val_mape) && val_mape > 0;
    return epoch == 3;
}

static void test_progress_stop(const struct data *dt)
{
    struct progress_log l = {0, 0, 0, 1};
    struct train_params p;
    struct cost_net *m = NULL;

    fast_params(&p, 3, 50);
    p.progress = stop_at_3;
    p.ctx = &l;
    CHECK(net_train(&p, dt->s, 300, "x", 1, &m, NULL) == 0);
    CHECK(l.calls == 3 && l.last_epoch == 3 && l.max_epochs == 50);
    CHECK(l.finite);
    if (m) {
        CHECK(m->metrics.epochs == 3);
        CHECK(m->metrics.best_epoch >= 1 && m->metrics.best_epoch <= 3);
    }
    free(m);
}

/* Sum of squares of the parameters in [begin, end). */
static double sum_sq(const float *p, int begin, int end)
{
    double s = 0;
    int i;

    for (i = begin; i < end; i++)
        s += (double)p[i] * p[i];
    return s;
}

/*
 * Weight decay shrinks the weight matrices; 0 is plain Adam, a different
 * model from the same seed.  Every epoch is kept (no early stop) so the two
 * runs take the same steps.
 */
static void test_weight_decay(const struct data *dt)
{
    struct train_params p;
    struct cost_net *plain = NULL, *decayed = NULL;

    fast_params(&p, 5, 8);
    p.val_frac = 0;
    p.patience = 8;
    p.weight_decay = 0;
    CHECK(net_train(&p, dt->s, 300, "x", 1, &plain, NULL) == 0);
    p.weight_decay = 20; /* lr * wd = 0.04 a step: strong */
    CHECK(net_train(&p, dt->s, 300, "x", 1, &decayed, NULL) == 0);
    if (plain && decayed) {
        CHECK(memcmp(plain->p, decayed->p, sizeof(plain->p)) != 0);
        CHECK(sum_sq(decayed->p, NET_W1, NET_B1) <
              0.8 * sum_sq(plain->p, NET_W1, NET_B1));
        CHECK(sum_sq(decayed->p, NET_W2, NET_B2) <
              0.8 * sum_sq(plain->p, NET_W2, NET_B2));
        CHECK(isfinite(decayed->metrics.train_mape));
    }
    free(plain);
    free(decayed);
    /* The default on 300 samples is decay 1.0: the same weights. */
    {
        struct cost_net *dflt = NULL, *one = NULL;

        p.weight_decay = TRAIN_DECAY_BY_SAMPLES;
        CHECK(net_train(&p, dt->s, 300, "x", 1, &dflt, NULL) == 0);
        p.weight_decay = 1.0;
        CHECK(net_train(&p, dt->s, 300, "x", 1, &one, NULL) == 0);
        CHECK(dflt && one && memcmp(dflt->p, one->p, sizeof(one->p)) == 0);
        free(dflt);
        free(one);
    }
}

/* With no validation split, early stopping watches the training loss. */
static void test_no_validation(const struct data *dt)
{
    struct train_params p;
    struct cost_net *m = NULL;

    fast_params(&p, 4, 3);
    p.val_frac = 0;
    CHECK(net_train(&p, dt->s, 40, "x", 1, &m, NULL) == 0);
    if (m) {
        CHECK(m->metrics.val_samples == 0 && m->metrics.val_mape == 0);
        CHECK(m->metrics.test_samples == 4 && m->metrics.train_samples == 36);
        CHECK(m->metrics.best_epoch >= 1 && m->metrics.epochs == 3);
    }
    free(m);
}

static void test_round_trip(const struct data *dt, const struct cost_net *m)
{
    struct cost_net *back = NULL;
    struct shard_item items[MAX_TABLES];
    struct sd_diag d = {""};
    void *buf = NULL;
    size_t len = 0, i, j;
    int same = 1;

    CHECK(net_serialize(m, &buf, &len) == 0);
    CHECK(net_parse(buf, len, &back, &d) == 0);
    free(buf);
    if (back == NULL) {
        fprintf(stderr, "net_parse: %s\n", d.msg);
        return;
    }
    CHECK(memcmp(back->p, m->p, sizeof(m->p)) == 0);
    CHECK(memcmp(&back->metrics, &m->metrics, sizeof(m->metrics)) == 0);
    for (i = 0; i < NSAMPLES; i++) {
        for (j = 0; j < dt->s[i].ntables; j++) {
            items[j].table = &dt->s[i].tables[j];
            items[j].cols = dt->s[i].tables[j].dim;
        }
        same &= net_shard_ms(m, items, dt->s[i].ntables) ==
                net_shard_ms(back, items, dt->s[i].ntables);
    }
    CHECK(same);
    free(back);
}

int main(void)
{
    struct data *dt = malloc(sizeof(*dt));
    struct cost_net *m = NULL;

    if (dt == NULL)
        return 1;
    make_data(dt, 42);
    test_defaults();
    test_fit(dt, &m);
    if (m)
        test_round_trip(dt, m);
    test_deterministic(dt);
    test_bad_input(dt);
    test_progress_stop(dt);
    test_weight_decay(dt);
    test_no_validation(dt);
    free(m);
    free(dt);
    return tap_done();
}
