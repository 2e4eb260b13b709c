/*
 * Throughput of the fused table-batched embedding bag (forward + backward +
 * exact SGD) per backend: for a few shard shapes, the median step time,
 * its spread ((p90 - p10) / median over the timed repeats) and
 * training samples per second (batch / median).  Lookups are synthetic and
 * Zipf-like: log-uniform ranks (Zipf with exponent 1) hashed onto rows.
 * Two shapes run again with fp16 weights, right after their fp32 row, with
 * the ratio of the medians: a large table that misses the caches (half the
 * bytes to move) and a small one that stays in L2 (the conversions' cost).
 *
 * The memory tiers: one table (1,000,000 rows of 128 fp32 columns, batch
 * 4096, 20 lookups a bag) timed in HBM, in fused_uvm (host memory read
 * over the link) and in fused_uvm_caching at load factors 0.5 to 0.01,
 * each with its cache's share of missed lookups (kern_cache_layout(), the
 * same on every backend) and its median over the HBM one.  A backend that
 * does not time a tier (cpu: HBM only) says so on that tier's line.
 *
 * usage: bench_kernels [cpu|cuda|all] [repeats] [flush|noflush]
 *                      [shapes|tiers|both]
 *        (defaults: all, 10 repeats, cache flushed before each timed step,
 *        both cases)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"

#define MAX_TABLES 15

struct bench_shape {
    const char *name;
    int ntables;
    int32_t dim[MAX_TABLES];
    int64_t rows[MAX_TABLES];
    int pool;      /* mean bag length; lengths uniform in [0, 2 pool] */
    int64_t batch; /* bags per table */
    bool gpu_only; /* too slow for a 2-core cpu run */
    /* Every table's dtype; a non-fp32 shape follows its fp32 twin, and the
     * ratio of their medians is printed. */
    enum kern_dtype dtype;
};

static const struct bench_shape shapes[] = {
    {"1 x d16", 1, {16}, {100000}, 20, 4096, false, KERN_DTYPE_FP32},
    {"1 x d64 small", 1, {64}, {2000}, 20, 4096, false, KERN_DTYPE_FP32},
    {"1 x d64 small", 1, {64}, {2000}, 20, 4096, false, KERN_DTYPE_FP16},
    {"1 x d128", 1, {128}, {1000000}, 20, 4096, false, KERN_DTYPE_FP32},
    {"1 x d128", 1, {128}, {1000000}, 20, 4096, false, KERN_DTYPE_FP16},
    {"4 mixed",
     4,
     {16, 64, 128, 64},
     {100000, 4000000, 500000, 1000000},
     15,
     4096,
     false,
     KERN_DTYPE_FP32},
    {"15 mixed",
     15,
     {16, 64, 128, 16, 64, 128, 16, 64, 128, 16, 64, 128, 16, 64, 128},
     {100000, 200000, 100000, 1000000, 500000, 200000, 4000000, 100000, 300000,
      2000000, 100000, 100000, 400000, 800000, 100000},
     10,
     4096,
     false,
     KERN_DTYPE_FP32},
    {"4 mixed b64k",
     4,
     {16, 64, 128, 64},
     {100000, 4000000, 500000, 1000000},
     15,
     65536,
     false,
     KERN_DTYPE_FP32},
    {"15 mixed b64k",
     15,
     {16, 64, 128, 16, 64, 128, 16, 64, 128, 16, 64, 128, 16, 64, 128},
     {100000, 200000, 100000, 1000000, 500000, 200000, 4000000, 100000, 300000,
      2000000, 100000, 100000, 400000, 800000, 100000},
     10,
     65536,
     true,
     KERN_DTYPE_FP32},
};

static uint64_t rng_state = 12345;

