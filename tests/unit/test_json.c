/* JSON formats: reading tables and tasks (every bad field named), and the
 * plan writers' shape. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "harness.h"
#include "planner.h"

#define BINS "[0.5,0.5,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]"

static int parse(const char *s, struct table **t, size_t *n, struct sd_diag *d)
{
    return json_parse_tables(s, strlen(s), 0, t, n, d);
}

static void test_read_ok(void)
{
    const char *doc =
        "{\"tables\":[{\"name\":\"a\",\"rows\":1000,\"dim\":64,"
        "\"pooling_factor\":2.5,\"bins\":" BINS "},"
        "{\"name\":\"b\",\"rows\":1e6,\"dim\":8,"
        "\"pooling_factor\":0,\"bins\":" BINS ",\"dtype\":\"fp16\"}]}";
    struct table *t = NULL;
    struct sd_diag d;
    size_t n = 0;

    CHECK(parse(doc, &t, &n, &d) == 0);
    CHECK(n == 2);
    if (n == 2) {
        CHECK(strcmp(t[0].name, "a") == 0 && t[0].rows == 1000);
        CHECK(t[0].dim == 64 && t[0].pooling_factor == 2.5);
        CHECK(t[0].bins[1] == 0.5 && t[0].dtype == TABLE_DTYPE_FP32);
        CHECK(t[1].rows == 1000000 && t[1].dtype == TABLE_DTYPE_FP16);
    }
    free(t);
}

/* Each bad document fails with the expected code and a message holding the
 * expected words; the out-parameters stay untouched. */
static void test_read_bad(void)
{
    static const struct {
        const char *doc;
        int err;
        const char *words;
    } cases[] = {
        {"{\"tables\":[{\"rows\":10,\"dim\":8,\"pooling_factor\":1,"
         "\"bins\":" BINS "}]}",
         SD_EINVAL, "name is missing"},
        {"{\"tables\":[{\"name\":\"x\",\"dim\":8,\"pooling_factor\":1,"
         "\"bins\":" BINS "}]}",
         SD_EINVAL, "\"x\": rows is missing"},
        {"{\"tables\":[{\"name\":\"x\",\"rows\":-3,\"dim\":8,"
         "\"pooling_factor\":1,\"bins\":" BINS "}]}",
         SD_EINVAL, "\"x\": rows -3"},
        {"{\"tables\":[{\"name\":\"x\",\"rows\":0,\"dim\":8,"
         "\"pooling_factor\":1,\"bins\":" BINS "}]}",
         SD_EINVAL, "rows 0"},
        {"{\"tables\":[{\"name\":\"x\",\"rows\":10,\"dim\":30,"
         "\"pooling_factor\":1,\"bins\":" BINS "}]}",
         SD_EINVAL, "\"x\": dim 30"},
        {"{\"tables\":[{\"name\":\"x\",\"rows\":10,\"dim\":8.5,"
         "\"pooling_factor\":1,\"bins\":" BINS "}]}",
         SD_EINVAL, "dim is not an integer"},
        {"{\"tables\":[{\"name\":\"x\",\"rows\":10,\"dim\":8,"
         "\"pooling_factor\":\"many\",\"bins\":" BINS "}]}",
         SD_EINVAL, "pooling_factor is not a number"},
        {"{\"tables\":[{\"name\":\"x\",\"rows\":10,\"dim\":8,"
         "\"pooling_factor\":NaN,\"bins\":" BINS "}]}",
         SD_EFORMAT, "malformed JSON at line 1"},
        {"{\"tables\":[{\"name\":\"x\",\"rows\":10,\"dim\":8,"
         "\"pooling_factor\":1,\"bins\":[1,2]}]}",
         SD_EINVAL, "bins is not an array of 17"},
        {"{\"tables\":[{\"name\":\"x\",\"rows\":10,\"dim\":8,"
         "\"pooling_factor\":1,\"bins\":" BINS ",\"dtype\":\"int4\"}]}",
         SD_EINVAL, "dtype"},
        {"{\"tables\":[{\"name\":\"x\",\"rows\":10,\"dim\":8,"
         "\"pooling_factor\":1,\"bins\":" BINS "},{\"name\":\"x\","
         "\"rows\":10,\"dim\":8,\"pooling_factor\":1,\"bins\":" BINS "}]}",
         SD_EINVAL, "name repeats"},
        {"{\"tables\":[]}", SD_EINVAL, "empty"},
        {"{\"tables\":{}}", SD_EINVAL, "not an array"},
        {"{\"tablez\":[]}", SD_EINVAL, "tables is missing"},
        {"[1,2]", SD_EINVAL, "not an object"},
        {"{\"tables\":[", SD_EFORMAT, "malformed JSON"},
        {"", SD_EFORMAT, "malformed JSON"},
        {"{\"tables\":[1]}", SD_EINVAL, "tables[0]: not an object"},
        {"{\"tasks\":[{\"name\":\"t\"}]}", SD_EINVAL, "tables is missing"},
    };
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct table *t = (struct table *)&cases; /* sentinel */
        struct sd_diag d;
        size_t n = 12345;
        int rv = parse(cases[i].doc, &t, &n, &d);

        if (rv != cases[i].err || strstr(d.msg, cases[i].words) == NULL)
            fprintf(stderr, "case %zu: rv %d, msg \"%s\"\n", i, rv, d.msg);
        CHECK(rv == cases[i].err);
        CHECK(strstr(d.msg, cases[i].words) != NULL);
        CHECK(t == (struct table *)&cases && n == 12345);
    }
}

