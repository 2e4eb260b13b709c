/*
 * The cost models being served and the plan cache.
 *
 * Each profile that has a model has a slot holding one reference to its
 * active struct dmodel.  A request takes its own reference under svc.mu
 * (models_acquire) and plans with it unlocked; activation swaps the slot's
 * pointer under svc.mu and drops the slot's reference, so a request in
 * flight finishes on the model it started with and the last release frees
 * the old one.  The cache is keyed by (request hash, model id): a new model
 * never answers from an old model's plans.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

/* ---------------------------------------------------------------------- */
/* Models                                                                  */

static struct dmodel *dmodel_new(const struct cost_net *net, bool embedded,
                                 int64_t id,
                                 const struct store_model_metrics *metrics)
{
    struct dmodel *m = calloc(1, sizeof(*m));

    if (m == NULL)
        return NULL;
    atomic_init(&m->refs, 1);
    m->net = net;
    m->embedded = embedded;
    m->id = id;
    if (embedded)
        snprintf(m->version, sizeof(m->version), "embedded");
    else
        snprintf(m->version, sizeof(m->version), "%lld", (long long)id);
    if (metrics != NULL)
        m->metrics = *metrics;
    return m;
}

void dmodel_release(struct dmodel *m)
{
    if (m == NULL || atomic_fetch_sub(&m->refs, 1) != 1)
        return;
    if (!m->embedded)
        free((void *)m->net);
    free(m);
}

/* The slot of `profile` (mu held), or NULL. */
static struct dmodel_slot *slot_find(struct svc *s, const char *profile)
{
    size_t i;

    for (i = 0; i < s->nslots; i++)
        if (strcmp(s->slots[i].profile, profile) == 0)
            return &s->slots[i];
    return NULL;
}

/*
 * Puts m (its reference passes to the slot) into the slot of its profile,
 * creating the slot, and returns the model it replaced (its reference now
 * the caller's), or NULL.  mu held.  SD_ENOMEM leaves m with the caller.
 */
static int slot_set(struct svc *s, struct dmodel *m, struct dmodel **old)
{
    struct dmodel_slot *sl = slot_find(s, m->net->profile), *grown;

    *old = NULL;
    if (sl == NULL) {
        grown = realloc(s->slots, (s->nslots + 1) * sizeof(*grown));
        if (grown == NULL)
            return SD_ENOMEM;
        s->slots = grown;
        sl = &s->slots[s->nslots++];
        snprintf(sl->profile, sizeof(sl->profile), "%s", m->net->profile);
        sl->m = NULL;
    }
    *old = sl->m;
    sl->m = m;
    /* The server's own profile answers by default once it has a model. */
    if (strcmp(m->net->profile, s->profile) == 0)
        snprintf(s->default_profile, sizeof(s->default_profile), "%s",
                 s->profile);
    return 0;
}

/* Parses a stored model blob.  *out is owned by the caller. */
static int parse_stored(const struct store_model *sm, struct cost_net **out,
                        struct sd_diag *d)
{
    int rv;

    if (sm->info.format_version != NET_FORMAT_VERSION)
        return sd_diag_set(d, SD_EFORMAT,
                           "model %lld: weights format %d, this shardd "
                           "reads %d",
                           (long long)sm->info.id, (int)sm->info.format_version,
                           NET_FORMAT_VERSION);
    rv = net_parse(sm->weights, sm->info.weights_bytes, out, d);
    if (rv != 0)
        return rv;
    if (strcmp((*out)->profile, sm->info.profile) != 0) {
        rv = sd_diag_set(d, SD_EFORMAT,
                         "model %lld: its weights are for profile \"%s\", "
                         "the store says \"%s\"",
                         (long long)sm->info.id, (*out)->profile,
                         sm->info.profile);
        free(*out);
        *out = NULL;
    }
    return rv;
}

