/*
 * Costs of a plan: the analytic compute model, the alpha-beta all-to-all
 * model and the plan-cost function of neuroshard.md 6.1 (problem.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "problem/problem.h"

/* Index bytes read per lookup: TorchRec counts indices as int64. */
#define INDEX_BYTES 8.0

/* One item's forward time on one device for the whole batch
 * (torchrec_planner.md 2.2 with ws = 1 and B the global batch). */
static double analytic_fwd_ms(const struct topology *t,
                              const struct shard_item *it)
{
    double esz = (double)table_dtype_size(it->table->dtype);
    double lookups = (double)t->batch_size * it->table->pooling_factor;
    double cols = (double)it->cols;
    double bytes, penalty;

    bytes = lookups * INDEX_BYTES + lookups * (cols > 32 ? cols : 32) * esz +
            (double)t->batch_size * cols * esz;
    penalty = it->cols >= 128 ? 1.0 : it->cols >= 64 ? 1.15 : 1.75;
    return bytes * penalty / t->device_mem_bw;
}

static double analytic_shard_ms(void *ctx, const struct topology *t,
                                const struct shard_item *items, size_t n)
{
    double ms = 0;
    size_t i;

    /* Forward plus a backward of twice the forward (TorchRec's
     * BWD_COMPUTE_MULTIPLIER), summed: the analytic model sees no fusion. */
    for (i = 0; i < n; i++)
        ms += 3.0 * analytic_fwd_ms(t, &items[i]);
    return ms;
}

const struct cost_model cost_model_analytic = {
    .name = "analytic",
    .shard_ms = analytic_shard_ms,
    .ctx = NULL,
};

double cost_comm_alpha_beta_one(const struct topology *t, int32_t dim,
                                double host_dims, double total_dims)
{
    /* pooled embeddings travel as fp32 unless the topology says fp16/bf16 */
    const double esz = topology_comm_esz(t);
    int32_t n = t->ndevices, per_host = t->devices_per_host;
    double slice = (double)(t->batch_size / n) * esz; /* bytes per column */
    double send_in = slice * dim * (per_host - 1);
    double send_out = slice * dim * (n - per_host);
    double recv_in = slice * (host_dims - dim);
    double recv_out = slice * (total_dims - host_dims);
    double ms;

    if (n == 1)
        return 0;
    /* Intra-host and inter-host transfers run on separate links at the
     * same time; each link is as slow as its busier direction. */
    ms = (send_in > recv_in ? send_in : recv_in) / t->intra_host_bw;
    if (n > per_host) {
        double inter =
            (send_out > recv_out ? send_out : recv_out) / t->inter_host_bw;

        if (inter > ms)
            ms = inter;
    }
    return ms + t->link_latency_ms * (double)(n - 1);
}

void cost_comm_alpha_beta(const struct topology *t, const int32_t *dim_sum,
                          double *fwd_ms, double *bwd_ms)
{
    int32_t n = t->ndevices, per_host = t->devices_per_host, h0, r;
    double total = 0;

    for (r = 0; r < n; r++)
        total += dim_sum[r];
    /* Hosts are runs of per_host devices: one pass per host for its sum,
     * one for its devices, so the whole exchange is O(N). */
    for (h0 = 0; h0 < n; h0 += per_host) {
        double host = 0;

        for (r = h0; r < h0 + per_host; r++)
            host += dim_sum[r];
        /* The backward exchange moves gradients of the same shape. */
        for (r = h0; r < h0 + per_host; r++)
            fwd_ms[r] = bwd_ms[r] =
                cost_comm_alpha_beta_one(t, dim_sum[r], host, total);
    }
}

/* Devices of a learned comm model: a few; more take the heap. */
#define COMM_STACK_DEVICES 64

