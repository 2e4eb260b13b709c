/*
 * NeuroShard's search (neuroshard.md 6.3-6.4), scored by the neural compute
 * model and the topology's exchange (alpha-beta, or a model set's learned
 * comm nets), plus a final local search: moves off the critical device, or,
 * under a learned exchange, every move and swap (ns_local()).
 *
 * A state is a list of pieces: (table, level), the table cut to dim >> level
 * columns.  Splitting a piece halves it into two pieces one level down.
 * Every state is scored by the table-wise greedy grid search; the beam keeps
 * the best `beam_width` children per level.  What makes it fast, without
 * changing a single decision of the original:
 *  - each (table, level) goes through the table MLP once and its latent is
 *    projected through the head's first layer (net_project()), so a device
 *    is carried as 64 pre-activations and placing a piece is 64 additions
 *    plus a 64-term dot product; devices are compared by the raw head (the
 *    output activation is monotone) and only scored at the end;
 *  - the least loaded device with room comes straight out of a tree over
 *    the devices that keeps, per subtree, its least loaded device, its
 *    most free memory and its fewest columns: subtrees where nothing fits
 *    are skipped whole, so devices a dim cap refuses are not visited one
 *    by one;
 *  - a grid run under a looser dim cap replays the previous run exactly up
 *    to the first piece the previous cap refused a device for, so it resumes
 *    from a snapshot taken there, and skips the caps that refuse nothing new;
 *  - states are keyed by the multiset of their pieces, so splitting A then B
 *    and B then A is scored once;
 *  - the children of a beam level are scored on worker threads, each with
 *    its own scratch, and merged in their generation order: the result does
 *    not depend on the thread count.
 * Pinned tables (plan_options.pins) are pieces at level 0 that every greedy
 * run finds already on their devices (the base devices), that are never
 * split and that the local search never moves.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "models/models.h"
#include "problem/problem.h"
#include "search/search.h"
#include "search/search_int.h"

/* 1024 columns halve to 4 in 8 steps: 9 levels at most. */
#define NS_LEVELS_MAX 9
#define NS_GRID_STEPS 11 /* dim caps 1.00, 1.05, ..., 1.50 x the mean */
/*
 * Above this many devices the grid is one uncapped run.  With ten or so
 * tables a device, a cap of 1.0-1.5 x the mean columns binds on most of
 * them and forces worse compute balance: on bench_search's cases of 128 to
 * 2,048 devices the uncapped run found plans as good or better (at 10,000
 * tables on 1,024 devices a gap of 0.57 % against 1.10 %) in a tenth of the
 * time.  At 64 devices the grid still paid (0.36 % against 0.67 %).
 */
#define NS_GRID_DEVICES 64
#define NS_THREADS_MAX  16
/* Devices a local-search move may target: the least ready ones. */
#define NS_TARGETS 4
/* The most steps (moves and swaps) an all-pairs local-search round may try;
 * more pieces than that get the critical-device rounds (ns_local()). */
#define NS_WIDE_STEPS (1 << 14)
/* Up to this many devices a greedy run scans them; more get a tree.  One
 * pass over 64 devices beat the tree's walk and path updates 1.5 x on
 * 856 tables / 64 devices, and was even at 128 (bench_search). */
#define NS_SCAN_MAX 64
/* The beam stops after this many levels in a row that did not lower the
 * best cost by NS_GAIN of it: on the benchmark tasks the best is found by
 * the third level, and later ones cost as much and find nothing. */
#define NS_PATIENCE       2
#define NS_CANDIDATES_MIN 5
#define NS_GAIN           1e-4

struct ns_level {
    float proj[NET_H2]; /* W3 * latent of the table at this width */
    double ms;          /* its cost alone, at the topology's batch (its
                         * host-link time included) */
    double tier_ms;     /* its modelled host-link time (tier_shard_ms()) */
    uint64_t bytes;     /* on a device, optimizer state included */
    int32_t cols;
    bool ready;
};

struct ns_piece {
    uint32_t table;
    int32_t level;
};

/* A scored state: its pieces, where the best greedy put them, its cost. */
struct ns_state {
    struct ns_piece *pc;
    int32_t *assign;
    size_t np;
    uint64_t key;
    double cost;
};

/* A piece in greedy order, with what picking its device needs (the
 * level's bytes and columns here, read in order, not from the level). */
struct ns_sort {
    double ms;
    uint64_t bytes;
    uint32_t table;
    int32_t level;
    int32_t cols;
    size_t idx;
};

/*
 * Devices under construction, and a copy of them for resuming.  The tree is
 * a complete binary tree over `size` leaves (a power of two >= n; leaf r at
 * size + r): per node, its subtree's least device by (raw, mem, id) (-1:
 * none left), the most free memory and the fewest columns of its devices.
 * A device whose memory can take none of the pieces left in a greedy run
 * leaves the tree for that run (its leaf is emptied).
 */
struct ns_devs {
    float *z; /* [n][NET_H2] head pre-activations */
    /* The devices' order key, -inf when empty: the head before its
     * activation or, when some table is off HBM (ns.tiered), the compute ms
     * with the host-link time of the device's pieces. */
    double *raw;
    double *tier; /* the host-link ms of the device's pieces */
    uint64_t *mem;
    int32_t *dim;
    int32_t *count;
    int32_t size;    /* leaves */
    int32_t *least;  /* [2 size] */
    uint64_t *room;  /* [2 size] */
    int32_t *lowdim; /* [2 size] */
};

/* One thread's scratch, on cache lines of its own: its counters are
 * written per evaluation, and sharing a line with the next thread's
 * pointers cost the second thread more than half its speed. */
struct ns_work {
    _Alignas(64) struct ns_devs dv, snap;
    size_t snap_k; /* the piece the snapshot was taken before */
    bool snap_taken;
    double *comp; /* compute ms, from raw by devices_cost() */
    double *fwd, *bwd;
    int32_t *stack; /* tree_pick()'s */
    struct ns_sort *order;
    struct ns_sort *few; /* a state's split pieces, for ns_order() */
    int32_t *assign;
    uint64_t *sfx_bytes; /* smallest piece from order[k] on */
    int64_t greedy_runs, states, evaluations;
};

struct ns {
    const struct table *tables;
    size_t ntables;
    const struct topology *t;
    const struct plan_options *o;
    const struct cost_net *net;
    double scale; /* topology batch / the model's batch */
    int32_t n;
    /* Some table is off HBM: devices are ordered and scored by compute plus
     * host-link time (a tier-blind order would stack cached tables where
     * the compute model alone sees room). */
    bool tiered;
    uint64_t largest_room; /* the most a base device has left */
    uint64_t *devmem;      /* per device: topology_mem() */
    size_t cap;            /* pieces a state can have */
    double dim_mean;
    int32_t candidates;  /* o->candidates, for this many tables */
    const int32_t *pins; /* per table: its device or -1; NULL: none */
    /* The exchanges of row-split and replicated tables (NULL: none). */
    const double *fixed_fwd, *fixed_bwd;
    const int32_t *host; /* per table: the host it must go to, or -1 */
    int32_t *forced;     /* per table: the level memory forces (0: whole) */
    int32_t *presplit;   /* per table: the level it starts at (>= forced) */
    bool any_presplit;   /* some table starts split beyond memory's needs */
    size_t npinned;
    struct ns_devs base; /* the pinned tables placed, nothing else */
    /* [NS_LEVELS_MAX][ntables], level-major: the tables' level-0 pieces,
     * which every greedy run places, lie together.  Filled on the main
     * thread only. */
    struct ns_level *lv;
    int32_t *nlevels;           /* per table: levels it may be cut to */
    struct ns_sort *root_order; /* the whole tables, in greedy order */
    size_t nroot;
    struct ns_work work[NS_THREADS_MAX];
    int nthreads;
    /* seen state keys: open addressing, 0 = empty */
    uint64_t *seen;
    size_t seen_cap, seen_n;
    struct plan_search_stats *st;
    struct timespec t0;
};

static double elapsed_ms(const struct timespec *t0)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) * 1e3 +
           (double)(now.tv_nsec - t0->tv_nsec) / 1e6;
}

/* The caller no longer wants the plan. */
static bool cancelled(const struct ns *s)
{
    return s->o->cancel != NULL && atomic_load(s->o->cancel);
}

/* The budget ran out, or the search was cancelled. */
static bool out_of_time(struct ns *s)
{
    return cancelled(s) || (s->o->time_budget_ms > 0 &&
                            elapsed_ms(&s->t0) > s->o->time_budget_ms);
}

/* Piece i of a state is a pinned table: pieces [0, ntables) are the
 * tables, and a pinned one is never split, so it stays at its index. */
static bool piece_pinned(const struct ns *s, size_t i)
{
    return s->pins != NULL && i < s->ntables && s->pins[i] >= 0;
}

/* Table `table` may go to device r (its constraint's host, if any). */
static bool device_ok(const struct ns *s, uint32_t table, int32_t r)
{
    return s->host == NULL || s->host[table] < 0 ||
           r / s->t->devices_per_host == s->host[table];
}

static struct ns_level *level_at(const struct ns *s, uint32_t table,
                                 int32_t level)
{
    return &s->lv[(size_t)level * s->ntables + table];
}

/* The cached level of a piece, made on first use (main thread only). */
static struct ns_level *ns_level(struct ns *s, uint32_t table, int32_t level)
{
    struct ns_level *lv = level_at(s, table, level);

