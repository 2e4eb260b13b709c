/* Topologies, plans, validation and the algorithm dispatch (planner.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"

#define GIB ((double)(1ull << 30))

/* TorchRec's constants (torchrec_planner.md 1.5): X GiB/s as bytes per ms. */
#define BW_INTRA_HOST (600.0 * GIB / 1000.0)
#define BW_INTER_HOST (12.5 * GIB / 1000.0)
#define BW_DEVICE_MEM (897.0 * GIB / 1000.0)

void topology_default(struct topology *t, int32_t ndevices, uint64_t mem_bytes)
{
    memset(t, 0, sizeof(*t));
    t->ndevices = ndevices;
    t->devices_per_host = ndevices;
    t->mem_bytes = mem_bytes;
    t->batch_size = 65536;
    t->intra_host_bw = BW_INTRA_HOST;
    t->inter_host_bw = BW_INTER_HOST;
    t->link_latency_ms = 0.01;
    t->device_mem_bw = BW_DEVICE_MEM;
}

/* A bandwidth within [TOPO_BW_MIN, TOPO_BW_MAX] (NaN is not). */
static bool sane_bw(double x)
{
    return x >= TOPO_BW_MIN && x <= TOPO_BW_MAX;
}

int topology_validate(const struct topology *t, struct sd_diag *d)
{
    if (t->ndevices < 1 || t->ndevices > TOPO_DEVICES_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           "topology: devices %d is not in [1, %d]",
                           (int)t->ndevices, TOPO_DEVICES_MAX);
    if (t->devices_per_host < 1 || t->devices_per_host > t->ndevices ||
        t->ndevices % t->devices_per_host != 0)
        return sd_diag_set(d, SD_EINVAL,
                           "topology: devices_per_host %d does not divide "
                           "devices %d",
                           (int)t->devices_per_host, (int)t->ndevices);
    if (t->mem_by_device != NULL) {
        int32_t r;

        for (r = 0; r < t->ndevices; r++)
            if (t->mem_by_device[r] == 0)
                return sd_diag_set(d, SD_EINVAL,
                                   "topology: device %d: mem_bytes is 0",
                                   (int)r);
    } else if (t->mem_bytes == 0) {
        return sd_diag_set(d, SD_EINVAL, "topology: mem_bytes is 0");
    }
    if (t->batch_size < t->ndevices || t->batch_size > (int64_t)1 << 30)
        return sd_diag_set(d, SD_EINVAL,
                           "topology: batch_size %lld is not in [devices, "
                           "2^30]",
                           (long long)t->batch_size);
    if (!sane_bw(t->intra_host_bw) || !sane_bw(t->inter_host_bw) ||
        !sane_bw(t->device_mem_bw))
        return sd_diag_set(d, SD_EINVAL,
                           "topology: intra_host_bw %g, inter_host_bw %g, "
                           "device_mem_bw %g: each must be in [%g, %g] "
                           "bytes/ms",
                           t->intra_host_bw, t->inter_host_bw, t->device_mem_bw,
                           TOPO_BW_MIN, TOPO_BW_MAX);
    if (!(t->link_latency_ms >= 0 && t->link_latency_ms <= TOPO_LATENCY_MAX))
        return sd_diag_set(d, SD_EINVAL,
                           "topology: link_latency_ms %g is not in [0, %g]",
                           t->link_latency_ms, TOPO_LATENCY_MAX);
    return 0;
}

uint64_t topology_mem_max(const struct topology *t)
{
    uint64_t m = 0;
    int32_t r;

    if (t->mem_by_device == NULL)
        return t->mem_bytes;
    for (r = 0; r < t->ndevices; r++)
        if (t->mem_by_device[r] > m)
            m = t->mem_by_device[r];
    return m;
}

static const char *const optimizer_names[] = {
    [OPTIMIZER_SGD] = "sgd",
    [OPTIMIZER_ADAGRAD] = "adagrad",
    [OPTIMIZER_ROWWISE_ADAGRAD] = "rowwise_adagrad",
    [OPTIMIZER_ADAM] = "adam",
};

int optimizer_parse(const char *s, enum optimizer *out)
{
    size_t i;

    for (i = 0; i < sizeof(optimizer_names) / sizeof(optimizer_names[0]); i++) {
        if (strcmp(s, optimizer_names[i]) == 0) {
            *out = (enum optimizer)i;
            return 0;
        }
    }
    return SD_EINVAL;
}

