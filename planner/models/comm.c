/*
 * Learned communication models (models.h; neuroshard.md 4, 5.2, 6.1):
 * model sets that hold them, their inference, and the comm_model that
 * answers a plan's exchange with them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/models.h"
#include "problem/problem.h"

size_t comm_net_nparams(int32_t nlayers, const int32_t *sizes)
{
    size_t n = 0;
    int32_t l;

    for (l = 0; l < nlayers; l++)
        n += (size_t)sizes[l + 1] * (size_t)sizes[l] + (size_t)sizes[l + 1];
    return n;
}

struct cost_net *net_alloc(void)
{
    return calloc(1, sizeof(struct cost_net));
}

/* c's fields in range and consistent; SD_EINVAL naming the first that is
 * not. */
static int comm_check(const struct comm_net *c, const float *p,
                      struct sd_diag *d)
{
    int32_t l, n = c->ndevices;
    size_t i;

    if (c->dir != COMM_FWD && c->dir != COMM_BWD)
        return sd_diag_set(d, SD_EINVAL, "comm model: dir %d is not 0 or 1",
                           (int)c->dir);
    if (n < 2 || n > COMM_DEVICES_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           "comm model: ndevices %d is not in [2, %d]", (int)n,
                           COMM_DEVICES_MAX);
    if (c->nlayers < 1 || c->nlayers > COMM_LAYERS_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           "comm model: nlayers %d is not in [1, %d]",
                           (int)c->nlayers, COMM_LAYERS_MAX);
    for (l = 0; l <= c->nlayers; l++)
        if (c->sizes[l] < 1 || c->sizes[l] > COMM_WIDTH_MAX)
            return sd_diag_set(d, SD_EINVAL,
                               "comm model: sizes[%d] %d is not in [1, %d]",
                               (int)l, (int)c->sizes[l], COMM_WIDTH_MAX);
    if (c->sizes[0] != (c->dir == COMM_FWD ? 2 * n : n) ||
        c->sizes[c->nlayers] != n)
        return sd_diag_set(d, SD_EINVAL,
                           "comm model: %d inputs and %d outputs, a %s model "
                           "of %d devices has %d and %d",
                           (int)c->sizes[0], (int)c->sizes[c->nlayers],
                           c->dir == COMM_FWD ? "forward" : "backward", (int)n,
                           (int)(c->dir == COMM_FWD ? 2 * n : n), (int)n);
    if (c->activation < 0 || c->activation > NET_ACT_SOFTPLUS)
        return sd_diag_set(d, SD_EINVAL,
                           "comm model: activation %d is not 0 or 1",
                           (int)c->activation);
    if (!isfinite(c->eps) || c->eps < 0)
        return sd_diag_set(d, SD_EINVAL,
                           "comm model: eps %g is not a finite number >= 0",
                           (double)c->eps);
    if (c->nparams != comm_net_nparams(c->nlayers, c->sizes) ||
        c->nparams > COMM_PARAMS_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           "comm model: %zu parameters, its sizes have %zu "
                           "(at most %d)",
                           c->nparams, comm_net_nparams(c->nlayers, c->sizes),
                           COMM_PARAMS_MAX);
    for (i = 0; i < (size_t)c->sizes[0]; i++)
        if (!isfinite(c->mean[i]) || !isfinite(c->std[i]) || c->std[i] < 0)
            return sd_diag_set(d, SD_EINVAL,
                               "comm model: mean[%zu] or std[%zu] is not "
                               "finite (std >= 0)",
                               i, i);
    for (i = 0; i < c->nparams; i++)
        if (!isfinite(p[i]))
            return sd_diag_set(d, SD_EINVAL,
                               "comm model: parameter %zu is not finite", i);
    return 0;
}

int net_add_comm(struct cost_net **mp, const struct comm_net *c, const float *p,
                 struct sd_diag *d)
{
    struct cost_net *m = *mp;
    int rv = comm_check(c, p, d);

    if (rv != 0)
        return rv;
    if (m->ncomm >= COMM_NETS_MAX)
        return sd_diag_set(d, SD_EINVAL, "model set has %d comm models already",
                           COMM_NETS_MAX);
    if (net_comm_find(m, (enum comm_dir)c->dir, c->ndevices) != NULL)
        return sd_diag_set(d, SD_EINVAL,
                           "model set has a %s comm model of %d devices "
                           "already",
                           c->dir == COMM_FWD ? "forward" : "backward",
                           (int)c->ndevices);
    m = realloc(m, sizeof(*m) + (m->ncomm_p + c->nparams) * sizeof(float));
    if (m == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    *mp = m;
    m->comm[m->ncomm] = *c;
    m->comm[m->ncomm].off = m->ncomm_p;
    m->ncomm_p += c->nparams;
    comm_net_params_set(m, &m->comm[m->ncomm], p);
    m->ncomm++;
    return 0;
}

/* Each layer's weights transposed between [out][in] (file) and [in][out]
 * (memory); to_memory says which way. */
static void relayout(const struct comm_net *c, const float *src, float *dst,
                     bool to_memory)
{
    int32_t l, o, i;

    for (l = 0; l < c->nlayers; l++) {
        int32_t nin = c->sizes[l], nout = c->sizes[l + 1];

        for (o = 0; o < nout; o++)
            for (i = 0; i < nin; i++) {
                size_t file = (size_t)o * nin + i, mem = (size_t)i * nout + o;

                dst[to_memory ? mem : file] = src[to_memory ? file : mem];
            }
        src += (size_t)nout * nin;
        dst += (size_t)nout * nin;
        memcpy(dst, src, (size_t)nout * sizeof(float)); /* the bias */
        src += nout;
        dst += nout;
    }
}

void comm_net_params_get(const struct cost_net *m, const struct comm_net *c,
                         float *p)
{
    relayout(c, m->comm_p + c->off, p, false);
}

void comm_net_params_set(struct cost_net *m, const struct comm_net *c,
                         const float *p)
{
    relayout(c, p, m->comm_p + c->off, true);
}

const struct comm_net *net_comm_find(const struct cost_net *m,
                                     enum comm_dir dir, int32_t ndevices)
{
    int32_t k;

