/*
 * Inputs as users describe them <-> shardd.v1 messages (wire.h): tables in
 * shardd's form or TorchRec's (TorchRecTable) into a struct tables_input
 * and back, notes (InputNote) both ways, and traces (TableTrace) in.  The
 * conversion of each field names it the way the request spells it
 * (`torchrec_tables[2] "t2": embedding_dim 6 is not a multiple of 4`);
 * what a table means once read is the planner's (tables_input_resolve()).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "wire.h"
#include "wire_int.h"

#define TREC "torchrec_tables"

/* ---------------------------------------------------------------------- */
/* TorchRec's tables in                                                    */

/* data_type and pooling of a TorchRecTable. */
static int trec_dtype_in(const Shardd__V1__TorchRecTable *m, size_t i,
                         struct table *t, struct sd_diag *d)
{
    const char *s = m->data_type != NULL ? m->data_type : "";
    const char *p = m->pooling != NULL ? m->pooling : "";
    int rv;

    if (s[0] != '\0') {
        rv = trec_dtype_parse(s, &t->dtype);
        if (rv == SD_EUNSUPPORTED)
            return sd_diag_set(d, SD_EINVAL,
                               TREC "[%zu] \"%s\": data_type \"%s\" is not "
                                    "planned yet: " TREC_DTYPES_PLANNED " are",
                               i, t->name, s);
        if (rv != 0)
            return sd_diag_set(d, SD_EINVAL,
                               TREC "[%zu] \"%s\": data_type \"%s\" is not a "
                                    "TorchRec DataType (FP32, FP16, BF16, "
                                    "INT8, INT4, INT2, UINT8)",
                               i, t->name, s);
    }
    if (strrchr(p, '.') != NULL)
        p = strrchr(p, '.') + 1;
    if (p[0] == '\0' || strcasecmp(p, "SUM") == 0 || strcasecmp(p, "MEAN") == 0)
        return 0;
    if (strcasecmp(p, "NONE") == 0)
        return sd_diag_set(d, SD_EINVAL,
                           TREC "[%zu] \"%s\": pooling NONE (sequence "
                                "embeddings) is not planned: shardd plans "
                                "pooled embedding bags",
                           i, t->name);
    return sd_diag_set(d, SD_EINVAL,
                       TREC "[%zu] \"%s\": pooling is not \"SUM\" or \"MEAN\"",
                       i, t->name);
}

/* sharding_types and compute_kernels (unknown kernels noted). */
static int trec_types_in(const Shardd__V1__TorchRecConstraints *c, size_t i,
                         const char *name, struct trec_constraints *tc,
                         struct input_notes *notes, struct sd_diag *d)
{
    uint32_t bit;
    size_t k;

    for (k = 0; k < c->n_sharding_types; k++) {
        bit = trec_sharding_parse(c->sharding_types[k]);
        if (bit == 0)
            return sd_diag_set(d, SD_EINVAL,
                               TREC "[%zu] \"%s\": "
                                    "constraints.sharding_types[%zu] \"%s\" "
                                    "is not a TorchRec sharding type "
                                    "(data_parallel, table_wise, "
                                    "column_wise, row_wise, table_row_wise, "
                                    "table_column_wise, grid_shard)",
                               i, name, k, c->sharding_types[k]);
        tc->sharding_types |= bit;
    }
    for (k = 0; k < c->n_compute_kernels; k++) {
        bit = trec_kernel_parse(c->compute_kernels[k]);
        tc->compute_kernels |= bit;
        if (bit == 0 &&
            input_notes_add(notes, NOTE_UNKNOWN, name,
                            "constraints.compute_kernels",
                            "compute kernel \"%s\" of %s is not one shardd "
                            "knows: not read",
                            c->compute_kernels[k], name) != 0)
            return sd_diag_set(d, SD_ENOMEM, "out of memory");
    }
    return 0;
}

/* The pooling factor from pooling_factors x num_poolings, and the batch
 * sizes. */
static int trec_pooling_in(const Shardd__V1__TorchRecConstraints *c, size_t i,
                           struct table *t, struct trec_constraints *tc,
                           struct sd_diag *d)
{
    double sum = 0;
    size_t k;