const char *optimizer_name(enum optimizer o)
{
    return (unsigned)o < sizeof(optimizer_names) / sizeof(optimizer_names[0])
               ? optimizer_names[o]
               : "unknown";
}

int32_t table_split_levels(int32_t dim)
{
    int32_t levels = 1;

    while (dim > 0 && dim % (2 * TABLE_DIM_ALIGN) == 0) {
        dim /= 2;
        levels++;
    }
    return levels;
}

uint64_t shard_bytes(const struct table *t, int32_t cols, enum optimizer opt)
{
    uint64_t w = table_bytes(t, cols);

    switch (opt) {
    case OPTIMIZER_ADAGRAD:
        return 2 * w;
    case OPTIMIZER_ROWWISE_ADAGRAD:
        return w + (uint64_t)t->rows * table_dtype_size(t->dtype);
    case OPTIMIZER_ADAM:
        return 3 * w;
    case OPTIMIZER_SGD:
    default:
        return w;
    }
}

int plan_init(struct plan *p, int32_t ndevices)
{
    memset(p, 0, sizeof(*p));
    p->devices = calloc((size_t)ndevices, sizeof(*p->devices));
    if (p->devices == NULL)
        return SD_ENOMEM;
    p->ndevices = ndevices;
    p->algorithm = "";
    p->comm_model = "";
    p->explain.critical_device = -1;
    return 0;
}

void plan_destroy(struct plan *p)
{
    if (p == NULL)
        return;
    free(p->shards);
    free(p->devices);
    memset(p, 0, sizeof(*p));
}

int plan_add(struct plan *p, uint32_t table, int32_t device, int32_t col_offset,
             int32_t col_width)
{
    struct shard *s;

    if (p->nshards == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;

        s = realloc(p->shards, cap * sizeof(*s));
        if (s == NULL)
            return SD_ENOMEM;
        p->shards = s;
        p->cap = cap;
    }
    s = &p->shards[p->nshards++];
    s->table = table;
    s->device = device;
    s->col_offset = col_offset;
    s->col_width = col_width;
    return 0;
}

static int cmp_shard(const void *a, const void *b)
{
    const struct shard *x = a, *y = b;

    if (x->table != y->table)
        return x->table < y->table ? -1 : 1;
    if (x->col_offset != y->col_offset)
        return x->col_offset < y->col_offset ? -1 : 1;
    return (x->device > y->device) - (x->device < y->device);
}

void plan_sort(struct plan *p)
{
    if (p->nshards > 1)
        qsort(p->shards, p->nshards, sizeof(*p->shards), cmp_shard);
}

/* Checks that the sorted shards of table i tile [0, dim) exactly; *pos is
 * the first shard of table i and is advanced past its shards. */
static int check_columns(const struct plan *p, size_t *pos, uint32_t i,
                         const struct table *t, const char *what,
                         struct sd_diag *d)
{
    int32_t next = 0;
    size_t k = *pos;

    for (; k < p->nshards && p->shards[k].table == i; k++) {
        const struct shard *s = &p->shards[k];

        if (s->col_offset != next)
            return sd_diag_set(
                d, SD_EINVAL, "%s: table \"%s\": columns [%d, %d) %s", what,
                t->name, (int)next, (int)s->col_offset,
                s->col_offset > next ? "are not placed" : "are placed twice");
        next += s->col_width;
    }
    if (next != t->dim)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: table \"%s\": %d of %d columns placed", what,
                           t->name, (int)next, (int)t->dim);
    *pos = k;
    return 0;
}

int plan_validate(struct plan *p, const struct table *tables, size_t ntables,
                  const struct topology *t, enum optimizer opt,
                  struct sd_diag *d)
{
    return plan_validate_as(p, tables, ntables, t, opt, "plan", d);
}

