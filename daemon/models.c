/* The cost models being served (models.h). */
#include "models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profiler.h"
#include "shardd/log.h"

/* Uploads m's net to device 0 of be (NULL: none); a failure is logged and
 * leaves m without a resident copy. */
static void make_resident(struct dmodel *m, const struct kern_backend *be)
{
    struct sd_diag d;

    /* A model with a raw output (NeuroShard's, the reference profile) is
     * scored on the host: the device kernels end in softplus or a prior
     * model's head. */
    if (be == NULL || net_io_activation(m->net) == NET_ACT_NONE)
        return;
    if (prof_net_upload(be, 0, m->net, &m->resident, &d) != 0) {
        m->resident = NULL;
        sd_log(SD_LOG_WARN, "model %s: not resident on %s device 0: %s",
               m->version, be->name, d.msg);
        return;
    }
    /* Debug: a start-up failure after this stays one line at info. */
    sd_log(SD_LOG_DEBUG, "model %s of %s resident on %s device 0 (%llu bytes)",
           m->version, m->net->profile, be->name,
           (unsigned long long)kern_net_bytes(m->resident));
}

/*
 * A stored model's own ensemble, or the compiled-in one beside the
 * compiled-in model it was trained with (the cpu default's, the H200's; not
 * the reference set's), each member with a memo a quarter of the model's: a
 * spread evaluates the plan once per member, and without them every member
 * recomputes every table's latents.
 */
static void ens_attach(struct dmodel *m, const struct models *ms)
{
    const struct net_ensemble *e =
        m->embedded ? net_ensemble_compiled(m->net) : m->stored;
    int32_t i;

    if (e == NULL || e->k < 2) /* one member: no spread */
        return;
    m->ens = e;
    for (i = 0; i < e->k; i++)
        m->ens_memo[i] = net_memo_new(e->m[i], ms->memo_entries / 4);
}

/* A served model: a compiled-in net (embedded, `stored` NULL) or a stored
 * model's members (`stored`, taken on success; net NULL). */
static struct dmodel *dmodel_new(const struct models *ms,
                                 const struct cost_net *net,
                                 struct net_ensemble *stored, int64_t id,
                                 const struct store_model_metrics *metrics)
{
    struct dmodel *m = calloc(1, sizeof(*m));

    if (m == NULL)
        return NULL;
    if (stored != NULL)
        net = stored->m[0];
    atomic_init(&m->refs, 1);
    m->net = net;
    m->stored = stored;
    /* Without its memo (no memory, or memo_entries 0) a model still
     * answers: every latent is computed. */
    m->memo = net_memo_new(net, ms->memo_entries);
    m->embedded = stored == NULL;
    ens_attach(m, ms);
    m->id = id;
    if (m->embedded)
        snprintf(m->version, sizeof(m->version), "%s",
                 strcmp(net->profile, NET_REFERENCE_PROFILE) == 0 ? "reference"
                                                                  : "embedded");
    else
        snprintf(m->version, sizeof(m->version), "%lld", (long long)id);
    if (metrics != NULL)
        m->metrics = *metrics;
    make_resident(m, ms->resident_be);
    return m;
}

static struct dmodel *dmodel_ref(struct dmodel *m)
{
    atomic_fetch_add(&m->refs, 1);
    return m;
}

void dmodel_release(struct dmodel *m)
{
    int i;

    if (m == NULL || atomic_fetch_sub(&m->refs, 1) != 1)
        return;
    net_memo_free(m->memo);
    for (i = 0; i < NET_ENSEMBLE_MAX; i++)
        net_memo_free(m->ens_memo[i]);
    kern_net_close(m->resident);
    net_ensemble_free(m->stored);
    free(m);
}

/* The slot of `profile` (mu held), or NULL. */
static struct dmodel_slot *slot_find(struct models *ms, const char *profile)
{
    size_t i;

    for (i = 0; i < ms->nslots; i++)
        if (strcmp(ms->slots[i].profile, profile) == 0)
            return &ms->slots[i];
    return NULL;
}

/*
 * Puts m (its reference passes to the slot) into the slot of its profile,
 * creating the slot, and returns the model it replaced (its reference now
 * the caller's), or NULL.  mu held.  SD_ENOMEM leaves m with the caller.
 */
