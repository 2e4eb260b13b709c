/*
 * The plan audit writer.  Every Plan answer is recorded in the store's plan
 * audit (store.h), off the request path: audit_put() copies the record into
 * a bounded queue and returns; one thread with its own store connection
 * appends what is queued, a transaction per batch.  So no request waits on
 * SQLite, whose commit that crosses the WAL's auto-checkpoint fsyncs the
 * database (hundreds of milliseconds on a slow disk, and before this every
 * other request's audit queued behind it on the store mutex).
 *
 * Best effort, as the audit always was (a full disk fails no plan): with
 * the queue full a record is dropped and counted; a store error drops the
 * batch, logged.  audit_destroy() writes what is queued before it returns,
 * so a clean stop loses nothing; a crash loses at most the queue.
 * Thread-safe.
 *
 * The thread gathers a batch for up to AUDIT_GATHER_MS after its first
 * record (at once when half the queue is taken, a sync or a stop asks):
 * a transaction per plan rewrote the table's last page, its index pages
 * and a WAL frame header for each 12 KB plan, and woke the thread for
 * every one, at 1,900 plans a second.
 */
#ifndef SHARDD_DAEMON_AUDIT_H
#define SHARDD_DAEMON_AUDIT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shardd/err.h"
#include "store.h"

#define AUDIT_QUEUE_MAX 1024 /* records waiting; more are dropped */
#define AUDIT_GATHER_MS 20   /* a batch waits this long for more records */
#define AUDIT_PATH_MAX  4096

struct audit {
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* wakes the thread: a record, a stop */
    pthread_cond_t idle; /* the thread wrote everything it took */
    pthread_t thread;
    bool started;
    bool stopping;              /* (mu) */
    bool busy;                  /* (mu) the thread is writing a batch */
    unsigned syncing;           /* (mu) audit_sync() calls waiting */
    struct store_plan_audit *q; /* (mu) [AUDIT_QUEUE_MAX], plan_json owned */
    size_t n;                   /* (mu) queued */
    /* The thread's: its connection and the batch it writes now. */
    struct store *st;
    struct store_plan_audit *batch; /* [AUDIT_QUEUE_MAX] */
    atomic_uint_fast64_t written;   /* records appended */
    atomic_uint_fast64_t dropped;   /* records lost: queue full, store error */
    char db_path[AUDIT_PATH_MAX];
};

/* Ready to queue (records wait until audit_start()).  0 or SD_ENOMEM. */
int audit_init(struct audit *au, const char *db_path);

/* Starts the writer thread on a store connection of its own.  0, or the
 * store's error or SD_ENOMEM with d set. */
int audit_start(struct audit *au, struct sd_diag *d);

/* Queues *a with plan_json (malloc()ed; the queue's from here on, freed
 * when written or dropped: a.plan_json is not read); never blocks on the
 * store. */
void audit_put(struct audit *au, const struct store_plan_audit *a,
               char *plan_json);

/* Waits until every record queued before the call is written (or
 * dropped): for tests and for a reader that must see its own plan. */
void audit_sync(struct audit *au);

/* Writes what is queued, stops the thread and frees the queue. */
void audit_destroy(struct audit *au);

#endif /* SHARDD_DAEMON_AUDIT_H */
