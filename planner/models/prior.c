/*
 * The physical prior of a compute model (models.h, NET_ACT_PRIOR;
 * docs/models.md, "A physical prior"): a shard's time as a non-negative sum
 * over its tables of what a step does (NET_X_PHYS_*), under the net, which
 * learns the ratio of the measured time to it.  Here: checking a model's
 * reserved units, reading its coefficients, and for train.c fitting them
 * (non-negative least squares, Lawson and Hanson 1974, on the normal
 * equations: at most NET_XMAX unknowns) and fixing the reserved weights.
 *
 * Why the prior rides in the net's own units: a shard's physical ms is a
 * sum over its tables, as the latents are, so with it in a latent channel
 * and a head unit every place that carries a device's projected latent sum
 * (the memo, the search's levels and devices) carries the prior too, and
 * only the head's last step changes (net.c, head_sum()).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/models.h"
#include "models/models_int.h"

bool net_has_prior(const struct cost_net *m)
{
    return net_io_activation(m) == NET_ACT_PRIOR;
}

bool net_extras_have_prior(const struct net_extras *x)
{
    int j;

    for (j = 0; j < x->n; j++)
        if (NET_X_IS_PHYS(x->id[j]))
            return true;
    return false;
}

/* Weight `what`[i][j] of m is v where want says otherwise. */
static int bad_weight(struct sd_diag *d, const char *what, int i, int j,
                      float v, const char *want)
{
    return sd_diag_set(d, SD_EINVAL,
                       "prior model: %s[%d][%d] is %g, %s (the reserved units "
                       "of NET_ACT_PRIOR)",
                       what, i, j, (double)v, want);
}

/* Which reserved unit (NET_PRIOR_BASE ..) unit u of a layer of n is; -1
 * for none. */
static int reserved(int u, int n)
{
    return u >= n - NET_PRIOR_UNITS ? n - 1 - u : -1;
}

int models__prior_count_id(const struct net_extras *x)
{
    int j;

    for (j = 0; j < x->n; j++)
        if (x->id[j] == NET_X_PHYS_PAIR_TABLES)
            return NET_X_PHYS_PAIR_TABLES;
    return NET_X_PHYS_TABLES;
}

/* Whether reserved hidden unit k reads derived input id, the count unit
 * reading count_id (models__prior_count_id()). */
static bool reads(int k, int id, int count_id)
{
    return k == NET_PRIOR_BASE    ? NET_X_IS_PHYS(id)
           : k == NET_PRIOR_COUNT ? id == count_id
                                  : id == NET_X_PHYS_BAG_COLS;
}

/* W1 and b1: the reserved units read their inputs alone (weights >= 0, no
 * bias), nothing else reads the prior's inputs. */
static int check_first(const struct cost_net *m, struct sd_diag *d)
{
    const float *p = m->p;
    const int count_id = models__prior_count_id(&m->x);
    int o, i, j, k;

    for (o = 0; o < NET_H1; o++) {
        k = reserved(o, NET_H1);
        for (i = 0; i < NET_IN && k >= 0; i++)
            if (p[NET_W1 + o * NET_IN + i] != 0)
                return bad_weight(d, "W1", o, i, p[NET_W1 + o * NET_IN + i],
                                  "not 0");
        for (j = 0; j < m->x.n; j++) {
            float w = m->xw[o * NET_XMAX + j];
            int id = m->x.id[j];

            if (k >= 0 && reads(k, id, count_id) && !(w >= 0))
                return bad_weight(d, "W1", o, NET_IN + j, w, "not >= 0");
            if ((k >= 0 ? !reads(k, id, count_id) : NET_X_IS_PHYS(id)) &&
                w != 0)
                return bad_weight(d, "W1", o, NET_IN + j, w, "not 0");
        }
        if (k >= 0 && p[NET_B1 + o] != 0)
            return bad_weight(d, "b1", o, 0, p[NET_B1 + o], "not 0");
    }
    for (j = 0; j < m->x.n; j++)
        if (NET_X_IS_PHYS(m->x.id[j]) && m->mean[NET_IN + j] != 0)
            return sd_diag_set(d, SD_EINVAL,
                               "prior model: mean[%d] of %s is %g, not 0",
                               NET_IN + j, net_extra_name(m->x.id[j]),
                               (double)m->mean[NET_IN + j]);
    return 0;
}

