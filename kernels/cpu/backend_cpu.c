/*
 * The cpu backend: the fused table-batched embedding bag (sum pooling,
 * backward, exact SGD) on one CPU core per device.  It is the reference the
 * cuda backend is tested against, and a device of its own for hosts without
 * a GPU.
 *
 * Weights are stored in each table's dtype (kernels.h): a forward converts
 * each row to fp32 as it adds it into the pooled sums, an SGD update reads
 * a row, updates it in fp32 and rounds it back (to nearest, ties to even).
 * fp16 goes through the CPU's F16C instructions where it has them (x86
 * since 2012; chosen once at run time), else through portable code; bf16
 * is the upper half of an fp32, so plain integer code.
 *
 * Device i is the i-th CPU of the process's affinity mask at the first
 * call (all online cores unless a cpuset restricts the process); its memory
 * is the machine's RAM divided by that count.  shard_time pins the calling
 * thread to the device's core for the timed steps and restores the
 * thread's affinity afterwards.
 */
#define _GNU_SOURCE /* pthread_setaffinity_np, CPU_SET, _SC_LEVEL3_... */

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu_internal.h"
#include "shardd/le.h"

/* x86: the F16C code is compiled for AVX and F16C whatever the build's
 * target, and runs only where the CPU has both (topo_probe). */
#if defined(__x86_64__) || defined(__i386__)
#    include <cpuid.h>
#    include <immintrin.h>
#    define CPU_X86  1
#    define CPU_F16C __attribute__((target("avx,f16c")))
#else
#    define CPU_X86 0
#endif /* __x86_64__ || __i386__ */

#define CPU_ALIGN 64 /* bytes: a cache line, and any SIMD width */

/* Seeded weights rounded per conversion call when filling a 16-bit table. */
#define CPU_CHUNK 1024

/* Flush buffer bounds (bytes): used when the LLC size is unknown, and the
 * most one shard allocates whatever the LLC claims. */
#define CPU_FLUSH_DEFAULT (UINT64_C(64) << 20)
#define CPU_FLUSH_MAX     (UINT64_C(1) << 30)

/* Bytes of the arena per entry of its writers map (cpu_devmem), so the map
 * is a 1,024th of the arena, and what the sanitiser rewrites at once
 * (arena_sanitise()); the period of what it writes (arena_tile). */
#define CPU_ARENA_BLOCK 1024
#define CPU_ARENA_TILE  (16 * CPU_ARENA_BLOCK)

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
    /* The table's forward and backward + SGD, for its dtype (table_open):
     * each pass over the tables calls one per table, and each lookup's row
     * kernel is inlined in it. */
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

/* Whether the timing was asked to stop (see cpu_shard.abort). */
static bool shard_aborted(const struct cpu_shard *s)
{
    return s->abort != NULL && atomic_load(s->abort) != 0;
}

/*
 * Per device, for the life of the process: the weight arena of profiling
 * shards (kernels.h, reuse_weights) and the cache-flush buffer, both made
 * on first use so that repeated samples do not fault gigabytes in again.
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
};
static struct cpu_devmem devmem[CPU_SETSIZE];

/* The devices, found once: CPU ids, RAM per core, flush size, F16C. */
static struct {
    pthread_once_t once;
    int ncores;
    int cores[CPU_SETSIZE];
    uint64_t mem_per_core;
    uint64_t flush_bytes;
    bool f16c;     /* the CPU has F16C and AVX (and the OS saves AVX state) */
    bool use_f16c; /* fp16 tables opened now use it (kern_cpu_use_f16c()) */
} topo = {.once = PTHREAD_ONCE_INIT};

static struct cpu_shard *to_cpu(struct kern_shard *s)
{
    return (struct cpu_shard *)s;
}

/*
 * Last-level cache size in bytes, or 0 when neither sysfs nor glibc knows
 * it.  sysfs first: it is what the kernel read from the CPU, while glibc's
 * sysconf() may report another figure under a hypervisor (seen: 320 MiB
 * for a 32 MiB L3, which made a 640 MiB flush buffer).
 */
static uint64_t llc_bytes(void)
{
    unsigned long long kib = 0;
    long v;
    FILE *f;

    f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    if (f != NULL) {
        if (fscanf(f, "%lluK", &kib) != 1)
            kib = 0;
        fclose(f);
        if (kib > 0)
            return (uint64_t)kib * 1024;
    }
    v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return v > 0 ? (uint64_t)v : 0;
}

/*
 * Whether the CPU has F16C and the OS saves the AVX registers its code
 * uses.  The "avx" of __builtin_cpu_supports() includes the OS check (in
 * libgcc and compiler-rt alike); F16C is CPUID leaf 1, ECX bit 29, asked
 * directly because clang 14, which the fuzz builds use, does not know
 * __builtin_cpu_supports("f16c").
 */
static bool cpu_has_f16c(void)
{
#if CPU_X86
    unsigned int eax, ebx, ecx, edx;

    return __builtin_cpu_supports("avx") &&
           __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
#else
    return false;
#endif /* CPU_X86 */
}

