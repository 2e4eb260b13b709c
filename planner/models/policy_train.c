/*
 * Training of DreamShard's placement policy (models.h, policy.c) with
 * REINFORCE on the estimated MDP: the states and the final reward (minus
 * the plan cost) come from the compute model and the alpha-beta exchange,
 * so no hardware runs inside the loop (neuroshard.md 9).
 *
 * One step: a training task drawn with the seeded rng; `episodes`
 * placements sampled from the policy (a softmax over the legal devices'
 * logits, table by table in the task's order); each episode's return is
 * minus its plan cost, normalised over the step's episodes (minus their
 * mean, over their spread: the baseline DreamShard uses); the loss is
 * -(1/E) sum_e A_e sum_t log pi(a_t) - entropy * (1/E) sum_e sum_t H_t;
 * one Adam step, the step size decayed linearly to a tenth.
 *
 * How it is computed (the style of train.c): the episodes are played with
 * policy.c's step-wise inference, recording every legal device's cost
 * features; then the whole step's forward pass is redone as matrix
 * products over every (episode, step, legal device) row at once, with
 * cblas_sgemm, and the gradients follow the same way back.  A device's
 * latent at step t is the sum of the encodings of the tables placed on it
 * before t, so the gradient of an encoding is the sum of its device's
 * latent gradients over the later steps: one reverse scan per episode.
 *
 * An episode that meets a table with no legal device (memory) puts it on
 * the device with the most room left regardless and scores twice its plan
 * cost: training tasks fill the devices close to full, and the policy must
 * learn to leave room.
 *
 * Everything random comes from one seeded struct rng and nothing runs in
 * parallel: a seed gives bitwise-identical weights with a deterministic
 * BLAS (the reference netlib one).
 */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/models_int.h"
#include "problem/problem.h"

#define PT_FAIL_PENALTY   2.0
#define PT_TABLES_MAX     65536
#define PT_EPISODES_MAX   1000
#define PT_ITERATIONS_MAX 10000000

void policy_train_params_default(struct policy_train_params *p)
{
    memset(p, 0, sizeof(*p));
    p->seed = 0;
    p->iterations = 600;
    p->episodes = 10;
    p->ndevices = 4;
    p->mem_bytes = (uint64_t)4 << 30;
    p->batch_size = 0;
    p->lr = 1e-3;
    p->entropy = 1e-3;
    p->eval_every = 25;
}

/* ------------------------------------------------------------------------ */
/* One step's record and scratch                                             */

/* The rows of one step: every (episode, step, legal device). */
struct rec {
    size_t cap_rows;
    size_t nrows;
    float *x;        /* [rows][POL_NCOST] */
    int32_t *dev;    /* [rows] */
    size_t *first;   /* [E * T + 1] rows of (episode, step) */
    int32_t *action; /* [E * T] the device chosen; -1: no choice */
    size_t *actrow;  /* [E * T] its row */
    double *cost;    /* [E] */
    double *adv;     /* [E] */
};

/* Activations and gradients of one step's batch. */
struct work {
    /* the task's tables */
    float *xt;  /* [T][POL_IN] */
    float *he;  /* [T][POL_H1] */
    float *u;   /* [T][POL_LAT] */
    float *du;  /* [T][POL_LAT] */
    float *dhe; /* [T][POL_H1] */
    /* the rows */
    float *c1;  /* [R][POL_C1] */
    float *c2;  /* [R][POL_C2] */
    float *a;   /* [R][POL_LAT + POL_C2] */
    float *hh;  /* [R][POL_HH] */
    float *out; /* [R] logits */
    float *g;   /* [R] dloss/dlogit */
    float *dhh; /* [R][POL_HH] */
    float *da;  /* [R][POL_LAT + POL_C2] */
    float *dc2; /* [R][POL_C2] */
    float *dc1; /* [R][POL_C1] */
    float *acc; /* [N][POL_LAT] running per-device sums */
};

