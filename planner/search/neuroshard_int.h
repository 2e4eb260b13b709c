/*
 * Private to the neuroshard search (neuroshard.c and the ns_*.c files it
 * calls down into; see neuroshard.c for the method and the file layout):
 * its pieces, states, devices and per-thread scratch, the small helpers
 * every file uses, and the functions one file gives the files above it.
 * Nothing outside the search room includes this.
 */
#ifndef SHARDD_PLANNER_SEARCH_NEUROSHARD_INT_H
#define SHARDD_PLANNER_SEARCH_NEUROSHARD_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "models/models.h"
#include "problem/problem.h"
#include "search/search.h"
#include "search/search_int.h"

/* 1024 columns halve to 4 in 8 steps: 9 levels at most. */
#define NS_LEVELS_MAX  9
#define NS_THREADS_MAX 16

struct ns_level {
    float proj[NET_H2]; /* W3 * latent of the table at this width */
    double ms;          /* its cost alone, at the topology's batch (its
                         * host-link time included) */
    double tier_ms;     /* its modelled host-link time (tier_shard_ms()) */
    uint64_t bytes;     /* on a device, optimizer state included */
    /* With s->fold, from level 2 on: the widths 3, 5, ..., 2^level - 1
     * times cols, which a table's pieces on one device can add up to
     * (ns_fold_levels(), ns_width()); NULL until made. */
    struct ns_level *odd;
    int32_t cols;
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
    /* With s->fold: the greedy-order position of the table's previous
     * piece (-1: none, or a whole table). */
    int32_t sib;
    size_t idx;
};

/*
 * Devices under construction, and a copy of them for resuming.  On more
 * than a few devices a greedy run keeps them in load order (by_load, by
 * (raw, mem, id), least first); a device whose memory can take none of the
 * pieces left in the run leaves the order for that run.
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
    /* The devices in load order, nby of them: kept by a greedy run on more
     * than NS_SCAN_ALL devices (ns_greedy.c, "By load"); not by
     * ns_devs_apply() or ns_devs_place(), after which ns_devs_order(). */
    int32_t *by_load;
    int32_t nby;
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
    struct ns_sort *order;
    struct ns_sort *few; /* a state's split pieces, for ns_order() */
    int32_t *assign;
    /* Per table, -1 between uses: the last piece of it seen in a pass
     * over a state's pieces (ns_order(), ns_rings()). */
    int32_t *last;
    /* Per piece of a state, the next piece of its table, round (a whole
     * table: itself; ns_rings()). */
    int32_t *ring;
    uint64_t *sfx_bytes; /* smallest piece from order[k] on */
    /* The free pieces of a critical round's least ready device, in piece
     * order: the swaps' partners (ns_local.c, round_critical()). */
    size_t *partners;
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
    /*
     * A table's pieces on one device are one shard of their summed width,
     * priced so: shardd's models (an activation on the output), fitted on
     * whole tables, one kernel each, price what the device runs, and the
     * plan folds them (neuroshard.c, merge_pieces()).  The devices carry
     * such pieces folded, so every score is the plan's.  NeuroShard's
     * models (raw output) price each column slice as a table of its own
     * (neuroshard.md 6.2), as the original keeps them.
     */
    bool fold;
    uint64_t largest_room; /* the most a base device has left */
    uint64_t *devmem;      /* per device: topology_mem() */
    size_t cap;            /* pieces a state can have */
    double dim_mean;
    int32_t candidates;  /* o->candidates, for this many tables */
    int32_t beam_width;  /* o->beam_width, for this many tables */
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
     * thread only; not zeroed (most are never made: zeroing them all was
     * 1 % of an 856-table plan), made[] says which are made. */
    struct ns_level *lv;
    uint8_t *made;    /* [NS_LEVELS_MAX][ntables]: 1 where lv is made */
    int32_t *nlevels; /* per table: levels it may be cut to */
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

/* The caller no longer wants the plan. */
static inline bool ns_cancelled(const struct ns *s)
{
    return s->o->cancel != NULL && atomic_load(s->o->cancel);
}

/* The budget ran out, or the search was ns_cancelled. */
static inline bool ns_out_of_time(struct ns *s)
{
    return ns_cancelled(s) ||
           (s->o->time_budget_ms > 0 &&
            search_elapsed_ms(&s->t0) > s->o->time_budget_ms);
}

/* Piece i of a state is a pinned table: pieces [0, ntables) are the
 * tables, and a pinned one is never split, so it stays at its index. */
static inline bool piece_pinned(const struct ns *s, size_t i)
{
    return s->pins != NULL && i < s->ntables && s->pins[i] >= 0;
}

