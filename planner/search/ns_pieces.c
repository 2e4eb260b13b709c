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

/* lv: `cols` columns of table `table`, its projection, bytes and costs. */
static void level_fill(const struct ns *s, uint32_t table, int32_t cols,
                       struct ns_level *lv)
{
    const struct table *tb = &s->tables[table];
    float z[NET_H2];
    int o;

    lv->cols = cols;
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
}

/* The cached level of a piece, made on first use (main thread only). */
struct ns_level *ns_level(struct ns *s, uint32_t table, int32_t level)
{
    struct ns_level *lv = level_at(s, table, level);
    uint8_t *made = &s->made[(size_t)level * s->ntables + table];

    if (!*made) {
        level_fill(s, table, s->tables[table].dim >> level, lv);
        lv->odd = NULL;
        *made = 1;
    }
    return lv;
}

/*
 * Pieces of a table down to `level` add up, on one device, to multiples of
 * dim >> level: each is a level's width (dim >> l) or an odd multiple of
 * one, 3, 5, ... 2^l - 1 times it (l >= 2), kept with that level.
 */
int ns_fold_levels(struct ns *s, uint32_t table, int32_t level)
{
    int32_t l, i, n;

    if (!s->fold)
        return 0;
    for (l = 0; l <= level; l++) {
        struct ns_level *lv = ns_level(s, table, l);

        if (l < 2 || lv->odd != NULL)
            continue;
        n = ((int32_t)1 << (l - 1)) - 1;
        lv->odd = calloc((size_t)n, sizeof(*lv->odd));
        if (lv->odd == NULL)
            return SD_ENOMEM;
        for (i = 0; i < n; i++)
            level_fill(s, table, (2 * i + 3) * lv->cols, &lv->odd[i]);
    }
    return 0;
}

const struct ns_level *ns_width(const struct ns *s, uint32_t table,
                                int32_t cols)
{
    /* cols = m x the narrowest width = k x 2^j x it, k odd: k x the width
     * of level top - j. */
    int32_t top = s->nlevels[table] - 1, l = top,
            m = cols / (s->tables[table].dim >> top);

    while (m % 2 == 0) {
        m /= 2;
        l--;
    }
    return m == 1 ? level_at(s, table, l)
                  : &level_at(s, table, l)->odd[(m - 3) / 2];
}

/* A table cut in pieces has every piece below level 0; its pieces are
 * linked round in index order, through w->last. */
void ns_rings(const struct ns *s, struct ns_work *w, const struct ns_state *st)
{
    size_t k;

    (void)s;
    for (k = 0; k < st->np; k++) {
        uint32_t t = st->pc[k].table;
        int32_t p = st->pc[k].level > 0 ? w->last[t] : -1;

        if (p < 0) {
            w->ring[k] = (int32_t)k;
        } else {
            w->ring[k] = w->ring[p];
            w->ring[p] = (int32_t)k;
        }
        if (st->pc[k].level > 0)
            w->last[t] = (int32_t)k;
    }
    for (k = 0; k < st->np; k++)
        w->last[st->pc[k].table] = -1;
}

int32_t ns_held(const struct ns *s, const struct ns_work *w,
                const struct ns_state *st, size_t k, int32_t r)
{
    int32_t held = 0;
    size_t j = k;

    do {
        if (st->assign[j] == r)
            held += piece_level(s, &st->pc[j])->cols;
        j = (size_t)w->ring[j];
    } while (j != k);
    return held;
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
