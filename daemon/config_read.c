/*
 * Reading the configuration (config.h): the file, the environment, the
 * flags and the admin token file, each through conf__apply(), and the whole
 * resolution in precedence order.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config_int.h"

/* ---------------------------------------------------------------------- */
/* The file                                                                */

static bool is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
}

static bool is_key_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' || ch == '.';
}

/*
 * Splits one line in place into *key and *value (both NULL for a blank or
 * comment line).  Returns 0, or SD_EINVAL with d naming file:line.
 */
static int split_line(struct src *s, char *line, char **key, char **value,
                      struct sd_diag *d)
{
    char *p = line, *k, *v, *end;

    *key = *value = NULL;
    end = p + strlen(p);
    while (end > p && is_space(end[-1]))
        *--end = '\0'; /* the newline, a CR, trailing blanks */
    while (is_space(*p))
        p++;
    if (*p == '\0' || *p == '#')
        return 0;
    k = p;
    while (is_key_char(*p))
        p++;
    if (p == k)
        return sd_diag_set(d, SD_EINVAL,
                           "%s:%u: expected `key = value`, found \"%.*s\"",
                           s->file, s->line, VALUE_SHOW, k);
    end = p;
    while (is_space(*p))
        p++;
    if (*p != '=')
        return sd_diag_set(d, SD_EINVAL,
                           "%s:%u: expected `key = value`, found \"%.*s\"",
                           s->file, s->line, VALUE_SHOW, k);
    *end = '\0';
    p++;
    while (is_space(*p))
        p++;
    if (*p == '"') {
        v = ++p;
        end = strchr(v, '"');
        if (end == NULL)
            return sd_diag_set(d, SD_EINVAL,
                               "%s:%u: %s: the closing double quote is "
                               "missing",
                               s->file, s->line, k);
        *end = '\0';
        p = end + 1;
        while (is_space(*p))
            p++;
        if (*p != '\0' && *p != '#')
            return sd_diag_set(d, SD_EINVAL,
                               "%s:%u: %s: \"%.*s\" after the closing quote",
                               s->file, s->line, k, VALUE_SHOW, p);
    } else {
        /* Unquoted: a # that starts the value or follows white space
         * begins a comment. */
        v = p;
        for (; *p != '\0'; p++)
            if (*p == '#' && (p == v || is_space(p[-1])))
                break;
        *p = '\0';
        while (p > v && is_space(p[-1]))
            *--p = '\0';
    }
    *key = k;
    *value = v;
    return 0;
}

