/*
 * wire: the planner's structs <-> shardd.v1 messages (protobuf-c), both
 * directions, for the daemon (requests in, responses out) and shardctl
 * (requests out, responses in) alike.  Messages in are checked where each
 * field is read, and a bad field is named the way docs/api.md shows
 * (`topology.num_devices: 0 is not in [1, 4096]`,
 * `options.constraints.pins[1]: table "x" is not in tables`).  No gRPC
 * here: messages and bytes only.
 *
 * Ownership: a function that returns planner structs through an
 * out-parameter gives them to the caller (free() or plan_destroy(), as
 * said).  Messages going out are built in a struct wire_arena: every piece
 * a message points to lives there until wire_arena_free(); strings are
 * borrowed from the planner structs given, which must outlive the message.
 * Errors are 0 or a negative SD_E* code with a struct sd_diag line.
 * Thread-safe (no state).
 */
#ifndef SHARDD_WIRE_H
#define SHARDD_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "planner.h"
#include "shardd/err.h"
#include "shardd/v1/planner.pb-c.h"
#include "shardd/v1/types.pb-c.h"

/* What a server accepts, and the defaults it fills in. */
struct wire_limits {
    size_t max_tables;        /* tables per request; more: SD_ERANGE */
    int64_t default_batch;    /* Topology.batch_size 0: this (0 leaves 0) */
    double default_budget_ms; /* PlanOptions.time_budget_ms 0: this */
    double max_budget_ms;     /* more: SD_ERANGE */
    int32_t search_threads;   /* plan_options.threads; 0: one per CPU */
};

#define WIRE_MAX_BATCH     ((int64_t)1 << 30)
#define WIRE_MAX_BUDGET_MS 600000.0

/* 65,536 tables, batch 0, budget 10 s of at most 600 s, threads 0. */
void wire_limits_default(struct wire_limits *l);

/* ------------------------------------------------------------------------ */
/* Messages in                                                               */

/*
 * The request's tables into a new array (*out, free()), validated with
 * the planner; NaN and infinities are refused field by field.
 */
int wire_tables_in(const struct wire_limits *l, Shardd__V1__Table *const *in,
                   size_t n, struct table **out, struct sd_diag *d);

/*
 * A Topology with the defaults applied.  Devices of different capacities
 * get *caps (owned by the caller, who keeps it as long as *out is used;
 * NULL otherwise).  A batch of 0 with no default_batch stays 0: the
 * answering model's batch, which the caller fills in.
 */
int wire_topology_in(const struct wire_limits *l,
                     const Shardd__V1__Topology *in, struct topology *out,
                     uint64_t **caps, struct sd_diag *d);

/* An Optimizer; `field` names it in the message. */
int wire_optimizer_in(Shardd__V1__Optimizer in, const char *field,
                      enum optimizer *out, struct sd_diag *d);

/*
 * PlanOptions (may be NULL: all defaults) into *o, for tables on t.  Pins
 * go to *pins and per-table constraints to *cons (both owned by the caller,
 * NULL when none; o->pins and o->constraints point at them), checked
 * against the topology (capacities, hosts) and each other.
 */
int wire_options_in(const struct wire_limits *l,
                    const Shardd__V1__PlanOptions *in,
                    const struct table *tables, size_t n,
                    const struct topology *t, struct plan_options *o,
                    int32_t **pins, struct table_constraint **cons,
                    struct sd_diag *d);

/*
 * A placement (one entry per table, by name, in any order) into *p
 * (initialised here; plan_destroy() it), sorted.  Structure only: devices
 * in [0, ndev), columns inside the table; plan_validate_as() checks
 * coverage and memory.  `field` names the list in messages
 * ("placement", "response.tables").
 */
int wire_placement_in(const char *field, Shardd__V1__TablePlacement *const *in,
                      size_t nin, const struct table *tables, size_t n,
                      int32_t ndev, struct plan *p, struct sd_diag *d);

