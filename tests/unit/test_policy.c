/*
 * DreamShard's policy with the embedded compute model: legal-device masking
 * and pins, determinism of training and inference for a seed, a tiny task
 * whose optimum (by brute force) the model-cost LPT misses and the trained
 * policy finds, the policy file's refusals, the gate refusing a policy worse
 * than size_lookup_greedy, a policy of another model refused, and a policy
 * trained on 4 devices planning 8, 16 and 128.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "image_edit.h"
#include "planner.h"

static const struct cost_net *net;

/* n random DLRM-like tables (as test_neuroshard.c makes them). */
static struct table *make_tables(size_t n, uint64_t seed)
{
    struct table *t = calloc(n, sizeof(*t));
    static const int32_t dims[] = {4, 8, 16, 32, 64, 128};
    struct rng g;
    size_t i;
    int k;

    rng_seed(&g, seed);
    for (i = 0; t && i < n; i++) {
        double left = 1;

        snprintf(t[i].name, sizeof(t[i].name), "t%zu", i);
        t[i].rows = 1000 + (int64_t)(rng_uniform(&g) * 5e6);
        t[i].dim = dims[(int)(rng_uniform(&g) * 6)];
        t[i].pooling_factor = 1 + rng_uniform(&g) * 30;
        for (k = 0; k < 8; k++) {
            t[i].bins[k] = left * (0.3 + 0.4 * rng_uniform(&g));
            left -= t[i].bins[k];
        }
    }
    return t;
}

/* dreamshard with policy pn on model m. */
static int run_on(const struct cost_net *m, const struct table *tb, size_t n,
                  const struct topology *topo, const struct policy_net *pn,
                  const int32_t *pins, struct plan *p, struct sd_diag *d)
{
    struct net_cost_model ncm;
    struct plan_options o;

    net_cost_model_init(&ncm, m);
    plan_options_default(&o);
    o.alg = PLAN_ALG_DREAMSHARD;
    o.net = m;
    o.policy = pn;
    o.pins = pins;
    return plan_run(tb, n, topo, &o, &ncm.cm, p, d);
}

/* dreamshard with policy pn on the embedded model. */
static int run(const struct table *tb, size_t n, const struct topology *topo,
               const struct policy_net *pn, const int32_t *pins, struct plan *p,
               struct sd_diag *d)
{
    return run_on(net, tb, n, topo, pn, pins, p, d);
}

/* A policy bound to the embedded model whose logit is 10 x the device's
 * memory used fraction (cost feature 7): it wants the fullest device. */
static struct policy_net *fullest_first(void)
{
    struct policy_net *pn = calloc(1, sizeof(*pn));

    snprintf(pn->profile, sizeof(pn->profile), "%s", net->profile);
    pn->model_crc = policy_model_crc(net);
    pn->p[POL_C1W + 0 * POL_NCOST + 7] = 1;
    pn->p[POL_C2W + 0 * POL_C1 + 0] = 1;
    pn->p[POL_H1W + 0 * (POL_LAT + POL_C2) + POL_LAT + 0] = 1;
    pn->p[POL_H2W + 0] = 10;
    return pn;
}

static struct policy_net *small_trained(uint64_t seed, int32_t iterations)
{
    struct table *tb = make_tables(24, 5);
    struct policy_task tasks[3];
    struct policy_train_params pp;
    struct policy_net *pn = NULL;
    struct sd_diag d = {{0}};
    int k;

    for (k = 0; k < 3; k++) {
        tasks[k].tables = tb + 8 * k;
        tasks[k].ntables = 8;
    }
    policy_train_params_default(&pp);
    pp.seed = seed;
    pp.iterations = iterations;
    pp.eval_every = 10;
    pp.mem_bytes = 64ull << 30;
    if (policy_train(&pp, net, tasks, 2, tasks + 2, 1, &pn, &d) != 0)
        fprintf(stderr, "train: %s\n", d.msg);
    free(tb);
    return pn;
}

