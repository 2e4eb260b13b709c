/*
 * shardctl's measuring commands (client.h), on this machine's devices and a
 * store:
 *   shardctl profile --db F --samples N   measured compute-cost samples
 *   shardctl train --db F [--profile P]    a cost model from them (its
 *                                          products on a device with
 *                                          --backend: cuBLAS on cuda)
 *   shardctl score --db F [--model F]      a model's error on them (scored
 *                                          in one batch by the model
 *                                          resident on a device with
 *                                          --backend)
 *   shardctl eval --tables F --plan F      a plan measured on the devices
 * Long runs stop cleanly on Ctrl-C or SIGTERM (exit 130).
 */
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "profiler.h"

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

/* Stops long measurements cleanly on Ctrl-C or SIGTERM: the current sample
 * finishes and every measured one is committed. */
static void catch_stop_signals(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* A progress bar on a terminal; a line per 10 % elsewhere (logs). */
static void show_progress(void *ctx, uint64_t done, uint64_t target,
                          uint64_t added, double elapsed_s)
{
    double rate = elapsed_s > 0 ? (double)added / elapsed_s : 0;
    double eta = rate > 0 ? (double)(target - done) / rate : 0;
    int width = 30, fill = target ? (int)(width * done / target) : width;
    static int last_decile = -1;

    if (isatty(STDERR_FILENO)) {
        fprintf(stderr, "\r[%.*s%*s] %llu/%llu samples  %.2f/s  eta %.0f s ",
                fill, "==============================", width - fill, "",
                (unsigned long long)done, (unsigned long long)target, rate,
                eta);
        if (done == target)
            fputc('\n', stderr);
    } else if ((int)(10 * done / (target ? target : 1)) != last_decile) {
        last_decile = (int)(10 * done / (target ? target : 1));
        fprintf(stderr, "profile: %llu/%llu samples, %.2f/s\n",
                (unsigned long long)done, (unsigned long long)target, rate);
    }
}

/* The timing options shared by profile and eval. */
static void timing_opts(const struct ctl_opts *o, struct kern_timing_opts *to)
{
    kern_timing_opts_default(to);
    if (o->warmup >= 0)
        to->warmup = (int)o->warmup;
    if (o->repeats)
        to->repeats = (int)o->repeats;
    if (o->no_flush)
        to->flush = false;
}

static const struct kern_backend *pick_backend(const char *name)
{
    struct sd_diag d;
    const struct kern_backend *be = kern_backend_get(name, &d);

    if (be == NULL)
        ctl_fail(CTL_EXIT_USAGE, "--backend: %s", d.msg);
    return be;
}

int measure_profile(const struct ctl_opts *o)
{
    struct prof_run_params pp;
    struct prof_run_result res;
    struct store *st;
    struct sd_diag d;
    int rv;

    if (o->db == NULL || o->samples == 0)
        return ctl_fail(CTL_EXIT_USAGE,
                        "profile: --db and --samples are required");
    prof_run_params_default(&pp);
    pp.be = pick_backend(o->backend);
    if (pp.be == NULL)
        return CTL_EXIT_USAGE;
    if (o->device >= pp.be->device_count())
        return ctl_fail(CTL_EXIT_USAGE,
                        "profile: --device %lld: the %s backend has "
                        "%d devices",
                        (long long)o->device, pp.be->name,
                        pp.be->device_count());
    pp.device = (int32_t)o->device;
    if (o->batch)
        pp.batch_size = o->batch;
    pp.seed = (uint64_t)o->seed;
    pp.target_samples = (uint64_t)o->samples;
    pp.max_seconds = o->seconds;
    if (o->max_gb > 0)
        pp.shape.max_bytes = (uint64_t)(o->max_gb * (double)(1ull << 30));
    timing_opts(o, &pp.timing);
    pp.stop = &stop_requested;
    pp.progress = show_progress;

    rv = store_open(o->db, 0, &st, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "profile: %s", d.msg);
    catch_stop_signals();
    rv = prof_run(st, &pp, &res, &d);
    store_close(st);
    fprintf(stderr, "profile %s: %llu samples added, %llu in the store\n",
            res.profile, (unsigned long long)res.added,
            (unsigned long long)(res.existing + res.added));
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv),
                        "profile: %s (committed samples are kept)", d.msg);
    if (res.interrupted) {
        fprintf(stderr, "profile: stopped early; every committed sample is "
                        "kept, and the same command resumes\n");
        return stop_requested ? 130 : 0;
    }
    return 0;
}

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
    return stop_requested != 0;
}

