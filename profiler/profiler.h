/*
 * The profiler: ground-truth costs.  It measures shards and whole plans on
 * a device backend (kernels/) and fills the store (store/) with compute-cost
 * samples of random shards (neuroshard.md 2.2).  Used in-process by
 * `shardctl profile` and `shardctl eval`, and by the daemon's profiler
 * worker.  Synchronous: call from one thread; it blocks on the device and on
 * SQLite.  Functions return 0 or a negative SD_E* code with one line of
 * detail in the struct sd_diag.
 */
#ifndef SHARDD_PROFILER_H
#define SHARDD_PROFILER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "planner.h"
#include "store.h"

/* One table (or column slice) of a shard to measure: its lookups and the
 * columns the device holds.  The trace is borrowed. */
struct prof_item {
    const struct trace *trace;
    int32_t cols;
    /* The table's weight type; timed as prof_timed_dtype() says (zero:
     * fp32). */
    enum table_dtype dtype;
    /* Where its weights live, and the cache's load factor (rows held in
     * device memory: ceil(f x the trace's rows)); timed as
     * prof_timed_tier() says (zero: HBM). */
    enum table_tier tier;
    float cache_load_factor;
};

/*
 * The type backend be's kernels time a table of dtype dt in: fp16 and bf16
 * as themselves where be times them, anything else (int8, or a type be
 * cannot time) in fp32.  A sample records this, what was measured, as its
 * table's dtype.
 */
enum table_dtype prof_timed_dtype(const struct kern_backend *be,
                                  enum table_dtype dt);

/*
 * The tier backend be's kernels time a table of tier `tier` in: itself
 * where be times it (kern_backend.tiers: the cuda backend times all three),
 * else HBM, its host-link time then left to the planner's model
 * (tier_shard_ms()).
 */
enum table_tier prof_timed_tier(const struct kern_backend *be,
                                enum table_tier tier);

/* The tiers off HBM be times, bit 1 << enum table_tier each: what
 * plan_evaluate_tiers() takes. */
uint32_t prof_timed_tiers(const struct kern_backend *be);

/*
 * Times forward + backward + SGD of the fused op over all items on one
 * device of a backend.  All traces must have the same number of bags (the
 * batch).  An empty shard (n == 0) costs 0 ms, as in NeuroShard.
 */
int prof_measure_shard(const struct kern_backend *be, int32_t device,
                       const struct prof_item *items, size_t n,
                       const struct kern_timing_opts *o,
                       struct kern_timing *out, struct sd_diag *d);

/* The same with the backend's weight arena capped at arena_max_bytes (0:
 * no cap): a shard whose weights need more is SD_ENOMEM. */
int prof_measure_shard_capped(const struct kern_backend *be, int32_t device,
                              const struct prof_item *items, size_t n,
                              const struct kern_timing_opts *o,
                              uint64_t arena_max_bytes, struct kern_timing *out,
                              struct sd_diag *d);

/*
 * What measuring a shard holds in memory at `batch` bags: its weights, and
 * its lookups (the caller's trace and the backend's copy of it: indices and
 * offsets, twice) with the pooled output and its gradient.  Traces made by
 * trace_from_table() hold about batch x pooling factor indices per table.
 */
struct prof_footprint {
    uint64_t weight_bytes;
    uint64_t lookup_bytes;
};

/* The footprint of tables (each at its own dim) at `batch`. */
void prof_footprint(const struct table *tables, size_t n, int64_t batch,
                    struct prof_footprint *out);

/*
 * Whether a footprint fits a memory budget of `budget` bytes: weights
 * within half of it, lookups and buffers within the other half, so that a
 * weight arena kept between shards (at most half) plus the next shard's
 * lookups never exceed the budget.  A budget of 0 fits everything.
 */
bool prof_fits(const struct prof_footprint *f, uint64_t budget);

/*
 * The name of a hardware profile: "<backend>/<device model>/<batch>", e.g.
 * "cpu/AMD EPYC 7B13/4096".  A model answers only for its own profile.
 */
int prof_profile_name(const struct kern_backend *be, int32_t device,
                      int64_t batch_size, char *buf, size_t cap,
                      struct sd_diag *d);

