/*
 * Memory tiers at the kernel interface (kernels.h, enum kern_tier): a
 * zeroed table description is in HBM; the backends' tier masks; the cpu
 * backend refuses a table in host memory with SD_EUNSUPPORTED naming the
 * table and saying its tier is modelled there, and bad tier fields with
 * SD_EINVAL naming the field; kern_cache_layout() on hand-made lookups
 * (which rows a cache holds, where each lookup reads), its invariants on
 * random ones, and its miss rate on lookups made from tables' features
 * beside the planner's miss-rate curve (tier_miss_rate()), which assumes
 * the same ideal cache.  The cuda backend's timing of the tiers needs a
 * GPU: tests/gpu/test_parity_tbe.c.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels.h"
#include "planner.h"

#ifdef SHARDD_HAVE_CUDA
#    include "kern_internal.h" /* kern_backend_cuda: its mask, no GPU needed */
#endif

#define NBAGS 32

static uint64_t rng_state = 20261201;

static uint64_t next(void)
{
    uint64_t z = (rng_state += UINT64_C(0x9e3779b97f4a7c15));

    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* Two tables of a shard with random lookups, owned by the caller. */
struct two {
    struct kern_table_desc t[2];
    int64_t off[2][NBAGS + 1];
    int64_t idx[2][NBAGS * 8];
    struct kern_shard_desc desc;
};

static void two_init(struct two *f)
{
    int64_t b, i, len;
    int k;

    memset(f, 0, sizeof(*f));
    for (k = 0; k < 2; k++) {
        for (b = 0; b < NBAGS; b++) {
            len = (int64_t)(next() % 9);
            for (i = 0; i < len; i++)
                f->idx[k][f->off[k][b] + i] = (int64_t)(next() % 100);
            f->off[k][b + 1] = f->off[k][b] + len;
        }
        f->t[k].rows = 100;
        f->t[k].dim = 8;
        f->t[k].nindices = f->off[k][NBAGS];
        f->t[k].offsets = f->off[k];
        f->t[k].indices = f->idx[k];
    }
    f->desc.ntables = 2;
    f->desc.tables = f->t;
    f->desc.nbags = NBAGS;
    f->desc.learning_rate = 0.1f;
    f->desc.seed = 3;
}

/* A zeroed description is in HBM with no cache, and the cpu backend times
 * it; the enum's zero is HBM. */
static void test_zeroed_is_hbm(void)
{
    const struct kern_backend *cpu = &kern_backend_cpu;
    struct kern_table_desc z;
    struct kern_shard *s = NULL;
    struct sd_diag d = {{0}};
    struct two f;

    memset(&z, 0, sizeof(z));
    CHECK(z.tier == KERN_TIER_HBM && KERN_TIER_HBM == 0);
    CHECK(z.cache_rows == 0);
    two_init(&f);
    CHECK(cpu->shard_open(0, &f.desc, &s, &d) == 0);
    if (s != NULL)
        cpu->shard_close(s);
    CHECK(strcmp(kern_tier_name(KERN_TIER_HBM), "fused") == 0);
    CHECK(strcmp(kern_tier_name(KERN_TIER_UVM), "fused_uvm") == 0);
    CHECK(strcmp(kern_tier_name(KERN_TIER_UVM_CACHING), "fused_uvm_caching") ==
          0);
    CHECK(strcmp(kern_tier_name(KERN_TIER_COUNT), "?") == 0);
}

/* The masks: the cpu backend times HBM only; the cuda backend (when built;
 * its mask needs no GPU) all three. */
static void test_masks(void)
{
    CHECK(kern_backend_cpu.tiers == 1u << KERN_TIER_HBM);
#ifdef SHARDD_HAVE_CUDA
    CHECK(kern_backend_cuda.tiers ==
          (1u << KERN_TIER_HBM | 1u << KERN_TIER_UVM |
           1u << KERN_TIER_UVM_CACHING));
#else
    /* Not a skip: the rest of the test stands without it. */
    printf("note: the cuda backend is not built; its mask is not checked\n");
#endif
}

/* The cpu backend refuses either host tier for the table that has it,
 * named, saying the tier is modelled there; *out stays untouched. */
static void test_cpu_refuses(void)
{
    static const enum kern_tier host[] = {KERN_TIER_UVM, KERN_TIER_UVM_CACHING};
    const struct kern_backend *cpu = &kern_backend_cpu;
    struct kern_shard *s, *untouched = (struct kern_shard *)&s;
    struct sd_diag d;
    struct two f;
    size_t i;

    two_init(&f);
    for (i = 0; i < sizeof(host) / sizeof(host[0]); i++) {
        f.t[1].tier = host[i];
        f.t[1].cache_rows = host[i] == KERN_TIER_UVM_CACHING ? 10 : 0;
        s = untouched;
        d.msg[0] = '\0';
        CHECK(cpu->shard_open(0, &f.desc, &s, &d) == SD_EUNSUPPORTED);
        CHECK(s == untouched);
        CHECK(strstr(d.msg, "tables[1]") != NULL);
        CHECK(strstr(d.msg, kern_tier_name(host[i])) != NULL);
        CHECK(strstr(d.msg, "modelled") != NULL);
        if (strstr(d.msg, "modelled") == NULL)
            fprintf(stderr, "message: %s\n", d.msg);
    }
}

/* Bad tier fields are SD_EINVAL naming the table and field, before any
 * backend's refusal. */
static void test_bad_fields(void)
{
    const struct kern_backend *cpu = &kern_backend_cpu;
    struct kern_shard *s = NULL;
    struct sd_diag d;
    struct two f;

    two_init(&f);
    f.t[0].tier = (enum kern_tier)7;
    CHECK(cpu->shard_open(0, &f.desc, &s, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "tables[0]: tier 7") != NULL);
    two_init(&f);
    f.t[1].cache_rows = 5; /* an HBM table has no cache */
    CHECK(cpu->shard_open(0, &f.desc, &s, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "tables[1]: cache_rows 5 on a fused table") != NULL);
    two_init(&f);
    f.t[1].tier = KERN_TIER_UVM_CACHING;
    f.t[1].cache_rows = 101;
    CHECK(cpu->shard_open(0, &f.desc, &s, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "tables[1]: cache_rows 101 is not in [0, rows 100]") !=
          NULL);
    CHECK(s == NULL);
}

/* One table of 10 rows read 3, 3, 3, 7, 7, 1, 2, 5 (one bag). */
static void hand_table(struct kern_table_desc *t, int64_t *off, int64_t *idx,
                       int64_t cache_rows)
{
    static const int64_t rows[] = {3, 3, 3, 7, 7, 1, 2, 5};

    memcpy(idx, rows, sizeof(rows));
    off[0] = 0;
    off[1] = 8;
    memset(t, 0, sizeof(*t));
    t->rows = 10;
    t->dim = 4;
    t->nindices = 8;
    t->offsets = off;
    t->indices = idx;
    t->tier = KERN_TIER_UVM_CACHING;
    t->cache_rows = cache_rows;
}

/* The rows read most go first, then rows from 0 up; lookups find them. */
static void test_cache_by_hand(void)
{
    static const struct {
        int64_t cache_rows;
        int64_t cached[10];
        int64_t loc[8];
        int64_t nmiss;
    } cases[] = {
        {0, {0}, {-1, -1, -1, -1, -1, -1, -1, -1}, 8},
        {1, {3}, {0, 0, 0, -1, -1, -1, -1, -1}, 5},
        {2, {3, 7}, {0, 0, 0, 1, 1, -1, -1, -1}, 3},
        /* room for two more: rows 0 and 1 (1 is read once: a hit by
         * chance), not 2 or 5 */
        {4, {3, 7, 0, 1}, {0, 0, 0, 1, 1, 3, -1, -1}, 2},
        {10, {3, 7, 0, 1, 2, 4, 5, 6, 8, 9}, {0, 0, 0, 1, 1, 3, 4, 6}, 0},
    };
    struct kern_table_desc t;
    int64_t off[2], idx[8], cached[10], loc[8], nmiss;
    size_t c;

    for (c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        hand_table(&t, off, idx, cases[c].cache_rows);
        memset(cached, 0xff, sizeof(cached));
        CHECK(kern_cache_layout(&t, cached, loc, &nmiss) == 0);
        CHECK(nmiss == cases[c].nmiss);
        CHECK(memcmp(cached, cases[c].cached,
                     (size_t)cases[c].cache_rows * sizeof(int64_t)) == 0);
        CHECK(memcmp(loc, cases[c].loc, sizeof(loc)) == 0);
    }
    /* NULL outputs are allowed. */
    hand_table(&t, off, idx, 2);
    CHECK(kern_cache_layout(&t, NULL, NULL, NULL) == 0);
}

/* Random lookups: the cached rows are distinct, a lookup's slot holds its
 * row, a missed row is not cached, and a cache of every row misses none. */
static void test_cache_invariants(void)
{
    struct kern_table_desc t;
    int64_t off[NBAGS + 1], *idx, *cached, *loc, nmiss, rows, i, b, len, n;
    char *seen;
    int round, bad;

    for (round = 0; round < 50; round++) {
        rows = 1 + (int64_t)(next() % 300);
        idx = malloc(NBAGS * 16 * sizeof(*idx));
        off[0] = 0;
        for (b = 0; b < NBAGS; b++) {
            len = (int64_t)(next() % 17);
            for (i = 0; i < len; i++) /* half the lookups on 5 rows */
                idx[off[b] + i] =
                    (int64_t)(next() % (uint64_t)(next() % 2 ? rows
                                                  : rows < 5 ? rows
                                                             : 5));
            off[b + 1] = off[b] + len;
        }
        memset(&t, 0, sizeof(t));
        t.rows = rows;
        t.dim = 4;
        t.nindices = off[NBAGS];
        t.offsets = off;
        t.indices = idx;
        t.tier = KERN_TIER_UVM_CACHING;
        t.cache_rows = (int64_t)(next() % (uint64_t)(rows + 1));
        cached = malloc((size_t)(t.cache_rows + 1) * sizeof(*cached));
        loc = malloc((size_t)(t.nindices + 1) * sizeof(*loc));
        seen = calloc((size_t)rows, 1);
        CHECK(kern_cache_layout(&t, cached, loc, &nmiss) == 0);
        bad = 0;
        for (i = 0; i < t.cache_rows; i++) {
            bad += cached[i] < 0 || cached[i] >= rows || seen[cached[i]];
            if (cached[i] >= 0 && cached[i] < rows)
                seen[cached[i]] = 1;
        }
        n = 0;
        for (i = 0; i < t.nindices; i++) {
            if (loc[i] < 0)
                bad += seen[idx[i]] != 0; /* a miss of a cached row */
            else
                bad += loc[i] >= t.cache_rows || cached[loc[i]] != idx[i];
            n += loc[i] < 0;
        }
        CHECK(bad == 0);
        CHECK(n == nmiss);
        if (t.cache_rows == rows)
            CHECK(nmiss == 0);
        free(seen);
        free(loc);
        free(cached);
        free(idx);
    }
}

/*
 * On lookups made from tables' features (trace_from_table(), what `shardctl
 * eval` times), the cache's share of missed lookups follows the planner's
 * curve: both hold the rows read more than once hottest first and find the
 * single reads by chance.  Synthetic DLRM tables at batch 2048, load
 * factors from 0.001 to 0.5.
 */
static void test_cache_follows_the_curve(void)
{
    static const double lf[] = {0.001, 0.01, 0.05, 0.2, 0.5};
    struct synth_params sp;
    struct table *tables = NULL;
    struct kern_table_desc t;
    struct trace tr;
    double worst = 0, miss, want;
    int64_t nmiss;
    size_t i, k, compared = 0;

    synth_params_default(&sp);
    sp.count = 12;
    sp.seed = 9;
    sp.batch_size = 2048;
    CHECK(synth_tables(&sp, 1, &tables) == 0);
    for (i = 0; tables != NULL && i < sp.count; i++) {
        if (tables[i].pooling_factor <= 0)
            continue;
        CHECK(trace_from_table(&tables[i], sp.batch_size, 100 + i, &tr) == 0);
        memset(&t, 0, sizeof(t));
        t.rows = tr.rows;
        t.dim = 4;
        t.nindices = tr.nindices;
        t.offsets = tr.offsets;
        t.indices = tr.indices;
        t.tier = KERN_TIER_UVM_CACHING;
        for (k = 0; k < sizeof(lf) / sizeof(lf[0]) && tr.nindices > 0; k++) {
            t.cache_rows = (int64_t)ceil((double)tr.rows * lf[k]);
            CHECK(kern_cache_layout(&t, NULL, NULL, &nmiss) == 0);
            miss = (double)nmiss / (double)tr.nindices;
            want = tier_miss_rate(&tables[i], sp.batch_size, lf[k]);
            printf("table %2zu rows %9lld lf %.3f: miss %.4f, curve %.4f\n", i,
                   (long long)tr.rows, lf[k], miss, want);
            worst = fmax(worst, fabs(miss - want));
            compared++;
        }
        trace_destroy(&tr);
    }
    printf("cache vs curve: %zu compared, largest difference %.4f\n", compared,
           worst);
    CHECK(compared >= 40);
    CHECK(worst < 0.02);
    free(tables);
}

int main(void)
{
    test_zeroed_is_hbm();
    test_masks();
    test_cpu_refuses();
    test_bad_fields();
    test_cache_by_hand();
    test_cache_invariants();
    test_cache_follows_the_curve();
    return tap_done();
}
