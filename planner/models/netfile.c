/*
 * The model file format (models.h, docs/model-format.md): little-endian
 * fields in a fixed order, then a CRC-32 of everything before it.
 * Format 1 is one fixed-size record (a compute model with format 1's inputs
 * and output); format 2 adds the per-input transforms and the output
 * activation, a notice and the communication models, so its length
 * depends on them.  The writer picks the oldest format that holds the
 * model, so a model shardd trains still reads on a shardd that knows only
 * format 1; the reader takes both and names the field it refuses.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "models/models.h"
#include "problem/problem.h"
#include "shardd/file.h"
#include "shardd/le.h"

/* "SDCN": shardd compute net. */
static const unsigned char NET_MAGIC[4] = {'S', 'D', 'C', 'N'};
/* Format 1's flags: inputs transformed (log1p pf, log rows), output
 * softplus.  Format 2 says so per input instead; its flags are 0. */
#define NET_FLAGS_V1 3u
#define NET_FILE_MAX (1u << 20)

/* The model file's checksum: CRC-32 (IEEE 802.3, reflected) as zlib
 * computes it, the value of Python's zlib.crc32() too. */
static uint32_t checksum(const void *p, size_t n)
{
    return (uint32_t)crc32_z(0, p, n);
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                   */

static void put_f32s(struct sd_wbuf *b, const float *f, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        sd_wbuf_f32(b, f[i]);
}

static void put_metrics(struct sd_wbuf *b, const struct net_metrics *mt)
{
    sd_wbuf_f64(b, mt->train_mape);
    sd_wbuf_f64(b, mt->val_mape);
    sd_wbuf_f64(b, mt->test_mape);
    sd_wbuf_u64(b, (uint64_t)mt->train_samples);
    sd_wbuf_u64(b, (uint64_t)mt->val_samples);
    sd_wbuf_u64(b, (uint64_t)mt->test_samples);
    sd_wbuf_u32(b, (uint32_t)mt->epochs);
    sd_wbuf_u32(b, (uint32_t)mt->best_epoch);
    sd_wbuf_u64(b, mt->seed);
}

#define METRICS_LEN (3 * 8 + 3 * 8 + 2 * 4 + 8)

/* magic, version, 4 layer sizes, flags, profile, batch, metrics, mean, std,
 * params, crc. */
#define NET_IMAGE_LEN                                                          \
    (4 + 4 + 4 * 4 + 4 + NET_PROFILE_MAX + 8 + METRICS_LEN + 2 * NET_IN * 4 +  \
     NET_NPARAMS * 4 + 4)

/* Format 2's fixed part: format 1's fields with the transforms, the
 * activation and eps before mean and std, then the notice's length (no
 * crc). */
#define NET_V2_FIXED_LEN (NET_IMAGE_LEN - 4 + NET_IN + 4 + 4 + 4)

static bool io_is_format1(const struct cost_net *m)
{
    struct net_io f1;

    if (!m->io.custom)
        return true;
    net_io_format1(&f1);
    return memcmp(f1.transform, m->io.transform, NET_IN) == 0 &&
           f1.activation == m->io.activation && f1.eps == m->io.eps;
}

int net_format_version(const struct cost_net *m)
{
    if (net_has_prior(m))
        return 4;
    if (m->x.n > 0)
        return 3;
    return io_is_format1(m) && m->ncomm == 0 && m->notice[0] == '\0' ? 1 : 2;
}

/* Format 3's list of derived inputs: a count, the ids, zero padding to 4. */
static size_t extras_len(const struct cost_net *m)
{
    return m->x.n > 0 ? 4 + ((size_t)m->x.n + 3) / 4 * 4 : 0;
}

static size_t notice_len(const struct cost_net *m)
{
    return strnlen(m->notice, NET_NOTICE_MAX - 1);
}

/* Bytes of m's format-2 or 3 image: format 3 adds its derived inputs'
 * list, means, stds and first-layer columns. */
static size_t image_len_v2(const struct cost_net *m)
{
    size_t len = NET_V2_FIXED_LEN + (notice_len(m) + 3) / 4 * 4 + 4 + 4 +
                 extras_len(m) + (size_t)m->x.n * 4 * (2 + NET_H1);
    int32_t k;

    for (k = 0; k < m->ncomm; k++) {
        const struct comm_net *c = &m->comm[k];

        len += 4 * 3 + 4 * ((size_t)c->nlayers + 1) + 4 + 4 + METRICS_LEN +
               2 * 4 * (size_t)c->sizes[0] + 4 * c->nparams;
    }
    return len;
}

/* Format 1's header up to the flags, and the profile, batch and metrics
 * that both formats share. */
static void put_head(struct sd_wbuf *b, const struct cost_net *m, int version)
{
    memcpy(b->p, NET_MAGIC, 4);
    b->len = 4;
    sd_wbuf_u32(b, (uint32_t)version);
    sd_wbuf_u32(b, (uint32_t)net_nin(m));
    sd_wbuf_u32(b, NET_H1);
    sd_wbuf_u32(b, NET_LAT);
    sd_wbuf_u32(b, NET_H2);
    sd_wbuf_u32(b, version == 1 ? NET_FLAGS_V1 : 0);
    memset(b->p + b->len, 0, NET_PROFILE_MAX);
    memcpy(b->p + b->len, m->profile, strnlen(m->profile, NET_PROFILE_MAX - 1));
    b->len += NET_PROFILE_MAX;
    sd_wbuf_u64(b, (uint64_t)m->batch_size);
    put_metrics(b, &m->metrics);
}

static void put_comm(struct sd_wbuf *b, const struct cost_net *m,
                     const struct comm_net *c, float *scratch)
{
    int32_t l;

    sd_wbuf_u32(b, (uint32_t)c->dir);
    sd_wbuf_u32(b, (uint32_t)c->ndevices);
    sd_wbuf_u32(b, (uint32_t)c->nlayers);
    for (l = 0; l <= c->nlayers; l++)
        sd_wbuf_u32(b, (uint32_t)c->sizes[l]);
    sd_wbuf_u32(b, (uint32_t)c->activation);
    sd_wbuf_f32(b, c->eps);
    put_metrics(b, &c->metrics);
    put_f32s(b, c->mean, (size_t)c->sizes[0]);
    put_f32s(b, c->std, (size_t)c->sizes[0]);
    comm_net_params_get(m, c, scratch);
    put_f32s(b, scratch, c->nparams);
}

/* The compute parameters in the file's layout: W1 row by row, each row
 * its NET_IN columns then the derived inputs' (format 3), then b1 .. b4. */
static void put_params(struct sd_wbuf *b, const struct cost_net *m)
{
    int o;

    if (m->x.n == 0) {
        put_f32s(b, m->p, NET_NPARAMS);
        return;
    }
    for (o = 0; o < NET_H1; o++) {
        put_f32s(b, m->p + NET_W1 + (size_t)o * NET_IN, NET_IN);
        put_f32s(b, m->xw + (size_t)o * NET_XMAX, (size_t)m->x.n);
    }
    put_f32s(b, m->p + NET_B1, NET_NPARAMS - NET_B1);
}

int net_serialize(const struct cost_net *m, void **out, size_t *len)
{
    int version = net_format_version(m);
    size_t cap = version == 1 ? NET_IMAGE_LEN : image_len_v2(m), nl;
    struct sd_wbuf b = {malloc(cap), 0};
    float *scratch = NULL;
    int32_t k;
    int i;

    if (m->ncomm > 0)
        scratch = malloc(COMM_PARAMS_MAX * sizeof(float));
    if (!b.p || (m->ncomm > 0 && !scratch)) {
        free(b.p);
        free(scratch);
        return SD_ENOMEM;
    }
    put_head(&b, m, version);
    if (version >= 2) {
        for (i = 0; i < NET_IN; i++)
            b.p[b.len++] = (unsigned char)net_io_transform(m, i);
        sd_wbuf_u32(&b, (uint32_t)net_io_activation(m));
        sd_wbuf_f32(&b, net_io_eps(m));
    }
    if (version >= 3) {
        sd_wbuf_u32(&b, (uint32_t)m->x.n);
        memset(b.p + b.len, 0, extras_len(m) - 4);
        memcpy(b.p + b.len, m->x.id, (size_t)m->x.n);
        b.len += extras_len(m) - 4;
    }
    put_f32s(&b, m->mean, (size_t)net_nin(m));
    put_f32s(&b, m->std, (size_t)net_nin(m));
    put_params(&b, m);
    if (version >= 2) {
        nl = notice_len(m);
        sd_wbuf_u32(&b, (uint32_t)nl);
        memset(b.p + b.len, 0, (nl + 3) / 4 * 4);
        memcpy(b.p + b.len, m->notice, nl);
        b.len += (nl + 3) / 4 * 4;
        sd_wbuf_u32(&b, (uint32_t)m->ncomm);
        for (k = 0; k < m->ncomm; k++)
            put_comm(&b, m, &m->comm[k], scratch);
    }
    free(scratch);
    sd_wbuf_u32(&b, checksum(b.p, b.len));
    *out = b.p;
    *len = b.len;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Reading                                                                   */

/* A bounded reader: a read past `end` sets `short_read` and gives zeros,
 * so the parser checks once per section, not per field. */
struct rbuf {
    const unsigned char *p;
    size_t off, end;
    bool short_read;
};

static bool have(struct rbuf *b, size_t n)
{
    if (b->short_read || n > b->end - b->off) {
        b->short_read = true;
        return false;
    }
    return true;
}

static uint32_t get_u32(struct rbuf *b)
{
    uint32_t v;

    if (!have(b, 4))
        return 0;
    v = sd_le_get32(b->p + b->off);
    b->off += 4;
    return v;
}

static uint64_t get_u64(struct rbuf *b)
{
    uint64_t lo = get_u32(b);

    return lo | (uint64_t)get_u32(b) << 32;
}

static float get_f32(struct rbuf *b)
{
    return sd_f32_of(get_u32(b));
}

static double get_f64(struct rbuf *b)
{
    return sd_f64_of(get_u64(b));
}

static void get_f32s(struct rbuf *b, float *f, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        f[i] = get_f32(b);
}

static void get_metrics(struct rbuf *b, struct net_metrics *mt)
{
    mt->train_mape = get_f64(b);
    mt->val_mape = get_f64(b);
    mt->test_mape = get_f64(b);
    mt->train_samples = (int64_t)get_u64(b);
    mt->val_samples = (int64_t)get_u64(b);
    mt->test_samples = (int64_t)get_u64(b);
    mt->epochs = (int32_t)get_u32(b);
    mt->best_epoch = (int32_t)get_u32(b);
    mt->seed = get_u64(b);
}

/* The index of the first non-finite float of f[0 .. n), or -1. */
static long first_bad(const float *f, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (!isfinite(f[i]))
            return (long)i;
    return -1;
}

/* z-score constants: finite, std >= 0.  `what` names the net. */
static int check_norm(const float *mean, const float *std, size_t n,
                      const char *what, struct sd_diag *d)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (!isfinite(mean[i]))
            return sd_diag_set(d, SD_EFORMAT,
                               "model file: %smean[%zu] is not finite", what,
                               i);
        if (!isfinite(std[i]) || std[i] < 0)
            return sd_diag_set(d, SD_EFORMAT,
                               "model file: %sstd[%zu] %g is not a finite "
                               "number >= 0",
                               what, i, (double)std[i]);
    }
    return 0;
}

