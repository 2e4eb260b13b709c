/*
 * Ensembles of cost models (planner/models/ensemble.c): quantiles by hand;
 * a tiny ensemble of nets with known constant outputs (1 .. 5 ms) gives the
 * spread and the chosen quantile of its members per shard, through the
 * cost-model adapter (scaled to the batch) and over a plan's devices; the
 * ensemble file round-trips and its refusals; a robust neuroshard plan
 * (every member searches, the quantile chooses) is never worse under the
 * quantile than member 0's own plan; bootstrap members share member 0's
 * split; the embedded ensemble, where whole, starts with the embedded
 * model.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "planner.h"

/* A net that answers `ms` for every shard of at least one table: zero
 * weights, the output bias softplus^-1(ms). */
static struct cost_net *const_net(double ms)
{
    struct cost_net *m = calloc(1, sizeof(*m));
    int i;

    snprintf(m->profile, sizeof(m->profile), "cpu/test/4096");
    m->batch_size = 4096;
    for (i = 0; i < NET_IN; i++)
        m->std[i] = 1;
    m->p[NET_B4] = (float)log(expm1(ms));
    return m;
}

static void make_table(struct table *t, int i)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "t%d", i);
    t->rows = 1000 + 500 * i;
    t->dim = 16;
    t->pooling_factor = 2 + i;
    t->bins[0] = 0.6;
    t->bins[3] = 0.4;
}

static void test_quantile(void)
{
    double v[5];

    memcpy(v, (double[]){5, 1, 4, 2, 3}, sizeof(v));
    CHECK(net_quantile(v, 5, 0.5) == 3);
    memcpy(v, (double[]){5, 1, 4, 2, 3}, sizeof(v));
    CHECK_NEAR(net_quantile(v, 5, 0.1), 1.4, 1e-12); /* 1 + 0.4 x (2 - 1) */
    memcpy(v, (double[]){5, 1, 4, 2, 3}, sizeof(v));
    CHECK_NEAR(net_quantile(v, 5, 0.9), 4.6, 1e-12);
    memcpy(v, (double[]){5, 1, 4, 2, 3}, sizeof(v));
    CHECK(net_quantile(v, 5, 0) == 1 && net_quantile(v, 5, 1) == 5);
    v[0] = 7;
    CHECK(net_quantile(v, 1, 0.3) == 7 && net_quantile(v, 0, 0.5) == 0);
}

/* Members answering 3, 1, 5, 2, 4 ms in that order. */
static struct net_ensemble *known_ensemble(void)
{
    static const double ms[5] = {3, 1, 5, 2, 4};
    struct net_ensemble *e = calloc(1, sizeof(*e));
    int i;

    for (i = 0; i < 5; i++)
        e->m[i] = const_net(ms[i]);
    e->k = 5;
    return e;
}