const char *cost_comm_exchange(const struct topology *t, const int32_t *dim_sum,
                               const double *compute_ms,
                               const double *fixed_fwd, const double *fixed_bwd,
                               double *fwd_ms, double *bwd_ms)
{
    double max_ready = 0, stack[COMM_STACK_DEVICES] = {0}, *before = NULL;
    int32_t n = t->ndevices, r;

    if (t->comm != NULL) {
        /* What each device runs before the forward all-to-all, the backward
         * collectives included, is what the learned model waits for. */
        if (fixed_bwd != NULL) {
            before = n <= COMM_STACK_DEVICES
                         ? stack
                         : malloc((size_t)n * sizeof(*before));
            for (r = 0; before != NULL && r < n; r++)
                before[r] = (compute_ms ? compute_ms[r] : 0) + fixed_bwd[r];
        }
        t->comm->exchange(t->comm->ctx, t, dim_sum,
                          before != NULL ? before : compute_ms, fwd_ms, bwd_ms);
        for (r = 0; r < n; r++) {
            bwd_ms[r] += fixed_bwd ? fixed_bwd[r] : 0;
            fwd_ms[r] += fixed_fwd ? fixed_fwd[r] : 0;
        }
        if (before != stack)
            free(before);
        return t->comm->name;
    }
    cost_comm_alpha_beta(t, dim_sum, fwd_ms, bwd_ms);
    for (r = 0; r < n; r++) {
        double ready;

        if (fixed_fwd)
            fwd_ms[r] += fixed_fwd[r];
        if (fixed_bwd)
            bwd_ms[r] += fixed_bwd[r];
        ready = (compute_ms ? compute_ms[r] : 0) + bwd_ms[r];
        if (ready > max_ready)
            max_ready = ready;
    }
    /* The forward all-to-all starts when the slowest device is ready: a
     * device that finishes early waits (neuroshard.md 6.1). */
    for (r = 0; r < n; r++)
        fwd_ms[r] += max_ready - ((compute_ms ? compute_ms[r] : 0) + bwd_ms[r]);
    return "alpha_beta";
}

double cost_plan_ms(const struct topology *t, const double *compute_ms,
                    const int32_t *dim_sum, const double *fixed_fwd,
                    const double *fixed_bwd, double *fwd_scratch,
                    double *bwd_scratch)
{
    double max_ready = 0, max_fwd = 0;
    int32_t r;

    if (t->comm != NULL) {
        double max_total = 0;

        cost_comm_exchange(t, dim_sum, compute_ms, fixed_fwd, fixed_bwd,
                           fwd_scratch, bwd_scratch);
        for (r = 0; r < t->ndevices; r++) {
            double total = compute_ms[r] + bwd_scratch[r] + fwd_scratch[r];

            if (total > max_total)
                max_total = total;
        }
        return max_total;
    }
    cost_comm_alpha_beta(t, dim_sum, fwd_scratch, bwd_scratch);
    /* total_r = ready_r + fwd_r + (max ready - ready_r): every device
     * finishes at the slowest one's ready time plus its own exchange. */
    for (r = 0; r < t->ndevices; r++) {
        double ready, fwd = fwd_scratch[r];

        if (fixed_bwd)
            bwd_scratch[r] += fixed_bwd[r];
        if (fixed_fwd)
            fwd_scratch[r] = fwd += fixed_fwd[r];
        ready = compute_ms[r] + bwd_scratch[r];
        if (ready > max_ready)
            max_ready = ready;
        if (fwd > max_fwd)
            max_fwd = fwd;
    }
    return max_ready + max_fwd;
}


/* The cost of shard k alone. */
static double one_shard_ms(const struct plan *p, size_t k,
                           const struct table *tables, const struct topology *t,
                           const struct cost_model *m)
{
    const struct shard *s = &p->shards[k];
    struct table b;
    struct shard_item it = {&tables[s->table], s->col_width};

    if (s->row_count > 0 || s->scheme == SCHEME_DP) {
        shard_table(&tables[s->table], s, t->ndevices, &b);
        it.table = &b;
    }
    return m->shard_ms(m->ctx, t, &it, 1);
}

/*
 * The costliest piece some device must run: each table- or column-wise
 * table at its narrowest legal width (any column split leaves a piece at
 * least that costly), each row-split or replicated table's own shards.
 */
