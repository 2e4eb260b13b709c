/*
 * Collectives on the cuda backend: NCCL, loaded at run time (libs.c), one
 * communicator per GPU made together by ncclCommInitAll in one process,
 * and each rank driven by its own thread (kernels/comm.c), the layout of
 * nccl-tests' threaded mode.  A rank's part is enqueued on its own stream
 * and waited for by polling, so that a rank whose peer failed stops
 * waiting (the failed flag) instead of hanging in a collective that will
 * never complete; such a communicator is aborted at close.
 *
 * All-to-all is NCCL's grouped point-to-point form (ncclSend and ncclRecv
 * to every peer between ncclGroupStart and ncclGroupEnd), the pairs with
 * zero floats left out on both sides.  Buffers hold zeros: the time of a
 * collective does not depend on the values.
 */
#include <nccl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

/* NCCL's entry points, in libs.c's order. */
struct nccl_fns {
    __typeof__(ncclGetVersion) *get_version;
    __typeof__(ncclCommInitAll) *init_all;
    __typeof__(ncclCommDestroy) *destroy;
    __typeof__(ncclCommAbort) *abort;
    __typeof__(ncclCommGetAsyncError) *async_error;
    __typeof__(ncclGetErrorString) *error_string;
    __typeof__(ncclGroupStart) *group_start;
    __typeof__(ncclGroupEnd) *group_end;
    __typeof__(ncclSend) *send;
    __typeof__(ncclRecv) *recv;
    __typeof__(ncclAllReduce) *all_reduce;
    __typeof__(ncclReduceScatter) *reduce_scatter;
    __typeof__(ncclAllGather) *all_gather;
};
_Static_assert(sizeof(struct nccl_fns) == 13 * sizeof(void *),
               "libs.c's order");

struct cuda_rank {
    ncclComm_t comm;
    cudaStream_t stream;
    float *send, *recv;
    uint64_t send_cap, recv_cap; /* floats */
};

struct cuda_comm {
    struct nccl_fns f;
    int32_t n;
    struct cuda_rank *ranks;
    atomic_bool failed; /* a rank's part failed: the others stop waiting */
};

/* An NCCL result as an SD_E* code, with its text in d. */
static int nccl_status(const struct cuda_comm *cc, struct sd_diag *d,
                       ncclResult_t r, const char *what, int32_t rank)
{
    if (r == ncclSuccess)
        return 0;
    return sd_diag_set(d, SD_EDEVICE, "nccl rank %d: %s: %s", (int)rank, what,
                       cc->f.error_string(r));
}

void kern_cuda_comm_close(void *comm, bool failed)
{
    struct cuda_comm *cc = comm;
    struct cuda_rank *rk;
    int32_t r;

    if (cc == NULL)
        return;
    failed = failed || atomic_load(&cc->failed);
    for (r = 0; r < cc->n; r++) {
        rk = &cc->ranks[r];
        (void)cudaSetDevice(r);
        if (rk->comm != NULL)
            (void)(failed ? cc->f.abort(rk->comm) : cc->f.destroy(rk->comm));
        if (rk->stream != NULL) {
            if (!failed)
                (void)cudaStreamSynchronize(rk->stream);
            (void)cudaStreamDestroy(rk->stream);
        }
        (void)cudaFree(rk->send);
        (void)cudaFree(rk->recv);
    }
    (void)cudaGetLastError();
    free(cc->ranks);
    free(cc);
}

