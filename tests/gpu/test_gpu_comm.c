/*
 * NCCL collectives and NVML readings on the GPUs this host has: every
 * collective on a 1-rank communicator (a local copy, but NCCL's whole path:
 * communicator, group calls, streams), and with 2 or more GPUs on all of
 * them, where a rank starting 100 ms late makes the others wait (the
 * wait-for-slowest); NeuroShard comm samples (prof_comm_run) on every GPU;
 * then NVML's readings of device 0 and the idle gate's verdict.  Prints
 * figures (not checks).  Exits 77 (skipped) where the cuda backend is not
 * built or no GPU answers.
 */
#include <string.h>

#include "harness.h"
#include "profiler.h"

static void print_sample(void *ctx, uint64_t i, const struct store_sample *s)
{
    size_t r;

    (void)ctx;
    printf("comm sample %llu on %zu devices: %.3f ms (", (unsigned long long)i,
           s->ndevices, s->measured_ms);
    for (r = 0; r < s->ndevices; r++)
        printf("%s[dim %d, sleep %.0f: fwd %.3f bwd %.3f]", r ? " " : "",
               (int)s->devices[r].dim_sum, s->devices[r].sleep_ms,
               s->devices[r].fwd_ms, s->devices[r].bwd_ms);
    printf(")\n");
}

static void test_collectives(const struct kern_backend *cuda, int32_t n)
{
    struct kern_timing tm[KERN_COMM_MAX];
    uint64_t bytes;
    struct sd_diag d;
    int op, rv;

    for (op = 0; op < KERN_COLL_COUNT; op++)
        for (bytes = 1 << 12; bytes <= (UINT64_C(1) << 28); bytes <<= 8) {
            rv = prof_coll_sweep(cuda, n, (enum kern_coll_op)op, bytes, 0, 2, 5,
                                 tm, &d);
            CHECK(rv == 0);
            if (rv != 0) {
                fprintf(stderr, "%s: %s\n",
                        kern_coll_name((enum kern_coll_op)op), d.msg);
                return;
            }
            printf("%s, %d ranks, %llu bytes: rank 0 median %.4f ms\n",
                   kern_coll_name((enum kern_coll_op)op), (int)n,
                   (unsigned long long)bytes, tm[0].median_ms);
        }
    if (n >= 2) {
        rv = prof_coll_sweep(cuda, n, KERN_COLL_ALLTOALL, 1 << 20, 100, 1, 3,
                             tm, &d);
        CHECK(rv == 0);
        printf("all-to-all, last rank 100 ms late: rank 0 %.2f ms, last "
               "%.2f ms\n",
               tm[0].median_ms, tm[n - 1].median_ms);
        CHECK(rv != 0 || tm[0].median_ms >= 50);
    }
}

static void test_comm_samples(const struct kern_backend *cuda, int32_t n)
{
    struct prof_comm_params p;
    struct prof_comm_result res;
    struct sd_diag d;
    int rv;

    prof_comm_params_default(&p);
    p.be = cuda;
    p.ndevices = n;
    p.samples = 3;
    p.on_sample = print_sample;
    rv = prof_comm_run(NULL, &p, &res, &d);
    CHECK(rv == 0 && res.measured == 3 && res.stored == 0);
    if (rv != 0)
        fprintf(stderr, "comm samples: %s\n", d.msg);
}

static void test_nvml(const struct kern_backend *cuda)
{
    struct kern_device_load l;
    struct sd_diag d;
    char why[256];
    int rv;

    rv = kern_device_load(cuda, 0, &l, &d);
    if (rv == SD_EUNSUPPORTED) {
        printf("nvml: not here (%s)\n", d.msg);
        return;
    }
    CHECK(rv == 0);
    if (rv != 0) {
        fprintf(stderr, "nvml: %s\n", d.msg);
        return;
    }
    printf("nvml device 0: %.0f%% busy, %llu of %llu MiB used, own %llu MiB "
           "(%s), %d other processes, own idle %lld ms\n",
           l.util_pct, (unsigned long long)(l.mem_used_bytes >> 20),
           (unsigned long long)(l.mem_total_bytes >> 20),
           (unsigned long long)(l.own_mem_bytes >> 20),
           l.own_seen ? "seen" : "not in the list", (int)l.other_procs,
           (long long)l.own_idle_ms);
    CHECK(l.mem_total_bytes > 0 && l.mem_used_bytes <= l.mem_total_bytes);
    /* This test used the device a moment ago. */
    CHECK(l.own_idle_ms < 60000);
    printf("idle gate: %s\n", kern_device_busy(cuda, 0, why, sizeof(why))
                                  ? why
                                  : "idle (the profiler may measure)");
}

int main(void)
{
    const struct kern_backend *cuda;
    struct sd_diag d;
    char detail[512];
    int32_t n;

    cuda = kern_backend_get("cuda", &d);
    if (cuda == NULL) {
        printf("skipped: %s\n", d.msg);
        return TEST_SKIP;
    }
    if (kern_lib_probe("nccl", detail, sizeof(detail)) != 0) {
        printf("nccl: %s: collectives skipped\n", detail);
    } else {
        printf("nccl: %s\n", detail);
        test_collectives(cuda, 1);
        n = (int32_t)cuda->device_count();
        if (n > KERN_COMM_MAX)
            n = KERN_COMM_MAX;
        if (n >= 2)
            test_collectives(cuda, n);
        test_comm_samples(cuda, n);
    }
    test_nvml(cuda);
    return tap_done();
}
