/*
 * Ensembles of compute cost models (models.h): K nets of one profile,
 * trained on bootstraps of the same samples with their own seeds
 * (train_params.member), so that every prediction comes with a spread.
 * Their file, the cost model that answers with a chosen quantile of the
 * members' costs, a plan's per-device spread, and the embedded ensemble.
 *
 * The file (docs/model-format.md): "SDCE", u32 version 1, u32 K, then K
 * times a u32 length and a model file image (net_serialize()), then a
 * CRC-32 of everything before it; little-endian.  A plain model file
 * parses as an ensemble of one.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "models/models.h"
#include "problem/problem.h"
#include "shardd/file.h"
#include "shardd/le.h"
#include "shardd/sort.h"

static const unsigned char ENS_MAGIC[4] = {'S', 'D', 'C', 'E'};
static const unsigned char NET_MAGIC[4] = {'S', 'D', 'C', 'N'};
#define ENS_FORMAT_VERSION 1
#define ENS_FILE_MAX       (16u << 20)

/* The images made from models/cpu-default.sdce and
 * models/cuda-h200-default.sdce at build time (embed.cmake). */
extern const unsigned char sd_embedded_ensemble[];
extern const size_t sd_embedded_ensemble_len;
extern const unsigned char sd_h200_ensemble[];
extern const size_t sd_h200_ensemble_len;

void net_ensemble_free(struct net_ensemble *e)
{
    int32_t i;

    if (e == NULL)
        return;
    for (i = 0; i < e->k; i++)
        free(e->m[i]);
    free(e);
}

int net_ensemble_serialize(const struct net_ensemble *e, void **out,
                           size_t *len)
{
    void *img[NET_ENSEMBLE_MAX];
    size_t ilen[NET_ENSEMBLE_MAX], total = 12, off;
    unsigned char *b;
    int32_t i, made = 0;
    int rv = 0;

    if (e->k < 1 || e->k > NET_ENSEMBLE_MAX)
        return SD_EINVAL;
    if (e->k == 1)
        return net_serialize(e->m[0], out, len);
    for (i = 0; i < e->k && rv == 0; i++) {
        rv = net_serialize(e->m[i], &img[i], &ilen[i]);
        if (rv == 0) {
            made++;
            total += 4 + ilen[i];
        }
    }
    b = rv == 0 ? malloc(total + 4) : NULL;
    if (b == NULL) {
        rv = rv != 0 ? rv : SD_ENOMEM;
        goto out_free;
    }
    memcpy(b, ENS_MAGIC, 4);
    sd_le_put32(b + 4, ENS_FORMAT_VERSION);
    sd_le_put32(b + 8, (uint32_t)e->k);
    off = 12;
    for (i = 0; i < e->k; i++) {
        sd_le_put32(b + off, (uint32_t)ilen[i]);
        memcpy(b + off + 4, img[i], ilen[i]);
        off += 4 + ilen[i];
    }
    sd_le_put32(b + off, (uint32_t)crc32_z(0, b, off));
    *out = b;
    *len = off + 4;
out_free:
    for (i = 0; i < made; i++)
        free(img[i]);
    return rv;
}

/* The members' images of an ensemble file, parsed and checked to answer for
 * one profile at one batch. */
static int parse_members(const unsigned char *b, size_t len,
                         struct net_ensemble *e, struct sd_diag *d)
{
    size_t off = 12, ilen;
    uint32_t k = sd_le_get32(b + 8);
    int32_t i;
    int rv;

