/*
 * The profiler worker: ground-truth samples for retraining, measured only
 * while the daemon is idle.
 *
 * One thread, at the lowest CPU priority, on its own store connection.  It
 * measures when the profiler is enabled and not paused, no Planner request
 * is in flight, none came for profiler_idle_ms, and there is something to
 * measure: a shard a plan proposed (profw_propose), else the next random
 * shard of the profile (prof_run, resumable) until the profile holds
 * profiler_max_samples.  A request arriving sets svc.prof_abort
 * (svc_busy_begin): the timing loop stops before its next step and the
 * sample being timed is dropped, so the worker steps aside within one step
 * (measured in docs/daemon.md).  What was committed stays committed.
 */
#define _GNU_SOURCE /* syscall(SYS_gettid): per-thread priority */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "profiler.h"

#define PROFW_CHUNK     64                  /* random samples per prof_run */
#define PROFW_MAX_BYTES ((uint64_t)4 << 30) /* largest shard measured */
#define PROFW_POLL_MS   100

/* ---------------------------------------------------------------------- */
/* Control                                                                 */

enum svc_profiler_state profw_state(struct svc *s)
{
    enum svc_profiler_state st;

    pthread_mutex_lock(&s->mu);
    if (s->be == NULL || !s->cfg.profiler)
        st = SVC_PROFILER_DISABLED;
    else if (s->prof_paused)
        st = SVC_PROFILER_PAUSED;
    else
        st = SVC_PROFILER_RUNNING;
    pthread_mutex_unlock(&s->mu);
    return st;
}

int profw_set_paused(struct svc *s, bool paused, enum svc_profiler_state *now,
                     struct sd_diag *d)
{
    pthread_mutex_lock(&s->mu);
    if (s->be == NULL || !s->cfg.profiler) {
        pthread_mutex_unlock(&s->mu);
        return sd_diag_set(d, SD_ESTATE,
                           "paused: the profiler is disabled (%s)",
                           s->be == NULL ? "no measuring backend"
                                         : "profiler = off in the "
                                           "configuration");
    }
    s->prof_paused = paused;
    if (paused)
        s->prof_abort = 1; /* a sample being timed is dropped */
    pthread_cond_broadcast(&s->prof_cv);
    pthread_mutex_unlock(&s->mu);
    *now = paused ? SVC_PROFILER_PAUSED : SVC_PROFILER_RUNNING;
    svc_log(SVC_LOG_INFO, "profiler %s\n", paused ? "paused" : "resumed");
    return 0;
}

void profw_propose(struct svc *s, const struct plan *p,
                   const struct table *tables, int64_t batch)
{
    struct svc_proposal *pr;
    size_t k;
    int32_t dev;

    pthread_mutex_lock(&s->mu);
    if (s->be == NULL || !s->cfg.profiler || batch != s->cfg.profiler_batch)
        goto out_unlock;
    if (s->proposals == NULL) {
        s->proposals = calloc(SVC_PROPOSALS_MAX, sizeof(*s->proposals));
        if (s->proposals == NULL)
            goto out_unlock;
    }
    for (dev = 0; dev < p->ndevices; dev++) {
        uint64_t bytes = 0;

        pr = &s->proposals[s->proposals_next];
        pr->n = 0;
        for (k = 0; k < p->nshards; k++) {
            const struct shard *sh = &p->shards[k];

            if (sh->device != dev)
                continue;
            if (pr->n == SVC_PROPOSAL_TABLES) {
                pr->n = 0; /* too many tables to store as one sample */
                break;
            }
            pr->tables[pr->n] = tables[sh->table];
            pr->tables[pr->n].dim = sh->col_width;
            bytes += table_bytes(&pr->tables[pr->n], sh->col_width);
            pr->n++;
        }
        if (pr->n == 0 || bytes > PROFW_MAX_BYTES)
            continue;
        s->proposals_next = (s->proposals_next + 1) % SVC_PROPOSALS_MAX;
        if (s->nproposals < SVC_PROPOSALS_MAX)
            s->nproposals++;
    }
out_unlock:
    pthread_mutex_unlock(&s->mu);
}

