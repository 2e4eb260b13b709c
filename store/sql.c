/*
 * The SQL of the store: the schema, as a list of migrations, and the text of
 * every statement the module caches (enum store__sql in store_int.h).  Kept
 * in one file so that a reviewer sees each statement beside the schema it
 * relies on: the CHECK constraints, the indexes its WHERE clause uses.
 */
#include "store_int.h"

/* ------------------------------------------------------------------------ */
/* Schema                                                                    */

/*
 * store__migrations[v - 1] takes a database from schema version v - 1 to v.
 * Each runs in one transaction together with its PRAGMA user_version bump,
 * so a crash leaves the database at v - 1 or v, never in between.  Append
 * new steps here and bump STORE_SCHEMA_VERSION; never edit a released step.
 *
 * Booleans and enums are CHECKed so that a row written by hand with the
 * sqlite3 shell cannot hold a value the decoder does not know.
 */
const char *const store__migrations[STORE_SCHEMA_VERSION] = {
    /* 1: the first schema. */
    "PRAGMA application_id = 1396986708;\n" /* STORE_APPLICATION_ID */
    "CREATE TABLE profiles (\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  name TEXT NOT NULL UNIQUE CHECK (name <> ''),\n"
    "  backend TEXT NOT NULL CHECK (backend <> ''),\n"
    "  device_model TEXT NOT NULL CHECK (device_model <> ''),\n"
    "  batch_size INTEGER NOT NULL CHECK (batch_size >= 1),\n"
    "  created_ms INTEGER NOT NULL\n"
    ");\n"
    /* shard: 160-byte table records; devices: 32-byte device records. */
    "CREATE TABLE samples (\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  profile_id INTEGER NOT NULL REFERENCES profiles (id),\n"
    "  kind TEXT NOT NULL CHECK (kind IN ('compute', 'comm')),\n"
    "  ntables INTEGER NOT NULL,\n"
    "  shard BLOB,\n"
    "  ndevices INTEGER NOT NULL,\n"
    "  devices BLOB,\n"
    "  measured_ms REAL NOT NULL CHECK (measured_ms >= 0),\n"
    "  spread_ms REAL NOT NULL CHECK (spread_ms >= 0),\n"
    "  device TEXT NOT NULL,\n"
    "  source TEXT NOT NULL,\n"
    "  created_ms INTEGER NOT NULL,\n"
    "  CHECK ((kind = 'compute' AND ntables >= 1\n"
    "          AND length(shard) = 160 * ntables\n"
    "          AND ndevices = 0 AND devices IS NULL)\n"
    "      OR (kind = 'comm' AND ntables = 0 AND shard IS NULL\n"
    "          AND ndevices >= 2 AND length(devices) = 32 * ndevices))\n"
    ");\n"
    "CREATE INDEX samples_by_profile ON samples (profile_id, kind, id);\n"
    /* AUTOINCREMENT: a version id is never reused, even after a delete. */
    "CREATE TABLE models (\n"
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
    "  profile_id INTEGER NOT NULL REFERENCES profiles (id),\n"
    "  kind TEXT NOT NULL CHECK (kind IN ('compute', 'comm')),\n"
    "  format_version INTEGER NOT NULL CHECK (format_version >= 1),\n"
    "  weights BLOB NOT NULL,\n"
    "  norm BLOB NOT NULL,\n"
    "  val_mape REAL NOT NULL,\n"
    "  test_mape REAL NOT NULL,\n"
    "  train_samples INTEGER NOT NULL,\n"
    "  val_samples INTEGER NOT NULL,\n"
    "  test_samples INTEGER NOT NULL,\n"
    "  created_ms INTEGER NOT NULL,\n"
    "  active INTEGER NOT NULL DEFAULT 0 CHECK (active IN (0, 1))\n"
    ");\n"
    "CREATE UNIQUE INDEX models_one_active ON models (profile_id, kind)\n"
    "  WHERE active = 1;\n"
    "CREATE INDEX models_by_time ON models (created_ms);\n"
    "CREATE TABLE jobs (\n"
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
    "  kind TEXT NOT NULL CHECK (kind IN ('retrain')),\n"
    "  state TEXT NOT NULL CHECK (state IN ('queued', 'running',\n"
    "    'succeeded', 'failed', 'cancelled')),\n"
    "  progress REAL NOT NULL CHECK (progress BETWEEN 0 AND 1),\n"
    "  message TEXT NOT NULL,\n"
    "  profile_id INTEGER REFERENCES profiles (id),\n"
    "  params TEXT NOT NULL,\n"
    "  result_model_id INTEGER REFERENCES models (id),\n"
    "  created_ms INTEGER NOT NULL,\n"
    "  started_ms INTEGER NOT NULL DEFAULT 0,\n"
    "  finished_ms INTEGER NOT NULL DEFAULT 0\n"
    ");\n"
    "CREATE INDEX jobs_by_state ON jobs (state);\n"
    "CREATE TABLE plan_audit (\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  request_hash TEXT NOT NULL CHECK (request_hash <> ''),\n"
    "  algorithm TEXT NOT NULL CHECK (algorithm <> ''),\n"
    "  model_id INTEGER REFERENCES models (id),\n"
    "  ntables INTEGER NOT NULL CHECK (ntables >= 1),\n"
    "  ndevices INTEGER NOT NULL CHECK (ndevices >= 1),\n"
    "  plan_cost_ms REAL NOT NULL CHECK (plan_cost_ms >= 0),\n"
    "  created_ms INTEGER NOT NULL,\n"
    "  plan TEXT NOT NULL CHECK (plan <> '')\n"
    ");\n"
    "CREATE INDEX plan_audit_by_time ON plan_audit (created_ms);\n"
    "CREATE INDEX plan_audit_by_hash ON plan_audit (request_hash);\n",
    /* 2: samples from other nodes of a fleet, each stored once. */
    "CREATE TABLE sample_origins (\n"
    "  origin TEXT NOT NULL CHECK (origin <> ''),\n"
    "  origin_id INTEGER NOT NULL CHECK (origin_id >= 1),\n"
    "  sample_id INTEGER NOT NULL UNIQUE REFERENCES samples(id) ON DELETE "
    "CASCADE,\n"
    "  PRIMARY KEY (origin, origin_id)\n"
    ") WITHOUT ROWID;\n",
    /*
     * 3: placement policies.  A model may be a policy, bound to the compute
     * model it was trained against (base_model_id) and gated (gate_ratio);
     * a job may retrain one.  A CHECK cannot be changed in place, so both
     * tables are rebuilt (SQLite's 12-step ALTER: migrations run before
     * foreign keys are enabled), ids and AUTOINCREMENT high-water marks
     * kept, so that a version id is still never reused.
     */
    "CREATE TABLE models_v3 (\n"
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
    "  profile_id INTEGER NOT NULL REFERENCES profiles (id),\n"
    "  kind TEXT NOT NULL CHECK (kind IN ('compute', 'comm', 'policy')),\n"
    "  format_version INTEGER NOT NULL CHECK (format_version >= 1),\n"
    "  weights BLOB NOT NULL,\n"
    "  norm BLOB NOT NULL,\n"
    "  val_mape REAL NOT NULL,\n"
    "  test_mape REAL NOT NULL,\n"
    "  train_samples INTEGER NOT NULL,\n"
    "  val_samples INTEGER NOT NULL,\n"
    "  test_samples INTEGER NOT NULL,\n"
    "  created_ms INTEGER NOT NULL,\n"
    "  active INTEGER NOT NULL DEFAULT 0 CHECK (active IN (0, 1)),\n"
    "  base_model_id INTEGER REFERENCES models (id),\n"
    "  gate_ratio REAL NOT NULL DEFAULT 0,\n"
    "  CHECK (kind = 'policy' OR base_model_id IS NULL)\n"
    ");\n"
    "INSERT INTO models_v3 (id, profile_id, kind, format_version, weights,\n"
    "  norm, val_mape, test_mape, train_samples, val_samples, test_samples,\n"
    "  created_ms, active)\n"
    "  SELECT id, profile_id, kind, format_version, weights, norm, val_mape,\n"
    "  test_mape, train_samples, val_samples, test_samples, created_ms,\n"
    "  active FROM models;\n"
    "CREATE TABLE jobs_v3 (\n"
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
    "  kind TEXT NOT NULL CHECK (kind IN ('retrain', 'retrain_policy')),\n"
    "  state TEXT NOT NULL CHECK (state IN ('queued', 'running',\n"
    "    'succeeded', 'failed', 'cancelled')),\n"
    "  progress REAL NOT NULL CHECK (progress BETWEEN 0 AND 1),\n"
    "  message TEXT NOT NULL,\n"
    "  profile_id INTEGER REFERENCES profiles (id),\n"
    "  params TEXT NOT NULL,\n"
    "  result_model_id INTEGER REFERENCES models (id),\n"
    "  created_ms INTEGER NOT NULL,\n"
    "  started_ms INTEGER NOT NULL DEFAULT 0,\n"
    "  finished_ms INTEGER NOT NULL DEFAULT 0\n"
    ");\n"
    "INSERT INTO jobs_v3 SELECT id, kind, state, progress, message,\n"
    "  profile_id, params, result_model_id, created_ms, started_ms,\n"
    "  finished_ms FROM jobs;\n"
    /* The high-water marks: a copy of every row does not remember ids
     * deleted above the largest one. */
    "DELETE FROM sqlite_sequence WHERE name IN ('models_v3', 'jobs_v3');\n"
    "INSERT INTO sqlite_sequence (name, seq)\n"
    "  SELECT name || '_v3', seq FROM sqlite_sequence\n"
    "  WHERE name IN ('models', 'jobs');\n"
    "DROP TABLE jobs;\n"
    "DROP TABLE models;\n"
    "ALTER TABLE models_v3 RENAME TO models;\n"
    "ALTER TABLE jobs_v3 RENAME TO jobs;\n"
    "CREATE UNIQUE INDEX models_one_active ON models (profile_id, kind)\n"
    "  WHERE active = 1;\n"
    "CREATE INDEX models_by_time ON models (created_ms);\n"
    "CREATE INDEX jobs_by_state ON jobs (state);\n",
    /* 4: the table family of each sample, and models' errors per family.
     * Compute samples of random shards stored before were drawn from
     * synth.c's tables: family "dlrm". */
    "ALTER TABLE samples ADD COLUMN family TEXT NOT NULL DEFAULT '';\n"
    "UPDATE samples SET family = 'dlrm'\n"
    "  WHERE kind = 'compute' AND source = 'random';\n"
    "CREATE TABLE model_families (\n"
    "  model_id INTEGER NOT NULL REFERENCES models (id) ON DELETE CASCADE,\n"
    "  family TEXT NOT NULL CHECK (family <> ''),\n"
    "  held_out INTEGER NOT NULL CHECK (held_out IN (0, 1)),\n"
    "  samples INTEGER NOT NULL CHECK (samples >= 0),\n"
    "  mape REAL NOT NULL CHECK (mape >= 0),\n"
    "  signed_median REAL NOT NULL,\n"
    "  PRIMARY KEY (model_id, family)\n"
    ") WITHOUT ROWID;\n",
    /* 5: the kernels time fp16 and bf16 tables in their type; compute
     * samples stored before were timed in fp32 whatever their tables said,
     * and now say fp32 (shardd_fp32_tables(), samples.c).  In parentheses:
     * clang takes two literals ending an array for a missing comma. */
    ("UPDATE samples SET shard = shardd_fp32_tables(shard, ntables)\n"
     "  WHERE kind = 'compute';\n")};

