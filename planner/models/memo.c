/*
 * The memo of projected latents (models.h): a fixed array of sets of
 * NET_MEMO_WAYS entries, a set chosen by a hash of the key, replaced
 * round-robin within the set.  The key is what the model's input is made
 * of, before its transforms and scaling: the table's features at the width
 * (table_features()), with pooling factor and rows exact, as the model
 * takes them, and the dtype where a derived input reads it (format 3; the
 * batch those read is the model's own).  Equal keys make equal inputs, so a hit
 * is exact (the key is compared in full), and costs no logarithm or division.
 * Sets are guarded by NET_MEMO_STRIPES mutexes, set i by stripe i mod
 * NET_MEMO_STRIPES: two threads meet only on the same stripe, and a lookup
 * holds it for one copy of 64 floats.  A miss computes with the memo's own
 * copy of the model's layers, packed for vector steps (models_int.h): the
 * same floats as net_latent(), 1.3 x faster on 856-table plans, whose
 * few thousand misses were a fifth of the search.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "models/models.h"
#include "models/models_int.h"

#define NET_MEMO_WAYS    8
#define NET_MEMO_STRIPES 64

struct memo_key {
    float f[TABLE_NFEATURES]; /* pooling factor and rows zero: below */
    double pooling_factor;
    int64_t rows;
    int32_t dtype; /* where a derived input reads it; else 0 */
    int32_t pad;   /* zero */
};

struct memo_entry {
    struct memo_key key;
    float proj[NET_H2];
};

/* The ways' tags (the key's hash, odd; 0: empty) come first, on one cache
 * line: a lookup reads an entry only where its tag matches (the entries'
 * first bytes were most of a lookup's time, each a cache miss). */
struct memo_set {
    _Alignas(64) uint64_t tag[NET_MEMO_WAYS];
    uint8_t next; /* the way replaced next */
    struct memo_entry e[NET_MEMO_WAYS];
};

/* A stripe's mutex and counters, on a cache line of its own: the counters
 * are written under the mutex, so threads on other stripes never pull the
 * line away (one set of shared atomic counters, and mutexes packed side by
 * side, made every lookup of two threads a cache-line transfer). */
struct memo_stripe {
    _Alignas(64) pthread_mutex_t lock;
    atomic_uint_fast64_t hits, misses, filled; /* read without the mutex */
};

struct net_memo {
    const struct cost_net *net; /* the model it answers for (borrowed) */
    struct models__rows rows;   /* net's layers, packed: a miss computes */
    bool dtype_in;              /* reads_dtype(net) */
    struct memo_set *sets;
    size_t nsets;
    struct memo_stripe stripe[NET_MEMO_STRIPES];
};

/* *c += 1 by the holder of its stripe's mutex (no other writer). */
static void count_up(atomic_uint_fast64_t *c)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* Whether a derived input of m reads the table's dtype (its bytes). */
static bool reads_dtype(const struct cost_net *m)
{
    int j;

    for (j = 0; j < m->x.n; j++)
        if (net_extra_reads_dtype(m->x.id[j]))
            return true;
    return false;
}

struct net_memo *net_memo_new(const struct cost_net *m, size_t entries)
{
    struct net_memo *mm;
    int i;

    if (!m || entries == 0)
        return NULL;
    mm = aligned_alloc(_Alignof(struct net_memo), sizeof(*mm));
    if (!mm)
        return NULL;
    memset(mm, 0, sizeof(*mm));
    mm->net = m;
    models__rows_pack(m, &mm->rows);
    mm->dtype_in = reads_dtype(m);
    mm->nsets = (entries + NET_MEMO_WAYS - 1) / NET_MEMO_WAYS;
    mm->sets =
        aligned_alloc(_Alignof(struct memo_set), mm->nsets * sizeof(*mm->sets));
    if (!mm->sets) {
        free(mm);
        return NULL;
    }
    memset(mm->sets, 0, mm->nsets * sizeof(*mm->sets));
    for (i = 0; i < NET_MEMO_STRIPES; i++) {
        pthread_mutex_init(&mm->stripe[i].lock, NULL);
        atomic_init(&mm->stripe[i].hits, 0);
        atomic_init(&mm->stripe[i].misses, 0);
        atomic_init(&mm->stripe[i].filled, 0);
    }
    return mm;
}

/*
 * Entries a plan's memo holds a table, and the fewest.  An 856-table plan
 * on 8 devices asks for 2,660 keys (whole tables, row-wise views, column
 * widths): with 4 a table in sets of 4 ways, the sets that drew 5 keys or
 * more lost one at every pass over the tables, and 3,437 latents were
 * computed; with 8 in sets of 8, 2,686 (test_memo_for_tables).
 */
#define NET_MEMO_PER_TABLE 8
#define NET_MEMO_MIN       1024

struct net_memo *net_memo_for_tables(const struct cost_net *m, size_t ntables)
{
    return net_memo_new(m, NET_MEMO_PER_TABLE * ntables + NET_MEMO_MIN);
}

void net_memo_free(struct net_memo *mm)
{
    int i;

    if (!mm)
        return;
    for (i = 0; i < NET_MEMO_STRIPES; i++)
        pthread_mutex_destroy(&mm->stripe[i].lock);
    free(mm->sets);
    free(mm);
}