    if (!lv->ready) {
        const struct table *tb = &s->tables[table];
        float z[NET_H2];
        int o;

        lv->cols = tb->dim >> level;
        net_projected(s->net, s->o->memo, tb, lv->cols, lv->proj);
        net_head_init(s->net, z);
        for (o = 0; o < NET_H2; o++)
            z[o] += lv->proj[o];
        lv->tier_ms = tier_shard_ms(
            tb,
            &(struct shard){.col_width = lv->cols,
                            .scheme = SCHEME_TW,
                            .tier = tb->tier,
                            .cache_load_factor = tb->cache_load_factor},
            s->t);
        lv->ms = net_head_z(s->net, z) * s->scale + lv->tier_ms;
        lv->bytes = shard_bytes(tb, lv->cols, s->o->optimizer);
        lv->ready = true;
    }
    return lv;
}

static const struct ns_level *piece_level(const struct ns *s,
                                          const struct ns_piece *p)
{
    return level_at(s, p->table, p->level);
}

/* splitmix64: a well-mixed hash of one piece; a state's key is the sum over
 * its pieces, which does not depend on their order. */
static uint64_t piece_hash(uint32_t table, int32_t level)
{
    uint64_t x = ((uint64_t)table << 8 | (uint64_t)level) + 0x9E3779B97F4A7C15u;

    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9u;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBu;
    return x ^ (x >> 31);
}

/* Inserts key; false when it was already there. */
static bool seen_insert(struct ns *s, uint64_t key)
{
    size_t i;

    if (key == 0)
        key = 1;
    if (2 * (s->seen_n + 1) > s->seen_cap) {
        size_t ncap = s->seen_cap ? 2 * s->seen_cap : 1024, k;
        uint64_t *nk = calloc(ncap, sizeof(*nk));

        if (!nk)
            return true; /* no memory for dedup: score it again */
        for (k = 0; k < s->seen_cap; k++) {
            if (s->seen[k] == 0)
                continue;
            for (i = s->seen[k] & (ncap - 1); nk[i]; i = (i + 1) & (ncap - 1))
                ;
            nk[i] = s->seen[k];
        }
        free(s->seen);
        s->seen = nk;
        s->seen_cap = ncap;
    }
    for (i = key & (s->seen_cap - 1); s->seen[i];
         i = (i + 1) & (s->seen_cap - 1))
        if (s->seen[i] == key)
            return false;
    s->seen[i] = key;
    s->seen_n++;
    return true;
}

