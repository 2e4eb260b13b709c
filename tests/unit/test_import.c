/*
 * NeuroShard's released models read without torch: the golden vectors of
 * neuroshard.md 5.5 from the committed checkpoints
 * (models/neuroshard-released/) and from the committed conversion
 * (models/neuroshard-v100.sdcn, the reference profile compiled in), the
 * conversion reproduced byte for byte, the unpickler's refusals (every
 * opcode outside its subset, foreign globals, malformed pickles), damaged
 * zips, and checkpoints of another architecture.  The checkpoints are
 * committed (MIT, 140 KB); should they be missing, the parts that need them
 * are skipped and the test exits 77 after the others.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "planner.h"

#define RELEASED SD_SOURCE_DIR "/models/neuroshard-released/"
#define REL_TOL  1e-5

static void make(struct table *t, int32_t dim, double pf, int64_t rows,
                 const double *bins)
{
    int k;

    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "g%d", (int)dim);
    t->dim = dim;
    t->pooling_factor = pf;
    t->rows = rows;
    for (k = 0; k < TABLE_NBINS; k++)
        t->bins[k] = bins[k];
}

/* |got / want - 1| <= REL_TOL, reported with its name. */
static void near_rel(double got, double want, const char *what)
{
    double rel = fabs(got / want - 1);

    if (rel <= REL_TOL) {
        tap_pass++;
    } else {
        tap_fail++;
        fprintf(stderr, "%s: %.7f, golden %.7f (rel %.2g)\n", what, got, want,
                rel);
    }
}

/* neuroshard.md 5.5, computed in float64 from the released weights. */
static void check_golden(const struct cost_net *m, const char *src)
{
    static const double A[TABLE_NBINS] = {.5,  .2,  .1,  .05, .05, .03,
                                          .02, .02, .01, .01, .01};
    static const double B[TABLE_NBINS] = {.2, .2, .2, .2, .2};
    static const double C[TABLE_NBINS] = {.1, .1, .1, .1, .1,
                                          .1, .1, .1, .1, .1};
    static const double bw_want[4] = {5.783564, 5.727033, 5.088137, 4.909050};
    static const double fw_want[4] = {5.605625, 8.655078, 7.639276, 6.796375};
    double in[8] = {224, 32, 128, 0, 3, 0, 1, 2}, out[4];
    const struct comm_net *c;
    struct table t[3];
    float z[NET_H2];
    char what[96];
    int r;

    make(&t[0], 64, 20.0, 1000000, A);
    make(&t[1], 32, 5.0, 5000000, B);
    make(&t[2], 128, 40.0, 8000000, C);
    snprintf(what, sizeof(what), "%s compute(A)", src);
    near_rel(net_tables_ms(m, &t[0], 1), 3.740525, what);
    snprintf(what, sizeof(what), "%s compute(B)", src);
    near_rel(net_tables_ms(m, &t[1], 1), 2.339350, what);
    snprintf(what, sizeof(what), "%s compute(C)", src);
    near_rel(net_tables_ms(m, &t[2], 1), 5.438600, what);
    snprintf(what, sizeof(what), "%s compute(A,B)", src);
    near_rel(net_tables_ms(m, t, 2), 5.325507, what);
    snprintf(what, sizeof(what), "%s compute(A,B,C)", src);
    near_rel(net_tables_ms(m, t, 3), 8.674458, what);
    /* The empty shard's head-bias path (given to 3 decimals). */
    net_head_init(m, z);
    CHECK_NEAR(net_head_z(m, z), 0.0940, 5e-4);

    c = net_comm_find(m, COMM_BWD, 4);
    CHECK(c != NULL);
    if (c != NULL) {
        comm_net_run(m, c, in, out);
        for (r = 0; r < 4; r++) {
            snprintf(what, sizeof(what), "%s bw[%d]", src, r);
            near_rel(out[r], bw_want[r], what);
        }
        /* Balanced dims: ~16.28 each, growing with the dims. */
        in[0] = in[1] = in[2] = in[3] = 364;
        comm_net_run(m, c, in, out);
        CHECK(fabs(out[0] - 16.28) < 0.05 && fabs(out[3] - 16.28) < 0.05);
    }
    c = net_comm_find(m, COMM_FWD, 4);
    CHECK(c != NULL);
    if (c != NULL) {
        double in2[8] = {224, 32, 128, 0, 3, 0, 1, 2};

        comm_net_run(m, c, in2, out);
        for (r = 0; r < 4; r++) {
            snprintf(what, sizeof(what), "%s fw[%d]", src, r);
            near_rel(out[r], fw_want[r], what);
        }
        /* The waiting effect: a device 5 ms late, the others pay ~5 ms. */
        in2[0] = in2[1] = in2[2] = in2[3] = 364;
        in2[4] = 5;
        in2[5] = in2[6] = in2[7] = 0;
        comm_net_run(m, c, in2, out);
        CHECK(fabs(out[0] - 15.1) < 0.1 && fabs(out[1] - 20.1) < 0.15);
    }
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    long n;

    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 &&
        fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n)) != NULL &&
        fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf != NULL)
        *len = (size_t)n;
    fclose(f);
    return buf;
}