struct trainer {
    const struct policy_train_params *p;
    const struct cost_net *m;
    struct policy_net *pn;
    struct topology topo;
    struct policy_env **envs; /* one per training task */
    size_t ntrain;
    size_t tmax; /* most tables of any training task */
    struct rec rec;
    struct work w;
    struct rng g;
    /* Adam */
    float *grad, *m1, *m2, *best;
    int64_t step;
};

/* ------------------------------------------------------------------------ */
/* Episodes                                                                  */

/* softmax over legal logits into prob (0 where illegal); the chosen device
 * drawn with u in [0, 1). */
static int32_t sample(const double *logit, const bool *legal, int32_t n,
                      double u, double *prob)
{
    double max = -INFINITY, sum = 0, run = 0;
    int32_t r, last = -1;

    for (r = 0; r < n; r++)
        if (legal[r] && logit[r] > max)
            max = logit[r];
    for (r = 0; r < n; r++) {
        prob[r] = legal[r] ? exp(logit[r] - max) : 0;
        sum += prob[r];
    }
    for (r = 0; r < n; r++) {
        prob[r] /= sum;
        if (!legal[r])
            continue;
        last = r;
        run += prob[r];
        if (u < run)
            return r;
    }
    return last; /* rounding left u above the last sum */
}

/* The device with the most room left, memory or not (an overflow). */
static int32_t most_room(const struct policy_env *e, const struct topology *t)
{
    int32_t r, best = 0;
    double room, best_room = -INFINITY;

    for (r = 0; r < t->ndevices; r++) {
        room = (double)topology_mem(t, r) - (double)policy_env_used(e, r);
        if (room > best_room) {
            best_room = room;
            best = r;
        }
    }
    return best;
}

/*
 * Plays one episode on e, recording its rows from rec->nrows on; returns
 * its scored cost.  Scratch: x (N x NCOST), legal, logit, prob (N).
 */
static double play(struct trainer *tr, struct policy_env *e, size_t ntab,
                   int32_t ep, float *x, bool *legal, double *logit,
                   double *prob)
{
    struct rec *rc = &tr->rec;
    const uint32_t *order = policy_env_order(e);
    int32_t nd = tr->topo.ndevices, r, a;
    bool failed = false;
    size_t k, base = (size_t)ep * tr->tmax;

    policy_env_reset(e);
    for (k = 0; k < ntab; k++) {
        uint32_t i = order[k];
        int32_t nlegal = policy_env_features(e, i, x, legal);

        rc->first[base + k] = rc->nrows;
        rc->action[base + k] = -1;
        if (nlegal == 0) {
            failed = true;
            policy_env_place(e, i, most_room(e, &tr->topo));
            continue;
        }
        policy_env_logits(e, x, legal, logit);
        a = sample(logit, legal, nd, rng_uniform(&tr->g), prob);
        for (r = 0; r < nd; r++) {
            if (!legal[r])
                continue;
            if (r == a)
                rc->actrow[base + k] = rc->nrows;
            memcpy(rc->x + rc->nrows * POL_NCOST, x + (size_t)r * POL_NCOST,
                   POL_NCOST * sizeof(float));
            rc->dev[rc->nrows] = r;
            rc->nrows++;
        }
        rc->action[base + k] = a;
        policy_env_place(e, i, a);
    }
    rc->first[base + ntab] = rc->nrows;
    return policy_env_cost(e) * (failed ? PT_FAIL_PENALTY : 1.0);
}

/* Returns normalised over the step's episodes: A_e = -(c_e - mean) / std,
 * all 0 when the episodes cost the same. */
static void advantages(struct rec *rc, int32_t ne)
{
    double mean = 0, var = 0, sd;
    int32_t e;

    for (e = 0; e < ne; e++)
        mean += rc->cost[e];
    mean /= ne;
    for (e = 0; e < ne; e++)
        var += (rc->cost[e] - mean) * (rc->cost[e] - mean);
    sd = sqrt(var / ne);
    for (e = 0; e < ne; e++)
        rc->adv[e] =
            sd > 1e-9 * fabs(mean) && sd > 0 ? -(rc->cost[e] - mean) / sd : 0;
}

/* ------------------------------------------------------------------------ */
/* The batch's forward and backward passes                                   */

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

