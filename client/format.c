/* Human-readable plan report for shardctl (client.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"

#define GIB ((double)(1ull << 30))

/* Appends one shard's label ("name" or "name[off:end]") to a line buffer,
 * ending it with ", ..." when it is full. */
static void append_label(char *line, size_t cap, const struct table *t,
                         const struct shard *s, bool *full)
{
    char label[TABLE_NAME_MAX + 32];
    size_t used = strlen(line);

    if (*full)
        return;
    if (s->scheme == SCHEME_DP)
        snprintf(label, sizeof(label), "%s%s(dp)", used ? ", " : "", t->name);
    else if (s->row_count > 0)
        snprintf(label, sizeof(label), "%s%s[%d:%d,r%lld:%lld]",
                 used ? ", " : "", t->name, (int)s->col_offset,
                 (int)(s->col_offset + s->col_width), (long long)s->row_offset,
                 (long long)(s->row_offset + s->row_count));
    else if (s->col_width == t->dim)
        snprintf(label, sizeof(label), "%s%s", used ? ", " : "", t->name);
    else
        snprintf(label, sizeof(label), "%s%s[%d:%d]", used ? ", " : "", t->name,
                 (int)s->col_offset, (int)(s->col_offset + s->col_width));
    if (used + strlen(label) + 6 >= cap) {
        snprintf(line + used, cap - used, ", ...");
        *full = true;
        return;
    }
    memcpy(line + used, label, strlen(label) + 1);
}

void format_plan_text(FILE *out, const struct plan *p,
                      const struct table *tables, size_t ntables,
                      const struct topology *t)
{
    format_plan_spread(out, p, tables, ntables, t, NULL);
}

void format_plan_spread(FILE *out, const struct plan *p,
                        const struct table *tables, size_t ntables,
                        const struct topology *t, const struct plan_spread *sp)
{
    double sum_compute = 0, max_compute = 0;
    char line[72];
    int32_t r;
    size_t k;

    for (r = 0; r < p->ndevices; r++) {
        sum_compute += p->devices[r].compute_ms;
        if (p->devices[r].compute_ms > max_compute)
            max_compute = p->devices[r].compute_ms;
    }
    fprintf(out, "plan: %s, %zu tables in %zu shards on %d devices\n",
            p->algorithm, ntables, p->nshards, (int)p->ndevices);
    fprintf(out, "plan cost: %.3f ms (compute: %s model, comm: %s model)\n",
            p->cost_ms, p->cost_model, p->comm_model);
    if (sum_compute > 0)
        fprintf(out, "compute imbalance: max is %.1f%% above the mean\n",
                100.0 * (max_compute * p->ndevices / sum_compute - 1.0));
    if (sp != NULL)
        fprintf(out,
                "spread: plan cost %.3f to %.3f ms over the %d members of "
                "the model's ensemble\n",
                sp->cost_lo, sp->cost_hi, (int)sp->members);
    fprintf(out, "\n%6s  %-17s %9s ", "device", "memory GiB (%)", "compute");
    if (sp != NULL)
        fprintf(out, "%-15s ", "compute range");
    fprintf(out, "%9s %9s %9s %6s  %s\n", "fwd_comm", "bwd_comm", "total",
            "shards", "tables");
    for (r = 0; r < p->ndevices; r++) {
        const struct plan_device *dv = &p->devices[r];
        char mem[32];
        bool full = false;

        line[0] = '\0';
        for (k = 0; k < p->nshards; k++)
            if (p->shards[k].device == r)
                append_label(line, sizeof(line), &tables[p->shards[k].table],
                             &p->shards[k], &full);
        if (topology_mem(t, r) >= UINT64_MAX / 4) /* no capacity given */
            snprintf(mem, sizeof(mem), "%.3f", (double)dv->mem_bytes / GIB);
        else
            snprintf(
                mem, sizeof(mem), "%.3f (%.1f%%)", (double)dv->mem_bytes / GIB,
                100.0 * (double)dv->mem_bytes / (double)topology_mem(t, r));
        fprintf(out, "%6d  %-17s %9.3f ", (int)r, mem, dv->compute_ms);
        if (sp != NULL && r < sp->ndevices) {
            char range[40];

            snprintf(range, sizeof(range), "%.3f-%.3f", sp->lo[r], sp->hi[r]);
            fprintf(out, "%-15s ", range);
        } else if (sp != NULL) {
            fprintf(out, "%-15s ", "");
        }
        fprintf(out, "%9.3f %9.3f %9.3f %6d  %s\n", dv->fwd_comm_ms,
                dv->bwd_comm_ms, dv->total_ms, (int)dv->nshards, line);
    }
    fprintf(out, "\ncosts in ms per training step; fwd_comm includes waiting "
                 "for the slowest device\n");
    if (sp != NULL)
        fprintf(out, "compute range: the least and the largest prediction of "
                     "the ensemble's members\n");
    format_schemes(out, p, tables);
    format_tiers(out, p, tables, t);
    format_explain(out, p, tables);
}

