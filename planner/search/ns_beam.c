/*
 * The neuroshard search's beam (neuroshard.md 6.4; neuroshard_int.h): per
 * level, the children of the beam's states, each with one candidate piece
 * split in two, scored on the worker threads by the greedy grid search
 * (ns_greedy.c); the best `beam_width` go on.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "search/neuroshard_int.h"

/* The beam stops after this many levels in a row that did not lower the
 * best cost by NS_GAIN of it: on the benchmark tasks the best is found by
 * the third level, and later ones cost as much and find nothing.  A level
 * that gains under 0.05 % counts as finding nothing: at 1e-4, 856 tables
 * on 8 devices ran 6 levels for 0.07 % in all (docs/models.md, "Search and
 * plan quality"). */
#define NS_PATIENCE 2
#define NS_GAIN     5e-4

/* Whether piece i goes before piece j in candidate round `round`: larger
 * (round 0), else costlier. */
static bool cand_before(const struct ns *s, const struct ns_state *st,
                        int round, size_t i, size_t j)
{
    const struct ns_level *a = piece_level(s, &st->pc[i]),
                          *b = piece_level(s, &st->pc[j]);

    return round == 0 ? a->bytes > b->bytes : a->ms > b->ms;
}

/*
 * Marks in `pick` the pieces of st worth splitting: the k largest and the k
 * costliest splittable pieces (the original's candidates), and the k
 * costliest on the critical device of its best placement.  Each round is
 * one pass keeping its k best so far in top[] (the caller's, k long),
 * ahead of them on ties the earlier piece: the pieces k passes for the
 * best unpicked would give.
 */