/* A device without room never gets a table, whatever the policy wants;
 * pins are honoured first. */
static void test_masking(void)
{
    struct table *tb = make_tables(12, 3);
    struct policy_net *pn = fullest_first();
    struct policy_env *e = NULL;
    struct topology topo;
    uint64_t caps[3];
    int32_t pins[12];
    struct sd_diag d = {{0}};
    struct plan p;
    bool legal[3];
    float x[3 * POL_NCOST];
    size_t i, k;
    int rv;

    /* Device 1 holds table 0 (pinned) and exactly nothing more. */
    for (i = 0; i < 12; i++)
        pins[i] = -1;
    pins[0] = 1;
    caps[0] = caps[2] = 64ull << 30;
    caps[1] = shard_bytes(&tb[0], tb[0].dim, OPTIMIZER_SGD);
    topology_default(&topo, 3, 64ull << 30);
    topo.mem_by_device = caps;
    topo.batch_size = net->batch_size;

    /* The env says device 1 is illegal once table 0 is on it. */
    CHECK(policy_env_new(pn, net, NULL, tb, 12, &topo, OPTIMIZER_SGD, &e) == 0);
    policy_env_place(e, 0, 1);
    CHECK(policy_env_features(e, 3, x, legal) == 2);
    CHECK(legal[0] && !legal[1] && legal[2]);
    CHECK(x[1 * POL_NCOST + 7] == 1.0f); /* full, and the policy likes it */
    policy_env_free(e);

    rv = run(tb, 12, &topo, pn, pins, &p, &d);
    CHECK(rv == 0);
    if (rv == 0) {
        for (k = 0; k < p.nshards; k++) {
            if (p.shards[k].table == 0)
                CHECK(p.shards[k].device == 1);
            else
                CHECK(p.shards[k].device != 1);
        }
        CHECK(strcmp(p.algorithm, "dreamshard") == 0);
        CHECK(p.devices[1].nshards == 1);
        plan_destroy(&p);
    } else {
        fprintf(stderr, "masking: %s\n", d.msg);
    }

    /* A table no device has room for is an error naming it. */
    caps[0] = caps[2] = shard_bytes(&tb[0], tb[0].dim, OPTIMIZER_SGD);
    rv = run(tb, 12, &topo, pn, pins, &p, &d);
    CHECK(rv == SD_ENOSPACE);
    CHECK(strstr(d.msg, "table \"t") != NULL);
    free(pn);
    free(tb);
}

/* Training and inference are the same for a seed; another seed differs. */
static void test_determinism(void)
{
    struct policy_net *a = small_trained(7, 40), *b = small_trained(7, 40);
    struct policy_net *c = small_trained(8, 40);
    struct table *tb = make_tables(30, 9);
    struct topology topo;
    struct plan p = {0}, q = {0}; /* zeroed: see out */
    struct sd_diag d = {{0}};
    size_t k;

    CHECK(a != NULL && b != NULL && c != NULL);
    if (!a || !b || !c)
        goto out;
    CHECK(memcmp(a->p, b->p, sizeof(a->p)) == 0);
    CHECK(memcmp(&a->metrics, &b->metrics, sizeof(a->metrics)) == 0);
    CHECK(memcmp(a->p, c->p, sizeof(a->p)) != 0);
    CHECK(a->metrics.iterations == 40 && a->metrics.train_devices == 4);
    CHECK(a->model_crc == policy_model_crc(net));

    topology_default(&topo, 4, 64ull << 30);
    topo.batch_size = net->batch_size;
    if (!CHECK_OK(run(tb, 30, &topo, a, NULL, &p, &d), d.msg) ||
        !CHECK_OK(run(tb, 30, &topo, a, NULL, &q, &d), d.msg))
        goto out;
    CHECK(p.nshards == q.nshards && p.cost_ms == q.cost_ms);
    for (k = 0; k < p.nshards && k < q.nshards; k++)
        CHECK(p.shards[k].device == q.shards[k].device);
    /* The MDP's cost of the placement is the evaluator's (up to float
     * rounding: the shards' latents are summed in another order). */
    {
        struct policy_env *e = NULL;

        CHECK(policy_env_new(a, net, NULL, tb, 30, &topo, OPTIMIZER_SGD, &e) ==
              0);
        for (k = 0; e != NULL && k < p.nshards; k++)
            policy_env_place(e, p.shards[k].table, p.shards[k].device);
        if (e != NULL)
            CHECK_NEAR(policy_env_cost(e), p.cost_ms, 1e-5);
        policy_env_free(e);
    }
out:
    /* A failed run leaves its plan zeroed: these free only what was made. */
    plan_destroy(&p);
    plan_destroy(&q);
    free(a);
    free(b);
    free(c);
    free(tb);
}

