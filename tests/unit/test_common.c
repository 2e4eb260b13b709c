/*
 * Tests of common/: the FNV-1a hash (include/shardd/hash.h) against the
 * published reference vectors, and the incremental adders against the
 * values the daemon's request hash gave before it used them, so that cached
 * and audited plans keep their keys.  And whole-file reads
 * (include/shardd/file.h): to the end of a pipe, capped at a size, with
 * the system's reason for a file that cannot be read.  And sizes for
 * people (include/shardd/bytes.h) at each unit's edges.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp(), pipe(), fork() */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "shardd/bytes.h"
#include "shardd/file.h"
#include "shardd/hash.h"

static void test_reference_vectors(void)
{
    struct sd_fnv f;

    /* The FNV-1a 64-bit test vectors of "", "a" and "foobar" published with
     * the algorithm (http://www.isthe.com/chongo/tech/comp/fnv/). */
    CHECK(sd_fnv1a_str("") == UINT64_C(0xcbf29ce484222325));
    CHECK(sd_fnv1a_str("a") == UINT64_C(0xaf63dc4c8601ec8c));
    CHECK(sd_fnv1a_str("foobar") == UINT64_C(0x85944171f73967e8));

    sd_fnv_init(&f);
    CHECK(f.h == SD_FNV_OFFSET);
    sd_fnv_bytes(&f, "foo", 3);
    sd_fnv_bytes(&f, "bar", 3);
    CHECK(f.h == UINT64_C(0x85944171f73967e8)); /* bytes in pieces alike */
    sd_fnv_bytes(&f, NULL, 0);
    CHECK(f.h == UINT64_C(0x85944171f73967e8));
}

/*
 * The expected values were computed with the daemon's own request hasher
 * before it was replaced by these functions, and equal Python's FNV-1a over
 * struct.pack("<Q", v), struct.pack("<d", x) and pack("<Q", len(s)) + s.
 */
static void test_adders(void)
{
    struct sd_fnv f;

    sd_fnv_init(&f);
    sd_fnv_u64(&f, UINT64_C(0x0102030405060708));
    CHECK(f.h == UINT64_C(0x0c6d4496e17859d5));

    sd_fnv_init(&f);
    sd_fnv_real(&f, 1.5);
    CHECK(f.h == UINT64_C(0xaa95e93229a27c80));

    sd_fnv_init(&f);
    sd_fnv_str(&f, "foobar");
    CHECK(f.h == UINT64_C(0xb277229a2d9d19f2));

    sd_fnv_init(&f);
    sd_fnv_str(&f, "shardd.v1.PlanRequest/1");
    sd_fnv_u64(&f, 42);
    sd_fnv_real(&f, 1.5);
    sd_fnv_u64(&f, (uint64_t)(int64_t)-1);
    sd_fnv_bytes(&f, "xyz", 3);
    CHECK(f.h == UINT64_C(0x34f74cb125b1159f));

    /* The length prefix keeps string boundaries. */
    {
        struct sd_fnv g;

        sd_fnv_init(&f);
        sd_fnv_str(&f, "ab");
        sd_fnv_str(&f, "c");
        sd_fnv_init(&g);
        sd_fnv_str(&g, "a");
        sd_fnv_str(&g, "bc");
        CHECK(f.h != g.h);
    }
    /* 0.0 and -0.0 are different bit patterns. */
    {
        struct sd_fnv g;

        sd_fnv_init(&f);
        sd_fnv_real(&f, 0.0);
        sd_fnv_init(&g);
        sd_fnv_real(&g, -0.0);
        CHECK(f.h != g.h);
    }
}

/* Writes n bytes of 'x' to path. */
static void write_xs(const char *path, size_t n)
{
    FILE *f = fopen(path, "wb");
    size_t i;

    CHECK(f != NULL);
    for (i = 0; f != NULL && i < n; i++)
        fputc('x', f);
    if (f != NULL)
        fclose(f);
}

