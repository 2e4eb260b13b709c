/*
 * The SQLite store: schema creation and migration bookkeeping, sample batches
 * and their durability (a real kill -9), decoding, models and activation,
 * jobs, the plan audit, refusal of newer or foreign databases, and bad input
 * leaving the database unchanged.  Then the damaged-store rules: an empty,
 * truncated or damaged file, another application's database and a -wal
 * without its database are refused and left as they were; backups and their
 * rotation; file modes under umask 000; model pruning.  Every test works in
 * a fresh temporary directory.  The database is read and damaged as bytes
 * (sqlite.org/fileformat2: offsets 16-17 the page size, 18-19 the WAL flag,
 * 60 user_version, 68 application_id; a b-tree page starts with its type,
 * 13 for a table leaf), so the test needs no <sqlite3.h>.
 */
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "store.h"

static char dir[64];
static char path[128];

/* A fresh temporary directory holding path = dir/shardd.db. */
static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/test_store.XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(path, sizeof(path), "%s/shardd.db", dir);
}

/* Removes d and everything in it, directories included. */
static void rm_tree(const char *d)
{
    struct dirent *e;
    char p[512];
    DIR *dp;

    dp = opendir(d);
    if (dp == NULL)
        return;
    while ((e = readdir(dp)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof(p), "%s/%s", d, e->d_name);
        if (unlink(p) != 0)
            rm_tree(p);
    }
    closedir(dp);
    rmdir(d);
}

static void teardown(void)
{
    rm_tree(dir);
}