/* The profile, batch and metrics, and the fields every format checks. */
static int get_common(struct rbuf *b, struct cost_net *m, struct sd_diag *d)
{
    if (!have(b, NET_PROFILE_MAX))
        return 0;
    memcpy(m->profile, b->p + b->off, NET_PROFILE_MAX);
    m->profile[NET_PROFILE_MAX - 1] = '\0';
    b->off += NET_PROFILE_MAX;
    m->batch_size = (int64_t)get_u64(b);
    get_metrics(b, &m->metrics);
    if (m->profile[0] == '\0')
        return sd_diag_set(d, SD_EFORMAT, "model file: profile is empty");
    if (m->batch_size < 1)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file: batch_size %lld is not >= 1",
                           (long long)m->batch_size);
    return 0;
}

/* Mean, std and parameters of the compute model (m->x.n derived inputs
 * known), read and checked. */
static int get_compute(struct rbuf *b, struct cost_net *m, struct sd_diag *d)
{
    size_t nin = (size_t)net_nin(m);
    long bad;
    int o;

    get_f32s(b, m->mean, nin);
    get_f32s(b, m->std, nin);
    if (m->x.n == 0) {
        get_f32s(b, m->p, NET_NPARAMS);
    } else {
        for (o = 0; o < NET_H1; o++) {
            get_f32s(b, m->p + NET_W1 + (size_t)o * NET_IN, NET_IN);
            get_f32s(b, m->xw + (size_t)o * NET_XMAX, (size_t)m->x.n);
        }
        get_f32s(b, m->p + NET_B1, NET_NPARAMS - NET_B1);
    }
    /* A checksum proves the bytes are what was written, not that the writer
     * was sane: refuse weights that would make every cost NaN. */
    bad = first_bad(m->p, NET_NPARAMS);
    if (bad >= 0)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file: compute weight %ld is not finite", bad);
    bad = first_bad(m->xw, NET_H1 * NET_XMAX);
    if (bad >= 0)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file: compute weight of derived input %ld "
                           "(unit %ld) is not finite",
                           bad % NET_XMAX, bad / NET_XMAX);
    return check_norm(m->mean, m->std, nin, "compute ", d);
}

