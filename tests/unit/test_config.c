/*
 * The daemon's configuration (daemon/config.c): defaults, the file format,
 * the precedence defaults < file < environment < flags, every error naming
 * its source and key, the admin token file's rules, SIGHUP reload keeping
 * restart-only keys, and --print-config reading back as the same
 * configuration.  Files live in a fresh mkdtemp directory; the environment
 * is an explicit array, never the process's own.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "harness.h"

static char dir[64];
static char paths[32][128]; /* files made, removed at the end */
static int npaths;

/* Writes text to dir/name with the given mode; returns the path. */
static const char *write_file(const char *name, const char *text, mode_t mode)
{
    char *p = NULL;
    FILE *f;
    int i;

    for (i = 0; i < npaths; i++)
        if (strcmp(strrchr(paths[i], '/') + 1, name) == 0)
            p = paths[i];
    if (p == NULL) {
        p = paths[npaths++];
        snprintf(p, sizeof(paths[0]), "%s/%s", dir, name);
    }
    f = fopen(p, "w");
    if (f == NULL || fputs(text, f) < 0 || fclose(f) != 0) {
        perror(p);
        exit(1);
    }
    if (chmod(p, mode) != 0) {
        perror(p);
        exit(1);
    }
    return p;
}

/* Resolves from argv (NULL-terminated, argv[0] added) and envp. */
static int resolve(const char *const *args, char *const *envp,
                   struct sd_config *c, struct sd_diag *d)
{
    char *argv[32];
    bool help = false;
    int argc = 0, rv;

    argv[argc++] = (char *)"shardd";
    while (args != NULL && *args != NULL)
        argv[argc++] = (char *)*args++;
    argv[argc] = NULL;
    memset(d, 0, sizeof(*d));
    rv = conf_resolve(argc, argv, envp, c, &help, d);
    CHECK(!help);
    return rv;
}

/* Resolving must fail with err and a message equal to / containing want. */
static void expect_error(const char *const *args, char *const *envp, int err,
                         const char *want, bool exact)
{
    struct sd_config c;
    struct sd_diag d;
    int rv;

    memset(&c, 0xA5, sizeof(c)); /* untouched on failure: still 0xA5 */
    rv = resolve(args, envp, &c, &d);
    CHECK(rv == err);
    if (exact)
        CHECK(strcmp(d.msg, want) == 0);
    else
        CHECK(strstr(d.msg, want) != NULL);
    if (rv != err || (exact ? strcmp(d.msg, want) : !strstr(d.msg, want)))
        fprintf(stderr, "  rv %d (%s), message: %s\n  wanted: %s\n", rv,
                sd_err_name(rv), d.msg, want);
    CHECK(c.nlisten == (size_t)0xA5A5A5A5A5A5A5A5u);
    if (rv == 0)
        conf_free(&c);
}

static void test_defaults(void)
{
    struct sd_config c;
    struct sd_diag d;
    int k;

    conf_default(&c);
    CHECK(c.nlisten == 1);
    CHECK(strcmp(c.listen[0], "127.0.0.1:7411") == 0);
    CHECK(strcmp(c.data_dir, "./shardd-data") == 0);
    CHECK(c.config == NULL);
    CHECK(strcmp(c.admin_token, "") == 0);
    CHECK(c.admin_token_file == NULL);
    CHECK(c.threads == 0); /* one per CPU, at least 2: shardd.c */
    CHECK(c.max_message_mb == 64);
    CHECK(c.max_tables == 65536);
    CHECK(c.default_batch == 0);
    CHECK(c.default_time_budget_ms == 10000);
    CHECK(c.grace_s == 10);
    CHECK(c.plan_cache_entries == 256);
    CHECK(c.backend == CONF_BACKEND_AUTO);
    CHECK(c.profiler);
    CHECK(c.profiler_idle_ms == 2000);
    CHECK(c.profiler_max_samples == 20000);
    CHECK(c.profiler_batch == 4096);
    CHECK(c.retrain_every_samples == 1000);
    CHECK(c.retrain_every_hours == 24);
    CHECK(c.retrain_window_samples == 10000);
    CHECK(c.retrain_ensemble == 5);
    CHECK(c.log_level == CONF_LOG_INFO);
    CHECK(!c.print_config);
    for (k = 0; k < CONF_KEY_COUNT; k++)
        CHECK(c.origin[k].src == CONF_SRC_DEFAULT);
    conf_free(&c);
    conf_free(&c); /* twice is fine */

    /* Nothing given: the defaults, out of the box. */
    CHECK(resolve(NULL, NULL, &c, &d) == 0);
    CHECK(c.nlisten == 1 && strcmp(c.listen[0], "127.0.0.1:7411") == 0);
    CHECK(c.threads == 0 && c.config == NULL);
    conf_free(&c);
}