static bool have_released(void)
{
    return access(RELEASED "compute.pt", R_OK) == 0 &&
           access(RELEASED "comm_4_fw.pt", R_OK) == 0 &&
           access(RELEASED "comm_4_bw.pt", R_OK) == 0;
}

/* The three checkpoints imported: golden vectors, and the very bytes of
 * the committed conversion (notice included). */
static void test_released(void)
{
    struct torch_ckpt *c = NULL, *fw = NULL, *bw = NULL;
    struct cost_net *m = NULL;
    struct sd_diag d = {{0}};
    char *notice;
    unsigned char *want;
    size_t nlen = 0, wlen = 0, len;
    void *img;

    CHECK(torch_read(RELEASED "compute.pt", &c, &d) == 0);
    CHECK(torch_read(RELEASED "comm_4_fw.pt", &fw, &d) == 0);
    CHECK(torch_read(RELEASED "comm_4_bw.pt", &bw, &d) == 0);
    if (!c || !fw || !bw) {
        fprintf(stderr, "torch_read: %s\n", d.msg);
        goto out;
    }
    /* What the unpickler found: the checkpoint's keys and shapes. */
    CHECK(c->n == 13 && torch_find(c, "state_dict.t_hidden.0.weight") &&
          torch_find(c, "state_dict.t_hidden.0.weight")->shape[1] == 20);
    CHECK(torch_find(fw, "ndevices")->i[0] == 4 &&
          torch_find(fw, "mlp_sizes")->n == 4 &&
          torch_find(fw, "feature_means")->n == 8);
    notice = (char *)slurp(RELEASED "NOTICE", &nlen);
    CHECK(notice != NULL);
    if (notice == NULL)
        goto out;
    notice = realloc(notice, nlen + 1);
    notice[nlen] = '\0';
    CHECK(net_import_neuroshard(c, fw, bw, NET_REFERENCE_PROFILE, 65536, notice,
                                &m, &d) == 0);
    free(notice);
    if (m == NULL) {
        fprintf(stderr, "import: %s\n", d.msg);
        goto out;
    }
    check_golden(m, "imported");
    CHECK(net_format_version(m) == 2 && m->ncomm == 2);
    CHECK(net_serialize(m, &img, &len) == 0);
    want = slurp(SD_SOURCE_DIR "/models/neuroshard-v100.sdcn", &wlen);
    CHECK(want != NULL && wlen == len && memcmp(want, img, len) == 0);
    free(want);
    free(img);
out:
    free(m);
    torch_free(c);
    torch_free(fw);
    torch_free(bw);
}

/* The compiled-in reference profile: the same golden vectors, its notice,
 * and it is not the default. */
static void test_reference(void)
{
    struct sd_diag d = {{0}};
    const struct cost_net *ref = net_reference(&d), *def = net_embedded(&d);

    CHECK(ref != NULL && def != NULL);
    if (ref == NULL || def == NULL)
        return;
    CHECK(strcmp(ref->profile, NET_REFERENCE_PROFILE) == 0);
    CHECK(ref->batch_size == 65536);
    CHECK(strstr(ref->notice, "MIT License") != NULL &&
          strstr(ref->notice, "Daochen Zha") != NULL);
    CHECK(net_io_activation(ref) == NET_ACT_NONE && net_io_eps(ref) == 0);
    CHECK(strcmp(def->profile, NET_REFERENCE_PROFILE) != 0);
    check_golden(ref, "reference");
}

/* ------------------------------------------------------------------------ */
/* The unpickler                                                             */

static int unpickle(const char *pkl, size_t len, struct torch_ckpt **c,
                    struct sd_diag *d)
{
    *c = NULL;
    return torch_unpickle(pkl, len, c, d);
}

/* Refused, naming `what`. */
static void refuses(const char *pkl, size_t len, const char *what)
{
    struct torch_ckpt *c;
    struct sd_diag d = {{0}};

    CHECK(unpickle(pkl, len, &c, &d) == SD_EFORMAT && c == NULL);
    if (strstr(d.msg, what) == NULL) {
        fprintf(stderr, "refuses: wanted \"%s\" in \"%s\"\n", what, d.msg);
        CHECK(0);
    }
}

#define P(s) s, sizeof(s) - 1

