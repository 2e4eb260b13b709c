/*
 * Tests of the synthetic table generator (planner/formats/synth.c), the task
 * generator (planner/formats/task.c) and the random numbers under both
 * (planner/problem/rng.c): statistics of 856 generated tables against the
 * public NeuroShard statistics, determinism across runs and thread counts, and
 * the task rules of neuroshard.md 2.4.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "planner.h"

/*
 * A smaller batch than the benchmark's 65536 keeps this test fast; rows,
 * pooling factors and emptiness do not depend on the batch size.
 */
#define TEST_BATCH 512

static bool dim_ok(int32_t dim)
{
    return dim == 4 || dim == 8 || dim == 16 || dim == 32 || dim == 64 ||
           dim == 128;
}

static void mean_std(const double *x, size_t n, double *mean, double *std)
{
    double s = 0, s2 = 0;
    size_t i;

    for (i = 0; i < n; i++)
        s += x[i];
    *mean = s / (double)n;
    for (i = 0; i < n; i++)
        s2 += (x[i] - *mean) * (x[i] - *mean);
    *std = sqrt(s2 / (double)(n - 1));
}

static void test_rng(void)
{
    struct rng a, b;
    double x, sum = 0, sum2 = 0, g = 0;
    uint64_t hits[7] = {0};
    int i, same = 0, bad = 0;

    rng_seed(&a, 42);
    rng_seed(&b, 42);
    for (i = 0; i < 100; i++)
        same += rng_next(&a) == rng_next(&b);
    CHECK(same == 100);
    rng_seed(&b, 43);
    for (i = 0, same = 0; i < 100; i++)
        same += rng_next(&a) == rng_next(&b);
    CHECK(same == 0);
    /* Seed 0 is as good as any. */
    rng_seed(&a, 0);
    CHECK(rng_next(&a) != 0 || rng_next(&a) != 0);
    CHECK(rng_derive(1, 2) != rng_derive(2, 1));
    CHECK(rng_derive(0, 0) != rng_derive(0, 1));
    CHECK(rng_derive(5, 9) == rng_derive(5, 9));

    rng_seed(&a, 1);
    for (i = 0; i < 70000; i++) {
        x = rng_uniform(&a);
        bad += !(x >= 0.0 && x < 1.0);
        hits[rng_below(&a, 7)]++;
    }
    CHECK(bad == 0);
    for (i = 0; i < 7; i++)
        CHECK_NEAR((double)hits[i], 10000.0, 0.05);
    CHECK(rng_below(&a, 1) == 0 && rng_below(&a, 0) == 0);
    CHECK(rng_below(&a, UINT64_MAX) < UINT64_MAX);
    for (i = 0; i < 20000; i++) {
        x = rng_normal(&a);
        sum += x;
        sum2 += x * x;
        g += rng_gamma(&a, i % 2 ? 2.5 : 0.5); /* mean = shape */
    }
    CHECK_NEAR(sum / 20000, 0.0, 0.03);
    CHECK_NEAR(sum2 / 20000, 1.0, 0.03);
    CHECK_NEAR(g / 20000, 1.5, 0.03);
    CHECK(rng_gamma(&a, 0.0) == 0.0 && rng_gamma(&a, -1.0) == 0.0);
}

/* Field by field: struct padding is not guaranteed to be copied. */
static bool table_same(const struct table *a, const struct table *b)
{
    return strcmp(a->name, b->name) == 0 && a->rows == b->rows &&
           a->dim == b->dim && a->pooling_factor == b->pooling_factor &&
           memcmp(a->bins, b->bins, sizeof(a->bins)) == 0 &&
           a->dtype == b->dtype;
}

static bool tables_equal(const struct table *a, const struct table *b, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (!table_same(&a[i], &b[i]))
            return false;
    return true;
}

