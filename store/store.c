/*
 * The shardd store (store.h): the SQLite schema and its migrations, the
 * prepared-statement cache, the mapping of SQLite errors to SD_E* codes, and
 * the typed reads and writes of profiles, samples, models, jobs and plan
 * audit records.  The only file in shardd that includes <sqlite3.h>.
 */
#include "store.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

/* ------------------------------------------------------------------------ */
/* Schema                                                                    */

/*
 * migrations[v - 1] takes a database from schema version v - 1 to v.  Each
 * runs in one transaction together with its PRAGMA user_version bump, so a
 * crash leaves the database at v - 1 or v, never in between.  Append new
 * steps here and bump STORE_SCHEMA_VERSION; never edit a released step.
 *
 * Booleans and enums are CHECKed so that a row written by hand with the
 * sqlite3 shell cannot hold a value the decoder does not know.
 */
static const char *const migrations[] = {
    /* 1: the first schema. */
    "PRAGMA application_id = 1396986708;\n" /* STORE_APPLICATION_ID */
    "CREATE TABLE profiles (\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  name TEXT NOT NULL UNIQUE CHECK (name <> ''),\n"
    "  backend TEXT NOT NULL CHECK (backend <> ''),\n"
    "  device_model TEXT NOT NULL CHECK (device_model <> ''),\n"
    "  batch_size INTEGER NOT NULL CHECK (batch_size >= 1),\n"
    "  created_ms INTEGER NOT NULL\n"
    ");\n"
    /* shard: 160-byte table records; devices: 32-byte device records. */
    "CREATE TABLE samples (\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  profile_id INTEGER NOT NULL REFERENCES profiles (id),\n"
    "  kind TEXT NOT NULL CHECK (kind IN ('compute', 'comm')),\n"
    "  ntables INTEGER NOT NULL,\n"
    "  shard BLOB,\n"
    "  ndevices INTEGER NOT NULL,\n"
    "  devices BLOB,\n"
    "  measured_ms REAL NOT NULL CHECK (measured_ms >= 0),\n"
    "  spread_ms REAL NOT NULL CHECK (spread_ms >= 0),\n"
    "  device TEXT NOT NULL,\n"
    "  source TEXT NOT NULL,\n"
    "  created_ms INTEGER NOT NULL,\n"
    "  CHECK ((kind = 'compute' AND ntables >= 1\n"
    "          AND length(shard) = 160 * ntables\n"
    "          AND ndevices = 0 AND devices IS NULL)\n"
    "      OR (kind = 'comm' AND ntables = 0 AND shard IS NULL\n"
    "          AND ndevices >= 2 AND length(devices) = 32 * ndevices))\n"
    ");\n"
    "CREATE INDEX samples_by_profile ON samples (profile_id, kind, id);\n"
    /* AUTOINCREMENT: a version id is never reused, even after a delete. */
    "CREATE TABLE models (\n"
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
    "  profile_id INTEGER NOT NULL REFERENCES profiles (id),\n"
    "  kind TEXT NOT NULL CHECK (kind IN ('compute', 'comm')),\n"
    "  format_version INTEGER NOT NULL CHECK (format_version >= 1),\n"
    "  weights BLOB NOT NULL,\n"
    "  norm BLOB NOT NULL,\n"
    "  val_mape REAL NOT NULL,\n"
    "  test_mape REAL NOT NULL,\n"
    "  train_samples INTEGER NOT NULL,\n"
    "  val_samples INTEGER NOT NULL,\n"
    "  test_samples INTEGER NOT NULL,\n"
    "  created_ms INTEGER NOT NULL,\n"
    "  active INTEGER NOT NULL DEFAULT 0 CHECK (active IN (0, 1))\n"
    ");\n"
    "CREATE UNIQUE INDEX models_one_active ON models (profile_id, kind)\n"
    "  WHERE active = 1;\n"
    "CREATE INDEX models_by_time ON models (created_ms);\n"
    "CREATE TABLE jobs (\n"
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
    "  kind TEXT NOT NULL CHECK (kind IN ('retrain')),\n"
    "  state TEXT NOT NULL CHECK (state IN ('queued', 'running',\n"
    "    'succeeded', 'failed', 'cancelled')),\n"
    "  progress REAL NOT NULL CHECK (progress BETWEEN 0 AND 1),\n"
    "  message TEXT NOT NULL,\n"
    "  profile_id INTEGER REFERENCES profiles (id),\n"
    "  params TEXT NOT NULL,\n"
    "  result_model_id INTEGER REFERENCES models (id),\n"
    "  created_ms INTEGER NOT NULL,\n"
    "  started_ms INTEGER NOT NULL DEFAULT 0,\n"
    "  finished_ms INTEGER NOT NULL DEFAULT 0\n"
    ");\n"
    "CREATE INDEX jobs_by_state ON jobs (state);\n"
    "CREATE TABLE plan_audit (\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  request_hash TEXT NOT NULL CHECK (request_hash <> ''),\n"
    "  algorithm TEXT NOT NULL CHECK (algorithm <> ''),\n"
    "  model_id INTEGER REFERENCES models (id),\n"
    "  ntables INTEGER NOT NULL CHECK (ntables >= 1),\n"
    "  ndevices INTEGER NOT NULL CHECK (ndevices >= 1),\n"
    "  plan_cost_ms REAL NOT NULL CHECK (plan_cost_ms >= 0),\n"
    "  created_ms INTEGER NOT NULL,\n"
    "  plan TEXT NOT NULL CHECK (plan <> '')\n"
    ");\n"
    "CREATE INDEX plan_audit_by_time ON plan_audit (created_ms);\n"
    "CREATE INDEX plan_audit_by_hash ON plan_audit (request_hash);\n",
};

_Static_assert(sizeof(migrations) / sizeof(migrations[0]) ==
                   STORE_SCHEMA_VERSION,
               "one migration per schema version");

/* Bytes of one encoded table and one encoded comm device. */
#define TABLE_REC  (8 + 4 + 4 + 8 + 8 * TABLE_NBINS)
#define DEVICE_REC 32

_Static_assert(TABLE_REC == 160, "schema CHECK says 160");

/* ------------------------------------------------------------------------ */
/* Prepared statements                                                       */

enum stmt {
    STMT_BEGIN,
    STMT_COMMIT,
    STMT_ROLLBACK,
    STMT_PROFILE_GET,
    STMT_PROFILE_INSERT,
    STMT_PROFILE_LIST,
    STMT_SAMPLE_INSERT,
    STMT_SAMPLE_COUNT,
    STMT_SAMPLE_LOAD,
    STMT_SAMPLE_NEWEST,
    STMT_MODEL_INSERT,
    STMT_MODEL_GET,
    STMT_MODEL_GET_ACTIVE,
    STMT_MODEL_KEY,
    STMT_MODEL_ACTIVE_ID,
    STMT_MODEL_DEACTIVATE,
    STMT_MODEL_SET_ACTIVE,
    STMT_MODEL_LIST,
    STMT_JOB_INSERT,
    STMT_JOB_GET,
    STMT_JOB_FIND_OPEN,
    STMT_JOB_LIST,
    STMT_JOB_COUNT,
    STMT_JOB_UPDATE,
    STMT_JOB_STATE,
    STMT_JOB_CANCEL_UNFINISHED,
    STMT_AUDIT_INSERT,
    STMT_AUDIT_GET,
    STMT_AUDIT_PRUNE,
    STMT_AUDIT_TRIM,
    STMT_COUNT
};

/* Column lists shared by several statements; read by model_row()/job_row(). */
#define MODEL_COLS                                                             \
    "m.id, m.profile_id, p.name, m.kind, m.format_version, m.val_mape, "       \
    "m.test_mape, m.train_samples, m.val_samples, m.test_samples, "            \
    "length(m.weights), length(m.norm), m.created_ms, m.active"
#define MODEL_NCOLS 14
#define MODEL_FROM  " FROM models m JOIN profiles p ON p.id = m.profile_id"
#define JOB_SELECT                                                             \
    "SELECT j.id, j.kind, j.state, j.progress, j.message, j.profile_id, "      \
    "p.name, j.params, j.result_model_id, j.created_ms, j.started_ms, "        \
    "j.finished_ms FROM jobs j LEFT JOIN profiles p ON p.id = j.profile_id"
#define JOB_TERMINAL "('succeeded', 'failed', 'cancelled')"