    if (c->n_num_poolings != 0 && c->n_num_poolings != c->n_pooling_factors)
        return sd_diag_set(d, SD_EINVAL,
                           TREC "[%zu] \"%s\": constraints.num_poolings has "
                                "%zu values, pooling_factors %zu: one each "
                                "per feature",
                           i, t->name, c->n_num_poolings, c->n_pooling_factors);
    for (k = 0; k < c->n_pooling_factors; k++) {
        double pf = c->pooling_factors[k];
        double np = c->n_num_poolings ? c->num_poolings[k] : 1.0;

        if (!isfinite(pf) || pf < 0 || !isfinite(np) || np < 0)
            return sd_diag_set(d, SD_EINVAL,
                               TREC "[%zu] \"%s\": constraints.pooling_factors"
                                    "[%zu] or num_poolings[%zu] is not a "
                                    "number >= 0",
                               i, t->name, k, k);
        sum += pf * np;
    }
    if (c->n_pooling_factors > 0)
        t->pooling_factor = sum;
    tc->npooling = (int32_t)c->n_pooling_factors;
    tc->nnum_poolings = (int32_t)c->n_num_poolings;
    for (k = 0; k < c->n_batch_sizes; k++) {
        if (c->batch_sizes[k] < 1)
            return sd_diag_set(d, SD_EINVAL,
                               TREC "[%zu] \"%s\": constraints.batch_sizes"
                                    "[%zu] is %lld, not >= 1",
                               i, t->name, k, (long long)c->batch_sizes[k]);
        if (k == 0)
            tc->batch_size = c->batch_sizes[0];
        else if (c->batch_sizes[k] != c->batch_sizes[0])
            tc->batch_size = -1;
    }
    return 0;
}

/* A TorchRecConstraints (NULL: none) into sp. */
static int trec_constraints_in(const Shardd__V1__TorchRecConstraints *c,
                               size_t i, struct table *t, struct table_spec *sp,
                               struct input_notes *notes, struct sd_diag *d)
{
    struct trec_constraints *tc = &sp->c;
    const char *od;
    int rv;

    t->pooling_factor = 1.0; /* TorchRec's POOLING_FACTOR */
    if (c == NULL)
        return 0;
    tc->given = true;
    rv = trec_types_in(c, i, t->name, tc, notes, d);
    if (rv == 0)
        rv = trec_pooling_in(c, i, t, tc, d);
    if (rv != 0)
        return rv;
    if (c->min_partition < 0)
        return sd_diag_set(d, SD_EINVAL,
                           TREC "[%zu] \"%s\": constraints.min_partition is "
                                "negative",
                           i, t->name);
    tc->min_partition = c->min_partition;
    tc->is_weighted = c->is_weighted;
    if (c->cache_params != NULL) {
        tc->cache_params = true;
        tc->cache_load_factor = c->cache_params->load_factor;
    }
    od = c->output_dtype != NULL ? c->output_dtype : "";
    if (od[0] != '\0' && strcasecmp(od, "FP32") != 0 &&
        strcasecmp(od, "DataType.FP32") != 0) {
        tc->keys |= TREC_KEY_OUTPUT_DTYPE;
        snprintf(tc->output_dtype, sizeof(tc->output_dtype), "%s", od);
    }
    if (c->device_group != NULL && c->device_group[0] != '\0') {
        tc->keys |= TREC_KEY_DEVICE_GROUP;
        snprintf(tc->device_group, sizeof(tc->device_group), "%s",
                 c->device_group);
    }
    if (c->has_key_value_params)
        tc->keys |= TREC_KEY_KEY_VALUE_PARAMS;
    if (c->use_virtual_table)
        tc->keys |= TREC_KEY_VIRTUAL_TABLE;
    if (c->enforce_hbm)
        tc->keys |= TREC_KEY_ENFORCE_HBM;
    if (c->stochastic_rounding)
        tc->keys |= TREC_KEY_STOCHASTIC_ROUNDING;
    if (c->bounds_check_mode != NULL && c->bounds_check_mode[0] != '\0') {
        tc->keys |= TREC_KEY_BOUNDS_CHECK;
        snprintf(tc->bounds_check_mode, sizeof(tc->bounds_check_mode), "%s",
                 c->bounds_check_mode);
    }
    if (sp->nfeatures == 0)
        sp->nfeatures = (int32_t)c->n_feature_names;
    return 0;
}

