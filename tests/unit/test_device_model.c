/*
 * The cost model on a kernels/ device, checked on the cpu backend (the
 * specification): kern_net scores equal the planner's net_tables_ms() bit
 * for bit, batch argument checks, the cpu sgemm against a double-precision
 * product in every transposition, training through the gemm hook (every
 * product goes through it; a failing product stops training with its code;
 * the cpu device's sgemm trains to the CBLAS model within the tolerance
 * docs/gpu.md states), the idle gate's decision, and the run-time library
 * probe.  Randomised: prints its seed; `-s SEED` replays one.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "profiler.h"
#include "shardd/sort.h"

#define NSHARDS    300
#define MAX_TABLES 15
/* Training through another sgemm, 30 epochs: the predictions' relative
 * differences, median and 95th percentile, within these (docs/gpu.md). */
#define TRAIN_TOL_MEDIAN 1e-2
#define TRAIN_TOL_P95    5e-2

static uint64_t seed;

/* n random tables with plausible features (not from traces). */
static void random_tables(struct rng *g, struct table *t, size_t n)
{
    size_t i;
    int b;

    for (i = 0; i < n; i++) {
        double sum = 0, keep = 0.8 + 0.2 * rng_uniform(g);
        double skew = 0.5 + 3.5 * rng_uniform(g);

        memset(&t[i], 0, sizeof(t[i]));
        snprintf(t[i].name, sizeof(t[i].name), "t%zu", i);
        t[i].rows = (int64_t)pow(10.0, 2.0 + 5.0 * rng_uniform(g));
        t[i].dim = 4 << rng_below(g, 6);
        t[i].pooling_factor = 50 * rng_uniform(g);
        t[i].dtype = i % 3 == 2 ? TABLE_DTYPE_FP16 : TABLE_DTYPE_FP32;
        for (b = 0; b < TABLE_NBINS; b++)
            sum += (t[i].bins[b] = exp(-b / skew));
        for (b = 0; b < TABLE_NBINS; b++)
            t[i].bins[b] *= keep / sum;
    }
}

struct shards {
    struct table tables[NSHARDS * MAX_TABLES];
    struct train_sample s[NSHARDS];
};

/* NSHARDS shards of 1 .. MAX_TABLES tables; every 50th is empty. */
static void make_shards(struct shards *sh, uint64_t sd)
{
    struct rng g;
    size_t i, k = 0, nt;

    rng_seed(&g, sd);
    for (i = 0; i < NSHARDS; i++) {
        nt = i % 50 == 7 ? 0 : 1 + (size_t)rng_below(&g, MAX_TABLES);
        random_tables(&g, &sh->tables[k], nt);
        sh->s[i].tables = &sh->tables[k];
        sh->s[i].ntables = nt;
        sh->s[i].ms = 1;
        k += nt;
    }
}

/* Model m resident on the cpu backend scores every shard as the planner
 * does, to the bit. */
static void check_parity(const struct cost_net *m, const struct shards *sh,
                         const char *what)
{
    struct kern_net *net = NULL;
    double ms[NSHARDS], worst = 0;
    struct sd_diag d;
    size_t i, exact = 0;

    CHECK(prof_net_upload(&kern_backend_cpu, 0, m, &net, &d) == 0);
    if (net == NULL)
        return;
    CHECK(kern_net_bytes(net) == net_packed_nparams(m) * sizeof(float));
    CHECK(kern_net_backend(net) == &kern_backend_cpu);
    CHECK(prof_net_score_tables(net, m, sh->s, NSHARDS, ms, &d) == 0);
    for (i = 0; i < NSHARDS; i++) {
        double want = net_tables_ms(m, sh->s[i].tables, sh->s[i].ntables);

        exact += ms[i] == want;
        if (fabs(ms[i] - want) / (want > 0 ? want : 1) > worst)
            worst = fabs(ms[i] - want) / (want > 0 ? want : 1);
        if (sh->s[i].ntables == 0)
            CHECK(ms[i] == 0);
    }
    printf("cpu kern_net vs net_tables_ms (%s): %zu of %d equal, worst "
           "relative difference %.3g\n",
           what, exact, NSHARDS, worst);
    CHECK(exact == NSHARDS);
    kern_net_close(net);
    kern_net_close(NULL);
}

