/*
 * The cuda backend's compute cost model and matrix products (host side;
 * the model's kernels are in net.cu).
 *
 * A net is its parameters in device memory, uploaded once when it is
 * opened (a model's activation), and buffers for a batch's inputs,
 * latents, offsets and scores that grow to the largest batch seen; a
 * mutex serialises the batches of one net, which daemon requests may ask
 * from several threads.  Every batch is one copy in, two launches and one
 * copy out on the net's own stream.
 *
 * Matrix products are cuBLAS's sgemm, loaded at run time (libs.c), on
 * host matrices: each call copies its operands over and its result back,
 * which is what training's host-side loop needs (planner/models/train.c
 * keeps its data on the host).  Row-major C = op(A) op(B) is computed as
 * the column-major C^T = op(B)^T op(A)^T, with no transposition of data.
 * The handle's math mode is CUBLAS_DEFAULT_MATH: fp32 products, no TF32.
 */
#include <cublas_v2.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

_Static_assert(sizeof(size_t) == sizeof(uint64_t),
               "shard offsets go to the device as they are");

struct cuda_net {
    struct kern_cuda_net dn; /* dn.p: the device's copy of the parameters */
    int32_t device;
    pthread_mutex_t mu; /* one batch at a time: the buffers below */
    cudaStream_t stream;
    float *x, *lat;
    uint64_t *off;
    double *ms;
    uint64_t rows_cap, shards_cap; /* what the buffers hold */
};

static void net_free_buffers(struct cuda_net *n)
{
    (void)cudaFree(n->x);
    (void)cudaFree(n->lat);
    (void)cudaFree(n->off);
    (void)cudaFree(n->ms);
    n->x = n->lat = NULL;
    n->off = NULL;
    n->ms = NULL;
    n->rows_cap = n->shards_cap = 0;
}

void kern_cuda_net_close(void *net)
{
    struct cuda_net *n = net;

    if (n == NULL)
        return;
    (void)cudaSetDevice(n->device);
    if (n->stream != NULL)
        (void)cudaStreamSynchronize(n->stream);
    net_free_buffers(n);
    (void)cudaFree((void *)n->dn.p);
    if (n->stream != NULL)
        (void)cudaStreamDestroy(n->stream);
    (void)cudaGetLastError();
    pthread_mutex_destroy(&n->mu);
    free(n);
}

int kern_cuda_net_open(int32_t device, const struct kern_net_dims *dims,
                       const float *params, void **out, uint64_t *bytes,
                       struct sd_diag *d)
{
    size_t np = kern_net_nparams(dims);
    struct kern__net_offsets o;
    struct cuda_net *n;
    void *p = NULL;
    int rv;

    if (kern_cuda__broken())
        return sd_diag_set(d, SD_EDEVICE,
                           "cuda: context unusable after an "
                           "earlier device error; restart");
    n = calloc(1, sizeof(*n));
    if (n == NULL)
        return sd_diag_set(d, SD_ENOMEM, "net: out of host memory");
    pthread_mutex_init(&n->mu, NULL);
    n->device = device;
    kern__net_layout(dims, &o);
    n->dn.in = dims->in;
    n->dn.h1 = dims->h1;
    n->dn.lat = dims->lat;
    n->dn.h2 = dims->h2;
    n->dn.head = dims->head;
    n->dn.w1 = (int64_t)o.w1;
    n->dn.b1 = (int64_t)o.b1;
    n->dn.w2 = (int64_t)o.w2;
    n->dn.b2 = (int64_t)o.b2;
    n->dn.w3 = (int64_t)o.w3;
    n->dn.b3 = (int64_t)o.b3;
    n->dn.w4 = (int64_t)o.w4;
    n->dn.b4 = (int64_t)o.b4;
    rv = KERN_CUDA_STATUS(d, cudaSetDevice(device));
    kern_cuda__touch(device);
    if (rv == 0)
        rv = KERN_CUDA_STATUS(
            d, cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(d, cudaMalloc(&p, np * sizeof(float)));
    n->dn.p = p;
    if (rv == 0)
        rv = KERN_CUDA_STATUS(d, cudaMemcpy(p, params, np * sizeof(float),
                                            cudaMemcpyHostToDevice));
    if (rv != 0) {
        kern_cuda_net_close(n);
        return rv;
    }
    *out = n;
    *bytes = np * sizeof(float);
    return 0;
}

/* Grows the batch buffers to nrows rows and nshards shards (mu held). */
static int net_reserve(struct cuda_net *n, uint64_t nrows, uint64_t nshards,
                       struct sd_diag *d)
{
    uint64_t rows = nrows > n->rows_cap ? nrows : n->rows_cap;
    uint64_t shards = nshards > n->shards_cap ? nshards : n->shards_cap;
    int rv = 0;