/* Applies one `key = value` of the file. */
static int file_entry(struct sd_config *c, struct src *s, const char *key,
                      const char *value, struct sd_diag *d)
{
    int k = conf__find_key(key), near;

    if (k < 0) {
        near = conf__nearest_key(key);
        if (near >= 0)
            return sd_diag_set(d, SD_EINVAL,
                               "%s:%u: unknown key \"%.*s\" (did you mean "
                               "\"%s\"?)",
                               s->file, s->line, VALUE_SHOW, key,
                               conf__opts[near].name);
        return sd_diag_set(d, SD_EINVAL,
                           "%s:%u: unknown key \"%.*s\" (see docs/config.md)",
                           s->file, s->line, VALUE_SHOW, key);
    }
    if ((conf__opts[k].flags & CONF_NOFILE) != 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s:%u: %s: cannot be set in the file (use "
                           "--config or SHARDD_CONFIG)",
                           s->file, s->line, key);
    if (s->seen[k] && k != CONF_KEY_LISTEN)
        return sd_diag_set(d, SD_EINVAL,
                           "%s:%u: %s: given twice (first on line %u)", s->file,
                           s->line, key, s->first[k]);
    return conf__apply(c, s, (enum conf_key)k, value, d);
}

int conf_load_file(struct sd_config *c, const char *path, struct sd_diag *d)
{
    struct src s;
    struct stat sb;
    char *line = NULL, *key, *value, *copy;
    size_t cap = 0;
    ssize_t n;
    FILE *f;
    int rv = 0;

    memset(&s, 0, sizeof(s));
    s.kind = CONF_SRC_FILE;
    s.file = path;
    f = fopen(path, "r");
    if (f == NULL)
        return sd_diag_set(d, errno == ENOENT ? SD_ENOENT : SD_EIO,
                           "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        rv = sd_diag_set(d, SD_EIO, "%s: not a regular file", path);
        goto out_close;
    }
    while (rv == 0 && (n = getline(&line, &cap, f)) >= 0) {
        s.line++;
        if (strlen(line) != (size_t)n) {
            rv = sd_diag_set(d, SD_EINVAL, "%s:%u: contains a NUL byte", path,
                             s.line);
            break;
        }
        rv = split_line(&s, line, &key, &value, d);
        if (rv == 0 && key != NULL)
            rv = file_entry(c, &s, key, value, d);
    }
    if (rv == 0 && ferror(f))
        rv = sd_diag_set(d, SD_EIO, "%s: cannot read: %s", path,
                         strerror(errno));
    /* A token in a file everyone can read is no secret. */
    if (rv == 0 && s.seen[CONF_KEY_ADMIN_TOKEN] && c->admin_token[0] != '\0' &&
        (sb.st_mode & S_IROTH) != 0)
        rv = sd_diag_set(d, SD_EINVAL,
                         "%s:%u: admin_token: the file is readable by every "
                         "user (mode %04o); chmod o-r it, or use "
                         "admin_token_file",
                         path, s.first[CONF_KEY_ADMIN_TOKEN],
                         (unsigned)(sb.st_mode & 07777));
    if (rv == 0) {
        copy = conf__dup_str(path);
        if (copy == NULL) {
            rv = sd_diag_set(d, SD_ENOMEM, "%s: out of memory", path);
        } else {
            free(c->config);
            c->config = copy;
        }
    }
    free(line);
out_close:
    fclose(f);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* Environment and flags                                                   */

#define ENV_PREFIX "SHARDD_"

int conf_load_env(struct sd_config *c, char *const *envp, struct sd_diag *d)
{
    char name[KEY_NAME_MAX + sizeof(ENV_PREFIX)];
    struct src s;
    size_t plen = strlen(ENV_PREFIX), nlen;
    int k, rv;

    memset(&s, 0, sizeof(s));
    s.kind = CONF_SRC_ENV;
    for (; envp != NULL && *envp != NULL; envp++) {
        const char *e = *envp, *eq = strchr(e, '=');

        if (eq == NULL || strncmp(e, ENV_PREFIX, plen) != 0)
            continue;
        nlen = (size_t)(eq - e);
        for (k = 0; k < CONF_KEY_COUNT; k++) {
            memcpy(name, ENV_PREFIX, plen);
            conf__spell(conf__opts[k].name, true, name + plen,
                        sizeof(name) - plen);
            if (strlen(name) == nlen && memcmp(name, e, nlen) == 0)
                break;
        }
        /* Not ours (shardctl's, a test's): ignored, see conf_load_env(). */
        if (k == CONF_KEY_COUNT || s.seen[k])
            continue;
        rv = conf__apply(c, &s, (enum conf_key)k, eq + 1, d);
        if (rv != 0)
            return rv;
    }
    return 0;
}

/* The key of a flag name ("max-message-mb", no leading dashes), or -1. */
static int flag_key(const char *name, size_t len)
{
    char s[KEY_NAME_MAX];
    int k;

    for (k = 0; k < CONF_KEY_COUNT; k++) {
        conf__spell(conf__opts[k].name, false, s, sizeof(s));
        if (strlen(s) == len && memcmp(s, name, len) == 0)
            return k;
    }
    return -1;
}

static int unknown_flag(const char *arg, size_t len, struct sd_diag *d)
{
    char name[KEY_NAME_MAX + 1], s[KEY_NAME_MAX];
    int near;

    if (len > KEY_NAME_MAX)
        len = KEY_NAME_MAX;
    memcpy(name, arg, len);
    name[len] = '\0';
    near = conf__nearest_key(name);
    if (near < 0)
        return sd_diag_set(d, SD_EINVAL, "--%s: unknown option (see --help)",
                           name);
    conf__spell(conf__opts[near].name, false, s, sizeof(s));
    return sd_diag_set(d, SD_EINVAL,
                       "--%s: unknown option (did you mean --%s?)", name, s);
}

/*
 * One option at argv[*i] (after "--"): its key and value.  A value in the
 * next argument moves *i on.  Returns 0 or SD_EINVAL.
 */
static int flag_value(int argc, char **argv, int *i, int *key,
                      const char **value, struct sd_diag *d)
{
    const char *name = argv[*i] + 2, *eq = strchr(name, '=');
    size_t len = eq != NULL ? (size_t)(eq - name) : strlen(name);
    int k = flag_key(name, len);
    bool b;

    /* --no-profiler: a bool's off, without a value. */
    if (k < 0 && eq == NULL && len > 3 && strncmp(name, "no-", 3) == 0) {
        k = flag_key(name + 3, len - 3);
        if (k >= 0 && conf__opts[k].type == T_BOOL) {
            *key = k;
            *value = "off";
            return 0;
        }
        k = -1;
    }
    if (k < 0)
        return unknown_flag(name, len, d);
    *key = k;
    if (eq != NULL) {
        *value = eq + 1;
    } else if (conf__opts[k].type == T_BOOL) {
        /* --profiler alone means on; --profiler off also works. */
        *value = "on";
        if (*i + 1 < argc && conf__parse_bool(argv[*i + 1], &b) == 0)
            *value = argv[++*i];
    } else if (*i + 1 < argc) {
        *value = argv[++*i];
    } else {
        return sd_diag_set(d, SD_EINVAL, "--%.*s: needs a value", (int)len,
                           name);
    }
    return 0;
}

int conf_parse_args(struct sd_config *c, int argc, char **argv, bool *help,
                    struct sd_diag *d)
{
    struct src s;
    const char *a, *value = NULL;
    int i, k = 0, rv;

    memset(&s, 0, sizeof(s));
    s.kind = CONF_SRC_FLAG;
    for (i = 1; i < argc; i++) {
        a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            if (help != NULL)
                *help = true;
            return 0;
        }
        if (strcmp(a, "--print-config") == 0) {
            c->print_config = true;
            continue;
        }
        if (strcmp(a, "--version") == 0) {
            c->print_version = true;
            continue;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0')
            return sd_diag_set(d, SD_EINVAL,
                               "\"%.*s\": unexpected argument (options are "
                               "--key VALUE; see --help)",
                               VALUE_SHOW, a);
        rv = flag_value(argc, argv, &i, &k, &value, d);
        if (rv == 0)
            rv = conf__apply(c, &s, (enum conf_key)k, value, d);
        if (rv != 0)
            return rv;
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Resolution                                                              */

/*
 * Reads the token: the first line of c->admin_token_file, trimmed.  The
 * file must be a regular file that other users can neither read nor write.
 */
static int read_token(struct sd_config *c, struct sd_diag *d)
{
    const char *path = c->admin_token_file;
    char label[LABEL_SIZE], buf[TOKEN_LIMIT + 1], *tok, *p;
    struct stat sb;
    ssize_t n;
    size_t len;
    int fd, rv = 0;

    conf__label_held(c, CONF_KEY_ADMIN_TOKEN_FILE, label, sizeof(label));
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return sd_diag_set(d, errno == ENOENT ? SD_ENOENT : SD_EIO,
                           "%s: %s: cannot open: %s", label, path,
                           strerror(errno));
    /* fstat the open file, not the path, so the checked file is the one
     * read. */
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        rv = sd_diag_set(d, SD_EINVAL, "%s: %s: not a regular file", label,
                         path);
        goto out_close;
    }
    if ((sb.st_mode & (S_IROTH | S_IWOTH)) != 0) {
        rv = sd_diag_set(d, SD_EINVAL,
                         "%s: %s is accessible by every user (mode %04o); "
                         "chmod 0600 it",
                         label, path, (unsigned)(sb.st_mode & 07777));
        goto out_close;
    }
    len = 0;
    while (len < TOKEN_LIMIT) {
        n = read(fd, buf + len, TOKEN_LIMIT - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rv = sd_diag_set(d, SD_EIO, "%s: %s: cannot read: %s", label, path,
                             strerror(errno));
            goto out_close;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    p = strchr(buf, '\n');
    if (p != NULL)
        *p = '\0';
    else if (len == TOKEN_LIMIT) {
        rv = sd_diag_set(d, SD_ERANGE,
                         "%s: %s: the first line is longer than %d bytes",
                         label, path, TOKEN_LIMIT - 1);
        goto out_close;
    }
    tok = buf;
    while (is_space(*tok))
        tok++;
    p = tok + strlen(tok);
    while (p > tok && is_space(p[-1]))
        *--p = '\0';
    if (*tok == '\0') {
        rv = sd_diag_set(d, SD_EINVAL, "%s: %s: the first line is empty", label,
                         path);
        goto out_close;
    }
    if (strlen(tok) > CONF_TOKEN_MAX) {
        rv = sd_diag_set(d, SD_ERANGE,
                         "%s: %s: the token is longer than %d "
                         "bytes",
                         label, path, CONF_TOKEN_MAX);
        goto out_close;
    }
    p = conf__dup_str(tok);
    if (p == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "%s: out of memory", label);
        goto out_close;
    }
    free(c->admin_token);
    c->admin_token = p;
out_close:
    memset(buf, 0, sizeof(buf)); /* do not leave the secret on the stack */
    close(fd);
    return rv;
}

/* Checks across keys, then the token file. */
static int finish(struct sd_config *c, struct sd_diag *d)
{
    char a[LABEL_SIZE], b[LABEL_SIZE];

    if (c->admin_token[0] != '\0' && c->admin_token_file != NULL) {
        conf__label_held(c, CONF_KEY_ADMIN_TOKEN, a, sizeof(a));
        conf__label_held(c, CONF_KEY_ADMIN_TOKEN_FILE, b, sizeof(b));
        return sd_diag_set(d, SD_EINVAL,
                           "%s and %s: both set; give one (an empty value "
                           "unsets)",
                           a, b);
    }
    if (c->admin_token_file != NULL)
        return read_token(c, d);
    return 0;
}

int conf_resolve(int argc, char **argv, char *const *envp, struct sd_config *c,
                 bool *help, struct sd_diag *d)
{
    struct sd_config pre, t;
    bool h = false;
    int rv;

    /*
     * A first pass over the environment and the flags finds the file (a
     * --config flag beats SHARDD_CONFIG) and --help, and reports their
     * errors before the file is read.
     */
    conf_default(&pre);
    rv = conf_load_env(&pre, envp, d);
    if (rv == 0)
        rv = conf_parse_args(&pre, argc, argv, &h, d);
    if (rv != 0 || h)
        goto out_pre;

    conf_default(&t);
    if (pre.config != NULL) {
        rv = conf_load_file(&t, pre.config, d);
        if (rv == SD_ENOENT || rv == SD_EIO) {
            char label[LABEL_SIZE], msg[sizeof(d->msg)];

            /* Say which setting named the missing file. */
            conf__label_held(&pre, CONF_KEY_CONFIG, label, sizeof(label));
            snprintf(msg, sizeof(msg), "%s", d != NULL ? d->msg : "");
            sd_diag_set(d, rv, "%s: %s", label, msg);
        }
    }
    if (rv == 0)
        rv = conf_load_env(&t, envp, d);
    if (rv == 0)
        rv = conf_parse_args(&t, argc, argv, NULL, d);
    if (rv == 0)
        rv = finish(&t, d);
    if (rv != 0) {
        conf_free(&t);
        goto out_pre;
    }
    *c = t;
out_pre:
    if (rv == 0 && help != NULL)
        *help = h;
    conf_free(&pre);
    return rv;
}