static void test_net_parity(const struct shards *sh)
{
    const struct cost_net *m = net_embedded(NULL);
    struct kern_net_dims dims = {NET_IN, NET_H1, NET_LAT, NET_H2,
                                 KERN_NET_HEAD_SOFTPLUS};
    struct cost_net *v3;
    struct sd_diag d;
    struct rng g;
    int i, o;

    CHECK(kern_net_nparams(&dims) == NET_NPARAMS);
    dims.h1 = 0;
    CHECK(kern_net_nparams(&dims) == 0);
    dims.h1 = KERN_NET_DIM_MAX + 1;
    CHECK(kern_net_nparams(&dims) == 0);
    /* A prior head needs its three units; an unknown head is refused. */
    dims.h1 = NET_H1;
    dims.head = KERN_NET_HEAD_PRIOR;
    CHECK(kern_net_nparams(&dims) == NET_NPARAMS);
    dims.h2 = 2;
    CHECK(kern_net_nparams(&dims) == 0);
    dims.h2 = NET_H2;
    dims.head = 2;
    CHECK(kern_net_nparams(&dims) == 0);
    CHECK(m != NULL);
    if (m == NULL)
        return;
    check_parity(m, sh, "the embedded model");

    /* With derived inputs (format 3): W1 of more columns, the fp16 tables'
     * bytes among the inputs. */
    v3 = net_alloc();
    CHECK(v3 != NULL);
    if (v3 == NULL)
        return;
    memcpy(v3->profile, m->profile, sizeof(v3->profile));
    v3->batch_size = m->batch_size;
    memcpy(v3->mean, m->mean, sizeof(v3->mean));
    memcpy(v3->std, m->std, sizeof(v3->std));
    memcpy(v3->p, m->p, sizeof(v3->p));
    v3->io = m->io;
    CHECK(net_extras_parse("v2", &v3->x, &d) == 0);
    rng_seed(&g, seed + 1);
    for (i = 0; i < v3->x.n; i++) {
        v3->mean[NET_IN + i] = (float)(5 * rng_uniform(&g));
        v3->std[NET_IN + i] = (float)(1 + 3 * rng_uniform(&g));
        for (o = 0; o < NET_H1; o++)
            v3->xw[o * NET_XMAX + i] = (float)(0.1 * rng_normal(&g));
    }
    check_parity(v3, sh, "format 3");
    free(v3);
}


static void test_net_args(void)
{
    const struct cost_net *m = net_embedded(NULL);
    struct kern_net *net = NULL;
    float x[2 * NET_IN_MAX] = {0}; /* rows of net_nin(m) inputs */
    size_t off[3] = {0, 1, 2}, bad[3] = {1, 1, 2}, down[4] = {0, 2, 1, 2};
    double ms[2] = {-1, -1};
    struct sd_diag d;

    CHECK(prof_net_upload(&kern_backend_cpu, -1, m, &net, &d) == SD_EINVAL);
    CHECK(prof_net_upload(&kern_backend_cpu, 1 << 20, m, &net, &d) ==
          SD_EINVAL);
    CHECK(net == NULL);
    CHECK(prof_net_upload(&kern_backend_cpu, 0, m, &net, &d) == 0);
    if (net == NULL)
        return;
    CHECK(kern_net_score(net, x, 2, bad, 2, ms, &d) == SD_EINVAL);
    CHECK(kern_net_score(net, x, 2, down, 3, ms, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "decreases") != NULL);
    CHECK(kern_net_score(net, x, 3, off, 2, ms, &d) == SD_EINVAL);
    CHECK(ms[0] == -1); /* nothing written on failure */
    CHECK(kern_net_score(net, x, 2, off, 2, ms, &d) == 0);
    CHECK(ms[0] > 0 && ms[0] == ms[1]); /* the same inputs, the same cost */
    CHECK(kern_net_score(net, x, 0, off, 0, ms, &d) == 0);
    kern_net_close(net);
}

/* C = alpha op(A) op(B) + beta C in double, for reference. */
static double ref_at(bool ta, bool tb, int k, const float *a, int lda,
                     const float *b, int ldb, int i, int j)
{
    double s = 0;
    int p;

    for (p = 0; p < k; p++)
        s += (double)(ta ? a[p * lda + i] : a[i * lda + p]) *
             (double)(tb ? b[j * ldb + p] : b[p * ldb + j]);
    return s;
}

