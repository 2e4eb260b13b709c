/*
 * The fleet's sync thread (fleet_sync.h).
 */
#include "fleet_sync.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rpc_client.h"
#include "shardd/log.h"

#define PUSH           "/shardd.v1.Fleet/PushSamples"
#define GET            "/shardd.v1.Fleet/GetModel"
#define CURSOR_UNKNOWN (-1) /* ask the trainer where to resume */

struct fleet_sync {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop; /* (mu) */
    struct svc *svc;
    struct rpc_peer *peer;
    int role;
    uint32_t period_ms;
};

/* Waits period ms or until asked to stop; true when asked. */
static bool nap(struct fleet_sync *f, uint32_t ms)
{
    struct timespec until = sd_after_ms(CLOCK_MONOTONIC, ms);
    bool stop;

    pthread_mutex_lock(&f->mu);
    while (!f->stop &&
           pthread_cond_timedwait(&f->cv, &f->mu, &until) != ETIMEDOUT)
        ;
    stop = f->stop;
    pthread_mutex_unlock(&f->mu);
    return stop;
}

/* One exchange with the trainer. */
static int exchange(struct fleet_sync *f, const char *method,
                    const uint8_t *req, size_t len, uint8_t **resp,
                    size_t *resp_len, struct sd_diag *d)
{
    return rpc_peer_call(f->peer, method, req, len, FLEET_CALL_MS, resp,
                         resp_len, d);
}

/* Pushes the samples after *cursor (after asking for it when unknown);
 * *more when a full batch went (push again at once). */
static int push_once(struct fleet_sync *f, int64_t *cursor, bool *more,
                     struct sd_diag *d)
{
    uint8_t *req = NULL, *resp = NULL;
    size_t len = 0, resp_len = 0, n = 0;
    int64_t acked;
    int rv;

    *more = false;
    /* An unknown cursor: a push of no samples asks where to resume. */
    rv = svc_fleet_push_next(f->svc, *cursor < 0 ? INT64_MAX : *cursor, &req,
                             &len, &n, d);
    if (rv != 0)
        return rv;
    if (*cursor >= 0 && n == 0) {
        free(req);
        return 0; /* nothing new */
    }
    rv = exchange(f, PUSH, req, len, &resp, &resp_len, d);
    free(req);
    if (rv == 0)
        rv = svc_fleet_push_done(f->svc, resp, resp_len, &acked, d);
    free(resp);
    if (rv != 0)
        return rv;
    if (n > 0)
        sd_log(SD_LOG_DEBUG,
               "fleet: pushed %zu samples; acknowledged up to %lld", n,
               (long long)acked);
    *more = *cursor < 0 || n == SVC_FLEET_PUSH_MAX;
    *cursor = acked;
    return 0;
}

static int fetch_once(struct fleet_sync *f, struct sd_diag *d)
{
    uint8_t *req = NULL, *resp = NULL;
    size_t len = 0, resp_len = 0;
    bool swapped;
    int rv;

    rv = svc_fleet_model_ask(f->svc, &req, &len, d);
    if (rv != 0)
        return rv;
    rv = exchange(f, GET, req, len, &resp, &resp_len, d);
    free(req);
    if (rv == 0)
        rv = svc_fleet_model_take(f->svc, resp, resp_len, &swapped, d);
    free(resp);
    return rv;
}

static void *sync_main(void *arg)
{
    struct fleet_sync *f = arg;
    int64_t cursor = CURSOR_UNKNOWN;
    bool more = false, failing = false;
    struct sd_diag d;
    int rv;

    for (;;) {
        memset(&d, 0, sizeof(d));
        rv = f->role == CONF_FLEET_PROFILER ? push_once(f, &cursor, &more, &d)
                                            : fetch_once(f, &d);
        if (rv != 0) {
            /* Samples wait in our store; the trainer says where to resume
             * once it answers again. */
            cursor = CURSOR_UNKNOWN;
            more = false;
            svc_fleet_failed(f->svc, &d);
            if (!failing || rv != SD_ESTATE)
                sd_log(rv == SD_ESTATE ? SD_LOG_DEBUG : SD_LOG_WARN,
                       "fleet: %s", d.msg);
            failing = true;
        } else if (failing) {
            sd_log(SD_LOG_INFO, "fleet: the trainer answers again");
            failing = false;
        }
        if (nap(f, more ? 0 : f->period_ms))
            break;
    }
    return NULL;
}

int fleet_sync_start(struct svc *svc, int role, const char *trainer,
                     const char *token, uint32_t period_ms,
                     struct fleet_sync **out, struct sd_diag *d)
{
    struct fleet_sync *f;
    pthread_condattr_t ca;
    int rv;

    if (role != CONF_FLEET_PROFILER && role != CONF_FLEET_PLANNER)
        return sd_diag_set(d, SD_EINVAL, "fleet_role: no sync for this role");
    f = calloc(1, sizeof(*f));
    if (f == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    rv = rpc_peer_open(trainer, token, &f->peer, d);
    if (rv != 0) {
        free(f);
        return rv;
    }
    f->svc = svc;
    f->role = role;
    f->period_ms = period_ms;
    pthread_mutex_init(&f->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&f->thread, NULL, sync_main, f) != 0) {
        pthread_cond_destroy(&f->cv);
        pthread_mutex_destroy(&f->mu);
        rpc_peer_close(f->peer);
        free(f);
        return sd_diag_set(d, SD_ENOMEM, "fleet: cannot start its thread");
    }
    *out = f;
    return 0;
}

void fleet_sync_request_stop(struct fleet_sync *f)
{
    if (f == NULL)
        return;
    pthread_mutex_lock(&f->mu);
    f->stop = true;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

void fleet_sync_stop(struct fleet_sync *f)
{
    if (f == NULL)
        return;
    fleet_sync_request_stop(f);
    pthread_join(f->thread, NULL);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    rpc_peer_close(f->peer);
    free(f);
}
