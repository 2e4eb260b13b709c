/*
 * shardctl: the command-line client of shardd.
 *
 * Offline mode runs the planning library in-process:
 *   shardctl gen-tables --count N --seed S [--out F]
 *   shardctl gen-tasks  --count N --seed S --tables F [--out F]
 *   shardctl plan --offline --tables F --devices N --mem-gb G [--alg NAME]
 *                 [--model F] [--json | --torchrec]
 * and the measuring side on this machine's devices and a store:
 *   shardctl profile --db F --samples N;  shardctl eval --tables F --plan F
 *   shardctl train --db F [--profile P] [--out F]
 * Online mode asks a running shardd (online.c): plan without --offline,
 * estimate, status, models, activate, retrain, job, profiler, health.
 * (shardctl --help lists every option.)
 * Exit codes: 0 success, 1 internal failure (out of memory, cannot write,
 * the daemon unreachable or failing), 2 bad input or usage, always with one
 * message on stderr.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "profiler.h"

#define EXIT_USAGE CTL_EXIT_USAGE

static const char usage_text[] =
    "usage: shardctl COMMAND [OPTIONS]\n"
    "\n"
    "commands:\n"
    "  gen-tables  --count N --seed S [--batch-size B] [--threads T]\n"
    "              [--out FILE]\n"
    "      Generate N synthetic DLRM tables (traces made, features computed)\n"
    "      and write the tables JSON.\n"
    "  gen-tasks   --count N --seed S --tables FILE [--min-tables A]\n"
    "              [--max-tables B] [--max-gb G] [--out FILE]\n"
    "      Draw N benchmark tasks (NeuroShard protocol) from a tables file.\n"
    "  plan        --offline --tables FILE --devices N --mem-gb G[,G...]\n"
    "              [--alg NAME] [--task K] [--pin TABLE=DEVICE ...]\n"
    "              [--optimizer NAME]\n"
    "              [--batch-size B] [--devices-per-host L] [--seed S]\n"
    "              [--model FILE] [--profile NAME] [--time-budget-ms T]\n"
    "              [--no-splits] [--no-local-search] [--threads T]\n"
    "              [--json | --torchrec]\n"
    "      Plan the tables (or task K of a tasks file) on N devices of G GiB\n"
    "      (or one G per device: 16,16,8,8); --pin puts a table whole on a\n"
    "      device.\n"
    "      Algorithms: neuroshard (default), random, dim_greedy,\n"
    "      size_greedy, lookup_greedy, size_lookup_greedy, torchrec_greedy.\n"
    "      Every plan is scored by the cost model (--model, else the\n"
    "      embedded one) at its batch unless --batch-size is given.\n"
    "      Optimizers: sgd (default), adagrad, rowwise_adagrad, adam.\n"
    "  profile     --db FILE --samples N [--backend cpu|cuda|auto]\n"
    "              [--device D] [--batch-size B] [--seconds S] [--seed S]\n"
    "              [--max-gb G] [TIMING]\n"
    "      Measure N compute-cost samples of random shards (at most G GiB,\n"
    "      default 4) into the store (resumable; Ctrl-C keeps every\n"
    "      committed sample).\n"
    "  train       --db FILE [--profile NAME] [--epochs N] [--seed S]\n"
    "              [--weight-decay W] [--newest N] [--activate]\n"
    "              [--out FILE]\n"
    "      Train a compute cost model on the profile's samples (the store's\n"
    "      only profile by default; --newest: its newest N), store it as a\n"
    "      new model version with its MAPE, and write the model file with\n"
    "      --out.\n"
    "  score       --db FILE [--model FILE] [--profile NAME] [--newest N]\n"
    "      A model's error (MAPE, median, p90, signed median) on a store's\n"
    "      measured samples: the held-out check for samples it never saw.\n"
    "  eval        --tables FILE --plan FILE [--task K] [--backend B]\n"
    "              [--batch-size B] [--mem-gb G] [--devices-per-host L]\n"
    "              [--optimizer NAME] [--seed S] [--json] [TIMING]\n"
    "      Measure a plan on the device: each device's shard timed in turn,\n"
    "      communication modelled; per-device figures and the plan cost.\n"
    "  TIMING: [--warmup N] (default 5) [--repeats N] (default 10)\n"
    "          [--no-flush] (skip the cache flush before each timed step)\n"
    "\n"
    "online commands (ask a running shardd):\n"
    "  plan        --tables FILE --devices N --mem-gb G [plan options as\n"
    "              above, without --model, --no-local-search, --threads]\n"
    "      The daemon plans; the output is offline plan's, except figures\n"
    "      its API does not carry (null in --json).\n"
    "  estimate    --tables FILE --plan FILE --mem-gb G [--devices N]\n"
    "              [--task K] [--batch-size B] [--devices-per-host L]\n"
    "              [--optimizer NAME] [--profile NAME]\n"
    "      Predicted per-device costs of a given plan (a --json plan file).\n"
    "  status                       daemon version, devices, model, jobs\n"
    "  models [--profile P] [--limit N]   stored cost models, newest first\n"
    "  activate VERSION             make a stored model the active one\n"
    "  retrain [--profile P] [--force] [--wait]   start a retraining job\n"
    "  job ID [--watch]             a job's state; --watch follows it\n"
    "  profiler pause|resume        the background profiler\n"
    "  health [SERVICE]             grpc.health.v1 check; exit 0 if SERVING\n"
    "  Options of every online command, before or after it:\n"
    "    --addr ADDR      unix:PATH or HOST:PORT (default $SHARDD_ADDR, else\n"
    "                     127.0.0.1:7411)\n"
    "    --token T | --token-file F   admin token for Admin calls over TCP\n"
    "                     (default $SHARDD_TOKEN)\n"
    "    --timeout-s S    deadline of each call (default 60 for plan and\n"
    "                     estimate, 10 for the others; none for watching)\n"
    "    --json           the response as JSON instead of text\n"
    "\n"
    "Output goes to stdout unless --out is given.  Exit status: 0 success,\n"
    "1 internal failure (or the daemon unreachable or failing, or a job\n"
    "that failed), 2 bad input or usage.\n";

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

int ctl_exit_for(int err)
{
    return err == SD_ENOMEM ? 1 : EXIT_USAGE;
}

/* ---------------------------------------------------------------------- */
/* Options                                                                 */


