/*
 * wire: the planner's structs <-> shardd.v1 messages (protobuf-c), both
 * directions, for the daemon and shardctl alike.  Messages in are checked
 * where each field is read, and a bad one is named the way docs/api.md
 * shows (`topology.num_devices: 0 is not in [1, 4096]`).  No gRPC here:
 * bytes and messages only.
 *
 * Errors are 0 or a negative SD_E* code with a struct sd_diag line.
 */
#ifndef SHARDD_WIRE_H
#define SHARDD_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "shardd/err.h"

struct ProtobufCMessage;

/*
 * Packs a protobuf-c message into a new buffer (*out, owned by the caller,
 * never NULL even for 0 bytes).  0 or SD_ENOMEM (d says so).
 */
int wire_pack(const struct ProtobufCMessage *m, uint8_t **out, size_t *len,
              struct sd_diag *d);

#endif /* SHARDD_WIRE_H */
