/*
 * Hostile input, mutated from valid input: thousands of seeded corruptions
 * (bit flips, overwritten bytes, truncations, repeated spans) of a model
 * file, a tables file and a plan file go through their parsers, which must
 * never crash (CI runs this under ASan and UBSan too) and must either
 * refuse the input with an error and a message or return something that
 * passes validation.  A deterministic stand-in for a fuzzer: same seed, same
 * inputs, every run.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "planner.h"

#define ROUNDS 3000

/* A corrupted copy of src (n bytes) in dst (capacity 2n + 16); its length. */
static size_t mutate(struct rng *g, const unsigned char *src, size_t n,
                     unsigned char *dst)
{
    size_t len = n, i, k, edits = 1 + (size_t)(rng_uniform(g) * 4);

    memcpy(dst, src, n);
    for (k = 0; k < edits && len > 0; k++) {
        size_t at = (size_t)(rng_uniform(g) * (double)len);

        switch ((int)(rng_uniform(g) * 4)) {
        case 0: /* flip a bit */
            dst[at] ^= (unsigned char)(1u << (int)(rng_uniform(g) * 8));
            break;
        case 1: /* overwrite a byte */
            dst[at] = (unsigned char)(rng_uniform(g) * 256);
            break;
        case 2: /* cut the end off */
            len = at;
            break;
        default: /* repeat a short span: growing, within capacity */
            i = 1 + (size_t)(rng_uniform(g) * 16);
            if (at + i <= len && len + i <= 2 * n + 16) {
                memmove(dst + at + i, dst + at, len - at);
                len += i;
            }
            break;
        }
    }
    return len;
}

static void fuzz_model(struct rng *g)
{
    struct cost_net m, *out;
    struct sd_diag d;
    void *img;
    unsigned char *buf;
    size_t len, n, r;
    int refused = 0, bad = 0;

    memset(&m, 0, sizeof(m));
    snprintf(m.profile, sizeof(m.profile), "cpu/fuzz/4096");
    m.batch_size = 4096;
    for (r = 0; r < NET_IN; r++)
        m.std[r] = 1;
    for (r = 0; r < NET_NPARAMS; r++)
        m.p[r] = (float)(rng_uniform(g) - 0.5);
    CHECK(net_serialize(&m, &img, &n) == 0);
    buf = malloc(2 * n + 16);
    CHECK(buf != NULL);
    if (!buf) {
        free(img);
        return;
    }
    for (r = 0; r < ROUNDS; r++) {
        int rv;

        len = mutate(g, img, n, buf);
        d.msg[0] = '\0';
        rv = net_parse(buf, len, &out, &d);
        if (rv == 0) {
            /* A corruption the checksum cannot see does not exist: any
             * accepted image must be the original. */
            bad += len != n || memcmp(buf, img, n) != 0;
            free(out);
        } else {
            refused++;
            bad += d.msg[0] == '\0' || (rv != SD_EFORMAT && rv != SD_ENEWER);
        }
    }
    CHECK(bad == 0);
    CHECK(refused > ROUNDS / 2);
    free(buf);
    free(img);
}

static void fuzz_json(struct rng *g)
{
    struct table tb[3];
    struct plan p, back;
    struct topology topo;
    struct sd_diag d;
    char *tables_json, *plan_json;
    unsigned char *buf;
    size_t r, cap;
    int bad = 0, k;

    memset(tb, 0, sizeof(tb));
    for (k = 0; k < 3; k++) {
        snprintf(tb[k].name, sizeof(tb[k].name), "t%d", k);
        tb[k].rows = 1000 * (k + 1);
        tb[k].dim = 8 << k;
        tb[k].pooling_factor = 2.5 * (k + 1);
        tb[k].bins[0] = 0.5;
        tb[k].bins[1] = 0.25;
    }
    topology_default(&topo, 2, 1ull << 30);
    CHECK(plan_init(&p, 2) == 0);
    CHECK(plan_add(&p, 0, 0, 0, 8) == 0);
    CHECK(plan_add(&p, 1, 1, 0, 16) == 0);
    CHECK(plan_add(&p, 2, 0, 0, 16) == 0);
    CHECK(plan_add(&p, 2, 1, 16, 16) == 0);
    CHECK(plan_validate(&p, tb, 3, &topo, OPTIMIZER_SGD, &d) == 0);
    tables_json = json_tables(tb, 3);
    plan_json = json_plan(&p, tb);
    CHECK(tables_json != NULL && plan_json != NULL);
    cap = 2 * (strlen(tables_json) + strlen(plan_json)) + 32;
    buf = malloc(cap);
    CHECK(buf != NULL);
    for (r = 0; buf && tables_json && plan_json && r < ROUNDS; r++) {
        struct table *out = NULL;
        size_t n = 0, len;
        int rv;

        len = mutate(g, (const unsigned char *)tables_json, strlen(tables_json),
                     buf);
        d.msg[0] = '\0';
        rv = json_parse_tables((const char *)buf, len, 0, &out, &n, &d);
        if (rv == 0)
            bad += table_validate_all(out, n, &d) != 0;
        else
            bad += rv > 0 || d.msg[0] == '\0';
        free(out);

        len =
            mutate(g, (const unsigned char *)plan_json, strlen(plan_json), buf);
        d.msg[0] = '\0';
        rv = json_parse_plan((const char *)buf, len, tb, 3, &back, &d);
        if (rv == 0) {
            /* Parsed plans are only trusted after validation, which must
             * itself survive whatever the file said. */
            if (back.ndevices == 2)
                (void)plan_validate(&back, tb, 3, &topo, OPTIMIZER_SGD, &d);
            plan_destroy(&back);
        } else {
            bad += rv > 0 || d.msg[0] == '\0';
        }
    }
    CHECK(bad == 0);
    free(buf);
    free(tables_json);
    free(plan_json);
    plan_destroy(&p);
}

int main(void)
{
    struct rng g;

    rng_seed(&g, 20261121);
    fuzz_model(&g);
    fuzz_json(&g);
    return tap_done();
}