/* Table `table` may go to device r (its constraint's host, if any). */
static inline bool device_ok(const struct ns *s, uint32_t table, int32_t r)
{
    return s->host == NULL || s->host[table] < 0 ||
           r / s->t->devices_per_host == s->host[table];
}

static inline struct ns_level *level_at(const struct ns *s, uint32_t table,
                                        int32_t level)
{
    return &s->lv[(size_t)level * s->ntables + table];
}

static inline const struct ns_level *piece_level(const struct ns *s,
                                                 const struct ns_piece *p)
{
    return level_at(s, p->table, p->level);
}

/* ns_pieces.c: levels, state keys, states */
struct ns_level *ns_level(struct ns *s, uint32_t table, int32_t level);
/* With s->fold, makes every width that pieces of `table` down to `level`
 * can add up to on one device (main thread; before any greedy run sees
 * such pieces).  0 or SD_ENOMEM. */
int ns_fold_levels(struct ns *s, uint32_t table, int32_t level);
/* The level (or odd multiple of one) of `cols` columns of `table`: a sum
 * of its pieces' widths that ns_fold_levels() has made. */
const struct ns_level *ns_width(const struct ns *s, uint32_t table,
                                int32_t cols);
/* ring[] of w for st's pieces (see struct ns_work). */
void ns_rings(const struct ns *s, struct ns_work *w, const struct ns_state *st);
/* The columns of piece k's table that st puts on device r, piece k's own
 * included if it is there (w->ring current). */
int32_t ns_held(const struct ns *s, const struct ns_work *w,
                const struct ns_state *st, size_t k, int32_t r);
uint64_t ns_piece_hash(uint32_t table, int32_t level);
bool ns_seen_insert(struct ns *s, uint64_t key);
int ns_state_alloc(struct ns_state *st, size_t cap);
void ns_state_free(struct ns_state *st);
void ns_state_copy(struct ns_state *dst, const struct ns_state *src);

/* ns_greedy.c: devices and the greedy grid search */
void ns_devs_reset(const struct ns *s, struct ns_devs *d);
/* dst = src, bit for bit (the load order too). */
void ns_devs_copy(const struct ns *s, struct ns_devs *dst,
                  const struct ns_devs *src);
/* d's devices put in load order from scratch (by_load, all of them). */
void ns_devs_order(const struct ns *s, struct ns_devs *d);
void ns_devs_apply(const struct ns *s, struct ns_devs *d, int32_t r,
                   const struct ns_level *lv, int sign);
/* Adds (sign +1) or takes away (-1) piece lv of `table` on device r,
 * where `held` other columns of the table lie: with s->fold and held > 0,
 * the table's shard there is replaced by the wider (narrower) one. */
void ns_devs_place(const struct ns *s, struct ns_devs *d, int32_t r,
                   uint32_t table, const struct ns_level *lv, int32_t held,
                   int sign);
double ns_devs_plan_ms(const struct ns *s, struct ns_work *w);
int ns_devs_alloc(struct ns_devs *d, size_t n);
void ns_devs_free(struct ns_devs *d);
int ns_work_alloc(struct ns_work *w, size_t n, size_t cap, size_t ntables);
void ns_work_free(struct ns_work *w);
void ns_devs_load(const struct ns *s, struct ns_work *w,
                  const struct ns_state *st);
int32_t ns_critical_device(const struct ns *s, struct ns_work *w);
/*
 * Scores st: the table-wise greedy under dim caps 1.00, 1.05, ..., 1.50 x
 * the mean columns, the best kept (st->cost, st->assign; the first of
 * equals).  `stride` 1 runs every cap; NS_GRID_COARSE every fourth (1.00,
 * 1.20, 1.40), for the beam's children (ns_greedy.c says why).  Either
 * way a cap that would replay the run before it is passed over for the
 * next one that would not (so 1.00, 1.25, 1.45 where 1.20 would replay
 * 1.00).
 */
#define NS_GRID_FULL   1
#define NS_GRID_COARSE 4
void ns_table_wise(const struct ns *s, struct ns_work *w, struct ns_state *st,
                   int stride);

/* ns_beam.c: the beam from best and, unless NULL, the other root; best
 * becomes the cheapest state it scores.  0 or SD_ENOMEM. */
int ns_beam(struct ns *s, struct ns_state *best, const struct ns_state *other);

/* ns_local.c */
void ns_local(struct ns *s, struct ns_state *st);
/* Runs fn on jobs[0..n) (n <= NS_THREADS_MAX, each `size` bytes): job 0 on
 * this thread, the others on threads of their own, each joined (a job
 * whose thread does not start runs here), so every job has run on return. */
void ns_run_shares(int n, void *(*fn)(void *), void *jobs, size_t size);

#endif
