/*
 * shardctl, the command-line client: what its files share.  The client owns
 * presentation (human tables); the planning library owns plans and formats
 * that programs read (JSON).
 *
 *  - shardctl.c:     main(): parse, then run the command.
 *  - opts.c:         argv to struct ctl_opts: the option and command tables
 *                    (getopt_long), the usage.
 *  - common.c:       what every command shares: ctl_fail(), output files,
 *                    the cost model, capacities and pins.
 *  - offline.c:      gen-tables, gen-tasks, plan --offline and features,
 *                    in-process.
 *  - measure.c:      profile, train, score and eval on this machine's
 *                    devices.
 *  - fit.c:          train and score: cost models from a store's
 *                    samples, and their errors, by table family too.
 *  - family.c:       errors by table family: hold-outs and the per-family
 *                    table of train and score.
 *  - comm.c:         comm-profile: collectives timed on this machine's
 *                    devices.
 *  - import.c:       import-model (NeuroShard's checkpoints into a model
 *                    set) and comm-fit (nccl-tests outputs to alpha-beta).
 *  - train_policy.c: train-policy, a dreamshard placement policy for a
 *                    compute model (a file, or a version in a store).
 *  - format.c:       human-readable plan reports, offline and online.
 *  - svg.c:          the per-device picture of a plan (--svg FILE).
 *  - online.c:       online_run(), and plan and estimate asked of shardd.
 *  - online_admin.c: status, models, activate, profiler, retrain, job,
 *                    health (online.h).
 *  - online_call.c:  the channel to shardd, unary calls, --json output
 *                    (online.h).
 *  - rpc_json.c:     a protobuf-c message as JSON, on jansson.
 *  - rpc.c:          a small synchronous gRPC client; the only client file
 *                    that includes gRPC headers.
 *
 * Who calls whom, file by file (a layered graph: no file calls a function
 * of a file that calls it, directly or not):
 *
 *   shardctl.c     -> opts.c, offline.c, measure.c, comm.c, import.c,
 *                     train_policy.c, online.c
 *   train_policy.c -> common.c
 *   opts.c         -> common.c
 *   offline.c      -> common.c, format.c, svg.c
 *   measure.c      -> common.c, format.c
 *   fit.c          -> measure.c, common.c, family.c
 *   comm.c         -> common.c
 *   import.c       -> common.c
 *   online.c       -> online_admin.c, online_call.c, common.c, format.c,
 *                     svg.c
 *   svg.c          -> common.c
 *   online_admin.c -> online_call.c, rpc.c, common.c
 *   online_call.c  -> rpc.c, rpc_json.c, common.c
 *   common.c, format.c, family.c, rpc_json.c, rpc.c: no client file
 *                     (the planning library, wire/, protobuf-c, jansson,
 *                     gRPC)
 *
 * Headers: client.h (this one) for every file; online.h for online.c,
 * online_admin.c and online_call.c.  Planner structs <-> shardd.v1
 * messages are wire/'s (wire.h), shared with the daemon.
 *
 * Errors inside the client are negative SD_E* codes with a struct sd_diag
 * line; commands return shardctl's exit status (0 success, 1 failure of the
 * daemon, the connection or this machine, 2 bad input or usage), always with
 * one "shardctl: ..." message on stderr when not 0.
 */
#ifndef SHARDD_CLIENT_H
#define SHARDD_CLIENT_H

#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "planner.h"

#define CTL_EXIT_USAGE 2  /* bad input or usage */
#define CTL_MAX_ARGS   16 /* words after the command (job ID, files) */
#define CTL_MAX_PINS   TOPO_DEVICES_MAX /* --pin options */
#define CTL_DLRM_DIM   64 /* features: the dim of dlrm layout tables */