/* {"w": tensor of storage "0" (4 floats) of size (2, 2), stride S}. */
#define TENSOR_PKL(S)                                                          \
    "\x80\x02}(X\x01\x00\x00\x00w"                                             \
    "ctorch._utils\n_rebuild_tensor_v2\n"                                      \
    "((X\x07\x00\x00\x00storage"                                               \
    "ctorch\nFloatStorage\n"                                                   \
    "X\x01\x00\x00\x00"                                                        \
    "0X\x03\x00\x00\x00"                                                       \
    "cpuK\x04tQK\x00K\x02K\x02\x86" S "\x89"                                   \
    "ccollections\nOrderedDict\n)RtRu."

static void test_unpickler(void)
{
    static const char allowed[] = "}])\x89\x88KMJXcqrhjt\x85\x86\x87sueRQb(.";
    struct torch_ckpt *c;
    struct sd_diag d = {{0}};
    char pkl[8];
    int op, refused = 0, wrong = 0;

    /* {"a": 5, "l": [1, 2], "s": {"x": 300}} */
    CHECK(unpickle(P("\x80\x02}q\x00(X\x01\x00\x00\x00"
                     "aK\x05X\x01\x00\x00\x00l"
                     "](K\x01K\x02\x65X\x01\x00\x00\x00s}X\x01\x00\x00\x00xM,"
                     "\x01su."),
                   &c, &d) == 0);
    if (c != NULL) {
        CHECK(c->n == 3 && torch_find(c, "a")->i[0] == 5 &&
              torch_find(c, "l")->n == 2 && torch_find(c, "l")->i[1] == 2 &&
              torch_find(c, "s.x")->kind == TORCH_INT &&
              torch_find(c, "s.x")->i[0] == 300);
        torch_free(c);
    } else {
        fprintf(stderr, "unpickle: %s\n", d.msg);
    }
    /* A tensor, described: row-major strides taken, others refused. */
    CHECK(unpickle(P(TENSOR_PKL("K\x02K\x01\x86")), &c, &d) == 0);
    if (c != NULL) {
        CHECK(c->n == 1 && c->e[0].kind == TORCH_TENSOR && c->e[0].n == 4 &&
              c->e[0].ndim == 2 && strcmp(c->e[0].storage, "0") == 0 &&
              c->e[0].f == NULL);
        torch_free(c);
    }
    refuses(P(TENSOR_PKL("K\x01K\x02\x86")), "not a contiguous");

    /* Every opcode outside the subset is refused by name. */
    for (op = 0; op < 256; op++) {
        if (op != 0 && strchr(allowed, op) != NULL)
            continue;
        memcpy(pkl, "\x80\x02}", 3);
        pkl[3] = (char)op;
        pkl[4] = '.';
        if (unpickle(pkl, 5, &c, &d) == SD_EFORMAT && strstr(d.msg, "opcode") &&
            strstr(d.msg, "offset 3"))
            refused++;
        else
            wrong++;
        torch_free(c);
    }
    CHECK(refused == 256 - (int)strlen(allowed) && wrong == 0);
    refuses(P("\x80\x02}(X\x01\x00\x00\x00"
              "aI5\nu."),
            "opcode 'I'");
    refuses(P("\x80\x02}N."), "opcode 'N'");

    /* Globals: only the three a checkpoint names; nothing is called. */
    refuses(P("\x80\x02}(X\x01\x00\x00\x00"
              "acos\nsystem\n)Ru."),
            "global os.system");
    refuses(P("\x80\x02}(X\x01\x00\x00\x00"
              "actorch\nFloatStorage\n)Ru."),
            "REDUCE of torch.FloatStorage");
    refuses(P("\x80\x02}(X\x01\x00\x00\x00"
              "accollections\nOrderedDict\nK\x01"
              "\x85Ru."),
            "OrderedDict with arguments");
    /* Malformed. */
    refuses(P("}."), "PROTO 2");
    refuses(P("\x80\x04}."), "PROTO 2");
    refuses(P("\x80\x02}.X"), "bytes after STOP");
    refuses(P("\x80\x02}h\x05."), "empty memo slot");
    refuses(P("\x80\x02s."), "stack underflow");
    refuses(P("\x80\x02}}."), "more than one value");
    refuses(P("\x80\x02}"), "no STOP");
    refuses(P("\x80\x02}X\xff\x00\x00\x00"
              "ab"),
            "truncated operand");
    refuses(P("\x80\x02]."), "not a dict");
    refuses(P("\x80\x02}(K\x01K\x02u."), "a key is not a string");
    refuses(P("\x80\x02}(X\x01\x00\x00\x00"
              "aK\x01X\x01\x00\x00\x00"
              "aK\x02u."),
            "a: key given twice");
    refuses(P("\x80\x02}(X\x01\x00\x00\x00"
              "a](X\x01\x00\x00\x00"
              "beu."),
            "no tensor, integer");
}

