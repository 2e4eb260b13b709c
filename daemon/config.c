/*
 * shardd's configuration (config.h): one table row per key gives its type,
 * range, default, help line and whether SIGHUP may change it (Redis'
 * static_configs in config.c, reference/style.md 3.7), so parsing, --help,
 * --print-config and reload cannot drift apart.  Each source (file,
 * environment, flags) goes through the same apply(); only the label that
 * prefixes an error ("FILE:LINE: key", "SHARDD_KEY", "--key") differs.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define PATH_LIMIT      4096 /* longest path accepted (Linux PATH_MAX) */
#define SUN_PATH_LIMIT  107  /* longest unix socket path (sun_path - 1) */
#define TOKEN_LIMIT     4096 /* bytes read from admin_token_file */
#define LABEL_SIZE      320  /* "FILE:LINE: key"; longer paths are cut */
#define KEY_NAME_MAX    40   /* longest key, with room */
#define VALUE_SHOW      80   /* a bad value is quoted up to this length */
#define USAGE_SIZE      6144 /* conf_usage()'s text */
#define USAGE_HELP_COL  30   /* help text starts in this column */
#define USAGE_LINE_WRAP 79

enum opt_type {
    T_LISTEN, /* list of addresses */
    T_PATH,   /* non-empty path; admin_token_file: "" unsets it */
    T_SECRET, /* any string, never shown */
    T_U32,    /* integer in [min, max] */
    T_BOOL,   /* on/off/true/false/yes/no/1/0 */
    T_WORD    /* one of the words of arg ("auto|cpu|cuda"), as its index */
};

struct opt {
    const char *name; /* file key; env and flag spellings derive from it */
    enum opt_type type;
    size_t off;        /* the field in struct sd_config */
    uint32_t min, max; /* T_U32 range */
    const char *def;   /* the default as text; NULL: unset */
    unsigned flags;    /* CONF_RESTART, CONF_NOFILE */
    const char *arg;   /* --help's name for the value; T_WORD: the words */
    const char *help;  /* --help's line, without the default */
};

static const struct opt opts[CONF_KEY_COUNT] = {
#define CONF_ROW(K, key, type, lo, hi, dflt, flags, meta, text)                \
    [CONF_KEY_##K] = {#key,  T_##type, offsetof(struct sd_config, key),        \
                      lo,    hi,       dflt,                                   \
                      flags, meta,     text},
    CONF_KEYS(CONF_ROW)
#undef CONF_ROW
};

_Static_assert(CONF_KEY_COUNT <= 32, "a set of keys is a uint32_t");

/* One source being applied: where values come from, and what it set. */
struct src {
    enum conf_source kind;
    const char *file;               /* CONF_SRC_FILE */
    unsigned line;                  /* CONF_SRC_FILE: current line */
    bool seen[CONF_KEY_COUNT];      /* keys this source has set */
    unsigned first[CONF_KEY_COUNT]; /* CONF_SRC_FILE: line of the first */
};

/* ---------------------------------------------------------------------- */
/* Small helpers                                                           */

static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);

    if (p != NULL) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

static char *dup_str(const char *s)
{
    return dup_n(s, strlen(s));
}

static char **str_field(struct sd_config *c, enum conf_key k)
{
    return (char **)(void *)((char *)c + opts[k].off);
}

static const char *str_get(const struct sd_config *c, enum conf_key k)
{
    return *(char *const *)(const void *)((const char *)c + opts[k].off);
}

static uint32_t *u32_field(struct sd_config *c, enum conf_key k)
{
    return (uint32_t *)(void *)((char *)c + opts[k].off);
}

static uint32_t u32_get(const struct sd_config *c, enum conf_key k)
{
    return *(const uint32_t *)(const void *)((const char *)c + opts[k].off);
}

static bool *bool_field(struct sd_config *c, enum conf_key k)
{
    return (bool *)(void *)((char *)c + opts[k].off);
}

static bool bool_get(const struct sd_config *c, enum conf_key k)
{
    return *(const bool *)(const void *)((const char *)c + opts[k].off);
}

