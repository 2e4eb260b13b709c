/*
 * DreamShard's placement policy (models.h): the estimated MDP of a task
 * (DreamShard's environment, with the compute model and the alpha-beta
 * exchange as its estimator), the policy network's inference, its file
 * format and the embedded default policy.  Training is policy_train.c's.
 *
 * The cost features of device r for the table i about to be placed, times
 * in units of L, the task's mean load per device (the sum of every table's
 * cost alone over the devices), so that a policy trained on one size of
 * task reads another the same way:
 *   0  compute of r's shard now          5  the max ready time minus r's
 *   1  compute with i added              6  r's pooled columns over the
 *   2  r's exchange (alpha-beta) now        task's mean per device
 *   3  r's exchange with i added         7  r's memory used / capacity
 *   4  how much the max ready time       8  the same with i added
 *      (compute + exchange over the      9  the share of the task's load
 *      devices) rises if i goes to r        placed so far
 * DreamShard's policy sees the three cost-network heads of the device's
 * shard now (fwd, bwd, comm); the "with i added" features are ours: the
 * compute model is cheap to ask (64 additions and a 64-term dot product),
 * and a policy that sees what a placement would cost learns in hundreds of
 * steps what one that must infer it learns in thousands.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "models/models.h"
#include "problem/problem.h"
#include "shardd/bytes.h"
#include "shardd/file.h"
#include "shardd/le.h"

/* "SDPL": shardd placement policy. */
static const unsigned char POL_MAGIC[4] = {'S', 'D', 'P', 'L'};
#define POL_FILE_MAX (1u << 20)

/* The images made from models/cpu-default.sdpol and
 * models/cuda-h200-default.sdpol at build time (embed.cmake). */
extern const unsigned char sd_embedded_policy[];
extern const size_t sd_embedded_policy_len;
extern const unsigned char sd_h200_policy[];
extern const size_t sd_h200_policy_len;

/* ------------------------------------------------------------------------ */
/* The compute model's identity                                             */

static uint32_t crc_floats(uint32_t crc, const float *v, size_t n)
{
    unsigned char b[4 * 64];
    size_t i, k, len;

    /* Little-endian bytes whatever the host, 64 floats at a time. */
    for (i = 0; i < n; i += len / 4) {
        len = (n - i < 64 ? n - i : 64) * 4;
        for (k = 0; k < len / 4; k++) {
            uint32_t u;

            memcpy(&u, &v[i + k], 4);
            b[4 * k] = (unsigned char)u;
            b[4 * k + 1] = (unsigned char)(u >> 8);
            b[4 * k + 2] = (unsigned char)(u >> 16);
            b[4 * k + 3] = (unsigned char)(u >> 24);
        }
        crc = (uint32_t)crc32_z(crc, b, len);
    }
    return crc;
}

uint32_t policy_model_crc(const struct cost_net *m)
{
    uint32_t crc = (uint32_t)crc32_z(0, NULL, 0);
    /* xw as the [NET_H1][8] array it was before NET_XMAX grew, so the CRCs
     * policies hold still match; all x.n columns past 8. */
    const size_t cols = m->x.n > 8 ? (size_t)m->x.n : 8;
    int o;

    crc = crc_floats(crc, m->mean, NET_IN);
    crc = crc_floats(crc, m->std, NET_IN);
    crc = crc_floats(crc, m->p, NET_NPARAMS);
    if (m->x.n > 0) {
        /* Derived inputs (format 3): which, their constants and weights.
         * A model without them has the CRC it always had. */
        crc = (uint32_t)crc32_z(crc, m->x.id, (size_t)m->x.n);
        crc = crc_floats(crc, m->mean + NET_IN, (size_t)m->x.n);
        crc = crc_floats(crc, m->std + NET_IN, (size_t)m->x.n);
        for (o = 0; o < NET_H1; o++)
            crc = crc_floats(crc, m->xw + (size_t)o * NET_XMAX, cols);
    }
    return crc;
}

int policy_check_model(const struct policy_net *pn, const struct cost_net *m,
                       struct sd_diag *d)
{
    uint32_t crc = policy_model_crc(m);

    if (pn->model_crc == crc && strcmp(pn->profile, m->profile) == 0)
        return 0;
    return sd_diag_set(d, SD_EINVAL,
                       "the policy was trained against compute model %08x of "
                       "profile \"%.128s\", not this one (%08x of \"%.128s\"): "
                       "train a policy for it (shardctl train-policy)",
                       (unsigned)pn->model_crc, pn->profile, (unsigned)crc,
                       m->profile);
}

/* ------------------------------------------------------------------------ */
/* The estimated MDP                                                         */

