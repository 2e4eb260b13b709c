/*
 * shardctl's command line (client.h): argv into struct ctl_opts, for every
 * command, online and offline, with getopt_long.  One table has every
 * option: its long name, whether it takes a value, the ctl_opts field it
 * sets, the commands that take it, and the parser that stores its value;
 * adding an option is a row here (and its field in client.h, its line in
 * the usage).  Another table has the commands and how many words (job ID,
 * pause|resume, SERVICE) follow each.
 *
 * Options may come anywhere: GLOBAL ones such as --addr before the command
 * or after it, as may every other.  getopt_long runs in return-in-order
 * mode ("-" first in its option string), so that words come back in their
 * order whatever POSIXLY_CORRECT says, and quietly (opterr = 0, ":" in the
 * string), so that every message is shardctl's own.  It also takes
 * "--name=value" and unambiguous abbreviations; abbreviations are refused
 * here as unknown options, as before getopt_long, so that a new option can
 * never change what an existing command line means.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "profiler.h"

static const char usage_text[] =
    "usage: shardctl COMMAND [OPTIONS]\n"
    "\n"
    "commands:\n"
    "  gen-tables  --count N [--seed S] [--family NAME|mix] [--batch-size B]\n"
    "              [--threads T] [--traces FILE] [--out FILE]\n"
    "      Generate N synthetic tables (traces made, features computed) and\n"
    "      write the tables JSON: DLRM-like by default, or of a family\n"
    "      (dlrm, zipf, exp, uniform, bimodal, seq, onehot) or all of them\n"
    "      in turn (mix); --traces also writes the DLRM tables' traces (the\n"
    "      trace file format, docs/trace-format.md).\n"
    "  features    --trace FILE|DIR [--batch-size B] [--dim D] [--out FILE]\n"
    "      The tables (access histogram, pooling factor) of one batch of real\n"
    "      lookups: a trace file, or a folder in the dlrm_datasets layout\n"
    "      (indices, offsets, lengths as .npy or raw .bin; B bags per table\n"
    "      unless lengths.npy is 2-D; every table of dim D, default 64).\n"
    "  gen-tasks   --count N [--seed S] --tables FILE [--min-tables A]\n"
    "              [--max-tables B] [--max-gb G] [--out FILE]\n"
    "      Draw N benchmark tasks (NeuroShard protocol) from a tables file.\n"
    "  cache-curve --tables FILE [--table NAME] [--batch-size B]\n"
    "              [--host-link-gbps G] [--model FILE] [--profile NAME]\n"
    "      The miss-rate curve of a UVM cache (fused_uvm_caching) over each\n"
    "      table, modelled from its access histogram, and the host-link time\n"
    "      its misses cost per step (docs/api.md, memory tiers), at the\n"
    "      batch plan uses: the model's (as plan picks it) unless\n"
    "      --batch-size is given.\n"
    "  plan        --offline --tables FILE --devices N --mem-gb G[,G...]\n"
    "              [--tables-format auto|shardd|torchrec]\n"
    "              [--alg NAME] [--task K] [--pin TABLE=DEVICE ...]\n"
    "              [--optimizer NAME]\n"
    "              [--host-dram-gb G] [--host-link-gbps G]\n"
    "              [--comm-precision fp32|fp16|bf16]\n"
    "              [--batch-size B] [--devices-per-host L] [--seed S]\n"
    "              [--model FILE] [--policy FILE] [--profile NAME]\n"
    "              [--time-budget-ms T] [--no-splits] [--no-local-search]\n"
    "              [--no-torchrec] [--threads T] [--json | --torchrec "
    "[--torchrec-module "
    "PATH]]\n"
    "              [--svg FILE] [--quantile Q]\n"
    "      Plan the tables (or task K of a tasks file) on N devices of G GiB\n"
    "      (or one G per device: 16,16,8,8); --pin puts a table whole on a\n"
    "      device.  Tables in shardd's form (bins optional: derived) or\n"
    "      TorchRec's (EmbeddingBagConfig and ParameterConstraints); the\n"
    "      output ends with what was assumed or not applied.  --torchrec\n"
    "      writes TorchRec's ShardingPlan for module PATH (default\n"
    "      embedding_bags).  --svg also writes the per-device picture\n"
    "      (compute, comm, the wait, memory; the critical device outlined).\n"
    "      --quantile Q plans for the Q-quantile (0..1) of the model's\n"
    "      ensemble's costs, a robust plan (online too).  neuroshard also\n"
    "      prices TorchRec's greedy proposal and returns it where it is\n"
    "      cheaper (a note says so); --no-torchrec returns the search's own.\n"
    "      Algorithms: neuroshard (default), dreamshard (a learned policy:\n"
    "      --policy FILE, else the embedded one), random, dim_greedy,\n"
    "      size_greedy, lookup_greedy, size_lookup_greedy, torchrec_greedy.\n"
    "      Every plan is scored by the cost model (--model, else the\n"
    "      embedded one; --profile neuroshard/V100/65536 alone picks the\n"
    "      reference set, NeuroShard's released models, MIT, and --profile\n"
    "      \"cuda/NVIDIA H200/4096\" the model trained on an H200) at its "
    "batch\n"
    "      unless --batch-size is given; a set with comm models for N\n"
    "      devices prices the all-to-all with them.\n"
    "      Optimizers: sgd (default), adagrad, rowwise_adagrad, adam.\n"
    "  profile     --db FILE --samples N [--backend cpu|cuda|auto]\n"
    "              [--device D] [--batch-size B] [--seconds S] [--seed S]\n"
    "              [--family NAME|mix] [--row-blocks F] [--max-gb G]\n"
    "              [--max-tables K | --plan-devices N [--alg A]]\n"
    "              [--model FILE] [--quiet-tolerance T] [TIMING]\n"
    "      Measure N compute-cost samples of random shards (at most G GiB,\n"
    "      default 4; 1 .. K tables, default 15, at most 64) into the store\n"
    "      (resumable; Ctrl-C keeps every committed sample).  Tables of every\n"
    "      family by default (mix); a share F of the samples (default 0.25;\n"
    "      0 for dlrm) are shards of row blocks, each table cut to 1/2 ..\n"
    "      1/64 of its rows.  --plan-devices N: shards shaped like the\n"
    "      devices of greedy plans of random tasks on N devices of 4 GiB;\n"
    "      --alg A: of A's plans instead (torchrec_greedy, neuroshard with\n"
    "      --model or the embedded model, ...), each device's column\n"
    "      slices, row blocks and replicas measured as eval measures them.\n"
    "      A sample is measured again while both probes timed beside it\n"
    "      run more than T (default 0.10; 0: no check) slower than the\n"
    "      device's quiet time (another process on it), for half an hour\n"
    "      at most.\n"
    "  train       --db FILE [--profile NAME] [--epochs N] [--seed S]\n"
    "              [--weight-decay W] [--newest N] [--activate]\n"
    "              [--backend cpu|cuda] [--features v1|v2|v3|v4|LIST]\n"
    "              [--hold-out-family NAME[,NAME]] [--ensemble K]\n"
    "              [--out FILE]\n"
    "      Train a compute cost model on the profile's samples (the store's\n"
    "      only profile by default; --newest: its newest N), store it as a\n"
    "      new model version with its MAPE, and write the model file with\n"
    "      --out.  --backend: the matrix products on that backend's device 0\n"
    "      (cuda: cuBLAS) instead of CBLAS.  --features: v1 NeuroShard's\n"
    "      20 inputs; v2 (the embedded model's) adds dtype bytes,\n"
    "      lookups, unique rows, their bytes and the table's bytes (model\n"
    "      format 3); v3 adds the physical prior: what each table does\n"
    "      per step, fitted first, under the net, which learns the ratio\n"
    "      (model format 4; better on families it never saw); v4 (the\n"
    "      default) weighs each table's share of the prior's pair term by\n"
    "      its lookups a bag; LIST names derived inputs (docs/models.md).\n"
    "      --hold-out-family: no\n"
    "      shard with a table of those families is trained on; they are\n"
    "      scored apart.  --ensemble K: K members (bootstraps after the\n"
    "      first) written to --out as an ensemble (plans get a spread).\n"
    "  train-policy [--db FILE [--profile NAME] [--activate]]\n"
    "              [--model FILE] [--tasks FILE] [--iterations N] [--seed S]\n"
    "              [--devices N] [--mem-gb G] [--out FILE]\n"
    "      Train a dreamshard placement policy for a compute model (the\n"
    "      profile's active one with --db, else --model or the embedded\n"
    "      one) on synthetic tasks (or --tasks), gate it against\n"
    "      size_lookup_greedy on held-out tasks, store it bound to that\n"
    "      model (--activate: and activate it if it passed) and/or write\n"
    "      the policy file with --out.\n"
    "  score       --db FILE [--model FILE] [--profile NAME] [--newest N]\n"
    "              [--backend cpu|cuda] [--quantile Q] [--out FILE]\n"
    "      A model's error (MAPE, median, p90, signed median) on a store's\n"
    "      measured samples: the held-out check for samples it never saw.\n"
    "      The samples of the model's own profile; --profile NAME scores\n"
    "      it on another's (does a model carry over to another machine?).\n"
    "      --backend: every sample scored in one batch by the model resident\n"
    "      on that backend's device 0.  --out: a CSV row a sample (id,\n"
    "      family, source, tables, measured_ms, predicted_ms, error, and\n"
    "      prior_ms: a prior model's physical prior alone, without the\n"
    "      net).  --quantile Q: an ensemble's Q-quantile of its members'\n"
    "      predictions (0.5 their median) instead of member 0's.\n"
    "  estimate    --offline --tables FILE --plan FILE --mem-gb G[,G...]\n"
    "              [--devices N] [--task K] [--batch-size B]\n"
    "              [--devices-per-host L] [--optimizer NAME] [--model FILE]\n"
    "              [--profile NAME] [--host-dram-gb G] [--host-link-gbps G]\n"
    "              [--comm-precision fp32|fp16|bf16] [--json] [--out FILE]\n"
    "              [--svg FILE]\n"
    "      Per-device costs of a given plan (a --json plan file) by the\n"
    "      model set, in this process: its comm models too when it has them\n"
    "      for N devices, else the alpha-beta model.\n"
    "  import-model --neuroshard compute.pt [--comm-fw F --comm-bw F]\n"
    "              --profile NAME [--batch-size B] [--notice FILE]\n"
    "              [--out FILE] [--db FILE [--activate]]\n"
    "      NeuroShard's PyTorch checkpoints (read without torch) as one\n"
    "      model set, held exactly (format 2): written to --out, stored as\n"
    "      a model version of the profile with --db.  The batch is the\n"
    "      profile's last part unless --batch-size; --notice carries a\n"
    "      license text along.\n"
    "  comm-fit    FILE... [--collective NAME] [--bands K] [--json]\n"
    "              [--out FILE]\n"
    "      Fit alpha-beta per size band (K bands, default 3, at most 4) to\n"
    "      nccl-tests outputs (all_reduce, all_gather, reduce_scatter,\n"
    "      alltoall); --collective when an output does not name it.\n"
    "  eval        --tables FILE --plan FILE [--task K] [--backend B]\n"
    "              [--batch-size B] [--mem-gb G] [--devices-per-host L]\n"
    "              [--host-dram-gb G] [--host-link-gbps G]\n"
    "              [--optimizer NAME] [--seed S] [--traces F] [--json]\n"
    "              [--model FILE] [--profile NAME] [--out FILE] [TIMING]\n"
    "      Measure a plan on the device: each device's shard timed in turn,\n"
    "      communication modelled; per-device figures and the plan cost.\n"
    "      Lookups from trace file F (by table name), else made from the\n"
    "      tables' features.\n"
    "      Tables off HBM (fused_uvm, fused_uvm_caching) are timed in host\n"
    "      memory on cuda; on cpu their host-link time is modelled.  The\n"
    "      text prints the prediction beside the measurement: of --model,\n"
    "      --profile, else the model compiled in for the measuring device\n"
    "      (an H200's), else the embedded one.\n"
    "  comm-profile [--db FILE] [--backend cpu|cuda] [--devices N]\n"
    "              [--samples N] [--seconds S] [--seed S] [--batch-size B]\n"
    "              [--collectives] [TIMING]\n"
    "      Time NeuroShard's comm samples: random plans' forward all-to-all\n"
    "      behind each device's compute skew and backward all-to-all, on N\n"
    "      devices (default all; NCCL on cuda, threads on cpu), stored as\n"
    "      comm samples with --db (2 devices or more).  --collectives also\n"
    "      times all-to-all, reduce-scatter, all-gather and all-reduce from\n"
    "      4 KiB to 256 MiB per rank, together and with the last rank 5 ms\n"
    "      late.\n"
    "  TIMING: [--warmup N] (default 5) [--repeats N] (default 10)\n"
    "          [--no-flush] (skip the cache flush before each timed step)\n"
    "\n"
    "online commands (ask a running shardd):\n"
    "  plan        --tables FILE --devices N --mem-gb G [plan options as\n"
    "              above, without --model, --policy, --no-local-search,\n"
    "              --no-torchrec, --threads]\n"
    "      The daemon plans; the output is offline plan's, except figures\n"
    "      its API does not carry (null in --json).\n"
    "  estimate    --tables FILE --plan FILE --mem-gb G [--devices N]\n"
    "              [--tables-format F] [--task K] [--batch-size B]\n"
    "              [--devices-per-host L] [--optimizer NAME] [--profile NAME]\n"
    "              [--svg FILE]\n"
    "      Predicted per-device costs of a given plan (a --json plan file);\n"
    "      --svg also writes their picture.\n"
    "  status                       daemon version, devices, model, jobs\n"
    "  models [--profile P] [--limit N] [--kind compute|policy]\n"
    "                               stored cost models (or dreamshard\n"
    "                               policies), newest first\n"
    "  activate VERSION             make a stored model the active one\n"
    "  retrain [--profile P] [--kind compute|policy] [--force] [--wait]\n"
    "                               start a retraining job (policy: a\n"
    "                               dreamshard policy for the active model)\n"
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
    "--seed S (default 0) makes what a command draws repeatable.\n"
    "Output goes to stdout unless --out is given.  Exit status: 0 success,\n"
    "1 internal failure (or the daemon unreachable or failing, or a job\n"
    "that failed), 2 bad input or usage.\n";

void ctl_usage(FILE *f)
{
    fputs(usage_text, f);
}

int ctl_usage_of(FILE *f, const char *cmd)
{
    const char *p = usage_text, *end;
    size_t len = cmd != NULL ? strlen(cmd) : 0;

    /* A command's lines start "  NAME " (two spaces); its other lines
     * start with more spaces, and the next command's with two again. */
    while (len > 0 && (p = strstr(p, "\n  ")) != NULL) {
        p += 3;
        if (strncmp(p, cmd, len) == 0 && p[len] == ' ')
            break;
    }
    if (len == 0) {
        ctl_usage(f);
        return 0;
    }
    if (p == NULL)
        return ctl_fail(CTL_EXIT_USAGE,
                        "help: unknown command \"%s\" (see shardctl --help)",
                        cmd);
    for (end = strchr(p, '\n'); end != NULL && strncmp(end, "\n   ", 4) == 0;
         end = strchr(end + 1, '\n'))
        ;
    fprintf(f, "usage: shardctl %.*s\n", (int)(end ? end - p : (long)strlen(p)),
            p);
    fputs("(shardctl --help: every command, the options' meanings and the "
          "exit status)\n",
          f);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Commands                                                                */

