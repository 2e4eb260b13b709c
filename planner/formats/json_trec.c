/*
 * TorchRec's description of tables in JSON (formats.h, formats_int.h): the
 * EmbeddingBagConfig of each table in "tables" and, in "constraints", the
 * ParameterConstraints of any of them by table name, as a TorchRec user
 * would dump them (dataclasses.asdict(), enums as "FP16" or
 * "DataType.FP16"; null for a field left at None).  Read into a struct
 * tables_input: rows and dim from num_embeddings and embedding_dim, the
 * pooling factor from the constraints (summed over features), the rest of
 * the constraints kept as read.  tables_input_resolve() then says what was
 * assumed and what could not be applied; here, only keys nobody knows are
 * noted.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "formats/formats.h"
#include "formats/formats_int.h"
#include "problem/problem.h"

/* EmbeddingBagConfig's fields (and shardd's additions, bins and
 * zipf_exponent); those not listed in a branch below do not change a plan. */
static const char *const config_keys[] = {
    "name",
    "num_embeddings",
    "embedding_dim",
    "feature_names",
    "data_type",
    "pooling",
    "weight_init_max",
    "weight_init_min",
    "init_fn",
    "need_pos",
    "num_embeddings_post_pruning",
    "total_num_buckets",
    "use_virtual_table",
    "virtual_table_eviction_policy",
    "bins",
    "zipf_exponent",
};

/* ParameterConstraints' fields. */
static const char *const constraint_keys[] = {
    "sharding_types",      "compute_kernels",   "min_partition",
    "pooling_factors",     "num_poolings",      "batch_sizes",
    "is_weighted",         "cache_params",      "enforce_hbm",
    "stochastic_rounding", "bounds_check_mode", "feature_names",
    "output_dtype",        "device_group",      "key_value_params",
    "use_virtual_table",
};

#define NKEYS(a) (sizeof(a) / sizeof(a[0]))

/* o[key], with null (a Python None) taken as absent. */
static const json_t *get(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);

    return json_is_null(v) ? NULL : v;
}

/* An enum's name as TorchRec's dump may give it: a string, or an object
 * {"value": "FP32"} from a custom encoder; NULL otherwise. */
static const char *enum_str(const json_t *v)
{
    if (json_is_object(v))
        v = json_object_get(v, "value");
    return json_string_value(v);
}

/* A boolean given as true (false, absent or null: not). */
static bool is_true(const json_t *o, const char *key)
{
    return json_is_true(json_object_get(o, key));
}

/* An integer field in [lo, hi] into *out; SD_EINVAL naming it. */
static int int_field(const json_t *o, const char *key, const char *where,
                     const char *name, int64_t lo, int64_t hi, int64_t *out,
                     struct sd_diag *d)
{
    const json_t *v = get(o, key);
    int64_t x;

    if (v == NULL)
        return sd_diag_set(d, SD_EINVAL, "%s \"%s\": %s is missing", where,
                           name, key);
    if (!json__get_integer(v, &x) || x < lo || x > hi)
        return sd_diag_set(d, SD_EINVAL,
                           "%s \"%s\": %s is not an integer in [%lld, %lld]",
                           where, name, key, (long long)lo, (long long)hi);
    *out = x;
    return 0;
}

/* data_type and pooling of one config. */
static int parse_dtype_pooling(const json_t *o, const char *where,
                               struct table *t, struct sd_diag *d)
{
    const json_t *v = get(o, "data_type");
    const char *s;
    int rv;

    if (v != NULL) {
        s = enum_str(v);
        if (s == NULL)
            return sd_diag_set(d, SD_EINVAL,
                               "%s \"%s\": data_type is not a string", where,
                               t->name);
        rv = trec_dtype_parse(s, &t->dtype);
        if (rv == SD_EUNSUPPORTED)
            return sd_diag_set(d, SD_EINVAL,
                               "%s \"%s\": data_type \"%s\" is not planned "
                               "yet: " TREC_DTYPES_PLANNED " are",
                               where, t->name, s);
        if (rv != 0)
            return sd_diag_set(d, SD_EINVAL,
                               "%s \"%s\": data_type \"%s\" is not a "
                               "TorchRec DataType (FP32, FP16, BF16, INT8, "
                               "INT4, INT2, UINT8)",
                               where, t->name, s);
    }
    v = get(o, "pooling");
    if (v == NULL)
        return 0;
    s = enum_str(v);
    if (s != NULL && strrchr(s, '.') != NULL)
        s = strrchr(s, '.') + 1;
    if (s != NULL && (strcasecmp(s, "SUM") == 0 || strcasecmp(s, "MEAN") == 0))
        return 0;
    if (s != NULL && strcasecmp(s, "NONE") == 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s \"%s\": pooling NONE (sequence embeddings) is "
                           "not planned: shardd plans pooled embedding bags",
                           where, t->name);
    return sd_diag_set(d, SD_EINVAL,
                       "%s \"%s\": pooling is not \"SUM\" or \"MEAN\"", where,
                       t->name);
}