int models_load(struct svc *s, struct sd_diag *d)
{
    const struct cost_net *emb = net_embedded(d);
    struct store_profile *profs = NULL;
    struct store_model *sm;
    struct dmodel *m = NULL, *old;
    struct cost_net *net;
    struct sd_diag wd;
    size_t np = 0, i;
    int rv;

    if (emb == NULL)
        return SD_EFORMAT;
    s->embedded = dmodel_new(emb, true, 0, NULL);
    if (s->embedded == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    s->embedded->metrics.val_mape = emb->metrics.val_mape;
    s->embedded->metrics.test_mape = emb->metrics.test_mape;
    s->embedded->metrics.train_samples = emb->metrics.train_samples;
    s->embedded->metrics.val_samples = emb->metrics.val_samples;
    s->embedded->metrics.test_samples = emb->metrics.test_samples;
    atomic_fetch_add(&s->embedded->refs, 1); /* svc keeps one too */
    snprintf(s->default_profile, sizeof(s->default_profile), "%s",
             emb->profile);
    pthread_mutex_lock(&s->mu);
    rv = slot_set(s, s->embedded, &old);
    pthread_mutex_unlock(&s->mu);
    if (rv != 0)
        return sd_diag_set(d, rv, "out of memory");

    rv = store_profile_list(s->st, &profs, &np, d);
    if (rv != 0)
        return rv;
    for (i = 0; i < np; i++) {
        rv = store_model_get_active(s->st, profs[i].id, STORE_KIND_COMPUTE, &sm,
                                    &wd);
        if (rv == SD_ENOENT) { /* the profile has no active model */
            rv = 0;
            continue;
        }
        if (rv == 0) {
            rv = parse_stored(sm, &net, &wd);
            if (rv == 0) {
                m = dmodel_new(net, false, sm->info.id, &sm->info.metrics);
                if (m == NULL)
                    free(net);
            }
            store_model_free(sm);
        }
        if (rv != 0) {
            svc_log(SVC_LOG_WARN,
                    "profile %s: active model not loaded: "
                    "%s\n",
                    profs[i].name, wd.msg);
            rv = 0;
            continue;
        }
        if (m == NULL) {
            rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
            break;
        }
        pthread_mutex_lock(&s->mu);
        rv = slot_set(s, m, &old);
        pthread_mutex_unlock(&s->mu);
        if (rv != 0) {
            dmodel_release(m);
            rv = sd_diag_set(d, rv, "out of memory");
            break;
        }
        dmodel_release(old);
    }
    free(profs);
    return rv;
}

int models_acquire(struct svc *s, const char *profile, struct dmodel **out,
                   struct sd_diag *d)
{
    struct dmodel_slot *sl;
    char have[512];
    size_t i, n = 0;

    pthread_mutex_lock(&s->mu);
    if (profile == NULL || profile[0] == '\0')
        profile = s->default_profile;
    sl = slot_find(s, profile);
    if (sl != NULL) {
        *out = sl->m;
        atomic_fetch_add(&sl->m->refs, 1);
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    have[0] = '\0';
    for (i = 0; i < s->nslots && n < sizeof(have); i++)
        n += (size_t)snprintf(have + n, sizeof(have) - n, "%s\"%s\"",
                              i ? ", " : "", s->slots[i].profile);
    pthread_mutex_unlock(&s->mu);
    return sd_diag_set(d, SD_ESTATE,
                       "no active model for profile \"%s\" (this server has "
                       "%s)",
                       profile, have);
}

int models_activate(struct svc *s, int64_t id, struct cost_net *net,
                    struct store_model_info *info,
                    char previous[SVC_VERSION_MAX], struct sd_diag *d)
{
    struct store_model *sm = NULL;
    struct dmodel *m, *old;
    int64_t prev_id = 0;
    int rv;

    pthread_mutex_lock(&s->store_mu);
    rv = store_model_get(s->st, id, &sm, d);
    if (rv == SD_ENOENT)
        rv = sd_diag_set(d, SD_ENOENT, "version: no model %lld", (long long)id);
    if (rv == 0 && net == NULL)
        rv = parse_stored(sm, &net, d);
    if (rv == 0)
        rv = store_model_activate(s->st, id, &prev_id, d);
    pthread_mutex_unlock(&s->store_mu);
    if (rv != 0)
        goto fail_net;
    *info = sm->info;
    info->active = true;

    m = dmodel_new(net, false, id, &sm->info.metrics);
    if (m == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto fail_net;
    }
    net = NULL; /* m owns it */
    pthread_mutex_lock(&s->mu);
    rv = slot_set(s, m, &old);
    pthread_mutex_unlock(&s->mu);
    if (rv != 0) {
        dmodel_release(m);
        rv = sd_diag_set(d, rv, "out of memory");
        goto out_stored;
    }
    /* What the profile answered with before: the store's previous active
     * model, else the model the slot held (the embedded one). */
    if (prev_id != 0 && prev_id != id)
        snprintf(previous, SVC_VERSION_MAX, "%lld", (long long)prev_id);
    else if (prev_id == 0 && old != NULL)
        snprintf(previous, SVC_VERSION_MAX, "%s", old->version);
    else
        previous[0] = '\0';
    dmodel_release(old);
    store_model_free(sm);
    return 0;

fail_net:
    free(net);
out_stored:
    store_model_free(sm);
    return rv;
}

/* Deactivates the stored compute model of `profile` (store_mu held);
 * a profile never measured has none. */
static int store_deactivate(struct svc *s, const char *profile,
                            struct sd_diag *d)
{
    struct store_profile prof;
    int64_t prev_id = 0;
    int rv;

    rv = store_profile_get(s->st, profile, &prof, d);
    if (rv == SD_ENOENT)
        return 0;
    if (rv == 0)
        rv = store_model_deactivate(s->st, prof.id, STORE_KIND_COMPUTE,
                                    &prev_id, d);
    return rv;
}

/* Removes the slot of `profile` (mu held) and returns the model it held
 * (its reference now the caller's), or NULL. */
static struct dmodel *slot_clear(struct svc *s, const char *profile)
{
    struct dmodel_slot *sl = slot_find(s, profile);
    struct dmodel *m;

    if (sl == NULL)
        return NULL;
    m = sl->m;
    *sl = s->slots[--s->nslots];
    return m;
}

int models_activate_embedded(struct svc *s, char previous[SVC_VERSION_MAX],
                             struct sd_diag *d)
{
    const char *emb = s->embedded->net->profile;
    /* On other hardware the server's own profile answers by default once it
     * has a model: it gives that up too. */
    bool own = s->profile[0] != '\0' && strcmp(s->profile, emb) != 0;
    struct dmodel *old, *own_old = NULL, *served = NULL;
    struct dmodel_slot *sl;
    int rv;

    /* In the store first, so that a restart serves the same. */
    pthread_mutex_lock(&s->store_mu);
    rv = store_deactivate(s, emb, d);
    if (rv == 0 && own)
        rv = store_deactivate(s, s->profile, d);
    pthread_mutex_unlock(&s->store_mu);
    if (rv != 0)
        return rv;
    pthread_mutex_lock(&s->mu);
    sl = slot_find(s, s->default_profile);
    if (sl != NULL) {
        served = sl->m;
        atomic_fetch_add(&served->refs, 1);
    }
    atomic_fetch_add(&s->embedded->refs, 1); /* the slot's */
    rv = slot_set(s, s->embedded, &old);
    if (rv != 0) {
        atomic_fetch_sub(&s->embedded->refs, 1);
    } else {
        if (own)
            own_old = slot_clear(s, s->profile);
        snprintf(s->default_profile, sizeof(s->default_profile), "%s", emb);
    }
    pthread_mutex_unlock(&s->mu);
    if (rv == 0)
        snprintf(previous, SVC_VERSION_MAX, "%s",
                 served != NULL ? served->version : "");
    else
        rv = sd_diag_set(d, rv, "out of memory");
    dmodel_release(served);
    dmodel_release(old);
    dmodel_release(own_old);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* Plan cache                                                              */

static void cache_drop(struct svc *s, size_t i)
{
    s->cache_bytes -= s->cache[i].len;
    free(s->cache[i].resp);
    s->cache[i] = s->cache[--s->ncache];
}

/* Evicts least recently used entries until `entries` and the byte cap
 * hold.  mu held. */
static void cache_evict(struct svc *s, size_t entries, size_t extra_bytes)
{
    while (s->ncache > 0 && (s->ncache > entries ||
                             s->cache_bytes + extra_bytes > SVC_CACHE_BYTES)) {
        size_t i, lru = 0;

        for (i = 1; i < s->ncache; i++)
            if (s->cache[i].used < s->cache[lru].used)
                lru = i;
        cache_drop(s, lru);
    }
}

bool cache_get(struct svc *s, uint64_t key, int64_t model_id, uint8_t **resp,
               size_t *len)
{
    bool hit = false;
    size_t i;

    pthread_mutex_lock(&s->mu);
    for (i = 0; i < s->ncache; i++) {
        struct cache_entry *e = &s->cache[i];

        if (e->key != key || e->model_id != model_id)
            continue;
        *resp = malloc(e->len ? e->len : 1);
        if (*resp != NULL) {
            memcpy(*resp, e->resp, e->len);
            *len = e->len;
            e->used = ++s->cache_clock;
            hit = true;
        }
        break;
    }
    pthread_mutex_unlock(&s->mu);
    return hit;
}

void cache_put(struct svc *s, uint64_t key, int64_t model_id,
               const uint8_t *resp, size_t len)
{
    struct cache_entry *e, *grown;
    uint8_t *copy;
    size_t i, cap;

    pthread_mutex_lock(&s->mu);
    cap = s->cfg.cache_entries;
    if (cap == 0 || len > SVC_CACHE_BYTES / 4)
        goto out_unlock;
    for (i = 0; i < s->ncache; i++)
        if (s->cache[i].key == key && s->cache[i].model_id == model_id)
            goto out_unlock; /* a concurrent twin got there first */
    cache_evict(s, cap - 1, len);
    copy = malloc(len ? len : 1);
    if (copy == NULL)
        goto out_unlock;
    if (s->ncache % 64 == 0) {
        grown = realloc(s->cache, (s->ncache + 64) * sizeof(*grown));
        if (grown == NULL) {
            free(copy);
            goto out_unlock;
        }
        s->cache = grown;
    }
    memcpy(copy, resp, len);
    e = &s->cache[s->ncache++];
    e->key = key;
    e->model_id = model_id;
    e->used = ++s->cache_clock;
    e->resp = copy;
    e->len = len;
    s->cache_bytes += len;
out_unlock:
    pthread_mutex_unlock(&s->mu);
}

void cache_trim(struct svc *s)
{
    pthread_mutex_lock(&s->mu);
    cache_evict(s, s->cfg.cache_entries, 0);
    pthread_mutex_unlock(&s->mu);
}

void models_free(struct svc *s)
{
    size_t i;

    for (i = 0; i < s->nslots; i++)
        dmodel_release(s->slots[i].m);
    free(s->slots);
    s->slots = NULL;
    s->nslots = 0;
    dmodel_release(s->embedded);
    s->embedded = NULL;
    while (s->ncache > 0)
        cache_drop(s, s->ncache - 1);
    free(s->cache);
    s->cache = NULL;
}
