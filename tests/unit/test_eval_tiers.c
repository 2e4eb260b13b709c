/*
 * A plan with tables off HBM measured (prof_eval_plan(), what `shardctl
 * eval` runs): on a backend that times a tier, the shard reaches the
 * kernels in that tier (a cache with ceil(load factor x rows) rows, on the
 * table's own lookups) and its measured time stands for its host-link time
 * ("+ host-link misses (measured)", no modelled tier_ms); on one that does
 * not (the cpu backend), the shard is timed in HBM and the modelled
 * tier_shard_ms() is added, as before ("(modelled)").  A recording backend
 * stands in for a GPU: its tier mask is what the test sets, its shards cost
 * a fixed 2 ms; the cpu backend is the real one.  Lookups given by the
 * caller (the tables' own) are what reaches the kernels.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "profiler.h"

#define NT 4

/* What the recording backend was given, per shard_open (device order). */
struct seen_shard {
    size_t ntables;
    enum kern_tier tier[NT];
    int64_t cache_rows[NT];
    int64_t nindices[NT];
};
static struct seen_shard seen[8];
static int nseen;
static int token;

static int rec_count(void)
{
    return 2;
}

static int rec_info(int32_t device, struct kern_device_info *out)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "recorder %d", (int)device);
    memcpy(out->model, out->name, sizeof(out->model));
    out->index = device;
    return 0;
}

static int rec_open(int32_t device, const struct kern_shard_desc *desc,
                    struct kern_shard **out, struct sd_diag *d);

static void rec_close(struct kern_shard *s)
{
    (void)s;
}

static int rec_time(struct kern_shard *s, const struct kern_timing_opts *o,
                    struct kern_timing *out)
{
    (void)s;
    (void)o;
    memset(out, 0, sizeof(*out));
    out->median_ms = out->min_ms = out->max_ms = 2.0;
    out->p10_ms = out->p90_ms = 2.0;
    out->repeats = 1;
    return 0;
}

static struct kern_backend rec = {
    .name = "recorder",
    .dtypes = 1u << KERN_DTYPE_FP32,
    .device_count = rec_count,
    .device_info = rec_info,
    .shard_open = rec_open,
    .shard_close = rec_close,
    .shard_time = rec_time,
};

/* Records the shard; refuses a tier outside the mask, as backends do. */
static int rec_open(int32_t device, const struct kern_shard_desc *desc,
                    struct kern_shard **out, struct sd_diag *d)
{
    struct seen_shard *sh = &seen[nseen++ % 8];
    size_t t;

    (void)device;
    sh->ntables = desc->ntables;
    for (t = 0; t < desc->ntables && t < NT; t++) {
        sh->tier[t] = desc->tables[t].tier;
        sh->cache_rows[t] = desc->tables[t].cache_rows;
        sh->nindices[t] = desc->tables[t].nindices;
        if ((rec.tiers & (1u << desc->tables[t].tier)) == 0)
            return sd_diag_set(d, SD_EUNSUPPORTED, "tables[%zu]: tier", t);
    }
    *out = (struct kern_shard *)&token;
    return 0;
}

/*
 * Four tables on two devices: t0 (HBM) and t1 (fused_uvm) on device 0,
 * t2 (cached at 0.2501: 1500.6 of its 6000 rows, so 1501) and t3 (HBM) on
 * device 1.
 */
static void make_plan(struct table *tb, struct plan *p, struct topology *t)
{
    size_t i;

    memset(tb, 0, NT * sizeof(*tb));
    for (i = 0; i < NT; i++) {
        snprintf(tb[i].name, sizeof(tb[i].name), "t%zu", i);
        tb[i].rows = 4000 + 1000 * (int64_t)i;
        tb[i].dim = 16;
        tb[i].pooling_factor = 4;
        tb[i].bins[0] = 0.6;
        tb[i].bins[1] = 0.3;
        tb[i].bins[3] = 0.1;
    }
    topology_default(t, 2, 1ull << 30);
    t->batch_size = 256;
    t->host_dram_bytes = 1ull << 30;
    plan_init(p, 2);
    plan_add(p, 0, 0, 0, 16);
    plan_add(p, 1, 0, 0, 16);
    plan_add(p, 2, 1, 0, 16);
    plan_add(p, 3, 1, 0, 16);
    plan_sort(p);
    p->shards[1].tier = TIER_UVM;
    p->shards[2].tier = TIER_UVM_CACHING;
    p->shards[2].cache_load_factor = 0.2501f;
}

static void timing(struct kern_timing_opts *o)
{
    kern_timing_opts_default(o);
    o->warmup = 0;
    o->repeats = 2;
    o->flush = false;
}

