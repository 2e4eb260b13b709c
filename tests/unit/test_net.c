/* The neural compute model: inference against an independent float64
 * reference, the incremental head, the file format and its refusals, the
 * batch scaling of the cost-model adapter, the embedded model, and the
 * checksum of files written before it was zlib's. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "image_edit.h"
#include "planner.h"
#include "ref_net.h"

static void random_net(struct cost_net *m, uint64_t seed)
{
    struct rng g;
    int i;

    memset(m, 0, sizeof(*m));
    rng_seed(&g, seed);
    snprintf(m->profile, sizeof(m->profile), "cpu/test/4096");
    m->batch_size = 4096;
    for (i = 0; i < NET_IN; i++) {
        m->mean[i] = (float)rng_normal(&g);
        m->std[i] = (float)(1 + rng_uniform(&g));
    }
    for (i = 0; i < NET_NPARAMS; i++)
        m->p[i] = (float)(0.2 * rng_normal(&g));
    m->metrics.val_mape = 0.07;
    m->metrics.train_samples = 123;
}

static void make_table(struct table *t, int64_t rows, int32_t dim, double pf)
{
    int k;

    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "t%d", dim);
    t->rows = rows;
    t->dim = dim;
    t->pooling_factor = pf;
    for (k = 0; k < 5; k++)
        t->bins[k] = 0.2 - 0.03 * k;
}

static void test_inference(void)
{
    struct cost_net m;
    struct table t[3];
    int32_t cols[3] = {64, 16, 128};
    struct shard_item it[3];
    float z[NET_H2], lat[NET_LAT], proj[NET_H2];
    float x[NET_IN];
    int k, o;

    random_net(&m, 1);
    make_table(&t[0], 1000000, 64, 20);
    make_table(&t[1], 5000000, 32, 5);
    make_table(&t[2], 8000000, 128, 40);
    for (k = 0; k < 3; k++)
        it[k] = (struct shard_item){&t[k], cols[k]};

    /* Features: log transforms of pooling factor and rows, width as dim. */
    net_features(&t[1], 16, x);
    CHECK_NEAR(x[17], 16, 0);
    CHECK_NEAR(x[18], log1p(5.0), 1e-6);
    CHECK_NEAR(x[19], log(5e6), 1e-6);

    CHECK_NEAR(net_shard_ms(&m, it, 1), ref_net_ms(&m, t, cols, 1), 1e-4);
    CHECK_NEAR(net_shard_ms(&m, it, 3), ref_net_ms(&m, t, cols, 3), 1e-4);
    CHECK(net_shard_ms(&m, it, 0) == 0);
    CHECK(net_shard_ms(&m, it, 2) > 0);

    /* The incremental head gives the same cost as the whole shard. */
    net_head_init(&m, z);
    for (k = 0; k < 3; k++) {
        net_latent(&m, &t[k], cols[k], lat);
        net_project(&m, lat, proj);
        for (o = 0; o < NET_H2; o++)
            z[o] += proj[o];
    }
    CHECK_NEAR(net_head_z(&m, z), net_shard_ms(&m, it, 3), 1e-5);
}

