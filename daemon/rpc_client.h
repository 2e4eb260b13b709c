/*
 * The daemon's gRPC client, for the fleet (fleet_sync.c): synchronous
 * unary calls to another shardd, one at a time, on a completion queue of
 * its own (gRPC's threads move the bytes; the calling thread waits).
 * rpc_client.c is, with rpc.c and rpc_call.c, one of the only daemon files
 * that include gRPC headers (scripts/check-layering.sh).  Not for the loop
 * thread: a call blocks until its answer or its deadline.
 */
#ifndef SHARDD_DAEMON_RPC_CLIENT_H
#define SHARDD_DAEMON_RPC_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "shardd/err.h"

struct rpc_peer; /* opaque */

/*
 * A channel to addr ("host:port" or "unix:/path"; connected lazily) whose
 * calls carry "authorization: Bearer token" when token is not empty.
 * *out is the caller's (rpc_peer_close()).  0, SD_EINVAL or SD_ENOMEM.
 */
int rpc_peer_open(const char *addr, const char *token, struct rpc_peer **out,
                  struct sd_diag *d);

/*
 * Calls method with the request bytes and waits at most deadline_ms.  On
 * success *resp (malloc, the caller frees it) holds *resp_len bytes.  On
 * failure an SD_E* code with d naming the peer and the status: SD_EIO
 * (unreachable), SD_ETIMEDOUT, SD_EAUTH, SD_ESTATE (FAILED_PRECONDITION),
 * SD_EINVAL, SD_ENOENT, SD_EUNSUPPORTED.
 */
int rpc_peer_call(struct rpc_peer *p, const char *method, const uint8_t *req,
                  size_t len, int64_t deadline_ms, uint8_t **resp,
                  size_t *resp_len, struct sd_diag *d);

void rpc_peer_close(struct rpc_peer *p); /* NULL-safe */

#endif /* SHARDD_DAEMON_RPC_CLIENT_H */
