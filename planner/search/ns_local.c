/*
 * The neuroshard search's final local search (neuroshard_int.h): moves and
 * swaps of pieces between devices while one lowers the plan cost, only the
 * two devices of a step re-scored.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "search/neuroshard_int.h"

/* Devices a local-search move may target: the least ready ones. */
#define NS_TARGETS 4
/* The most steps (moves and swaps) an all-pairs local-search round may try;
 * more pieces than that get the critical-device rounds (ns_local()). */
#define NS_WIDE_STEPS (1 << 14)

/*
 * What a step does to one device: up to two shards taken away and two put
 * on (NULL: none).  Apart (no s->fold), the pieces themselves; with
 * s->fold, the shard of each table the step touches there, at its width
 * before and after.
 */
struct ns_chg {
    const struct ns_level *sub[2], *add[2];
};

/* A table's shard on a device from `from` to `to` columns (s->fold). */
static void refold(const struct ns *s, uint32_t table, int32_t from, int32_t to,
                   const struct ns_level **sub, const struct ns_level **add)
{
    *sub = from > 0 ? ns_width(s, table, from) : NULL;
    *add = to > 0 ? ns_width(s, table, to) : NULL;
}

/* The step's shards of a piece moving from x to y (s->fold): a whole
 * table's is the piece itself; a cut one's, its table's on each side. */
static void move_chg(const struct ns *s, const struct ns_work *w,
                     const struct ns_state *st, size_t k, int32_t x, int32_t y,
                     const struct ns_level **subx, const struct ns_level **addx,
                     const struct ns_level **suby, const struct ns_level **addy)
{
    const struct ns_piece *p = &st->pc[k];
    const struct ns_level *lv = piece_level(s, p);
    int32_t hx, hy;

    if (p->level == 0) {
        *subx = lv;
        *addx = NULL;
        *suby = NULL;
        *addy = lv;
        return;
    }
    hx = ns_held(s, w, st, k, x);
    hy = ns_held(s, w, st, k, y);
    refold(s, p->table, hx, hx - lv->cols, subx, addx);
    refold(s, p->table, hy, hy + lv->cols, suby, addy);
}

/*
 * The changes (cx, cy) of moving piece i from its device x to device y
 * and, unless j is SIZE_MAX, piece j from y to x; false where either
 * device would lack the memory.  w->ring current.
 */
static bool step_chg(const struct ns *s, const struct ns_work *w,
                     const struct ns_state *st, size_t i, int32_t y, size_t j,
                     struct ns_chg *cx, struct ns_chg *cy)
{
    const struct ns_piece *pi = &st->pc[i],
                          *pj = j < st->np ? &st->pc[j] : NULL;
    const struct ns_level *li = piece_level(s, pi),
                          *lj = pj ? piece_level(s, pj) : NULL;
    int32_t x = st->assign[i], q;
    uint64_t mx = w->dv.mem[x], my = w->dv.mem[y];

    *cx = (struct ns_chg){{NULL, NULL}, {NULL, NULL}};
    *cy = *cx;
    if (!s->fold) {
        *cx = (struct ns_chg){{li, NULL}, {lj, NULL}};
        *cy = (struct ns_chg){{lj, NULL}, {li, NULL}};
    } else if (pj != NULL && pj->table == pi->table) {
        /* Two pieces of one table trade places: one shard each side. */
        int32_t hx = ns_held(s, w, st, i, x), hy = ns_held(s, w, st, j, y);

        refold(s, pi->table, hx, hx - li->cols + lj->cols, &cx->sub[0],
               &cx->add[0]);
        refold(s, pi->table, hy, hy - lj->cols + li->cols, &cy->sub[0],
               &cy->add[0]);
    } else {
        move_chg(s, w, st, i, x, y, &cx->sub[0], &cx->add[0], &cy->sub[0],
                 &cy->add[0]);
        if (pj != NULL)
            move_chg(s, w, st, j, y, x, &cy->sub[1], &cy->add[1], &cx->sub[1],
                     &cx->add[1]);
    }
    for (q = 0; q < 2; q++) {
        mx += cx->add[q] ? cx->add[q]->bytes : 0;
        my += cy->add[q] ? cy->add[q]->bytes : 0;
    }
    for (q = 0; q < 2; q++) {
        mx -= cx->sub[q] ? cx->sub[q]->bytes : 0;
        my -= cy->sub[q] ? cy->sub[q]->bytes : 0;
    }
    return mx <= topology_mem(s->t, x) && my <= topology_mem(s->t, y);
}

