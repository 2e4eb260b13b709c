/*
 * Jobs (store.h): the durable record of each retrain, its state machine
 * (terminal states are final, enforced by the UPDATE itself), and the clean-up
 * after a daemon that died with jobs in flight.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "store_int.h"

static const char *const job_state_names[] = {
    [STORE_JOB_QUEUED] = "queued",       [STORE_JOB_RUNNING] = "running",
    [STORE_JOB_SUCCEEDED] = "succeeded", [STORE_JOB_FAILED] = "failed",
    [STORE_JOB_CANCELLED] = "cancelled",
};

#define NJOB_STATES (sizeof(job_state_names) / sizeof(job_state_names[0]))

static bool job_state_is_valid(enum store_job_state s)
{
    return s >= STORE_JOB_QUEUED && s <= STORE_JOB_CANCELLED;
}

const char *store_job_state_name(enum store_job_state s)
{
    return job_state_is_valid(s) ? job_state_names[s] : "?";
}

bool store_job_state_is_terminal(enum store_job_state s)
{
    return s == STORE_JOB_SUCCEEDED || s == STORE_JOB_FAILED ||
           s == STORE_JOB_CANCELLED;
}

const char *store_job_kind_name(enum store_job_kind kind)
{
    switch (kind) {
    case STORE_JOB_RETRAIN:
        return "retrain";
    case STORE_JOB_RETRAIN_POLICY:
        return "retrain_policy";
    }
    return "?";
}

static bool job_kind_parse(const unsigned char *t, enum store_job_kind *out)
{
    if (t != NULL && strcmp((const char *)t, "retrain") == 0)
        *out = STORE_JOB_RETRAIN;
    else if (t != NULL && strcmp((const char *)t, "retrain_policy") == 0)
        *out = STORE_JOB_RETRAIN_POLICY;
    else
        return false;
    return true;
}

static bool job_kind_is_valid(enum store_job_kind kind)
{
    return kind == STORE_JOB_RETRAIN || kind == STORE_JOB_RETRAIN_POLICY;
}

static bool job_state_parse(const unsigned char *t, enum store_job_state *out)
{
    size_t i;

    for (i = STORE_JOB_QUEUED; t != NULL && i < NJOB_STATES; i++) {
        if (strcmp((const char *)t, job_state_names[i]) == 0) {
            *out = (enum store_job_state)i;
            return true;
        }
    }
    return false;
}

/* Reads the JOB_SELECT columns (sql.c) of the current row. */
static int job_row(sqlite3_stmt *s, void *row, struct sd_diag *d)
{
    struct store_job *j = row;

    memset(j, 0, sizeof(*j));
    j->id = sqlite3_column_int64(s, 0);
    if (!job_kind_parse(sqlite3_column_text(s, 1), &j->kind) ||
        !job_state_parse(sqlite3_column_text(s, 2), &j->state))
        return sd_diag_set(d, SD_ESTORE,
                           "store: job %lld: unknown kind or "
                           "state",
                           (long long)j->id);
    j->progress = sqlite3_column_double(s, 3);
    store__col_text(s, 4, j->message, sizeof(j->message));
    j->profile_id = sqlite3_column_int64(s, 5); /* NULL reads as 0 */
    store__col_text(s, 6, j->profile, sizeof(j->profile));
    store__col_text(s, 7, j->params, sizeof(j->params));
    j->result_model_id = sqlite3_column_int64(s, 8);
    j->created_ms = sqlite3_column_int64(s, 9);
    j->started_ms = sqlite3_column_int64(s, 10);
    j->finished_ms = sqlite3_column_int64(s, 11);
    return 0;
}

int store_job_create(struct store *st, const struct store_job *j, int64_t *id,
                     struct sd_diag *d)
{
    int rv;

