/*
 * The neural compute cost model: inference, the model file format and the
 * embedded default model (models.h, docs/model-format.md).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "models/models.h"
#include "problem/problem.h"

/* "SDCN": shardd compute net. */
static const unsigned char NET_MAGIC[4] = {'S', 'D', 'C', 'N'};
/* Inputs transformed (log1p pf, log rows), output softplus: format 1. */
#define NET_FLAGS_V1 3u
#define NET_FILE_MAX (1u << 20)

/* The image made from models/default.sdcn at build time (embed.cmake). */
extern const unsigned char sd_embedded_model[];
extern const size_t sd_embedded_model_len;

void net_features(const struct table *t, int32_t cols, float x[NET_IN])
{
    table_features(t, cols, x);
    x[18] = (float)log1p(t->pooling_factor);
    x[19] = (float)log((double)(t->rows > 0 ? t->rows : 1));
}

void net_input(const struct cost_net *m, const struct table *t, int32_t cols,
               float x[NET_IN])
{
    int i;

    net_features(t, cols, x);
    for (i = 0; i < NET_IN; i++)
        x[i] = (x[i] - m->mean[i]) / (m->std[i] + 1e-6f);
}

/* y = relu(W x + b) for W [nout][nin]. */
static void dense_relu(const float *w, const float *b, const float *x, int nin,
                       int nout, float *y)
{
    int o, i;

    for (o = 0; o < nout; o++) {
        const float *row = w + (size_t)o * nin;
        float s = b[o];

        for (i = 0; i < nin; i++)
            s += row[i] * x[i];
        y[o] = s > 0 ? s : 0;
    }
}

void net_latent_of_input(const struct cost_net *m, const float x[NET_IN],
                         float lat[NET_LAT])
{
    float h[NET_H1];

    dense_relu(m->p + NET_W1, m->p + NET_B1, x, NET_IN, NET_H1, h);
    dense_relu(m->p + NET_W2, m->p + NET_B2, h, NET_H1, NET_LAT, lat);
}

void net_latent(const struct cost_net *m, const struct table *t, int32_t cols,
                float lat[NET_LAT])
{
    float x[NET_IN];

    net_input(m, t, cols, x);
    net_latent_of_input(m, x, lat);
}

void net_project(const struct cost_net *m, const float lat[NET_LAT],
                 float proj[NET_H2])
{
    int o, i;

    for (o = 0; o < NET_H2; o++) {
        const float *row = m->p + NET_W3 + (size_t)o * NET_LAT;
        float s = 0;

        for (i = 0; i < NET_LAT; i++)
            s += row[i] * lat[i];
        proj[o] = s;
    }
}

void net_head_init(const struct cost_net *m, float z[NET_H2])
{
    memcpy(z, m->p + NET_B3, NET_H2 * sizeof(float));
}

#if defined(__GNUC__)
/* Four floats in one vector register (GCC and clang's vector extension):
 * the head's 64 multiply-adds as 16 vector steps. */
typedef float net_v4 __attribute__((vector_size(16)));
typedef int32_t net_v4i __attribute__((vector_size(16)));

static net_v4 v4_load(const float *p)
{
    net_v4 v;

    memcpy(&v, p, sizeof(v));
    return v;
}
#endif

