/*
 * The cpu backend against a naive reference written here: pooled outputs
 * and the weights after one exact-SGD step, on small shards with empty
 * bags and duplicate indices, with fp32, fp16 and bf16 weights (fp16 both
 * through F16C and through the portable code); the fp16 and bf16
 * conversions against rounding written here; the profiling arena read as
 * each dtype; shard validation; timing; backend selection.  Randomised:
 * prints its seed, and `-s SEED` replays one.  Needs GCC's _Float16
 * (GCC 12 on x86-64) for the independent fp16 rounding.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "harness.h"
#include "kernels.h"
#include "shardd/le.h"

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
    f.tables[2].dtype = KERN_DTYPE_COUNT;
    expect_open_fails(be, 0, &f.desc, SD_EINVAL);
    f.tables[2].dtype = KERN_DTYPE_FP32;

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

    /* With the cache flush before each timed step. */
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

/*
 * The flush leaves the shard's data as it was: a shard timed with it
 * (1 warm-up and 3 timed steps) holds the weights of the same shard after
 * 4 plain steps, and the steps moved them (the fixture's seed weights
 * differ).  On x86 the flush evicts lines and keeps no buffer: the device
 * keeps nothing after it.
 */
static void test_flush_keeps_data(const struct kern_backend *be, uint64_t seed)
{
    struct fixture f;
    struct kern_shard *a = NULL, *b = NULL;
    struct kern_timing_opts o;
    struct kern_timing tm;
    float *wa, *wb, *w0;
    int64_t n, e, diff = 0, moved = 0;
    int t, r;

    fixture_init(&f, seed);
    CHECK(be->shard_open(0, &f.desc, &a, NULL) == 0);
    CHECK(be->shard_open(0, &f.desc, &b, NULL) == 0);
    if (a == NULL || b == NULL)
        goto out_close;
    if (be->release != NULL)
        be->release(0);
    n = f.tables[0].rows * f.tables[0].dim;
    w0 = calloc((size_t)n, sizeof(float));
    CHECK(be->shard_read_weights(a, 0, w0) == 0);
    kern_timing_opts_default(&o);
    o.warmup = 1;
    o.repeats = 3;
    CHECK(o.flush);
    CHECK(be->shard_time(a, &o, &tm) == 0);
#if defined(__x86_64__) || defined(__i386__)
    if (strcmp(be->name, "cpu") == 0)
        CHECK(be->kept_bytes(0) == 0);
#endif
    for (r = 0; r < 4; r++)
        CHECK(be->shard_step(b, NULL, NULL) == 0);
    for (t = 0; t < NTABLES; t++) {
        n = f.tables[t].rows * f.tables[t].dim;
        wa = calloc((size_t)n, sizeof(float));
        wb = calloc((size_t)n, sizeof(float));
        CHECK(be->shard_read_weights(a, (size_t)t, wa) == 0);
        CHECK(be->shard_read_weights(b, (size_t)t, wb) == 0);
        for (e = 0; e < n; e++) {
            diff += wa[e] != wb[e];
            moved += t == 0 && wa[e] != w0[e];
        }
        free(wa);
        free(wb);
    }
    CHECK(diff == 0);
    CHECK(moved > 0);
    free(w0);

out_close:
    if (a != NULL)
        be->shard_close(a);
    if (b != NULL)
        be->shard_close(b);
    fixture_free(&f);
}

/* ------------------------------------------------------------------------ */
/* fp16 and bf16 weights                                                     */

/* The value of fp16 bits h, by GCC's _Float16 (libgcc's conversions). */
static float f16_value(uint16_t h)
{
    _Float16 v;

    memcpy(&v, &h, sizeof(v));
    return (float)v;
}

/* x rounded to fp16, to nearest even, by GCC's _Float16. */
static float round_f16(float x)
{
    return (float)(_Float16)x;
}

/* The fp16 bits of x (finite or Inf), by GCC's _Float16. */
static uint16_t f16_bits(float x)
{
    _Float16 v = (_Float16)x;
    uint16_t h;

    memcpy(&h, &v, sizeof(h));
    return h;
}

/* x (finite) rounded to bf16: the nearer of the two bf16 values around
 * it, the one with an even last bit on a tie; past the largest bf16 the
 * next value up is 2^128, which rounds to Inf. */