/* ---------------------------------------------------------------------- */
/* The thread                                                              */

/* Whether the worker may measure now (mu held). */
static bool may_measure(struct svc *s)
{
    return s->be != NULL && s->cfg.profiler && !s->prof_paused &&
           !s->prof_stopping && atomic_load(&s->inflight) == 0 &&
           svc_now_ms() - atomic_load(&s->last_request_ms) >=
               s->cfg.profiler_idle_ms &&
           (s->nproposals > 0 ||
            s->compute_samples < s->cfg.profiler_max_samples);
}

/* Measures one proposed shard into the store. */
static int measure_proposal(struct svc *s, struct store *st,
                            struct svc_proposal *pr,
                            const struct kern_timing_opts *o, struct sd_diag *d)
{
    struct trace traces[SVC_PROPOSAL_TABLES];
    struct prof_item items[SVC_PROPOSAL_TABLES];
    struct store_sample smp;
    struct kern_timing tm;
    size_t i, made = 0;
    int rv = 0;

    for (i = 0; i < pr->n && rv == 0; i++, made++) {
        rv = trace_from_table(&pr->tables[i], s->cfg.profiler_batch, i,
                              &traces[i]);
        items[i].trace = &traces[i];
        items[i].cols = pr->tables[i].dim;
    }
    if (rv != 0) {
        made--;
        rv = sd_diag_set(d, rv, "making traces: %s", sd_strerror(rv));
    } else {
        rv = prof_measure_shard(s->be, 0, items, pr->n, o, &tm, d);
    }
    for (i = 0; i < made; i++)
        trace_destroy(&traces[i]);
    if (rv != 0)
        return rv;
    memset(&smp, 0, sizeof(smp));
    smp.profile_id = s->profile_id;
    smp.kind = STORE_KIND_COMPUTE;
    smp.tables = pr->tables;
    smp.ntables = pr->n;
    smp.measured_ms = tm.median_ms;
    smp.spread_ms = tm.p90_ms - tm.p10_ms;
    snprintf(smp.device, sizeof(smp.device), "%s", s->device_name);
    snprintf(smp.source, sizeof(smp.source), "plan");
    return store_sample_add(st, &smp, NULL, d);
}

/* The parameters of the random samples: those of `shardctl profile`. */
static void random_params(struct svc *s, struct prof_run_params *p)
{
    prof_run_params_default(p);
    p->be = s->be;
    p->device = 0;
    p->batch_size = s->cfg.profiler_batch;
}

/*
 * The next random samples of the profile (prof_run resumes its sequence),
 * drawn from *pool, made on first use and kept for the thread's life.
 */
static int measure_random(struct svc *s, struct store *st, uint64_t target,
                          struct table **pool, struct prof_run_result *res,
                          struct sd_diag *d)
{
    struct prof_run_params p;
    int rv;

    random_params(s, &p);
    if (*pool == NULL) {
        rv = prof_make_pool(&p, pool);
        if (rv != 0)
            return sd_diag_set(d, rv, "making the table pool: %s",
                               sd_strerror(rv));
    }
    p.pool = *pool;
    p.target_samples = target;
    p.shape.max_bytes = PROFW_MAX_BYTES;
    p.commit_every = 1; /* a kill loses at most the sample being timed */
    p.stop = &s->prof_abort;
    p.timing.abort = &s->prof_abort;
    return prof_run(st, &p, res, d);
}