static void test_file_read(void)
{
    char dir[] = "/tmp/test_common.XXXXXX", path[64], fdpath[32];
    struct sd_diag d;
    void *buf = NULL;
    size_t len = 0;
    int fds[2];
    pid_t pid;

    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/f", dir);

    /* A file of exactly max bytes is read whole, a NUL after it; one byte
     * more is refused, naming the file, the cap and what it is for. */
    write_xs(path, 100000);
    CHECK(sd_file_read(path, 100000, "a test", &buf, &len, &d) == 0);
    CHECK(len == 100000 && buf != NULL && ((char *)buf)[99999] == 'x' &&
          ((char *)buf)[100000] == '\0');
    free(buf);
    buf = NULL;
    CHECK(sd_file_read(path, 99999, "a test", &buf, &len, &d) == SD_EFORMAT);
    CHECK(buf == NULL && strstr(d.msg, path) != NULL &&
          strstr(d.msg, "over 97.7 KiB: too large for a test") != NULL);
    CHECK(sd_file_read(path, 0, "a test", &buf, &len, &d) == SD_EFORMAT);

    /* An empty file: no bytes, still a C string. */
    write_xs(path, 0);
    CHECK(sd_file_read(path, 0, "a test", &buf, &len, &d) == 0);
    CHECK(len == 0 && buf != NULL && ((char *)buf)[0] == '\0');
    free(buf);
    buf = NULL;

    /* An endless device stops at the cap. */
    CHECK(sd_file_read("/dev/zero", (size_t)1 << 20, "a test", &buf, &len,
                       &d) == SD_EFORMAT);
    CHECK(strstr(d.msg, "/dev/zero: over 1.00 MiB: too large for a test") !=
          NULL);

    /* A pipe has no size to ask for: it is read to its end (what
     * `--tables <(...)` hands a command). */
    CHECK(pipe(fds) == 0);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        static char chunk[70000];
        memset(chunk, 'p', sizeof(chunk));
        close(fds[0]);
        _exit(write(fds[1], chunk, sizeof(chunk)) == (ssize_t)sizeof(chunk)
                  ? 0
                  : 1);
    }
    close(fds[1]);
    snprintf(fdpath, sizeof(fdpath), "/dev/fd/%d", fds[0]);
    CHECK(sd_file_read(fdpath, 1 << 20, "a test", &buf, &len, &d) == 0);
    CHECK(len == 70000 && buf != NULL && ((char *)buf)[69999] == 'p');
    free(buf);
    buf = NULL;
    close(fds[0]);
    CHECK(waitpid(pid, NULL, 0) == pid);

    /* What cannot be read says why. */
    CHECK(sd_file_read(dir, 100, "a test", &buf, &len, &d) == SD_EIO);
    CHECK(strstr(d.msg, "Is a directory") != NULL);
    CHECK(unlink(path) == 0);
    CHECK(sd_file_read(path, 100, "a test", &buf, &len, &d) == SD_ENOENT);
    CHECK(strstr(d.msg, "No such file") != NULL);
    CHECK(rmdir(dir) == 0);
}

static void test_bytes_text(void)
{
    char b[SD_BYTES_TEXT];

    CHECK(strcmp(sd_bytes_text(0, b), "0 bytes") == 0);
    CHECK(strcmp(sd_bytes_text(1023, b), "1023 bytes") == 0);
    CHECK(strcmp(sd_bytes_text(1024, b), "1.00 KiB") == 0);
    CHECK(strcmp(sd_bytes_text(12000, b), "11.7 KiB") == 0);
    CHECK(strcmp(sd_bytes_text(512000, b), "500 KiB") == 0);
    CHECK(strcmp(sd_bytes_text(1048575, b), "1024 KiB") == 0);
    CHECK(strcmp(sd_bytes_text(1048576, b), "1.00 MiB") == 0);
    CHECK(strcmp(sd_bytes_text(51200000000ull, b), "47.7 GiB") == 0);
    CHECK(strcmp(sd_bytes_text(UINT64_MAX, b), "16.0 EiB") == 0);
    /* Returned as given, for a printf argument. */
    CHECK(sd_bytes_text(5, b) == b);
}

int main(void)
{
    test_reference_vectors();
    test_adders();
    test_file_read();
    test_bytes_text();
    return tap_done();
}
