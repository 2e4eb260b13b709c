/*
 * The cpu backend: the fused table-batched embedding bag (sum pooling,
 * backward, exact SGD, fp32) on one CPU core per device.  It is the
 * reference the cuda backend is tested against, and a device of its own
 * for hosts without a GPU.
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

#include "cpu_internal.h"

#define CPU_ALIGN 64 /* bytes: a cache line, and any SIMD width */

/* Flush buffer bounds (bytes): used when the LLC size is unknown, and the
 * most one shard allocates whatever the LLC claims. */
#define CPU_FLUSH_DEFAULT (UINT64_C(64) << 20)
#define CPU_FLUSH_MAX     (UINT64_C(1) << 30)

/* Lookups to prefetch ahead in a bag: rows of big tables miss the caches,
 * and the next rows' addresses are known, so their loads can overlap. */
#define CPU_PREFETCH 8

/* One table of a shard, as the cpu backend holds it. */
struct cpu_table {
    float *w;         /* rows x dim weights, CPU_ALIGN-aligned */
    bool w_owned;     /* false: w points into the device's arena */
    int64_t *offsets; /* nbags + 1 */
    int64_t *indices; /* nindices, in [0, rows) */
    int64_t rows;
    int64_t nindices;
    int32_t dim;
    int32_t col; /* first column of this table in a pooled row */
};

/* What a struct kern_shard * points to on this backend. */
struct cpu_shard {
    struct cpu_table *tables;
    size_t ntables;
    int64_t nbags;
    int32_t width; /* columns of a pooled row: sum of dims */
    int32_t core;  /* CPU the timed steps run on */
    float lr;
    float *pooled; /* nbags x width: forward output while timing */
    float *grad;   /* nbags x width: fixed seeded timing gradient */
    int32_t device;
    bool arena; /* holds its device's arena */
    /* While timing: kern_timing_opts.abort, checked between tables so a
     * long step stops early (the sample is dropped); NULL otherwise. */
    volatile sig_atomic_t *abort;
};

/* Whether the timing was asked to stop (see cpu_shard.abort). */
static bool shard_aborted(const struct cpu_shard *s)
{
    return s->abort != NULL && *s->abort;
}

/*
 * Per device, for the life of the process: the weight arena of profiling
 * shards (kernels.h, reuse_weights) and the cache-flush buffer, both made
 * on first use so that repeated samples do not fault gigabytes in again.
 * Reachable from here until exit, by design.
 */
struct cpu_devmem {
    pthread_mutex_t mu;
    bool busy; /* an arena shard is open */
    float *arena;
    uint64_t arena_floats;
    uint64_t *flush;
    size_t flush_words;
};
static struct cpu_devmem devmem[CPU_SETSIZE];

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
    for (c = 0; c < topo.ncores; c++)
        pthread_mutex_init(&devmem[c].mu, NULL);
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

/* n bytes aligned to CPU_ALIGN (aligned_alloc wants a multiple of the
 * alignment); never NULL for n == 0 unless out of memory. */
static void *alloc_aligned(uint64_t n)
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
        for (t = 0; t < s->ntables; t++) {
            if (s->tables[t].w_owned)
                free(s->tables[t].w);
            free(s->tables[t].offsets);
            free(s->tables[t].indices);
        }
    }
    free(s->tables);
    free(s->pooled);
    free(s->grad);
    if (s->arena) {
        pthread_mutex_lock(&devmem[s->device].mu);
        devmem[s->device].busy = false;
        pthread_mutex_unlock(&devmem[s->device].mu);
    }
    free(s);
}

/* Fills n floats with stream `stream` of the seed (kern_internal.h). */
static void fill_seeded(float *p, uint64_t n, uint64_t seed, uint64_t stream,
                        float scale)
{
    uint64_t key = kern__stream_key(seed, stream), e;

    for (e = 0; e < n; e++)
        p[e] = kern__value(key, e, scale);
}