/* The best cost of any placement of n tables on nd devices (nd^n). */
static double brute_force(const struct table *tb, size_t n,
                          const struct topology *topo)
{
    struct policy_env *e = NULL;
    double best = INFINITY;
    long total = 1, c, x;
    size_t i;

    for (i = 0; i < n; i++)
        total *= topo->ndevices;
    if (policy_env_new(NULL, net, NULL, tb, n, topo, OPTIMIZER_SGD, &e) != 0)
        return NAN;
    for (c = 0; c < total; c++) {
        policy_env_reset(e);
        for (i = 0, x = c; i < n; i++, x /= topo->ndevices)
            policy_env_place(e, (uint32_t)i, (int32_t)(x % topo->ndevices));
        if (policy_env_cost(e) < best)
            best = policy_env_cost(e);
    }
    policy_env_free(e);
    return best;
}

/*
 * Seven tables on three devices whose optimum the model-cost LPT misses by
 * 8.0 % (under the embedded model of 2026-11-29, trained on the Zen 5
 * VM's profile): a policy trained on the task for 300 steps finds it.  (Of
 * the seeds 5 to 24, the LPT misses by over 1 % on 9 alone under this
 * model; under the model before, on 5, 9, 16 and 21, and this test used
 * 16.)
 */
static void test_optimal(void)
{
    struct table *tb = make_tables(7, 9);
    struct policy_task task = {tb, 7};
    struct policy_train_params pp;
    struct policy_net *pn = NULL;
    struct policy_env *e = NULL;
    struct topology topo;
    struct sd_diag d = {{0}};
    struct plan p;
    double best, lpt;

    topology_default(&topo, 3, 64ull << 30);
    topo.batch_size = net->batch_size;
    best = brute_force(tb, 7, &topo);
    CHECK(policy_env_new(NULL, net, NULL, tb, 7, &topo, OPTIMIZER_SGD, &e) ==
          0);
    CHECK(policy_env_rollout(e, &d) == 0);
    lpt = policy_env_cost(e);
    policy_env_free(e);
    CHECK(lpt > best * 1.01); /* the task is not one the LPT solves */

    policy_train_params_default(&pp);
    pp.seed = 4;
    pp.iterations = 300;
    pp.ndevices = 3;
    pp.mem_bytes = 64ull << 30;
    CHECK(policy_train(&pp, net, &task, 1, &task, 1, &pn, &d) == 0);
    if (pn == NULL) {
        fprintf(stderr, "optimal: %s\n", d.msg);
        free(tb);
        return;
    }
    if (CHECK_OK(run(tb, 7, &topo, pn, NULL, &p, &d), d.msg)) {
        CHECK_NEAR(p.cost_ms, best, 1e-6);
        fprintf(stderr, "optimal: %.5f ms, LPT %.5f ms, policy %.5f ms\n", best,
                lpt, p.cost_ms);
        plan_destroy(&p);
    }
    free(pn);
    free(tb);
}

