/*
 * The algorithms, above the problem and the models (problem.h has the
 * conventions): their names and options and plan_run(), the dispatch
 * (run.c); the non-learned baselines (baseline.c), TorchRec's greedy
 * partitioner (torchrec.c) and NeuroShard's search (neuroshard.c).  The
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
    PLAN_ALG_COUNT
};

/* Parses an algorithm name; SD_EINVAL with d listing the known names. */
int plan_alg_parse(const char *s, enum plan_alg *out, struct sd_diag *d);
const char *plan_alg_name(enum plan_alg a);

struct plan_options {
    enum plan_alg alg;
    enum optimizer optimizer;
    uint64_t seed; /* for random */
    /* neuroshard: the model searched with (borrowed; required). */
    const struct cost_net *net;
    struct net_memo *memo; /* neuroshard: net's memo (borrowed); NULL: none */
    double time_budget_ms; /* neuroshard: stop the beam after this; 0: none */
    bool column_splits;    /* neuroshard: allow column-wise splits */
    bool local_search;     /* neuroshard: final move/swap pass */
    int32_t beam_width;    /* 3 */
    int32_t beam_depth;    /* 10 */
    /* top-k by size and by cost to split; 10 (at most one in ten tables,
     * never fewer than 5: neuroshard.c) */
    int32_t candidates;
    /*
     * neuroshard: the beam's budget in piece placements (4,000,000; 0:
     * none).  A level that would go over it is not started: unlike the
     * time budget it gives the same plan on any machine and load.
     */
    int64_t beam_evaluations;
    int32_t threads; /* neuroshard: scoring threads; 0: one per CPU */
    /*
     * Pins (borrowed; NULL: none): pins[i] is the device table i must go
     * to whole, or -1 where it may go anywhere.  Every algorithm places
     * the pinned tables first and never splits them.
     */
    const int32_t *pins;
    /*
     * When not NULL and set (by another thread), the search stops as if
     * its time budget ran out: the caller no longer wants the plan.  The
     * baselines finish (they take microseconds).
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
 * dim * pooling factor, or dim * pooling factor * log10(rows).  Unlike the
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
                         const int32_t *pins, struct plan *out,
                         struct sd_diag *d);

#endif /* SHARDD_PLANNER_SEARCH_H */