/* Format 3's derived inputs: their count, which the first layer size
 * (nin) must match, and their ids. */
static int get_extras(struct rbuf *b, struct cost_net *m, uint32_t nin,
                      struct sd_diag *d)
{
    uint32_t n = get_u32(b);
    size_t pad;

    if (b->short_read)
        return 0;
    if (n < 1 || n > NET_XMAX)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file: extras.n %u is not in [1, %d]", n,
                           NET_XMAX);
    if (n != nin - NET_IN)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file: extras.n %u does not match %u inputs "
                           "(20 and %u derived)",
                           n, nin, nin - NET_IN);
    pad = ((size_t)n + 3) / 4 * 4;
    if (!have(b, pad))
        return 0;
    m->x.n = (int32_t)n;
    memcpy(m->x.id, b->p + b->off, n);
    for (; n < pad; n++)
        if (b->p[b->off + n] != 0)
            return sd_diag_set(d, SD_EFORMAT,
                               "model file: extras padding is not zero");
    b->off += pad;
    return net_extras_check(&m->x, "model file: extras", d) != 0 ? SD_EFORMAT
                                                                 : 0;
}

static int parse_v1(const unsigned char *buf, size_t len, struct cost_net *m,
                    struct sd_diag *d)
{
    struct rbuf b = {buf, 8, len - 4, false};
    int rv;

