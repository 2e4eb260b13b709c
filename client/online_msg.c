/*
 * The planner's structs to shardd.v1 messages and back (online_msg.h): the
 * conversions of shardctl's online mode, kept apart so that a wire library
 * shared with the daemon can replace them.
 */
#include "online_msg.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* protobuf-c string fields are `char *`; packing only reads them. */
static char *mstr(const char *s)
{
    return (char *)s;
}

/* ---------------------------------------------------------------------- */
/* Requests                                                                */

Shardd__V1__Optimizer online_msg_optimizer(enum optimizer o)
{
    switch (o) {
    case OPTIMIZER_ADAGRAD:
        return SHARDD__V1__OPTIMIZER__OPTIMIZER_ADAGRAD;
    case OPTIMIZER_ROWWISE_ADAGRAD:
        return SHARDD__V1__OPTIMIZER__OPTIMIZER_ROWWISE_ADAGRAD;
    case OPTIMIZER_ADAM:
        return SHARDD__V1__OPTIMIZER__OPTIMIZER_ADAM;
    default:
        return SHARDD__V1__OPTIMIZER__OPTIMIZER_SGD;
    }
}

int online_msg_tables(const struct table *tables, size_t n,
                      Shardd__V1__Table **msgs, Shardd__V1__Table ***ptrs)
{
    size_t i;

    *msgs = calloc(n ? n : 1, sizeof(**msgs));
    *ptrs = calloc(n ? n : 1, sizeof(**ptrs));
    if (*msgs == NULL || *ptrs == NULL) {
        free(*msgs);
        free(*ptrs);
        return SD_ENOMEM;
    }
    for (i = 0; i < n; i++) {
        Shardd__V1__Table *t = &(*msgs)[i];

        shardd__v1__table__init(t);
        t->name = mstr(tables[i].name);
        t->rows = tables[i].rows;
        t->dim = tables[i].dim;
        t->pooling_factor = tables[i].pooling_factor;
        t->n_bins = TABLE_NBINS;
        t->bins = (double *)tables[i].bins; /* packing only reads it */
        t->dtype = tables[i].dtype == TABLE_DTYPE_FP16
                       ? SHARDD__V1__DTYPE__DTYPE_FP16
                       : SHARDD__V1__DTYPE__DTYPE_FP32;
        (*ptrs)[i] = t;
    }
    return 0;
}

void online_msg_topology(const struct topology *t, Shardd__V1__Topology *m)
{
    shardd__v1__topology__init(m);
    m->num_devices = t->ndevices;
    m->devices_per_host = t->devices_per_host; /* 0: the server's default */
    m->mem_bytes_per_device = t->mem_bytes;
    if (t->mem_by_device != NULL) {
        m->n_mem_bytes_by_device = (size_t)t->ndevices;
        m->mem_bytes_by_device = (uint64_t *)t->mem_by_device; /* read only */
    }
    m->batch_size = t->batch_size; /* 0: the server's default */
}

void online_msg_pins_free(struct online_msg_pins *m)
{
    free(m->pins);
    free(m->ptrs);
}

int online_msg_pins(const int32_t *pins, const struct table *tables, size_t n,
                    struct online_msg_pins *m)
{
    size_t i;

    shardd__v1__constraints__init(&m->cons);
    m->pins = calloc(n ? n : 1, sizeof(*m->pins));
    m->ptrs = calloc(n ? n : 1, sizeof(*m->ptrs));
    if (m->pins == NULL || m->ptrs == NULL)
        return SD_ENOMEM;
    m->cons.pins = m->ptrs;
    for (i = 0; i < n; i++) {
        Shardd__V1__Pin *pin = &m->pins[m->cons.n_pins];

        if (pins[i] < 0)
            continue;
        shardd__v1__pin__init(pin);
        pin->table = mstr(tables[i].name);
        pin->device = pins[i];
        m->ptrs[m->cons.n_pins++] = pin;
    }
    return 0;
}

