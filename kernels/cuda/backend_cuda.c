/*
 * The cuda backend: host logic of the fused table-batched embedding bag on
 * one GPU per device (memory, copies, streams, timing, error mapping); the
 * kernels are in tbe.cu.  Built only when the build found nvcc.
 *
 * A shard holds, in plain cudaMalloc memory allocated once at open, all its
 * tables' weights back to back, the lookups of all tables concatenated with
 * offsets rebased onto them (FBGEMM's layout), the pooled output and a
 * seeded timing gradient.  Weights are fp32: a table of another dtype is
 * refused until tbe.cu learns it.  A table off HBM (enum kern_tier) keeps
 * its rows in pinned, mapped host memory instead, and a cache's rows in
 * the shard's weights (tier_cuda.c).  Every call selects the shard's device
 * first, as calls come from worker threads.  CUDA errors become SD_ENOMEM
 * (failed allocations) or SD_EDEVICE here and nowhere else, with the error's
 * name and file:line in the sd_diag (the shard keeps the last one); nothing
 * here prints or exits.  After a sticky error (a faulting kernel) the CUDA
 * context is unusable until the process restarts, so the backend then
 * reports no devices and refuses new shards.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "kern_internal.h"

/* What a struct kern_shard * points to on this backend. */
struct cuda_shard {
    struct kern_cuda_tbe tbe;       /* device arrays and geometry */
    struct kern_cuda_table *tables; /* host copy of tbe.tables */
    int64_t *rows;                  /* rows of each table */
    size_t ntables;
    int32_t device;
    float lr;
    cudaStream_t stream;
    cudaEvent_t start, stop;
    float *pooled;                /* device, nbags x width */
    float *grad;                  /* device, fixed timing gradient */
    float *grad_step;             /* device, shard_step's gradient */
    struct kern_cuda_tiers tiers; /* tables off HBM (zeroed: none) */
    void *flush;                  /* device, 2 x L2, at first use */
    size_t flush_bytes;
    uint32_t flush_value;
    struct sd_diag diag; /* the last error's detail */
};

static atomic_bool broken; /* a sticky error spoiled the context */

static struct cuda_shard *to_cuda(struct kern_shard *s)
{
    return (struct cuda_shard *)s;
}

/* Errors after which the context must be recreated (CUDA runtime API
 * documentation: "the process must be terminated and relaunched"). */
static bool is_sticky(cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
        return true;
    default:
        return false;
    }
}

/*
 * The one place CUDA errors become SD_E* codes: 0 for cudaSuccess, else
 * SD_ENOMEM for a failed allocation and SD_EDEVICE for anything else, with
 * the call, the error's name and where it happened in d.
 */
int kern_cuda__status(struct sd_diag *d, cudaError_t e, const char *what,
                      const char *file, int line)
{
    if (e == cudaSuccess)
        return 0;
    (void)cudaGetLastError(); /* clear a non-sticky error */
    if (is_sticky(e))
        atomic_store(&broken, true);
    return sd_diag_set(d,
                       e == cudaErrorMemoryAllocation ? SD_ENOMEM : SD_EDEVICE,
                       "cuda: %s: %s (%s) at %s:%d", what, cudaGetErrorName(e),
                       cudaGetErrorString(e), file, line);
}

bool kern_cuda__broken(void)
{
    return atomic_load(&broken);
}

/* When this process last used each device (kern__now_ms(), 0: never). */
static _Atomic double last_use[KERN_CUDA_MAX_DEVICES];

void kern_cuda__touch(int32_t device)
{
    if (device >= 0 && device < KERN_CUDA_MAX_DEVICES)
        atomic_store(&last_use[device], kern__now_ms());
}

int64_t kern_cuda__idle_ms(int32_t device)
{
    double t = 0;

    if (device >= 0 && device < KERN_CUDA_MAX_DEVICES)
        t = atomic_load(&last_use[device]);
    return t == 0 ? INT64_MAX : (int64_t)(kern__now_ms() - t);
}

/* No GPU, no driver, or a too-old driver all mean zero devices: the
 * runtime is linked statically, so this never fails to load. */
static int cuda_device_count(void)
{
    int n = 0;

    if (atomic_load(&broken))
        return 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

static int cuda_device_info(int32_t device, struct kern_device_info *out)
{
    struct cudaDeviceProp prop;

    if (device < 0 || device >= cuda_device_count())
        return SD_EINVAL;
    if (KERN_CUDA_STATUS(NULL, cudaGetDeviceProperties(&prop, device)) != 0)
        return SD_EDEVICE;
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%.*s", (int)sizeof(out->name) - 1,
             prop.name);
    memcpy(out->model, out->name, sizeof(out->model));
    out->mem_bytes = prop.totalGlobalMem;
    out->index = device;
    return 0;
}

