/*
 * The cpu backend against a naive reference written here: pooled outputs
 * and the weights after one exact-SGD step, on small shards with empty
 * bags and duplicate indices; shard validation; timing; backend selection.
 * Randomised: prints its seed, and `-s SEED` replays one.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels.h"

#define NTABLES 3
#define NBAGS   64

static uint64_t rng_state;

static uint64_t next(void)
{
    uint64_t z = (rng_state += UINT64_C(0x9e3779b97f4a7c15));

    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static int64_t below(int64_t n)
{
    return (int64_t)(next() % (uint64_t)n);
}

/* A shard's tables with their lookups, owned by the test. */
struct fixture {
    struct kern_table_desc tables[NTABLES];
    int64_t *offsets[NTABLES];
    int64_t *indices[NTABLES];
    struct kern_shard_desc desc;
    int32_t width;
};

/*
 * Random lookups: bag lengths 0..12 (about one bag in six empty), indices
 * from a few hot rows half the time so duplicates occur within and across
 * bags.
 */
static void fixture_init(struct fixture *f, uint64_t seed)
{
    static const int32_t dims[NTABLES] = {4, 8, 16};
    int64_t b, i, len, rows;
    int t;

    memset(f, 0, sizeof(*f));
    for (t = 0; t < NTABLES; t++) {
        rows = 50 + below(151);
        f->offsets[t] = calloc(NBAGS + 1, sizeof(int64_t));
        f->indices[t] = calloc(NBAGS * 12 + 1, sizeof(int64_t));
        for (b = 0; b < NBAGS; b++) {
            len = below(6) == 0 ? 0 : below(13);
            for (i = 0; i < len; i++)
                f->indices[t][f->offsets[t][b] + i] =
                    below(2) ? below(4) : below(rows);
            f->offsets[t][b + 1] = f->offsets[t][b] + len;
        }
        f->tables[t].rows = rows;
        f->tables[t].dim = dims[t];
        f->tables[t].nindices = f->offsets[t][NBAGS];
        f->tables[t].offsets = f->offsets[t];
        f->tables[t].indices = f->indices[t];
        f->width += dims[t];
    }
    f->desc.ntables = NTABLES;
    f->desc.tables = f->tables;
    f->desc.nbags = NBAGS;
    f->desc.learning_rate = 0.05f;
    f->desc.seed = seed;
}

static void fixture_free(struct fixture *f)
{
    int t;

    for (t = 0; t < NTABLES; t++) {
        free(f->offsets[t]);
        free(f->indices[t]);
    }
}

/* The reference: pooled sums and per-lookup SGD, straight from the
 * definitions, on weights w[t] read back from the backend. */
static void reference_step(const struct fixture *f, float **w, float *pooled,
                           const float *grad)
{
    const struct kern_table_desc *tb;
    int64_t b, i, row;
    int32_t c, col = 0;
    int t;

    for (t = 0; t < NTABLES; t++) {
        tb = &f->tables[t];
        for (b = 0; b < NBAGS; b++) {
            for (c = 0; c < tb->dim; c++) {
                float sum = 0.0f;

                for (i = tb->offsets[b]; i < tb->offsets[b + 1]; i++)
                    sum += w[t][tb->indices[i] * tb->dim + c];
                pooled[b * f->width + col + c] = sum;
            }
        }
        for (b = 0; b < NBAGS; b++) {
            for (i = tb->offsets[b]; i < tb->offsets[b + 1]; i++) {
                row = tb->indices[i];
                for (c = 0; c < tb->dim; c++)
                    w[t][row * tb->dim + c] -=
                        f->desc.learning_rate * grad[b * f->width + col + c];
            }
        }
        col += tb->dim;
    }
}

