/*
 * The calls of shardctl's online mode (online.h): the connection to the
 * daemon (address, token and deadline from the command line), unary calls
 * of packed protobuf-c messages through rpc.c, and the end of the output
 * on stdout, text or JSON (rpc_json.c).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "online.h"
#include "shardd/addr.h"
#include "shardd/file.h"

#define DEFAULT_ADDR "127.0.0.1:7411"

/* Reads a token file: its first line, white space around it dropped (as
 * the daemon reads its admin_token_file). */
static int read_token_file(const char *path, char *buf, size_t cap,
                           struct sd_diag *d)
{
    struct sd_diag why;
    void *text = NULL;
    size_t len = 0, lead, n;
    const char *t;
    int rv;

    rv = sd_file_read(path, 64 << 10, "a token file", &text, &len, &why);
    if (rv != 0)
        return sd_diag_set(d, rv, "--token-file: %s", why.msg);
    t = text;
    lead = strspn(t, " \t");
    n = strcspn(t + lead, "\r\n");
    while (n > 0 && (t[lead + n - 1] == ' ' || t[lead + n - 1] == '\t'))
        n--;
    if (n == 0 || n >= cap)
        rv = sd_diag_set(d, SD_EINVAL, "--token-file: %s: %s", path,
                         n == 0 ? "no token in its first line"
                                : "the token is too long");
    else
        snprintf(buf, cap, "%.*s", (int)n, t + lead);
    free(text);
    return rv;
}

int online_open(struct online *on, double default_timeout_s)
{
    const struct ctl_opts *o = on->o;
    const char *token = o->token, *why;
    char tokbuf[4096];
    struct sd_diag d;
    double t;
    int rv;

    on->addr = o->addr != NULL ? o->addr : getenv("SHARDD_ADDR");
    if (o->addr == NULL && (on->addr == NULL || on->addr[0] == '\0'))
        on->addr = DEFAULT_ADDR; /* an empty $SHARDD_ADDR is unset */
    why = on->addr[0] == '\0' ? "is empty" : sd_addr_problem(on->addr);
    if (why != NULL) /* gRPC would wrap port 99999 onto 34463 */
        return ctl_fail(CTL_EXIT_USAGE,
                        "%s: %s \"%s\" %s (unix:PATH or HOST:PORT)", on->cmd,
                        o->addr != NULL ? "--addr" : "$SHARDD_ADDR", on->addr,
                        why);
    if (o->token != NULL && o->token_file != NULL)
        return ctl_fail(CTL_EXIT_USAGE,
                        "%s: --token and --token-file exclude each other",
                        on->cmd);
    if (o->token_file != NULL) {
        if (read_token_file(o->token_file, tokbuf, sizeof(tokbuf), &d) != 0)
            return ctl_fail(CTL_EXIT_USAGE, "%s: %s", on->cmd, d.msg);
        token = tokbuf;
    } else if (token == NULL) {
        token = getenv("SHARDD_TOKEN");
    }
    t = o->timeout_s > 0 ? o->timeout_s : default_timeout_s;
    on->deadline_ms = t > 0 ? (int64_t)ceil(t * 1e3) : 0;
    rv = rpc_client_open(on->addr, token, &on->cli, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "%s: %s", on->cmd, d.msg);
    return 0;
}

int online_call(struct online *on, const char *method,
                const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *resp_desc,
                ProtobufCMessage **resp)
{
    size_t len = protobuf_c_message_get_packed_size(req), rlen;
    uint8_t *buf = malloc(len ? len : 1), *rbuf;
    struct sd_diag d;
    int rv, status;

    if (buf == NULL)
        return ctl_fail(1, "%s: out of memory", on->cmd);
    protobuf_c_message_pack(req, buf);
    rv = rpc_client_call(on->cli, method, buf, len, on->deadline_ms, &rbuf,
                         &rlen, &status, &d);
    free(buf);
    if (rv != 0)
        return ctl_fail(rpc_exit_code(status), "%s", d.msg);
    *resp = protobuf_c_message_unpack(resp_desc, NULL, rlen, rbuf);
    free(rbuf);
    if (*resp == NULL)
        return ctl_fail(1, "%s: the response is not a valid %s", method,
                        resp_desc->name);
    return 0;
}

int online_finish_stdout(void)
{
    if (ferror(stdout) || fflush(stdout) != 0)
        return ctl_fail(1, "cannot write to stdout: %s", strerror(errno));
    return 0;
}

int online_print_json(const ProtobufCMessage *m)
{
    char *text = rpc_json_message(m);

    if (text == NULL)
        return ctl_fail(1, "out of memory");
    fputs(text, stdout);
    fputc('\n', stdout);
    free(text);
    return online_finish_stdout();
}

void online_close(struct online *on)
{
    rpc_client_close(on->cli);
    on->cli = NULL;
}
