/*
 * Tests of the table families (planner/formats/families.c): names and
 * labels; the ranges every family's shapes keep (rows, dims, dtypes,
 * pooling factors, law parameters); the laws' moments as families.c states
 * them, measured on generated lookups (the top row's share of a Zipf law,
 * the share below the mean rank of an exponential, the histogram of a
 * uniform law, the hot set's share and the two modes of a bimodal one, bag
 * lengths of sequences and one-hot bags); and determinism: a mix pool is
 * the families in turn, whatever the thread count, and a table's shape is
 * what its generated table has.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "planner.h"

#define SHAPES 400 /* tables per family for the range checks */

static bool pow2_dim(int32_t d)
{
    return d == 4 || d == 8 || d == 16 || d == 32 || d == 64 || d == 128;
}

static void test_names(void)
{
    bool want[FAMILY_MIX + 1];
    uint32_t mask = 0;
    int f = -1;

    CHECK(family_parse("zipf", &f, NULL) == 0 && f == FAMILY_ZIPF);
    CHECK(family_parse("mix", &f, NULL) == 0 && f == FAMILY_MIX);
    CHECK(family_parse("zipfian", &f, NULL) == SD_EINVAL);
    CHECK(strcmp(family_name(FAMILY_ONEHOT), "onehot") == 0 &&
          strcmp(family_name(FAMILY_COUNT + 5), "?") == 0);
    CHECK(family_parse_list("seq,mix", want, NULL) == 0 && want[FAMILY_SEQ] &&
          want[FAMILY_MIX] && !want[FAMILY_DLRM] && !want[FAMILY_ZIPF]);
    CHECK(family_parse_list("", want, NULL) == SD_EINVAL);
    CHECK(family_parse_list("seq,,exp", want, NULL) == SD_EINVAL);
    CHECK(family_parse_list("seq,bogus", want, NULL) == SD_EINVAL);
    CHECK(family_label_mask("dlrm+seq", &mask) == 0 &&
          mask == ((1u << FAMILY_DLRM) | (1u << FAMILY_SEQ)));
    CHECK(family_label_mask("", &mask) == 0 && mask == 0);
    CHECK(family_label_mask("seq+", &mask) == SD_EINVAL);
    CHECK(family_label_mask("mix", &mask) == SD_EINVAL);
    CHECK(family_label_group("exp") == FAMILY_EXP);
    CHECK(family_label_group("exp+onehot") == FAMILY_MIX);
    CHECK(family_label_group("") == FAMILY_OTHER);
    CHECK(family_label_group("bogus") == FAMILY_OTHER);
    CHECK(strcmp(family_group_name(FAMILY_OTHER), "other") == 0 &&
          strcmp(family_group_name(FAMILY_MIX), "mix") == 0);
}

