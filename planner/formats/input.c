/*
 * Tables as a user describes them (formats.h): notes, TorchRec's names of
 * sharding types, kernels and data types, and tables_input_resolve(), which
 * turns what was read (shardd's form or TorchRec's, from JSON here or from a
 * message in wire/) into tables the planner takes, saying what it assumed
 * and what it could not apply.  The readers of each form fill a struct
 * tables_input; everything after reading is shared.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "formats/formats.h"
#include "problem/problem.h"

/* ---------------------------------------------------------------------- */
/* Notes                                                                   */

static void copy_str(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src != NULL ? src : "");
}

/* Cuts s before a UTF-8 sequence that vsnprintf() left incomplete, so
 * that a note always makes a JSON string. */
static void utf8_trim(char *s)
{
    size_t len = strlen(s), i = len, need;
    unsigned char c;

    while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80 && len - i < 3)
        i--;
    if (i == 0)
        return;
    c = (unsigned char)s[i - 1];
    if (c < 0xC0)
        return;
    need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (len - (i - 1) < need)
        s[i - 1] = '\0';
}

int input_notes_add(struct input_notes *ns, enum note_kind kind,
                    const char *table, const char *field, const char *fmt, ...)
{
    struct input_note *nt;
    va_list ap;

    if (ns->n == ns->cap) {
        size_t cap = ns->cap ? ns->cap * 2 : 16;
        struct input_note *v = realloc(ns->v, cap * sizeof(*v));

        if (v == NULL)
            return SD_ENOMEM;
        ns->v = v;
        ns->cap = cap;
    }
    nt = &ns->v[ns->n++];
    nt->kind = kind;
    copy_str(nt->table, sizeof(nt->table), table);
    copy_str(nt->field, sizeof(nt->field), field);
    va_start(ap, fmt);
    vsnprintf(nt->text, sizeof(nt->text), fmt, ap);
    va_end(ap);
    utf8_trim(nt->text);
    return 0;
}

int input_notes_append(struct input_notes *dst, const struct input_notes *src)
{
    size_t i;

    for (i = 0; i < src->n; i++)
        if (input_notes_add(dst, src->v[i].kind, src->v[i].table,
                            src->v[i].field, "%s", src->v[i].text) != 0)
            return SD_ENOMEM;
    return 0;
}

void input_notes_destroy(struct input_notes *ns)
{
    if (ns == NULL)
        return;
    free(ns->v);
    memset(ns, 0, sizeof(*ns));
}

const char *note_kind_name(enum note_kind k)
{
    switch (k) {
    case NOTE_ASSUMED:
        return "assumed";
    case NOTE_APPLIED:
        return "applied";
    case NOTE_NOT_APPLIED:
        return "not applied";
    case NOTE_UNKNOWN:
        return "unknown";
    }
    return "?";
}

/* ---------------------------------------------------------------------- */
/* TorchRec's names                                                        */

struct trec_name {
    const char *name;
    uint32_t bit;
};

static const struct trec_name shardings[] = {
    {"data_parallel", TREC_ST_DATA_PARALLEL},
    {"table_wise", TREC_ST_TABLE_WISE},
    {"column_wise", TREC_ST_COLUMN_WISE},
    {"row_wise", TREC_ST_ROW_WISE},
    {"table_row_wise", TREC_ST_TABLE_ROW_WISE},
    {"table_column_wise", TREC_ST_TABLE_COLUMN_WISE},
    {"grid_shard", TREC_ST_GRID_SHARD},
};

static const struct trec_name kernels[] = {
    {"dense", TREC_CK_DENSE},
    {"fused", TREC_CK_FUSED},
    {"fused_uvm", TREC_CK_FUSED_UVM},
    {"fused_uvm_caching", TREC_CK_FUSED_UVM_CACHING},
    {"quant", TREC_CK_QUANT},
    {"quant_uvm", TREC_CK_QUANT_UVM},
    {"quant_uvm_caching", TREC_CK_QUANT_UVM_CACHING},
    {"key_value", TREC_CK_KEY_VALUE},
    {"ssd_virtual_table", TREC_CK_SSD_VIRTUAL_TABLE},
    {"dram_virtual_table", TREC_CK_DRAM_VIRTUAL_TABLE},
};

#define NNAMES(a) (sizeof(a) / sizeof(a[0]))

/* A name's bit, case-insensitively, with or without an enum prefix
 * ("ShardingType.TABLE_WISE" is how str() prints TorchRec's enum). */
