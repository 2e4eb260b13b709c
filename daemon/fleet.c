/*
 * The fleet (docs/fleet.md, proto/shardd/v1/fleet.proto): the trainer's
 * Fleet methods (PushSamples, GetModel) and, for the transport's sync
 * thread (fleet_sync.c), the messages a profiling node pushes and a
 * planner asks with, and what is done with their answers.  Bytes in,
 * bytes out, like every part of the service: the network is the
 * transport's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "service_int.h"
#include "shardd/log.h"
#include "shardd/v1/fleet.pb-c.h"

_Static_assert(FLEET_PUSH_MAX == SVC_FLEET_PUSH_MAX,
               "a node's push: one size in service.h and fleet_state.h");

/* ---------------------------------------------------------------------- */
/* Trainer: PushSamples                                                    */

/* One pushed sample into a store sample of profile_id (tables, when
 * any, in *tables: the caller frees it); with !timed (a node from before
 * store schema 5) its tables' dtypes say fp32, the type it timed. */
static int sample_in(const Shardd__V1__FleetSample *in, int64_t profile_id,
                     bool timed, struct store_sample *out,
                     struct table **tables, struct store_comm_device **devs,
                     size_t i, struct sd_diag *d)
{
    size_t k, b;

    memset(out, 0, sizeof(*out));
    *tables = NULL;
    *devs = NULL;
    out->profile_id = profile_id;
    out->measured_ms = in->measured_ms;
    out->spread_ms = in->spread_ms;
    snprintf(out->device, sizeof(out->device), "%s",
             in->device != NULL ? in->device : "");
    snprintf(out->source, sizeof(out->source), "%s",
             in->source != NULL ? in->source : "");
    if (in->kind == SHARDD__V1__SAMPLE_KIND__SAMPLE_KIND_COMPUTE) {
        out->kind = STORE_KIND_COMPUTE;
        *tables = calloc(in->n_tables ? in->n_tables : 1, sizeof(**tables));
        if (*tables == NULL)
            return sd_diag_set(d, SD_ENOMEM, "out of memory");
        for (k = 0; k < in->n_tables; k++) {
            const Shardd__V1__ShardTable *t = in->tables[k];
            struct table *o = &(*tables)[k];

            if (t->n_bins > TABLE_NBINS)
                return sd_diag_set(d, SD_EINVAL,
                                   "samples[%zu].tables[%zu]: %zu bins, at "
                                   "most %d",
                                   i, k, t->n_bins, TABLE_NBINS);
            snprintf(o->name, sizeof(o->name), "t%zu", k);
            o->rows = t->rows;
            o->dim = t->dim;
            o->dtype = timed ? (enum table_dtype)t->dtype : TABLE_DTYPE_FP32;
            o->pooling_factor = t->pooling_factor;
            for (b = 0; b < t->n_bins; b++)
                o->bins[b] = t->bins[b];
        }
        out->ntables = in->n_tables;
        out->tables = *tables;
        return 0;
    }
    if (in->kind != SHARDD__V1__SAMPLE_KIND__SAMPLE_KIND_COMM)
        return sd_diag_set(d, SD_EINVAL, "samples[%zu].kind: unknown", i);
    out->kind = STORE_KIND_COMM;
    *devs = calloc(in->n_devices ? in->n_devices : 1, sizeof(**devs));
    if (*devs == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    for (k = 0; k < in->n_devices; k++) {
        (*devs)[k].dim_sum = in->devices[k]->dim_sum;
        (*devs)[k].sleep_ms = in->devices[k]->sleep_ms;
        (*devs)[k].fwd_ms = in->devices[k]->fwd_ms;
        (*devs)[k].bwd_ms = in->devices[k]->bwd_ms;
    }
    out->ndevices = in->n_devices;
    out->devices = *devs;
    return 0;
}

/* The request's profile, created in the store when new (store_mu held). */
static int profile_in(struct svc *s, const Shardd__V1__FleetProfile *p,
                      int64_t *id, struct sd_diag *d)
{
    struct store_profile sp;

    if (p == NULL || p->name == NULL || p->name[0] == '\0')
        return sd_diag_set(d, SD_EINVAL, "profile: missing");
    memset(&sp, 0, sizeof(sp));
    snprintf(sp.name, sizeof(sp.name), "%s", p->name);
    snprintf(sp.backend, sizeof(sp.backend), "%s",
             p->backend != NULL ? p->backend : "");
    snprintf(sp.device_model, sizeof(sp.device_model), "%s",
             p->device_model != NULL ? p->device_model : "");
    sp.batch_size = p->batch_size;
    return store_profile_get_or_create(s->st, &sp, id, d);
}

/* Converts and stores the samples of rq (store_mu held). */
static int push_store(struct svc *s, const Shardd__V1__PushSamplesRequest *rq,
                      Shardd__V1__PushSamplesResponse *out, struct sd_diag *d)
{
    size_t n = rq->n_samples, i;
    struct store_sample *smp = calloc(n ? n : 1, sizeof(*smp));
    struct table **tabs = calloc(n ? n : 1, sizeof(*tabs));
    struct store_comm_device **devs = calloc(n ? n : 1, sizeof(*devs));
    int64_t *ids = calloc(n ? n : 1, sizeof(*ids));
    int64_t profile_id = 0, last = 0;
    uint64_t stored = 0;
    int rv = 0;

    if (smp == NULL || tabs == NULL || devs == NULL || ids == NULL)
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
    if (rv == 0)
        rv = profile_in(s, rq->profile, &profile_id, d);
    for (i = 0; rv == 0 && i < n; i++) {
        ids[i] = rq->samples[i]->origin_id;
        rv = sample_in(rq->samples[i], profile_id, rq->dtypes_timed, &smp[i],
                       &tabs[i], &devs[i], i, d);
    }
    if (rv == 0)
        rv = store_sample_add_from(s->st, rq->origin, ids, smp, n, &stored,
                                   &last, d);
    if (rv == 0) {
        out->stored = stored;
        out->duplicates = n - stored;
        out->last_id = last;
    }
    for (i = 0; i < n && tabs != NULL && devs != NULL; i++) {
        free(tabs[i]); /* calloc'ed: NULL where none was made */
        free(devs[i]);
    }
    free(ids);
    free(devs);
    free(tabs);
    free(smp);
    return rv;
}

int fleet_push_samples(struct svc *s, const struct svc_call *call,
                       const uint8_t *req, size_t len, uint8_t **resp,
                       size_t *resp_len, struct sd_diag *d)
{
    Shardd__V1__PushSamplesRequest *rq;
    Shardd__V1__PushSamplesResponse out =
        SHARDD__V1__PUSH_SAMPLES_RESPONSE__INIT;
    int rv;

    (void)call;
    rq = shardd__v1__push_samples_request__unpack(NULL, len, req);
    if (rq == NULL)
        return sd_diag_set(d, SD_EFORMAT,
                           "PushSamplesRequest: not a valid message");
    if (rq->origin == NULL || rq->origin[0] == '\0')
        rv = sd_diag_set(d, SD_EINVAL, "origin: missing");
    else if (rq->n_samples > FLEET_RECV_MAX)
        rv = sd_diag_set(d, SD_ERANGE, "samples: %zu, at most %d per push",
                         rq->n_samples, FLEET_RECV_MAX);
    else {
        pthread_mutex_lock(&s->store_mu);
        rv = push_store(s, rq, &out, d);
        pthread_mutex_unlock(&s->store_mu);
    }
    shardd__v1__push_samples_request__free_unpacked(rq, NULL);
    if (rv != 0)
        return rv;
    pthread_mutex_lock(&s->fleet.mu);
    s->fleet.received += out.stored;
    s->fleet.duplicates += out.duplicates;
    s->fleet.pushes++;
    pthread_mutex_unlock(&s->fleet.mu);
    return wire_pack(&out.base, resp, resp_len, d);
}

/* ---------------------------------------------------------------------- */
/* Trainer: GetModel                                                       */

int fleet_get_model(struct svc *s, const struct svc_call *call,
                    const uint8_t *req, size_t len, uint8_t **resp,
                    size_t *resp_len, struct sd_diag *d)
{
    Shardd__V1__GetModelRequest *rq;
    Shardd__V1__GetModelResponse out = SHARDD__V1__GET_MODEL_RESPONSE__INIT;
    Shardd__V1__FleetProfile prof = SHARDD__V1__FLEET_PROFILE__INIT;
    struct store_profile sp;
    struct store_model *m = NULL;
    char version[MODELS_VERSION_MAX];
    int rv;

    (void)call;
    rq = shardd__v1__get_model_request__unpack(NULL, len, req);
    if (rq == NULL)
        return sd_diag_set(d, SD_EFORMAT,
                           "GetModelRequest: not a valid message");
    pthread_mutex_lock(&s->store_mu);
    rv = store_profile_get(s->st, rq->profile, &sp, d);
    if (rv == 0)
        rv = store_model_get_active(s->st, sp.id, STORE_KIND_COMPUTE, &m, d);
    pthread_mutex_unlock(&s->store_mu);
    if (rv == SD_ENOENT)
        sd_diag_set(d, SD_ESTATE, "profile \"%.128s\": no active model yet",
                    rq->profile);
    if (rv != 0) {
        shardd__v1__get_model_request__free_unpacked(rq, NULL);
        return rv == SD_ENOENT ? SD_ESTATE : rv;
    }
    snprintf(version, sizeof(version), "%lld", (long long)m->info.id);
    out.version = version;
    if (rq->known_version != NULL && strcmp(rq->known_version, version) == 0) {
        out.unchanged = true;
    } else {
        prof.name = sp.name;
        prof.backend = sp.backend;
        prof.device_model = sp.device_model;
        prof.batch_size = sp.batch_size;
        out.profile = &prof;
        out.format_version = m->info.format_version;
        out.validation_mape = m->info.metrics.val_mape;
        out.test_mape = m->info.metrics.test_mape;
        out.train_samples = m->info.metrics.train_samples;
        out.validation_samples = m->info.metrics.val_samples;
        out.test_samples = m->info.metrics.test_samples;
        out.created_unix_ms = m->info.created_ms;
        out.weights.data = (uint8_t *)m->weights;
        out.weights.len = m->info.weights_bytes;
        out.norm.data = (uint8_t *)m->norm;
        out.norm.len = m->info.norm_bytes;
    }
    rv = wire_pack(&out.base, resp, resp_len, d);
    store_model_free(m);
    shardd__v1__get_model_request__free_unpacked(rq, NULL);
    if (rv == 0) {
        pthread_mutex_lock(&s->fleet.mu);
        s->fleet.models_served++;
        pthread_mutex_unlock(&s->fleet.mu);
    }
    return rv;
}
