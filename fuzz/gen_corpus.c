/*
 * Writes the seed corpus of every fuzz target (fuzz/corpus/<target>/), so
 * that the committed seeds can be made again from the project itself:
 *
 *   gen_corpus fuzz/corpus
 *
 * Valid inputs come from the project's own writers (synthetic tables and
 * tasks, plans, trace files, the embedded model, protobuf-c requests);
 * short hand-written edge cases sit beside them.  Deterministic: the same
 * build writes the same bytes.  Files of one target are named
 * <kind>-<what>; the fuzzer adds its own (hash-named) files beside them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <protobuf-c/protobuf-c.h>

#include "grpc/health/v1/health.pb-c.h"
#include "grpc/reflection/v1alpha/reflection.pb-c.h"
#include "planner.h"
#include "prior_model.h"
#include "shardd/v1/planner.pb-c.h"

static const char *root;

static void die(const char *what)
{
    fprintf(stderr, "gen_corpus: %s\n", what);
    exit(1);
}

static void put(const char *target, const char *name, const void *data,
                size_t len)
{
    char path[1024];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", root, target);
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        die(path);
    snprintf(path, sizeof(path), "%s/%s/%s", root, target, name);
    f = fopen(path, "wb");
    if (f == NULL || (len > 0 && fwrite(data, 1, len, f) != len) ||
        fclose(f) != 0)
        die(path);
}

static void put_str(const char *target, const char *name, const char *s)
{
    put(target, name, s, strlen(s));
}

/* n synthetic tables (seeded, small traces). */
static struct table *synth(size_t n, uint64_t seed)
{
    struct synth_params sp;
    struct table *t;

    synth_params_default(&sp);
    sp.count = n;
    sp.seed = seed;
    sp.batch_size = 64;
    if (synth_tables(&sp, 1, &t) != 0)
        die("synth_tables");
    return t;
}

/* ---------------------------------------------------------------------- */
/* fuzz_tables_json                                                       */

static void gen_tables(void)
{
    static const char *const edges[][2] = {
        {"edge-empty", ""},
        {"edge-not-object", "[1, 2]"},
        {"edge-no-tables", "{}"},
        {"edge-empty-list", "{\"tables\": []}"},
        {"edge-minimal",
         "{\"tables\":[{\"name\":\"a\",\"rows\":1,\"dim\":4,"
         "\"pooling_factor\":0,\"bins\":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}"
         "]}"},
        {"edge-reals-fp16",
         "{\"tables\":[{\"name\":\"\\u00e9t\\u00e9\",\"rows\":1e6,"
         "\"dim\":1024.0,\"pooling_factor\":-0.0,\"dtype\":\"fp16\","
         "\"bins\":[1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}]}"},
        {"edge-nul-name",
         "{\"tables\":[{\"name\":\"a\\u0000b\",\"rows\":1,\"dim\":4,"
         "\"pooling_factor\":0,\"bins\":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}"
         "]}"},
        {"edge-duplicate-key", "{\"tables\":[], \"tables\":[]}"},
        {"edge-duplicate-names",
         "{\"tables\":[{\"name\":\"a\",\"rows\":1,\"dim\":4,"
         "\"pooling_factor\":0,\"bins\":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]},"
         "{\"name\":\"a\",\"rows\":1,\"dim\":4,"
         "\"pooling_factor\":0,\"bins\":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}"
         "]}"},
        {"edge-huge-numbers",
         "{\"tables\":[{\"name\":\"a\",\"rows\":9223372036854775807,"
         "\"dim\":-2147483648,\"pooling_factor\":1e308,"
         "\"bins\":[1e-320,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}]}"},
        {"edge-tasks-empty", "{\"tasks\": []}"},
        {"edge-tasks-no-tables", "{\"tasks\": [{\"name\": \"x\"}]}"},
        {"edge-deep", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]"
                      "]]]]]]]]]]]"},
    };
    struct task_params tp;
    struct task *tasks;
    struct table *pool;
    char name[64], *json;
    size_t i, n;

    for (n = 1; n <= 5; n++) {
        pool = synth(n, n);
        json = json_tables(pool, n);
        if (json == NULL)
            die("json_tables");
        snprintf(name, sizeof(name), "seed-synth-%zu", n);
        put_str("fuzz_tables_json", name, json);
        free(json);
        free(pool);
    }
    pool = synth(8, 7);
    task_params_default(&tp);
    tp.count = 2;
    tp.min_tables = 2;
    tp.max_tables = 3;
    if (task_generate(&tp, pool, 8, &tasks, NULL) != 0)
        die("task_generate");
    json = json_tasks(tasks, 2);
    if (json == NULL)
        die("json_tasks");
    put_str("fuzz_tables_json", "seed-tasks-2", json);
    free(json);
    task_array_free(tasks, 2);
    free(pool);
    for (i = 0; i < sizeof(edges) / sizeof(edges[0]); i++)
        put_str("fuzz_tables_json", edges[i][0], edges[i][1]);
}

