/*
 * The cpu backend: the fused table-batched embedding bag (sum pooling,
 * backward, exact SGD) on one CPU core per device.  It is the reference the
 * cuda backend is tested against, and a device of its own for hosts without
 * a GPU.
 *
 * This file is the backend itself: the devices (the cores, their memory,
 * the cache size a flush buffer is sized by off x86), a shard's open,
 * step, weights and close, the timing harness, the refusal of tiers it
 * does not time, and the ops table.  It is split, over backend_cpu_int.h,
 * into tbe_cpu.c (a table's weights in its dtype, and the forward and
 * backward + SGD loops per dtype), arena_cpu.c (each device's weight arena
 * and cache-flush buffer) and flush_cpu.c (the flush before each timed
 * step); the compute cost model, sgemm and collectives are net_cpu.c and
 * comm_cpu.c (cpu_internal.h).
 *
 * Device i is the i-th CPU of the process's affinity mask at the first
 * call (all online cores unless a cpuset restricts the process); its memory
 * is the machine's RAM divided by that count.  shard_time pins the calling
 * thread to the device's core for the timed steps and restores the
 * thread's affinity afterwards.
 */
#define _GNU_SOURCE /* pthread_setaffinity_np, CPU_SET, _SC_LEVEL3_... */

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend_cpu_int.h"

/*
 * Flush buffer bounds (bytes), off x86 (flush_cpu.c): used when the
 * LLC size is unknown, and the most a device keeps whatever the LLC
 * claims.  128 MiB covers twice the L3 one core reaches on today's parts
 * (32 MiB a Zen 5 CCD, 96 MiB a Genoa-X one), and most of a 105 MiB
 * Sapphire Rapids socket.  A guest without sysfs cache entries reads
 * CPUID's figure, which a hypervisor may inflate: Firecracker reports
 * 508 MiB for a Zen 5's 32 MiB, and a 1 GiB buffer, kept for the
 * daemon's life beside the profiler's 768 MiB budget, took its RSS to
 * 1.5 GiB.
 */
#define CPU_FLUSH_DEFAULT (UINT64_C(64) << 20)
#define CPU_FLUSH_MAX     (UINT64_C(128) << 20)

/* Whether the timing was asked to stop (see cpu_shard.abort). */
static bool shard_aborted(const struct cpu_shard *s)
{
    return s->abort != NULL && atomic_load(s->abort) != 0;
}

/* The devices, found once: CPU ids, RAM per core, flush size. */
static struct {
    pthread_once_t once;
    int ncores;
    int cores[CPU_SETSIZE];
    uint64_t mem_per_core;
    uint64_t flush_bytes;
} topo = {.once = PTHREAD_ONCE_INIT};

static struct cpu_shard *to_cpu(struct kern_shard *s)
{
    return (struct cpu_shard *)s;
}

/*
 * Last-level cache size in bytes, or 0 when neither sysfs nor glibc knows
 * it.  sysfs first: it is what the kernel read from the CPU, while glibc's
 * sysconf() may report another figure under a hypervisor (seen: 320 MiB
 * for a 32 MiB L3, which made a 640 MiB flush buffer).
 */
static uint64_t llc_bytes(void)
{
    unsigned long long kib = 0;
    long v;
    FILE *f;

    f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    if (f != NULL) {
        if (fscanf(f, "%lluK", &kib) != 1)
            kib = 0;
        fclose(f);
        if (kib > 0)
            return (uint64_t)kib * 1024;
    }
    v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return v > 0 ? (uint64_t)v : 0;
}

