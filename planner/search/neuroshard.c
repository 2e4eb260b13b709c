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
 *  - on more than a few devices a greedy run keeps them in load order, so
 *    the least loaded device with room is nearly always the first looked
 *    at, and a device that took a piece moves to its place by a binary
 *    search;
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
 * Under shardd's own models a table's pieces that end on one device are one
 * slice in the plan (merge_pieces()), and the devices carry them so as they
 * are placed: a piece put where its table has columns already replaces that
 * slice by the wider one (ns_devs_place()).  Every score, of a greedy run,
 * a state, a local-search step, is then the cost of the plan the state
 * becomes; the search scored such pieces apart before, and returned plans
 * dearer than its score and than its own whole-table root (docs/models.md,
 * "A table's pieces on one device").  Under NeuroShard's models each piece
 * is a table of its own, as in the original.
 *
 * The files: neuroshard.c sets up a search, runs it and makes its plan;
 * ns_beam.c is the beam, ns_local.c the final local search, ns_greedy.c
 * the devices and the greedy grid search that scores every state, and
 * ns_pieces.c the pieces' cached levels and the states (calls go that way,
 * down; neuroshard_int.h holds what they share).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "search/neuroshard_int.h"
#include "shardd/bytes.h"

/* The fewest candidates a beam state offers, and the tables per candidate
 * (ns_init()). */
#define NS_CANDIDATES_MIN       3
#define NS_TABLES_PER_CANDIDATE 16
/* Below this many tables the beam keeps at most NS_SMALL_BEAM states
 * (ns_init()). */
#define NS_SMALL_TABLES 160
#define NS_SMALL_BEAM   2

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
    /* For the sizes in the messages, each message from b0 up. */
    char b0[SD_BYTES_TEXT], b1[SD_BYTES_TEXT], b2[SD_BYTES_TEXT],
        b3[SD_BYTES_TEXT];

    for (i = 0; i < s->ntables; i++) {
        struct ns_level *lv = ns_level(s, (uint32_t)i, narrowest(s, i));

        if (lv->bytes > largest)
            return sd_diag_set(
                d, SD_ENOSPACE,
                "table \"%s\": even at %d columns it needs %s, "
                "%s more than a device has; %s%s",
                s->tables[i].name, (int)lv->cols, sd_bytes_text(lv->bytes, b0),
                sd_bytes_text(lv->bytes - largest, b1),
                s->o->column_splits ? "" : "allow column splits, or ",
                topology_more_memory(s->t));
        total += ns_level(s, (uint32_t)i, 0)->bytes;
        np += (size_t)1 << narrowest(s, i);
    }
    for (r = 0; r < s->n; r++)
        cap += topology_mem(s->t, r);
    room = calloc(s->n > 0 ? (size_t)s->n : 1, sizeof(*room));
    pieces = calloc(np ? np : 1, sizeof(*pieces));
    if (room == NULL || pieces == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
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
            "no placement fits: table \"%s\" (%s at %d of its %d "
            "columns) finds no device with room once the larger ones are "
            "placed (the most left is %s; the tables need %s, "
            "the %d devices have %s in all); %s%s",
            s->tables[pieces[k].table].name, sd_bytes_text(pieces[k].bytes, b0),
            (int)lv->cols, (int)s->tables[pieces[k].table].dim,
            sd_bytes_text(room[best], b1), sd_bytes_text(total, b2), (int)s->n,
            sd_bytes_text(cap, b3),
            s->o->column_splits ? "" : "allow column splits, or ",
            topology_more_memory(s->t));
        goto out_free;
    }
    rv = sd_diag_set(d, SD_ENOSPACE,
                     "no placement fits: the tables need %s, the %d "
                     "devices have %s in all; %s",
                     sd_bytes_text(total, b0), (int)s->n,
                     sd_bytes_text(cap, b1), topology_more_memory(s->t));
out_free:
    free(pieces);
    free(room);
    return rv;
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
        struct ns_level lv = {.cols = 0};
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
        ns_devs_apply(s, &s->base, sh->device, &lv, +1);
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

