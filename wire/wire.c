/* Planner structs <-> shardd.v1 messages (wire.h). */
#include "wire.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire_int.h"

#define WIRE_BLOCK_ALIGN    16
#define WIRE_BOTTLENECK_MAX 5 /* Explanation.bottleneck_tables */

void wire_limits_default(struct wire_limits *l)
{
    l->max_tables = 65536;
    l->default_batch = 0;
    l->default_budget_ms = 10000;
    l->max_budget_ms = WIRE_MAX_BUDGET_MS;
    l->search_threads = 0;
}

/* ---------------------------------------------------------------------- */
/* The arena                                                               */

struct wire_block {
    struct wire_block *next;
    /* the room follows, aligned */
};

void *wire_alloc(struct wire_arena *a, size_t n, size_t size)
{
    size_t head = (sizeof(struct wire_block) + WIRE_BLOCK_ALIGN - 1) /
                  WIRE_BLOCK_ALIGN * WIRE_BLOCK_ALIGN;
    struct wire_block *b;

    if (size != 0 && n > (SIZE_MAX - head) / size)
        return NULL;
    b = calloc(1, head + (n * size > 0 ? n * size : 1));
    if (b == NULL)
        return NULL;
    b->next = a->blocks;
    a->blocks = b;
    return (char *)b + head;
}

void wire_arena_free(struct wire_arena *a)
{
    struct wire_block *b, *next;

    for (b = a->blocks; b != NULL; b = next) {
        next = b->next;
        free(b);
    }
    a->blocks = NULL;
}

/* protobuf-c string fields are `char *`; packing only reads them. */
static char *msg_str(const char *s)
{
    return (char *)s;
}

static const char *str_or_empty(const char *s)
{
    return s != NULL ? s : "";
}

