/*
 * shardctl's gRPC client (client.h): synchronous unary and server-streaming
 * calls over the gRPC C core, one completion queue plucked by the calling
 * thread.  The only client file that includes gRPC headers; it maps gRPC
 * status codes to SD_E* codes and to shardctl's exit status, once.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include "client.h"
#include "wire.h"

/* Large plans of thousands of tables come back in one message. */
#define RPC_MAX_RECV_BYTES (64 << 20)

/* client.h numbers the codes itself; they must be gRPC's. */
_Static_assert(RPC_INVALID_ARGUMENT == (int)GRPC_STATUS_INVALID_ARGUMENT &&
                   RPC_DEADLINE_EXCEEDED ==
                       (int)GRPC_STATUS_DEADLINE_EXCEEDED &&
                   RPC_RESOURCE_EXHAUSTED ==
                       (int)GRPC_STATUS_RESOURCE_EXHAUSTED &&
                   RPC_UNIMPLEMENTED == (int)GRPC_STATUS_UNIMPLEMENTED &&
                   RPC_UNAVAILABLE == (int)GRPC_STATUS_UNAVAILABLE &&
                   RPC_UNAUTHENTICATED == (int)GRPC_STATUS_UNAUTHENTICATED,
               "enum rpc_code must follow grpc_status_code");

struct rpc_client {
    grpc_channel *ch;
    grpc_completion_queue *cq; /* for pluck: calls run one at a time */
    char *addr;                /* for messages */
    char *auth;                /* "Bearer TOKEN", or NULL for none */
};

const char *rpc_code_name(int code)
{
    return wire_status_name(code);
}

int rpc_exit_code(int code)
{
    switch (code) {
    case RPC_OK:
        return 0;
    case RPC_INVALID_ARGUMENT:
    case RPC_NOT_FOUND:
    case RPC_FAILED_PRECONDITION:
    case RPC_RESOURCE_EXHAUSTED:
    case RPC_UNAUTHENTICATED:
    case RPC_PERMISSION_DENIED:
        return CTL_EXIT_USAGE;
    default:
        return 1;
    }
}

/* The SD_E* code a failed call returns (client.h). */
static int sd_code_for(grpc_status_code code)
{
    switch (code) {
    case GRPC_STATUS_INVALID_ARGUMENT:
    case GRPC_STATUS_FAILED_PRECONDITION:
    case GRPC_STATUS_UNAUTHENTICATED:
    case GRPC_STATUS_PERMISSION_DENIED:
        return SD_EINVAL;
    case GRPC_STATUS_NOT_FOUND:
        return SD_ENOENT;
    case GRPC_STATUS_RESOURCE_EXHAUSTED:
        return SD_ENOSPACE;
    case GRPC_STATUS_UNIMPLEMENTED:
        return SD_EUNSUPPORTED;
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        return SD_EBUSY;
    default:
        return SD_EIO;
    }
}

int rpc_client_open(const char *addr, const char *token,
                    struct rpc_client **out, struct sd_diag *d)
{
    grpc_arg arg;
    grpc_channel_args args;
    grpc_channel_credentials *creds;
    struct rpc_client *c;
    size_t n;
    int rv;

    if (addr == NULL || addr[0] == '\0')
        return sd_diag_set(d, SD_EINVAL,
                           "--addr: empty (unix:PATH or HOST:PORT)");
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    c->addr = strdup(addr);
    if (c->addr == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto fail_client;
    }
    if (token != NULL && token[0] != '\0') {
        n = strlen("Bearer ") + strlen(token) + 1;
        c->auth = malloc(n);
        if (c->auth == NULL) {
            rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
            goto fail_client;
        }
        snprintf(c->auth, n, "Bearer %s", token);
        /* A header value is printable ASCII; anything else would fail
         * every call with an opaque batch error. */
        if (!grpc_header_nonbin_value_is_legal(
                grpc_slice_from_static_string(c->auth))) {
            rv = sd_diag_set(d, SD_EINVAL,
                             "token: holds characters a gRPC header cannot "
                             "carry (printable ASCII only)");
            goto fail_client;
        }
    }

    grpc_init();
    memset(&arg, 0, sizeof(arg));
    arg.type = GRPC_ARG_INTEGER;
    arg.key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    arg.value.integer = RPC_MAX_RECV_BYTES;
    args.num_args = 1;
    args.args = &arg;
    creds = grpc_insecure_credentials_create();
    /* Never NULL: a bad target gives a channel whose calls fail. */
    c->ch = grpc_channel_create(addr, creds, &args);
    grpc_channel_credentials_release(creds);
    c->cq = grpc_completion_queue_create_for_pluck(NULL);
    *out = c;
    return 0;

fail_client:
    free(c->auth);
    free(c->addr);
    free(c);
    return rv;
}

