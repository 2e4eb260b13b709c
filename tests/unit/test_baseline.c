/* The baselines on small cases checked by hand, and the no-room error. */
#include <string.h>

#include "harness.h"
#include "planner.h"

static void make(struct table *t, const char *name, int64_t rows, int32_t dim,
                 double pf)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->rows = rows;
    t->dim = dim;
    t->pooling_factor = pf;
}

static int32_t device_of(const struct plan *p, uint32_t table)
{
    size_t k;

    for (k = 0; k < p->nshards; k++)
        if (p->shards[k].table == table)
            return p->shards[k].device;
    return -1;
}

static int run(const struct table *tb, size_t n, const struct topology *t,
               enum plan_alg alg, struct plan *p, struct sd_diag *d)
{
    struct plan_options o;

    plan_options_default(&o);
    o.alg = alg;
    o.seed = 7;

    return plan_run(tb, n, t, &o, &cost_model_analytic, p, d);
}

/* dims 64, 32, 32, 16, 16, 8 on 2 devices, by hand: equal costs go in
 * descending index order (the original pops from an ascending sort), and
 * equal loads go to the device with fewer bytes, then the lower id:
 * t0 -> 0 [64, 0]; t2 -> 1 [64, 32]; t1 -> 1 [64, 64]; t4 -> 0 [80, 64];
 * t3 -> 1 [80, 80]; t5 -> 0 [88, 80]. */
static void test_dim_greedy(void)
{
    struct table tb[6];
    struct topology t;
    struct sd_diag d = {{0}};
    struct plan p;
    int32_t load[2] = {0, 0};
    size_t k;

    make(&tb[0], "t0", 1000, 64, 1);
    make(&tb[1], "t1", 1000, 32, 1);
    make(&tb[2], "t2", 1000, 32, 1);
    make(&tb[3], "t3", 1000, 16, 1);
    make(&tb[4], "t4", 1000, 16, 1);
    make(&tb[5], "t5", 1000, 8, 1);
    topology_default(&t, 2, 1ull << 30);
    if (!CHECK_OK(run(tb, 6, &t, PLAN_ALG_DIM_GREEDY, &p, &d), d.msg))
        return;
    CHECK(device_of(&p, 0) == 0);
    CHECK(device_of(&p, 1) == 1 && device_of(&p, 2) == 1);
    for (k = 0; k < p.nshards; k++)
        load[p.shards[k].device] += p.shards[k].col_width;
    CHECK(load[0] == 88 && load[1] == 80);
    CHECK(strcmp(p.algorithm, "dim_greedy") == 0);
    CHECK(p.cost_ms > 0);
    plan_destroy(&p);
}

/* The cost each greedy balances decides the first (largest) table. */
static void test_costs_differ(void)
{
    struct table tb[3];
    struct topology t;
    struct sd_diag d = {{0}};
    struct plan p;

    make(&tb[0], "wide", 1000, 128, 1);   /* largest dim */
    make(&tb[1], "big", 10000000, 16, 1); /* largest size */
    make(&tb[2], "hot", 1000, 32, 100);   /* most lookups */
    topology_default(&t, 3, 1ull << 30);
    if (CHECK_OK(run(tb, 3, &t, PLAN_ALG_DIM_GREEDY, &p, &d), d.msg)) {
        CHECK(device_of(&p, 0) == 0);
        plan_destroy(&p);
    }
    if (CHECK_OK(run(tb, 3, &t, PLAN_ALG_SIZE_GREEDY, &p, &d), d.msg)) {
        CHECK(device_of(&p, 1) == 0);
        plan_destroy(&p);
    }
    if (CHECK_OK(run(tb, 3, &t, PLAN_ALG_LOOKUP_GREEDY, &p, &d), d.msg)) {
        CHECK(device_of(&p, 2) == 0);
        plan_destroy(&p);
    }
    /* 32 x 100 x log10(1000) = 9600 beats 16 x 1 x 7 and 128 x 1 x 3. */
    if (CHECK_OK(run(tb, 3, &t, PLAN_ALG_SIZE_LOOKUP_GREEDY, &p, &d), d.msg)) {
        CHECK(device_of(&p, 2) == 0);
        plan_destroy(&p);
    }
}