/* Allocates and fills table t of s from its description. */
static int table_open(struct cpu_shard *s, size_t t,
                      const struct kern_table_desc *td, uint64_t seed,
                      float *arena_w)
{
    struct cpu_table *tb = &s->tables[t];
    uint64_t nw = (uint64_t)td->rows * (uint64_t)td->dim;
    uint64_t noff = (uint64_t)s->nbags + 1;

    tb->rows = td->rows;
    tb->dim = td->dim;
    tb->nindices = td->nindices;
    tb->w_owned = arena_w == NULL;
    tb->w = arena_w ? arena_w : alloc_aligned(nw * sizeof(float));
    tb->offsets = alloc_aligned(noff * sizeof(int64_t));
    tb->indices = alloc_aligned((uint64_t)td->nindices * sizeof(int64_t));
    if (tb->w == NULL || tb->offsets == NULL || tb->indices == NULL)
        return SD_ENOMEM;
    if (tb->w_owned)
        fill_seeded(tb->w, nw, seed, t, KERN_WEIGHT_SCALE);
    memcpy(tb->offsets, td->offsets, (size_t)noff * sizeof(int64_t));
    if (td->nindices > 0)
        memcpy(tb->indices, td->indices,
               (size_t)td->nindices * sizeof(int64_t));
    return 0;
}

/* Floats table t takes in an arena: its weights, rounded up to a line. */
static uint64_t arena_span(const struct kern_table_desc *td)
{
    uint64_t per_line = CPU_ALIGN / sizeof(float);
    uint64_t n = (uint64_t)td->rows * (uint64_t)td->dim;

    return (n + per_line - 1) / per_line * per_line;
}

/*
 * Takes device's arena for a shard, growing it to hold every table; a grown
 * arena is filled once (uniform small values, like fresh weights).
 * Returns 0, SD_EBUSY (another arena shard is open) or SD_ENOMEM.
 */
static int arena_acquire(int32_t device, const struct kern_shard_desc *desc)
{
    struct cpu_devmem *m = &devmem[device];
    uint64_t need = 0, cap = topo.mem_per_core;
    size_t t;
    int rv = 0;

    if (desc->arena_max_bytes > 0 && (cap == 0 || desc->arena_max_bytes < cap))
        cap = desc->arena_max_bytes;
    for (t = 0; t < desc->ntables; t++)
        need += arena_span(&desc->tables[t]);
    if (cap > 0 && need * sizeof(float) > cap)
        return SD_ENOMEM;
    pthread_mutex_lock(&m->mu);
    if (m->busy) {
        rv = SD_EBUSY;
    } else if (need > m->arena_floats) {
        float *w;

        /* Grow at least twofold so that a run of ever larger shards
         * refills the arena only a few times, within the cap. */
        if (need < 2 * m->arena_floats &&
            (cap == 0 || 2 * m->arena_floats * sizeof(float) <= cap))
            need = 2 * m->arena_floats;
        w = alloc_aligned(need * sizeof(float));

        if (w == NULL) {
            rv = SD_ENOMEM;
        } else {
            free(m->arena);
            m->arena = w;
            m->arena_floats = need;
            fill_seeded(w, need, 1, 0, KERN_WEIGHT_SCALE);
        }
    }
    if (rv == 0)
        m->busy = true;
    pthread_mutex_unlock(&m->mu);
    return rv;
}

static void cpu_release(int32_t device)
{
    struct cpu_devmem *m;

    if (device < 0 || device >= cpu_device_count())
        return;
    m = &devmem[device];
    pthread_mutex_lock(&m->mu);
    if (!m->busy) {
        free(m->arena);
        m->arena = NULL;
        m->arena_floats = 0;
    }
    pthread_mutex_unlock(&m->mu);
}

static uint64_t cpu_kept_bytes(int32_t device)
{
    struct cpu_devmem *m;
    uint64_t n;

    if (device < 0 || device >= cpu_device_count())
        return 0;
    m = &devmem[device];
    pthread_mutex_lock(&m->mu);
    n = m->arena_floats * sizeof(float) + m->flush_words * sizeof(uint64_t);
    pthread_mutex_unlock(&m->mu);
    return n;
}

