/*
 * wire/wire_inputs.c: tables as users describe them <-> shardd.v1
 * messages.  A Table without bins and a TorchRecTable come in as the
 * planner reads them (pooling factor summed over features, constraints kept,
 * bins left to derive); every bad field is refused naming it as the request
 * spells it; a TableConstraint's memory tiers come in as the planner's and
 * win over a TorchRecTable's; notes and traces convert both ways; and an
 * input sent the way shardctl sends it resolves to the same tables and notes.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "wire.h"

static char *str(const char *s)
{
    static char pool[64][64];
    static int next;
    char *p = pool[next++ % 64];

    snprintf(p, 64, "%s", s);
    return p;
}

static void test_native_without_bins(void)
{
    Shardd__V1__Table t = SHARDD__V1__TABLE__INIT, *tp = &t;
    struct tables_input in;
    struct wire_limits lim;
    struct sd_diag d;
    double bins[TABLE_NBINS], five[5] = {0};
    int k, same = 1;

    wire_limits_default(&lim);
    t.name = str("a");
    t.rows = 100000;
    t.dim = 32;
    t.pooling_factor = 5;
    t.zipf_exponent = 1.1;
    CHECK(wire_tables_input_in(&lim, &tp, 1, NULL, 0, &in, &d) == 0);
    CHECK(in.form == TABLES_FORM_NATIVE && !in.specs[0].has_bins);
    CHECK(tables_input_resolve(&in, 2048, &d) == 0);
    CHECK(bins_derive(100000, 5, 2048, 1.1, bins) == 0);
    for (k = 0; k < TABLE_NBINS; k++)
        same &= in.tables[0].bins[k] == bins[k];
    CHECK(same);
    CHECK(in.notes.n == 1 &&
          strstr(in.notes.v[0].text, "s=1.1 over 100,000 "
                                     "rows, 2,048 bags") != NULL);
    tables_input_destroy(&in);

    /* The old reader still wants bins; 5 bins are nobody's. */
    {
        struct table *tables = NULL;

        CHECK(wire_tables_in(&lim, &tp, 1, &tables, &d) == SD_EINVAL);
        CHECK(strstr(d.msg, "tables[0] \"a\": bins has 0 values, not 17") !=
              NULL);
    }
    t.zipf_exponent = 0;
    t.n_bins = 5;
    t.bins = five;
    CHECK(wire_tables_input_in(&lim, &tp, 1, NULL, 0, &in, &d) == SD_EINVAL);
    CHECK(
        strstr(d.msg, "tables[0] \"a\": bins has 5 values, not 17 (or none") !=
        NULL);
    t.n_bins = 0;
    t.zipf_exponent = -1;
    CHECK(wire_tables_input_in(&lim, &tp, 1, NULL, 0, &in, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "zipf_exponent -1 is not in") != NULL);
}

/* A TorchRecTable with two features and most constraints. */
static void make_trec(Shardd__V1__TorchRecTable *m,
                      Shardd__V1__TorchRecConstraints *c,
                      Shardd__V1__TorchRecCacheParams *cp)
{
    static char *features[2], *types[1], *kernels[2];
    static double pf[2] = {12.0, 3.0}, np[2] = {1.0, 2.0};
    static int64_t bs[2] = {512, 512};

    features[0] = str("f0");
    features[1] = str("f1");
    types[0] = str("table_wise");
    kernels[0] = str("fused_uvm_caching");
    kernels[1] = str("warp_drive");
    shardd__v1__torch_rec_table__init(m);
    shardd__v1__torch_rec_constraints__init(c);
    shardd__v1__torch_rec_cache_params__init(cp);
    m->name = str("t0");
    m->num_embeddings = 4000000;
    m->embedding_dim = 64;
    m->n_feature_names = 2;
    m->feature_names = features;
    m->data_type = str("DataType.FP16");
    m->pooling = str("SUM");
    m->constraints = c;
    c->n_sharding_types = 1;
    c->sharding_types = types;
    c->n_compute_kernels = 2;
    c->compute_kernels = kernels;
    c->n_pooling_factors = 2;
    c->pooling_factors = pf;
    c->n_num_poolings = 2;
    c->num_poolings = np;
    c->n_batch_sizes = 2;
    c->batch_sizes = bs;
    c->min_partition = 32;
    c->cache_params = cp;
    cp->load_factor = 0.25;
    c->device_group = str("cuda");
    c->stochastic_rounding = true;
    c->bounds_check_mode = str("WARNING");
}

