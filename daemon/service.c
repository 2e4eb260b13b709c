/*
 * The service's life (service.h): opening it on a data directory,
 * reloading, closing; Admin authorisation; the method table.  The methods
 * themselves are planning.c's, health.c's and admin.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profiler.h"
#include "service_int.h"
#include "shardd/log.h"

const struct svc_method svc_methods[] = {
    {.path = "/shardd.v1.Planner/Plan", .fn = svc_plan, .lane = svc_plan_lane},
    {.path = "/shardd.v1.Planner/Estimate", .fn = svc_estimate},
    {.path = "/shardd.v1.Planner/Features", .fn = svc_features},
    {.path = "/grpc.health.v1.Health/Check",
     .draining_ok = true,
     .fn = svc_health},
    {.path = "/grpc.health.v1.Health/Watch",
     .draining_ok = true,
     .stream = svc_health_watch},
    {.path = "/shardd.v1.Admin/GetStatus", .admin = true, .fn = admin_status},
    {.path = "/shardd.v1.Admin/ListModels",
     .admin = true,
     .fn = admin_list_models},
    {.path = "/shardd.v1.Admin/ActivateModel",
     .admin = true,
     .fn = admin_activate},
    {.path = "/shardd.v1.Admin/Retrain", .admin = true, .fn = admin_retrain},
    {.path = "/shardd.v1.Admin/GetJob", .admin = true, .fn = admin_get_job},
    {.path = "/shardd.v1.Admin/WatchJob",
     .admin = true,
     .stream = admin_watch_job},
    {.path = "/shardd.v1.Admin/SetProfiler",
     .admin = true,
     .fn = admin_set_profiler},
    {.path = "/shardd.v1.Fleet/PushSamples",
     .admin = true,
     .fn = fleet_push_samples},
    {.path = "/shardd.v1.Fleet/GetModel", .admin = true, .fn = fleet_get_model},
    {.path = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
     .bidi = svc_reflect},
    {.path = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
     .bidi = svc_reflect},
};

const size_t svc_nmethods = sizeof(svc_methods) / sizeof(svc_methods[0]);

struct conf_snap *svc_conf(struct svc *s)
{
    struct conf_snap *cf;

    pthread_mutex_lock(&s->mu);
    cf = conf_snap_ref(s->cf);
    pthread_mutex_unlock(&s->mu);
    return cf;
}

/* ---------------------------------------------------------------------- */
/* Opening and closing                                                     */

/*
 * The backend the profiler measures with, and the profile it fills.  No
 * usable backend is not an error: the daemon plans without a profiler.
 */
static void pick_backend(struct svc *s, const struct sd_config *c)
{
    const char *name = conf_backend_name((enum conf_backend)c->backend);
    struct kern_device_info info;
    struct sd_diag d;

    s->be = kern_backend_get(name, &d);
    if (s->be == NULL) {
        sd_log(SD_LOG_WARN, "backend %s: %s; the profiler is off", name, d.msg);
        return;
    }
    if (s->be->device_info(0, &info) != 0 ||
        prof_profile_name(s->be, 0, c->profiler_batch, s->profile,
                          sizeof(s->profile), &d) != 0) {
        sd_log(SD_LOG_WARN,
               "backend %s has no usable device; the profiler is off",
               s->be->name);
        s->be = NULL;
        s->profile[0] = '\0';
        return;
    }
    snprintf(s->device_name, sizeof(s->device_name), "%s", info.name);
}

/* The store's profile row for the measured profile (created if new). */
static int ensure_profile(struct svc *s, int64_t batch, struct sd_diag *d)
{
    struct kern_device_info info;
    struct store_profile p;

    if (s->be == NULL || s->be->device_info(0, &info) != 0)
        return 0;
    memset(&p, 0, sizeof(p));
    snprintf(p.name, sizeof(p.name), "%s", s->profile);
    snprintf(p.backend, sizeof(p.backend), "%s", s->be->name);
    snprintf(p.device_model, sizeof(p.device_model), "%s", info.model);
    p.batch_size = batch;
    return store_profile_get_or_create(s->st, &p, &s->profile_id, d);
}

/* models' activated callback: a policy retrain for the new model. */
static void model_activated(void *ctx, struct store *st, const char *profile)
{
    struct svc *s = ctx;

    jobs_after_activation(&s->jobs, st, profile);
}

/* Everything after the store: models, reflection, the parts. */
static int open_parts(struct svc *s, const struct sd_config *c,
                      struct sd_diag *d)
{
    uint64_t n = 0, ended = 0, samples = 0;
    int rv;

    pick_backend(s, c);
    rv = ensure_profile(s, c->profiler_batch, d);
    if (rv != 0)
        return rv;
    /* Models are resident where the profiler measures (the GPU on cuda). */
    rv = models_init(&s->models, s->st, s->profile, c->latent_cache_entries,
                     s->be, d);
    if (rv != 0)
        return rv;
    rv = reflect_open(&s->reflect, d);
    if (rv == 0)
        rv = store_job_cancel_unfinished(
            s->st, "cancelled: the daemon stopped while it ran", &n, &ended, d);
    if (rv != 0) {
        reflect_close(s->reflect);
        models_destroy(&s->models);
        return rv;
    }
    if (n > 0)
        sd_log(SD_LOG_INFO,
               "%llu job(s) left unfinished by the last run marked cancelled",
               (unsigned long long)n);
    if (ended > 0)
        sd_log(SD_LOG_INFO,
               "%llu job(s) whose model the last run had activated marked "
               "succeeded",
               (unsigned long long)ended);
    if (s->profile_id != 0)
        store_sample_count(s->st, s->profile_id, STORE_KIND_COMPUTE, 0,
                           &samples, d);
    cache_init(&s->cache, c->plan_cache_entries);
    jobs_init(&s->jobs, s->db_path, s->profile, s->profile_id, &s->models,
              s->cf);
    /* Every activation of a stored compute model queues its policy. */
    s->models.activated = model_activated;
    s->models.activated_ctx = s;
    profw_init(&s->profw, s->be, s->db_path, s->profile, s->profile_id,
               s->device_name, c->profiler_batch, samples, s->cf);
    if (audit_init(&s->audit, s->db_path) != 0) {
        profw_destroy(&s->profw);
        jobs_destroy(&s->jobs);
        cache_destroy(&s->cache);
        reflect_close(s->reflect);
        models_destroy(&s->models);
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    }
    return 0;
}

