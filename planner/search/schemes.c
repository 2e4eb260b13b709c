/*
 * The sharding-scheme pass (search_int.h): which tables leave neuroshard's
 * column search for row blocks or replicas, and their shards.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "search/search_int.h"
#include "shardd/bytes.h"

/* Replicas take at most this share of the smallest device's memory, and
 * only tables of at most DP_TABLE_SHARE of it are weighed for replication
 * (a replica costs every device its bytes). */
#define DP_MEM_SHARE   0.1
#define DP_TABLE_SHARE 0.001

/* A table's bytes and index, to order the tables largest first: the
 * hardest to fit are placed first. */
struct by_bytes {
    uint64_t bytes;
    size_t idx;
};

/* What the model says of one table: NAN (lighter: -1) until asked. */
struct table_figs {
    double whole_ms;  /* whole, alone (alone_ms()) */
    double whole_add; /* whole, on the mean device (whole_add_ms()) */
    double narrow_ms; /* its narrowest slice alone (narrow_ms()) */
    double dp_ms;     /* replica_costs(): replicated ... */
    double tw_ms;     /* ... and placed once */
    int8_t lighter;   /* rows_lighter() */
};

/*
 * What the model says of the tables, asked for once: a second pass over
 * the same tables (scheme_pass_run()'s prev) starts from the first's
 * (it priced them all again: 3 % of an 856-table plan).
 */
struct scheme_figs {
    float zmean[NET_H2];    /* the head's input of the mean device */
    double zmean_out;       /* the head's output there, unscaled */
    double mean_ms;         /* the mean device's cost, every table whole */
    struct table_figs *tf;  /* [n] */
    struct by_bytes *order; /* [n] the tables, largest first */
};

/* What the pass works with. */
struct pass {
    const struct table *tables;
    size_t n;
    const struct topology *t;
    const struct plan_options *o;
    double scale;          /* the topology's batch / the model's */
    struct scheme_figs *f; /* the model's figures (the pass's own) */
    uint64_t *used;        /* [ndevices] bytes fixed so far (pins too) */
    double *load;          /* [ndevices] ms fixed so far, each shard alone */
    uint64_t dp_bytes;     /* replicas' bytes on every device */
    bool lighter;    /* tables lighter in rows split so (REASON_LIGHTER) */
    size_t nlighter; /* such tables seen */
};

/* The model's cost of z, the head's input (scaled to the topology). */
static double z_ms(const struct pass *ps, const float z[NET_H2])
{
    return net_head_z(ps->o->net, z) * ps->scale;
}

/* The model's cost of tb at cols alone (of table i whole: its whole_ms). */
static double alone_ms(const struct pass *ps, const struct table *tb,
                       int32_t cols)
{
    float z[NET_H2], proj[NET_H2];
    int o;

    net_head_init(ps->o->net, z);
    net_projected(ps->o->net, ps->o->memo, tb, cols, proj);
    for (o = 0; o < NET_H2; o++)
        z[o] += proj[o];
    return z_ms(ps, z);
}

/* What tb adds to the mean device. */
static double marginal_ms(const struct pass *ps, const struct table *tb)
{
    float z[NET_H2], proj[NET_H2];
    int o;

    net_projected(ps->o->net, ps->o->memo, tb, tb->dim, proj);
    for (o = 0; o < NET_H2; o++)
        z[o] = ps->f->zmean[o] + proj[o];
    return (net_head_z(ps->o->net, z) - ps->f->zmean_out) * ps->scale;
}

/* What table i whole adds to the mean device: asked for by two rules, kept
 * from the first (a daemon's memo lookups were a twentieth of its time). */
static double whole_add_ms(const struct pass *ps, size_t i)
{
    struct table_figs *tf = &ps->f->tf[i];

    if (isnan(tf->whole_add))
        tf->whole_add = marginal_ms(ps, &ps->tables[i]);
    return tf->whole_add;
}

static const struct table_constraint *constraint(const struct pass *ps,
                                                 size_t i)
{
    return ps->o->constraints ? &ps->o->constraints[i] : NULL;
}

static bool pinned(const struct pass *ps, size_t i)
{
    return ps->o->pins != NULL && ps->o->pins[i] >= 0;
}

