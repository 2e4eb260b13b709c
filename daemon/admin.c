/*
 * The Admin service (proto/shardd/v1/admin.proto): the daemon's status, its
 * model versions, retraining jobs and the profiler.  Requests to state
 * changes; the work itself is models.c's, jobs.c's and profw.c's.
 *
 * Unary methods run on uv threadpool workers; admin_watch_job() is polled
 * on the loop thread and reads memory only.  rpc.c has checked the caller's
 * credentials before any of these run.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <protobuf-c/protobuf-c.h>

#include "service_int.h"
#include "shardd/log.h"
#include "shardd/v1/admin.pb-c.h"

/* protobuf-c string fields are `char *`; packing only reads them. */
static char *msg_str(const char *s)
{
    return (char *)s;
}

/* A version string ("12") to a store id; "embedded" and junk are 0. */
static int64_t version_id(const char *v)
{
    char *end;
    long long id;

    if (v == NULL || v[0] < '1' || v[0] > '9')
        return 0;
    id = strtoll(v, &end, 10);
    return *end == '\0' && id > 0 ? (int64_t)id : 0;
}

/* The members a served model's predictions come from (1: no ensemble). */
static uint32_t served_members(const struct dmodel *m)
{
    return m->ens != NULL ? (uint32_t)m->ens->k : 1;
}

/* ---------------------------------------------------------------------- */
/* GetStatus                                                               */

int admin_status(struct svc *s, const struct svc_call *call, const uint8_t *req,
                 size_t len, uint8_t **resp, size_t *resp_len,
                 struct sd_diag *d)
{
    Shardd__V1__GetStatusRequest *rq;
    Shardd__V1__GetStatusResponse out = SHARDD__V1__GET_STATUS_RESPONSE__INIT;
    Shardd__V1__DeviceInfo dev = SHARDD__V1__DEVICE_INFO__INIT, *devs[1];
    struct kern_device_info info;
    struct dmodel *m = NULL, *serving = NULL;
    struct sd_diag why;
    uint64_t n = 0, skipped;
    int rv;

    (void)call;
    rq = shardd__v1__get_status_request__unpack(NULL, len, req);
    if (rq == NULL)
        return sd_diag_set(d, SD_EFORMAT,
                           "GetStatusRequest: not a valid message");
    shardd__v1__get_status_request__free_unpacked(rq, NULL);

