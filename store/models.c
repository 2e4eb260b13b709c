/*
 * Cost-model versions (store.h): storing, loading, activating, listing and
 * pruning.  A version's blobs are opaque here; the trainer owns their format.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

/* The per-family figures: at most STORE_MODEL_FAMILIES_MAX, each family
 * named once, counts >= 0, errors finite. */
static int check_families(const struct store_model_metrics *mx,
                          struct sd_diag *d)
{
    const struct store_family_metrics *f;
    char who[48];
    size_t i, j;
    int rv;

    if (mx->nfamilies > STORE_MODEL_FAMILIES_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           "model: metrics: %zu families, at most %d",
                           mx->nfamilies, STORE_MODEL_FAMILIES_MAX);
    for (i = 0; i < mx->nfamilies; i++) {
        f = &mx->families[i];
        snprintf(who, sizeof(who), "model: metrics.families[%zu]", i);
        rv = store__check_text(f->family, sizeof(f->family), true, who,
                               "family", d);
        if (rv == 0)
            rv = store__check_ms(f->mape, who, "mape", d);
        if (rv != 0)
            return rv;
        if (f->samples < 0 || !isfinite(f->signed_median))
            return sd_diag_set(d, SD_EINVAL,
                               "%s: samples < 0 or a signed median that is "
                               "not finite",
                               who);
        for (j = 0; j < i; j++)
            if (strcmp(mx->families[j].family, f->family) == 0)
                return sd_diag_set(d, SD_EINVAL, "%s: family \"%s\" repeats",
                                   who, f->family);
    }
    return 0;
}

static int check_model(const struct store_model *m, struct sd_diag *d)
{
    const struct store_model_info *mi;
    const struct store_model_metrics *mx;
    int rv;

    if (m == NULL)
        return sd_diag_set(d, SD_EINVAL, "model: missing");
    mi = &m->info;
    mx = &mi->metrics;
    rv = store__check_id(mi->profile_id, false, "model", "profile_id", d);
    if (rv != 0)
        return rv;
    if (!store__model_kind_is_valid(mi->kind))
        return sd_diag_set(d, SD_EINVAL, "model: kind %d unknown",
                           (int)mi->kind);
    if (mi->kind != STORE_KIND_POLICY && mi->base_model_id != 0)
        return sd_diag_set(d, SD_EINVAL,
                           "model: base_model_id is for policies, not %s "
                           "models",
                           store_kind_name(mi->kind));
    rv = store__check_id(mi->base_model_id, true, "model", "base_model_id", d);
    if (rv != 0)
        return rv;
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
    rv = store__check_ms(mx->val_mape, "model", "metrics.val_mape", d);
    if (rv == 0)
        rv = store__check_ms(mx->test_mape, "model", "metrics.test_mape", d);
    if (rv == 0)
        rv = store__check_ms(mx->gate_ratio, "model", "metrics.gate_ratio", d);
    if (rv == 0 &&
        (mx->train_samples < 0 || mx->val_samples < 0 || mx->test_samples < 0))
        rv = sd_diag_set(d, SD_EINVAL, "model: metrics: a sample count is < 0");
    if (rv == 0)
        rv = check_families(mx, d);
    return rv;
}

/* Reads the MODEL_COLS (sql.c) of the current row into a model_info. */
static int model_row(sqlite3_stmt *s, void *row, struct sd_diag *d)
{
    struct store_model_info *mi = row;
    const void *head;

    memset(mi, 0, sizeof(*mi));
    mi->id = sqlite3_column_int64(s, 0);
    mi->profile_id = sqlite3_column_int64(s, 1);
    store__col_text(s, 2, mi->profile, sizeof(mi->profile));
    if (!store__kind_parse(sqlite3_column_text(s, 3), &mi->kind))
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
    mi->base_model_id = sqlite3_column_int64(s, 14); /* NULL reads as 0 */
    mi->metrics.gate_ratio = sqlite3_column_double(s, 15);
    head = sqlite3_column_blob(s, 16);
    mi->head_bytes = (size_t)sqlite3_column_bytes(s, 16);
    if (head == NULL || mi->head_bytes > sizeof(mi->head))
        mi->head_bytes = 0;
    if (mi->head_bytes > 0)
        memcpy(mi->head, head, mi->head_bytes);
    return 0;
}