static int cpu_shard_open(int32_t device, const struct kern_shard_desc *desc,
                          struct kern_shard **out, struct sd_diag *d)
{
    float *arena_w = NULL;
    struct cpu_shard *s = NULL;
    uint64_t need, npooled;
    int32_t col = 0;
    size_t t;
    int rv;

    if (device < 0 || device >= cpu_device_count())
        return sd_diag_set(d, SD_EINVAL, "cpu: no device %d (%d cores)",
                           (int)device, topo.ncores);
    rv = kern__shard_check(desc, d);
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
        rv = arena_acquire(device, desc);
        if (rv == SD_EBUSY) {
            cpu_shard_close((struct kern_shard *)s);
            return sd_diag_set(d, rv,
                               "cpu core %d: its weight arena is in "
                               "use by another shard",
                               topo.cores[device]);
        }
        if (rv != 0)
            goto fail_close_shard;
        s->arena = true;
        arena_w = devmem[device].arena;
    }
    for (t = 0; t < desc->ntables; t++) {
        s->tables[t].col = col;
        col += desc->tables[t].dim;
        if (table_open(s, t, &desc->tables[t], desc->seed, arena_w) != 0)
            goto fail_close_shard;
        if (arena_w != NULL)
            arena_w += arena_span(&desc->tables[t]);
    }
    npooled = (uint64_t)s->nbags * (uint64_t)s->width;
    s->pooled = alloc_aligned(npooled * sizeof(float));
    s->grad = alloc_aligned(npooled * sizeof(float));
    if (s->pooled == NULL || s->grad == NULL)
        goto fail_close_shard;
    fill_seeded(s->grad, npooled, desc->seed, KERN_STREAM_GRAD,
                KERN_GRAD_SCALE);
    *out = (struct kern_shard *)s;
    return 0;

fail_close_shard:
    cpu_shard_close((struct kern_shard *)s);
    return sd_diag_set(d, SD_ENOMEM, "cpu: out of memory for a %llu MiB shard",
                       (unsigned long long)(need >> 20));
}

/*
 * The inner loops run over a row's columns, four at a time: dims are
 * multiples of 4, so the unrolled body covers every column, and with
 * restrict pointers gcc turns each body into one 128-bit vector operation
 * (SLP vectorization, on at -O2) without a scalar remainder loop.
 */
static void row_add(float *restrict out, const float *restrict row, int32_t dim)
{
    int32_t c;

    for (c = 0; c < dim; c += 4) {
        out[c] += row[c];
        out[c + 1] += row[c + 1];
        out[c + 2] += row[c + 2];
        out[c + 3] += row[c + 3];
    }
}

/* row -= lr * g: one lookup's share of the SGD update. */
static void row_sgd(float *restrict row, const float *restrict g, float lr,
                    int32_t dim)
{
    int32_t c;

    for (c = 0; c < dim; c += 4) {
        row[c] -= lr * g[c];
        row[c + 1] -= lr * g[c + 1];
        row[c + 2] -= lr * g[c + 2];
        row[c + 3] -= lr * g[c + 3];
    }
}

/* Prefetches every cache line of lookup i's row, for reading or writing. */
static void prefetch_row(const struct cpu_table *tb, int64_t i, int rw)
{
    const char *p = (const char *)(tb->w + tb->indices[i] * tb->dim);
    size_t off, bytes = (size_t)tb->dim * sizeof(float);

    for (off = 0; off < bytes; off += CPU_ALIGN) {
        if (rw)
            __builtin_prefetch(p + off, 1);
        else
            __builtin_prefetch(p + off, 0);
    }
}

/* Sum pooling: pooled[b][col .. col + dim) = sum of the bag's rows, each
 * bag's rows added in index order. */
