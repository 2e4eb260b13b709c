/*
 * Running statements for the rest of store/: the one mapping of SQLite
 * errors to SD_E* codes, the per-handle cache of prepared statements,
 * binding an argument list, stepping and decoding rows, transactions, and
 * the field checks the writers share (store_int.h).
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store_int.h"

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */

int store__err(sqlite3 *db, int rc, const char *what, struct sd_diag *d)
{
    const char *msg = db != NULL ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
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
    case SQLITE_CORRUPT:
        err = SD_ECORRUPT;
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
    if (err == SD_ECORRUPT)
        return sd_diag_set(d, err,
                           "store: %s: %s; the database file is damaged: "
                           "stop shardd and restore it from a backup "
                           "(docs/daemon.md, \"The store\")",
                           what, msg);
    return sd_diag_set(d, err, "store: %s: %s", what, msg);
}

/* ------------------------------------------------------------------------ */
/* Statements                                                                */

/* The cached statement `sql`, prepared on first use. */
static int stmt_get(struct store *st, enum store__sql sql, sqlite3_stmt **out,
                    struct sd_diag *d)
{
    int rc;

    if (st->stmt[sql] == NULL) {
        rc =
            sqlite3_prepare_v3(st->db, store__sql_text[sql], -1,
                               SQLITE_PREPARE_PERSISTENT, &st->stmt[sql], NULL);
        if (rc != SQLITE_OK)
            return store__err(st->db, rc, "preparing a statement", d);
    }
    *out = st->stmt[sql];
    return 0;
}

/* Makes a cached statement ready for its next use. */
static void stmt_done(sqlite3_stmt *s)
{
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
}

/* Binds one argument to parameter i (1-based). */
static int bind_one(sqlite3_stmt *s, int i, const struct store__arg *a)
{
    switch (a->type) {
    case STORE__ARG_INT:
        return sqlite3_bind_int64(s, i, a->i);
    case STORE__ARG_REAL:
        return sqlite3_bind_double(s, i, a->f);
    case STORE__ARG_TEXT:
        return a->p != NULL ? sqlite3_bind_text(s, i, a->p, -1, SQLITE_STATIC)
                            : sqlite3_bind_null(s, i);
    case STORE__ARG_BLOB:
        if (a->p == NULL)
            return sqlite3_bind_null(s, i);
        if (a->n == 0)
            return sqlite3_bind_zeroblob(s, i, 0); /* empty, not NULL */
        return sqlite3_bind_blob64(s, i, a->p, a->n, SQLITE_STATIC);
    case STORE__ARG_ID:
        return a->i != 0 ? sqlite3_bind_int64(s, i, a->i)
                         : sqlite3_bind_null(s, i);
    case STORE__ARG_END:
        break;
    }
    return SQLITE_MISUSE;
}

/*
 * Gets the cached statement `sql` and binds `args` (NULL: none) to ?1, ?2,
 * ...  On failure the statement is reset and the error mapped.
 */
static int stmt_start(struct store *st, enum store__sql sql,
                      const struct store__arg *args, const char *what,
                      sqlite3_stmt **out, struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    int i, rc, rv;

    rv = stmt_get(st, sql, &s, d);
    if (rv != 0)
        return rv;
    for (i = 0; args != NULL && args[i].type != STORE__ARG_END; i++) {
        rc = bind_one(s, i + 1, &args[i]);
        if (rc != SQLITE_OK) {
            rv = store__err(st->db, rc, what, d);
            stmt_done(s);
            return rv;
        }
    }
    *out = s;
    return 0;
}

/* Steps s once: 1 for a row, 0 when done, or the mapped error. */
static int stmt_step(struct store *st, sqlite3_stmt *s, const char *what,
                     struct sd_diag *d)
{
    int rc;

    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        return 1;
    if (rc == SQLITE_DONE)
        return 0;
    return store__err(st->db, rc, what, d);
}

int store__exec(struct store *st, enum store__sql sql,
                const struct store__arg *args, const char *what,
                struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    int rv;

    rv = stmt_start(st, sql, args, what, &s, d);
    if (rv != 0)
        return rv;
    do
        rv = stmt_step(st, s, what, d);
    while (rv == 1);
    stmt_done(s);
    return rv;
}

