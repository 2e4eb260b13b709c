/*
 * Seeded random numbers for the planner: xoshiro256** (Blackman and Vigna,
 * https://prng.di.unimi.it/xoshiro256starstar.c) seeded through splitmix64,
 * with the few distributions the synthetic-table generator and the random
 * baseline need.  Only integer arithmetic decides which values come out of
 * rng_next(), rng_below() and rng_derive(), so a seed gives the same stream on
 * every platform; the floating-point draws depend on libm's log/sqrt only.
 */
#include <math.h>

#include "problem/problem.h"

/* One step of splitmix64 (Steele, Lea and Flood 2014): advances *x. */
static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));

    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void rng_seed(struct rng *r, uint64_t seed)
{
    uint64_t x = seed;
    int i;

    /* splitmix64 never yields four zero words in a row, so the state is
     * never the all-zero fixed point of xoshiro. */
    for (i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rng_uniform(struct rng *r)
{
    /* The top 53 bits, scaled: every double in [0, 1) with step 2^-53. */
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/* The 128-bit product a * b, as high and low words. */
static void mul64(uint64_t a, uint64_t b, uint64_t *hi, uint64_t *lo)
{
#ifdef __SIZEOF_INT128__
    __extension__ unsigned __int128 p = (unsigned __int128)a * b;

    *hi = (uint64_t)(p >> 64);
    *lo = (uint64_t)p;
#else
    uint64_t al = a & 0xffffffffu, ah = a >> 32;
    uint64_t bl = b & 0xffffffffu, bh = b >> 32;
    uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
    uint64_t mid = (ll >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);

    *hi = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
    *lo = (mid << 32) | (ll & 0xffffffffu);
#endif
}

/*
 * Lemire's nearly-divisionless method ("Fast random integer generation in an
 * interval", ACM TOMACS 2019): the high word of x * bound is uniform on
 * [0, bound) once the low words that would bias it are rejected.
 */
uint64_t rng_below(struct rng *r, uint64_t bound)
{
    uint64_t hi, lo, threshold;

    if (bound <= 1)
        return 0;
    mul64(rng_next(r), bound, &hi, &lo);
    if (lo < bound) {
        threshold = (0 - bound) % bound; /* 2^64 mod bound */
        while (lo < threshold)
            mul64(rng_next(r), bound, &hi, &lo);
    }
    return hi;
}

/*
 * Marsaglia's polar method.  The second normal of each pair is dropped: the
 * state has nowhere to keep it, and the generator is not on a hot path.
 */
double rng_normal(struct rng *r)
{
    double u, v, s;

    do {
        u = 2.0 * rng_uniform(r) - 1.0;
        v = 2.0 * rng_uniform(r) - 1.0;
        s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    return u * sqrt(-2.0 * log(s) / s);
}

/*
 * Marsaglia and Tsang, "A simple method for generating gamma variables"
 * (ACM TOMS 2000).  For shape < 1, Gamma(shape) = Gamma(shape + 1) * U^(1 /
 * shape).  A shape that is not positive and finite gives 0 (and NaN gives
 * NaN), so callers validate their parameters.
 */
double rng_gamma(struct rng *r, double shape)
{
    double d, c, x, v, u, boost = 1.0;

    if (!(shape > 0.0) || isinf(shape))
        return isnan(shape) ? shape : 0.0;
    if (shape < 1.0) {
        /* 1 - U lies in (0, 1], so the power never underflows to log(0). */
        boost = pow(1.0 - rng_uniform(r), 1.0 / shape);
        shape += 1.0;
    }
    d = shape - 1.0 / 3.0;
    c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        do {
            x = rng_normal(r);
            v = 1.0 + c * x;
        } while (v <= 0.0);
        v = v * v * v;
        u = rng_uniform(r);
        if (u < 1.0 - 0.0331 * (x * x) * (x * x))
            break;
        if (u > 0.0 && log(u) < 0.5 * x * x + d * (1.0 - v + log(v)))
            break;
    }
    return d * v * boost;
}

/*
 * Two rounds of splitmix64's finaliser over (seed, i): streams of nearby i
 * and nearby seeds are unrelated, and (seed, i) -> result has no simple
 * collisions such as (s, i) and (s + 1, i - 1).
 */
uint64_t rng_derive(uint64_t seed, uint64_t i)
{
    uint64_t x = seed;
    uint64_t h = splitmix64(&x);

    x = h ^ (i * UINT64_C(0xd1b54a32d192ed03));
    return splitmix64(&x);
}
