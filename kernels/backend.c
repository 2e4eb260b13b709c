/*
 * Backend selection (kernels/kernels.h) and what every backend shares: the
 * shard-description check and footprint, timing defaults and the summary
 * of timed samples.  The list of backends lives here and only here; the
 * cuda backend exists when the build found nvcc (SHARDD_HAVE_CUDA).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern_internal.h"
#include "shardd/sort.h"

/* Shards bigger than this are rejected as descriptions, so that byte
 * counts below never overflow: 2^60 bytes is far beyond any device. */
#define KERN_MAX_BYTES (UINT64_C(1) << 60)

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int cuda_devices; /* GPUs that answered the probe (0 if not built) */

/* Asks the cuda backend, once per process, how many GPUs answer. */
static void probe(void)
{
#ifdef SHARDD_HAVE_CUDA
    cuda_devices = kern_backend_cuda.device_count();
#else
    cuda_devices = 0;
#endif /* SHARDD_HAVE_CUDA */
}

bool kern_have_cuda(void)
{
#ifdef SHARDD_HAVE_CUDA
    return true;
#else
    return false;
#endif /* SHARDD_HAVE_CUDA */
}

int kern_lib_probe(const char *name, char *detail, size_t cap)
{
    struct sd_diag d;
    int rv;

    d.msg[0] = '\0';
    if (strcmp(name, "cublas") != 0 && strcmp(name, "nccl") != 0 &&
        strcmp(name, "nvml") != 0)
        rv = sd_diag_set(&d, SD_EINVAL, "unknown library \"%s\"", name);
#ifdef SHARDD_HAVE_CUDA
    else if (strcmp(name, "nccl") == 0 && kern_backend_cuda.comm_open == NULL)
        rv = sd_diag_set(&d, SD_EUNSUPPORTED,
                         "built without nccl.h: no collectives");
    else
        rv = kern__cuda_lib_probe(name, &d);
#else
    else
        rv = sd_diag_set(&d, SD_EUNSUPPORTED,
                         "not built with CUDA (no nvcc at build time)");
#endif /* SHARDD_HAVE_CUDA */
    if (detail != NULL && cap > 0)
        snprintf(detail, cap, "%s", d.msg);
    return rv;
}

/* The backend called `name` ("cpu" or "cuda"), or NULL with d set. */
static const struct kern_backend *backend_named(const char *name,
                                                struct sd_diag *d)
{
    if (strcmp(name, "cpu") == 0)
        return &kern_backend_cpu;
    if (strcmp(name, "cuda") == 0) {
#ifdef SHARDD_HAVE_CUDA
        if (cuda_devices > 0)
            return &kern_backend_cuda;
        sd_diag_set(d, SD_EUNSUPPORTED,
                    "backend \"cuda\": no GPU answered (no device or no "
                    "driver)");
#else
        sd_diag_set(d, SD_EUNSUPPORTED,
                    "backend \"cuda\": not built (no nvcc at build time)");
#endif /* SHARDD_HAVE_CUDA */
        return NULL;
    }
    sd_diag_set(d, SD_EINVAL,
                "unknown backend \"%s\" (expected cpu, cuda or auto)", name);
    return NULL;
}

/*
 * The probe (cuda's device count) runs once; SHARDD_BACKEND is read on
 * every "auto" call, which costs nothing and lets tests change it.
 */
const struct kern_backend *kern_backend_get(const char *name, struct sd_diag *d)
{
    const struct kern_backend *be;
    struct sd_diag inner;
    const char *env;

    pthread_once(&probe_once, probe);
    if (name != NULL && strcmp(name, "auto") != 0)
        return backend_named(name, d);

    env = getenv("SHARDD_BACKEND");
    if (env != NULL && env[0] != '\0' && strcmp(env, "auto") != 0) {
        inner.msg[0] = '\0';
        be = backend_named(env, &inner);
        if (be == NULL)
            sd_diag_set(d, SD_EINVAL, "SHARDD_BACKEND: %s", inner.msg);
        return be;
    }
    return cuda_devices > 0 ? backend_named("cuda", d) : &kern_backend_cpu;
}

const char *kern_dtype_name(enum kern_dtype dtype)
{
    switch (dtype) {
    case KERN_DTYPE_FP32:
        return "fp32";
    case KERN_DTYPE_FP16:
        return "fp16";
    case KERN_DTYPE_BF16:
        return "bf16";
    default:
        return "?";
    }
}

size_t kern_dtype_size(enum kern_dtype dtype)
{
    switch (dtype) {
    case KERN_DTYPE_FP32:
        return sizeof(float);
    case KERN_DTYPE_FP16:
    case KERN_DTYPE_BF16:
        return sizeof(uint16_t);
    default:
        return 0;
    }
}

