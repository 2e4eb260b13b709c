/*
 * The service's state, private to its files: service.c (opening, closing,
 * reloading, authorisation, the method table), planning.c (Plan,
 * Estimate), features.c (Features), health.c (health, reflection) and admin.c
 * (Admin).  The transport sees struct svc only as a pointer (service.h).
 */
#ifndef SHARDD_DAEMON_SERVICE_INT_H
#define SHARDD_DAEMON_SERVICE_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "audit.h"
#include "cache.h"
#include "config.h"
#include "fleet_state.h"
#include "jobs.h"
#include "kernels.h"
#include "metrics.h"
#include "models.h"
#include "profw.h"
#include "reflect.h"
#include "service.h"
#include "store.h"
#include "wire.h"

#define SVC_PATH_MAX 4096
/* The batch when neither the request, the configuration nor a learned
 * model gives one (the analytic model's; docs/api.md). */
#define SVC_DEFAULT_BATCH 65536

struct svc {
    pthread_mutex_t mu;   /* guards cf */
    struct conf_snap *cf; /* the settings; methods take a reference */
    int64_t started_ms;   /* wall clock */

    struct models models;
    struct plan_cache cache;

    /* The store connection of the request path (store_mu); the job and
     * profiler threads open their own (SQLite WAL lets them work side by
     * side). */
    pthread_mutex_t store_mu;
    struct store *st;
    char db_path[SVC_PATH_MAX];

    /* The measuring backend and the profile it measures (fixed). */
    const struct kern_backend *be; /* NULL: none can measure */
    char profile[STORE_NAME_MAX];
    char device_name[STORE_DEVICE_MAX];
    int64_t profile_id;

    struct jobs jobs;
    struct profw profw;
    struct audit audit;      /* the plan audit, written off the request path */
    struct reflect *reflect; /* read only */
    atomic_bool draining;    /* SIGTERM: health says NOT_SERVING */
    atomic_int searching;    /* Plan searches running now */
    struct metrics metrics;  /* the transport records, ops.c renders */
    struct fleet fleet;      /* fleet.c */
};

/* The settings now: a reference the caller drops with conf_snap_unref(). */
struct conf_snap *svc_conf(struct svc *s);

/* The limits and defaults of the configuration, for wire's checks
 * (planning.c). */
void svc_limits(const struct sd_config *c, struct wire_limits *l);

/* ops.c: resident bytes of this process (0 when unknown), the store's
 * bytes on disk (database, WAL, shared memory), a profiler state's name. */
uint64_t svc__rss_bytes(void);
uint64_t svc__store_bytes(struct svc *s);
const char *svc__profiler_state_name(enum profw_state st);

/* fleet.c: the fleet's part of /metrics and of /api/status (returns
 * non-zero when out of memory). */
struct mtext;
void svc__fleet_metrics(struct svc *s, struct mtext *t);
int svc__fleet_json(struct svc *s, void *json_root);

#endif /* SHARDD_DAEMON_SERVICE_INT_H */
