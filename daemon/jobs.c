/* Retraining jobs (jobs.h); policy retrains are jobs_policy.c's. */
#define _GNU_SOURCE /* syscall(SYS_gettid): per-thread priority */
#include "jobs.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "jobs_int.h"
#include "shardd/log.h"

#define JOBS_SCHEDULE_MS 60000 /* how often the schedule is checked */

/* ---------------------------------------------------------------------- */
/* The in-memory mirror (mu held)                                          */

static struct store_job *ring_find(struct jobs *j, int64_t id)
{
    size_t i;

    for (i = 0; i < j->n; i++)
        if (j->ring[i].id == id)
            return &j->ring[i];
    return NULL;
}

static void ring_put(struct jobs *j, const struct store_job *job)
{
    struct store_job *slot = ring_find(j, job->id);

    if (slot == NULL) {
        slot = &j->ring[j->next];
        j->next = (j->next + 1) % JOBS_KEPT;
        if (j->n < JOBS_KEPT)
            j->n++;
    }
    *slot = *job;
}

bool jobs_peek(struct jobs *j, int64_t id, struct store_job *out)
{
    struct store_job *job;

    pthread_mutex_lock(&j->mu);
    job = ring_find(j, id);
    if (job != NULL)
        *out = *job;
    pthread_mutex_unlock(&j->mu);
    return job != NULL;
}

int jobs_get(struct jobs *j, struct store *st, int64_t id,
             struct store_job *out, struct sd_diag *d)
{
    int rv;

    if (jobs_peek(j, id, out))
        return 0;
    rv = store_job_get(st, id, out, d);
    if (rv == SD_ENOENT)
        return sd_diag_set(d, SD_ENOENT, "id: no job %lld", (long long)id);
    return rv;
}

void jobs_counts(struct jobs *j, uint32_t *queued, uint32_t *running)
{
    size_t i;

    *queued = *running = 0;
    pthread_mutex_lock(&j->mu);
    for (i = 0; i < j->n; i++) {
        if (j->ring[i].state == STORE_JOB_QUEUED)
            (*queued)++;
        else if (j->ring[i].state == STORE_JOB_RUNNING)
            (*running)++;
    }
    pthread_mutex_unlock(&j->mu);
}

/* ---------------------------------------------------------------------- */
/* Submitting                                                              */

/* The profile's compute samples: *total, *fresh of them measured after its
 * newest stored model was made (all when it has none), and when that model
 * was made (*model_ms, 0: none).  Counting by time, not by the model's
 * sample counts, stays right when a model is trained on a window (samples
 * measured while it trained count as old: the next retrain takes them). */
static int new_samples(struct store *st, int64_t profile_id, uint64_t *total,
                       uint64_t *fresh, int64_t *model_ms, struct sd_diag *d)
{
    struct store_model_info *list = NULL;
    size_t n = 0;
    int rv;

    *model_ms = 0;
    rv = store_sample_count(st, profile_id, STORE_KIND_COMPUTE, 0, total, d);
    if (rv == 0)
        rv = store_model_list(st, profile_id, 1, &list, &n, d);
    if (rv == 0 && n > 0)
        *model_ms = list[0].created_ms;
    free(list);
    if (rv == 0 && *model_ms == 0)
        *fresh = *total;
    else if (rv == 0)
        rv = store_sample_count(st, profile_id, STORE_KIND_COMPUTE, *model_ms,
                                fresh, d);
    return rv;
}

/* When a retrain of the profile and kind was last submitted (mu held); 0:
 * never. */
static int64_t *last_submit(struct jobs *jb, int64_t profile_id,
                            enum store_job_kind kind, bool add)
{
    size_t i, oldest = 0;

    for (i = 0; i < JOBS_PROFILES_RATED; i++) {
        if (jb->rated[i].profile_id == profile_id && jb->rated[i].kind == kind)
            return &jb->rated[i].at_ms;
        if (jb->rated[i].at_ms < jb->rated[oldest].at_ms)
            oldest = i;
    }
    if (!add)
        return NULL;
    jb->rated[oldest].profile_id = profile_id;
    jb->rated[oldest].kind = kind;
    jb->rated[oldest].at_ms = 0;
    return &jb->rated[oldest].at_ms;
}

static void note_submitted(struct jobs *jb, int64_t profile_id,
                           enum store_job_kind kind)
{
    *last_submit(jb, profile_id, kind, true) = sd_now_ms();
}

/*
 * At most one new retrain of a profile per retrain_min_interval_s, forced
 * or not: each stores a model version (26 forced retrains stored 26 models
 * in 18 s).  SD_EBUSY with d saying when the next may start.
 */
