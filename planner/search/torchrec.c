/*
 * TorchRec's sharding planner re-implemented as a baseline: the
 * GreedyPerfPartitioner over table-wise and column-wise options with the
 * fused kernel, scored by TorchRec's estimators (models/trec.c).  Section
 * numbers refer to reference/torchrec_planner.md, which describes TorchRec
 * 2025-10.
 */
#include <stdlib.h>
#include <string.h>

#include "models/models.h"
#include "problem/problem.h"
#include "search/search.h"
#include "search/search_int.h"
#include "shardd/bytes.h"

/* a + b, saturated at UINT64_MAX. */
static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* ------------------------------------------------------------------------ */
/* GreedyPerfPartitioner over TorchRec's sharding options (1.2-1.4)          */

/* The options, in the enumerator's order; row-wise and data-parallel are
 * placed uniformly (shard i on device i), table-row-wise by host. */
enum { OPT_TW = 0, OPT_CW, OPT_RW, OPT_TWRW, OPT_DP, NOPTS };

static const enum plan_scheme opt_scheme[NOPTS] = {
    SCHEME_TW, SCHEME_CW, SCHEME_RW, SCHEME_TWRW, SCHEME_DP};

/* The proposals, in the order they are tried (ties go to the first): one
 * per option for every table (UniformProposer), then each table's best
 * (GreedyProposer's first). */
enum { PROP_BEST = NOPTS, NPROPS };

/* One sharding option of a table; all its shards are alike (row blocks
 * differ by a row at most: storage is the largest's). */
struct option {
    bool allowed;          /* by the table's constraint and its pin */
    int32_t width;         /* columns per shard */
    int32_t nshards;       /* CW: dim / width; RW, DP: devices; TWRW: a
                            * host's */
    int64_t block;         /* RW, TWRW: rows per block (TorchRec's ceil) */
    struct trec_perf perf; /* of one shard */
    uint64_t storage;      /* bytes one shard is charged on a device */
};

struct device {
    uint64_t free_bytes;
    double fwd_compute; /* Perf of the shards placed, summed per component */
    double fwd_comms;
    double bwd_compute;
    double bwd_comms;
    double total; /* Perf.total of the sums: the heap key */
    double rated; /* sum of the shards' totals: the rating */
};

/* The first shard that fit nowhere. */
struct misfit {
    uint32_t table;
    uint64_t need;
    uint64_t largest_free;
    int32_t pinned_to; /* the device of a pinned table, else -1 */
};

struct group {
    uint64_t storage_sum;
    uint32_t table;
};

/* Everything one partition() needs; the arrays are sized once. */
struct greedy {
    size_t ntables;
    const struct topology *t;
    struct option (*opts)[NOPTS]; /* per table */
    struct device *devices;
    struct group *groups;
    size_t *first;       /* per table: index of its first shard */
    int32_t *heap;       /* ndevices ranks */
    int32_t *popped;     /* ndevices ranks */
    const int32_t *pins; /* per table: its device or -1; NULL: none */
    const struct table_constraint *cons; /* per table; NULL: none */
};

static bool pinned(const struct greedy *g, size_t i)
{
    return g->pins != NULL && g->pins[i] >= 0;
}

/* The options of a table (1.2): TW one shard, CW shards of trec_cw_block,
 * RW a block of ceil(rows / devices) rows per device, TWRW the same over a
 * host's devices, DP a replica per device; c (NULL: none) allows them. */