static void test_format(void)
{
    struct cost_net m, *back = NULL;
    struct sd_diag d = {{0}};
    struct table t;
    struct shard_item it;
    unsigned char *buf;
    void *img;
    size_t len;
    char path[] = "/tmp/test_net_XXXXXX";
    int fd;
    float nan_bits;

    random_net(&m, 2);
    make_table(&t, 123456, 32, 7);
    it = (struct shard_item){&t, 32};
    CHECK(net_serialize(&m, &img, &len) == 0);
    buf = img;
    CHECK(memcmp(buf, "SDCN", 4) == 0);
    /* Format 1 holds a model of format 1's inputs and output: written as
     * 1, so a shardd that reads only format 1 still loads it. */
    CHECK(net_format_version(&m) == 1);
    CHECK(buf[4] == 1 && buf[5] == 0); /* little-endian */

    CHECK(net_parse(buf, len, &back, &d) == 0);
    if (back) {
        CHECK(strcmp(back->profile, m.profile) == 0);
        CHECK(back->batch_size == 4096);
        CHECK(memcmp(back->p, m.p, sizeof(m.p)) == 0);
        CHECK(back->metrics.val_mape == 0.07);
        CHECK(back->metrics.train_samples == 123);
        CHECK(net_shard_ms(back, &it, 1) == net_shard_ms(&m, &it, 1));
        free(back);
    }

    /* One flipped bit anywhere: the checksum refuses it. */
    buf[len / 2] ^= 0x10;
    CHECK(net_parse(buf, len, &back, &d) == SD_EFORMAT);
    CHECK(strstr(d.msg, "checksum") != NULL);
    buf[len / 2] ^= 0x10;
    CHECK(net_parse(buf, len - 1, &back, &d) == SD_EFORMAT);
    CHECK(strstr(d.msg, "truncated") != NULL);
    CHECK(net_parse("GARBAGE!", 8, &back, &d) == SD_EFORMAT);
    CHECK(strstr(d.msg, "not a shardd cost model") != NULL);
    buf[4] = NET_FORMAT_VERSION + 1;
    CHECK(net_parse(buf, len, &back, &d) == SD_ENEWER);
    CHECK(strstr(d.msg, "newer") != NULL);
    free(img);

    /* A checksum over NaN weights proves nothing: refused. */
    memcpy(&nan_bits, &(uint32_t){0x7FC00000u}, sizeof(nan_bits));
    m.p[17] = nan_bits;
    CHECK(net_serialize(&m, &img, &len) == 0);
    CHECK(net_parse(img, len, &back, &d) == SD_EFORMAT);
    CHECK(strstr(d.msg, "weight 17 is not finite") != NULL);
    free(img);

    /* Files: written atomically, read back, damaged or missing refused. */
    random_net(&m, 3);
    fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK(net_write_file(path, &m, &d) == 0);
    back = NULL;
    CHECK(net_read_file(path, &back, &d) == 0);
    CHECK(back && memcmp(back->p, m.p, sizeof(m.p)) == 0);
    free(back);
    CHECK(truncate(path, 100) == 0);
    CHECK(net_read_file(path, &back, &d) == SD_EFORMAT);
    CHECK(strstr(d.msg, path) != NULL);
    unlink(path);
    CHECK(net_read_file(path, &back, &d) == SD_ENOENT);

    CHECK(net_check_profile(&m, "cpu/test/4096", &d) == 0);
    CHECK(net_check_profile(&m, "cuda/H100/65536", &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "cpu/test/4096") && strstr(d.msg, "cuda/H100/65536"));
}

static void test_adapter_and_embedded(void)
{
    struct cost_net m;
    struct net_cost_model ncm;
    struct topology topo;
    struct table t;
    struct shard_item it;
    const struct cost_net *e, *h;
    struct sd_diag d = {{0}};

    random_net(&m, 4);
    make_table(&t, 1000, 16, 3);
    it = (struct shard_item){&t, 16};
    net_cost_model_init(&ncm, &m);
    CHECK(strcmp(ncm.cm.name, "neural:cpu/test/4096") == 0);
    topology_default(&topo, 2, 1ull << 30);
    topo.batch_size = 4096;
    CHECK_NEAR(ncm.cm.shard_ms(ncm.cm.ctx, &topo, &it, 1),
               net_shard_ms(&m, &it, 1), 1e-12);
    /* Sixteen times the batch: sixteen times the lookups and the time. */
    topo.batch_size = 65536;
    CHECK_NEAR(ncm.cm.shard_ms(ncm.cm.ctx, &topo, &it, 1),
               16 * net_shard_ms(&m, &it, 1), 1e-12);

    e = net_embedded(&d);
    CHECK(e != NULL);
    if (e) {
        CHECK(strncmp(e->profile, "cpu/", 4) == 0);
        CHECK(e->batch_size >= 1);
        CHECK(e->metrics.train_samples > 0);
        CHECK(net_embedded(&d) == e); /* parsed once, shared */
        /* The models compiled in for one profile: each by its name only. */
        CHECK(net_compiled(NET_REFERENCE_PROFILE, &d) == net_reference(&d));
        CHECK(net_compiled(e->profile, &d) == NULL);
        CHECK(net_compiled("cuda/NVIDIA H100 80GB HBM3/4096", &d) == NULL);
        CHECK(net_compiled(NULL, &d) == NULL);
        /* A wider table costs more on any sane model: the cpu default and
         * the H200's (trained on the GPU's samples, docs/gpu.md). */
        h = net_compiled(NET_H200_PROFILE, &d);
        CHECK(h != NULL && strcmp(h->profile, NET_H200_PROFILE) == 0);
        CHECK(h != NULL && h->batch_size == 4096);
        CHECK(h != NULL && h->metrics.train_samples > 10000);
        make_table(&t, 1000000, 128, 20);
        it = (struct shard_item){&t, 128};
        {
            struct shard_item narrow = {&t, 8};

            CHECK(net_shard_ms(e, &it, 1) > net_shard_ms(e, &narrow, 1));
            CHECK(h != NULL &&
                  net_shard_ms(h, &it, 1) > net_shard_ms(h, &narrow, 1));
        }
    } else {
        fprintf(stderr, "embedded: %s\n", d.msg);
    }
}

