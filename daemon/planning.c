/*
 * The Planner service: Plan and Estimate.  shardd.v1 requests (protobuf-c)
 * to planner structs, the planner, and planner results back to shardd.v1
 * responses, with the plan cache, the plan audit and the profiler's
 * proposals on the way.
 *
 * Methods run on transport worker threads.  Every input check names the
 * proto field the way docs/api.md shows (`topology.num_devices: 0 is not in
 * [1, 4096]`); the tables' own checks are the planner's (`tables[3] "t3":
 * dim 30 is not a multiple of 4 ...`).
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "service_int.h"
#include "shardd/hash.h"
#include "shardd/log.h"
#include "shardd/v1/planner.pb-c.h"
#include "shardd/v1/types.pb-c.h"
#include "wire.h"

/* A search stops this long before the client's deadline, to reply. */
#define SVC_DEADLINE_MARGIN_MS 50

void svc_limits(const struct sd_config *c, struct wire_limits *l)
{
    wire_limits_default(l);
    l->max_tables = c->max_tables;
    l->default_batch = c->default_batch;
    l->default_budget_ms = c->default_time_budget_ms;
    l->max_budget_ms = c->max_time_budget_ms;
    l->search_threads = (int32_t)c->search_threads;
}


/*
 * The cost model that answers for a profile (empty: the server's default):
 * the profile's active model (models.c); a profile with none gets the
 * analytic model unless the algorithm needs a learned one (neuroshard
 * searches with it, dreamshard's policy reads it), which is SD_ESTATE.
 */
struct scorer {
    struct net_cost_model ncm;
    struct net_ensemble_cost_model ecm; /* options.quantile's scorer */
    struct net_comm_model ncomm; /* the learned comm, when comm_learned */
    bool comm_learned;
    const struct cost_model *m;
    struct dmodel *dm;   /* the learned model's reference; NULL: analytic */
    const char *profile; /* the profile answered for */
    /* The model's ensemble, for the spread of its predictions (struct
     * dmodel's ens): a stored model's own members, or the compiled-in one
     * beside the cpu default or the H200's model; NULL for a model of one
     * member and the analytic one. */
    const struct net_ensemble *ens;
};

/*
 * The model for a request's profile: the active one (a reference, released
 * by scorer_release()), or for algorithms that do not need a learned model,
 * the analytic one when the profile has none.
 */
static int pick_scorer(struct svc *s, const char *profile, bool need_learned,
                       const char *field, struct scorer *sc, struct sd_diag *d)
{
    struct sd_diag why;
    int rv;

    rv = models_acquire(&s->models, profile, &sc->dm, &why);
    if (rv == 0) {
        net_cost_model_init(&sc->ncm, sc->dm->net);
        sc->ncm.memo = sc->dm->memo;
        sc->m = &sc->ncm.cm;
        sc->profile = sc->dm->net->profile;
        sc->ens = sc->dm->ens;
        return 0;
    }
    if (need_learned || rv != SD_ESTATE)
        return sd_diag_set(d, rv, "%s: %s", field, why.msg);
    sc->dm = NULL;
    sc->m = &cost_model_analytic;
    sc->profile = profile;
    sc->ens = NULL;
    return 0;
}

/*
 * A request without a batch size (and no default_batch configured) is
 * costed at the batch the answering model was measured at, as `shardctl
 * plan --offline` does: no scaling, and the same plan online and offline.
 */
static int resolve_batch(struct topology *t, const struct scorer *sc,
                         struct sd_diag *d)
{
    if (t->batch_size != 0)
        return 0;
    t->batch_size =
        sc->dm != NULL ? sc->dm->net->batch_size : SVC_DEFAULT_BATCH;
    if (t->batch_size < t->ndevices)
        return sd_diag_set(d, SD_EINVAL,
                           "topology.batch_size: the default (%lld, the "
                           "model's) is below num_devices %d; give one",
                           (long long)t->batch_size, (int)t->ndevices);
    return 0;
}

/*
 * The learned comm models of the answering set, when it has them for the
 * request's device count (the reference profile's for 4 devices); else
 * the topology keeps the alpha-beta model.  After resolve_batch(): they
 * scale with the batch.
 */