static void options_init(const struct table *tb, const struct topology *t,
                         enum optimizer opt, const struct table_constraint *c,
                         bool pinned, struct option out[NOPTS])
{
    static const enum trec_sharding sharding[NOPTS] = {
        TREC_TABLE_WISE, TREC_COLUMN_WISE, TREC_ROW_WISE, TREC_TABLE_ROW_WISE,
        TREC_DATA_PARALLEL};
    struct trec_shard_in in;
    int k;

    memset(&in, 0, sizeof(in));
    /* TorchRec's B is per rank; the topology's batch is global (and at
     * least ndevices, so B >= 1; a remainder is dropped). */
    in.batch_size = t->batch_size / t->ndevices;
    if (in.batch_size < 1)
        in.batch_size = 1;
    in.pooling_factor = tb->pooling_factor;
    in.elem_size = table_dtype_size(tb->dtype);
    in.world_size = t->ndevices;
    in.local_world_size = t->devices_per_host;
    in.hbm_bw = t->device_mem_bw;
    in.intra_bw = t->intra_host_bw;
    in.inter_bw = t->inter_host_bw;

    out[OPT_TW].width = tb->dim;
    out[OPT_CW].width = trec_cw_block(tb->dim, 0);
    out[OPT_RW].width = out[OPT_TWRW].width = out[OPT_DP].width = tb->dim;
    out[OPT_TW].nshards = 1;
    out[OPT_CW].nshards = tb->dim / out[OPT_CW].width;
    out[OPT_RW].nshards = out[OPT_DP].nshards = t->ndevices;
    out[OPT_TWRW].nshards = t->devices_per_host;
    for (k = 0; k < NOPTS; k++) {
        struct table block = *tb;
        struct shard s = {.col_width = out[k].width};
        uint64_t trec, ours;

        out[k].allowed = constraint_allows(c, opt_scheme[k]) &&
                         (!pinned || k == OPT_TW) &&
                         (k != OPT_RW || c == NULL || c->host < 0);
        out[k].block = 0;
        in.rows = tb->rows;
        if (k == OPT_RW || k == OPT_TWRW) {
            out[k].block = (tb->rows + out[k].nshards - 1) / out[k].nshards;
            in.rows = out[k].block;
            s.row_count = out[k].block;
        }
        in.sharding = sharding[k];
        /* A table the tier pass moved off HBM runs TorchRec's UVM kernels
         * (replicas stay dense, in HBM), priced at their bandwidth. */
        in.kernel = k == OPT_DP            ? TREC_KERNEL_DENSE
                    : tb->tier == TIER_UVM ? TREC_KERNEL_FUSED_UVM
                    : tb->tier == TIER_UVM_CACHING
                        ? TREC_KERNEL_FUSED_UVM_CACHING
                        : TREC_KERNEL_FUSED;
        in.cache_load_factor = tb->cache_load_factor;
        in.ddr_bw = topology_host_link_bw(t);
        in.cols = out[k].width;
        trec_shard_perf(&in, &out[k].perf);
        /* Never charge less than plan_validate() will count, so that a
         * plan that fits here always passes it. */
        trec = trec_shard_storage(&in, opt);
        ours = shard_block_bytes(&block, &s, opt);
        if (tb->tier != TIER_HBM && k != OPT_DP) {
            /* Off HBM (the tier pass): the HBM share of the weights plus
             * what TorchRec charges beyond the weights (its buffers). */
            uint64_t full;

            block.tier = TIER_HBM;
            full = shard_block_bytes(&block, &s, opt);
            out[k].storage = ours + (trec > full ? trec - full : 0);
        } else {
            out[k].storage = trec > ours ? trec : ours;
        }
    }
    if (c != NULL && c->min_row_shards > out[OPT_TWRW].nshards)
        out[OPT_TWRW].allowed = false;
}

/* Descending storage sum, then table index ascending (1.4 step 2). */
static int cmp_group(const void *a, const void *b)
{
    const struct group *x = a, *y = b;

    if (x->storage_sum != y->storage_sum)
        return x->storage_sum > y->storage_sum ? -1 : 1;
    return (x->table > y->table) - (x->table < y->table);
}

/* The device min-heap's order: (perf total, rank % local, rank) (1.4). */
static bool device_before(const struct device *dv, int32_t a, int32_t b,
                          int32_t lws)
{
    if (dv[a].total != dv[b].total)
        return dv[a].total < dv[b].total;
    if (a % lws != b % lws)
        return a % lws < b % lws;
    return a < b;
}

/*
 * A binary min-heap of ranks in device_before() order, as TorchRec's heapq
 * of OrderedDeviceHardware.  The order is total (ranks differ), so any heap
 * pops the devices in the same order as TorchRec's.
 */
struct heap {
    int32_t *rank; /* ndevices slots */
    int32_t n;
    int32_t lws;
};

static void heap_sift_down(struct heap *h, const struct device *dv, int32_t pos)
{
    for (;;) {
        int32_t least = pos, l = 2 * pos + 1, r = 2 * pos + 2, tmp;

        if (l < h->n && device_before(dv, h->rank[l], h->rank[least], h->lws))
            least = l;
        if (r < h->n && device_before(dv, h->rank[r], h->rank[least], h->lws))
            least = r;
        if (least == pos)
            return;
        tmp = h->rank[pos];
        h->rank[pos] = h->rank[least];
        h->rank[least] = tmp;
        pos = least;
    }
}