/* The ranges of one family's shapes over SHAPES tables. */
static void test_ranges(int f)
{
    struct family_shape sh;
    bool pow2_seen[6] = {false}, odd_dim = false, ok = true;
    int fp16 = 0, k;
    size_t i;

    for (i = 0; i < SHAPES; i++) {
        if (family_draw_shape(f, 11, i, &sh) != 0) {
            ok = false;
            break;
        }
        ok = ok && sh.rows >= FAMILY_ROWS_MIN && sh.rows <= FAMILY_ROWS_MAX;
        ok = ok && sh.dim >= 4 && sh.dim <= 1024 && sh.dim % 4 == 0;
        for (k = 0; k < 6; k++)
            pow2_seen[k] = pow2_seen[k] || sh.dim == 4 << k;
        odd_dim = odd_dim || !pow2_dim(sh.dim);
        fp16 += sh.dtype == TABLE_DTYPE_FP16;
        if (f == FAMILY_SEQ)
            ok = ok && sh.pf >= 64 && sh.pf <= 384 &&
                 sh.bags == FAMILY_BAGS_RANGE && sh.law == FAMILY_LAW_ZIPF &&
                 sh.zipf_s >= 0.6 && sh.zipf_s <= 1.2;
        else if (f == FAMILY_ONEHOT)
            ok = ok && sh.pf == 1.0 && sh.bags == FAMILY_BAGS_ONE;
        else
            ok = ok && sh.pf >= 1 && sh.pf <= 100 &&
                 sh.bags == FAMILY_BAGS_GEOMETRIC;
        if (f == FAMILY_ZIPF)
            ok = ok && sh.law == FAMILY_LAW_ZIPF && sh.zipf_s >= 0.5 &&
                 sh.zipf_s <= 2.0 && sh.vocab == (uint64_t)sh.rows;
        if (f == FAMILY_EXP)
            ok = ok && sh.law == FAMILY_LAW_EXP &&
                 (sh.exp_scale == 1.0 ||
                  (sh.exp_scale >= 0.999e-3 * (double)sh.rows &&
                   sh.exp_scale <= 0.5012 * (double)sh.rows));
        if (f == FAMILY_UNIFORM)
            ok = ok && sh.law == FAMILY_LAW_UNIFORM &&
                 sh.vocab >= (uint64_t)(0.5 * (double)sh.rows) - 1 &&
                 sh.vocab <= (uint64_t)sh.rows;
        if (f == FAMILY_BIMODAL)
            ok = ok && sh.law == FAMILY_LAW_BIMODAL && sh.hot_rows >= 1 &&
                 (double)sh.hot_rows <= 0.1 * (double)sh.rows &&
                 sh.hot_share >= 0.5 && sh.hot_share <= 0.95;
    }
    if (!ok)
        fprintf(stderr, "family %s: a shape out of range at table %zu\n",
                family_name(f), i);
    CHECK(ok);
    for (k = 0; k < 6; k++)
        CHECK(pow2_seen[k]);
    CHECK(odd_dim);
    /* 30 % fp16: 120 of 400 expected, sd 9. */
    CHECK(fp16 > 80 && fp16 < 160);
    CHECK(family_draw_shape(FAMILY_DLRM, 11, 0, &sh) == SD_EINVAL);
}

static int cmp_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x < y) - (x > y);
}

/* Access counts of a trace, sorted descending, into a new array (*nz
 * rows accessed). */
static int64_t *sorted_counts(const struct trace *t, size_t *nz)
{
    int64_t *c = calloc((size_t)t->rows, sizeof(*c)), j;
    size_t i, n = 0;

    for (j = 0; j < t->nindices; j++)
        c[t->indices[j]]++;
    for (i = 0; i < (size_t)t->rows; i++)
        if (c[i] > 0)
            c[n++] = c[i];
    qsort(c, n, sizeof(*c), cmp_desc);
    *nz = n;
    return c;
}

/* The trace of family table j at a batch giving about `lookups` lookups. */
static int make_trace(int f, size_t j, double lookups, struct trace *t,
                      struct family_shape *sh)
{
    struct family_params p;

    if (family_draw_shape(f, 11, j, sh) != 0)
        return -1;
    family_params_default(&p);
    p.family = f;
    p.seed = 11;
    p.batch_size = (int64_t)ceil(lookups / sh->pf);
    if (p.batch_size > (1 << 22))
        p.batch_size = 1 << 22;
    return family_trace(&p, j, t, sh);
}

/* zipf: the top row takes 1 / H(rows, s) of the lookups (10 %). */
static void test_zipf(void)
{
    struct family_shape sh;
    struct trace t;
    size_t j, tried = 0, nz;
    int64_t *c;
    double h, k;

    for (j = 0; j < 200 && tried < 3; j++) {
        if (family_draw_shape(FAMILY_ZIPF, 11, j, &sh) != 0 || sh.rows > 20000)
            continue;
        CHECK(make_trace(FAMILY_ZIPF, j, 4e5, &t, &sh) == 0);
        for (h = 0, k = 1; k <= (double)sh.rows; k++)
            h += pow(k, -sh.zipf_s);
        c = sorted_counts(&t, &nz);
        CHECK_NEAR((double)c[0] / (double)t.nindices / (1 / h), 1.0, 0.10);
        free(c);
        trace_destroy(&t);
        tried++;
    }
    CHECK(tried == 3);
}

/* exp: ranks below ceil(L) take (1 - e^-(ceil L / L)) / (1 - e^-(rows /
 * L)) of the lookups, 1 - 1/e for large L (0.04). */