static float round_bf16(float x)
{
    uint32_t lo = sd_f32_bits(x) & 0xffff0000u;
    double down = (double)sd_f32_of(lo), up;

    if ((lo & 0x7fffffffu) == 0x7f7f0000u)
        up = copysign(0x1p128, (double)x);
    else
        up = (double)sd_f32_of(lo + 0x10000u);
    if (fabs((double)x - down) < fabs(up - (double)x) ||
        (fabs((double)x - down) == fabs(up - (double)x) &&
         (lo & 0x10000u) == 0))
        return sd_f32_of(lo);
    return sd_f32_of(lo + 0x10000u);
}

static float round_to(enum kern_dtype dtype, float x)
{
    if (dtype == KERN_DTYPE_FP16)
        return round_f16(x);
    if (dtype == KERN_DTYPE_BF16)
        return round_bf16(x);
    return x;
}

/* Elements where got and want differ as floats (not as bits: -0 == 0);
 * prints the first. */
static int64_t count_unequal(const char *what, const float *got,
                             const float *want, int64_t n)
{
    int64_t e, bad = 0;

    for (e = 0; e < n; e++) {
        if (got[e] == want[e])
            continue;
        if (bad++ == 0)
            fprintf(stderr, "%s[%lld]: %.9g, want %.9g\n", what, (long long)e,
                    (double)got[e], (double)want[e]);
    }
    return bad;
}

#define HALF_BAGS 4

/*
 * A small shard of 16-bit tables against the reference, to the float:
 * weights are the fp32 shard's seeded weights rounded to the dtype; the
 * pooled sums are those of the weights read back, added in index order in
 * fp32; after one SGD step each lookup's update, w - lr * g in fp32, has
 * been rounded to the dtype in order (table 0 reads row 2 once in bag 0
 * and twice in bag 1, table 1 row 4 in three bags; bag 2 of table 0 and
 * bag 1 of table 1 are empty).
 */
static void test_half_step(const struct kern_backend *be, enum kern_dtype dtype,
                           uint64_t seed)
{
    static const int64_t off0[HALF_BAGS + 1] = {0, 3, 6, 6, 8};
    static const int64_t idx0[] = {2, 0, 5, 2, 2, 1, 5, 3};
    static const int64_t off1[HALF_BAGS + 1] = {0, 1, 1, 4, 6};
    static const int64_t idx1[] = {4, 0, 4, 3, 1, 4};
    struct kern_table_desc td[2] = {
        {.rows = 6, .dim = 4, .nindices = 8, .offsets = off0, .indices = idx0},
        {.rows = 5, .dim = 8, .nindices = 6, .offsets = off1, .indices = idx1},
    };
    struct kern_shard_desc desc = {.ntables = 2,
                                   .tables = td,
                                   .nbags = HALF_BAGS,
                                   .learning_rate = 0.05f,
                                   .seed = seed};
    enum { WIDTH = 12, NPOOLED = HALF_BAGS * WIDTH };
    struct kern_shard *s32 = NULL, *s = NULL;
    struct sd_diag d = {{0}};
    float w32[2][48], w[2][48], got[48], pooled[NPOOLED], want[NPOOLED];
    float grad[NPOOLED], sum, r;
    int64_t n, e, b, i, changed = 0;
    int32_t c, col;
    int t;

    for (e = 0; e < NPOOLED; e++)
        grad[e] = (float)(below(2001) - 1000) / 1000.0f;
    CHECK(be->shard_open(0, &desc, &s32, &d) == 0);
    td[0].dtype = dtype;
    td[1].dtype = dtype;
    CHECK(be->shard_open(0, &desc, &s, &d) == 0);
    if (s32 == NULL || s == NULL) {
        fprintf(stderr, "%s: shard_open: %s\n", kern_dtype_name(dtype), d.msg);
        goto out;
    }
    for (t = 0; t < 2; t++) {
        n = td[t].rows * td[t].dim;
        CHECK(be->shard_read_weights(s32, (size_t)t, w32[t]) == 0);
        CHECK(be->shard_read_weights(s, (size_t)t, w[t]) == 0);
        for (e = 0; e < n; e++) {
            r = round_to(dtype, w32[t][e]);
            changed += r != w32[t][e];
            w32[t][e] = r;
        }
        CHECK(count_unequal("weights", w[t], w32[t], n) == 0);
    }
    CHECK(changed > 0); /* else fp32 weights would pass as rounded */

    /* The reference: the forward first, then the per-lookup updates. */
    for (t = 0, col = 0; t < 2; col += td[t].dim, t++) {
        for (b = 0; b < HALF_BAGS; b++) {
            for (c = 0; c < td[t].dim; c++) {
                sum = 0.0f;
                for (i = td[t].offsets[b]; i < td[t].offsets[b + 1]; i++)
                    sum += w[t][td[t].indices[i] * td[t].dim + c];
                want[b * WIDTH + col + c] = sum;
            }
        }
    }
    for (t = 0, col = 0; t < 2; col += td[t].dim, t++) {
        for (b = 0; b < HALF_BAGS; b++) {
            for (i = td[t].offsets[b]; i < td[t].offsets[b + 1]; i++) {
                float *row = &w[t][td[t].indices[i] * td[t].dim];

                for (c = 0; c < td[t].dim; c++)
                    row[c] =
                        round_to(dtype, row[c] - desc.learning_rate *
                                                     grad[b * WIDTH + col + c]);
            }
        }
    }
    CHECK(be->shard_step(s, pooled, grad) == 0);
    CHECK(count_unequal("pooled", pooled, want, NPOOLED) == 0);
    for (t = 0; t < 2; t++) {
        n = td[t].rows * td[t].dim;
        CHECK(be->shard_read_weights(s, (size_t)t, got) == 0);
        CHECK(count_unequal("updated", got, w[t], n) == 0);
    }
out:
    be->shard_close(s32);
    be->shard_close(s);
}

