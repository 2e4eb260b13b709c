/*
 * The cuda backend's memory tiers (kernels.h, enum kern_tier): the host
 * side of a shard's tables off HBM.  Built only with the cuda backend; it
 * has been compiled, never run (docs/gpu.md: the first session with a GPU
 * runs it through scripts/gpu-check.sh).
 *
 * Host memory is pinned and mapped (cudaHostAlloc with
 * cudaHostAllocMapped, the device's address from
 * cudaHostGetDevicePointer): every access of the device goes over the
 * link, a row at a time, and nothing migrates.  TorchRec's UVM (FBGEMM's
 * fused_uvm) allocates managed memory instead (cudaMallocManaged, advised
 * to live on the CPU and to be accessed by the device), where the driver
 * may still migrate or fault pages depending on its heuristics and the
 * access pattern; mapped memory is the predictable one to time, and it is
 * what the planner's model assumes: each missed lookup reads its row over
 * the link (tier_shard_ms()).  All of a shard's tiered tables share one
 * allocation, back to back; a cache's rows are copies of host rows whose
 * updates stay in the cache (write-back), and shard_read_weights merges
 * them in.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "kern_internal.h"

/* A lookup that reads host memory: its table, row and bag. */
struct host_read {
    int64_t row;
    int64_t bag;
    int32_t table;
};

static int cmp_read(const void *a, const void *b)
{
    const struct host_read *x = a, *y = b;

    if (x->table != y->table)
        return x->table < y->table ? -1 : 1;
    if (x->row != y->row)
        return x->row < y->row ? -1 : 1;
    return (x->bag > y->bag) - (x->bag < y->bag);
}

bool kern_cuda__tiered(const struct kern_shard_desc *desc)
{
    size_t t;

    for (t = 0; t < desc->ntables; t++)
        if (desc->tables[t].tier != KERN_TIER_HBM)
            return true;
    return false;
}

void kern_cuda__tiers_close(struct kern_cuda_tiers *tr)
{
    size_t t;

    if (tr->host != NULL)
        (void)cudaFreeHost(tr->host);
    (void)cudaFree((void *)tr->rows.seg);
    (void)cudaFree((void *)tr->rows.row);
    (void)cudaFree((void *)tr->rows.table);
    (void)cudaFree((void *)tr->rows.bag);
    for (t = 0; tr->cached != NULL && t < tr->ntables; t++)
        free(tr->cached[t]);
    free(tr->cached);
    free(tr->ncached);
    free(tr->h_off);
    memset(tr, 0, sizeof(*tr));
}

/* Pins and maps the host memory of every tiered table and gives each its
 * offset and its device address in tables[] (the host copy). */
static int host_alloc(struct kern_cuda_tiers *tr,
                      const struct kern_shard_desc *desc,
                      struct kern_cuda_table *tables, struct sd_diag *d)
{
    uint64_t nw = 0;
    void *dev = NULL;
    size_t t;
    int rv;

    for (t = 0; t < desc->ntables; t++) {
        tr->h_off[t] = (int64_t)nw;
        if (desc->tables[t].tier != KERN_TIER_HBM)
            nw +=
                (uint64_t)desc->tables[t].rows * (uint64_t)desc->tables[t].dim;
    }
    if (nw * sizeof(float) > SIZE_MAX)
        return sd_diag_set(d, SD_ENOMEM, "cuda: %llu bytes of host memory",
                           (unsigned long long)(nw * sizeof(float)));
    rv = KERN_CUDA_STATUS(d, cudaHostAlloc((void **)&tr->host,
                                           (size_t)nw * sizeof(float),
                                           cudaHostAllocMapped));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(d, cudaHostGetDevicePointer(&dev, tr->host, 0));
    if (rv != 0)
        return rv;
    tr->host_dev = dev;
    for (t = 0; t < desc->ntables; t++)
        tables[t].host = desc->tables[t].tier != KERN_TIER_HBM
                             ? tr->host_dev + tr->h_off[t]
                             : NULL;
    return 0;
}

/*
 * Table t's lookup locations (cuda_internal.h: a cache slot, or -(row + 1)
 * for host memory) into loc, its cache's rows into tr->cached[t], and its
 * host reads appended to *reads (*nreads of them, *cap allocated).
 * Returns 0 or SD_ENOMEM.
 */
static int locate(struct kern_cuda_tiers *tr, const struct kern_table_desc *td,
                  size_t t, int64_t nbags, int64_t *loc,
                  struct host_read **reads, size_t *nreads, size_t *cap)
{
    struct host_read *grown;
    int64_t b, i;
    int rv = 0;