/* Appends table i's rows in k blocks on devices first, first + 1, ... */
static int add_blocks(struct pass *ps, struct scheme_pass *sp, size_t i,
                      int32_t first, int32_t k, enum plan_scheme sc)
{
    const struct table *tb = &ps->tables[i];
    int64_t at = 0, base = tb->rows / k, extra = tb->rows % k;
    int32_t b;

    for (b = 0; b < k; b++) {
        struct shard s = {.table = (uint32_t)i,
                          .device = first + b,
                          .col_width = tb->dim,
                          .row_offset = at,
                          .row_count = base + (b < extra),
                          .scheme = (uint8_t)sc};
        struct table view;

        if (plan_add_shard(&sp->shards, &s) != 0)
            return SD_ENOMEM;
        shard_table(tb, &s, ps->t->ndevices, &view);
        ps->used[s.device] += shard_block_bytes(tb, &s, ps->o->optimizer);
        ps->load[s.device] += alone_ms(ps, &view, tb->dim);
        at += s.row_count;
    }
    return 0;
}

/* The model's view of one of k row blocks of table i (at least a row). */
static void block_view(const struct pass *ps, size_t i, int32_t k,
                       struct table *view)
{
    const struct table *tb = &ps->tables[i];
    struct shard s = {.col_width = tb->dim, .row_count = tb->rows / k};

    if (s.row_count < 1)
        s.row_count = 1;
    shard_table(tb, &s, ps->t->ndevices, view);
}

/* The cost of one of k row blocks of table i alone. */
static double block_ms(const struct pass *ps, size_t i, int32_t k)
{
    struct table view;

    block_view(ps, i, k, &view);
    return alone_ms(ps, &view, ps->tables[i].dim);
}

/* A host's devices (all of them where they are fewer). */
static int32_t host_devices(const struct topology *t)
{
    return t->devices_per_host < t->ndevices ? t->devices_per_host
                                             : t->ndevices;
}

/* What `cols` columns of a table placed once cost in the all-to-all, one
 * way: the batch's pooled outputs of the other devices' samples. */
static double a2a_ms(const struct topology *t, int32_t cols)
{
    int32_t n = t->ndevices;

    return (double)t->batch_size * cols * topology_comm_esz(t) *
           (double)(n - 1) / (double)n /
           collective_link_bw(t, n > host_devices(t));
}

/* Devices [first, first + k) can each take 1/k of table i's rows. */
static bool blocks_fit(const struct pass *ps, size_t i, int32_t first,
                       int32_t k)
{
    const struct table *tb = &ps->tables[i];
    struct shard s = {.col_width = tb->dim,
                      .row_count = tb->rows / k + (tb->rows % k != 0)};
    uint64_t b = shard_block_bytes(tb, &s, ps->o->optimizer);
    int32_t r;

    if (tb->rows < k)
        return false;
    for (r = first; r < first + k; r++)
        if (ps->used[r] + b > topology_mem(ps->t, r))
            return false;
    return true;
}

/*
 * Whether table i's blocks over one host would still outweigh the mean
 * device, and spread over every device make a shorter step, their partial
 * sums reduced over the hosts' link included.  The step is what the
 * slowest device takes, so each layout is weighed with the load of the
 * other tables (rest: every table's cost whole but i's) as it would lie:
 * spread, every device carries a block, the reduce over all of them and
 * its share of the rest; on one host, its L devices carry the blocks and
 * the host's reduce, and the rest fills the devices up to the mean of
 * everything, the host's first when it is light.  Comparing one device's
 * block and reduce alone chose the spread behind slow links, where every
 * device then waits for the reduce over the hosts' link: 61 tables on 4
 * hosts of 4 devices at a hundredth of the default link, a 12 M-row table
 * of pooling 120 spread made a 73.0 ms plan, beaten by the column search
 * alone (58.8 ms); on one host it is 55.2 ms (test_schemes).  The estimate
 * is still rough: at a tenth of the link it spreads (24.0 ms) where one
 * host gives 22.4 ms, the other tables' comm and lumps it does not see.
 */
