/*
 * Device backends: where a shard's cost is measured.  One vtable, two
 * implementations: `cpu` (always built; a device is one pinned core) and
 * `cuda` (built when nvcc exists; a device is one GPU).  The op is the fused
 * table-batched embedding bag of one device's shard: forward (sum pooling
 * per bag), backward (pooled-output gradients scattered to the rows) and an
 * exact SGD update over every table of the shard in one pass.  Each table's
 * weights are stored in its dtype (fp32, fp16 or bf16, as TorchRec's TBE
 * keeps them); pooling and the SGD update are computed in fp32, and an
 * updated row is rounded back to its dtype (to nearest, ties to even), so
 * a shard of half-precision tables moves half the weight bytes.  A table
 * may live in host memory instead of the device's (enum kern_tier: UVM,
 * or UVM with a cache of its hottest rows in device memory), where a
 * backend can time that; the cpu backend times device memory only.
 * Beside it: the compute cost model resident on a device and scored in
 * batches, sgemm for training it, collectives timed across devices, and
 * the idle gate's readings (docs/gpu.md); each has a cpu implementation
 * that is its specification.
 *
 * Synchronous and loop-agnostic: call from worker threads.  Only
 * kernels/cuda/ includes CUDA headers; nothing here exposes CUDA types.
 * Functions return 0 or a negative SD_E* code (a device failure is
 * SD_EDEVICE, an allocation failure SD_ENOMEM); a struct sd_diag, where
 * given, receives one line of detail.
 */
#ifndef SHARDD_KERNELS_H
#define SHARDD_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shardd/err.h"

/*
 * A stop flag: raised by another thread or a signal handler, polled by a
 * timing between steps.  A lock-free atomic int in C (safe from both); the
 * cuda kernels' C++ translation units include this header too but never
 * touch a flag, and see an int of the same size.
 */
#ifdef __cplusplus
typedef int kern_flag;
#else
#    include <stdatomic.h>
typedef atomic_int kern_flag;
#endif

#define KERN_NAME_MAX 64

/* One device a backend can time shards on. */
struct kern_device_info {
    char name[KERN_NAME_MAX];  /* "cpu core 3", "NVIDIA H100 80GB HBM3" */
    char model[KERN_NAME_MAX]; /* what a profile is named after: the CPU
                                * model ("AMD EPYC 7B13") or the GPU name */
    uint64_t mem_bytes;        /* memory a shard may use */
    int32_t index;             /* backend-local device index */
};

/* How a table's weights are stored.  Zero is fp32: a zero-initialised
 * table description, as every caller from before dtypes makes, is fp32. */
enum kern_dtype {
    KERN_DTYPE_FP32 = 0,
    KERN_DTYPE_FP16, /* IEEE binary16: 5 exponent bits, 10 mantissa bits */
    KERN_DTYPE_BF16, /* the upper 16 bits of an fp32: 8 and 7 */
    KERN_DTYPE_COUNT
};

/* "fp32", "fp16", "bf16" ("?" for another value). */
const char *kern_dtype_name(enum kern_dtype dtype);

/* Bytes of one weight of dtype: 4, 2, 2 (0 for another value). */
size_t kern_dtype_size(enum kern_dtype dtype);

/*
 * Where a table's weights live while it is timed (TorchRec's compute
 * kernels; docs/api.md, "Memory tiers").  Zero is device memory: a
 * zero-initialised table description, as every caller from before tiers
 * makes, is in HBM.
 */
enum kern_tier {
    KERN_TIER_HBM = 0,     /* device memory ("fused") */
    KERN_TIER_UVM,         /* host memory the device reads and writes over its
                            * link ("fused_uvm") */
    KERN_TIER_UVM_CACHING, /* host memory, with cache_rows of its rows in
                            * device memory ("fused_uvm_caching") */
    KERN_TIER_COUNT
};

/* TorchRec's kernel names: "fused", "fused_uvm", "fused_uvm_caching" ("?"
 * for another value). */
const char *kern_tier_name(enum kern_tier tier);

/*
 * One table of a shard: its geometry and one batch of lookups (CSR: bag b
 * of the batch reads indices[offsets[b] .. offsets[b+1])).  Every table of
 * a shard has the same number of bags (the batch size).  The arrays are
 * borrowed for the duration of kern_shard_open(); the backend copies what
 * it needs.
 */