static void topo_probe(void)
{
    cpu_set_t set;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    long online;
    uint64_t llc;
    int c;

    topo.ncores = 0;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        for (c = 0; c < CPU_SETSIZE; c++) {
            if (CPU_ISSET(c, &set))
                topo.cores[topo.ncores++] = c;
        }
    }
    if (topo.ncores == 0) {
        online = sysconf(_SC_NPROCESSORS_ONLN);
        topo.ncores = online < 1 ? 1 : (int)online;
        if (topo.ncores > CPU_SETSIZE)
            topo.ncores = CPU_SETSIZE;
        for (c = 0; c < topo.ncores; c++)
            topo.cores[c] = c;
    }
    for (c = 0; c < topo.ncores; c++)
        pthread_mutex_init(&devmem[c].mu, NULL);
    if (pages > 0 && page > 0)
        topo.mem_per_core =
            (uint64_t)pages * (uint64_t)page / (uint64_t)topo.ncores;
    llc = llc_bytes();
    topo.flush_bytes = llc > 0 ? 2 * llc : CPU_FLUSH_DEFAULT;
    if (topo.flush_bytes > CPU_FLUSH_MAX)
        topo.flush_bytes = CPU_FLUSH_MAX;
    topo.f16c = cpu_has_f16c();
    topo.use_f16c = topo.f16c;
}

static int cpu_device_count(void)
{
    pthread_once(&topo.once, topo_probe);
    return topo.ncores;
}

/* The CPU model from /proc/cpuinfo ("model name"), or "unknown". */
static void cpu_model(char *buf, size_t cap)
{
    char line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");

    snprintf(buf, cap, "unknown");
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        char *colon = strchr(line, ':');

        if (strncmp(line, "model name", 10) != 0 || colon == NULL)
            continue;
        colon += strspn(colon + 1, " \t") + 1;
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(buf, cap, "%s", colon);
        break;
    }
    fclose(f);
}

static int cpu_device_info(int32_t device, struct kern_device_info *out)
{
    if (device < 0 || device >= cpu_device_count())
        return SD_EINVAL;
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "cpu core %d", topo.cores[device]);
    cpu_model(out->model, sizeof(out->model));
    out->mem_bytes = topo.mem_per_core;
    out->index = device;
    return 0;
}

/* n bytes aligned to CPU_ALIGN (aligned_alloc wants a multiple of the
 * alignment); never NULL for n == 0 unless out of memory. */
static void *alloc_aligned(uint64_t n)
{
    uint64_t sz = (n + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;

    if (sz == 0)
        sz = CPU_ALIGN;
    if (sz > SIZE_MAX)
        return NULL;
    return aligned_alloc(CPU_ALIGN, (size_t)sz);
}

/* ------------------------------------------------------------------------ */
/* fp16 and bf16 <-> fp32                                                    */

/* fp16 to fp32, exact: rebias the exponent (15 to 127), widen the mantissa
 * (10 to 23 bits); a subnormal is its mantissa times 2^-24. */
static inline float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (uint32_t)(h >> 10) & 0x1f, man = h & 0x3ffu;
    float sub;

    if (exp == 0x1f) /* Inf, or NaN made quiet as F16C does */
        return sd_f32_of(sign | 0x7f800000u | man << 13 |
                         (man != 0 ? 0x400000u : 0));
    if (exp != 0)
        return sd_f32_of(sign | (exp + 112) << 23 | man << 13);
    sub = (float)man * 0x1p-24f;
    return sign != 0 ? -sub : sub;
}

/*
 * fp32 to fp16, to nearest, ties to even, in integers (independent of the
 * FPU's rounding mode): at least 65520 (half-way past the largest fp16,
 * 65504) becomes Inf; a normal fp16 rounds the fp32 mantissa at bit 13
 * and rebiases, letting a carry step the exponent; below 2^-14 the result
 * is the subnormal count of 2^-24 units, rounded likewise.
 */
static inline uint16_t f32_to_f16(float f)
{
    uint32_t u = sd_f32_bits(f), abs = u & 0x7fffffffu;
    uint32_t sign = (u >> 16) & 0x8000, m, r, rem, half;
    int shift;

    if (abs > 0x7f800000u) /* NaN: quiet, the payload's top bits kept */
        return (uint16_t)(sign | 0x7e00 | (abs >> 13 & 0x3ff));
    if (abs >= 0x477ff000u)
        return (uint16_t)(sign | 0x7c00);
    if (abs >= 0x38800000u)
        return (uint16_t)(sign |
                          (abs + 0xfff + (abs >> 13 & 1) - 0x38000000u) >> 13);
    shift = 126 - (int)(abs >> 23); /* m >> shift counts 2^-24 units */
    if (shift > 24)
        return (uint16_t)sign; /* below 2^-25: rounds to zero */
    m = (abs & 0x7fffffu) | 0x800000u;
    r = m >> shift;
    rem = m & ((UINT32_C(1) << shift) - 1);
    half = UINT32_C(1) << (shift - 1);
    if (rem > half || (rem == half && (r & 1) != 0))
        r++;
    return (uint16_t)(sign | r);
}

