/*
 * The fleet from a profiling node's and a planner's side (service.h:
 * svc_fleet_*()): the PushSamplesRequest of this node's new samples, the
 * GetModelRequest of the profile a planner follows, and what their answers
 * change here; and the fleet's lines of /metrics and /api/status.  The
 * transport's sync thread (fleet_sync.c) carries the bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>

#include "service_int.h"
#include "shardd/log.h"
#include "shardd/v1/fleet.pb-c.h"

static char *mstr(const char *s)
{
    return (char *)s;
}

int svc_fleet_role(struct svc *s)
{
    struct conf_snap *cf = svc_conf(s);
    int role = (int)cf->c.fleet_role;

    conf_snap_unref(cf);
    return role;
}

void svc_fleet_failed(struct svc *s, const struct sd_diag *d)
{
    pthread_mutex_lock(&s->fleet.mu);
    s->fleet.errors++;
    snprintf(s->fleet.last_error, sizeof(s->fleet.last_error), "%s", d->msg);
    pthread_mutex_unlock(&s->fleet.mu);
}

static void fleet_ok(struct svc *s)
{
    pthread_mutex_lock(&s->fleet.mu);
    s->fleet.last_ok_ms = sd_wall_ms();
    s->fleet.last_error[0] = '\0';
    pthread_mutex_unlock(&s->fleet.mu);
}

/* ---------------------------------------------------------------------- */
/* A profiling node's push                                                 */

/* The newest samples after `after` of both kinds, merged in id order. */
static int load_after(struct svc *s, int64_t after, struct store_sample **c,
                      size_t *nc, struct store_sample **m, size_t *nm,
                      struct sd_diag *d)
{
    int rv;

    *c = *m = NULL;
    *nc = *nm = 0;
    pthread_mutex_lock(&s->store_mu);
    rv = store_samples_load(s->st, s->profile_id, STORE_KIND_COMPUTE, after,
                            FLEET_PUSH_MAX, c, nc, d);
    if (rv == 0)
        rv = store_samples_load(s->st, s->profile_id, STORE_KIND_COMM, after,
                                FLEET_PUSH_MAX, m, nm, d);
    pthread_mutex_unlock(&s->store_mu);
    return rv;
}

/* One store sample as a FleetSample (pieces in the arena). */
static Shardd__V1__FleetSample *sample_out(struct wire_arena *a,
                                           const struct store_sample *x)
{
    Shardd__V1__FleetSample *o = wire_alloc(a, 1, sizeof(*o));
    size_t k;

    if (o == NULL)
        return NULL;
    shardd__v1__fleet_sample__init(o);
    o->origin_id = x->id;
    o->measured_ms = x->measured_ms;
    o->spread_ms = x->spread_ms;
    o->device = mstr(x->device);
    o->source = mstr(x->source);
    if (x->kind == STORE_KIND_COMPUTE) {
        o->kind = SHARDD__V1__SAMPLE_KIND__SAMPLE_KIND_COMPUTE;
        o->tables = wire_alloc(a, x->ntables, sizeof(*o->tables));
        if (x->ntables > 0 && o->tables == NULL)
            return NULL;
        for (k = 0; k < x->ntables; k++) {
            Shardd__V1__ShardTable *t = wire_alloc(a, 1, sizeof(*t));

            if (t == NULL)
                return NULL;
            shardd__v1__shard_table__init(t);
            t->rows = x->tables[k].rows;
            t->dim = x->tables[k].dim;
            t->dtype = (int32_t)x->tables[k].dtype;
            t->pooling_factor = x->tables[k].pooling_factor;
            t->n_bins = TABLE_NBINS;
            t->bins = (double *)x->tables[k].bins;
            o->tables[k] = t;
        }
        o->n_tables = x->ntables;
        return o;
    }
    o->kind = SHARDD__V1__SAMPLE_KIND__SAMPLE_KIND_COMM;
    o->devices = wire_alloc(a, x->ndevices, sizeof(*o->devices));
    if (x->ndevices > 0 && o->devices == NULL)
        return NULL;
    for (k = 0; k < x->ndevices; k++) {
        Shardd__V1__CommDeviceSample *v = wire_alloc(a, 1, sizeof(*v));

        if (v == NULL)
            return NULL;
        shardd__v1__comm_device_sample__init(v);
        v->dim_sum = x->devices[k].dim_sum;
        v->sleep_ms = x->devices[k].sleep_ms;
        v->fwd_ms = x->devices[k].fwd_ms;
        v->bwd_ms = x->devices[k].bwd_ms;
        o->devices[k] = v;
    }
    o->n_devices = x->ndevices;
    return o;
}