static bool spread_pays(const struct pass *ps, size_t i)
{
    const struct topology *t = ps->t;
    int32_t L = t->devices_per_host, n = t->ndevices, cols = ps->tables[i].dim;
    double host = block_ms(ps, i, L),
           rest = fmax(0, ps->f->mean_ms * n - ps->f->tf[i].whole_ms),
           on_host = host + collective_row_group_ms(t, cols, L, false),
           spread = block_ms(ps, i, n) +
                    collective_row_group_ms(t, cols, n, true) + rest / n;

    return host > ps->f->mean_ms &&
           spread < fmax(on_host, (rest + L * on_host) / n);
}

/*
 * Table i in row blocks: over the devices of the least loaded host that can
 * hold them (the constraint's host if it names one; min_row_shards at most
 * a host's devices), else over every device.  SD_ENOSPACE when neither is
 * allowed and fits.
 */
static int split_rows(struct pass *ps, struct scheme_pass *sp, size_t i,
                      struct sd_diag *d)
{
    const struct table_constraint *c = constraint(ps, i);
    const struct topology *t = ps->t;
    int32_t L = t->devices_per_host, hosts = t->ndevices / L, h, best = -1;
    double best_load = INFINITY;

    if (constraint_allows(c, SCHEME_TWRW) &&
        (c == NULL || c->min_row_shards <= L))
        for (h = 0; h < hosts; h++) {
            double load = 0;
            int32_t r;

            if (c != NULL && c->host >= 0 && c->host != h)
                continue;
            for (r = h * L; r < (h + 1) * L; r++)
                load += ps->load[r];
            if (load < best_load && blocks_fit(ps, i, h * L, L)) {
                best = h;
                best_load = load;
            }
        }
    /* A host's blocks that would still outweigh the mean device spread
     * over every device instead (when allowed, they fit, and the blocks'
     * partial sums reduced over the hosts' link do not cost more than the
     * lookups spared: behind a slow link they can cost a hundredfold). */
    if (best >= 0 && t->ndevices > L && constraint_allows(c, SCHEME_RW) &&
        (c == NULL || c->host < 0) && spread_pays(ps, i) &&
        blocks_fit(ps, i, 0, t->ndevices))
        return add_blocks(ps, sp, i, 0, t->ndevices, SCHEME_RW);
    if (best >= 0)
        return add_blocks(ps, sp, i, best * L, L, SCHEME_TWRW);
    if (constraint_allows(c, SCHEME_RW) && (c == NULL || c->host < 0) &&
        blocks_fit(ps, i, 0, t->ndevices))
        return add_blocks(ps, sp, i, 0, t->ndevices, SCHEME_RW);
    {
        const struct table *tb = &ps->tables[i];
        struct shard s = {.col_width = tb->dim,
                          .row_count = tb->rows / t->ndevices +
                                       (tb->rows % t->ndevices != 0)};
        char b0[SD_BYTES_TEXT], b1[SD_BYTES_TEXT], b2[SD_BYTES_TEXT];
        uint64_t room = 0;
        int32_t r;

        for (r = 0; r < t->ndevices; r++)
            if (topology_mem(t, r) > ps->used[r] &&
                topology_mem(t, r) - ps->used[r] > room)
                room = topology_mem(t, r) - ps->used[r];
        return sd_diag_set(
            d, SD_ENOSPACE,
            "neuroshard: table \"%s\" needs %s: even in row blocks over "
            "all %d devices a block needs %s, and the most a device has "
            "left is %s; %s%s",
            tb->name,
            sd_bytes_text(shard_bytes(tb, tb->dim, ps->o->optimizer), b0),
            (int)t->ndevices,
            sd_bytes_text(shard_block_bytes(tb, &s, ps->o->optimizer), b1),
            sd_bytes_text(room, b2), topology_more_memory(t),
            constraint_allows(c, SCHEME_RW) ? "" : ", or allow row_wise");
    }
}

/*
 * Per device, what table i costs replicated (its local batch, its share of
 * the gradient all-reduce) and placed once (its share of one device's
 * lookups, its columns in every device's all-to-all, both ways).
 */
