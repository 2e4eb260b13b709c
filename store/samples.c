/*
 * Measured samples (store.h): validation, the little-endian blobs a shard and
 * a comm sample's devices are stored as, batches, counting and loading.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardd/le.h"
#include "store_int.h"

/* Bytes of one encoded table and one encoded comm device. */
#define TABLE_REC  (8 + 4 + 4 + 8 + 8 * TABLE_NBINS)
#define DEVICE_REC 32

_Static_assert(TABLE_REC == 160, "schema CHECK says 160");

const char *store_kind_name(enum store_kind kind)
{
    switch (kind) {
    case STORE_KIND_COMPUTE:
        return "compute";
    case STORE_KIND_COMM:
        return "comm";
    case STORE_KIND_POLICY:
        return "policy";
    }
    return "?";
}

/* ------------------------------------------------------------------------ */
/* Little-endian encoding of sample blobs                                    */

static void encode_table(unsigned char *p, const struct table *t)
{
    int k;

    sd_le_put64(p, (uint64_t)t->rows);
    sd_le_put32(p + 8, (uint32_t)t->dim);
    sd_le_put32(p + 12, (uint32_t)t->dtype);
    sd_le_put64(p + 16, sd_f64_bits(t->pooling_factor));
    for (k = 0; k < TABLE_NBINS; k++)
        sd_le_put64(p + 24 + 8 * k, sd_f64_bits(t->bins[k]));
}

static void decode_table(const unsigned char *p, size_t i, struct table *t)
{
    int k;

    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "t%zu", i);
    t->rows = (int64_t)sd_le_get64(p);
    t->dim = (int32_t)sd_le_get32(p + 8);
    t->dtype = (enum table_dtype)sd_le_get32(p + 12);
    t->pooling_factor = sd_f64_of(sd_le_get64(p + 16));
    for (k = 0; k < TABLE_NBINS; k++)
        t->bins[k] = sd_f64_of(sd_le_get64(p + 24 + 8 * k));
}

/*
 * SQL function shardd_fp32_tables(shard, ntables), for schema 5: the shard
 * blob with every table's dtype fp32.  Compute samples stored before schema
 * 5 were measured by kernels that computed every table in fp32 whatever its
 * dtype (kernels.h since): their tables now say what was measured.  A blob
 * of another length than ntables records comes back unchanged (the CHECK
 * refuses such rows anyway).
 */
void store__sql_fp32_tables(sqlite3_context *ctx, int argc, sqlite3_value **v)
{
    const unsigned char *in = sqlite3_value_blob(v[0]);
    size_t n = (size_t)sqlite3_value_bytes(v[0]), i;
    int64_t ntables = sqlite3_value_int64(v[1]);
    unsigned char *out;

    (void)argc;
    if (in == NULL || ntables < 1 || n != (size_t)ntables * TABLE_REC) {
        sqlite3_result_value(ctx, v[0]);
        return;
    }
    out = sqlite3_malloc64(n);
    if (out == NULL) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    memcpy(out, in, n);
    for (i = 0; i < (size_t)ntables; i++)
        sd_le_put32(out + i * TABLE_REC + 12, (uint32_t)TABLE_DTYPE_FP32);
    sqlite3_result_blob64(ctx, out, n, sqlite3_free);
}

static void encode_device(unsigned char *p, const struct store_comm_device *c)
{
    sd_le_put32(p, (uint32_t)c->dim_sum);
    sd_le_put32(p + 4, 0);
    sd_le_put64(p + 8, sd_f64_bits(c->sleep_ms));
    sd_le_put64(p + 16, sd_f64_bits(c->fwd_ms));
    sd_le_put64(p + 24, sd_f64_bits(c->bwd_ms));
}

static void decode_device(const unsigned char *p, struct store_comm_device *c)
{
    c->dim_sum = (int32_t)sd_le_get32(p);
    c->sleep_ms = sd_f64_of(sd_le_get64(p + 8));
    c->fwd_ms = sd_f64_of(sd_le_get64(p + 16));
    c->bwd_ms = sd_f64_of(sd_le_get64(p + 24));
}

/* ------------------------------------------------------------------------ */
/* Validating, adding, loading                                               */

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
        rv = store__check_ms(c->sleep_ms, who, field, d);
        if (rv == 0) {
            snprintf(field, sizeof(field), "devices[%zu].fwd_ms", i);
            rv = store__check_ms(c->fwd_ms, who, field, d);
        }
        if (rv == 0) {
            snprintf(field, sizeof(field), "devices[%zu].bwd_ms", i);
            rv = store__check_ms(c->bwd_ms, who, field, d);
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
    rv = store__check_id(s->profile_id, false, who, "profile_id", d);
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
        rv = store__check_ms(s->measured_ms, who, "measured_ms", d);
    if (rv == 0)
        rv = store__check_ms(s->spread_ms, who, "spread_ms", d);
    if (rv == 0)
        rv = store__check_text(s->device, sizeof(s->device), true, who,
                               "device", d);
    if (rv == 0)
        rv = store__check_text(s->source, sizeof(s->source), true, who,
                               "source", d);
    if (rv == 0)
        rv = store__check_text(s->family, sizeof(s->family), false, who,
                               "family", d);
    return rv;
}

