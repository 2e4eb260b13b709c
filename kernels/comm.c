/*
 * Collective timing (kernels.h): the part every backend shares.  One
 * thread per rank runs the iterations; a barrier starts each iteration on
 * every rank at once, then rank r sleeps its sleep_ms (the compute skew of
 * neuroshard.md 2.3) and runs its part of the collective through the
 * backend's comm_run, timing from the end of its sleep to the end of its
 * part: a rank that slept less waits inside the collective for the
 * slowest one, and that wait is in its time, as in the forward exchange
 * of a training step.  Rank 0 decides whether to stop (the abort flag)
 * before the barrier, so that every rank agrees, since a rank left out of
 * a collective would hang the others.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kern_internal.h"

/* The longest sleep a description may ask: ten seconds. */
#define COMM_MAX_SLEEP_MS 10000.0
/* The most floats one rank may move in one collective: 16 GiB. */
#define COMM_MAX_FLOATS (UINT64_C(1) << 32)

struct kern_comm {
    const struct kern_backend *be;
    void *impl;
    int32_t n;
    bool failed; /* a rank's part failed: the backend may be stuck */
};

double kern__now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void kern__barrier_init(struct kern__barrier *b, int n)
{
    memset(b, 0, sizeof(*b));
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->n = n;
}

void kern__barrier_destroy(struct kern__barrier *b)
{
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
}

bool kern__barrier_wait(struct kern__barrier *b)
{
    unsigned gen;
    bool ok;

    pthread_mutex_lock(&b->mu);
    gen = b->gen;
    if (!b->broken && ++b->waiting == b->n) {
        b->waiting = 0;
        b->gen++;
        pthread_cond_broadcast(&b->cv);
    } else {
        while (!b->broken && b->gen == gen)
            pthread_cond_wait(&b->cv, &b->mu);
    }
    ok = !b->broken;
    pthread_mutex_unlock(&b->mu);
    return ok;
}

void kern__barrier_break(struct kern__barrier *b)
{
    pthread_mutex_lock(&b->mu);
    b->broken = true;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

const char *kern_coll_name(enum kern_coll_op op)
{
    switch (op) {
    case KERN_COLL_ALLTOALL:
        return "all-to-all";
    case KERN_COLL_REDUCE_SCATTER:
        return "reduce-scatter";
    case KERN_COLL_ALL_GATHER:
        return "all-gather";
    case KERN_COLL_ALL_REDUCE:
        return "all-reduce";
    default:
        return "?";
    }
}

int kern_comm_open(const struct kern_backend *be, int32_t n,
                   struct kern_comm **out, struct sd_diag *d)
{
    struct kern_comm *c;
    int rv;

    if (be == NULL || n < 1 || n > KERN_COMM_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           "comm: no backend, or %d ranks not in [1, %d]",
                           (int)n, KERN_COMM_MAX);
    if (be->comm_open == NULL)
        return sd_diag_set(d, SD_EUNSUPPORTED,
                           "comm: the %s backend has no collectives", be->name);
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return sd_diag_set(d, SD_ENOMEM, "comm: out of memory");
    c->be = be;
    c->n = n;
    rv = be->comm_open(n, &c->impl, d);
    if (rv != 0) {
        free(c);
        return rv;
    }
    *out = c;
    return 0;
}

void kern_comm_close(struct kern_comm *c)
{
    if (c == NULL)
        return;
    c->be->comm_close(c->impl, c->failed);
    free(c);
}

int32_t kern_comm_size(const struct kern_comm *c)
{
    return c->n;
}

/* Checks a description against a communicator of n ranks. */
static int check_desc(const struct kern_coll_desc *c, int32_t n,
                      struct sd_diag *d)
{
    int32_t r;

    if (c == NULL || c->op < 0 || c->op >= KERN_COLL_COUNT)
        return sd_diag_set(d, SD_EINVAL, "comm: unknown collective");
    if (c->warmup < 0 || c->repeats < 1)
        return sd_diag_set(d, SD_EINVAL,
                           "comm: warmup %d must be >= 0, repeats %d >= 1",
                           c->warmup, c->repeats);
    if (c->op == KERN_COLL_ALLTOALL) {
        if (c->a2a_counts == NULL)
            return sd_diag_set(d, SD_EINVAL, "comm: all-to-all: no counts");
        for (r = 0; r < n * n; r++)
            if (c->a2a_counts[r] > COMM_MAX_FLOATS / (uint64_t)n)
                return sd_diag_set(d, SD_EINVAL,
                                   "comm: a2a_counts[%d] too large", (int)r);
    } else if (c->count < 1 || c->count > COMM_MAX_FLOATS / (uint64_t)n) {
        return sd_diag_set(d, SD_EINVAL, "comm: count %llu not in [1, %llu]",
                           (unsigned long long)c->count,
                           (unsigned long long)(COMM_MAX_FLOATS / (uint64_t)n));
    }
    for (r = 0; c->sleep_ms != NULL && r < n; r++)
        if (!isfinite(c->sleep_ms[r]) || c->sleep_ms[r] < 0 ||
            c->sleep_ms[r] > COMM_MAX_SLEEP_MS)
            return sd_diag_set(d, SD_EINVAL,
                               "comm: sleep_ms[%d] not in [0, %.0f]", (int)r,
                               COMM_MAX_SLEEP_MS);
    return 0;
}

/* One timing run: what the rank threads share. */
struct run {
    struct kern_comm *c;
    const struct kern_coll_desc *desc;
    struct kern__barrier bar;
    bool stop; /* written by rank 0 before a barrier, read after it */
};

struct rank {
    struct run *run;
    int32_t rank;
    double *samples; /* repeats */
    int rv;
    struct sd_diag d;
};

static void sleep_ms(double ms)
{
    struct timespec ts;

    if (ms <= 0)
        return;
    ts.tv_sec = (time_t)(ms / 1e3);
    ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1e3) * 1e6);
    while (nanosleep(&ts, &ts) != 0)
        ; /* interrupted: sleep the rest */
}