static void test_file_format(void)
{
    const char *path = write_file("format.conf",
                                  "# a comment\n"
                                  "\n"
                                  "   # an indented comment\n"
                                  "listen = 127.0.0.1:1, unix:/run/a.sock\n"
                                  "listen=\"[::1]:7411\"\n"
                                  "data_dir = \"/srv/a b#c\"   # quoted\n"
                                  "threads = 8 # trailing comment\n"
                                  "\tmax_tables\t=\t100\t\r\n"
                                  "backend = CPU\n"
                                  "profiler = no\n"
                                  "log_level = \"debug\"\n"
                                  "retrain_every_hours = 0\n"
                                  "retrain_window_samples = 500\n"
                                  "retrain_ensemble = 2",
                                  0644);
    struct sd_config c;
    struct sd_diag d;

    conf_default(&c);
    CHECK(conf_load_file(&c, path, &d) == 0);
    CHECK(c.nlisten == 3);
    CHECK(c.nlisten == 3 && strcmp(c.listen[0], "127.0.0.1:1") == 0 &&
          strcmp(c.listen[1], "unix:/run/a.sock") == 0 &&
          strcmp(c.listen[2], "[::1]:7411") == 0);
    CHECK(strcmp(c.data_dir, "/srv/a b#c") == 0);
    CHECK(c.threads == 8);
    CHECK(c.max_tables == 100);
    CHECK(c.backend == CONF_BACKEND_CPU);
    CHECK(!c.profiler);
    CHECK(c.log_level == CONF_LOG_DEBUG);
    CHECK(c.retrain_every_hours == 0);
    CHECK(c.retrain_window_samples == 500);
    CHECK(c.retrain_ensemble == 2);
    CHECK(c.config != NULL && strcmp(c.config, path) == 0);
    CHECK(c.origin[CONF_KEY_THREADS].src == CONF_SRC_FILE);
    CHECK(c.origin[CONF_KEY_THREADS].line == 7);
    CHECK(c.origin[CONF_KEY_LISTEN].line == 4);
    CHECK(c.origin[CONF_KEY_GRACE_S].src == CONF_SRC_DEFAULT);
    conf_free(&c);

    /* An empty file changes nothing. */
    path = write_file("empty.conf", "", 0644);
    conf_default(&c);
    CHECK(conf_load_file(&c, path, &d) == 0);
    CHECK(c.threads == 0 && c.nlisten == 1);
    conf_free(&c);
}

static void test_precedence(void)
{
    const char *path = write_file("prec.conf",
                                  "threads = 8\n"
                                  "grace_s = 5\n"
                                  "listen = 10.0.0.1:1\n"
                                  "listen = 10.0.0.1:2\n"
                                  "log_level = warn\n",
                                  0644);
    char cfg_env[256];
    char *env_none[] = {cfg_env, (char *)"HOME=/root", NULL};
    char *env[] = {(char *)"PATH=/bin",
                   cfg_env,
                   (char *)"SHARDD_THREADS=16",
                   (char *)"SHARDD_LISTEN=10.0.0.2:1,10.0.0.2:2 , 10.0.0.2:3",
                   (char *)"SHARDD_THREADS=99", /* second one: ignored */
                   (char *)"SHARDD_NOT_A_KEY=x",
                   (char *)"SHARDD_ADDR=unix:/x", /* shardctl's */
                   (char *)"SHARDD_threads=1",    /* not our spelling */
                   NULL};
    const char *flags[] = {"--threads", "32",         "--listen=10.0.0.3:1",
                           "--listen",  "10.0.0.3:2", NULL};
    const char *one_flag[] = {"--grace-s=7", NULL};
    struct sd_config c;
    struct sd_diag d;

    snprintf(cfg_env, sizeof(cfg_env), "SHARDD_CONFIG=%s", path);

    /* File only (named by SHARDD_CONFIG). */
    CHECK(resolve(NULL, env_none, &c, &d) == 0);
    CHECK(c.threads == 8 && c.grace_s == 5 && c.log_level == CONF_LOG_WARN);
    CHECK(c.nlisten == 2 && strcmp(c.listen[1], "10.0.0.1:2") == 0);
    CHECK(c.config != NULL && strcmp(c.config, path) == 0);
    CHECK(c.origin[CONF_KEY_CONFIG].src == CONF_SRC_ENV);
    conf_free(&c);

    /* Environment over the file. */
    CHECK(resolve(one_flag, env, &c, &d) == 0);
    CHECK(c.threads == 16);
    CHECK(c.origin[CONF_KEY_THREADS].src == CONF_SRC_ENV);
    CHECK(c.nlisten == 3 && strcmp(c.listen[0], "10.0.0.2:1") == 0 &&
          strcmp(c.listen[2], "10.0.0.2:3") == 0);
    CHECK(c.grace_s == 7); /* the flag */
    CHECK(c.origin[CONF_KEY_GRACE_S].src == CONF_SRC_FLAG);
    CHECK(c.log_level == CONF_LOG_WARN); /* the file */
    conf_free(&c);

    /* Flags over both; repeated --listen accumulate and replace. */
    CHECK(resolve(flags, env, &c, &d) == 0);
    CHECK(c.threads == 32);
    CHECK(c.nlisten == 2 && strcmp(c.listen[0], "10.0.0.3:1") == 0 &&
          strcmp(c.listen[1], "10.0.0.3:2") == 0);
    CHECK(c.grace_s == 5);
    conf_free(&c);

    /* conf_load_env alone records SHARDD_CONFIG without reading it. */
    {
        char *only[] = {(char *)"SHARDD_CONFIG=/nonexistent/x.conf", NULL};

        conf_default(&c);
        CHECK(conf_load_env(&c, only, &d) == 0);
        CHECK(c.config != NULL && strcmp(c.config, "/nonexistent/x.conf") == 0);
        CHECK(c.origin[CONF_KEY_CONFIG].src == CONF_SRC_ENV);
        conf_free(&c);
    }

    /* --config beats SHARDD_CONFIG. */
    {
        const char *other = write_file("other.conf", "threads = 3\n", 0644);
        const char *args[] = {"--config", other, NULL};

        CHECK(resolve(args, env_none, &c, &d) == 0);
        CHECK(c.threads == 3 && c.grace_s == 10);
        CHECK(strcmp(c.config, other) == 0);
        conf_free(&c);
    }
}

