/* Measuring shards and plans, and the profiling loop (profiler.h). */
#include "profiler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Draws of a random shard before one fits the memory budget. */
#define PROF_BUDGET_TRIES 100

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void prof_footprint(const struct table *tables, size_t n, int64_t batch,
                    struct prof_footprint *out)
{
    double lookups = 0;
    uint64_t cols = 0;
    size_t i;

    out->weight_bytes = 0;
    for (i = 0; i < n; i++) {
        out->weight_bytes += table_bytes(&tables[i], tables[i].dim);
        /* indices, rounded up, and the bag offsets */
        lookups +=
            ceil((double)batch * tables[i].pooling_factor) + (double)batch + 1;
        cols += (uint64_t)tables[i].dim;
    }
    /* Twice: the caller's trace and the backend's copy. */
    lookups *= 2 * sizeof(int64_t);
    /* The pooled output and its gradient, floats. */
    lookups += 2.0 * (double)batch * (double)cols * sizeof(float);
    out->lookup_bytes = lookups >= 1.8e19 ? UINT64_MAX : (uint64_t)lookups;
}

bool prof_fits(const struct prof_footprint *f, uint64_t budget)
{
    return budget == 0 ||
           (f->weight_bytes <= budget / 2 && f->lookup_bytes <= budget / 2);
}

/* The kernels' type of a table dtype (only fp16 and bf16 have one). */
static enum kern_dtype kern_dtype_of(enum table_dtype dt)
{
    return dt == TABLE_DTYPE_FP16   ? KERN_DTYPE_FP16
           : dt == TABLE_DTYPE_BF16 ? KERN_DTYPE_BF16
                                    : KERN_DTYPE_FP32;
}

enum table_dtype prof_timed_dtype(const struct kern_backend *be,
                                  enum table_dtype dt)
{
    enum kern_dtype k = kern_dtype_of(dt);

    return k != KERN_DTYPE_FP32 && (be->dtypes & (1u << k)) ? dt
                                                            : TABLE_DTYPE_FP32;
}

/* The kernels' tier of a table tier. */
static enum kern_tier kern_tier_of(enum table_tier t)
{
    return t == TIER_UVM           ? KERN_TIER_UVM
           : t == TIER_UVM_CACHING ? KERN_TIER_UVM_CACHING
                                   : KERN_TIER_HBM;
}

enum table_tier prof_timed_tier(const struct kern_backend *be,
                                enum table_tier tier)
{
    enum kern_tier k = kern_tier_of(tier);

    return k != KERN_TIER_HBM && (be->tiers & (1u << k)) ? tier : TIER_HBM;
}

uint32_t prof_timed_tiers(const struct kern_backend *be)
{
    uint32_t mask = 0;
    int t;

    for (t = TIER_UVM; t < TIER_COUNT; t++)
        if (prof_timed_tier(be, (enum table_tier)t) == (enum table_tier)t)
            mask |= 1u << t;
    return mask;
}

/* Rows a cache of load factor f holds of a table of `rows` rows. */
static int64_t cache_rows(int64_t rows, float f)
{
    double n = ceil((double)rows * (double)f);

    return n <= 0 ? 0 : n >= (double)rows ? rows : (int64_t)n;
}

int prof_measure_shard(const struct kern_backend *be, int32_t device,
                       const struct prof_item *items, size_t n,
                       const struct kern_timing_opts *o,
                       struct kern_timing *out, struct sd_diag *d)
{
    return prof_measure_shard_capped(be, device, items, n, o, 0, out, d);
}

/* Opens n items as one shard on `device`, its weights in the device's
 * arena (capped at arena_max_bytes, 0: no cap) or, with arena false, in an
 * allocation of its own (the probe, open beside the samples).  *out is the
 * caller's (be->shard_close). */
static int open_shard(const struct kern_backend *be, int32_t device,
                      const struct prof_item *items, size_t n, bool arena,
                      uint64_t arena_max_bytes, struct kern_shard **out,
                      struct sd_diag *d)
{
    struct kern_table_desc *td;
    struct kern_shard_desc sd;
    size_t i;
    int rv;

    td = calloc(n, sizeof(*td));
    if (td == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    for (i = 0; i < n; i++) {
        const struct trace *tr = items[i].trace;

        if (tr->nbags != items[0].trace->nbags) {
            free(td);
            return sd_diag_set(d, SD_EINVAL,
                               "shard: table \"%s\" has %lld bags, the batch "
                               "is %lld",
                               tr->name, (long long)tr->nbags,
                               (long long)items[0].trace->nbags);
        }
        td[i].rows = tr->rows;
        td[i].dim = items[i].cols;
        td[i].dtype = kern_dtype_of(prof_timed_dtype(be, items[i].dtype));
        td[i].tier = kern_tier_of(prof_timed_tier(be, items[i].tier));
        if (td[i].tier == KERN_TIER_UVM_CACHING)
            td[i].cache_rows = cache_rows(tr->rows, items[i].cache_load_factor);
        td[i].nindices = tr->nindices;
        td[i].offsets = tr->offsets;
        td[i].indices = tr->indices;
    }
    memset(&sd, 0, sizeof(sd));
    sd.ntables = n;
    sd.tables = td;
    sd.nbags = items[0].trace->nbags;
    sd.learning_rate = 0.01f;
    sd.seed = 1;
    sd.reuse_weights = arena; /* weights' values do not change the time */
    sd.arena_max_bytes = arena_max_bytes;
    rv = be->shard_open(device, &sd, out, d);
    free(td);
    return rv;
}

int prof_measure_shard_capped(const struct kern_backend *be, int32_t device,
                              const struct prof_item *items, size_t n,
                              const struct kern_timing_opts *o,
                              uint64_t arena_max_bytes, struct kern_timing *out,
                              struct sd_diag *d)
{
    struct kern_shard *s = NULL;
    int rv;

