/*
 * The compute cost model resident on a device and a device's matrix
 * products (kernels.h): argument checks and dispatch to the backend's ops,
 * the same for every backend, so that a backend sees only valid calls.
 */
#include <stdlib.h>

#include "kern_internal.h"

struct kern_net {
    const struct kern_backend *be;
    void *impl; /* the backend's */
    int32_t device;
    struct kern_net_dims dims;
    uint64_t bytes;
};

struct kern_blas {
    const struct kern_backend *be;
    void *impl;
};

size_t kern_net_nparams(const struct kern_net_dims *dims)
{
    size_t in, h1, lat, h2;

    if (dims == NULL || dims->in < 1 || dims->h1 < 1 || dims->lat < 1 ||
        dims->h2 < 1 || dims->in > KERN_NET_DIM_MAX ||
        dims->h1 > KERN_NET_DIM_MAX || dims->lat > KERN_NET_DIM_MAX ||
        dims->h2 > KERN_NET_DIM_MAX ||
        (dims->head != KERN_NET_HEAD_SOFTPLUS &&
         (dims->head != KERN_NET_HEAD_PRIOR || dims->h2 < 3)))
        return 0;
    in = (size_t)dims->in;
    h1 = (size_t)dims->h1;
    lat = (size_t)dims->lat;
    h2 = (size_t)dims->h2;
    return h1 * in + h1 + lat * h1 + lat + h2 * lat + h2 + h2 + 1;
}

void kern__net_layout(const struct kern_net_dims *dims,
                      struct kern__net_offsets *o)
{
    size_t in = (size_t)dims->in, h1 = (size_t)dims->h1;
    size_t lat = (size_t)dims->lat, h2 = (size_t)dims->h2;

    o->w1 = 0;
    o->b1 = o->w1 + h1 * in;
    o->w2 = o->b1 + h1;
    o->b2 = o->w2 + lat * h1;
    o->w3 = o->b2 + lat;
    o->b3 = o->w3 + h2 * lat;
    o->w4 = o->b3 + h2;
    o->b4 = o->w4 + h2;
}

int kern_net_open(const struct kern_backend *be, int32_t device,
                  const struct kern_net_dims *dims, const float *params,
                  struct kern_net **out, struct sd_diag *d)
{
    struct kern_net *net;
    int rv;

    if (be == NULL || params == NULL || kern_net_nparams(dims) == 0)
        return sd_diag_set(d, SD_EINVAL,
                           "net: no backend, no parameters, a layer size "
                           "out of [1, %d] or an unknown head",
                           KERN_NET_DIM_MAX);
    if (be->net_open == NULL)
        return sd_diag_set(d, SD_EUNSUPPORTED,
                           "net: the %s backend cannot score models", be->name);
    if (device < 0 || device >= be->device_count())
        return sd_diag_set(d, SD_EINVAL, "net: the %s backend has no device %d",
                           be->name, (int)device);
    net = calloc(1, sizeof(*net));
    if (net == NULL)
        return sd_diag_set(d, SD_ENOMEM, "net: out of memory");
    net->be = be;
    net->device = device;
    net->dims = *dims;
    rv = be->net_open(device, dims, params, &net->impl, &net->bytes, d);
    if (rv != 0) {
        free(net);
        return rv;
    }
    *out = net;
    return 0;
}

int kern_net_score(struct kern_net *net, const float *x, size_t nrows,
                   const size_t *shard_off, size_t nshards, double *ms,
                   struct sd_diag *d)
{
    size_t s;

    if (net == NULL || shard_off == NULL || (nshards > 0 && ms == NULL) ||
        (nrows > 0 && x == NULL))
        return sd_diag_set(d, SD_EINVAL, "net score: missing argument");
    if (shard_off[0] != 0 || shard_off[nshards] != nrows)
        return sd_diag_set(d, SD_EINVAL,
                           "net score: shard_off must run from 0 to nrows %zu",
                           nrows);
    for (s = 0; s < nshards; s++)
        if (shard_off[s + 1] < shard_off[s])
            return sd_diag_set(d, SD_EINVAL,
                               "net score: shard_off[%zu] decreases", s + 1);
    if (nshards == 0)
        return 0;
    return net->be->net_score(net->impl, x, nrows, shard_off, nshards, ms, d);
}

void kern_net_close(struct kern_net *net)
{
    if (net == NULL)
        return;
    net->be->net_close(net->impl);
    free(net);
}

const struct kern_backend *kern_net_backend(const struct kern_net *net)
{
    return net->be;
}

int32_t kern_net_device(const struct kern_net *net)
{
    return net->device;
}

uint64_t kern_net_bytes(const struct kern_net *net)
{
    return net->bytes;
}

int kern_blas_open(const struct kern_backend *be, int32_t device,
                   struct kern_blas **out, struct sd_diag *d)
{
    struct kern_blas *b;
    int rv;

    if (be == NULL)
        return sd_diag_set(d, SD_EINVAL, "blas: no backend");
    if (be->blas_open == NULL)
        return sd_diag_set(d, SD_EUNSUPPORTED,
                           "blas: the %s backend has no matrix products",
                           be->name);
    if (device < 0 || device >= be->device_count())
        return sd_diag_set(d, SD_EINVAL,
                           "blas: the %s backend has no device %d", be->name,
                           (int)device);
    b = calloc(1, sizeof(*b));
    if (b == NULL)
        return sd_diag_set(d, SD_ENOMEM, "blas: out of memory");
    b->be = be;
    rv = be->blas_open(device, &b->impl, d);
    if (rv != 0) {
        free(b);
        return rv;
    }
    *out = b;
    return 0;
}

int kern_blas_sgemm(struct kern_blas *b, bool trans_a, bool trans_b, int m,
                    int n, int k, float alpha, const float *a, int lda,
                    const float *bm, int ldb, float beta, float *c, int ldc,
                    struct sd_diag *d)
{
    /* Row-major: a row of op(A) is k long unless A is stored transposed,
     * and so on (the checks cblas_sgemm makes). */
    int a_cols = trans_a ? m : k, b_cols = trans_b ? k : n;

    if (m < 0 || n < 0 || k < 0 || lda < (a_cols > 1 ? a_cols : 1) ||
        ldb < (b_cols > 1 ? b_cols : 1) || ldc < (n > 1 ? n : 1))
        return sd_diag_set(d, SD_EINVAL,
                           "sgemm: m %d, n %d, k %d with lda %d, ldb %d, ldc "
                           "%d do not make matrices",
                           m, n, k, lda, ldb, ldc);
    if (m == 0 || n == 0)
        return 0;
    if (c == NULL || (k > 0 && (a == NULL || bm == NULL)))
        return sd_diag_set(d, SD_EINVAL, "sgemm: a matrix is NULL");
    return b->be->blas_sgemm(b->impl, trans_a, trans_b, m, n, k, alpha, a, lda,
                             bm, ldb, beta, c, ldc, d);
}

void kern_blas_close(struct kern_blas *b)
{
    if (b == NULL)
        return;
    b->be->blas_close(b->impl);
    free(b);
}

const struct kern_backend *kern_blas_backend(const struct kern_blas *b)
{
    return b->be;
}
