/*
 * The plan audit (store.h): one record per plan the daemon handed out, kept
 * for a while and then trimmed or pruned by age.
 */
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

static int check_audit(const struct store_plan_audit *a, struct sd_diag *d)
{
    int rv;

    if (a == NULL)
        return sd_diag_set(d, SD_EINVAL, "plan audit: missing");
    rv = store__check_text(a->request_hash, sizeof(a->request_hash), true,
                           "plan audit", "request_hash", d);
    if (rv == 0)
        rv = store__check_text(a->algorithm, sizeof(a->algorithm), true,
                               "plan audit", "algorithm", d);
    if (rv == 0)
        rv = store__check_id(a->model_id, true, "plan audit", "model_id", d);
    if (rv == 0 && (a->ntables < 1 || a->ndevices < 1))
        rv = sd_diag_set(d, SD_EINVAL,
                         "plan audit: ntables %d and ndevices %d must be >= 1",
                         (int)a->ntables, (int)a->ndevices);
    if (rv == 0)
        rv = store__check_ms(a->plan_cost_ms, "plan audit", "plan_cost_ms", d);
    if (rv == 0 && (a->plan_json == NULL || a->plan_json[0] == '\0'))
        rv = sd_diag_set(d, SD_EINVAL, "plan audit: plan_json is empty");
    return rv;
}

int store_plan_audit_put(struct store *st, const struct store_plan_audit *a,
                         int64_t *id, struct sd_diag *d)
{
    int rv;

    rv = check_audit(a, d);
    if (rv == 0)
        rv = store__check_no_batch(st, d);
    if (rv != 0)
        return rv;
    rv = store__exec(
        st, STORE__SQL_AUDIT_INSERT,
        STORE__ARGS(STORE__TEXT(a->request_hash), STORE__TEXT(a->algorithm),
                    STORE__ID(a->model_id), STORE__INT(a->ntables),
                    STORE__INT(a->ndevices), STORE__REAL(a->plan_cost_ms),
                    STORE__INT(store__now_ms()), STORE__TEXT(a->plan_json)),
        "recording a plan", d);
    if (rv == 0 && id != NULL)
        *id = sqlite3_last_insert_rowid(st->db);
    return rv;
}

int store_plan_audit_put_many(struct store *st,
                              const struct store_plan_audit *a, size_t n,
                              struct sd_diag *d)
{
    size_t i;
    int rv;

    if (n == 0)
        return 0;
    rv = store__check_no_batch(st, d);
    if (rv == 0)
        rv = store__tx_begin(st, d);
    if (rv != 0)
        return rv;
    for (i = 0; i < n && rv == 0; i++) {
        struct sd_diag why;

        rv = store_plan_audit_put(st, &a[i], NULL, &why);
        if (rv != 0)
            sd_diag_set(d, rv, "plan audit record %zu of %zu: %s", i, n,
                        why.msg);
    }
    if (rv != 0) {
        store__tx_rollback(st);
        return rv;
    }
    return store__tx_commit(st, d);
}

/*
 * Reads the current row of STORE__SQL_AUDIT_GET into one allocation, the
 * plan text after the struct; row is a struct store_plan_audit **.
 */
static int audit_row(sqlite3_stmt *s, void *row, struct sd_diag *d)
{
    struct store_plan_audit *a, **out = row;
    const unsigned char *plan;
    size_t len;

    plan = sqlite3_column_text(s, 8);
    len = (size_t)sqlite3_column_bytes(s, 8);
    a = calloc(1, sizeof(*a) + len + 1);
    if (plan == NULL || a == NULL) {
        free(a);
        return sd_diag_set(d, SD_ENOMEM, "store: out of memory");
    }
    a->id = sqlite3_column_int64(s, 0);
    store__col_text(s, 1, a->request_hash, sizeof(a->request_hash));
    store__col_text(s, 2, a->algorithm, sizeof(a->algorithm));
    a->model_id = sqlite3_column_int64(s, 3);
    a->ntables = sqlite3_column_int(s, 4);
    a->ndevices = sqlite3_column_int(s, 5);
    a->plan_cost_ms = sqlite3_column_double(s, 6);
    a->created_ms = sqlite3_column_int64(s, 7);
    memcpy(a + 1, plan, len + 1);
    a->plan_json = (const char *)(a + 1);
    *out = a;
    return 0;
}

int store_plan_audit_get(struct store *st, int64_t id,
                         struct store_plan_audit **out, struct sd_diag *d)
{
    int rv;

    rv = store__one(st, STORE__SQL_AUDIT_GET, STORE__ARGS(STORE__INT(id)),
                    "reading a plan record", audit_row, out, d);
    if (rv == 0)
        return sd_diag_set(d, SD_ENOENT, "plan audit %lld: no such record",
                           (long long)id);
    return rv < 0 ? rv : 0;
}

/* One row of STORE__SQL_AUDIT_LIST (no plan); row is a struct
 * store_plan_audit. */
static int audit_list_row(sqlite3_stmt *s, void *row, struct sd_diag *d)
{
    struct store_plan_audit *a = row;

    (void)d;
    memset(a, 0, sizeof(*a));
    a->id = sqlite3_column_int64(s, 0);
    store__col_text(s, 1, a->request_hash, sizeof(a->request_hash));
    store__col_text(s, 2, a->algorithm, sizeof(a->algorithm));
    a->model_id = sqlite3_column_int64(s, 3);
    a->ntables = sqlite3_column_int(s, 4);
    a->ndevices = sqlite3_column_int(s, 5);
    a->plan_cost_ms = sqlite3_column_double(s, 6);
    a->created_ms = sqlite3_column_int64(s, 7);
    return 0;
}

int store_plan_audit_list(struct store *st, size_t limit,
                          struct store_plan_audit **out, size_t *n,
                          struct sd_diag *d)
{
    static const struct store__rows rows = {sizeof(**out), audit_list_row,
                                            NULL};
    void *arr;
    int rv;

    rv = store__all(st, STORE__SQL_AUDIT_LIST,
                    STORE__ARGS(STORE__INT(store__limit(limit))),
                    "listing plan records", &rows, &arr, n, d);
    if (rv == 0)
        *out = arr;
    return rv;
}

/* Runs a deleting statement with one argument; sets *n (may be NULL). */
static int audit_delete(struct store *st, enum store__sql sql, int64_t arg,
                        const char *what, uint64_t *n, struct sd_diag *d)
{
    int rv;

    rv = store__check_no_batch(st, d);
    if (rv == 0)
        rv = store__exec(st, sql, STORE__ARGS(STORE__INT(arg)), what, d);
    if (rv == 0 && n != NULL)
        *n = (uint64_t)sqlite3_changes(st->db);
    return rv;
}

int store_plan_audit_trim(struct store *st, uint64_t keep, uint64_t *n,
                          struct sd_diag *d)
{
    if (keep > INT64_MAX)
        return sd_diag_set(d, SD_EINVAL, "keep: too large");
    return audit_delete(st, STORE__SQL_AUDIT_TRIM, (int64_t)keep,
                        "trimming plan records", n, d);
}

int store_plan_audit_prune(struct store *st, int64_t before_ms, uint64_t *n,
                           struct sd_diag *d)
{
    return audit_delete(st, STORE__SQL_AUDIT_PRUNE, before_ms,
                        "pruning plan records", n, d);
}