/* Memory steers placement: the least-loaded device is full. */
static void test_memory(void)
{
    struct table tb[3];
    struct topology t;
    struct sd_diag d = {{0}};
    struct plan p;

    make(&tb[0], "a", 1000, 128, 1); /* 512000 B */
    make(&tb[1], "b", 1000, 64, 1);  /* 256000 B */
    make(&tb[2], "c", 1000, 64, 1);  /* 256000 B */
    topology_default(&t, 2, 600000);
    if (CHECK_OK(run(tb, 3, &t, PLAN_ALG_DIM_GREEDY, &p, &d), d.msg)) {
        CHECK(device_of(&p, 0) == 0);
        CHECK(device_of(&p, 1) == 1 && device_of(&p, 2) == 1);
        plan_destroy(&p);
    }

    /* Nothing fits 'a' once the devices are smaller than it: the error
     * names the table and the shortfall, and no plan comes back. */
    topology_default(&t, 2, 500000);
    CHECK(run(tb, 3, &t, PLAN_ALG_SIZE_GREEDY, &p, &d) == SD_ENOSPACE);
    CHECK(strstr(d.msg, "\"a\": needs 500 KiB") &&
          strstr(d.msg, "short by 11.7 KiB"));
    CHECK(run(tb, 3, &t, PLAN_ALG_RANDOM, &p, &d) == SD_ENOSPACE);
    CHECK(strstr(d.msg, "\"a\""));
}

static void test_random(void)
{
    struct table tb[40];
    struct topology t;
    struct sd_diag d = {{0}};
    struct plan p1 = {0}, p2 = {0}; /* zeroed: see out */
    int32_t seen[4] = {0, 0, 0, 0};
    size_t k;
    int same = 1;

    for (k = 0; k < 40; k++) {
        char name[16];

        snprintf(name, sizeof(name), "t%zu", k);
        make(&tb[k], name, 1000, 16, 1);
    }
    topology_default(&t, 4, 1ull << 30);
    if (!CHECK_OK(run(tb, 40, &t, PLAN_ALG_RANDOM, &p1, &d), d.msg) ||
        !CHECK_OK(run(tb, 40, &t, PLAN_ALG_RANDOM, &p2, &d), d.msg))
        goto out;
    CHECK(p1.nshards == p2.nshards);
    for (k = 0; k < p1.nshards && k < p2.nshards; k++) {
        seen[p1.shards[k].device]++;
        same &= p1.shards[k].device == p2.shards[k].device;
    }
    CHECK(same); /* same seed, same plan */
    CHECK(seen[0] > 0 && seen[1] > 0 && seen[2] > 0 && seen[3] > 0);
out:
    /* A failed run leaves its plan zeroed: these free only what was made. */
    plan_destroy(&p1);
    plan_destroy(&p2);
}

/* plan_run refuses bad tables before any algorithm runs. */
static void test_bad_input(void)
{
    struct table tb[1];
    struct topology t;
    struct sd_diag d = {{0}};
    struct plan p;

    make(&tb[0], "x", 1000, 30, 1);
    topology_default(&t, 2, 1ull << 30);
    CHECK(run(tb, 1, &t, PLAN_ALG_DIM_GREEDY, &p, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "dim 30"));
    make(&tb[0], "x", 1000, 32, 1);
    t.ndevices = 0;
    CHECK(run(tb, 1, &t, PLAN_ALG_DIM_GREEDY, &p, &d) == SD_EINVAL);
}

int main(void)
{
    test_dim_greedy();
    test_costs_differ();
    test_memory();
    test_random();
    test_bad_input();
    return tap_done();
}
