/*
 * NeuroShard's checkpoints as a shardd model set (models.h; neuroshard.md
 * 5.1-5.4): every tensor checked against the architecture it must have,
 * then copied as it is.  The compute model becomes a format-2 model with
 * identity inputs and no output activation, which is the original's
 * arithmetic; the comm models keep their layer sizes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/models.h"
#include "problem/problem.h"

/* The tensor `key` of c with exactly the given shape (ndim 1 or 2). */
static const float *want_tensor(const struct torch_ckpt *c, const char *file,
                                const char *key, int32_t ndim, int64_t rows,
                                int64_t cols, struct sd_diag *d)
{
    const struct torch_entry *e = torch_find(c, key);

    if (e == NULL || e->kind != TORCH_TENSOR) {
        sd_diag_set(d, SD_EINVAL, "%s: no tensor %s", file, key);
        return NULL;
    }
    if (e->ndim != ndim || e->shape[0] != rows ||
        (ndim == 2 && e->shape[1] != cols)) {
        if (ndim == 2)
            sd_diag_set(d, SD_EINVAL,
                        "%s: %s has shape [%lld%s%lld], NeuroShard's "
                        "architecture has [%lld, %lld]",
                        file, key, (long long)e->shape[0],
                        e->ndim > 1 ? ", " : "",
                        e->ndim > 1 ? (long long)e->shape[1] : 0LL,
                        (long long)rows, (long long)cols);
        else
            sd_diag_set(d, SD_EINVAL,
                        "%s: %s has %d dims, first %lld; NeuroShard's "
                        "architecture has [%lld]",
                        file, key, (int)e->ndim, (long long)e->shape[0],
                        (long long)rows);
        return NULL;
    }
    return e->f;
}

/* Integers `key` (one, or a list) equal to want[0 .. n). */
static int want_ints(const struct torch_ckpt *c, const char *file,
                     const char *key, const int64_t *want, size_t n,
                     struct sd_diag *d)
{
    const struct torch_entry *e = torch_find(c, key);

    if (e == NULL || e->kind == TORCH_TENSOR)
        return sd_diag_set(d, SD_EINVAL, "%s: no integers %s", file, key);
    if (e->n != n || memcmp(e->i, want, n * sizeof(*want)) != 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: %s is not what NeuroShard's architecture "
                           "has (%lld%s)",
                           file, key, (long long)want[0], n > 1 ? ", ..." : "");
    return 0;
}

/* Copies a [rows][cols] weight and its bias into p at w / b. */
static int copy_layer(const struct torch_ckpt *c, const char *file,
                      const char *name, int64_t rows, int64_t cols, float *w,
                      float *b, struct sd_diag *d)
{
    char key[TORCH_KEY_MAX];
    const float *src;

    snprintf(key, sizeof(key), "state_dict.%s.weight", name);
    src = want_tensor(c, file, key, 2, rows, cols, d);
    if (src == NULL)
        return SD_EINVAL;
    memcpy(w, src, (size_t)(rows * cols) * sizeof(float));
    snprintf(key, sizeof(key), "state_dict.%s.bias", name);
    src = want_tensor(c, file, key, 1, rows, 0, d);
    if (src == NULL)
        return SD_EINVAL;
    memcpy(b, src, (size_t)rows * sizeof(float));
    return 0;
}

/* A constant vector (feature_means / feature_stds) of n floats into out. */
static int copy_vec(const struct torch_ckpt *c, const char *file,
                    const char *key, int64_t n, float *out, struct sd_diag *d)
{
    const float *src = want_tensor(c, file, key, 1, n, 0, d);

    if (src == NULL)
        return SD_EINVAL;
    memcpy(out, src, (size_t)n * sizeof(float));
    return 0;
}

