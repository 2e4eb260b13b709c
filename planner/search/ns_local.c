/*
 * The neuroshard search's final local search (neuroshard_int.h): moves and
 * swaps of pieces between devices while one lowers the plan cost, only the
 * two devices of a step re-scored.
 */
#include <math.h>
#include <stdint.h>

#include "search/neuroshard_int.h"

/* Devices a local-search move may target: the least ready ones. */
#define NS_TARGETS 4
/* The most steps (moves and swaps) an all-pairs local-search round may try;
 * more pieces than that get the critical-device rounds (ns_local()). */
#define NS_WIDE_STEPS (1 << 14)

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

    crit = ns_critical_device(s, w);
    /* The least ready devices, least first (insertion: NS_TARGETS is
     * tiny); ns_critical_device() left this state's comm in w->bwd. */
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

    ns_devs_plan_ms(s, w); /* w->comp current for try_step() */
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
void ns_local(struct ns *s, struct ns_state *st)
{
    struct ns_work *w = &s->work[0];
    struct ns_devs *d = &w->dv;
    bool wide = s->t->comm != NULL &&
                st->np * (st->np / 2 + (size_t)s->n) <= NS_WIDE_STEPS;
    int iter;

    if (st->cost == INFINITY)
        return;
    ns_devs_load(s, w, st);
    for (iter = 0; iter < 256; iter++) {
        /* Steps must gain 0.01 %: a long tail of tinier ones costs more
         * search time than it saves training time. */
        struct ns_step b = {SIZE_MAX, SIZE_MAX, -1,
                            ns_devs_plan_ms(s, w) * (1 - 1e-4)};
        int32_t from;

        if (ns_out_of_time(s)) { /* the time budget holds here too */
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
        ns_devs_apply(s, d, from, piece_level(s, &st->pc[b.i]), -1);
        ns_devs_apply(s, d, b.to, piece_level(s, &st->pc[b.i]), +1);
        st->assign[b.i] = b.to;
        if (b.j != SIZE_MAX) {
            ns_devs_apply(s, d, b.to, piece_level(s, &st->pc[b.j]), -1);
            ns_devs_apply(s, d, from, piece_level(s, &st->pc[b.j]), +1);
            st->assign[b.j] = from;
        }
        s->st->moves++;
    }
    /* Re-derive the cost from scratch, free of incremental float drift. */
    ns_devs_load(s, w, st);
    st->cost = ns_devs_plan_ms(s, w);
}
