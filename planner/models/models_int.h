/*
 * Private to the models room (models.h): what its three trainers (train.c
 * for the compute model, train_comm.c for comm models, policy_train.c for
 * the placement policy) share.  No other room includes this.
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

#endif /* SHARDD_PLANNER_MODELS_INT_H */
