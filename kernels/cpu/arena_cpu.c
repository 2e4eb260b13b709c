/*
 * The cpu backend's memory per device (backend_cpu_int.h), kept for the
 * life of the process: the weight arena that profiling shards share
 * (kernels.h, reuse_weights) with its map of which dtypes have held each
 * CPU_ARENA_BLOCK bytes of it, the pass that makes an arena shard's rows
 * finite and normal in its dtype before it runs (kern_cpu__arena_sanitise()),
 * and the buffer the timing flushes the caches with.
 */
#define _GNU_SOURCE /* CPU_SETSIZE */

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cpu_int.h"
#include "shardd/le.h"

/* Bytes of the arena per entry of its writers map (cpu_devmem), so the map
 * is a 1,024th of the arena, and what the sanitiser rewrites at once
 * (kern_cpu__arena_sanitise()); the period of what it writes (arena_tile). */
#define CPU_ARENA_BLOCK 1024
#define CPU_ARENA_TILE  (16 * CPU_ARENA_BLOCK)

/*
 * Per device: the weight arena of profiling shards (kernels.h,
 * reuse_weights) and the cache-flush buffer, both made on first use and
 * kept so that repeated samples do not fault gigabytes in again, until
 * kern_cpu__arena_free() (the backend's release) gives them back.
 * Reachable from here until exit, by design.
 */
struct cpu_devmem {
    pthread_mutex_t mu;
    bool busy;            /* an arena shard is open */
    unsigned char *arena; /* arena_fill()'s words */
    uint64_t arena_bytes;
    /* Per CPU_ARENA_BLOCK bytes of the arena: bit 1 << dtype for each
     * dtype of an arena shard that has held the block since the arena was
     * filled (0: its words are the fill's).  Read and written by the
     * shard that holds the arena (busy), else under mu. */
    uint8_t *writers;
    uint64_t *flush;
    size_t flush_words;
    int flush_users; /* timings using flush now (mu) */
};
static struct cpu_devmem devmem[CPU_SETSIZE];

void kern_cpu__devmem_init(int n)
{
    int c;

    for (c = 0; c < n; c++)
        pthread_mutex_init(&devmem[c].mu, NULL);
}

