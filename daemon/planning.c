/*
 * The Planner service: Plan and Estimate.  shardd.v1 requests (protobuf-c)
 * to planner structs, the planner, and planner results back to shardd.v1
 * responses, with the plan cache, the plan audit and the profiler's
 * proposals on the way.
 *
 * Methods run on transport worker threads.  Every input check names the
 * proto field the way docs/api.md shows (`topology.num_devices: 0 is not in
 * [1, 4096]`); the tables' own checks are the planner's (`tables[3] "t3":
 * dim 30 is not a multiple of 4 ...`).
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "shardd/log.h"
#include "shardd/v1/planner.pb-c.h"
#include "shardd/v1/types.pb-c.h"
#include "svc_int.h"

/* Server defaults the API documents (docs/api.md, types.proto). */
#define SVC_DEFAULT_BATCH  65536
#define SVC_MAX_BATCH      ((int64_t)1 << 30)
#define SVC_BOTTLENECK_MAX 5
/* Longest search one request may ask for: a worker is not a batch queue. */
#define SVC_MAX_BUDGET_MS 600000
/* A search stops this long before the client's deadline, to reply. */
#define SVC_DEADLINE_MARGIN_MS 50

/* ---------------------------------------------------------------------- */
/* Requests to planner structs                                             */

static const char *str_or_empty(const char *s)
{
    return s != NULL ? s : "";
}

/*
 * Copies the request's tables into a new array (*out, caller frees) and
 * validates them with the planner.  NaN and infinities are refused here,
 * field by field, before any arithmetic sees them.
 */
static int conv_tables(const struct sd_config *cfg,
                       Shardd__V1__Table *const *in, size_t n,
                       struct table **out, struct sd_diag *d)
{
    struct table *tables;
    size_t i;
    int k, rv;