/* One TorchRecTable into t and sp. */
static int trec_table_in(const Shardd__V1__TorchRecTable *m, size_t i,
                         struct table *t, struct table_spec *sp,
                         struct input_notes *notes, struct sd_diag *d)
{
    int rv;

    rv = wire__name_in(m->name, TREC, i, t->name, d);
    if (rv != 0)
        return rv;
    if (m->num_embeddings < 1 || m->num_embeddings > TABLE_ROWS_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           TREC "[%zu] \"%s\": num_embeddings %lld is not in "
                                "[1, %lld]",
                           i, t->name, (long long)m->num_embeddings,
                           (long long)TABLE_ROWS_MAX);
    if (m->embedding_dim < TABLE_DIM_MIN || m->embedding_dim > TABLE_DIM_MAX ||
        m->embedding_dim % TABLE_DIM_ALIGN != 0)
        return sd_diag_set(d, SD_EINVAL,
                           TREC "[%zu] \"%s\": embedding_dim %d is not a "
                                "multiple of %d in [%d, %d]",
                           i, t->name, (int)m->embedding_dim, TABLE_DIM_ALIGN,
                           TABLE_DIM_MIN, TABLE_DIM_MAX);
    t->rows = m->num_embeddings;
    t->dim = m->embedding_dim;
    rv = trec_dtype_in(m, i, t, d);
    if (rv == 0)
        rv = wire__bins_in(m->bins, m->n_bins, m->zipf_exponent, TREC, i, t, sp,
                           d);
    if (rv != 0)
        return rv;
    sp->torchrec = true;
    sp->nfeatures = (int32_t)m->n_feature_names;
    if (m->num_embeddings_post_pruning != 0)
        sp->c.keys |= TREC_KEY_POST_PRUNING;
    if (m->total_num_buckets != 0)
        sp->c.keys |= TREC_KEY_BUCKETS;
    if (m->use_virtual_table)
        sp->c.keys |= TREC_KEY_VIRTUAL_TABLE;
    return trec_constraints_in(m->constraints, i, t, sp, notes, d);
}

int wire_tables_input_in(const struct wire_limits *l,
                         Shardd__V1__Table *const *tables, size_t n,
                         Shardd__V1__TorchRecTable *const *trec, size_t ntrec,
                         struct tables_input *out, struct sd_diag *d)
{
    struct tables_input in;
    size_t i, total = n + ntrec;
    int rv = 0;