/* Greedy order: costliest first, then larger, then table and level. */
static int sort_cmp(const void *a, const void *b)
{
    const struct ns_sort *x = a, *y = b;

    if (x->ms != y->ms)
        return x->ms > y->ms ? -1 : 1;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    if (x->table != y->table)
        return x->table < y->table ? -1 : 1;
    if (x->level != y->level)
        return x->level < y->level ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* ------------------------------------------------------------------------ */
/* Devices                                                                   */

/* z += p and z -= p over the head's NET_H2 pre-activations (what placing
 * and removing a piece costs): in vectors of four floats where the
 * compiler has them, with the same results as the scalar loop. */
#if defined(__GNUC__)
typedef float ns_v4 __attribute__((vector_size(16)));

static void vec_add(float *restrict z, const float *restrict p)
{
    int o;

    for (o = 0; o < NET_H2; o += 4) {
        ns_v4 a, b;

        memcpy(&a, z + o, sizeof(a));
        memcpy(&b, p + o, sizeof(b));
        a += b;
        memcpy(z + o, &a, sizeof(a));
    }
}

static void vec_sub(float *restrict z, const float *restrict p)
{
    int o;

    for (o = 0; o < NET_H2; o += 4) {
        ns_v4 a, b;

        memcpy(&a, z + o, sizeof(a));
        memcpy(&b, p + o, sizeof(b));
        a -= b;
        memcpy(z + o, &a, sizeof(a));
    }
}
#else
static void vec_add(float *restrict z, const float *restrict p)
{
    int o;

    for (o = 0; o < NET_H2; o++)
        z[o] += p[o];
}

static void vec_sub(float *restrict z, const float *restrict p)
{
    int o;

    for (o = 0; o < NET_H2; o++)
        z[o] -= p[o];
}
#endif

/* Heap order of devices: least compute, then least memory, then lower id
 * (the original's tie-breaks). */
static bool dev_less(const struct ns_devs *d, int32_t a, int32_t b)
{
    if (d->raw[a] != d->raw[b])
        return d->raw[a] < d->raw[b];
    if (d->mem[a] != d->mem[b])
        return d->mem[a] < d->mem[b];
    return a < b;
}

/* Node i from its two children. */
static void tree_pull(struct ns_devs *d, int32_t i)
{
    int32_t l = 2 * i, r = l + 1, a = d->least[l], b = d->least[r];

    d->least[i] = a < 0 ? b : b < 0 ? a : dev_less(d, b, a) ? b : a;
    d->room[i] = d->room[l] > d->room[r] ? d->room[l] : d->room[r];
    d->lowdim[i] = d->lowdim[l] < d->lowdim[r] ? d->lowdim[l] : d->lowdim[r];
}

/* Device r's leaf from its figures (or emptied: out of this run), then
 * the path to the root.  Nothing without a tree. */
static inline void tree_set(const struct ns *s, struct ns_devs *d, int32_t r,
                            bool out)
{
    int32_t i = d->size + r;
    uint64_t cap;

    if (d->size == 0)
        return;
    cap = s->devmem[r];
    d->least[i] = out ? -1 : r;
    d->room[i] = out || d->mem[r] > cap ? 0 : cap - d->mem[r];
    d->lowdim[i] = out ? INT32_MAX : d->dim[r];
    for (i /= 2; i > 0; i /= 2)
        tree_pull(d, i);
}

static void devs_reset(const struct ns *s, struct ns_devs *d)
{
    int32_t r, i;

    for (r = 0; r < s->n; r++) {
        net_head_init(s->net, d->z + (size_t)r * NET_H2);
        d->raw[r] = -INFINITY;
    }
    memset(d->mem, 0, (size_t)s->n * sizeof(*d->mem));
    memset(d->tier, 0, (size_t)s->n * sizeof(*d->tier));
    memset(d->dim, 0, (size_t)s->n * sizeof(*d->dim));
    memset(d->count, 0, (size_t)s->n * sizeof(*d->count));
    for (i = 0; i < d->size; i++) {
        bool real = i < s->n;

        d->least[d->size + i] = real ? i : -1;
        d->room[d->size + i] = real ? topology_mem(s->t, i) : 0;
        d->lowdim[d->size + i] = real ? 0 : INT32_MAX;
    }
    for (i = d->size - 1; i > 0; i--)
        tree_pull(d, i);
}

static void devs_copy(const struct ns *s, struct ns_devs *dst,
                      const struct ns_devs *src)
{
    size_t n = (size_t)s->n, t = 2 * (size_t)src->size;

    memcpy(dst->z, src->z, n * NET_H2 * sizeof(*dst->z));
    memcpy(dst->raw, src->raw, n * sizeof(*dst->raw));
    memcpy(dst->tier, src->tier, n * sizeof(*dst->tier));
    memcpy(dst->mem, src->mem, n * sizeof(*dst->mem));
    memcpy(dst->dim, src->dim, n * sizeof(*dst->dim));
    memcpy(dst->count, src->count, n * sizeof(*dst->count));
    memcpy(dst->least, src->least, t * sizeof(*dst->least));
    memcpy(dst->room, src->room, t * sizeof(*dst->room));
    memcpy(dst->lowdim, src->lowdim, t * sizeof(*dst->lowdim));
}

/* Adds (sign +1) or removes (-1) a piece's load on device r. */
static void devs_apply(const struct ns *s, struct ns_devs *d, int32_t r,
                       const struct ns_level *lv, int sign)
{
    float *z = d->z + (size_t)r * NET_H2;

    if (sign > 0)
        vec_add(z, lv->proj);
    else
        vec_sub(z, lv->proj);
    d->count[r] += sign;
    d->mem[r] = sign > 0 ? d->mem[r] + lv->bytes : d->mem[r] - lv->bytes;
    d->dim[r] += sign * lv->cols;
    d->tier[r] += sign * lv->tier_ms;
    /* The raw head orders devices as their costs do (the activation and
     * the batch scale are monotone); costs are made from it when scored.
     * The host-link time adds to the cost: then the cost is the key. */
    if (d->count[r] == 0)
        d->raw[r] = -INFINITY;
    else if (s->tiered)
        d->raw[r] = net_activate(s->net, net_head_raw(s->net, z)) * s->scale +
                    d->tier[r];
    else
        d->raw[r] = net_head_raw(s->net, z);
    tree_set(s, d, r, false);
}

/* The plan cost of w's devices; leaves compute and comm in w. */
static double devs_plan_ms(const struct ns *s, struct ns_work *w)
{
    int32_t r;

    for (r = 0; r < s->n; r++)
        w->comp[r] = w->dv.count[r] == 0 ? 0
                     : s->tiered
                         ? w->dv.raw[r]
                         : net_activate(s->net, w->dv.raw[r]) * s->scale;
    return cost_plan_ms(s->t, w->comp, w->dv.dim, s->fixed_fwd, s->fixed_bwd,
                        w->fwd, w->bwd);
}

/* ------------------------------------------------------------------------ */
/* Table-wise greedy grid search                                             */

/*
 * The cap refused a device (or a subtree of them) that would take the
 * piece at a cap of `dims`: lowers *next_cap, and on the run's first
 * refusal snapshots the devices as they are before piece k.  Recorded for
 * every refused subtree whose least device could come before the one
 * chosen: at most as large a next cap, at most as late a snapshot as the
 * devices one by one would give (both are conservative: a looser cap then
 * runs again, or resumes earlier, but never differs from a full run).
 */
static void refused(const struct ns *s, struct ns_work *w, size_t k,
                    int64_t dims, double *next_cap)
{
    if ((double)dims < *next_cap)
        *next_cap = (double)dims;
    if (w->snap_taken)
        return;
    devs_copy(s, &w->snap, &w->dv);
    w->snap_k = k;
    w->snap_taken = true;
}

/*
 * tree_pick() for a few devices (no tree: NS_SCAN_MAX or fewer): one pass
 * over them, each refused one that comes before the chosen one recorded.
 * The best so far is kept in locals: devices come in id order, so a later
 * one is less only by (raw, mem), dev_less()'s id tie-break never taken.
 */
static int32_t scan_pick(const struct ns *s, struct ns_work *w, size_t k,
                         const struct ns_sort *it, int64_t dim_lim,
                         double *next_cap, int32_t lo, int32_t hi)
{
    const struct ns_devs *d = &w->dv;
    int32_t r, best = -1;
    /* Beaten by any device (raw is finite or -inf when empty). */
    double best_raw = INFINITY;
    uint64_t best_mem = UINT64_MAX;

    for (r = lo; r < hi; r++) {
        double raw = d->raw[r];
        uint64_t mem = d->mem[r];

        if (raw > best_raw || (raw == best_raw && mem >= best_mem) ||
            mem + it->bytes > s->devmem[r])
            continue;
        if ((int64_t)d->dim[r] + it->cols > dim_lim) {
            refused(s, w, k, (int64_t)d->dim[r] + it->cols, next_cap);
            continue;
        }
        best = r;
        best_raw = raw;
        best_mem = mem;
    }
    return best;
}

/*
 * The device piece k goes to: the least (raw, mem, id) of the devices with
 * room for its bytes and its columns under dim_cap, found in the tree
 * best-first, pruning subtrees that cannot hold it or cannot beat the best
 * found.  -1 when none can take it.
 */
static int32_t tree_pick(const struct ns *s, struct ns_work *w, size_t k,
                         const struct ns_sort *it, int64_t dim_lim,
                         double *next_cap)
{
    struct ns_devs *d = &w->dv;
    int32_t *stack = w->stack, top = 0, best = -1;

    if (d->size == 0)
        return scan_pick(s, w, k, it, dim_lim, next_cap, 0, s->n);
    stack[top++] = 1;
    while (top > 0) {
        int32_t i = stack[--top], r = d->least[i];

        if (r < 0 || (best >= 0 && !dev_less(d, r, best)) ||
            d->room[i] < it->bytes)
            continue;
        if ((int64_t)d->lowdim[i] + it->cols > dim_lim) {
            refused(s, w, k, (int64_t)d->lowdim[i] + it->cols, next_cap);
            continue;
        }
        if (i >= d->size) { /* a leaf: device r itself, and it fits */
            best = r;
            continue;
        }
        /* The child with the lesser device last, so it is looked at
         * first; the other only if it may still beat what that gives. */
        if (d->least[2 * i] >= 0 && d->least[2 * i + 1] >= 0 &&
            dev_less(d, d->least[2 * i + 1], d->least[2 * i])) {
            stack[top++] = 2 * i;
            stack[top++] = 2 * i + 1;
        } else {
            stack[top++] = 2 * i + 1;
            stack[top++] = 2 * i;
        }
    }
    return best;
}

/* Asks for the next piece's projection while this one is placed: the
 * levels of a few thousand tables outgrow the core's cache. */
static void prefetch_level(const struct ns_level *lv)
{
#if defined(__GNUC__)
    const char *p = (const char *)lv->proj;
    size_t o;

    for (o = 0; o < sizeof(lv->proj); o += 64)
        __builtin_prefetch(p + o);
#else
    (void)lv;
#endif
}

/*
 * One greedy placement of the sorted free pieces under a dim cap of
 * cap_scale x the mean (0: no cap), starting from the base devices: each
 * piece goes to the least loaded device with room (neuroshard.md 6.3).  With
 * `resume`, starts from the snapshot the previous (tighter) run took at its
 * first refusal: up to there this run is the same. Writes w->assign; returns
 * the plan cost or INFINITY.  *next_cap is the smallest dim cap at which any
 * refused device would have been accepted (INFINITY: the cap refused none);
 * every cap below it replays this run.
 */
static double ns_greedy(const struct ns *s, struct ns_work *w, size_t np,
                        double cap_scale, bool resume, double *next_cap)
{
    /* The columns a device may hold: cap_scale x the mean, rounded down
     * (a device's columns are whole), or no limit. */
    int64_t dim_lim =
        cap_scale > 0 ? (int64_t)floor(cap_scale * s->dim_mean) : INT64_MAX;
    struct ns_devs *d = &w->dv;
    size_t k = 0;

    *next_cap = INFINITY;
    if (resume && w->snap_taken) {
        devs_copy(s, d, &w->snap);
        k = w->snap_k;
    } else {
        devs_copy(s, d, &s->base);
    }
    w->snap_taken = false;
    w->greedy_runs++;
    for (; k < np; k++) {
        const struct ns_sort *it = &w->order[k];
        const struct ns_level *lv = level_at(s, it->table, it->level);
        int32_t h = s->host != NULL ? s->host[it->table] : -1,
                L = s->t->devices_per_host, best;

        if (k + 1 < np)
            prefetch_level(level_at(s, it[1].table, it[1].level));
        /* A table held to a host: its few devices, scanned. */
        best = h >= 0 ? scan_pick(s, w, k, it, dim_lim, next_cap, h * L,
                                  (h + 1) * L)
                      : tree_pick(s, w, k, it, dim_lim, next_cap);

        if (best < 0)
            return INFINITY;
        w->evaluations++;
        devs_apply(s, d, best, lv, +1);
        w->assign[it->idx] = best;
        /* Full for every piece left, under any cap: out of the run, so its
         * low load does not lead the walk to it again and again. */
        if (k + 1 < np && d->mem[best] + w->sfx_bytes[k + 1] > s->devmem[best])
            tree_set(s, d, best, true);
    }
    return devs_plan_ms(s, w);
}

static struct ns_sort sort_key(const struct ns *s, const struct ns_state *st,
                               size_t k)
{
    const struct ns_level *lv = piece_level(s, &st->pc[k]);

    return (struct ns_sort){lv->ms,          lv->bytes, st->pc[k].table,
                            st->pc[k].level, lv->cols,  k};
}

/*
 * w->order: st's free (not pinned) pieces in greedy order; returns their
 * count.  Pieces [0, ntables) are the tables, at level 0 unless split; the
 * root order (all at level 0) is sorted once, and a state merges its unsplit
 * tables, in that order, with its few split pieces, sorted: O(pieces)
 * instead of a sort.
 */
static size_t ns_order(const struct ns *s, struct ns_work *w,
                       const struct ns_state *st)
{
    struct ns_sort *few = w->few;
    size_t nfew = 0, nfree = st->np - s->npinned, k, i = 0, j = 0;

    if (!s->root_order) {
        for (k = 0, j = 0; k < st->np; k++)
            if (!piece_pinned(s, k))
                w->order[j++] = sort_key(s, st, k);
        qsort(w->order, nfree, sizeof(*w->order), sort_cmp);
        return nfree;
    }
    for (k = 0; k < st->np; k++)
        if (k >= s->ntables || st->pc[k].level != 0)
            few[nfew++] = sort_key(s, st, k);
    qsort(few, nfew, sizeof(*few), sort_cmp);
    for (k = 0; k < nfree; k++) {
        while (i < s->nroot && st->pc[s->root_order[i].idx].level != 0)
            i++;
        if (i < s->nroot &&
            (j == nfew || sort_cmp(&s->root_order[i], &few[j]) < 0))
            w->order[k] = s->root_order[i++];
        else
            w->order[k] = few[j++];
    }
    return nfree;
}

/* Table-wise greedy grid search of one state: st->cost and st->assign. */
static void ns_table_wise(const struct ns *s, struct ns_work *w,
                          struct ns_state *st)
{
    double next_cap = INFINITY;
    size_t nfree = ns_order(s, w, st), k;
    int step;

    for (k = nfree; k-- > 0;) {
        uint64_t bytes = w->order[k].bytes;

        w->sfx_bytes[k] = k + 1 == nfree || bytes < w->sfx_bytes[k + 1]
                              ? bytes
                              : w->sfx_bytes[k + 1];
    }
    w->states++;
    st->cost = INFINITY;
    if (s->n > NS_GRID_DEVICES) {
        st->cost = ns_greedy(s, w, nfree, 0, false, &next_cap);
        memcpy(st->assign, w->assign, st->np * sizeof(*st->assign));
        return;
    }
    for (step = 0; step < NS_GRID_STEPS;) {
        double c =
            ns_greedy(s, w, nfree, 1.0 + 0.05 * step, step > 0, &next_cap);

        if (c < st->cost) {
            st->cost = c;
            memcpy(st->assign, w->assign, st->np * sizeof(*st->assign));
        }
        /* Skip the caps that refuse the same devices: they replay it. */
        for (step++; step < NS_GRID_STEPS &&
                     (1.0 + 0.05 * step) * s->dim_mean < next_cap;
             step++)
            ;
    }
    /* Where every capped run failed, the uncapped greedy may still fit. */
    if (st->cost == INFINITY && next_cap < INFINITY) {
        double c = ns_greedy(s, w, nfree, 0, true, &next_cap);

        if (c < INFINITY) {
            st->cost = c;
            memcpy(st->assign, w->assign, st->np * sizeof(*st->assign));
        }
    }
}

/* ------------------------------------------------------------------------ */
/* States and the beam                                                       */

static int state_alloc(struct ns_state *st, size_t cap)
{
    st->pc = malloc(cap * sizeof(*st->pc));
    st->assign = malloc(cap * sizeof(*st->assign));
    st->np = 0;
    st->cost = INFINITY;
    st->key = 0;
    return st->pc && st->assign ? 0 : SD_ENOMEM;
}

static void state_free(struct ns_state *st)
{
    free(st->pc);
    free(st->assign);
}

static void state_copy(struct ns_state *dst, const struct ns_state *src)
{
    memcpy(dst->pc, src->pc, src->np * sizeof(*src->pc));
    memcpy(dst->assign, src->assign, src->np * sizeof(*src->assign));
    dst->np = src->np;
    dst->key = src->key;
    dst->cost = src->cost;
}

/* Loads a state's placement into w's devices. */
static void devs_load(const struct ns *s, struct ns_work *w,
                      const struct ns_state *st)
{
    size_t k;

    /* The base holds the pinned tables and the scheme pass's shards. */
    devs_copy(s, &w->dv, &s->base);
    for (k = 0; k < st->np; k++)
        if (!piece_pinned(s, k))
            devs_apply(s, &w->dv, st->assign[k], piece_level(s, &st->pc[k]),
                       +1);
}

/* The device the others wait for: max compute + backward comm. */
static int32_t critical_device(const struct ns *s, struct ns_work *w)
{
    int32_t r, c = 0;

    devs_plan_ms(s, w);
    for (r = 1; r < s->n; r++)
        if (w->comp[r] + w->bwd[r] > w->comp[c] + w->bwd[c])
            c = r;
    return c;
}

/*
 * Marks in `pick` the pieces of st worth splitting: the k largest and the k
 * costliest splittable pieces (the original's candidates), and the k
 * costliest on the critical device of its best placement.
 */
static void pick_candidates(struct ns *s, const struct ns_state *st, bool *pick)
{
    int32_t k = s->candidates, crit = -1, round, taken;
    size_t i;

    memset(pick, 0, st->np * sizeof(*pick));
    if (st->cost < INFINITY) {
        devs_load(s, &s->work[0], st);
        crit = critical_device(s, &s->work[0]);
    }
    for (round = 0; round < (crit < 0 ? 2 : 3); round++) {
        /* k passes of a linear scan for the best unpicked: k is small. */
        for (taken = 0; taken < k; taken++) {
            size_t best = st->np;

            for (i = 0; i < st->np; i++) {
                const struct ns_piece *p = &st->pc[i];
                const struct ns_level *lv, *bl;

                if (pick[i] || p->level + 1 >= s->nlevels[p->table] ||
                    piece_pinned(s, i))
                    continue;
                if (round == 2 && st->assign[i] != crit)
                    continue;
                lv = piece_level(s, p);
                if (best == st->np) {
                    best = i;
                    continue;
                }
                bl = piece_level(s, &st->pc[best]);
                if (round == 0 ? lv->bytes > bl->bytes : lv->ms > bl->ms)
                    best = i;
            }
            if (best == st->np)
                break;
            pick[best] = true;
        }
    }
}

/* Keeps the w best children in `beam`, sorted by cost; on ties the earlier
 * stays ahead. */
static void beam_offer(struct ns_state *beam, int32_t *nbeam, int32_t w,
                       const struct ns_state *child)
{
    int32_t pos = *nbeam, j, last = *nbeam < w ? *nbeam : w - 1;
    struct ns_state spare;

    while (pos > 0 && child->cost < beam[pos - 1].cost)
        pos--;
    if (pos >= w)
        return;
    /* Shift down, recycling the buffers of the one that falls off. */
    spare = beam[last];
    for (j = last; j > pos; j--)
        beam[j] = beam[j - 1];
    beam[pos] = spare;
    state_copy(&beam[pos], child);
    if (*nbeam < w)
        (*nbeam)++;
}

/* Splits piece i of parent into child; makes the new level's cache. */
static void make_child(struct ns *s, const struct ns_state *parent, size_t i,
                       struct ns_state *child)
{
    struct ns_piece p = parent->pc[i];

    memcpy(child->pc, parent->pc, parent->np * sizeof(*parent->pc));
    child->pc[i].level = p.level + 1;
    child->pc[parent->np] = (struct ns_piece){p.table, p.level + 1};
    child->np = parent->np + 1;
    child->key = parent->key - piece_hash(p.table, p.level) +
                 2 * piece_hash(p.table, p.level + 1);
    child->cost = INFINITY;
    ns_level(s, p.table, p.level + 1);
}

/* The children of one level, scored by thread `id` of `nthreads`. */
struct ns_batch {
    struct ns *s;
    struct ns_state *kids;
    size_t nkids;
    int id;
};

static void *score_kids(void *arg)
{
    struct ns_batch *b = arg;
    size_t i;

    for (i = (size_t)b->id; i < b->nkids; i += (size_t)b->s->nthreads) {
        if (out_of_time(b->s))
            break; /* unscored children keep cost INFINITY */
        ns_table_wise(b->s, &b->s->work[b->id], &b->kids[i]);
    }
    return NULL;
}

/* Scores kids[0..n) on the worker threads (this one included). */
static void score_all(struct ns *s, struct ns_state *kids, size_t n)
{
    struct ns_batch b[NS_THREADS_MAX];
    pthread_t th[NS_THREADS_MAX];
    bool started[NS_THREADS_MAX] = {false};
    int t;

    for (t = 0; t < s->nthreads; t++)
        b[t] = (struct ns_batch){s, kids, n, t};
    for (t = 1; t < s->nthreads && (size_t)t < n; t++)
        started[t] = pthread_create(&th[t], NULL, score_kids, &b[t]) == 0;
    score_kids(&b[0]);
    for (t = 1; t < s->nthreads && (size_t)t < n; t++) {
        if (started[t])
            pthread_join(th[t], NULL);
        else
            score_kids(&b[t]); /* no thread: do its share here */
    }
}

/* Piece placements scored so far, on all threads. */
static int64_t evaluations(const struct ns *s)
{
    int64_t n = 0;
    int k;

    for (k = 0; k < s->nthreads; k++)
        n += s->work[k].evaluations;
    return n;
}

/*
 * n states of cap pieces in one block (*block, free() it, and free()
 * *out): a beam's states are made per search, and one allocation each
 * showed in the daemon's profile.
 */
static int states_alloc(size_t n, size_t cap, struct ns_state **out,
                        void **block)
{
    struct ns_state *st = calloc(n, sizeof(*st));
    char *b = malloc(n * cap * (sizeof(*st->pc) + sizeof(*st->assign)));
    size_t i;

    if (!st || !b) {
        free(st);
        free(b);
        return SD_ENOMEM;
    }
    for (i = 0; i < n; i++) {
        st[i].pc = (struct ns_piece *)(void *)(b + i * cap * sizeof(*st->pc));
        st[i].cost = INFINITY;
    }
    b += n * cap * sizeof(*st->pc);
    for (i = 0; i < n; i++)
        st[i].assign = (int32_t *)(void *)(b + i * cap * sizeof(*st->assign));
    *out = st;
    *block = b - n * cap * sizeof(*st->pc);
    return 0;
}

static int ns_beam(struct ns *s, struct ns_state *best)
{
    int32_t w = s->o->beam_width, nbeam = 1, nnext, level, b, idle = 0;
    size_t maxkids = (size_t)w * 3 * (size_t)s->candidates, nkids, i;
    int64_t budget = s->o->beam_evaluations, spent = 0, before;
    double per_kid; /* placements one child costs: the roots' to start */
    struct ns_state *all = NULL, *beam, *next, *kids, *tmp;
    void *block = NULL;
    bool *pick = malloc(s->cap * sizeof(*pick));
    int rv = SD_ENOMEM;

    if (!pick ||
        states_alloc(2 * (size_t)w + maxkids, s->cap, &all, &block) != 0)
        goto out_free;
    beam = all;
    next = all + w;
    kids = all + 2 * w;

    per_kid = (double)evaluations(s) /
              (double)(s->work[0].states > 0 ? s->work[0].states : 1);
    state_copy(&beam[0], best);
    for (level = 0; level < s->o->beam_depth; level++) {
        double was = best->cost;

        nkids = 0;
        for (b = 0; b < nbeam; b++) {
            pick_candidates(s, &beam[b], pick);
            for (i = 0; i < beam[b].np; i++) {
                if (!pick[i])
                    continue;
                make_child(s, &beam[b], i, &kids[nkids]);
                if (seen_insert(s, kids[nkids].key))
                    nkids++;
            }
        }
        /* Placements are counted, not timed: the same plan on any
         * machine.  A level's cost is estimated from the last one's. */
        if (budget > 0 && spent + per_kid * (double)nkids > (double)budget)
            break;
        before = evaluations(s);
        score_all(s, kids, nkids);
        spent += evaluations(s) - before;
        if (nkids > 0)
            per_kid = (double)(evaluations(s) - before) / (double)nkids;
        nnext = 0;
        for (i = 0; i < nkids; i++) {
            beam_offer(next, &nnext, w, &kids[i]);
            if (kids[i].cost < best->cost)
                state_copy(best, &kids[i]);
        }
        s->st->levels = level + 1;
        if (out_of_time(s)) {
            s->st->budget_exhausted = true;
            break;
        }
        idle = best->cost < was * (1 - NS_GAIN) ? 0 : idle + 1;
        if (nnext == 0 || idle >= NS_PATIENCE)
            break;
        tmp = beam;
        beam = next;
        next = tmp;
        nbeam = nnext;
    }
    rv = 0;

out_free:
    free(pick);
    free(block);
    free(all);
    return rv;
}

/* ------------------------------------------------------------------------ */
/* Local search                                                              */

/* One device's compute ms (host-link time included) with a added and b
 * taken away (either NULL). */
static double comp_with(const struct ns *s, const struct ns_work *w, int32_t r,
                        const struct ns_level *a, const struct ns_level *b)
{
    const float *z = w->dv.z + (size_t)r * NET_H2;
    float t[NET_H2];
    int o, count = w->dv.count[r] + (a != NULL) - (b != NULL);

    if (count == 0)
        return 0;
    for (o = 0; o < NET_H2; o++)
        t[o] = z[o] + (a ? a->proj[o] : 0) - (b ? b->proj[o] : 0);
    return net_activate(s->net, net_head_raw(s->net, t)) * s->scale +
           w->dv.tier[r] + (a ? a->tier_ms : 0) - (b ? b->tier_ms : 0);
}

/*
 * The plan cost after moving piece a from device x to y and, if b is not
 * NULL, piece b from y to x.  Needs w->comp current; only the two devices
 * are re-scored, and nothing is changed.
 */
static double try_step(const struct ns *s, struct ns_work *w,
                       const struct ns_level *a, int32_t x, int32_t y,
                       const struct ns_level *b)
{
    double cx = w->comp[x], cy = w->comp[y], c;
    int32_t dx = w->dv.dim[x], dy = w->dv.dim[y];
    int32_t moved = a->cols - (b ? b->cols : 0);

    w->comp[x] = comp_with(s, w, x, b, a);
    w->comp[y] = comp_with(s, w, y, a, b);
    w->dv.dim[x] -= moved;
    w->dv.dim[y] += moved;
    c = cost_plan_ms(s->t, w->comp, w->dv.dim, s->fixed_fwd, s->fixed_bwd,
                     w->fwd, w->bwd);
    w->comp[x] = cx;
    w->comp[y] = cy;
    w->dv.dim[x] = dx;
    w->dv.dim[y] = dy;
    return c;
}

/* The best step of a local-search round: piece i to device `to` and, if j
 * is not SIZE_MAX, piece j to i's device; the plan cost after it. */
struct ns_step {
    size_t i, j;
    int32_t to;
    double cost;
};

/*
 * One round of the critical-device neighbourhood: moves of pieces off the
 * critical device to one of the NS_TARGETS least ready devices, and swaps
 * with pieces of the least ready one.  Improves *b.
 */
static void round_critical(const struct ns *s, struct ns_work *w,
                           const struct ns_state *st, struct ns_step *b)
{
    const struct ns_devs *d = &w->dv;
    const struct topology *t = s->t;
    int32_t crit, tg[NS_TARGETS], ntg = 0, r, q;
    double ready[NS_TARGETS];
    size_t i, j;

    crit = critical_device(s, w);
    /* The least ready devices, least first (insertion: NS_TARGETS is
     * tiny); critical_device() left this state's comm in w->bwd. */
    for (r = 0; r < s->n; r++) {
        double rd = w->comp[r] + w->bwd[r];

        if (r == crit)
            continue;
        for (q = ntg; q > 0 && rd < ready[q - 1]; q--)
            if (q < NS_TARGETS) {
                tg[q] = tg[q - 1];
                ready[q] = ready[q - 1];
            }
        if (q < NS_TARGETS) {
            tg[q] = r;
            ready[q] = rd;
            if (ntg < NS_TARGETS)
                ntg++;
        }
    }
    if (ntg == 0)
        return;
    for (i = 0; i < st->np; i++) {
        const struct ns_level *li = piece_level(s, &st->pc[i]);

        if (st->assign[i] != crit || piece_pinned(s, i))
            continue;
        for (q = 0; q < ntg; q++) {
            double c;

            if (d->mem[tg[q]] + li->bytes > topology_mem(t, tg[q]) ||
                !device_ok(s, st->pc[i].table, tg[q]))
                continue;
            c = try_step(s, w, li, crit, tg[q], NULL);
            if (c < b->cost)
                *b = (struct ns_step){i, SIZE_MAX, tg[q], c};
        }
        for (j = 0; j < st->np; j++) {
            const struct ns_level *lj = piece_level(s, &st->pc[j]);
            double c;

            if (st->assign[j] != tg[0] || piece_pinned(s, j) ||
                !device_ok(s, st->pc[i].table, tg[0]) ||
                !device_ok(s, st->pc[j].table, crit) ||
                d->mem[tg[0]] - lj->bytes + li->bytes >
                    topology_mem(t, tg[0]) ||
                d->mem[crit] - li->bytes + lj->bytes > topology_mem(t, crit))
                continue;
            c = try_step(s, w, li, crit, tg[0], lj);
            if (c < b->cost)
                *b = (struct ns_step){i, j, tg[0], c};
        }
    }
}

/*
 * One round of the all-pairs neighbourhood: every move of a piece to any
 * other device with room, every swap of two pieces of different devices.
 * Under a learned exchange the all-to-all depends on every device's columns
 * and the forward wait on every device's readiness, so a step between two
 * devices neither of which is critical can lower the plan cost (widths
 * evened out, a late device made earlier).  Improves *b.
 */
static void round_all_pairs(const struct ns *s, struct ns_work *w,
                            const struct ns_state *st, struct ns_step *b)
{
    const struct ns_devs *d = &w->dv;
    const struct topology *t = s->t;
    size_t i, j;
    int32_t y;

    devs_plan_ms(s, w); /* w->comp current for try_step() */
    for (i = 0; i < st->np; i++) {
        const struct ns_level *li = piece_level(s, &st->pc[i]);
        int32_t x = st->assign[i];

        if (piece_pinned(s, i))
            continue;
        for (y = 0; y < s->n; y++) {
            double c;

            if (y == x || d->mem[y] + li->bytes > topology_mem(t, y) ||
                !device_ok(s, st->pc[i].table, y))
                continue;
            c = try_step(s, w, li, x, y, NULL);
            if (c < b->cost)
                *b = (struct ns_step){i, SIZE_MAX, y, c};
        }
        for (j = i + 1; j < st->np; j++) {
            const struct ns_level *lj = piece_level(s, &st->pc[j]);
            int32_t yj = st->assign[j];
            double c;

            if (yj == x || piece_pinned(s, j) ||
                !device_ok(s, st->pc[i].table, yj) ||
                !device_ok(s, st->pc[j].table, x) ||
                d->mem[yj] - lj->bytes + li->bytes > topology_mem(t, yj) ||
                d->mem[x] - li->bytes + lj->bytes > topology_mem(t, x))
                continue;
            c = try_step(s, w, li, x, yj, lj);
            if (c < b->cost)
                *b = (struct ns_step){i, j, yj, c};
        }
    }
}

/*
 * The final local search: the best step of a round while it lowers the
 * plan cost by 0.01 %.  The neighbourhood is all pairs (round_all_pairs())
 * when the topology's exchange is a learned comm model and a round is at
 * most NS_WIDE_STEPS steps; else moves off the critical device
 * (round_critical()), which is what an alpha-beta exchange, almost flat in
 * the widths on a fast link, needs, and what scales to thousands of pieces.
 */
static void ns_local(struct ns *s, struct ns_state *st)
{
    struct ns_work *w = &s->work[0];
    struct ns_devs *d = &w->dv;
    bool wide = s->t->comm != NULL &&
                st->np * (st->np / 2 + (size_t)s->n) <= NS_WIDE_STEPS;
    int iter;

    if (st->cost == INFINITY)
        return;
    devs_load(s, w, st);
    for (iter = 0; iter < 256; iter++) {
        /* Steps must gain 0.01 %: a long tail of tinier ones costs more
         * search time than it saves training time. */
        struct ns_step b = {SIZE_MAX, SIZE_MAX, -1,
                            devs_plan_ms(s, w) * (1 - 1e-4)};
        int32_t from;

        if (out_of_time(s)) { /* the time budget holds here too */
            s->st->budget_exhausted = true;
            break;
        }
        if (wide)
            round_all_pairs(s, w, st, &b);
        else
            round_critical(s, w, st, &b);
        if (b.i == SIZE_MAX)
            break;
        from = st->assign[b.i];
        devs_apply(s, d, from, piece_level(s, &st->pc[b.i]), -1);
        devs_apply(s, d, b.to, piece_level(s, &st->pc[b.i]), +1);
        st->assign[b.i] = b.to;
        if (b.j != SIZE_MAX) {
            devs_apply(s, d, b.to, piece_level(s, &st->pc[b.j]), -1);
            devs_apply(s, d, from, piece_level(s, &st->pc[b.j]), +1);
            st->assign[b.j] = from;
        }
        s->st->moves++;
    }
    /* Re-derive the cost from scratch, free of incremental float drift. */
    devs_load(s, w, st);
    st->cost = devs_plan_ms(s, w);
}

/* ------------------------------------------------------------------------ */
/* Set-up and the entry point                                                */

/* A piece of the no-fit diagnosis: one narrowest slice of a table. */
struct ns_fit {
    uint64_t bytes;
    uint32_t table;
};

static int cmp_fit_desc(const void *a, const void *b)
{
    const struct ns_fit *x = a, *y = b;

    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    return (x->table > y->table) - (x->table < y->table);
}

/* The narrowest level table i may take (0: whole). */
static int32_t narrowest(struct ns *s, size_t i)
{
    return piece_pinned(s, i) || !s->o->column_splits ? 0 : s->nlevels[i] - 1;
}

/*
 * Why nothing fits, naming the table: the one whose narrowest piece
 * exceeds every device, else the first piece that finds no room when the
 * narrowest pieces are placed largest first onto the device with the most
 * room (pinned tables on their devices first); with what would help.
 */
static int no_fit(struct ns *s, struct sd_diag *d)
{
    uint64_t total = 0, cap = 0, largest = s->largest_room, *room;
    struct ns_fit *pieces;
    size_t i, np = 0, k;
    int32_t r, best;
    int rv;

    for (i = 0; i < s->ntables; i++) {
        struct ns_level *lv = ns_level(s, (uint32_t)i, narrowest(s, i));

        if (lv->bytes > largest)
            return sd_diag_set(
                d, SD_ENOSPACE,
                "table \"%s\": even at %d columns it needs "
                "%llu bytes, %llu more than a device has%s",
                s->tables[i].name, (int)lv->cols, (unsigned long long)lv->bytes,
                (unsigned long long)(lv->bytes - largest),
                s->o->column_splits ? ""
                                    : "; allow column splits, or give the "
                                      "devices more memory");
        total += ns_level(s, (uint32_t)i, 0)->bytes;
        np += (size_t)1 << narrowest(s, i);
    }
    for (r = 0; r < s->n; r++)
        cap += topology_mem(s->t, r);
    room = calloc(s->n > 0 ? (size_t)s->n : 1, sizeof(*room));
    pieces = calloc(np ? np : 1, sizeof(*pieces));
    if (room == NULL || pieces == NULL) {
        rv = sd_diag_set(d, SD_ENOSPACE,
                         "no placement fits: the tables need %llu bytes, the "
                         "%d devices have %llu in all",
                         (unsigned long long)total, (int)s->n,
                         (unsigned long long)cap);
        goto out_free;
    }
    for (r = 0; r < s->n; r++) /* beside the pass's shards */
        room[r] = topology_mem(s->t, r) > s->base.mem[r]
                      ? topology_mem(s->t, r) - s->base.mem[r]
                      : 0;
    np = 0;
    for (i = 0; i < s->ntables; i++) {
        uint64_t b = ns_level(s, (uint32_t)i, narrowest(s, i))->bytes;

        if (piece_pinned(s, i)) /* in the base: room[] has it */
            continue;
        for (k = 0; k < (size_t)1 << narrowest(s, i); k++)
            pieces[np++] = (struct ns_fit){b, (uint32_t)i};
    }
    qsort(pieces, np, sizeof(*pieces), cmp_fit_desc);
    for (k = 0; k < np; k++) {
        const struct ns_level *lv =
            ns_level(s, pieces[k].table, narrowest(s, pieces[k].table));

        for (best = 0, r = 1; r < s->n; r++)
            if (room[r] > room[best])
                best = r;
        if (pieces[k].bytes <= room[best]) {
            room[best] -= pieces[k].bytes;
            continue;
        }
        rv = sd_diag_set(
            d, SD_ENOSPACE,
            "no placement fits: table \"%s\" (%llu bytes at %d of its %d "
            "columns) finds no device with room once the larger ones are "
            "placed (the most left is %llu bytes; the tables need %llu bytes, "
            "the %d devices have %llu in all); %s",
            s->tables[pieces[k].table].name,
            (unsigned long long)pieces[k].bytes, (int)lv->cols,
            (int)s->tables[pieces[k].table].dim, (unsigned long long)room[best],
            (unsigned long long)total, (int)s->n, (unsigned long long)cap,
            s->o->column_splits ? "give the devices more memory"
                                : "allow column splits, or give the devices "
                                  "more memory");
        goto out_free;
    }
    rv = sd_diag_set(d, SD_ENOSPACE,
                     "no placement fits: the tables need %llu bytes, the %d "
                     "devices have %llu in all; give the devices more memory",
                     (unsigned long long)total, (int)s->n,
                     (unsigned long long)cap);
out_free:
    free(pieces);
    free(room);
    return rv;
}

/* Leaves of a device tree for n devices: a power of two >= n (>= 2, so
 * the root is an inner node); 0 (no tree: a scan) for NS_SCAN_MAX or
 * fewer. */
static int32_t tree_size(size_t n)
{
    int32_t size = 2;

    if (n <= NS_SCAN_MAX)
        return 0;
    while ((size_t)size < n)
        size *= 2;
    return size;
}

/*
 * size bytes on cache lines of their own (free() them): the threads'
 * scratch arrays are small, and two threads writing one line slowed both.
 */
static void *line_alloc(size_t size)
{
    return aligned_alloc(64, (size + 63) / 64 * 64);
}

static int devs_alloc(struct ns_devs *d, size_t n)
{
    size_t t;

    d->size = tree_size(n);
    t = 2 * (size_t)d->size;
    d->z = line_alloc(n * NET_H2 * sizeof(*d->z));
    d->raw = line_alloc(n * sizeof(*d->raw));
    d->tier = line_alloc(n * sizeof(*d->tier));
    d->mem = line_alloc(n * sizeof(*d->mem));
    d->dim = line_alloc(n * sizeof(*d->dim));
    d->count = line_alloc(n * sizeof(*d->count));
    d->least = line_alloc((t ? t : 1) * sizeof(*d->least));
    d->room = line_alloc((t ? t : 1) * sizeof(*d->room));
    d->lowdim = line_alloc((t ? t : 1) * sizeof(*d->lowdim));
    return d->z && d->raw && d->tier && d->mem && d->dim && d->count &&
                   d->least && d->room && d->lowdim
               ? 0
               : SD_ENOMEM;
}

static void devs_free(struct ns_devs *d)
{
    free(d->z);
    free(d->raw);
    free(d->tier);
    free(d->mem);
    free(d->dim);
    free(d->count);
    free(d->least);
    free(d->room);
    free(d->lowdim);
}

static int work_alloc(struct ns_work *w, size_t n, size_t cap)
{
    if (devs_alloc(&w->dv, n) != 0 || devs_alloc(&w->snap, n) != 0)
        return SD_ENOMEM;
    w->comp = line_alloc(n * sizeof(*w->comp));
    w->fwd = line_alloc(n * sizeof(*w->fwd));
    w->bwd = line_alloc(n * sizeof(*w->bwd));
    /* A best-first walk holds at most two nodes a level. */
    w->stack = line_alloc(2 * 64 * sizeof(*w->stack));
    w->order = line_alloc(cap * sizeof(*w->order));
    w->few = line_alloc(cap * sizeof(*w->few));
    w->assign = line_alloc(cap * sizeof(*w->assign));
    w->sfx_bytes = line_alloc(cap * sizeof(*w->sfx_bytes));
    return w->comp && w->fwd && w->bwd && w->stack && w->order && w->assign &&
                   w->sfx_bytes
               ? 0
               : SD_ENOMEM;
}

static void work_free(struct ns_work *w)
{
    devs_free(&w->dv);
    devs_free(&w->snap);
    free(w->comp);
    free(w->fwd);
    free(w->bwd);
    free(w->stack);
    free(w->order);
    free(w->few);
    free(w->assign);
    free(w->sfx_bytes);
}

/*
 * The level table i must be cut to before any search for its pieces to fit
 * on a device at all (0: it fits whole), as far as the split rule allows.
 * The beam's ten levels cannot reach the 32 pieces of a 400 GB table, so
 * such tables start split.
 */
static int32_t forced_level(const struct ns *s, size_t i)
{
    const struct table *tb = &s->tables[i];
    int32_t lv = 0;

    if (piece_pinned(s, i))
        return 0;
    while (lv + 1 < s->nlevels[i] &&
           shard_bytes(tb, tb->dim >> lv, s->o->optimizer) > s->largest_room)
        lv++;
    return lv;
}

/*
 * The levels the search starts from (column splits allowed): each table
 * cut as far as memory forces (forced_level()), then every piece whose cost
 * alone exceeds what a device carries on average, the root pieces' costs
 * summed over the devices, cut further while the split rule allows.  A
 * table that costs more than a device should carry can never be balanced
 * whole, and on many devices the beam's one split a level would not reach
 * all of them (at 10,000 tables on 1,024 devices, 17 devices held one such
 * table each).
 */
static void root_levels(struct ns *s)
{
    double total = 0, mean;
    size_t i;

    for (i = 0; i < s->ntables; i++) {
        s->forced[i] = forced_level(s, i);
        total += ns_level(s, (uint32_t)i, s->forced[i])->ms *
                 (double)((size_t)1 << s->forced[i]);
    }
    mean = total / (double)s->n;
    for (i = 0; i < s->ntables; i++) {
        int32_t lv = s->forced[i];

        while (!piece_pinned(s, i) && lv + 1 < s->nlevels[i] &&
               ns_level(s, (uint32_t)i, lv)->ms > mean)
            lv++;
        s->presplit[i] = lv;
        s->any_presplit = s->any_presplit || lv > s->forced[i];
    }
}

/*
 * The base devices, beside the pinned tables: the shards the scheme pass
 * fixed (row blocks, replicas) of `all` tables, each with its own features
 * and bytes and no columns in the all-to-all (theirs are its collectives,
 * s->fixed_fwd and s->fixed_bwd).
 */
static void base_fixed(struct ns *s, const struct scheme_pass *sp,
                       const struct table *all)
{
    size_t k;

    s->fixed_fwd = sp->fwd;
    s->fixed_bwd = sp->bwd;
    for (k = 0; k < sp->shards.nshards; k++) {
        const struct shard *sh = &sp->shards.shards[k];
        const struct table *tb = &all[sh->table];
        struct ns_level lv = {.cols = 0, .ready = true};
        struct shard tiered;
        struct table view;

        shard_table(tb, sh, s->n, &view);
        net_projected(s->net, s->o->memo, &view, sh->col_width, lv.proj);
        lv.bytes = shard_block_bytes(tb, sh, s->o->optimizer);
        /* Its tier, as plan_validate() will give it: the table's. */
        tiered = *sh;
        if (tiered.scheme != SCHEME_DP && tiered.tier == TIER_HBM) {
            tiered.tier = tb->tier;
            tiered.cache_load_factor = tb->cache_load_factor;
        }
        lv.tier_ms = tier_shard_ms(tb, &tiered, s->t);
        devs_apply(s, &s->base, sh->device, &lv, +1);
    }
}

/* Constraints on the searched tables: one that may not be split in
 * columns has one level; a host kept in s->host. */
static int ns_constraints(struct ns *s)
{
    const struct table_constraint *c = s->o->constraints;
    int32_t *host;
    size_t i;

    if (c == NULL)
        return 0;
    host = malloc((s->ntables ? s->ntables : 1) * sizeof(*host));
    if (host == NULL)
        return SD_ENOMEM;
    for (i = 0; i < s->ntables; i++) {
        if (!constraint_allows(&c[i], SCHEME_CW))
            s->nlevels[i] = 1;
        host[i] = c[i].host;
    }
    s->host = host;
    return 0;
}

static int ns_init(struct ns *s, const struct table *tables, size_t ntables,
                   const struct topology *t, const struct plan_options *o,
                   struct plan_search_stats *st, const struct scheme_pass *sp,
                   const struct table *all)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t dims = 0;
    size_t i;
    int k;

    memset(s, 0, sizeof(*s));
    clock_gettime(CLOCK_MONOTONIC, &s->t0);
    s->tables = tables;
    s->ntables = ntables;
    s->t = t;
    s->o = o;
    s->net = o->net;
    s->scale = (double)t->batch_size / (double)o->net->batch_size;
    s->n = t->ndevices;
    s->st = st;
    s->pins = o->pins;
    s->lv = calloc(NS_LEVELS_MAX * (ntables ? ntables : 1), sizeof(*s->lv));
    s->nlevels = calloc(ntables ? ntables : 1, sizeof(*s->nlevels));
    s->devmem = malloc((size_t)(s->n > 0 ? s->n : 1) * sizeof(*s->devmem));
    if (!s->lv || !s->nlevels || !s->devmem ||
        devs_alloc(&s->base, (size_t)s->n) != 0)
        return SD_ENOMEM;
    for (k = 0; k < s->n; k++)
        s->devmem[k] = topology_mem(t, k);
    for (i = 0; i < ntables; i++) {
        int32_t lv = table_split_levels(tables[i].dim);

        s->nlevels[i] = lv < NS_LEVELS_MAX ? lv : NS_LEVELS_MAX;
        dims += tables[i].dim;
        s->tiered = s->tiered || tables[i].tier != TIER_HBM;
    }
    for (i = 0; sp != NULL && i < sp->shards.nshards; i++)
        s->tiered =
            s->tiered || all[sp->shards.shards[i].table].tier != TIER_HBM;
    s->dim_mean = (double)dims / (double)s->n;
    if (ns_constraints(s) != 0)
        return SD_ENOMEM;
    /* Three lists of k candidates are most of a small model's tables: the
     * beam would try nearly every split at every level.  One in ten tables,
     * at least NS_CANDIDATES_MIN: on the benchmark tasks (10-59 tables)
     * the plans cost the same (11.621 against 11.624 ms on 4 devices, 7.333
     * on 8) for a fifth of the placements. */
    s->candidates = (int32_t)(ntables / 10);
    if (s->candidates < NS_CANDIDATES_MIN)
        s->candidates = NS_CANDIDATES_MIN;
    if (s->candidates > o->candidates)
        s->candidates = o->candidates;
    s->forced = calloc(ntables ? ntables : 1, sizeof(*s->forced));
    s->presplit = calloc(ntables ? ntables : 1, sizeof(*s->presplit));
    if (!s->forced || !s->presplit)
        return SD_ENOMEM;
    /* The base devices: the pass's shards and the pinned tables placed
     * (plan_check_pins() has checked that those fit). */
    devs_reset(s, &s->base);
    if (sp != NULL)
        base_fixed(s, sp, all);
    for (i = 0; i < ntables; i++) {
        if (!piece_pinned(s, i))
            continue;
        devs_apply(s, &s->base, s->pins[i], ns_level(s, (uint32_t)i, 0), +1);
        s->npinned++;
    }
    for (k = 0; k < s->n; k++)
        if (topology_mem(t, k) > s->base.mem[k] &&
            topology_mem(t, k) - s->base.mem[k] > s->largest_room)
            s->largest_room = topology_mem(t, k) - s->base.mem[k];
    if (o->column_splits)
        root_levels(s);
    /* Room for the root's pieces and one more per beam level. */
    s->cap = (size_t)(o->column_splits ? o->beam_depth : 0) + 1;
    for (i = 0; i < ntables; i++)
        s->cap += (size_t)1 << s->presplit[i];
    s->nthreads = o->threads > 0 ? o->threads : (ncpu > 0 ? (int)ncpu : 1);
    if (s->nthreads > NS_THREADS_MAX)
        s->nthreads = NS_THREADS_MAX;
    for (k = 0; k < s->nthreads; k++)
        if (work_alloc(&s->work[k], (size_t)s->n, s->cap) != 0)
            return SD_ENOMEM;
    for (i = 0; i < ntables; i++)
        for (k = 0; piece_pinned(s, i) && k < s->nthreads; k++)
            s->work[k].assign[i] = s->pins[i]; /* greedy runs keep it */
    return 0;
}