/* Progress callback: samples in the profile now out of target, how many
 * this run added, seconds elapsed. */
typedef void (*prof_progress_cb)(void *ctx, uint64_t done, uint64_t target,
                                 uint64_t added, double elapsed_s);

/* The most tables a profiled shard may have (shape.max_tables). */
#define PROF_SHARD_TABLES 64
/* The most devices of the plans profile --plan-devices shapes shards by. */
#define PROF_PLAN_DEVICES 64

struct prof_run_params {
    const struct kern_backend *be;
    int32_t device;
    int64_t batch_size; /* bags per measured step */
    uint64_t seed;      /* pool and shards; same seed, same shards */
    /*
     * The table families of the pool (formats.h): FAMILY_MIX (the default)
     * holds every family in turn, and a shard's tables come from one family
     * (3 shards in 4) or from all of them (PROF_P_MIXED); FAMILY_DLRM is
     * synth.c's tables alone, drawn as before families existed (the same
     * shards for a seed).  Each sample records its families.
     */
    int family;
    size_t pool_tables;      /* tables drawn from, default 1,792 (256 a family;
                                856 for dlrm alone) */
    uint64_t target_samples; /* total wanted in the profile */
    double max_seconds;      /* stop after this long; 0 = no limit */
    size_t commit_every;     /* samples per transaction, default 8 */
    struct sample_params shape; /* max_tables at most PROF_SHARD_TABLES */
    struct kern_timing_opts timing;
    /*
     * The share of samples whose tables are row blocks (PROF_P_ROWS for the
     * families, 0 for dlrm alone): each table of such a shard is cut to one
     * block of 1/k of its rows (k = 2 .. 64, TorchRec's row-wise geometry)
     * with the lookups of the table's trace that fall in it
     * (trace_row_block()), so the features are the block's own.  Drawn
     * from a stream of its own: the shards drawn stay those of the seed.
     * Such samples have source "row-blocks".
     */
    double p_rows;
    /* Set (e.g. by a signal handler) to stop after the current sample;
     * what was measured is committed.  May be NULL. */
    const kern_flag *stop;
    prof_progress_cb progress; /* may be NULL */
    void *progress_ctx;
    /* The table pool shards are drawn from, made by prof_make_pool() with
     * these same params (borrowed); NULL: prof_run() makes it each call
     * (about a second of CPU for 856 tables). */
    const struct table *pool;
    /* Memory budget of one measurement (prof_fits()); 0: none beyond
     * shape.max_bytes.  A drawn shard over it is drawn again (deterministic
     * for the seed and the budget), and the backend's weight arena is
     * capped at half of it. */
    uint64_t max_footprint_bytes;
    /* 0: random shards (shape).  N (1 .. PROF_PLAN_DEVICES): shards shaped
     * like the devices of plans of random tasks on N devices of 4 GiB
     * (shape.max_tables does not apply). */
    int32_t plan_devices;
    /*
     * With plan_devices: the algorithm the plans are made by (enum
     * plan_alg), or PROF_PLAN_GREEDY (the default): a greedy baseline drawn
     * per sample, whole tables only.  Any other may cut tables; a device's
     * pieces are measured as `shardctl eval` measures them: a column slice
     * at its width on the table's lookups, a row block on the lookups of
     * the table's trace that fall in its rows (no random row-block cut on
     * top: p_rows does not apply), a data-parallel replica on lookups made
     * from its features (its local batch: the pooling factor over N,
     * shard_table()).  A device holding a shard off HBM is not drawn.
     * neuroshard plans with plan_net (borrowed; required for it) on the
     * tables' features made from their traces once per run (seconds for
     * the pool); dreamshard is refused.  A sample with a row block has
     * source PROF_SOURCE_ROWS, else one with a replica PROF_SOURCE_REPLICAS.
     */
    int plan_alg;
#define PROF_PLAN_GREEDY (-1)
    const struct cost_net *plan_net;
    /*
     * The quiet check (struct prof_quiet below): a sample whose probes,
     * timed just before and just after it, both ran more than
     * quiet_tolerance slower than the device's quiet time is measured
     * again; 0 turns the check off.  Default PROF_QUIET_TOLERANCE.
     * quiet_wait_s bounds the retries of one sample (default
     * PROF_QUIET_WAIT_S): after that long the device is taken to be that
     * slow now and the sample is kept.
     */
    double quiet_tolerance;
    double quiet_wait_s;
    /* The probe and its quiet time, kept by a caller that runs prof_run()
     * repeatedly (the daemon), so the quiet time outlives a run; NULL:
     * prof_run() opens one for the run. */
    struct prof_quiet *quiet;
    /* Called before a contended sample is measured again, with the probe's
     * time over its quiet time (e.g. 1.4); may be NULL.  progress_ctx. */
    void (*busy)(void *ctx, double slowdown);
};