int kern_cuda_comm_open(int32_t n, void **out, struct sd_diag *d)
{
    int devs = 0, list[KERN_COMM_MAX];
    ncclComm_t comms[KERN_COMM_MAX];
    void *const *syms;
    struct cuda_comm *cc;
    int32_t r;
    int rv;

    if (kern_cuda__broken())
        return sd_diag_set(d, SD_EDEVICE,
                           "cuda: context unusable after an "
                           "earlier device error; restart");
    if (cudaGetDeviceCount(&devs) != cudaSuccess)
        devs = 0;
    (void)cudaGetLastError();
    if (n > devs)
        return sd_diag_set(d, SD_EUNSUPPORTED,
                           "nccl: %d ranks need %d GPUs, this host has %d",
                           (int)n, (int)n, devs);
    rv = kern_cuda__lib(KERN_LIB_NCCL, &syms, d);
    if (rv != 0)
        return rv;
    cc = calloc(1, sizeof(*cc));
    if (cc == NULL ||
        (cc->ranks = calloc((size_t)n, sizeof(*cc->ranks))) == NULL) {
        free(cc);
        return sd_diag_set(d, SD_ENOMEM, "nccl: out of host memory");
    }
    memcpy(&cc->f, syms, sizeof(cc->f));
    cc->n = n;
    atomic_init(&cc->failed, false);
    for (r = 0; r < n; r++)
        list[r] = (int)r;
    rv = nccl_status(cc, d, cc->f.init_all(comms, (int)n, list),
                     "ncclCommInitAll", 0);
    for (r = 0; r < n && rv == 0; r++) {
        cc->ranks[r].comm = comms[r];
        rv = KERN_CUDA_STATUS(d, cudaSetDevice(r));
        kern_cuda__touch(r);
        if (rv == 0)
            rv = KERN_CUDA_STATUS(
                d, cudaStreamCreateWithFlags(&cc->ranks[r].stream,
                                             cudaStreamNonBlocking));
    }
    if (rv != 0) {
        kern_cuda_comm_close(cc, true);
        return rv;
    }
    *out = cc;
    return 0;
}

/* Grows one of a rank's buffers to `need` floats (zeroed); *grew says
 * whether it did. */
static int grow(float **buf, uint64_t *cap, uint64_t need, cudaStream_t s,
                bool *grew, struct sd_diag *d)
{
    int rv;

    if (need <= *cap)
        return 0;
    *grew = true;
    (void)cudaFree(*buf);
    *buf = NULL;
    *cap = 0;
    rv = KERN_CUDA_STATUS(d, cudaMalloc((void **)buf, need * sizeof(float)));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(
            d, cudaMemsetAsync(*buf, 0, need * sizeof(float), s));
    if (rv == 0)
        *cap = need;
    return rv;
}

/* Floats rank r sends and receives in all. */
static void totals(const struct kern_coll_desc *c, int32_t n, int32_t r,
                   uint64_t *send, uint64_t *recv)
{
    int32_t j;

    *send = *recv = 0;
    if (c->op == KERN_COLL_ALLTOALL) {
        for (j = 0; j < n; j++) {
            *send += c->a2a_counts[(size_t)r * (size_t)n + (size_t)j];
            *recv += c->a2a_counts[(size_t)j * (size_t)n + (size_t)r];
        }
    } else if (c->op == KERN_COLL_REDUCE_SCATTER) {
        *send = c->count * (uint64_t)n;
        *recv = c->count;
    } else if (c->op == KERN_COLL_ALL_GATHER) {
        *send = c->count;
        *recv = c->count * (uint64_t)n;
    } else {
        *send = *recv = c->count;
    }
}

/* Enqueues rank r's all-to-all: a send and a receive per peer. */
static int enqueue_a2a(struct cuda_comm *cc, int32_t r,
                       const struct kern_coll_desc *c, struct sd_diag *d)
{
    struct cuda_rank *rk = &cc->ranks[r];
    uint64_t s_at = 0, r_at = 0, out, in;
    int32_t j, n = cc->n;
    int rv;

    rv = nccl_status(cc, d, cc->f.group_start(), "ncclGroupStart", r);
    for (j = 0; j < n && rv == 0; j++) {
        out = c->a2a_counts[(size_t)r * (size_t)n + (size_t)j];
        in = c->a2a_counts[(size_t)j * (size_t)n + (size_t)r];
        if (out > 0)
            rv = nccl_status(cc, d,
                             cc->f.send(rk->send + s_at, (size_t)out, ncclFloat,
                                        (int)j, rk->comm, rk->stream),
                             "ncclSend", r);
        if (rv == 0 && in > 0)
            rv = nccl_status(cc, d,
                             cc->f.recv(rk->recv + r_at, (size_t)in, ncclFloat,
                                        (int)j, rk->comm, rk->stream),
                             "ncclRecv", r);
        s_at += out;
        r_at += in;
    }
    /* The group is always closed, even after a failed call in it. */
    if (rv == 0)
        rv = nccl_status(cc, d, cc->f.group_end(), "ncclGroupEnd", r);
    else
        (void)cc->f.group_end();
    return rv;
}