/* Size of path + suffix, -1 when it does not exist. */
static long file_size(const char *suffix)
{
    char p[160];
    struct stat sb;

    snprintf(p, sizeof(p), "%s%s", path, suffix);
    return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

static bool exists(const char *suffix)
{
    return file_size(suffix) >= 0;
}

/* Reads the whole file p; *len bytes, owned by the caller. */
static unsigned char *slurp_file(const char *p, size_t *len)
{
    unsigned char *buf;
    FILE *f;
    long n;

    f = fopen(p, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* Reads the whole database file; *len bytes, owned by the caller. */
static unsigned char *slurp(size_t *len)
{
    return slurp_file(path, len);
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

static void make_table(struct table *t, size_t i)
{
    int k;

    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "table_%04zu", i);
    t->rows = 1000 + (int64_t)i * 7919;
    t->dim = (int32_t)(4 * (1 + i % 32));
    t->pooling_factor = 1.0 / 3.0 + (double)i;
    t->dtype = i % 5 == 0 ? TABLE_DTYPE_FP16 : TABLE_DTYPE_FP32;
    for (k = 0; k < TABLE_NBINS; k++)
        t->bins[k] = (double)(k + 1) / (17.0 * 18.0 / 2.0 + (double)i);
}

static void make_sample(struct store_sample *s, int64_t profile_id,
                        struct table *tables, size_t ntables, double ms)
{
    memset(s, 0, sizeof(*s));
    s->profile_id = profile_id;
    s->kind = STORE_KIND_COMPUTE;
    s->ntables = ntables;
    s->tables = tables;
    s->measured_ms = ms;
    s->spread_ms = ms / 100;
    snprintf(s->device, sizeof(s->device), "cpu core 3");
    snprintf(s->source, sizeof(s->source), "random");
}

static int64_t make_profile(struct store *st, const char *name)
{
    struct store_profile p;
    int64_t id = -1;

    memset(&p, 0, sizeof(p));
    snprintf(p.name, sizeof(p.name), "%s", name);
    snprintf(p.backend, sizeof(p.backend), "cpu");
    snprintf(p.device_model, sizeof(p.device_model), "test cpu");
    p.batch_size = 4096;
    CHECK(store_profile_get_or_create(st, &p, &id, NULL) == 0);
    return id;
}

static uint64_t count(struct store *st, int64_t profile, enum store_kind kind)
{
    uint64_t n = 12345;

    CHECK(store_sample_count(st, profile, kind, 0, &n, NULL) == 0);
    return n;
}

/* Tables equal field by field; the name is not stored. */
static bool same_table(const struct table *a, const struct table *b)
{
    return a->rows == b->rows && a->dim == b->dim &&
           a->pooling_factor == b->pooling_factor && a->dtype == b->dtype &&
           memcmp(a->bins, b->bins, sizeof(a->bins)) == 0;
}

static void test_open(void)
{
    struct store_profile p;
    struct store *st = NULL;
    struct sd_diag d;
    unsigned char *buf;
    int64_t id, id2 = 0;
    size_t len;

    setup();
    CHECK(store_open(path, 0, &st, &d) == 0);
    CHECK(exists("-wal"));
    id = make_profile(st, "cpu/test/4096");
    CHECK(id > 0);
    CHECK(store_integrity_check(st, &d) == 0);
    store_close(st);
    CHECK(!exists("-wal")); /* the last close checkpoints and removes it */

    buf = slurp(&len);
    CHECK(buf != NULL && len >= 100);
    if (buf != NULL && len >= 100) {
        CHECK(memcmp(buf, "SQLite format 3", 16) == 0);
        CHECK(buf[18] == 2 && buf[19] == 2); /* WAL */
        CHECK(be32(buf + 60) == STORE_SCHEMA_VERSION);
        CHECK(be32(buf + 68) == STORE_APPLICATION_ID);
    }
    free(buf);

    /* Reopen: the data is there and the schema is not re-applied. */
    st = NULL;
    CHECK(store_open(path, 0, &st, &d) == 0);
    CHECK(store_profile_get(st, "cpu/test/4096", &p, &d) == 0);
    CHECK(p.id == id && p.batch_size == 4096 && p.created_ms > 0);
    CHECK(strcmp(p.backend, "cpu") == 0);
    CHECK(store_profile_get(st, "nope", &p, &d) == SD_ENOENT);
    CHECK(make_profile(st, "cpu/test/4096") == id);
    /* Same name, other attributes: refused. */
    snprintf(p.device_model, sizeof(p.device_model), "other cpu");
    CHECK(store_profile_get_or_create(st, &p, &id2, &d) == SD_EINVAL &&
          strstr(d.msg, "exists") != NULL && id2 == 0);
    store_close(st);

    /* Read-only: reads work, writes fail, nothing is created. */
    st = NULL;
    CHECK(store_open(path, STORE_OPEN_READONLY, &st, &d) == 0);
    CHECK(count(st, id, STORE_KIND_COMPUTE) == 0);
    snprintf(p.name, sizeof(p.name), "cpu/other/1");
    CHECK(store_profile_get_or_create(st, &p, &id2, &d) == SD_ESTORE &&
          id2 == 0);
    CHECK(store_profile_get(st, "cpu/other/1", &p, &d) == SD_ENOENT);
    store_close(st);
    teardown();

    setup();
    st = NULL;
    CHECK(store_open(path, STORE_OPEN_READONLY, &st, &d) == SD_ENOENT &&
          st == NULL && !exists(""));
    /* Read-write without creating: the same refusal, then a store made
     * the ordinary way opens. */
    CHECK(store_open(path, STORE_OPEN_EXISTING, &st, &d) == SD_ENOENT &&
          st == NULL && !exists("") && strstr(d.msg, "no database") != NULL);
    CHECK(store_open(path, 0, &st, &d) == 0);
    store_close(st);
    st = NULL;
    CHECK(store_open(path, STORE_OPEN_EXISTING, &st, &d) == 0 && st != NULL);
    CHECK(make_profile(st, "cpu/test/4096") > 0);
    store_close(st);
    st = NULL;
    CHECK(store_open("", 0, &st, &d) == SD_EINVAL && st == NULL);
    CHECK(store_open(path, 0x100, &st, &d) == SD_EINVAL && st == NULL);
    teardown();
}

static void test_samples(void)
{
    struct table tables[64];
    struct store_sample s[40], *got = NULL, *page = NULL;
    struct store_comm_device dev[4];
    struct store *st = NULL;
    struct sd_diag d;
    size_t i, j, n = 0, npage = 0;
    int64_t prof, id = 0, last;
    uint64_t c = 0;
    bool same = true;

    setup();
    CHECK(store_open(path, 0, &st, &d) == 0);
    prof = make_profile(st, "cpu/test/4096");
    for (i = 0; i < 64; i++)
        make_table(&tables[i], i);
    for (i = 0; i < 40; i++)
        make_sample(&s[i], prof, &tables[i], 1 + i % 25, 0.5 + (double)i);

    CHECK(store_sample_batch_begin(st, &d) == 0);
    CHECK(store_sample_batch_begin(st, &d) == SD_EINVAL);
    for (i = 0; i < 40; i++)
        CHECK(store_sample_add(st, &s[i], &id, &d) == 0);
    CHECK(id > 0);
    CHECK(store_sample_batch_commit(st, &d) == 0);
    CHECK(store_sample_batch_commit(st, &d) == SD_EINVAL);
    CHECK(count(st, prof, STORE_KIND_COMPUTE) == 40);
    CHECK(count(st, prof, STORE_KIND_COMM) == 0);
    CHECK(store_sample_count(st, prof, STORE_KIND_COMPUTE, INT64_MAX - 1, &c,
                             &d) == 0 &&
          c == 0);

    CHECK(store_samples_load(st, prof, STORE_KIND_COMPUTE, 0, 0, &got, &n,
                             &d) == 0);
    CHECK(n == 40);
    for (i = 0; i < n && i < 40; i++) {
        same =
            same && got[i].ntables == s[i].ntables && got[i].ndevices == 0 &&
            got[i].devices == NULL && got[i].measured_ms == s[i].measured_ms &&
            got[i].spread_ms == s[i].spread_ms &&
            got[i].kind == STORE_KIND_COMPUTE && got[i].profile_id == prof &&
            got[i].created_ms > 0 && strcmp(got[i].device, "cpu core 3") == 0 &&
            strcmp(got[i].source, "random") == 0;
        for (j = 0; same && j < got[i].ntables; j++)
            same = same_table(&got[i].tables[j], &s[i].tables[j]);
        if (i > 0)
            same = same && got[i].id > got[i - 1].id;
    }
    CHECK(same);
    CHECK(n > 0 && strcmp(got[0].tables[0].name, "t0") == 0);
    CHECK(n > 0 &&
          table_validate_all(got[n - 1].tables, got[n - 1].ntables, &d) == 0);

    /* Paging: 15 after the 20th. */
    last = n >= 20 ? got[19].id : 0;
    CHECK(store_samples_load(st, prof, STORE_KIND_COMPUTE, last, 15, &page,
                             &npage, &d) == 0);
    CHECK(npage == 15 && page[0].id == got[20].id && page[14].id == got[34].id);
    store_samples_free(page, npage);

    /* The newest 7 of 40 are the last 7; 40 or more (or 0) are all. */
    CHECK(store_samples_load_newest(st, prof, STORE_KIND_COMPUTE, 7, &page,
                                    &npage, &d) == 0);
    CHECK(npage == 7 && n >= 40 && page[0].id == got[33].id &&
          page[6].id == got[39].id);
    store_samples_free(page, npage);
    CHECK(store_samples_load_newest(st, prof, STORE_KIND_COMPUTE, 40, &page,
                                    &npage, &d) == 0);
    CHECK(npage == 40 && n >= 40 && page[0].id == got[0].id);
    store_samples_free(page, npage);
    CHECK(store_samples_load_newest(st, prof, STORE_KIND_COMPUTE, 0, &page,
                                    &npage, &d) == 0);
    CHECK(npage == 40 && n >= 40 && page[0].id == got[0].id);
    store_samples_free(page, npage);
    CHECK(store_samples_load_newest(st, prof, STORE_KIND_COMPUTE, SIZE_MAX,
                                    &page, &npage, &d) == 0);
    CHECK(npage == 40 && n >= 40 && page[0].id == got[0].id);
    store_samples_free(page, npage);
    CHECK(store_samples_load_newest(st, prof, (enum store_kind)9, 1, &page,
                                    &npage, &d) == SD_EINVAL);
    store_samples_free(got, n);
    CHECK(store_samples_load(st, prof + 1, STORE_KIND_COMPUTE, 0, 0, &got, &n,
                             &d) == 0 &&
          n == 0 && got == NULL);

    /* A comm sample: devices, no tables. */
    memset(&s[0], 0, sizeof(s[0]));
    s[0].profile_id = prof;
    s[0].kind = STORE_KIND_COMM;
    s[0].ndevices = 4;
    s[0].devices = dev;
    for (i = 0; i < 4; i++) {
        dev[i].dim_sum = 100 * (int32_t)i;
        dev[i].sleep_ms = (double)i / 7;
        dev[i].fwd_ms = 1.25 + (double)i;
        dev[i].bwd_ms = 2.5 + (double)i;
    }
    s[0].measured_ms = 6.5;
    snprintf(s[0].device, sizeof(s[0].device), "4x cpu");
    snprintf(s[0].source, sizeof(s[0].source), "random");
    CHECK(store_sample_add(st, &s[0], NULL, &d) == 0);
    CHECK(count(st, prof, STORE_KIND_COMM) == 1);
    got = NULL;
    CHECK(store_samples_load(st, prof, STORE_KIND_COMM, 0, 0, &got, &n, &d) ==
          0);
    CHECK(n == 1 && got[0].ntables == 0 && got[0].tables == NULL &&
          got[0].ndevices == 4 && got[0].measured_ms == 6.5);
    for (i = 0; n == 1 && i < 4; i++)
        same = same && got[0].devices[i].dim_sum == dev[i].dim_sum &&
               got[0].devices[i].sleep_ms == dev[i].sleep_ms &&
               got[0].devices[i].fwd_ms == dev[i].fwd_ms &&
               got[0].devices[i].bwd_ms == dev[i].bwd_ms;
    CHECK(same);
    store_samples_free(got, n);

    /* add_batch: all or nothing. */
    for (i = 0; i < 10; i++)
        make_sample(&s[i], prof, &tables[i], 3, 1.0);
    s[7].spread_ms = -1;
    CHECK(store_sample_add_batch(st, s, 10, &d) == SD_EINVAL &&
          strstr(d.msg, "samples[7]") && strstr(d.msg, "spread_ms"));
    CHECK(count(st, prof, STORE_KIND_COMPUTE) == 40);
    s[7].spread_ms = 0;
    CHECK(store_sample_add_batch(st, s, 10, &d) == 0);
    CHECK(count(st, prof, STORE_KIND_COMPUTE) == 50);

    /* Aborted, or closed uncommitted: nothing. */
    CHECK(store_sample_batch_begin(st, &d) == 0);
    CHECK(store_sample_add(st, &s[0], NULL, &d) == 0);
    CHECK(store_sample_add_batch(st, s, 1, &d) == SD_EINVAL);
    store_sample_batch_abort(st);
    CHECK(count(st, prof, STORE_KIND_COMPUTE) == 50);
    CHECK(store_sample_batch_begin(st, &d) == 0);
    CHECK(store_sample_add(st, &s[0], NULL, &d) == 0);
    store_close(st);
    st = NULL;
    CHECK(store_open(path, 0, &st, &d) == 0);
    CHECK(count(st, prof, STORE_KIND_COMPUTE) == 50);

    /* Two handles on one file see each other's commits. */
    {
        struct store *st2 = NULL;

        CHECK(store_open(path, 0, &st2, &d) == 0);
        CHECK(store_sample_add(st, &s[0], NULL, &d) == 0);
        CHECK(count(st2, prof, STORE_KIND_COMPUTE) == 51);
        store_close(st2);
    }
    store_close(st);
    teardown();
}

/*
 * A child commits batch 1, opens batch 2, adds to it and kills itself with
 * SIGKILL: batch 1 must be there in full, batch 2 not at all.
 */
static void test_kill9(void)
{
    struct table tables[8];
    struct store_sample s, *got = NULL;
    struct store *st = NULL;
    struct sd_diag d;
    int64_t prof;
    size_t i, n = 0;
    int status = 0;
    bool batch1 = true;
    pid_t pid;

    setup();
    CHECK(store_open(path, 0, &st, &d) == 0);
    prof = make_profile(st, "cpu/test/4096");
    store_close(st); /* never carry a SQLite connection across fork() */
    for (i = 0; i < 8; i++)
        make_table(&tables[i], i);

    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        if (store_open(path, 0, &st, &d) != 0)
            _exit(2);
        if (store_sample_batch_begin(st, &d) != 0)
            _exit(3);
        for (i = 0; i < 25; i++) {
            make_sample(&s, prof, tables, 1 + i % 8, 1000 + (double)i);
            if (store_sample_add(st, &s, NULL, &d) != 0)
                _exit(4);
        }
        if (store_sample_batch_commit(st, &d) != 0)
            _exit(5);
        if (store_sample_batch_begin(st, &d) != 0)
            _exit(6);
        for (i = 0; i < 25; i++) {
            make_sample(&s, prof, tables, 1 + i % 8, 2000 + (double)i);
            if (store_sample_add(st, &s, NULL, &d) != 0)
                _exit(7);
        }
        raise(SIGKILL);
        _exit(8);
    }
    CHECK(pid > 0);
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    if (WIFEXITED(status))
        fprintf(stderr, "kill9 child exited with %d\n", WEXITSTATUS(status));

    st = NULL;
    CHECK(store_open(path, 0, &st, &d) == 0);
    CHECK(store_integrity_check(st, &d) == 0);
    CHECK(count(st, prof, STORE_KIND_COMPUTE) == 25);
    CHECK(store_samples_load(st, prof, STORE_KIND_COMPUTE, 0, 0, &got, &n,
                             &d) == 0);
    for (i = 0; i < n; i++)
        batch1 = batch1 && got[i].measured_ms == 1000 + (double)i &&
                 got[i].ntables == 1 + i % 8;
    CHECK(n == 25 && batch1);
    store_samples_free(got, n);
    store_close(st);
    teardown();
}

static void model_init(struct store_model *m, int64_t prof,
                       enum store_kind kind, const void *w, size_t wn,
                       const void *norm, size_t nn, double mape)
{
    memset(m, 0, sizeof(*m));
    m->info.profile_id = prof;
    m->info.kind = kind;
    m->info.format_version = 1;
    m->info.metrics.val_mape = mape;
    m->info.metrics.test_mape = mape * 1.1;
    m->info.metrics.train_samples = 8000;
    m->info.metrics.val_samples = 1000;
    m->info.metrics.test_samples = 1000;
    m->info.weights_bytes = wn;
    m->info.norm_bytes = nn;
    m->weights = w;
    m->norm = norm;
}

static void test_models(void)
{
    static const float w1[] = {1, 2, 3, 4.5f}, w2[] = {9, 8, 7};
    static const float norm[] = {0.5f, 0.25f};
    struct store_model m, *got = NULL;
    struct store_model_info *list = NULL;
    struct store *st = NULL;
    struct sd_diag d;
    int64_t prof, v1 = 0, v2 = 0, v3 = 0, prev = -1;
    size_t n = 0;

    setup();
    CHECK(store_open(path, 0, &st, &d) == 0);
    prof = make_profile(st, "cpu/test/4096");

    model_init(&m, prof, STORE_KIND_COMPUTE, w1, sizeof(w1), norm, sizeof(norm),
               0.05);
    CHECK(store_model_put(st, &m, &v1, &d) == 0);
    model_init(&m, prof, STORE_KIND_COMPUTE, w2, sizeof(w2), NULL, 0, 0.04);
    CHECK(store_model_put(st, &m, &v2, &d) == 0);
    CHECK(v1 > 0 && v2 > v1);

    CHECK(store_model_get(st, v1, &got, &d) == 0);
    CHECK(got != NULL && got->info.id == v1 && !got->info.active &&
          got->info.weights_bytes == sizeof(w1) &&
          memcmp(got->weights, w1, sizeof(w1)) == 0 &&
          got->info.norm_bytes == sizeof(norm) &&
          memcmp(got->norm, norm, sizeof(norm)) == 0 &&
          got->info.metrics.val_mape == 0.05 &&
          got->info.metrics.train_samples == 8000 &&
          strcmp(got->info.profile, "cpu/test/4096") == 0);
    store_model_free(got);
    got = NULL;
    CHECK(store_model_get(st, v2, &got, &d) == 0);
    CHECK(got != NULL && got->norm == NULL && got->info.norm_bytes == 0);
    store_model_free(got);

    got = NULL;
    CHECK(store_model_get_active(st, prof, STORE_KIND_COMPUTE, &got, &d) ==
              SD_ENOENT &&
          got == NULL);
    CHECK(store_model_activate(st, v1, &prev, &d) == 0 && prev == 0);
    CHECK(store_model_activate(st, v2, &prev, &d) == 0 && prev == v1);
    CHECK(store_model_get_active(st, prof, STORE_KIND_COMPUTE, &got, &d) == 0);
    CHECK(got != NULL && got->info.id == v2 && got->info.active);
    store_model_free(got);

    /* A comm model is active beside the compute one. */
    model_init(&m, prof, STORE_KIND_COMM, w2, sizeof(w2), NULL, 0, 0.1);
    CHECK(store_model_put(st, &m, &v3, &d) == 0);
    CHECK(store_model_activate(st, v3, &prev, &d) == 0 && prev == 0);

    CHECK(store_model_list(st, 0, 0, &list, &n, &d) == 0);
    CHECK(n == 3 && list[0].id == v3 && list[1].id == v2 && list[2].id == v1);
    CHECK(n == 3 && list[0].active && list[1].active && !list[2].active &&
          list[0].kind == STORE_KIND_COMM &&
          list[1].weights_bytes == sizeof(w2));
    /* The weights' first bytes come with a listing, the blob left. */
    CHECK(n == 3 && list[2].head_bytes == 12 &&
          memcmp(list[2].head, w1, 12) == 0 &&
          list[1].head_bytes == sizeof(w2) &&
          memcmp(list[1].head, w2, sizeof(w2)) == 0);
    free(list);
    list = NULL;
    CHECK(store_model_list(st, prof, 1, &list, &n, &d) == 0 && n == 1);
    free(list);
    list = NULL;
    CHECK(store_model_list(st, prof + 1, 0, &list, &n, &d) == 0 && n == 0 &&
          list == NULL);

    CHECK(store_model_get(st, 9999, &got, &d) == SD_ENOENT &&
          strstr(d.msg, "9999") != NULL);
    prev = -1;
    CHECK(store_model_activate(st, 9999, &prev, &d) == SD_ENOENT && prev == -1);
    CHECK(store_model_get_active(st, prof, STORE_KIND_COMPUTE, &got, &d) == 0);
    CHECK(got->info.id == v2);
    store_model_free(got);
    /* Unknown profile: the foreign key refuses it. */
    model_init(&m, prof + 7, STORE_KIND_COMPUTE, w1, sizeof(w1), NULL, 0, 1);
    CHECK(store_model_put(st, &m, &v3, &d) == SD_EINVAL);
    CHECK(store_integrity_check(st, &d) == 0);
    store_close(st);
    teardown();
}

/*
 * Copies fixture `name` (tests/fixtures/, a store written by an older
 * shardd) to the test's path and checks that it is at schema `version`.
 */
static void copy_fixture(const char *name, uint32_t version)
{
    char src[512];
    unsigned char *img;
    size_t len = 0;
    FILE *f;

    snprintf(src, sizeof(src), "%s/%s", SD_FIXTURES, name);
    img = slurp_file(src, &len);
    CHECK(img != NULL && len >= 100 && be32(img + 60) == version);
    f = fopen(path, "wb");
    CHECK(f != NULL && img != NULL && fwrite(img, 1, len, f) == len);
    if (f != NULL)
        fclose(f);
    free(img);
}

/*
 * Schemas 3 and 4 in turn: a version-2 store (a fixture written by the
 * store before schema 3, tests/fixtures/make_store_v2.c) opens read-write,
 * migrates, and keeps every row: its random compute samples become family
 * "dlrm", the planned one none; its fleet origins and model stay.
 * Read-only, it is refused until migrated.
 */
static void test_migrate_v2(void)
{
    struct store *st = NULL;
    struct store_sample *s = NULL;
    struct store_model *m = NULL;
    struct store_profile prof;
    struct sd_diag d;
    unsigned char *img;
    uint64_t stored = 9;
    int64_t last = 0, oid = 7;
    size_t n = 0, len = 0;

    setup();
    copy_fixture("store-v2.sqlite", 2);
    CHECK(store_open(path, STORE_OPEN_READONLY, &st, &d) == SD_ESTATE &&
          st == NULL);
    CHECK(store_open(path, 0, &st, &d) == 0);
    CHECK(store_profile_get(st, "cpu/fixture/4096", &prof, &d) == 0);
    CHECK(store_samples_load(st, prof.id, STORE_KIND_COMPUTE, 0, 0, &s, &n,
                             &d) == 0);
    CHECK(n == 4);
    if (n == 4) {
        CHECK(strcmp(s[0].family, "dlrm") == 0 &&
              strcmp(s[1].family, "dlrm") == 0);
        CHECK(strcmp(s[2].source, "plan") == 0 && s[2].family[0] == '\0');
        CHECK(strcmp(s[3].family, "dlrm") == 0 && s[3].measured_ms == 9.0);
        CHECK(s[0].ntables == 2 && s[0].tables[1].rows == 2000);
    }
    store_samples_free(s, n);
    /* The fleet's record of node-a's sample 7 came through. */
    CHECK(store_sample_add_from(st, "node-a", &oid, NULL, 0, &stored, &last,
                                &d) == 0 &&
          last == 7);
    CHECK(store_model_get_active(st, prof.id, STORE_KIND_COMPUTE, &m, &d) == 0);
    CHECK(m != NULL && m->info.id == 1 && m->info.metrics.nfamilies == 0 &&
          m->info.metrics.test_mape == 0.12);
    store_model_free(m);
    CHECK(store_integrity_check(st, &d) == 0);
    store_close(st);
    img = slurp(&len);
    CHECK(img != NULL && be32(img + 60) == STORE_SCHEMA_VERSION);
    free(img);
    /* Now current: a read-only open works. */
    st = NULL;
    CHECK(store_open(path, STORE_OPEN_READONLY, &st, &d) == 0);
    store_close(st);
    teardown();
}

/*
 * Schema 4 from 3: a store of DreamShard's schema (a fixture written by the
 * store of schema 3, tests/fixtures/make_store_v3.c) opens read-write and
 * migrates keeping every row: the random compute samples become family
 * "dlrm", the planned one none; the active compute model, the active policy
 * bound to it with its gate, the policy retrain job and the models'
 * AUTOINCREMENT mark stay; a model with figures per family can then be
 * stored, and they go with it.  Read-only, it is refused until migrated.
 */
static void test_migrate_v3(void)
{
    static const float w[] = {1, 2, 3};
    struct store *st = NULL;
    struct store_sample *s = NULL;
    struct store_model *m = NULL, nm;
    struct store_job j;
    struct store_profile prof;
    struct sd_diag d;
    unsigned char *img;
    uint64_t pruned = 0;
    int64_t v = 0;
    size_t n = 0, len = 0;

    setup();
    copy_fixture("store-v3.sqlite", 3);
    CHECK(store_open(path, STORE_OPEN_READONLY, &st, &d) == SD_ESTATE &&
          st == NULL);
    CHECK(store_open(path, 0, &st, &d) == 0);
    CHECK(store_profile_get(st, "cpu/fixture/4096", &prof, &d) == 0);
    CHECK(store_samples_load(st, prof.id, STORE_KIND_COMPUTE, 0, 0, &s, &n,
                             &d) == 0);
    CHECK(n == 4);
    if (n == 4) {
        CHECK(strcmp(s[0].family, "dlrm") == 0 &&
              strcmp(s[1].family, "dlrm") == 0);
        CHECK(strcmp(s[2].source, "plan") == 0 && s[2].family[0] == '\0');
        CHECK(strcmp(s[3].family, "dlrm") == 0 && s[3].measured_ms == 9.0);
    }
    store_samples_free(s, n);
    /* The policy and the model it answers for, both active. */
    CHECK(store_model_get_active(st, prof.id, STORE_KIND_POLICY, &m, &d) == 0);
    CHECK(m != NULL && m->info.id == 3 && m->info.base_model_id == 1 &&
          m->info.metrics.gate_ratio == 0.875 &&
          m->info.metrics.nfamilies == 0);
    store_model_free(m);
    m = NULL;
    CHECK(store_model_get_active(st, prof.id, STORE_KIND_COMPUTE, &m, &d) == 0);
    CHECK(m != NULL && m->info.id == 1 && m->info.metrics.test_mape == 0.12);
    store_model_free(m);
    CHECK(store_job_get(st, 1, &j, &d) == 0 &&
          j.kind == STORE_JOB_RETRAIN_POLICY &&
          j.state == STORE_JOB_SUCCEEDED && j.result_model_id == 3);
    /* Families per model now: stored, read back, pruned with the model. */
    model_init(&nm, prof.id, STORE_KIND_COMPUTE, w, sizeof(w), NULL, 0, 0.05);
    nm.info.metrics.nfamilies = 1;
    snprintf(nm.info.metrics.families[0].family, STORE_FAMILY_MAX, "seq");
    nm.info.metrics.families[0].held_out = true;
    nm.info.metrics.families[0].samples = 12;
    nm.info.metrics.families[0].mape = 0.2;
    CHECK(store_model_put(st, &nm, &v, &d) == 0 && v == 4);
    m = NULL;
    CHECK(store_model_get(st, v, &m, &d) == 0 && m != NULL &&
          m->info.metrics.nfamilies == 1 &&
          strcmp(m->info.metrics.families[0].family, "seq") == 0 &&
          m->info.metrics.families[0].held_out);
    store_model_free(m);
    CHECK(store_model_prune(st, prof.id, 0, &pruned, &d) == 0 && pruned == 1);
    CHECK(store_model_get(st, v, &m, &d) == SD_ENOENT);
    CHECK(store_integrity_check(st, &d) == 0);
    store_close(st);
    img = slurp(&len);
    CHECK(img != NULL && be32(img + 60) == STORE_SCHEMA_VERSION);
    free(img);
    st = NULL;
    CHECK(store_open(path, STORE_OPEN_READONLY, &st, &d) == 0);
    store_close(st);
    teardown();
}

/*
 * Schema 5 from 4: a store whose compute samples' tables say fp16 and bf16
 * (a fixture written by the store of schema 4, tests/fixtures/
 * make_store_v4.c), measured when the kernels computed every table in
 * fp32, migrates to tables that say fp32, keeping every other field; the
 * comm sample is untouched.  A sample stored after keeps its dtypes.
 */
static void test_migrate_v4(void)
{
    struct store *st = NULL;
    struct store_sample *s = NULL, smp;
    struct store_profile prof;
    struct sd_diag d;
    struct table t;
    int64_t id;
    size_t n = 0, i, k;

    setup();
    copy_fixture("store-v4.sqlite", 4);
    CHECK(store_open(path, STORE_OPEN_READONLY, &st, &d) == SD_ESTATE);
    CHECK(store_open(path, 0, &st, &d) == 0);
    CHECK(store_profile_get(st, "cpu/fixture/4096", &prof, &d) == 0);
    CHECK(store_samples_load(st, prof.id, STORE_KIND_COMPUTE, 0, 0, &s, &n,
                             &d) == 0);
    CHECK(n == 2);
    for (i = 0; i < n; i++) {
        CHECK(s[i].ntables == 2 + i && strcmp(s[i].family, "mix") == 0 &&
              s[i].measured_ms == 1.0 + (double)i);
        for (k = 0; k < s[i].ntables; k++)
            CHECK(s[i].tables[k].dtype == TABLE_DTYPE_FP32 &&
                  s[i].tables[k].dim == 16 * (int32_t)(k + 1) &&
                  s[i].tables[k].rows == 1000 * (int64_t)(k + 1) &&
                  s[i].tables[k].bins[1] == 0.5);
    }
    store_samples_free(s, n);
    CHECK(store_samples_load(st, prof.id, STORE_KIND_COMM, 0, 0, &s, &n, &d) ==
          0);
    CHECK(n == 1 && s[0].ndevices == 2 && s[0].devices[1].sleep_ms == 2.0);
    store_samples_free(s, n);
    /* Stored now: its dtype is what was measured. */
    memset(&t, 0, sizeof(t));
    snprintf(t.name, sizeof(t.name), "t0");
    t.rows = 100;
    t.dim = 8;
    t.dtype = TABLE_DTYPE_FP16;
    t.pooling_factor = 1;
    t.bins[0] = 1;
    memset(&smp, 0, sizeof(smp));
    smp.profile_id = prof.id;
    smp.kind = STORE_KIND_COMPUTE;
    smp.ntables = 1;
    smp.tables = &t;
    smp.measured_ms = 3;
    snprintf(smp.device, sizeof(smp.device), "cpu core 1");
    snprintf(smp.source, sizeof(smp.source), "random");
    CHECK(store_sample_add(st, &smp, &id, &d) == 0);
    CHECK(store_samples_load(st, prof.id, STORE_KIND_COMPUTE, 0, 0, &s, &n,
                             &d) == 0);
    CHECK(n == 3 && s[2].tables[0].dtype == TABLE_DTYPE_FP16);
    store_samples_free(s, n);
    CHECK(store_integrity_check(st, &d) == 0);
    store_close(st);
    teardown();
}

/* A model's per-family figures round-trip, are checked, and go with it. */
static void test_model_families(void)
{
    static const float w[] = {1, 2, 3};
    struct store_model m, *got = NULL;
    struct store_model_info *list = NULL;
    struct store_sample smp, *back = NULL;
    struct table t;
    struct store *st = NULL;
    struct sd_diag d;
    int64_t prof, v = 0, v2 = 0;
    uint64_t pruned = 0;
    size_t n = 0;
    int k;

    setup();
    CHECK(store_open(path, 0, &st, &d) == 0);
    prof = make_profile(st, "cpu/test/4096");
    /* A sample's family. */
    make_table(&t, 3);
    make_sample(&smp, prof, &t, 1, 2.0);
    snprintf(smp.family, sizeof(smp.family), "zipf+seq");
    CHECK(store_sample_add(st, &smp, NULL, &d) == 0);
    CHECK(store_samples_load(st, prof, STORE_KIND_COMPUTE, 0, 0, &back, &n,
                             &d) == 0 &&
          n == 1 && strcmp(back[0].family, "zipf+seq") == 0);
    store_samples_free(back, n);
    memset(smp.family, 'x', sizeof(smp.family));
    CHECK(store_sample_add(st, &smp, NULL, &d) == SD_EINVAL &&
          strstr(d.msg, "family") != NULL);

    model_init(&m, prof, STORE_KIND_COMPUTE, w, sizeof(w), NULL, 0, 0.05);
    m.info.metrics.nfamilies = 2;
    snprintf(m.info.metrics.families[0].family, STORE_FAMILY_MAX, "seq");
    m.info.metrics.families[0].held_out = true;
    m.info.metrics.families[0].samples = 40;
    m.info.metrics.families[0].mape = 0.25;
    m.info.metrics.families[0].signed_median = -0.125;
    snprintf(m.info.metrics.families[1].family, STORE_FAMILY_MAX, "dlrm");
    m.info.metrics.families[1].samples = 7;
    m.info.metrics.families[1].mape = 0.5;
    CHECK(store_model_put(st, &m, &v, &d) == 0);
    CHECK(store_model_get(st, v, &got, &d) == 0);
    CHECK(got != NULL && got->info.metrics.nfamilies == 2);
    if (got != NULL && got->info.metrics.nfamilies == 2) {
        const struct store_family_metrics *f = got->info.metrics.families;

        /* Held-out families first. */
        CHECK(strcmp(f[0].family, "seq") == 0 && f[0].held_out &&
              f[0].samples == 40 && f[0].mape == 0.25 &&
              f[0].signed_median == -0.125);
        CHECK(strcmp(f[1].family, "dlrm") == 0 && !f[1].held_out &&
              f[1].samples == 7 && f[1].mape == 0.5);
    }
    store_model_free(got);
    CHECK(store_model_list(st, prof, 0, &list, &n, &d) == 0 && n == 1 &&
          list[0].metrics.nfamilies == 2);
    free(list);

    /* A family twice, too many, an empty name, a negative error: refused,
     * and nothing stored. */
    snprintf(m.info.metrics.families[1].family, STORE_FAMILY_MAX, "seq");
    CHECK(store_model_put(st, &m, &v2, &d) == SD_EINVAL &&
          strstr(d.msg, "repeats") != NULL);
    m.info.metrics.nfamilies = STORE_MODEL_FAMILIES_MAX + 1;
    CHECK(store_model_put(st, &m, &v2, &d) == SD_EINVAL);
    m.info.metrics.nfamilies = 1;
    m.info.metrics.families[0].family[0] = '\0';
    CHECK(store_model_put(st, &m, &v2, &d) == SD_EINVAL);
    snprintf(m.info.metrics.families[0].family, STORE_FAMILY_MAX, "exp");
    m.info.metrics.families[0].mape = -1;
    CHECK(store_model_put(st, &m, &v2, &d) == SD_EINVAL);
    CHECK(store_model_list(st, prof, 0, &list, &n, &d) == 0 && n == 1);
    free(list);

    /* Pruned with its model. */
    m.info.metrics.families[0].mape = 0.1;
    for (k = 0; k < 2; k++)
        CHECK(store_model_put(st, &m, &v2, &d) == 0);
    CHECK(store_model_prune(st, prof, 1, &pruned, &d) == 0 && pruned == 2);
    CHECK(store_model_get(st, v, &got, &d) == SD_ENOENT);
    CHECK(store_integrity_check(st, &d) == 0);
    store_close(st);
    teardown();
}

/*
 * Policies: a kind of their own, active beside the compute model, bound to
 * the compute version they were trained against (a base that is not a
 * policy's, or names no version, is refused); pruning the base leaves the
 * policy with base 0; policy retrain jobs are their own kind.
 */
static void test_policies(void)
{
    static const float w[] = {1, 2, 3};
    struct store_model m, *got = NULL;
    struct store_model_info *list = NULL;
    struct store_job j, open_job;
    struct store *st = NULL;
    struct sd_diag d;
    int64_t prof, c1 = 0, c2 = 0, c3 = 0, p1 = 0, job = 0, other = 0;
    uint64_t pruned = 0;
    size_t n = 0;

    setup();
    CHECK(store_open(path, 0, &st, &d) == 0);
    prof = make_profile(st, "cpu/test/4096");
    model_init(&m, prof, STORE_KIND_COMPUTE, w, sizeof(w), NULL, 0, 0.1);
    CHECK(store_model_put(st, &m, &c1, &d) == 0);
    CHECK(store_model_activate(st, c1, NULL, &d) == 0);
    model_init(&m, prof, STORE_KIND_POLICY, w, sizeof(w), NULL, 0, 0);
    m.info.base_model_id = c1;
    m.info.metrics.gate_ratio = 0.87;
    CHECK(store_model_put(st, &m, &p1, &d) == 0);
    CHECK(store_model_activate(st, p1, NULL, &d) == 0);
    CHECK(store_model_get_active(st, prof, STORE_KIND_POLICY, &got, &d) == 0);
    CHECK(got != NULL && got->info.id == p1 &&
          got->info.kind == STORE_KIND_POLICY &&
          got->info.base_model_id == c1 &&
          got->info.metrics.gate_ratio == 0.87);
    store_model_free(got);
    got = NULL;
    /* Both kinds active at once. */
    CHECK(store_model_get_active(st, prof, STORE_KIND_COMPUTE, &got, &d) == 0);
    CHECK(got != NULL && got->info.id == c1 && got->info.base_model_id == 0);
    store_model_free(got);
    CHECK(store_model_list(st, prof, 0, &list, &n, &d) == 0 && n == 2);
    CHECK(n == 2 && list[0].id == p1 && list[0].active &&
          strcmp(store_kind_name(list[0].kind), "policy") == 0);
    free(list);

    /* A base on a compute model, and a base naming no version. */
    model_init(&m, prof, STORE_KIND_COMPUTE, w, sizeof(w), NULL, 0, 0.1);
    m.info.base_model_id = c1;
    CHECK(store_model_put(st, &m, &other, &d) == SD_EINVAL &&
          strstr(d.msg, "base_model_id") != NULL);
    model_init(&m, prof, STORE_KIND_POLICY, w, sizeof(w), NULL, 0, 0);
    m.info.base_model_id = 9999;
    CHECK(store_model_put(st, &m, &other, &d) == SD_EINVAL);
    m.info.base_model_id = -1;
    CHECK(store_model_put(st, &m, &other, &d) == SD_EINVAL);
    m.info.base_model_id = 0;
    m.info.metrics.gate_ratio = -1;
    CHECK(store_model_put(st, &m, &other, &d) == SD_EINVAL &&
          strstr(d.msg, "gate_ratio") != NULL);

    /* Two newer compute models, c1 deactivated: pruning to 1 deletes c1
     * and the policy keeps its blob with base 0. */
    model_init(&m, prof, STORE_KIND_COMPUTE, w, sizeof(w), NULL, 0, 0.1);
    CHECK(store_model_put(st, &m, &c2, &d) == 0);
    CHECK(store_model_put(st, &m, &c3, &d) == 0);
    CHECK(store_model_activate(st, c3, NULL, &d) == 0);
    CHECK(store_model_prune(st, prof, 1, &pruned, &d) == 0 && pruned == 2);
    CHECK(store_model_get(st, c1, &got, &d) == SD_ENOENT);
    CHECK(store_model_get(st, p1, &got, &d) == 0);
    CHECK(got != NULL && got->info.base_model_id == 0 && got->info.active);
    store_model_free(got);

    /* Policy retrains: a kind of job of their own. */
    memset(&j, 0, sizeof(j));
    j.kind = STORE_JOB_RETRAIN_POLICY;
    j.profile_id = prof;
    CHECK(store_job_create(st, &j, &job, &d) == 0);
    CHECK(store_job_find_open(st, STORE_JOB_RETRAIN, prof, &open_job, &d) ==
          SD_ENOENT);
    CHECK(store_job_find_open(st, STORE_JOB_RETRAIN_POLICY, prof, &open_job,
                              &d) == 0);
    CHECK(open_job.id == job && open_job.kind == STORE_JOB_RETRAIN_POLICY);
    CHECK(strcmp(store_job_kind_name(open_job.kind), "retrain_policy") == 0);
    j.kind = 7;
    CHECK(store_job_create(st, &j, &job, &d) == SD_EINVAL);
    /* Samples are never policies. */
    CHECK(store_sample_count(st, prof, STORE_KIND_POLICY, 0, &pruned, &d) ==
          SD_EINVAL);
    CHECK(store_integrity_check(st, &d) == 0);
    store_close(st);
    teardown();
}

static void test_jobs(void)
{
    struct store_job j, got, *list = NULL;
    struct store *st = NULL;
    struct store_model m;
    struct sd_diag d;
    unsigned char w[64] = {1, 2, 3};
    int64_t prof, id1 = 0, id2 = 0, id3 = 0, id4 = 0, id5 = 0, v4 = 0, v5 = 0;
    uint64_t c = 0, ok = 0;
    size_t n = 0;

    setup();
    CHECK(store_open(path, 0, &st, &d) == 0);
    prof = make_profile(st, "cpu/test/4096");

    memset(&j, 0, sizeof(j));
    j.kind = STORE_JOB_RETRAIN;
    j.profile_id = prof;
    snprintf(j.params, sizeof(j.params), "{\"force\":true}");
    CHECK(store_job_create(st, &j, &id1, &d) == 0 && id1 > 0);
    CHECK(store_job_get(st, id1, &got, &d) == 0);
    CHECK(got.state == STORE_JOB_QUEUED && got.progress == 0 &&
          got.profile_id == prof && strcmp(got.profile, "cpu/test/4096") == 0 &&
          strcmp(got.params, "{\"force\":true}") == 0 && got.created_ms > 0 &&
          got.started_ms == 0 && got.finished_ms == 0 &&
          got.result_model_id == 0);
    CHECK(store_job_find_open(st, STORE_JOB_RETRAIN, prof, &got, &d) == 0 &&
          got.id == id1);
    CHECK(store_job_count(st, STORE_JOB_QUEUED, &c, &d) == 0 && c == 1);

    CHECK(store_job_update(st, id1, STORE_JOB_RUNNING, 0.5, "epoch 5/10", 0,
                           &d) == 0);
    CHECK(store_job_get(st, id1, &got, &d) == 0);
    CHECK(got.state == STORE_JOB_RUNNING && got.progress == 0.5 &&
          strcmp(got.message, "epoch 5/10") == 0 && got.started_ms > 0 &&
          got.finished_ms == 0);
    CHECK(store_job_update(st, id1, STORE_JOB_RUNNING, 0.75, NULL, 0, &d) == 0);
    CHECK(store_job_get(st, id1, &got, &d) == 0 &&
          strcmp(got.message, "epoch 5/10") == 0 && got.progress == 0.75);
    CHECK(store_job_update(st, id1, STORE_JOB_SUCCEEDED, 1, "done", 0, &d) ==
          0);
    CHECK(store_job_get(st, id1, &got, &d) == 0);
    CHECK(got.state == STORE_JOB_SUCCEEDED && got.finished_ms > 0 &&
          got.finished_ms >= got.started_ms);
    CHECK(store_job_update(st, id1, STORE_JOB_RUNNING, 0, NULL, 0, &d) ==
              SD_EINVAL &&
          strstr(d.msg, "succeeded") != NULL);
    CHECK(store_job_update(st, 9999, STORE_JOB_RUNNING, 0, NULL, 0, &d) ==
          SD_ENOENT);
    CHECK(store_job_update(st, id1, STORE_JOB_RUNNING, 0, NULL, 77, &d) ==
          SD_EINVAL);
    CHECK(store_job_find_open(st, STORE_JOB_RETRAIN, prof, &got, &d) ==
          SD_ENOENT);

    /* A job without a profile; then a crash leaves two unfinished. */
    j.profile_id = 0;
    j.params[0] = '\0';
    CHECK(store_job_create(st, &j, &id2, &d) == 0);
    j.profile_id = prof;
    CHECK(store_job_create(st, &j, &id3, &d) == 0);
    CHECK(store_job_get(st, id2, &got, &d) == 0 && got.profile_id == 0 &&
          got.profile[0] == '\0');
    CHECK(store_job_find_open(st, STORE_JOB_RETRAIN, 0, &got, &d) == 0 &&
          got.id == id2);
    CHECK(store_job_update(st, id3, STORE_JOB_RUNNING, 0.1, NULL, 0, &d) == 0);
    CHECK(store_job_count(st, STORE_JOB_RUNNING, &c, &d) == 0 && c == 1);
    CHECK(store_job_update(st, id3, STORE_JOB_FAILED, 0.2, "x", 77, &d) ==
              SD_EINVAL &&
          strstr(d.msg, "does not exist") != NULL); /* no model 77 */
    CHECK(store_job_get(st, id3, &got, &d) == 0 &&
          got.state == STORE_JOB_RUNNING && got.progress == 0.1);

    CHECK(store_job_list(st, 0, &list, &n, &d) == 0);
    CHECK(n == 3 && list[0].id == id3 && list[1].id == id2 &&
          list[2].id == id1);
    free(list);
    list = NULL;
    CHECK(store_job_list(st, 2, &list, &n, &d) == 0 && n == 2);
    free(list);

    /* Two more running jobs that recorded their models (jobs.c does before
     * it activates one): the daemon was killed after activating id4's and
     * before activating id5's. */
    model_init(&m, prof, STORE_KIND_COMPUTE, w, sizeof(w), NULL, 0, 0.05);
    CHECK(store_model_put(st, &m, &v4, &d) == 0);
    CHECK(store_model_put(st, &m, &v5, &d) == 0);
    CHECK(store_job_create(st, &j, &id4, &d) == 0);
    CHECK(store_job_create(st, &j, &id5, &d) == 0);
    CHECK(store_job_update(st, id4, STORE_JOB_RUNNING, 0.9, NULL, v4, &d) == 0);
    CHECK(store_job_update(st, id5, STORE_JOB_RUNNING, 0.9, NULL, v5, &d) == 0);
    CHECK(store_model_activate(st, v4, NULL, &d) == 0);

    CHECK(store_job_cancel_unfinished(st, "daemon restarted", &c, &ok, &d) ==
              0 &&
          c == 3 && ok == 1);
    CHECK(store_job_get(st, id3, &got, &d) == 0 &&
          got.state == STORE_JOB_CANCELLED &&
          strcmp(got.message, "daemon restarted") == 0 && got.finished_ms > 0);
    CHECK(store_job_get(st, id5, &got, &d) == 0 &&
          got.state == STORE_JOB_CANCELLED && got.result_model_id == v5);
    CHECK(store_job_get(st, id4, &got, &d) == 0 &&
          got.state == STORE_JOB_SUCCEEDED && got.progress == 1 &&
          got.result_model_id == v4 && got.finished_ms > 0 &&
          strstr(got.message, "activated") != NULL);
    CHECK(store_job_get(st, id1, &got, &d) == 0 &&
          got.state == STORE_JOB_SUCCEEDED);
    CHECK(store_job_state_is_terminal(STORE_JOB_FAILED) &&
          !store_job_state_is_terminal(STORE_JOB_RUNNING));
    CHECK(strcmp(store_job_state_name(STORE_JOB_CANCELLED), "cancelled") == 0);
    store_close(st);
    teardown();
}

static void test_audit(void)
{
    struct store_plan_audit a, *got = NULL;
    struct store *st = NULL;
    struct sd_diag d;
    int64_t id = 0;
    uint64_t n = 0;

    setup();
    CHECK(store_open(path, 0, &st, &d) == 0);
    memset(&a, 0, sizeof(a));
    snprintf(a.request_hash, sizeof(a.request_hash), "ab12cd");
    snprintf(a.algorithm, sizeof(a.algorithm), "dim_greedy");
    a.ntables = 10;
    a.ndevices = 4;
    a.plan_cost_ms = 12.5;
    a.plan_json = "{\"algorithm\":\"dim_greedy\"}";
    CHECK(store_plan_audit_put(st, &a, &id, &d) == 0 && id > 0);
    CHECK(store_plan_audit_get(st, id, &got, &d) == 0);
    CHECK(got != NULL && got->id == id && got->model_id == 0 &&
          got->ntables == 10 && got->ndevices == 4 &&
          got->plan_cost_ms == 12.5 && got->created_ms > 0 &&
          strcmp(got->request_hash, "ab12cd") == 0 &&
          strcmp(got->algorithm, "dim_greedy") == 0 &&
          strcmp(got->plan_json, a.plan_json) == 0);
    free(got);
    a.model_id = 42; /* no such model */
    CHECK(store_plan_audit_put(st, &a, NULL, &d) == SD_EINVAL);
    CHECK(store_plan_audit_prune(st, 0, &n, &d) == 0 && n == 0);
    CHECK(store_plan_audit_prune(st, INT64_MAX, &n, &d) == 0 && n == 1);
    got = NULL;
    CHECK(store_plan_audit_get(st, id, &got, &d) == SD_ENOENT && got == NULL);

    /* Trimming keeps the newest records: 5 put, keep 2, the last 2 stay. */
    a.model_id = 0;
    for (n = 0; n < 5; n++)
        CHECK(store_plan_audit_put(st, &a, &id, &d) == 0);
    CHECK(store_plan_audit_trim(st, 10, &n, &d) == 0 && n == 0);
    CHECK(store_plan_audit_trim(st, 2, &n, &d) == 0 && n == 3);
    CHECK(store_plan_audit_get(st, id, &got, &d) == 0 && got != NULL);
    free(got);
    got = NULL;
    CHECK(store_plan_audit_get(st, id - 1, &got, &d) == 0 && got != NULL);
    free(got);
    got = NULL;
    CHECK(store_plan_audit_get(st, id - 2, &got, &d) == SD_ENOENT);
    CHECK(store_plan_audit_trim(st, 0, &n, &d) == 0 && n == 2);
    store_close(st);
    teardown();
}

/* A newer schema is refused with the message and the file is not touched. */
static void test_newer(void)
{
    struct store *st = NULL;
    struct sd_diag d;
    unsigned char *before = NULL, *after = NULL;
    size_t nbefore = 0, nafter = 0;
    char want[160];
    FILE *f;
    int v = STORE_SCHEMA_VERSION + 1;
    unsigned char be[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                           (unsigned char)(v >> 8), (unsigned char)v};

    setup();
    CHECK(store_open(path, 0, &st, &d) == 0);
    make_profile(st, "cpu/test/4096");
    store_close(st);
    CHECK(!exists("-wal"));
    f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (f != NULL) {
        CHECK(fseek(f, 60, SEEK_SET) == 0 && fwrite(be, 1, 4, f) == 4);
        fclose(f);
    }
    before = slurp(&nbefore);

    st = NULL;
    snprintf(want, sizeof(want),
             "database schema version %d is newer than this shardd supports "
             "(%d); upgrade shardd",
             v, STORE_SCHEMA_VERSION);
    CHECK(store_open(path, 0, &st, &d) == SD_ENEWER && st == NULL);
    CHECK(strcmp(d.msg, want) == 0);
    CHECK(!exists("-wal") && !exists("-journal"));
    /* A read-only connection leaves SQLite's (empty) -wal and -shm. */
    CHECK(store_open(path, STORE_OPEN_READONLY, &st, &d) == SD_ENEWER &&
          st == NULL);
    CHECK(file_size("-wal") <= 0);
    after = slurp(&nafter);
    CHECK(before != NULL && after != NULL && nbefore == nafter &&
          memcmp(before, after, nbefore) == 0);
    free(before);
    free(after);
    teardown();

    /* Not a database at all, and a SQLite file that is not ours. */
    setup();
    f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f != NULL) {
        fputs("this is not a database, not even close; it is text.\n", f);
        fclose(f);
    }
    CHECK(store_open(path, 0, &st, &d) == SD_EFORMAT && st == NULL);
    teardown();
}

/* Bad input is SD_EINVAL naming the field, and writes nothing. */
static void test_bad_input(void)
{
    static const float w[] = {1};
    struct table tables[2];
    struct store_sample s;
    struct store_profile p;
    struct store_model m;
    struct store_job j;
    struct store_plan_audit a;
    struct store_model_info *ml = NULL;
    struct store_job *jl = NULL;
    struct store *st = NULL;
    struct sd_diag d;
    int64_t prof, id = 0, job = 0;
    size_t n = 1;

    setup();
    CHECK(store_open(path, 0, &st, &d) == 0);
    prof = make_profile(st, "cpu/test/4096");
    make_table(&tables[0], 0);
    make_table(&tables[1], 1);
    memset(&j, 0, sizeof(j));
    j.kind = STORE_JOB_RETRAIN;
    CHECK(store_job_create(st, &j, &job, &d) == 0);

    make_sample(&s, prof, tables, 2, NAN);
    CHECK(store_sample_add(st, &s, &id, &d) == SD_EINVAL &&
          strstr(d.msg, "measured_ms") != NULL && id == 0);
    make_sample(&s, prof, tables, 2, 1);
    tables[1].dim = 30;
    CHECK(store_sample_add(st, &s, &id, &d) == SD_EINVAL &&
          strstr(d.msg, "tables[1]") != NULL && strstr(d.msg, "dim") != NULL);
    tables[1].dim = 32;
    s.device[0] = '\0';
    CHECK(store_sample_add(st, &s, &id, &d) == SD_EINVAL &&
          strstr(d.msg, "device") != NULL);
    make_sample(&s, prof, tables, 2, 1);
    memset(s.source, 'x', sizeof(s.source)); /* not NUL-terminated */
    CHECK(store_sample_add(st, &s, &id, &d) == SD_EINVAL &&
          strstr(d.msg, "source") != NULL);
    make_sample(&s, prof, tables, 2, 1);
    s.kind = (enum store_kind)7;
    CHECK(store_sample_add(st, &s, &id, &d) == SD_EINVAL &&
          strstr(d.msg, "kind") != NULL);
    make_sample(&s, prof, tables, 0, 1);
    CHECK(store_sample_add(st, &s, &id, &d) == SD_EINVAL &&
          strstr(d.msg, "ntables") != NULL);
    make_sample(&s, prof + 5, tables, 2, 1); /* no such profile */
    CHECK(store_sample_add(st, &s, &id, &d) == SD_EINVAL && id == 0);
    /* In a batch, a refused sample leaves the batch open and unharmed. */
    make_sample(&s, prof, tables, 2, 1);
    CHECK(store_sample_batch_begin(st, &d) == 0);
    CHECK(store_sample_add(st, &s, NULL, &d) == 0);
    s.profile_id = prof + 5;
    CHECK(store_sample_add(st, &s, NULL, &d) == SD_EINVAL);
    s.profile_id = prof;
    CHECK(store_sample_add(st, &s, NULL, &d) == 0);
    model_init(&m, prof, STORE_KIND_COMPUTE, w, sizeof(w), NULL, 0, 0.1);
    CHECK(store_model_put(st, &m, &id, &d) == SD_EINVAL &&
          strstr(d.msg, "batch") != NULL);
    CHECK(store_sample_batch_commit(st, &d) == 0);
    CHECK(count(st, prof, STORE_KIND_COMPUTE) == 2);

    memset(&p, 0, sizeof(p));
    snprintf(p.backend, sizeof(p.backend), "cpu");
    snprintf(p.device_model, sizeof(p.device_model), "x");
    p.batch_size = 1;
    CHECK(store_profile_get_or_create(st, &p, &id, &d) == SD_EINVAL &&
          strstr(d.msg, "name") != NULL);
    snprintf(p.name, sizeof(p.name), "p");
    p.batch_size = 0;
    CHECK(store_profile_get_or_create(st, &p, &id, &d) == SD_EINVAL &&
          strstr(d.msg, "batch_size") != NULL);
    CHECK(store_profile_get(st, "p", &p, &d) == SD_ENOENT);

    model_init(&m, prof, STORE_KIND_COMPUTE, w, sizeof(w), NULL, 0, NAN);
    CHECK(store_model_put(st, &m, &id, &d) == SD_EINVAL &&
          strstr(d.msg, "val_mape") != NULL);
    model_init(&m, prof, STORE_KIND_COMPUTE, NULL, 0, NULL, 0, 0.1);
    CHECK(store_model_put(st, &m, &id, &d) == SD_EINVAL &&
          strstr(d.msg, "weights") != NULL);
    model_init(&m, prof, STORE_KIND_COMPUTE, w, sizeof(w), NULL, 4, 0.1);
    CHECK(store_model_put(st, &m, &id, &d) == SD_EINVAL &&
          strstr(d.msg, "norm") != NULL);

    CHECK(store_job_update(st, job, STORE_JOB_RUNNING, 2, NULL, 0, &d) ==
              SD_EINVAL &&
          strstr(d.msg, "progress") != NULL);
    CHECK(store_job_update(st, job, STORE_JOB_RUNNING, NAN, NULL, 0, &d) ==
          SD_EINVAL);
    CHECK(store_job_update(st, job, (enum store_job_state)9, 0, NULL, 0, &d) ==
              SD_EINVAL &&
          strstr(d.msg, "state") != NULL);
    j.kind = (enum store_job_kind)3;
    CHECK(store_job_create(st, &j, &id, &d) == SD_EINVAL &&
          strstr(d.msg, "kind") != NULL);

    memset(&a, 0, sizeof(a));
    snprintf(a.algorithm, sizeof(a.algorithm), "random");
    a.ntables = a.ndevices = 1;
    a.plan_json = "{}";
    CHECK(store_plan_audit_put(st, &a, &id, &d) == SD_EINVAL &&
          strstr(d.msg, "request_hash") != NULL);

    /* Nothing was written by any of it. */
    CHECK(count(st, prof, STORE_KIND_COMPUTE) == 2);
    CHECK(store_model_list(st, 0, 0, &ml, &n, &d) == 0 && n == 0);
    CHECK(store_job_list(st, 0, &jl, &n, &d) == 0 && n == 1);
    CHECK(n == 1 && jl[0].state == STORE_JOB_QUEUED && jl[0].progress == 0);
    free(jl);
    CHECK(store_integrity_check(st, &d) == 0);
    store_close(st);
    teardown();
}

/* ------------------------------------------------------------------------ */
/* A damaged store is never used silently                                   */

/* Writes len bytes at offset off of the database file. */
static void poke(long off, const void *bytes, size_t len)
{
    FILE *f = fopen(path, "r+b");

    CHECK(f != NULL);
    if (f == NULL)
        return;
    CHECK(fseek(f, off, SEEK_SET) == 0 && fwrite(bytes, 1, len, f) == len);
    fclose(f);
}

static void poke_be32(long off, uint32_t v)
{
    unsigned char be[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                           (unsigned char)(v >> 8), (unsigned char)v};

    poke(off, be, 4);
}

/* Overwrites page pgno (1-based) of `ps` bytes with seeded garbage. */
static void garbage_page(size_t pgno, size_t ps)
{
    unsigned char *g = malloc(ps);
    uint32_t x = 20261124;
    size_t i;

    for (i = 0; g != NULL && i < ps; i++) {
        x = x * 1103515245u + 12345u;
        g[i] = (unsigned char)(x >> 16);
    }
    if (g != NULL)
        poke((long)((pgno - 1) * ps), g, ps);
    free(g);
}

/* The page size in a database header (1 means 65536). */
static size_t page_size(const unsigned char *buf)
{
    size_t ps = (size_t)buf[16] << 8 | buf[17];

    return ps == 1 ? 65536 : ps;
}

/*
 * The table b-tree leaf page (type 13) nearest the middle of the file, 0 if
 * none: with hundreds of samples, one of the samples table's.
 */
static size_t middle_leaf(const unsigned char *buf, size_t len, size_t ps)
{
    size_t n = len / ps, k;

    for (k = 0; k < n / 2; k++) {
        if (buf[(n / 2 + k - 1) * ps] == 13)
            return n / 2 + k;
        if (n / 2 - k > 2 && buf[(n / 2 - k - 1) * ps] == 13)
            return n / 2 - k;
    }
    return 0;
}

/* A store at path with n compute samples of 1 to 25 tables. */
static int64_t fill_store(size_t n)
{
    struct table tables[25];
    struct store_sample s;
    struct store *st = NULL;
    struct sd_diag d;
    int64_t prof;
    size_t i;
    bool ok = true;

    for (i = 0; i < 25; i++)
        make_table(&tables[i], i);
    CHECK(store_open(path, 0, &st, &d) == 0);
    prof = make_profile(st, "cpu/test/4096");
    CHECK(store_sample_batch_begin(st, &d) == 0);
    for (i = 0; i < n; i++) {
        make_sample(&s, prof, tables, 1 + i % 25, 1 + (double)i);
        ok = ok && store_sample_add(st, &s, NULL, &d) == 0;
    }
    CHECK(ok && store_sample_batch_commit(st, &d) == 0);
    store_close(st);
    return prof;
}

/* Copies file a to b; false on any failure. */
static bool copy_file(const char *a, const char *b)
{
    unsigned char *buf;
    size_t len = 0;
    bool ok;
    FILE *f;

    buf = slurp_file(a, &len);
    f = fopen(b, "wb");
    ok = buf != NULL && f != NULL && fwrite(buf, 1, len, f) == len;
    if (f != NULL)
        ok = fclose(f) == 0 && ok;
    free(buf);
    return ok;
}

/*
 * Opens path read-write, then read-only: both must fail with `want` and
 * leave the file byte for byte as it was, with no log beside it.
 */
static void check_refused(int want, const char *why)
{
    struct store *st = NULL;
    struct sd_diag d;
    unsigned char *before, *after;
    size_t nbefore = 0, nafter = 0;
    int rv;

    before = slurp(&nbefore);
    rv = store_open(path, 0, &st, &d);
    CHECK(rv == want && st == NULL);
    if (rv != want)
        fprintf(stderr, "%s: got %s: %s\n", why, sd_err_name(rv), d.msg);
    CHECK(strstr(d.msg, path) != NULL);
    if (want == SD_ECORRUPT)
        CHECK(strstr(d.msg, "damaged") != NULL &&
              strstr(d.msg, ".recover") != NULL);
    CHECK(!exists("-wal") && !exists("-journal"));
    CHECK(store_open(path, STORE_OPEN_READONLY, &st, &d) == want && st == NULL);
    CHECK(file_size("-wal") <= 0);
    after = slurp(&nafter);
    CHECK(before != NULL && after != NULL && nbefore == nafter &&
          memcmp(before, after, nbefore) == 0);
    free(before);
    free(after);
}

/* An empty file (a lost store) is refused, never initialised. */
static void test_empty_file(void)
{
    FILE *f;

    setup();
    f = fopen(path, "wb");
    CHECK(f != NULL && fclose(f) == 0);
    check_refused(SD_ECORRUPT, "empty file");
    CHECK(file_size("") == 0);
    teardown();
}

/*
 * A garbage page in the middle of a store with samples, a garbage last page,
 * and a store cut short are refused; the diag names the newest backup, and
 * that backup, copied into place, is a whole store again.
 */
static void test_damaged(void)
{
    struct store *st = NULL;
    struct sd_diag d;
    unsigned char *buf;
    char backup[256];
    size_t len = 0, ps = 0, pg = 0;
    int64_t prof;

    setup();
    prof = fill_store(400);
    CHECK(store_open(path, 0, &st, &d) == 0);
    CHECK(store_backup(st, NULL, 3, backup, sizeof(backup), &d) == 0);
    store_close(st);
    buf = slurp(&len);
    if (buf != NULL) {
        ps = page_size(buf);
        pg = middle_leaf(buf, len, ps);
    }
    free(buf);
    CHECK(ps >= 512 && len / ps > 100 && pg > 1);

    garbage_page(pg, ps);
    check_refused(SD_ECORRUPT, "garbage page in the middle");
    CHECK(store_open(path, 0, &st, &d) == SD_ECORRUPT &&
          strstr(d.msg, backup) != NULL);

    /* Restoring the backup (docs/daemon.md) brings every sample back. */
    CHECK(copy_file(backup, path));
    st = NULL;
    CHECK(store_open(path, 0, &st, &d) == 0);
    CHECK(st != NULL && count(st, prof, STORE_KIND_COMPUTE) == 400);
    CHECK(st != NULL && store_integrity_check(st, &d) == 0);
    store_close(st);

    garbage_page(len / ps, ps);
    check_refused(SD_ECORRUPT, "garbage last page");

    CHECK(copy_file(backup, path) && truncate(path, (off_t)(len - ps)) == 0);
    check_refused(SD_ECORRUPT, "last page cut off");
    teardown();
}

/* A minimal, empty SQLite database (one 4096-byte page): another program's. */
static void write_empty_sqlite(void)
{
    unsigned char b[4096];
    FILE *f;

    memset(b, 0, sizeof(b));
    memcpy(b, "SQLite format 3", 16);
    b[16] = 0x10;      /* page size 4096 */
    b[18] = b[19] = 1; /* rollback journal */
    b[21] = 64;        /* payload fractions */
    b[22] = b[23] = 32;
    b[27] = b[31] = 1; /* change counter, size in pages */
    b[47] = 4;         /* schema format */
    b[59] = 1;         /* UTF-8 */
    b[95] = 1;         /* version-valid-for */
    b[100] = 13;       /* an empty table leaf: sqlite_schema */
    b[105] = 0x10;     /* cell content at 4096 */
    f = fopen(path, "wb");
    CHECK(f != NULL && fwrite(b, 1, sizeof(b), f) == sizeof(b));
    if (f != NULL)
        fclose(f);
}

/*
 * A SQLite database that is not shardd's is refused and left alone, even an
 * empty one, and a -wal left without its database is not replayed into a new
 * one.
 */
static void test_foreign(void)
{
    struct store *st = NULL;
    struct sd_diag d;
    char moved[160];
    pid_t pid;
    int status = 0;

    setup();
    write_empty_sqlite();
    check_refused(SD_EFORMAT, "empty SQLite database");
    CHECK(store_open(path, 0, &st, &d) == SD_EFORMAT &&
          strstr(d.msg, "without shardd's schema") != NULL);
    teardown();

    setup();
    fill_store(3);
    poke_be32(68, 0x12345678); /* application_id */
    check_refused(SD_EFORMAT, "another application_id");
    CHECK(store_open(path, 0, &st, &d) == SD_EFORMAT &&
          strstr(d.msg, "another application") != NULL);
    poke_be32(68, 0); /* none, and tables */
    check_refused(SD_EFORMAT, "no application_id");
    poke_be32(68, STORE_APPLICATION_ID);
    poke_be32(60, 0); /* ours, but no schema version */
    check_refused(SD_EFORMAT, "no user_version");
    poke_be32(60, STORE_SCHEMA_VERSION);
    CHECK(store_open(path, 0, &st, &d) == 0);
    store_close(st);

    /* A child commits into the WAL and dies before any checkpoint. */
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        if (store_open(path, 0, &st, &d) != 0 || make_profile(st, "x") <= 0)
            _exit(2);
        raise(SIGKILL);
        _exit(3);
    }
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFSIGNALED(status));
    CHECK(file_size("-wal") > 0);
    snprintf(moved, sizeof(moved), "%s/moved.db", dir);
    CHECK(rename(path, moved) == 0);
    st = NULL;
    CHECK(store_open(path, 0, &st, &d) == SD_ECORRUPT && st == NULL &&
          strstr(d.msg, "-wal") != NULL);
    CHECK(!exists(""));
    teardown();
}