/* Parses an edited copy of img; returns the code and d. */
static int parse_edit(const unsigned char *img, size_t len, size_t off,
                      unsigned char byte, bool crc, struct sd_diag *d)
{
    unsigned char *buf = malloc(len);
    struct policy_net *pn = NULL;
    int rv;

    memcpy(buf, img, len);
    buf[off] = byte;
    if (crc)
        recrc(buf, len);
    rv = policy_parse(buf, len, &pn, d);
    free(pn);
    free(buf);
    return rv;
}

static void test_format(void)
{
    struct policy_net *pn = small_trained(3, 10), *back = NULL;
    struct sd_diag d = {{0}};
    unsigned char *img;
    size_t len, prof = 4 + 4 + 7 * 4, params;
    void *buf;
    float nan = NAN;

    CHECK(pn != NULL);
    if (pn == NULL)
        return;
    pn->metrics.gate_ratio = 0.9;
    CHECK(policy_serialize(pn, &buf, &len) == 0);
    img = buf;
    CHECK(policy_parse(img, len, &back, &d) == 0);
    CHECK(back != NULL && memcmp(back, pn, sizeof(*pn)) == 0);
    free(back);

    CHECK(parse_edit(img, len, 0, 'X', false, &d) == SD_EFORMAT);
    CHECK(strstr(d.msg, "magic") != NULL);
    CHECK(parse_edit(img, len, 4, 2, false, &d) == SD_ENEWER);
    CHECK(strstr(d.msg, "version") != NULL);
    CHECK(policy_parse(img, len - 1, &back, &d) == SD_EFORMAT);
    CHECK(strstr(d.msg, "size") != NULL);
    CHECK(parse_edit(img, len, len / 2, img[len / 2] ^ 1, false, &d) ==
          SD_EFORMAT);
    CHECK(strstr(d.msg, "crc32") != NULL);
    CHECK(parse_edit(img, len, 8, 21, true, &d) == SD_EFORMAT);
    CHECK(strstr(d.msg, "architecture") != NULL);
    CHECK(parse_edit(img, len, prof, 0, true, &d) == SD_EFORMAT);
    CHECK(strstr(d.msg, "profile") != NULL);
    /* A NUL inside the profile cuts it there; what follows is dropped, so
     * the policy read is the policy it writes (found by fuzz_policy). */
    {
        unsigned char *cut = malloc(len);
        struct policy_net *again = NULL;
        void *img2 = NULL;
        size_t len2 = 0;

        CHECK(cut != NULL);
        memcpy(cut, img, len);
        cut[prof + 2] = 0;
        recrc(cut, len);
        CHECK(policy_parse(cut, len, &back, &d) == 0);
        CHECK(back != NULL && strlen(back->profile) == 2);
        CHECK(back != NULL && policy_serialize(back, &img2, &len2) == 0);
        CHECK(policy_parse(img2, len2, &again, &d) == 0);
        CHECK(again != NULL && memcmp(again, back, sizeof(*back)) == 0);
        free(again);
        free(img2);
        free(back);
        free(cut);
    }
    /* The first parameter's four bytes made a NaN, the CRC right again. */
    params = len - 4 - POL_NPARAMS * 4;
    memcpy(img + params, &nan, 4);
    recrc(img, len);
    CHECK(policy_parse(img, len, &back, &d) == SD_EFORMAT);
    CHECK(strstr(d.msg, "params[0]") != NULL);
    free(buf);
    free(pn);
}

/* The gate refuses a policy worse than size_lookup_greedy and passes one
 * better; plans refuse a missing policy and one of another model. */