static int check_rate(struct jobs *jb, const struct store_profile *prof,
                      enum store_job_kind kind, struct sd_diag *d)
{
    int64_t *at, left = 0, every;

    pthread_mutex_lock(&jb->mu);
    every = (int64_t)jb->cf->c.retrain_min_interval_s * 1000;
    at = last_submit(jb, prof->id, kind, false);
    if (at != NULL && *at != 0 && sd_now_ms() - *at < every)
        left = every - (sd_now_ms() - *at);
    pthread_mutex_unlock(&jb->mu);
    if (left <= 0)
        return 0;
    return sd_diag_set(d, SD_EBUSY,
                       "profile \"%.128s\": a %s started %lld s ago; at "
                       "most one every %lld s (retrain_min_interval_s), the "
                       "next in %lld s",
                       prof->name, store_job_kind_name(kind),
                       (long long)((every - left) / 1000),
                       (long long)(every / 1000),
                       (long long)(left + 999) / 1000);
}

/* Creates a queued job of kind for prof, puts it in memory and wakes the
 * thread; *out gets it. */
static int submit(struct jobs *jb, struct store *st,
                  const struct store_profile *prof, enum store_job_kind kind,
                  bool force, const char *message, struct store_job *out,
                  struct sd_diag *d)
{
    struct store_job j;
    int64_t id;
    int rv;

    memset(&j, 0, sizeof(j));
    j.kind = kind;
    j.profile_id = prof->id;
    snprintf(j.message, sizeof(j.message), "%s", message);
    snprintf(j.params, sizeof(j.params), "{\"force\": %s}",
             force ? "true" : "false");
    rv = store_job_create(st, &j, &id, d);
    if (rv == 0)
        rv = store_job_get(st, id, out, d);
    if (rv != 0)
        return rv;
    pthread_mutex_lock(&jb->mu);
    ring_put(jb, out);
    note_submitted(jb, prof->id, kind);
    pthread_cond_signal(&jb->cv);
    pthread_mutex_unlock(&jb->mu);
    sd_log(SD_LOG_INFO, "job %lld: %s %s queued%s", (long long)id,
           store_job_kind_name(kind), prof->name, force ? " (forced)" : "");
    return 0;
}

int jobs_retrain(struct jobs *jb, struct store *st, const char *profile,
                 enum store_job_kind kind, bool force, struct store_job *out,
                 struct sd_diag *d)
{
    struct store_profile prof;
    char msg[64];
    int64_t model_ms;
    uint64_t n = 0, fresh = 0;
    int rv;

    if (profile == NULL || profile[0] == '\0') {
        if (jb->own_profile[0] == '\0')
            return sd_diag_set(d, SD_ESTATE,
                               "profile: this server measures nothing (no "
                               "backend), so it has no profile of its own");
        profile = jb->own_profile;
    }
    rv = store_profile_get(st, profile, &prof, d);
    if (rv == SD_ENOENT && kind == STORE_JOB_RETRAIN_POLICY)
        return sd_diag_set(d, SD_ESTATE,
                           "profile: \"%.128s\" has no stored model to train "
                           "a policy for",
                           profile);
    if (rv == SD_ENOENT)
        return sd_diag_set(d, SD_ESTATE,
                           "profile: no samples of \"%.128s\" are stored",
                           profile);
    if (rv != 0)
        return rv;
    /* A retrain of the profile already queued or running is joined. */
    rv = store_job_find_open(st, kind, prof.id, out, d);
    if (rv != SD_ENOENT)
        return rv;
    rv = check_rate(jb, &prof, kind, d);
    if (rv != 0)
        return rv;
    if (kind == STORE_JOB_RETRAIN_POLICY) {
        rv = jobs__policy_check(jb, &prof, d);
        return rv != 0 ? rv
                       : submit(jb, st, &prof, kind, force, "queued", out, d);
    }
    rv = new_samples(st, prof.id, &n, &fresh, &model_ms, d);
    if (rv != 0)
        return rv;
    if (n < JOBS_MIN_SAMPLES)
        return sd_diag_set(d, SD_ESTATE,
                           "profile \"%.128s\" has %llu samples; training "
                           "needs at least %d",
                           profile, (unsigned long long)n, JOBS_MIN_SAMPLES);
    if (!force && model_ms > 0 && fresh == 0)
        return sd_diag_set(d, SD_ESTATE,
                           "no sample of \"%.128s\" is newer than its newest "
                           "model (%llu samples); set force to retrain anyway",
                           profile, (unsigned long long)n);
    snprintf(msg, sizeof(msg), "queued: %llu samples", (unsigned long long)n);
    return submit(jb, st, &prof, kind, force, msg, out, d);
}