static void heap_push(struct heap *h, const struct device *dv, int32_t rank)
{
    int32_t pos = h->n++;

    while (pos > 0 && device_before(dv, rank, h->rank[(pos - 1) / 2], h->lws)) {
        h->rank[pos] = h->rank[(pos - 1) / 2];
        pos = (pos - 1) / 2;
    }
    h->rank[pos] = rank;
}

static int32_t heap_pop(struct heap *h, const struct device *dv)
{
    int32_t top = h->rank[0];

    h->rank[0] = h->rank[--h->n];
    heap_sift_down(h, dv, 0);
    return top;
}

static const struct option *chosen(const struct greedy *g,
                                   const uint8_t *choice, size_t i)
{
    return &g->opts[i][choice[i]];
}

/* Charges one shard of option o to device b. */
static void charge(struct device *b, const struct option *o)
{
    b->free_bytes -= o->storage;
    b->fwd_compute += o->perf.fwd_compute;
    b->fwd_comms += o->perf.fwd_comms;
    b->bwd_compute += o->perf.bwd_compute;
    b->bwd_comms += o->perf.bwd_comms;
    b->total = trec_perf_total(b->fwd_compute, b->fwd_comms, b->bwd_compute,
                               b->bwd_comms);
}

/* The first shard of option o that fits nowhere: *miss. */
static void missed(const struct greedy *g, uint32_t ti, const struct option *o,
                   int32_t pinned_to, struct misfit *miss)
{
    int32_t r;

    miss->table = ti;
    miss->need = o->storage;
    miss->largest_free = 0;
    miss->pinned_to = pinned_to;
    for (r = 0; r < g->t->ndevices; r++)
        if ((pinned_to < 0 || r == pinned_to) &&
            g->devices[r].free_bytes > miss->largest_free)
            miss->largest_free = g->devices[r].free_bytes;
}

/* Uniform options (1.4 step 1): shard i of every RW and DP table on device
 * i; a pinned table whole on its device. */
static bool place_fixed(const struct greedy *g, const uint8_t *choice,
                        int32_t *assign, struct misfit *miss)
{
    struct device *dv = g->devices;
    size_t i;
    int32_t r;

    for (i = 0; i < g->ntables; i++) {
        const struct option *o = chosen(g, choice, i);

        if (pinned(g, i)) {
            r = g->pins[i];
            if (dv[r].free_bytes < o->storage) {
                missed(g, (uint32_t)i, o, r, miss);
                return false;
            }
            charge(&dv[r], o);
            assign[g->first[i]] = r;
            continue;
        }
        if (choice[i] != OPT_RW && choice[i] != OPT_DP)
            continue;
        for (r = 0; r < o->nshards; r++) {
            if (dv[r].free_bytes < o->storage) {
                missed(g, (uint32_t)i, o, -1, miss);
                return false;
            }
            charge(&dv[r], o);
        }
    }
    return true;
}

/* A table-row-wise table (1.4 `host`): onto the host of least summed perf
 * whose every device has room for a block (its constraint's host, if
 * any).  Writes the host to assign[first]. */
static bool place_host(const struct greedy *g, uint32_t ti,
                       const struct option *o, int32_t *assign,
                       struct misfit *miss)
{
    const struct topology *t = g->t;
    struct device *dv = g->devices;
    int32_t L = t->devices_per_host, h, r, best = -1;
    int32_t want = g->cons != NULL ? g->cons[ti].host : -1;
    double best_perf = 0;

    for (h = 0; h < t->ndevices / L; h++) {
        double perf = 0;
        bool room = want < 0 || h == want;

        for (r = h * L; r < (h + 1) * L && room; r++) {
            room = dv[r].free_bytes >= o->storage;
            perf += dv[r].total;
        }
        if (room && (best < 0 || perf < best_perf)) {
            best = h;
            best_perf = perf;
        }
    }
    if (best < 0) {
        missed(g, ti, o, -1, miss);
        return false;
    }
    for (r = best * L; r < (best + 1) * L; r++)
        charge(&dv[r], o);
    assign[g->first[ti]] = best;
    return true;
}

