/* The profiler on the cpu backend: samples land in the store, runs resume
 * with the same shards, a stop keeps what was measured, and plans are
 * measured per device. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "profiler.h"

static char dir[] = "/tmp/shardd-test-profiler-XXXXXX";

static void params(struct prof_run_params *p, uint64_t target)
{
    prof_run_params_default(p);
    p->be = kern_backend_get("cpu", NULL);
    p->batch_size = 64;
    p->pool_tables = 30;
    p->seed = 5;
    p->target_samples = target;
    p->commit_every = 2;
    p->shape.max_tables = 3;
    p->shape.max_bytes = 64ull << 20;
    p->timing.warmup = 0;
    p->timing.repeats = 2;
    p->timing.flush = false;
    p->quiet_tolerance = 0; /* test_quiet() checks the quiet check */
}

static struct store *open_db(const char *name)
{
    char path[256];
    struct store *st = NULL;
    struct sd_diag d;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (store_open(path, 0, &st, &d) != 0)
        fprintf(stderr, "store_open: %s\n", d.msg);
    return st;
}

static void load(struct store *st, int64_t profile, struct store_sample **s,
                 size_t *n)
{
    struct sd_diag d;

    CHECK(store_samples_load(st, profile, STORE_KIND_COMPUTE, 0, 100, s, n,
                             &d) == 0);
}

/* Whether the first n samples of a and b are the same shards: as many
 * tables, of the same rows and dims. */
static bool same_shards(const struct store_sample *a,
                        const struct store_sample *b, size_t n)
{
    size_t i, t;

    for (i = 0; i < n; i++) {
        if (a[i].ntables != b[i].ntables)
            return false;
        for (t = 0; t < a[i].ntables; t++)
            if (a[i].tables[t].rows != b[i].tables[t].rows ||
                a[i].tables[t].dim != b[i].tables[t].dim)
                return false;
    }
    return true;
}

static void test_run_and_resume(void)
{
    struct prof_run_params p;
    struct prof_run_result r1, r2, r3;
    struct store *a = open_db("a.db"), *b = open_db("b.db");
    struct store_sample *sa = NULL, *sb = NULL;
    size_t na = 0, nb = 0, i;
    struct sd_diag d;

    CHECK(a != NULL && b != NULL);
    if (a == NULL || b == NULL)
        return;
    params(&p, 5);
    CHECK(prof_run(a, &p, &r1, &d) == 0);
    CHECK(r1.existing == 0 && r1.added == 5 && !r1.interrupted);
    CHECK(strncmp(r1.profile, "cpu/", 4) == 0 && strstr(r1.profile, "/64"));
    p.target_samples = 7; /* resume: two more */
    CHECK(prof_run(a, &p, &r2, &d) == 0);
    CHECK(r2.existing == 5 && r2.added == 2);
    CHECK(prof_run(b, &p, &r3, &d) == 0); /* all seven at once */
    CHECK(r3.added == 7);

    load(a, r1.profile_id, &sa, &na);
    load(b, r3.profile_id, &sb, &nb);
    CHECK(na == 7 && nb == 7);
    for (i = 0; i < na; i++) {
        CHECK(sa[i].measured_ms > 0 && sa[i].spread_ms >= 0);
        CHECK(sa[i].ntables >= 1 && sa[i].ntables <= 3);
    }
    /* sample i is the same shard, resumed or not */
    CHECK(na == nb && same_shards(sa, sb, na));
    store_samples_free(sa, na);
    store_samples_free(sb, nb);
    store_close(a);
    store_close(b);
}

/*
 * With p_rows = 1 every sample is a shard of row blocks: its tables have
 * fewer rows than the pool's table they were cut from (and no more than
 * half, k >= 2), features of their own lookups, source "row-blocks"; the
 * shards drawn are those of p_rows = 0 (a stream of their own).
 */