    if (k < 1 || k > NET_ENSEMBLE_MAX)
        return sd_diag_set(d, SD_EFORMAT,
                           "ensemble file has %u members, not 1 to %d", k,
                           NET_ENSEMBLE_MAX);
    for (i = 0; i < (int32_t)k; i++) {
        if (len - 4 - off < 4)
            return sd_diag_set(d, SD_EFORMAT, "ensemble file is truncated");
        ilen = sd_le_get32(b + off);
        if (ilen > len - 4 - off - 4)
            return sd_diag_set(d, SD_EFORMAT, "ensemble file is truncated");
        rv = net_parse(b + off + 4, ilen, &e->m[i], d);
        if (rv != 0)
            return rv;
        e->k = i + 1;
        off += 4 + ilen;
        if (strcmp(e->m[i]->profile, e->m[0]->profile) != 0 ||
            e->m[i]->batch_size != e->m[0]->batch_size)
            return sd_diag_set(d, SD_EFORMAT,
                               "ensemble member %d answers for another "
                               "profile or batch than member 0",
                               (int)i);
    }
    if (off != len - 4)
        return sd_diag_set(d, SD_EFORMAT,
                           "ensemble file has %zu bytes after its members",
                           len - 4 - off);
    return 0;
}

int net_ensemble_parse(const void *buf, size_t len, struct net_ensemble **out,
                       struct sd_diag *d)
{
    const unsigned char *b = buf;
    struct net_ensemble *e;
    uint32_t version;
    int rv;

    e = calloc(1, sizeof(*e));
    if (e == NULL)
        return SD_ENOMEM;
    if (len >= 4 && memcmp(b, NET_MAGIC, 4) == 0) {
        rv = net_parse(buf, len, &e->m[0], d);
        if (rv == 0)
            e->k = 1;
        goto out;
    }
    if (len < 16 || memcmp(b, ENS_MAGIC, 4) != 0) {
        rv = sd_diag_set(d, SD_EFORMAT,
                         "not a shardd cost model or ensemble file");
        goto out;
    }
    version = sd_le_get32(b + 4);
    if (version > ENS_FORMAT_VERSION) {
        rv = sd_diag_set(d, SD_ENEWER,
                         "ensemble format version %u is newer than this "
                         "shardd supports (%d); upgrade shardd",
                         version, ENS_FORMAT_VERSION);
        goto out;
    }
    if (sd_le_get32(b + len - 4) != (uint32_t)crc32_z(0, b, len - 4)) {
        rv = sd_diag_set(d, SD_EFORMAT,
                         "ensemble file checksum mismatch: damaged");
        goto out;
    }
    rv = parse_members(b, len, e, d);
out:
    if (rv != 0) {
        net_ensemble_free(e);
        return rv;
    }
    *out = e;
    return 0;
}

int32_t net_ensemble_members(const void *head, size_t len)
{
    const unsigned char *b = head;
    uint32_t k;

    if (len >= 4 && memcmp(b, NET_MAGIC, 4) == 0)
        return 1;
    if (len < 12 || memcmp(b, ENS_MAGIC, 4) != 0)
        return 0;
    k = sd_le_get32(b + 8);
    return k >= 1 && k <= NET_ENSEMBLE_MAX ? (int32_t)k : 0;
}

int net_ensemble_read_file(const char *path, struct net_ensemble **out,
                           struct sd_diag *d)
{
    void *buf;
    size_t len;
    int rv;

    rv = sd_file_read(path, ENS_FILE_MAX, "an ensemble file", &buf, &len, d);
    if (rv != 0)
        return rv;
    rv = net_ensemble_parse(buf, len, out, d);
    if (rv < 0)
        sd_file_prefix(path, rv, d);
    free(buf);
    return rv;
}

int net_ensemble_write_file(const char *path, const struct net_ensemble *e,
                            struct sd_diag *d)
{
    void *buf;
    size_t len;
    int rv;

    rv = net_ensemble_serialize(e, &buf, &len);
    if (rv != 0)
        return sd_diag_set(d, rv, "%s: %s", path, sd_strerror(rv));
    rv = sd_file_write(path, buf, len, d);
    free(buf);
    return rv;
}

/* ------------------------------------------------------------------------ */
/* Quantiles and spreads                                                     */

