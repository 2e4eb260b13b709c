/*
 * shardctl: the command-line client of shardd.
 *
 * Offline mode runs the planning library in-process:
 *   shardctl gen-tables --count N --seed S [--out F]
 *   shardctl gen-tasks  --count N --seed S --tables F [--out F]
 *   shardctl features   --trace FILE|DIR [--out F]
 *   shardctl cache-curve --tables F [--table NAME]  (tiers.c)
 *   shardctl plan --offline --tables F --devices N --mem-gb G [--alg NAME]
 *                 [--model F] [--json | --torchrec]
 * and the measuring side on this machine's devices and a store:
 *   shardctl profile --db F --samples N;  shardctl eval --tables F --plan F
 *   shardctl train --db F [--profile P] [--out F]
 *   shardctl comm-profile [--db F] --devices N  collectives timed
 *   shardctl import-model --neuroshard F ...;  shardctl comm-fit FILE...
 *   shardctl train-policy --db F [--profile P]   (train_policy.c)
 * Online mode asks a running shardd (online.c): plan without --offline,
 * estimate, status, models, activate, retrain, job, profiler, health.
 * (shardctl --help lists every option.)
 *
 * This file is main(): the command line is parsed (opts.c), then the
 * command runs: offline.c, measure.c, or online.c for what asks shardd.
 * Exit codes: 0 success, 1 internal failure (out of memory, cannot write,
 * the daemon unreachable or failing), 2 bad input or usage, always with one
 * message on stderr.
 */
#include <stdbool.h>
#include <stdio.h>

#include "client.h"

/* plan and estimate run in this process with --offline, else ask shardd. */
static int run_plan(const struct ctl_opts *o)
{
    return o->offline ? offline_plan(o) : online_run(o);
}

static int run_estimate(const struct ctl_opts *o)
{
    return o->offline ? offline_estimate(o) : online_run(o);
}

static int (*const commands[CTL_CMD_COUNT])(const struct ctl_opts *o) = {
    [CTL_CMD_GEN_TABLES] = offline_gen_tables,
    [CTL_CMD_GEN_TASKS] = offline_gen_tasks,
    [CTL_CMD_PLAN] = run_plan,
    [CTL_CMD_PROFILE] = measure_profile,
    [CTL_CMD_TRAIN] = measure_train,
    [CTL_CMD_SCORE] = measure_score,
    [CTL_CMD_EVAL] = measure_eval,
    [CTL_CMD_COMM_PROFILE] = comm_profile,
    [CTL_CMD_ESTIMATE] = run_estimate,
    [CTL_CMD_STATUS] = online_run,
    [CTL_CMD_MODELS] = online_run,
    [CTL_CMD_ACTIVATE] = online_run,
    [CTL_CMD_RETRAIN] = online_run,
    [CTL_CMD_JOB] = online_run,
    [CTL_CMD_PROFILER] = online_run,
    [CTL_CMD_HEALTH] = online_run,
    [CTL_CMD_FEATURES] = offline_features,
    [CTL_CMD_IMPORT_MODEL] = import_model,
    [CTL_CMD_COMM_FIT] = import_comm_fit,
    [CTL_CMD_TRAIN_POLICY] = train_policy_run,
    [CTL_CMD_CACHE_CURVE] = tiers_cache_curve,
};

int main(int argc, char **argv)
{
    struct ctl_opts o;
    int rv;

    rv = ctl_opts_parse(argc, argv, &o);
    if (rv != 0)
        return rv;
    if (o.help)
        return ctl_usage_of(stdout, o.help_on);
    return commands[o.cmd](&o);
}