static inline float bf16_to_f32(uint16_t h)
{
    return sd_f32_of((uint32_t)h << 16);
}

/* fp32 to bf16, to nearest, ties to even: add just under half a unit of
 * the kept bits, plus one when the kept part is odd, and truncate.  A NaN
 * is truncated with its quiet bit set, as its payload may lie only in the
 * dropped half (which would make it Inf). */
static inline uint16_t f32_to_bf16(float f)
{
    uint32_t u = sd_f32_bits(f);

    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)(u >> 16 | 0x40);
    return (uint16_t)((u + 0x7fff + (u >> 16 & 1)) >> 16);
}

#if CPU_X86
CPU_F16C static void f16_to_f32_f16c(float *out, const uint16_t *in, size_t n)
{
    size_t i;

    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                      (const __m128i *)(in + i))));
    for (; i < n; i++)
        out[i] = _cvtsh_ss(in[i]);
}

CPU_F16C static void f32_to_f16_f16c(uint16_t *out, const float *in, size_t n)
{
    size_t i;

    for (i = 0; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(out + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(in + i),
                                         _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        out[i] = _cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT);
}
#endif /* CPU_X86 */

bool kern_cpu_has_f16c(void)
{
    pthread_once(&topo.once, topo_probe);
    return topo.f16c;
}

bool kern_cpu_use_f16c(bool on)
{
    pthread_once(&topo.once, topo_probe);
    topo.use_f16c = on && topo.f16c;
    return topo.use_f16c;
}

void kern_cpu_f16_to_f32(float *out, const uint16_t *in, size_t n, bool f16c)
{
    size_t i;

#if CPU_X86
    if (f16c && kern_cpu_has_f16c()) {
        f16_to_f32_f16c(out, in, n);
        return;
    }
#endif /* CPU_X86 */
    for (i = 0; i < n; i++)
        out[i] = f16_to_f32(in[i]);
}

void kern_cpu_f32_to_f16(uint16_t *out, const float *in, size_t n, bool f16c)
{
    size_t i;

#if CPU_X86
    if (f16c && kern_cpu_has_f16c()) {
        f32_to_f16_f16c(out, in, n);
        return;
    }
#endif /* CPU_X86 */
    for (i = 0; i < n; i++)
        out[i] = f32_to_f16(in[i]);
}

void kern_cpu_bf16_to_f32(float *out, const uint16_t *in, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        out[i] = bf16_to_f32(in[i]);
}

void kern_cpu_f32_to_bf16(uint16_t *out, const float *in, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        out[i] = f32_to_bf16(in[i]);
}

/* n weights of dtype at w, converted to fp32 into out. */
static void weights_to_f32(enum kern_dtype dtype, float *out, const void *w,
                           size_t n)
{
    if (dtype == KERN_DTYPE_FP16)
        kern_cpu_f16_to_f32(out, w, n, topo.use_f16c);
    else if (dtype == KERN_DTYPE_BF16)
        kern_cpu_bf16_to_f32(out, w, n);
    else
        memcpy(out, w, n * sizeof(float));
}

/* n fp32 values rounded to dtype into w. */
static void weights_from_f32(enum kern_dtype dtype, void *w, const float *in,
                             size_t n)
{
    if (dtype == KERN_DTYPE_FP16)
        kern_cpu_f32_to_f16(w, in, n, topo.use_f16c);
    else if (dtype == KERN_DTYPE_BF16)
        kern_cpu_f32_to_bf16(w, in, n);
    else
        memcpy(w, in, n * sizeof(float));
}

/* ------------------------------------------------------------------------ */
/* The table passes                                                          */

/*
 * The row kernels, one per storage type: out += row (forward) and row -=
 * lr * g (one lookup's share of the SGD update), in fp32.  The loops run
 * over a row's columns four at a time: dims are multiples of 4, so the
 * unrolled body covers every column, and with restrict pointers gcc turns
 * each body into 128-bit vector operations (SLP vectorization, on at -O2)
 * without a scalar remainder loop.  The F16C kernels use the same width,
 * so fp16 and fp32 differ in the bytes they move and the conversions, not
 * in the vector width.
 */
static void row_add(float *restrict out, const float *restrict row, int32_t dim)
{
    int32_t c;

    for (c = 0; c < dim; c += 4) {
        out[c] += row[c];
        out[c + 1] += row[c + 1];
        out[c + 2] += row[c + 2];
        out[c + 3] += row[c + 3];
    }
}

static void row_sgd(float *restrict row, const float *restrict g, float lr,
                    int32_t dim)
{
    int32_t c;

    for (c = 0; c < dim; c += 4) {
        row[c] -= lr * g[c];
        row[c + 1] -= lr * g[c + 1];
        row[c + 2] -= lr * g[c + 2];
        row[c + 3] -= lr * g[c + 3];
    }
}

/* fp16 without F16C: the portable conversions, per weight. */
static void row_add_f16(float *restrict out, const uint16_t *restrict row,
                        int32_t dim)
{
    int32_t c;

    for (c = 0; c < dim; c += 4) {
        out[c] += f16_to_f32(row[c]);
        out[c + 1] += f16_to_f32(row[c + 1]);
        out[c + 2] += f16_to_f32(row[c + 2]);
        out[c + 3] += f16_to_f32(row[c + 3]);
    }
}

static void row_sgd_f16(uint16_t *restrict row, const float *restrict g,
                        float lr, int32_t dim)
{
    int32_t c;

    for (c = 0; c < dim; c += 4) {
        row[c] = f32_to_f16(f16_to_f32(row[c]) - lr * g[c]);
        row[c + 1] = f32_to_f16(f16_to_f32(row[c + 1]) - lr * g[c + 1]);
        row[c + 2] = f32_to_f16(f16_to_f32(row[c + 2]) - lr * g[c + 2]);
        row[c + 3] = f32_to_f16(f16_to_f32(row[c + 3]) - lr * g[c + 3]);
    }
}

static void row_add_bf16(float *restrict out, const uint16_t *restrict row,
                         int32_t dim)
{
    int32_t c;

    for (c = 0; c < dim; c += 4) {
        out[c] += bf16_to_f32(row[c]);
        out[c + 1] += bf16_to_f32(row[c + 1]);
        out[c + 2] += bf16_to_f32(row[c + 2]);
        out[c + 3] += bf16_to_f32(row[c + 3]);
    }
}

static void row_sgd_bf16(uint16_t *restrict row, const float *restrict g,
                         float lr, int32_t dim)
{
    int32_t c;

    for (c = 0; c < dim; c += 4) {
        row[c] = f32_to_bf16(bf16_to_f32(row[c]) - lr * g[c]);
        row[c + 1] = f32_to_bf16(bf16_to_f32(row[c + 1]) - lr * g[c + 1]);
        row[c + 2] = f32_to_bf16(bf16_to_f32(row[c + 2]) - lr * g[c + 2]);
        row[c + 3] = f32_to_bf16(bf16_to_f32(row[c + 3]) - lr * g[c + 3]);
    }
}

#if CPU_X86
/* fp16 with F16C: four weights widened (vcvtph2ps) or rounded to nearest
 * even (vcvtps2ph, whatever the MXCSR says) per instruction. */
CPU_F16C static void row_add_f16c(float *restrict out,
                                  const uint16_t *restrict row, int32_t dim)
{
    __m128 w;
    int32_t c;

    for (c = 0; c < dim; c += 4) {
        w = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(row + c)));
        _mm_storeu_ps(out + c, _mm_add_ps(_mm_loadu_ps(out + c), w));
    }
}