static void test_row_blocks(void)
{
    struct prof_run_params p;
    struct prof_run_result r;
    struct store *a = open_db("rows.db"), *b = open_db("whole.db");
    struct store_sample *sa = NULL, *sb = NULL;
    size_t na = 0, nb = 0, i, t, cut = 0, before;
    struct sd_diag d;

    CHECK(a != NULL && b != NULL);
    if (a == NULL || b == NULL)
        return;
    params(&p, 6);
    p.p_rows = 1;
    CHECK(prof_run(a, &p, &r, &d) == 0 && r.added == 6);
    load(a, r.profile_id, &sa, &na);
    p.p_rows = 0;
    CHECK(prof_run(b, &p, &r, &d) == 0 && r.added == 6);
    load(b, r.profile_id, &sb, &nb);
    CHECK(na == 6 && nb == 6);
    for (i = 0; i < na && i < nb; i++) {
        CHECK(strcmp(sb[i].source, "random") == 0);
        CHECK(sa[i].ntables == sb[i].ntables);
        before = cut;
        for (t = 0; t < sa[i].ntables && t < sb[i].ntables; t++) {
            CHECK(strcmp(sa[i].tables[t].name, sb[i].tables[t].name) == 0);
            CHECK(sa[i].tables[t].dim == sb[i].tables[t].dim);
            if (sa[i].tables[t].rows == sb[i].tables[t].rows)
                continue; /* no lookup in the block drawn: kept whole */
            cut++;
            CHECK(2 * sa[i].tables[t].rows <= sb[i].tables[t].rows + 1);
            CHECK(sa[i].tables[t].pooling_factor <
                  sb[i].tables[t].pooling_factor);
        }
        CHECK(strcmp(sa[i].source,
                     cut > before ? PROF_SOURCE_ROWS : "random") == 0);
        CHECK(sa[i].measured_ms > 0);
    }
    CHECK(cut > 0);
    store_samples_free(sa, na);
    store_samples_free(sb, nb);
    store_close(a);
    store_close(b);
}

/*
 * Half-precision tables are timed in their type: the cpu kernels time fp16
 * and bf16 weights, so a sample keeps its table's fp16 (the default pool,
 * every family mixed, makes 30 % of its tables fp16), while a backend that
 * times fp32 only, and int8 anywhere, record fp32: what was measured.
 */
static void test_dtypes(void)
{
    struct kern_backend fp32_only = *kern_backend_get("cpu", NULL);
    struct prof_run_params p;
    struct prof_run_result r;
    struct store *a = open_db("dtypes.db");
    struct store_sample *sa = NULL;
    size_t na = 0, i, t, fp16 = 0, fp32 = 0;
    struct sd_diag d;

    CHECK(prof_timed_dtype(&fp32_only, TABLE_DTYPE_FP16) == TABLE_DTYPE_FP16);
    CHECK(prof_timed_dtype(&fp32_only, TABLE_DTYPE_BF16) == TABLE_DTYPE_BF16);
    CHECK(prof_timed_dtype(&fp32_only, TABLE_DTYPE_INT8) == TABLE_DTYPE_FP32);
    fp32_only.dtypes = 1u << KERN_DTYPE_FP32;
    CHECK(prof_timed_dtype(&fp32_only, TABLE_DTYPE_FP16) == TABLE_DTYPE_FP32);
    CHECK(a != NULL);
    if (a == NULL)
        return;
    params(&p, 8); /* the default pool: every family, mixed */
    CHECK(prof_run(a, &p, &r, &d) == 0 && r.added == 8);
    load(a, r.profile_id, &sa, &na);
    for (i = 0; i < na; i++)
        for (t = 0; t < sa[i].ntables; t++) {
            fp16 += sa[i].tables[t].dtype == TABLE_DTYPE_FP16;
            fp32 += sa[i].tables[t].dtype == TABLE_DTYPE_FP32;
        }
    CHECK(fp16 > 0 && fp32 > 0);
    store_samples_free(sa, na);
    store_close(a);
}

/*
 * The samples of profile `id` in st are devices of plans: a whole table has
 * the rows of a pool table (its width may be another: tasks augment dims),
 * a row block fewer (the store keeps features, not names), and a sample
 * with one has source row-blocks; kind[] counts whole, row-block and
 * replica samples.
 */
