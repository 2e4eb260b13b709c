/*
 * The transport: a gRPC C-core server on a libuv loop, serving the
 * service's methods (service.h) on TCP and unix sockets.  rpc.c is the
 * only file of the project that includes gRPC headers, and with shardd.c
 * the only one that includes libuv's (scripts/check-layering.sh).
 *
 * It decodes nothing: every call's request bytes go to its method, on a
 * libuv threadpool worker for unary methods and on the loop for streams;
 * it checks Admin credentials (svc_authorize()), applies the server's
 * limits (message size, calls and bytes queued), cancels searches whose
 * client left, and maps SD_E* codes to gRPC status codes, once.
 */
#ifndef SHARDD_DAEMON_RPC_H
#define SHARDD_DAEMON_RPC_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "service.h"
#include "shardd/err.h"

#define RPC_LISTEN_MAX 8

struct rpc_config {
    const char *listen[RPC_LISTEN_MAX]; /* "unix:/path" or "host:port" */
    size_t nlisten;
    size_t max_message_bytes; /* largest request accepted */
    uint64_t grace_ms;        /* shutdown: in-flight calls get this long */
    uint64_t lame_duck_ms;    /* first: new calls UNAVAILABLE this long */
    size_t max_queued; /* unary calls in flight; more: RESOURCE_EXHAUSTED */
    size_t max_queued_bytes; /* and their request bytes (>= a message) */
    size_t max_big;          /* big-lane searches at once (>= 1) */
    size_t big_per_peer;     /* of them, from one client host (>= 1) */
    uint32_t unix_mode;      /* permission bits of unix sockets */
    int64_t unix_gid;        /* their group; -1: the process's */
    const struct svc_method *methods; /* borrowed; must outlive the server */
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

#endif /* SHARDD_DAEMON_RPC_H */