/* The commands, as opts.c names them. */
enum ctl_cmd {
    CTL_CMD_GEN_TABLES,
    CTL_CMD_GEN_TASKS,
    CTL_CMD_PLAN, /* offline with --offline, else online */
    CTL_CMD_PROFILE,
    CTL_CMD_TRAIN,
    CTL_CMD_SCORE,
    CTL_CMD_EVAL,
    CTL_CMD_COMM_PROFILE,
    CTL_CMD_ESTIMATE,
    CTL_CMD_STATUS,
    CTL_CMD_MODELS,
    CTL_CMD_ACTIVATE,
    CTL_CMD_RETRAIN,
    CTL_CMD_JOB,
    CTL_CMD_PROFILER,
    CTL_CMD_HEALTH,
    CTL_CMD_FEATURES,
    CTL_CMD_IMPORT_MODEL,
    CTL_CMD_COMM_FIT,
    CTL_CMD_TRAIN_POLICY,
    CTL_CMD_CACHE_CURVE,
    CTL_CMD_COUNT
};

/*
 * Every option of every command (opts.c's table says which command takes
 * which); zero / NULL when not given.
 */
struct ctl_opts {
    const char *tables;
    const char *tables_format; /* --tables-format auto|shardd|torchrec */
    const char *trace;         /* features --trace: a file or a folder */
    const char *traces;        /* gen-tables --traces: write them there */
    int64_t dim;               /* features --dim (the dlrm layout) */
    const char *out;
    const char *alg;
    const char *optimizer;
    const char *db;
    const char *plan;
    const char *backend;
    const char *model;
    const char *policy; /* plan --offline --policy: the dreamshard policy */
    const char *tasks;  /* train-policy --tasks */
    int64_t iterations; /* train-policy --iterations; 0: the default */
    const char *kind;   /* retrain --kind compute|policy */
    const char *profile;
    const char *svg;             /* plan, estimate --svg: the picture's file */
    const char *torchrec_module; /* plan --torchrec: the module path */
    const char *family;          /* gen-tables, profile --family */
    const char *hold_out;        /* train --hold-out-family */
    const char *features;        /* train --features: v1, v2 or a list */
    int64_t ensemble;            /* train --ensemble K */
    double quantile;             /* plan --quantile (offline); < 0: none */
    double row_blocks;      /* profile --row-blocks (share); < 0: the default */
    double quiet_tolerance; /* profile --quiet-tolerance; < 0: the default */
    double seconds, time_budget_ms;
    int64_t epochs;
    double weight_decay; /* train --weight-decay; < 0: the default */
    int64_t newest;      /* train, score --newest: 0: every sample */
    bool activate;
    bool no_splits, no_local_search, no_torchrec;
    int64_t samples, device, warmup, repeats;
    bool no_flush;
    bool collectives; /* comm-profile --collectives */
    int64_t count, seed, devices, per_host, batch, threads, task;
    int64_t min_tables, max_tables;
    int64_t plan_devices; /* profile --plan-devices */
    double max_gb;
    /* --mem-gb G, or G0,G1,... for devices of different capacities:
     * mem_gb is the first, mem_gbs[0 .. n_mem_gb) all of them. */
    double mem_gb;
    double mem_gbs[TOPO_DEVICES_MAX];
    int32_t n_mem_gb;
    /* The host tier and comm precision: --host-dram-gb (0: none),
     * --host-link-gbps (0: the default), --comm-precision fp32|fp16|bf16. */
    double host_dram_gb, host_link_gbps;
    const char *comm_precision;
    /* cache-curve --table NAME */
    const char *table;
    /* --pin TABLE=DEVICE, repeatable: the words as given. */
    const char *pins[CTL_MAX_PINS];
    int32_t npins;
    bool offline, json, torchrec;
    /* online mode */
    const char *addr;       /* --addr, else $SHARDD_ADDR, else the default */
    const char *token;      /* --token, else $SHARDD_TOKEN */
    const char *token_file; /* --token-file */
    double timeout_s;       /* --timeout-s; 0: the command's default */
    int64_t limit;          /* models --limit */
    bool force, wait, watch;
    /* import-model: NeuroShard's checkpoints and a notice file */
    const char *neuroshard, *comm_fw, *comm_bw, *notice;
    /* comm-fit: the collective when the output does not say; bands */
    const char *collective;
    int64_t bands;
    /* The words that are not options: args[0] is the command. */
    const char *args[CTL_MAX_ARGS + 1];
    int nargs;
    enum ctl_cmd cmd;    /* args[0]'s */
    bool help;           /* --help, help or -h: print the usage, run nothing */
    const char *help_on; /* with help: the command asked about, or NULL */
};