static uint32_t name_bit(const struct trec_name *names, size_t n, const char *s)
{
    const char *dot = strrchr(s, '.');
    size_t i;

    if (dot != NULL)
        s = dot + 1;
    for (i = 0; i < n; i++)
        if (strcasecmp(s, names[i].name) == 0)
            return names[i].bit;
    return 0;
}

static void bit_names(const struct trec_name *names, size_t n, uint32_t bits,
                      char *buf, size_t size)
{
    size_t i, len = 0;

    if (size == 0)
        return;
    buf[0] = '\0';
    for (i = 0; i < n; i++) {
        if (!(bits & names[i].bit))
            continue;
        len += (size_t)snprintf(buf + (len < size ? len : size - 1),
                                len < size ? size - len : 1, "%s%s",
                                len ? ", " : "", names[i].name);
    }
}

uint32_t trec_sharding_parse(const char *s)
{
    return name_bit(shardings, NNAMES(shardings), s);
}

uint32_t trec_kernel_parse(const char *s)
{
    return name_bit(kernels, NNAMES(kernels), s);
}

void trec_sharding_names(uint32_t bits, char *buf, size_t size)
{
    bit_names(shardings, NNAMES(shardings), bits, buf, size);
}

void trec_kernel_names(uint32_t bits, char *buf, size_t size)
{
    bit_names(kernels, NNAMES(kernels), bits, buf, size);
}

const char *trec_dtype_name(enum table_dtype dt)
{
    switch (dt) {
    case TABLE_DTYPE_FP16:
        return "FP16";
    case TABLE_DTYPE_BF16:
        return "BF16";
    case TABLE_DTYPE_INT8:
        return "INT8";
    case TABLE_DTYPE_FP32:
    default:
        return "FP32";
    }
}

int trec_dtype_parse(const char *s, enum table_dtype *out)
{
    static const char *const later[] = {"INT4", "INT2", "UINT8"};
    const char *dot = strrchr(s, '.');
    size_t i;

    if (dot != NULL)
        s = dot + 1;
    if (strcasecmp(s, "FP32") == 0) {
        *out = TABLE_DTYPE_FP32;
        return 0;
    }
    if (strcasecmp(s, "FP16") == 0) {
        *out = TABLE_DTYPE_FP16;
        return 0;
    }
    if (strcasecmp(s, "BF16") == 0) {
        *out = TABLE_DTYPE_BF16;
        return 0;
    }
    if (strcasecmp(s, "INT8") == 0) {
        *out = TABLE_DTYPE_INT8;
        return 0;
    }
    for (i = 0; i < NNAMES(later); i++)
        if (strcasecmp(s, later[i]) == 0)
            return SD_EUNSUPPORTED;
    return SD_EINVAL;
}

int tables_form_parse(const char *s, enum tables_form *out)
{
    if (strcmp(s, "auto") == 0)
        *out = TABLES_FORM_AUTO;
    else if (strcmp(s, "shardd") == 0 || strcmp(s, "native") == 0)
        *out = TABLES_FORM_NATIVE;
    else if (strcmp(s, "torchrec") == 0)
        *out = TABLES_FORM_TORCHREC;
    else
        return SD_EINVAL;
    return 0;
}

const char *tables_form_name(enum tables_form f)
{
    switch (f) {
    case TABLES_FORM_AUTO:
        return "auto";
    case TABLES_FORM_NATIVE:
        return "shardd";
    case TABLES_FORM_TORCHREC:
        return "torchrec";
    }
    return "?";
}

/* ---------------------------------------------------------------------- */
/* Inputs                                                                  */

int tables_input_init(struct tables_input *in, enum tables_form form, size_t n)
{
    memset(in, 0, sizeof(*in));
    in->form = form;
    in->tables = calloc(n ? n : 1, sizeof(*in->tables));
    in->specs = calloc(n ? n : 1, sizeof(*in->specs));
    if (in->tables == NULL || in->specs == NULL) {
        tables_input_destroy(in);
        return SD_ENOMEM;
    }
    in->n = n;
    return 0;
}

void tables_input_destroy(struct tables_input *in)
{
    if (in == NULL)
        return;
    free(in->tables);
    free(in->specs);
    input_notes_destroy(&in->notes);
    memset(in, 0, sizeof(*in));
}

