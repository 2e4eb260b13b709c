/*
 * The seam between the cuda backend's host logic (backend_cuda.c,
 * net_cuda.c, nccl_cuda.c, nvml_cuda.c, libs.c: C11) and its device code
 * (tbe.cu, net.cu): the argument blocks of the kernels and the extern "C"
 * launch shims, and what the host files share (the error mapping, the
 * run-time libraries, the ops of the vtable).  Each shim enqueues one
 * kernel on a stream and returns the launch status (cudaGetLastError()),
 * never synchronising; the host files map any error to SD_E* codes.
 * Included only under kernels/cuda/.
 */
#ifndef SHARDD_CUDA_INTERNAL_H
#define SHARDD_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kern_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One table of a shard on the device. */
struct kern_cuda_table {
    int64_t w_off; /* first weight of the table's rows in device memory in
                    * the shard's weights: all of them (HBM), its cache (UVM
                    * caching), none (UVM) */
    float *host;   /* UVM tiers: all its rows in mapped host memory, at the
                    * address the device reads them by; NULL in HBM */
    int32_t dim;   /* columns, a multiple of 4 */
    int32_t col;   /* first column of the table in a pooled row */
    int32_t tier;  /* enum kern_tier */
};

/*
 * A shard's fused table-batched embedding bag, as both kernels see it.
 * Bag w = t * nbags + b (table t, bag b) reads
 * indices[offsets[w] .. offsets[w + 1]): every table has nbags bags, so
 * the flattened bag index is its own per-table prefix and a warp finds its
 * table by one division.  A table in HBM has its lookups' rows there; a
 * table off HBM has each lookup's location instead: a row of its device
 * memory (its cache slot, >= 0) or -(row + 1) for a row read from host
 * memory (every lookup of a UVM table), so the kernels pick the pointer
 * by the sign.
 */
struct kern_cuda_tbe {
    float *weights;                       /* device rows, back to back */
    const int64_t *indices;               /* all tables' lookups */
    const int64_t *offsets;               /* ntables * nbags + 1 */
    const struct kern_cuda_table *tables; /* ntables, on the device */
    int64_t nbags;
    int32_t ntables;
    int32_t width;  /* columns of a pooled row: sum of dims */
    int32_t tiered; /* some table is off HBM: the kernels that read host
                     * memory (otherwise those of an all-HBM shard, as
                     * before tiers) */
};

/*
 * The lookups that read host memory, grouped by row for the backward:
 * unique host row u is row row[u] of table table[u], read by the lookups
 * of bags bag[seg[u] .. seg[u + 1]) (in bag order).  A warp adds all of a
 * row's updates and writes it once, so nothing crosses the link
 * atomically and each row read is read and written once a step (FBGEMM's
 * backward, sorted by row, does the same).
 */
struct kern_cuda_host_rows {
    const int64_t *seg;   /* nrows + 1 */
    const int64_t *row;   /* nrows */
    const int32_t *table; /* nrows */
    const int64_t *bag;   /* seg[nrows] */
    int64_t nrows;
};

/* Forward: pooled (nbags x width) = per-bag sums of rows. */
cudaError_t kern_cuda_tbe_forward(const struct kern_cuda_tbe *a, float *pooled,
                                  cudaStream_t stream);

/* Backward + exact SGD: each lookup (b, i) adds -lr * grad[b] to row i;
 * in a tiered shard only the rows in device memory (the host rows are
 * kern_cuda_tbe_host_sgd()'s). */
cudaError_t kern_cuda_tbe_backward_sgd(const struct kern_cuda_tbe *a,
                                       const float *grad, float lr,
                                       cudaStream_t stream);

/* Backward + exact SGD of the rows read from host memory (none: nothing
 * launched). */
cudaError_t kern_cuda_tbe_host_sgd(const struct kern_cuda_tbe *a,
                                   const struct kern_cuda_host_rows *h,
                                   const float *grad, float lr,
                                   cudaStream_t stream);

/* p[s * dim + c] = kern__value(key, rows[s] * dim + c, scale) for s <
 * nrows, c < dim: a cache's slots filled with its rows' initial values. */
cudaError_t kern_cuda_fill_rows(float *p, const int64_t *rows, uint64_t nrows,
                                int32_t dim, uint64_t key, float scale,
                                cudaStream_t stream);

/* p[e] = kern__value(key, e, scale) for e < n (kern_internal.h). */
cudaError_t kern_cuda_fill(float *p, uint64_t n, uint64_t key, float scale,
                           cudaStream_t stream);

/* Writes `bytes` (a multiple of 16) of buf with a value that changes from
 * call to call, evicting everything else from the L2. */
cudaError_t kern_cuda_flush(void *buf, size_t bytes, uint32_t value,
                            cudaStream_t stream);

/* ------------------------------------------------------------------------ */
/* The compute cost model's kernels (net.cu)                                 */

/* A net's parameters on the device, and its shape. */
struct kern_cuda_net {
    const float *p; /* the parameter array (kernels.h's layout) */
    int32_t in, h1, lat, h2;
    int32_t head; /* enum kern_net_head */
    /* offsets of the layers in p */
    int64_t w1, b1, w2, b2, w3, b3, w4, b4;
};

/* lat[r] = relu(W2 relu(W1 x[r] + b1) + b2) for each of nrows rows. */
cudaError_t kern_cuda_net_latent(const struct kern_cuda_net *n, const float *x,
                                 uint64_t nrows, float *lat,
                                 cudaStream_t stream);

/* ms[s] = softplus(b4 + w4 . relu(z)), z = b3 + W3 sum of lat over rows
 * off[s] .. off[s + 1] (a prior head: squareplus of it times z[h2 - 1] +
 * z[h2 - 2] z[h2 - 3]), 0 for an empty shard. */
