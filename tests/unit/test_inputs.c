/*
 * Inputs as users describe them (planner/formats: derive.c, input.c,
 * json_trec.c, dlrm.c): derived bins against a brute-force sum over every
 * row and against sampled lookups; shardd's JSON form without bins and
 * TorchRec's form (pooling factors, constraints applied, noted or refused);
 * the notes in the JSON outputs; the dlrm_datasets layout, raw and .npy,
 * against traces built from the same arrays.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "harness.h"
#include "planner.h"

/* ---------------------------------------------------------------------- */
/* Derived bins                                                            */

/* The bin of a count c >= 1, written out the long way. */
static int bin_of(int64_t c)
{
    int k = 0;

    if (c == 1)
        return 0;
    while (k < 16 && c > ((int64_t)1 << k))
        k++;
    return k;
}

/* The same expectation as bins_derive(), by brute force over every row and
 * every count of a wide window, each probability from lgamma(). */
static void brute_bins(int64_t rows, double pf, int64_t nbags, double s,
                       double out[TABLE_NBINS])
{
    double h = 0, acc[TABLE_NBINS] = {0}, sum = 0, lam, p;
    int64_t i, j, hi;
    int k;

    for (i = 1; i <= rows; i++)
        h += pow((double)i, -s);
    for (i = 1; i <= rows; i++) {
        lam = (double)nbags * pf * pow((double)i, -s) / h;
        hi = (int64_t)(lam + 15 * sqrt(lam) + 30);
        for (j = 1; j <= hi; j++) {
            p = exp(-lam + (double)j * log(lam) - lgamma((double)j + 1));
            acc[bin_of(j)] += p;
        }
    }
    for (k = 0; k < TABLE_NBINS; k++)
        sum += acc[k];
    for (k = 0; k < TABLE_NBINS; k++)
        out[k] = acc[k] / sum;
}

static void test_derive_exact(void)
{
    static const double exps[] = {0.0, 0.8, 1.1, 2.6};
    double got[TABLE_NBINS], want[TABLE_NBINS], worst;
    size_t e;
    int k;

    /* 60,000 rows: past the exactly summed head, so the integral counts. */
    for (e = 0; e < sizeof(exps) / sizeof(exps[0]); e++) {
        CHECK(bins_derive(60000, 10.0, 4096, exps[e], got) == 0);
        brute_bins(60000, 10.0, 4096, exps[e], want);
        worst = 0;
        for (k = 0; k < TABLE_NBINS; k++)
            worst = fmax(worst, fabs(got[k] - want[k]));
        if (worst > 1e-3)
            fprintf(stderr, "s=%g: largest bin error %g\n", exps[e], worst);
        CHECK(worst <= 1e-3);
    }
}