/* ------------------------------------------------------------------------ */
/* Statements                                                                */

/*
 * Column lists shared by several statements, read by position by model_row()
 * (models.c: STORE__MODEL_NCOLS of them) and job_row() (jobs.c).
 */
#define MODEL_COLS                                                             \
    "m.id, m.profile_id, p.name, m.kind, m.format_version, m.val_mape, "       \
    "m.test_mape, m.train_samples, m.val_samples, m.test_samples, "            \
    "length(m.weights), length(m.norm), m.created_ms, m.active, "              \
    "m.base_model_id, m.gate_ratio, substr(m.weights, 1, 12)"
#define MODEL_FROM " FROM models m JOIN profiles p ON p.id = m.profile_id"
/*
 * The versions store_model_prune() deletes: those of profile ?1 past the
 * newest ?2 of their kind (ids grow with time), never the active one.
 */
#define MODEL_DOOMED                                                           \
    "SELECT id FROM (SELECT id, active, row_number() OVER (PARTITION BY kind " \
    "ORDER BY id DESC) AS newer FROM models WHERE profile_id = ?1) "           \
    "WHERE newer > ?2 AND active = 0"
#define JOB_SELECT                                                             \
    "SELECT j.id, j.kind, j.state, j.progress, j.message, j.profile_id, "      \
    "p.name, j.params, j.result_model_id, j.created_ms, j.started_ms, "        \
    "j.finished_ms FROM jobs j LEFT JOIN profiles p ON p.id = j.profile_id"