struct kern_table_desc {
    int64_t rows;
    int32_t dim; /* columns of this shard's slice */
    int64_t nindices;
    const int64_t *offsets; /* nbags + 1 entries */
    const int64_t *indices; /* nindices entries in [0, rows) */
    /* The weights are stored in this type and the shard's footprint counts
     * its size; pooling and the SGD update are computed in fp32, and each
     * updated row is rounded back to it (to nearest, ties to even; NaN stays
     * NaN).  shard_read_weights returns them converted to fp32.  The cuda
     * backend takes fp32 only (SD_EUNSUPPORTED otherwise). */
    enum kern_dtype dtype;
    /* Where the weights live.  A backend times the tiers in its `tiers`
     * mask and refuses a table in another with SD_EUNSUPPORTED naming it
     * (the cpu backend times HBM only: there the host tiers are modelled,
     * planner/problem/tiers.c).  SGD keeps no optimizer state, so the
     * weights are all a tier holds. */
    enum kern_tier tier;
    /* KERN_TIER_UVM_CACHING: rows held in device memory, in [0, rows]; the
     * rest are read from host memory (kern_cache_layout() says which).  0
     * for the other tiers. */
    int64_t cache_rows;
};

/*
 * The cache of a KERN_TIER_UVM_CACHING table t over its batch, as an ideal
 * LFU whose contents do not change during the step (the assumptions of the
 * planner's miss-rate curve, tier_miss_rate()): the rows the batch reads
 * more than once fill it first, most-read first (ties: the lower row);
 * the room left holds the other rows in order from row 0, which the
 * batch's single reads hit only by chance (traces made from features
 * spread their rows over the table by a random affine map).  FBGEMM's
 * cache also admits missed rows, evicting others, which this does not:
 * every miss reads host memory directly.
 * cached (t->cache_rows entries, may be NULL) receives the cached rows,
 * slot s holding row cached[s]; loc (t->nindices entries, may be NULL)
 * each lookup's slot, or -1 where it misses; *nmiss (may be NULL) the
 * lookups that miss.  t must have passed shard_open's checks.  Returns 0
 * or SD_ENOMEM.  Pure; any thread.
 */
int kern_cache_layout(const struct kern_table_desc *t, int64_t *cached,
                      int64_t *loc, int64_t *nmiss);

struct kern_shard_desc {
    size_t ntables;
    const struct kern_table_desc *tables;
    int64_t nbags;       /* batch size */
    float learning_rate; /* SGD step */
    uint64_t seed;       /* initial weights, uniform in [-0.01, 0.01) and
                          * rounded to each table's dtype */
    /*
     * Profiling: take the weights from the device's arena instead of a
     * fresh allocation.  The arena is allocated and filled once per device
     * and process, grows when a shard needs more, and is reused by every
     * later shard, so a multi-gigabyte table is not re-faulted per sample;
     * its values are then not `seed`'s, and tables of every dtype read the
     * same bytes (the cpu arena is filled so that they are finite and
     * normal in each, and rows that a shard of another dtype updated are
     * filled again before a shard reads them).
     * One arena shard per device at a time (SD_EBUSY otherwise).  Parity tests
     * leave this false.  The cuda backend does not have an arena yet and
     * allocates per shard (a cudaMalloc and an on-device fill, milliseconds
     * even for gigabytes).
     */
    bool reuse_weights;
    /* reuse_weights: the arena never grows past this many bytes, so what
     * the device keeps between shards stays within a caller's budget; a
     * shard whose weights need more is refused (SD_ENOMEM).  0: no limit
     * beyond the device's memory. */
    uint64_t arena_max_bytes;
};

/* How to time a step. */
struct kern_timing_opts {
    int warmup;  /* untimed steps first (default 5) */
    int repeats; /* timed steps (default 10) */
    bool flush;  /* flush the device cache before every timed step */
    /* When not NULL and set (by another thread or a signal handler), the
     * timing stops before its next step and returns SD_ECANCELED: how the
     * daemon's profiler steps aside for a request within one step.  Default
     * NULL. */
    const kern_flag *abort;
};

/* Result of timing: median and spread of the timed steps, in ms. */
struct kern_timing {
    double median_ms;
    double min_ms;
    double max_ms;
    double p10_ms;
    double p90_ms;
    int repeats;
};