    if (td->tier == KERN_TIER_UVM_CACHING) {
        tr->ncached[t] = td->cache_rows;
        tr->cached[t] =
            malloc((size_t)(td->cache_rows > 0 ? td->cache_rows : 1) *
                   sizeof(int64_t));
        if (tr->cached[t] == NULL)
            return SD_ENOMEM;
        rv = kern_cache_layout(td, tr->cached[t], loc, NULL);
    } else {
        for (i = 0; i < td->nindices; i++)
            loc[i] = -1;
    }
    if (rv != 0)
        return rv;
    if (*nreads + (size_t)td->nindices > *cap) {
        grown = realloc(*reads,
                        (*nreads + (size_t)td->nindices) * 2 * sizeof(**reads));
        if (grown == NULL)
            return SD_ENOMEM;
        *reads = grown;
        *cap = (*nreads + (size_t)td->nindices) * 2;
    }
    for (b = 0; b < nbags; b++) {
        for (i = td->offsets[b]; i < td->offsets[b + 1]; i++) {
            if (loc[i] >= 0)
                continue;
            loc[i] = -(td->indices[i] + 1);
            (*reads)[(*nreads)++] =
                (struct host_read){td->indices[i], b, (int32_t)t};
        }
    }
    return 0;
}

/* Fills table t's host rows with their seeded initial values, and its
 * cache's slots with those of the rows they hold (on the device: the host
 * rows through the mapping). */
static int fill_table(struct kern_cuda_tiers *tr,
                      const struct kern_shard_desc *desc, size_t t,
                      const struct kern_cuda_table *tb, float *weights,
                      cudaStream_t stream, struct sd_diag *d)
{
    const struct kern_table_desc *td = &desc->tables[t];
    uint64_t key = kern__stream_key(desc->seed, t);
    int64_t *rows = NULL;
    int rv;

    rv = KERN_CUDA_STATUS(
        d, kern_cuda_fill(tb->host, (uint64_t)td->rows * (uint64_t)td->dim, key,
                          KERN_WEIGHT_SCALE, stream));
    if (rv != 0 || tr->ncached[t] == 0)
        return rv;
    rv = KERN_CUDA_STATUS(d, cudaMalloc((void **)&rows, (size_t)tr->ncached[t] *
                                                            sizeof(int64_t)));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(
            d, cudaMemcpyAsync(rows, tr->cached[t],
                               (size_t)tr->ncached[t] * sizeof(int64_t),
                               cudaMemcpyHostToDevice, stream));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(
            d, kern_cuda_fill_rows(weights + tb->w_off, rows,
                                   (uint64_t)tr->ncached[t], td->dim, key,
                                   KERN_WEIGHT_SCALE, stream));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(d, cudaStreamSynchronize(stream));
    (void)cudaFree(rows);
    return rv;
}

/* cudaMalloc of `bytes` (at least one) and a copy of src into it. */
static int upload(void **dst, const void *src, size_t bytes,
                  cudaStream_t stream, struct sd_diag *d)
{
    int rv = KERN_CUDA_STATUS(d, cudaMalloc(dst, bytes > 0 ? bytes : 1));

    if (rv == 0 && bytes > 0)
        rv = KERN_CUDA_STATUS(
            d,
            cudaMemcpyAsync(*dst, src, bytes, cudaMemcpyHostToDevice, stream));
    return rv;
}

/* Groups the host reads by (table, row) into tr->rows, on the device. */
static int host_rows_upload(struct kern_cuda_tiers *tr, struct host_read *reads,
                            size_t n, cudaStream_t stream, struct sd_diag *d)
{
    int64_t *seg, *row, *bag;
    int32_t *table;
    size_t i, u = 0;
    int rv = SD_ENOMEM;

    qsort(reads, n, sizeof(*reads), cmp_read);
    seg = malloc((n + 1) * sizeof(*seg));
    row = malloc((n ? n : 1) * sizeof(*row));
    table = malloc((n ? n : 1) * sizeof(*table));
    bag = malloc((n ? n : 1) * sizeof(*bag));
    if (seg == NULL || row == NULL || table == NULL || bag == NULL) {
        sd_diag_set(d, rv, "cuda: out of host memory");
        goto out_free;
    }
    for (i = 0; i < n; i++) {
        if (i == 0 || reads[i - 1].row != reads[i].row ||
            reads[i - 1].table != reads[i].table) {
            seg[u] = (int64_t)i;
            row[u] = reads[i].row;
            table[u] = reads[i].table;
            u++;
        }
        bag[i] = reads[i].bag;
    }
    seg[u] = (int64_t)n;
    rv = upload((void **)&tr->rows.seg, seg, (u + 1) * sizeof(*seg), stream, d);
    if (rv == 0)
        rv = upload((void **)&tr->rows.row, row, u * sizeof(*row), stream, d);
    if (rv == 0)
        rv = upload((void **)&tr->rows.table, table, u * sizeof(*table), stream,
                    d);
    if (rv == 0)
        rv = upload((void **)&tr->rows.bag, bag, n * sizeof(*bag), stream, d);
    if (rv == 0)
        rv = KERN_CUDA_STATUS(d, cudaStreamSynchronize(stream));
    if (rv == 0)
        tr->rows.nrows = (int64_t)u;
out_free:
    free(seg);
    free(row);
    free(table);
    free(bag);
    return rv;
}

