/*
 * Sharding schemes (problem.h): their names, the table a row block or a
 * replica makes for the cost model, and the collectives that row-split and
 * replicated tables add to their devices' exchanges.
 */
#include <stdlib.h>
#include <string.h>

#include "problem/problem.h"


static const char *const scheme_names[SCHEME_COUNT] = {
    [SCHEME_TW] = "table_wise",   [SCHEME_CW] = "column_wise",
    [SCHEME_RW] = "row_wise",     [SCHEME_TWRW] = "table_row_wise",
    [SCHEME_GRID] = "grid_shard", [SCHEME_DP] = "data_parallel",
};

const char *scheme_name(enum plan_scheme s)
{
    return (unsigned)s < SCHEME_COUNT ? scheme_names[s] : "unknown";
}

int scheme_parse(const char *s, enum plan_scheme *out)
{
    int i;

    for (i = 0; i < SCHEME_COUNT; i++)
        if (strcmp(s, scheme_names[i]) == 0) {
            *out = (enum plan_scheme)i;
            return 0;
        }
    return SD_EINVAL;
}

bool scheme_splits_rows(enum plan_scheme s)
{
    return s == SCHEME_RW || s == SCHEME_TWRW || s == SCHEME_GRID;
}

int64_t shard_rows(const struct table *t, const struct shard *s)
{
    return s->row_count > 0 ? s->row_count : t->rows;
}

void shard_table(const struct table *t, const struct shard *s, int32_t ndevices,
                 struct table *out)
{
    int64_t rows = shard_rows(t, s);

    *out = *t;
    out->dim = s->col_width;
    if (rows < t->rows) {
        out->rows = rows;
        out->pooling_factor =
            t->pooling_factor * (double)rows / (double)t->rows;
    }
    if (s->scheme == SCHEME_DP && ndevices > 0)
        out->pooling_factor = t->pooling_factor / (double)ndevices;
}

/* ------------------------------------------------------------------------ */
/* Collectives                                                              */

double collective_link_bw(const struct topology *t, bool spans_hosts)
{
    return spans_hosts ? t->inter_host_bw : t->intra_host_bw;
}

double collective_ring_ms(const struct topology *t, double bytes, int32_t k,
                          bool spans_hosts)
{
    if (k <= 1)
        return 0;
    return bytes * (double)(k - 1) / (double)k /
               collective_link_bw(t, spans_hosts) +
           (double)(k - 1) * t->link_latency_ms;
}

double collective_all_reduce_ms(const struct topology *t, double bytes,
                                int32_t k, bool spans_hosts)
{
    return 2 * collective_ring_ms(t, bytes, k, spans_hosts);
}

double collective_row_group_ms(const struct topology *t, int32_t cols,
                               int32_t k, bool spans_hosts)
{
    int32_t n = t->ndevices;
    double whole = (double)t->batch_size * cols * topology_comm_esz(t), ms;

    /* Every block pools partial sums for the whole batch; a ring
     * reduce-scatter over the group leaves each member the sums of 1/k of
     * the samples... */
    ms = collective_ring_ms(t, whole, k, spans_hosts);
    /* ... which go on to the devices that own those samples, unless the
     * group is every device: the (n - k)/n of them owned elsewhere, over
     * the slow link as soon as there are hosts. */
    if (k < n)
        ms += whole / k * (double)(n - k) / (double)n /
                  collective_link_bw(t, n > t->devices_per_host) +
              t->link_latency_ms;
    return ms;
}

/* The hosts of devices[0 .. k) are more than one. */
static bool spans(const struct topology *t, const int32_t *dev, int32_t k)
{
    int32_t i;

    for (i = 1; i < k; i++)
        if (dev[i] / t->devices_per_host != dev[0] / t->devices_per_host)
            return true;
    return false;
}

int plan_collectives(const struct plan *p, const struct table *tables,
                     const struct topology *t, double *fwd_ms, double *bwd_ms)
{
    int32_t n = t->ndevices, r, k, dev[64], *group = dev;
    double dp_bytes = 0;
    size_t i = 0, j;

    memset(fwd_ms, 0, (size_t)n * sizeof(*fwd_ms));
    memset(bwd_ms, 0, (size_t)n * sizeof(*bwd_ms));
    /* Shards are sorted by (table, column, row): a row group is a run of
     * one table's shards at one column offset. */
    while (i < p->nshards) {
        const struct shard *s = &p->shards[i];
        const struct table *tb = &tables[s->table];
        double ms;

        for (j = i + 1; j < p->nshards && p->shards[j].table == s->table &&
                        p->shards[j].col_offset == s->col_offset;
             j++)
            ;
        if (s->scheme == SCHEME_DP) {
            dp_bytes += (double)table_bytes(tb, tb->dim);
        } else if (scheme_splits_rows((enum plan_scheme)s->scheme)) {
            k = (int32_t)(j - i);
            if (k > (int32_t)(sizeof(dev) / sizeof(dev[0])) &&
                (group = malloc((size_t)k * sizeof(*group))) == NULL)
                return SD_ENOMEM;
            for (r = 0; r < k; r++)
                group[r] = p->shards[i + (size_t)r].device;
            ms =
                collective_row_group_ms(t, s->col_width, k, spans(t, group, k));
            /* Backward: the same bytes the other way (gradients gathered
             * and sent back to the blocks). */
            for (r = 0; r < k; r++) {
                fwd_ms[group[r]] += ms;
                bwd_ms[group[r]] += ms;
            }
            if (group != dev)
                free(group);
            group = dev;
        }
        i = j;
    }
    /* Replicated tables' gradients are all-reduced in one bucket, as data
     * parallel training does: one latency for all of them. */
    if (dp_bytes > 0) {
        double ms =
            collective_all_reduce_ms(t, dp_bytes, n, n > t->devices_per_host);

        for (r = 0; r < n; r++)
            bwd_ms[r] += ms;
    }
    return 0;
}
