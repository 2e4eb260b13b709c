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

/* a + b, saturated at UINT64_MAX. */
static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* ------------------------------------------------------------------------ */
/* GreedyPerfPartitioner over table-wise and column-wise options (1.3, 1.4)  */

enum { OPT_TW = 0, OPT_CW = 1, NOPTS = 2 };

/* The three proposals, in the order they are tried (ties go to the first). */
enum { PROP_TW = 0, PROP_CW, PROP_BEST, NPROPS };

/* One sharding option of a table; all its shards are alike. */
struct option {
    int32_t width;         /* columns per shard */
    int32_t nshards;       /* dim / width */
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
};

static bool pinned(const struct greedy *g, size_t i)
{
    return g->pins != NULL && g->pins[i] >= 0;
}

/* The options of a table (1.2): TW one shard, CW shards of trec_cw_block. */
static void options_init(const struct table *tb, const struct topology *t,
                         enum optimizer opt, struct option out[NOPTS])
{
    struct trec_shard_in in;
    int k;

    memset(&in, 0, sizeof(in));
    in.kernel = TREC_KERNEL_FUSED;
    /* TorchRec's B is per rank; the topology's batch is global (and at
     * least ndevices, so B >= 1; a remainder is dropped). */
    in.batch_size = t->batch_size / t->ndevices;
    if (in.batch_size < 1)
        in.batch_size = 1;
    in.pooling_factor = tb->pooling_factor;
    in.rows = tb->rows;
    in.elem_size = table_dtype_size(tb->dtype);
    in.world_size = t->ndevices;
    in.local_world_size = t->devices_per_host;
    in.hbm_bw = t->device_mem_bw;
    in.intra_bw = t->intra_host_bw;
    in.inter_bw = t->inter_host_bw;