/* n with thousands separators ("4,000,000"). */
static void fmt_count(int64_t n, char *buf, size_t size)
{
    char digits[32];
    size_t len, i, o = 0;

    snprintf(digits, sizeof(digits), "%lld", (long long)n);
    len = strlen(digits);
    for (i = 0; i < len && o + 2 < size; i++) {
        if (i > 0 && digits[i - 1] != '-' && (len - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
}

/* Derives table i's bins, noting how. */
static int derive_one(struct tables_input *in, size_t i, int64_t batch,
                      struct sd_diag *d)
{
    struct table *t = &in->tables[i];
    const struct table_spec *sp = &in->specs[i];
    double s = sp->zipf_s > 0 ? sp->zipf_s : DERIVE_ZIPF_DEFAULT;
    char rows[32], bags[32];
    int rv;

    rv = bins_derive(t->rows, t->pooling_factor, batch, s, t->bins);
    if (rv != 0)
        return sd_diag_set(d, SD_EINVAL,
                           "tables[%zu] \"%s\": bins cannot be derived from "
                           "rows %lld, pooling_factor %g, zipf_exponent %g "
                           "and a batch of %lld",
                           i, t->name, (long long)t->rows, t->pooling_factor, s,
                           (long long)batch);
    if (t->pooling_factor == 0)
        return input_notes_add(&in->notes, NOTE_ASSUMED, t->name, "bins",
                               "bins of %s: all 0 (pooling factor 0: a table "
                               "the batch never reads)",
                               t->name);
    fmt_count(t->rows, rows, sizeof(rows));
    fmt_count(batch, bags, sizeof(bags));
    return input_notes_add(&in->notes, NOTE_ASSUMED, t->name, "bins",
                           "bins of %s derived: Zipf s=%.3g%s over %s rows, "
                           "%s bags x %.1f lookups",
                           t->name, s, sp->zipf_s > 0 ? "" : " (the default)",
                           rows, bags, t->pooling_factor);
}

/* The pooling factor of a TorchRec table: assumed or summed. */
static int note_pooling(struct tables_input *in, size_t i)
{
    const struct table *t = &in->tables[i];
    const struct table_spec *sp = &in->specs[i];
    int32_t nf =
        sp->c.npooling > sp->nfeatures ? sp->c.npooling : sp->nfeatures;

    if (sp->c.npooling == 0)
        return input_notes_add(&in->notes, NOTE_ASSUMED, t->name,
                               "constraints.pooling_factors",
                               "pooling factor of %s not given: %.1f lookup "
                               "per sample, TorchRec's default",
                               t->name, t->pooling_factor);
    if (nf > 1)
        return input_notes_add(&in->notes, NOTE_ASSUMED, t->name,
                               "constraints.pooling_factors",
                               "pooling factor of %s: %.1f lookups per sample "
                               "over its %d features, planned as one bag (the "
                               "all-to-all counts one pooled output, not %d)",
                               t->name, t->pooling_factor, (int)nf, (int)nf);
    return 0;
}

/* Sharding types a table's constraints allow, beyond "only table_wise"
 * (resolve() decides that one for all tables at once). */
static int note_sharding(struct tables_input *in, size_t i)
{
    const struct table *t = &in->tables[i];
    uint32_t st = in->specs[i].c.sharding_types;
    char names[160];

    if (st == 0 || st == TREC_ST_TABLE_WISE)
        return 0;
    trec_sharding_names(st, names, sizeof(names));
    if (st & TREC_ST_TABLE_COLUMN_WISE)
        return input_notes_add(&in->notes, NOTE_APPLIED, t->name,
                               "constraints.sharding_types",
                               "sharding_types of %s (%s): table_column_wise "
                               "is planned as column_wise (or table_wise)",
                               t->name, names);
    return 0;
}

/* The kernels shardd plans as memory tiers. */
#define TREC_CK_TIERS                                                          \
    (TREC_CK_FUSED | TREC_CK_FUSED_UVM | TREC_CK_FUSED_UVM_CACHING)

uint32_t trec_kernel_tiers(uint32_t ck)
{
    uint32_t tiers = 0;

    if (ck & TREC_CK_FUSED)
        tiers |= 1u << TIER_HBM;
    if (ck & TREC_CK_FUSED_UVM)
        tiers |= 1u << TIER_UVM;
    if (ck & TREC_CK_FUSED_UVM_CACHING)
        tiers |= 1u << TIER_UVM_CACHING;
    return tiers;
}

/* Whether c lets the table be cached (no kernels given: any tier). */
static bool may_cache(const struct trec_constraints *c)
{
    return (c->compute_kernels & TREC_CK_TIERS) == 0 ||
           (c->compute_kernels & TREC_CK_FUSED_UVM_CACHING) != 0;
}

/* compute_kernels: the tiers applied, the kernels without a tier noted. */
static int note_tiers(struct tables_input *in, size_t i)
{
    const struct table *t = &in->tables[i];
    uint32_t ck = in->specs[i].c.compute_kernels;
    char names[200];
    int rv = 0;

    if (ck & ~(uint32_t)TREC_CK_TIERS) {
        trec_kernel_names(ck & ~(uint32_t)TREC_CK_TIERS, names, sizeof(names));
        rv = input_notes_add(
            &in->notes, NOTE_NOT_APPLIED, t->name,
            "constraints.compute_kernels",
            "compute_kernels of %s: %s not applied: shardd "
            "plans fused, fused_uvm and fused_uvm_caching "
            "only%s",
            t->name, names,
            ck & TREC_CK_TIERS ? "" : "; the tier is the search's choice");
    }
    if (rv != 0 || !(ck & TREC_CK_TIERS) || ck == TREC_CK_FUSED)
        return rv;
    trec_kernel_names(ck & TREC_CK_TIERS, names, sizeof(names));
    return input_notes_add(
        &in->notes, NOTE_APPLIED, t->name, "constraints.compute_kernels",
        "compute_kernels of %s (%s) applied: %s", t->name, names,
        (ck & TREC_CK_TIERS) == TREC_CK_FUSED_UVM_CACHING ||
                (ck & TREC_CK_TIERS) == TREC_CK_FUSED_UVM
            ? "planned in host DRAM with that kernel"
            : "the tier pass chooses among them");
}

/* cache_params: the load factor checked and applied when caching is
 * allowed; the rest of it is not read. */
static int check_cache(struct tables_input *in, size_t i, struct sd_diag *d)
{
    const struct table *t = &in->tables[i];
    const struct trec_constraints *c = &in->specs[i].c;
    double f = c->cache_load_factor;

    if (!c->cache_params)
        return 0;
    if (f != 0 && !(f > 0 && f < 1))
        return sd_diag_set(d, SD_EINVAL,
                           "constraints[\"%s\"]: cache_params.load_factor "
                           "%g is not in (0, 1)",
                           t->name, f);
    if (!may_cache(c))
        return input_notes_add(&in->notes, NOTE_NOT_APPLIED, t->name,
                               "constraints.cache_params",
                               "cache_params of %s not applied: its "
                               "compute_kernels do not include "
                               "fused_uvm_caching",
                               t->name);
    if (f == 0)
        return input_notes_add(&in->notes, NOTE_APPLIED, t->name,
                               "constraints.cache_params",
                               "cache_params of %s without a load_factor: "
                               "the tier pass chooses it (the cache is "
                               "modelled as ideal LFU; algorithm, "
                               "reserved_memory, precision and prefetch are "
                               "not read)",
                               t->name);
    return input_notes_add(&in->notes, NOTE_APPLIED, t->name,
                           "constraints.cache_params",
                           "cache_params of %s applied: cached at load "
                           "factor %.3g whenever it is cached (the cache is "
                           "modelled as ideal LFU; algorithm, "
                           "reserved_memory, precision and prefetch are not "
                           "read)",
                           t->name, f);
}

/* Compute kernels, min_partition, batch sizes, weights, caching. */
static int note_kernels(struct tables_input *in, size_t i, int64_t batch,
                        struct sd_diag *d)
{
    const struct table *t = &in->tables[i];
    const struct trec_constraints *c = &in->specs[i].c;
    char bs[32];
    int rv = note_tiers(in, i);

    if (rv == 0)
        rv = check_cache(in, i, d);
    if (rv == 0 && c->min_partition > 0)
        rv = input_notes_add(
            &in->notes, NOTE_NOT_APPLIED, t->name, "constraints.min_partition",
            "min_partition of %s (%lld) not applied: column "
            "slices go down to %d columns",
            t->name, (long long)c->min_partition, TABLE_DIM_ALIGN);
    if (rv == 0 && c->batch_size != 0 && c->batch_size != batch) {
        fmt_count(batch, bs, sizeof(bs));
        if (c->batch_size < 0)
            rv = input_notes_add(&in->notes, NOTE_NOT_APPLIED, t->name,
                                 "constraints.batch_sizes",
                                 "batch_sizes of %s differ between its "
                                 "features: not applied, every table is "
                                 "planned at the job's batch of %s",
                                 t->name, bs);
        else
            rv = input_notes_add(&in->notes, NOTE_NOT_APPLIED, t->name,
                                 "constraints.batch_sizes",
                                 "batch_sizes of %s (%lld) not applied: every "
                                 "table is planned at the job's batch of %s",
                                 t->name, (long long)c->batch_size, bs);
    }
    if (rv == 0 && c->is_weighted)
        rv = input_notes_add(&in->notes, NOTE_NOT_APPLIED, t->name,
                             "constraints.is_weighted",
                             "is_weighted of %s not applied: weighted "
                             "lookups are costed as unweighted",
                             t->name);
    return rv;
}

/* The TREC_KEY_* keys given, each not applied. */
static int note_keys(struct tables_input *in, size_t i)
{
    static const struct {
        uint32_t bit;
        const char *field, *why;
    } keys[] = {
        {TREC_KEY_DEVICE_GROUP, "constraints.device_group",
         "device groups (a heterogeneous job) are not planned; every device "
         "is one group"},
        {TREC_KEY_OUTPUT_DTYPE, "constraints.output_dtype",
         "the all-to-all is costed at the table's element size"},
        {TREC_KEY_KEY_VALUE_PARAMS, "constraints.key_value_params",
         "key-value tables are not planned yet"},
        {TREC_KEY_VIRTUAL_TABLE, "use_virtual_table",
         "virtual tables are not planned yet"},
        {TREC_KEY_POST_PRUNING, "num_embeddings_post_pruning",
         "the table is planned at num_embeddings rows"},
        {TREC_KEY_BUCKETS, "total_num_buckets",
         "bucketed (ZCH) tables are not planned yet"},
        {TREC_KEY_ENFORCE_HBM, "constraints.enforce_hbm",
         "its memory tier follows compute_kernels ([\"fused\"] keeps it "
         "in HBM)"},
        {TREC_KEY_STOCHASTIC_ROUNDING, "constraints.stochastic_rounding",
         "a training option, costed as round-to-nearest updates"},
        {TREC_KEY_BOUNDS_CHECK, "constraints.bounds_check_mode",
         "a training option, costed as lookups without index checks"},
    };
    const struct table *t = &in->tables[i];
    size_t k;
    int rv = 0;

    for (k = 0; k < NNAMES(keys) && rv == 0; k++)
        if (in->specs[i].c.keys & keys[k].bit)
            rv = input_notes_add(&in->notes, NOTE_NOT_APPLIED, t->name,
                                 keys[k].field, "%s of %s not applied: %s",
                                 keys[k].field, t->name, keys[k].why);
    return rv;
}

/*
 * Every table's types allow only table_wise: no column splits at all.  (For
 * some tables only, tables_input_constraints() keeps those whole.)
 */
static int note_whole(struct tables_input *in)
{
    size_t i, nwhole = 0;
    int rv = 0;

    for (i = 0; i < in->n; i++)
        if (in->specs[i].c.sharding_types == TREC_ST_TABLE_WISE)
            nwhole++;
    in->whole_tables = nwhole > 0 && nwhole == in->n;
    if (in->whole_tables)
        return input_notes_add(&in->notes, NOTE_APPLIED, NULL,
                               "constraints.sharding_types",
                               "every table allows only table_wise: planned "
                               "with whole tables, no column splits");
    return rv;
}

/*
 * Bins a user gave: all 0 where the table is looked up says no row is
 * accessed, and it would be priced with no working set (a cache-curve of
 * 0 % misses).  Bins left out are derived; these were given, wrongly.
 */
static int check_given_bins(const struct table *t, size_t idx,
                            struct sd_diag *d)
{
    int k;

    for (k = 0; k < TABLE_NBINS; k++)
        if (t->bins[k] != 0)
            return 0;
    if (!(t->pooling_factor > 0))
        return 0; /* not looked up; or not a number, which validation names */
    return sd_diag_set(d, SD_EINVAL,
                       "tables[%zu] \"%s\": bins are all 0 where "
                       "pooling_factor is %g: give the share of rows in each "
                       "access-count bin, or leave bins out to derive them",
                       idx, t->name, t->pooling_factor);
}

int tables_input_resolve(struct tables_input *in, int64_t batch,
                         struct sd_diag *d)
{
    size_t i;
    int rv = 0;

    for (i = 0; i < in->n && rv == 0; i++) {
        if (!in->specs[i].has_bins) {
            /* Rows and pooling factor first, with their own names; the
             * bins are still all 0, which is valid. */
            rv = table_validate(&in->tables[i], i, d);
            if (rv == 0)
                rv = derive_one(in, i, batch, d);
            if (rv != 0)
                break;
        } else {
            rv = check_given_bins(&in->tables[i], i, d);
            if (rv != 0)
                break;
            table_normalize_bins(&in->tables[i]);
        }
        if (!in->specs[i].torchrec)
            continue;
        rv = note_pooling(in, i);
        if (rv == 0)
            rv = note_sharding(in, i);
        if (rv == 0)
            rv = note_kernels(in, i, batch, d);
        if (rv == 0)
            rv = note_keys(in, i);
    }
    if (rv == 0)
        rv = note_whole(in);
    if (rv == SD_ENOMEM)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    if (rv != 0)
        return rv;
    return table_validate_all(in->tables, in->n, d);
}

/* TorchRec's sharding types as shardd's scheme bits. */
static uint32_t schemes_of(uint32_t st)
{
    uint32_t out = 0;

    if (st & TREC_ST_DATA_PARALLEL)
        out |= 1u << SCHEME_DP;
    if (st & TREC_ST_TABLE_WISE)
        out |= 1u << SCHEME_TW;
    if (st & (TREC_ST_COLUMN_WISE | TREC_ST_TABLE_COLUMN_WISE))
        out |= (1u << SCHEME_CW) | (1u << SCHEME_TW);
    if (st & TREC_ST_ROW_WISE)
        out |= 1u << SCHEME_RW;
    if (st & TREC_ST_TABLE_ROW_WISE)
        out |= 1u << SCHEME_TWRW;
    if (st & TREC_ST_GRID_SHARD)
        out |= 1u << SCHEME_GRID;
    return out;
}

/* The APPLIED notes on `field` of table `name` now say a constraint of
 * the request won over it. */
static void note_overridden(struct tables_input *in, const char *name,
                            const char *field, const char *what)
{
    size_t k;

    for (k = 0; k < in->notes.n; k++) {
        struct input_note *nt = &in->notes.v[k];

        if (nt->kind != NOTE_APPLIED || strcmp(nt->table, name) != 0 ||
            strcmp(nt->field, field) != 0)
            continue;
        nt->kind = NOTE_NOT_APPLIED;
        snprintf(nt->text, sizeof(nt->text),
                 "%s of %s not applied: options.constraints.tables gives it "
                 "its own %s, which win",
                 field + strlen("constraints."), name, what);
    }
}

int tables_input_constraints(struct tables_input *in,
                             struct table_constraint **cons)
{
    size_t i;

    for (i = 0; i < in->n; i++) {
        const struct trec_constraints *tc = &in->specs[i].c;
        const char *name = in->tables[i].name;
        uint32_t tiers = trec_kernel_tiers(tc->compute_kernels);
        bool lf = tc->cache_params && tc->cache_load_factor > 0 &&
                  tc->cache_load_factor < 1 && may_cache(tc);
        struct table_constraint *c;

        if (tc->sharding_types == 0 && tiers == 0 && !lf)
            continue;
        if (*cons == NULL) {
            size_t k;

            *cons = malloc(in->n * sizeof(**cons));
            if (*cons == NULL)
                return SD_ENOMEM;
            for (k = 0; k < in->n; k++)
                (*cons)[k] = (struct table_constraint){.host = -1};
        }
        c = &(*cons)[i];
        /* A constraint given with the request wins. */
        if (c->schemes == 0 && !c->no_split && c->min_row_shards == 0 &&
            c->host == -1)
            c->schemes = schemes_of(tc->sharding_types);
        else if (tc->sharding_types != 0)
            note_overridden(in, name, "constraints.sharding_types", "schemes");
        if (c->tiers == 0 && c->cache_load_factor == 0) {
            c->tiers = tiers;
            c->cache_load_factor = lf ? (float)tc->cache_load_factor : 0;
        } else {
            note_overridden(in, name, "constraints.compute_kernels", "tiers");
            note_overridden(in, name, "constraints.cache_params", "tiers");
        }
    }
    return 0;
}