/* Four threads asking a small memo for the same 40 keys at once. */
struct memo_race {
    const struct cost_net *m;
    struct net_memo *mm;
    const struct table *t;
    int bad;
};

static void *memo_worker(void *arg)
{
    struct memo_race *r = arg;
    int i, o;

    for (i = 0; i < 2000; i++) {
        const struct table *t = &r->t[i % 40];
        float got[NET_H2], want[NET_H2], lat[NET_LAT];

        net_projected(r->m, r->mm, t, t->dim, got);
        net_latent(r->m, t, t->dim, lat);
        net_project(r->m, lat, want);
        for (o = 0; o < NET_H2; o++)
            r->bad += got[o] != want[o];
    }
    return NULL;
}

/*
 * The memo of projected latents answers exactly what computing does, counts
 * its hits and misses, keeps no more than it was made for, answers another
 * model by computing (storing nothing), and holds under threads.
 */
static void test_memo(void)
{
    struct cost_net m, other;
    struct net_memo *mm;
    struct net_memo_stats st;
    struct table t[40];
    struct memo_race r[4];
    pthread_t th[4];
    float a[NET_H2], b[NET_H2], lat[NET_LAT];
    int i, bad = 0;

    random_net(&m, 5);
    random_net(&other, 6);
    CHECK(net_memo_new(&m, 0) == NULL);
    CHECK(net_memo_new(NULL, 8) == NULL);
    mm = net_memo_new(&m, 8);
    CHECK(mm != NULL);
    if (!mm)
        return;
    for (i = 0; i < 40; i++)
        make_table(&t[i], 1000 + 37 * i, 4 * (1 + i % 8), 1 + i);
    net_memo_stats(mm, &st);
    CHECK(st.capacity == 8 && st.entries == 0 && st.hits == 0);

    net_projected(&m, mm, &t[0], 16, a); /* a miss, stored */
    net_projected(&m, mm, &t[0], 16, b); /* a hit */
    CHECK(memcmp(a, b, sizeof(a)) == 0);
    net_latent(&m, &t[0], 16, lat);
    net_project(&m, lat, b);
    CHECK(memcmp(a, b, sizeof(a)) == 0);
    net_projected(&m, mm, &t[0], 8, b); /* another width: a miss */
    CHECK(memcmp(a, b, sizeof(a)) != 0);
    net_memo_stats(mm, &st);
    CHECK(st.hits == 1 && st.misses == 2 && st.entries == 2);

    /* Another model's question is computed with that model, not stored. */
    net_projected(&other, mm, &t[0], 16, b);
    net_latent(&other, &t[0], 16, lat);
    net_project(&other, lat, a);
    CHECK(memcmp(a, b, sizeof(a)) == 0);
    net_memo_stats(mm, &st);
    CHECK(st.hits == 1 && st.misses == 2 && st.entries == 2);

    /* The key is the table's exact values: tables whose features agree as
     * floats (rows 2^24 and 2^24 + 1, pooling factors one ulp apart), asked
     * in turn, each get what computing gives them. */
    {
        struct net_memo *m2 = net_memo_new(&m, 64);
        struct table u[4];
        int k, round;

        for (k = 0; k < 4; k++)
            u[k] = t[1];
        u[0].rows = 16777216;
        u[1].rows = 16777217;
        u[2].pooling_factor = 3.0;
        u[3].pooling_factor = nextafter(3.0, 4.0);
        for (round = 0; m2 != NULL && round < 2; round++)
            for (k = 0; k < 4; k++) {
                net_projected(&m, m2, &u[k], u[k].dim, a);
                net_latent(&m, &u[k], u[k].dim, lat);
                net_project(&m, lat, b);
                CHECK(memcmp(a, b, sizeof(a)) == 0);
            }
        net_memo_stats(m2, &st);
        CHECK(m2 != NULL && st.misses == 4 && st.hits == 4);
        net_memo_free(m2);
    }

    /* Forty keys through eight entries: it stays bounded. */
    for (i = 0; i < 40; i++)
        net_projected(&m, mm, &t[i], t[i].dim, a);
    net_memo_stats(mm, &st);
    CHECK(st.entries <= 8);

    for (i = 0; i < 4; i++) {
        r[i] = (struct memo_race){&m, mm, t, 0};
        CHECK(pthread_create(&th[i], NULL, memo_worker, &r[i]) == 0);
    }
    for (i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        bad += r[i].bad;
    }
    CHECK(bad == 0);
    net_memo_stats(mm, &st);
    CHECK(st.hits > 0 && st.entries <= 8);
    net_memo_free(mm);
    net_memo_free(NULL);
}