static void test_tasks(void)
{
    const char *doc =
        "{\"tasks\":[{\"name\":\"t0\",\"tables\":[{\"name\":\"a\",\"rows\":1,"
        "\"dim\":4,\"pooling_factor\":1,\"bins\":" BINS "}]},"
        "{\"name\":\"t1\",\"tables\":[{\"name\":\"b\",\"rows\":2,\"dim\":8,"
        "\"pooling_factor\":1,\"bins\":" BINS "}]}]}";
    struct table *t = NULL;
    struct sd_diag d;
    size_t n;

    CHECK(json_parse_tables(doc, strlen(doc), 1, &t, &n, &d) == 0);
    CHECK(t != NULL && n == 1 && strcmp(t[0].name, "b") == 0);
    free(t);
    CHECK(json_parse_tables(doc, strlen(doc), 2, &t, &n, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "task 2 requested, the file has 2"));
}

/* Written tables read back identically (doubles round-trip exactly). */
static void test_round_trip(void)
{
    struct table in[2], *out = NULL;
    struct sd_diag d;
    char *s;
    size_t n;
    int k;

    memset(in, 0, sizeof(in));
    snprintf(in[0].name, sizeof(in[0].name), "a \"quoted\" name");
    in[0].rows = 4107472;
    in[0].dim = 128;
    in[0].pooling_factor = 15.811706123;
    for (k = 0; k < TABLE_NBINS; k++)
        in[0].bins[k] = 1.0 / 17.0;
    in[1] = in[0];
    memset(in[1].name, 0, sizeof(in[1].name));
    snprintf(in[1].name, sizeof(in[1].name), "b");
    in[1].dtype = TABLE_DTYPE_FP16;
    s = json_tables(in, 2);
    CHECK(s != NULL);
    CHECK(parse(s, &out, &n, &d) == 0);
    CHECK(n == 2 && memcmp(&in[0], &out[0], sizeof(in[0])) == 0);
    CHECK(n == 2 && memcmp(&in[1], &out[1], sizeof(in[1])) == 0);
    free(out);
    free(s);
}

