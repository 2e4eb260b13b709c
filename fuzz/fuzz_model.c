/*
 * Fuzz target: the cost-model file loader, net_parse()
 * (planner/models/netfile.c), formats 1 to 4.
 *
 * The first byte picks how the rest is used:
 *  - even: the rest is a model file image as it is;
 *  - 1 mod 8: the rest is a list of 3-byte edits (offset u16 little-endian,
 *    modulo the image size, then the new byte) applied to the embedded
 *    model's image (format 3: derived inputs), whose CRC-32 is then made
 *    right again;
 *  - 3 mod 4: a list of 4-byte edits (offset u24) of the reference set's
 *    image (format 2: transforms, notice, comm models);
 *  - 5 mod 8: 4-byte edits of a prior model's image (format 4, made by
 *    prior_model.h: derived inputs with the physical terms, the prior
 *    activation).
 *    A checksum stops raw mutations at the first changed byte; the edits
 *    reach the checks behind it (architecture, profile, batch size,
 *    transforms, comm models' sizes, weights).
 *
 * Invariants: an input is refused with a code and a message, or the model
 * has a NUL-terminated, non-empty profile, a batch size >= 1, finite
 * weights (the derived inputs' too), transforms, activations, derived
 * inputs and comm sizes in range, and net_serialize() then net_parse()
 * gives the same model.
 */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "planner.h"
#include "prior_model.h"

static uint8_t *image; /* the embedded model, serialised (format 3) */
static size_t image_len;
static uint8_t *image2; /* the reference set, serialised (format 2) */
static size_t image2_len;
static uint8_t *image4; /* a prior model, serialised (format 4) */
static size_t image4_len;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const struct cost_net *m = net_embedded(NULL);
    const struct cost_net *r = net_reference(NULL);
    struct cost_net *prior = fuzz_prior_model();
    void *img;

    (void)argc;
    (void)argv;
    FUZZ_CHECK(m != NULL && r != NULL && prior != NULL);
    FUZZ_CHECK(net_serialize(m, &img, &image_len) == 0);
    image = img;
    FUZZ_CHECK(net_serialize(r, &img, &image2_len) == 0);
    image2 = img;
    FUZZ_CHECK(net_serialize(prior, &img, &image4_len) == 0);
    image4 = img;
    free(prior);
    return 0;
}

static int same_io(const struct cost_net *a, const struct cost_net *b)
{
    int i;

    for (i = 0; i < NET_IN; i++)
        if (net_io_transform(a, i) != net_io_transform(b, i))
            return 0;
    return net_io_activation(a) == net_io_activation(b) &&
           net_io_eps(a) == net_io_eps(b);
}

static int same_comm(const struct cost_net *a, const struct cost_net *b)
{
    int32_t k;

    if (a->ncomm != b->ncomm || a->ncomm_p != b->ncomm_p ||
        memcmp(a->comm_p, b->comm_p, a->ncomm_p * sizeof(float)) != 0)
        return 0;
    for (k = 0; k < a->ncomm; k++) {
        const struct comm_net *x = &a->comm[k], *y = &b->comm[k];

        if (x->dir != y->dir || x->ndevices != y->ndevices ||
            x->nlayers != y->nlayers || x->activation != y->activation ||
            x->eps != y->eps || x->off != y->off || x->nparams != y->nparams ||
            memcmp(x->sizes, y->sizes, sizeof(x->sizes)) != 0 ||
            memcmp(x->mean, y->mean, sizeof(x->mean)) != 0 ||
            memcmp(x->std, y->std, sizeof(x->std)) != 0 ||
            memcmp(&x->metrics, &y->metrics, sizeof(x->metrics)) != 0)
            return 0;
    }
    return 1;
}

static int same_model(const struct cost_net *a, const struct cost_net *b)
{
    return strcmp(a->profile, b->profile) == 0 &&
           a->batch_size == b->batch_size &&
           memcmp(a->mean, b->mean, sizeof(a->mean)) == 0 &&
           memcmp(a->std, b->std, sizeof(a->std)) == 0 &&
           memcmp(a->p, b->p, sizeof(a->p)) == 0 &&
           memcmp(&a->metrics, &b->metrics, sizeof(a->metrics)) == 0 &&
           a->x.n == b->x.n && memcmp(a->x.id, b->x.id, (size_t)a->x.n) == 0 &&
           memcmp(a->xw, b->xw, sizeof(a->xw)) == 0 &&
           strcmp(a->notice, b->notice) == 0 && same_io(a, b) &&
           same_comm(a, b);
}