/* The profile to train: --profile, else the store's only one. */
static int pick_profile(struct store *st, const char *name,
                        struct store_profile *out)
{
    struct store_profile *all = NULL;
    struct sd_diag d;
    size_t n, i;
    int rv;

    if (name != NULL) {
        rv = store_profile_get(st, name, out, &d);
        return rv ? ctl_fail(ctl_exit_for(rv), "train: --profile: %s", d.msg)
                  : 0;
    }
    rv = store_profile_list(st, &all, &n, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "train: %s", d.msg);
    if (n == 1) {
        *out = all[0];
        free(all);
        return 0;
    }
    fprintf(stderr,
            "shardctl: train: the store has %zu profiles; name one "
            "with --profile:\n",
            n);
    for (i = 0; i < n; i++)
        fprintf(stderr, "  %s\n", all[i].name);
    free(all);
    return CTL_EXIT_USAGE;
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

/*
 * A trained set as a new model version of prof (--activate: the active
 * one), written to --out too, and its figures printed.  Returns 0 or an
 * exit code.
 */
static int store_trained(const struct ctl_opts *o, struct store *st,
                         const struct store_profile *prof,
                         const struct cost_net *m)
{
    struct store_model sm;
    struct sd_diag d;
    int64_t id = 0;
    void *img = NULL;
    size_t len;
    int rv;

    if (net_serialize(m, &img, &len) != 0)
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
    sm.info.weights_bytes = len;
    sm.weights = img;
    rv = store_model_put(st, &sm, &id, &d);
    if (rv == 0 && o->activate)
        rv = store_model_activate(st, id, NULL, &d);
    free(img);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "train: %s", d.msg);
    if (o->out != NULL && (rv = net_write_file(o->out, m, &d)) != 0)
        return ctl_fail(ctl_exit_for(rv), "train: --out: %s", d.msg);
    printf("model %lld for profile %s%s\n"
           "samples: %lld train, %lld validation, %lld test\n"
           "MAPE: %.2f%% train, %.2f%% validation, %.2f%% test\n"
           "epochs: %d (best %d), seed %llu\n",
           (long long)id, prof->name, o->activate ? " (active)" : "",
           (long long)m->metrics.train_samples,
           (long long)m->metrics.val_samples,
           (long long)m->metrics.test_samples, 100 * m->metrics.train_mape,
           100 * m->metrics.val_mape, 100 * m->metrics.test_mape,
           (int)m->metrics.epochs, (int)m->metrics.best_epoch,
           (unsigned long long)m->metrics.seed);
    return 0;
}

