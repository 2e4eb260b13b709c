/*
 * The gRPC C-core server of shardd on a libuv loop; the only file of the
 * project that includes gRPC headers (scripts/check-layering.sh).
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
#include "rpc.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>
#include <uv.h>

#include "shardd/log.h"

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

/* ---------------------------------------------------------------------- */
/* Error mapping: SD_E* to gRPC status, once, here                          */

static grpc_status_code status_of(int err)
{
    switch (err) {
    case SD_EINVAL:
    case SD_EFORMAT:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case SD_ENOSPACE: /* tables do not fit: docs/api.md */
    case SD_ERANGE:   /* over a server limit */
    case SD_ENOMEM:
    case SD_EBUSY:
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case SD_ENOENT: /* no such model version, job, service */
        return GRPC_STATUS_NOT_FOUND;
    case SD_ESTATE: /* no model for the profile, no new samples */
        return GRPC_STATUS_FAILED_PRECONDITION;
    case SD_EAUTH:
        return GRPC_STATUS_UNAUTHENTICATED;
    case SD_ETIMEDOUT:
        return GRPC_STATUS_DEADLINE_EXCEEDED;
    case SD_EUNSUPPORTED:
        return GRPC_STATUS_UNIMPLEMENTED;
    case SD_ECANCELED:
        return GRPC_STATUS_CANCELLED;
    case SD_ECORRUPT: /* the store was damaged under the daemon */
        return GRPC_STATUS_DATA_LOSS;
    default:
        return GRPC_STATUS_INTERNAL;
    }
}

/* ---------------------------------------------------------------------- */
/* cq thread -> loop                                                       */

static void *cq_thread_main(void *arg)
{
    struct rpc_server *srv = arg;

    for (;;) {
        grpc_event ev = grpc_completion_queue_next(
            srv->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);

        pthread_mutex_lock(&srv->mu);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) {
            srv->cq_drained = true;
            pthread_mutex_unlock(&srv->mu);
            uv_async_send(&srv->async);
            return NULL;
        }
        if (ev.type == GRPC_OP_COMPLETE) {
            struct rpc_tag *t = ev.tag;

            TAG_RECEIVED(t);

            t->ok = ev.success != 0;
            t->next = NULL;
            if (srv->tail != NULL)
                srv->tail->next = t;
            else
                srv->head = t;
            srv->tail = t;
        }
        pthread_mutex_unlock(&srv->mu);
        /* libuv coalesces sends; on_async drains the whole list. */
        uv_async_send(&srv->async);
    }
}

static void on_async(uv_async_t *h)
{
    struct rpc_server *srv = h->data;
    struct rpc_tag *list;
    bool drained;

    pthread_mutex_lock(&srv->mu);
    list = srv->head;
    srv->head = srv->tail = NULL;
    drained = srv->cq_drained;
    pthread_mutex_unlock(&srv->mu);

    while (list != NULL) {
        struct rpc_tag *t = list;

        list = t->next;
        t->done(t, t->ok);
    }
    if (drained) {
        /* Every event came before GRPC_QUEUE_SHUTDOWN and has run.  The
         * thread's last act was the uv_async_send() that woke us, so after
         * the join nobody touches the async handle but us. */
        pthread_join(srv->thread, NULL);
        grpc_completion_queue_destroy(srv->cq);
        srv->cq = NULL;
        uv_close((uv_handle_t *)&srv->async, NULL);
        uv_close((uv_handle_t *)&srv->grace, NULL);
    }
}

/* ---------------------------------------------------------------------- */
/* Calls                                                                   */

static void request_call(struct rpc_server *srv, const struct rpc_slot *slot);
static void work_run(uv_work_t *w);
static void work_after(uv_work_t *w, int status);

static void maybe_shutdown_cq(struct rpc_server *srv)
{
    if (srv->server_gone && srv->live == 0 && !srv->cq_shut) {
        srv->cq_shut = true;
        grpc_completion_queue_shutdown(srv->cq); /* the thread then exits */
    }
}

static void call_unref(struct rpc_call *c)
{
    struct rpc_server *srv = c->srv;

    if (--c->refs > 0)
        return;
    grpc_metadata_array_destroy(&c->md);
    if (c->slot == NULL)
        grpc_call_details_destroy(&c->details);
    if (c->payload != NULL)
        grpc_byte_buffer_destroy(c->payload);
    if (c->out != NULL)
        grpc_byte_buffer_destroy(c->out);
    if (c->in != NULL)
        grpc_byte_buffer_destroy(c->in);
    grpc_slice_unref(c->req);
    free(c->resp);
    free(c->sstate);
    if (c->call != NULL)
        grpc_call_unref(c->call);
    free(c);
    srv->live--;
    maybe_shutdown_cq(srv);
}

