/*
 * shardd's configuration: built-in defaults, a `key = value` file, SHARDD_*
 * environment variables and --flags, in that order of precedence (a later
 * source wins), then checks across keys and the admin token file.  SIGHUP
 * re-runs the same resolution and says which changes need a restart.
 * docs/config.md is the user's reference; deploy/shardd.conf an example.
 *
 * Plain C11 + POSIX: no gRPC, SQLite or libuv, so it is unit-tested alone
 * (tests/unit/test_config.c).
 *
 * Ownership: a struct sd_config owns every string it points to.  Start one
 * with conf_default() (or let conf_resolve() fill it) and release it with
 * conf_free(), which is idempotent.  Copying the struct by value moves the
 * ownership: free only one of the two.  Nothing here is thread-safe; the
 * daemon resolves on its main thread and hands out copies of the values.
 *
 * Errors: 0 or a negative SD_E* code (include/shardd/err.h), and d (when not
 * NULL) holds one line that starts with where the bad value came from and
 * names the key:
 *   /etc/shardd/shardd.conf:12: threads: "abc" is not an integer in [0, 256]
 *   SHARDD_THREADS: "300" is not an integer in [0, 256]
 *   --threads: "abc" is not an integer in [0, 256]
 * Codes: SD_EINVAL (bad syntax, unknown key, bad value, key given twice,
 * conflicting keys, an unsafe token file), SD_ERANGE (an integer out of its
 * range, a path too long), SD_ENOENT (a named file does not exist), SD_EIO
 * (a file cannot be read), SD_ENOMEM.
 */
#ifndef SHARDD_DAEMON_CONFIG_H
#define SHARDD_DAEMON_CONFIG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "shardd/err.h"

#define CONF_LISTEN_MAX     8                /* addresses in listen */
#define CONF_DEFAULT_LISTEN "127.0.0.1:7411" /* the one default address */
#define CONF_DEFAULT_DIR    "./shardd-data"  /* default data_dir */
#define CONF_DB_FILE        "shardd.db"      /* the store, in data_dir */
#define CONF_PID_FILE       "shardd.pid"     /* the pidfile, in data_dir */
#define CONF_TOKEN_MAX      255 /* longest admin token, bytes (no NUL) */

/*
 * Every setting, in the order of docs/config.md and `shardd --help`: the one
 * place a key is declared.  CONF_KEYS expands into enum conf_key, the
 * fields of struct sd_config and config.c's option table, so adding a key
 * is adding a row here (and using the field).
 *
 *   X(KEY, name, type, min, max, default, flags, meta, help)
 *
 * name: the file key; the variable is SHARDD_ + the upper-case name, the
 * flag -- + the name with dashes.  type: LISTEN (a list of addresses),
 * PATH (a non-empty path), SECRET (a string never shown), STRING (any
 * string; "" unsets it), MODE (permission bits in octal, at most max), U32
 * (an integer in [min, max]), BOOL (on/off, true/false, yes/no, 1/0), WORD (one
 * of the words of meta, "a|b|c", held as its index).  default: the value as
 * text, parsed like any other (NULL: unset).  flags: CONF_RELOAD (a SIGHUP
 * applies it) or CONF_RESTART, plus CONF_NOFILE (not in a config file).
 * meta: --help's name for the value.  help: --help's line.
 */
#define CONF_RELOAD  0u
#define CONF_RESTART 1u
#define CONF_NOFILE  2u