int measure_train(const struct ctl_opts *o)
{
    struct store *st = NULL;
    struct store_profile prof;
    struct store_sample *smp = NULL;
    struct train_sample *ts = NULL;
    struct train_params tp;
    struct cost_net *m = NULL;
    struct prof_gemm pg;
    bool on_device = false;
    struct sd_diag d;
    size_t n = 0, i;
    int rv;

    if (o->db == NULL)
        return ctl_fail(CTL_EXIT_USAGE, "train: --db is required");
    if (o->backend != NULL) {
        const struct kern_backend *be = pick_backend(o->backend);

        if (be == NULL)
            return CTL_EXIT_USAGE;
        rv = prof_gemm_open(be, 0, &pg, &d);
        if (rv != 0)
            return ctl_fail(ctl_exit_for(rv), "train: --backend %s: %s",
                            be->name, d.msg);
        on_device = true;
    }
    rv = store_open(o->db, 0, &st, &d);
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "train: %s", d.msg);
        goto out_gemm;
    }
    rv = pick_profile(st, o->profile, &prof);
    if (rv != 0)
        goto out_store;
    rv = store_samples_load_newest(st, prof.id, STORE_KIND_COMPUTE,
                                   (size_t)o->newest, &smp, &n, &d);
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "train: %s", d.msg);
        goto out_store;
    }
    ts = calloc(n ? n : 1, sizeof(*ts));
    if (!ts) {
        rv = ctl_fail(1, "train: out of memory");
        goto out_samples;
    }
    for (i = 0; i < n; i++)
        ts[i] = (struct train_sample){smp[i].tables, smp[i].ntables,
                                      smp[i].measured_ms};
    train_params_default(&tp);
    tp.seed = (uint64_t)o->seed;
    if (o->epochs)
        tp.max_epochs = (int32_t)o->epochs;
    if (o->weight_decay >= 0)
        tp.weight_decay = o->weight_decay;
    tp.progress = train_progress;
    tp.gemm = on_device ? &pg.hook : NULL;
    fprintf(stderr, "train: %zu samples of profile %s, products on %s\n", n,
            prof.name, on_device ? pg.name : "cblas");
    catch_stop_signals();
    rv = net_train(&tp, ts, n, prof.name, prof.batch_size, &m, &d);
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "train: %s%s%s", d.msg,
                      on_device ? ": " : "", on_device ? pg.diag.msg : "");
        goto out_samples;
    }
    if (stop_requested) {
        fprintf(stderr, "train: interrupted; nothing stored\n");
        rv = 130;
        goto out_model;
    }
    tp.progress = NULL;
    rv = train_comm_models(st, &prof, &tp, &m);
    if (rv != 0)
        goto out_model;
    rv = store_trained(o, st, &prof, m);
    if (rv != 0)
        goto out_model;
    rv = fflush(stdout) == 0 ? 0 : ctl_fail(1, "cannot write to stdout");

out_model:
    free(m);
out_samples:
    free(ts);
    store_samples_free(smp, n);
out_store:
    store_close(st);
out_gemm:
    if (on_device)
        prof_gemm_close(&pg);
    return rv;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/*
 * The model's ms for n samples into ms[]: net_tables_ms() one by one, or
 * with --backend in one batch by the model resident on that backend's
 * device 0.  Returns 0 or an exit code (the message printed).
 */
static int predict(const struct ctl_opts *o, const struct cost_net *net,
                   const struct store_sample *smp, size_t n, double *ms)
{
    const struct kern_backend *be;
    struct train_sample *ts;
    struct kern_net *kn = NULL;
    struct sd_diag d;
    size_t i;
    int rv;

    if (o->backend == NULL) {
        for (i = 0; i < n; i++)
            ms[i] = net_tables_ms(net, smp[i].tables, smp[i].ntables);
        return 0;
    }
    be = pick_backend(o->backend);
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

/* How well a model predicts the measured samples of a store: the held-out
 * check for samples measured after it was trained.  The signed median says
 * whether the error is a drift of the whole machine (most samples off the
 * same way) rather than scatter. */
int measure_score(const struct ctl_opts *o)
{
    struct store *st = NULL;
    struct store_profile prof;
    struct store_sample *smp = NULL;
    const struct cost_net *net;
    struct cost_net *owned = NULL;
    struct sd_diag d;
    double *ape = NULL, *err, sum = 0;
    size_t n = 0, i;
    int rv;

    if (o->db == NULL)
        return ctl_fail(CTL_EXIT_USAGE, "score: --db is required");
    rv = ctl_load_model(o, "score", &net, &owned);
    if (rv != 0)
        return rv;
    rv = store_open(o->db, STORE_OPEN_READONLY, &st, &d);
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "score: %s", d.msg);
        goto out_model;
    }
    rv = pick_profile(st, o->profile ? o->profile : net->profile, &prof);
    if (rv != 0)
        goto out_store;
    if (net_check_profile(net, prof.name, &d) != 0) {
        rv = ctl_fail(CTL_EXIT_USAGE, "score: %s", d.msg);
        goto out_store;
    }
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
    /* ape[0 .. n): absolute errors; err = ape + n: signed ones. */
    ape = malloc(2 * n * sizeof(*ape));
    if (!ape) {
        rv = ctl_fail(1, "score: out of memory");
        goto out_samples;
    }
    err = ape + n;
    rv = predict(o, net, smp, n, err);
    if (rv != 0)
        goto out_ape;
    for (i = 0; i < n; i++) {
        err[i] = (err[i] - smp[i].measured_ms) / smp[i].measured_ms;
        ape[i] = fabs(err[i]);
        sum += ape[i];
    }
    qsort(ape, n, sizeof(*ape), cmp_double);
    qsort(err, n, sizeof(*err), cmp_double);
    printf("model %s on %zu samples of %s%s%s\n"
           "MAPE %.2f%%, median %.2f%%, p90 %.2f%%\n"
           "signed median %+.2f%% (> 0: the model predicts more than was "
           "measured)\n",
           o->model ? o->model : "(embedded)", n, prof.name,
           o->backend ? ", scored on " : "", o->backend ? o->backend : "",
           100 * sum / (double)n, 100 * ape[n / 2],
           100 * ape[(size_t)(0.9 * (double)(n - 1))], 100 * err[n / 2]);
    rv = fflush(stdout) == 0 ? 0 : ctl_fail(1, "cannot write to stdout");