struct policy_env {
    const struct policy_net *pn;
    const struct cost_net *m;
    const struct table *tables;
    size_t n;
    const struct topology *t;
    enum optimizer opt;
    double scale; /* topology batch / model batch */
    double L;     /* mean load per device, scaled ms */
    double dbar;  /* mean pooled columns per device */
    float lat_scale;
    /* per table */
    float *x;        /* [n][POL_IN] the compute model's input */
    float *proj;     /* [n][NET_H2] */
    float *lat;      /* [n][POL_LAT] the policy's encoding */
    double *single;  /* [n] the table's cost alone */
    uint64_t *bytes; /* [n] */
    uint32_t *order; /* [n] */
    int32_t *dev;    /* [n] */
    /* per device */
    float *z;        /* [N][NET_H2] the compute head's accumulator */
    double *compute; /* [N] scaled ms */
    int32_t *dims;
    int32_t *ntab;
    uint64_t *used;
    float *latsum; /* [N][POL_LAT] */
    float *hlat;   /* [N][POL_HH] H1W's latent half times latsum */
    double *host;  /* [hosts] pooled columns per host */
    double *ready; /* [N] scratch: compute + exchange now */
    /* The weights transposed, [in][out], so that a layer is a sum of rows
     * scaled by its inputs (contiguous, vectorised) and the inputs a ReLU
     * zeroed are skipped: the encoder's, and the cost branch's. */
    float we1t[POL_IN * POL_H1];
    float we2t[POL_H1 * POL_LAT];
    float wc1t[POL_NCOST * POL_C1];
    float wc2t[POL_C1 * POL_C2];
    float wh1t[POL_C2 * POL_HH];
    double total;  /* pooled columns placed */
    double placed; /* the single costs of the tables placed */
};

/* y = relu(b + sum_i x[i] * wt[i]) for wt [nin][nout]; inputs that are
 * 0 (a ReLU's) add nothing and are skipped. */
static void layer_t(const float *wt, const float *b, const float *x, int nin,
                    int nout, float *y)
{
    int i, o;

    memcpy(y, b, (size_t)nout * sizeof(*y));
    for (i = 0; i < nin; i++) {
        const float *row = wt + (size_t)i * nout;
        float xi = x[i];

        if (xi == 0)
            continue;
        for (o = 0; o < nout; o++)
            y[o] += row[o] * xi;
    }
    for (o = 0; o < nout; o++)
        y[o] = y[o] > 0 ? y[o] : 0;
}

/* The policy's table encoder of one table's input (transposed weights). */
static void encode(const struct policy_env *e, const float *x,
                   float lat[POL_LAT])
{
    const float *p = e->pn->p;
    float h[POL_H1];

    layer_t(e->we1t, p + POL_E1B, x, POL_IN, POL_H1, h);
    layer_t(e->we2t, p + POL_E2B, h, POL_H1, POL_LAT, lat);
}

/* The compute head of z, scaled to the topology's batch. */
static double head_ms(const struct policy_env *e, const float *z)
{
    return net_head_z(e->m, z) * e->scale;
}

/* hlat[r] = H1W[:, :LAT] (latsum[r] * lat_scale). */
static void update_hlat(struct policy_env *e, int32_t r)
{
    const float *w = e->pn->p + POL_H1W, *s = e->latsum + (size_t)r * POL_LAT;
    float *h = e->hlat + (size_t)r * POL_HH;
    int o, i;

    for (o = 0; o < POL_HH; o++) {
        const float *row = w + (size_t)o * (POL_LAT + POL_C2);
        float acc = 0;

        for (i = 0; i < POL_LAT; i++)
            acc += row[i] * s[i];
        h[o] = acc * e->lat_scale;
    }
}

/* t[i][o] = w[o][off + i] for a [nout][stride] matrix, i < nin. */
static void transpose(const float *w, int nout, int nin, int stride, int off,
                      float *t)
{
    int o, i;

    for (o = 0; o < nout; o++)
        for (i = 0; i < nin; i++)
            t[i * nout + o] = w[o * stride + off + i];
}

void policy_env_reencode(struct policy_env *e)
{
    const float *p;
    size_t i;

    if (e->pn == NULL)
        return;
    p = e->pn->p;
    transpose(p + POL_E1W, POL_H1, POL_IN, POL_IN, 0, e->we1t);
    transpose(p + POL_E2W, POL_LAT, POL_H1, POL_H1, 0, e->we2t);
    for (i = 0; i < e->n; i++)
        encode(e, e->x + i * POL_IN, e->lat + i * POL_LAT);
    transpose(p + POL_C1W, POL_C1, POL_NCOST, POL_NCOST, 0, e->wc1t);
    transpose(p + POL_C2W, POL_C2, POL_C1, POL_C1, 0, e->wc2t);
    transpose(p + POL_H1W, POL_HH, POL_C2, POL_LAT + POL_C2, POL_LAT, e->wh1t);
}