static void test_gate(void)
{
    struct table *tb = make_tables(60, 22);
    struct policy_net *bad = calloc(1, sizeof(*bad)), *good = NULL;
    struct policy_task tasks[6];
    struct policy_train_params pp;
    struct dreamshard_gate g;
    struct topology topo;
    struct sd_diag d = {{0}};
    struct plan p;
    int k;

    for (k = 0; k < 6; k++) {
        tasks[k].tables = tb + 10 * k;
        tasks[k].ntables = 10;
    }
    topology_default(&topo, 4, 64ull << 30);
    topo.batch_size = net->batch_size;
    /* All logits equal: every table onto device 0. */
    snprintf(bad->profile, sizeof(bad->profile), "%s", net->profile);
    bad->model_crc = policy_model_crc(net);
    CHECK(dreamshard_gate(bad, net, tasks + 4, 2, &topo, OPTIMIZER_SGD, &g,
                          &d) == 0);
    CHECK(!g.pass && g.policy_ms > g.greedy_ms && g.planned_both == 2);

    policy_train_params_default(&pp);
    pp.iterations = 150;
    pp.mem_bytes = 64ull << 30;
    CHECK(policy_train(&pp, net, tasks, 4, tasks + 4, 2, &good, &d) == 0);
    if (good != NULL) {
        CHECK(dreamshard_gate(good, net, tasks + 4, 2, &topo, OPTIMIZER_SGD, &g,
                              &d) == 0);
        CHECK(g.pass && g.policy_ms < g.greedy_ms);
        fprintf(stderr, "gate: trained %.4f ms vs greedy %.4f ms\n",
                g.policy_ms, g.greedy_ms);
    }

    CHECK(run(tb, 10, &topo, NULL, NULL, &p, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "train") != NULL);
    bad->model_crc ^= 1;
    CHECK(run(tb, 10, &topo, bad, NULL, &p, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "train-policy") != NULL);
    CHECK(dreamshard_gate(bad, net, tasks, 1, &topo, OPTIMIZER_SGD, &g, &d) ==
          SD_EINVAL);
    free(good);
    free(bad);
    free(tb);
}

/*
 * Cancelled (or out of time) from the start, dreamshard still returns a
 * whole plan, by the model-cost LPT, and says the budget ran out; not
 * cancelled, it asks the policy for every table.
 */
static void test_cancel(void)
{
    const struct policy_net *pn = policy_embedded(NULL);
    struct table *tb = make_tables(40, 13);
    struct net_cost_model ncm;
    struct plan_options o;
    struct topology topo;
    struct sd_diag d = {{0}};
    struct policy_env *e = NULL;
    struct plan p;
    atomic_bool stop;
    size_t k;

    CHECK(pn != NULL);
    if (pn == NULL) {
        free(tb);
        return;
    }
    topology_default(&topo, 4, 64ull << 30);
    topo.batch_size = net->batch_size;
    net_cost_model_init(&ncm, net);
    plan_options_default(&o);
    o.alg = PLAN_ALG_DREAMSHARD;
    o.net = net;
    o.policy = pn;
    if (CHECK_OK(plan_run(tb, 40, &topo, &o, &ncm.cm, &p, &d), d.msg)) {
        CHECK(!p.stats.budget_exhausted && p.stats.evaluations == 40 * 4);
        plan_destroy(&p);
    }

    atomic_init(&stop, true);
    o.cancel = &stop;
    if (CHECK_OK(plan_run(tb, 40, &topo, &o, &ncm.cm, &p, &d), d.msg)) {
        CHECK(p.stats.budget_exhausted && p.stats.evaluations == 0);
        CHECK(p.nshards == 40);
        /* Every table, costliest first, on the device least loaded then
         * (no network scores them), table for table. */
        CHECK(policy_env_new(NULL, net, NULL, tb, 40, &topo, OPTIMIZER_SGD,
                             &e) == 0);
        for (k = 0; e != NULL && k < 40; k++) {
            uint32_t i = policy_env_order(e)[k];

            policy_env_place(e, i, policy_env_least_loaded(e, i));
        }
        for (k = 0; e != NULL && k < p.nshards; k++)
            CHECK(policy_env_devices(e)[p.shards[k].table] ==
                  p.shards[k].device);
        policy_env_free(e);
        plan_destroy(&p);
    }
    /* By hand: devices 0 and 1 hold two tables, 2 one, 3 none: the next
     * table goes to 3. */
    e = NULL;
    CHECK(policy_env_new(NULL, net, NULL, tb, 40, &topo, OPTIMIZER_SGD, &e) ==
          0);
    if (e != NULL) {
        policy_env_place(e, 0, 0);
        policy_env_place(e, 1, 1);
        policy_env_place(e, 2, 0);
        policy_env_place(e, 3, 1);
        policy_env_place(e, 5, 2);
        CHECK(policy_env_least_loaded(e, 4) == 3);
    }
    policy_env_free(e);

    atomic_store(&stop, false);
    o.time_budget_ms = 1e-9; /* spent before the first table */
    if (CHECK_OK(plan_run(tb, 40, &topo, &o, &ncm.cm, &p, &d), d.msg)) {
        CHECK(p.stats.budget_exhausted && p.nshards == 40);
        plan_destroy(&p);
    }
    free(tb);
}