    if (n == 0) {
        memset(out, 0, sizeof(*out));
        return 0;
    }
    rv = open_shard(be, device, items, n, true, arena_max_bytes, &s, d);
    if (rv != 0)
        return rv;
    rv = be->shard_time(s, o, out);
    if (rv != 0 && rv != SD_ECANCELED)
        sd_diag_set(d, rv, "%s device %d: timing failed: %s", be->name,
                    (int)device, sd_strerror(rv));
    be->shard_close(s);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* The quiet check (profiler.h)                                           */

#define PROBE_TABLES 2
#define PROBE_BAGS   4096
/* Probe timings at open, whose median is the first quiet time. */
#define QUIET_OPEN_PROBES 5

/* Quiet probe times kept: the quiet time is their median. */
#define QUIET_WINDOW 32

struct prof_quiet {
    const struct kern_backend *be;
    struct kern_shard *shard;
    struct kern_timing_opts timing; /* 1 warm-up, 5 steps */
    double quiet_ms;                /* the median of recent[] */
    double recent[QUIET_WINDOW];    /* the newest quiet probe times, a ring */
    size_t nrecent, next;
};

/* Adds a quiet probe time to the window and takes the quiet time anew
 * (kern_timing_summarize() sorts a copy: the ring keeps its order). */
static void quiet_add(struct prof_quiet *q, double ms)
{
    double v[QUIET_WINDOW];
    struct kern_timing tm;

    q->recent[q->next] = ms;
    q->next = (q->next + 1) % QUIET_WINDOW;
    if (q->nrecent < QUIET_WINDOW)
        q->nrecent++;
    memcpy(v, q->recent, q->nrecent * sizeof(*v));
    kern_timing_summarize(v, (int)q->nrecent, &tm);
    q->quiet_ms = tm.median_ms;
}

/* Times the probe: *ms, the median of its steps.  Returns 0, SD_ECANCELED
 * (timing.abort) or the backend's error. */
static int quiet_time(struct prof_quiet *q, double *ms)
{
    struct kern_timing tm;
    int rv = q->be->shard_time(q->shard, &q->timing, &tm);

    if (rv != 0)
        return rv;
    *ms = tm.median_ms;
    return 0;
}

int prof_quiet_open(const struct kern_backend *be, int32_t device,
                    const struct kern_timing_opts *timing,
                    struct prof_quiet **out, struct sd_diag *d)
{
    /* One table of 64 MiB (fp32, 2^18 rows of 64) whose 32 Ki lookups a
     * step go to distinct rows: memory bound, beyond any CPU's last-level
     * cache here; one of 1 MiB whose rows are looked up 17 to 32 times a
     * step: compute bound, inside the caches. */
    static const struct {
        int64_t rows;
        int32_t dim;
        int bin;
    } shape[PROBE_TABLES] = {{1 << 18, 64, 0}, {2048, 128, 5}};
    struct trace traces[PROBE_TABLES];
    struct prof_item items[PROBE_TABLES];
    struct prof_quiet *q;
    double ms;
    size_t i, made = 0;
    int rv = 0, k;

    q = calloc(1, sizeof(*q));
    if (q == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    q->be = be;
    q->timing = *timing;
    q->timing.warmup = 1;
    q->timing.repeats = 5;
    memset(traces, 0, sizeof(traces));
    memset(items, 0, sizeof(items));
    for (i = 0; i < PROBE_TABLES && rv == 0; i++, made++) {
        struct table t;

        memset(&t, 0, sizeof(t));
        snprintf(t.name, sizeof(t.name), "probe%zu", i);
        t.rows = shape[i].rows;
        t.dim = shape[i].dim;
        t.pooling_factor = 8;
        t.bins[shape[i].bin] = 1;
        rv = trace_from_table(&t, PROBE_BAGS, 0x7175696574ull + i, &traces[i]);
        items[i].trace = &traces[i];
        items[i].cols = shape[i].dim;
    }
    if (rv != 0)
        sd_diag_set(d, rv, "making the quiet probe: %s", sd_strerror(rv));
    else
        rv =
            open_shard(be, device, items, PROBE_TABLES, false, 0, &q->shard, d);
    for (i = 0; i < made; i++)
        trace_destroy(&traces[i]);
    if (rv != 0)
        goto out_free_q;
    for (k = 0; k < QUIET_OPEN_PROBES && rv == 0; k++) {
        rv = quiet_time(q, &ms);
        if (rv == 0)
            quiet_add(q, ms);
    }
    if (rv != 0) {
        if (rv != SD_ECANCELED)
            sd_diag_set(d, rv, "%s device %d: timing the quiet probe: %s",
                        be->name, (int)device, sd_strerror(rv));
        goto out_close_shard;
    }
    *out = q;
    return 0;

out_close_shard:
    be->shard_close(q->shard);
out_free_q:
    free(q);
    return rv;
}

void prof_quiet_close(struct prof_quiet *q)
{
    if (q == NULL)
        return;
    q->be->shard_close(q->shard);
    free(q);
}

int prof_profile_name(const struct kern_backend *be, int32_t device,
                      int64_t batch_size, char *buf, size_t cap,
                      struct sd_diag *d)
{
    struct kern_device_info info;
    int rv;