    if (rows == n->rows_cap && shards == n->shards_cap)
        return 0;
    /* Room for half again as much, so a growing batch reallocates rarely. */
    rows += rows / 2;
    shards += shards / 2;
    net_free_buffers(n);
    rv = KERN_CUDA_STATUS(
        d, cudaMalloc((void **)&n->x, rows * (uint64_t)n->dn.in * 4));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(
            d, cudaMalloc((void **)&n->lat, rows * (uint64_t)n->dn.lat * 4));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(
            d, cudaMalloc((void **)&n->off, (shards + 1) * sizeof(uint64_t)));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(
            d, cudaMalloc((void **)&n->ms, shards * sizeof(double)));
    if (rv != 0) {
        net_free_buffers(n);
        return rv;
    }
    n->rows_cap = rows;
    n->shards_cap = shards;
    return 0;
}

int kern_cuda_net_score(void *net, const float *x, size_t nrows,
                        const size_t *shard_off, size_t nshards, double *ms,
                        struct sd_diag *d)
{
    struct cuda_net *n = net;
    int rv;

    pthread_mutex_lock(&n->mu);
    rv = KERN_CUDA_STATUS(d, cudaSetDevice(n->device));
    if (rv == 0)
        rv = net_reserve(n, nrows > 0 ? nrows : 1, nshards, d);
    if (rv == 0 && nrows > 0)
        rv = KERN_CUDA_STATUS(
            d, cudaMemcpyAsync(n->x, x, nrows * (size_t)n->dn.in * 4,
                               cudaMemcpyHostToDevice, n->stream));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(
            d, cudaMemcpyAsync(n->off, shard_off, (nshards + 1) * 8,
                               cudaMemcpyHostToDevice, n->stream));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(
            d, kern_cuda_net_latent(&n->dn, n->x, nrows, n->lat, n->stream));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(d, kern_cuda_net_head(&n->dn, n->lat, n->off,
                                                    nshards, n->ms, n->stream));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(
            d, cudaMemcpyAsync(ms, n->ms, nshards * sizeof(double),
                               cudaMemcpyDeviceToHost, n->stream));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(d, cudaStreamSynchronize(n->stream));
    kern_cuda__touch(n->device);
    pthread_mutex_unlock(&n->mu);
    return rv;
}

/* ------------------------------------------------------------------------ */
/* sgemm through cuBLAS                                                      */

/* cuBLAS's entry points, in libs.c's order. */
struct cublas_fns {
    __typeof__(cublasCreate_v2) *create;
    __typeof__(cublasDestroy_v2) *destroy;
    __typeof__(cublasSetStream_v2) *set_stream;
    __typeof__(cublasSetMathMode) *set_math_mode;
    __typeof__(cublasSgemm_v2) *sgemm;
    __typeof__(cublasGetStatusName) *status_name;
};
_Static_assert(sizeof(struct cublas_fns) == 6 * sizeof(void *),
               "libs.c's order");

struct cuda_blas {
    struct cublas_fns f;
    cublasHandle_t h;
    int32_t device;
    cudaStream_t stream;
    float *a, *b, *c;           /* device operands */
    size_t a_cap, b_cap, c_cap; /* floats */
};

/* A cuBLAS status as an SD_E* code, with its name in d. */
static int blas_status(struct cuda_blas *bl, struct sd_diag *d,
                       cublasStatus_t st, const char *what)
{
    if (st == CUBLAS_STATUS_SUCCESS)
        return 0;
    return sd_diag_set(
        d, st == CUBLAS_STATUS_ALLOC_FAILED ? SD_ENOMEM : SD_EDEVICE,
        "cublas: %s: %s", what, bl->f.status_name(st));
}

void kern_cuda_blas_close(void *blas)
{
    struct cuda_blas *bl = blas;

    if (bl == NULL)
        return;
    (void)cudaSetDevice(bl->device);
    if (bl->h != NULL)
        (void)bl->f.destroy(bl->h);
    if (bl->stream != NULL)
        (void)cudaStreamDestroy(bl->stream);
    (void)cudaFree(bl->a);
    (void)cudaFree(bl->b);
    (void)cudaFree(bl->c);
    (void)cudaGetLastError();
    free(bl);
}

int kern_cuda_blas_open(int32_t device, void **out, struct sd_diag *d)
{
    void *const *syms;
    struct cuda_blas *bl;
    int rv;

    rv = kern_cuda__lib(KERN_LIB_CUBLAS, &syms, d);
    if (rv != 0)
        return rv;
    bl = calloc(1, sizeof(*bl));
    if (bl == NULL)
        return sd_diag_set(d, SD_ENOMEM, "blas: out of host memory");
    memcpy(&bl->f, syms, sizeof(bl->f));
    bl->device = device;
    rv = KERN_CUDA_STATUS(d, cudaSetDevice(device));
    kern_cuda__touch(device);
    if (rv == 0)
        rv = KERN_CUDA_STATUS(
            d, cudaStreamCreateWithFlags(&bl->stream, cudaStreamNonBlocking));
    if (rv == 0)
        rv = blas_status(bl, d, bl->f.create(&bl->h), "create");
    if (rv == 0)
        rv = blas_status(bl, d, bl->f.set_stream(bl->h, bl->stream),
                         "set stream");
    if (rv == 0)
        rv = blas_status(bl, d, bl->f.set_math_mode(bl->h, CUBLAS_DEFAULT_MATH),
                         "math mode");
    if (rv != 0) {
        kern_cuda_blas_close(bl);
        return rv;
    }
    *out = bl;
    return 0;
}

/* Makes *p hold at least n floats. */
static int blas_reserve(float **p, size_t *cap, size_t n, struct sd_diag *d)
{
    int rv;

    if (n <= *cap)
        return 0;
    (void)cudaFree(*p);
    *p = NULL;
    *cap = 0;
    rv = KERN_CUDA_STATUS(d, cudaMalloc((void **)p, n * sizeof(float)));
    if (rv == 0)
        *cap = n;
    return rv;
}

/* Copies a rows x cols row-major host matrix of leading dimension ld to
 * the device (same layout), or back. */
static int copy_matrix(void *dst, const void *src, int rows, int cols, int ld,
                       enum cudaMemcpyKind kind, cudaStream_t stream,
                       struct sd_diag *d)
{
    size_t pitch = (size_t)ld * sizeof(float);