/* ---------------------------------------------------------------------- */
/* fuzz_plan_json: the tables must be fuzz_plan_json.c's                  */

static void plan_tables(struct table t[4])
{
    static const int32_t dims[4] = {4, 8, 16, 128};
    size_t i;

    for (i = 0; i < 4; i++) {
        memset(&t[i], 0, sizeof(t[i]));
        snprintf(t[i].name, sizeof(t[i].name), "t%zu", i);
        t[i].rows = 1000 * (int64_t)(i + 1);
        t[i].dim = dims[i];
        t[i].pooling_factor = 2.0 * (double)(i + 1);
        t[i].bins[1] = 0.5;
        t[i].bins[3] = 0.25;
        t[i].dtype = i == 2 ? TABLE_DTYPE_FP16 : TABLE_DTYPE_FP32;
    }
}

static void gen_plans(void)
{
    static const char *const edges[][2] = {
        {"edge-empty", ""},
        {"edge-no-devices", "{\"tables\": []}"},
        {"edge-zero-devices", "{\"tables\": [], \"devices\": []}"},
        {"edge-no-shards", "{\"tables\": [], \"devices\": [{}]}"},
        {"edge-unknown-table",
         "{\"devices\":[{}],\"tables\":[{\"name\":\"zz\",\"shards\":[]}]}"},
        {"edge-overlap",
         "{\"devices\":[{},{}],\"tables\":["
         "{\"name\":\"t0\",\"shards\":[{\"device\":0,\"col_offset\":0,"
         "\"col_width\":4}]},"
         "{\"name\":\"t1\",\"shards\":[{\"device\":0,\"col_offset\":0,"
         "\"col_width\":8},{\"device\":1,\"col_offset\":4,\"col_width\":4}]},"
         "{\"name\":\"t2\",\"shards\":[{\"device\":1,\"col_offset\":0,"
         "\"col_width\":16}]},"
         "{\"name\":\"t3\",\"shards\":[{\"device\":1,\"col_offset\":0,"
         "\"col_width\":128}]}]}"},
        {"edge-huge-columns",
         "{\"devices\":[{}],\"tables\":[{\"name\":\"t3\",\"shards\":["
         "{\"device\":0,\"col_offset\":2147483644,\"col_width\":2147483644},"
         "{\"device\":2147483647,\"col_offset\":0,\"col_width\":1e9}]}]}"},
        {"edge-device-range",
         "{\"devices\":[{}],\"tables\":[{\"name\":\"t0\",\"shards\":["
         "{\"device\":1,\"col_offset\":0,\"col_width\":4}]}]}"},
    };
    struct plan_options o;
    struct topology topo;
    struct table t[4];
    struct plan p;
    char name[64], *json;
    int32_t ndev;
    int alg;
    size_t i;

    plan_tables(t);
    for (ndev = 1; ndev <= 4; ndev *= 2) {
        topology_default(&topo, ndev, (uint64_t)1 << 30);
        for (alg = 0; alg < PLAN_ALG_COUNT; alg++) {
            plan_options_default(&o);
            o.alg = (enum plan_alg)alg;
            o.net = net_embedded(NULL);
            o.policy = policy_embedded(NULL);
            o.threads = 1;
            if (plan_run(t, 4, &topo, &o, &cost_model_analytic, &p, NULL) != 0)
                die("plan_run");
            p.stats.search_ms = 0; /* wall time: the seeds stay the same */
            json = json_plan(&p, t);
            if (json == NULL)
                die("json_plan");
            snprintf(name, sizeof(name), "seed-%s-%d", plan_alg_name(o.alg),
                     (int)ndev);
            put_str("fuzz_plan_json", name, json);
            free(json);
            plan_destroy(&p);
        }
    }
    for (i = 0; i < sizeof(edges) / sizeof(edges[0]); i++)
        put_str("fuzz_plan_json", edges[i][0], edges[i][1]);
}

