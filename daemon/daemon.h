/*
 * shardd, the planning daemon: its one header.
 *
 * Three parts, one file each:
 *  - service.c: the Planner methods (Plan, Estimate) as plain functions from
 *    request bytes to response bytes.  It converts protobuf-c messages to and
 *    from the planner's structs and runs the planner.  No gRPC, no libuv: it
 *    runs on a worker thread of the uv threadpool and touches nothing shared
 *    but the read-only cost model.
 *  - rpc.c: the gRPC C-core server, the only file that includes gRPC
 *    headers.  A completion-queue thread hands every finished operation to
 *    the libuv loop (uv_async); all call state is touched on the loop thread
 *    only; each request's service function runs in uv_queue_work; replies go
 *    back through the completion queue.  It maps SD_E* codes to gRPC status
 *    codes, once.
 *  - shardd.c: main(): options, pidfile, signals, the loop.
 *
 * Errors are 0 or a negative SD_E* code (include/shardd/err.h); a failure a
 * client must understand also fills a struct sd_diag with one line naming the
 * field.  Ownership is stated on each function.
 */
#ifndef SHARDD_DAEMON_H
#define SHARDD_DAEMON_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "planner.h"
#include "shardd/err.h"

/* ------------------------------------------------------------------------ */
/* Service (service.c): Planner.Plan and Planner.Estimate                     */

/* Limits and defaults of the service; svc_config_default() gives them. */
struct svc_config {
    size_t max_tables;         /* more: SD_ERANGE (RESOURCE_EXHAUSTED) */
    int64_t default_batch;     /* Topology.batch_size 0; 65536 */
    double default_budget_ms;  /* PlanOptions.time_budget_ms 0; 10000 */
    int32_t search_threads;    /* neuroshard scoring threads; 0: per CPU */
    const char *model_version; /* names the embedded model: "embedded" */
};

void svc_config_default(struct svc_config *c);

/*
 * The service's state: the configuration and the cost model every request
 * is planned with.  Read-only once svc_init() returned, so any number of
 * worker threads may use it at once.
 */
struct svc {
    struct svc_config cfg;
    const struct cost_net *net; /* the embedded model: shared, never freed */
};

/*
 * Loads the embedded cost model (parsed here, on the calling thread, so that
 * workers never race to parse it) and copies cfg.  Returns 0, or SD_EFORMAT
 * with d saying why the model is damaged.
 */
int svc_init(struct svc *s, const struct svc_config *cfg, struct sd_diag *d);

/*
 * A method: decodes `req` (len bytes, borrowed), does the work, and on
 * success sets *resp to a new buffer of *resp_len bytes (the packed
 * response; the caller frees it; never NULL, even for 0 bytes).  On failure
 * returns a negative SD_E* code with d set to one line for the client, and
 * leaves *resp alone.  Codes and what the rpc layer answers:
 *   SD_EINVAL, SD_EFORMAT     bad input (INVALID_ARGUMENT)
 *   SD_ENOSPACE               tables do not fit the devices, SD_ERANGE over
 *                             a server limit, SD_ENOMEM (RESOURCE_EXHAUSTED)
 *   SD_ENOENT                 no model answers for the profile
 *                             (FAILED_PRECONDITION)
 *   SD_EUNSUPPORTED           a feature this build lacks (UNIMPLEMENTED)
 * Thread-safe: call it from any thread.
 */
typedef int (*svc_method_fn)(const struct svc *s, const uint8_t *req,
                             size_t len, uint8_t **resp, size_t *resp_len,
                             struct sd_diag *d);

int svc_plan(const struct svc *s, const uint8_t *req, size_t len,
             uint8_t **resp, size_t *resp_len, struct sd_diag *d);
int svc_estimate(const struct svc *s, const uint8_t *req, size_t len,
                 uint8_t **resp, size_t *resp_len, struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* gRPC server on a libuv loop (rpc.c)                                        */

/* One unary method: its full path and the function that answers it. */
struct rpc_method {
    const char *path; /* "/shardd.v1.Planner/Plan" */
    svc_method_fn fn;
};

struct rpc_config {
    const char *listen;       /* "unix:/path" or "host:port" */
    size_t max_message_bytes; /* largest request accepted */
    uint64_t grace_ms;        /* shutdown: in-flight calls get this long */
    const struct rpc_method *methods; /* borrowed; must outlive the server */
    size_t nmethods;
    const struct svc *svc; /* borrowed; passed to every method */
};

struct rpc_server; /* opaque */

/*
 * Initialises gRPC, binds cfg->listen, starts the completion-queue thread
 * and starts accepting calls on `loop`.  *out is owned by the caller:
 * rpc_server_shutdown() it, run the loop until it returns, then
 * rpc_server_free() it.  Returns 0, SD_EIO (cannot bind; d names the
 * address), SD_EINVAL (bad configuration) or SD_ENOMEM.  On failure nothing
 * is left registered on the loop and gRPC is shut down again.
 */
int rpc_server_start(uv_loop_t *loop, const struct rpc_config *cfg,
                     struct rpc_server **out, struct sd_diag *d);

/*
 * Graceful stop (loop thread; idempotent): stops listening (new calls get
 * UNAVAILABLE), lets calls in flight finish, cancels those still running
 * after the grace period, then closes every handle the server put on the
 * loop, so that uv_run() returns once nothing else is left on it.
 */
void rpc_server_shutdown(struct rpc_server *s);

/* The bound address, e.g. "unix:/tmp/shardd.sock" or "[::]:50051". */
const char *rpc_server_address(const struct rpc_server *s);

/*
 * Frees the server after uv_run() returned, and shuts gRPC down.  NULL is
 * fine.
 */
void rpc_server_free(struct rpc_server *s);

#endif /* SHARDD_DAEMON_H */