/* Encodes and inserts one sample that check_sample() has accepted. */
static int sample_insert(struct store *st, const struct store_sample *s,
                         int64_t *id, struct sd_diag *d)
{
    const unsigned char *shard = NULL, *devices = NULL;
    unsigned char *blob = NULL;
    size_t i, nbytes;
    int rv;

    nbytes = s->kind == STORE_KIND_COMPUTE ? s->ntables * TABLE_REC
                                           : s->ndevices * DEVICE_REC;
    blob = malloc(nbytes);
    if (blob == NULL)
        return sd_diag_set(d, SD_ENOMEM, "store: out of memory");
    /* One blob; the other column stays NULL, as the schema's CHECK wants. */
    if (s->kind == STORE_KIND_COMPUTE) {
        for (i = 0; i < s->ntables; i++)
            encode_table(blob + i * TABLE_REC, &s->tables[i]);
        shard = blob;
    } else {
        for (i = 0; i < s->ndevices; i++)
            encode_device(blob + i * DEVICE_REC, &s->devices[i]);
        devices = blob;
    }
    rv = store__exec(
        st, STORE__SQL_SAMPLE_INSERT,
        STORE__ARGS(
            STORE__INT(s->profile_id), STORE__TEXT(store_kind_name(s->kind)),
            STORE__INT((int64_t)s->ntables), STORE__BLOB(shard, nbytes),
            STORE__INT((int64_t)s->ndevices), STORE__BLOB(devices, nbytes),
            STORE__REAL(s->measured_ms), STORE__REAL(s->spread_ms),
            STORE__TEXT(s->device), STORE__TEXT(s->source),
            STORE__INT(store__now_ms()), STORE__TEXT(s->family)),
        "adding a sample", d);
    if (rv == 0 && id != NULL)
        *id = sqlite3_last_insert_rowid(st->db);
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
    rv = store__tx_begin(st, d);
    if (rv == 0)
        st->in_batch = true;
    return rv;
}

int store_sample_batch_commit(struct store *st, struct sd_diag *d)
{
    if (!st->in_batch)
        return sd_diag_set(d, SD_EINVAL, "store: no sample batch is open");
    st->in_batch = false;
    return store__tx_commit(st, d);
}