static void test_plan_writers(void)
{
    struct table tb[2];
    struct topology t;
    struct plan p;
    json_error_t e;
    json_t *root, *tbl, *sh;
    char *s;

    memset(tb, 0, sizeof(tb));
    snprintf(tb[0].name, sizeof(tb[0].name), "a");
    snprintf(tb[1].name, sizeof(tb[1].name), "b");
    tb[0].rows = tb[1].rows = 100;
    tb[0].dim = 8;
    tb[1].dim = 16;
    topology_default(&t, 4, 1ull << 30);
    t.devices_per_host = 2;
    plan_init(&p, 4);
    plan_add(&p, 0, 3, 0, 8);
    plan_add(&p, 1, 1, 0, 8);
    plan_add(&p, 1, 2, 8, 8);
    plan_sort(&p);
    CHECK(plan_evaluate(&p, tb, 2, &t, OPTIMIZER_SGD, &cost_model_analytic) ==
          0);

    s = json_plan(&p, tb);
    root = s ? json_loads(s, 0, &e) : NULL;
    CHECK(root != NULL);
    CHECK(json_array_size(json_object_get(root, "devices")) == 4);
    CHECK(json_real_value(json_object_get(root, "plan_cost_ms")) == p.cost_ms);
    tbl = json_array_get(json_object_get(root, "tables"), 1);
    CHECK(strcmp(json_string_value(json_object_get(tbl, "name")), "b") == 0);
    sh = json_array_get(json_object_get(tbl, "shards"), 1);
    CHECK(json_integer_value(json_object_get(sh, "device")) == 2);
    CHECK(json_integer_value(json_object_get(sh, "col_offset")) == 8);
    json_decref(root);
    free(s);

    s = json_plan_torchrec(&p, tb, &t, NULL);
    root = s ? json_loads(s, 0, &e) : NULL;
    CHECK(root != NULL);
    tbl = json_object_get(
        json_object_get(json_object_get(root, "plan"), "embedding_bags"), "b");
    CHECK(strcmp(json_string_value(json_object_get(tbl, "sharding_type")),
                 "column_wise") == 0);
    CHECK(json_array_size(json_object_get(tbl, "ranks")) == 2);
    sh = json_array_get(json_object_get(tbl, "shards"), 1);
    CHECK(strcmp(json_string_value(json_object_get(sh, "placement")),
                 "rank:2/cuda:0") == 0);
    CHECK(json_integer_value(
              json_array_get(json_object_get(sh, "shard_offsets"), 1)) == 8);
    CHECK(json_integer_value(
              json_array_get(json_object_get(sh, "shard_sizes"), 0)) == 100);
    tbl = json_object_get(
        json_object_get(json_object_get(root, "plan"), "embedding_bags"), "a");
    CHECK(strcmp(json_string_value(json_object_get(tbl, "sharding_type")),
                 "table_wise") == 0);
    json_decref(root);
    free(s);
    plan_destroy(&p);
}

/* jansson's own text of doc s (parsed and dumped as the writers did with
 * jansson): json_plan() writes as it goes, and must read the same. */
static bool same_as_jansson(const char *s)
{
    json_error_t e;
    json_t *root = json_loads(s, 0, &e);
    char *again =
        root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    bool same = again != NULL && strcmp(again, s) == 0;

    if (!same)
        fprintf(stderr, "written:\n%s\njansson:\n%s\n", s,
                again ? again : "(none)");
    free(again);
    json_decref(root);
    return same;
}

/*
 * The plan's JSON, written without jansson's tree (formats/json_plan.c), is
 * jansson's text byte for byte on a plan with every optional part: row
 * blocks, a cached and a UVM table, hosts, an explanation with drivers and
 * notes, the search's figures, the input's notes, names and notes with
 * quotes, backslashes, control characters and UTF-8, reals that need an
 * exponent or ".0"; and it refuses what jansson refuses (a name that is not
 * UTF-8, a cost that is not finite).
 */