    if (j == NULL)
        return sd_diag_set(d, SD_EINVAL, "job: missing");
    if (!job_kind_is_valid(j->kind))
        return sd_diag_set(d, SD_EINVAL, "job: kind %d unknown", (int)j->kind);
    rv = store__check_id(j->profile_id, true, "job", "profile_id", d);
    if (rv == 0)
        rv = store__check_text(j->message, sizeof(j->message), false, "job",
                               "message", d);
    if (rv == 0)
        rv = store__check_text(j->params, sizeof(j->params), false, "job",
                               "params", d);
    if (rv == 0)
        rv = store__check_no_batch(st, d);
    if (rv != 0)
        return rv;
    rv = store__exec(
        st, STORE__SQL_JOB_INSERT,
        STORE__ARGS(STORE__TEXT(store_job_kind_name(j->kind)),
                    STORE__TEXT(j->message), STORE__ID(j->profile_id),
                    STORE__TEXT(j->params), STORE__INT(store__now_ms())),
        "creating a job", d);
    if (rv == 0 && id != NULL)
        *id = sqlite3_last_insert_rowid(st->db);
    return rv;
}

/* STORE__SQL_JOB_STATE's row: the state, 0 when it does not parse. */
static int job_state_row(sqlite3_stmt *s, void *row, struct sd_diag *d)
{
    enum store_job_state *state = row;

    (void)d;
    if (!job_state_parse(sqlite3_column_text(s, 0), state))
        *state = 0;
    return 0;
}

/* Why an update of job `id` changed nothing: SD_ENOENT or a final state. */
static int job_update_refused(struct store *st, int64_t id, struct sd_diag *d)
{
    enum store_job_state state = 0;
    int rv;

    rv = store__one(st, STORE__SQL_JOB_STATE, STORE__ARGS(STORE__INT(id)),
                    "updating a job", job_state_row, &state, d);
    if (rv == 0)
        return sd_diag_set(d, SD_ENOENT, "job %lld: no such job",
                           (long long)id);
    if (rv < 0)
        return rv;
    if (!job_state_is_valid(state))
        return sd_diag_set(d, SD_ESTORE, "store: job %lld: unknown state",
                           (long long)id);
    return sd_diag_set(d, SD_EINVAL,
                       "job %lld is already %s; that state is final",
                       (long long)id, store_job_state_name(state));
}

int store_job_update(struct store *st, int64_t id, enum store_job_state state,
                     double progress, const char *message,
                     int64_t result_model_id, struct sd_diag *d)
{
    int rv;

    rv = store__check_id(id, false, "job", "id", d);
    if (rv == 0)
        rv =
            store__check_id(result_model_id, true, "job", "result_model_id", d);
    if (rv != 0)
        return rv;
    if (!job_state_is_valid(state))
        return sd_diag_set(d, SD_EINVAL, "job %lld: state %d unknown",
                           (long long)id, (int)state);
    if (!isfinite(progress) || progress < 0 || progress > 1)
        return sd_diag_set(d, SD_EINVAL,
                           "job %lld: progress %g is not in "
                           "[0, 1]",
                           (long long)id, progress);
    if (message != NULL && memchr(message, '\0', STORE_MESSAGE_MAX) == NULL)
        return sd_diag_set(d, SD_EINVAL,
                           "job %lld: message is longer than "
                           "%d bytes",
                           (long long)id, STORE_MESSAGE_MAX - 1);
    rv = store__check_no_batch(st, d);
    if (rv != 0)
        return rv;
    /* A NULL message or result id keeps the old one (coalesce in sql.c). */
    rv = store__exec(
        st, STORE__SQL_JOB_UPDATE,
        STORE__ARGS(STORE__INT(id), STORE__TEXT(job_state_names[state]),
                    STORE__REAL(progress), STORE__TEXT(message),
                    STORE__ID(result_model_id), STORE__INT(store__now_ms())),
        "updating a job", d);
    if (rv == 0 && sqlite3_changes(st->db) == 0)
        rv = job_update_refused(st, id, d);
    return rv;
}