/* Statistics of the generated tables against neuroshard.md 1.4. */
static void test_synth_stats(const struct table *t, size_t n)
{
    double *rows = malloc(n * sizeof(*rows)), *pf = malloc(n * sizeof(*pf));
    double mean, std, sum;
    size_t i, nempty = 0, bad_names = 0, bad_dims = 0, bad_bins = 0;
    char want[TABLE_NAME_MAX];
    bool empty;
    int k;

    for (i = 0; i < n; i++) {
        rows[i] = (double)t[i].rows;
        pf[i] = t[i].pooling_factor;
        for (k = 0, sum = 0; k < TABLE_NBINS; k++) {
            sum += t[i].bins[k];
            bad_bins += !(t[i].bins[k] >= 0.0 && t[i].bins[k] <= 1.0);
        }
        empty = t[i].pooling_factor == 0.0;
        nempty += empty;
        /* Bins sum to 1 over the unique rows, or are all 0 when empty. */
        bad_bins += fabs(sum - (empty ? 0.0 : 1.0)) > 1e-9;
        bad_bins += empty && t[i].rows != 100;
        snprintf(want, sizeof(want), "table_%04zu", i);
        bad_names += strcmp(t[i].name, want) != 0;
        bad_dims += !dim_ok(t[i].dim);
        bad_dims += t[i].dtype != TABLE_DTYPE_FP32 || t[i].rows < 100;
    }
    CHECK(bad_names == 0);
    CHECK(bad_dims == 0);
    CHECK(bad_bins == 0);
    /* Empty tables: 4.2 % in the benchmark. */
    CHECK((double)nempty / (double)n >= 0.015);
    CHECK((double)nempty / (double)n <= 0.08);
    /* Rows: mean 4.11 M, std 3.13 M. */
    mean_std(rows, n, &mean, &std);
    printf("# rows mean %.0f std %.0f; ", mean, std);
    CHECK_NEAR(mean, 4107472.25, 0.10);
    CHECK_NEAR(std, 3134816.25, 0.20);
    /* Pooling factor: mean 15.8, std 25.6, heavy-tailed, so the sample
     * standard deviation of 856 tables varies by about 15 % (2 sigma). */
    mean_std(pf, n, &mean, &std);
    printf("pooling factor mean %.2f std %.2f; empty %zu\n", mean, std, nempty);
    CHECK_NEAR(mean, 15.811706, 0.15);
    CHECK_NEAR(std, 25.594431, 0.30);
    free(rows);
    free(pf);
}

static void test_synth(void)
{
    struct synth_params p;
    struct table *a = NULL, *b = NULL, *c = NULL, one;
    struct trace t;
    struct sd_diag d;
    size_t i, differ = 0;

    synth_params_default(&p);
    CHECK(p.count == 856 && p.seed == 0 && p.batch_size == 65536);
    p.batch_size = TEST_BATCH;

    CHECK(synth_tables(&p, 2, &a) == 0);
    if (a == NULL)
        return;
    test_synth_stats(a, p.count);

    /* Same seed, other thread counts: identical. */
    CHECK(synth_tables(&p, 1, &b) == 0);
    CHECK(b != NULL && tables_equal(a, b, p.count));
    free(b);
    b = NULL;
    CHECK(synth_tables(&p, 5, &b) == 0);
    CHECK(b != NULL && tables_equal(a, b, p.count));
    free(b);
    b = NULL;

    /* Table i does not depend on the count: the first 20 of 856. */
    p.count = 20;
    CHECK(synth_tables(&p, 3, &b) == 0);
    CHECK(b != NULL && tables_equal(a, b, 20));

    /* Another seed: other tables. */
    p.seed = 1;
    CHECK(synth_tables(&p, 2, &c) == 0);
    for (i = 0; c != NULL && i < 20; i++)
        differ += a[i].rows != c[i].rows;
    CHECK(differ >= 18);

    /* synth_trace() gives the trace behind table i, and it is valid. */
    p.seed = 0;
    for (i = 0; i < 20; i++) {
        CHECK(synth_trace(&p, i, &t) == 0);
        CHECK(trace_validate(&t, &d) == 0);
        CHECK(t.nbags == TEST_BATCH);
        CHECK(trace_to_table(&t, &one) == 0);
        CHECK(tables_equal(&one, &a[i], 1));
        trace_destroy(&t);
    }

    /* Bad parameters. */
    p.batch_size = 0;
    CHECK(synth_tables(&p, 2, &b) == SD_EINVAL);
    CHECK(synth_trace(&p, 0, &t) == SD_EINVAL);
    p.batch_size = TEST_BATCH;
    p.count = 0;
    CHECK(synth_tables(&p, 2, &b) == SD_EINVAL);
    free(a);
    free(b);
    free(c);
}

