/*
 * The shardd service: the methods of shardd.v1.Planner, shardd.v1.Admin,
 * grpc.health.v1.Health and server reflection as plain functions from
 * request bytes to response bytes, and the state they share.  No gRPC and
 * no libuv here: the transport (rpc.h) decodes nothing, it hands bytes to
 * the functions of svc_methods[] and sends what they return, so the whole
 * service is testable without a network (tests/unit/test_service.c).
 *
 * Data flows one way: transport -> service -> the service's parts (models,
 * plan cache, jobs, profiler worker, reflection, wire conversion) -> the
 * planner and the store.  No part calls back into the service.
 *
 * Threads: unary methods run on transport worker threads (any number at
 * once); stream and bidi methods are polled on the transport's loop thread
 * and must not block.  Errors are 0 or a negative SD_E* code with a struct
 * sd_diag line for the client; the transport maps codes to statuses once.
 */
#ifndef SHARDD_DAEMON_SERVICE_H
#define SHARDD_DAEMON_SERVICE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "shardd/err.h"

struct svc; /* opaque: service_int.h */

/* What the transport tells a method about its call. */
struct svc_call {
    int64_t deadline_ms; /* monotonic (sd_now_ms()); INT64_MAX: none */
    /* Set (by the transport) when the work should stop: the client left,
     * or the server is stopping and its grace period ran out.  A search
     * stops at it as at the end of its budget.  NULL: nothing stops it. */
    const atomic_bool *stop;
    /* Set too when the client left (cancelled, or its deadline passed):
     * nobody takes the answer, and the method returns SD_ECANCELED.  When
     * only `stop` is set, a search answers with its best plan so far,
     * marked time_budget_exhausted.  May be NULL. */
    const atomic_bool *gone;
};

/* Which queue of workers a unary call waits in: big searches may take
 * every worker but one, so small requests always find one. */
enum svc_lane {
    SVC_LANE_SMALL = 0,
    SVC_LANE_BIG = 1,
};

/*
 * A unary method: decodes `req` (len bytes, borrowed), does the work, and
 * on success sets *resp to a new buffer of *resp_len bytes (the packed
 * response; the caller frees it; never NULL, even for 0 bytes).  On failure
 * returns a negative SD_E* code with d set to one line for the client, and
 * leaves *resp alone.  Codes and what the transport answers:
 *   SD_EINVAL, SD_EFORMAT     bad input (INVALID_ARGUMENT)
 *   SD_ENOENT                 no such model version or job (NOT_FOUND)
 *   SD_ESTATE                 not now: no model answers for the profile, no
 *                             new samples, profiler disabled
 *                             (FAILED_PRECONDITION)
 *   SD_ENOSPACE               tables do not fit the devices, SD_ERANGE over
 *                             a server limit, SD_ENOMEM, SD_EBUSY
 *                             (RESOURCE_EXHAUSTED)
 *   SD_ETIMEDOUT              the deadline passed (DEADLINE_EXCEEDED)
 *   SD_ECANCELED              the client left (CANCELLED; never sent)
 *   SD_EUNSUPPORTED           a feature this build lacks (UNIMPLEMENTED)
 *   SD_ECORRUPT               the store is damaged (DATA_LOSS)
 * SD_EBUSY is also a retrain asked for within retrain_min_interval_s.
 */
typedef int (*svc_method_fn)(struct svc *s, const struct svc_call *call,
                             const uint8_t *req, size_t len, uint8_t **resp,
                             size_t *resp_len, struct sd_diag *d);

/*
 * A server-streaming method, polled on the loop thread (it must not block:
 * it reads memory, not the store, after its first poll).  The first poll
 * gets *state NULL and the request; it may set *state (freed with free()
 * when the call ends).  Each poll returns 0 with *msg set (a packed message
 * to send; owned by the caller) or NULL (nothing new), and *last true after
 * the final message; or an SD_E* code that ends the call with that status.
 */
typedef int (*svc_stream_fn)(struct svc *s, const uint8_t *req, size_t len,
                             void **state, uint8_t **msg, size_t *msg_len,
                             bool *last, struct sd_diag *d);

/*
 * A bidirectional-streaming method that answers each request message with
 * one response message, on the loop thread (quick, never blocking).
 * Returns 0 with *resp set (owned by the caller), or an SD_E* code that
 * ends the call with that status.
 */
typedef int (*svc_bidi_fn)(struct svc *s, const uint8_t *req, size_t len,
                           uint8_t **resp, size_t *resp_len, struct sd_diag *d);

