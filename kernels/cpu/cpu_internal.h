/*
 * The cpu backend's parts beyond the embedding bag (backend_cpu.c): the
 * compute cost model and sgemm (net_cpu.c), and collectives between
 * threads (comm_cpu.c), each the specification its cuda counterpart is
 * tested against.  Included only under kernels/cpu/.
 */
#ifndef SHARDD_CPU_INTERNAL_H
#define SHARDD_CPU_INTERNAL_H

#include "kern_internal.h"

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