static void ns_free(struct ns *s)
{
    int k;

    for (k = 0; k < NS_THREADS_MAX; k++)
        work_free(&s->work[k]);
    devs_free(&s->base);
    free((void *)s->host);
    free(s->lv);
    free(s->nlevels);
    free(s->devmem);
    free(s->forced);
    free(s->presplit);
    free(s->root_order);
    free(s->seen);
}

/* A root state: table i cut to level lv[i], in 2^lv[i] pieces (the pieces
 * beyond the tables appended), keyed and marked seen. */
static void root_state(struct ns *s, const int32_t *lv, struct ns_state *st)
{
    size_t i, c;

    st->np = s->ntables;
    st->key = 0;
    st->cost = INFINITY;
    for (i = 0; i < s->ntables; i++) {
        st->pc[i] = (struct ns_piece){(uint32_t)i, lv[i]};
        st->key += piece_hash((uint32_t)i, lv[i]);
        ns_level(s, (uint32_t)i, lv[i]);
    }
    for (i = 0; i < s->ntables; i++)
        for (c = 1; c < (size_t)1 << lv[i]; c++) {
            st->pc[st->np++] = (struct ns_piece){(uint32_t)i, lv[i]};
            st->key += piece_hash((uint32_t)i, lv[i]);
        }
    seen_insert(s, st->key);
}