int kern_cuda__tiers_open(struct kern_cuda_tiers *tr,
                          const struct kern_shard_desc *desc,
                          struct kern_cuda_table *tables, float *weights,
                          int64_t *indices, cudaStream_t stream,
                          struct sd_diag *d)
{
    const struct kern_table_desc *td;
    struct host_read *reads = NULL;
    size_t t, nreads = 0, cap = 0;
    int64_t *loc = NULL, base = 0;
    int rv = SD_ENOMEM;

    memset(tr, 0, sizeof(*tr));
    tr->ntables = desc->ntables;
    tr->h_off = calloc(desc->ntables, sizeof(*tr->h_off));
    tr->cached = calloc(desc->ntables, sizeof(*tr->cached));
    tr->ncached = calloc(desc->ntables, sizeof(*tr->ncached));
    if (tr->h_off == NULL || tr->cached == NULL || tr->ncached == NULL)
        return sd_diag_set(d, rv, "cuda: out of host memory");
    rv = host_alloc(tr, desc, tables, d);
    for (t = 0; rv == 0 && t < desc->ntables; t++) {
        td = &desc->tables[t];
        base += td->nindices;
        if (td->tier == KERN_TIER_HBM)
            continue;
        loc = malloc((size_t)(td->nindices > 0 ? td->nindices : 1) *
                     sizeof(*loc));
        rv = loc == NULL
                 ? SD_ENOMEM
                 : locate(tr, td, t, desc->nbags, loc, &reads, &nreads, &cap);
        if (rv != 0) {
            sd_diag_set(d, rv, "cuda: out of host memory");
        } else {
            if (td->nindices > 0)
                rv = KERN_CUDA_STATUS(
                    d, cudaMemcpyAsync(indices + base - td->nindices, loc,
                                       (size_t)td->nindices * sizeof(*loc),
                                       cudaMemcpyHostToDevice, stream));
            if (rv == 0)
                rv = fill_table(tr, desc, t, &tables[t], weights, stream, d);
            if (rv == 0) /* loc is borrowed by the copy until here */
                rv = KERN_CUDA_STATUS(d, cudaStreamSynchronize(stream));
        }
        free(loc);
        loc = NULL;
    }
    if (rv == 0)
        rv = host_rows_upload(tr, reads, nreads, stream, d);
    free(reads);
    return rv;
}

int kern_cuda__tiers_read(const struct kern_cuda_tiers *tr, size_t t,
                          const struct kern_cuda_table *tb, int64_t rows,
                          const float *weights, float *out, cudaStream_t stream,
                          struct sd_diag *d)
{
    size_t n = (size_t)tr->ncached[t] * (size_t)tb->dim, s;
    float *cache;
    int rv;

    rv = KERN_CUDA_STATUS(d, cudaStreamSynchronize(stream));
    if (rv != 0)
        return rv;
    memcpy(out, tr->host + tr->h_off[t],
           (size_t)rows * (size_t)tb->dim * sizeof(float));
    if (n == 0)
        return 0;
    /* The cache's rows are newer than their host copies. */
    cache = malloc(n * sizeof(*cache));
    if (cache == NULL)
        return sd_diag_set(d, SD_ENOMEM, "cuda: out of host memory");
    rv = KERN_CUDA_STATUS(d, cudaMemcpyAsync(cache, weights + tb->w_off,
                                             n * sizeof(*cache),
                                             cudaMemcpyDeviceToHost, stream));
    if (rv == 0)
        rv = KERN_CUDA_STATUS(d, cudaStreamSynchronize(stream));
    for (s = 0; rv == 0 && s < (size_t)tr->ncached[t]; s++)
        memcpy(out + tr->cached[t][s] * tb->dim, cache + s * (size_t)tb->dim,
               (size_t)tb->dim * sizeof(float));
    free(cache);
    return rv;
}