void policy_env_reset(struct policy_env *e)
{
    int32_t nd = e->t->ndevices, r;
    size_t i;

    for (i = 0; i < e->n; i++)
        e->dev[i] = -1;
    for (r = 0; r < nd; r++)
        net_head_init(e->m, e->z + (size_t)r * NET_H2);
    memset(e->compute, 0, (size_t)nd * sizeof(*e->compute));
    memset(e->dims, 0, (size_t)nd * sizeof(*e->dims));
    memset(e->ntab, 0, (size_t)nd * sizeof(*e->ntab));
    memset(e->used, 0, (size_t)nd * sizeof(*e->used));
    memset(e->latsum, 0, (size_t)nd * POL_LAT * sizeof(*e->latsum));
    memset(e->hlat, 0, (size_t)nd * POL_HH * sizeof(*e->hlat));
    memset(
        e->host, 0,
        (size_t)((nd + e->t->devices_per_host - 1) / e->t->devices_per_host) *
            sizeof(*e->host));
    e->total = 0;
    e->placed = 0;
}

/* Whether table x goes before table y: descending (single cost, bytes),
 * then ascending index. */
static bool goes_before(const struct policy_env *e, uint32_t x, uint32_t y)
{
    if (e->single[x] != e->single[y])
        return e->single[x] > e->single[y];
    if (e->bytes[x] != e->bytes[y])
        return e->bytes[x] > e->bytes[y];
    return x < y;
}

/* The same by bytes first: the order of a retry when memory is tight. */
static bool goes_before_by_size(const struct policy_env *e, uint32_t x,
                                uint32_t y)
{
    if (e->bytes[x] != e->bytes[y])
        return e->bytes[x] > e->bytes[y];
    return goes_before(e, x, y);
}

/* Bottom-up merge sort of a[0 .. n) by goes_before(), tmp n entries: no
 * qsort (its comparator has no context) and no global (envs are built on
 * many threads at once). */
static void
sort_order(const struct policy_env *e, uint32_t *a, uint32_t *tmp, size_t n,
           bool (*before)(const struct policy_env *, uint32_t, uint32_t))
{
    size_t w, lo, mid, hi, p, q, k;

    for (w = 1; w < n; w *= 2) {
        for (lo = 0; lo < n; lo += 2 * w) {
            mid = lo + w < n ? lo + w : n;
            hi = lo + 2 * w < n ? lo + 2 * w : n;
            p = lo;
            q = mid;
            k = lo;
            while (p < mid && q < hi)
                tmp[k++] = before(e, a[q], a[p]) ? a[q++] : a[p++];
            while (p < mid)
                tmp[k++] = a[p++];
            while (q < hi)
                tmp[k++] = a[q++];
        }
        memcpy(a, tmp, n * sizeof(*a));
    }
}

void policy_env_free(struct policy_env *e)
{
    if (e == NULL)
        return;
    free(e->x);
    free(e->proj);
    free(e->lat);
    free(e->single);
    free(e->bytes);
    free(e->order);
    free(e->dev);
    free(e->z);
    free(e->compute);
    free(e->dims);
    free(e->ntab);
    free(e->used);
    free(e->latsum);
    free(e->hlat);
    free(e->host);
    free(e->ready);
    free(e);
}

/* Per-table data: inputs, projections, single costs, bytes, the order. */
static void env_tables(struct policy_env *e, struct net_memo *memo,
                       uint32_t *tmp)
{
    double sum = 0, dims = 0;
    float z[NET_H2];
    size_t i;
    int k;

    for (i = 0; i < e->n; i++) {
        const struct table *tb = &e->tables[i];

        net_input(e->m, tb, tb->dim, e->x + i * POL_IN);
        net_projected(e->m, memo, tb, tb->dim, e->proj + i * NET_H2);
        net_head_init(e->m, z);
        for (k = 0; k < NET_H2; k++)
            z[k] += e->proj[i * NET_H2 + k];
        e->single[i] = head_ms(e, z);
        e->bytes[i] = shard_bytes(tb, tb->dim, e->opt);
        e->order[i] = (uint32_t)i;
        sum += e->single[i];
        dims += tb->dim;
    }
    sort_order(e, e->order, tmp, e->n, goes_before);
    e->L = sum / e->t->ndevices;
    if (!(e->L > 0))
        e->L = 1;
    e->dbar = dims / e->t->ndevices;
    if (!(e->dbar > 0))
        e->dbar = 1;
    e->lat_scale = e->n > 0 ? (float)e->t->ndevices / (float)e->n : 1.0f;
}

