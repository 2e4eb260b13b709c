/*
 * Opening and closing the store (store.h).  An existing file is opened only
 * when it is a sound shardd database: an empty file, a file that is not
 * SQLite, another application's database, a newer schema or one that fails
 * PRAGMA quick_check is refused before anything is written to it.  Only a
 * path where no file exists gets a new store, built under a temporary name
 * with mode 0600 and linked into place once complete.  Read-write opens then
 * migrate the schema.  The integrity check is here too.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_int.h"

/* The first 16 bytes of every SQLite 3 database (sqlite.org/fileformat2). */
static const char sqlite_magic[16] = "SQLite format 3";

/* The smallest page size: a shorter file cannot hold a whole database. */
#define MIN_DB_BYTES 512

/* ------------------------------------------------------------------------ */
/* Refusals                                                                  */

/*
 * Copies SQLite's report into a short single line: quick_check's rows start
 * with "*** in database main ***" and a newline.
 */
static void one_line(char *dst, size_t size, const char *src)
{
    const char *p = strrchr(src, '\n');
    size_t i;

    snprintf(dst, size, "%s", p != NULL ? p + 1 : src);
    for (i = 0; dst[i] != '\0'; i++)
        if (dst[i] == '\n' || dst[i] == '\r' || dst[i] == '\t')
            dst[i] = ' ';
}

/*
 * Refuses the damaged database at `path` with SD_ECORRUPT: d says what is
 * wrong and what the operator can do about it, naming the newest backup
 * next to it when there is one.
 */
static int refuse_damaged(const char *path, const char *problem,
                          struct sd_diag *d)
{
    char backup[STORE__PATH_MAX];

    if (store_backup_newest(path, NULL, backup, sizeof(backup), NULL) != 0)
        snprintf(backup, sizeof(backup), "none next to it");
    return sd_diag_set(d, SD_ECORRUPT,
                       "store %s is damaged: %s. shardd will not use it: stop "
                       "shardd, then restore the newest backup (%s) in its "
                       "place, or move the file with its -wal and -shm away "
                       "to start empty; `sqlite3 FILE .recover` (or .dump) "
                       "salvages rows (docs/daemon.md)",
                       path, problem, backup);
}

/* Refuses an existing file that is not a SQLite database: SD_EFORMAT. */
static int refuse_foreign(const char *path, const char *what, struct sd_diag *d)
{
    return sd_diag_set(d, SD_EFORMAT,
                       "store %s is %s; shardd will not use or change it: "
                       "move it away to start an empty store there, or set "
                       "another data_dir",
                       path, what);
}

/* ------------------------------------------------------------------------ */
/* Files                                                                     */

/* Bytes in the file at path + suffix; -1 when there is none. */
static long long file_bytes(const char *path, const char *suffix)
{
    char p[STORE__PATH_MAX];
    struct stat sb;

    if ((size_t)snprintf(p, sizeof(p), "%s%s", path, suffix) >= sizeof(p))
        return -1;
    return stat(p, &sb) == 0 ? (long long)sb.st_size : -1;
}

int store__make_private(char *tmpl, struct sd_diag *d)
{
    int fd;

    fd = mkstemp(tmpl);
    if (fd < 0)
        return sd_diag_set(d, SD_ESTORE, "store: cannot create %s: %s", tmpl,
                           strerror(errno));
    /* mkstemp() is subject to the umask; 0600 is what we want, always. */
    if (fchmod(fd, S_IRUSR | S_IWUSR) != 0) {
        sd_diag_set(d, SD_ESTORE, "store: chmod %s: %s", tmpl, strerror(errno));
        close(fd);
        unlink(tmpl);
        return SD_ESTORE;
    }
    close(fd);
    return 0;
}

int store__sync_path(const char *path, bool dir, struct sd_diag *d)
{
    int fd, rv = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC | (dir ? O_DIRECTORY : 0));
    if (fd < 0)
        return sd_diag_set(d, SD_EIO, "store: opening %s: %s", path,
                           strerror(errno));
    if (fsync(fd) != 0)
        rv = sd_diag_set(d, SD_EIO, "store: fsync %s: %s", path,
                         strerror(errno));
    close(fd);
    return rv;
}

int store__dir_of(const char *path, char *dir, size_t size)
{
    const char *slash = strrchr(path, '/');
    size_t n;

    if (slash == NULL)
        return (size_t)snprintf(dir, size, ".") < size ? 0 : SD_EINVAL;
    n = slash == path ? 1 : (size_t)(slash - path);
    if (n >= size)
        return SD_EINVAL;
    memcpy(dir, path, n);
    dir[n] = '\0';
    return 0;
}