    if (get_u32(&b) != NET_IN || get_u32(&b) != NET_H1 ||
        get_u32(&b) != NET_LAT || get_u32(&b) != NET_H2 ||
        get_u32(&b) != NET_FLAGS_V1)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file has another architecture than "
                           "20-128-32 / 32-64-1 with log features");
    rv = get_common(&b, m, d);
    return rv != 0 ? rv : get_compute(&b, m, d);
}

/* One comm net's header of format 2 into c (sizes checked). */
static int get_comm_head(struct rbuf *b, struct comm_net *c, int32_t k,
                         struct sd_diag *d)
{
    uint32_t dir, nd, nl, act, v;
    int32_t l;

    dir = get_u32(b);
    nd = get_u32(b);
    nl = get_u32(b);
    if (b->short_read)
        return 0; /* the caller says "truncated" */
    if (dir > COMM_BWD)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file: comm[%d].dir %u is neither 0 "
                           "(forward) nor 1 (backward)",
                           (int)k, dir);
    if (nd < 2 || nd > COMM_DEVICES_MAX)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file: comm[%d].ndevices %u is not in "
                           "[2, %d]",
                           (int)k, nd, COMM_DEVICES_MAX);
    if (nl < 1 || nl > COMM_LAYERS_MAX)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file: comm[%d].nlayers %u is not in [1, %d]",
                           (int)k, nl, COMM_LAYERS_MAX);
    c->dir = (int32_t)dir;
    c->ndevices = (int32_t)nd;
    c->nlayers = (int32_t)nl;
    for (l = 0; l <= c->nlayers; l++) {
        v = get_u32(b);
        if (!b->short_read && (v < 1 || v > COMM_WIDTH_MAX))
            return sd_diag_set(d, SD_EFORMAT,
                               "model file: comm[%d].sizes[%d] %u is not in "
                               "[1, %d]",
                               (int)k, (int)l, v, COMM_WIDTH_MAX);
        c->sizes[l] = (int32_t)v;
    }
    act = get_u32(b);
    c->eps = get_f32(b);
    if (b->short_read)
        return 0;
    if (!isfinite(c->eps) || c->eps < 0)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file: comm[%d].eps %g is not a finite "
                           "number >= 0",
                           (int)k, (double)c->eps);
    if ((uint32_t)c->sizes[0] != (dir == COMM_FWD ? 2 * nd : nd) ||
        (uint32_t)c->sizes[nl] != nd)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file: comm[%d].sizes: %d inputs and %d "
                           "outputs, a %s net of %u devices has %u and %u",
                           (int)k, (int)c->sizes[0], (int)c->sizes[nl],
                           dir == COMM_FWD ? "forward" : "backward", nd,
                           dir == COMM_FWD ? 2 * nd : nd, nd);
    if (act > NET_ACT_SOFTPLUS)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file: comm[%d].activation %u is not 0 "
                           "(none) or 1 (softplus)",
                           (int)k, act);
    c->activation = (int32_t)act;
    c->nparams = comm_net_nparams(c->nlayers, c->sizes);
    if (c->nparams > COMM_PARAMS_MAX)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file: comm[%d] has %zu parameters, more "
                           "than %d",
                           (int)k, c->nparams, COMM_PARAMS_MAX);
    return 0;
}