static const struct cmd_def {
    const char *name;
    int min_words, max_words; /* after the command */
    const char *synopsis;     /* for a word missing */
} cmd_defs[CTL_CMD_COUNT] = {
    [CTL_CMD_GEN_TABLES] = {"gen-tables", 0, 0, NULL},
    [CTL_CMD_GEN_TASKS] = {"gen-tasks", 0, 0, NULL},
    [CTL_CMD_PLAN] = {"plan", 0, 0, NULL},
    [CTL_CMD_PROFILE] = {"profile", 0, 0, NULL},
    [CTL_CMD_TRAIN] = {"train", 0, 0, NULL},
    [CTL_CMD_SCORE] = {"score", 0, 0, NULL},
    [CTL_CMD_EVAL] = {"eval", 0, 0, NULL},
    [CTL_CMD_COMM_PROFILE] = {"comm-profile", 0, 0, NULL},
    [CTL_CMD_ESTIMATE] = {"estimate", 0, 0, NULL},
    [CTL_CMD_STATUS] = {"status", 0, 0, NULL},
    [CTL_CMD_MODELS] = {"models", 0, 0, NULL},
    [CTL_CMD_ACTIVATE] = {"activate", 1, 1, "activate VERSION"},
    [CTL_CMD_RETRAIN] = {"retrain", 0, 0, NULL},
    [CTL_CMD_JOB] = {"job", 1, 1, "job ID [--watch]"},
    [CTL_CMD_PROFILER] = {"profiler", 1, 1, "profiler pause|resume"},
    [CTL_CMD_HEALTH] = {"health", 0, 1, NULL},
    [CTL_CMD_FEATURES] = {"features", 0, 0, NULL},
    [CTL_CMD_IMPORT_MODEL] = {"import-model", 0, 0, NULL},
    [CTL_CMD_COMM_FIT] = {"comm-fit", 1, CTL_MAX_ARGS,
                          "comm-fit FILE... [--collective NAME] [--bands K]"},
    [CTL_CMD_TRAIN_POLICY] = {"train-policy", 0, 0, NULL},
    [CTL_CMD_CACHE_CURVE] = {"cache-curve", 0, 0, NULL},
};

