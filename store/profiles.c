/*
 * Hardware profiles (store.h): the names under which samples and models are
 * kept, e.g. "cuda/NVIDIA H100 80GB HBM3/65536".
 */
#include <string.h>

#include "store_int.h"

static int check_profile(const struct store_profile *p, struct sd_diag *d)
{
    int rv;

    if (p == NULL)
        return sd_diag_set(d, SD_EINVAL, "profile: missing");
    rv =
        store__check_text(p->name, sizeof(p->name), true, "profile", "name", d);
    if (rv == 0)
        rv = store__check_text(p->backend, sizeof(p->backend), true, "profile",
                               "backend", d);
    if (rv == 0)
        rv = store__check_text(p->device_model, sizeof(p->device_model), true,
                               "profile", "device_model", d);
    if (rv == 0 && p->batch_size < 1)
        rv = sd_diag_set(d, SD_EINVAL, "profile \"%s\": batch_size %lld < 1",
                         p->name, (long long)p->batch_size);
    return rv;
}

/* The current row of STORE__SQL_PROFILE_GET or _LIST. */
static int profile_row(sqlite3_stmt *s, void *row, struct sd_diag *d)
{
    struct store_profile *p = row;

    (void)d;
    p->id = sqlite3_column_int64(s, 0);
    store__col_text(s, 1, p->name, sizeof(p->name));
    store__col_text(s, 2, p->backend, sizeof(p->backend));
    store__col_text(s, 3, p->device_model, sizeof(p->device_model));
    p->batch_size = sqlite3_column_int64(s, 4);
    p->created_ms = sqlite3_column_int64(s, 5);
    return 0;
}

/* Reads the profile `name` into *p; returns 1 found, 0 none, or an error. */
static int profile_lookup(struct store *st, const char *name,
                          struct store_profile *p, struct sd_diag *d)
{
    return store__one(st, STORE__SQL_PROFILE_GET,
                      STORE__ARGS(STORE__TEXT(name)), "reading a profile",
                      profile_row, p, d);
}

int store_profile_list(struct store *st, struct store_profile **out, size_t *n,
                       struct sd_diag *d)
{
    static const struct store__rows rows = {sizeof(**out), profile_row, NULL};
    void *arr;
    int rv;

    rv = store__all(st, STORE__SQL_PROFILE_LIST, STORE__NOARGS,
                    "listing profiles", &rows, &arr, n, d);
    if (rv == 0)
        *out = arr;
    return rv;
}

int store_profile_get(struct store *st, const char *name,
                      struct store_profile *out, struct sd_diag *d)
{
    struct store_profile p;
    int rv;

    rv = store__check_text(name, STORE_NAME_MAX, true, "profile", "name", d);
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
    int rv;

    rv = check_profile(p, d);
    if (rv == 0)
        rv = store__check_no_batch(st, d);
    if (rv != 0)
        return rv;
    /* One transaction, so two creators of one profile agree on its id. */
    rv = store__tx_begin(st, d);
    if (rv != 0)
        return rv;
    rv = profile_lookup(st, p->name, &old, d);
    if (rv < 0)
        goto out_rollback;
    if (rv == 1 && (strcmp(old.backend, p->backend) != 0 ||
                    strcmp(old.device_model, p->device_model) != 0 ||
                    old.batch_size != p->batch_size)) {
        rv = sd_diag_set(d, SD_EINVAL,
                         "profile \"%s\" exists with backend %s, device "
                         "model \"%s\", batch size %lld",
                         old.name, old.backend, old.device_model,
                         (long long)old.batch_size);
        goto out_rollback;
    }
    if (rv == 0) {
        rv = store__exec(
            st, STORE__SQL_PROFILE_INSERT,
            STORE__ARGS(STORE__TEXT(p->name), STORE__TEXT(p->backend),
                        STORE__TEXT(p->device_model), STORE__INT(p->batch_size),
                        STORE__INT(store__now_ms())),
            "creating a profile", d);
        if (rv != 0)
            goto out_rollback;
        old.id = sqlite3_last_insert_rowid(st->db);
    }
    rv = store__tx_commit(st, d);
    if (rv != 0)
        return rv;
    if (id != NULL)
        *id = old.id;
    return 0;

out_rollback:
    store__tx_rollback(st);
    return rv;
}