static const char *const stmt_sql[STMT_COUNT] = {
    /* IMMEDIATE takes the write lock now, so a transaction never fails
     * half-way for want of it (no read-to-write upgrade deadlock). */
    [STMT_BEGIN] = "BEGIN IMMEDIATE",
    [STMT_COMMIT] = "COMMIT",
    [STMT_ROLLBACK] = "ROLLBACK",
    [STMT_PROFILE_GET] = "SELECT id, name, backend, device_model, batch_size, "
                         "created_ms FROM profiles WHERE name = ?1",
    [STMT_PROFILE_LIST] = "SELECT id, name, backend, device_model, batch_size, "
                          "created_ms FROM profiles ORDER BY id",
    [STMT_PROFILE_INSERT] = "INSERT INTO profiles (name, backend, "
                            "device_model, batch_size, created_ms) "
                            "VALUES (?1, ?2, ?3, ?4, ?5)",
    [STMT_SAMPLE_INSERT] = "INSERT INTO samples (profile_id, kind, ntables, "
                           "shard, ndevices, devices, measured_ms, spread_ms, "
                           "device, source, created_ms) VALUES (?1, ?2, ?3, "
                           "?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    [STMT_SAMPLE_COUNT] = "SELECT count(*) FROM samples WHERE profile_id = ?1 "
                          "AND kind = ?2 AND created_ms > ?3",
    [STMT_SAMPLE_LOAD] = "SELECT id, ntables, shard, ndevices, devices, "
                         "measured_ms, spread_ms, device, source, created_ms "
                         "FROM samples WHERE profile_id = ?1 AND kind = ?2 "
                         "AND id > ?3 ORDER BY id LIMIT ?4",
    /* The id just before the newest ?3 samples (samples_by_profile). */
    [STMT_SAMPLE_NEWEST] = "SELECT id FROM samples WHERE profile_id = ?1 "
                           "AND kind = ?2 ORDER BY id DESC LIMIT 1 OFFSET ?3",
    [STMT_MODEL_INSERT] = "INSERT INTO models (profile_id, kind, "
                          "format_version, weights, norm, val_mape, "
                          "test_mape, train_samples, val_samples, "
                          "test_samples, created_ms, active) VALUES (?1, ?2, "
                          "?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 0)",
    [STMT_MODEL_GET] = "SELECT " MODEL_COLS ", m.weights, m.norm" MODEL_FROM
                       " WHERE m.id = ?1",
    [STMT_MODEL_GET_ACTIVE] =
        "SELECT " MODEL_COLS ", m.weights, m.norm" MODEL_FROM
        " WHERE m.profile_id = ?1 AND m.kind = ?2 "
        "AND m.active = 1",
    [STMT_MODEL_KEY] = "SELECT profile_id, kind FROM models WHERE id = ?1",
    [STMT_MODEL_ACTIVE_ID] = "SELECT id FROM models WHERE profile_id = ?1 "
                             "AND kind = ?2 AND active = 1",
    [STMT_MODEL_DEACTIVATE] = "UPDATE models SET active = 0 WHERE "
                              "profile_id = ?1 AND kind = ?2 AND active = 1",
    [STMT_MODEL_SET_ACTIVE] = "UPDATE models SET active = 1 WHERE id = ?1",
    [STMT_MODEL_LIST] =
        "SELECT " MODEL_COLS MODEL_FROM " WHERE ?1 = 0 OR m.profile_id = ?1 "
        "ORDER BY m.created_ms DESC, m.id DESC LIMIT ?2",
    [STMT_JOB_INSERT] = "INSERT INTO jobs (kind, state, progress, message, "
                        "profile_id, params, created_ms) VALUES (?1, "
                        "'queued', 0, ?2, ?3, ?4, ?5)",
    [STMT_JOB_GET] = JOB_SELECT " WHERE j.id = ?1",
    [STMT_JOB_FIND_OPEN] =
        JOB_SELECT " WHERE j.kind = ?1 AND j.profile_id IS ?2 AND j.state IN "
                   "('queued', 'running') ORDER BY j.id LIMIT 1",
    [STMT_JOB_LIST] = JOB_SELECT " ORDER BY j.id DESC LIMIT ?1",
    [STMT_JOB_COUNT] = "SELECT count(*) FROM jobs WHERE state = ?1",
    /* Terminal states are final: the WHERE clause refuses to leave one. */
    [STMT_JOB_UPDATE] =
        "UPDATE jobs SET state = ?2, progress = ?3, "
        "message = coalesce(?4, message), "
        "result_model_id = coalesce(?5, result_model_id), "
        "started_ms = CASE WHEN ?2 = 'running' AND started_ms = 0 "
        "THEN ?6 ELSE started_ms END, "
        "finished_ms = CASE WHEN ?2 IN " JOB_TERMINAL " THEN ?6 ELSE 0 END "
        "WHERE id = ?1 AND state NOT IN " JOB_TERMINAL,
    [STMT_JOB_STATE] = "SELECT state FROM jobs WHERE id = ?1",
    [STMT_JOB_CANCEL_UNFINISHED] =
        "UPDATE jobs SET state = 'cancelled', message = ?1, "
        "finished_ms = ?2 WHERE state NOT IN " JOB_TERMINAL,
    [STMT_AUDIT_INSERT] = "INSERT INTO plan_audit (request_hash, algorithm, "
                          "model_id, ntables, ndevices, plan_cost_ms, "
                          "created_ms, plan) VALUES (?1, ?2, ?3, ?4, ?5, ?6, "
                          "?7, ?8)",
    [STMT_AUDIT_GET] = "SELECT id, request_hash, algorithm, model_id, "
                       "ntables, ndevices, plan_cost_ms, created_ms, plan "
                       "FROM plan_audit WHERE id = ?1",
    [STMT_AUDIT_PRUNE] = "DELETE FROM plan_audit WHERE created_ms < ?1",
    [STMT_AUDIT_TRIM] = "DELETE FROM plan_audit WHERE id <= (SELECT id FROM "
                        "plan_audit ORDER BY id DESC LIMIT 1 OFFSET ?1)",
};

struct store {
    sqlite3 *db;
    bool in_batch;                  /* a sample batch transaction is open */
    sqlite3_stmt *stmt[STMT_COUNT]; /* prepared on first use */
};

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Maps a SQLite result code to an SD_E* code, once for the whole module, and
 * puts SQLite's message into d.  `what` names the operation.
 */
static int sql_err(struct store *st, int rc, struct sd_diag *d,
                   const char *what)
{
    const char *msg =
        st->db != NULL ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc);
    int err;

    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        err = SD_EBUSY;
        break;
    case SQLITE_CONSTRAINT:
        err = SD_EINVAL;
        break;
    case SQLITE_NOMEM:
        err = SD_ENOMEM;
        break;
    case SQLITE_NOTADB:
        err = SD_EFORMAT;
        break;
    default:
        err = SD_ESTORE;
        break;
    }
    if (rc == SQLITE_CONSTRAINT_FOREIGNKEY)
        return sd_diag_set(d, err,
                           "store: %s: %s (an id it refers to does "
                           "not exist)",
                           what, msg);
    return sd_diag_set(d, err, "store: %s: %s", what, msg);
}

/* The cached statement `id`, prepared on first use. */
static int stmt_get(struct store *st, enum stmt id, sqlite3_stmt **out,
                    struct sd_diag *d)
{
    int rc;

    if (st->stmt[id] == NULL) {
        rc = sqlite3_prepare_v3(st->db, stmt_sql[id], -1,
                                SQLITE_PREPARE_PERSISTENT, &st->stmt[id], NULL);
        if (rc != SQLITE_OK)
            return sql_err(st, rc, d, "preparing a statement");
    }
    *out = st->stmt[id];
    return 0;
}

/* Makes a cached statement ready for its next use.  NULL-safe. */
static void stmt_done(sqlite3_stmt *s)
{
    if (s != NULL) {
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
    }
}

/*
 * Steps s once: returns 1 for a row, 0 when done, or a mapped error.  A bind
 * that failed earlier (bad = true) is reported here, so that callers bind a
 * whole row and check once.
 */
static int step(struct store *st, sqlite3_stmt *s, bool bad, const char *what,
                struct sd_diag *d)
{
    int rc;

    if (bad) {
        rc = sqlite3_errcode(st->db);
        return sql_err(st, rc != SQLITE_OK ? rc : SQLITE_ERROR, d, what);
    }
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        return 1;
    if (rc == SQLITE_DONE)
        return 0;
    return sql_err(st, rc, d, what);
}

/* Runs a cached statement that takes no parameters and returns no rows. */
static int exec_stmt(struct store *st, enum stmt id, const char *what,
                     struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    int rv;

    rv = stmt_get(st, id, &s, d);
    if (rv == 0)
        rv = step(st, s, false, what, d);
    stmt_done(s);
    return rv;
}

static int tx_begin(struct store *st, struct sd_diag *d)
{
    return exec_stmt(st, STMT_BEGIN, "begin", d);
}

/* Rolls back the open transaction, if SQLite has not already done so. */
static void tx_rollback(struct store *st)
{
    if (!sqlite3_get_autocommit(st->db))
        exec_stmt(st, STMT_ROLLBACK, "rollback", NULL);
}

/* Commits; on failure the transaction is rolled back, never left open. */
static int tx_commit(struct store *st, struct sd_diag *d)
{
    int rv;

    rv = exec_stmt(st, STMT_COMMIT, "commit", d);
    if (rv != 0)
        tx_rollback(st);
    return rv;
}

/* Writes other than store_sample_add() are refused inside a sample batch. */
static int check_no_batch(struct store *st, struct sd_diag *d)
{
    if (st->in_batch)
        return sd_diag_set(d, SD_EINVAL,
                           "store: a sample batch is open on this handle; "
                           "commit or abort it first");
    return 0;
}

/*
 * Checks a fixed-size text field: NUL-terminated within `size` bytes, and
 * non-empty when asked.  `field` names it in the message.
 */
static int check_text(const char *s, size_t size, bool nonempty,
                      const char *who, const char *field, struct sd_diag *d)
{
    if (s == NULL)
        return sd_diag_set(d, SD_EINVAL, "%s: %s is missing", who, field);
    if (memchr(s, '\0', size) == NULL)
        return sd_diag_set(d, SD_EINVAL, "%s: %s is longer than %zu bytes", who,
                           field, size - 1);
    if (nonempty && s[0] == '\0')
        return sd_diag_set(d, SD_EINVAL, "%s: %s is empty", who, field);
    return 0;
}

static int check_ms(double v, const char *who, const char *field,
                    struct sd_diag *d)
{
    if (!isfinite(v) || v < 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: %s %g is not a finite number >= 0", who, field,
                           v);
    return 0;
}

static int check_id(int64_t id, bool optional, const char *who,
                    const char *field, struct sd_diag *d)
{
    if (id < (optional ? 0 : 1))
        return sd_diag_set(d, SD_EINVAL, "%s: %s %lld is not a valid id", who,
                           field, (long long)id);
    return 0;
}

static bool kind_is_valid(enum store_kind kind)
{
    return kind == STORE_KIND_COMPUTE || kind == STORE_KIND_COMM;
}

/* Parses a kind column; false for anything the schema should have refused. */
static bool kind_parse(const unsigned char *s, enum store_kind *out)
{
    if (s != NULL && strcmp((const char *)s, "compute") == 0) {
        *out = STORE_KIND_COMPUTE;
        return true;
    }
    if (s != NULL && strcmp((const char *)s, "comm") == 0) {
        *out = STORE_KIND_COMM;
        return true;
    }
    return false;
}

/* Copies text column i into a fixed field, "" for NULL. */
static void col_text(sqlite3_stmt *s, int i, char *dst, size_t size)
{
    const unsigned char *t = sqlite3_column_text(s, i);

    snprintf(dst, size, "%s", t != NULL ? (const char *)t : "");
}

/* Binds id as an integer, or NULL when it is 0 (an optional reference). */
static int bind_id_or_null(sqlite3_stmt *s, int i, int64_t id)
{
    return id != 0 ? sqlite3_bind_int64(s, i, id) : sqlite3_bind_null(s, i);
}

/* LIMIT argument: 0 means no limit, which SQLite spells -1. */
static sqlite3_int64 sql_limit(size_t limit)
{
    return limit == 0 || limit > (size_t)INT64_MAX ? -1 : (sqlite3_int64)limit;
}

/*
 * Returns arr (of *cap elements of `size` bytes) grown to hold at least
 * n + 1, or NULL when out of memory, arr then being unchanged.
 */