static const struct input_note *note_on(const struct tables_input *in,
                                        const char *field, enum note_kind k)
{
    size_t i;

    for (i = 0; i < in->notes.n; i++)
        if (strcmp(in->notes.v[i].field, field) == 0 &&
            in->notes.v[i].kind == k)
            return &in->notes.v[i];
    return NULL;
}

static void test_torchrec_in(void)
{
    Shardd__V1__TorchRecTable m, *mp = &m;
    Shardd__V1__TorchRecConstraints c;
    Shardd__V1__TorchRecCacheParams cp;
    struct tables_input in;
    struct wire_limits lim;
    struct sd_diag d;

    wire_limits_default(&lim);
    make_trec(&m, &c, &cp);
    CHECK(wire_tables_input_in(&lim, NULL, 0, &mp, 1, &in, &d) == 0);
    CHECK(in.form == TABLES_FORM_TORCHREC);
    CHECK(in.tables[0].rows == 4000000 && in.tables[0].dim == 64);
    CHECK(in.tables[0].dtype == TABLE_DTYPE_FP16);
    CHECK(in.tables[0].pooling_factor == 12.0 + 3.0 * 2.0);
    CHECK(in.specs[0].c.sharding_types == TREC_ST_TABLE_WISE);
    CHECK(in.specs[0].c.compute_kernels == TREC_CK_FUSED_UVM_CACHING);
    CHECK(in.specs[0].c.batch_size == 512 && in.specs[0].c.cache_params);
    CHECK(note_on(&in, "constraints.compute_kernels", NOTE_UNKNOWN) != NULL);
    CHECK(tables_input_resolve(&in, 4096, &d) == 0);
    /* One table, table_wise only: every table is, so applied. */
    CHECK(in.whole_tables);
    CHECK(note_on(&in, "constraints.sharding_types", NOTE_APPLIED) != NULL);
    /* Its kernel and load factor become its tier constraint. */
    CHECK(note_on(&in, "constraints.cache_params", NOTE_APPLIED) != NULL);
    CHECK(note_on(&in, "constraints.compute_kernels", NOTE_APPLIED) != NULL);
    {
        struct table_constraint *cons = NULL;

        CHECK(tables_input_constraints(&in, &cons) == 0 && cons != NULL);
        CHECK(cons != NULL && cons[0].tiers == 1u << TIER_UVM_CACHING &&
              cons[0].cache_load_factor == 0.25f);
        free(cons);
    }
    CHECK(note_on(&in, "constraints.batch_sizes", NOTE_NOT_APPLIED) != NULL);
    CHECK(note_on(&in, "constraints.min_partition", NOTE_NOT_APPLIED) != NULL);
    CHECK(note_on(&in, "constraints.device_group", NOTE_NOT_APPLIED) != NULL);
    CHECK(note_on(&in, "constraints.stochastic_rounding", NOTE_NOT_APPLIED) !=
          NULL);
    CHECK(note_on(&in, "constraints.bounds_check_mode", NOTE_NOT_APPLIED) !=
          NULL);
    CHECK(note_on(&in, "constraints.enforce_hbm", NOTE_NOT_APPLIED) == NULL);
    CHECK(note_on(&in, "bins", NOTE_ASSUMED) != NULL);
    tables_input_destroy(&in);
}

/* Each bad TorchRecTable is refused naming torchrec_tables[0] and the
 * field. */
