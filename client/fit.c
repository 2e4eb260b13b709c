/*
 * shardctl's model-fitting commands (client.h), on a store's samples:
 *   shardctl train --db F [--profile P]    a cost model (or an ensemble of
 *                                          K, --ensemble) from the samples,
 *                                          whole families held out with
 *                                          --hold-out-family; its products
 *                                          on a device with --backend
 *   shardctl score --db F [--model F]      a model's error on them, by
 *                                          family too (scored in one batch
 *                                          by the model resident on a
 *                                          device with --backend)
 * Ctrl-C stops training and stores nothing (exit 130).
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "profiler.h"

/* One line per 10 epochs, and the last; Ctrl-C stops training. */
static int train_progress(void *ctx, int32_t epoch, int32_t max_epochs,
                          double train_loss, double val_mape)
{
    (void)ctx;
    if (epoch % 10 == 0 || epoch == 1)
        fprintf(stderr,
                "train: epoch %d/%d, loss %.5f, validation MAPE "
                "%.2f%%\n",
                (int)epoch, (int)max_epochs, train_loss, 100 * val_mape);
    return atomic_load(&ctl_stop_requested) != 0;
}

/* ---------------------------------------------------------------------- */
/* train                                                                   */

/* What one train run holds. */
struct fit {
    struct store_sample *smp; /* the profile's samples, n of them */
    size_t n;
    bool *held;              /* n: kept out of training */
    struct train_sample *ts; /* the training ones, nfit */
    size_t nfit;
    uint8_t *split; /* nfit: TRAIN_SPLIT_* of each training sample */
    bool *pick;     /* n: scratch */
    double *pred;   /* n: member 0's prediction of every sample */
    struct net_ensemble ens;
};

static void fit_free(struct fit *f)
{
    int32_t i;

    for (i = 0; i < f->ens.k; i++)
        free(f->ens.m[i]);
    free(f->held);
    free(f->ts);
    free(f->split);
    free(f->pick);
    free(f->pred);
    store_samples_free(f->smp, f->n);
}

/* Splits the samples: held out by hold[], or for training. */
static int fit_select(struct fit *f, const bool hold[FAMILY_MIX + 1])
{
    size_t i;

    f->held = calloc(f->n ? f->n : 1, sizeof(*f->held));
    f->pick = calloc(f->n ? f->n : 1, sizeof(*f->pick));
    f->pred = calloc(f->n ? f->n : 1, sizeof(*f->pred));
    f->ts = calloc(f->n ? f->n : 1, sizeof(*f->ts));
    f->split = calloc(f->n ? f->n : 1, sizeof(*f->split));
    if (!f->held || !f->pick || !f->pred || !f->ts || !f->split)
        return ctl_fail(1, "train: out of memory");
    for (i = 0; i < f->n; i++) {
        f->held[i] = ctl_held_out(f->smp[i].family, hold);
        if (!f->held[i])
            f->ts[f->nfit++] = (struct train_sample){
                f->smp[i].tables, f->smp[i].ntables, f->smp[i].measured_ms};
    }
    return 0;
}

/*
 * The per-family rows of member 0: the held-out families on all their
 * samples, then every family on its samples in the test split.
 */
static int fit_rows(struct fit *f, const bool hold[FAMILY_MIX + 1],
                    struct ctl_family_row *rows, size_t *nrows)
{
    size_t i, j, nh = 0, nt = 0;
    int rv;

    for (i = 0; i < f->n; i++)
        f->pred[i] =
            net_tables_ms(f->ens.m[0], f->smp[i].tables, f->smp[i].ntables);
    for (i = 0; i < f->n; i++)
        f->pick[i] = f->held[i] && hold[family_label_group(f->smp[i].family)];
    rv = ctl_family_rows(f->smp, f->pred, f->n, f->pick, true, rows, &nh);
    /* split[] runs over the training samples alone, in sample order. */
    for (i = 0, j = 0; i < f->n; i++) {
        f->pick[i] = false;
        if (!f->held[i])
            f->pick[i] = f->split[j++] == TRAIN_SPLIT_TEST;
    }
    if (rv == 0)
        rv = ctl_family_rows(f->smp, f->pred, f->n, f->pick, false, rows + nh,
                             &nt);
    *nrows = nh + nt;
    return rv == 0 ? 0 : ctl_fail(1, "train: out of memory");
}