static void test_step_matches_reference(const struct kern_backend *be,
                                        uint64_t seed)
{
    struct fixture f;
    struct kern_shard *s = NULL;
    struct sd_diag d = {{0}};
    float *w[NTABLES], *got, *pooled, *want, *grad;
    int64_t n, e, bad = 0;
    int t, rv;

    fixture_init(&f, seed);
    rv = be->shard_open(0, &f.desc, &s, &d);
    CHECK(rv == 0);
    if (rv != 0) {
        fprintf(stderr, "shard_open: %s\n", d.msg);
        fixture_free(&f);
        return;
    }
    pooled = calloc(NBAGS * (size_t)f.width, sizeof(float));
    want = calloc(NBAGS * (size_t)f.width, sizeof(float));
    grad = calloc(NBAGS * (size_t)f.width, sizeof(float));
    for (e = 0; e < (int64_t)NBAGS * f.width; e++)
        grad[e] = (float)(below(2001) - 1000) / 1000.0f;
    for (t = 0; t < NTABLES; t++) {
        n = f.tables[t].rows * f.tables[t].dim;
        w[t] = calloc((size_t)n, sizeof(float));
        CHECK(be->shard_read_weights(s, (size_t)t, w[t]) == 0);
        for (e = 0; e < n; e++)
            bad += !(w[t][e] >= -0.01f && w[t][e] < 0.01f);
    }
    CHECK(bad == 0);
    CHECK(w[0][0] != w[0][1]); /* seeded, not constant */

    reference_step(&f, w, want, grad);
    CHECK(be->shard_step(s, pooled, grad) == 0);
    for (e = 0; e < (int64_t)NBAGS * f.width; e++)
        CHECK_NEAR(pooled[e], want[e], 1e-6);
    for (t = 0; t < NTABLES; t++) {
        n = f.tables[t].rows * f.tables[t].dim;
        got = calloc((size_t)n, sizeof(float));
        CHECK(be->shard_read_weights(s, (size_t)t, got) == 0);
        for (e = 0; e < n; e++)
            CHECK_NEAR(got[e], w[t][e], 1e-5);
        free(got);
    }
    /* A second step with pooled NULL and the fixed gradient runs too. */
    CHECK(be->shard_step(s, NULL, NULL) == 0);
    CHECK(be->shard_read_weights(s, NTABLES, pooled) == SD_EINVAL);

    for (t = 0; t < NTABLES; t++)
        free(w[t]);
    free(pooled);
    free(want);
    free(grad);
    be->shard_close(s);
    fixture_free(&f);
}

/* Same seed, same weights; another seed, other weights. */
static void test_seeding(const struct kern_backend *be, uint64_t seed)
{
    struct fixture f;
    struct kern_shard *a = NULL, *b = NULL;
    float *wa, *wb;
    size_t n;

    fixture_init(&f, seed);
    n = (size_t)(f.tables[1].rows * f.tables[1].dim);
    wa = calloc(n, sizeof(float));
    wb = calloc(n, sizeof(float));
    CHECK(be->shard_open(0, &f.desc, &a, NULL) == 0);
    CHECK(be->shard_open(0, &f.desc, &b, NULL) == 0);
    if (a != NULL && b != NULL) {
        be->shard_read_weights(a, 1, wa);
        be->shard_read_weights(b, 1, wb);
        CHECK(memcmp(wa, wb, n * sizeof(float)) == 0);
        be->shard_close(b);
        b = NULL;
        f.desc.seed = seed + 1;
        CHECK(be->shard_open(0, &f.desc, &b, NULL) == 0);
        be->shard_read_weights(b, 1, wb);
        CHECK(memcmp(wa, wb, n * sizeof(float)) != 0);
    }
    be->shard_close(a);
    be->shard_close(b);
    free(wa);
    free(wb);
    fixture_free(&f);
}

/* Expects shard_open to fail with `want` and a diagnostic. */
static void expect_open_fails(const struct kern_backend *be, int32_t device,
                              const struct kern_shard_desc *desc, int want)
{
    struct kern_shard *s = NULL;
    struct sd_diag d = {{0}};
    int rv = be->shard_open(device, desc, &s, &d);

    CHECK(rv == want);
    CHECK(s == NULL);
    CHECK(d.msg[0] != '\0');
    if (rv == 0)
        be->shard_close(s);
}

