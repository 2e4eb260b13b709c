/* The plan cache (cache.h). */
#include "cache.h"

#include <stdlib.h>
#include <string.h>

struct cache_entry {
    uint64_t key;              /* request hash */
    int64_t model_id;          /* and the model that planned it */
    uint8_t *resp;             /* owned */
    size_t len;                /* of resp */
    struct cache_entry *chain; /* next in its bucket */
    struct cache_entry *newer; /* LRU list neighbours */
    struct cache_entry *older;
};

void cache_init(struct plan_cache *c, size_t limit)
{
    memset(c, 0, sizeof(*c));
    pthread_mutex_init(&c->mu, NULL);
    c->limit = limit;
}

static size_t bucket_of(const struct plan_cache *c, uint64_t key,
                        int64_t model_id)
{
    uint64_t h = key ^ ((uint64_t)model_id * 0x9e3779b97f4a7c15ull);

    return (size_t)(h ^ (h >> 29)) & (c->nbuckets - 1);
}

static void lru_unlink(struct plan_cache *c, struct cache_entry *e)
{
    if (e->newer != NULL)
        e->newer->older = e->older;
    else
        c->newest = e->older;
    if (e->older != NULL)
        e->older->newer = e->newer;
    else
        c->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void lru_push(struct plan_cache *c, struct cache_entry *e)
{
    e->older = c->newest;
    e->newer = NULL;
    if (c->newest != NULL)
        c->newest->newer = e;
    c->newest = e;
    if (c->oldest == NULL)
        c->oldest = e;
}

/* The entry's bucket link (mu held), or NULL. */
static struct cache_entry **find(struct plan_cache *c, uint64_t key,
                                 int64_t model_id)
{
    struct cache_entry **at;

    if (c->nbuckets == 0)
        return NULL;
    for (at = &c->buckets[bucket_of(c, key, model_id)]; *at != NULL;
         at = &(*at)->chain)
        if ((*at)->key == key && (*at)->model_id == model_id)
            return at;
    return NULL;
}

static void drop(struct plan_cache *c, struct cache_entry *e)
{
    struct cache_entry **at = find(c, e->key, e->model_id);

    *at = e->chain;
    lru_unlink(c, e);
    c->n--;
    c->bytes -= e->len;
    free(e->resp);
    free(e);
}

/* Drops the oldest entries until `entries` and the byte cap hold. */
static void evict(struct plan_cache *c, size_t entries, size_t extra_bytes)
{
    while (c->oldest != NULL &&
           (c->n > entries || c->bytes + extra_bytes > PLAN_CACHE_BYTES))
        drop(c, c->oldest);
}

/* Doubles the table when it is as full as it is long (mu held). */
static int grow(struct plan_cache *c)
{
    struct cache_entry **old = c->buckets, *e, *next;
    size_t i, n = c->nbuckets;

    if (c->n < n)
        return 0;
    c->nbuckets = n ? n * 2 : 64;
    c->buckets = calloc(c->nbuckets, sizeof(*c->buckets));
    if (c->buckets == NULL) {
        c->buckets = old;
        c->nbuckets = n;
        return n > 0 ? 0 : -1; /* a long chain still works */
    }
    for (i = 0; i < n; i++)
        for (e = old[i]; e != NULL; e = next) {
            size_t b = bucket_of(c, e->key, e->model_id);

            next = e->chain;
            e->chain = c->buckets[b];
            c->buckets[b] = e;
        }
    free(old);
    return 0;
}

void cache_destroy(struct plan_cache *c)
{
    while (c->oldest != NULL)
        drop(c, c->oldest);
    free(c->buckets);
    pthread_mutex_destroy(&c->mu);
}

void cache_set_limit(struct plan_cache *c, size_t limit)
{
    pthread_mutex_lock(&c->mu);
    c->limit = limit;
    evict(c, limit, 0);
    pthread_mutex_unlock(&c->mu);
}

bool cache_get(struct plan_cache *c, uint64_t key, int64_t model_id,
               uint8_t **resp, size_t *len)
{
    struct cache_entry **at, *e;
    bool hit = false;

    pthread_mutex_lock(&c->mu);
    at = find(c, key, model_id);
    if (at != NULL) {
        e = *at;
        *resp = malloc(e->len ? e->len : 1);
        if (*resp != NULL) {
            memcpy(*resp, e->resp, e->len);
            *len = e->len;
            lru_unlink(c, e);
            lru_push(c, e);
            hit = true;
        }
    }
    if (hit)
        c->hits++;
    else
        c->misses++;
    pthread_mutex_unlock(&c->mu);
    return hit;
}

void cache_put(struct plan_cache *c, uint64_t key, int64_t model_id,
               const uint8_t *resp, size_t len)
{
    struct cache_entry *e;
    size_t b;

    pthread_mutex_lock(&c->mu);
    if (c->limit == 0 || len > PLAN_CACHE_BYTES / 4 ||
        find(c, key, model_id) != NULL) /* a concurrent twin was first */
        goto out_unlock;
    evict(c, c->limit - 1, len);
    if (grow(c) != 0)
        goto out_unlock;
    e = calloc(1, sizeof(*e));
    if (e == NULL)
        goto out_unlock;
    e->resp = malloc(len ? len : 1);
    if (e->resp == NULL) {
        free(e);
        goto out_unlock;
    }
    memcpy(e->resp, resp, len);
    e->len = len;
    e->key = key;
    e->model_id = model_id;
    b = bucket_of(c, key, model_id);
    e->chain = c->buckets[b];
    c->buckets[b] = e;
    lru_push(c, e);
    c->n++;
    c->bytes += len;
out_unlock:
    pthread_mutex_unlock(&c->mu);
}

void cache_stats(struct plan_cache *c, size_t *entries, size_t *bytes,
                 uint64_t *hits, uint64_t *misses)
{
    pthread_mutex_lock(&c->mu);
    *entries = c->n;
    *bytes = c->bytes;
    *hits = c->hits;
    *misses = c->misses;
    pthread_mutex_unlock(&c->mu);
}