/* One device's compute ms (host-link time included) after change c. */
static double comp_with(const struct ns *s, const struct ns_work *w, int32_t r,
                        const struct ns_chg *c)
{
    const float *add[2] = {NULL, NULL}, *sub[2] = {NULL, NULL};
    double tier = w->dv.tier[r];
    int q, count = w->dv.count[r];

    for (q = 0; q < 2; q++)
        if (c->add[q] != NULL) {
            add[q] = c->add[q]->proj;
            tier += c->add[q]->tier_ms;
            count++;
        }
    for (q = 0; q < 2; q++)
        if (c->sub[q] != NULL) {
            sub[q] = c->sub[q]->proj;
            tier -= c->sub[q]->tier_ms;
            count--;
        }
    if (count == 0)
        return 0;
    return net_activate(
               s->net,
               net_head_delta(s->net, w->dv.z + (size_t)r * NET_H2, add, sub)) *
               s->scale +
           tier;
}

/*
 * A critical round's state under the alpha-beta exchange, for pricing a
 * step between two devices of one host from those two alone: within a
 * host the host's and the whole exchange's column sums stay as they are,
 * so every other device keeps its exchange time and readiness, and the
 * plan cost is the greatest readiness plus the greatest forward exchange,
 * of the two re-priced devices and the greatest of the others.  Three of
 * each are kept: the step's two devices may be among them.  At 856 tables
 * on 8 devices pricing every device of each step was a twentieth of the
 * search.
 */
struct ns_exch {
    int32_t host;                 /* the critical device's host */
    double host_dims, total_dims; /* its column sum, everyone's */
    double ready[3], fwd[3];      /* the greatest, greatest first */
    int32_t ready_at[3], fwd_at[3];
};

/* Puts v of device r among the three greatest of top (at: their devices). */
static void top3_put(double top[3], int32_t at[3], double v, int32_t r)
{
    int q;

    if (!(v > top[2]))
        return;
    for (q = 2; q > 0 && v > top[q - 1]; q--) {
        top[q] = top[q - 1];
        at[q] = at[q - 1];
    }
    top[q] = v;
    at[q] = r;
}

/* The greatest of top not of device x or y (0 where none is: the plan
 * cost's maxima start there). */
static double top3_but(const double top[3], const int32_t at[3], int32_t x,
                       int32_t y)
{
    int q;

    for (q = 0; q < 3; q++)
        if (at[q] != x && at[q] != y)
            return top[q];
    return 0;
}

/* ex for w's devices, whose comp, fwd and bwd are current (alpha-beta). */
static void exch_init(const struct ns *s, const struct ns_work *w, int32_t crit,
                      struct ns_exch *ex)
{
    int32_t L = s->t->devices_per_host, r;
    int q;

    ex->host = crit / L;
    ex->host_dims = ex->total_dims = 0;
    for (q = 0; q < 3; q++) {
        ex->ready[q] = ex->fwd[q] = 0;
        ex->ready_at[q] = ex->fwd_at[q] = -1;
    }
    for (r = 0; r < s->n; r++) {
        ex->total_dims += w->dv.dim[r];
        if (r / L == ex->host)
            ex->host_dims += w->dv.dim[r];
        top3_put(ex->ready, ex->ready_at, w->comp[r] + w->bwd[r], r);
        top3_put(ex->fwd, ex->fwd_at, w->fwd[r], r);
    }
}

/* Device r's readiness and forward exchange with `dim` columns and compute
 * comp, as cost_plan_ms() prices them under alpha-beta. */
static void exch_dev(const struct ns *s, const struct ns_exch *ex, int32_t r,
                     int32_t dim, double comp, double *ready, double *fwd)
{
    double ab =
        cost_comm_alpha_beta_one(s->t, dim, ex->host_dims, ex->total_dims);
    double bwd = ab;

    *fwd = ab;
    if (s->fixed_fwd)
        *fwd += s->fixed_fwd[r];
    if (s->fixed_bwd)
        bwd += s->fixed_bwd[r];
    *ready = comp + bwd;
}

/* The plan cost of w's devices with x and y (of ex's host) at comp and
 * dim as they are in w now: what cost_plan_ms() would give. */
static double exch_step_ms(const struct ns *s, const struct ns_work *w,
                           const struct ns_exch *ex, int32_t x, int32_t y)
{
    double ready = top3_but(ex->ready, ex->ready_at, x, y),
           fwd = top3_but(ex->fwd, ex->fwd_at, x, y), rx, fx, ry, fy;

    exch_dev(s, ex, x, w->dv.dim[x], w->comp[x], &rx, &fx);
    exch_dev(s, ex, y, w->dv.dim[y], w->comp[y], &ry, &fy);
    ready = rx > ready ? rx : ready;
    ready = ry > ready ? ry : ready;
    fwd = fx > fwd ? fx : fwd;
    fwd = fy > fwd ? fy : fwd;
    return ready + fwd;
}