static void replica_costs(const struct pass *ps, size_t i, double *dp_ms,
                          double *tw_ms)
{
    const struct table *tb = &ps->tables[i];
    const struct topology *t = ps->t;
    int32_t n = t->ndevices, L = t->devices_per_host;
    struct shard s = {.col_width = tb->dim, .scheme = SCHEME_DP};
    struct table local;
    double cols_bytes =
        (double)t->batch_size / n * topology_comm_esz(t) * tb->dim;
    double remote = (double)(n - L) / n;

    struct table_figs *tf = &ps->f->tf[i];

    if (!isnan(tf->dp_ms)) {
        *dp_ms = tf->dp_ms;
        *tw_ms = tf->tw_ms;
        return;
    }
    /* The model's marginal cost of a tiny table can come out below zero
     * (it is not additive); a table never saves time, so lookups count at
     * least nothing and the choice rests on the exchanges. */
    shard_table(tb, &s, n, &local);
    *dp_ms = fmax(0, marginal_ms(ps, &local)) +
             collective_all_reduce_ms(t, (double)table_bytes(tb, tb->dim), n,
                                      n > L) -
             2 * (n - 1) * t->link_latency_ms; /* bucketed: latency once */
    *tw_ms = fmax(0, whole_add_ms(ps, i)) / n +
             2 * cols_bytes *
                 (remote / t->inter_host_bw + (1 - remote) / t->intra_host_bw);
    tf->dp_ms = *dp_ms;
    tf->tw_ms = *tw_ms;
}