    if (n != 0 && ntrec != 0)
        return sd_diag_set(d, SD_EINVAL,
                           "tables and torchrec_tables: give the tables in "
                           "one of them, not both");
    if (total == 0)
        return sd_diag_set(d, SD_EINVAL, "tables: at least one is needed");
    if (total > l->max_tables)
        return sd_diag_set(d, SD_ERANGE,
                           "%s: %zu tables, more than this server's limit "
                           "of %zu",
                           n ? "tables" : TREC, total, l->max_tables);
    if (tables_input_init(&in, n ? TABLES_FORM_NATIVE : TABLES_FORM_TORCHREC,
                          total) != 0)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    for (i = 0; i < total && rv == 0; i++) {
        rv = n ? wire__table_in(tables[i], i, &in.tables[i], &in.specs[i], d)
               : trec_table_in(trec[i], i, &in.tables[i], &in.specs[i],
                               &in.notes, d);
        if (rv == 0 && in.specs[i].has_bins)
            table_normalize_bins(&in.tables[i]);
    }
    /* Everything but the bins still to derive (zero until then) is
     * checked now, before the tables are used (pins, capacities). */
    if (rv == 0)
        rv = table_validate_all(in.tables, in.n, d);
    if (rv != 0) {
        tables_input_destroy(&in);
        return rv;
    }
    *out = in;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Tables out                                                              */

/* shardd's Table of each table: bins left out where they are to be
 * derived. */
static Shardd__V1__Table **native_out(struct wire_arena *a,
                                      const struct tables_input *in)
{
    Shardd__V1__Table **ptrs = wire_tables_out(a, in->tables, in->n);
    size_t i;

    for (i = 0; ptrs != NULL && i < in->n; i++) {
        if (in->specs[i].has_bins)
            continue;
        ptrs[i]->n_bins = 0;
        ptrs[i]->bins = NULL;
        ptrs[i]->zipf_exponent = in->specs[i].zipf_s;
    }
    return ptrs;
}

/* A copy of s in the arena (NULL when out of memory). */
static char *arena_str(struct wire_arena *a, const char *s)
{
    size_t len = strlen(s);
    char *p = wire_alloc(a, len + 1, 1);

    if (p != NULL)
        memcpy(p, s, len + 1);
    return p;
}

/* The names of bits as an array of arena strings; *n set. */
static char **bit_names_out(struct wire_arena *a, uint32_t bits,
                            uint32_t (*parse)(const char *),
                            void (*names)(uint32_t, char *, size_t), size_t *n)
{
    char all[256], *tok, *save = NULL, **out;
    size_t k = 0;

    names(bits, all, sizeof(all));
    out = wire_alloc(a, 32, sizeof(*out));
    if (out == NULL)
        return NULL;
    for (tok = strtok_r(all, ", ", &save); tok != NULL && k < 32;
         tok = strtok_r(NULL, ", ", &save))
        if (parse(tok) != 0 && (out[k++] = arena_str(a, tok)) == NULL)
            return NULL;
    *n = k;
    return out;
}

/*
 * A table's constraints as TorchRecConstraints.  What the planner reads is
 * kept exactly: the pooling factor (already summed over features) goes as
 * the first of as many pooling factors as were given, the others 0, with
 * num_poolings 1; batch sizes that differed go as [1, 2].
 */
static Shardd__V1__TorchRecConstraints *
constraints_out(struct wire_arena *a, const struct table *t,
                const struct trec_constraints *tc)
{
    Shardd__V1__TorchRecConstraints *c = wire_alloc(a, 1, sizeof(*c));
    int32_t k;

    if (c == NULL)
        return NULL;
    shardd__v1__torch_rec_constraints__init(c);
    c->sharding_types =
        bit_names_out(a, tc->sharding_types, trec_sharding_parse,
                      trec_sharding_names, &c->n_sharding_types);
    c->compute_kernels =
        bit_names_out(a, tc->compute_kernels, trec_kernel_parse,
                      trec_kernel_names, &c->n_compute_kernels);
    c->pooling_factors = wire_alloc(a, (size_t)tc->npooling, sizeof(double));
    c->num_poolings = wire_alloc(a, (size_t)tc->nnum_poolings, sizeof(double));
    c->batch_sizes = wire_alloc(a, 2, sizeof(int64_t));
    if (c->sharding_types == NULL || c->compute_kernels == NULL ||
        c->pooling_factors == NULL || c->num_poolings == NULL ||
        c->batch_sizes == NULL)
        return NULL;
    c->n_pooling_factors = (size_t)tc->npooling;
    if (tc->npooling > 0)
        c->pooling_factors[0] = t->pooling_factor;
    c->n_num_poolings = (size_t)tc->nnum_poolings;
    for (k = 0; k < tc->nnum_poolings; k++)
        c->num_poolings[k] = 1.0;
    c->batch_sizes[0] = tc->batch_size < 0 ? 1 : tc->batch_size;
    c->batch_sizes[1] = 2;
    c->n_batch_sizes = tc->batch_size < 0 ? 2 : tc->batch_size > 0;
    c->min_partition = tc->min_partition;
    c->is_weighted = tc->is_weighted;
    if (tc->cache_params) {
        c->cache_params = wire_alloc(a, 1, sizeof(*c->cache_params));
        if (c->cache_params == NULL)
            return NULL;
        shardd__v1__torch_rec_cache_params__init(c->cache_params);
        c->cache_params->load_factor = tc->cache_load_factor;
    }
    c->output_dtype = (char *)tc->output_dtype;
    c->device_group = (char *)tc->device_group;
    c->has_key_value_params = (tc->keys & TREC_KEY_KEY_VALUE_PARAMS) != 0;
    c->use_virtual_table = (tc->keys & TREC_KEY_VIRTUAL_TABLE) != 0;
    c->enforce_hbm = (tc->keys & TREC_KEY_ENFORCE_HBM) != 0;
    c->stochastic_rounding = (tc->keys & TREC_KEY_STOCHASTIC_ROUNDING) != 0;
    c->bounds_check_mode = (char *)tc->bounds_check_mode;
    return c;
}

/* TorchRec's TorchRecTable of each table. */
static Shardd__V1__TorchRecTable **trec_out(struct wire_arena *a,
                                            const struct tables_input *in)
{
    Shardd__V1__TorchRecTable *msgs = wire_alloc(a, in->n, sizeof(*msgs));
    Shardd__V1__TorchRecTable **ptrs = wire_alloc(a, in->n, sizeof(*ptrs));
    size_t i, k;

    if (msgs == NULL || ptrs == NULL)
        return NULL;
    for (i = 0; i < in->n; i++) {
        const struct table *t = &in->tables[i];
        const struct table_spec *sp = &in->specs[i];
        Shardd__V1__TorchRecTable *m = &msgs[i];

        shardd__v1__torch_rec_table__init(m);
        m->name = (char *)t->name;
        m->num_embeddings = t->rows;
        m->embedding_dim = t->dim;
        m->data_type = (char *)trec_dtype_name(t->dtype);
        /* Only the count of the features matters: unnamed ones. */
        m->n_feature_names = (size_t)sp->nfeatures;
        m->feature_names = wire_alloc(a, m->n_feature_names, sizeof(char *));
        if (m->feature_names == NULL)
            return NULL;
        for (k = 0; k < m->n_feature_names; k++)
            m->feature_names[k] = (char *)"";
        if (sp->has_bins) {
            m->n_bins = TABLE_NBINS;
            m->bins = (double *)t->bins; /* packing only reads it */
        }
        m->zipf_exponent = sp->has_bins ? 0 : sp->zipf_s;
        m->num_embeddings_post_pruning =
            (sp->c.keys & TREC_KEY_POST_PRUNING) ? t->rows : 0;
        m->total_num_buckets = (sp->c.keys & TREC_KEY_BUCKETS) ? 1 : 0;
        m->use_virtual_table = (sp->c.keys & TREC_KEY_VIRTUAL_TABLE) != 0;
        if (sp->c.given &&
            (m->constraints = constraints_out(a, t, &sp->c)) == NULL)
            return NULL;
        ptrs[i] = m;
    }
    return ptrs;
}

int wire_tables_input_out(struct wire_arena *a, const struct tables_input *in,
                          Shardd__V1__Table ***tables, size_t *ntables,
                          Shardd__V1__TorchRecTable ***trec, size_t *ntrec)
{
    *ntables = *ntrec = 0;
    *tables = NULL;
    *trec = NULL;
    if (in->form == TABLES_FORM_TORCHREC) {
        *trec = trec_out(a, in);
        *ntrec = in->n;
        return *trec != NULL ? 0 : SD_ENOMEM;
    }
    *tables = native_out(a, in);
    *ntables = in->n;
    return *tables != NULL ? 0 : SD_ENOMEM;
}

/* ---------------------------------------------------------------------- */
/* Notes                                                                   */

Shardd__V1__InputNote **wire_notes_out(struct wire_arena *a,
                                       const struct input_notes *notes)
{
    size_t n = notes != NULL ? notes->n : 0, i;
    Shardd__V1__InputNote *msgs = wire_alloc(a, n, sizeof(*msgs));
    Shardd__V1__InputNote **ptrs = wire_alloc(a, n, sizeof(*ptrs));

    if (msgs == NULL || ptrs == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        const struct input_note *nt = &notes->v[i];

        shardd__v1__input_note__init(&msgs[i]);
        switch (nt->kind) {
        case NOTE_ASSUMED:
            msgs[i].kind = SHARDD__V1__NOTE_KIND__NOTE_KIND_ASSUMED;
            break;
        case NOTE_APPLIED:
            msgs[i].kind = SHARDD__V1__NOTE_KIND__NOTE_KIND_APPLIED;
            break;
        case NOTE_NOT_APPLIED:
            msgs[i].kind = SHARDD__V1__NOTE_KIND__NOTE_KIND_NOT_APPLIED;
            break;
        case NOTE_UNKNOWN:
            msgs[i].kind = SHARDD__V1__NOTE_KIND__NOTE_KIND_UNKNOWN;
            break;
        }
        msgs[i].table = (char *)nt->table;
        msgs[i].field = (char *)nt->field;
        msgs[i].message = (char *)nt->text;
        ptrs[i] = &msgs[i];
    }
    return ptrs;
}

int wire_notes_in(Shardd__V1__InputNote *const *in, size_t n,
                  struct input_notes *out)
{
    enum note_kind kind;
    size_t i;

