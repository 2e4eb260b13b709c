/* Planner structs <-> shardd.v1 messages (wire.h). */
#include "wire.h"

#include <stdlib.h>

#include <protobuf-c/protobuf-c.h>

int wire_pack(const struct ProtobufCMessage *m, uint8_t **out, size_t *len,
              struct sd_diag *d)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);

    if (buf == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    protobuf_c_message_pack(m, buf);
    *out = buf;
    *len = n;
    return 0;
}