static int cmp_bytes_desc(const void *a, const void *b)
{
    const struct by_bytes *x = a, *y = b;

    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static void figs_free(struct scheme_figs *f)
{
    if (f == NULL)
        return;
    free(f->tf);
    free(f->order);
    free(f);
}

/* n tables' figures, none asked yet; NULL when memory is short. */
static struct scheme_figs *figs_new(size_t n)
{
    struct scheme_figs *f = calloc(1, sizeof(*f));
    size_t m = n ? n : 1, i;

    if (f == NULL)
        return NULL;
    f->tf = malloc(m * sizeof(*f->tf));
    f->order = malloc(m * sizeof(*f->order));
    if (!f->tf || !f->order) {
        figs_free(f);
        return NULL;
    }
    for (i = 0; i < n; i++)
        f->tf[i] = (struct table_figs){NAN, NAN, NAN, NAN, NAN, -1};
    return f;
}

/* A copy of prev (n tables), to extend. */
static struct scheme_figs *figs_copy(const struct scheme_figs *prev, size_t n)
{
    struct scheme_figs *f = figs_new(n);

    if (f == NULL)
        return NULL;
    memcpy(f->zmean, prev->zmean, sizeof(f->zmean));
    f->zmean_out = prev->zmean_out;
    f->mean_ms = prev->mean_ms;
    memcpy(f->tf, prev->tf, n * sizeof(*f->tf));
    memcpy(f->order, prev->order, n * sizeof(*f->order));
    return f;
}

/* The mean device, each table whole, the tables' order: what every pass
 * needs first. */
static void figs_whole(struct pass *ps)
{
    struct scheme_figs *f = ps->f;
    const struct plan_options *o = ps->o;
    float proj[NET_H2];
    size_t i;
    int k;

    net_head_init(o->net, f->zmean);
    f->mean_ms = 0;
    for (i = 0; i < ps->n; i++) {
        const struct table *tb = &ps->tables[i];
        float z[NET_H2];

        net_projected(o->net, o->memo, tb, tb->dim, proj);
        net_head_init(o->net, z);
        for (k = 0; k < NET_H2; k++) {
            f->zmean[k] += proj[k] / (float)ps->t->ndevices;
            z[k] += proj[k];
        }
        f->tf[i].whole_ms = z_ms(ps, z);
        f->mean_ms += f->tf[i].whole_ms;
        f->order[i] = (struct by_bytes){table_bytes(tb, tb->dim), i};
    }
    f->mean_ms /= ps->t->ndevices;
    f->zmean_out = net_head_z(o->net, f->zmean);
    qsort(f->order, ps->n, sizeof(*f->order), cmp_bytes_desc);
}

/* Sets up ps: the model's figures (prev's, where given: the same tables,
 * topology and model), the pinned tables' bytes. */
static int pass_init(struct pass *ps, const struct table *tables, size_t n,
                     const struct topology *t, const struct plan_options *o,
                     const struct scheme_figs *prev)
{
    size_t i;

    memset(ps, 0, sizeof(*ps));
    ps->tables = tables;
    ps->n = n;
    ps->t = t;
    ps->o = o;
    ps->scale = (double)t->batch_size / (double)o->net->batch_size;
    ps->used = calloc((size_t)t->ndevices, sizeof(*ps->used));
    ps->load = calloc((size_t)t->ndevices, sizeof(*ps->load));
    ps->f = prev != NULL ? figs_copy(prev, n) : figs_new(n);
    if (!ps->used || !ps->load || !ps->f)
        return SD_ENOMEM;
    if (prev == NULL)
        figs_whole(ps);
    for (i = 0; i < n; i++)
        if (pinned(ps, i))
            ps->used[o->pins[i]] +=
                shard_bytes(&tables[i], tables[i].dim, o->optimizer);
    return 0;
}

/*
 * Whether table i costs a device less in row blocks over a host (its block,
 * the group's exchange) than as its narrowest column slice of `narrow`
 * columns (narrow_ms alone, its columns in the all-to-all): a hot table
 * stays with the column search where slices are the cheaper cut.
 */
static bool rows_pay(const struct pass *ps, size_t i, int32_t narrow,
                     double narrow_ms)
{
    const struct topology *t = ps->t;
    int32_t L = host_devices(t);
    double slice = narrow_ms + a2a_ms(t, narrow);
    double rows = block_ms(ps, i, L) +
                  collective_row_group_ms(t, ps->tables[i].dim, L, false);

    return rows < slice;
}

/*
 * Whether table i's row blocks over a host cost its devices less in total
 * than the table whole: each block's lookups and the group's exchange both
 * ways, against the whole table's lookups and its columns in the
 * all-to-all both ways, each weighed on the mean device.  Tables of long
 * bags can, though lighter than a device (their lookups spread, each
 * block's rows nearer the cache); the column search never cuts them so.
 */
static bool rows_lighter_now(const struct pass *ps, size_t i)
{
    const struct topology *t = ps->t;
    const struct table *tb = &ps->tables[i];
    int32_t L = host_devices(t);
    struct table view;
    double whole, exch;

    if (L < 2 || tb->rows < L)
        return false;
    whole = whole_add_ms(ps, i) + 2 * a2a_ms(t, tb->dim);
    exch = 2 * collective_row_group_ms(t, tb->dim, L, false);
    /* A block's lookups cost at least nothing (the model's marginal cost
     * of a small one can come out below zero): where the groups' exchange
     * alone outweighs the table whole, as for most tables of short bags,
     * the blocks' latents are not asked for (with the rule below, a fifth
     * to a third fewer latents computed in plans of 856 and 2,000 tables:
     * 2,686 -> 2,121 on 8 devices, 5,659 -> 3,709 for 2,000 on 128). */
    if (L * exch >= whole)
        return false;
    block_view(ps, i, L, &view);
    return L * (fmax(0, marginal_ms(ps, &view)) + exch) < whole;
}

/* rows_lighter_now(), asked once a table. */
static bool rows_lighter(const struct pass *ps, size_t i)
{
    struct table_figs *tf = &ps->f->tf[i];

    if (tf->lighter < 0)
        tf->lighter = rows_lighter_now(ps, i);
    return tf->lighter > 0;
}

/* Table i's narrowest slice of `cols` columns alone, asked once. */
static double narrow_ms(const struct pass *ps, size_t i, int32_t cols)
{
    struct table_figs *tf = &ps->f->tf[i];

    if (isnan(tf->narrow_ms))
        tf->narrow_ms = alone_ms(ps, &ps->tables[i], cols);
    return tf->narrow_ms;
}

/* The scheme table i leaves the column search for, or SCHEME_TW to stay. */
static enum plan_scheme choose(struct pass *ps, size_t i,
                               enum scheme_reason *why, double *dp_ms,
                               double *tw_ms)
{
    const struct table *tb = &ps->tables[i];
    const struct table_constraint *c = constraint(ps, i);
    bool tw_ok = constraint_allows(c, SCHEME_TW),
         cw_ok = constraint_allows(c, SCHEME_CW);
    bool rows_ok =
        constraint_allows(c, SCHEME_TWRW) || constraint_allows(c, SCHEME_RW);
    int32_t narrow = tb->dim >> (table_split_levels(tb->dim) - 1);
    uint64_t whole = shard_bytes(tb, tb->dim, ps->o->optimizer);
    uint64_t smallest = UINT64_MAX;
    int32_t r;

    *dp_ms = *tw_ms = 0;
    if (!tw_ok && !cw_ok) { /* a row scheme or replication, by constraint */
        *why = REASON_CONSTRAINT;
        return rows_ok ? SCHEME_TWRW : SCHEME_DP;
    }
    if (rows_ok && whole > topology_mem_max(ps->t)) {
        *why = REASON_MEMORY;
        return SCHEME_TWRW;
    }
    /* A table that costs less whole than the mean device is not hot,
     * whatever its narrowest slice: no slice is asked for (rows_lighter()
     * says what the two save). */
    if (rows_ok && ps->f->tf[i].whole_ms > ps->f->mean_ms) {
        double slice_ms = narrow_ms(ps, i, narrow);

        if (slice_ms > ps->f->mean_ms &&
            (!cw_ok || rows_pay(ps, i, narrow, slice_ms))) {
            *why = REASON_HOT;
            return SCHEME_TWRW;
        }
    }
    if (constraint_allows(c, SCHEME_TWRW) && tb->tier == TIER_HBM &&
        rows_lighter(ps, i)) {
        ps->nlighter++;
        if (ps->lighter) {
            *why = REASON_LIGHTER;
            return SCHEME_TWRW;
        }
    }
    /* A table the tier pass put in host DRAM is never replicated (replicas
     * stay in HBM). */
    if (!constraint_allows(c, SCHEME_DP) || ps->t->ndevices == 1 ||
        tb->tier != TIER_HBM)
        return SCHEME_TW;
    for (r = 0; r < ps->t->ndevices; r++)
        if (topology_mem(ps->t, r) < smallest)
            smallest = topology_mem(ps->t, r);
    if ((double)whole > DP_TABLE_SHARE * (double)smallest)
        return SCHEME_TW;
    replica_costs(ps, i, dp_ms, tw_ms);
    if (*dp_ms < *tw_ms &&
        (double)(ps->dp_bytes + whole) <= DP_MEM_SHARE * (double)smallest) {
        *why = REASON_REPLICATE;
        return SCHEME_DP;
    }
    *why = REASON_KEPT; /* weighed, and cheaper placed once */
    return SCHEME_TW;
}

/* Table i replicated on every device. */
static int add_replicas(struct pass *ps, struct scheme_pass *sp, size_t i)
{
    const struct table *tb = &ps->tables[i];
    int32_t r;

    for (r = 0; r < ps->t->ndevices; r++) {
        struct shard s = {.table = (uint32_t)i,
                          .device = r,
                          .col_width = tb->dim,
                          .scheme = SCHEME_DP};

        if (plan_add_shard(&sp->shards, &s) != 0)
            return SD_ENOMEM;
        ps->used[r] += shard_bytes(tb, tb->dim, ps->o->optimizer);
    }
    ps->dp_bytes += shard_bytes(tb, tb->dim, ps->o->optimizer);
    return 0;
}

int scheme_pass_run(const struct table *tables, size_t ntables,
                    const struct topology *t, const struct plan_options *o,
                    bool lighter, const struct scheme_pass *prev,
                    struct scheme_pass *sp, struct sd_diag *d)
{
    struct pass ps;
    size_t k;
    int rv;

    memset(sp, 0, sizeof(*sp));
    rv =
        pass_init(&ps, tables, ntables, t, o, prev != NULL ? prev->figs : NULL);
    sp->figs = ps.f; /* freed with sp */
    ps.lighter = lighter;
    sp->fixed = calloc(ntables ? ntables : 1, sizeof(*sp->fixed));
    sp->why = calloc(ntables ? ntables : 1, sizeof(*sp->why));
    sp->fwd = calloc((size_t)t->ndevices, sizeof(*sp->fwd));
    sp->bwd = calloc((size_t)t->ndevices, sizeof(*sp->bwd));
    if (rv != 0 || !sp->fixed || !sp->why || !sp->fwd || !sp->bwd ||
        plan_init(&sp->shards, t->ndevices) != 0) {
        rv = SD_ENOMEM;
        goto out_free;
    }
    for (k = 0; k < ntables && rv == 0; k++) {
        size_t i = ps.f->order[k].idx;
        double dp_ms, tw_ms;
        enum plan_scheme sc;

        if (pinned(&ps, i))
            continue;
        sc = choose(&ps, i, &sp->why[i], &dp_ms, &tw_ms);
        if (sc == SCHEME_TW) {
            if (sp->why[i] == REASON_KEPT) {
                sp->kept++;
                sp->kept_dp_ms += dp_ms;
                sp->kept_tw_ms += tw_ms;
            }
            continue;
        }
        rv = sc == SCHEME_DP ? add_replicas(&ps, sp, i)
                             : split_rows(&ps, sp, i, d);
        sp->fixed[i] = true;
        sp->nfixed++;
        /* Memory alone does not force: the column search may cut such a
         * table in slices instead, and is tried. */
        sp->forced = sp->forced || sp->why[i] == REASON_CONSTRAINT;
        if (sc == SCHEME_DP) {
            sp->dp_ms += dp_ms;
            sp->tw_ms += tw_ms;
        }
    }
    sp->nlighter = ps.nlighter;
    if (rv == 0) {
        plan_sort(&sp->shards);
        rv = plan_collectives(&sp->shards, tables, t, sp->fwd, sp->bwd);
    }
    if (rv == SD_ENOMEM)
        sd_diag_set(d, rv, "neuroshard: out of memory");

out_free:
    free(ps.used);
    free(ps.load);
    if (rv != 0)
        scheme_pass_free(sp);
    return rv;
}

void scheme_pass_free(struct scheme_pass *sp)
{
    free(sp->fixed);
    free(sp->why);
    free(sp->fwd);
    free(sp->bwd);
    figs_free(sp->figs);
    plan_destroy(&sp->shards);
    memset(sp, 0, sizeof(*sp));
}

void scheme_pass_note(const struct scheme_pass *sp, size_t ntables,
                      struct plan *p)
{
    size_t count[REASON_KEPT + 1] = {0}, i;

    for (i = 0; i < ntables; i++)
        if (sp->fixed[i])
            count[sp->why[i]]++;
    if (count[REASON_MEMORY] > 0)
        plan_note(p,
                  "%zu table(s) split in rows: bigger than any device, each "
                  "is spread over one host's devices (or all devices)",
                  count[REASON_MEMORY]);
    if (count[REASON_HOT] > 0)
        plan_note(p,
                  "%zu table(s) split in rows over a host: even their "
                  "narrowest column slice costs more than the mean device, "
                  "and row blocks split the lookups",
                  count[REASON_HOT]);
    if (count[REASON_LIGHTER] > 0)
        plan_note(p,
                  "%zu table(s) split in rows over a host: their row blocks "
                  "cost the devices less in total than the table whole",
                  count[REASON_LIGHTER]);
    if (count[REASON_REPLICATE] > 0)
        plan_note(p,
                  "%zu table(s) replicated (data_parallel): together %.3g ms "
                  "per device replicated (local batch and one bucketed "
                  "gradient all-reduce) against %.3g ms placed once "
                  "(lookups on one device, columns in every all-to-all)",
                  count[REASON_REPLICATE], sp->dp_ms, sp->tw_ms);
    if (count[REASON_CONSTRAINT] > 0)
        plan_note(p,
                  "%zu table(s) split in rows or replicated as their "
                  "constraints say",
                  count[REASON_CONSTRAINT]);
    if (sp->kept > 0)
        plan_note(p,
                  "%zu small table(s) not replicated: together %.3g ms per "
                  "device replicated (local batch and one bucketed gradient "
                  "all-reduce) against %.3g ms placed once",
                  sp->kept, sp->kept_dp_ms, sp->kept_tw_ms);
}