/* The spread of e's members over each of the n samples (whole tables), its
 * q-quantile in out[i].quantile.  0, or SD_ENOMEM. */
static int sample_spreads(const struct net_ensemble *e,
                          const struct store_sample *smp, size_t n, double q,
                          struct net_spread *out)
{
    struct shard_item *items = NULL;
    size_t i, k, cap = 0;

    for (i = 0; i < n; i++) {
        if (smp[i].ntables > cap) {
            struct shard_item *grown =
                realloc(items, smp[i].ntables * sizeof(*items));

            if (grown == NULL) {
                free(items);
                return SD_ENOMEM;
            }
            items = grown;
            cap = smp[i].ntables;
        }
        for (k = 0; k < smp[i].ntables; k++)
            items[k] =
                (struct shard_item){&smp[i].tables[k], smp[i].tables[k].dim};
        net_ensemble_shard(e, NULL, items, smp[i].ntables, q, &out[i]);
    }
    free(items);
    return 0;
}

/* With an ensemble: per held-out family, the MAPE of the members' median
 * and how often the measured time lies within the members' range. */
static int print_ensemble_rows(const struct fit *f,
                               const bool hold[FAMILY_MIX + 1])
{
    struct net_spread *sp = malloc(f->n * sizeof(*sp));
    int g;
    size_t i;

    if (sp == NULL || sample_spreads(&f->ens, f->smp, f->n, 0.5, sp) != 0) {
        free(sp);
        return ctl_fail(1, "train: out of memory");
    }
    printf("ensemble of %d: family, MAPE of the median, measured within "
           "the members' range\n",
           (int)f->ens.k);
    for (g = 0; g <= FAMILY_OTHER; g++) {
        double ape = 0;
        size_t cnt = 0, inside = 0;

        if (g > FAMILY_MIX || !hold[g])
            continue;
        for (i = 0; i < f->n; i++) {
            double ms = f->smp[i].measured_ms;

            if (!f->held[i] || family_label_group(f->smp[i].family) != g)
                continue;
            ape += fabs(sp[i].quantile - ms) / ms;
            inside += sp[i].lo <= ms && ms <= sp[i].hi;
            cnt++;
        }
        if (cnt > 0)
            printf("  %-9s %7zu %7.2f%% %6.1f%%\n", family_group_name(g), cnt,
                   100 * ape / (double)cnt, 100 * (double)inside / (double)cnt);
    }
    free(sp);
    return 0;
}

/* --weight-decay, or the decay by the sample count of all the samples
 * loaded, held out or not: a hold-out then trains as the model of them all
 * would, and tests the recipe that ships (docs/models.md, "The pair term
 * weighed by lookups"). */
static double fit_decay(const struct ctl_opts *o, const struct fit *f)
{
    struct train_params tp;

    train_params_default(&tp);
    if (o->weight_decay >= 0)
        tp.weight_decay = o->weight_decay;
    return train_decay(&tp, f->n);
}

/* Trains the members; member 0 records the split. */
static int fit_members(struct fit *f, const struct ctl_opts *o,
                       const struct store_profile *prof,
                       const struct net_gemm *gemm)
{
    struct train_params tp;
    struct sd_diag d;
    int32_t k, want = o->ensemble > 0 ? (int32_t)o->ensemble : 1;
    int rv;

    for (k = 0; k < want; k++) {
        train_params_default(&tp);
        /* The physical prior, its pair term weighed by lookups, unless
         * told otherwise (docs/models.md, "Ensembles held out"). */
        if (net_extras_parse(o->features ? o->features : "v4", &tp.extras,
                             &d) != 0)
            return ctl_fail(CTL_EXIT_USAGE, "train: --features: %s", d.msg);
        tp.seed = (uint64_t)o->seed;
        if (o->epochs)
            tp.max_epochs = (int32_t)o->epochs;
        tp.weight_decay = fit_decay(o, f);
        tp.progress = train_progress;
        tp.gemm = gemm;
        tp.member = (uint32_t)k;
        tp.split = k == 0 ? f->split : NULL;
        if (want > 1)
            fprintf(stderr, "train: member %d of %d\n", (int)k, (int)want);
        rv = net_train(&tp, f->ts, f->nfit, prof->name, prof->batch_size,
                       &f->ens.m[k], &d);
        if (rv != 0)
            return ctl_fail(ctl_exit_for(rv), "train: %s", d.msg);
        f->ens.k = k + 1;
        if (atomic_load(&ctl_stop_requested))
            return 0;
    }
    return 0;
}