/*
 * Makes a SQLite file at `path` with Python's sqlite3 module (the test
 * does not include <sqlite3.h>): /usr/bin/python3 -c script path arg.
 * False, with a SKIP line, where that Python or its sqlite3 is missing.
 */
static bool python_sqlite(const char *script, const char *arg)
{
    static int have = -1; /* unknown, no, yes */
    pid_t pid;
    int status = -1;

    if (have < 0) {
        have = access("/usr/bin/python3", X_OK) == 0 &&
               system("/usr/bin/python3 -c 'import sqlite3' 2>/dev/null") == 0;
        if (!have)
            tap_skip("/usr/bin/python3 with its sqlite3 module is missing: "
                     "databases of other applications not tried");
    }
    if (!have)
        return false;
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        execl("/usr/bin/python3", "python3", "-c", script, path, arg,
              (char *)NULL);
        _exit(127);
    }
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
          WEXITSTATUS(status) == 0);
    return status == 0;
}

/*
 * Real databases of other programs, made by SQLite itself: refused with
 * SD_EFORMAT, read-write and read-only, and left byte for byte as they
 * were.  One without an application_id whose user_version is this store's
 * schema version (a version number alone proves nothing), in WAL mode like
 * ours; one of another application_id (GeoPackage's "GPKG") whose tables
 * are named like ours.
 */