int policy_env_new(const struct policy_net *pn, const struct cost_net *m,
                   struct net_memo *memo, const struct table *tables, size_t n,
                   const struct topology *t, enum optimizer opt,
                   struct policy_env **out)
{
    struct policy_env *e = calloc(1, sizeof(*e));
    size_t nd = (size_t)t->ndevices, nn = n ? n : 1;
    size_t hosts =
        (nd + (size_t)t->devices_per_host - 1) / (size_t)t->devices_per_host;
    uint32_t *tmp;

    if (e == NULL)
        return SD_ENOMEM;
    e->pn = pn;
    e->m = m;
    e->tables = tables;
    e->n = n;
    e->t = t;
    e->opt = opt;
    e->scale = (double)t->batch_size / (double)m->batch_size;
    e->x = malloc(nn * POL_IN * sizeof(*e->x));
    e->proj = malloc(nn * NET_H2 * sizeof(*e->proj));
    e->lat = malloc(nn * POL_LAT * sizeof(*e->lat));
    e->single = malloc(nn * sizeof(*e->single));
    e->bytes = malloc(nn * sizeof(*e->bytes));
    e->order = malloc(nn * sizeof(*e->order));
    e->dev = malloc(nn * sizeof(*e->dev));
    e->z = malloc(nd * NET_H2 * sizeof(*e->z));
    e->compute = malloc(nd * sizeof(*e->compute));
    e->dims = malloc(nd * sizeof(*e->dims));
    e->ntab = malloc(nd * sizeof(*e->ntab));
    e->used = malloc(nd * sizeof(*e->used));
    e->latsum = malloc(nd * POL_LAT * sizeof(*e->latsum));
    e->hlat = malloc(nd * POL_HH * sizeof(*e->hlat));
    e->host = malloc(hosts * sizeof(*e->host));
    e->ready = malloc(nd * sizeof(*e->ready));
    tmp = malloc(nn * sizeof(*tmp));
    if (!e->x || !e->proj || !e->lat || !e->single || !e->bytes || !e->order ||
        !e->dev || !e->z || !e->compute || !e->dims || !e->ntab || !e->used ||
        !e->latsum || !e->hlat || !e->host || !e->ready || !tmp) {
        free(tmp);
        policy_env_free(e);
        return SD_ENOMEM;
    }
    env_tables(e, memo, tmp);
    free(tmp);
    policy_env_reencode(e);
    policy_env_reset(e);
    *out = e;
    return 0;
}

int policy_env_order_by_size(struct policy_env *e)
{
    uint32_t *tmp = malloc((e->n ? e->n : 1) * sizeof(*tmp));

    if (tmp == NULL)
        return SD_ENOMEM;
    sort_order(e, e->order, tmp, e->n, goes_before_by_size);
    free(tmp);
    return 0;
}

const uint32_t *policy_env_order(const struct policy_env *e)
{
    return e->order;
}

size_t policy_env_ntables(const struct policy_env *e)
{
    return e->n;
}

const float *policy_env_inputs(const struct policy_env *e)
{
    return e->x;
}

const int32_t *policy_env_devices(const struct policy_env *e)
{
    return e->dev;
}

uint64_t policy_env_used(const struct policy_env *e, int32_t r)
{
    return e->used[r];
}

/* Device r's exchange with dims d on its host of h and t of all. */
static double comm_of(const struct policy_env *e, int32_t d, double h, double t)
{
    return cost_comm_alpha_beta_one(e->t, d, h, t);
}

/* ready[] of every device now; returns the largest and sets the device of
 * the largest and the second largest value. */
static double ready_now(const struct policy_env *e, int32_t *arg,
                        double *second)
{
    double best = -1, next = -1;
    int32_t r, per = e->t->devices_per_host;

    *arg = 0;
    for (r = 0; r < e->t->ndevices; r++) {
        double v =
            e->compute[r] + comm_of(e, e->dims[r], e->host[r / per], e->total);

        e->ready[r] = v;
        if (v > best) {
            next = best;
            best = v;
            *arg = r;
        } else if (v > next) {
            next = v;
        }
    }
    *second = next < 0 ? 0 : next;
    return best;
}