static void test_sgemm(struct rng *g)
{
    enum { M = 37, N = 23, K = 51, PAD = 3 };
    static float a[K * (M + PAD) + M * (K + PAD)], b[K * (N + PAD) * 2];
    static float c[M * (N + PAD)];
    struct kern_blas *bl = NULL;
    struct sd_diag d;
    int ta, tb, beta_case, i, j, lda, ldb, ldc = N + PAD, bad = 0;

    for (i = 0; i < (int)(sizeof(a) / sizeof(a[0])); i++)
        a[i] = (float)rng_normal(g);
    for (i = 0; i < (int)(sizeof(b) / sizeof(b[0])); i++)
        b[i] = (float)rng_normal(g);
    CHECK(kern_blas_open(&kern_backend_cpu, 0, &bl, &d) == 0);
    if (bl == NULL)
        return;
    CHECK(kern_blas_backend(bl) == &kern_backend_cpu);
    for (ta = 0; ta < 2; ta++)
        for (tb = 0; tb < 2; tb++)
            for (beta_case = 0; beta_case < 2; beta_case++) {
                float beta = beta_case ? 0.5f : 0.0f;

                lda = (ta ? M : K) + PAD;
                ldb = (tb ? K : N) + PAD;
                for (i = 0; i < M * ldc; i++) /* NaN must not leak at 0 */
                    c[i] = beta_case ? 1.0f : NAN;
                CHECK(kern_blas_sgemm(bl, ta, tb, M, N, K, 2.0f, a, lda, b, ldb,
                                      beta, c, ldc, &d) == 0);
                for (i = 0; i < M; i++)
                    for (j = 0; j < N; j++) {
                        double want =
                            2.0 * ref_at(ta, tb, K, a, lda, b, ldb, i, j) +
                            (beta_case ? 0.5 : 0.0);

                        bad += !(fabs(c[i * ldc + j] - want) <=
                                 1e-4 * (1 + fabs(want)));
                    }
                for (i = 0; i < M; i++) /* the padding is left alone */
                    bad += c[i * ldc + N] == c[i * ldc + N] && !beta_case;
            }
    CHECK(bad == 0);
    CHECK(kern_blas_sgemm(bl, false, false, 2, 2, 2, 1, a, 1, b, 2, 0, c, 2,
                          &d) == SD_EINVAL); /* lda < k */
    CHECK(kern_blas_sgemm(bl, false, false, -1, 2, 2, 1, a, 2, b, 2, 0, c, 2,
                          &d) == SD_EINVAL);
    kern_blas_close(bl);
}

/* A hook that counts products, hands them to CBLAS, and fails the
 * fail_at-th (0: never). */
struct counting {
    long calls, fail_at;
};

static int counting_sgemm(void *ctx, bool ta, bool tb, int m, int n, int k,
                          float alpha, const float *a, int lda, const float *b,
                          int ldb, float beta, float *c, int ldc)
{
    struct counting *cn = ctx;

    if (++cn->calls == cn->fail_at)
        return SD_EDEVICE;
    return net_gemm_cblas.sgemm(net_gemm_cblas.ctx, ta, tb, m, n, k, alpha, a,
                                lda, b, ldb, beta, c, ldc);
}

/* A hook that rounds differently from CBLAS, as another device's sgemm
 * does: each result moved by up to 4 ulps, pseudo-randomly. */
static int jitter_sgemm(void *ctx, bool ta, bool tb, int m, int n, int k,
                        float alpha, const float *a, int lda, const float *b,
                        int ldb, float beta, float *c, int ldc)
{
    uint64_t *state = ctx;
    int i, j, u, rv;

    rv = net_gemm_cblas.sgemm(NULL, ta, tb, m, n, k, alpha, a, lda, b, ldb,
                              beta, c, ldc);
    for (i = 0; i < m; i++)
        for (j = 0; j < n; j++) {
            float *x = &c[(size_t)i * (size_t)ldc + (size_t)j];
            uint64_t h =
                rng_derive(*state, (uint64_t)i * 1000003u + (uint64_t)j);

            for (u = 0; u < (int)(h % 5); u++)
                *x = nextafterf(*x, (h >> 8) & 1 ? INFINITY : -INFINITY);
        }
    ++*state;
    return rv;
}

/* Samples whose cost is a known function of their tables. */
static void label(struct shards *sh, size_t n)
{
    size_t i, j;

    for (i = 0; i < n; i++) {
        double ms = 0.05;

        for (j = 0; j < sh->s[i].ntables; j++)
            ms += 1e-4 * sh->s[i].tables[j].dim *
                  (1 + sh->s[i].tables[j].pooling_factor) *
                  (1 + 0.1 * log10((double)sh->s[i].tables[j].rows));
        sh->s[i].ms = ms;
    }
}

static void train_with(const struct shards *sh, size_t n,
                       const struct net_gemm *g, int32_t epochs,
                       struct cost_net **out, int *rv)
{
    struct train_params p;
    struct sd_diag d;

