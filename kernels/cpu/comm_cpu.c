/*
 * Collectives on the cpu backend: n ranks are n threads of this process
 * exchanging through shared memory, the specification of what each rank
 * of a collective sends and receives (what NCCL does on GPUs).  Each rank
 * writes only its own send buffer, once, when it grows; a barrier inside
 * every collective makes a rank wait for the slowest before it reads the
 * others' buffers, as a real exchange waits for its last peer.  No rank
 * writes a send buffer again before every rank has returned from the
 * collective (the caller, comm.c, starts each iteration with a barrier).
 */
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

struct cpu_rank {
    float *send, *recv;
    uint64_t send_cap, recv_cap; /* floats */
};

struct cpu_comm {
    int32_t n;
    struct kern__barrier bar;
    struct cpu_rank *ranks;
};

int kern_cpu_comm_open(int32_t n, void **out, struct sd_diag *d)
{
    struct cpu_comm *c = calloc(1, sizeof(*c));

    if (c == NULL ||
        (c->ranks = calloc((size_t)n, sizeof(*c->ranks))) == NULL) {
        free(c);
        return sd_diag_set(d, SD_ENOMEM, "comm: out of memory");
    }
    c->n = n;
    kern__barrier_init(&c->bar, n);
    *out = c;
    return 0;
}

void kern_cpu_comm_close(void *comm, bool failed)
{
    struct cpu_comm *c = comm;
    int32_t r;

    (void)failed;
    if (c == NULL)
        return;
    for (r = 0; r < c->n; r++) {
        free(c->ranks[r].send);
        free(c->ranks[r].recv);
    }
    kern__barrier_destroy(&c->bar);
    free(c->ranks);
    free(c);
}

/* Grows one of rank r's buffers to `need` floats; a new send buffer is
 * filled with the rank's value, r + 1. */
static int grow(float **buf, uint64_t *cap, uint64_t need, float fill,
                bool is_send)
{
    float *p;
    uint64_t i;

    if (need <= *cap)
        return 0;
    p = realloc(*buf, (size_t)need * sizeof(float));
    if (p == NULL)
        return SD_ENOMEM;
    if (is_send)
        for (i = 0; i < need; i++)
            p[i] = fill;
    *buf = p;
    *cap = need;
    return 0;
}

/* Floats rank r sends in all, and receives in all. */
static void totals(const struct kern_coll_desc *c, int32_t n, int32_t r,
                   uint64_t *send, uint64_t *recv)
{
    int32_t j;

    *send = *recv = 0;
    switch (c->op) {
    case KERN_COLL_ALLTOALL:
        for (j = 0; j < n; j++) {
            *send += c->a2a_counts[(size_t)r * (size_t)n + (size_t)j];
            *recv += c->a2a_counts[(size_t)j * (size_t)n + (size_t)r];
        }
        break;
    case KERN_COLL_REDUCE_SCATTER:
        *send = c->count * (uint64_t)n;
        *recv = c->count;
        break;
    case KERN_COLL_ALL_GATHER:
        *send = c->count;
        *recv = c->count * (uint64_t)n;
        break;
    default: /* all-reduce */
        *send = *recv = c->count;
        break;
    }
}

/* Where rank src's block for rank dst starts in src's send buffer. */
static uint64_t a2a_send_at(const struct kern_coll_desc *c, int32_t n,
                            int32_t src, int32_t dst)
{
    uint64_t at = 0;
    int32_t j;

    for (j = 0; j < dst; j++)
        at += c->a2a_counts[(size_t)src * (size_t)n + (size_t)j];
    return at;
}

/* Rank r's part, once every send buffer is written. */
static void exchange(struct cpu_comm *cm, int32_t r,
                     const struct kern_coll_desc *c)
{
    struct cpu_rank *me = &cm->ranks[r];
    uint64_t at = 0, i, cnt;
    int32_t src, n = cm->n;

    switch (c->op) {
    case KERN_COLL_ALLTOALL:
        for (src = 0; src < n; src++) {
            cnt = c->a2a_counts[(size_t)src * (size_t)n + (size_t)r];
            if (cnt > 0)
                memcpy(me->recv + at,
                       cm->ranks[src].send + a2a_send_at(c, n, src, r),
                       (size_t)cnt * sizeof(float));
            at += cnt;
        }
        break;
    case KERN_COLL_REDUCE_SCATTER:
        for (i = 0; i < c->count; i++) {
            float s = 0;

            for (src = 0; src < n; src++)
                s += cm->ranks[src].send[(uint64_t)r * c->count + i];
            me->recv[i] = s;
        }
        break;
    case KERN_COLL_ALL_GATHER:
        for (src = 0; src < n; src++)
            memcpy(me->recv + (uint64_t)src * c->count, cm->ranks[src].send,
                   (size_t)c->count * sizeof(float));
        break;
    default: /* all-reduce */
        for (i = 0; i < c->count; i++) {
            float s = 0;

            for (src = 0; src < n; src++)
                s += cm->ranks[src].send[i];
            me->recv[i] = s;
        }
        break;
    }
}

int kern_cpu_comm_run(void *comm, int32_t rank, const struct kern_coll_desc *c,
                      struct sd_diag *d)
{
    struct cpu_comm *cm = comm;
    struct cpu_rank *me = &cm->ranks[rank];
    uint64_t send, recv;
    int rv;

    totals(c, cm->n, rank, &send, &recv);
    rv = grow(&me->send, &me->send_cap, send, (float)(rank + 1), true);
    if (rv == 0)
        rv = grow(&me->recv, &me->recv_cap, recv, 0, false);
    if (rv != 0) {
        kern__barrier_break(&cm->bar); /* the others must not wait */
        return sd_diag_set(d, rv, "comm rank %d: out of memory", (int)rank);
    }
    if (!kern__barrier_wait(&cm->bar))
        return sd_diag_set(d, SD_ECANCELED, "comm: a rank failed");
    exchange(cm, rank, c);
    return 0;
}
