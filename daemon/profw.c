/* The profiler worker (profw.h). */
#define _GNU_SOURCE /* syscall(SYS_gettid): per-thread priority */
#include "profw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "profiler.h"
#include "shardd/log.h"

#define PROFW_CHUNK   64 /* random samples per prof_run */
#define PROFW_POLL_MS 100

/* ---------------------------------------------------------------------- */
/* Control                                                                 */

void profw_init(struct profw *p, const struct kern_backend *be,
                const char *db_path, const char *profile, int64_t profile_id,
                const char *device_name, int64_t batch,
                uint64_t compute_samples, struct conf_snap *cf)
{
    memset(p, 0, sizeof(*p));
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    atomic_init(&p->inflight, 0);
    /* Idle time counts from now: the monotonic clock counts from boot, and
     * a daemon just started has not been idle for profiler_idle_ms. */
    atomic_init(&p->last_request_ms, sd_now_ms());
    atomic_init(&p->abort, 0);
    atomic_init(&p->abort_ms, 0);
    atomic_init(&p->measuring, false);
    p->cf = conf_snap_ref(cf);
    p->be = be;
    snprintf(p->db_path, sizeof(p->db_path), "%s", db_path);
    snprintf(p->profile, sizeof(p->profile), "%s", profile);
    snprintf(p->device_name, sizeof(p->device_name), "%s", device_name);
    p->profile_id = profile_id;
    p->batch = batch;
    p->compute_samples = compute_samples;
}

void profw_configure(struct profw *p, struct conf_snap *cf)
{
    struct conf_snap *old;

    pthread_mutex_lock(&p->mu);
    old = p->cf;
    p->cf = conf_snap_ref(cf);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    conf_snap_unref(old);
}

void profw_request_begin(struct profw *p)
{
    atomic_fetch_add(&p->inflight, 1);
    /* The worker drops its measurement; the time is kept to log how long
     * it took to step aside. */
    if (atomic_load(&p->measuring) && !atomic_load(&p->abort))
        atomic_store(&p->abort_ms, sd_now_ms());
    atomic_store(&p->abort, 1);
}

void profw_request_end(struct profw *p)
{
    atomic_store(&p->last_request_ms, sd_now_ms());
    atomic_fetch_sub(&p->inflight, 1);
}

/* The memory budget of one measurement, bytes (mu held). */
static uint64_t budget(const struct profw *p)
{
    return (uint64_t)p->cf->c.profiler_max_mb << 20;
}

/* Whether the profiler can run at all (mu held). */
static bool enabled(const struct profw *p)
{
    return p->be != NULL && p->cf->c.profiler;
}

enum profw_state profw_state(struct profw *p)
{
    enum profw_state st;

    pthread_mutex_lock(&p->mu);
    if (!enabled(p))
        st = PROFW_DISABLED;
    else if (p->paused)
        st = PROFW_PAUSED;
    else
        st = PROFW_RUNNING;
    pthread_mutex_unlock(&p->mu);
    return st;
}

int profw_set_paused(struct profw *p, bool paused, enum profw_state *now,
                     struct sd_diag *d)
{
    pthread_mutex_lock(&p->mu);
    if (!enabled(p)) {
        pthread_mutex_unlock(&p->mu);
        return sd_diag_set(d, SD_ESTATE,
                           "paused: the profiler is disabled (%s)",
                           p->be == NULL ? "no measuring backend"
                                         : "profiler = off in the "
                                           "configuration");
    }
    p->paused = paused;
    if (paused)
        atomic_store(&p->abort, 1); /* a sample being timed is dropped */
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    *now = paused ? PROFW_PAUSED : PROFW_RUNNING;
    sd_log(SD_LOG_INFO, "profiler %s", paused ? "paused" : "resumed");
    return 0;
}

void profw_counts(struct profw *p, uint64_t *measured,
                  uint64_t *compute_samples, uint64_t *remeasured)
{
    pthread_mutex_lock(&p->mu);
    *measured = p->measured;
    *compute_samples = p->compute_samples;
    *remeasured = p->remeasured;
    pthread_mutex_unlock(&p->mu);
}

void profw_memory(struct profw *p, uint64_t *kept, uint64_t *budget_bytes,
                  uint64_t *skipped)
{
    pthread_mutex_lock(&p->mu);
    *kept =
        p->be != NULL && p->be->kept_bytes != NULL ? p->be->kept_bytes(0) : 0;
    *budget_bytes = budget(p);
    *skipped = p->skipped;
    pthread_mutex_unlock(&p->mu);
}

/*
 * The shard of device `dev` of a plan into *out, each piece as the table
 * the cost model priced it as (shard_table(): a column slice's width, a row
 * block's rows and lookups, a replica's local batch), so that the sample
 * is what the device does; false when it is empty, has more tables than a
 * proposal holds, or needs more memory to measure than the budget allows
 * (prof_fits()).
 */