static void test_flags(void)
{
    const char *a1[] = {"--profiler=off", "--backend", "cuda", NULL};
    const char *a2[] = {"--no-profiler", "--print-config", NULL};
    const char *a3[] = {"--profiler", "--threads", "2", NULL};
    const char *a4[] = {"--profiler", "off", "--log-level=ERROR", NULL};
    const char *a5[] = {"--no-profiler", "--profiler=yes", NULL};
    const char *ah[] = {"--threads", "2", "-h", "--bogus", NULL};
    char *argv[] = {(char *)"shardd", (char *)"--threads=abc", (char *)"--help",
                    NULL};
    struct sd_config c;
    struct sd_diag d;
    bool help = false;

    CHECK(resolve(a1, NULL, &c, &d) == 0);
    CHECK(!c.profiler && c.backend == CONF_BACKEND_CUDA);
    conf_free(&c);
    CHECK(resolve(a2, NULL, &c, &d) == 0);
    CHECK(!c.profiler && c.print_config);
    conf_free(&c);
    CHECK(resolve(a3, NULL, &c, &d) == 0);
    CHECK(c.profiler && c.threads == 2);
    conf_free(&c);
    CHECK(resolve(a4, NULL, &c, &d) == 0);
    CHECK(!c.profiler && c.log_level == CONF_LOG_ERROR);
    conf_free(&c);
    CHECK(resolve(a5, NULL, &c, &d) == 0);
    CHECK(c.profiler);
    conf_free(&c);

    /* --help stops there: *c untouched, later arguments not looked at. */
    {
        char *hv[8];
        int i;

        hv[0] = (char *)"shardd";
        for (i = 0; ah[i] != NULL; i++)
            hv[i + 1] = (char *)ah[i];
        memset(&c, 0x5A, sizeof(c));
        CHECK(conf_resolve(i + 1, hv, NULL, &c, &help, &d) == 0);
        CHECK(help);
        CHECK(c.threads == 0x5A5A5A5Au);
    }
    /* An error before --help is still an error. */
    help = false;
    CHECK(conf_resolve(3, argv, NULL, &c, &help, &d) == SD_EINVAL);
    CHECK(!help);
}

