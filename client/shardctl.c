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
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"

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

/* The offline commands: run in this process, no daemon needed. */
static const struct {
    const char *name;
    int (*run)(const struct ctl_opts *o);
} offline_cmds[] = {
    {"gen-tables", offline_gen_tables}, {"gen-tasks", offline_gen_tasks},
    {"profile", measure_profile},       {"train", measure_train},
    {"score", measure_score},           {"eval", measure_eval},
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
        return offline_plan(&o);
    }
    rv = online_run(&o, &handled);
    if (handled)
        return rv;
    return ctl_fail(EXIT_USAGE, "unknown command \"%s\" (see shardctl --help)",
                    o.args[0]);
}