static void test_other_applications(void)
{
    static const char plain[] =
        "import sqlite3, sys\n"
        "con = sqlite3.connect(sys.argv[1])\n"
        "con.execute('PRAGMA journal_mode = WAL')\n"
        "con.execute('PRAGMA user_version = %d' % int(sys.argv[2]))\n"
        "con.execute('CREATE TABLE bookmarks (id INTEGER PRIMARY KEY, '\n"
        "            'url TEXT NOT NULL, title TEXT, visits INTEGER)')\n"
        "con.execute('CREATE INDEX bookmarks_url ON bookmarks (url)')\n"
        "con.executemany('INSERT INTO bookmarks (url, title, visits) '\n"
        "                'VALUES (?, ?, ?)', [('https://example.org/%d' % i,\n"
        "                'page %d' % i, i) for i in range(500)])\n"
        "con.commit()\n"
        "con.close()\n";
    static const char gpkg[] =
        "import sqlite3, sys\n"
        "con = sqlite3.connect(sys.argv[1])\n"
        "con.execute('PRAGMA application_id = 0x47504B47')\n"
        "con.execute('PRAGMA user_version = 10300')\n"
        "con.execute('CREATE TABLE gpkg_contents (table_name TEXT PRIMARY '\n"
        "            'KEY, data_type TEXT NOT NULL)')\n"
        "con.execute('CREATE TABLE profiles (id INTEGER PRIMARY KEY, '\n"
        "            'name TEXT)')\n"
        "con.execute('CREATE TABLE samples (id INTEGER PRIMARY KEY, '\n"
        "            'measured_ms REAL)')\n"
        "con.execute(\"INSERT INTO profiles (name) VALUES ('cpu/x/4096')\")\n"
        "con.commit()\n"
        "con.close()\n";
    struct store *st = NULL;
    struct sd_diag d;
    char version[16], uv[32];

    snprintf(version, sizeof(version), "%d", STORE_SCHEMA_VERSION);
    snprintf(uv, sizeof(uv), "user_version %d,", STORE_SCHEMA_VERSION);
    setup();
    if (python_sqlite(plain, version)) {
        CHECK(file_size("") > 4096 && !exists("-wal"));
        check_refused(SD_EFORMAT, "another program's database, no app id");
        CHECK(store_open(path, 0, &st, &d) == SD_EFORMAT && st == NULL);
        CHECK(strstr(d.msg, "without shardd's schema") != NULL);
        CHECK(strstr(d.msg, uv) != NULL);
        CHECK(store_open(path, STORE_OPEN_READONLY, &st, &d) == SD_EFORMAT &&
              strstr(d.msg, "without shardd's schema") != NULL);
    }
    teardown();

    setup();
    if (python_sqlite(gpkg, "")) {
        check_refused(SD_EFORMAT, "GeoPackage");
        CHECK(store_open(path, 0, &st, &d) == SD_EFORMAT && st == NULL);
        CHECK(strstr(d.msg, "another application's SQLite database") != NULL &&
              strstr(d.msg, "0x47504b47") != NULL);
    }
    teardown();
}

