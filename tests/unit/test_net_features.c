/* The compute model's derived inputs (format 3, `train --features v2`):
 * inference against a float64 reference written from the documented
 * formulas, the file round trip and its refusals, formats 1 and 2 left as
 * they were, the dtype as an input (and in the memo's key), the feature-set
 * names, and training with them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "image_edit.h"
#include "planner.h"
#include "ref_net.h"

#define BATCH 4096

/* Offsets in a format-3 image with NX derived inputs
 * (docs/model-format.md). */
#define NX           5
#define V3_SIZES     8
#define V3_TRANSFORM (28 + NET_PROFILE_MAX + 8 + 64)
#define V3_EXTRAS    (V3_TRANSFORM + NET_IN + 4 + 4)
#define V3_IDS       (V3_EXTRAS + 4)
#define V3_MEAN      (V3_IDS + 8) /* NX ids padded to 8 */
#define V3_PARAMS    (V3_MEAN + 2 * (NET_IN + NX) * 4)


/* A random model of NeuroShard's 20 inputs (format 1). */
static void random_net(struct cost_net *m, uint64_t seed)
{
    struct rng g;
    int i;

    memset(m, 0, sizeof(*m));
    rng_seed(&g, seed);
    snprintf(m->profile, sizeof(m->profile), "cpu/test/%d", BATCH);
    m->batch_size = BATCH;
    for (i = 0; i < NET_IN; i++) {
        m->mean[i] = (float)rng_normal(&g);
        m->std[i] = (float)(1 + rng_uniform(&g));
    }
    for (i = 0; i < NET_NPARAMS; i++)
        m->p[i] = (float)(0.2 * rng_normal(&g));
}

/* The same with `train --features v2`'s derived inputs, their constants
 * about the range of their values and their weights random too. */
static void random_net_v2(struct cost_net *m, uint64_t seed)
{
    struct sd_diag d = {{0}};
    struct rng g;
    int i, o;

    random_net(m, seed);
    CHECK(net_extras_parse("v2", &m->x, &d) == 0);
    CHECK(m->x.n == NX);
    rng_seed(&g, seed + 1000);
    for (i = 0; i < m->x.n; i++) {
        m->mean[NET_IN + i] = (float)(8 * rng_uniform(&g));
        m->std[NET_IN + i] = (float)(1 + 4 * rng_uniform(&g));
        for (o = 0; o < NET_H1; o++)
            m->xw[o * NET_XMAX + i] = (float)(0.2 * rng_normal(&g));
    }
}

static void make_table(struct table *t, int64_t rows, int32_t dim, double pf,
                       enum table_dtype dtype)
{
    int k;

    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "t%lld", (long long)rows);
    t->rows = rows;
    t->dim = dim;
    t->pooling_factor = pf;
    t->dtype = dtype;
    /* 0.3, 0.25, .. 0.05 scaled to sum to 1 */
    for (k = 0; k < 6; k++)
        t->bins[k] = (0.3 - 0.05 * k) / 1.05;
}

static void tables3(struct table t[3], int32_t cols[3], struct shard_item it[3])
{
    make_table(&t[0], 1000000, 64, 20, TABLE_DTYPE_FP32);
    make_table(&t[1], 2000, 32, 3, TABLE_DTYPE_FP16);
    make_table(&t[2], 80000000, 128, 0.06, TABLE_DTYPE_FP32);
    cols[0] = 64;
    cols[1] = 16;
    cols[2] = 128;
    it[0] = (struct shard_item){&t[0], cols[0]};
    it[1] = (struct shard_item){&t[1], cols[1]};
    it[2] = (struct shard_item){&t[2], cols[2]};
}