/*
 * The words of a T_WORD key are its arg, "a|b|c".  word_find() gives the
 * index of v among them (case-insensitive) or -1; word_at() copies word i
 * into buf ("?" past the end); word_list() writes them as "a, b or c".
 */
static int word_find(const char *words, const char *v)
{
    size_t n = strlen(v);
    const char *p = words, *end;
    int i;

    for (i = 0;; i++) {
        end = strchr(p, '|');
        if ((size_t)((end != NULL ? end : p + strlen(p)) - p) == n &&
            strncasecmp(p, v, n) == 0)
            return i;
        if (end == NULL)
            return -1;
        p = end + 1;
    }
}

static const char *word_at(const char *words, uint32_t i, char *buf,
                           size_t size)
{
    const char *p = words, *end;

    for (; i > 0 && p != NULL; i--) {
        p = strchr(p, '|');
        p = p != NULL ? p + 1 : NULL;
    }
    if (p == NULL)
        return "?";
    end = strchr(p, '|');
    snprintf(buf, size, "%.*s", (int)((end != NULL ? end : p + strlen(p)) - p),
             p);
    return buf;
}

static void word_list(const char *words, char *buf, size_t size)
{
    const char *p = words, *end;
    size_t len = 0;

    buf[0] = '\0';
    while (p != NULL && len < size) {
        end = strchr(p, '|');
        len +=
            (size_t)snprintf(buf + len, size - len, "%s%.*s",
                             p == words    ? ""
                             : end != NULL ? ", "
                                           : " or ",
                             (int)((end != NULL ? end : p + strlen(p)) - p), p);
        p = end != NULL ? end + 1 : NULL;
    }
}

/* Writes "key" with '_' turned into '-' (flags) or upper-cased (env). */
static void spell(const char *name, bool env, char *buf, size_t size)
{
    size_t i;

    for (i = 0; name[i] != '\0' && i + 1 < size; i++) {
        if (env)
            buf[i] = (char)toupper((unsigned char)name[i]);
        else
            buf[i] = name[i] == '_' ? '-' : name[i];
    }
    buf[i] = '\0';
}

/* "FILE:LINE: key", "SHARDD_KEY", "--key" or "key": what an error names. */
static void label_of(enum conf_source kind, const char *file, unsigned line,
                     enum conf_key k, char *buf, size_t size)
{
    char s[KEY_NAME_MAX];

    switch (kind) {
    case CONF_SRC_FILE:
        snprintf(buf, size, "%s:%u: %s", file, line, opts[k].name);
        break;
    case CONF_SRC_ENV:
        spell(opts[k].name, true, s, sizeof(s));
        snprintf(buf, size, "SHARDD_%s", s);
        break;
    case CONF_SRC_FLAG:
        spell(opts[k].name, false, s, sizeof(s));
        snprintf(buf, size, "--%s", s);
        break;
    default:
        snprintf(buf, size, "%s", opts[k].name);
        break;
    }
}

/* The label of the value c holds for key k (for checks across keys). */
static void label_held(const struct sd_config *c, enum conf_key k, char *buf,
                       size_t size)
{
    label_of(c->origin[k].src, c->config != NULL ? c->config : "(file)",
             c->origin[k].line, k, buf, size);
}

