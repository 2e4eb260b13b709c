/*
 * The profiler worker: ground-truth samples for retraining, measured only
 * while the daemon is idle.
 *
 * One thread, at the lowest CPU priority, on its own store connection.  It
 * measures when the profiler is enabled and not paused, no Planner request
 * is in flight, none came for profiler_idle_ms, and there is something to
 * measure: a shard a plan proposed (profw_propose()), else the next random
 * shard of the profile (prof_run, resumable) until the profile holds
 * profiler_max_samples.  A request arriving (profw_request_begin()) raises
 * the abort flag: the timing loop stops before its next step and the
 * sample being timed is dropped, so the worker steps aside within one step.
 * What was committed stays committed.
 *
 * The worker owns the request gate: the service calls
 * profw_request_begin()/end() around every Planner request, and nothing
 * here calls back into the service.  Thread-safe.
 */
#ifndef SHARDD_DAEMON_PROFW_H
#define SHARDD_DAEMON_PROFW_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "kernels.h"
#include "planner.h"
#include "profiler.h"
#include "shardd/err.h"
#include "store.h"

#define PROFW_PROPOSALS    32 /* planned shards waiting to be measured */
#define PROFW_PROPOSAL_MAX 64 /* tables in one proposed shard */
#define PROFW_PATH_MAX     4096
#define PROFW_MAX_BYTES    ((uint64_t)4 << 30) /* largest shard measured */

/* A shard a plan proposed, to be measured (features at the profile's
 * batch; each table's dim is the columns the shard holds). */
struct profw_proposal {
    struct table tables[PROFW_PROPOSAL_MAX];
    size_t n;
};

enum profw_state {
    PROFW_RUNNING = 1, /* numbered as shardd.v1.ProfilerState */
    PROFW_PAUSED = 2,
    PROFW_DISABLED = 3,
};

struct profw {
    pthread_mutex_t mu; /* guards everything marked (mu) */
    pthread_cond_t cv;  /* wakes the worker */
    pthread_t thread;
    bool started;
    struct conf_snap *cf;     /* (mu) settings, one reference */
    bool paused, stopping;    /* (mu) */
    uint64_t measured;        /* (mu) samples this daemon measured */
    uint64_t skipped;         /* (mu) proposals over the memory budget */
    uint64_t remeasured;      /* (mu) measurements the quiet check dropped */
    bool arena_held;          /* (mu) the backend may keep memory for us */
    uint64_t compute_samples; /* (mu) of the profile, as last counted */

    /* Proposals (mu): a ring of PROFW_PROPOSALS, oldest measured first. */
    struct profw_proposal *proposals;
    size_t nproposals, next;

    /* The request gate (lock free). */
    atomic_int inflight;          /* Planner requests running */
    atomic_llong last_request_ms; /* monotonic; when the last one ended */
    kern_flag abort;              /* step aside: a request, a pause, stop */
    atomic_llong abort_ms;        /* when first raised while measuring */
    atomic_bool measuring;        /* a measurement is under way */

    /* Fixed at profw_init(). */
    const struct kern_backend *be; /* NULL: nothing can measure */
    char db_path[PROFW_PATH_MAX];
    char profile[STORE_NAME_MAX];
    char device_name[STORE_DEVICE_MAX];
    int64_t profile_id;
    int64_t batch; /* the profile's batch */
};

/*
 * Sets up the worker of profile `profile` (store id profile_id, holding
 * compute_samples samples) measured with `be` (NULL: the profiler is
 * disabled) at `batch`, on the store at db_path; cf holds the settings (a
 * reference is taken).  Starts no thread.
 */
void profw_init(struct profw *p, const struct kern_backend *be,
                const char *db_path, const char *profile, int64_t profile_id,
                const char *device_name, int64_t batch,
                uint64_t compute_samples, struct conf_snap *cf);

/* Starts the thread (none without a backend): 0 or SD_ENOMEM.
 * profw_stop() drops a measurement under way and joins it. */
int profw_start(struct profw *p, struct sd_diag *d);
void profw_stop(struct profw *p);
void profw_destroy(struct profw *p);

/* New settings (a reload; a reference is taken). */
void profw_configure(struct profw *p, struct conf_snap *cf);

/* A Planner request starts / ends: the worker steps aside meanwhile. */
void profw_request_begin(struct profw *p);
void profw_request_end(struct profw *p);

/* Pauses (true) or resumes; SD_ESTATE when the profiler is disabled. */
int profw_set_paused(struct profw *p, bool paused, enum profw_state *now,
                     struct sd_diag *d);
enum profw_state profw_state(struct profw *p);

/* Samples this daemon measured, the profile's count, and measurements the
 * quiet check dropped and made again. */
void profw_counts(struct profw *p, uint64_t *measured,
                  uint64_t *compute_samples, uint64_t *remeasured);

/* What the backend keeps for the profiler now, the memory budget of one
 * measurement (profiler_max_mb), and proposals skipped for it. */
void profw_memory(struct profw *p, uint64_t *kept, uint64_t *budget_bytes,
                  uint64_t *skipped);

/*
 * Queues the device shards of a plan made at the profile's batch for
 * measuring (the profiler measures what the planner proposes, not only
 * random shards).  Cheap; drops the oldest when full; a device shard of
 * more than PROFW_PROPOSAL_MAX tables, or whose measurement would not fit
 * the memory budget (weights, lookups and buffers: prof_fits()), is
 * skipped and counted.
 */
void profw_propose(struct profw *p, const struct plan *plan,
                   const struct table *tables, int64_t batch);

/* The proposal the worker would measure next, taken off the queue (for
 * tests); false when none is queued. */
bool profw_take_proposal(struct profw *p, struct profw_proposal *out);

#endif /* SHARDD_DAEMON_PROFW_H */