int32_t policy_env_features(const struct policy_env *e, uint32_t i, float *x,
                            bool *legal)
{
    const struct table *tb = &e->tables[i];
    const float *pi = e->proj + (size_t)i * NET_H2;
    int32_t r, nlegal = 0, arg, per = e->t->devices_per_host, w = tb->dim;
    double second, maxr = ready_now(e, &arg, &second);
    double inv = 1.0 / e->L, frac = e->placed * inv / e->t->ndevices;

    for (r = 0; r < e->t->ndevices; r++) {
        const float *zr = e->z + (size_t)r * NET_H2;
        uint64_t cap = topology_mem(e->t, r);
        float *xr = x + (size_t)r * POL_NCOST, z[NET_H2];
        double h = e->host[r / per], after, comm, comm_after, ready_after;
        double others = r == arg ? second : maxr;
        int k;

        legal[r] = e->used[r] <= cap && e->bytes[i] <= cap - e->used[r];
        nlegal += legal[r];
        for (k = 0; k < NET_H2; k++)
            z[k] = zr[k] + pi[k];
        after = head_ms(e, z);
        comm = e->ready[r] - e->compute[r];
        comm_after = comm_of(e, e->dims[r] + w, h + w, e->total + w);
        ready_after = after + comm_after;
        xr[0] = (float)(e->compute[r] * inv);
        xr[1] = (float)(after * inv);
        xr[2] = (float)(comm * inv);
        xr[3] = (float)(comm_after * inv);
        xr[4] = (float)(((ready_after > others ? ready_after : others) - maxr) *
                        inv);
        xr[5] = (float)((maxr - e->ready[r]) * inv);
        xr[6] = (float)(e->dims[r] / e->dbar);
        xr[7] = (float)((double)e->used[r] / (double)cap);
        xr[8] = (float)((double)(e->used[r] + e->bytes[i]) / (double)cap);
        xr[9] = (float)frac;
    }
    return nlegal;
}

void policy_env_logits(const struct policy_env *e, const float *x,
                       const bool *legal, double *logit)
{
    const float *p = e->pn->p;
    int32_t r;

    for (r = 0; r < e->t->ndevices; r++) {
        float c1[POL_C1], c2[POL_C2], h[POL_HH], b[POL_HH], v;
        const float *hl = e->hlat + (size_t)r * POL_HH;
        int o;

        if (!legal[r]) {
            logit[r] = NAN;
            continue;
        }
        layer_t(e->wc1t, p + POL_C1B, x + (size_t)r * POL_NCOST, POL_NCOST,
                POL_C1, c1);
        layer_t(e->wc2t, p + POL_C2B, c1, POL_C1, POL_C2, c2);
        /* The head's first layer: its latent half is hlat[r]. */
        for (o = 0; o < POL_HH; o++)
            b[o] = p[POL_H1B + o] + hl[o];
        layer_t(e->wh1t, b, c2, POL_C2, POL_HH, h);
        v = p[POL_H2B];
        for (o = 0; o < POL_HH; o++)
            v += p[POL_H2W + o] * h[o];
        logit[r] = v;
    }
}

void policy_env_place(struct policy_env *e, uint32_t i, int32_t r)
{
    const struct table *tb = &e->tables[i];
    float *zr = e->z + (size_t)r * NET_H2;
    float *sr = e->latsum + (size_t)r * POL_LAT;
    int k;

    for (k = 0; k < NET_H2; k++)
        zr[k] += e->proj[(size_t)i * NET_H2 + k];
    e->compute[r] = head_ms(e, zr);
    e->dims[r] += tb->dim;
    e->ntab[r]++;
    e->used[r] += e->bytes[i];
    e->host[r / e->t->devices_per_host] += tb->dim;
    e->total += tb->dim;
    e->placed += e->single[i];
    e->dev[i] = r;
    if (e->pn != NULL) {
        for (k = 0; k < POL_LAT; k++)
            sr[k] += e->lat[(size_t)i * POL_LAT + k];
        update_hlat(e, r);
    }
}

double policy_env_cost(const struct policy_env *e)
{
    int32_t arg, r, per = e->t->devices_per_host;
    double second, maxr = ready_now(e, &arg, &second), maxc = 0;

    for (r = 0; r < e->t->ndevices; r++) {
        double c = comm_of(e, e->dims[r], e->host[r / per], e->total);

        if (c > maxc)
            maxc = c;
    }
    return maxr + maxc;
}

/*
 * The legal device of lowest ready time (compute + backward exchange) for
 * table i: with the table scored into each device's compute (the model-cost
 * LPT), or with the device's compute as placed (least loaded).  Ties: less
 * memory used, lower id.  -1 if none fits.
 */
static int32_t lowest_ready(const struct policy_env *e, uint32_t i,
                            bool with_table)
{
    const float *pi = e->proj + (size_t)i * NET_H2;
    int32_t r, best = -1, per = e->t->devices_per_host, w = e->tables[i].dim;
    double best_v = 0;

    for (r = 0; r < e->t->ndevices; r++) {
        const float *zr = e->z + (size_t)r * NET_H2;
        uint64_t cap = topology_mem(e->t, r);
        float z[NET_H2];
        double v = e->compute[r];
        int k;

        if (e->used[r] > cap || e->bytes[i] > cap - e->used[r])
            continue;
        if (with_table) {
            for (k = 0; k < NET_H2; k++)
                z[k] = zr[k] + pi[k];
            v = head_ms(e, z);
        }
        v += comm_of(e, e->dims[r] + w, e->host[r / per] + w, e->total + w);
        if (best < 0 || v < best_v ||
            (v == best_v && e->used[r] < e->used[best])) {
            best = r;
            best_v = v;
        }
    }
    return best;
}