/*
 * A store of an older schema, made by hand (SQLite sets user_version to
 * the version before this build's): read-only, it is refused untouched
 * (migrating needs a write).  At schema 1 the version before is 0, which
 * is no schema at all: refused as not shardd's, read-write too.  From
 * schema 2 on, read-only says to open it read-write once.
 */
static void test_older_readonly(void)
{
    static const char older[] =
        "import sqlite3, sys\n"
        "con = sqlite3.connect(sys.argv[1])\n"
        "con.execute('PRAGMA user_version = %d' % int(sys.argv[2]))\n"
        "con.close()\n";
    struct store *st = NULL;
    struct sd_diag d;
    unsigned char *before, *after;
    size_t nbefore = 0, nafter = 0;
    char version[16];
    int rv;

    setup();
    fill_store(3);
    snprintf(version, sizeof(version), "%d", STORE_SCHEMA_VERSION - 1);
    if (!python_sqlite(older, version)) {
        teardown();
        return;
    }
    before = slurp(&nbefore);
    CHECK(before != NULL && be32(before + 60) == STORE_SCHEMA_VERSION - 1 &&
          be32(before + 68) == STORE_APPLICATION_ID);
    rv = store_open(path, STORE_OPEN_READONLY, &st, &d);
    CHECK(st == NULL && strstr(d.msg, path) != NULL);
    if (STORE_SCHEMA_VERSION - 1 == 0) {
        CHECK(rv == SD_EFORMAT && strstr(d.msg, "no schema version") != NULL);
        CHECK(store_open(path, 0, &st, &d) == SD_EFORMAT && st == NULL);
    } else {
        CHECK(rv == SD_ESTATE && strstr(d.msg, "older than") != NULL &&
              strstr(d.msg, "open it read-write once") != NULL);
    }
    CHECK(file_size("-wal") <= 0);
    after = slurp(&nafter);
    CHECK(before != NULL && after != NULL && nbefore == nafter &&
          memcmp(before, after, nbefore) == 0);
    free(before);
    free(after);
    teardown();
}

