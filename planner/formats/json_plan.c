/*
 * The plan's JSON (json_plan(), json_plan_noted(): formats.h), written as it
 * goes.  The daemon writes one for every plan it hands out (its audit), at
 * over a thousand a second: building jansson's tree of it cost 125 us a
 * 50-table plan, a tenth of the daemon's time per plan (docs/daemon.md,
 * "Split plans at 64 clients, again").  The text is byte for byte what
 * jansson writes with JSON_INDENT(2) | JSON_PRESERVE_ORDER, and NULL where
 * jansson would refuse a value (a real that is not finite, a string that is
 * not UTF-8), so a reader cannot tell the two apart (test_json checks it
 * against jansson's own dump).
 */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "formats/formats_int.h"
#include "problem/problem.h"
#include "shardd/utf8.h"

#define JW_INDENT 2
#define JW_DEPTH  8 /* the plan nests 5 deep */

/* A text being written.  bad: out of memory, or a value JSON cannot hold;
 * the text is then dropped. */
struct jw {
    char *buf; /* owned */
    size_t len, cap;
    int depth;
    bool empty[JW_DEPTH]; /* nothing in the container at that depth yet */
    bool bad;
};

static void jw_put(struct jw *w, const char *s, size_t n)
{
    if (w->bad)
        return;
    if (w->len + n + 1 > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        char *b;

        while (w->len + n + 1 > cap)
            cap *= 2;
        b = realloc(w->buf, cap);
        if (b == NULL) {
            w->bad = true;
            return;
        }
        w->buf = b;
        w->cap = cap;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = '\0';
}

/* A newline and the indent of depth d. */
static void jw_newline(struct jw *w, int d)
{
    static const char spaces[] = "                ";
    int n = d * JW_INDENT;

    jw_put(w, "\n", 1);
    for (; n > 0; n -= (int)sizeof(spaces) - 1)
        jw_put(w, spaces,
               (size_t)(n < (int)sizeof(spaces) - 1 ? n
                                                    : (int)sizeof(spaces) - 1));
}

/* Where the next value of the open container goes: after a comma unless it
 * is the first. */
static void jw_next(struct jw *w)
{
    if (w->depth == 0)
        return;
    if (!w->empty[w->depth - 1])
        jw_put(w, ",", 1);
    w->empty[w->depth - 1] = false;
    jw_newline(w, w->depth);
}

static void jw_open(struct jw *w, char c)
{
    if (w->depth == JW_DEPTH) {
        w->bad = true;
        return;
    }
    jw_put(w, &c, 1);
    w->empty[w->depth++] = true;
}

static void jw_close(struct jw *w, char c)
{
    if (!w->empty[--w->depth])
        jw_newline(w, w->depth);
    jw_put(w, &c, 1);
}

/* A string, escaped as jansson does: these as two characters, the other
 * control characters as \u00XX. */
static const char *const short_esc[] = {
    ['"'] = "\\\"", ['\\'] = "\\\\", ['\b'] = "\\b", ['\f'] = "\\f",
    ['\n'] = "\\n", ['\r'] = "\\r",  ['\t'] = "\\t",
};

static void jw_string(struct jw *w, const char *s)
{
    const char *run = s;

    if (!sd_utf8_valid(s)) {
        w->bad = true;
        return;
    }
    jw_put(w, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];

        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        jw_put(w, run, (size_t)(s - run));
        run = s + 1;
        if (c < sizeof(short_esc) / sizeof(*short_esc) && short_esc[c]) {
            jw_put(w, short_esc[c], 2);
        } else {
            snprintf(esc, sizeof(esc), "\\u%04X", c);
            jw_put(w, esc, 6);
        }
    }
    jw_put(w, run, (size_t)(s - run));
    jw_put(w, "\"", 1);
}

static void jw_key(struct jw *w, const char *key)
{
    jw_next(w);
    jw_string(w, key);
    jw_put(w, ": ", 2);
}

static void jw_int(struct jw *w, int64_t v)
{
    char b[24];
    int n = snprintf(b, sizeof(b), "%" PRId64, v);

    jw_put(w, b, (size_t)n);
}

/* A real as jansson writes it: %.17g, with ".0" where that reads as an
 * integer, and the exponent without "+" or leading zeros. */