/* The commands an option belongs to, as bits. */
#define CMD(c) (1u << CTL_CMD_##c)
/* The options the usage calls those "of every online command, before or
 * after it" (the daemon's address, its token, the deadline, --json): every
 * command takes them, so that a prefix such as `shardctl --addr A` works
 * for offline commands too (which need none of them). */
#define GLOBAL ((1u << CTL_CMD_COUNT) - 1)
#define TIMING (CMD(PROFILE) | CMD(EVAL) | CMD(COMM_PROFILE))
_Static_assert(CTL_CMD_COUNT < 32, "a command is a bit of unsigned");

/* ---------------------------------------------------------------------- */
/* Options                                                                 */

struct opt_def;

/*
 * Stores an option's value (arg; NULL for a flag) at field, the option's
 * member of *o.  Returns 0 or an exit code (the message printed).
 */
typedef int opt_parse_fn(const struct opt_def *def, const char *arg,
                         void *field, struct ctl_opts *o);

struct opt_def {
    const char *name;    /* long name, without "--" */
    int has_arg;         /* no_argument or required_argument */
    size_t offset;       /* of its field in struct ctl_opts */
    unsigned cmds;       /* the commands that take it: CMD() bits */
    opt_parse_fn *parse; /* how the value is stored */
    double min, max;     /* bounds of a number */
};