    out.version = msg_str(SHARDD_VERSION);
    out.uptime_s = (uint64_t)((sd_wall_ms() - s->started_ms) / 1000);
    out.backend = msg_str(s->be != NULL ? s->be->name : "none");
    if (s->be != NULL && s->be->device_info(0, &info) == 0) {
        dev.index = 0;
        dev.name = msg_str(info.name);
        dev.memory_bytes = info.mem_bytes;
        devs[0] = &dev;
        out.devices = devs;
        out.n_devices = 1;
    }
    out.profile = msg_str(s->profile);
    out.active_model_version = msg_str("");
    if (s->profile[0] != '\0' &&
        models_acquire(&s->models, s->profile, &m, &why) == 0)
        out.active_model_version = msg_str(m->version);
    if (models_acquire(&s->models, NULL, &serving, &why) == 0) {
        out.serving_profile = msg_str(serving->net->profile);
        out.serving_model_version = serving->version;
        out.serving_model_members = served_members(serving);
    }
    out.profiler = (Shardd__V1__ProfilerState)profw_state(&s->profw);
    if (s->profile_id != 0) {
        pthread_mutex_lock(&s->store_mu);
        rv = store_sample_count(s->st, s->profile_id, STORE_KIND_COMPUTE, 0, &n,
                                &why);
        if (rv == 0)
            out.compute_samples = n;
        rv = store_sample_count(s->st, s->profile_id, STORE_KIND_COMM, 0, &n,
                                &why);
        if (rv == 0)
            out.comm_samples = n;
        pthread_mutex_unlock(&s->store_mu);
    }
    jobs_counts(&s->jobs, &out.jobs_queued, &out.jobs_running);
    out.memory_rss_bytes = svc__rss_bytes();
    profw_memory(&s->profw, &out.profiler_memory_bytes,
                 &out.profiler_memory_budget_bytes, &skipped);
    rv = wire_pack(&out.base, resp, resp_len, d);
    dmodel_release(serving);
    dmodel_release(m);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* ListModels and ActivateModel                                            */

/* Strings a ModelInfo points at. */
struct model_strs {
    char version[MODELS_VERSION_MAX];
    char base[MODELS_VERSION_MAX];
};

static void fill_model(Shardd__V1__ModelInfo *o,
                       const struct store_model_info *m, struct model_strs *ms)
{
    shardd__v1__model_info__init(o);
    snprintf(ms->version, sizeof(ms->version), "%lld", (long long)m->id);
    o->version = ms->version;
    ms->base[0] = '\0';
    if (m->kind == STORE_KIND_POLICY) {
        o->kind = SHARDD__V1__MODEL_KIND__MODEL_KIND_POLICY;
        if (m->base_model_id != 0)
            snprintf(ms->base, sizeof(ms->base), "%lld",
                     (long long)m->base_model_id);
        else
            snprintf(ms->base, sizeof(ms->base), "embedded");
        o->gate_ratio = m->metrics.gate_ratio;
    } else {
        o->kind = SHARDD__V1__MODEL_KIND__MODEL_KIND_COMPUTE;
        o->members = (uint32_t)net_ensemble_members(m->head, m->head_bytes);
    }
    o->base_model_version = ms->base;
    o->profile = msg_str(m->profile);
    o->created_unix_ms = m->created_ms;
    o->validation_mape = m->metrics.val_mape;
    o->train_samples = (uint64_t)m->metrics.train_samples;
    o->validation_samples = (uint64_t)m->metrics.val_samples;
    o->active = m->active;
}

/* The embedded model as a ModelInfo: active while it serves its profile. */
static void fill_embedded(struct svc *s, Shardd__V1__ModelInfo *o)
{
    struct dmodel *m = NULL;
    struct sd_diag why;

    shardd__v1__model_info__init(o);
    o->version = msg_str("embedded");
    o->kind = SHARDD__V1__MODEL_KIND__MODEL_KIND_COMPUTE;
    o->base_model_version = msg_str("");
    o->profile = msg_str(s->models.embedded->net->profile);
    o->validation_mape = s->models.embedded->metrics.val_mape;
    o->train_samples = (uint64_t)s->models.embedded->metrics.train_samples;
    o->validation_samples = (uint64_t)s->models.embedded->metrics.val_samples;
    o->members = served_members(s->models.embedded);
    if (models_acquire(&s->models, s->models.embedded->net->profile, &m,
                       &why) == 0)
        o->active = m->embedded;
    dmodel_release(m);
}

/* The embedded policy as a ModelInfo: active while the embedded model
 * serves and no stored policy of its profile is active. */
static void fill_embedded_policy(struct svc *s, Shardd__V1__ModelInfo *o)
{
    const struct policy_net *pn = s->models.embedded_policy->pn;
    struct dmodel *m = NULL;
    struct dpolicy *p = NULL;
    struct sd_diag why;

    shardd__v1__model_info__init(o);
    o->version = msg_str("embedded");
    o->kind = SHARDD__V1__MODEL_KIND__MODEL_KIND_POLICY;
    o->base_model_version = msg_str("embedded");
    o->profile = msg_str(pn->profile);
    o->gate_ratio = pn->metrics.gate_ratio;
    o->train_samples = (uint64_t)pn->metrics.train_tasks;
    o->validation_samples = (uint64_t)pn->metrics.gate_tasks;
    if (models_acquire(&s->models, pn->profile, &m, &why) == 0 &&
        models_acquire_policy(&s->models, m, &p, &why) == 0)
        o->active = p->embedded;
    dpolicy_release(p);
    dmodel_release(m);
}

int admin_list_models(struct svc *s, const struct svc_call *call,
                      const uint8_t *req, size_t len, uint8_t **resp,
                      size_t *resp_len, struct sd_diag *d)
{
    Shardd__V1__ListModelsRequest *rq;
    Shardd__V1__ListModelsResponse out = SHARDD__V1__LIST_MODELS_RESPONSE__INIT;
    Shardd__V1__ModelInfo *infos = NULL, **ptrs = NULL;
    struct store_model_info *list = NULL;
    struct store_profile prof;
    struct model_strs *strs = NULL;
    int64_t profile_id = 0;
    size_t n = 0, i, k = 0;
    bool with_embedded, policies;
    int rv = 0;

    (void)call;
    rq = shardd__v1__list_models_request__unpack(NULL, len, req);
    if (rq == NULL)
        return sd_diag_set(d, SD_EFORMAT,
                           "ListModelsRequest: not a valid message");
    /* Policies only when asked for: the list stays what it was. */
    policies = rq->kind == SHARDD__V1__MODEL_KIND__MODEL_KIND_POLICY;
    with_embedded = rq->profile[0] == '\0' ||
                    strcmp(rq->profile, s->models.embedded->net->profile) == 0;
    pthread_mutex_lock(&s->store_mu);
    if (rq->profile[0] != '\0') {
        rv = store_profile_get(s->st, rq->profile, &prof, d);
        if (rv == 0)
            profile_id = prof.id;
    }
    /* All of them: the limit counts the kind asked for (below). */
    if (rv == 0)
        rv = store_model_list(s->st, profile_id, 0, &list, &n, d);
    pthread_mutex_unlock(&s->store_mu);
    if (rv == SD_ENOENT && with_embedded) {
        rv = 0; /* only the embedded model has that profile */
        n = 0;
    } else if (rv == SD_ENOENT) {
        rv = sd_diag_set(d, SD_ENOENT, "profile: no profile \"%.128s\"",
                         rq->profile);
    }
    if (rv != 0)
        goto out_request;

    infos = calloc(n + 1, sizeof(*infos));
    ptrs = calloc(n + 1, sizeof(*ptrs));
    strs = calloc(n + 1, sizeof(*strs));
    if (infos == NULL || ptrs == NULL || strs == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_lists;
    }
    for (i = 0; i < n && (rq->limit == 0 || k < rq->limit); i++) {
        if ((list[i].kind == STORE_KIND_POLICY) != policies)
            continue;
        fill_model(&infos[k], &list[i], &strs[k]);
        ptrs[k] = &infos[k];
        k++;
    }
    /* The embedded model (or policy) is the oldest: last, within the
     * limit. */
    if (with_embedded && !policies && (rq->limit == 0 || k < rq->limit)) {
        fill_embedded(s, &infos[k]);
        ptrs[k] = &infos[k];
        k++;
    }
    if (with_embedded && policies && s->models.embedded_policy != NULL &&
        (rq->limit == 0 || k < rq->limit)) {
        fill_embedded_policy(s, &infos[k]);
        ptrs[k] = &infos[k];
        k++;
    }
    out.models = ptrs;
    out.n_models = k;
    rv = wire_pack(&out.base, resp, resp_len, d);

out_lists:
    free(strs);
    free(ptrs);
    free(infos);
    free(list);
out_request:
    shardd__v1__list_models_request__free_unpacked(rq, NULL);
    return rv;
}

int admin_activate(struct svc *s, const struct svc_call *call,
                   const uint8_t *req, size_t len, uint8_t **resp,
                   size_t *resp_len, struct sd_diag *d)
{
    Shardd__V1__ActivateModelRequest *rq;
    Shardd__V1__ActivateModelResponse out =
        SHARDD__V1__ACTIVATE_MODEL_RESPONSE__INIT;
    Shardd__V1__ModelInfo mi;
    struct store_model_info info;
    struct model_strs strs;
    char previous[MODELS_VERSION_MAX];
    int64_t id;
    int rv;

    (void)call;
    rq = shardd__v1__activate_model_request__unpack(NULL, len, req);
    if (rq == NULL)
        return sd_diag_set(d, SD_EFORMAT,
                           "ActivateModelRequest: not a valid message");
    id = version_id(rq->version);
    if (rq->version[0] == '\0') {
        rv = sd_diag_set(d, SD_EINVAL, "version: required");
    } else if (strcmp(rq->version, "embedded") == 0) {
        pthread_mutex_lock(&s->store_mu);
        rv = models_activate_embedded(&s->models, s->st, previous, d);
        pthread_mutex_unlock(&s->store_mu);
        if (rv != 0)
            goto out_request;
        sd_log(SD_LOG_INFO, "embedded model activated (was %s)",
               previous[0] ? previous : "none");
        fill_embedded(s, &mi);
        out.model = &mi;
        out.previous_version = previous;
        rv = wire_pack(&out.base, resp, resp_len, d);
        goto out_request;
    } else if (id == 0)
        rv = sd_diag_set(d, SD_ENOENT, "version: no model \"%.64s\"",
                         rq->version);
    else {
        pthread_mutex_lock(&s->store_mu);
        rv = models_activate(&s->models, s->st, id, NULL, &info, previous, d);
        pthread_mutex_unlock(&s->store_mu);
    }
    if (rv != 0)
        goto out_request;
    sd_log(SD_LOG_INFO, "%s %s activated for profile %s (was %s)",
           info.kind == STORE_KIND_POLICY ? "policy" : "model", rq->version,
           info.profile, previous[0] ? previous : "none");
    fill_model(&mi, &info, &strs);
    out.model = &mi;
    out.previous_version = previous;
    rv = wire_pack(&out.base, resp, resp_len, d);
out_request:
    shardd__v1__activate_model_request__free_unpacked(rq, NULL);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* Jobs                                                                    */

/* Strings a Job message points at. */
struct job_strs {
    char id[24];
    char version[MODELS_VERSION_MAX];
};

static void fill_job(Shardd__V1__Job *o, const struct store_job *j,
                     struct job_strs *st)
{
    shardd__v1__job__init(o);
    snprintf(st->id, sizeof(st->id), "%lld", (long long)j->id);
    o->id = st->id;
    o->kind = j->kind == STORE_JOB_RETRAIN_POLICY
                  ? SHARDD__V1__JOB_KIND__JOB_KIND_RETRAIN_POLICY
                  : SHARDD__V1__JOB_KIND__JOB_KIND_RETRAIN;
    o->state = (Shardd__V1__JobState)j->state;
    o->progress = j->progress;
    o->message = msg_str(j->message);
    o->profile = msg_str(j->profile);
    o->created_unix_ms = j->created_ms;
    o->started_unix_ms = j->started_ms;
    o->finished_unix_ms = j->finished_ms;
    st->version[0] = '\0';
    if (j->result_model_id != 0)
        snprintf(st->version, sizeof(st->version), "%lld",
                 (long long)j->result_model_id);
    o->result_model_version = st->version;
}

static int pack_job(const struct store_job *j, uint8_t **resp, size_t *resp_len,
                    struct sd_diag *d)
{
    Shardd__V1__Job o;
    struct job_strs st;

    fill_job(&o, j, &st);
    return wire_pack(&o.base, resp, resp_len, d);
}

int admin_retrain(struct svc *s, const struct svc_call *call,
                  const uint8_t *req, size_t len, uint8_t **resp,
                  size_t *resp_len, struct sd_diag *d)
{
    Shardd__V1__RetrainRequest *rq;
    struct store_job j;
    int rv;

    (void)call;
    rq = shardd__v1__retrain_request__unpack(NULL, len, req);
    if (rq == NULL)
        return sd_diag_set(d, SD_EFORMAT,
                           "RetrainRequest: not a valid message");
    if (rq->kind != SHARDD__V1__MODEL_KIND__MODEL_KIND_UNSPECIFIED &&
        rq->kind != SHARDD__V1__MODEL_KIND__MODEL_KIND_COMPUTE &&
        rq->kind != SHARDD__V1__MODEL_KIND__MODEL_KIND_POLICY) {
        rv = sd_diag_set(d, SD_EINVAL, "kind: %d is not a model kind",
                         (int)rq->kind);
        goto out_request;
    }
    pthread_mutex_lock(&s->store_mu);
    rv = jobs_retrain(&s->jobs, s->st, rq->profile,
                      rq->kind == SHARDD__V1__MODEL_KIND__MODEL_KIND_POLICY
                          ? STORE_JOB_RETRAIN_POLICY
                          : STORE_JOB_RETRAIN,
                      rq->force, &j, d);
    pthread_mutex_unlock(&s->store_mu);
    if (rv == 0)
        rv = pack_job(&j, resp, resp_len, d);
out_request:
    shardd__v1__retrain_request__free_unpacked(rq, NULL);
    return rv;
}

/* A job id from a request: "12". */
static int parse_job_id(const char *v, int64_t *id, struct sd_diag *d)
{
    if (v[0] == '\0')
        return sd_diag_set(d, SD_EINVAL, "id: required");
    *id = version_id(v);
    if (*id == 0)
        return sd_diag_set(d, SD_ENOENT, "id: no job \"%.64s\"", v);
    return 0;
}

int admin_get_job(struct svc *s, const struct svc_call *call,
                  const uint8_t *req, size_t len, uint8_t **resp,
                  size_t *resp_len, struct sd_diag *d)
{
    Shardd__V1__GetJobRequest *rq;
    struct store_job j;
    int64_t id;
    int rv;

    (void)call;
    rq = shardd__v1__get_job_request__unpack(NULL, len, req);
    if (rq == NULL)
        return sd_diag_set(d, SD_EFORMAT, "GetJobRequest: not a valid message");
    rv = parse_job_id(rq->id, &id, d);
    if (rv == 0) {
        pthread_mutex_lock(&s->store_mu);
        rv = jobs_get(&s->jobs, s->st, id, &j, d);
        pthread_mutex_unlock(&s->store_mu);
    }
    if (rv == 0)
        rv = pack_job(&j, resp, resp_len, d);
    shardd__v1__get_job_request__free_unpacked(rq, NULL);
    return rv;
}

/* What a WatchJob call last sent. */
struct watch_state {
    int64_t id;
    struct store_job sent;
    bool any;
};

int admin_watch_job(struct svc *s, const uint8_t *req, size_t len, void **state,
                    uint8_t **msg, size_t *msg_len, bool *last,
                    struct sd_diag *d)
{
    struct watch_state *w = *state;
    struct store_job j;
    int rv;

    *msg = NULL;
    *last = false;
    if (w == NULL) {
        Shardd__V1__WatchJobRequest *rq;
        int64_t id = 0;

        rq = shardd__v1__watch_job_request__unpack(NULL, len, req);
        if (rq == NULL)
            return sd_diag_set(d, SD_EFORMAT,
                               "WatchJobRequest: not a valid message");
        rv = parse_job_id(rq->id, &id, d);
        shardd__v1__watch_job_request__free_unpacked(rq, NULL);
        if (rv != 0)
            return rv;
        /* Jobs of earlier runs are all terminal and out of memory: the
         * first poll may read the store (one indexed row). */
        pthread_mutex_lock(&s->store_mu);
        rv = jobs_get(&s->jobs, s->st, id, &j, d);
        pthread_mutex_unlock(&s->store_mu);
        if (rv != 0)
            return rv;
        w = calloc(1, sizeof(*w));
        if (w == NULL)
            return sd_diag_set(d, SD_ENOMEM, "out of memory");
        w->id = id;
        *state = w;
    } else if (!jobs_peek(&s->jobs, w->id, &j)) {
        return sd_diag_set(d, SD_ENOENT, "id: job %lld is gone",
                           (long long)w->id);
    }
    if (w->any && j.state == w->sent.state && j.progress == w->sent.progress &&
        strcmp(j.message, w->sent.message) == 0)
        return 0; /* nothing new */
    rv = pack_job(&j, msg, msg_len, d);
    if (rv != 0)
        return rv;
    w->sent = j;
    w->any = true;
    *last = store_job_state_is_terminal(j.state);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* SetProfiler                                                             */

int admin_set_profiler(struct svc *s, const struct svc_call *call,
                       const uint8_t *req, size_t len, uint8_t **resp,
                       size_t *resp_len, struct sd_diag *d)
{
    Shardd__V1__SetProfilerRequest *rq;
    Shardd__V1__SetProfilerResponse out =
        SHARDD__V1__SET_PROFILER_RESPONSE__INIT;
    enum profw_state now;
    int rv;

    (void)call;
    rq = shardd__v1__set_profiler_request__unpack(NULL, len, req);
    if (rq == NULL)
        return sd_diag_set(d, SD_EFORMAT,
                           "SetProfilerRequest: not a valid message");
    rv = profw_set_paused(&s->profw, rq->paused, &now, d);
    shardd__v1__set_profiler_request__free_unpacked(rq, NULL);
    if (rv != 0)
        return rv;
    out.profiler = (Shardd__V1__ProfilerState)now;
    return wire_pack(&out.base, resp, resp_len, d);
}