static void cuda_shard_close(struct kern_shard *ks)
{
    struct cuda_shard *s = to_cuda(ks);

    if (s == NULL)
        return;
    /* Errors here cannot be acted on; the memory goes with the context
     * anyway if it is broken. */
    (void)cudaSetDevice(s->device);
    if (s->stream != NULL)
        (void)cudaStreamSynchronize(s->stream);
    (void)cudaFree(s->tbe.weights);
    (void)cudaFree((void *)s->tbe.indices);
    (void)cudaFree((void *)s->tbe.offsets);
    (void)cudaFree((void *)s->tbe.tables);
    (void)cudaFree(s->pooled);
    (void)cudaFree(s->grad);
    (void)cudaFree(s->grad_step);
    (void)cudaFree(s->flush);
    kern_cuda__tiers_close(&s->tiers);
    if (s->start != NULL)
        (void)cudaEventDestroy(s->start);
    if (s->stop != NULL)
        (void)cudaEventDestroy(s->stop);
    if (s->stream != NULL)
        (void)cudaStreamDestroy(s->stream);
    (void)cudaGetLastError();
    free(s->tables);
    free(s->rows);
    free(s);
}

/* cudaMalloc of at least one byte, so that empty arrays are not NULL. */
static int dev_alloc(void **p, uint64_t bytes, struct sd_diag *d)
{
    if (bytes > SIZE_MAX)
        return sd_diag_set(d, SD_ENOMEM, "cuda: %llu bytes",
                           (unsigned long long)bytes);
    return KERN_CUDA_STATUS(d, cudaMalloc(p, bytes > 0 ? (size_t)bytes : 1));
}

/* Host-side geometry: per-table metadata and the rebased offsets. */
static int shard_layout(struct cuda_shard *s,
                        const struct kern_shard_desc *desc, int64_t **offsets,
                        uint64_t *nweights, uint64_t *nindices)
{
    uint64_t nw = 0, ni = 0;
    int64_t *off, b;
    size_t t;
    int32_t col = 0;

    s->tables = calloc(desc->ntables, sizeof(*s->tables));
    s->rows = calloc(desc->ntables, sizeof(*s->rows));
    off = calloc(desc->ntables * (size_t)desc->nbags + 1, sizeof(*off));
    if (s->tables == NULL || s->rows == NULL || off == NULL) {
        free(off);
        return SD_ENOMEM;
    }
    for (t = 0; t < desc->ntables; t++) {
        s->tables[t].w_off = (int64_t)nw;
        s->tables[t].dim = desc->tables[t].dim;
        s->tables[t].col = col;
        s->tables[t].tier = (int32_t)desc->tables[t].tier;
        s->rows[t] = desc->tables[t].rows;
        for (b = 0; b < desc->nbags; b++)
            off[t * (size_t)desc->nbags + (size_t)b] =
                (int64_t)ni + desc->tables[t].offsets[b];
        col += desc->tables[t].dim;
        nw +=
            kern__device_rows(&desc->tables[t]) * (uint64_t)desc->tables[t].dim;
        ni += (uint64_t)desc->tables[t].nindices;
    }
    off[desc->ntables * (size_t)desc->nbags] = (int64_t)ni;
    *offsets = off;
    *nweights = nw;
    *nindices = ni;
    return 0;
}

/* Allocates the device arrays of s and uploads and fills them; the tables
 * off HBM are kern_cuda__tiers_open()'s. */
static int shard_upload(struct cuda_shard *s,
                        const struct kern_shard_desc *desc,
                        const int64_t *offsets, uint64_t nw, uint64_t ni,
                        struct sd_diag *d)
{
    uint64_t npooled = (uint64_t)desc->nbags * (uint64_t)s->tbe.width;
    uint64_t noff = desc->ntables * (uint64_t)desc->nbags + 1, base = 0;
    const struct kern_table_desc *td;
    const struct {
        void **p;
        uint64_t bytes;
    } allocs[] = {
        {(void **)&s->tbe.weights, nw * sizeof(float)},
        {(void **)&s->tbe.indices, ni * sizeof(int64_t)},
        {(void **)&s->tbe.offsets, noff * sizeof(int64_t)},
        {(void **)&s->tbe.tables, desc->ntables * sizeof(*s->tables)},
        {(void **)&s->pooled, npooled * sizeof(float)},
        {(void **)&s->grad, npooled * sizeof(float)},
    };
    int64_t *indices;
    size_t t, i;
    int rv = 0;

