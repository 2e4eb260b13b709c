/*
 * The cost models the daemon serves: the active model of each hardware
 * profile, refcounted and hot-swapped; and beside them the placement
 * policies of dreamshard, each bound to the compute model it was trained
 * against, served the same way.
 *
 * Each profile that has a model has a slot holding one reference to its
 * active struct dmodel.  A request takes its own reference under the lock
 * (models_acquire()) and plans with it unlocked; activation swaps the
 * slot's pointer under the lock and drops the slot's reference, so a
 * request in flight finishes on the model it started with and the last
 * release frees the old one.
 *
 * Each model is also resident on the serving backend's device 0 (the GPU
 * on cuda; a copy in host memory on cpu): uploaded once when the model is
 * made, with the model, and freed with its last reference, so a hot swap
 * swaps the device copy too.  A failed upload leaves it NULL (logged):
 * every answer then comes from the host scorer, as without a GPU.
 *
 * Functions that change what is active take the store connection to
 * record it on (`st`, borrowed; the caller serialises its use): the
 * request path passes the service's, the job thread its own.  Everything
 * else is safe from any thread.  Errors are SD_E* codes with d set.
 */
#ifndef SHARDD_DAEMON_MODELS_H
#define SHARDD_DAEMON_MODELS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels.h"
#include "planner.h"
#include "shardd/err.h"
#include "store.h"

#define MODELS_VERSION_MAX 32 /* "embedded", or a store model id */

/* A cost model being served: refcounted, immutable once published. */
struct dmodel {
    atomic_int refs;
    /* Owned through `stored` for a stored model (its member 0), compiled
     * in and borrowed for an embedded one. */
    const struct cost_net *net;
    struct net_memo *memo; /* owned: net's latents; NULL: none */
    /* The ensemble whose member 0 is net (models.h), for the spread of
     * every prediction and quantile plans: a stored model's own
     * (`stored`, when it has 2 members or more), else the compiled-in one
     * beside an embedded model; and its members' latents (owned; NULL
     * entries: none).  ens NULL: no ensemble of 2 or more members. */
    const struct net_ensemble *ens;
    struct net_memo *ens_memo[NET_ENSEMBLE_MAX];
    struct net_ensemble *stored; /* owned: a stored model's members; NULL
                                  * for an embedded one */
    bool embedded;
    int64_t id;                       /* store model id; 0: the embedded */
    char version[MODELS_VERSION_MAX]; /* "embedded", "reference" or the id */
    struct store_model_metrics metrics;
    /* net's parameters on the serving backend's device 0, for batched
     * scoring (prof_net_score_tables()); NULL: none.  Owned. */
    struct kern_net *resident;
};

/* The active model of one profile. */
struct dmodel_slot {
    char profile[STORE_NAME_MAX];
    struct dmodel *m; /* one reference held by the slot */
};

/* A placement policy being served: refcounted, immutable once published. */
struct dpolicy {
    atomic_int refs;
    const struct policy_net *pn; /* owned (free()) unless embedded */
    bool embedded;
    int64_t id;                       /* store version; 0: the embedded */
    char version[MODELS_VERSION_MAX]; /* "embedded" or the id */
    int64_t base_id; /* the compute model's version; 0: the embedded */
};

/* The active policy of one profile. */
struct dpolicy_slot {
    char profile[STORE_NAME_MAX];
    struct dpolicy *p; /* one reference held by the slot */
};

struct store;

/*
 * Called after a stored compute model became active (models_activate()),
 * outside the lock, with the store connection it was recorded on: the
 * service queues a policy retrain for it there (jobs.h).
 */
typedef void (*models_activated_cb)(void *ctx, struct store *st,
                                    const char *profile);

struct models {
    pthread_mutex_t mu; /* guards everything below */
    struct dmodel_slot *slots;
    size_t nslots;
    char default_profile[STORE_NAME_MAX]; /* requests naming none */
    char own_profile[STORE_NAME_MAX];     /* what this server measures */
    size_t memo_entries;     /* each model's memo (latent_cache_entries) */
    struct dmodel *embedded; /* one reference of its own */
    const struct kern_backend *resident_be; /* where models are resident */
    struct dpolicy_slot *pslots;
    size_t npslots;
    /* The embedded policy (one reference); NULL when its image is damaged
     * (logged at start: dreamshard then needs a trained one). */
    struct dpolicy *embedded_policy;
    /* Set once before any thread runs; NULL: nobody is told. */
    models_activated_cb activated;
    void *activated_ctx;
};

