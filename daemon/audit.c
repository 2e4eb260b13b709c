/* The plan audit writer (audit.h). */
#include "audit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shardd/log.h"

int audit_init(struct audit *au, const char *db_path)
{
    pthread_condattr_t ca;

    memset(au, 0, sizeof(*au));
    au->q = calloc(AUDIT_QUEUE_MAX, sizeof(*au->q));
    au->batch = calloc(AUDIT_QUEUE_MAX, sizeof(*au->batch));
    if (au->q == NULL || au->batch == NULL) {
        free(au->q);
        free(au->batch);
        return SD_ENOMEM;
    }
    snprintf(au->db_path, sizeof(au->db_path), "%s", db_path);
    pthread_mutex_init(&au->mu, NULL);
    /* gather()'s timed wait is on the monotonic clock: a wall-clock step
     * neither holds a batch back nor writes it early. */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&au->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&au->idle, NULL);
    atomic_init(&au->written, 0);
    atomic_init(&au->dropped, 0);
    return 0;
}

void audit_put(struct audit *au, const struct store_plan_audit *a, char *json)
{
    pthread_mutex_lock(&au->mu);
    if (au->n == AUDIT_QUEUE_MAX || au->stopping) {
        pthread_mutex_unlock(&au->mu);
        free(json);
        atomic_fetch_add(&au->dropped, 1);
        return;
    }
    au->q[au->n] = *a;
    au->q[au->n].plan_json = json;
    au->n++;
    /* The thread waits for a first record, then for half a queue (or its
     * gathering time): nothing in between wakes it. */
    if (au->n == 1 || au->n == AUDIT_QUEUE_MAX / 2)
        pthread_cond_signal(&au->cv);
    pthread_mutex_unlock(&au->mu);
}

/* Appends batch[0 .. n) and frees its plans; a failure is logged when the
 * last batch succeeded (a full disk says so once, not per batch). */
static void write_batch(struct audit *au, size_t n, bool *failing)
{
    struct sd_diag d;
    size_t i;

    if (store_plan_audit_put_many(au->st, au->batch, n, &d) == 0) {
        atomic_fetch_add(&au->written, n);
        if (*failing)
            sd_log(SD_LOG_INFO, "plan audit: recording again");
        *failing = false;
    } else {
        atomic_fetch_add(&au->dropped, n);
        if (!*failing)
            sd_log(SD_LOG_WARN, "plan audit: %zu plan(s) not recorded: %s", n,
                   d.msg);
        *failing = true;
    }
    for (i = 0; i < n; i++)
        free((char *)au->batch[i].plan_json);
}

/* Waits (mu held) until AUDIT_GATHER_MS after now, or until half the
 * queue is taken, a sync or a stop asks for the batch at once. */
static void gather(struct audit *au)
{
    struct timespec until = sd_after_ms(CLOCK_MONOTONIC, AUDIT_GATHER_MS);

    while (au->n < AUDIT_QUEUE_MAX / 2 && !au->stopping && au->syncing == 0)
        if (pthread_cond_timedwait(&au->cv, &au->mu, &until) != 0)
            break; /* timed out (or failed: write what there is) */
}

/* Takes everything queued, writes it outside the lock; ends when stopping
 * with nothing left. */
static void *audit_main(void *arg)
{
    struct audit *au = arg;
    bool failing = false;
    size_t n;

    pthread_mutex_lock(&au->mu);
    for (;;) {
        while (au->n == 0 && !au->stopping)
            pthread_cond_wait(&au->cv, &au->mu);
        if (au->n == 0)
            break; /* stopping, and all written */
        gather(au);
        n = au->n;
        memcpy(au->batch, au->q, n * sizeof(*au->batch));
        au->n = 0;
        au->busy = true;
        pthread_mutex_unlock(&au->mu);
        write_batch(au, n, &failing);
        pthread_mutex_lock(&au->mu);
        au->busy = false;
        pthread_cond_broadcast(&au->idle);
    }
    pthread_cond_broadcast(&au->idle);
    pthread_mutex_unlock(&au->mu);
    return NULL;
}

int audit_start(struct audit *au, struct sd_diag *d)
{
    int rv = store_open(au->db_path, 0, &au->st, d);

    if (rv != 0)
        return rv;
    pthread_mutex_lock(&au->mu);
    if (pthread_create(&au->thread, NULL, audit_main, au) != 0) {
        pthread_mutex_unlock(&au->mu);
        store_close(au->st);
        au->st = NULL;
        return sd_diag_set(d, SD_ENOMEM, "cannot start the plan audit thread");
    }
    au->started = true;
    pthread_mutex_unlock(&au->mu);
    return 0;
}

void audit_sync(struct audit *au)
{
    pthread_mutex_lock(&au->mu);
    au->syncing++;
    pthread_cond_signal(&au->cv); /* a gathering batch is written now */
    while (au->started && !au->stopping && (au->n > 0 || au->busy))
        pthread_cond_wait(&au->idle, &au->mu);
    au->syncing--;
    pthread_mutex_unlock(&au->mu);
}

void audit_destroy(struct audit *au)
{
    size_t i;
    bool started;

    if (au->q == NULL)
        return; /* never initialised */
    pthread_mutex_lock(&au->mu);
    started = au->started;
    au->stopping = true;
    pthread_cond_broadcast(&au->cv);
    pthread_mutex_unlock(&au->mu);
    if (started) {
        pthread_join(au->thread, NULL);
        store_close(au->st);
    }
    for (i = 0; i < au->n; i++) /* queued with no thread to write them */
        free((char *)au->q[i].plan_json);
    free(au->q);
    free(au->batch);
    pthread_cond_destroy(&au->idle);
    pthread_cond_destroy(&au->cv);
    pthread_mutex_destroy(&au->mu);
    memset(au, 0, sizeof(*au));
}