/* A few tables at the benchmark's batch size of 65536. */
static void test_synth_full_batch(void)
{
    struct synth_params p;
    struct table *t = NULL;
    size_t i, nonempty = 0, upper = 0;
    double sum;
    int k;

    synth_params_default(&p);
    p.count = 6;
    CHECK(synth_tables(&p, 2, &t) == 0);
    for (i = 0; t != NULL && i < p.count; i++) {
        for (k = 0, sum = 0; k < TABLE_NBINS; k++)
            sum += t[i].bins[k];
        if (t[i].pooling_factor > 0) {
            nonempty++;
            CHECK_NEAR(sum, 1.0, 1e-9);
        }
        /* At this batch size some rows are read more than 2^6 times. */
        for (k = 7; k < TABLE_NBINS; k++)
            upper += t[i].bins[k] > 0;
    }
    CHECK(nonempty >= 4);
    CHECK(upper > 0);
    free(t);
}

/* ------------------------------------------------------------------------ */
/* Tasks                                                                     */

static uint64_t task_bytes(const struct task *t)
{
    uint64_t total = 0;
    size_t i;

    for (i = 0; i < t->ntables; i++)
        total += (uint64_t)t->tables[i].rows * (uint64_t)t->tables[i].dim * 4;
    return total;
}

static bool names_unique(const struct task *t)
{
    size_t i, j;

    for (i = 0; i < t->ntables; i++)
        for (j = i + 1; j < t->ntables; j++)
            if (strcmp(t->tables[i].name, t->tables[j].name) == 0)
                return false;
    return true;
}

static bool tasks_equal(const struct task *a, const struct task *b, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (a[i].ntables != b[i].ntables ||
            memcmp(a[i].source, b[i].source,
                   a[i].ntables * sizeof(*a[i].source)) != 0 ||
            !tables_equal(a[i].tables, b[i].tables, a[i].ntables))
            return false;
    return true;
}

static void test_tasks(const struct table *pool, size_t npool)
{
    struct task_params p;
    struct task *a = NULL, *b = NULL;
    struct sd_diag d;
    size_t i, j, bad = 0, dup = 0, tmin = 1000, tmax = 0;
    const struct table *src;

    task_params_default(&p);
    CHECK(p.count == 10 && p.seed == 0 && p.min_tables == 10 &&
          p.max_tables == 59 && p.max_bytes == (uint64_t)15 << 30);
    p.count = 200;
    CHECK(task_generate(&p, pool, npool, &a, &d) == 0);
    for (i = 0; a != NULL && i < p.count; i++) {
        tmin = a[i].ntables < tmin ? a[i].ntables : tmin;
        tmax = a[i].ntables > tmax ? a[i].ntables : tmax;
        bad += a[i].ntables < 10 || a[i].ntables > 59;
        bad += task_bytes(&a[i]) > p.max_bytes;
        bad += !names_unique(&a[i]);
        for (j = 0; j < a[i].ntables; j++) {
            src = &pool[a[i].source[j]];
            bad += a[i].source[j] >= npool;
            bad += !dim_ok(a[i].tables[j].dim);
            bad +=
                a[i].tables[j].rows != src->rows ||
                a[i].tables[j].pooling_factor != src->pooling_factor ||
                memcmp(a[i].tables[j].bins, src->bins, sizeof(src->bins)) != 0;
            /* The name is the pool's, or the pool's with a suffix. */
            bad +=
                strncmp(a[i].tables[j].name, src->name, strlen(src->name)) != 0;
            dup += strcmp(a[i].tables[j].name, src->name) != 0;
        }
    }
    CHECK(bad == 0);
    /* 200 draws of T uniform in [10, 59] reach both ends nearly surely;
     * a pool of 856 gives some repeated tables (birthday problem). */
    CHECK(tmin <= 12 && tmax >= 57);
    CHECK(dup > 0);

    /* Deterministic, and task j does not depend on the count. */
    p.count = 30;
    CHECK(task_generate(&p, pool, npool, &b, &d) == 0);
    CHECK(b != NULL && a != NULL && tasks_equal(a, b, 30));
    task_array_free(b, 30);
    p.seed = 9;
    CHECK(task_generate(&p, pool, npool, &b, &d) == 0);
    CHECK(b != NULL && a != NULL && !tasks_equal(a, b, 30));
    task_array_free(b, 30);
    task_array_free(a, 200);
}

