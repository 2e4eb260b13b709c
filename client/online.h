/*
 * What the files of shardctl's online mode share (client.h draws how they
 * call each other): online.c runs a command (online_run()) and has the
 * planner's commands, plan and estimate; online_admin.c has the others;
 * both call the daemon through online_call.c.
 */
#ifndef SHARDD_CLIENT_ONLINE_H
#define SHARDD_CLIENT_ONLINE_H

#include <stdint.h>

#include "client.h"
#include "shardd/v1/types.pb-c.h" /* and protobuf-c */

/* One online command being run. */
struct online {
    const struct ctl_opts *o; /* borrowed */
    const char *cmd;          /* the command's name, for messages */
    const char *addr;         /* the daemon's, as reached */
    struct rpc_client *cli;
    int64_t deadline_ms; /* of every unary call; 0: none */
};

/* protobuf-c string fields are `char *`; packing only reads them. */
static inline char *mstr(const char *s)
{
    return (char *)s;
}

/* ------------------------------------------------------------------------ */
/* Calls (online_call.c)                                                     */

/*
 * Opens the channel of on (on->o and on->cmd set by the caller) to the
 * daemon at --addr, else $SHARDD_ADDR, else 127.0.0.1:7411, with the token
 * of --token, --token-file or $SHARDD_TOKEN, and --timeout-s (else
 * default_timeout_s; 0: none) as the deadline of each call.  gRPC connects
 * lazily: an unreachable daemon shows at the first call.  Returns 0 (then
 * online_close() it) or an exit code, the message printed.
 */
int online_open(struct online *on, double default_timeout_s);
void online_close(struct online *on);

/*
 * Calls method with req and unpacks the response (*resp: the caller frees
 * it with protobuf_c_message_free_unpacked()).  Returns 0 or the exit
 * status, with the server's message printed.
 */
int online_call(struct online *on, const char *method,
                const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *resp_desc,
                ProtobufCMessage **resp);

/* Ends stdout's output; returns 0 or the exit status for a failed write
 * (the message printed). */
int online_finish_stdout(void);

/* m as JSON (rpc_json.c) on stdout, then online_finish_stdout(). */
int online_print_json(const ProtobufCMessage *m);

/* ------------------------------------------------------------------------ */
/* Admin commands and health (online_admin.c)                                */

/* Each runs its command on an open on and returns the exit status. */
int online_status(struct online *on);
int online_models(struct online *on);
int online_activate(struct online *on);
int online_profiler(struct online *on);
int online_retrain(struct online *on);
int online_job(struct online *on);
int online_health(struct online *on);

#endif /* SHARDD_CLIENT_ONLINE_H */