/* This node's name in the fleet: fleet_node, else the host name. */
static void node_name(struct svc *s, char *out, size_t size)
{
    struct conf_snap *cf = svc_conf(s);

    if (cf->c.fleet_node != NULL && cf->c.fleet_node[0] != '\0')
        snprintf(out, size, "%s", cf->c.fleet_node);
    else if (gethostname(out, size) != 0 || out[0] == '\0')
        snprintf(out, size, "shardd");
    out[size - 1] = '\0';
    conf_snap_unref(cf);
}

int svc_fleet_push_next(struct svc *s, int64_t after, uint8_t **req,
                        size_t *len, size_t *n, struct sd_diag *d)
{
    Shardd__V1__PushSamplesRequest rq = SHARDD__V1__PUSH_SAMPLES_REQUEST__INIT;
    Shardd__V1__FleetProfile prof = SHARDD__V1__FLEET_PROFILE__INIT;
    struct wire_arena a = WIRE_ARENA_INIT;
    struct store_sample *c, *m;
    struct store_profile sp;
    char origin[STORE_NAME_MAX];
    size_t nc, nm, i = 0, j = 0, k = 0;
    int rv;

    if (s->profile_id == 0)
        return sd_diag_set(d, SD_ESTATE, "this node measures no profile");
    rv = load_after(s, after, &c, &nc, &m, &nm, d);
    if (rv == 0) {
        pthread_mutex_lock(&s->store_mu);
        rv = store_profile_get(s->st, s->profile, &sp, d);
        pthread_mutex_unlock(&s->store_mu);
    }
    if (rv != 0)
        goto out_samples;
    node_name(s, origin, sizeof(origin));
    prof.name = sp.name;
    prof.backend = sp.backend;
    prof.device_model = sp.device_model;
    prof.batch_size = sp.batch_size;
    rq.origin = origin;
    rq.profile = &prof;
    rq.dtypes_timed = true; /* this store is at schema 5 or later */
    rq.samples = wire_alloc(&a, FLEET_PUSH_MAX, sizeof(*rq.samples));
    if (rq.samples == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_samples;
    }
    /* Merged by id, so that the acknowledged id is a clean cut. */
    while (k < FLEET_PUSH_MAX && (i < nc || j < nm)) {
        const struct store_sample *x =
            j >= nm || (i < nc && c[i].id < m[j].id) ? &c[i++] : &m[j++];

        rq.samples[k] = sample_out(&a, x);
        if (rq.samples[k++] == NULL) {
            rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
            goto out_samples;
        }
    }
    rq.n_samples = k;
    rv = wire_pack(&rq.base, req, len, d);
    if (rv == 0)
        *n = k;
out_samples:
    wire_arena_free(&a);
    store_samples_free(c, nc);
    store_samples_free(m, nm);
    return rv;
}

