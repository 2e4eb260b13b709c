/*
 * Private to store/: the struct behind the opaque handle of store.h, the
 * statement cache, and the helpers every file of the module shares (named
 * store__*, reference/style.md 3.2).  Nothing outside store/ includes this
 * header, which is what keeps <sqlite3.h> inside the module.
 *
 * The files of the module:
 *   sql.c       the schema migrations and the text of every cached statement
 *   stmt.c      error mapping, the statement cache, binding, stepping,
 *               transactions, and the field checks shared by the writers
 *   db.c        opening (file creation, header checks, quick_check,
 *               migrations), closing, the integrity check
 *   backup.c    online backups, their rotation, finding the newest
 *   profiles.c  samples.c  models.c  jobs.c  audit.c: the typed API
 *
 * One statement, one call: a writer runs a cached statement with
 *
 *   rv = store__exec(st, STORE__SQL_JOB_CANCEL_UNFINISHED,
 *                    STORE__ARGS(STORE__TEXT(message),
 *                                STORE__INT(store__now_ms())),
 *                    "cancelling jobs", d);
 *
 * and readers use store__one() (first row, decoded by a callback) or
 * store__all() (every row into a new array).  The arguments bind to ?1, ?2,
 * ... in order.  Each argument is a struct member initialised from the
 * caller's value, so the compiler converts or rejects it: a size_t passed
 * as STORE__INT() is converted to int64_t, a number passed as STORE__TEXT()
 * does not compile (unlike a printf-style format, which cannot be checked).
 */
#ifndef SHARDD_STORE_INT_H
#define SHARDD_STORE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "store.h"

/* ------------------------------------------------------------------------ */
/* The statements (their SQL is in sql.c)                                     */

enum store__sql {
    STORE__SQL_BEGIN,
    STORE__SQL_COMMIT,
    STORE__SQL_ROLLBACK,
    /* profiles.c */
    STORE__SQL_PROFILE_GET,
    STORE__SQL_PROFILE_INSERT,
    STORE__SQL_PROFILE_LIST,
    /* samples.c */
    STORE__SQL_SAMPLE_INSERT,
    STORE__SQL_SAMPLE_COUNT,
    STORE__SQL_SAMPLE_LOAD,
    STORE__SQL_SAMPLE_NEWEST,
    /* models.c */
    STORE__SQL_MODEL_INSERT,
    STORE__SQL_MODEL_FAMILY_INSERT,
    STORE__SQL_MODEL_FAMILY_LOAD,
    STORE__SQL_MODEL_GET,
    STORE__SQL_MODEL_GET_ACTIVE,
    STORE__SQL_MODEL_KEY,
    STORE__SQL_MODEL_ACTIVE_ID,
    STORE__SQL_MODEL_DEACTIVATE,
    STORE__SQL_MODEL_SET_ACTIVE,
    STORE__SQL_MODEL_LIST,
    STORE__SQL_MODEL_PRUNE_JOBS,
    STORE__SQL_MODEL_PRUNE_AUDIT,
    STORE__SQL_MODEL_PRUNE_BASE,
    STORE__SQL_MODEL_PRUNE,
    /* jobs.c */
    STORE__SQL_JOB_INSERT,
    STORE__SQL_JOB_GET,
    STORE__SQL_JOB_FIND_OPEN,
    STORE__SQL_JOB_LIST,
    STORE__SQL_JOB_COUNT,
    STORE__SQL_JOB_UPDATE,
    STORE__SQL_JOB_STATE,
    STORE__SQL_JOB_CANCEL_UNFINISHED,
    STORE__SQL_JOB_FINISH_ACTIVATED,
    /* audit.c */
    STORE__SQL_AUDIT_INSERT,
    STORE__SQL_AUDIT_GET,
    STORE__SQL_AUDIT_PRUNE,
    STORE__SQL_AUDIT_TRIM,
    STORE__SQL_AUDIT_LIST,
    STORE__SQL_ORIGIN_HAS,
    STORE__SQL_ORIGIN_INSERT,
    STORE__SQL_ORIGIN_LAST,
    STORE__SQL_COUNT
};

/* The text of each statement, indexed by enum store__sql. */
extern const char *const store__sql_text[STORE__SQL_COUNT];