/* ---------------------------------------------------------------------- */
/* fuzz_trace                                                              */

/* Reads a file back into put() (the trace writer wants a path). */
static void put_file(const char *target, const char *name, const char *path)
{
    unsigned char buf[65536];
    size_t n;
    FILE *f = fopen(path, "rb");

    if (f == NULL)
        die(path);
    n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    put(target, name, buf, n);
}

static void gen_traces(void)
{
    /* header: magic, version 1, count */
    static const unsigned char empty[16] = {
        'S', 'D', 'T', 'R', 'A', 'C', 'E', '1', 1, 0, 0, 0, 0, 0, 0, 0};
    struct synth_params sp;
    struct trace tr[3];
    char tmp[1024], name[64];
    unsigned char buf[80];
    size_t i, n;

    snprintf(tmp, sizeof(tmp), "%s/.trace.tmp", root);
    synth_params_default(&sp);
    sp.seed = 3;
    for (n = 1; n <= 3; n++) {
        sp.batch_size = 4 * (int64_t)n;
        for (i = 0; i < n; i++)
            if (synth_trace(&sp, i * 7 + n, &tr[i]) != 0)
                die("synth_trace");
        if (trace_file_write(tmp, tr, n, NULL) != 0)
            die("trace_file_write");
        snprintf(name, sizeof(name), "seed-synth-%zu", n);
        put_file("fuzz_trace", name, tmp);
        for (i = 0; i < n; i++)
            trace_destroy(&tr[i]);
    }
    remove(tmp);
    put("fuzz_trace", "edge-no-traces", empty, sizeof(empty));
    put("fuzz_trace", "edge-truncated-header", empty, 10);
    memcpy(buf, empty, 16);
    buf[12] = 1; /* one trace promised, none there */
    put("fuzz_trace", "edge-count-lies", buf, 16);
    buf[8] = 2; /* a newer version */
    put("fuzz_trace", "edge-version-2", buf, 16);
    /* One trace "t" of 1 row, dim 4, 1 bag of 1 index: 0. */
    memset(buf, 0, sizeof(buf));
    memcpy(buf, empty, 16);
    buf[12] = 1;
    buf[16] = 1;   /* name_len */
    buf[18] = 't'; /* name */
    buf[19] = 1;   /* rows */
    buf[27] = 4;   /* dim */
    buf[31] = 1;   /* nbags */
    buf[39] = 1;   /* nindices */
    buf[55] = 1;   /* offsets[1]; offsets[0] and indices[0] stay 0 */
    /* 71 bytes: header 16, fixed part 30, name 1, offsets 16, index 8 */
    put("fuzz_trace", "edge-one-lookup", buf, 71);
    buf[55] = 0;
    buf[47] = 1; /* offsets[0] = 1, not 0 */
    put("fuzz_trace", "edge-bad-offsets", buf, 71);
    buf[47] = 0;
    buf[55] = 1;
    buf[63] = 1; /* indices[0] = 1: past the table's one row */
    put("fuzz_trace", "edge-index-range", buf, 71);
}