CPU_F16C static void row_sgd_f16c(uint16_t *restrict row,
                                  const float *restrict g, float lr,
                                  int32_t dim)
{
    __m128 w, vlr = _mm_set1_ps(lr);
    int32_t c;

    for (c = 0; c < dim; c += 4) {
        w = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(row + c)));
        w = _mm_sub_ps(w, _mm_mul_ps(vlr, _mm_loadu_ps(g + c)));
        _mm_storel_epi64((__m128i *)(row + c),
                         _mm_cvtps_ph(w, _MM_FROUND_TO_NEAREST_INT));
    }
}
#endif /* CPU_X86 */

/* Which row kernels a table pass inlines. */
enum row_kind {
    ROW_F32,
    ROW_F16,
    ROW_BF16,
#if CPU_X86
    ROW_F16C,
#endif /* CPU_X86 */
};

/* Prefetches every cache line of lookup i's row, for reading or writing. */
static void prefetch_row(const struct cpu_table *tb, int64_t i, int rw)
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

/*
 * The table passes below are written once, for every row kind, and
 * always inlined into one function per kind (forward_f32() ...): with k a
 * constant there, the switch folds away and the row kernel is inlined into
 * the lookup loop, as it was before tables had dtypes; a call through a
 * pointer per lookup would cost the small, cache-resident tables a good
 * part of their time.  The F16C functions are compiled for AVX and F16C,
 * so their row kernels inline too.
 */
#define CPU_INLINE static inline __attribute__((always_inline))

/* Sum pooling of table tb: pooled[b][col .. col + dim) = sum of the bag's
 * rows, each bag's rows added in index order. */
CPU_INLINE void forward_rows(const struct cpu_shard *s,
                             const struct cpu_table *tb, float *pooled,
                             enum row_kind k)
{
    const unsigned char *w = tb->w;
    const void *row;
    int64_t b, i, end;
    float *out;

    for (b = 0; b < s->nbags; b++) {
        out = pooled + b * s->width + tb->col;
        memset(out, 0, (size_t)tb->dim * sizeof(float));
        end = tb->offsets[b + 1];
        for (i = tb->offsets[b]; i < end; i++) {
            if (i + CPU_PREFETCH < tb->nindices)
                prefetch_row(tb, i + CPU_PREFETCH, 0);
            row = w + tb->indices[i] * tb->row_bytes;
            switch (k) {
            case ROW_F32:
                row_add(out, row, tb->dim);
                break;
            case ROW_F16:
                row_add_f16(out, row, tb->dim);
                break;
            case ROW_BF16:
                row_add_bf16(out, row, tb->dim);
                break;
#if CPU_X86
            case ROW_F16C:
                row_add_f16c(out, row, tb->dim);
                break;
#endif /* CPU_X86 */
            }
        }
    }
}