/*
 * The lane of a unary request, judged from its bytes on the transport's
 * loop thread: quick (it skims the message, decodes nothing big) and never
 * failing (bytes that are no request are small: the method refuses them).
 */
typedef enum svc_lane (*svc_lane_fn)(struct svc *s, const uint8_t *req,
                                     size_t len);

/* One method: its full path and exactly one of fn, stream and bidi. */
struct svc_method {
    const char *path; /* "/shardd.v1.Planner/Plan" */
    bool admin;       /* needs the unix socket or the admin token */
    bool draining_ok; /* still served in the lame-duck period (health) */
    svc_method_fn fn;
    svc_stream_fn stream;
    svc_bidi_fn bidi;
    svc_lane_fn lane; /* fn only; NULL: always SVC_LANE_SMALL */
};

/* Every method the service serves (static). */
extern const struct svc_method svc_methods[];
extern const size_t svc_nmethods;

/*
 * Opens the service on cfg's data directory: the store (data_dir/shardd.db,
 * created when missing), the measuring backend and its profile, the
 * embedded and active stored models, reflection; marks jobs a previous
 * daemon left unfinished as cancelled.  Starts no thread.  *out is owned by
 * the caller (svc_close()).  Returns 0 or an SD_E* code with d set; on
 * failure nothing is left to free.
 */
int svc_open(const struct sd_config *cfg, struct svc **out, struct sd_diag *d);

/* Starts the job and profiler threads.  0, or SD_ENOMEM. */
int svc_start_workers(struct svc *s, struct sd_diag *d);

/*
 * Stops the workers (a running job is cancelled, a measurement dropped),
 * joins them and frees everything.  Call once no method runs any more.
 * NULL-safe.
 */
void svc_close(struct svc *s);

/* Applies a reloaded configuration (its reloadable keys; the others keep
 * their values from svc_open()).  0 or SD_ENOMEM (the old one stays). */
int svc_reconfigure(struct svc *s, const struct sd_config *cfg);

/* SIGTERM: health answers NOT_SERVING from now on. */
void svc_set_draining(struct svc *s);

/*
 * Whether an Admin call may run: always over a unix socket (unix_peer);
 * over TCP only with `bearer` (the token from "authorization: Bearer T",
 * NULL if absent) equal to the configured admin token.  0 or SD_EAUTH with
 * d saying what is missing.
 */
int svc_authorize(struct svc *s, bool unix_peer, const char *bearer,
                  struct sd_diag *d);

/* One line for the start-up log: the model answering by default and its
 * profile, the profiler and what it measures. */
void svc_describe(struct svc *s, char *buf, size_t size);

/*
 * Metrics hooks for the transport (metrics.h), on its loop thread, cheap
 * and lock free.  svc_observe(): one call answered (or abandoned) with
 * gRPC status `code` (0..16), index `method` into svc_methods[], `seconds`
 * from its arrival, its lane; `timed` false where the time means nothing
 * (streams, calls refused before any work).  svc_lanes_set(): the lanes
 * now (unary calls in flight, big searches running and waiting).
 */
void svc_observe(struct svc *s, size_t method, int code, double seconds,
                 enum svc_lane lane, bool timed);
void svc_lanes_set(struct svc *s, size_t inflight, size_t big_running,
                   size_t big_waiting);

/*
 * What the HTTP transport serves (daemon/http.c; docs/daemon.md,
 * "Metrics and the status page"), rendered by the service (ops.c).  Each
 * sets *out to a new NUL-terminated text of *len bytes (the caller
 * frees it) and may block on the store: call them off the gRPC loop.
 *  - svc_metrics_text(): the Prometheus text exposition format;
 *  - svc_status_json(): the status page's data (models and their errors,
 *    the profiler, jobs with their progress, lanes, cache, memory);
 *  - svc_plans_json(): the newest `limit` plans of the plan audit;
 *  - svc_plan_json(): one audited plan with its per-device costs (SD_ENOENT
 *    when there is no such record).
 * Return 0 or SD_ENOMEM, SD_ENOENT, a store error, with d set.
 */
int svc_metrics_text(struct svc *s, char **out, size_t *len, struct sd_diag *d);
int svc_status_json(struct svc *s, char **out, size_t *len, struct sd_diag *d);
int svc_plans_json(struct svc *s, size_t limit, char **out, size_t *len,
                   struct sd_diag *d);
int svc_plan_json(struct svc *s, int64_t id, char **out, size_t *len,
                  struct sd_diag *d);

/* Whether health Check answers SERVING (false once draining). */
bool svc_is_serving(struct svc *s);