/*
 * Loads the embedded model and every profile's active stored model from
 * st.  The embedded model is the one compiled in for own_profile where
 * shardd has one (net_compiled(): an H200's), else the cpu default; the
 * cpu default answers for its own profile either way.  own_profile ("" when the
 * server measures nothing) answers requests that name no profile once it has a
 * model.  A stored model that no longer parses is skipped with a warning (the
 * embedded one or none serves its profile).  resident_be (NULL: none) is the
 * backend every model is made resident on (device 0).  On failure nothing is
 * left to free.
 */
int models_init(struct models *ms, struct store *st, const char *own_profile,
                size_t memo_entries, const struct kern_backend *resident_be,
                struct sd_diag *d);
void models_destroy(struct models *ms);

/*
 * A reference to the active model of `profile` (NULL or "": the default
 * profile's): release it with dmodel_release().  SD_ESTATE when no model
 * answers for the profile (d says which profiles do).
 */
int models_acquire(struct models *ms, const char *profile, struct dmodel **out,
                   struct sd_diag *d);
void dmodel_release(struct dmodel *m); /* NULL-safe */

/* A reference to the embedded model (release it). */
struct dmodel *models_embedded(struct models *ms);

/*
 * Makes stored model `id` active for its profile: in the store, then in
 * the slots.  `ens`, when not NULL, is the parsed model, an ensemble of
 * one or more (ownership passes here, success or not); else it is loaded
 * from the store.  Sets *info to
 * the model and *previous to the version it replaced ("" when none).
 * SD_ENOENT for an unknown id, SD_EFORMAT for a model that does not load.
 * A stored policy's id (net NULL) activates that policy instead
 * (models_activate_policy()).  A compute model's activation calls
 * ms->activated.
 */
int models_activate(struct models *ms, struct store *st, int64_t id,
                    struct net_ensemble *ens, struct store_model_info *info,
                    char previous[MODELS_VERSION_MAX], struct sd_diag *d);

/*
 * Makes the embedded model answer by default again (the rollback from a
 * retrained model): no stored model of its profile stays active, nor of
 * the server's own profile where that is another.  *previous: the version
 * that answered by default.
 */
int models_activate_embedded(struct models *ms, struct store *st,
                             char previous[MODELS_VERSION_MAX],
                             struct sd_diag *d);

/*
 * The policy that answers for compute model m: its profile's active policy
 * when that was trained against m, else the embedded policy when it was
 * (m the embedded model).  A reference: dpolicy_release() it.  SD_ESTATE
 * when none was (d says which policy the profile has and what to do).
 */
int models_acquire_policy(struct models *ms, const struct dmodel *m,
                          struct dpolicy **out, struct sd_diag *d);
void dpolicy_release(struct dpolicy *p); /* NULL-safe */

/*
 * Makes stored policy `id` active for its profile, in the store and in the
 * slots.  pn, when not NULL, is the parsed policy (ownership passes here,
 * success or not).  Sets *info and *previous as models_activate().
 */
int models_activate_policy(struct models *ms, struct store *st, int64_t id,
                           struct policy_net *pn, struct store_model_info *info,
                           char previous[MODELS_VERSION_MAX],
                           struct sd_diag *d);

/* Parses a stored policy blob (its format version, its profile).  *out
 * owned by the caller (free()).  SD_EFORMAT with d naming the version. */
int models_parse_stored_policy(const struct store_model *sm,
                               struct policy_net **out, struct sd_diag *d);

/* The profile requests naming none are answered for (a copy). */
void models_default_profile(struct models *ms, char out[STORE_NAME_MAX]);

/*
 * Parses a stored compute model's blob, checking its format version and
 * profile: a model file, an ensemble of one, or an ensemble file (a
 * retrain with retrain_ensemble of 2 or more, `shardctl train --ensemble`)
 * whose member 0 is the model.  *out is owned by the caller
 * (net_ensemble_free()).  SD_EFORMAT with d naming the model.
 */
int models_parse_stored(const struct store_model *sm, struct net_ensemble **out,
                        struct sd_diag *d);

#endif /* SHARDD_DAEMON_MODELS_H */