static void test_spread(void)
{
    struct net_ensemble *e = known_ensemble();
    struct net_ensemble_cost_model ecm;
    struct shard_item items[2];
    struct net_spread s;
    struct topology topo;
    struct table t[3];
    struct plan p;
    struct plan_spread ps;
    int i;

    for (i = 0; i < 3; i++)
        make_table(&t[i], i);
    items[0] = (struct shard_item){&t[0], 16};
    items[1] = (struct shard_item){&t[1], 8};
    net_ensemble_shard(e, NULL, items, 2, 0.5, &s);
    CHECK_NEAR(s.point, 3, 1e-5);
    CHECK_NEAR(s.quantile, 3, 1e-5);
    CHECK_NEAR(s.lo, 1, 1e-5);
    CHECK_NEAR(s.hi, 5, 1e-5);
    net_ensemble_shard(e, NULL, items, 1, 0.75, &s);
    CHECK_NEAR(s.quantile, 4, 1e-5);

    /* The adapter: the q-quantile, scaled to the topology's batch. */
    topology_default(&topo, 2, 1ull << 30);
    topo.batch_size = 8192;
    net_ensemble_cost_model_init(&ecm, e, 0.25);
    CHECK_NEAR(ecm.cm.shard_ms(ecm.cm.ctx, &topo, items, 2), 2 * 2, 1e-5);
    CHECK(ecm.cm.shard_ms(ecm.cm.ctx, &topo, items, 0) == 0);
    CHECK(strstr(ecm.cm.name, "q0.25 of 5") != NULL);

    /* A plan: device 0 holds two tables, device 1 one; each member
     * answers its constant on every device. */
    topo.batch_size = 4096;
    CHECK(plan_init(&p, 2) == 0);
    CHECK(plan_add(&p, 0, 0, 0, 16) == 0 && plan_add(&p, 1, 0, 0, 16) == 0 &&
          plan_add(&p, 2, 1, 0, 16) == 0);
    CHECK(net_ensemble_plan_spread(e, NULL, &p, false, t, 3, &topo,
                                   OPTIMIZER_SGD, NULL, &ps) == 0);
    CHECK(ps.members == 5 && ps.ndevices == 2);
    if (ps.ndevices == 2) {
        CHECK_NEAR(ps.lo[0], 1, 1e-5);
        CHECK_NEAR(ps.hi[0], 5, 1e-5);
        CHECK_NEAR(ps.lo[1], 1, 1e-5);
        CHECK_NEAR(ps.hi[1], 5, 1e-5);
        /* Plan cost: the member's compute plus the same comm. */
        CHECK_NEAR(ps.cost_hi - ps.cost_lo, 4, 1e-5);
    }
    /* With a memo per member: the same spread, and a second spread of the
     * plan answers every member's latents from its memo. */
    {
        struct net_memo *memos[5];
        struct net_memo_stats st;
        struct plan_spread again;
        int round;

        for (i = 0; i < 5; i++)
            memos[i] = net_memo_new(e->m[i], 64);
        for (round = 0; round < 2; round++) {
            CHECK(net_ensemble_plan_spread(e, memos, &p, false, t, 3, &topo,
                                           OPTIMIZER_SGD, NULL, &again) == 0);
            CHECK(again.cost_lo == ps.cost_lo && again.cost_hi == ps.cost_hi);
            CHECK(again.ndevices == 2 && again.lo[1] == ps.lo[1] &&
                  again.hi[1] == ps.hi[1]);
            plan_spread_free(&again);
        }
        for (i = 0; i < 5; i++) {
            net_memo_stats(memos[i], &st);
            CHECK(st.misses == 3 && st.hits >= 3); /* 3 tables, each once */
            net_memo_free(memos[i]);
        }
    }
    /* A plan member 0's model scored: its costs stand for member 0's, the
     * same spread, and member 0's memo is not asked. */
    {
        struct net_memo *memos[5];
        struct net_memo_stats st;
        struct net_cost_model ncm;
        struct plan_spread scored;

        net_cost_model_init(&ncm, e->m[0]);
        CHECK(plan_evaluate(&p, t, 3, &topo, OPTIMIZER_SGD, &ncm.cm) == 0);
        for (i = 0; i < 5; i++)
            memos[i] = net_memo_new(e->m[i], 64);
        CHECK(net_ensemble_plan_spread(e, memos, &p, true, t, 3, &topo,
                                       OPTIMIZER_SGD, NULL, &scored) == 0);
        CHECK(scored.members == 5 && scored.ndevices == 2);
        CHECK(scored.cost_lo == ps.cost_lo && scored.cost_hi == ps.cost_hi);
        for (i = 0; scored.ndevices == 2 && i < 2; i++)
            CHECK(scored.lo[i] == ps.lo[i] && scored.hi[i] == ps.hi[i]);
        net_memo_stats(memos[0], &st);
        CHECK(st.hits == 0 && st.misses == 0);
        net_memo_stats(memos[4], &st);
        CHECK(st.misses == 3);
        for (i = 0; i < 5; i++)
            net_memo_free(memos[i]);
        plan_spread_free(&scored);
    }
    plan_spread_free(&ps);
    /* A stop already set: the spread is given up, not an error. */
    {
        atomic_bool stop = true;

        CHECK(net_ensemble_plan_spread(e, NULL, &p, false, t, 3, &topo,
                                       OPTIMIZER_SGD, &stop, &ps) == 0);
        CHECK(ps.members == 0 && ps.lo == NULL);
    }
    /* Evaluated under the median, the plan's devices cost 3 ms. */
    net_ensemble_cost_model_init(&ecm, e, 0.5);
    CHECK(plan_evaluate(&p, t, 3, &topo, OPTIMIZER_SGD, &ecm.cm) == 0);
    CHECK_NEAR(p.devices[0].compute_ms, 3, 1e-5);
    plan_destroy(&p);
    net_ensemble_free(e);
}