static void test_bad_descriptions(const struct kern_backend *be, uint64_t seed)
{
    struct fixture f;
    int64_t saved;

    fixture_init(&f, seed);
    f.tables[1].rows = 0;
    expect_open_fails(be, 0, &f.desc, SD_EINVAL);
    fixture_free(&f);

    fixture_init(&f, seed);
    f.tables[2].dim = 6;
    expect_open_fails(be, 0, &f.desc, SD_EINVAL);
    f.tables[2].dim = 0;
    expect_open_fails(be, 0, &f.desc, SD_EINVAL);
    f.tables[2].dim = 16;
    f.desc.nbags = 0;
    expect_open_fails(be, 0, &f.desc, SD_EINVAL);
    f.desc.nbags = NBAGS;
    f.desc.ntables = 0;
    expect_open_fails(be, 0, &f.desc, SD_EINVAL);
    f.desc.ntables = NTABLES;
    expect_open_fails(be, -1, &f.desc, SD_EINVAL);
    expect_open_fails(be, be->device_count(), &f.desc, SD_EINVAL);
    fixture_free(&f);

    /* Lookups: an index out of range, decreasing offsets. */
    fixture_init(&f, seed);
    if (f.tables[0].nindices > 0) {
        saved = f.indices[0][0];
        f.indices[0][0] = f.tables[0].rows;
        expect_open_fails(be, 0, &f.desc, SD_EINVAL);
        f.indices[0][0] = -1;
        expect_open_fails(be, 0, &f.desc, SD_EINVAL);
        f.indices[0][0] = saved;
    }
    saved = f.offsets[1][NBAGS / 2];
    f.offsets[1][NBAGS / 2] = f.offsets[1][NBAGS] + 1;
    expect_open_fails(be, 0, &f.desc, SD_EINVAL);
    f.offsets[1][NBAGS / 2] = saved;

    /* Far more memory than a core has: refused before allocating. */
    f.tables[0].rows = INT64_C(1) << 40;
    expect_open_fails(be, 0, &f.desc, SD_ENOMEM);
    fixture_free(&f);
}

static void test_time(const struct kern_backend *be, uint64_t seed)
{
    struct fixture f;
    struct kern_shard *s = NULL;
    struct kern_timing_opts o;
    struct kern_timing tm;

    fixture_init(&f, seed);
    CHECK(be->shard_open(be->device_count() - 1, &f.desc, &s, NULL) == 0);
    if (s == NULL) {
        fixture_free(&f);
        return;
    }
    kern_timing_opts_default(&o);
    CHECK(o.warmup == 5 && o.repeats == 10 && o.flush);
    o.flush = false;
    o.repeats = 7;
    memset(&tm, 0, sizeof(tm));
    CHECK(be->shard_time(s, &o, &tm) == 0);
    CHECK(tm.repeats == 7);
    CHECK(tm.median_ms > 0.0);
    CHECK(tm.min_ms <= tm.p10_ms && tm.p10_ms <= tm.median_ms);
    CHECK(tm.median_ms <= tm.p90_ms && tm.p90_ms <= tm.max_ms);

    /* With the cache flush (a buffer of twice the LLC, made once). */
    o.flush = true;
    o.warmup = 1;
    o.repeats = 3;
    CHECK(be->shard_time(s, &o, &tm) == 0);
    CHECK(tm.repeats == 3 && tm.median_ms > 0.0);
    CHECK(tm.min_ms <= tm.median_ms && tm.median_ms <= tm.max_ms);

    o.repeats = 0;
    CHECK(be->shard_time(s, &o, &tm) == SD_EINVAL);
    be->shard_close(s);
    fixture_free(&f);
}

