/*
 * What operators see of the service (service.h): the metrics hooks the
 * transport calls, and /metrics in the Prometheus text exposition format
 * (docs/daemon.md, "Metrics and the status page").  The JSON of the status
 * page is ops_json.c's.  No HTTP here: daemon/http.c serves what these
 * functions return.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "service_int.h"

void svc_observe(struct svc *s, size_t method, int code, double seconds,
                 enum svc_lane lane, bool timed)
{
    metrics_observe(&s->metrics, method, code, seconds, (int)lane, timed);
}

void svc_lanes_set(struct svc *s, size_t inflight, size_t big_running,
                   size_t big_waiting)
{
    metrics_lanes(&s->metrics, inflight, big_running, big_waiting);
}

bool svc_is_serving(struct svc *s)
{
    return !atomic_load(&s->draining);
}

uint64_t svc__rss_bytes(void)
{
    unsigned long long size, resident;
    long page = sysconf(_SC_PAGESIZE);
    FILE *f = fopen("/proc/self/statm", "r");
    int n;

    if (f == NULL)
        return 0;
    n = fscanf(f, "%llu %llu", &size, &resident);
    fclose(f);
    return n == 2 && page > 0 ? (uint64_t)resident * (uint64_t)page : 0;
}

uint64_t svc__store_bytes(struct svc *s)
{
    static const char *const part[] = {"", "-wal", "-shm"};
    char path[SVC_PATH_MAX + 8];
    struct stat st;
    uint64_t n = 0;
    size_t i;

    for (i = 0; i < sizeof(part) / sizeof(part[0]); i++) {
        snprintf(path, sizeof(path), "%s%s", s->db_path, part[i]);
        if (stat(path, &st) == 0)
            n += (uint64_t)st.st_size;
    }
    return n;
}

const char *svc__profiler_state_name(enum profw_state st)
{
    switch (st) {
    case PROFW_RUNNING:
        return "running";
    case PROFW_PAUSED:
        return "paused";
    default:
        return "disabled";
    }
}

/* ---------------------------------------------------------------------- */
/* /metrics                                                                */

static void gauge(struct mtext *t, const char *name, const char *help, double v)
{
    mtext_head(t, name, "gauge", help);
    mtext_printf(t, "%s %.17g\n", name, v);
}

static void counter(struct mtext *t, const char *name, const char *help,
                    unsigned long long v)
{
    mtext_head(t, name, "counter", help);
    mtext_printf(t, "%s %llu\n", name, v);
}

/* The serving model and, per profile with a stored model, the active one. */
static void render_models(struct svc *s, struct mtext *t)
{
    struct dmodel *m = NULL;
    struct sd_diag d;

    mtext_head(t, "shardd_model_info", "gauge",
               "The model answering requests that name no profile (1).");
    mtext_head(t, "shardd_model_validation_error_ratio", "gauge",
               "The serving model's mean absolute percentage error on its "
               "validation split, as a fraction.");
    mtext_head(t, "shardd_model_holdout_error_ratio", "gauge",
               "The serving model's mean absolute percentage error on its "
               "held-out test split, as a fraction.");
    if (models_acquire(&s->models, NULL, &m, &d) != 0)
        return;
    mtext_printf(t, "shardd_model_info{profile=\"");
    mtext_label(t, m->net->profile);
    mtext_printf(t, "\",version=\"");
    mtext_label(t, m->version);
    mtext_printf(t, "\"} 1\n");
    mtext_printf(t, "shardd_model_validation_error_ratio{version=\"");
    mtext_label(t, m->version);
    mtext_printf(t, "\"} %.17g\n", m->metrics.val_mape);
    mtext_printf(t, "shardd_model_holdout_error_ratio{version=\"");
    mtext_label(t, m->version);
    mtext_printf(t, "\"} %.17g\n", m->metrics.test_mape);
    dmodel_release(m);
}

/* Samples per profile and kind, jobs by state: from the store. */
static int render_store(struct svc *s, struct mtext *t, struct sd_diag *d)
{
    static const enum store_job_state states[] = {
        STORE_JOB_QUEUED, STORE_JOB_RUNNING, STORE_JOB_SUCCEEDED,
        STORE_JOB_FAILED, STORE_JOB_CANCELLED};
    struct store_profile *profiles = NULL;
    size_t i, np = 0;
    uint64_t n;
    int k, rv;

    pthread_mutex_lock(&s->store_mu);
    rv = store_profile_list(s->st, &profiles, &np, d);
    if (rv != 0)
        goto out_unlock;
    mtext_head(t, "shardd_store_samples", "gauge",
               "Measured samples in the store, by profile and kind.");
    for (i = 0; i < np && rv == 0; i++)
        for (k = STORE_KIND_COMPUTE; k <= STORE_KIND_COMM && rv == 0; k++) {
            rv = store_sample_count(s->st, profiles[i].id, (enum store_kind)k,
                                    0, &n, d);
            if (rv != 0)
                break;
            mtext_printf(t, "shardd_store_samples{profile=\"");
            mtext_label(t, profiles[i].name);
            mtext_printf(t, "\",kind=\"%s\"} %llu\n",
                         store_kind_name((enum store_kind)k),
                         (unsigned long long)n);
        }
    mtext_head(t, "shardd_jobs", "gauge", "Retraining jobs by state.");
    for (i = 0; i < sizeof(states) / sizeof(states[0]) && rv == 0; i++) {
        rv = store_job_count(s->st, states[i], &n, d);
        if (rv == 0)
            mtext_printf(t, "shardd_jobs{state=\"%s\"} %llu\n",
                         store_job_state_name(states[i]),
                         (unsigned long long)n);
    }
out_unlock:
    pthread_mutex_unlock(&s->store_mu);
    free(profiles);
    return rv;
}