static int piece_cmp(const void *a, const void *b)
{
    const int32_t *x = a, *y = b; /* {table, device, cols, level} */

    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

/*
 * Whether the pieces pc[a, b) (one table's on one device r, [table, device,
 * cols, level] each) become one shard of their summed width.  A model of
 * shardd's (softplus output) was fitted on whole tables, one kernel each:
 * on the device one slice is one pass over the lookups for two, so they are
 * always folded.  NeuroShard's models (the raw output, as import-model
 * holds them) were trained, and the original evaluates plans, with each
 * column half a table of its own (neuroshard.md 6.2): they are folded only
 * when the plan costs no more with them as one slice than as the pieces
 * the search summed, else kept as slices side by side, as the original
 * keeps them.  s->work[0]'s devices are the state's (devs_load()), r's
 * updated when they fold.
 */
static bool merge_pieces(struct ns *s, int32_t (*pc)[4], size_t a, size_t b,
                         int32_t cols)
{
    struct ns_work *w = &s->work[0];
    int32_t r = pc[a][1];
    float *z = w->dv.z + (size_t)r * NET_H2;
    const struct table *tb = &s->tables[pc[a][0]];
    float zm[NET_H2], proj[NET_H2];
    double apart, raw = w->dv.raw[r];
    size_t k;
    int o;

    if (net_io_activation(s->net) != NET_ACT_NONE)
        return true;
    memcpy(zm, z, sizeof(zm));
    for (k = a; k < b; k++) {
        const struct ns_level *lv = ns_level(s, (uint32_t)pc[k][0], pc[k][3]);

        for (o = 0; o < NET_H2; o++)
            zm[o] -= lv->proj[o];
    }
    net_projected(s->net, s->o->memo, tb, cols, proj);
    for (o = 0; o < NET_H2; o++)
        zm[o] += proj[o];
    /* the plan cost both ways: a learned exchange's wait is not monotone
     * in one device's compute */
    apart = devs_plan_ms(s, w);
    w->dv.raw[r] = net_head_raw(s->net, zm);
    if (devs_plan_ms(s, w) > apart) {
        w->dv.raw[r] = raw;
        return false;
    }
    memcpy(z, zm, sizeof(zm));
    return true;
}

/*
 * The plan of a state.  Pieces of one table on one device become one shard
 * of their summed width (merge_pieces() says when), else column slices of
 * their own, side by side.  *merged counts the pieces folded.
 */
static int state_to_plan(struct ns *s, const struct ns_state *st,
                         struct plan *out, size_t *merged)
{
    int32_t(*pc)[4] = malloc((st->np ? st->np : 1) * sizeof(*pc));
    size_t k, j, q;
    int32_t off = 0;
    int rv;

    if (!pc)
        return SD_ENOMEM;
    for (k = 0; k < st->np; k++) {
        pc[k][0] = (int32_t)st->pc[k].table;
        pc[k][1] = st->assign[k];
        pc[k][2] = s->tables[st->pc[k].table].dim >> st->pc[k].level;
        pc[k][3] = st->pc[k].level;
    }
    qsort(pc, st->np, sizeof(*pc), piece_cmp);
    devs_load(s, &s->work[0], st); /* the devices' pre-activations */
    *merged = 0;
    rv = plan_init(out, s->n);
    for (k = 0; rv == 0 && k < st->np; k = j) {
        int32_t cols = 0;

        if (k == 0 || pc[k][0] != pc[k - 1][0])
            off = 0;
        for (j = k; j < st->np && pc[j][0] == pc[k][0] && pc[j][1] == pc[k][1];
             j++)
            cols += pc[j][2];
        if (j - k > 1 && merge_pieces(s, pc, k, j, cols)) {
            *merged += j - k - 1;
            rv = plan_add(out, (uint32_t)pc[k][0], pc[k][1], off, cols);
            off += cols;
            continue;
        }
        for (q = k; rv == 0 && q < j; q++) {
            rv = plan_add(out, (uint32_t)pc[q][0], pc[q][1], off, pc[q][2]);
            off += pc[q][2];
        }
    }
    free(pc);
    if (rv != 0)
        plan_destroy(out);
    return rv;
}

/*
 * The search of `tables` (all of them, or those the scheme pass left, with
 * its shards of `all` tables, sp, placed first: NULL for none).
 */
static int ns_search(const struct table *tables, size_t ntables,
                     const struct topology *t, const struct plan_options *o,
                     const struct scheme_pass *sp, const struct table *all,
                     struct plan *out, struct sd_diag *d)
{
    struct plan_search_stats st = {0};
    struct ns_state best = {0};
    struct ns s;
    size_t i, merged = 0;
    int rv, k;

    rv = ns_init(&s, tables, ntables, t, o, &st, sp, all);
    if (rv != 0 || (rv = state_alloc(&best, s.cap)) != 0)
        goto out_free;

    /* The whole-table root: every table whole, or in as many pieces as it
     * needs to fit on a device at all; its greedy order is the order the
     * other states merge with. */
    root_state(&s, s.forced, &best);
    ns_table_wise(&s, &s.work[0], &best);
    s.root_order = malloc((ntables ? ntables : 1) * sizeof(*s.root_order));
    if (!s.root_order) {
        rv = SD_ENOMEM;
        goto out_free;
    }
    for (i = 0; i < best.np; i++) {
        const struct ns_sort *it = &s.work[0].order[i];

        if (it->idx < ntables && it->level == 0)
            s.root_order[s.nroot++] = *it;
    }
    /* The root with the costliest tables cut (root_levels()): the search
     * goes on from the better of the two, so it never returns a plan worse
     * than the whole-table one. */
    if (s.any_presplit) {
        struct ns_state pre = {0};

        rv = state_alloc(&pre, s.cap);
        if (rv != 0)
            goto out_free;
        root_state(&s, s.presplit, &pre);
        ns_table_wise(&s, &s.work[0], &pre);
        if (pre.cost < best.cost)
            state_copy(&best, &pre);
        state_free(&pre);
    }
    if (o->column_splits && o->beam_depth > 0) {
        rv = ns_beam(&s, &best);
        if (rv != 0)
            goto out_free;
    }
    if (best.cost == INFINITY) {
        rv = no_fit(&s, d);
        goto out_free;
    }
    if (o->local_search)
        ns_local(&s, &best);
    rv = state_to_plan(&s, &best, out, &merged);
    if (rv != 0)
        goto out_free;
    if (merged > 0 && sp == NULL) { /* with sp, the caller evaluates */
        /* Folded pieces change the shards the model scores. */
        struct net_cost_model ncm;

        net_cost_model_init(&ncm, o->net);
        ncm.memo = o->memo;
        rv = plan_evaluate(out, tables, ntables, t, o->optimizer, &ncm.cm);
        if (rv != 0) {
            plan_destroy(out);
            goto out_free;
        }
        best.cost = out->cost_ms;
    }
    for (k = 0; k < s.nthreads; k++) {
        st.greedy_runs += s.work[k].greedy_runs;
        st.evaluations += s.work[k].evaluations;
        st.states += s.work[k].states;
    }
    st.splits = (int32_t)(out->nshards - ntables); /* forced ones too */
    st.search_ms = elapsed_ms(&s.t0);
    out->stats = st;
    out->cost_ms = best.cost; /* the search's score, until plan_evaluate() */

out_free:
    if (rv == SD_ENOMEM)
        sd_diag_set(d, rv, "neuroshard: out of memory");
    state_free(&best);
    ns_free(&s);
    return rv;
}

/* The model's cost of plan p (evaluated afresh). */
static int model_cost(struct plan *p, const struct table *tables, size_t n,
                      const struct topology *t, const struct plan_options *o)
{
    struct net_cost_model ncm;

    net_cost_model_init(&ncm, o->net);
    ncm.memo = o->memo;
    return plan_evaluate(p, tables, n, t, o->optimizer, &ncm.cm);
}

/*
 * The search of the tables the scheme pass left, mapped back to `tables`
 * and joined by the pass's shards, into *out, evaluated.
 */
static int search_rest(const struct table *tables, size_t ntables,
                       const struct topology *t, const struct plan_options *o,
                       const struct scheme_pass *sp, struct plan *out,
                       struct sd_diag *d)
{
    size_t nrest = ntables - sp->nfixed, i, j = 0, k;
    struct table *rest = malloc((nrest ? nrest : 1) * sizeof(*rest));
    uint32_t *idx = malloc((nrest ? nrest : 1) * sizeof(*idx));
    int32_t *pins =
        o->pins ? malloc((nrest ? nrest : 1) * sizeof(*pins)) : NULL;
    struct table_constraint *cons =
        o->constraints ? malloc((nrest ? nrest : 1) * sizeof(*cons)) : NULL;
    struct plan_options so = *o;
    int rv = SD_ENOMEM;

    if (!rest || !idx || (o->pins && !pins) || (o->constraints && !cons)) {
        sd_diag_set(d, rv, "neuroshard: out of memory");
        goto out_free;
    }
    for (i = 0; i < ntables; i++) {
        if (sp->fixed[i])
            continue;
        rest[j] = tables[i];
        idx[j] = (uint32_t)i;
        if (pins)
            pins[j] = o->pins[i];
        if (cons)
            cons[j] = o->constraints[i];
        j++;
    }
    so.pins = pins;
    so.constraints = cons;
    rv = ns_search(rest, nrest, t, &so, sp, tables, out, d);
    if (rv != 0)
        goto out_free;
    for (k = 0; k < out->nshards; k++)
        out->shards[k].table = idx[out->shards[k].table];
    for (k = 0; k < sp->shards.nshards && rv == 0; k++)
        rv = plan_add_shard(out, &sp->shards.shards[k]);
    if (rv == 0) {
        plan_sort(out);
        rv = model_cost(out, tables, ntables, t, o);
    }
    if (rv != 0) {
        plan_destroy(out);
        sd_diag_set(d, rv, "neuroshard: out of memory");
    }

out_free:
    free(rest);
    free(idx);
    free(pins);
    free(cons);
    return rv;
}

/*
 * The search proper (plan_neuroshard() without its memo): with column
 * splits, the scheme pass, the search of the tables it left and, unless
 * memory or a constraint forced its shards, the column search alone; the
 * cheaper of the two.
 */
static int ns_plan(const struct table *tables, size_t ntables,
                   const struct topology *t, const struct plan_options *o,
                   struct plan *out, struct sd_diag *d)
{
    struct scheme_pass sp;
    struct plan_options cwo = *o;
    struct timespec t0;
    struct plan cw;
    int rv;

    /* Whole tables only: no scheme but table-wise. */
    if (!o->column_splits)
        return ns_search(tables, ntables, t, o, NULL, NULL, out, d);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rv = scheme_pass_run(tables, ntables, t, o, &sp, d);
    if (rv != 0)
        return rv;
    if (sp.nfixed == 0) {
        rv = ns_search(tables, ntables, t, o, NULL, NULL, out, d);
        if (rv == 0)
            scheme_pass_note(&sp, ntables, out); /* small tables kept */
        scheme_pass_free(&sp);
        return rv;
    }
    rv = search_rest(tables, ntables, t, o, &sp, out, d);
    /* Unless memory or a constraint forced them, the row blocks and
     * replicas must beat the column search alone, or it is kept.  Both
     * searches share the time budget: the second gets what is left, and
     * none when nothing is. */
    if (o->time_budget_ms > 0)
        cwo.time_budget_ms = o->time_budget_ms - elapsed_ms(&t0);
    if (rv == 0 && !sp.forced && !out->stats.budget_exhausted &&
        !(o->time_budget_ms > 0 && cwo.time_budget_ms <= 0) &&
        ns_search(tables, ntables, t, &cwo, NULL, NULL, &cw, d) == 0) {
        if (model_cost(&cw, tables, ntables, t, o) == 0 &&
            cw.cost_ms <= out->cost_ms) {
            plan_destroy(out);
            *out = cw;
            plan_note(out,
                      "row blocks and replicas were weighed and the column "
                      "search alone came out cheaper");
        } else {
            /* The plan kept was chosen under the same budget. */
            out->stats.budget_exhausted |= cw.stats.budget_exhausted;
            plan_destroy(&cw);
        }
    }
    if (rv == 0 && out->nnotes == 0)
        scheme_pass_note(&sp, ntables, out);
    scheme_pass_free(&sp);
    return rv;
}

/*
 * Latents per (table, width) are asked for by the scheme pass, both
 * searches and the plans' evaluations: without a memo of the caller's,
 * one for this call answers them once each (the same values: the memo
 * keys on the model's input and stores what it computed).  Sized for each
 * table at a few widths; a set that overflows only recomputes.
 */
#define NS_MEMO_PER_TABLE 4
#define NS_MEMO_MIN       1024

int plan_neuroshard(const struct table *tables, size_t ntables,
                    const struct topology *t, const struct plan_options *o,
                    struct plan *out, struct sd_diag *d)
{
    struct plan_options mo = *o;
    struct net_memo *local = NULL;
    int rv;

    if (!o->net)
        return sd_diag_set(d, SD_EINVAL, "neuroshard: no cost model given");
    if (o->beam_width < 1 || o->beam_depth < 0 || o->candidates < 1 ||
        o->threads < 0 || !(o->time_budget_ms >= 0))
        return sd_diag_set(d, SD_EINVAL,
                           "neuroshard: beam width and candidates must be "
                           ">= 1, depth, threads and time budget >= 0");
    rv = plan_check_pins(tables, ntables, t, o->pins, o->optimizer, d);
    if (rv != 0)
        return rv;
    if (o->memo == NULL) {
        /* NULL when memory is short: the search goes on without. */
        local = net_memo_new(o->net, NS_MEMO_PER_TABLE * ntables + NS_MEMO_MIN);
        mo.memo = local;
    }
    rv = ns_plan(tables, ntables, t, &mo, out, d);
    net_memo_free(local);
    return rv;
}
