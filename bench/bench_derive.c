/*
 * Derived access histograms (planner/formats/derive.c): how long the
 * derivation takes per table, and how close derived bins come to the bins
 * computed from lookups, for several Zipf exponents: the measurement behind
 * DERIVE_ZIPF_DEFAULT (formats.h, docs/api.md).
 *
 * usage: bench_derive [count] [batch] [seed]   (856, 65536, 0)
 *
 * Makes `count` synthetic tables as `shardctl gen-tables` does (their bins
 * computed from a generated batch of lookups), then derives each accessed
 * table's bins from its rows and pooling factor alone at the same batch and
 * prints, per exponent, the mean L1 distance to the computed bins (0: the
 * same histogram; 2: disjoint) and the derivation time per table.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "planner.h"

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    static const double exps[] = {0.8, 1.05, 1.5, 2.0, 2.3, 2.6, 2.9, 3.5};
    struct synth_params sp;
    struct table *tables;
    double bins[TABLE_NBINS], l1, t0, gen_ms, ms;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    size_t i, e, used;
    int k;

    synth_params_default(&sp);
    if (argc > 1)
        sp.count = (size_t)strtoull(argv[1], NULL, 10);
    if (argc > 2)
        sp.batch_size = strtoll(argv[2], NULL, 10);
    if (argc > 3)
        sp.seed = strtoull(argv[3], NULL, 10);
    t0 = now_ms();
    if (synth_tables(&sp, ncpu > 0 ? (unsigned)ncpu : 1, &tables) != 0) {
        fprintf(stderr, "bench_derive: cannot make the tables\n");
        return 1;
    }
    gen_ms = now_ms() - t0;
    printf("%zu synthetic tables (seed %llu), bins computed from %lld bags "
           "of lookups each: %.0f ms on %ld threads\n",
           sp.count, (unsigned long long)sp.seed, (long long)sp.batch_size,
           gen_ms, ncpu);
    printf("%8s  %14s  %14s\n", "zipf s", "mean L1 dist", "ms per table");
    for (e = 0; e < sizeof(exps) / sizeof(exps[0]); e++) {
        l1 = 0;
        used = 0;
        t0 = now_ms();
        for (i = 0; i < sp.count; i++) {
            if (tables[i].pooling_factor == 0)
                continue; /* never read: all 0 either way */
            bins_derive(tables[i].rows, tables[i].pooling_factor, sp.batch_size,
                        exps[e], bins);
            for (k = 0; k < TABLE_NBINS; k++)
                l1 += fabs(bins[k] - tables[i].bins[k]);
            used++;
        }
        ms = now_ms() - t0;
        printf("%8.2f  %14.3f  %14.3f%s\n", exps[e], used ? l1 / used : 0,
               used ? ms / used : 0,
               exps[e] == DERIVE_ZIPF_DEFAULT ? "  (the default)" : "");
    }
    free(tables);
    return 0;
}
