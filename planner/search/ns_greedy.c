/*
 * The neuroshard search's devices and its table-wise greedy grid search
 * (neuroshard.md 6.3; neuroshard_int.h): the devices a greedy run fills,
 * kept in load order so that the least loaded device with room is the
 * first looked at, and the greedy runs under the grid of dim caps that
 * score one state.  The hot loop of the whole search: ns_greedy() places
 * every piece of every state.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "search/neuroshard_int.h"

#define NS_GRID_STEPS 11 /* dim caps 1.00, 1.05, ..., 1.50 x the mean */
/*
 * The beam's children get every fourth cap (NS_GRID_COARSE: 1.00, 1.20,
 * 1.40), and the state the beam ends on every cap.  A child differs from
 * its parent by one split, which moves the best cap little: ranking the
 * children needs less than the final placement does.  Measured (2 vCPU,
 * docs/models.md "The beam's grid"): bench_load's 50-table plans 0.70 ms
 * each against 1.06; bench_quality's 16 family sets within 0.1 % of the
 * full grid's predicted costs (every fifth cap lost 1.2 % on one).
 */
/*
 * Above this many devices the grid is one uncapped run.  With ten or so
 * tables a device, a cap of 1.0-1.5 x the mean columns binds on most of
 * them and forces worse compute balance: on bench_search's cases of 128 to
 * 2,048 devices the uncapped run found plans as good or better (at 10,000
 * tables on 1,024 devices a gap of 0.57 % against 1.10 %) in a tenth of the
 * time.  At 64 devices the grid still paid (0.36 % against 0.67 %).
 */
#define NS_GRID_DEVICES 64
/* Up to this many devices a greedy run looks at each for every piece; more
 * are kept in load order ("By load" below).  Instructions of a plan
 * (callgrind, one thread), load order against looking at every device (to
 * 64) or against the tree over the devices that was there before (above):
 * 856 tables on 8 devices +3 %, 16 -2.4 %, 32 -14 %, 64 -27 %; 2,000 on
 * 128 -43 %; 5,000 on 256 -53 %; the plans and their greedy runs the same
 * (docs/models.md, "Devices in load order"). */
#define NS_SCAN_ALL 8

/* The order of devices: least compute, then least memory, then lower id
 * (the original's tie-breaks). */
static bool dev_less(const struct ns_devs *d, int32_t a, int32_t b)
{
    if (d->raw[a] != d->raw[b])
        return d->raw[a] < d->raw[b];
    if (d->mem[a] != d->mem[b])
        return d->mem[a] < d->mem[b];
    return a < b;
}

void ns_devs_reset(const struct ns *s, struct ns_devs *d)
{
    int32_t r;

    for (r = 0; r < s->n; r++) {
        net_head_init(s->net, d->z + (size_t)r * NET_H2);
        d->raw[r] = -INFINITY;
    }
    memset(d->mem, 0, (size_t)s->n * sizeof(*d->mem));
    memset(d->tier, 0, (size_t)s->n * sizeof(*d->tier));
    memset(d->dim, 0, (size_t)s->n * sizeof(*d->dim));
    memset(d->count, 0, (size_t)s->n * sizeof(*d->count));
    for (r = 0; r < s->n; r++) /* all alike: in id order */
        d->by_load[r] = r;
    d->nby = s->n;
}

void ns_devs_copy(const struct ns *s, struct ns_devs *dst,
                  const struct ns_devs *src)
{
    size_t n = (size_t)s->n;

    memcpy(dst->z, src->z, n * NET_H2 * sizeof(*dst->z));
    memcpy(dst->raw, src->raw, n * sizeof(*dst->raw));
    memcpy(dst->tier, src->tier, n * sizeof(*dst->tier));
    memcpy(dst->mem, src->mem, n * sizeof(*dst->mem));
    memcpy(dst->dim, src->dim, n * sizeof(*dst->dim));
    memcpy(dst->count, src->count, n * sizeof(*dst->count));
    memcpy(dst->by_load, src->by_load, n * sizeof(*dst->by_load));
    dst->nby = src->nby;
}

