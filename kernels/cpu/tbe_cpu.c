/*
 * The cpu backend's tables (backend_cpu_int.h): a table's weights in its
 * dtype, and its fused embedding-bag passes, sum-pooling forward and
 * backward with exact SGD, one pair per dtype.  The lookup loops and
 * their row kernels are all here, in one translation unit, so that each
 * row kernel inlines into its loop (forward_rows()), and the file is built
 * with its loops aligned (kernels/CMakeLists.txt).
 *
 * Weights are stored in each table's dtype (kernels.h): a forward converts
 * each row to fp32 as it adds it into the pooled sums, an SGD update reads
 * a row, updates it in fp32 and rounds it back (to nearest, ties to even).
 * fp16 goes through the CPU's F16C instructions where it has them (x86
 * since 2012; chosen once at run time), else through portable code; bf16
 * is the upper half of an fp32, so plain integer code.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cpu_int.h"
#include "shardd/le.h"

/* x86: the F16C code is compiled for AVX and F16C whatever the build's
 * target, and runs only where the CPU has both (f16c_probe). */
#if defined(__x86_64__) || defined(__i386__)
#    include <cpuid.h>
#    include <immintrin.h>
#    define CPU_X86  1
#    define CPU_F16C __attribute__((target("avx,f16c")))
#else
#    define CPU_X86 0
#endif /* __x86_64__ || __i386__ */

/* Seeded weights rounded per conversion call when filling a 16-bit table. */
#define CPU_CHUNK 1024

/* F16C, found once (f16c_probe()). */
static struct {
    pthread_once_t once;
    bool f16c;     /* the CPU has F16C and AVX (and the OS saves AVX state) */
    bool use_f16c; /* fp16 tables opened now use it (kern_cpu_use_f16c()) */
} f16c_state = {.once = PTHREAD_ONCE_INIT};

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

static void f16c_probe(void)
{
    f16c_state.f16c = cpu_has_f16c();
    f16c_state.use_f16c = f16c_state.f16c;
}

/* Whether fp16 weights go through F16C now. */
static bool f16c_on(void)
{
    pthread_once(&f16c_state.once, f16c_probe);
    return f16c_state.use_f16c;
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
    pthread_once(&f16c_state.once, f16c_probe);
    return f16c_state.f16c;
}

bool kern_cpu_use_f16c(bool on)
{
    pthread_once(&f16c_state.once, f16c_probe);
    f16c_state.use_f16c = on && f16c_state.f16c;
    return f16c_state.use_f16c;
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
        kern_cpu_f16_to_f32(out, w, n, f16c_on());
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
        kern_cpu_f32_to_f16(w, in, n, f16c_on());
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
                kern_cpu__prefetch_row(tb, i + CPU_PREFETCH, 0);
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
                kern_cpu__prefetch_row(tb, i + CPU_PREFETCH, 1);
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
/* A table: its weights, made and read, and its passes chosen               */

void kern_cpu__fill_seeded(float *p, uint64_t n, uint64_t seed, uint64_t stream,
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
        kern_cpu__fill_seeded(w, n, seed, stream, KERN_WEIGHT_SCALE);
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
        if (f16c_on()) {
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

int kern_cpu__table_open(struct cpu_shard *s, size_t t,
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
    tb->w = arena_w ? (void *)arena_w : kern_cpu__alloc_aligned(nw * size);
    tb->offsets = kern_cpu__alloc_aligned(noff * sizeof(int64_t));
    tb->indices =
        kern_cpu__alloc_aligned((uint64_t)td->nindices * sizeof(int64_t));
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

void kern_cpu__table_close(struct cpu_table *tb)
{
    if (tb->w_owned)
        free(tb->w);
    free(tb->offsets);
    free(tb->indices);
}

void kern_cpu__table_read_weights(const struct cpu_table *tb, float *out)
{
    weights_to_f32(tb->dtype, out, tb->w, (size_t)tb->rows * (size_t)tb->dim);
}