/* One format-2 edit: mode byte 3, offset u24, the new byte. */
static void edit4(unsigned char e[5], size_t off, unsigned char v)
{
    e[0] = 3;
    e[1] = (unsigned char)off;
    e[2] = (unsigned char)(off >> 8);
    e[3] = (unsigned char)(off >> 16);
    e[4] = v;
}

/* ---------------------------------------------------------------------- */
/* fuzz_model: the first byte picks raw (even), edits of the embedded      */
/* model (1 mod 8), of format 2 (3 mod 4) or of format 4 (5 mod 8)         */

/* m's file image behind the raw mode's first byte (0), *len bytes in all
 * (free()); dies naming `what` when it cannot be made. */
static unsigned char *raw_model_image(const struct cost_net *m,
                                      const char *what, size_t *len)
{
    unsigned char *img1;
    size_t n;
    void *img;

    if (m == NULL || net_serialize(m, &img, &n) != 0)
        die(what);
    img1 = malloc(n + 1);
    if (img1 == NULL)
        die("out of memory");
    img1[0] = 0;
    memcpy(img1 + 1, img, n);
    free(img);
    *len = n + 1;
    return img1;
}

/*
 * Format 2 (the reference set's image): the image itself, and 4-byte edits
 * (offset u24 little-endian, new byte) of its fields: offsets from
 * docs/model-format.md (transforms at 228, activation 248, eps 252, the
 * notice's length at 36,388, the first comm model after the notice).
 */
static void model_v2_seeds(void)
{
    static const unsigned char none[] = {3};
    static const unsigned char transform[] = {3, 228, 0, 0, 9};
    static const unsigned char activation[] = {3, 248, 0, 0, 5};
    static const unsigned char eps_nan[] = {3,   254, 0, 0,   0xc0,
                                            255, 0,   0, 0x7f};
    /* the length's second byte: 0x1032 = 4,146 bytes */
    static const unsigned char notice_long[] = {3, 0x25, 0x8e, 0, 0x10};
    static const unsigned char flags[] = {3, 24, 0, 0, 1};
    const struct cost_net *r = net_reference(NULL);
    unsigned char *img1, ncomm[5], ndev[5], sizes[5], dir[5];
    size_t len, comm0;

    img1 = raw_model_image(r, "net_serialize (reference)", &len);
    put("fuzz_model", "seed-v2-reference", img1, len);
    put("fuzz_model", "edge-v2-truncated", img1, len - 201);
    free(img1);
    comm0 = 36388 + 4 + (strlen(r->notice) + 3) / 4 * 4 + 4;
    edit4(ncomm, comm0 - 4, 9);  /* 9 comm models */
    edit4(ndev, comm0 + 4, 1);   /* comm[0] of 1 device */
    edit4(sizes, comm0 + 16, 0); /* comm[0].sizes[1] 0 */
    edit4(dir, comm0, 2);        /* comm[0].dir 2 */
    put("fuzz_model", "edit-v2-none", none, sizeof(none));
    put("fuzz_model", "edit-v2-transform", transform, sizeof(transform));
    put("fuzz_model", "edit-v2-activation", activation, sizeof(activation));
    put("fuzz_model", "edit-v2-eps-nan", eps_nan, sizeof(eps_nan));
    put("fuzz_model", "edit-v2-notice-long", notice_long, sizeof(notice_long));
    put("fuzz_model", "edit-v2-flags", flags, sizeof(flags));
    put("fuzz_model", "edit-v2-ncomm", ncomm, sizeof(ncomm));
    put("fuzz_model", "edit-v2-comm-ndevices", ndev, sizeof(ndev));
    put("fuzz_model", "edit-v2-comm-sizes", sizes, sizeof(sizes));
    put("fuzz_model", "edit-v2-comm-dir", dir, sizeof(dir));
}