/* Bytes table t takes in an arena: its weights, rounded up to a line. */
uint64_t kern_cpu__arena_span(const struct kern_table_desc *td)
{
    uint64_t n =
        (uint64_t)td->rows * (uint64_t)td->dim * kern_dtype_size(td->dtype);

    return (n + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
}

/*
 * Fills words first .. end - 1 of an arena: small values like fresh
 * weights, read as fp32, fp16 or bf16 by the tables of later shards,
 * wherever a table starts.  Word e is the high half of seeded value e (uniform
 * in [-0.01, 0.01)) twice, so every 16-bit half is a finite, normal (or zero)
 * value in both 16-bit formats: as bf16 it is the value truncated; as fp16 its
 * exponent field is the top five bits of the fp32's, 12 to 15 for
 * magnitudes from 2^-30 to 0.01, a normal fp16 of magnitude 2^-3 to 2.
 * Filled with plain fp32 values, the low halves would be arbitrary bits:
 * a NaN, an Inf or a subnormal one time in sixteen as fp16, an fp32
 * subnormal one time in 256 as bf16 (on which x86 arithmetic can take a
 * slow microcode path), and a timing must not depend on such values.  As
 * fp32 the words differ from the seeded values only in the low 16 mantissa
 * bits, which no timing depends on.
 */
static void arena_fill(float *arena, uint64_t first, uint64_t end)
{
    uint64_t key = kern__stream_key(1, 0), e;
    uint32_t hi;

    for (e = first; e < end; e++) {
        hi = sd_f32_bits(kern__value(key, e, KERN_WEIGHT_SCALE)) >> 16;
        arena[e] = sd_f32_of(hi << 16 | hi);
    }
}

/*
 * Takes device's arena for a shard, growing it to hold every table; a grown
 * arena is filled once (arena_fill()).  Returns 0, SD_EBUSY (another arena
 * shard is open) or SD_ENOMEM.
 */
int kern_cpu__arena_acquire(int32_t device, const struct kern_shard_desc *desc,
                            uint64_t core_mem, unsigned char **w)
{
    struct cpu_devmem *m = &devmem[device];
    uint64_t need = 0, cap = core_mem;
    size_t t;
    int rv = 0;

    if (desc->arena_max_bytes > 0 && (cap == 0 || desc->arena_max_bytes < cap))
        cap = desc->arena_max_bytes;
    for (t = 0; t < desc->ntables; t++)
        need += kern_cpu__arena_span(&desc->tables[t]);
    if (cap > 0 && need > cap)
        return SD_ENOMEM;
    pthread_mutex_lock(&m->mu);
    if (m->busy) {
        rv = SD_EBUSY;
    } else if (need > m->arena_bytes) {
        unsigned char *a;
        uint8_t *writers;

        /* Grow at least twofold so that a run of ever larger shards
         * refills the arena only a few times, within the cap. */
        if (need < 2 * m->arena_bytes &&
            (cap == 0 || 2 * m->arena_bytes <= cap))
            need = 2 * m->arena_bytes;
        a = kern_cpu__alloc_aligned(need);
        writers =
            calloc((size_t)((need + CPU_ARENA_BLOCK - 1) / CPU_ARENA_BLOCK), 1);
        if (a == NULL || writers == NULL) {
            free(a);
            free(writers);
            rv = SD_ENOMEM;
        } else {
            free(m->arena);
            free(m->writers);
            m->arena = a;
            m->writers = writers;
            m->arena_bytes = need;
            arena_fill((float *)(void *)a, 0, need / sizeof(float));
        }
    }
    if (rv == 0) {
        m->busy = true;
        *w = m->arena;
    }
    pthread_mutex_unlock(&m->mu);
    return rv;
}

void kern_cpu__arena_drop(int32_t device)
{
    pthread_mutex_lock(&devmem[device].mu);
    devmem[device].busy = false;
    pthread_mutex_unlock(&devmem[device].mu);
}

/*
 * The fill's words of an arena's first CPU_ARENA_TILE bytes, made once:
 * what the sanitiser writes (byte o of the arena gets the tile's byte o
 * modulo its size), a copy from the caches instead of the fill's hash per
 * word.
 */
static float arena_tile[CPU_ARENA_TILE / sizeof(float)];
static pthread_once_t arena_tile_once = PTHREAD_ONCE_INIT;

static void arena_tile_fill(void)
{
    arena_fill(arena_tile, 0, CPU_ARENA_TILE / sizeof(float));
}

/* Writes the tile's words over bytes [off, off + n) of m's arena: the
 * tile's bytes at off modulo its size, and on. */
static void arena_tile_copy(struct cpu_devmem *m, uint64_t off, uint64_t n)
{
    uint64_t at, k;

    while (n > 0) {
        at = off % CPU_ARENA_TILE;
        k = CPU_ARENA_TILE - at < n ? CPU_ARENA_TILE - at : n;
        memcpy(m->arena + off, (const unsigned char *)arena_tile + at,
               (size_t)k);
        off += k;
        n -= k;
    }
}

/* Whether a shard of dtype bit `own` may read bytes [off, off + n) of m's
 * arena as they are: no shard of another dtype has held them since the
 * fill. */
static bool arena_clean_for(const struct cpu_devmem *m, uint64_t off,
                            uint64_t n, unsigned own)
{
    uint64_t b, last = (off + n - 1) / CPU_ARENA_BLOCK;

    for (b = off / CPU_ARENA_BLOCK; b <= last; b++)
        if ((m->writers[b] & ~own) != 0)
            return false;
    return true;
}

/* The lookups of table tb read rows in blocks that a shard of another
 * dtype has held: rewrites those blocks whole, which then count as filled
 * (each is rewritten once however many lookups it has). */
static void sanitise_blocks(struct cpu_devmem *m, const struct cpu_table *tb,
                            uint64_t base, unsigned own)
{
    uint64_t off, b, last, n;
    int64_t i;

    for (i = 0; i < tb->nindices; i++) {
        off = base + (uint64_t)(tb->indices[i] * tb->row_bytes);
        last = (off + (uint64_t)tb->row_bytes - 1) / CPU_ARENA_BLOCK;
        for (b = off / CPU_ARENA_BLOCK; b <= last; b++) {
            if ((m->writers[b] & ~own) == 0)
                continue;
            n = m->arena_bytes - b * CPU_ARENA_BLOCK;
            arena_tile_copy(m, b * CPU_ARENA_BLOCK,
                            n < CPU_ARENA_BLOCK ? n : CPU_ARENA_BLOCK);
            m->writers[b] = 0;
        }
    }
}

/* The same, for lookups sparse in a large table: rewrites only the rows
 * (a row once per lookup), and the blocks keep their writers. */
static void sanitise_rows(struct cpu_devmem *m, const struct cpu_table *tb,
                          uint64_t base, unsigned own)
{
    uint64_t off, n = (uint64_t)tb->row_bytes;
    int64_t i;

    for (i = 0; i < tb->nindices; i++) {
        if (i + CPU_PREFETCH < tb->nindices)
            kern_cpu__prefetch_row(tb, i + CPU_PREFETCH, 1);
        off = base + (uint64_t)(tb->indices[i] * tb->row_bytes);
        if (!arena_clean_for(m, off, n, own))
            arena_tile_copy(m, off, n);
    }
}

/*
 * Before an arena shard runs: every row it reads holds values that are
 * finite and normal (or zero) in its table's dtype, whatever shards of
 * other dtypes did to those bytes.  The fill (arena_fill()) is normal as
 * fp32, fp16 and bf16, but an SGD update rewrites a row in its own dtype
 * only: after an fp32 update the low halves are arbitrary bits (as fp16 a
 * NaN, Inf or subnormal one time in sixteen, as bf16 one in 128), after an
 * fp16 update the values near zero are fp16 subnormals (bf16 and fp32
 * subnormals when read as those).  The NaNs spread through the pooled sums
 * into every row they update, a subnormal can take x86's slow path, and
 * the fp16 and bf16 code branches on such values.  So the rows the
 * shard's lookups read, where a shard of another dtype has held their
 * block (CPU_ARENA_BLOCK bytes), get the fill's words again (the tile):
 * whole blocks, which then count as filled, where the lookups' bytes
 * cover the table's (a small or hot table); the rows alone where they are
 * sparse in a large table.  Then the shard's tables mark their blocks
 * with their dtypes.  Either way the pass writes no more than the smaller
 * of the table and one step's lookups, and nothing while shards keep to
 * one dtype.
 *
 * Why not DAZ/FTZ in the MXCSR around the timed steps instead: a set and
 * a restore cost about 12 ns per timing, well below this pass (figures in
 * docs/models.md, "Precisions"), but they only make subnormal inputs and
 * results zero: the NaNs and Infs that an fp32 update leaves in fp16 and
 * bf16 rows stay and spread, the bits are x86's alone, and the timed
 * steps would compute other values than shard_step does.  Rewriting the
 * rows gives a timing the values a fresh arena has.
 */
void kern_cpu__arena_sanitise(struct cpu_shard *s)
{
    struct cpu_devmem *m = &devmem[s->device];
    const struct cpu_table *tb;
    uint64_t base, span, b, last;
    size_t t;

    pthread_once(&arena_tile_once, arena_tile_fill);
    for (t = 0; t < s->ntables; t++) {
        tb = &s->tables[t];
        base = (uint64_t)((const unsigned char *)tb->w - m->arena);
        span = (uint64_t)(tb->rows * tb->row_bytes);
        if ((uint64_t)tb->nindices * (uint64_t)tb->row_bytes >= span)
            sanitise_blocks(m, tb, base, 1u << tb->dtype);
        else
            sanitise_rows(m, tb, base, 1u << tb->dtype);
    }
    /* Marked after every table is checked, so that two tables of this
     * shard that share a block do not make each other rewrite it. */
    for (t = 0; t < s->ntables; t++) {
        tb = &s->tables[t];
        base = (uint64_t)((const unsigned char *)tb->w - m->arena);
        last =
            (base + (uint64_t)(tb->rows * tb->row_bytes) - 1) / CPU_ARENA_BLOCK;
        for (b = base / CPU_ARENA_BLOCK; b <= last; b++)
            m->writers[b] |= (uint8_t)(1u << tb->dtype);
    }
}

void kern_cpu__arena_free(int32_t device)
{
    struct cpu_devmem *m = &devmem[device];

    pthread_mutex_lock(&m->mu);
    if (!m->busy) {
        free(m->arena);
        free(m->writers);
        m->arena = NULL;
        m->writers = NULL;
        m->arena_bytes = 0;
    }
    if (m->flush_users == 0) {
        free(m->flush);
        m->flush = NULL;
        m->flush_words = 0;
    }
    pthread_mutex_unlock(&m->mu);
}

uint64_t kern_cpu__kept_bytes(int32_t device)
{
    struct cpu_devmem *m = &devmem[device];
    uint64_t n;

    pthread_mutex_lock(&m->mu);
    n = m->arena_bytes + m->flush_words * sizeof(uint64_t);
    pthread_mutex_unlock(&m->mu);
    return n;
}

/*
 * Evicts a shard's data from every cache level: read-modify-writes a
 * buffer twice the LLC.  A plain memset would not do: glibc writes big
 * blocks with non-temporal stores, which bypass the caches.
 */
void kern_cpu__flush_caches(int32_t device)
{
    uint64_t *restrict p = devmem[device].flush;
    size_t i, n = devmem[device].flush_words;

    for (i = 0; i < n; i++)
        p[i] += 1;
}

/* Makes the device's flush buffer on first use and counts a timing in;
 * 0 or SD_ENOMEM. */
int kern_cpu__flush_get(int32_t device, uint64_t bytes)
{
    struct cpu_devmem *m = &devmem[device];
    int rv = 0;

    pthread_mutex_lock(&m->mu);
    if (m->flush == NULL) {
        m->flush = kern_cpu__alloc_aligned(bytes);
        if (m->flush == NULL) {
            rv = SD_ENOMEM;
        } else {
            m->flush_words = (size_t)(bytes / sizeof(uint64_t));
            memset(m->flush, 0, m->flush_words * sizeof(uint64_t));
        }
    }
    if (rv == 0)
        m->flush_users++;
    pthread_mutex_unlock(&m->mu);
    return rv;
}

void kern_cpu__flush_put(int32_t device)
{
    struct cpu_devmem *m = &devmem[device];

    pthread_mutex_lock(&m->mu);
    m->flush_users--;
    pthread_mutex_unlock(&m->mu);
}