static void test_summarize(void)
{
    double one[] = {4.0};
    double five[] = {5.0, 1.0, 4.0, 2.0, 3.0};
    double ten[] = {10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
    struct kern_timing tm;

    kern_timing_summarize(one, 1, &tm);
    CHECK(tm.median_ms == 4.0 && tm.min_ms == 4.0 && tm.max_ms == 4.0);
    CHECK(tm.p10_ms == 4.0 && tm.p90_ms == 4.0 && tm.repeats == 1);

    kern_timing_summarize(five, 5, &tm);
    CHECK(tm.median_ms == 3.0 && tm.min_ms == 1.0 && tm.max_ms == 5.0);
    CHECK_NEAR(tm.p10_ms, 1.4, 1e-12); /* 1 + 0.4 * (2 - 1) */
    CHECK_NEAR(tm.p90_ms, 4.6, 1e-12);
    CHECK(five[0] == 1.0 && five[4] == 5.0); /* sorted in place */

    kern_timing_summarize(ten, 10, &tm);
    CHECK_NEAR(tm.median_ms, 5.5, 1e-12);
    CHECK_NEAR(tm.p10_ms, 1.9, 1e-12);
    CHECK_NEAR(tm.p90_ms, 9.1, 1e-12);
    CHECK(tm.repeats == 10);
}

static void test_select(void)
{
    const struct kern_backend *be;
    struct kern_device_info info;
    struct sd_diag d = {{0}};

    /* The probe is cached, but SHARDD_BACKEND is read on every "auto". */
    setenv("SHARDD_BACKEND", "cpu", 1);
    be = kern_backend_get(NULL, &d);
    CHECK(be == &kern_backend_cpu);
    be = kern_backend_get("auto", &d);
    CHECK(be == &kern_backend_cpu);

    setenv("SHARDD_BACKEND", "nope", 1);
    d.msg[0] = '\0';
    CHECK(kern_backend_get(NULL, &d) == NULL);
    CHECK(strstr(d.msg, "SHARDD_BACKEND") != NULL);
    CHECK(kern_backend_get("cpu", &d) == &kern_backend_cpu); /* named */
    unsetenv("SHARDD_BACKEND");

    d.msg[0] = '\0';
    CHECK(kern_backend_get("nope", &d) == NULL);
    CHECK(strstr(d.msg, "nope") != NULL);

    be = kern_backend_get(NULL, &d);
    CHECK(be != NULL);
    if (be != NULL)
        CHECK(be->device_count() >= 1);

    /* cuda: when not built, or no GPU answers, NULL with a reason; never a
     * crash or a message on stdout/stderr. */
    d.msg[0] = '\0';
    be = kern_backend_get("cuda", &d);
    if (be == NULL) {
        CHECK(strstr(d.msg, "cuda") != NULL);
    } else {
        CHECK(kern_have_cuda());
        CHECK(be->device_count() >= 1);
    }
    if (!kern_have_cuda())
        CHECK(be == NULL);

    be = &kern_backend_cpu;
    CHECK(strcmp(be->name, "cpu") == 0);
    CHECK(be->device_count() >= 1);
    CHECK(be->device_info(0, &info) == 0);
    CHECK(strncmp(info.name, "cpu core ", 9) == 0);
    CHECK(info.mem_bytes > 0 && info.index == 0);
    CHECK(be->device_info(be->device_count(), &info) == SD_EINVAL);
}

int main(int argc, char **argv)
{
    const struct kern_backend *be = &kern_backend_cpu;
    uint64_t seed = 20240611;
    int i;

    for (i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "-s") == 0)
            seed = strtoull(argv[++i], NULL, 0);
    }
    printf("seed %llu\n", (unsigned long long)seed);
    rng_state = seed;

    test_select();
    test_summarize();
    for (i = 0; i < 4; i++)
        test_step_matches_reference(be, seed + (uint64_t)i);
    test_seeding(be, seed);
    test_bad_descriptions(be, seed);
    test_time(be, seed);
    return tap_done();
}