/* A [nout][nin] layer w (biases b) whose reserved outputs copy the
 * reserved inputs of the same k (weight 1, or >= 0 where any_k is k) and
 * whose other outputs never read those. */
static int check_copy(const float *w, const float *b, int nout, int nin,
                      int any_k, const char *name, const char *bname,
                      struct sd_diag *d)
{
    int o, i;

    for (o = 0; o < nout; o++) {
        int ko = reserved(o, nout);

        for (i = 0; i < nin; i++) {
            int ki = reserved(i, nin);
            float v = w[o * nin + i];

            if (ko >= 0 && ko == ki && ko == any_k) {
                if (!(v >= 0))
                    return bad_weight(d, name, o, i, v, "not >= 0");
            } else if (ko >= 0 && ko == ki) {
                if (v != 1)
                    return bad_weight(d, name, o, i, v, "not 1");
            } else if ((ko >= 0 || ki >= 0) && v != 0) {
                return bad_weight(d, name, o, i, v, "not 0");
            }
        }
        if (ko >= 0 && b[o] != 0)
            return bad_weight(d, bname, o, 0, b[o], "not 0");
    }
    return 0;
}

int net_prior_check(const struct cost_net *m, struct sd_diag *d)
{
    const float *p = m->p;
    bool prior = net_has_prior(m);
    int k, rv;

    if (net_extras_have_prior(&m->x) != prior)
        return sd_diag_set(d, SD_EINVAL,
                           prior ? "prior model: activation 2 (prior) but no "
                                   "phys_* derived inputs"
                                 : "model: phys_* derived inputs but "
                                   "activation %d, not 2 (prior)",
                           (int)net_io_activation(m));
    if (!prior)
        return 0;
    rv = check_first(m, d);
    if (rv == 0)
        rv = check_copy(p + NET_W2, p + NET_B2, NET_LAT, NET_H1, -1, "W2", "b2",
                        d);
    if (rv == 0)
        rv = check_copy(p + NET_W3, p + NET_B3, NET_H2, NET_LAT,
                        NET_PRIOR_COUNT, "W3", "b3", d);
    for (k = 0; rv == 0 && k < NET_PRIOR_UNITS; k++)
        if (p[NET_W4 + NET_PRIOR_H2(k)] != 0)
            rv = bad_weight(d, "W4", 0, NET_PRIOR_H2(k),
                            p[NET_W4 + NET_PRIOR_H2(k)], "not 0");
    return rv;
}

/* Reserved hidden unit k's weight on derived input id, over the input's
 * scale: what the unit adds per unit of the term; 0 where m lacks it. */
static double unit_coef(const struct cost_net *m, int k, int id)
{
    int j;

    for (j = 0; j < m->x.n && net_has_prior(m); j++)
        if (m->x.id[j] == id)
            /* x = v / (std + eps) (mean 0), so the unit's weight on v */
            return (double)m->xw[NET_PRIOR_H1(k) * NET_XMAX + j] /
                   ((double)m->std[NET_IN + j] + (double)net_io_eps(m));
    return 0;
}

double net_prior_coef(const struct cost_net *m, int id)
{
    return unit_coef(m, NET_PRIOR_BASE, id);
}

double net_prior_pair_coef(const struct cost_net *m)
{
    if (!net_has_prior(m))
        return 0;
    return (double)m->p[NET_W3 + NET_PRIOR_H2(NET_PRIOR_COUNT) * NET_LAT +
                        NET_PRIOR_LAT(NET_PRIOR_COUNT)] *
           unit_coef(m, NET_PRIOR_COUNT, models__prior_count_id(&m->x)) *
           unit_coef(m, NET_PRIOR_COLS, NET_X_PHYS_BAG_COLS);
}

/* ------------------------------------------------------------------------ */
/* Fitting                                                                   */

/*
 * Solves g[s][s] z = c[s] for the unknowns in set (k of them, indices
 * set[0 .. k)) by Cholesky, g of stride nt; the others' z are 0.  A tiny
 * ridge keeps a singular block (terms that move together) solvable.
 * false when the block is not positive definite even so.
 */
