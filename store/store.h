/*
 * The shardd store: one SQLite database holding hardware profiles, measured
 * cost samples, cost-model versions, jobs and the plan audit log.  This is the
 * only module that includes <sqlite3.h>; everything else sees the typed
 * functions below and never SQL.
 *
 * The database runs in WAL mode with synchronous=NORMAL: a committed
 * transaction survives a crash or kill -9 of the process (the WAL frames are
 * in the OS page cache once COMMIT returns); only an OS crash or power loss
 * can roll back the last transactions, never corrupt the file.  Open with
 * STORE_OPEN_DURABLE (synchronous=FULL, an fsync per commit) where that is
 * not good enough.  The schema carries its version in PRAGMA user_version and
 * is migrated forward, one transaction per step, when a read-write handle
 * opens it; a database of a newer version is refused and left untouched.
 *
 * A damaged store is never used silently.  store_open() creates a database
 * only where no file exists (built under a temporary name and linked into
 * place complete, so a crash never leaves a half-made one), and refuses,
 * without writing to it, any existing file that is empty, not SQLite,
 * another application's database, or fails PRAGMA quick_check: SD_ECORRUPT
 * or SD_EFORMAT, the diag naming the file, the newest backup beside it, and
 * what to do (docs/daemon.md, "The store").  A damaged page met later, at
 * run time, is SD_ECORRUPT too.  store_backup() makes rotating, checked
 * copies of a live store.
 *
 * Files the store creates (the database, its -wal and -shm, backups) are
 * mode 0600 whatever the umask: they hold measurements and plans of the
 * machine.  A database that exists keeps the mode it has.
 *
 * Conventions (reference/style.md 3.3, 3.4): actions return 0 or a negative
 * SD_E* code, and fill the struct sd_diag (may be NULL) with one line saying
 * what was wrong.  Bad input is SD_EINVAL with the field named, and is
 * rejected before the database is touched, so it changes nothing.  SQLite
 * errors are mapped here: busy or locked -> SD_EBUSY, a constraint ->
 * SD_EINVAL, no memory -> SD_ENOMEM, "not a database" -> SD_EFORMAT,
 * "malformed" -> SD_ECORRUPT, anything else -> SD_ESTORE, with SQLite's
 * message in the diag.  Out-parameters are untouched on failure.
 *
 * Threads: a struct store belongs to one thread at a time (the connection is
 * opened without SQLite's own mutex); give every thread that needs the store
 * its own handle.  Handles on one file, in one process or several, see each
 * other's commits; writers are serialised by SQLite and wait up to
 * STORE_BUSY_TIMEOUT_MS before failing with SD_EBUSY.  Every call may block
 * on disk, so none belongs on an event-loop thread.
 *
 * Times are unix milliseconds (CLOCK_REALTIME) stamped by the store.  Ids are
 * positive; 0 means "none" wherever an id is optional.
 */
#ifndef SHARDD_STORE_H
#define SHARDD_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "problem/problem.h"
#include "shardd/err.h"

/* The newest schema version this build knows (PRAGMA user_version). */
#define STORE_SCHEMA_VERSION 5
/* PRAGMA application_id of a shardd database: "SDST". */
#define STORE_APPLICATION_ID  0x53445354
#define STORE_BUSY_TIMEOUT_MS 5000

/* Sizes of the fixed text fields below, terminating NUL included. */
#define STORE_NAME_MAX    128
#define STORE_BACKEND_MAX 16
#define STORE_DEVICE_MAX  64
#define STORE_SOURCE_MAX  16
#define STORE_MESSAGE_MAX 512
#define STORE_PARAMS_MAX  512
#define STORE_HASH_MAX    80
#define STORE_ALG_MAX     32
#define STORE_FAMILY_MAX  64

/* Limits on one sample, checked on insert. */
#define STORE_SAMPLE_TABLES_MAX  4096
#define STORE_SAMPLE_DEVICES_MAX 4096

struct store; /* opaque */

/* ------------------------------------------------------------------------ */
/* Opening                                                                   */