    train_params_default(&p);
    p.seed = 7;
    p.max_epochs = epochs;
    p.batch = 64;
    p.gemm = g;
    *out = NULL;
    *rv = net_train(&p, sh->s, n, "test", 4096, out, &d);
}

/* How two models' predictions differ over the first n samples, relative:
 * the median, the 95th percentile and the largest (all 1 when a model is
 * missing). */
struct diff {
    double median, p95, max;
};

static struct diff differences(const struct cost_net *a,
                               const struct cost_net *b,
                               const struct shards *sh, size_t n)
{
    struct diff r = {1, 1, 1};
    double e[NSHARDS], x, y;
    size_t i;

    if (a == NULL || b == NULL || n == 0)
        return r;
    for (i = 0; i < n; i++) {
        x = net_tables_ms(a, sh->s[i].tables, sh->s[i].ntables);
        y = net_tables_ms(b, sh->s[i].tables, sh->s[i].ntables);
        e[i] = fabs(x - y) / x;
    }
    qsort(e, n, sizeof(e[0]), sd_cmp_double);
    r.median = e[n / 2];
    r.p95 = e[(size_t)(0.95 * (double)(n - 1))];
    r.max = e[n - 1];
    return r;
}

/* A physical-prior model (format 4): the device's prior head, scored as
 * the planner scores it, to the bit.  Trained for a few epochs on the
 * non-empty shards, labelled. */
static void test_prior_parity(const struct shards *sh)
{
    static struct shards fit;
    struct cost_net *m = NULL;
    struct train_params p;
    struct sd_diag d;
    size_t i, n = 0;

    for (i = 0; i < NSHARDS; i++)
        if (sh->s[i].ntables > 0)
            fit.s[n++] = sh->s[i];
    label(&fit, n);
    train_params_default(&p);
    p.max_epochs = 5;
    CHECK(net_extras_parse("v3", &p.extras, &d) == 0);
    if (!CHECK_OK(net_train(&p, fit.s, n, "cpu/test/4096", 4096, &m, &d),
                  d.msg))
        return;
    CHECK(net_has_prior(m));
    check_parity(m, sh, "format 4, the prior");
    free(m);
}

static void test_train_hook(struct shards *sh)
{
    struct cost_net *ref = NULL, *hooked = NULL, *dev = NULL, *failed = NULL;
    struct counting cn = {0, 0};
    struct net_gemm g = {"counting", counting_sgemm, &cn};
    uint64_t jitter = 1;
    struct net_gemm jg = {"jitter", jitter_sgemm, &jitter};
    struct prof_gemm pg;
    struct sd_diag d;
    size_t n = 0, i;
    struct diff df;
    int rv;

    /* The non-empty shards, labelled. */
    for (i = 0; i < NSHARDS; i++)
        if (sh->s[i].ntables > 0)
            sh->s[n++] = sh->s[i];
    label(sh, n);
    train_with(sh, n, NULL, 30, &ref, &rv);
    CHECK(rv == 0 && ref != NULL);
    train_with(sh, n, &g, 30, &hooked, &rv);
    CHECK(rv == 0 && hooked != NULL);
    /* Every product went through the hook: the same products, the same
     * weights, and eight a step (30 epochs of ceil(n * 0.8 / 64) steps,
     * plus three per validation minibatch). */
    CHECK(ref && hooked && memcmp(ref->p, hooked->p, sizeof(ref->p)) == 0);
    CHECK(cn.calls >= 30L * 8 * (long)((n * 8 / 10 + 63) / 64));
    printf("training through the hook: %ld products\n", cn.calls);

    cn.calls = 0;
    cn.fail_at = 5;
    train_with(sh, n, &g, 30, &failed, &rv);
    CHECK(rv == SD_EDEVICE);
    CHECK(failed == NULL);

    /* The cpu device's sgemm (plain loops) trains like CBLAS. */
    CHECK(prof_gemm_open(&kern_backend_cpu, 0, &pg, &d) == 0);
    train_with(sh, n, &pg.hook, 30, &dev, &rv);
    prof_gemm_close(&pg);
    CHECK(rv == 0 && dev != NULL);
    df = differences(ref, dev, sh, n);
    printf("cpu-device sgemm vs CBLAS, 30 epochs: predictions differ by "
           "%.3g (median), %.3g (p95), %.3g (max) relative\n",
           df.median, df.p95, df.max);
    CHECK(df.median <= TRAIN_TOL_MEDIAN && df.p95 <= TRAIN_TOL_P95);
    free(ref);
    free(hooked);
    free(dev);

    /* Products that round differently (up to 4 ulps, as another device's
     * sgemm does) train, over 30 epochs, to a model as good: validation
     * MAPE within 2 points.  Prediction by prediction they drift apart on
     * some shard sets (a ReLU that flips moves a few samples more, and later
     * epochs amplify it: p95 0.14 relative at seed 1795607219), so the
     * per-prediction tolerance holds for one epoch only (above). */
    train_with(sh, n, NULL, 30, &ref, &rv);
    train_with(sh, n, &jg, 30, &dev, &rv);
    df = differences(ref, dev, sh, n);
    printf("products rounded differently, 30 epochs: predictions differ by "
           "%.3g (median), %.3g (p95), %.3g (max) relative; validation MAPE "
           "%.4f vs %.4f\n",
           df.median, df.p95, df.max, dev ? dev->metrics.val_mape : -1,
           ref ? ref->metrics.val_mape : -1);
    CHECK(df.max > 0); /* the jitter did change something */
    CHECK(ref != NULL && dev != NULL &&
          fabs(dev->metrics.val_mape - ref->metrics.val_mape) <= 0.02);
    free(ref);
    free(dev);
}