const char *kern_tier_name(enum kern_tier tier)
{
    switch (tier) {
    case KERN_TIER_HBM:
        return "fused";
    case KERN_TIER_UVM:
        return "fused_uvm";
    case KERN_TIER_UVM_CACHING:
        return "fused_uvm_caching";
    default:
        return "?";
    }
}

int kern__tiers_check(const struct kern_backend *be,
                      const struct kern_shard_desc *desc, struct sd_diag *d)
{
    size_t t;

    for (t = 0; t < desc->ntables; t++) {
        if ((be->tiers & (1u << desc->tables[t].tier)) == 0)
            return sd_diag_set(d, SD_EUNSUPPORTED,
                               "tables[%zu]: %s is not timed on the %s "
                               "backend, which times tables in device "
                               "memory only: there its host-link time is "
                               "modelled",
                               t, kern_tier_name(desc->tables[t].tier),
                               be->name);
    }
    return 0;
}

void kern_timing_opts_default(struct kern_timing_opts *o)
{
    o->warmup = 5;
    o->repeats = 10;
    o->flush = true;
    o->abort = NULL;
}

/* Quantile q of n sorted samples, interpolating linearly between the two
 * nearest ranks (numpy's default): position q * (n - 1). */
static double quantile(const double *sorted, int n, double q)
{
    double pos = q * (double)(n - 1);
    int lo = (int)floor(pos);
    double frac = pos - (double)lo;

    if (lo >= n - 1)
        return sorted[n - 1];
    return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

void kern_timing_summarize(double *samples_ms, int n, struct kern_timing *out)
{
    qsort(samples_ms, (size_t)n, sizeof(*samples_ms), sd_cmp_double);
    out->median_ms = quantile(samples_ms, n, 0.5);
    out->min_ms = samples_ms[0];
    out->max_ms = samples_ms[n - 1];
    out->p10_ms = quantile(samples_ms, n, 0.1);
    out->p90_ms = quantile(samples_ms, n, 0.9);
    out->repeats = n;
}

/* *acc += a * b, failing (false) past KERN_MAX_BYTES. */
static bool add_product(uint64_t *acc, uint64_t a, uint64_t b)
{
    if (b != 0 && a > KERN_MAX_BYTES / b)
        return false;
    if (a * b > KERN_MAX_BYTES - *acc)
        return false;
    *acc += a * b;
    return true;
}

/* Checks table t's CSR arrays: offsets and every index. */
static int check_lookups(const struct kern_table_desc *tb, size_t t,
                         int64_t nbags, struct sd_diag *d)
{
    int64_t b, i;

    if (tb->offsets == NULL || (tb->nindices > 0 && tb->indices == NULL))
        return sd_diag_set(d, SD_EINVAL,
                           "tables[%zu]: offsets or indices missing", t);
    if (tb->offsets[0] != 0 || tb->offsets[nbags] != tb->nindices)
        return sd_diag_set(d, SD_EINVAL,
                           "tables[%zu]: offsets must run from 0 to "
                           "nindices %lld",
                           t, (long long)tb->nindices);
    for (b = 0; b < nbags; b++) {
        if (tb->offsets[b + 1] < tb->offsets[b])
            return sd_diag_set(d, SD_EINVAL,
                               "tables[%zu]: offsets[%lld] decreases", t,
                               (long long)b + 1);
    }
    for (i = 0; i < tb->nindices; i++) {
        if (tb->indices[i] < 0 || tb->indices[i] >= tb->rows)
            return sd_diag_set(d, SD_EINVAL,
                               "tables[%zu]: indices[%lld] = %lld is not "
                               "in [0, rows %lld)",
                               t, (long long)i, (long long)tb->indices[i],
                               (long long)tb->rows);
    }
    return 0;
}

/* Checks table t's tier and cache rows. */
static int check_tier(const struct kern_table_desc *tb, size_t t,
                      struct sd_diag *d)
{
    if ((unsigned)tb->tier >= KERN_TIER_COUNT)
        return sd_diag_set(d, SD_EINVAL,
                           "tables[%zu]: tier %d is not fused, fused_uvm or "
                           "fused_uvm_caching",
                           t, (int)tb->tier);
    if (tb->tier != KERN_TIER_UVM_CACHING && tb->cache_rows != 0)
        return sd_diag_set(d, SD_EINVAL,
                           "tables[%zu]: cache_rows %lld on a %s table (only "
                           "fused_uvm_caching has a cache)",
                           t, (long long)tb->cache_rows,
                           kern_tier_name(tb->tier));
    if (tb->cache_rows < 0 || tb->cache_rows > tb->rows)
        return sd_diag_set(d, SD_EINVAL,
                           "tables[%zu]: cache_rows %lld is not in [0, rows "
                           "%lld]",
                           t, (long long)tb->cache_rows, (long long)tb->rows);
    return 0;
}

int kern__shard_check(const struct kern_shard_desc *desc, struct sd_diag *d)
{
    const struct kern_table_desc *tb;
    uint64_t bytes = 0, width = 0;
    size_t t;
    int rv;

    if (desc == NULL || desc->ntables == 0 || desc->tables == NULL)
        return sd_diag_set(d, SD_EINVAL, "shard: no tables");
    if (desc->nbags < 1)
        return sd_diag_set(d, SD_EINVAL, "shard: nbags %lld must be >= 1",
                           (long long)desc->nbags);
    if (!isfinite(desc->learning_rate))
        return sd_diag_set(d, SD_EINVAL, "shard: learning_rate not finite");
    for (t = 0; t < desc->ntables; t++) {
        tb = &desc->tables[t];
        if (tb->rows < 1)
            return sd_diag_set(d, SD_EINVAL,
                               "tables[%zu]: rows %lld must be >= 1", t,
                               (long long)tb->rows);
        if (tb->dim < 4 || tb->dim % 4 != 0)
            return sd_diag_set(d, SD_EINVAL,
                               "tables[%zu]: dim %d is not a positive "
                               "multiple of 4",
                               t, (int)tb->dim);
        if (tb->nindices < 0)
            return sd_diag_set(d, SD_EINVAL, "tables[%zu]: nindices %lld < 0",
                               t, (long long)tb->nindices);
        if (kern_dtype_size(tb->dtype) == 0)
            return sd_diag_set(d, SD_EINVAL,
                               "tables[%zu]: dtype %d is not fp32, fp16 or "
                               "bf16",
                               t, (int)tb->dtype);
        rv = check_tier(tb, t, d);
        if (rv != 0)
            return rv;
        width += (uint64_t)tb->dim;
        if (!add_product(&bytes, (uint64_t)tb->rows,
                         (uint64_t)tb->dim * kern_dtype_size(tb->dtype)) ||
            !add_product(&bytes, (uint64_t)tb->nindices, sizeof(int64_t)) ||
            !add_product(&bytes, (uint64_t)desc->nbags + 1, sizeof(int64_t)))
            return sd_diag_set(d, SD_EINVAL, "tables[%zu]: too large", t);
        rv = check_lookups(tb, t, desc->nbags, d);
        if (rv != 0)
            return rv;
    }
    if (width > INT32_MAX ||
        !add_product(&bytes, (uint64_t)desc->nbags, width * 2 * sizeof(float)))
        return sd_diag_set(d, SD_EINVAL, "shard: pooled output too large");
    return 0;
}

int32_t kern__shard_width(const struct kern_shard_desc *desc)
{
    int32_t width = 0;
    size_t t;

    for (t = 0; t < desc->ntables; t++)
        width += desc->tables[t].dim;
    return width;
}

uint64_t kern__device_rows(const struct kern_table_desc *tb)
{
    switch (tb->tier) {
    case KERN_TIER_UVM:
        return 0;
    case KERN_TIER_UVM_CACHING:
        return (uint64_t)tb->cache_rows;
    default:
        return (uint64_t)tb->rows;
    }
}

uint64_t kern__shard_host_bytes(const struct kern_shard_desc *desc)
{
    const struct kern_table_desc *tb;
    uint64_t bytes = 0;
    size_t t;

    for (t = 0; t < desc->ntables; t++) {
        tb = &desc->tables[t];
        if (tb->tier != KERN_TIER_HBM)
            bytes += (uint64_t)tb->rows * (uint64_t)tb->dim *
                     kern_dtype_size(tb->dtype);
    }
    return bytes;
}

uint64_t kern__shard_bytes(const struct kern_shard_desc *desc)
{
    const struct kern_table_desc *tb;
    uint64_t bytes = 0;
    size_t t;

    for (t = 0; t < desc->ntables; t++) {
        tb = &desc->tables[t];
        bytes += kern__device_rows(tb) * (uint64_t)tb->dim *
                 kern_dtype_size(tb->dtype);
        bytes += (uint64_t)tb->nindices * sizeof(int64_t);
        bytes += ((uint64_t)desc->nbags + 1) * sizeof(int64_t);
    }
    bytes += (uint64_t)desc->nbags * (uint64_t)kern__shard_width(desc) * 2 *
             sizeof(float);
    return bytes;
}