double net_quantile(double *v, int32_t k, double q)
{
    double pos, lo;
    int32_t i;

    if (k < 1)
        return 0;
    qsort(v, (size_t)k, sizeof(*v), sd_cmp_double);
    if (!(q > 0))
        return v[0];
    if (q >= 1)
        return v[k - 1];
    pos = q * (double)(k - 1);
    i = (int32_t)floor(pos);
    lo = v[i];
    return i + 1 < k ? lo + (pos - (double)i) * (v[i + 1] - lo) : lo;
}

void net_ensemble_shard(const struct net_ensemble *e,
                        struct net_memo *const *memos,
                        const struct shard_item *items, size_t n, double q,
                        struct net_spread *out)
{
    double v[NET_ENSEMBLE_MAX];
    int32_t i;

    for (i = 0; i < e->k; i++)
        v[i] = net_shard_ms_memo(e->m[i], memos != NULL ? memos[i] : NULL,
                                 items, n);
    out->point = v[0];
    out->quantile = net_quantile(v, e->k, q); /* sorts v */
    out->lo = v[0];
    out->hi = v[e->k - 1];
}

static double ens_cm_shard_ms(void *ctx, const struct topology *t,
                              const struct shard_item *items, size_t n)
{
    const struct net_ensemble_cost_model *ecm = ctx;
    struct net_spread s;

    if (n == 0)
        return 0;
    net_ensemble_shard(ecm->e, ecm->memos, items, n, ecm->q, &s);
    return s.quantile * (double)t->batch_size /
           (double)ecm->e->m[0]->batch_size;
}

void net_ensemble_cost_model_init(struct net_ensemble_cost_model *ecm,
                                  const struct net_ensemble *e, double q)
{
    ecm->e = e;
    ecm->q = q;
    ecm->memos = NULL;
    snprintf(ecm->name, sizeof(ecm->name), "neural:%s (q%.2f of %d)",
             e->m[0]->profile, q, (int)e->k);
    ecm->cm.name = ecm->name;
    ecm->cm.shard_ms = ens_cm_shard_ms;
    ecm->cm.ctx = ecm;
}

/* Takes member i's plan cost and devices' compute, q, into out. */
static void spread_take(struct plan_spread *out, int32_t i,
                        const struct plan *q)
{
    int32_t r;

    for (r = 0; r < q->ndevices; r++) {
        double c = q->devices[r].compute_ms;

        out->lo[r] = i == 0 || c < out->lo[r] ? c : out->lo[r];
        out->hi[r] = i == 0 || c > out->hi[r] ? c : out->hi[r];
    }
    out->cost_lo =
        i == 0 || q->cost_ms < out->cost_lo ? q->cost_ms : out->cost_lo;
    out->cost_hi =
        i == 0 || q->cost_ms > out->cost_hi ? q->cost_ms : out->cost_hi;
}

int net_ensemble_plan_spread(const struct net_ensemble *e,
                             struct net_memo *const *memos,
                             const struct plan *p, bool member0_scored,
                             const struct table *tables, size_t ntables,
                             const struct topology *t, enum optimizer opt,
                             const atomic_bool *stop, struct plan_spread *out)
{
    struct net_cost_model ncm;
    struct plan copy;
    int32_t i;
    int rv;

    memset(out, 0, sizeof(*out));
    if (p->ndevices < 1 || p->ndevices > TOPO_DEVICES_MAX)
        return SD_EINVAL;
    rv = plan_init(&copy, p->ndevices);
    if (rv != 0)
        return rv;
    for (i = 0; i < (int32_t)p->nshards && rv == 0; i++)
        rv = plan_add_shard(&copy, &p->shards[i]);
    out->lo = malloc(2 * (size_t)p->ndevices * sizeof(*out->lo));
    if (rv != 0 || out->lo == NULL) {
        plan_destroy(&copy);
        free(out->lo);
        out->lo = NULL;
        return SD_ENOMEM;
    }
    out->hi = out->lo + p->ndevices;
    out->ndevices = p->ndevices;
    out->members = e->k;
    i = 0;
    if (member0_scored)
        spread_take(out, i++, p);
    for (; i < e->k && rv == 0; i++) {
        if (stop != NULL && atomic_load(stop)) {
            plan_destroy(&copy);
            plan_spread_free(out);
            return 0;
        }
        net_cost_model_init(&ncm, e->m[i]);
        ncm.memo = memos != NULL ? memos[i] : NULL;
        rv = plan_evaluate(&copy, tables, ntables, t, opt, &ncm.cm);
        if (rv == 0)
            spread_take(out, i, &copy);
    }
    plan_destroy(&copy);
    if (rv != 0)
        plan_spread_free(out);
    return rv;
}