void store_sample_batch_abort(struct store *st)
{
    if (st->in_batch) {
        st->in_batch = false;
        store__tx_rollback(st);
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

    rv = store__check_no_batch(st, d);
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
    rv = store__tx_begin(st, d);
    if (rv != 0)
        return rv;
    for (i = 0; i < n; i++) {
        rv = sample_insert(st, &s[i], NULL, d);
        if (rv != 0)
            goto out_rollback;
    }
    return store__tx_commit(st, d);

out_rollback:
    store__tx_rollback(st);
    return rv;
}

int store_sample_count(struct store *st, int64_t profile_id,
                       enum store_kind kind, int64_t since_ms, uint64_t *n,
                       struct sd_diag *d)
{
    int64_t c = 0;
    int rv;

    if (!store__kind_is_valid(kind))
        return sd_diag_set(d, SD_EINVAL, "samples: kind %d unknown", (int)kind);
    rv = store__one(st, STORE__SQL_SAMPLE_COUNT,
                    STORE__ARGS(STORE__INT(profile_id),
                                STORE__TEXT(store_kind_name(kind)),
                                STORE__INT(since_ms)),
                    "counting samples", store__row_int, &c, d);
    if (rv < 0)
        return rv;
    *n = (uint64_t)c;
    return 0;
}

/*
 * Points *out at blob column `col` of the current row, which must hold
 * `count` records of `rec` bytes: SD_ESTORE naming the sample when not.
 */
static int blob_records(sqlite3_stmt *s, int col, int64_t count, size_t rec,
                        const unsigned char **out, struct sd_diag *d)
{
    const unsigned char *blob = sqlite3_column_blob(s, col);
    size_t nbytes = (size_t)sqlite3_column_bytes(s, col);

    if (blob == NULL || nbytes != (size_t)count * rec)
        return sd_diag_set(d, SD_ESTORE,
                           "store: sample %lld: %s has %zu bytes for %lld "
                           "records",
                           (long long)sqlite3_column_int64(s, 0),
                           sqlite3_column_name(s, col), nbytes,
                           (long long)count);
    *out = blob;
    return 0;
}

/*
 * Decodes the current row of STORE__SQL_SAMPLE_LOAD into *row (a struct
 * store_sample whose arrays it allocates).  SD_ESTORE when the row does not
 * decode; then nothing stays allocated.
 */
static int sample_row(sqlite3_stmt *s, void *row, struct sd_diag *d)
{
    struct store_sample *out = row;
    const unsigned char *blob = NULL;
    int64_t ntables, ndevices;
    size_t i;
    int rv = 0;

    memset(out, 0, sizeof(*out));
    out->id = sqlite3_column_int64(s, 0);
    out->profile_id = sqlite3_column_int64(s, 1);
    ntables = sqlite3_column_int64(s, 3);
    ndevices = sqlite3_column_int64(s, 5);
    if (!store__kind_parse(sqlite3_column_text(s, 2), &out->kind) ||
        ntables < 0 || ntables > STORE_SAMPLE_TABLES_MAX || ndevices < 0 ||
        ndevices > STORE_SAMPLE_DEVICES_MAX)
        return sd_diag_set(d, SD_ESTORE,
                           "store: sample %lld: bad kind or counts",
                           (long long)out->id);
    if (ntables > 0) {
        rv = blob_records(s, 4, ntables, TABLE_REC, &blob, d);
        if (rv != 0)
            return rv;
        out->tables = calloc((size_t)ntables, sizeof(*out->tables));
        if (out->tables == NULL)
            return sd_diag_set(d, SD_ENOMEM, "store: out of memory");
        out->ntables = (size_t)ntables;
        for (i = 0; i < out->ntables; i++)
            decode_table(blob + i * TABLE_REC, i, &out->tables[i]);
    }
    if (ndevices > 0) {
        rv = blob_records(s, 6, ndevices, DEVICE_REC, &blob, d);
        if (rv == 0) {
            out->devices = calloc((size_t)ndevices, sizeof(*out->devices));
            if (out->devices == NULL)
                rv = sd_diag_set(d, SD_ENOMEM, "store: out of memory");
        }
        if (rv != 0) {
            free(out->tables); /* the schema allows one or the other */
            out->tables = NULL;
            return rv;
        }
        out->ndevices = (size_t)ndevices;
        for (i = 0; i < out->ndevices; i++)
            decode_device(blob + i * DEVICE_REC, &out->devices[i]);
    }
    out->measured_ms = sqlite3_column_double(s, 7);
    out->spread_ms = sqlite3_column_double(s, 8);
    store__col_text(s, 9, out->device, sizeof(out->device));
    store__col_text(s, 10, out->source, sizeof(out->source));
    out->created_ms = sqlite3_column_int64(s, 11);
    store__col_text(s, 12, out->family, sizeof(out->family));
    return 0;
}

/* Frees the arrays of one decoded sample (store__rows.release). */
static void sample_release(void *row)
{
    struct store_sample *s = row;

    free(s->tables);
    free(s->devices);
}

int store_samples_load(struct store *st, int64_t profile_id,
                       enum store_kind kind, int64_t after_id, size_t limit,
                       struct store_sample **out, size_t *n, struct sd_diag *d)
{
    static const struct store__rows rows = {sizeof(**out), sample_row,
                                            sample_release};
    void *arr;
    int rv;

    if (!store__kind_is_valid(kind))
        return sd_diag_set(d, SD_EINVAL, "samples: kind %d unknown", (int)kind);
    rv = store__all(
        st, STORE__SQL_SAMPLE_LOAD,
        STORE__ARGS(STORE__INT(profile_id), STORE__TEXT(store_kind_name(kind)),
                    STORE__INT(after_id), STORE__INT(store__limit(limit))),
        "loading samples", &rows, &arr, n, d);
    if (rv == 0)
        *out = arr;
    return rv;
}

/*
 * The id just before the newest `newest` samples of (profile, kind), or 0
 * when there are no more than that (or `newest` is 0).
 */
static int newest_after(struct store *st, int64_t profile_id,
                        enum store_kind kind, size_t newest, int64_t *after_id,
                        struct sd_diag *d)
{
    int64_t id = 0;
    int rv;

    if (!store__kind_is_valid(kind))
        return sd_diag_set(d, SD_EINVAL, "samples: kind %d unknown", (int)kind);
    if (newest > 0) {
        rv = store__one(st, STORE__SQL_SAMPLE_NEWEST,
                        STORE__ARGS(STORE__INT(profile_id),
                                    STORE__TEXT(store_kind_name(kind)),
                                    STORE__INT(newest > (size_t)INT64_MAX
                                                   ? INT64_MAX
                                                   : (int64_t)newest)),
                        "finding the newest samples", store__row_int, &id, d);
        if (rv < 0)
            return rv;
    }
    *after_id = id;
    return 0;
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