/* Counts the entries of d whose names start with prefix. */
static size_t count_files(const char *d, const char *prefix)
{
    struct dirent *e;
    size_t n = 0;
    DIR *dp;

    dp = opendir(d);
    while (dp != NULL && (e = readdir(dp)) != NULL)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (dp != NULL)
        closedir(dp);
    return n;
}

/* Backups open as stores with the same contents; rotation keeps `keep`. */
static void test_backup(void)
{
    static const float w[] = {1, 2};
    struct store_model m, *got = NULL;
    struct store *st = NULL, *bk = NULL;
    struct sd_diag d;
    char name[5][256], newest[256], sub[160];
    int64_t prof, v = 0;
    size_t i;

    setup();
    prof = fill_store(50);
    CHECK(store_open(path, 0, &st, &d) == 0);
    model_init(&m, prof, STORE_KIND_COMPUTE, w, sizeof(w), NULL, 0, 0.1);
    CHECK(store_model_put(st, &m, &v, &d) == 0 &&
          store_model_activate(st, v, NULL, &d) == 0);
    CHECK(store_backup_newest(path, NULL, newest, sizeof(newest), &d) ==
          SD_ENOENT);
    CHECK(store_backup(st, NULL, 0, NULL, 0, &d) == SD_EINVAL);
    CHECK(store_backup(st, NULL, 2, name[0], 8, &d) == SD_EINVAL);
    CHECK(count_files(dir, "shardd.db.backup-") == 0);

    for (i = 0; i < 5; i++)
        CHECK(store_backup(st, NULL, 2, name[i], sizeof(name[i]), &d) == 0);
    CHECK(strncmp(name[4], dir, strlen(dir)) == 0 &&
          strstr(name[4], "/shardd.db.backup-") != NULL);
    CHECK(strcmp(name[3], name[4]) < 0);
    CHECK(count_files(dir, "shardd.db.backup-") == 2);
    CHECK(access(name[2], F_OK) != 0 && access(name[3], F_OK) == 0);
    CHECK(store_backup_newest(path, NULL, newest, sizeof(newest), &d) == 0 &&
          strcmp(newest, name[4]) == 0);

    /* A backup is a whole store: same samples, same active model. */
    CHECK(store_open(name[4], STORE_OPEN_READONLY, &bk, &d) == 0);
    CHECK(bk != NULL && count(bk, prof, STORE_KIND_COMPUTE) == 50);
    CHECK(bk != NULL &&
          store_model_get_active(bk, prof, STORE_KIND_COMPUTE, &got, &d) == 0 &&
          got->info.id == v);
    store_model_free(got);
    CHECK(bk != NULL && store_integrity_check(bk, &d) == 0);
    store_close(bk);
    /* Opening one leaves a -wal and -shm; they are not taken for backups. */
    CHECK(store_backup_newest(path, NULL, newest, sizeof(newest), &d) == 0 &&
          strcmp(newest, name[4]) == 0);
    CHECK(store_backup(st, NULL, 1, NULL, 0, &d) == 0);
    CHECK(count_files(dir, "shardd.db.backup-") == 1);

    /* Into another directory. */
    snprintf(sub, sizeof(sub), "%s/backups", dir);
    CHECK(mkdir(sub, 0700) == 0);
    CHECK(store_backup(st, sub, 3, name[0], sizeof(name[0]), &d) == 0 &&
          strncmp(name[0], sub, strlen(sub)) == 0);
    CHECK(store_backup_newest(path, sub, newest, sizeof(newest), &d) == 0 &&
          strcmp(newest, name[0]) == 0);
    CHECK(count_files(sub, "shardd.db.backup-") == 1);
    CHECK(store_backup(st, "/nonexistent/dir", 3, NULL, 0, &d) != 0);

    CHECK(store_sample_batch_begin(st, &d) == 0);
    CHECK(store_backup(st, NULL, 3, NULL, 0, &d) == SD_EINVAL);
    store_sample_batch_abort(st);
    CHECK(count_files(dir, "shardd.db.backup-") == 1); /* no .tmp- left */
    store_close(st);
    teardown();
}