/*
 * Looks at `path` before SQLite does, so that nothing is created or written
 * over: sets *exists, and refuses an existing file that is not a regular
 * file or is empty.  stat() only: see check_magic() for why the file is not
 * opened here.
 */
static int inspect_file(const char *path, bool *exists, struct sd_diag *d)
{
    struct stat sb;

    if (stat(path, &sb) != 0) {
        if (errno != ENOENT)
            return sd_diag_set(d, SD_ESTORE, "store %s: %s", path,
                               strerror(errno));
        *exists = false;
        return 0;
    }
    *exists = true;
    if (!S_ISREG(sb.st_mode))
        return refuse_foreign(path, "not a regular file", d);
    if (sb.st_size == 0)
        return refuse_damaged(path, "the file is empty (0 bytes)", d);
    return 0;
}

/*
 * Refuses a file that does not start like a SQLite database, or is too short
 * to be one.  The bytes are read through the handle's own file
 * (SQLITE_FCNTL_FILE_POINTER), never with an open() and close() of our own:
 * closing any descriptor of a file drops every POSIX lock this process holds
 * on it, those of the store's other handles included, and SQLite's VFS is
 * written to avoid exactly that (sqlite.org/howtocorrupt.html, 2.2).
 */
static int check_magic(struct store *st, const char *path, struct sd_diag *d)
{
    char head[sizeof(sqlite_magic)], what[64];
    sqlite3_file *f = NULL;
    sqlite3_int64 size = 0;
    int rc;

    rc = sqlite3_file_control(st->db, "main", SQLITE_FCNTL_FILE_POINTER, &f);
    if (rc == SQLITE_OK && (f == NULL || f->pMethods == NULL))
        rc = SQLITE_CANTOPEN;
    if (rc == SQLITE_OK)
        rc = f->pMethods->xFileSize(f, &size);
    if (rc == SQLITE_OK && size >= (sqlite3_int64)sizeof(head))
        rc = f->pMethods->xRead(f, head, (int)sizeof(head), 0);
    if (rc != SQLITE_OK)
        return store__err(NULL, rc, path, d); /* not the handle's error */
    if (size < (sqlite3_int64)sizeof(head) ||
        memcmp(head, sqlite_magic, sizeof(head)) != 0)
        return refuse_foreign(path, "not a SQLite database", d);
    if (size < MIN_DB_BYTES) {
        snprintf(what, sizeof(what), "the file is truncated (%lld bytes)",
                 (long long)size);
        return refuse_damaged(path, what, d);
    }
    return 0;
}

/*
 * Moves the finished temporary database `tmp` to `path` unless a file got
 * there first (another process creating the store at the same time): then
 * *created is false and that file is the store.  link() fails rather than
 * replace; where the file system has no hard links, rename() after a check.
 */
static int publish(const char *tmp, const char *path, bool *created,
                   struct sd_diag *d)
{
    if (link(tmp, path) == 0) {
        *created = true;
        return 0;
    }
    if (errno == EEXIST) {
        *created = false;
        return 0;
    }
    if (errno != EPERM && errno != ENOTSUP && errno != ENOSYS)
        return sd_diag_set(d, SD_ESTORE, "store: link %s: %s", path,
                           strerror(errno));
    if (access(path, F_OK) == 0) {
        *created = false;
        return 0;
    }
    if (rename(tmp, path) != 0)
        return sd_diag_set(d, SD_ESTORE, "store: rename to %s: %s", path,
                           strerror(errno));
    *created = true;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* SQL at open time (no cached statements yet)                               */

/* Runs SQL without results (pragmas, migrations). */
static int exec_sql(sqlite3 *db, const char *sql, const char *what,
                    struct sd_diag *d)
{
    int rc;

    rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return store__err(db, rc, what, d);
    return 0;
}

/* Runs a one-row, one-integer query such as "PRAGMA user_version". */
static int query_int(sqlite3 *db, const char *sql, int64_t *out,
                     struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    int rc, rv = 0;

    rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(s, 0);
    else if (rc == SQLITE_DONE)
        rv = sd_diag_set(d, SD_ESTORE, "store: %s returned no row", sql);
    else
        rv = store__err(db, rc, sql, d);
    sqlite3_finalize(s);
    return rv;
}

int store__quick_check(sqlite3 *db, char *problem, size_t size,
                       struct sd_diag *d)
{
    const unsigned char *row;
    sqlite3_stmt *s = NULL;
    int rc, rv = 0;

