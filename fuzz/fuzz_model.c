/*
 * Fuzz target: the cost-model file loader, net_parse() (planner/models/net.c).
 *
 * The first byte picks how the rest is used:
 *  - even: the rest is a model file image as it is;
 *  - odd: the rest is a list of 3-byte edits (offset u16 little-endian,
 *    modulo the image size, then the new byte) applied to the embedded
 *    model's image, whose CRC-32 is then made right again.  A checksum
 *    stops raw mutations at the first changed byte; the edits reach the
 *    checks behind it (architecture, profile, batch size, weights).
 *
 * Invariants: an input is refused with a code and a message, or the model
 * has a NUL-terminated, non-empty profile, a batch size >= 1 and finite
 * weights, and net_serialize() then net_parse() gives the same model.
 */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "planner.h"

static uint8_t *image; /* the embedded model, serialised */
static size_t image_len;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const struct cost_net *m = net_embedded(NULL);
    void *img;

    (void)argc;
    (void)argv;
    FUZZ_CHECK(m != NULL);
    FUZZ_CHECK(net_serialize(m, &img, &image_len) == 0);
    image = img;
    return 0;
}

/* The model file's checksum: CRC-32 (IEEE, reflected), as net.c writes. */
static uint32_t crc32_ieee(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    size_t i;
    int k;

    for (i = 0; i < n; i++) {
        c ^= p[i];
        for (k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
}

static int same_model(const struct cost_net *a, const struct cost_net *b)
{
    return strcmp(a->profile, b->profile) == 0 &&
           a->batch_size == b->batch_size &&
           memcmp(a->mean, b->mean, sizeof(a->mean)) == 0 &&
           memcmp(a->std, b->std, sizeof(a->std)) == 0 &&
           memcmp(a->p, b->p, sizeof(a->p)) == 0 &&
           memcmp(&a->metrics, &b->metrics, sizeof(a->metrics)) == 0;
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
    for (i = 0; i < NET_IN; i++)
        FUZZ_CHECK(isfinite(m->mean[i]) && isfinite(m->std[i]) &&
                   m->std[i] >= 0);

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
    uint8_t *buf;
    uint32_t crc;
    size_t i;
    int k;

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
    buf = malloc(image_len);
    FUZZ_CHECK(buf != NULL);
    memcpy(buf, image, image_len);
    for (i = 1; i + 3 <= size; i += 3) {
        size_t off = ((size_t)data[i] | (size_t)data[i + 1] << 8) % image_len;

        buf[off] = data[i + 2];
    }
    crc = crc32_ieee(buf, image_len - 4);
    for (k = 0; k < 4; k++)
        buf[image_len - 4 + k] = (uint8_t)(crc >> (8 * k));
    parse(buf, image_len);
    free(buf);
    return 0;
}
