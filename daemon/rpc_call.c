/*
 * A call's life on the loop thread (rpc_int.h): the reply and its status,
 * the error mapping, the unary work on the threadpool in its lane, server
 * streams polled on a timer, and bidi streams answered message by message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>

#include "rpc_int.h"
#include "shardd/log.h"

static void work_run(uv_work_t *w);
static void work_after(uv_work_t *w, int status);
static void on_send_done(struct rpc_tag *t, bool ok);
static void on_close(struct rpc_tag *t, bool ok);
static void on_msg_sent(struct rpc_tag *t, bool ok);
static void on_bidi_recv(struct rpc_tag *t, bool ok);

/* ---------------------------------------------------------------------- */
/* Error mapping: SD_E* to gRPC status, once, here                          */

struct rpc_call *rpc__call_new(struct rpc_server *srv,
                               const struct rpc_slot *slot,
                               void (*on_new)(struct rpc_tag *t, bool ok))
{
    struct rpc_call *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->srv = srv;
    c->slot = slot;
    c->refs = 1;
    atomic_init(&c->gone, false);
    atomic_init(&c->stop, false);
    c->t_new.done = on_new;
    c->t_send.done = on_send_done;
    c->t_close.done = on_close;
    c->t_msg.done = on_msg_sent;
    c->t_recv.done = on_bidi_recv;
    c->req = grpc_empty_slice();
    grpc_metadata_array_init(&c->md);
    srv->live++;
    return c;
}

grpc_status_code rpc__status_of(int err)
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
/* Calls                                                                   */

void rpc__request_call(struct rpc_server *srv, const struct rpc_slot *slot);
static void work_run(uv_work_t *w);
static void work_after(uv_work_t *w, int status);
static void on_send_done(struct rpc_tag *t, bool ok);
static void on_close(struct rpc_tag *t, bool ok);
static void on_msg_sent(struct rpc_tag *t, bool ok);
static void on_bidi_recv(struct rpc_tag *t, bool ok);

void rpc__maybe_shutdown_cq(struct rpc_server *srv)
{
    if (srv->server_gone && srv->live == 0 && !srv->cq_shut) {
        srv->cq_shut = true;
        grpc_completion_queue_shutdown(srv->cq); /* the thread then exits */
    }
}

void rpc__call_unref(struct rpc_call *c)
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
    rpc__maybe_shutdown_cq(srv);
}

static void on_send_done(struct rpc_tag *t, bool ok)
{
    struct rpc_call *c = CONTAINER_OF(t, struct rpc_call, t_send);

    (void)ok; /* false: the client is gone; nothing more to do either way */
    if (c->out != NULL) {
        grpc_byte_buffer_destroy(c->out);
        c->out = NULL;
    }
    rpc__call_unref(c);
}

/* Counts the call's end in the service's metrics, once: its status, and
 * for a unary call that was worked on, its time in its lane. */
static void observe(struct rpc_call *c, grpc_status_code code)
{
    const struct svc_method *m;

    if (c->observed || c->slot == NULL)
        return;
    c->observed = true;
    m = c->slot->method;
    svc_observe(c->srv->cfg.svc, (size_t)(c->slot - c->srv->slots), (int)code,
                c->started_f > 0 ? (sd_now_ms_f() - c->started_f) / 1000.0 : 0,
                c->lane, m->fn != NULL && c->started_f > 0);
}

/* The lanes now, for the service's metrics (loop thread). */
static void lanes_changed(struct rpc_server *srv)
{
    const struct rpc_call *w;
    size_t waiting = 0;

    for (w = srv->wait_head; w != NULL; w = w->wait_next)
        waiting++;
    svc_lanes_set(srv->cfg.svc, srv->queued, srv->big_running, waiting);
}

/*
 * Sends the reply (`resp`, owned by the byte buffer from here on, may be
 * NULL for a status only) and the status in one batch.  The application's
 * reference passes to the batch.
 */
void rpc__call_reply(struct rpc_call *c, grpc_status_code code,
                     const char *details)
{
    grpc_op ops[3];
    grpc_slice det = grpc_slice_from_copied_string(details ? details : "");
    grpc_call_error e;
    size_t n = 0;

    memset(ops, 0, sizeof(ops));
    observe(c, code);
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
        rpc__call_unref(c);
    }
}

/* Gives up on a call whose client is gone: no status is owed. */
void rpc__call_abandon(struct rpc_call *c)
{
    observe(c, GRPC_STATUS_CANCELLED);
    grpc_call_cancel(c->call, NULL);
    rpc__call_unref(c);
}

