/*
 * shardctl --json for the daemon's responses (client.h): a protobuf-c
 * message walked with its descriptors into a jansson tree, which jansson
 * writes.  Nothing here knows a message type, so every response, the
 * health check's included, prints the same way.
 *
 * The shape is proto3's JSON mapping in spirit rather than to the letter:
 * the proto field names (not lowerCamelCase), every field present (zero
 * values too, so that scripts need no defaults), enums by name (a number
 * this client does not know stays a number), 64-bit integers as numbers
 * (not strings), unset messages as null, doubles that read back exactly
 * (NaN and infinities, which JSON lacks, as null) and bytes as hex.
 *
 * Named rpc_json.c, not pbjson.c, because scripts/check-layering.sh lets
 * only client/rpc* of the client include jansson and protobuf-c headers.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>

#include "client.h"

/* jansson's dump flags: two spaces of indent, fields in descriptor order,
 * and 17 significant digits, which is what makes a double read back. */
#define DUMP_FLAGS                                                             \
    (JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17))

static json_t *message_value(const ProtobufCMessage *m);

/*
 * A string field.  The API's strings are UTF-8, but protobuf-c does not
 * check: jansson refuses anything else, so a string that is not UTF-8 is
 * written with '?' for its bytes above 0x7f rather than not at all.
 */
static json_t *string_value(const char *s)
{
    json_t *v;
    char *copy;
    size_t i;

    if (s == NULL)
        s = "";
    v = json_string(s);
    if (v != NULL || (copy = strdup(s)) == NULL)
        return v;
    for (i = 0; copy[i] != '\0'; i++)
        if ((unsigned char)copy[i] > 0x7f)
            copy[i] = '?';
    v = json_string(copy);
    free(copy);
    return v;
}

static json_t *real_value(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

/* json_int_t is 64 bits: values above INT64_MAX, which no field of the API
 * carries, become the nearest double rather than wrap. */
static json_t *uint64_value(uint64_t x)
{
    return x <= INT64_MAX ? json_integer((json_int_t)x) : json_real((double)x);
}

/* Bytes as lower-case hex: no bytes field exists in the API today, and hex
 * keeps one readable. */
static json_t *bytes_value(const ProtobufCBinaryData *b)
{
    static const char digits[] = "0123456789abcdef";
    char *hex = malloc(2 * b->len + 1);
    json_t *v;
    size_t i;

    if (hex == NULL)
        return NULL;
    for (i = 0; i < b->len; i++) {
        hex[2 * i] = digits[b->data[i] >> 4];
        hex[2 * i + 1] = digits[b->data[i] & 0xf];
    }
    hex[2 * b->len] = '\0';
    v = json_string(hex);
    free(hex);
    return v;
}

/* One value of field fd stored at p (an element, for repeated fields);
 * NULL when out of memory. */
static json_t *field_value(const ProtobufCFieldDescriptor *fd, const void *p)
{
    const ProtobufCEnumValue *ev;

    switch (fd->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        return json_integer(*(const int32_t *)p);
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        return json_integer(*(const uint32_t *)p);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        return json_integer(*(const int64_t *)p);
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return uint64_value(*(const uint64_t *)p);
    case PROTOBUF_C_TYPE_FLOAT:
        return real_value((double)*(const float *)p);
    case PROTOBUF_C_TYPE_DOUBLE:
        return real_value(*(const double *)p);
    case PROTOBUF_C_TYPE_BOOL:
        return json_boolean(*(const protobuf_c_boolean *)p);
    case PROTOBUF_C_TYPE_ENUM:
        ev = protobuf_c_enum_descriptor_get_value(fd->descriptor,
                                                  *(const int *)p);
        return ev != NULL ? json_string(ev->name)
                          : json_integer(*(const int *)p);
    case PROTOBUF_C_TYPE_STRING:
        return string_value(*(char *const *)p);
    case PROTOBUF_C_TYPE_BYTES:
        return bytes_value(p);
    case PROTOBUF_C_TYPE_MESSAGE:
        if (*(ProtobufCMessage *const *)p == NULL)
            return json_null();
        return message_value(*(ProtobufCMessage *const *)p);
    }
    return json_null(); /* a type newer than this file */
}

/* The size of one stored element of a repeated field of type t. */
static size_t elem_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return 8;
    case PROTOBUF_C_TYPE_DOUBLE:
        return sizeof(double);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(ProtobufCMessage *);
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    default: /* 32-bit numbers and enums */
        return 4;
    }
}

/* A repeated field's elements; NULL when out of memory. */
static json_t *repeated_value(const ProtobufCMessage *m,
                              const ProtobufCFieldDescriptor *fd)
{
    size_t n = *(const size_t *)((const char *)m + fd->quantifier_offset), k;
    const char *arr = *(char *const *)((const char *)m + fd->offset);
    json_t *a = json_array(), *v;

    for (k = 0; a != NULL && k < n; k++) {
        v = field_value(fd, arr + k * elem_size(fd->type));
        if (json_array_append_new(a, v) != 0) { /* takes v, NULL or not */
            json_decref(a);
            a = NULL;
        }
    }
    return a;
}

/* m as an object of every field, in the descriptor's order; NULL when out
 * of memory. */
static json_t *message_value(const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *md = m->descriptor;
    json_t *obj = json_object(), *v;
    unsigned i;

    for (i = 0; obj != NULL && i < md->n_fields; i++) {
        const ProtobufCFieldDescriptor *fd = &md->fields[i];

        if (fd->label == PROTOBUF_C_LABEL_REPEATED)
            v = repeated_value(m, fd);
        else
            v = field_value(fd, (const char *)m + fd->offset);
        /* _new takes v, NULL included (then it fails). */
        if (json_object_set_new(obj, fd->name, v) != 0) {
            json_decref(obj);
            obj = NULL;
        }
    }
    return obj;
}

char *rpc_json_message(const struct ProtobufCMessage *m)
{
    json_t *root = message_value(m);
    char *text;

    if (root == NULL)
        return NULL;
    text = json_dumps(root, DUMP_FLAGS);
    json_decref(root);
    return text;
}