/*
 * Format 4 (a prior model, prior_model.h): the image itself, truncated, and
 * 4-byte edits of the same form as format 2's under first byte 5: the
 * activation (248) out of range, the derived inputs' count (256) past
 * NET_XMAX, the first derived input's id (260) unknown.
 */
static void model_v4_seeds(void)
{
    static const unsigned char none[] = {5};
    static const unsigned char activation[] = {5, 248, 0, 0, 9};
    static const unsigned char nextras[] = {5, 0, 1, 0, 200};
    static const unsigned char extra_id[] = {5, 4, 1, 0, 250};
    struct cost_net *m = fuzz_prior_model();
    unsigned char *img1;
    size_t len;

    img1 = raw_model_image(m, "net_serialize (prior model)", &len);
    put("fuzz_model", "seed-v4-prior", img1, len);
    put("fuzz_model", "edge-v4-truncated", img1, (len - 1) / 2);
    free(img1);
    free(m);
    put("fuzz_model", "edit-v4-none", none, sizeof(none));
    put("fuzz_model", "edit-v4-activation", activation, sizeof(activation));
    put("fuzz_model", "edit-v4-nextras", nextras, sizeof(nextras));
    put("fuzz_model", "edit-v4-extra-id", extra_id, sizeof(extra_id));
}

static void gen_models(void)
{
    /* Edits: offset u16 little-endian, new byte (fuzz_model.c). */
    static const unsigned char no_edit[] = {1};
    static const unsigned char newer[] = {1, 4, 0, 2};
    static const unsigned char arch[] = {1, 8, 0, 21};
    static const unsigned char empty_profile[] = {1, 28, 0, 0};
    static const unsigned char zero_batch[] = {1, 156, 0, 0, 157, 0, 0};
    /* The first weight (after 388 bytes of head, mean and std): a NaN. */
    static const unsigned char nan_weight[] = {
        1, 0x84, 1, 0, 0x85, 1, 0, 0x86, 1, 0xc0, 0x87, 1, 0x7f};
    static const unsigned char raw_short[] = {0, 'S', 'D', 'C', 'N',
                                              1, 0,   0,   0};
    static const unsigned char raw_newer[] = {0, 'S', 'D', 'C', 'N',
                                              9, 0,   0,   0};
    unsigned char *img1;
    size_t len;

    img1 = raw_model_image(net_embedded(NULL), "net_serialize", &len);
    put("fuzz_model", "seed-embedded", img1, len);
    put("fuzz_model", "edge-truncated", img1, 1024);
    img1[len - 1] ^= 1; /* a checksum that does not match */
    put("fuzz_model", "edge-bad-crc", img1, len);
    free(img1);
    put("fuzz_model", "edit-none", no_edit, sizeof(no_edit));
    put("fuzz_model", "edit-newer", newer, sizeof(newer));
    put("fuzz_model", "edit-architecture", arch, sizeof(arch));
    put("fuzz_model", "edit-empty-profile", empty_profile,
        sizeof(empty_profile));
    put("fuzz_model", "edit-zero-batch", zero_batch, sizeof(zero_batch));
    put("fuzz_model", "edit-nan-weight", nan_weight, sizeof(nan_weight));
    put("fuzz_model", "raw-short", raw_short, sizeof(raw_short));
    put("fuzz_model", "raw-newer", raw_newer, sizeof(raw_newer));
    put("fuzz_model", "raw-empty", raw_short, 1);
    model_v2_seeds();
    model_v4_seeds();
}

/* ---------------------------------------------------------------------- */
/* fuzz_policy: the first byte picks raw (even) or edits (odd)             */