/* Defaults of the quiet check: 10 % (about three times a quiet probe's own
 * spread here), and half an hour's retries for one sample: a build or a
 * test run beside the profiler lasts minutes, and a shorter bound took the
 * build's speed for the device's (measured: docs/models.md). */
#define PROF_QUIET_TOLERANCE 0.10
#define PROF_QUIET_WAIT_S    1800.0

/*
 * The quiet check.  Labels measured while another process shares the device
 * (a build on the other core of a 2-CPU VM, a second job on a GPU) are slower
 * than the device is, by 5 to 70 % here (docs/models.md, "Quiet samples"),
 * and a cost model trained on them learns the neighbour's load.  The probe is
 * a fixed shard of two tables, one beyond the last-level cache and one
 * inside it, timed (1 warm-up, 5 steps, the median) before and after each
 * sample; its quiet time is the median of the last 32 probe times of kept
 * samples (the first: of 5 timings at open).  A sample whose faster probe is
 * slower than (1 + tolerance) x the quiet time is dropped and measured again
 * after a short pause, so every kept sample was measured between probes of
 * which at least one was quiet.  The median, not the fastest probe: on a
 * host whose probe moves by 10 to 20 % when nothing runs beside it (an
 * Intel Xeon VM with a 260 MiB L3), the fastest moment's time rejected most
 * samples; and only quiet probes enter it, so a sustained load is not
 * taken for the quiet time before quiet_wait_s.
 */
struct prof_quiet;

/* Opens a probe on `device` of `be` (its weights and lookups: about 70 MB)
 * and times it five times for a first quiet time.  *out is owned by the
 * caller (prof_quiet_close()).  Returns 0, SD_ECANCELED (timing->abort),
 * SD_ENOMEM or the backend's error, with d set. */
int prof_quiet_open(const struct kern_backend *be, int32_t device,
                    const struct kern_timing_opts *timing,
                    struct prof_quiet **out, struct sd_diag *d);
void prof_quiet_close(struct prof_quiet *q);

/*
 * The table pool of a run: the shapes of pool_tables tables of `family` and
 * `seed` (family_shapes(): rows, dim, dtype, expected pooling factor; no
 * lookups, so it takes microseconds a table).  A measured sample's tables
 * get their features from the very lookups that are timed.  *out is owned
 * by the caller (free()).  For callers that run prof_run() repeatedly (the
 * daemon's profiler).
 */
int prof_make_pool(const struct prof_run_params *p, struct table **out);

/* Defaults: device 0, batch 4096, seed 0, a mix of every family of 256
 * tables each, 8 per commit, shards of 1..15 tables within half the
 * device's memory, timing defaults. */
void prof_run_params_default(struct prof_run_params *p);

/*
 * prof_run_params_default() for one family (or FAMILY_MIX): the family and
 * its default pool size.
 */
void prof_run_params_family(struct prof_run_params *p, int family);

/* The default share of row-block samples of a family pool (p_rows). */
#define PROF_P_ROWS 0.25
/* The source of a sample of row blocks (store_sample.source). */
#define PROF_SOURCE_ROWS "row-blocks"
/* ... and of a plan's device with a data-parallel replica (and no row
 * block). */
#define PROF_SOURCE_REPLICAS "replicas"

/* A shard of a mixed pool is drawn from all the families this often. */
#define PROF_P_MIXED 0.25
/*
 * The most pooled columns a family shard may look up per bag (the sum of
 * pooling factor x width over its tables): a shard of long sequences at
 * full width would take seconds a step to time.  DLRM shards are drawn as
 * before, without it.
 */
#define PROF_MAX_WORK 16384.0