cudaError_t kern_cuda_net_head(const struct kern_cuda_net *n, const float *lat,
                               const uint64_t *off, uint64_t nshards,
                               double *ms, cudaStream_t stream);

/* ------------------------------------------------------------------------ */
/* Host side shared by the cuda backend's files                              */

#define KERN_CUDA_MAX_DEVICES 64

/*
 * The one place CUDA errors become SD_E* codes (backend_cuda.c): 0 for
 * cudaSuccess, SD_ENOMEM for a failed allocation, SD_EDEVICE otherwise,
 * with the call, the error's name and file:line in d; a sticky error marks
 * the backend broken.
 */
int kern_cuda__status(struct sd_diag *d, cudaError_t e, const char *what,
                      const char *file, int line);
/* Evaluates a CUDA call and maps its status; hides no control flow. */
#define KERN_CUDA_STATUS(d, call)                                              \
    kern_cuda__status((d), (call), #call, __FILE__, __LINE__)
/* Whether a sticky error spoiled the process's CUDA context. */
bool kern_cuda__broken(void);
/* Records that this process used `device` now (for the idle gate). */
void kern_cuda__touch(int32_t device);
/* Milliseconds since this process last used `device` (INT64_MAX: never). */
int64_t kern_cuda__idle_ms(int32_t device);

/*
 * Libraries the backend loads at run time, so that binaries start where
 * they are missing (libs.c): cuBLAS ("libcublas.so.13", or the path in
 * $SHARDD_CUBLAS_LIB), NCCL ("libnccl.so.2", $SHARDD_NCCL_LIB) and NVML
 * ("libnvidia-ml.so.1", $SHARDD_NVML_LIB).  Each is opened once per
 * process and every symbol resolved; a failure is remembered.  Returns 0
 * with *syms filled (an array of function pointers in the order of
 * `names`), or SD_EUNSUPPORTED with d saying what is missing.
 */
enum kern_cuda_lib { KERN_LIB_CUBLAS, KERN_LIB_NCCL, KERN_LIB_NVML };
int kern_cuda__lib(enum kern_cuda_lib lib, void *const **syms,
                   struct sd_diag *d);

/*
 * What a shard keeps for its tables off HBM (tier_cuda.c): their rows in
 * pinned, mapped host memory, each cache's rows, and the host reads
 * grouped by row for the backward.
 */
struct kern_cuda_tiers {
    float *host;      /* every tiered table's rows, back to back */
    float *host_dev;  /* the same, as the device addresses it */
    int64_t *h_off;   /* per table: its first weight in host */
    int64_t **cached; /* per table: the row in each cache slot (UVM caching;
                       * else NULL) */
    int64_t *ncached; /* per table: its cache's slots */
    size_t ntables;
    struct kern_cuda_host_rows rows; /* device arrays */
};

/* Whether some table of desc is off HBM. */
bool kern_cuda__tiered(const struct kern_shard_desc *desc);

/*
 * Sets up desc's tables off HBM on the current device: pins and maps their
 * host memory (tables[t].host, the host copy of the shard's table array,
 * which the caller uploads afterwards), writes each one's lookup locations
 * into its part of the device's indices (the tables' lookups back to back)
 * and fills its host rows and its cache's slots in weights (at
 * tables[t].w_off) with the seeded initial values.  Synchronises stream.
 * On failure the caller still kern_cuda__tiers_close()s tr.  Returns 0,
 * SD_ENOMEM or SD_EDEVICE with d set.
 */
int kern_cuda__tiers_open(struct kern_cuda_tiers *tr,
                          const struct kern_shard_desc *desc,
                          struct kern_cuda_table *tables, float *weights,
                          int64_t *indices, cudaStream_t stream,
                          struct sd_diag *d);

/* Table t's rows (rows x tb->dim) into out: its host rows with its
 * cache's slots over them.  Synchronises stream. */
int kern_cuda__tiers_read(const struct kern_cuda_tiers *tr, size_t t,
                          const struct kern_cuda_table *tb, int64_t rows,
                          const float *weights, float *out, cudaStream_t stream,
                          struct sd_diag *d);

/* Frees what kern_cuda__tiers_open() allocated; zeroes tr.  Safe on a
 * zeroed tr. */
void kern_cuda__tiers_close(struct kern_cuda_tiers *tr);

/* The backend's ops beyond the embedding bag (kernels.h's vtable). */
int kern_cuda_net_open(int32_t device, const struct kern_net_dims *dims,
                       const float *params, void **out, uint64_t *bytes,
                       struct sd_diag *d);
int kern_cuda_net_score(void *net, const float *x, size_t nrows,
                        const size_t *shard_off, size_t nshards, double *ms,
                        struct sd_diag *d);
void kern_cuda_net_close(void *net);
int kern_cuda_blas_open(int32_t device, void **out, struct sd_diag *d);
int kern_cuda_blas_sgemm(void *blas, bool trans_a, bool trans_b, int m, int n,
                         int k, float alpha, const float *a, int lda,
                         const float *b, int ldb, float beta, float *c, int ldc,
                         struct sd_diag *d);
void kern_cuda_blas_close(void *blas);
int kern_cuda_comm_open(int32_t n, void **out, struct sd_diag *d);
int kern_cuda_comm_run(void *comm, int32_t rank, const struct kern_coll_desc *c,
                       struct sd_diag *d);
void kern_cuda_comm_close(void *comm, bool failed);
int kern_cuda_device_load(int32_t device, struct kern_device_load *out,
                          struct sd_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* SHARDD_CUDA_INTERNAL_H */