static void test_inference_v2(void)
{
    struct cost_net m;
    struct table t[3];
    struct shard_item it[3];
    int32_t cols[3];
    float x[NET_IN_MAX];
    int id, i, k;

    random_net_v2(&m, 1);
    tables3(t, cols, it);
    CHECK(net_nin(&m) == NET_IN + NX);
    /* Each derived input as defined, for every kind, on a table whose
     * rows fit the L2 (t[1]) and two whose rows do not. */
    for (i = 0; i < 3; i++)
        for (id = 1; id < NET_X_COUNT; id++) {
            double ref = ref_net_extra(id, &t[i], cols[i], BATCH);

            CHECK_NEAR(net_extra_value(id, &t[i], cols[i], BATCH), ref,
                       1e-12 * (1 + fabs(ref)));
        }
    /* The L2 re-reads: none where the rows fit; t[0]'s 17,377 distinct
     * rows of 256 bytes are 2.12 x the L2, so the 64,543 lookups after
     * each row's first re-read 0.53 of their bytes. */
    CHECK(net_extra_value(NET_X_PHYS_L2_REREADS, &t[1], cols[1], BATCH) == 0);
    {
        double u = 20.0 * BATCH * 1.05 / 4.95, ub = u * 256;

        CHECK_NEAR(
            net_extra_value(NET_X_PHYS_L2_REREADS, &t[0], cols[0], BATCH),
            (20.0 * BATCH - u) * 256 * (ub - (2 << 20)) / ub, 1e-3);
    }
    /* Unique rows: 12,288 lookups, each row accessed 4.95 / 1.05 times on
     * average by the bins (2,606.5 rows), capped at the table's 2,000; a
     * longer table is not capped. */
    CHECK_NEAR(table_unique_rows(&t[1], BATCH), 2000, 0);
    /* Every bin's mean access count (problem.h), against its formula. */
    for (k = 0; k < TABLE_NBINS; k++)
        CHECK(table_bin_count(k) == (k == 0    ? 1.0
                                     : k == 16 ? 65536.0
                                               : 0.75 * pow(2, k) + 0.5));
    CHECK_NEAR(table_unique_rows(&t[0], BATCH), 20.0 * BATCH * 1.05 / 4.95,
               1e-12);
    CHECK(net_extra_value(0, &t[0], 64, BATCH) == 0);
    net_features_of(&m, &t[0], 64, x);
    CHECK_NEAR(x[NET_IN + 1], log1p(20.0 * BATCH), 1e-6);
    CHECK_NEAR(net_shard_ms(&m, it, 1), ref_net_ms(&m, t, cols, 1), 1e-4);
    CHECK_NEAR(net_shard_ms(&m, it, 3), ref_net_ms(&m, t, cols, 3), 1e-4);
    CHECK_NEAR(net_tables_ms(&m, t, 1), ref_net_ms(&m, t, cols, 1), 1e-4);
}

static void test_format_v3(void)
{
    struct cost_net m, *back = NULL;
    struct sd_diag d = {{0}};
    struct table t[3];
    struct shard_item it[3];
    int32_t cols[3];
    unsigned char *buf;
    void *img, *img2;
    size_t len, len2;
    int k;

    random_net_v2(&m, 2);
    tables3(t, cols, it);
    CHECK(net_format_version(&m) == 3);
    CHECK(net_serialize(&m, &img, &len) == 0);
    buf = img;
    CHECK(buf[4] == 3 && buf[V3_SIZES] == NET_IN + NX);
    CHECK(buf[V3_EXTRAS] == NX && buf[V3_IDS] == NET_X_ELEM_BYTES &&
          buf[V3_IDS + 4] == NET_X_TABLE_BYTES && buf[V3_IDS + 5] == 0);
    /* 20 + 5 inputs: 5 more means and stds, 5 more columns of W1; then
     * the notice's length (0), the comm count (0) and the checksum. */
    CHECK(len ==
          (size_t)V3_PARAMS + 4 * (NET_NPARAMS + NET_H1 * NX) + 4 + 4 + 4);
    CHECK(net_parse(img, len, &back, &d) == 0);
    if (back == NULL) {
        fprintf(stderr, "v3: %s\n", d.msg);
        free(img);
        return;
    }
    CHECK(back->x.n == NX && memcmp(back->x.id, m.x.id, NX) == 0);
    CHECK(memcmp(back->xw, m.xw, sizeof(m.xw)) == 0);
    CHECK(memcmp(back->mean, m.mean, sizeof(m.mean)) == 0);
    for (k = 1; k <= 3; k++)
        CHECK(net_shard_ms(back, it, (size_t)k) ==
              net_shard_ms(&m, it, (size_t)k));
    /* Written again, the same bytes. */
    CHECK(net_serialize(back, &img2, &len2) == 0);
    CHECK(len2 == len && memcmp(img, img2, len) == 0);
    free(img2);
    free(back);
    free(img);
}