static void count_pieces(struct store *st, int64_t id,
                         const struct prof_run_params *p, size_t n,
                         size_t kind[3])
{
    struct store_sample *sa = NULL;
    struct table *pool = NULL;
    size_t na = 0, i, t, j;

    load(st, id, &sa, &na);
    CHECK(prof_make_pool(p, &pool) == 0);
    CHECK(na == n);
    for (i = 0; i < na && pool != NULL; i++) {
        size_t blocks = 0;

        for (t = 0; t < sa[i].ntables; t++) {
            bool whole = false;

            for (j = 0; j < p->pool_tables; j++)
                whole |= pool[j].rows == sa[i].tables[t].rows;
            blocks += !whole;
        }
        if (strcmp(sa[i].source, PROF_SOURCE_ROWS) == 0) {
            CHECK(blocks > 0);
            kind[1]++;
        } else {
            CHECK(blocks == 0);
            CHECK(strcmp(sa[i].source, PROF_SOURCE_REPLICAS) == 0 ||
                  strcmp(sa[i].source, "random") == 0);
            kind[strcmp(sa[i].source, PROF_SOURCE_REPLICAS) == 0 ? 2 : 0]++;
        }
        CHECK(sa[i].measured_ms > 0);
    }
    free(pool);
    store_samples_free(sa, na);
}

/*
 * Shards shaped like the devices of TorchRec's plans (row-wise: row
 * blocks) and neuroshard's (replicas among them); plans by neuroshard
 * without a model, by dreamshard, or without plan_devices are refused.
 */
static void test_plan_pieces(void)
{
    struct prof_run_params p;
    struct prof_run_result r;
    struct store *a = open_db("pieces.db"), *b = open_db("ns.db");
    size_t trec[3] = {0, 0, 0}, ns[3] = {0, 0, 0};
    struct sd_diag d;

    CHECK(a != NULL && b != NULL);
    if (a == NULL || b == NULL)
        return;
    params(&p, 8);
    /* A row-wise plan puts a block of every table of a task on each device:
     * more than the 64 MiB of random shards. */
    p.shape.max_bytes = 256ull << 20;
    p.plan_devices = 2;
    p.plan_alg = PLAN_ALG_NEUROSHARD; /* no model */
    CHECK(prof_run(a, &p, &r, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "its model") != NULL);
    p.plan_alg = PLAN_ALG_DREAMSHARD;
    CHECK(prof_run(a, &p, &r, &d) == SD_EINVAL);
    p.plan_alg = PLAN_ALG_TORCHREC_GREEDY;
    p.plan_devices = 0;
    CHECK(prof_run(a, &p, &r, &d) == SD_EINVAL);
    p.plan_devices = 2;
    CHECK(prof_run(a, &p, &r, &d) == 0 && r.added == 8);
    count_pieces(a, r.profile_id, &p, 8, trec);
    CHECK(trec[1] > 0); /* TorchRec cuts rows */
    /* neuroshard replicates where the gradient's all-reduce costs less than
     * the lookups it spreads: at the model's batch, not at 64. */
    p.plan_alg = PLAN_ALG_NEUROSHARD;
    p.plan_net = net_embedded(&d);
    p.plan_devices = 4;
    p.batch_size = 4096;
    p.target_samples = 16;
    CHECK(prof_run(b, &p, &r, &d) == 0 && r.added == 16);
    count_pieces(b, r.profile_id, &p, 16, ns);
    CHECK(ns[2] > 0);
    fprintf(stderr,
            "  pieces: torchrec %zu whole, %zu row blocks; neuroshard %zu "
            "whole, %zu row blocks, %zu replicas\n",
            trec[0], trec[1], ns[0], ns[1], ns[2]);
    store_close(a);
    store_close(b);
}

