/*
 * Server reflection: grpc.reflection.v1alpha.ServerReflection and its v1
 * twin (the same messages on the wire), what a generic client such as
 * grpcurl asks to learn the API without the .proto files.  The answers come
 * from the FileDescriptorSet compiled in at build time (sd_api_descriptors,
 * proto/CMakeLists.txt).  Plain protobuf-c; the bidi stream is rpc.c's.
 */
#include "reflect.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "google/protobuf/descriptor.pb-c.h"
#include "grpc/reflection/v1alpha/reflection.pb-c.h"
#include "wire.h"

/* Codes of reflection's ErrorResponse: gRPC status numbers. */
#define REFLECT_NOT_FOUND     5
#define REFLECT_UNIMPLEMENTED 12

#define REFLECT_NAME_MAX 512

struct reflect {
    Google__Protobuf__FileDescriptorSet *set;
    ProtobufCBinaryData *bytes; /* each file serialized again, by index */
};

int reflect_open(struct reflect **out, struct sd_diag *d)
{
    struct reflect *r = calloc(1, sizeof(*r));
    size_t i;

    if (r == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    r->set = google__protobuf__file_descriptor_set__unpack(
        NULL, sd_api_descriptors_len, sd_api_descriptors);
    if (r->set == NULL) {
        free(r);
        return sd_diag_set(d, SD_EFORMAT,
                           "reflection: the compiled-in descriptors do "
                           "not parse");
    }
    r->bytes = calloc(r->set->n_file ? r->set->n_file : 1, sizeof(*r->bytes));
    for (i = 0; r->bytes != NULL && i < r->set->n_file; i++) {
        const ProtobufCMessage *m = &r->set->file[i]->base;
        size_t n = protobuf_c_message_get_packed_size(m);

        r->bytes[i].data = malloc(n ? n : 1);
        if (r->bytes[i].data == NULL)
            break;
        r->bytes[i].len = protobuf_c_message_pack(m, r->bytes[i].data);
    }
    if (r->bytes == NULL || i < r->set->n_file) {
        reflect_close(r);
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    }
    *out = r;
    return 0;
}

void reflect_close(struct reflect *r)
{
    size_t i;

    if (r == NULL)
        return;
    for (i = 0; r->bytes != NULL && i < r->set->n_file; i++)
        free(r->bytes[i].data);
    free(r->bytes);
    google__protobuf__file_descriptor_set__free_unpacked(r->set, NULL);
    free(r);
}

/* ---------------------------------------------------------------------- */
/* Lookups                                                                 */

static int file_by_name(const struct reflect *r, const char *name)
{
    size_t i;

    for (i = 0; i < r->set->n_file; i++)
        if (strcmp(r->set->file[i]->name, name) == 0)
            return (int)i;
    return -1;
}

/* Whether scope + "." + name (just name for an empty scope) is sym. */
static bool names(const char *scope, const char *name, const char *sym)
{
    size_t n = strlen(scope);

    if (n > 0) {
        if (strncmp(sym, scope, n) != 0 || sym[n] != '.')
            return false;
        sym += n + 1;
    }
    return strcmp(sym, name) == 0;
}

/* "scope.name" into buf (false when it does not fit). */
static bool scoped(char *buf, size_t cap, const char *scope, const char *name)
{
    return (size_t)snprintf(buf, cap, "%s%s%s", scope, scope[0] ? "." : "",
                            name) < cap;
}

/* A message, a type nested in it, or one of its enums, is sym. */
static bool message_has(const char *scope,
                        const Google__Protobuf__DescriptorProto *m,
                        const char *sym)
{
    char full[REFLECT_NAME_MAX];
    size_t i;

    if (names(scope, m->name, sym))
        return true;
    if (!scoped(full, sizeof(full), scope, m->name))
        return false;
    for (i = 0; i < m->n_enum_type; i++)
        if (names(full, m->enum_type[i]->name, sym))
            return true;
    for (i = 0; i < m->n_nested_type; i++)
        if (message_has(full, m->nested_type[i], sym))
            return true;
    return false;
}

/* A service or one of its methods is sym. */
static bool service_has(const char *scope,
                        const Google__Protobuf__ServiceDescriptorProto *s,
                        const char *sym)
{
    char full[REFLECT_NAME_MAX];
    size_t i;

    if (names(scope, s->name, sym))
        return true;
    if (!scoped(full, sizeof(full), scope, s->name))
        return false;
    for (i = 0; i < s->n_method; i++)
        if (names(full, s->method[i]->name, sym))
            return true;
    return false;
}

/* The file defining a fully qualified message, enum, service or method. */
static int file_by_symbol(const struct reflect *r, const char *sym)
{
    size_t i, k;

    for (i = 0; i < r->set->n_file; i++) {
        const Google__Protobuf__FileDescriptorProto *f = r->set->file[i];
        const char *pkg = f->package != NULL ? f->package : "";

        for (k = 0; k < f->n_message_type; k++)
            if (message_has(pkg, f->message_type[k], sym))
                return (int)i;
        for (k = 0; k < f->n_enum_type; k++)
            if (names(pkg, f->enum_type[k]->name, sym))
                return (int)i;
        for (k = 0; k < f->n_service; k++)
            if (service_has(pkg, f->service[k], sym))
                return (int)i;
    }
    return -1;
}

/* File i and, depth first, every file it imports, each once. */
static void with_imports(const struct reflect *r, int i, bool *seen,
                         ProtobufCBinaryData *out, size_t *n)
{
    const Google__Protobuf__FileDescriptorProto *f;
    size_t k;

    if (i < 0 || seen[i])
        return;
    seen[i] = true;
    out[(*n)++] = r->bytes[i];
    f = r->set->file[i];
    for (k = 0; k < f->n_dependency; k++)
        with_imports(r, file_by_name(r, f->dependency[k]), seen, out, n);
}

/* ---------------------------------------------------------------------- */
/* Answers                                                                 */

int reflect_answer(const struct reflect *r, const uint8_t *req, size_t len,
                   uint8_t **resp, size_t *resp_len, struct sd_diag *d)
{
    Grpc__Reflection__V1alpha__ServerReflectionRequest *rq;
    Grpc__Reflection__V1alpha__ServerReflectionResponse out =
        GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_RESPONSE__INIT;
    Grpc__Reflection__V1alpha__FileDescriptorResponse files =
        GRPC__REFLECTION__V1ALPHA__FILE_DESCRIPTOR_RESPONSE__INIT;
    Grpc__Reflection__V1alpha__ListServiceResponse list =
        GRPC__REFLECTION__V1ALPHA__LIST_SERVICE_RESPONSE__INIT;
    Grpc__Reflection__V1alpha__ErrorResponse err =
        GRPC__REFLECTION__V1ALPHA__ERROR_RESPONSE__INIT;
    Grpc__Reflection__V1alpha__ServiceResponse *svcs = NULL, **svc_ptrs = NULL;
    char(*svc_names)[REFLECT_NAME_MAX] = NULL, what[REFLECT_NAME_MAX + 32];
    size_t nfiles = r->set->n_file, i, k, n = 0;
    ProtobufCBinaryData *found = NULL;
    bool *seen = NULL;
    size_t n_unknown;
    int idx = -1, rv = SD_ENOMEM;

    rq = grpc__reflection__v1alpha__server_reflection_request__unpack(NULL, len,
                                                                      req);
    if (rq == NULL)
        return sd_diag_set(d, SD_EFORMAT,
                           "ServerReflectionRequest: not a valid message");
    out.valid_host = rq->host;
    /* Echoed as understood: unknown fields stay out of the answer (one
     * with the invalid tag 0, which protobuf-c keeps, would make the
     * whole answer unreadable; found by fuzz_plan_request).  Restored
     * below for the free. */
    n_unknown = rq->base.n_unknown_fields;
    rq->base.n_unknown_fields = 0;
    out.original_request = rq;
    switch (rq->message_request_case) {
    case GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES:
        for (i = 0; i < nfiles; i++)
            n += r->set->file[i]->n_service;
        svcs = calloc(n ? n : 1, sizeof(*svcs));
        svc_ptrs = calloc(n ? n : 1, sizeof(*svc_ptrs));
        svc_names = calloc(n ? n : 1, sizeof(*svc_names));
        if (svcs == NULL || svc_ptrs == NULL || svc_names == NULL)
            goto out_free;
        for (i = 0, n = 0; i < nfiles; i++) {
            const Google__Protobuf__FileDescriptorProto *f = r->set->file[i];

            for (k = 0; k < f->n_service; k++, n++) {
                grpc__reflection__v1alpha__service_response__init(&svcs[n]);
                scoped(svc_names[n], sizeof(svc_names[n]),
                       f->package != NULL ? f->package : "",
                       f->service[k]->name);
                svcs[n].name = svc_names[n];
                svc_ptrs[n] = &svcs[n];
            }
        }
        list.n_service = n;
        list.service = svc_ptrs;
        out.message_response_case =
            GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE;
        out.list_services_response = &list;
        break;
    case GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME:
    case GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL:
        if (rq->message_request_case ==
            GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME) {
            idx = file_by_name(r, rq->file_by_filename);
            snprintf(what, sizeof(what), "file \"%.*s\"", REFLECT_NAME_MAX,
                     rq->file_by_filename);
        } else {
            idx = file_by_symbol(r, rq->file_containing_symbol);
            snprintf(what, sizeof(what), "symbol \"%.*s\"", REFLECT_NAME_MAX,
                     rq->file_containing_symbol);
        }
        if (idx < 0) {
            err.error_code = REFLECT_NOT_FOUND;
            strcat(what, " not found");
            err.error_message = what;
            out.message_response_case =
                GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
            out.error_response = &err;
            break;
        }
        found = calloc(nfiles, sizeof(*found));
        seen = calloc(nfiles, sizeof(*seen));
        if (found == NULL || seen == NULL)
            goto out_free;
        with_imports(r, idx, seen, found, &files.n_file_descriptor_proto);
        files.file_descriptor_proto = found;
        out.message_response_case =
            GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE;
        out.file_descriptor_response = &files;
        break;
    default: /* extensions: proto3 APIs have none */
        err.error_code = REFLECT_UNIMPLEMENTED;
        err.error_message = (char *)"extensions are not served";
        out.message_response_case =
            GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
        out.error_response = &err;
        break;
    }
    rv = wire_pack(&out.base, resp, resp_len, d);

out_free:
    if (rv == SD_ENOMEM)
        sd_diag_set(d, rv, "out of memory");
    free(seen);
    free(found);
    free(svc_names);
    free(svc_ptrs);
    free(svcs);
    rq->base.n_unknown_fields = n_unknown;
    grpc__reflection__v1alpha__server_reflection_request__free_unpacked(rq,
                                                                        NULL);
    return rv;
}
