/*
 * Opening and closing the store (store.h): the checks that refuse a database
 * that is not shardd's or is newer than this build, the schema migrations
 * and the WAL set-up of a read-write handle, and the integrity check.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

/* ------------------------------------------------------------------------ */
/* Opening, migrating, closing                                               */

/* Runs a one-row, one-integer query such as "PRAGMA user_version". */
static int query_int(struct store *st, const char *sql, int64_t *out,
                     struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    int rc, rv = 0;

    rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
    if (rc != SQLITE_OK)
        return store__err(st->db, rc, sql, d);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(s, 0);
    else if (rc == SQLITE_DONE)
        rv = sd_diag_set(d, SD_ESTORE, "store: %s returned no row", sql);
    else
        rv = store__err(st->db, rc, sql, d);
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
        return store__err(st->db, rc, what, d);
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
            rv = exec_sql(st, store__migrations[v - 1], what, d);
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
        return store__err(st->db, rc, "setting WAL mode", d);
    rc = sqlite3_step(s);
    rv = rc == SQLITE_ROW ? 0 : store__err(st->db, rc, "setting WAL mode", d);
    if (rc == SQLITE_ROW) {
        /* ":memory:" databases stay in "memory" mode; files must do WAL. */
        mode = sqlite3_column_text(s, 0);
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
            rv = store__err(st->db, rc, path, d);
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
        store__tx_rollback(st);
    for (i = 0; i < STORE__SQL_COUNT; i++)
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
        return store__err(st->db, rc, sql, d);
    rc = sqlite3_step(s);
    rv = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0
                                               : store__err(st->db, rc, sql, d);
    if (rc == SQLITE_ROW) {
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
