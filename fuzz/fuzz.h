/*
 * What every fuzz target shares: the libFuzzer entry points and the checks
 * that turn a broken invariant into a crash the fuzzer (or the replay
 * driver) reports.
 *
 * A target defines both entry points.  It is built two ways (fuzz/README.md):
 * linked with libFuzzer (clang, -fsanitize=fuzzer) to search for inputs, and
 * linked with replay_main.c (any compiler) to run a fixed corpus as a test.
 */
#ifndef SHARDD_FUZZ_H
#define SHARDD_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardd/err.h"

/* Called once before the first input (libFuzzer calls it if defined). */
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* One input; returns 0 (libFuzzer reserves other values). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * An invariant that must hold for every input.  Failing aborts, so that
 * libFuzzer saves the input as a crash and the replay test fails; never
 * compiled out (unlike assert()).
 */
#define FUZZ_CHECK(cond)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__,         \
                    __LINE__, #cond);                                          \
            abort();                                                           \
        }                                                                      \
    } while (0)

/*
 * A refusal must be a known negative SD_E* code carrying one line that says
 * why.  Out of memory is exempt from the message: some allocation failures
 * return SD_ENOMEM bare, and they are not what a fuzzer looks for.
 */
static inline void fuzz_check_refusal(int rv, const struct sd_diag *d)
{
    static int verbose = -1;

    /* SHARDD_FUZZ_VERBOSE=1 prints every refusal: what a corpus reaches. */
    if (verbose < 0)
        verbose = getenv("SHARDD_FUZZ_VERBOSE") != NULL;
    if (verbose)
        fprintf(stderr, "refused: %s: %s\n", sd_err_name(rv), d->msg);
    FUZZ_CHECK(rv < 0 && strcmp(sd_err_name(rv), "UNKNOWN") != 0);
    if (rv != SD_ENOMEM)
        FUZZ_CHECK(d->msg[0] != '\0');
}

/*
 * Applies edits to a file image of len bytes whose last 4 are a CRC-32
 * (IEEE, reflected, little-endian) of the rest: each edit is step bytes, a
 * little-endian offset of step - 1 bytes (taken modulo len) then the new
 * byte; then the CRC is made right again, so that edits reach the checks
 * behind the checksum.
 */
static inline void fuzz_edit_image(uint8_t *buf, size_t len,
                                   const uint8_t *edits, size_t n, size_t step)
{
    uint32_t c = 0xFFFFFFFFu;
    size_t i, j, off;
    int k;

    for (i = 0; i + step <= n; i += step) {
        for (off = 0, j = 0; j + 1 < step; j++)
            off |= (size_t)edits[i + j] << (8 * j);
        buf[off % len] = edits[i + step - 1];
    }
    for (i = 0; i + 4 < len; i++) {
        c ^= buf[i];
        for (k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    c = ~c;
    for (k = 0; k < 4; k++)
        buf[len - 4 + k] = (uint8_t)(c >> (8 * k));
}

#endif /* SHARDD_FUZZ_H */