/* A list of strings (feature_names): its length, or -1 if it is not one. */
static int64_t string_list_len(const json_t *v)
{
    size_t k;

    if (!json_is_array(v))
        return -1;
    for (k = 0; k < json_array_size(v); k++)
        if (!json_is_string(json_array_get(v, k)))
            return -1;
    return (int64_t)json_array_size(v);
}

/* One EmbeddingBagConfig into t and sp. */
static int parse_config(const json_t *o, size_t idx, struct table *t,
                        struct table_spec *sp, struct input_notes *notes,
                        struct sd_diag *d)
{
    const json_t *v;
    char where[48];
    int64_t x = 0;
    int rv;

    snprintf(where, sizeof(where), "tables[%zu]", idx);
    if (!json_is_object(o))
        return sd_diag_set(d, SD_EINVAL, "%s: not an object", where);
    rv = json__get_name(o, "name", where, t->name, d);
    if (rv == 0)
        rv = int_field(o, "num_embeddings", where, t->name, 1, TABLE_ROWS_MAX,
                       &t->rows, d);
    if (rv == 0)
        rv = int_field(o, "embedding_dim", where, t->name, TABLE_DIM_MIN,
                       TABLE_DIM_MAX, &x, d);
    if (rv != 0)
        return rv;
    t->dim = (int32_t)x;
    if (t->dim % TABLE_DIM_ALIGN != 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s \"%s\": embedding_dim %d is not a multiple of "
                           "%d in [%d, %d]",
                           where, t->name, (int)t->dim, TABLE_DIM_ALIGN,
                           TABLE_DIM_MIN, TABLE_DIM_MAX);
    rv = parse_dtype_pooling(o, where, t, d);
    if (rv != 0)
        return rv;
    v = get(o, "feature_names");
    if (v != NULL && (x = string_list_len(v)) < 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s \"%s\": feature_names is not a list of strings",
                           where, t->name);
    sp->nfeatures = v != NULL ? (int32_t)x : 0;
    sp->torchrec = true;
    if (get(o, "num_embeddings_post_pruning") != NULL)
        sp->c.keys |= TREC_KEY_POST_PRUNING;
    if (get(o, "total_num_buckets") != NULL)
        sp->c.keys |= TREC_KEY_BUCKETS;
    if (is_true(o, "use_virtual_table") ||
        get(o, "virtual_table_eviction_policy") != NULL)
        sp->c.keys |= TREC_KEY_VIRTUAL_TABLE;

    v = get(o, "bins");
    if (v != NULL) {
        rv = json__get_bins(v, where, t->name, t->bins, d);
        if (rv != 0)
            return rv;
        sp->has_bins = true;
    }
    v = get(o, "zipf_exponent");
    if (v != NULL && sp->has_bins)
        return sd_diag_set(d, SD_EINVAL,
                           "%s \"%s\": zipf_exponent is for deriving bins: "
                           "give bins or zipf_exponent, not both",
                           where, t->name);
    if (v != NULL && (rv = json__get_zipf(v, where, t->name, &sp->zipf_s, d)))
        return rv;
    return json__note_unknown(o, config_keys, NKEYS(config_keys), "table",
                              t->name, notes);
}

/* sharding_types (unknown names are errors: the set is small and a typo
 * must not lift a constraint) and compute_kernels (unknown ones noted: the
 * set grows). */
static int parse_types(const json_t *c, const char *where, const char *name,
                       struct trec_constraints *tc, struct input_notes *notes,
                       struct sd_diag *d)
{
    const json_t *v = get(c, "sharding_types");
    const char *s;
    uint32_t bit;
    size_t k;