static void *rank_main(void *arg)
{
    struct rank *rk = arg;
    struct run *run = rk->run;
    const struct kern_coll_desc *desc = run->desc;
    int it, total = desc->warmup + desc->repeats;
    double t1, t2;

    for (it = 0; it < total; it++) {
        if (rk->rank == 0 && desc->abort != NULL &&
            atomic_load(desc->abort) != 0)
            run->stop = true;
        if (!kern__barrier_wait(&run->bar)) {
            rk->rv = SD_ECANCELED; /* another rank failed */
            break;
        }
        if (run->stop) {
            rk->rv = SD_ECANCELED;
            break;
        }
        sleep_ms(desc->sleep_ms != NULL ? desc->sleep_ms[rk->rank] : 0);
        t1 = kern__now_ms();
        rk->rv = run->c->be->comm_run(run->c->impl, rk->rank, desc, &rk->d);
        t2 = kern__now_ms();
        if (rk->rv != 0) {
            kern__barrier_break(&run->bar);
            break;
        }
        if (it >= desc->warmup)
            rk->samples[it - desc->warmup] = t2 - t1;
    }
    return NULL;
}

/* The run's status: a failure of a rank before a cancellation (the others
 * were cancelled because of it), with that rank's diag. */
static int run_status(struct rank *rk, int32_t n, struct sd_diag *d)
{
    int32_t r;

    for (r = 0; r < n; r++)
        if (rk[r].rv != 0 && rk[r].rv != SD_ECANCELED)
            return sd_diag_set(d, rk[r].rv, "comm rank %d: %s", (int)r,
                               rk[r].d.msg);
    for (r = 0; r < n; r++)
        if (rk[r].rv != 0)
            return sd_diag_set(d, SD_ECANCELED, "comm: cancelled");
    return 0;
}

int kern_comm_time(struct kern_comm *c, const struct kern_coll_desc *desc,
                   struct kern_timing *per_rank, struct sd_diag *d)
{
    struct run run;
    struct rank *rk;
    pthread_t *th;
    double *samples;
    int32_t r, started = 0;
    int rv;

    if (c == NULL || per_rank == NULL)
        return sd_diag_set(d, SD_EINVAL, "comm: missing argument");
    if (c->failed)
        return sd_diag_set(d, SD_EDEVICE,
                           "comm: unusable after an earlier failure");
    rv = check_desc(desc, c->n, d);
    if (rv != 0)
        return rv;
    rk = calloc((size_t)c->n, sizeof(*rk));
    th = calloc((size_t)c->n, sizeof(*th));
    samples = calloc((size_t)c->n * (size_t)desc->repeats, sizeof(*samples));
    if (rk == NULL || th == NULL || samples == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "comm: out of memory");
        goto out_free;
    }
    memset(&run, 0, sizeof(run));
    run.c = c;
    run.desc = desc;
    kern__barrier_init(&run.bar, c->n);
    for (r = 0; r < c->n; r++) {
        rk[r].run = &run;
        rk[r].rank = r;
        rk[r].samples = samples + (size_t)r * (size_t)desc->repeats;
        if (pthread_create(&th[r], NULL, rank_main, &rk[r]) != 0)
            break;
        started++;
    }
    if (started < c->n)
        kern__barrier_break(&run.bar); /* the started ones stop */
    for (r = 0; r < started; r++)
        pthread_join(th[r], NULL);
    kern__barrier_destroy(&run.bar);
    if (started < c->n) {
        rv = sd_diag_set(d, SD_ENOMEM, "comm: cannot start rank threads");
        goto out_free;
    }
    rv = run_status(rk, c->n, d);
    for (r = 0; r < c->n; r++)
        if (rk[r].rv != 0 && rk[r].rv != SD_ECANCELED)
            c->failed = true;
    if (rv == 0)
        for (r = 0; r < c->n; r++)
            kern_timing_summarize(rk[r].samples, desc->repeats, &per_rank[r]);
out_free:
    free(samples);
    free(th);
    free(rk);
    return rv;
}