static void test_task_names(void)
{
    struct table pool[2];
    struct task_params p;
    struct task *t = NULL;
    struct sd_diag d;
    size_t i;

    memset(pool, 0, sizeof(pool));
    snprintf(pool[0].name, sizeof(pool[0].name), "a");
    snprintf(pool[1].name, sizeof(pool[1].name), "a_2"); /* a trap */
    pool[0].rows = pool[1].rows = 1000;
    pool[0].dim = pool[1].dim = 4;
    task_params_default(&p);
    p.count = 5;
    p.min_tables = p.max_tables = 12;
    CHECK(task_generate(&p, pool, 2, &t, &d) == 0);
    for (i = 0; t != NULL && i < p.count; i++) {
        CHECK(t[i].ntables == 12);
        CHECK(names_unique(&t[i]));
    }
    task_array_free(t, p.count);

    /* One table drawn 8 times: "a", "a_2", .., "a_8" in order. */
    p.min_tables = p.max_tables = 8;
    p.count = 1;
    CHECK(task_generate(&p, pool, 1, &t, &d) == 0);
    CHECK(t != NULL && strcmp(t[0].tables[0].name, "a") == 0);
    CHECK(t != NULL && strcmp(t[0].tables[1].name, "a_2") == 0);
    CHECK(t != NULL && strcmp(t[0].tables[7].name, "a_8") == 0);
    task_array_free(t, 1);

    /* A name of the longest length: suffixes still fit and stay unique. */
    memset(pool[0].name, 'n', TABLE_NAME_MAX - 1);
    pool[0].name[TABLE_NAME_MAX - 1] = '\0';
    p.min_tables = p.max_tables = 15;
    CHECK(task_generate(&p, pool, 1, &t, &d) == 0);
    CHECK(t != NULL && names_unique(&t[0]));
    for (i = 0; t != NULL && i < 15; i++)
        CHECK(strlen(t[0].tables[i].name) == TABLE_NAME_MAX - 1);
    task_array_free(t, 1);
}

static void test_task_errors(const struct table *pool, size_t npool)
{
    static struct task sentinel;
    struct task_params p;
    struct task *t = &sentinel;
    struct table huge;
    struct sd_diag d;

    task_params_default(&p);
    p.min_tables = 0;
    CHECK(task_generate(&p, pool, npool, &t, &d) == SD_EINVAL);
    p.min_tables = 20;
    p.max_tables = 19;
    CHECK(task_generate(&p, pool, npool, &t, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "tables per task") != NULL);
    task_params_default(&p);
    p.count = 0;
    CHECK(task_generate(&p, pool, npool, &t, &d) == SD_EINVAL);
    task_params_default(&p);
    CHECK(task_generate(&p, pool, 0, &t, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "pool") != NULL);
    /* A cap no draw can meet. */
    memset(&huge, 0, sizeof(huge));
    snprintf(huge.name, sizeof(huge.name), "huge");
    huge.rows = (int64_t)1 << 40;
    huge.dim = 4;
    CHECK(task_generate(&p, &huge, 1, &t, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "task 0") != NULL);
    CHECK(t == &sentinel);
    /* Nor a table with no rows. */
    huge.rows = 0;
    CHECK(task_generate(&p, &huge, 1, &t, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "rows") != NULL);
    CHECK(t == &sentinel);
}

int main(void)
{
    struct synth_params sp;
    struct table *pool = NULL;

    test_rng();
    test_synth();
    test_synth_full_batch();
    synth_params_default(&sp);
    sp.batch_size = 64;
    CHECK(synth_tables(&sp, 2, &pool) == 0);
    if (pool != NULL) {
        test_tasks(pool, sp.count);
        test_task_errors(pool, sp.count);
    }
    test_task_names();
    free(pool);
    return tap_done();
}