    for (i = 0; i < n; i++) {
        switch (in[i]->kind) {
        case SHARDD__V1__NOTE_KIND__NOTE_KIND_ASSUMED:
            kind = NOTE_ASSUMED;
            break;
        case SHARDD__V1__NOTE_KIND__NOTE_KIND_APPLIED:
            kind = NOTE_APPLIED;
            break;
        case SHARDD__V1__NOTE_KIND__NOTE_KIND_NOT_APPLIED:
            kind = NOTE_NOT_APPLIED;
            break;
        default:
            kind = NOTE_UNKNOWN;
            break;
        }
        if (input_notes_add(out, kind, in[i]->table, in[i]->field, "%s",
                            in[i]->message != NULL ? in[i]->message : "") != 0)
            return SD_ENOMEM;
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Traces in                                                               */

/* Bag starts from offsets or lengths into t->offsets (owned). */
static int bags_in(const Shardd__V1__TableTrace *m, const char *where,
                   struct trace *t, struct sd_diag *d)
{
    size_t b, nb;

    if (m->n_offsets != 0 && m->n_lengths != 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s \"%s\": give offsets or lengths, not both",
                           where, t->name);
    if (m->n_offsets == 0 && m->n_lengths == 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s \"%s\": offsets or lengths is needed", where,
                           t->name);
    nb = m->n_offsets ? m->n_offsets - 1 : m->n_lengths;
    t->nbags = (int64_t)nb;
    t->offsets = malloc((nb + 1) * sizeof(*t->offsets));
    if (t->offsets == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    if (m->n_offsets != 0) {
        memcpy(t->offsets, m->offsets, (nb + 1) * sizeof(*t->offsets));
        return 0;
    }
    t->offsets[0] = 0;
    for (b = 0; b < nb; b++) {
        if (m->lengths[b] < 0 || m->lengths[b] > INT64_MAX - t->offsets[b])
            return sd_diag_set(d, SD_EINVAL, "%s \"%s\": lengths[%zu] is %lld",
                               where, t->name, b, (long long)m->lengths[b]);
        t->offsets[b + 1] = t->offsets[b] + m->lengths[b];
    }
    return 0;
}

int wire_trace_in(const Shardd__V1__TableTrace *m, size_t i, struct trace *out,
                  struct sd_diag *d)
{
    struct trace t;
    char where[32];
    int64_t top = -1;
    size_t j;
    int rv;

    memset(&t, 0, sizeof(t));
    snprintf(where, sizeof(where), "traces[%zu]", i);
    rv = wire__name_in(m->name, "traces", i, t.name, d);
    if (rv == 0)
        rv = bags_in(m, where, &t, d);
    if (rv != 0)
        goto out_destroy;
    t.nindices = (int64_t)m->n_indices;
    t.indices = malloc((m->n_indices ? m->n_indices : 1) * sizeof(*t.indices));
    if (t.indices == NULL) {
        rv = sd_diag_set(d, SD_ENOMEM, "out of memory");
        goto out_destroy;
    }
    for (j = 0; j < m->n_indices; j++) {
        t.indices[j] = m->indices[j];
        top = m->indices[j] > top ? m->indices[j] : top;
    }
    t.dim = m->dim;
    t.rows = m->rows;
    if (t.rows == 0)
        t.rows = top + 1 > 100 ? top + 1 : 100;
    rv = trace_validate_at(&t, where, d);
    if (rv != 0) {
        rv = SD_EINVAL; /* a request's field, not a file */
        goto out_destroy;
    }
    *out = t;
    return 0;

out_destroy:
    trace_destroy(&t);
    return rv;
}
