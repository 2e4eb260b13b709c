/* Profiling sample shards and traces made from features. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "planner.h"

static void make(struct table *t, const char *name, int64_t rows, double pf)
{
    static const double bins[TABLE_NBINS] = {.5,  .2,  .1,  .05, .05, .03,
                                             .02, .02, .01, .01, .01};

    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->rows = rows;
    t->dim = 64;
    t->pooling_factor = pf;
    memcpy(t->bins, bins, sizeof(bins));
}

static void test_draw(void)
{
    struct table pool[20];
    struct sample_params sp;
    size_t idx[15], idx2[15], k, k2, i, n;
    int32_t dims[15], dims2[15];
    struct rng g, h;
    int d, ok_dims = 1, ok_cap = 1, ok_same = 1, seen_one = 0, seen_15 = 0;

    for (i = 0; i < 20; i++) {
        char name[16];

        snprintf(name, sizeof(name), "p%zu", i);
        make(&pool[i], name, 1000 * (int64_t)(i + 1), 2);
    }
    sample_params_default(&sp);
    CHECK(sp.max_tables == 15 && sp.max_bytes == 4ull << 30);
    sp.max_bytes = 20ull << 20; /* small enough to force redraws */
    rng_seed(&g, 11);
    rng_seed(&h, 11);
    for (n = 0; n < 500; n++) {
        uint64_t bytes = 0;

        CHECK(sample_draw_shard(&g, pool, 20, &sp, idx, dims, &k) == 0);
        sample_draw_shard(&h, pool, 20, &sp, idx2, dims2, &k2);
        ok_same &= k == k2 && memcmp(idx, idx2, k * sizeof(*idx)) == 0 &&
                   memcmp(dims, dims2, k * sizeof(*dims)) == 0;
        seen_one |= k == 1;
        seen_15 |= k == 15;
        for (i = 0; i < k; i++) {
            int found = 0;

            for (d = 0; d < SAMPLE_NDIMS; d++)
                found |= dims[i] == sample_dims[d];
            ok_dims &= found && idx[i] < 20;
            bytes += table_bytes(&pool[idx[i]], dims[i]);
        }
        ok_cap &= k >= 1 && k <= 15 && bytes <= sp.max_bytes;
    }
    CHECK(ok_dims);
    CHECK(ok_cap);
    CHECK(ok_same);
    CHECK(seen_one && seen_15);

    sp.max_bytes = 100; /* nothing fits */
    CHECK(sample_draw_shard(&g, pool, 20, &sp, idx, dims, &k) == SD_EINVAL);
    CHECK(sample_draw_shard(&g, pool, 0, &sp, idx, dims, &k) == SD_EINVAL);
}

/* The trace's measured features come back close to the table's. */
static void test_trace_from_table(void)
{
    struct table t;
    struct trace tr, tr2;
    double bins[TABLE_NBINS], pf;
    struct sd_diag d;
    int k, bins_close = 1;

    make(&t, "golden_a", 1000000, 20.0);
    CHECK(trace_from_table(&t, 8192, 5, &tr) == 0);
    CHECK(trace_validate(&tr, &d) == 0);
    CHECK(tr.nbags == 8192 && tr.rows == t.rows);
    CHECK(trace_features(&tr, bins, &pf) == 0);
    /* The lookups make the pooling factor (they came to 20.35 a bag when
     * the drawn counts decided the total alone). */
    CHECK(fabs(pf - 20.0) < 20.0 * 0.001);
    for (k = 0; k < TABLE_NBINS; k++)
        bins_close &= fabs(bins[k] - t.bins[k]) < 0.01;
    CHECK(bins_close);

    /* Deterministic for the seed. */
    CHECK(trace_from_table(&t, 8192, 5, &tr2) == 0);
    CHECK(tr2.nindices == tr.nindices &&
          memcmp(tr.indices, tr2.indices,
                 (size_t)tr.nindices * sizeof(*tr.indices)) == 0);
    trace_destroy(&tr2);
    trace_destroy(&tr);

    /* One-hot (pooling factor 1): a lookup a bag (4,336 lookups, 240 bags
     * of two, before the counts were fitted to the total); a pooling
     * factor of 1.5 deals them at random (a bag of none, one of three or
     * more). */
    {
        int64_t b, lens[4] = {0};

        make(&t, "onehot", 100000, 1.0);
        CHECK(trace_from_table(&t, 4096, 3, &tr) == 0);
        CHECK(trace_validate(&tr, &d) == 0);
        for (b = 0; b < tr.nbags; b++) {
            int64_t n = tr.offsets[b + 1] - tr.offsets[b];

            lens[n < 3 ? n : 3]++;
        }
        CHECK(tr.nindices == 4096 && lens[1] == 4096);
        trace_destroy(&tr);
        make(&t, "pf15", 100000, 1.5);
        memset(lens, 0, sizeof(lens));
        CHECK(trace_from_table(&t, 4096, 3, &tr) == 0);
        for (b = 0; b < tr.nbags; b++) {
            int64_t n = tr.offsets[b + 1] - tr.offsets[b];

            lens[n < 3 ? n : 3]++;
        }
        CHECK(lens[0] > 0 && lens[3] > 0);
        trace_destroy(&tr);
    }

    /* A tiny table: distinct rows cannot exceed its rows. */
    make(&t, "tiny", 10, 50.0);
    CHECK(trace_from_table(&t, 100, 1, &tr) == 0);
    CHECK(trace_validate(&tr, &d) == 0);
    trace_destroy(&tr);

    /* Never accessed: empty bags. */
    make(&t, "empty", 100, 0);
    memset(t.bins, 0, sizeof(t.bins));
    CHECK(trace_from_table(&t, 64, 1, &tr) == 0);
    CHECK(tr.nindices == 0 && tr.offsets[64] == 0);
    trace_destroy(&tr);
    CHECK(trace_from_table(&t, 0, 1, &tr) == SD_EINVAL);
}

int main(void)
{
    test_draw();
    test_trace_from_table();
    return tap_done();
}