static bool device_shard(const struct plan *plan, const struct table *tables,
                         int32_t dev, int64_t batch, uint64_t budget,
                         struct profw_proposal *out)
{
    struct prof_footprint f;
    size_t k;

    out->n = 0;
    for (k = 0; k < plan->nshards; k++) {
        const struct shard *sh = &plan->shards[k];

        if (sh->device != dev)
            continue;
        if (out->n == PROFW_PROPOSAL_MAX)
            return false; /* too many tables to store as one sample */
        shard_table(&tables[sh->table], sh, plan->ndevices,
                    &out->tables[out->n]);
        out->n++;
    }
    if (out->n == 0)
        return false;
    prof_footprint(out->tables, out->n, batch, &f);
    return f.weight_bytes <= PROFW_MAX_BYTES && prof_fits(&f, budget);
}

void profw_propose(struct profw *p, const struct plan *plan,
                   const struct table *tables, int64_t batch)
{
    struct profw_proposal *pr;
    int32_t dev;

    pthread_mutex_lock(&p->mu);
    if (!enabled(p) || batch != p->batch)
        goto out_unlock;
    if (p->proposals == NULL) {
        p->proposals = calloc(PROFW_PROPOSALS, sizeof(*p->proposals));
        if (p->proposals == NULL)
            goto out_unlock;
    }
    for (dev = 0; dev < plan->ndevices; dev++) {
        /* Built in the slot only when the ring has room to spare, else in
         * the spare: a full ring's next slot is its oldest live entry,
         * which must stay whole unless this shard replaces it. */
        pr = &p->proposals[p->next];
        if (p->nproposals == PROFW_PROPOSALS) {
            struct profw_proposal spare;

            if (!device_shard(plan, tables, dev, batch, budget(p), &spare)) {
                if (spare.n > 0)
                    p->skipped++;
                continue;
            }
            *pr = spare;
        } else if (!device_shard(plan, tables, dev, batch, budget(p), pr)) {
            if (pr->n > 0)
                p->skipped++;
            continue;
        }
        p->next = (p->next + 1) % PROFW_PROPOSALS;
        if (p->nproposals < PROFW_PROPOSALS)
            p->nproposals++;
    }
out_unlock:
    pthread_mutex_unlock(&p->mu);
}

/* The oldest proposal off the ring (mu held); false when empty. */
static bool take_oldest(struct profw *p, struct profw_proposal *out)
{
    size_t at;

    if (p->nproposals == 0)
        return false;
    at = (p->next + PROFW_PROPOSALS - p->nproposals) % PROFW_PROPOSALS;
    *out = p->proposals[at];
    p->nproposals--;
    return true;
}

bool profw_take_proposal(struct profw *p, struct profw_proposal *out)
{
    bool any;

    pthread_mutex_lock(&p->mu);
    any = take_oldest(p, out);
    pthread_mutex_unlock(&p->mu);
    return any;
}

/* ---------------------------------------------------------------------- */
/* The thread                                                              */

/* Whether the worker may measure now (mu held). */
static bool may_measure(struct profw *p)
{
    return enabled(p) && !p->paused && !p->stopping &&
           atomic_load(&p->inflight) == 0 &&
           sd_now_ms() - atomic_load(&p->last_request_ms) >=
               p->cf->c.profiler_idle_ms &&
           (p->nproposals > 0 ||
            p->compute_samples < p->cf->c.profiler_max_samples) &&
           !kern_device_busy(p->be, 0, NULL, 0); /* others on the GPU */
}

/* Measures one proposed shard into the store, its weights within
 * arena_max bytes. */
static int measure_proposal(struct profw *p, struct store *st,
                            struct profw_proposal *pr,
                            const struct kern_timing_opts *o,
                            uint64_t arena_max, struct sd_diag *d)
{
    struct trace traces[PROFW_PROPOSAL_MAX];
    struct prof_item items[PROFW_PROPOSAL_MAX];
    struct store_sample smp;
    struct kern_timing tm;
    size_t i, made = 0;
    int rv = 0;

    /* In HBM (tier zero), as the plan's own tables are timed. */
    memset(items, 0, sizeof(items));
    for (i = 0; i < pr->n && rv == 0; i++, made++) {
        rv = trace_from_table(&pr->tables[i], p->batch, i, &traces[i]);
        items[i].trace = &traces[i];
        items[i].cols = pr->tables[i].dim;
        /* The sample says what is timed (int8 in fp32, for one). */
        pr->tables[i].dtype = prof_timed_dtype(p->be, pr->tables[i].dtype);
        items[i].dtype = pr->tables[i].dtype;
    }
    if (rv != 0) {
        made--;
        rv = sd_diag_set(d, rv, "making traces: %s", sd_strerror(rv));
    } else {
        rv = prof_measure_shard_capped(p->be, 0, items, pr->n, o, arena_max,
                                       &tm, d);
    }
    for (i = 0; i < made; i++)
        trace_destroy(&traces[i]);
    if (rv != 0)
        return rv;
    memset(&smp, 0, sizeof(smp));
    smp.profile_id = p->profile_id;
    smp.kind = STORE_KIND_COMPUTE;
    smp.tables = pr->tables;
    smp.ntables = pr->n;
    smp.measured_ms = tm.median_ms;
    smp.spread_ms = tm.p90_ms - tm.p10_ms;
    snprintf(smp.device, sizeof(smp.device), "%s", p->device_name);
    snprintf(smp.source, sizeof(smp.source), "plan");
    return store_sample_add(st, &smp, NULL, d);
}

