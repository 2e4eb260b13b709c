/*
 * Costs of a plan: the analytic compute model, the alpha-beta all-to-all
 * model and the plan-cost function of neuroshard.md 6.1 (planner.h).
 */
#include <stdlib.h>
#include <string.h>

#include "planner.h"

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

void cost_comm_alpha_beta(const struct topology *t, const int32_t *dim_sum,
                          double *fwd_ms, double *bwd_ms)
{
    const double esz = 4.0; /* pooled embeddings travel as fp32 */
    int32_t n = t->ndevices, per_host = t->devices_per_host, r, j;
    double slice = (double)(t->batch_size / n) * esz; /* bytes per column */

    for (r = 0; r < n; r++) {
        int32_t host = r / per_host;
        double send_in, send_out, recv_in = 0, recv_out = 0, ms;

        if (n == 1) {
            fwd_ms[r] = bwd_ms[r] = 0;
            continue;
        }
        send_in = slice * dim_sum[r] * (per_host - 1);
        send_out = slice * dim_sum[r] * (n - per_host);
        for (j = 0; j < n; j++) {
            if (j == r)
                continue;
            if (j / per_host == host)
                recv_in += slice * dim_sum[j];
            else
                recv_out += slice * dim_sum[j];
        }
        /* Intra-host and inter-host transfers run on separate links at the
         * same time; each link is as slow as its busier direction. */
        ms = (send_in > recv_in ? send_in : recv_in) / t->intra_host_bw;
        if (n > per_host) {
            double inter =
                (send_out > recv_out ? send_out : recv_out) / t->inter_host_bw;

            if (inter > ms)
                ms = inter;
        }
        ms += t->link_latency_ms * (double)(n - 1);
        /* The backward exchange moves gradients of the same shape back. */
        fwd_ms[r] = bwd_ms[r] = ms;
    }
}

int plan_evaluate(struct plan *p, const struct table *tables, size_t ntables,
                  const struct topology *t, enum optimizer opt,
                  const struct cost_model *m)
{
    int32_t n = t->ndevices, r;
    struct shard_item *items = NULL;
    size_t *start = NULL, *fill = NULL, k;
    int32_t *dim_sum = NULL;
    double *fwd = NULL, *bwd = NULL, max_ready = 0;
    int rv = SD_ENOMEM;

    (void)ntables;
    items = malloc((p->nshards ? p->nshards : 1) * sizeof(*items));
    start = calloc((size_t)n + 1, sizeof(*start));
    fill = calloc((size_t)n, sizeof(*fill));
    dim_sum = calloc((size_t)n, sizeof(*dim_sum));
    fwd = calloc((size_t)n, sizeof(*fwd));
    bwd = calloc((size_t)n, sizeof(*bwd));
    if (!items || !start || !fill || !dim_sum || !fwd || !bwd)
        goto out_free;

    memset(p->devices, 0, (size_t)n * sizeof(*p->devices));
    /* Group the shards by device: counting sort into items[]. */
    for (k = 0; k < p->nshards; k++)
        start[p->shards[k].device + 1]++;
    for (r = 0; r < n; r++)
        start[r + 1] += start[r];
    for (k = 0; k < p->nshards; k++) {
        const struct shard *s = &p->shards[k];
        const struct table *tb = &tables[s->table];
        struct plan_device *dev = &p->devices[s->device];

        items[start[s->device] + fill[s->device]++] =
            (struct shard_item){tb, s->col_width};
        dev->mem_bytes += shard_bytes(tb, s->col_width, opt);
        dev->dim_sum += s->col_width;
        dev->nshards++;
    }

    for (r = 0; r < n; r++) {
        dim_sum[r] = p->devices[r].dim_sum;
        p->devices[r].compute_ms =
            m->shard_ms(m->ctx, t, items + start[r], start[r + 1] - start[r]);
    }
    cost_comm_alpha_beta(t, dim_sum, fwd, bwd);

    /* The forward all-to-all starts when the slowest device is ready: a
     * device that finishes early waits (neuroshard.md 6.1). */
    for (r = 0; r < n; r++) {
        double ready = p->devices[r].compute_ms + bwd[r];

        if (ready > max_ready)
            max_ready = ready;
    }
    p->cost_ms = 0;
    for (r = 0; r < n; r++) {
        struct plan_device *dev = &p->devices[r];
        double ready = dev->compute_ms + bwd[r];

        dev->bwd_comm_ms = bwd[r];
        dev->fwd_comm_ms = fwd[r] + (max_ready - ready);
        dev->total_ms = dev->compute_ms + dev->bwd_comm_ms + dev->fwd_comm_ms;
        if (dev->total_ms > p->cost_ms)
            p->cost_ms = dev->total_ms;
    }
    p->cost_model = m->name;
    p->comm_model = "alpha_beta";
    rv = 0;

out_free:
    free(bwd);
    free(fwd);
    free(dim_sum);
    free(fill);
    free(start);
    free(items);
    return rv;
}
