/*
 * What the backends of kernels/ share and nobody outside kernels/ sees: the
 * shard-description check, the shard's memory footprint, and the seeded
 * value formula for initial weights and timing gradients.
 *
 * The formula is counter-based (value e of a stream is a hash of the stream
 * key and e), so the cuda backend fills its weights on the device, in
 * parallel, with exactly the values the cpu backend computes on the host:
 * both compile this header (gcc as C11, nvcc as C++), and a value is an
 * integer hash converted exactly to float and scaled by a power of two
 * times a float, one rounding that no compiler can contract.
 */
#ifndef SHARDD_KERN_INTERNAL_H
#define SHARDD_KERN_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

#ifdef __CUDACC__
#    define KERN_HOSTDEV __host__ __device__
#else
#    define KERN_HOSTDEV
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Initial weights are uniform in [-0.01, 0.01); timing gradients in
 * [-1, 1).  Each scale is the half-width divided by 2^23. */
#define KERN_WEIGHT_SCALE (0.01f / 8388608.0f)
#define KERN_GRAD_SCALE   (1.0f / 8388608.0f)

/* Stream of the timing gradient; table t of a shard uses stream t. */
#define KERN_STREAM_GRAD UINT64_C(0xffffffff00000000)

#define KERN_GOLDEN UINT64_C(0x9e3779b97f4a7c15)

/* The splitmix64 finalizer (Steele, Lea and Flood 2014). */
static inline KERN_HOSTDEV uint64_t kern__mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* The key of stream `stream` (a table index, or KERN_STREAM_GRAD). */
static inline KERN_HOSTDEV uint64_t kern__stream_key(uint64_t seed,
                                                     uint64_t stream)
{
    return kern__mix64(seed ^ kern__mix64(stream + KERN_GOLDEN));
}

/*
 * Value e of the stream with key `key`: k * scale with k a uniform integer
 * in [-2^23, 2^23), so the result is uniform in [-2^23 scale, 2^23 scale).
 */
static inline KERN_HOSTDEV float kern__value(uint64_t key, uint64_t e,
                                             float scale)
{
    uint64_t h = kern__mix64(key + e * KERN_GOLDEN);
    int32_t k = (int32_t)(h >> 40) - INT32_C(0x800000);

    return (float)k * scale;
}

/*
 * Checks a shard description: at least one table and one bag, rows >= 1,
 * dim a positive multiple of 4, a known dtype and tier (which a backend
 * may still refuse), cache_rows in [0, rows] for a cache and 0 otherwise,
 * offsets starting at 0, non-decreasing and ending at nindices,
 * every index in [0, rows), a finite learning rate, and sizes that do not
 * overflow.  Returns 0 or SD_EINVAL with d naming the table and field.
 */
int kern__shard_check(const struct kern_shard_desc *desc, struct sd_diag *d);

/* Columns of the pooled output (sum of dims); desc must have passed
 * kern__shard_check(). */
int32_t kern__shard_width(const struct kern_shard_desc *desc);

/*
 * Bytes a shard takes on a device: the weights its tables keep in device
 * memory (kern_dtype_size() each: every row in HBM, a cache's rows, none
 * for UVM), indices, offsets and two nbags x width buffers (pooled
 * output, timing gradient).  desc must have passed kern__shard_check(),
 * which guarantees this does not overflow.
 */
uint64_t kern__shard_bytes(const struct kern_shard_desc *desc);

/* Rows of a table in device memory: all of them in HBM, its cache for
 * UVM caching, none for UVM. */
uint64_t kern__device_rows(const struct kern_table_desc *tb);

/* Bytes of weights a shard keeps in host memory: every row of its tables
 * off HBM (a cache is a copy). */
uint64_t kern__shard_host_bytes(const struct kern_shard_desc *desc);

/* SD_EUNSUPPORTED, d naming the table and saying that its tier is
 * modelled, for a table whose tier is not in be->tiers; else 0. */
int kern__tiers_check(const struct kern_backend *be,
                      const struct kern_shard_desc *desc, struct sd_diag *d);

/* Where each layer's parameters start in a net's array (kernels.h). */
struct kern__net_offsets {
    size_t w1, b1, w2, b2, w3, b3, w4, b4;
};
void kern__net_layout(const struct kern_net_dims *dims,
                      struct kern__net_offsets *o);

/* Monotonic milliseconds, for timing collectives and idle gates. */
double kern__now_ms(void);

/*
 * A barrier of n threads that can be broken: once one thread breaks it
 * (its rank failed), every wait, present and future, returns false, so no
 * rank waits for one that will never come.  comm.c.
 */
struct kern__barrier {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, waiting;
    unsigned gen;
    bool broken;
};
void kern__barrier_init(struct kern__barrier *b, int n);
void kern__barrier_destroy(struct kern__barrier *b);
bool kern__barrier_wait(struct kern__barrier *b);
void kern__barrier_break(struct kern__barrier *b);

#ifdef SHARDD_HAVE_CUDA
extern const struct kern_backend kern_backend_cuda;
/* kern_lib_probe() of "cublas", "nccl" or "nvml" (kernels/cuda/libs.c). */
int kern__cuda_lib_probe(const char *name, struct sd_diag *d);
#endif

#ifdef __cplusplus
}
#endif

#endif /* SHARDD_KERN_INTERNAL_H */