/* g[c] = sum over rows of y[r][c] (set, not added). */
static void col_sums(float *g, const float *y, size_t n, int cols, int ld)
{
    size_t r;
    int c;

    for (c = 0; c < cols; c++)
        g[c] = 0;
    for (r = 0; r < n; r++)
        for (c = 0; c < cols; c++)
            g[c] += y[r * (size_t)ld + c];
}

/* y = x W^T for x [n][k] and W [m][k]: an [n][m] matrix. */
static void gemm_nt(const float *x, const float *w, float *y, size_t n, int m,
                    int k, int ldx, int ldy)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, m, k, 1.0f, x,
                ldx, w, k, 0.0f, y, ldy);
}

/* The encoder over the task's tables: he, u. */
static void forward_tables(const float *p, struct work *w, size_t nt)
{
    gemm_nt(w->xt, p + POL_E1W, w->he, nt, POL_H1, POL_IN, POL_IN, POL_H1);
    bias_relu(w->he, p + POL_E1B, nt, POL_H1);
    gemm_nt(w->he, p + POL_E2W, w->u, nt, POL_LAT, POL_H1, POL_H1, POL_LAT);
    bias_relu(w->u, p + POL_E2B, nt, POL_LAT);
}

/* The latent half of every row: the sums of the encodings placed on its
 * device before its step, scaled.  Episode by episode, step by step. */
static void fill_latents(struct trainer *tr, const uint32_t *order, size_t nt,
                         int32_t ne, float scale)
{
    struct rec *rc = &tr->rec;
    struct work *w = &tr->w;
    int32_t nd = tr->topo.ndevices, e;
    size_t k, row;
    int c;

    for (e = 0; e < ne; e++) {
        size_t base = (size_t)e * tr->tmax;

        memset(w->acc, 0, (size_t)nd * POL_LAT * sizeof(float));
        for (k = 0; k < nt; k++) {
            int32_t a = rc->action[base + k];
            const float *ui = w->u + (size_t)order[k] * POL_LAT;

            for (row = rc->first[base + k]; row < rc->first[base + k + 1];
                 row++) {
                const float *s = w->acc + (size_t)rc->dev[row] * POL_LAT;
                float *ar = w->a + row * (POL_LAT + POL_C2);

                for (c = 0; c < POL_LAT; c++)
                    ar[c] = s[c] * scale;
            }
            /* A forced placement (no legal device) still fills it. */
            if (a < 0)
                a = -1 - a;
            for (c = 0; c < POL_LAT; c++)
                w->acc[(size_t)a * POL_LAT + c] += ui[c];
        }
    }
}

/* Forward over every row: c1, c2, a, hh, out. */
static void forward_rows(const float *p, struct rec *rc, struct work *w)
{
    size_t n = rc->nrows, r;
    int o;

    gemm_nt(rc->x, p + POL_C1W, w->c1, n, POL_C1, POL_NCOST, POL_NCOST, POL_C1);
    bias_relu(w->c1, p + POL_C1B, n, POL_C1);
    /* c2 straight into the cost half of a. */
    gemm_nt(w->c1, p + POL_C2W, w->a + POL_LAT, n, POL_C2, POL_C1, POL_C1,
            POL_LAT + POL_C2);
    for (r = 0; r < n; r++) {
        float *ar = w->a + r * (POL_LAT + POL_C2) + POL_LAT;

        for (o = 0; o < POL_C2; o++) {
            float v = ar[o] + p[POL_C2B + o];

            ar[o] = v > 0 ? v : 0;
            w->c2[r * POL_C2 + o] = ar[o];
        }
    }
    gemm_nt(w->a, p + POL_H1W, w->hh, n, POL_HH, POL_LAT + POL_C2,
            POL_LAT + POL_C2, POL_HH);
    bias_relu(w->hh, p + POL_H1B, n, POL_HH);
    for (r = 0; r < n; r++) {
        float v = p[POL_H2B];

        for (o = 0; o < POL_HH; o++)
            v += p[POL_H2W + o] * w->hh[r * POL_HH + o];
        w->out[r] = v;
    }
}