static bool solve_set(const double *g, const double *c, int nt, const int *set,
                      int k, double *z)
{
    double l[NET_XMAX * NET_XMAX], y[NET_XMAX];
    int i, j, q;

    for (i = 0; i < nt; i++)
        z[i] = 0;
    for (i = 0; i < k; i++)
        for (j = 0; j <= i; j++) {
            double s = g[set[i] * nt + set[j]];

            if (i == j)
                s *= 1 + 1e-12;
            for (q = 0; q < j; q++)
                s -= l[i * NET_XMAX + q] * l[j * NET_XMAX + q];
            if (i == j) {
                if (!(s > 0))
                    return false;
                l[i * NET_XMAX + i] = sqrt(s);
            } else {
                l[i * NET_XMAX + j] = s / l[j * NET_XMAX + j];
            }
        }
    for (i = 0; i < k; i++) {
        double s = c[set[i]];

        for (q = 0; q < i; q++)
            s -= l[i * NET_XMAX + q] * y[q];
        y[i] = s / l[i * NET_XMAX + i];
    }
    for (i = k - 1; i >= 0; i--) {
        double s = y[i];

        for (q = i + 1; q < k; q++)
            s -= l[q * NET_XMAX + i] * z[set[q]];
        z[set[i]] = s / l[i * NET_XMAX + i];
    }
    return true;
}

/*
 * Lawson-Hanson on the normal equations g x = c (g = A'A, c = A'b, nt
 * unknowns): x >= 0 minimising |A x - b|.  x out.
 */
static void nnls(const double *g, const double *c, int nt, double *x)
{
    double z[NET_XMAX], w, best, tol = 0;
    bool in[NET_XMAX] = {false};
    int set[NET_XMAX], k = 0, i, j, at, iter;

    for (i = 0; i < nt; i++) {
        x[i] = 0;
        tol = fmax(tol, fabs(c[i]));
    }
    tol *= 1e-12;
    for (iter = 0; iter < 4 * nt; iter++) {
        /* the unknown outside the set whose gradient gains most */
        at = -1;
        best = tol;
        for (i = 0; i < nt; i++) {
            if (in[i])
                continue;
            w = c[i];
            for (j = 0; j < nt; j++)
                w -= g[i * nt + j] * x[j];
            if (w > best) {
                best = w;
                at = i;
            }
        }
        if (at < 0)
            break;
        in[at] = true;
        set[k++] = at;
        for (;;) {
            double alpha = 1;
            int keep = 0;

            if (!solve_set(g, c, nt, set, k, z)) {
                in[at] = false; /* dependent on the set: leave it out */
                k--;
                break;
            }
            for (j = 0; j < k; j++)
                if (z[set[j]] <= 0) {
                    double a = x[set[j]] / (x[set[j]] - z[set[j]]);

                    alpha = a < alpha ? a : alpha;
                }
            if (alpha >= 1) {
                memcpy(x, z, (size_t)nt * sizeof(*x));
                break;
            }
            for (j = 0; j < nt; j++)
                x[j] += alpha * (z[j] - x[j]);
            for (j = 0; j < k; j++)
                if (x[set[j]] > tol)
                    set[keep++] = set[j];
                else {
                    in[set[j]] = false;
                    x[set[j]] = 0;
                }
            k = keep;
            if (k == 0)
                break;
        }
    }
}