/*
 * The checksum is zlib's CRC-32 since it replaced a hand-written one, and
 * files written before still load.  0x57df7fff is what the hand-written
 * function (a 256-entry table, IEEE polynomial, reflected) gave for the
 * image of the model below, computed with it before it was deleted; it is
 * also Python's zlib.crc32() of the image's first 36,360 bytes.
 */
static void test_checksum(void)
{
    static struct cost_net m, *back;
    struct sd_diag d = {{0}};
    unsigned char *img, *file = NULL;
    uint32_t stored;
    size_t len, flen = 0;
    void *buf;
    FILE *f;
    int i;

    memset(&m, 0, sizeof(m));
    snprintf(m.profile, sizeof(m.profile), "cpu/crc-test/1");
    m.batch_size = 1;
    for (i = 0; i < NET_IN; i++)
        m.std[i] = 1.0f;
    for (i = 0; i < NET_NPARAMS; i++)
        m.p[i] = (float)(i % 64) / 64.0f; /* exact in binary */
    CHECK(net_serialize(&m, &buf, &len) == 0);
    img = buf;
    CHECK(len > 4);
    stored = (uint32_t)img[len - 4] | (uint32_t)img[len - 3] << 8 |
             (uint32_t)img[len - 2] << 16 | (uint32_t)img[len - 1] << 24;
    CHECK(stored == 0x57df7fffu);
    free(buf);

    /* The committed default model, a file written by the old code. */
    CHECK(net_read_file(SD_DEFAULT_MODEL_FILE, &back, &d) == 0);
    if (back == NULL) {
        fprintf(stderr, "%s: %s\n", SD_DEFAULT_MODEL_FILE, d.msg);
        return;
    }
    f = fopen(SD_DEFAULT_MODEL_FILE, "rb");
    CHECK(f != NULL);
    if (f != NULL) {
        file = malloc(1 << 20);
        flen = file != NULL ? fread(file, 1, 1 << 20, f) : 0;
        fclose(f);
    }
    /* Written again, it is the same file, checksum included. */
    CHECK(net_serialize(back, &buf, &len) == 0);
    CHECK(len == flen && file != NULL && memcmp(buf, file, len) == 0);
    free(buf);
    free(file);
    free(back);
}


/* ------------------------------------------------------------------------ */
/* Format 2                                                                  */

/* Offsets in a format-2 image (docs/model-format.md). */
#define V2_TRANSFORM  (28 + NET_PROFILE_MAX + 8 + 64)
#define V2_ACTIVATION (V2_TRANSFORM + NET_IN)
#define V2_EPS        (V2_ACTIVATION + 4)
#define V2_NOTICE     (V2_EPS + 4 + 2 * NET_IN * 4 + NET_NPARAMS * 4)