/* ------------------------------------------------------------------------ */
/* Damaged files and foreign checkpoints                                     */

/* The offset of entry `name`'s data in a zip image (its local header). */
static size_t entry_data(const unsigned char *z, size_t len, const char *name)
{
    size_t nl = strlen(name), i;

    for (i = 30; i + nl < len; i++)
        if (memcmp(z + i, name, nl) == 0 &&
            memcmp(z + i - 30, "PK\3\4", 4) == 0)
            return i + nl + (size_t)(z[i - 2] | z[i - 1] << 8);
    return 0;
}

static void test_damage(void)
{
    struct torch_ckpt *c = NULL;
    struct sd_diag d = {{0}};
    unsigned char *z;
    size_t len = 0, at;

    z = slurp(RELEASED "compute.pt", &len);
    CHECK(z != NULL);
    if (z == NULL)
        return;
    CHECK(torch_load(z, len, &c, &d) == 0);
    torch_free(c);
    /* One weight's bits flipped: the zip's CRC refuses the storage. */
    at = entry_data(z, len, "archive/data/2");
    CHECK(at > 0);
    z[at + 100] ^= 0x40;
    CHECK(torch_load(z, len, &c, &d) == SD_EFORMAT);
    CHECK(strstr(d.msg, "archive/data/2") && strstr(d.msg, "CRC"));
    z[at + 100] ^= 0x40;
    /* A cut file; not a zip at all. */
    CHECK(torch_load(z, len / 2, &c, &d) == SD_EFORMAT);
    CHECK(strstr(d.msg, "not a PyTorch zip checkpoint") != NULL);
    CHECK(torch_load("hello, world", 12, &c, &d) == SD_EFORMAT);
    CHECK(torch_read("/nonexistent/compute.pt", &c, &d) == SD_ENOENT);
    free(z);
}

/* Checkpoints that are not the architecture they claim: refused, naming
 * the key and what was expected. */
static void test_foreign(void)
{
    struct torch_ckpt *c = NULL, *fw = NULL, *bw = NULL;
    struct cost_net *m = NULL;
    struct sd_diag d = {{0}};
    struct torch_entry *e;

    if (torch_read(RELEASED "compute.pt", &c, &d) != 0 ||
        torch_read(RELEASED "comm_4_fw.pt", &fw, &d) != 0 ||
        torch_read(RELEASED "comm_4_bw.pt", &bw, &d) != 0) {
        CHECK(0);
        goto out;
    }
    /* A comm checkpoint as the compute one, and the pair swapped. */
    CHECK(net_import_neuroshard(fw, NULL, NULL, "p/x/1", 1, NULL, &m, &d) ==
          SD_EINVAL);
    CHECK(strstr(d.msg, "num_table_features") != NULL);
    CHECK(net_import_neuroshard(c, bw, fw, "p/x/1", 1, NULL, &m, &d) ==
          SD_EINVAL);
    CHECK(strstr(d.msg, "num_features 4, a forward model of 4 devices has 8"));
    CHECK(net_import_neuroshard(c, fw, NULL, "p/x/1", 1, NULL, &m, &d) ==
          SD_EINVAL);
    CHECK(strstr(d.msg, "pairs") != NULL);
    CHECK(net_import_neuroshard(c, NULL, NULL, "", 1, NULL, &m, &d) ==
          SD_EINVAL);
    /* A layer of another width. */
    e = (struct torch_entry *)torch_find(c, "state_dict.t_hidden.1.weight");
    e->shape[0] = 64;
    CHECK(net_import_neuroshard(c, NULL, NULL, "p/x/1", 1, NULL, &m, &d) ==
          SD_EINVAL);
    CHECK(strstr(d.msg, "t_hidden.1.weight has shape [64, 128]") &&
          strstr(d.msg, "[32, 128]"));
    e->shape[0] = 32;
    snprintf(e->key, sizeof(e->key), "state_dict.t_hidden.1.w");
    CHECK(net_import_neuroshard(c, NULL, NULL, "p/x/1", 1, NULL, &m, &d) ==
          SD_EINVAL);
    CHECK(strstr(d.msg, "no tensor state_dict.t_hidden.1.weight") != NULL);
    CHECK(m == NULL);
out:
    torch_free(c);
    torch_free(fw);
    torch_free(bw);
}

int main(void)
{
    bool released = have_released();

    test_reference();
    test_unpickler();
    if (released) {
        test_released();
        test_damage();
        test_foreign();
    }
    if (!released && tap_fail == 0) {
        fprintf(stderr, "skipped: %s has no checkpoints\n", RELEASED);
        tap_done();
        return TEST_SKIP;
    }
    return tap_done();
}