static void pick_candidates(struct ns *s, const struct ns_state *st, bool *pick,
                            size_t *top)
{
    int32_t k = s->candidates, crit = -1, round, ntop, at, j;
    size_t i;

    memset(pick, 0, st->np * sizeof(*pick));
    if (st->cost < INFINITY) {
        ns_devs_load(s, &s->work[0], st);
        crit = ns_critical_device(s, &s->work[0]);
    }
    for (round = 0; round < (crit < 0 ? 2 : 3); round++) {
        ntop = 0;
        for (i = 0; i < st->np; i++) {
            const struct ns_piece *p = &st->pc[i];

            if (pick[i] || p->level + 1 >= s->nlevels[p->table] ||
                piece_pinned(s, i) || (round == 2 && st->assign[i] != crit))
                continue;
            if (ntop == k && !cand_before(s, st, round, i, top[k - 1]))
                continue;
            at = ntop < k ? ntop++ : k - 1;
            while (at > 0 && cand_before(s, st, round, i, top[at - 1]))
                at--;
            for (j = ntop - 1; j > at; j--)
                top[j] = top[j - 1];
            top[at] = i;
        }
        for (j = 0; j < ntop; j++)
            pick[top[j]] = true;
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
    ns_state_copy(&beam[pos], child);
    if (*nbeam < w)
        (*nbeam)++;
}

/* Splits piece i of parent into child; makes the new level's cache.  0 or
 * SD_ENOMEM. */
static int make_child(struct ns *s, const struct ns_state *parent, size_t i,
                      struct ns_state *child)
{
    struct ns_piece p = parent->pc[i];

    memcpy(child->pc, parent->pc, parent->np * sizeof(*parent->pc));
    child->pc[i].level = p.level + 1;
    child->pc[parent->np] = (struct ns_piece){p.table, p.level + 1};
    child->np = parent->np + 1;
    child->key = parent->key - ns_piece_hash(p.table, p.level) +
                 2 * ns_piece_hash(p.table, p.level + 1);
    child->cost = INFINITY;
    ns_level(s, p.table, p.level + 1);
    return ns_fold_levels(s, p.table, p.level + 1);
}

/* A level's children go on one thread where they would take fewer than
 * o->parallel_min placements: bench_load's 50-table split plans (about
 * 3,500 placements a level) took 0.78 ms on two threads against 0.58 on
 * one; bench_search's 856 tables on 8 devices (about 60,000) still gain. */

/* The children of one level, scored by thread `id` of `n` (every n-th). */
struct ns_batch {
    struct ns *s;
    struct ns_state *kids;
    size_t nkids;
    int id, n;
};

static void *score_kids(void *arg)
{
    struct ns_batch *b = arg;
    size_t i;

    for (i = (size_t)b->id; i < b->nkids; i += (size_t)b->n) {
        if (ns_out_of_time(b->s))
            break; /* unscored children keep cost INFINITY */
        ns_table_wise(b->s, &b->s->work[b->id], &b->kids[i], NS_GRID_COARSE);
        b->s->work[b->id].states++;
    }
    return NULL;
}

void ns_run_shares(int n, void *(*fn)(void *), void *jobs, size_t size)
{
    pthread_t th[NS_THREADS_MAX];
    bool started[NS_THREADS_MAX] = {false};
    char *job = jobs;
    int t;

    for (t = 1; t < n; t++)
        started[t] =
            pthread_create(&th[t], NULL, fn, job + (size_t)t * size) == 0;
    fn(job);
    for (t = 1; t < n; t++) {
        if (started[t])
            pthread_join(th[t], NULL);
        else
            fn(job + (size_t)t * size); /* no thread: its share here */
    }
}

/* Scores kids[0..n) on the worker threads (this one included), or on this
 * one alone where they would take fewer than o->parallel_min placements
 * (`placements`, the caller's estimate).  The same costs either way. */
static void score_all(struct ns *s, struct ns_state *kids, size_t n,
                      double placements)
{
    struct ns_batch b[NS_THREADS_MAX];
    int t, nt = placements < (double)s->o->parallel_min ? 1 : s->nthreads;

    for (t = 0; t < nt; t++)
        b[t] = (struct ns_batch){s, kids, n, t, nt};
    /* No more shares than children (the others would score none). */
    ns_run_shares((size_t)nt < n ? nt
                  : n > 0        ? (int)n
                                 : 1,
                  score_kids, b, sizeof(b[0]));
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

int ns_beam(struct ns *s, struct ns_state *best, const struct ns_state *other)
{
    int32_t w = s->beam_width, nbeam = 1, nnext, level, b, idle = 0;
    size_t maxkids = (size_t)w * 3 * (size_t)s->candidates, nkids, i;
    int64_t budget = s->o->beam_evaluations, spent = 0, before;
    double per_kid; /* placements one child costs: the roots' to start */
    struct ns_state *all = NULL, *beam, *next, *kids, *tmp;
    void *block = NULL;
    bool *pick = malloc(s->cap * sizeof(*pick));
    size_t *top = malloc((size_t)s->candidates * sizeof(*top));
    int rv = SD_ENOMEM;

    if (!pick || !top ||
        states_alloc(2 * (size_t)w + maxkids, s->cap, &all, &block) != 0)
        goto out_free;
    beam = all;
    next = all + w;
    kids = all + 2 * w;

    per_kid = (double)evaluations(s) /
              (double)(s->work[0].states > 0 ? s->work[0].states : 1);
    ns_state_copy(&beam[0], best);
    if (other != NULL && other->cost < INFINITY && w > 1)
        ns_state_copy(&beam[nbeam++], other);
    for (level = 0; level < s->o->beam_depth; level++) {
        double was = best->cost;

        nkids = 0;
        for (b = 0; b < nbeam; b++) {
            pick_candidates(s, &beam[b], pick, top);
            for (i = 0; i < beam[b].np; i++) {
                if (!pick[i])
                    continue;
                if (make_child(s, &beam[b], i, &kids[nkids]) != 0)
                    goto out_free; /* rv: SD_ENOMEM */
                if (ns_seen_insert(s, kids[nkids].key))
                    nkids++;
            }
        }
        /* Placements are counted, not timed: the same plan on any
         * machine.  A level's cost is estimated from the last one's. */
        if (budget > 0 && spent + per_kid * (double)nkids > (double)budget)
            break;
        before = evaluations(s);
        score_all(s, kids, nkids, per_kid * (double)nkids);
        spent += evaluations(s) - before;
        if (nkids > 0)
            per_kid = (double)(evaluations(s) - before) / (double)nkids;
        nnext = 0;
        for (i = 0; i < nkids; i++) {
            beam_offer(next, &nnext, w, &kids[i]);
            if (kids[i].cost < best->cost)
                ns_state_copy(best, &kids[i]);
        }
        s->st->levels = level + 1;
        if (ns_out_of_time(s)) {
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
    free(top);
    free(pick);
    free(block);
    free(all);
    return rv;
}
