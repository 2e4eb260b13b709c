/*
 * shardd, the planning daemon: its one header.
 *
 * One file per part:
 *  - service.c: the daemon's shared state (struct svc), the Planner methods
 *    (Plan, Estimate) and grpc.health.v1 Check, as plain functions from
 *    request bytes to response bytes.  No gRPC, no libuv.
 *  - models.c: the cost models being served (refcounted, swapped
 *    atomically; requests in flight keep the model they started with) and
 *    the plan cache.
 *  - admin.c: the Admin methods (status, models, jobs, profiler).
 *  - jobs.c: retraining jobs on their own thread, scheduled or asked for.
 *  - profw.c: the profiler worker: measures samples while the daemon is
 *    idle, steps aside when a request arrives.
 *  - reflect.c: server reflection (the API's descriptors for generic
 *    clients such as grpcurl).
 *  - rpc.c: the gRPC C-core server, the only file that includes gRPC
 *    headers.  A completion-queue thread hands every finished operation to
 *    the libuv loop; each unary call runs on the uv threadpool; it checks
 *    Admin credentials and maps SD_E* codes to gRPC status codes, once.
 *  - config.c (config.h): configuration from file, environment and flags.
 *  - shardd.c: main(): configuration, data directory, pidfile, signals,
 *    systemd notification, the loop.
 *
 * Threads: the loop thread (rpc.c's call state), the cq thread (rpc.c),
 * the uv threadpool (method functions), the job thread (jobs.c) and the
 * profiler thread (profw.c).  What they share lives in struct svc and says
 * which lock guards it.
 *
 * Errors are 0 or a negative SD_E* code (include/shardd/err.h); a failure a
 * client must understand also fills a struct sd_diag with one line naming
 * the field.  Ownership is stated on each function.
 */
#ifndef SHARDD_DAEMON_H
#define SHARDD_DAEMON_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "kernels.h"
#include "planner.h"
#include "shardd/err.h"
#include "store.h"

#define SVC_VERSION_MAX 32 /* "embedded", or a store model id in decimal */
/* The plan audit keeps 30 days and at most this many records (jobs.c). */
#define SVC_AUDIT_KEEP_MS   (30LL * 24 * 3600 * 1000)
#define SVC_AUDIT_KEEP_ROWS 100000

/* ------------------------------------------------------------------------ */
/* Configuration of the service                                              */

/*
 * What the methods and workers run with.  Fields marked (reload) may change
 * on SIGHUP: they are read under svc.mu.
 */
struct svc_config {
    size_t max_tables;        /* (reload) more: RESOURCE_EXHAUSTED */
    int64_t default_batch;    /* (reload) Topology.batch_size 0 */
    double default_budget_ms; /* (reload) PlanOptions.time_budget_ms 0 */
    int32_t search_threads;   /* neuroshard scoring threads; 0: per CPU */
    size_t cache_entries;     /* (reload) plan cache size; 0: off */
    char admin_token[256];    /* (reload) "" = Admin only on unix sockets */

    bool profiler;                 /* (reload) measure while idle */
    int64_t profiler_idle_ms;      /* (reload) idle this long first */
    uint64_t profiler_max_samples; /* (reload) stop at this many */
    int64_t profiler_batch;        /* batch of the measured profile */

    uint64_t retrain_every_samples;  /* (reload) 0: off */
    double retrain_every_hours;      /* (reload) 0: off */
    uint64_t retrain_window_samples; /* (reload) newest N trained on; 0: all */

    const char *backend;  /* "auto", "cpu", "cuda"; borrowed */
    const char *data_dir; /* store and pidfile; borrowed */
};

void svc_config_default(struct svc_config *c);

/* ------------------------------------------------------------------------ */
/* Served models and the plan cache (models.c)                               */

/* A cost model being served: refcounted, immutable once published. */
struct dmodel {
    atomic_int refs;
    const struct cost_net *net; /* owned (free()) unless embedded */
    bool embedded;
    int64_t id;                    /* store model id; 0 for the embedded */
    char version[SVC_VERSION_MAX]; /* "embedded" or the id */
    struct store_model_metrics metrics;
};

/* The active model of one profile. */
struct dmodel_slot {
    char profile[STORE_NAME_MAX];
    struct dmodel *m; /* one reference held by the slot */
};