/* Enqueues rank r's part of collective c. */
static int enqueue(struct cuda_comm *cc, int32_t r,
                   const struct kern_coll_desc *c, struct sd_diag *d)
{
    struct cuda_rank *rk = &cc->ranks[r];
    size_t cnt = (size_t)c->count;

    switch (c->op) {
    case KERN_COLL_ALLTOALL:
        return enqueue_a2a(cc, r, c, d);
    case KERN_COLL_REDUCE_SCATTER:
        return nccl_status(cc, d,
                           cc->f.reduce_scatter(rk->send, rk->recv, cnt,
                                                ncclFloat, ncclSum, rk->comm,
                                                rk->stream),
                           "ncclReduceScatter", r);
    case KERN_COLL_ALL_GATHER:
        return nccl_status(cc, d,
                           cc->f.all_gather(rk->send, rk->recv, cnt, ncclFloat,
                                            rk->comm, rk->stream),
                           "ncclAllGather", r);
    default:
        return nccl_status(cc, d,
                           cc->f.all_reduce(rk->send, rk->recv, cnt, ncclFloat,
                                            ncclSum, rk->comm, rk->stream),
                           "ncclAllReduce", r);
    }
}

/* Waits for rank r's stream by polling: stops early when another rank
 * failed, and reports NCCL's asynchronous errors. */
static int wait_rank(struct cuda_comm *cc, int32_t r, struct sd_diag *d)
{
    struct cuda_rank *rk = &cc->ranks[r];
    ncclResult_t async = ncclSuccess;
    cudaError_t e;
    unsigned spins = 0;

    for (;;) {
        e = cudaStreamQuery(rk->stream);
        if (e != cudaErrorNotReady)
            return KERN_CUDA_STATUS(d, e);
        if (atomic_load(&cc->failed))
            return sd_diag_set(d, SD_ECANCELED, "nccl: another rank failed");
        if ((++spins & 1023u) == 0) {
            (void)cc->f.async_error(rk->comm, &async);
            if (async != ncclSuccess && async != ncclInProgress)
                return nccl_status(cc, d, async, "asynchronous error", r);
            sched_yield();
        }
    }
}

int kern_cuda_comm_run(void *comm, int32_t rank, const struct kern_coll_desc *c,
                       struct sd_diag *d)
{
    struct cuda_comm *cc = comm;
    struct cuda_rank *rk = &cc->ranks[rank];
    uint64_t send, recv;
    bool grew = false;
    int rv;

    totals(c, cc->n, rank, &send, &recv);
    rv = KERN_CUDA_STATUS(d, cudaSetDevice(rank));
    if (rv == 0)
        rv = grow(&rk->send, &rk->send_cap, send > 0 ? send : 1, rk->stream,
                  &grew, d);
    if (rv == 0)
        rv = grow(&rk->recv, &rk->recv_cap, recv > 0 ? recv : 1, rk->stream,
                  &grew, d);
    /* New buffers are zeroed before the collective (a warm-up iteration's
     * cost, not a timed one's, when warmup >= 1). */
    if (rv == 0 && grew)
        rv = KERN_CUDA_STATUS(d, cudaStreamSynchronize(rk->stream));
    if (rv == 0)
        rv = enqueue(cc, rank, c, d);
    if (rv == 0)
        rv = wait_rank(cc, rank, d);
    kern_cuda__touch(rank);
    if (rv != 0 && rv != SD_ECANCELED)
        atomic_store(&cc->failed, true);
    return rv;
}