static int import_compute(const struct torch_ckpt *c, struct cost_net *m,
                          struct sd_diag *d)
{
    static const char file[] = "compute";
    static const int64_t nfeat = NET_IN, tsizes[2] = {NET_H1, NET_LAT},
                         psizes[2] = {NET_LAT, NET_H2};
    float *p = m->p;
    int rv;
    int i;

    rv = want_ints(c, file, "num_table_features", &nfeat, 1, d);
    if (rv == 0)
        rv = want_ints(c, file, "table_mlp_sizes", tsizes, 2, d);
    if (rv == 0)
        rv = want_ints(c, file, "pred_mlp_sizes", psizes, 2, d);
    if (rv == 0)
        rv = copy_layer(c, file, "t_hidden.0", NET_H1, NET_IN, p + NET_W1,
                        p + NET_B1, d);
    if (rv == 0)
        rv = copy_layer(c, file, "t_hidden.1", NET_LAT, NET_H1, p + NET_W2,
                        p + NET_B2, d);
    if (rv == 0)
        rv = copy_layer(c, file, "c_hidden.0", NET_H2, NET_LAT, p + NET_W3,
                        p + NET_B3, d);
    if (rv == 0)
        rv = copy_layer(c, file, "c_hidden.1", 1, NET_H2, p + NET_W4,
                        p + NET_B4, d);
    if (rv == 0)
        rv = copy_vec(c, file, "feature_means", NET_IN, m->mean, d);
    if (rv == 0)
        rv = copy_vec(c, file, "feature_stds", NET_IN, m->std, d);
    if (rv != 0)
        return rv;
    /* The original z-scores the raw features, in the order of
     * table_features(), and gives the head's output as it is. */
    m->io.custom = true;
    for (i = 0; i < NET_IN; i++)
        m->io.transform[i] = NET_TF_IDENTITY;
    m->io.activation = NET_ACT_NONE;
    m->io.eps = 0; /* its feature_stds have the 1e-6 added already */
    return 0;
}

/* One CommCostNet (hidden.0 .. hidden.L) into c and its parameters. */
static int import_comm(const struct torch_ckpt *ck, enum comm_dir dir,
                       struct comm_net *c, float **params, struct sd_diag *d)
{
    const char *file = dir == COMM_FWD ? "comm forward" : "comm backward";
    const struct torch_entry *nd = torch_find(ck, "ndevices");
    const struct torch_entry *nf = torch_find(ck, "num_features");
    const struct torch_entry *ms = torch_find(ck, "mlp_sizes");
    char name[32];
    float *p;
    int32_t l, n;
    size_t k;
    int rv;

