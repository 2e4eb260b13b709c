/*
 * Tests of common/: the FNV-1a hash (include/shardd/hash.h) against the
 * published reference vectors, and the incremental adders against the
 * values the daemon's request hash gave before it used them, so that cached
 * and audited plans keep their keys.
 */
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "shardd/hash.h"

static void test_reference_vectors(void)
{
    struct sd_fnv f;

    /* The FNV-1a 64-bit test vectors of "", "a" and "foobar" published with
     * the algorithm (http://www.isthe.com/chongo/tech/comp/fnv/). */
    CHECK(sd_fnv1a_str("") == UINT64_C(0xcbf29ce484222325));
    CHECK(sd_fnv1a_str("a") == UINT64_C(0xaf63dc4c8601ec8c));
    CHECK(sd_fnv1a_str("foobar") == UINT64_C(0x85944171f73967e8));

    sd_fnv_init(&f);
    CHECK(f.h == SD_FNV_OFFSET);
    sd_fnv_bytes(&f, "foo", 3);
    sd_fnv_bytes(&f, "bar", 3);
    CHECK(f.h == UINT64_C(0x85944171f73967e8)); /* bytes in pieces alike */
    sd_fnv_bytes(&f, NULL, 0);
    CHECK(f.h == UINT64_C(0x85944171f73967e8));
}

/*
 * The expected values were computed with the daemon's own request hasher
 * before it was replaced by these functions, and equal Python's FNV-1a over
 * struct.pack("<Q", v), struct.pack("<d", x) and pack("<Q", len(s)) + s.
 */
static void test_adders(void)
{
    struct sd_fnv f;

    sd_fnv_init(&f);
    sd_fnv_u64(&f, UINT64_C(0x0102030405060708));
    CHECK(f.h == UINT64_C(0x0c6d4496e17859d5));

    sd_fnv_init(&f);
    sd_fnv_real(&f, 1.5);
    CHECK(f.h == UINT64_C(0xaa95e93229a27c80));

    sd_fnv_init(&f);
    sd_fnv_str(&f, "foobar");
    CHECK(f.h == UINT64_C(0xb277229a2d9d19f2));

    sd_fnv_init(&f);
    sd_fnv_str(&f, "shardd.v1.PlanRequest/1");
    sd_fnv_u64(&f, 42);
    sd_fnv_real(&f, 1.5);
    sd_fnv_u64(&f, (uint64_t)(int64_t)-1);
    sd_fnv_bytes(&f, "xyz", 3);
    CHECK(f.h == UINT64_C(0x34f74cb125b1159f));

    /* The length prefix keeps string boundaries. */
    {
        struct sd_fnv g;

        sd_fnv_init(&f);
        sd_fnv_str(&f, "ab");
        sd_fnv_str(&f, "c");
        sd_fnv_init(&g);
        sd_fnv_str(&g, "a");
        sd_fnv_str(&g, "bc");
        CHECK(f.h != g.h);
    }
    /* 0.0 and -0.0 are different bit patterns. */
    {
        struct sd_fnv g;

        sd_fnv_init(&f);
        sd_fnv_real(&f, 0.0);
        sd_fnv_init(&g);
        sd_fnv_real(&g, -0.0);
        CHECK(f.h != g.h);
    }
}

int main(void)
{
    test_reference_vectors();
    test_adders();
    return tap_done();
}