void jobs_after_activation(struct jobs *jb, struct store *st,
                           const char *profile)
{
    struct store_profile prof;
    struct store_job j;
    struct sd_diag d;
    bool on, queued = false;
    size_t i;

    pthread_mutex_lock(&jb->mu);
    on = jb->cf->c.policy_after_activation;
    pthread_mutex_unlock(&jb->mu);
    if (!on || store_profile_get(st, profile, &prof, &d) != 0)
        return;
    /* A queued one will train for the model active when it runs; a
     * running one trains for the model before. */
    pthread_mutex_lock(&jb->mu);
    for (i = 0; i < jb->n; i++)
        if (jb->ring[i].kind == STORE_JOB_RETRAIN_POLICY &&
            jb->ring[i].profile_id == prof.id &&
            jb->ring[i].state == STORE_JOB_QUEUED)
            queued = true;
    pthread_mutex_unlock(&jb->mu);
    if (queued)
        return;
    if (jobs__policy_check(jb, &prof, &d) != 0 ||
        submit(jb, st, &prof, STORE_JOB_RETRAIN_POLICY, false,
               "queued: the compute model changed", &j, &d) != 0)
        sd_log(SD_LOG_WARN, "profile %s: no policy retrain queued: %s", profile,
               d.msg);
}

/* ---------------------------------------------------------------------- */
/* Running                                                                 */

/* The job's state in the in-memory mirror (mu held). */
static void mirror_update(struct jobs *jb, int64_t id,
                          enum store_job_state state, double progress,
                          const char *message, int64_t model)
{
    struct store_job *j = ring_find(jb, id);

    if (j == NULL)
        return;
    if (j->state != state && state == STORE_JOB_RUNNING)
        j->started_ms = sd_wall_ms();
    if (store_job_state_is_terminal(state))
        j->finished_ms = sd_wall_ms();
    j->state = state;
    j->progress = progress;
    snprintf(j->message, sizeof(j->message), "%s", message);
    if (model != 0)
        j->result_model_id = model;
}

void jobs__update(struct jobs__run *rc, enum store_job_state state,
                  double progress, const char *message, int64_t model)
{
    struct store_job *j;
    struct sd_diag d;
    bool changed, ended = store_job_state_is_terminal(state);
    int64_t now = sd_now_ms();

    /* The end goes to the mirror (what GetJob answers) only once the store
     * has it: a Retrain joins the open job the store finds, and one sent
     * after GetJob said the job ended must not join that ended job. */
    pthread_mutex_lock(&rc->jb->mu);
    j = ring_find(rc->jb, rc->id);
    changed = j == NULL || j->state != state;
    if (!ended)
        mirror_update(rc->jb, rc->id, state, progress, message, model);
    pthread_mutex_unlock(&rc->jb->mu);
    if (changed || now - rc->last_store_ms >= 1000) {
        rc->last_store_ms = now;
        if (store_job_update(rc->st, rc->id, state, progress, message, model,
                             &d) != 0)
            sd_log(SD_LOG_WARN, "job %lld: cannot store its state: %s",
                   (long long)rc->id, d.msg);
    }
    if (ended) {
        pthread_mutex_lock(&rc->jb->mu);
        mirror_update(rc->jb, rc->id, state, progress, message, model);
        pthread_mutex_unlock(&rc->jb->mu);
    }
}

static int on_epoch(void *ctx, int32_t epoch, int32_t max_epochs,
                    double train_loss, double val_mape)
{
    struct jobs__run *rc = ctx;
    char msg[160];

    (void)train_loss;
    if (rc->members > 1)
        snprintf(msg, sizeof(msg),
                 "training member %d of %d: epoch %d of at most %d, "
                 "validation MAPE %.1f %%",
                 (int)rc->member + 1, (int)rc->members, (int)epoch,
                 (int)max_epochs, 100 * val_mape);
    else
        snprintf(msg, sizeof(msg),
                 "training: epoch %d of at most %d, "
                 "validation MAPE %.1f %%",
                 (int)epoch, (int)max_epochs, 100 * val_mape);
    /* Training is most of the job, each member an equal share; early
     * stopping may end one sooner. */
    jobs__update(rc, STORE_JOB_RUNNING,
                 0.05 + 0.9 * (rc->member + (double)epoch / max_epochs) /
                            (rc->members > 0 ? rc->members : 1),
                 msg, 0);
    return atomic_load(&rc->jb->cancel);
}

/*
 * The gate's samples, held out of training: their family groups
 * (family_label_group()) beside them.
 */
struct gate {
    struct train_sample *s;
    int *group;
    size_t n;
};