static void test_exp(void)
{
    struct family_shape sh;
    struct trace t;
    size_t j, tried = 0, nz, m, i;
    int64_t *c, top;
    double want;

    for (j = 0; j < 300 && tried < 3; j++) {
        if (family_draw_shape(FAMILY_EXP, 11, j, &sh) != 0 ||
            sh.exp_scale < 50 || sh.rows > 200000)
            continue;
        CHECK(make_trace(FAMILY_EXP, j, 4e5, &t, &sh) == 0);
        m = (size_t)ceil(sh.exp_scale);
        want = (1 - exp(-(double)m / sh.exp_scale)) /
               (1 - exp(-(double)sh.rows / sh.exp_scale));
        c = sorted_counts(&t, &nz);
        for (top = 0, i = 0; i < m && i < nz; i++)
            top += c[i];
        CHECK_NEAR((double)top / (double)t.nindices, want, 0.04);
        free(c);
        trace_destroy(&t);
        tried++;
    }
    CHECK(tried == 3);
}

/* The sum of bins lo .. hi (clamped to the histogram). */
static double bin_mass(const double *bins, int lo, int hi)
{
    double s = 0;
    int k;

    for (k = lo < 0 ? 0 : lo; k <= hi && k < TABLE_NBINS; k++)
        s += bins[k];
    return s;
}

/* The bin of an access count c (neuroshard.md 1.1). */
static int bin_of(double c)
{
    int k = (int)ceil(log2(c));

    return c <= 1 ? 0 : k > 16 ? 16 : k;
}

/* uniform: N lookups over V rows, N / V >= 16: the three bins around
 * log2(N / V) hold at least 95 % of the accessed rows. */
static void test_uniform(void)
{
    struct family_shape sh;
    struct trace t;
    double bins[TABLE_NBINS], pf, lambda;
    size_t j, tried = 0;
    int k;

    for (j = 0; j < 300 && tried < 3; j++) {
        if (family_draw_shape(FAMILY_UNIFORM, 11, j, &sh) != 0 ||
            sh.rows > 5000)
            continue;
        CHECK(make_trace(FAMILY_UNIFORM, j, 40.0 * (double)sh.vocab, &t, &sh) ==
              0);
        lambda = (double)t.nindices / (double)sh.vocab;
        CHECK(lambda >= 16);
        CHECK(trace_features(&t, bins, &pf) == 0);
        k = bin_of(lambda);
        CHECK(bin_mass(bins, k - 1, k + 1) >= 0.95);
        trace_destroy(&t);
        tried++;
    }
    CHECK(tried == 3);
}

/*
 * bimodal: the hot_rows most read rows take hot_share of the lookups
 * (0.05), and the histogram has two modes: the bins around the hot rows'
 * mean count and around the cold rows' hold the hot and the cold shares of
 * the accessed rows.
 */
static void test_bimodal(void)
{
    struct family_shape sh;
    struct trace t;
    double bins[TABLE_NBINS], pf, hot_mean, cold_mean, n, hot_frac;
    size_t j, tried = 0, nz, i;
    int64_t *c, top;
    int kh, kc;

    for (j = 0; j < 400 && tried < 3; j++) {
        if (family_draw_shape(FAMILY_BIMODAL, 11, j, &sh) != 0 ||
            sh.rows > 2000 || sh.hot_rows < 2)
            continue;
        n = 40.0 * (double)(sh.rows - (int64_t)sh.hot_rows) /
            (1 - sh.hot_share);
        CHECK(make_trace(FAMILY_BIMODAL, j, n, &t, &sh) == 0);
        c = sorted_counts(&t, &nz);
        for (top = 0, i = 0; i < sh.hot_rows && i < nz; i++)
            top += c[i];
        CHECK_NEAR((double)top / (double)t.nindices, sh.hot_share, 0.05);
        free(c);
        hot_mean = sh.hot_share * (double)t.nindices / (double)sh.hot_rows;
        cold_mean = (1 - sh.hot_share) * (double)t.nindices /
                    (double)(sh.rows - (int64_t)sh.hot_rows);
        CHECK(trace_features(&t, bins, &pf) == 0);
        kh = bin_of(hot_mean);
        kc = bin_of(cold_mean);
        hot_frac = (double)sh.hot_rows / (double)sh.rows;
        if (kh - kc >= 3) { /* two separate modes */
            CHECK_NEAR(bin_mass(bins, kh - 1, kh + 1), hot_frac, 0.03);
            CHECK_NEAR(bin_mass(bins, kc - 1, kc + 1), 1 - hot_frac, 0.03);
            tried++;
        }
        trace_destroy(&t);
    }
    CHECK(tried == 3);
}

