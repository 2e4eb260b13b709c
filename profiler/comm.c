/*
 * Communication samples (profiler.h): NeuroShard's plans of varying balance
 * (neuroshard.md 2.3, 4) timed with a backend's collectives.  Each sample
 * draws T tables of dims in {128, 64, ..., 4}, spreads them over the
 * devices by random_dim_greedy (each table, largest first, to a random
 * device with probability random_prob, else to the least loaded), and an
 * integer compute skew per device (sleep_diff in [1, max_sleep), sleeps in
 * [0, sleep_diff) less their minimum); then it times the forward all-to-all
 * of the pooled columns behind those sleeps and the backward one without,
 * and stores both per device.  Sample i of a seed is always the same plan.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "profiler.h"

static const int32_t comm_dims[] = {128, 64, 32, 16, 8, 4};
#define COMM_NDIMS ((int32_t)(sizeof(comm_dims) / sizeof(comm_dims[0])))

void prof_comm_params_default(struct prof_comm_params *p)
{
    memset(p, 0, sizeof(*p));
    p->ndevices = 1;
    p->batch_size = 65536;
    p->samples = 100;
    p->warmup = 5;
    p->repeats = 10;
    p->min_tables = 10;
    p->max_tables = 60;
    p->max_sleep_ms = 20;
}

static int cmp_int_desc(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

    return (x < y) - (x > y);
}

void prof_comm_draw(const struct prof_comm_params *p, uint64_t i,
                    int32_t *dim_sum, double *sleep_ms)
{
    int32_t dims[PROF_COMM_MAX_TABLES], t, nt, r, best, n = p->ndevices;
    int32_t lo = p->min_tables, hi = p->max_tables, diff, smin;
    int32_t sleeps[KERN_COMM_MAX];
    double random_prob;
    struct rng g;

    rng_seed(&g, rng_derive(p->seed, i));
    nt = lo + (int32_t)rng_below(&g, (uint64_t)(hi - lo));
    for (t = 0; t < nt; t++)
        dims[t] = comm_dims[rng_below(&g, COMM_NDIMS)];
    random_prob = rng_uniform(&g);
    qsort(dims, (size_t)nt, sizeof(dims[0]), cmp_int_desc);
    for (r = 0; r < n; r++)
        dim_sum[r] = 0;
    for (t = 0; t < nt; t++) {
        if (rng_uniform(&g) < random_prob) {
            best = (int32_t)rng_below(&g, (uint64_t)n);
        } else {
            for (best = 0, r = 1; r < n; r++) /* ties: the lowest index */
                if (dim_sum[r] < dim_sum[best])
                    best = r;
        }
        dim_sum[best] += dims[t];
    }
    diff = 1 + (int32_t)rng_below(&g, (uint64_t)(p->max_sleep_ms - 1));
    for (smin = diff, r = 0; r < n; r++) {
        sleeps[r] = (int32_t)rng_below(&g, (uint64_t)diff);
        if (sleeps[r] < smin)
            smin = sleeps[r];
    }
    for (r = 0; r < n; r++)
        sleep_ms[r] = (double)(sleeps[r] - smin);
}

/* The all-to-all counts of a plan: forward, rank r sends batch / n *
 * dim_sum[r] floats to every rank; backward, batch / n * dim_sum[j] to
 * rank j. */
static void a2a_counts(const struct prof_comm_params *p, const int32_t *dim_sum,
                       bool backward, uint64_t *counts)
{
    uint64_t per = (uint64_t)(p->batch_size / p->ndevices);
    int32_t r, j, n = p->ndevices;

    for (r = 0; r < n; r++)
        for (j = 0; j < n; j++)
            counts[r * n + j] = per * (uint64_t)dim_sum[backward ? j : r];
}