/*
 * The gate's verdict on a model: its MAPE over all the held-out samples,
 * and over each family with JOBS_GATE_FAMILY_MIN of them or more (fam[],
 * nfam), the worst of those (worst, worst_group; -1 when fewer than two
 * families qualify, and then the gate is the pooled MAPE, as before
 * families).
 */
struct verdict {
    double mape;
    double worst;
    int worst_group;
    struct store_family_metrics fam[FAMILY_OTHER + 1];
    size_t nfam;
};

/* Errors of m on the gate samples of one group (all when group < 0). */
static int group_errors(const struct cost_net *m, const struct gate *g,
                        int group, struct net_errors *e)
{
    double *pred, *meas;
    size_t i, n = 0;
    int rv;

    pred = malloc(2 * (g->n ? g->n : 1) * sizeof(*pred));
    if (pred == NULL)
        return SD_ENOMEM;
    meas = pred + (g->n ? g->n : 1);
    for (i = 0; i < g->n; i++) {
        if (group >= 0 && g->group[i] != group)
            continue;
        pred[n] = net_tables_ms(m, g->s[i].tables, g->s[i].ntables);
        meas[n++] = g->s[i].ms;
    }
    rv = n > 0 ? net_errors(pred, meas, n, e) : SD_EINVAL;
    free(pred);
    return rv;
}

static int judge(const struct cost_net *m, const struct gate *g,
                 struct verdict *v)
{
    struct net_errors e;
    size_t i, count[FAMILY_OTHER + 1] = {0};
    int grp, rv;

    memset(v, 0, sizeof(*v));
    v->worst_group = -1;
    v->mape = net_mape(m, g->s, g->n);
    for (i = 0; i < g->n; i++)
        count[g->group[i]]++;
    for (grp = 0; grp <= FAMILY_OTHER; grp++) {
        if (count[grp] < JOBS_GATE_FAMILY_MIN)
            continue;
        rv = group_errors(m, g, grp, &e);
        if (rv != 0)
            return rv;
        snprintf(v->fam[v->nfam].family, sizeof(v->fam[v->nfam].family), "%s",
                 family_group_name(grp));
        v->fam[v->nfam].samples = (int64_t)e.n;
        v->fam[v->nfam].mape = e.mape;
        v->fam[v->nfam].signed_median = e.signed_median;
        if (v->worst_group < 0 || e.mape > v->worst) {
            v->worst = e.mape;
            v->worst_group = grp;
        }
        v->nfam++;
    }
    if (v->nfam < 2)
        v->worst_group = -1;
    return 0;
}

/* The figure the gate compares: the worst family's MAPE where the samples
 * have families enough, else the pooled one. */
static double gate_figure(const struct verdict *v)
{
    return v->worst_group >= 0 ? v->worst : v->mape;
}

/*
 * Stores model m as a new inactive version of the profile and sets *id.
 * Its validation figures are the gate's (samples it never saw, not even
 * for early stopping), which is what ListModels reports, with the gate's
 * figures per family.
 */
static int store_new_model(struct store *st, int64_t profile_id,
                           const struct net_ensemble *e,
                           const struct verdict *v, size_t ngate, int64_t *id,
                           struct sd_diag *d)
{
    const struct cost_net *m = e->m[0];
    struct store_model sm;
    void *img = NULL;
    size_t len;
    int rv;

    /* One member: a model file, as before ensembles (a fleet's older
     * planners read it; net_ensemble_serialize()). */
    if (net_ensemble_serialize(e, &img, &len) != 0)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    memset(&sm, 0, sizeof(sm));
    sm.info.profile_id = profile_id;
    sm.info.kind = STORE_KIND_COMPUTE;
    sm.info.format_version = net_format_version(m);
    sm.info.metrics.val_mape = v->mape;
    sm.info.metrics.test_mape = m->metrics.test_mape;
    sm.info.metrics.train_samples =
        m->metrics.train_samples + m->metrics.val_samples;
    sm.info.metrics.val_samples = (int64_t)ngate;
    sm.info.metrics.test_samples = m->metrics.test_samples;
    sm.info.metrics.nfamilies = v->nfam;
    memcpy(sm.info.metrics.families, v->fam, v->nfam * sizeof(v->fam[0]));
    sm.info.weights_bytes = len;
    sm.weights = img;
    rv = store_model_put(st, &sm, id, d);
    free(img);
    return rv;
}

/* Model versions of the profile past models_keep go (never the active
 * one; best effort: a failure only leaves more versions). */
