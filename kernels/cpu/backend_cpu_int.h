/*
 * What the files of the cpu backend's embedding bag share, and nothing
 * else sees: a shard and its tables as this backend holds them, and the
 * calls between the backend (backend_cpu.c: devices, shards, timing, the
 * ops table), its table kernels (tbe_cpu.c: weights in their dtype and
 * the forward and backward + SGD passes), its per-device memory
 * (arena_cpu.c: the weight arena and the cache-flush buffer) and the
 * flush before each timed step (flush_cpu.c), named kern_cpu__* (left out
 * in the comments below).  Included only by those four files.  Thread: a shard
 * and its tables are used by one thread at a time; of the per-device calls,
 * arena_sanitise and flush_caches work on what the calling shard holds (the
 * arena, a flush buffer made before), the others take the device's lock.
 */
#ifndef SHARDD_BACKEND_CPU_INT_H
#define SHARDD_BACKEND_CPU_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu_internal.h"

#define CPU_ALIGN 64 /* bytes: a cache line, and any SIMD width */

/* Lookups to prefetch ahead in a bag: rows of big tables miss the caches,
 * and the next rows' addresses are known, so their loads can overlap. */
#define CPU_PREFETCH 8

struct cpu_shard;

/* One table of a shard, as the cpu backend holds it. */
struct cpu_table {
    void *w;          /* rows x dim weights of dtype, CPU_ALIGN-aligned */
    bool w_owned;     /* false: w points into the device's arena */
    int64_t *offsets; /* nbags + 1 */
    int64_t *indices; /* nindices, in [0, rows) */
    int64_t rows;
    int64_t nindices;
    int64_t row_bytes; /* dim weights of dtype */
    int32_t dim;
    int32_t col; /* first column of this table in a pooled row */
    enum kern_dtype dtype;
    /* The table's forward and backward + SGD, for its dtype (set by
     * kern_cpu__table_open()): each pass over the tables calls one per
     * table, and each lookup's row kernel is inlined in it. */
    void (*forward)(const struct cpu_shard *s, const struct cpu_table *tb,
                    float *pooled);
    void (*backward)(const struct cpu_shard *s, const struct cpu_table *tb,
                     const float *grad);
};

/* What a struct kern_shard * points to on this backend. */
struct cpu_shard {
    struct cpu_table *tables;
    size_t ntables;
    int64_t nbags;
    int32_t width; /* columns of a pooled row: sum of dims */
    int32_t core;  /* CPU the timed steps run on */
    float lr;
    float *pooled; /* nbags x width: forward output while timing */
    float *grad;   /* nbags x width: fixed seeded timing gradient */
    int32_t device;
    bool arena; /* holds its device's arena */
    /* While timing: kern_timing_opts.abort, checked between tables so a
     * long step stops early (the sample is dropped); NULL otherwise. */
    const kern_flag *abort;
};

/* Prefetches every cache line of lookup i's row, for reading or writing.
 * Inline here: the table passes (tbe_cpu.c) call it for every lookup. */
static inline void kern_cpu__prefetch_row(const struct cpu_table *tb, int64_t i,
                                          int rw)
{
    const char *p = (const char *)tb->w + tb->indices[i] * tb->row_bytes;
    int64_t off;

    for (off = 0; off < tb->row_bytes; off += CPU_ALIGN) {
        if (rw)
            __builtin_prefetch(p + off, 1);
        else
            __builtin_prefetch(p + off, 0);
    }
}

/* backend_cpu.c.  n bytes aligned to CPU_ALIGN (aligned_alloc wants a
 * multiple of the alignment); never NULL for n == 0 unless out of memory.
 * The caller frees it with free(). */
void *kern_cpu__alloc_aligned(uint64_t n);

/*
 * tbe_cpu.c: a shard's tables.  table_open allocates and fills table t of
 * s from its description: its weights (seeded, each rounded to the dtype)
 * unless arena_w points at its place in the device's arena, its offsets
 * and indices, and its passes for its dtype and the CPU.  Returns 0 or
 * SD_ENOMEM; what it allocated is the table's either way, freed by
 * table_close (which leaves arena weights alone).  read_weights converts
 * the table's weights to fp32 into out (rows x dim).
 */
int kern_cpu__table_open(struct cpu_shard *s, size_t t,
                         const struct kern_table_desc *td, uint64_t seed,
                         unsigned char *arena_w);
void kern_cpu__table_close(struct cpu_table *tb);
void kern_cpu__table_read_weights(const struct cpu_table *tb, float *out);

/* tbe_cpu.c.  Fills n floats with stream `stream` of the seed
 * (kern_internal.h). */
void kern_cpu__fill_seeded(float *p, uint64_t n, uint64_t seed, uint64_t stream,
                           float scale);

/*
 * arena_cpu.c: per device, for the life of the process, the weight arena
 * of profiling shards (kernels.h, reuse_weights) and the cache-flush
 * buffer.  devmem_init readies devices 0 .. n - 1 (once, from the
 * backend's probe); the others take a device already checked.
 *
 * arena_span: the bytes a table takes in an arena.  arena_acquire takes
 * device's arena for a shard, of at most core_mem bytes (the device's
 * memory, 0 if unknown) or the shard's arena_max_bytes if lower, setting
 * *w to its first byte: 0, SD_EBUSY (another arena shard is open) or
 * SD_ENOMEM; arena_drop gives it back after a 0, and the arena stays.
 * arena_sanitise readies the rows an arena shard's lookups read (before it
 * runs).
 * arena_free frees the arena when no shard holds it; kept_bytes counts
 * what the device keeps (arena and flush buffer).
 *
 * flush_get makes the device's flush buffer of `bytes` on first use (0 or
 * SD_ENOMEM); flush_caches evicts every cache level through it.
 */
void kern_cpu__devmem_init(int n);
uint64_t kern_cpu__arena_span(const struct kern_table_desc *td);
int kern_cpu__arena_acquire(int32_t device, const struct kern_shard_desc *desc,
                            uint64_t core_mem, unsigned char **w);
void kern_cpu__arena_drop(int32_t device);
void kern_cpu__arena_sanitise(struct cpu_shard *s);
void kern_cpu__arena_free(int32_t device);
uint64_t kern_cpu__kept_bytes(int32_t device);
/* The flush buffer for one timing: kern_cpu__flush_get() makes it on first
 * use and counts the timing in, kern_cpu__flush_put() counts it out;
 * kern_cpu__arena_free() frees the buffer when no timing holds it. */
int kern_cpu__flush_get(int32_t device, uint64_t bytes);
void kern_cpu__flush_put(int32_t device);
void kern_cpu__flush_caches(int32_t device);

/*
 * flush_cpu.c: the cache flush before each timed step of shard s.  On x86
 * it evicts the lines the step touches and sweeps the TLB; elsewhere it
 * flushes through the device's buffer of buffer_bytes (flush_get above).
 * flush_open readies it for one timing (0 or SD_ENOMEM; *out is freed by
 * flush_close, which takes NULL), flush_run flushes (the shard and its
 * lookups unchanged since flush_open).
 */
struct cpu_flush;
int kern_cpu__flush_open(const struct cpu_shard *s, uint64_t buffer_bytes,
                         struct cpu_flush **out);
void kern_cpu__flush_run(const struct cpu_shard *s, const struct cpu_flush *f);
void kern_cpu__flush_close(struct cpu_flush *f);

#endif /* SHARDD_BACKEND_CPU_INT_H */