    rv = be->device_info(device, &info);
    if (rv != 0)
        return sd_diag_set(d, rv, "%s device %d: no such device", be->name,
                           (int)device);
    if ((size_t)snprintf(buf, cap, "%s/%s/%lld", be->name, info.model,
                         (long long)batch_size) >= cap)
        return sd_diag_set(d, SD_EINVAL, "profile name is too long");
    return 0;
}

#define PROF_FAMILY_TABLES 256 /* pool tables a family, in a mix */

void prof_run_params_default(struct prof_run_params *p)
{
    memset(p, 0, sizeof(*p));
    p->batch_size = 4096;
    p->family = FAMILY_MIX;
    p->pool_tables = FAMILY_COUNT * PROF_FAMILY_TABLES;
    p->commit_every = 8;
    p->p_rows = PROF_P_ROWS;
    sample_params_default(&p->shape);
    kern_timing_opts_default(&p->timing);
    p->quiet_tolerance = PROF_QUIET_TOLERANCE;
    p->quiet_wait_s = PROF_QUIET_WAIT_S;
    p->plan_alg = PROF_PLAN_GREEDY;
}

void prof_run_params_family(struct prof_run_params *p, int family)
{
    prof_run_params_default(p);
    p->family = family;
    if (family == FAMILY_DLRM) {
        p->pool_tables = SYNTH_DEFAULT_TABLES;
        p->p_rows = 0; /* NeuroShard's shards, as before */
    } else if (family != FAMILY_MIX)
        p->pool_tables = PROF_FAMILY_TABLES;
}

/* The stream row blocks are drawn from: apart from the shards' own. */
#define PROF_ROWS_STREAM 0x726f77626c6f636bull /* "rowblock" */

/*
 * Cuts *t to one row block: k = 2 .. 64 blocks of ceil(rows / k) rows
 * (TorchRec's row-wise geometry), one of them drawn.  A block no lookup
 * lands in leaves the table whole (a shard with nothing to time says
 * nothing).  *cut is set when it was cut.
 */
static int cut_row_block(struct rng *g, struct trace *t, bool *cut)
{
    struct trace b;
    int64_t k = (int64_t)1 << (1 + rng_below(g, 6));
    int64_t per, nblocks, first;
    int rv;

    *cut = false;
    if (k > t->rows)
        k = t->rows;
    if (k < 2)
        return 0;
    per = (t->rows + k - 1) / k;
    nblocks = (t->rows + per - 1) / per;
    first = (int64_t)rng_below(g, (uint64_t)nblocks) * per;
    rv = trace_row_block(t, first,
                         per < t->rows - first ? per : t->rows - first, &b);
    if (rv != 0 || b.nindices == 0) {
        trace_destroy(&b);
        return rv;
    }
    trace_destroy(t);
    *t = b;
    *cut = true;
    return 0;
}

void prof_family_label(int pool_family, const size_t *idx, size_t k, char *out,
                       size_t cap)
{
    bool have[FAMILY_COUNT] = {false};
    size_t j, len = 0;
    int f;

    for (j = 0; j < k; j++)
        have[family_of_index(pool_family, idx[j])] = true;
    out[0] = '\0';
    for (f = 0; f < FAMILY_COUNT; f++)
        if (have[f] && len < cap)
            len += (size_t)snprintf(out + len, cap - len, "%s%s",
                                    len ? "+" : "", family_name(f));
}

/*
 * One draw of sample shard g from the pool: NeuroShard's (neuroshard.md
 * 2.2) for the dlrm family alone, the families' otherwise
 * (sample_draw_grouped(): one family, or all with PROF_P_MIXED; every
 * allowed width but for dlrm tables).
 */
static int draw_shard(const struct prof_run_params *p, struct rng *g,
                      const struct table *pool, size_t *idx, int32_t *dims,
                      size_t *k)
{
    struct sample_groups gr;
    uint8_t *grp;
    size_t i;
    int rv;

    if (p->family == FAMILY_DLRM)
        return sample_draw_shard(g, pool, p->pool_tables, &p->shape, idx, dims,
                                 k);
    grp = malloc(p->pool_tables);
    if (grp == NULL)
        return SD_ENOMEM;
    for (i = 0; i < p->pool_tables; i++)
        grp[i] = (uint8_t)family_of_index(p->family, i);
    gr.group = grp;
    gr.ngroups = FAMILY_COUNT;
    gr.any_dims = ((1u << FAMILY_COUNT) - 1) & ~(1u << FAMILY_DLRM);
    gr.p_mixed = p->family == FAMILY_MIX ? PROF_P_MIXED : 0;
    gr.max_work = PROF_MAX_WORK;
    rv = sample_draw_grouped(g, pool, p->pool_tables, &gr, &p->shape, idx, dims,
                             k);
    free(grp);
    return rv;
}

/* Whether the shard of pool tables idx[0..k) at widths dims fits the
 * memory budget of one measurement (prof_fits(); none: any does). */
static bool within_budget(const struct prof_run_params *p,
                          const struct table *pool, const size_t *idx,
                          const int32_t *dims, size_t k)
{
    struct table shard[PROF_SHARD_TABLES];
    struct prof_footprint f;
    size_t j;

    if (p->max_footprint_bytes == 0)
        return true;
    for (j = 0; j < k; j++) {
        shard[j] = pool[idx[j]];
        shard[j].dim = dims[j];
    }
    prof_footprint(shard, k, p->batch_size, &f);
    return prof_fits(&f, p->max_footprint_bytes);
}

/*
 * Draws sample shard `g` (neuroshard.md 2.2) until it fits the memory
 * budget too: the draws continue the same stream, so sample i stays the
 * same shard for a given seed and budget.
 */
static int draw_within(const struct prof_run_params *p, struct rng *g,
                       const struct table *pool, size_t *idx, int32_t *dims,
                       size_t *k)
{
    int tries, rv;

    for (tries = 0; tries < PROF_BUDGET_TRIES; tries++) {
        rv = draw_shard(p, g, pool, idx, dims, k);
        if (rv != 0 || within_budget(p, pool, idx, dims, *k))
            return rv;
    }
    return SD_EINVAL;
}

/*
 * How a sampled table is cut (a piece of a plan's device): rows [row_first,
 * row_first + row_count) of it (row_count 0: every row), or a data-parallel
 * replica's share of its lookups over `replicas` devices (0: none).
 */
struct prof_cut {
    int64_t row_first, row_count;
    int32_t replicas;
};

/* The shard of the tables plan `pl` (of task tk) puts on device r, as
 * pool indices, widths and cuts in idx, dims, cuts, *k; false where it has
 * none, a shard off HBM, more than PROF_SHARD_TABLES, more than
 * shape.max_bytes of fp32 pieces, or is over the memory budget. */
static bool device_shard(const struct prof_run_params *p,
                         const struct table *pool, const struct task *tk,
                         const struct plan *pl, int32_t r, size_t *idx,
                         int32_t *dims, struct prof_cut *cuts, size_t *k)
{
    struct table piece[PROF_SHARD_TABLES];
    struct prof_footprint f;
    uint64_t bytes = 0;
    size_t s, n = 0;

    for (s = 0; s < pl->nshards; s++) {
        const struct shard *sh = &pl->shards[s];
        const struct table *tb = &tk->tables[sh->table];

        if (sh->device != r)
            continue;
        if (n == PROF_SHARD_TABLES || sh->tier != TIER_HBM)
            return false;
        idx[n] = tk->source[sh->table];
        dims[n] = sh->col_width;
        memset(&cuts[n], 0, sizeof(cuts[n]));
        if (shard_rows(tb, sh) < tb->rows) {
            cuts[n].row_first = sh->row_offset;
            cuts[n].row_count = sh->row_count;
        }
        if (sh->scheme == SCHEME_DP)
            cuts[n].replicas = pl->ndevices;
        /* What is measured: the pool's table cut as the plan cuts it. */
        shard_table(&pool[idx[n]], sh, pl->ndevices, &piece[n]);
        bytes += table_bytes(&piece[n], dims[n]);
        n++;
    }
    *k = n;
    if (n == 0 || bytes > p->shape.max_bytes)
        return false;
    if (p->max_footprint_bytes == 0)
        return true;
    prof_footprint(piece, n, p->batch_size, &f);
    return prof_fits(&f, p->max_footprint_bytes);
}

/*
 * Sample shard `g` shaped like a device of a plan (p->plan_devices N): a
 * task of 10 .. 59 tables of the pool (task_generate(), neuroshard.md 2.4;
 * at most 4 N - 1 GiB of them) planned on N devices of 4 GiB by a greedy
 * baseline drawn from g, or by p->plan_alg, and the pieces of one of its
 * devices, drawn from g (the next one where it is empty or over the
 * budget).  Plans put more and heavier tables on a device than random
 * shards have: docs/models.md, "Measured on the tables' own lookups".
 * feat: the pool's tables with their features, for a plan by a model (NULL
 * for a greedy one: the shapes do).
 */
static int draw_plan_device(const struct prof_run_params *p, struct rng *g,
                            const struct table *pool, const struct table *feat,
                            size_t *idx, int32_t *dims, struct prof_cut *cuts,
                            size_t *k)
{
    static const enum plan_alg greedy[] = {
        PLAN_ALG_DIM_GREEDY, PLAN_ALG_SIZE_GREEDY, PLAN_ALG_LOOKUP_GREEDY,
        PLAN_ALG_SIZE_LOOKUP_GREEDY};
    int32_t n = p->plan_devices, r0, j;
    struct net_cost_model ncm;
    const struct cost_model *m = &cost_model_analytic;
    struct topology t;
    int tries, rv;

    topology_default(&t, n, 4ull << 30);
    t.batch_size = p->batch_size;
    if (p->plan_net != NULL) {
        net_cost_model_init(&ncm, p->plan_net);
        m = &ncm.cm;
    }
    for (tries = 0; tries < PROF_BUDGET_TRIES; tries++) {
        struct task_params tp;
        struct plan_options o;
        struct task *tk;
        struct plan pl;
        struct sd_diag d;
        bool found = false;

        task_params_default(&tp);
        tp.count = 1;
        tp.seed = rng_next(g);
        tp.max_bytes = (uint64_t)(4 * n - 1) << 30;
        rv = task_generate(&tp, feat != NULL ? feat : pool, p->pool_tables, &tk,
                           &d);
        if (rv != 0)
            return rv;
        plan_options_default(&o);
        /* Drawn either way: a greedy profile's shards stay its seed's. */
        o.alg = greedy[rng_below(g, sizeof(greedy) / sizeof(greedy[0]))];
        if (p->plan_alg != PROF_PLAN_GREEDY)
            o.alg = (enum plan_alg)p->plan_alg;
        o.net = p->plan_net;
        o.threads = 1;
        r0 = (int32_t)rng_below(g, (uint64_t)n);
        rv = plan_run(tk->tables, tk->ntables, &t, &o, m, &pl, &d);
        if (rv == 0) {
            for (j = 0; j < n && !found; j++)
                found = device_shard(p, pool, tk, &pl, (r0 + j) % n, idx, dims,
                                     cuts, k);
            plan_destroy(&pl);
        }
        task_array_free(tk, 1);
        if (found)
            return 0;
        if (rv != 0 && rv != SD_ENOSPACE)
            return rv;
    }
    return SD_EINVAL;
}

/*
 * Applies cut c to the trace of a plan's piece (struct prof_cut): a row
 * block keeps the lookups that fall in its rows; a replica gets lookups
 * made from the table's features with the pooling factor over the replicas
 * (what plan_evaluate() prices and `shardctl eval` times), from `seed`.
 */
static int apply_cut(const struct prof_cut *c, uint64_t seed, struct trace *t)
{
    struct trace b;
    struct table tb;
    int rv;

    if (c->row_count > 0) {
        rv = trace_row_block(t, c->row_first, c->row_count, &b);
        if (rv != 0)
            return rv;
        trace_destroy(t);
        *t = b;
    }
    if (c->replicas > 1) {
        rv = trace_to_table(t, &tb);
        if (rv != 0)
            return rv;
        tb.pooling_factor /= c->replicas;
        rv = trace_from_table(&tb, t->nbags, seed, &b);
        if (rv != 0)
            return rv;
        trace_destroy(t);
        *t = b;
    }
    return 0;
}

/* One sample: draw shard i (row blocks of its tables with p->p_rows),
 * make its traces, time it, fill *s. */
static int measure_sample(const struct prof_run_params *p,
                          const struct family_params *sp,
                          const struct table *pool, const struct table *feat,
                          uint64_t i, struct store_sample *s, struct sd_diag *d)
{
    size_t idx[PROF_SHARD_TABLES], k = 0, j;
    int32_t dims[PROF_SHARD_TABLES];
    struct prof_cut cuts[PROF_SHARD_TABLES];
    struct trace traces[PROF_SHARD_TABLES];
    struct prof_item items[PROF_SHARD_TABLES];
    struct kern_timing tm;
    struct rng g, gr;
    bool rows, cut, any_cut = false, any_replica = false;
    int rv;

    rng_seed(&g, rng_derive(p->seed, i));
    rng_seed(&gr, rng_derive(p->seed ^ PROF_ROWS_STREAM, i));
    rows = p->p_rows > 0 && rng_uniform(&gr) < p->p_rows;
    /* A plan's pieces are cut as the plan cuts them, never at random. */
    if (p->plan_devices > 0 && p->plan_alg != PROF_PLAN_GREEDY)
        rows = false;
    memset(cuts, 0, sizeof(cuts));
    if (p->plan_devices > 0) {
        rv = draw_plan_device(p, &g, pool, feat, idx, dims, cuts, &k);
        if (rv != 0)
            return sd_diag_set(
                d, rv,
                "no device of a plan on %d devices fits in "
                "the memory budget (%llu MiB)",
                (int)p->plan_devices,
                (unsigned long long)(p->max_footprint_bytes >> 20));
    } else {
        rv = draw_within(p, &g, pool, idx, dims, &k);
    }
    if (rv != 0)
        return sd_diag_set(d, rv,
                           "no shard of at most %zu tables fits in "
                           "%llu bytes (memory budget %llu MiB)",
                           p->shape.max_tables,
                           (unsigned long long)p->shape.max_bytes,
                           (unsigned long long)(p->max_footprint_bytes >> 20));
    memset(traces, 0, sizeof(traces));
    /* Tier and load factor zero (HBM): a random shard is timed in HBM
     * (they were left as the stack had them, and a backend with tiers
     * could have timed a sample in host memory). */
    memset(items, 0, sizeof(items));
    for (j = 0; j < k && rv == 0; j++) {
        /* Making traces takes a while too: a stop is honoured here. */
        if (p->stop != NULL && atomic_load(p->stop) != 0) {
            rv = SD_ECANCELED;
            break;
        }
        rv = family_trace(sp, idx[j], &traces[j], NULL);
        if (rv == 0 && rows) {
            rv = cut_row_block(&gr, &traces[j], &cut);
            any_cut |= cut;
        }
        if (rv == 0 && (cuts[j].row_count > 0 || cuts[j].replicas > 1)) {
            rv = apply_cut(&cuts[j], rng_next(&gr), &traces[j]);
            any_cut |= cuts[j].row_count > 0;
            any_replica |= cuts[j].replicas > 1;
        }
        if (rv != 0)
            break;
        items[j].trace = &traces[j];
        items[j].cols = dims[j];
        /* Features of the lookups timed, at the profile's batch. */
        rv = trace_to_table(&traces[j], &s->tables[j]);
        s->tables[j].dim = dims[j];
        /* What is timed: the pool's dtype where the kernels have it. */
        s->tables[j].dtype = prof_timed_dtype(p->be, pool[idx[j]].dtype);
        items[j].dtype = s->tables[j].dtype;
    }
    if (rv != 0 && rv != SD_ECANCELED)
        sd_diag_set(d, rv, "generating a trace: %s", sd_strerror(rv));
    else if (rv == 0)
        rv = prof_measure_shard_capped(p->be, p->device, items, k, &p->timing,
                                       p->max_footprint_bytes / 2, &tm, d);
    for (j = 0; j < k; j++)
        trace_destroy(&traces[j]);
    if (rv != 0)
        return rv;
    s->ntables = k;
    if (any_cut)
        snprintf(s->source, sizeof(s->source), "%s", PROF_SOURCE_ROWS);
    else if (any_replica)
        snprintf(s->source, sizeof(s->source), "%s", PROF_SOURCE_REPLICAS);
    prof_family_label(p->family, idx, k, s->family, sizeof(s->family));
    s->measured_ms = tm.median_ms;
    s->spread_ms = tm.p90_ms - tm.p10_ms;
    return 0;
}

/* Sleeps about `s` seconds, returning early on a stop or an abort. */
static void pause_s(const struct prof_run_params *p, double s)
{
    struct timespec slice = {0, 50 * 1000 * 1000};
    double until = now_s() + s;

    while (now_s() < until) {
        if ((p->stop != NULL && atomic_load(p->stop) != 0) ||
            (p->timing.abort != NULL && atomic_load(p->timing.abort) != 0))
            return;
        nanosleep(&slice, NULL);
    }
}

/*
 * One sample between two probes (the quiet check, profiler.h): *keep false
 * when either probe was too slow and the sample is to be measured again.
 * *busy_since is when the sample's first slow try was (0: none yet).
 */
static int measure_quiet(const struct prof_run_params *p,
                         const struct family_params *sp,
                         const struct table *pool, const struct table *feat,
                         uint64_t i, struct prof_quiet *q, double *busy_since,
                         struct store_sample *s, bool *keep,
                         struct prof_run_result *res, struct sd_diag *d)
{
    double before, after, slow;
    int rv;

