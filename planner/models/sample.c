/*
 * Profiling samples (neuroshard.md 2.2): the random shards whose measured
 * costs the compute model is trained on (models.h).
 */
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
