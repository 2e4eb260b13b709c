/*
 * The configuration module's private header: what config.c (the option
 * table, values, defaults, reload), config_read.c (file, environment,
 * flags, the token file, resolution) and config_print.c (--print-config,
 * --help) share.  Nothing outside daemon/config*.c includes it.
 */
#ifndef SHARDD_DAEMON_CONFIG_INT_H
#define SHARDD_DAEMON_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

#define PATH_LIMIT      4096 /* longest path accepted (Linux PATH_MAX) */
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
    T_STRING, /* any string; "" unsets it */
    T_MODE,   /* permission bits, octal, at most max */
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

/* The option table: one row per key, expanded from CONF_KEYS. */
extern const struct opt conf__opts[CONF_KEY_COUNT];

/* One source being applied: where values come from, and what it set. */
struct src {
    enum conf_source kind;
    const char *file;               /* CONF_SRC_FILE */
    unsigned line;                  /* CONF_SRC_FILE: current line */
    bool seen[CONF_KEY_COUNT];      /* keys this source has set */
    unsigned first[CONF_KEY_COUNT]; /* CONF_SRC_FILE: line of the first */
};

/* A copy of s (malloc), or NULL. */
char *conf__dup_str(const char *s);

/* Key k's field of c, by type. */
const char *conf__str_get(const struct sd_config *c, enum conf_key k);
uint32_t conf__u32_get(const struct sd_config *c, enum conf_key k);
bool conf__bool_get(const struct sd_config *c, enum conf_key k);

/* Word i of a T_WORD key's words ("a|b|c") into buf; "?" past the end. */
const char *conf__word_at(const char *words, uint32_t i, char *buf,
                          size_t size);

/* Writes "key" with '_' turned into '-' (flags) or upper-cased (env). */
void conf__spell(const char *name, bool env, char *buf, size_t size);

/*
 * What names key k's value from a source: for an error, "FILE:LINE: key",
 * "SHARDD_KEY", "--key" or "key" (a default); for --print-config's origin
 * comment (origin true), "FILE:LINE", ... and "default".
 */
void conf__label_of(enum conf_source kind, const char *file, unsigned line,
                    enum conf_key k, bool origin, char *buf, size_t size);

/* The label of the value c holds for key k ("FILE:LINE: key", ...). */
void conf__label_held(const struct sd_config *c, enum conf_key k, char *buf,
                      size_t size);

/* The key named name, or -1; the key closest to it (a plausible typo), or
 * -1. */
int conf__find_key(const char *name);
int conf__nearest_key(const char *name);

/* on/true/yes/1 and off/false/no/0, any case; SD_EINVAL otherwise. */
int conf__parse_bool(const char *v, bool *out);

/*
 * Sets key k from the text v coming from source s (whose line is current).
 * listen: the first time this source sets it, the list of earlier sources
 * is dropped; later times append.  0 or an SD_E* code with d naming s's
 * label.
 */
int conf__apply(struct sd_config *c, struct src *s, enum conf_key k,
                const char *v, struct sd_diag *d);

#endif /* SHARDD_DAEMON_CONFIG_INT_H */
