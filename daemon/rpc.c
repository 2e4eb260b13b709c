/*
 * The gRPC C-core server of shardd on a libuv loop (rpc.h): start and bind,
 * the completion-queue thread, new calls, shutdown.  A call's life is
 * rpc_call.c's; the threads and references are described in rpc_int.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "rpc_int.h"
#include "shardd/log.h"

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
        rpc__call_unref(c);
        return;
    }
    if (!srv->stopping)
        rpc__request_call(srv, c->slot); /* be ready for the next one */
    rpc__watch_close(c);

    /* Lame duck: answered, so that the client retries elsewhere (gRPC
     * itself would cancel a call that races its GOAWAY). */
    if (srv->draining && (c->slot == NULL || !c->slot->method->draining_ok)) {
        rpc__call_reply(c, GRPC_STATUS_UNAVAILABLE,
                        "the server is stopping; retry on another");
        return;
    }
    if (c->slot == NULL) {
        method = grpc_slice_to_c_string(c->details.method);
        sd_log(SD_LOG_INFO, "unknown method %s", method);
        gpr_free(method);
        rpc__call_reply(c, GRPC_STATUS_UNIMPLEMENTED, "method not implemented");
        return;
    }
    rpc__peer_of(c);
    if (c->slot->method->admin && authorize(c) != 0) {
        rpc__call_reply(c, GRPC_STATUS_UNAUTHENTICATED, c->diag.msg);
        return;
    }
    c->started_ms = sd_now_ms();
    c->started_f = sd_now_ms_f();
    if (c->slot->method->bidi != NULL) {
        rpc__bidi_recv(c);
        return;
    }
    if (c->payload == NULL) {
        rpc__call_reply(c, GRPC_STATUS_INVALID_ARGUMENT, "no request message");
        return;
    }
    if (!grpc_byte_buffer_reader_init(&rd, c->payload)) {
        rpc__call_reply(c, GRPC_STATUS_INVALID_ARGUMENT,
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
        rpc__stream_start(c);
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
        rpc__call_reply(c, GRPC_STATUS_RESOURCE_EXHAUSTED, c->diag.msg);
        return;
    }
    c->lane =
        c->slot->method->lane != NULL
            ? c->slot->method->lane(srv->cfg.svc, GRPC_SLICE_START_PTR(c->req),
                                    GRPC_SLICE_LENGTH(c->req))
            : SVC_LANE_SMALL;
    rpc__work_add(c);
    if (c->lane == SVC_LANE_BIG && !rpc__big_may_start(srv, c)) {
        rpc__wait_push(srv, c); /* rpc__dispatch_waiting() starts it later */
        return;
    }
    rpc__dispatch(c);
}

/* Asks gRPC for the next call of one method (slot NULL: any other). */
void rpc__request_call(struct rpc_server *srv, const struct rpc_slot *slot)
{
    struct rpc_call *c = rpc__call_new(srv, slot, on_new_call);
    grpc_call_error e;

    if (c == NULL) {
        sd_log(SD_LOG_ERROR, "out of memory; %s is no longer served",
               slot ? slot->method->path : "the catch-all");
        return;
    }
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
        rpc__call_unref(c);
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
    rpc__maybe_shutdown_cq(srv);
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
        /* A bidi call's messages are read one by one (rpc__bidi_recv()). */
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
        rpc__request_call(srv, &srv->slots[i]);
    rpc__request_call(srv, NULL); /* unknown methods: UNIMPLEMENTED at once */
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