/* The per-device figures of a response into p->devices (at most
 * p->ndevices of them). */
void wire_devices_in(struct plan *p, Shardd__V1__DeviceCost *const *devs,
                     size_t n);

/* The cost and comm model names of a CostBasis (may be NULL) into p; the
 * comm name points into b. */
void wire_basis_in(struct plan *p, const Shardd__V1__CostBasis *b);

/*
 * A PlanResponse to the tables asked for on ndev devices back into the
 * planner's view (*p initialised here; plan_destroy() it; its strings point
 * into r, which must outlive it).  What the API does not carry is marked
 * unknown: the drivers' own costs (driver_ms -1), and the search's states,
 * beam levels and local moves (-1).  SD_EFORMAT when the response does not
 * answer the request (d says how).
 */
int wire_plan_response_in(const Shardd__V1__PlanResponse *r,
                          const struct table *tables, size_t n, int32_t ndev,
                          struct plan *p, struct sd_diag *d);

/*
 * A response's PredictionSpread (NULL: none) for a plan of ndev devices
 * into *out (plan_spread_free()): members 0 and nothing allocated when
 * there is none.  Returns 0, SD_EINVAL (fewer than two members, or devices
 * that are not 0 .. ndev - 1 in order; d names the field) or SD_ENOMEM.
 */
int wire_spread_in(const Shardd__V1__PredictionSpread *in, int32_t ndev,
                   struct plan_spread *out, struct sd_diag *d);

/*
 * The tables of a request as users describe them (wire_inputs.c): shardd's
 * Table (bins: 17 values, or none to derive them with zipf_exponent) or
 * TorchRec's TorchRecTable (EmbeddingBagConfig and ParameterConstraints),
 * one of the two lists, into *out (initialised here; the caller
 * tables_input_destroy()s it).  Everything but the bins still to derive is
 * checked now, names unique; tables_input_resolve() at the request's
 * batch makes them plannable and adds the notes the response carries.
 * Unknown compute kernels are noted here.  SD_EINVAL names the field
 * (`torchrec_tables[2] "t2": embedding_dim 6 is not a multiple of 4 ...`);
 * SD_ERANGE for more tables than l->max_tables.
 */
int wire_tables_input_in(const struct wire_limits *l,
                         Shardd__V1__Table *const *tables, size_t n,
                         Shardd__V1__TorchRecTable *const *trec, size_t ntrec,
                         struct tables_input *out, struct sd_diag *d);

/* The notes of a response into out (appended).  0 or SD_ENOMEM. */
int wire_notes_in(Shardd__V1__InputNote *const *in, size_t n,
                  struct input_notes *out);

/*
 * One TableTrace (traces[i]) into *out (owned by the caller:
 * trace_destroy()): offsets, or lengths turned into offsets; rows 0 means
 * max(100, largest index + 1).  SD_EINVAL naming the trace and field.
 */
