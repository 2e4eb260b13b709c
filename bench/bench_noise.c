/*
 * How steady the machine's CPUs are: read it beside any latency or rate
 * figure taken on a shared VM.  One thread pinned to each CPU repeats a
 * fixed chunk of arithmetic (about a millisecond on an idle core) and times
 * each chunk; a chunk that takes several times the median was not run for
 * most of that time (the hypervisor ran another guest, or another process
 * of this one).  Nothing here touches memory beyond a few registers, so
 * neither caches nor the memory bus move the figures.
 *
 * usage: bench_noise [seconds]   (5)
 *
 * Prints, per CPU, the chunks timed and their median, p99, p99.9 and
 * slowest, and the share of the run lost to slow chunks (the time beyond
 * the median, summed, over the whole).  On the project's 2-vCPU VM
 * (2026-12-01) a quiet sitting lost about 1 % and a noisy one 5-10 %, with
 * p99.9 chunks of 10 ms: a daemon's p99 under load cannot be read below
 * that.
 */
#define _GNU_SOURCE /* pthread_setaffinity_np, CPU_SET */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "shardd/sort.h"

#define CHUNKS_MAX  100000
#define CHUNK_STEPS 250000 /* about 1 ms of dependent multiply-adds */

struct cpu_run {
    pthread_t thread;
    int cpu;
    double seconds;
    double *ms; /* owned: each chunk's time */
    size_t n;
};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *spin(void *arg)
{
    struct cpu_run *c = arg;
    volatile double x = 1.0; /* volatile: the chain is not folded away */
    double end;
    cpu_set_t one;
    int i;

    CPU_ZERO(&one);
    CPU_SET(c->cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
    end = now_s() + c->seconds;
    while (c->n < CHUNKS_MAX) {
        double t0 = now_s(), t1;

        for (i = 0; i < CHUNK_STEPS; i++)
            x = x * 1.0000001 + 1e-9;
        t1 = now_s();
        c->ms[c->n++] = (t1 - t0) * 1e3;
        if (t1 >= end)
            break;
    }
    return NULL;
}

/* The q-quantile of sorted a[0 .. n). */
static double at(const double *a, size_t n, double q)
{
    size_t i = (size_t)(q * (double)n);

    return a[i < n ? i : n - 1];
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 5;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    struct cpu_run *runs;
    long c;
    int rv = 0;

    if (seconds <= 0 || ncpu < 1) {
        fprintf(stderr, "usage: bench_noise [seconds > 0]\n");
        return 2;
    }
    runs = calloc((size_t)ncpu, sizeof(*runs));
    if (runs == NULL)
        return 1;
    for (c = 0; c < ncpu; c++) {
        runs[c].cpu = (int)c;
        runs[c].seconds = seconds;
        runs[c].ms = malloc(CHUNKS_MAX * sizeof(*runs[c].ms));
        if (runs[c].ms == NULL ||
            pthread_create(&runs[c].thread, NULL, spin, &runs[c]) != 0) {
            fprintf(stderr, "bench_noise: cannot start CPU %ld's thread\n", c);
            free(runs[c].ms);
            runs[c].ms = NULL;
            rv = 1;
            break;
        }
    }
    ncpu = c;
    for (c = 0; c < ncpu; c++)
        pthread_join(runs[c].thread, NULL);
    printf("bench_noise: %.1f s, one thread pinned a CPU, chunks of %d "
           "steps\n",
           seconds, CHUNK_STEPS);
    printf("%4s %7s %9s %9s %9s %9s %7s\n", "cpu", "chunks", "p50 ms", "p99 ms",
           "p99.9 ms", "max ms", "lost %");
    for (c = 0; c < ncpu; c++) {
        struct cpu_run *r = &runs[c];
        double med, sum = 0, over = 0;
        size_t i;

        if (r->n == 0)
            continue;
        qsort(r->ms, r->n, sizeof(*r->ms), sd_cmp_double);
        med = at(r->ms, r->n, 0.5);
        for (i = 0; i < r->n; i++) {
            sum += r->ms[i];
            over += r->ms[i] > med ? r->ms[i] - med : 0;
        }
        printf("%4d %7zu %9.3f %9.3f %9.3f %9.3f %7.1f\n", r->cpu, r->n, med,
               at(r->ms, r->n, 0.99), at(r->ms, r->n, 0.999), r->ms[r->n - 1],
               100 * over / sum);
        free(r->ms);
    }
    free(runs);
    return rv;
}