/* x of cap as "G.GGG (P.P%)"; no share of no cap, or of an unbounded one
 * (eval without capacities). */
static void gib_pct(char *buf, size_t len, uint64_t x, uint64_t cap)
{
    if (cap == 0 || cap >= UINT64_MAX / 4)
        snprintf(buf, len, "%.3f", (double)x / GIB);
    else
        snprintf(buf, len, "%.3f (%.1f%%)", (double)x / GIB,
                 100.0 * (double)x / (double)cap);
}

/* The tables off HBM: kernel, load factor and modelled miss rate. */
static void format_tiered_tables(FILE *out, const struct plan *p,
                                 const struct table *tables,
                                 const struct topology *t)
{
    size_t k;

    for (k = 0; k < p->nshards; k++) {
        const struct shard *s = &p->shards[k];
        const struct table *tb = &tables[s->table];

        if (s->tier == TIER_HBM ||
            (k > 0 && p->shards[k - 1].table == s->table))
            continue;
        if (s->tier == TIER_UVM_CACHING)
            fprintf(out, "  %-24s %s, load factor %.3g, miss rate %.2f%%\n",
                    tb->name, tier_name((enum table_tier)s->tier),
                    (double)s->cache_load_factor,
                    100.0 * tier_miss_rate(tb, t->batch_size,
                                           s->cache_load_factor));
        else
            fprintf(out, "  %-24s %s\n", tb->name,
                    tier_name((enum table_tier)s->tier));
    }
}

/* How the host-link time was costed: "modelled", "measured, in compute"
 * (a measured plan on a backend that times the tiers) or both. */
static const char *tier_basis(const struct plan *p)
{
    bool modelled = false, measured = false;
    int32_t r;

    for (r = 0; r < p->ndevices; r++) {
        modelled = modelled || p->devices[r].tier_ms > 0;
        measured = measured || p->devices[r].tier_measured;
    }
    return measured && modelled ? "modelled, and measured in compute"
           : measured           ? "measured, in compute"
                                : "modelled";
}

void format_tiers(FILE *out, const struct plan *p, const struct table *tables,
                  const struct topology *t)
{
    int32_t r, h, per = t->devices_per_host > 0 ? t->devices_per_host : 1;
    bool any = t->host_dram_bytes > 0;
    char hbm[40], ddr[40], dram[40];

    for (r = 0; r < p->ndevices; r++)
        any = any || p->devices[r].ddr_bytes > 0;
    if (!any)
        return;
    /* eval without --mem-gb or --host-dram-gb: as much as the plan needs */
    if (t->host_dram_bytes >= UINT64_MAX / 4)
        snprintf(dram, sizeof(dram), "unbounded");
    else
        snprintf(dram, sizeof(dram), "%.3f GiB per host",
                 (double)t->host_dram_bytes / GIB);
    fprintf(out, "\nmemory tiers (host DRAM %s; host-link time %s):\n", dram,
            tier_basis(p));
    fprintf(out, "%6s  %-20s %-20s %9s\n", "device", "HBM GiB (%)",
            "DDR GiB (% of host)", "tier ms");
    for (r = 0; r < p->ndevices; r++) {
        const struct plan_device *dv = &p->devices[r];

        gib_pct(hbm, sizeof(hbm), dv->mem_bytes, topology_mem(t, r));
        gib_pct(ddr, sizeof(ddr), dv->ddr_bytes, t->host_dram_bytes);
        if (dv->tier_measured && dv->tier_ms == 0)
            fprintf(out, "%6d  %-20s %-20s %9s\n", (int)r, hbm, ddr,
                    "measured");
        else
            fprintf(out, "%6d  %-20s %-20s %9.3f%s\n", (int)r, hbm, ddr,
                    dv->tier_ms, dv->tier_measured ? " + measured" : "");
    }
    for (h = 0; h * per < p->ndevices; h++) {
        uint64_t hb = 0, hc = 0, db = 0;

        for (r = h * per; r < (h + 1) * per && r < p->ndevices; r++) {
            hb += p->devices[r].mem_bytes;
            hc += topology_mem(t, r);
            db += p->devices[r].ddr_bytes;
        }
        gib_pct(hbm, sizeof(hbm), hb, hc);
        gib_pct(ddr, sizeof(ddr), db, t->host_dram_bytes);
        fprintf(out, "host %d: HBM GiB %s, DDR GiB %s\n", (int)h, hbm, ddr);
    }
    format_tiered_tables(out, p, tables, t);
}

/* At most this many split or replicated tables are listed one by one. */
#define FORMAT_SCHEME_ROWS 20

