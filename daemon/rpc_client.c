/*
 * The daemon's gRPC client (rpc_client.h): one unary call at a time on a
 * completion queue plucked by the calling thread.
 */
#include "rpc_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#define PEER_MAX_RECV_BYTES (256 << 20) /* a model is tens of MiB at most */

struct rpc_peer {
    grpc_channel *ch;
    grpc_completion_queue *cq;
    char addr[256];
    char auth[300]; /* "Bearer TOKEN"; "" for none */
};

int rpc_peer_open(const char *addr, const char *token, struct rpc_peer **out,
                  struct sd_diag *d)
{
    grpc_channel_credentials *creds;
    grpc_channel_args args;
    grpc_arg arg;
    struct rpc_peer *p;

    if (addr == NULL || addr[0] == '\0' || strlen(addr) >= 256)
        return sd_diag_set(d, SD_EINVAL, "fleet_trainer: no usable address");
    if (token != NULL && strlen(token) > 255)
        return sd_diag_set(d, SD_EINVAL, "admin token: too long");
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    snprintf(p->addr, sizeof(p->addr), "%s", addr);
    if (token != NULL && token[0] != '\0')
        snprintf(p->auth, sizeof(p->auth), "Bearer %s", token);
    grpc_init();
    memset(&arg, 0, sizeof(arg));
    arg.type = GRPC_ARG_INTEGER;
    arg.key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    arg.value.integer = PEER_MAX_RECV_BYTES;
    args.num_args = 1;
    args.args = &arg;
    creds = grpc_insecure_credentials_create();
    p->ch = grpc_channel_create(addr, creds, &args);
    grpc_channel_credentials_release(creds);
    p->cq = grpc_completion_queue_create_for_pluck(NULL);
    *out = p;
    return 0;
}

void rpc_peer_close(struct rpc_peer *p)
{
    grpc_event ev;

    if (p == NULL)
        return;
    grpc_channel_destroy(p->ch);
    grpc_completion_queue_shutdown(p->cq);
    do
        ev = grpc_completion_queue_pluck(
            p->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    while (ev.type != GRPC_QUEUE_SHUTDOWN);
    grpc_completion_queue_destroy(p->cq);
    grpc_shutdown();
    free(p);
}

/* A finished call's status as 0 or an SD_E* code with d set. */
static int status_err(const struct rpc_peer *p, const char *method,
                      grpc_status_code st, grpc_slice details,
                      struct sd_diag *d)
{
    int n = (int)GRPC_SLICE_LENGTH(details);
    const char *msg = (const char *)GRPC_SLICE_START_PTR(details);
    int code;

    switch (st) {
    case GRPC_STATUS_OK:
        return 0;
    case GRPC_STATUS_UNAVAILABLE:
        code = SD_EIO;
        break;
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        code = SD_ETIMEDOUT;
        break;
    case GRPC_STATUS_UNAUTHENTICATED:
        code = SD_EAUTH;
        break;
    case GRPC_STATUS_FAILED_PRECONDITION:
        code = SD_ESTATE;
        break;
    case GRPC_STATUS_INVALID_ARGUMENT:
        code = SD_EINVAL;
        break;
    case GRPC_STATUS_NOT_FOUND:
        code = SD_ENOENT;
        break;
    case GRPC_STATUS_UNIMPLEMENTED:
        code = SD_EUNSUPPORTED;
        break;
    default:
        code = SD_EIO;
    }
    return sd_diag_set(d, code, "%s at %s: status %d: %.*s", method, p->addr,
                       (int)st, n, msg);
}

/* The received message as a new buffer. */
static int take_message(grpc_byte_buffer *bb, uint8_t **out, size_t *len,
                        struct sd_diag *d)
{
    grpc_byte_buffer_reader rd;
    grpc_slice s;
    size_t n;

    if (!grpc_byte_buffer_reader_init(&rd, bb))
        return sd_diag_set(d, SD_EFORMAT, "an answer that does not decompress");
    s = grpc_byte_buffer_reader_readall(&rd);
    grpc_byte_buffer_reader_destroy(&rd);
    n = GRPC_SLICE_LENGTH(s);
    *out = malloc(n > 0 ? n : 1);
    if (*out == NULL) {
        grpc_slice_unref(s);
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    }
    memcpy(*out, GRPC_SLICE_START_PTR(s), n);
    *len = n;
    grpc_slice_unref(s);
    return 0;
}

int rpc_peer_call(struct rpc_peer *p, const char *method, const uint8_t *req,
                  size_t len, int64_t deadline_ms, uint8_t **resp,
                  size_t *resp_len, struct sd_diag *d)
{
    grpc_metadata_array md, trailers;
    grpc_byte_buffer *out, *in = NULL;
    grpc_status_code st = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice(), s;
    grpc_metadata auth;
    grpc_call *call;
    grpc_event ev;
    grpc_op ops[6];
    char tag;
    int rv;

    s = grpc_slice_from_copied_buffer((const char *)req, len);
    out = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    call = grpc_channel_create_call(
        p->ch, NULL, GRPC_PROPAGATE_DEFAULTS, p->cq,
        grpc_slice_from_static_string(method), NULL,
        gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                     gpr_time_from_millis(deadline_ms, GPR_TIMESPAN)),
        NULL);
    if (call == NULL) {
        grpc_byte_buffer_destroy(out);
        return sd_diag_set(d, SD_ENOMEM, "%s: cannot create the call", method);
    }
    grpc_metadata_array_init(&md);
    grpc_metadata_array_init(&trailers);
    memset(&auth, 0, sizeof(auth));
    auth.key = grpc_slice_from_static_string("authorization");
    auth.value = grpc_slice_from_static_string(p->auth);
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = p->auth[0] != '\0' ? 1 : 0;
    ops[0].data.send_initial_metadata.metadata = &auth;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = out;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &in;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trailers;
    ops[5].data.recv_status_on_client.status = &st;
    ops[5].data.recv_status_on_client.status_details = &details;
    if (grpc_call_start_batch(call, ops, 6, &tag, NULL) != GRPC_CALL_OK) {
        rv = sd_diag_set(d, SD_EIO, "%s: the call could not start", method);
        goto out_call;
    }
    /* The batch holds the status op: it completes whatever happens. */
    ev = grpc_completion_queue_pluck(p->cq, &tag,
                                     gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    (void)ev;
    rv = status_err(p, method, st, details, d);
    if (rv == 0 && in == NULL)
        rv = sd_diag_set(d, SD_EFORMAT, "%s: no answer message", method);
    if (rv == 0)
        rv = take_message(in, resp, resp_len, d);
out_call:
    if (in != NULL)
        grpc_byte_buffer_destroy(in);
    grpc_byte_buffer_destroy(out);
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&md);
    grpc_metadata_array_destroy(&trailers);
    grpc_call_unref(call);
    return rv;
}