/*
 * Comm models from the profile's comm samples (the profiler's NCCL
 * exchanges): for each device count with 10 samples or more, a forward
 * and a backward net through the compute model's training path, added to
 * *m (at most COMM_NETS_MAX / 2 counts, the most sampled first).  Nothing
 * when the store has none.  Returns 0 or an exit code.
 */
static int train_comm_models(struct store *st, const struct store_profile *prof,
                             const struct train_params *tp, struct cost_net **m)
{
    struct store_sample *smp = NULL;
    struct comm_sample *cs = NULL;
    double *buf = NULL;
    int32_t *dims = NULL, counts[COMM_DEVICES_MAX + 1] = {0}, nd;
    struct sd_diag d = {{0}};
    size_t n = 0, i, r, at = 0, total = 0;
    int rv, k, pairs = 0;

    rv = store_samples_load(st, prof->id, STORE_KIND_COMM, 0, 0, &smp, &n, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "train: comm samples: %s", d.msg);
    for (i = 0; i < n; i++)
        total += smp[i].ndevices;
    cs = calloc(n ? n : 1, sizeof(*cs));
    dims = calloc(total ? total : 1, sizeof(*dims));
    buf = calloc(3 * (total ? total : 1), sizeof(*buf));
    if (!cs || !dims || !buf) {
        rv = ctl_fail(1, "train: out of memory");
        goto out;
    }
    for (i = 0; i < n; i++) {
        const struct store_sample *x = &smp[i];

        cs[i] = (struct comm_sample){(int32_t)x->ndevices, dims + at, buf + at,
                                     buf + total + at, buf + 2 * total + at};
        for (r = 0; r < x->ndevices; r++, at++) {
            dims[at] = x->devices[r].dim_sum;
            buf[at] = x->devices[r].sleep_ms;
            buf[total + at] = x->devices[r].fwd_ms;
            buf[2 * total + at] = x->devices[r].bwd_ms;
        }
        if (x->ndevices <= COMM_DEVICES_MAX)
            counts[x->ndevices]++;
    }
    while (pairs < COMM_NETS_MAX / 2) {
        struct comm_net c[2];
        float *p[2] = {NULL, NULL};

        for (nd = 0, k = 2; k <= COMM_DEVICES_MAX; k++)
            if (counts[k] >= 10 && (nd == 0 || counts[k] > counts[nd]))
                nd = k;
        if (nd == 0)
            break;
        counts[nd] = 0;
        rv = comm_train(tp, cs, n, COMM_FWD, nd, &c[0], &p[0], &d);
        if (rv == 0)
            rv = comm_train(tp, cs, n, COMM_BWD, nd, &c[1], &p[1], &d);
        for (k = 0; rv == 0 && k < 2; k++)
            rv = net_add_comm(m, &c[k], p[k], &d);
        free(p[0]);
        free(p[1]);
        if (rv != 0) {
            rv = ctl_fail(ctl_exit_for(rv), "train: comm: %s", d.msg);
            goto out;
        }
        printf(
            "comm models of %d devices: forward MAPE %.2f%% test, "
            "backward %.2f%% test (%lld samples)\n",
            (int)nd, 100 * c[0].metrics.test_mape, 100 * c[1].metrics.test_mape,
            (long long)(c[0].metrics.train_samples + c[0].metrics.val_samples +
                        c[0].metrics.test_samples));
        pairs++;
    }
    rv = 0;
out:
    free(buf);
    free(dims);
    free(cs);
    store_samples_free(smp, n);
    return rv;
}

/* A sample's shape: 1 with a row block, else 2 with a data-parallel
 * replica, 0 for whole tables (column slices among them). */
static int shape_key(const struct store_sample *s)
{
    if (strcmp(s->source, PROF_SOURCE_ROWS) == 0)
        return 1;
    return strcmp(s->source, PROF_SOURCE_REPLICAS) == 0 ? 2 : 0;
}