/*
 * Backward and exact SGD of table tb in one pass: the gradient of a row is
 * the sum of the pooled-output gradients of the bags that read it, once per
 * read, so w[i] -= lr * sum_b g[b] over the lookups (b, i).  SGD is linear
 * in the gradient, so applying each lookup's term as it comes gives the
 * same update as summing per row first (up to rounding order; a 16-bit row
 * is rounded back after each lookup): duplicates, within a bag or across
 * bags, accumulate.  FBGEMM sorts the indices and reduces per row instead;
 * both are exact SGD.
 */
CPU_INLINE void backward_rows(const struct cpu_shard *s,
                              const struct cpu_table *tb, const float *grad,
                              enum row_kind k)
{
    unsigned char *w = tb->w;
    const float *g;
    void *row;
    int64_t b, i, end;

    for (b = 0; b < s->nbags; b++) {
        g = grad + b * s->width + tb->col;
        end = tb->offsets[b + 1];
        for (i = tb->offsets[b]; i < end; i++) {
            if (i + CPU_PREFETCH < tb->nindices)
                prefetch_row(tb, i + CPU_PREFETCH, 1);
            row = w + tb->indices[i] * tb->row_bytes;
            switch (k) {
            case ROW_F32:
                row_sgd(row, g, s->lr, tb->dim);
                break;
            case ROW_F16:
                row_sgd_f16(row, g, s->lr, tb->dim);
                break;
            case ROW_BF16:
                row_sgd_bf16(row, g, s->lr, tb->dim);
                break;
#if CPU_X86
            case ROW_F16C:
                row_sgd_f16c(row, g, s->lr, tb->dim);
                break;
#endif /* CPU_X86 */
            }
        }
    }
}

static void forward_f32(const struct cpu_shard *s, const struct cpu_table *tb,
                        float *pooled)
{
    forward_rows(s, tb, pooled, ROW_F32);
}

static void forward_f16(const struct cpu_shard *s, const struct cpu_table *tb,
                        float *pooled)
{
    forward_rows(s, tb, pooled, ROW_F16);
}

static void forward_bf16(const struct cpu_shard *s, const struct cpu_table *tb,
                         float *pooled)
{
    forward_rows(s, tb, pooled, ROW_BF16);
}

static void backward_f32(const struct cpu_shard *s, const struct cpu_table *tb,
                         const float *grad)
{
    backward_rows(s, tb, grad, ROW_F32);
}

static void backward_f16(const struct cpu_shard *s, const struct cpu_table *tb,
                         const float *grad)
{
    backward_rows(s, tb, grad, ROW_F16);
}

static void backward_bf16(const struct cpu_shard *s, const struct cpu_table *tb,
                          const float *grad)
{
    backward_rows(s, tb, grad, ROW_BF16);
}

#if CPU_X86
CPU_F16C static void forward_f16c(const struct cpu_shard *s,
                                  const struct cpu_table *tb, float *pooled)
{
    forward_rows(s, tb, pooled, ROW_F16C);
}

CPU_F16C static void backward_f16c(const struct cpu_shard *s,
                                   const struct cpu_table *tb,
                                   const float *grad)
{
    backward_rows(s, tb, grad, ROW_F16C);
}
#endif /* CPU_X86 */

/* ------------------------------------------------------------------------ */

static void cpu_shard_close(struct kern_shard *ks)
{
    struct cpu_shard *s = to_cpu(ks);
    size_t t;

    if (s == NULL)
        return;
    if (s->tables != NULL) {
        for (t = 0; t < s->ntables; t++) {
            if (s->tables[t].w_owned)
                free(s->tables[t].w);
            free(s->tables[t].offsets);
            free(s->tables[t].indices);
        }
    }
    free(s->tables);
    free(s->pooled);
    free(s->grad);
    if (s->arena) {
        pthread_mutex_lock(&devmem[s->device].mu);
        devmem[s->device].busy = false;
        pthread_mutex_unlock(&devmem[s->device].mu);
    }
    free(s);
}

/* Fills n floats with stream `stream` of the seed (kern_internal.h). */
static void fill_seeded(float *p, uint64_t n, uint64_t seed, uint64_t stream,
                        float scale)
{
    uint64_t key = kern__stream_key(seed, stream), e;

    for (e = 0; e < n; e++)
        p[e] = kern__value(key, e, scale);
}

/* Fills n weights of dtype with stream `stream` of the seed, each rounded
 * to the dtype. */