    /* (1): stop at the first problem; one is enough to refuse. */
    rc = sqlite3_prepare_v2(db, "PRAGMA quick_check(1)", -1, &s, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        row = sqlite3_column_text(s, 0);
        if (row == NULL || strcmp((const char *)row, "ok") != 0) {
            one_line(problem, size, row != NULL ? (const char *)row : "?");
            rv = SD_ECORRUPT;
        }
    } else if ((rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB) {
        one_line(problem, size, sqlite3_errmsg(db));
        rv = SD_ECORRUPT;
    } else {
        rv = store__err(db, rc, "checking the database", d);
    }
    sqlite3_finalize(s);
    return rv;
}

/* ------------------------------------------------------------------------ */
/* Schema                                                                    */

/*
 * Refuses a database that is not shardd's or is newer than this build,
 * before anything is written to it, and sets *version.  The file started
 * like a SQLite database, so a header SQLite cannot read is damage.
 */
static int check_header(struct store *st, const char *path, int64_t *version,
                        struct sd_diag *d)
{
    char what[160];
    int64_t app = 0, uv = 0, nobjects = 0;
    int rv;

    rv = query_int(st->db, "PRAGMA application_id", &app, d);
    if (rv == 0)
        rv = query_int(st->db, "PRAGMA user_version", &uv, d);
    if (rv == 0 && app == 0)
        rv = query_int(st->db, "SELECT count(*) FROM sqlite_master", &nobjects,
                       d);
    if (rv == SD_ECORRUPT || rv == SD_EFORMAT) {
        one_line(what, sizeof(what), sqlite3_errmsg(st->db));
        return refuse_damaged(path, what, d);
    }
    if (rv != 0)
        return rv;
    if (app == STORE_APPLICATION_ID && uv > STORE_SCHEMA_VERSION)
        return sd_diag_set(d, SD_ENEWER,
                           "database schema version %lld is newer than this "
                           "shardd supports (%d); upgrade shardd",
                           (long long)uv, STORE_SCHEMA_VERSION);
    if (app == STORE_APPLICATION_ID && uv >= 1) {
        *version = uv;
        return 0;
    }
    if (app != STORE_APPLICATION_ID && app != 0)
        snprintf(what, sizeof(what),
                 "another application's SQLite database (application_id "
                 "%#llx, not shardd's %#x)",
                 (unsigned long long)app, STORE_APPLICATION_ID);
    else if (app == 0)
        snprintf(what, sizeof(what),
                 "a SQLite database without shardd's schema "
                 "(application_id 0, user_version %lld, %lld schema "
                 "objects)",
                 (long long)uv, (long long)nobjects);
    else
        snprintf(what, sizeof(what),
                 "a SQLite database with shardd's application_id but no "
                 "schema version");
    return refuse_foreign(path, what, d);
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
        rv = exec_sql(st->db, "BEGIN IMMEDIATE", what, d);
        if (rv != 0)
            return rv;
        /* Another process may have migrated while we waited for the lock. */
        rv = query_int(st->db, "PRAGMA user_version", &uv, d);
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
            rv = exec_sql(st->db, store__migrations[v - 1], what, d);
            if (rv != 0)
                goto out_rollback;
            snprintf(sql, sizeof(sql), "PRAGMA user_version = %lld",
                     (long long)v);
            rv = exec_sql(st->db, sql, what, d);
            if (rv != 0)
                goto out_rollback;
        }
        rv = exec_sql(st->db, "COMMIT", what, d);
        if (rv != 0)
            goto out_rollback;
    }
    return 0;

out_rollback:
    if (!sqlite3_get_autocommit(st->db))
        sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
    return rv;
}

