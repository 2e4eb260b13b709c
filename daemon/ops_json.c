/*
 * The status page's data as JSON (service.h: svc_status_json(),
 * svc_plans_json(), svc_plan_json()): the models and their errors over
 * time, the profiler, jobs with their progress, the lanes, and the plans of
 * the plan audit with the per-device picture's numbers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "service_int.h"
#include "shardd/log.h"

#define STATUS_MODELS 100 /* model versions on the error plot */
#define STATUS_JOBS   20  /* jobs listed */

/* Dumps root (a reference is taken over) into *out. */
static int dump_json(json_t *root, int bad, char **out, size_t *len,
                     struct sd_diag *d)
{
    char *text = NULL;

    if (!bad && root != NULL)
        text = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(10));
    json_decref(root);
    if (text == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    *out = text;
    *len = strlen(text);
    return 0;
}

static json_t *model_json(const struct store_model_info *m)
{
    return json_pack("{s:I, s:s, s:s, s:I, s:f, s:f, s:I, s:b}", "version",
                     (json_int_t)m->id, "profile", m->profile, "kind",
                     store_kind_name(m->kind), "created_ms",
                     (json_int_t)m->created_ms, "validation_error",
                     m->metrics.val_mape, "holdout_error", m->metrics.test_mape,
                     "train_samples", (json_int_t)m->metrics.train_samples,
                     "active", m->active);
}

static json_t *job_json(struct svc *s, const struct store_job *stored)
{
    struct store_job j = *stored;

    /* A job in flight: its progress in memory is newer than the store's. */
    if (!store_job_state_is_terminal(j.state))
        jobs_peek(&s->jobs, j.id, &j);
    return json_pack("{s:I, s:s, s:f, s:s, s:s, s:I, s:I, s:I, s:I}", "id",
                     (json_int_t)j.id, "state", store_job_state_name(j.state),
                     "progress", j.progress, "message", j.message, "profile",
                     j.profile, "created_ms", (json_int_t)j.created_ms,
                     "started_ms", (json_int_t)j.started_ms, "finished_ms",
                     (json_int_t)j.finished_ms, "result_model",
                     (json_int_t)j.result_model_id);
}

/* Models, jobs and samples per profile, from the store. */
static int status_store(struct svc *s, json_t *root, struct sd_diag *d)
{
    struct store_model_info *models = NULL;
    struct store_job *jobs = NULL;
    struct store_profile *profiles = NULL;
    json_t *ma = json_array(), *ja = json_array(), *sa = json_array();
    size_t i, nm = 0, nj = 0, np = 0;
    uint64_t compute, comm;
    int rv, bad = ma == NULL || ja == NULL || sa == NULL;

    pthread_mutex_lock(&s->store_mu);
    rv = store_model_list(s->st, 0, STATUS_MODELS, &models, &nm, d);
    if (rv == 0)
        rv = store_job_list(s->st, STATUS_JOBS, &jobs, &nj, d);
    if (rv == 0)
        rv = store_profile_list(s->st, &profiles, &np, d);
    for (i = 0; rv == 0 && i < np; i++) {
        rv = store_sample_count(s->st, profiles[i].id, STORE_KIND_COMPUTE, 0,
                                &compute, d);
        if (rv == 0)
            rv = store_sample_count(s->st, profiles[i].id, STORE_KIND_COMM, 0,
                                    &comm, d);
        if (rv == 0)
            bad |= json_array_append_new(
                sa, json_pack("{s:s, s:I, s:I}", "profile", profiles[i].name,
                              "compute", (json_int_t)compute, "comm",
                              (json_int_t)comm));
    }
    pthread_mutex_unlock(&s->store_mu);
    for (i = 0; rv == 0 && i < nm; i++)
        bad |= json_array_append_new(ma, model_json(&models[i]));
    for (i = 0; rv == 0 && i < nj; i++)
        bad |= json_array_append_new(ja, job_json(s, &jobs[i]));
    bad |= json_object_set_new(root, "models", ma);
    bad |= json_object_set_new(root, "jobs", ja);
    bad |= json_object_set_new(root, "samples", sa);
    free(models);
    free(jobs);
    free(profiles);
    if (rv == 0 && bad)
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
    return rv;
}