static void fill_weights(void *w, enum kern_dtype dtype, uint64_t n,
                         uint64_t seed, uint64_t stream)
{
    uint64_t key = kern__stream_key(seed, stream), e, j, m;
    size_t size = kern_dtype_size(dtype);
    float chunk[CPU_CHUNK];

    if (dtype == KERN_DTYPE_FP32) {
        fill_seeded(w, n, seed, stream, KERN_WEIGHT_SCALE);
        return;
    }
    for (e = 0; e < n; e += m) {
        m = n - e < CPU_CHUNK ? n - e : CPU_CHUNK;
        for (j = 0; j < m; j++)
            chunk[j] = kern__value(key, e + j, KERN_WEIGHT_SCALE);
        weights_from_f32(dtype, (unsigned char *)w + e * size, chunk,
                         (size_t)m);
    }
}

/* Sets tb's forward and backward for its dtype and the CPU. */
static void table_kernels(struct cpu_table *tb)
{
    switch (tb->dtype) {
    case KERN_DTYPE_FP16:
        tb->forward = forward_f16;
        tb->backward = backward_f16;
#if CPU_X86
        if (topo.use_f16c) {
            tb->forward = forward_f16c;
            tb->backward = backward_f16c;
        }
#endif /* CPU_X86 */
        break;
    case KERN_DTYPE_BF16:
        tb->forward = forward_bf16;
        tb->backward = backward_bf16;
        break;
    default:
        tb->forward = forward_f32;
        tb->backward = backward_f32;
        break;
    }
}

/* Allocates and fills table t of s from its description. */
static int table_open(struct cpu_shard *s, size_t t,
                      const struct kern_table_desc *td, uint64_t seed,
                      unsigned char *arena_w)
{
    struct cpu_table *tb = &s->tables[t];
    uint64_t nw = (uint64_t)td->rows * (uint64_t)td->dim;
    uint64_t noff = (uint64_t)s->nbags + 1;
    size_t size = kern_dtype_size(td->dtype);

    tb->rows = td->rows;
    tb->dim = td->dim;
    tb->dtype = td->dtype;
    tb->row_bytes = (int64_t)td->dim * (int64_t)size;
    tb->nindices = td->nindices;
    table_kernels(tb);
    tb->w_owned = arena_w == NULL;
    tb->w = arena_w ? (void *)arena_w : alloc_aligned(nw * size);
    tb->offsets = alloc_aligned(noff * sizeof(int64_t));
    tb->indices = alloc_aligned((uint64_t)td->nindices * sizeof(int64_t));
    if (tb->w == NULL || tb->offsets == NULL || tb->indices == NULL)
        return SD_ENOMEM;
    if (tb->w_owned)
        fill_weights(tb->w, tb->dtype, nw, seed, t);
    memcpy(tb->offsets, td->offsets, (size_t)noff * sizeof(int64_t));
    if (td->nindices > 0)
        memcpy(tb->indices, td->indices,
               (size_t)td->nindices * sizeof(int64_t));
    return 0;
}