static void topo_probe(void)
{
    cpu_set_t set;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    long online;
    uint64_t llc;
    int c;

    topo.ncores = 0;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        for (c = 0; c < CPU_SETSIZE; c++) {
            if (CPU_ISSET(c, &set))
                topo.cores[topo.ncores++] = c;
        }
    }
    if (topo.ncores == 0) {
        online = sysconf(_SC_NPROCESSORS_ONLN);
        topo.ncores = online < 1 ? 1 : (int)online;
        if (topo.ncores > CPU_SETSIZE)
            topo.ncores = CPU_SETSIZE;
        for (c = 0; c < topo.ncores; c++)
            topo.cores[c] = c;
    }
    kern_cpu__devmem_init(topo.ncores);
    if (pages > 0 && page > 0)
        topo.mem_per_core =
            (uint64_t)pages * (uint64_t)page / (uint64_t)topo.ncores;
    llc = llc_bytes();
    topo.flush_bytes = llc > 0 ? 2 * llc : CPU_FLUSH_DEFAULT;
    if (topo.flush_bytes > CPU_FLUSH_MAX)
        topo.flush_bytes = CPU_FLUSH_MAX;
}

static int cpu_device_count(void)
{
    pthread_once(&topo.once, topo_probe);
    return topo.ncores;
}

/* The CPU model from /proc/cpuinfo ("model name"), or "unknown". */
static void cpu_model(char *buf, size_t cap)
{
    char line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");

    snprintf(buf, cap, "unknown");
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        char *colon = strchr(line, ':');

        if (strncmp(line, "model name", 10) != 0 || colon == NULL)
            continue;
        colon += strspn(colon + 1, " \t") + 1;
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(buf, cap, "%s", colon);
        break;
    }
    fclose(f);
}

static int cpu_device_info(int32_t device, struct kern_device_info *out)
{
    if (device < 0 || device >= cpu_device_count())
        return SD_EINVAL;
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "cpu core %d", topo.cores[device]);
    cpu_model(out->model, sizeof(out->model));
    out->mem_bytes = topo.mem_per_core;
    out->index = device;
    return 0;
}