static void test_stop(void)
{
    kern_flag stop = 1;
    struct prof_run_params p;
    struct prof_run_result r;
    struct store *st = open_db("c.db");
    struct sd_diag d;
    uint64_t n = 99;

    if (st == NULL)
        return;
    params(&p, 4);
    p.stop = &stop;
    CHECK(prof_run(st, &p, &r, &d) == 0);
    CHECK(r.interrupted && r.added == 0);
    CHECK(store_sample_count(st, r.profile_id, STORE_KIND_COMPUTE, 0, &n, &d) ==
              0 &&
          n == 0);
    store_close(st);
}

static void test_eval_plan(void)
{
    const struct kern_backend *be = kern_backend_get("cpu", NULL);
    struct kern_timing_opts o;
    struct kern_timing tm[3];
    struct table tb[3];
    struct topology t;
    struct plan p;
    struct sd_diag d;
    int i;

    memset(tb, 0, sizeof(tb));
    for (i = 0; i < 3; i++) {
        snprintf(tb[i].name, sizeof(tb[i].name), "t%d", i);
        tb[i].rows = 5000;
        tb[i].dim = 16;
        tb[i].pooling_factor = 4;
        tb[i].bins[0] = 0.6;
        tb[i].bins[1] = 0.4;
    }
    topology_default(&t, 3, 1ull << 30);
    t.batch_size = 256;
    kern_timing_opts_default(&o);
    o.warmup = 0;
    o.repeats = 2;
    o.flush = false;
    plan_init(&p, 3);
    plan_add(&p, 0, 0, 0, 16);
    plan_add(&p, 1, 0, 0, 8);
    plan_add(&p, 1, 1, 8, 8);
    plan_add(&p, 2, 1, 0, 16);
    plan_sort(&p);
    CHECK(prof_eval_plan(be, &p, tb, 3, NULL, &t, OPTIMIZER_SGD, &o, 1, tm,
                         &d) == 0);
    CHECK(p.devices[0].compute_ms > 0 && p.devices[1].compute_ms > 0);
    CHECK(p.devices[2].compute_ms == 0); /* an empty device costs nothing */
    CHECK(tm[0].repeats == 2 && tm[0].median_ms == p.devices[0].compute_ms);
    CHECK(strcmp(p.cost_model, "measured:cpu") == 0);
    CHECK(p.cost_ms >= p.devices[0].compute_ms);
    plan_destroy(&p);
}

/*
 * A row block of a table whose lookups are given is timed on the lookups
 * that fall in its rows: every lookup here is in the first half of the
 * rows, so the device holding the second half looks up nothing and takes a
 * fraction of the first's time (made from the block's features, both
 * halves would look up as much).
 */
static void test_eval_row_blocks(void)
{
    const struct kern_backend *be = kern_backend_get("cpu", NULL);
    struct kern_timing_opts o;
    struct trace tr;
    struct table tb;
    struct topology t;
    struct plan p;
    struct sd_diag d;
    int64_t b, k, pf = 64, rows = 1 << 16;
    int r;

    memset(&tr, 0, sizeof(tr));
    snprintf(tr.name, sizeof(tr.name), "halves");
    tr.rows = rows;
    tr.dim = 64;
    tr.nbags = 256;
    tr.nindices = tr.nbags * pf;
    tr.offsets = malloc((size_t)(tr.nbags + 1) * sizeof(*tr.offsets));
    tr.indices = malloc((size_t)tr.nindices * sizeof(*tr.indices));
    CHECK(tr.offsets != NULL && tr.indices != NULL);
    if (tr.offsets == NULL || tr.indices == NULL)
        goto out_trace;
    for (b = 0; b <= tr.nbags; b++)
        tr.offsets[b] = b * pf;
    for (k = 0; k < tr.nindices; k++)
        tr.indices[k] = (k * 7919) % (rows / 2);
    CHECK(trace_to_table(&tr, &tb) == 0);
    topology_default(&t, 2, 1ull << 30);
    t.batch_size = tr.nbags;
    kern_timing_opts_default(&o);
    o.warmup = 1;
    o.repeats = 5;
    o.flush = false;
    CHECK(plan_init(&p, 2) == 0);
    for (r = 0; r < 2; r++) {
        struct shard s = {.table = 0,
                          .device = r,
                          .col_width = 64,
                          .row_offset = r * rows / 2,
                          .row_count = rows / 2,
                          .scheme = SCHEME_RW};

        CHECK(plan_add_shard(&p, &s) == 0);
    }
    plan_sort(&p);
    CHECK(prof_eval_plan(be, &p, &tb, 1, &tr, &t, OPTIMIZER_SGD, &o, 1, NULL,
                         &d) == 0);
    fprintf(stderr, "  row blocks of given lookups: %.4f and %.4f ms\n",
            p.devices[0].compute_ms, p.devices[1].compute_ms);
    CHECK(p.devices[1].compute_ms < 0.5 * p.devices[0].compute_ms);
    plan_destroy(&p);
out_trace:
    trace_destroy(&tr);
}

