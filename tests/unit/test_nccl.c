/*
 * nccl-tests outputs and their alpha-beta fit (planner/formats/nccl.c): the
 * committed real outputs (tests/fixtures/nccl/, MIT-0 and Apache-2.0) parse
 * to the collective, ranks and rows their headers document, and the banded
 * fit comes within 10 % of the measured times on every one; exact
 * alpha-beta data is recovered exactly; launcher prefixes change nothing;
 * outputs that say nothing usable are refused.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "planner.h"

#define FIXTURES SD_SOURCE_DIR "/tests/fixtures/nccl/"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;

    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 &&
        fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
        if (fread(buf, 1, (size_t)n, f) == (size_t)n) {
            buf[n] = '\0';
            *len = (size_t)n;
        } else {
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    return buf;
}

/* What each fixture's "# source:" lines document. */
static const struct fixture {
    const char *file;
    enum nccl_coll coll;
    int32_t nranks;
    size_t nrows; /* sizes above 0 */
    uint64_t first, last;
} fixtures[] = {
    {"a100-2x8-all_reduce-aws-p4de.txt", NCCL_ALL_REDUCE, 16, 29, 8,
     2147483648ull},
    {"h100-1x8-all_reduce-aws-batch-p5.txt", NCCL_ALL_REDUCE, 8, 32, 8,
     17179869184ull},
    {"h100-2x8-all_reduce-aws-p5.txt", NCCL_ALL_REDUCE, 16, 32, 8,
     17179869184ull},
    {"h100-2x8-all_gather-gcp-a3-mega.txt", NCCL_ALL_GATHER, 16, 26, 256,
     8589934592ull},
};

static void test_fixtures(void)
{
    size_t k, i;

    for (k = 0; k < sizeof(fixtures) / sizeof(fixtures[0]); k++) {
        const struct fixture *fx = &fixtures[k];
        char path[512], *text;
        struct nccl_run r;
        struct nccl_fit one, three;
        struct sd_diag d = {{0}};
        size_t len = 0;
        bool sorted = true;

        snprintf(path, sizeof(path), "%s%s", FIXTURES, fx->file);
        text = slurp(path, &len);
        CHECK(text != NULL);
        if (text == NULL)
            continue;
        memset(&r, 0, sizeof(r));
        CHECK(nccl_parse(text, len, fx->file, &r, &d) == 0);
        free(text);
        if (r.rows == NULL) {
            fprintf(stderr, "%s: %s\n", fx->file, d.msg);
            continue;
        }
        CHECK(r.coll == fx->coll && r.nranks == fx->nranks &&
              r.nrows == fx->nrows);
        CHECK(r.rows[0].bytes == fx->first &&
              r.rows[r.nrows - 1].bytes == fx->last);
        for (i = 1; i < r.nrows; i++)
            sorted &= r.rows[i].bytes >= r.rows[i - 1].bytes;
        CHECK(sorted);
        /* algbw = size / time (GB/s) on the big rows, where the printed
         * rounding is small: the columns are read as what they are. */
        for (i = 0; i < r.nrows; i++)
            if (r.rows[i].algbw >= 10)
                CHECK(fabs((double)r.rows[i].bytes / r.rows[i].time_us / 1e3 /
                               r.rows[i].algbw -
                           1) < 0.01);
        CHECK(nccl_fit(&r, 1, &one, &d) == 0 && one.nbands == 1);
        CHECK(nccl_fit(&r, 3, &three, &d) == 0 && three.nbands == 3);
        /* The target: within 10 % of the measured times (MAPE) with
         * bands; one band alone is not (NCCL's protocols differ). */
        CHECK(three.mape < 0.10);
        CHECK(three.mape < one.mape);
        printf("%-40s %-10s %2d ranks %2zu sizes: one band %5.1f %%, three "
               "%4.1f %% (max %4.1f %%)\n",
               fx->file, nccl_coll_name(r.coll), (int)r.nranks, r.nrows,
               100 * one.mape, 100 * three.mape, 100 * three.max_err);
        /* The fit answers for the sizes it saw, band by band. */
        CHECK(fabs(nccl_fit_us(&three, r.rows[r.nrows - 1].bytes) /
                       r.rows[r.nrows - 1].time_us -
                   1) < 0.15);
        nccl_run_free(&r);
    }
}