    *keep = true;
    if (q == NULL)
        return measure_sample(p, sp, pool, feat, i, s, d);
    rv = quiet_time(q, &before);
    if (rv == 0)
        rv = measure_sample(p, sp, pool, feat, i, s, d);
    if (rv == 0)
        rv = quiet_time(q, &after);
    if (rv != 0)
        return rv;
    /* The faster probe: load that spans the sample slows both, while a
     * host's one-off stall (one probe in five here) slows one. */
    slow = (before < after ? before : after) / q->quiet_ms;
    if (slow > res->max_slowdown)
        res->max_slowdown = slow;
    if (slow <= 1 + p->quiet_tolerance) {
        *busy_since = 0;
        quiet_add(q, before);
        quiet_add(q, after);
        return 0;
    }
    if (*busy_since == 0)
        *busy_since = now_s();
    if (now_s() - *busy_since < p->quiet_wait_s) {
        *keep = false;
        res->remeasured++;
        if (p->busy != NULL)
            p->busy(p->progress_ctx, slow);
        pause_s(p, 0.5);
        return 0;
    }
    /* Slow for quiet_wait_s: the device is this slow now. */
    res->kept_busy++;
    q->nrecent = q->next = 0;
    quiet_add(q, before);
    quiet_add(q, after);
    *busy_since = 0;
    return 0;
}

/* The pool's tables at the profile's batch. */
static void pool_params(const struct prof_run_params *p,
                        struct family_params *sp)
{
    family_params_default(sp);
    sp->family = p->family;
    sp->count = p->pool_tables;
    sp->seed = p->seed;
    sp->batch_size = p->batch_size;
}

int prof_make_pool(const struct prof_run_params *p, struct table **out)
{
    struct family_params sp;

    pool_params(p, &sp);
    return family_shapes(&sp, out);
}

int prof_run(struct store *st, const struct prof_run_params *p,
             struct prof_run_result *res, struct sd_diag *d)
{
    struct store_profile prof;
    struct kern_device_info info;
    struct family_params sp;
    struct store_sample s;
    struct table *pool = NULL, *shard = NULL, *feat = NULL;
    struct prof_quiet *own_quiet = NULL, *quiet;
    uint64_t have = 0, pending = 0;
    double start = now_s(), busy_since = 0;
    bool keep;
    int rv;