static int slot_set(struct models *ms, struct dmodel *m, struct dmodel **old)
{
    struct dmodel_slot *sl = slot_find(ms, m->net->profile), *grown;

    *old = NULL;
    if (sl == NULL) {
        grown = realloc(ms->slots, (ms->nslots + 1) * sizeof(*grown));
        if (grown == NULL)
            return SD_ENOMEM;
        ms->slots = grown;
        sl = &ms->slots[ms->nslots++];
        snprintf(sl->profile, sizeof(sl->profile), "%s", m->net->profile);
        sl->m = NULL;
    }
    *old = sl->m;
    sl->m = m;
    /* The server's own profile answers by default once it has a model. */
    if (strcmp(m->net->profile, ms->own_profile) == 0)
        snprintf(ms->default_profile, sizeof(ms->default_profile), "%s",
                 ms->own_profile);
    return 0;
}

/* Removes the slot of `profile` (mu held) and returns the model it held
 * (its reference now the caller's), or NULL. */
static struct dmodel *slot_clear(struct models *ms, const char *profile)
{
    struct dmodel_slot *sl = slot_find(ms, profile);
    struct dmodel *m;

    if (sl == NULL)
        return NULL;
    m = sl->m;
    *sl = ms->slots[--ms->nslots];
    return m;
}

/* slot_set() under the lock, releasing what it replaced. */
static int publish(struct models *ms, struct dmodel *m)
{
    struct dmodel *old;
    int rv;

    pthread_mutex_lock(&ms->mu);
    rv = slot_set(ms, m, &old);
    pthread_mutex_unlock(&ms->mu);
    dmodel_release(old);
    return rv;
}

int models_parse_stored(const struct store_model *sm, struct net_ensemble **out,
                        struct sd_diag *d)
{
    int rv;

    if (sm->info.format_version < 1 ||
        sm->info.format_version > NET_FORMAT_VERSION)
        return sd_diag_set(d, SD_EFORMAT,
                           "model %lld: weights format %d, this shardd "
                           "reads 1 to %d",
                           (long long)sm->info.id, (int)sm->info.format_version,
                           NET_FORMAT_VERSION);
    /* Every member answers for member 0's profile (net_ensemble_parse()). */
    rv = net_ensemble_parse(sm->weights, sm->info.weights_bytes, out, d);
    if (rv != 0)
        return rv;
    if (strcmp((*out)->m[0]->profile, sm->info.profile) != 0) {
        rv = sd_diag_set(d, SD_EFORMAT,
                         "model %lld: its weights are for profile \"%s\", "
                         "the store says \"%s\"",
                         (long long)sm->info.id, (*out)->m[0]->profile,
                         sm->info.profile);
        net_ensemble_free(*out);
        *out = NULL;
    }
    return rv;
}

/* The active stored model of one profile into its slot; a model that does
 * not load is skipped with a warning (SD_ENOMEM alone fails). */
static int load_active(struct models *ms, struct store *st,
                       const struct store_profile *prof, struct sd_diag *d)
{
    struct store_model *sm;
    struct net_ensemble *ens = NULL;
    struct dmodel *m = NULL;
    struct sd_diag why;
    int rv;

    rv = store_model_get_active(st, prof->id, STORE_KIND_COMPUTE, &sm, &why);
    if (rv == SD_ENOENT) /* the profile has no active model */
        return 0;
    if (rv == 0) {
        rv = models_parse_stored(sm, &ens, &why);
        if (rv == 0)
            m = dmodel_new(ms, NULL, ens, sm->info.id, &sm->info.metrics);
        store_model_free(sm);
    }
    if (rv != 0) {
        sd_log(SD_LOG_WARN, "profile %s: active model not loaded: %s",
               prof->name, why.msg);
        return 0;
    }
    if (m == NULL) {
        net_ensemble_free(ens);
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    }
    if (publish(ms, m) != 0) {
        dmodel_release(m);
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    }
    return 0;
}

/*
 * The reference profile (NeuroShard's released models, compiled in) in a
 * slot of its own: it answers requests that name it, never by default (the
 * default profile is the embedded model's or the server's own), and an
 * active stored model of that profile replaces it.  A damaged image is
 * logged and left out.
 */