/* Rows made from t = 20 us + bytes / 50 GB/s: recovered to rounding. */
static void test_exact(void)
{
    char text[8192];
    size_t len = 0;
    uint64_t s;
    struct nccl_run r = {0};
    struct nccl_fit f;
    struct sd_diag d = {{0}};

    len += (size_t)snprintf(text + len, sizeof(text) - len,
                            "# Collective test starting: alltoall_perf\n"
                            "#  Rank  0 Group  0 Pid 1 on hostA device  0 "
                            "[0000:19:00] NVIDIA H100 80GB HBM3\n"
                            "#  Rank  1 Group  0 Pid 2 on hostB device  0 "
                            "[0000:19:00] NVIDIA H100 80GB HBM3\n");
    for (s = 1024; s <= (1ull << 30); s *= 4) {
        double t = 20 + (double)s / 50e3;

        len += (size_t)snprintf(
            text + len, sizeof(text) - len,
            "%12llu %12llu float none -1 %10.4f %6.2f %6.2f 0 %10.4f %6.2f "
            "%6.2f N/A\n",
            (unsigned long long)s, (unsigned long long)s / 8, t,
            (double)s / t / 1e3, (double)s / t / 2e3, t, (double)s / t / 1e3,
            (double)s / t / 2e3);
    }
    CHECK(nccl_parse(text, len, NULL, &r, &d) == 0);
    if (r.rows == NULL) {
        fprintf(stderr, "exact: %s\n", d.msg);
        return;
    }
    CHECK(r.coll == NCCL_ALL_TO_ALL && r.nranks == 2 && r.nhosts == 2);
    CHECK(strcmp(r.device, "NVIDIA H100 80GB HBM3") == 0);
    CHECK(nccl_fit(&r, 3, &f, &d) == 0);
    CHECK(f.nbands == 1); /* more bands gain nothing: one is kept */
    CHECK_NEAR(f.band[0].alpha_us, 20, 1e-4);
    CHECK_NEAR(f.band[0].beta_gbps, 50, 1e-5);
    CHECK(f.mape < 1e-6);
    CHECK_NEAR(nccl_fit_us(&f, 1ull << 20), 20 + 1048576 / 50e3, 1e-6);
    nccl_run_free(&r);
}

/* Launcher tags and indentation change nothing; refusals say why. */
static void test_noise_and_refusals(void)
{
    static const char plain[] =
        "# nThread 1 nGpus 8 minBytes 8 maxBytes 1024 step: 2(factor)\n"
        "     1048576  262144  float  sum  -1  100.0  10.49  18.35  0  99.0  "
        "10.59  18.54  0\n"
        "     4194304 1048576  float  sum  -1  250.0  16.78  29.36  0  251.0  "
        "16.71  29.24  0\n";
    static const char tagged[] =
        "0: # nThread 1 nGpus 8 minBytes 8 maxBytes 1024 step: 2(factor)\n"
        "host:123:456 [0] NCCL INFO Channel 00/32 : 0 1 2 3\n"
        "[1,0]<stdout>:     1048576  262144  float  sum  -1[0]  100.0  10.49"
        "  18.35  0  99.0  10.59  18.54  0\r\n"
        "12:     4194304 1048576  float  sum  -1  250.0  16.78  29.36  0  "
        "251.0  16.71  29.24  0\n";
    static const char ambiguous[] =
        "     1048576  262144  float  none  -1  100.0  10.49  9.18  0  99.0  "
        "10.59  9.27  0\n";
    struct nccl_run a = {0}, b = {0};
    struct sd_diag d = {{0}};

    CHECK(nccl_parse(plain, sizeof(plain) - 1, NULL, &a, &d) == 0);
    CHECK(nccl_parse(tagged, sizeof(tagged) - 1, NULL, &b, &d) == 0);
    if (a.rows && b.rows) {
        /* busbw / algbw = 1.75: all_reduce of 8 ranks */
        CHECK(a.coll == NCCL_ALL_REDUCE && a.nranks == 8);
        CHECK(b.nrows == a.nrows && b.nranks == a.nranks &&
              memcmp(a.rows, b.rows, a.nrows * sizeof(*a.rows)) == 0);
    }
    nccl_run_free(&a);
    nccl_run_free(&b);
    /* busbw / algbw 0.875: all_gather, reduce_scatter or alltoall */
    CHECK(nccl_parse(ambiguous, sizeof(ambiguous) - 1, NULL, &a, &d) ==
          SD_EINVAL);
    CHECK(strstr(d.msg, "collective") != NULL);
    CHECK(nccl_parse(ambiguous, sizeof(ambiguous) - 1, "x-alltoall.txt", &a,
                     &d) == 0);
    CHECK(a.coll == NCCL_ALL_TO_ALL && a.nranks == 8);
    nccl_run_free(&a);
    CHECK(nccl_parse("hello\nworld\n", 12, NULL, &a, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "no nccl-tests data row") != NULL);
    CHECK(nccl_fit(&(struct nccl_run){0}, 1, &(struct nccl_fit){0}, &d) ==
          SD_EINVAL);
}

int main(void)
{
    test_fixtures();
    test_exact();
    test_noise_and_refusals();
    return tap_done();
}