/* A sample's precision: 1 when some table is not fp32 (its kernel moved
 * fewer bytes per lookup), 0 when all are. */
static int precision_key(const struct store_sample *s)
{
    size_t i;

    for (i = 0; i < s->ntables; i++)
        if (s->tables[i].dtype != TABLE_DTYPE_FP32)
            return 1;
    return 0;
}

/* A sample's size: 1 for a shard of more tables than profile draws by
 * default (a device of a plan often holds more), 0 for 1 .. 15. */
static int many_tables_key(const struct store_sample *s)
{
    return s->ntables > 15;
}

/* A second look at the errors: the samples in two or three groups by a
 * key (label[2] NULL: two). */
struct ctl_split {
    const char *title;  /* the line above the table */
    const char *column; /* the group column's name */
    const char *label[3];
    int (*key)(const struct store_sample *);
};

static const struct ctl_split by_shape = {
    "by shape (row blocks: shards of the profiler's row blocks; replicas: "
    "devices of plans with data-parallel tables, profile --alg):",
    "shape",
    {"whole tables", "row blocks", "replicas"},
    shape_key};
static const struct ctl_split by_precision = {
    "by precision (the cpu kernels time fp16/bf16 weights in their type; "
    "only derived inputs, --features v2, see the type):",
    "precision",
    {"fp32", "fp16/bf16"},
    precision_key};
static const struct ctl_split by_tables = {
    "by tables a shard (profile --max-tables draws more than 15):",
    "tables",
    {"1 .. 15", "16 or more"},
    many_tables_key};

/*
 * The errors of predictions pred on the picked samples (pick NULL: all) in
 * the groups of `by`, as lines labelled `split`; nothing when neither
 * has a sample.  0 or SD_ENOMEM.
 */
static int print_split(FILE *out, const struct ctl_split *by,
                       const struct store_sample *smp, const double *pred,
                       size_t n, const bool *pick, const char *split)
{
    double *scratch = malloc(2 * (n ? n : 1) * sizeof(*scratch));
    struct net_errors e;
    size_t cnt;
    bool header = false;
    int g, rv = 0;

    if (scratch == NULL)
        return SD_ENOMEM;
    for (g = 0; g < 3 && by->label[g] != NULL && rv == 0; g++) {
        rv =
            ctl_errors_where(smp, pred, n, pick, by->key, g, scratch, &e, &cnt);
        if (rv != 0 || cnt == 0)
            continue;
        if (!header)
            fprintf(out, "%s\n%-12s %-9s %7s %8s %8s %14s\n", by->title,
                    by->column, "split", "count", "MAPE", "p90",
                    "signed median");
        header = true;
        fprintf(out, "%-12s %-9s %7zu %7.2f%% %7.2f%% %+13.2f%%\n",
                by->label[g], split, cnt, 100 * e.mape, 100 * e.p90,
                100 * e.signed_median);
    }
    free(scratch);
    return rv;
}

/* print_split() of every split above.  0 or SD_ENOMEM. */
static int print_splits(FILE *out, const struct store_sample *smp,
                        const double *pred, size_t n, const bool *pick,
                        const char *split)
{
    static const struct ctl_split *const all[] = {&by_shape, &by_precision,
                                                  &by_tables};
    size_t k;
    int rv = 0;

    for (k = 0; k < sizeof(all) / sizeof(all[0]) && rv == 0; k++)
        rv = print_split(out, all[k], smp, pred, n, pick, split);
    return rv;
}

/* Stores the model (an ensemble file with its members where it has more
 * than one) with member 0's metrics as a new model version. */
