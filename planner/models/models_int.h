/*
 * Private to the models room (models.h): what its three trainers (train.c
 * for the compute model, train_comm.c for comm models, policy_train.c for
 * the placement policy) share, and the packed layers the memo computes
 * with.  No other room includes this.
 */
#ifndef SHARDD_PLANNER_MODELS_INT_H
#define SHARDD_PLANNER_MODELS_INT_H

#include <stddef.h>
#include <stdint.h>

#include "models/models.h"

/*
 * One Adam step (Kingma and Ba 2015, algorithm 1: beta 0.9 and 0.999,
 * epsilon 1e-8, bias-corrected moments) of n parameters p from gradient g,
 * moments m and v (updated), step >= 1 counted from the first, rate lr.
 * Weight decay, where a trainer has it, is its own (before this).
 */
void models__adam(float *p, const float *g, float *m, float *v, size_t n,
                  int64_t step, double lr);

/* He-uniform weights for a [nout][nin] layer followed by a ReLU: each in
 * +-sqrt(6 / nin), drawn from g in order. */
void models__init_layer(struct rng *g, float *w, int nout, int nin);

/* Fisher-Yates shuffle of a[0 .. n) with g's draws. */
void models__shuffle(struct rng *g, size_t *a, size_t n);

/* round(n * frac), at least 1 when frac > 0: the size of a split. */
size_t models__split_count(size_t n, double frac);

/*
 * A compute model's first three layers in blocks of 8 rows, input-major
 * (block b holds w[8b + k][i] at (b nin + i) 8 + k): one input's weights
 * for 8 units are 8 adjacent floats, so a latent is vector steps instead
 * of strided scalar ones.  Each unit's sum is still its bias then input 0,
 * 1, ... in order, so the result is net_latent_of_input()'s and
 * net_project()'s to the bit.  A copy: it goes stale if the model's
 * parameters change (the memo that holds one makes it with the model and
 * never outlives it).
 */
struct models__rows {
    int nin; /* the first layer's inputs: NET_IN + the model's derived */
    float w1[NET_H1 * NET_IN_MAX];
    float w2[NET_LAT * NET_H1];
    float w3[NET_H2 * NET_LAT];
};

void models__rows_pack(const struct cost_net *m, struct models__rows *r);

/* net_latent_of_input() then net_project() of normalised inputs x, the
 * same floats, from r (m's, packed). */
void models__rows_project(const struct cost_net *m,
                          const struct models__rows *r,
                          const float x[NET_IN_MAX], float proj[NET_H2]);

/*
 * The physical prior's fit (prior.c, for train.c): the non-negative
 * coefficients coef[nt] (ms per unit of each term) that minimise the
 * relative error of sum_j coef[j] terms[k nt + j] against ms[k] over n
 * shards, reweighted towards its absolute value (MAPE).  0, SD_EINVAL when
 * no term fits (every coefficient 0; d says) or SD_ENOMEM.
 */
int models__prior_fit(const double *terms, const double *ms, size_t n, int nt,
                      double *coef, struct sd_diag *d);

/* The derived input a prior model's count unit reads, of its inputs x:
 * phys_pair_tables where x has it, else phys_tables. */
int models__prior_count_id(const struct net_extras *x);

/* A prior model's reserved weights (models.h, NET_ACT_PRIOR), as the
 * trainer fits them. */
struct models__prior {
    float base[NET_XMAX]; /* the base unit's on each derived input (0 but
                           * on physical terms) */
    float count; /* the count unit's on its input (models__prior_count_id()) */
    float cols;  /* the columns unit's on phys_bag_cols */
    float pair;  /* the count head unit's on the count latent */
};

/*
 * Fixes the reserved units of a prior model in parameters p of the packed
 * layout (net_params_pack(), inputs NET_IN + x->n) to pr's: what
 * net_prior_check() checks.
 */
void models__prior_pin(float *p, const struct net_extras *x,
                       const struct models__prior *pr);

#endif /* SHARDD_PLANNER_MODELS_INT_H */