/* Whether fp16 bits h are a NaN or an Inf (exponent all ones). */
static bool f16_special(uint16_t h)
{
    return (h & 0x7c00) == 0x7c00;
}

/*
 * fp16 <-> fp32 through one path (F16C or portable): every finite fp16
 * widens to GCC's value and comes back to its bits; NaN stays NaN; fp32
 * values between two fp16 neighbours (their midpoint, which ties to the
 * even one, and the floats either side of it), around the overflow
 * threshold and at random round as GCC's _Float16 does.
 */
static void check_f16_path(bool f16c)
{
    enum { N = 65536, NHALF = 3 * 0x7bff + 16 + (1 << 15), NR = 2 * NHALF };
    static const float edge[] = {
        65504.0f, 65519.996f, 65520.0f, 1e10f,     0x1p-25f, 0x1.000002p-25f,
        0x1p-24f, 0x1.8p-24f, 0x1p-26f, 0x1p-149f, 0.0f};
    uint16_t *h = calloc(N, sizeof(*h)), *back = calloc(NR, sizeof(*back));
    float *f = calloc(NR, sizeof(*f));
    int64_t bad = 0, badnan = 0, n = 0, i;
    float lo, hi, mid;

    for (i = 0; i < N; i++)
        h[i] = (uint16_t)i;
    kern_cpu_f16_to_f32(f, h, N, f16c);
    kern_cpu_f32_to_f16(back, f, N, f16c);
    for (i = 0; i < N; i++) {
        if (f16_special(h[i])) {
            badnan += (h[i] & 0x3ff) != 0
                          ? !isnan(f[i]) || !isnan(f16_value(back[i]))
                          : !isinf(f[i]) || back[i] != h[i];
            continue;
        }
        bad += sd_f32_bits(f[i]) != sd_f32_bits(f16_value(h[i])) ||
               back[i] != h[i];
    }
    CHECK(bad == 0);
    CHECK(badnan == 0);

    /* Rounding: both signs of the values between neighbours, the edges
     * and random fp32 bit patterns. */
    for (i = 0; i < 0x7bff; i++) {
        lo = f16_value((uint16_t)i);
        hi = f16_value((uint16_t)(i + 1));
        mid = lo + (hi - lo) / 2;
        f[n++] = mid;
        f[n++] = nextafterf(mid, 0.0f);
        f[n++] = nextafterf(mid, INFINITY);
    }
    for (i = 0; i < (int64_t)(sizeof(edge) / sizeof(edge[0])); i++)
        f[n++] = edge[i];
    while (n < NHALF)
        f[n++] = sd_f32_of((uint32_t)next());
    for (i = 0; i < NHALF; i++)
        f[n++] = -f[i];
    kern_cpu_f32_to_f16(back, f, NR, f16c);
    bad = 0;
    for (i = 0; i < NR; i++) {
        if (isnan(f[i]))
            bad += !f16_special(back[i]) || (back[i] & 0x3ff) == 0;
        else if (back[i] != f16_bits(f[i]) && bad++ == 0)
            fprintf(stderr, "fp16 %s: %a rounds to 0x%04x, want 0x%04x\n",
                    f16c ? "f16c" : "portable", (double)f[i], back[i],
                    f16_bits(f[i]));
    }
    CHECK(bad == 0);
    free(h);
    free(back);
    free(f);
}