int plan_validate_as(struct plan *p, const struct table *tables, size_t ntables,
                     const struct topology *t, enum optimizer opt,
                     const char *what, struct sd_diag *d)
{
    uint64_t *used;
    size_t k, pos = 0;
    uint32_t i;
    int rv = 0;

    for (k = 0; k < p->nshards; k++) {
        const struct shard *s = &p->shards[k];

        if (s->table >= ntables)
            return sd_diag_set(d, SD_EINVAL,
                               "%s: shards[%zu]: table %u does not exist", what,
                               k, (unsigned)s->table);
        if (s->device < 0 || s->device >= t->ndevices)
            return sd_diag_set(d, SD_EINVAL,
                               "%s: table \"%s\": device %d is not in "
                               "[0, %d)",
                               what, tables[s->table].name, (int)s->device,
                               (int)t->ndevices);
        if (s->col_width <= 0 || s->col_width % TABLE_DIM_ALIGN != 0 ||
            s->col_offset < 0 || s->col_offset % TABLE_DIM_ALIGN != 0)
            return sd_diag_set(d, SD_EINVAL,
                               "%s: table \"%s\": shard at column %d of "
                               "width %d is not aligned to %d columns",
                               what, tables[s->table].name, (int)s->col_offset,
                               (int)s->col_width, TABLE_DIM_ALIGN);
        /* Checked here, in 64 bits, so that summing widths cannot overflow
         * whatever a plan file says. */
        if ((int64_t)s->col_offset + s->col_width > tables[s->table].dim)
            return sd_diag_set(d, SD_EINVAL,
                               "%s: table \"%s\": shard at column %d of "
                               "width %d runs past its %d columns",
                               what, tables[s->table].name, (int)s->col_offset,
                               (int)s->col_width, (int)tables[s->table].dim);
    }
    plan_sort(p);
    for (i = 0; i < ntables; i++) {
        rv = check_columns(p, &pos, i, &tables[i], what, d);
        if (rv != 0)
            return rv;
    }

    used = calloc((size_t)t->ndevices, sizeof(*used));
    if (used == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    for (k = 0; k < p->nshards; k++) {
        const struct shard *s = &p->shards[k];

        uint64_t cap = topology_mem(t, s->device);

        used[s->device] += shard_bytes(&tables[s->table], s->col_width, opt);
        if (used[s->device] > cap) {
            rv = sd_diag_set(d, SD_ENOSPACE,
                             "%s: device %d: %llu bytes placed, capacity "
                             "%llu (over by %llu at table \"%s\")",
                             what, (int)s->device,
                             (unsigned long long)used[s->device],
                             (unsigned long long)cap,
                             (unsigned long long)(used[s->device] - cap),
                             tables[s->table].name);
            break;
        }
    }
    free(used);
    return rv;
}

static const char *const alg_names[PLAN_ALG_COUNT] = {
    [PLAN_ALG_RANDOM] = "random",
    [PLAN_ALG_DIM_GREEDY] = "dim_greedy",
    [PLAN_ALG_SIZE_GREEDY] = "size_greedy",
    [PLAN_ALG_LOOKUP_GREEDY] = "lookup_greedy",
    [PLAN_ALG_SIZE_LOOKUP_GREEDY] = "size_lookup_greedy",
    [PLAN_ALG_TORCHREC_GREEDY] = "torchrec_greedy",
    [PLAN_ALG_NEUROSHARD] = "neuroshard",
};

void plan_options_default(struct plan_options *o)
{
    memset(o, 0, sizeof(*o));
    o->alg = PLAN_ALG_SIZE_LOOKUP_GREEDY;
    o->optimizer = OPTIMIZER_SGD;
    o->column_splits = true;
    o->local_search = true;
    o->beam_width = 3;
    o->beam_depth = 10;
    o->candidates = 10;
}

int plan_alg_parse(const char *s, enum plan_alg *out, struct sd_diag *d)
{
    char known[256] = "";
    size_t len = 0;
    int i;

    for (i = 0; i < PLAN_ALG_COUNT; i++) {
        if (strcmp(s, alg_names[i]) == 0) {
            *out = (enum plan_alg)i;
            return 0;
        }
    }
    for (i = 0; i < PLAN_ALG_COUNT; i++)
        len += (size_t)snprintf(known + len, sizeof(known) - len, "%s%s",
                                i ? ", " : "", alg_names[i]);
    return sd_diag_set(d, SD_EINVAL, "algorithm \"%s\" is unknown (known: %s)",
                       s, known);
}

const char *plan_alg_name(enum plan_alg a)
{
    return (unsigned)a < PLAN_ALG_COUNT ? alg_names[a] : "unknown";
}

int plan_check_inputs(const struct table *tables, size_t ntables,
                      const struct topology *t, struct sd_diag *d)
{
    int rv;

    rv = table_validate_all(tables, ntables, d);
    if (rv != 0)
        return rv;
    rv = topology_validate(t, d);
    if (rv != 0)
        return rv;
    if (ntables > UINT32_MAX)
        return sd_diag_set(d, SD_EINVAL, "tables: too many (%zu)", ntables);
    return 0;
}

int plan_check_pins(const struct table *tables, size_t ntables,
                    const struct topology *t, const int32_t *pins,
                    enum optimizer opt, struct sd_diag *d)
{
    return plan_check_pins_as(tables, ntables, t, pins, opt, "pins", d);
}

int plan_check_pins_as(const struct table *tables, size_t ntables,
                       const struct topology *t, const int32_t *pins,
                       enum optimizer opt, const char *field, struct sd_diag *d)
{
    uint64_t *used;
    size_t i;
    int rv = 0;

    if (pins == NULL)
        return 0;
    used = calloc((size_t)t->ndevices, sizeof(*used));
    if (used == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    for (i = 0; i < ntables && rv == 0; i++) {
        int32_t r = pins[i];
        uint64_t cap;

        if (r == -1)
            continue;
        if (r < 0 || r >= t->ndevices) {
            rv = sd_diag_set(d, SD_EINVAL,
                             "%s: table \"%s\": device %d is not in "
                             "[0, %d)",
                             field, tables[i].name, (int)r, (int)t->ndevices);
            break;
        }
        cap = topology_mem(t, r);
        used[r] += shard_bytes(&tables[i], tables[i].dim, opt);
        if (used[r] > cap)
            rv = sd_diag_set(
                d, SD_ENOSPACE,
                "%s: device %d: the tables pinned to it need "
                "%llu bytes up to table \"%s\", %llu more than "
                "its capacity of %llu",
                field, (int)r, (unsigned long long)used[r], tables[i].name,
                (unsigned long long)(used[r] - cap), (unsigned long long)cap);
    }
    free(used);
    return rv;
}

/* Whether every pinned table is one whole shard on its device (p sorted). */
static bool pins_kept(const struct plan *p, const struct table *tables,
                      const int32_t *pins)
{
    size_t k;

    if (pins == NULL)
        return true;
    for (k = 0; k < p->nshards; k++) {
        const struct shard *s = &p->shards[k];

        if (pins[s->table] >= 0 &&
            (s->device != pins[s->table] || s->col_offset != 0 ||
             s->col_width != tables[s->table].dim))
            return false;
    }
    return true;
}

int plan_run(const struct table *tables, size_t ntables,
             const struct topology *t, const struct plan_options *o,
             const struct cost_model *m, struct plan *out, struct sd_diag *d)
{
    struct plan p;
    int rv;

    rv = plan_check_inputs(tables, ntables, t, d);
    if (rv != 0)
        return rv;

    switch (o->alg) {
    case PLAN_ALG_TORCHREC_GREEDY:
        rv = plan_torchrec_greedy(tables, ntables, t, o->optimizer, o->pins, &p,
                                  d);
        break;
    case PLAN_ALG_RANDOM:
    case PLAN_ALG_DIM_GREEDY:
    case PLAN_ALG_SIZE_GREEDY:
    case PLAN_ALG_LOOKUP_GREEDY:
    case PLAN_ALG_SIZE_LOOKUP_GREEDY:
        rv = plan_baseline(tables, ntables, t, o, &p, d);
        break;
    case PLAN_ALG_NEUROSHARD:
        rv = plan_neuroshard(tables, ntables, t, o, &p, d);
        break;
    default:
        return sd_diag_set(d, SD_EINVAL, "algorithm %d is unknown",
                           (int)o->alg);
    }
    if (rv != 0)
        return rv;
    p.algorithm = plan_alg_name(o->alg);

    /* Every algorithm's output is checked before anyone sees it: a plan
     * that drops a column or overfills a device is a bug, not a result. */
    rv = plan_validate(&p, tables, ntables, t, o->optimizer, d);
    if (rv == 0 && !pins_kept(&p, tables, o->pins))
        rv = sd_diag_set(d, SD_EINVAL, "%s: a pinned table was moved or split",
                         p.algorithm);
    if (rv == 0)
        rv = plan_evaluate(&p, tables, ntables, t, o->optimizer, m);
    if (rv == 0)
        rv = plan_explain(&p, tables, t, m);
    if (rv != 0) {
        if (rv == SD_ENOMEM)
            sd_diag_set(d, rv, "out of memory");
        plan_destroy(&p);
        return rv;
    }
    *out = p;
    return 0;
}