struct kern_shard; /* opaque: a shard's weights and inputs on a device */

/* ------------------------------------------------------------------------ */
/* Dense math on a device: the compute cost model resident, and sgemm        */

/*
 * The shape of a compute cost net (planner/models/models.h; neuroshard.md
 * 5.1): every table of a shard goes through in -> h1 -> lat (ReLU after
 * both), the latents are summed over the shard, and a head lat -> h2 -> 1
 * (ReLU between) gives the raw cost, whose softplus log(1 + e^x) is the
 * shard's ms; with head KERN_NET_HEAD_PRIOR (a physical-prior model,
 * models.h NET_ACT_PRIOR) the ms are squareplus(raw) = (raw + sqrt(raw^2 +
 * 4)) / 2 times z[h2 - 1] + z[h2 - 2] x z[h2 - 3], the last three head
 * units before their ReLU (the shard's physical ms).  Parameters are one float
 * array, row-major [out][in] per layer, in the order W1 b1 W2 b2 W3 b3 W4 b4
 * (kern_net_nparams() floats): the planner's cost_net.p as it is.  kernels/
 * never sees the planner's types; profiler/ bridges the two.
 */
enum kern_net_head {
    KERN_NET_HEAD_SOFTPLUS = 0,
    KERN_NET_HEAD_PRIOR = 1, /* needs h2 >= 3 */
};

struct kern_net_dims {
    int32_t in, h1, lat, h2; /* each in [1, KERN_NET_DIM_MAX] */
    int32_t head;            /* enum kern_net_head */
};
#define KERN_NET_DIM_MAX 1024

/* Floats in the parameter array of dims (0 for a dimension out of range). */
size_t kern_net_nparams(const struct kern_net_dims *dims);

struct kern_net;  /* opaque: a model's parameters resident on a device */
struct kern_blas; /* opaque: a device's matrix products (one thread) */

/* ------------------------------------------------------------------------ */
/* Collectives over devices (kernels/comm.c drives them)                     */

enum kern_coll_op {
    KERN_COLL_ALLTOALL = 0,
    KERN_COLL_REDUCE_SCATTER,
    KERN_COLL_ALL_GATHER,
    KERN_COLL_ALL_REDUCE,
    KERN_COLL_COUNT
};

/* "all-to-all", "reduce-scatter", "all-gather", "all-reduce" ("?"). */
const char *kern_coll_name(enum kern_coll_op op);

/* One collective to time over the n ranks of a struct kern_comm. */
struct kern_coll_desc {
    enum kern_coll_op op;
    /* ALLTOALL: n x n floats, [src][dst]: rank src sends a2a_counts[src * n
     * + dst] floats to rank dst (itself included).  NeuroShard's forward
     * exchange of pooled columns (neuroshard.md 4) is counts[r][j] = batch /
     * n * dim_sum[r], its backward counts[r][j] = batch / n * dim_sum[j]. */
    const uint64_t *a2a_counts;
    /* The others: floats of each rank's part: all-reduce's whole buffer,
     * reduce-scatter's output block, all-gather's input block. */
    uint64_t count;
    /* n entries or NULL: after a common start, rank r sleeps sleep_ms[r] on
     * the host before its part, so the others wait for the slowest, as the
     * forward exchange does behind unequal compute (neuroshard.md 2.3).
     * A rank's time is from the end of its sleep to the end of its part. */
    const double *sleep_ms;
    int warmup;  /* untimed iterations first (>= 0) */
    int repeats; /* timed iterations (>= 1) */
    /* Set (by another thread or a signal handler) to stop before the next
     * iteration with SD_ECANCELED.  May be NULL. */
    const kern_flag *abort;
};

struct kern_comm; /* opaque: a communicator over devices 0 .. n-1 */

/* ------------------------------------------------------------------------ */
/* How busy a device is: the profiler's idle gate                            */

/* Readings of one device, as far as its backend can tell. */
struct kern_device_load {
    double util_pct;         /* busy time over the driver's last sample
                              * period, 0 to 100 */
    uint64_t mem_used_bytes; /* by every process */
    uint64_t mem_total_bytes;
    uint64_t own_mem_bytes;   /* this process's, as the driver reports it,
                               * else an estimate (own_seen false) */
    bool own_seen;            /* this process was in the driver's list */
    int32_t other_procs;      /* compute processes other than this one;
                               * -1: the driver would not say */
    uint32_t other_pid;       /* the first of them (0: none) */
    uint64_t other_mem_bytes; /* their memory, where reported */
    int64_t own_idle_ms;      /* since this process last used the device
                               * (INT64_MAX: never) */
};