    if (v != NULL && !json_is_array(v))
        return sd_diag_set(
            d, SD_EINVAL, "%s: sharding_types is not a list of strings", where);
    for (k = 0; v != NULL && k < json_array_size(v); k++) {
        s = enum_str(json_array_get(v, k));
        bit = s != NULL ? trec_sharding_parse(s) : 0;
        if (bit == 0)
            return sd_diag_set(d, SD_EINVAL,
                               "%s: sharding_types[%zu] is not a TorchRec "
                               "sharding type (data_parallel, table_wise, "
                               "column_wise, row_wise, table_row_wise, "
                               "table_column_wise, grid_shard)",
                               where, k);
        tc->sharding_types |= bit;
    }
    v = get(c, "compute_kernels");
    if (v != NULL && !json_is_array(v))
        return sd_diag_set(d, SD_EINVAL,
                           "%s: compute_kernels is not a list of strings",
                           where);
    for (k = 0; v != NULL && k < json_array_size(v); k++) {
        s = enum_str(json_array_get(v, k));
        if (s == NULL)
            return sd_diag_set(d, SD_EINVAL,
                               "%s: compute_kernels[%zu] is not a string",
                               where, k);
        bit = trec_kernel_parse(s);
        tc->compute_kernels |= bit;
        if (bit == 0 &&
            input_notes_add(notes, NOTE_UNKNOWN, name,
                            "constraints.compute_kernels",
                            "compute kernel \"%s\" of %s is not one shardd "
                            "knows: not read",
                            s, name) != 0)
            return SD_ENOMEM;
    }
    return 0;
}

/* A list of numbers >= 0 (integers >= 1 when `integers`, *same telling
 * whether they all equal *first); its length, or -1 when it is not one. */
static int64_t number_list(const json_t *v, bool integers, int64_t *first,
                           bool *same)
{
    size_t k;
    int64_t x;
    double f;

    if (!json_is_array(v))
        return -1;
    for (k = 0; k < json_array_size(v); k++) {
        const json_t *e = json_array_get(v, k);

        if (integers ? !json__get_integer(e, &x) || x < 1
                     : !json_is_number(e) ||
                           !isfinite(f = json_number_value(e)) || f < 0)
            return -1;
        if (integers) {
            if (k == 0)
                *first = x;
            *same = *same && x == *first;
        }
    }
    return (int64_t)json_array_size(v);
}

/* pooling_factors, num_poolings and batch_sizes, and the table's pooling
 * factor from them: sum over features of pooling_factors[f] x
 * num_poolings[f] (TorchRec's batch_inputs per sample), else TorchRec's
 * default 1.0. */
static int parse_pooling(const json_t *c, const char *where, struct table *t,
                         struct trec_constraints *tc, struct sd_diag *d)
{
    const json_t *pf = get(c, "pooling_factors"), *np = get(c, "num_poolings");
    const json_t *bs = get(c, "batch_sizes");
    int64_t first = 0;
    bool same = true;
    double sum;
    size_t k;

    t->pooling_factor = 1.0;
    if (pf != NULL && number_list(pf, false, NULL, &same) < 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: pooling_factors is not a list of numbers "
                           ">= 0",
                           where);
    if (np != NULL && number_list(np, false, NULL, &same) < 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: num_poolings is not a list of numbers >= 0",
                           where);
    if (np != NULL &&
        (pf == NULL || json_array_size(np) != json_array_size(pf)))
        return sd_diag_set(d, SD_EINVAL,
                           "%s: num_poolings has %zu values, pooling_factors "
                           "%zu: one each per feature",
                           where, json_array_size(np),
                           pf != NULL ? json_array_size(pf) : (size_t)0);
    if (pf != NULL && json_array_size(pf) > 0) {
        tc->npooling = (int32_t)json_array_size(pf);
        tc->nnum_poolings = np != NULL ? (int32_t)json_array_size(np) : 0;
        sum = 0;
        for (k = 0; k < json_array_size(pf); k++)
            sum += json_number_value(json_array_get(pf, k)) *
                   (np != NULL ? json_number_value(json_array_get(np, k)) : 1);
        t->pooling_factor = sum;
    }
    if (bs != NULL && number_list(bs, true, &first, &same) < 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: batch_sizes is not a list of integers >= 1",
                           where);
    if (bs != NULL && json_array_size(bs) > 0)
        tc->batch_size = same ? first : -1;
    return 0;
}

/* cache_params and the keys kept for later (TREC_KEY_*). */
static int parse_rest(const json_t *c, const char *where,
                      struct trec_constraints *tc, struct table_spec *sp,
                      struct sd_diag *d)
{
    const json_t *v = get(c, "cache_params"), *lf;
    const char *s;
    int64_t n = 0;