static void attach_comm(struct scorer *sc, struct topology *t)
{
    sc->comm_learned =
        sc->dm != NULL && net_comm_model_init(&sc->ncomm, sc->dm->net, t);
    if (sc->comm_learned)
        t->comm = &sc->ncomm.cm;
}

static void scorer_release(struct scorer *sc)
{
    dmodel_release(sc->dm);
    sc->dm = NULL;
}

/* ---------------------------------------------------------------------- */
/* Request hash: FNV-1a (64 bit) over the request with defaults applied     */

static uint64_t request_hash(const struct table *tables, size_t n,
                             const struct topology *t,
                             const struct plan_options *o, const char *profile,
                             const struct input_notes *notes,
                             const struct dpolicy *pol, char out[17])
{
    struct sd_fnv hs;
    size_t i;
    int k;

    sd_fnv_init(&hs);
    sd_fnv_str(&hs, "shardd.v1.PlanRequest/1");
    sd_fnv_u64(&hs, n);
    for (i = 0; i < n; i++) {
        sd_fnv_str(&hs, tables[i].name);
        sd_fnv_u64(&hs, (uint64_t)tables[i].rows);
        sd_fnv_u64(&hs, (uint64_t)tables[i].dim);
        sd_fnv_real(&hs, tables[i].pooling_factor);
        for (k = 0; k < TABLE_NBINS; k++)
            sd_fnv_real(&hs, tables[i].bins[k]);
        sd_fnv_u64(&hs, (uint64_t)tables[i].dtype);
    }
    sd_fnv_u64(&hs, (uint64_t)t->ndevices);
    sd_fnv_u64(&hs, (uint64_t)t->devices_per_host);
    sd_fnv_u64(&hs, t->mem_bytes);
    sd_fnv_u64(&hs, (uint64_t)t->batch_size);
    sd_fnv_real(&hs, t->intra_host_bw);
    sd_fnv_real(&hs, t->inter_host_bw);
    sd_fnv_real(&hs, t->link_latency_ms);
    sd_fnv_real(&hs, t->device_mem_bw);
    sd_fnv_str(&hs, plan_alg_name(o->alg));
    sd_fnv_u64(&hs, o->column_splits);
    sd_fnv_real(&hs, o->time_budget_ms);
    sd_fnv_u64(&hs, o->seed);
    sd_fnv_u64(&hs, (uint64_t)o->optimizer);
    sd_fnv_str(&hs, profile);
    /* Constraints only where given, so that the hash of a request without
     * them is what it always was. */
    if (t->mem_by_device != NULL) {
        sd_fnv_str(&hs, "mem_by_device");
        for (k = 0; k < t->ndevices; k++)
            sd_fnv_u64(&hs, t->mem_by_device[k]);
    }
    /* The host tier and comm precision only where given, likewise. */
    if (t->host_dram_bytes != 0 || t->host_link_bw != 0 || t->comm_dtype != 0) {
        sd_fnv_str(&hs, "tiers");
        sd_fnv_u64(&hs, t->host_dram_bytes);
        sd_fnv_real(&hs, t->host_link_bw);
        sd_fnv_u64(&hs, t->comm_dtype);
    }
    if (o->ensemble != NULL) { /* options.quantile */
        sd_fnv_str(&hs, "quantile");
        sd_fnv_real(&hs, o->quantile);
    }
    if (o->pins != NULL) {
        sd_fnv_str(&hs, "pins");
        for (i = 0; i < n; i++)
            sd_fnv_u64(&hs, (uint64_t)(int64_t)o->pins[i]);
    }
    if (o->constraints != NULL) {
        sd_fnv_str(&hs, "constraints");
        for (i = 0; i < n; i++) {
            const struct table_constraint *c = &o->constraints[i];

            sd_fnv_u64(&hs, c->schemes);
            sd_fnv_u64(&hs, (uint64_t)(int64_t)c->min_row_shards);
            sd_fnv_u64(&hs, c->no_split);
            sd_fnv_u64(&hs, (uint64_t)(int64_t)c->host);
            sd_fnv_u64(&hs, c->tiers);
            sd_fnv_real(&hs, c->cache_load_factor);
        }
    }
    if (o->beam_evaluations != PLAN_BEAM_EVALUATIONS) {
        sd_fnv_str(&hs, "beam_evaluations");
        sd_fnv_u64(&hs, (uint64_t)o->beam_evaluations);
    }
    /* The notes are part of the answer: requests that differ only in what
     * they left to assume, or asked for in vain, get their own. */
    if (notes->n > 0) {
        sd_fnv_str(&hs, "notes");
        for (i = 0; i < notes->n; i++)
            sd_fnv_str(&hs, notes->v[i].text);
    }
    /* A new policy of the same model plans anew. */
    if (pol != NULL) {
        sd_fnv_str(&hs, "policy");
        sd_fnv_str(&hs, pol->version);
    }
    snprintf(out, 17, "%016llx", (unsigned long long)hs.h);
    return hs.h;
}