static double largest_piece_ms(const struct plan *p, const struct table *tables,
                               const struct topology *t,
                               const struct cost_model *m)
{
    double largest = 0, ms;
    size_t k;

    for (k = 0; k < p->nshards; k++) {
        const struct shard *s = &p->shards[k];
        const struct table *tb = &tables[s->table];

        if (s->scheme == SCHEME_TW || s->scheme == SCHEME_CW) {
            struct shard_item it = {tb, tb->dim >>
                                            (table_split_levels(tb->dim) - 1)};

            if (s->col_offset != 0)
                continue; /* once per table */
            ms = m->shard_ms(m->ctx, t, &it, 1);
        } else {
            ms = one_shard_ms(p, k, tables, t, m);
        }
        if (ms > largest)
            largest = ms;
    }
    return largest;
}

int plan_explain(struct plan *p, const struct table *tables,
                 const struct topology *t, const struct cost_model *m)
{
    struct plan_explain *e = &p->explain;
    int32_t n = p->ndevices, r, crit = 0, *dims = NULL;
    double *fwd, *bwd, *cfwd, *cbwd, sum = 0, fixed_fwd = 0, largest,
                                     max_compute = 0, comm, latency;
    size_t k, i;
    int64_t total_dim = 0;
    int rv = SD_ENOMEM;

    dims = calloc((size_t)n, sizeof(*dims));
    fwd = malloc((size_t)n * sizeof(*fwd));
    bwd = malloc((size_t)n * sizeof(*bwd));
    cfwd = malloc((size_t)n * sizeof(*cfwd));
    cbwd = malloc((size_t)n * sizeof(*cbwd));
    if (!dims || !fwd || !bwd || !cfwd || !cbwd ||
        plan_collectives(p, tables, t, cfwd, cbwd) != 0)
        goto out_free;
    memset(e, 0, sizeof(*e));
    for (r = 0; r < n; r++) {
        const struct plan_device *dv = &p->devices[r];

        sum += dv->compute_ms + cbwd[r];
        fixed_fwd += cfwd[r];
        total_dim += dv->dim_sum;
        if (dv->compute_ms + dv->bwd_comm_ms >
            p->devices[crit].compute_ms + p->devices[crit].bwd_comm_ms)
            crit = r;
    }
    e->critical_device = crit;
    for (k = 0; k < p->nshards; k++) {
        double ms;

        if (p->shards[k].device != crit)
            continue;
        ms = one_shard_ms(p, k, tables, t, m);
        /* Insertion into the short sorted list of drivers. */
        for (i = (size_t)e->ndrivers; i > 0 && ms > e->driver_ms[i - 1]; i--)
            if (i < PLAN_DRIVERS_MAX) {
                e->drivers[i] = e->drivers[i - 1];
                e->driver_ms[i] = e->driver_ms[i - 1];
            }
        if (i < PLAN_DRIVERS_MAX) {
            e->drivers[i] = k;
            e->driver_ms[i] = ms;
            if (e->ndrivers < PLAN_DRIVERS_MAX)
                e->ndrivers++;
        }
    }
    largest = largest_piece_ms(p, tables, t, m);
    /*
     * The slowest device is ready (compute + backward exchange) no earlier
     * than the mean of compute + backward exchange, and that mean is at
     * least the mean compute and collectives plus the all-to-all of
     * perfectly balanced dims: a device's all-to-all is a maximum of linear
     * functions of the dims, convex, and the same for every device, so its
     * mean over the devices is at least its value at the mean (Jensen).
     * The same holds for the forward exchange every device then waits for.
     * The largest piece is ready no earlier than its compute plus the
     * exchange's latency term.  Balanced dims are rounded down, so this
     * stays a bound.
     */
    for (r = 0; r < n; r++)
        dims[r] = (int32_t)(total_dim / n);
    /* A learned comm model is not convex: there this is its exchange of
     * balanced dims, the least device's, an estimate rather than a bound
     * (docs/models.md); alpha-beta gives every device the same. */
    cost_comm_exchange(t, dims, NULL, NULL, NULL, fwd, bwd);
    for (r = 1; r < n; r++) {
        fwd[0] = fwd[r] < fwd[0] ? fwd[r] : fwd[0];
        bwd[0] = bwd[r] < bwd[0] ? bwd[r] : bwd[0];
    }
    comm = fwd[0] + fixed_fwd / n;
    latency = n > 1 ? t->link_latency_ms * (double)(n - 1) : 0;
    /* A piece costs no more than the device holding it; a model that says
     * otherwise (it is not monotone everywhere) must not lift the bound
     * above a device the plan actually has. */
    for (r = 0; r < n; r++)
        max_compute = p->devices[r].compute_ms > max_compute
                          ? p->devices[r].compute_ms
                          : max_compute;
    if (largest > max_compute)
        largest = max_compute;
    e->lower_bound_ms =
        (sum / n + bwd[0] > largest + latency ? sum / n + bwd[0]
                                              : largest + latency) +
        comm;
    e->gap = e->lower_bound_ms > 0 ? p->cost_ms / e->lower_bound_ms - 1 : 0;
    rv = 0;

out_free:
    free(dims);
    free(fwd);
    free(bwd);
    free(cfwd);
    free(cbwd);
    return rv;
}