/* ---------------------------------------------------------------------- */
/* Lanes: big searches take at most max_big workers (threads - 1 by      */
/* default), and at most big_per_peer of them come from one client host, */
/* so small requests always find a worker (docs/daemon.md, "Limits").    */

/* The call counts as in flight: srv->queued, its bytes, srv->working. */
void rpc__work_add(struct rpc_call *c)
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
    lanes_changed(srv);
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
    lanes_changed(srv);
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

bool rpc__big_may_start(const struct rpc_server *srv, const struct rpc_call *c)
{
    return srv->big_running < srv->max_big &&
           peer_big(srv, c) < srv->cfg.big_per_peer;
}

void rpc__wait_push(struct rpc_server *srv, struct rpc_call *c)
{
    c->waiting = true;
    c->wait_next = NULL;
    if (srv->wait_tail != NULL)
        srv->wait_tail->wait_next = c;
    else
        srv->wait_head = c;
    srv->wait_tail = c;
    lanes_changed(srv);
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
void rpc__dispatch(struct rpc_call *c)
{
    c->work.data = c;
    if (uv_queue_work(c->srv->loop, &c->work, work_run, work_after) != 0) {
        work_done(c);
        rpc__call_reply(c, GRPC_STATUS_INTERNAL, "cannot queue the request");
        return;
    }
    c->queued = true;
    if (c->lane == SVC_LANE_BIG)
        c->srv->big_running++;
    lanes_changed(c->srv);
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
        rpc__dispatch(c);
    }
}

/* The client's host from gRPC's peer ("ipv4:10.0.0.7:51234"), without the
 * port; every unix-socket client is one host, "unix". */
void rpc__peer_of(struct rpc_call *c)
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
        rpc__call_abandon(c);
    }
    rpc__call_unref(c);
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
        rpc__call_abandon(c);
        return;
    }
    sd_log(SD_LOG_DEBUG, "%s: %s in %lld ms", c->slot->method->path,
           c->err != 0 ? sd_err_name(c->err) : "OK",
           (long long)(sd_now_ms() - c->started_ms));
    if (c->err != 0) {
        grpc_status_code code = rpc__status_of(c->err);

        if (code == GRPC_STATUS_INTERNAL)
            sd_log(SD_LOG_ERROR, "%s: %s (%s)", c->slot->method->path,
                   c->diag.msg, sd_err_name(c->err));
        free(c->resp);
        c->resp = NULL;
        rpc__call_reply(c, code, c->diag.msg);
        return;
    }
    rpc__call_reply(c, GRPC_STATUS_OK, NULL);
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
void rpc__watch_close(struct rpc_call *c)
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
    rpc__call_unref(h->data);
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
    rpc__call_reply(c, code, details);
}

void rpc__bidi_recv(struct rpc_call *c);

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
            rpc__call_abandon(c);
        }
    } else if (c->finish_after && !c->ended) {
        stream_finish(c, GRPC_STATUS_OK, NULL);
    } else if (c->slot->method->bidi != NULL && !c->ended) {
        rpc__bidi_recv(c); /* answered: the next request */
    }
    rpc__call_unref(c); /* the batch's reference */
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
        rpc__call_abandon(c);
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
        stream_finish(c, rpc__status_of(rv), c->diag.msg);
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

void rpc__stream_start(struct rpc_call *c)
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
            rpc__call_abandon(c);
        }
    } else if (c->in == NULL) { /* the client half-closed: all answered */
        rpc__call_reply(c, GRPC_STATUS_OK, NULL);
    } else if (!grpc_byte_buffer_reader_init(&rd, c->in)) {
        rpc__call_reply(c, GRPC_STATUS_INVALID_ARGUMENT,
                        "cannot decompress the request");
    } else {
        req = grpc_byte_buffer_reader_readall(&rd);
        grpc_byte_buffer_reader_destroy(&rd);
        rv =
            c->slot->method->bidi(c->srv->cfg.svc, GRPC_SLICE_START_PTR(req),
                                  GRPC_SLICE_LENGTH(req), &msg, &len, &c->diag);
        grpc_slice_unref(req);
        if (rv != 0)
            rpc__call_reply(c, rpc__status_of(rv), c->diag.msg);
        else
            stream_send(c, msg, len);
    }
    if (c->in != NULL) {
        grpc_byte_buffer_destroy(c->in);
        c->in = NULL;
    }
    rpc__call_unref(c); /* the batch's reference */
}

/* Waits for the next request message of a bidi call. */
void rpc__bidi_recv(struct rpc_call *c)
{
    grpc_op op;

    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->in;
    if (!start_one(c, &op, &c->t_recv))
        rpc__call_reply(c, GRPC_STATUS_INTERNAL, "cannot receive");
}