    for (i = 0; i < sizeof(allocs) / sizeof(allocs[0]); i++) {
        rv = dev_alloc(allocs[i].p, allocs[i].bytes, d);
        if (rv != 0)
            return rv;
    }
    indices = (int64_t *)s->tbe.indices;
    for (t = 0; t < desc->ntables; t++) {
        td = &desc->tables[t];
        base += (uint64_t)td->nindices;
        if (td->tier != KERN_TIER_HBM)
            continue;
        if (td->nindices > 0)
            rv = KERN_CUDA_STATUS(
                d, cudaMemcpyAsync(indices + base - (uint64_t)td->nindices,
                                   td->indices,
                                   (size_t)td->nindices * sizeof(int64_t),
                                   cudaMemcpyHostToDevice, s->stream));
        if (rv == 0)
            rv = KERN_CUDA_STATUS(
                d, kern_cuda_fill(s->tbe.weights + s->tables[t].w_off,
                                  (uint64_t)td->rows * (uint64_t)td->dim,
                                  kern__stream_key(desc->seed, t),
                                  KERN_WEIGHT_SCALE, s->stream));
        if (rv != 0)
            return rv;
    }
    s->tbe.tiered = kern_cuda__tiered(desc);
    if (s->tbe.tiered)
        rv = kern_cuda__tiers_open(&s->tiers, desc, s->tables, s->tbe.weights,
                                   indices, s->stream, d);
    if (rv == 0)
        rv = KERN_CUDA_STATUS(
            d, cudaMemcpyAsync((void *)s->tbe.offsets, offsets,
                               noff * sizeof(int64_t), cudaMemcpyHostToDevice,
                               s->stream));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(
            d, cudaMemcpyAsync((void *)s->tbe.tables, s->tables,
                               desc->ntables * sizeof(*s->tables),
                               cudaMemcpyHostToDevice, s->stream));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(
            d, kern_cuda_fill(s->grad, npooled,
                              kern__stream_key(desc->seed, KERN_STREAM_GRAD),
                              KERN_GRAD_SCALE, s->stream));
    if (rv != 0)
        return rv;
    /* The description's arrays are borrowed: done with them before
     * returning. */
    return KERN_CUDA_STATUS(d, cudaStreamSynchronize(s->stream));
}

/*
 * The TBE kernels (tbe.cu) read and write fp32 weights; until they learn
 * fp16 and bf16, such a table is refused rather than timed as fp32, which
 * would move twice its bytes.
 */
static int fp32_only(const struct kern_shard_desc *desc, struct sd_diag *d)
{
    size_t t;

    for (t = 0; t < desc->ntables; t++) {
        if (desc->tables[t].dtype != KERN_DTYPE_FP32)
            return sd_diag_set(d, SD_EUNSUPPORTED,
                               "tables[%zu]: %s: the cuda backend times "
                               "fp32 weights only",
                               t, kern_dtype_name(desc->tables[t].dtype));
    }
    return 0;
}

static int cuda_shard_open(int32_t device, const struct kern_shard_desc *desc,
                           struct kern_shard **out, struct sd_diag *d)
{
    struct cuda_shard *s = NULL;
    int64_t *offsets = NULL;
    uint64_t need, nw, ni;
    size_t free_b = 0, total_b = 0;
    int rv;

