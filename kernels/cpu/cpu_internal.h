/*
 * The cpu backend's parts beyond the embedding bag (backend_cpu.c and the
 * files it is split into, over backend_cpu_int.h; the half-precision
 * conversions of tbe_cpu.c are declared here for tests): the compute
 * cost model and sgemm (net_cpu.c), and collectives between threads
 * (comm_cpu.c), each the specification its cuda counterpart is tested
 * against.  Included only under kernels/cpu/ and by the unit test of
 * kernels/.
 */
#ifndef SHARDD_CPU_INTERNAL_H
#define SHARDD_CPU_INTERNAL_H

#include "kern_internal.h"

/*
 * fp16 and bf16 weights (tbe_cpu.c): n values converted to and from
 * fp32.  To fp32 is exact; from fp32 rounds to nearest, ties to even, and
 * keeps a NaN a NaN (quiet).  The fp16 pair uses the CPU's F16C
 * instructions when f16c is true and the CPU has them
 * (kern_cpu_has_f16c()), else portable code: the backend uses F16C where
 * it can, tests check each against the other.  Thread: any.
 */
bool kern_cpu_has_f16c(void);
void kern_cpu_f16_to_f32(float *out, const uint16_t *in, size_t n, bool f16c);
void kern_cpu_f32_to_f16(uint16_t *out, const float *in, size_t n, bool f16c);
void kern_cpu_bf16_to_f32(float *out, const uint16_t *in, size_t n);
void kern_cpu_f32_to_bf16(uint16_t *out, const float *in, size_t n);

/*
 * For tests: whether shards opened from now on run their fp16 tables on
 * F16C (on, where the CPU has it) or on the portable code (off); returns
 * whether they will use F16C.  The default is F16C where the CPU has it.
 * Not thread-safe: call between shards, never while one opens.
 */
bool kern_cpu_use_f16c(bool on);

int kern_cpu_net_open(int32_t device, const struct kern_net_dims *dims,
                      const float *params, void **out, uint64_t *bytes,
                      struct sd_diag *d);
int kern_cpu_net_score(void *net, const float *x, size_t nrows,
                       const size_t *shard_off, size_t nshards, double *ms,
                       struct sd_diag *d);
void kern_cpu_net_close(void *net);

int kern_cpu_blas_open(int32_t device, void **out, struct sd_diag *d);
int kern_cpu_blas_sgemm(void *blas, bool trans_a, bool trans_b, int m, int n,
                        int k, float alpha, const float *a, int lda,
                        const float *b, int ldb, float beta, float *c, int ldc,
                        struct sd_diag *d);
void kern_cpu_blas_close(void *blas);

int kern_cpu_comm_open(int32_t n, void **out, struct sd_diag *d);
int kern_cpu_comm_run(void *comm, int32_t rank, const struct kern_coll_desc *c,
                      struct sd_diag *d);
void kern_cpu_comm_close(void *comm, bool failed);

#endif /* SHARDD_CPU_INTERNAL_H */