/* Read-write set-up: WAL, durability, then the schema from `version`. */
static int setup_rw(struct store *st, unsigned flags, int64_t version,
                    struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    const unsigned char *mode;
    int rc, rv = 0;

    rc = sqlite3_prepare_v2(st->db, "PRAGMA journal_mode = WAL", -1, &s, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        /* ":memory:" databases stay in "memory" mode; files must do WAL. */
        mode = sqlite3_column_text(s, 0);
        if (mode == NULL || (strcmp((const char *)mode, "wal") != 0 &&
                             strcmp((const char *)mode, "memory") != 0))
            rv = sd_diag_set(d, SD_ESTORE, "store: cannot set WAL mode (%s)",
                             mode != NULL ? (const char *)mode : "?");
    } else {
        rv = store__err(st->db, rc, "setting WAL mode", d);
    }
    sqlite3_finalize(s);
    if (rv != 0)
        return rv;
    /*
     * In WAL mode NORMAL syncs only at checkpoints: a commit is in the WAL
     * (the OS's page cache) when COMMIT returns, so it survives the process
     * dying; FULL also syncs the WAL at every commit, for power loss.
     */
    rv = exec_sql(st->db,
                  (flags & STORE_OPEN_DURABLE) ? "PRAGMA synchronous = FULL"
                                               : "PRAGMA synchronous = NORMAL",
                  "setting synchronous", d);
    if (rv != 0)
        return rv;
    return migrate(st, version, d);
}

/* ------------------------------------------------------------------------ */
/* Opening and closing                                                       */

/* A handle on `path`; SQLite creates the file only when `create`. */
static int connect(const char *path, unsigned flags, bool create,
                   struct store **out, struct sd_diag *d)
{
    struct store *st;
    int oflags, rc, rv;

    st = calloc(1, sizeof(*st));
    if (st == NULL)
        return sd_diag_set(d, SD_ENOMEM, "store: out of memory");
    /* NOMUTEX: a handle is used by one thread at a time (store.h). */
    oflags = SQLITE_OPEN_NOMUTEX |
             ((flags & STORE_OPEN_READONLY) ? SQLITE_OPEN_READONLY
                                            : SQLITE_OPEN_READWRITE) |
             (create ? SQLITE_OPEN_CREATE : 0);
    rc = sqlite3_open_v2(path, &st->db, oflags, NULL);
    if (rc != SQLITE_OK) {
        rv = store__err(st->db, rc, path, d);
        sqlite3_close(st->db); /* NULL-safe */
        free(st);
        return rv;
    }
    sqlite3_extended_result_codes(st->db, 1);
    sqlite3_busy_timeout(st->db, STORE_BUSY_TIMEOUT_MS);
    /* What the migrations call (store_int.h). */
    rc = sqlite3_create_function_v2(st->db, "shardd_fp32_tables", 2,
                                    SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL,
                                    store__sql_fp32_tables, NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        rv = store__err(st->db, rc, path, d);
        sqlite3_close(st->db);
        free(st);
        return rv;
    }
    *out = st;
    return 0;
}

/*
 * Creates a new, migrated database at `path`, where no file exists.  It is
 * built under a temporary name, mode 0600 whatever the umask (SQLite gives
 * the -wal and -shm it makes beside a database the database's mode), and
 * linked into place complete, so that `path` never holds a half-made store.
 * *created is false when another process made `path` first.
 */
static int create_store(const char *path, unsigned flags, bool *created,
                        struct sd_diag *d)
{
    static const char *const sidecar[] = {"-wal", "-shm", "-journal"};
    char tmp[STORE__PATH_MAX], side[STORE__PATH_MAX + 16], dir[STORE__PATH_MAX];
    struct store *t = NULL;
    size_t i;
    int rv;

    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.new-XXXXXX", path) >=
            sizeof(tmp) ||
        store__dir_of(path, dir, sizeof(dir)) != 0)
        return sd_diag_set(d, SD_EINVAL, "store: path is too long");
    rv = store__make_private(tmp, d);
    if (rv != 0)
        return rv;
    rv = connect(tmp, flags, false, &t, d);
    if (rv == 0) {
        rv = setup_rw(t, flags, 0, d);
        store_close(t); /* the last close folds the WAL into the file */
    }
    if (rv == 0)
        rv = store__sync_path(tmp, false, d);
    if (rv == 0)
        rv = publish(tmp, path, created, d);
    unlink(tmp); /* after link(), only this name goes */
    for (i = 0; i < sizeof(sidecar) / sizeof(sidecar[0]); i++) {
        snprintf(side, sizeof(side), "%s%s", tmp, sidecar[i]);
        unlink(side);
    }
    if (rv == 0)
        rv = store__sync_path(dir, true, d);
    return rv;
}

/*
 * Checks an existing database (`fresh`: one this call just made) and makes
 * it ready: magic, header, quick_check, then the read-only version check or
 * the read-write set-up and migrations.
 */