/* Rank r (1-based) of a Zipf law over n ranks, by inversion of cdf. */
static int64_t zipf_draw(const double *cdf, int64_t n, struct rng *g)
{
    double u = rng_uniform(g);
    int64_t lo = 0, hi = n - 1, mid;

    while (lo < hi) {
        mid = (lo + hi) / 2;
        if (cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Sampled lookups of a Zipf law give, on average, the derived bins. */
static void test_derive_sampled(void)
{
    const int64_t rows = 20000, nbags = 2048, len = 8;
    const double s = 1.2;
    double *cdf = malloc((size_t)rows * sizeof(*cdf));
    double got[TABLE_NBINS], mean[TABLE_NBINS] = {0}, bins[TABLE_NBINS], pf,
                             h = 0, worst = 0;
    struct trace t;
    struct rng g;
    int64_t i, b;
    int seed, k;

    for (i = 0; i < rows; i++) {
        h += pow((double)(i + 1), -s);
        cdf[i] = h;
    }
    for (i = 0; i < rows; i++)
        cdf[i] /= h;
    memset(&t, 0, sizeof(t));
    snprintf(t.name, sizeof(t.name), "zipf");
    t.rows = rows;
    t.dim = 8;
    t.nbags = nbags;
    t.nindices = nbags * len;
    t.offsets = malloc((size_t)(nbags + 1) * sizeof(*t.offsets));
    t.indices = malloc((size_t)t.nindices * sizeof(*t.indices));
    for (b = 0; b <= nbags; b++)
        t.offsets[b] = b * len;
    for (seed = 0; seed < 8; seed++) {
        rng_seed(&g, (uint64_t)seed + 1);
        for (i = 0; i < t.nindices; i++)
            t.indices[i] = zipf_draw(cdf, rows, &g);
        CHECK(trace_features(&t, bins, &pf) == 0);
        for (k = 0; k < TABLE_NBINS; k++)
            mean[k] += bins[k] / 8;
    }
    CHECK(bins_derive(rows, (double)len, nbags, s, got) == 0);
    for (k = 0; k < TABLE_NBINS; k++)
        worst = fmax(worst, fabs(got[k] - mean[k]));
    if (worst > 0.01)
        fprintf(stderr, "sampled vs derived: largest bin gap %g\n", worst);
    CHECK(worst <= 0.01);
    trace_destroy(&t);
    free(cdf);
}

static double bin_mean(const double *bins)
{
    double m = 0;
    int k;

    for (k = 0; k < TABLE_NBINS; k++)
        m += k * bins[k];
    return m;
}

static void test_derive_edges(void)
{
    double b[TABLE_NBINS], small[TABLE_NBINS], sum = 0;
    int k;

    CHECK(bins_derive(1000, 0.0, 4096, 1.0, b) == 0);
    for (k = 0; k < TABLE_NBINS; k++)
        sum += b[k];
    CHECK(sum == 0);
    /* One row read 100,000 times: all of it in the last bin. */
    CHECK(bins_derive(1, 100.0, 1000, 1.0, b) == 0);
    CHECK_NEAR(b[16], 1.0, 1e-12);
    /* One row read about 6 times: bins 2 (3..4), 3 (5..8) and 4 (9..16)
     * carry the Poisson mass. */
    CHECK(bins_derive(1, 6.0, 1, 1.0, b) == 0);
    CHECK(b[3] > b[2] && b[3] > b[4] && b[3] > 0.4);
    /* 2^40 rows: still a histogram, and quick. */
    CHECK(bins_derive((int64_t)1 << 40, 20.0, 65536, 1.05, b) == 0);
    sum = 0;
    for (k = 0; k < TABLE_NBINS; k++)
        sum += b[k];
    CHECK_NEAR(sum, 1.0, 1e-9);
    /* A bigger batch reads each row more often (under a steep law the
     * histogram hardly moves: its counts follow a power law). */
    CHECK(bins_derive(100000, 12.0, 4096, 1.0, small) == 0);
    CHECK(bins_derive(100000, 12.0, 65536, 1.0, b) == 0);
    CHECK(bin_mean(b) > bin_mean(small) + 0.5 && b[0] < small[0]);
    /* Out of range. */
    CHECK(bins_derive(0, 1.0, 10, 1.0, b) == SD_EINVAL);
    CHECK(bins_derive(10, 1.0, 0, 1.0, b) == SD_EINVAL);
    CHECK(bins_derive(10, -1.0, 10, 1.0, b) == SD_EINVAL);
    CHECK(bins_derive(10, NAN, 10, 1.0, b) == SD_EINVAL);
    CHECK(bins_derive(10, 1.0, 10, -0.5, b) == SD_EINVAL);
    CHECK(bins_derive(10, 1.0, 10, DERIVE_ZIPF_MAX + 1, b) == SD_EINVAL);
}

/* ---------------------------------------------------------------------- */
/* shardd's form without bins                                              */

static int read_doc(const char *doc, enum tables_form form,
                    struct tables_input *in, struct sd_diag *d)
{
    return json_parse_tables_input(doc, strlen(doc), 0, form, in, d);
}

/* The first note of a kind (0: any) about table and field, or NULL. */
static const struct input_note *find_kind(const struct tables_input *in,
                                          const char *table, const char *field,
                                          enum note_kind kind)
{
    size_t i;

    for (i = 0; i < in->notes.n; i++)
        if (strcmp(in->notes.v[i].table, table) == 0 &&
            strcmp(in->notes.v[i].field, field) == 0 &&
            (kind == 0 || in->notes.v[i].kind == kind))
            return &in->notes.v[i];
    return NULL;
}

static const struct input_note *find_note(const struct tables_input *in,
                                          const char *table, const char *field)
{
    return find_kind(in, table, field, 0);
}

static void test_native_derived(void)
{
    const char *doc =
        "{\"tables\":[{\"name\":\"a\",\"rows\":1000,\"dim\":64,"
        "\"pooling_factor\":2.5},"
        "{\"name\":\"b\",\"rows\":4000000,\"dim\":8,\"pooling_factor\":12,"
        "\"zipf_exponent\":1.05,\"colour\":\"red\"}]}";
    double want[TABLE_NBINS];
    struct tables_input in;
    const struct input_note *nt;
    struct sd_diag d;
    int k, same = 1;

    CHECK(read_doc(doc, TABLES_FORM_AUTO, &in, &d) == 0);
    CHECK(in.form == TABLES_FORM_NATIVE && in.n == 2);
    CHECK(!in.specs[0].has_bins && in.specs[1].zipf_s == 1.05);
    nt = find_note(&in, "b", "colour");
    CHECK(nt != NULL && nt->kind == NOTE_UNKNOWN);
    CHECK(tables_input_resolve(&in, 4096, &d) == 0);
    CHECK(bins_derive(1000, 2.5, 4096, DERIVE_ZIPF_DEFAULT, want) == 0);
    for (k = 0; k < TABLE_NBINS; k++)
        same &= in.tables[0].bins[k] == want[k];
    CHECK(same);
    nt = find_note(&in, "a", "bins");
    CHECK(nt != NULL && nt->kind == NOTE_ASSUMED);
    if (nt != NULL)
        CHECK(strcmp(nt->text,
                     "bins of a derived: Zipf s=2.6 (the default) "
                     "over 1,000 rows, 4,096 bags x 2.5 lookups") == 0);
    nt = find_note(&in, "b", "bins");
    if (nt != NULL)
        CHECK(strstr(nt->text, "s=1.05 over 4,000,000 rows") != NULL);
    CHECK(!in.whole_tables);
    tables_input_destroy(&in);

    /* bins and zipf_exponent exclude each other; the old reader wants
     * bins. */
    CHECK(read_doc("{\"tables\":[{\"name\":\"a\",\"rows\":10,\"dim\":4,"
                   "\"pooling_factor\":1,\"zipf_exponent\":1,\"bins\":"
                   "[1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}]}",
                   TABLES_FORM_AUTO, &in, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "not both") != NULL);
    CHECK(read_doc("{\"tables\":[{\"name\":\"a\",\"rows\":10,\"dim\":4,"
                   "\"pooling_factor\":1,\"zipf_exponent\":9}]}",
                   TABLES_FORM_AUTO, &in, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "zipf_exponent") != NULL);
    {
        const char *nb = "{\"tables\":[{\"name\":\"a\",\"rows\":10,"
                         "\"dim\":4,\"pooling_factor\":1}]}";
        struct table *t = NULL;
        size_t n = 0;

        CHECK(json_parse_tables(nb, strlen(nb), 0, &t, &n, &d) == SD_EINVAL);
        CHECK(strstr(d.msg, "tables[0] \"a\": bins is missing") != NULL);
    }
    /* Rows checked with their own name before any derivation. */
    CHECK(read_doc("{\"tables\":[{\"name\":\"a\",\"rows\":0,\"dim\":4,"
                   "\"pooling_factor\":1}]}",
                   TABLES_FORM_AUTO, &in, &d) == 0);
    CHECK(tables_input_resolve(&in, 64, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "rows 0 is not in") != NULL);
    tables_input_destroy(&in);
}

/* ---------------------------------------------------------------------- */
/* TorchRec's form                                                         */

static const char *trec_doc =
    "{\"tables\":["
    " {\"name\":\"t0\",\"num_embeddings\":4000000,\"embedding_dim\":64,"
    "  \"feature_names\":[\"f0\",\"f1\"],\"data_type\":\"FP32\","
    "  \"pooling\":\"SUM\",\"weight_init_max\":null},"
    " {\"name\":\"t1\",\"num_embeddings\":1000,\"embedding_dim\":16,"
    "  \"data_type\":\"DataType.FP16\",\"pooling\":\"PoolingType.MEAN\"},"
    " {\"name\":\"t2\",\"num_embeddings\":50000,\"embedding_dim\":128,"
    "  \"feature_names\":[\"f2\"],\"foo\":1}],"
    " \"constraints\":{"
    "  \"t0\":{\"pooling_factors\":[12.0,3.0],\"num_poolings\":[1,2],"
    "        \"sharding_types\":[\"table_wise\",\"column_wise\"],"
    "        \"compute_kernels\":[\"fused\",\"fused_uvm\"],"
    "        \"enforce_hbm\":true,\"stochastic_rounding\":false,"
    "        \"bounds_check_mode\":\"BoundsCheckMode.WARNING\"},"
    "  \"t2\":{\"pooling_factors\":[5],\"sharding_types\":[\"table_wise\"],"
    "        \"compute_kernels\":[\"fused_uvm_caching\",\"magic\",\"quant\"],"
    "        \"cache_params\":{\"algorithm\":\"LRU\",\"load_factor\":0.2},"
    "        \"batch_sizes\":[512],\"is_weighted\":true,\"min_partition\":32,"
    "        \"device_group\":\"cuda\",\"enforce_hbm\":null,\"bar\":2}}}";

static void test_torchrec(void)
{
    /* quant has no tier: not applied; fused_uvm_caching is. */
    static const char *const not_applied[] = {
        "constraints.compute_kernels", "constraints.batch_sizes",
        "constraints.is_weighted",     "constraints.min_partition",
        "constraints.device_group",
    };
    struct tables_input in;
    const struct input_note *nt;
    struct sd_diag d;
    size_t k;

    CHECK(read_doc(trec_doc, TABLES_FORM_AUTO, &in, &d) == 0);
    CHECK(in.form == TABLES_FORM_TORCHREC && in.n == 3);
    if (in.n != 3)
        return;
    CHECK(in.tables[0].rows == 4000000 && in.tables[0].dim == 64);
    CHECK(in.tables[0].pooling_factor == 12.0 + 3.0 * 2);
    CHECK(in.tables[1].pooling_factor == 1.0);
    CHECK(in.tables[1].dtype == TABLE_DTYPE_FP16);
    CHECK(in.tables[2].pooling_factor == 5.0);
    CHECK(in.specs[2].c.sharding_types == TREC_ST_TABLE_WISE);
    nt = find_note(&in, "t2", "foo");
    CHECK(nt != NULL && nt->kind == NOTE_UNKNOWN);
    nt = find_note(&in, "t2", "bar");
    CHECK(nt != NULL && nt->kind == NOTE_UNKNOWN);
    CHECK(find_kind(&in, "t2", "constraints.compute_kernels", NOTE_UNKNOWN) !=
          NULL);
    CHECK(tables_input_resolve(&in, 4096, &d) == 0);
    CHECK(!in.whole_tables);
    nt = find_note(&in, "t0", "constraints.pooling_factors");
    CHECK(nt != NULL && nt->kind == NOTE_ASSUMED &&
          strstr(nt->text, "over its 2 features") != NULL);
    nt = find_note(&in, "t1", "constraints.pooling_factors");
    CHECK(nt != NULL && strstr(nt->text, "TorchRec's default") != NULL);
    for (k = 0; k < sizeof(not_applied) / sizeof(not_applied[0]); k++) {
        nt = find_kind(&in, "t2", not_applied[k], NOTE_NOT_APPLIED);
        if (nt == NULL)
            fprintf(stderr, "no not-applied note on %s\n", not_applied[k]);
        CHECK(nt != NULL);
    }
    /* t0 lists both table_wise and column_wise: nothing to say; its
     * kernels are tiers to choose from, t2's one tier and a load factor;
     * enforce_hbm null is absent. */
    CHECK(find_note(&in, "t0", "constraints.sharding_types") == NULL);
    nt = find_kind(&in, "t0", "constraints.compute_kernels", NOTE_APPLIED);
    CHECK(nt != NULL && strstr(nt->text, "chooses among them") != NULL);
    CHECK(find_kind(&in, "t2", "constraints.compute_kernels", NOTE_APPLIED) !=
          NULL);
    nt = find_kind(&in, "t2", "constraints.cache_params", NOTE_APPLIED);
    CHECK(nt != NULL && strstr(nt->text, "load factor 0.2") != NULL);
    CHECK(find_note(&in, "t2", "constraints.enforce_hbm") == NULL);
    /* t0's training options are named, not dropped; false is absent. */
    nt = find_kind(&in, "t0", "constraints.enforce_hbm", NOTE_NOT_APPLIED);
    CHECK(nt != NULL && strstr(nt->text, "compute_kernels") != NULL);
    nt =
        find_kind(&in, "t0", "constraints.bounds_check_mode", NOTE_NOT_APPLIED);
    CHECK(nt != NULL && strcmp(in.specs[0].c.bounds_check_mode,
                               "BoundsCheckMode.WARNING") == 0);
    CHECK(find_note(&in, "t0", "constraints.stochastic_rounding") == NULL);
    CHECK(find_note(&in, "t1", "bins") != NULL);
    /* t2's table_wise is applied: a constraint of table_wise only. */
    CHECK(find_note(&in, "t2", "constraints.sharding_types") == NULL);
    {
        struct table_constraint *cons = NULL;

        CHECK(tables_input_constraints(&in, &cons) == 0 && cons != NULL);
        if (cons != NULL) {
            CHECK(cons[2].schemes == 1u << SCHEME_TW);
            CHECK(!constraint_allows(&cons[2], SCHEME_CW));
            CHECK(cons[0].schemes == ((1u << SCHEME_TW) | (1u << SCHEME_CW)));
            CHECK(cons[1].schemes == 0 && cons[1].host == -1);
            CHECK(cons[0].tiers == ((1u << TIER_HBM) | (1u << TIER_UVM)) &&
                  cons[0].cache_load_factor == 0);
            CHECK(cons[1].tiers == 0);
            CHECK(cons[2].tiers == 1u << TIER_UVM_CACHING &&
                  cons[2].cache_load_factor == 0.2f);
            CHECK(!constraint_allows_tier(&cons[2], TIER_HBM, 0));
            CHECK(!constraint_allows_tier(&cons[2], TIER_UVM_CACHING, 0.4));
            CHECK(constraint_allows_tier(&cons[2], TIER_UVM_CACHING, 0.2));
        }
        free(cons);
    }
    tables_input_destroy(&in);
}

static void test_torchrec_whole(void)
{
    const char *doc =
        "{\"tables\":[{\"name\":\"a\",\"num_embeddings\":100,"
        "\"embedding_dim\":8},{\"name\":\"b\",\"num_embeddings\":100,"
        "\"embedding_dim\":8}],\"constraints\":{"
        "\"a\":{\"sharding_types\":[\"table_wise\"]},"
        "\"b\":{\"sharding_types\":[\"ShardingType.TABLE_WISE\"]}}}";
    struct tables_input in;
    const struct input_note *nt;
    struct sd_diag d;

    CHECK(read_doc(doc, TABLES_FORM_TORCHREC, &in, &d) == 0);
    CHECK(tables_input_resolve(&in, 512, &d) == 0);
    CHECK(in.whole_tables);
    nt = find_note(&in, "", "constraints.sharding_types");
    CHECK(nt != NULL && nt->kind == NOTE_APPLIED);
    tables_input_destroy(&in);
}

/* Each bad TorchRec document fails naming the table and field. */
static void test_torchrec_errors(void)
{
    static const struct {
        const char *doc, *words;
    } cases[] = {
        {"{\"tables\":[{\"name\":\"a\",\"num_embeddings\":10,"
         "\"embedding_dim\":8,\"data_type\":\"INT4\"}]}",
         "tables[0] \"a\": data_type \"INT4\" is not planned yet: FP32, "
         "FP16, BF16 and INT8 are"},
        {"{\"tables\":[{\"name\":\"a\",\"num_embeddings\":10,"
         "\"embedding_dim\":8,\"data_type\":\"FP64\"}]}",
         "data_type \"FP64\" is not a TorchRec DataType"},
        {"{\"tables\":[{\"name\":\"a\",\"num_embeddings\":10,"
         "\"embedding_dim\":6}]}",
         "tables[0] \"a\": embedding_dim 6 is not a multiple of 4 in [4, "
         "1024]"},
        {"{\"tables\":[{\"name\":\"a\",\"embedding_dim\":8}],"
         "\"constraints\":{}}",
         "tables[0] \"a\": num_embeddings is missing"},
        {"{\"tables\":[{\"name\":\"a\",\"num_embeddings\":10,"
         "\"embedding_dim\":8,\"pooling\":\"NONE\"}]}",
         "pooling NONE"},
        {"{\"tables\":[{\"name\":\"a\",\"num_embeddings\":10,"
         "\"embedding_dim\":8}],\"constraints\":{\"b\":{}}}",
         "constraints[\"b\"]: no table has that name"},
        {"{\"tables\":[{\"name\":\"a\",\"num_embeddings\":10,"
         "\"embedding_dim\":8}],\"constraints\":{\"a\":{\"sharding_types\":"
         "[\"tablewise\"]}}}",
         "constraints[\"a\"]: sharding_types[0] is not a TorchRec sharding"},
        {"{\"tables\":[{\"name\":\"a\",\"num_embeddings\":10,"
         "\"embedding_dim\":8}],\"constraints\":{\"a\":{\"pooling_factors\":"
         "[1,2],\"num_poolings\":[1]}}}",
         "constraints[\"a\"]: num_poolings has 1 values, pooling_factors 2"},
        {"{\"tables\":[{\"name\":\"a\",\"num_embeddings\":10,"
         "\"embedding_dim\":8}],\"constraints\":{\"a\":{\"pooling_factors\":"
         "[-1]}}}",
         "pooling_factors is not a list of numbers >= 0"},
    };
    struct tables_input in;
    struct sd_diag d;
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rv = read_doc(cases[i].doc, TABLES_FORM_AUTO, &in, &d);

        CHECK(rv == SD_EINVAL);
        if (rv == 0)
            tables_input_destroy(&in);
        else if (strstr(d.msg, cases[i].words) == NULL)
            fprintf(stderr, "case %zu: \"%s\" lacks \"%s\"\n", i, d.msg,
                    cases[i].words);
        CHECK(rv != 0 && strstr(d.msg, cases[i].words) != NULL);
    }
    /* TorchRec's form read as shardd's says what it is. */
    CHECK(read_doc(trec_doc, TABLES_FORM_NATIVE, &in, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "rows is missing (the table is in TorchRec's form") !=
          NULL);
}

/* ---------------------------------------------------------------------- */
/* Notes in the outputs                                                    */

static void test_noted_outputs(void)
{
    struct tables_input in;
    struct sd_diag d;
    struct plan p;
    char *plain, *noted, *noted0;
    json_t *root, *notes;
    json_error_t jerr;

    CHECK(read_doc(trec_doc, TABLES_FORM_AUTO, &in, &d) == 0);
    CHECK(tables_input_resolve(&in, 4096, &d) == 0);
    CHECK(plan_init(&p, 2) == 0);
    CHECK(plan_add(&p, 0, 0, 0, 64) == 0);
    CHECK(plan_add(&p, 1, 1, 0, 16) == 0);
    CHECK(plan_add(&p, 2, 1, 0, 128) == 0);
    p.algorithm = "test";
    p.comm_model = "none";
    p.explain.critical_device = -1;
    plain = json_plan(&p, in.tables);
    noted0 = json_plan_noted(&p, in.tables, NULL);
    noted = json_plan_noted(&p, in.tables, &in.notes);
    CHECK(plain != NULL && noted0 != NULL && noted != NULL);
    CHECK(plain != NULL && noted0 != NULL && strcmp(plain, noted0) == 0);
    root = noted != NULL ? json_loads(noted, 0, &jerr) : NULL;
    notes = json_object_get(root, "notes");
    CHECK(json_is_array(notes) && json_array_size(notes) == in.notes.n);
    CHECK(json_is_string(json_object_get(json_array_get(notes, 0), "kind")));
    CHECK(strstr(noted != NULL ? noted : "", "\"not_applied\"") != NULL);
    json_decref(root);
    free(plain);
    free(noted0);
    free(noted);
    noted = json_plan_torchrec_noted(&p, in.tables,
                                     &(struct topology){.devices_per_host = 2},
                                     NULL, &in.notes);
    root = noted != NULL ? json_loads(noted, 0, &jerr) : NULL;
    CHECK(json_is_object(json_object_get(root, "plan")));
    CHECK(json_is_array(json_object_get(root, "notes")));
    json_decref(root);
    free(noted);
    plan_destroy(&p);
    tables_input_destroy(&in);
}

/* ---------------------------------------------------------------------- */
/* The dlrm_datasets layout                                                */

/* 3 tables x 4 bags. */
#define DT 3
#define DB 4
static const int64_t dlrm_len[DT * DB] = {2, 0, 1, 3, 1, 1, 1, 1, 0, 0, 0, 0};
static const int64_t dlrm_idx[] = {5,   7, 5,   5,  7, 9, /* table 0 */
                                   300, 2, 300, 300};     /* table 1 */

static void put(FILE *f, const int64_t *v, size_t n, int width)
{
    size_t i;
    int b;

    for (i = 0; i < n; i++)
        for (b = 0; b < width; b++)
            fputc((int)(((uint64_t)v[i] >> (8 * b)) & 0xff), f);
}

/* NumPy's header for a C-order array of `descr` and `shape`. */
static void put_npy_header(FILE *f, const char *descr, const char *shape)
{
    char h[128];
    size_t len;

    len = (size_t)snprintf(h, sizeof(h),
                           "{'descr': '%s', 'fortran_order': False, "
                           "'shape': %s, }",
                           descr, shape);
    while ((10 + len + 1) % 64 != 0)
        h[len++] = ' ';
    h[len++] = '\n';
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc((int)(len & 0xff), f);
    fputc((int)(len >> 8), f);
    fwrite(h, 1, len, f);
}

/* Writes the fixture into dir: raw (.bin) or .npy, with given widths. */
static void write_dlrm(const char *dir, bool npy, int wi, int wo, int wl,
                       bool lengths)
{
    int64_t off[DT * DB + 1];
    char path[512], shape[32];
    FILE *f;
    int i;

    off[0] = 0;
    for (i = 0; i < DT * DB; i++)
        off[i + 1] = off[i] + dlrm_len[i];
    snprintf(path, sizeof(path), "%s/indices.%s", dir, npy ? "npy" : "bin");
    f = fopen(path, "wb");
    snprintf(shape, sizeof(shape), "(%d,)", (int)(sizeof(dlrm_idx) / 8));
    if (npy)
        put_npy_header(f, wi == 4 ? "<i4" : "<i8", shape);
    put(f, dlrm_idx, sizeof(dlrm_idx) / 8, wi);
    fclose(f);
    snprintf(path, sizeof(path), "%s/offsets.%s", dir, npy ? "npy" : "bin");
    f = fopen(path, "wb");
    snprintf(shape, sizeof(shape), "(%d,)", DT * DB + 1);
    if (npy)
        put_npy_header(f, wo == 4 ? "<i4" : "<i8", shape);
    put(f, off, DT * DB + 1, wo);
    fclose(f);
    if (!lengths)
        return;
    snprintf(path, sizeof(path), "%s/lengths.%s", dir, npy ? "npy" : "bin");
    f = fopen(path, "wb");
    snprintf(shape, sizeof(shape), "(%d, %d)", DT, DB);
    if (npy)
        put_npy_header(f, wl == 4 ? "<i4" : "<i8", shape);
    put(f, dlrm_len, DT * DB, wl);
    fclose(f);
}

static void clear_dir(const char *dir)
{
    static const char *const names[] = {"indices", "offsets", "lengths"};
    char path[512];
    int i;

    for (i = 0; i < 6; i++) {
        snprintf(path, sizeof(path), "%s/%s.%s", dir, names[i / 2],
                 i % 2 ? "bin" : "npy");
        unlink(path);
    }
}

/* The tables the fixture must give: its traces through trace_features. */
static void expected_dlrm(struct table want[DT])
{
    int64_t start = 0;
    int t, b;

    for (t = 0; t < DT; t++) {
        struct trace tr;
        int64_t off[DB + 1], top = -1, j;

        memset(&tr, 0, sizeof(tr));
        off[0] = 0;
        for (b = 0; b < DB; b++)
            off[b + 1] = off[b] + dlrm_len[t * DB + b];
        for (j = 0; j < off[DB]; j++)
            top = dlrm_idx[start + j] > top ? dlrm_idx[start + j] : top;
        snprintf(tr.name, sizeof(tr.name), "table_%04d", t);
        tr.rows = top + 1 > 100 ? top + 1 : 100;
        tr.dim = 16;
        tr.nbags = DB;
        tr.nindices = off[DB];
        tr.offsets = off;
        tr.indices = (int64_t *)dlrm_idx + start;
        CHECK(trace_to_table(&tr, &want[t]) == 0);
        start += off[DB];
    }
}

static void check_dlrm(const char *dir, int64_t nbags, const char *what)
{
    struct table want[DT], *got = NULL;
    struct input_notes notes = {0};
    struct sd_diag d;
    size_t n = 0;
    int t, same = 1;

    expected_dlrm(want);
    if (dlrm_read_tables(dir, nbags, 16, &got, &n, &notes, &d) != 0) {
        fprintf(stderr, "%s: %s\n", what, d.msg);
        CHECK(0);
        return;
    }
    CHECK(n == DT);
    for (t = 0; t < DT && n == DT; t++)
        same &= memcmp(&got[t], &want[t], sizeof(want[t])) == 0;
    if (!same)
        fprintf(stderr, "%s: tables differ from the traces'\n", what);
    CHECK(same);
    CHECK(notes.n == 2);
    free(got);
    input_notes_destroy(&notes);
}

static void test_dlrm(void)
{
    char dir[] = "/tmp/sd-dlrm-XXXXXX";
    struct table *got = NULL, want[DT];
    struct sd_diag d;
    size_t n;

    if (mkdtemp(dir) == NULL) {
        CHECK(0);
        return;
    }
    /* The hand-made expectation: table 0 reads 5 three times, 7 twice and
     * 9 once: bins 2, 1, 0 hold a third each; table 2 is never read. */
    expected_dlrm(want);
    CHECK_NEAR(want[0].bins[0], 1.0 / 3, 1e-12);
    CHECK_NEAR(want[0].bins[1], 1.0 / 3, 1e-12);
    CHECK_NEAR(want[0].bins[2], 1.0 / 3, 1e-12);
    CHECK(want[0].pooling_factor == 1.5 && want[2].pooling_factor == 0);
    CHECK(want[1].rows == 301 && want[0].rows == 100);

    write_dlrm(dir, false, 4, 8, 4, true);
    check_dlrm(dir, DB, "raw i4/i8/i4");
    clear_dir(dir);
    write_dlrm(dir, false, 8, 4, 8, false);
    check_dlrm(dir, DB, "raw i8/i4, no lengths");
    CHECK(dlrm_read_tables(dir, 0, 16, &got, &n, NULL, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "give the batch") != NULL);
    CHECK(dlrm_read_tables(dir, 5, 16, &got, &n, NULL, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "not a whole number of tables") != NULL);
    clear_dir(dir);
    write_dlrm(dir, true, 4, 8, 4, true);
    check_dlrm(dir, 0, "npy, shape from lengths");
    CHECK(dlrm_read_tables(dir, 2, 16, &got, &n, NULL, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "its shape says 4 bags") != NULL);

    /* A length that disagrees with the offsets is named. */
    clear_dir(dir);
    write_dlrm(dir, false, 4, 8, 4, true);
    {
        char path[512];
        FILE *f;

        snprintf(path, sizeof(path), "%s/lengths.bin", dir);
        f = fopen(path, "r+b");
        fseek(f, 4 * 5, SEEK_SET); /* table 1, bag 1 */
        fputc(7, f);
        fclose(f);
    }
    CHECK(dlrm_read_tables(dir, DB, 16, &got, &n, NULL, &d) == SD_EFORMAT);
    CHECK(strstr(d.msg, "table 1, bag 1: length 7, the offsets say 1") != NULL);
    /* Indices whose size fits no width. */
    clear_dir(dir);
    write_dlrm(dir, false, 4, 8, 4, false);
    {
        char path[512];
        FILE *f;

        snprintf(path, sizeof(path), "%s/indices.bin", dir);
        f = fopen(path, "ab");
        fputc(0, f);
        fclose(f);
    }
    CHECK(dlrm_read_tables(dir, DB, 16, &got, &n, NULL, &d) == SD_EFORMAT);
    CHECK(strstr(d.msg, "no element width fits") != NULL);
    /* A 3-D array: its shape named, none of the header's padding. */
    clear_dir(dir);
    write_dlrm(dir, true, 4, 8, 4, true);
    {
        char path[512];
        int32_t zero[24] = {0};
        FILE *f;

        snprintf(path, sizeof(path), "%s/lengths.npy", dir);
        f = fopen(path, "wb");
        put_npy_header(f, "<i4", "(2, 3, 4)");
        fwrite(zero, sizeof(zero[0]), 24, f);
        fclose(f);
    }
    CHECK(dlrm_read_tables(dir, DB, 16, &got, &n, NULL, &d) == SD_EFORMAT);
    CHECK(strstr(d.msg, "lengths.npy: shape (2, 3, 4) is not 1-D or 2-D") !=
          NULL);
    CHECK(strstr(d.msg, "  ") == NULL && strchr(d.msg, '}') == NULL);
    clear_dir(dir);
    CHECK(dlrm_read_tables(dir, DB, 16, &got, &n, NULL, &d) == SD_EIO);
    CHECK(dlrm_read_tables(dir, DB, 6, &got, &n, NULL, &d) == SD_EINVAL);
    rmdir(dir);
}

int main(void)
{
    test_derive_exact();
    test_derive_sampled();
    test_derive_edges();
    test_native_derived();
    test_torchrec();
    test_torchrec_whole();
    test_torchrec_errors();
    test_noted_outputs();
    test_dlrm();
    return tap_done();
}