void rpc_client_close(struct rpc_client *c)
{
    grpc_event ev;

    if (c == NULL)
        return;
    grpc_channel_destroy(c->ch);
    grpc_completion_queue_shutdown(c->cq);
    do
        ev = grpc_completion_queue_pluck(
            c->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    while (ev.type != GRPC_QUEUE_SHUTDOWN);
    grpc_completion_queue_destroy(c->cq);
    grpc_shutdown();
    free(c->auth);
    free(c->addr);
    free(c);
}

/* ---------------------------------------------------------------------- */
/* One call                                                                */

/* Everything one call owns, released by call_end(). */
struct call {
    grpc_call *call;
    grpc_metadata auth;
    grpc_metadata_array md, trailers;
    grpc_status_code status;
    grpc_slice details;
    grpc_byte_buffer *out, *in;
    int64_t deadline_ms;
    /* Distinct tags for the batches that may be in flight at once. */
    char tag_send, tag_status, tag_recv;
};

/* Starts method on c; the request is copied into a byte buffer. */
static int call_begin(struct rpc_client *c, struct call *k, const char *method,
                      const uint8_t *req, size_t len, int64_t deadline_ms,
                      struct sd_diag *d)
{
    gpr_timespec deadline = gpr_inf_future(GPR_CLOCK_REALTIME);
    grpc_slice s;

    memset(k, 0, sizeof(*k));
    grpc_metadata_array_init(&k->md);
    grpc_metadata_array_init(&k->trailers);
    k->details = grpc_empty_slice();
    k->status = GRPC_STATUS_UNKNOWN;
    k->deadline_ms = deadline_ms;
    if (deadline_ms > 0)
        deadline =
            gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                         gpr_time_from_millis(deadline_ms, GPR_TIMESPAN));
    s = grpc_slice_from_copied_buffer((const char *)req, len);
    k->out = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    k->call = grpc_channel_create_call(
        c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq,
        grpc_slice_from_static_string(method), NULL, deadline, NULL);
    if (k->call == NULL)
        return sd_diag_set(d, SD_ENOMEM, "%s: cannot create the call", method);
    if (c->auth != NULL) {
        k->auth.key = grpc_slice_from_static_string("authorization");
        k->auth.value = grpc_slice_from_static_string(c->auth);
    }
    return 0;
}

/* Releases what call_begin() and the batches left behind. */
static void call_end(struct call *k)
{
    grpc_slice_unref(k->details);
    grpc_metadata_array_destroy(&k->md);
    grpc_metadata_array_destroy(&k->trailers);
    if (k->out != NULL)
        grpc_byte_buffer_destroy(k->out);
    if (k->in != NULL)
        grpc_byte_buffer_destroy(k->in);
    if (k->call != NULL)
        grpc_call_unref(k->call);
}

/* Waits for one batch of the call; returns its ok flag. */
static bool call_wait(struct rpc_client *c, void *tag)
{
    grpc_event ev = grpc_completion_queue_pluck(
        c->cq, tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);

    return ev.type == GRPC_OP_COMPLETE && ev.success != 0;
}

/*
 * The ops that open a call: initial metadata (the token, if any), the one
 * request message and the half-close, then the server's initial metadata.
 * Returns how many it wrote to ops (4).
 */