double net_head_raw(const struct cost_net *m, const float z[NET_H2])
{
    const float *w4 = m->p + NET_W4;
    float acc[8] = {0};
    int o;

    /* Eight independent sums (a single running sum would serialise the 64
     * steps): lane k adds the products of columns o + k, o = 0, 8, ...,
     * the same order with or without vectors, so the same result. */
#if defined(__GNUC__)
    net_v4 a0 = {0, 0, 0, 0}, a1 = {0, 0, 0, 0}, zero = {0, 0, 0, 0};

    for (o = 0; o < NET_H2; o += 8) {
        net_v4 z0 = v4_load(z + o), z1 = v4_load(z + o + 4);

        /* max(z, 0): the lanes where z > 0 kept, the others +0. */
        z0 = (net_v4)((net_v4i)z0 & (z0 > zero));
        z1 = (net_v4)((net_v4i)z1 & (z1 > zero));
        a0 += v4_load(w4 + o) * z0;
        a1 += v4_load(w4 + o + 4) * z1;
    }
    memcpy(acc, &a0, sizeof(a0));
    memcpy(acc + 4, &a1, sizeof(a1));
#else
    int k;

    for (o = 0; o < NET_H2; o += 8)
        for (k = 0; k < 8; k++)
            acc[k] += w4[o + k] * (z[o + k] > 0 ? z[o + k] : 0);
#endif
    return (double)m->p[NET_B4] + ((acc[0] + acc[4]) + (acc[1] + acc[5])) +
           ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

double net_head_z(const struct cost_net *m, const float z[NET_H2])
{
    return net_softplus(net_head_raw(m, z));
}

double net_softplus(double x)
{
    /* log(1 + e^x) without overflow; e^-20 is below double's precision
     * relative to x. */
    return x > 20 ? x : log1p(exp(x));
}

/* Adds the projected latent of t cut to `cols` columns to z. */
static void head_add(const struct cost_net *m, struct net_memo *mm,
                     const struct table *t, int32_t cols, float z[NET_H2])
{
    float proj[NET_H2];
    int o;

    net_projected(m, mm, t, cols, proj);
    for (o = 0; o < NET_H2; o++)
        z[o] += proj[o];
}

static double shard_ms(const struct cost_net *m, struct net_memo *mm,
                       const struct shard_item *items, size_t n)
{
    float z[NET_H2];
    size_t k;

    if (n == 0)
        return 0;
    net_head_init(m, z);
    for (k = 0; k < n; k++)
        head_add(m, mm, items[k].table, items[k].cols, z);
    return net_head_z(m, z);
}

double net_shard_ms(const struct cost_net *m, const struct shard_item *items,
                    size_t n)
{
    return shard_ms(m, NULL, items, n);
}

double net_tables_ms(const struct cost_net *m, const struct table *tables,
                     size_t n)
{
    float z[NET_H2];
    size_t k;

    if (n == 0)
        return 0;
    net_head_init(m, z);
    for (k = 0; k < n; k++)
        head_add(m, NULL, &tables[k], tables[k].dim, z);
    return net_head_z(m, z);
}

/* ------------------------------------------------------------------------ */
/* The file format: little-endian fields in a fixed order, then a CRC-32.    */

/* The model file's checksum: CRC-32 (IEEE 802.3, reflected) as zlib
 * computes it, the value of Python's zlib.crc32() too. */
static uint32_t checksum(const void *p, size_t n)
{
    return (uint32_t)crc32_z(0, p, n);
}

struct wbuf {
    unsigned char *p;
    size_t len;
};

static void put_u32(struct wbuf *b, uint32_t v)
{
    int i;

    for (i = 0; i < 4; i++)
        b->p[b->len++] = (unsigned char)(v >> (8 * i));
}

static void put_u64(struct wbuf *b, uint64_t v)
{
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}

static void put_f32(struct wbuf *b, float f)
{
    uint32_t v;

    memcpy(&v, &f, sizeof(v));
    put_u32(b, v);
}

static void put_f64(struct wbuf *b, double f)
{
    uint64_t v;

    memcpy(&v, &f, sizeof(v));
    put_u64(b, v);
}

struct rbuf {
    const unsigned char *p;
    size_t off;
};

static uint32_t get_u32(struct rbuf *b)
{
    uint32_t v = 0;
    int i;

    for (i = 0; i < 4; i++)
        v |= (uint32_t)b->p[b->off++] << (8 * i);
    return v;
}

static uint64_t get_u64(struct rbuf *b)
{
    uint64_t lo = get_u32(b);

    return lo | (uint64_t)get_u32(b) << 32;
}

static float get_f32(struct rbuf *b)
{
    uint32_t v = get_u32(b);
    float f;

    memcpy(&f, &v, sizeof(f));
    return f;
}

static double get_f64(struct rbuf *b)
{
    uint64_t v = get_u64(b);
    double f;

    memcpy(&f, &v, sizeof(f));
    return f;
}

/* magic, version, 4 layer sizes, flags, profile, batch, metrics (3 doubles,
 * 3 int64, 2 int32, seed), mean, std, params, crc. */
#define NET_IMAGE_LEN                                                          \
    (4 + 4 + 4 * 4 + 4 + NET_PROFILE_MAX + 8 + 3 * 8 + 3 * 8 + 2 * 4 + 8 +     \
     2 * NET_IN * 4 + NET_NPARAMS * 4 + 4)

int net_serialize(const struct cost_net *m, void **out, size_t *len)
{
    struct wbuf b = {malloc(NET_IMAGE_LEN), 0};
    int i;

    if (!b.p)
        return SD_ENOMEM;
    memcpy(b.p, NET_MAGIC, 4);
    b.len = 4;
    put_u32(&b, NET_FORMAT_VERSION);
    put_u32(&b, NET_IN);
    put_u32(&b, NET_H1);
    put_u32(&b, NET_LAT);
    put_u32(&b, NET_H2);
    put_u32(&b, NET_FLAGS_V1);
    memset(b.p + b.len, 0, NET_PROFILE_MAX);
    memcpy(b.p + b.len, m->profile, strnlen(m->profile, NET_PROFILE_MAX - 1));
    b.len += NET_PROFILE_MAX;
    put_u64(&b, (uint64_t)m->batch_size);
    put_f64(&b, m->metrics.train_mape);
    put_f64(&b, m->metrics.val_mape);
    put_f64(&b, m->metrics.test_mape);
    put_u64(&b, (uint64_t)m->metrics.train_samples);
    put_u64(&b, (uint64_t)m->metrics.val_samples);
    put_u64(&b, (uint64_t)m->metrics.test_samples);
    put_u32(&b, (uint32_t)m->metrics.epochs);
    put_u32(&b, (uint32_t)m->metrics.best_epoch);
    put_u64(&b, m->metrics.seed);
    for (i = 0; i < NET_IN; i++)
        put_f32(&b, m->mean[i]);
    for (i = 0; i < NET_IN; i++)
        put_f32(&b, m->std[i]);
    for (i = 0; i < NET_NPARAMS; i++)
        put_f32(&b, m->p[i]);
    put_u32(&b, checksum(b.p, b.len));
    *out = b.p;
    *len = b.len;
    return 0;
}

int net_parse(const void *buf, size_t len, struct cost_net **out,
              struct sd_diag *d)
{
    struct rbuf b = {buf, 4};
    struct cost_net *m;
    uint32_t version, crc;
    int i;

    if (len < 8 || memcmp(buf, NET_MAGIC, 4) != 0)
        return sd_diag_set(d, SD_EFORMAT, "not a shardd cost model file");
    version = get_u32(&b);
    if (version > NET_FORMAT_VERSION)
        return sd_diag_set(d, SD_ENEWER,
                           "model format version %u is newer than this shardd "
                           "supports (%d); upgrade shardd",
                           version, NET_FORMAT_VERSION);
    if (len != NET_IMAGE_LEN)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file is %zu bytes, format %u has %d: "
                           "truncated or damaged",
                           len, version, (int)NET_IMAGE_LEN);
    memcpy(&crc, (const unsigned char *)buf + len - 4, 4);
    b.off = len - 4;
    crc = get_u32(&b);
    if (crc != checksum(buf, len - 4))
        return sd_diag_set(d, SD_EFORMAT,
                           "model file checksum mismatch: damaged");
    b.off = 8;
    if (get_u32(&b) != NET_IN || get_u32(&b) != NET_H1 ||
        get_u32(&b) != NET_LAT || get_u32(&b) != NET_H2 ||
        get_u32(&b) != NET_FLAGS_V1)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file has another architecture than "
                           "20-128-32 / 32-64-1 with log features");
    m = calloc(1, sizeof(*m));
    if (!m)
        return SD_ENOMEM;
    memcpy(m->profile, b.p + b.off, NET_PROFILE_MAX);
    m->profile[NET_PROFILE_MAX - 1] = '\0';
    b.off += NET_PROFILE_MAX;
    m->batch_size = (int64_t)get_u64(&b);
    m->metrics.train_mape = get_f64(&b);
    m->metrics.val_mape = get_f64(&b);
    m->metrics.test_mape = get_f64(&b);
    m->metrics.train_samples = (int64_t)get_u64(&b);
    m->metrics.val_samples = (int64_t)get_u64(&b);
    m->metrics.test_samples = (int64_t)get_u64(&b);
    m->metrics.epochs = (int32_t)get_u32(&b);
    m->metrics.best_epoch = (int32_t)get_u32(&b);
    m->metrics.seed = get_u64(&b);
    for (i = 0; i < NET_IN; i++)
        m->mean[i] = get_f32(&b);
    for (i = 0; i < NET_IN; i++)
        m->std[i] = get_f32(&b);
    for (i = 0; i < NET_NPARAMS; i++)
        m->p[i] = get_f32(&b);
    /* A checksum proves the bytes are what was written, not that the writer
     * was sane: refuse weights that would make every cost NaN. */
    for (i = 0; i < NET_NPARAMS; i++)
        if (!isfinite(m->p[i]))
            goto out_bad_values;
    for (i = 0; i < NET_IN; i++)
        if (!isfinite(m->mean[i]) || !isfinite(m->std[i]) || m->std[i] < 0)
            goto out_bad_values;
    if (m->profile[0] == '\0' || m->batch_size < 1)
        goto out_bad_values;
    *out = m;
    return 0;