static void test_torchrec_errors(void)
{
    Shardd__V1__TorchRecTable m, *mp = &m;
    Shardd__V1__TorchRecConstraints c;
    Shardd__V1__TorchRecCacheParams cp;
    Shardd__V1__Table t = SHARDD__V1__TABLE__INIT, *tp = &t;
    struct tables_input in;
    struct wire_limits lim;
    struct sd_diag d;
    static double one[1] = {1.0};
    static int64_t zero[1] = {0};
    static char *bad[1];

    wire_limits_default(&lim);
#define REFUSED(words)                                                         \
    do {                                                                       \
        CHECK(wire_tables_input_in(&lim, NULL, 0, &mp, 1, &in, &d) ==          \
              SD_EINVAL);                                                      \
        if (strstr(d.msg, words) == NULL)                                      \
            fprintf(stderr, "\"%s\" lacks \"%s\"\n", d.msg, words);            \
        CHECK(strstr(d.msg, words) != NULL);                                   \
        make_trec(&m, &c, &cp);                                                \
    } while (0)
    make_trec(&m, &c, &cp);
    m.data_type = str("INT4");
    REFUSED("torchrec_tables[0] \"t0\": data_type \"INT4\" is not planned "
            "yet: FP32, FP16, BF16 and INT8 are");
    m.data_type = str("FP8");
    REFUSED("data_type \"FP8\" is not a TorchRec DataType");
    m.embedding_dim = 66;
    REFUSED("torchrec_tables[0] \"t0\": embedding_dim 66 is not a multiple");
    m.num_embeddings = 0;
    REFUSED("num_embeddings 0 is not in [1, ");
    m.pooling = str("NONE");
    REFUSED("pooling NONE");
    bad[0] = str("tablewise");
    c.sharding_types = bad;
    REFUSED("constraints.sharding_types[0] \"tablewise\" is not a TorchRec");
    c.n_num_poolings = 1;
    c.num_poolings = one;
    REFUSED("constraints.num_poolings has 1 values, pooling_factors 2");
    c.n_batch_sizes = 1;
    c.batch_sizes = zero;
    REFUSED("constraints.batch_sizes[0] is 0, not >= 1");
    m.n_bins = 1;
    m.bins = one;
    REFUSED("torchrec_tables[0] \"t0\": bins has 1 values");
    m.name = str("");
    REFUSED("torchrec_tables[0]: name is empty");
#undef REFUSED
    t.name = str("x");
    t.rows = 10;
    t.dim = 8;
    CHECK(wire_tables_input_in(&lim, &tp, 1, &mp, 1, &in, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "give the tables in one of them, not both") != NULL);
    CHECK(wire_tables_input_in(&lim, NULL, 0, NULL, 0, &in, &d) == SD_EINVAL);
    lim.max_tables = 0;
    CHECK(wire_tables_input_in(&lim, NULL, 0, &mp, 1, &in, &d) == SD_ERANGE);
    CHECK(strstr(d.msg, "torchrec_tables: 1 tables") != NULL);
}

/* PlanOptions with one TableConstraint `tc` for tables a and b on topo. */
static int options_in(Shardd__V1__TableConstraint *tc,
                      const struct topology *topo,
                      struct table_constraint **cons, struct sd_diag *d)
{
    Shardd__V1__PlanOptions o = SHARDD__V1__PLAN_OPTIONS__INIT;
    Shardd__V1__Constraints c = SHARDD__V1__CONSTRAINTS__INIT;
    struct table tables[2] = {{.name = "a", .rows = 1000, .dim = 8},
                              {.name = "b", .rows = 1000, .dim = 8}};
    struct plan_options po;
    struct wire_limits lim;
    int32_t *pins = NULL;
    int rv;

    wire_limits_default(&lim);
    c.n_tables = 1;
    c.tables = &tc;
    o.constraints = &c;
    rv = wire_options_in(&lim, &o, tables, 2, topo, &po, &pins, cons, d);
    free(pins);
    return rv;
}

/*
 * TableConstraint.compute_kernels and cache_load_factor become the table's
 * tiers and load factor; each bad one is refused naming its field; and
 * they win over the TorchRec form's for the same table.
 */