/*
 * The cost model's items of p's shards, grouped by device: device r's are
 * items[start[r] .. start[r + 1]), in plan order (start: ndevices + 1
 * entries, zeroed by the caller).  A shard of every row is its table to
 * the model (the cost model takes the width apart); row blocks and
 * replicas get their own view in blocks[k], and so does a shard whose tier
 * the model times (`timed`, a mask of tiers), with the shard's tier.
 */
static void device_items(const struct plan *p, const struct table *tables,
                         int32_t n, uint32_t timed, size_t *start,
                         struct table *blocks, struct shard_item *items)
{
    size_t k;
    int32_t r;

    for (k = 0; k < p->nshards; k++)
        start[p->shards[k].device + 1]++;
    for (r = 0; r < n; r++)
        start[r + 1] += start[r];
    for (k = 0; k < p->nshards; k++) {
        const struct shard *s = &p->shards[k];
        const struct table *tb = &tables[s->table];
        bool timed_here = s->tier != TIER_HBM && (timed & (1u << s->tier)) != 0;

        shard_table(tb, s, n, &blocks[k]);
        blocks[k].tier = s->tier;
        blocks[k].cache_load_factor = s->cache_load_factor;
        items[start[s->device]++] = (struct shard_item){
            s->row_count > 0 || s->scheme == SCHEME_DP || timed_here
                ? &blocks[k]
                : tb,
            s->col_width};
    }
    for (r = n; r > 0; r--) /* each start[r] is device r's end: shift back */
        start[r] = start[r - 1];
    start[0] = 0;
}

int plan_device_reaches(const struct plan *p, const struct table *tables,
                        const struct topology *t, const struct cost_model *m,
                        double bound, bool *reaches)
{
    size_t n = p->nshards ? p->nshards : 1;
    struct shard_item *items = malloc(n * sizeof(*items));
    struct table *blocks = malloc(n * sizeof(*blocks));
    size_t *start = calloc((size_t)t->ndevices + 1, sizeof(*start));
    int32_t r;
    int rv = SD_ENOMEM;

    *reaches = false;
    if (!items || !blocks || !start)
        goto out_free;
    device_items(p, tables, t->ndevices, 0, start, blocks, items);
    for (r = 0; r < t->ndevices && !*reaches; r++)
        *reaches = m->shard_ms(m->ctx, t, items + start[r],
                               start[r + 1] - start[r]) >= bound;
    rv = 0;
out_free:
    free(start);
    free(blocks);
    free(items);
    return rv;
}

int plan_evaluate(struct plan *p, const struct table *tables, size_t ntables,
                  const struct topology *t, enum optimizer opt,
                  const struct cost_model *m)
{
    return plan_evaluate_tiers(p, tables, ntables, t, opt, m, 0);
}

/* The name of the plan's cost model: m's, and how the host-link time of
 * tables off HBM was costed where some were (modelled, measured or both). */
static void cost_model_name(struct plan *p, const struct cost_model *m,
                            bool modelled, bool measured)
{
    snprintf(p->cost_model, sizeof(p->cost_model), "%s%s%s", m->name,
             modelled ? " + host-link misses (modelled)" : "",
             measured ? " + host-link misses (measured)" : "");
}