/*
 * The fleet (docs/fleet.md), for the transport's sync thread
 * (fleet_sync.c), which carries the bytes to and from the trainer:
 *  - svc_fleet_role(): fleet_role (enum conf_fleet_role);
 *  - svc_fleet_push_next(): a PushSamplesRequest of this node's samples
 *    after id `after` (at most SVC_FLEET_PUSH_MAX; none: a request that only
 *    asks where to resume); *n says how many it holds;
 *  - svc_fleet_push_done(): the trainer's PushSamplesResponse; *acked is
 *    the id to resume after;
 *  - svc_fleet_model_ask(): a GetModelRequest for the profile this planner
 *    follows, naming the trainer version it serves;
 *  - svc_fleet_model_take(): the GetModelResponse; a new model is stored
 *    and hot-swapped in (*swapped true);
 *  - svc_fleet_failed(): an exchange failed (d's message is kept).
 * Each may block on the store.  0 or an SD_E* code with d set.
 */
#define SVC_FLEET_PUSH_MAX 256 /* samples in one push of a node */

int svc_fleet_role(struct svc *s);
int svc_fleet_push_next(struct svc *s, int64_t after, uint8_t **req,
                        size_t *len, size_t *n, struct sd_diag *d);
int svc_fleet_push_done(struct svc *s, const uint8_t *resp, size_t len,
                        int64_t *acked, struct sd_diag *d);
int svc_fleet_model_ask(struct svc *s, uint8_t **req, size_t *len,
                        struct sd_diag *d);
int svc_fleet_model_take(struct svc *s, const uint8_t *resp, size_t len,
                         bool *swapped, struct sd_diag *d);
void svc_fleet_failed(struct svc *s, const struct sd_diag *d);

/* The methods, for callers without the transport (tests, fuzzing). */
enum svc_lane svc_plan_lane(struct svc *s, const uint8_t *req, size_t len);
int svc_plan(struct svc *s, const struct svc_call *call, const uint8_t *req,
             size_t len, uint8_t **resp, size_t *resp_len, struct sd_diag *d);
int svc_estimate(struct svc *s, const struct svc_call *call, const uint8_t *req,
                 size_t len, uint8_t **resp, size_t *resp_len,
                 struct sd_diag *d);
int svc_features(struct svc *s, const struct svc_call *call, const uint8_t *req,
                 size_t len, uint8_t **resp, size_t *resp_len,
                 struct sd_diag *d);
int svc_health(struct svc *s, const struct svc_call *call, const uint8_t *req,
               size_t len, uint8_t **resp, size_t *resp_len, struct sd_diag *d);
int svc_health_watch(struct svc *s, const uint8_t *req, size_t len,
                     void **state, uint8_t **msg, size_t *msg_len, bool *last,
                     struct sd_diag *d);
int svc_reflect(struct svc *s, const uint8_t *req, size_t len, uint8_t **resp,
                size_t *resp_len, struct sd_diag *d);
int admin_status(struct svc *s, const struct svc_call *call, const uint8_t *req,
                 size_t len, uint8_t **resp, size_t *resp_len,
                 struct sd_diag *d);
int admin_list_models(struct svc *s, const struct svc_call *call,
                      const uint8_t *req, size_t len, uint8_t **resp,
                      size_t *resp_len, struct sd_diag *d);
int admin_activate(struct svc *s, const struct svc_call *call,
                   const uint8_t *req, size_t len, uint8_t **resp,
                   size_t *resp_len, struct sd_diag *d);
int admin_retrain(struct svc *s, const struct svc_call *call,
                  const uint8_t *req, size_t len, uint8_t **resp,
                  size_t *resp_len, struct sd_diag *d);
int admin_get_job(struct svc *s, const struct svc_call *call,
                  const uint8_t *req, size_t len, uint8_t **resp,
                  size_t *resp_len, struct sd_diag *d);
int admin_set_profiler(struct svc *s, const struct svc_call *call,
                       const uint8_t *req, size_t len, uint8_t **resp,
                       size_t *resp_len, struct sd_diag *d);
int fleet_push_samples(struct svc *s, const struct svc_call *call,
                       const uint8_t *req, size_t len, uint8_t **resp,
                       size_t *resp_len, struct sd_diag *d);
int fleet_get_model(struct svc *s, const struct svc_call *call,
                    const uint8_t *req, size_t len, uint8_t **resp,
                    size_t *resp_len, struct sd_diag *d);
int admin_watch_job(struct svc *s, const uint8_t *req, size_t len, void **state,
                    uint8_t **msg, size_t *msg_len, bool *last,
                    struct sd_diag *d);

#endif /* SHARDD_DAEMON_SERVICE_H */