static opt_parse_fn set_flag, set_str, set_int, set_real, set_gb_list, add_pin;

#define O(f) offsetof(struct ctl_opts, f)
#define FLAG no_argument
#define ARG  required_argument
static const struct opt_def opt_defs[] = {
    /* What to plan and where */
    {"tables", ARG, O(tables),
     CMD(GEN_TASKS) | CMD(PLAN) | CMD(ESTIMATE) | CMD(EVAL) | CMD(CACHE_CURVE),
     set_str, 0, 0},
    {"tables-format", ARG, O(tables_format),
     CMD(PLAN) | CMD(ESTIMATE) | CMD(CACHE_CURVE), set_str, 0, 0},
    {"plan", ARG, O(plan), CMD(ESTIMATE) | CMD(EVAL), set_str, 0, 0},
    {"task", ARG, O(task), CMD(PLAN) | CMD(ESTIMATE) | CMD(EVAL), set_int, 0,
     1e9},
    {"devices", ARG, O(devices),
     CMD(PLAN) | CMD(ESTIMATE) | CMD(COMM_PROFILE) | CMD(TRAIN_POLICY), set_int,
     1, TOPO_DEVICES_MAX},
    {"devices-per-host", ARG, O(per_host),
     CMD(PLAN) | CMD(ESTIMATE) | CMD(EVAL), set_int, 1, TOPO_DEVICES_MAX},
    /* --mem-gb G, or G0,G1,... one per device */
    {"mem-gb", ARG, O(mem_gb),
     CMD(PLAN) | CMD(ESTIMATE) | CMD(EVAL) | CMD(TRAIN_POLICY), set_gb_list,
     1e-9, 1e9},
    /* The host tier (UVM and UVM caches) and the exchanges' precision */
    {"host-dram-gb", ARG, O(host_dram_gb),
     CMD(PLAN) | CMD(ESTIMATE) | CMD(EVAL) | CMD(CACHE_CURVE), set_real, 0,
     1e9},
    {"host-link-gbps", ARG, O(host_link_gbps),
     CMD(PLAN) | CMD(ESTIMATE) | CMD(EVAL) | CMD(CACHE_CURVE), set_real, 1e-6,
     1e9},
    {"comm-precision", ARG, O(comm_precision),
     CMD(PLAN) | CMD(ESTIMATE) | CMD(EVAL), set_str, 0, 0},
    {"table", ARG, O(table), CMD(CACHE_CURVE), set_str, 0, 0},
    /* --pin TABLE=DEVICE, repeatable */
    {"pin", ARG, O(pins), CMD(PLAN), add_pin, 0, 0},
    {"batch-size", ARG, O(batch),
     CMD(GEN_TABLES) | CMD(PLAN) | CMD(ESTIMATE) | CMD(PROFILE) | CMD(EVAL) |
         CMD(COMM_PROFILE) | CMD(FEATURES) | CMD(CACHE_CURVE) |
         CMD(IMPORT_MODEL),
     set_int, 1, 1 << 30},
    {"optimizer", ARG, O(optimizer), CMD(PLAN) | CMD(ESTIMATE) | CMD(EVAL),
     set_str, 0, 0},
    /* How to plan */
    {"offline", FLAG, O(offline), CMD(PLAN) | CMD(ESTIMATE), set_flag, 0, 0},
    {"alg", ARG, O(alg), CMD(PLAN) | CMD(PROFILE), set_str, 0, 0},
    {"seed", ARG, O(seed),
     CMD(GEN_TABLES) | CMD(GEN_TASKS) | CMD(PLAN) | CMD(PROFILE) | CMD(TRAIN) |
         CMD(EVAL) | CMD(COMM_PROFILE) | CMD(TRAIN_POLICY),
     set_int, 0, 9.2e18},
    {"time-budget-ms", ARG, O(time_budget_ms), CMD(PLAN), set_real, 1e-3, 1e9},
    {"no-splits", FLAG, O(no_splits), CMD(PLAN), set_flag, 0, 0},
    /* Offline-only; online plan refuses them with its own message. */
    {"no-local-search", FLAG, O(no_local_search), CMD(PLAN), set_flag, 0, 0},
    {"no-torchrec", FLAG, O(no_torchrec), CMD(PLAN), set_flag, 0, 0},
    {"threads", ARG, O(threads), CMD(GEN_TABLES) | CMD(PLAN), set_int, 1, 256},
    {"model", ARG, O(model),
     CMD(PLAN) | CMD(ESTIMATE) | CMD(SCORE) | CMD(EVAL) | CMD(TRAIN_POLICY) |
         CMD(PROFILE) | CMD(CACHE_CURVE),
     set_str, 0, 0},
    {"policy", ARG, O(policy), CMD(PLAN), set_str, 0, 0},
    {"profile", ARG, O(profile),
     CMD(PLAN) | CMD(ESTIMATE) | CMD(TRAIN) | CMD(SCORE) | CMD(MODELS) |
         CMD(RETRAIN) | CMD(IMPORT_MODEL) | CMD(TRAIN_POLICY) |
         CMD(CACHE_CURVE) | CMD(EVAL),
     set_str, 0, 0},
    /* Output */
    {"out", ARG, O(out),
     CMD(GEN_TABLES) | CMD(GEN_TASKS) | CMD(PLAN) | CMD(ESTIMATE) | CMD(TRAIN) |
         CMD(EVAL) | CMD(FEATURES) | CMD(IMPORT_MODEL) | CMD(COMM_FIT) |
         CMD(TRAIN_POLICY) | CMD(SCORE),
     set_str, 0, 0},
    {"torchrec", FLAG, O(torchrec), CMD(PLAN), set_flag, 0, 0},
    {"torchrec-module", ARG, O(torchrec_module), CMD(PLAN), set_str, 0, 0},
    {"svg", ARG, O(svg), CMD(PLAN) | CMD(ESTIMATE), set_str, 0, 0},
    /* gen-tables and gen-tasks */
    {"count", ARG, O(count), CMD(GEN_TABLES) | CMD(GEN_TASKS), set_int, 1, 1e6},
    {"family", ARG, O(family), CMD(GEN_TABLES) | CMD(PROFILE), set_str, 0, 0},
    {"traces", ARG, O(traces), CMD(GEN_TABLES) | CMD(EVAL), set_str, 0, 0},
    /* features */
    {"trace", ARG, O(trace), CMD(FEATURES), set_str, 0, 0},
    {"dim", ARG, O(dim), CMD(FEATURES), set_int, TABLE_DIM_MIN, TABLE_DIM_MAX},
    {"min-tables", ARG, O(min_tables), CMD(GEN_TASKS), set_int, 1, 1e6},
    {"max-tables", ARG, O(max_tables), CMD(GEN_TASKS) | CMD(PROFILE), set_int,
     1, 1e6},
    {"plan-devices", ARG, O(plan_devices), CMD(PROFILE), set_int, 1,
     PROF_PLAN_DEVICES},
    {"max-gb", ARG, O(max_gb), CMD(GEN_TASKS) | CMD(PROFILE), set_real, 1e-9,
     1e9},
    /* Measuring: profile, train, score, eval */
    {"db", ARG, O(db),
     CMD(PROFILE) | CMD(TRAIN) | CMD(SCORE) | CMD(COMM_PROFILE) |
         CMD(IMPORT_MODEL) | CMD(TRAIN_POLICY),
     set_str, 0, 0},
    {"backend", ARG, O(backend),
     CMD(PROFILE) | CMD(EVAL) | CMD(TRAIN) | CMD(SCORE) | CMD(COMM_PROFILE),
     set_str, 0, 0},
    {"samples", ARG, O(samples), CMD(PROFILE) | CMD(COMM_PROFILE), set_int, 1,
     1e9},
    {"device", ARG, O(device), CMD(PROFILE), set_int, 0, 1e6},
    {"seconds", ARG, O(seconds), CMD(PROFILE) | CMD(COMM_PROFILE), set_real,
     1e-3, 1e9},
    {"collectives", FLAG, O(collectives), CMD(COMM_PROFILE), set_flag, 0, 0},
    {"warmup", ARG, O(warmup), TIMING, set_int, 0, 1000},
    {"repeats", ARG, O(repeats), TIMING, set_int, 1, 10000},
    {"no-flush", FLAG, O(no_flush), TIMING, set_flag, 0, 0},
    {"epochs", ARG, O(epochs), CMD(TRAIN), set_int, 1, 1e6},
    {"weight-decay", ARG, O(weight_decay), CMD(TRAIN), set_real, 0, 100},
    {"newest", ARG, O(newest), CMD(TRAIN) | CMD(SCORE), set_int, 1, 1e9},
    {"activate", FLAG, O(activate),
     CMD(TRAIN) | CMD(IMPORT_MODEL) | CMD(TRAIN_POLICY), set_flag, 0, 0},
    {"hold-out-family", ARG, O(hold_out), CMD(TRAIN), set_str, 0, 0},
    {"features", ARG, O(features), CMD(TRAIN), set_str, 0, 0},
    {"ensemble", ARG, O(ensemble), CMD(TRAIN), set_int, 1, NET_ENSEMBLE_MAX},
    {"quantile", ARG, O(quantile), CMD(PLAN) | CMD(SCORE), set_real, 0, 1},
    {"row-blocks", ARG, O(row_blocks), CMD(PROFILE), set_real, 0, 1},
    {"quiet-tolerance", ARG, O(quiet_tolerance), CMD(PROFILE), set_real, 0, 10},
    /* import-model and comm-fit */
    {"neuroshard", ARG, O(neuroshard), CMD(IMPORT_MODEL), set_str, 0, 0},
    {"comm-fw", ARG, O(comm_fw), CMD(IMPORT_MODEL), set_str, 0, 0},
    {"comm-bw", ARG, O(comm_bw), CMD(IMPORT_MODEL), set_str, 0, 0},
    {"notice", ARG, O(notice), CMD(IMPORT_MODEL), set_str, 0, 0},
    {"collective", ARG, O(collective), CMD(COMM_FIT), set_str, 0, 0},
    {"bands", ARG, O(bands), CMD(COMM_FIT), set_int, 1, NCCL_BANDS_MAX},
    /* train-policy */
    {"tasks", ARG, O(tasks), CMD(TRAIN_POLICY), set_str, 0, 0},
    {"iterations", ARG, O(iterations), CMD(TRAIN_POLICY), set_int, 1, 1e7},
    /* Online: GLOBAL, then the admin commands' */
    {"addr", ARG, O(addr), GLOBAL, set_str, 0, 0},
    {"token", ARG, O(token), GLOBAL, set_str, 0, 0},
    {"token-file", ARG, O(token_file), GLOBAL, set_str, 0, 0},
    {"timeout-s", ARG, O(timeout_s), GLOBAL, set_real, 1e-3, 1e7},
    {"json", FLAG, O(json), GLOBAL, set_flag, 0, 0},
    {"limit", ARG, O(limit), CMD(MODELS), set_int, 1, 1e9},
    {"force", FLAG, O(force), CMD(RETRAIN), set_flag, 0, 0},
    {"kind", ARG, O(kind), CMD(RETRAIN) | CMD(MODELS), set_str, 0, 0},
    {"wait", FLAG, O(wait), CMD(RETRAIN), set_flag, 0, 0},
    {"watch", FLAG, O(watch), CMD(JOB), set_flag, 0, 0},
};
#undef ARG
#undef FLAG
#undef O

