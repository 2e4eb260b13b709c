/*
 * Private to the formats room (formats.h): what its JSON files (json.c,
 * json_trec.c, json_plan.c) share: small getters that name the bad field,
 * the reader of TorchRec's form, the notes' kinds; and the generators'
 * worker pool (synth.c, families.c).
 * The only room header that includes jansson.
 */
#ifndef SHARDD_PLANNER_FORMATS_INT_H
#define SHARDD_PLANNER_FORMATS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "formats/formats.h"

/* A JSON number that is an integer (1000000 or 1e6), as int64. */
bool json__get_integer(const json_t *v, int64_t *out);

/* 17 numbers into bins; SD_EINVAL naming `where "name": bins`. */
int json__get_bins(const json_t *v, const char *where, const char *name,
                   double bins[TABLE_NBINS], struct sd_diag *d);

/* A zipf_exponent in (0, DERIVE_ZIPF_MAX]; SD_EINVAL naming it. */
int json__get_zipf(const json_t *v, const char *where, const char *name,
                   double *out, struct sd_diag *d);

/* The string o[key], 1 .. TABLE_NAME_MAX - 1 bytes without NUL, into
 * name; SD_EINVAL naming `where: key`. */
int json__get_name(const json_t *o, const char *key, const char *where,
                   char name[TABLE_NAME_MAX], struct sd_diag *d);

/*
 * Notes every key of object o not among known[0 .. n) as NOTE_UNKNOWN
 * ("WHAT key "k" is not one shardd knows: not read"), about `table`.
 * notes may be NULL (nothing noted).  0 or SD_ENOMEM.
 */
int json__note_unknown(const json_t *o, const char *const *known, size_t n,
                       const char *what, const char *table,
                       struct input_notes *notes);

/* The "kind" of an input note: "assumed", "applied", "not_applied" or
 * "unknown". */
const char *json__note_kind_key(enum note_kind k);

/*
 * TorchRec's form (json_trec.c): the tables array arr (EmbeddingBagConfig
 * objects) and root's "constraints" object (ParameterConstraints by table
 * name) into in, already initialised with one entry per table.  Returns 0,
 * SD_EINVAL (d names the table and field) or SD_ENOMEM.
 */
int json__parse_torchrec(const json_t *root, const json_t *arr,
                         struct tables_input *in, struct sd_diag *d);

/*
 * Makes tables [0, count) with one(ctx, i, &table[i]) on `threads` threads
 * (0: one; at most FORMATS_THREADS_MAX, and no more than count), the calling
 * thread among them (synth.c).  The first error stops the others and is
 * returned (nothing in *out); else *out (free()) holds the tables.
 */
#define FORMATS_THREADS_MAX 256
typedef int (*formats__table_fn)(const void *ctx, size_t i, struct table *out);
int formats__make_tables(size_t count, unsigned threads, formats__table_fn one,
                         const void *ctx, struct table **out);

#endif /* SHARDD_PLANNER_FORMATS_INT_H */
