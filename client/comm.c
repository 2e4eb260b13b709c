/*
 * shardctl comm-profile (client.h): communication timed on this machine's
 * devices.  NeuroShard's comm samples (profiler.h's prof_comm_run: random
 * plans, the forward all-to-all behind each device's compute skew, the
 * backward one), printed one line each and stored as comm samples with
 * --db; with --collectives, a sweep of all-to-all, reduce-scatter,
 * all-gather and all-reduce over message sizes, first with every rank
 * starting together and then with the last one 5 ms late, the others'
 * wait showing in their times.  Ctrl-C stops after the current plan
 * (exit 130); what was stored stays.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "client.h"
#include "profiler.h"

#define COMM_SKEW_MS 5.0

static kern_flag comm_stop;

static void on_signal(int sig)
{
    (void)sig;
    atomic_store(&comm_stop, 1); /* lock-free: signal-safe */
}

static void print_sample(void *ctx, uint64_t i, const struct store_sample *s)
{
    size_t r;

    (void)ctx;
    printf("plan %llu: %.3f ms (fwd + bwd of the slowest)",
           (unsigned long long)i, s->measured_ms);
    for (r = 0; r < s->ndevices; r++)
        printf("%s dev %zu dim %d sleep %.0f fwd %.3f bwd %.3f", r ? ";" : ":",
               r, (int)s->devices[r].dim_sum, s->devices[r].sleep_ms,
               s->devices[r].fwd_ms, s->devices[r].bwd_ms);
    printf("\n");
    fflush(stdout);
}

/* The collectives sweep: one line per (op, size, skew). */
static int sweep(const struct kern_backend *be, int32_t n, int warmup,
                 int repeats)
{
    struct kern_timing tm[KERN_COMM_MAX];
    struct sd_diag d;
    uint64_t bytes;
    double skew, slowest;
    int op, rv;
    int32_t r;

    printf("%-15s %5s %12s %8s %12s %12s\n", "collective", "ranks", "bytes",
           "skew_ms", "rank0_ms", "slowest_ms");
    for (op = 0; op < KERN_COLL_COUNT; op++)
        for (bytes = 4096; bytes <= (UINT64_C(256) << 20); bytes <<= 4)
            for (skew = 0; skew <= COMM_SKEW_MS; skew += COMM_SKEW_MS) {
                if (atomic_load(&comm_stop))
                    return 130;
                rv = prof_coll_sweep(be, n, (enum kern_coll_op)op, bytes, skew,
                                     warmup, repeats, tm, &d);
                if (rv != 0)
                    return ctl_fail(ctl_exit_for(rv), "comm-profile: %s",
                                    d.msg);
                for (slowest = 0, r = 0; r < n; r++)
                    if (tm[r].median_ms > slowest)
                        slowest = tm[r].median_ms;
                printf("%-15s %5d %12llu %8.1f %12.4f %12.4f\n",
                       kern_coll_name((enum kern_coll_op)op), (int)n,
                       (unsigned long long)bytes, skew, tm[0].median_ms,
                       slowest);
                fflush(stdout);
            }
    return 0;
}

int comm_profile(const struct ctl_opts *o)
{
    struct prof_comm_params p;
    struct prof_comm_result res;
    struct store *st = NULL;
    struct sigaction sa;
    struct sd_diag d;
    int rv;

    prof_comm_params_default(&p);
    p.be = kern_backend_get(o->backend, &d);
    if (p.be == NULL)
        return ctl_fail(CTL_EXIT_USAGE, "comm-profile: --backend: %s", d.msg);
    p.ndevices =
        o->devices > 0 ? (int32_t)o->devices : (int32_t)p.be->device_count();
    if (p.ndevices > KERN_COMM_MAX)
        p.ndevices = KERN_COMM_MAX;
    if (o->samples)
        p.samples = (uint64_t)o->samples;
    if (o->batch)
        p.batch_size = o->batch;
    if (o->warmup >= 0)
        p.warmup = (int)o->warmup;
    if (o->repeats)
        p.repeats = (int)o->repeats;
    p.seed = (uint64_t)o->seed;
    p.max_seconds = o->seconds;
    p.stop = &comm_stop;
    p.on_sample = print_sample;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (o->collectives &&
        (rv = sweep(p.be, p.ndevices, p.warmup, p.repeats)) != 0)
        return rv;
    if (o->db != NULL && (rv = store_open(o->db, 0, &st, &d)) != 0)
        return ctl_fail(ctl_exit_for(rv), "comm-profile: %s", d.msg);
    if (st != NULL && p.ndevices < 2)
        fprintf(stderr, "comm-profile: one device: plans are timed, not "
                        "stored (the store keeps exchanges of 2 or more)\n");
    if (st != NULL) {
        /* Resumable: plan i of the seed follows the samples stored. */
        uint64_t have = 0;
        struct store_profile prof;
        char name[STORE_NAME_MAX];

        if (prof_profile_name(p.be, 0, p.batch_size, name, sizeof(name), &d) ==
                0 &&
            store_profile_get(st, name, &prof, NULL) == 0 &&
            store_sample_count(st, prof.id, STORE_KIND_COMM, 0, &have, NULL) ==
                0)
            p.first_index = have;
    }
    rv = prof_comm_run(st, &p, &res, &d);
    store_close(st);
    fprintf(stderr,
            "comm-profile %s: %d devices, %llu plans timed, %llu "
            "stored\n",
            res.profile, (int)p.ndevices, (unsigned long long)res.measured,
            (unsigned long long)res.stored);
    if (rv != 0)
        return ctl_fail(ctl_exit_for(rv), "comm-profile: %s", d.msg);
    return atomic_load(&comm_stop) ? 130 : 0;
}