    memset(res, 0, sizeof(*res));
    if (p->shape.max_tables == 0 || p->shape.max_tables > PROF_SHARD_TABLES ||
        p->plan_devices < 0 || p->plan_devices > PROF_PLAN_DEVICES ||
        p->commit_every == 0 || p->pool_tables == 0 || p->family < 0 ||
        !(p->p_rows >= 0 && p->p_rows <= 1) || p->family > FAMILY_MIX ||
        !(p->quiet_tolerance >= 0 && p->quiet_tolerance <= 10) ||
        !(p->quiet_wait_s >= 0 && p->quiet_wait_s <= 86400))
        return sd_diag_set(d, SD_EINVAL, "profile: bad parameters");
    if (p->plan_alg != PROF_PLAN_GREEDY) {
        const char *why = NULL;

        if (p->plan_alg < 0 || p->plan_alg >= PLAN_ALG_COUNT ||
            p->plan_alg == PLAN_ALG_DREAMSHARD)
            why = "not an algorithm whose plans are profiled (dreamshard's "
                  "policy follows a model: profile neuroshard's)";
        else if (p->plan_devices == 0)
            why = "shards shaped like the devices of plans need the plans' "
                  "devices (--plan-devices N)";
        else if (p->plan_alg == PLAN_ALG_NEUROSHARD && p->plan_net == NULL)
            why = "neuroshard plans with a model: give its model";
        if (why != NULL)
            return sd_diag_set(d, SD_EINVAL, "profile: plans by %s: %s",
                               plan_alg_name((enum plan_alg)p->plan_alg), why);
    }
    rv = prof_profile_name(p->be, p->device, p->batch_size, res->profile,
                           sizeof(res->profile), d);
    if (rv != 0)
        return rv;
    rv = p->be->device_info(p->device, &info);
    if (rv != 0)
        return sd_diag_set(d, rv, "%s device %d: no such device", p->be->name,
                           (int)p->device);