void *kern_cpu__alloc_aligned(uint64_t n)
{
    uint64_t sz = (n + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;

    if (sz == 0)
        sz = CPU_ALIGN;
    if (sz > SIZE_MAX)
        return NULL;
    return aligned_alloc(CPU_ALIGN, (size_t)sz);
}

static void cpu_shard_close(struct kern_shard *ks)
{
    struct cpu_shard *s = to_cpu(ks);
    size_t t;

    if (s == NULL)
        return;
    if (s->tables != NULL) {
        for (t = 0; t < s->ntables; t++)
            kern_cpu__table_close(&s->tables[t]);
    }
    free(s->tables);
    free(s->pooled);
    free(s->grad);
    if (s->arena)
        kern_cpu__arena_drop(s->device);
    free(s);
}

static void cpu_release(int32_t device)
{
    if (device < 0 || device >= cpu_device_count())
        return;
    kern_cpu__arena_free(device);
}

static uint64_t cpu_kept_bytes(int32_t device)
{
    if (device < 0 || device >= cpu_device_count())
        return 0;
    return kern_cpu__kept_bytes(device);
}

static int cpu_shard_open(int32_t device, const struct kern_shard_desc *desc,
                          struct kern_shard **out, struct sd_diag *d)
{
    unsigned char *arena_w = NULL;
    struct cpu_shard *s = NULL;
    uint64_t need, npooled;
    int32_t col = 0;
    size_t t;
    int rv;

    if (device < 0 || device >= cpu_device_count())
        return sd_diag_set(d, SD_EINVAL, "cpu: no device %d (%d cores)",
                           (int)device, topo.ncores);
    rv = kern__shard_check(desc, d);
    if (rv == 0)
        rv = kern__tiers_check(&kern_backend_cpu, desc, d);
    if (rv != 0)
        return rv;
    need = kern__shard_bytes(desc);
    if (topo.mem_per_core > 0 && need > topo.mem_per_core)
        return sd_diag_set(d, SD_ENOMEM,
                           "cpu core %d: shard needs %llu MiB, a core has "
                           "%llu MiB",
                           topo.cores[device], (unsigned long long)(need >> 20),
                           (unsigned long long)(topo.mem_per_core >> 20));

    s = calloc(1, sizeof(*s));
    if (s == NULL)
        goto fail_close_shard;
    s->tables = calloc(desc->ntables, sizeof(*s->tables));
    if (s->tables == NULL)
        goto fail_close_shard;
    s->ntables = desc->ntables;
    s->nbags = desc->nbags;
    s->width = kern__shard_width(desc);
    s->core = topo.cores[device];
    s->lr = desc->learning_rate;
    s->device = device;
    if (desc->reuse_weights) {
        rv = kern_cpu__arena_acquire(device, desc, topo.mem_per_core, &arena_w);
        if (rv == SD_EBUSY) {
            cpu_shard_close((struct kern_shard *)s);
            return sd_diag_set(d, rv,
                               "cpu core %d: its weight arena is in "
                               "use by another shard",
                               topo.cores[device]);
        }
        if (rv == SD_ENOMEM && desc->arena_max_bytes > 0) {
            uint64_t span = 0;

            for (t = 0; t < desc->ntables; t++)
                span += kern_cpu__arena_span(&desc->tables[t]);
            if (span > desc->arena_max_bytes) {
                cpu_shard_close((struct kern_shard *)s);
                return sd_diag_set(
                    d, rv,
                    "cpu core %d: the shard's weights take %.1f MiB, over "
                    "the %.1f MiB its caller lets the weight arena keep "
                    "(arena_max_bytes)",
                    topo.cores[device], (double)span / (1 << 20),
                    (double)desc->arena_max_bytes / (1 << 20));
            }
        }
        if (rv != 0)
            goto fail_close_shard;
        s->arena = true;
    }
    for (t = 0; t < desc->ntables; t++) {
        s->tables[t].col = col;
        col += desc->tables[t].dim;
        rv = kern_cpu__table_open(s, t, &desc->tables[t], desc->seed, arena_w);
        if (rv != 0)
            goto fail_close_shard;
        if (arena_w != NULL)
            arena_w += kern_cpu__arena_span(&desc->tables[t]);
    }
    if (s->arena)
        kern_cpu__arena_sanitise(s);
    npooled = (uint64_t)s->nbags * (uint64_t)s->width;
    s->pooled = kern_cpu__alloc_aligned(npooled * sizeof(float));
    s->grad = kern_cpu__alloc_aligned(npooled * sizeof(float));
    if (s->pooled == NULL || s->grad == NULL)
        goto fail_close_shard;
    kern_cpu__fill_seeded(s->grad, npooled, desc->seed, KERN_STREAM_GRAD,
                          KERN_GRAD_SCALE);
    *out = (struct kern_shard *)s;
    return 0;

fail_close_shard:
    cpu_shard_close((struct kern_shard *)s);
    return sd_diag_set(d, SD_ENOMEM,
                       "cpu: out of memory for a shard of %.1f MiB",
                       (double)need / (1 << 20));
}

/* The forward of every table, into pooled (nbags x width). */
static void forward(const struct cpu_shard *s, float *pooled)
{
    size_t t;

    for (t = 0; t < s->ntables && !shard_aborted(s); t++)
        s->tables[t].forward(s, &s->tables[t], pooled);
}

/* Backward and SGD of every table, with grad (nbags x width). */
static void backward_sgd(const struct cpu_shard *s, const float *grad)
{
    size_t t;

    for (t = 0; t < s->ntables && !shard_aborted(s); t++)
        s->tables[t].backward(s, &s->tables[t], grad);
}

/* A NULL pooled skips nothing (the forward still runs, into scratch); a
 * NULL grad_pooled uses the shard's fixed timing gradient. */
static int cpu_shard_step(struct kern_shard *ks, float *pooled,
                          const float *grad_pooled)
{
    struct cpu_shard *s = to_cpu(ks);

    forward(s, pooled != NULL ? pooled : s->pooled);
    backward_sgd(s, grad_pooled != NULL ? grad_pooled : s->grad);
    return 0;
}

static int cpu_shard_read_weights(struct kern_shard *ks, size_t t, float *out)
{
    struct cpu_shard *s = to_cpu(ks);

    if (t >= s->ntables)
        return SD_EINVAL;
    kern_cpu__table_read_weights(&s->tables[t], out);
    return 0;
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Whether the caller asked the timing to stop (kern_timing_opts.abort). */
static bool aborted(const struct kern_timing_opts *o)
{
    return o->abort != NULL && atomic_load(o->abort) != 0;
}

/* The timed loop proper; the caller has pinned the thread.  Returns 0 or
 * SD_ECANCELED. */
static int time_steps(struct cpu_shard *s, const struct kern_timing_opts *o,
                      const struct cpu_flush *flush, double *samples)
{
    double t0;
    int r;

    for (r = 0; r < o->warmup; r++) {
        if (aborted(o))
            return SD_ECANCELED;
        forward(s, s->pooled);
        backward_sgd(s, s->grad);
    }
    for (r = 0; r < o->repeats; r++) {
        if (aborted(o))
            return SD_ECANCELED;
        if (flush != NULL)
            kern_cpu__flush_run(s, flush);
        t0 = now_ms();
        forward(s, s->pooled);
        backward_sgd(s, s->grad);
        samples[r] = now_ms() - t0;
    }
    /* A step cut short by the abort is not a measurement. */
    return aborted(o) ? SD_ECANCELED : 0;
}

/*
 * Pins the thread to the shard's core, times, and restores the thread's
 * affinity.  When the core cannot be pinned (a cpuset changed since the
 * probe) the steps run unpinned: a measurement, if a noisier one.
 */
static int cpu_shard_time(struct kern_shard *ks,
                          const struct kern_timing_opts *o,
                          struct kern_timing *out)
{
    struct cpu_shard *s = to_cpu(ks);
    struct kern_timing_opts def;
    struct cpu_flush *flush = NULL;
    cpu_set_t old, one;
    double *samples;
    int restore, rv;

    if (o == NULL) {
        kern_timing_opts_default(&def);
        o = &def;
    }
    if (o->warmup < 0 || o->repeats < 1)
        return SD_EINVAL;
    samples = calloc((size_t)o->repeats, sizeof(*samples));
    if (samples == NULL)
        return SD_ENOMEM;
    if (o->flush && kern_cpu__flush_open(s, topo.flush_bytes, &flush) != 0) {
        free(samples);
        return SD_ENOMEM;
    }

    CPU_ZERO(&one);
    CPU_SET(s->core, &one);
    restore = pthread_getaffinity_np(pthread_self(), sizeof(old), &old) == 0;
    pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
    s->abort = o->abort;
    rv = time_steps(s, o, flush, samples);
    s->abort = NULL;
    kern_cpu__flush_close(flush);
    if (restore)
        pthread_setaffinity_np(pthread_self(), sizeof(old), &old);

    if (rv == 0)
        kern_timing_summarize(samples, o->repeats, out);
    free(samples);
    return rv;
}

const struct kern_backend kern_backend_cpu = {
    .name = "cpu",
    .dtypes =
        1u << KERN_DTYPE_FP32 | 1u << KERN_DTYPE_FP16 | 1u << KERN_DTYPE_BF16,
    /* A core's tables are in its own memory: host-memory tiers are
     * modelled on this backend (planner/problem/tiers.c), not timed. */
    .tiers = 1u << KERN_TIER_HBM,
    .device_count = cpu_device_count,
    .device_info = cpu_device_info,
    .shard_open = cpu_shard_open,
    .shard_close = cpu_shard_close,
    .shard_step = cpu_shard_step,
    .shard_read_weights = cpu_shard_read_weights,
    .shard_time = cpu_shard_time,
    .release = cpu_release,
    .kept_bytes = cpu_kept_bytes,
    .net_open = kern_cpu_net_open,
    .net_score = kern_cpu_net_score,
    .net_close = kern_cpu_net_close,
    .blas_open = kern_cpu_blas_open,
    .blas_sgemm = kern_cpu_blas_sgemm,
    .blas_close = kern_cpu_blas_close,
    .comm_open = kern_cpu_comm_open,
    .comm_run = kern_cpu_comm_run,
    .comm_close = kern_cpu_comm_close,
    /* A core has no other processes to yield to that the profiler could
     * see; its nice level and the daemon's idle timer are its gate. */
    .device_load = NULL,
};