static int check_params(const struct prof_comm_params *p, struct sd_diag *d)
{
    if (p->be == NULL || p->ndevices < 1 || p->ndevices > KERN_COMM_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           "comm-profile: no backend, or %d devices not in "
                           "[1, %d]",
                           (int)p->ndevices, KERN_COMM_MAX);
    if (p->batch_size < p->ndevices)
        return sd_diag_set(d, SD_EINVAL,
                           "comm-profile: batch %lld is smaller than the "
                           "devices",
                           (long long)p->batch_size);
    if (p->min_tables < 1 || p->max_tables <= p->min_tables ||
        p->max_tables > PROF_COMM_MAX_TABLES)
        return sd_diag_set(
            d, SD_EINVAL, "comm-profile: tables [%d, %d) not within [1, %d)",
            (int)p->min_tables, (int)p->max_tables, PROF_COMM_MAX_TABLES);
    if (p->max_sleep_ms < 2 || p->max_sleep_ms > 1000)
        return sd_diag_set(d, SD_EINVAL,
                           "comm-profile: max_sleep_ms %d not in [2, 1000]",
                           (int)p->max_sleep_ms);
    if (p->warmup < 0 || p->repeats < 1)
        return sd_diag_set(d, SD_EINVAL, "comm-profile: warmup %d, repeats %d",
                           p->warmup, p->repeats);
    return 0;
}

/* The profile comm samples go to: the compute profile's name of device 0
 * (samples of any device count share it; each says how many it has). */
static int comm_profile(struct store *st, const struct prof_comm_params *p,
                        struct prof_comm_result *res, struct sd_diag *d)
{
    struct kern_device_info info;
    struct store_profile prof;
    int rv;

    rv = prof_profile_name(p->be, 0, p->batch_size, res->profile,
                           sizeof(res->profile), d);
    if (rv != 0 || st == NULL)
        return rv;
    rv = p->be->device_info(0, &info);
    if (rv != 0)
        return sd_diag_set(d, rv, "%s device 0: no such device", p->be->name);
    memset(&prof, 0, sizeof(prof));
    snprintf(prof.name, sizeof(prof.name), "%s", res->profile);
    snprintf(prof.backend, sizeof(prof.backend), "%s", p->be->name);
    snprintf(prof.device_model, sizeof(prof.device_model), "%s", info.model);
    prof.batch_size = p->batch_size;
    return store_profile_get_or_create(st, &prof, &res->profile_id, d);
}

/* Times one plan's forward and backward exchanges into smp->devices. */
static int measure_plan(struct kern_comm *c, const struct prof_comm_params *p,
                        const int32_t *dim_sum, const double *sleep_ms,
                        uint64_t *counts, struct kern_timing *tm,
                        struct store_sample *smp, struct sd_diag *d)
{
    struct kern_coll_desc cd;
    double fwd_max = 0, bwd_max = 0, spread = 0;
    int32_t r;
    int rv;

    memset(&cd, 0, sizeof(cd));
    cd.op = KERN_COLL_ALLTOALL;
    cd.a2a_counts = counts;
    cd.warmup = p->warmup;
    cd.repeats = p->repeats;
    cd.abort = p->stop;
    a2a_counts(p, dim_sum, false, counts);
    cd.sleep_ms = sleep_ms;
    rv = kern_comm_time(c, &cd, tm, d);
    for (r = 0; r < p->ndevices && rv == 0; r++) {
        smp->devices[r].dim_sum = dim_sum[r];
        smp->devices[r].sleep_ms = sleep_ms[r];
        smp->devices[r].fwd_ms = tm[r].median_ms;
        if (tm[r].p90_ms - tm[r].p10_ms > spread)
            spread = tm[r].p90_ms - tm[r].p10_ms;
    }
    if (rv != 0)
        return rv;
    a2a_counts(p, dim_sum, true, counts);
    cd.sleep_ms = NULL;
    rv = kern_comm_time(c, &cd, tm, d);
    for (r = 0; r < p->ndevices && rv == 0; r++) {
        smp->devices[r].bwd_ms = tm[r].median_ms;
        if (smp->devices[r].fwd_ms > fwd_max)
            fwd_max = smp->devices[r].fwd_ms;
        if (tm[r].median_ms > bwd_max)
            bwd_max = tm[r].median_ms;
        if (tm[r].p90_ms - tm[r].p10_ms > spread)
            spread = tm[r].p90_ms - tm[r].p10_ms;
    }
    smp->measured_ms = fwd_max + bwd_max;
    smp->spread_ms = spread;
    return rv;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* What one run needs besides its parameters. */
struct comm_scratch {
    int32_t dim_sum[KERN_COMM_MAX];
    double sleep_ms[KERN_COMM_MAX];
    struct store_comm_device devices[KERN_COMM_MAX];
    struct kern_timing tm[KERN_COMM_MAX];
    uint64_t counts[KERN_COMM_MAX * KERN_COMM_MAX];
};

int prof_comm_run(struct store *st, const struct prof_comm_params *p,
                  struct prof_comm_result *res, struct sd_diag *d)
{
    struct comm_scratch *w = NULL;
    struct kern_comm *c = NULL;
    struct store_sample smp;
    double start = now_s();
    uint64_t i;
    int rv;