static int check_existing(struct store *st, const char *path, unsigned flags,
                          bool fresh, struct sd_diag *d)
{
    char problem[160];
    int64_t version = 0;
    int rv;

    rv = check_magic(st, path, d);
    if (rv == 0)
        rv = check_header(st, path, &version, d);
    if (rv != 0)
        return rv;
    if (!fresh) {
        rv = store__quick_check(st->db, problem, sizeof(problem), d);
        if (rv == SD_ECORRUPT)
            return refuse_damaged(path, problem, d);
        if (rv != 0)
            return rv;
    }
    if (!(flags & STORE_OPEN_READONLY))
        return setup_rw(st, flags, version, d);
    if (version != STORE_SCHEMA_VERSION)
        return sd_diag_set(d, SD_ESTATE,
                           "store: %s has schema version %lld, older than "
                           "this shardd's (%d); open it read-write once "
                           "to migrate it",
                           path, (long long)version, STORE_SCHEMA_VERSION);
    return 0;
}

int store_open(const char *path, unsigned flags, struct store **out,
               struct sd_diag *d)
{
    struct store *st = NULL;
    bool exists = false, fresh = false, memory;
    long long wal_bytes;
    int rv;

    if (path == NULL || path[0] == '\0')
        return sd_diag_set(d, SD_EINVAL, "store: path is empty");
    if (out == NULL)
        return sd_diag_set(d, SD_EINVAL, "store: out is NULL");
    if ((flags & ~(unsigned)(STORE_OPEN_READONLY | STORE_OPEN_DURABLE |
                             STORE_OPEN_EXISTING)) != 0)
        return sd_diag_set(d, SD_EINVAL, "store: unknown open flags %#x",
                           flags);
    memory = strcmp(path, ":memory:") == 0;
    if (memory && (flags & STORE_OPEN_READONLY))
        return sd_diag_set(d, SD_EINVAL,
                           "store: a read-only :memory: store is empty");
    wal_bytes = memory ? -1 : file_bytes(path, "-wal");
    if (!memory) {
        rv = inspect_file(path, &exists, d);
        if (rv != 0)
            return rv;
        if (!exists && (flags & (STORE_OPEN_READONLY | STORE_OPEN_EXISTING)))
            return sd_diag_set(d, SD_ENOENT, "store: no database at %s", path);
        /* A log without its database would be replayed into a new one. */
        if (!exists && wal_bytes > 0)
            return refuse_damaged(path,
                                  "the file is missing but its -wal is "
                                  "there",
                                  d);
        if (!exists) {
            rv = create_store(path, flags, &fresh, d);
            if (rv != 0)
                return rv;
        }
    }
    rv = connect(path, flags, memory, &st, d);
    if (rv != 0)
        return rv;
    rv = memory ? setup_rw(st, flags, 0, d)
                : check_existing(st, path, flags, fresh, d);
    if (rv == 0)
        rv = exec_sql(st->db, "PRAGMA foreign_keys = ON",
                      "enabling foreign keys", d);
    if (rv != 0) {
        /* A refused file and its log stay as they were found. */
        if (wal_bytes > 0)
            sqlite3_db_config(st->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1,
                              NULL);
        store_close(st);
        return rv;
    }
    *out = st;
    return 0;
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

/* ------------------------------------------------------------------------ */
/* Integrity                                                                 */

/*
 * Runs a checking pragma whose rows are problems ("ok" meaning none) and
 * returns `err` with the first one.
 */
static int check_pragma(struct store *st, const char *sql, int err,
                        struct sd_diag *d)
{
    sqlite3_stmt *s = NULL;
    const unsigned char *first;
    char problem[256];
    int rc, rv = 0;

    rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        /* integrity_check: one text column; foreign_key_check: table name. */
        first = sqlite3_column_text(s, 0);
        if (first == NULL || strcmp((const char *)first, "ok") != 0) {
            one_line(problem, sizeof(problem),
                     first != NULL ? (const char *)first : "?");
            rv = sd_diag_set(d, err, "store: %s: %s", sql, problem);
        }
    } else if (rc != SQLITE_DONE) {
        rv = store__err(st->db, rc, sql, d);
    }
    sqlite3_finalize(s);
    return rv;
}

int store_integrity_check(struct store *st, struct sd_diag *d)
{
    int rv;

    rv = check_pragma(st, "PRAGMA integrity_check", SD_ECORRUPT, d);
    if (rv == 0)
        rv = check_pragma(st, "PRAGMA foreign_key_check", SD_ESTORE, d);
    return rv;
}