/* dloss/dlogit of every row (softmax per step, REINFORCE and entropy). */
static void logit_grads(struct trainer *tr, size_t nt, int32_t ne)
{
    struct rec *rc = &tr->rec;
    struct work *w = &tr->w;
    double beta = tr->p->entropy;
    int32_t e;
    size_t k, r;

    for (e = 0; e < ne; e++) {
        size_t base = (size_t)e * tr->tmax;
        double a_e = rc->adv[e];

        for (k = 0; k < nt; k++) {
            size_t lo = rc->first[base + k], hi = rc->first[base + k + 1];
            double max = -INFINITY, sum = 0, h = 0;

            if (rc->action[base + k] < 0)
                continue;
            for (r = lo; r < hi; r++)
                if (w->out[r] > max)
                    max = w->out[r];
            for (r = lo; r < hi; r++)
                sum += exp(w->out[r] - max);
            for (r = lo; r < hi; r++) {
                double pr = exp(w->out[r] - max) / sum;

                if (pr > 0)
                    h -= pr * log(pr);
            }
            for (r = lo; r < hi; r++) {
                double pr = exp(w->out[r] - max) / sum;
                double one = r == rc->actrow[base + k] ? 1.0 : 0.0;
                double lp = pr > 0 ? log(pr) : 0;

                w->g[r] =
                    (float)((-a_e * (one - pr) + beta * pr * (lp + h)) / ne);
            }
        }
    }
}

/* Rows' latent gradients back to the tables' encodings: du. */
static void latent_grads(struct trainer *tr, const uint32_t *order, size_t nt,
                         int32_t ne, float scale)
{
    struct rec *rc = &tr->rec;
    struct work *w = &tr->w;
    int32_t nd = tr->topo.ndevices, e;
    size_t k, row;
    int c;

    memset(w->du, 0, nt * POL_LAT * sizeof(float));
    for (e = 0; e < ne; e++) {
        size_t base = (size_t)e * tr->tmax;

        memset(w->acc, 0, (size_t)nd * POL_LAT * sizeof(float));
        for (k = nt; k-- > 0;) {
            int32_t a = rc->action[base + k];
            float *dui = w->du + (size_t)order[k] * POL_LAT;

            if (a < 0)
                a = -1 - a;
            /* The rows after step k on its device. */
            for (c = 0; c < POL_LAT; c++)
                dui[c] += w->acc[(size_t)a * POL_LAT + c] * scale;
            for (row = rc->first[base + k]; row < rc->first[base + k + 1];
                 row++) {
                const float *d = w->da + row * (POL_LAT + POL_C2);
                float *s = w->acc + (size_t)rc->dev[row] * POL_LAT;

                for (c = 0; c < POL_LAT; c++)
                    s[c] += d[c];
            }
        }
    }
}

