/* FNV-1a, 64 bit (include/shardd/hash.h). */
#include "shardd/hash.h"

#include <string.h>

void sd_fnv_init(struct sd_fnv *f)
{
    f->h = SD_FNV_OFFSET;
}

void sd_fnv_bytes(struct sd_fnv *f, const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = f->h;
    size_t i;

    for (i = 0; i < n; i++) {
        h ^= b[i];
        h *= SD_FNV_PRIME;
    }
    f->h = h;
}

void sd_fnv_u64(struct sd_fnv *f, uint64_t v)
{
    unsigned char b[8];
    int i;

    for (i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i)); /* byte order fixed */
    sd_fnv_bytes(f, b, sizeof(b));
}

void sd_fnv_real(struct sd_fnv *f, double x)
{
    uint64_t v;

    memcpy(&v, &x, sizeof(v));
    sd_fnv_u64(f, v);
}

void sd_fnv_str(struct sd_fnv *f, const char *s)
{
    size_t n = strlen(s);

    sd_fnv_u64(f, n);
    sd_fnv_bytes(f, s, n);
}

uint64_t sd_fnv1a_str(const char *s)
{
    struct sd_fnv f;

    sd_fnv_init(&f);
    sd_fnv_bytes(&f, s, strlen(s));
    return f.h;
}