static int fit_store(struct store *st, const struct store_profile *prof,
                     const struct fit *f, const struct ctl_family_row *rows,
                     size_t nrows, bool activate, int64_t *id)
{
    const struct cost_net *m = f->ens.m[0];
    struct store_model sm;
    struct sd_diag d;
    void *img = NULL;
    size_t len;
    int rv;

    rv = net_ensemble_serialize(&f->ens, &img, &len);
    if (rv != 0)
        return ctl_fail(1, "train: out of memory");
    memset(&sm, 0, sizeof(sm));
    sm.info.profile_id = prof->id;
    sm.info.kind = STORE_KIND_COMPUTE;
    sm.info.format_version = net_format_version(m);
    sm.info.metrics.val_mape = m->metrics.val_mape;
    sm.info.metrics.test_mape = m->metrics.test_mape;
    sm.info.metrics.train_samples = m->metrics.train_samples;
    sm.info.metrics.val_samples = m->metrics.val_samples;
    sm.info.metrics.test_samples = m->metrics.test_samples;
    ctl_family_metrics(rows, nrows, &sm.info.metrics);
    sm.info.weights_bytes = len;
    sm.weights = img;
    rv = store_model_put(st, &sm, id, &d);
    if (rv == 0 && activate)
        rv = store_model_activate(st, *id, NULL, &d);
    free(img);
    return rv == 0 ? 0 : ctl_fail(ctl_exit_for(rv), "train: %s", d.msg);
}

/* A prior model's fitted coefficients (format 4, --features v3 or v4). */
static void print_prior(const struct cost_net *m)
{
    const char *count = "tables";
    int j, k = 0;

    if (!net_has_prior(m))
        return;
    printf("physical prior, ms per unit of each term:");
    for (j = 0; j < m->x.n; j++)
        if (NET_X_IS_PHYS(m->x.id[j])) {
            printf("%s %s %.3g", k++ ? "," : "",
                   net_extra_name(m->x.id[j]) + strlen("phys_"),
                   net_prior_coef(m, m->x.id[j]));
            if (m->x.id[j] == NET_X_PHYS_PAIR_TABLES)
                count = "pair_tables";
        }
    printf(", %s x bag columns %.3g\n", count, net_prior_pair_coef(m));
}

static int fit_report(const struct ctl_opts *o, const struct fit *f,
                      const struct store_profile *prof, int64_t id,
                      const struct ctl_family_row *rows, size_t nrows,
                      const bool hold[FAMILY_MIX + 1])
{
    const struct cost_net *m = f->ens.m[0];
    struct sd_diag d;
    int rv = 0;

    if (o->out != NULL) {
        rv = net_ensemble_write_file(o->out, &f->ens, &d);
        if (rv != 0)
            return ctl_fail(ctl_exit_for(rv), "train: --out: %s", d.msg);
    }
    printf("model %lld for profile %s%s\n"
           "samples: %lld train, %lld validation, %lld test, %zu held out\n"
           "MAPE: %.2f%% train, %.2f%% validation, %.2f%% test\n"
           "epochs: %d (best %d), seed %llu\n",
           (long long)id, prof->name, o->activate ? " (active)" : "",
           (long long)m->metrics.train_samples,
           (long long)m->metrics.val_samples,
           (long long)m->metrics.test_samples, f->n - f->nfit,
           100 * m->metrics.train_mape, 100 * m->metrics.val_mape,
           100 * m->metrics.test_mape, (int)m->metrics.epochs,
           (int)m->metrics.best_epoch, (unsigned long long)m->metrics.seed);
    print_prior(m);
    ctl_print_family_rows(stdout, rows, nrows, "test");
    if (print_splits(stdout, f->smp, f->pred, f->n, f->pick, "test") != 0)
        return ctl_fail(1, "train: out of memory");
    if (f->ens.k > 1 && f->nfit < f->n && print_ensemble_rows(f, hold) != 0)
        return 1;
    return fflush(stdout) == 0 ? 0 : ctl_fail(1, "cannot write to stdout");
}

