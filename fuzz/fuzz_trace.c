/*
 * Fuzz target: the trace file reader, trace_file_read()
 * (planner/formats/trace_file.c).  It reads a path, so each input is
 * written to a file in a private directory first (under $TMPDIR, else
 * /dev/shm when writable, else /tmp).
 *
 * Invariants: an input is refused with a code and a message, or every trace
 * read passes trace_validate(), its features are fractions summing to 1 (or
 * all 0) with a finite pooling factor, the table made from it passes
 * table_validate(), and writing the traces back (trace_file_write()) gives
 * the input byte for byte: the format has one encoding of each file.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "planner.h"

static char dir[256], in_path[300], out_path[300];

static void cleanup(void)
{
    unlink(in_path);
    unlink(out_path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *base = getenv("TMPDIR");

    (void)argc;
    (void)argv;
    if (base == NULL || base[0] == '\0')
        base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof(dir), "%s/shardd-fuzz-trace-XXXXXX", base);
    FUZZ_CHECK(mkdtemp(dir) != NULL);
    snprintf(in_path, sizeof(in_path), "%s/in", dir);
    snprintf(out_path, sizeof(out_path), "%s/out", dir);
    atexit(cleanup);
    return 0;
}

static void write_file(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");

    FUZZ_CHECK(f != NULL);
    FUZZ_CHECK(size == 0 || fwrite(data, 1, size, f) == size);
    FUZZ_CHECK(fclose(f) == 0);
}

/* The file at path holds exactly data. */
static int file_equals(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "rb");
    uint8_t buf[4096];
    size_t off = 0, got;
    int same = 1;

    FUZZ_CHECK(f != NULL);
    while (same && (got = fread(buf, 1, sizeof(buf), f)) > 0) {
        same = off + got <= size && memcmp(buf, data + off, got) == 0;
        off += got;
    }
    fclose(f);
    return same && off == size;
}

static void check_trace(const struct trace *t)
{
    struct table tab;
    struct sd_diag d;
    double bins[TABLE_NBINS], pf, sum = 0;
    int k, rv;

    d.msg[0] = '\0';
    rv = trace_validate(t, &d);
    if (rv != 0)
        fprintf(stderr, "read but invalid: %s\n", d.msg);
    FUZZ_CHECK(rv == 0);
    FUZZ_CHECK(trace_features(t, bins, &pf) == 0);
    for (k = 0; k < TABLE_NBINS; k++) {
        FUZZ_CHECK(bins[k] >= 0 && bins[k] <= 1);
        sum += bins[k];
    }
    FUZZ_CHECK(t->nindices == 0 ? sum == 0 : fabs(sum - 1) < 1e-9);
    FUZZ_CHECK(isfinite(pf) && pf >= 0);
    FUZZ_CHECK(trace_to_table(t, &tab) == 0);
    d.msg[0] = '\0';
    rv = table_validate(&tab, 0, &d);
    if (rv != 0)
        fprintf(stderr, "its table is invalid: %s\n", d.msg);
    FUZZ_CHECK(rv == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct trace *traces = NULL;
    struct sd_diag d;
    size_t n = 0, i;
    int rv;

    write_file(in_path, data, size);
    d.msg[0] = '\0';
    rv = trace_file_read(in_path, &traces, &n, &d);
    if (rv != 0) {
        FUZZ_CHECK(rv != SD_EIO); /* the file is there and readable */
        fuzz_check_refusal(rv, &d);
        return 0;
    }
    for (i = 0; i < n; i++)
        check_trace(&traces[i]);
    d.msg[0] = '\0';
    rv = trace_file_write(out_path, traces, n, &d);
    if (rv != 0)
        fprintf(stderr, "write back refused: %s\n", d.msg);
    FUZZ_CHECK(rv == 0);
    FUZZ_CHECK(file_equals(out_path, data, size));
    trace_array_free(traces, n);
    return 0;
}