/*
 * store__migrations[v - 1] takes a database from schema version v - 1 to v
 * (sql.c says how to add one).
 */
extern const char *const store__migrations[STORE_SCHEMA_VERSION];

/* shardd_fp32_tables(shard, ntables): schema 5's rewrite of the compute
 * samples measured in fp32 (samples.c); registered on every connection. */
void store__sql_fp32_tables(sqlite3_context *ctx, int argc, sqlite3_value **v);

/*
 * Columns of MODEL_COLS (sql.c), read by position in models.c; the _GET
 * statements add the weights and norm blobs after them.
 */
#define STORE__MODEL_NCOLS 17

struct store {
    sqlite3 *db;
    bool in_batch; /* a sample batch transaction is open */
    sqlite3_stmt *stmt[STORE__SQL_COUNT]; /* prepared on first use */
};

/* ------------------------------------------------------------------------ */
/* Arguments                                                                  */

enum store__arg_type {
    STORE__ARG_END = 0, /* terminates a list; STORE__ARGS() appends it */
    STORE__ARG_INT,     /* i */
    STORE__ARG_REAL,    /* f */
    STORE__ARG_TEXT,    /* p, NUL-terminated; NULL binds SQL NULL */
    STORE__ARG_BLOB,    /* p and n bytes; p NULL binds SQL NULL, n 0 an
                           empty blob */
    STORE__ARG_ID,      /* i, an optional reference: 0 binds SQL NULL */
};

/*
 * One statement argument.  Text and blobs are borrowed: they must stay valid
 * until the store__ call that binds them returns (every one of them resets
 * its statement and clears its bindings before it returns).
 */
struct store__arg {
    enum store__arg_type type;
    int64_t i;
    double f;
    const void *p;
    size_t n;
};

#define STORE__INT(v)                                                          \
    {                                                                          \
        .type = STORE__ARG_INT, .i = (v)                                       \
    }
#define STORE__REAL(v)                                                         \
    {                                                                          \
        .type = STORE__ARG_REAL, .f = (v)                                      \
    }
#define STORE__TEXT(v)                                                         \
    {                                                                          \
        .type = STORE__ARG_TEXT, .p = (v)                                      \
    }
#define STORE__BLOB(v, m)                                                      \
    {                                                                          \
        .type = STORE__ARG_BLOB, .p = (v), .n = (m)                            \
    }
#define STORE__ID(v)                                                           \
    {                                                                          \
        .type = STORE__ARG_ID, .i = (v)                                        \
    }

/* An argument list for ?1, ?2, ... in order, ended for the callee. */
#define STORE__ARGS(...)                                                       \
    ((const struct store__arg[]){__VA_ARGS__, {.type = STORE__ARG_END}})
/* No arguments. */
#define STORE__NOARGS ((const struct store__arg *)NULL)

/* A LIMIT argument: 0 (no limit) is SQLite's -1. */
int64_t store__limit(size_t limit);

/* ------------------------------------------------------------------------ */
/* Running statements                                                         */

/*
 * Maps a SQLite result code to an SD_E* code, for the whole module, and puts
 * "store: <what>: <sqlite3_errmsg(db)>" into d.  busy or locked ->
 * SD_EBUSY, a constraint -> SD_EINVAL, no memory -> SD_ENOMEM, "not a
 * database" -> SD_EFORMAT, "malformed" (SQLITE_CORRUPT) -> SD_ECORRUPT,
 * anything else -> SD_ESTORE.  db may be NULL (then SQLite's text for rc).
 */
int store__err(sqlite3 *db, int rc, const char *what, struct sd_diag *d);

/*
 * Decodes the current row of s into *row (a typed struct behind void *).
 * Returns 0 or an SD_E* code; on failure it frees whatever it allocated.
 */
typedef int (*store__row_cb)(sqlite3_stmt *s, void *row, struct sd_diag *d);

/* Releases what a store__row_cb allocated inside one row (not the row). */
typedef void (*store__release_cb)(void *row);

/* What store__all() needs to know about one kind of row. */
struct store__rows {
    size_t size;               /* bytes of one decoded row */
    store__row_cb decode;      /* fills one */
    store__release_cb release; /* NULL: rows own nothing */
};

