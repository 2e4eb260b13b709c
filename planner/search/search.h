/*
 * The algorithms, above the problem and the models (problem.h has the
 * conventions): their names and options and plan_run(), the dispatch
 * (run.c); the non-learned baselines (baseline.c), TorchRec's greedy
 * partitioner (torchrec.c), NeuroShard's search (neuroshard.c, over the
 * ns_*.c files of neuroshard_int.h) and DreamShard's learned policy
 * (dreamshard.c).  The
 * algorithms are built from the problem's building blocks and never call
 * plan_run(); no other room includes this one.
 */
#ifndef SHARDD_PLANNER_SEARCH_H
#define SHARDD_PLANNER_SEARCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/models.h"
#include "problem/problem.h"
#include "shardd/err.h"

/* ------------------------------------------------------------------------ */
/* Algorithm names, options and the dispatch (run.c)                        */

enum plan_alg {
    PLAN_ALG_RANDOM = 0,
    PLAN_ALG_DIM_GREEDY,
    PLAN_ALG_SIZE_GREEDY,
    PLAN_ALG_LOOKUP_GREEDY,
    PLAN_ALG_SIZE_LOOKUP_GREEDY,
    PLAN_ALG_TORCHREC_GREEDY,
    PLAN_ALG_NEUROSHARD,
    PLAN_ALG_DREAMSHARD,
    PLAN_ALG_COUNT
};

/* Parses an algorithm name; SD_EINVAL with d listing the known names. */
int plan_alg_parse(const char *s, enum plan_alg *out, struct sd_diag *d);
const char *plan_alg_name(enum plan_alg a);

struct plan_options {
    enum plan_alg alg;
    enum optimizer optimizer;
    uint64_t seed; /* for random */
    /* neuroshard, dreamshard: the model searched with (borrowed;
     * required). */
    const struct cost_net *net;
    /* neuroshard, dreamshard: net's memo (borrowed); NULL: none */
    struct net_memo *memo;
    /* dreamshard: the policy, trained against net (borrowed; required). */
    const struct policy_net *policy;
    /* neuroshard: stop the beam after this; dreamshard: place the rest
     * on the least loaded devices after this; 0: none */
    double time_budget_ms;
    bool column_splits; /* neuroshard: allow column-wise splits */
    bool local_search;  /* neuroshard: final move/swap pass */
    /* neuroshard, with column splits: TorchRec's greedy proposal priced by
     * the same model and returned where it is cheaper (neuroshard.c) */
    bool weigh_torchrec;
    /* the widest beam; 3 (2 for fewer than 160 tables: neuroshard.c) */
    int32_t beam_width;
    int32_t beam_depth; /* 10 */
    /* top-k by size and by cost to split; 10 (at most one in sixteen
     * tables, never fewer than 3: neuroshard.c) */
    int32_t candidates;
    /*
     * neuroshard: the beam's budget in piece placements (4,000,000; 0:
     * none).  A level that would go over it is not started: unlike the
     * time budget it gives the same plan on any machine and load.
     */
    int64_t beam_evaluations;
#define PLAN_BEAM_EVALUATIONS 4000000
    int32_t threads; /* neuroshard: scoring threads; 0: one per CPU */
    /*
     * neuroshard: a beam level whose children would take fewer piece
     * placements than this is scored on one thread (20,000; 0: every level
     * on all of them).  Starting and joining a thread per level costs more
     * than a small level gains; the plan is the same either way.
     */
    int64_t parallel_min;
#define PLAN_PARALLEL_MIN 20000
    /*
     * Pins (borrowed; NULL: none): pins[i] is the device table i must go
     * to whole, or -1 where it may go anywhere.  Every algorithm places
     * the pinned tables first and never splits them.
     */
    const int32_t *pins;
    /*
     * Per-table constraints (borrowed; NULL: none; else one per table):
     * schemes, row blocks, no split, a host.  neuroshard and
     * torchrec_greedy honour them; the baselines place whole tables and
     * refuse a table that may not be whole.
     */
    const struct table_constraint *constraints;
    /*
     * When not NULL and set (by another thread), the search stops as if
     * its time budget ran out: the caller no longer wants the plan.  The
     * baselines finish (they take microseconds); dreamshard places the
     * rest on the least loaded devices.
     */
    const atomic_bool *cancel;
    /*
     * Robust plans (models.h, ensembles): with an ensemble of two members
     * or more (borrowed; NULL: none), neuroshard searches once with each
     * member as its net (its search scores with one net, through its own
     * fast path) and keeps the plan that costs least under plan_run()'s
     * model m: pass the ensemble's quantile cost model there
     * (net_ensemble_cost_model_init(ecm, ensemble, quantile)) to plan for
     * that quantile of the members' costs.  The time budget is shared
     * among the searches.  The other algorithms place as they always do;
     * m scores their plans.
     */
    const struct net_ensemble *ensemble;
    double quantile; /* in [0, 1]; what m answers with (for the record) */
    /* With an ensemble: NULL, or ensemble->k memos, member i's search
     * through ensemble_memos[i] (NULL: none; borrowed).  Without them
     * member 0 searches through memo and the others compute every latent
     * (a robust plan of 856 tables spent 40 % of its time there). */
    struct net_memo *const *ensemble_memos;
};

/* alg size_lookup_greedy, sgd, seed 0, neuroshard defaults as above. */
void plan_options_default(struct plan_options *o);