/* Backward after forward_rows(): every entry of tr->grad. */
static void backward(struct trainer *tr, const uint32_t *order, size_t nt,
                     int32_t ne, float scale)
{
    const float *p = tr->pn->p;
    struct rec *rc = &tr->rec;
    struct work *w = &tr->w;
    float *g = tr->grad;
    size_t n = rc->nrows, r;
    int o, c;

    /* Output layer and its ReLU. */
    g[POL_H2B] = 0;
    for (o = 0; o < POL_HH; o++)
        g[POL_H2W + o] = 0;
    for (r = 0; r < n; r++) {
        g[POL_H2B] += w->g[r];
        for (o = 0; o < POL_HH; o++) {
            float h = w->hh[r * POL_HH + o];

            g[POL_H2W + o] += w->g[r] * h;
            w->dhh[r * POL_HH + o] = h > 0 ? w->g[r] * p[POL_H2W + o] : 0;
        }
    }
    /* H1: dW = dHh^T A, dA = dHh W. */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, POL_HH,
                POL_LAT + POL_C2, (int)n, 1.0f, w->dhh, POL_HH, w->a,
                POL_LAT + POL_C2, 0.0f, g + POL_H1W, POL_LAT + POL_C2);
    col_sums(g + POL_H1B, w->dhh, n, POL_HH, POL_HH);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n,
                POL_LAT + POL_C2, POL_HH, 1.0f, w->dhh, POL_HH, p + POL_H1W,
                POL_LAT + POL_C2, 0.0f, w->da, POL_LAT + POL_C2);
    /* The cost branch: C2 then C1, through their ReLUs. */
    for (r = 0; r < n; r++)
        for (c = 0; c < POL_C2; c++)
            w->dc2[r * POL_C2 + c] =
                w->c2[r * POL_C2 + c] > 0
                    ? w->da[r * (POL_LAT + POL_C2) + POL_LAT + c]
                    : 0;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, POL_C2, POL_C1, (int)n,
                1.0f, w->dc2, POL_C2, w->c1, POL_C1, 0.0f, g + POL_C2W, POL_C1);
    col_sums(g + POL_C2B, w->dc2, n, POL_C2, POL_C2);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, POL_C1,
                POL_C2, 1.0f, w->dc2, POL_C2, p + POL_C2W, POL_C1, 0.0f, w->dc1,
                POL_C1);
    for (r = 0; r < n * POL_C1; r++)
        if (!(w->c1[r] > 0))
            w->dc1[r] = 0;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, POL_C1, POL_NCOST,
                (int)n, 1.0f, w->dc1, POL_C1, rc->x, POL_NCOST, 0.0f,
                g + POL_C1W, POL_NCOST);
    col_sums(g + POL_C1B, w->dc1, n, POL_C1, POL_C1);

    /* The latent branch: back to the tables, then through the encoder. */
    latent_grads(tr, order, nt, ne, scale);
    for (r = 0; r < nt * POL_LAT; r++)
        if (!(w->u[r] > 0))
            w->du[r] = 0;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, POL_LAT, POL_H1,
                (int)nt, 1.0f, w->du, POL_LAT, w->he, POL_H1, 0.0f, g + POL_E2W,
                POL_H1);
    col_sums(g + POL_E2B, w->du, nt, POL_LAT, POL_LAT);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nt, POL_H1,
                POL_LAT, 1.0f, w->du, POL_LAT, p + POL_E2W, POL_H1, 0.0f,
                w->dhe, POL_H1);
    for (r = 0; r < nt * POL_H1; r++)
        if (!(w->he[r] > 0))
            w->dhe[r] = 0;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, POL_H1, POL_IN,
                (int)nt, 1.0f, w->dhe, POL_H1, w->xt, POL_IN, 0.0f, g + POL_E1W,
                POL_IN);
    col_sums(g + POL_E1B, w->dhe, nt, POL_H1, POL_H1);
}

static void adam_step(struct trainer *tr, double lr)
{
    models__adam(tr->pn->p, tr->grad, tr->m1, tr->m2, POL_NPARAMS, ++tr->step,
                 lr);
}

/* ------------------------------------------------------------------------ */
/* Training                                                                  */

static void init_params(struct trainer *tr)
{
    float *p = tr->pn->p;

    memset(p, 0, POL_NPARAMS * sizeof(float));
    models__init_layer(&tr->g, p + POL_E1W, POL_H1, POL_IN);
    models__init_layer(&tr->g, p + POL_E2W, POL_LAT, POL_H1);
    models__init_layer(&tr->g, p + POL_C1W, POL_C1, POL_NCOST);
    models__init_layer(&tr->g, p + POL_C2W, POL_C2, POL_C1);
    models__init_layer(&tr->g, p + POL_H1W, POL_HH, POL_LAT + POL_C2);
    models__init_layer(&tr->g, p + POL_H2W, 1, POL_HH);
}