void net_memo_stats(const struct net_memo *mm, struct net_memo_stats *out)
{
    int i;

    memset(out, 0, sizeof(*out));
    if (!mm)
        return;
    for (i = 0; i < NET_MEMO_STRIPES; i++) {
        const struct memo_stripe *st = &mm->stripe[i];

        out->hits += atomic_load_explicit(&st->hits, memory_order_relaxed);
        out->misses += atomic_load_explicit(&st->misses, memory_order_relaxed);
        out->entries += atomic_load_explicit(&st->filled, memory_order_relaxed);
    }
    out->capacity = mm->nsets * NET_MEMO_WAYS;
}

/* The key: everything m's input of t at `cols` is made of (the model's
 * batch, which derived inputs read too, is the memo's own). */
static void key_of(const struct net_memo *mm, const struct table *t,
                   int32_t cols, struct memo_key *k)
{
    memset(k, 0, sizeof(*k)); /* no padding bytes left to chance */
    table_features(t, cols, k->f);
    k->f[TABLE_FEATURE_PF] = 0;
    k->f[TABLE_FEATURE_ROWS] = 0;
    k->pooling_factor = t->pooling_factor;
    k->rows = t->rows;
    k->dtype = mm->dtype_in ? (int32_t)t->dtype : 0;
}

#define KEY_WORDS (sizeof(struct memo_key) / 8)
_Static_assert(sizeof(struct memo_key) % 8 == 0, "a key of whole words");

/*
 * The set of key k and, through *stripe, the stripe guarding it.  The memo
 * lives in memory only, so any hash that spreads the keys will do: each
 * word, its high half folded in, times a constant of its own, summed, then
 * mixed once.  The products are independent, so they run side by side; a
 * chain of multiply-and-fold steps over the words, and the division that
 * picked the set, were half of a hit's time.  The set is taken from the
 * hash's high half by a multiply, not a division.
 */
static struct memo_set *set_of(struct net_memo *mm, const struct memo_key *k,
                               struct memo_stripe **stripe, uint64_t *tag)
{
    static const uint64_t mul[KEY_WORDS] = {
        0xe848f808f54d35bfu, 0x3e1c26d323ef323fu, 0x9cf342ca060bb525u,
        0x72775666ffa64239u, 0xb3b3406c2f2b3f2du, 0xbd55fcad1edf1f1fu,
        0xe0ed9827a6c38ad3u, 0xcae64fa6587c2e15u, 0x14646e57e3b99c59u,
        0x44ee9bd73b53690bu, 0x0cb69ab7f5a0d02fu, 0xf9e20aa751c7987fu,
        0x2ddbd20899e47611u};
    uint64_t h = 0, v;
    size_t i;

    for (i = 0; i < KEY_WORDS; i++) {
        memcpy(&v, (const unsigned char *)k + 8 * i, 8);
        h += (v ^ (v >> 32)) * mul[i];
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9u;
    h ^= h >> 32;
    *tag = h | 1;
    i = (size_t)(((h >> 32) * (uint64_t)mm->nsets) >> 32);
    *stripe = &mm->stripe[i % NET_MEMO_STRIPES];
    return &mm->sets[i];
}

void net_projected(const struct cost_net *m, struct net_memo *mm,
                   const struct table *t, int32_t cols, float proj[NET_H2])
{
    float x[NET_IN_MAX], lat[NET_LAT];
    struct memo_key key;
    struct memo_set *set;
    struct memo_stripe *stripe;
    uint64_t tag;
    int w;

    if (!mm || mm->net != m) { /* no memo, or another model's */
        net_latent(m, t, cols, lat);
        net_project(m, lat, proj);
        return;
    }
    key_of(mm, t, cols, &key);
    set = set_of(mm, &key, &stripe, &tag);
    pthread_mutex_lock(&stripe->lock);
    /* Ways fill in order and are never emptied: the first empty one ends
     * the set. */
    for (w = 0; w < NET_MEMO_WAYS && set->tag[w] != 0; w++)
        if (set->tag[w] == tag &&
            memcmp(&set->e[w].key, &key, sizeof(key)) == 0) {
            memcpy(proj, set->e[w].proj, NET_H2 * sizeof(*proj));
            count_up(&stripe->hits);
            pthread_mutex_unlock(&stripe->lock);
            return;
        }
    pthread_mutex_unlock(&stripe->lock);

    /* Computed outside the lock: two threads missing the same key both
     * compute it, and it may take two ways of the set (the same values). */
    net_input_all(m, t, cols, x);
    models__rows_project(m, &mm->rows, x, proj);
    pthread_mutex_lock(&stripe->lock);
    count_up(&stripe->misses);
    w = set->next;
    set->next = (uint8_t)((w + 1) % NET_MEMO_WAYS);
    if (set->tag[w] == 0)
        count_up(&stripe->filled);
    set->tag[w] = tag;
    set->e[w].key = key;
    memcpy(set->e[w].proj, proj, NET_H2 * sizeof(*proj));
    pthread_mutex_unlock(&stripe->lock);
}