static unsigned file_mode(const char *p)
{
    struct stat sb;

    return stat(p, &sb) == 0 ? (unsigned)(sb.st_mode & 0777) : 0;
}

/* Under umask 000 the store, its -wal and -shm and backups are 0600. */
static void test_modes(void)
{
    struct store *st = NULL;
    struct sd_diag d;
    char p[160], backup[256];
    mode_t old;

    old = umask(0);
    setup();
    CHECK(store_open(path, 0, &st, &d) == 0);
    make_profile(st, "cpu/test/4096");
    CHECK(file_mode(path) == 0600);
    snprintf(p, sizeof(p), "%s-wal", path);
    CHECK(file_mode(p) == 0600);
    snprintf(p, sizeof(p), "%s-shm", path);
    CHECK(file_mode(p) == 0600);
    CHECK(store_backup(st, NULL, 1, backup, sizeof(backup), &d) == 0);
    CHECK(file_mode(backup) == 0600);
    store_close(st);
    CHECK(count_files(dir, "shardd.db.new-") == 0); /* no temp file left */
    umask(old);
    teardown();
}

/* Pruning keeps the newest versions of each kind and the active one. */
static void test_prune(void)
{
    static const float w[] = {1, 2, 3};
    struct store_model m;
    struct store_model_info *list = NULL;
    struct store_plan_audit a, *ga = NULL;
    struct store_job j, gj;
    struct store *st = NULL;
    struct sd_diag d;
    int64_t prof, other, v[6], c[3], ov = 0, job = 0, rec = 0;
    uint64_t n = 99;
    size_t i, nl = 0;

    setup();
    CHECK(store_open(path, 0, &st, &d) == 0);
    prof = make_profile(st, "cpu/test/4096");
    other = make_profile(st, "cpu/other/4096");
    for (i = 0; i < 6; i++) {
        model_init(&m, prof, STORE_KIND_COMPUTE, w, sizeof(w), NULL, 0, 0.1);
        CHECK(store_model_put(st, &m, &v[i], &d) == 0);
    }
    for (i = 0; i < 3; i++) {
        model_init(&m, prof, STORE_KIND_COMM, w, sizeof(w), NULL, 0, 0.1);
        CHECK(store_model_put(st, &m, &c[i], &d) == 0);
    }
    model_init(&m, other, STORE_KIND_COMPUTE, w, sizeof(w), NULL, 0, 0.1);
    CHECK(store_model_put(st, &m, &ov, &d) == 0);
    CHECK(store_model_activate(st, v[1], NULL, &d) == 0);
    /* A job and a plan record name versions that will go. */
    memset(&j, 0, sizeof(j));
    j.kind = STORE_JOB_RETRAIN;
    j.profile_id = prof;
    CHECK(store_job_create(st, &j, &job, &d) == 0);
    CHECK(store_job_update(st, job, STORE_JOB_SUCCEEDED, 1, "done", v[0], &d) ==
          0);
    memset(&a, 0, sizeof(a));
    snprintf(a.request_hash, sizeof(a.request_hash), "ab");
    snprintf(a.algorithm, sizeof(a.algorithm), "greedy");
    a.model_id = v[2];
    a.ntables = a.ndevices = 1;
    a.plan_json = "{}";
    CHECK(store_plan_audit_put(st, &a, &rec, &d) == 0);

    CHECK(store_model_prune(st, 0, 2, &n, &d) == SD_EINVAL && n == 99);
    CHECK(store_sample_batch_begin(st, &d) == 0);
    CHECK(store_model_prune(st, prof, 2, &n, &d) == SD_EINVAL);
    store_sample_batch_abort(st);

    /* compute: v5, v4 newest and v1 active stay; comm: c2, c1 stay. */
    CHECK(store_model_prune(st, prof, 2, &n, &d) == 0 && n == 4);
    CHECK(store_model_list(st, 0, 0, &list, &nl, &d) == 0 && nl == 6);
    CHECK(nl == 6 && list[0].id == ov && list[1].id == c[2] &&
          list[2].id == c[1] && list[3].id == v[5] && list[4].id == v[4] &&
          list[5].id == v[1] && list[5].active);
    free(list);
    CHECK(store_job_get(st, job, &gj, &d) == 0 && gj.result_model_id == 0 &&
          gj.state == STORE_JOB_SUCCEEDED);
    CHECK(store_plan_audit_get(st, rec, &ga, &d) == 0 && ga->model_id == 0);
    free(ga);
    CHECK(store_integrity_check(st, &d) == 0);

    CHECK(store_model_prune(st, prof, 2, &n, &d) == 0 && n == 0);
    CHECK(store_model_prune(st, prof, 0, NULL, &d) == 0);
    list = NULL;
    CHECK(store_model_list(st, prof, 0, &list, &nl, &d) == 0 && nl == 1 &&
          list[0].id == v[1]);
    free(list);
    list = NULL;
    CHECK(store_model_list(st, other, 0, &list, &nl, &d) == 0 && nl == 1);
    free(list);
    store_close(st);
    teardown();
}