/* A comm net of N = 2 devices with seeded weights. */
static void small_comm(struct comm_net *c, float *p, enum comm_dir dir,
                       uint64_t seed)
{
    struct rng g;
    size_t i;

    memset(c, 0, sizeof(*c));
    rng_seed(&g, seed);
    c->dir = (int32_t)dir;
    c->ndevices = 2;
    c->nlayers = 3;
    c->sizes[0] = dir == COMM_FWD ? 4 : 2;
    c->sizes[1] = 8;
    c->sizes[2] = 5;
    c->sizes[3] = 2;
    c->activation = NET_ACT_SOFTPLUS;
    c->eps = 1e-6f;
    c->nparams = comm_net_nparams(c->nlayers, c->sizes);
    for (i = 0; i < (size_t)c->sizes[0]; i++) {
        c->mean[i] = (float)(10 * rng_uniform(&g));
        c->std[i] = (float)(1 + rng_uniform(&g));
    }
    for (i = 0; i < c->nparams; i++)
        p[i] = (float)(0.3 * rng_normal(&g));
    c->metrics.val_mape = 0.05;
}

/* A set that only format 2 holds: custom inputs and output, a notice, a
 * forward and a backward comm net.  free() it. */
static struct cost_net *v2_set(void)
{
    struct cost_net *m = net_alloc();
    struct comm_net c;
    float p[512];
    struct sd_diag d;

    if (m == NULL)
        return NULL;
    random_net(m, 9);
    m->io.custom = true;
    m->io.transform[0] = NET_TF_LOG1P;
    m->io.transform[17] = NET_TF_LOG;
    m->io.transform[19] = NET_TF_LOG;
    m->io.activation = NET_ACT_NONE;
    m->io.eps = 0;
    snprintf(m->notice, sizeof(m->notice),
             "test notice, MIT."); /* 17 bytes: padded */
    small_comm(&c, p, COMM_FWD, 1);
    CHECK(net_add_comm(&m, &c, p, &d) == 0);
    small_comm(&c, p, COMM_BWD, 2);
    CHECK(net_add_comm(&m, &c, p, &d) == 0);
    /* One direction and device count once. */
    CHECK(net_add_comm(&m, &c, p, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "already") != NULL);
    return m;
}

/* Every field of a format-2 set survives the round trip; the image is
 * written again byte for byte. */
static void test_format_v2(void)
{
    struct cost_net *m = v2_set(), *back = NULL;
    struct sd_diag d = {{0}};
    struct table t[2];
    struct shard_item it[2];
    double in[4] = {100, 300, 2, 0}, a[2], b[2];
    void *img, *img2;
    unsigned char *buf;
    size_t len, len2;
    int k;

    CHECK(m != NULL);
    if (m == NULL)
        return;
    make_table(&t[0], 123456, 32, 7);
    make_table(&t[1], 99, 8, 0.5);
    it[0] = (struct shard_item){&t[0], 32};
    it[1] = (struct shard_item){&t[1], 8};
    CHECK(net_format_version(m) == 2);
    CHECK(net_serialize(m, &img, &len) == 0);
    buf = img;
    CHECK(buf[4] == 2 && buf[V2_TRANSFORM] == NET_TF_LOG1P &&
          buf[V2_TRANSFORM + 19] == NET_TF_LOG);
    CHECK(net_parse(img, len, &back, &d) == 0);
    if (back == NULL) {
        fprintf(stderr, "v2: %s\n", d.msg);
        free(img);
        free(m);
        return;
    }
    CHECK(back->io.custom && back->io.activation == NET_ACT_NONE &&
          back->io.eps == 0);
    CHECK(memcmp(back->io.transform, m->io.transform, NET_IN) == 0);
    CHECK(strcmp(back->notice, m->notice) == 0);
    CHECK(back->ncomm == 2 && back->ncomm_p == m->ncomm_p);
    CHECK(memcmp(back->comm_p, m->comm_p, m->ncomm_p * sizeof(float)) == 0);
    CHECK(net_shard_ms(back, it, 2) == net_shard_ms(m, it, 2));
    for (k = 0; k < 2; k++) {
        comm_net_run(m, &m->comm[k], in, a);
        comm_net_run(back, &back->comm[k], in, b);
        CHECK(a[0] == b[0] && a[1] == b[1] && a[0] > 0);
        CHECK(back->comm[k].eps == m->comm[k].eps &&
              back->comm[k].metrics.val_mape == 0.05);
    }
    CHECK(net_comm_find(back, COMM_BWD, 2) == &back->comm[1]);
    CHECK(net_comm_find(back, COMM_BWD, 4) == NULL);
    CHECK(net_serialize(back, &img2, &len2) == 0);
    CHECK(len2 == len && memcmp(img, img2, len) == 0);
    free(img2);
    free(back);
    free(img);
    free(m);
}