void format_schemes(FILE *out, const struct plan *p, const struct table *tables)
{
    size_t count[SCHEME_COUNT] = {0}, k, first, listed = 0, others = 0;
    int sc, shown = 0;

    for (k = 0; k < p->nshards; k = first) {
        for (first = k;
             first < p->nshards && p->shards[first].table == p->shards[k].table;
             first++)
            ;
        count[plan_table_scheme(p, k)]++;
    }
    fprintf(out, "\nschemes:");
    for (sc = 0; sc < SCHEME_COUNT; sc++)
        if (count[sc] > 0)
            fprintf(out, "%s %zu %s", shown++ ? "," : "", count[sc],
                    scheme_name((enum plan_scheme)sc));
    fprintf(out, "\n");
    /* TorchRec's print(plan) for the tables that are not table-wise. */
    for (k = 0; k < p->nshards; k = first) {
        enum plan_scheme s = plan_table_scheme(p, k);
        char ranks[64] = "";
        size_t used = 0;

        for (first = k;
             first < p->nshards && p->shards[first].table == p->shards[k].table;
             first++)
            if (used + 12 < sizeof(ranks))
                used += (size_t)snprintf(ranks + used, sizeof(ranks) - used,
                                         "%s%d", first > k ? ", " : "",
                                         (int)p->shards[first].device);
            else if (used + 5 < sizeof(ranks))
                used += (size_t)snprintf(ranks + used, sizeof(ranks) - used,
                                         ", ...");
        if (s == SCHEME_TW)
            continue;
        if (listed == FORMAT_SCHEME_ROWS) {
            others++;
            continue;
        }
        if (listed++ == 0)
            fprintf(out, "%-24s | %-14s | %s\n", "param", "sharding type",
                    "ranks");
        fprintf(out, "%-24.24s | %-14s | [%s]\n",
                tables[p->shards[k].table].name, scheme_name(s), ranks);
    }
    if (others > 0)
        fprintf(out, "... and %zu more split or replicated tables\n", others);
}

void format_explain(FILE *out, const struct plan *p, const struct table *tables)
{
    const struct plan_explain *e = &p->explain;
    const struct plan_search_stats *st = &p->stats;
    int i;

    if (e->critical_device < 0)
        return;
    fprintf(out, "\nwhy: device %d is the slowest", (int)e->critical_device);
    for (i = 0; i < e->ndrivers; i++) {
        const struct shard *s = &p->shards[e->drivers[i]];
        const struct table *t = &tables[s->table];

        fprintf(out, "%s%s", i ? ", " : "; driven by ", t->name);
        if (s->col_width != t->dim)
            fprintf(out, "[%d:%d]", (int)s->col_offset,
                    (int)(s->col_offset + s->col_width));
        if (e->driver_ms[i] >= 0) /* negative: not known (client.h) */
            fprintf(out, " (%.3f ms)", e->driver_ms[i]);
    }
    fprintf(out, "\nlower bound: %.3f ms; this plan is %.1f%% above it\n",
            e->lower_bound_ms, 100.0 * e->gap);
    for (i = 0; i < p->nnotes; i++)
        fprintf(out, "note: %s\n", p->notes[i]);
    if (st->states < 0) /* a daemon's plan: fewer figures (client.h) */
        fprintf(out, "search: %.1f ms, %lld greedy runs, %d column splits%s\n",
                st->search_ms, (long long)st->greedy_runs, (int)st->splits,
                st->budget_exhausted ? " (time budget reached)" : "");
    else if (st->states > 0)
        fprintf(out,
                "search: %.1f ms, %lld states, %lld greedy runs, %d beam "
                "levels, %d column splits, %d local moves%s\n",
                st->search_ms, (long long)st->states,
                (long long)st->greedy_runs, (int)st->levels, (int)st->splits,
                (int)st->moves,
                st->budget_exhausted ? " (time budget reached)" : "");
}

/* The group of notes a note belongs to: its kind and field. */
struct note_group {
    enum note_kind kind;
    const char *field;
    size_t count;
};

#define NOTES_SHOWN 3 /* of one group */

void format_notes(FILE *out, const struct input_notes *notes)
{
    struct note_group *groups;
    size_t ngroups = 0, i, g;

    if (notes == NULL || notes->n == 0)
        return;
    groups = calloc(notes->n, sizeof(*groups));
    fprintf(out, "\ninputs:\n");
    for (i = 0; i < notes->n; i++) {
        const struct input_note *nt = &notes->v[i];

        for (g = 0; groups != NULL && g < ngroups; g++)
            if (groups[g].kind == nt->kind &&
                strcmp(groups[g].field, nt->field) == 0)
                break;
        if (groups != NULL && g == ngroups)
            groups[ngroups++] = (struct note_group){nt->kind, nt->field, 0};
        if (groups != NULL && groups[g].count++ >= NOTES_SHOWN)
            continue;
        fprintf(out, "  %s: %s\n", note_kind_name(nt->kind), nt->text);
    }
    for (g = 0; g < ngroups; g++)
        if (groups[g].count > NOTES_SHOWN)
            fprintf(out, "  %s: ... and %zu more on %s (--json lists them)\n",
                    note_kind_name(groups[g].kind),
                    groups[g].count - NOTES_SHOWN, groups[g].field);
    free(groups);
}