/* Adds (sign +1) or removes (-1) a piece's load on device r. */
void ns_devs_apply(const struct ns *s, struct ns_devs *d, int32_t r,
                   const struct ns_level *lv, int sign)
{
    float *z = d->z + (size_t)r * NET_H2;
    double raw = net_head_step(s->net, z, lv->proj, sign);

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
        d->raw[r] = net_activate(s->net, raw) * s->scale + d->tier[r];
    else
        d->raw[r] = raw;
}

void ns_devs_place(const struct ns *s, struct ns_devs *d, int32_t r,
                   uint32_t table, const struct ns_level *lv, int32_t held,
                   int sign)
{
    int32_t wide = held + lv->cols;

    if (!s->fold || held == 0) {
        ns_devs_apply(s, d, r, lv, sign);
        return;
    }
    ns_devs_apply(s, d, r, ns_width(s, table, sign > 0 ? held : wide), -1);
    ns_devs_apply(s, d, r, ns_width(s, table, sign > 0 ? wide : held), +1);
}

/* The plan cost of w's devices; leaves compute and comm in w. */
double ns_devs_plan_ms(const struct ns *s, struct ns_work *w)
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

/*
 * size bytes on cache lines of their own (free() them): the threads'
 * scratch arrays are small, and two threads writing one line slowed both.
 */
static void *line_alloc(size_t size)
{
    return aligned_alloc(64, (size + 63) / 64 * 64);
}

int ns_devs_alloc(struct ns_devs *d, size_t n)
{
    d->z = line_alloc(n * NET_H2 * sizeof(*d->z));
    d->raw = line_alloc(n * sizeof(*d->raw));
    d->tier = line_alloc(n * sizeof(*d->tier));
    d->mem = line_alloc(n * sizeof(*d->mem));
    d->dim = line_alloc(n * sizeof(*d->dim));
    d->count = line_alloc(n * sizeof(*d->count));
    /* and as much again: ns_devs_order()'s merges */
    d->by_load = line_alloc((n ? 2 * n : 1) * sizeof(*d->by_load));
    d->nby = 0;
    return d->z && d->raw && d->tier && d->mem && d->dim && d->count &&
                   d->by_load
               ? 0
               : SD_ENOMEM;
}

void ns_devs_free(struct ns_devs *d)
{
    free(d->z);
    free(d->raw);
    free(d->tier);
    free(d->mem);
    free(d->dim);
    free(d->count);
    free(d->by_load);
}

int ns_work_alloc(struct ns_work *w, size_t n, size_t cap, size_t ntables)
{
    size_t i;

    if (ns_devs_alloc(&w->dv, n) != 0 || ns_devs_alloc(&w->snap, n) != 0)
        return SD_ENOMEM;
    w->last = line_alloc((ntables ? ntables : 1) * sizeof(*w->last));
    w->ring = line_alloc(cap * sizeof(*w->ring));
    if (w->last == NULL || w->ring == NULL)
        return SD_ENOMEM;
    for (i = 0; i < ntables; i++)
        w->last[i] = -1;
    w->comp = line_alloc(n * sizeof(*w->comp));
    w->fwd = line_alloc(n * sizeof(*w->fwd));
    w->bwd = line_alloc(n * sizeof(*w->bwd));
    w->order = line_alloc(cap * sizeof(*w->order));
    w->few = line_alloc(cap * sizeof(*w->few));
    w->assign = line_alloc(cap * sizeof(*w->assign));
    w->sfx_bytes = line_alloc(cap * sizeof(*w->sfx_bytes));
    w->partners = line_alloc(cap * sizeof(*w->partners));
    return w->comp && w->fwd && w->bwd && w->order && w->few && w->assign &&
                   w->sfx_bytes && w->partners
               ? 0
               : SD_ENOMEM;
}

void ns_work_free(struct ns_work *w)
{
    ns_devs_free(&w->dv);
    ns_devs_free(&w->snap);
    free(w->comp);
    free(w->fwd);
    free(w->bwd);
    free(w->order);
    free(w->few);
    free(w->assign);
    free(w->last);
    free(w->ring);
    free(w->sfx_bytes);
    free(w->partners);
}

