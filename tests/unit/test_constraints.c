/*
 * Placement constraints, for every algorithm: pinned tables go whole to
 * their devices and the rest plans around them; devices of different
 * capacities are each filled within their own; pins that cannot hold are
 * refused naming the device; a cancelled search stops.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "planner.h"

#define NT 24

static const struct cost_net *net;

/* NT tables of 16..128 columns and 0.1..1 M rows; table 0 is the largest
 * and busiest, the one a search would split. */
static void make_tables(struct table *t)
{
    static const int32_t dims[] = {16, 32, 64, 128};
    struct rng g;
    size_t i;
    int k;

    rng_seed(&g, 5);
    memset(t, 0, NT * sizeof(*t));
    for (i = 0; i < NT; i++) {
        double left = 1;

        snprintf(t[i].name, sizeof(t[i].name), "t%zu", i);
        t[i].rows = 100000 + (int64_t)(rng_uniform(&g) * 9e5);
        t[i].dim = dims[rng_below(&g, 4)];
        t[i].pooling_factor = 1 + rng_uniform(&g) * 20;
        for (k = 0; k < 6; k++) {
            t[i].bins[k] = left * (0.3 + 0.4 * rng_uniform(&g));
            left -= t[i].bins[k];
        }
    }
    t[0].rows = 2000000;
    t[0].dim = 128;
    t[0].pooling_factor = 150;
}

/* The tables on 4 devices of mem bytes, at the model's batch. */
static void setup(struct table *tb, struct topology *topo, uint64_t mem)
{
    make_tables(tb);
    topology_default(topo, 4, mem);
    topo->batch_size = net->batch_size;
}

static int run(const struct table *tb, const struct topology *topo,
               struct plan_options *o, struct plan *p, struct sd_diag *d)
{
    struct net_cost_model ncm;

    net_cost_model_init(&ncm, net);
    o->net = net;
    o->policy = policy_embedded(NULL); /* dreamshard's */
    return plan_run(tb, NT, topo, o, &ncm.cm, p, d);
}

/* The shards of table i: how many, and whether all are on device r whole. */
static bool whole_on(const struct plan *p, const struct table *tb, uint32_t i,
                     int32_t r)
{
    size_t k, n = 0;
    bool ok = true;

    for (k = 0; k < p->nshards; k++) {
        const struct shard *s = &p->shards[k];

        if (s->table != i)
            continue;
        n++;
        ok = ok && s->device == r && s->col_offset == 0 &&
             s->col_width == tb[i].dim;
    }
    return n == 1 && ok;
}

/* Every algorithm keeps the pins and still places everything. */
static void test_pins(void)
{
    struct table tb[NT];
    int32_t pins[NT];
    struct topology topo;
    struct plan_options o;
    struct plan p;
    struct sd_diag d = {{0}};
    int a;
    size_t i;

    setup(tb, &topo, 16ull << 30);
    /* Pins that move what neuroshard would place otherwise: table 0 off
     * its device, with table 5 beside it, and table 7 onto that device. */
    plan_options_default(&o);
    o.alg = PLAN_ALG_NEUROSHARD;
    if (!CHECK_OK(run(tb, &topo, &o, &p, &d), d.msg))
        return; /* no plan to pin against */
    for (i = 0; i < NT; i++)
        pins[i] = -1;
    for (i = 0; i < p.nshards && p.shards[i].table != 0; i++)
        ;
    pins[7] = p.shards[i].device;
    pins[0] = pins[5] = (pins[7] + 1) % 4;
    CHECK(!whole_on(&p, tb, 0, pins[0]));
    plan_destroy(&p);

    for (a = 0; a < PLAN_ALG_COUNT; a++) {
        plan_options_default(&o);
        o.alg = (enum plan_alg)a;
        o.pins = pins;
        if (run(tb, &topo, &o, &p, &d) != 0) {
            fprintf(stderr, "%s: %s\n", plan_alg_name(o.alg), d.msg);
            CHECK(0);
            continue;
        }
        CHECK(whole_on(&p, tb, 0, pins[0]));
        CHECK(whole_on(&p, tb, 5, pins[5]));
        CHECK(whole_on(&p, tb, 7, pins[7]));
        /* plan_run validated the rest: every column once, memory. */
        CHECK(p.nshards >= NT);
        plan_destroy(&p);
    }

    /* Everything pinned: the plan is the pins. */
    for (i = 0; i < NT; i++)
        pins[i] = (int32_t)(i % 4);
    plan_options_default(&o);
    o.alg = PLAN_ALG_NEUROSHARD;
    o.pins = pins;
    if (!CHECK_OK(run(tb, &topo, &o, &p, &d), d.msg))
        return;
    for (i = 0; i < NT; i++)
        CHECK(whole_on(&p, tb, (uint32_t)i, (int32_t)(i % 4)));
    CHECK(p.stats.splits == 0 && p.stats.moves == 0);
    plan_destroy(&p);
}