/*
 * Runs cached statement `sql` with `args` to completion, ignoring any rows:
 * for writes, transactions and pragmas.  Returns 0 or the mapped error;
 * `what` names the operation in d.  sqlite3_changes() and
 * sqlite3_last_insert_rowid() on st->db tell the caller what it did.
 */
int store__exec(struct store *st, enum store__sql sql,
                const struct store__arg *args, const char *what,
                struct sd_diag *d);

/*
 * Runs `sql` with `args` and decodes its first row into *row with fn.
 * Returns 1 (a row, decoded), 0 (no row; *row untouched) or an error.
 */
int store__one(struct store *st, enum store__sql sql,
               const struct store__arg *args, const char *what,
               store__row_cb fn, void *row, struct sd_diag *d);

/*
 * Runs `sql` with `args` and decodes every row into a new array.  On
 * success *out (NULL when there are no rows) is owned by the caller and *n
 * is set; on failure both are untouched and nothing is left allocated.
 */
int store__all(struct store *st, enum store__sql sql,
               const struct store__arg *args, const char *what,
               const struct store__rows *rows, void **out, size_t *n,
               struct sd_diag *d);

/* A store__row_cb for one integer in column 0; row is an int64_t. */
int store__row_int(sqlite3_stmt *s, void *row, struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* Transactions                                                               */

/* BEGIN IMMEDIATE: takes the write lock now (SD_EBUSY after the timeout). */
int store__tx_begin(struct store *st, struct sd_diag *d);
/* Commits; on failure the transaction is rolled back, never left open. */
int store__tx_commit(struct store *st, struct sd_diag *d);
/* Rolls back the open transaction, if SQLite has not already done so. */
void store__tx_rollback(struct store *st);

/* ------------------------------------------------------------------------ */
/* Field checks and small conversions                                         */

/* SD_EINVAL while a sample batch is open: other writes wait for it. */
int store__check_no_batch(struct store *st, struct sd_diag *d);

/*
 * A fixed-size text field: NUL-terminated within `size` bytes, and non-empty
 * when asked.  `who` and `field` name it in the message.
 */
int store__check_text(const char *s, size_t size, bool nonempty,
                      const char *who, const char *field, struct sd_diag *d);

/* A finite number >= 0 (times, errors). */
int store__check_ms(double v, const char *who, const char *field,
                    struct sd_diag *d);

/* An id >= 1, or >= 0 when optional. */
int store__check_id(int64_t id, bool optional, const char *who,
                    const char *field, struct sd_diag *d);

/* A kind of sample (compute, comm), and of model (those and policy). */
bool store__kind_is_valid(enum store_kind kind);
bool store__model_kind_is_valid(enum store_kind kind);

/* Parses a kind column; false for anything the schema should have refused. */
bool store__kind_parse(const unsigned char *s, enum store_kind *out);

/* Copies text column i into a fixed field, "" for NULL. */
void store__col_text(sqlite3_stmt *s, int i, char *dst, size_t size);

/* Unix milliseconds, CLOCK_REALTIME: the store's timestamps. */
int64_t store__now_ms(void);

/* ------------------------------------------------------------------------ */
/* Files (db.c)                                                               */

/* Longest path the module builds, terminating NUL included. */
#define STORE__PATH_MAX 4096

/*
 * Runs PRAGMA quick_check on db.  Returns 0; SD_ECORRUPT with SQLite's first
 * problem, on one line, in `problem` (d untouched); or another mapped error
 * in d when the check could not run (SD_EBUSY, SD_ENOMEM, ...).
 */
int store__quick_check(sqlite3 *db, char *problem, size_t size,
                       struct sd_diag *d);

/*
 * Creates a new empty file from the mkstemp() template `tmpl` (rewritten with
 * the name it got), mode 0600 whatever the umask.  SD_ESTORE on failure.
 */
int store__make_private(char *tmpl, struct sd_diag *d);

/*
 * fsync()s the file or (dir) directory at path.  SD_EIO on failure.  Never
 * on a database some handle of this process may have open: its close()
 * would drop that handle's POSIX locks (db.c, check_magic()).
 */
int store__sync_path(const char *path, bool dir, struct sd_diag *d);

/* The directory part of path ("." when none).  SD_EINVAL when too long. */
int store__dir_of(const char *path, char *dir, size_t size);

#endif /* SHARDD_STORE_INT_H */
