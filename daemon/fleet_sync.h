/*
 * The fleet's sync thread (docs/fleet.md), part of the transport: on a
 * profiling node it pushes the node's new samples to the trainer, resuming
 * after the last id the trainer acknowledged (asked again after every
 * failure, so a trainer that restarted or lost its answer costs nothing
 * twice); on a planner it asks the trainer for the active model every
 * period and hot-swaps a new one in.  The service builds and takes the
 * messages (service.h: svc_fleet_*()); this thread carries them over
 * gRPC (rpc_client.h).  While the trainer is down, samples wait in the
 * node's own store.
 */
#ifndef SHARDD_DAEMON_FLEET_SYNC_H
#define SHARDD_DAEMON_FLEET_SYNC_H

#include <stdint.h>

#include "service.h"

#define FLEET_CALL_MS 5000 /* one exchange's deadline */

struct fleet_sync; /* opaque */

/*
 * Starts the thread for svc (borrowed; it must outlive the thread) in
 * `role` (CONF_FLEET_PROFILER or CONF_FLEET_PLANNER), talking to
 * `trainer` with `token` (the fleet's admin token; "" for none) every
 * period_ms.  *out is the caller's (fleet_sync_stop()).  0, SD_EINVAL or
 * SD_ENOMEM.
 */
int fleet_sync_start(struct svc *svc, int role, const char *trainer,
                     const char *token, uint32_t period_ms,
                     struct fleet_sync **out, struct sd_diag *d);

/* Asks the thread to stop after the exchange it is in (quick; any
 * thread). */
void fleet_sync_request_stop(struct fleet_sync *f);

/* Stops and joins the thread (at most one exchange's deadline) and frees
 * it.  NULL-safe. */
void fleet_sync_stop(struct fleet_sync *f);

#endif /* SHARDD_DAEMON_FLEET_SYNC_H */