int wire_pack(const ProtobufCMessage *m, uint8_t **out, size_t *len,
              struct sd_diag *d)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);

    if (buf == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    protobuf_c_message_pack(m, buf);
    *out = buf;
    *len = n;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Table names                                                             */

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

/* ---------------------------------------------------------------------- */
/* Tables                                                                  */

int wire__name_in(const char *src, const char *where, size_t i,
                  char name[TABLE_NAME_MAX], struct sd_diag *d)
{
    const char *s = str_or_empty(src);
    size_t len = strlen(s);

    if (len == 0)
        return sd_diag_set(d, SD_EINVAL, "%s[%zu]: name is empty", where, i);
    if (len >= TABLE_NAME_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           "%s[%zu]: name is %zu bytes, more than %d", where, i,
                           len, TABLE_NAME_MAX - 1);
    memcpy(name, s, len + 1);
    return 0;
}

int wire__bins_in(const double *bins, size_t n, double zipf, const char *where,
                  size_t i, struct table *t, struct table_spec *sp,
                  struct sd_diag *d)
{
    size_t k;

    if (n != 0 && n != TABLE_NBINS)
        return sd_diag_set(d, SD_EINVAL,
                           "%s[%zu] \"%s\": bins has %zu values, not %d (or "
                           "none, to derive them)",
                           where, i, t->name, n, TABLE_NBINS);
    for (k = 0; k < n; k++) {
        if (!isfinite(bins[k]))
            return sd_diag_set(d, SD_EINVAL,
                               "%s[%zu] \"%s\": bins[%zu] is not a finite "
                               "number",
                               where, i, t->name, k);
        t->bins[k] = bins[k];
    }
    sp->has_bins = n == TABLE_NBINS;
    if (zipf != 0 && sp->has_bins)
        return sd_diag_set(d, SD_EINVAL,
                           "%s[%zu] \"%s\": zipf_exponent is for deriving "
                           "bins: give bins or zipf_exponent, not both",
                           where, i, t->name);
    if (!isfinite(zipf) || zipf < 0 || zipf > DERIVE_ZIPF_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           "%s[%zu] \"%s\": zipf_exponent %g is not in "
                           "(0, %g] (0 = the default)",
                           where, i, t->name, zipf, DERIVE_ZIPF_MAX);
    sp->zipf_s = zipf;
    return 0;
}

int wire__table_in(const Shardd__V1__Table *src, size_t i, struct table *t,
                   struct table_spec *sp, struct sd_diag *d)
{
    int rv;

    memset(sp, 0, sizeof(*sp));
    rv = wire__name_in(src->name, "tables", i, t->name, d);
    if (rv != 0)
        return rv;
    if (!isfinite(src->pooling_factor))
        return sd_diag_set(d, SD_EINVAL,
                           "tables[%zu] \"%s\": pooling_factor is not a "
                           "finite number",
                           i, t->name);
    rv = wire__bins_in(src->bins, src->n_bins, src->zipf_exponent, "tables", i,
                       t, sp, d);
    if (rv != 0)
        return rv;
    t->rows = src->rows;
    t->dim = src->dim;
    t->pooling_factor = src->pooling_factor;
    switch (src->dtype) {
    case SHARDD__V1__DTYPE__DTYPE_UNSPECIFIED:
    case SHARDD__V1__DTYPE__DTYPE_FP32:
        t->dtype = TABLE_DTYPE_FP32;
        return 0;
    case SHARDD__V1__DTYPE__DTYPE_FP16:
        t->dtype = TABLE_DTYPE_FP16;
        return 0;
    case SHARDD__V1__DTYPE__DTYPE_BF16:
        t->dtype = TABLE_DTYPE_BF16;
        return 0;
    case SHARDD__V1__DTYPE__DTYPE_INT8:
        t->dtype = TABLE_DTYPE_INT8;
        return 0;
    default:
        return sd_diag_set(d, SD_EINVAL,
                           "tables[%zu] \"%s\": dtype %d is unknown", i,
                           t->name, (int)src->dtype);
    }
}

int wire_tables_in(const struct wire_limits *l, Shardd__V1__Table *const *in,
                   size_t n, struct table **out, struct sd_diag *d)
{
    struct table *tables;
    size_t i;
    int rv = 0;

    if (n == 0)
        return sd_diag_set(d, SD_EINVAL, "tables: at least one is needed");
    if (n > l->max_tables)
        return sd_diag_set(d, SD_ERANGE,
                           "tables: %zu tables, more than this server's "
                           "limit of %zu",
                           n, l->max_tables);
    tables = calloc(n, sizeof(*tables));
    if (tables == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    for (i = 0; i < n && rv == 0; i++) {
        struct table_spec sp;

        rv = wire__table_in(in[i], i, &tables[i], &sp, d);
        if (rv == 0 && !sp.has_bins)
            rv = sd_diag_set(d, SD_EINVAL,
                             "tables[%zu] \"%s\": bins has 0 values, not %d", i,
                             tables[i].name, TABLE_NBINS);
        table_normalize_bins(&tables[i]);
    }
    if (rv == 0)
        rv = table_validate_all(tables, n, d);
    if (rv != 0) {
        free(tables);
        return rv;
    }
    *out = tables;
    return 0;
}

Shardd__V1__Table **wire_tables_out(struct wire_arena *a,
                                    const struct table *tables, size_t n)
{
    Shardd__V1__Table *msgs = wire_alloc(a, n, sizeof(*msgs));
    Shardd__V1__Table **ptrs = wire_alloc(a, n, sizeof(*ptrs));
    size_t i;

    if (msgs == NULL || ptrs == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        Shardd__V1__Table *t = &msgs[i];

        shardd__v1__table__init(t);
        t->name = msg_str(tables[i].name);
        t->rows = tables[i].rows;
        t->dim = tables[i].dim;
        t->pooling_factor = tables[i].pooling_factor;
        t->n_bins = TABLE_NBINS;
        t->bins = (double *)tables[i].bins; /* packing only reads it */
        t->dtype = wire_dtype_out(tables[i].dtype);
        ptrs[i] = t;
    }
    return ptrs;
}

/* ---------------------------------------------------------------------- */
/* Topology                                                                */

Shardd__V1__DType wire_dtype_out(enum table_dtype dt)
{
    switch (dt) {
    case TABLE_DTYPE_FP16:
        return SHARDD__V1__DTYPE__DTYPE_FP16;
    case TABLE_DTYPE_BF16:
        return SHARDD__V1__DTYPE__DTYPE_BF16;
    case TABLE_DTYPE_INT8:
        return SHARDD__V1__DTYPE__DTYPE_INT8;
    case TABLE_DTYPE_FP32:
    default:
        return SHARDD__V1__DTYPE__DTYPE_FP32;
    }
}


/* A topology figure: 0 is the server default, else within [lo, hi]. */
static int real_in(double in, double dflt, const char *field, double lo,
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

/*
 * Per-device capacities (entry 0: mem_bytes_per_device) into *caps, a new
 * array owned by the caller, or NULL when every device has the same, whose
 * capacity *mem then is.
 */
static int capacities_in(const Shardd__V1__Topology *in, uint64_t *mem,
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

/* The hosts and the batch of a Topology into t. */
static int shape_in(const struct wire_limits *l, const Shardd__V1__Topology *in,
                    struct topology *t, struct sd_diag *d)
{
    if (in->devices_per_host < 0 ||
        (in->devices_per_host > 0 &&
         in->num_devices % in->devices_per_host != 0))
        return sd_diag_set(d, SD_EINVAL,
                           "topology.devices_per_host: %d does not divide "
                           "num_devices %d",
                           (int)in->devices_per_host, (int)in->num_devices);
    if (in->devices_per_host > 0)
        t->devices_per_host = in->devices_per_host;
    t->batch_size = in->batch_size != 0 ? in->batch_size : l->default_batch;
    if (t->batch_size != 0 &&
        (t->batch_size < t->ndevices || t->batch_size > WIRE_MAX_BATCH))
        return sd_diag_set(d, SD_EINVAL,
                           "topology.batch_size: %lld is not in "
                           "[num_devices, 2^30]",
                           (long long)t->batch_size);
    return 0;
}

/* The link figures of a Topology into t (0: t's defaults). */
static int links_in(const Shardd__V1__Topology *in, struct topology *t,
                    struct sd_diag *d)
{
    int rv = real_in(in->intra_host_bw_bytes_per_ms, t->intra_host_bw,
                     "intra_host_bw_bytes_per_ms", TOPO_BW_MIN, TOPO_BW_MAX,
                     &t->intra_host_bw, d);

    if (rv == 0)
        rv = real_in(in->inter_host_bw_bytes_per_ms, t->inter_host_bw,
                     "inter_host_bw_bytes_per_ms", TOPO_BW_MIN, TOPO_BW_MAX,
                     &t->inter_host_bw, d);
    if (rv == 0)
        rv = real_in(in->link_latency_ms, t->link_latency_ms, "link_latency_ms",
                     0, TOPO_LATENCY_MAX, &t->link_latency_ms, d);
    if (rv == 0)
        rv = real_in(in->device_mem_bw_bytes_per_ms, t->device_mem_bw,
                     "device_mem_bw_bytes_per_ms", TOPO_BW_MIN, TOPO_BW_MAX,
                     &t->device_mem_bw, d);
    return rv;
}

/* The host tier and the comm precision of a Topology into t. */
static int tier_in(const Shardd__V1__Topology *in, struct topology *t,
                   struct sd_diag *d)
{
    int rv = 0;

    t->host_dram_bytes = in->host_dram_bytes;
    if (in->host_link_bw_bytes_per_ms != 0)
        rv = real_in(in->host_link_bw_bytes_per_ms, 0,
                     "host_link_bw_bytes_per_ms", TOPO_BW_MIN, TOPO_BW_MAX,
                     &t->host_link_bw, d);
    switch (in->comm_dtype) {
    case SHARDD__V1__DTYPE__DTYPE_UNSPECIFIED:
    case SHARDD__V1__DTYPE__DTYPE_FP32:
        t->comm_dtype = TABLE_DTYPE_FP32;
        break;
    case SHARDD__V1__DTYPE__DTYPE_FP16:
        t->comm_dtype = TABLE_DTYPE_FP16;
        break;
    case SHARDD__V1__DTYPE__DTYPE_BF16:
        t->comm_dtype = TABLE_DTYPE_BF16;
        break;
    default:
        return sd_diag_set(d, SD_EINVAL,
                           "topology.comm_dtype: %d is not FP32, FP16 or "
                           "BF16",
                           (int)in->comm_dtype);
    }
    return rv;
}

int wire_topology_in(const struct wire_limits *l,
                     const Shardd__V1__Topology *in, struct topology *out,
                     uint64_t **caps, struct sd_diag *d)
{
    struct topology t, probe;
    uint64_t mem;
    int rv;

    *caps = NULL;
    if (in == NULL)
        return sd_diag_set(d, SD_EINVAL, "topology: required");
    if (in->num_devices < 1 || in->num_devices > TOPO_DEVICES_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           "topology.num_devices: %d is not in [1, %d]",
                           (int)in->num_devices, TOPO_DEVICES_MAX);
    rv = capacities_in(in, &mem, caps, d);
    if (rv != 0)
        return rv;
    if (mem == 0)
        return sd_diag_set(d, SD_EINVAL,
                           "topology.mem_bytes_per_device: required (> 0)");
    topology_default(&t, in->num_devices, mem);
    t.mem_by_device = *caps;
    rv = shape_in(l, in, &t, d);
    if (rv == 0)
        rv = links_in(in, &t, d);
    if (rv == 0)
        rv = tier_in(in, &t, d);
    if (rv == 0) {
        /* A backstop (all was checked above), with the batch perhaps
         * still 0. */
        probe = t;
        if (probe.batch_size == 0)
            probe.batch_size = WIRE_MAX_BATCH;
        rv = topology_validate(&probe, d);
    }
    if (rv != 0) {
        free(*caps);
        *caps = NULL;
        return rv;
    }
    *out = t;
    return 0;
}

Shardd__V1__Topology *wire_topology_out(struct wire_arena *a,
                                        const struct topology *t)
{
    Shardd__V1__Topology *m = wire_alloc(a, 1, sizeof(*m));

    if (m == NULL)
        return NULL;
    shardd__v1__topology__init(m);
    m->num_devices = t->ndevices;
    m->devices_per_host = t->devices_per_host;
    m->mem_bytes_per_device = t->mem_bytes;
    if (t->mem_by_device != NULL) {
        m->n_mem_bytes_by_device = (size_t)t->ndevices;
        m->mem_bytes_by_device = (uint64_t *)t->mem_by_device; /* read */
    }
    m->batch_size = t->batch_size;
    m->intra_host_bw_bytes_per_ms = t->intra_host_bw;
    m->inter_host_bw_bytes_per_ms = t->inter_host_bw;
    m->link_latency_ms = t->link_latency_ms;
    m->device_mem_bw_bytes_per_ms = t->device_mem_bw;
    m->host_dram_bytes = t->host_dram_bytes;
    m->host_link_bw_bytes_per_ms = t->host_link_bw;
    m->comm_dtype = t->comm_dtype == TABLE_DTYPE_FP32
                        ? SHARDD__V1__DTYPE__DTYPE_UNSPECIFIED
                        : wire_dtype_out((enum table_dtype)t->comm_dtype);
    return m;
}

/* ---------------------------------------------------------------------- */
/* Options                                                                 */

int wire_optimizer_in(Shardd__V1__Optimizer in, const char *field,
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

Shardd__V1__Optimizer wire_optimizer_out(enum optimizer o)
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

/* One pin into pins[] (indexed by table), each message naming its field. */
static int pin_in(const Shardd__V1__Pin *pin, size_t i,
                  const struct name_idx *index, size_t ntables,
                  const struct topology *t, int32_t *pins, struct sd_diag *d)
{
    const char *name = str_or_empty(pin->table);
    int64_t k = find_table(index, ntables, name);

    if (k < 0)
        return sd_diag_set(d, SD_EINVAL,
                           "options.constraints.pins[%zu]: table \"%.200s\" "
                           "is not in tables",
                           i, name);
    if (pins[k] >= 0)
        return sd_diag_set(d, SD_EINVAL,
                           "options.constraints.pins[%zu]: table \"%s\" is "
                           "pinned twice",
                           i, name);
    if (pin->device < 0 || pin->device >= t->ndevices)
        return sd_diag_set(d, SD_EINVAL,
                           "options.constraints.pins[%zu]: device %d is not "
                           "in [0, %d)",
                           i, (int)pin->device, (int)t->ndevices);
    pins[k] = pin->device;
    return 0;
}

/*
 * Constraints.pins to one device (or -1) per table: *out, owned by the
 * caller, stays NULL when nothing is pinned.
 */
static int pins_in(const Shardd__V1__Constraints *in,
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
    for (i = 0; i < in->n_pins && rv == 0; i++)
        rv = pin_in(in->pins[i], i, index, ntables, t, pins, d);
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
 * compute_kernels and cache_load_factor of TableConstraint i into c: the
 * tiers (1 << enum table_tier each; none: any) and the load factor (0: the
 * tier pass chooses).
 */
static int constraint_tiers_in(const Shardd__V1__TableConstraint *tc, size_t i,
                               struct table_constraint *c, struct sd_diag *d)
{
    double lf = tc->cache_load_factor;
    float f = (float)lf;
    size_t j;

    for (j = 0; j < tc->n_compute_kernels; j++) {
        uint8_t tier = wire_tier_in(tc->compute_kernels[j]);

        if (tc->compute_kernels[j] ==
                SHARDD__V1__COMPUTE_KERNEL__COMPUTE_KERNEL_UNSPECIFIED ||
            tier >= TIER_COUNT)
            return sd_diag_set(d, SD_EINVAL,
                               "options.constraints.tables[%zu]."
                               "compute_kernels[%zu]: %d is not a "
                               "ComputeKernel (FUSED, FUSED_UVM or "
                               "FUSED_UVM_CACHING)",
                               i, j, (int)tc->compute_kernels[j]);
        c->tiers |= 1u << tier;
    }
    if (lf == 0)
        return 0;
    /* In (0, 1) as the float it is kept in, too. */
    if (!(lf > 0 && lf < 1 && f > 0 && f < 1))
        return sd_diag_set(d, SD_EINVAL,
                           "options.constraints.tables[%zu].cache_load_"
                           "factor: %g is not in (0, 1) (the share of the "
                           "table's rows cached in HBM; 0 lets the tier pass "
                           "choose)",
                           i, lf);
    if (c->tiers != 0 && !(c->tiers & (1u << TIER_UVM_CACHING)))
        return sd_diag_set(d, SD_EINVAL,
                           "options.constraints.tables[%zu].cache_load_"
                           "factor: %g, but compute_kernels leave out "
                           "FUSED_UVM_CACHING: add it, or leave "
                           "cache_load_factor 0",
                           i, lf);
    c->cache_load_factor = f;
    return 0;
}

/* One TableConstraint into cons[] (by its table's index). */
static int constraint_in(const Shardd__V1__TableConstraint *tc, size_t i,
                         const struct name_idx *index, size_t ntables,
                         const bool *seen, struct table_constraint *cons,
                         size_t *at, struct sd_diag *d)
{
    const char *name = str_or_empty(tc->table);
    int64_t k = find_table(index, ntables, name);
    struct table_constraint c = {.host = -1};
    size_t j;
    int rv;

    if (k < 0)
        return sd_diag_set(d, SD_EINVAL,
                           "options.constraints.tables[%zu]: table \"%.200s\" "
                           "is not in tables",
                           i, name);
    if (seen[k])
        return sd_diag_set(d, SD_EINVAL,
                           "options.constraints.tables[%zu]: table \"%s\" has "
                           "a constraint already",
                           i, name);
    for (j = 0; j < tc->n_schemes; j++) {
        enum plan_scheme sc;

        if (tc->schemes[j] == SHARDD__V1__SCHEME__SCHEME_UNSPECIFIED ||
            wire_scheme_in(tc->schemes[j], &sc) != 0)
            return sd_diag_set(d, SD_EINVAL,
                               "options.constraints.tables[%zu].schemes[%zu]: "
                               "%d is not a Scheme",
                               i, j, (int)tc->schemes[j]);
        c.schemes |= 1u << sc;
    }
    rv = constraint_tiers_in(tc, i, &c, d);
    if (rv != 0)
        return rv;
    c.min_row_shards = tc->min_row_shards;
    c.no_split = tc->no_split;
    if (tc->pin_host)
        c.host = tc->host < 0 ? -2 : tc->host; /* -2: refused as out of range */
    cons[k] = c;
    *at = (size_t)k;
    return 0;
}

/*
 * Constraints.tables to one constraint per table (none: {0, 0, false,
 * -1}): *out, owned by the caller, stays NULL when there are none.
 */
static int constraints_in(const Shardd__V1__Constraints *in,
                          const struct table *tables, size_t ntables,
                          struct table_constraint **out, struct sd_diag *d)
{
    struct table_constraint *cons;
    struct name_idx *index;
    bool *seen;
    size_t i, k = 0;
    int rv = 0;

    *out = NULL;
    if (in == NULL || in->n_tables == 0)
        return 0;
    index = name_index(tables, ntables);
    cons = malloc((ntables ? ntables : 1) * sizeof(*cons));
    seen = calloc(ntables ? ntables : 1, sizeof(*seen));
    if (index == NULL || cons == NULL || seen == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_free;
    }
    for (i = 0; i < ntables; i++)
        cons[i] = (struct table_constraint){.host = -1};
    for (i = 0; i < in->n_tables && rv == 0; i++) {
        rv = constraint_in(in->tables[i], i, index, ntables, seen, cons, &k, d);
        if (rv == 0)
            seen[k] = true;
    }
    if (rv == 0) {
        *out = cons;
        cons = NULL;
    }
out_free:
    free(seen);
    free(cons);
    free(index);
    return rv;
}

int wire_options_in(const struct wire_limits *l,
                    const Shardd__V1__PlanOptions *in,
                    const struct table *tables, size_t n,
                    const struct topology *t, struct plan_options *o,
                    int32_t **pins, struct table_constraint **cons,
                    struct sd_diag *d)
{
    int rv;

    *pins = NULL;
    *cons = NULL;
    plan_options_default(o);
    o->alg = PLAN_ALG_NEUROSHARD;
    o->threads = l->search_threads;
    o->time_budget_ms = l->default_budget_ms;
    o->column_splits = true; /* unset options mean the defaults */
    if (in == NULL)
        return 0;
    if (in->algorithm != NULL && in->algorithm[0] != '\0') {
        struct sd_diag why;

        if (plan_alg_parse(in->algorithm, &o->alg, &why) != 0)
            return sd_diag_set(d, SD_EINVAL, "options.algorithm: %s", why.msg);
    }
    o->column_splits = !in->whole_tables_only;
    if (in->time_budget_ms > l->max_budget_ms)
        return sd_diag_set(d, SD_ERANGE,
                           "options.time_budget_ms: %u is over this server's "
                           "limit of %.0f",
                           (unsigned)in->time_budget_ms, l->max_budget_ms);
    if (in->time_budget_ms != 0)
        o->time_budget_ms = in->time_budget_ms;
    if (in->quantile != NULL &&
        !(in->quantile->value >= 0 && in->quantile->value <= 1))
        return sd_diag_set(d, SD_EINVAL,
                           "options.quantile.value: %g is outside [0, 1] "
                           "(0.5 is the ensemble's median; leave quantile "
                           "unset for the model's own prediction)",
                           in->quantile->value);
    o->seed = in->seed;
    rv =
        wire_optimizer_in(in->optimizer, "options.optimizer", &o->optimizer, d);
    if (rv == 0)
        rv = pins_in(in->constraints, tables, n, t, pins, d);
    /* Whether they fit is a fact of this field, named here. */
    if (rv == 0)
        rv = plan_check_pins_as(tables, n, t, *pins, o->optimizer,
                                "options.constraints.pins", d);
    if (rv == 0)
        rv = constraints_in(in->constraints, tables, n, cons, d);
    /* Its messages index the request's tables (a table's constraint may
     * merge TorchRec's with ours): "options.constraints for tables[3]". */
    if (rv == 0)
        rv = plan_check_constraints(tables, n, t, *pins, *cons,
                                    "options.constraints for tables", d);
    o->pins = *pins;
    o->constraints = *cons;
    return rv;
}

Shardd__V1__Constraints *wire_pins_out(struct wire_arena *a,
                                       const int32_t *pins,
                                       const struct table *tables, size_t n)
{
    Shardd__V1__Constraints *c = wire_alloc(a, 1, sizeof(*c));
    Shardd__V1__Pin *msgs = wire_alloc(a, n, sizeof(*msgs));
    Shardd__V1__Pin **ptrs = wire_alloc(a, n, sizeof(*ptrs));
    size_t i;

    if (c == NULL || msgs == NULL || ptrs == NULL)
        return NULL;
    shardd__v1__constraints__init(c);
    c->pins = ptrs;
    for (i = 0; i < n; i++) {
        Shardd__V1__Pin *pin = &msgs[c->n_pins];

        if (pins[i] < 0)
            continue;
        shardd__v1__pin__init(pin);
        pin->table = msg_str(tables[i].name);
        pin->device = pins[i];
        ptrs[c->n_pins++] = pin;
    }
    return c;
}

/* ---------------------------------------------------------------------- */
/* Placements                                                              */

uint8_t wire_tier_in(Shardd__V1__ComputeKernel k)
{
    switch (k) {
    case SHARDD__V1__COMPUTE_KERNEL__COMPUTE_KERNEL_UNSPECIFIED:
    case SHARDD__V1__COMPUTE_KERNEL__COMPUTE_KERNEL_FUSED:
        return TIER_HBM;
    case SHARDD__V1__COMPUTE_KERNEL__COMPUTE_KERNEL_FUSED_UVM:
        return TIER_UVM;
    case SHARDD__V1__COMPUTE_KERNEL__COMPUTE_KERNEL_FUSED_UVM_CACHING:
        return TIER_UVM_CACHING;
    default:
        return TIER_COUNT; /* plan_validate() refuses it */
    }
}

Shardd__V1__ComputeKernel wire_tier_out(uint8_t tier)
{
    switch (tier) {
    case TIER_UVM:
        return SHARDD__V1__COMPUTE_KERNEL__COMPUTE_KERNEL_FUSED_UVM;
    case TIER_UVM_CACHING:
        return SHARDD__V1__COMPUTE_KERNEL__COMPUTE_KERNEL_FUSED_UVM_CACHING;
    default:
        /* fused: left unspecified, as before tiers, which reads as fused */
        return SHARDD__V1__COMPUTE_KERNEL__COMPUTE_KERNEL_UNSPECIFIED;
    }
}

int wire_scheme_in(Shardd__V1__Scheme in, enum plan_scheme *out)
{
    switch (in) {
    case SHARDD__V1__SCHEME__SCHEME_UNSPECIFIED:
    case SHARDD__V1__SCHEME__SCHEME_TABLE_WISE:
        *out = SCHEME_TW;
        return 0;
    case SHARDD__V1__SCHEME__SCHEME_COLUMN_WISE:
        *out = SCHEME_CW;
        return 0;
    case SHARDD__V1__SCHEME__SCHEME_ROW_WISE:
        *out = SCHEME_RW;
        return 0;
    case SHARDD__V1__SCHEME__SCHEME_TABLE_ROW_WISE:
        *out = SCHEME_TWRW;
        return 0;
    case SHARDD__V1__SCHEME__SCHEME_GRID_SHARD:
        *out = SCHEME_GRID;
        return 0;
    case SHARDD__V1__SCHEME__SCHEME_DATA_PARALLEL:
        *out = SCHEME_DP;
        return 0;
    default:
        return SD_EINVAL;
    }
}

Shardd__V1__Scheme wire_scheme_out(enum plan_scheme s)
{
    static const Shardd__V1__Scheme out[SCHEME_COUNT] = {
        [SCHEME_TW] = SHARDD__V1__SCHEME__SCHEME_TABLE_WISE,
        [SCHEME_CW] = SHARDD__V1__SCHEME__SCHEME_COLUMN_WISE,
        [SCHEME_RW] = SHARDD__V1__SCHEME__SCHEME_ROW_WISE,
        [SCHEME_TWRW] = SHARDD__V1__SCHEME__SCHEME_TABLE_ROW_WISE,
        [SCHEME_GRID] = SHARDD__V1__SCHEME__SCHEME_GRID_SHARD,
        [SCHEME_DP] = SHARDD__V1__SCHEME__SCHEME_DATA_PARALLEL,
    };

    return (unsigned)s < SCHEME_COUNT ? out[s]
                                      : SHARDD__V1__SCHEME__SCHEME_UNSPECIFIED;
}

/* The shards of one TablePlacement (table idx) into p. */
static int shards_in(const char *field, size_t i,
                     const Shardd__V1__TablePlacement *tp,
                     const struct table *t, uint32_t idx, int32_t ndev,
                     struct plan *p, struct sd_diag *d)
{
    enum plan_scheme sc;
    size_t k;

    if (wire_scheme_in(tp->scheme, &sc) != 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s[%zu] \"%s\": scheme %d is not a Scheme", field,
                           i, t->name, (int)tp->scheme);
    for (k = 0; k < tp->n_shards; k++) {
        const Shardd__V1__Shard *sh = tp->shards[k];
        struct shard s = {.table = idx,
                          .device = sh->device,
                          .col_offset = sh->col_offset,
                          .col_width = sh->col_width,
                          .row_offset = sh->row_offset,
                          .row_count = sh->row_count,
                          .scheme = (uint8_t)sc,
                          .tier = wire_tier_in(sh->compute_kernel),
                          .cache_load_factor = (float)sh->cache_load_factor};

        /* Every row, given as a count, is every row: one form for both. */
        if (s.row_offset == 0 && s.row_count == t->rows)
            s.row_count = 0;

        if (sh->device < 0 || sh->device >= ndev)
            return sd_diag_set(d, SD_EINVAL,
                               "%s[%zu] \"%s\": shards[%zu]: device %d is not "
                               "in [0, %d)",
                               field, i, t->name, k, (int)sh->device,
                               (int)ndev);
        /* Bounds first: the planner's column check adds widths. */
        if (sh->col_offset < 0 || sh->col_width <= 0 ||
            (int64_t)sh->col_offset + sh->col_width > t->dim)
            return sd_diag_set(d, SD_EINVAL,
                               "%s[%zu] \"%s\": shards[%zu]: columns [%d, "
                               "%lld) are outside the table's %d",
                               field, i, t->name, k, (int)sh->col_offset,
                               (long long)sh->col_offset + sh->col_width,
                               (int)t->dim);
        if (sh->row_offset < 0 || sh->row_count < 0 ||
            sh->row_offset > t->rows ||
            sh->row_count > t->rows - sh->row_offset)
            return sd_diag_set(d, SD_EINVAL,
                               "%s[%zu] \"%s\": shards[%zu]: rows from %lld "
                               "(%lld of them) are outside the table's %lld",
                               field, i, t->name, k, (long long)sh->row_offset,
                               (long long)sh->row_count, (long long)t->rows);
        if (plan_add_shard(p, &s) != 0)
            return sd_diag_set(d, SD_ENOMEM, "out of memory");
    }
    return 0;
}

int wire_placement_in(const char *field, Shardd__V1__TablePlacement *const *in,
                      size_t nin, const struct table *tables, size_t n,
                      int32_t ndev, struct plan *p, struct sd_diag *d)
{
    struct name_idx *index;
    const char *name;
    int64_t idx;
    bool *seen;
    size_t i;
    int rv;

    if (nin != n)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: %zu entries for %zu tables (one per table is "
                           "needed)",
                           field, nin, n);
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
    for (i = 0; i < nin && rv == 0; i++) {
        name = str_or_empty(in[i]->table);
        idx = find_table(index, n, name);
        if (idx < 0)
            rv = sd_diag_set(d, SD_EINVAL,
                             "%s[%zu]: table \"%.200s\" is not in tables",
                             field, i, name);
        else if (seen[idx])
            rv = sd_diag_set(d, SD_EINVAL,
                             "%s[%zu]: table \"%s\" is placed twice", field, i,
                             name);
        else
            rv = shards_in(field, i, in[i], &tables[idx], (uint32_t)idx, ndev,
                           p, d);
        if (rv == 0)
            seen[idx] = true;
    }
    if (rv != 0)
        plan_destroy(p);
    else
        plan_sort(p);
out_free:
    free(seen);
    free(index);
    return rv;
}

Shardd__V1__TablePlacement **wire_placements_out(struct wire_arena *a,
                                                 const struct plan *p,
                                                 const struct table *tables,
                                                 size_t n)
{
    Shardd__V1__TablePlacement *tps = wire_alloc(a, n, sizeof(*tps));
    Shardd__V1__TablePlacement **tp_ptrs = wire_alloc(a, n, sizeof(*tp_ptrs));
    Shardd__V1__Shard *shards = wire_alloc(a, p->nshards, sizeof(*shards));
    Shardd__V1__Shard **sh_ptrs = wire_alloc(a, p->nshards, sizeof(*sh_ptrs));
    size_t i, k = 0;

    if (!tps || !tp_ptrs || !shards || !sh_ptrs)
        return NULL;
    for (i = 0; i < n; i++) {
        Shardd__V1__TablePlacement *tp = &tps[i];

        shardd__v1__table_placement__init(tp);
        tp->table = msg_str(tables[i].name);
        tp->shards = &sh_ptrs[k];
        if (k < p->nshards && p->shards[k].table == i)
            tp->scheme = wire_scheme_out(plan_table_scheme(p, k));
        for (; k < p->nshards && p->shards[k].table == i; k++) {
            Shardd__V1__Shard *sh = &shards[k];

            shardd__v1__shard__init(sh);
            sh->device = p->shards[k].device;
            sh->col_offset = p->shards[k].col_offset;
            sh->col_width = p->shards[k].col_width;
            sh->row_offset = p->shards[k].row_offset;
            sh->row_count = shard_rows(&tables[i], &p->shards[k]);
            sh->compute_kernel = wire_tier_out(p->shards[k].tier);
            sh->cache_load_factor = tier_load_factor(&p->shards[k]);
            sh_ptrs[k] = sh;
            tp->n_shards++;
        }
        tp_ptrs[i] = tp;
    }
    return tp_ptrs;
}

/* ---------------------------------------------------------------------- */
/* Devices, costs and the explanation                                      */

Shardd__V1__DeviceCost **wire_devices_out(struct wire_arena *a,
                                          const struct plan *p,
                                          const struct topology *t)
{
    size_t n = (size_t)p->ndevices, r;
    Shardd__V1__DeviceCost *msgs = wire_alloc(a, n, sizeof(*msgs));
    Shardd__V1__DeviceCost **ptrs = wire_alloc(a, n, sizeof(*ptrs));
    uint64_t *host = wire_alloc(a, n, sizeof(*host));
    size_t per = t->devices_per_host > 0 ? (size_t)t->devices_per_host : n;

    if (msgs == NULL || ptrs == NULL || host == NULL)
        return NULL;
    memset(host, 0, n * sizeof(*host));
    for (r = 0; r < n; r++)
        host[r / per] += p->devices[r].ddr_bytes;
    for (r = 0; r < n; r++) {
        Shardd__V1__DeviceCost *m = &msgs[r];
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
        m->ddr_bytes = dv->ddr_bytes;
        m->host_ddr_bytes = host[r / per];
        m->host_ddr_capacity_bytes = t->host_dram_bytes;
        m->tier_ms = dv->tier_ms;
        ptrs[r] = m;
    }
    return ptrs;
}

void wire_devices_in(struct plan *p, Shardd__V1__DeviceCost *const *devs,
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
        dv->ddr_bytes = devs[r]->ddr_bytes;
        dv->tier_ms = devs[r]->tier_ms;
    }
}

void wire_basis_in(struct plan *p, const Shardd__V1__CostBasis *b)
{
    p->cost_model[0] = '\0';
    p->comm_model = "";
    if (b == NULL)
        return;
    snprintf(p->cost_model, sizeof(p->cost_model), "%s",
             str_or_empty(b->cost_model));
    p->comm_model = str_or_empty(b->comm_model);
}

Shardd__V1__Explanation *wire_explanation_out(struct wire_arena *a,
                                              const struct plan *p,
                                              const struct table *tables)
{
    Shardd__V1__Explanation *ex = wire_alloc(a, 1, sizeof(*ex));
    char **names = wire_alloc(a, WIRE_BOTTLENECK_MAX, sizeof(*names));
    int32_t i;
    size_t k;

    if (ex == NULL || names == NULL)
        return NULL;
    shardd__v1__explanation__init(ex);
    ex->bottleneck_device = p->explain.critical_device;
    ex->bottleneck_tables = names;
    for (i = 0; i < p->explain.ndrivers; i++) {
        const char *name = tables[p->shards[p->explain.drivers[i]].table].name;

        for (k = 0; k < ex->n_bottleneck_tables; k++)
            if (strcmp(names[k], name) == 0)
                break;
        if (k == ex->n_bottleneck_tables &&
            ex->n_bottleneck_tables < WIRE_BOTTLENECK_MAX)
            names[ex->n_bottleneck_tables++] = msg_str(name);
    }
    ex->lower_bound_ms = p->explain.lower_bound_ms;
    ex->gap_ratio = p->explain.lower_bound_ms > 0 ? p->explain.gap : 0;
    if (p->nnotes > 0) {
        ex->notes = wire_alloc(a, (size_t)p->nnotes, sizeof(*ex->notes));
        if (ex->notes == NULL)
            return NULL;
        for (i = 0; i < p->nnotes; i++)
            ex->notes[ex->n_notes++] = msg_str(p->notes[i]);
    }
    return ex;
}

/* ---------------------------------------------------------------------- */
/* A PlanResponse back into a plan                                         */

/* The explanation: the bottleneck tables' shards on that device, in the
 * response's order (costliest first). */
static void explanation_in(const Shardd__V1__Explanation *ex,
                           const struct name_idx *index, size_t n, int32_t ndev,
                           struct plan *p)
{
    size_t i, k;
    int64_t t;

    p->explain.critical_device = -1;
    for (i = 0; ex != NULL && i < ex->n_notes; i++)
        plan_note(p, "%s", str_or_empty(ex->notes[i]));
    if (ex == NULL || ex->bottleneck_device < 0 ||
        ex->bottleneck_device >= ndev)
        return;
    p->explain.critical_device = ex->bottleneck_device;
    p->explain.lower_bound_ms = ex->lower_bound_ms;
    p->explain.gap = ex->gap_ratio;
    for (i = 0;
         i < ex->n_bottleneck_tables && p->explain.ndrivers < PLAN_DRIVERS_MAX;
         i++) {
        t = find_table(index, n, str_or_empty(ex->bottleneck_tables[i]));
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

int wire_plan_response_in(const Shardd__V1__PlanResponse *r,
                          const struct table *tables, size_t n, int32_t ndev,
                          struct plan *p, struct sd_diag *d)
{
    struct name_idx *index;
    enum plan_alg alg;
    struct sd_diag why;
    int rv;

    if (r->n_devices != (size_t)ndev)
        return sd_diag_set(d, SD_EFORMAT,
                           "the response has %zu devices, not %d", r->n_devices,
                           (int)ndev);
    rv = wire_placement_in("response.tables", r->tables, r->n_tables, tables, n,
                           ndev, p, d);
    if (rv != 0)
        return rv == SD_ENOMEM ? rv : SD_EFORMAT;
    index = name_index(tables, n);
    if (index == NULL) {
        plan_destroy(p);
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    }
    wire_devices_in(p, r->devices, r->n_devices);
    p->cost_ms = r->plan_cost_ms;
    /* A static name where the client knows it, the response's otherwise. */
    p->algorithm = str_or_empty(r->algorithm);
    if (plan_alg_parse(p->algorithm, &alg, &why) == 0)
        p->algorithm = plan_alg_name(alg);
    wire_basis_in(p, r->basis);
    explanation_in(r->explanation, index, n, ndev, p);
    free(index);
    /* The search's figures: neuroshard's only, as offline. */
    if (r->search != NULL && strcmp(p->algorithm, "neuroshard") == 0) {
        p->stats.search_ms = r->search->search_time_ms;
        p->stats.greedy_runs = (int64_t)r->search->candidates_evaluated;
        /* Not nshards - n: row blocks and replicas are no splits. */
        p->stats.splits = plan_column_splits(p);
        p->stats.budget_exhausted = r->search->time_budget_exhausted;
        p->stats.states = -1;
        p->stats.levels = -1;
        p->stats.moves = -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Prediction spreads                                                        */

Shardd__V1__PredictionSpread *wire_spread_out(struct wire_arena *a,
                                              const struct plan_spread *s)
{
    Shardd__V1__PredictionSpread *o = wire_alloc(a, 1, sizeof(*o));
    int32_t r;

    if (o == NULL)
        return NULL;
    shardd__v1__prediction_spread__init(o);
    o->members = s->members;
    o->plan_cost_low_ms = s->cost_lo;
    o->plan_cost_high_ms = s->cost_hi;
    o->n_devices = (size_t)s->ndevices;
    o->devices = wire_alloc(a, (size_t)s->ndevices, sizeof(*o->devices));
    if (s->ndevices > 0 && o->devices == NULL)
        return NULL;
    for (r = 0; r < s->ndevices; r++) {
        Shardd__V1__ComputeSpread *c = wire_alloc(a, 1, sizeof(*c));

        if (c == NULL)
            return NULL;
        shardd__v1__compute_spread__init(c);
        c->device = r;
        c->low_ms = s->lo[r];
        c->high_ms = s->hi[r];
        o->devices[r] = c;
    }
    return o;
}

int wire_spread_in(const Shardd__V1__PredictionSpread *in, int32_t ndev,
                   struct plan_spread *out, struct sd_diag *d)
{
    size_t r;

    memset(out, 0, sizeof(*out));
    if (in == NULL)
        return 0;
    if (in->members < 2)
        return sd_diag_set(d, SD_EINVAL, "spread.members: %d is not >= 2",
                           (int)in->members);
    if (in->n_devices != (size_t)ndev)
        return sd_diag_set(d, SD_EINVAL,
                           "spread.devices: %zu entries for %d "
                           "devices",
                           in->n_devices, (int)ndev);
    for (r = 0; r < in->n_devices; r++)
        if (in->devices[r]->device != (int32_t)r)
            return sd_diag_set(d, SD_EINVAL,
                               "spread.devices[%zu].device: %d, not %zu", r,
                               (int)in->devices[r]->device, r);
    out->lo =
        malloc(2 * (in->n_devices ? in->n_devices : 1) * sizeof(*out->lo));
    if (out->lo == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    out->hi = out->lo + in->n_devices;
    out->ndevices = ndev;
    out->members = in->members;
    out->cost_lo = in->plan_cost_low_ms;
    out->cost_hi = in->plan_cost_high_ms;
    for (r = 0; r < in->n_devices; r++) {
        out->lo[r] = in->devices[r]->low_ms;
        out->hi[r] = in->devices[r]->high_ms;
    }
    return 0;
}

const char *wire_status_name(int code)
{
    static const char *const names[WIRE_STATUS_CODES] = {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    };

    return code >= 0 && code < WIRE_STATUS_CODES ? names[code] : "UNKNOWN";
}