static void forward(const struct cpu_shard *s, float *pooled)
{
    const struct cpu_table *tb;
    int64_t b, i, end;
    size_t t;
    float *out;

    for (t = 0; t < s->ntables && !shard_aborted(s); t++) {
        tb = &s->tables[t];
        for (b = 0; b < s->nbags; b++) {
            out = pooled + b * s->width + tb->col;
            memset(out, 0, (size_t)tb->dim * sizeof(float));
            end = tb->offsets[b + 1];
            for (i = tb->offsets[b]; i < end; i++) {
                if (i + CPU_PREFETCH < tb->nindices)
                    prefetch_row(tb, i + CPU_PREFETCH, 0);
                row_add(out, tb->w + tb->indices[i] * tb->dim, tb->dim);
            }
        }
    }
}

/*
 * Backward and exact SGD in one pass: the gradient of a row is the sum of
 * the pooled-output gradients of the bags that read it, once per read, so
 * w[i] -= lr * sum_b g[b] over the lookups (b, i).  SGD is linear in the
 * gradient, so applying each lookup's term as it comes gives the same
 * update as summing per row first (up to fp32 rounding order): duplicates,
 * within a bag or across bags, accumulate.  FBGEMM sorts the indices and
 * reduces per row instead; both are exact SGD.
 */
static void backward_sgd(const struct cpu_shard *s, const float *grad)
{
    const struct cpu_table *tb;
    const float *g;
    int64_t b, i, end;
    size_t t;

    for (t = 0; t < s->ntables && !shard_aborted(s); t++) {
        tb = &s->tables[t];
        for (b = 0; b < s->nbags; b++) {
            g = grad + b * s->width + tb->col;
            end = tb->offsets[b + 1];
            for (i = tb->offsets[b]; i < end; i++) {
                if (i + CPU_PREFETCH < tb->nindices)
                    prefetch_row(tb, i + CPU_PREFETCH, 1);
                row_sgd(tb->w + tb->indices[i] * tb->dim, g, s->lr, tb->dim);
            }
        }
    }
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
    memcpy(out, s->tables[t].w,
           (size_t)s->tables[t].rows * (size_t)s->tables[t].dim *
               sizeof(float));
    return 0;
}

/*
 * Evicts the shard's data from every cache level: read-modify-writes a
 * buffer twice the LLC.  A plain memset would not do: glibc writes big
 * blocks with non-temporal stores, which bypass the caches.
 */
static void flush_caches(struct cpu_shard *s)
{
    uint64_t *restrict p = devmem[s->device].flush;
    size_t i, n = devmem[s->device].flush_words;

    for (i = 0; i < n; i++)
        p[i] += 1;
}

/* Makes the device's flush buffer on first use; 0 or SD_ENOMEM. */
static int flush_buffer_get(int32_t device)
{
    struct cpu_devmem *m = &devmem[device];
    int rv = 0;

    pthread_mutex_lock(&m->mu);
    if (m->flush == NULL) {
        m->flush = alloc_aligned(topo.flush_bytes);
        if (m->flush == NULL) {
            rv = SD_ENOMEM;
        } else {
            m->flush_words = (size_t)(topo.flush_bytes / sizeof(uint64_t));
            memset(m->flush, 0, m->flush_words * sizeof(uint64_t));
        }
    }
    pthread_mutex_unlock(&m->mu);
    return rv;
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
    return o->abort != NULL && *o->abort;
}

/* The timed loop proper; the caller has pinned the thread.  Returns 0 or
 * SD_ECANCELED. */
static int time_steps(struct cpu_shard *s, const struct kern_timing_opts *o,
                      double *samples)
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
        if (o->flush)
            flush_caches(s);
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
    if (o->flush && flush_buffer_get(s->device) != 0) {
        free(samples);
        return SD_ENOMEM;
    }

    CPU_ZERO(&one);
    CPU_SET(s->core, &one);
    restore = pthread_getaffinity_np(pthread_self(), sizeof(old), &old) == 0;
    pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
    s->abort = o->abort;
    rv = time_steps(s, o, samples);
    s->abort = NULL;
    if (restore)
        pthread_setaffinity_np(pthread_self(), sizeof(old), &old);

    if (rv == 0)
        kern_timing_summarize(samples, o->repeats, out);
    free(samples);
    return rv;
}

const struct kern_backend kern_backend_cpu = {
    .name = "cpu",
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