int svc_open(const struct sd_config *cfg, struct svc **out, struct sd_diag *d)
{
    struct svc *s = calloc(1, sizeof(*s));
    int rv;

    if (s == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->store_mu, NULL);
    atomic_init(&s->draining, false);
    atomic_init(&s->searching, 0);
    metrics_init(&s->metrics);
    fleet_init(&s->fleet);
    s->started_ms = sd_wall_ms();
    rv = conf_snap_new(cfg, &s->cf);
    if (rv != 0) {
        rv = sd_diag_set(d, rv, "out of memory");
        goto fail_locks;
    }
    if ((size_t)snprintf(s->db_path, sizeof(s->db_path), "%s/%s", cfg->data_dir,
                         CONF_DB_FILE) >= sizeof(s->db_path)) {
        rv = sd_diag_set(d, SD_EINVAL, "data_dir: the path is too long");
        goto fail_conf;
    }
    /* The store's messages name the file and what to do. */
    rv = store_open(s->db_path, 0, &s->st, d);
    if (rv != 0)
        goto fail_conf;
    rv = open_parts(s, cfg, d);
    if (rv != 0)
        goto fail_store;
    *out = s;
    return 0;

fail_store:
    store_close(s->st);
fail_conf:
    conf_snap_unref(s->cf);
fail_locks:
    fleet_destroy(&s->fleet);
    pthread_mutex_destroy(&s->store_mu);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return rv;
}

int svc_start_workers(struct svc *s, struct sd_diag *d)
{
    int rv = audit_start(&s->audit, d);

    if (rv == 0)
        rv = jobs_start(&s->jobs, d);
    if (rv == 0)
        rv = profw_start(&s->profw, d);
    return rv;
}

void svc_close(struct svc *s)
{
    if (s == NULL)
        return;
    profw_destroy(&s->profw);
    jobs_destroy(&s->jobs);
    audit_destroy(&s->audit);
    reflect_close(s->reflect);
    cache_destroy(&s->cache);
    models_destroy(&s->models);
    store_close(s->st);
    conf_snap_unref(s->cf);
    fleet_destroy(&s->fleet);
    pthread_mutex_destroy(&s->store_mu);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int svc_reconfigure(struct svc *s, const struct sd_config *cfg)
{
    struct conf_snap *cf, *old;

    if (conf_snap_new(cfg, &cf) != 0)
        return SD_ENOMEM;
    pthread_mutex_lock(&s->mu);
    old = s->cf;
    s->cf = cf;
    pthread_mutex_unlock(&s->mu);
    cache_set_limit(&s->cache, cfg->plan_cache_entries);
    jobs_configure(&s->jobs, cf);
    profw_configure(&s->profw, cf);
    conf_snap_unref(old);
    return 0;
}

void svc_set_draining(struct svc *s)
{
    atomic_store(&s->draining, true);
}

int svc_authorize(struct svc *s, bool unix_peer, const char *bearer,
                  struct sd_diag *d)
{
    struct conf_snap *cf;
    const char *token;
    unsigned char diff = 0;
    size_t i, n, m;

    if (unix_peer)
        return 0;
    cf = svc_conf(s);
    token = cf->c.admin_token;
    n = strlen(token);
    m = bearer != NULL ? strlen(bearer) : 0;
    /* Compared in time independent of where they differ. */
    for (i = 0; i < n; i++)
        diff |= (unsigned char)(token[i] ^
                                (i < m ? (unsigned char)bearer[i] : 0xff));
    conf_snap_unref(cf);
    if (n == 0)
        return sd_diag_set(d, SD_EAUTH,
                           "Admin calls need the unix socket: this server "
                           "has no admin token for TCP");
    if (bearer == NULL)
        return sd_diag_set(d, SD_EAUTH,
                           "Admin calls over TCP need the metadata "
                           "\"authorization: Bearer <token>\"");
    if (diff != 0 || m != n)
        return sd_diag_set(d, SD_EAUTH, "the admin token is wrong");
    return 0;
}

void svc_describe(struct svc *s, char *buf, size_t size)
{
    struct dmodel *m = NULL;
    char profile[STORE_NAME_MAX];

    models_default_profile(&s->models, profile);
    if (models_acquire(&s->models, NULL, &m, NULL) != 0)
        m = NULL;
    snprintf(buf, size, "model %s answers for %s; profiler %s (profile %s)",
             m != NULL ? m->version : "none", profile,
             profw_state(&s->profw) == PROFW_DISABLED ? "off" : "on",
             s->profile[0] ? s->profile : "none");
    dmodel_release(m);
}