void jobs__prune(struct jobs *jb, struct store *st,
                 const struct store_profile *prof)
{
    struct sd_diag d;
    uint64_t n = 0;
    uint32_t keep;

    pthread_mutex_lock(&jb->mu);
    keep = jb->cf->c.models_keep;
    pthread_mutex_unlock(&jb->mu);
    if (store_model_prune(st, prof->id, keep, &n, &d) != 0)
        sd_log(SD_LOG_WARN, "profile %s: old models not pruned: %s", prof->name,
               d.msg);
    else if (n > 0)
        sd_log(SD_LOG_INFO,
               "profile %s: %llu model version(s) past the newest %u pruned",
               prof->name, (unsigned long long)n, (unsigned)keep);
}

/*
 * Gated by family, "worst family seq 9.2 % (all 7.1 %)"; else the pooled
 * figure, "MAPE 7.1 %" for the new model (named) and "7.1 %" for the
 * active one: the messages of the gate before families, which clients
 * parse ("held-out MAPE 7.1 % (model 3 had 7.4 %)").
 */
static void describe(const struct verdict *v, bool named, char *buf, size_t cap)
{
    if (v->worst_group >= 0)
        snprintf(buf, cap, "worst family %s %.1f %% (all %.1f %%)",
                 family_group_name(v->worst_group), 100 * v->worst,
                 100 * v->mape);
    else
        snprintf(buf, cap, "%s%.1f %%", named ? "MAPE " : "", 100 * v->mape);
}

/*
 * The gate: the new model (the ensemble's member 0, what plans are made
 * with) against the active one on the same held-out samples, family by
 * family where they have families enough (judge()).  Activates e unless it
 * is worse and not forced; returns the job's end and fills msg.  Takes e
 * (models_activate() or net_ensemble_free()).
 */
static enum store_job_state
gate_and_activate(struct jobs__run *rc, const struct store_profile *prof,
                  struct net_ensemble *e, const struct gate *g, bool force,
                  char *msg, size_t cap, int64_t *model)
{
    struct jobs *jb = rc->jb;
    struct store_model_info info;
    struct dmodel *active = NULL;
    struct verdict vn, vo;
    struct sd_diag d;
    char previous[MODELS_VERSION_MAX], dn[96], dold[96];
    enum store_job_state end = STORE_JOB_FAILED;
    bool worse = false;
    int rv;

    if (judge(e->m[0], g, &vn) != 0) {
        snprintf(msg, cap, "failed: out of memory");
        goto out;
    }
    describe(&vn, true, dn, sizeof(dn));
    rv = store_new_model(rc->st, prof->id, e, &vn, g->n, model, &d);
    if (rv != 0) {
        snprintf(msg, cap, "failed: storing the model: %.300s", d.msg);
        goto out;
    }
    jobs__prune(jb, rc->st, prof);
    if (models_acquire(jb->models, prof->name, &active, &d) == 0) {
        if (judge(active->net, g, &vo) != 0) {
            snprintf(msg, cap, "failed: out of memory");
            goto out;
        }
        /* Both judged the same way: families enough for one are for the
         * other (the same samples). */
        describe(&vo, false, dold, sizeof(dold));
        worse = gate_figure(&vn) > gate_figure(&vo);
    }
    end = STORE_JOB_SUCCEEDED;
    if (active != NULL && !force && worse) {
        snprintf(msg, cap,
                 "model %lld not activated: held-out %s is worse than the "
                 "active model %s's %s",
                 (long long)*model, dn, active->version, dold);
        goto out;
    }
    jobs__record_model(rc, *model);
    rv = models_activate(jb->models, rc->st, *model, e, &info, previous, &d);
    e = NULL; /* models_activate owns it now, success or not */
    if (rv != 0) {
        snprintf(msg, cap, "failed: activating model %lld: %.300s",
                 (long long)*model, d.msg);
        end = STORE_JOB_FAILED;
    } else if (active != NULL) {
        snprintf(msg, cap,
                 "model %lld activated: held-out %s (model %s had %s)%s",
                 (long long)*model, dn, active->version, dold,
                 force && worse ? ", forced" : "");
    } else {
        snprintf(msg, cap, "model %lld activated: held-out %s",
                 (long long)*model, dn);
    }
out:
    dmodel_release(active);
    net_ensemble_free(e);
    return end;
}

/* The inputs of the model serving `profile`, or of the embedded model
 * where none does: a retrain keeps them, whatever they are (derived inputs,
 * format 3, or NeuroShard's 20 alone). */
static struct net_extras serving_extras(struct jobs *jb, const char *profile)
{
    struct net_extras x = {0, {0}};
    const struct cost_net *emb;
    struct dmodel *active = NULL;
    struct sd_diag d;

