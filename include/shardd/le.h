/*
 * Little-endian fields, the byte order of every file and blob shardd writes
 * (model, ensemble and policy files, stored samples): the one place that
 * turns integers and IEEE-754 reals into bytes and back, so a file reads
 * alike on every host.
 *
 * sd_le_put* / sd_le_get* write and read at p (the caller checked the
 * room); sd_f32_bits / sd_f32_of (and f64) are a real's bit pattern and
 * back.  struct sd_wbuf appends to a buffer sized beforehand.
 */
#ifndef SHARDD_LE_H
#define SHARDD_LE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline void sd_le_put32(unsigned char *p, uint32_t v)
{
    int i;

    for (i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static inline void sd_le_put64(unsigned char *p, uint64_t v)
{
    sd_le_put32(p, (uint32_t)v);
    sd_le_put32(p + 4, (uint32_t)(v >> 32));
}

static inline uint32_t sd_le_get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static inline uint64_t sd_le_get64(const unsigned char *p)
{
    return (uint64_t)sd_le_get32(p) | (uint64_t)sd_le_get32(p + 4) << 32;
}

static inline uint32_t sd_f32_bits(float f)
{
    uint32_t v;

    memcpy(&v, &f, sizeof(v));
    return v;
}

static inline float sd_f32_of(uint32_t v)
{
    float f;

    memcpy(&f, &v, sizeof(f));
    return f;
}

static inline uint64_t sd_f64_bits(double f)
{
    uint64_t v;

    memcpy(&v, &f, sizeof(v));
    return v;
}

static inline double sd_f64_of(uint64_t v)
{
    double f;

    memcpy(&f, &v, sizeof(f));
    return f;
}

/* Appends fields to p, whose room the caller sized; len is what is used. */
struct sd_wbuf {
    unsigned char *p;
    size_t len;
};

static inline void sd_wbuf_u32(struct sd_wbuf *b, uint32_t v)
{
    sd_le_put32(b->p + b->len, v);
    b->len += 4;
}

static inline void sd_wbuf_u64(struct sd_wbuf *b, uint64_t v)
{
    sd_le_put64(b->p + b->len, v);
    b->len += 8;
}

static inline void sd_wbuf_f32(struct sd_wbuf *b, float f)
{
    sd_wbuf_u32(b, sd_f32_bits(f));
}

static inline void sd_wbuf_f64(struct sd_wbuf *b, double f)
{
    sd_wbuf_u64(b, sd_f64_bits(f));
}

#endif