#define JOB_TERMINAL "('succeeded', 'failed', 'cancelled')"

const char *const store__sql_text[STORE__SQL_COUNT] = {
    /* IMMEDIATE takes the write lock now, so a transaction never fails
     * half-way for want of it (no read-to-write upgrade deadlock). */
    [STORE__SQL_BEGIN] = "BEGIN IMMEDIATE",
    [STORE__SQL_COMMIT] = "COMMIT",
    [STORE__SQL_ROLLBACK] = "ROLLBACK",
    [STORE__SQL_PROFILE_GET] =
        "SELECT id, name, backend, device_model, batch_size, "
        "created_ms FROM profiles WHERE name = ?1",
    [STORE__SQL_PROFILE_LIST] =
        "SELECT id, name, backend, device_model, batch_size, "
        "created_ms FROM profiles ORDER BY id",
    [STORE__SQL_PROFILE_INSERT] = "INSERT INTO profiles (name, backend, "
                                  "device_model, batch_size, created_ms) "
                                  "VALUES (?1, ?2, ?3, ?4, ?5)",
    [STORE__SQL_SAMPLE_INSERT] =
        "INSERT INTO samples (profile_id, kind, ntables, "
        "shard, ndevices, devices, measured_ms, spread_ms, "
        "device, source, created_ms, family) VALUES (?1, ?2, ?3, "
        "?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    [STORE__SQL_SAMPLE_COUNT] =
        "SELECT count(*) FROM samples WHERE profile_id = ?1 "
        "AND kind = ?2 AND created_ms > ?3",
    [STORE__SQL_SAMPLE_LOAD] =
        "SELECT id, profile_id, kind, ntables, shard, "
        "ndevices, devices, measured_ms, spread_ms, device, "
        "source, created_ms, family "
        "FROM samples WHERE profile_id = ?1 AND kind = ?2 "
        "AND id > ?3 ORDER BY id LIMIT ?4",
    /* The id just before the newest ?3 samples (samples_by_profile). */
    [STORE__SQL_SAMPLE_NEWEST] =
        "SELECT id FROM samples WHERE profile_id = ?1 "
        "AND kind = ?2 ORDER BY id DESC LIMIT 1 OFFSET ?3",
    [STORE__SQL_MODEL_INSERT] =
        "INSERT INTO models (profile_id, kind, "
        "format_version, weights, norm, val_mape, "
        "test_mape, train_samples, val_samples, "
        "test_samples, created_ms, active, base_model_id, "
        "gate_ratio) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
        "?10, ?11, 0, ?12, ?13)",
    [STORE__SQL_MODEL_FAMILY_INSERT] =
        "INSERT INTO model_families (model_id, family, held_out, samples, "
        "mape, signed_median) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    /* Held-out families first, then by name. */
    [STORE__SQL_MODEL_FAMILY_LOAD] =
        "SELECT family, held_out, samples, mape, signed_median FROM "
        "model_families WHERE model_id = ?1 ORDER BY held_out DESC, family",
    [STORE__SQL_MODEL_GET] =
        "SELECT " MODEL_COLS ", m.weights, m.norm" MODEL_FROM
        " WHERE m.id = ?1",
    [STORE__SQL_MODEL_GET_ACTIVE] =
        "SELECT " MODEL_COLS ", m.weights, m.norm" MODEL_FROM
        " WHERE m.profile_id = ?1 AND m.kind = ?2 "
        "AND m.active = 1",
    [STORE__SQL_MODEL_KEY] =
        "SELECT profile_id, kind FROM models WHERE id = ?1",
    [STORE__SQL_MODEL_ACTIVE_ID] =
        "SELECT id FROM models WHERE profile_id = ?1 "
        "AND kind = ?2 AND active = 1",
    [STORE__SQL_MODEL_DEACTIVATE] =
        "UPDATE models SET active = 0 WHERE "
        "profile_id = ?1 AND kind = ?2 AND active = 1",
    [STORE__SQL_MODEL_SET_ACTIVE] =
        "UPDATE models SET active = 1 WHERE id = ?1",
    [STORE__SQL_MODEL_LIST] =
        "SELECT " MODEL_COLS MODEL_FROM " WHERE ?1 = 0 OR m.profile_id = ?1 "
        "ORDER BY m.created_ms DESC, m.id DESC LIMIT ?2",
    /*
     * Pruning (store_model_prune(), one transaction): the references to the
     * doomed versions are cleared first, as the foreign keys require.
     */
    [STORE__SQL_MODEL_PRUNE_JOBS] =
        "UPDATE jobs SET result_model_id = NULL "
        "WHERE result_model_id IN (" MODEL_DOOMED ")",
    [STORE__SQL_MODEL_PRUNE_AUDIT] = "UPDATE plan_audit SET model_id = NULL "
                                     "WHERE model_id IN (" MODEL_DOOMED ")",
    [STORE__SQL_MODEL_PRUNE_BASE] = "UPDATE models SET base_model_id = NULL "
                                    "WHERE base_model_id IN (" MODEL_DOOMED ")",
    [STORE__SQL_MODEL_PRUNE] =
        "DELETE FROM models WHERE id IN (" MODEL_DOOMED ")",
    [STORE__SQL_JOB_INSERT] =
        "INSERT INTO jobs (kind, state, progress, message, "
        "profile_id, params, created_ms) VALUES (?1, "
        "'queued', 0, ?2, ?3, ?4, ?5)",
    [STORE__SQL_JOB_GET] = JOB_SELECT " WHERE j.id = ?1",
    [STORE__SQL_JOB_FIND_OPEN] =
        JOB_SELECT " WHERE j.kind = ?1 AND j.profile_id IS ?2 AND j.state IN "
                   "('queued', 'running') ORDER BY j.id LIMIT 1",
    [STORE__SQL_JOB_LIST] = JOB_SELECT " ORDER BY j.id DESC LIMIT ?1",
    [STORE__SQL_JOB_COUNT] = "SELECT count(*) FROM jobs WHERE state = ?1",
    /* Terminal states are final: the WHERE clause refuses to leave one. */
    [STORE__SQL_JOB_UPDATE] =
        "UPDATE jobs SET state = ?2, progress = ?3, "
        "message = coalesce(?4, message), "
        "result_model_id = coalesce(?5, result_model_id), "
        "started_ms = CASE WHEN ?2 = 'running' AND started_ms = 0 "
        "THEN ?6 ELSE started_ms END, "
        "finished_ms = CASE WHEN ?2 IN " JOB_TERMINAL " THEN ?6 ELSE 0 END "
        "WHERE id = ?1 AND state NOT IN " JOB_TERMINAL,
    [STORE__SQL_JOB_STATE] = "SELECT state FROM jobs WHERE id = ?1",
    [STORE__SQL_JOB_CANCEL_UNFINISHED] =
        "UPDATE jobs SET state = 'cancelled', message = ?1, "
        "finished_ms = ?2 WHERE state NOT IN " JOB_TERMINAL,
    [STORE__SQL_JOB_FINISH_ACTIVATED] =
        "UPDATE jobs SET state = 'succeeded', progress = 1, "
        "message = printf('model %d activated; the daemon stopped before "
        "the job ended', result_model_id), finished_ms = ?1 "
        "WHERE state NOT IN " JOB_TERMINAL " AND result_model_id IN "
        "(SELECT id FROM models WHERE active = 1)",
    [STORE__SQL_AUDIT_INSERT] =
        "INSERT INTO plan_audit (request_hash, algorithm, "
        "model_id, ntables, ndevices, plan_cost_ms, "
        "created_ms, plan) VALUES (?1, ?2, ?3, ?4, ?5, ?6, "
        "?7, ?8)",
    [STORE__SQL_AUDIT_GET] =
        "SELECT id, request_hash, algorithm, model_id, "
        "ntables, ndevices, plan_cost_ms, created_ms, plan "
        "FROM plan_audit WHERE id = ?1",
    [STORE__SQL_AUDIT_PRUNE] = "DELETE FROM plan_audit WHERE created_ms < ?1",
    [STORE__SQL_AUDIT_TRIM] =
        "DELETE FROM plan_audit WHERE id <= (SELECT id FROM "
        "plan_audit ORDER BY id DESC LIMIT 1 OFFSET ?1)",
    [STORE__SQL_AUDIT_LIST] =
        "SELECT id, request_hash, algorithm, model_id, "
        "ntables, ndevices, plan_cost_ms, created_ms FROM plan_audit "
        "ORDER BY id DESC LIMIT ?1",
    [STORE__SQL_ORIGIN_HAS] = "SELECT count(*) FROM sample_origins WHERE "
                              "origin = ?1 AND origin_id = ?2",
    [STORE__SQL_ORIGIN_INSERT] = "INSERT INTO sample_origins (origin, "
                                 "origin_id, sample_id) VALUES (?1, ?2, ?3)",
    [STORE__SQL_ORIGIN_LAST] = "SELECT coalesce(max(origin_id), 0) FROM "
                               "sample_origins WHERE origin = ?1",
};
