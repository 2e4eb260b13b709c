/*
 * Collective timing on the cpu backend (threads exchanging through shared
 * memory, the specification of NCCL's): every collective runs on 1 and 3
 * ranks; a rank that starts late makes the others wait (the
 * wait-for-slowest of neuroshard.md 2.3: a lower bound, which load can only
 * raise); bad descriptions and the abort flag; and comm samples of
 * NeuroShard's random plans stored in a real SQLite file, read back as
 * drawn, with one device timed but not stored.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "profiler.h"

static void test_collectives(void)
{
    struct kern_timing tm[3];
    struct sd_diag d;
    int32_t n, op;

    for (n = 1; n <= 3; n += 2)
        for (op = 0; op < KERN_COLL_COUNT; op++) {
            int rv =
                prof_coll_sweep(&kern_backend_cpu, n, (enum kern_coll_op)op,
                                1 << 16, 0, 1, 3, tm, &d);

            CHECK(rv == 0);
            if (rv != 0)
                fprintf(stderr, "%s on %d: %s\n",
                        kern_coll_name((enum kern_coll_op)op), (int)n, d.msg);
            CHECK(tm[n - 1].repeats == 3 && tm[n - 1].median_ms >= 0);
        }
    CHECK(strcmp(kern_coll_name(KERN_COLL_REDUCE_SCATTER), "reduce-scatter") ==
          0);
    CHECK(strcmp(kern_coll_name(KERN_COLL_COUNT), "?") == 0);
}

static void test_wait_for_slowest(void)
{
    struct kern_timing tm[3];
    struct sd_diag d;
    int rv;

    /* Rank 2 starts 100 ms late: ranks 0 and 1 wait for it inside the
     * exchange, so their times include most of the 100 ms. */
    rv = prof_coll_sweep(&kern_backend_cpu, 3, KERN_COLL_ALLTOALL, 1 << 12, 100,
                         0, 3, tm, &d);
    CHECK(rv == 0);
    printf("skewed all-to-all: ranks %.2f %.2f %.2f ms\n", tm[0].median_ms,
           tm[1].median_ms, tm[2].median_ms);
    CHECK(tm[0].median_ms >= 50 && tm[1].median_ms >= 50);
}

static void test_bad_descriptions(void)
{
    struct kern_comm *c = NULL;
    struct kern_coll_desc cd;
    struct kern_timing tm[2];
    kern_flag stop = 1;
    double sleeps[2] = {0, -1};
    uint64_t counts[4] = {1, 1, 1, 1};
    struct sd_diag d;

    CHECK(kern_comm_open(&kern_backend_cpu, 0, &c, &d) == SD_EINVAL);
    CHECK(kern_comm_open(&kern_backend_cpu, KERN_COMM_MAX + 1, &c, &d) ==
          SD_EINVAL);
    CHECK(kern_comm_open(&kern_backend_cpu, 2, &c, &d) == 0);
    if (c == NULL)
        return;
    CHECK(kern_comm_size(c) == 2);
    memset(&cd, 0, sizeof(cd));
    cd.op = KERN_COLL_ALLTOALL;
    cd.repeats = 1;
    CHECK(kern_comm_time(c, &cd, tm, &d) == SD_EINVAL); /* no counts */
    cd.a2a_counts = counts;
    cd.repeats = 0;
    CHECK(kern_comm_time(c, &cd, tm, &d) == SD_EINVAL);
    cd.repeats = 2;
    cd.sleep_ms = sleeps;
    CHECK(kern_comm_time(c, &cd, tm, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "sleep_ms[1]") != NULL);
    sleeps[1] = 0;
    cd.op = KERN_COLL_ALL_REDUCE; /* count 0 */
    CHECK(kern_comm_time(c, &cd, tm, &d) == SD_EINVAL);
    cd.op = KERN_COLL_ALLTOALL;
    cd.abort = &stop;
    CHECK(kern_comm_time(c, &cd, tm, &d) == SD_ECANCELED);
    stop = 0;
    CHECK(kern_comm_time(c, &cd, tm, &d) == 0); /* still usable */
    kern_comm_close(c);
    kern_comm_close(NULL);
}