/*
 * Reads the current row of STORE__SQL_MODEL_GET(_ACTIVE) into one allocation:
 * the struct, then the weights, then the norm.
 */
static int model_row_full(sqlite3_stmt *s, void *row, struct sd_diag *d)
{
    struct store_model **out = row;
    struct store_model_info mi;
    struct store_model *m;
    const void *w, *nm;
    size_t wbytes, nbytes;
    unsigned char *p;
    int rv;

    rv = model_row(s, &mi, d);
    if (rv != 0)
        return rv;
    w = sqlite3_column_blob(s, STORE__MODEL_NCOLS);
    wbytes = (size_t)sqlite3_column_bytes(s, STORE__MODEL_NCOLS);
    nm = sqlite3_column_blob(s, STORE__MODEL_NCOLS + 1);
    nbytes = (size_t)sqlite3_column_bytes(s, STORE__MODEL_NCOLS + 1);
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

/* Inserts the per-family figures of model `id` (inside put's
 * transaction). */
static int put_families(struct store *st, int64_t id,
                        const struct store_model_metrics *mx, struct sd_diag *d)
{
    const struct store_family_metrics *f;
    size_t i;
    int rv = 0;

    for (i = 0; rv == 0 && i < mx->nfamilies; i++) {
        f = &mx->families[i];
        rv = store__exec(
            st, STORE__SQL_MODEL_FAMILY_INSERT,
            STORE__ARGS(STORE__INT(id), STORE__TEXT(f->family),
                        STORE__INT(f->held_out ? 1 : 0), STORE__INT(f->samples),
                        STORE__REAL(f->mape), STORE__REAL(f->signed_median)),
            "storing a model's family metrics", d);
    }
    return rv;
}

int store_model_put(struct store *st, const struct store_model *m, int64_t *id,
                    struct sd_diag *d)
{
    const struct store_model_info *mi;
    int64_t newid;
    int rv;

    rv = check_model(m, d);
    if (rv == 0)
        rv = store__check_no_batch(st, d);
    if (rv == 0)
        rv = store__tx_begin(st, d);
    if (rv != 0)
        return rv;
    mi = &m->info;
    /* A model without norm stores an empty blob: the column is NOT NULL. */
    rv = store__exec(
        st, STORE__SQL_MODEL_INSERT,
        STORE__ARGS(
            STORE__INT(mi->profile_id), STORE__TEXT(store_kind_name(mi->kind)),
            STORE__INT(mi->format_version),
            STORE__BLOB(m->weights, mi->weights_bytes),
            STORE__BLOB(mi->norm_bytes > 0 ? m->norm : "", mi->norm_bytes),
            STORE__REAL(mi->metrics.val_mape),
            STORE__REAL(mi->metrics.test_mape),
            STORE__INT(mi->metrics.train_samples),
            STORE__INT(mi->metrics.val_samples),
            STORE__INT(mi->metrics.test_samples), STORE__INT(store__now_ms()),
            STORE__ID(mi->base_model_id), STORE__REAL(mi->metrics.gate_ratio)),
        "storing a model", d);
    newid = sqlite3_last_insert_rowid(st->db);
    if (rv == 0)
        rv = put_families(st, newid, &mi->metrics, d);
    if (rv != 0) {
        store__tx_rollback(st);
        return rv;
    }
    rv = store__tx_commit(st, d);
    if (rv == 0 && id != NULL)
        *id = newid;
    return rv;
}

/* One row of STORE__SQL_MODEL_FAMILY_LOAD. */
static int family_row(sqlite3_stmt *s, void *row, struct sd_diag *d)
{
    struct store_family_metrics *f = row;

    (void)d;
    memset(f, 0, sizeof(*f));
    store__col_text(s, 0, f->family, sizeof(f->family));
    f->held_out = sqlite3_column_int(s, 1) != 0;
    f->samples = sqlite3_column_int64(s, 2);
    f->mape = sqlite3_column_double(s, 3);
    f->signed_median = sqlite3_column_double(s, 4);
    return 0;
}

/* Fills mi->metrics.families from the store (at most the first
 * STORE_MODEL_FAMILIES_MAX; put never stores more). */
static int load_families(struct store *st, struct store_model_info *mi,
                         struct sd_diag *d)
{
    static const struct store__rows rows = {sizeof(struct store_family_metrics),
                                            family_row, NULL};
    struct store_family_metrics *arr = NULL;
    size_t n = 0;
    int rv;

    rv = store__all(
        st, STORE__SQL_MODEL_FAMILY_LOAD, STORE__ARGS(STORE__INT(mi->id)),
        "loading a model's family metrics", &rows, (void **)&arr, &n, d);
    if (rv != 0)
        return rv;
    if (n > STORE_MODEL_FAMILIES_MAX)
        n = STORE_MODEL_FAMILIES_MAX;
    mi->metrics.nfamilies = n;
    if (n > 0)
        memcpy(mi->metrics.families, arr, n * sizeof(*arr));
    free(arr);
    return 0;
}

/* Adds the family figures to a model just read; frees it on failure. */
static int with_families(struct store *st, struct store_model **m,
                         struct sd_diag *d)
{
    int rv = load_families(st, &(*m)->info, d);

    if (rv != 0) {
        free(*m);
        *m = NULL;
    }
    return rv;
}

int store_model_get(struct store *st, int64_t id, struct store_model **out,
                    struct sd_diag *d)
{
    int rv;

    rv = store__one(st, STORE__SQL_MODEL_GET, STORE__ARGS(STORE__INT(id)),
                    "reading a model", model_row_full, out, d);
    if (rv == 0)
        return sd_diag_set(d, SD_ENOENT, "model %lld: no such version",
                           (long long)id);
    return rv < 0 ? rv : with_families(st, out, d);
}

int store_model_get_active(struct store *st, int64_t profile_id,
                           enum store_kind kind, struct store_model **out,
                           struct sd_diag *d)
{
    int rv;

    if (!store__model_kind_is_valid(kind))
        return sd_diag_set(d, SD_EINVAL, "model: kind %d unknown", (int)kind);
    rv = store__one(
        st, STORE__SQL_MODEL_GET_ACTIVE,
        STORE__ARGS(STORE__INT(profile_id), STORE__TEXT(store_kind_name(kind))),
        "reading the active model", model_row_full, out, d);
    if (rv == 0)
        return sd_diag_set(d, SD_ENOENT, "profile %lld has no active %s model",
                           (long long)profile_id, store_kind_name(kind));
    return rv < 0 ? rv : with_families(st, out, d);
}

void store_model_free(struct store_model *m)
{
    free(m); /* one allocation, blobs included */
}

/* What a version answers for: STORE__SQL_MODEL_KEY's row. */
struct model_key {
    int64_t profile_id;
    char kind[16];
};

static int model_key_row(sqlite3_stmt *s, void *row, struct sd_diag *d)
{
    struct model_key *k = row;

    (void)d;
    k->profile_id = sqlite3_column_int64(s, 0);
    store__col_text(s, 1, k->kind, sizeof(k->kind));
    return 0;
}

/*
 * Inside a transaction: leaves (profile_id, kind) with no active version and
 * sets *prev to the one that was active, 0 if none.
 */
static int clear_active(struct store *st, int64_t profile_id, const char *kind,
                        int64_t *prev, struct sd_diag *d)
{
    int64_t id = 0;
    int rv;

    rv = store__one(st, STORE__SQL_MODEL_ACTIVE_ID,
                    STORE__ARGS(STORE__INT(profile_id), STORE__TEXT(kind)),
                    "activating a model", store__row_int, &id, d);
    if (rv >= 0)
        rv = store__exec(st, STORE__SQL_MODEL_DEACTIVATE,
                         STORE__ARGS(STORE__INT(profile_id), STORE__TEXT(kind)),
                         "activating a model", d);
    if (rv == 0)
        *prev = id;
    return rv;
}

int store_model_activate(struct store *st, int64_t id, int64_t *previous,
                         struct sd_diag *d)
{
    struct model_key key;
    int64_t prev = 0;
    int rv;

    rv = store__check_no_batch(st, d);
    if (rv == 0)
        rv = store__tx_begin(st, d);
    if (rv != 0)
        return rv;
    rv = store__one(st, STORE__SQL_MODEL_KEY, STORE__ARGS(STORE__INT(id)),
                    "activating a model", model_key_row, &key, d);
    if (rv == 0)
        rv = sd_diag_set(d, SD_ENOENT, "model %lld: no such version",
                         (long long)id);
    if (rv < 0)
        goto out_rollback;
    /* Deactivate first: the unique index allows one active per key. */
    rv = clear_active(st, key.profile_id, key.kind, &prev, d);
    if (rv == 0)
        rv = store__exec(st, STORE__SQL_MODEL_SET_ACTIVE,
                         STORE__ARGS(STORE__INT(id)), "activating a model", d);
    if (rv != 0)
        goto out_rollback;
    rv = store__tx_commit(st, d);
    if (rv != 0)
        return rv;
    if (previous != NULL)
        *previous = prev;
    return 0;

out_rollback:
    store__tx_rollback(st);
    return rv;
}

int store_model_deactivate(struct store *st, int64_t profile_id,
                           enum store_kind kind, int64_t *previous,
                           struct sd_diag *d)
{
    int64_t prev = 0;
    int rv;

    rv = store__check_no_batch(st, d);
    if (rv == 0)
        rv = store__tx_begin(st, d);
    if (rv != 0)
        return rv;
    rv = clear_active(st, profile_id, store_kind_name(kind), &prev, d);
    if (rv != 0) {
        store__tx_rollback(st);
        return rv;
    }
    rv = store__tx_commit(st, d);
    if (rv == 0 && previous != NULL)
        *previous = prev;
    return rv;
}

int store_model_list(struct store *st, int64_t profile_id, size_t limit,
                     struct store_model_info **out, size_t *n,
                     struct sd_diag *d)
{
    static const struct store__rows rows = {sizeof(**out), model_row, NULL};
    void *arr;
    size_t i;
    int rv;

    rv = store__all(
        st, STORE__SQL_MODEL_LIST,
        STORE__ARGS(STORE__INT(profile_id), STORE__INT(store__limit(limit))),
        "listing models", &rows, &arr, n, d);
    if (rv != 0)
        return rv;
    for (i = 0; i < *n && rv == 0; i++)
        rv = load_families(st, &((struct store_model_info *)arr)[i], d);
    if (rv != 0) {
        free(arr);
        return rv;
    }
    *out = arr;
    return 0;
}

int store_model_prune(struct store *st, int64_t profile_id, size_t keep,
                      uint64_t *n, struct sd_diag *d)
{
    const struct store__arg *args;
    int64_t deleted;
    int rv;

    rv = store__check_id(profile_id, false, "model prune", "profile_id", d);
    if (rv == 0)
        rv = store__check_no_batch(st, d);
    if (rv == 0)
        rv = store__tx_begin(st, d);
    if (rv != 0)
        return rv;
    /* The same (profile, keep) picks the same versions in all three. */
    args = STORE__ARGS(
        STORE__INT(profile_id),
        STORE__INT(keep > (size_t)INT64_MAX ? INT64_MAX : (int64_t)keep));
    rv =
        store__exec(st, STORE__SQL_MODEL_PRUNE_JOBS, args, "pruning models", d);
    if (rv == 0)
        rv = store__exec(st, STORE__SQL_MODEL_PRUNE_AUDIT, args,
                         "pruning models", d);
    if (rv == 0)
        rv = store__exec(st, STORE__SQL_MODEL_PRUNE_BASE, args,
                         "pruning models", d);
    if (rv == 0)
        rv = store__exec(st, STORE__SQL_MODEL_PRUNE, args, "pruning models", d);
    if (rv != 0) {
        store__tx_rollback(st);
        return rv;
    }
    deleted = sqlite3_changes64(st->db);
    rv = store__tx_commit(st, d);
    if (rv == 0 && n != NULL)
        *n = (uint64_t)deleted;
    return rv;
}