    if (models_acquire(jb->models, profile, &active, &d) == 0) {
        x = active->net->x;
        dmodel_release(active);
    } else if ((emb = net_embedded(NULL)) != NULL) {
        x = emb->x;
    }
    return x;
}

_Static_assert(NET_ENSEMBLE_MAX == 16,
               "retrain_ensemble's range (config.h) is 1 to NET_ENSEMBLE_MAX");

/* The retrain itself; returns the terminal state and fills msg / *model. */
static enum store_job_state retrain(struct jobs__run *rc, const char *profile,
                                    bool force, char *msg, size_t cap,
                                    int64_t *model)
{
    struct jobs *jb = rc->jb;
    struct store_profile prof;
    struct store_sample *smp = NULL;
    struct train_sample *fit = NULL;
    struct gate g = {NULL, NULL, 0};
    struct train_params tp;
    struct net_ensemble *e = NULL;
    struct net_extras extras;
    struct sd_diag d;
    size_t n = 0, i, nfit = 0, window;
    enum store_job_state end = STORE_JOB_FAILED;
    int32_t k;
    int rv;

    /* The newest samples only: a machine drifts, and a model of what it
     * was is worse than one of what it is (docs/models.md). */
    pthread_mutex_lock(&jb->mu);
    window = (size_t)jb->cf->c.retrain_window_samples;
    rc->members = (int32_t)jb->cf->c.retrain_ensemble;
    pthread_mutex_unlock(&jb->mu);
    if (window > 0 && window < JOBS_MIN_SAMPLES)
        window = JOBS_MIN_SAMPLES;
    rv = store_profile_get(rc->st, profile, &prof, &d);
    if (rv == 0)
        rv = store_samples_load_newest(rc->st, prof.id, STORE_KIND_COMPUTE,
                                       window, &smp, &n, &d);
    if (rv != 0) {
        snprintf(msg, cap, "failed: loading samples: %.300s", d.msg);
        return STORE_JOB_FAILED;
    }
    fit = calloc(n + 1, sizeof(*fit));
    g.s = calloc(n / JOBS_GATE_EVERY + 1, sizeof(*g.s));
    g.group = calloc(n / JOBS_GATE_EVERY + 1, sizeof(*g.group));
    e = calloc(1, sizeof(*e));
    if (fit == NULL || g.s == NULL || g.group == NULL || e == NULL) {
        snprintf(msg, cap, "failed: out of memory");
        goto out_samples;
    }
    for (i = 0; i < n; i++) {
        struct train_sample t = {smp[i].tables, smp[i].ntables,
                                 smp[i].measured_ms};

        if (i % JOBS_GATE_EVERY == JOBS_GATE_EVERY - 1) {
            g.group[g.n] = family_label_group(smp[i].family);
            g.s[g.n++] = t;
        } else {
            fit[nfit++] = t;
        }
    }
    snprintf(msg, cap, "training on the %s%zu samples (%zu held out)",
             window > 0 && n == window ? "newest " : "", nfit + g.n, g.n);
    jobs__update(rc, STORE_JOB_RUNNING, 0.05, msg, 0);

    /* Member 0 is the plain model of the seed, the others bootstraps of
     * its training split (train_params.member), as `shardctl train
     * --ensemble`: the spread of every prediction, and quantile plans. */
    extras = serving_extras(jb, prof.name);
    for (k = 0; k < rc->members; k++) {
        train_params_default(&tp);
        tp.progress = on_epoch;
        tp.ctx = rc;
        tp.extras = extras;
        tp.member = (uint32_t)k;
        rc->member = k;
        rv =
            net_train(&tp, fit, nfit, prof.name, prof.batch_size, &e->m[k], &d);
        if (rv != 0) {
            snprintf(msg, cap, "failed: training member %d of %d: %.300s",
                     (int)k + 1, (int)rc->members, d.msg);
            goto out_samples;
        }
        e->k = k + 1;
        if (atomic_load(&jb->cancel)) {
            snprintf(msg, cap, "cancelled: the daemon is stopping");
            end = STORE_JOB_CANCELLED;
            goto out_samples;
        }
    }
    end = gate_and_activate(rc, &prof, e, &g, force, msg, cap, model);
    e = NULL; /* taken */

out_samples:
    net_ensemble_free(e);
    free(g.group);
    free(g.s);
    free(fit);
    store_samples_free(smp, n);
    return end;
}