    memset(&prof, 0, sizeof(prof));
    snprintf(prof.name, sizeof(prof.name), "%s", res->profile);
    snprintf(prof.backend, sizeof(prof.backend), "%s", p->be->name);
    snprintf(prof.device_model, sizeof(prof.device_model), "%s", info.model);
    prof.batch_size = p->batch_size;
    rv = store_profile_get_or_create(st, &prof, &res->profile_id, d);
    if (rv != 0)
        return rv;
    rv = store_sample_count(st, res->profile_id, STORE_KIND_COMPUTE, 0, &have,
                            d);
    if (rv != 0)
        return rv;
    res->existing = have;
    if (have >= p->target_samples)
        return 0;

    pool_params(p, &sp);
    if (p->pool != NULL)
        pool = (struct table *)p->pool; /* borrowed: not freed below */
    else
        rv = family_shapes(&sp, &pool);
    /* A plan's device may hold up to PROF_SHARD_TABLES tables. */
    shard =
        calloc(p->plan_devices > 0 ? PROF_SHARD_TABLES : p->shape.max_tables,
               sizeof(*shard));
    /* Plans by an algorithm that reads the features need them whole. */
    if (rv == 0 && p->plan_devices > 0 && p->plan_alg != PROF_PLAN_GREEDY) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

