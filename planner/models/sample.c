/*
 * Profiling samples (neuroshard.md 2.2): the random shards whose measured
 * costs the compute model is trained on (models.h).
 */
#include <math.h>
#include <stdlib.h>

#include "models/models.h"
#include "problem/problem.h"

#define DRAW_TRIES 1000

const int32_t sample_dims[SAMPLE_NDIMS] = {128, 64, 32, 16, 8, 4};

void sample_params_default(struct sample_params *p)
{
    p->max_tables = 15;
    p->max_bytes = 4ull << 30;
}

int sample_draw_shard(struct rng *g, const struct table *pool, size_t npool,
                      const struct sample_params *p, size_t *idx, int32_t *dims,
                      size_t *k)
{
    int tries;

    if (npool == 0 || p->max_tables == 0)
        return SD_EINVAL;
    for (tries = 0; tries < DRAW_TRIES; tries++) {
        size_t n = 1 + (size_t)rng_below(g, p->max_tables), i;
        uint64_t bytes = 0;

        /* One draw from the augmented list of npool x SAMPLE_NDIMS
         * configurations is a pool table and a dim drawn independently. */
        for (i = 0; i < n; i++) {
            uint64_t aug = rng_below(g, (uint64_t)npool * SAMPLE_NDIMS);

            idx[i] = (size_t)(aug % npool);
            dims[i] = sample_dims[aug / npool];
            bytes += table_bytes(&pool[idx[i]], dims[i]);
        }
        if (bytes <= p->max_bytes) {
            *k = n;
            return 0;
        }
    }
    return SD_EINVAL;
}

int32_t sample_any_dim(struct rng *g)
{
    double u;

    if (rng_uniform(g) < 0.5)
        return sample_dims[rng_below(g, SAMPLE_NDIMS)];
    u = floor(exp(log(257.0) * rng_uniform(g)));
    if (u > TABLE_DIM_MAX / TABLE_DIM_ALIGN)
        u = TABLE_DIM_MAX / TABLE_DIM_ALIGN;
    return (int32_t)u * TABLE_DIM_ALIGN;
}

/* One table of the draw: an index (of the group `grp`, or of the whole
 * pool for grp < 0) and a width. */
static void draw_one(struct rng *g, size_t npool,
                     const struct sample_groups *gr, const size_t *members,
                     const size_t *first, int grp, size_t *idx, int32_t *dim)
{
    size_t i;

    if (grp < 0)
        i = (size_t)rng_below(g, npool);
    else
        i = members[first[grp] +
                    (size_t)rng_below(g, first[grp + 1] - first[grp])];
    *idx = i;
    *dim = (gr->any_dims >> gr->group[i]) & 1u
               ? sample_any_dim(g)
               : sample_dims[rng_below(g, SAMPLE_NDIMS)];
}

int sample_draw_grouped(struct rng *g, const struct table *pool, size_t npool,
                        const struct sample_groups *gr,
                        const struct sample_params *p, size_t *idx,
                        int32_t *dims, size_t *k)
{
    size_t first[33] = {0}, *members, i;
    int tries, grp, nonempty = 0, rv = SD_EINVAL;

    if (npool == 0 || p->max_tables == 0 || gr->ngroups < 1 || gr->ngroups > 32)
        return SD_EINVAL;
    /* The pool's indices by group: members[first[g] .. first[g + 1]). */
    members = malloc(npool * sizeof(*members));
    if (members == NULL)
        return SD_ENOMEM;
    for (i = 0; i < npool; i++) {
        if (gr->group[i] >= gr->ngroups) {
            free(members);
            return SD_EINVAL;
        }
        first[gr->group[i] + 1]++;
    }
    for (grp = 0; grp < gr->ngroups; grp++) {
        nonempty += first[grp + 1] > 0;
        first[grp + 1] += first[grp];
    }
    {
        size_t fill[32];

        for (grp = 0; grp < gr->ngroups; grp++)
            fill[grp] = first[grp];
        for (i = 0; i < npool; i++)
            members[fill[gr->group[i]]++] = i;
    }
    /* The group is drawn once: redrawing it with the tables would favour
     * the groups whose shards meet the caps more often. */
    grp = -1;
    if (!(rng_uniform(g) < gr->p_mixed)) {
        size_t j = (size_t)rng_below(g, (uint64_t)nonempty);

        for (grp = 0; grp < gr->ngroups; grp++)
            if (first[grp + 1] > first[grp] && j-- == 0)
                break;
    }
    for (tries = 0; tries < DRAW_TRIES; tries++) {
        size_t n = 1 + (size_t)rng_below(g, p->max_tables), j;
        uint64_t bytes = 0;
        double work = 0;

        for (j = 0; j < n; j++) {
            draw_one(g, npool, gr, members, first, grp, &idx[j], &dims[j]);
            bytes += (uint64_t)pool[idx[j]].rows * (uint64_t)dims[j] * 4u;
            work += pool[idx[j]].pooling_factor * dims[j];
        }
        if (bytes <= p->max_bytes &&
            (gr->max_work <= 0 || work <= gr->max_work)) {
            *k = n;
            rv = 0;
            break;
        }
    }
    free(members);
    return rv;
}