static void gen_policies(void)
{
    /* Edits: offset u16 little-endian, new byte (fuzz_policy.c).  The
     * file: magic 0, version 4, layer sizes 8, profile 36, the model's
     * CRC 164, metrics 168 (iterations 176, best 180, val_ratio 200),
     * weights 216. */
    static const unsigned char no_edit[] = {1};
    static const unsigned char newer[] = {1, 4, 0, 2};
    static const unsigned char arch[] = {1, 8, 0, 21};
    static const unsigned char empty_profile[] = {1, 36, 0, 0};
    static const unsigned char other_model[] = {1, 164, 0, 0x5a};
    static const unsigned char best_past[] = {1, 180, 0, 0xff, 181, 0, 0x7f};
    static const unsigned char nan_ratio[] = {1, 206, 0, 0xf8, 207, 0, 0x7f};
    static const unsigned char nan_weight[] = {1,   216, 0,    0,   217, 0,   0,
                                               218, 0,   0xc0, 219, 0,   0x7f};
    /* The output layer's first weight huge (~4e37, its top byte at
     * 216 + 4 * POL_H2W + 3): logits overflow. */
    static const unsigned char huge_weight[] = {1, 0xdb, 0xa1, 0x7e};
    static const unsigned char raw_short[] = {0, 'S', 'D', 'P', 'L',
                                              1, 0,   0,   0};
    static const unsigned char raw_newer[] = {0, 'S', 'D', 'P', 'L',
                                              9, 0,   0,   0};
    const struct policy_net *pn = policy_embedded(NULL);
    unsigned char *img1;
    void *img;
    size_t len;

    if (pn == NULL || policy_serialize(pn, &img, &len) != 0)
        die("policy_serialize");
    img1 = malloc(len + 1);
    if (img1 == NULL)
        die("out of memory");
    img1[0] = 0;
    memcpy(img1 + 1, img, len);
    put("fuzz_policy", "seed-embedded", img1, len + 1);
    put("fuzz_policy", "edge-truncated", img1, 1024);
    img1[len] ^= 1; /* a checksum that does not match */
    put("fuzz_policy", "edge-bad-crc", img1, len + 1);
    free(img1);
    free(img);
    put("fuzz_policy", "edit-none", no_edit, sizeof(no_edit));
    put("fuzz_policy", "edit-newer", newer, sizeof(newer));
    put("fuzz_policy", "edit-architecture", arch, sizeof(arch));
    put("fuzz_policy", "edit-empty-profile", empty_profile,
        sizeof(empty_profile));
    put("fuzz_policy", "edit-other-model", other_model, sizeof(other_model));
    put("fuzz_policy", "edit-best-past", best_past, sizeof(best_past));
    put("fuzz_policy", "edit-nan-ratio", nan_ratio, sizeof(nan_ratio));
    put("fuzz_policy", "edit-nan-weight", nan_weight, sizeof(nan_weight));
    put("fuzz_policy", "edit-huge-weight", huge_weight, sizeof(huge_weight));
    put("fuzz_policy", "raw-short", raw_short, sizeof(raw_short));
    put("fuzz_policy", "raw-newer", raw_newer, sizeof(raw_newer));
    put("fuzz_policy", "raw-empty", raw_short, 1);
}

/* ---------------------------------------------------------------------- */
/* fuzz_plan_request: the first byte picks the method (0 plan, 1 estimate, */
/* 2 health)                                                               */

struct pb_tables {
    Shardd__V1__Table t[8], *ptr[8];
    double bins[8][TABLE_NBINS];
};

static void pb_tables(struct pb_tables *pb, const struct table *t, size_t n)
{
    size_t i;
    int k;

    for (i = 0; i < n; i++) {
        shardd__v1__table__init(&pb->t[i]);
        pb->t[i].name = (char *)t[i].name;
        pb->t[i].rows = t[i].rows;
        pb->t[i].dim = t[i].dim;
        pb->t[i].pooling_factor = t[i].pooling_factor;
        for (k = 0; k < TABLE_NBINS; k++)
            pb->bins[i][k] = t[i].bins[k];
        pb->t[i].n_bins = TABLE_NBINS;
        pb->t[i].bins = pb->bins[i];
        pb->t[i].dtype = t[i].dtype == TABLE_DTYPE_FP16
                             ? SHARDD__V1__DTYPE__DTYPE_FP16
                             : SHARDD__V1__DTYPE__DTYPE_FP32;
        pb->ptr[i] = &pb->t[i];
    }
}