void online_msg_plan_options(const char *alg, const struct plan_options *po,
                             const char *profile, Shardd__V1__PlanOptions *m)
{
    shardd__v1__plan_options__init(m);
    m->algorithm = mstr(alg != NULL ? alg : "");
    m->whole_tables_only = !po->column_splits;
    /* Whole milliseconds on the wire; never round a budget down to 0,
     * which would mean the server's default. */
    if (po->time_budget_ms > 0)
        m->time_budget_ms = po->time_budget_ms >= 4294967295.0
                                ? UINT32_MAX
                                : (uint32_t)ceil(po->time_budget_ms);
    m->seed = po->seed;
    m->optimizer = online_msg_optimizer(po->optimizer);
    m->profile = mstr(profile != NULL ? profile : "");
}

void online_msg_placement_free(struct online_msg_placement *m)
{
    free(m->tps);
    free(m->tp_ptrs);
    free(m->shards);
    free(m->shard_ptrs);
}

int online_msg_placement(const struct plan *p, const struct table *tables,
                         size_t n, struct online_msg_placement *m)
{
    size_t i, k = 0, ns = p->nshards ? p->nshards : 1;

    m->tps = calloc(n ? n : 1, sizeof(*m->tps));
    m->tp_ptrs = calloc(n ? n : 1, sizeof(*m->tp_ptrs));
    m->shards = calloc(ns, sizeof(*m->shards));
    m->shard_ptrs = calloc(ns, sizeof(*m->shard_ptrs));
    if (!m->tps || !m->tp_ptrs || !m->shards || !m->shard_ptrs)
        return SD_ENOMEM;
    for (i = 0; i < n; i++) {
        Shardd__V1__TablePlacement *tp = &m->tps[i];

        shardd__v1__table_placement__init(tp);
        tp->table = mstr(tables[i].name);
        tp->shards = &m->shard_ptrs[k];
        for (; k < p->nshards && p->shards[k].table == i; k++) {
            Shardd__V1__Shard *s = &m->shards[k];

            shardd__v1__shard__init(s);
            s->device = p->shards[k].device;
            s->col_offset = p->shards[k].col_offset;
            s->col_width = p->shards[k].col_width;
            m->shard_ptrs[k] = s;
            tp->n_shards++;
        }
        m->tp_ptrs[i] = tp;
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Responses                                                               */

/* The per-device figures of a response into p->devices. */
static void devices_from_msg(struct plan *p, Shardd__V1__DeviceCost **devs,
                             size_t n)
{
    size_t r;

    for (r = 0; r < n && r < (size_t)p->ndevices; r++) {
        struct plan_device *dv = &p->devices[r];

        dv->mem_bytes = devs[r]->memory_bytes;
        dv->compute_ms = devs[r]->compute_ms;
        dv->fwd_comm_ms = devs[r]->fwd_comm_ms;
        dv->bwd_comm_ms = devs[r]->bwd_comm_ms;
        dv->total_ms = devs[r]->total_ms;
        dv->dim_sum = devs[r]->dim_sum;
        dv->nshards = devs[r]->num_shards;
    }
}

/* The cost models a response's figures come from (its basis). */
static void basis_from_msg(struct plan *p, const Shardd__V1__CostBasis *b)
{
    if (b != NULL) {
        snprintf(p->cost_model, sizeof(p->cost_model), "%s",
                 b->cost_model != NULL ? b->cost_model : "");
        p->comm_model = b->comm_model;
    }
    if (p->comm_model == NULL)
        p->comm_model = "";
}

/* The index of the table called name; `hint` is tried first. */
static int64_t table_index(const struct table *tables, size_t n, size_t hint,
                           const char *name)
{
    size_t i;

    if (hint < n && strcmp(tables[hint].name, name) == 0)
        return (int64_t)hint;
    for (i = 0; i < n; i++)
        if (strcmp(tables[i].name, name) == 0)
            return (int64_t)i;
    return -1;
}

int online_msg_plan_from(const Shardd__V1__PlanResponse *r,
                         const struct table *tables, size_t n, int32_t ndev,
                         struct plan *p, struct sd_diag *d)
{
    const Shardd__V1__Explanation *ex = r->explanation;
    enum plan_alg alg;
    struct sd_diag why;
    size_t i, k;
    int64_t t;

    if (r->n_devices != (size_t)ndev)
        return sd_diag_set(d, SD_EFORMAT,
                           "the response has %zu devices, not %d", r->n_devices,
                           (int)ndev);
    if (plan_init(p, ndev) != 0)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    for (i = 0; i < r->n_tables; i++) {
        const Shardd__V1__TablePlacement *tp = r->tables[i];

        t = table_index(tables, n, i, tp->table != NULL ? tp->table : "");
        if (t < 0) {
            sd_diag_set(d, SD_EFORMAT,
                        "the response places table \"%.200s\", which was "
                        "not asked for",
                        tp->table);
            goto fail_plan;
        }
        for (k = 0; k < tp->n_shards; k++) {
            const Shardd__V1__Shard *s = tp->shards[k];

            if (s->device < 0 || s->device >= ndev) {
                sd_diag_set(d, SD_EFORMAT,
                            "the response puts table \"%s\" on device %d",
                            tables[t].name, (int)s->device);
                goto fail_plan;
            }
            if (plan_add(p, (uint32_t)t, s->device, s->col_offset,
                         s->col_width) != 0) {
                sd_diag_set(d, SD_ENOMEM, "out of memory");
                goto fail_plan;
            }
        }
    }
    plan_sort(p);
    devices_from_msg(p, r->devices, r->n_devices);
    p->cost_ms = r->plan_cost_ms;
    /* A static name where the client knows it, the response's otherwise. */
    p->algorithm = r->algorithm != NULL ? r->algorithm : "";
    if (plan_alg_parse(p->algorithm, &alg, &why) == 0)
        p->algorithm = plan_alg_name(alg);
    basis_from_msg(p, r->basis);

    /* The explanation: the bottleneck tables' shards on that device, in
     * the response's order (costliest first). */
    p->explain.critical_device = -1;
    if (ex != NULL && ex->bottleneck_device >= 0 &&
        ex->bottleneck_device < ndev) {
        p->explain.critical_device = ex->bottleneck_device;
        p->explain.lower_bound_ms = ex->lower_bound_ms;
        p->explain.gap = ex->gap_ratio;
        for (i = 0; i < ex->n_bottleneck_tables &&
                    p->explain.ndrivers < PLAN_DRIVERS_MAX;
             i++) {
            t = table_index(tables, n, 0, ex->bottleneck_tables[i]);
            for (k = 0; t >= 0 && k < p->nshards; k++) {
                if (p->shards[k].table != (uint32_t)t ||
                    p->shards[k].device != ex->bottleneck_device)
                    continue;
                p->explain.drivers[p->explain.ndrivers] = k;
                p->explain.driver_ms[p->explain.ndrivers++] = -1;
                break;
            }
        }
    }
    /* The search's figures: neuroshard's only, as offline. */
    if (r->search != NULL && strcmp(p->algorithm, "neuroshard") == 0) {
        p->stats.search_ms = r->search->search_time_ms;
        p->stats.greedy_runs = (int64_t)r->search->candidates_evaluated;
        p->stats.splits = (int32_t)(p->nshards - n);
        p->stats.budget_exhausted = r->search->time_budget_exhausted;
        p->stats.states = -1;
        p->stats.levels = -1;
        p->stats.moves = -1;
    }
    return 0;

fail_plan:
    plan_destroy(p);
    return SD_EFORMAT;
}

void online_msg_estimate_from(const Shardd__V1__EstimateResponse *r,
                              struct plan *p)
{
    devices_from_msg(p, r->devices, r->n_devices);
    p->cost_ms = r->plan_cost_ms;
    basis_from_msg(p, r->basis);
}

int online_msg_topology_from(const struct topology *asked,
                             Shardd__V1__DeviceCost *const *devs,
                             int32_t ndevices, struct topology *t,
                             uint64_t **caps)
{
    int32_t r;

    *caps = malloc((size_t)ndevices * sizeof(**caps));
    if (*caps == NULL)
        return SD_ENOMEM;
    for (r = 0; r < ndevices; r++)
        (*caps)[r] = devs[r]->memory_capacity_bytes > 0
                         ? devs[r]->memory_capacity_bytes
                         : topology_mem(asked, r);
    topology_default(t, ndevices, (*caps)[0]);
    t->mem_by_device = *caps;
    if (asked->devices_per_host)
        t->devices_per_host = asked->devices_per_host;
    return 0;
}
