/*
 * Device code of the compute cost model (cuda_internal.h): the per-table
 * MLP for every row of a batch, then the shard head, one warp per shard.
 *
 * The latent kernel gives a block LAT_ROWS rows: their inputs and first
 * layer's activations are staged in shared memory, and each thread makes
 * outputs (row, unit) in turn, reading the layer's weights through the
 * read-only cache (27 KB for the default 20-128-32 net, shared by every
 * block).  The head kernel sums its shard's latents (lane k takes
 * components k, k + 32, ...), then each lane makes the hidden units o,
 * o + 32, ... of the head and their share of the output, reduced across
 * the warp.  Sums run in a different order from the cpu's (which adds each
 * table's projection, net.c), so scores agree within fp32 rounding, not
 * bit for bit.
 */
#include "cuda_internal.h"

#define WARP           32
#define HEAD_WARPS     4     /* shards per block */
#define LAT_THREADS    128   /* threads of a latent block */
#define LAT_SHARED_MAX 12288 /* floats of shared memory a block may take */
#define FULL_MASK      0xffffffffu

/* Rows per latent block: up to 16, within the shared memory. */
static int lat_rows(const struct kern_cuda_net *n)
{
    int r = LAT_SHARED_MAX / (n->in + n->h1);

    return r < 1 ? 1 : (r > 16 ? 16 : r);
}

__global__ void __launch_bounds__(LAT_THREADS)
    net_latent_kernel(struct kern_cuda_net n, const float *__restrict__ x,
                      uint64_t nrows, float *__restrict__ lat, int rows)
{
    extern __shared__ float sh[];
    float *xs = sh, *hs = sh + rows * n.in;
    uint64_t row0 = (uint64_t)blockIdx.x * (uint64_t)rows;
    int nr = (int)min((uint64_t)rows, nrows - row0);
    int i, o, r, j;
    float s;

    for (i = threadIdx.x; i < nr * n.in; i += blockDim.x)
        xs[i] = x[row0 * (uint64_t)n.in + (uint64_t)i];
    __syncthreads();
    for (o = threadIdx.x; o < nr * n.h1; o += blockDim.x) {
        r = o / n.h1;
        j = o - r * n.h1;
        s = __ldg(n.p + n.b1 + j);
        for (i = 0; i < n.in; i++)
            s += __ldg(n.p + n.w1 + (int64_t)j * n.in + i) * xs[r * n.in + i];
        hs[o] = s > 0 ? s : 0;
    }
    __syncthreads();
    for (o = threadIdx.x; o < nr * n.lat; o += blockDim.x) {
        r = o / n.lat;
        j = o - r * n.lat;
        s = __ldg(n.p + n.b2 + j);
        for (i = 0; i < n.h1; i++)
            s += __ldg(n.p + n.w2 + (int64_t)j * n.h1 + i) * hs[r * n.h1 + i];
        lat[(row0 + (uint64_t)r) * (uint64_t)n.lat + (uint64_t)j] =
            s > 0 ? s : 0;
    }
}

__global__ void __launch_bounds__(WARP *HEAD_WARPS)
    net_head_kernel(struct kern_cuda_net n, const float *__restrict__ lat,
                    const uint64_t *__restrict__ off, uint64_t nshards,
                    double *__restrict__ ms)
{
    extern __shared__ float sh[];
    float *ls = sh + threadIdx.y * n.lat;
    uint64_t shard = (uint64_t)blockIdx.x * HEAD_WARPS + threadIdx.y;
    uint64_t begin, end, r;
    int lane = (int)threadIdx.x, k, o, m;
    float s, part = 0, res = 0, t0 = 0, t1 = 0, t2 = 0;
    double raw, phys, root;

    if (shard >= nshards) /* uniform across the warp */
        return;
    begin = off[shard];
    end = off[shard + 1];
    if (begin == end) {
        if (lane == 0)
            ms[shard] = 0;
        return;
    }
    for (k = lane; k < n.lat; k += WARP) {
        s = 0;
        for (r = begin; r < end; r++)
            s += lat[r * (uint64_t)n.lat + (uint64_t)k];
        ls[k] = s;
    }
    __syncwarp();
    for (o = lane; o < n.h2; o += WARP) {
        s = __ldg(n.p + n.b3 + o);
        for (k = 0; k < n.lat; k++)
            s += __ldg(n.p + n.w3 + (int64_t)o * n.lat + k) * ls[k];
        part += __ldg(n.p + n.w4 + o) * (s > 0 ? s : 0);
        /* a prior head's last three units, each on its own lane */
        if (o >= n.h2 - 3)
            res = s;
    }
    for (m = WARP / 2; m > 0; m >>= 1)
        part += __shfl_xor_sync(FULL_MASK, part, m);
    if (n.head == KERN_NET_HEAD_PRIOR) {
        /* uniform across the warp: every lane takes part, as the
         * shuffles need */
        t0 = __shfl_sync(FULL_MASK, res, (n.h2 - 1) % WARP);
        t1 = __shfl_sync(FULL_MASK, res, (n.h2 - 2) % WARP);
        t2 = __shfl_sync(FULL_MASK, res, (n.h2 - 3) % WARP);
    }
    if (lane == 0) {
        raw = (double)__ldg(n.p + n.b4) + (double)part;
        if (n.head == KERN_NET_HEAD_PRIOR) {
            phys = (double)t0 + (double)t1 * (double)t2;
            root = sqrt(raw * raw + 4);
            ms[shard] = (raw >= 0 ? (raw + root) / 2 : 2 / (root - raw)) *
                        (phys > 0 ? phys : 0);
        } else {
            ms[shard] = raw > 20 ? raw : log1p(exp(raw));
        }
    }
}

extern "C" cudaError_t kern_cuda_net_latent(const struct kern_cuda_net *n,
                                            const float *x, uint64_t nrows,
                                            float *lat, cudaStream_t stream)
{
    int rows = lat_rows(n);
    uint64_t blocks = (nrows + (uint64_t)rows - 1) / (uint64_t)rows;
    size_t shared = (size_t)rows * (size_t)(n->in + n->h1) * sizeof(float);

    if (nrows == 0)
        return cudaSuccess;
    if (blocks > 0x7fffffffu)
        return cudaErrorInvalidValue;
    net_latent_kernel<<<(unsigned int)blocks, LAT_THREADS, shared, stream>>>(
        *n, x, nrows, lat, rows);
    return cudaGetLastError();
}

extern "C" cudaError_t kern_cuda_net_head(const struct kern_cuda_net *n,
                                          const float *lat, const uint64_t *off,
                                          uint64_t nshards, double *ms,
                                          cudaStream_t stream)
{
    uint64_t blocks = (nshards + HEAD_WARPS - 1) / HEAD_WARPS;
    size_t shared = (size_t)HEAD_WARPS * (size_t)n->lat * sizeof(float);
    dim3 block(WARP, HEAD_WARPS);

    if (nshards == 0)
        return cudaSuccess;
    if (blocks > 0x7fffffffu)
        return cudaErrorInvalidValue;
    net_head_kernel<<<(unsigned int)blocks, block, shared, stream>>>(
        *n, lat, off, nshards, ms);
    return cudaGetLastError();
}