static void run_job(struct jobs *jb, struct store *st, struct store_job *j)
{
    struct jobs__run rc = {jb, st, j->id, 0, 0, 0};
    char msg[STORE_MESSAGE_MAX];
    enum store_job_state end;
    bool force = strstr(j->params, "true") != NULL;
    int64_t model = 0;

    sd_log(SD_LOG_INFO, "job %lld: %s %s", (long long)j->id,
           store_job_kind_name(j->kind), j->profile);
    if (j->kind == STORE_JOB_RETRAIN_POLICY) {
        jobs__update(&rc, STORE_JOB_RUNNING, 0, "making the tasks", 0);
        end = jobs__retrain_policy(&rc, j->profile, force, msg, sizeof(msg),
                                   &model);
    } else {
        jobs__update(&rc, STORE_JOB_RUNNING, 0, "loading samples", 0);
        end = retrain(&rc, j->profile, force, msg, sizeof(msg), &model);
    }
    jobs__update(&rc, end, end == STORE_JOB_SUCCEEDED ? 1.0 : j->progress, msg,
                 model);
    sd_log(SD_LOG_INFO, "job %lld: %s: %s", (long long)j->id,
           store_job_state_name(end), msg);
}

void jobs__record_model(struct jobs__run *rc, int64_t model)
{
    struct store_job *j;
    struct sd_diag d;
    double progress = 0;

    pthread_mutex_lock(&rc->jb->mu);
    j = ring_find(rc->jb, rc->id);
    if (j != NULL)
        progress = j->progress;
    pthread_mutex_unlock(&rc->jb->mu);
    if (store_job_update(rc->st, rc->id, STORE_JOB_RUNNING, progress, NULL,
                         model, &d) != 0)
        sd_log(SD_LOG_WARN, "job %lld: cannot record model %lld: %s",
               (long long)rc->id, (long long)model, d.msg);
}

/*
 * A rotating backup of the store (store_backup()) every backup_every_hours,
 * the first at the thread's start: a damaged store has a copy at most that
 * old to be restored from (docs/daemon.md).
 */
static void backup_if_due(struct jobs *jb, struct store *st)
{
    char written[JOBS_PATH_MAX + 64];
    struct sd_diag d;
    uint32_t hours, keep;
    char *dir = NULL;
    int64_t now = sd_wall_ms();

    pthread_mutex_lock(&jb->mu);
    hours = jb->cf->c.backup_every_hours;
    keep = jb->cf->c.backup_keep;
    if (jb->cf->c.backup_dir != NULL)
        dir = strdup(jb->cf->c.backup_dir);
    pthread_mutex_unlock(&jb->mu);
    if (hours == 0 || (jb->last_backup_ms != 0 &&
                       now - jb->last_backup_ms < (int64_t)hours * 3600 * 1000))
        goto out_dir;
    jb->last_backup_ms = now;
    if (store_backup(st, dir, keep, written, sizeof(written), &d) != 0)
        sd_log(SD_LOG_WARN, "store backup failed: %s", d.msg);
    else
        sd_log(SD_LOG_INFO, "store backed up to %s (the newest %u kept)",
               written, (unsigned)keep);
out_dir:
    free(dir);
}

/*
 * Keeps the plan audit bounded: records older than JOBS_AUDIT_KEEP_MS go, and
 * past JOBS_AUDIT_KEEP_ROWS the oldest go (a busy daemon plans thousands of
 * small requests a second).
 */
static void maintain_store(struct jobs *jb, struct store *st)
{
    struct sd_diag d;
    uint64_t old = 0, over = 0;

    backup_if_due(jb, st);
    if (store_plan_audit_prune(st, sd_wall_ms() - JOBS_AUDIT_KEEP_MS, &old,
                               &d) != 0 ||
        store_plan_audit_trim(st, JOBS_AUDIT_KEEP_ROWS, &over, &d) != 0)
        sd_log(SD_LOG_WARN, "pruning the plan audit: %s", d.msg);
    else if (old + over > 0)
        sd_log(SD_LOG_INFO,
               "plan audit: %llu records older than %lld days and %llu "
               "past the newest %d pruned",
               (unsigned long long)old, JOBS_AUDIT_KEEP_MS / 86400000LL,
               (unsigned long long)over, JOBS_AUDIT_KEEP_ROWS);
}

/* Queues a retrain when the schedule says so. */
static void check_schedule(struct jobs *jb, struct store *st)
{
    struct store_job j;
    struct sd_diag d;
    uint64_t every, n = 0, fresh = 0;
    double hours;
    int64_t model_ms;
    bool due = false;

    pthread_mutex_lock(&jb->mu);
    every = jb->cf->c.retrain_every_samples;
    hours = jb->cf->c.retrain_every_hours;
    pthread_mutex_unlock(&jb->mu);
    if (jb->own_profile_id == 0 || (every == 0 && hours <= 0))
        return;
    if (new_samples(st, jb->own_profile_id, &n, &fresh, &model_ms, &d) != 0)
        return;
    if (every > 0 && fresh >= every)
        due = true;
    if (hours > 0 && fresh > 0 && model_ms > 0 &&
        sd_wall_ms() - model_ms >= (int64_t)(hours * 3600e3))
        due = true;
    if (due && jobs_retrain(jb, st, jb->own_profile, STORE_JOB_RETRAIN, false,
                            &j, &d) != 0)
        sd_log(SD_LOG_WARN, "scheduled retrain not started: %s", d.msg);
}

