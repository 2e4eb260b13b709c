/*
 * Retraining jobs.  One job thread runs them one at a time, in submission
 * order, on its own store connection: it loads the profile's newest
 * samples, holds every tenth out (the gate set: never trained or
 * early-stopped on), trains a model reporting progress per epoch, stores
 * it, and activates it (models.h) when its error on the gate set is no
 * worse than the active model's on the same samples, or the request forced
 * it; model versions past models_keep are pruned (never the active one).
 * The thread also schedules retrains (retrain_every_samples new samples, or
 * retrain_every_hours after the newest model when there are new samples),
 * keeps the plan audit bounded and backs the store up every
 * backup_every_hours (rotating, backup_keep kept).
 *
 * The same thread trains placement policies (jobs_policy.c): for the
 * profile's active compute model, on synthetic tasks, gated against
 * size_lookup_greedy on held-out tasks and activated when they beat it;
 * one is queued after every activation of a stored compute model
 * (policy_after_activation).
 *
 * Jobs live in the store; the recent ones are mirrored in memory so that
 * GetJob and WatchJob (polled on the loop thread) read memory.  A job cut
 * off by shutdown ends CANCELLED; one cut off by a crash is marked
 * CANCELLED at the next start.
 *
 * Thread-safe.  Functions that take `st` use the caller's store connection
 * (the caller serialises its use).  Errors are SD_E* codes with d set.
 */
#ifndef SHARDD_DAEMON_JOBS_H
#define SHARDD_DAEMON_JOBS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "models.h"
#include "shardd/err.h"
#include "store.h"

#define JOBS_KEPT        64 /* recent jobs kept in memory */
#define JOBS_MIN_SAMPLES 20 /* fewer: nothing worth training */
#define JOBS_GATE_EVERY  10 /* every 10th sample is held out */
/* A family with this many held-out samples is gated on its own
 * (docs/daemon.md, "Retraining"). */
#define JOBS_GATE_FAMILY_MIN 20
#define JOBS_PATH_MAX        4096
#define JOBS_PROFILES_RATED  16 /* profiles whose last retrain is known */

/* The plan audit keeps 30 days and at most this many records. */
#define JOBS_AUDIT_KEEP_MS   (30LL * 24 * 3600 * 1000)
#define JOBS_AUDIT_KEEP_ROWS 100000

struct jobs {
    pthread_mutex_t mu; /* guards everything marked (mu) */
    pthread_cond_t cv;  /* wakes the thread: a job, a stop, new settings */
    pthread_t thread;
    bool started;
    bool stopping;        /* (mu) */
    atomic_bool cancel;   /* stop the running job (shutdown) */
    struct conf_snap *cf; /* (mu) the settings, one reference */

    struct store_job ring[JOBS_KEPT]; /* (mu) recent jobs */
    size_t n, next;                   /* (mu) */
    struct {
        int64_t profile_id;
        enum store_job_kind kind;
        int64_t at_ms;            /* monotonic; 0: never */
    } rated[JOBS_PROFILES_RATED]; /* (mu) the last retrain per profile
                                   * and kind */
    int64_t last_backup_ms;       /* job thread only; 0: none yet */

    /* Fixed at jobs_init(). */
    char db_path[JOBS_PATH_MAX];
    char own_profile[STORE_NAME_MAX]; /* "" when nothing is measured */
    int64_t own_profile_id;           /* 0 then */
    struct models *models;            /* borrowed */
};

/*
 * Sets up the jobs of the store at db_path: own_profile (and its store id)
 * is what a retrain naming no profile trains and what the schedule
 * watches; models receive the activated models; cf holds the settings (a
 * reference is taken).  Starts no thread.
 */
void jobs_init(struct jobs *j, const char *db_path, const char *own_profile,
               int64_t own_profile_id, struct models *models,
               struct conf_snap *cf);

/* Starts the job thread (0 or SD_ENOMEM); jobs_stop() cancels a running
 * job, marks queued ones cancelled and joins it.  jobs_destroy() after. */
int jobs_start(struct jobs *j, struct sd_diag *d);
void jobs_stop(struct jobs *j);
void jobs_destroy(struct jobs *j);

/* New settings (a reload; a reference is taken). */
void jobs_configure(struct jobs *j, struct conf_snap *cf);

/*
 * Starts a retrain of `kind` of `profile` ("" or NULL: the server's own),
 * or returns the one of that kind already queued or running.  A compute
 * retrain (STORE_JOB_RETRAIN): without force, a profile with no sample
 * newer than its newest model is SD_ESTATE, as is one with fewer than
 * JOBS_MIN_SAMPLES samples.  A policy retrain (STORE_JOB_RETRAIN_POLICY):
 * the profile must have an active stored compute model (SD_ESTATE: none,
 * or the embedded one, whose policy is compiled in); force activates the
 * policy whatever the gate says.  A new retrain within
 * retrain_min_interval_s of the profile's last of its kind is SD_EBUSY,
 * forced or not.  *out gets the job.
 */
int jobs_retrain(struct jobs *j, struct store *st, const char *profile,
                 enum store_job_kind kind, bool force, struct store_job *out,
                 struct sd_diag *d);

/*
 * A stored compute model of `profile` became active (models.h's activated
 * callback, with the store connection it was recorded on): queues a
 * policy retrain for it when policy_after_activation is on, unless one is
 * queued already (a running one trains for the model before).  Best
 * effort: a failure is logged.
 */
void jobs_after_activation(struct jobs *j, struct store *st,
                           const char *profile);

/* The job `id`, from memory or st.  SD_ENOENT when unknown. */
int jobs_get(struct jobs *j, struct store *st, int64_t id,
             struct store_job *out, struct sd_diag *d);

/* Like jobs_get() but memory only (for the loop thread): false if absent. */
bool jobs_peek(struct jobs *j, int64_t id, struct store_job *out);

/* Counts of queued and running jobs. */
void jobs_counts(struct jobs *j, uint32_t *queued, uint32_t *running);

#endif /* SHARDD_DAEMON_JOBS_H */