/*
 * The family label of a shard of pool tables idx[0 .. k) (store_sample's
 * family: the families present, in their order, joined by '+') into out.
 */
void prof_family_label(int pool_family, const size_t *idx, size_t k, char *out,
                       size_t cap);

struct prof_run_result {
    char profile[STORE_NAME_MAX];
    int64_t profile_id;
    uint64_t existing;   /* samples the profile had before */
    uint64_t added;      /* committed by this run */
    bool interrupted;    /* stopped by *stop, timing.abort (the sample being
                            timed is dropped) or max_seconds */
    uint64_t remeasured; /* samples dropped by the quiet check and measured
                            again */
    uint64_t kept_busy;  /* samples kept after quiet_wait_s of retries */
    double max_slowdown; /* the slowest probe beside a sample, over the
                            quiet time (0 with the check off) */
};

/*
 * Collects compute-cost samples into the store until the profile holds
 * target_samples.  Resumable: sample i of a profile is always the same
 * shard (drawn from rng_derive(seed, i)), so a run that stopped continues
 * where it left off.  Samples are committed every commit_every, so a kill
 * loses at most that many.  *res is filled on success and on failure (what
 * was committed stays committed).
 */
int prof_run(struct store *st, const struct prof_run_params *p,
             struct prof_run_result *res, struct sd_diag *d);

/*
 * Measures a plan: each device's shard is timed in turn on one device of
 * the backend (devices of the plan beyond the backend's are timed on
 * device 0), the communication is modelled with the alpha-beta model, and
 * p->devices / p->cost_ms are filled as plan_evaluate() does, with
 * cost_model "measured:<backend>".  Lookups of table i are traces[i]
 * (borrowed; each of the topology's batch in bags) where the caller has
 * the tables' own lookups; with traces NULL they are rebuilt from the
 * table's features by trace_from_table() with the topology's batch, seeded
 * per table by `seed`.  A rebuilt trace has the table's features, not its
 * lookups' order or bag lengths: a one-hot table's rebuilt lookups took
 * 1.04-1.84x the time of its own (docs/models.md, "Measured on the
 * tables' own lookups").  A row block of a table whose lookups are given
 * is timed on those of them that fall in its rows (trace_row_block(), as
 * the profiler times a block); a data-parallel replica on lookups made from
 * its features (the table at 1/n of the lookups, shard_table()).
 * Shards off HBM are timed in their tier where the backend times it
 * (prof_timed_tiers(): plan_evaluate_tiers(), the cost model then ending
 * in "+ host-link misses (measured)"); elsewhere (the cpu backend) they are
 * timed in HBM and their modelled host-link time is added, as the planner
 * costs it ("+ host-link misses (modelled)").
 * timings, when not NULL, receives one struct kern_timing per plan device.
 */