static void test_file(void)
{
    struct net_ensemble *e = known_ensemble(), *back = NULL, *one = NULL;
    struct sd_diag d;
    unsigned char *img = NULL, *bad;
    void *buf = NULL, *nimg = NULL;
    size_t len = 0, nlen = 0;
    int i;

    CHECK(net_ensemble_serialize(e, &buf, &len) == 0);
    img = buf;
    CHECK(img != NULL && memcmp(img, "SDCE", 4) == 0);
    CHECK(net_ensemble_parse(img, len, &back, &d) == 0);
    CHECK(back != NULL && back->k == 5);
    for (i = 0; back != NULL && i < 5; i++)
        CHECK(memcmp(back->m[i]->p, e->m[i]->p, sizeof(e->m[i]->p)) == 0);
    net_ensemble_free(back);
    back = NULL;
    /* A flipped byte: the checksum. */
    bad = malloc(len);
    memcpy(bad, img, len);
    bad[len / 2] ^= 1;
    CHECK(net_ensemble_parse(bad, len, &back, &d) == SD_EFORMAT &&
          strstr(d.msg, "checksum") != NULL && back == NULL);
    free(bad);
    CHECK(net_ensemble_parse(img, len - 1, &back, &d) == SD_EFORMAT);
    /* The members by the header alone (a listing's figure). */
    CHECK(net_ensemble_members(img, 12) == 5 &&
          net_ensemble_members(img, 11) == 0 &&
          net_ensemble_members("SDCX", 4) == 0);
    /* A plain model file is an ensemble of one. */
    CHECK(net_serialize(e->m[0], &nimg, &nlen) == 0);
    CHECK(net_ensemble_members(nimg, 12) == 1);
    CHECK(net_ensemble_parse(nimg, nlen, &one, &d) == 0 && one != NULL &&
          one->k == 1);
    /* ... and an ensemble of one is written as its member's model file. */
    if (one != NULL) {
        void *oimg = NULL;
        size_t olen = 0;

        CHECK(net_ensemble_serialize(one, &oimg, &olen) == 0 && olen == nlen &&
              memcmp(oimg, nimg, nlen) == 0);
        free(oimg);
    }
    net_ensemble_free(one);
    free(nimg);
    /* Members of two profiles are refused. */
    snprintf(e->m[3]->profile, sizeof(e->m[3]->profile), "cpu/other/4096");
    free(buf);
    CHECK(net_ensemble_serialize(e, &buf, &len) == 0);
    CHECK(net_ensemble_parse(buf, len, &back, &d) == SD_EFORMAT &&
          strstr(d.msg, "member 3") != NULL);
    free(buf);
    net_ensemble_free(e);
}

/* A model like the embedded one with its weights nudged by `seed`. */
static struct cost_net *nudged(uint64_t seed)
{
    const struct cost_net *base = net_embedded(NULL);
    struct cost_net *m = malloc(sizeof(*m));
    struct rng g;
    int i;

    *m = *base;
    rng_seed(&g, seed);
    for (i = 0; i < NET_NPARAMS; i++)
        m->p[i] *= (float)(1 + 0.15 * rng_normal(&g));
    return m;
}