/* OPT_GB: a positive number, or a comma-separated list of them; OPT_PIN:
 * a word added to a list at each use. */
enum opt_kind { OPT_FLAG, OPT_STR, OPT_INT, OPT_REAL, OPT_GB, OPT_PIN };

struct opt_def {
    const char *name;
    enum opt_kind kind;
    size_t offset;
    double min, max; /* for numbers */
};

#define O(f) offsetof(struct ctl_opts, f)
static const struct opt_def opt_defs[] = {
    {"--tables", OPT_STR, O(tables), 0, 0},
    {"--out", OPT_STR, O(out), 0, 0},
    {"--alg", OPT_STR, O(alg), 0, 0},
    {"--optimizer", OPT_STR, O(optimizer), 0, 0},
    {"--count", OPT_INT, O(count), 1, 1e6},
    {"--seed", OPT_INT, O(seed), 0, 9.2e18},
    {"--devices", OPT_INT, O(devices), 1, TOPO_DEVICES_MAX},
    {"--devices-per-host", OPT_INT, O(per_host), 1, TOPO_DEVICES_MAX},
    {"--batch-size", OPT_INT, O(batch), 1, 1 << 30},
    {"--threads", OPT_INT, O(threads), 1, 256},
    {"--task", OPT_INT, O(task), 0, 1e9},
    {"--min-tables", OPT_INT, O(min_tables), 1, 1e6},
    {"--max-tables", OPT_INT, O(max_tables), 1, 1e6},
    {"--mem-gb", OPT_GB, O(mem_gb), 1e-9, 1e9},
    {"--pin", OPT_PIN, O(pins), 0, 0},
    {"--max-gb", OPT_REAL, O(max_gb), 1e-9, 1e9},
    {"--db", OPT_STR, O(db), 0, 0},
    {"--plan", OPT_STR, O(plan), 0, 0},
    {"--backend", OPT_STR, O(backend), 0, 0},
    {"--model", OPT_STR, O(model), 0, 0},
    {"--profile", OPT_STR, O(profile), 0, 0},
    {"--time-budget-ms", OPT_REAL, O(time_budget_ms), 1e-3, 1e9},
    {"--no-splits", OPT_FLAG, O(no_splits), 0, 0},
    {"--no-local-search", OPT_FLAG, O(no_local_search), 0, 0},
    {"--epochs", OPT_INT, O(epochs), 1, 1e6},
    {"--weight-decay", OPT_REAL, O(weight_decay), 0, 100},
    {"--activate", OPT_FLAG, O(activate), 0, 0},
    {"--newest", OPT_INT, O(newest), 1, 1e9},
    {"--samples", OPT_INT, O(samples), 1, 1e9},
    {"--device", OPT_INT, O(device), 0, 1e6},
    {"--seconds", OPT_REAL, O(seconds), 1e-3, 1e9},
    {"--warmup", OPT_INT, O(warmup), 0, 1000},
    {"--repeats", OPT_INT, O(repeats), 1, 10000},
    {"--no-flush", OPT_FLAG, O(no_flush), 0, 0},
    {"--offline", OPT_FLAG, O(offline), 0, 0},
    {"--json", OPT_FLAG, O(json), 0, 0},
    {"--torchrec", OPT_FLAG, O(torchrec), 0, 0},
    {"--addr", OPT_STR, O(addr), 0, 0},
    {"--token", OPT_STR, O(token), 0, 0},
    {"--token-file", OPT_STR, O(token_file), 0, 0},
    {"--timeout-s", OPT_REAL, O(timeout_s), 1e-3, 1e7},
    {"--limit", OPT_INT, O(limit), 1, 1e9},
    {"--force", OPT_FLAG, O(force), 0, 0},
    {"--wait", OPT_FLAG, O(wait), 0, 0},
    {"--watch", OPT_FLAG, O(watch), 0, 0},
};
#undef O