    if (atomic_load(&broken))
        return sd_diag_set(d, SD_EDEVICE,
                           "cuda: context unusable after an "
                           "earlier device error; restart the process");
    if (device < 0 || device >= cuda_device_count())
        return sd_diag_set(d, SD_EINVAL, "cuda: no device %d", (int)device);
    rv = kern__shard_check(desc, d);
    if (rv != 0)
        return rv;
    rv = fp32_only(desc, d);
    if (rv == 0)
        rv = kern__tiers_check(&kern_backend_cuda, desc, d);
    if (rv != 0)
        return rv;
    rv = KERN_CUDA_STATUS(d, cudaSetDevice(device));
    kern_cuda__touch(device);
    if (rv == 0)
        rv = KERN_CUDA_STATUS(d, cudaMemGetInfo(&free_b, &total_b));
    if (rv != 0)
        return rv;
    need = kern__shard_bytes(desc); /* in device memory: the tiers' share */
    if (need > free_b)
        return sd_diag_set(
            d, SD_ENOMEM,
            "cuda device %d: shard needs %llu MiB, "
            "%llu MiB free (and %llu MiB of host memory)",
            (int)device, (unsigned long long)(need >> 20),
            (unsigned long long)(free_b >> 20),
            (unsigned long long)(kern__shard_host_bytes(desc) >> 20));

    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return sd_diag_set(d, SD_ENOMEM, "cuda: out of host memory");
    s->device = device;
    s->ntables = desc->ntables;
    s->lr = desc->learning_rate;
    s->tbe.nbags = desc->nbags;
    s->tbe.ntables = (int32_t)desc->ntables;
    s->tbe.width = kern__shard_width(desc);
    rv = shard_layout(s, desc, &offsets, &nw, &ni);
    if (rv != 0) {
        sd_diag_set(d, rv, "cuda: out of host memory");
        goto fail_close_shard;
    }
    rv = KERN_CUDA_STATUS(
        d, cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(d, cudaEventCreate(&s->start));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(d, cudaEventCreate(&s->stop));
    if (rv == 0)
        rv = shard_upload(s, desc, offsets, nw, ni, d);
    if (rv != 0)
        goto fail_close_shard;
    free(offsets);
    *out = (struct kern_shard *)s;
    return 0;

fail_close_shard:
    free(offsets);
    cuda_shard_close((struct kern_shard *)s);
    return rv;
}

/* shard_step's gradient: the caller's, copied to the device, or the
 * shard's fixed timing gradient when grad_pooled is NULL. */
static int step_grad(struct cuda_shard *s, const float *grad_pooled,
                     size_t bytes, const float **g)
{
    int rv = 0;

    *g = s->grad;
    if (grad_pooled == NULL)
        return 0;
    if (s->grad_step == NULL)
        rv = dev_alloc((void **)&s->grad_step, bytes, &s->diag);
    if (rv == 0)
        rv = KERN_CUDA_STATUS(
            &s->diag, cudaMemcpyAsync(s->grad_step, grad_pooled, bytes,
                                      cudaMemcpyHostToDevice, s->stream));
    if (rv == 0)
        *g = s->grad_step;
    return rv;
}

static int cuda_shard_step(struct kern_shard *ks, float *pooled,
                           const float *grad_pooled)
{
    struct cuda_shard *s = to_cuda(ks);
    struct sd_diag *d = &s->diag;
    size_t bytes = (size_t)s->tbe.nbags * (size_t)s->tbe.width * sizeof(float);
    const float *g = NULL;
    int rv;

    rv = KERN_CUDA_STATUS(d, cudaSetDevice(s->device));
    if (rv == 0)
        rv = step_grad(s, grad_pooled, bytes, &g);
    if (rv == 0)
        rv = KERN_CUDA_STATUS(
            d, kern_cuda_tbe_forward(&s->tbe, s->pooled, s->stream));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(
            d, kern_cuda_tbe_backward_sgd(&s->tbe, g, s->lr, s->stream));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(d, kern_cuda_tbe_host_sgd(&s->tbe, &s->tiers.rows,
                                                        g, s->lr, s->stream));
    if (rv == 0 && pooled != NULL)
        rv = KERN_CUDA_STATUS(d, cudaMemcpyAsync(pooled, s->pooled, bytes,
                                                 cudaMemcpyDeviceToHost,
                                                 s->stream));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(d, cudaStreamSynchronize(s->stream));
    return rv;
}

static int cuda_shard_read_weights(struct kern_shard *ks, size_t t, float *out)
{
    struct cuda_shard *s = to_cuda(ks);
    struct sd_diag *d = &s->diag;
    int rv;

    if (t >= s->ntables)
        return SD_EINVAL;
    rv = KERN_CUDA_STATUS(d, cudaSetDevice(s->device));
    if (rv == 0 && s->tables[t].tier != KERN_TIER_HBM)
        return kern_cuda__tiers_read(&s->tiers, t, &s->tables[t], s->rows[t],
                                     s->tbe.weights, out, s->stream, d);
    if (rv == 0)
        rv = KERN_CUDA_STATUS(
            d, cudaMemcpyAsync(out, s->tbe.weights + s->tables[t].w_off,
                               (size_t)s->rows[t] * (size_t)s->tables[t].dim *
                                   sizeof(float),
                               cudaMemcpyDeviceToHost, s->stream));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(d, cudaStreamSynchronize(s->stream));
    return rv;
}

/* Allocates the L2 flush buffer: twice the device's L2. */
static int flush_alloc(struct cuda_shard *s)
{
    int l2 = 0, rv;

    rv = KERN_CUDA_STATUS(
        &s->diag,
        cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, s->device));
    if (rv != 0)
        return rv;
    if (l2 <= 0)
        l2 = 64 << 20;
    s->flush_bytes = 2 * (size_t)l2;
    return dev_alloc(&s->flush, s->flush_bytes, &s->diag);
}

