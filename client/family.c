/*
 * Errors by table family (client.h): the samples of a store grouped by
 * the family they were drawn from (formats.h: one family, "mix" for a shard
 * of several, "other" for none), the hold-outs of `train
 * --hold-out-family`, and the per-family table that `train` and `score`
 * print and the store keeps with a model.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "store.h"

bool ctl_held_out(const char *label, const bool hold[FAMILY_MIX + 1])
{
    uint32_t mask;
    int f;

    if (family_label_mask(label, &mask) != 0)
        return false; /* "other": no family to hold out */
    if (hold[FAMILY_MIX] && (mask & (mask - 1)) != 0)
        return true;
    for (f = 0; f < FAMILY_COUNT; f++)
        if (hold[f] && (mask & (1u << f)))
            return true;
    return false;
}

int ctl_errors_where(const struct store_sample *smp, const double *pred,
                     size_t n, const bool *pick,
                     int (*key)(const struct store_sample *), int g,
                     double *scratch, struct net_errors *e, size_t *cnt)
{
    double *p = scratch, *m = scratch + n;
    size_t i;

    *cnt = 0;
    for (i = 0; i < n; i++) {
        if ((pick != NULL && !pick[i]) || key(&smp[i]) != g)
            continue;
        p[*cnt] = pred[i];
        m[*cnt] = smp[i].measured_ms;
        (*cnt)++;
    }
    return *cnt > 0 ? net_errors(p, m, *cnt, e) : 0;
}

/* A sample's group in the per-family table. */
static int family_key(const struct store_sample *s)
{
    return family_label_group(s->family);
}

int ctl_family_rows(const struct store_sample *smp, const double *pred,
                    size_t n, const bool *pick, bool held_out,
                    struct ctl_family_row *rows, size_t *nrows)
{
    double *scratch = malloc(2 * (n ? n : 1) * sizeof(*scratch));
    size_t cnt, out = 0;
    int g, rv = 0;

    if (scratch == NULL)
        return SD_ENOMEM;
    for (g = 0; g <= FAMILY_OTHER && rv == 0; g++) {
        rv = ctl_errors_where(smp, pred, n, pick, family_key, g, scratch,
                              &rows[out].e, &cnt);
        if (cnt == 0)
            continue;
        rows[out].group = g;
        rows[out].held_out = held_out;
        out++;
    }
    free(scratch);
    *nrows = out;
    return rv;
}

void ctl_print_family_rows(FILE *out, const struct ctl_family_row *rows,
                           size_t n, const char *split)
{
    size_t i;

    if (n == 0)
        return;
    fprintf(out, "%-9s %-9s %7s %8s %8s %14s\n", "family", "split", "count",
            "MAPE", "p90", "signed median");
    for (i = 0; i < n; i++)
        fprintf(out, "%-9s %-9s %7zu %7.2f%% %7.2f%% %+13.2f%%\n",
                family_group_name(rows[i].group),
                rows[i].held_out ? "held out" : split, rows[i].e.n,
                100 * rows[i].e.mape, 100 * rows[i].e.p90,
                100 * rows[i].e.signed_median);
}

void ctl_family_metrics(const struct ctl_family_row *rows, size_t n,
                        struct store_model_metrics *mx)
{
    size_t i;

    mx->nfamilies = 0;
    for (i = 0; i < n && mx->nfamilies < STORE_MODEL_FAMILIES_MAX; i++) {
        struct store_family_metrics *f = &mx->families[mx->nfamilies++];

        memset(f, 0, sizeof(*f));
        snprintf(f->family, sizeof(f->family), "%s",
                 family_group_name(rows[i].group));
        f->held_out = rows[i].held_out;
        f->samples = (int64_t)rows[i].e.n;
        f->mape = rows[i].e.mape;
        f->signed_median = rows[i].e.signed_median;
    }
}
