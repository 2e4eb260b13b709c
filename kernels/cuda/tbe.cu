/*
 * Device code of the cuda backend: the fused table-batched embedding bag
 * (forward sum pooling; backward with exact SGD), the seeded fill and the
 * L2 flush, each behind an extern "C" launch shim (cuda_internal.h).
 *
 * Both TBE kernels give one warp to one (table, bag) pair, all tables of a
 * shard in one launch, like FBGEMM's split_embedding_codegen kernels.  The
 * warp loads 32 of the bag's indices at a time, one per lane, and
 * broadcasts them with shuffles; lanes cover the row's columns as float4
 * (dims are multiples of 4).  A table of 64 columns or fewer would leave
 * lanes idle, so its warp splits into groups of G lanes (G the smallest
 * power of two covering the row's float4s) that take every (32/G)-th
 * lookup, and the forward adds the groups' partial sums with xor-shuffles.
 * Above 64 columns (one group) a bag's rows are added in index order,
 * exactly as the cpu backend adds them; narrower tables differ from it by
 * fp32 rounding order only.
 *
 * A shard with a table off HBM runs the kernels' TIERED instances: a
 * negative location reads the row from mapped host memory (plain loads,
 * not the read-only path), and the backward leaves such rows to
 * tbe_host_sgd_kernel, which writes each once.  An all-HBM shard runs the
 * other instances, the code from before tiers.
 */
#include "cuda_internal.h"
#include "kern_internal.h"

#define WARP            32
#define WARPS_PER_BLOCK 8
#define VEC             4 /* float4s per lane per column chunk */
#define FULL_MASK       0xffffffffu

/* Lanes per lookup group for a row of nvec float4s: a power of two. */
static __device__ __forceinline__ int group_lanes(int32_t nvec)
{
    int g = 1;

    while (g < nvec && g < WARP)
        g <<= 1;
    return g;
}

static __device__ __forceinline__ void add4(float4 &a, float4 b)
{
    a.x += b.x;
    a.y += b.y;
    a.z += b.z;
    a.w += b.w;
}

static __device__ __forceinline__ float4 xor_shfl4(float4 v, int mask)
{
    v.x = __shfl_xor_sync(FULL_MASK, v.x, mask);
    v.y = __shfl_xor_sync(FULL_MASK, v.y, mask);
    v.z = __shfl_xor_sync(FULL_MASK, v.z, mask);
    v.w = __shfl_xor_sync(FULL_MASK, v.w, mask);
    return v;
}

/* Adds v to *p, each component atomically (Hopper has a float4 form). */
static __device__ __forceinline__ void atomic_add4(float4 *p, float4 v)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(p, v);
#else
    atomicAdd(&p->x, v.x);
    atomicAdd(&p->y, v.y);
    atomicAdd(&p->z, v.z);
    atomicAdd(&p->w, v.w);
#endif
}

/* Where a warp works: its (table, bag) and lane layout.  valid is false
 * for the spare warps of the last block. */
struct warp_job {
    bool valid;
    int64_t bag; /* flattened: t * nbags + b */
    int64_t b;
    struct kern_cuda_table tb;
    int32_t nvec;   /* float4s per row */
    int g;          /* lanes per lookup group */
    int ngroups;    /* 32 / g */
    int group, sub; /* this lane's group, and its place in it */
};

