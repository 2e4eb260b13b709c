/*
 * The cpu backend's compute cost model and sgemm: the specification of the
 * cuda ones.  Scoring follows the planner's inference (planner/models/
 * net.c) operation for operation: each table's latent is projected through
 * the head's first layer and added to z = b3, the head's output is summed
 * in eight interleaved partial sums, and softplus is taken in double, so
 * that a score here equals net_tables_ms() to the last bit when both are
 * compiled alike (C11, no contraction of a * b + c).  sgemm is the plain
 * triple loop over row-major matrices.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

struct cpu_net {
    struct kern_net_dims dims;
    struct kern__net_offsets o;
    float *p; /* kern_net_nparams() floats, a copy */
};

int kern_cpu_net_open(int32_t device, const struct kern_net_dims *dims,
                      const float *params, void **out, uint64_t *bytes,
                      struct sd_diag *d)
{
    size_t np = kern_net_nparams(dims);
    struct cpu_net *n = calloc(1, sizeof(*n));

    if (n == NULL || (n->p = malloc(np * sizeof(float))) == NULL) {
        free(n);
        return sd_diag_set(d, SD_ENOMEM, "net: out of memory");
    }
    n->dims = *dims;
    kern__net_layout(dims, &n->o);
    memcpy(n->p, params, np * sizeof(float));
    *out = n;
    *bytes = np * sizeof(float);
    return 0;
}

void kern_cpu_net_close(void *net)
{
    struct cpu_net *n = net;

    if (n == NULL)
        return;
    free(n->p);
    free(n);
}

/* y = relu(W x + b) for W [nout][nin] (net.c's dense_relu()). */
static void dense_relu(const float *w, const float *b, const float *x, int nin,
                       int nout, float *y)
{
    int o, i;

    for (o = 0; o < nout; o++) {
        const float *row = w + (size_t)o * (size_t)nin;
        float s = b[o];

        for (i = 0; i < nin; i++)
            s += row[i] * x[i];
        y[o] = s > 0 ? s : 0;
    }
}

/* z += W3 lat (net.c's net_project() and head_add()). */
static void project_add(const struct cpu_net *n, const float *lat, float *z)
{
    int o, i;

    for (o = 0; o < n->dims.h2; o++) {
        const float *row = n->p + n->o.w3 + (size_t)o * (size_t)n->dims.lat;
        float s = 0;

        for (i = 0; i < n->dims.lat; i++)
            s += row[i] * lat[i];
        z[o] += s;
    }
}

/* softplus(b4 + w4 . relu(z)) (net.c's net_head_raw() and softplus), or
 * a prior head's squareplus of it times the shard's physical ms. */
static double head(const struct cpu_net *n, const float *z)
{
    const float *w4 = n->p + n->o.w4;
    float acc[8] = {0};
    double raw;
    int o;

    for (o = 0; o < n->dims.h2; o++)
        acc[o % 8] += w4[o] * (z[o] > 0 ? z[o] : 0);
    raw = (double)n->p[n->o.b4] + ((acc[0] + acc[4]) + (acc[1] + acc[5])) +
          ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    if (n->dims.head == KERN_NET_HEAD_PRIOR) {
        int h = n->dims.h2;
        double phys = (double)z[h - 1] + (double)z[h - 2] * (double)z[h - 3];
        double r = sqrt(raw * raw + 4);

        return (raw >= 0 ? (raw + r) / 2 : 2 / (r - raw)) *
               (phys > 0 ? phys : 0);
    }
    return raw > 20 ? raw : log1p(exp(raw));
}

int kern_cpu_net_score(void *net, const float *x, size_t nrows,
                       const size_t *shard_off, size_t nshards, double *ms,
                       struct sd_diag *d)
{
    const struct cpu_net *n = net;
    const struct kern_net_dims *dm = &n->dims;
    float *h, *lat, *z;
    size_t s, r;

    (void)nrows;
    h = malloc(((size_t)dm->h1 + (size_t)dm->lat + (size_t)dm->h2) *
               sizeof(float));
    if (h == NULL)
        return sd_diag_set(d, SD_ENOMEM, "net score: out of memory");
    lat = h + dm->h1;
    z = lat + dm->lat;
    for (s = 0; s < nshards; s++) {
        if (shard_off[s] == shard_off[s + 1]) {
            ms[s] = 0;
            continue;
        }
        memcpy(z, n->p + n->o.b3, (size_t)dm->h2 * sizeof(float));
        for (r = shard_off[s]; r < shard_off[s + 1]; r++) {
            dense_relu(n->p + n->o.w1, n->p + n->o.b1, x + r * (size_t)dm->in,
                       dm->in, dm->h1, h);
            dense_relu(n->p + n->o.w2, n->p + n->o.b2, h, dm->h1, dm->lat, lat);
            project_add(n, lat, z);
        }
        ms[s] = head(n, z);
    }
    free(h);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* sgemm                                                                     */

/* The cpu has no state for matrix products: a token object. */
static int blas_token;

int kern_cpu_blas_open(int32_t device, void **out, struct sd_diag *d)
{
    (void)device;
    (void)d;
    *out = &blas_token;
    return 0;
}

void kern_cpu_blas_close(void *blas)
{
    (void)blas;
}

int kern_cpu_blas_sgemm(void *blas, bool trans_a, bool trans_b, int m, int n,
                        int k, float alpha, const float *a, int lda,
                        const float *b, int ldb, float beta, float *c, int ldc,
                        struct sd_diag *d)
{
    int i, j, p;

    (void)blas;
    (void)d;
    for (i = 0; i < m; i++) {
        for (j = 0; j < n; j++) {
            float s = 0, *cij = c + (size_t)i * (size_t)ldc + (size_t)j;

            for (p = 0; p < k; p++) {
                float av = trans_a ? a[(size_t)p * (size_t)lda + (size_t)i]
                                   : a[(size_t)i * (size_t)lda + (size_t)p];
                float bv = trans_b ? b[(size_t)j * (size_t)ldb + (size_t)p]
                                   : b[(size_t)p * (size_t)ldb + (size_t)j];

                s += av * bv;
            }
            /* beta 0 overwrites C without reading it, as BLAS does. */
            *cij = beta == 0 ? alpha * s : alpha * s + beta * *cij;
        }
    }
    return 0;
}