static int check_params(const struct policy_train_params *p, struct sd_diag *d)
{
    if (p->iterations < 1 || p->iterations > PT_ITERATIONS_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           "train-policy: iterations %d is not in [1, %d]",
                           (int)p->iterations, PT_ITERATIONS_MAX);
    if (p->episodes < 2 || p->episodes > PT_EPISODES_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           "train-policy: episodes %d is not in [2, %d]",
                           (int)p->episodes, PT_EPISODES_MAX);
    if (p->ndevices < 1 || p->ndevices > TOPO_DEVICES_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           "train-policy: ndevices %d is not in [1, %d]",
                           (int)p->ndevices, TOPO_DEVICES_MAX);
    if (p->mem_bytes < 1 || p->batch_size < 0 || p->eval_every < 1)
        return sd_diag_set(d, SD_EINVAL,
                           "train-policy: mem_bytes, batch_size or "
                           "eval_every out of range");
    if (!isfinite(p->lr) || !(p->lr > 0))
        return sd_diag_set(d, SD_EINVAL,
                           "train-policy: lr %g is not a finite number > 0",
                           p->lr);
    if (!isfinite(p->entropy) || !(p->entropy >= 0))
        return sd_diag_set(d, SD_EINVAL,
                           "train-policy: entropy %g is not a finite number "
                           ">= 0",
                           p->entropy);
    return 0;
}

static int check_tasks(const char *what, const struct policy_task *t, size_t n,
                       bool need, size_t *tmax, struct sd_diag *d)
{
    struct sd_diag sub;
    size_t k;
    int rv;

    if (need && n == 0)
        return sd_diag_set(d, SD_EINVAL, "train-policy: no %s tasks", what);
    for (k = 0; k < n; k++) {
        if (t[k].ntables < 1 || t[k].tables == NULL ||
            t[k].ntables > PT_TABLES_MAX)
            return sd_diag_set(d, SD_EINVAL,
                               "%s tasks[%zu]: %zu tables is not in [1, %d]",
                               what, k, t[k].ntables, PT_TABLES_MAX);
        rv = table_validate_all(t[k].tables, t[k].ntables, &sub);
        if (rv != 0)
            return sd_diag_set(d, rv, "%s tasks[%zu]: %s", what, k, sub.msg);
        if (t[k].ntables > *tmax)
            *tmax = t[k].ntables;
    }
    return 0;
}

static void trainer_free(struct trainer *tr)
{
    size_t k;

    for (k = 0; tr->envs != NULL && k < tr->ntrain; k++)
        policy_env_free(tr->envs[k]);
    free(tr->envs);
    free(tr->rec.x);
    free(tr->rec.dev);
    free(tr->rec.first);
    free(tr->rec.action);
    free(tr->rec.actrow);
    free(tr->rec.cost);
    free(tr->rec.adv);
    free(tr->w.xt);
    free(tr->w.he);
    free(tr->w.u);
    free(tr->w.du);
    free(tr->w.dhe);
    free(tr->w.c1);
    free(tr->w.c2);
    free(tr->w.a);
    free(tr->w.hh);
    free(tr->w.out);
    free(tr->w.g);
    free(tr->w.dhh);
    free(tr->w.da);
    free(tr->w.dc2);
    free(tr->w.dc1);
    free(tr->w.acc);
    free(tr->grad);
    free(tr->m1);
    free(tr->m2);
    free(tr->best);
}