/* Comm net c's parameters, read in the file's layout, into the memory
 * layout. */
static int relayout_in_place(struct cost_net *m, const struct comm_net *c)
{
    float *tmp = malloc(c->nparams * sizeof(float));

    if (tmp == NULL)
        return SD_ENOMEM;
    memcpy(tmp, m->comm_p + c->off, c->nparams * sizeof(float));
    comm_net_params_set(m, c, tmp);
    free(tmp);
    return 0;
}

/*
 * Format 2's comm nets, read into *mp (grown as they come).  Every header
 * is read first, so the set is allocated once.
 */
static int get_comms(struct rbuf *b, struct cost_net **mp, struct sd_diag *d)
{
    struct comm_net heads[COMM_NETS_MAX];
    struct cost_net *m = *mp, *grown;
    uint32_t n = get_u32(b);
    size_t total = 0, save;
    int32_t k, j;
    long bad;
    int rv;

    if (n > COMM_NETS_MAX)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file: %u comm models, at most %d", n,
                           COMM_NETS_MAX);
    memset(heads, 0, sizeof(heads));
    save = b->off;
    for (k = 0; k < (int32_t)n && !b->short_read; k++) {
        struct comm_net *c = &heads[k];

        rv = get_comm_head(b, c, k, d);
        if (rv != 0)
            return rv;
        for (j = 0; j < k; j++)
            if (heads[j].dir == c->dir && heads[j].ndevices == c->ndevices)
                return sd_diag_set(d, SD_EFORMAT,
                                   "model file: comm[%d] and comm[%d] are "
                                   "both %s models of %d devices",
                                   (int)j, (int)k,
                                   c->dir == COMM_FWD ? "forward" : "backward",
                                   (int)c->ndevices);
        /* Skip metrics, mean, std and parameters to the next header. */
        if (have(b, METRICS_LEN + 8 * (size_t)c->sizes[0] + 4 * c->nparams))
            b->off += METRICS_LEN + 8 * (size_t)c->sizes[0] + 4 * c->nparams;
        c->off = total;
        total += c->nparams;
    }
    if (b->short_read)
        return 0;
    grown = realloc(m, sizeof(*m) + total * sizeof(float));
    if (grown == NULL)
        return SD_ENOMEM;
    *mp = m = grown;
    m->ncomm_p = total;
    b->off = save;
    for (k = 0; k < (int32_t)n; k++) {
        struct comm_net *c = &m->comm[k];
        char what[32];

        *c = heads[k];
        b->off += 4 * 3 + 4 * ((size_t)c->nlayers + 1) + 4 + 4;
        get_metrics(b, &c->metrics);
        get_f32s(b, c->mean, (size_t)c->sizes[0]);
        get_f32s(b, c->std, (size_t)c->sizes[0]);
        /* read in the file's layout, then laid out for memory */
        get_f32s(b, m->comm_p + c->off, c->nparams);
        snprintf(what, sizeof(what), "comm[%d].", (int)k);
        rv = check_norm(c->mean, c->std, (size_t)c->sizes[0], what, d);
        if (rv != 0)
            return rv;
        bad = first_bad(m->comm_p + c->off, c->nparams);
        if (bad >= 0)
            return sd_diag_set(d, SD_EFORMAT,
                               "model file: comm[%d] weight %ld is not finite",
                               (int)k, bad);
        rv = relayout_in_place(m, c);
        if (rv != 0)
            return rv;
    }
    m->ncomm = (int32_t)n;
    return 0;
}

