/*
 * Policy retrains (jobs.h): a placement policy for the profile's active
 * compute model, trained on the estimated MDP of that model (no samples,
 * no hardware), on DreamShard's task sets made from the 856 synthetic
 * benchmark tables at the model's batch (docs/models.md); gated against
 * size_lookup_greedy on held-out tasks of tables it never saw, stored as a
 * version of kind policy bound to the model, and activated when it has
 * the lower mean plan cost (or the request forced it) and its model is
 * still the active one.  Job thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs_int.h"
#include "shardd/log.h"

/* The task sets (docs/models.md, "DreamShard"): 4 devices of 4 GiB, tasks
 * of 10..59 tables within 15 GiB, as bench_quality's. */
#define POLICY_POOL    856
#define POLICY_TRAIN   100
#define POLICY_VAL     8
#define POLICY_GATE    20
#define POLICY_DEVICES 4
#define POLICY_MEM     ((uint64_t)4 << 30)
#define POLICY_SEED    0

int jobs__policy_check(struct jobs *jb, const struct store_profile *prof,
                       struct sd_diag *d)
{
    struct dmodel *m = NULL;
    struct sd_diag why;
    bool embedded;

    if (models_acquire(jb->models, prof->name, &m, &why) != 0)
        return sd_diag_set(d, SD_ESTATE,
                           "profile \"%.128s\" has no active compute model to "
                           "train a policy for",
                           prof->name);
    embedded = m->embedded;
    dmodel_release(m);
    if (embedded)
        return sd_diag_set(d, SD_ESTATE,
                           "the active model of \"%.128s\" is the embedded "
                           "one, whose policy is compiled in",
                           prof->name);
    return 0;
}

static int on_validation(void *ctx, int32_t it, int32_t iterations,
                         double ratio)
{
    struct jobs__run *rc = ctx;
    char msg[160];

    snprintf(msg, sizeof(msg),
             "training the policy: step %d of %d, validation %.4f x the "
             "model-cost LPT",
             (int)it, (int)iterations, ratio);
    jobs__update(rc, STORE_JOB_RUNNING, 0.1 + 0.8 * it / iterations, msg, 0);
    return atomic_load(&rc->jb->cancel);
}

/* policy_task views of n tasks (a new array, free()), NULL when none. */
static struct policy_task *views(const struct task *t, size_t n)
{
    struct policy_task *v = calloc(n ? n : 1, sizeof(*v));
    size_t k;

    for (k = 0; v != NULL && k < n; k++) {
        v[k].tables = t[k].tables;
        v[k].ntables = t[k].ntables;
    }
    return v;
}

/* The training and gate task sets at the model's batch. */
static int make_tasks(const struct cost_net *net, struct table **pool,
                      struct task_split *ts, struct sd_diag *d)
{
    struct synth_params sp;
    struct task_params tp;
    int rv;

    synth_params_default(&sp);
    sp.count = POLICY_POOL;
    sp.seed = POLICY_SEED;
    sp.batch_size = net->batch_size;
    rv = synth_tables(&sp, 1, pool);
    if (rv != 0)
        return sd_diag_set(d, rv, "making the tables: %s", sd_strerror(rv));
    task_params_default(&tp);
    tp.seed = POLICY_SEED;
    tp.max_bytes = (uint64_t)(4 * POLICY_DEVICES - 1) << 30;
    rv = task_generate_split(&tp, POLICY_TRAIN, POLICY_VAL, POLICY_GATE, *pool,
                             sp.count, ts, d);
    if (rv != 0) {
        free(*pool);
        *pool = NULL;
    }
    return rv;
}

/* Stores pn as a new inactive policy version of prof bound to model m. */
static int store_policy(struct store *st, const struct store_profile *prof,
                        const struct dmodel *m, const struct policy_net *pn,
                        const struct dreamshard_gate *g, int64_t *id,
                        struct sd_diag *d)
{
    struct store_model sm;
    void *img = NULL;
    size_t len;
    int rv;

    if (policy_serialize(pn, &img, &len) != 0)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    memset(&sm, 0, sizeof(sm));
    sm.info.profile_id = prof->id;
    sm.info.kind = STORE_KIND_POLICY;
    sm.info.format_version = POLICY_FORMAT_VERSION;
    sm.info.base_model_id = m->id;
    sm.info.metrics.train_samples = pn->metrics.train_tasks;
    sm.info.metrics.val_samples = g->tasks;
    sm.info.metrics.gate_ratio = pn->metrics.gate_ratio;
    sm.info.weights_bytes = len;
    sm.weights = img;
    rv = store_model_put(st, &sm, id, d);
    free(img);
    return rv;
}

/* The gate's verdict into msg (", not activated" when it refuses and the
 * request did not force it); whether to activate. */
static bool verdict(const struct dreamshard_gate *g, bool force, int64_t id,
                    char *msg, size_t cap)
{
    if (g->pass) {
        snprintf(msg, cap,
                 "policy %lld: held-out mean plan cost %.4f ms, "
                 "size_lookup_greedy's %.4f ms (%.3fx, %d tasks)",
                 (long long)id, g->policy_ms, g->greedy_ms,
                 g->policy_ms / g->greedy_ms, (int)g->planned_both);
        return true;
    }
    snprintf(msg, cap,
             "policy %lld: held-out mean plan cost %.4f ms is not below "
             "size_lookup_greedy's %.4f ms (%d tasks, %d only the greedy "
             "could place)%s",
             (long long)id, g->policy_ms, g->greedy_ms, (int)g->planned_both,
             (int)g->lost, force ? "; forced" : "; not activated");
    return force;
}