        rv = family_tables(&sp, ncpu > 0 ? (unsigned)ncpu : 1, &feat);
    }
    if (rv != 0 || shard == NULL) {
        rv = sd_diag_set(d, rv ? rv : SD_ENOMEM, "making the table pool: %s",
                         sd_strerror(rv ? rv : SD_ENOMEM));
        goto out_free;
    }

    if (p->quiet_tolerance > 0 && p->quiet == NULL) {
        rv = prof_quiet_open(p->be, p->device, &p->timing, &own_quiet, d);
        if (rv == SD_ECANCELED) {
            rv = 0;
            res->interrupted = true;
            goto out_free;
        }
        if (rv != 0)
            goto out_free;
    }
    quiet = p->quiet_tolerance > 0 ? (p->quiet ? p->quiet : own_quiet) : NULL;

    while (have + res->added < p->target_samples) {
        if ((p->stop != NULL && atomic_load(p->stop) != 0) ||
            (p->max_seconds > 0 && now_s() - start >= p->max_seconds)) {
            res->interrupted = true;
            break;
        }
        memset(&s, 0, sizeof(s));
        s.profile_id = res->profile_id;
        s.kind = STORE_KIND_COMPUTE;
        s.tables = shard;
        snprintf(s.device, sizeof(s.device), "%s", info.name);
        snprintf(s.source, sizeof(s.source), "random");
        rv = measure_quiet(p, &sp, pool, feat, have + res->added + pending,
                           quiet, &busy_since, &s, &keep, res, d);
        if (rv == 0 && !keep)
            continue; /* measured while the device was busy: again */
        if (rv == SD_ECANCELED) { /* p->timing.abort: the sample is dropped */
            rv = 0;
            res->interrupted = true;
            break;
        }
        if (rv == 0 && pending == 0)
            rv = store_sample_batch_begin(st, d);
        if (rv == 0)
            rv = store_sample_add(st, &s, NULL, d);
        if (rv != 0)
            break;
        pending++;
        if (pending == p->commit_every ||
            have + res->added + pending == p->target_samples) {
            rv = store_sample_batch_commit(st, d);
            if (rv != 0)
                break;
            res->added += pending;
            pending = 0;
            if (p->progress != NULL)
                p->progress(p->progress_ctx, have + res->added,
                            p->target_samples, res->added, now_s() - start);
        }
    }
    /* Commit what was measured before a stop; roll back after an error. */
    if (pending > 0) {
        if (rv == 0 && store_sample_batch_commit(st, d) == 0)
            res->added += pending;
        else
            store_sample_batch_abort(st);
    }
    if (rv == 0 && p->progress != NULL)
        p->progress(p->progress_ctx, have + res->added, p->target_samples,
                    res->added, now_s() - start);

out_free:
    prof_quiet_close(own_quiet);
    free(shard);
    free(feat);
    if (p->pool == NULL)
        free(pool);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* Plan evaluation: a cost model that measures.                            */

struct measure_ctx {
    const struct kern_backend *be;
    const struct table *tables; /* base of the plan's tables */
    size_t ntables;
    const struct trace *given; /* the tables' own lookups, or NULL */
    struct trace *traces;      /* else one per table, made on first use */
    int64_t batch;
    uint64_t seed;
    const struct kern_timing_opts *o;
    struct kern_timing *timings; /* per device, may be NULL */
    int32_t calls;               /* plan_evaluate calls once per device */
    const struct plan *plan;     /* the plan measured (its row offsets) */
    int err;
    struct sd_diag *d;
};

/*
 * The row offset of a row block of `rows` rows of plan table ti on device
 * r (the first such shard of the plan); -1 when there is none.
 */
static int64_t block_offset(const struct measure_ctx *c, size_t ti, int32_t r,
                            int64_t rows)
{
    size_t k;

    for (k = 0; k < c->plan->nshards; k++) {
        const struct shard *s = &c->plan->shards[k];

        if (s->table == ti && s->device == r && s->row_count == rows)
            return s->row_offset;
    }
    return -1;
}

/* The plan table a row block (a copy with fewer rows) was cut from, by
 * name; ntables when none. */
static size_t block_table(const struct measure_ctx *c, const struct table *tb)
{
    size_t ti;

    for (ti = 0; ti < c->ntables; ti++)
        if (strcmp(c->tables[ti].name, tb->name) == 0 &&
            tb->rows < c->tables[ti].rows)
            return ti;
    return c->ntables;
}

/* Whether tb is one of the plan's tables (not a copy plan_evaluate() made
 * for a row block, a replica or a shard in a timed tier). */
static bool is_plan_table(const struct measure_ctx *c, const struct table *tb)
{
    return tb >= c->tables && (size_t)(tb - c->tables) < c->ntables;
}

/*
 * The plan table an item's table is, or is a whole copy of (a shard off
 * HBM whose tier the backend times reaches the model as a copy carrying
 * its tier: plan_evaluate_tiers()), so that it is timed on the table's own
 * lookups; ntables for a row block or a replica, which have their own.
 */
static size_t plan_table_of(const struct measure_ctx *c, const struct table *tb)
{
    size_t ti;

    if (is_plan_table(c, tb))
        return (size_t)(tb - c->tables);
    if (tb->tier == TIER_HBM)
        return c->ntables;
    for (ti = 0; ti < c->ntables; ti++) {
        const struct table *o = &c->tables[ti];

        if (strcmp(o->name, tb->name) == 0 && o->rows == tb->rows &&
            o->pooling_factor == tb->pooling_factor)
            return ti;
    }
    return c->ntables;
}

static double measured_shard_ms(void *ctxp, const struct topology *t,
                                const struct shard_item *items, size_t n)
{
    struct measure_ctx *c = ctxp;
    struct prof_item *pi = NULL;
    struct trace *own = NULL; /* row blocks' and replicas' lookups */
    struct kern_timing tm;
    int32_t device = c->calls++;
    size_t i;
    int rv = 0;

    if (c->err != 0)
        return 0;
    pi = calloc(n ? n : 1, sizeof(*pi));
    own = calloc(n ? n : 1, sizeof(*own));
    if (pi == NULL || own == NULL) {
        free(pi);
        free(own);
        c->err = sd_diag_set(c->d, SD_ENOMEM, "out of memory");
        return 0;
    }
    for (i = 0; i < n && rv == 0; i++) {
        const struct table *tb = items[i].table;
        size_t ti = plan_table_of(c, tb);

        if (ti < c->ntables && c->given != NULL) {
            pi[i].trace = &c->given[ti];
        } else if (ti < c->ntables) {
            /* A table's lookups rebuilt, once for all its slices. */
            if (c->traces[ti].offsets == NULL)
                rv = trace_from_table(tb, c->batch, rng_derive(c->seed, ti),
                                      &c->traces[ti]);
            pi[i].trace = &c->traces[ti];
        } else {
            /* A row block of a table whose lookups were given: those of
             * them that fall in its rows (what the device looks up, and
             * what the profiler times for a block).  Otherwise, a replica
             * or a block of a table without them: lookups made from its
             * own features. */
            size_t bt = c->given != NULL ? block_table(c, tb) : c->ntables;
            int64_t first =
                bt < c->ntables ? block_offset(c, bt, device, tb->rows) : -1;

            if (first >= 0)
                rv = trace_row_block(&c->given[bt], first, tb->rows, &own[i]);
            else
                rv = trace_from_table(
                    tb, c->batch, rng_derive(c->seed, c->ntables + i), &own[i]);
            pi[i].trace = &own[i];
        }
        pi[i].cols = items[i].cols;
        pi[i].dtype = tb->dtype;
        /* The plan's own tables come in HBM, or in a tier the backend does
         * not time (its host-link time is modelled); copies carry the
         * shard's tier. */
        if (!is_plan_table(c, tb)) {
            pi[i].tier = (enum table_tier)tb->tier;
            pi[i].cache_load_factor = tb->cache_load_factor;
        }
    }
    if (rv != 0)
        sd_diag_set(c->d, rv, "making lookups for the plan: %s",
                    sd_strerror(rv));
    else
        rv = prof_measure_shard(c->be,
                                device < c->be->device_count() ? device : 0, pi,
                                n, c->o, &tm, c->d);
    for (i = 0; i < n; i++)
        trace_destroy(&own[i]);
    free(own);
    free(pi);
    if (rv != 0) {
        c->err = rv;
        return 0;
    }
    if (c->timings != NULL)
        c->timings[device] = tm;
    return tm.median_ms;
}

int prof_eval_plan(const struct kern_backend *be, struct plan *p,
                   const struct table *tables, size_t ntables,
                   const struct trace *traces, const struct topology *t,
                   enum optimizer opt, const struct kern_timing_opts *o,
                   uint64_t seed, struct kern_timing *timings,
                   struct sd_diag *d)
{
    struct measure_ctx c;
    struct cost_model m;
    size_t i;
    int rv;