static void jw_real(struct jw *w, double v)
{
    char b[40], *e, *from;
    int n;

    if (!isfinite(v)) {
        w->bad = true;
        return;
    }
    n = snprintf(b, sizeof(b), "%.17g", v);
    if (strchr(b, '.') == NULL && strchr(b, 'e') == NULL) {
        memcpy(b + n, ".0", 3);
        n += 2;
    }
    e = strchr(b, 'e');
    if (e != NULL) {
        char *at = e + 1;

        if (*at == '-')
            at++;
        for (from = at; *from == '+' || *from == '0'; from++)
            ;
        if (*from == '\0')
            from--; /* "1e+00": keep one 0 */
        memmove(at, from, strlen(from) + 1);
        n = (int)strlen(b);
    }
    jw_put(w, b, (size_t)n);
}

static void jw_key_int(struct jw *w, const char *key, int64_t v)
{
    jw_key(w, key);
    jw_int(w, v);
}

static void jw_key_real(struct jw *w, const char *key, double v)
{
    jw_key(w, key);
    jw_real(w, v);
}

static void jw_key_str(struct jw *w, const char *key, const char *s)
{
    jw_key(w, key);
    jw_string(w, s);
}

/* ---------------------------------------------------------------------- */
/* The plan                                                                */

static void device_out(struct jw *w, const struct plan_device *dv, int32_t id)
{
    jw_next(w);
    jw_open(w, '{');
    jw_key_int(w, "id", id);
    jw_key_int(w, "memory_bytes", (int64_t)dv->mem_bytes);
    /* memory_bytes is HBM; ddr_bytes the host DRAM of its UVM tables. */
    jw_key_int(w, "ddr_bytes", (int64_t)dv->ddr_bytes);
    jw_key(w, "cost_ms");
    jw_open(w, '{');
    jw_key_real(w, "compute", dv->compute_ms);
    jw_key_real(w, "fwd_comm", dv->fwd_comm_ms);
    jw_key_real(w, "bwd_comm", dv->bwd_comm_ms);
    jw_key_real(w, "total", dv->total_ms);
    if (dv->tier_ms > 0)
        jw_key_real(w, "tier_modelled", dv->tier_ms);
    /* host-memory time measured within "compute" (plan_evaluate_tiers()) */
    if (dv->tier_measured) {
        jw_key(w, "tier_measured");
        jw_put(w, "true", 4);
    }
    jw_close(w, '}');
    jw_close(w, '}');
}

/* HBM and DDR per host, when the plan has a host tier or bytes in it:
 * [{"id", "memory_bytes", "ddr_bytes", "ddr_capacity_bytes"}]. */
static void hosts_out(struct jw *w, const struct plan *p)
{
    int32_t per = p->devices_per_host, h, r;
    bool any = p->host_dram_bytes > 0;

    for (r = 0; r < p->ndevices; r++)
        any = any || p->devices[r].ddr_bytes > 0;
    if (!any || per <= 0)
        return;
    jw_key(w, "hosts");
    jw_open(w, '[');
    for (h = 0; h * per < p->ndevices; h++) {
        uint64_t hbm = 0, ddr = 0;

        for (r = h * per; r < (h + 1) * per && r < p->ndevices; r++) {
            hbm += p->devices[r].mem_bytes;
            ddr += p->devices[r].ddr_bytes;
        }
        jw_next(w);
        jw_open(w, '{');
        jw_key_int(w, "id", h);
        jw_key_int(w, "memory_bytes", (int64_t)hbm);
        jw_key_int(w, "ddr_bytes", (int64_t)ddr);
        jw_key_int(w, "ddr_capacity_bytes", (int64_t)p->host_dram_bytes);
        jw_close(w, '}');
    }
    jw_close(w, ']');
}

/* The tables with their shards (sorted by table); a table off HBM says its
 * tier ("compute_kernel" and, cached, "cache_load_factor") after them. */
static void tables_out(struct jw *w, const struct plan *p,
                       const struct table *tables)
{
    size_t k = 0, first;

    jw_key(w, "tables");
    jw_open(w, '[');
    while (k < p->nshards) {
        const struct shard *s0 = &p->shards[k];

        first = k;
        jw_next(w);
        jw_open(w, '{');
        jw_key_str(w, "name", tables[s0->table].name);
        jw_key_str(w, "scheme", scheme_name(plan_table_scheme(p, first)));
        jw_key(w, "shards");
        jw_open(w, '[');
        for (; k < p->nshards && p->shards[k].table == s0->table; k++) {
            const struct shard *s = &p->shards[k];

            jw_next(w);
            jw_open(w, '{');
            jw_key_int(w, "device", s->device);
            jw_key_int(w, "col_offset", s->col_offset);
            jw_key_int(w, "col_width", s->col_width);
            if (s->row_count > 0) {
                jw_key_int(w, "row_offset", s->row_offset);
                jw_key_int(w, "row_count", s->row_count);
            }
            jw_close(w, '}');
        }
        jw_close(w, ']');
        if (s0->tier != TIER_HBM) {
            jw_key_str(w, "compute_kernel",
                       tier_name((enum table_tier)s0->tier));
            if (s0->tier == TIER_UVM_CACHING)
                jw_key_real(w, "cache_load_factor",
                            (double)tier_load_factor(s0));
        }
        jw_close(w, '}');
    }
    jw_close(w, ']');
}