static json_t *serving_json(struct svc *s)
{
    struct dmodel *m = NULL;
    struct sd_diag d;
    json_t *o;

    if (models_acquire(&s->models, NULL, &m, &d) != 0)
        return json_null();
    o = json_pack("{s:s, s:s, s:f, s:f, s:b}", "profile", m->net->profile,
                  "version", m->version, "validation_error",
                  m->metrics.val_mape, "holdout_error", m->metrics.test_mape,
                  "embedded", m->embedded);
    dmodel_release(m);
    return o;
}

static json_t *profiler_json(struct svc *s)
{
    uint64_t measured, samples, kept, budget, skipped, remeasured;

    profw_counts(&s->profw, &measured, &samples, &remeasured);
    profw_memory(&s->profw, &kept, &budget, &skipped);
    return json_pack("{s:s, s:I, s:I, s:I, s:I, s:I}", "state",
                     svc__profiler_state_name(profw_state(&s->profw)),
                     "measured", (json_int_t)measured, "profile_samples",
                     (json_int_t)samples, "memory_bytes", (json_int_t)kept,
                     "memory_budget_bytes", (json_int_t)budget, "retried",
                     (json_int_t)remeasured);
}

int svc_status_json(struct svc *s, char **out, size_t *len, struct sd_diag *d)
{
    json_t *root;
    size_t entries, bytes;
    uint64_t hits, misses;
    int rv, bad;

    cache_stats(&s->cache, &entries, &bytes, &hits, &misses);
    root = json_pack(
        "{s:s, s:I, s:I, s:s, s:s, s:b, s:o, s:o, s:{s:I, s:I, s:I}, "
        "s:{s:I, s:I, s:I, s:I}, s:I, s:I}",
        "version", SHARDD_VERSION, "now_ms", (json_int_t)sd_wall_ms(),
        "started_ms", (json_int_t)s->started_ms, "profile", s->profile,
        "backend", s->be != NULL ? s->be->name : "none", "serving",
        svc_is_serving(s), "model", serving_json(s), "profiler",
        profiler_json(s), "lanes", "inflight",
        (json_int_t)atomic_load(&s->metrics.inflight), "big_running",
        (json_int_t)atomic_load(&s->metrics.big_running), "big_waiting",
        (json_int_t)atomic_load(&s->metrics.big_waiting), "cache", "entries",
        (json_int_t)entries, "bytes", (json_int_t)bytes, "hits",
        (json_int_t)hits, "misses", (json_int_t)misses, "rss_bytes",
        (json_int_t)svc__rss_bytes(), "store_bytes",
        (json_int_t)svc__store_bytes(s));
    if (root == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    rv = status_store(s, root, d);
    bad = svc__fleet_json(s, root);
    if (rv != 0) {
        json_decref(root);
        return rv;
    }
    return dump_json(root, bad, out, len, d);
}

int svc_plans_json(struct svc *s, size_t limit, char **out, size_t *len,
                   struct sd_diag *d)
{
    struct store_plan_audit *a = NULL;
    json_t *arr = json_array();
    size_t i, n = 0;
    int rv, bad = arr == NULL;

    audit_sync(&s->audit); /* a client sees the plan it was just given */
    pthread_mutex_lock(&s->store_mu);
    rv = store_plan_audit_list(s->st, limit, &a, &n, d);
    pthread_mutex_unlock(&s->store_mu);
    for (i = 0; rv == 0 && i < n; i++)
        bad |= json_array_append_new(
            arr, json_pack("{s:I, s:I, s:s, s:s, s:I, s:i, s:i, s:f}", "id",
                           (json_int_t)a[i].id, "created_ms",
                           (json_int_t)a[i].created_ms, "algorithm",
                           a[i].algorithm, "request_hash", a[i].request_hash,
                           "model", (json_int_t)a[i].model_id, "tables",
                           (int)a[i].ntables, "devices", (int)a[i].ndevices,
                           "plan_cost_ms", a[i].plan_cost_ms));
    free(a);
    if (rv != 0) {
        json_decref(arr);
        return rv;
    }
    return dump_json(json_pack("{s:o}", "plans", arr), bad, out, len, d);
}

/*
 * The picture's numbers of one device of a plan in json_plan()'s format:
 * compute, backward comm, and forward comm split into the wait for the
 * slowest device (max over devices of compute + backward comm, less this
 * one's: planner/problem/cost.c) and the exchange itself.
 */
static json_t *bars_json(json_t *devices, int *critical)
{
    json_t *bars = json_array(), *dv;
    double max_ready = 0, worst = -1;
    size_t i;
    int bad = bars == NULL;

    json_array_foreach(devices, i, dv)
    {
        json_t *c = json_object_get(dv, "cost_ms");
        double ready = json_number_value(json_object_get(c, "compute")) +
                       json_number_value(json_object_get(c, "bwd_comm"));

        if (ready > max_ready)
            max_ready = ready;
    }
    json_array_foreach(devices, i, dv)
    {
        json_t *c = json_object_get(dv, "cost_ms");
        double comp = json_number_value(json_object_get(c, "compute"));
        double bwd = json_number_value(json_object_get(c, "bwd_comm"));
        double fwd = json_number_value(json_object_get(c, "fwd_comm"));
        double wait = max_ready - (comp + bwd);

        if (wait < 0)
            wait = 0;
        if (wait > fwd)
            wait = fwd;
        if (comp + bwd > worst) {
            worst = comp + bwd;
            *critical = (int)i;
        }
        bad |= json_array_append_new(
            bars,
            json_pack("{s:i, s:f, s:f, s:f, s:f, s:f, s:I}", "device", (int)i,
                      "compute_ms", comp, "bwd_comm_ms", bwd, "fwd_comm_ms",
                      fwd - wait, "wait_ms", wait, "total_ms", comp + bwd + fwd,
                      "memory_bytes",
                      json_integer_value(json_object_get(dv, "memory_bytes"))));
    }
    if (bad) {
        json_decref(bars);
        return NULL;
    }
    return bars;
}

int svc_plan_json(struct svc *s, int64_t id, char **out, size_t *len,
                  struct sd_diag *d)
{
    struct store_plan_audit *a = NULL;
    json_t *plan, *root, *expl, *crit, *bars;
    json_error_t err;
    int rv, critical = -1;

    audit_sync(&s->audit);
    pthread_mutex_lock(&s->store_mu);
    rv = store_plan_audit_get(s->st, id, &a, d);
    pthread_mutex_unlock(&s->store_mu);
    if (rv != 0)
        return rv;
    plan = json_loads(a->plan_json, 0, &err);
    if (plan == NULL) {
        free(a);
        return sd_diag_set(d, SD_ECORRUPT, "plan %lld: its record is not JSON",
                           (long long)id);
    }
    bars = bars_json(json_object_get(plan, "devices"), &critical);
    /* The plan's own explanation names the critical device when it has
     * one; the bars' largest compute + backward comm otherwise. */
    expl = json_object_get(plan, "explanation");
    crit = expl != NULL ? json_object_get(expl, "critical_device") : NULL;
    if (json_is_integer(crit))
        critical = (int)json_integer_value(crit);
    root = json_pack(
        "{s:I, s:I, s:s, s:s, s:I, s:i, s:i, s:f, s:i, s:o, s:o}", "id",
        (json_int_t)a->id, "created_ms", (json_int_t)a->created_ms, "algorithm",
        a->algorithm, "request_hash", a->request_hash, "model",
        (json_int_t)a->model_id, "tables", (int)a->ntables, "devices",
        (int)a->ndevices, "plan_cost_ms", a->plan_cost_ms, "critical_device",
        critical, "bars", bars != NULL ? bars : json_null(), "plan", plan);
    free(a);
    return dump_json(root, bars == NULL, out, len, d);
}