    out[OPT_TW].width = tb->dim;
    out[OPT_CW].width = trec_cw_block(tb->dim, 0);
    for (k = 0; k < NOPTS; k++) {
        uint64_t trec, ours;

        in.sharding = k == OPT_TW ? TREC_TABLE_WISE : TREC_COLUMN_WISE;
        in.cols = out[k].width;
        out[k].nshards = tb->dim / out[k].width;
        trec_shard_perf(&in, &out[k].perf);
        /* Never charge less than plan_validate() will count, so that a
         * plan that fits here always passes it. */
        trec = trec_shard_storage(&in, opt);
        ours = shard_bytes(tb, out[k].width, opt);
        out[k].storage = trec > ours ? trec : ours;
    }
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

/*
 * Places one proposal (GreedyPerfPartitioner._device_partition): groups
 * largest storage first, each shard onto the first device popped from the
 * heap that has room for it; the devices popped on the way go back after.
 * Fills assign (the device of every shard, at g->first[i] + k) and *rating
 * (NoopPerfModel: the largest sum of shard totals on one rank), or *miss
 * when a shard fits nowhere.  Returns true when the proposal is
 * partitionable.
 */
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

static bool partition(const struct greedy *g, const uint8_t *choice,
                      int32_t *assign, double *rating, struct misfit *miss)
{
    const struct topology *t = g->t;
    struct device *dv = g->devices;
    struct heap h = {g->heap, 0, t->devices_per_host};
    int32_t *popped = g->popped;
    size_t i, n, ngroups = 0;
    int32_t r, k, npopped;

    for (r = 0; r < t->ndevices; r++) {
        memset(&dv[r], 0, sizeof(dv[r]));
        dv[r].free_bytes = topology_mem(t, r);
    }
    /* Pinned tables first, whole (their options are table-wise only). */
    for (i = 0; i < g->ntables; i++) {
        const struct option *o = chosen(g, choice, i);

        if (!pinned(g, i))
            continue;
        r = g->pins[i];
        if (dv[r].free_bytes < o->storage) {
            miss->table = (uint32_t)i;
            miss->need = o->storage;
            miss->largest_free = dv[r].free_bytes;
            miss->pinned_to = r;
            return false;
        }
        charge(&dv[r], o);
        assign[g->first[i]] = r;
    }
    for (r = 0; r < t->ndevices; r++)
        heap_push(&h, dv, r);
    for (i = 0; i < g->ntables; i++) {
        const struct option *o = chosen(g, choice, i);

        if (pinned(g, i))
            continue;
        g->groups[ngroups].storage_sum = o->storage * (uint64_t)o->nshards;
        g->groups[ngroups].table = (uint32_t)i;
        ngroups++;
    }
    qsort(g->groups, ngroups, sizeof(*g->groups), cmp_group);

    for (n = 0; n < ngroups; n++) {
        uint32_t ti = g->groups[n].table;
        const struct option *o = chosen(g, choice, ti);

        for (k = 0; k < o->nshards; k++) {
            struct device *b = NULL;

            npopped = 0;
            while (h.n > 0) {
                b = &dv[h.rank[0]];
                if (b->free_bytes >= o->storage)
                    break;
                popped[npopped++] = heap_pop(&h, dv);
                b = NULL;
            }
            if (b == NULL) {
                /* Every device was popped: report the roomiest. */
                miss->table = ti;
                miss->need = o->storage;
                miss->largest_free = 0;
                miss->pinned_to = -1;
                for (r = 0; r < t->ndevices; r++) {
                    if (dv[r].free_bytes > miss->largest_free)
                        miss->largest_free = dv[r].free_bytes;
                }
                return false;
            }
            charge(b, o);
            assign[g->first[ti] + (size_t)k] = h.rank[0];
            heap_sift_down(&h, dv, 0); /* its key only grew */
            while (npopped > 0)
                heap_push(&h, dv, popped[--npopped]);
        }
    }

    /* NoopPerfModel.rate sums shard totals per rank in plan order. */
    for (i = 0; i < g->ntables; i++) {
        const struct option *o = chosen(g, choice, i);

        for (k = 0; k < o->nshards; k++)
            dv[assign[g->first[i] + (size_t)k]].rated += o->perf.total;
    }
    *rating = 0;
    for (r = 0; r < t->ndevices; r++) {
        if (dv[r].rated > *rating)
            *rating = dv[r].rated;
    }
    return true;
}

/* Whether proposals a and b give every table the same shard width. */
static bool same_proposal(const struct greedy *g, const uint8_t *a,
                          const uint8_t *b)
{
    size_t i;

    for (i = 0; i < g->ntables; i++) {
        if (chosen(g, a, i)->width != chosen(g, b, i)->width)
            return false;
    }
    return true;
}

/*
 * Fills the three proposals (torchrec_planner.md 1.3): all table-wise, all
 * column-wise, and GreedyProposer's first, each table's option with the
 * least max shard perf (ties: table-wise, which TorchRec enumerates first).
 */
static void propose(const struct greedy *g, uint8_t *choice[NPROPS])
{
    size_t i;

    for (i = 0; i < g->ntables; i++) {
        const struct option *o = g->opts[i];

        choice[PROP_TW][i] = OPT_TW;
        choice[PROP_CW][i] = OPT_CW;
        choice[PROP_BEST][i] =
            o[OPT_CW].perf.total < o[OPT_TW].perf.total ? OPT_CW : OPT_TW;
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
static int build_plan(const struct greedy *g, const uint8_t *choice,
                      const int32_t *assign, struct plan *p)
{
    size_t i;
    int32_t k;
    int rv;

    for (i = 0; i < g->ntables; i++) {
        const struct option *o = chosen(g, choice, i);

        for (k = 0; k < o->nshards; k++) {
            rv = plan_add(p, (uint32_t)i, assign[g->first[i] + (size_t)k],
                          k * o->width, o->width);
            if (rv != 0)
                return rv;
        }
    }
    return 0;
}

int plan_torchrec_greedy(const struct table *tables, size_t ntables,
                         const struct topology *t, enum optimizer opt,
                         const int32_t *pins, struct plan *out,
                         struct sd_diag *d)
{
    struct greedy g;
    uint8_t *choice[NPROPS] = {NULL};
    int32_t *assign = NULL, *best_assign = NULL;
    struct misfit miss, first_miss = {0, 0, 0, -1};
    uint64_t miss_storage = 0;
    bool have_miss = false;
    double rating, best_rating = 0;
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
    g.opts = calloc(ntables, sizeof(*g.opts));
    g.devices = calloc((size_t)t->ndevices, sizeof(*g.devices));
    g.groups = calloc(ntables, sizeof(*g.groups));
    g.first = calloc(ntables, sizeof(*g.first));
    g.heap = calloc((size_t)t->ndevices, sizeof(*g.heap));
    g.popped = calloc((size_t)t->ndevices, sizeof(*g.popped));
    for (k = 0; k < NPROPS; k++)
        choice[k] = calloc(ntables, sizeof(*choice[k]));
    if (g.opts == NULL || g.devices == NULL || g.groups == NULL ||
        g.first == NULL || g.heap == NULL || g.popped == NULL ||
        choice[0] == NULL || choice[1] == NULL || choice[2] == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out;
    }

    /* Shard slots: column-wise has the most shards (TW has one). */
    for (i = 0; i < ntables; i++) {
        options_init(&tables[i], t, opt, g.opts[i]);
        if (pinned(&g, i))
            g.opts[i][OPT_CW] = g.opts[i][OPT_TW];
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
    propose(&g, choice);
    for (k = 0; k < NPROPS; k++) {
        for (j = 0; j < k; j++) {
            if (same_proposal(&g, choice[j], choice[k]))
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
    if (best < 0 && first_miss.pinned_to >= 0) {
        rv = sd_diag_set(
            d, SD_ENOSPACE,
            "table \"%s\": pinned to device %d, it needs %llu bytes with "
            "TorchRec's buffers but %llu are free there (short by %llu bytes)",
            tables[first_miss.table].name, (int)first_miss.pinned_to,
            (unsigned long long)first_miss.need,
            (unsigned long long)first_miss.largest_free,
            (unsigned long long)(first_miss.need - first_miss.largest_free));
        goto out;
    }
    if (best < 0) {
        rv = sd_diag_set(
            d, SD_ENOSPACE,
            "table \"%s\": needs %llu bytes but the largest "
            "free space on any device is %llu bytes (short by "
            "%llu bytes)",
            tables[first_miss.table].name, (unsigned long long)first_miss.need,
            (unsigned long long)first_miss.largest_free,
            (unsigned long long)(first_miss.need - first_miss.largest_free));
        goto out;
    }

    /* The plan is built aside so that *out is untouched on failure. */
    rv = plan_init(&p, t->ndevices);
    if (rv == 0)
        rv = build_plan(&g, choice[best], best_assign, &p);
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