static int publish_reference(struct models *ms, struct sd_diag *d)
{
    struct sd_diag why;
    const struct cost_net *ref = net_reference(&why);
    struct dmodel *m;

    if (ref == NULL) {
        sd_log(SD_LOG_WARN, "%s", why.msg);
        return 0;
    }
    m = dmodel_new(ms, ref, NULL, 0, NULL);
    if (m == NULL || publish(ms, m) != 0) {
        dmodel_release(m);
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Policies                                                                */

static struct dpolicy *dpolicy_new(const struct policy_net *pn, bool embedded,
                                   int64_t id, int64_t base_id)
{
    struct dpolicy *p = calloc(1, sizeof(*p));

    if (p == NULL)
        return NULL;
    atomic_init(&p->refs, 1);
    p->pn = pn;
    p->embedded = embedded;
    p->id = id;
    p->base_id = base_id;
    if (embedded)
        snprintf(p->version, sizeof(p->version), "embedded");
    else
        snprintf(p->version, sizeof(p->version), "%lld", (long long)id);
    return p;
}

static struct dpolicy *dpolicy_ref(struct dpolicy *p)
{
    atomic_fetch_add(&p->refs, 1);
    return p;
}

void dpolicy_release(struct dpolicy *p)
{
    if (p == NULL || atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    if (!p->embedded)
        free((void *)p->pn);
    free(p);
}

/* The policy slot of `profile` (mu held), or NULL. */
static struct dpolicy_slot *pslot_find(struct models *ms, const char *profile)
{
    size_t i;

    for (i = 0; i < ms->npslots; i++)
        if (strcmp(ms->pslots[i].profile, profile) == 0)
            return &ms->pslots[i];
    return NULL;
}

/* Puts p (its reference passes) into its profile's slot, under the lock,
 * and releases what it replaced (*old gets its version, "" for none). */
static int pslot_publish(struct models *ms, struct dpolicy *p,
                         char old_version[MODELS_VERSION_MAX])
{
    struct dpolicy_slot *sl, *grown;
    struct dpolicy *old = NULL;

    pthread_mutex_lock(&ms->mu);
    sl = pslot_find(ms, p->pn->profile);
    if (sl == NULL) {
        grown = realloc(ms->pslots, (ms->npslots + 1) * sizeof(*grown));
        if (grown == NULL) {
            pthread_mutex_unlock(&ms->mu);
            return SD_ENOMEM;
        }
        ms->pslots = grown;
        sl = &ms->pslots[ms->npslots++];
        snprintf(sl->profile, sizeof(sl->profile), "%s", p->pn->profile);
        sl->p = NULL;
    }
    old = sl->p;
    sl->p = p;
    pthread_mutex_unlock(&ms->mu);
    if (old_version != NULL)
        snprintf(old_version, MODELS_VERSION_MAX, "%s",
                 old != NULL ? old->version : "");
    dpolicy_release(old);
    return 0;
}

int models_parse_stored_policy(const struct store_model *sm,
                               struct policy_net **out, struct sd_diag *d)
{
    int rv;

    if (sm->info.format_version != POLICY_FORMAT_VERSION)
        return sd_diag_set(d, SD_EFORMAT,
                           "policy %lld: format %d, this shardd reads %d",
                           (long long)sm->info.id, (int)sm->info.format_version,
                           POLICY_FORMAT_VERSION);
    rv = policy_parse(sm->weights, sm->info.weights_bytes, out, d);
    if (rv != 0)
        return rv;
    if (strcmp((*out)->profile, sm->info.profile) != 0) {
        rv = sd_diag_set(d, SD_EFORMAT,
                         "policy %lld: it is for profile \"%s\", the store "
                         "says \"%s\"",
                         (long long)sm->info.id, (*out)->profile,
                         sm->info.profile);
        free(*out);
        *out = NULL;
    }
    return rv;
}

/* The active stored policy of one profile into its slot; one that does not
 * load is skipped with a warning (SD_ENOMEM alone fails). */
static int load_active_policy(struct models *ms, struct store *st,
                              const struct store_profile *prof,
                              struct sd_diag *d)
{
    struct store_model *sm;
    struct policy_net *pn = NULL;
    struct dpolicy *p = NULL;
    struct sd_diag why;
    int rv;

    rv = store_model_get_active(st, prof->id, STORE_KIND_POLICY, &sm, &why);
    if (rv == SD_ENOENT)
        return 0;
    if (rv == 0) {
        rv = models_parse_stored_policy(sm, &pn, &why);
        if (rv == 0)
            p = dpolicy_new(pn, false, sm->info.id, sm->info.base_model_id);
        store_model_free(sm);
    }
    if (rv != 0) {
        sd_log(SD_LOG_WARN, "profile %s: active policy not loaded: %s",
               prof->name, why.msg);
        return 0;
    }
    if (p == NULL || pslot_publish(ms, p, NULL) != 0) {
        if (p != NULL)
            dpolicy_release(p);
        else
            free(pn);
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    }
    return 0;
}

/* The policy compiled in for the embedded model (the cpu default's, or an
 * H200's) into its profile (a damaged image is a warning: dreamshard then
 * needs a trained policy). */
static int load_embedded_policy(struct models *ms, struct sd_diag *d)
{
    struct sd_diag why = {{0}};
    const struct policy_net *pn = policy_compiled(ms->embedded->net, &why);

    if (pn == NULL) {
        sd_log(SD_LOG_WARN, "%s; dreamshard needs a trained policy",
               why.msg[0] ? why.msg
                          : "no policy is compiled in for the embedded model");
        return 0;
    }
    ms->embedded_policy = dpolicy_new(pn, true, 0, 0);
    if (ms->embedded_policy == NULL ||
        pslot_publish(ms, dpolicy_ref(ms->embedded_policy), NULL) != 0)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    return 0;
}

int models_acquire_policy(struct models *ms, const struct dmodel *m,
                          struct dpolicy **out, struct sd_diag *d)
{
    const char *profile = m->net->profile;
    uint32_t crc = policy_model_crc(m->net);
    struct dpolicy_slot *sl;
    struct dpolicy *p = NULL;
    char have[160];

    pthread_mutex_lock(&ms->mu);
    sl = pslot_find(ms, profile);
    if (sl != NULL && sl->p->pn->model_crc == crc)
        p = dpolicy_ref(sl->p);
    else if (ms->embedded_policy != NULL &&
             ms->embedded_policy->pn->model_crc == crc &&
             strcmp(ms->embedded_policy->pn->profile, profile) == 0)
        p = dpolicy_ref(ms->embedded_policy);
    if (sl != NULL)
        snprintf(have, sizeof(have),
                 "its policy %s was trained against compute model %s",
                 sl->p->version,
                 sl->p->base_id != 0 ? "of another version" : "\"embedded\"");
    else
        snprintf(have, sizeof(have), "it has no policy");
    pthread_mutex_unlock(&ms->mu);
    if (p != NULL) {
        *out = p;
        return 0;
    }
    return sd_diag_set(d, SD_ESTATE,
                       "no placement policy for compute model %s of profile "
                       "\"%.128s\" (%s): one is trained after each model "
                       "activation (policy_after_activation), or start one "
                       "with shardctl retrain --kind policy",
                       m->version, profile, have);
}

int models_activate_policy(struct models *ms, struct store *st, int64_t id,
                           struct policy_net *pn, struct store_model_info *info,
                           char previous[MODELS_VERSION_MAX], struct sd_diag *d)
{
    struct store_model *sm = NULL;
    struct dpolicy *p;
    int rv;

    rv = store_model_get(st, id, &sm, d);
    if (rv == SD_ENOENT)
        rv = sd_diag_set(d, SD_ENOENT, "version: no model %lld", (long long)id);
    if (rv == 0 && sm->info.kind != STORE_KIND_POLICY)
        rv = sd_diag_set(d, SD_EINVAL, "version: %lld is not a policy",
                         (long long)id);
    if (rv == 0 && pn == NULL)
        rv = models_parse_stored_policy(sm, &pn, d);
    if (rv == 0)
        rv = store_model_activate(st, id, NULL, d);
    if (rv != 0)
        goto fail_pn;
    *info = sm->info;
    info->active = true;
    p = dpolicy_new(pn, false, id, sm->info.base_model_id);
    if (p == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto fail_pn;
    }
    pn = NULL; /* p owns it */
    rv = pslot_publish(ms, p, previous);
    if (rv != 0) {
        dpolicy_release(p);
        rv = sd_diag_set(d, rv, "out of memory");
    }
    store_model_free(sm);
    return rv;

fail_pn:
    free(pn);
    store_model_free(sm);
    return rv;
}

int models_init(struct models *ms, struct store *st, const char *own_profile,
                size_t memo_entries, const struct kern_backend *resident_be,
                struct sd_diag *d)
{
    /* On a GPU shardd has a model for, that model is this server's
     * embedded one (what `activate embedded` returns to); the cpu default
     * still answers for its own profile. */
    const struct cost_net *cpu = net_embedded(d);
    const struct cost_net *hw = net_compiled(own_profile, NULL);
    const struct cost_net *emb = hw != NULL ? hw : cpu;
    struct store_profile *profs = NULL;
    struct dmodel *m;
    size_t np = 0, i;
    int rv;

    if (cpu == NULL)
        return SD_EFORMAT;
    memset(ms, 0, sizeof(*ms));
    pthread_mutex_init(&ms->mu, NULL);
    snprintf(ms->own_profile, sizeof(ms->own_profile), "%s", own_profile);
    ms->memo_entries = memo_entries;
    ms->resident_be = resident_be;
    snprintf(ms->default_profile, sizeof(ms->default_profile), "%s",
             emb->profile);
    ms->embedded = dmodel_new(ms, emb, NULL, 0, NULL);
    if (ms->embedded == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto fail;
    }
    ms->embedded->metrics.val_mape = emb->metrics.val_mape;
    ms->embedded->metrics.test_mape = emb->metrics.test_mape;
    ms->embedded->metrics.train_samples = emb->metrics.train_samples;
    ms->embedded->metrics.val_samples = emb->metrics.val_samples;
    ms->embedded->metrics.test_samples = emb->metrics.test_samples;
    rv = publish(ms, dmodel_ref(ms->embedded));
    if (rv != 0) {
        dmodel_release(ms->embedded);
        rv = sd_diag_set(d, rv, "out of memory");
        goto fail;
    }
    if (hw != NULL) {
        m = dmodel_new(ms, cpu, NULL, 0, NULL);
        if (m == NULL || publish(ms, m) != 0) {
            dmodel_release(m);
            rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
            goto fail;
        }
    }
    rv = publish_reference(ms, d);
    if (rv == 0)
        rv = load_embedded_policy(ms, d);
    if (rv != 0)
        goto fail;
    rv = store_profile_list(st, &profs, &np, d);
    for (i = 0; rv == 0 && i < np; i++)
        rv = load_active(ms, st, &profs[i], d);
    for (i = 0; rv == 0 && i < np; i++)
        rv = load_active_policy(ms, st, &profs[i], d);
    free(profs);
    if (rv == 0)
        return 0;
fail:
    models_destroy(ms);
    return rv;
}

void models_destroy(struct models *ms)
{
    size_t i;

    for (i = 0; i < ms->nslots; i++)
        dmodel_release(ms->slots[i].m);
    free(ms->slots);
    ms->slots = NULL;
    ms->nslots = 0;
    dmodel_release(ms->embedded);
    ms->embedded = NULL;
    for (i = 0; i < ms->npslots; i++)
        dpolicy_release(ms->pslots[i].p);
    free(ms->pslots);
    ms->pslots = NULL;
    ms->npslots = 0;
    dpolicy_release(ms->embedded_policy);
    ms->embedded_policy = NULL;
    pthread_mutex_destroy(&ms->mu);
}

int models_acquire(struct models *ms, const char *profile, struct dmodel **out,
                   struct sd_diag *d)
{
    struct dmodel_slot *sl;
    char have[512], name[STORE_NAME_MAX];
    size_t i, n = 0;

    pthread_mutex_lock(&ms->mu);
    if (profile == NULL || profile[0] == '\0')
        profile = ms->default_profile;
    sl = slot_find(ms, profile);
    if (sl != NULL) {
        *out = dmodel_ref(sl->m);
        pthread_mutex_unlock(&ms->mu);
        return 0;
    }
    snprintf(name, sizeof(name), "%s", profile);
    have[0] = '\0';
    for (i = 0; i < ms->nslots && n < sizeof(have); i++)
        n += (size_t)snprintf(have + n, sizeof(have) - n, "%s\"%s\"",
                              i ? ", " : "", ms->slots[i].profile);
    pthread_mutex_unlock(&ms->mu);
    return sd_diag_set(d, SD_ESTATE,
                       "no active model for profile \"%s\" (this server has "
                       "%s)",
                       name, have);
}

struct dmodel *models_embedded(struct models *ms)
{
    return dmodel_ref(ms->embedded);
}

void models_default_profile(struct models *ms, char out[STORE_NAME_MAX])
{
    pthread_mutex_lock(&ms->mu);
    memcpy(out, ms->default_profile, STORE_NAME_MAX);
    pthread_mutex_unlock(&ms->mu);
}

int models_activate(struct models *ms, struct store *st, int64_t id,
                    struct net_ensemble *ens, struct store_model_info *info,
                    char previous[MODELS_VERSION_MAX], struct sd_diag *d)
{
    struct store_model *sm = NULL;
    struct dmodel *m, *old;
    int64_t prev_id = 0;
    int rv;

    rv = store_model_get(st, id, &sm, d);
    if (rv == SD_ENOENT)
        rv = sd_diag_set(d, SD_ENOENT, "version: no model %lld", (long long)id);
    if (rv == 0 && ens == NULL && sm->info.kind == STORE_KIND_POLICY) {
        store_model_free(sm);
        return models_activate_policy(ms, st, id, NULL, info, previous, d);
    }
    if (rv == 0 && ens == NULL)
        rv = models_parse_stored(sm, &ens, d);
    if (rv == 0)
        rv = store_model_activate(st, id, &prev_id, d);
    if (rv != 0)
        goto fail_net;
    *info = sm->info;
    info->active = true;

    m = dmodel_new(ms, NULL, ens, id, &sm->info.metrics);
    if (m == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto fail_net;
    }
    ens = NULL; /* m owns it */
    pthread_mutex_lock(&ms->mu);
    rv = slot_set(ms, m, &old);
    pthread_mutex_unlock(&ms->mu);
    if (rv != 0) {
        dmodel_release(m);
        rv = sd_diag_set(d, rv, "out of memory");
        goto out_stored;
    }
    /* What the profile answered with before: the store's previous active
     * model, else the model the slot held (the embedded one). */
    if (prev_id != 0 && prev_id != id)
        snprintf(previous, MODELS_VERSION_MAX, "%lld", (long long)prev_id);
    else if (prev_id == 0 && old != NULL)
        snprintf(previous, MODELS_VERSION_MAX, "%s", old->version);
    else
        previous[0] = '\0';
    dmodel_release(old);
    /* Told with the profile's name, not the model's: sm goes first. */
    if (ms->activated != NULL)
        ms->activated(ms->activated_ctx, st, info->profile);
    store_model_free(sm);
    return 0;

fail_net:
    net_ensemble_free(ens);
out_stored:
    store_model_free(sm);
    return rv;
}

/* Deactivates the stored compute model of `profile`; a profile never
 * measured has none. */
static int store_deactivate(struct store *st, const char *profile,
                            struct sd_diag *d)
{
    struct store_profile prof;
    int64_t prev_id = 0;
    int rv;

    rv = store_profile_get(st, profile, &prof, d);
    if (rv == SD_ENOENT)
        return 0;
    if (rv == 0)
        rv = store_model_deactivate(st, prof.id, STORE_KIND_COMPUTE, &prev_id,
                                    d);
    return rv;
}

int models_activate_embedded(struct models *ms, struct store *st,
                             char previous[MODELS_VERSION_MAX],
                             struct sd_diag *d)
{
    const char *emb = ms->embedded->net->profile;
    /* On other hardware the server's own profile answers by default once it
     * has a model: it gives that up too. */
    bool own = ms->own_profile[0] != '\0' && strcmp(ms->own_profile, emb) != 0;
    struct dmodel *old = NULL, *own_old = NULL, *served = NULL;
    struct dmodel_slot *sl;
    int rv;

    /* In the store first, so that a restart serves the same. */
    rv = store_deactivate(st, emb, d);
    if (rv == 0 && own)
        rv = store_deactivate(st, ms->own_profile, d);
    if (rv != 0)
        return rv;
    pthread_mutex_lock(&ms->mu);
    sl = slot_find(ms, ms->default_profile);
    if (sl != NULL)
        served = dmodel_ref(sl->m);
    rv = slot_set(ms, dmodel_ref(ms->embedded), &old);
    if (rv != 0) {
        atomic_fetch_sub(&ms->embedded->refs, 1);
    } else {
        if (own)
            own_old = slot_clear(ms, ms->own_profile);
        snprintf(ms->default_profile, sizeof(ms->default_profile), "%s", emb);
    }
    pthread_mutex_unlock(&ms->mu);
    if (rv == 0)
        snprintf(previous, MODELS_VERSION_MAX, "%s",
                 served != NULL ? served->version : "");
    else
        rv = sd_diag_set(d, rv, "out of memory");
    dmodel_release(served);
    dmodel_release(old);
    dmodel_release(own_old);
    return rv;
}