static void render_profiler(struct svc *s, struct mtext *t)
{
    static const enum profw_state all[] = {PROFW_RUNNING, PROFW_PAUSED,
                                           PROFW_DISABLED};
    enum profw_state now = profw_state(&s->profw);
    uint64_t measured, samples, kept, budget, skipped, remeasured;
    size_t i;

    profw_counts(&s->profw, &measured, &samples, &remeasured);
    profw_memory(&s->profw, &kept, &budget, &skipped);
    mtext_head(t, "shardd_profiler_state", "gauge",
               "The background profiler's state (1 for the current one).");
    for (i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        mtext_printf(t, "shardd_profiler_state{state=\"%s\"} %d\n",
                     svc__profiler_state_name(all[i]), all[i] == now);
    counter(t, "shardd_profiler_samples_measured_total",
            "Samples this daemon's profiler measured since it started "
            "(its throughput is the rate of this).",
            (unsigned long long)measured);
    counter(t, "shardd_profiler_proposals_skipped_total",
            "Proposed shards skipped for not fitting the memory budget.",
            (unsigned long long)skipped);
    counter(t, "shardd_profiler_measurements_retried_total",
            "Measurements dropped and made again because a probe timed "
            "beside them ran slower than quiet (profiler_quiet_pct).",
            (unsigned long long)remeasured);
    gauge(t, "shardd_profiler_memory_bytes",
          "Memory the profiler keeps between measurements.", (double)kept);
    gauge(t, "shardd_profiler_memory_budget_bytes",
          "The memory budget of one measurement (profiler_max_mb).",
          (double)budget);
}

int svc_metrics_text(struct svc *s, char **out, size_t *len, struct sd_diag *d)
{
    const char *paths[METRICS_METHODS];
    struct mtext t = {0};
    size_t i, entries, bytes;
    uint64_t hits, misses;
    int rv;

    for (i = 0; i < svc_nmethods && i < METRICS_METHODS; i++)
        paths[i] = svc_methods[i].path;
    metrics_render(&s->metrics, paths, i, &t);
    mtext_head(&t, "shardd_build_info", "gauge", "The daemon's version (1).");
    mtext_printf(&t, "shardd_build_info{version=\"%s\"} 1\n", SHARDD_VERSION);
    gauge(&t, "shardd_start_time_seconds",
          "When the daemon started, unix seconds.",
          (double)s->started_ms / 1000.0);
    gauge(&t, "shardd_serving", "1 while health answers SERVING, 0 draining.",
          svc_is_serving(s) ? 1 : 0);
    cache_stats(&s->cache, &entries, &bytes, &hits, &misses);
    counter(&t, "shardd_plan_cache_hits_total",
            "Plan requests answered from the plan cache.",
            (unsigned long long)hits);
    counter(&t, "shardd_plan_cache_misses_total",
            "Plan requests the plan cache could not answer.",
            (unsigned long long)misses);
    gauge(&t, "shardd_plan_cache_entries", "Plans in the plan cache.",
          (double)entries);
    gauge(&t, "shardd_plan_cache_bytes", "Bytes of the cached plans.",
          (double)bytes);
    counter(&t, "shardd_plan_audit_written_total",
            "Plans recorded in the store's plan audit.",
            (unsigned long long)atomic_load(&s->audit.written));
    counter(&t, "shardd_plan_audit_dropped_total",
            "Plans not recorded: the audit queue was full or the store "
            "failed.",
            (unsigned long long)atomic_load(&s->audit.dropped));
    render_models(s, &t);
    render_profiler(s, &t);
    rv = render_store(s, &t, d);
    if (rv != 0) {
        free(t.p);
        return rv;
    }
    gauge(&t, "shardd_store_size_bytes",
          "Size of the store: the database, its WAL and shared memory.",
          (double)svc__store_bytes(s));
    gauge(&t, "shardd_process_resident_memory_bytes",
          "Resident memory of the daemon process.", (double)svc__rss_bytes());
    svc__fleet_metrics(s, &t);
    if (t.oom || t.p == NULL) {
        free(t.p);
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    }
    *out = t.p;
    *len = t.n;
    return 0;
}
