/*
 * What every shardctl command shares (client.h): the one way to fail, exit
 * codes of planner errors, writing output, the cost model of a plan, reading
 * --tables, and the constraints of the command line (capacities and pins)
 * resolved against a topology and tables.  Called by the commands; calls
 * nothing of the client back, only the planning library.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "shardd/file.h"
#include "store.h"

int ctl_fail(int code, const char *fmt, ...)
{
    va_list ap;

    fputs("shardctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

/* Appends names[0..n) to buf as "a", "a and b" or "a, b and c". */
static void join_names(char *buf, size_t cap, const char *const *names,
                       size_t n)
{
    size_t i, len = 0;

    buf[0] = '\0';
    for (i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s",
                                i == 0       ? ""
                                : i == n - 1 ? " and "
                                             : ", ",
                                names[i]);
}

#define CTL_REQUIRE_MAX 8

int ctl_require(const char *cmd, ...)
{
    const char *all[CTL_REQUIRE_MAX], *missing[CTL_REQUIRE_MAX], *name;
    char need[256], lack[256];
    size_t n = 0, nmissing = 0;
    va_list ap;

    va_start(ap, cmd);
    while ((name = va_arg(ap, const char *)) != NULL && n < CTL_REQUIRE_MAX) {
        if (!va_arg(ap, int))
            missing[nmissing++] = name;
        all[n++] = name;
    }
    va_end(ap);
    if (nmissing == 0)
        return 0;
    join_names(lack, sizeof(lack), missing, nmissing);
    if (nmissing == n)
        return ctl_fail(CTL_EXIT_USAGE, "%s: %s %s required", cmd, lack,
                        n == 1 ? "is" : "are");
    join_names(need, sizeof(need), all, n);
    return ctl_fail(CTL_EXIT_USAGE, "%s: %s %s missing (%s are required)", cmd,
                    lack, nmissing == 1 ? "is" : "are", need);
}

int ctl_exit_for(int err)
{
    return err == SD_ENOMEM ? 1 : CTL_EXIT_USAGE;
}

atomic_int ctl_stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    atomic_store(&ctl_stop_requested, 1); /* lock-free: signal-safe */
}