static void *prof_main(void *arg)
{
    struct svc *s = arg;
    struct store *st = NULL;
    struct svc_proposal pr;
    struct prof_run_result res;
    struct kern_timing_opts topts;
    struct table *pool = NULL;
    struct timespec until;
    struct sd_diag d;
    uint64_t target;
    bool have_proposal, enabled;
    int rv;

    /* Measuring must never slow a plan down: lowest priority (per thread
     * on Linux). */
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
    if (store_open(s->db_path, 0, &st, &d) != 0) {
        svc_log(SVC_LOG_ERROR,
                "the profiler cannot open the store: %s; "
                "it is off\n",
                d.msg);
        return NULL;
    }
    kern_timing_opts_default(&topts);
    topts.abort = &s->prof_abort;
    /* The table pool (about a second of CPU, at nice 19) is made up front,
     * not at the first idle moment where it could not step aside. */
    pthread_mutex_lock(&s->mu);
    enabled = s->cfg.profiler;
    pthread_mutex_unlock(&s->mu);
    if (enabled) {
        struct prof_run_params p;

        random_params(s, &p);
        if (prof_make_pool(&p, &pool) != 0)
            pool = NULL; /* measure_random() retries and reports */
    }
    pthread_mutex_lock(&s->mu);
    while (!s->prof_stopping) {
        if (!may_measure(s)) {
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += PROFW_POLL_MS * 1000000L;
            if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&s->prof_cv, &s->mu, &until);
            continue;
        }
        /* Cleared, then checked again: a request that arrived in between
         * has raised inflight, one after it raises the flag again. */
        s->prof_abort = 0;
        if (!may_measure(s))
            continue;
        have_proposal = s->nproposals > 0;
        if (have_proposal) {
            size_t at =
                (s->proposals_next + SVC_PROPOSALS_MAX - s->nproposals) %
                SVC_PROPOSALS_MAX;

            pr = s->proposals[at];
            s->nproposals--;
        }
        target = s->compute_samples + PROFW_CHUNK;
        if (target > s->cfg.profiler_max_samples)
            target = s->cfg.profiler_max_samples;
        pthread_mutex_unlock(&s->mu);

        memset(&res, 0, sizeof(res));
        atomic_store(&s->prof_abort_ms, 0);
        atomic_store(&s->prof_measuring, true);
        if (have_proposal) {
            rv = measure_proposal(s, st, &pr, &topts, &d);
            if (rv == 0)
                res.added = 1;
        } else {
            rv = measure_random(s, st, target, &pool, &res, &d);
        }
        atomic_store(&s->prof_measuring, false);
        if (atomic_load(&s->prof_abort_ms) != 0)
            svc_log(SVC_LOG_DEBUG,
                    "profiler: stepped aside for a request "
                    "in %lld ms\n",
                    (long long)(svc_now_ms() - atomic_load(&s->prof_abort_ms)));
        if (rv != 0 && rv != SD_ECANCELED)
            svc_log(SVC_LOG_ERROR, "profiler: %s\n", d.msg);

        pthread_mutex_lock(&s->mu);
        if (!have_proposal && rv == 0)
            s->compute_samples = res.existing + res.added; /* as stored */
        else
            s->compute_samples += res.added;
        s->prof_measured += res.added;
        if (rv != 0 && rv != SD_ECANCELED && !have_proposal) {
            /* A failing device is not retried in a tight loop. */
            s->prof_paused = true;
            svc_log(SVC_LOG_WARN, "profiler paused after the error; "
                                  "resume it with SetProfiler\n");
        }
    }
    pthread_mutex_unlock(&s->mu);
    free(pool);
    store_close(st);
    return NULL;
}

int profw_start(struct svc *s, struct sd_diag *d)
{
    if (s->be == NULL)
        return 0; /* DISABLED: nothing can measure */
    if (pthread_create(&s->prof_thread, NULL, prof_main, s) != 0)
        return sd_diag_set(d, SD_ENOMEM, "cannot start the profiler thread");
    s->prof_thread_started = true;
    return 0;
}

void profw_stop(struct svc *s)
{
    if (!s->prof_thread_started)
        return;
    pthread_mutex_lock(&s->mu);
    s->prof_stopping = true;
    s->prof_abort = 1;
    pthread_cond_broadcast(&s->prof_cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->prof_thread, NULL);
    s->prof_thread_started = false;
}