/*
 * The other process of test_locks: opens the store at p and closes it.  A
 * close that believes it is the last one checkpoints and deletes the -wal.
 */
static int open_close(const char *p)
{
    struct store *st = NULL;
    struct sd_diag d;

    if (store_open(p, 0, &st, &d) != 0) {
        fprintf(stderr, "open_close: %s\n", d.msg);
        return 1;
    }
    store_close(st);
    return 0;
}

/* Runs this executable as another process: test_store --open-close path. */
static bool run_open_close(void)
{
    int status = 0;
    pid_t pid;

    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "test_store", "--open-close", path,
              (char *)NULL);
        _exit(127);
    }
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
           WEXITSTATUS(status) == 0;
}

/*
 * Opening a second handle must not drop the locks of the first: POSIX locks
 * belong to the process, and any close() of the file releases them all.  If
 * they were dropped, another process's close would take itself for the last
 * one and delete the -wal under the first handle, whose later commits would
 * then be lost.
 */
static void test_locks(void)
{
    struct table t;
    struct store_sample s;
    struct store *a = NULL, *b = NULL, *c = NULL;
    struct sd_diag d;
    int64_t prof;

    setup();
    make_table(&t, 1);
    CHECK(store_open(path, 0, &a, &d) == 0);
    prof = make_profile(a, "cpu/test/4096");
    make_sample(&s, prof, &t, 1, 1);
    CHECK(store_sample_add(a, &s, NULL, &d) == 0);
    CHECK(store_open(path, 0, &b, &d) == 0); /* the store exists: checked */
    CHECK(run_open_close());
    CHECK(exists("-wal"));
    CHECK(store_sample_add(a, &s, NULL, &d) == 0);
    CHECK(store_open(path, STORE_OPEN_READONLY, &c, &d) == 0);
    CHECK(c != NULL && count(c, prof, STORE_KIND_COMPUTE) == 2);
    store_close(c);
    store_close(b);
    store_close(a);
    teardown();
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--open-close") == 0)
        return open_close(argv[2]);
    test_open();
    test_samples();
    test_kill9();
    test_models();
    test_migrate_v2();
    test_migrate_v3();
    test_migrate_v4();
    test_model_families();
    test_policies();
    test_jobs();
    test_audit();
    test_newer();
    test_bad_input();
    test_empty_file();
    test_damaged();
    test_foreign();
    test_other_applications();
    test_older_readonly();
    test_backup();
    test_modes();
    test_prune();
    test_locks();
    return tap_done();
}