enum store_open_flags {
    /*
     * Opens an existing, current database for reading only (for tools):
     * creates nothing, migrates nothing; every write fails with SD_ESTORE.
     */
    STORE_OPEN_READONLY = 1 << 0,
    /* synchronous=FULL: commits survive power loss too, at an fsync each. */
    STORE_OPEN_DURABLE = 1 << 1,
    /* Read-write, but creates no store: for tools that only add to one
     * (train, train-policy), so that a mistyped path is an error, not a
     * new empty file. */
    STORE_OPEN_EXISTING = 1 << 2,
};

/*
 * Opens the database at `path` and, read-write, migrates its schema to
 * STORE_SCHEMA_VERSION.  Read-write, a new store is created (mode 0600) when
 * nothing exists at path; an existing file is never turned into a new store.
 * An existing database is checked with PRAGMA quick_check first: it reads
 * the whole file once, about 40 ms for 20,000 samples (53 MB) from the page
 * cache (docs/daemon.md).  ":memory:" opens a private, empty, in-memory
 * store.  On success *out owns the handle; release it with store_close().
 * Every refusal leaves the file, and its -wal, as found.  Returns 0 or:
 *  - SD_EINVAL: path empty or unknown flags;
 *  - SD_ECORRUPT: the file is damaged: empty (0 bytes), truncated, failing
 *    quick_check, or a -wal without its database; d names the file, the
 *    problem, the newest backup next to it (store_backup_newest()) and the
 *    ways out: restore that backup, move the file away to start empty, or
 *    salvage rows with `sqlite3 FILE .recover` or .dump (docs/daemon.md);
 *  - SD_ENEWER: the schema version is newer than this build's; d says both
 *    versions ("database schema version N is newer than this shardd
 *    supports (M); upgrade shardd") and the file is not written;
 *  - SD_EFORMAT: not a regular file, not a SQLite database, or a SQLite
 *    database that is not shardd's (another application_id, or none and no
 *    schema version, even an empty one); d says which;
 *  - SD_ENOENT: STORE_OPEN_READONLY or STORE_OPEN_EXISTING and no database
 *    at path;
 *  - SD_ESTORE: cannot open, create or migrate (d has the reason);
 *  - SD_ESTATE: a read-only open of an older schema ("open it read-write
 *    once to migrate it"): a read-write open migrates it;
 *  - SD_EIO: syncing a new store to disk failed;
 *  - SD_EBUSY: another writer held the database past the busy timeout;
 *  - SD_ENOMEM.
 * Thread: any; the handle then belongs to the calling thread (see above).
 */
int store_open(const char *path, unsigned flags, struct store **out,
               struct sd_diag *d);

/*
 * Closes the handle; a sample batch still open is rolled back.  NULL-safe.
 * The last handle on a file to close checkpoints the WAL into it.
 */
void store_close(struct store *st);

/*
 * Runs PRAGMA integrity_check (slower and more thorough than the
 * quick_check of store_open(): it also compares every index with its table)
 * and PRAGMA foreign_key_check.  Returns 0, SD_ECORRUPT with the first
 * integrity problem in d, or SD_ESTORE with the first table holding a
 * dangling reference.
 */