static int parse_number(const struct opt_def *def, const char *s, void *dst)
{
    char *end;
    double x;

    errno = 0;
    if (def->kind == OPT_INT) {
        long long v = strtoll(s, &end, 10);

        if (errno != 0 || end == s || *end != '\0' || v < def->min ||
            (double)v > def->max)
            return ctl_fail(EXIT_USAGE,
                            "%s: \"%s\" is not an integer in [%.0f, "
                            "%.0f]",
                            def->name, s, def->min, def->max);
        *(int64_t *)dst = v;
        return 0;
    }
    x = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(x) ||
        x < def->min || x > def->max)
        return ctl_fail(EXIT_USAGE, "%s: \"%s\" is not a positive number",
                        def->name, s);
    *(double *)dst = x;
    return 0;
}

/* --mem-gb: "G" or "G0,G1,...", each a number in the option's range. */
static int parse_gb_list(const struct opt_def *def, const char *s,
                         struct ctl_opts *o)
{
    const char *p = s;
    char *end;
    double x;

    o->n_mem_gb = 0;
    for (;;) {
        errno = 0;
        x = strtod(p, &end);
        if (errno != 0 || end == p || (*end != '\0' && *end != ',') ||
            !isfinite(x) || x < def->min || x > def->max)
            return ctl_fail(EXIT_USAGE,
                            "%s: \"%s\" is not a positive number or a "
                            "comma-separated list of them (one per device)",
                            def->name, s);
        if (o->n_mem_gb == TOPO_DEVICES_MAX)
            return ctl_fail(EXIT_USAGE, "%s: more than %d capacities",
                            def->name, TOPO_DEVICES_MAX);
        o->mem_gbs[o->n_mem_gb++] = x;
        if (*end == '\0')
            break;
        p = end + 1;
    }
    o->mem_gb = o->mem_gbs[0];
    return 0;
}

/*
 * Parses argv[first..argc) into o: options anywhere (global ones such as
 * --addr may come before the command), every other word into o->args (the
 * command first).  Returns 0 or an exit code.
 */