/* The samples, the hold-outs and the members; then stored and reported. */
static int train_on(const struct ctl_opts *o, struct store *st,
                    const struct net_gemm *gemm, const char *gemm_name)
{
    struct ctl_family_row rows[2 * (FAMILY_OTHER + 1)];
    struct store_profile prof;
    bool hold[FAMILY_MIX + 1] = {false};
    struct train_params tp;
    struct fit f;
    struct sd_diag d;
    size_t nrows = 0;
    int64_t id = 0;
    int rv;

    memset(&f, 0, sizeof(f));
    if (o->hold_out != NULL && family_parse_list(o->hold_out, hold, &d) != 0)
        return ctl_fail(CTL_EXIT_USAGE, "train: --hold-out-family: %s", d.msg);
    rv = ctl_pick_profile(st, "train", o->profile, &prof);
    if (rv != 0)
        return rv;
    rv = store_samples_load_newest(st, prof.id, STORE_KIND_COMPUTE,
                                   (size_t)o->newest, &f.smp, &f.n, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "train: %s", d.msg);
    rv = fit_select(&f, hold);
    if (rv != 0)
        goto out;
    fprintf(stderr,
            "train: %zu samples of profile %s (%zu held out), products on "
            "%s, weight decay %g",
            f.nfit, prof.name, f.n - f.nfit, gemm_name, fit_decay(o, &f));
    if (o->weight_decay < 0)
        fprintf(stderr, " (by the sample count: %zu, held out too)", f.n);
    fputc('\n', stderr);
    ctl_catch_stop_signals();
    rv = fit_members(&f, o, &prof, gemm);
    if (rv != 0)
        goto out;
    if (atomic_load(&ctl_stop_requested)) {
        fprintf(stderr, "train: interrupted; nothing stored\n");
        rv = 130;
        goto out;
    }
    /* Member 0 carries the profile's comm models, when it has samples. */
    train_params_default(&tp);
    tp.seed = (uint64_t)o->seed;
    if (o->epochs)
        tp.max_epochs = (int32_t)o->epochs;
    rv = train_comm_models(st, &prof, &tp, &f.ens.m[0]);
    if (rv == 0)
        rv = fit_rows(&f, hold, rows, &nrows);
    if (rv == 0)
        rv = fit_store(st, &prof, &f, rows, nrows, o->activate, &id);
    if (rv == 0)
        rv = fit_report(o, &f, &prof, id, rows, nrows, hold);
out:
    fit_free(&f);
    return rv;
}

int measure_train(const struct ctl_opts *o)
{
    struct store *st = NULL;
    struct prof_gemm pg;
    bool on_device = false;
    struct sd_diag d;
    int rv;

    if (o->db == NULL)
        return ctl_fail(CTL_EXIT_USAGE, "train: --db is required");
    if (o->backend != NULL) {
        const struct kern_backend *be = ctl_pick_backend(o->backend);

        if (be == NULL)
            return CTL_EXIT_USAGE;
        rv = prof_gemm_open(be, 0, &pg, &d);
        if (rv != 0)
            return ctl_fail(ctl_exit_for(rv), "train: --backend %s: %s",
                            be->name, d.msg);
        on_device = true;
    }
    rv = store_open(o->db, STORE_OPEN_EXISTING, &st, &d);
    if (rv != 0)
        rv = ctl_fail(ctl_exit_for(rv), "train: %s%s", d.msg,
                      rv == SD_ENOENT ? CTL_NO_STORE : "");
    else
        rv = train_on(o, st, on_device ? &pg.hook : NULL,
                      on_device ? pg.name : "cblas");
    store_close(st);
    if (on_device) {
        if (rv != 0 && rv != CTL_EXIT_USAGE && pg.diag.msg[0] != '\0')
            fprintf(stderr, "shardctl: train: the device said: %s\n",
                    pg.diag.msg);
        prof_gemm_close(&pg);
    }
    return rv;
}

/* ---------------------------------------------------------------------- */
/* score                                                                   */

/*
 * The model's ms for n samples into ms[]: net_tables_ms() of member 0 one
 * by one, with --backend in one batch by the model resident on that
 * backend's device 0, or with --quantile the ensemble's quantile of its
 * members' ms.  Returns 0 or an exit code (the message printed).
 */