int store_integrity_check(struct store *st, struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* Backups                                                                   */

/*
 * Writes a backup of the open store st with SQLite's online backup API: a
 * consistent snapshot, taken while other handles (threads, processes) go on
 * reading and writing.  The copy goes to `dir` (NULL: the store's own
 * directory) as <store file name>.backup-<UTC time>, e.g.
 * "shardd.db.backup-20261124T101500.123456Z": written under a temporary name
 * (mode 0600), checked with PRAGMA quick_check, fsync()ed and renamed into
 * place, so a backup file is always complete.  Then all but the newest
 * `keep` (>= 1, the new one included) backups of this store in `dir` are
 * deleted.  It reads and writes the whole database: 0.22-0.27 s for a 53 MB
 * store of 20,000 samples (docs/daemon.md); writers are not blocked
 * meanwhile (WAL).
 *
 * `written` (may be NULL) receives the new backup's path; `size` is its
 * size.  Returns 0 or:
 *  - SD_EINVAL: keep is 0, a sample batch is open on st, st is :memory:, a
 *    path is too long, or `written` is too small (nothing is written then);
 *  - SD_ECORRUPT: the copy fails quick_check, so the store itself is
 *    damaged; the copy is deleted and no older backup is;
 *  - SD_EBUSY, SD_ENOMEM, SD_ESTORE: copying failed (SQLite's message);
 *  - SD_EIO: writing, syncing or renaming the copy failed (it is deleted),
 *    or deleting an old backup did (the new one is complete; d names the
 *    old one).
 * Thread: the thread that owns st; give a backup thread its own handle.
 */
int store_backup(struct store *st, const char *dir, size_t keep, char *written,
                 size_t size, struct sd_diag *d);

/*
 * Finds the newest backup of the database at db_path (store_backup()'s
 * names) in `dir` (NULL: db_path's directory) and copies its path into out
 * (`size` bytes).  Needs no open store, so it works when the store cannot
 * be opened.  Returns 0, SD_ENOENT (no backup, or no such dir), SD_EINVAL
 * (out too small), SD_EIO or SD_ENOMEM.
 *
 * To restore (docs/daemon.md): stop every process using the store, move
 * the store file and its -wal and -shm away, and copy the backup to the
 * store's path.  Thread: any.
 */
int store_backup_newest(const char *db_path, const char *dir, char *out,
                        size_t size, struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* Hardware profiles                                                         */

/*
 * A hardware profile names a set of samples and the models trained on them,
 * e.g. name "cuda/NVIDIA H100 80GB HBM3/65536".
 */
struct store_profile {
    int64_t id;                        /* set by the store */
    char name[STORE_NAME_MAX];         /* unique, non-empty */
    char backend[STORE_BACKEND_MAX];   /* "cuda", "cpu" */
    char device_model[STORE_NAME_MAX]; /* non-empty */
    int64_t batch_size;                /* >= 1 */
    int64_t created_ms;                /* set by the store */
};

/*
 * Finds the profile named p->name, creating it from *p when there is none,
 * and sets *id (may be NULL).  Returns 0, SD_EINVAL (a bad field, or a profile
 * of that name with a different backend, device model or batch size), SD_EBUSY
 * or SD_ESTORE.  p->id and p->created_ms are ignored.
 */
int store_profile_get_or_create(struct store *st, const struct store_profile *p,
                                int64_t *id, struct sd_diag *d);

/* Fills *out with the profile named `name`; SD_ENOENT when there is none. */
int store_profile_get(struct store *st, const char *name,
                      struct store_profile *out, struct sd_diag *d);

/*
 * Lists every profile, oldest first.  *out (NULL when *n is 0) is owned by
 * the caller: free() it.
 */
int store_profile_list(struct store *st, struct store_profile **out, size_t *n,
                       struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* Samples                                                                   */

/* What a sample measures, and what a model predicts (or does). */
enum store_kind {
    STORE_KIND_COMPUTE = 0, /* fwd + bwd + SGD of one multi-table shard */
    STORE_KIND_COMM = 1,    /* fwd and bwd all-to-all of one plan */
    /* A placement policy (dreamshard) trained against a compute model of
     * the profile: models only, never samples. */
    STORE_KIND_POLICY = 2,
};

/* "compute", "comm", "policy" ("?" for anything else). */
const char *store_kind_name(enum store_kind kind);

/* One device of a communication sample (neuroshard.md 4). */
struct store_comm_device {
    int32_t dim_sum; /* pooled columns the device sends, >= 0 */
    double sleep_ms; /* emulated compute skew before the forward a2a */
    double fwd_ms;   /* measured forward all-to-all */
    double bwd_ms;   /* measured backward all-to-all */
};

/*
 * One measured sample.  A compute sample has ntables >= 1 tables (the shard:
 * each table's dim is the column width it has in the shard) and no devices;
 * a comm sample has ndevices >= 2 devices and no tables.
 *
 * Table names are not stored: loaded tables are named "t0", "t1", ... by
 * position.  In the database a shard is a blob of ntables 160-byte
 * little-endian records (int64 rows, int32 dim, int32 dtype, double
 * pooling_factor, double bins[17]) and a comm sample's devices a blob of
 * 32-byte records (int32 dim_sum, 4 zero bytes, double sleep_ms, fwd_ms,
 * bwd_ms); the schema checks both lengths.
 *
 * Passed to store_sample_add() the arrays are borrowed; returned by
 * store_samples_load() they are owned by the sample array.
 */
struct store_sample {
    int64_t id;         /* set by the store */
    int64_t profile_id; /* an existing profile */
    enum store_kind kind;
    size_t ntables;
    struct table *tables; /* compute only, else NULL */
    size_t ndevices;
    struct store_comm_device *devices; /* comm only, else NULL */
    double measured_ms; /* compute: median time; comm: the plan's a2a time */
    double spread_ms;   /* spread of the repeated runs, >= 0 */
    char device[STORE_DEVICE_MAX]; /* where it was measured, non-empty */
    char source[STORE_SOURCE_MAX]; /* how the shard was made: "random" ... */
    /*
     * The table families its tables were drawn from (formats.h), in the
     * families' order joined by '+' ("zipf", "dlrm+seq"); "" when unknown
     * (a plan's shard, a comm sample).  Schema 3 gave the compute samples
     * of "random" shards stored before it "dlrm": they were drawn from
     * synth.c's tables.
     */
    char family[STORE_FAMILY_MAX];
    int64_t created_ms; /* set by the store */
};

/*
 * A batch is one transaction on this handle: samples added after
 * store_sample_batch_begin() become visible and durable together at
 * store_sample_batch_commit(), the durability point; a crash or kill -9
 * before it loses exactly the samples of the open batch.  While a batch is
 * open the handle accepts only store_sample_add(), reads, commit and abort;
 * other writes fail with SD_EINVAL.  begin takes the database's write lock
 * (SD_EBUSY after the busy timeout), so keep batches short.
 *
 * begin: SD_EINVAL when a batch is already open.  commit: SD_EINVAL when none
 * is; on any other failure the batch is rolled back and is no longer open.
 * abort: rolls back the open batch (no-op without one).
 */
int store_sample_batch_begin(struct store *st, struct sd_diag *d);
int store_sample_batch_commit(struct store *st, struct sd_diag *d);
void store_sample_batch_abort(struct store *st);

/*
 * Validates and inserts one sample, inside the open batch if there is one,
 * else in a transaction of its own.  Sets *id (may be NULL) to its id.
 * Returns 0, SD_EINVAL (a bad field, named in d, or an unknown profile; the
 * batch stays open and unchanged), SD_EBUSY, SD_ENOMEM or SD_ESTORE.
 */
int store_sample_add(struct store *st, const struct store_sample *s,
                     int64_t *id, struct sd_diag *d);

/*
 * Inserts n samples in one transaction: all or none.  Validates every sample
 * first (d names samples[i]).  SD_EINVAL while a batch is open.
 */
int store_sample_add_batch(struct store *st, const struct store_sample *s,
                           size_t n, struct sd_diag *d);

/*
 * Sets *n to the number of samples of (profile, kind) created after
 * since_ms (0: all of them).
 */
int store_sample_count(struct store *st, int64_t profile_id,
                       enum store_kind kind, int64_t since_ms, uint64_t *n,
                       struct sd_diag *d);

/*
 * Loads the samples of (profile, kind) with id > after_id in id order, at most
 * `limit` of them (0: all), decoded.  Page through a large set by passing the
 * last id loaded as after_id.  On success *out (NULL when *n is 0) and
 * everything it points to are owned by the caller: release with
 * store_samples_free(*out, *n).  Returns 0, SD_EINVAL, SD_ENOMEM, SD_EBUSY or
 * SD_ESTORE (including a row whose blobs do not decode).
 */
int store_samples_load(struct store *st, int64_t profile_id,
                       enum store_kind kind, int64_t after_id, size_t limit,
                       struct store_sample **out, size_t *n, struct sd_diag *d);

/*
 * store_samples_load() of the newest `newest` samples of (profile, kind), in
 * id order: all of them when there are no more than that or `newest` is 0.
 * A model trained on a recent window follows a machine that drifted
 * (docs/models.md).  Ownership and errors as store_samples_load().
 */
int store_samples_load_newest(struct store *st, int64_t profile_id,
                              enum store_kind kind, size_t newest,
                              struct store_sample **out, size_t *n,
                              struct sd_diag *d);

/* Releases an array from store_samples_load().  NULL-safe. */
void store_samples_free(struct store_sample *s, size_t n);

/* ------------------------------------------------------------------------ */
/* Samples from other nodes (the fleet: docs/fleet.md)                       */

/*
 * Stores samples measured on another node: s[i] (profile_id naming a
 * profile of this store) was sample origin_ids[i] of node `origin` (a
 * non-empty name of at most STORE_NAME_MAX - 1 bytes).  Each (origin,
 * origin id) is stored once, ever: a sample already held is skipped, so a
 * push repeated after a lost answer stores nothing twice.  All of them or
 * none, in one transaction.  Sets *stored (may be NULL) to the number of
 * samples new to this store and *last (may be NULL) to the highest origin
 * id held from `origin` after it (0: none), which is where the node
 * resumes.  n may be 0 (only *last is read).  Returns 0, SD_EINVAL (a bad
 * field, named in d; an id < 1; a batch open), SD_EBUSY, SD_ENOMEM or
 * SD_ESTORE.
 */
int store_sample_add_from(struct store *st, const char *origin,
                          const int64_t *origin_ids,
                          const struct store_sample *s, size_t n,
                          uint64_t *stored, int64_t *last, struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* Model versions                                                            */

/*
 * A model's error on the samples of one table family (store_sample.family):
 * on a family held out of its training entirely (held_out), or on the
 * family's samples in its test split (or the daemon's gate samples).
 * mape is a fraction >= 0; signed_median (finite) the median of
 * (predicted - measured) / measured.
 */
struct store_family_metrics {
    char family[STORE_FAMILY_MAX]; /* non-empty */
    bool held_out;
    int64_t samples; /* >= 0 */
    double mape;
    double signed_median;
};
#define STORE_MODEL_FAMILIES_MAX 16

/*
 * How well a model did at training time.  Fractions (0.05 = 5 %); counts of
 * samples.  All finite and >= 0.  families[0 .. nfamilies): per-family
 * figures (schema 4), each family at most once; none for older models.
 */
struct store_model_metrics {
    double val_mape;  /* on the validation split */
    double test_mape; /* on the held-out test split */
    int64_t train_samples;
    int64_t val_samples;
    int64_t test_samples;
    size_t nfamilies;
    struct store_family_metrics families[STORE_MODEL_FAMILIES_MAX];
    /* A policy: its mean plan cost over size_lookup_greedy's on held-out
     * tasks (the gate); the counts above are then training, validation
     * and held-out tasks, the MAPEs 0.  Other kinds: 0. */
    double gate_ratio;
};

/* A model version without its blobs, as listed. */
#define STORE_MODEL_HEAD 12
struct store_model_info {
    int64_t id;                   /* the version; unique, never reused */
    int64_t profile_id;           /* the profile it answers for */
    char profile[STORE_NAME_MAX]; /* that profile's name (set by the store) */
    enum store_kind kind;
    int32_t format_version; /* of the weights blob, >= 1; the trainer's */
    struct store_model_metrics metrics;
    size_t weights_bytes;
    size_t norm_bytes;
    int64_t created_ms; /* set by the store */
    bool active;        /* at most one per (profile, kind) */
    /* A policy: the compute model version it was trained against, 0 for
     * the embedded one (or one since pruned); other kinds: 0. */
    int64_t base_model_id;
    /* The weights' first bytes (head_bytes, at most STORE_MODEL_HEAD): what
     * a caller that lists models reads their format by (an ensemble's
     * members), the blob itself not loaded; the store reads no format. */
    unsigned char head[STORE_MODEL_HEAD];
    size_t head_bytes;
};

/*
 * A model version with its blobs.  The store does not interpret them: the
 * weights (weights_bytes, >= 1) and the feature normalisation constants
 * (norm_bytes, may be 0) are in the trainer's format `format_version`.
 */
struct store_model {
    struct store_model_info info;
    const void *weights;
    const void *norm; /* NULL when norm_bytes is 0 */
};

/*
 * Stores a new, inactive model version from m->info (profile_id, kind,
 * format_version, metrics, weights_bytes, norm_bytes, base_model_id) and
 * the borrowed blobs, and sets *id (may be NULL) to its version.  Returns 0,
 * SD_EINVAL (bad field, unknown profile, a base_model_id on a kind other
 * than policy or naming no stored model), SD_EBUSY, SD_ENOMEM or
 * SD_ESTORE.
 */
int store_model_put(struct store *st, const struct store_model *m, int64_t *id,
                    struct sd_diag *d);

/*
 * Loads version `id` (get) or the active model of (profile, kind)
 * (get_active) into one allocation: *out, blobs included, is owned by the
 * caller and released with store_model_free().  SD_ENOENT when there is no
 * such model.
 */
int store_model_get(struct store *st, int64_t id, struct store_model **out,
                    struct sd_diag *d);
int store_model_get_active(struct store *st, int64_t profile_id,
                           enum store_kind kind, struct store_model **out,
                           struct sd_diag *d);
void store_model_free(struct store_model *m); /* NULL-safe */

/*
 * Makes version `id` the active model of its (profile, kind) and the one that
 * was active inactive, in one transaction.  Sets *previous (may be NULL) to
 * the version it replaced, 0 if none (id itself when it was already active).
 * SD_ENOENT for an unknown version.
 */
int store_model_activate(struct store *st, int64_t id, int64_t *previous,
                         struct sd_diag *d);

/*
 * Leaves (profile, kind) with no active model (so that a built-in one
 * answers again); sets *previous (may be NULL) to the version that was
 * active, 0 if none.
 */
int store_model_deactivate(struct store *st, int64_t profile_id,
                           enum store_kind kind, int64_t *previous,
                           struct sd_diag *d);

/*
 * Lists model versions, newest first: those of profile_id (0: every
 * profile), at most `limit` (0: all).  *out (NULL when *n is 0) is owned by
 * the caller: free() it.
 */
int store_model_list(struct store *st, int64_t profile_id, size_t limit,
                     struct store_model_info **out, size_t *n,
                     struct sd_diag *d);

/*
 * Deletes the old versions of profile_id, in one transaction: for each kind,
 * every version but the newest `keep` (by version id; 0 keeps none) and the
 * active one, which is never deleted whatever its age.  Jobs and plan-audit
 * records that named a deleted version keep everything else, their
 * reference becoming 0 (none).  Sets *n (may be NULL) to the number of
 * versions deleted; a policy whose compute model goes keeps its blob (which
 * names that model) and base_model_id 0.  Returns 0, SD_EINVAL (profile_id
 * < 1, or a sample batch is open), SD_EBUSY or SD_ESTORE.
 */
int store_model_prune(struct store *st, int64_t profile_id, size_t keep,
                      uint64_t *n, struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* Jobs                                                                      */

enum store_job_kind {
    STORE_JOB_RETRAIN = 1,        /* a compute model from samples */
    STORE_JOB_RETRAIN_POLICY = 2, /* a placement policy for the active one */
};

/* "retrain", "retrain_policy" ("?" for anything else). */
const char *store_job_kind_name(enum store_job_kind kind);

/* Numbered as shardd.v1.JobState. */
enum store_job_state {
    STORE_JOB_QUEUED = 1,
    STORE_JOB_RUNNING = 2,
    STORE_JOB_SUCCEEDED = 3, /* terminal */
    STORE_JOB_FAILED = 4,    /* terminal */
    STORE_JOB_CANCELLED = 5, /* terminal */
};

/* "queued", "running", ... ("?" for anything else). */
const char *store_job_state_name(enum store_job_state s);
bool store_job_state_is_terminal(enum store_job_state s);

struct store_job {
    int64_t id; /* set by the store; unique, never reused */
    enum store_job_kind kind;
    enum store_job_state state;
    double progress;                 /* 0 to 1 */
    char message[STORE_MESSAGE_MAX]; /* progress or failure reason */
    int64_t profile_id;              /* 0: none */
    char profile[STORE_NAME_MAX];    /* its name (set by the store) */
    char params[STORE_PARAMS_MAX];   /* the job's parameters, JSON text */
    int64_t result_model_id;         /* 0: none yet */
    int64_t created_ms;
    int64_t started_ms;  /* 0 until it first runs */
    int64_t finished_ms; /* 0 until it reaches a terminal state */
};

/*
 * Creates a queued job from j->kind, j->profile_id (0: none), j->message and
 * j->params (both may be empty); sets *id (may be NULL).  Other fields are
 * ignored.
 */
int store_job_create(struct store *st, const struct store_job *j, int64_t *id,
                     struct sd_diag *d);

/*
 * Moves job `id` to `state` with `progress` (finite, 0 to 1) and `message`
 * (NULL: keep), and result_model_id (0: keep).  Entering RUNNING stamps
 * started_ms the first time; entering a terminal state stamps finished_ms.
 * Returns 0, SD_ENOENT (no such job), SD_EINVAL (bad field, or the job is
 * already in a terminal state: those are final), SD_EBUSY or SD_ESTORE.
 */
int store_job_update(struct store *st, int64_t id, enum store_job_state state,
                     double progress, const char *message,
                     int64_t result_model_id, struct sd_diag *d);

/* Fills *out with job `id`; SD_ENOENT when there is none. */
int store_job_get(struct store *st, int64_t id, struct store_job *out,
                  struct sd_diag *d);

/*
 * Finds the oldest queued or running job of (kind, profile); SD_ENOENT when
 * there is none.  Lets a caller join a retrain instead of starting another.
 */
int store_job_find_open(struct store *st, enum store_job_kind kind,
                        int64_t profile_id, struct store_job *out,
                        struct sd_diag *d);

/*
 * Lists jobs newest first, at most `limit` (0: all).  *out (NULL when *n is
 * 0) is owned by the caller: free() it.
 */
int store_job_list(struct store *st, size_t limit, struct store_job **out,
                   size_t *n, struct sd_diag *d);

/* Sets *n to the number of jobs in `state`. */
int store_job_count(struct store *st, enum store_job_state state, uint64_t *n,
                    struct sd_diag *d);

/*
 * For start-up, after a previous daemon died with jobs in flight, in one
 * transaction: marks every queued or running job whose result model is
 * active succeeded (it was killed between activating its model and ending
 * the job: a job records its model before activating it), and every other
 * one cancelled with `message`.  Sets *cancelled and *succeeded (either may
 * be NULL) to how many.
 */
int store_job_cancel_unfinished(struct store *st, const char *message,
                                uint64_t *cancelled, uint64_t *succeeded,
                                struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* Plan audit                                                                */

/*
 * One plan the daemon handed out.  Passed to store_plan_audit_put() plan_json
 * is borrowed; returned by store_plan_audit_get() it lives in the same
 * allocation as the struct.
 */
struct store_plan_audit {
    int64_t id;                        /* set by the store */
    char request_hash[STORE_HASH_MAX]; /* non-empty, e.g. hex SHA-256 */
    char algorithm[STORE_ALG_MAX];     /* non-empty */
    int64_t model_id;                  /* 0: no learned model was used */
    int32_t ntables;                   /* >= 1 */
    int32_t ndevices;                  /* >= 1 */
    double plan_cost_ms;               /* finite, >= 0 */
    int64_t created_ms;                /* set by the store */
    const char *plan_json;             /* non-empty: the plan as returned */
};

/* Appends one record and sets *id (may be NULL). */
int store_plan_audit_put(struct store *st, const struct store_plan_audit *a,
                         int64_t *id, struct sd_diag *d);

/* Appends n records in one transaction: all of them, or none (a bad
 * record, named by its index, fails the whole batch). */
int store_plan_audit_put_many(struct store *st,
                              const struct store_plan_audit *a, size_t n,
                              struct sd_diag *d);

/*
 * Loads record `id`: *out is owned by the caller, released with free()
 * (plan_json included).  SD_ENOENT when there is none.
 */
int store_plan_audit_get(struct store *st, int64_t id,
                         struct store_plan_audit **out, struct sd_diag *d);

/*
 * Lists the newest `limit` records (0: all), newest first, without their
 * plans (plan_json NULL).  *out (NULL when *n is 0) is owned by the
 * caller: free() it.
 */
int store_plan_audit_list(struct store *st, size_t limit,
                          struct store_plan_audit **out, size_t *n,
                          struct sd_diag *d);

/* Deletes all but the newest `keep` records; sets *n (may be NULL). */
int store_plan_audit_trim(struct store *st, uint64_t keep, uint64_t *n,
                          struct sd_diag *d);

/* Deletes records created before before_ms; sets *n (may be NULL). */
int store_plan_audit_prune(struct store *st, int64_t before_ms, uint64_t *n,
                           struct sd_diag *d);

#endif /* SHARDD_STORE_H */