/* The recorder with mask `tiers`: 0 on success, with p evaluated. */
static int eval_rec(uint32_t tiers, struct table *tb, struct plan *p,
                    struct topology *t)
{
    struct kern_timing_opts o;
    struct sd_diag d;
    int rv;

    rec.tiers = tiers;
    nseen = 0;
    memset(seen, 0, sizeof(seen));
    make_plan(tb, p, t);
    timing(&o);
    rv = prof_eval_plan(&rec, p, tb, NT, NULL, t, OPTIMIZER_SGD, &o, 1, NULL,
                        &d);
    if (rv != 0)
        fprintf(stderr, "prof_eval_plan: %s\n", d.msg);
    return rv;
}

static bool ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);

    return a >= b && strcmp(s + a - b, tail) == 0;
}

/* Every tier timed: the kernels get them, nothing is modelled. */
static void test_measured(void)
{
    struct table tb[NT];
    struct topology t;
    struct plan p;
    int64_t hbm_lookups[NT];
    int r;

    /* The lookups the tables have in HBM, for comparison. */
    CHECK(eval_rec(1u << KERN_TIER_HBM, tb, &p, &t) == 0);
    hbm_lookups[0] = seen[0].nindices[0];
    hbm_lookups[1] = seen[0].nindices[1];
    hbm_lookups[2] = seen[1].nindices[0];
    plan_destroy(&p);

    CHECK(eval_rec(1u << KERN_TIER_HBM | 1u << KERN_TIER_UVM |
                       1u << KERN_TIER_UVM_CACHING,
                   tb, &p, &t) == 0);
    CHECK(nseen == 2 && seen[0].ntables == 2 && seen[1].ntables == 2);
    CHECK(seen[0].tier[0] == KERN_TIER_HBM && seen[0].tier[1] == KERN_TIER_UVM);
    CHECK(seen[1].tier[0] == KERN_TIER_UVM_CACHING &&
          seen[1].tier[1] == KERN_TIER_HBM);
    CHECK(seen[0].cache_rows[1] == 0);
    CHECK(seen[1].cache_rows[0] == 1501); /* ceil(0.2501 x 6000) */
    /* the same lookups as in HBM: the table's own trace */
    CHECK(seen[0].nindices[1] == hbm_lookups[1] && hbm_lookups[1] > 0);
    CHECK(seen[1].nindices[0] == hbm_lookups[2] && hbm_lookups[2] > 0);
    CHECK(seen[0].nindices[0] == hbm_lookups[0]);
    for (r = 0; r < 2; r++) {
        CHECK(p.devices[r].tier_ms == 0);
        CHECK(p.devices[r].tier_measured);
        CHECK(p.devices[r].compute_ms == 2.0);
        CHECK(p.devices[r].ddr_bytes > 0);
    }
    CHECK(strcmp(p.cost_model, "measured:cpu + host-link misses (measured)") ==
          0);
    plan_destroy(&p);
}

/* No host tier timed: the kernels see HBM only, the model's time is
 * added, and the plan says modelled. */
static void test_modelled(void)
{
    struct table tb[NT];
    struct topology t;
    struct plan p;
    double uvm, cached;
    int i;

    CHECK(eval_rec(1u << KERN_TIER_HBM, tb, &p, &t) == 0);
    for (i = 0; i < 2; i++) {
        CHECK(seen[i].tier[0] == KERN_TIER_HBM &&
              seen[i].tier[1] == KERN_TIER_HBM);
        CHECK(seen[i].cache_rows[0] == 0 && seen[i].cache_rows[1] == 0);
    }
    uvm = tier_shard_ms(&tb[1], &p.shards[1], &t);
    cached = tier_shard_ms(&tb[2], &p.shards[2], &t);
    CHECK(uvm > 0 && cached > 0);
    CHECK(p.devices[0].tier_ms == uvm && p.devices[1].tier_ms == cached);
    CHECK(p.devices[0].compute_ms == 2.0 + uvm);
    CHECK(!p.devices[0].tier_measured && !p.devices[1].tier_measured);
    CHECK(strcmp(p.cost_model, "measured:cpu + host-link misses (modelled)") ==
          0);
    plan_destroy(&p);

    /* UVM timed, caches not: one device each way. */
    CHECK(eval_rec(1u << KERN_TIER_HBM | 1u << KERN_TIER_UVM, tb, &p, &t) == 0);
    CHECK(seen[0].tier[1] == KERN_TIER_UVM);
    CHECK(seen[1].tier[0] == KERN_TIER_HBM);
    CHECK(p.devices[0].tier_measured && p.devices[0].tier_ms == 0);
    CHECK(!p.devices[1].tier_measured && p.devices[1].tier_ms == cached);
    CHECK(ends_with(p.cost_model, " + host-link misses (modelled) + host-link "
                                  "misses (measured)"));
    plan_destroy(&p);
}

