/*
 * The planner's compute cost model on a kernels/ device (profiler.h): the
 * bridge between the planner's types (struct cost_net, struct table,
 * struct net_gemm) and kernels/' (struct kern_net, struct kern_blas), which
 * know nothing of each other.  Scoring builds the model's inputs on the
 * host with net_input_all(), exactly as the planner does, and scores every
 * shard of a batch in one call; training's products go through a
 * kern_blas behind the planner's gemm hook.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profiler.h"

_Static_assert(NET_NPARAMS == 8993, "the layout kernels.h describes");

int prof_net_upload(const struct kern_backend *be, int32_t device,
                    const struct cost_net *m, struct kern_net **out,
                    struct sd_diag *d)
{
    /* W1 of net_nin(m) columns: the derived inputs' (format 3) after the
     * 20, the layout the kernels take for any input count. */
    const struct kern_net_dims dims = {
        net_nin(m), NET_H1, NET_LAT, NET_H2,
        net_has_prior(m) ? KERN_NET_HEAD_PRIOR : KERN_NET_HEAD_SOFTPLUS};
    float *packed;
    int rv;

    if (kern_net_nparams(&dims) != net_packed_nparams(m))
        return sd_diag_set(d, SD_EINVAL, "net: parameter layouts differ");
    /* The device kernels end in softplus (format 1's output) or a prior
     * head (format 4); a model whose output is raw (format 2,
     * NeuroShard's) is scored on the host. */
    if (net_io_activation(m) == NET_ACT_NONE)
        return sd_diag_set(d, SD_EUNSUPPORTED,
                           "net: model %s has a raw output, which the device "
                           "kernels do not apply: scored on the host",
                           m->profile);
    if (m->x.n == 0)
        return kern_net_open(be, device, &dims, m->p, out, d);
    packed = malloc(net_packed_nparams(m) * sizeof(*packed));
    if (packed == NULL)
        return sd_diag_set(d, SD_ENOMEM, "net: out of memory");
    net_params_pack(m, packed);
    rv = kern_net_open(be, device, &dims, packed, out, d);
    free(packed);
    return rv;
}

int prof_net_score_tables(struct kern_net *net, const struct cost_net *m,
                          const struct train_sample *s, size_t n, double *ms,
                          struct sd_diag *d)
{
    const size_t nin = (size_t)net_nin(m);
    float row[NET_IN_MAX];
    size_t *off, rows = 0, i, j;
    float *x;
    int rv;

    for (i = 0; i < n; i++) {
        if (s[i].ntables > SIZE_MAX / NET_IN_MAX / sizeof(float) / 2 - rows)
            return sd_diag_set(d, SD_EINVAL, "net score: too many tables");
        rows += s[i].ntables;
    }
    off = malloc((n + 1) * sizeof(*off));
    x = malloc((rows > 0 ? rows : 1) * nin * sizeof(*x));
    if (off == NULL || x == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "net score: out of memory");
        goto out_free;
    }
    off[0] = 0;
    for (i = 0; i < n; i++) {
        for (j = 0; j < s[i].ntables; j++) {
            net_input_all(m, &s[i].tables[j], s[i].tables[j].dim, row);
            memcpy(x + (off[i] + j) * nin, row, nin * sizeof(*row));
        }
        off[i + 1] = off[i] + s[i].ntables;
    }
    rv = kern_net_score(net, x, rows, off, n, ms, d);
out_free:
    free(x);
    free(off);
    return rv;
}

/* The hook's sgemm: the device's, its detail kept for prof_gemm's user. */
static int gemm_hook(void *ctx, bool trans_a, bool trans_b, int m, int n, int k,
                     float alpha, const float *a, int lda, const float *b,
                     int ldb, float beta, float *c, int ldc)
{
    struct prof_gemm *g = ctx;

    return kern_blas_sgemm(g->blas, trans_a, trans_b, m, n, k, alpha, a, lda, b,
                           ldb, beta, c, ldc, &g->diag);
}

int prof_gemm_open(const struct kern_backend *be, int32_t device,
                   struct prof_gemm *out, struct sd_diag *d)
{
    int rv;

    memset(out, 0, sizeof(*out));
    rv = kern_blas_open(be, device, &out->blas, d);
    if (rv != 0)
        return rv;
    snprintf(out->name, sizeof(out->name), "%s device %d", be->name,
             (int)device);
    out->hook.name = out->name;
    out->hook.sgemm = gemm_hook;
    out->hook.ctx = out;
    return 0;
}

void prof_gemm_close(struct prof_gemm *g)
{
    kern_blas_close(g->blas);
    g->blas = NULL;
}