static void test_f16_conversions(void)
{
    check_f16_path(false);
    if (kern_cpu_has_f16c())
        check_f16_path(true);
    else
        tap_skip("this CPU has no F16C: only the portable fp16 code checked");
}

/*
 * bf16 <-> fp32: every bf16 widens to its bits in the upper half and
 * comes back to them (NaN stays NaN); random fp32 values round as
 * round_bf16() does; a NaN whose payload lies in the dropped half stays
 * NaN, not Inf.
 */
static void test_bf16_conversions(void)
{
    enum { N = 65536, NR = 1 << 17 };
    uint16_t *h = calloc(N, sizeof(*h)), *back = calloc(NR, sizeof(*back));
    float *f = calloc(NR, sizeof(*f)), nan_low = sd_f32_of(0x7f800001u);
    int64_t bad = 0, i;
    uint16_t one;

    for (i = 0; i < N; i++)
        h[i] = (uint16_t)i;
    kern_cpu_bf16_to_f32(f, h, N);
    kern_cpu_f32_to_bf16(back, f, N);
    for (i = 0; i < N; i++) {
        bad += sd_f32_bits(f[i]) != (uint32_t)h[i] << 16;
        if (isnan(f[i]))
            bad += !isnan(sd_f32_of((uint32_t)back[i] << 16));
        else
            bad += back[i] != h[i];
    }
    CHECK(bad == 0);

    for (i = 0; i < NR; i++)
        f[i] = sd_f32_of((uint32_t)next());
    kern_cpu_f32_to_bf16(back, f, NR);
    bad = 0;
    for (i = 0; i < NR; i++) {
        float got = sd_f32_of((uint32_t)back[i] << 16);

        if (isnan(f[i]))
            bad += !isnan(got);
        else if (isinf(f[i]))
            bad += got != f[i];
        else if (got != round_bf16(f[i]) && bad++ == 0)
            fprintf(stderr, "bf16: %a rounds to %a, want %a\n", (double)f[i],
                    (double)got, (double)round_bf16(f[i]));
    }
    CHECK(bad == 0);
    kern_cpu_f32_to_bf16(&one, &nan_low, 1);
    CHECK(isnan(sd_f32_of((uint32_t)one << 16)));
    free(h);
    free(back);
    free(f);
}

/* Bytes the cpu arena gives a table: its weights, rounded up to a line. */
static uint64_t arena_bytes_of(const struct kern_table_desc *td)
{
    uint64_t n =
        (uint64_t)td->rows * (uint64_t)td->dim * kern_dtype_size(td->dtype);

    return (n + 63) / 64 * 64;
}

/*
 * Profiling shards of fp16, bf16 and fp32 tables in the arena: the arena
 * grows by the dtypes' sizes (kept_bytes) and a cap that fits the 16-bit
 * tables, not fp32 ones, admits them; every weight reads as a finite
 * normal value or zero in its dtype (so the timing adds no NaN, Inf or
 * subnormal); the shard times.
 */