int svc_fleet_push_done(struct svc *s, const uint8_t *resp, size_t len,
                        int64_t *acked, struct sd_diag *d)
{
    Shardd__V1__PushSamplesResponse *r;

    r = shardd__v1__push_samples_response__unpack(NULL, len, resp);
    if (r == NULL)
        return sd_diag_set(d, SD_EFORMAT,
                           "PushSamplesResponse: not a valid message");
    *acked = r->last_id;
    pthread_mutex_lock(&s->fleet.mu);
    s->fleet.acked = r->last_id;
    s->fleet.pushed += r->stored;
    pthread_mutex_unlock(&s->fleet.mu);
    shardd__v1__push_samples_response__free_unpacked(r, NULL);
    fleet_ok(s);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* A planner's model                                                       */

/* The profile this planner follows: fleet_profile, else its own. */
static void followed(struct svc *s, char out[STORE_NAME_MAX])
{
    struct conf_snap *cf = svc_conf(s);

    snprintf(out, STORE_NAME_MAX, "%s",
             cf->c.fleet_profile != NULL && cf->c.fleet_profile[0] != '\0'
                 ? cf->c.fleet_profile
                 : s->profile);
    conf_snap_unref(cf);
}

int svc_fleet_model_ask(struct svc *s, uint8_t **req, size_t *len,
                        struct sd_diag *d)
{
    Shardd__V1__GetModelRequest rq = SHARDD__V1__GET_MODEL_REQUEST__INIT;
    char profile[STORE_NAME_MAX], known[MODELS_VERSION_MAX];

    followed(s, profile);
    pthread_mutex_lock(&s->fleet.mu);
    snprintf(known, sizeof(known), "%s", s->fleet.remote_version);
    pthread_mutex_unlock(&s->fleet.mu);
    rq.profile = profile;
    rq.known_version = known;
    return wire_pack(&rq.base, req, len, d);
}

/* Whether the active model of the profile already is r's (same blobs):
 * after a restart the planner keeps the copy it stored. */
static bool have_it(struct svc *s, int64_t profile_id,
                    const Shardd__V1__GetModelResponse *r, int64_t *id)
{
    struct store_model *m = NULL;
    struct sd_diag d;
    bool same;

    if (store_model_get_active(s->st, profile_id, STORE_KIND_COMPUTE, &m, &d) !=
        0)
        return false;
    same =
        m->info.weights_bytes == r->weights.len &&
        m->info.norm_bytes == r->norm.len &&
        memcmp(m->weights, r->weights.data, r->weights.len) == 0 &&
        (r->norm.len == 0 || memcmp(m->norm, r->norm.data, r->norm.len) == 0);
    *id = m->info.id;
    store_model_free(m);
    return same;
}

/* Stores r's model here and activates it (store_mu held). */
static int install(struct svc *s, const Shardd__V1__GetModelResponse *r,
                   int64_t *id, struct sd_diag *d)
{
    struct store_profile sp;
    struct store_model m;
    struct store_model_info info;
    char previous[MODELS_VERSION_MAX];
    int64_t profile_id;
    int rv;

    if (r->profile == NULL || r->weights.len == 0)
        return sd_diag_set(d, SD_EFORMAT, "GetModelResponse: no model in it");
    memset(&sp, 0, sizeof(sp));
    snprintf(sp.name, sizeof(sp.name), "%s", r->profile->name);
    snprintf(sp.backend, sizeof(sp.backend), "%s", r->profile->backend);
    snprintf(sp.device_model, sizeof(sp.device_model), "%s",
             r->profile->device_model);
    sp.batch_size = r->profile->batch_size;
    rv = store_profile_get_or_create(s->st, &sp, &profile_id, d);
    if (rv != 0)
        return rv;
    if (!have_it(s, profile_id, r, id)) {
        memset(&m, 0, sizeof(m));
        m.info.profile_id = profile_id;
        m.info.kind = STORE_KIND_COMPUTE;
        m.info.format_version = r->format_version;
        m.info.metrics.val_mape = r->validation_mape;
        m.info.metrics.test_mape = r->test_mape;
        m.info.metrics.train_samples = r->train_samples;
        m.info.metrics.val_samples = r->validation_samples;
        m.info.metrics.test_samples = r->test_samples;
        m.info.weights_bytes = r->weights.len;
        m.info.norm_bytes = r->norm.len;
        m.weights = r->weights.data;
        m.norm = r->norm.len > 0 ? r->norm.data : NULL;
        rv = store_model_put(s->st, &m, id, d);
        if (rv != 0)
            return rv;
    }
    return models_activate(&s->models, s->st, *id, NULL, &info, previous, d);
}

int svc_fleet_model_take(struct svc *s, const uint8_t *resp, size_t len,
                         bool *swapped, struct sd_diag *d)
{
    Shardd__V1__GetModelResponse *r;
    int64_t id = 0;
    int rv = 0;

    *swapped = false;
    r = shardd__v1__get_model_response__unpack(NULL, len, resp);
    if (r == NULL)
        return sd_diag_set(d, SD_EFORMAT,
                           "GetModelResponse: not a valid message");
    if (!r->unchanged) {
        pthread_mutex_lock(&s->store_mu);
        rv = install(s, r, &id, d);
        pthread_mutex_unlock(&s->store_mu);
    }
    if (rv == 0) {
        pthread_mutex_lock(&s->fleet.mu);
        if (!r->unchanged) {
            snprintf(s->fleet.remote_version, sizeof(s->fleet.remote_version),
                     "%s", r->version);
            snprintf(s->fleet.local_version, sizeof(s->fleet.local_version),
                     "%lld", (long long)id);
            s->fleet.swaps++;
            *swapped = true;
        }
        pthread_mutex_unlock(&s->fleet.mu);
        fleet_ok(s);
        if (*swapped)
            sd_log(SD_LOG_INFO,
                   "fleet: the trainer's model %s is active here as %lld",
                   r->version, (long long)id);
    }
    shardd__v1__get_model_response__free_unpacked(r, NULL);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* What operators see                                                      */

static const char *role_name(int role)
{
    static const char *const names[] = {"none", "trainer", "profiler",
                                        "planner"};

    return role >= 0 && role < 4 ? names[role] : "?";
}

void svc__fleet_metrics(struct svc *s, struct mtext *t)
{
    struct fleet f;
    int role = svc_fleet_role(s), r;

    pthread_mutex_lock(&s->fleet.mu);
    f = s->fleet;
    pthread_mutex_unlock(&s->fleet.mu);
    mtext_head(t, "shardd_fleet_role", "gauge",
               "This daemon's part in a fleet (1 for its role).");
    for (r = 0; r < 4; r++)
        mtext_printf(t, "shardd_fleet_role{role=\"%s\"} %d\n", role_name(r),
                     r == role);
    mtext_head(t, "shardd_fleet_samples_received_total", "counter",
               "Trainer: samples stored from other nodes.");
    mtext_printf(t, "shardd_fleet_samples_received_total %llu\n",
                 (unsigned long long)f.received);
    mtext_head(t, "shardd_fleet_samples_duplicate_total", "counter",
               "Trainer: samples pushed again and skipped.");
    mtext_printf(t, "shardd_fleet_samples_duplicate_total %llu\n",
                 (unsigned long long)f.duplicates);
    mtext_head(t, "shardd_fleet_samples_pushed_total", "counter",
               "Profiler: samples the trainer stored from this node.");
    mtext_printf(t, "shardd_fleet_samples_pushed_total %llu\n",
                 (unsigned long long)f.pushed);
    mtext_head(t, "shardd_fleet_acknowledged_sample_id", "gauge",
               "Profiler: the trainer holds this node's samples up to this "
               "id.");
    mtext_printf(t, "shardd_fleet_acknowledged_sample_id %lld\n",
                 (long long)f.acked);
    mtext_head(t, "shardd_fleet_model_swaps_total", "counter",
               "Planner: models fetched from the trainer and swapped in.");
    mtext_printf(t, "shardd_fleet_model_swaps_total %llu\n",
                 (unsigned long long)f.swaps);
    mtext_head(t, "shardd_fleet_errors_total", "counter",
               "Failed exchanges with the trainer.");
    mtext_printf(t, "shardd_fleet_errors_total %llu\n",
                 (unsigned long long)f.errors);
    mtext_head(t, "shardd_fleet_last_success_time_seconds", "gauge",
               "When the last exchange with the trainer succeeded, unix "
               "seconds (0: never).");
    mtext_printf(t, "shardd_fleet_last_success_time_seconds %.3f\n",
                 (double)f.last_ok_ms / 1000.0);
}

int svc__fleet_json(struct svc *s, void *json_root)
{
    struct fleet f;
    char detail[FLEET_ERROR_MAX + 256];
    int role = svc_fleet_role(s);

    if (role == CONF_FLEET_NONE)
        return 0;
    pthread_mutex_lock(&s->fleet.mu);
    f = s->fleet;
    pthread_mutex_unlock(&s->fleet.mu);
    if (role == CONF_FLEET_TRAINER)
        snprintf(detail, sizeof(detail),
                 "%llu samples received (%llu repeated), %llu models served",
                 (unsigned long long)f.received,
                 (unsigned long long)f.duplicates,
                 (unsigned long long)f.models_served);
    else if (role == CONF_FLEET_PROFILER)
        snprintf(detail, sizeof(detail),
                 "%llu samples pushed, acknowledged up to %lld%s%s",
                 (unsigned long long)f.pushed, (long long)f.acked,
                 f.last_error[0] ? "; " : "", f.last_error);
    else
        snprintf(detail, sizeof(detail),
                 "serving the trainer's model %s (here %s), %llu swaps%s%s",
                 f.remote_version[0] ? f.remote_version : "none",
                 f.local_version[0] ? f.local_version : "-",
                 (unsigned long long)f.swaps, f.last_error[0] ? "; " : "",
                 f.last_error);
    return json_object_set_new(
        json_root, "fleet",
        json_pack("{s:s, s:s, s:I, s:I}", "role", role_name(role), "detail",
                  detail, "errors", (json_int_t)f.errors, "last_ok_ms",
                  (json_int_t)f.last_ok_ms));
}