/* ---------------------------------------------------------------------- */
/* Planner results to responses                                            */

/* The cost model's name, noting a batch other than the model's own. */
static void cost_model_name(const struct plan *p, const struct scorer *sc,
                            const struct topology *t, char *out, size_t size)
{
    if (sc->dm != NULL && t->batch_size != sc->ncm.net->batch_size)
        snprintf(out, size, "%s (scaled from batch %lld)", p->cost_model,
                 (long long)sc->ncm.net->batch_size);
    else
        snprintf(out, size, "%s", p->cost_model);
}

/* The CostBasis of a response; its strings point into sc and p. */
static void fill_basis(Shardd__V1__CostBasis *b, const struct scorer *sc,
                       const struct dpolicy *pol, const struct plan *p,
                       char *cost_model)
{
    shardd__v1__cost_basis__init(b);
    b->policy_version = (char *)(pol != NULL ? pol->version : "");
    b->model_version = (char *)(sc->dm != NULL ? sc->dm->version : "");
    b->profile = (char *)sc->profile;
    b->cost_model = cost_model;
    b->comm_model = (char *)p->comm_model;
    b->compute_source = sc->dm != NULL
                            ? SHARDD__V1__COST_SOURCE__COST_SOURCE_LEARNED
                            : SHARDD__V1__COST_SOURCE__COST_SOURCE_ANALYTIC;
    b->comm_source = sc->comm_learned
                         ? SHARDD__V1__COST_SOURCE__COST_SOURCE_LEARNED
                         : SHARDD__V1__COST_SOURCE__COST_SOURCE_ANALYTIC;
}

/*
 * A cached response, marked as such.  It was stored with cache_hit false,
 * which proto3 leaves out of the bytes; a protobuf parser merges repeated
 * top-level fields (the last scalar wins), so appending the field
 * (PlanResponse.cache_hit = 9, varint: key 9 << 3 = 0x48, value 1) marks it
 * without unpacking and repacking a response that may hold 65,536 tables.
 */
