/*
 * Fuzz target: the plan reader, json_parse_plan() (planner/formats/json.c),
 * against a fixed set of four tables (dims 4, 8, 16 and 128), then the checks a
 * plan file goes through in `shardctl score`: plan_validate() and
 * plan_evaluate().
 *
 * Invariants: an input is refused with a code and a message, or it gives a
 * plan with 1..TOPO_DEVICES_MAX devices whose shards name known tables.
 * plan_validate() then accepts it or refuses it with a message; an accepted
 * plan covers every cell of every table (row blocks, column slices and
 * replicas counted by hand), evaluates to finite,
 * non-negative costs, and survives json_plan() and a second read unchanged.
 */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "planner.h"

#define NTABLES 4

static struct table tables[NTABLES];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const int32_t dims[NTABLES] = {4, 8, 16, 128};
    size_t i;

    (void)argc;
    (void)argv;
    for (i = 0; i < NTABLES; i++) {
        struct table *t = &tables[i];

        memset(t, 0, sizeof(*t));
        snprintf(t->name, sizeof(t->name), "t%zu", i);
        t->rows = 1000 * (int64_t)(i + 1);
        t->dim = dims[i];
        t->pooling_factor = 2.0 * (double)(i + 1);
        t->bins[1] = 0.5;
        t->bins[3] = 0.25;
        t->dtype = i == 2 ? TABLE_DTYPE_FP16 : TABLE_DTYPE_FP32;
    }
    FUZZ_CHECK(table_validate_all(tables, NTABLES, NULL) == 0);
    return 0;
}

/*
 * Every cell of every table is covered: its shards' columns x rows add up
 * to the table's (a replica: one whole table per device).  plan_validate()
 * checks that no two overlap; this counts independently of it.
 */
static void check_cover(const struct plan *p)
{
    size_t k = 0;
    uint32_t i;

    for (i = 0; i < NTABLES; i++) {
        const struct table *t = &tables[i];
        int64_t cells = 0, replicas = 0;

        for (; k < p->nshards && p->shards[k].table == i; k++) {
            const struct shard *s = &p->shards[k];
            int64_t rows = s->row_count > 0 ? s->row_count : t->rows;

            if (s->scheme == SCHEME_DP) {
                FUZZ_CHECK(s->col_width == t->dim && rows == t->rows);
                replicas++;
            } else {
                cells += (int64_t)s->col_width * rows;
            }
        }
        if (replicas > 0)
            FUZZ_CHECK(replicas == p->ndevices && cells == 0);
        else
            FUZZ_CHECK(cells == (int64_t)t->dim * t->rows);
    }
    FUZZ_CHECK(k == p->nshards);
}

/* The shards of a and b are the same (both sorted). */
static int same_shards(const struct plan *a, const struct plan *b)
{
    size_t k;

    if (a->nshards != b->nshards || a->ndevices != b->ndevices)
        return 0;
    for (k = 0; k < a->nshards; k++) {
        const struct shard *x = &a->shards[k], *y = &b->shards[k];

        if (x->table != y->table || x->device != y->device ||
            x->col_offset != y->col_offset || x->col_width != y->col_width ||
            x->row_offset != y->row_offset || x->row_count != y->row_count ||
            x->scheme != y->scheme)
            return 0;
    }
    return 1;
}

static void check_valid_plan(struct plan *p, const struct topology *topo)
{
    struct plan again;
    struct sd_diag d;
    char *json;
    int32_t r;
    int rv;

    check_cover(p);
    FUZZ_CHECK(plan_evaluate(p, tables, NTABLES, topo, OPTIMIZER_SGD,
                             &cost_model_analytic) == 0);
    FUZZ_CHECK(isfinite(p->cost_ms) && p->cost_ms >= 0);
    for (r = 0; r < p->ndevices; r++)
        FUZZ_CHECK(p->devices[r].total_ms <= p->cost_ms);

    json = json_plan(p, tables);
    FUZZ_CHECK(json != NULL);
    d.msg[0] = '\0';
    rv = json_parse_plan(json, strlen(json), tables, NTABLES, &again, &d);
    if (rv != 0)
        fprintf(stderr, "round trip refused: %s\n", d.msg);
    FUZZ_CHECK(rv == 0);
    FUZZ_CHECK(same_shards(p, &again));
    plan_destroy(&again);
    free(json);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct topology topo;
    struct sd_diag d;
    struct plan p;
    size_t k;
    int rv;

    d.msg[0] = '\0';
    rv = json_parse_plan((const char *)data, size, tables, NTABLES, &p, &d);
    if (rv != 0) {
        fuzz_check_refusal(rv, &d);
        return 0;
    }
    FUZZ_CHECK(p.ndevices >= 1 && p.ndevices <= TOPO_DEVICES_MAX);
    for (k = 0; k < p.nshards; k++)
        FUZZ_CHECK(p.shards[k].table < NTABLES);

    /* Room for everything, host DRAM for every tier too: only the
     * structure can be refused... */
    topology_default(&topo, p.ndevices, (uint64_t)1 << 40);
    topo.host_dram_bytes = (uint64_t)1 << 40;
    d.msg[0] = '\0';
    rv = plan_validate(&p, tables, NTABLES, &topo, OPTIMIZER_SGD, &d);
    if (rv != 0) {
        FUZZ_CHECK(rv == SD_EINVAL);
        fuzz_check_refusal(rv, &d);
    } else {
        check_valid_plan(&p, &topo);
        /* ...and with 64 KiB devices and hosts, memory too: no device or
         * host holds even a 4-column slice of t3 with Adam's state
         * (192,000 bytes), nor a replica of it. */
        topology_default(&topo, p.ndevices, (uint64_t)64 << 10);
        topo.host_dram_bytes = (uint64_t)64 << 10;
        d.msg[0] = '\0';
        rv = plan_validate(&p, tables, NTABLES, &topo, OPTIMIZER_ADAM, &d);
        FUZZ_CHECK(rv == SD_ENOSPACE);
        fuzz_check_refusal(rv, &d);
    }
    plan_destroy(&p);
    return 0;
}