    if (v != NULL) {
        if (!json_is_object(v))
            return sd_diag_set(d, SD_EINVAL,
                               "%s: cache_params is not an object", where);
        tc->cache_params = true;
        lf = get(v, "load_factor");
        if (lf != NULL && json_is_number(lf))
            tc->cache_load_factor = json_number_value(lf);
    }
    v = get(c, "min_partition");
    if (v != NULL && (!json__get_integer(v, &n) || n < 1))
        return sd_diag_set(d, SD_EINVAL,
                           "%s: min_partition is not an integer >= 1", where);
    tc->min_partition = v != NULL ? n : 0;
    tc->is_weighted = is_true(c, "is_weighted");
    v = get(c, "output_dtype");
    s = v != NULL ? enum_str(v) : NULL;
    if (v != NULL && (s == NULL || strcasecmp(s, "FP32") != 0) &&
        (s == NULL || strcasecmp(s, "DataType.FP32") != 0)) {
        tc->keys |= TREC_KEY_OUTPUT_DTYPE;
        snprintf(tc->output_dtype, sizeof(tc->output_dtype), "%s",
                 s != NULL ? s : "?");
    }
    v = get(c, "device_group");
    if (v != NULL) {
        tc->keys |= TREC_KEY_DEVICE_GROUP;
        snprintf(tc->device_group, sizeof(tc->device_group), "%s",
                 json_is_string(v) ? json_string_value(v) : "?");
    }
    if (get(c, "key_value_params") != NULL)
        tc->keys |= TREC_KEY_KEY_VALUE_PARAMS;
    if (is_true(c, "use_virtual_table"))
        tc->keys |= TREC_KEY_VIRTUAL_TABLE;
    if (is_true(c, "enforce_hbm"))
        tc->keys |= TREC_KEY_ENFORCE_HBM;
    if (is_true(c, "stochastic_rounding"))
        tc->keys |= TREC_KEY_STOCHASTIC_ROUNDING;
    v = get(c, "bounds_check_mode");
    if (v != NULL) {
        s = enum_str(v);
        tc->keys |= TREC_KEY_BOUNDS_CHECK;
        snprintf(tc->bounds_check_mode, sizeof(tc->bounds_check_mode), "%s",
                 s != NULL ? s : "?");
    }
    v = get(c, "feature_names");
    if (v != NULL && (n = string_list_len(v)) < 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: feature_names is not a list of strings", where);
    if (v != NULL && sp->nfeatures == 0)
        sp->nfeatures = (int32_t)n;
    return 0;
}

/* The ParameterConstraints c (NULL: none) of table i. */
static int parse_constraints(const json_t *c, struct tables_input *in, size_t i,
                             struct sd_diag *d)
{
    struct table *t = &in->tables[i];
    struct table_spec *sp = &in->specs[i];
    struct trec_constraints *tc = &sp->c;
    char where[TABLE_NAME_MAX + 24];
    int rv;

    snprintf(where, sizeof(where), "constraints[\"%s\"]", t->name);
    t->pooling_factor = 1.0; /* TorchRec's POOLING_FACTOR */
    if (c == NULL)
        return 0;
    if (!json_is_object(c))
        return sd_diag_set(d, SD_EINVAL, "%s: not an object", where);
    tc->given = true;
    rv = parse_types(c, where, t->name, tc, &in->notes, d);
    if (rv == 0)
        rv = parse_pooling(c, where, t, tc, d);
    if (rv == 0)
        rv = parse_rest(c, where, tc, sp, d);
    if (rv == 0)
        rv = json__note_unknown(c, constraint_keys, NKEYS(constraint_keys),
                                "constraints", t->name, &in->notes);
    return rv;
}

/* Every key of the constraints object names a table: a constraint on a
 * misspelt name must not vanish. */
static int check_constraint_names(const json_t *cons,
                                  const struct tables_input *in,
                                  struct sd_diag *d)
{
    const char *key;
    const json_t *v;
    size_t i;

    json_object_foreach((json_t *)cons, key, v)
    {
        for (i = 0; i < in->n && strcmp(in->tables[i].name, key) != 0; i++)
            ;
        if (i == in->n)
            return sd_diag_set(d, SD_EINVAL,
                               "constraints[\"%s\"]: no table has that name",
                               key);
    }
    return 0;
}

int json__parse_torchrec(const json_t *root, const json_t *arr,
                         struct tables_input *in, struct sd_diag *d)
{
    const json_t *cons = get(root, "constraints");
    size_t i;
    int rv = 0;

    if (cons != NULL && !json_is_object(cons))
        return sd_diag_set(
            d, SD_EINVAL,
            "constraints is not an object of ParameterConstraints "
            "by table name");
    for (i = 0; i < in->n && rv == 0; i++)
        rv = parse_config(json_array_get(arr, i), i, &in->tables[i],
                          &in->specs[i], &in->notes, d);
    if (rv == 0 && cons != NULL)
        rv = check_constraint_names(cons, in, d);
    for (i = 0; i < in->n && rv == 0; i++)
        rv = parse_constraints(
            cons != NULL ? get(cons, in->tables[i].name) : NULL, in, i, d);
    return rv;
}
