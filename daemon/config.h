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
 *   /etc/shardd/shardd.conf:12: threads: "abc" is not an integer in [1, 256]
 *   SHARDD_THREADS: "0" is not an integer in [1, 256]
 *   --threads: "abc" is not an integer in [1, 256]
 * Codes: SD_EINVAL (bad syntax, unknown key, bad value, key given twice,
 * conflicting keys, an unsafe token file), SD_ERANGE (an integer out of its
 * range, a path too long), SD_ENOENT (a named file does not exist), SD_EIO
 * (a file cannot be read), SD_ENOMEM.
 */
#ifndef SHARDD_DAEMON_CONFIG_H
#define SHARDD_DAEMON_CONFIG_H

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
 * Every setting, in the order of docs/config.md and `shardd --help`.  The
 * file key is the lower-case name after CONF_KEY_ ("max_message_mb"), the
 * variable SHARDD_ + the upper-case key, the flag -- + the key with dashes.
 */
enum conf_key {
    CONF_KEY_LISTEN,
    CONF_KEY_DATA_DIR,
    CONF_KEY_CONFIG,
    CONF_KEY_ADMIN_TOKEN,
    CONF_KEY_ADMIN_TOKEN_FILE,
    CONF_KEY_THREADS,
    CONF_KEY_MAX_MESSAGE_MB,
    CONF_KEY_MAX_TABLES,
    CONF_KEY_DEFAULT_BATCH,
    CONF_KEY_DEFAULT_TIME_BUDGET_MS,
    CONF_KEY_GRACE_S,
    CONF_KEY_PLAN_CACHE_ENTRIES,
    CONF_KEY_BACKEND,
    CONF_KEY_PROFILER,
    CONF_KEY_PROFILER_IDLE_MS,
    CONF_KEY_PROFILER_MAX_SAMPLES,
    CONF_KEY_PROFILER_BATCH,
    CONF_KEY_RETRAIN_EVERY_SAMPLES,
    CONF_KEY_RETRAIN_EVERY_HOURS,
    CONF_KEY_RETRAIN_WINDOW_SAMPLES,
    CONF_KEY_LOG_LEVEL,
    CONF_KEY_COUNT
};

/* A set of keys: bit CONF_BIT(k) for key k. */
#define CONF_BIT(k) (UINT32_C(1) << (k))

/* Keys a SIGHUP cannot change: the running process keeps their values. */
#define CONF_RESTART_KEYS                                                      \
    (CONF_BIT(CONF_KEY_LISTEN) | CONF_BIT(CONF_KEY_DATA_DIR) |                 \
     CONF_BIT(CONF_KEY_CONFIG) | CONF_BIT(CONF_KEY_THREADS) |                  \
     CONF_BIT(CONF_KEY_MAX_MESSAGE_MB) | CONF_BIT(CONF_KEY_BACKEND) |          \
     CONF_BIT(CONF_KEY_PROFILER_BATCH))

enum conf_backend {
    CONF_BACKEND_AUTO, /* cuda when a GPU answers, else cpu */
    CONF_BACKEND_CPU,
    CONF_BACKEND_CUDA /* no GPU: shardd refuses to start */
};

enum conf_log_level {
    CONF_LOG_ERROR,
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

struct sd_config {
    char *listen[CONF_LISTEN_MAX]; /* "unix:PATH" or "HOST:PORT" */
    size_t nlisten;                /* 1 ..  CONF_LISTEN_MAX */
    char *data_dir;                /* holds CONF_DB_FILE and CONF_PID_FILE */
    char *config;                  /* the file that was read; NULL: none */
    /*
     * The admin token, taken from admin_token or read from the first line
     * of admin_token_file by conf_resolve(); "" (never NULL): no token, so
     * Admin RPCs are served on unix: addresses only.  Secret: never log it.
     */
    char *admin_token;
    char *admin_token_file;          /* NULL: not set */
    uint32_t threads;                /* planner worker threads, 1..256 */
    uint32_t max_message_mb;         /* largest request, MiB, 1..1024 */
    uint32_t max_tables;             /* tables per request, 1..1000000 */
    uint32_t default_batch;          /* batch when a request has 0 */
    uint32_t default_time_budget_ms; /* search budget when a request has 0 */
    uint32_t grace_s;            /* SIGTERM: calls in flight get this long */
    uint32_t plan_cache_entries; /* 0: no plan cache */
    enum conf_backend backend;
    bool profiler;                  /* background profiling on idle devices */
    uint32_t profiler_idle_ms;      /* idle this long before it measures */
    uint32_t profiler_max_samples;  /* stops when the profile holds this many */
    uint32_t profiler_batch;        /* batch size of its measurements */
    uint32_t retrain_every_samples; /* retrain after this many new; 0: off */
    uint32_t retrain_every_hours;   /* retrain this often; 0: off */
    uint32_t retrain_window_samples; /* train on the newest N; 0: all */
    enum conf_log_level log_level;

    bool print_config; /* --print-config was given: a mode, not a key */
    struct conf_origin origin[CONF_KEY_COUNT]; /* per key */
};

/* What a SIGHUP changed; sets of keys as CONF_BIT()s. */
struct conf_changes {
    uint32_t applied; /* changed and taken into the new configuration */
    uint32_t restart; /* changed but only a restart applies them */
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
size_t conf_keys_format(uint32_t set, char *buf, size_t size);

/*
 * A new string data_dir/name (e.g. CONF_DB_FILE) for the caller to free();
 * NULL when out of memory.
 */
char *conf_data_path(const struct sd_config *c, const char *name);

const char *conf_backend_name(enum conf_backend b);
const char *conf_log_level_name(enum conf_log_level l);

#endif /* SHARDD_DAEMON_CONFIG_H */