/*
 * The idle gate's thresholds: a device is busy when another compute
 * process is on it, when others use more than max_mem_frac of its memory,
 * or when it was more than max_util_pct busy over the driver's last sample
 * period while this process had left it idle for at least min_own_idle_ms
 * (so the profiler's own kernels do not count; NVML samples over 1/6 to
 * 1 s).
 */
struct kern_busy_limits {
    double max_util_pct;     /* default 10 */
    double max_mem_frac;     /* default 0.10 */
    int64_t min_own_idle_ms; /* default 2000 */
};
void kern_busy_limits_default(struct kern_busy_limits *l);

/*
 * The decision on readings: true with one line in why (cap bytes; may be
 * NULL) saying what is busy.  Pure; what kern_device_busy() applies.
 */
bool kern_busy_decide(const struct kern_device_load *l,
                      const struct kern_busy_limits *lim, char *why,
                      size_t cap);

/*
 * The backend vtable.  `name` is "cpu" or "cuda".  All functions but
 * device_count may assume a valid device index.
 */
struct kern_backend {
    const char *name;
    /* The weight types its kernels time, bit 1 << enum kern_dtype each
     * (fp32 always): a shard with another is refused SD_EUNSUPPORTED. */
    uint32_t dtypes;
    /* The memory tiers its kernels time, bit 1 << enum kern_tier each (HBM
     * always): a shard with a table in another is refused SD_EUNSUPPORTED
     * naming the table. */
    uint32_t tiers;
    /* Devices usable now (0 when, e.g., no GPU or no driver). */
    int (*device_count)(void);
    int (*device_info)(int32_t device, struct kern_device_info *out);
    /* Allocates weights (seeded) and copies inputs onto the device.  *out
     * owned by the caller, released with shard_close.  SD_ENOMEM when the
     * shard does not fit, SD_EINVAL for a bad description, SD_EUNSUPPORTED
     * for a dtype or tier outside dtypes and tiers. */
    int (*shard_open)(int32_t device, const struct kern_shard_desc *desc,
                      struct kern_shard **out, struct sd_diag *d);
    void (*shard_close)(struct kern_shard *s);
    /* One untimed step, for parity tests: writes the pooled forward output
     * (nbags x sum of dims, row-major, tables side by side) to pooled (may
     * be NULL), then applies backward with the given pooled-output gradient
     * (same shape) and the SGD update. */
    int (*shard_step)(struct kern_shard *s, float *pooled,
                      const float *grad_pooled);
    /* Copies table t's current weights (rows x dim) to out, converted to
     * fp32 from the table's dtype (exactly: every fp16 and bf16 value is
     * an fp32 value). */
    int (*shard_read_weights)(struct kern_shard *s, size_t t, float *out);
    /* Times forward + backward + SGD steps (gradients fixed, seeded). */
    int (*shard_time)(struct kern_shard *s, const struct kern_timing_opts *o,
                      struct kern_timing *out);
    /* Frees what the device keeps between shards (the profiling arena,
     * unless a shard holds it, and the cpu's cache-flush buffer, unless a
     * timing is using it); NULL where a backend keeps nothing.  The next
     * shard that needs them allocates and fills them again. */
    void (*release)(int32_t device);
    /* Bytes the device keeps between shards now (0 for none). */
    uint64_t (*kept_bytes)(int32_t device);

    /* The compute cost model on the device (kern_net_*() below call these;
     * see there).  net_open copies the parameters: the caller's array is
     * borrowed for the call.  *out is a backend object (freed by
     * net_close).  net_score is thread-safe on one net. */
    int (*net_open)(int32_t device, const struct kern_net_dims *dims,
                    const float *params, void **out, uint64_t *bytes,
                    struct sd_diag *d);
    int (*net_score)(void *net, const float *x, size_t nrows,
                     const size_t *shard_off, size_t nshards, double *ms,
                     struct sd_diag *d);
    void (*net_close)(void *net);