    memset(res, 0, sizeof(*res));
    rv = check_params(p, d);
    if (rv == 0)
        rv = comm_profile(st, p, res, d);
    if (rv != 0)
        return rv;
    w = calloc(1, sizeof(*w));
    if (w == NULL)
        return sd_diag_set(d, SD_ENOMEM, "comm-profile: out of memory");
    rv = kern_comm_open(p->be, p->ndevices, &c, d);
    if (rv != 0)
        goto out_free;
    memset(&smp, 0, sizeof(smp));
    smp.profile_id = res->profile_id;
    smp.kind = STORE_KIND_COMM;
    smp.ndevices = (size_t)p->ndevices;
    smp.devices = w->devices;
    snprintf(smp.source, sizeof(smp.source), "random");
    snprintf(smp.device, sizeof(smp.device), "%s x%d", p->be->name,
             (int)p->ndevices);
    for (i = 0; i < p->samples; i++) {
        if ((p->stop != NULL && atomic_load(p->stop) != 0) ||
            (p->max_seconds > 0 && now_s() - start >= p->max_seconds)) {
            res->interrupted = true;
            break;
        }
        prof_comm_draw(p, p->first_index + i, w->dim_sum, w->sleep_ms);
        rv = measure_plan(c, p, w->dim_sum, w->sleep_ms, w->counts, w->tm, &smp,
                          d);
        if (rv == SD_ECANCELED) {
            res->interrupted = true;
            rv = 0;
            break;
        }
        if (rv != 0)
            break;
        res->measured++;
        /* The store keeps exchanges between devices: 2 or more. */
        if (st != NULL && p->ndevices >= 2) {
            rv = store_sample_add(st, &smp, NULL, d);
            if (rv != 0)
                break;
            res->stored++;
        }
        if (p->on_sample != NULL)
            p->on_sample(p->ctx, i, &smp);
    }
    kern_comm_close(c);
out_free:
    free(w);
    return rv;
}

int prof_coll_sweep(const struct kern_backend *be, int32_t ndevices,
                    enum kern_coll_op op, uint64_t bytes, double skew_ms,
                    int warmup, int repeats, struct kern_timing *per_rank,
                    struct sd_diag *d)
{
    struct kern_coll_desc cd;
    struct kern_comm *c = NULL;
    double sleep_ms[KERN_COMM_MAX];
    uint64_t *counts = NULL;
    int32_t r, j;
    int rv;

    if (ndevices < 1 || ndevices > KERN_COMM_MAX || bytes < sizeof(float))
        return sd_diag_set(d, SD_EINVAL, "collective: %d devices, %llu bytes",
                           (int)ndevices, (unsigned long long)bytes);
    memset(&cd, 0, sizeof(cd));
    cd.op = op;
    cd.warmup = warmup;
    cd.repeats = repeats;
    /* bytes is what each rank sends in all (nccl-tests' "size"). */
    cd.count = bytes / sizeof(float);
    if (op == KERN_COLL_REDUCE_SCATTER)
        cd.count = cd.count / (uint64_t)ndevices > 0
                       ? cd.count / (uint64_t)ndevices
                       : 1;
    if (op == KERN_COLL_ALLTOALL) {
        counts = calloc((size_t)ndevices * (size_t)ndevices, sizeof(*counts));
        if (counts == NULL)
            return sd_diag_set(d, SD_ENOMEM, "collective: out of memory");
        for (r = 0; r < ndevices; r++)
            for (j = 0; j < ndevices; j++)
                counts[r * ndevices + j] =
                    (cd.count + (uint64_t)ndevices - 1) / (uint64_t)ndevices;
        cd.a2a_counts = counts;
    }
    /* The wait-for-slowest: the last rank starts skew_ms late. */
    for (r = 0; r < ndevices; r++)
        sleep_ms[r] = r == ndevices - 1 ? skew_ms : 0;
    cd.sleep_ms = skew_ms > 0 ? sleep_ms : NULL;
    rv = kern_comm_open(be, ndevices, &c, d);
    if (rv == 0)
        rv = kern_comm_time(c, &cd, per_rank, d);
    kern_comm_close(c);
    free(counts);
    return rv;
}