static void test_plan_text(void)
{
    struct table tb[3];
    struct topology t;
    struct plan p;
    struct input_note nv[1];
    struct input_notes notes = {1, 1, nv};
    json_error_t e;
    json_t *root, *tbl;
    char *s;

    memset(tb, 0, sizeof(tb));
    snprintf(tb[0].name, sizeof(tb[0].name), "a\"b\\c\td\x01\x1f \xc3\xa9");
    snprintf(tb[1].name, sizeof(tb[1].name), "rows");
    snprintf(tb[2].name, sizeof(tb[2].name), "cached/uvm");
    tb[0].rows = 100;
    tb[1].rows = 4000;
    tb[2].rows = 1000000;
    tb[0].dim = 8;
    tb[1].dim = 16;
    tb[2].dim = 32;
    topology_default(&t, 4, 1ull << 30);
    t.devices_per_host = 2;
    t.host_dram_bytes = 64ull << 30;
    plan_init(&p, 4);
    plan_add(&p, 0, 3, 0, 8);
    CHECK(plan_add_shard(&p, &(struct shard){.table = 1,
                                             .device = 0,
                                             .col_width = 16,
                                             .row_offset = 0,
                                             .row_count = 2000,
                                             .scheme = SCHEME_TWRW}) == 0);
    CHECK(plan_add_shard(&p, &(struct shard){.table = 1,
                                             .device = 1,
                                             .col_width = 16,
                                             .row_offset = 2000,
                                             .row_count = 2000,
                                             .scheme = SCHEME_TWRW}) == 0);
    CHECK(plan_add_shard(&p, &(struct shard){.table = 2,
                                             .device = 2,
                                             .col_width = 32,
                                             .tier = TIER_UVM_CACHING,
                                             .cache_load_factor = 0.2f}) == 0);
    plan_sort(&p);
    CHECK(plan_evaluate(&p, tb, 3, &t, OPTIMIZER_SGD, &cost_model_analytic) ==
          0);
    CHECK(plan_explain(&p, tb, &t, &cost_model_analytic) == 0);
    p.devices[0].compute_ms = 1e-7; /* an exponent */
    p.devices[1].compute_ms = 3;    /* ".0" */
    p.devices[2].tier_ms = 0.25;
    p.devices[2].tier_measured = true;
    p.stats.states = 7;
    p.stats.greedy_runs = 70;
    p.stats.search_ms = 1.5e20;
    plan_note(&p, "a note with \"quotes\"\nand a line");
    nv[0] = (struct input_note){.kind = NOTE_ASSUMED};
    snprintf(nv[0].table, sizeof(nv[0].table), "rows");
    snprintf(nv[0].field, sizeof(nv[0].field), "pooling_factor");
    snprintf(nv[0].text, sizeof(nv[0].text), "assumed 1");

    s = json_plan_noted(&p, tb, &notes);
    CHECK(s != NULL && same_as_jansson(s));
    root = s ? json_loads(s, 0, &e) : NULL;
    CHECK(root != NULL);
    tbl = json_array_get(json_object_get(root, "tables"), 0);
    CHECK(strcmp(json_string_value(json_object_get(tbl, "name")), tb[0].name) ==
          0);
    tbl = json_array_get(json_object_get(root, "tables"), 1);
    CHECK(json_integer_value(
              json_object_get(json_array_get(json_object_get(tbl, "shards"), 1),
                              "row_offset")) == 2000);
    tbl = json_array_get(json_object_get(root, "tables"), 2);
    CHECK(strcmp(json_string_value(json_object_get(tbl, "compute_kernel")),
                 "fused_uvm_caching") == 0);
    CHECK(json_array_size(json_object_get(root, "hosts")) == 2);
    CHECK(
        json_real_value(json_object_get(
            json_object_get(json_array_get(json_object_get(root, "devices"), 0),
                            "cost_ms"),
            "compute")) == 1e-7);
    CHECK(json_is_true(json_object_get(
        json_object_get(json_array_get(json_object_get(root, "devices"), 2),
                        "cost_ms"),
        "tier_measured")));
    CHECK(json_integer_value(json_object_get(json_object_get(root, "search"),
                                             "greedy_runs")) == 70);
    CHECK(json_array_size(json_object_get(root, "notes")) == 1);
    json_decref(root);
    free(s);

    /* Without the input's notes: the same text without "notes". */
    s = json_plan(&p, tb);
    CHECK(s != NULL && same_as_jansson(s) && strstr(s, "\"notes\"") == NULL);
    free(s);

    p.devices[3].total_ms = NAN;
    s = json_plan(&p, tb);
    CHECK(s == NULL); /* json_real() refuses it */
    free(s);
    p.devices[3].total_ms = 1;
    tb[1].name[1] = (char)0xff;
    s = json_plan(&p, tb);
    CHECK(s == NULL); /* json_string() refuses it */
    free(s);
    snprintf(tb[1].name, sizeof(tb[1].name), "r\xc3(");
    s = json_plan(&p, tb); /* a lead byte without its continuation */
    CHECK(s == NULL);
    free(s);
    snprintf(tb[1].name, sizeof(tb[1].name), "r\xe0\x80\xaf");
    s = json_plan(&p, tb); /* "/" in three bytes: overlong */
    CHECK(s == NULL);
    free(s);
    plan_destroy(&p);
}

