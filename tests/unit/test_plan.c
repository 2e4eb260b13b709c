/* Plans: topology checks, memory per optimizer, and plan validation. */
#include <string.h>

#include "harness.h"
#include "planner.h"

#define MIB (1ull << 20)

static void make(struct table *t, const char *name, int64_t rows, int32_t dim)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->rows = rows;
    t->dim = dim;
    t->pooling_factor = 1;
}

static void test_topology(void)
{
    struct topology t;
    struct sd_diag d;

    topology_default(&t, 8, 4ull << 30);
    CHECK(topology_validate(&t, &d) == 0);
    CHECK(t.devices_per_host == 8 && t.batch_size == 65536);

    t.devices_per_host = 3;
    CHECK(topology_validate(&t, &d) == SD_EINVAL &&
          strstr(d.msg, "devices_per_host"));
    topology_default(&t, 0, 1);
    CHECK(topology_validate(&t, &d) == SD_EINVAL && strstr(d.msg, "devices"));
    topology_default(&t, 4, 0);
    CHECK(topology_validate(&t, &d) == SD_EINVAL && strstr(d.msg, "mem"));
    topology_default(&t, 4, 1);
    t.batch_size = 2;
    CHECK(topology_validate(&t, &d) == SD_EINVAL && strstr(d.msg, "batch"));
    topology_default(&t, 4, 1);
    t.inter_host_bw = 0;
    CHECK(topology_validate(&t, &d) == SD_EINVAL && strstr(d.msg, "inter"));
}

static void test_shard_bytes(void)
{
    struct table t;
    enum optimizer o;

    make(&t, "a", 1000, 64);
    CHECK(shard_bytes(&t, 64, OPTIMIZER_SGD) == 256000);
    CHECK(shard_bytes(&t, 64, OPTIMIZER_ADAGRAD) == 512000);
    CHECK(shard_bytes(&t, 64, OPTIMIZER_ADAM) == 768000);
    /* Row-wise Adagrad: one fp32 per row of each slice. */
    CHECK(shard_bytes(&t, 32, OPTIMIZER_ROWWISE_ADAGRAD) == 128000 + 4000);
    CHECK(optimizer_parse("adam", &o) == 0 && o == OPTIMIZER_ADAM);
    CHECK(optimizer_parse("lamb", &o) == SD_EINVAL);
}

/* Two tables (dims 8 and 16) on 2 devices of 1 MiB. */
static void setup(struct table *tb, struct topology *t, struct plan *p)
{
    make(&tb[0], "a", 1000, 8);  /* 32000 bytes */
    make(&tb[1], "b", 1000, 16); /* 64000 bytes */
    topology_default(t, 2, MIB);
    CHECK(plan_init(p, 2) == 0);
}

