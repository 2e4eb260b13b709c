/*
 * The compute model written out again in double precision for the model
 * tests (test_net.c, test_net_features.c): the derived inputs from their
 * definitions and the whole network from its documented layout.
 */
#ifndef SHARDD_TEST_REF_NET_H
#define SHARDD_TEST_REF_NET_H

#include <math.h>
#include <stdint.h>

#include "planner.h"

/* The derived inputs written out again from their definitions
 * (models.h, docs/model-format.md), in double precision. */
static inline double ref_net_extra(int id, const struct table *t, int32_t cols,
                                   int64_t batch)
{
    double elem = t->dtype == TABLE_DTYPE_FP32 ? 4 : 2; /* fp16/bf16 here */
    double lookups = t->pooling_factor * (double)batch, per_row = 0, unique;
    int k;

    for (k = 0; k < TABLE_NBINS; k++)
        per_row += t->bins[k] * (k == 0    ? 1.0
                                 : k == 16 ? 65536.0
                                           : 0.75 * pow(2, k) + 0.5);
    unique = per_row > 0 && lookups > 0 ? lookups / per_row : 0;
    if (unique > (double)t->rows)
        unique = (double)t->rows;
    switch (id) {
    case NET_X_ELEM_BYTES:
        return elem;
    case NET_X_LOOKUPS:
        return log(1 + lookups);
    case NET_X_UNIQUE:
        return log(1 + unique);
    case NET_X_UNIQUE_BYTES:
        return log(1 + unique * cols * elem);
    case NET_X_TABLE_BYTES:
        return log((double)t->rows * cols * elem);
    case NET_X_LOG_DIM:
        return log(cols);
    case NET_X_LOOKUP_BYTES:
        return log(1 + lookups * cols * elem);
    /* The physical prior's terms, untransformed. */
    case NET_X_PHYS_TABLES:
        return 1;
    case NET_X_PHYS_BAGS:
        return (double)batch;
    case NET_X_PHYS_BAG_COLS:
        return (double)batch * cols;
    case NET_X_PHYS_LOOKUPS:
        return lookups;
    case NET_X_PHYS_LOOKUP_COLS:
        return lookups * cols;
    case NET_X_PHYS_UNIQUE_BYTES:
        return unique * cols * elem;
    case NET_X_PHYS_L2_REREADS: {
        double ub = unique * cols * elem, l2 = 2 << 20;

        return ub > l2 && lookups > unique
                   ? (lookups - unique) * cols * elem * (ub - l2) / ub
                   : 0;
    }
    case NET_X_PHYS_HALF_COLS:
        return elem == 2 ? lookups * cols : 0;
    case NET_X_PHYS_PAIR_TABLES: /* pf / (pf + 4) */
        return lookups / (lookups + 4.0 * (double)batch);
    default:
        return NAN;
    }
}

/* The whole network in double precision, straight from the documented
 * layout, with the derived inputs' columns of the first layer from xw (none
 * in a format 1 or 2 model): the reference the float code must match. */
static inline double ref_net_ms(const struct cost_net *m, const struct table *t,
                                const int32_t *cols, size_t n)
{
    double s[NET_LAT] = {0}, y, phys = 0, bag_cols = 0, count = 0;
    bool weighed = false; /* v4: tables counted by phys_pair_tables */
    size_t k;
    int i, o;

    for (i = 0; i < m->x.n; i++)
        weighed = weighed || m->x.id[i] == NET_X_PHYS_PAIR_TABLES;

    for (k = 0; k < n; k++) {
        float f[NET_IN];
        double x[NET_IN_MAX], h[NET_H1];

        net_features(&t[k], cols[k], f);
        /* A prior model (NET_ACT_PRIOR): the shard's physical ms from the
         * terms' definitions and the model's coefficients, and the pair
         * term's tables (or their shares) x bag columns. */
        for (i = 0; i < m->x.n && net_has_prior(m); i++)
            if (NET_X_IS_PHYS(m->x.id[i]))
                phys +=
                    net_prior_coef(m, m->x.id[i]) *
                    ref_net_extra(m->x.id[i], &t[k], cols[k], m->batch_size);
        bag_cols += (double)m->batch_size * cols[k];
        count += weighed ? ref_net_extra(NET_X_PHYS_PAIR_TABLES, &t[k], cols[k],
                                         m->batch_size)
                         : 1;
        for (i = 0; i < NET_IN; i++)
            x[i] = (f[i] - m->mean[i]) / (m->std[i] + 1e-6);
        for (i = 0; i < m->x.n; i++)
            x[NET_IN + i] =
                (ref_net_extra(m->x.id[i], &t[k], cols[k], m->batch_size) -
                 m->mean[NET_IN + i]) /
                (m->std[NET_IN + i] + 1e-6);
        for (o = 0; o < NET_H1; o++) {
            double a = m->p[NET_B1 + o];

            for (i = 0; i < NET_IN; i++)
                a += m->p[NET_W1 + o * NET_IN + i] * x[i];
            for (i = 0; i < m->x.n; i++)
                a += m->xw[o * NET_XMAX + i] * x[NET_IN + i];
            h[o] = a > 0 ? a : 0;
        }
        for (o = 0; o < NET_LAT; o++) {
            double a = m->p[NET_B2 + o];

            for (i = 0; i < NET_H1; i++)
                a += m->p[NET_W2 + o * NET_H1 + i] * h[i];
            s[o] += a > 0 ? a : 0;
        }
    }
    y = m->p[NET_B4];
    for (o = 0; o < NET_H2; o++) {
        double a = m->p[NET_B3 + o];

        for (i = 0; i < NET_LAT; i++)
            a += m->p[NET_W3 + o * NET_LAT + i] * s[i];
        y += m->p[NET_W4 + o] * (a > 0 ? a : 0);
    }
    if (net_has_prior(m)) /* squareplus(y) x (base + the pair term) */
        return (y + sqrt(y * y + 4)) / 2 *
               (phys + net_prior_pair_coef(m) * count * bag_cols);
    return y > 20 ? y : log1p(exp(y));
}

#endif