static void test_format_v3_refusals(void)
{
    struct cost_net m, *back = NULL;
    struct sd_diag d = {{0}};
    unsigned char *buf, *cut;
    void *img;
    size_t len, at;
    float inf = INFINITY;
    uint32_t inf_bits;

    random_net_v2(&m, 3);
    if (net_serialize(&m, &img, &len) != 0) {
        CHECK(0);
        return;
    }
    buf = img;
    memcpy(&inf_bits, &inf, 4);
    /* The counts: inputs against the list, the list's bounds. */
    refuse_edit(buf, len, V3_SIZES, NET_IN + NX + 1, 4, "extras.n");
    refuse_edit(buf, len, V3_SIZES, NET_IN, 4, "sizes[0]");
    refuse_edit(buf, len, V3_SIZES, NET_IN_MAX + 1, 4, "sizes[0]");
    refuse_edit(buf, len, V3_EXTRAS, NX - 1, 4, "extras.n");
    refuse_edit(buf, len, V3_EXTRAS, 0, 4, "extras.n");
    refuse_edit(buf, len, V3_EXTRAS, NET_XMAX + 1, 4, "extras.n");
    /* The ids: unknown, repeated; the padding. */
    refuse_edit(buf, len, V3_IDS + 2, NET_X_COUNT, 1, "extras.id[2]");
    refuse_edit(buf, len, V3_IDS + 2, 0, 1, "extras.id[2]");
    refuse_edit(buf, len, V3_IDS + 3, NET_X_ELEM_BYTES, 1, "extras.id[3]");
    refuse_edit(buf, len, V3_IDS + 6, 1, 1, "extras padding");
    /* A derived input's constant and weight (unit 2's row: its 20 inputs'
     * columns then the derived ones'). */
    refuse_edit(buf, len, V3_MEAN + 4 * (NET_IN + 1), inf_bits, 4, "mean[21]");
    at = V3_PARAMS + 4 * (2 * (NET_IN + NX) + NET_IN + 3);
    refuse_edit(buf, len, at, inf_bits, 4, "derived input 3 (unit 2)");
    /* A format-2 image cannot have more inputs. */
    refuse_edit(buf, len, 4, 2, 4, "sizes[0]");
    /* Cut short: inside the list, the parameters, the notice. */
    cut = malloc(len);
    if (cut != NULL) {
        size_t ends[3] = {V3_IDS + 2, V3_PARAMS + 1000, len - 8};
        int k;

        for (k = 0; k < 3; k++) {
            memcpy(cut, buf, ends[k]);
            memset(cut + ends[k], 0, 4);
            recrc(cut, ends[k] + 4);
            CHECK(net_parse(cut, ends[k] + 4, &back, &d) == SD_EFORMAT);
            if (strstr(d.msg, "truncated") == NULL) {
                fprintf(stderr, "cut at %zu: %s\n", ends[k], d.msg);
                CHECK(0);
            }
        }
        free(cut);
    }
    CHECK(back == NULL);
    free(img);
}

/*
 * Formats 1 and 2 as they were: a model without derived inputs is written
 * as before (format 1: 36,364 bytes), whatever its unused derived-input
 * weights hold, and predicts the same bits as with them zero.
 */