#define NOPTS   (sizeof(opt_defs) / sizeof(opt_defs[0]))
#define OPT_VAL 0x100 /* getopt_long's value for opt_defs[k]: OPT_VAL + k */

static int set_flag(const struct opt_def *def, const char *arg, void *field,
                    struct ctl_opts *o)
{
    *(bool *)field = true;
    return 0;
}

/* A word, a name or a path: never empty (`--torchrec-module ''` took the
 * default, `--out ''` named no file). */
static int set_str(const struct opt_def *def, const char *arg, void *field,
                   struct ctl_opts *o)
{
    if (arg[0] == '\0')
        return ctl_fail(CTL_EXIT_USAGE, "--%s \"\" is empty: give it a value",
                        def->name);
    *(const char **)field = arg;
    return 0;
}

static int set_int(const struct opt_def *def, const char *arg, void *field,
                   struct ctl_opts *o)
{
    char *end;
    long long v;

    errno = 0;
    v = strtoll(arg, &end, 10);
    if (errno != 0 || end == arg || *end != '\0' || v < def->min ||
        (double)v > def->max)
        return ctl_fail(CTL_EXIT_USAGE,
                        "--%s: \"%s\" is not an integer in [%.0f, %.0f]",
                        def->name, arg, def->min, def->max);
    *(int64_t *)field = v;
    return 0;
}

