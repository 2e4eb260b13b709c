/*
 * The seam between the cuda backend's host logic (backend_cuda.c, C11) and
 * its device code (tbe.cu): the argument blocks of the kernels and the
 * extern "C" launch shims.  Each shim enqueues one kernel on a stream and
 * returns the launch status (cudaGetLastError()), never synchronising;
 * backend_cuda.c maps any error to SD_E* codes.  Included only under
 * kernels/cuda/.
 */
#ifndef SHARDD_CUDA_INTERNAL_H
#define SHARDD_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One table of a shard on the device. */
struct kern_cuda_table {
    int64_t w_off; /* first weight of the table in the shard's weights */
    int32_t dim;   /* columns, a multiple of 4 */
    int32_t col;   /* first column of the table in a pooled row */
};

/*
 * A shard's fused table-batched embedding bag, as both kernels see it.
 * Bag w = t * nbags + b (table t, bag b) reads
 * indices[offsets[w] .. offsets[w + 1]): every table has nbags bags, so
 * the flattened bag index is its own per-table prefix and a warp finds its
 * table by one division.
 */
struct kern_cuda_tbe {
    float *weights;                       /* all tables, back to back */
    const int64_t *indices;               /* all tables' lookups */
    const int64_t *offsets;               /* ntables * nbags + 1 */
    const struct kern_cuda_table *tables; /* ntables, on the device */
    int64_t nbags;
    int32_t ntables;
    int32_t width; /* columns of a pooled row: sum of dims */
};

/* Forward: pooled (nbags x width) = per-bag sums of rows. */
cudaError_t kern_cuda_tbe_forward(const struct kern_cuda_tbe *a, float *pooled,
                                  cudaStream_t stream);

/* Backward + exact SGD: each lookup (b, i) adds -lr * grad[b] to row i. */
cudaError_t kern_cuda_tbe_backward_sgd(const struct kern_cuda_tbe *a,
                                       const float *grad, float lr,
                                       cudaStream_t stream);

/* p[e] = kern__value(key, e, scale) for e < n (kern_internal.h). */
cudaError_t kern_cuda_fill(float *p, uint64_t n, uint64_t key, float scale,
                           cudaStream_t stream);

/* Writes `bytes` (a multiple of 16) of buf with a value that changes from
 * call to call, evicting everything else from the L2. */
cudaError_t kern_cuda_flush(void *buf, size_t bytes, uint32_t value,
                            cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* SHARDD_CUDA_INTERNAL_H */
