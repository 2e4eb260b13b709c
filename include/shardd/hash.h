/*
 * FNV-1a, 64 bit (Fowler, Noll, Vo; offset basis 0xcbf29ce484222325, prime
 * 0x100000001b3): the one non-cryptographic hash every module uses, for hash
 * tables and for keys that must be the same on every host (the daemon's
 * request hash names cached and audited plans, so its values must never
 * change).
 *
 * An incremental hash is a struct sd_fnv: sd_fnv_init(), then any sequence
 * of the adders, then read h.  The adders fix the byte order, so a value
 * hashes alike on every host: integers as 8 little-endian bytes, reals as
 * their IEEE-754 bit pattern, strings as their length then their bytes (so
 * "ab" + "c" and "a" + "bc" differ).
 */
#ifndef SHARDD_HASH_H
#define SHARDD_HASH_H

#include <stddef.h>
#include <stdint.h>

#define SD_FNV_OFFSET UINT64_C(0xcbf29ce484222325)
#define SD_FNV_PRIME  UINT64_C(0x100000001b3)

struct sd_fnv {
    uint64_t h; /* the hash of everything added so far */
};

/* Starts a hash: h = the offset basis. */
void sd_fnv_init(struct sd_fnv *f);
/* Adds n bytes. */
void sd_fnv_bytes(struct sd_fnv *f, const void *p, size_t n);
/* Adds v as 8 bytes, least significant first. */
void sd_fnv_u64(struct sd_fnv *f, uint64_t v);
/* Adds x's bit pattern as sd_fnv_u64() does (0.0 and -0.0 differ). */
void sd_fnv_real(struct sd_fnv *f, double x);
/* Adds strlen(s) as sd_fnv_u64() does, then the bytes of s. */
void sd_fnv_str(struct sd_fnv *f, const char *s);

/* The plain FNV-1a of the bytes of s up to its NUL: no length prefix. */
uint64_t sd_fnv1a_str(const char *s);

#endif /* SHARDD_HASH_H */