static void test_errors(void)
{
    char bad_file[128], msg[512], cfg_env[256];
    char *env_cfg[] = {cfg_env, NULL};
    const char *path;

    /* A bad integer in the file names file:line and the key. */
    path = write_file("bad_int.conf", "\n# x\nthreads = abc\n", 0644);
    {
        const char *args[] = {"--config", path, NULL};

        snprintf(msg, sizeof(msg),
                 "%s:3: threads: \"abc\" is not an integer in [0, 256]", path);
        expect_error(args, NULL, SD_EINVAL, msg, true);
    }
    /* Out of range, in the environment and as a flag. */
    {
        char *env[] = {(char *)"SHARDD_THREADS=300", NULL};
        const char *f1[] = {"--threads=257", NULL};
        const char *f2[] = {"--max-message-mb", "1025", NULL};
        const char *f3[] = {"--default-batch=16777217", NULL};
        const char *f4[] = {"--threads", "-1", NULL};
        const char *f5[] = {"--grace-s", "99999999999999999999999", NULL};
        const char *f6[] = {"--retrain-ensemble=17", NULL};
        const char *f7[] = {"--retrain-ensemble=0", NULL};

        expect_error(NULL, env, SD_ERANGE,
                     "SHARDD_THREADS: \"300\" is not an integer in [0, 256]",
                     true);
        expect_error(f1, NULL, SD_ERANGE,
                     "--threads: \"257\" is not an integer in [0, 256]", true);
        expect_error(f2, NULL, SD_ERANGE, "--max-message-mb: \"1025\"", false);
        expect_error(f3, NULL, SD_ERANGE, "--default-batch:", false);
        expect_error(f4, NULL, SD_EINVAL, "--threads: \"-1\"", false);
        expect_error(f5, NULL, SD_ERANGE, "--grace-s:", false);
        /* An ensemble file holds 1 to 16 members (NET_ENSEMBLE_MAX). */
        expect_error(f6, NULL, SD_ERANGE,
                     "--retrain-ensemble: \"17\" is not an integer in [1, 16]",
                     true);
        expect_error(f7, NULL, SD_ERANGE, "--retrain-ensemble: \"0\"", false);
    }
    /* Unknown keys, with and without a suggestion. */
    path = write_file("unknown.conf", "threds = 4\n", 0644);
    snprintf(cfg_env, sizeof(cfg_env), "SHARDD_CONFIG=%s", path);
    snprintf(msg, sizeof(msg),
             "%s:1: unknown key \"threds\" (did you mean \"threads\"?)", path);
    expect_error(NULL, env_cfg, SD_EINVAL, msg, true);
    path = write_file("unknown2.conf", "\nzzzzzz = 4\n", 0644);
    snprintf(msg, sizeof(msg), "%s:2: unknown key \"zzzzzz\"", path);
    {
        const char *args[] = {"--config", path, NULL};
        const char *f1[] = {"--thread", "4", NULL};
        const char *f2[] = {"--data_dir=/x", NULL};
        const char *f3[] = {"--frobnicate", NULL};

        expect_error(args, NULL, SD_EINVAL, msg, false);
        expect_error(f1, NULL, SD_EINVAL,
                     "--thread: unknown option (did you mean --threads?)",
                     true);
        expect_error(f2, NULL, SD_EINVAL, "(did you mean --data-dir?)", false);
        expect_error(f3, NULL, SD_EINVAL, "--frobnicate: unknown option",
                     false);
    }
    /* A key given twice; listen may repeat. */
    path = write_file("twice.conf",
                      "listen = 127.0.0.1:1\ngrace_s = 1\nlisten = "
                      "127.0.0.1:2\ngrace_s = 2\n",
                      0644);
    snprintf(cfg_env, sizeof(cfg_env), "SHARDD_CONFIG=%s", path);
    snprintf(msg, sizeof(msg), "%s:4: grace_s: given twice (first on line 2)",
             path);
    expect_error(NULL, env_cfg, SD_EINVAL, msg, true);
    /* Bad bool, backend, log level, from each source. */
    path = write_file("bool.conf", "profiler = maybe\n", 0644);
    snprintf(cfg_env, sizeof(cfg_env), "SHARDD_CONFIG=%s", path);
    snprintf(msg, sizeof(msg),
             "%s:1: profiler: \"maybe\" is not on/off, true/false, yes/no or "
             "1/0",
             path);
    expect_error(NULL, env_cfg, SD_EINVAL, msg, true);
    {
        const char *f1[] = {"--backend=gpu", NULL};
        char *env[] = {(char *)"SHARDD_LOG_LEVEL=loud", NULL};
        char *env2[] = {(char *)"SHARDD_PROFILER=", NULL};

        expect_error(f1, NULL, SD_EINVAL,
                     "--backend: \"gpu\" is not auto, cpu or cuda", true);
        expect_error(NULL, env, SD_EINVAL,
                     "SHARDD_LOG_LEVEL: \"loud\" is not error, warn, info or "
                     "debug",
                     true);
        expect_error(NULL, env2, SD_EINVAL, "SHARDD_PROFILER: \"\" is not",
                     false);
    }
    /* Listen addresses. */
    {
        const char *f1[] = {"--listen", "localhost", NULL};
        const char *f2[] = {"--listen", "::1:80", NULL};
        const char *f3[] = {"--listen", "unix:", NULL};
        const char *f4[] = {"--listen", "1.2.3.4:65536", NULL};
        const char *f5[] = {"--listen", "a:1,a:1", NULL};
        const char *f6[] = {"--listen", "a:1,,b:2", NULL};
        const char *f7[] = {"--listen=a:1,a:2,a:3,a:4,a:5",
                            "--listen=a:6,a:7,a:8,a:9", NULL};
        const char *f8[] = {"--listen", ":80", NULL};
        char *env[] = {(char *)"SHARDD_LISTEN=", NULL};

        expect_error(f1, NULL, SD_EINVAL,
                     "--listen: \"localhost\" is neither unix:PATH nor "
                     "HOST:PORT",
                     true);
        expect_error(f2, NULL, SD_EINVAL, "has an IPv6 host without brackets",
                     false);
        expect_error(f3, NULL, SD_EINVAL, "--listen: \"unix:\"", false);
        expect_error(f4, NULL, SD_EINVAL, "has a port that is not an integer",
                     false);
        expect_error(f5, NULL, SD_EINVAL, "\"a:1\" is listed twice", false);
        expect_error(f6, NULL, SD_EINVAL, "--listen: an empty address", false);
        expect_error(f7, NULL, SD_ERANGE, "--listen: more than 8", false);
        expect_error(f8, NULL, SD_EINVAL, "has no host", false);
        expect_error(NULL, env, SD_EINVAL, "SHARDD_LISTEN: an empty address",
                     false);
    }
    /* Syntax. */
    path = write_file("syntax.conf", "threads 4\n", 0644);
    snprintf(cfg_env, sizeof(cfg_env), "SHARDD_CONFIG=%s", path);
    snprintf(msg, sizeof(msg), "%s:1: expected `key = value`", path);
    expect_error(NULL, env_cfg, SD_EINVAL, msg, false);
    path = write_file("quote.conf", "data_dir = \"/x\n", 0644);
    snprintf(cfg_env, sizeof(cfg_env), "SHARDD_CONFIG=%s", path);
    snprintf(msg, sizeof(msg),
             "%s:1: data_dir: the closing double quote is missing", path);
    expect_error(NULL, env_cfg, SD_EINVAL, msg, true);
    path = write_file("after.conf", "data_dir = \"/x\" y\n", 0644);
    snprintf(cfg_env, sizeof(cfg_env), "SHARDD_CONFIG=%s", path);
    expect_error(NULL, env_cfg, SD_EINVAL, "data_dir: \"y\" after the closing",
                 false);
    path = write_file("cfgkey.conf", "\n\nconfig = /etc/x\n", 0644);
    snprintf(cfg_env, sizeof(cfg_env), "SHARDD_CONFIG=%s", path);
    snprintf(msg, sizeof(msg), "%s:3: config: cannot be set in the file", path);
    expect_error(NULL, env_cfg, SD_EINVAL, msg, false);
    path = write_file("emptydir.conf", "data_dir =\n", 0644);
    snprintf(cfg_env, sizeof(cfg_env), "SHARDD_CONFIG=%s", path);
    snprintf(msg, sizeof(msg), "%s:1: data_dir: the path is empty", path);
    expect_error(NULL, env_cfg, SD_EINVAL, msg, true);
    {
        const char *f1[] = {"--threads", NULL};
        const char *f2[] = {"extra", NULL};
        const char *f3[] = {"-t", "4", NULL};

        expect_error(f1, NULL, SD_EINVAL, "--threads: needs a value", true);
        expect_error(f2, NULL, SD_EINVAL, "\"extra\": unexpected argument",
                     false);
        expect_error(f3, NULL, SD_EINVAL, "\"-t\": unexpected argument", false);
    }
    /* A missing config file names who named it. */
    snprintf(bad_file, sizeof(bad_file), "%s/missing.conf", dir);
    {
        const char *args[] = {"--config", bad_file, NULL};

        snprintf(msg, sizeof(msg), "--config: %s: cannot open: ", bad_file);
        expect_error(args, NULL, SD_ENOENT, msg, false);
        snprintf(cfg_env, sizeof(cfg_env), "SHARDD_CONFIG=%s", bad_file);
        snprintf(msg, sizeof(msg),
                 "SHARDD_CONFIG: %s: cannot open: ", bad_file);
        expect_error(NULL, env_cfg, SD_ENOENT, msg, false);
    }
    /* A directory is not a config file. */
    {
        const char *args[] = {"--config", dir, NULL};

        expect_error(args, NULL, SD_EIO, "not a regular file", false);
    }
}