static int set_real(const struct opt_def *def, const char *arg, void *field,
                    struct ctl_opts *o)
{
    char *end;
    double x;

    errno = 0;
    x = strtod(arg, &end);
    if (errno != 0 || end == arg || *end != '\0' || !isfinite(x) ||
        x < def->min || x > def->max)
        return def->min > 0 ? ctl_fail(CTL_EXIT_USAGE,
                                       "--%s: \"%s\" is not a positive number "
                                       "up to %g",
                                       def->name, arg, def->max)
                            : ctl_fail(CTL_EXIT_USAGE,
                                       "--%s: \"%s\" is not a number in "
                                       "[%g, %g]",
                                       def->name, arg, def->min, def->max);
    *(double *)field = x;
    return 0;
}

/* --mem-gb: "G" or "G0,G1,...", each a number in the option's range, into
 * o->mem_gbs (and the first into o->mem_gb, the field). */
static int set_gb_list(const struct opt_def *def, const char *arg, void *field,
                       struct ctl_opts *o)
{
    const char *p = arg;
    char *end;
    double x;

    o->n_mem_gb = 0;
    for (;;) {
        errno = 0;
        x = strtod(p, &end);
        if (errno != 0 || end == p || (*end != '\0' && *end != ',') ||
            !isfinite(x) || x < def->min || x > def->max)
            return ctl_fail(CTL_EXIT_USAGE,
                            "--%s: \"%s\" is not a positive number or a "
                            "comma-separated list of them (one per device)",
                            def->name, arg);
        if (o->n_mem_gb == TOPO_DEVICES_MAX)
            return ctl_fail(CTL_EXIT_USAGE, "--%s: more than %d capacities",
                            def->name, TOPO_DEVICES_MAX);
        o->mem_gbs[o->n_mem_gb++] = x;
        if (*end == '\0')
            break;
        p = end + 1;
    }
    *(double *)field = o->mem_gbs[0];
    return 0;
}

