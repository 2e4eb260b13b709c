/*
 * The fleet's state in one daemon (docs/fleet.md): what a trainer received
 * (samples stored and repeated), what a profiling node pushed and where it
 * resumes, which trainer model version a planner serves, and the last
 * exchange with the trainer.  The exchanges themselves are fleet.c's
 * (service.h: the Fleet methods and svc_fleet_*()); the thread that talks
 * to the trainer is the transport's (fleet_sync.c).  Thread-safe: a mutex
 * guards everything.  A header of its own, without functions in a .c, so
 * that fleet.c and fleet_node.c, parts of the service, include the
 * service's private header without an include cycle.
 */
#ifndef SHARDD_DAEMON_FLEET_STATE_H
#define SHARDD_DAEMON_FLEET_STATE_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "models.h"

#define FLEET_PUSH_MAX  SVC_FLEET_PUSH_MAX
#define FLEET_RECV_MAX  1024 /* samples a trainer takes in one push */
#define FLEET_ERROR_MAX 512

struct fleet {
    pthread_mutex_t mu;
    /* trainer */
    uint64_t received;   /* samples stored from other nodes */
    uint64_t duplicates; /* samples pushed again, skipped */
    uint64_t pushes;     /* PushSamples calls answered */
    uint64_t models_served;
    /* profiler */
    int64_t acked;   /* the trainer holds our samples up to this id */
    uint64_t pushed; /* samples the trainer stored from us */
    /* planner */
    char remote_version[MODELS_VERSION_MAX]; /* the trainer's; "" none */
    char local_version[MODELS_VERSION_MAX];  /* ours of it */
    uint64_t swaps;                          /* models fetched and swapped */
    /* profiler and planner */
    uint64_t errors;    /* failed exchanges with the trainer */
    int64_t last_ok_ms; /* wall clock of the last good one; 0: never */
    char last_error[FLEET_ERROR_MAX];
};

static inline void fleet_init(struct fleet *f)
{
    memset(f, 0, sizeof(*f));
    pthread_mutex_init(&f->mu, NULL);
}

static inline void fleet_destroy(struct fleet *f)
{
    pthread_mutex_destroy(&f->mu);
}

#endif /* SHARDD_DAEMON_FLEET_STATE_H */