static void test_arena_half(const struct kern_backend *be, uint64_t seed)
{
    static const enum kern_dtype dtypes[NTABLES] = {
        KERN_DTYPE_FP16, KERN_DTYPE_BF16, KERN_DTYPE_FP32};
    struct fixture f;
    struct kern_shard *s = NULL;
    struct kern_timing_opts o;
    struct kern_timing tm;
    struct sd_diag d = {{0}};
    uint64_t kept0, need = 0;
    float *w, min_normal;
    int64_t n, e, bad = 0;
    int t;

    fixture_init(&f, seed);
    for (t = 0; t < NTABLES; t++) {
        f.tables[t].rows *= 1000;
        f.tables[t].dtype = dtypes[t];
        need += arena_bytes_of(&f.tables[t]);
    }
    f.desc.reuse_weights = true;
    be->release(0);
    kept0 = be->kept_bytes(0); /* the flush buffer, if made */
    CHECK(be->shard_open(0, &f.desc, &s, &d) == 0);
    if (s == NULL) {
        fprintf(stderr, "arena shard_open: %s\n", d.msg);
        fixture_free(&f);
        return;
    }
    CHECK(be->kept_bytes(0) == kept0 + need);
    for (t = 0; t < NTABLES; t++) {
        n = f.tables[t].rows * f.tables[t].dim;
        min_normal = dtypes[t] == KERN_DTYPE_FP16 ? 0x1p-14f : 0x1p-126f;
        w = calloc((size_t)n, sizeof(float));
        CHECK(be->shard_read_weights(s, (size_t)t, w) == 0);
        for (e = 0; e < n; e++)
            bad +=
                !isfinite(w[e]) || (w[e] != 0.0f && fabsf(w[e]) < min_normal);
        free(w);
    }
    CHECK(bad == 0);
    kern_timing_opts_default(&o);
    o.flush = false;
    o.warmup = 1;
    o.repeats = 3;
    CHECK(be->shard_time(s, &o, &tm) == 0);
    CHECK(tm.repeats == 3 && tm.median_ms > 0.0);
    be->shard_close(s);

    /* Released, the device keeps nothing: the arena and the flush buffer
     * (made by a timing that flushes) both go back. */
    kern_timing_opts_default(&o);
    o.warmup = 0;
    o.repeats = 1;
    CHECK(be->shard_open(0, &f.desc, &s, &d) == 0);
    if (s != NULL) {
        CHECK(be->shard_time(s, &o, &tm) == 0);
        be->release(0); /* the arena is held: only the buffer goes */
        CHECK(be->kept_bytes(0) == need);
        be->shard_close(s);
    }
    be->release(0);
    CHECK(be->kept_bytes(0) == 0);

    /* A cap of these tables' bytes admits them, not all of them as fp32. */
    be->release(0);
    f.desc.arena_max_bytes = need;
    s = NULL;
    CHECK(be->shard_open(0, &f.desc, &s, &d) == 0);
    be->shard_close(s);
    be->release(0);
    for (t = 0; t < NTABLES; t++)
        f.tables[t].dtype = KERN_DTYPE_FP32;
    s = NULL;
    CHECK(be->shard_open(0, &f.desc, &s, &d) == SD_ENOMEM && s == NULL);
    CHECK(strstr(d.msg, "arena_max_bytes") != NULL); /* says which limit */
    be->release(0);
    fixture_free(&f);
}

/* Of the rows table 0 of s reads (its desc td), the weights that are NaN,
 * Inf or subnormal in its dtype (zero is fine): what the timed steps would
 * read. */
static int64_t abnormal_weights(const struct kern_backend *be,
                                struct kern_shard *s,
                                const struct kern_table_desc *td)
{
    int64_t n = td->rows * td->dim, i, c, bad = 0;
    float *w = calloc((size_t)n, sizeof(float)), v;
    float min_normal = td->dtype == KERN_DTYPE_FP16 ? 0x1p-14f : 0x1p-126f;

    CHECK(be->shard_read_weights(s, 0, w) == 0);
    for (i = 0; i < td->nindices; i++) {
        for (c = 0; c < td->dim; c++) {
            v = w[td->indices[i] * td->dim + c];
            bad += !isfinite(v) || (v != 0.0f && fabsf(v) < min_normal);
        }
    }
    free(w);
    return bad;
}

/* One arena shard of one table of dtype dt over `span` bytes whose lookups
 * read every stride-th row once per step, in row order: desc filled,
 * offsets and indices in off and idx (big enough). */
static void arena_table(struct kern_table_desc *td, struct kern_shard_desc *sd,
                        enum kern_dtype dt, int64_t span, int64_t stride,
                        int64_t *off, int64_t *idx, uint64_t seed)
{
    enum { DIM = 16, BAGS = 64 };
    int64_t b, e;

    memset(td, 0, sizeof(*td));
    memset(sd, 0, sizeof(*sd));
    td->dim = DIM;
    td->dtype = dt;
    td->rows = span / DIM / (int64_t)kern_dtype_size(dt);
    td->nindices = (td->rows + stride - 1) / stride;
    for (b = 0; b <= BAGS; b++)
        off[b] = b * td->nindices / BAGS;
    for (e = 0; e < td->nindices; e++)
        idx[e] = e * stride;
    td->offsets = off;
    td->indices = idx;
    sd->ntables = 1;
    sd->tables = td;
    sd->nbags = BAGS;
    sd->learning_rate = 0.01f; /* as the profiler's */
    sd->seed = seed;
    sd->reuse_weights = true;
}