static void test_format_v2_refusals(void)
{
    struct cost_net *m = v2_set(), *back = NULL;
    struct sd_diag d = {{0}};
    unsigned char *buf;
    size_t len, nl, comm0;
    void *img;
    float inf = INFINITY;
    uint32_t inf_bits;

    if (m == NULL || net_serialize(m, &img, &len) != 0) {
        CHECK(0);
        free(m);
        return;
    }
    buf = img;
    nl = strlen(m->notice);
    comm0 = V2_NOTICE + 4 + (nl + 3) / 4 * 4 + 4; /* after the count */
    memcpy(&inf_bits, &inf, 4);
    refuse_edit(buf, len, 24, 3, 4, "flags");
    refuse_edit(buf, len, V2_TRANSFORM + 5, 7, 1, "transform[5]");
    refuse_edit(buf, len, V2_ACTIVATION, 2, 4, "activation");
    refuse_edit(buf, len, V2_EPS, inf_bits, 4, "eps");
    refuse_edit(buf, len, V2_NOTICE, NET_NOTICE_MAX, 4, "notice");
    refuse_edit(buf, len, V2_NOTICE + 4 + 2, 0, 1, "NUL");
    refuse_edit(buf, len, V2_NOTICE + 4 + nl, 'x', 1, "padding");
    refuse_edit(buf, len, comm0 - 4, 5, 4, "comm models, at most");
    refuse_edit(buf, len, comm0, 2, 4, "comm[0].dir");
    refuse_edit(buf, len, comm0 + 4, 1, 4, "comm[0].ndevices");
    refuse_edit(buf, len, comm0 + 8, 0, 4, "comm[0].nlayers");
    refuse_edit(buf, len, comm0 + 12, 6, 4, "comm[0].sizes");
    refuse_edit(buf, len, comm0 + 16, 0, 4, "comm[0].sizes[1]");
    refuse_edit(buf, len, comm0 + 12 + 16, 3, 4, "comm[0].activation");
    refuse_edit(buf, len, comm0 + 12 + 20, inf_bits, 4, "comm[0].eps");
    /* The backward net made forward: two forward nets of 2 devices. */
    refuse_edit(buf, len,
                comm0 + 12 + 24 + 64 + 2 * 4 * 4 + 4 * m->comm[0].nparams, 0, 4,
                "comm[1].sizes");
    /* A non-finite comm weight, far into the image. */
    refuse_edit(buf, len, len - 4 - 4 * m->comm[1].nparams + 8, inf_bits, 4,
                "comm[1] weight 2");
    /* Bytes after the last net, and a cut inside one. */
    {
        unsigned char *big = malloc(len + 4);

        if (big) {
            memcpy(big, buf, len - 4);
            memset(big + len - 4, 0, 4);
            recrc(big, len + 4);
            CHECK(net_parse(big, len + 4, &back, &d) == SD_EFORMAT);
            CHECK(strstr(d.msg, "after the last comm model") != NULL);
            memcpy(big, buf, len - 100);
            recrc(big, len - 96);
            CHECK(net_parse(big, len - 96, &back, &d) == SD_EFORMAT);
            CHECK(strstr(d.msg, "truncated") != NULL);
            free(big);
        }
    }
    free(img);
    free(m);
}

/*
 * Format 1 is unchanged: a model without custom inputs gets exactly the
 * float expressions of format 1 (written out here as they were), and the
 * same model with format 1's choice written as custom inputs predicts the
 * same bits and is written as format 1.
 */