/* One cached PlanResponse (packed, cache_hit false). */
struct cache_entry {
    uint64_t key;     /* request hash */
    int64_t model_id; /* and the model that planned it */
    uint64_t used;    /* LRU clock */
    uint8_t *resp;    /* owned */
    size_t len;
};

/* ------------------------------------------------------------------------ */
/* Jobs (jobs.c) and the profiler worker (profw.c)                            */

#define SVC_JOBS_KEPT       64 /* recent jobs kept in memory for Get/Watch */
#define SVC_PROPOSALS_MAX   32 /* planned shards waiting to be measured */
#define SVC_PROPOSAL_TABLES 64

/* A shard a plan proposed, to be measured (features at profiler_batch). */
struct svc_proposal {
    struct table tables[SVC_PROPOSAL_TABLES]; /* dim = the columns held */
    size_t n;
};

enum svc_profiler_state {
    SVC_PROFILER_RUNNING = 1, /* numbered as shardd.v1.ProfilerState */
    SVC_PROFILER_PAUSED = 2,
    SVC_PROFILER_DISABLED = 3,
};

/* ------------------------------------------------------------------------ */
/* The daemon's shared state (service.c)                                     */

struct svc {
    pthread_mutex_t mu;    /* guards everything below marked (mu) */
    struct svc_config cfg; /* (mu) for its (reload) fields */
    int64_t started_ms;    /* wall clock */

    /* Models (mu). */
    struct dmodel_slot *slots;
    size_t nslots;
    char default_profile[STORE_NAME_MAX]; /* requests without a profile */
    struct dmodel *embedded;              /* also held by a slot or not */

    /* Plan cache (mu). */
    struct cache_entry *cache;
    size_t ncache;
    uint64_t cache_clock;
    size_t cache_bytes;

    /* The store: a connection for the request path (store_mu); the job and
     * profiler threads open their own (SQLite WAL lets them work side by
     * side). */
    pthread_mutex_t store_mu;
    struct store *st;
    char db_path[4096];

    /* The measuring backend and the profile it measures (fixed). */
    const struct kern_backend *be; /* NULL: none can measure */
    char profile[STORE_NAME_MAX];
    char device_name[STORE_DEVICE_MAX];
    int64_t profile_id;

    /* Requests: the profiler runs only when none is in flight. */
    atomic_int inflight;
    atomic_llong last_request_ms; /* monotonic */
    atomic_bool draining;         /* SIGTERM: health says NOT_SERVING */

    /* Jobs (mu; jobs_cv wakes the job thread). */
    pthread_t job_thread;
    bool job_thread_started;
    pthread_cond_t jobs_cv;
    struct store_job jobs[SVC_JOBS_KEPT]; /* ring of recent jobs */
    size_t njobs, jobs_next;
    volatile sig_atomic_t job_cancel; /* shutdown: stop the running job */
    bool jobs_stopping;

    /* Profiler worker (mu; prof_cv wakes it). */
    pthread_t prof_thread;
    bool prof_thread_started;
    pthread_cond_t prof_cv;
    bool prof_paused, prof_stopping;
    volatile sig_atomic_t prof_abort; /* a request arrived: step aside */
    atomic_llong prof_abort_ms;       /* when it was first raised (mono) */
    atomic_bool prof_measuring;       /* a measurement is under way */
    struct svc_proposal *proposals;   /* ring of SVC_PROPOSALS_MAX */
    size_t nproposals, proposals_next;
    uint64_t prof_measured;   /* samples this daemon measured */
    uint64_t compute_samples; /* of the profile, as last counted */

    struct reflect *reflect; /* read-only after svc_init() */
};

/*
 * Sets up the state: opens (creating) the store at data_dir/shardd.db,
 * picks the backend and the profile it measures, loads the embedded model
 * and the active stored models, and marks jobs a previous daemon left
 * unfinished as cancelled.  Starts no thread.  Returns 0 or an SD_E* code
 * with d set; on failure nothing is left to free.
 */
int svc_init(struct svc *s, const struct svc_config *cfg, struct sd_diag *d);

/* Starts the job and profiler threads.  0, or SD_ENOMEM. */
int svc_start_workers(struct svc *s, struct sd_diag *d);

/*
 * Stops the workers (a running job is cancelled, a measurement dropped),
 * joins them and frees everything.  Call after the rpc server is gone.
 */
