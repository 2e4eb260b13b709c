/*
 * The replay driver: a main() for any fuzz target, so that a corpus runs as
 * an ordinary test with any compiler (gcc included) and no libFuzzer.
 *
 *   replay_<target> DIR|FILE...
 *
 * Every regular file of every DIR (in name order, not recursive) and every
 * FILE goes through LLVMFuzzerTestOneInput() once, in a buffer of exactly
 * its size, so ASan sees a read past the end.  A broken invariant aborts
 * (the test fails and says which file); an unreadable argument is exit 2;
 * no input at all is exit 1, so that a misplaced corpus cannot pass.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

/* Reads path into a new buffer of exactly *len bytes (never NULL). */
static int read_all(const char *path, uint8_t **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    size_t cap = 0, n = 0, got;

    if (f == NULL)
        return -1;
    for (;;) {
        if (n == cap) {
            uint8_t *nb;

            cap = cap ? 2 * cap : 4096;
            nb = realloc(buf, cap);
            if (nb == NULL)
                goto fail;
            buf = nb;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(f))
        goto fail;
    fclose(f);
    /* An exact-size copy: reads past the input's end must hit a redzone. */
    *out = malloc(n ? n : 1);
    if (*out == NULL) {
        free(buf);
        return -1;
    }
    memcpy(*out, buf, n);
    free(buf);
    *len = n;
    return 0;

fail:
    free(buf);
    fclose(f);
    return -1;
}

static int run_file(const char *path)
{
    uint8_t *buf;
    size_t len;

    if (read_all(path, &buf, &len) != 0) {
        fprintf(stderr, "replay: %s: cannot read\n", path);
        return -1;
    }
    /* Said before the run: a crash report then names its input. */
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file of dir in name order; the count, or -1. */
static long run_dir(const char *dir)
{
    char **names = NULL, path[4096];
    size_t n = 0, cap = 0, i;
    struct dirent *e;
    struct stat st;
    long done = 0;
    DIR *dp = opendir(dir);

    if (dp == NULL) {
        fprintf(stderr, "replay: %s: cannot open\n", dir);
        return -1;
    }
    while ((e = readdir(dp)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            char **nn;

            cap = cap ? 2 * cap : 64;
            nn = realloc(names, cap * sizeof(*names));
            if (nn == NULL)
                break;
            names = nn;
        }
        names[n] = strdup(e->d_name);
        if (names[n] != NULL)
            n++;
    }
    closedir(dp);
    if (n > 0)
        qsort(names, n, sizeof(*names), cmp_str);
    for (i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (run_file(path) != 0)
                done = -1;
            else if (done >= 0)
                done++;
        }
        free(names[i]);
    }
    free(names);
    return done;
}

int main(int argc, char **argv)
{
    long total = 0, k;
    struct stat st;
    int i;

    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR|FILE...\n", argv[0]);
        return 2;
    }
    LLVMFuzzerInitialize(&argc, &argv);
    for (i = 1; i < argc; i++) {
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: no such file or directory\n", argv[i]);
            return 2;
        }
        k = S_ISDIR(st.st_mode) ? run_dir(argv[i])
                                : (run_file(argv[i]) == 0 ? 1 : -1);
        if (k < 0)
            return 2;
        total += k;
    }
    if (total == 0) {
        fprintf(stderr, "replay: no inputs\n");
        return 1;
    }
    printf("replay: %ld inputs, all invariants held\n", total);
    return 0;
}