static void test_token(void)
{
    char msg[512], cfg_env[256], tok_env[256];
    const char *tok, *conf, *open_tok;
    struct sd_config c;
    struct sd_diag d;

    tok = write_file("admin-token", "  s3cret-token \t\nsecond line\n", 0600);
    snprintf(tok_env, sizeof(tok_env), "SHARDD_ADMIN_TOKEN_FILE=%s", tok);
    {
        char *env[] = {tok_env, NULL};

        CHECK(resolve(NULL, env, &c, &d) == 0);
        CHECK(strcmp(c.admin_token, "s3cret-token") == 0);
        CHECK(strcmp(c.admin_token_file, tok) == 0);
        conf_free(&c);
    }
    /* Both set: an error naming both places. */
    conf = write_file("both.conf", "admin_token_file = \"\"\n", 0600);
    {
        char *env[] = {tok_env, (char *)"SHARDD_ADMIN_TOKEN=abc", NULL};
        const char *unset[] = {"--admin-token-file=", NULL};

        expect_error(NULL, env, SD_EINVAL,
                     "SHARDD_ADMIN_TOKEN and SHARDD_ADMIN_TOKEN_FILE: both "
                     "set; give one (an empty value unsets)",
                     true);
        /* An empty value unsets the file. */
        CHECK(resolve(unset, env, &c, &d) == 0);
        CHECK(strcmp(c.admin_token, "abc") == 0 && c.admin_token_file == NULL);
        conf_free(&c);
    }
    conf = write_file("both.conf",
                      "admin_token = \"xyz\"\n"
                      "admin_token_file = /etc/shardd/admin-token\n",
                      0600);
    snprintf(cfg_env, sizeof(cfg_env), "SHARDD_CONFIG=%s", conf);
    {
        char *env[] = {cfg_env, NULL};

        snprintf(msg, sizeof(msg),
                 "%s:1: admin_token and %s:2: admin_token_file: both set", conf,
                 conf);
        expect_error(NULL, env, SD_EINVAL, msg, false);
    }
    /* A token file others can read is refused, naming it. */
    open_tok = write_file("open-token", "t\n", 0644);
    {
        const char *args[] = {"--admin-token-file", open_tok, NULL};

        snprintf(msg, sizeof(msg),
                 "--admin-token-file: %s is accessible by every user (mode "
                 "0644); chmod 0600 it",
                 open_tok);
        expect_error(args, NULL, SD_EINVAL, msg, true);
    }
    open_tok = write_file("open-token", "t\n", 0602);
    {
        const char *args[] = {"--admin-token-file", open_tok, NULL};

        expect_error(args, NULL, SD_EINVAL, "(mode 0602)", false);
    }
    /* Too long, from the file and directly (the token is never shown). */
    {
        char big[CONF_TOKEN_MAX + 3];
        const char *bigf;
        const char *a1[] = {"--admin-token-file", NULL, NULL};
        const char *a2[] = {"--admin-token", big, NULL};

        memset(big, 'x', sizeof(big) - 2);
        big[sizeof(big) - 2] = '\n';
        big[sizeof(big) - 1] = '\0';
        bigf = write_file("big-token", big, 0600);
        a1[1] = bigf;
        expect_error(a1, NULL, SD_ERANGE, "the token is longer than 255 bytes",
                     false);
        big[sizeof(big) - 2] = '\0';
        expect_error(a2, NULL, SD_ERANGE,
                     "--admin-token: longer than 255 bytes", true);
        big[CONF_TOKEN_MAX] = '\0'; /* exactly the limit: fine */
        CHECK(resolve(a2, NULL, &c, &d) == 0);
        CHECK(strlen(c.admin_token) == CONF_TOKEN_MAX);
        conf_free(&c);
    }
    /* Empty, missing, a directory. */
    {
        const char *empty = write_file("empty-token", " \n", 0600);
        const char *a1[] = {"--admin-token-file", empty, NULL};
        const char *a2[] = {"--admin-token-file", "/nonexistent/tok", NULL};
        const char *a3[] = {"--admin-token-file", dir, NULL};

        expect_error(a1, NULL, SD_EINVAL, "the first line is empty", false);
        expect_error(a2, NULL, SD_ENOENT,
                     "--admin-token-file: /nonexistent/tok: cannot open",
                     false);
        expect_error(a3, NULL, SD_EINVAL, "not a regular file", false);
    }
    /* A token written into a config file others can read. */
    conf = write_file("tok-open.conf", "\nadmin_token = abc\n", 0644);
    {
        const char *args[] = {"--config", conf, NULL};

        snprintf(msg, sizeof(msg),
                 "%s:2: admin_token: the file is readable by every user", conf);
        expect_error(args, NULL, SD_EINVAL, msg, false);
        chmod(conf, 0640);
        CHECK(resolve(args, NULL, &c, &d) == 0);
        CHECK(strcmp(c.admin_token, "abc") == 0);
        conf_free(&c);
    }
}