/* The CPUs online, asked once: sysconf() reads /sys for it, an open and a
 * read that were 1 % of the daemon's time at 50-table plans. */
static int online_cpus(void)
{
    static atomic_int n;
    int v = atomic_load_explicit(&n, memory_order_relaxed);

    if (v == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);

        v = c > 0 && c < 1 << 16 ? (int)c : 1;
        atomic_store_explicit(&n, v, memory_order_relaxed);
    }
    return v;
}

static int ns_init(struct ns *s, const struct table *tables, size_t ntables,
                   const struct topology *t, const struct plan_options *o,
                   struct plan_search_stats *st, const struct scheme_pass *sp,
                   const struct table *all)
{
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
    s->lv = malloc(NS_LEVELS_MAX * (ntables ? ntables : 1) * sizeof(*s->lv));
    s->made = calloc(NS_LEVELS_MAX * (ntables ? ntables : 1), 1);
    s->nlevels = calloc(ntables ? ntables : 1, sizeof(*s->nlevels));
    s->devmem = malloc((size_t)(s->n > 0 ? s->n : 1) * sizeof(*s->devmem));
    if (!s->lv || !s->made || !s->nlevels || !s->devmem ||
        ns_devs_alloc(&s->base, (size_t)s->n) != 0)
        return SD_ENOMEM;
    for (k = 0; k < s->n; k++)
        s->devmem[k] = topology_mem(t, k);
    for (i = 0; i < ntables; i++) {
        int32_t lv = table_split_levels(tables[i].dim);

        s->nlevels[i] = lv < NS_LEVELS_MAX ? lv : NS_LEVELS_MAX;
        dims += tables[i].dim;
        s->tiered = s->tiered || tables[i].tier != TIER_HBM;
    }
    s->fold = net_io_activation(o->net) != NET_ACT_NONE;
    for (i = 0; sp != NULL && i < sp->shards.nshards; i++)
        s->tiered =
            s->tiered || all[sp->shards.shards[i].table].tier != TIER_HBM;
    s->dim_mean = (double)dims / (double)s->n;
    if (ns_constraints(s) != 0)
        return SD_ENOMEM;
    /* Three lists of k candidates are most of a small model's tables: the
     * beam would try nearly every split at every level.  One in sixteen
     * tables, at least NS_CANDIDATES_MIN: bench_load's sixteen 50-table
     * draws then cost 334.08 ms in all against 334.23 at one in ten and at
     * least 5, for 58 % of the states (tasks of 10 to 150 tables: within
     * 0.13 %), and the daemon answers a quarter more of them a second.
     * One in ten, at least 5, had cost the same as ten candidates on the
     * benchmark tasks for a fifth of the placements. */
    s->candidates = (int32_t)(ntables / NS_TABLES_PER_CANDIDATE);
    if (s->candidates < NS_CANDIDATES_MIN)
        s->candidates = NS_CANDIDATES_MIN;
    if (s->candidates > o->candidates)
        s->candidates = o->candidates;
    /* A narrower beam where there are few tables: over bench_load's sixteen
     * 50-table draws the plans cost 334.12 ms in all against 334.08 with
     * three, for 77 % of the states (tasks of 10 to 150 tables: within
     * 0.06 %; bench_quality's 20 tasks the same to 0.02 %), and the
     * daemon answers 10 to 19 % more of them a second. */
    s->beam_width = o->beam_width;
    if (ntables < NS_SMALL_TABLES && s->beam_width > NS_SMALL_BEAM)
        s->beam_width = NS_SMALL_BEAM;
    s->forced = calloc(ntables ? ntables : 1, sizeof(*s->forced));
    s->presplit = calloc(ntables ? ntables : 1, sizeof(*s->presplit));
    if (!s->forced || !s->presplit)
        return SD_ENOMEM;
    /* The base devices: the pass's shards and the pinned tables placed
     * (plan_check_pins() has checked that those fit). */
    ns_devs_reset(s, &s->base);
    if (sp != NULL)
        base_fixed(s, sp, all);
    for (i = 0; i < ntables; i++) {
        if (!piece_pinned(s, i))
            continue;
        ns_devs_apply(s, &s->base, s->pins[i], ns_level(s, (uint32_t)i, 0), +1);
        s->npinned++;
    }
    ns_devs_order(s, &s->base); /* every greedy run starts from it */
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
    s->nthreads = o->threads > 0 ? o->threads : online_cpus();
    if (s->nthreads > NS_THREADS_MAX)
        s->nthreads = NS_THREADS_MAX;
    for (k = 0; k < s->nthreads; k++)
        if (ns_work_alloc(&s->work[k], (size_t)s->n, s->cap, ntables) != 0)
            return SD_ENOMEM;
    for (i = 0; i < ntables; i++)
        for (k = 0; piece_pinned(s, i) && k < s->nthreads; k++)
            s->work[k].assign[i] = s->pins[i]; /* greedy runs keep it */
    return 0;
}