#define CONF_KEYS(X)                                                           \
    X(LISTEN, listen, LISTEN, 0, 0, CONF_DEFAULT_LISTEN, CONF_RESTART, "ADDR", \
      "unix:PATH or HOST:PORT; repeat for more (up to 8)")                     \
    X(DATA_DIR, data_dir, PATH, 0, 0, CONF_DEFAULT_DIR, CONF_RESTART, "DIR",   \
      "holds the store (shardd.db) and shardd.pid")                            \
    X(SOCKET_MODE, socket_mode, MODE, 0, 0777, "0600", CONF_RESTART, "MODE",   \
      "permissions of unix sockets, octal")                                    \
    X(SOCKET_GROUP, socket_group, STRING, 0, 0, NULL, CONF_RESTART, "GROUP",   \
      "group of unix sockets; none: the daemon's")                             \
    X(HTTP_LISTEN, http_listen, STRING, 0, 0, NULL, CONF_RESTART, "HOST:PORT", \
      "serve /metrics and the status page; none: off")                         \
    X(CONFIG, config, PATH, 0, 0, NULL, CONF_RESTART | CONF_NOFILE, "FILE",    \
      "read this config file (also SHARDD_CONFIG)")                            \
    X(ADMIN_TOKEN, admin_token, SECRET, 0, 0, "", CONF_RELOAD, "TOKEN",        \
      "Admin RPCs over TCP need it; none: unix: only")                         \
    X(ADMIN_TOKEN_FILE, admin_token_file, PATH, 0, 0, NULL, CONF_RELOAD,       \
      "FILE", "the admin token: FILE's first line (mode 0600)")                \
    X(THREADS, threads, U32, 0, 256, "0", CONF_RESTART, "N",                   \
      "planner workers; 0: one per CPU, at least 2")                           \
    X(MAX_MESSAGE_MB, max_message_mb, U32, 1, 1024, "64", CONF_RESTART, "MIB", \
      "largest request in MiB, 1..1024")                                       \
    X(MAX_TABLES, max_tables, U32, 1, 1000000, "65536", CONF_RELOAD, "N",      \
      "tables per request, 1..1000000")                                        \
    X(DEFAULT_BATCH, default_batch, U32, 0, 1u << 24, "0", CONF_RELOAD, "N",   \
      "request batch 0: this; 0: the model's")                                 \
    X(DEFAULT_TIME_BUDGET_MS, default_time_budget_ms, U32, 1, 600000, "10000", \
      CONF_RELOAD, "MS", "search budget when a request gives 0")               \
    X(SEARCH_THREADS, search_threads, U32, 0, 256, "0", CONF_RELOAD, "N",      \
      "threads one search scores on; 0: one per CPU")                          \
    X(MAX_TIME_BUDGET_MS, max_time_budget_ms, U32, 1, 600000, "60000",         \
      CONF_RELOAD, "MS", "longest search a request may ask for")               \
    X(BEAM_EVALUATIONS, beam_evaluations, U32, 0, 4000000000u, "4000000",      \
      CONF_RELOAD, "N", "a search's beam budget in placements; 0: none")       \
    X(SMALL_SEARCH_WORK, small_search_work, U32, 1, 1000000000, "100000",      \
      CONF_RELOAD, "N", "tables x devices of a search in the small lane")      \
    X(BIG_SEARCHES, big_searches, U32, 0, 256, "0", CONF_RESTART, "N",         \
      "big searches at once; 0: threads - 1")                                  \
    X(BIG_SEARCHES_PER_PEER, big_searches_per_peer, U32, 1, 256, "1",          \
      CONF_RESTART, "N", "big searches of one client host at once")            \
    X(GRACE_S, grace_s, U32, 0, 3600, "10", CONF_RELOAD, "S",                  \
      "on SIGTERM, calls in flight get this long")                             \
    X(PLAN_CACHE_ENTRIES, plan_cache_entries, U32, 0, 100000, "256",           \
      CONF_RELOAD, "N", "plans kept in the cache; 0: off")                     \
    X(LATENT_CACHE_ENTRIES, latent_cache_entries, U32, 0, 1u << 24, "32768",   \
      CONF_RESTART, "N", "each model's latents kept (~376 B each); 0: off")    \
    X(BACKEND, backend, WORD, 0, 0, "auto", CONF_RESTART, "auto|cpu|cuda",     \
      "device backend")                                                        \
    X(PROFILER, profiler, BOOL, 0, 0, "on", CONF_RELOAD, "on|off",             \
      "profile on idle devices")                                               \
    X(PROFILER_IDLE_MS, profiler_idle_ms, U32, 0, 3600000, "2000",             \
      CONF_RELOAD, "MS", "idle time before the profiler measures")             \
    X(PROFILER_MAX_SAMPLES, profiler_max_samples, U32, 0, 10000000, "20000",   \
      CONF_RELOAD, "N", "stop at this many samples in the profile")            \
    X(PROFILER_MAX_MB, profiler_max_mb, U32, 64, 1u << 20, "768", CONF_RELOAD, \
      "MIB", "memory one measurement may take, MiB")                           \
    X(PROFILER_QUIET_PCT, profiler_quiet_pct, U32, 0, 1000, "10", CONF_RELOAD, \
      "PCT", "retime while a probe runs PCT % slow; 0: off")                   \
    X(PROFILER_BATCH, profiler_batch, U32, 1, 1u << 20, "4096", CONF_RESTART,  \
      "N", "batch size of the measurements")                                   \
    X(BACKGROUND_NICE, background_nice, U32, 0, 19, "19", CONF_RESTART, "N",   \
      "nice of the profiler and job threads")                                  \
    X(RETRAIN_EVERY_SAMPLES, retrain_every_samples, U32, 0, 10000000, "1000",  \
      CONF_RELOAD, "N", "retrain after N new samples; 0: off")                 \
    X(RETRAIN_EVERY_HOURS, retrain_every_hours, U32, 0, 8760, "24",            \
      CONF_RELOAD, "H", "retrain every H hours; 0: off")                       \
    X(RETRAIN_WINDOW_SAMPLES, retrain_window_samples, U32, 0, 10000000,        \
      "10000", CONF_RELOAD, "N", "retrain on the newest N samples; 0: all")    \
    X(RETRAIN_ENSEMBLE, retrain_ensemble, U32, 1, 16, "5", CONF_RELOAD, "K",   \
      "members a retrain trains (spreads, quantiles)")                         \
    X(RETRAIN_MIN_INTERVAL_S, retrain_min_interval_s, U32, 0, 86400, "60",     \
      CONF_RELOAD, "S", "at most one retrain a profile this often")            \
    X(MODELS_KEEP, models_keep, U32, 1, 100000, "20", CONF_RELOAD, "N",        \
      "model versions kept per profile")                                       \
    X(POLICY_AFTER_ACTIVATION, policy_after_activation, BOOL, 0, 0, "on",      \
      CONF_RELOAD, "on|off", "train a dreamshard policy for each activation")  \
    X(POLICY_ITERATIONS, policy_iterations, U32, 1, 1000000, "600",            \
      CONF_RELOAD, "N", "training steps of a policy retrain")                  \
    X(BACKUP_EVERY_HOURS, backup_every_hours, U32, 0, 8760, "24", CONF_RELOAD, \
      "H", "back the store up this often; 0: never")                           \
    X(BACKUP_KEEP, backup_keep, U32, 1, 1000, "3", CONF_RELOAD, "N",           \
      "backups kept (the oldest go)")                                          \
    X(BACKUP_DIR, backup_dir, STRING, 0, 0, NULL, CONF_RESTART, "DIR",         \
      "where backups go; none: beside the store")                              \
    X(LOG_LEVEL, log_level, WORD, 0, 0, "info", CONF_RELOAD,                   \
      "error|warn|info|debug", "log verbosity")                                \
    X(FLEET_ROLE, fleet_role, WORD, 0, 0, "none", CONF_RESTART,                \
      "none|trainer|profiler|planner", "this daemon's part in a fleet")        \
    X(FLEET_TRAINER, fleet_trainer, STRING, 0, 0, NULL, CONF_RESTART, "ADDR",  \
      "the trainer (profiler, planner roles)")                                 \
    X(FLEET_NODE, fleet_node, STRING, 0, 0, NULL, CONF_RESTART, "NAME",        \
      "node name in the fleet; none: the host name")                           \
    X(FLEET_PROFILE, fleet_profile, STRING, 0, 0, NULL, CONF_RESTART, "NAME",  \
      "the profile a planner fetches; none: its own")                          \
    X(FLEET_SYNC_MS, fleet_sync_ms, U32, 100, 3600000, "2000", CONF_RESTART,   \
      "MS", "how often samples are pushed and models fetched")