static void test_reload(void)
{
    char cfg_env[256], names[128];
    char *env[] = {cfg_env, NULL};
    char *argv[] = {(char *)"shardd", (char *)"--max-tables", (char *)"77",
                    NULL};
    const char *path, *tok;
    struct sd_config run, next, keep;
    struct conf_changes ch;
    struct sd_diag d;
    size_t n;

    tok = write_file("reload-token", "one\n", 0600);
    path = write_file("reload.conf",
                      "listen = 127.0.0.1:1\n"
                      "threads = 4\n"
                      "log_level = info\n"
                      "admin_token_file = ",
                      0644);
    /* append the token path */
    {
        FILE *f = fopen(path, "a");

        CHECK(f != NULL);
        if (f != NULL) {
            fprintf(f, "%s\n", tok);
            fclose(f);
        }
    }
    snprintf(cfg_env, sizeof(cfg_env), "SHARDD_CONFIG=%s", path);
    CHECK(conf_resolve(3, argv, env, &run, NULL, &d) == 0);
    CHECK(strcmp(run.admin_token, "one") == 0 && run.max_tables == 77);

    /* Nothing changed. */
    CHECK(conf_reload(&run, 3, argv, env, &next, &ch, &d) == 0);
    CHECK(ch.applied == 0 && ch.restart == 0);
    conf_free(&next);

    /* Changed: restart-only keys keep running values, the rest apply. */
    write_file("reload-token", "two\n", 0600);
    {
        char text[512];

        snprintf(text, sizeof(text),
                 "listen = 127.0.0.1:2\n"
                 "threads = 8\n"
                 "backend = cpu\n"
                 "log_level = debug\n"
                 "grace_s = 30\n"
                 "max_tables = 5\n" /* the flag still wins: no change */
                 "admin_token_file = %s\n",
                 tok);
        write_file("reload.conf", text, 0644);
    }
    CHECK(conf_reload(&run, 3, argv, env, &next, &ch, &d) == 0);
    CHECK(ch.restart ==
          (CONF_BIT(CONF_KEY_LISTEN) | CONF_BIT(CONF_KEY_THREADS) |
           CONF_BIT(CONF_KEY_BACKEND)));
    CHECK(ch.applied ==
          (CONF_BIT(CONF_KEY_ADMIN_TOKEN) | CONF_BIT(CONF_KEY_GRACE_S) |
           CONF_BIT(CONF_KEY_LOG_LEVEL)));
    CHECK(next.nlisten == 1 && strcmp(next.listen[0], "127.0.0.1:1") == 0);
    CHECK(next.threads == 4 && next.backend == CONF_BACKEND_AUTO);
    CHECK(next.log_level == CONF_LOG_DEBUG && next.grace_s == 30);
    CHECK(strcmp(next.admin_token, "two") == 0);
    CHECK(next.max_tables == 77);
    n = conf_keys_format(ch.restart, names, sizeof(names));
    CHECK(strcmp(names, "listen, threads, backend") == 0);
    CHECK(n == strlen("listen, threads, backend"));
    n = conf_keys_format(ch.applied, names, sizeof(names));
    CHECK(strcmp(names, "admin_token, grace_s, log_level") == 0);
    n = conf_keys_format(ch.applied, names, 8); /* truncated, as snprintf */
    CHECK(n == strlen("admin_token, grace_s, log_level"));
    CHECK(strcmp(names, "admin_t") == 0);
    CHECK(conf_keys_format(0, names, sizeof(names)) == 0 && names[0] == '\0');

    /* A broken file: an error, next and ch untouched, running stays. */
    write_file("reload.conf", "threads = many\n", 0644);
    memset(&keep, 0x77, sizeof(keep));
    ch.applied = ch.restart = 0x1234;
    CHECK(conf_reload(&next, 3, argv, env, &keep, &ch, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, ":1: threads:") != NULL);
    CHECK(keep.threads == 0x77777777u && ch.applied == 0x1234);
    conf_free(&next);
    conf_free(&run);
}