static void test_native_tiers(void)
{
    Shardd__V1__TableConstraint tc = SHARDD__V1__TABLE_CONSTRAINT__INIT;
    Shardd__V1__ComputeKernel ks[2] = {
        SHARDD__V1__COMPUTE_KERNEL__COMPUTE_KERNEL_FUSED_UVM_CACHING,
        SHARDD__V1__COMPUTE_KERNEL__COMPUTE_KERNEL_FUSED};
    struct table_constraint *cons = NULL;
    struct topology topo;
    struct sd_diag d;

    topology_default(&topo, 2, 1ull << 30);
    topo.host_dram_bytes = 8ull << 30;
    tc.table = str("b");
    tc.n_compute_kernels = 1;
    tc.compute_kernels = ks;
    tc.cache_load_factor = 0.3;
    CHECK(options_in(&tc, &topo, &cons, &d) == 0);
    CHECK(cons != NULL && cons[1].tiers == 1u << TIER_UVM_CACHING &&
          cons[1].cache_load_factor == 0.3f && cons[0].tiers == 0 &&
          cons[0].cache_load_factor == 0);
    free(cons);
    /* No kernels: any tier, the load factor when cached. */
    tc.n_compute_kernels = 0;
    CHECK(options_in(&tc, &topo, &cons, &d) == 0);
    CHECK(cons != NULL && cons[1].tiers == 0 &&
          cons[1].cache_load_factor == 0.3f);
    free(cons);
    tc.n_compute_kernels = 1;

#define REFUSED(words)                                                         \
    do {                                                                       \
        cons = NULL;                                                           \
        CHECK(options_in(&tc, &topo, &cons, &d) == SD_EINVAL);                 \
        if (strstr(d.msg, words) == NULL)                                      \
            fprintf(stderr, "\"%s\" lacks \"%s\"\n", d.msg, words);            \
        CHECK(strstr(d.msg, words) != NULL);                                   \
        free(cons);                                                            \
    } while (0)
    tc.n_compute_kernels = 2;
    ks[1] = SHARDD__V1__COMPUTE_KERNEL__COMPUTE_KERNEL_UNSPECIFIED;
    REFUSED("options.constraints.tables[0].compute_kernels[1]: 0 is not a "
            "ComputeKernel");
    ks[1] = (Shardd__V1__ComputeKernel)9;
    REFUSED("options.constraints.tables[0].compute_kernels[1]: 9 is not a "
            "ComputeKernel");
    ks[1] = SHARDD__V1__COMPUTE_KERNEL__COMPUTE_KERNEL_FUSED;
    tc.cache_load_factor = 1;
    REFUSED("options.constraints.tables[0].cache_load_factor: 1 is not in "
            "(0, 1)");
    tc.cache_load_factor = -0.25;
    REFUSED("cache_load_factor: -0.25 is not in (0, 1)");
    tc.cache_load_factor = 1e-50; /* 0 as a float: not "the pass chooses" */
    REFUSED("cache_load_factor: 1e-50 is not in (0, 1)");
    ks[0] = SHARDD__V1__COMPUTE_KERNEL__COMPUTE_KERNEL_FUSED_UVM;
    tc.cache_load_factor = 0.3;
    REFUSED("options.constraints.tables[0].cache_load_factor: 0.3, but "
            "compute_kernels leave out FUSED_UVM_CACHING");
    /* Off HBM without host DRAM: the table and the fix. */
    tc.n_compute_kernels = 1;
    tc.cache_load_factor = 0;
    topo.host_dram_bytes = 0;
    REFUSED("\"b\": the table may not be in device memory");
    REFUSED("give host_dram_bytes");
    /* The planner's checks index the request's tables, not the constraint
     * (the one constraint here is tables[0] of the constraints, for b). */
    REFUSED("options.constraints for tables[1] \"b\"");
#undef REFUSED
    topo.host_dram_bytes = 8ull << 30;

    /* The TorchRec form's kernels (fused_uvm_caching at 0.25) give way to
     * the native constraint's for the same table, and stay without one. */
    {
        Shardd__V1__TorchRecTable m, *mp = &m;
        Shardd__V1__TorchRecConstraints c;
        Shardd__V1__TorchRecCacheParams cp;
        Shardd__V1__PlanOptions o = SHARDD__V1__PLAN_OPTIONS__INIT;
        Shardd__V1__Constraints oc = SHARDD__V1__CONSTRAINTS__INIT;
        Shardd__V1__TableConstraint *tcp = &tc;
        Shardd__V1__Scheme tw = SHARDD__V1__SCHEME__SCHEME_TABLE_WISE;
        struct tables_input in;
        struct plan_options po;
        struct wire_limits lim;
        int32_t *pins = NULL;

        wire_limits_default(&lim);
        make_trec(&m, &c, &cp);
        CHECK(wire_tables_input_in(&lim, NULL, 0, &mp, 1, &in, &d) == 0);
        CHECK(tables_input_resolve(&in, 4096, &d) == 0);
        tc.table = str("t0");
        ks[0] = SHARDD__V1__COMPUTE_KERNEL__COMPUTE_KERNEL_FUSED_UVM;
        oc.n_tables = 1;
        oc.tables = &tcp;
        o.constraints = &oc;
        cons = NULL;
        CHECK(wire_options_in(&lim, &o, in.tables, in.n, &topo, &po, &pins,
                              &cons, &d) == 0);
        CHECK(tables_input_constraints(&in, &cons) == 0);
        CHECK(cons != NULL && cons[0].tiers == 1u << TIER_UVM &&
              cons[0].cache_load_factor == 0);
        free(cons);
        /* The notes say so: TorchRec's kernels and cache_params were not
         * applied, the request's tiers won; its sharding types were. */
        {
            size_t k, overridden = 0, applied = 0;

            for (k = 0; k < in.notes.n; k++) {
                const struct input_note *nt = &in.notes.v[k];

                if ((strcmp(nt->field, "constraints.compute_kernels") == 0 ||
                     strcmp(nt->field, "constraints.cache_params") == 0) &&
                    nt->kind == NOTE_NOT_APPLIED &&
                    strstr(nt->text, "its own tiers, which win") != NULL)
                    overridden++;
                if (nt->kind == NOTE_APPLIED &&
                    (strcmp(nt->field, "constraints.compute_kernels") == 0 ||
                     strcmp(nt->field, "constraints.cache_params") == 0))
                    applied++;
            }
            CHECK(overridden == 2 && applied == 0);
        }
        /* A native constraint on schemes only leaves the tiers to TorchRec's
         * kernels. */
        tc.n_compute_kernels = 0;
        tc.n_schemes = 1;
        tc.schemes = &tw;
        cons = NULL;
        CHECK(wire_options_in(&lim, &o, in.tables, in.n, &topo, &po, &pins,
                              &cons, &d) == 0);
        CHECK(tables_input_constraints(&in, &cons) == 0);
        CHECK(cons != NULL && cons[0].tiers == 1u << TIER_UVM_CACHING &&
              cons[0].cache_load_factor == 0.25f);
        free(cons);
        free(pins);
        tables_input_destroy(&in);
    }
}