/*
 * Places tables on the topology's devices with one algorithm and fills *out
 * (initialised here; plan_destroy() it) with a sorted, validated plan.  The
 * plan's costs are filled with plan_evaluate() and model m.  Returns 0,
 * SD_EINVAL (bad tables or topology, d says which), SD_ENOSPACE (a table fits
 * on no device: d names it and the shortfall in bytes), or SD_ENOMEM.
 */
int plan_run(const struct table *tables, size_t ntables,
             const struct topology *t, const struct plan_options *o,
             const struct cost_model *m, struct plan *out, struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* Algorithms (baseline.c, torchrec.c, neuroshard.c)                        */

/*
 * The non-learned baselines of neuroshard.md 7, table-wise only: random
 * (uniform over the devices with room) and LPT greedy by dim, size,
 * dim * pooling factor, or dim * pooling factor * log10(rows), the last
 * two plus a tiered table's host-link time (baseline.c).  Unlike the
 * original, a table that fits nowhere is an error, never an overflow onto
 * the last device.  *out is initialised here; same returns as plan_run().
 */
int plan_baseline(const struct table *tables, size_t ntables,
                  const struct topology *t, const struct plan_options *o,
                  struct plan *out, struct sd_diag *d);

/*
 * LPT placement used by the greedy baselines (neuroshard.md 7): the pinned
 * tables (pins may be NULL) onto their devices, then the others in
 * descending (cost, size, index) order, each onto the device with the least
 * accumulated cost among those with room (ties: less memory, lower id).
 * Exposed for tests.  Same returns as plan_run(); *out is initialised here.
 */
int plan_greedy_lpt(const struct table *tables, size_t ntables,
                    const double *cost, const int32_t *pins,
                    const struct topology *t, enum optimizer opt,
                    struct plan *out, struct sd_diag *d);

/*
 * NeuroShard's search (neuroshard.md 6.3-6.4) with o->net: a beam search
 * over column-wise splits whose every state is scored by a table-wise
 * greedy grid search, then a local search of moves and swaps off the
 * critical device.  Faster than the original by construction: cached
 * per-(table, width) latents projected through the head's first layer, so
 * placing a table is 64 additions; split states deduplicated; grid scales
 * that cannot change the greedy skipped.  Deterministic for the same inputs
 * unless the time budget cuts it short.  Fills out->stats, and out->cost_ms
 * with the search's own score (plan_evaluate() replaces it with the same
 * figure computed afresh).  *out is initialised here; same returns as
 * plan_run() (SD_EINVAL without a model).
 */
int plan_neuroshard(const struct table *tables, size_t ntables,
                    const struct topology *t, const struct plan_options *o,
                    struct plan *out, struct sd_diag *d);

/*
 * DreamShard's policy (neuroshard.md 9) with o->policy over o->net: whole
 * tables, pinned ones first, then the others costliest first, each onto
 * the legal device (room left, its own capacity) of highest logit.  Once
 * o->cancel is set or the time budget is spent, the remaining tables go
 * to the least loaded device (policy_env_least_loaded(): no network runs)
 * and stats.budget_exhausted says so.  Deterministic for the same inputs
 * unless cut short.  Fills
 * out->stats (search_ms, evaluations: devices scored) and out->cost_ms
 * with the MDP's cost.  *out is initialised here; same returns as
 * plan_run(), SD_EINVAL without a model, without a policy (d says to
 * train one) or with a policy trained against another model.
 */
int plan_dreamshard(const struct table *tables, size_t ntables,
                    const struct topology *t, const struct plan_options *o,
                    struct plan *out, struct sd_diag *d);

/* How a policy did against size_lookup_greedy on held-out tasks. */
struct dreamshard_gate {
    int32_t tasks;
    int32_t planned_both;  /* the means are over these */
    int32_t policy_failed; /* tasks the policy could not place */
    int32_t greedy_failed;
    int32_t lost;     /* tasks only the greedy could place */
    double policy_ms; /* mean plan cost */
    double greedy_ms;
    double ratio; /* mean per task of policy / greedy */
    bool pass;    /* planned_both > 0, lost 0, policy_ms < greedy_ms */
};

/*
 * The gate of a trained policy (a daemon activates a policy only when it
 * passes): dreamshard and size_lookup_greedy plan every task on topology
 * t, both scored by m; it passes when its mean plan cost is lower and it
 * placed every task the greedy placed.  Returns 0 (*out filled, pass or
 * not), SD_EINVAL (no tasks, or pn is not m's) or SD_ENOMEM.
 */
int dreamshard_gate(const struct policy_net *pn, const struct cost_net *m,
                    const struct policy_task *tasks, size_t n,
                    const struct topology *t, enum optimizer opt,
                    struct dreamshard_gate *out, struct sd_diag *d);

/*
 * TorchRec's GreedyPerfPartitioner over its estimators (models.h), for
 * table-wise and column-wise options (torchrec_planner.md 1.2-1.4):
 * proposals all-TW, all-CW and per-table best, each partitioned
 * largest-storage first onto the device heap ordered by (perf, rank % local,
 * rank); the best rated plan (max rank total perf) wins.  Pinned tables
 * (pins may be NULL) are table-wise in every proposal and go to their
 * devices first, as a TorchRec user would place them by hand.  *out is
 * initialised here.
 */
int plan_torchrec_greedy(const struct table *tables, size_t ntables,
                         const struct topology *t, enum optimizer opt,
                         const int32_t *pins,
                         const struct table_constraint *cons, struct plan *out,
                         struct sd_diag *d);

#endif /* SHARDD_PLANNER_SEARCH_H */