static void *job_main(void *arg)
{
    struct jobs *jb = arg;
    struct store *st = NULL;
    struct store_job j;
    struct timespec until;
    struct sd_diag d;
    int64_t next_check = sd_now_ms() + JOBS_SCHEDULE_MS;
    size_t i;
    int nice;

    /* Retrains are background work beside latency-bound plans: the lowest
     * priority by default (background_nice 19), as the profiler's (per
     * thread on Linux).  50-table split plans at 16 clients during a
     * retrain of 5 members: 11 % fewer plans a second, against 32 % at
     * nice 0 and 26 % at 10; the retrain got 15 % of a core while they ran
     * (docs/daemon.md). */
    pthread_mutex_lock(&jb->mu);
    nice = (int)jb->cf->c.background_nice;
    pthread_mutex_unlock(&jb->mu);
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice);
    if (store_open(jb->db_path, 0, &st, &d) != 0) {
        sd_log(SD_LOG_ERROR,
               "the job thread cannot open the store: %s; no retraining",
               d.msg);
        return NULL;
    }
    maintain_store(jb, st);
    pthread_mutex_lock(&jb->mu);
    while (!jb->stopping) {
        size_t best = SIZE_MAX;

        /* Oldest queued first: ids grow with submission. */
        for (i = 0; i < jb->n; i++)
            if (jb->ring[i].state == STORE_JOB_QUEUED &&
                (best == SIZE_MAX || jb->ring[i].id < jb->ring[best].id))
                best = i;
        if (best != SIZE_MAX) {
            j = jb->ring[best];
            pthread_mutex_unlock(&jb->mu);
            run_job(jb, st, &j);
            pthread_mutex_lock(&jb->mu);
            continue;
        }
        if (sd_now_ms() >= next_check) {
            pthread_mutex_unlock(&jb->mu);
            maintain_store(jb, st);
            check_schedule(jb, st);
            next_check = sd_now_ms() + JOBS_SCHEDULE_MS;
            pthread_mutex_lock(&jb->mu);
            continue;
        }
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&jb->cv, &jb->mu, &until);
    }
    /* Queued jobs never ran: cancelled, in memory and in the store. */
    for (i = 0; i < jb->n; i++)
        if (jb->ring[i].state == STORE_JOB_QUEUED) {
            jb->ring[i].state = STORE_JOB_CANCELLED;
            store_job_update(st, jb->ring[i].id, STORE_JOB_CANCELLED, 0,
                             "cancelled: the daemon stopped", 0, &d);
        }
    pthread_mutex_unlock(&jb->mu);
    store_close(st);
    return NULL;
}

void jobs_init(struct jobs *j, const char *db_path, const char *own_profile,
               int64_t own_profile_id, struct models *models,
               struct conf_snap *cf)
{
    memset(j, 0, sizeof(*j));
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    atomic_init(&j->cancel, false);
    j->cf = conf_snap_ref(cf);
    snprintf(j->db_path, sizeof(j->db_path), "%s", db_path);
    snprintf(j->own_profile, sizeof(j->own_profile), "%s", own_profile);
    j->own_profile_id = own_profile_id;
    j->models = models;
}

int jobs_start(struct jobs *j, struct sd_diag *d)
{
    if (pthread_create(&j->thread, NULL, job_main, j) != 0)
        return sd_diag_set(d, SD_ENOMEM, "cannot start the job thread");
    j->started = true;
    return 0;
}

void jobs_stop(struct jobs *j)
{
    if (!j->started)
        return;
    pthread_mutex_lock(&j->mu);
    j->stopping = true;
    atomic_store(&j->cancel, true);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    pthread_join(j->thread, NULL);
    j->started = false;
}

void jobs_destroy(struct jobs *j)
{
    jobs_stop(j);
    conf_snap_unref(j->cf);
    j->cf = NULL;
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
}

void jobs_configure(struct jobs *j, struct conf_snap *cf)
{
    struct conf_snap *old;

    pthread_mutex_lock(&j->mu);
    old = j->cf;
    j->cf = conf_snap_ref(cf);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    conf_snap_unref(old);
}