static int predict(const struct ctl_opts *o, const struct ctl_model *cm,
                   const struct store_sample *smp, size_t n, double *ms)
{
    const struct cost_net *net = cm->net;
    const struct kern_backend *be;
    struct train_sample *ts;
    struct kern_net *kn = NULL;
    struct sd_diag d;
    size_t i;
    int rv;

    if (o->quantile >= 0) {
        struct net_spread *sp = malloc(n * sizeof(*sp));

        if (sp == NULL ||
            sample_spreads(cm->ens, smp, n, o->quantile, sp) != 0) {
            free(sp);
            return ctl_fail(1, "score: out of memory");
        }
        for (i = 0; i < n; i++)
            ms[i] = sp[i].quantile;
        free(sp);
        return 0;
    }
    if (o->backend == NULL) {
        for (i = 0; i < n; i++)
            ms[i] = net_tables_ms(net, smp[i].tables, smp[i].ntables);
        return 0;
    }
    be = ctl_pick_backend(o->backend);
    if (be == NULL)
        return CTL_EXIT_USAGE;
    ts = calloc(n, sizeof(*ts));
    if (ts == NULL)
        return ctl_fail(1, "score: out of memory");
    for (i = 0; i < n; i++)
        ts[i] = (struct train_sample){smp[i].tables, smp[i].ntables, 1};
    rv = prof_net_upload(be, 0, net, &kn, &d);
    if (rv == 0)
        rv = prof_net_score_tables(kn, net, ts, n, ms, &d);
    kern_net_close(kn);
    free(ts);
    return rv == 0 ? 0
                   : ctl_fail(ctl_exit_for(rv), "score: --backend %s: %s",
                              be->name, d.msg);
}

/* The overall figures and the per-family table of predictions pred. */
static int score_report(const struct ctl_opts *o, const char *profile,
                        const struct store_sample *smp, const double *pred,
                        size_t n)
{
    struct ctl_family_row rows[FAMILY_OTHER + 1];
    struct net_errors e;
    double *meas;
    size_t i, nrows = 0;
    int rv;

    meas = malloc(n * sizeof(*meas));
    if (meas == NULL)
        return ctl_fail(1, "score: out of memory");
    for (i = 0; i < n; i++)
        meas[i] = smp[i].measured_ms;
    rv = net_errors(pred, meas, n, &e);
    free(meas);
    if (rv == 0)
        rv = ctl_family_rows(smp, pred, n, NULL, false, rows, &nrows);
    if (rv != 0)
        return ctl_fail(1, "score: out of memory");
    if (o->quantile >= 0)
        printf("the %g-quantile of the ensemble's members\n", o->quantile);
    printf("model %s on %zu samples of %s%s%s\n"
           "MAPE %.2f%%, median %.2f%%, p90 %.2f%%\n"
           "signed median %+.2f%% (> 0: the model predicts more than was "
           "measured)\n",
           o->model ? o->model : "(embedded)", n, profile,
           o->backend ? ", scored on " : "", o->backend ? o->backend : "",
           100 * e.mape, 100 * e.median, 100 * e.p90, 100 * e.signed_median);
    printf("by family (the samples' families; mix: a shard of several):\n");
    ctl_print_family_rows(stdout, rows, nrows, "all");
    if (print_splits(stdout, smp, pred, n, NULL, "all") != 0)
        return ctl_fail(1, "score: out of memory");
    return fflush(stdout) == 0 ? 0 : ctl_fail(1, "cannot write to stdout");
}

/*
 * --out: a CSV row a sample (its id, families, source, tables, measured and
 * predicted ms and the signed error), and for a prior model the prior's ms
 * alone, the prediction with the net's ratio 1: whether the physics or the
 * net misses a sample (empty for other models, and with net NULL: an
 * ensemble's quantile has no one prior).
 */
static int write_samples(const char *path, const struct cost_net *net,
                         const struct store_sample *smp, const double *pred,
                         size_t n)
{
    char *text = NULL;
    size_t len = 0, i;
    FILE *f = open_memstream(&text, &len);
    int rv;

    if (f == NULL)
        return ctl_fail(1, "score: out of memory");
    fputs("id,family,source,tables,measured_ms,predicted_ms,error,prior_ms", f);
    for (i = 0; i < n; i++) {
        double prior = net != NULL ? net_tables_prior_ms(net, smp[i].tables,
                                                         smp[i].ntables)
                                   : NAN;

        fprintf(f, "\n%lld,%s,%s,%zu,%.6g,%.6g,%+.4f,", (long long)smp[i].id,
                smp[i].family, smp[i].source, smp[i].ntables,
                smp[i].measured_ms, pred[i], pred[i] / smp[i].measured_ms - 1);
        if (!isnan(prior))
            fprintf(f, "%.6g", prior);
    }
    if (fclose(f) != 0) {
        free(text);
        return ctl_fail(1, "score: out of memory");
    }
    rv = ctl_write_output(path, text);
    free(text);
    return rv;
}