static void on_send_done(struct rpc_tag *t, bool ok)
{
    struct rpc_call *c = CONTAINER_OF(t, struct rpc_call, t_send);

    (void)ok; /* false: the client is gone; nothing more to do either way */
    if (c->out != NULL) {
        grpc_byte_buffer_destroy(c->out);
        c->out = NULL;
    }
    call_unref(c);
}

/*
 * Sends the reply (`resp`, owned by the byte buffer from here on, may be
 * NULL for a status only) and the status in one batch.  The application's
 * reference passes to the batch.
 */
static void call_reply(struct rpc_call *c, grpc_status_code code,
                       const char *details)
{
    grpc_op ops[3];
    grpc_slice det = grpc_slice_from_copied_string(details ? details : "");
    grpc_call_error e;
    size_t n = 0;

    memset(ops, 0, sizeof(ops));
    if (!c->md_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        c->md_sent = true;
    }
    c->ended = true;
    if (c->resp != NULL) {
        grpc_slice s = grpc_slice_new(c->resp, c->resp_len, free);

        c->resp = NULL; /* the slice frees it */
        c->out = grpc_raw_byte_buffer_create(&s, 1);
        grpc_slice_unref(s);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = c->out;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    ops[n++].data.send_status_from_server.status_details = &det;
    TAG_HANDOFF(&c->t_send);
    e = grpc_call_start_batch(c->call, ops, n, &c->t_send, NULL);
    grpc_slice_unref(det); /* not retained past start_batch */
    if (e != GRPC_CALL_OK) {
        sd_log(SD_LOG_ERROR, "cannot send a reply: %s",
               grpc_call_error_to_string(e));
        call_unref(c);
    }
}

/* Gives up on a call whose client is gone: no status is owed. */
static void call_abandon(struct rpc_call *c)
{
    grpc_call_cancel(c->call, NULL);
    call_unref(c);
}

/* ---------------------------------------------------------------------- */
/* Lanes: big searches take at most max_big workers (threads - 1 by      */
/* default), and at most big_per_peer of them come from one client host, */
/* so small requests always find a worker (docs/daemon.md, "Limits").    */

/* The call counts as in flight: srv->queued, its bytes, srv->working. */
static void work_add(struct rpc_call *c)
{
    struct rpc_server *srv = c->srv;

    c->counted = true;
    srv->queued++;
    srv->queued_bytes += GRPC_SLICE_LENGTH(c->req);
    c->wprev = NULL;
    c->wnext = srv->working;
    if (srv->working != NULL)
        srv->working->wprev = c;
    srv->working = c;
}

/* The call's work is over (done, cancelled, or it never started). */
static void work_done(struct rpc_call *c)
{
    struct rpc_server *srv = c->srv;

    if (!c->counted)
        return;
    c->counted = false;
    srv->queued--;
    srv->queued_bytes -= GRPC_SLICE_LENGTH(c->req);
    if (c->wprev != NULL)
        c->wprev->wnext = c->wnext;
    else
        srv->working = c->wnext;
    if (c->wnext != NULL)
        c->wnext->wprev = c->wprev;
    c->wnext = c->wprev = NULL;
}

/* Big searches of c's client host running now. */
static size_t peer_big(const struct rpc_server *srv, const struct rpc_call *c)
{
    const struct rpc_call *w;
    size_t n = 0;

    for (w = srv->working; w != NULL; w = w->wnext)
        if (w->queued && w->lane == SVC_LANE_BIG &&
            strcmp(w->peer, c->peer) == 0)
            n++;
    return n;
}

static bool big_may_start(const struct rpc_server *srv,
                          const struct rpc_call *c)
{
    return srv->big_running < srv->max_big &&
           peer_big(srv, c) < srv->cfg.big_per_peer;
}

static void wait_push(struct rpc_server *srv, struct rpc_call *c)
{
    c->waiting = true;
    c->wait_next = NULL;
    if (srv->wait_tail != NULL)
        srv->wait_tail->wait_next = c;
    else
        srv->wait_head = c;
    srv->wait_tail = c;
}

static void wait_remove(struct rpc_server *srv, struct rpc_call *c)
{
    struct rpc_call **at, *prev = NULL;

    for (at = &srv->wait_head; *at != NULL; prev = *at, at = &(*at)->wait_next)
        if (*at == c) {
            *at = c->wait_next;
            if (srv->wait_tail == c)
                srv->wait_tail = prev;
            break;
        }
    c->waiting = false;
    c->wait_next = NULL;
}

/* Hands the call's work to the threadpool. */
static void dispatch(struct rpc_call *c)
{
    c->work.data = c;
    if (uv_queue_work(c->srv->loop, &c->work, work_run, work_after) != 0) {
        work_done(c);
        call_reply(c, GRPC_STATUS_INTERNAL, "cannot queue the request");
        return;
    }
    c->queued = true;
    if (c->lane == SVC_LANE_BIG)
        c->srv->big_running++;
}

/* Starts the waiting big searches that may start now, oldest first. */
static void dispatch_waiting(struct rpc_server *srv)
{
    struct rpc_call *c = srv->wait_head, *next;

    for (; c != NULL && srv->big_running < srv->max_big; c = next) {
        next = c->wait_next;
        if (peer_big(srv, c) >= srv->cfg.big_per_peer)
            continue;
        wait_remove(srv, c);
        dispatch(c);
    }
}

/* The client's host from gRPC's peer ("ipv4:10.0.0.7:51234"), without the
 * port; every unix-socket client is one host, "unix". */
static void peer_of(struct rpc_call *c)
{
    char *peer = grpc_call_get_peer(c->call);
    char *colon;

    snprintf(c->peer, sizeof(c->peer), "%s", peer != NULL ? peer : "?");
    gpr_free(peer);
    if (strncmp(c->peer, "unix", 4) == 0) {
        snprintf(c->peer, sizeof(c->peer), "unix");
        return;
    }
    colon = strrchr(c->peer, ':');
    if (colon != NULL && colon != strchr(c->peer, ':'))
        *colon = '\0';
}

static void on_close(struct rpc_tag *t, bool ok)
{
    struct rpc_call *c = CONTAINER_OF(t, struct rpc_call, t_close);

    (void)ok; /* RECV_CLOSE_ON_SERVER always succeeds */
    c->closed = true;
    /* The client is gone (cancelled, deadline, or the grace period ran
     * out): a search not yet started is skipped, and one running sees the
     * flag and stops (uv_cancel() then fails and changes nothing). */
    if (c->cancelled && c->queued) {
        atomic_store(&c->gone, true);
        atomic_store(&c->stop, true);
        uv_cancel((uv_req_t *)&c->work);
    }
    if (c->cancelled && c->waiting) { /* never started: let it go */
        wait_remove(c->srv, c);
        work_done(c);
        call_abandon(c);
    }
    call_unref(c);
}

/* Worker thread: the method itself.  No gRPC here. */
static void work_run(uv_work_t *w)
{
    struct rpc_call *c = w->data;

    struct svc_call call = {c->deadline_ms, &c->stop, &c->gone};

    /* A call whose deadline passed while it waited for a worker is not
     * worked on: its client has given up. */
    if (c->deadline_ms != INT64_MAX && sd_now_ms() >= c->deadline_ms) {
        c->err = sd_diag_set(&c->diag, SD_ETIMEDOUT,
                             "the deadline passed before a worker was free");
        return;
    }
    c->err = c->slot->method->fn(
        c->srv->cfg.svc, &call, GRPC_SLICE_START_PTR(c->req),
        GRPC_SLICE_LENGTH(c->req), &c->resp, &c->resp_len, &c->diag);
}

/* Loop thread: the work is done; reply unless the client left. */
static void work_after(uv_work_t *w, int status)
{
    struct rpc_call *c = w->data;

    c->queued = false;
    if (c->lane == SVC_LANE_BIG)
        c->srv->big_running--;
    work_done(c);
    dispatch_waiting(c->srv);
    /* status is UV_ECANCELED when on_close() cancelled the work; then the
     * call is closed and cancelled, and abandoned here. */
    (void)status;
    if (c->closed && c->cancelled) {
        call_abandon(c);
        return;
    }
    sd_log(SD_LOG_DEBUG, "%s: %s in %lld ms", c->slot->method->path,
           c->err != 0 ? sd_err_name(c->err) : "OK",
           (long long)(sd_now_ms() - c->started_ms));
    if (c->err != 0) {
        grpc_status_code code = status_of(c->err);

        if (code == GRPC_STATUS_INTERNAL)
            sd_log(SD_LOG_ERROR, "%s: %s (%s)", c->slot->method->path,
                   c->diag.msg, sd_err_name(c->err));
        free(c->resp);
        c->resp = NULL;
        call_reply(c, code, c->diag.msg);
        return;
    }
    call_reply(c, GRPC_STATUS_OK, NULL);
}

/* Starts a batch of one op whose completion runs t; the batch holds a
 * reference.  False when gRPC refused it. */
static bool start_one(struct rpc_call *c, grpc_op *op, struct rpc_tag *t)
{
    c->refs++;
    TAG_HANDOFF(t);
    if (grpc_call_start_batch(c->call, op, 1, t, NULL) == GRPC_CALL_OK)
        return true;
    c->refs--;
    return false;
}

/* Watches for cancellation and deadline while the call is worked on. */
static void watch_close(struct rpc_call *c)
{
    grpc_op op;

    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->cancelled;
    start_one(c, &op, &c->t_close);
}

/* ---------------------------------------------------------------------- */
/* Server streaming                                                        */

static void on_poll_closed(uv_handle_t *h)
{
    call_unref(h->data);
}

static void stream_stop_polling(struct rpc_call *c)
{
    if (!c->polling)
        return;
    c->polling = false;
    uv_timer_stop(&c->poll);
    uv_close((uv_handle_t *)&c->poll, on_poll_closed);
}

/* Ends a stream with a status (the application's reference goes with it). */
static void stream_finish(struct rpc_call *c, grpc_status_code code,
                          const char *details)
{
    stream_stop_polling(c);
    call_reply(c, code, details);
}

static void bidi_recv(struct rpc_call *c);

static void on_msg_sent(struct rpc_tag *t, bool ok)
{
    struct rpc_call *c = CONTAINER_OF(t, struct rpc_call, t_msg);

    c->sending = false;
    if (c->out != NULL) {
        grpc_byte_buffer_destroy(c->out);
        c->out = NULL;
    }
    if (!ok) { /* the client is gone */
        if (!c->ended) {
            stream_stop_polling(c);
            call_abandon(c);
        }
    } else if (c->finish_after && !c->ended) {
        stream_finish(c, GRPC_STATUS_OK, NULL);
    } else if (c->slot->method->bidi != NULL && !c->ended) {
        bidi_recv(c); /* answered: the next request */
    }
    call_unref(c); /* the batch's reference */
}

/* Sends one message of a stream (msg: owned by the byte buffer from here). */
static void stream_send(struct rpc_call *c, uint8_t *msg, size_t len)
{
    grpc_slice sl = grpc_slice_new(msg, len, free);
    grpc_op ops[2];
    size_t n = 0;

    memset(ops, 0, sizeof(ops));
    if (!c->md_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        c->md_sent = true;
    }
    c->out = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = c->out;
    c->refs++;
    c->sending = true;
    TAG_HANDOFF(&c->t_msg);
    if (grpc_call_start_batch(c->call, ops, n, &c->t_msg, NULL) !=
        GRPC_CALL_OK) {
        c->sending = false;
        c->refs--;
        grpc_byte_buffer_destroy(c->out);
        c->out = NULL;
        stream_finish(c, GRPC_STATUS_INTERNAL, "cannot send");
    }
}

/* Loop thread: asks the method for news and sends it. */
static void stream_poll(struct rpc_call *c)
{
    struct rpc_server *srv = c->srv;
    uint8_t *msg = NULL;
    size_t len = 0;
    bool last = false;
    int rv;

    if (c->sending || c->ended)
        return;
    if (c->closed && c->cancelled) { /* the client left */
        stream_stop_polling(c);
        c->ended = true;
        call_abandon(c);
        return;
    }
    /* Streams end with the lame duck, but those still served then (health
     * Watch, which reports NOT_SERVING) end when the listeners close. */
    if (srv->stopping || (srv->draining && !c->slot->method->draining_ok)) {
        stream_finish(c, GRPC_STATUS_UNAVAILABLE, "the server is stopping");
        return;
    }
    rv = c->slot->method->stream(srv->cfg.svc, GRPC_SLICE_START_PTR(c->req),
                                 GRPC_SLICE_LENGTH(c->req), &c->sstate, &msg,
                                 &len, &last, &c->diag);
    if (rv != 0) {
        stream_finish(c, status_of(rv), c->diag.msg);
        return;
    }
    if (msg != NULL) {
        c->finish_after = last;
        stream_send(c, msg, len);
    } else if (last) {
        stream_finish(c, GRPC_STATUS_OK, NULL);
    }
}

static void on_poll_timer(uv_timer_t *h)
{
    stream_poll(h->data);
}

static void stream_start(struct rpc_call *c)
{
    uv_timer_init(c->srv->loop, &c->poll);
    c->poll.data = c;
    c->polling = true;
    c->refs++; /* the timer's, dropped in on_poll_closed */
    uv_timer_start(&c->poll, on_poll_timer, RPC_POLL_MS, RPC_POLL_MS);
    stream_poll(c);
}

/* ---------------------------------------------------------------------- */
/* Bidirectional streams: receive a request, send its answer, again        */

static void on_bidi_recv(struct rpc_tag *t, bool ok)
{
    struct rpc_call *c = CONTAINER_OF(t, struct rpc_call, t_recv);
    grpc_byte_buffer_reader rd;
    grpc_slice req;
    uint8_t *msg = NULL;
    size_t len = 0;
    int rv;

    if (!ok || (c->closed && c->cancelled)) { /* the client is gone */
        if (!c->ended) {
            c->ended = true;
            call_abandon(c);
        }
    } else if (c->in == NULL) { /* the client half-closed: all answered */
        call_reply(c, GRPC_STATUS_OK, NULL);
    } else if (!grpc_byte_buffer_reader_init(&rd, c->in)) {
        call_reply(c, GRPC_STATUS_INVALID_ARGUMENT,
                   "cannot decompress the request");
    } else {
        req = grpc_byte_buffer_reader_readall(&rd);
        grpc_byte_buffer_reader_destroy(&rd);
        rv =
            c->slot->method->bidi(c->srv->cfg.svc, GRPC_SLICE_START_PTR(req),
                                  GRPC_SLICE_LENGTH(req), &msg, &len, &c->diag);
        grpc_slice_unref(req);
        if (rv != 0)
            call_reply(c, status_of(rv), c->diag.msg);
        else
            stream_send(c, msg, len);
    }
    if (c->in != NULL) {
        grpc_byte_buffer_destroy(c->in);
        c->in = NULL;
    }
    call_unref(c); /* the batch's reference */
}

/* Waits for the next request message of a bidi call. */
static void bidi_recv(struct rpc_call *c)
{
    grpc_op op;

    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->in;
    if (!start_one(c, &op, &c->t_recv))
        call_reply(c, GRPC_STATUS_INTERNAL, "cannot receive");
}

/* ---------------------------------------------------------------------- */
/* New calls                                                               */

/* The client's deadline on our monotonic clock (INT64_MAX: none). */
static int64_t deadline_of(gpr_timespec deadline)
{
    gpr_timespec now, left;
    int64_t ms;

    if (gpr_time_cmp(deadline, gpr_inf_future(deadline.clock_type)) == 0)
        return INT64_MAX;
    now = gpr_now(deadline.clock_type);
    left = gpr_time_sub(deadline, now);
    ms = (int64_t)left.tv_sec * 1000 + left.tv_nsec / 1000000;
    if (ms > (int64_t)1 << 50)
        return INT64_MAX;
    return sd_now_ms() + ms;
}

/*
 * Admin calls: over a unix socket, or with the metadata
 * "authorization: Bearer <token>".
 */
static int authorize(struct rpc_call *c)
{
    char *peer = grpc_call_get_peer(c->call);
    bool unix_peer = peer != NULL && strncmp(peer, "unix", 4) == 0;
    char bearer[512], *token = NULL;
    size_t i;

    gpr_free(peer);
    for (i = 0; i < c->md.count; i++) {
        const grpc_metadata *m = &c->md.metadata[i];
        size_t n = GRPC_SLICE_LENGTH(m->value);

        if (!grpc_slice_str_cmp(m->key, "authorization") && n > 7 &&
            n < sizeof(bearer) &&
            memcmp(GRPC_SLICE_START_PTR(m->value), "Bearer ", 7) == 0) {
            memcpy(bearer, GRPC_SLICE_START_PTR(m->value) + 7, n - 7);
            bearer[n - 7] = '\0';
            token = bearer;
        }
    }
    return svc_authorize(c->srv->cfg.svc, unix_peer, token, &c->diag);
}

static void on_new_call(struct rpc_tag *t, bool ok)
{
    struct rpc_call *c = CONTAINER_OF(t, struct rpc_call, t_new);
    struct rpc_server *srv = c->srv;
    grpc_byte_buffer_reader rd;
    char *method;

    if (!ok) { /* the server is shutting down: no call came */
        call_unref(c);
        return;
    }
    if (!srv->stopping)
        request_call(srv, c->slot); /* be ready for the next one */
    watch_close(c);

    /* Lame duck: answered, so that the client retries elsewhere (gRPC
     * itself would cancel a call that races its GOAWAY). */
    if (srv->draining && (c->slot == NULL || !c->slot->method->draining_ok)) {
        call_reply(c, GRPC_STATUS_UNAVAILABLE,
                   "the server is stopping; retry on another");
        return;
    }
    if (c->slot == NULL) {
        method = grpc_slice_to_c_string(c->details.method);
        sd_log(SD_LOG_INFO, "unknown method %s", method);
        gpr_free(method);
        call_reply(c, GRPC_STATUS_UNIMPLEMENTED, "method not implemented");
        return;
    }
    peer_of(c);
    if (c->slot->method->admin && authorize(c) != 0) {
        call_reply(c, GRPC_STATUS_UNAUTHENTICATED, c->diag.msg);
        return;
    }
    c->started_ms = sd_now_ms();
    if (c->slot->method->bidi != NULL) {
        bidi_recv(c);
        return;
    }
    if (c->payload == NULL) {
        call_reply(c, GRPC_STATUS_INVALID_ARGUMENT, "no request message");
        return;
    }
    if (!grpc_byte_buffer_reader_init(&rd, c->payload)) {
        call_reply(c, GRPC_STATUS_INVALID_ARGUMENT,
                   "cannot decompress the request");
        return;
    }
    grpc_slice_unref(c->req);
    c->req = grpc_byte_buffer_reader_readall(&rd);
    grpc_byte_buffer_reader_destroy(&rd);
    grpc_byte_buffer_destroy(c->payload);
    c->payload = NULL;
    c->deadline_ms = deadline_of(c->deadline);

    if (c->slot->method->stream != NULL) {
        stream_start(c);
        return;
    }
    /* Past the queue limit a client is better told now than after a wait
     * it did not plan for. */
    if (srv->queued >= srv->cfg.max_queued ||
        srv->queued_bytes + GRPC_SLICE_LENGTH(c->req) >
            srv->cfg.max_queued_bytes) {
        snprintf(c->diag.msg, sizeof(c->diag.msg),
                 "the server is busy: %zu requests (%zu MiB) in flight; "
                 "retry later",
                 srv->queued, srv->queued_bytes >> 20);
        call_reply(c, GRPC_STATUS_RESOURCE_EXHAUSTED, c->diag.msg);
        return;
    }
    c->lane =
        c->slot->method->lane != NULL
            ? c->slot->method->lane(srv->cfg.svc, GRPC_SLICE_START_PTR(c->req),
                                    GRPC_SLICE_LENGTH(c->req))
            : SVC_LANE_SMALL;
    work_add(c);
    if (c->lane == SVC_LANE_BIG && !big_may_start(srv, c)) {
        wait_push(srv, c); /* dispatch_waiting() starts it later */
        return;
    }
    dispatch(c);
}

/* Asks gRPC for the next call of one method (slot NULL: any other). */
static void request_call(struct rpc_server *srv, const struct rpc_slot *slot)
{
    struct rpc_call *c = calloc(1, sizeof(*c));
    grpc_call_error e;

    if (c == NULL) {
        sd_log(SD_LOG_ERROR, "out of memory; %s is no longer served",
               slot ? slot->method->path : "the catch-all");
        return;
    }
    c->srv = srv;
    c->slot = slot;
    c->refs = 1;
    atomic_init(&c->gone, false);
    atomic_init(&c->stop, false);
    c->t_new.done = on_new_call;
    c->t_send.done = on_send_done;
    c->t_close.done = on_close;
    c->t_msg.done = on_msg_sent;
    c->t_recv.done = on_bidi_recv;
    c->req = grpc_empty_slice();
    grpc_metadata_array_init(&c->md);
    srv->live++;
    TAG_HANDOFF(&c->t_new);
    if (slot != NULL) {
        /* A bidi method reads its messages itself: no payload here. */
        e = grpc_server_request_registered_call(
            srv->server, slot->handle, &c->call, &c->deadline, &c->md,
            slot->method->bidi != NULL ? NULL : &c->payload, srv->cq, srv->cq,
            &c->t_new);
    } else {
        grpc_call_details_init(&c->details);
        e = grpc_server_request_call(srv->server, &c->call, &c->details, &c->md,
                                     srv->cq, srv->cq, &c->t_new);
    }
    if (e != GRPC_CALL_OK) {
        sd_log(SD_LOG_ERROR, "cannot request calls: %s",
               grpc_call_error_to_string(e));
        call_unref(c);
    }
}

/* ---------------------------------------------------------------------- */
/* Lifecycle                                                               */

static void on_shutdown_done(struct rpc_tag *t, bool ok)
{
    struct rpc_server *srv = CONTAINER_OF(t, struct rpc_server, shutdown_tag);

    (void)ok;
    uv_timer_stop(&srv->grace);
    grpc_server_destroy(srv->server);
    srv->server = NULL;
    srv->server_gone = true;
    maybe_shutdown_cq(srv);
}

static void on_halt_over(uv_timer_t *h)
{
    struct rpc_server *srv = h->data;

    if (srv->server != NULL) {
        sd_log(SD_LOG_WARN, "cancelling the calls still running");
        grpc_server_cancel_all_calls(srv->server);
    }
}

/*
 * The grace period is over: every search still running stops as at the
 * end of its budget and answers with its best plan so far (marked
 * time_budget_exhausted), then, RPC_HALT_REPLY_MS later, what is left is
 * cancelled.
 */
static void on_grace_over(uv_timer_t *h)
{
    struct rpc_server *srv = h->data;
    struct rpc_call *c;
    size_t n = 0;

    if (srv->server == NULL)
        return;
    for (c = srv->working; c != NULL; c = c->wnext, n++)
        atomic_store(&c->stop, true);
    sd_log(SD_LOG_WARN,
           "grace period over: %zu call(s) still running answer with what "
           "they have",
           n);
    uv_timer_start(&srv->grace, on_halt_over, RPC_HALT_REPLY_MS, 0);
}

/* Undoes a start that failed before the cq thread ran: synchronous. */
static void destroy_unstarted(struct rpc_server *srv)
{
    if (srv->server != NULL)
        grpc_server_destroy(srv->server);
    if (srv->cq != NULL) {
        grpc_event ev;

        grpc_completion_queue_shutdown(srv->cq);
        do {
            ev = grpc_completion_queue_next(
                srv->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        } while (ev.type != GRPC_QUEUE_SHUTDOWN);
        grpc_completion_queue_destroy(srv->cq);
    }
    pthread_mutex_destroy(&srv->mu);
    free(srv->slots);
    free(srv);
    grpc_shutdown();
}

/* Adds a bound address to the list; "host:0" names the port it got. */
static void add_address(struct rpc_server *srv, const char *listen, int port)
{
    const char *colon = strrchr(listen, ':');
    size_t n = strlen(srv->address);
    const char *sep = n > 0 ? ", " : "";

    if (strncmp(listen, "unix:", 5) != 0 && colon != NULL &&
        strcmp(colon, ":0") == 0)
        snprintf(srv->address + n, sizeof(srv->address) - n, "%s%.*s:%d", sep,
                 (int)(colon - listen), listen, port);
    else
        snprintf(srv->address + n, sizeof(srv->address) - n, "%s%s", sep,
                 listen);
}

/*
 * Binds one listen address.  A unix socket is made with the configured
 * mode whatever the umask (created under a umask that allows no more, then
 * set exactly) and given the configured group: Admin calls on it need no
 * token, so who may connect is decided here.
 */
static int bind_one(struct rpc_server *srv, const char *listen,
                    struct sd_diag *d)
{
    const struct rpc_config *cfg = &srv->cfg;
    grpc_server_credentials *creds;
    bool is_unix = strncmp(listen, "unix:", 5) == 0;
    const char *path = listen + 5;
    mode_t old = 0;
    int port;

    if (is_unix)
        old = umask((mode_t)(~cfg->unix_mode & 0777));
    creds = grpc_insecure_server_credentials_create();
    port = grpc_server_add_http2_port(srv->server, listen, creds);
    grpc_server_credentials_release(creds); /* the server has its own */
    if (is_unix)
        umask(old);
    if (port == 0)
        return sd_diag_set(d, SD_EIO,
                           "listen %s: cannot bind (address in use, bad "
                           "address or no permission)",
                           listen);
    if (is_unix && cfg->unix_gid >= 0 &&
        chown(path, (uid_t)-1, (gid_t)cfg->unix_gid) != 0)
        return sd_diag_set(d, SD_EIO,
                           "listen %s: cannot give it group %lld: %s", listen,
                           (long long)cfg->unix_gid, strerror(errno));
    if (is_unix && chmod(path, (mode_t)cfg->unix_mode) != 0)
        return sd_diag_set(d, SD_EIO, "listen %s: cannot set mode %04o: %s",
                           listen, (unsigned)cfg->unix_mode, strerror(errno));
    add_address(srv, listen, port);
    return 0;
}

/*
 * gRPC's own log lines, into shardd's log: while the server starts (when a
 * failure is shardd's one line, e.g. an address in use) at debug level,
 * afterwards its errors as warnings.  One line each, "grpc: ..." (gRPC
 * 1.51 otherwise prints multi-line internal dumps on stderr).
 */
static atomic_bool grpc_starting;

static void log_from_grpc(gpr_log_func_args *a)
{
    enum sd_log_level lv = SD_LOG_DEBUG;

    if (a->severity == GPR_LOG_SEVERITY_ERROR && !atomic_load(&grpc_starting))
        lv = SD_LOG_WARN;
    sd_log(lv, "grpc: %s", a->message);
}

int rpc_server_start(uv_loop_t *loop, const struct rpc_config *cfg,
                     struct rpc_server **out, struct sd_diag *d)
{
    struct rpc_server *srv;
    grpc_channel_args ch_args;
    grpc_arg args[8];
    size_t i;
    int rv;

    if (cfg->nlisten == 0 || cfg->nlisten > RPC_LISTEN_MAX ||
        cfg->nmethods == 0 || cfg->max_queued == 0 ||
        cfg->max_queued_bytes < cfg->max_message_bytes ||
        cfg->max_message_bytes == 0 || cfg->max_message_bytes > INT32_MAX)
        return sd_diag_set(d, SD_EINVAL, "rpc: bad server configuration");
    srv = calloc(1, sizeof(*srv));
    if (srv == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    srv->slots = calloc(cfg->nmethods, sizeof(*srv->slots));
    if (srv->slots == NULL) {
        free(srv);
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    }
    srv->loop = loop;
    srv->cfg = *cfg;
    srv->max_big = cfg->max_big > 0 ? cfg->max_big : 1;
    pthread_mutex_init(&srv->mu, NULL);
    srv->shutdown_tag.done = on_shutdown_done;

    atomic_store(&grpc_starting, true);
    gpr_set_log_function(log_from_grpc);
    grpc_init(); /* starts gRPC's own threads: never fork after this */
    memset(args, 0, sizeof(args));
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = (int)cfg->max_message_bytes;
    /* gRPC's default lets a second server bind the same TCP port and take
     * half the connections; refuse instead. */
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)GRPC_ARG_ALLOW_REUSEPORT;
    args[1].value.integer = 0;
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = (char *)GRPC_ARG_KEEPALIVE_TIME_MS;
    args[2].value.integer = 60 * 1000;
    args[3].type = GRPC_ARG_INTEGER;
    args[3].key = (char *)GRPC_ARG_KEEPALIVE_TIMEOUT_MS;
    args[3].value.integer = 20 * 1000;
    args[4].type = GRPC_ARG_INTEGER;
    args[4].key = (char *)GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS;
    args[4].value.integer = 10 * 1000;
    /* A connection idle this long is closed (clients reconnect on their
     * next call), one that has not finished its handshake by then too, and
     * one connection carries at most this many calls at once. */
    args[5].type = GRPC_ARG_INTEGER;
    args[5].key = (char *)GRPC_ARG_MAX_CONNECTION_IDLE_MS;
    args[5].value.integer = RPC_IDLE_CONNECTION_MS;
    args[6].type = GRPC_ARG_INTEGER;
    args[6].key = (char *)GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS;
    args[6].value.integer = RPC_HANDSHAKE_MS;
    args[7].type = GRPC_ARG_INTEGER;
    args[7].key = (char *)GRPC_ARG_MAX_CONCURRENT_STREAMS;
    args[7].value.integer = RPC_STREAMS_PER_CONNECTION;
    ch_args.num_args = sizeof(args) / sizeof(args[0]);
    ch_args.args = args;

    srv->cq = grpc_completion_queue_create_for_next(NULL);
    srv->server = grpc_server_create(&ch_args, NULL);
    grpc_server_register_completion_queue(srv->server, srv->cq, NULL);
    for (i = 0; i < cfg->nmethods; i++) {
        srv->slots[i].method = &cfg->methods[i];
        /* A bidi call's messages are read one by one (bidi_recv()). */
        srv->slots[i].handle = grpc_server_register_method(
            srv->server, cfg->methods[i].path, NULL,
            cfg->methods[i].bidi != NULL
                ? GRPC_SRM_PAYLOAD_NONE
                : GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER,
            0);
        if (srv->slots[i].handle == NULL) {
            rv = sd_diag_set(d, SD_EINVAL, "rpc: cannot register %s",
                             cfg->methods[i].path);
            goto fail_server;
        }
    }
    for (i = 0; i < cfg->nlisten; i++) {
        rv = bind_one(srv, cfg->listen[i], d);
        if (rv != 0)
            goto fail_server;
    }

    /* The handles exist before the thread that signals them. */
    uv_async_init(loop, &srv->async, on_async);
    srv->async.data = srv;
    uv_timer_init(loop, &srv->grace);
    srv->grace.data = srv;
    if (pthread_create(&srv->thread, NULL, cq_thread_main, srv) != 0) {
        rv = sd_diag_set(d, SD_ENOMEM, "rpc: cannot start the cq thread");
        goto fail_handles;
    }
    grpc_server_start(srv->server);
    for (i = 0; i < cfg->nmethods; i++)
        request_call(srv, &srv->slots[i]);
    request_call(srv, NULL); /* unknown methods: UNIMPLEMENTED at once */
    atomic_store(&grpc_starting, false);
    *out = srv;
    return 0;

fail_handles:
    uv_close((uv_handle_t *)&srv->async, NULL);
    uv_close((uv_handle_t *)&srv->grace, NULL);
    uv_run(loop, UV_RUN_NOWAIT); /* runs the close callbacks */
fail_server:
    destroy_unstarted(srv);
    return rv;
}

/* The lame-duck period is over: the gRPC server itself shuts down. */
static void begin_shutdown(struct rpc_server *srv)
{
    srv->stopping = true;
    /* Stops listening and fails the pending call requests (ok = false);
     * the tag fires once the calls in flight are done. */
    TAG_HANDOFF(&srv->shutdown_tag);
    grpc_server_shutdown_and_notify(srv->server, srv->cq, &srv->shutdown_tag);
    if (srv->cfg.grace_ms == 0)
        grpc_server_cancel_all_calls(srv->server);
    else
        uv_timer_start(&srv->grace, on_grace_over, srv->cfg.grace_ms, 0);
}

static void on_lame_duck_over(uv_timer_t *h)
{
    begin_shutdown(h->data);
}

void rpc_server_shutdown(struct rpc_server *srv)
{
    if (srv->draining)
        return;
    srv->draining = true;
    /* First a lame duck: still accepting, answering new calls UNAVAILABLE
     * (which clients retry) while health says NOT_SERVING and the calls
     * in flight run on.  Shutting gRPC down at once would cancel calls
     * that race its GOAWAY on open connections (CANCELLED: not retried). */
    if (srv->cfg.lame_duck_ms == 0 || srv->cfg.grace_ms == 0)
        begin_shutdown(srv);
    else
        uv_timer_start(&srv->grace, on_lame_duck_over, srv->cfg.lame_duck_ms,
                       0);
}

void rpc_server_set_grace(struct rpc_server *srv, uint64_t grace_ms)
{
    srv->cfg.grace_ms = grace_ms;
}

const char *rpc_server_address(const struct rpc_server *srv)
{
    return srv->address;
}

void rpc_server_free(struct rpc_server *srv)
{
    if (srv == NULL)
        return;
    pthread_mutex_destroy(&srv->mu);
    free(srv->slots);
    free(srv);
    grpc_shutdown(); /* synchronous from a non-gRPC thread */
}
