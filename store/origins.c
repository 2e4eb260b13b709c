/*
 * Samples from other nodes of a fleet (store.h, docs/fleet.md): stored
 * once per (origin node, origin id), whatever how often they are pushed.
 */
#include <stdio.h>
#include <string.h>

#include "store_int.h"

static int check_from(struct store *st, const char *origin,
                      const int64_t *origin_ids, size_t n, struct sd_diag *d)
{
    size_t i;
    int rv;

    rv =
        store__check_text(origin, STORE_NAME_MAX, true, "samples", "origin", d);
    if (rv == 0)
        rv = store__check_no_batch(st, d);
    for (i = 0; rv == 0 && i < n; i++)
        if (origin_ids[i] < 1)
            rv = sd_diag_set(d, SD_EINVAL,
                             "samples[%zu]: origin id %lld must be >= 1", i,
                             (long long)origin_ids[i]);
    return rv;
}

/* Stores s unless (origin, origin_id) is held; *added says which. */
static int add_one(struct store *st, const char *origin, int64_t origin_id,
                   const struct store_sample *s, bool *added, struct sd_diag *d)
{
    int64_t held = 0, id = 0;
    int rv;

    *added = false;
    rv = store__one(st, STORE__SQL_ORIGIN_HAS,
                    STORE__ARGS(STORE__TEXT(origin), STORE__INT(origin_id)),
                    "looking a sample up", store__row_int, &held, d);
    if (rv < 0)
        return rv;
    if (held > 0)
        return 0;
    rv = store_sample_add(st, s, &id, d);
    if (rv == 0)
        rv = store__exec(st, STORE__SQL_ORIGIN_INSERT,
                         STORE__ARGS(STORE__TEXT(origin), STORE__INT(origin_id),
                                     STORE__INT(id)),
                         "recording a sample's origin", d);
    *added = rv == 0;
    return rv;
}

int store_sample_add_from(struct store *st, const char *origin,
                          const int64_t *origin_ids,
                          const struct store_sample *s, size_t n,
                          uint64_t *stored, int64_t *last, struct sd_diag *d)
{
    uint64_t count = 0;
    int64_t top = 0;
    bool added;
    size_t i;
    int rv;

    rv = check_from(st, origin, origin_ids, n, d);
    if (rv != 0)
        return rv;
    rv = store__tx_begin(st, d);
    if (rv != 0)
        return rv;
    for (i = 0; i < n; i++) {
        rv = add_one(st, origin, origin_ids[i], &s[i], &added, d);
        if (rv != 0) {
            char what[STORE_MESSAGE_MAX];

            snprintf(what, sizeof(what), "%s", d != NULL ? d->msg : "");
            sd_diag_set(d, rv, "samples[%zu]: %s", i, what);
            goto fail_tx;
        }
        count += added;
    }
    rv =
        store__one(st, STORE__SQL_ORIGIN_LAST, STORE__ARGS(STORE__TEXT(origin)),
                   "reading an origin", store__row_int, &top, d);
    if (rv < 0)
        goto fail_tx;
    rv = store__tx_commit(st, d);
    if (rv != 0)
        return rv;
    if (stored != NULL)
        *stored = count;
    if (last != NULL)
        *last = top;
    return 0;

fail_tx:
    store__tx_rollback(st);
    return rv;
}