static int parse_opts(int argc, char **argv, int first, struct ctl_opts *o)
{
    int i, rv;
    size_t k;

    for (i = first; i < argc; i++) {
        const struct opt_def *def = NULL;
        void *dst;

        for (k = 0; k < sizeof(opt_defs) / sizeof(opt_defs[0]); k++)
            if (strcmp(argv[i], opt_defs[k].name) == 0)
                def = &opt_defs[k];
        if (def == NULL && argv[i][0] != '-' && o->nargs <= CTL_MAX_ARGS) {
            o->args[o->nargs++] = argv[i];
            continue;
        }
        if (def == NULL && argv[i][0] != '-')
            return ctl_fail(EXIT_USAGE, "unexpected argument \"%s\"", argv[i]);
        if (def == NULL)
            return ctl_fail(EXIT_USAGE,
                            "unknown option \"%s\" (see shardctl "
                            "--help)",
                            argv[i]);
        dst = (char *)o + def->offset;
        if (def->kind == OPT_FLAG) {
            *(bool *)dst = true;
            continue;
        }
        if (i + 1 >= argc)
            return ctl_fail(EXIT_USAGE, "%s needs a value", def->name);
        i++;
        if (def->kind == OPT_STR) {
            *(const char **)dst = argv[i];
            continue;
        }
        if (def->kind == OPT_PIN) {
            if (o->npins == CTL_MAX_PINS)
                return ctl_fail(EXIT_USAGE, "%s: more than %d", def->name,
                                CTL_MAX_PINS);
            o->pins[o->npins++] = argv[i];
            continue;
        }
        rv = def->kind == OPT_GB ? parse_gb_list(def, argv[i], o)
                                 : parse_number(def, argv[i], dst);
        if (rv != 0)
            return rv;
    }
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
    if (o->n_mem_gb <= 1)
        return 0;
    if (o->n_mem_gb != t->ndevices)
        return ctl_fail(EXIT_USAGE,
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
            rv = ctl_fail(EXIT_USAGE, "%s: --pin \"%s\": TABLE=DEVICE expected",
                          cmd, w);
            break;
        }
        dev = strtol(eq + 1, &end, 10);
        if (end == eq + 1 || *end != '\0' || dev < 0 || dev >= ndevices) {
            rv = ctl_fail(EXIT_USAGE,
                          "%s: --pin \"%s\": device \"%s\" is not in [0, %d)",
                          cmd, w, eq + 1, (int)ndevices);
            break;
        }
        for (i = 0; i < n; i++)
            if (strlen(tables[i].name) == len &&
                memcmp(tables[i].name, w, len) == 0)
                break;
        if (i == n)
            rv = ctl_fail(EXIT_USAGE, "%s: --pin \"%s\": no table \"%.*s\"",
                          cmd, w, (int)len, w);
        else if (pin[i] >= 0)
            rv = ctl_fail(EXIT_USAGE, "%s: --pin \"%s\": %s is pinned twice",
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
    char tmp[4096];
    FILE *f;
    int rv = 0;

    if (path == NULL) {
        if (fputs(text, stdout) < 0 || fputc('\n', stdout) < 0 ||
            fflush(stdout) != 0)
            return ctl_fail(1, "cannot write to stdout: %s", strerror(errno));
        return 0;
    }
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
        return ctl_fail(EXIT_USAGE, "--out: path is too long");
    f = fopen(tmp, "w");
    if (f == NULL)
        return ctl_fail(EXIT_USAGE, "--out: %s: %s", tmp, strerror(errno));
    if (fputs(text, f) < 0 || fputc('\n', f) < 0)
        rv = ctl_fail(1, "%s: %s", tmp, strerror(errno));
    if (fclose(f) != 0 && rv == 0)
        rv = ctl_fail(1, "%s: %s", tmp, strerror(errno));
    if (rv == 0 && rename(tmp, path) != 0)
        rv = ctl_fail(1, "--out: cannot rename %s to %s: %s", tmp, path,
                      strerror(errno));
    if (rv != 0)
        unlink(tmp);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* Commands                                                                */

static int cmd_gen_tables(const struct ctl_opts *o)
{
    struct synth_params sp;
    struct table *tables;
    char *text;
    long ncpu;
    int rv;

    if (o->count == 0)
        return ctl_fail(EXIT_USAGE, "gen-tables: --count is required");
    synth_params_default(&sp);
    sp.count = (size_t)o->count;
    sp.seed = (uint64_t)o->seed;
    if (o->batch != 0)
        sp.batch_size = o->batch;
    ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    rv = synth_tables(&sp,
                      o->threads ? (unsigned)o->threads
                                 : (unsigned)(ncpu > 0 ? ncpu : 1),
                      &tables);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "gen-tables: %s", sd_strerror(rv));
    text = json_tables(tables, sp.count);
    free(tables);
    if (text == NULL)
        return ctl_fail(1, "gen-tables: out of memory");
    rv = ctl_write_output(o->out, text);
    free(text);
    return rv;
}

static int cmd_gen_tasks(const struct ctl_opts *o)
{
    struct task_params tp;
    struct table *pool;
    struct task *tasks;
    struct sd_diag d;
    size_t npool;
    char *text;
    int rv;

    if (o->count == 0 || o->tables == NULL)
        return ctl_fail(EXIT_USAGE, "gen-tasks: --count and --tables are "
                                    "required");
    rv = json_read_tables(o->tables, 0, &pool, &npool, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "gen-tasks: %s", d.msg);
    task_params_default(&tp);
    tp.count = (size_t)o->count;
    tp.seed = (uint64_t)o->seed;
    if (o->min_tables)
        tp.min_tables = (size_t)o->min_tables;
    if (o->max_tables)
        tp.max_tables = (size_t)o->max_tables;
    if (o->max_gb > 0)
        tp.max_bytes = (uint64_t)(o->max_gb * (double)(1ull << 30));
    rv = task_generate(&tp, pool, npool, &tasks, &d);
    if (rv != 0) {
        free(pool);
        return ctl_fail(ctl_exit_for(rv), "gen-tasks: %s", d.msg);
    }
    text = json_tasks(tasks, tp.count);
    task_array_free(tasks, tp.count);
    free(pool);
    if (text == NULL)
        return ctl_fail(1, "gen-tasks: out of memory");
    rv = ctl_write_output(o->out, text);
    free(text);
    return rv;
}

/*
 * The cost model plans are searched with and scored by: --model FILE, else
 * the embedded default.  *owned is what the caller frees.
 */
static int load_model(const struct ctl_opts *o, const char *cmd,
                      const struct cost_net **net, struct cost_net **owned)
{
    struct sd_diag d = {{0}};
    int rv;

    *owned = NULL;
    if (o->model != NULL) {
        rv = net_read_file(o->model, owned, &d);
        if (rv != 0)
            return ctl_fail(ctl_exit_for(rv), "%s: --model: %s", cmd, d.msg);
        *net = *owned;
        return 0;
    }
    *net = net_embedded(&d);
    if (*net == NULL)
        return ctl_fail(1, "%s: %s", cmd, d.msg);
    return 0;
}

static int cmd_plan(const struct ctl_opts *o)
{
    struct plan_options po;
    struct table *tables = NULL;
    struct topology topo;
    struct sd_diag d;
    struct plan p;
    const struct cost_net *net;
    struct cost_net *owned;
    struct net_cost_model ncm;
    uint64_t *caps = NULL;
    int32_t *pins = NULL;
    size_t n;
    char *text = NULL;
    int rv;

    if (o->tables == NULL || o->devices == 0 || o->mem_gb <= 0)
        return ctl_fail(EXIT_USAGE,
                        "plan: --tables, --devices and --mem-gb are "
                        "required");
    if (o->json && o->torchrec)
        return ctl_fail(EXIT_USAGE, "plan: --json and --torchrec exclude each "
                                    "other");
    plan_options_default(&po);
    po.alg = PLAN_ALG_NEUROSHARD;
    if (o->alg != NULL && plan_alg_parse(o->alg, &po.alg, &d) != 0)
        return ctl_fail(EXIT_USAGE, "plan: --alg: %s", d.msg);
    if (o->optimizer != NULL && optimizer_parse(o->optimizer, &po.optimizer))
        return ctl_fail(EXIT_USAGE,
                        "plan: --optimizer \"%s\" is unknown (sgd, "
                        "adagrad, rowwise_adagrad, adam)",
                        o->optimizer);
    po.seed = (uint64_t)o->seed;
    po.time_budget_ms = o->time_budget_ms;
    po.column_splits = !o->no_splits;
    po.local_search = !o->no_local_search;
    po.threads = (int32_t)o->threads;

    rv = load_model(o, "plan", &net, &owned);
    if (rv != 0)
        return rv;
    /* --profile: the plan must be for that hardware; a model of another
     * profile would answer for the wrong machine. */
    if (o->profile != NULL && net_check_profile(net, o->profile, &d) != 0) {
        rv = ctl_fail(EXIT_USAGE, "plan: --profile: %s", d.msg);
        goto out_model;
    }
    po.net = net;
    net_cost_model_init(&ncm, net);

    topology_default(&topo, (int32_t)o->devices, 0);
    rv = ctl_capacities(o, "plan", &topo, &caps);
    if (rv != 0)
        goto out_model;
    /* Costs are the model's, at its profile's batch unless asked. */
    topo.batch_size = o->batch ? o->batch : net->batch_size;
    if (o->per_host)
        topo.devices_per_host = (int32_t)o->per_host;
    if (topology_validate(&topo, &d) != 0) {
        rv = ctl_fail(EXIT_USAGE, "plan: %s", d.msg);
        goto out_model;
    }

    rv = json_read_tables(o->tables, (size_t)o->task, &tables, &n, &d);
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "plan: %s", d.msg);
        goto out_model;
    }
    rv = ctl_pins(o, "plan", tables, n, topo.ndevices, &pins);
    if (rv != 0)
        goto out_tables;
    po.pins = pins;
    rv = plan_run(tables, n, &topo, &po, &ncm.cm, &p, &d);
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "plan: %s", d.msg);
        goto out_tables;
    }
    if (topo.batch_size != net->batch_size) {
        size_t len = strlen(p.cost_model);

        snprintf(p.cost_model + len, sizeof(p.cost_model) - len,
                 " (scaled from batch %lld)", (long long)net->batch_size);
    }
    if (o->json)
        text = json_plan(&p, tables);
    else if (o->torchrec)
        text = json_plan_torchrec(&p, tables, &topo);

    if (o->json || o->torchrec) {
        rv = text ? ctl_write_output(o->out, text)
                  : ctl_fail(1, "plan: out of memory");
    } else if (o->out != NULL) {
        rv = ctl_fail(EXIT_USAGE, "plan: --out needs --json or --torchrec");
    } else {
        format_plan_text(stdout, &p, tables, n, &topo);
        rv = fflush(stdout) == 0 ? 0 : ctl_fail(1, "cannot write to stdout");
    }
    free(text);
    plan_destroy(&p);