    /* Matrix products (kern_blas_*() below). */
    int (*blas_open)(int32_t device, void **out, struct sd_diag *d);
    int (*blas_sgemm)(void *blas, bool trans_a, bool trans_b, int m, int n,
                      int k, float alpha, const float *a, int lda,
                      const float *b, int ldb, float beta, float *c, int ldc,
                      struct sd_diag *d);
    void (*blas_close)(void *blas);

    /* Collectives over devices 0 .. n-1 (kern_comm_*() below): comm_run is
     * rank `rank`'s part of one collective, called by that rank's own
     * thread while every rank calls it; it returns once the rank's part is
     * complete.  NULL where a backend has none. */
    int (*comm_open)(int32_t n, void **out, struct sd_diag *d);
    int (*comm_run)(void *comm, int32_t rank, const struct kern_coll_desc *c,
                    struct sd_diag *d);
    /* failed: a rank failed, others may be stuck in the collective. */
    void (*comm_close)(void *comm, bool failed);

    /* Readings of a device for the idle gate; NULL, or SD_EUNSUPPORTED,
     * where the backend cannot tell (then the device counts as idle). */
    int (*device_load)(int32_t device, struct kern_device_load *out,
                       struct sd_diag *d);
};

extern const struct kern_backend kern_backend_cpu;

/* Whether this binary was built with the CUDA backend. */
bool kern_have_cuda(void);

/*
 * Whether the cuda backend's run-time library `name` ("cublas", "nccl" or
 * "nvml") loads here with every symbol the backend uses; needs no GPU.
 * Returns 0 with the file in detail (cap bytes), or SD_EUNSUPPORTED (not
 * built with CUDA, not found, a symbol missing: detail says) or SD_EINVAL
 * (another name).  The outcome is kept for the process's life.
 */
int kern_lib_probe(const char *name, char *detail, size_t cap);

/*
 * Picks a backend by name ("cpu", "cuda") or, for NULL or "auto", the best
 * usable one: cuda when built and at least one GPU answers, else cpu.  The
 * environment variable SHARDD_BACKEND overrides "auto".  The probe runs once
 * and is cached.  Returns NULL with d set when the named backend is not
 * built or has no device.
 */