out_bad_values:
    free(m);
    return sd_diag_set(d, SD_EFORMAT,
                       "model file has an empty profile, a bad batch size or "
                       "non-finite weights");
}

int net_read_file(const char *path, struct cost_net **out, struct sd_diag *d)
{
    unsigned char *buf = NULL;
    size_t len = 0;
    FILE *f;
    long sz;
    int rv;

    f = fopen(path, "rb");
    if (!f)
        return sd_diag_set(d, errno == ENOENT ? SD_ENOENT : SD_EIO, "%s: %s",
                           path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0 || (sz = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0) {
        rv = sd_diag_set(d, SD_EIO, "%s: %s", path, strerror(errno));
        goto out_close;
    }
    if ((unsigned long)sz > NET_FILE_MAX) {
        rv = sd_diag_set(d, SD_EFORMAT,
                         "%s: %ld bytes is too large for a "
                         "cost model file",
                         path, sz);
        goto out_close;
    }
    buf = malloc(sz ? (size_t)sz : 1);
    if (!buf) {
        rv = SD_ENOMEM;
        goto out_close;
    }
    len = fread(buf, 1, (size_t)sz, f);
    if (len != (size_t)sz) {
        rv = sd_diag_set(d, SD_EIO, "%s: short read", path);
        goto out_free;
    }
    rv = net_parse(buf, len, out, d);
    if (rv < 0 && d) {
        char msg[sizeof(d->msg)];

        memcpy(msg, d->msg, sizeof(msg));
        sd_diag_set(d, rv, "%s: %s", path, msg);
    }
out_free:
    free(buf);
out_close:
    fclose(f);
    return rv;
}

int net_write_file(const char *path, const struct cost_net *m,
                   struct sd_diag *d)
{
    char tmp[4096];
    void *buf;
    size_t len;
    FILE *f;
    int rv;

    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return sd_diag_set(d, SD_EINVAL, "%s: path is too long", path);
    rv = net_serialize(m, &buf, &len);
    if (rv < 0)
        return rv;
    f = fopen(tmp, "wb");
    if (!f) {
        rv = sd_diag_set(d, SD_EIO, "%s: %s", tmp, strerror(errno));
        goto out_free;
    }
    /* Written whole, flushed and synced before the rename: a crash leaves
     * the old file or the new one, never half of one. */
    if (fwrite(buf, 1, len, f) != len || fflush(f) != 0 ||
        fsync(fileno(f)) != 0) {
        rv = sd_diag_set(d, SD_EIO, "%s: %s", tmp, strerror(errno));
        fclose(f);
        goto out_unlink;
    }
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        rv = sd_diag_set(d, SD_EIO, "%s: %s", path, strerror(errno));
        goto out_unlink;
    }
    rv = 0;
    goto out_free;

out_unlink:
    unlink(tmp);
out_free:
    free(buf);
    return rv;
}