/* Packs m behind the method byte into the request corpus. */
static void put_msg(const char *name, uint8_t method, const ProtobufCMessage *m)
{
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(len + 1);

    if (buf == NULL)
        die("out of memory");
    buf[0] = method;
    protobuf_c_message_pack(m, buf + 1);
    put("fuzz_plan_request", name, buf, len + 1);
    free(buf);
}

static void gen_requests(void)
{
    static const char *const algs[] = {
        "",
        "random",
        "dim_greedy",
        "size_greedy",
        "lookup_greedy",
        "size_lookup_greedy",
        "torchrec_greedy",
        "neuroshard",
        "no_such_algorithm",
    };
    Shardd__V1__PlanRequest rq = SHARDD__V1__PLAN_REQUEST__INIT;
    Shardd__V1__EstimateRequest er = SHARDD__V1__ESTIMATE_REQUEST__INIT;
    Shardd__V1__Topology topo = SHARDD__V1__TOPOLOGY__INIT;
    Shardd__V1__PlanOptions opt = SHARDD__V1__PLAN_OPTIONS__INIT;
    Shardd__V1__Constraints cons = SHARDD__V1__CONSTRAINTS__INIT;
    Shardd__V1__Pin pin = SHARDD__V1__PIN__INIT, *pins[1] = {&pin};
    uint64_t caps[4] = {(uint64_t)1 << 30, 0, (uint64_t)64 << 30, 4096};
    Shardd__V1__TablePlacement tp[8], *tpp[8];
    Shardd__V1__Shard sh[8], *shp[8];
    Grpc__Health__V1__HealthCheckRequest hc =
        GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    struct pb_tables pb;
    struct table *t = synth(4, 11);
    char name[64];
    size_t i;

    pb_tables(&pb, t, 4);
    rq.n_tables = 4;
    rq.tables = pb.ptr;
    topo.num_devices = 2;
    topo.mem_bytes_per_device = (uint64_t)16 << 30;
    topo.batch_size = 4096;
    rq.topology = &topo;
    for (i = 0; i < sizeof(algs) / sizeof(algs[0]); i++) {
        opt.algorithm = (char *)algs[i];
        rq.options = &opt;
        snprintf(name, sizeof(name), "plan-%s",
                 algs[i][0] ? algs[i] : "default");
        put_msg(name, 0, &rq.base);
    }
    rq.options = NULL;
    put_msg("plan-no-options", 0, &rq.base);

    opt.algorithm = (char *)"size_greedy";
    opt.whole_tables_only = true;
    opt.optimizer = SHARDD__V1__OPTIMIZER__OPTIMIZER_ROWWISE_ADAGRAD;
    opt.seed = 42;
    opt.time_budget_ms = 3;
    rq.options = &opt;
    topo.num_devices = 4;
    topo.devices_per_host = 2;
    topo.inter_host_bw_bytes_per_ms = 1e6;
    put_msg("plan-two-hosts-adagrad", 0, &rq.base);

    opt.profile = (char *)"no/such/profile";
    put_msg("plan-unknown-profile", 0, &rq.base);
    opt.profile = NULL;
    pin.table = t[0].name;
    pin.device = 1;
    cons.n_pins = 1;
    cons.pins = pins;
    opt.constraints = &cons;
    put_msg("plan-pinned", 0, &rq.base);
    opt.algorithm = (char *)"neuroshard";
    opt.whole_tables_only = false;
    put_msg("plan-pinned-neuroshard", 0, &rq.base);
    pin.device = 7;
    put_msg("plan-pinned-bad-device", 0, &rq.base);
    pin.device = 1;
    opt.constraints = NULL;
    /* Devices of different capacities (0: mem_bytes_per_device); one too
     * small for anything. */
    topo.n_mem_bytes_by_device = 4;
    topo.mem_bytes_by_device = caps;
    put_msg("plan-capacities", 0, &rq.base);
    topo.n_mem_bytes_by_device = 3;
    put_msg("plan-capacities-short", 0, &rq.base);
    topo.n_mem_bytes_by_device = 0;
    topo.mem_bytes_by_device = NULL;
    opt.algorithm = (char *)"size_greedy";
    opt.whole_tables_only = true;

    topo.mem_bytes_per_device = 1024;
    put_msg("plan-no-room", 0, &rq.base);
    topo.mem_bytes_per_device = (uint64_t)16 << 30;
    topo.num_devices = 0;
    put_msg("plan-zero-devices", 0, &rq.base);
    topo.num_devices = 4;
    pb.t[1].dim = 30;
    put_msg("plan-bad-dim", 0, &rq.base);
    pb.t[1].dim = t[1].dim;
    rq.topology = NULL;
    put_msg("plan-no-topology", 0, &rq.base);
    rq.topology = &topo;

    /* Estimate: each table whole on device i % 4, then a split one. */
    er.n_tables = 4;
    er.tables = pb.ptr;
    er.topology = &topo;
    for (i = 0; i < 4; i++) {
        shardd__v1__table_placement__init(&tp[i]);
        shardd__v1__shard__init(&sh[i]);
        sh[i].device = (int32_t)(i % 4);
        sh[i].col_width = t[i].dim;
        shp[i] = &sh[i];
        tp[i].table = t[i].name;
        tp[i].n_shards = 1;
        tp[i].shards = &shp[i];
        tpp[i] = &tp[i];
    }
    er.n_placement = 4;
    er.placement = tpp;
    put_msg("estimate-whole", 1, &er.base);
    er.optimizer = SHARDD__V1__OPTIMIZER__OPTIMIZER_ADAM;
    er.profile = (char *)"no/such/profile";
    put_msg("estimate-adam-analytic", 1, &er.base);
    er.profile = NULL;
    sh[0].col_width = 4;
    put_msg("estimate-gap", 1, &er.base);
    sh[0].col_width = t[0].dim;
    er.n_placement = 3;
    put_msg("estimate-missing-table", 1, &er.base);
    er.n_placement = 4;
    topo.mem_bytes_per_device = 4096;
    put_msg("estimate-over-full", 1, &er.base);

    put_msg("health-all", 2, &hc.base);
    hc.service = (char *)"shardd.v1.Planner";
    put_msg("health-planner", 2, &hc.base);
    hc.service = (char *)"shardd.v1.Nothing";
    put_msg("health-unknown", 2, &hc.base);
    put("fuzz_plan_request", "raw-garbage", "\x00\xff\xff\xff\xff\x0f", 6);
    free(t);
}

/* One request of each kind a reflection stream carries (method 3). */
static void gen_reflection(void)
{
    Grpc__Reflection__V1alpha__ServerReflectionRequest rq =
        GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__INIT;

    rq.host = (char *)"localhost";
    rq.message_request_case =
        GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES;
    rq.list_services = (char *)"";
    put_msg("reflect-list", 3, &rq.base);
    rq.message_request_case =
        GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL;
    rq.file_containing_symbol = (char *)"shardd.v1.Admin.WatchJob";
    put_msg("reflect-symbol", 3, &rq.base);
    rq.file_containing_symbol = (char *)"no.such.Symbol";
    put_msg("reflect-no-symbol", 3, &rq.base);
    rq.message_request_case =
        GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME;
    rq.file_by_filename = (char *)"shardd/v1/planner.proto";
    put_msg("reflect-file", 3, &rq.base);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_corpus DIR (fuzz/corpus)\n");
        return 2;
    }
    root = argv[1];
    if (mkdir(root, 0755) != 0 && errno != EEXIST)
        die(root);
    gen_tables();
    gen_plans();
    gen_traces();
    gen_models();
    gen_policies();
    gen_requests();
    gen_reflection();
    return 0;
}