int plan_evaluate_tiers(struct plan *p, const struct table *tables,
                        size_t ntables, const struct topology *t,
                        enum optimizer opt, const struct cost_model *m,
                        uint32_t timed)
{
    int32_t n = t->ndevices, r;
    struct shard_item *items = NULL;
    struct table *blocks = NULL; /* the cost model's view of each shard */
    size_t *start = NULL, k;
    int32_t *dim_sum = NULL;
    double *fwd = NULL, *bwd = NULL, *cfwd = NULL, *cbwd = NULL;
    double *compute = NULL;
    bool tiered = false, measured = false, timed_here;
    int rv = SD_ENOMEM;

    (void)ntables;
    items = malloc((p->nshards ? p->nshards : 1) * sizeof(*items));
    blocks = malloc((p->nshards ? p->nshards : 1) * sizeof(*blocks));
    start = calloc((size_t)n + 1, sizeof(*start));
    dim_sum = calloc((size_t)n, sizeof(*dim_sum));
    fwd = calloc((size_t)n, sizeof(*fwd));
    bwd = calloc((size_t)n, sizeof(*bwd));
    cfwd = calloc((size_t)n, sizeof(*cfwd));
    cbwd = calloc((size_t)n, sizeof(*cbwd));
    compute = calloc((size_t)n, sizeof(*compute));
    if (!items || !blocks || !start || !dim_sum || !fwd || !bwd || !cfwd ||
        !cbwd || !compute)
        goto out_free;

    memset(p->devices, 0, (size_t)n * sizeof(*p->devices));
    device_items(p, tables, n, timed, start, blocks, items);
    for (k = 0; k < p->nshards; k++) {
        const struct shard *s = &p->shards[k];
        const struct table *tb = &tables[s->table];
        struct plan_device *dev = &p->devices[s->device];

        timed_here = s->tier != TIER_HBM && (timed & (1u << s->tier)) != 0;
        dev->mem_bytes += shard_block_bytes(tb, s, opt);
        dev->ddr_bytes += shard_block_ddr_bytes(tb, s, opt);
        if (timed_here)
            dev->tier_measured = true;
        else
            dev->tier_ms += tier_shard_ms(tb, s, t);
        /* The all-to-all carries table- and column-wise outputs; row
         * blocks and replicas exchange through their collectives. */
        if (s->scheme == SCHEME_TW || s->scheme == SCHEME_CW)
            dev->dim_sum += s->col_width;
        dev->nshards++;
    }

    for (r = 0; r < n; r++) {
        dim_sum[r] = p->devices[r].dim_sum;
        p->devices[r].compute_ms =
            m->shard_ms(m->ctx, t, items + start[r], start[r + 1] - start[r]);
        /* Weights in host DRAM add their modelled host-link time. */
        p->devices[r].compute_ms += p->devices[r].tier_ms;
        compute[r] = p->devices[r].compute_ms;
        tiered |= p->devices[r].tier_ms > 0;
        measured |= p->devices[r].tier_measured;
    }
    rv = plan_collectives(p, tables, t, cfwd, cbwd);
    if (rv != 0)
        goto out_free;
    /* the forward one with the wait for the slowest device (6.1) */
    p->comm_model =
        cost_comm_exchange(t, dim_sum, compute, cfwd, cbwd, fwd, bwd);
    p->cost_ms = 0;
    for (r = 0; r < n; r++) {
        struct plan_device *dev = &p->devices[r];

        dev->bwd_comm_ms = bwd[r];
        dev->fwd_comm_ms = fwd[r];
        dev->total_ms = dev->compute_ms + dev->bwd_comm_ms + dev->fwd_comm_ms;
        if (dev->total_ms > p->cost_ms)
            p->cost_ms = dev->total_ms;
    }
    p->devices_per_host = t->devices_per_host;
    p->host_dram_bytes = t->host_dram_bytes;
    cost_model_name(p, m, tiered, measured);
    /* The alpha-beta exchange honours a reduced precision; say which. */
    if (t->comm == NULL && t->comm_dtype == TABLE_DTYPE_FP16)
        p->comm_model = "alpha_beta (fp16)";
    else if (t->comm == NULL && t->comm_dtype == TABLE_DTYPE_BF16)
        p->comm_model = "alpha_beta (bf16)";
    rv = 0;

out_free:
    free(compute);
    free(cbwd);
    free(cfwd);
    free(bwd);
    free(fwd);
    free(dim_sum);
    free(start);
    free(blocks);
    free(items);
    return rv;
}