/*
 * The quiet check with a scripted probe: the cpu backend times the samples,
 * and the probe (the one shard opened outside the arena) takes 1 ms, or 2 ms
 * on calls slow_from .. slow_to; or, with noisy set, 1 ms on its first call
 * and 1.15 ms after.  Calls 1-5 are prof_quiet_open()'s; sample k is
 * measured between calls 6 + 2k and 7 + 2k while kept.
 */
static const struct kern_backend *cpu_be;
static struct kern_shard *probe_shard;
static int probe_calls, slow_from, slow_to;
static bool noisy;

static int scripted_open(int32_t device, const struct kern_shard_desc *desc,
                         struct kern_shard **out, struct sd_diag *d)
{
    int rv = cpu_be->shard_open(device, desc, out, d);

    if (rv == 0 && !desc->reuse_weights)
        probe_shard = *out;
    return rv;
}

static int scripted_time(struct kern_shard *s, const struct kern_timing_opts *o,
                         struct kern_timing *out)
{
    int rv = cpu_be->shard_time(s, o, out);

    if (rv != 0 || s != probe_shard)
        return rv;
    probe_calls++;
    if (noisy)
        out->median_ms = probe_calls == 1 ? 1.0 : 1.15;
    else
        out->median_ms =
            probe_calls >= slow_from && probe_calls <= slow_to ? 2.0 : 1.0;
    return 0;
}

static void test_quiet(void)
{
    struct kern_backend be;
    struct prof_run_params p;
    struct prof_run_result r;
    struct store *a = open_db("quiet.db"), *b = open_db("noquiet.db"),
                 *c = open_db("busy.db");
    struct store_sample *sa = NULL, *sb = NULL;
    size_t na = 0, nb = 0;
    struct sd_diag d;

    CHECK(a != NULL && b != NULL && c != NULL);
    if (a == NULL || b == NULL || c == NULL)
        return;
    cpu_be = kern_backend_get("cpu", NULL);
    be = *cpu_be;
    be.shard_open = scripted_open;
    be.shard_time = scripted_time;

    /* Both probes of sample 1 (calls 8 and 9) are slow: it is measured
     * again (calls 10 and 11), and the profile holds the same shards as
     * without the check. */
    params(&p, 3);
    p.be = &be;
    p.quiet_tolerance = 0.10;
    probe_calls = 0, slow_from = 8, slow_to = 9;
    CHECK(prof_run(a, &p, &r, &d) == 0);
    CHECK(r.added == 3 && r.remeasured == 1 && r.kept_busy == 0);
    CHECK(r.max_slowdown == 2.0);
    CHECK(probe_calls == 5 + 2 * 4);
    p.be = cpu_be;
    p.quiet_tolerance = 0;
    CHECK(prof_run(b, &p, &r, &d) == 0 && r.added == 3 && r.remeasured == 0);
    load(a, r.profile_id, &sa, &na);
    load(b, r.profile_id, &sb, &nb);
    CHECK(na == 3 && nb == 3);
    CHECK(na == nb && same_shards(sa, sb, na));

    /* One slow probe of a sample (a host's one-off stall, call 9): kept. */
    p.be = &be;
    p.quiet_tolerance = 0.10;
    probe_calls = 0, slow_from = slow_to = 9;
    CHECK(prof_run(c, &p, &r, &d) == 0);
    CHECK(r.added == 3 && r.remeasured == 0 && r.kept_busy == 0);
    CHECK(probe_calls == 5 + 2 * 3);

    /* A host that was 15 % faster once, at open: the quiet time is the
     * probes' median, not that moment's, and nothing is measured again
     * (with the fastest probe as the quiet time, every sample was). */
    noisy = true;
    probe_calls = 0;
    p.target_samples = 6;
    CHECK(prof_run(c, &p, &r, &d) == 0);
    CHECK(r.added == 3 && r.remeasured == 0 && r.kept_busy == 0);
    CHECK(fabs(r.max_slowdown - 1.0) < 1e-9);
    noisy = false;

    /* Slow from the first sample on, and no time to wait: the first sample
     * is kept as measured and its probes become the quiet time, so the
     * next ones pass. */
    p.quiet_wait_s = 0;
    probe_calls = 0, slow_from = 6, slow_to = 1000;
    p.target_samples = 9;
    CHECK(prof_run(c, &p, &r, &d) == 0);
    CHECK(r.added == 3 && r.remeasured == 0 && r.kept_busy == 1);
    CHECK(probe_calls == 5 + 2 * 3);

    /* A tolerance out of range is refused, not ignored. */
    p.quiet_tolerance = -0.5;
    CHECK(prof_run(c, &p, &r, &d) == SD_EINVAL);
    store_samples_free(sa, na);
    store_samples_free(sb, nb);
    store_close(a);
    store_close(b);
    store_close(c);
}