static __device__ __forceinline__ struct warp_job
warp_job_get(const struct kern_cuda_tbe &a)
{
    struct warp_job j;
    int32_t t;
    int lane = (int)threadIdx.x;

    j.bag = (int64_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.y;
    j.valid = j.bag < (int64_t)a.ntables * a.nbags;
    if (!j.valid)
        return j;
    t = (int32_t)(j.bag / a.nbags);
    j.b = j.bag - (int64_t)t * a.nbags;
    j.tb = a.tables[t];
    j.nvec = j.tb.dim / 4;
    j.g = group_lanes(j.nvec);
    j.ngroups = WARP / j.g;
    j.group = lane / j.g;
    j.sub = lane % j.g;
    return j;
}

template <bool TIERED>
__global__ void __launch_bounds__(WARP *WARPS_PER_BLOCK)
    tbe_forward_kernel(struct kern_cuda_tbe a, float *__restrict__ pooled)
{
    struct warp_job j = warp_job_get(a);
    const float4 *__restrict__ w;
    const float4 *h; /* the table's rows in host memory (TIERED) */
    float4 *out;
    int64_t start, end, l0, mine, idx;
    int32_t c0, v;
    int n, j0, jj, k, off, lane = (int)threadIdx.x;
    float4 acc[VEC];

    if (!j.valid) /* uniform across the warp */
        return;
    w = (const float4 *)(a.weights + j.tb.w_off);
    h = (const float4 *)j.tb.host;
    out = (float4 *)(pooled + j.b * a.width + j.tb.col);
    start = a.offsets[j.bag];
    end = a.offsets[j.bag + 1];
    for (c0 = 0; c0 < j.nvec; c0 += j.g * VEC) {
#pragma unroll
        for (k = 0; k < VEC; k++)
            acc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (l0 = start; l0 < end; l0 += WARP) {
            n = (int)min((int64_t)WARP, end - l0);
            mine = lane < n ? a.indices[l0 + lane] : 0;
            /* Every lane runs every shuffle; jj <= 31 because j0 is a
             * multiple of ngroups below n <= 32. */
            for (j0 = 0; j0 < n; j0 += j.ngroups) {
                jj = j0 + j.group;
                idx = __shfl_sync(FULL_MASK, mine, jj);
                if (jj >= n)
                    continue;
                if (TIERED && idx < 0) { /* over the link */
#pragma unroll
                    for (k = 0; k < VEC; k++) {
                        v = c0 + j.sub + k * j.g;
                        if (v < j.nvec)
                            add4(acc[k], h[(-idx - 1) * j.nvec + v]);
                    }
                    continue;
                }
#pragma unroll
                for (k = 0; k < VEC; k++) {
                    v = c0 + j.sub + k * j.g;
                    if (v < j.nvec)
                        add4(acc[k], __ldg(w + idx * j.nvec + v));
                }
            }
        }
        /* Lanes with the same sub hold partial sums of the same columns. */
        for (off = j.g; off < WARP; off <<= 1) {
#pragma unroll
            for (k = 0; k < VEC; k++)
                add4(acc[k], xor_shfl4(acc[k], off));
        }
        if (j.group == 0) {
#pragma unroll
            for (k = 0; k < VEC; k++) {
                v = c0 + j.sub + k * j.g;
                if (v < j.nvec)
                    out[v] = acc[k];
            }
        }
    }
}

/*
 * Backward + exact SGD.  Each lookup (b, i) adds -lr * grad[b] into row i
 * with atomics, so duplicate rows, within a bag or across bags and tables'
 * warps, accumulate every term: SGD is linear, so this equals summing each
 * row's gradient first and stepping once.  FBGEMM sorts the indices and
 * reduces per row segment instead, which is deterministic and avoids
 * contention on hot rows; atomics are simpler, exact up to fp32 rounding
 * order, and fine for measuring a shard's cost.  TIERED: the rows read
 * from host memory are skipped (every lookup of a UVM table: its warps
 * return at once), tbe_host_sgd_kernel's.
 */
template <bool TIERED>
__global__ void __launch_bounds__(WARP *WARPS_PER_BLOCK)
    tbe_backward_sgd_kernel(struct kern_cuda_tbe a,
                            const float *__restrict__ grad, float lr)
{
    struct warp_job j = warp_job_get(a);
    const float4 *g;
    float4 *w, step[VEC];
    int64_t start, end, l0, mine, idx;
    int32_t c0, v;
    int n, j0, jj, k, lane = (int)threadIdx.x;

    if (!j.valid || (TIERED && j.tb.tier == KERN_TIER_UVM))
        return; /* uniform across the warp */
    w = (float4 *)(a.weights + j.tb.w_off);
    g = (const float4 *)(grad + j.b * a.width + j.tb.col);
    start = a.offsets[j.bag];
    end = a.offsets[j.bag + 1];
    for (c0 = 0; c0 < j.nvec; c0 += j.g * VEC) {
#pragma unroll
        for (k = 0; k < VEC; k++) {
            v = c0 + j.sub + k * j.g;
            step[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (v < j.nvec) {
                step[k] = g[v];
                step[k].x *= -lr;
                step[k].y *= -lr;
                step[k].z *= -lr;
                step[k].w *= -lr;
            }
        }
        for (l0 = start; l0 < end; l0 += WARP) {
            n = (int)min((int64_t)WARP, end - l0);
            mine = lane < n ? a.indices[l0 + lane] : 0;
            for (j0 = 0; j0 < n; j0 += j.ngroups) {
                jj = j0 + j.group;
                idx = __shfl_sync(FULL_MASK, mine, jj);
                if (jj >= n || (TIERED && idx < 0))
                    continue;
#pragma unroll
                for (k = 0; k < VEC; k++) {
                    v = c0 + j.sub + k * j.g;
                    if (v < j.nvec)
                        atomic_add4(w + idx * j.nvec + v, step[k]);
                }
            }
        }
    }
}

/*
 * Backward + exact SGD of the rows in host memory: one warp a unique row,
 * its lanes over the row's float4s; each reads its part of the row once
 * over the link, adds -lr * grad of every bag that read the row, in bag
 * order (as the cpu backend steps a row, lookup by lookup), and writes it
 * back once.  Rows are unique, so no two warps write the same one.
 */
__global__ void __launch_bounds__(WARP *WARPS_PER_BLOCK)
    tbe_host_sgd_kernel(struct kern_cuda_tbe a, struct kern_cuda_host_rows h,
                        const float *__restrict__ grad, float lr)
{
    int64_t u = (int64_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.y, l;
    struct kern_cuda_table tb;
    const float4 *g;
    float4 *row, acc, x;
    int32_t nvec, v;

    if (u >= h.nrows)
        return;
    tb = a.tables[h.table[u]];
    nvec = tb.dim / 4;
    row = (float4 *)tb.host + h.row[u] * nvec;
    for (v = (int32_t)threadIdx.x; v < nvec; v += WARP) {
        acc = row[v];
        for (l = h.seg[u]; l < h.seg[u + 1]; l++) {
            g = (const float4 *)(grad + h.bag[l] * a.width + tb.col);
            x = g[v];
            acc.x += -lr * x.x;
            acc.y += -lr * x.y;
            acc.z += -lr * x.z;
            acc.w += -lr * x.w;
        }
        row[v] = acc;
    }
}

__global__ void fill_kernel(float *p, uint64_t n, uint64_t key, float scale)
{
    uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;

    for (; e < n; e += stride)
        p[e] = kern__value(key, e, scale);
}

__global__ void fill_rows_kernel(float *p, const int64_t *rows, uint64_t n,
                                 int32_t dim, uint64_t key, float scale)
{
    uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x, s, c;

    for (; e < n * (uint64_t)dim; e += stride) {
        s = e / (uint64_t)dim;
        c = e - s * (uint64_t)dim;
        p[e] = kern__value(key, (uint64_t)rows[s] * (uint64_t)dim + c, scale);
    }
}

__global__ void flush_kernel(uint4 *p, size_t n, uint32_t value)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;

    for (; i < n; i += stride)
        p[i] = make_uint4(value, value, value, (uint32_t)i);
}

/* Blocks for a grid-stride loop over n items, 256 threads a block. */
static unsigned int stride_blocks(uint64_t n)
{
    uint64_t blocks = (n + 255) / 256;

    if (blocks > 8192)
        blocks = 8192;
    return blocks == 0 ? 1u : (unsigned int)blocks;
}

/* Blocks for one warp per bag of every table. */
static unsigned int tbe_blocks(const struct kern_cuda_tbe *a)
{
    uint64_t warps = (uint64_t)a->ntables * (uint64_t)a->nbags;

    return (unsigned int)((warps + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK);
}

extern "C" cudaError_t kern_cuda_tbe_forward(const struct kern_cuda_tbe *a,
                                             float *pooled, cudaStream_t stream)
{
    dim3 block(WARP, WARPS_PER_BLOCK);

    if (a->tiered)
        tbe_forward_kernel<true>
            <<<tbe_blocks(a), block, 0, stream>>>(*a, pooled);
    else
        tbe_forward_kernel<false>
            <<<tbe_blocks(a), block, 0, stream>>>(*a, pooled);
    return cudaGetLastError();
}

extern "C" cudaError_t kern_cuda_tbe_backward_sgd(const struct kern_cuda_tbe *a,
                                                  const float *grad, float lr,
                                                  cudaStream_t stream)
{
    dim3 block(WARP, WARPS_PER_BLOCK);

    if (a->tiered)
        tbe_backward_sgd_kernel<true>
            <<<tbe_blocks(a), block, 0, stream>>>(*a, grad, lr);
    else
        tbe_backward_sgd_kernel<false>
            <<<tbe_blocks(a), block, 0, stream>>>(*a, grad, lr);
    return cudaGetLastError();
}

extern "C" cudaError_t
kern_cuda_tbe_host_sgd(const struct kern_cuda_tbe *a,
                       const struct kern_cuda_host_rows *h, const float *grad,
                       float lr, cudaStream_t stream)
{
    dim3 block(WARP, WARPS_PER_BLOCK);
    uint64_t blocks =
        ((uint64_t)h->nrows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;

    if (h->nrows == 0)
        return cudaSuccess;
    tbe_host_sgd_kernel<<<(unsigned int)blocks, block, 0, stream>>>(*a, *h,
                                                                    grad, lr);
    return cudaGetLastError();
}

extern "C" cudaError_t kern_cuda_fill_rows(float *p, const int64_t *rows,
                                           uint64_t nrows, int32_t dim,
                                           uint64_t key, float scale,
                                           cudaStream_t stream)
{
    uint64_t n = nrows * (uint64_t)dim;

    if (n == 0)
        return cudaSuccess;
    fill_rows_kernel<<<stride_blocks(n), 256, 0, stream>>>(p, rows, nrows, dim,
                                                           key, scale);
    return cudaGetLastError();
}

extern "C" cudaError_t kern_cuda_fill(float *p, uint64_t n, uint64_t key,
                                      float scale, cudaStream_t stream)
{
    if (n == 0)
        return cudaSuccess;
    fill_kernel<<<stride_blocks(n), 256, 0, stream>>>(p, n, key, scale);
    return cudaGetLastError();
}

extern "C" cudaError_t kern_cuda_flush(void *buf, size_t bytes, uint32_t value,
                                       cudaStream_t stream)
{
    size_t n = bytes / sizeof(uint4);

    if (n == 0)
        return cudaSuccess;
    flush_kernel<<<stride_blocks(n), 256, 0, stream>>>((uint4 *)buf, n, value);
    return cudaGetLastError();
}