int store__one(struct store *st, enum store__sql sql,
               const struct store__arg *args, const char *what,
               store__row_cb fn, void *row, struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    int rv;

    rv = stmt_start(st, sql, args, what, &s, d);
    if (rv != 0)
        return rv;
    rv = stmt_step(st, s, what, d);
    if (rv == 1) {
        rv = fn(s, row, d);
        if (rv == 0)
            rv = 1;
    }
    stmt_done(s);
    return rv;
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

int store__all(struct store *st, enum store__sql sql,
               const struct store__arg *args, const char *what,
               const struct store__rows *rows, void **out, size_t *n,
               struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    size_t cap = 0, len = 0, i;
    char *arr = NULL;
    void *p;
    int rv;

    rv = stmt_start(st, sql, args, what, &s, d);
    if (rv != 0)
        return rv;
    for (;;) {
        rv = stmt_step(st, s, what, d);
        if (rv <= 0)
            break;
        p = grow(arr, &cap, len, rows->size);
        if (p == NULL) {
            rv = sd_diag_set(d, SD_ENOMEM, "store: out of memory");
            break;
        }
        arr = p;
        rv = rows->decode(s, arr + len * rows->size, d);
        if (rv != 0)
            break;
        len++;
    }
    stmt_done(s);
    if (rv != 0) {
        for (i = 0; rows->release != NULL && i < len; i++)
            rows->release(arr + i * rows->size);
        free(arr);
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

int store__row_int(sqlite3_stmt *s, void *row, struct sd_diag *d)
{
    (void)d;
    *(int64_t *)row = sqlite3_column_int64(s, 0);
    return 0;
}

int64_t store__limit(size_t limit)
{
    return limit == 0 || limit > (size_t)INT64_MAX ? -1 : (int64_t)limit;
}

/* ------------------------------------------------------------------------ */
/* Transactions                                                              */

int store__tx_begin(struct store *st, struct sd_diag *d)
{
    return store__exec(st, STORE__SQL_BEGIN, STORE__NOARGS, "begin", d);
}

void store__tx_rollback(struct store *st)
{
    if (!sqlite3_get_autocommit(st->db))
        store__exec(st, STORE__SQL_ROLLBACK, STORE__NOARGS, "rollback", NULL);
}

int store__tx_commit(struct store *st, struct sd_diag *d)
{
    int rv;

    rv = store__exec(st, STORE__SQL_COMMIT, STORE__NOARGS, "commit", d);
    if (rv != 0)
        store__tx_rollback(st);
    return rv;
}

/* ------------------------------------------------------------------------ */
/* Field checks and conversions                                              */

int store__check_no_batch(struct store *st, struct sd_diag *d)
{
    if (st->in_batch)
        return sd_diag_set(d, SD_EINVAL,
                           "store: a sample batch is open on this handle; "
                           "commit or abort it first");
    return 0;
}

int store__check_text(const char *s, size_t size, bool nonempty,
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

int store__check_ms(double v, const char *who, const char *field,
                    struct sd_diag *d)
{
    if (!isfinite(v) || v < 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: %s %g is not a finite number >= 0", who, field,
                           v);
    return 0;
}

int store__check_id(int64_t id, bool optional, const char *who,
                    const char *field, struct sd_diag *d)
{
    if (id < (optional ? 0 : 1))
        return sd_diag_set(d, SD_EINVAL, "%s: %s %lld is not a valid id", who,
                           field, (long long)id);
    return 0;
}

bool store__kind_is_valid(enum store_kind kind)
{
    return kind == STORE_KIND_COMPUTE || kind == STORE_KIND_COMM;
}

bool store__model_kind_is_valid(enum store_kind kind)
{
    return store__kind_is_valid(kind) || kind == STORE_KIND_POLICY;
}

bool store__kind_parse(const unsigned char *s, enum store_kind *out)
{
    if (s != NULL && strcmp((const char *)s, "policy") == 0) {
        *out = STORE_KIND_POLICY;
        return true;
    }
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

void store__col_text(sqlite3_stmt *s, int i, char *dst, size_t size)
{
    const unsigned char *t = sqlite3_column_text(s, i);

    snprintf(dst, size, "%s", t != NULL ? (const char *)t : "");
}

int64_t store__now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