/* A comm net that parsed: sizes in range and consistent, weights finite. */
static void check_comm(const struct cost_net *m, const struct comm_net *c)
{
    int32_t l;
    size_t i;

    FUZZ_CHECK(c->dir == COMM_FWD || c->dir == COMM_BWD);
    FUZZ_CHECK(c->ndevices >= 2 && c->ndevices <= COMM_DEVICES_MAX);
    FUZZ_CHECK(c->nlayers >= 1 && c->nlayers <= COMM_LAYERS_MAX);
    for (l = 0; l <= c->nlayers; l++)
        FUZZ_CHECK(c->sizes[l] >= 1 && c->sizes[l] <= COMM_WIDTH_MAX);
    FUZZ_CHECK(c->sizes[c->nlayers] == c->ndevices);
    FUZZ_CHECK(c->nparams == comm_net_nparams(c->nlayers, c->sizes));
    FUZZ_CHECK(c->off + c->nparams <= m->ncomm_p);
    FUZZ_CHECK(isfinite(c->eps) && c->eps >= 0);
    for (i = 0; i < c->nparams; i++)
        FUZZ_CHECK(isfinite(m->comm_p[c->off + i]));
}

static void check_model(const struct cost_net *m)
{
    struct cost_net *again = NULL;
    struct sd_diag d;
    void *img;
    size_t len, i;

    FUZZ_CHECK(memchr(m->profile, '\0', sizeof(m->profile)) != NULL);
    FUZZ_CHECK(m->profile[0] != '\0');
    FUZZ_CHECK(m->batch_size >= 1);
    for (i = 0; i < NET_NPARAMS; i++)
        FUZZ_CHECK(isfinite(m->p[i]));
    FUZZ_CHECK(m->x.n >= 0 && m->x.n <= NET_XMAX);
    for (i = 0; i < (size_t)m->x.n; i++)
        FUZZ_CHECK(m->x.id[i] < NET_X_COUNT && isfinite(m->mean[NET_IN + i]) &&
                   isfinite(m->std[NET_IN + i]) && m->std[NET_IN + i] >= 0);
    for (i = 0; i < NET_H1 * NET_XMAX; i++)
        FUZZ_CHECK(isfinite(m->xw[i]));
    for (i = 0; i < NET_IN; i++)
        FUZZ_CHECK(isfinite(m->mean[i]) && isfinite(m->std[i]) &&
                   m->std[i] >= 0 &&
                   net_io_transform(m, (int)i) < NET_TF_COUNT);
    FUZZ_CHECK(net_io_activation(m) < NET_ACT_COUNT);
    FUZZ_CHECK(memchr(m->notice, '\0', sizeof(m->notice)) != NULL);
    FUZZ_CHECK(m->ncomm >= 0 && m->ncomm <= COMM_NETS_MAX);
    for (i = 0; i < (size_t)m->ncomm; i++)
        check_comm(m, &m->comm[i]);

    FUZZ_CHECK(net_serialize(m, &img, &len) == 0);
    d.msg[0] = '\0';
    FUZZ_CHECK(net_parse(img, len, &again, &d) == 0);
    FUZZ_CHECK(same_model(m, again));
    free(again);
    free(img);
}

static void parse(const uint8_t *buf, size_t len)
{
    struct cost_net *m = NULL;
    struct sd_diag d;
    int rv;

    d.msg[0] = '\0';
    rv = net_parse(buf, len, &m, &d);
    if (rv != 0) {
        FUZZ_CHECK(rv == SD_EFORMAT || rv == SD_ENEWER || rv == SD_ENOMEM);
        fuzz_check_refusal(rv, &d);
        return;
    }
    check_model(m);
    free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *base;
    uint8_t *buf;
    size_t blen, step;

    if (size == 0)
        return 0;
    if ((data[0] & 1) == 0) {
        /* An exact-size copy, so that a read past the end is caught. */
        buf = malloc(size - 1 ? size - 1 : 1);
        FUZZ_CHECK(buf != NULL);
        memcpy(buf, data + 1, size - 1);
        parse(buf, size - 1);
        free(buf);
        return 0;
    }
    /* 1 mod 8: 3-byte edits of the embedded model; 3 mod 4: 4-byte edits
     * (a 24-bit offset) of format 2; 5 mod 8: of format 4. */
    if (data[0] & 2) {
        base = image2;
        blen = image2_len;
        step = 4;
    } else if (data[0] & 4) {
        base = image4;
        blen = image4_len;
        step = 4;
    } else {
        base = image;
        blen = image_len;
        step = 3;
    }
    buf = malloc(blen);
    FUZZ_CHECK(buf != NULL);
    memcpy(buf, base, blen);
    fuzz_edit_image(buf, blen, data + 1, size - 1, step);
    parse(buf, blen);
    free(buf);
    return 0;
}
