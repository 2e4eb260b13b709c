/*
 * The transport's private header: what rpc.c (the server: start, bind, new
 * calls, shutdown) and rpc_call.c (a call's life: replies, the workers and
 * their lanes, streams) share.  Only these two files and shardd.c include
 * gRPC or libuv headers (scripts/check-layering.sh).
 *
 * Threads (shared/reference/grpc_c_core.md section 4, option A):
 *  - the cq thread blocks in grpc_completion_queue_next() (which is also
 *    what moves gRPC's socket I/O in 1.51), appends every completed tag to a
 *    locked list and wakes the loop with uv_async_send();
 *  - the loop thread drains the list and runs each tag's callback, so every
 *    grpc_call_start_batch() and every change to call state happens there
 *    and needs no lock;
 *  - uv threadpool workers run the service functions (the search); they
 *    never touch a call.
 *
 * A call object is reference counted: one reference for the application
 * (held from the new-call event until the reply is handed to gRPC or the
 * call is abandoned, i.e. across the uv_queue_work), and one for each batch
 * in flight (the close watch, the send).  The completion queue is shut down
 * only once the server's shutdown tag fired AND no call object is left,
 * because a call still being searched for will start a batch later.
 */
#ifndef SHARDD_DAEMON_RPC_INT_H
#define SHARDD_DAEMON_RPC_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include <grpc/grpc.h>
#include <uv.h>

#include "rpc.h"

/*
 * A tag travels loop -> gRPC -> cq thread.  gRPC (a Debian build) is not
 * instrumented, so ThreadSanitizer cannot see that hand-off order the
 * writes before it; the TSan build says so explicitly.  No-ops otherwise.
 */
#if defined(__SANITIZE_THREAD__)
#    include <sanitizer/tsan_interface.h>
#    define TAG_HANDOFF(t)  __tsan_release(t)
#    define TAG_RECEIVED(t) __tsan_acquire(t)
#else
#    define TAG_HANDOFF(t)  ((void)(t))
#    define TAG_RECEIVED(t) ((void)(t))
#endif

#define RPC_ADDRESS_MAX 2048
#define RPC_POLL_MS     100 /* how often a stream looks for news */
/* After the grace period: searches told to stop get this long to reply
 * with their best plan before the remaining calls are cancelled. */
#define RPC_HALT_REPLY_MS          2000
#define RPC_IDLE_CONNECTION_MS     (5 * 60 * 1000)
#define RPC_HANDSHAKE_MS           (10 * 1000)
#define RPC_STREAMS_PER_CONNECTION 256

#define CONTAINER_OF(ptr, type, member)                                        \
    ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* A completion-queue tag: what to run on the loop when it completes. */
struct rpc_tag {
    void (*done)(struct rpc_tag *t, bool ok);
    struct rpc_tag *next; /* cq thread -> loop list, under rpc_server.mu */
    bool ok;
};

struct rpc_slot {
    const struct svc_method *method;
    void *handle; /* grpc_server_register_method() */
};

struct rpc_server {
    uv_loop_t *loop;
    struct rpc_config cfg;
    char address[RPC_ADDRESS_MAX];
    grpc_server *server;       /* NULL once destroyed */
    grpc_completion_queue *cq; /* NULL once destroyed */
    struct rpc_slot *slots;

    pthread_t thread;
    pthread_mutex_t mu;
    struct rpc_tag *head, *tail; /* guarded by mu */
    bool cq_drained;             /* guarded by mu: GRPC_QUEUE_SHUTDOWN seen */
    uv_async_t async;
    uv_timer_t grace;

    struct rpc_tag shutdown_tag;
    bool draining;            /* rpc_server_shutdown() was called: lame duck */
    bool stopping;            /* the gRPC server is shutting down */
    bool server_gone;         /* its shutdown tag fired; server destroyed */
    bool cq_shut;             /* grpc_completion_queue_shutdown() was called */
    int live;                 /* call objects not yet freed */
    size_t queued;            /* unary calls with the threadpool or waiting */
    size_t queued_bytes;      /* and the bytes of their requests */
    struct rpc_call *working; /* those calls (a list through wnext/wprev) */
    struct rpc_call *wait_head, *wait_tail; /* big searches not yet queued */
    size_t big_running;                     /* big searches queued */
    size_t max_big;                         /* at most this many */
};