    if (rows == 0 || cols == 0)
        return 0;
    return KERN_CUDA_STATUS(d, cudaMemcpy2DAsync(dst, pitch, src, pitch,
                                                 (size_t)cols * sizeof(float),
                                                 (size_t)rows, kind, stream));
}

int kern_cuda_blas_sgemm(void *blas, bool trans_a, bool trans_b, int m, int n,
                         int k, float alpha, const float *a, int lda,
                         const float *b, int ldb, float beta, float *c, int ldc,
                         struct sd_diag *d)
{
    struct cuda_blas *bl = blas;
    /* Stored shapes (rows x cols) of A and B, row-major. */
    int a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
    int b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
    int rv;

    rv = KERN_CUDA_STATUS(d, cudaSetDevice(bl->device));
    if (rv == 0)
        rv = blas_reserve(&bl->a, &bl->a_cap, (size_t)a_rows * (size_t)lda + 1,
                          d);
    if (rv == 0)
        rv = blas_reserve(&bl->b, &bl->b_cap, (size_t)b_rows * (size_t)ldb + 1,
                          d);
    if (rv == 0)
        rv = blas_reserve(&bl->c, &bl->c_cap, (size_t)m * (size_t)ldc + 1, d);
    if (rv == 0)
        rv = copy_matrix(bl->a, a, a_rows, a_cols, lda, cudaMemcpyHostToDevice,
                         bl->stream, d);
    if (rv == 0)
        rv = copy_matrix(bl->b, b, b_rows, b_cols, ldb, cudaMemcpyHostToDevice,
                         bl->stream, d);
    /* beta 0: C is written, never read (NaNs in it do not leak). */
    if (rv == 0 && beta != 0)
        rv = copy_matrix(bl->c, c, m, n, ldc, cudaMemcpyHostToDevice,
                         bl->stream, d);
    if (rv == 0)
        rv = blas_status(bl, d,
                         bl->f.sgemm(bl->h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m,
                                     k, &alpha, bl->b, ldb, bl->a, lda, &beta,
                                     bl->c, ldc),
                         "sgemm");
    if (rv == 0)
        rv = copy_matrix(c, bl->c, m, n, ldc, cudaMemcpyDeviceToHost,
                         bl->stream, d);
    if (rv == 0)
        rv = KERN_CUDA_STATUS(d, cudaStreamSynchronize(bl->stream));
    kern_cuda__touch(bl->device);
    return rv;
}