int models__prior_fit(const double *terms, const double *ms, size_t n, int nt,
                      double *coef, struct sd_diag *d)
{
    double scale[NET_XMAX], g[NET_XMAX * NET_XMAX], c[NET_XMAX], beta[NET_XMAX];
    double *w;
    size_t k;
    int i, j, round;
    bool any = false;

    if (nt < 1 || nt > NET_XMAX || n == 0)
        return sd_diag_set(d, SD_EINVAL, "prior: %d terms of %zu samples", nt,
                           n);
    w = malloc(n * sizeof(*w));
    if (w == NULL)
        return sd_diag_set(d, SD_ENOMEM, "prior: out of memory");
    /* Rows a = terms / ms (relative error), each column scaled to a largest
     * value of 1 so the normal equations stay well conditioned. */
    for (i = 0; i < nt; i++) {
        scale[i] = 0;
        for (k = 0; k < n; k++)
            scale[i] = fmax(scale[i], terms[k * (size_t)nt + i] / ms[k]);
        if (!(scale[i] > 0))
            scale[i] = 1;
    }
    for (k = 0; k < n; k++)
        w[k] = 1;
    /* Reweighted towards the mean absolute relative error (MAPE):
     * weights 1 / sqrt(max(|error|, 0.02)), as scripts/physical-prior.py. */
    for (round = 0; round < 9; round++) {
        memset(g, 0, sizeof(g));
        memset(c, 0, sizeof(c));
        for (k = 0; k < n; k++) {
            double a[NET_XMAX], ww = w[k] * w[k];

            for (i = 0; i < nt; i++)
                a[i] = terms[k * (size_t)nt + i] / ms[k] / scale[i];
            for (i = 0; i < nt; i++) {
                c[i] += ww * a[i];
                for (j = 0; j <= i; j++)
                    g[i * nt + j] += ww * a[i] * a[j];
            }
        }
        for (i = 0; i < nt; i++)
            for (j = i + 1; j < nt; j++)
                g[i * nt + j] = g[j * nt + i];
        nnls(g, c, nt, beta);
        for (k = 0; k < n; k++) {
            double e = -1;

            for (i = 0; i < nt; i++)
                e += terms[k * (size_t)nt + i] / ms[k] / scale[i] * beta[i];
            w[k] = 1 / sqrt(fmax(fabs(e), 0.02));
        }
    }
    free(w);
    for (i = 0; i < nt; i++) {
        coef[i] = beta[i] / scale[i];
        any = any || coef[i] > 0;
    }
    if (!any)
        return sd_diag_set(d, SD_EINVAL,
                           "prior: no physical term fits the samples (every "
                           "coefficient is 0); train without the prior "
                           "(--features v2)");
    return 0;
}

void models__prior_pin(float *p, const struct net_extras *x,
                       const struct models__prior *pr)
{
    const int nin = NET_IN + x->n;
    const size_t b1 = (size_t)NET_H1 * (size_t)nin, w2 = b1 + NET_H1;
    const size_t b2 = w2 + NET_LAT * NET_H1, w3 = b2 + NET_LAT;
    const size_t b3 = w3 + NET_H2 * NET_LAT, w4 = b3 + NET_H2;
    const int count_id = models__prior_count_id(x);
    int o, i, k;

    for (o = 0; o < NET_H1; o++) {
        k = reserved(o, NET_H1);
        for (i = 0; i < nin; i++) {
            int id = i >= NET_IN ? x->id[i - NET_IN] : 0;
            float *w = &p[(size_t)o * nin + i];

            if (k == NET_PRIOR_BASE)
                *w = NET_X_IS_PHYS(id) ? pr->base[i - NET_IN] : 0;
            else if (k == NET_PRIOR_COUNT)
                *w = id == count_id ? pr->count : 0;
            else if (k == NET_PRIOR_COLS)
                *w = id == NET_X_PHYS_BAG_COLS ? pr->cols : 0;
            else if (NET_X_IS_PHYS(id))
                *w = 0;
        }
        if (k >= 0)
            p[b1 + (size_t)o] = 0;
    }
    for (o = 0; o < NET_LAT; o++)
        for (i = 0; i < NET_H1; i++) {
            k = reserved(o, NET_LAT);
            if (k >= 0 || reserved(i, NET_H1) >= 0)
                p[w2 + (size_t)o * NET_H1 + i] =
                    k >= 0 && i == NET_PRIOR_H1(k) ? 1.0f : 0.0f;
        }
    for (o = 0; o < NET_H2; o++)
        for (i = 0; i < NET_LAT; i++) {
            k = reserved(o, NET_H2);
            if (k >= 0 || reserved(i, NET_LAT) >= 0)
                p[w3 + (size_t)o * NET_LAT + i] =
                    k < 0 || i != NET_PRIOR_LAT(k) ? 0.0f
                    : k == NET_PRIOR_COUNT         ? pr->pair
                                                   : 1.0f;
        }
    for (k = 0; k < NET_PRIOR_UNITS; k++) {
        p[b2 + (size_t)NET_PRIOR_LAT(k)] = 0;
        p[b3 + (size_t)NET_PRIOR_H2(k)] = 0;
        p[w4 + (size_t)NET_PRIOR_H2(k)] = 0;
    }
}