/* --print-config's output reads back as the same configuration. */
static void test_print(void)
{
    const char *args[] = {"--listen",
                          "unix:/run/s.sock",
                          "--listen",
                          "[::]:7411",
                          "--data-dir",
                          "/var/lib/shardd",
                          "--threads=12",
                          "--profiler=off",
                          "--backend=cpu",
                          "--log-level=warn",
                          "--admin-token",
                          "hush",
                          "--grace-s",
                          "0",
                          NULL};
    char out[128], *text;
    struct sd_config c, back;
    struct sd_diag d;
    FILE *f;
    long len;

    CHECK(resolve(args, NULL, &c, &d) == 0);
    snprintf(out, sizeof(out), "%s/printed.conf", dir);
    snprintf(paths[npaths++], sizeof(paths[0]), "%s", out);
    f = fopen(out, "w+");
    CHECK(f != NULL);
    if (f == NULL)
        return;
    conf_print(f, &c);
    fflush(f);
    len = ftell(f);
    text = calloc(1, (size_t)len + 1);
    rewind(f);
    CHECK(text != NULL && fread(text, 1, (size_t)len, f) == (size_t)len);
    fclose(f);
    chmod(out, 0600);
    CHECK(strstr(text, "hush") == NULL); /* the token never printed */
    CHECK(strstr(text, "# admin_token: set (redacted; --admin-token)") != NULL);
    CHECK(strstr(text, "threads = 12  # --threads\n") != NULL);
    CHECK(strstr(text, "max_tables = 65536  # default\n") != NULL);
    free(text);

    conf_default(&back);
    CHECK(conf_load_file(&back, out, &d) == 0);
    if (d.msg[0] != '\0')
        fprintf(stderr, "  %s\n", d.msg);
    CHECK(back.nlisten == 2 && strcmp(back.listen[1], "[::]:7411") == 0);
    CHECK(strcmp(back.data_dir, "/var/lib/shardd") == 0);
    CHECK(back.backend == CONF_BACKEND_CPU && !back.profiler);
    CHECK(back.log_level == CONF_LOG_WARN && back.grace_s == 0);
    CHECK(back.admin_token[0] == '\0'); /* redacted, so not read back */
    CHECK(back.threads == 12 && back.max_tables == c.max_tables &&
          back.max_message_mb == c.max_message_mb &&
          back.default_batch == c.default_batch &&
          back.default_time_budget_ms == c.default_time_budget_ms &&
          back.plan_cache_entries == c.plan_cache_entries &&
          back.profiler_idle_ms == c.profiler_idle_ms &&
          back.profiler_max_samples == c.profiler_max_samples &&
          back.profiler_batch == c.profiler_batch &&
          back.retrain_every_samples == c.retrain_every_samples &&
          back.retrain_every_hours == c.retrain_every_hours &&
          back.retrain_window_samples == c.retrain_window_samples);
    conf_free(&back);
    conf_free(&c);
}