int wire_trace_in(const Shardd__V1__TableTrace *m, size_t i, struct trace *out,
                  struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* Messages out                                                              */

/* Where outgoing message pieces live. */
struct wire_arena {
    struct wire_block *blocks; /* wire.c */
};

#define WIRE_ARENA_INIT                                                        \
    {                                                                          \
        NULL                                                                   \
    }

/* Zeroed room for n objects of `size` bytes, or NULL (out of memory or an
 * overflowing n * size). */
void *wire_alloc(struct wire_arena *a, size_t n, size_t size);
void wire_arena_free(struct wire_arena *a);

/*
 * Each returns a message (or an array of n message pointers) in the
 * arena, or NULL when out of memory.
 *  - tables: one Table per table.
 *  - topology: every field of t (a batch of 0 asks for the server's).
 *  - pins: Constraints with a Pin for each table pinned (pins[i] >= 0);
 *    never NULL for a non-NULL pins when memory suffices.
 *  - placements: one TablePlacement per table from a sorted plan (a table
 *    the plan misses gets an empty one, so the server names it).
 *  - devices: one DeviceCost per device of an evaluated plan.
 *  - explanation: the critical device and the tables of its drivers.
 */
Shardd__V1__Table **wire_tables_out(struct wire_arena *a,
                                    const struct table *tables, size_t n);
Shardd__V1__Topology *wire_topology_out(struct wire_arena *a,
                                        const struct topology *t);
Shardd__V1__Constraints *wire_pins_out(struct wire_arena *a,
                                       const int32_t *pins,
                                       const struct table *tables, size_t n);
Shardd__V1__TablePlacement **wire_placements_out(struct wire_arena *a,
                                                 const struct plan *p,
                                                 const struct table *tables,
                                                 size_t n);
/* A plan's spread as the responses carry it; NULL when out of memory. */
Shardd__V1__PredictionSpread *wire_spread_out(struct wire_arena *a,
                                              const struct plan_spread *s);
Shardd__V1__DeviceCost **wire_devices_out(struct wire_arena *a,
                                          const struct plan *p,
                                          const struct topology *t);
Shardd__V1__Explanation *wire_explanation_out(struct wire_arena *a,
                                              const struct plan *p,
                                              const struct table *tables);
Shardd__V1__Optimizer wire_optimizer_out(enum optimizer o);
/* Scheme <-> enum plan_scheme; UNSPECIFIED reads as table-wise (validation
 * makes it column-wise where the shards are).  SD_EINVAL: not a Scheme. */
int wire_scheme_in(Shardd__V1__Scheme in, enum plan_scheme *out);
Shardd__V1__Scheme wire_scheme_out(enum plan_scheme s);
/* ComputeKernel <-> enum table_tier (UNSPECIFIED is fused both ways; an
 * unknown kernel reads as TIER_COUNT, which plan_validate() refuses). */
uint8_t wire_tier_in(Shardd__V1__ComputeKernel k);
Shardd__V1__ComputeKernel wire_tier_out(uint8_t tier);
/* enum table_dtype to DType. */
Shardd__V1__DType wire_dtype_out(enum table_dtype dt);

/*
 * The tables of an input as a request sends them: Table messages for
 * shardd's form (bins left out where they are to be derived, with the
 * exponent given), TorchRecTable for TorchRec's, into *tables / *trec
 * (the other NULL, its count 0).  A TorchRec table's constraints keep what
 * the planner reads, exactly: the pooling factor (summed over features
 * when read) goes as the first of as many pooling factors as were given
 * (the rest 0, num_poolings 1), the feature count as that many unnamed
 * features, batch sizes that differed as [1, 2].  Strings point into in,
 * which must outlive the messages.  0 or SD_ENOMEM.
 */
int wire_tables_input_out(struct wire_arena *a, const struct tables_input *in,
                          Shardd__V1__Table ***tables, size_t *ntables,
                          Shardd__V1__TorchRecTable ***trec, size_t *ntrec);

/* One InputNote per note (n may be 0; notes may be NULL), in the arena;
 * strings point into notes.  NULL when out of memory. */
Shardd__V1__InputNote **wire_notes_out(struct wire_arena *a,
                                       const struct input_notes *notes);

/*
 * Packs a protobuf-c message into a new buffer (*out, owned by the caller,
 * never NULL even for 0 bytes).  0 or SD_ENOMEM (d says so).
 */
int wire_pack(const ProtobufCMessage *m, uint8_t **out, size_t *len,
              struct sd_diag *d);

/*
 * The name of gRPC status code `code` (google.rpc.Code: "OK" for 0 ..
 * "UNAUTHENTICATED" for 16), as the daemon's metrics and shardctl print
 * it; "UNKNOWN" for any other number.
 */
#define WIRE_STATUS_CODES 17
const char *wire_status_name(int code);

#endif /* SHARDD_WIRE_H */