static void test_busy(void)
{
    struct kern_busy_limits lim;
    struct kern_device_load l;
    char why[200];

    kern_busy_limits_default(&lim);
    memset(&l, 0, sizeof(l));
    l.mem_total_bytes = UINT64_C(80) << 30;
    l.mem_used_bytes = UINT64_C(1) << 30;
    l.own_idle_ms = INT64_MAX;
    CHECK(!kern_busy_decide(&l, &lim, why, sizeof(why)));
    CHECK(why[0] == '\0');
    l.other_procs = 1;
    l.other_pid = 4242;
    CHECK(kern_busy_decide(&l, &lim, why, sizeof(why)));
    CHECK(strstr(why, "4242") != NULL);
    l.other_procs = -1; /* unknown: the other readings decide */
    CHECK(!kern_busy_decide(&l, &lim, why, sizeof(why)));
    l.mem_used_bytes = UINT64_C(20) << 30; /* 20 of 80 GiB, none ours */
    CHECK(kern_busy_decide(&l, &lim, why, sizeof(why)));
    CHECK(strstr(why, "memory") != NULL);
    l.own_mem_bytes = UINT64_C(19) << 30; /* ours, mostly */
    CHECK(!kern_busy_decide(&l, &lim, NULL, 0));
    l.util_pct = 90; /* busy, and not from us: idle since forever */
    CHECK(kern_busy_decide(&l, &lim, why, sizeof(why)));
    CHECK(strstr(why, "90%") != NULL);
    l.own_idle_ms = 100; /* we just used it: utilisation is ours */
    CHECK(!kern_busy_decide(&l, &lim, why, sizeof(why)));
    /* The cpu backend cannot tell: never busy. */
    CHECK(kern_device_load(&kern_backend_cpu, 0, &l, NULL) == SD_EUNSUPPORTED);
    CHECK(!kern_device_busy(&kern_backend_cpu, 0, why, sizeof(why)));
    CHECK(!kern_device_busy(NULL, 0, NULL, 0));
}

static void test_lib_probe(void)
{
    const char *libs[] = {"cublas", "nccl", "nvml"};
    char detail[512];
    size_t i;
    int rv;

    CHECK(kern_lib_probe("blas", detail, sizeof(detail)) == SD_EINVAL);
    for (i = 0; i < 3; i++) {
        rv = kern_lib_probe(libs[i], detail, sizeof(detail));
        printf("library %s: %s (%s)\n", libs[i], rv == 0 ? "loads" : "no",
               detail);
        CHECK(rv == 0 || rv == SD_EUNSUPPORTED);
        /* Where the library is found, every symbol the backend uses must
         * be in it: a misspelt name fails here, without a GPU. */
        CHECK(strstr(detail, "no symbol") == NULL);
        if (!kern_have_cuda())
            CHECK(rv == SD_EUNSUPPORTED);
    }
}

int main(int argc, char **argv)
{
    static struct shards sh;
    struct rng g;

    seed = argc > 2 && strcmp(argv[1], "-s") == 0 ? strtoull(argv[2], NULL, 10)
                                                  : (uint64_t)time(NULL);
    printf("seed %llu\n", (unsigned long long)seed);
    rng_seed(&g, seed);
    make_shards(&sh, seed);
    test_net_parity(&sh);
    test_prior_parity(&sh);
    test_net_args();
    test_sgemm(&g);
    test_busy();
    test_lib_probe();
    test_train_hook(&sh);
    return tap_done();
}
