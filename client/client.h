/*
 * shardctl, the command-line client: what its files share.  The client owns
 * presentation (human tables); the planning library owns plans and formats
 * that programs read (JSON).
 */
#ifndef SHARDD_CLIENT_H
#define SHARDD_CLIENT_H

#include <stddef.h>
#include <stdio.h>

#include "planner.h"

/*
 * Writes a plan as a table for people, in the spirit of TorchRec's planner
 * statistics: a header with the plan cost and the compute imbalance, then
 * per device its memory (and share of capacity), cost parts, shard count and
 * the tables it holds (column slices as name[from:to]).
 */
void format_plan_text(FILE *out, const struct plan *p,
                      const struct table *tables, size_t ntables,
                      const struct topology *t);

/*
 * The plan's explanation: the slowest device and the shards driving it, the
 * lower bound and the gap, and what the search did (when it searched).
 */
void format_explain(FILE *out, const struct plan *p,
                    const struct table *tables);

#endif /* SHARDD_CLIENT_H */