out_tables:
    free(pins);
    free(tables);
out_model:
    free(caps);
    free(owned);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* Measuring: profile and eval                                             */

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

/* Stops long measurements cleanly on Ctrl-C or SIGTERM: the current sample
 * finishes and every measured one is committed. */
static void catch_stop_signals(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* A progress bar on a terminal; a line per 10 % elsewhere (logs). */
static void show_progress(void *ctx, uint64_t done, uint64_t target,
                          uint64_t added, double elapsed_s)
{
    double rate = elapsed_s > 0 ? (double)added / elapsed_s : 0;
    double eta = rate > 0 ? (double)(target - done) / rate : 0;
    int width = 30, fill = target ? (int)(width * done / target) : width;
    static int last_decile = -1;

    if (isatty(STDERR_FILENO)) {
        fprintf(stderr, "\r[%.*s%*s] %llu/%llu samples  %.2f/s  eta %.0f s ",
                fill, "==============================", width - fill, "",
                (unsigned long long)done, (unsigned long long)target, rate,
                eta);
        if (done == target)
            fputc('\n', stderr);
    } else if ((int)(10 * done / (target ? target : 1)) != last_decile) {
        last_decile = (int)(10 * done / (target ? target : 1));
        fprintf(stderr, "profile: %llu/%llu samples, %.2f/s\n",
                (unsigned long long)done, (unsigned long long)target, rate);
    }
}

/* The timing options shared by profile and eval. */
static void timing_opts(const struct ctl_opts *o, struct kern_timing_opts *to)
{
    kern_timing_opts_default(to);
    if (o->warmup >= 0)
        to->warmup = (int)o->warmup;
    if (o->repeats)
        to->repeats = (int)o->repeats;
    if (o->no_flush)
        to->flush = false;
}

static const struct kern_backend *pick_backend(const char *name)
{
    struct sd_diag d;
    const struct kern_backend *be = kern_backend_get(name, &d);

    if (be == NULL)
        ctl_fail(EXIT_USAGE, "--backend: %s", d.msg);
    return be;
}

static int cmd_profile(const struct ctl_opts *o)
{
    struct prof_run_params pp;
    struct prof_run_result res;
    struct store *st;
    struct sd_diag d;
    int rv;

    if (o->db == NULL || o->samples == 0)
        return ctl_fail(EXIT_USAGE, "profile: --db and --samples are required");
    prof_run_params_default(&pp);
    pp.be = pick_backend(o->backend);
    if (pp.be == NULL)
        return EXIT_USAGE;
    if (o->device >= pp.be->device_count())
        return ctl_fail(EXIT_USAGE,
                        "profile: --device %lld: the %s backend has "
                        "%d devices",
                        (long long)o->device, pp.be->name,
                        pp.be->device_count());
    pp.device = (int32_t)o->device;
    if (o->batch)
        pp.batch_size = o->batch;
    pp.seed = (uint64_t)o->seed;
    pp.target_samples = (uint64_t)o->samples;
    pp.max_seconds = o->seconds;
    if (o->max_gb > 0)
        pp.shape.max_bytes = (uint64_t)(o->max_gb * (double)(1ull << 30));
    timing_opts(o, &pp.timing);
    pp.stop = &stop_requested;
    pp.progress = show_progress;

    rv = store_open(o->db, 0, &st, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "profile: %s", d.msg);
    catch_stop_signals();
    rv = prof_run(st, &pp, &res, &d);
    store_close(st);
    fprintf(stderr, "profile %s: %llu samples added, %llu in the store\n",
            res.profile, (unsigned long long)res.added,
            (unsigned long long)(res.existing + res.added));
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv),
                        "profile: %s (committed samples are kept)", d.msg);
    if (res.interrupted) {
        fprintf(stderr, "profile: stopped early; every committed sample is "
                        "kept, and the same command resumes\n");
        return stop_requested ? 130 : 0;
    }
    return 0;
}