/* One incoming call, registered (slot set) or unknown (slot NULL). */
struct rpc_call {
    struct rpc_tag t_new, t_send, t_close, t_msg, t_recv;
    struct rpc_server *srv;
    const struct rpc_slot *slot;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_call_details details; /* unknown methods only */
    grpc_byte_buffer *payload; /* the request, until read */
    grpc_byte_buffer *out;     /* the reply, while its batch is in flight */
    grpc_byte_buffer *in;      /* bidi: the message being received */
    int cancelled;             /* set by RECV_CLOSE_ON_SERVER */
    bool closed;               /* RECV_CLOSE_ON_SERVER completed */
    atomic_bool gone;          /* closed and cancelled, for the worker */
    atomic_bool stop;          /* gone, or the grace period ran out */
    bool queued;               /* the work item is with the threadpool */
    bool waiting;              /* in the big lane's queue, not yet queued */
    bool counted;              /* in srv->queued and srv->working */
    enum svc_lane lane;
    char peer[64];                  /* the client's host: big lane caps */
    struct rpc_call *wnext, *wprev; /* srv->working */
    struct rpc_call *wait_next;     /* srv->wait_head .. wait_tail */
    bool md_sent;                   /* initial metadata went out */
    int refs;
    int64_t deadline_ms; /* monotonic (sd_now_ms()); INT64_MAX: none */
    int64_t started_ms;  /* when the call came (for the debug log) */
    double started_f;    /* the same, fractional ms, for the metrics; 0:
                          * refused before any work (not timed) */
    bool observed;       /* counted in the service's metrics */

    /* Server streaming: polled by a timer on the loop. */
    uv_timer_t poll;
    bool polling;      /* the timer is open (it holds a reference) */
    bool sending;      /* a message batch is in flight */
    bool finish_after; /* that message is the last one */
    bool ended;        /* the status has been sent */
    void *sstate;      /* the method's, free()d with the call */

    /* The work item: request in, reply or error out. */
    uv_work_t work;
    grpc_slice req; /* contiguous request bytes */
    uint8_t *resp;
    size_t resp_len;
    int err;
    struct sd_diag diag;
};


/* rpc_call.c */
/* A call object for the next call of slot (NULL: any other method), its
 * new-call tag running on_new; one reference, counted in srv->live. */
struct rpc_call *rpc__call_new(struct rpc_server *srv,
                               const struct rpc_slot *slot,
                               void (*on_new)(struct rpc_tag *t, bool ok));
grpc_status_code rpc__status_of(int err);
void rpc__maybe_shutdown_cq(struct rpc_server *srv);
void rpc__call_unref(struct rpc_call *c);
/* Sends the reply (c->resp, may be NULL) and the status; the application's
 * reference goes with it. */
void rpc__call_reply(struct rpc_call *c, grpc_status_code code,
                     const char *details);
/* Gives up on a call whose client is gone: no status is owed. */
void rpc__call_abandon(struct rpc_call *c);
/* The client's host, for the big lane's per-peer cap. */
void rpc__peer_of(struct rpc_call *c);
/* Watches for cancellation and deadline while the call is worked on. */
void rpc__watch_close(struct rpc_call *c);
/* A unary call's work: counted in flight, then queued in its lane. */
void rpc__work_add(struct rpc_call *c);
bool rpc__big_may_start(const struct rpc_server *srv, const struct rpc_call *c);
void rpc__wait_push(struct rpc_server *srv, struct rpc_call *c);
void rpc__dispatch(struct rpc_call *c);
void rpc__stream_start(struct rpc_call *c);
void rpc__bidi_recv(struct rpc_call *c);

/* rpc.c */
/* Asks gRPC for the next call of one method (slot NULL: any other). */
void rpc__request_call(struct rpc_server *srv, const struct rpc_slot *slot);

#endif /* SHARDD_DAEMON_RPC_INT_H */