int32_t policy_env_lpt(const struct policy_env *e, uint32_t i)
{
    return lowest_ready(e, i, true);
}

int32_t policy_env_least_loaded(const struct policy_env *e, uint32_t i)
{
    return lowest_ready(e, i, false);
}

int32_t policy_argmax_legal(const double *logit, const bool *legal, int32_t n)
{
    int32_t r, best = -1;

    for (r = 0; r < n; r++)
        if (legal[r] && (best < 0 || logit[r] > logit[best]))
            best = r;
    return best;
}

int policy_env_rollout(struct policy_env *e, struct sd_diag *d)
{
    int32_t nd = e->t->ndevices, r;
    float *x = malloc((size_t)nd * POL_NCOST * sizeof(*x));
    bool *legal = malloc((size_t)nd * sizeof(*legal));
    double *logit = malloc((size_t)nd * sizeof(*logit));
    size_t k;
    int rv = 0;

    if (!x || !legal || !logit) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_free;
    }
    for (k = 0; k < e->n; k++) {
        uint32_t i = e->order[k];

        if (e->dev[i] >= 0)
            continue;
        if (e->pn != NULL) {
            policy_env_features(e, i, x, legal);
            policy_env_logits(e, x, legal, logit);
            r = policy_argmax_legal(logit, legal, nd);
        } else {
            r = policy_env_lpt(e, i);
        }
        if (r < 0) {
            char need[SD_BYTES_TEXT];

            rv =
                sd_diag_set(d, SD_ENOSPACE,
                            "table \"%.128s\": needs %s and no device has "
                            "that much room left; %s",
                            e->tables[i].name, sd_bytes_text(e->bytes[i], need),
                            topology_more_memory(e->t));
            goto out_free;
        }
        policy_env_place(e, i, r);
    }
out_free:
    free(x);
    free(legal);
    free(logit);
    return rv;
}