/* A written plan reads back to the same shards; bad plans name the fault. */
static void test_read_plan(void)
{
    static const struct {
        const char *doc;
        const char *words;
    } bad[] = {
        {"{\"devices\":[{}],\"tables\":[{\"name\":\"zz\",\"shards\":[]}]}",
         "\"zz\" is not in the tables file"},
        {"{\"tables\":[]}", "devices is missing"},
        {"{\"devices\":[{}]}", "tables is missing"},
        {"{\"devices\":[{}],\"tables\":[{\"name\":\"a\",\"shards\":"
         "[{\"device\":0,\"col_offset\":-4,\"col_width\":8}]}]}",
         "shards[0].col_offset"},
        {"{\"devices\":[{}],\"tables\":[{\"name\":\"a\"}]}",
         "shards is missing"},
        {"{\"devices\":", "malformed JSON"},
    };
    struct table tb[2];
    struct topology t;
    struct plan p, q;
    struct sd_diag d;
    size_t i;
    char *s;

    memset(tb, 0, sizeof(tb));
    snprintf(tb[0].name, sizeof(tb[0].name), "a");
    snprintf(tb[1].name, sizeof(tb[1].name), "b");
    tb[0].rows = tb[1].rows = 100;
    tb[0].dim = 8;
    tb[1].dim = 16;
    topology_default(&t, 3, 1ull << 30);
    plan_init(&p, 3);
    plan_add(&p, 0, 2, 0, 8);
    plan_add(&p, 1, 0, 0, 4);
    plan_add(&p, 1, 1, 4, 12);
    CHECK(plan_validate(&p, tb, 2, &t, OPTIMIZER_SGD, &d) == 0);
    plan_evaluate(&p, tb, 2, &t, OPTIMIZER_SGD, &cost_model_analytic);
    s = json_plan(&p, tb);
    CHECK(s != NULL && json_parse_plan(s, strlen(s), tb, 2, &q, &d) == 0);
    CHECK(q.ndevices == 3 && q.nshards == 3);
    CHECK(plan_validate(&q, tb, 2, &t, OPTIMIZER_SGD, &d) == 0);
    for (i = 0; i < 3; i++)
        CHECK(p.shards[i].table == q.shards[i].table &&
              p.shards[i].device == q.shards[i].device &&
              p.shards[i].col_offset == q.shards[i].col_offset &&
              p.shards[i].col_width == q.shards[i].col_width &&
              q.shards[i].row_count == 0 &&
              p.shards[i].scheme == q.shards[i].scheme);
    CHECK(q.shards[0].scheme == SCHEME_TW && q.shards[1].scheme == SCHEME_CW);
    plan_destroy(&q);
    plan_destroy(&p);
    free(s);

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rv = json_parse_plan(bad[i].doc, strlen(bad[i].doc), tb, 2, &q, &d);

        CHECK(rv != 0);
        if (rv == 0)
            plan_destroy(&q);
        else if (!strstr(d.msg, bad[i].words))
            fprintf(stderr, "plan case %zu: \"%s\"\n", i, d.msg);
        CHECK(rv != 0 && strstr(d.msg, bad[i].words) != NULL);
    }
}

int main(void)
{
    test_read_plan();
    test_read_ok();
    test_read_bad();
    test_tasks();
    test_round_trip();
    test_plan_writers();
    test_plan_text();
    return tap_done();
}
