/*
 * JSON formats of tables, tasks and plans (formats.h), on jansson.  Readers
 * validate every field and name the bad one; writers keep key order so the
 * output reads the same every time.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "formats/formats.h"
#include "formats/formats_int.h"
#include "problem/problem.h"
#include "shardd/file.h"

#define DUMP_FLAGS (JSON_INDENT(2) | JSON_PRESERVE_ORDER)

/* ---------------------------------------------------------------------- */
/* Reading                                                                 */

bool json__get_integer(const json_t *v, int64_t *out)
{
    double x;

    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return true;
    }
    if (!json_is_real(v))
        return false;
    x = json_real_value(v);
    if (!isfinite(x) || x != floor(x) || fabs(x) > 9.0e18)
        return false;
    *out = (int64_t)x;
    return true;
}

int json__get_bins(const json_t *v, const char *where, const char *name,
                   double bins[TABLE_NBINS], struct sd_diag *d)
{
    size_t k;

    if (!json_is_array(v) || json_array_size(v) != TABLE_NBINS)
        return sd_diag_set(d, SD_EINVAL,
                           "%s \"%s\": bins is not an array of %d numbers",
                           where, name, TABLE_NBINS);
    for (k = 0; k < TABLE_NBINS; k++) {
        const json_t *b = json_array_get(v, k);

        if (!json_is_number(b))
            return sd_diag_set(d, SD_EINVAL,
                               "%s \"%s\": bins[%zu] is not a number", where,
                               name, k);
        bins[k] = json_number_value(b);
    }
    return 0;
}

int json__get_zipf(const json_t *v, const char *where, const char *name,
                   double *out, struct sd_diag *d)
{
    double s;

    if (!json_is_number(v) || !isfinite(s = json_number_value(v)) || s <= 0 ||
        s > DERIVE_ZIPF_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           "%s \"%s\": zipf_exponent is not a number in "
                           "(0, %g]",
                           where, name, DERIVE_ZIPF_MAX);
    *out = s;
    return 0;
}