void plan_spread_free(struct plan_spread *s)
{
    free(s->lo); /* hi is in the same block */
    memset(s, 0, sizeof(*s));
}

/* ------------------------------------------------------------------------ */
/* The compiled-in ensembles                                                 */

/* Each answers only beside the compiled-in model it was trained with: its
 * member 0 must be that model (net_compiled() of its profile, the cpu
 * default net_embedded()), parameter for parameter.  Written once, under
 * ens_once. */
struct ens_image {
    const char *what; /* for errors */
    const unsigned char *bytes;
    const size_t *len;
    struct net_ensemble *ens; /* NULL: damaged, or not beside its model */
    struct sd_diag err;
};

static struct ens_image ens_images[] = {
    {"embedded ensemble",
     sd_embedded_ensemble,
     &sd_embedded_ensemble_len,
     NULL,
     {{0}}},
    {"embedded H200 ensemble",
     sd_h200_ensemble,
     &sd_h200_ensemble_len,
     NULL,
     {{0}}},
};
#define NENS (sizeof(ens_images) / sizeof(ens_images[0]))

static pthread_once_t ens_once = PTHREAD_ONCE_INIT;

/* Whether a and b are one model, parameter for parameter. */
static bool same_net(const struct cost_net *a, const struct cost_net *b)
{
    return memcmp(a->p, b->p, sizeof(a->p)) == 0 &&
           memcmp(a->mean, b->mean, sizeof(a->mean)) == 0 &&
           memcmp(a->std, b->std, sizeof(a->std)) == 0 &&
           memcmp(&a->x, &b->x, sizeof(a->x)) == 0 &&
           memcmp(a->xw, b->xw, sizeof(a->xw)) == 0 &&
           strcmp(a->profile, b->profile) == 0;
}

static void ens_parse(void)
{
    size_t i;

    for (i = 0; i < NENS; i++) {
        struct ens_image *im = &ens_images[i];
        const struct cost_net *m;

        if (net_ensemble_parse(im->bytes, *im->len, &im->ens, &im->err) != 0) {
            im->ens = NULL;
            continue;
        }
        m = i == 0 ? net_embedded(&im->err)
                   : net_compiled(im->ens->m[0]->profile, &im->err);
        if (m == NULL || !same_net(m, im->ens->m[0])) {
            sd_diag_set(&im->err, SD_EFORMAT,
                        "its member 0 is not the compiled-in model of its "
                        "profile");
            net_ensemble_free(im->ens);
            im->ens = NULL;
        }
    }
}

const struct net_ensemble *net_ensemble_embedded(struct sd_diag *d)
{
    pthread_once(&ens_once, ens_parse);
    if (ens_images[0].ens == NULL && d != NULL)
        snprintf(d->msg, sizeof(d->msg), "%s: %.460s", ens_images[0].what,
                 ens_images[0].err.msg);
    return ens_images[0].ens;
}

const struct net_ensemble *net_ensemble_compiled(const struct cost_net *m)
{
    size_t i;

    pthread_once(&ens_once, ens_parse);
    for (i = 0; m != NULL && i < NENS; i++)
        if (ens_images[i].ens != NULL && ens_images[i].ens->k >= 2 &&
            same_net(m, ens_images[i].ens->m[0]))
            return ens_images[i].ens;
    return NULL;
}