static void test_validate(void)
{
    struct table tb[2];
    struct topology t;
    struct sd_diag d;
    struct plan p;

    /* Valid: a whole, b split 8+8 across devices, given out of order. */
    setup(tb, &t, &p);
    CHECK(plan_add(&p, 1, 1, 8, 8) == 0);
    CHECK(plan_add(&p, 0, 0, 0, 8) == 0);
    CHECK(plan_add(&p, 1, 0, 0, 8) == 0);
    CHECK(plan_validate(&p, tb, 2, &t, OPTIMIZER_SGD, &d) == 0);
    CHECK(p.shards[0].table == 0 && p.shards[1].table == 1 &&
          p.shards[1].col_offset == 0 && p.shards[2].col_offset == 8);
    plan_destroy(&p);

    /* A column range placed twice. */
    setup(tb, &t, &p);
    plan_add(&p, 0, 0, 0, 8);
    plan_add(&p, 1, 0, 0, 16);
    plan_add(&p, 1, 1, 8, 8);
    CHECK(plan_validate(&p, tb, 2, &t, OPTIMIZER_SGD, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "\"b\"") && strstr(d.msg, "twice"));
    plan_destroy(&p);

    /* A gap. */
    setup(tb, &t, &p);
    plan_add(&p, 0, 0, 0, 8);
    plan_add(&p, 1, 0, 0, 4);
    plan_add(&p, 1, 1, 8, 8);
    CHECK(plan_validate(&p, tb, 2, &t, OPTIMIZER_SGD, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "not placed"));
    plan_destroy(&p);

    /* A table missing entirely. */
    setup(tb, &t, &p);
    plan_add(&p, 1, 0, 0, 16);
    CHECK(plan_validate(&p, tb, 2, &t, OPTIMIZER_SGD, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "\"a\""));
    plan_destroy(&p);

    /* Columns beyond the table's dim. */
    setup(tb, &t, &p);
    plan_add(&p, 0, 0, 0, 12);
    plan_add(&p, 1, 0, 0, 16);
    CHECK(plan_validate(&p, tb, 2, &t, OPTIMIZER_SGD, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "runs past its 8 columns"));
    plan_destroy(&p);

    /* Widths whose sum would overflow an int are refused, not summed. */
    setup(tb, &t, &p);
    plan_add(&p, 0, 0, 0, 8);
    plan_add(&p, 1, 0, 0, 0x7FFFFFFC);
    plan_add(&p, 1, 1, 0x7FFFFFFC, 0x7FFFFFFC);
    CHECK(plan_validate(&p, tb, 2, &t, OPTIMIZER_SGD, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "\"b\"") && strstr(d.msg, "runs past"));
    plan_destroy(&p);

    /* Width not a multiple of 4. */
    setup(tb, &t, &p);
    plan_add(&p, 0, 0, 0, 6);
    plan_add(&p, 0, 0, 6, 2);
    plan_add(&p, 1, 0, 0, 16);
    CHECK(plan_validate(&p, tb, 2, &t, OPTIMIZER_SGD, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "aligned"));
    plan_destroy(&p);

    /* Unknown device and unknown table. */
    setup(tb, &t, &p);
    plan_add(&p, 0, 2, 0, 8);
    plan_add(&p, 1, 0, 0, 16);
    CHECK(plan_validate(&p, tb, 2, &t, OPTIMIZER_SGD, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "device 2"));
    plan_destroy(&p);
    setup(tb, &t, &p);
    plan_add(&p, 5, 0, 0, 8);
    CHECK(plan_validate(&p, tb, 2, &t, OPTIMIZER_SGD, &d) == SD_EINVAL);
    plan_destroy(&p);

    /* Memory: 96000 bytes on one device of 64000 is over by 32000; with
     * Adam the same split plan needs 3x. */
    setup(tb, &t, &p);
    t.mem_bytes = 64000;
    plan_add(&p, 0, 0, 0, 8);
    plan_add(&p, 1, 0, 0, 16);
    CHECK(plan_validate(&p, tb, 2, &t, OPTIMIZER_SGD, &d) == SD_ENOSPACE);
    CHECK(strstr(d.msg, "device 0") && strstr(d.msg, "32000"));
    plan_destroy(&p);
    setup(tb, &t, &p);
    t.mem_bytes = 64000;
    plan_add(&p, 0, 0, 0, 8);
    plan_add(&p, 1, 1, 0, 16);
    CHECK(plan_validate(&p, tb, 2, &t, OPTIMIZER_SGD, &d) == 0);
    CHECK(plan_validate(&p, tb, 2, &t, OPTIMIZER_ADAM, &d) == SD_ENOSPACE);
    plan_destroy(&p);
}

static void test_alg_names(void)
{
    enum plan_alg a;
    struct sd_diag d;
    int i;

    for (i = 0; i < PLAN_ALG_COUNT; i++) {
        CHECK(plan_alg_parse(plan_alg_name((enum plan_alg)i), &a, &d) == 0);
        CHECK(a == (enum plan_alg)i);
    }
    CHECK(plan_alg_parse("magic", &a, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "magic") && strstr(d.msg, "dim_greedy"));
}

int main(void)
{
    test_topology();
    test_shard_bytes();
    test_validate();
    test_alg_names();
    return tap_done();
}