static void test_format1_unchanged(void)
{
    struct cost_net m, c;
    struct table t[3];
    struct shard_item it[3];
    float x[NET_IN], want[NET_IN];
    void *a, *b;
    size_t la, lb;
    int i, k;

    random_net(&m, 11);
    make_table(&t[0], 1000000, 64, 20);
    make_table(&t[1], 5000000, 32, 5);
    make_table(&t[2], 7, 128, 0);
    for (k = 0; k < 3; k++) {
        it[k] = (struct shard_item){&t[k], t[k].dim / (k + 1)};
        table_features(&t[k], it[k].cols, want);
        want[18] = (float)log1p(t[k].pooling_factor);
        want[19] = (float)log((double)t[k].rows);
        for (i = 0; i < NET_IN; i++)
            want[i] = (want[i] - m.mean[i]) / (m.std[i] + 1e-6f);
        net_input(&m, &t[k], it[k].cols, x);
        CHECK(memcmp(x, want, sizeof(x)) == 0);
    }
    c = m;
    net_io_format1(&c.io);
    CHECK(c.io.custom && net_format_version(&c) == 1);
    for (k = 1; k <= 3; k++)
        CHECK(net_shard_ms(&c, it, (size_t)k) ==
              net_shard_ms(&m, it, (size_t)k));
    CHECK(net_serialize(&m, &a, &la) == 0);
    CHECK(net_serialize(&c, &b, &lb) == 0);
    CHECK(la == lb && memcmp(a, b, la) == 0);
    free(a);
    free(b);
    /* One step away from format 1 (no activation) needs format 2. */
    c.io.activation = NET_ACT_NONE;
    CHECK(net_format_version(&c) == 2);
}

/*
 * The local search's trial head (net_head_delta()) is, bit for bit, the
 * head of z with the pieces added and taken away column by column in its
 * order, and agrees with placing them one by one (net_head_step()): a
 * trial that differed in the last bit from the move it stands for could
 * take a step the search then finds no better.  Every NULL pattern of the
 * four terms, on random z and projections with some columns near 0 (the
 * ReLU's edge).
 */
static void test_head_delta(void)
{
    struct cost_net m;
    struct rng g;
    float z[NET_H2], p[4][NET_H2], t[NET_H2], step[NET_H2];
    int mask, o, q;

    random_net(&m, 7);
    rng_seed(&g, 8);
    for (o = 0; o < NET_H2; o++) {
        z[o] = (float)rng_normal(&g);
        for (q = 0; q < 4; q++)
            p[q][o] = o % 5 == 0 ? 0 : (float)(0.5 * rng_normal(&g));
    }
    for (mask = 0; mask < 16; mask++) {
        const float *add[2], *sub[2];
        double want, got;

        for (q = 0; q < 2; q++) {
            add[q] = mask >> q & 1 ? p[q] : NULL;
            sub[q] = mask >> (q + 2) & 1 ? p[q + 2] : NULL;
        }
        for (o = 0; o < NET_H2; o++) {
            t[o] = z[o];
            for (q = 0; q < 2; q++)
                if (add[q] != NULL)
                    t[o] += add[q][o];
            for (q = 0; q < 2; q++)
                if (sub[q] != NULL)
                    t[o] -= sub[q][o];
        }
        want = net_head_raw(&m, t);
        got = net_head_delta(&m, z, add, sub);
        CHECK(got == want);
        /* The same as stepping z through the terms in that order. */
        memcpy(step, z, sizeof(step));
        want = net_head_raw(&m, step);
        for (q = 0; q < 2; q++)
            if (add[q] != NULL)
                want = net_head_step(&m, step, add[q], +1);
        for (q = 0; q < 2; q++)
            if (sub[q] != NULL)
                want = net_head_step(&m, step, sub[q], -1);
        CHECK(got == want);
    }
}

int main(void)
{
    test_inference();
    test_head_delta();
    test_format();
    test_format_v2();
    test_format_v2_refusals();
    test_format1_unchanged();
    test_adapter_and_embedded();
    test_memo();
    test_checksum();
    return tap_done();
}