/* Format 2's transforms, activation and notice. */
static int get_io_notice(struct rbuf *b, struct cost_net *m, bool before_norm,
                         struct sd_diag *d)
{
    uint32_t act, nl;
    int i;

    if (before_norm) {
        m->io.custom = true;
        if (!have(b, NET_IN))
            return 0;
        for (i = 0; i < NET_IN; i++) {
            m->io.transform[i] = b->p[b->off++];
            if (m->io.transform[i] >= NET_TF_COUNT)
                return sd_diag_set(d, SD_EFORMAT,
                                   "model file: transform[%d] %u is not 0 "
                                   "(identity), 1 (log) or 2 (log1p)",
                                   i, m->io.transform[i]);
        }
        act = get_u32(b);
        if (!b->short_read && act >= NET_ACT_COUNT)
            return sd_diag_set(d, SD_EFORMAT,
                               "model file: activation %u is not 0 (none), "
                               "1 (softplus) or 2 (prior)",
                               act);
        m->io.activation = (uint8_t)act;
        m->io.eps = get_f32(b);
        if (!b->short_read && (!isfinite(m->io.eps) || m->io.eps < 0))
            return sd_diag_set(d, SD_EFORMAT,
                               "model file: eps %g is not a finite number "
                               ">= 0",
                               (double)m->io.eps);
        return 0;
    }
    nl = get_u32(b);
    if (b->short_read)
        return 0;
    if (nl >= NET_NOTICE_MAX)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file: notice of %u bytes, at most %d", nl,
                           NET_NOTICE_MAX - 1);
    if (!have(b, (nl + 3) / 4 * 4))
        return 0;
    memcpy(m->notice, b->p + b->off, nl);
    m->notice[nl] = '\0';
    if (strlen(m->notice) != nl)
        return sd_diag_set(d, SD_EFORMAT, "model file: notice has a NUL byte");
    for (i = (int)nl; i < (int)((nl + 3) / 4 * 4); i++)
        if (b->p[b->off + (size_t)i] != 0)
            return sd_diag_set(d, SD_EFORMAT,
                               "model file: notice padding is not zero");
    b->off += (nl + 3) / 4 * 4;
    return 0;
}

/* Formats 2 and 3 (3: nin > 20 inputs, the derived ones listed). */
static int parse_v2(const unsigned char *buf, size_t len, uint32_t version,
                    struct cost_net **mp, struct sd_diag *d)
{
    struct rbuf b = {buf, 8, len - 4, false};
    uint32_t flags, nin;
    int rv;