/* The parameters of the random samples: those of `shardctl profile`. */
static void random_params(const struct profw *p, struct prof_run_params *rp)
{
    prof_run_params_default(rp);
    rp->be = p->be;
    rp->device = 0;
    rp->batch_size = p->batch;
}

/*
 * The next random samples of the profile (prof_run resumes its sequence),
 * drawn from *pool, made on first use and kept for the thread's life.
 */
static int measure_random(struct profw *p, struct store *st, uint64_t target,
                          uint64_t budget, double quiet_tolerance,
                          struct table **pool, struct prof_quiet **quiet,
                          struct prof_run_result *res, struct sd_diag *d)
{
    struct prof_run_params rp;
    int rv;

    random_params(p, &rp);
    if (*pool == NULL) {
        rv = prof_make_pool(&rp, pool);
        if (rv != 0)
            return sd_diag_set(d, rv, "making the table pool: %s",
                               sd_strerror(rv));
    }
    rp.pool = *pool;
    rp.target_samples = target;
    rp.shape.max_bytes = PROFW_MAX_BYTES;
    if (rp.shape.max_bytes > budget / 2)
        rp.shape.max_bytes = budget / 2;
    rp.max_footprint_bytes = budget;
    rp.commit_every = 1; /* a kill loses at most the sample being timed */
    rp.stop = &p->abort;
    rp.timing.abort = &p->abort;
    rp.quiet_tolerance = quiet_tolerance;
    if (quiet_tolerance > 0 && *quiet == NULL) {
        rv = prof_quiet_open(p->be, rp.device, &rp.timing, quiet, d);
        if (rv != 0)
            return rv;
    }
    rp.quiet = *quiet;
    return prof_run(st, &rp, res, d);
}

/* Whether the only reason not to measure is a request now or lately
 * (mu held): the worker will measure again soon. */
static bool busy_only(struct profw *p)
{
    return enabled(p) && !p->paused && !p->stopping &&
           (p->nproposals > 0 ||
            p->compute_samples < p->cf->c.profiler_max_samples);
}

/* Gives back what the backend keeps between shards (mu held). */
static void release_kept(struct profw *p)
{
    if (p->be->release != NULL)
        p->be->release(0);
    p->arena_held = false;
}

/* Sleeps until signalled or PROFW_POLL_MS passed (mu held). */
static void wait_a_while(struct profw *p)
{
    struct timespec until = sd_after_ms(CLOCK_REALTIME, PROFW_POLL_MS);

    pthread_cond_timedwait(&p->cv, &p->mu, &until);
}

/* One measurement, unlocked: a proposal, or the next random samples. */
static int measure_once(struct profw *p, struct store *st,
                        struct profw_proposal *pr, uint64_t target,
                        uint64_t budget, double quiet_tolerance,
                        struct table **pool, struct prof_quiet **quiet,
                        struct prof_run_result *res, struct sd_diag *d)
{
    struct kern_timing_opts topts;
    int rv;

    memset(res, 0, sizeof(*res));
    atomic_store(&p->abort_ms, 0);
    atomic_store(&p->measuring, true);
    if (pr != NULL) {
        kern_timing_opts_default(&topts);
        topts.abort = &p->abort;
        rv = measure_proposal(p, st, pr, &topts, budget / 2, d);
        if (rv == 0)
            res->added = 1;
    } else {
        rv = measure_random(p, st, target, budget, quiet_tolerance, pool, quiet,
                            res, d);
    }
    atomic_store(&p->measuring, false);
    if (atomic_load(&p->abort_ms) != 0)
        sd_log(SD_LOG_DEBUG, "profiler: stepped aside for a request in %lld ms",
               (long long)(sd_now_ms() - atomic_load(&p->abort_ms)));
    if (rv != 0 && rv != SD_ECANCELED)
        sd_log(SD_LOG_ERROR, "profiler: %s", d->msg);
    return rv;
}

