/*
 * Backups of a live store (store.h).  SQLite's online backup API copies a
 * consistent snapshot of the database while other handles go on reading and
 * writing it.  The copy goes to a temporary name (mode 0600), is checked
 * with PRAGMA quick_check, synced, and renamed into place as
 * <store name>.backup-<UTC time>; then the oldest backups past `keep` are
 * deleted.  Names sort by time, so the newest is the greatest name.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store_int.h"

#define BACKUP_TAG ".backup-" /* between the store's name and the time */
#define TMP_TAG    ".tmp-"    /* in the name of a copy not yet complete */

/*
 * Where the backups of the database at db_path go: `dir`, or db_path's own
 * directory when dir is NULL.  *base points into db_path at its file name.
 */
static int backup_place(const char *db_path, const char *dir, char *where,
                        size_t size, const char **base, struct sd_diag *d)
{
    const char *slash = strrchr(db_path, '/');

    *base = slash != NULL ? slash + 1 : db_path;
    if ((*base)[0] == '\0')
        return sd_diag_set(d, SD_EINVAL, "store: %s names no file", db_path);
    if (dir != NULL) {
        if (dir[0] == '\0')
            return sd_diag_set(d, SD_EINVAL, "store: backup dir is empty");
        if ((size_t)snprintf(where, size, "%s", dir) >= size)
            return sd_diag_set(d, SD_EINVAL, "store: backup dir too long");
        return 0;
    }
    if (store__dir_of(db_path, where, size) != 0)
        return sd_diag_set(d, SD_EINVAL, "store: path too long");
    return 0;
}

/*
 * Whether the directory entry `name` is a complete backup of `base`:
 * base BACKUP_TAG YYYYmmddTHHMMSS.uuuuuuZ exactly, so that neither a copy
 * in progress nor the -wal and -shm of an opened backup is taken for one.
 */
static bool is_backup(const char *name, const char *base)
{
    static const char shape[] = "ddddddddTdddddd.ddddddZ";
    size_t n = strlen(base), i;

    if (strncmp(name, base, n) != 0 ||
        strncmp(name + n, BACKUP_TAG, strlen(BACKUP_TAG)) != 0)
        return false;
    name += n + strlen(BACKUP_TAG);
    for (i = 0; shape[i] != '\0'; i++) {
        if (shape[i] == 'd' ? !isdigit((unsigned char)name[i])
                            : name[i] != shape[i])
            return false;
    }
    return name[i] == '\0';
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **names, size_t n)
{
    size_t i;

    for (i = 0; names != NULL && i < n; i++)
        free(names[i]);
    free(names);
}

/* Appends a copy of name to *names (*n of *cap); false when out of memory. */
static bool push_name(char ***names, size_t *n, size_t *cap, const char *name)
{
    char **p, *copy;

    if (*n == *cap) {
        *cap = *cap == 0 ? 8 : *cap * 2;
        p = realloc(*names, *cap * sizeof(*p));
        if (p == NULL)
            return false;
        *names = p;
    }
    copy = malloc(strlen(name) + 1);
    if (copy == NULL)
        return false;
    strcpy(copy, name);
    (*names)[(*n)++] = copy;
    return true;
}

/*
 * Lists the backups of `base` in `dir`, oldest first.  On success *names
 * (NULL when *n is 0) is owned by the caller: free_names().  SD_ENOENT when
 * dir does not exist.
 */
static int list_backups(const char *dir, const char *base, char ***names,
                        size_t *n, struct sd_diag *d)
{
    struct dirent *e;
    char **arr = NULL;
    size_t len = 0, cap = 0;
    DIR *dp;
    int rv = 0;

    dp = opendir(dir);
    if (dp == NULL)
        return sd_diag_set(d, errno == ENOENT ? SD_ENOENT : SD_EIO,
                           "store: backup dir %s: %s", dir, strerror(errno));
    while ((e = readdir(dp)) != NULL) {
        if (is_backup(e->d_name, base) &&
            !push_name(&arr, &len, &cap, e->d_name)) {
            rv = sd_diag_set(d, SD_ENOMEM, "store: out of memory");
            break;
        }
    }
    closedir(dp);
    if (rv != 0) {
        free_names(arr, len);
        return rv;
    }
    if (len > 1)
        qsort(arr, len, sizeof(*arr), compare_names);
    *names = arr;
    *n = len;
    return 0;
}

int store_backup_newest(const char *db_path, const char *dir, char *out,
                        size_t size, struct sd_diag *d)
{
    char where[STORE__PATH_MAX];
    const char *base;
    char **names = NULL;
    size_t n = 0;
    int rv;

    if (db_path == NULL || out == NULL)
        return sd_diag_set(d, SD_EINVAL, "store: db_path or out is NULL");
    rv = backup_place(db_path, dir, where, sizeof(where), &base, d);
    if (rv == 0)
        rv = list_backups(where, base, &names, &n, d);
    if (rv != 0)
        return rv;
    if (n == 0)
        rv = sd_diag_set(d, SD_ENOENT, "store: no backup of %s in %s", base,
                         where);
    else if ((size_t)snprintf(out, size, "%s/%s", where, names[n - 1]) >= size)
        rv = sd_diag_set(d, SD_EINVAL, "store: out is too small for %s/%s",
                         where, names[n - 1]);
    free_names(names, n);
    return rv;
}