/* Levenshtein distance, capped: long strings are simply "far". */
static size_t distance(const char *a, const char *b)
{
    size_t row[KEY_NAME_MAX + 1], la = strlen(a), lb = strlen(b), i, j;

    if (la > KEY_NAME_MAX || lb > KEY_NAME_MAX)
        return (size_t)-1;
    for (j = 0; j <= lb; j++)
        row[j] = j;
    for (i = 1; i <= la; i++) {
        size_t diag = row[0];

        row[0] = i;
        for (j = 1; j <= lb; j++) {
            size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);

            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

/* The key closest to name (dashes read as underscores), or -1. */
static int nearest_key(const char *name)
{
    char norm[KEY_NAME_MAX + 1];
    size_t i, best = (size_t)-1, dist;
    int k, found = -1;

    for (i = 0; i < KEY_NAME_MAX && name[i] != '\0'; i++)
        norm[i] = name[i] == '-' ? '_' : (char)tolower((unsigned char)name[i]);
    norm[i] = '\0';
    for (k = 0; k < CONF_KEY_COUNT; k++) {
        dist = distance(norm, opts[k].name);
        if (dist < best) {
            best = dist;
            found = k;
        }
    }
    /* Only a plausible typo: a few edits, fewer than half the name. */
    if (found < 0 || best > 3 || best * 2 >= strlen(opts[found].name))
        return -1;
    return found;
}

static int find_key(const char *name)
{
    int k;

    for (k = 0; k < CONF_KEY_COUNT; k++)
        if (strcmp(name, opts[k].name) == 0)
            return k;
    return -1;
}

/* ---------------------------------------------------------------------- */
/* Values                                                                  */

static void listen_clear(struct sd_config *c)
{
    size_t i;

    for (i = 0; i < c->nlisten; i++) {
        free(c->listen[i]);
        c->listen[i] = NULL;
    }
    c->nlisten = 0;
}

static bool all_digits(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s != '\0'; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* NULL when a is a usable listen address, else why not. */
static const char *addr_problem(const char *a)
{
    const char *colon, *port;
    size_t hostlen;

    if (strncmp(a, "unix:", 5) == 0) {
        if (a[5] == '\0')
            return "the socket path is empty";
        if (strlen(a + 5) > SUN_PATH_LIMIT)
            return "the socket path is longer than 107 bytes";
        return NULL;
    }
    if (strpbrk(a, " \t") != NULL)
        return "contains white space";
    colon = strrchr(a, ':');
    if (colon == NULL)
        return "is neither unix:PATH nor HOST:PORT";
    hostlen = (size_t)(colon - a);
    port = colon + 1;
    if (hostlen == 0)
        return "has no host (0.0.0.0:PORT or [::]:PORT means every "
               "interface)";
    if (a[0] == '[' ? a[hostlen - 1] != ']' || hostlen < 3
                    : memchr(a, ':', hostlen) != NULL)
        return "an IPv6 host needs brackets, e.g. [::1]:7411";
    if (!all_digits(port) || strlen(port) > 5 ||
        strtoul(port, NULL, 10) > 65535)
        return "the port is not an integer in [0, 65535]";
    return NULL;
}

/* Appends the comma-separated addresses in v to c->listen. */
static int listen_add(struct sd_config *c, const char *label, const char *v,
                      struct sd_diag *d)
{
    const char *p = v, *end, *why;
    char *a;
    size_t n, i;

    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        end = strchr(p, ',');
        n = end != NULL ? (size_t)(end - p) : strlen(p);
        while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        if (n == 0)
            return sd_diag_set(d, SD_EINVAL, "%s: an empty address in \"%.*s\"",
                               label, VALUE_SHOW, v);
        if (c->nlisten == CONF_LISTEN_MAX)
            return sd_diag_set(d, SD_ERANGE, "%s: more than %d addresses",
                               label, CONF_LISTEN_MAX);
        a = dup_n(p, n);
        if (a == NULL)
            return sd_diag_set(d, SD_ENOMEM, "%s: out of memory", label);
        why = addr_problem(a);
        for (i = 0; why == NULL && i < c->nlisten; i++)
            if (strcmp(c->listen[i], a) == 0)
                why = "is listed twice";
        if (why != NULL) {
            sd_diag_set(d, SD_EINVAL, "%s: \"%.*s\" %s", label, VALUE_SHOW, a,
                        why);
            free(a);
            return SD_EINVAL;
        }
        c->listen[c->nlisten++] = a;
        if (end == NULL)
            return 0;
        p = end + 1;
    }
}

static int parse_u32(const char *label, const struct opt *o, const char *v,
                     uint32_t *out, struct sd_diag *d)
{
    unsigned long long x;

    if (!all_digits(v))
        return sd_diag_set(d, SD_EINVAL,
                           "%s: \"%.*s\" is not an integer in [%u, %u]", label,
                           VALUE_SHOW, v, (unsigned)o->min, (unsigned)o->max);
    errno = 0;
    x = strtoull(v, NULL, 10);
    if (errno != 0 || x < o->min || x > o->max)
        return sd_diag_set(d, SD_ERANGE,
                           "%s: \"%.*s\" is not an integer in [%u, %u]", label,
                           VALUE_SHOW, v, (unsigned)o->min, (unsigned)o->max);
    *out = (uint32_t)x;
    return 0;
}

/* The index of v in names (case-insensitive), or -1. */
static int word_index(const char *v, const char *const *names, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (strcasecmp(v, names[i]) == 0)
            return (int)i;
    return -1;
}

static int parse_bool(const char *v, bool *out)
{
    static const char *const on[] = {"on", "true", "yes", "1"};
    static const char *const off[] = {"off", "false", "no", "0"};

    if (word_index(v, on, 4) >= 0) {
        *out = true;
        return 0;
    }
    if (word_index(v, off, 4) >= 0) {
        *out = false;
        return 0;
    }
    return SD_EINVAL;
}

/* Replaces the string field of key k with a copy of v. */
static int set_string(struct sd_config *c, enum conf_key k, const char *label,
                      const char *v, struct sd_diag *d)
{
    char **slot = str_field(c, k), *copy = NULL;

    if (opts[k].type == T_PATH) {
        if (*v == '\0' && k != CONF_KEY_ADMIN_TOKEN_FILE)
            return sd_diag_set(d, SD_EINVAL, "%s: the path is empty", label);
        if (strlen(v) >= PATH_LIMIT)
            return sd_diag_set(d, SD_ERANGE,
                               "%s: the path is longer than %d bytes", label,
                               PATH_LIMIT - 1);
    }
    if (k == CONF_KEY_ADMIN_TOKEN && strlen(v) > CONF_TOKEN_MAX)
        return sd_diag_set(d, SD_ERANGE, "%s: longer than %d bytes", label,
                           CONF_TOKEN_MAX);
    /* An empty admin_token_file unsets it, so a later source can clear
     * what an earlier one set. */
    if (!(k == CONF_KEY_ADMIN_TOKEN_FILE && *v == '\0')) {
        copy = dup_str(v);
        if (copy == NULL)
            return sd_diag_set(d, SD_ENOMEM, "%s: out of memory", label);
    }
    free(*slot);
    *slot = copy;
    return 0;
}

/*
 * Sets key k from the text v coming from source s (whose line is current).
 * listen: the first time this source sets it, the list of earlier sources
 * is dropped; later times append.
 */
static int apply(struct sd_config *c, struct src *s, enum conf_key k,
                 const char *v, struct sd_diag *d)
{
    const struct opt *o = &opts[k];
    char label[LABEL_SIZE];
    bool b;
    int rv = 0, i;

    label_of(s->kind, s->file, s->line, k, label, sizeof(label));
    switch (o->type) {
    case T_LISTEN:
        if (!s->seen[k])
            listen_clear(c);
        rv = listen_add(c, label, v, d);
        break;
    case T_PATH:
    case T_SECRET:
        rv = set_string(c, k, label, v, d);
        break;
    case T_U32:
        rv = parse_u32(label, o, v, u32_field(c, k), d);
        break;
    case T_BOOL:
        if (parse_bool(v, &b) != 0)
            rv = sd_diag_set(d, SD_EINVAL,
                             "%s: \"%.*s\" is not on/off, true/false, yes/no "
                             "or 1/0",
                             label, VALUE_SHOW, v);
        else
            *bool_field(c, k) = b;
        break;
    case T_WORD:
        i = word_find(o->arg, v);
        if (i < 0) {
            char words[128];

            word_list(o->arg, words, sizeof(words));
            rv = sd_diag_set(d, SD_EINVAL, "%s: \"%.*s\" is not %s", label,
                             VALUE_SHOW, v, words);
        } else {
            *u32_field(c, k) = (uint32_t)i;
        }
        break;
    }
    if (rv != 0)
        return rv;
    if (!s->seen[k]) {
        s->seen[k] = true;
        s->first[k] = s->line;
        c->origin[k].src = s->kind;
        c->origin[k].line = s->line;
    }
    if (o->type != T_LISTEN) /* the last one counts */
        c->origin[k].line = s->line;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Defaults and freeing                                                    */

void conf_default(struct sd_config *c)
{
    struct src s;
    struct sd_diag d;
    int k;

    memset(c, 0, sizeof(*c));
    memset(&s, 0, sizeof(s));
    s.kind = CONF_SRC_DEFAULT;
    /* The defaults are text parsed like any value: the table's only. */
    for (k = 0; k < CONF_KEY_COUNT; k++) {
        if (opts[k].def == NULL)
            continue;
        if (apply(c, &s, (enum conf_key)k, opts[k].def, &d) != 0) {
            /* Only an allocation can fail: a default is valid. */
            fprintf(stderr, "shardd: configuration defaults: %s\n", d.msg);
            abort();
        }
    }
}

void conf_free(struct sd_config *c)
{
    int k;

    if (c == NULL)
        return;
    listen_clear(c);
    for (k = 0; k < CONF_KEY_COUNT; k++)
        if (opts[k].type == T_PATH || opts[k].type == T_SECRET) {
            free(*str_field(c, (enum conf_key)k));
            *str_field(c, (enum conf_key)k) = NULL;
        }
}

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
    int k = find_key(key), near;

    if (k < 0) {
        near = nearest_key(key);
        if (near >= 0)
            return sd_diag_set(d, SD_EINVAL,
                               "%s:%u: unknown key \"%.*s\" (did you mean "
                               "\"%s\"?)",
                               s->file, s->line, VALUE_SHOW, key,
                               opts[near].name);
        return sd_diag_set(d, SD_EINVAL,
                           "%s:%u: unknown key \"%.*s\" (see docs/config.md)",
                           s->file, s->line, VALUE_SHOW, key);
    }
    if ((opts[k].flags & CONF_NOFILE) != 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s:%u: %s: cannot be set in the file (use "
                           "--config or SHARDD_CONFIG)",
                           s->file, s->line, key);
    if (s->seen[k] && k != CONF_KEY_LISTEN)
        return sd_diag_set(d, SD_EINVAL,
                           "%s:%u: %s: given twice (first on line %u)", s->file,
                           s->line, key, s->first[k]);
    return apply(c, s, (enum conf_key)k, value, d);
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
        copy = dup_str(path);
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
            spell(opts[k].name, true, name + plen, sizeof(name) - plen);
            if (strlen(name) == nlen && memcmp(name, e, nlen) == 0)
                break;
        }
        /* Not ours (shardctl's, a test's): ignored, see conf_load_env(). */
        if (k == CONF_KEY_COUNT || s.seen[k])
            continue;
        rv = apply(c, &s, (enum conf_key)k, eq + 1, d);
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
        spell(opts[k].name, false, s, sizeof(s));
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
    near = nearest_key(name);
    if (near < 0)
        return sd_diag_set(d, SD_EINVAL, "--%s: unknown option (see --help)",
                           name);
    spell(opts[near].name, false, s, sizeof(s));
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
        if (k >= 0 && opts[k].type == T_BOOL) {
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
    } else if (opts[k].type == T_BOOL) {
        /* --profiler alone means on; --profiler off also works. */
        *value = "on";
        if (*i + 1 < argc && parse_bool(argv[*i + 1], &b) == 0)
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
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0')
            return sd_diag_set(d, SD_EINVAL,
                               "\"%.*s\": unexpected argument (options are "
                               "--key VALUE; see --help)",
                               VALUE_SHOW, a);
        rv = flag_value(argc, argv, &i, &k, &value, d);
        if (rv == 0)
            rv = apply(c, &s, (enum conf_key)k, value, d);
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

    label_held(c, CONF_KEY_ADMIN_TOKEN_FILE, label, sizeof(label));
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
    p = dup_str(tok);
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
        label_held(c, CONF_KEY_ADMIN_TOKEN, a, sizeof(a));
        label_held(c, CONF_KEY_ADMIN_TOKEN_FILE, b, sizeof(b));
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
            label_held(&pre, CONF_KEY_CONFIG, label, sizeof(label));
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

/* ---------------------------------------------------------------------- */
/* Reload                                                                  */

static bool str_eq(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    return strcmp(a, b) == 0;
}

static bool key_equal(const struct sd_config *x, const struct sd_config *y,
                      enum conf_key k)
{
    size_t i;

    switch (opts[k].type) {
    case T_LISTEN:
        if (x->nlisten != y->nlisten)
            return false;
        for (i = 0; i < x->nlisten; i++)
            if (strcmp(x->listen[i], y->listen[i]) != 0)
                return false;
        return true;
    case T_PATH:
    case T_SECRET:
        return str_eq(str_get(x, k), str_get(y, k));
    case T_U32:
    case T_WORD:
        return u32_get(x, k) == u32_get(y, k);
    case T_BOOL:
        return bool_get(x, k) == bool_get(y, k);
    }
    return true;
}

/* Gives `to` from's value of key k (and its origin). */
static int key_copy(struct sd_config *to, const struct sd_config *from,
                    enum conf_key k)
{
    char *copy[CONF_LISTEN_MAX] = {NULL};
    size_t i;

    switch (opts[k].type) {
    case T_LISTEN:
        for (i = 0; i < from->nlisten; i++) {
            copy[i] = dup_str(from->listen[i]);
            if (copy[i] == NULL)
                goto fail_copies;
        }
        listen_clear(to);
        memcpy(to->listen, copy, sizeof(copy));
        to->nlisten = from->nlisten;
        break;
    case T_PATH:
    case T_SECRET:
        if (str_get(from, k) != NULL) {
            copy[0] = dup_str(str_get(from, k));
            if (copy[0] == NULL)
                return SD_ENOMEM;
        }
        free(*str_field(to, k));
        *str_field(to, k) = copy[0];
        break;
    case T_U32:
    case T_WORD:
        *u32_field(to, k) = u32_get(from, k);
        break;
    case T_BOOL:
        *bool_field(to, k) = bool_get(from, k);
        break;
    }
    to->origin[k] = from->origin[k];
    return 0;

fail_copies:
    for (i = 0; i < CONF_LISTEN_MAX; i++)
        free(copy[i]);
    return SD_ENOMEM;
}

int conf_reload(const struct sd_config *running, int argc, char **argv,
                char *const *envp, struct sd_config *next,
                struct conf_changes *ch, struct sd_diag *d)
{
    struct sd_config t;
    uint32_t changed = 0;
    bool help = false;
    int k, rv;

    rv = conf_resolve(argc, argv, envp, &t, &help, d);
    if (rv != 0)
        return rv;
    if (help) /* main() exits on --help; t was not filled */
        return sd_diag_set(d, SD_EINVAL, "--help: nothing to reload");
    for (k = 0; k < CONF_KEY_COUNT; k++)
        if (!key_equal(running, &t, (enum conf_key)k))
            changed |= CONF_BIT(k);
    for (k = 0; k < CONF_KEY_COUNT; k++) {
        if ((changed & CONF_RESTART_KEYS & CONF_BIT(k)) == 0)
            continue;
        rv = key_copy(&t, running, (enum conf_key)k);
        if (rv != 0) {
            conf_free(&t);
            return sd_diag_set(d, rv, "%s: out of memory", opts[k].name);
        }
    }
    ch->applied = changed & ~CONF_RESTART_KEYS;
    ch->restart = changed & CONF_RESTART_KEYS;
    *next = t;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Names, printing, usage                                                  */

const char *conf_key_name(enum conf_key k)
{
    return (unsigned)k < CONF_KEY_COUNT ? opts[k].name : NULL;
}

const char *conf_backend_name(enum conf_backend b)
{
    static const char *const names[] = {"auto", "cpu", "cuda"};

    return (unsigned)b < 3 ? names[b] : "?";
}

const char *conf_log_level_name(enum conf_log_level l)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};

    return (unsigned)l < 4 ? names[l] : "?";
}

int conf_copy(struct sd_config *dst, const struct sd_config *src)
{
    struct sd_config t;
    int k;

    memset(&t, 0, sizeof(t));
    for (k = 0; k < CONF_KEY_COUNT; k++)
        if (key_copy(&t, src, (enum conf_key)k) != 0) {
            conf_free(&t);
            return SD_ENOMEM;
        }
    t.print_config = src->print_config;
    *dst = t;
    return 0;
}

int conf_snap_new(const struct sd_config *c, struct conf_snap **out)
{
    struct conf_snap *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return SD_ENOMEM;
    if (conf_copy(&s->c, c) != 0) {
        free(s);
        return SD_ENOMEM;
    }
    atomic_init(&s->refs, 1);
    *out = s;
    return 0;
}

struct conf_snap *conf_snap_ref(struct conf_snap *s)
{
    atomic_fetch_add(&s->refs, 1);
    return s;
}

void conf_snap_unref(struct conf_snap *s)
{
    if (s == NULL || atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    conf_free(&s->c);
    free(s);
}

size_t conf_keys_format(uint32_t set, char *buf, size_t size)
{
    size_t need = 0, n;
    int k;

    if (size > 0)
        buf[0] = '\0';
    for (k = 0; k < CONF_KEY_COUNT; k++) {
        if ((set & CONF_BIT(k)) == 0)
            continue;
        n = (size_t)snprintf(need < size ? buf + need : NULL,
                             need < size ? size - need : 0, "%s%s",
                             need > 0 ? ", " : "", opts[k].name);
        need += n;
    }
    return need;
}

char *conf_data_path(const struct sd_config *c, const char *name)
{
    size_t n = strlen(c->data_dir) + 1 + strlen(name) + 1;
    char *p = malloc(n);

    if (p != NULL)
        snprintf(p, n, "%s/%s", c->data_dir, name);
    return p;
}

/* Where key k's value came from, for --print-config. */
static void origin_text(const struct sd_config *c, enum conf_key k, char *buf,
                        size_t size)
{
    char s[KEY_NAME_MAX];

    switch (c->origin[k].src) {
    case CONF_SRC_FILE:
        snprintf(buf, size, "%s:%u", c->config != NULL ? c->config : "file",
                 c->origin[k].line);
        break;
    case CONF_SRC_ENV:
        spell(opts[k].name, true, s, sizeof(s));
        snprintf(buf, size, "SHARDD_%s", s);
        break;
    case CONF_SRC_FLAG:
        spell(opts[k].name, false, s, sizeof(s));
        snprintf(buf, size, "--%s", s);
        break;
    default:
        snprintf(buf, size, "default");
        break;
    }
}

/* A value as the file reads it back: quoted unless it holds a quote. */
static void print_value(FILE *f, const char *key, const char *v,
                        const char *from)
{
    if (strchr(v, '"') != NULL)
        fprintf(f, "%s = %s  # %s\n", key, v, from);
    else
        fprintf(f, "%s = \"%s\"  # %s\n", key, v, from);
}

void conf_print(FILE *f, const struct sd_config *c)
{
    char from[LABEL_SIZE], word[64];
    const char *v;
    size_t i;
    int k;

    fputs("# shardd: the effective configuration (shardd --print-config)\n", f);
    for (k = 0; k < CONF_KEY_COUNT; k++) {
        const struct opt *o = &opts[k];

        origin_text(c, (enum conf_key)k, from, sizeof(from));
        if (k == CONF_KEY_CONFIG) {
            fprintf(f, "# config: %s  (%s)\n",
                    c->config != NULL ? c->config : "none", from);
            continue;
        }
        switch (o->type) {
        case T_LISTEN:
            for (i = 0; i < c->nlisten; i++)
                print_value(f, o->name, c->listen[i], from);
            break;
        case T_SECRET:
            if (c->admin_token_file != NULL)
                fprintf(f, "# %s: read from admin_token_file (redacted)\n",
                        o->name);
            else if (str_get(c, (enum conf_key)k)[0] != '\0')
                fprintf(f, "# %s: set (redacted; %s)\n", o->name, from);
            else
                fprintf(f,
                        "# %s: none (Admin RPCs on unix: addresses "
                        "only)\n",
                        o->name);
            break;
        case T_PATH:
            v = str_get(c, (enum conf_key)k);
            if (v != NULL)
                print_value(f, o->name, v, from);
            else
                fprintf(f, "# %s: none\n", o->name);
            break;
        case T_U32:
            fprintf(f, "%s = %u  # %s\n", o->name,
                    (unsigned)u32_get(c, (enum conf_key)k), from);
            break;
        case T_BOOL:
            fprintf(f, "%s = %s  # %s\n", o->name,
                    bool_get(c, (enum conf_key)k) ? "on" : "off", from);
            break;
        case T_WORD:
            fprintf(f, "%s = %s  # %s\n", o->name,
                    word_at(o->arg, u32_get(c, (enum conf_key)k), word,
                            sizeof(word)),
                    from);
            break;
        }
    }
}

/* The default of key k as --help shows it. */
static void default_text(enum conf_key k, char *buf, size_t size)
{
    const char *def = opts[k].def;

    snprintf(buf, size, "%s", def != NULL && def[0] != '\0' ? def : "none");
}

/* Appends printf text to buf (size total, *len used), truncating. */
static void append(char *buf, size_t size, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void append(char *buf, size_t size, size_t *len, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (*len >= size)
        return;
    va_start(ap, fmt);
    n = vsnprintf(buf + *len, size - *len, fmt, ap);
    va_end(ap);
    if (n > 0)
        *len = *len + (size_t)n < size ? *len + (size_t)n : size;
}

const char *conf_usage(void)
{
    static char text[USAGE_SIZE];
    char flag[64], def[64], s[KEY_NAME_MAX];
    size_t len = 0, col;
    int k;

    if (text[0] != '\0')
        return text;
    append(text, sizeof(text), &len,
           "usage: shardd [--config FILE] [--KEY VALUE ...] [--print-config]"
           "\n\n"
           "The sharding planner daemon.  Settings: defaults < --config FILE\n"
           "(or SHARDD_CONFIG) < SHARDD_<KEY> variables < --key flags; a\n"
           "file key is the flag without -- and with _ for -.  See\n"
           "docs/config.md.\n\n");
    for (k = 0; k < CONF_KEY_COUNT; k++) {
        spell(opts[k].name, false, s, sizeof(s));
        snprintf(flag, sizeof(flag), "--%s %s", s, opts[k].arg);
        default_text((enum conf_key)k, def, sizeof(def));
        append(text, sizeof(text), &len, "  %-*s", USAGE_HELP_COL - 3, flag);
        col = 2 + strlen(flag);
        if (col >= USAGE_HELP_COL - 1) {
            append(text, sizeof(text), &len, "\n%*s", USAGE_HELP_COL - 1, "");
            col = USAGE_HELP_COL - 1;
        } else {
            col = USAGE_HELP_COL - 1;
        }
        append(text, sizeof(text), &len, " %s", opts[k].help);
        col += 1 + strlen(opts[k].help);
        if (strcmp(def, "none") == 0) /* nothing worth a line */
            append(text, sizeof(text), &len, "\n");
        else if (col + strlen(def) + 12 > USAGE_LINE_WRAP)
            append(text, sizeof(text), &len, "\n%*s (default %s)\n",
                   USAGE_HELP_COL - 1, "", def);
        else
            append(text, sizeof(text), &len, " (default %s)\n", def);
    }
    append(text, sizeof(text), &len,
           "  %-*s print the effective configuration and exit\n"
           "  %-*s this text\n",
           USAGE_HELP_COL - 3, "--print-config", USAGE_HELP_COL - 3,
           "-h, --help");
    return text;
}