/* A policy trained on 4 devices plans 8, 16 and 128 without retraining. */
static void test_scale(void)
{
    struct policy_net *pn = small_trained(1, 30);
    struct table *tb = make_tables(600, 17);
    static const int32_t sizes[] = {8, 16, 128};
    struct topology topo;
    struct sd_diag d = {{0}};
    struct plan p;
    int k;

    for (k = 0; pn != NULL && k < 3; k++) {
        topology_default(&topo, sizes[k], 64ull << 30);
        topo.batch_size = net->batch_size;
        if (!CHECK_OK(run(tb, 600, &topo, pn, NULL, &p, &d), d.msg))
            continue;
        CHECK(p.ndevices == sizes[k] && p.nshards == 600);
        plan_destroy(&p);
    }
    free(pn);
    free(tb);
}

/*
 * The compiled-in policies, each for the model it was trained against: the
 * embedded model's is the embedded policy; the H200 model's plans a task
 * with dreamshard on that model; the reference set has none.
 */
static void test_compiled(void)
{
    const struct cost_net *h200 = net_compiled(NET_H200_PROFILE, NULL);
    const struct policy_net *pn;
    struct table *tb = make_tables(30, 17);
    struct topology topo;
    struct sd_diag d = {{0}};
    struct plan p;

    CHECK(policy_compiled(net, &d) == policy_embedded(NULL));
    CHECK(policy_compiled(net_reference(NULL), &d) == NULL);
    CHECK(h200 != NULL);
    if (h200 == NULL)
        goto out;
    pn = policy_compiled(h200, &d);
    CHECK(pn != NULL && pn != policy_embedded(NULL));
    if (pn == NULL)
        goto out;
    CHECK(strcmp(pn->profile, NET_H200_PROFILE) == 0);
    CHECK(pn->model_crc == policy_model_crc(h200));
    topology_default(&topo, 4, 64ull << 30);
    topo.batch_size = h200->batch_size;
    if (CHECK_OK(run_on(h200, tb, 30, &topo, pn, NULL, &p, &d), d.msg)) {
        CHECK(p.ndevices == 4 && p.cost_ms > 0);
        plan_destroy(&p);
    }
    /* The cpu policy does not plan for the H200's model. */
    CHECK(run_on(h200, tb, 30, &topo, policy_embedded(NULL), NULL, &p, &d) !=
          0);
out:
    free(tb);
}

int main(void)
{
    struct sd_diag d;

    net = net_embedded(&d);
    if (net == NULL) {
        fprintf(stderr, "%s\n", d.msg);
        return 1;
    }
    test_masking();
    test_determinism();
    test_optimal();
    test_format();
    test_gate();
    test_cancel();
    test_compiled();
    test_scale();
    return tap_done();
}
