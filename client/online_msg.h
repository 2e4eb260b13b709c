/*
 * The planner's structs to shardd.v1 messages and back, for online.c: the
 * one place of the client where the planning library meets the API's
 * messages.  Nothing here prints, parses the command line or calls the
 * daemon; every function is a conversion with the signature a shared
 * wire library would have, so that one can take their place (the daemon
 * converts the same messages the other way round in daemon/service.c).
 *
 * Requests borrow: the messages built here point into the planner's
 * structs (names, bins, capacities), which must outlive the packing, and
 * into arrays that the matching _free() releases.  Responses are read
 * into planner structs whose strings point into the response, which must
 * outlive them.
 */
#ifndef SHARDD_CLIENT_ONLINE_MSG_H
#define SHARDD_CLIENT_ONLINE_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "planner.h"
#include "shardd/v1/planner.pb-c.h"
#include "shardd/v1/types.pb-c.h"

/* ---- planner to messages (requests) ---- */

Shardd__V1__Optimizer online_msg_optimizer(enum optimizer o);

/*
 * The tables of a request: *msgs, n messages, and *ptrs, the n pointers to
 * them that a request holds; the caller free()s both.  Returns 0 or
 * SD_ENOMEM (then neither is allocated).
 */
int online_msg_tables(const struct table *tables, size_t n,
                      Shardd__V1__Table **msgs, Shardd__V1__Table ***ptrs);

/*
 * The Topology of t: its devices, its capacities (mem_by_device, when set,
 * per device) and, where t has 0, the server's defaults: devices_per_host
 * 0 is one host and batch_size 0 the batch of the model that answers.  (So
 * t is what the command line asked for, not a topology the planner would
 * validate.)  *m points into t->mem_by_device.
 */
void online_msg_topology(const struct topology *t, Shardd__V1__Topology *m);

/* Pins as Constraints: cons points into the arrays, which
 * online_msg_pins_free() releases. */
struct online_msg_pins {
    Shardd__V1__Constraints cons;
    Shardd__V1__Pin *pins, **ptrs;
};

/*
 * The Constraints of pins (plan_options.pins: the device of every pinned
 * table of tables[0 .. n), -1 for the others).  Returns 0 or SD_ENOMEM;
 * online_msg_pins_free() *m either way (it must start zeroed).
 */
int online_msg_pins(const int32_t *pins, const struct table *tables, size_t n,
                    struct online_msg_pins *m);
void online_msg_pins_free(struct online_msg_pins *m);

/*
 * The PlanOptions of po (its optimizer, seed, time budget and column
 * splits), alg the algorithm's name as the user gave it (the server parses
 * it and names one it does not know) and profile the hardware profile;
 * NULL or "" leave either to the server.  The message points into both.
 */
void online_msg_plan_options(const char *alg, const struct plan_options *po,
                             const char *profile, Shardd__V1__PlanOptions *m);

/* An EstimateRequest's placement: tp_ptrs has one TablePlacement per
 * table, pointing into the other arrays; online_msg_placement_free()
 * releases them. */
struct online_msg_placement {
    Shardd__V1__TablePlacement *tps, **tp_ptrs;
    Shardd__V1__Shard *shards, **shard_ptrs;
};

/*
 * The placement of a sorted plan p of tables[0 .. n): one TablePlacement
 * per table, empty for a table the plan misses (so that the server names
 * it).  Returns 0 or SD_ENOMEM; online_msg_placement_free() *m either way
 * (it must start zeroed).
 */
int online_msg_placement(const struct plan *p, const struct table *tables,
                         size_t n, struct online_msg_placement *m);
void online_msg_placement_free(struct online_msg_placement *m);

/* ---- messages to planner (responses) ---- */

/*
 * Rebuilds the planner's view of a PlanResponse for the request's tables
 * on ndev devices, so that online plans print through the offline
 * printers.  *p is initialised here (plan_destroy() it).  What the API
 * does not carry is marked unknown (client.h's format_explain()): the
 * drivers' own costs (driver_ms -1), and the search's states, beam levels
 * and local moves (-1).  Returns 0, SD_EFORMAT (the response does not
 * match the request; d says how; *p is then destroyed) or SD_ENOMEM.
 */
int online_msg_plan_from(const Shardd__V1__PlanResponse *r,
                         const struct table *tables, size_t n, int32_t ndev,
                         struct plan *p, struct sd_diag *d);

/*
 * An EstimateResponse's figures into the plan p it costed (initialised by
 * the caller): per device (up to p->ndevices), the plan cost and the cost
 * models' names.
 */
void online_msg_estimate_from(const Shardd__V1__EstimateResponse *r,
                              struct plan *p);

/*
 * The printers' topology of a response's ndevices devices: each device's
 * capacity as the server reports it, else as asked (the request's
 * topology, online_msg_topology()'s t), into *caps (the caller free()s
 * it), and the hosts asked for.  Returns 0 or SD_ENOMEM.
 */
int online_msg_topology_from(const struct topology *asked,
                             Shardd__V1__DeviceCost *const *devs,
                             int32_t ndevices, struct topology *t,
                             uint64_t **caps);

#endif /* SHARDD_CLIENT_ONLINE_MSG_H */