/*
 * A profiling shard of one dtype over arena bytes that a shard of another
 * dtype has just updated (every row, five SGD steps), as the profiler and
 * shardctl eval time shards of mixed dtypes in one process: every weight
 * the second shard's lookups read is finite and normal (or zero) in its
 * own dtype, and its pooled outputs are finite.  The reader's lookups read
 * every row (its lookups cover the table: the cpu backend rewrites whole
 * blocks) or every fifth (sparse: it rewrites the rows).  Both shards take
 * the same arena bytes, so the arena does not grow, and refill, between
 * them.  An fp32 update leaves arbitrary low halves (a NaN, Inf or
 * subnormal one time in sixteen as fp16, one in 128 as bf16); an fp16
 * update leaves fp16 subnormals near zero, bf16 and fp32 subnormals when
 * read as those.
 */
static void test_arena_mixed(const struct kern_backend *be, uint64_t seed)
{
    enum { SPAN = 1 << 20 /* bytes */, DIM = 16, BAGS = 64 };
    static const enum kern_dtype all[] = {KERN_DTYPE_FP32, KERN_DTYPE_FP16,
                                          KERN_DTYPE_BF16};
    struct kern_timing_opts o;
    struct kern_timing tm;
    struct sd_diag d = {{0}};
    int64_t *off = calloc(BAGS + 1, sizeof(int64_t));
    int64_t *idx = calloc(SPAN / DIM / 2, sizeof(int64_t));
    float *pooled = calloc((size_t)BAGS * DIM, sizeof(float));
    size_t wi, ri;
    int64_t e, stride;

    kern_timing_opts_default(&o);
    o.flush = false;
    o.warmup = 2;
    o.repeats = 3;
    for (wi = 0; wi < 3; wi++) {
        for (ri = 0; ri < 3; ri++) {
            for (stride = 1; stride <= 5 && ri != wi; stride += 4) {
                struct kern_table_desc td;
                struct kern_shard_desc sd;
                struct kern_shard *s = NULL;
                int64_t bad, nonfinite = 0;

                be->release(0);
                arena_table(&td, &sd, all[wi], SPAN, 1, off, idx, seed);
                CHECK(be->shard_open(0, &sd, &s, &d) == 0);
                if (s == NULL) {
                    fprintf(stderr, "arena shard_open: %s\n", d.msg);
                    continue;
                }
                CHECK(be->shard_time(s, &o, &tm) == 0);
                be->shard_close(s);

                arena_table(&td, &sd, all[ri], SPAN, stride, off, idx, seed);
                s = NULL;
                CHECK(be->shard_open(0, &sd, &s, &d) == 0);
                if (s == NULL) {
                    fprintf(stderr, "arena shard_open: %s\n", d.msg);
                    continue;
                }
                bad = abnormal_weights(be, s, &td);
                CHECK(be->shard_step(s, pooled, NULL) == 0);
                for (e = 0; e < (int64_t)BAGS * DIM; e++)
                    nonfinite += !isfinite(pooled[e]);
                if (bad != 0 || nonfinite != 0)
                    fprintf(stderr,
                            "arena: %s read (every %lld. row) after %s "
                            "updates: %lld of %lld weights NaN, Inf or "
                            "subnormal, %lld pooled outputs not finite\n",
                            kern_dtype_name(all[ri]), (long long)stride,
                            kern_dtype_name(all[wi]), (long long)bad,
                            (long long)(td.nindices * DIM),
                            (long long)nonfinite);
                CHECK(bad == 0);
                CHECK(nonfinite == 0);
                be->shard_close(s);
            }
        }
    }
    be->release(0);
    free(off);
    free(idx);
    free(pooled);
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
    test_flush_keeps_data(be, seed);

    test_f16_conversions();
    test_bf16_conversions();
    test_half_step(be, KERN_DTYPE_BF16, seed);
    test_half_step(be, KERN_DTYPE_FP16, seed); /* F16C, where the CPU has it */
    CHECK(!kern_cpu_use_f16c(false)); /* fp16 again, the portable code */
    test_half_step(be, KERN_DTYPE_FP16, seed + 1);
    kern_cpu_use_f16c(true);
    test_arena_half(be, seed);
    test_arena_mixed(be, seed);
    return tap_done();
}
