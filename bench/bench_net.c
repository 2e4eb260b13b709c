/*
 * The compute cost model on each backend: how long scoring takes per
 * shard for batches of 1 to 65,536 shards (8 tables each, inputs built
 * once, so the figure is the scorer's: upload of inputs, kernels, copy
 * back), against the planner's host scorer (net_tables_ms()) and the
 * search's cached form (a table's projected latent added to a shard and
 * the head's dot product: net_head_raw() over a z kept per shard); then
 * sgemm at training's shapes (a minibatch of 128 shards, ~1,000 tables)
 * with CBLAS and each backend.  Figures, not checks.
 *
 * usage: bench_net [cpu|cuda|all]   (default all)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "profiler.h"

#define TABLES_PER_SHARD 8
#define MAX_SHARDS       65536

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void tables_init(struct table *t, size_t n, uint64_t seed)
{
    struct rng g;
    size_t i;
    int b;

    rng_seed(&g, seed);
    for (i = 0; i < n; i++) {
        memset(&t[i], 0, sizeof(t[i]));
        t[i].rows = 1000 + (int64_t)rng_below(&g, 10000000);
        t[i].dim = 4 << rng_below(&g, 6);
        t[i].pooling_factor = 1 + 40 * rng_uniform(&g);
        for (b = 0; b < TABLE_NBINS; b++)
            t[i].bins[b] = 1.0 / TABLE_NBINS;
    }
}

/* Per-shard microseconds of scoring `n` shards with `net`, best of 3. */
static double score_us(struct kern_net *net, const float *x, const size_t *off,
                       size_t n, double *ms)
{
    double best = 1e30, t;
    struct sd_diag d;
    int r;

    for (r = 0; r < 3; r++) {
        t = now_ms();
        if (kern_net_score(net, x, off[n], off, n, ms, &d) != 0) {
            fprintf(stderr, "score: %s\n", d.msg);
            return -1;
        }
        t = now_ms() - t;
        if (t < best)
            best = t;
    }
    return best * 1e3 / (double)n;
}

static void bench_scores(const struct kern_backend **bes, int nbe,
                         const struct table *tables)
{
    const struct cost_net *m = net_embedded(NULL);
    /* Rows of the model's own input width (its derived inputs too). */
    size_t nin = m ? (size_t)net_nin(m) : NET_IN;
    float *x = malloc((size_t)MAX_SHARDS * TABLES_PER_SHARD * nin * 4);
    size_t *off = malloc((MAX_SHARDS + 1) * sizeof(*off));
    double *ms = malloc(MAX_SHARDS * sizeof(*ms));
    float z[NET_H2], proj[NET_H2], lat[NET_LAT];
    struct kern_net *nets[2] = {NULL, NULL};
    volatile double sink = 0;
    struct sd_diag d;
    size_t n, i, k;
    double t;
    int b;

    if (x == NULL || off == NULL || ms == NULL || m == NULL)
        return;
    for (i = 0; i <= MAX_SHARDS; i++)
        off[i] = i * TABLES_PER_SHARD;
    for (i = 0; i < (size_t)MAX_SHARDS * TABLES_PER_SHARD; i++)
        net_input_all(m, &tables[i], tables[i].dim, x + i * nin);
    /* The search's evaluation: one table's projection into z and the
     * head's raw output, latents cached (README "speed"). */
    net_latent(m, &tables[0], tables[0].dim, lat);
    net_project(m, lat, proj);
    net_head_init(m, z);
    t = now_ms();
    for (i = 0; i < 1000000; i++) {
        for (k = 0; k < NET_H2; k++)
            z[k] += proj[k] * 1e-9f;
        sink += net_head_raw(m, z);
    }
    printf("search evaluation (cached latents, host): %.4f us\n",
           (now_ms() - t) * 1e3 / 1e6);
    t = now_ms();
    for (i = 0; i < 4096; i++)
        sink +=
            net_tables_ms(m, &tables[i * TABLES_PER_SHARD], TABLES_PER_SHARD);
    printf("net_tables_ms, %d tables a shard (host): %.3f us per shard\n",
           TABLES_PER_SHARD, (now_ms() - t) * 1e3 / 4096);
    for (b = 0; b < nbe; b++)
        if (prof_net_upload(bes[b], 0, m, &nets[b], &d) != 0)
            fprintf(stderr, "%s: %s\n", bes[b]->name, d.msg);
    printf("%8s", "shards");
    for (b = 0; b < nbe; b++)
        printf("  %10s_us/shard", bes[b]->name);
    printf("\n");
    for (n = 1; n <= MAX_SHARDS; n *= 4) {
        printf("%8zu", n);
        for (b = 0; b < nbe; b++)
            printf("  %18.3f", nets[b] ? score_us(nets[b], x, off, n, ms) : -1);
        printf("\n");
    }
    for (b = 0; b < nbe; b++)
        kern_net_close(nets[b]);
    free(x);
    free(off);
    free(ms);
    (void)sink;
}

