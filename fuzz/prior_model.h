/*
 * A small model of format 4 (the physical prior, `train --features v3`) for
 * fuzz_model and gen_corpus: no prior model is compiled in, so one is
 * trained here, deterministically, on 48 one-table shards of the synthetic
 * generator's shapes timed by a made-up law (a table, its lookups, its
 * bytes).  What is fuzzed is its file image, not its accuracy.
 */
#ifndef SHARDD_FUZZ_PRIOR_MODEL_H
#define SHARDD_FUZZ_PRIOR_MODEL_H

#include <stdlib.h>

#include "planner.h"

#define FUZZ_PRIOR_SHARDS 48

/* The model (free()), or NULL where a step fails. */
static inline struct cost_net *fuzz_prior_model(void)
{
    static const double bins[6] = {0.3, 0.25, 0.2, 0.1, 0.05, 0.02};
    struct table *tb = calloc(FUZZ_PRIOR_SHARDS, sizeof(*tb));
    struct train_sample *s = calloc(FUZZ_PRIOR_SHARDS, sizeof(*s));
    struct synth_params sp;
    struct train_params p;
    struct cost_net *m = NULL;
    struct sd_diag d;
    size_t i, k;

    if (tb == NULL || s == NULL)
        goto out_free;
    synth_params_default(&sp);
    sp.batch_size = 4096;
    for (i = 0; i < FUZZ_PRIOR_SHARDS; i++) {
        if (synth_table_shape(&sp, i, &tb[i]) != 0)
            goto out_free;
        if (tb[i].pooling_factor < 1)
            tb[i].pooling_factor = 1;
        for (k = 0; k < 6; k++)
            tb[i].bins[k] = bins[k];
        s[i].tables = &tb[i];
        s[i].ntables = 1;
        s[i].ms = 0.02 + 4e-6 * tb[i].pooling_factor * 4096 +
                  1e-9 * (double)tb[i].rows * tb[i].dim;
    }
    train_params_default(&p);
    p.max_epochs = 3;
    if (net_extras_parse("v3", &p.extras, &d) != 0 ||
        net_train(&p, s, FUZZ_PRIOR_SHARDS, "cpu/fuzz/4096", 4096, &m, &d) != 0)
        m = NULL;
out_free:
    free(tb);
    free(s);
    return m;
}

#endif