int net_check_profile(const struct cost_net *m, const char *profile,
                      struct sd_diag *d)
{
    if (strcmp(m->profile, profile) != 0)
        return sd_diag_set(d, SD_EINVAL,
                           "model is for profile \"%s\", not \"%s\"",
                           m->profile, profile);
    return 0;
}

static pthread_once_t embedded_once = PTHREAD_ONCE_INIT;
static struct cost_net *embedded;   /* written once, under embedded_once */
static struct sd_diag embedded_err; /* why it did not parse */

static void embedded_parse(void)
{
    if (net_parse(sd_embedded_model, sd_embedded_model_len, &embedded,
                  &embedded_err) < 0)
        embedded = NULL;
}

const struct cost_net *net_embedded(struct sd_diag *d)
{
    pthread_once(&embedded_once, embedded_parse);
    if (!embedded && d)
        snprintf(d->msg, sizeof(d->msg), "embedded model: %.480s",
                 embedded_err.msg);
    return embedded;
}

static double net_cm_shard_ms(void *ctx, const struct topology *t,
                              const struct shard_item *items, size_t n)
{
    const struct net_cost_model *ncm = ctx;

    return shard_ms(ncm->net, ncm->memo, items, n) * (double)t->batch_size /
           (double)ncm->net->batch_size;
}

void net_cost_model_init(struct net_cost_model *ncm, const struct cost_net *m)
{
    snprintf(ncm->name, sizeof(ncm->name), "neural:%s", m->profile);
    ncm->net = m;
    ncm->memo = NULL;
    ncm->cm.name = ncm->name;
    ncm->cm.shard_ms = net_cm_shard_ms;
    ncm->cm.ctx = ncm;
}