/* The shards of a table- or column-wise table (1.4 `device`), each onto
 * the first device popped from the heap with room (on its constraint's
 * host, if any); the devices popped on the way go back after. */
static bool place_devices(const struct greedy *g, struct heap *h, uint32_t ti,
                          const struct option *o, int32_t *assign,
                          struct misfit *miss)
{
    struct device *dv = g->devices;
    int32_t *popped = g->popped, L = g->t->devices_per_host;
    int32_t want = g->cons != NULL ? g->cons[ti].host : -1, k, npopped;

    for (k = 0; k < o->nshards; k++) {
        struct device *b = NULL;

        npopped = 0;
        while (h->n > 0) {
            b = &dv[h->rank[0]];
            if (b->free_bytes >= o->storage &&
                (want < 0 || h->rank[0] / L == want))
                break;
            popped[npopped++] = heap_pop(h, dv);
            b = NULL;
        }
        if (b == NULL) {
            missed(g, ti, o, -1, miss);
            return false;
        }
        charge(b, o);
        assign[g->first[ti] + (size_t)k] = h->rank[0];
        heap_sift_down(h, dv, 0); /* its key only grew */
        while (npopped > 0)
            heap_push(h, dv, popped[--npopped]);
    }
    return true;
}

/*
 * Places one proposal (GreedyPerfPartitioner._device_partition): pinned
 * tables and the uniform options first, then the groups largest storage
 * first, each table-row-wise one onto a host, the others shard by shard
 * onto devices.  Fills assign (a table's devices, or its host, from
 * g->first[i]) and *rating (NoopPerfModel: the largest sum of shard totals
 * on one rank), or *miss when a shard fits nowhere.  Returns true when the
 * proposal is partitionable.
 */
static bool partition(const struct greedy *g, const uint8_t *choice,
                      int32_t *assign, double *rating, struct misfit *miss)
{
    const struct topology *t = g->t;
    struct device *dv = g->devices;
    struct heap h = {g->heap, 0, t->devices_per_host};
    size_t i, n, ngroups = 0;
    int32_t r, k, L = t->devices_per_host;

    for (r = 0; r < t->ndevices; r++) {
        memset(&dv[r], 0, sizeof(dv[r]));
        dv[r].free_bytes = topology_mem(t, r);
    }
    if (!place_fixed(g, choice, assign, miss))
        return false;
    for (r = 0; r < t->ndevices; r++)
        heap_push(&h, dv, r);
    for (i = 0; i < g->ntables; i++) {
        const struct option *o = chosen(g, choice, i);

        if (pinned(g, i) || choice[i] == OPT_RW || choice[i] == OPT_DP)
            continue;
        g->groups[ngroups].storage_sum = o->storage * (uint64_t)o->nshards;
        g->groups[ngroups].table = (uint32_t)i;
        ngroups++;
    }
    qsort(g->groups, ngroups, sizeof(*g->groups), cmp_group);

    for (n = 0; n < ngroups; n++) {
        uint32_t ti = g->groups[n].table;
        const struct option *o = chosen(g, choice, ti);
        bool ok;

        if (choice[ti] == OPT_TWRW) {
            ok = place_host(g, ti, o, assign, miss);
            /* The host's devices' keys grew: the heap is rebuilt. */
            h.n = 0;
            for (r = 0; ok && r < t->ndevices; r++)
                heap_push(&h, dv, r);
        } else {
            ok = place_devices(g, &h, ti, o, assign, miss);
        }
        if (!ok)
            return false;
    }

    /* NoopPerfModel.rate sums shard totals per rank in plan order. */
    for (i = 0; i < g->ntables; i++) {
        const struct option *o = chosen(g, choice, i);

        for (k = 0; k < o->nshards; k++) {
            if (choice[i] == OPT_RW || choice[i] == OPT_DP)
                r = k;
            else if (choice[i] == OPT_TWRW)
                r = assign[g->first[i]] * L + k;
            else
                r = assign[g->first[i] + (size_t)k];
            dv[r].rated += o->perf.total;
        }
    }
    *rating = 0;
    for (r = 0; r < t->ndevices; r++) {
        if (dv[r].rated > *rating)
            *rating = dv[r].rated;
    }
    return true;
}