static int mark_cache_hit(uint8_t **resp, size_t *len, struct sd_diag *d)
{
    uint8_t *grown = realloc(*resp, *len + 2);

    if (grown == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    grown[*len] = 9 << 3;
    grown[*len + 1] = 1;
    *resp = grown;
    *len += 2;
    return 0;
}

/* Records the plan handed out (best effort: a full disk fails no plan;
 * audit.h writes it off the request path). */
static void audit_plan(struct svc *s, const struct plan *p,
                       const struct table *tables, size_t n,
                       const struct scorer *sc, const char *hash,
                       const char *alg)
{
    struct store_plan_audit a;
    char *json = json_plan(p, tables);

    if (json == NULL)
        return;
    memset(&a, 0, sizeof(a));
    snprintf(a.request_hash, sizeof(a.request_hash), "%s", hash);
    snprintf(a.algorithm, sizeof(a.algorithm), "%s", alg);
    a.model_id = sc->dm != NULL ? sc->dm->id : 0;
    a.ntables = (int32_t)n;
    a.ndevices = p->ndevices;
    a.plan_cost_ms = p->cost_ms;
    audit_put(&s->audit, &a, json);
}

/*
 * Fits the search into the client's deadline (*clamped: it had to cut the
 * budget); SD_ETIMEDOUT if the deadline is past already.
 */
static int fit_deadline(const struct svc_call *call, struct plan_options *po,
                        bool *clamped, struct sd_diag *d)
{
    int64_t left;

    *clamped = false;
    if (call == NULL || call->deadline_ms == INT64_MAX)
        return 0;
    left = call->deadline_ms - sd_now_ms() - SVC_DEADLINE_MARGIN_MS;
    if (left <= 0)
        return sd_diag_set(d, SD_ETIMEDOUT,
                           "the deadline passed before the search started");
    if (po->time_budget_ms <= 0 || po->time_budget_ms > (double)left) {
        po->time_budget_ms = (double)left;
        *clamped = true;
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* The lane of a Plan request                                              */

/*
 * One field of a protobuf message at *p (the wire format: a varint key,
 * then a varint, 8 or 4 bytes, or a length and that many bytes); *p moves
 * past it.  A varint's value goes to *v, a length-delimited field's bytes
 * to *sub / *sublen.  False at the end or on bytes that are no field.
 */
static bool pb_field(const uint8_t **p, const uint8_t *end, uint32_t *field,
                     uint64_t *v, const uint8_t **sub, size_t *sublen)
{
    uint64_t key = 0, x = 0;
    int shift;

    for (shift = 0; *p < end && shift < 64; shift += 7) {
        key |= (uint64_t)(**p & 0x7f) << shift;
        if ((*(*p)++ & 0x80) == 0)
            break;
    }
    if (*p > end || shift >= 64)
        return false;
    *field = (uint32_t)(key >> 3);
    switch (key & 7) {
    case 0: /* varint */
    case 2: /* length-delimited: the length first */
        for (shift = 0; *p < end && shift < 64; shift += 7) {
            x |= (uint64_t)(**p & 0x7f) << shift;
            if ((*(*p)++ & 0x80) == 0)
                break;
        }
        if (shift >= 64 || (*p)[-1] & 0x80)
            return false;
        *v = x;
        if ((key & 7) == 0)
            return true;
        if (x > (uint64_t)(end - *p))
            return false;
        *sub = *p;
        *sublen = (size_t)x;
        *p += x;
        return true;
    case 1: /* 64-bit */
        if (end - *p < 8)
            return false;
        *p += 8;
        return true;
    case 5: /* 32-bit */
        if (end - *p < 4)
            return false;
        *p += 4;
        return true;
    default:
        return false;
    }
}

/*
 * A Plan is big when its tables x devices exceed small_search_work: read
 * from the bytes (PlanRequest.tables = 1 or .torchrec_tables = 4,
 * .topology = 2 and its num_devices = 1) without decoding a table.
 */
enum svc_lane svc_plan_lane(struct svc *s, const uint8_t *req, size_t len)
{
    const uint8_t *p = req, *end = req + len, *sub = NULL, *q, *qend, *inner;
    uint64_t tables = 0, devices = 1, v = 0, work;
    size_t sublen = 0, qlen;
    uint32_t field;
    struct conf_snap *cf;

    while (p < end && pb_field(&p, end, &field, &v, &sub, &sublen)) {
        if (field == 1 || field == 4)
            tables++;
        if (field != 2)
            continue;
        /* The topology's fields; a length-delimited one among them (the
         * packed mem_bytes_by_device) must not move the topology's end. */
        q = sub;
        qend = sub + sublen;
        while (q < qend && pb_field(&q, qend, &field, &v, &inner, &qlen))
            if (field == 1)
                devices = v > 0 ? v : 1;
    }
    cf = svc_conf(s);
    work = cf->c.small_search_work;
    conf_snap_unref(cf);
    return tables * devices > work ? SVC_LANE_BIG : SVC_LANE_SMALL;
}

/* ---------------------------------------------------------------------- */
/* Plan                                                                    */

/* A Plan request decoded, with its defaults applied. */
struct plan_ask {
    Shardd__V1__PlanRequest *rq; /* owned */
    struct tables_input in;      /* owned: the tables and their notes */
    struct table *tables;        /* in.tables */
    size_t n;
    struct topology topo;
    uint64_t *caps; /* owned; topo.mem_by_device */
    struct plan_options po;
    int32_t *pins;                 /* owned; po.pins */
    struct table_constraint *cons; /* owned; po.constraints */
    struct scorer sc;
    struct dpolicy *pol; /* dreamshard's policy (a reference); else NULL */
    uint64_t key;        /* the request hash */
    char hash[17];       /* and in hex */
};

static void plan_ask_free(struct plan_ask *a)
{
    dpolicy_release(a->pol);
    scorer_release(&a->sc);
    free(a->pins);
    free(a->cons);
    free(a->caps);
    tables_input_destroy(&a->in);
    if (a->rq != NULL)
        shardd__v1__plan_request__free_unpacked(a->rq, NULL);
}

/*
 * options.quantile: the plan for that quantile of the scorer's ensemble,
 * scored by it (as `shardctl plan --offline --quantile`).  0, or
 * SD_EINVAL naming the field when the model has no ensemble.
 */
static int pick_quantile(const Shardd__V1__PlanOptions *o, struct scorer *sc,
                         struct plan_options *po, struct sd_diag *d)
{
    if (o == NULL || o->quantile == NULL)
        return 0;
    if (sc->ens == NULL)
        return sd_diag_set(d, SD_EINVAL,
                           "options.quantile: the model answering profile %s "
                           "has no ensemble (one member: retrain it with "
                           "retrain_ensemble 2 or more, or store one from "
                           "shardctl train --ensemble); leave quantile unset",
                           sc->profile);
    po->ensemble = sc->ens;
    po->quantile = o->quantile->value;
    /* The members' memos (models.c), kept across requests: each member's
     * search and the scores under the quantile reuse its latents. */
    po->ensemble_memos = sc->dm->ens_memo;
    net_ensemble_cost_model_init(&sc->ecm, sc->ens, o->quantile->value);
    sc->ecm.memos = sc->dm->ens_memo;
    sc->m = &sc->ecm.cm;
    return 0;
}

/* Decodes and checks a PlanRequest into *a (plan_ask_free() it). */
static int plan_ask_decode(struct svc *s, const struct sd_config *cfg,
                           const uint8_t *req, size_t len, struct plan_ask *a,
                           struct sd_diag *d)
{
    struct wire_limits lim;
    const char *profile;
    int rv;

    svc_limits(cfg, &lim);
    a->rq = shardd__v1__plan_request__unpack(NULL, len, req);
    if (a->rq == NULL)
        return sd_diag_set(d, SD_EFORMAT, "PlanRequest: not a valid message");
    rv = wire_tables_input_in(&lim, a->rq->tables, a->rq->n_tables,
                              a->rq->torchrec_tables, a->rq->n_torchrec_tables,
                              &a->in, d);
    if (rv != 0)
        return rv;
    a->tables = a->in.tables;
    a->n = a->in.n;
    rv = wire_topology_in(&lim, a->rq->topology, &a->topo, &a->caps, d);
    if (rv == 0)
        rv = wire_options_in(&lim, a->rq->options, a->tables, a->n, &a->topo,
                             &a->po, &a->pins, &a->cons, d);
    a->po.beam_evaluations = cfg->beam_evaluations;
    if (rv != 0)
        return rv;
    profile = a->rq->options != NULL ? a->rq->options->profile : NULL;
    rv = pick_scorer(s, profile,
                     a->po.alg == PLAN_ALG_NEUROSHARD ||
                         a->po.alg == PLAN_ALG_DREAMSHARD,
                     "options.profile", &a->sc, d);
    if (rv != 0)
        return rv;
    a->po.net = a->sc.dm != NULL ? a->sc.dm->net : NULL;
    a->po.memo = a->sc.dm != NULL ? a->sc.dm->memo : NULL;
    rv = pick_quantile(a->rq->options, &a->sc, &a->po, d);
    if (rv != 0)
        return rv;
    if (a->po.alg == PLAN_ALG_DREAMSHARD) {
        struct sd_diag why;

        rv = models_acquire_policy(&s->models, a->sc.dm, &a->pol, &why);
        if (rv != 0)
            return sd_diag_set(d, rv, "options.algorithm: %s", why.msg);
        a->po.policy = a->pol->pn;
    }
    rv = resolve_batch(&a->topo, &a->sc, d);
    if (rv == 0)
        rv = tables_input_resolve(&a->in, a->topo.batch_size, d);
    /* After resolve: where a constraint of the request wins over a TorchRec
     * one, the note resolve wrote for it is corrected. */
    if (rv == 0 && tables_input_constraints(&a->in, &a->cons) != 0)
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
    if (rv != 0)
        return rv;
    a->po.constraints = a->cons;
    if (a->in.whole_tables)
        a->po.column_splits = false;
    attach_comm(&a->sc, &a->topo);
    /* The hash covers the request with defaults applied, not the budget the
     * deadline leaves: the same request answers from the cache whatever
     * its deadline. */
    a->key = request_hash(a->tables, a->n, &a->topo, &a->po, a->sc.profile,
                          &a->in.notes, a->pol, a->hash);
    return 0;
}

/* The search's figures; the baselines keep no statistics: their time is
 * the whole run. */
static void fill_search(Shardd__V1__SearchStats *m, const struct plan *p,
                        enum plan_alg alg, double elapsed_ms)
{
    bool searched = alg == PLAN_ALG_NEUROSHARD;
    bool learned = alg == PLAN_ALG_DREAMSHARD;

    shardd__v1__search_stats__init(m);
    m->search_time_ms = searched || learned ? p->stats.search_ms : elapsed_ms;
    /* dreamshard: the devices its policy scored. */
    m->candidates_evaluated = searched  ? (uint64_t)p->stats.greedy_runs
                              : learned ? (uint64_t)p->stats.evaluations
                                        : 1;
    m->time_budget_exhausted = p->stats.budget_exhausted;
}

/*
 * The spread of the scorer's ensemble over plan p (out->members 0: none),
 * as `shardctl plan --offline` computes it.  0 or SD_ENOMEM.
 */
static int spread_of(const struct scorer *sc, const struct plan *p,
                     const struct table *tables, size_t n,
                     const struct topology *t, enum optimizer opt,
                     const atomic_bool *stop, struct plan_spread *out)
{
    memset(out, 0, sizeof(*out));
    if (sc->ens == NULL)
        return 0;
    /* The ensemble's member 0 is the model (models.c): a plan it scored
     * (no quantile asked) has member 0's costs already. */
    return net_ensemble_plan_spread(sc->ens, sc->dm->ens_memo, p,
                                    sc->m == &sc->ncm.cm, tables, n, t, opt,
                                    stop, out) == 0
               ? 0
               : SD_ENOMEM;
}

/* The PlanResponse of a finished plan, packed into *resp. */
static int plan_reply(const struct plan_ask *a, const struct plan *p,
                      double elapsed_ms, uint8_t **resp, size_t *resp_len,
                      struct sd_diag *d)
{
    Shardd__V1__PlanResponse out = SHARDD__V1__PLAN_RESPONSE__INIT;
    Shardd__V1__CostBasis basis;
    Shardd__V1__SearchStats search;
    struct wire_arena arena = WIRE_ARENA_INIT;
    struct plan_spread sp;
    char cm_name[sizeof(p->cost_model) + 48];
    /* A call the server's stop reaches must answer inside the halt window
     * (RPC_HALT_REPLY_MS): its answer leaves the spread out, one evaluation
     * of the plan per member (half a second at 20,000 tables; several
     * seconds at 2,000 under TSan).  The stop may come while the spread
     * runs: it is checked before each member. */
    int rv;

    memset(&sp, 0, sizeof(sp));
    if (spread_of(&a->sc, p, a->tables, a->n, &a->topo, a->po.optimizer,
                  a->po.cancel, &sp) != 0)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    if (sp.members > 0) {
        out.spread = wire_spread_out(&arena, &sp);
        plan_spread_free(&sp);
        if (out.spread == NULL) {
            wire_arena_free(&arena);
            return sd_diag_set(d, SD_ENOMEM, "out of memory");
        }
    }

    out.tables = wire_placements_out(&arena, p, a->tables, a->n);
    out.n_tables = a->n;
    out.devices = wire_devices_out(&arena, p, &a->topo);
    out.n_devices = (size_t)p->ndevices;
    out.explanation = wire_explanation_out(&arena, p, a->tables);
    out.notes = wire_notes_out(&arena, &a->in.notes);
    out.n_notes = a->in.notes.n;
    if (out.tables == NULL || out.devices == NULL || out.explanation == NULL ||
        out.notes == NULL) {
        wire_arena_free(&arena);
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    }
    out.plan_cost_ms = p->cost_ms;
    out.algorithm = (char *)plan_alg_name(a->po.alg);
    cost_model_name(p, &a->sc, &a->topo, cm_name, sizeof(cm_name));
    fill_basis(&basis, &a->sc, a->pol, p, cm_name);
    out.basis = &basis;
    fill_search(&search, p, a->po.alg, elapsed_ms);
    out.search = &search;
    out.request_hash = (char *)a->hash;
    out.cache_hit = false;
    rv = wire_pack(&out.base, resp, resp_len, d);
    wire_arena_free(&arena);
    return rv;
}

static int plan_request(struct svc *s, const struct svc_call *call,
                        const uint8_t *req, size_t len, uint8_t **resp,
                        size_t *resp_len, struct sd_diag *d)
{
    struct conf_snap *cf = svc_conf(s);
    struct plan_ask a;
    struct plan p;
    int64_t model_id;
    bool clamped;
    double t0, elapsed;
    int rv;

    memset(&a, 0, sizeof(a));
    rv = plan_ask_decode(s, &cf->c, req, len, &a, d);
    if (rv != 0)
        goto out_ask;
    model_id = a.sc.dm != NULL ? a.sc.dm->id : -1;
    if (cache_get(&s->cache, a.key, model_id, resp, resp_len)) {
        rv = mark_cache_hit(resp, resp_len, d);
        goto out_ask;
    }
    rv = fit_deadline(call, &a.po, &clamped, d);
    if (rv != 0)
        goto out_ask;
    a.po.cancel = call != NULL ? call->stop : NULL;
    /* With other searches running the CPUs are taken: more threads for
     * this one would only add their start and switches (a plan does not
     * depend on its thread count). */
    if (atomic_fetch_add(&s->searching, 1) > 0)
        a.po.threads = 1;
    t0 = sd_now_ms_f();
    rv = plan_run(a.tables, a.n, &a.topo, &a.po, a.sc.m, &p, d);
    elapsed = sd_now_ms_f() - t0;
    atomic_fetch_sub(&s->searching, 1);
    if (rv != 0)
        goto out_ask;
    /* Stopped because the client left: nobody takes this plan, and it is
     * not the request's answer, for the cache or the audit. */
    if (call != NULL && call->gone != NULL && atomic_load(call->gone)) {
        rv = sd_diag_set(d, SD_ECANCELED, "the client cancelled the call");
        goto out_plan;
    }
    /* Stopped because the server is stopping: the best plan so far, as
     * when the budget runs out (time_budget_exhausted), but not cached. */
    if (a.po.cancel != NULL && atomic_load(a.po.cancel))
        clamped = true;
    rv = plan_reply(&a, &p, elapsed, resp, resp_len, d);
    if (rv != 0)
        goto out_plan;
    /* A plan cut short by the deadline is not the request's answer. */
    if (!(clamped && p.stats.budget_exhausted))
        cache_put(&s->cache, a.key, model_id, *resp, *resp_len);
    audit_plan(s, &p, a.tables, a.n, &a.sc, a.hash, plan_alg_name(a.po.alg));
    /* Its shards are worth measuring whichever model planned them; the
     * profiler takes them when the batch is the one it measures at. */
    profw_propose(&s->profw, &p, a.tables, a.topo.batch_size);
out_plan:
    plan_destroy(&p);
out_ask:
    plan_ask_free(&a);
    conf_snap_unref(cf);
    return rv;
}

int svc_plan(struct svc *s, const struct svc_call *call, const uint8_t *req,
             size_t len, uint8_t **resp, size_t *resp_len, struct sd_diag *d)
{
    int rv;

    profw_request_begin(&s->profw);
    rv = plan_request(s, call, req, len, resp, resp_len, d);
    profw_request_end(&s->profw);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* Estimate                                                                */

/* The EstimateResponse of an evaluated plan, packed into *resp. */
static int estimate_reply(const struct plan *p, const struct topology *topo,
                          const struct scorer *sc, const struct plan_spread *sp,
                          const struct input_notes *notes, uint8_t **resp,
                          size_t *resp_len, struct sd_diag *d)
{
    Shardd__V1__EstimateResponse out = SHARDD__V1__ESTIMATE_RESPONSE__INIT;
    Shardd__V1__CostBasis basis;
    struct wire_arena arena = WIRE_ARENA_INIT;
    char cm_name[sizeof(p->cost_model) + 48];
    int32_t r;
    int rv;

    out.devices = wire_devices_out(&arena, p, topo);
    if (sp->members > 0)
        out.spread = wire_spread_out(&arena, sp);
    out.notes = wire_notes_out(&arena, notes);
    out.n_notes = notes->n;
    if (out.devices == NULL || out.notes == NULL ||
        (sp->members > 0 && out.spread == NULL)) {
        wire_arena_free(&arena);
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    }
    out.n_devices = (size_t)p->ndevices;
    out.plan_cost_ms = p->cost_ms;
    cost_model_name(p, sc, topo, cm_name, sizeof(cm_name));
    fill_basis(&basis, sc, NULL, p, cm_name);
    out.basis = &basis;
    out.fits_memory = true;
    for (r = 0; r < p->ndevices; r++)
        if (p->devices[r].mem_bytes > topology_mem(topo, r))
            out.fits_memory = false;
    rv = wire_pack(&out.base, resp, resp_len, d);
    wire_arena_free(&arena);
    return rv;
}

static int estimate_request(struct svc *s, const uint8_t *req, size_t len,
                            uint8_t **resp, size_t *resp_len, struct sd_diag *d)
{
    Shardd__V1__EstimateRequest *rq;
    struct conf_snap *cf = svc_conf(s);
    struct topology topo, unbounded;
    struct tables_input in = {0};
    struct table *tables = NULL;
    size_t n = 0;
    enum optimizer opt = OPTIMIZER_SGD;
    struct wire_limits lim;
    struct scorer sc = {0};
    struct plan_spread sp = {0};
    struct plan p;
    uint64_t *caps = NULL;
    int rv;

    svc_limits(&cf->c, &lim);
    rq = shardd__v1__estimate_request__unpack(NULL, len, req);
    if (rq == NULL) {
        conf_snap_unref(cf);
        return sd_diag_set(d, SD_EFORMAT,
                           "EstimateRequest: not a valid message");
    }
    rv = wire_tables_input_in(&lim, rq->tables, rq->n_tables,
                              rq->torchrec_tables, rq->n_torchrec_tables, &in,
                              d);
    tables = in.tables;
    n = in.n;
    if (rv == 0)
        rv = wire_topology_in(&lim, rq->topology, &topo, &caps, d);
    if (rv == 0)
        rv = wire_optimizer_in(rq->optimizer, "optimizer", &opt, d);
    if (rv == 0)
        rv = pick_scorer(s, rq->profile, false, "profile", &sc, d);
    if (rv == 0)
        rv = resolve_batch(&topo, &sc, d);
    if (rv == 0)
        rv = tables_input_resolve(&in, topo.batch_size, d);
    if (rv == 0)
        attach_comm(&sc, &topo);
    if (rv == 0)
        rv = wire_placement_in("placement", rq->placement, rq->n_placement,
                               tables, n, topo.ndevices, &p, d);
    if (rv != 0)
        goto out_tables;

    /* An over-full device is costed, not refused (fits_memory says so):
     * the columns are checked against an unbounded capacity. */
    unbounded = topo;
    unbounded.mem_bytes = UINT64_MAX;
    unbounded.mem_by_device = NULL;
    rv = plan_validate_as(&p, tables, n, &unbounded, opt, "placement", d);
    if (rv == 0 && plan_evaluate(&p, tables, n, &topo, opt, sc.m) != 0)
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
    if (rv == 0 && spread_of(&sc, &p, tables, n, &topo, opt, NULL, &sp) != 0)
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
    if (rv == 0)
        rv = estimate_reply(&p, &topo, &sc, &sp, &in.notes, resp, resp_len, d);
    plan_spread_free(&sp);
    plan_destroy(&p);
out_tables:
    scorer_release(&sc);
    free(caps);
    tables_input_destroy(&in);
    shardd__v1__estimate_request__free_unpacked(rq, NULL);
    conf_snap_unref(cf);
    return rv;
}

int svc_estimate(struct svc *s, const struct svc_call *call, const uint8_t *req,
                 size_t len, uint8_t **resp, size_t *resp_len,
                 struct sd_diag *d)
{
    int rv;

    (void)call; /* costing a plan is quick: no budget to fit */
    profw_request_begin(&s->profw);
    rv = estimate_request(s, req, len, resp, resp_len, d);
    profw_request_end(&s->profw);
    return rv;
}
