/*
 * The plan audit writer (daemon/audit.h) on a real SQLite file: records
 * queued from several threads all land, with their plans, once audit_sync()
 * returns; a stop writes what is still queued; a full queue drops and
 * counts; a record the store refuses drops its batch, and the next batch
 * is written again.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audit.h"
#include "harness.h"

static char dir[] = "/tmp/shardd-test-audit-XXXXXX";
static char db[256];

#define THREADS     4
#define PER_THREAD  200
#define PLAN_PREFIX "{\"plan\": "

static struct store_plan_audit record(int i, char *json, size_t cap)
{
    struct store_plan_audit a;

    memset(&a, 0, sizeof(a));
    snprintf(a.request_hash, sizeof(a.request_hash), "h%06d", i);
    snprintf(a.algorithm, sizeof(a.algorithm), "neuroshard");
    a.ntables = 1 + i % 50;
    a.ndevices = 8;
    a.plan_cost_ms = i;
    snprintf(json, cap, PLAN_PREFIX "%d}", i);
    a.plan_json = json;
    return a;
}

/* Records in the file, as a reader of its own sees them. */
static size_t count_in_file(void)
{
    struct store *st = NULL;
    struct store_plan_audit *a = NULL;
    struct sd_diag d;
    size_t n = 0;

    if (store_open(db, STORE_OPEN_READONLY, &st, &d) != 0)
        return (size_t)-1;
    if (store_plan_audit_list(st, 0, &a, &n, &d) != 0)
        n = (size_t)-1;
    free(a);
    store_close(st);
    return n;
}

struct putter {
    struct audit *au;
    int first;
};

static void *put_many(void *arg)
{
    struct putter *p = arg;
    char json[64];
    int i;

    for (i = 0; i < PER_THREAD; i++) {
        struct store_plan_audit a = record(p->first + i, json, sizeof(json));

        audit_put(p->au, &a, strdup(json));
    }
    return NULL;
}

static void test_threads_and_sync(void)
{
    struct audit au;
    struct putter p[THREADS];
    pthread_t t[THREADS];
    struct store_plan_audit *got = NULL;
    struct store *st = NULL;
    struct sd_diag d;
    int k;

    CHECK(audit_init(&au, db) == 0);
    CHECK(audit_start(&au, &d) == 0);
    for (k = 0; k < THREADS; k++) {
        p[k] = (struct putter){&au, k * PER_THREAD};
        pthread_create(&t[k], NULL, put_many, &p[k]);
    }
    for (k = 0; k < THREADS; k++)
        pthread_join(t[k], NULL);
    audit_sync(&au);
    /* The queue holds 1,024: 800 from 4 threads fit even unwritten. */
    CHECK(atomic_load(&au.written) == THREADS * PER_THREAD);
    CHECK(atomic_load(&au.dropped) == 0);
    CHECK(count_in_file() == THREADS * PER_THREAD);
    /* A record's plan survives the copy. */
    CHECK(store_open(db, STORE_OPEN_READONLY, &st, &d) == 0);
    if (st != NULL) {
        CHECK(store_plan_audit_get(st, 1, &got, &d) == 0);
        CHECK(got != NULL &&
              strncmp(got->plan_json, PLAN_PREFIX, strlen(PLAN_PREFIX)) == 0);
        free(got);
        store_close(st);
    }
    audit_destroy(&au);
}

/* Queued records and no sync: the stop writes them. */
static void test_stop_drains(void)
{
    struct audit au;
    struct sd_diag d;
    char json[64];
    size_t before = count_in_file();
    int i;

    CHECK(audit_init(&au, db) == 0);
    CHECK(audit_start(&au, &d) == 0);
    for (i = 0; i < 300; i++) {
        struct store_plan_audit a = record(10000 + i, json, sizeof(json));

        audit_put(&au, &a, strdup(json));
    }
    audit_destroy(&au);
    CHECK(count_in_file() == before + 300);
}

/* Never started: the queue fills at AUDIT_QUEUE_MAX, the rest is counted
 * dropped, and destroy frees what waited (ASan: no leak). */
static void test_full_queue(void)
{
    struct audit au;
    char json[64];
    int i;

    CHECK(audit_init(&au, db) == 0);
    for (i = 0; i < AUDIT_QUEUE_MAX + 7; i++) {
        struct store_plan_audit a = record(i, json, sizeof(json));

        audit_put(&au, &a, strdup(json));
    }
    CHECK(atomic_load(&au.dropped) == 7);
    audit_sync(&au); /* no thread: returns at once */
    audit_destroy(&au);
}

/* A record the store refuses (no algorithm) fails its batch; the writer
 * goes on with the next one. */
static void test_store_refuses(void)
{
    struct audit au;
    struct store_plan_audit a;
    struct sd_diag d;
    char json[64];
    size_t before = count_in_file();

    CHECK(audit_init(&au, db) == 0);
    CHECK(audit_start(&au, &d) == 0);
    a = record(1, json, sizeof(json));
    a.algorithm[0] = '\0';
    audit_put(&au, &a, strdup(json));
    audit_sync(&au);
    CHECK(atomic_load(&au.dropped) == 1 && atomic_load(&au.written) == 0);
    a = record(2, json, sizeof(json));
    audit_put(&au, &a, strdup(json));
    audit_sync(&au);
    CHECK(atomic_load(&au.written) == 1);
    audit_destroy(&au);
    CHECK(count_in_file() == before + 1);
}

int main(void)
{
    char cmd[128];
    int rv;

    if (mkdtemp(dir) == NULL)
        return 1;
    snprintf(db, sizeof(db), "%s/shardd.db", dir);
    test_threads_and_sync();
    test_stop_drains();
    test_full_queue();
    test_store_refuses();
    rv = tap_done();
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return rv;
}