static void ns_free(struct ns *s)
{
    size_t i;
    int k;

    for (k = 0; k < NS_THREADS_MAX; k++)
        ns_work_free(&s->work[k]);
    for (i = 0; s->made != NULL && i < NS_LEVELS_MAX * s->ntables; i++)
        if (s->made[i])
            free(s->lv[i].odd);
    ns_devs_free(&s->base);
    free((void *)s->host);
    free(s->lv);
    free(s->made);
    free(s->nlevels);
    free(s->devmem);
    free(s->forced);
    free(s->presplit);
    free(s->root_order);
    free(s->seen);
}

/* A root state: table i cut to level lv[i], in 2^lv[i] pieces (the pieces
 * beyond the tables appended), keyed and marked seen.  0 or SD_ENOMEM. */
static int root_state(struct ns *s, const int32_t *lv, struct ns_state *st)
{
    size_t i, c;

    st->np = s->ntables;
    st->key = 0;
    st->cost = INFINITY;
    for (i = 0; i < s->ntables; i++) {
        st->pc[i] = (struct ns_piece){(uint32_t)i, lv[i]};
        st->key += ns_piece_hash((uint32_t)i, lv[i]);
        ns_level(s, (uint32_t)i, lv[i]);
        if (lv[i] > 0 && ns_fold_levels(s, (uint32_t)i, lv[i]) != 0)
            return SD_ENOMEM;
    }
    for (i = 0; i < s->ntables; i++)
        for (c = 1; c < (size_t)1 << lv[i]; c++) {
            st->pc[st->np++] = (struct ns_piece){(uint32_t)i, lv[i]};
            st->key += ns_piece_hash((uint32_t)i, lv[i]);
        }
    ns_seen_insert(s, st->key);
    return 0;
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
 * always folded, and the search priced them folded (s->fold).  NeuroShard's
 * models (the raw output, as import-model
 * holds them) were trained, and the original evaluates plans, with each
 * column half a table of its own (neuroshard.md 6.2): they are folded only
 * when the plan costs no more with them as one slice than as the pieces
 * the search summed, else kept as slices side by side, as the original
 * keeps them.  s->work[0]'s devices are the state's (ns_devs_load()), r's
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
    apart = ns_devs_plan_ms(s, w);
    w->dv.raw[r] = net_head_raw(s->net, zm);
    if (ns_devs_plan_ms(s, w) > apart) {
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
    ns_devs_load(s, &s->work[0], st); /* the devices' pre-activations */
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
    struct ns_state best = {0}, pre = {0};
    struct ns s;
    size_t i, merged = 0;
    int rv, k;

    rv = ns_init(&s, tables, ntables, t, o, &st, sp, all);
    if (rv != 0 || (rv = ns_state_alloc(&best, s.cap)) != 0)
        goto out_free;

    /* The whole-table root: every table whole, or in as many pieces as it
     * needs to fit on a device at all; its greedy order is the order the
     * other states merge with. */
    rv = root_state(&s, s.forced, &best);
    if (rv != 0)
        goto out_free;
    ns_table_wise(&s, &s.work[0], &best, NS_GRID_FULL);
    s.work[0].states++;
    s.root_order = malloc((ntables ? ntables : 1) * sizeof(*s.root_order));
    if (!s.root_order) {
        rv = SD_ENOMEM;
        goto out_free;
    }
    /* The free pieces' order (ns_order(): the pinned ones are not in it;
     * reading np entries read past it, into what the last run left). */
    for (i = 0; i < best.np - s.npinned; i++) {
        const struct ns_sort *it = &s.work[0].order[i];

        if (it->idx < ntables && it->level == 0)
            s.root_order[s.nroot++] = *it;
    }
    /* The root with the costliest tables cut (root_levels()).  The beam
     * starts from both roots, so the search never returns a plan worse
     * than the whole-table one, and the whole root's children compete
     * where the cut one scores lower but leads nowhere (a hot table cut in
     * 16 pieces costs more in all than in 4, and the beam cannot join
     * them: docs/models.md, "A table's pieces on one device"). */
    if (s.any_presplit) {
        rv = ns_state_alloc(&pre, s.cap);
        if (rv != 0)
            goto out_free;
        rv = root_state(&s, s.presplit, &pre);
        if (rv != 0)
            goto out_free;
        ns_table_wise(&s, &s.work[0], &pre, NS_GRID_FULL);
        s.work[0].states++;
        if (pre.cost < best.cost) {
            struct ns_state swap = pre;

            pre = best;
            best = swap;
        }
    }
    if (o->column_splits && o->beam_depth > 0) {
        double root = best.cost;

        rv = ns_beam(&s, &best, s.any_presplit ? &pre : NULL);
        if (rv != 0)
            goto out_free;
        /* The beam scored its children on the coarse grid: the one it
         * kept gets every cap (the coarse caps among them, so never
         * worse), a state scored again, not a new one. */
        if (best.cost < root)
            ns_table_wise(&s, &s.work[0], &best, NS_GRID_FULL);
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
    st.splits = plan_column_splits(out); /* forced ones too */
    st.search_ms = search_elapsed_ms(&s.t0);
    out->stats = st;
    out->cost_ms = best.cost; /* the search's score, until plan_evaluate() */

out_free:
    if (rv == SD_ENOMEM)
        sd_diag_set(d, rv, "neuroshard: out of memory");
    ns_state_free(&best);
    ns_state_free(&pre);
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

/* The pass fixed replicas and nothing else. */
static bool replicas_only(const struct scheme_pass *sp, size_t ntables)
{
    size_t i;

    for (i = 0; i < ntables; i++)
        if (sp->fixed[i] && sp->why[i] != REASON_REPLICATE)
            return false;
    return true;
}

/*
 * Plan cw with the pass's shards (replicas, row blocks) in place of its
 * shards of the tables the pass fixed, evaluated, into *out.  SD_ENOSPACE
 * where they do not fit beside the rest, SD_ENOMEM; *out is freed on error.
 */
static int with_fixed(const struct plan *cw, const struct scheme_pass *sp,
                      const struct table *tables, size_t ntables,
                      const struct topology *t, const struct plan_options *o,
                      struct plan *out)
{
    struct sd_diag fit = {{0}};
    size_t k;
    int rv = plan_init(out, t->ndevices);

    if (rv != 0)
        return rv;
    out->stats = cw->stats; /* its plan's figures; cw's work stays cw's */
    out->stats.greedy_runs = out->stats.states = out->stats.evaluations = 0;
    for (k = 0; k < cw->nshards && rv == 0; k++)
        if (!sp->fixed[cw->shards[k].table])
            rv = plan_add_shard(out, &cw->shards[k]);
    for (k = 0; k < sp->shards.nshards && rv == 0; k++)
        rv = plan_add_shard(out, &sp->shards.shards[k]);
    if (rv == 0) /* memory: cw may have filled a device */
        rv = plan_validate(out, tables, ntables, t, o->optimizer, &fit);
    if (rv == 0)
        rv = model_cost(out, tables, ntables, t, o);
    if (rv != 0)
        plan_destroy(out);
    return rv;
}

/* What is left of o's time budget since t0 in *left; false when none is. */
static bool budget_left(const struct plan_options *o, const struct timespec *t0,
                        struct plan_options *left)
{
    *left = *o;
    if (o->time_budget_ms > 0)
        left->time_budget_ms = o->time_budget_ms - search_elapsed_ms(t0);
    return !(o->time_budget_ms > 0 && left->time_budget_ms <= 0);
}

/*
 * Keeps in *best the cheaper of *best and *cand (cand on equal costs where
 * `ties`; never where it could not be priced), the other destroyed.  The
 * kept plan's stats take in the other's work (greedy runs, states,
 * evaluations) and its budget_exhausted: what the whole search did, the
 * plan's own figures (levels, splits, moves) unchanged.  True where cand
 * was kept.
 */
static bool keep_cheaper(struct plan *best, struct plan *cand, bool priced,
                         bool ties)
{
    struct plan_search_stats *to = &best->stats, *from = &cand->stats;
    bool keep = priced && (cand->cost_ms < best->cost_ms ||
                           (ties && cand->cost_ms == best->cost_ms));

    if (keep) {
        to = &cand->stats;
        from = &best->stats;
    }
    search_stats_merge(to, from);
    if (keep) {
        plan_destroy(best);
        *best = *cand;
    } else {
        plan_destroy(cand);
    }
    return keep;
}

/* The notes of a column search that came out cheaper than the pass's
 * choices: row blocks (and replicas), or replicas alone. */
#define NOTE_COLUMN_ALONE                                                      \
    "row blocks and replicas were weighed and the column search alone came "   \
    "out cheaper"
#define NOTE_NO_REPLICAS                                                       \
    "replicas were weighed and the column search alone came out cheaper"
#define NOTE_TORCHREC                                                          \
    "TorchRec's greedy proposal was weighed and came out cheaper than the "    \
    "search's plan"

/*
 * The pass chose row blocks (and perhaps replicas): the search of the
 * tables it left around its shards, and unless memory or a constraint
 * forced them, the column search alone, the cheaper kept.  Both searches
 * share the time budget: the second gets what is left, and none when
 * nothing is.
 */
static int weigh_rows(const struct table *tables, size_t ntables,
                      const struct topology *t, const struct plan_options *o,
                      const struct scheme_pass *sp, const struct timespec *t0,
                      struct plan *out, struct sd_diag *d)
{
    struct plan_options cwo;
    struct plan cw;
    int rv;

    rv = search_rest(tables, ntables, t, o, sp, out, d);
    if (rv != 0 || sp->forced || out->stats.budget_exhausted ||
        !budget_left(o, t0, &cwo) ||
        ns_search(tables, ntables, t, &cwo, NULL, NULL, &cw, d) != 0)
        return rv;
    if (keep_cheaper(out, &cw, model_cost(&cw, tables, ntables, t, o) == 0,
                     true))
        plan_note(out, NOTE_COLUMN_ALONE);
    return 0;
}

/* What plan p would cost with its compute spread evenly over its devices
 * (its communication as it is): as low as moving its shards could get it. */
static double balanced_ms(const struct plan *p)
{
    double most = 0, sum = 0;
    int32_t r;

    for (r = 0; r < p->ndevices; r++) {
        sum += p->devices[r].compute_ms;
        if (p->devices[r].compute_ms > most)
            most = p->devices[r].compute_ms;
    }
    return p->cost_ms - (most - sum / (p->ndevices ? p->ndevices : 1));
}

/*
 * The pass replicated small tables and nothing else.  Replicas load every
 * device alike, so the column search's placement of the other tables
 * nearly stands for the search around the replicas: the column search
 * first, then its plan with the replicas in its tables' place (an
 * evaluation, not a search).  The search around the replicas runs only
 * where that plan, its compute spread evenly, would beat the column
 * search's; the cheapest of the three is kept.  On bench_quality's task
 * sets (40 tasks, and 5 of each family) 10 of 32 such cases ran it, and
 * it was cheapest in 6 of the 7 where it would have been (the seventh by
 * 0.2 %); bench_load's 50-table requests run it in none of their 7
 * (docs/models.md, "Replicas weighed on the column plan").
 */
static int weigh_replicas(const struct table *tables, size_t ntables,
                          const struct topology *t,
                          const struct plan_options *o,
                          const struct scheme_pass *sp,
                          const struct timespec *t0, struct plan *out,
                          struct sd_diag *d)
{
    struct plan_options ro;
    struct plan rp, rest;
    int rv;

    rv = ns_search(tables, ntables, t, o, NULL, NULL, out, d);
    if (rv != 0)
        return rv;
    rv = model_cost(out, tables, ntables, t, o);
    if (rv == 0)
        rv = with_fixed(out, sp, tables, ntables, t, o, &rp);
    if (rv == SD_ENOMEM) {
        plan_destroy(out);
        return sd_diag_set(d, rv, "neuroshard: out of memory");
    }
    if (rv != 0 || balanced_ms(&rp) >= out->cost_ms) {
        if (rv == 0)
            plan_destroy(&rp);
        plan_note(out, NOTE_NO_REPLICAS);
        return 0;
    }
    if (!out->stats.budget_exhausted && budget_left(o, t0, &ro) &&
        search_rest(tables, ntables, t, &ro, sp, &rest, d) == 0)
        keep_cheaper(&rp, &rest, true, false);
    if (!keep_cheaper(out, &rp, true, false))
        plan_note(out, NOTE_NO_REPLICAS);
    return 0;
}

/*
 * The pass saw tables whose row blocks over a host cost the devices less in
 * total than the tables whole (scheme_pass_run()'s `lighter`): the search
 * around them so split, kept where it comes out cheaper than *out.  The
 * pass that makes them starts from the figures of `first`, the pass that
 * saw them.  A rule
 * on each table alone, it is weighed, not taken: on bench_quality's family
 * task sets (12 tasks a cell) the column search alone came out cheaper than
 * the search around such blocks in 20 of 54 tasks, by up to 48 %, and the
 * blocks cheaper in the other 34, by up to 51 % (docs/models.md, "Row
 * blocks weighed").  What fails here (no room around the blocks, no budget
 * left) leaves *out as it is; only SD_ENOMEM is returned.
 */
static int weigh_lighter(const struct table *tables, size_t ntables,
                         const struct topology *t, const struct plan_options *o,
                         const struct timespec *t0,
                         const struct scheme_pass *first, struct plan *out)
{
    struct sd_diag ignored = {{0}};
    struct plan_options lo;
    struct scheme_pass sp;
    struct plan rp;
    int rv;

    if (out->stats.budget_exhausted || !budget_left(o, t0, &lo))
        return 0;
    rv = scheme_pass_run(tables, ntables, t, &lo, true, first, &sp, &ignored);
    if (rv != 0)
        return rv == SD_ENOMEM ? rv : 0;
    rv = search_rest(tables, ntables, t, &lo, &sp, &rp, &ignored);
    if (rv == 0 && keep_cheaper(out, &rp, true, false))
        scheme_pass_note(&sp, ntables, out);
    scheme_pass_free(&sp);
    return rv == SD_ENOMEM ? rv : 0;
}

/*
 * TorchRec's greedy proposal for the same request (torchrec.c: row-wise,
 * table-row-wise and column-wise cuts chosen by TorchRec's estimator),
 * priced by this search's model and kept where it comes out cheaper than
 * the search's plan.  The beam cuts tables in columns and the scheme pass
 * puts a table in row blocks only when it outgrows a device or its
 * narrowest slice outweighs the mean device; tables of long bags each
 * lighter than that can cost less in total in row blocks (their lookups
 * spread, each block's rows nearer the cache), a plan the search never
 * builds.  On bench_quality's family task sets TorchRec's plan was priced
 * below the search's on 3 of the 4 seq tasks on 4 devices (by 3.3-7 %),
 * one on 8 (by 11 %) and one dlrm task on 4 (by 40 %) (docs/models.md,
 * "TorchRec's proposal weighed").  Nothing where the request is for whole
 * tables, where some table is off HBM (tier pass), where TorchRec finds no
 * fit or where o->weigh_torchrec is off (the search's own plan).  Its cost
 * is a greedy pass and, where it loses, mostly the pricing of one device.
 */
static int weigh_torchrec(const struct table *tables, size_t ntables,
                          const struct topology *t,
                          const struct plan_options *o, struct plan *out)
{
    struct sd_diag ignored = {{0}};
    struct net_cost_model ncm;
    struct plan tr;
    bool dear;
    size_t i;
    int rv;

    if (!o->weigh_torchrec)
        return 0;
    for (i = 0; i < ntables; i++)
        if (tables[i].tier != TIER_HBM)
            return 0;
    if (plan_torchrec_greedy(tables, ntables, t, o->optimizer, o->pins,
                             o->constraints, &tr, &ignored) != 0)
        return 0; /* no fit by TorchRec's rules: nothing to weigh */
    /* Priced a device at a time first: a proposal that loses mostly
     * prices one device of it. */
    net_cost_model_init(&ncm, o->net);
    ncm.memo = o->memo;
    rv = plan_device_reaches(&tr, tables, t, &ncm.cm, out->cost_ms, &dear);
    if (rv != 0 || dear) {
        plan_destroy(&tr);
        return rv; /* it cannot be cheaper */
    }
    rv = plan_validate(&tr, tables, ntables, t, o->optimizer, &ignored);
    if (rv == SD_ENOMEM ||
        (rv == 0 && (rv = model_cost(&tr, tables, ntables, t, o)) != 0)) {
        plan_destroy(&tr);
        return rv;
    }
    if (rv != 0) { /* fits TorchRec's rules, not ours */
        plan_destroy(&tr);
        return 0;
    }
    /* out's cost is the model's already (a score is the evaluated cost:
     * test_score_is_evaluated_cost).  TorchRec's plan did no search of
     * its own: kept, it carries out's work and no levels or moves. */
    memset(&tr.stats, 0, sizeof(tr.stats));
    if (keep_cheaper(out, &tr, true, false))
        plan_note(out, NOTE_TORCHREC);
    return 0;
}

/*
 * The search proper (plan_neuroshard() without its memo): with column
 * splits, the scheme pass and, where it fixed tables, the searches that
 * weigh its choices against the column search alone.
 */
static int ns_plan(const struct table *tables, size_t ntables,
                   const struct topology *t, const struct plan_options *o,
                   struct plan *out, struct sd_diag *d)
{
    struct scheme_pass sp;
    struct timespec t0;
    int rv;

    /* Whole tables only: no scheme but table-wise. */
    if (!o->column_splits)
        return ns_search(tables, ntables, t, o, NULL, NULL, out, d);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rv = scheme_pass_run(tables, ntables, t, o, false, NULL, &sp, d);
    if (rv != 0)
        return rv;
    if (sp.nfixed == 0)
        rv = ns_search(tables, ntables, t, o, NULL, NULL, out, d);
    else if (!sp.forced && replicas_only(&sp, ntables))
        rv = weigh_replicas(tables, ntables, t, o, &sp, &t0, out, d);
    else
        rv = weigh_rows(tables, ntables, t, o, &sp, &t0, out, d);
    if (rv != 0) {
        scheme_pass_free(&sp);
        return rv;
    }
    if (out->nnotes == 0)
        scheme_pass_note(&sp, ntables, out); /* small tables kept too */
    /* Then the weighers: each keeps *out or a cheaper plan, and fails
     * only for memory. */
    if (sp.nlighter > 0)
        rv = weigh_lighter(tables, ntables, t, o, &t0, &sp, out);
    scheme_pass_free(&sp);
    if (rv == 0)
        rv = weigh_torchrec(tables, ntables, t, o, out);
    if (rv != 0) {
        plan_destroy(out);
        return sd_diag_set(d, rv, "neuroshard: out of memory");
    }
    out->stats.search_ms = search_elapsed_ms(&t0);
    return 0;
}

/*
 * Latents per (table, width) are asked for by the scheme pass and both
 * searches: without a memo of the caller's, one for this call answers
 * them once each (the same values: the memo keys on the model's input and
 * stores what it computed).  A caller that evaluates and explains the plan
 * with the same net shares its own (net_memo_for_tables()) with both.
 */
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
        local = net_memo_for_tables(o->net, ntables);
        mo.memo = local;
    }
    rv = ns_plan(tables, ntables, t, &mo, out, d);
    net_memo_free(local);
    return rv;
}