enum conf_key {
#define CONF_ENUM(K, ...) CONF_KEY_##K,
    CONF_KEYS(CONF_ENUM)
#undef CONF_ENUM
        CONF_KEY_COUNT
};

/* A set of keys: bit CONF_BIT(k) for key k. */
#define CONF_BIT(k) (UINT64_C(1) << (k))

/* Keys a SIGHUP cannot change: the running process keeps their values. */
#define CONF_RESTART_BIT(K, name, type, min, max, def, flags, ...)             \
    | (((flags)&CONF_RESTART) != 0 ? CONF_BIT(CONF_KEY_##K) : 0)
#define CONF_RESTART_KEYS (0 CONF_KEYS(CONF_RESTART_BIT))

/* The words of the WORD keys, numbered as their meta lists them. */
enum conf_backend {
    CONF_BACKEND_AUTO, /* cuda when a GPU answers, else cpu */
    CONF_BACKEND_CPU,
    CONF_BACKEND_CUDA /* no GPU: shardd refuses to start */
};

enum conf_fleet_role {
    CONF_FLEET_NONE,
    CONF_FLEET_TRAINER,  /* serves Fleet: stores samples, publishes models */
    CONF_FLEET_PROFILER, /* pushes its samples to fleet_trainer */
    CONF_FLEET_PLANNER   /* fetches fleet_trainer's active model */
};

enum conf_log_level {
    CONF_LOG_ERROR, /* numbered as include/shardd/log.h's levels */
    CONF_LOG_WARN,
    CONF_LOG_INFO,
    CONF_LOG_DEBUG
};

/* Where a key's value came from, for messages and --print-config. */
enum conf_source {
    CONF_SRC_DEFAULT,
    CONF_SRC_FILE,
    CONF_SRC_ENV,
    CONF_SRC_FLAG
};

struct conf_origin {
    enum conf_source src;
    unsigned line; /* CONF_SRC_FILE: 1-based line in config */
};

/* The field each type of key gets in struct sd_config. */
#define CONF_FIELD_LISTEN(name)                                                \
    char *name[CONF_LISTEN_MAX];            /* "unix:PATH" or "HOST:PORT" */   \
    size_t n##name;                         /* 1 .. CONF_LISTEN_MAX */
#define CONF_FIELD_PATH(name)   char *name; /* NULL: not set */
#define CONF_FIELD_SECRET(name) char *name; /* never NULL; never log it */
#define CONF_FIELD_STRING(name) char *name; /* NULL: not set */
#define CONF_FIELD_MODE(name)   uint32_t name; /* permission bits */
#define CONF_FIELD_U32(name)    uint32_t name;
#define CONF_FIELD_BOOL(name)   bool name;
#define CONF_FIELD_WORD(name)   uint32_t name; /* index into meta's words */

/*
 * The resolved configuration.  admin_token is taken from admin_token or
 * read from the first line of admin_token_file by conf_resolve(); "" (never
 * NULL) means no token, so Admin RPCs are served on unix: addresses only.
 */
struct sd_config {
#define CONF_FIELD(K, name, type, ...) CONF_FIELD_##type(name)
    CONF_KEYS(CONF_FIELD)
#undef CONF_FIELD

    bool print_config;  /* --print-config was given: a mode, not a key */
    bool print_version; /* --version was given: likewise */
    struct conf_origin origin[CONF_KEY_COUNT]; /* per key */
};

/* What a SIGHUP changed; sets of keys as CONF_BIT()s. */
struct conf_changes {
    uint64_t applied; /* changed and taken into the new configuration */
    uint64_t restart; /* changed but only a restart applies them */
};

/*
 * Fills c with the defaults (docs/config.md); c's old contents are not
 * freed.  Aborts with a message on stderr when a few bytes cannot be
 * allocated at start-up.
 */
void conf_default(struct sd_config *c);

/*
 * Applies the file at path (borrowed) on top of c: `key = value` lines,
 * blank lines and comments (# at the start of a line, or after white space
 * outside double quotes); a value may be "double-quoted" (no escapes).
 * Unknown keys, `config`, and a key given twice (except listen) are errors;
 * listen may be repeated or be a comma-separated list, and replaces c's
 * list.  Sets c->config to path.  On failure c is partly updated but still
 * valid for conf_free().  Returns 0 or an error listed at the top (SD_ENOENT
 * when the file is missing).
 */
int conf_load_file(struct sd_config *c, const char *path, struct sd_diag *d);

/*
 * Applies the environment (envp: NULL-terminated "NAME=VALUE" strings,
 * borrowed) on top of c: SHARDD_<KEY> for every key; SHARDD_LISTEN is a
 * comma-separated list; SHARDD_CONFIG only records c->config (the file is
 * read by conf_resolve()).  Other SHARDD_* variables are ignored, silently:
 * the same prefix also serves shardctl and the tests (docs/config.md).  If
 * a name appears twice, the first one counts, as with getenv().  On failure
 * c is partly updated but valid.
 */
int conf_load_env(struct sd_config *c, char *const *envp, struct sd_diag *d);

/*
 * Applies the flags argv[1..argc-1] (borrowed) on top of c: --key VALUE or
 * --key=VALUE; a bool also as --key (on) or --no-key (off); repeated
 * --listen flags accumulate and replace c's list; --config FILE only
 * records c->config.  --help or -h sets *help and stops; --print-config
 * sets c->print_config.  Positional arguments are errors.  On failure c is
 * partly updated but valid.
 */
int conf_parse_args(struct sd_config *c, int argc, char **argv, bool *help,
                    struct sd_diag *d);

/*
 * The whole resolution: defaults < the file named by --config or else
 * SHARDD_CONFIG (none: no file) < environment < flags, then checks across
 * keys (admin_token and admin_token_file both set is an error) and reads
 * admin_token_file, a regular file other users can neither read nor
 * write.
 * On success *c (its old contents not freed) owns the result; on failure,
 * or when --help was given (*help true, return 0), *c is untouched.
 */
int conf_resolve(int argc, char **argv, char *const *envp, struct sd_config *c,
                 bool *help, struct sd_diag *d);

/*
 * For SIGHUP: resolves again from the same argv and envp (so the same file,
 * re-read) into *next, then puts back running's values of the keys in
 * CONF_RESTART_KEYS.  *ch says which keys changed, split into those applied
 * and those that wait for a restart; conf_keys_format() names them for the
 * log.  On success *next (old contents not freed) is the configuration to
 * run with and the caller frees running; on failure *next and *ch are
 * untouched and running stays in force.
 */
int conf_reload(const struct sd_config *running, int argc, char **argv,
                char *const *envp, struct sd_config *next,
                struct conf_changes *ch, struct sd_diag *d);

/* Frees c's strings and leaves it empty; safe to call twice. */
void conf_free(struct sd_config *c);

/*
 * Writes the effective configuration as a valid config file, one key a
 * line with a comment saying where the value came from; the admin token is
 * never written (a comment says whether one is set).
 */
void conf_print(FILE *f, const struct sd_config *c);

/* The --help text: every flag with its default and range (static). */
const char *conf_usage(void);

/* The file name of a key, e.g. "max_message_mb"; NULL if out of range. */
const char *conf_key_name(enum conf_key k);

/*
 * Writes the names of the keys in set into buf as "listen, threads" (""
 * for none), truncated to size; returns the length it needed, as snprintf.
 */
size_t conf_keys_format(uint64_t set, char *buf, size_t size);

/*
 * A new string data_dir/name (e.g. CONF_DB_FILE) for the caller to free();
 * NULL when out of memory.
 */
char *conf_data_path(const struct sd_config *c, const char *name);

const char *conf_backend_name(enum conf_backend b);
const char *conf_log_level_name(enum conf_log_level l);

/*
 * Copies every key of src (strings duplicated) and its origin into *dst,
 * whose old contents are not freed.  0, or SD_ENOMEM with *dst untouched.
 */
int conf_copy(struct sd_config *dst, const struct sd_config *src);

/*
 * An immutable, reference-counted copy of a configuration, for the threads
 * that read settings while a SIGHUP may replace them: a reader takes a
 * reference (conf_snap_ref()) and keeps a consistent view until it drops it.
 */
struct conf_snap {
    atomic_int refs;
    struct sd_config c; /* read only */
};

/* A new snapshot of c (one reference, the caller's).  0 or SD_ENOMEM. */
int conf_snap_new(const struct sd_config *c, struct conf_snap **out);
struct conf_snap *conf_snap_ref(struct conf_snap *s); /* returns s */
void conf_snap_unref(struct conf_snap *s);            /* NULL-safe */

#endif /* SHARDD_DAEMON_CONFIG_H */