/* One line per 10 epochs, and the last; Ctrl-C stops training. */
static int train_progress(void *ctx, int32_t epoch, int32_t max_epochs,
                          double train_loss, double val_mape)
{
    (void)ctx;
    if (epoch % 10 == 0 || epoch == 1)
        fprintf(stderr,
                "train: epoch %d/%d, loss %.5f, validation MAPE "
                "%.2f%%\n",
                (int)epoch, (int)max_epochs, train_loss, 100 * val_mape);
    return stop_requested != 0;
}

/* The profile to train: --profile, else the store's only one. */
static int pick_profile(struct store *st, const char *name,
                        struct store_profile *out)
{
    struct store_profile *all = NULL;
    struct sd_diag d;
    size_t n, i;
    int rv;

    if (name != NULL) {
        rv = store_profile_get(st, name, out, &d);
        return rv ? ctl_fail(ctl_exit_for(rv), "train: --profile: %s", d.msg)
                  : 0;
    }
    rv = store_profile_list(st, &all, &n, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "train: %s", d.msg);
    if (n == 1) {
        *out = all[0];
        free(all);
        return 0;
    }
    fprintf(stderr,
            "shardctl: train: the store has %zu profiles; name one "
            "with --profile:\n",
            n);
    for (i = 0; i < n; i++)
        fprintf(stderr, "  %s\n", all[i].name);
    free(all);
    return EXIT_USAGE;
}

