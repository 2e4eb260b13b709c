/* Human-readable plan report for shardctl (client.h). */
#include <stdint.h>
#include <stdio.h>
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
    if (s->col_width == t->dim)
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
    format_explain(out, p, tables);
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
