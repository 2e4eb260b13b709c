/*
 * shardd's configuration (config.h): one table row per key gives its type,
 * range, default, help line and whether SIGHUP may change it (Redis'
 * static_configs in config.c, reference/style.md 3.7), so parsing, --help,
 * --print-config and reload cannot drift apart.  Each source (file,
 * environment, flags) goes through the same conf__apply(); only the label that
 * prefixes an error ("FILE:LINE: key", "SHARDD_KEY", "--key") differs.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config_int.h"
#include "shardd/addr.h"

const struct opt conf__opts[CONF_KEY_COUNT] = {
#define CONF_ROW(K, key, type, lo, hi, dflt, flags, meta, text)                \
    [CONF_KEY_##K] = {#key,  T_##type, offsetof(struct sd_config, key),        \
                      lo,    hi,       dflt,                                   \
                      flags, meta,     text},
    CONF_KEYS(CONF_ROW)
#undef CONF_ROW
};

_Static_assert(CONF_KEY_COUNT <= 64, "a set of keys is a uint64_t");


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

char *conf__dup_str(const char *s)
{
    return dup_n(s, strlen(s));
}

static char **str_field(struct sd_config *c, enum conf_key k)
{
    return (char **)(void *)((char *)c + conf__opts[k].off);
}

const char *conf__str_get(const struct sd_config *c, enum conf_key k)
{
    return *(char *const *)(const void *)((const char *)c + conf__opts[k].off);
}

static uint32_t *u32_field(struct sd_config *c, enum conf_key k)
{
    return (uint32_t *)(void *)((char *)c + conf__opts[k].off);
}

uint32_t conf__u32_get(const struct sd_config *c, enum conf_key k)
{
    return *(const uint32_t *)(const void *)((const char *)c +
                                             conf__opts[k].off);
}

static bool *bool_field(struct sd_config *c, enum conf_key k)
{
    return (bool *)(void *)((char *)c + conf__opts[k].off);
}

bool conf__bool_get(const struct sd_config *c, enum conf_key k)
{
    return *(const bool *)(const void *)((const char *)c + conf__opts[k].off);
}

/*
 * The words of a T_WORD key are its arg, "a|b|c".  word_find() gives the
 * index of v among them (case-insensitive) or -1; conf__word_at() copies word i
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

const char *conf__word_at(const char *words, uint32_t i, char *buf, size_t size)
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
void conf__spell(const char *name, bool env, char *buf, size_t size)
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
void conf__label_of(enum conf_source kind, const char *file, unsigned line,
                    enum conf_key k, bool origin, char *buf, size_t size)
{
    char s[KEY_NAME_MAX];

    switch (kind) {
    case CONF_SRC_FILE:
        if (origin)
            snprintf(buf, size, "%s:%u", file, line);
        else
            snprintf(buf, size, "%s:%u: %s", file, line, conf__opts[k].name);
        break;
    case CONF_SRC_ENV:
        conf__spell(conf__opts[k].name, true, s, sizeof(s));
        snprintf(buf, size, "SHARDD_%s", s);
        break;
    case CONF_SRC_FLAG:
        conf__spell(conf__opts[k].name, false, s, sizeof(s));
        snprintf(buf, size, "--%s", s);
        break;
    default:
        snprintf(buf, size, "%s", origin ? "default" : conf__opts[k].name);
        break;
    }
}

/* The label of the value c holds for key k (for checks across keys). */
void conf__label_held(const struct sd_config *c, enum conf_key k, char *buf,
                      size_t size)
{
    conf__label_of(c->origin[k].src, c->config != NULL ? c->config : "(file)",
                   c->origin[k].line, k, false, buf, size);
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
int conf__nearest_key(const char *name)
{
    char norm[KEY_NAME_MAX + 1];
    size_t i, best = (size_t)-1, dist;
    int k, found = -1;

    for (i = 0; i < KEY_NAME_MAX && name[i] != '\0'; i++)
        norm[i] = name[i] == '-' ? '_' : (char)tolower((unsigned char)name[i]);
    norm[i] = '\0';
    for (k = 0; k < CONF_KEY_COUNT; k++) {
        dist = distance(norm, conf__opts[k].name);
        if (dist < best) {
            best = dist;
            found = k;
        }
    }
    /* Only a plausible typo: a few edits, fewer than half the name. */
    if (found < 0 || best > 3 || best * 2 >= strlen(conf__opts[found].name))
        return -1;
    return found;
}

int conf__find_key(const char *name)
{
    int k;

    for (k = 0; k < CONF_KEY_COUNT; k++)
        if (strcmp(name, conf__opts[k].name) == 0)
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
        why = sd_addr_problem(a);
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

int conf__parse_bool(const char *v, bool *out)
{
    if (word_find("on|true|yes|1", v) >= 0) {
        *out = true;
        return 0;
    }
    if (word_find("off|false|no|0", v) >= 0) {
        *out = false;
        return 0;
    }
    return SD_EINVAL;
}

/* Whether keys of this type hold a string (str_field()). */
static bool is_string(enum opt_type t)
{
    return t == T_PATH || t == T_SECRET || t == T_STRING;
}

/* Permission bits written in octal ("0660", "660"), at most o->max. */
static int parse_mode(const char *label, const struct opt *o, const char *v,
                      uint32_t *out, struct sd_diag *d)
{
    unsigned long x = 0;
    const char *p;

    for (p = v; *p >= '0' && *p <= '7' && x <= o->max; p++)
        x = x * 8 + (unsigned long)(*p - '0');
    if (*v == '\0' || *p != '\0' || x > o->max)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: \"%.*s\" is not an octal mode in [0, %04o] "
                           "(e.g. 0660)",
                           label, VALUE_SHOW, v, (unsigned)o->max);
    *out = (uint32_t)x;
    return 0;
}

/* Replaces the string field of key k with a copy of v. */
static int set_string(struct sd_config *c, enum conf_key k, const char *label,
                      const char *v, struct sd_diag *d)
{
    char **slot = str_field(c, k), *copy = NULL;

    if (conf__opts[k].type == T_PATH) {
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
    /* An empty admin_token_file or string unsets it, so a later source
     * can clear what an earlier one set. */
    if (!((k == CONF_KEY_ADMIN_TOKEN_FILE || conf__opts[k].type == T_STRING) &&
          *v == '\0')) {
        copy = conf__dup_str(v);
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
int conf__apply(struct sd_config *c, struct src *s, enum conf_key k,
                const char *v, struct sd_diag *d)
{
    const struct opt *o = &conf__opts[k];
    char label[LABEL_SIZE];
    bool b;
    int rv = 0, i;

    conf__label_of(s->kind, s->file, s->line, k, false, label, sizeof(label));
    switch (o->type) {
    case T_LISTEN:
        if (!s->seen[k])
            listen_clear(c);
        rv = listen_add(c, label, v, d);
        break;
    case T_PATH:
    case T_SECRET:
    case T_STRING:
        rv = set_string(c, k, label, v, d);
        break;
    case T_U32:
        rv = parse_u32(label, o, v, u32_field(c, k), d);
        break;
    case T_MODE:
        rv = parse_mode(label, o, v, u32_field(c, k), d);
        break;
    case T_BOOL:
        if (conf__parse_bool(v, &b) != 0)
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
        if (conf__opts[k].def == NULL)
            continue;
        if (conf__apply(c, &s, (enum conf_key)k, conf__opts[k].def, &d) != 0) {
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
        if (is_string(conf__opts[k].type)) {
            free(*str_field(c, (enum conf_key)k));
            *str_field(c, (enum conf_key)k) = NULL;
        }
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

    switch (conf__opts[k].type) {
    case T_LISTEN:
        if (x->nlisten != y->nlisten)
            return false;
        for (i = 0; i < x->nlisten; i++)
            if (strcmp(x->listen[i], y->listen[i]) != 0)
                return false;
        return true;
    case T_PATH:
    case T_SECRET:
    case T_STRING:
        return str_eq(conf__str_get(x, k), conf__str_get(y, k));
    case T_U32:
    case T_MODE:
    case T_WORD:
        return conf__u32_get(x, k) == conf__u32_get(y, k);
    case T_BOOL:
        return conf__bool_get(x, k) == conf__bool_get(y, k);
    }
    return true;
}

/* Gives `to` from's value of key k (and its origin). */
static int key_copy(struct sd_config *to, const struct sd_config *from,
                    enum conf_key k)
{
    char *copy[CONF_LISTEN_MAX] = {NULL};
    size_t i;

    switch (conf__opts[k].type) {
    case T_LISTEN:
        for (i = 0; i < from->nlisten; i++) {
            copy[i] = conf__dup_str(from->listen[i]);
            if (copy[i] == NULL)
                goto fail_copies;
        }
        listen_clear(to);
        memcpy(to->listen, copy, sizeof(copy));
        to->nlisten = from->nlisten;
        break;
    case T_PATH:
    case T_SECRET:
    case T_STRING:
        if (conf__str_get(from, k) != NULL) {
            copy[0] = conf__dup_str(conf__str_get(from, k));
            if (copy[0] == NULL)
                return SD_ENOMEM;
        }
        free(*str_field(to, k));
        *str_field(to, k) = copy[0];
        break;
    case T_U32:
    case T_MODE:
    case T_WORD:
        *u32_field(to, k) = conf__u32_get(from, k);
        break;
    case T_BOOL:
        *bool_field(to, k) = conf__bool_get(from, k);
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
    uint64_t changed = 0;
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
            return sd_diag_set(d, rv, "%s: out of memory", conf__opts[k].name);
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
    return (unsigned)k < CONF_KEY_COUNT ? conf__opts[k].name : NULL;
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
    t.print_version = src->print_version;
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

size_t conf_keys_format(uint64_t set, char *buf, size_t size)
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
                             need > 0 ? ", " : "", conf__opts[k].name);
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