/* Whether proposals a and b give every table the same option. */
static bool same_proposal(const struct greedy *g, const uint8_t *a,
                          const uint8_t *b)
{
    size_t i;

    for (i = 0; i < g->ntables; i++) {
        if (a[i] != b[i] && (chosen(g, a, i)->width != chosen(g, b, i)->width ||
                             (a[i] != OPT_TW && a[i] != OPT_CW) ||
                             (b[i] != OPT_TW && b[i] != OPT_CW)))
            return false;
    }
    return true;
}

/*
 * Fills the proposals (torchrec_planner.md 1.3): UniformProposer's one per
 * option every table allows (a pinned table is table-wise in each; valid[k]
 * false where some table does not allow option k), and GreedyProposer's
 * first: each table's allowed option with the least max shard perf (ties:
 * the enumerator's order).
 */
static void propose(const struct greedy *g, uint8_t *choice[NPROPS],
                    bool valid[NPROPS])
{
    size_t i;
    int k;

    for (k = 0; k < NPROPS; k++)
        valid[k] = true;
    for (i = 0; i < g->ntables; i++) {
        const struct option *o = g->opts[i];
        int best = -1;

        for (k = 0; k < NOPTS; k++) {
            choice[k][i] = pinned(g, i) ? OPT_TW : (uint8_t)k;
            if (!pinned(g, i) && !o[k].allowed)
                valid[k] = false;
            if (o[k].allowed &&
                (best < 0 || o[k].perf.total < o[best].perf.total))
                best = k;
        }
        choice[PROP_BEST][i] = (uint8_t)(best < 0 ? OPT_TW : best);
    }
}

/* The total bytes of a proposal (saturating): TorchRec reports the
 * failure of the proposal that needs the least. */
static uint64_t proposal_storage(const struct greedy *g, const uint8_t *choice)
{
    uint64_t sum = 0;
    size_t i;

    for (i = 0; i < g->ntables; i++) {
        const struct option *o = chosen(g, choice, i);

        sum = add_sat(sum, o->storage * (uint64_t)o->nshards);
    }
    return sum;
}

/* Fills p with the shards of a partitioned proposal. */
static int build_plan(const struct greedy *g, const struct table *tables,
                      const uint8_t *choice, const int32_t *assign,
                      struct plan *p)
{
    int32_t k, L = g->t->devices_per_host;
    size_t i;
    int rv = 0;

    for (i = 0; i < g->ntables && rv == 0; i++) {
        const struct option *o = chosen(g, choice, i);
        int64_t rows = tables[i].rows, at = 0;

        for (k = 0; k < o->nshards && rv == 0; k++) {
            struct shard s = {.table = (uint32_t)i,
                              .col_width = o->width,
                              .scheme = (uint8_t)opt_scheme[choice[i]]};

            if (choice[i] == OPT_RW || choice[i] == OPT_TWRW) {
                /* TorchRec's blocks: ceil(rows / shards) each, the
                 * remainder next, none after. */
                if (at >= rows)
                    break;
                s.row_offset = at;
                s.row_count = rows - at < o->block ? rows - at : o->block;
                at += s.row_count;
                s.device =
                    choice[i] == OPT_RW ? k : assign[g->first[i]] * L + k;
            } else if (choice[i] == OPT_DP) {
                s.device = k;
            } else {
                s.device = assign[g->first[i] + (size_t)k];
                s.col_offset = k * o->width;
            }
            rv = plan_add_shard(p, &s);
        }
    }
    return rv;
}

/* The SD_ENOSPACE of the failed proposal of least storage. */
static int no_fit(const struct table *tables, const struct misfit *m,
                  const struct topology *t, struct sd_diag *d)
{
    char b0[SD_BYTES_TEXT], b1[SD_BYTES_TEXT], b2[SD_BYTES_TEXT];

    if (m->pinned_to >= 0)
        return sd_diag_set(
            d, SD_ENOSPACE,
            "table \"%s\": pinned to device %d, it needs %s with "
            "TorchRec's buffers but %s are free there (short by %s)",
            tables[m->table].name, (int)m->pinned_to,
            sd_bytes_text(m->need, b0), sd_bytes_text(m->largest_free, b1),
            sd_bytes_text(m->need - m->largest_free, b2));
    return search_no_room(tables[m->table].name, m->need, m->largest_free,
                          " with TorchRec's buffers", t, d);
}

