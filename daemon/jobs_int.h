/*
 * What jobs.c and jobs_policy.c share (jobs.h is the module's header): the
 * state of the job running and how it reports.  Job thread only.
 */
#ifndef SHARDD_DAEMON_JOBS_INT_H
#define SHARDD_DAEMON_JOBS_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "jobs.h"

/* The job the thread runs. */
struct jobs__run {
    struct jobs *jb;
    struct store *st; /* the job thread's connection */
    int64_t id;
    int64_t last_store_ms;
    int32_t member, members; /* the ensemble member a retrain trains */
};

/*
 * Moves the job in memory (WatchJob reads it), and in the store at most
 * once a second and at every change of state.
 */
void jobs__update(struct jobs__run *rc, enum store_job_state state,
                  double progress, const char *message, int64_t model);

/*
 * Records `model` as the job's result in the store, before it is
 * activated: a daemon killed between the activation and the job's end
 * leaves a job whose model is active, which the next start marks succeeded
 * (store_job_cancel_unfinished()) instead of cancelled.  Best effort: a
 * failure is logged, and such a kill then reads as a cancelled job.
 */
void jobs__record_model(struct jobs__run *rc, int64_t model);

/* Prunes the profile's versions past models_keep (best effort). */
void jobs__prune(struct jobs *jb, struct store *st,
                 const struct store_profile *prof);

/*
 * Checks that a policy retrain of prof can start: its active model is a
 * stored one (SD_ESTATE otherwise, d says why).
 */
int jobs__policy_check(struct jobs *jb, const struct store_profile *prof,
                       struct sd_diag *d);

/* Runs a policy retrain; returns the terminal state, msg and *model. */
enum store_job_state jobs__retrain_policy(struct jobs__run *rc,
                                          const char *profile, bool force,
                                          char *msg, size_t cap,
                                          int64_t *model);

#endif /* SHARDD_DAEMON_JOBS_INT_H */