/* The real cpu backend: its mask times HBM only, so the eval of the same
 * plan succeeds (no table reaches it in a tier it refuses) and its host
 * tiers are modelled. */
static void test_cpu(void)
{
    const struct kern_backend *cpu = kern_backend_get("cpu", NULL);
    struct kern_timing_opts o;
    struct kern_timing tm[2];
    struct table tb[NT];
    struct topology t;
    struct plan p;
    struct sd_diag d;
    int rv;

    CHECK(prof_timed_tiers(cpu) == 0);
    CHECK(prof_timed_tier(cpu, TIER_UVM) == TIER_HBM);
    CHECK(prof_timed_tier(cpu, TIER_UVM_CACHING) == TIER_HBM);
    make_plan(tb, &p, &t);
    timing(&o);
    rv =
        prof_eval_plan(cpu, &p, tb, NT, NULL, &t, OPTIMIZER_SGD, &o, 1, tm, &d);
    CHECK(rv == 0);
    if (rv != 0)
        fprintf(stderr, "cpu eval: %s\n", d.msg);
    CHECK(strcmp(p.cost_model, "measured:cpu + host-link misses (modelled)") ==
          0);
    CHECK(p.devices[0].tier_ms == tier_shard_ms(&tb[1], &p.shards[1], &t));
    CHECK(p.devices[0].tier_ms > 0 && !p.devices[0].tier_measured);
    CHECK(p.devices[0].compute_ms == tm[0].median_ms + p.devices[0].tier_ms);
    plan_destroy(&p);
}

/* Where the caller gives the tables' own lookups, they are what is timed,
 * in HBM and in a timed tier alike: table i's trace of 100 + i lookups
 * (rebuilt ones have batch x pooling factor, about 1024).  Lookups of
 * another batch are refused, naming the table. */
static void test_given(void)
{
    struct trace tr[NT];
    struct table tb[NT];
    struct topology t;
    struct plan p;
    struct kern_timing_opts o;
    struct sd_diag d;
    int64_t b, j;
    size_t i;

    make_plan(tb, &p, &t);
    memset(tr, 0, sizeof(tr));
    for (i = 0; i < NT; i++) {
        snprintf(tr[i].name, sizeof(tr[i].name), "t%zu", i);
        tr[i].rows = tb[i].rows;
        tr[i].dim = tb[i].dim;
        tr[i].nbags = t.batch_size;
        tr[i].nindices = 100 + (int64_t)i;
        tr[i].offsets = calloc((size_t)tr[i].nbags + 1, sizeof(int64_t));
        tr[i].indices = calloc((size_t)tr[i].nindices, sizeof(int64_t));
        if (!tr[i].offsets || !tr[i].indices)
            abort();
        for (b = 0; b <= tr[i].nbags; b++) /* lookups dealt to the bags */
            tr[i].offsets[b] = b * tr[i].nindices / tr[i].nbags;
        for (j = 0; j < tr[i].nindices; j++)
            tr[i].indices[j] = (j * 7919) % tr[i].rows;
    }
    timing(&o);
    rec.tiers =
        1u << KERN_TIER_HBM | 1u << KERN_TIER_UVM | 1u << KERN_TIER_UVM_CACHING;
    nseen = 0;
    CHECK(prof_eval_plan(&rec, &p, tb, NT, tr, &t, OPTIMIZER_SGD, &o, 1, NULL,
                         &d) == 0);
    CHECK(nseen == 2);
    CHECK(seen[0].nindices[0] == 100 && seen[0].nindices[1] == 101);
    CHECK(seen[1].nindices[0] == 102 && seen[1].nindices[1] == 103);
    CHECK(seen[1].tier[0] == KERN_TIER_UVM_CACHING); /* its tier, its trace */
    plan_destroy(&p);

    make_plan(tb, &p, &t);
    tr[2].nbags = t.batch_size / 2;
    CHECK(prof_eval_plan(&rec, &p, tb, NT, tr, &t, OPTIMIZER_SGD, &o, 1, NULL,
                         &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "\"t2\"") != NULL && strstr(d.msg, "128 bags") != NULL);
    tr[2].nbags = t.batch_size;
    plan_destroy(&p);
    for (i = 0; i < NT; i++)
        trace_destroy(&tr[i]);
}

int main(void)
{
    test_measured();
    test_modelled();
    test_cpu();
    test_given();
    return tap_done();
}