/* seq: bag lengths in [ceil(pf/2), floor(3pf/2)]; onehot: one id a bag;
 * geometric bags: the trace's pooling factor near the shape's. */
static void test_bags(void)
{
    struct family_params p;
    struct family_shape sh;
    struct trace t;
    int64_t b, len, lo, hi;
    bool ok;
    size_t j;

    family_params_default(&p);
    p.seed = 11;
    p.batch_size = 2048;
    for (j = 0; j < 5; j++) {
        p.family = FAMILY_SEQ;
        CHECK(family_trace(&p, j, &t, &sh) == 0);
        lo = (int64_t)ceil(sh.pf / 2);
        hi = (int64_t)floor(3 * sh.pf / 2);
        for (ok = true, b = 0; b < t.nbags; b++) {
            len = t.offsets[b + 1] - t.offsets[b];
            ok = ok && len >= lo && len <= hi;
        }
        CHECK(ok);
        CHECK_NEAR((double)t.nindices / (double)t.nbags / sh.pf, 1.0, 0.03);
        trace_destroy(&t);

        p.family = FAMILY_ONEHOT;
        CHECK(family_trace(&p, j, &t, &sh) == 0);
        for (ok = true, b = 0; b < t.nbags; b++)
            ok = ok && t.offsets[b + 1] - t.offsets[b] == 1;
        CHECK(ok && t.nindices == t.nbags);
        trace_destroy(&t);

        p.family = FAMILY_ZIPF;
        p.batch_size = 1 << 15;
        CHECK(family_trace(&p, j, &t, &sh) == 0);
        CHECK_NEAR((double)t.nindices / (double)t.nbags / sh.pf, 1.0, 0.05);
        CHECK(trace_validate(&t, NULL) == 0);
        trace_destroy(&t);
        p.batch_size = 2048;
    }
}

/* A mix pool is the families in turn, the same with 1 and 3 threads, and
 * a table's shape is what the generated table has. */
static void test_mix(void)
{
    struct family_params p, q;
    struct table *mix1 = NULL, *mix3 = NULL, *one = NULL, shape;
    size_t i;
    int f;

    family_params_default(&p);
    p.count = 3 * FAMILY_COUNT;
    p.seed = 5;
    p.batch_size = 256;
    CHECK(family_tables(&p, 1, &mix1) == 0);
    CHECK(family_tables(&p, 3, &mix3) == 0);
    if (mix1 == NULL || mix3 == NULL)
        return;
    CHECK(memcmp(mix1, mix3, p.count * sizeof(*mix1)) == 0);
    for (f = 0; f < FAMILY_COUNT; f++) {
        q = p;
        q.family = f;
        q.count = 3;
        CHECK(family_tables(&q, 1, &one) == 0);
        for (i = 0; one != NULL && i < 3; i++) {
            const struct table *a = &mix1[i * FAMILY_COUNT + (size_t)f];

            CHECK(strcmp(a->name, one[i].name) == 0 && a->rows == one[i].rows &&
                  a->dim == one[i].dim && a->dtype == one[i].dtype &&
                  a->pooling_factor == one[i].pooling_factor &&
                  memcmp(a->bins, one[i].bins, sizeof(a->bins)) == 0);
            CHECK(table_validate(a, i, NULL) == 0);
        }
        free(one);
        one = NULL;
    }
    for (i = 0; i < p.count; i++) {
        CHECK(family_table_shape(&p, i, &shape) == 0);
        CHECK(strcmp(shape.name, mix1[i].name) == 0 &&
              shape.rows == mix1[i].rows && shape.dim == mix1[i].dim &&
              shape.dtype == mix1[i].dtype && shape.bins[0] == 0);
        CHECK(family_of_index(FAMILY_MIX, i) == (int)(i % FAMILY_COUNT));
    }
    free(mix1);
    free(mix3);
}

int main(void)
{
    int f;

    test_names();
    for (f = FAMILY_ZIPF; f < FAMILY_COUNT; f++)
        test_ranges(f);
    test_zipf();
    test_exp();
    test_uniform();
    test_bimodal();
    test_bags();
    test_mix();
    return tap_done();
}