/*
 * Reads the first row of a job query into *out; SD_ENOENT with `none` as the
 * message when there is no row.
 */
static int job_query_one(struct store *st, enum store__sql sql,
                         const struct store__arg *args, struct store_job *out,
                         const char *none, struct sd_diag *d)
{
    struct store_job j;
    int rv;

    rv = store__one(st, sql, args, "reading a job", job_row, &j, d);
    if (rv == 0)
        return sd_diag_set(d, SD_ENOENT, "%s", none);
    if (rv < 0)
        return rv;
    *out = j;
    return 0;
}

int store_job_get(struct store *st, int64_t id, struct store_job *out,
                  struct sd_diag *d)
{
    char none[64];

    snprintf(none, sizeof(none), "job %lld: no such job", (long long)id);
    return job_query_one(st, STORE__SQL_JOB_GET, STORE__ARGS(STORE__INT(id)),
                         out, none, d);
}

int store_job_find_open(struct store *st, enum store_job_kind kind,
                        int64_t profile_id, struct store_job *out,
                        struct sd_diag *d)
{
    if (!job_kind_is_valid(kind))
        return sd_diag_set(d, SD_EINVAL, "job: kind %d unknown", (int)kind);
    return job_query_one(st, STORE__SQL_JOB_FIND_OPEN,
                         STORE__ARGS(STORE__TEXT(store_job_kind_name(kind)),
                                     STORE__ID(profile_id)),
                         out, "no open job", d);
}

int store_job_list(struct store *st, size_t limit, struct store_job **out,
                   size_t *n, struct sd_diag *d)
{
    static const struct store__rows rows = {sizeof(**out), job_row, NULL};
    void *arr;
    int rv;

    rv = store__all(st, STORE__SQL_JOB_LIST,
                    STORE__ARGS(STORE__INT(store__limit(limit))),
                    "listing jobs", &rows, &arr, n, d);
    if (rv == 0)
        *out = arr;
    return rv;
}

int store_job_count(struct store *st, enum store_job_state state, uint64_t *n,
                    struct sd_diag *d)
{
    int64_t c = 0;
    int rv;

    if (!job_state_is_valid(state))
        return sd_diag_set(d, SD_EINVAL, "job: state %d unknown", (int)state);
    rv = store__one(st, STORE__SQL_JOB_COUNT,
                    STORE__ARGS(STORE__TEXT(job_state_names[state])),
                    "counting jobs", store__row_int, &c, d);
    if (rv < 0)
        return rv;
    *n = (uint64_t)c;
    return 0;
}

int store_job_cancel_unfinished(struct store *st, const char *message,
                                uint64_t *cancelled, uint64_t *succeeded,
                                struct sd_diag *d)
{
    int64_t now = store__now_ms();
    uint64_t done = 0;
    int rv;

    rv = store__check_text(message, STORE_MESSAGE_MAX, false, "job", "message",
                           d);
    if (rv == 0)
        rv = store__check_no_batch(st, d);
    if (rv == 0)
        rv = store__tx_begin(st, d);
    if (rv != 0)
        return rv;
    rv = store__exec(st, STORE__SQL_JOB_FINISH_ACTIVATED,
                     STORE__ARGS(STORE__INT(now)), "ending jobs", d);
    if (rv == 0) {
        done = (uint64_t)sqlite3_changes(st->db);
        rv = store__exec(st, STORE__SQL_JOB_CANCEL_UNFINISHED,
                         STORE__ARGS(STORE__TEXT(message), STORE__INT(now)),
                         "cancelling jobs", d);
    }
    if (rv != 0) {
        store__tx_rollback(st);
        return rv;
    }
    if (cancelled != NULL)
        *cancelled = (uint64_t)sqlite3_changes(st->db);
    rv = store__tx_commit(st, d);
    if (rv == 0 && succeeded != NULL)
        *succeeded = done;
    return rv;
}