static void *grow(void *arr, size_t *cap, size_t n, size_t size)
{
    size_t ncap;
    void *p;

    if (n < *cap)
        return arr;
    ncap = *cap == 0 ? 16 : *cap * 2;
    if (ncap > SIZE_MAX / size)
        return NULL;
    p = realloc(arr, ncap * size);
    if (p != NULL)
        *cap = ncap;
    return p;
}

/* Decodes the current row of s into *row (a typed struct behind void *). */
typedef int (*row_decode_fn)(sqlite3_stmt *s, void *row, struct sd_diag *d);

/*
 * Steps s to the end, decoding every row with fn into a new array of
 * `size`-byte elements; resets s.  On success *out (NULL when there are no
 * rows; owned by the caller) and *n are set; on failure they are untouched.
 */
static int collect_rows(struct store *st, sqlite3_stmt *s, bool bad,
                        const char *what, size_t size, row_decode_fn fn,
                        void **out, size_t *n, struct sd_diag *d)
{
    size_t cap = 0, len = 0;
    char *arr = NULL;
    void *p;
    int rv;

    for (;;) {
        rv = step(st, s, bad, what, d);
        if (rv <= 0)
            break;
        p = grow(arr, &cap, len, size);
        if (p == NULL) {
            rv = sd_diag_set(d, SD_ENOMEM, "store: out of memory");
            break;
        }
        arr = p;
        rv = fn(s, arr + len * size, d);
        if (rv != 0)
            break;
        len++;
    }
    stmt_done(s);
    if (rv != 0 || len == 0) {
        free(arr);
        arr = NULL;
    }
    if (rv != 0)
        return rv;
    *out = arr;
    *n = len;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Little-endian encoding of sample blobs                                    */

static void put_u32(unsigned char *p, uint32_t v)
{
    int i;

    for (i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    int i;

    for (i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_f64(unsigned char *p, double v)
{
    uint64_t u;

    memcpy(&u, &v, sizeof(u));
    put_u64(p, u);
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    int i;

    for (i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    int i;

    for (i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static double get_f64(const unsigned char *p)
{
    uint64_t u = get_u64(p);
    double v;

    memcpy(&v, &u, sizeof(v));
    return v;
}

static void encode_table(unsigned char *p, const struct table *t)
{
    int k;

    put_u64(p, (uint64_t)t->rows);
    put_u32(p + 8, (uint32_t)t->dim);
    put_u32(p + 12, (uint32_t)t->dtype);
    put_f64(p + 16, t->pooling_factor);
    for (k = 0; k < TABLE_NBINS; k++)
        put_f64(p + 24 + 8 * k, t->bins[k]);
}

static void decode_table(const unsigned char *p, size_t i, struct table *t)
{
    int k;

    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "t%zu", i);
    t->rows = (int64_t)get_u64(p);
    t->dim = (int32_t)get_u32(p + 8);
    t->dtype = (enum table_dtype)get_u32(p + 12);
    t->pooling_factor = get_f64(p + 16);
    for (k = 0; k < TABLE_NBINS; k++)
        t->bins[k] = get_f64(p + 24 + 8 * k);
}

static void encode_device(unsigned char *p, const struct store_comm_device *c)
{
    put_u32(p, (uint32_t)c->dim_sum);
    put_u32(p + 4, 0);
    put_f64(p + 8, c->sleep_ms);
    put_f64(p + 16, c->fwd_ms);
    put_f64(p + 24, c->bwd_ms);
}

static void decode_device(const unsigned char *p, struct store_comm_device *c)
{
    c->dim_sum = (int32_t)get_u32(p);
    c->sleep_ms = get_f64(p + 8);
    c->fwd_ms = get_f64(p + 16);
    c->bwd_ms = get_f64(p + 24);
}

/* ------------------------------------------------------------------------ */
/* Opening, migrating, closing                                               */

/* Runs a one-row, one-integer query such as "PRAGMA user_version". */
static int query_int(struct store *st, const char *sql, int64_t *out,
                     struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    int rc, rv;

    rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
    if (rc != SQLITE_OK)
        return sql_err(st, rc, d, sql);
    rv = step(st, s, false, sql, d);
    if (rv == 1) {
        *out = sqlite3_column_int64(s, 0);
        rv = 0;
    } else if (rv == 0) {
        rv = sd_diag_set(d, SD_ESTORE, "store: %s returned no row", sql);
    }
    sqlite3_finalize(s);
    return rv;
}

/* Runs SQL without results (pragmas, migrations). */
static int exec_sql(struct store *st, const char *sql, const char *what,
                    struct sd_diag *d)
{
    int rc;

    rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return sql_err(st, rc, d, what);
    return 0;
}

/*
 * Refuses a database that is not shardd's or is newer than this build, before
 * anything is written to it, and sets *version.
 */
static int check_version(struct store *st, const char *path, int64_t *version,
                         struct sd_diag *d)
{
    int64_t app, uv, nobjects;
    int rv;

    rv = query_int(st, "PRAGMA application_id", &app, d);
    if (rv != 0)
        return rv;
    rv = query_int(st, "PRAGMA user_version", &uv, d);
    if (rv != 0)
        return rv;
    if (app != 0 && app != STORE_APPLICATION_ID)
        return sd_diag_set(d, SD_EFORMAT,
                           "store: %s is not a shardd database "
                           "(application_id %#llx)",
                           path, (unsigned long long)app);
    if (uv > STORE_SCHEMA_VERSION)
        return sd_diag_set(d, SD_ENEWER,
                           "database schema version %lld is newer than this "
                           "shardd supports (%d); upgrade shardd",
                           (long long)uv, STORE_SCHEMA_VERSION);
    if (app == 0) {
        /* Version 0 must be an empty file, or we would add to a stranger's. */
        rv = query_int(st, "SELECT count(*) FROM sqlite_master", &nobjects, d);
        if (rv != 0)
            return rv;
        if (uv != 0 || nobjects != 0)
            return sd_diag_set(d, SD_EFORMAT,
                               "store: %s is not a shardd database (it has "
                               "contents but no shardd application_id)",
                               path);
    }
    *version = uv;
    return 0;
}

/* Applies the migrations after `from`, each in a transaction of its own. */
static int migrate(struct store *st, int64_t from, struct sd_diag *d)
{
    char sql[64], what[64];
    int64_t v, uv;
    int rv;

    for (v = from + 1; v <= STORE_SCHEMA_VERSION; v++) {
        snprintf(what, sizeof(what), "migrating to schema version %lld",
                 (long long)v);
        rv = exec_sql(st, "BEGIN IMMEDIATE", what, d);
        if (rv != 0)
            return rv;
        /* Another process may have migrated while we waited for the lock. */
        rv = query_int(st, "PRAGMA user_version", &uv, d);
        if (rv != 0)
            goto out_rollback;
        if (uv > STORE_SCHEMA_VERSION) {
            rv = sd_diag_set(d, SD_ENEWER,
                             "database schema version %lld is newer than "
                             "this shardd supports (%d); upgrade shardd",
                             (long long)uv, STORE_SCHEMA_VERSION);
            goto out_rollback;
        }
        if (uv < v) {
            rv = exec_sql(st, migrations[v - 1], what, d);
            if (rv != 0)
                goto out_rollback;
            snprintf(sql, sizeof(sql), "PRAGMA user_version = %lld",
                     (long long)v);
            rv = exec_sql(st, sql, what, d);
            if (rv != 0)
                goto out_rollback;
        }
        rv = exec_sql(st, "COMMIT", what, d);
        if (rv != 0)
            goto out_rollback;
    }
    return 0;

out_rollback:
    if (!sqlite3_get_autocommit(st->db))
        sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
    return rv;
}

/* Read-write set-up: WAL, durability, then the schema. */
static int setup_rw(struct store *st, unsigned flags, int64_t version,
                    struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    const unsigned char *mode;
    int rc, rv;

    rc = sqlite3_prepare_v2(st->db, "PRAGMA journal_mode = WAL", -1, &s, NULL);
    if (rc != SQLITE_OK)
        return sql_err(st, rc, d, "setting WAL mode");
    rv = step(st, s, false, "setting WAL mode", d);
    if (rv == 1) {
        /* ":memory:" databases stay in "memory" mode; files must do WAL. */
        mode = sqlite3_column_text(s, 0);
        rv = 0;
        if (mode == NULL || (strcmp((const char *)mode, "wal") != 0 &&
                             strcmp((const char *)mode, "memory") != 0))
            rv = sd_diag_set(d, SD_ESTORE, "store: cannot set WAL mode (%s)",
                             mode != NULL ? (const char *)mode : "?");
    }
    sqlite3_finalize(s);
    if (rv != 0)
        return rv;
    /*
     * In WAL mode NORMAL syncs only at checkpoints: a commit is in the WAL
     * (the OS's page cache) when COMMIT returns, so it survives the process
     * dying; FULL also syncs the WAL at every commit, for power loss.
     */
    rv = exec_sql(st,
                  (flags & STORE_OPEN_DURABLE) ? "PRAGMA synchronous = FULL"
                                               : "PRAGMA synchronous = NORMAL",
                  "setting synchronous", d);
    if (rv != 0)
        return rv;
    return migrate(st, version, d);
}

int store_open(const char *path, unsigned flags, struct store **out,
               struct sd_diag *d)
{
    struct store *st;
    int64_t version = 0;
    int oflags, rc, rv;

    if (path == NULL || path[0] == '\0')
        return sd_diag_set(d, SD_EINVAL, "store: path is empty");
    if (out == NULL)
        return sd_diag_set(d, SD_EINVAL, "store: out is NULL");
    if ((flags & ~(unsigned)(STORE_OPEN_READONLY | STORE_OPEN_DURABLE)) != 0)
        return sd_diag_set(d, SD_EINVAL, "store: unknown open flags %#x",
                           flags);
    st = calloc(1, sizeof(*st));
    if (st == NULL)
        return sd_diag_set(d, SD_ENOMEM, "store: out of memory");

    /* NOMUTEX: a handle is used by one thread at a time (store.h). */
    oflags = SQLITE_OPEN_NOMUTEX |
             ((flags & STORE_OPEN_READONLY)
                  ? SQLITE_OPEN_READONLY
                  : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    rc = sqlite3_open_v2(path, &st->db, oflags, NULL);
    if (rc != SQLITE_OK) {
        if ((rc & 0xff) == SQLITE_CANTOPEN && (flags & STORE_OPEN_READONLY))
            rv = sd_diag_set(d, SD_ENOENT, "store: no database at %s", path);
        else
            rv = sql_err(st, rc, d, path);
        goto out_close;
    }
    sqlite3_extended_result_codes(st->db, 1);
    sqlite3_busy_timeout(st->db, STORE_BUSY_TIMEOUT_MS);

    rv = check_version(st, path, &version, d);
    if (rv != 0)
        goto out_close;
    if (flags & STORE_OPEN_READONLY) {
        if (version != STORE_SCHEMA_VERSION) {
            rv = sd_diag_set(d, SD_ESTORE,
                             "store: %s has schema version %lld, older than "
                             "this shardd's (%d); open it read-write once "
                             "to migrate it",
                             path, (long long)version, STORE_SCHEMA_VERSION);
            goto out_close;
        }
    } else {
        rv = setup_rw(st, flags, version, d);
        if (rv != 0)
            goto out_close;
    }
    rv = exec_sql(st, "PRAGMA foreign_keys = ON", "enabling foreign keys", d);
    if (rv != 0)
        goto out_close;
    *out = st;
    return 0;

out_close:
    sqlite3_close(st->db); /* NULL-safe */
    free(st);
    return rv;
}

void store_close(struct store *st)
{
    size_t i;

    if (st == NULL)
        return;
    if (st->in_batch)
        tx_rollback(st);
    for (i = 0; i < STMT_COUNT; i++)
        sqlite3_finalize(st->stmt[i]); /* NULL-safe */
    sqlite3_close(st->db);
    free(st);
}

/* Runs a checking pragma whose rows are problems ("ok" meaning none). */
static int check_pragma(struct store *st, const char *sql, struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    const unsigned char *first;
    int rc, rv;

    rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
    if (rc != SQLITE_OK)
        return sql_err(st, rc, d, sql);
    rv = step(st, s, false, sql, d);
    if (rv == 1) {
        /* integrity_check: one text column; foreign_key_check: table name. */
        first = sqlite3_column_text(s, 0);
        if (first != NULL && strcmp((const char *)first, "ok") == 0)
            rv = 0;
        else
            rv = sd_diag_set(d, SD_ESTORE, "store: %s: %s", sql,
                             first != NULL ? (const char *)first : "?");
    }
    sqlite3_finalize(s);
    return rv;
}

int store_integrity_check(struct store *st, struct sd_diag *d)
{
    int rv;

    rv = check_pragma(st, "PRAGMA integrity_check", d);
    if (rv == 0)
        rv = check_pragma(st, "PRAGMA foreign_key_check", d);
    return rv;
}

/* ------------------------------------------------------------------------ */
/* Profiles                                                                  */

static int check_profile(const struct store_profile *p, struct sd_diag *d)
{
    int rv;

    if (p == NULL)
        return sd_diag_set(d, SD_EINVAL, "profile: missing");
    rv = check_text(p->name, sizeof(p->name), true, "profile", "name", d);
    if (rv == 0)
        rv = check_text(p->backend, sizeof(p->backend), true, "profile",
                        "backend", d);
    if (rv == 0)
        rv = check_text(p->device_model, sizeof(p->device_model), true,
                        "profile", "device_model", d);
    if (rv == 0 && p->batch_size < 1)
        rv = sd_diag_set(d, SD_EINVAL, "profile \"%s\": batch_size %lld < 1",
                         p->name, (long long)p->batch_size);
    return rv;
}

/* The current row of STMT_PROFILE_GET or _LIST; for collect_rows() too. */
static int profile_row(sqlite3_stmt *s, void *row, struct sd_diag *d)
{
    struct store_profile *p = row;

    (void)d;
    p->id = sqlite3_column_int64(s, 0);
    col_text(s, 1, p->name, sizeof(p->name));
    col_text(s, 2, p->backend, sizeof(p->backend));
    col_text(s, 3, p->device_model, sizeof(p->device_model));
    p->batch_size = sqlite3_column_int64(s, 4);
    p->created_ms = sqlite3_column_int64(s, 5);
    return 0;
}

/* Reads a profile row into *p; returns 1 found, 0 none, or an error. */
static int profile_lookup(struct store *st, const char *name,
                          struct store_profile *p, struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    int rv;

    rv = stmt_get(st, STMT_PROFILE_GET, &s, d);
    if (rv != 0)
        return rv;
    rv = step(st, s,
              sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC) != SQLITE_OK,
              "reading a profile", d);
    if (rv == 1)
        profile_row(s, p, d);
    stmt_done(s);
    return rv;
}

int store_profile_list(struct store *st, struct store_profile **out, size_t *n,
                       struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    void *arr;
    int rv;

    rv = stmt_get(st, STMT_PROFILE_LIST, &s, d);
    if (rv != 0)
        return rv;
    rv = collect_rows(st, s, false, "listing profiles", sizeof(**out),
                      profile_row, &arr, n, d);
    if (rv == 0)
        *out = arr;
    return rv;
}

int store_profile_get(struct store *st, const char *name,
                      struct store_profile *out, struct sd_diag *d)
{
    struct store_profile p;
    int rv;

    rv = check_text(name, STORE_NAME_MAX, true, "profile", "name", d);
    if (rv != 0)
        return rv;
    rv = profile_lookup(st, name, &p, d);
    if (rv == 0)
        return sd_diag_set(d, SD_ENOENT, "profile \"%s\": no such profile",
                           name);
    if (rv < 0)
        return rv;
    *out = p;
    return 0;
}

int store_profile_get_or_create(struct store *st, const struct store_profile *p,
                                int64_t *id, struct sd_diag *d)
{
    struct store_profile old;
    sqlite3_stmt *s = NULL;
    bool bad = false;
    int rv;

    rv = check_profile(p, d);
    if (rv == 0)
        rv = check_no_batch(st, d);
    if (rv != 0)
        return rv;
    /* One transaction, so two creators of one profile agree on its id. */
    rv = tx_begin(st, d);
    if (rv != 0)
        return rv;
    rv = profile_lookup(st, p->name, &old, d);
    if (rv < 0)
        goto out_rollback;
    if (rv == 1) {
        if (strcmp(old.backend, p->backend) != 0 ||
            strcmp(old.device_model, p->device_model) != 0 ||
            old.batch_size != p->batch_size) {
            rv = sd_diag_set(d, SD_EINVAL,
                             "profile \"%s\" exists with backend %s, device "
                             "model \"%s\", batch size %lld",
                             old.name, old.backend, old.device_model,
                             (long long)old.batch_size);
            goto out_rollback;
        }
    } else {
        rv = stmt_get(st, STMT_PROFILE_INSERT, &s, d);
        if (rv != 0)
            goto out_rollback;
        bad |= sqlite3_bind_text(s, 1, p->name, -1, SQLITE_STATIC);
        bad |= sqlite3_bind_text(s, 2, p->backend, -1, SQLITE_STATIC);
        bad |= sqlite3_bind_text(s, 3, p->device_model, -1, SQLITE_STATIC);
        bad |= sqlite3_bind_int64(s, 4, p->batch_size);
        bad |= sqlite3_bind_int64(s, 5, now_ms());
        rv = step(st, s, bad, "creating a profile", d);
        stmt_done(s);
        if (rv != 0)
            goto out_rollback;
        old.id = sqlite3_last_insert_rowid(st->db);
    }
    rv = tx_commit(st, d);
    if (rv != 0)
        return rv;
    if (id != NULL)
        *id = old.id;
    return 0;

out_rollback:
    tx_rollback(st);
    return rv;
}

/* ------------------------------------------------------------------------ */
/* Samples                                                                   */

const char *store_kind_name(enum store_kind kind)
{
    switch (kind) {
    case STORE_KIND_COMPUTE:
        return "compute";
    case STORE_KIND_COMM:
        return "comm";
    }
    return "?";
}

static int check_compute_sample(const struct store_sample *s, const char *who,
                                struct sd_diag *d)
{
    struct sd_diag td;
    size_t i;

    if (s->ntables < 1 || s->ntables > STORE_SAMPLE_TABLES_MAX)
        return sd_diag_set(d, SD_EINVAL, "%s: ntables %zu is not in [1, %d]",
                           who, s->ntables, STORE_SAMPLE_TABLES_MAX);
    if (s->tables == NULL)
        return sd_diag_set(d, SD_EINVAL, "%s: tables is NULL", who);
    if (s->ndevices != 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: a compute sample has no devices (ndevices "
                           "%zu)",
                           who, s->ndevices);
    for (i = 0; i < s->ntables; i++) {
        if (table_validate(&s->tables[i], i, &td) != 0)
            return sd_diag_set(d, SD_EINVAL, "%s: %s", who, td.msg);
    }
    return 0;
}

static int check_comm_sample(const struct store_sample *s, const char *who,
                             struct sd_diag *d)
{
    const struct store_comm_device *c;
    char field[48];
    size_t i;
    int rv = 0;

    if (s->ndevices < 2 || s->ndevices > STORE_SAMPLE_DEVICES_MAX)
        return sd_diag_set(d, SD_EINVAL, "%s: ndevices %zu is not in [2, %d]",
                           who, s->ndevices, STORE_SAMPLE_DEVICES_MAX);
    if (s->devices == NULL)
        return sd_diag_set(d, SD_EINVAL, "%s: devices is NULL", who);
    if (s->ntables != 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: a comm sample has no tables (ntables %zu)", who,
                           s->ntables);
    for (i = 0; i < s->ndevices && rv == 0; i++) {
        c = &s->devices[i];
        if (c->dim_sum < 0)
            return sd_diag_set(d, SD_EINVAL, "%s: devices[%zu]: dim_sum %d < 0",
                               who, i, (int)c->dim_sum);
        snprintf(field, sizeof(field), "devices[%zu].sleep_ms", i);
        rv = check_ms(c->sleep_ms, who, field, d);
        if (rv == 0) {
            snprintf(field, sizeof(field), "devices[%zu].fwd_ms", i);
            rv = check_ms(c->fwd_ms, who, field, d);
        }
        if (rv == 0) {
            snprintf(field, sizeof(field), "devices[%zu].bwd_ms", i);
            rv = check_ms(c->bwd_ms, who, field, d);
        }
    }
    return rv;
}

/* Checks every field of a sample; `who` names it in the message. */
static int check_sample(const struct store_sample *s, const char *who,
                        struct sd_diag *d)
{
    int rv;

    if (s == NULL)
        return sd_diag_set(d, SD_EINVAL, "%s: missing", who);
    rv = check_id(s->profile_id, false, who, "profile_id", d);
    if (rv != 0)
        return rv;
    if (s->kind == STORE_KIND_COMPUTE)
        rv = check_compute_sample(s, who, d);
    else if (s->kind == STORE_KIND_COMM)
        rv = check_comm_sample(s, who, d);
    else
        rv =
            sd_diag_set(d, SD_EINVAL, "%s: kind %d unknown", who, (int)s->kind);
    if (rv == 0)
        rv = check_ms(s->measured_ms, who, "measured_ms", d);
    if (rv == 0)
        rv = check_ms(s->spread_ms, who, "spread_ms", d);
    if (rv == 0)
        rv = check_text(s->device, sizeof(s->device), true, who, "device", d);
    if (rv == 0)
        rv = check_text(s->source, sizeof(s->source), true, who, "source", d);
    return rv;
}

/* Encodes and inserts one sample that check_sample() has accepted. */
static int sample_insert(struct store *st, const struct store_sample *s,
                         int64_t *id, struct sd_diag *d)
{
    unsigned char *blob = NULL;
    sqlite3_stmt *stmt = NULL;
    size_t i, nbytes;
    bool bad = false;
    int rv;

    nbytes = s->kind == STORE_KIND_COMPUTE ? s->ntables * TABLE_REC
                                           : s->ndevices * DEVICE_REC;
    blob = malloc(nbytes);
    if (blob == NULL)
        return sd_diag_set(d, SD_ENOMEM, "store: out of memory");
    if (s->kind == STORE_KIND_COMPUTE) {
        for (i = 0; i < s->ntables; i++)
            encode_table(blob + i * TABLE_REC, &s->tables[i]);
    } else {
        for (i = 0; i < s->ndevices; i++)
            encode_device(blob + i * DEVICE_REC, &s->devices[i]);
    }

    rv = stmt_get(st, STMT_SAMPLE_INSERT, &stmt, d);
    if (rv != 0)
        goto out_free;
    bad |= sqlite3_bind_int64(stmt, 1, s->profile_id);
    bad |=
        sqlite3_bind_text(stmt, 2, store_kind_name(s->kind), -1, SQLITE_STATIC);
    bad |= sqlite3_bind_int64(stmt, 3, (sqlite3_int64)s->ntables);
    bad |= sqlite3_bind_int64(stmt, 5, (sqlite3_int64)s->ndevices);
    if (s->kind == STORE_KIND_COMPUTE)
        bad |= sqlite3_bind_blob64(stmt, 4, blob, nbytes, SQLITE_STATIC);
    else
        bad |= sqlite3_bind_blob64(stmt, 6, blob, nbytes, SQLITE_STATIC);
    bad |= sqlite3_bind_double(stmt, 7, s->measured_ms);
    bad |= sqlite3_bind_double(stmt, 8, s->spread_ms);
    bad |= sqlite3_bind_text(stmt, 9, s->device, -1, SQLITE_STATIC);
    bad |= sqlite3_bind_text(stmt, 10, s->source, -1, SQLITE_STATIC);
    bad |= sqlite3_bind_int64(stmt, 11, now_ms());
    rv = step(st, stmt, bad, "adding a sample", d);
    if (rv == 0 && id != NULL)
        *id = sqlite3_last_insert_rowid(st->db);
    stmt_done(stmt);
out_free:
    free(blob);
    return rv;
}

int store_sample_batch_begin(struct store *st, struct sd_diag *d)
{
    int rv;

    if (st->in_batch)
        return sd_diag_set(d, SD_EINVAL,
                           "store: a sample batch is already "
                           "open on this handle");
    rv = tx_begin(st, d);
    if (rv == 0)
        st->in_batch = true;
    return rv;
}

int store_sample_batch_commit(struct store *st, struct sd_diag *d)
{
    if (!st->in_batch)
        return sd_diag_set(d, SD_EINVAL, "store: no sample batch is open");
    st->in_batch = false;
    return tx_commit(st, d);
}

void store_sample_batch_abort(struct store *st)
{
    if (st->in_batch) {
        st->in_batch = false;
        tx_rollback(st);
    }
}

int store_sample_add(struct store *st, const struct store_sample *s,
                     int64_t *id, struct sd_diag *d)
{
    int64_t newid = 0;
    int rv;

    rv = check_sample(s, "sample", d);
    if (rv != 0)
        return rv;
    rv = sample_insert(st, s, &newid, d);
    /*
     * A failed statement undoes only itself, unless SQLite had to roll back
     * the whole transaction (I/O error, disk full): then the batch is gone.
     */
    if (rv != 0 && st->in_batch && sqlite3_get_autocommit(st->db)) {
        st->in_batch = false;
        if (d != NULL)
            snprintf(d->msg + strlen(d->msg), sizeof(d->msg) - strlen(d->msg),
                     " (the batch was rolled back)");
    }
    if (rv == 0 && id != NULL)
        *id = newid;
    return rv;
}

int store_sample_add_batch(struct store *st, const struct store_sample *s,
                           size_t n, struct sd_diag *d)
{
    char who[40];
    size_t i;
    int rv;

    rv = check_no_batch(st, d);
    if (rv != 0)
        return rv;
    if (n > 0 && s == NULL)
        return sd_diag_set(d, SD_EINVAL, "samples: NULL array of %zu", n);
    for (i = 0; i < n; i++) {
        snprintf(who, sizeof(who), "samples[%zu]", i);
        rv = check_sample(&s[i], who, d);
        if (rv != 0)
            return rv;
    }
    rv = tx_begin(st, d);
    if (rv != 0)
        return rv;
    for (i = 0; i < n; i++) {
        rv = sample_insert(st, &s[i], NULL, d);
        if (rv != 0)
            goto out_rollback;
    }
    return tx_commit(st, d);

out_rollback:
    tx_rollback(st);
    return rv;
}

int store_sample_count(struct store *st, int64_t profile_id,
                       enum store_kind kind, int64_t since_ms, uint64_t *n,
                       struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    bool bad = false;
    int rv;

    if (!kind_is_valid(kind))
        return sd_diag_set(d, SD_EINVAL, "samples: kind %d unknown", (int)kind);
    rv = stmt_get(st, STMT_SAMPLE_COUNT, &s, d);
    if (rv != 0)
        return rv;
    bad |= sqlite3_bind_int64(s, 1, profile_id);
    bad |= sqlite3_bind_text(s, 2, store_kind_name(kind), -1, SQLITE_STATIC);
    bad |= sqlite3_bind_int64(s, 3, since_ms);
    rv = step(st, s, bad, "counting samples", d);
    if (rv == 1) {
        *n = (uint64_t)sqlite3_column_int64(s, 0);
        rv = 0;
    }
    stmt_done(s);
    return rv;
}

/*
 * Decodes the current row of STMT_SAMPLE_LOAD into *out (whose arrays it
 * allocates).  SD_ESTORE when the blobs do not match their counts.
 */
static int sample_row(sqlite3_stmt *s, int64_t profile_id, enum store_kind kind,
                      struct store_sample *out, struct sd_diag *d)
{
    const unsigned char *blob;
    int64_t ntables, ndevices;
    size_t i, nbytes;

    memset(out, 0, sizeof(*out));
    out->id = sqlite3_column_int64(s, 0);
    out->profile_id = profile_id;
    out->kind = kind;
    ntables = sqlite3_column_int64(s, 1);
    ndevices = sqlite3_column_int64(s, 3);
    if (ntables < 0 || ntables > STORE_SAMPLE_TABLES_MAX || ndevices < 0 ||
        ndevices > STORE_SAMPLE_DEVICES_MAX)
        return sd_diag_set(d, SD_ESTORE, "store: sample %lld: bad counts",
                           (long long)out->id);
    if (ntables > 0) {
        blob = sqlite3_column_blob(s, 2);
        nbytes = (size_t)sqlite3_column_bytes(s, 2);
        if (blob == NULL || nbytes != (size_t)ntables * TABLE_REC)
            return sd_diag_set(d, SD_ESTORE,
                               "store: sample %lld: shard has %zu bytes for "
                               "%lld tables",
                               (long long)out->id, nbytes, (long long)ntables);
        out->tables = calloc((size_t)ntables, sizeof(*out->tables));
        if (out->tables == NULL)
            return sd_diag_set(d, SD_ENOMEM, "store: out of memory");
        out->ntables = (size_t)ntables;
        for (i = 0; i < out->ntables; i++)
            decode_table(blob + i * TABLE_REC, i, &out->tables[i]);
    }
    if (ndevices > 0) {
        blob = sqlite3_column_blob(s, 4);
        nbytes = (size_t)sqlite3_column_bytes(s, 4);
        if (blob == NULL || nbytes != (size_t)ndevices * DEVICE_REC)
            return sd_diag_set(d, SD_ESTORE,
                               "store: sample %lld: devices has %zu bytes for "
                               "%lld devices",
                               (long long)out->id, nbytes, (long long)ndevices);
        out->devices = calloc((size_t)ndevices, sizeof(*out->devices));
        if (out->devices == NULL)
            return sd_diag_set(d, SD_ENOMEM, "store: out of memory");
        out->ndevices = (size_t)ndevices;
        for (i = 0; i < out->ndevices; i++)
            decode_device(blob + i * DEVICE_REC, &out->devices[i]);
    }
    out->measured_ms = sqlite3_column_double(s, 5);
    out->spread_ms = sqlite3_column_double(s, 6);
    col_text(s, 7, out->device, sizeof(out->device));
    col_text(s, 8, out->source, sizeof(out->source));
    out->created_ms = sqlite3_column_int64(s, 9);
    return 0;
}

int store_samples_load(struct store *st, int64_t profile_id,
                       enum store_kind kind, int64_t after_id, size_t limit,
                       struct store_sample **out, size_t *n, struct sd_diag *d)
{
    struct store_sample *arr = NULL;
    sqlite3_stmt *s = NULL;
    size_t cap = 0, len = 0;
    void *p;
    bool bad = false;
    int rv;

    if (!kind_is_valid(kind))
        return sd_diag_set(d, SD_EINVAL, "samples: kind %d unknown", (int)kind);
    rv = stmt_get(st, STMT_SAMPLE_LOAD, &s, d);
    if (rv != 0)
        return rv;
    bad |= sqlite3_bind_int64(s, 1, profile_id);
    bad |= sqlite3_bind_text(s, 2, store_kind_name(kind), -1, SQLITE_STATIC);
    bad |= sqlite3_bind_int64(s, 3, after_id);
    bad |= sqlite3_bind_int64(s, 4, sql_limit(limit));
    for (;;) {
        rv = step(st, s, bad, "loading samples", d);
        if (rv <= 0)
            break;
        p = grow(arr, &cap, len, sizeof(*arr));
        if (p == NULL) {
            rv = sd_diag_set(d, SD_ENOMEM, "store: out of memory");
            break;
        }
        arr = p;
        /* Counted before decoding, so a half-decoded row is freed too. */
        rv = sample_row(s, profile_id, kind, &arr[len++], d);
        if (rv != 0)
            break;
    }
    stmt_done(s);
    if (rv != 0) {
        store_samples_free(arr, len);
        return rv;
    }
    if (len == 0) {
        free(arr);
        arr = NULL;
    }
    *out = arr;
    *n = len;
    return 0;
}

/* The id just before the newest `newest` samples of (profile, kind), or 0
 * when there are no more than that (or `newest` is 0). */
static int newest_after(struct store *st, int64_t profile_id,
                        enum store_kind kind, size_t newest, int64_t *after_id,
                        struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    bool bad = false;
    int rv;

    if (!kind_is_valid(kind))
        return sd_diag_set(d, SD_EINVAL, "samples: kind %d unknown", (int)kind);
    *after_id = 0;
    if (newest == 0)
        return 0;
    rv = stmt_get(st, STMT_SAMPLE_NEWEST, &s, d);
    if (rv != 0)
        return rv;
    bad |= sqlite3_bind_int64(s, 1, profile_id);
    bad |= sqlite3_bind_text(s, 2, store_kind_name(kind), -1, SQLITE_STATIC);
    bad |= sqlite3_bind_int64(
        s, 3, newest > (size_t)INT64_MAX ? INT64_MAX : (sqlite3_int64)newest);
    rv = step(st, s, bad, "finding the newest samples", d);
    if (rv == 1) {
        *after_id = sqlite3_column_int64(s, 0);
        rv = 0;
    }
    stmt_done(s);
    return rv;
}

int store_samples_load_newest(struct store *st, int64_t profile_id,
                              enum store_kind kind, size_t newest,
                              struct store_sample **out, size_t *n,
                              struct sd_diag *d)
{
    int64_t after = 0;
    int rv;

    rv = newest_after(st, profile_id, kind, newest, &after, d);
    if (rv == 0)
        rv = store_samples_load(st, profile_id, kind, after, 0, out, n, d);
    return rv;
}

void store_samples_free(struct store_sample *s, size_t n)
{
    size_t i;

    if (s == NULL)
        return;
    for (i = 0; i < n; i++) {
        free(s[i].tables);
        free(s[i].devices);
    }
    free(s);
}

/* ------------------------------------------------------------------------ */
/* Models                                                                    */

static int check_model(const struct store_model *m, struct sd_diag *d)
{
    const struct store_model_info *mi;
    const struct store_model_metrics *mx;
    int rv;

    if (m == NULL)
        return sd_diag_set(d, SD_EINVAL, "model: missing");
    mi = &m->info;
    mx = &mi->metrics;
    rv = check_id(mi->profile_id, false, "model", "profile_id", d);
    if (rv != 0)
        return rv;
    if (!kind_is_valid(mi->kind))
        return sd_diag_set(d, SD_EINVAL, "model: kind %d unknown",
                           (int)mi->kind);
    if (mi->format_version < 1)
        return sd_diag_set(d, SD_EINVAL, "model: format_version %d < 1",
                           (int)mi->format_version);
    if (m->weights == NULL || mi->weights_bytes == 0)
        return sd_diag_set(d, SD_EINVAL, "model: weights are empty");
    if (m->norm == NULL && mi->norm_bytes != 0)
        return sd_diag_set(d, SD_EINVAL,
                           "model: norm is NULL but norm_bytes "
                           "is %zu",
                           mi->norm_bytes);
    rv = check_ms(mx->val_mape, "model", "metrics.val_mape", d);
    if (rv == 0)
        rv = check_ms(mx->test_mape, "model", "metrics.test_mape", d);
    if (rv == 0 &&
        (mx->train_samples < 0 || mx->val_samples < 0 || mx->test_samples < 0))
        rv = sd_diag_set(d, SD_EINVAL, "model: metrics: a sample count is < 0");
    return rv;
}

int store_model_put(struct store *st, const struct store_model *m, int64_t *id,
                    struct sd_diag *d)
{
    const struct store_model_info *mi;
    sqlite3_stmt *s = NULL;
    bool bad = false;
    int rv;

    rv = check_model(m, d);
    if (rv == 0)
        rv = check_no_batch(st, d);
    if (rv == 0)
        rv = stmt_get(st, STMT_MODEL_INSERT, &s, d);
    if (rv != 0)
        return rv;
    mi = &m->info;
    bad |= sqlite3_bind_int64(s, 1, mi->profile_id);
    bad |=
        sqlite3_bind_text(s, 2, store_kind_name(mi->kind), -1, SQLITE_STATIC);
    bad |= sqlite3_bind_int(s, 3, mi->format_version);
    bad |=
        sqlite3_bind_blob64(s, 4, m->weights, mi->weights_bytes, SQLITE_STATIC);
    if (mi->norm_bytes == 0)
        bad |= sqlite3_bind_zeroblob(s, 5, 0); /* empty, not NULL */
    else
        bad |=
            sqlite3_bind_blob64(s, 5, m->norm, mi->norm_bytes, SQLITE_STATIC);
    bad |= sqlite3_bind_double(s, 6, mi->metrics.val_mape);
    bad |= sqlite3_bind_double(s, 7, mi->metrics.test_mape);
    bad |= sqlite3_bind_int64(s, 8, mi->metrics.train_samples);
    bad |= sqlite3_bind_int64(s, 9, mi->metrics.val_samples);
    bad |= sqlite3_bind_int64(s, 10, mi->metrics.test_samples);
    bad |= sqlite3_bind_int64(s, 11, now_ms());
    rv = step(st, s, bad, "storing a model", d);
    if (rv == 0 && id != NULL)
        *id = sqlite3_last_insert_rowid(st->db);
    stmt_done(s);
    return rv;
}

/* Reads the MODEL_COLS of the current row. */
static int model_row(sqlite3_stmt *s, struct store_model_info *mi,
                     struct sd_diag *d)
{
    memset(mi, 0, sizeof(*mi));
    mi->id = sqlite3_column_int64(s, 0);
    mi->profile_id = sqlite3_column_int64(s, 1);
    col_text(s, 2, mi->profile, sizeof(mi->profile));
    if (!kind_parse(sqlite3_column_text(s, 3), &mi->kind))
        return sd_diag_set(d, SD_ESTORE, "store: model %lld: unknown kind",
                           (long long)mi->id);
    mi->format_version = sqlite3_column_int(s, 4);
    mi->metrics.val_mape = sqlite3_column_double(s, 5);
    mi->metrics.test_mape = sqlite3_column_double(s, 6);
    mi->metrics.train_samples = sqlite3_column_int64(s, 7);
    mi->metrics.val_samples = sqlite3_column_int64(s, 8);
    mi->metrics.test_samples = sqlite3_column_int64(s, 9);
    mi->weights_bytes = (size_t)sqlite3_column_int64(s, 10);
    mi->norm_bytes = (size_t)sqlite3_column_int64(s, 11);
    mi->created_ms = sqlite3_column_int64(s, 12);
    mi->active = sqlite3_column_int(s, 13) != 0;
    return 0;
}

/* model_row() for collect_rows(). */
static int model_row_any(sqlite3_stmt *s, void *row, struct sd_diag *d)
{
    return model_row(s, row, d);
}

/*
 * Reads the current row of STMT_MODEL_GET(_ACTIVE) into one allocation:
 * the struct, then the weights, then the norm.
 */
static int model_row_full(sqlite3_stmt *s, struct store_model **out,
                          struct sd_diag *d)
{
    struct store_model_info mi;
    struct store_model *m;
    const void *w, *nm;
    size_t wbytes, nbytes;
    unsigned char *p;
    int rv;

    rv = model_row(s, &mi, d);
    if (rv != 0)
        return rv;
    w = sqlite3_column_blob(s, MODEL_NCOLS);
    wbytes = (size_t)sqlite3_column_bytes(s, MODEL_NCOLS);
    nm = sqlite3_column_blob(s, MODEL_NCOLS + 1);
    nbytes = (size_t)sqlite3_column_bytes(s, MODEL_NCOLS + 1);
    if (w == NULL || wbytes != mi.weights_bytes || nbytes != mi.norm_bytes)
        return sd_diag_set(d, SD_ESTORE,
                           "store: model %lld: cannot read its "
                           "blobs",
                           (long long)mi.id);
    m = malloc(sizeof(*m) + wbytes + nbytes);
    if (m == NULL)
        return sd_diag_set(d, SD_ENOMEM, "store: out of memory");
    p = (unsigned char *)(m + 1);
    memcpy(p, w, wbytes);
    if (nbytes > 0)
        memcpy(p + wbytes, nm, nbytes);
    m->info = mi;
    m->weights = p;
    m->norm = nbytes > 0 ? p + wbytes : NULL;
    *out = m;
    return 0;
}

int store_model_get(struct store *st, int64_t id, struct store_model **out,
                    struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    int rv;

    rv = stmt_get(st, STMT_MODEL_GET, &s, d);
    if (rv != 0)
        return rv;
    rv = step(st, s, sqlite3_bind_int64(s, 1, id) != SQLITE_OK,
              "reading a model", d);
    if (rv == 0)
        rv = sd_diag_set(d, SD_ENOENT, "model %lld: no such version",
                         (long long)id);
    else if (rv == 1)
        rv = model_row_full(s, out, d);
    stmt_done(s);
    return rv;
}

int store_model_get_active(struct store *st, int64_t profile_id,
                           enum store_kind kind, struct store_model **out,
                           struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    bool bad = false;
    int rv;

    if (!kind_is_valid(kind))
        return sd_diag_set(d, SD_EINVAL, "model: kind %d unknown", (int)kind);
    rv = stmt_get(st, STMT_MODEL_GET_ACTIVE, &s, d);
    if (rv != 0)
        return rv;
    bad |= sqlite3_bind_int64(s, 1, profile_id);
    bad |= sqlite3_bind_text(s, 2, store_kind_name(kind), -1, SQLITE_STATIC);
    rv = step(st, s, bad, "reading the active model", d);
    if (rv == 0)
        rv = sd_diag_set(d, SD_ENOENT, "profile %lld has no active %s model",
                         (long long)profile_id, store_kind_name(kind));
    else if (rv == 1)
        rv = model_row_full(s, out, d);
    stmt_done(s);
    return rv;
}

void store_model_free(struct store_model *m)
{
    free(m); /* one allocation, blobs included */
}

/*
 * Runs a statement bound with (profile_id, kind) in the activation
 * transaction; for queries, *id gets column 0 of the row (0 for none).
 */
static int model_key_stmt(struct store *st, enum stmt which, int64_t profile_id,
                          const char *kind, int64_t *id, struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    bool bad = false;
    int rv;

    rv = stmt_get(st, which, &s, d);
    if (rv != 0)
        return rv;
    bad |= sqlite3_bind_int64(s, 1, profile_id);
    bad |= sqlite3_bind_text(s, 2, kind, -1, SQLITE_STATIC);
    rv = step(st, s, bad, "activating a model", d);
    if (id != NULL)
        *id = rv == 1 ? sqlite3_column_int64(s, 0) : 0;
    stmt_done(s);
    return rv < 0 ? rv : 0;
}

int store_model_activate(struct store *st, int64_t id, int64_t *previous,
                         struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    char kind[16];
    int64_t profile_id = 0, prev = 0;
    int rv;

    rv = check_no_batch(st, d);
    if (rv == 0)
        rv = tx_begin(st, d);
    if (rv != 0)
        return rv;

    rv = stmt_get(st, STMT_MODEL_KEY, &s, d);
    if (rv != 0)
        goto out_rollback;
    rv = step(st, s, sqlite3_bind_int64(s, 1, id) != SQLITE_OK,
              "activating a model", d);
    if (rv == 1) {
        profile_id = sqlite3_column_int64(s, 0);
        col_text(s, 1, kind, sizeof(kind));
        rv = 0;
    } else if (rv == 0) {
        rv = sd_diag_set(d, SD_ENOENT, "model %lld: no such version",
                         (long long)id);
    }
    stmt_done(s);
    if (rv != 0)
        goto out_rollback;

    /* Deactivate first: the unique index allows one active per key. */
    rv = model_key_stmt(st, STMT_MODEL_ACTIVE_ID, profile_id, kind, &prev, d);
    if (rv == 0)
        rv = model_key_stmt(st, STMT_MODEL_DEACTIVATE, profile_id, kind, NULL,
                            d);
    if (rv != 0)
        goto out_rollback;
    rv = stmt_get(st, STMT_MODEL_SET_ACTIVE, &s, d);
    if (rv != 0)
        goto out_rollback;
    rv = step(st, s, sqlite3_bind_int64(s, 1, id) != SQLITE_OK,
              "activating a model", d);
    stmt_done(s);
    if (rv != 0)
        goto out_rollback;
    rv = tx_commit(st, d);
    if (rv != 0)
        return rv;
    if (previous != NULL)
        *previous = prev;
    return 0;

out_rollback:
    tx_rollback(st);
    return rv;
}

int store_model_deactivate(struct store *st, int64_t profile_id,
                           enum store_kind kind, int64_t *previous,
                           struct sd_diag *d)
{
    const char *k = store_kind_name(kind);
    int64_t prev = 0;
    int rv;

    rv = check_no_batch(st, d);
    if (rv == 0)
        rv = tx_begin(st, d);
    if (rv != 0)
        return rv;
    rv = model_key_stmt(st, STMT_MODEL_ACTIVE_ID, profile_id, k, &prev, d);
    if (rv == 0)
        rv = model_key_stmt(st, STMT_MODEL_DEACTIVATE, profile_id, k, NULL, d);
    if (rv != 0) {
        tx_rollback(st);
        return rv;
    }
    rv = tx_commit(st, d);
    if (rv == 0 && previous != NULL)
        *previous = prev;
    return rv;
}

int store_model_list(struct store *st, int64_t profile_id, size_t limit,
                     struct store_model_info **out, size_t *n,
                     struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    void *arr;
    bool bad = false;
    int rv;

    rv = stmt_get(st, STMT_MODEL_LIST, &s, d);
    if (rv != 0)
        return rv;
    bad |= sqlite3_bind_int64(s, 1, profile_id);
    bad |= sqlite3_bind_int64(s, 2, sql_limit(limit));
    rv = collect_rows(st, s, bad, "listing models", sizeof(**out),
                      model_row_any, &arr, n, d);
    if (rv == 0)
        *out = arr;
    return rv;
}

/* ------------------------------------------------------------------------ */
/* Jobs                                                                      */

static const char *const job_state_names[] = {
    [STORE_JOB_QUEUED] = "queued",       [STORE_JOB_RUNNING] = "running",
    [STORE_JOB_SUCCEEDED] = "succeeded", [STORE_JOB_FAILED] = "failed",
    [STORE_JOB_CANCELLED] = "cancelled",
};

#define NJOB_STATES (sizeof(job_state_names) / sizeof(job_state_names[0]))

static bool job_state_is_valid(enum store_job_state s)
{
    return s >= STORE_JOB_QUEUED && s <= STORE_JOB_CANCELLED;
}

const char *store_job_state_name(enum store_job_state s)
{
    return job_state_is_valid(s) ? job_state_names[s] : "?";
}

bool store_job_state_is_terminal(enum store_job_state s)
{
    return s == STORE_JOB_SUCCEEDED || s == STORE_JOB_FAILED ||
           s == STORE_JOB_CANCELLED;
}

static bool job_state_parse(const unsigned char *t, enum store_job_state *out)
{
    size_t i;

    for (i = STORE_JOB_QUEUED; t != NULL && i < NJOB_STATES; i++) {
        if (strcmp((const char *)t, job_state_names[i]) == 0) {
            *out = (enum store_job_state)i;
            return true;
        }
    }
    return false;
}

/* Reads the JOB_SELECT columns of the current row. */
static int job_row(sqlite3_stmt *s, struct store_job *j, struct sd_diag *d)
{
    const unsigned char *kind;

    memset(j, 0, sizeof(*j));
    j->id = sqlite3_column_int64(s, 0);
    kind = sqlite3_column_text(s, 1);
    if (kind == NULL || strcmp((const char *)kind, "retrain") != 0 ||
        !job_state_parse(sqlite3_column_text(s, 2), &j->state))
        return sd_diag_set(d, SD_ESTORE,
                           "store: job %lld: unknown kind or "
                           "state",
                           (long long)j->id);
    j->kind = STORE_JOB_RETRAIN;
    j->progress = sqlite3_column_double(s, 3);
    col_text(s, 4, j->message, sizeof(j->message));
    j->profile_id = sqlite3_column_int64(s, 5); /* NULL reads as 0 */
    col_text(s, 6, j->profile, sizeof(j->profile));
    col_text(s, 7, j->params, sizeof(j->params));
    j->result_model_id = sqlite3_column_int64(s, 8);
    j->created_ms = sqlite3_column_int64(s, 9);
    j->started_ms = sqlite3_column_int64(s, 10);
    j->finished_ms = sqlite3_column_int64(s, 11);
    return 0;
}

/* job_row() for collect_rows(). */
static int job_row_any(sqlite3_stmt *s, void *row, struct sd_diag *d)
{
    return job_row(s, row, d);
}

int store_job_create(struct store *st, const struct store_job *j, int64_t *id,
                     struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    bool bad = false;
    int rv;

    if (j == NULL)
        return sd_diag_set(d, SD_EINVAL, "job: missing");
    if (j->kind != STORE_JOB_RETRAIN)
        return sd_diag_set(d, SD_EINVAL, "job: kind %d unknown", (int)j->kind);
    rv = check_id(j->profile_id, true, "job", "profile_id", d);
    if (rv == 0)
        rv = check_text(j->message, sizeof(j->message), false, "job", "message",
                        d);
    if (rv == 0)
        rv =
            check_text(j->params, sizeof(j->params), false, "job", "params", d);
    if (rv == 0)
        rv = check_no_batch(st, d);
    if (rv == 0)
        rv = stmt_get(st, STMT_JOB_INSERT, &s, d);
    if (rv != 0)
        return rv;
    bad |= sqlite3_bind_text(s, 1, "retrain", -1, SQLITE_STATIC);
    bad |= sqlite3_bind_text(s, 2, j->message, -1, SQLITE_STATIC);
    bad |= bind_id_or_null(s, 3, j->profile_id);
    bad |= sqlite3_bind_text(s, 4, j->params, -1, SQLITE_STATIC);
    bad |= sqlite3_bind_int64(s, 5, now_ms());
    rv = step(st, s, bad, "creating a job", d);
    if (rv == 0 && id != NULL)
        *id = sqlite3_last_insert_rowid(st->db);
    stmt_done(s);
    return rv;
}

/* Why an update of job `id` changed nothing: SD_ENOENT or a final state. */
static int job_update_refused(struct store *st, int64_t id, struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    enum store_job_state state;
    int rv;

    rv = stmt_get(st, STMT_JOB_STATE, &s, d);
    if (rv != 0)
        return rv;
    rv = step(st, s, sqlite3_bind_int64(s, 1, id) != SQLITE_OK,
              "updating a job", d);
    if (rv == 0)
        rv = sd_diag_set(d, SD_ENOENT, "job %lld: no such job", (long long)id);
    else if (rv == 1 && job_state_parse(sqlite3_column_text(s, 0), &state))
        rv = sd_diag_set(d, SD_EINVAL,
                         "job %lld is already %s; that state "
                         "is final",
                         (long long)id, store_job_state_name(state));
    else if (rv == 1)
        rv = sd_diag_set(d, SD_ESTORE, "store: job %lld: unknown state",
                         (long long)id);
    stmt_done(s);
    return rv;
}

int store_job_update(struct store *st, int64_t id, enum store_job_state state,
                     double progress, const char *message,
                     int64_t result_model_id, struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    bool bad = false;
    int rv;

    rv = check_id(id, false, "job", "id", d);
    if (rv == 0)
        rv = check_id(result_model_id, true, "job", "result_model_id", d);
    if (rv != 0)
        return rv;
    if (!job_state_is_valid(state))
        return sd_diag_set(d, SD_EINVAL, "job %lld: state %d unknown",
                           (long long)id, (int)state);
    if (!isfinite(progress) || progress < 0 || progress > 1)
        return sd_diag_set(d, SD_EINVAL,
                           "job %lld: progress %g is not in "
                           "[0, 1]",
                           (long long)id, progress);
    if (message != NULL && memchr(message, '\0', STORE_MESSAGE_MAX) == NULL)
        return sd_diag_set(d, SD_EINVAL,
                           "job %lld: message is longer than "
                           "%d bytes",
                           (long long)id, STORE_MESSAGE_MAX - 1);
    rv = check_no_batch(st, d);
    if (rv == 0)
        rv = stmt_get(st, STMT_JOB_UPDATE, &s, d);
    if (rv != 0)
        return rv;
    bad |= sqlite3_bind_int64(s, 1, id);
    bad |= sqlite3_bind_text(s, 2, job_state_names[state], -1, SQLITE_STATIC);
    bad |= sqlite3_bind_double(s, 3, progress);
    if (message != NULL)
        bad |= sqlite3_bind_text(s, 4, message, -1, SQLITE_STATIC);
    bad |= bind_id_or_null(s, 5, result_model_id);
    bad |= sqlite3_bind_int64(s, 6, now_ms());
    rv = step(st, s, bad, "updating a job", d);
    stmt_done(s);
    if (rv == 0 && sqlite3_changes(st->db) == 0)
        rv = job_update_refused(st, id, d);
    return rv;
}

/*
 * Steps a bound job query and reads its first row into *out; SD_ENOENT with
 * `none` as the message when there is no row.  Resets s.
 */
static int job_query_one(struct store *st, sqlite3_stmt *s, bool bad,
                         struct store_job *out, const char *none,
                         struct sd_diag *d)
{
    struct store_job j;
    int rv;

    rv = step(st, s, bad, "reading a job", d);
    if (rv == 0)
        rv = sd_diag_set(d, SD_ENOENT, "%s", none);
    else if (rv == 1)
        rv = job_row(s, &j, d);
    stmt_done(s);
    if (rv == 0)
        *out = j;
    return rv;
}

int store_job_get(struct store *st, int64_t id, struct store_job *out,
                  struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    char none[64];
    int rv;

    rv = stmt_get(st, STMT_JOB_GET, &s, d);
    if (rv != 0)
        return rv;
    snprintf(none, sizeof(none), "job %lld: no such job", (long long)id);
    return job_query_one(st, s, sqlite3_bind_int64(s, 1, id) != SQLITE_OK, out,
                         none, d);
}

int store_job_find_open(struct store *st, enum store_job_kind kind,
                        int64_t profile_id, struct store_job *out,
                        struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    bool bad = false;
    int rv;

    if (kind != STORE_JOB_RETRAIN)
        return sd_diag_set(d, SD_EINVAL, "job: kind %d unknown", (int)kind);
    rv = stmt_get(st, STMT_JOB_FIND_OPEN, &s, d);
    if (rv != 0)
        return rv;
    bad |= sqlite3_bind_text(s, 1, "retrain", -1, SQLITE_STATIC);
    bad |= bind_id_or_null(s, 2, profile_id);
    return job_query_one(st, s, bad, out, "no open job", d);
}

int store_job_list(struct store *st, size_t limit, struct store_job **out,
                   size_t *n, struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    void *arr;
    bool bad;
    int rv;

    rv = stmt_get(st, STMT_JOB_LIST, &s, d);
    if (rv != 0)
        return rv;
    bad = sqlite3_bind_int64(s, 1, sql_limit(limit)) != SQLITE_OK;
    rv = collect_rows(st, s, bad, "listing jobs", sizeof(**out), job_row_any,
                      &arr, n, d);
    if (rv == 0)
        *out = arr;
    return rv;
}

int store_job_count(struct store *st, enum store_job_state state, uint64_t *n,
                    struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    int rv;

    if (!job_state_is_valid(state))
        return sd_diag_set(d, SD_EINVAL, "job: state %d unknown", (int)state);
    rv = stmt_get(st, STMT_JOB_COUNT, &s, d);
    if (rv != 0)
        return rv;
    rv = step(st, s,
              sqlite3_bind_text(s, 1, job_state_names[state], -1,
                                SQLITE_STATIC) != SQLITE_OK,
              "counting jobs", d);
    if (rv == 1) {
        *n = (uint64_t)sqlite3_column_int64(s, 0);
        rv = 0;
    }
    stmt_done(s);
    return rv;
}

int store_job_cancel_unfinished(struct store *st, const char *message,
                                uint64_t *n, struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    bool bad = false;
    int rv;

    rv = check_text(message, STORE_MESSAGE_MAX, false, "job", "message", d);
    if (rv == 0)
        rv = check_no_batch(st, d);
    if (rv == 0)
        rv = stmt_get(st, STMT_JOB_CANCEL_UNFINISHED, &s, d);
    if (rv != 0)
        return rv;
    bad |= sqlite3_bind_text(s, 1, message, -1, SQLITE_STATIC);
    bad |= sqlite3_bind_int64(s, 2, now_ms());
    rv = step(st, s, bad, "cancelling jobs", d);
    if (rv == 0 && n != NULL)
        *n = (uint64_t)sqlite3_changes(st->db);
    stmt_done(s);
    return rv;
}

/* ------------------------------------------------------------------------ */
/* Plan audit                                                                */

static int check_audit(const struct store_plan_audit *a, struct sd_diag *d)
{
    int rv;

    if (a == NULL)
        return sd_diag_set(d, SD_EINVAL, "plan audit: missing");
    rv = check_text(a->request_hash, sizeof(a->request_hash), true,
                    "plan audit", "request_hash", d);
    if (rv == 0)
        rv = check_text(a->algorithm, sizeof(a->algorithm), true, "plan audit",
                        "algorithm", d);
    if (rv == 0)
        rv = check_id(a->model_id, true, "plan audit", "model_id", d);
    if (rv == 0 && (a->ntables < 1 || a->ndevices < 1))
        rv = sd_diag_set(d, SD_EINVAL,
                         "plan audit: ntables %d and ndevices %d must be >= 1",
                         (int)a->ntables, (int)a->ndevices);
    if (rv == 0)
        rv = check_ms(a->plan_cost_ms, "plan audit", "plan_cost_ms", d);
    if (rv == 0 && (a->plan_json == NULL || a->plan_json[0] == '\0'))
        rv = sd_diag_set(d, SD_EINVAL, "plan audit: plan_json is empty");
    return rv;
}

int store_plan_audit_put(struct store *st, const struct store_plan_audit *a,
                         int64_t *id, struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    bool bad = false;
    int rv;

    rv = check_audit(a, d);
    if (rv == 0)
        rv = check_no_batch(st, d);
    if (rv == 0)
        rv = stmt_get(st, STMT_AUDIT_INSERT, &s, d);
    if (rv != 0)
        return rv;
    bad |= sqlite3_bind_text(s, 1, a->request_hash, -1, SQLITE_STATIC);
    bad |= sqlite3_bind_text(s, 2, a->algorithm, -1, SQLITE_STATIC);
    bad |= bind_id_or_null(s, 3, a->model_id);
    bad |= sqlite3_bind_int(s, 4, a->ntables);
    bad |= sqlite3_bind_int(s, 5, a->ndevices);
    bad |= sqlite3_bind_double(s, 6, a->plan_cost_ms);
    bad |= sqlite3_bind_int64(s, 7, now_ms());
    bad |= sqlite3_bind_text(s, 8, a->plan_json, -1, SQLITE_STATIC);
    rv = step(st, s, bad, "recording a plan", d);
    if (rv == 0 && id != NULL)
        *id = sqlite3_last_insert_rowid(st->db);
    stmt_done(s);
    return rv;
}

int store_plan_audit_get(struct store *st, int64_t id,
                         struct store_plan_audit **out, struct sd_diag *d)
{
    struct store_plan_audit *a;
    sqlite3_stmt *s = NULL;
    const unsigned char *plan;
    size_t len;
    int rv;

    rv = stmt_get(st, STMT_AUDIT_GET, &s, d);
    if (rv != 0)
        return rv;
    rv = step(st, s, sqlite3_bind_int64(s, 1, id) != SQLITE_OK,
              "reading a plan record", d);
    if (rv == 0)
        rv = sd_diag_set(d, SD_ENOENT, "plan audit %lld: no such record",
                         (long long)id);
    if (rv != 1)
        goto out_reset;
    plan = sqlite3_column_text(s, 8);
    len = (size_t)sqlite3_column_bytes(s, 8);
    a = calloc(1, sizeof(*a) + len + 1);
    if (plan == NULL || a == NULL) {
        free(a);
        rv = sd_diag_set(d, SD_ENOMEM, "store: out of memory");
        goto out_reset;
    }
    a->id = sqlite3_column_int64(s, 0);
    col_text(s, 1, a->request_hash, sizeof(a->request_hash));
    col_text(s, 2, a->algorithm, sizeof(a->algorithm));
    a->model_id = sqlite3_column_int64(s, 3);
    a->ntables = sqlite3_column_int(s, 4);
    a->ndevices = sqlite3_column_int(s, 5);
    a->plan_cost_ms = sqlite3_column_double(s, 6);
    a->created_ms = sqlite3_column_int64(s, 7);
    memcpy(a + 1, plan, len + 1);
    a->plan_json = (const char *)(a + 1);
    *out = a;
    rv = 0;
out_reset:
    stmt_done(s);
    return rv;
}

int store_plan_audit_trim(struct store *st, uint64_t keep, uint64_t *n,
                          struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    int rv;

    if (keep > INT64_MAX)
        return sd_diag_set(d, SD_EINVAL, "keep: too large");
    rv = check_no_batch(st, d);
    if (rv == 0)
        rv = stmt_get(st, STMT_AUDIT_TRIM, &s, d);
    if (rv != 0)
        return rv;
    rv = step(st, s, sqlite3_bind_int64(s, 1, (int64_t)keep) != SQLITE_OK,
              "trimming plan records", d);
    if (rv == 0 && n != NULL)
        *n = (uint64_t)sqlite3_changes(st->db);
    stmt_done(s);
    return rv;
}

int store_plan_audit_prune(struct store *st, int64_t before_ms, uint64_t *n,
                           struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    int rv;

    rv = check_no_batch(st, d);
    if (rv == 0)
        rv = stmt_get(st, STMT_AUDIT_PRUNE, &s, d);
    if (rv != 0)
        return rv;
    rv = step(st, s, sqlite3_bind_int64(s, 1, before_ms) != SQLITE_OK,
              "pruning plan records", d);
    if (rv == 0 && n != NULL)
        *n = (uint64_t)sqlite3_changes(st->db);
    stmt_done(s);
    return rv;
}
