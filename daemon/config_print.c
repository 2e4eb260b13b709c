/*
 * The configuration for people (config.h): --print-config writes the
 * effective values as a config file, --help the flags with their
 * defaults, both from the option table.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "config_int.h"

/* Where key k's value came from, for --print-config. */
static void origin_text(const struct sd_config *c, enum conf_key k, char *buf,
                        size_t size)
{
    conf__label_of(c->origin[k].src, c->config != NULL ? c->config : "file",
                   c->origin[k].line, k, true, buf, size);
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
        const struct opt *o = &conf__opts[k];

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
            else if (conf__str_get(c, (enum conf_key)k)[0] != '\0')
                fprintf(f, "# %s: set (redacted; %s)\n", o->name, from);
            else
                fprintf(f,
                        "# %s: none (Admin RPCs on unix: addresses "
                        "only)\n",
                        o->name);
            break;
        case T_PATH:
        case T_STRING:
            v = conf__str_get(c, (enum conf_key)k);
            if (v != NULL)
                print_value(f, o->name, v, from);
            else
                fprintf(f, "# %s: none\n", o->name);
            break;
        case T_MODE:
            fprintf(f, "%s = %04o  # %s\n", o->name,
                    (unsigned)conf__u32_get(c, (enum conf_key)k), from);
            break;
        case T_U32:
            fprintf(f, "%s = %u  # %s\n", o->name,
                    (unsigned)conf__u32_get(c, (enum conf_key)k), from);
            break;
        case T_BOOL:
            fprintf(f, "%s = %s  # %s\n", o->name,
                    conf__bool_get(c, (enum conf_key)k) ? "on" : "off", from);
            break;
        case T_WORD:
            fprintf(f, "%s = %s  # %s\n", o->name,
                    conf__word_at(o->arg, conf__u32_get(c, (enum conf_key)k),
                                  word, sizeof(word)),
                    from);
            break;
        }
    }
}

/* The default of key k as --help shows it. */
static void default_text(enum conf_key k, char *buf, size_t size)
{
    const char *def = conf__opts[k].def;

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
           "\n       shardd --version | --help\n\n"
           "The sharding planner daemon.  Settings: defaults < --config FILE\n"
           "(or SHARDD_CONFIG) < SHARDD_<KEY> variables < --key flags; a\n"
           "file key is the flag without -- and with _ for -.  See\n"
           "docs/config.md.\n\n");
    for (k = 0; k < CONF_KEY_COUNT; k++) {
        conf__spell(conf__opts[k].name, false, s, sizeof(s));
        snprintf(flag, sizeof(flag), "--%s %s", s, conf__opts[k].arg);
        default_text((enum conf_key)k, def, sizeof(def));
        append(text, sizeof(text), &len, "  %-*s", USAGE_HELP_COL - 3, flag);
        col = 2 + strlen(flag);
        if (col >= USAGE_HELP_COL - 1) {
            append(text, sizeof(text), &len, "\n%*s", USAGE_HELP_COL - 1, "");
            col = USAGE_HELP_COL - 1;
        } else {
            col = USAGE_HELP_COL - 1;
        }
        append(text, sizeof(text), &len, " %s", conf__opts[k].help);
        col += 1 + strlen(conf__opts[k].help);
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
           "  %-*s print the version and the backends built\n"
           "  %-*s this text\n",
           USAGE_HELP_COL - 3, "--print-config", USAGE_HELP_COL - 3,
           "--version", USAGE_HELP_COL - 3, "-h, --help");
    return text;
}