    nin = get_u32(&b);
    if (version == 2 && nin != NET_IN)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file: sizes[0] %u inputs, format 2 has "
                           "20",
                           nin);
    if (version >= 3 && (nin <= NET_IN || nin > NET_IN_MAX))
        return sd_diag_set(d, SD_EFORMAT,
                           "model file: sizes[0] %u inputs, format %u has "
                           "21 to %d",
                           nin, version, NET_IN_MAX);
    if (get_u32(&b) != NET_H1 || get_u32(&b) != NET_LAT ||
        get_u32(&b) != NET_H2)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file: layer sizes are not %u-128-32 / "
                           "32-64-1, the only compute architecture",
                           nin);
    flags = get_u32(&b);
    if (flags != 0)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file: flags 0x%x, format %u has none", flags,
                           version);
    if (!have(&b, NET_V2_FIXED_LEN - 28))
        goto out_short;
    rv = get_common(&b, *mp, d);
    if (rv == 0)
        rv = get_io_notice(&b, *mp, true, d);
    if (rv == 0 && version >= 3)
        rv = get_extras(&b, *mp, nin, d);
    if (rv == 0)
        rv = b.short_read ? 0 : get_compute(&b, *mp, d);
    if (rv == 0)
        rv = get_io_notice(&b, *mp, false, d);
    if (rv == 0)
        rv = get_comms(&b, mp, d);
    if (rv != 0)
        return rv;
    if (b.short_read)
        goto out_short;
    if (b.off != b.end)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file: %zu bytes after the last comm model",
                           b.end - b.off);
    /* Format 4 is format 3 with the physical prior, and only it has one. */
    if ((version == 4) != net_has_prior(*mp))
        return sd_diag_set(d, SD_EFORMAT,
                           "model file: format %u with activation %d: the "
                           "prior (2) is format 4's alone, and format 4 has it",
                           version, (int)net_io_activation(*mp));
    if (net_prior_check(*mp, d) != 0)
        return SD_EFORMAT;
    return 0;

out_short:
    return sd_diag_set(d, SD_EFORMAT,
                       "model file of %zu bytes ends inside its fields: "
                       "truncated or damaged",
                       len);
}

int net_parse(const void *buf, size_t len, struct cost_net **out,
              struct sd_diag *d)
{
    const unsigned char *p = buf;
    struct cost_net *m;
    uint32_t version, crc;
    int rv;

    if (len < 8 || memcmp(buf, NET_MAGIC, 4) != 0)
        return sd_diag_set(d, SD_EFORMAT, "not a shardd cost model file");
    version = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 |
              (uint32_t)p[7] << 24;
    if (version > NET_FORMAT_VERSION)
        return sd_diag_set(d, SD_ENEWER,
                           "model format version %u is newer than this shardd "
                           "supports (%d); upgrade shardd",
                           version, NET_FORMAT_VERSION);
    if (version < 1)
        return sd_diag_set(d, SD_EFORMAT, "model format version 0 is invalid");
    if (version == 1 && len != NET_IMAGE_LEN)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file is %zu bytes, format %u has %d: "
                           "truncated or damaged",
                           len, version, (int)NET_IMAGE_LEN);
    if (len < 12 || len > NET_FILE_MAX)
        return sd_diag_set(d, SD_EFORMAT,
                           "model file is %zu bytes: not a format %u model",
                           len, version);
    crc = (uint32_t)p[len - 4] | (uint32_t)p[len - 3] << 8 |
          (uint32_t)p[len - 2] << 16 | (uint32_t)p[len - 1] << 24;
    if (crc != checksum(buf, len - 4))
        return sd_diag_set(d, SD_EFORMAT,
                           "model file checksum mismatch: damaged");
    m = net_alloc();
    if (!m)
        return SD_ENOMEM;
    rv = version == 1 ? parse_v1(p, len, m, d)
                      : parse_v2(p, len, version, &m, d);
    if (rv != 0) {
        free(m);
        return rv;
    }
    *out = m;
    return 0;
}

int net_read_file(const char *path, struct cost_net **out, struct sd_diag *d)
{
    void *buf;
    size_t len;
    int rv;

    rv = sd_file_read(path, NET_FILE_MAX, "a cost model file", &buf, &len, d);
    if (rv != 0)
        return rv;
    rv = net_parse(buf, len, out, d);
    if (rv < 0)
        sd_file_prefix(path, rv, d);
    free(buf);
    return rv;
}

int net_write_file(const char *path, const struct cost_net *m,
                   struct sd_diag *d)
{
    void *buf;
    size_t len;
    int rv;

    rv = net_serialize(m, &buf, &len);
    if (rv < 0)
        return rv;
    rv = sd_file_write(path, buf, len, d);
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