static void test_usage_and_names(void)
{
    static const char *const flags[] = {"--listen ADDR",
                                        "--data-dir DIR",
                                        "--config FILE",
                                        "--admin-token TOKEN",
                                        "--admin-token-file",
                                        "--threads N",
                                        "--max-message-mb",
                                        "--max-tables",
                                        "--default-batch",
                                        "--default-time-budget-ms",
                                        "--grace-s",
                                        "--plan-cache-entries",
                                        "--backend",
                                        "--profiler on|off",
                                        "--profiler-idle-ms",
                                        "--profiler-max-samples",
                                        "--profiler-batch",
                                        "--retrain-every-samples",
                                        "--retrain-every-hours",
                                        "--log-level",
                                        "--print-config",
                                        "--help",
                                        "(default 127.0.0.1:7411)",
                                        "(default ./shardd-data)",
                                        "(default 65536)",
                                        "(default 10000)"};
    const char *u = conf_usage();
    const char *line;
    struct sd_config c;
    char *p;
    size_t i;

    for (i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        CHECK(strstr(u, flags[i]) != NULL);
        if (strstr(u, flags[i]) == NULL)
            fprintf(stderr, "  usage lacks %s\n", flags[i]);
    }
    /* No line wider than 79 columns. */
    for (line = u; *line != '\0';) {
        const char *nl = strchr(line, '\n');
        size_t w = nl != NULL ? (size_t)(nl - line) : strlen(line);

        CHECK(w <= 79);
        if (w > 79)
            fprintf(stderr, "  too wide: %.*s\n", (int)w, line);
        line = nl != NULL ? nl + 1 : line + w;
    }
    CHECK(conf_usage() == u);
    CHECK(strcmp(conf_key_name(CONF_KEY_MAX_MESSAGE_MB), "max_message_mb") ==
          0);
    CHECK(conf_key_name(CONF_KEY_COUNT) == NULL);
    CHECK(strcmp(conf_backend_name(CONF_BACKEND_CUDA), "cuda") == 0);
    CHECK(strcmp(conf_log_level_name(CONF_LOG_DEBUG), "debug") == 0);
    conf_default(&c);
    p = conf_data_path(&c, CONF_DB_FILE);
    CHECK(p != NULL && strcmp(p, "./shardd-data/shardd.db") == 0);
    free(p);
    conf_free(&c);
}

int main(void)
{
    int i;

    snprintf(dir, sizeof(dir), "/tmp/test_config.XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_defaults();
    test_file_format();
    test_precedence();
    test_flags();
    test_errors();
    test_token();
    test_reload();
    test_print();
    test_usage_and_names();
    for (i = 0; i < npaths; i++)
        unlink(paths[i]);
    if (rmdir(dir) != 0)
        perror(dir);
    return tap_done();
}