int json__get_name(const json_t *o, const char *key, const char *where,
                   char name[TABLE_NAME_MAX], struct sd_diag *d)
{
    const json_t *v = json_object_get(o, key);

    if (v == NULL || json_is_null(v))
        return sd_diag_set(d, SD_EINVAL, "%s: %s is missing", where, key);
    if (!json_is_string(v))
        return sd_diag_set(d, SD_EINVAL, "%s: %s is not a string", where, key);
    if (json_string_length(v) >= TABLE_NAME_MAX ||
        strlen(json_string_value(v)) != json_string_length(v))
        return sd_diag_set(d, SD_EINVAL,
                           "%s: %s is longer than %d bytes or holds a NUL",
                           where, key, TABLE_NAME_MAX - 1);
    memcpy(name, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

/* The keys of a table in shardd's form; any other is noted, not read. */
static const char *const native_keys[] = {
    "name", "rows", "dim", "pooling_factor", "bins", "dtype", "zipf_exponent",
};

int json__note_unknown(const json_t *o, const char *const *known, size_t n,
                       const char *what, const char *table,
                       struct input_notes *notes)
{
    const char *key;
    const json_t *v;
    size_t k;

    if (notes == NULL)
        return 0;
    json_object_foreach((json_t *)o, key, v)
    {
        for (k = 0; k < n && strcmp(key, known[k]) != 0; k++)
            ;
        if (k < n)
            continue;
        if (input_notes_add(notes, NOTE_UNKNOWN, table, key,
                            "%s key \"%s\" is not one shardd knows: not read",
                            what, key) != 0)
            return SD_ENOMEM;
    }
    return 0;
}

/*
 * One table in shardd's form into t and sp.  Without bins the table's
 * spec asks for them to be derived, unless require_bins (the readers of
 * old, for a pool of tables or an estimate), where they are an error.
 */
static int parse_native(const json_t *o, size_t idx, bool require_bins,
                        struct table *t, struct table_spec *sp,
                        struct input_notes *notes, struct sd_diag *d)
{
    const json_t *v;
    char where[48];
    int64_t n;
    int rv;

    memset(t, 0, sizeof(*t));
    memset(sp, 0, sizeof(*sp));
    snprintf(where, sizeof(where), "tables[%zu]", idx);
    if (!json_is_object(o))
        return sd_diag_set(d, SD_EINVAL, "%s: not an object", where);
    rv = json__get_name(o, "name", where, t->name, d);
    if (rv != 0)
        return rv;

    v = json_object_get(o, "rows");
    if (v == NULL)
        return sd_diag_set(d, SD_EINVAL, "%s \"%s\": rows is missing%s", where,
                           t->name,
                           json_object_get(o, "num_embeddings") != NULL
                               ? " (the table is in TorchRec's form, which "
                                 "plan and estimate read)"
                               : "");
    if (!json__get_integer(v, &n))
        return sd_diag_set(d, SD_EINVAL, "%s \"%s\": rows is not an integer",
                           where, t->name);
    t->rows = n;

    v = json_object_get(o, "dim");
    if (v == NULL)
        return sd_diag_set(d, SD_EINVAL, "%s \"%s\": dim is missing", where,
                           t->name);
    if (!json__get_integer(v, &n) || n < INT32_MIN || n > INT32_MAX)
        return sd_diag_set(d, SD_EINVAL, "%s \"%s\": dim is not an integer",
                           where, t->name);
    t->dim = (int32_t)n;

    v = json_object_get(o, "pooling_factor");
    if (v == NULL)
        return sd_diag_set(d, SD_EINVAL, "%s \"%s\": pooling_factor is missing",
                           where, t->name);
    if (!json_is_number(v))
        return sd_diag_set(d, SD_EINVAL,
                           "%s \"%s\": pooling_factor is not a number", where,
                           t->name);
    t->pooling_factor = json_number_value(v);

    v = json_object_get(o, "bins");
    if (v == NULL && require_bins)
        return sd_diag_set(d, SD_EINVAL, "%s \"%s\": bins is missing", where,
                           t->name);
    if (v != NULL) {
        rv = json__get_bins(v, where, t->name, t->bins, d);
        if (rv != 0)
            return rv;
        sp->has_bins = true;
    }
    v = json_object_get(o, "zipf_exponent");
    if (v != NULL && sp->has_bins)
        return sd_diag_set(d, SD_EINVAL,
                           "%s \"%s\": zipf_exponent is for deriving bins: "
                           "give bins or zipf_exponent, not both",
                           where, t->name);
    if (v != NULL) {
        rv = json__get_zipf(v, where, t->name, &sp->zipf_s, d);
        if (rv != 0)
            return rv;
    }

    v = json_object_get(o, "dtype");
    if (v != NULL && (!json_is_string(v) ||
                      table_dtype_parse(json_string_value(v), &t->dtype) != 0))
        return sd_diag_set(d, SD_EINVAL,
                           "%s \"%s\": dtype is not \"fp32\", \"fp16\", "
                           "\"bf16\" or \"int8\"",
                           where, t->name);
    return json__note_unknown(o, native_keys,
                              sizeof(native_keys) / sizeof(native_keys[0]),
                              "table", t->name, notes);
}

/* Picks the tables array out of a tables or tasks document. */
static int find_tables(const json_t *root, size_t task_index,
                       const json_t **out, struct sd_diag *d)
{
    const json_t *tasks, *task, *tables;

    if (!json_is_object(root))
        return sd_diag_set(d, SD_EINVAL,
                           "the document is not an object with \"tables\" "
                           "or \"tasks\"");
    tables = json_object_get(root, "tables");
    if (tables != NULL && task_index > 0) /* else ignored: the wrong file? */
        return sd_diag_set(d, SD_EINVAL,
                           "task %zu requested, but the file is one task (a "
                           "\"tables\" list; tasks files have \"tasks\")",
                           task_index);
    if (tables == NULL) {
        tasks = json_object_get(root, "tasks");
        if (tasks == NULL)
            return sd_diag_set(d, SD_EINVAL,
                               "tables is missing (and there is no tasks "
                               "list either)");
        if (!json_is_array(tasks))
            return sd_diag_set(d, SD_EINVAL, "tasks is not an array");
        if (task_index >= json_array_size(tasks))
            return sd_diag_set(d, SD_EINVAL,
                               "tasks: task %zu requested, the file has %zu",
                               task_index, json_array_size(tasks));
        task = json_array_get(tasks, task_index);
        tables = json_is_object(task) ? json_object_get(task, "tables") : NULL;
        if (tables == NULL)
            return sd_diag_set(d, SD_EINVAL, "tasks[%zu]: tables is missing",
                               task_index);
    }
    if (!json_is_array(tables))
        return sd_diag_set(d, SD_EINVAL, "tables is not an array");
    *out = tables;
    return 0;
}

/*
 * TorchRec's form is told by its keys: "constraints" beside the tables,
 * or "num_embeddings" / "embedding_dim" in the first table.
 */
static enum tables_form detect_form(const json_t *root, const json_t *arr)
{
    const json_t *first = json_array_get(arr, 0);

    if (json_object_get(root, "constraints") != NULL ||
        json_object_get(first, "num_embeddings") != NULL ||
        json_object_get(first, "embedding_dim") != NULL)
        return TABLES_FORM_TORCHREC;
    return TABLES_FORM_NATIVE;
}

/* Reads a document into *in (initialised here); require_bins as for
 * parse_native(), and only shardd's form then. */
static int parse_doc(const char *buf, size_t len, size_t task_index,
                     enum tables_form form, bool require_bins,
                     struct tables_input *in, struct sd_diag *d)
{
    const json_t *arr = NULL;
    json_error_t jerr;
    json_t *root;
    size_t i, count;
    int rv;

    root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return sd_diag_set(d, SD_EFORMAT,
                           "malformed JSON at line %d column %d: %s", jerr.line,
                           jerr.column, jerr.text);
    rv = find_tables(root, task_index, &arr, d);
    if (rv != 0)
        goto out_decref;
    count = json_array_size(arr);
    if (count == 0) {
        rv = sd_diag_set(d, SD_EINVAL, "tables: the list is empty");
        goto out_decref;
    }
    if (form == TABLES_FORM_AUTO)
        form = detect_form(root, arr);
    if (form == TABLES_FORM_TORCHREC && json_object_get(root, "tasks") &&
        json_object_get(root, "tables") == NULL) {
        rv = sd_diag_set(d, SD_EINVAL,
                         "tasks: a tasks file is in shardd's form, not "
                         "TorchRec's");
        goto out_decref;
    }
    rv = tables_input_init(in, form, count);
    if (rv != 0) {
        rv = sd_diag_set(d, rv, "out of memory");
        goto out_decref;
    }
    if (form == TABLES_FORM_TORCHREC) {
        rv = json__parse_torchrec(root, arr, in, d);
    } else {
        for (i = 0; i < count && rv == 0; i++)
            rv = parse_native(json_array_get(arr, i), i, require_bins,
                              &in->tables[i], &in->specs[i], &in->notes, d);
    }
    if (rv == SD_ENOMEM)
        rv = sd_diag_set(d, rv, "out of memory");
    if (rv != 0)
        tables_input_destroy(in);

out_decref:
    json_decref(root);
    return rv;
}

int json_parse_tables_input(const char *buf, size_t len, size_t task_index,
                            enum tables_form form, struct tables_input *out,
                            struct sd_diag *d)
{
    struct tables_input in;
    int rv;

    rv = parse_doc(buf, len, task_index, form, false, &in, d);
    if (rv != 0)
        return rv;
    *out = in;
    return 0;
}

int json_parse_tables(const char *buf, size_t len, size_t task_index,
                      struct table **out, size_t *n, struct sd_diag *d)
{
    struct tables_input in;
    size_t i;
    int rv;

    rv = parse_doc(buf, len, task_index, TABLES_FORM_NATIVE, true, &in, d);
    if (rv != 0)
        return rv;
    for (i = 0; i < in.n; i++)
        table_normalize_bins(&in.tables[i]);
    rv = table_validate_all(in.tables, in.n, d);
    if (rv == 0) {
        *out = in.tables;
        *n = in.n;
        in.tables = NULL;
    }
    tables_input_destroy(&in);
    return rv;
}

/*
 * The most a JSON input file may hold.  20,000 tables with their bins are
 * about 5 MB; the cap stops a path such as /dev/zero (endless, and seekable
 * to a size of 0) from growing the buffer until the process is killed.
 */
#define JSON_FILE_MAX ((size_t)256 << 20)

/* A whole JSON input file into a new buffer (*buf owned by the caller). */
static int read_file(const char *path, char **buf, size_t *len,
                     struct sd_diag *d)
{
    void *b = NULL;
    int rv;

    rv = sd_file_read(path, JSON_FILE_MAX,
                      "a JSON input file (20,000 tables are about 5 MB)", &b,
                      len, d);
    *buf = b;
    return rv;
}

/* Prefixes the diagnostic of a failed read of path with the path. */
static int with_path(const char *path, int rv, struct sd_diag *d)
{
    struct sd_diag inner;

    if (rv == 0 || d == NULL)
        return rv;
    inner = *d;
    return sd_diag_set(d, rv, "%s: %s", path, inner.msg);
}

int json_parse_tasks(const char *buf, size_t len, struct task **out, size_t *n,
                     struct sd_diag *d)
{
    const json_t *tasks;
    struct task *all = NULL;
    struct sd_diag sub;
    json_error_t jerr;
    json_t *root;
    size_t k, count = 0;
    int rv = 0;

    root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return sd_diag_set(d, SD_EFORMAT,
                           "malformed JSON at line %d column %d: %s", jerr.line,
                           jerr.column, jerr.text);
    tasks = json_is_object(root) ? json_object_get(root, "tasks") : NULL;
    count = json_is_array(tasks) ? json_array_size(tasks) : 0;
    json_decref(root);
    if (count == 0)
        return sd_diag_set(d, SD_EINVAL,
                           "tasks: missing, not an array or empty");
    all = calloc(count, sizeof(*all));
    if (all == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    /* Each task as json_parse_tables() reads task k: the same checks. */
    for (k = 0; k < count && rv == 0; k++) {
        rv = json_parse_tables(buf, len, k, &all[k].tables, &all[k].ntables,
                               &sub);
        if (rv != 0)
            rv = sd_diag_set(d, rv, "tasks[%zu]: %s", k, sub.msg);
    }
    if (rv == 0) {
        *out = all;
        *n = count;
        all = NULL;
    }
    task_array_free(all, count);
    return rv;
}

int json_read_tasks(const char *path, struct task **out, size_t *n,
                    struct sd_diag *d)
{
    char *buf = NULL;
    size_t len = 0;
    int rv;

    rv = read_file(path, &buf, &len, d);
    if (rv != 0)
        return rv;
    rv = json_parse_tasks(buf, len, out, n, d);
    free(buf);
    return with_path(path, rv, d);
}

int json_read_tables(const char *path, size_t task_index, struct table **out,
                     size_t *n, struct sd_diag *d)
{
    char *buf = NULL;
    size_t len = 0;
    int rv;

    rv = read_file(path, &buf, &len, d);
    if (rv != 0)
        return rv;
    rv = json_parse_tables(buf, len, task_index, out, n, d);
    free(buf);
    return with_path(path, rv, d);
}

int json_read_tables_input(const char *path, size_t task_index,
                           enum tables_form form, struct tables_input *out,
                           struct sd_diag *d)
{
    char *buf = NULL;
    size_t len = 0;
    int rv;

    rv = read_file(path, &buf, &len, d);
    if (rv != 0)
        return rv;
    rv = json_parse_tables_input(buf, len, task_index, form, out, d);
    free(buf);
    return with_path(path, rv, d);
}

/* Reads one shard object {"device", "col_offset", "col_width"[,
 * "row_offset", "row_count"]} into sh (table and scheme left). */
static int parse_shard(const json_t *o, const char *name, size_t k,
                       struct shard *sh, struct sd_diag *d)
{
    static const char *const keys[5] = {"device", "col_offset", "col_width",
                                        "row_offset", "row_count"};
    int64_t v[5] = {0};
    int j;

    if (!json_is_object(o))
        return sd_diag_set(d, SD_EINVAL,
                           "plan: table \"%s\": shards[%zu] is "
                           "not an object",
                           name, k);
    for (j = 0; j < 5; j++) {
        const json_t *x = json_object_get(o, keys[j]);

        if (j >= 3 && x == NULL) /* rows: every row unless given */
            continue;
        if (!json__get_integer(x, &v[j]) || v[j] < 0 ||
            v[j] > (j >= 3 ? TABLE_ROWS_MAX : INT32_MAX))
            return sd_diag_set(d, SD_EINVAL,
                               "plan: table \"%s\": shards[%zu].%s is %s", name,
                               k, keys[j],
                               j >= 3 ? "not an integer in [0, 2^40]"
                                      : "missing or not a non-negative "
                                        "integer");
    }
    sh->device = (int32_t)v[0];
    sh->col_offset = (int32_t)v[1];
    sh->col_width = (int32_t)v[2];
    sh->row_offset = v[3];
    sh->row_count = v[4];
    return 0;
}

/* A table entry's "scheme" (optional: table_wise, which validation makes
 * column_wise where the table has several slices). */
static int parse_scheme(const json_t *o, const char *name,
                        enum plan_scheme *out, struct sd_diag *d)
{
    const json_t *v = json_object_get(o, "scheme");

    *out = SCHEME_TW;
    if (v == NULL)
        return 0;
    if (!json_is_string(v) || scheme_parse(json_string_value(v), out) != 0)
        return sd_diag_set(d, SD_EINVAL,
                           "plan: table \"%s\": scheme is not one of "
                           "table_wise, column_wise, row_wise, "
                           "table_row_wise, grid_shard, data_parallel",
                           name);
    return 0;
}

/* Index of the table called name, or -1 (linear: plans are read rarely). */
static ptrdiff_t find_table(const struct table *tables, size_t n,
                            const char *name)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (strcmp(tables[i].name, name) == 0)
            return (ptrdiff_t)i;
    return -1;
}

/* Reads a table entry's tier fields (json_plan.c writes them) into sh. */
static int parse_tier(const json_t *o, const char *name, struct shard *sh,
                      struct sd_diag *d)
{
    const json_t *k = json_object_get(o, "compute_kernel");
    const json_t *f = json_object_get(o, "cache_load_factor");
    enum table_tier tier = TIER_HBM;

    if (k != NULL &&
        (!json_is_string(k) || tier_parse(json_string_value(k), &tier) != 0))
        return sd_diag_set(d, SD_EINVAL,
                           "plan: table \"%s\": compute_kernel is not "
                           "fused, fused_uvm or fused_uvm_caching",
                           name);
    if (f != NULL && !json_is_number(f))
        return sd_diag_set(d, SD_EINVAL,
                           "plan: table \"%s\": cache_load_factor is not a "
                           "number",
                           name);
    sh->tier = (uint8_t)tier;
    sh->cache_load_factor = f != NULL ? (float)json_number_value(f) : 0.0f;
    return 0;
}

static int parse_plan_tables(const json_t *arr, const struct table *tables,
                             size_t ntables, struct plan *p, struct sd_diag *d)
{
    size_t i, k;
    int rv;

    for (i = 0; i < json_array_size(arr); i++) {
        const json_t *o = json_array_get(arr, i);
        const json_t *shards = json_object_get(o, "shards");
        const char *name = json_string_value(json_object_get(o, "name"));
        enum plan_scheme sc;
        ptrdiff_t t;

        if (name == NULL)
            return sd_diag_set(d, SD_EINVAL,
                               "plan: tables[%zu].name is "
                               "missing",
                               i);
        t = find_table(tables, ntables, name);
        if (t < 0)
            return sd_diag_set(d, SD_EINVAL,
                               "plan: tables[%zu] \"%s\" is "
                               "not in the tables file",
                               i, name);
        if (!json_is_array(shards))
            return sd_diag_set(d, SD_EINVAL,
                               "plan: table \"%s\": shards is "
                               "missing",
                               name);
        rv = parse_scheme(o, name, &sc, d);
        if (rv != 0)
            return rv;
        for (k = 0; k < json_array_size(shards); k++) {
            struct shard sh = {.table = (uint32_t)t, .scheme = (uint8_t)sc};

            rv = parse_tier(o, name, &sh, d);
            if (rv == 0)
                rv = parse_shard(json_array_get(shards, k), name, k, &sh, d);
            if (rv != 0)
                return rv;
            rv = plan_add_shard(p, &sh);
            if (rv != 0)
                return sd_diag_set(d, rv, "out of memory");
        }
    }
    return 0;
}

int json_parse_plan(const char *buf, size_t len, const struct table *tables,
                    size_t ntables, struct plan *out, struct sd_diag *d)
{
    const json_t *devs, *arr;
    json_error_t jerr;
    json_t *root;
    struct plan p;
    int rv;

    root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return sd_diag_set(d, SD_EFORMAT,
                           "malformed JSON at line %d column %d: %s", jerr.line,
                           jerr.column, jerr.text);
    arr = json_object_get(root, "tables");
    devs = json_object_get(root, "devices");
    if (!json_is_array(arr)) {
        rv = sd_diag_set(d, SD_EINVAL,
                         "plan: tables is missing or not an array");
        goto out_decref;
    }
    if (!json_is_array(devs) || json_array_size(devs) == 0 ||
        json_array_size(devs) > TOPO_DEVICES_MAX) {
        rv = sd_diag_set(d, SD_EINVAL,
                         "plan: devices is missing or not an array of 1 to "
                         "%d devices",
                         TOPO_DEVICES_MAX);
        goto out_decref;
    }
    rv = plan_init(&p, (int32_t)json_array_size(devs));
    if (rv != 0) {
        sd_diag_set(d, rv, "out of memory");
        goto out_decref;
    }
    rv = parse_plan_tables(arr, tables, ntables, &p, d);
    if (rv != 0) {
        plan_destroy(&p);
        goto out_decref;
    }
    plan_sort(&p);
    *out = p;

out_decref:
    json_decref(root);
    return rv;
}

int json_read_plan(const char *path, const struct table *tables, size_t ntables,
                   struct plan *out, struct sd_diag *d)
{
    char *buf = NULL;
    size_t len = 0;
    int rv;

    rv = read_file(path, &buf, &len, d);
    if (rv != 0)
        return rv;
    rv = json_parse_plan(buf, len, tables, ntables, out, d);
    free(buf);
    return with_path(path, rv, d);
}

/* ---------------------------------------------------------------------- */
/* Writing.  jansson's constructors return NULL when out of memory, and the
 * *_new setters accept NULL values and report failure, so one check of the
 * finished document's pieces is enough. */

static json_t *table_json(const struct table *t)
{
    json_t *o = json_object(), *bins = json_array();
    int k, bad = o == NULL || bins == NULL;

    for (k = 0; k < TABLE_NBINS && !bad; k++)
        bad |= json_array_append_new(bins, json_real(t->bins[k]));
    bad |= json_object_set_new(o, "name", json_string(t->name));
    bad |= json_object_set_new(o, "rows", json_integer(t->rows));
    bad |= json_object_set_new(o, "dim", json_integer(t->dim));
    bad |=
        json_object_set_new(o, "pooling_factor", json_real(t->pooling_factor));
    bad |= json_object_set_new(o, "bins", bins);
    bins = NULL;
    if (t->dtype != TABLE_DTYPE_FP32)
        bad |= json_object_set_new(o, "dtype",
                                   json_string(table_dtype_name(t->dtype)));
    if (bad) {
        json_decref(bins);
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *tables_json(const struct table *tables, size_t n)
{
    json_t *arr = json_array();
    size_t i;

    for (i = 0; i < n && arr != NULL; i++) {
        if (json_array_append_new(arr, table_json(&tables[i])) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

/* Serialises and releases root; NULL if root is NULL or out of memory. */
static char *dump(json_t *root)
{
    char *s;

    if (root == NULL)
        return NULL;
    s = json_dumps(root, DUMP_FLAGS);
    json_decref(root);
    return s;
}

static json_t *tables_doc(const struct table *tables, size_t n)
{
    json_t *root = json_object();

    if (root != NULL &&
        json_object_set_new(root, "tables", tables_json(tables, n)) != 0) {
        json_decref(root);
        return NULL;
    }
    return root;
}

char *json_tables(const struct table *tables, size_t n)
{
    return dump(tables_doc(tables, n));
}

char *json_tasks(const struct task *tasks, size_t n)
{
    json_t *root = json_object(), *arr = json_array();
    size_t i, k;
    int bad = root == NULL || arr == NULL;

    for (i = 0; i < n && !bad; i++) {
        json_t *o = json_object(), *src = json_array();
        char name[32];

        bad |= o == NULL || src == NULL;
        for (k = 0; k < tasks[i].ntables && !bad; k++)
            bad |= json_array_append_new(
                src, json_integer((json_int_t)tasks[i].source[k]));
        snprintf(name, sizeof(name), "task_%04zu", i);
        bad |= json_object_set_new(o, "name", json_string(name));
        bad |= json_object_set_new(o, "source", src);
        bad |= json_object_set_new(
            o, "tables", tables_json(tasks[i].tables, tasks[i].ntables));
        bad |= json_array_append_new(arr, o);
    }
    bad |= json_object_set_new(root, "tasks", arr);
    if (bad) {
        json_decref(root);
        return NULL;
    }
    return dump(root);
}

/* One table of a TorchRec plan: its shards [first, end). */
static json_t *torchrec_table(const struct plan *p, size_t first, size_t end,
                              const struct table *tb, const struct topology *t)
{
    enum plan_scheme sc = plan_table_scheme(p, first);
    json_t *o = json_object(), *ranks = json_array(), *shards = json_array();
    int bad = o == NULL || ranks == NULL || shards == NULL;
    size_t k;

    for (k = first; k < end && !bad; k++) {
        const struct shard *s = &p->shards[k];
        json_t *so = json_object(), *off = json_array(), *size = json_array();
        char placement[64];

        snprintf(placement, sizeof(placement), "rank:%d/cuda:%d",
                 (int)s->device, (int)(s->device % t->devices_per_host));
        bad |= json_array_append_new(ranks, json_integer(s->device));
        bad |= json_array_append_new(off, json_integer(s->row_offset));
        bad |= json_array_append_new(off, json_integer(s->col_offset));
        bad |= json_array_append_new(size, json_integer(shard_rows(tb, s)));
        bad |= json_array_append_new(size, json_integer(s->col_width));
        bad |= json_object_set_new(so, "shard_offsets", off);
        bad |= json_object_set_new(so, "shard_sizes", size);
        bad |= json_object_set_new(so, "placement", json_string(placement));
        bad |= json_array_append_new(shards, so);
    }
    bad |=
        json_object_set_new(o, "sharding_type", json_string(scheme_name(sc)));
    /* TorchRec runs replicated tables with the dense kernel and has no
     * sharding_spec for them. */
    bad |= json_object_set_new(
        o, "compute_kernel",
        json_string(sc == SCHEME_DP
                        ? "dense"
                        : tier_name((enum table_tier)p->shards[first].tier)));
    if (p->shards[first].tier == TIER_UVM_CACHING)
        bad |=
            json_object_set_new(o, "cache_params",
                                json_pack("{s:f}", "load_factor",
                                          tier_load_factor(&p->shards[first])));
    bad |= json_object_set_new(o, "ranks", ranks);
    if (sc == SCHEME_DP)
        json_decref(shards);
    else
        bad |= json_object_set_new(o, "shards", shards);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *torchrec_doc(const struct plan *p, const struct table *tables,
                            const struct topology *t, const char *module)
{
    json_t *root = json_object(), *plan = json_object(), *mod = json_object();
    int bad = root == NULL || plan == NULL || mod == NULL;
    size_t k = 0, first;

    while (k < p->nshards && !bad) {
        const struct table *tb = &tables[p->shards[k].table];
        json_t *o;

        first = k;
        while (k < p->nshards && p->shards[k].table == p->shards[first].table)
            k++;
        o = torchrec_table(p, first, k, tb, t);
        bad |= o == NULL || json_object_set_new(mod, tb->name, o);
    }
    bad |= json_object_set_new(
        plan, module != NULL && module[0] ? module : "embedding_bags", mod);
    bad |= json_object_set_new(root, "plan", plan);
    if (bad) {
        json_decref(root);
        return NULL;
    }
    return root;
}

char *json_plan_torchrec(const struct plan *p, const struct table *tables,
                         const struct topology *t, const char *module)
{
    return dump(torchrec_doc(p, tables, t, module));
}

/* ---------------------------------------------------------------------- */
/* Notes                                                                   */

const char *json__note_kind_key(enum note_kind k)
{
    switch (k) {
    case NOTE_ASSUMED:
        return "assumed";
    case NOTE_APPLIED:
        return "applied";
    case NOTE_NOT_APPLIED:
        return "not_applied";
    case NOTE_UNKNOWN:
        return "unknown";
    }
    return "unknown";
}

/* Adds "notes" to root unless there are none; serialises and releases
 * root.  NULL when root is NULL or out of memory. */
static char *dump_noted(json_t *root, const struct input_notes *notes)
{
    json_t *arr;
    size_t i;
    int bad = 0;

    if (root == NULL || notes == NULL || notes->n == 0)
        return dump(root);
    arr = json_array();
    bad = arr == NULL;
    for (i = 0; i < notes->n && !bad; i++) {
        const struct input_note *nt = &notes->v[i];

        bad |= json_array_append_new(
            arr, json_pack("{s:s, s:s, s:s, s:s}", "kind",
                           json__note_kind_key(nt->kind), "table", nt->table,
                           "field", nt->field, "message", nt->text));
    }
    bad |= json_object_set_new(root, "notes", arr);
    if (bad) {
        json_decref(root);
        return NULL;
    }
    return dump(root);
}

char *json_tables_noted(const struct table *tables, size_t n,
                        const struct input_notes *notes)
{
    return dump_noted(tables_doc(tables, n), notes);
}

char *json_plan_torchrec_noted(const struct plan *p, const struct table *tables,
                               const struct topology *t, const char *module,
                               const struct input_notes *notes)
{
    return dump_noted(torchrec_doc(p, tables, t, module), notes);
}

char *json_comm_fit(const char *const *names, const struct nccl_run *runs,
                    const struct nccl_fit *fits, const struct nccl_fit *one,
                    size_t n)
{
    json_t *root = json_object(), *arr = json_array();
    int bad = root == NULL || arr == NULL;
    size_t k;
    int32_t b;

    for (k = 0; k < n && !bad; k++) {
        json_t *o = json_object(), *bands = json_array();

        bad |= o == NULL || bands == NULL;
        for (b = 0; b < fits[k].nbands && !bad; b++) {
            const struct nccl_band *nb = &fits[k].band[b];

            bad |= json_array_append_new(
                bands, json_pack("{s:I, s:I, s:f, s:f}", "from_bytes",
                                 (json_int_t)nb->from_bytes, "to_bytes",
                                 (json_int_t)nb->to_bytes, "alpha_us",
                                 nb->alpha_us, "beta_gbps", nb->beta_gbps));
        }
        bad |= json_object_set_new(o, "file", json_string(names[k]));
        bad |= json_object_set_new(o, "collective",
                                   json_string(nccl_coll_name(runs[k].coll)));
        bad |= json_object_set_new(o, "ranks", json_integer(runs[k].nranks));
        bad |= json_object_set_new(o, "hosts", json_integer(runs[k].nhosts));
        bad |= json_object_set_new(o, "device", json_string(runs[k].device));
        bad |= json_object_set_new(o, "sizes",
                                   json_integer((json_int_t)runs[k].nrows));
        bad |= json_object_set_new(o, "bands", bands);
        bad |= json_object_set_new(o, "mape", json_real(fits[k].mape));
        bad |= json_object_set_new(o, "max_error", json_real(fits[k].max_err));
        bad |= json_object_set_new(o, "one_band_mape", json_real(one[k].mape));
        bad |= json_array_append_new(arr, o);
    }
    bad |= json_object_set_new(root, "fits", arr);
    if (bad) {
        json_decref(root);
        return NULL;
    }
    return dump(root);
}