void ctl_catch_stop_signals(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* ---------------------------------------------------------------------- */
/* The cost model                                                          */

int ctl_load_model(const struct ctl_opts *o, const char *cmd,
                   struct ctl_model *cm)
{
    struct sd_diag d = {{0}};
    int rv;

    memset(cm, 0, sizeof(*cm));
    if (o->model != NULL) {
        /* A model file, or an ensemble file (its member 0 plans). */
        rv = net_ensemble_read_file(o->model, &cm->owned, &d);
        if (rv != 0)
            return ctl_fail(ctl_exit_for(rv), "%s: --model: %s", cmd, d.msg);
        cm->net = cm->owned->m[0];
        cm->ens = cm->owned->k > 1 ? cm->owned : NULL;
        return 0;
    }
    /* A compiled-in model of another profile (NeuroShard's released
     * models, the H200's) only when named: the embedded cpu model stays
     * the default.  The H200's has its ensemble; NeuroShard's none. */
    if (o->profile != NULL) {
        cm->net = net_compiled(o->profile, &d);
        if (cm->net != NULL) {
            cm->ens = net_ensemble_compiled(cm->net);
            return 0;
        }
        if (strcmp(o->profile, NET_REFERENCE_PROFILE) == 0)
            return ctl_fail(1, "%s: %s", cmd, d.msg);
    }
    cm->net = net_embedded(&d);
    if (cm->net == NULL)
        return ctl_fail(1, "%s: %s", cmd, d.msg);
    /* No spread where the embedded ensemble is missing: not an error. */
    cm->ens = net_ensemble_compiled(cm->net);
    return 0;
}

int ctl_load_model_for_profile(const struct ctl_opts *o, const char *cmd,
                               struct ctl_model *cm)
{
    struct sd_diag d = {{0}};
    int rv = ctl_load_model(o, cmd, cm);

    if (rv != 0 || o->profile == NULL ||
        net_check_profile(cm->net, o->profile, &d) == 0)
        return rv;
    ctl_model_free(cm);
    return ctl_fail(CTL_EXIT_USAGE, "%s: --profile: %s", cmd, d.msg);
}

int ctl_text_begin(struct ctl_text *t, const char *path)
{
    memset(t, 0, sizeof(*t));
    t->path = path;
    t->f = path == NULL ? stdout : open_memstream(&t->buf, &t->len);
    if (t->f == NULL)
        return ctl_fail(1, "--out: %s", strerror(errno));
    return 0;
}

int ctl_text_end(struct ctl_text *t, int rv)
{
    int err;

    if (t->path == NULL)
        return rv != 0 ? rv
               : ferror(stdout) || fflush(stdout) != 0
                   ? ctl_fail(1, "cannot write to stdout: %s", strerror(errno))
                   : 0;
    err = ferror(t->f);
    if (fclose(t->f) != 0 || rv != 0 || err != 0 || t->buf == NULL) {
        free(t->buf);
        return rv != 0 ? rv : ctl_fail(1, "--out: out of memory");
    }
    /* ctl_write_output() ends the text with its own newline. */
    if (t->len > 0 && t->buf[t->len - 1] == '\n')
        t->buf[t->len - 1] = '\0';
    rv = ctl_write_output(t->path, t->buf);
    free(t->buf);
    return rv;
}

int ctl_read_placement(const struct ctl_opts *o, const char *cmd,
                       const struct table *tables, size_t n, struct plan *p,
                       int32_t *ndev)
{
    struct sd_diag d;
    struct plan in;
    size_t k;
    int rv;

    rv = json_read_plan(o->plan, tables, n, &in, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "%s: --plan: %s", cmd, d.msg);
    *ndev = o->devices ? (int32_t)o->devices : in.ndevices;
    rv = plan_init(p, *ndev);
    /* every field of a shard: rows and scheme too */
    for (k = 0; rv == 0 && k < in.nshards; k++)
        rv = plan_add_shard(p, &in.shards[k]);
    plan_destroy(&in);
    if (rv != 0) {
        plan_destroy(p);
        return ctl_fail(1, "%s: out of memory", cmd);
    }
    plan_sort(p);
    return 0;
}

void ctl_attach_comm(const struct cost_net *net, struct topology *t,
                     struct net_comm_model *ncm)
{
    if (net_comm_model_init(ncm, net, t))
        t->comm = &ncm->cm;
}

void ctl_model_free(struct ctl_model *cm)
{
    net_ensemble_free(cm->owned);
    memset(cm, 0, sizeof(*cm));
}

int ctl_pick_profile(struct store *st, const char *cmd, const char *name,
                     struct store_profile *out)
{
    struct store_profile *all = NULL;
    char names[512];
    struct sd_diag d;
    size_t n, i, len;
    int rv;

    if (name != NULL) {
        rv = store_profile_get(st, name, out, &d);
        return rv ? ctl_fail(ctl_exit_for(rv), "%s: --profile: %s", cmd, d.msg)
                  : 0;
    }
    rv = store_profile_list(st, &all, &n, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "%s: %s", cmd, d.msg);
    if (n == 0) {
        free(all);
        return ctl_fail(CTL_EXIT_USAGE, "%s: %s", cmd, CTL_NO_PROFILE);
    }
    if (n == 1) {
        *out = all[0];
        free(all);
        return 0;
    }
    /* One line, as every message: the names, as many as fit. */
    for (i = 0, len = 0; i < n && len < sizeof(names); i++)
        len += (size_t)snprintf(names + len, sizeof(names) - len, "%s%s",
                                i ? ", " : "", all[i].name);
    free(all);
    return ctl_fail(CTL_EXIT_USAGE,
                    "%s: the store has %zu profiles (%s%s); name one with "
                    "--profile",
                    cmd, n, names, len >= sizeof(names) ? "..." : "");
}

int ctl_load_policy(const struct ctl_opts *o, const char *cmd,
                    const struct cost_net *net, const struct policy_net **pn,
                    struct policy_net **owned)
{
    struct sd_diag d = {{0}};
    int rv;

    *owned = NULL;
    if (o->policy != NULL) {
        rv = policy_read_file(o->policy, owned, &d);
        if (rv != 0)
            return ctl_fail(ctl_exit_for(rv), "%s: --policy: %s", cmd, d.msg);
        *pn = *owned;
        return 0;
    }
    *pn = net != NULL ? policy_compiled(net, NULL) : NULL;
    if (*pn == NULL)
        *pn = policy_embedded(NULL);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Tables                                                                  */

int ctl_read_tables(const struct ctl_opts *o, const char *cmd,
                    struct tables_input *in)
{
    enum tables_form form = TABLES_FORM_AUTO;
    struct sd_diag d;
    int rv;

    if (o->tables_format != NULL &&
        tables_form_parse(o->tables_format, &form) != 0)
        return ctl_fail(CTL_EXIT_USAGE,
                        "%s: --tables-format \"%s\" is not auto, shardd or "
                        "torchrec",
                        cmd, o->tables_format);
    rv = json_read_tables_input(o->tables, (size_t)o->task, form, in, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "%s: %s", cmd, d.msg);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Constraints: capacities and pins                                        */

int ctl_capacities(const struct ctl_opts *o, const char *cmd,
                   struct topology *t, uint64_t **caps)
{
    uint64_t *c;
    bool same = true;
    int32_t r;

    *caps = NULL;
    t->mem_bytes = (uint64_t)(o->mem_gb * (double)(1ull << 30));
    t->mem_by_device = NULL;
    t->host_dram_bytes = (uint64_t)(o->host_dram_gb * (double)(1ull << 30));
    /* GiB/s as bytes per ms */
    t->host_link_bw = o->host_link_gbps * (double)(1ull << 30) / 1000.0;
    if (o->comm_precision != NULL) {
        enum table_dtype dt;

        if (table_dtype_parse(o->comm_precision, &dt) != 0 ||
            dt == TABLE_DTYPE_INT8)
            return ctl_fail(CTL_EXIT_USAGE,
                            "%s: --comm-precision \"%s\" is not fp32, fp16 "
                            "or bf16",
                            cmd, o->comm_precision);
        t->comm_dtype = (uint8_t)dt;
    }
    if (o->n_mem_gb <= 1)
        return 0;
    if (o->n_mem_gb != t->ndevices)
        return ctl_fail(CTL_EXIT_USAGE,
                        "%s: --mem-gb: %d capacities for %d devices (give "
                        "one, or one per device)",
                        cmd, (int)o->n_mem_gb, (int)t->ndevices);
    c = malloc((size_t)t->ndevices * sizeof(*c));
    if (c == NULL)
        return ctl_fail(1, "%s: out of memory", cmd);
    for (r = 0; r < t->ndevices; r++) {
        c[r] = (uint64_t)(o->mem_gbs[r] * (double)(1ull << 30));
        same = same && c[r] == c[0];
    }
    if (same) {
        free(c);
        return 0;
    }
    t->mem_by_device = c;
    *caps = c;
    return 0;
}

int ctl_pins(const struct ctl_opts *o, const char *cmd,
             const struct table *tables, size_t n, int32_t ndevices,
             int32_t **pins)
{
    int32_t *pin, k;
    int rv = 0;

    *pins = NULL;
    if (o->npins == 0)
        return 0;
    pin = malloc((n ? n : 1) * sizeof(*pin));
    if (pin == NULL)
        return ctl_fail(1, "%s: out of memory", cmd);
    memset(pin, 0xff, (n ? n : 1) * sizeof(*pin)); /* -1: not pinned */
    for (k = 0; k < o->npins && rv == 0; k++) {
        const char *w = o->pins[k], *eq = strrchr(w, '=');
        size_t len = eq != NULL ? (size_t)(eq - w) : 0, i;
        char *end = NULL;
        long dev = -1;

        if (eq == NULL || len == 0) {
            rv = ctl_fail(CTL_EXIT_USAGE,
                          "%s: --pin \"%s\": TABLE=DEVICE expected", cmd, w);
            break;
        }
        dev = strtol(eq + 1, &end, 10);
        if (end == eq + 1 || *end != '\0' || dev < 0 || dev >= ndevices) {
            rv = ctl_fail(CTL_EXIT_USAGE,
                          "%s: --pin \"%s\": device \"%s\" is not in [0, %d)",
                          cmd, w, eq + 1, (int)ndevices);
            break;
        }
        for (i = 0; i < n; i++)
            if (strlen(tables[i].name) == len &&
                memcmp(tables[i].name, w, len) == 0)
                break;
        if (i == n)
            rv = ctl_fail(CTL_EXIT_USAGE, "%s: --pin \"%s\": no table \"%.*s\"",
                          cmd, w, (int)len, w);
        else if (pin[i] >= 0)
            rv =
                ctl_fail(CTL_EXIT_USAGE, "%s: --pin \"%s\": %s is pinned twice",
                         cmd, w, tables[i].name);
        else
            pin[i] = (int32_t)dev;
    }
    if (rv != 0) {
        free(pin);
        return rv;
    }
    *pins = pin;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Output                                                                  */

int ctl_write_output(const char *path, const char *text)
{
    return ctl_write_file("--out", path, text);
}

int ctl_write_file(const char *opt, const char *path, const char *text)
{
    size_t len = strlen(text);
    struct sd_diag d;
    char *buf;
    int rv;

    if (path == NULL) {
        if (fputs(text, stdout) < 0 || fputc('\n', stdout) < 0 ||
            fflush(stdout) != 0)
            return ctl_fail(1, "cannot write to stdout: %s", strerror(errno));
        return 0;
    }
    buf = malloc(len + 1);
    if (buf == NULL)
        return ctl_fail(1, "%s: out of memory", opt);
    memcpy(buf, text, len);
    buf[len] = '\n';
    rv = sd_file_write(path, buf, len + 1, &d);
    free(buf);
    return rv == 0 ? 0
                   : ctl_fail(rv == SD_EINVAL ? CTL_EXIT_USAGE : 1, "%s: %s",
                              opt, d.msg);
}
