/*
 * Private to the search room: the sharding-scheme pass neuroshard runs
 * before its column search (schemes.c), and what the room's files share
 * about time and stats.  No other room includes this.
 */
#ifndef SHARDD_PLANNER_SEARCH_INT_H
#define SHARDD_PLANNER_SEARCH_INT_H

#include <time.h>

#include "search/search.h"

/* Milliseconds since t0 (CLOCK_MONOTONIC): the searches' time budgets. */
static inline double search_elapsed_ms(const struct timespec *t0)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) * 1e3 +
           (double)(now.tv_nsec - t0->tv_nsec) / 1e6;
}

/* Adds the work counts of a search that was weighed (greedy runs, states,
 * evaluations, a budget run out) to *to; levels, splits and moves, the
 * kept plan's own, and the time, measured by the caller, are left. */
static inline void search_stats_merge(struct plan_search_stats *to,
                                      const struct plan_search_stats *from)
{
    to->greedy_runs += from->greedy_runs;
    to->states += from->states;
    to->evaluations += from->evaluations;
    to->budget_exhausted |= from->budget_exhausted;
}

/*
 * Why a table fits no device (SD_ENOSPACE, for d): it needs `need` bytes
 * and the most any device has free is `largest_free` (`what` qualifies the
 * need, "" or " with TorchRec's buffers"), with what would help
 * (topology_more_memory()).  Returns SD_ENOSPACE.  baseline.c.
 */
int search_no_room(const char *table, uint64_t need, uint64_t largest_free,
                   const char *what, const struct topology *t,
                   struct sd_diag *d);

/* Why a table left the column search, for the explanation. */
enum scheme_reason {
    REASON_NONE = 0,
    REASON_MEMORY,     /* bigger than any device: rows split */
    REASON_HOT,        /* its narrowest column slice outweighs a device */
    REASON_LIGHTER,    /* its row blocks cost the devices less in total
                        * (asked for: scheme_pass_run()'s `lighter`) */
    REASON_REPLICATE,  /* cheaper replicated than placed once */
    REASON_CONSTRAINT, /* the user's constraint says so */
    REASON_KEPT,       /* small, weighed for replication, kept: cheaper
                        * placed once (fixed stays false) */
};

struct scheme_figs; /* schemes.c */

/*
 * The pass's outcome: which tables the column search places (fixed[i] ==
 * false) and the shards of the others (row blocks on one host or on every
 * device, or a replica on every device), sorted, with their collectives'
 * per-device exchanges.  `forced` says that a constraint takes a table out
 * of the column search, so the search alone is no alternative.
 */
struct scheme_pass {
    bool *fixed;             /* [ntables] */
    enum scheme_reason *why; /* [ntables] */
    struct plan shards;      /* the fixed tables' shards */
    double *fwd, *bwd;       /* [ndevices]: plan_collectives() of shards */
    size_t nfixed;
    bool forced;
    /* Tables whose row blocks over a host cost the devices less in total
     * than the table whole, fixed so or not (`lighter`). */
    size_t nlighter;
    /* Figures for the explanation: replicated tables' summed marginal
     * cost per device, replicated and placed once; the same for the small
     * tables kept whole. */
    double dp_ms, tw_ms;
    size_t kept;
    double kept_dp_ms, kept_tw_ms;
    /* What the model said of each table (schemes.c), for a later pass
     * over the same tables (scheme_pass_run()'s prev). */
    struct scheme_figs *figs;
};

/*
 * Decides the schemes (docs/api.md, "Schemes"): a table bigger than any
 * device is split in row blocks over one host's devices (or every device
 * when one host cannot hold it); one whose narrowest column slice alone
 * (and so the table whole) costs more than the mean device is split in
 * rows over a host; a table that costs the devices less replicated (its
 * local batch on each, plus its share of one bucketed gradient all-reduce)
 * than placed once (its lookups on one device and its columns in every
 * device's all-to-all) is replicated, while the replicas take at most a
 * tenth of the smallest device; constraints (o->constraints) allow, force
 * or forbid each.  With `lighter`, a table whose row blocks over a host
 * cost the devices less in total than the table whole (each block's
 * lookups, at least 0, and the group's exchange, against its lookups and
 * its columns in the all-to-all, weighed on the mean device) is split in
 * rows over a host too; without, such tables are only counted (nlighter).
 * Costs from o->net (through o->memo), asked for only where they can
 * change a choice, and only once: with prev, a pass over the same tables,
 * topology and model (borrowed for the call), its figures are this one's
 * to start from.  *out is initialised here; free it with
 * scheme_pass_free().  0, SD_ENOSPACE (a table fits no scheme: d names it)
 * or SD_ENOMEM.
 */
int scheme_pass_run(const struct table *tables, size_t ntables,
                    const struct topology *t, const struct plan_options *o,
                    bool lighter, const struct scheme_pass *prev,
                    struct scheme_pass *out, struct sd_diag *d);
void scheme_pass_free(struct scheme_pass *sp);

/* Notes (plan_note()) on what the pass fixed and why. */
void scheme_pass_note(const struct scheme_pass *sp, size_t ntables,
                      struct plan *p);

/*
 * The tier pass (tiers.c), run by plan_run() when an algorithm found the
 * devices' memory too small and the topology has host DRAM: sets the tier
 * of every table of `tables` (a copy the caller owns) so that their HBM
 * bytes (shard_bytes()) come to at most `target`, cheapest first: each step
 * moves one table one load factor down (from fused through caching at 0.8
 * ... 0.005 to fused_uvm), the step adding the least modelled host-link
 * time (tier_shard_ms() of the table whole) per byte it frees.  A table's
 * constraint (o->constraints) limits its levels to its tiers, and its
 * caching to its load factor when it fixes one.  Returns 0,
 * SD_ENOSPACE when even all in UVM is over the target, or SD_ENOMEM.
 */
int tier_pass(struct table *tables, size_t n, const struct topology *t,
              const struct plan_options *o, uint64_t target);
/*
 * Tables that a constraint (o->constraints: TorchRec's compute_kernels)
 * keeps out of HBM go to host DRAM even when HBM would hold them: when there
 * are any, *out (owned by the caller, free()) is a copy of the tables, each
 * at the most HBM its constraint allows (a cache at its fixed load factor or
 * the largest weighed); else *out is NULL.  0 or SD_ENOMEM.
 */
int tier_held(const struct table *tables, size_t n,
              const struct plan_options *o, const struct topology *t,
              struct table **out);
/*
 * Why the tiered search found no plan, in d (returns SD_ENOSPACE): the
 * tables whose constraints keep them in HBM (no fused_uvm), the largest
 * named, and what would let them plan; else the host DRAM's size.
 */
int tier_refusal(const struct table *tables, size_t n, const struct topology *t,
                 const struct plan_options *o, struct sd_diag *d);
/* Notes on p what the tier pass chose for `tiered` and what it costs. */
void tier_pass_note(struct plan *p, const struct table *tiered, size_t n,
                    const struct topology *t, enum optimizer opt);

#endif /* SHARDD_PLANNER_SEARCH_INT_H */