static uint64_t next(void)
{
    uint64_t z = (rng_state += UINT64_C(0x9e3779b97f4a7c15));

    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* A Zipf-like row: rank r = floor(rows^u) - 1 has P(r) ~ 1/(r+1); the
 * rank is hashed so that hot rows spread over the table. */
static int64_t zipf_row(int64_t rows)
{
    double u = (double)(next() >> 11) * 0x1.0p-53;
    uint64_t rank = 0, h;
    double x = 1.0, base = (double)rows;

    /* rows^u without libm: exp(u ln rows) by repeated square roots */
    while (u > 1e-9 && base > 1.0000001) {
        base = __builtin_sqrt(base);
        u *= 2.0;
        if (u >= 1.0) {
            x *= base;
            u -= 1.0;
        }
    }
    rank = (uint64_t)x - 1;
    h = (rank + 1) * UINT64_C(0x9e3779b97f4a7c15);
    h ^= h >> 29;
    return (int64_t)(h % (uint64_t)rows);
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The table of the tiers case. */
static const struct bench_shape tier_shape = {
    "1 x d128", 1, {128}, {1000000}, 20, 4096, false, KERN_DTYPE_FP32};
static const double tier_lf[] = {0.5, 0.2, 0.05, 0.01};

/* Times one shape with its tables in `tier` (a cache of lf of the rows),
 * its line named `name`; returns its median in ms, or -1 when it failed or
 * was refused. */
static double run_tiered(const struct kern_backend *be,
                         const struct bench_shape *sh, const char *name,
                         int repeats, bool flush, enum kern_tier tier,
                         double lf)
{
    struct kern_table_desc tables[MAX_TABLES];
    struct kern_shard_desc desc;
    struct kern_timing_opts o;
    struct kern_timing tm;
    struct kern_shard *s = NULL;
    struct sd_diag d = {{0}};
    int64_t b, i, len, *off, *idx, lookups = 0;
    double t0, t_open, median = -1.0;
    int t, rv;

    memset(tables, 0, sizeof(tables));
    for (t = 0; t < sh->ntables; t++) {
        off = calloc((size_t)sh->batch + 1, sizeof(*off));
        idx = calloc((size_t)(sh->batch * 2 * sh->pool) + 1, sizeof(*idx));
        if (off == NULL || idx == NULL) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
        for (b = 0; b < sh->batch; b++) {
            len = (int64_t)(next() % (uint64_t)(2 * sh->pool + 1));
            for (i = 0; i < len; i++)
                idx[off[b] + i] = zipf_row(sh->rows[t]);
            off[b + 1] = off[b] + len;
        }
        tables[t].rows = sh->rows[t];
        tables[t].dim = sh->dim[t];
        tables[t].nindices = off[sh->batch];
        tables[t].offsets = off;
        tables[t].indices = idx;
        tables[t].dtype = sh->dtype;
        tables[t].tier = tier;
        if (tier == KERN_TIER_UVM_CACHING)
            tables[t].cache_rows = (int64_t)((double)sh->rows[t] * lf + 0.999);
        lookups += off[sh->batch];
    }
    memset(&desc, 0, sizeof(desc));
    desc.ntables = (size_t)sh->ntables;
    desc.tables = tables;
    desc.nbags = sh->batch;
    desc.learning_rate = 0.01f;
    desc.seed = 1;

    t0 = now_s();
    rv = be->shard_open(0, &desc, &s, &d);
    t_open = now_s() - t0;
    if (rv != 0) {
        printf("%-5s %-14s %-4s open failed: %s (%s)\n", be->name, sh->name,
               kern_dtype_name(sh->dtype), sd_err_name(rv), d.msg);
        goto out;
    }
    kern_timing_opts_default(&o);
    o.warmup = 2;
    o.flush = flush;
    o.repeats = repeats;
    rv = be->shard_time(s, &o, &tm);
    if (rv != 0) {
        printf("%-5s %-14s %-4s time failed: %s\n", be->name, sh->name,
               kern_dtype_name(sh->dtype), sd_err_name(rv));
    } else {
        printf("%-5s %-14s %-4s %6lld %9lld %9.3f %9.3f %9.3f %7.3f %11.0f "
               "%6.1f\n",
               be->name, name, kern_dtype_name(sh->dtype), (long long)sh->batch,
               (long long)lookups, tm.median_ms, tm.p10_ms, tm.p90_ms,
               (tm.p90_ms - tm.p10_ms) / tm.median_ms,
               (double)sh->batch / (tm.median_ms * 1e-3), t_open);
        median = tm.median_ms;
    }
    be->shard_close(s);
out:
    for (t = 0; t < sh->ntables; t++) {
        free((void *)tables[t].offsets);
        free((void *)tables[t].indices);
    }
    return median;
}

/* Times one shape in HBM; its median in ms, or -1. */
static double run_shape(const struct kern_backend *be,
                        const struct bench_shape *sh, int repeats, bool flush)
{
    return run_tiered(be, sh, sh->name, repeats, flush, KERN_TIER_HBM, 0);
}

/* The share of tier_shape's lookups that miss a cache of lf of its rows
 * (drawing the lookups again from the same state as the timed run). */
static double tier_miss(double lf, uint64_t rng)
{
    const struct bench_shape *sh = &tier_shape;
    struct kern_table_desc t;
    int64_t b, i, len, *off, *idx, nmiss = 0;
    double miss = -1.0;

    rng_state = rng;
    off = calloc((size_t)sh->batch + 1, sizeof(*off));
    idx = calloc((size_t)(sh->batch * 2 * sh->pool) + 1, sizeof(*idx));
    if (off == NULL || idx == NULL)
        goto out;
    for (b = 0; b < sh->batch; b++) {
        len = (int64_t)(next() % (uint64_t)(2 * sh->pool + 1));
        for (i = 0; i < len; i++)
            idx[off[b] + i] = zipf_row(sh->rows[0]);
        off[b + 1] = off[b] + len;
    }
    memset(&t, 0, sizeof(t));
    t.rows = sh->rows[0];
    t.dim = sh->dim[0];
    t.nindices = off[sh->batch];
    t.offsets = off;
    t.indices = idx;
    t.tier = KERN_TIER_UVM_CACHING;
    t.cache_rows = (int64_t)((double)t.rows * lf + 0.999);
    if (t.nindices > 0 && kern_cache_layout(&t, NULL, NULL, &nmiss) == 0)
        miss = (double)nmiss / (double)t.nindices;
out:
    free(off);
    free(idx);
    return miss;
}

/* The tiers case on one backend: HBM, fused_uvm, then each cache; a
 * line for each as the shapes have (its tier in the shape's column), then
 * its share of missed lookups and its median over the HBM one. */
static void run_tiers(const struct kern_backend *be, int repeats, bool flush)
{
    const struct bench_shape *sh = &tier_shape;
    uint64_t rng = rng_state;
    enum kern_tier tier;
    double hbm, ms, miss, lf;
    char name[32];
    size_t k, nlf = sizeof(tier_lf) / sizeof(tier_lf[0]);

    printf("# %s memory tiers: %s, %lld rows, batch %lld, %d lookups a bag; "
           "miss: the share of lookups read from host memory\n",
           be->name, sh->name, (long long)sh->rows[0], (long long)sh->batch,
           sh->pool);
    hbm = run_tiered(be, sh, "d128 fused", repeats, flush, KERN_TIER_HBM, 0);
    for (k = 0; k <= nlf; k++) {
        tier = k == 0 ? KERN_TIER_UVM : KERN_TIER_UVM_CACHING;
        lf = k == 0 ? 0 : tier_lf[k - 1];
        if (k == 0)
            snprintf(name, sizeof(name), "d128 uvm");
        else
            snprintf(name, sizeof(name), "d128 lf %.2f", lf);
        miss = k == 0 ? 1.0 : tier_miss(lf, rng);
        if ((be->tiers & (1u << tier)) == 0) {
            printf("%-5s %-14s %-4s miss %.4f: %s not timed on this backend "
                   "(its host-link time is modelled)\n",
                   be->name, name, kern_dtype_name(sh->dtype), miss,
                   kern_tier_name(tier));
            continue;
        }
        rng_state = rng; /* the same lookups as the HBM run */
        ms = run_tiered(be, sh, name, repeats, flush, tier, lf);
        if (ms > 0.0 && hbm > 0.0)
            printf("%-5s %-14s %-4s miss %.4f: %s median %.2f x fused\n",
                   be->name, name, kern_dtype_name(sh->dtype), miss,
                   kern_tier_name(tier), ms / hbm);
    }
}

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "all";
    const struct kern_backend *bes[2];
    struct kern_device_info info;
    int nbe = 0, i, repeats = argc > 2 ? atoi(argv[2]) : 10;
    double ms, fp32_ms = -1.0;
    uint64_t fp32_rng = 0;
    bool flush = !(argc > 3 && strcmp(argv[3], "noflush") == 0);
    const char *cases = argc > 4 ? argv[4] : "both";
    bool do_shapes = strcmp(cases, "tiers") != 0;
    bool do_tiers = strcmp(cases, "shapes") != 0;
    size_t k;

    if (repeats < 1)
        repeats = 10;
    if (strcmp(which, "cpu") == 0 || strcmp(which, "all") == 0)
        bes[nbe++] = &kern_backend_cpu;
    if (strcmp(which, "cuda") == 0 || strcmp(which, "all") == 0) {
        bes[nbe] = kern_backend_get("cuda", NULL);
        if (bes[nbe] != NULL)
            nbe++;
        else
            printf("cuda: not available\n");
    }
    for (i = 0; i < nbe; i++) {
        bes[i]->device_info(0, &info);
        printf("# %s device 0: %s; %d repeats after 2 warm-up steps, "
               "cache flush %s\n",
               bes[i]->name, info.name, repeats, flush ? "on" : "off");
    }
    printf("%-5s %-14s %-4s %6s %9s %9s %9s %9s %7s %11s %6s\n", "be", "shape",
           "type", "batch", "lookups", "med_ms", "p10_ms", "p90_ms", "spread",
           "samples/s", "open_s");
    for (i = 0; i < nbe && do_shapes; i++) {
        for (k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
            if (shapes[k].gpu_only && strcmp(bes[i]->name, "cpu") == 0)
                continue;
            /* A twin draws the same lookups as its fp32 row. */
            if (shapes[k].dtype == KERN_DTYPE_FP32)
                fp32_rng = rng_state;
            else
                rng_state = fp32_rng;
            ms = run_shape(bes[i], &shapes[k], repeats, flush);
            if (shapes[k].dtype == KERN_DTYPE_FP32)
                fp32_ms = ms;
            else if (ms > 0.0 && fp32_ms > 0.0)
                printf("%-5s %-14s %s/fp32 median ratio %.3f\n", bes[i]->name,
                       shapes[k].name, kern_dtype_name(shapes[k].dtype),
                       ms / fp32_ms);
        }
    }
    for (i = 0; i < nbe && do_tiers; i++)
        run_tiers(bes[i], repeats, flush);
    return 0;
}