/* One step: forward, then backward + SGD, on the shard's stream. */
static int enqueue_step(struct cuda_shard *s)
{
    int rv;

    rv = KERN_CUDA_STATUS(&s->diag,
                          kern_cuda_tbe_forward(&s->tbe, s->pooled, s->stream));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(
            &s->diag,
            kern_cuda_tbe_backward_sgd(&s->tbe, s->grad, s->lr, s->stream));
    if (rv == 0) /* the rows in host memory: nothing for an all-HBM shard */
        rv = KERN_CUDA_STATUS(
            &s->diag, kern_cuda_tbe_host_sgd(&s->tbe, &s->tiers.rows, s->grad,
                                             s->lr, s->stream));
    return rv;
}

/* One timed step between two events, after an optional L2 flush. */
static int timed_step(struct cuda_shard *s, bool flush, double *ms)
{
    struct sd_diag *d = &s->diag;
    float elapsed = 0.0f;
    int rv = 0;

    if (flush)
        rv = KERN_CUDA_STATUS(d, kern_cuda_flush(s->flush, s->flush_bytes,
                                                 ++s->flush_value, s->stream));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(d, cudaEventRecord(s->start, s->stream));
    if (rv == 0)
        rv = enqueue_step(s);
    if (rv == 0)
        rv = KERN_CUDA_STATUS(d, cudaEventRecord(s->stop, s->stream));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(d, cudaEventSynchronize(s->stop));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(
            d, cudaEventElapsedTime(&elapsed, s->start, s->stop));
    if (rv == 0)
        *ms = (double)elapsed;
    return rv;
}

static int cuda_shard_time(struct kern_shard *ks,
                           const struct kern_timing_opts *o,
                           struct kern_timing *out)
{
    struct cuda_shard *s = to_cuda(ks);
    struct kern_timing_opts def;
    double *samples;
    int r, rv;

    if (o == NULL) {
        kern_timing_opts_default(&def);
        o = &def;
    }
    if (o->warmup < 0 || o->repeats < 1)
        return SD_EINVAL;
    rv = KERN_CUDA_STATUS(&s->diag, cudaSetDevice(s->device));
    if (rv == 0 && o->flush && s->flush == NULL)
        rv = flush_alloc(s);
    if (rv != 0)
        return rv;
    samples = calloc((size_t)o->repeats, sizeof(*samples));
    if (samples == NULL)
        return SD_ENOMEM;
    for (r = 0; r < o->warmup && rv == 0; r++)
        rv = o->abort != NULL && atomic_load(o->abort) != 0 ? SD_ECANCELED
                                                            : enqueue_step(s);
    if (rv == 0)
        rv = KERN_CUDA_STATUS(&s->diag, cudaStreamSynchronize(s->stream));
    for (r = 0; r < o->repeats && rv == 0; r++)
        rv = o->abort != NULL && atomic_load(o->abort) != 0
                 ? SD_ECANCELED
                 : timed_step(s, o->flush, &samples[r]);
    if (rv == 0)
        kern_timing_summarize(samples, o->repeats, out);
    kern_cuda__touch(s->device);
    free(samples);
    return rv;
}

const struct kern_backend kern_backend_cuda = {
    .name = "cuda",
    .dtypes = 1u << KERN_DTYPE_FP32, /* tbe.cu: fp32 weights only */
    /* Host memory pinned and mapped, a cache's rows in device memory
     * (tier_cuda.c): compiled, not yet run on a GPU (docs/gpu.md). */
    .tiers =
        1u << KERN_TIER_HBM | 1u << KERN_TIER_UVM | 1u << KERN_TIER_UVM_CACHING,
    .device_count = cuda_device_count,
    .device_info = cuda_device_info,
    .shard_open = cuda_shard_open,
    .shard_close = cuda_shard_close,
    .shard_step = cuda_shard_step,
    .shard_read_weights = cuda_shard_read_weights,
    .shard_time = cuda_shard_time,
    .net_open = kern_cuda_net_open,
    .net_score = kern_cuda_net_score,
    .net_close = kern_cuda_net_close,
    .blas_open = kern_cuda_blas_open,
    .blas_sgemm = kern_cuda_blas_sgemm,
    .blas_close = kern_cuda_blas_close,
#ifdef SHARDD_HAVE_NCCL
    .comm_open = kern_cuda_comm_open,
    .comm_run = kern_cuda_comm_run,
    .comm_close = kern_cuda_comm_close,
#endif /* SHARDD_HAVE_NCCL */
    .device_load = kern_cuda_device_load,
};