static void test_robust(void)
{
    struct net_ensemble e = {0};
    struct net_ensemble_cost_model ecm;
    struct synth_params sp;
    struct plan_options o;
    struct topology topo;
    struct table *tables = NULL;
    struct plan robust, single;
    struct sd_diag d = {{0}};
    double best, worst;
    int64_t runs = 0, states = 0, evals = 0;
    int i;

    for (i = 0; i < 4; i++)
        e.m[i] = i == 0 ? nudged(0) : nudged((uint64_t)i);
    e.k = 4;
    synth_params_default(&sp);
    sp.count = 30;
    sp.seed = 3;
    sp.batch_size = 512;
    CHECK(synth_tables(&sp, 1, &tables) == 0);
    topology_default(&topo, 4, 16ull << 30);
    topo.batch_size = 4096;
    net_ensemble_cost_model_init(&ecm, &e, 0.9);
    plan_options_default(&o);
    o.alg = PLAN_ALG_NEUROSHARD;
    o.net = e.m[0];
    o.threads = 1;
    if (plan_run(tables, sp.count, &topo, &o, &ecm.cm, &single, &d) != 0) {
        fprintf(stderr, "plan: %s\n", d.msg);
        CHECK(false);
        goto out;
    }
    o.ensemble = &e;
    o.quantile = 0.9;
    if (plan_run(tables, sp.count, &topo, &o, &ecm.cm, &robust, &d) != 0) {
        fprintf(stderr, "robust plan: %s\n", d.msg);
        CHECK(false);
        plan_destroy(&single);
        goto out;
    }
    /* Both scored by the 0.9-quantile; the robust one chose among member
     * 0's plan and the others': the least of every member's own plan. */
    CHECK(robust.cost_ms <= single.cost_ms * (1 + 1e-12));
    o.ensemble = NULL;
    for (i = 0, best = INFINITY, worst = 0; i < e.k; i++) {
        struct plan own;

        o.net = e.m[i];
        if (!CHECK_OK(plan_run(tables, sp.count, &topo, &o, &ecm.cm, &own, &d),
                      d.msg))
            continue;
        best = own.cost_ms < best ? own.cost_ms : best;
        worst = own.cost_ms > worst ? own.cost_ms : worst;
        runs += own.stats.greedy_runs;
        states += own.stats.states;
        evals += own.stats.evaluations;
        plan_destroy(&own);
    }
    CHECK(robust.cost_ms == best);
    /* Its stats count every member's search (a search's stats count the
     * alternatives it weighed), not the kept one's alone. */
    CHECK(!robust.stats.budget_exhausted && robust.stats.greedy_runs == runs &&
          robust.stats.states == states && robust.stats.evaluations == evals &&
          runs > single.stats.greedy_runs);
    CHECK(worst > best); /* the members disagree: the choice matters */
    CHECK(strcmp(robust.algorithm, "neuroshard") == 0);
    /* Each member's search through a memo of its own, then the scores
     * under the quantile too: the same plan to the bit, each member's
     * latents asked for again and again. */
    {
        struct net_memo *mm[4];
        struct net_memo_stats st;
        struct plan memoed;
        int pass;

        for (i = 0; i < 4; i++)
            mm[i] = net_memo_for_tables(e.m[i], sp.count);
        o.net = e.m[0];
        o.ensemble = &e;
        o.ensemble_memos = mm;
        for (pass = 0; pass < 2; pass++) {
            ecm.memos = pass == 1 ? mm : NULL;
            if (CHECK_OK(
                    plan_run(tables, sp.count, &topo, &o, &ecm.cm, &memoed, &d),
                    d.msg)) {
                bool same = memoed.cost_ms == robust.cost_ms &&
                            memoed.nshards == robust.nshards;
                size_t k;

                for (k = 0; same && k < robust.nshards; k++) {
                    const struct shard *a = &memoed.shards[k],
                                       *b = &robust.shards[k];

                    same = a->table == b->table && a->device == b->device &&
                           a->col_offset == b->col_offset &&
                           a->col_width == b->col_width &&
                           a->row_offset == b->row_offset &&
                           a->row_count == b->row_count &&
                           a->scheme == b->scheme;
                }
                CHECK(same);
                for (i = 0; i < 4; i++) {
                    net_memo_stats(mm[i], &st);
                    CHECK(st.misses > 0 && st.hits > st.misses);
                }
                plan_destroy(&memoed);
            }
        }
        /* The quantile's score of a shard through fresh memos: the same
         * ms, each member's latents computed into its own. */
        {
            struct shard_item it[2] = {{&tables[0], tables[0].dim},
                                       {&tables[1], tables[1].dim}};
            double plain, memoed_ms;

            for (i = 0; i < 4; i++) {
                net_memo_free(mm[i]);
                mm[i] = net_memo_for_tables(e.m[i], sp.count);
            }
            ecm.memos = NULL;
            plain = ecm.cm.shard_ms(ecm.cm.ctx, &topo, it, 2);
            ecm.memos = mm;
            memoed_ms = ecm.cm.shard_ms(ecm.cm.ctx, &topo, it, 2);
            CHECK(plain == memoed_ms);
            for (i = 0; i < 4; i++) {
                net_memo_stats(mm[i], &st);
                CHECK(st.misses == 2);
            }
        }
        ecm.memos = NULL;
        o.ensemble = NULL;
        o.ensemble_memos = NULL;
        for (i = 0; i < 4; i++)
            net_memo_free(mm[i]);
    }
    fprintf(stderr, "robust plan %.4f ms, member 0's %.4f ms (q 0.9)\n",
            robust.cost_ms, single.cost_ms);
    plan_destroy(&robust);
    plan_destroy(&single);
out:
    for (i = 0; i < 4; i++)
        free(e.m[i]);
    free(tables);
}