int plan_torchrec_greedy(const struct table *tables, size_t ntables,
                         const struct topology *t, enum optimizer opt,
                         const int32_t *pins,
                         const struct table_constraint *cons, struct plan *out,
                         struct sd_diag *d)
{
    struct greedy g;
    uint8_t *choice[NPROPS] = {NULL};
    int32_t *assign = NULL, *best_assign = NULL;
    struct misfit miss, first_miss = {0, 0, 0, -1};
    uint64_t miss_storage = 0;
    bool have_miss = false;
    double rating, best_rating = 0;
    bool valid[NPROPS];
    int best = -1, k, j;
    size_t i, nslots = 0;
    struct plan p;
    int rv;

    rv = plan_check_inputs(tables, ntables, t, d);
    if (rv != 0)
        return rv;

    rv = plan_check_pins(tables, ntables, t, pins, opt, d);
    if (rv != 0)
        return rv;

    memset(&g, 0, sizeof(g));
    g.ntables = ntables;
    g.t = t;
    g.pins = pins;
    g.cons = cons;
    g.opts = calloc(ntables, sizeof(*g.opts));
    g.devices = calloc((size_t)t->ndevices, sizeof(*g.devices));
    g.groups = calloc(ntables, sizeof(*g.groups));
    g.first = calloc(ntables, sizeof(*g.first));
    g.heap = calloc((size_t)t->ndevices, sizeof(*g.heap));
    g.popped = calloc((size_t)t->ndevices, sizeof(*g.popped));
    for (k = 0; k < NPROPS; k++)
        choice[k] = calloc(ntables ? ntables : 1, sizeof(*choice[k]));
    for (k = 0; k < NPROPS; k++)
        if (choice[k] == NULL)
            choice[PROP_BEST] = NULL; /* refused below */
    if (g.opts == NULL || g.devices == NULL || g.groups == NULL ||
        g.first == NULL || g.heap == NULL || g.popped == NULL ||
        choice[PROP_BEST] == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out;
    }

    /* Slots: a column-wise table's devices; one for the others (a
     * table-wise device or a table-row-wise host). */
    for (i = 0; i < ntables; i++) {
        options_init(&tables[i], t, opt, cons ? &cons[i] : NULL, pinned(&g, i),
                     g.opts[i]);
        g.first[i] = nslots;
        nslots += (size_t)g.opts[i][OPT_CW].nshards;
    }
    assign = calloc(nslots, sizeof(*assign));
    best_assign = calloc(nslots, sizeof(*best_assign));
    if (assign == NULL || best_assign == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out;
    }

    /* The planner loop (1.1): partition each new proposal, rate it, keep
     * the strictly best; remember the failure of the least storage. */
    propose(&g, choice, valid);
    for (k = 0; k < NPROPS; k++) {
        if (!valid[k])
            continue;
        for (j = 0; j < k; j++) {
            if (valid[j] && same_proposal(&g, choice[j], choice[k]))
                break;
        }
        if (j < k)
            continue;
        if (partition(&g, choice[k], assign, &rating, &miss)) {
            if (best < 0 || rating < best_rating) {
                best = k;
                best_rating = rating;
                memcpy(best_assign, assign, nslots * sizeof(*assign));
            }
        } else if (!have_miss ||
                   proposal_storage(&g, choice[k]) < miss_storage) {
            have_miss = true;
            miss_storage = proposal_storage(&g, choice[k]);
            first_miss = miss;
        }
    }
    if (best < 0) {
        rv = no_fit(tables, &first_miss, t, d);
        goto out;
    }

    /* The plan is built aside so that *out is untouched on failure. */
    rv = plan_init(&p, t->ndevices);
    if (rv == 0)
        rv = build_plan(&g, tables, choice[best], best_assign, &p);
    if (rv != 0) {
        plan_destroy(&p);
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out;
    }
    p.algorithm = "torchrec_greedy";
    plan_sort(&p);
    *out = p;
    rv = 0;
out:
    free(best_assign);
    free(assign);
    for (k = 0; k < NPROPS; k++)
        free(choice[k]);
    free(g.popped);
    free(g.heap);
    free(g.first);
    free(g.groups);
    free(g.devices);
    free(g.opts);
    return rv;
}
