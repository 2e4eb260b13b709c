/*
 * Server reflection (grpc.reflection.v1alpha and v1): the API's
 * descriptors, compiled in at build time, answered to generic clients such
 * as grpcurl.  Read only after reflect_open(), so thread-safe.
 */
#ifndef SHARDD_DAEMON_REFLECT_H
#define SHARDD_DAEMON_REFLECT_H

#include <stddef.h>
#include <stdint.h>

#include "shardd/err.h"

/* The serialized FileDescriptorSet of every service served (generated at
 * build time, proto/CMakeLists.txt). */
extern const unsigned char sd_api_descriptors[];
extern const size_t sd_api_descriptors_len;

struct reflect; /* the descriptors, indexed */

/* Parses sd_api_descriptors into *out (reflect_close() it).  SD_EFORMAT or
 * SD_ENOMEM. */
int reflect_open(struct reflect **out, struct sd_diag *d);
void reflect_close(struct reflect *r); /* NULL-safe */

/*
 * Answers one ServerReflectionRequest (packed): list_services, or
 * file_by_filename / file_containing_symbol with the file and every file
 * it imports; an unknown name or an extension query gets an
 * error_response.  *resp is owned by the caller.  SD_EFORMAT for bytes
 * that are no request, SD_ENOMEM.
 */
int reflect_answer(const struct reflect *r, const uint8_t *req, size_t len,
                   uint8_t **resp, size_t *resp_len, struct sd_diag *d);

#endif /* SHARDD_DAEMON_REFLECT_H */