static int cmd_train(const struct ctl_opts *o)
{
    struct store *st = NULL;
    struct store_profile prof;
    struct store_sample *smp = NULL;
    struct train_sample *ts = NULL;
    struct train_params tp;
    struct cost_net *m = NULL;
    struct store_model sm;
    struct sd_diag d;
    int64_t id = 0;
    size_t n = 0, i;
    void *img = NULL;
    size_t len;
    int rv;

    if (o->db == NULL)
        return ctl_fail(EXIT_USAGE, "train: --db is required");
    rv = store_open(o->db, 0, &st, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "train: %s", d.msg);
    rv = pick_profile(st, o->profile, &prof);
    if (rv != 0)
        goto out_store;
    rv = store_samples_load_newest(st, prof.id, STORE_KIND_COMPUTE,
                                   (size_t)o->newest, &smp, &n, &d);
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "train: %s", d.msg);
        goto out_store;
    }
    ts = calloc(n ? n : 1, sizeof(*ts));
    if (!ts) {
        rv = ctl_fail(1, "train: out of memory");
        goto out_samples;
    }
    for (i = 0; i < n; i++)
        ts[i] = (struct train_sample){smp[i].tables, smp[i].ntables,
                                      smp[i].measured_ms};
    train_params_default(&tp);
    tp.seed = (uint64_t)o->seed;
    if (o->epochs)
        tp.max_epochs = (int32_t)o->epochs;
    if (o->weight_decay >= 0)
        tp.weight_decay = o->weight_decay;
    tp.progress = train_progress;
    fprintf(stderr, "train: %zu samples of profile %s\n", n, prof.name);
    catch_stop_signals();
    rv = net_train(&tp, ts, n, prof.name, prof.batch_size, &m, &d);
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "train: %s", d.msg);
        goto out_samples;
    }
    if (stop_requested) {
        fprintf(stderr, "train: interrupted; nothing stored\n");
        rv = 130;
        goto out_model;
    }
    rv = net_serialize(m, &img, &len);
    if (rv != 0) {
        rv = ctl_fail(1, "train: out of memory");
        goto out_model;
    }
    memset(&sm, 0, sizeof(sm));
    sm.info.profile_id = prof.id;
    sm.info.kind = STORE_KIND_COMPUTE;
    sm.info.format_version = NET_FORMAT_VERSION;
    sm.info.metrics.val_mape = m->metrics.val_mape;
    sm.info.metrics.test_mape = m->metrics.test_mape;
    sm.info.metrics.train_samples = m->metrics.train_samples;
    sm.info.metrics.val_samples = m->metrics.val_samples;
    sm.info.metrics.test_samples = m->metrics.test_samples;
    sm.info.weights_bytes = len;
    sm.weights = img;
    rv = store_model_put(st, &sm, &id, &d);
    if (rv == 0 && o->activate)
        rv = store_model_activate(st, id, NULL, &d);
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "train: %s", d.msg);
        goto out_image;
    }
    if (o->out != NULL && (rv = net_write_file(o->out, m, &d)) != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "train: --out: %s", d.msg);
        goto out_image;
    }
    printf("model %lld for profile %s%s\n"
           "samples: %lld train, %lld validation, %lld test\n"
           "MAPE: %.2f%% train, %.2f%% validation, %.2f%% test\n"
           "epochs: %d (best %d), seed %llu\n",
           (long long)id, prof.name, o->activate ? " (active)" : "",
           (long long)m->metrics.train_samples,
           (long long)m->metrics.val_samples,
           (long long)m->metrics.test_samples, 100 * m->metrics.train_mape,
           100 * m->metrics.val_mape, 100 * m->metrics.test_mape,
           (int)m->metrics.epochs, (int)m->metrics.best_epoch,
           (unsigned long long)m->metrics.seed);
    rv = fflush(stdout) == 0 ? 0 : ctl_fail(1, "cannot write to stdout");

out_image:
    free(img);
out_model:
    free(m);
out_samples:
    free(ts);
    store_samples_free(smp, n);
out_store:
    store_close(st);
    return rv;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* How well a model predicts the measured samples of a store: the held-out
 * check for samples measured after it was trained.  The signed median says
 * whether the error is a drift of the whole machine (most samples off the
 * same way) rather than scatter. */
static int cmd_score(const struct ctl_opts *o)
{
    struct store *st = NULL;
    struct store_profile prof;
    struct store_sample *smp = NULL;
    const struct cost_net *net;
    struct cost_net *owned = NULL;
    struct sd_diag d;
    double *ape = NULL, *err, sum = 0;
    size_t n = 0, i;
    int rv;

    if (o->db == NULL)
        return ctl_fail(EXIT_USAGE, "score: --db is required");
    rv = load_model(o, "score", &net, &owned);
    if (rv != 0)
        return rv;
    rv = store_open(o->db, STORE_OPEN_READONLY, &st, &d);
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "score: %s", d.msg);
        goto out_model;
    }
    rv = pick_profile(st, o->profile ? o->profile : net->profile, &prof);
    if (rv != 0)
        goto out_store;
    if (net_check_profile(net, prof.name, &d) != 0) {
        rv = ctl_fail(EXIT_USAGE, "score: %s", d.msg);
        goto out_store;
    }
    rv = store_samples_load_newest(st, prof.id, STORE_KIND_COMPUTE,
                                   (size_t)o->newest, &smp, &n, &d);
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "score: %s", d.msg);
        goto out_store;
    }
    if (n == 0) {
        rv = ctl_fail(EXIT_USAGE, "score: profile %s has no compute samples",
                      prof.name);
        goto out_samples;
    }
    /* ape[0 .. n): absolute errors; err = ape + n: signed ones. */
    ape = malloc(2 * n * sizeof(*ape));
    if (!ape) {
        rv = ctl_fail(1, "score: out of memory");
        goto out_samples;
    }
    err = ape + n;
    for (i = 0; i < n; i++) {
        err[i] = (net_tables_ms(net, smp[i].tables, smp[i].ntables) -
                  smp[i].measured_ms) /
                 smp[i].measured_ms;
        ape[i] = fabs(err[i]);
        sum += ape[i];
    }
    qsort(ape, n, sizeof(*ape), cmp_double);
    qsort(err, n, sizeof(*err), cmp_double);
    printf("model %s on %zu samples of %s\n"
           "MAPE %.2f%%, median %.2f%%, p90 %.2f%%\n"
           "signed median %+.2f%% (> 0: the model predicts more than was "
           "measured)\n",
           o->model ? o->model : "(embedded)", n, prof.name,
           100 * sum / (double)n, 100 * ape[n / 2],
           100 * ape[(size_t)(0.9 * (double)(n - 1))], 100 * err[n / 2]);
    rv = fflush(stdout) == 0 ? 0 : ctl_fail(1, "cannot write to stdout");
    free(ape);