/* Pins that cannot hold: a device out of range, a device overfilled. */
static void test_bad_pins(void)
{
    struct table tb[NT];
    int32_t pins[NT];
    struct topology topo;
    struct plan_options o;
    struct plan p;
    struct sd_diag d = {{0}};
    uint64_t two;
    size_t i;
    int a;

    make_tables(tb);
    for (i = 0; i < NT; i++)
        pins[i] = -1;
    two = shard_bytes(&tb[1], tb[1].dim, OPTIMIZER_SGD) +
          shard_bytes(&tb[2], tb[2].dim, OPTIMIZER_SGD);
    setup(tb, &topo, two - 1);
    for (a = 0; a < PLAN_ALG_COUNT; a++) {
        plan_options_default(&o);
        o.alg = (enum plan_alg)a;
        o.pins = pins;
        pins[1] = 4;
        CHECK(run(tb, &topo, &o, &p, &d) == SD_EINVAL);
        CHECK(strstr(d.msg, "\"t1\"") && strstr(d.msg, "device 4"));
        pins[1] = 2;
        pins[2] = 2;
        CHECK(run(tb, &topo, &o, &p, &d) == SD_ENOSPACE);
        CHECK(strstr(d.msg, "device 2") && strstr(d.msg, "\"t2\""));
        pins[2] = -1;
    }

    /* The algorithms' own entry points check pins too. */
    pins[1] = 99;
    plan_options_default(&o);
    o.net = net;
    o.pins = pins;
    CHECK(plan_neuroshard(tb, NT, &topo, &o, &p, &d) == SD_EINVAL);
    o.alg = PLAN_ALG_SIZE_GREEDY;
    CHECK(plan_baseline(tb, NT, &topo, &o, &p, &d) == SD_EINVAL);
    CHECK(plan_torchrec_greedy(tb, NT, &topo, OPTIMIZER_SGD, pins, NULL, &p,
                               &d) == SD_EINVAL);
    {
        double cost[NT] = {0};

        CHECK(plan_greedy_lpt(tb, NT, cost, pins, &topo, OPTIMIZER_SGD, &p,
                              &d) == SD_EINVAL);
    }
}

/* Devices of different capacities: the small ones get what fits them, the
 * plan uses the large ones for the rest, and every algorithm stays within
 * each device's own capacity (plan_run validates it). */
static void test_capacities(void)
{
    struct table tb[NT];
    struct topology topo;
    struct plan_options o;
    struct plan p;
    struct sd_diag d = {{0}};
    uint64_t total = 0, caps[4], used[4];
    size_t i, k;
    int a;

    make_tables(tb);
    for (i = 0; i < NT; i++)
        total += shard_bytes(&tb[i], tb[i].dim, OPTIMIZER_SGD);
    /* Two devices hold 10 % of the tables each, two 45 %: no uniform
     * capacity of the same total would do, and the small two cannot take
     * table 0 whole. */
    caps[0] = caps[2] = total / 10;
    caps[1] = caps[3] = total * 45 / 100 + (1 << 20);
    CHECK(shard_bytes(&tb[0], tb[0].dim, OPTIMIZER_SGD) > caps[0]);
    topology_default(&topo, 4, 0);
    topo.mem_by_device = caps;
    topo.batch_size = net->batch_size;
    CHECK(topology_validate(&topo, &d) == 0);
    CHECK(topology_mem(&topo, 1) == caps[1]);
    CHECK(topology_mem_max(&topo) == caps[1]);
    for (a = 0; a < PLAN_ALG_COUNT; a++) {
        int rv;

        plan_options_default(&o);
        o.alg = (enum plan_alg)a;
        rv = run(tb, &topo, &o, &p, &d);
        CHECK(rv == 0);
        if (rv != 0) {
            fprintf(stderr, "%s: %s\n", plan_alg_name(o.alg), d.msg);
            continue;
        }
        memset(used, 0, sizeof(used));
        for (k = 0; k < p.nshards; k++)
            used[p.shards[k].device] += shard_bytes(
                &tb[p.shards[k].table], p.shards[k].col_width, OPTIMIZER_SGD);
        for (k = 0; k < 4; k++)
            CHECK(used[k] <= caps[k]);
        CHECK(used[1] + used[3] > used[0] + used[2]);
        plan_destroy(&p);
    }

    /* A plan that fits the large devices but not a small one. */
    CHECK(plan_init(&p, 4) == 0);
    for (i = 0; i < NT; i++)
        CHECK(plan_add(&p, (uint32_t)i,
                       i == 0 ? 0 : 1 + (int32_t)(i % 3) / 2 * 2, 0,
                       tb[i].dim) == 0);
    CHECK(plan_validate(&p, tb, NT, &topo, OPTIMIZER_SGD, &d) == SD_ENOSPACE);
    CHECK(strstr(d.msg, "device 0") != NULL);
    plan_destroy(&p);

    /* A capacity of 0 is refused. */
    caps[2] = 0;
    CHECK(topology_validate(&topo, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "device 2") != NULL);
}

/* The shards of table i in p, and how many of them are on devices
 * [lo, hi). */