    if (n == 0)
        return sd_diag_set(d, SD_EINVAL, "tables: at least one is needed");
    if (n > cfg->max_tables)
        return sd_diag_set(d, SD_ERANGE,
                           "tables: %zu tables, more than this server's "
                           "limit of %zu",
                           n, (size_t)cfg->max_tables);
    tables = calloc(n, sizeof(*tables));
    if (tables == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    for (i = 0; i < n; i++) {
        const Shardd__V1__Table *src = in[i];
        struct table *t = &tables[i];
        const char *name = str_or_empty(src->name);
        size_t len = strlen(name);

        if (len == 0) {
            rv = sd_diag_set(d, SD_EINVAL, "tables[%zu]: name is empty", i);
            goto fail_tables;
        }
        if (len >= TABLE_NAME_MAX) {
            rv = sd_diag_set(d, SD_EINVAL,
                             "tables[%zu]: name is %zu bytes, more than %d", i,
                             len, TABLE_NAME_MAX - 1);
            goto fail_tables;
        }
        memcpy(t->name, name, len + 1);
        if (src->n_bins != TABLE_NBINS) {
            rv = sd_diag_set(d, SD_EINVAL,
                             "tables[%zu] \"%s\": bins has %zu values, not %d",
                             i, t->name, src->n_bins, TABLE_NBINS);
            goto fail_tables;
        }
        if (!isfinite(src->pooling_factor)) {
            rv = sd_diag_set(d, SD_EINVAL,
                             "tables[%zu] \"%s\": pooling_factor is not a "
                             "finite number",
                             i, t->name);
            goto fail_tables;
        }
        for (k = 0; k < TABLE_NBINS; k++) {
            if (!isfinite(src->bins[k])) {
                rv = sd_diag_set(d, SD_EINVAL,
                                 "tables[%zu] \"%s\": bins[%d] is not a "
                                 "finite number",
                                 i, t->name, k);
                goto fail_tables;
            }
            t->bins[k] = src->bins[k];
        }
        t->rows = src->rows;
        t->dim = src->dim;
        t->pooling_factor = src->pooling_factor;
        switch (src->dtype) {
        case SHARDD__V1__DTYPE__DTYPE_UNSPECIFIED:
        case SHARDD__V1__DTYPE__DTYPE_FP32:
            t->dtype = TABLE_DTYPE_FP32;
            break;
        case SHARDD__V1__DTYPE__DTYPE_FP16:
            t->dtype = TABLE_DTYPE_FP16;
            break;
        default:
            rv = sd_diag_set(d, SD_EINVAL,
                             "tables[%zu] \"%s\": dtype %d is unknown", i,
                             t->name, (int)src->dtype);
            goto fail_tables;
        }
    }
    rv = table_validate_all(tables, n, d);
    if (rv != 0)
        goto fail_tables;
    *out = tables;
    return 0;

fail_tables:
    free(tables);
    return rv;
}

/* A Topology double: finite and >= 0; 0 takes the default. */
/* A topology figure: 0 is the server default, else within [lo, hi]. */
static int conv_real(double in, double dflt, const char *field, double lo,
                     double hi, double *out, struct sd_diag *d)
{
    if (!isfinite(in))
        return sd_diag_set(d, SD_EINVAL, "topology.%s: not a finite number",
                           field);
    if (in != 0 && (in < lo || in > hi))
        return sd_diag_set(d, SD_EINVAL,
                           "topology.%s: %g is not in [%g, %g] (0 = server "
                           "default)",
                           field, in, lo, hi);
    *out = in != 0 ? in : dflt;
    return 0;
}

/* A backstop (all was checked above), with the batch perhaps still 0. */
static int topology_validate_or_unset(struct topology *t, struct sd_diag *d)
{
    struct topology probe = *t;

    if (probe.batch_size == 0)
        probe.batch_size = SVC_MAX_BATCH;
    return topology_validate(&probe, d);
}

/*
 * Per-device capacities (entry 0: mem_bytes_per_device) into *caps, a new
 * array owned by the caller, or NULL when every device has the same, whose
 * capacity *mem then is.
 */
static int conv_capacities(const Shardd__V1__Topology *in, uint64_t *mem,
                           uint64_t **caps, struct sd_diag *d)
{
    uint64_t *c;
    bool same = true;
    size_t i;

    *caps = NULL;
    *mem = in->mem_bytes_per_device;
    if (in->n_mem_bytes_by_device == 0)
        return 0;
    if (in->n_mem_bytes_by_device != (size_t)in->num_devices)
        return sd_diag_set(d, SD_EINVAL,
                           "topology.mem_bytes_by_device: %zu entries, "
                           "num_devices is %d",
                           in->n_mem_bytes_by_device, (int)in->num_devices);
    c = malloc(in->n_mem_bytes_by_device * sizeof(*c));
    if (c == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    for (i = 0; i < in->n_mem_bytes_by_device; i++) {
        c[i] = in->mem_bytes_by_device[i] != 0 ? in->mem_bytes_by_device[i]
                                               : in->mem_bytes_per_device;
        if (c[i] == 0) {
            free(c);
            return sd_diag_set(d, SD_EINVAL,
                               "topology.mem_bytes_by_device[%zu]: 0 and "
                               "mem_bytes_per_device is 0",
                               i);
        }
        same = same && c[i] == c[0];
    }
    *mem = c[0];
    if (same)
        free(c); /* the uniform case: one capacity, one request hash */
    else
        *caps = c;
    return 0;
}

/*
 * Fills *out from a Topology with the server defaults applied.  Devices of
 * different capacities get *caps (owned by the caller, which keeps it as
 * long as *out is used; NULL otherwise).
 */
static int conv_topology(const struct sd_config *cfg,
                         const Shardd__V1__Topology *in, struct topology *out,
                         uint64_t **caps, struct sd_diag *d)
{
    struct topology t;
    uint64_t mem;
    int rv;

    if (in == NULL)
        return sd_diag_set(d, SD_EINVAL, "topology: required");
    if (in->num_devices < 1 || in->num_devices > TOPO_DEVICES_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           "topology.num_devices: %d is not in [1, %d]",
                           (int)in->num_devices, TOPO_DEVICES_MAX);
    rv = conv_capacities(in, &mem, caps, d);
    if (rv != 0)
        return rv;
    if (mem == 0)
        return sd_diag_set(d, SD_EINVAL,
                           "topology.mem_bytes_per_device: required (> 0)");

    topology_default(&t, in->num_devices, mem);
    t.mem_by_device = *caps;
    if (in->devices_per_host < 0 ||
        (in->devices_per_host > 0 &&
         in->num_devices % in->devices_per_host != 0))
        rv = sd_diag_set(d, SD_EINVAL,
                         "topology.devices_per_host: %d does not divide "
                         "num_devices %d",
                         (int)in->devices_per_host, (int)in->num_devices);
    if (in->devices_per_host > 0)
        t.devices_per_host = in->devices_per_host;
    /* 0 and no configured default: the answering model's batch, set by
     * resolve_batch() once the model is known. */
    t.batch_size = in->batch_size != 0 ? in->batch_size : cfg->default_batch;
    if (rv == 0 && t.batch_size != 0 &&
        (t.batch_size < t.ndevices || t.batch_size > SVC_MAX_BATCH))
        rv = sd_diag_set(d, SD_EINVAL,
                         "topology.batch_size: %lld is not in "
                         "[num_devices, 2^30]",
                         (long long)t.batch_size);
    if (rv == 0)
        rv = conv_real(in->intra_host_bw_bytes_per_ms, t.intra_host_bw,
                       "intra_host_bw_bytes_per_ms", TOPO_BW_MIN, TOPO_BW_MAX,
                       &t.intra_host_bw, d);
    if (rv == 0)
        rv = conv_real(in->inter_host_bw_bytes_per_ms, t.inter_host_bw,
                       "inter_host_bw_bytes_per_ms", TOPO_BW_MIN, TOPO_BW_MAX,
                       &t.inter_host_bw, d);
    if (rv == 0)
        rv =
            conv_real(in->link_latency_ms, t.link_latency_ms, "link_latency_ms",
                      0, TOPO_LATENCY_MAX, &t.link_latency_ms, d);
    if (rv == 0)
        rv = conv_real(in->device_mem_bw_bytes_per_ms, t.device_mem_bw,
                       "device_mem_bw_bytes_per_ms", TOPO_BW_MIN, TOPO_BW_MAX,
                       &t.device_mem_bw, d);
    if (rv == 0)
        rv = topology_validate_or_unset(&t, d);
    if (rv != 0) {
        free(*caps);
        *caps = NULL;
        return rv;
    }
    *out = t;
    return 0;
}

static int conv_optimizer(Shardd__V1__Optimizer in, const char *field,
                          enum optimizer *out, struct sd_diag *d)
{
    switch (in) {
    case SHARDD__V1__OPTIMIZER__OPTIMIZER_UNSPECIFIED:
    case SHARDD__V1__OPTIMIZER__OPTIMIZER_SGD:
        *out = OPTIMIZER_SGD;
        return 0;
    case SHARDD__V1__OPTIMIZER__OPTIMIZER_ADAGRAD:
        *out = OPTIMIZER_ADAGRAD;
        return 0;
    case SHARDD__V1__OPTIMIZER__OPTIMIZER_ROWWISE_ADAGRAD:
        *out = OPTIMIZER_ROWWISE_ADAGRAD;
        return 0;
    case SHARDD__V1__OPTIMIZER__OPTIMIZER_ADAM:
        *out = OPTIMIZER_ADAM;
        return 0;
    default:
        return sd_diag_set(d, SD_EINVAL, "%s: %d is unknown", field, (int)in);
    }
}

/*
 * The cost model that answers for a profile (empty: the server's default):
 * the profile's active model (models.c); a profile with none gets the
 * analytic model unless the algorithm needs a learned one (neuroshard
 * searches with it), which is SD_ESTATE.
 */
struct scorer {
    struct net_cost_model ncm;
    const struct cost_model *m;
    struct dmodel *dm;   /* the learned model's reference; NULL: analytic */
    const char *profile; /* the profile answered for */
};

/*
 * The model for a request's profile: the active one (a reference, released
 * by scorer_release()), or for algorithms that do not need a learned model,
 * the analytic one when the profile has none.
 */
static int pick_scorer(struct svc *s, const char *profile, bool need_learned,
                       const char *field, struct scorer *sc, struct sd_diag *d)
{
    struct sd_diag why;
    int rv;

    rv = models_acquire(&s->models, profile, &sc->dm, &why);
    if (rv == 0) {
        net_cost_model_init(&sc->ncm, sc->dm->net);
        sc->m = &sc->ncm.cm;
        sc->profile = sc->dm->net->profile;
        return 0;
    }
    if (need_learned || rv != SD_ESTATE)
        return sd_diag_set(d, rv, "%s: %s", field, why.msg);
    sc->dm = NULL;
    sc->m = &cost_model_analytic;
    sc->profile = profile;
    return 0;
}

/*
 * A request without a batch size (and no default_batch configured) is
 * costed at the batch the answering model was measured at, as `shardctl
 * plan --offline` does: no scaling, and the same plan online and offline.
 */
static int resolve_batch(struct topology *t, const struct scorer *sc,
                         struct sd_diag *d)
{
    if (t->batch_size != 0)
        return 0;
    t->batch_size =
        sc->dm != NULL ? sc->dm->net->batch_size : SVC_DEFAULT_BATCH;
    if (t->batch_size < t->ndevices)
        return sd_diag_set(d, SD_EINVAL,
                           "topology.batch_size: the default (%lld, the "
                           "model's) is below num_devices %d; give one",
                           (long long)t->batch_size, (int)t->ndevices);
    return 0;
}

static void scorer_release(struct scorer *sc)
{
    dmodel_release(sc->dm);
    sc->dm = NULL;
}

/* ---------------------------------------------------------------------- */
/* Request hash: FNV-1a (64 bit) over the request with defaults applied     */

struct hasher {
    uint64_t h;
};

static void hash_bytes(struct hasher *hs, const void *p, size_t n)
{
    const unsigned char *b = p;
    size_t i;

    for (i = 0; i < n; i++) {
        hs->h ^= b[i];
        hs->h *= 0x100000001b3ull;
    }
}

static void hash_u64(struct hasher *hs, uint64_t v)
{
    unsigned char b[8];
    int i;

    for (i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i)); /* byte order fixed */
    hash_bytes(hs, b, sizeof(b));
}

static void hash_real(struct hasher *hs, double x)
{
    uint64_t v;

    memcpy(&v, &x, sizeof(v));
    hash_u64(hs, v);
}

static void hash_str(struct hasher *hs, const char *s)
{
    size_t n = strlen(s);

    hash_u64(hs, n);
    hash_bytes(hs, s, n);
}

static uint64_t request_hash(const struct table *tables, size_t n,
                             const struct topology *t,
                             const struct plan_options *o, const char *profile,
                             char out[17])
{
    struct hasher hs = {0xcbf29ce484222325ull};
    size_t i;
    int k;

    hash_str(&hs, "shardd.v1.PlanRequest/1");
    hash_u64(&hs, n);
    for (i = 0; i < n; i++) {
        hash_str(&hs, tables[i].name);
        hash_u64(&hs, (uint64_t)tables[i].rows);
        hash_u64(&hs, (uint64_t)tables[i].dim);
        hash_real(&hs, tables[i].pooling_factor);
        for (k = 0; k < TABLE_NBINS; k++)
            hash_real(&hs, tables[i].bins[k]);
        hash_u64(&hs, (uint64_t)tables[i].dtype);
    }
    hash_u64(&hs, (uint64_t)t->ndevices);
    hash_u64(&hs, (uint64_t)t->devices_per_host);
    hash_u64(&hs, t->mem_bytes);
    hash_u64(&hs, (uint64_t)t->batch_size);
    hash_real(&hs, t->intra_host_bw);
    hash_real(&hs, t->inter_host_bw);
    hash_real(&hs, t->link_latency_ms);
    hash_real(&hs, t->device_mem_bw);
    hash_str(&hs, plan_alg_name(o->alg));
    hash_u64(&hs, o->column_splits);
    hash_real(&hs, o->time_budget_ms);
    hash_u64(&hs, o->seed);
    hash_u64(&hs, (uint64_t)o->optimizer);
    hash_str(&hs, profile);
    /* Constraints only where given, so that the hash of a request without
     * them is what it always was. */
    if (t->mem_by_device != NULL) {
        hash_str(&hs, "mem_by_device");
        for (k = 0; k < t->ndevices; k++)
            hash_u64(&hs, t->mem_by_device[k]);
    }
    if (o->pins != NULL) {
        hash_str(&hs, "pins");
        for (i = 0; i < n; i++)
            hash_u64(&hs, (uint64_t)(int64_t)o->pins[i]);
    }
    snprintf(out, 17, "%016llx", (unsigned long long)hs.h);
    return hs.h;
}

/* ---------------------------------------------------------------------- */
/* Planner results to responses                                            */

/* protobuf-c string fields are `char *`; packing only reads them. */
static char *msg_str(const char *s)
{
    return (char *)s;
}

/*
 * The per-device costs of an evaluated plan: arrays *msgs and *ptrs owned
 * by the caller (free()).
 */
static int build_devices(const struct plan *p, const struct topology *t,
                         Shardd__V1__DeviceCost **msgs,
                         Shardd__V1__DeviceCost ***ptrs)
{
    size_t n = (size_t)p->ndevices, r;

    *msgs = calloc(n, sizeof(**msgs));
    *ptrs = calloc(n, sizeof(**ptrs));
    if (*msgs == NULL || *ptrs == NULL) {
        free(*msgs);
        free(*ptrs);
        return SD_ENOMEM;
    }
    for (r = 0; r < n; r++) {
        Shardd__V1__DeviceCost *m = &(*msgs)[r];
        const struct plan_device *dv = &p->devices[r];

        shardd__v1__device_cost__init(m);
        m->device = (int32_t)r;
        m->memory_bytes = dv->mem_bytes;
        m->memory_capacity_bytes = topology_mem(t, (int32_t)r);
        m->compute_ms = dv->compute_ms;
        m->fwd_comm_ms = dv->fwd_comm_ms;
        m->bwd_comm_ms = dv->bwd_comm_ms;
        m->total_ms = dv->total_ms;
        m->dim_sum = dv->dim_sum;
        m->num_shards = dv->nshards;
        (*ptrs)[r] = m;
    }
    return 0;
}

/* The cost model's name, noting a batch other than the model's own. */
static void cost_model_name(const struct plan *p, const struct scorer *sc,
                            const struct topology *t, char *out, size_t size)
{
    if (sc->dm != NULL && t->batch_size != sc->ncm.net->batch_size)
        snprintf(out, size, "%s (scaled from batch %lld)", p->cost_model,
                 (long long)sc->ncm.net->batch_size);
    else
        snprintf(out, size, "%s", p->cost_model);
}

static void fill_basis(Shardd__V1__CostBasis *b, const struct scorer *sc,
                       const struct plan *p, char *cost_model)
{
    shardd__v1__cost_basis__init(b);
    b->model_version = msg_str(sc->dm != NULL ? sc->dm->version : "");
    b->profile = msg_str(sc->profile);
    b->cost_model = cost_model;
    b->comm_model = msg_str(p->comm_model);
    b->compute_source = sc->dm != NULL
                            ? SHARDD__V1__COST_SOURCE__COST_SOURCE_LEARNED
                            : SHARDD__V1__COST_SOURCE__COST_SOURCE_ANALYTIC;
    b->comm_source = SHARDD__V1__COST_SOURCE__COST_SOURCE_ANALYTIC;
}

/* Everything a PlanResponse points into; freed in one place. */
struct plan_reply {
    Shardd__V1__TablePlacement *placements;
    Shardd__V1__TablePlacement **placement_ptrs;
    Shardd__V1__Shard *shards;
    Shardd__V1__Shard **shard_ptrs;
    Shardd__V1__DeviceCost *devices;
    Shardd__V1__DeviceCost **device_ptrs;
};

static void plan_reply_free(struct plan_reply *r)
{
    free(r->placements);
    free(r->placement_ptrs);
    free(r->shards);
    free(r->shard_ptrs);
    free(r->devices);
    free(r->device_ptrs);
}

/*
 * Fills the table placements of resp from a sorted plan: the shards of table
 * i are a run of p->shards, in column order.
 */
static int build_placements(const struct plan *p, const struct table *tables,
                            size_t ntables, struct plan_reply *r,
                            Shardd__V1__PlanResponse *resp)
{
    size_t i, k = 0;

    r->placements = calloc(ntables, sizeof(*r->placements));
    r->placement_ptrs = calloc(ntables, sizeof(*r->placement_ptrs));
    r->shards = calloc(p->nshards ? p->nshards : 1, sizeof(*r->shards));
    r->shard_ptrs = calloc(p->nshards ? p->nshards : 1, sizeof(*r->shard_ptrs));
    if (!r->placements || !r->placement_ptrs || !r->shards || !r->shard_ptrs)
        return SD_ENOMEM;
    for (i = 0; i < ntables; i++) {
        Shardd__V1__TablePlacement *tp = &r->placements[i];

        shardd__v1__table_placement__init(tp);
        tp->table = msg_str(tables[i].name);
        tp->shards = &r->shard_ptrs[k];
        for (; k < p->nshards && p->shards[k].table == i; k++) {
            Shardd__V1__Shard *sh = &r->shards[k];

            shardd__v1__shard__init(sh);
            sh->device = p->shards[k].device;
            sh->col_offset = p->shards[k].col_offset;
            sh->col_width = p->shards[k].col_width;
            r->shard_ptrs[k] = sh;
            tp->n_shards++;
        }
        r->placement_ptrs[i] = tp;
    }
    resp->n_tables = ntables;
    resp->tables = r->placement_ptrs;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Plan                                                                    */

struct name_idx {
    const char *name;
    uint32_t idx;
};

static int cmp_name_idx(const void *a, const void *b)
{
    return strcmp(((const struct name_idx *)a)->name,
                  ((const struct name_idx *)b)->name);
}

/* The tables' names, sorted for find_table(); NULL when out of memory. */
static struct name_idx *name_index(const struct table *tables, size_t n)
{
    struct name_idx *ix = malloc((n ? n : 1) * sizeof(*ix));
    size_t i;

    if (ix == NULL)
        return NULL;
    for (i = 0; i < n; i++)
        ix[i] = (struct name_idx){tables[i].name, (uint32_t)i};
    qsort(ix, n, sizeof(*ix), cmp_name_idx);
    return ix;
}

/* The index of the table called name, or -1. */
static int64_t find_table(const struct name_idx *ix, size_t n, const char *name)
{
    struct name_idx key = {name, 0};
    const struct name_idx *hit =
        bsearch(&key, ix, n, sizeof(*ix), cmp_name_idx);

    return hit != NULL ? (int64_t)hit->idx : -1;
}

/*
 * Constraints.pins to one device (or -1) per table: *out, owned by the
 * caller, stays NULL when nothing is pinned.
 */
static int conv_pins(const Shardd__V1__Constraints *in,
                     const struct table *tables, size_t ntables,
                     const struct topology *t, int32_t **out, struct sd_diag *d)
{
    struct name_idx *index;
    int32_t *pins;
    size_t i;
    int rv = 0;

    *out = NULL;
    if (in == NULL || in->n_pins == 0)
        return 0;
    index = name_index(tables, ntables);
    pins = malloc((ntables ? ntables : 1) * sizeof(*pins));
    if (index == NULL || pins == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_free;
    }
    for (i = 0; i < ntables; i++)
        pins[i] = -1;
    for (i = 0; i < in->n_pins && rv == 0; i++) {
        const Shardd__V1__Pin *pin = in->pins[i];
        const char *name = str_or_empty(pin->table);
        int64_t k = find_table(index, ntables, name);

        if (k < 0)
            rv = sd_diag_set(d, SD_EINVAL,
                             "options.constraints.pins[%zu]: table "
                             "\"%.200s\" is not in tables",
                             i, name);
        else if (pins[k] >= 0)
            rv = sd_diag_set(d, SD_EINVAL,
                             "options.constraints.pins[%zu]: table \"%s\" "
                             "is pinned twice",
                             i, name);
        else if (pin->device < 0 || pin->device >= t->ndevices)
            rv = sd_diag_set(d, SD_EINVAL,
                             "options.constraints.pins[%zu]: device %d is "
                             "not in [0, %d)",
                             i, (int)pin->device, (int)t->ndevices);
        else
            pins[k] = pin->device;
    }
    if (rv == 0) {
        *out = pins;
        pins = NULL;
    }
out_free:
    free(pins);
    free(index);
    return rv;
}

/*
 * PlanOptions (may be NULL) to plan_options; see planner.proto.  Pins go
 * to *pins (owned by the caller, NULL when none; o->pins points at it).
 */
static int conv_options(const struct sd_config *cfg,
                        const Shardd__V1__PlanOptions *in,
                        const struct table *tables, size_t ntables,
                        const struct topology *t, struct plan_options *o,
                        int32_t **pins, struct sd_diag *d)
{
    int rv;

    *pins = NULL;
    plan_options_default(o);
    o->alg = PLAN_ALG_NEUROSHARD;
    o->threads = (int32_t)cfg->search_threads; /* 0: one per CPU */
    o->time_budget_ms = cfg->default_time_budget_ms;
    o->column_splits = false;
    if (in == NULL)
        return 0;
    if (in->algorithm != NULL && in->algorithm[0] != '\0') {
        struct sd_diag why;

        if (plan_alg_parse(in->algorithm, &o->alg, &why) != 0)
            return sd_diag_set(d, SD_EINVAL, "options.algorithm: %s", why.msg);
    }
    o->column_splits = !in->whole_tables_only;
    if (in->time_budget_ms > SVC_MAX_BUDGET_MS)
        return sd_diag_set(d, SD_ERANGE,
                           "options.time_budget_ms: %u is over this server's "
                           "limit of %d",
                           (unsigned)in->time_budget_ms, SVC_MAX_BUDGET_MS);
    if (in->time_budget_ms != 0)
        o->time_budget_ms = in->time_budget_ms;
    o->seed = in->seed;
    rv = conv_optimizer(in->optimizer, "options.optimizer", &o->optimizer, d);
    if (rv == 0)
        rv = conv_pins(in->constraints, tables, ntables, t, pins, d);
    o->pins = *pins;
    return rv;
}

/*
 * A cached response, marked as such.  It was stored with cache_hit false,
 * which proto3 leaves out of the bytes; a protobuf parser merges repeated
 * top-level fields (the last scalar wins), so appending the field
 * (PlanResponse.cache_hit = 9, varint: key 9 << 3 = 0x48, value 1) marks it
 * without unpacking and repacking a response that may hold 65,536 tables.
 */
static int mark_cache_hit(uint8_t **resp, size_t *len, struct sd_diag *d)
{
    uint8_t *grown = realloc(*resp, *len + 2);

    if (grown == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    grown[*len] = 9 << 3;
    grown[*len + 1] = 1;
    *resp = grown;
    *len += 2;
    return 0;
}

/* Records the plan handed out (best effort: a full disk fails no plan). */
static void audit_plan(struct svc *s, const struct plan *p,
                       const struct table *tables, size_t n,
                       const struct scorer *sc, const char *hash,
                       const char *alg)
{
    struct store_plan_audit a;
    struct sd_diag d;
    char *json = json_plan(p, tables);

    if (json == NULL)
        return;
    memset(&a, 0, sizeof(a));
    snprintf(a.request_hash, sizeof(a.request_hash), "%s", hash);
    snprintf(a.algorithm, sizeof(a.algorithm), "%s", alg);
    a.model_id = sc->dm != NULL ? sc->dm->id : 0;
    a.ntables = (int32_t)n;
    a.ndevices = p->ndevices;
    a.plan_cost_ms = p->cost_ms;
    a.plan_json = json;
    pthread_mutex_lock(&s->store_mu);
    if (store_plan_audit_put(s->st, &a, NULL, &d) != 0)
        sd_log(SD_LOG_WARN, "plan audit not stored: %s", d.msg);
    pthread_mutex_unlock(&s->store_mu);
    free(json);
}

/*
 * Fits the search into the client's deadline (*clamped: it had to cut the
 * budget); SD_ETIMEDOUT if the deadline is past already.
 */
static int fit_deadline(const struct svc_call *call, struct plan_options *po,
                        bool *clamped, struct sd_diag *d)
{
    int64_t left;

    *clamped = false;
    if (call == NULL || call->deadline_ms == INT64_MAX)
        return 0;
    left = call->deadline_ms - sd_now_ms() - SVC_DEADLINE_MARGIN_MS;
    if (left <= 0)
        return sd_diag_set(d, SD_ETIMEDOUT,
                           "the deadline passed before the search started");
    if (po->time_budget_ms <= 0 || po->time_budget_ms > (double)left) {
        po->time_budget_ms = (double)left;
        *clamped = true;
    }
    return 0;
}

static int plan_request(struct svc *s, const struct svc_call *call,
                        const uint8_t *req, size_t len, uint8_t **resp,
                        size_t *resp_len, struct sd_diag *d)
{
    Shardd__V1__PlanRequest *rq;
    Shardd__V1__PlanResponse out = SHARDD__V1__PLAN_RESPONSE__INIT;
    Shardd__V1__CostBasis basis;
    Shardd__V1__SearchStats search = SHARDD__V1__SEARCH_STATS__INIT;
    Shardd__V1__Explanation expl = SHARDD__V1__EXPLANATION__INIT;
    char *bottleneck[SVC_BOTTLENECK_MAX];
    struct plan_reply reply = {0};
    struct conf_snap *cf = svc_conf(s);
    const struct sd_config *cfg = &cf->c;
    struct plan_options po;
    struct topology topo;
    struct table *tables = NULL;
    struct scorer sc = {0};
    struct plan p;
    uint64_t *caps = NULL;
    int32_t *pins = NULL;
    char hash[17], cm_name[sizeof(p.cost_model) + 48];
    const char *profile;
    uint64_t key;
    bool clamped;
    double t0, elapsed;
    size_t n;
    int i, rv;

    rq = shardd__v1__plan_request__unpack(NULL, len, req);
    if (rq == NULL) {
        conf_snap_unref(cf);
        return sd_diag_set(d, SD_EFORMAT, "PlanRequest: not a valid message");
    }
    rv = conv_tables(cfg, rq->tables, rq->n_tables, &tables, d);
    if (rv != 0)
        goto out_request;
    n = rq->n_tables;
    rv = conv_topology(cfg, rq->topology, &topo, &caps, d);
    if (rv == 0)
        rv = conv_options(cfg, rq->options, tables, n, &topo, &po, &pins, d);
    if (rv != 0)
        goto out_tables;
    profile = rq->options != NULL ? rq->options->profile : NULL;
    rv = pick_scorer(s, profile, po.alg == PLAN_ALG_NEUROSHARD,
                     "options.profile", &sc, d);
    if (rv != 0)
        goto out_tables;
    po.net = sc.dm != NULL ? sc.dm->net : NULL;
    rv = resolve_batch(&topo, &sc, d);
    if (rv != 0)
        goto out_scorer;

    /* The hash covers the request with defaults applied, not the budget the
     * deadline leaves: the same request answers from the cache whatever
     * its deadline. */
    key = request_hash(tables, n, &topo, &po, sc.profile, hash);
    if (cache_get(&s->cache, key, sc.dm != NULL ? sc.dm->id : -1, resp,
                  resp_len)) {
        rv = mark_cache_hit(resp, resp_len, d);
        goto out_scorer;
    }
    rv = fit_deadline(call, &po, &clamped, d);
    if (rv != 0)
        goto out_scorer;

    po.cancel = call != NULL ? call->cancel : NULL;
    t0 = sd_now_ms_f();
    rv = plan_run(tables, n, &topo, &po, sc.m, &p, d);
    elapsed = sd_now_ms_f() - t0;
    if (rv != 0) {
        /* The planner says "pins: ..."; the client sent the field below. */
        if (strncmp(d->msg, "pins: ", 6) == 0) {
            struct sd_diag why = *d;

            sd_diag_set(d, rv, "options.constraints.pins: %s", why.msg + 6);
        }
        goto out_scorer;
    }
    /* Stopped because the client left: nobody takes this plan, and it is
     * not the request's answer, for the cache or the audit. */
    if (po.cancel != NULL && atomic_load(po.cancel)) {
        rv = sd_diag_set(d, SD_ECANCELED, "the client cancelled the call");
        goto out_reply;
    }

    rv = build_placements(&p, tables, n, &reply, &out);
    if (rv == 0)
        rv = build_devices(&p, &topo, &reply.devices, &reply.device_ptrs);
    if (rv != 0) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_reply;
    }
    out.n_devices = (size_t)p.ndevices;
    out.devices = reply.device_ptrs;
    out.plan_cost_ms = p.cost_ms;
    out.algorithm = msg_str(plan_alg_name(po.alg));
    cost_model_name(&p, &sc, &topo, cm_name, sizeof(cm_name));
    fill_basis(&basis, &sc, &p, cm_name);
    out.basis = &basis;

    /* The baselines keep no statistics: their time is the whole run. */
    search.search_time_ms =
        po.alg == PLAN_ALG_NEUROSHARD ? p.stats.search_ms : elapsed;
    search.candidates_evaluated =
        po.alg == PLAN_ALG_NEUROSHARD ? (uint64_t)p.stats.greedy_runs : 1;
    search.time_budget_exhausted = p.stats.budget_exhausted;
    out.search = &search;

    expl.bottleneck_device = p.explain.critical_device;
    expl.bottleneck_tables = bottleneck;
    for (i = 0; i < p.explain.ndrivers; i++) {
        const char *name = tables[p.shards[p.explain.drivers[i]].table].name;
        size_t k;

        for (k = 0; k < expl.n_bottleneck_tables; k++)
            if (strcmp(bottleneck[k], name) == 0)
                break;
        if (k == expl.n_bottleneck_tables &&
            expl.n_bottleneck_tables < SVC_BOTTLENECK_MAX)
            bottleneck[expl.n_bottleneck_tables++] = msg_str(name);
    }
    expl.lower_bound_ms = p.explain.lower_bound_ms;
    expl.gap_ratio = p.explain.lower_bound_ms > 0 ? p.explain.gap : 0;
    out.explanation = &expl;
    out.request_hash = hash;
    out.cache_hit = false;

    rv = wire_pack(&out.base, resp, resp_len, d);
    if (rv == 0) {
        /* A plan cut short by the deadline is not the request's answer. */
        if (!(clamped && p.stats.budget_exhausted))
            cache_put(&s->cache, key, sc.dm != NULL ? sc.dm->id : -1, *resp,
                      *resp_len);
        audit_plan(s, &p, tables, n, &sc, hash, plan_alg_name(po.alg));
        /* Its shards are worth measuring whichever model planned them; the
         * profiler takes them when the batch is the one it measures at. */
        profw_propose(&s->profw, &p, tables, topo.batch_size);
    }

out_reply:
    plan_reply_free(&reply);
    plan_destroy(&p);
out_scorer:
    scorer_release(&sc);
out_tables:
    free(pins);
    free(caps);
    free(tables);
out_request:
    shardd__v1__plan_request__free_unpacked(rq, NULL);
    conf_snap_unref(cf);
    return rv;
}

int svc_plan(struct svc *s, const struct svc_call *call, const uint8_t *req,
             size_t len, uint8_t **resp, size_t *resp_len, struct sd_diag *d)
{
    int rv;

    profw_request_begin(&s->profw);
    rv = plan_request(s, call, req, len, resp, resp_len, d);
    profw_request_end(&s->profw);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* Estimate                                                                */

/*
 * Builds a plan (*p, initialised here) from the request's placement: one
 * entry per table by name, in any order.  Structure only; plan_validate()
 * checks the columns.
 */
static int conv_placement(Shardd__V1__TablePlacement *const *in, size_t nin,
                          const struct table *tables, size_t n, int32_t ndev,
                          struct plan *p, struct sd_diag *d)
{
    struct name_idx *index;
    const char *name;
    int64_t idx;
    bool *seen;
    size_t i, k;
    int rv;

    if (nin != n)
        return sd_diag_set(d, SD_EINVAL,
                           "placement: %zu entries for %zu tables (one per "
                           "table is needed)",
                           nin, n);
    index = name_index(tables, n);
    seen = calloc(n ? n : 1, sizeof(*seen));
    if (index == NULL || seen == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_free;
    }
    rv = plan_init(p, ndev);
    if (rv != 0) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_free;
    }
    for (i = 0; i < nin; i++) {
        const Shardd__V1__TablePlacement *tp = in[i];

        name = str_or_empty(tp->table);
        idx = find_table(index, n, name);
        if (idx < 0) {
            rv = sd_diag_set(d, SD_EINVAL,
                             "placement[%zu]: table \"%.200s\" is not in "
                             "tables",
                             i, name);
            goto fail_plan;
        }
        if (seen[idx]) {
            rv = sd_diag_set(d, SD_EINVAL,
                             "placement[%zu]: table \"%s\" is placed twice", i,
                             name);
            goto fail_plan;
        }
        seen[idx] = true;
        for (k = 0; k < tp->n_shards; k++) {
            const Shardd__V1__Shard *sh = tp->shards[k];

            if (sh->device < 0 || sh->device >= ndev) {
                rv = sd_diag_set(d, SD_EINVAL,
                                 "placement[%zu] \"%s\": shards[%zu]: device "
                                 "%d is not in [0, %d)",
                                 i, name, k, (int)sh->device, (int)ndev);
                goto fail_plan;
            }
            /* Bounds first: the planner's column check adds widths. */
            if (sh->col_offset < 0 || sh->col_width <= 0 ||
                (int64_t)sh->col_offset + sh->col_width > tables[idx].dim) {
                rv = sd_diag_set(d, SD_EINVAL,
                                 "placement[%zu] \"%s\": shards[%zu]: "
                                 "columns [%d, %lld) are outside the table's "
                                 "%d",
                                 i, name, k, (int)sh->col_offset,
                                 (long long)sh->col_offset + sh->col_width,
                                 (int)tables[idx].dim);
                goto fail_plan;
            }
            if (plan_add(p, (uint32_t)idx, sh->device, sh->col_offset,
                         sh->col_width) != 0) {
                rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
                goto fail_plan;
            }
        }
    }
    rv = 0;
    goto out_free;

fail_plan:
    plan_destroy(p);
out_free:
    free(seen);
    free(index);
    return rv;
}

static int estimate_request(struct svc *s, const uint8_t *req, size_t len,
                            uint8_t **resp, size_t *resp_len, struct sd_diag *d)
{
    Shardd__V1__EstimateRequest *rq;
    Shardd__V1__EstimateResponse out = SHARDD__V1__ESTIMATE_RESPONSE__INIT;
    Shardd__V1__DeviceCost *devs = NULL, **dev_ptrs = NULL;
    Shardd__V1__CostBasis basis;
    struct topology topo, unbounded;
    struct table *tables = NULL;
    enum optimizer opt = OPTIMIZER_SGD;
    struct conf_snap *cf = svc_conf(s);
    struct scorer sc = {0};
    struct plan p;
    uint64_t *caps = NULL;
    char cm_name[sizeof(p.cost_model) + 48];
    int32_t r;
    int rv;

    rq = shardd__v1__estimate_request__unpack(NULL, len, req);
    if (rq == NULL) {
        conf_snap_unref(cf);
        return sd_diag_set(d, SD_EFORMAT,
                           "EstimateRequest: not a valid message");
    }
    rv = conv_tables(&cf->c, rq->tables, rq->n_tables, &tables, d);
    if (rv != 0)
        goto out_request;
    rv = conv_topology(&cf->c, rq->topology, &topo, &caps, d);
    if (rv == 0)
        rv = conv_optimizer(rq->optimizer, "optimizer", &opt, d);
    if (rv == 0)
        rv = pick_scorer(s, rq->profile, false, "profile", &sc, d);
    if (rv == 0)
        rv = resolve_batch(&topo, &sc, d);
    if (rv == 0)
        rv = conv_placement(rq->placement, rq->n_placement, tables,
                            rq->n_tables, topo.ndevices, &p, d);
    if (rv != 0)
        goto out_tables;

    /* An over-full device is costed, not refused (fits_memory says so):
     * the columns are checked against an unbounded capacity. */
    unbounded = topo;
    unbounded.mem_bytes = UINT64_MAX;
    unbounded.mem_by_device = NULL;
    rv = plan_validate(&p, tables, rq->n_tables, &unbounded, opt, d);
    if (rv != 0) {
        /* The planner says "plan: ..."; the client sent "placement". */
        if (strncmp(d->msg, "plan: ", 6) == 0) {
            struct sd_diag why = *d;

            sd_diag_set(d, rv, "placement: %s", why.msg + 6);
        }
        goto out_plan;
    }
    rv = plan_evaluate(&p, tables, rq->n_tables, &topo, opt, sc.m);
    if (rv == 0)
        rv = build_devices(&p, &topo, &devs, &dev_ptrs);
    if (rv != 0) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_plan;
    }
    out.n_devices = (size_t)p.ndevices;
    out.devices = dev_ptrs;
    out.plan_cost_ms = p.cost_ms;
    cost_model_name(&p, &sc, &topo, cm_name, sizeof(cm_name));
    fill_basis(&basis, &sc, &p, cm_name);
    out.basis = &basis;
    out.fits_memory = true;
    for (r = 0; r < p.ndevices; r++)
        if (p.devices[r].mem_bytes > topology_mem(&topo, r))
            out.fits_memory = false;
    rv = wire_pack(&out.base, resp, resp_len, d);
    free(devs);
    free(dev_ptrs);

out_plan:
    plan_destroy(&p);
out_tables:
    scorer_release(&sc);
    free(caps);
    free(tables);
out_request:
    shardd__v1__estimate_request__free_unpacked(rq, NULL);
    conf_snap_unref(cf);
    return rv;
}

int svc_estimate(struct svc *s, const struct svc_call *call, const uint8_t *req,
                 size_t len, uint8_t **resp, size_t *resp_len,
                 struct sd_diag *d)
{
    int rv;

    (void)call; /* costing a plan is quick: no budget to fit */
    profw_request_begin(&s->profw);
    rv = estimate_request(s, req, len, resp, resp_len, d);
    profw_request_end(&s->profw);
    return rv;
}
