/*
 * A tiny test harness: CHECK counts failures instead of aborting, so one run
 * reports every failure, and tap_done() prints the closing line
 * "N passed, N failed" that CI reads.  Each test file is one executable and
 * one ctest test.  Exit code 77 means skipped: a part that cannot run here
 * calls tap_skip(), and the test then exits 77 when no check failed, so
 * ctest reports it skipped, never passed.
 */
#ifndef SHARDD_TEST_HARNESS_H
#define SHARDD_TEST_HARNESS_H

#include <math.h>
#include <stdio.h>

static int tap_pass, tap_fail, tap_skipped;

#define CHECK(expr)                                                            \
    do {                                                                       \
        if (expr) {                                                            \
            tap_pass++;                                                        \
        } else {                                                               \
            tap_fail++;                                                        \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__,   \
                    #expr);                                                    \
        }                                                                      \
    } while (0)

/* |a - b| <= tol * max(1, |b|): relative for large values, absolute near 0. */
#define CHECK_NEAR(a, b, tol)                                                  \
    do {                                                                       \
        double a_ = (double)(a), b_ = (double)(b);                             \
        double s_ = fabs(b_) > 1.0 ? fabs(b_) : 1.0;                           \
        if (fabs(a_ - b_) <= (tol)*s_) {                                       \
            tap_pass++;                                                        \
        } else {                                                               \
            tap_fail++;                                                        \
            fprintf(stderr, "%s:%d: CHECK_NEAR(%s, %s): %.9g vs %.9g\n",       \
                    __FILE__, __LINE__, #a, #b, a_, b_);                       \
        }                                                                      \
    } while (0)

/*
 * CHECK(call == 0) for a call whose output the test reads next (a plan, a
 * response): a failure names the call, what it returned and why (its
 * diagnostic's message, or NULL), and the check's value says whether the
 * output was made, so that the case skips what would read it:
 *
 *     if (!CHECK_OK(run(tb, n, &topo, &o, &p, &d), d.msg))
 *         goto out;
 *
 * An output left unwritten by a failed call is never read, and a broken
 * search fails its checks instead of crashing the test.
 */
#define CHECK_OK(call, why) tap_ok((call), (why), #call, __FILE__, __LINE__)

static inline int tap_ok(int rv, const char *why, const char *call,
                         const char *file, int line)
{
    if (rv == 0) {
        tap_pass++;
        return 1;
    }
    tap_fail++;
    fprintf(stderr, "%s:%d: CHECK_OK(%s) failed: returned %d%s%s\n", file, line,
            call, rv, why != NULL ? ": " : "", why != NULL ? why : "");
    return 0;
}

#define TEST_SKIP 77

/* A part of the test that cannot run here, and why (a SKIP line). */
static inline void tap_skip(const char *why)
{
    tap_skipped++;
    printf("SKIP: %s\n", why);
}

static inline int tap_done(void)
{
    if (tap_skipped > 0)
        printf("%d passed, %d failed, %d part(s) skipped\n", tap_pass, tap_fail,
               tap_skipped);
    else
        printf("%d passed, %d failed\n", tap_pass, tap_fail);
    if (tap_fail > 0 || tap_pass == 0)
        return 1;
    return tap_skipped > 0 ? TEST_SKIP : 0;
}

#endif /* SHARDD_TEST_HARNESS_H */