/* Bytes table t takes in an arena: its weights, rounded up to a line. */
static uint64_t arena_span(const struct kern_table_desc *td)
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
static int arena_acquire(int32_t device, const struct kern_shard_desc *desc)
{
    struct cpu_devmem *m = &devmem[device];
    uint64_t need = 0, cap = topo.mem_per_core;
    size_t t;
    int rv = 0;

    if (desc->arena_max_bytes > 0 && (cap == 0 || desc->arena_max_bytes < cap))
        cap = desc->arena_max_bytes;
    for (t = 0; t < desc->ntables; t++)
        need += arena_span(&desc->tables[t]);
    if (cap > 0 && need > cap)
        return SD_ENOMEM;
    pthread_mutex_lock(&m->mu);
    if (m->busy) {
        rv = SD_EBUSY;
    } else if (need > m->arena_bytes) {
        unsigned char *w;
        uint8_t *writers;

        /* Grow at least twofold so that a run of ever larger shards
         * refills the arena only a few times, within the cap. */
        if (need < 2 * m->arena_bytes &&
            (cap == 0 || 2 * m->arena_bytes <= cap))
            need = 2 * m->arena_bytes;
        w = alloc_aligned(need);
        writers =
            calloc((size_t)((need + CPU_ARENA_BLOCK - 1) / CPU_ARENA_BLOCK), 1);
        if (w == NULL || writers == NULL) {
            free(w);
            free(writers);
            rv = SD_ENOMEM;
        } else {
            free(m->arena);
            free(m->writers);
            m->arena = w;
            m->writers = writers;
            m->arena_bytes = need;
            arena_fill((float *)(void *)w, 0, need / sizeof(float));
        }
    }
    if (rv == 0)
        m->busy = true;
    pthread_mutex_unlock(&m->mu);
    return rv;
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
            prefetch_row(tb, i + CPU_PREFETCH, 1);
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
static void arena_sanitise(struct cpu_shard *s)
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

static void cpu_release(int32_t device)
{
    struct cpu_devmem *m;

    if (device < 0 || device >= cpu_device_count())
        return;
    m = &devmem[device];
    pthread_mutex_lock(&m->mu);
    if (!m->busy) {
        free(m->arena);
        free(m->writers);
        m->arena = NULL;
        m->writers = NULL;
        m->arena_bytes = 0;
    }
    pthread_mutex_unlock(&m->mu);
}

static uint64_t cpu_kept_bytes(int32_t device)
{
    struct cpu_devmem *m;
    uint64_t n;

    if (device < 0 || device >= cpu_device_count())
        return 0;
    m = &devmem[device];
    pthread_mutex_lock(&m->mu);
    n = m->arena_bytes + m->flush_words * sizeof(uint64_t);
    pthread_mutex_unlock(&m->mu);
    return n;
}

static int cpu_shard_open(int32_t device, const struct kern_shard_desc *desc,
                          struct kern_shard **out, struct sd_diag *d)
{
    unsigned char *arena_w = NULL;
    struct cpu_shard *s = NULL;
    uint64_t need, npooled;
    int32_t col = 0;
    size_t t;
    int rv;

    if (device < 0 || device >= cpu_device_count())
        return sd_diag_set(d, SD_EINVAL, "cpu: no device %d (%d cores)",
                           (int)device, topo.ncores);
    rv = kern__shard_check(desc, d);
    if (rv == 0)
        rv = kern__tiers_check(&kern_backend_cpu, desc, d);
    if (rv != 0)
        return rv;
    need = kern__shard_bytes(desc);
    if (topo.mem_per_core > 0 && need > topo.mem_per_core)
        return sd_diag_set(d, SD_ENOMEM,
                           "cpu core %d: shard needs %llu MiB, a core has "
                           "%llu MiB",
                           topo.cores[device], (unsigned long long)(need >> 20),
                           (unsigned long long)(topo.mem_per_core >> 20));

    s = calloc(1, sizeof(*s));
    if (s == NULL)
        goto fail_close_shard;
    s->tables = calloc(desc->ntables, sizeof(*s->tables));
    if (s->tables == NULL)
        goto fail_close_shard;
    s->ntables = desc->ntables;
    s->nbags = desc->nbags;
    s->width = kern__shard_width(desc);
    s->core = topo.cores[device];
    s->lr = desc->learning_rate;
    s->device = device;
    if (desc->reuse_weights) {
        rv = arena_acquire(device, desc);
        if (rv == SD_EBUSY) {
            cpu_shard_close((struct kern_shard *)s);
            return sd_diag_set(d, rv,
                               "cpu core %d: its weight arena is in "
                               "use by another shard",
                               topo.cores[device]);
        }
        if (rv != 0)
            goto fail_close_shard;
        s->arena = true;
        arena_w = devmem[device].arena;
    }
    for (t = 0; t < desc->ntables; t++) {
        s->tables[t].col = col;
        col += desc->tables[t].dim;
        if (table_open(s, t, &desc->tables[t], desc->seed, arena_w) != 0)
            goto fail_close_shard;
        if (arena_w != NULL)
            arena_w += arena_span(&desc->tables[t]);
    }
    if (s->arena)
        arena_sanitise(s);
    npooled = (uint64_t)s->nbags * (uint64_t)s->width;
    s->pooled = alloc_aligned(npooled * sizeof(float));
    s->grad = alloc_aligned(npooled * sizeof(float));
    if (s->pooled == NULL || s->grad == NULL)
        goto fail_close_shard;
    fill_seeded(s->grad, npooled, desc->seed, KERN_STREAM_GRAD,
                KERN_GRAD_SCALE);
    *out = (struct kern_shard *)s;
    return 0;

fail_close_shard:
    cpu_shard_close((struct kern_shard *)s);
    return sd_diag_set(d, SD_ENOMEM, "cpu: out of memory for a %llu MiB shard",
                       (unsigned long long)(need >> 20));
}

/* The forward of every table, into pooled (nbags x width). */
static void forward(const struct cpu_shard *s, float *pooled)
{
    size_t t;

    for (t = 0; t < s->ntables && !shard_aborted(s); t++)
        s->tables[t].forward(s, &s->tables[t], pooled);
}

/* Backward and SGD of every table, with grad (nbags x width). */
static void backward_sgd(const struct cpu_shard *s, const float *grad)
{
    size_t t;

    for (t = 0; t < s->ntables && !shard_aborted(s); t++)
        s->tables[t].backward(s, &s->tables[t], grad);
}

/* A NULL pooled skips nothing (the forward still runs, into scratch); a
 * NULL grad_pooled uses the shard's fixed timing gradient. */
static int cpu_shard_step(struct kern_shard *ks, float *pooled,
                          const float *grad_pooled)
{
    struct cpu_shard *s = to_cpu(ks);

    forward(s, pooled != NULL ? pooled : s->pooled);
    backward_sgd(s, grad_pooled != NULL ? grad_pooled : s->grad);
    return 0;
}

static int cpu_shard_read_weights(struct kern_shard *ks, size_t t, float *out)
{
    struct cpu_shard *s = to_cpu(ks);
    const struct cpu_table *tb;

    if (t >= s->ntables)
        return SD_EINVAL;
    tb = &s->tables[t];
    weights_to_f32(tb->dtype, out, tb->w, (size_t)tb->rows * (size_t)tb->dim);
    return 0;
}

/*
 * Evicts the shard's data from every cache level: read-modify-writes a
 * buffer twice the LLC.  A plain memset would not do: glibc writes big
 * blocks with non-temporal stores, which bypass the caches.
 */
static void flush_caches(struct cpu_shard *s)
{
    uint64_t *restrict p = devmem[s->device].flush;
    size_t i, n = devmem[s->device].flush_words;

    for (i = 0; i < n; i++)
        p[i] += 1;
}

/* Makes the device's flush buffer on first use; 0 or SD_ENOMEM. */
static int flush_buffer_get(int32_t device)
{
    struct cpu_devmem *m = &devmem[device];
    int rv = 0;

    pthread_mutex_lock(&m->mu);
    if (m->flush == NULL) {
        m->flush = alloc_aligned(topo.flush_bytes);
        if (m->flush == NULL) {
            rv = SD_ENOMEM;
        } else {
            m->flush_words = (size_t)(topo.flush_bytes / sizeof(uint64_t));
            memset(m->flush, 0, m->flush_words * sizeof(uint64_t));
        }
    }
    pthread_mutex_unlock(&m->mu);
    return rv;
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Whether the caller asked the timing to stop (kern_timing_opts.abort). */
static bool aborted(const struct kern_timing_opts *o)
{
    return o->abort != NULL && atomic_load(o->abort) != 0;
}

/* The timed loop proper; the caller has pinned the thread.  Returns 0 or
 * SD_ECANCELED. */
static int time_steps(struct cpu_shard *s, const struct kern_timing_opts *o,
                      double *samples)
{
    double t0;
    int r;

    for (r = 0; r < o->warmup; r++) {
        if (aborted(o))
            return SD_ECANCELED;
        forward(s, s->pooled);
        backward_sgd(s, s->grad);
    }
    for (r = 0; r < o->repeats; r++) {
        if (aborted(o))
            return SD_ECANCELED;
        if (o->flush)
            flush_caches(s);
        t0 = now_ms();
        forward(s, s->pooled);
        backward_sgd(s, s->grad);
        samples[r] = now_ms() - t0;
    }
    /* A step cut short by the abort is not a measurement. */
    return aborted(o) ? SD_ECANCELED : 0;
}

/*
 * Pins the thread to the shard's core, times, and restores the thread's
 * affinity.  When the core cannot be pinned (a cpuset changed since the
 * probe) the steps run unpinned: a measurement, if a noisier one.
 */
static int cpu_shard_time(struct kern_shard *ks,
                          const struct kern_timing_opts *o,
                          struct kern_timing *out)
{
    struct cpu_shard *s = to_cpu(ks);
    struct kern_timing_opts def;
    cpu_set_t old, one;
    double *samples;
    int restore, rv;

    if (o == NULL) {
        kern_timing_opts_default(&def);
        o = &def;
    }
    if (o->warmup < 0 || o->repeats < 1)
        return SD_EINVAL;
    samples = calloc((size_t)o->repeats, sizeof(*samples));
    if (samples == NULL)
        return SD_ENOMEM;
    if (o->flush && flush_buffer_get(s->device) != 0) {
        free(samples);
        return SD_ENOMEM;
    }

    CPU_ZERO(&one);
    CPU_SET(s->core, &one);
    restore = pthread_getaffinity_np(pthread_self(), sizeof(old), &old) == 0;
    pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
    s->abort = o->abort;
    rv = time_steps(s, o, samples);
    s->abort = NULL;
    if (restore)
        pthread_setaffinity_np(pthread_self(), sizeof(old), &old);

    if (rv == 0)
        kern_timing_summarize(samples, o->repeats, out);
    free(samples);
    return rv;
}

const struct kern_backend kern_backend_cpu = {
    .name = "cpu",
    .dtypes =
        1u << KERN_DTYPE_FP32 | 1u << KERN_DTYPE_FP16 | 1u << KERN_DTYPE_BF16,
    /* A core's tables are in its own memory: host-memory tiers are
     * modelled on this backend (planner/problem/tiers.c), not timed. */
    .tiers = 1u << KERN_TIER_HBM,
    .device_count = cpu_device_count,
    .device_info = cpu_device_info,
    .shard_open = cpu_shard_open,
    .shard_close = cpu_shard_close,
    .shard_step = cpu_shard_step,
    .shard_read_weights = cpu_shard_read_weights,
    .shard_time = cpu_shard_time,
    .release = cpu_release,
    .kept_bytes = cpu_kept_bytes,
    .net_open = kern_cpu_net_open,
    .net_score = kern_cpu_net_score,
    .net_close = kern_cpu_net_close,
    .blas_open = kern_cpu_blas_open,
    .blas_sgemm = kern_cpu_blas_sgemm,
    .blas_close = kern_cpu_blas_close,
    .comm_open = kern_cpu_comm_open,
    .comm_run = kern_cpu_comm_run,
    .comm_close = kern_cpu_comm_close,
    /* A core has no other processes to yield to that the profiler could
     * see; its nice level and the daemon's idle timer are its gate. */
    .device_load = NULL,
};
