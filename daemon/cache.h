/*
 * The plan cache: packed PlanResponses of recent requests, keyed by the
 * request's hash and the id of the model that planned it (a new model
 * never answers from an old model's plans).  Least recently used entries
 * go first past the configured entry count or the byte cap.  Lookups and
 * inserts are O(1) (a chained hash table and an LRU list).  Thread-safe.
 */
#ifndef SHARDD_DAEMON_CACHE_H
#define SHARDD_DAEMON_CACHE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PLAN_CACHE_BYTES ((size_t)256 << 20) /* all responses together */

struct cache_entry; /* cache.c */

struct plan_cache {
    pthread_mutex_t mu; /* guards everything below */
    size_t limit;       /* entries kept; 0: the cache is off */
    size_t n, bytes;
    struct cache_entry **buckets; /* nbuckets chains (a power of two) */
    size_t nbuckets;
    struct cache_entry *newest, *oldest; /* the LRU list */
    uint64_t hits, misses;               /* since start */
};

/* An empty cache of at most `limit` entries.  Allocates nothing yet. */
void cache_init(struct plan_cache *c, size_t limit);
void cache_destroy(struct plan_cache *c);

/* A new entry limit (a reload); entries past it go at once. */
void cache_set_limit(struct plan_cache *c, size_t limit);

/*
 * A hit copies the response into *resp (owned by the caller, free()) and
 * returns true; a miss (or no memory for the copy) returns false.
 */
bool cache_get(struct plan_cache *c, uint64_t key, int64_t model_id,
               uint8_t **resp, size_t *len);

/* Stores a copy of resp (best effort: no memory, or a response over a
 * quarter of the byte cap, stores nothing). */
void cache_put(struct plan_cache *c, uint64_t key, int64_t model_id,
               const uint8_t *resp, size_t len);

/* Entries, bytes, hits and misses now (for status and metrics). */
void cache_stats(struct plan_cache *c, size_t *entries, size_t *bytes,
                 uint64_t *hits, uint64_t *misses);

#endif /* SHARDD_DAEMON_CACHE_H */