/* Members of one seed train on the same split; member 0 is the plain
 * model, bit for bit; a member's weights are its own.  Shards of 1 to 4
 * tables: a bootstrap may repeat the largest (the sanitizer builds check
 * the work areas hold it). */
static void test_members(void)
{
    struct train_sample s[40];
    struct table t[43];
    struct train_params p;
    struct cost_net *m0 = NULL, *plain = NULL, *m1 = NULL;
    uint8_t split0[40], split1[40];
    int i;

    for (i = 0; i < 43; i++)
        make_table(&t[i], i);
    for (i = 0; i < 40; i++)
        s[i] = (struct train_sample){&t[i], (size_t)(i % 4 + 1), 1.0 + 0.1 * i};
    train_params_default(&p);
    p.max_epochs = 3;
    p.seed = 9;
    CHECK(net_train(&p, s, 40, "cpu/test/4096", 4096, &plain, NULL) == 0);
    p.split = split0;
    CHECK(net_train(&p, s, 40, "cpu/test/4096", 4096, &m0, NULL) == 0);
    p.member = 1;
    p.split = split1;
    CHECK(net_train(&p, s, 40, "cpu/test/4096", 4096, &m1, NULL) == 0);
    CHECK(m0 != NULL && plain != NULL && m1 != NULL);
    if (m0 == NULL || plain == NULL || m1 == NULL)
        goto out;
    CHECK(memcmp(m0->p, plain->p, sizeof(m0->p)) == 0);
    CHECK(memcmp(split0, split1, sizeof(split0)) == 0);
    CHECK(memcmp(m0->p, m1->p, sizeof(m0->p)) != 0);
    {
        int ntest = 0, nval = 0;

        for (i = 0; i < 40; i++) {
            ntest += split0[i] == TRAIN_SPLIT_TEST;
            nval += split0[i] == TRAIN_SPLIT_VAL;
        }
        CHECK(ntest == 4 && nval == 4);
    }
out:
    free(m0);
    free(m1);
    free(plain);
}

static void test_embedded(void)
{
    const struct net_ensemble *e = net_ensemble_embedded(NULL);
    const struct cost_net *m = net_embedded(NULL);

    CHECK(m != NULL);
    CHECK(e != NULL);
    if (e == NULL || m == NULL)
        return;
    CHECK(e->k >= 1 && memcmp(e->m[0]->p, m->p, sizeof(m->p)) == 0);
    CHECK(strcmp(e->m[0]->profile, m->profile) == 0);
}

/*
 * Each compiled-in model with an ensemble gets the one whose member 0 it
 * is: the cpu default the embedded ensemble, the H200's its own (five
 * members, all of its profile, the others not equal to it); the reference
 * set and a model nudged off the H200's get none.
 */
static void test_compiled(void)
{
    const struct cost_net *cpu = net_embedded(NULL),
                          *h200 = net_compiled(NET_H200_PROFILE, NULL);
    const struct net_ensemble *e;
    struct cost_net *off;
    int32_t i;

    CHECK(cpu != NULL && h200 != NULL);
    if (cpu == NULL || h200 == NULL)
        return;
    CHECK(net_ensemble_compiled(cpu) == net_ensemble_embedded(NULL));
    e = net_ensemble_compiled(h200);
    CHECK(e != NULL && e != net_ensemble_embedded(NULL));
    if (e == NULL)
        return;
    CHECK(e->k == 5 && memcmp(e->m[0]->p, h200->p, sizeof(h200->p)) == 0);
    for (i = 0; i < e->k; i++)
        CHECK(strcmp(e->m[i]->profile, NET_H200_PROFILE) == 0 &&
              e->m[i]->batch_size == h200->batch_size);
    for (i = 1; i < e->k; i++)
        CHECK(memcmp(e->m[i]->p, h200->p, sizeof(h200->p)) != 0);
    CHECK(net_ensemble_compiled(net_reference(NULL)) == NULL);
    CHECK(net_ensemble_compiled(NULL) == NULL);
    off = malloc(sizeof(*off));
    CHECK(off != NULL);
    if (off == NULL)
        return;
    *off = *h200;
    off->p[0] += 1e-3f;
    CHECK(net_ensemble_compiled(off) == NULL);
    free(off);
}

int main(void)
{
    test_quantile();
    test_spread();
    test_file();
    test_robust();
    test_members();
    test_embedded();
    test_compiled();
    return tap_done();
}
