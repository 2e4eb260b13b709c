/*
 * Access histograms derived from statistics (formats.h): what one batch of a
 * table would show when no trace of it exists, from its rows, pooling factor
 * and a popularity skew.  Used where an input gives no bins (json.c via
 * input.c, wire/).
 *
 * The model: nbags x pooling_factor lookups, each an independent draw of a
 * row, the row of popularity rank i drawn with probability i^-s / H, H the
 * sum of i^-s over every rank (a Zipf law; s = 0 is uniform).  A row's
 * count over the batch is then Binomial, taken as Poisson with mean
 * lambda_i = lookups x i^-s / H.  The expected number of rows with a count in
 * bin k is the sum over rows of P(count in bin k); the histogram divides it
 * by the expected number of rows read at all (neuroshard.md 1.1: fractions of
 * the unique rows).  Ratios of expectations, so the result is deterministic.
 *
 * Rows number up to 2^40, so the sum is exact over the most popular
 * DERIVE_HEAD_ROWS ranks only; beyond, the sum over ranks becomes an
 * integral over x in (HEAD + 0.5, rows + 0.5) (the midpoint rule, whose
 * error is tiny where lambda varies slowly from one rank to the next),
 * computed by Simpson's rule in u = ln x.  Each evaluation sums the Poisson
 * probabilities of a window of 12 standard deviations around the mean.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "formats/formats.h"
#include "problem/problem.h"

#define DERIVE_HEAD_ROWS 1024  /* ranks summed exactly */
#define DERIVE_STEPS     64.0  /* Simpson steps per unit of ln(rank) */
#define DERIVE_WINDOW    12.0  /* standard deviations (and counts) summed */
#define DERIVE_TOP_COUNT 32768 /* counts above it are bin 16 */

/* ln(j!) for j >= 0: exact sums below 32, Stirling's series above (its
 * error is below 1e-15 there).  No lgamma(): it writes the global signgam,
 * and the daemon derives on several threads at once. */
static double log_factorial(int64_t j)
{
    double x, s = 0.0;
    int64_t i;

    if (j < 32) {
        for (i = 2; i <= j; i++)
            s += log((double)i);
        return s;
    }
    x = (double)j + 1.0;
    return (x - 0.5) * log(x) - x + 0.91893853320467274178 + 1.0 / (12.0 * x) -
           1.0 / (360.0 * x * x * x) + 1.0 / (1260.0 * x * x * x * x * x);
}

/* The bin of an access count c >= 1 (problem.h: (2^(k-1), 2^k], capped). */
static int count_bin(int64_t c)
{
    int64_t v = c - 1;
    int k = 0;

    while (v != 0 && k < TABLE_NBINS - 1) {
        k++;
        v >>= 1;
    }
    return k;
}

/* Adds w x P(X in bin k) to acc[k], X ~ Poisson(lam), for every k (X = 0
 * belongs to no bin). */
static void add_poisson(double lam, double w, double acc[TABLE_NBINS])
{
    double sd, lo, hi, p;
    int64_t j, jlo, jhi;

    if (!(lam > 0.0) || w == 0.0)
        return;
    sd = sqrt(lam);
    lo = lam - DERIVE_WINDOW * sd - DERIVE_WINDOW;
    if (lo > DERIVE_TOP_COUNT) {
        acc[TABLE_NBINS - 1] += w;
        return;
    }
    hi = lam + DERIVE_WINDOW * sd + DERIVE_WINDOW;
    jlo = lo < 1.0 ? 1 : (int64_t)lo;
    jhi = (int64_t)ceil(hi);
    p = exp(-lam + (double)jlo * log(lam) - log_factorial(jlo));
    for (j = jlo; j <= jhi; j++) {
        acc[count_bin(j)] += w * p;
        p *= lam / (double)(j + 1);
    }
}

/* The integral of x^-s over [a, b], 0 < a <= b, accurate near s = 1. */
static double power_integral(double a, double b, double s)
{
    double l = log(b / a), t = (1.0 - s) * l;

    if (fabs(t) < 1e-12)
        return a * exp(-s * log(a)) * l;
    return exp((1.0 - s) * log(a)) * expm1(t) / (1.0 - s);
}

int bins_derive(int64_t rows, double pooling_factor, int64_t nbags, double s,
                double bins[TABLE_NBINS])
{
    double acc[TABLE_NBINS] = {0};
    double lookups, h = 0.0, c, u0, u1, step, u, w, sum = 0.0;
    int64_t head, i, m, j;
    int k;

    if (rows < 1 || rows > TABLE_ROWS_MAX || nbags < 1 ||
        !isfinite(pooling_factor) || pooling_factor < 0 ||
        pooling_factor > TABLE_PF_MAX || !isfinite(s) || s < 0 ||
        s > DERIVE_ZIPF_MAX)
        return SD_EINVAL;
    memset(bins, 0, TABLE_NBINS * sizeof(bins[0]));
    lookups = (double)nbags * pooling_factor;
    if (lookups == 0.0)
        return 0;

    head = rows < DERIVE_HEAD_ROWS ? rows : DERIVE_HEAD_ROWS;
    for (i = 1; i <= head; i++)
        h += exp(-s * log((double)i));
    if (rows > head)
        h += power_integral((double)head + 0.5, (double)rows + 0.5, s);
    c = lookups / h;

    for (i = 1; i <= head; i++)
        add_poisson(c * exp(-s * log((double)i)), 1.0, acc);
    if (rows > head) {
        u0 = log((double)head + 0.5);
        u1 = log((double)rows + 0.5);
        m = (int64_t)ceil((u1 - u0) * DERIVE_STEPS);
        m += m % 2; /* Simpson's rule takes an even count */
        if (m < 2)
            m = 2;
        step = (u1 - u0) / (double)m;
        for (j = 0; j <= m; j++) {
            u = u0 + step * (double)j;
            w = (j == 0 || j == m) ? 1.0 : (j % 2 ? 4.0 : 2.0);
            add_poisson(c * exp(-s * u), w * step / 3.0 * exp(u), acc);
        }
    }
    for (k = 0; k < TABLE_NBINS; k++)
        sum += acc[k];
    if (!(sum > 0.0))
        return 0;
    for (k = 0; k < TABLE_NBINS; k++)
        bins[k] = acc[k] / sum;
    return 0;
}