static size_t shards_of(const struct plan *p, uint32_t i, int32_t lo,
                        int32_t hi, size_t *within)
{
    size_t k, n = 0;

    *within = 0;
    for (k = 0; k < p->nshards; k++) {
        if (p->shards[k].table != i)
            continue;
        n++;
        *within += p->shards[k].device >= lo && p->shards[k].device < hi;
    }
    return n;
}

/*
 * The neuroshard search keeps constraints and pins whichever of its parts
 * places a table (plan_run() refuses a plan that does not: every run here
 * must plan), on 2 hosts of 2 devices:
 *  - table 0, which the column search cuts, held to table-wise: whole;
 *  - table 0 in row blocks by its constraint, on host 1: its blocks there,
 *    and the search of the other tables, numbered anew without it, keeps
 *    their pins (tables 5 and 7) and hosts (tables 9 to 14, alternating);
 *  - table 0 in row blocks on any host, table 1 pinned to device 0 with no
 *    room left there for a block: the blocks go to host 1;
 *  - tables 0 to 11 held to host 0, the light rest free: the local search
 *    finds no step that pays within the hosts, none that leaves one.
 */
static void test_search_constraints(void)
{
    struct table tb[NT];
    struct table_constraint cons[NT];
    int32_t pins[NT];
    struct topology topo;
    struct plan_options o;
    struct plan p;
    struct sd_diag d = {{0}};
    size_t i, n, in;
    uint64_t block;

    setup(tb, &topo, 16ull << 30);
    topo.devices_per_host = 2;
    for (i = 0; i < NT; i++) {
        cons[i] = (struct table_constraint){.host = -1};
        pins[i] = -1;
    }
    plan_options_default(&o);
    o.alg = PLAN_ALG_NEUROSHARD;
    if (CHECK_OK(run(tb, &topo, &o, &p, &d), d.msg)) {
        CHECK(shards_of(&p, 0, 0, 4, &in) > 1); /* cut when it may be */
        plan_destroy(&p);
    }
    cons[0].schemes = 1u << SCHEME_TW;
    o.constraints = cons;
    if (CHECK_OK(run(tb, &topo, &o, &p, &d), d.msg)) {
        CHECK(shards_of(&p, 0, 0, 4, &in) == 1 && p.shards[0].col_width == 128);
        plan_destroy(&p);
    }

    cons[0] =
        (struct table_constraint){.host = 1, .schemes = 1u << SCHEME_TWRW};
    for (i = 9; i <= 14; i++)
        cons[i].host = (int32_t)(i % 2);
    pins[5] = 0;
    pins[7] = 3;
    o.pins = pins;
    if (run(tb, &topo, &o, &p, &d) != 0) {
        CHECK(!"planned with row blocks, pins and hosts");
        fprintf(stderr, "%s\n", d.msg);
    } else {
        n = shards_of(&p, 0, 2, 4, &in);
        CHECK(n == 2 && in == 2);
        plan_destroy(&p);
    }

    for (i = 0; i < NT; i++) {
        cons[i] = (struct table_constraint){.host = -1};
        pins[i] = -1;
        if (i >= 2)
            tb[i].rows /= 10;
    }
    cons[0].schemes = 1u << SCHEME_TWRW;
    tb[1].rows = 2000000;
    tb[1].dim = 128;
    pins[1] = 0;
    block = shard_bytes(&tb[0], tb[0].dim, OPTIMIZER_SGD) / 2;
    topo.mem_bytes = shard_bytes(&tb[1], 128, OPTIMIZER_SGD) + block * 4 / 5;
    if (run(tb, &topo, &o, &p, &d) != 0) {
        CHECK(!"planned with row blocks beside a pinned table");
        fprintf(stderr, "%s\n", d.msg);
    } else {
        n = shards_of(&p, 0, 2, 4, &in);
        CHECK(n == 2 && in == 2);
        plan_destroy(&p);
    }
}

/* A cancelled search ends at once with the plan it has. */
static void test_cancel(void)
{
    struct table tb[NT];
    struct topology topo;
    struct plan_options o;
    struct plan p;
    struct sd_diag d = {{0}};
    atomic_bool stop;

    setup(tb, &topo, 16ull << 30);
    plan_options_default(&o);
    o.alg = PLAN_ALG_NEUROSHARD;
    atomic_init(&stop, true);
    o.cancel = &stop;
    if (CHECK_OK(run(tb, &topo, &o, &p, &d), d.msg)) {
        CHECK(p.stats.budget_exhausted);
        CHECK(p.stats.levels <= 1 && p.stats.moves == 0);
        plan_destroy(&p);
    }
    atomic_store(&stop, false);
    if (CHECK_OK(run(tb, &topo, &o, &p, &d), d.msg)) {
        CHECK(!p.stats.budget_exhausted);
        plan_destroy(&p);
    }
}

int main(void)
{
    struct sd_diag d = {{0}};

    net = net_embedded(&d);
    if (!net) {
        fprintf(stderr, "embedded model: %s\n", d.msg);
        return 1;
    }
    test_pins();
    test_bad_pins();
    test_capacities();
    test_search_constraints();
    test_cancel();
    return tap_done();
}