/* Loads a state's placement into w's devices. */
void ns_devs_load(const struct ns *s, struct ns_work *w,
                  const struct ns_state *st)
{
    size_t k, j;

    /* The base holds the pinned tables and the scheme pass's shards. */
    ns_devs_copy(s, &w->dv, &s->base);
    if (s->fold)
        ns_rings(s, w, st);
    for (k = 0; k < st->np; k++) {
        int32_t held = 0;

        if (piece_pinned(s, k))
            continue;
        /* With s->fold, the pieces of its table placed before it there. */
        for (j = s->fold ? (size_t)w->ring[k] : k; j != k;
             j = (size_t)w->ring[j])
            if (j < k && st->assign[j] == st->assign[k])
                held += piece_level(s, &st->pc[j])->cols;
        ns_devs_place(s, &w->dv, st->assign[k], st->pc[k].table,
                      piece_level(s, &st->pc[k]), held, +1);
    }
}

/* The device the others wait for: max compute + backward comm. */
int32_t ns_critical_device(const struct ns *s, struct ns_work *w)
{
    int32_t r, c = 0;

    ns_devs_plan_ms(s, w);
    for (r = 1; r < s->n; r++)
        if (w->comp[r] + w->bwd[r] > w->comp[c] + w->bwd[c])
            c = r;
    return c;
}

/* ------------------------------------------------------------------------ */
/* Table-wise greedy grid search                                             */

/*
 * The cap refused a device that would take the piece at a cap of `dims`:
 * lowers *next_cap, and on the run's first refusal snapshots the devices
 * as they are before piece k.  Recorded for every refused device that
 * could come before the one chosen (by_load_pick(): exactly those; the
 * pass over all devices, some after it too: conservative, a looser cap
 * then runs again, or resumes earlier, but never differs from a full run).
 */
static void refused(const struct ns *s, struct ns_work *w, size_t k,
                    int64_t dims, double *next_cap)
{
    if ((double)dims < *next_cap)
        *next_cap = (double)dims;
    if (w->snap_taken)
        return;
    ns_devs_copy(s, &w->snap, &w->dv);
    w->snap_k = k;
    w->snap_taken = true;
}

/*
 * The device piece k goes to among devices lo .. hi - 1, for a few of them
 * (NS_SCAN_ALL or fewer, or a host's): the least (raw, mem, id) with room
 * for its bytes and its columns under dim_lim, in one pass over them, each
 * refused one that comes before the chosen one in id order recorded.
 * The best so far is kept in locals: devices come in id order, so a later
 * one is less only by (raw, mem), dev_less()'s id tie-break never taken.
 * The arrays are read through locals: refused() writes w, and reading them
 * through w again on every device cost the scan a tenth of its time.
 * Its speed moves with where it lies: an unrelated change to net.c moved
 * it and an 856-table plan on 64 devices took 8 % longer; at a line's
 * start (aligned 64) the 8-device plan took 7 % longer instead.  Aligned
 * to 32 (it lay 32 past a line then) both were as fast as before
 * (docs/models.md, "Cheaper hits...").
 */
#if defined(__GNUC__)
__attribute__((aligned(32)))
#endif
static int32_t
scan_pick(const struct ns *s, struct ns_work *w, size_t k,
          const struct ns_sort *it, int64_t dim_lim, double *next_cap,
          int32_t lo, int32_t hi)
{
    const double *raw = w->dv.raw;
    const uint64_t *mem = w->dv.mem, *devmem = s->devmem;
    const int32_t *dim = w->dv.dim;
    int32_t r, best = -1;
    /* Beaten by any device (raw is finite or -inf when empty). */
    double best_raw = INFINITY;
    uint64_t best_mem = UINT64_MAX;

    for (r = lo; r < hi; r++) {
        if (raw[r] > best_raw || (raw[r] == best_raw && mem[r] >= best_mem) ||
            mem[r] + it->bytes > devmem[r])
            continue;
        if ((int64_t)dim[r] + it->cols > dim_lim) {
            refused(s, w, k, (int64_t)dim[r] + it->cols, next_cap);
            continue;
        }
        best = r;
        best_raw = raw[r];
        best_mem = mem[r];
    }
    return best;
}

