/*
 * The cache flush before each timed step of the cpu backend
 * (backend_cpu_int.h): a step starts with the shard's data in no cache
 * and its pages in no TLB, as a training step finds them after the rest
 * of the model ran.
 *
 * On x86 it evicts what the step touches, line by line (CLFLUSHOPT where
 * the CPU has it, else CLFLUSH): the rows the tables' lookups read, each
 * widened to the aligned pair of lines the adjacent-line prefetcher
 * fetches together, the lookups themselves and the pooled output and
 * gradient; then it reads one line of each page of a sweep region, so the
 * shard's pages leave the TLB.  The sweep region is mapped, never
 * written: every page maps the kernel's zero page, so it costs 256 KiB of
 * page tables and no memory, and its reads hit the cache (a millisecond
 * of page walks).  The cost of a flush is that of the lines the step
 * touches, whatever the size of the last-level cache.
 *
 * Elsewhere it read-modify-writes the device's buffer of twice the LLC
 * (arena_cpu.c), which needs the LLC's size and a buffer that big.
 *
 * Measured on the Intel Xeon VM (260 MiB L3; docs/models.md, "Eviction,
 * not a buffer"), the same 60 shards three times each: two runs differ by
 * 3.3 to 4.5 % (the 128 MiB buffer the flush was: 8.1 to 9.1 %; one of
 * 520 MiB: 2.6 to 3.5 %), and 60 samples take 31-34 s (50 s; 100 s).
 * Samples read 6 % lower than with the 520 MiB buffer (geomean): its
 * dirty lines are written back during the step, which evicted lines are
 * not.
 */
#define _GNU_SOURCE

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backend_cpu_int.h"

#if defined(__x86_64__) || defined(__i386__)
#    include <cpuid.h>
#    include <immintrin.h>
#    define CPU_EVICT 1
#else
#    define CPU_EVICT 0
#endif /* __x86_64__ || __i386__ */

/* Pages the TLB sweep reads one line of (128 MiB of addresses): eight
 * times the largest second-level TLB of today's cores (Zen 5's 4,096
 * entries), as replacement is not strictly least-recently-used. */
#define CPU_SWEEP_PAGES 32768
#define CPU_PAGE        4096

/* What a device's timing keeps for the flush (kern_cpu__flush_open()). */
struct cpu_flush {
    /* x86: per table, a bit per row its lookups read. */
    uint64_t **rows;
    size_t ntables;
    int32_t device;
    bool buffer; /* elsewhere: the device's flush buffer is held */
};

#if CPU_EVICT
static struct {
    pthread_once_t once;
    bool opt; /* the CPU has CLFLUSHOPT */
    const volatile unsigned char *sweep;
} evict = {.once = PTHREAD_ONCE_INIT};

static void evict_probe(void)
{
    unsigned int a, b, c, d;
    void *m;

    evict.opt = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_CLFLUSHOPT);
    m = mmap(NULL, (size_t)CPU_SWEEP_PAGES * CPU_PAGE, PROT_READ,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return; /* the lines are still evicted; the TLB keeps the pages */
    /* One zero page a page: a huge zero page would take one TLB entry. */
    madvise(m, (size_t)CPU_SWEEP_PAGES * CPU_PAGE, MADV_NOHUGEPAGE);
    evict.sweep = m;
}

__attribute__((target("clflushopt"))) static void lines_out_opt(const char *p,
                                                                const char *end)
{
    for (; p < end; p += CPU_ALIGN)
        _mm_clflushopt((void *)p);
}

static void lines_out(const char *p, const char *end)
{
    for (; p < end; p += CPU_ALIGN)
        _mm_clflush(p);
}

/* Evicts the n bytes at p, widened to `align` (a power of two, at least a
 * line) at both ends. */
static void range_out(const void *p, uint64_t n, uintptr_t align)
{
    uintptr_t a = (uintptr_t)p;
    const char *b, *e;

    if (p == NULL || n == 0)
        return;
    b = (const char *)(a & ~(align - 1));
    e = (const char *)((a + (uintptr_t)n + align - 1) & ~(align - 1));
    if (evict.opt)
        lines_out_opt(b, e);
    else
        lines_out(b, e);
}