static void bench_sgemm(const struct kern_backend **bes, int nbe)
{
    /* forward X W1^T, L = H1 W2^T; backward dW1 = dH1^T X */
    static const struct {
        const char *what;
        bool ta, tb;
        int m, n, k;
    } shapes[] = {
        {"H1 = X W1^T", false, true, 1024, NET_H1, NET_IN},
        {"L = H1 W2^T", false, true, 1024, NET_LAT, NET_H1},
        {"dW1 = dH1^T X", true, false, NET_H1, NET_IN, 1024},
    };
    float *a = calloc(1024 * 128, 4), *bm = calloc(1024 * 128, 4);
    float *c = calloc(1024 * 128, 4);
    struct kern_blas *bl;
    struct sd_diag d;
    size_t s;
    int b, r, lda, ldb;
    double t;

    for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        const int m = shapes[s].m, n = shapes[s].n, k = shapes[s].k;

        lda = shapes[s].ta ? m : k;
        ldb = shapes[s].tb ? k : n;
        t = now_ms();
        for (r = 0; r < 20; r++)
            net_gemm_cblas.sgemm(NULL, shapes[s].ta, shapes[s].tb, m, n, k, 1,
                                 a, lda, bm, ldb, 0, c, n);
        printf("sgemm %-14s cblas %.3f ms", shapes[s].what,
               (now_ms() - t) / 20);
        for (b = 0; b < nbe; b++) {
            if (kern_blas_open(bes[b], 0, &bl, &d) != 0) {
                printf("  %s: %s", bes[b]->name, d.msg);
                continue;
            }
            kern_blas_sgemm(bl, shapes[s].ta, shapes[s].tb, m, n, k, 1, a, lda,
                            bm, ldb, 0, c, n, &d); /* warm */
            t = now_ms();
            for (r = 0; r < 20; r++)
                kern_blas_sgemm(bl, shapes[s].ta, shapes[s].tb, m, n, k, 1, a,
                                lda, bm, ldb, 0, c, n, &d);
            printf("  %s %.3f ms", bes[b]->name, (now_ms() - t) / 20);
            kern_blas_close(bl);
        }
        printf("\n");
    }
    free(a);
    free(bm);
    free(c);
}

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "all";
    const struct kern_backend *bes[2];
    struct table *tables;
    struct sd_diag d;
    int nbe = 0;

    if (strcmp(which, "cpu") == 0 || strcmp(which, "all") == 0)
        bes[nbe++] = &kern_backend_cpu;
    if (strcmp(which, "cuda") == 0 || strcmp(which, "all") == 0) {
        bes[nbe] = kern_backend_get("cuda", &d);
        if (bes[nbe] != NULL)
            nbe++;
        else
            printf("cuda: %s\n", d.msg);
    }
    tables = malloc((size_t)MAX_SHARDS * TABLES_PER_SHARD * sizeof(*tables));
    if (tables == NULL)
        return 1;
    tables_init(tables, (size_t)MAX_SHARDS * TABLES_PER_SHARD, 1);
    bench_scores(bes, nbe, tables);
    bench_sgemm(bes, nbe);
    free(tables);
    return 0;
}