    for (k = 0; k < m->ncomm; k++)
        if (m->comm[k].dir == (int32_t)dir && m->comm[k].ndevices == ndevices)
            return &m->comm[k];
    return NULL;
}

#if defined(__GNUC__)
/* Four floats in one vector register (GCC and clang's vector extension). */
typedef float comm_v4 __attribute__((vector_size(16)));
#endif

/* y[0 .. n) += a * col[0 .. n). */
static void axpy(float *y, const float *col, float a, int32_t n)
{
    int32_t o = 0;

#if defined(__GNUC__)
    comm_v4 av = {a, a, a, a};

    for (; o + 4 <= n; o += 4) {
        comm_v4 yv, cv;

        memcpy(&yv, y + o, sizeof(yv));
        memcpy(&cv, col + o, sizeof(cv));
        yv += cv * av;
        memcpy(y + o, &yv, sizeof(yv));
    }
#endif
    for (; o < n; o++)
        y[o] += col[o] * a;
}

void comm_net_run(const struct cost_net *m, const struct comm_net *c,
                  const double *in, double *out)
{
    float a[COMM_WIDTH_MAX], b[COMM_WIDTH_MAX], *x = a, *y = b, *t;
    const float *p = m->comm_p + c->off;
    int32_t l, o, i;

    for (i = 0; i < c->sizes[0]; i++)
        x[i] = ((float)in[i] - c->mean[i]) / (c->std[i] + c->eps);
    for (l = 0; l < c->nlayers; l++) {
        int32_t nin = c->sizes[l], nout = c->sizes[l + 1];
        const float *w = p, *bias = p + (size_t)nout * nin;

        /* y = b + sum_i x_i W[i][.], the columns of W^T (memory layout);
         * inputs a ReLU zeroed add nothing. */
        memcpy(y, bias, (size_t)nout * sizeof(float));
        for (i = 0; i < nin; i++)
            if (x[i] != 0)
                axpy(y, w + (size_t)i * nout, x[i], nout);
        /* ReLU between layers, not after the last. */
        if (l + 1 < c->nlayers)
            for (o = 0; o < nout; o++)
                y[o] = y[o] > 0 ? y[o] : 0;
        p = bias + nout;
        t = x;
        x = y;
        y = t;
    }
    for (o = 0; o < c->ndevices; o++) {
        double v = x[o];

        if (c->activation == NET_ACT_SOFTPLUS)
            out[o] = net_softplus(v);
        else
            out[o] = v > 0 ? v : 0; /* no time is below 0 */
    }
}

/* ------------------------------------------------------------------------ */
/* The comm_model of a set                                                   */

/*
 * neuroshard.md 6.1: the backward exchange from the dim sums; each device's
 * wait before the forward one is its ready time (compute + backward) less
 * the earliest; the forward exchange from the dim sums and the waits.
 */
static void learned_exchange(void *ctx, const struct topology *t,
                             const int32_t *dim_sum, const double *compute_ms,
                             double *fwd_ms, double *bwd_ms)
{
    const struct net_comm_model *ncm = ctx;
    double in[COMM_IN_MAX] = {0}, ready, first = INFINITY;
    int32_t n = t->ndevices, r;

    for (r = 0; r < n; r++)
        in[r] = (double)dim_sum[r] * ncm->dim_scale;
    comm_net_run(ncm->net, ncm->bwd, in, bwd_ms);
    for (r = 0; r < n; r++) {
        ready = (compute_ms ? compute_ms[r] : 0) + bwd_ms[r];
        if (ready < first)
            first = ready;
    }
    for (r = 0; r < n; r++)
        in[n + r] = (compute_ms ? compute_ms[r] : 0) + bwd_ms[r] - first;
    comm_net_run(ncm->net, ncm->fwd, in, fwd_ms);
}

bool net_comm_model_init(struct net_comm_model *ncm, const struct cost_net *m,
                         const struct topology *t)
{
    const struct comm_net *fwd = net_comm_find(m, COMM_FWD, t->ndevices);
    const struct comm_net *bwd = net_comm_find(m, COMM_BWD, t->ndevices);
    size_t len;

    if (fwd == NULL || bwd == NULL)
        return false;
    memset(ncm, 0, sizeof(*ncm));
    ncm->net = m;
    ncm->fwd = fwd;
    ncm->bwd = bwd;
    ncm->dim_scale = (double)t->batch_size / (double)m->batch_size;
    len = (size_t)snprintf(ncm->name, sizeof(ncm->name),
                           "neural_comm:%s (%d devices)", m->profile,
                           (int)t->ndevices);
    if (t->batch_size != m->batch_size && len < sizeof(ncm->name))
        snprintf(ncm->name + len, sizeof(ncm->name) - len,
                 " (scaled from batch %lld)", (long long)m->batch_size);
    ncm->cm.name = ncm->name;
    ncm->cm.exchange = learned_exchange;
    ncm->cm.ctx = ncm;
    return true;
}
