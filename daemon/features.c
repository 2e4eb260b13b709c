/*
 * The Planner's Features method (planner.proto): one batch of real lookups
 * per table, or tables given by their statistics alone, into tables with
 * their access histogram and pooling factor, ready for Plan.  A trace's
 * features are computed exactly (trace_features()); a table without bins
 * is derived at the request's batch the way Plan derives it
 * (tables_input_resolve()), with the same notes.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "service_int.h"
#include "shardd/v1/planner.pb-c.h"
#include "wire.h"

/* The batch of derived histograms: the request's, else the configured
 * default, else the batch of the default profile's model, as Plan. */
static int features_batch(struct svc *s, const struct wire_limits *l,
                          int64_t asked, int64_t *out, struct sd_diag *d)
{
    struct dmodel *dm = NULL;
    struct sd_diag why;

    if (asked < 0 || asked > WIRE_MAX_BATCH)
        return sd_diag_set(d, SD_EINVAL,
                           "batch_size: %lld is not in [1, 2^30] (0 = the "
                           "server's default)",
                           (long long)asked);
    *out = asked != 0 ? asked : l->default_batch;
    if (*out != 0)
        return 0;
    *out = SVC_DEFAULT_BATCH;
    if (models_acquire(&s->models, NULL, &dm, &why) == 0) {
        *out = dm->net->batch_size;
        dmodel_release(dm);
    }
    return 0;
}

/* The traces' tables into tables[0 .. n). */
static int traces_in(Shardd__V1__TableTrace *const *traces, size_t n,
                     struct table *tables, struct sd_diag *d)
{
    struct trace t;
    size_t i;
    int rv;

    for (i = 0; i < n; i++) {
        rv = wire_trace_in(traces[i], i, &t, d);
        if (rv != 0)
            return rv;
        rv = trace_to_table(&t, &tables[i]);
        trace_destroy(&t);
        if (rv != 0)
            return sd_diag_set(d, rv, "traces[%zu]: %s", i, sd_strerror(rv));
    }
    return 0;
}

/* The FeaturesResponse of tables and notes, packed into *resp. */
static int features_reply(const struct table *tables, size_t n,
                          const struct input_notes *notes, uint8_t **resp,
                          size_t *resp_len, struct sd_diag *d)
{
    Shardd__V1__FeaturesResponse out = SHARDD__V1__FEATURES_RESPONSE__INIT;
    struct wire_arena arena = WIRE_ARENA_INIT;
    int rv;

    out.tables = wire_tables_out(&arena, tables, n);
    out.n_tables = n;
    out.notes = wire_notes_out(&arena, notes);
    out.n_notes = notes->n;
    if (out.tables == NULL || out.notes == NULL)
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
    else
        rv = wire_pack(&out.base, resp, resp_len, d);
    wire_arena_free(&arena);
    return rv;
}

static int features_request(struct svc *s, const struct sd_config *cfg,
                            const Shardd__V1__FeaturesRequest *rq,
                            uint8_t **resp, size_t *resp_len, struct sd_diag *d)
{
    struct tables_input in = {0};
    struct wire_limits lim;
    struct table *all = NULL;
    size_t nt = rq->n_traces, nrest = rq->n_tables + rq->n_torchrec_tables;
    int64_t batch = 0;
    int rv;

    svc_limits(cfg, &lim);
    if (nt + nrest == 0)
        return sd_diag_set(d, SD_EINVAL,
                           "traces, tables or torchrec_tables: at least one "
                           "table is needed");
    if (nt + nrest > lim.max_tables)
        return sd_diag_set(d, SD_ERANGE,
                           "traces and tables: %zu, more than this server's "
                           "limit of %zu",
                           nt + nrest, lim.max_tables);
    rv = features_batch(s, &lim, rq->batch_size, &batch, d);
    if (rv == 0 && nrest > 0)
        rv = wire_tables_input_in(&lim, rq->tables, rq->n_tables,
                                  rq->torchrec_tables, rq->n_torchrec_tables,
                                  &in, d);
    if (rv == 0 && nrest > 0)
        rv = tables_input_resolve(&in, batch, d);
    if (rv != 0)
        goto out_input;
    all = calloc(nt + nrest, sizeof(*all));
    if (all == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_input;
    }
    rv = traces_in(rq->traces, nt, all, d);
    if (rv == 0 && nrest > 0)
        memcpy(all + nt, in.tables, nrest * sizeof(*all));
    if (rv == 0)
        rv = table_validate_all(all, nt + nrest, d);
    if (rv == 0)
        rv = features_reply(all, nt + nrest, &in.notes, resp, resp_len, d);
    free(all);
out_input:
    tables_input_destroy(&in);
    return rv;
}

int svc_features(struct svc *s, const struct svc_call *call, const uint8_t *req,
                 size_t len, uint8_t **resp, size_t *resp_len,
                 struct sd_diag *d)
{
    Shardd__V1__FeaturesRequest *rq;
    struct conf_snap *cf;
    int rv;

    (void)call;
    rq = shardd__v1__features_request__unpack(NULL, len, req);
    if (rq == NULL)
        return sd_diag_set(d, SD_EFORMAT,
                           "FeaturesRequest: not a valid message");
    cf = svc_conf(s);
    rv = features_request(s, &cf->c, rq, resp, resp_len, d);
    conf_snap_unref(cf);
    shardd__v1__features_request__free_unpacked(rq, NULL);
    return rv;
}