static void test_v1_v2_unchanged(void)
{
    struct cost_net m, junk, *back = NULL;
    struct sd_diag d = {{0}};
    struct table t[3];
    struct shard_item it[3];
    int32_t cols[3];
    void *a, *b;
    size_t la, lb;
    int i, k;

    random_net(&m, 4);
    tables3(t, cols, it);
    junk = m;
    for (i = 0; i < NET_H1 * NET_XMAX; i++)
        junk.xw[i] = 1e3f;
    for (i = NET_IN; i < NET_IN_MAX; i++)
        junk.mean[i] = 7;
    CHECK(net_format_version(&m) == 1 && net_nin(&m) == NET_IN);
    CHECK(net_serialize(&m, &a, &la) == 0);
    CHECK(net_serialize(&junk, &b, &lb) == 0);
    CHECK(la == 36364 && la == lb && memcmp(a, b, la) == 0);
    CHECK(((unsigned char *)a)[4] == 1);
    for (k = 1; k <= 3; k++)
        CHECK(net_shard_ms(&junk, it, (size_t)k) ==
              net_shard_ms(&m, it, (size_t)k));
    CHECK(net_parse(a, la, &back, &d) == 0);
    if (back != NULL) {
        CHECK(back->x.n == 0);
        CHECK(net_shard_ms(back, it, 3) == net_shard_ms(&m, it, 3));
        free(back);
    }
    free(a);
    free(b);
    /* Format 2 (a raw output) stays format 2, 20 inputs. */
    m.io.custom = true;
    net_io_format1(&m.io);
    m.io.activation = NET_ACT_NONE;
    CHECK(net_format_version(&m) == 2);
    CHECK(net_serialize(&m, &a, &la) == 0);
    CHECK(((unsigned char *)a)[4] == 2 && ((unsigned char *)a)[8] == NET_IN);
    free(a);
}

/*
 * A table that differs only in dtype: another prediction under v2 (its
 * bytes are inputs), the same under v1; and the memo, keyed on the dtype
 * where the model reads it, answers each as the model does.
 */
static void test_dtype(void)
{
    struct cost_net v1, v2;
    const struct cost_net *ms[2] = {&v1, &v2};
    struct table t32, t16;
    float a[NET_H2], b[NET_H2], want[NET_H2], lat[NET_LAT];
    int k;

    random_net(&v1, 5);
    random_net_v2(&v2, 5);
    make_table(&t32, 300000, 64, 8, TABLE_DTYPE_FP32);
    t16 = t32;
    t16.dtype = TABLE_DTYPE_FP16;
    CHECK(net_tables_ms(&v1, &t32, 1) == net_tables_ms(&v1, &t16, 1));
    CHECK(net_tables_ms(&v2, &t32, 1) != net_tables_ms(&v2, &t16, 1));
    CHECK_NEAR(net_tables_ms(&v2, &t16, 1), ref_net_ms(&v2, &t16, &t16.dim, 1),
               1e-4);
    for (k = 0; k < 2; k++) {
        struct net_memo *mm = net_memo_new(ms[k], 64);

        CHECK(mm != NULL);
        /* fp32 first: a memo that ignored the dtype would answer fp16
         * with it. */
        net_projected(ms[k], mm, &t32, 64, a);
        net_projected(ms[k], mm, &t16, 64, b);
        net_latent(ms[k], &t16, 64, lat);
        net_project(ms[k], lat, want);
        CHECK(memcmp(b, want, sizeof(b)) == 0);
        CHECK((memcmp(a, b, sizeof(a)) != 0) == (k == 1));
        /* Asked again, from the memo: the same. */
        net_projected(ms[k], mm, &t16, 64, a);
        CHECK(memcmp(a, want, sizeof(a)) == 0);
        net_memo_free(mm);
    }
}

static void test_names(void)
{
    struct net_extras x;
    struct sd_diag d = {{0}};

    CHECK(net_extras_parse("v1", &x, &d) == 0 && x.n == 0);
    CHECK(net_extras_parse("v2", &x, &d) == 0 && x.n == NX &&
          x.id[0] == NET_X_ELEM_BYTES && x.id[1] == NET_X_LOOKUPS &&
          x.id[2] == NET_X_UNIQUE && x.id[3] == NET_X_UNIQUE_BYTES &&
          x.id[4] == NET_X_TABLE_BYTES);
    CHECK(net_extras_parse("log_dim,lookup_bytes", &x, &d) == 0 && x.n == 2 &&
          x.id[0] == NET_X_LOG_DIM && x.id[1] == NET_X_LOOKUP_BYTES);
    CHECK(net_extras_parse("v3", &x, &d) == 0 && x.n == 13 &&
          x.id[4] == NET_X_TABLE_BYTES && x.id[5] == NET_X_PHYS_TABLES &&
          x.id[12] == NET_X_PHYS_HALF_COLS && net_extras_have_prior(&x));
    CHECK(net_extras_parse("v4", &x, &d) == 0 && x.n == 14 &&
          x.id[12] == NET_X_PHYS_HALF_COLS &&
          x.id[13] == NET_X_PHYS_PAIR_TABLES && net_extras_have_prior(&x));
    CHECK(net_extras_parse("v5", &x, &d) == SD_EINVAL &&
          strstr(d.msg, "\"v5\"") != NULL &&
          strstr(d.msg, "phys_pair_tables") != NULL);
    CHECK(net_extras_parse("lookups,lookups", &x, &d) == SD_EINVAL &&
          strstr(d.msg, "repeats") != NULL);
    CHECK(net_extras_parse("lookups,", &x, &d) == SD_EINVAL);
    CHECK(net_extras_parse("", &x, &d) == SD_EINVAL);
    CHECK(strcmp(net_extra_name(NET_X_UNIQUE_BYTES), "unique_bytes") == 0 &&
          net_extra_name(0) == NULL && net_extra_name(NET_X_COUNT) == NULL);
}