/* Activates policy `id` (pn's ownership passes) if m is still active. */
static enum store_job_state activate(struct jobs__run *rc,
                                     const struct dmodel *m,
                                     struct policy_net *pn, int64_t id,
                                     char *msg, size_t cap)
{
    struct store_model_info info;
    char previous[MODELS_VERSION_MAX], done[STORE_MESSAGE_MAX];
    struct dmodel *now = NULL;
    struct sd_diag d;
    bool same;
    int rv;

    same = models_acquire(rc->jb->models, m->net->profile, &now, &d) == 0 &&
           now->id == m->id;
    if (!same) {
        snprintf(done, sizeof(done),
                 "%.300s; not activated: it was trained against model %s, "
                 "no longer the active one",
                 msg, m->version);
        snprintf(msg, cap, "%s", done);
        dmodel_release(now);
        free(pn);
        return STORE_JOB_SUCCEEDED;
    }
    dmodel_release(now);
    jobs__record_model(rc, id);
    rv = models_activate_policy(rc->jb->models, rc->st, id, pn, &info, previous,
                                &d);
    if (rv != 0) {
        snprintf(msg, cap, "failed: activating policy %lld: %.300s",
                 (long long)id, d.msg);
        return STORE_JOB_FAILED;
    }
    snprintf(done, sizeof(done), "%.400s; activated (was %s)", msg,
             previous[0] ? previous : "none");
    snprintf(msg, cap, "%s", done);
    return STORE_JOB_SUCCEEDED;
}

/* Trains and gates a policy for m on ts; *out owned by the caller. */
static int train_and_gate(struct jobs__run *rc, const struct dmodel *m,
                          const struct task_split *ts, struct policy_net **out,
                          struct dreamshard_gate *g, struct sd_diag *d)
{
    struct policy_task *tr = views(ts->train, ts->ntrain);
    struct policy_task *va = views(ts->val, ts->nval);
    struct policy_task *ga = views(ts->test, ts->ntest);
    struct policy_train_params pp;
    struct policy_net *pn = NULL;
    struct topology topo;
    int rv;

    if (tr == NULL || va == NULL || ga == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_free;
    }
    policy_train_params_default(&pp);
    pthread_mutex_lock(&rc->jb->mu);
    pp.iterations = (int32_t)rc->jb->cf->c.policy_iterations;
    pthread_mutex_unlock(&rc->jb->mu);
    pp.seed = POLICY_SEED;
    pp.ndevices = POLICY_DEVICES;
    pp.mem_bytes = POLICY_MEM;
    pp.progress = on_validation;
    pp.ctx = rc;
    rv = policy_train(&pp, m->net, tr, ts->ntrain, va, ts->nval, &pn, d);
    if (rv != 0)
        goto out_free;
    topology_default(&topo, POLICY_DEVICES, POLICY_MEM);
    topo.batch_size = m->net->batch_size;
    jobs__update(rc, STORE_JOB_RUNNING, 0.9, "gating the policy", 0);
    rv = dreamshard_gate(pn, m->net, ga, ts->ntest, &topo, OPTIMIZER_SGD, g, d);
    if (rv != 0)
        goto out_free;
    pn->metrics.gate_tasks = g->tasks;
    pn->metrics.gate_ratio = g->greedy_ms > 0 ? g->policy_ms / g->greedy_ms : 0;
    *out = pn;
    pn = NULL;
out_free:
    free(pn);
    free(tr);
    free(va);
    free(ga);
    return rv;
}

enum store_job_state jobs__retrain_policy(struct jobs__run *rc,
                                          const char *profile, bool force,
                                          char *msg, size_t cap, int64_t *model)
{
    struct store_profile prof;
    struct task_split ts = {0};
    struct dreamshard_gate g;
    struct table *pool = NULL;
    struct policy_net *pn = NULL;
    struct dmodel *m = NULL;
    struct sd_diag d;
    enum store_job_state end = STORE_JOB_FAILED;
    int rv;

    rv = store_profile_get(rc->st, profile, &prof, &d);
    if (rv == 0)
        rv = jobs__policy_check(rc->jb, &prof, &d);
    if (rv == 0)
        rv = models_acquire(rc->jb->models, profile, &m, &d);
    if (rv != 0) {
        snprintf(msg, cap, "failed: %.400s", d.msg);
        return STORE_JOB_FAILED;
    }
    rv = make_tasks(m->net, &pool, &ts, &d);
    if (rv == 0) {
        snprintf(msg, cap,
                 "training a policy for model %s: %zu tasks, %zu to "
                 "validate, %zu held out",
                 m->version, ts.ntrain, ts.nval, ts.ntest);
        jobs__update(rc, STORE_JOB_RUNNING, 0.1, msg, 0);
        rv = train_and_gate(rc, m, &ts, &pn, &g, &d);
    }
    if (rv != 0) {
        snprintf(msg, cap, "failed: %.400s", d.msg);
        goto out_free;
    }
    if (atomic_load(&rc->jb->cancel)) {
        snprintf(msg, cap, "cancelled: the daemon is stopping");
        end = STORE_JOB_CANCELLED;
        goto out_free;
    }
    rv = store_policy(rc->st, &prof, m, pn, &g, model, &d);
    if (rv != 0) {
        snprintf(msg, cap, "failed: storing the policy: %.300s", d.msg);
        goto out_free;
    }
    jobs__prune(rc->jb, rc->st, &prof);
    end = STORE_JOB_SUCCEEDED;
    if (verdict(&g, force, *model, msg, cap)) {
        end = activate(rc, m, pn, *model, msg, cap);
        pn = NULL; /* activate() owns it */
    }
out_free:
    free(pn);
    dmodel_release(m);
    task_split_free(&ts);
    free(pool);
    return end;
}