int policy_lpt_ratio(const struct policy_net *pn, const struct cost_net *m,
                     const struct policy_task *tasks, size_t n,
                     int32_t ndevices, uint64_t mem_bytes, int64_t batch_size,
                     double *ratio)
{
    struct topology topo;
    struct policy_env *e;
    double sum = 0;
    size_t k;
    int rv;

    topology_default(&topo, ndevices, mem_bytes);
    topo.batch_size = batch_size > 0 ? batch_size : m->batch_size;
    for (k = 0; k < n; k++) {
        double pc, lc;
        bool pok, lok;

        rv = policy_env_new(pn, m, NULL, tasks[k].tables, tasks[k].ntables,
                            &topo, OPTIMIZER_SGD, &e);
        if (rv != 0)
            return rv;
        pok = policy_env_rollout(e, NULL) == 0;
        pc = policy_env_cost(e);
        /* The same env without the policy: the LPT. */
        e->pn = NULL;
        policy_env_reset(e);
        lok = policy_env_rollout(e, NULL) == 0;
        lc = policy_env_cost(e);
        policy_env_free(e);
        if (pok && lok)
            sum += lc > 0 ? pc / lc : 1;
        else if (!pok && lok)
            sum += 2;
        else
            sum += 1;
    }
    *ratio = n ? sum / (double)n : 1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The file format: little-endian fields in a fixed order, then a CRC-32.    */

/* Reads at p + *off and moves *off past the field (the caller checked the
 * image's size). */
static uint32_t get_u32(const unsigned char *p, size_t *off)
{
    uint32_t v = sd_le_get32(p + *off);

    *off += 4;
    return v;
}

static uint64_t get_u64(const unsigned char *p, size_t *off)
{
    uint64_t v = sd_le_get64(p + *off);

    *off += 8;
    return v;
}

/* The layer sizes a file names, in this order. */
static const uint32_t pol_arch[] = {POL_IN, POL_H1, POL_LAT, POL_NCOST,
                                    POL_C1, POL_C2, POL_HH};
#define POL_NARCH (sizeof(pol_arch) / sizeof(pol_arch[0]))

/* magic, version, arch, profile, model crc, metrics (seed, 6 int32, 2
 * doubles), params, crc. */
#define POL_IMAGE_LEN                                                          \
    (4 + 4 + 4 * POL_NARCH + NET_PROFILE_MAX + 4 + 8 + 6 * 4 + 2 * 8 +         \
     POL_NPARAMS * 4 + 4)

int policy_serialize(const struct policy_net *pn, void **out, size_t *len)
{
    struct sd_wbuf b = {malloc(POL_IMAGE_LEN), 0};
    const struct policy_metrics *mx = &pn->metrics;
    size_t i;

    if (!b.p)
        return SD_ENOMEM;
    memcpy(b.p, POL_MAGIC, 4);
    b.len = 4;
    sd_wbuf_u32(&b, POLICY_FORMAT_VERSION);
    for (i = 0; i < POL_NARCH; i++)
        sd_wbuf_u32(&b, pol_arch[i]);
    memset(b.p + b.len, 0, NET_PROFILE_MAX);
    memcpy(b.p + b.len, pn->profile, strnlen(pn->profile, NET_PROFILE_MAX - 1));
    b.len += NET_PROFILE_MAX;
    sd_wbuf_u32(&b, pn->model_crc);
    sd_wbuf_u64(&b, mx->seed);
    sd_wbuf_u32(&b, (uint32_t)mx->iterations);
    sd_wbuf_u32(&b, (uint32_t)mx->best_iteration);
    sd_wbuf_u32(&b, (uint32_t)mx->train_devices);
    sd_wbuf_u32(&b, (uint32_t)mx->train_tasks);
    sd_wbuf_u32(&b, (uint32_t)mx->val_tasks);
    sd_wbuf_u32(&b, (uint32_t)mx->gate_tasks);
    sd_wbuf_f64(&b, mx->val_ratio);
    sd_wbuf_f64(&b, mx->gate_ratio);
    for (i = 0; i < POL_NPARAMS; i++)
        sd_wbuf_f32(&b, pn->p[i]);
    sd_wbuf_u32(&b, (uint32_t)crc32_z(0, b.p, b.len));
    *out = b.p;
    *len = b.len;
    return 0;
}

/* The fields after the header, checked; 0 or SD_EFORMAT naming one. */
static int parse_body(const unsigned char *p, size_t off, struct policy_net *pn,
                      struct sd_diag *d)
{
    struct policy_metrics *mx = &pn->metrics;
    size_t i, n;

    memcpy(pn->profile, p + off, NET_PROFILE_MAX);
    off += NET_PROFILE_MAX;
    if (memchr(pn->profile, '\0', NET_PROFILE_MAX) == NULL)
        return sd_diag_set(d, SD_EFORMAT,
                           "policy file: profile: not NUL-terminated");
    if (pn->profile[0] == '\0')
        return sd_diag_set(d, SD_EFORMAT, "policy file: profile: empty");
    /* Bytes after the NUL mean nothing (a file writes zeros there): zero
     * them, so that a policy read equals the same policy written. */
    n = strlen(pn->profile);
    memset(pn->profile + n, 0, NET_PROFILE_MAX - n);
    pn->model_crc = get_u32(p, &off);
    mx->seed = get_u64(p, &off);
    mx->iterations = (int32_t)get_u32(p, &off);
    mx->best_iteration = (int32_t)get_u32(p, &off);
    mx->train_devices = (int32_t)get_u32(p, &off);
    mx->train_tasks = (int32_t)get_u32(p, &off);
    mx->val_tasks = (int32_t)get_u32(p, &off);
    mx->gate_tasks = (int32_t)get_u32(p, &off);
    mx->val_ratio = sd_f64_of(get_u64(p, &off));
    mx->gate_ratio = sd_f64_of(get_u64(p, &off));
    if (mx->iterations < 0 || mx->best_iteration < 0 ||
        mx->best_iteration > mx->iterations || mx->train_devices < 0 ||
        mx->train_tasks < 0 || mx->val_tasks < 0 || mx->gate_tasks < 0)
        return sd_diag_set(d, SD_EFORMAT,
                           "policy file: metrics: a count is negative or "
                           "best_iteration %d is past iterations %d",
                           (int)mx->best_iteration, (int)mx->iterations);
    if (!isfinite(mx->val_ratio) || mx->val_ratio < 0)
        return sd_diag_set(d, SD_EFORMAT,
                           "policy file: metrics.val_ratio: %g is not a "
                           "finite number >= 0",
                           mx->val_ratio);
    if (!isfinite(mx->gate_ratio) || mx->gate_ratio < 0)
        return sd_diag_set(d, SD_EFORMAT,
                           "policy file: metrics.gate_ratio: %g is not a "
                           "finite number >= 0",
                           mx->gate_ratio);
    for (i = 0; i < POL_NPARAMS; i++) {
        pn->p[i] = sd_f32_of(get_u32(p, &off));
        if (!isfinite(pn->p[i]))
            return sd_diag_set(d, SD_EFORMAT,
                               "policy file: params[%zu]: not finite", i);
    }
    return 0;
}

int policy_parse(const void *buf, size_t len, struct policy_net **out,
                 struct sd_diag *d)
{
    const unsigned char *p = buf;
    struct policy_net *pn;
    size_t off = 4, i;
    uint32_t version, crc, v;
    int rv;

    if (len < 8 || memcmp(p, POL_MAGIC, 4) != 0)
        return sd_diag_set(d, SD_EFORMAT,
                           "policy file: magic: not a shardd policy file");
    version = get_u32(p, &off);
    if (version > POLICY_FORMAT_VERSION)
        return sd_diag_set(d, SD_ENEWER,
                           "policy file: version: %u is newer than this "
                           "shardd supports (%d); upgrade shardd",
                           version, POLICY_FORMAT_VERSION);
    if (version < 1)
        return sd_diag_set(d, SD_EFORMAT, "policy file: version: 0 is not one");
    if (len != POL_IMAGE_LEN)
        return sd_diag_set(d, SD_EFORMAT,
                           "policy file: size: %zu bytes, format %u has %d: "
                           "truncated or damaged",
                           len, version, (int)POL_IMAGE_LEN);
    off = len - 4;
    crc = get_u32(p, &off);
    if (crc != (uint32_t)crc32_z(0, p, len - 4))
        return sd_diag_set(d, SD_EFORMAT,
                           "policy file: crc32: checksum mismatch: damaged");
    off = 8;
    for (i = 0; i < POL_NARCH; i++) {
        v = get_u32(p, &off);
        if (v != pol_arch[i])
            return sd_diag_set(d, SD_EFORMAT,
                               "policy file: architecture: layer size %zu is "
                               "%u, this shardd reads %u",
                               i, v, pol_arch[i]);
    }
    pn = calloc(1, sizeof(*pn));
    if (!pn)
        return SD_ENOMEM;
    rv = parse_body(p, off, pn, d);
    if (rv != 0) {
        free(pn);
        return rv;
    }
    *out = pn;
    return 0;
}

int policy_read_file(const char *path, struct policy_net **out,
                     struct sd_diag *d)
{
    void *buf;
    size_t len;
    int rv;

    rv = sd_file_read(path, POL_FILE_MAX, "a policy file", &buf, &len, d);
    if (rv != 0)
        return rv;
    rv = policy_parse(buf, len, out, d);
    if (rv < 0)
        sd_file_prefix(path, rv, d);
    free(buf);
    return rv;
}

int policy_write_file(const char *path, const struct policy_net *pn,
                      struct sd_diag *d)
{
    void *buf;
    size_t len;
    int rv;

    rv = policy_serialize(pn, &buf, &len);
    if (rv < 0)
        return sd_diag_set(d, rv, "out of memory");
    rv = sd_file_write(path, buf, len, d);
    free(buf);
    return rv;
}

/*
 * The compiled-in policies, parsed together on first use, each with why it
 * did not parse: the cpu default model's first, then the H200 model's.
 * Written once, under images_once.
 */
struct policy_image {
    const char *what; /* for errors */
    const unsigned char *bytes;
    const size_t *len;
    struct policy_net *pn; /* NULL: damaged */
    struct sd_diag err;
};

static struct policy_image images[] = {
    {"embedded policy",
     sd_embedded_policy,
     &sd_embedded_policy_len,
     NULL,
     {{0}}},
    {"embedded H200 policy", sd_h200_policy, &sd_h200_policy_len, NULL, {{0}}},
};
#define NIMAGES (sizeof(images) / sizeof(images[0]))

static pthread_once_t images_once = PTHREAD_ONCE_INIT;

static void images_parse(void)
{
    size_t i;

    for (i = 0; i < NIMAGES; i++)
        if (policy_parse(images[i].bytes, *images[i].len, &images[i].pn,
                         &images[i].err) < 0)
            images[i].pn = NULL;
}

const struct policy_net *policy_embedded(struct sd_diag *d)
{
    pthread_once(&images_once, images_parse);
    if (!images[0].pn && d)
        snprintf(d->msg, sizeof(d->msg), "%s: %.480s", images[0].what,
                 images[0].err.msg);
    return images[0].pn;
}

const struct policy_net *policy_compiled(const struct cost_net *m,
                                         struct sd_diag *d)
{
    uint32_t crc = policy_model_crc(m);
    size_t i;

    pthread_once(&images_once, images_parse);
    for (i = 0; i < NIMAGES; i++) {
        if (images[i].pn == NULL) {
            if (d)
                snprintf(d->msg, sizeof(d->msg), "%s: %.480s", images[i].what,
                         images[i].err.msg);
            continue;
        }
        if (images[i].pn->model_crc == crc &&
            strcmp(images[i].pn->profile, m->profile) == 0)
            return images[i].pn;
    }
    return NULL;
}