/* Every buffer, sized for the largest task; 0 or SD_ENOMEM. */
static int trainer_alloc(struct trainer *tr)
{
    size_t ne = (size_t)tr->p->episodes, nt = tr->tmax;
    size_t nd = (size_t)tr->topo.ndevices, rows = ne * nt * nd;
    struct rec *rc = &tr->rec;
    struct work *w = &tr->w;

    rc->cap_rows = rows;
    rc->x = malloc(rows * POL_NCOST * sizeof(float));
    rc->dev = malloc(rows * sizeof(int32_t));
    rc->first = malloc((ne * nt + 1) * sizeof(size_t));
    rc->action = malloc(ne * nt * sizeof(int32_t));
    rc->actrow = calloc(ne * nt, sizeof(size_t));
    rc->cost = malloc(ne * sizeof(double));
    rc->adv = malloc(ne * sizeof(double));
    w->xt = malloc(nt * POL_IN * sizeof(float));
    w->he = malloc(nt * POL_H1 * sizeof(float));
    w->u = malloc(nt * POL_LAT * sizeof(float));
    w->du = malloc(nt * POL_LAT * sizeof(float));
    w->dhe = malloc(nt * POL_H1 * sizeof(float));
    w->c1 = malloc(rows * POL_C1 * sizeof(float));
    w->c2 = malloc(rows * POL_C2 * sizeof(float));
    w->a = malloc(rows * (POL_LAT + POL_C2) * sizeof(float));
    w->hh = malloc(rows * POL_HH * sizeof(float));
    w->out = malloc(rows * sizeof(float));
    w->g = calloc(rows, sizeof(float));
    w->dhh = malloc(rows * POL_HH * sizeof(float));
    w->da = malloc(rows * (POL_LAT + POL_C2) * sizeof(float));
    w->dc2 = malloc(rows * POL_C2 * sizeof(float));
    w->dc1 = malloc(rows * POL_C1 * sizeof(float));
    w->acc = malloc(nd * POL_LAT * sizeof(float));
    tr->grad = malloc(POL_NPARAMS * sizeof(float));
    tr->m1 = calloc(POL_NPARAMS, sizeof(float));
    tr->m2 = calloc(POL_NPARAMS, sizeof(float));
    tr->best = malloc(POL_NPARAMS * sizeof(float));
    if (!rc->x || !rc->dev || !rc->first || !rc->action || !rc->actrow ||
        !rc->cost || !rc->adv || !w->xt || !w->he || !w->u || !w->du ||
        !w->dhe || !w->c1 || !w->c2 || !w->a || !w->hh || !w->out || !w->g ||
        !w->dhh || !w->da || !w->dc2 || !w->dc1 || !w->acc || !tr->grad ||
        !tr->m1 || !tr->m2 || !tr->best)
        return SD_ENOMEM;
    return 0;
}

/* One Adam step on a task drawn from the training set. */
static void train_step(struct trainer *tr, double lr, float *x, bool *legal,
                       double *logit, double *prob)
{
    struct policy_env *e = tr->envs[rng_below(&tr->g, tr->ntrain)];
    const uint32_t *order = policy_env_order(e);
    int32_t ne = tr->p->episodes, ep;
    size_t nt = policy_env_ntables(e), k;
    float scale = (float)tr->topo.ndevices / (float)nt;

    policy_env_reencode(e);
    tr->rec.nrows = 0;
    for (ep = 0; ep < ne; ep++) {
        tr->rec.cost[ep] = play(tr, e, nt, ep, x, legal, logit, prob);
        /* Forced placements: remember the device, encoded below zero. */
        for (k = 0; k < nt; k++)
            if (tr->rec.action[(size_t)ep * tr->tmax + k] < 0)
                tr->rec.action[(size_t)ep * tr->tmax + k] =
                    -1 - policy_env_devices(e)[order[k]];
    }
    advantages(&tr->rec, ne);
    memcpy(tr->w.xt, policy_env_inputs(e), nt * POL_IN * sizeof(float));
    forward_tables(tr->pn->p, &tr->w, nt);
    fill_latents(tr, order, nt, ne, scale);
    forward_rows(tr->pn->p, &tr->rec, &tr->w);
    logit_grads(tr, nt, ne);
    backward(tr, order, nt, ne, scale);
    adam_step(tr, lr);
}

/* Validation: the policy's argmax against the model-cost LPT. */
static int validate(struct trainer *tr, const struct policy_task *val,
                    size_t nval, double *ratio)
{
    return policy_lpt_ratio(tr->pn, tr->m, val, nval, tr->topo.ndevices,
                            tr->p->mem_bytes, tr->topo.batch_size, ratio);
}

/*
 * The steps, validating every eval_every and at the end; leaves the best
 * validated weights in pn (the initial ones when none did better).
 */