/*
 * By load: a greedy run on more than NS_SCAN_ALL devices keeps them in
 * dev_less() order.  Most pieces go to the least loaded device, the first
 * one looked at, and a device whose load changed moves to its place by a
 * binary search.  At 856 tables on 64 devices a pass over every device
 * for each piece was two thirds of a plan's instructions; above 64 a tree
 * over the devices (per subtree its least device, most room and fewest
 * columns) took 1.8 to 3.2 x as long as this.
 */

/* Whether a greedy run keeps the devices in load order. */
static bool by_load_on(const struct ns *s)
{
    return s->n > NS_SCAN_ALL;
}

/* a[0 .. n) in dev_less() order, by merges through tmp[0 .. n). */
static void order_merge(const struct ns_devs *d, int32_t *a, int32_t *tmp,
                        int32_t n)
{
    int32_t h = n / 2, i = 0, j = h, k = 0;

    if (n < 2)
        return;
    order_merge(d, a, tmp, h);
    order_merge(d, a + h, tmp, n - h);
    while (i < h && j < n)
        tmp[k++] = dev_less(d, a[j], a[i]) ? a[j++] : a[i++];
    while (i < h)
        tmp[k++] = a[i++];
    memcpy(a, tmp, (size_t)k * sizeof(*a)); /* a[j ..] is in place */
}

void ns_devs_order(const struct ns *s, struct ns_devs *d)
{
    int32_t r;

    for (r = 0; r < s->n; r++)
        d->by_load[r] = r;
    d->nby = s->n;
    order_merge(d, d->by_load, d->by_load + s->n, s->n);
}

/* The device at by_load[at] out of the order. */
static void by_load_drop(struct ns_devs *d, int32_t at)
{
    memmove(d->by_load + at, d->by_load + at + 1,
            (size_t)(d->nby - at - 1) * sizeof(*d->by_load));
    d->nby--;
}

/* The device at by_load[at] changed its load: moved to its place, which
 * is returned. */
static int32_t by_load_fix(struct ns_devs *d, int32_t at)
{
    int32_t *ord = d->by_load, r = ord[at], lo = 0, hi;

    if ((at == 0 || dev_less(d, ord[at - 1], r)) &&
        (at + 1 == d->nby || dev_less(d, r, ord[at + 1])))
        return at;
    by_load_drop(d, at);
    /* The first of the others that r comes before. */
    hi = d->nby;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;

        if (dev_less(d, ord[mid], r))
            lo = mid + 1;
        else
            hi = mid;
    }
    memmove(ord + lo + 1, ord + lo, (size_t)(d->nby - lo) * sizeof(*ord));
    ord[lo] = r;
    d->nby++;
    return lo;
}

/*
 * The device piece k goes to in load order: the first in by_load with room
 * for its bytes and its columns under dim_lim, each one before it that the
 * cap alone refused recorded (only a device that would have come first
 * can change a looser cap's run).  The least (raw, mem, id) that fits, as
 * scan_pick() finds it; its place in by_load in *at.  -1 when none can
 * take it.
 */
