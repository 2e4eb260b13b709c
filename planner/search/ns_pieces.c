/*
 * The neuroshard search's pieces and states (neuroshard_int.h): each
 * (table, level)'s cached projection and cost, made on first use; the keys
 * that name a state by the multiset of its pieces, and the set of keys
 * already scored; a state's buffers.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "search/neuroshard_int.h"

/* The cached level of a piece, made on first use (main thread only). */
struct ns_level *ns_level(struct ns *s, uint32_t table, int32_t level)
{
    struct ns_level *lv = level_at(s, table, level);

    if (!lv->ready) {
        const struct table *tb = &s->tables[table];
        float z[NET_H2];
        int o;

        lv->cols = tb->dim >> level;
        net_projected(s->net, s->o->memo, tb, lv->cols, lv->proj);
        net_head_init(s->net, z);
        for (o = 0; o < NET_H2; o++)
            z[o] += lv->proj[o];
        lv->tier_ms = tier_shard_ms(
            tb,
            &(struct shard){.col_width = lv->cols,
                            .scheme = SCHEME_TW,
                            .tier = tb->tier,
                            .cache_load_factor = tb->cache_load_factor},
            s->t);
        lv->ms = net_head_z(s->net, z) * s->scale + lv->tier_ms;
        lv->bytes = shard_bytes(tb, lv->cols, s->o->optimizer);
        lv->ready = true;
    }
    return lv;
}

/* splitmix64: a well-mixed hash of one piece; a state's key is the sum over
 * its pieces, which does not depend on their order. */
uint64_t ns_piece_hash(uint32_t table, int32_t level)
{
    uint64_t x = ((uint64_t)table << 8 | (uint64_t)level) + 0x9E3779B97F4A7C15u;

    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9u;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBu;
    return x ^ (x >> 31);
}

/* Inserts key; false when it was already there. */
bool ns_seen_insert(struct ns *s, uint64_t key)
{
    size_t i;

    if (key == 0)
        key = 1;
    if (2 * (s->seen_n + 1) > s->seen_cap) {
        size_t ncap = s->seen_cap ? 2 * s->seen_cap : 1024, k;
        uint64_t *nk = calloc(ncap, sizeof(*nk));

        if (!nk)
            return true; /* no memory for dedup: score it again */
        for (k = 0; k < s->seen_cap; k++) {
            if (s->seen[k] == 0)
                continue;
            for (i = s->seen[k] & (ncap - 1); nk[i]; i = (i + 1) & (ncap - 1))
                ;
            nk[i] = s->seen[k];
        }
        free(s->seen);
        s->seen = nk;
        s->seen_cap = ncap;
    }
    for (i = key & (s->seen_cap - 1); s->seen[i];
         i = (i + 1) & (s->seen_cap - 1))
        if (s->seen[i] == key)
            return false;
    s->seen[i] = key;
    s->seen_n++;
    return true;
}

int ns_state_alloc(struct ns_state *st, size_t cap)
{
    st->pc = malloc(cap * sizeof(*st->pc));
    st->assign = malloc(cap * sizeof(*st->assign));
    st->np = 0;
    st->cost = INFINITY;
    st->key = 0;
    return st->pc && st->assign ? 0 : SD_ENOMEM;
}

void ns_state_free(struct ns_state *st)
{
    free(st->pc);
    free(st->assign);
}

void ns_state_copy(struct ns_state *dst, const struct ns_state *src)
{
    memcpy(dst->pc, src->pc, src->np * sizeof(*src->pc));
    memcpy(dst->assign, src->assign, src->np * sizeof(*src->assign));
    dst->np = src->np;
    dst->key = src->key;
    dst->cost = src->cost;
}