/* --pin: one more word in o->pins (resolved by ctl_pins()). */
static int add_pin(const struct opt_def *def, const char *arg, void *field,
                   struct ctl_opts *o)
{
    if (o->npins == CTL_MAX_PINS)
        return ctl_fail(CTL_EXIT_USAGE, "--%s: more than %d", def->name,
                        CTL_MAX_PINS);
    o->pins[o->npins++] = arg;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* The command line                                                        */

static int unknown_option(const char *word)
{
    return ctl_fail(CTL_EXIT_USAGE,
                    "unknown option \"%s\" (see shardctl --help)", word);
}

/* Whether word ("--name" or "--name=value") names def in full. */
static bool names_in_full(const char *word, const struct opt_def *def)
{
    size_t len = strlen(def->name);

    return strncmp(word, "--", 2) == 0 &&
           strncmp(word + 2, def->name, len) == 0 &&
           (word[2 + len] == '\0' || word[2 + len] == '=');
}

/* A word that is not an option: the command, or one of its words. */
static int add_word(struct ctl_opts *o, const char *word)
{
    if (word[0] == '-') /* "-": no option, and no word either */
        return unknown_option(word);
    if (o->nargs > CTL_MAX_ARGS)
        return ctl_fail(CTL_EXIT_USAGE, "unexpected argument \"%s\"", word);
    o->args[o->nargs++] = word;
    return 0;
}

/*
 * One result c of getopt_long for the element argv[at] (return-in-order
 * mode consumes the elements in order): a word, an option and its value,
 * or an error.  seen[k] becomes at + 1 the first time opt_defs[k] is given.
 */
static int take(int c, char **argv, int at, struct ctl_opts *o, int *seen)
{
    const struct opt_def *def;
    size_t k;

    if (c == 1)
        return add_word(o, optarg);
    k = (size_t)((c == ':' ? optopt : c) - OPT_VAL);
    if (c == '?' || k >= NOPTS || !names_in_full(argv[at], &opt_defs[k]))
        return unknown_option(argv[at]);
    def = &opt_defs[k];
    if (c == ':')
        return ctl_fail(CTL_EXIT_USAGE, "--%s needs a value", def->name);
    if (seen[k] == 0)
        seen[k] = at + 1;
    return def->parse(def, optarg, (char *)o + def->offset, o);
}

/* The command of the first word, then whether its words and options are
 * its own.  Returns 0 or an exit code (the message printed). */
static int check_command(struct ctl_opts *o, const int *seen)
{
    const struct cmd_def *c = NULL;
    int words, first = 0;
    size_t k;

    if (o->nargs == 0)
        return ctl_fail(CTL_EXIT_USAGE, "no command (see shardctl --help)");
    for (k = 0; k < CTL_CMD_COUNT; k++)
        if (strcmp(o->args[0], cmd_defs[k].name) == 0)
            c = &cmd_defs[k];
    if (c == NULL)
        return ctl_fail(CTL_EXIT_USAGE,
                        "unknown command \"%s\" (see shardctl --help)",
                        o->args[0]);
    o->cmd = (enum ctl_cmd)(c - cmd_defs);
    words = o->nargs - 1;
    if (words > c->max_words)
        return ctl_fail(CTL_EXIT_USAGE, "%s: unexpected argument \"%s\"",
                        c->name, o->args[1 + c->max_words]);
    if (words < c->min_words)
        return ctl_fail(CTL_EXIT_USAGE, "%s: missing argument (shardctl %s)",
                        c->name, c->synopsis);
    /* The first option given that the command does not take. */
    for (k = 0; k < NOPTS; k++)
        if (seen[k] != 0 && !(opt_defs[k].cmds & (1u << o->cmd)) &&
            (first == 0 || seen[k] < seen[first - 1]))
            first = (int)k + 1;
    if (first != 0)
        return ctl_fail(CTL_EXIT_USAGE,
                        "%s: no option --%s (see shardctl --help)", c->name,
                        opt_defs[first - 1].name);
    return 0;
}

int ctl_opts_parse(int argc, char **argv, struct ctl_opts *o)
{
    struct option longopts[NOPTS + 1];
    int seen[NOPTS] = {0};
    int c, at, rv;
    size_t k;

    memset(o, 0, sizeof(*o));
    o->warmup = -1;          /* unset: 0 is a valid count */
    o->weight_decay = -1;    /* unset: 0 is plain Adam */
    o->quantile = -1;        /* unset: 0 is the members' least */
    o->row_blocks = -1;      /* unset: 0 is none */
    o->quiet_tolerance = -1; /* unset: 0 is no check */
    if (argc < 2) {
        ctl_usage(stderr);
        return CTL_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0 ||
        strcmp(argv[1], "-h") == 0) {
        o->help = true;
        o->help_on = argc > 2 ? argv[2] : NULL;
        return 0;
    }
    /* "shardctl plan --help": that command's usage, whatever else is
     * given (a value is never "--help" or "-h"). */
    for (c = 2; c < argc; c++)
        if (strcmp(argv[c], "--help") == 0 || strcmp(argv[c], "-h") == 0) {
            o->help = true;
            o->help_on = argv[1];
            return 0;
        }
    for (k = 0; k < NOPTS; k++)
        longopts[k] = (struct option){opt_defs[k].name, opt_defs[k].has_arg,
                                      NULL, OPT_VAL + (int)k};
    memset(&longopts[NOPTS], 0, sizeof(longopts[NOPTS]));
    opterr = 0;
    optind = 0; /* a full reset, in glibc and musl alike */
    for (;;) {
        at = optind > 0 ? optind : 1;
        c = getopt_long(argc, argv, "-:", longopts, NULL);
        if (c == -1)
            break;
        rv = take(c, argv, at, o, seen);
        if (rv != 0)
            return rv;
    }
    /* getopt_long ends early only at "--", which shardctl never took. */
    if (optind != at)
        return unknown_option(argv[at]);
    if (o->out != NULL && o->svg != NULL && strcmp(o->out, o->svg) == 0)
        return ctl_fail(CTL_EXIT_USAGE,
                        "--svg: \"%s\" is --out's file too: give each its own",
                        o->svg);
    return check_command(o, seen);
}