out_ape:
    free(ape);
out_samples:
    store_samples_free(smp, n);
out_store:
    store_close(st);
out_model:
    free(owned);
    return rv;
}

int measure_eval(const struct ctl_opts *o)
{
    enum optimizer opt = OPTIMIZER_SGD;
    const struct kern_backend *be;
    struct kern_timing_opts to;
    struct table *tables = NULL;
    struct topology topo;
    struct sd_diag d;
    struct plan p;
    uint64_t *caps = NULL;
    size_t n;
    char *text;
    int rv;

    if (o->tables == NULL || o->plan == NULL)
        return ctl_fail(CTL_EXIT_USAGE,
                        "eval: --tables and --plan are required");
    if (o->optimizer != NULL && optimizer_parse(o->optimizer, &opt) != 0)
        return ctl_fail(CTL_EXIT_USAGE, "eval: --optimizer \"%s\" is unknown",
                        o->optimizer);
    be = pick_backend(o->backend);
    if (be == NULL)
        return CTL_EXIT_USAGE;
    rv = json_read_tables(o->tables, (size_t)o->task, &tables, &n, &d);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "eval: %s", d.msg);
    rv = json_read_plan(o->plan, tables, n, &p, &d);
    if (rv != 0) {
        free(tables);
        return ctl_fail(ctl_exit_for(rv), "eval: %s", d.msg);
    }
    /* Without --mem-gb the plan is measured whatever memory it needs. */
    topology_default(&topo, p.ndevices, UINT64_MAX / 2);
    if (o->mem_gb > 0 && (rv = ctl_capacities(o, "eval", &topo, &caps)) != 0)
        goto out_plan;
    if (o->per_host)
        topo.devices_per_host = (int32_t)o->per_host;
    if (o->batch)
        topo.batch_size = o->batch;
    rv = topology_validate(&topo, &d);
    if (rv == 0)
        rv = plan_validate(&p, tables, n, &topo, opt, &d);
    if (rv == 0) {
        timing_opts(o, &to);
        rv = prof_eval_plan(be, &p, tables, n, &topo, opt, &to,
                            (uint64_t)o->seed, NULL, &d);
    }
    if (rv != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "eval: %s", d.msg);
        goto out_plan;
    }
    p.algorithm = "eval";
    if (o->json) {
        text = json_plan(&p, tables);
        rv = text ? ctl_write_output(o->out, text)
                  : ctl_fail(1, "eval: out of memory");
        free(text);
    } else {
        format_plan_text(stdout, &p, tables, n, &topo);
        rv = fflush(stdout) == 0 ? 0 : ctl_fail(1, "cannot write to stdout");
    }
out_plan:
    plan_destroy(&p);
    free(caps);
    free(tables);
    return rv;
}