int prof_eval_plan(const struct kern_backend *be, struct plan *p,
                   const struct table *tables, size_t ntables,
                   const struct trace *traces, const struct topology *t,
                   enum optimizer opt, const struct kern_timing_opts *o,
                   uint64_t seed, struct kern_timing *timings,
                   struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* Communication samples (comm.c)                                            */

#define PROF_COMM_MAX_TABLES 256

struct prof_comm_params {
    const struct kern_backend *be;
    int32_t ndevices;     /* ranks: devices 0 .. ndevices - 1 (>= 1) */
    int64_t batch_size;   /* the exchange's batch, default 65536 */
    uint64_t seed;        /* the plans; same seed, same plans */
    uint64_t first_index; /* the first plan of the sequence to measure */
    uint64_t samples;     /* plans to measure, default 100 */
    double max_seconds;   /* stop after this long; 0: no limit */
    int warmup, repeats;  /* per exchange: 5 and 10 */
    int32_t min_tables, max_tables; /* T in [min, max): 10, 60 */
    int32_t max_sleep_ms;           /* sleep_diff in [1, max): 20 */
    /* Set (e.g. by a signal handler) to stop before the next iteration;
     * what was stored stays.  May be NULL. */
    const kern_flag *stop;
    /* Called after every measured plan with its sample (i: its index in
     * this run; the sample and its devices are borrowed).  May be NULL. */
    void (*on_sample)(void *ctx, uint64_t i, const struct store_sample *s);
    void *ctx;
};

void prof_comm_params_default(struct prof_comm_params *p);

/*
 * Plan i of p->seed (neuroshard.md 2.3): dim_sum and sleep_ms, ndevices
 * entries each.  Deterministic.
 */
void prof_comm_draw(const struct prof_comm_params *p, uint64_t i,
                    int32_t *dim_sum, double *sleep_ms);

struct prof_comm_result {
    char profile[STORE_NAME_MAX]; /* "<backend>/<device 0 model>/<batch>" */
    int64_t profile_id;           /* 0 when no store */
    uint64_t measured;            /* plans timed */
    uint64_t stored;              /* samples added to the store */
    bool interrupted;             /* *stop, or max_seconds */
};

/*
 * Times p->samples plans (forward all-to-all behind each device's sleep,
 * then backward) with a communicator over p->ndevices devices of p->be,
 * and adds each as a STORE_KIND_COMM sample to st (NULL: measure only):
 * per device dim_sum, sleep_ms and the median forward and backward ms;
 * measured_ms = max forward + max backward, spread_ms the widest p90 -
 * p10 of a device.  The store keeps exchanges of 2 or more devices: with
 * one device the plans are timed (a 1-rank exchange is a local copy, but
 * the whole path runs) and reported through on_sample, not stored.
 * Returns 0 (res->interrupted when stopped), SD_EINVAL,
 * SD_EUNSUPPORTED (no collectives, too few devices), SD_ENOMEM,
 * SD_EDEVICE or a store error; res is filled on success and failure.
 */
int prof_comm_run(struct store *st, const struct prof_comm_params *p,
                  struct prof_comm_result *res, struct sd_diag *d);

/*
 * One collective of `bytes` per rank (what each rank sends, nccl-tests'
 * size; all-to-all in equal blocks) over `ndevices` devices of be, the
 * last rank starting skew_ms late (0: together); per_rank (ndevices)
 * receives each rank's timing.  Returns kern_comm_open()'s and
 * kern_comm_time()'s codes.
 */
int prof_coll_sweep(const struct kern_backend *be, int32_t ndevices,
                    enum kern_coll_op op, uint64_t bytes, double skew_ms,
                    int warmup, int repeats, struct kern_timing *per_rank,
                    struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* The cost model on a device (device_model.c)                               */

/*
 * Uploads m's parameters to device `device` of be (kern_net_open()): the
 * model resident in that device's memory until kern_net_close().  m is
 * borrowed for the call.  Returns 0, SD_EUNSUPPORTED (a model without
 * format 1's softplus output: the kernels apply it) or kern_net_open()'s
 * codes.
 */
int prof_net_upload(const struct kern_backend *be, int32_t device,
                    const struct cost_net *m, struct kern_net **out,
                    struct sd_diag *d);

/*
 * Scores n shards, each given as whole tables at their own dims (the form
 * of a sample), in one batch on the net's device: ms[i] is sample i's
 * predicted ms at m's batch, what net_tables_ms(m, ...) gives (to the last
 * bit on the cpu backend, within fp32 rounding on cuda).  net must have
 * been uploaded from m (m gives the inputs' normalisation).  Returns 0,
 * SD_EINVAL, SD_ENOMEM or SD_EDEVICE.
 */
int prof_net_score_tables(struct kern_net *net, const struct cost_net *m,
                          const struct train_sample *s, size_t n, double *ms,
                          struct sd_diag *d);

/*
 * Training's matrix products on a device: hook is what train_params.gemm
 * takes (valid while the struct lives and is not moved); diag holds the
 * last failed product's detail.  One thread at a time.
 */
struct prof_gemm {
    struct net_gemm hook;
    struct kern_blas *blas;
    struct sd_diag diag;
    char name[64];
};

/* Opens a device's sgemm (kern_blas_open()) behind the hook.  Returns 0 or
 * kern_blas_open()'s codes; *out is then prof_gemm_close()d. */
int prof_gemm_open(const struct kern_backend *be, int32_t device,
                   struct prof_gemm *out, struct sd_diag *d);
void prof_gemm_close(struct prof_gemm *g);

#endif /* SHARDD_PROFILER_H */