/* Reads a line of every page of the sweep region (a different line each
 * page, so the reads spread over the cache's sets). */
static void tlb_sweep(void)
{
    const volatile unsigned char *p = evict.sweep;
    unsigned int acc = 0;
    size_t i;

    if (p == NULL)
        return;
    for (i = 0; i < CPU_SWEEP_PAGES; i++)
        acc += p[i * CPU_PAGE + (i % (CPU_PAGE / CPU_ALIGN)) * CPU_ALIGN];
    (void)acc;
}
#endif /* CPU_EVICT */

void kern_cpu__flush_close(struct cpu_flush *f)
{
    size_t t;

    if (f == NULL)
        return;
    if (f->buffer)
        kern_cpu__flush_put(f->device);
    if (f->rows != NULL) {
        for (t = 0; t < f->ntables; t++)
            free(f->rows[t]);
        free(f->rows);
    }
    free(f);
}

#if CPU_EVICT
/* f->rows: a bitmap per table of s of the rows its lookups read.  0 or
 * SD_ENOMEM (what was made is f's, freed by kern_cpu__flush_close()). */
static int rows_read(struct cpu_flush *f, const struct cpu_shard *s)
{
    size_t t;
    int64_t i, row;

    f->rows = calloc(s->ntables > 0 ? s->ntables : 1, sizeof(*f->rows));
    if (f->rows == NULL)
        return SD_ENOMEM;
    f->ntables = s->ntables;
    for (t = 0; t < s->ntables; t++) {
        const struct cpu_table *tb = &s->tables[t];

        f->rows[t] = calloc((size_t)(tb->rows + 63) / 64 + 1, sizeof(uint64_t));
        if (f->rows[t] == NULL)
            return SD_ENOMEM;
        for (i = 0; i < tb->nindices; i++) {
            row = tb->indices[i];
            f->rows[t][row / 64] |= UINT64_C(1) << (row % 64);
        }
    }
    return 0;
}
#endif /* CPU_EVICT */

int kern_cpu__flush_open(const struct cpu_shard *s, uint64_t buffer_bytes,
                         struct cpu_flush **out)
{
    struct cpu_flush *f = calloc(1, sizeof(*f));

    *out = NULL;
    if (f == NULL)
        return SD_ENOMEM;
    f->device = s->device;
#if CPU_EVICT
    (void)buffer_bytes; /* no buffer: the step's own lines are evicted */
    pthread_once(&evict.once, evict_probe);
    if (rows_read(f, s) != 0)
        goto fail_free;
#else
    if (kern_cpu__flush_get(s->device, buffer_bytes) != 0)
        goto fail_free;
    f->buffer = true;
#endif /* CPU_EVICT */
    *out = f;
    return 0;

fail_free:
    kern_cpu__flush_close(f);
    return SD_ENOMEM;
}

void kern_cpu__flush_run(const struct cpu_shard *s, const struct cpu_flush *f)
{
#if CPU_EVICT
    const uint64_t bags = (uint64_t)s->nbags,
                   out_bytes = bags * (uint64_t)s->width * 4;
    size_t t;
    int64_t w, row;
    uint64_t bits;

    for (t = 0; t < s->ntables; t++) {
        const struct cpu_table *tb = &s->tables[t];
        const char *base = (const char *)tb->w;

        for (w = 0; w <= tb->rows / 64; w++) {
            for (bits = f->rows[t][w]; bits != 0; bits &= bits - 1) {
                row = w * 64 + __builtin_ctzll(bits);
                range_out(base + row * tb->row_bytes, (uint64_t)tb->row_bytes,
                          2 * CPU_ALIGN);
            }
        }
        range_out(tb->offsets, (bags + 1) * sizeof(int64_t), CPU_ALIGN);
        range_out(tb->indices, (uint64_t)tb->nindices * sizeof(int64_t),
                  CPU_ALIGN);
    }
    range_out(s->pooled, out_bytes, CPU_ALIGN);
    range_out(s->grad, out_bytes, CPU_ALIGN);
    _mm_mfence(); /* CLFLUSHOPT is ordered by fences only */
    tlb_sweep();
#else
    (void)f;
    kern_cpu__flush_caches(s->device);
#endif /* CPU_EVICT */
}