/* Shards whose time is a law of their bytes, for training. */
static void make_samples(struct table *tb, struct train_sample *s, size_t n)
{
    struct rng g;
    size_t i;

    rng_seed(&g, 9);
    for (i = 0; i < n; i++) {
        double rows = floor(exp(log(100) + rng_uniform(&g) * log(1e7)));
        int32_t dim = 4 << rng_below(&g, 6);

        make_table(&tb[i], (int64_t)rows, dim, 1 + 30 * rng_uniform(&g),
                   rng_below(&g, 2) ? TABLE_DTYPE_FP16 : TABLE_DTYPE_FP32);
        s[i].tables = &tb[i];
        s[i].ntables = 1;
        s[i].ms = 0.01 + 1e-6 * tb[i].pooling_factor * dim *
                             (double)table_dtype_size(tb[i].dtype) *
                             (rows > 1e5 ? 3 : 1);
    }
}

static void test_train(void)
{
    enum { N = 200 };
    static struct table tb[N];
    static struct train_sample s[N];
    struct train_params p;
    struct cost_net *m = NULL, *again = NULL, *back = NULL;
    struct sd_diag d = {{0}};
    void *img;
    size_t len, i;
    int j;

    make_samples(tb, s, N);
    train_params_default(&p);
    p.max_epochs = 20;
    p.weight_decay = 0.3;
    CHECK(net_extras_parse("v2", &p.extras, &d) == 0);
    if (!CHECK_OK(net_train(&p, s, N, "cpu/test/4096", BATCH, &m, &d), d.msg))
        return;
    CHECK(m->x.n == NX && net_format_version(m) == 3);
    /* The derived inputs were z-scored on the training tables: the elem
     * bytes (2 and 4) have a mean between them. */
    CHECK(m->mean[NET_IN] > 2 && m->mean[NET_IN] < 4 && m->std[NET_IN] > 0.5);
    for (j = 0; j < NX; j++)
        CHECK(m->xw[j] != 0 && isfinite(m->xw[j]));
    /* Its metrics are its predictions' (what a file gives back). */
    CHECK(m->metrics.test_mape < 1 && m->metrics.test_mape > 0);
    CHECK(net_serialize(m, &img, &len) == 0);
    CHECK(net_parse(img, len, &back, &d) == 0);
    for (i = 0; back != NULL && i < N; i += 17)
        CHECK(net_tables_ms(back, &tb[i], 1) == net_tables_ms(m, &tb[i], 1));
    free(img);
    free(back);
    /* Deterministic for a seed, as without them. */
    CHECK_OK(net_train(&p, s, N, "cpu/test/4096", BATCH, &again, &d), d.msg);
    CHECK(again != NULL && memcmp(again->p, m->p, sizeof(m->p)) == 0 &&
          memcmp(again->xw, m->xw, sizeof(m->xw)) == 0);
    free(again);
    free(m);
    /* An unknown derived input is refused before training. */
    p.extras.id[1] = NET_X_COUNT;
    CHECK(net_train(&p, s, N, "cpu/test/4096", BATCH, &m, &d) == SD_EINVAL &&
          strstr(d.msg, "extras.id[1]") != NULL);
}

int main(void)
{
    test_inference_v2();
    test_format_v3();
    test_format_v3_refusals();
    test_v1_v2_unchanged();
    test_dtype();
    test_names();
    test_train();
    return tap_done();
}