const struct kern_backend *kern_backend_get(const char *name,
                                            struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* The compute cost model resident on a device (net.c)                       */

/*
 * Uploads a model's parameters (kern_net_nparams(dims) floats, borrowed
 * for the call) to a device of be: once per model activation; every score
 * then runs on the device without copying the weights again.  *out is
 * owned by the caller: kern_net_close() it.  Returns 0, SD_EINVAL (dims out
 * of range, a device index the backend lacks, NULL params),
 * SD_EUNSUPPORTED (a backend without scoring), SD_ENOMEM or SD_EDEVICE.
 * Thread: any.
 */
int kern_net_open(const struct kern_backend *be, int32_t device,
                  const struct kern_net_dims *dims, const float *params,
                  struct kern_net **out, struct sd_diag *d);

/*
 * Scores nshards shards in one batch: the model's inputs (normalised
 * features, the planner's net_input()) are x, nrows rows of dims.in floats
 * back to back, and shard s is rows shard_off[s] .. shard_off[s + 1]
 * (shard_off has nshards + 1 non-decreasing entries from 0 to nrows).
 * ms[s] receives the shard's predicted cost; an empty shard costs 0.  The
 * cpu backend computes in the planner's order (net_tables_ms(), to the
 * last bit on the same compiler flags); the cuda backend sums latents
 * before the head's first layer and agrees within fp32 rounding.  Returns
 * 0, SD_EINVAL (bad offsets), SD_ENOMEM or SD_EDEVICE.  Thread: any; calls
 * on one net may overlap.
 */
int kern_net_score(struct kern_net *net, const float *x, size_t nrows,
                   const size_t *shard_off, size_t nshards, double *ms,
                   struct sd_diag *d);

void kern_net_close(struct kern_net *net); /* NULL-safe */

/* Where a net lives: its backend, device and the device bytes it holds. */
const struct kern_backend *kern_net_backend(const struct kern_net *net);
int32_t kern_net_device(const struct kern_net *net);
uint64_t kern_net_bytes(const struct kern_net *net);

/* ------------------------------------------------------------------------ */
/* Matrix products on a device (net.c)                                       */

/*
 * A device's sgemm, for training the cost model: kernels/cpu has the plain
 * triple loop (the specification), kernels/cuda cuBLAS (loaded at run time
 * from libcublas.so.13; TF32 off, so products are fp32).  *out belongs to
 * one thread at a time; kern_blas_close() it.  Returns 0,
 * SD_EUNSUPPORTED (no such backend op, or cuBLAS cannot be loaded: d says
 * why), SD_ENOMEM or SD_EDEVICE.
 */
int kern_blas_open(const struct kern_backend *be, int32_t device,
                   struct kern_blas **out, struct sd_diag *d);

/*
 * C = alpha op(A) op(B) + beta C for row-major host matrices, op(X) = X or
 * X^T, exactly as cblas_sgemm(CblasRowMajor, ...): C is m x n, op(A) m x k,
 * op(B) k x n, with leading dimensions lda, ldb, ldc.  A device copies the
 * operands over and the result back.  Returns 0, SD_EINVAL (a dimension or
 * leading dimension out of range), SD_ENOMEM or SD_EDEVICE.
 */
int kern_blas_sgemm(struct kern_blas *b, bool trans_a, bool trans_b, int m,
                    int n, int k, float alpha, const float *a, int lda,
                    const float *bm, int ldb, float beta, float *c, int ldc,
                    struct sd_diag *d);

void kern_blas_close(struct kern_blas *b); /* NULL-safe */
const struct kern_backend *kern_blas_backend(const struct kern_blas *b);

/* ------------------------------------------------------------------------ */
/* Collective timing (comm.c)                                                */

/*
 * A communicator over devices 0 .. n-1 of be, n >= 1 (one device makes a
 * 1-rank communicator: every collective is a local copy, but the whole
 * path runs).  cuda: NCCL's ncclCommInitAll, NCCL loaded at run time from
 * libnccl.so.2; cpu: n threads exchanging through shared memory (n up to
 * KERN_COMM_MAX, whatever the core count), the specification of what each
 * rank sends and receives.  Returns 0, SD_EINVAL, SD_EUNSUPPORTED (no
 * collectives, no NCCL, fewer devices than n: d says which), SD_ENOMEM or
 * SD_EDEVICE.
 */
#define KERN_COMM_MAX 64
int kern_comm_open(const struct kern_backend *be, int32_t n,
                   struct kern_comm **out, struct sd_diag *d);
void kern_comm_close(struct kern_comm *c); /* NULL-safe */
int32_t kern_comm_size(const struct kern_comm *c);

/*
 * Times a collective: one thread per rank; every iteration starts the ranks
 * together (a barrier), each sleeps its sleep_ms, runs its part and stops
 * its clock when its part is complete.  per_rank (n entries) receives each
 * rank's summary (kern_timing_summarize()) of its timed iterations, in ms.
 * Returns 0, SD_EINVAL (a bad description: d names the field),
 * SD_ECANCELED (*abort), SD_ENOMEM or SD_EDEVICE; after a device failure
 * the communicator is unusable (close it).
 */
int kern_comm_time(struct kern_comm *c, const struct kern_coll_desc *desc,
                   struct kern_timing *per_rank, struct sd_diag *d);

/* ------------------------------------------------------------------------ */
/* The idle gate (busy.c)                                                    */

/*
 * Readings of device `device` of be (NVML on cuda, loaded at run time from
 * libnvidia-ml.so.1).  Returns 0, SD_EUNSUPPORTED (the backend cannot tell:
 * no op, no NVML, no such device in NVML; d says which) or SD_EDEVICE.
 */
int kern_device_load(const struct kern_backend *be, int32_t device,
                     struct kern_device_load *out, struct sd_diag *d);

/*
 * Whether someone else uses the device now, by kern_busy_decide() with the
 * default limits: true with why (cap bytes, may be NULL) set.  A device
 * whose backend cannot tell is not busy (false): the gate never stops a
 * profiler that worked before.  Thread: any; a few NVML calls, well under
 * a millisecond.
 */
bool kern_device_busy(const struct kern_backend *be, int32_t device, char *why,
                      size_t cap);

/* Fills timing defaults: 5 warm-up steps, 10 repeats, flush on. */
void kern_timing_opts_default(struct kern_timing_opts *o);

/*
 * Median, min, max, p10 and p90 of n samples (sorted in place), for
 * backends.  n >= 1.
 */
void kern_timing_summarize(double *samples_ms, int n, struct kern_timing *out);

#endif /* SHARDD_KERNELS_H */