/* The cpu backend as one that times every tier: refuses a shard with a
 * table off HBM, which the profiler's random shards never have. */
static struct kern_backend all_tiers;

static int hbm_only_open(int32_t device, const struct kern_shard_desc *desc,
                         struct kern_shard **out, struct sd_diag *d)
{
    size_t t;

    for (t = 0; t < desc->ntables; t++)
        if (desc->tables[t].tier != KERN_TIER_HBM)
            return sd_diag_set(d, SD_EUNSUPPORTED,
                               "tables[%zu]: timed off HBM (tier %d)", t,
                               (int)desc->tables[t].tier);
    return kern_backend_cpu.shard_open(device, desc, out, d);
}

/* Leaves TIER_UVM in every int of the stack below: what a frame that
 * does not set its items' tier would read. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void
stack_of_uvm(void)
{
    volatile int32_t v[16384];
    size_t i;

    for (i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        v[i] = TIER_UVM;
}

/*
 * The profiler's random shards are timed in HBM on a backend that has
 * other tiers too: their items' tier was left as the stack had them (a
 * GPU's samples could have been timed in host memory; valgrind found it).
 */
static void test_random_shards_in_hbm(void)
{
    struct prof_run_params p;
    struct prof_run_result r;
    struct store *st = open_db("tiers.db");
    struct sd_diag d = {{0}};

    CHECK(st != NULL);
    if (st == NULL)
        return;
    all_tiers = kern_backend_cpu;
    all_tiers.tiers = (1u << KERN_TIER_HBM) | (1u << KERN_TIER_UVM) |
                      (1u << KERN_TIER_UVM_CACHING);
    all_tiers.shard_open = hbm_only_open;
    params(&p, 4);
    p.be = &all_tiers;
    stack_of_uvm();
    CHECK_OK(prof_run(st, &p, &r, &d), d.msg);
    CHECK(r.added == 4);
    store_close(st);
}

int main(void)
{
    char cmd[128];
    int rv;

    if (mkdtemp(dir) == NULL)
        return 1;
    test_run_and_resume();
    test_row_blocks();
    test_dtypes();
    test_plan_pieces();
    test_stop();
    test_eval_plan();
    test_eval_row_blocks();
    test_quiet();
    test_random_shards_in_hbm();
    rv = tap_done();
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return rv;
}
