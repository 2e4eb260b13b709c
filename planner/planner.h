/*
 * The shardd planning library, for the modules outside planner/: one include
 * gives all of it.  Pure computation: no gRPC, no SQLite, no libuv, no
 * threads shared with callers.  It is built in four rooms, each with one
 * header; the files inside planner/ include their rooms' headers, never
 * this one.
 *
 *   problem/problem.h  the problem: tables and features, traces, random
 *                      numbers, topologies, plans and their validation,
 *                      the cost-model interface, the analytic compute and
 *                      alpha-beta comm models, plan evaluation
 *   models/models.h    the models: the neural compute model (inference,
 *                      model files, training, sample shards) and TorchRec's
 *                      analytic estimators
 *   search/search.h    the algorithms: options, plan_run() (the dispatch),
 *                      the baselines, torchrec_greedy and neuroshard
 *   formats/formats.h  the formats: JSON of tables, tasks and plans, trace
 *                      files, synthetic tables, tasks and traces
 *
 * Dependencies run one way, search -> models -> problem and formats ->
 * problem (scripts/check-layering.sh).  The conventions every room follows
 * are at the top of problem/problem.h.
 */
#ifndef SHARDD_PLANNER_H
#define SHARDD_PLANNER_H

#include "formats/formats.h"
#include "models/models.h"
#include "problem/problem.h"
#include "search/search.h"

#endif /* SHARDD_PLANNER_H */
