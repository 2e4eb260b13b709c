/*
 * Device backends: where a shard's cost is measured.  One vtable, two
 * implementations: `cpu` (always built; a device is one pinned core) and
 * `cuda` (built when nvcc exists; a device is one GPU).  The op is the fused
 * table-batched embedding bag of one device's shard: forward (sum pooling
 * per bag), backward (pooled-output gradients scattered to the rows) and an
 * exact SGD update, fp32, over every table of the shard in one pass.
 *
 * Synchronous and loop-agnostic: call from worker threads.  Only
 * kernels/cuda/ includes CUDA headers; nothing here exposes CUDA types.
 * Functions return 0 or a negative SD_E* code (a device failure is
 * SD_EDEVICE, an allocation failure SD_ENOMEM); a struct sd_diag, where
 * given, receives one line of detail.
 */
#ifndef SHARDD_KERNELS_H
#define SHARDD_KERNELS_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shardd/err.h"

#define KERN_NAME_MAX 64

/* One device a backend can time shards on. */
struct kern_device_info {
    char name[KERN_NAME_MAX];  /* "cpu core 3", "NVIDIA H100 80GB HBM3" */
    char model[KERN_NAME_MAX]; /* what a profile is named after: the CPU
                                * model ("AMD EPYC 7B13") or the GPU name */
    uint64_t mem_bytes;        /* memory a shard may use */
    int32_t index;             /* backend-local device index */
};

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
};

struct kern_shard_desc {
    size_t ntables;
    const struct kern_table_desc *tables;
    int64_t nbags;       /* batch size */
    float learning_rate; /* SGD step */
    uint64_t seed;       /* initial weights, uniform in [-0.01, 0.01) */
    /*
     * Profiling: take the weights from the device's arena instead of a
     * fresh allocation.  The arena is allocated and filled once per device
     * and process, grows when a shard needs more, and is reused by every
     * later shard, so a multi-gigabyte table is not re-faulted per sample;
     * its values are then not `seed`'s.  One arena shard per device at a
     * time (SD_EBUSY otherwise).  Parity tests leave this false.  The cuda
     * backend does not have an arena yet and allocates per shard (a
     * cudaMalloc and an on-device fill, milliseconds even for gigabytes).
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
    volatile sig_atomic_t *abort;
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

/*
 * The backend vtable.  `name` is "cpu" or "cuda".  All functions but
 * device_count may assume a valid device index.
 */
struct kern_backend {
    const char *name;
    /* Devices usable now (0 when, e.g., no GPU or no driver). */
    int (*device_count)(void);
    int (*device_info)(int32_t device, struct kern_device_info *out);
    /* Allocates weights (seeded) and copies inputs onto the device.  *out
     * owned by the caller, released with shard_close.  SD_ENOMEM when the
     * shard does not fit, SD_EINVAL for a bad description. */
    int (*shard_open)(int32_t device, const struct kern_shard_desc *desc,
                      struct kern_shard **out, struct sd_diag *d);
    void (*shard_close)(struct kern_shard *s);
    /* One untimed step, for parity tests: writes the pooled forward output
     * (nbags x sum of dims, row-major, tables side by side) to pooled (may
     * be NULL), then applies backward with the given pooled-output gradient
     * (same shape) and the SGD update. */
    int (*shard_step)(struct kern_shard *s, float *pooled,
                      const float *grad_pooled);
    /* Copies table t's current weights (rows x dim) to out. */
    int (*shard_read_weights)(struct kern_shard *s, size_t t, float *out);
    /* Times forward + backward + SGD steps (gradients fixed, seeded). */
    int (*shard_time)(struct kern_shard *s, const struct kern_timing_opts *o,
                      struct kern_timing *out);
    /* Frees what the device keeps between shards (the profiling arena),
     * unless a shard holds it; NULL where a backend keeps nothing.  The
     * next arena shard allocates and fills it again. */
    void (*release)(int32_t device);
    /* Bytes the device keeps between shards now (0 for none). */
    uint64_t (*kept_bytes)(int32_t device);
};

extern const struct kern_backend kern_backend_cpu;

/* Whether this binary was built with the CUDA backend. */
bool kern_have_cuda(void);

/*
 * Picks a backend by name ("cpu", "cuda") or, for NULL or "auto", the best
 * usable one: cuda when built and at least one GPU answers, else cpu.  The
 * environment variable SHARDD_BACKEND overrides "auto".  The probe runs once
 * and is cached.  Returns NULL with d set when the named backend is not
 * built or has no device.
 */
const struct kern_backend *kern_backend_get(const char *name,
                                            struct sd_diag *d);

/* Fills timing defaults: 5 warm-up steps, 10 repeats, flush on. */
void kern_timing_opts_default(struct kern_timing_opts *o);

/*
 * Median, min, max, p10 and p90 of n samples (sorted in place), for
 * backends.  n >= 1.
 */
void kern_timing_summarize(double *samples_ms, int n, struct kern_timing *out);

#endif /* SHARDD_KERNELS_H */