static int run_steps(struct trainer *tr, const struct policy_task *val,
                     size_t nval, struct sd_diag *d)
{
    const struct policy_train_params *p = tr->p;
    int32_t nd = tr->topo.ndevices, it;
    float *x = malloc((size_t)nd * POL_NCOST * sizeof(*x));
    bool *legal = malloc((size_t)nd * sizeof(*legal));
    double *logit = malloc((size_t)nd * sizeof(*logit));
    double *prob = malloc((size_t)nd * sizeof(*prob));
    double best = INFINITY, ratio = 0;
    int rv = 0;

    if (!x || !legal || !logit || !prob) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_free;
    }
    if (nval > 0) {
        rv = validate(tr, val, nval, &best);
        if (rv != 0)
            goto out_nomem;
    }
    memcpy(tr->best, tr->pn->p, POL_NPARAMS * sizeof(float));
    tr->pn->metrics.val_ratio = nval > 0 ? best : 0;
    for (it = 1; it <= p->iterations; it++) {
        double lr = p->lr * (1.0 - 0.9 * (it - 1) / (double)p->iterations);
        bool last = it == p->iterations;

        train_step(tr, lr, x, legal, logit, prob);
        tr->pn->metrics.iterations = it;
        if (it % p->eval_every != 0 && !last)
            continue;
        ratio = 0;
        if (nval > 0) {
            rv = validate(tr, val, nval, &ratio);
            if (rv != 0)
                goto out_nomem;
        }
        /* Without validation tasks the last weights are kept. */
        if (nval == 0 || ratio < best) {
            best = ratio;
            memcpy(tr->best, tr->pn->p, POL_NPARAMS * sizeof(float));
            tr->pn->metrics.best_iteration = it;
            tr->pn->metrics.val_ratio = ratio;
        }
        if (p->progress != NULL &&
            p->progress(p->ctx, it, p->iterations, nval > 0 ? ratio : 0))
            break;
    }
    memcpy(tr->pn->p, tr->best, POL_NPARAMS * sizeof(float));
    goto out_free;

out_nomem:
    rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
out_free:
    free(x);
    free(legal);
    free(logit);
    free(prob);
    return rv;
}

int policy_train(const struct policy_train_params *p, const struct cost_net *m,
                 const struct policy_task *train, size_t ntrain,
                 const struct policy_task *val, size_t nval,
                 struct policy_net **out, struct sd_diag *d)
{
    struct trainer tr;
    size_t k, tmax = 0;
    int rv;

    rv = check_params(p, d);
    if (rv == 0)
        rv = check_tasks("training", train, ntrain, true, &tmax, d);
    if (rv == 0)
        rv = check_tasks("validation", val, nval, false, &tmax, d);
    if (rv != 0)
        return rv;
    memset(&tr, 0, sizeof(tr));
    tr.p = p;
    tr.m = m;
    tr.ntrain = ntrain;
    tr.tmax = tmax;
    topology_default(&tr.topo, p->ndevices, p->mem_bytes);
    tr.topo.batch_size = p->batch_size > 0 ? p->batch_size : m->batch_size;
    rng_seed(&tr.g, p->seed);
    tr.pn = calloc(1, sizeof(*tr.pn));
    tr.envs = calloc(ntrain, sizeof(*tr.envs));
    if (tr.pn == NULL || tr.envs == NULL || trainer_alloc(&tr) != 0) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_free;
    }
    snprintf(tr.pn->profile, sizeof(tr.pn->profile), "%s", m->profile);
    tr.pn->model_crc = policy_model_crc(m);
    tr.pn->metrics.seed = p->seed;
    tr.pn->metrics.train_devices = p->ndevices;
    tr.pn->metrics.train_tasks = (int32_t)ntrain;
    tr.pn->metrics.val_tasks = (int32_t)nval;
    /* The rng's draws, in order: the weights, then every step's task and
     * actions. */
    init_params(&tr);
    for (k = 0; k < ntrain; k++) {
        rv = policy_env_new(tr.pn, m, NULL, train[k].tables, train[k].ntables,
                            &tr.topo, OPTIMIZER_SGD, &tr.envs[k]);
        if (rv != 0) {
            rv = sd_diag_set(d, rv, "out of memory");
            goto out_free;
        }
    }
    rv = run_steps(&tr, val, nval, d);
    if (rv == 0) {
        *out = tr.pn;
        tr.pn = NULL;
    }
out_free:
    free(tr.pn);
    trainer_free(&tr);
    return rv;
}