/*
 * The plan cost after a step that changes devices x and y by cx and cy and
 * moves `moved` columns from x to y, or INFINITY where it cannot be below
 * `beat`.  Needs w->comp current; only the two devices are re-scored, and
 * nothing is changed.  Under the alpha-beta exchange a plan costs at least
 * any device's compute (every exchange time is >= 0: its bytes over a
 * bandwidth and a latency), so a step that leaves x or y at `beat` or
 * above is refused before the exchange of every device is priced, and
 * where y, the device the step loads, is already there, before x is
 * scored: 60 % of the steps tried at 856 tables on 8 devices overload it.
 * A learned exchange makes no such promise and is always priced.
 */
static double try_step(const struct ns *s, struct ns_work *w, int32_t x,
                       const struct ns_chg *cx, int32_t y,
                       const struct ns_chg *cy, int32_t moved, double beat,
                       const struct ns_exch *ex)
{
    double cxm = w->comp[x], cym = w->comp[y], c;
    int32_t dx = w->dv.dim[x], dy = w->dv.dim[y];

    /* y first: the device a step loads is the one it overloads. */
    w->comp[y] = comp_with(s, w, y, cy);
    w->evaluations++;
    if (s->t->comm == NULL && w->comp[y] >= beat) {
        w->comp[y] = cym;
        return INFINITY;
    }
    w->comp[x] = comp_with(s, w, x, cx);
    w->evaluations++;
    if (s->t->comm == NULL && w->comp[x] >= beat) {
        w->comp[x] = cxm;
        w->comp[y] = cym;
        return INFINITY;
    }
    w->dv.dim[x] -= moved;
    w->dv.dim[y] += moved;
    if (ex != NULL && x / s->t->devices_per_host == ex->host &&
        y / s->t->devices_per_host == ex->host)
        c = exch_step_ms(s, w, ex, x, y);
    else
        c = cost_plan_ms(s->t, w->comp, w->dv.dim, s->fixed_fwd, s->fixed_bwd,
                         w->fwd, w->bwd);
    w->comp[x] = cxm;
    w->comp[y] = cym;
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

/* One thread's share of a critical round: the pieces on the critical
 * device whose rank among them is `id` mod `n`, tried on w. */
struct crit_job {
    const struct ns *s;
    struct ns_work *w;
    const struct ns_state *st;
    const int32_t *tg;
    const struct ns_exch *ex; /* NULL: a learned exchange */
    const size_t *partners;   /* tg[0]'s free pieces, in piece order */
    size_t npartners;
    int32_t crit, ntg;
    int id, n;
    struct ns_step b; /* in: the cost to beat; out: the share's best */
};

static void *crit_trials(void *arg)
{
    struct crit_job *jb = arg;
    const struct ns *s = jb->s;
    const struct ns_state *st = jb->st;
    struct ns_work *w = jb->w;
    const int32_t *tg = jb->tg;
    int32_t crit = jb->crit, q;
    struct ns_step *b = &jb->b;
    struct ns_chg cx, cy;
    size_t i, j, m, rank = 0;

    for (i = 0; i < st->np; i++) {
        const struct ns_level *li = piece_level(s, &st->pc[i]);

        if (st->assign[i] != crit || piece_pinned(s, i))
            continue;
        if (rank++ % (size_t)jb->n != (size_t)jb->id)
            continue;
        for (q = 0; q < jb->ntg; q++) {
            double c;

            if (!device_ok(s, st->pc[i].table, tg[q]) ||
                !step_chg(s, w, st, i, tg[q], SIZE_MAX, &cx, &cy))
                continue;
            c = try_step(s, w, crit, &cx, tg[q], &cy, li->cols, b->cost,
                         jb->ex);
            if (c < b->cost)
                *b = (struct ns_step){i, SIZE_MAX, tg[q], c};
        }
        if (!device_ok(s, st->pc[i].table, tg[0]))
            continue;
        for (m = 0; m < jb->npartners; m++) {
            const struct ns_level *lj;
            double c;

            j = jb->partners[m];
            lj = piece_level(s, &st->pc[j]);
            if (!device_ok(s, st->pc[j].table, crit) ||
                !step_chg(s, w, st, i, tg[0], j, &cx, &cy))
                continue;
            c = try_step(s, w, crit, &cx, tg[0], &cy, li->cols - lj->cols,
                         b->cost, jb->ex);
            if (c < b->cost)
                *b = (struct ns_step){i, j, tg[0], c};
        }
    }
    return NULL;
}

/*
 * One round of the critical-device neighbourhood: moves of pieces off the
 * critical device to one of the NS_TARGETS least ready devices, and swaps
 * with pieces of the least ready one.  Improves *b.  Where the round's
 * trials would take o->parallel_min placements' worth or more (two
 * devices scored a trial), the pieces are shared out over the worker
 * threads, each on a bit-for-bit copy of w's devices; the best of the
 * shares, the lowest piece on a tie, is the step one thread would take
 * (it keeps the first best in piece order).  At 856 tables on 8 devices a
 * round is some 11,000 trials.
 */
static void round_critical(struct ns *s, struct ns_work *w,
                           const struct ns_state *st, struct ns_step *b)
{
    int32_t crit, tg[NS_TARGETS], ntg = 0, r, q;
    double ready[NS_TARGETS];
    struct crit_job job[NS_THREADS_MAX];
    struct ns_exch ex;
    size_t i, ncrit = 0, nt0 = 0, npartners = 0;
    int t, nt = s->nthreads;

    crit = ns_critical_device(s, w);
    if (s->t->comm == NULL)
        exch_init(s, w, crit, &ex);
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
        ncrit += st->assign[i] == crit;
        nt0 += st->assign[i] == tg[0];
        if (st->assign[i] == tg[0] && !piece_pinned(s, i))
            w->partners[npartners++] = i;
    }
    if (2.0 * (double)ncrit * (double)((size_t)ntg + nt0) <
        (double)s->o->parallel_min)
        nt = 1;
    for (t = 0; t < nt; t++) {
        /* Share 0 on w itself, the others on copies of it. */
        struct ns_work *wt = t == 0 ? w : &s->work[t];

        job[t] = (struct crit_job){.s = s,
                                   .w = wt,
                                   .st = st,
                                   .tg = tg,
                                   .ex = s->t->comm == NULL ? &ex : NULL,
                                   .partners = w->partners,
                                   .npartners = npartners,
                                   .crit = crit,
                                   .ntg = ntg,
                                   .id = t,
                                   .n = nt,
                                   .b = *b};
        if (t == 0)
            continue;
        ns_devs_copy(s, &wt->dv, &w->dv);
        memcpy(wt->comp, w->comp, (size_t)s->n * sizeof(*w->comp));
        if (s->fold) /* the rings ns_held() walks, made only then */
            memcpy(wt->ring, w->ring, st->np * sizeof(*w->ring));
    }
    ns_run_shares(nt, crit_trials, job, sizeof(job[0]));
    for (t = 0; t < nt; t++)
        if (job[t].b.i != SIZE_MAX &&
            (job[t].b.cost < b->cost ||
             (job[t].b.cost == b->cost && job[t].b.i < b->i)))
            *b = job[t].b;
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
    struct ns_chg cx, cy;
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

            if (y == x || !device_ok(s, st->pc[i].table, y) ||
                !step_chg(s, w, st, i, y, SIZE_MAX, &cx, &cy))
                continue;
            c = try_step(s, w, x, &cx, y, &cy, li->cols, b->cost, NULL);
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
                !step_chg(s, w, st, i, yj, j, &cx, &cy))
                continue;
            c = try_step(s, w, x, &cx, yj, &cy, li->cols - lj->cols, b->cost,
                         NULL);
            if (c < b->cost)
                *b = (struct ns_step){i, j, yj, c};
        }
    }
}

/* Moves piece k of st to device y, on w's devices too (w->ring current). */
static void move_piece(const struct ns *s, struct ns_work *w,
                       struct ns_state *st, size_t k, int32_t y)
{
    const struct ns_level *lv = piece_level(s, &st->pc[k]);
    int32_t x = st->assign[k], held;

    held = s->fold ? ns_held(s, w, st, k, x) - lv->cols : 0;
    ns_devs_place(s, &w->dv, x, st->pc[k].table, lv, held, -1);
    held = s->fold ? ns_held(s, w, st, k, y) : 0;
    ns_devs_place(s, &w->dv, y, st->pc[k].table, lv, held, +1);
    st->assign[k] = y;
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
        move_piece(s, w, st, b.i, b.to);
        if (b.j != SIZE_MAX)
            move_piece(s, w, st, b.j, from);
        s->st->moves++;
    }
    /* Re-derive the cost from scratch, free of incremental float drift. */
    ns_devs_load(s, w, st);
    st->cost = ns_devs_plan_ms(s, w);
}