/*
 * Deletes all but the newest `keep` backups of `base` in `dir`, each with
 * the -wal and -shm that opening it may have left.
 */
static int rotate(const char *dir, const char *base, size_t keep,
                  struct sd_diag *d)
{
    static const char *const suffix[] = {"-wal", "-shm", ""};
    char path[STORE__PATH_MAX];
    char **names = NULL;
    size_t n = 0, i, k;
    int rv;

    rv = list_backups(dir, base, &names, &n, d);
    for (i = 0; rv == 0 && i + keep < n; i++) {
        for (k = 0; rv == 0 && k < sizeof(suffix) / sizeof(suffix[0]); k++) {
            if ((size_t)snprintf(path, sizeof(path), "%s/%s%s", dir, names[i],
                                 suffix[k]) >= sizeof(path) ||
                (unlink(path) != 0 && errno != ENOENT))
                rv = sd_diag_set(d, SD_EIO,
                                 "store: deleting the old backup %s: %s", path,
                                 strerror(errno));
        }
    }
    free_names(names, n);
    return rv;
}

/*
 * Copies the database of st into the empty file `tmp` in one backup step,
 * so that it reads one snapshot, and checks the copy: a damaged store must
 * not rotate the good backups away.
 */
static int copy_to(struct store *st, const char *tmp, struct sd_diag *d)
{
    char problem[160];
    sqlite3_backup *b;
    sqlite3 *dst = NULL;
    int rc, rv;

    rc = sqlite3_open_v2(tmp, &dst, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                         NULL);
    if (rc != SQLITE_OK) {
        rv = store__err(dst, rc, "opening the backup", d);
        goto out_close;
    }
    sqlite3_extended_result_codes(dst, 1);
    b = sqlite3_backup_init(dst, "main", st->db, "main");
    if (b == NULL) {
        rv = store__err(dst, sqlite3_errcode(dst), "starting the backup", d);
        goto out_close;
    }
    rc = sqlite3_backup_step(b, -1);
    /* finish() leaves the step's error on dst, message included. */
    if (sqlite3_backup_finish(b) != SQLITE_OK || rc != SQLITE_DONE) {
        rv = store__err(dst, rc != SQLITE_DONE ? rc : sqlite3_errcode(dst),
                        "copying the store", d);
        goto out_close;
    }
    rv = store__quick_check(dst, problem, sizeof(problem), d);
    if (rv == SD_ECORRUPT)
        rv = sd_diag_set(d, SD_ECORRUPT,
                         "store: the backup copy fails its check (%s): the "
                         "store itself is damaged; older backups are kept",
                         problem);
out_close:
    sqlite3_close(dst); /* NULL-safe; folds the copy's WAL into it */
    return rv;
}

/* The backup name for now: <base>.backup-YYYYmmddTHHMMSS.uuuuuuZ (UTC). */
static int backup_name(const char *where, const char *base, char *out,
                       size_t size)
{
    struct timespec ts;
    struct tm tm;
    char stamp[32];

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%S", &tm);
    if ((size_t)snprintf(out, size, "%s/%s" BACKUP_TAG "%s.%06ldZ", where, base,
                         stamp, ts.tv_nsec / 1000) >= size)
        return SD_EINVAL;
    return 0;
}

int store_backup(struct store *st, const char *dir, size_t keep, char *written,
                 size_t size, struct sd_diag *d)
{
    char where[STORE__PATH_MAX], final[STORE__PATH_MAX];
    char tmp[STORE__PATH_MAX + 32];
    const char *db_path, *base;
    int rv;

    if (keep < 1)
        return sd_diag_set(d, SD_EINVAL, "store: backup keep must be >= 1");
    rv = store__check_no_batch(st, d);
    if (rv != 0)
        return rv;
    db_path = sqlite3_db_filename(st->db, "main");
    if (db_path == NULL || db_path[0] == '\0')
        return sd_diag_set(d, SD_EINVAL,
                           "store: an in-memory store has no "
                           "file to back up");
    rv = backup_place(db_path, dir, where, sizeof(where), &base, d);
    if (rv != 0)
        return rv;
    if (backup_name(where, base, final, sizeof(final)) != 0 ||
        (size_t)snprintf(tmp, sizeof(tmp), "%s" TMP_TAG "XXXXXX", final) >=
            sizeof(tmp))
        return sd_diag_set(d, SD_EINVAL, "store: backup path too long");
    if (written != NULL && strlen(final) >= size)
        return sd_diag_set(d, SD_EINVAL, "store: `written` is too small for %s",
                           final);
    rv = store__make_private(tmp, d);
    if (rv != 0)
        return rv;
    rv = copy_to(st, tmp, d);
    if (rv == 0)
        rv = store__sync_path(tmp, false, d);
    if (rv == 0 && rename(tmp, final) != 0)
        rv = sd_diag_set(d, SD_EIO, "store: rename to %s: %s", final,
                         strerror(errno));
    if (rv != 0) {
        unlink(tmp);
        return rv;
    }
    rv = store__sync_path(where, true, d);
    if (rv == 0)
        rv = rotate(where, base, keep, d);
    if (rv != 0)
        return rv;
    if (written != NULL)
        memcpy(written, final, strlen(final) + 1);
    return 0;
}