    if (nd == NULL || nd->kind != TORCH_INT || nf == NULL ||
        nf->kind != TORCH_INT || ms == NULL || ms->kind != TORCH_INTS)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: ndevices, num_features or mlp_sizes missing: "
                           "not a NeuroShard comm checkpoint",
                           file);
    if (nd->i[0] < 2 || nd->i[0] > COMM_DEVICES_MAX ||
        ms->n + 1 > COMM_LAYERS_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: %lld devices or %zu hidden layers: shardd "
                           "holds 2 .. %d devices, at most %d layers",
                           file, (long long)nd->i[0], ms->n, COMM_DEVICES_MAX,
                           COMM_LAYERS_MAX);
    n = (int32_t)nd->i[0];
    memset(c, 0, sizeof(*c));
    c->dir = (int32_t)dir;
    c->ndevices = n;
    c->nlayers = (int32_t)ms->n + 1;
    c->sizes[0] = dir == COMM_FWD ? 2 * n : n;
    if (nf->i[0] != c->sizes[0])
        return sd_diag_set(d, SD_EINVAL,
                           "%s: num_features %lld, a %s model of %d devices "
                           "has %d",
                           file, (long long)nf->i[0],
                           dir == COMM_FWD ? "forward" : "backward", (int)n,
                           (int)c->sizes[0]);
    for (k = 0; k < ms->n; k++) {
        if (ms->i[k] < 1 || ms->i[k] > COMM_WIDTH_MAX)
            return sd_diag_set(d, SD_EINVAL,
                               "%s: mlp_sizes[%zu] %lld is not in [1, %d]",
                               file, k, (long long)ms->i[k], COMM_WIDTH_MAX);
        c->sizes[k + 1] = (int32_t)ms->i[k];
    }
    c->sizes[c->nlayers] = n;
    c->activation = NET_ACT_NONE;
    c->eps = 0; /* feature_stds have the 1e-6 added already */
    c->nparams = comm_net_nparams(c->nlayers, c->sizes);
    if (c->nparams > COMM_PARAMS_MAX)
        return sd_diag_set(d, SD_EINVAL, "%s: %zu parameters, at most %d", file,
                           c->nparams, COMM_PARAMS_MAX);
    p = *params = malloc(c->nparams * sizeof(float));
    if (p == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    for (l = 0; l < c->nlayers; l++) {
        int64_t nout = c->sizes[l + 1], nin = c->sizes[l];

        snprintf(name, sizeof(name), "hidden.%d", (int)l);
        rv = copy_layer(ck, file, name, nout, nin, p, p + nout * nin, d);
        if (rv != 0)
            return rv;
        p += nout * nin + nout;
    }
    rv = copy_vec(ck, file, "feature_means", c->sizes[0], c->mean, d);
    return rv ? rv : copy_vec(ck, file, "feature_stds", c->sizes[0], c->std, d);
}

static int add_comm(struct cost_net **m, const struct torch_ckpt *ck,
                    enum comm_dir dir, struct sd_diag *d)
{
    struct comm_net c;
    float *p = NULL;
    int rv = import_comm(ck, dir, &c, &p, d);

    if (rv == 0)
        rv = net_add_comm(m, &c, p, d);
    free(p);
    return rv;
}

int net_import_neuroshard(const struct torch_ckpt *compute,
                          const struct torch_ckpt *comm_fw,
                          const struct torch_ckpt *comm_bw, const char *profile,
                          int64_t batch_size, const char *notice,
                          struct cost_net **out, struct sd_diag *d)
{
    struct cost_net *m;
    int rv;

    if (profile == NULL || profile[0] == '\0' ||
        strlen(profile) >= NET_PROFILE_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           "profile: empty or longer than %d bytes",
                           NET_PROFILE_MAX - 1);
    if (batch_size < 1)
        return sd_diag_set(d, SD_EINVAL, "batch_size %lld is not >= 1",
                           (long long)batch_size);
    if (notice != NULL && strlen(notice) >= NET_NOTICE_MAX)
        return sd_diag_set(d, SD_EINVAL, "notice: longer than %d bytes",
                           NET_NOTICE_MAX - 1);
    if ((comm_fw == NULL) != (comm_bw == NULL))
        return sd_diag_set(d, SD_EINVAL,
                           "comm models come in pairs: forward and backward");
    m = net_alloc();
    if (m == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    snprintf(m->profile, sizeof(m->profile), "%s", profile);
    m->batch_size = batch_size;
    if (notice != NULL)
        snprintf(m->notice, sizeof(m->notice), "%s", notice);
    rv = import_compute(compute, m, d);
    if (rv == 0 && comm_fw != NULL)
        rv = add_comm(&m, comm_fw, COMM_FWD, d);
    if (rv == 0 && comm_bw != NULL)
        rv = add_comm(&m, comm_bw, COMM_BWD, d);
    if (rv == 0 && comm_fw != NULL &&
        m->comm[0].ndevices != m->comm[1].ndevices)
        rv = sd_diag_set(d, SD_EINVAL,
                         "comm models of %d and %d devices: a pair is of one "
                         "device count",
                         (int)m->comm[0].ndevices, (int)m->comm[1].ndevices);
    if (rv != 0) {
        free(m);
        return rv;
    }
    *out = m;
    return 0;
}