/* ------------------------------------------------------------------------ */
/* The command line (opts.c)                                                 */

/*
 * Parses argv into *o (cleared here first): the options, wherever they
 * are, and the words, the command first (o->cmd).  Everything that needs
 * no file and no daemon is checked here: unknown options and commands,
 * missing or malformed values, options the command does not take, and the
 * number of words after the command.  Returns 0 or an exit code with the
 * message printed.  Without any argument it prints the usage on stderr
 * and returns 2; for --help, help or -h as the first argument it sets
 * o->help and returns 0, and so it does for "help COMMAND" and for --help
 * or -h after a command, with o->help_on the command.  o keeps pointers
 * into argv.
 */
int ctl_opts_parse(int argc, char **argv, struct ctl_opts *o);

/* Writes shardctl --help's text to f. */
void ctl_usage(FILE *f);
/* Writes the usage of one command (its lines of shardctl --help) to f, or
 * all of it where cmd is NULL, and returns 0; a cmd of no command is exit 2
 * (the message printed). */
int ctl_usage_of(FILE *f, const char *cmd);

/* ------------------------------------------------------------------------ */
/* What every command shares (common.c)                                      */

/* Prints "shardctl: MESSAGE" on stderr and returns code. */
int ctl_fail(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * The options a command cannot run without: pairs of an option's name and
 * whether it was given (an int), ended by NULL.  0 when all were; else
 * exit 2 naming what is missing ("plan: --mem-gb is missing (--tables,
 * --devices and --mem-gb are required)"; all of them: "are required").
 */
int ctl_require(const char *cmd, ...);

/* The exit status for a planner error: 1 for SD_ENOMEM (ours), else 2
 * (the user's input). */
int ctl_exit_for(int err);

/*
 * Writes text and a newline to path, or to stdout when path is NULL.  A file
 * is written with sd_file_write() (to "path.tmp", then renamed, so a reader
 * never sees half a file; a device or FIFO in place).  Returns 0 or an exit
 * code (the message printed): 2 for a path that cannot be created.
 */
int ctl_write_output(const char *path, const char *text);
/* The same for the file of another option (--svg): errors name opt. */
int ctl_write_file(const char *opt, const char *path, const char *text);

/*
 * Human output (the plan's table, estimate's) for --out: ctl_text_begin()
 * gives t->f, stdout when path is NULL, else a stream in memory that
 * ctl_text_end() writes to path as ctl_write_output() does (whole, then
 * renamed).  ctl_text_end() always releases the stream; given an exit code
 * rv (a failure already printed) it writes nothing and returns rv, else it
 * returns 0 or an exit code (the message printed).
 */
struct ctl_text {
    FILE *f;
    char *buf; /* owned by the stream until ctl_text_end() */
    size_t len;
    const char *path; /* borrowed */
};
int ctl_text_begin(struct ctl_text *t, const char *path);
int ctl_text_end(struct ctl_text *t, int rv);

/*
 * The device capacities of --mem-gb for a topology of t->ndevices devices:
 * t->mem_bytes, and with one capacity per device *caps (owned by the
 * caller, who keeps it while t is used; NULL otherwise) as
 * t->mem_by_device.  Returns 0 or an exit code, the message naming cmd.
 */
int ctl_capacities(const struct ctl_opts *o, const char *cmd,
                   struct topology *t, uint64_t **caps);

/*
 * The --pin options resolved against the tables: *pins (owned by the
 * caller; NULL when there is none) has the device of every pinned table and
 * -1 for the others.  Returns 0 or an exit code (a pin naming no table, a
 * table twice, a device not in [0, ndevices), a word without "=").
 */
int ctl_pins(const struct ctl_opts *o, const char *cmd,
             const struct table *tables, size_t n, int32_t ndevices,
             int32_t **pins);

/*
 * The cost model plans are searched with and scored by: --model FILE (a
 * model file, or an ensemble file whose member 0 plans), else the reference
 * set when --profile names NET_REFERENCE_PROFILE, else the embedded
 * default; ens is its ensemble when it has more than one member (the
 * embedded one's, when that is whole), else NULL.  ctl_model_free()
 * releases what was read.  Returns 0 or an exit code, the message naming
 * cmd.
 */
struct ctl_model {
    const struct cost_net *net;
    const struct net_ensemble *ens;
    struct net_ensemble *owned;
};
/* What train and train-policy say of a store with nothing to learn from,
 * and after "no database at PATH" (they add to a store, never make one). */
#define CTL_NO_PROFILE                                                         \
    "the store has no profile yet: measure samples into it first "             \
    "(shardctl profile --db FILE)"
#define CTL_NO_STORE " (--db names a store that shardctl profile made)"

/*
 * The profile train, train-policy and score use: --profile's (name not
 * NULL), else the store's only one.  A store with none is CTL_NO_PROFILE;
 * one with several is named in one line that asks for --profile.
 * Returns 0 or an exit code, the message naming cmd.
 */
struct store;
struct store_profile;
int ctl_pick_profile(struct store *st, const char *cmd, const char *name,
                     struct store_profile *out);

int ctl_load_model(const struct ctl_opts *o, const char *cmd,
                   struct ctl_model *cm);
/* ctl_load_model() for the commands whose --profile says what hardware the
 * costs are for (plan, estimate, eval, cache-curve): a model of another
 * profile would answer for the wrong machine, so that is exit 2 naming
 * --profile (a name of no compiled-in model is not the embedded one's). */
int ctl_load_model_for_profile(const struct ctl_opts *o, const char *cmd,
                               struct ctl_model *cm);
void ctl_model_free(struct ctl_model *cm);

/* Set by ctl_catch_stop_signals()' handler on Ctrl-C or SIGTERM: long
 * runs (profile, train) stop cleanly when they see it. */
extern atomic_int ctl_stop_requested; /* raised by SIGINT/SIGTERM */
void ctl_catch_stop_signals(void);

/*
 * The placement of --plan (a --json plan file) for the tables, on
 * --devices devices, else the file's: into *p (initialised here, sorted)
 * and *ndev.  Returns 0 or an exit code, the message naming cmd.
 */
int ctl_read_placement(const struct ctl_opts *o, const char *cmd,
                       const struct table *tables, size_t n, struct plan *p,
                       int32_t *ndev);

/*
 * net's learned comm models for t's device count, when it has them, as
 * t->comm (ncm must outlive t's use; set t->batch_size first); else t
 * keeps the alpha-beta model.
 */
void ctl_attach_comm(const struct cost_net *net, struct topology *t,
                     struct net_comm_model *ncm);

/*
 * dreamshard's policy for compute model net: --policy FILE, else the one
 * compiled in for net (the embedded model's, the H200 model's), else the
 * embedded one (NULL when it is damaged; with another model plan_run()
 * says to train one).  *owned is what the caller frees.  Returns 0 or an
 * exit code, the message naming cmd.
 */
int ctl_load_policy(const struct ctl_opts *o, const char *cmd,
                    const struct cost_net *net, const struct policy_net **pn,
                    struct policy_net **owned);

/* ------------------------------------------------------------------------ */
/* The plan's picture (svg.c)                                                */

/*
 * A standalone SVG of p's per-device costs (compute, backward comm, the
 * wait for the slowest device, forward comm) and memory against topo's
 * capacities, the critical device outlined: a new string the caller
 * frees, or NULL when out of memory.
 */
char *svg_plan(const struct plan *p, const struct topology *topo);

/* Writes svg_plan() to o->svg when --svg was given (else nothing).
 * Returns 0 or an exit code (the message printed, naming cmd). */
int ctl_write_svg(const struct ctl_opts *o, const char *cmd,
                  const struct plan *p, const struct topology *topo);

/* ------------------------------------------------------------------------ */
/* Offline commands (offline.c) and measuring ones (measure.c)              */

/*
 * The tables of --tables as users describe them (shardd's form or
 * TorchRec's, --tables-format, else detected; task --task of a tasks
 * file), into *in (tables_input_destroy() it); cmd names the command in
 * messages.  Returns 0 or an exit code (the message printed).
 */
int ctl_read_tables(const struct ctl_opts *o, const char *cmd,
                    struct tables_input *in);

/* Each runs its command and returns shardctl's exit status. */
int offline_gen_tables(const struct ctl_opts *o);
int offline_gen_tasks(const struct ctl_opts *o);
int offline_plan(const struct ctl_opts *o);     /* plan --offline */
int offline_estimate(const struct ctl_opts *o); /* estimate --offline */
int offline_features(const struct ctl_opts *o);
int measure_profile(const struct ctl_opts *o);
int measure_train(const struct ctl_opts *o); /* fit.c */
int measure_score(const struct ctl_opts *o); /* fit.c */
int measure_eval(const struct ctl_opts *o);

struct kern_backend;
/* The backend --backend names (NULL: auto), or NULL with the message
 * printed (measure.c). */
const struct kern_backend *ctl_pick_backend(const char *name);
int comm_profile(const struct ctl_opts *o);      /* comm.c */
int import_model(const struct ctl_opts *o);      /* import-model (import.c) */
int import_comm_fit(const struct ctl_opts *o);   /* comm-fit (import.c) */
int train_policy_run(const struct ctl_opts *o);  /* train_policy.c */
int tiers_cache_curve(const struct ctl_opts *o); /* tiers.c */

/* ------------------------------------------------------------------------ */
/* Errors by table family (family.c)                                         */

struct store_sample;
struct store_model_metrics;

/*
 * Whether a sample of family label `label` (store_sample.family) is held
 * out by hold[] (family_parse_list(): a family's flag holds out every
 * sample with a table of that family; "mix" every sample of several
 * families).  Samples of no family are never held out.
 */
bool ctl_held_out(const char *label, const bool hold[FAMILY_MIX + 1]);

/* One row of the per-family table: a group (family_label_group()). */
struct ctl_family_row {
    int group;
    bool held_out; /* its samples were kept out of training */
    struct net_errors e;
};

/*
 * The errors of predictions pred[i] of the samples smp[i] (those with
 * pick[i], or all when pick is NULL) that key() puts in group g: *e and
 * their count *cnt (0: none, *e untouched).  scratch has room for 2 n
 * doubles.  Returns 0 or SD_ENOMEM (from net_errors()).
 */
int ctl_errors_where(const struct store_sample *smp, const double *pred,
                     size_t n, const bool *pick,
                     int (*key)(const struct store_sample *), int g,
                     double *scratch, struct net_errors *e, size_t *cnt);

/*
 * The errors of predictions pred[i] of samples smp[i] (those with pick[i],
 * or all when pick is NULL), one row per group that has any, in group
 * order, into rows (room for FAMILY_OTHER + 1) and *nrows.  Returns 0 or
 * SD_ENOMEM.
 */
int ctl_family_rows(const struct store_sample *smp, const double *pred,
                    size_t n, const bool *pick, bool held_out,
                    struct ctl_family_row *rows, size_t *nrows);

/* The table: family, split ("held out", else `split`), count, MAPE, p90,
 * signed median. */
void ctl_print_family_rows(FILE *out, const struct ctl_family_row *rows,
                           size_t n, const char *split);

/* The rows as a model's stored metrics (store.h). */
void ctl_family_metrics(const struct ctl_family_row *rows, size_t n,
                        struct store_model_metrics *mx);

/* ------------------------------------------------------------------------ */
/* Human-readable reports (format.c)                                         */

/*
 * Writes a plan as a table for people, in the spirit of TorchRec's planner
 * statistics: a header with the plan cost and the compute imbalance, then
 * per device its memory (and share of capacity), cost parts, shard count and
 * the tables it holds (column slices as name[from:to]).
 */
void format_plan_text(FILE *out, const struct plan *p,
                      const struct table *tables, size_t ntables,
                      const struct topology *t);
/* The same with the spread of an ensemble's predictions (sp NULL: none):
 * the plan cost's range in the header and a compute range per device. */
void format_plan_spread(FILE *out, const struct plan *p,
                        const struct table *tables, size_t ntables,
                        const struct topology *t, const struct plan_spread *sp);

/*
 * The plan's explanation: the slowest device and the shards driving it, the
 * lower bound and the gap, and what the search did (when it searched).
 * Figures a plan may lack (one that came from the daemon, whose API carries
 * less than the planner knows) are marked, and left out of the text: a
 * driver_ms that is negative, and stats.states < 0 (then only search_ms,
 * greedy_runs, splits and budget_exhausted are known).
 */
/* The count of tables per scheme, and TorchRec's table of the tables that
 * are not table-wise (the first 20). */
/* The memory tiers, when the topology has host DRAM or a table is off HBM:
 * HBM and DDR per device and per host (TorchRec's HBM GB (%), DDR GB (%)),
 * the modelled host-link time, and each table's kernel and load factor. */
void format_tiers(FILE *out, const struct plan *p, const struct table *tables,
                  const struct topology *t);
void format_schemes(FILE *out, const struct plan *p,
                    const struct table *tables);
void format_explain(FILE *out, const struct plan *p,
                    const struct table *tables);

/*
 * The notes of an input (nothing when there are none): "inputs:", then a
 * line per note, "KIND: message", at most 3 of each kind and field and a
 * count of the others (--json lists every note).
 */
void format_notes(FILE *out, const struct input_notes *notes);

/* ------------------------------------------------------------------------ */
/* Online mode (online.c)                                                    */

/*
 * Runs an online command (o->cmd: plan without --offline, estimate, status,
 * models, activate, retrain, job, profiler, health; its words checked by
 * ctl_opts_parse()) against the daemon at o->addr.  Returns the exit
 * status.
 */
int online_run(const struct ctl_opts *o);

/* ------------------------------------------------------------------------ */
/* Responses as JSON (rpc_json.c)                                            */

struct ProtobufCMessage;

/*
 * m as the JSON text of shardctl --json (no newline at the end): an object
 * of every field under its proto name, enums by name, repeated fields as
 * arrays, unset messages as null, two spaces of indent.  The caller free()s
 * it; NULL when out of memory.
 */
char *rpc_json_message(const struct ProtobufCMessage *m);

/* ------------------------------------------------------------------------ */
/* gRPC client (rpc.c)                                                       */

/*
 * gRPC status codes, numbered as on the wire (and as grpc_status_code; rpc.c
 * checks that at compile time), so that files without gRPC headers can name
 * them.
 */
enum rpc_code {
    RPC_OK = 0,
    RPC_CANCELLED = 1,
    RPC_UNKNOWN = 2,
    RPC_INVALID_ARGUMENT = 3,
    RPC_DEADLINE_EXCEEDED = 4,
    RPC_NOT_FOUND = 5,
    RPC_ALREADY_EXISTS = 6,
    RPC_PERMISSION_DENIED = 7,
    RPC_RESOURCE_EXHAUSTED = 8,
    RPC_FAILED_PRECONDITION = 9,
    RPC_ABORTED = 10,
    RPC_OUT_OF_RANGE = 11,
    RPC_UNIMPLEMENTED = 12,
    RPC_INTERNAL = 13,
    RPC_UNAVAILABLE = 14,
    RPC_DATA_LOSS = 15,
    RPC_UNAUTHENTICATED = 16,
};

/* "INVALID_ARGUMENT" for RPC_INVALID_ARGUMENT; "UNKNOWN" for others. */
const char *rpc_code_name(int code);

/*
 * shardctl's exit status for a call's status, decided here once: 0 for OK;
 * 2 (the user's input or credentials) for INVALID_ARGUMENT, NOT_FOUND,
 * FAILED_PRECONDITION, RESOURCE_EXHAUSTED (e.g. the tables do not fit),
 * UNAUTHENTICATED and PERMISSION_DENIED; 1 for everything else (the daemon
 * is unreachable, too slow, or broken).
 */
int rpc_exit_code(int code);

struct rpc_client; /* opaque: a channel to one daemon */

/*
 * Opens an insecure channel to addr ("unix:PATH" or "HOST:PORT"; borrowed,
 * copied) that accepts responses up to 64 MiB.  token (borrowed, copied; NULL
 * or "" for none) is sent with every call as "authorization: Bearer TOKEN".
 * Nothing is connected yet: an unreachable daemon shows at the first call.
 * *out is owned by the caller: rpc_client_close() it.  Returns 0, SD_EINVAL
 * (an empty address, or a token a header cannot carry; d says which) or
 * SD_ENOMEM.
 */
int rpc_client_open(const char *addr, const char *token,
                    struct rpc_client **out, struct sd_diag *d);

/* Closes the channel and releases gRPC.  NULL is fine. */
void rpc_client_close(struct rpc_client *c);

/*
 * One unary call of method ("/shardd.v1.Planner/Plan") with the packed
 * request req (len bytes, borrowed), waiting at most deadline_ms (<= 0: no
 * deadline).  On success returns 0 and sets *resp to a new buffer of
 * *resp_len bytes (the packed response; the caller free()s it; never NULL).
 * Otherwise *resp is untouched and it returns a negative SD_E* code with d
 * set to one line: the server's message, or for a daemon that cannot be
 * reached "cannot reach shardd at ADDR: is it running? (...)".  *status
 * always receives the call's gRPC status (enum rpc_code; a local failure
 * such as SD_ENOMEM gives RPC_UNKNOWN), for rpc_exit_code().
 */
int rpc_client_call(struct rpc_client *c, const char *method,
                    const uint8_t *req, size_t len, int64_t deadline_ms,
                    uint8_t **resp, size_t *resp_len, int *status,
                    struct sd_diag *d);

/*
 * Receives one message of a stream: msg (len bytes) is borrowed for the
 * call only.  Returning non-zero (a negative SD_E* code) stops the stream:
 * the call is cancelled and rpc_client_stream() returns that value with
 * status RPC_CANCELLED and d untouched (fn's context says why).
 */
typedef int (*rpc_stream_fn)(void *ctx, const uint8_t *msg, size_t len);

/*
 * One server-streaming call ("/shardd.v1.Admin/WatchJob"): sends req, then
 * calls fn for every message until the server ends the stream.  Returns 0
 * when it ended with status OK; otherwise as rpc_client_call().  fn is never
 * called after this function returned.
 */
int rpc_client_stream(struct rpc_client *c, const char *method,
                      const uint8_t *req, size_t len, int64_t deadline_ms,
                      rpc_stream_fn fn, void *ctx, int *status,
                      struct sd_diag *d);

#endif /* SHARDD_CLIENT_H */