/* The refusal of score when the store has no samples of the model's own
 * profile, in one line naming the store's profiles. */
static int no_own_profile(struct store *st, const char *model_profile)
{
    struct store_profile *all = NULL;
    struct sd_diag d;
    char names[512];
    size_t n = 0, i, len = 0;

    names[0] = '\0';
    if (store_profile_list(st, &all, &n, &d) == 0)
        for (i = 0; i < n && len < sizeof(names); i++)
            len += (size_t)snprintf(names + len, sizeof(names) - len,
                                    "%s\"%s\"", i ? ", " : "", all[i].name);
    free(all);
    return ctl_fail(CTL_EXIT_USAGE,
                    "score: --profile: no such profile \"%s\" (the model's) "
                    "in the store; --profile NAME scores the model on "
                    "another profile's samples (the store has %s)",
                    model_profile, n > 0 ? names : "none");
}

/* How well a model predicts the measured samples of a store: the held-out
 * check for samples measured after it was trained.  The signed median says
 * whether the error is a drift of the whole machine (most samples off the
 * same way) rather than scatter. */
int measure_score(const struct ctl_opts *o)
{
    struct store *st = NULL;
    struct store_profile prof;
    struct store_sample *smp = NULL;
    struct ctl_model cm;
    struct sd_diag d;
    double *pred = NULL;
    size_t n = 0;
    int rv;

    if (o->db == NULL)
        return ctl_fail(CTL_EXIT_USAGE, "score: --db is required");
    rv = ctl_load_model(o, "score", &cm);
    if (rv != 0)
        return rv;
    if (o->quantile >= 0 && (cm.ens == NULL || o->backend != NULL)) {
        rv = ctl_fail(CTL_EXIT_USAGE,
                      cm.ens == NULL
                          ? "score: --quantile needs an ensemble: --model an "
                            "ensemble file from train --ensemble, or a "
                            "compiled-in model that has one"
                          : "score: --quantile scores on the host: leave "
                            "--backend out");
        goto out_model;
    }
    rv = store_open(o->db, STORE_OPEN_READONLY, &st, &d);
    /* A store of an older schema is migrated first (a read-write open),
     * as shardd and train would; score itself writes nothing. */
    if (rv == SD_ESTATE)
        rv = store_open(o->db, 0, &st, &d);
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "score: %s", d.msg);
        goto out_model;
    }
    /* The model's own profile by default; --profile names another one on
     * purpose (does a model carry over to another machine?). */
    if (o->profile != NULL) {
        rv = ctl_pick_profile(st, "score", o->profile, &prof);
    } else {
        rv = store_profile_get(st, cm.net->profile, &prof, &d);
        if (rv == SD_ENOENT)
            rv = no_own_profile(st, cm.net->profile);
        else if (rv != 0)
            rv = ctl_fail(ctl_exit_for(rv), "score: %s", d.msg);
    }
    if (rv != 0)
        goto out_store;
    if (net_check_profile(cm.net, prof.name, &d) != 0)
        fprintf(stderr,
                "shardctl: score: the model is for profile \"%s\": scored "
                "on the samples of \"%s\" as asked\n",
                cm.net->profile, prof.name);
    rv = store_samples_load_newest(st, prof.id, STORE_KIND_COMPUTE,
                                   (size_t)o->newest, &smp, &n, &d);
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "score: %s", d.msg);
        goto out_store;
    }
    if (n == 0) {
        rv = ctl_fail(CTL_EXIT_USAGE,
                      "score: profile %s has no compute samples", prof.name);
        goto out_samples;
    }
    pred = malloc(n * sizeof(*pred));
    if (pred == NULL) {
        rv = ctl_fail(1, "score: out of memory");
        goto out_samples;
    }
    rv = predict(o, &cm, smp, n, pred);
    if (rv == 0)
        rv = score_report(o, prof.name, smp, pred, n);
    if (rv == 0 && o->out != NULL)
        rv = write_samples(o->out, o->quantile >= 0 ? NULL : cm.net, smp, pred,
                           n);
    free(pred);
out_samples:
    store_samples_free(smp, n);
out_store:
    store_close(st);
out_model:
    ctl_model_free(&cm);
    return rv;
}