    for (i = 0; traces != NULL && i < ntables; i++)
        if (traces[i].nbags != t->batch_size)
            return sd_diag_set(d, SD_EINVAL,
                               "the lookups of table \"%s\" have %lld bags, "
                               "the batch is %lld",
                               tables[i].name, (long long)traces[i].nbags,
                               (long long)t->batch_size);
    memset(&c, 0, sizeof(c));
    c.be = be;
    c.tables = tables;
    c.ntables = ntables;
    c.given = traces;
    c.batch = t->batch_size;
    c.seed = seed;
    c.o = o;
    c.timings = timings;
    c.plan = p;
    c.d = d;
    c.traces = calloc(ntables, sizeof(*c.traces));
    if (c.traces == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    /* The model's name outlives this call (plans keep a pointer to it),
     * so it is a string constant, never written: safe from any thread. */
    m.name = strcmp(be->name, "cuda") == 0 ? "measured:cuda" : "measured:cpu";
    m.shard_ms = measured_shard_ms;
    m.ctx = &c;
    rv = plan_evaluate_tiers(p, tables, ntables, t, opt, &m,
                             prof_timed_tiers(be));
    if (rv == 0 && c.err != 0)
        rv = c.err;
    else if (rv != 0)
        sd_diag_set(d, rv, "out of memory");
    for (i = 0; i < ntables; i++)
        trace_destroy(&c.traces[i]);
    free(c.traces);
    return rv;
}