void svc_free(struct svc *s);

/* Applies the (reload) fields of cfg; returns nothing: they are valid. */
void svc_reconfigure(struct svc *s, const struct svc_config *cfg);

/* A Planner request starts / ends: the profiler steps aside meanwhile. */
void svc_busy_begin(struct svc *s);
void svc_busy_end(struct svc *s);

/*
 * Whether an Admin call may run: always over a unix socket (unix_peer);
 * over TCP only with `bearer` (the token from "authorization: Bearer T",
 * NULL if absent) equal to the configured admin token.  0 or SD_EAUTH with
 * d saying what is missing.
 */
int svc_authorize(struct svc *s, bool unix_peer, const char *bearer,
                  struct sd_diag *d);

/*
 * Logging to stderr (the journal under systemd): "shardd: " then the
 * message, "warning: " / "error: " before warnings and errors.  Messages
 * above svc_log_level (numbered as config.h's enum conf_log_level) are
 * dropped.  fmt ends with a newline.  Thread-safe.
 */
enum svc_log_level {
    SVC_LOG_ERROR,
    SVC_LOG_WARN,
    SVC_LOG_INFO,
    SVC_LOG_DEBUG,
};
extern atomic_int svc_log_level;
void svc_log(enum svc_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Monotonic and wall clocks in ms. */
int64_t svc_now_ms(void);
int64_t svc_wall_ms(void);

/* ------------------------------------------------------------------------ */
/* Methods                                                                   */

/* What the rpc layer tells a method about its call. */
struct svc_call {
    int64_t deadline_ms; /* monotonic (svc_now_ms()); INT64_MAX: none */
    /* Set (by the loop thread) when the client cancels the call or its
     * deadline passes while a method works on it; NULL where nothing can
     * cancel.  A search stops at it and the method returns SD_ECANCELED. */
    const atomic_bool *cancel;
};

/*
 * A unary method: decodes `req` (len bytes, borrowed), does the work, and
 * on success sets *resp to a new buffer of *resp_len bytes (the packed
 * response; the caller frees it; never NULL, even for 0 bytes).  On failure
 * returns a negative SD_E* code with d set to one line for the client, and
 * leaves *resp alone.  Codes and what the rpc layer answers:
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
 * Thread-safe: runs on a uv threadpool worker.
 */
typedef int (*svc_method_fn)(struct svc *s, const struct svc_call *call,
                             const uint8_t *req, size_t len, uint8_t **resp,
                             size_t *resp_len, struct sd_diag *d);

/*
 * A server-streaming method, polled on the loop thread (it must not block:
 * it reads memory, not the store).  The first poll gets *state NULL and
 * the request; it may set *state (freed with free() when the call ends).
 * Each poll returns 0 with *msg set (a packed message to send; owned by the
 * caller) or NULL (nothing new), and *last true after the final message;
 * or an SD_E* code that ends the call with that status.
 */
typedef int (*svc_stream_fn)(struct svc *s, const uint8_t *req, size_t len,
                             void **state, uint8_t **msg, size_t *msg_len,
                             bool *last, struct sd_diag *d);

/*
 * A bidirectional-streaming method that answers each request message with
 * one response message, on the loop thread (it must be quick and must not
 * block).  Returns 0 with *resp set (owned by the caller), or an SD_E* code
 * that ends the call with that status.
 */
typedef int (*svc_bidi_fn)(struct svc *s, const uint8_t *req, size_t len,
                           uint8_t **resp, size_t *resp_len, struct sd_diag *d);

/* grpc.reflection.v1alpha|v1.ServerReflection/ServerReflectionInfo. */
int svc_reflect(struct svc *s, const uint8_t *req, size_t len, uint8_t **resp,
                size_t *resp_len, struct sd_diag *d);

/* Planner and health (service.c). */
int svc_plan(struct svc *s, const struct svc_call *call, const uint8_t *req,
             size_t len, uint8_t **resp, size_t *resp_len, struct sd_diag *d);
int svc_estimate(struct svc *s, const struct svc_call *call, const uint8_t *req,
                 size_t len, uint8_t **resp, size_t *resp_len,
                 struct sd_diag *d);
int svc_health(struct svc *s, const struct svc_call *call, const uint8_t *req,
               size_t len, uint8_t **resp, size_t *resp_len, struct sd_diag *d);
/* grpc.health.v1.Health/Watch: the status now, then each change, until the
 * server stops. */
int svc_health_watch(struct svc *s, const uint8_t *req, size_t len,
                     void **state, uint8_t **msg, size_t *msg_len, bool *last,
                     struct sd_diag *d);

/* Admin (admin.c). */
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
int admin_watch_job(struct svc *s, const uint8_t *req, size_t len, void **state,
                    uint8_t **msg, size_t *msg_len, bool *last,
                    struct sd_diag *d);

/*
 * Packs a protobuf-c message into a new buffer (*out, owned by the caller,
 * never NULL).  0 or SD_ENOMEM.
 */
struct ProtobufCMessage;
int svc_pack(const struct ProtobufCMessage *m, uint8_t **out, size_t *len,
             struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* models.c                                                                  */

/*
 * Loads the embedded model and every profile's active stored model into
 * slots.  A stored model that no longer parses is skipped with a warning
 * (the embedded one or none serves its profile).  Called by svc_init().
 */
int models_load(struct svc *s, struct sd_diag *d);

/*
 * A reference to the active model of `profile` (NULL or "": the server's
 * default): release it with dmodel_release().  SD_ESTATE when no model
 * answers for the profile (d says which profiles do).
 */
int models_acquire(struct svc *s, const char *profile, struct dmodel **out,
                   struct sd_diag *d);
void dmodel_release(struct dmodel *m); /* NULL-safe */

/*
 * Makes stored model `id` active for its profile: in the store, then in
 * the served slots (requests in flight keep their reference).  `net`, when
 * not NULL, is the parsed model (ownership passes here); else it is loaded
 * from the store.  Sets *info to the model and *previous to the version it
 * replaced ("" when none).  SD_ENOENT for an unknown id, SD_EFORMAT for a
 * model that does not load.
 */
int models_activate(struct svc *s, int64_t id, struct cost_net *net,
                    struct store_model_info *info,
                    char previous[SVC_VERSION_MAX], struct sd_diag *d);

/*
 * Makes the embedded model answer by default again (the rollback from a
 * retrained model): no stored model of its profile stays active, nor of the
 * server's own profile where that is another (a model measured here would
 * answer by default).  *previous: the version that answered by default.
 */
int models_activate_embedded(struct svc *s, char previous[SVC_VERSION_MAX],
                             struct sd_diag *d);

/* Frees every slot and the cache (svc_free()). */
void models_free(struct svc *s);

/*
 * The plan cache.  cache_get copies a hit into *resp (owned by the caller);
 * cache_put stores a copy (evicting the least recently used entries past
 * cfg.cache_entries or SVC_CACHE_BYTES); both lock mu.
 */
#define SVC_CACHE_BYTES ((size_t)256 << 20)
bool cache_get(struct svc *s, uint64_t key, int64_t model_id, uint8_t **resp,
               size_t *len);
void cache_put(struct svc *s, uint64_t key, int64_t model_id,
               const uint8_t *resp, size_t len);
/* Drops entries past the configured size (after a reload). */
void cache_trim(struct svc *s);

/* ------------------------------------------------------------------------ */
/* jobs.c                                                                    */

/*
 * Starts a retrain of `profile` ("" or NULL: the server's own), or returns
 * the one already queued or running.  Without force, a profile with no
 * sample newer than its newest model is SD_ESTATE.  *out gets the job.
 */
int jobs_retrain(struct svc *s, const char *profile, bool force,
                 struct store_job *out, struct sd_diag *d);

/* The job `id`, from memory or the store.  SD_ENOENT when unknown. */
int jobs_get(struct svc *s, int64_t id, struct store_job *out,
             struct sd_diag *d);

/* Like jobs_get() but memory only (for the loop thread): false if absent. */
bool jobs_peek(struct svc *s, int64_t id, struct store_job *out);

/* Counts of queued and running jobs (mu). */
void jobs_counts(struct svc *s, uint32_t *queued, uint32_t *running);

int jobs_start(struct svc *s, struct sd_diag *d);
void jobs_stop(struct svc *s);

/* ------------------------------------------------------------------------ */
/* profw.c                                                                   */

int profw_start(struct svc *s, struct sd_diag *d);
void profw_stop(struct svc *s);

/* Pauses (true) or resumes the profiler; SD_ESTATE when it is disabled. */
int profw_set_paused(struct svc *s, bool paused, enum svc_profiler_state *now,
                     struct sd_diag *d);
enum svc_profiler_state profw_state(struct svc *s);

/*
 * Queues the device shards of a plan made at the profile's batch for
 * measuring (the profiler measures what the planner proposes, not only
 * random shards).  Cheap; drops the oldest when full.
 */
void profw_propose(struct svc *s, const struct plan *p,
                   const struct table *tables, int64_t batch);

/* ------------------------------------------------------------------------ */
/* Server reflection (reflect.c)                                              */

/* The serialized FileDescriptorSet of every service served (generated at
 * build time, proto/CMakeLists.txt). */
extern const unsigned char sd_api_descriptors[];
extern const size_t sd_api_descriptors_len;

struct reflect; /* the descriptors, indexed */

/* Parses sd_api_descriptors into *out (reflect_close() it).  SD_EFORMAT or
 * SD_ENOMEM. */
int reflect_open(struct reflect **out, struct sd_diag *d);
void reflect_close(struct reflect *r); /* NULL-safe */

/*
 * Answers one ServerReflectionRequest (packed): list_services, or
 * file_by_filename / file_containing_symbol with the file and every file
 * it imports; an unknown name or an extension query gets an
 * error_response.  *resp is owned by the caller.  SD_EFORMAT for bytes
 * that are no request, SD_ENOMEM.  Thread-safe (r is read only).
 */
int reflect_answer(const struct reflect *r, const uint8_t *req, size_t len,
                   uint8_t **resp, size_t *resp_len, struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* gRPC server on a libuv loop (rpc.c)                                        */

/* One method: its full path, whether it is an Admin one, and its function
 * (exactly one of fn, stream and bidi). */
struct rpc_method {
    const char *path; /* "/shardd.v1.Planner/Plan" */
    bool admin;       /* needs the unix socket or the admin token */
    bool draining_ok; /* still served in the lame-duck period (health) */
    svc_method_fn fn;
    svc_stream_fn stream;
    svc_bidi_fn bidi;
};

#define RPC_LISTEN_MAX 8

struct rpc_config {
    const char *listen[RPC_LISTEN_MAX]; /* "unix:/path" or "host:port" */
    size_t nlisten;
    size_t max_message_bytes; /* largest request accepted */
    uint64_t grace_ms;        /* shutdown: in-flight calls get this long */
    uint64_t lame_duck_ms;    /* first: new calls UNAVAILABLE this long */
    size_t max_queued; /* unary calls in flight; more: RESOURCE_EXHAUSTED */
    size_t max_queued_bytes; /* and their request bytes (>= a message) */
    const struct rpc_method *methods; /* borrowed; must outlive the server */
    size_t nmethods;
    struct svc *svc; /* borrowed; passed to every method */
};

struct rpc_server; /* opaque */

/*
 * Initialises gRPC, binds every cfg->listen address, starts the
 * completion-queue thread and starts accepting calls on `loop`.  *out is
 * owned by the caller: rpc_server_shutdown() it, run the loop until it
 * returns, then rpc_server_free() it.  Returns 0, SD_EIO (cannot bind; d
 * names the address), SD_EINVAL (bad configuration) or SD_ENOMEM.  On
 * failure nothing is left registered on the loop and gRPC is shut down.
 */
int rpc_server_start(uv_loop_t *loop, const struct rpc_config *cfg,
                     struct rpc_server **out, struct sd_diag *d);

/*
 * Graceful stop (loop thread; idempotent): for lame_duck_ms new calls get
 * UNAVAILABLE and streams end, then it stops listening, lets unary calls in
 * flight finish, cancels those still running after the grace period, and
 * closes every handle the server put on the loop, so that uv_run() returns
 * once nothing else is left on it.
 */
void rpc_server_shutdown(struct rpc_server *s);

/* A new grace period for a later shutdown (SIGHUP; loop thread). */
void rpc_server_set_grace(struct rpc_server *s, uint64_t grace_ms);

/* The bound addresses, e.g. "unix:/tmp/shardd.sock, 127.0.0.1:7411". */
const char *rpc_server_address(const struct rpc_server *s);

/* Frees the server after uv_run() returned, and shuts gRPC down. */
void rpc_server_free(struct rpc_server *s);

#endif /* SHARDD_DAEMON_H */