static int32_t by_load_pick(const struct ns *s, struct ns_work *w, size_t k,
                            const struct ns_sort *it, int64_t dim_lim,
                            double *next_cap, int32_t *at)
{
    const struct ns_devs *d = &w->dv;
    int32_t i;

    for (i = 0; i < d->nby; i++) {
        int32_t r = d->by_load[i];
        int64_t dims = (int64_t)d->dim[r] + it->cols;

        if (d->mem[r] + it->bytes > s->devmem[r])
            continue;
        if (dims > dim_lim) {
            refused(s, w, k, dims, next_cap);
            continue;
        }
        *at = i;
        return r;
    }
    return -1;
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

/* The columns of the table of piece `it` that the pieces before it in
 * greedy order put on device r (s->fold; w->assign holds them: this run
 * placed them, or the run it resumed from, the same up to there). */
static int32_t held_before(const struct ns_work *w, const struct ns_sort *it,
                           int32_t r)
{
    int32_t held = 0, p;

    for (p = it->sib; p >= 0; p = w->order[p].sib)
        if (w->assign[w->order[p].idx] == r)
            held += w->order[p].cols;
    return held;
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
    bool ordered = by_load_on(s);
    size_t k = 0;

    *next_cap = INFINITY;
    if (resume && w->snap_taken) {
        ns_devs_copy(s, d, &w->snap);
        k = w->snap_k;
    } else {
        ns_devs_copy(s, d, &s->base);
    }
    w->snap_taken = false;
    w->greedy_runs++;
    for (; k < np; k++) {
        const struct ns_sort *it = &w->order[k];
        const struct ns_level *lv = level_at(s, it->table, it->level);
        int32_t h = s->host != NULL ? s->host[it->table] : -1,
                L = s->t->devices_per_host, best, at = -1;

        if (k + 1 < np)
            prefetch_level(level_at(s, it[1].table, it[1].level));
        /* A table held to a host: its few devices, scanned. */
        if (h >= 0)
            best =
                scan_pick(s, w, k, it, dim_lim, next_cap, h * L, (h + 1) * L);
        else if (ordered)
            best = by_load_pick(s, w, k, it, dim_lim, next_cap, &at);
        else
            best = scan_pick(s, w, k, it, dim_lim, next_cap, 0, s->n);

        if (best < 0)
            return INFINITY;
        w->evaluations++;
        if (it->sib < 0)
            ns_devs_apply(s, d, best, lv, +1);
        else
            ns_devs_place(s, d, best, it->table, lv, held_before(w, it, best),
                          +1);
        w->assign[it->idx] = best;
        if (!ordered)
            continue; /* a pass over every device finds a full one full */
        if (at < 0)   /* scanned: where it stands in by_load */
            for (at = 0; d->by_load[at] != best; at++)
                ;
        at = by_load_fix(d, at);
        /* Full for every piece left, under any cap: out of the run, so its
         * low load does not lead the walk to it again and again. */
        if (k + 1 < np && d->mem[best] + w->sfx_bytes[k + 1] > s->devmem[best])
            by_load_drop(d, at);
    }
    return ns_devs_plan_ms(s, w);
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

static struct ns_sort sort_key(const struct ns *s, const struct ns_state *st,
                               size_t k)
{
    const struct ns_level *lv = piece_level(s, &st->pc[k]);

    return (struct ns_sort){
        lv->ms, lv->bytes, st->pc[k].table, st->pc[k].level, lv->cols, -1, k};
}

/* With s->fold, links the piece at w->order[k], if its table is cut, to
 * the one of its table before it (sib), through w->last (reset by
 * unlink_tables()). */
static inline void link_piece(const struct ns *s, struct ns_work *w, size_t k)
{
    struct ns_sort *it = &w->order[k];

    if (!s->fold || it->level == 0)
        return;
    it->sib = w->last[it->table];
    w->last[it->table] = (int32_t)k;
}

static void unlink_tables(const struct ns *s, struct ns_work *w,
                          const struct ns_sort *it, size_t n)
{
    size_t k;

    for (k = 0; s->fold && k < n; k++)
        w->last[it[k].table] = -1;
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
        for (k = 0; k < nfree; k++)
            link_piece(s, w, k);
        unlink_tables(s, w, w->order, nfree);
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
            (j == nfew || sort_cmp(&s->root_order[i], &few[j]) < 0)) {
            w->order[k] = s->root_order[i++];
        } else {
            w->order[k] = few[j++];
            link_piece(s, w, k);
        }
    }
    unlink_tables(s, w, few, nfew);
    return nfree;
}

void ns_table_wise(const struct ns *s, struct ns_work *w, struct ns_state *st,
                   int stride)
{
    double next_cap = INFINITY;
    size_t nfree = ns_order(s, w, st), k;
    uint64_t least = UINT64_MAX;
    int step;

    /* The least bytes of the pieces from k on, carried in a local: read
     * back from the array (which may alias w->order, to the compiler), each
     * step waited on the store before it (856 tables on 8 devices: 1.5 %
     * of the search). */
    for (k = nfree; k-- > 0;) {
        if (w->order[k].bytes < least)
            least = w->order[k].bytes;
        w->sfx_bytes[k] = least;
    }
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
        for (step += stride; step < NS_GRID_STEPS &&
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