static size_t open_ops(const struct rpc_client *c, struct call *k, grpc_op *ops)
{
    memset(ops, 0, 4 * sizeof(*ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = c->auth != NULL ? 1 : 0;
    ops[0].data.send_initial_metadata.metadata = &k->auth;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = k->out;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &k->md;
    return 4;
}

static void status_op(struct call *k, grpc_op *op)
{
    memset(op, 0, sizeof(*op));
    op->op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op->data.recv_status_on_client.trailing_metadata = &k->trailers;
    op->data.recv_status_on_client.status = &k->status;
    op->data.recv_status_on_client.status_details = &k->details;
}

/*
 * Turns a finished call's status into 0 or an SD_E* code with d set: the
 * server's message as it is, or, where the status says more about the
 * connection than about the request, a message that names the address.
 */
static int call_result(const struct rpc_client *c, const struct call *k,
                       const char *method, int *status, struct sd_diag *d)
{
    int len = (int)GRPC_SLICE_LENGTH(k->details);
    const char *msg = (const char *)GRPC_SLICE_START_PTR(k->details);

    *status = (int)k->status;
    switch (k->status) {
    case GRPC_STATUS_OK:
        return 0;
    case GRPC_STATUS_UNAVAILABLE:
        return sd_diag_set(d, SD_EIO,
                           "cannot reach shardd at %s: is it running? (%.*s)",
                           c->addr, len, msg);
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        return sd_diag_set(d, SD_EBUSY,
                           "no answer from shardd at %s within %.3g s "
                           "(--timeout-s)",
                           c->addr, (double)k->deadline_ms / 1e3);
    case GRPC_STATUS_UNIMPLEMENTED:
        return sd_diag_set(d, SD_EUNSUPPORTED,
                           "shardd at %s does not serve %s (UNIMPLEMENTED: "
                           "%.*s)",
                           c->addr, method, len, msg);
    default:
        if (len == 0)
            return sd_diag_set(d, sd_code_for(k->status), "%s failed: %s",
                               method, rpc_code_name((int)k->status));
        return sd_diag_set(d, sd_code_for(k->status), "%.*s", len, msg);
    }
}

/* Copies a received message into a new malloc'ed buffer. */
static int read_message(grpc_byte_buffer *bb, uint8_t **out, size_t *len,
                        struct sd_diag *d)
{
    grpc_byte_buffer_reader rd;
    grpc_slice s;
    size_t n;
    uint8_t *buf;

    if (!grpc_byte_buffer_reader_init(&rd, bb))
        return sd_diag_set(d, SD_EFORMAT,
                           "the response cannot be decompressed");
    s = grpc_byte_buffer_reader_readall(&rd);
    grpc_byte_buffer_reader_destroy(&rd);
    n = GRPC_SLICE_LENGTH(s);
    buf = malloc(n ? n : 1);
    if (buf == NULL) {
        grpc_slice_unref(s);
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    }
    memcpy(buf, GRPC_SLICE_START_PTR(s), n);
    grpc_slice_unref(s);
    *out = buf;
    *len = n;
    return 0;
}

int rpc_client_call(struct rpc_client *c, const char *method,
                    const uint8_t *req, size_t len, int64_t deadline_ms,
                    uint8_t **resp, size_t *resp_len, int *status,
                    struct sd_diag *d)
{
    struct call k;
    grpc_op ops[6];
    size_t nops;
    int rv;

    *status = RPC_UNKNOWN;
    rv = call_begin(c, &k, method, req, len, deadline_ms, d);
    if (rv != 0)
        goto out_call;
    nops = open_ops(c, &k, ops);
    memset(&ops[nops], 0, sizeof(ops[nops]));
    ops[nops].op = GRPC_OP_RECV_MESSAGE;
    ops[nops++].data.recv_message.recv_message = &k.in;
    status_op(&k, &ops[nops++]);
    if (grpc_call_start_batch(k.call, ops, nops, &k.tag_send, NULL) !=
        GRPC_CALL_OK) {
        rv = sd_diag_set(d, SD_EIO, "%s: the call could not start", method);
        goto out_call;
    }
    /* The batch holds the status op, so it completes whatever happens. */
    call_wait(c, &k.tag_send);
    rv = call_result(c, &k, method, status, d);
    if (rv != 0)
        goto out_call;
    if (k.in == NULL) {
        *status = RPC_UNKNOWN;
        rv = sd_diag_set(d, SD_EFORMAT, "%s: the server sent no response",
                         method);
        goto out_call;
    }
    rv = read_message(k.in, resp, resp_len, d);
    if (rv != 0)
        *status = RPC_UNKNOWN;

out_call:
    call_end(&k);
    return rv;
}

int rpc_client_stream(struct rpc_client *c, const char *method,
                      const uint8_t *req, size_t len, int64_t deadline_ms,
                      rpc_stream_fn fn, void *ctx, int *status,
                      struct sd_diag *d)
{
    struct call k;
    grpc_op ops[4], st, rcv;
    uint8_t *msg;
    size_t n;
    int rv, stop = 0;

    *status = RPC_UNKNOWN;
    rv = call_begin(c, &k, method, req, len, deadline_ms, d);
    if (rv != 0)
        goto out_call;
    /* The status has its own batch, started first, so that it is there to
     * wait for whichever way the stream ends. */
    status_op(&k, &st);
    if (grpc_call_start_batch(k.call, &st, 1, &k.tag_status, NULL) !=
        GRPC_CALL_OK) {
        rv = sd_diag_set(d, SD_EIO, "%s: the call could not start", method);
        goto out_call;
    }
    if (grpc_call_start_batch(k.call, ops, open_ops(c, &k, ops), &k.tag_send,
                              NULL) != GRPC_CALL_OK) {
        rv = sd_diag_set(d, SD_EIO, "%s: the call could not start", method);
        grpc_call_cancel(k.call, NULL);
        call_wait(c, &k.tag_status); /* started: it completes */
        goto out_call;
    }
    call_wait(c, &k.tag_send);
    /* One receive at a time; a NULL message is the end of the stream. */
    while (stop == 0) {
        memset(&rcv, 0, sizeof(rcv));
        rcv.op = GRPC_OP_RECV_MESSAGE;
        rcv.data.recv_message.recv_message = &k.in;
        if (grpc_call_start_batch(k.call, &rcv, 1, &k.tag_recv, NULL) !=
                GRPC_CALL_OK ||
            !call_wait(c, &k.tag_recv) || k.in == NULL)
            break;
        rv = read_message(k.in, &msg, &n, d);
        grpc_byte_buffer_destroy(k.in);
        k.in = NULL;
        if (rv == 0) {
            stop = fn(ctx, msg, n);
            free(msg);
        } else {
            stop = rv;
        }
        if (stop != 0)
            grpc_call_cancel(k.call, NULL);
    }
    call_wait(c, &k.tag_status);
    if (stop != 0) {
        /* Our own stop: read_message() set d, or fn's context says why. */
        *status = RPC_CANCELLED;
        rv = stop;
        goto out_call;
    }
    rv = call_result(c, &k, method, status, d);

out_call:
    call_end(&k);
    return rv;
}