out_samples:
    store_samples_free(smp, n);
out_store:
    store_close(st);
out_model:
    free(owned);
    return rv;
}

static int cmd_eval(const struct ctl_opts *o)
{
    enum optimizer opt = OPTIMIZER_SGD;
    const struct kern_backend *be;
    struct kern_timing_opts to;
    struct table *tables = NULL;
    struct topology topo;
    struct sd_diag d;
    struct plan p;
    uint64_t *caps = NULL;
    size_t n;
    char *text;
    int rv;

    if (o->tables == NULL || o->plan == NULL)
        return ctl_fail(EXIT_USAGE, "eval: --tables and --plan are required");
    if (o->optimizer != NULL && optimizer_parse(o->optimizer, &opt) != 0)
        return ctl_fail(EXIT_USAGE, "eval: --optimizer \"%s\" is unknown",
                        o->optimizer);
    be = pick_backend(o->backend);
    if (be == NULL)
        return EXIT_USAGE;
    rv = json_read_tables(o->tables, (size_t)o->task, &tables, &n, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "eval: %s", d.msg);
    rv = json_read_plan(o->plan, tables, n, &p, &d);
    if (rv != 0) {
        free(tables);
        return ctl_fail(ctl_exit_for(rv), "eval: %s", d.msg);
    }
    /* Without --mem-gb the plan is measured whatever memory it needs. */
    topology_default(&topo, p.ndevices, UINT64_MAX / 2);
    if (o->mem_gb > 0 && (rv = ctl_capacities(o, "eval", &topo, &caps)) != 0)
        goto out_plan;
    if (o->per_host)
        topo.devices_per_host = (int32_t)o->per_host;
    if (o->batch)
        topo.batch_size = o->batch;
    rv = topology_validate(&topo, &d);
    if (rv == 0)
        rv = plan_validate(&p, tables, n, &topo, opt, &d);
    if (rv == 0) {
        timing_opts(o, &to);
        rv = prof_eval_plan(be, &p, tables, n, &topo, opt, &to,
                            (uint64_t)o->seed, NULL, &d);
    }
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "eval: %s", d.msg);
        goto out_plan;
    }
    p.algorithm = "eval";
    if (o->json) {
        text = json_plan(&p, tables);
        rv = text ? ctl_write_output(o->out, text)
                  : ctl_fail(1, "eval: out of memory");
        free(text);
    } else {
        format_plan_text(stdout, &p, tables, n, &topo);
        rv = fflush(stdout) == 0 ? 0 : ctl_fail(1, "cannot write to stdout");
    }
out_plan:
    plan_destroy(&p);
    free(caps);
    free(tables);
    return rv;
}

/* The offline commands: run in this process, no daemon needed. */
static const struct {
    const char *name;
    int (*run)(const struct ctl_opts *o);
} offline_cmds[] = {
    {"gen-tables", cmd_gen_tables}, {"gen-tasks", cmd_gen_tasks},
    {"profile", cmd_profile},       {"train", cmd_train},
    {"score", cmd_score},           {"eval", cmd_eval},
};

int main(int argc, char **argv)
{
    struct ctl_opts o;
    bool handled;
    size_t k;
    int rv;

    memset(&o, 0, sizeof(o));
    o.warmup = -1;       /* unset: 0 is a valid count */
    o.weight_decay = -1; /* unset: 0 is plain Adam */
    if (argc < 2)
        return fputs(usage_text, stderr), EXIT_USAGE;
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0 ||
        strcmp(argv[1], "-h") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    rv = parse_opts(argc, argv, 1, &o);
    if (rv != 0)
        return rv;
    if (o.nargs == 0)
        return ctl_fail(EXIT_USAGE, "no command (see shardctl --help)");
    for (k = 0; k < sizeof(offline_cmds) / sizeof(offline_cmds[0]); k++) {
        if (strcmp(o.args[0], offline_cmds[k].name) != 0)
            continue;
        if (o.nargs > 1)
            return ctl_fail(EXIT_USAGE, "%s: unexpected argument \"%s\"",
                            o.args[0], o.args[1]);
        return offline_cmds[k].run(&o);
    }
    if (strcmp(o.args[0], "plan") == 0 && o.offline) {
        if (o.nargs > 1)
            return ctl_fail(EXIT_USAGE, "plan: unexpected argument \"%s\"",
                            o.args[1]);
        return cmd_plan(&o);
    }
    rv = online_run(&o, &handled);
    if (handled)
        return rv;
    return ctl_fail(EXIT_USAGE, "unknown command \"%s\" (see shardctl --help)",
                    o.args[0]);
}
