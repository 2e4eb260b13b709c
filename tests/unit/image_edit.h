/*
 * Edits of a model file image for the format tests (test_net.c,
 * test_net_features.c, and test_policy.c for policy files, which end with
 * the same CRC-32): the CRC-32 the file ends with recomputed so that the
 * parser sees the edit rather than a damaged file, and the check that one such
 * edit is refused with a message naming the field.
 */
#ifndef SHARDD_TEST_IMAGE_EDIT_H
#define SHARDD_TEST_IMAGE_EDIT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "planner.h"
#include "shardd/le.h"

/* CRC-32 (IEEE, reflected), bit by bit, of the first len - 4 bytes, written
 * over the last 4. */
static inline void recrc(unsigned char *p, size_t len)
{
    uint32_t c = 0xffffffffu;
    size_t i;
    int k;

    for (i = 0; i + 4 < len; i++) {
        c ^= p[i];
        for (k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0xedb88320u : c >> 1;
    }
    sd_le_put32(p + len - 4, ~c);
}

/* Image `good` with byte (width 1) or u32 (width 4) `at` set to v, checksum
 * fixed: net_parse() refuses it (SD_EFORMAT) naming `field`. */
static inline void refuse_edit(const unsigned char *good, size_t len, size_t at,
                               uint32_t v, int width, const char *field)
{
    unsigned char *buf = malloc(len);
    struct cost_net *back = NULL;
    struct sd_diag d = {{0}};

    if (buf == NULL)
        return;
    memcpy(buf, good, len);
    if (width == 1)
        buf[at] = (unsigned char)v;
    else
        sd_le_put32(buf + at, v);
    recrc(buf, len);
    CHECK(net_parse(buf, len, &back, &d) == SD_EFORMAT);
    if (strstr(d.msg, field) == NULL) {
        fprintf(stderr, "edit at %zu: wanted \"%s\" in \"%s\"\n", at, field,
                d.msg);
        CHECK(0);
    }
    free(back);
    free(buf);
}

#endif