/* {"critical_device", "drivers": [{"table", "col_offset", "col_width",
 * "cost_ms"}], "lower_bound_ms", "gap", "why": [notes]}. */
static void explain_out(struct jw *w, const struct plan *p,
                        const struct table *tables)
{
    const struct plan_explain *e = &p->explain;
    int i;

    jw_key(w, "explanation");
    jw_open(w, '{');
    jw_key_int(w, "critical_device", e->critical_device);
    jw_key(w, "drivers");
    jw_open(w, '[');
    for (i = 0; i < e->ndrivers; i++) {
        const struct shard *s = &p->shards[e->drivers[i]];

        jw_next(w);
        jw_open(w, '{');
        jw_key_str(w, "table", tables[s->table].name);
        jw_key_int(w, "col_offset", s->col_offset);
        jw_key_int(w, "col_width", s->col_width);
        jw_key_real(w, "cost_ms", e->driver_ms[i]);
        jw_close(w, '}');
    }
    jw_close(w, ']');
    jw_key_real(w, "lower_bound_ms", e->lower_bound_ms);
    jw_key_real(w, "gap", e->gap);
    jw_key(w, "why");
    jw_open(w, '[');
    for (i = 0; i < p->nnotes; i++) {
        jw_next(w);
        jw_string(w, p->notes[i]);
    }
    jw_close(w, ']');
    jw_close(w, '}');
}

static void search_out(struct jw *w, const struct plan_search_stats *st)
{
    jw_key(w, "search");
    jw_open(w, '{');
    jw_key_real(w, "time_ms", st->search_ms);
    jw_key_int(w, "states", st->states);
    jw_key_int(w, "greedy_runs", st->greedy_runs);
    jw_key_int(w, "beam_levels", st->levels);
    jw_key_int(w, "column_splits", st->splits);
    jw_key_int(w, "local_moves", st->moves);
    jw_key(w, "budget_exhausted");
    jw_put(w, st->budget_exhausted ? "true" : "false",
           st->budget_exhausted ? 4 : 5);
    jw_close(w, '}');
}

static void notes_out(struct jw *w, const struct input_notes *notes)
{
    size_t i;

    jw_key(w, "notes");
    jw_open(w, '[');
    for (i = 0; i < notes->n; i++) {
        const struct input_note *nt = &notes->v[i];

        jw_next(w);
        jw_open(w, '{');
        jw_key_str(w, "kind", json__note_kind_key(nt->kind));
        jw_key_str(w, "table", nt->table);
        jw_key_str(w, "field", nt->field);
        jw_key_str(w, "message", nt->text);
        jw_close(w, '}');
    }
    jw_close(w, ']');
}

char *json_plan_noted(const struct plan *p, const struct table *tables,
                      const struct input_notes *notes)
{
    struct jw w;
    int32_t r;

    memset(&w, 0, sizeof(w));
    jw_open(&w, '{');
    jw_key_str(&w, "algorithm", p->algorithm);
    jw_key_real(&w, "plan_cost_ms", p->cost_ms);
    jw_key_str(&w, "cost_model", p->cost_model);
    jw_key_str(&w, "comm_model", p->comm_model);
    jw_key(&w, "devices");
    jw_open(&w, '[');
    for (r = 0; r < p->ndevices; r++)
        device_out(&w, &p->devices[r], r);
    jw_close(&w, ']');
    hosts_out(&w, p);
    tables_out(&w, p, tables);
    if (p->explain.critical_device >= 0)
        explain_out(&w, p, tables);
    if (p->stats.states > 0)
        search_out(&w, &p->stats);
    if (notes != NULL && notes->n > 0)
        notes_out(&w, notes);
    jw_close(&w, '}');
    if (w.bad) {
        free(w.buf);
        return NULL;
    }
    return w.buf;
}

char *json_plan(const struct plan *p, const struct table *tables)
{
    return json_plan_noted(p, tables, NULL);
}