static void *prof_main(void *arg)
{
    struct profw *p = arg;
    struct store *st = NULL;
    struct profw_proposal pr;
    struct prof_run_result res;
    struct table *pool = NULL;
    struct prof_quiet *quiet = NULL; /* the probe: this thread's alone */
    struct sd_diag d;
    uint64_t target, limit;
    double quiet_tolerance;
    bool have_proposal, on;
    int rv, nice;

    /* Measuring must never slow a plan down: the lowest priority by
     * default (background_nice 19; per thread on Linux). */
    pthread_mutex_lock(&p->mu);
    nice = (int)p->cf->c.background_nice;
    pthread_mutex_unlock(&p->mu);
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice);
    if (store_open(p->db_path, 0, &st, &d) != 0) {
        sd_log(SD_LOG_ERROR,
               "the profiler cannot open the store: %s; it is off", d.msg);
        return NULL;
    }
    /* The table pool (about a second of CPU, at nice 19) is made up front,
     * not at the first idle moment where it could not step aside. */
    pthread_mutex_lock(&p->mu);
    on = enabled(p);
    pthread_mutex_unlock(&p->mu);
    if (on) {
        struct prof_run_params rp;

        random_params(p, &rp);
        if (prof_make_pool(&rp, &pool) != 0)
            pool = NULL; /* measure_random() retries and reports */
    }
    pthread_mutex_lock(&p->mu);
    while (!p->stopping) {
        if (!may_measure(p)) {
            /* Nothing to measure for a while (paused, off, done): what the
             * backend keeps between shards goes back.  A request in flight
             * keeps it: measuring resumes right after. */
            if (p->arena_held && !busy_only(p)) {
                release_kept(p);
                prof_quiet_close(quiet); /* its quiet time is learnt again */
                quiet = NULL;
            }
            wait_a_while(p);
            continue;
        }
        /* Cleared, then checked again: a request that arrived in between
         * has raised inflight, one after it raises the flag again. */
        atomic_store(&p->abort, 0);
        if (!may_measure(p))
            continue;
        have_proposal = take_oldest(p, &pr);
        target = p->compute_samples + PROFW_CHUNK;
        if (target > p->cf->c.profiler_max_samples)
            target = p->cf->c.profiler_max_samples;
        limit = budget(p);
        quiet_tolerance = p->cf->c.profiler_quiet_pct / 100.0;
        /* A smaller budget (a reload) also bounds what is kept. */
        if (p->be->kept_bytes != NULL && p->be->kept_bytes(0) > limit / 2)
            release_kept(p);
        p->arena_held = true;
        pthread_mutex_unlock(&p->mu);

        rv = measure_once(p, st, have_proposal ? &pr : NULL, target, limit,
                          quiet_tolerance, &pool, &quiet, &res, &d);

        pthread_mutex_lock(&p->mu);
        if (!have_proposal && rv == 0)
            p->compute_samples = res.existing + res.added; /* as stored */
        else
            p->compute_samples += res.added;
        p->measured += res.added;
        p->remeasured += res.remeasured;
        if (res.remeasured > 0)
            sd_log(SD_LOG_DEBUG,
                   "profiler: %llu measurements made again: the device was "
                   "busy (probe up to %.2fx its quiet time)",
                   (unsigned long long)res.remeasured, res.max_slowdown);
        if (res.kept_busy > 0)
            sd_log(SD_LOG_WARN,
                   "profiler: the device stayed %.2fx slower than quiet for "
                   "half an hour; samples are measured at that speed now",
                   res.max_slowdown);
        if (rv != 0 && rv != SD_ECANCELED && !have_proposal) {
            /* A failing device is not retried in a tight loop. */
            p->paused = true;
            sd_log(SD_LOG_WARN, "profiler paused after the error; resume it "
                                "with SetProfiler");
        }
    }
    pthread_mutex_unlock(&p->mu);
    prof_quiet_close(quiet);
    free(pool);
    store_close(st);
    return NULL;
}

int profw_start(struct profw *p, struct sd_diag *d)
{
    if (p->be == NULL)
        return 0; /* DISABLED: nothing can measure */
    if (pthread_create(&p->thread, NULL, prof_main, p) != 0)
        return sd_diag_set(d, SD_ENOMEM, "cannot start the profiler thread");
    p->started = true;
    return 0;
}

void profw_stop(struct profw *p)
{
    if (!p->started)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    atomic_store(&p->abort, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    p->started = false;
}

void profw_destroy(struct profw *p)
{
    profw_stop(p);
    free(p->proposals);
    p->proposals = NULL;
    conf_snap_unref(p->cf);
    p->cf = NULL;
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
}