/* What shardctl sends is what it would have planned itself. */
static void test_round_trip(void)
{
    const char *doc =
        "{\"tables\":[{\"name\":\"a\",\"num_embeddings\":5000,"
        "\"embedding_dim\":16,\"feature_names\":[\"x\",\"y\"]},"
        "{\"name\":\"b\",\"num_embeddings\":70,\"embedding_dim\":8}],"
        "\"constraints\":{\"a\":{\"pooling_factors\":[0.1,0.2,0.3],"
        "\"num_poolings\":[3,1,7],\"batch_sizes\":[64,128],"
        "\"output_dtype\":\"FP16\",\"cache_params\":{\"load_factor\":0.5}}}}";
    Shardd__V1__PlanRequest rq = SHARDD__V1__PLAN_REQUEST__INIT, *back;
    struct wire_arena arena = WIRE_ARENA_INIT;
    struct tables_input a, b;
    struct wire_limits lim;
    struct sd_diag d;
    uint8_t *buf = NULL;
    size_t len = 0, i;
    int same = 1;

    wire_limits_default(&lim);
    CHECK(json_parse_tables_input(doc, strlen(doc), 0, TABLES_FORM_AUTO, &a,
                                  &d) == 0);
    CHECK(wire_tables_input_out(&arena, &a, &rq.tables, &rq.n_tables,
                                &rq.torchrec_tables,
                                &rq.n_torchrec_tables) == 0);
    CHECK(rq.n_tables == 0 && rq.n_torchrec_tables == 2);
    CHECK(wire_pack(&rq.base, &buf, &len, &d) == 0);
    wire_arena_free(&arena);
    back = shardd__v1__plan_request__unpack(NULL, len, buf);
    CHECK(back != NULL);
    CHECK(wire_tables_input_in(&lim, back->tables, back->n_tables,
                               back->torchrec_tables, back->n_torchrec_tables,
                               &b, &d) == 0);
    CHECK(tables_input_resolve(&a, 1000, &d) == 0);
    CHECK(tables_input_resolve(&b, 1000, &d) == 0);
    CHECK(a.n == 2 && b.n == 2 && a.notes.n == b.notes.n);
    for (i = 0; i < a.n && i < b.n; i++)
        same &= memcmp(&a.tables[i], &b.tables[i], sizeof(a.tables[i])) == 0;
    for (i = 0; i < a.notes.n && i < b.notes.n; i++)
        same &= strcmp(a.notes.v[i].text, b.notes.v[i].text) == 0;
    CHECK(same);
    /* The pooling factor is 0.1 x 3 + 0.2 + 0.3 x 7, bit for bit. */
    CHECK(b.tables[0].pooling_factor == 0.1 * 3 + 0.2 * 1 + 0.3 * 7);
    tables_input_destroy(&a);
    tables_input_destroy(&b);
    shardd__v1__plan_request__free_unpacked(back, NULL);
    free(buf);
}