static void count_sample(void *ctx, uint64_t i, const struct store_sample *s)
{
    (*(uint64_t *)ctx)++;
    (void)i;
    (void)s;
}

static void test_draw(void)
{
    struct prof_comm_params p;
    int32_t a[4], b[4], r, total;
    double sa[4], sb[4], smin = 1e9;

    prof_comm_params_default(&p);
    p.ndevices = 4;
    p.seed = 11;
    prof_comm_draw(&p, 5, a, sa);
    prof_comm_draw(&p, 5, b, sb);
    CHECK(memcmp(a, b, sizeof(a)) == 0 && memcmp(sa, sb, sizeof(sa)) == 0);
    for (total = 0, r = 0; r < 4; r++) {
        total += a[r];
        CHECK(a[r] % 4 == 0);
        CHECK(sa[r] >= 0 && sa[r] < p.max_sleep_ms);
        if (sa[r] < smin)
            smin = sa[r];
    }
    CHECK(smin == 0);
    CHECK(total >= 4 * p.min_tables && total <= 128 * p.max_tables);
}

static void test_comm_samples(void)
{
    char path[] = "/tmp/test_comm_XXXXXX";
    struct prof_comm_params p;
    struct prof_comm_result res;
    struct store_sample *smp = NULL;
    struct store *st = NULL;
    int32_t dims[3];
    double sleeps[3];
    uint64_t seen = 0;
    struct sd_diag d;
    size_t n = 0, i, r;
    int fd;

    fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    unlink(path); /* the store creates it */
    CHECK(store_open(path, 0, &st, &d) == 0);
    if (st == NULL)
        return;
    prof_comm_params_default(&p);
    p.be = &kern_backend_cpu;
    p.ndevices = 3;
    p.batch_size = 3000;
    p.samples = 3;
    p.warmup = 1;
    p.repeats = 2;
    p.seed = 5;
    p.on_sample = count_sample;
    p.ctx = &seen;
    CHECK(prof_comm_run(st, &p, &res, &d) == 0);
    CHECK(res.measured == 3 && res.stored == 3 && seen == 3);
    CHECK(strncmp(res.profile, "cpu/", 4) == 0);
    CHECK(store_samples_load(st, res.profile_id, STORE_KIND_COMM, 0, 0, &smp,
                             &n, &d) == 0);
    CHECK(n == 3);
    for (i = 0; i < n; i++) {
        prof_comm_draw(&p, i, dims, sleeps);
        CHECK(smp[i].ndevices == 3 && smp[i].ntables == 0);
        for (r = 0; r < smp[i].ndevices && smp[i].ndevices == 3; r++) {
            CHECK(smp[i].devices[r].dim_sum == dims[r]);
            CHECK(smp[i].devices[r].sleep_ms == sleeps[r]);
            CHECK(smp[i].devices[r].fwd_ms >= 0 &&
                  smp[i].devices[r].bwd_ms >= 0);
            CHECK(smp[i].measured_ms >= smp[i].devices[r].bwd_ms);
        }
    }
    store_samples_free(smp, n);

    /* One device: the exchange runs, nothing is stored. */
    p.ndevices = 1;
    seen = 0;
    CHECK(prof_comm_run(st, &p, &res, &d) == 0);
    CHECK(res.measured == 3 && res.stored == 0 && seen == 3);
    p.ndevices = 0;
    CHECK(prof_comm_run(st, &p, &res, &d) == SD_EINVAL);
    store_close(st);
    unlink(path);
}

int main(void)
{
    test_collectives();
    test_wait_for_slowest();
    test_bad_descriptions();
    test_draw();
    test_comm_samples();
    return tap_done();
}