static void test_notes_and_traces(void)
{
    struct input_notes ns = {0}, back = {0};
    struct wire_arena arena = WIRE_ARENA_INIT;
    Shardd__V1__InputNote **msgs;
    Shardd__V1__TableTrace m = SHARDD__V1__TABLE_TRACE__INIT;
    struct trace t;
    struct sd_diag d;
    int64_t lengths[3] = {2, 0, 1}, idx[3] = {4, 4, 250}, off[3] = {0, 2, 1};

    CHECK(input_notes_add(&ns, NOTE_NOT_APPLIED, "t", "constraints.x",
                          "x of %s", "t") == 0);
    CHECK(input_notes_add(&ns, NOTE_APPLIED, NULL, "y", "every table") == 0);
    msgs = wire_notes_out(&arena, &ns);
    CHECK(msgs != NULL);
    CHECK(msgs[0]->kind == SHARDD__V1__NOTE_KIND__NOTE_KIND_NOT_APPLIED);
    CHECK(wire_notes_in(msgs, ns.n, &back) == 0);
    CHECK(back.n == 2 && back.v[0].kind == NOTE_NOT_APPLIED &&
          strcmp(back.v[0].text, "x of t") == 0 &&
          strcmp(back.v[1].table, "") == 0 && back.v[1].kind == NOTE_APPLIED);
    wire_arena_free(&arena);
    input_notes_destroy(&ns);
    input_notes_destroy(&back);

    m.name = str("tr");
    m.dim = 8;
    m.n_lengths = 3;
    m.lengths = lengths;
    m.n_indices = 3;
    m.indices = idx;
    CHECK(wire_trace_in(&m, 0, &t, &d) == 0);
    CHECK(t.nbags == 3 && t.offsets[1] == 2 && t.offsets[3] == 3);
    CHECK(t.rows == 251); /* max(100, 250 + 1) */
    trace_destroy(&t);
    m.n_offsets = 3;
    m.offsets = off;
    CHECK(wire_trace_in(&m, 2, &t, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "traces[2] \"tr\": give offsets or lengths") != NULL);
    m.n_lengths = 0;
    m.n_indices = 2;
    CHECK(wire_trace_in(&m, 0, &t, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "traces[0] \"tr\": offsets[2] = 1 is less than") !=
          NULL);
    m.n_offsets = 0;
    CHECK(wire_trace_in(&m, 0, &t, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "offsets or lengths is needed") != NULL);
}

int main(void)
{
    test_native_without_bins();
    test_torchrec_in();
    test_torchrec_errors();
    test_native_tiers();
    test_round_trip();
    test_notes_and_traces();
    return tap_done();
}
