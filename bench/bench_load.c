/*
 * Load on the daemon: C clients, each on its own channel and thread, send
 * Plan requests back to back for a fixed time; per (request size, client
 * count) it prints throughput, p50, p99 and the slowest call, and the
 * daemon's memory before and after.
 *
 * Requests: of 10, 50 and 856 synthetic tables (features at batch 4096,
 * the embedded model's), 16 different draws per size sent in turn, on 2, 4
 * and 8 devices with room for 1.25x the tables, as whole-table plans
 * (whole_tables_only) and as plans the search may split (the default), each
 * at every client count.  The plan cache is off unless --cache, so every
 * call searches.  Client i starts at draw i mod 16, so the daemon sees a
 * mix; --in-phase starts every client at draw 0, so that the clients
 * send the same draw at about the same time (the cost of a draw varies
 * up to 4x, and the queue then swings between cheap and dear draws).
 * --quantile Q asks every plan for that quantile of the model's ensemble
 * (options.quantile: a robust plan, one search per member).
 *
 * usage: bench_load --shardd PATH [--seconds S] [--clients 1,4,16,64]
 *                   [--sizes 10,50,856] [--plans whole,split] [--cache]
 *                   [--in-phase] [--quantile Q]
 *        bench_load --addr ADDR --pid PID ...   (a daemon already running)
 *
 * With --shardd it starts the daemon on a private unix socket and data
 * directory (profiler off) and stops it at the end.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "grpc/health/v1/health.pb-c.h"
#include "shardd/sort.h"
#include "shardd/v1/planner.pb-c.h"

#define VARIANTS   16     /* different requests per size */
#define POOL       856    /* tables drawn from */
#define CALL_MS    120000 /* per call deadline */
#define LEVELS_MAX 16
#define GIB        ((uint64_t)1 << 30)

struct request {
    uint8_t *buf;
    size_t len;
};

struct client {
    pthread_t thread;
    const char *addr;
    const struct request *reqs;
    size_t first; /* the variant it starts with */
    double until_s;
    double *lat_ms; /* owned */
    size_t n, cap;
    size_t errors;
    double loop_end_s; /* its last call ended (closing is not timed) */
    int first_error;
    char first_msg[600];
};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "1,4,16" into v (at most LEVELS_MAX); the count, or 0 if malformed. */
static size_t parse_list(const char *s, long *v)
{
    size_t n = 0;
    char *end;

    while (*s != '\0' && n < LEVELS_MAX) {
        v[n] = strtol(s, &end, 10);
        if (end == s || v[n] < 1)
            return 0;
        n++;
        s = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
            return 0;
    }
    return n;
}

/* ---------------------------------------------------------------------- */
/* Requests                                                                */

/* Packs a PlanRequest of k tables of the pool drawn with `seed`. */
static int make_request(const struct table *pool, size_t k, uint64_t seed,
                        bool whole, double quantile, struct request *out)
{
    Shardd__V1__PlanRequest rq = SHARDD__V1__PLAN_REQUEST__INIT;
    Shardd__V1__Topology topo = SHARDD__V1__TOPOLOGY__INIT;
    Shardd__V1__PlanOptions opt = SHARDD__V1__PLAN_OPTIONS__INIT;
    Shardd__V1__EnsembleQuantile q = SHARDD__V1__ENSEMBLE_QUANTILE__INIT;
    Shardd__V1__Table *msgs = calloc(k, sizeof(*msgs));
    Shardd__V1__Table **ptrs = calloc(k, sizeof(*ptrs));
    size_t *pick = calloc(POOL, sizeof(*pick));
    uint64_t total = 0, largest = 0, mem;
    struct rng g;
    size_t i, j;
    int32_t ndev = k <= 10 ? 2 : k <= 50 ? 4 : 8;

    if (msgs == NULL || ptrs == NULL || pick == NULL) {
        free(msgs);
        free(ptrs);
        free(pick);
        return SD_ENOMEM;
    }
    /* A seeded partial shuffle of the pool's indices. */
    rng_seed(&g, seed);
    for (i = 0; i < POOL; i++)
        pick[i] = i;
    for (i = 0; i < k; i++) {
        size_t t = pick[i];

        j = i + (size_t)rng_below(&g, POOL - i);
        pick[i] = pick[j];
        pick[j] = t;
    }
    for (i = 0; i < k; i++) {
        const struct table *t = &pool[pick[i]];
        uint64_t b = table_bytes(t, t->dim);

        shardd__v1__table__init(&msgs[i]);
        msgs[i].name = (char *)t->name;
        msgs[i].rows = t->rows;
        msgs[i].dim = t->dim;
        msgs[i].pooling_factor = t->pooling_factor;
        msgs[i].n_bins = TABLE_NBINS;
        msgs[i].bins = (double *)t->bins;
        ptrs[i] = &msgs[i];
        total += b;
        if (b > largest)
            largest = b;
    }
    mem = (uint64_t)(1.25 * (double)total / ndev);
    if (mem < largest + largest / 10)
        mem = largest + largest / 10;
    mem = (mem + GIB - 1) / GIB * GIB;
    topo.num_devices = ndev;
    topo.mem_bytes_per_device = mem;
    topo.batch_size = 4096;
    rq.n_tables = k;
    rq.tables = ptrs;
    rq.topology = &topo;
    opt.whole_tables_only = whole;
    if (quantile >= 0) { /* a robust plan: a search per member */
        q.value = quantile;
        opt.quantile = &q;
    }
    rq.options = &opt;
    out->len = shardd__v1__plan_request__get_packed_size(&rq);
    out->buf = malloc(out->len);
    if (out->buf != NULL)
        shardd__v1__plan_request__pack(&rq, out->buf);
    free(msgs);
    free(ptrs);
    free(pick);
    return out->buf != NULL ? 0 : SD_ENOMEM;
}

/* ---------------------------------------------------------------------- */
/* Clients                                                                 */

static void *client_main(void *arg)
{
    struct client *c = arg;
    struct rpc_client *rc;
    struct sd_diag d;
    size_t i = c->first;
    int status;

    if (rpc_client_open(c->addr, NULL, &rc, &d) != 0) {
        c->errors++;
        snprintf(c->first_msg, sizeof(c->first_msg), "%s", d.msg);
        return NULL;
    }
    while (now_s() < c->until_s) {
        uint8_t *resp = NULL;
        size_t len;
        double t0 = now_s();
        int rv = rpc_client_call(
            rc, "/shardd.v1.Planner/Plan", c->reqs[i % VARIANTS].buf,
            c->reqs[i % VARIANTS].len, CALL_MS, &resp, &len, &status, &d);

        i++;
        if (rv != 0) {
            if (c->errors++ == 0) {
                c->first_error = status;
                snprintf(c->first_msg, sizeof(c->first_msg), "%s", d.msg);
            }
            continue;
        }
        free(resp);
        if (c->n == c->cap) {
            size_t cap = c->cap ? 2 * c->cap : 256;
            double *grown = realloc(c->lat_ms, cap * sizeof(*grown));

            if (grown == NULL)
                break;
            c->lat_ms = grown;
            c->cap = cap;
        }
        c->lat_ms[c->n++] = (now_s() - t0) * 1e3;
    }
    c->loop_end_s = now_s();
    /* Closing the last channel shuts gRPC down, which may wait for its
     * timers: not part of the level. */
    rpc_client_close(rc);
    return NULL;
}

/* One level: n clients for `seconds`; prints a row. */
static int run_level(const char *addr, const char *kind,
                     const struct request *reqs, size_t k, long n,
                     double seconds, bool in_phase)
{
    struct client *cs = calloc((size_t)n, sizeof(*cs));
    double *all = NULL, t0, elapsed;
    size_t total = 0, errors = 0, at = 0;
    long i;
    int rv = 0;

    if (cs == NULL)
        return SD_ENOMEM;
    t0 = now_s();
    for (i = 0; i < n; i++) {
        cs[i].addr = addr;
        cs[i].reqs = reqs;
        cs[i].first = in_phase ? 0 : (size_t)i % VARIANTS;
        cs[i].until_s = t0 + seconds;
        if (pthread_create(&cs[i].thread, NULL, client_main, &cs[i]) != 0) {
            n = i;
            rv = SD_ENOMEM;
            break;
        }
    }
    elapsed = 0;
    for (i = 0; i < n; i++) {
        pthread_join(cs[i].thread, NULL);
        total += cs[i].n;
        errors += cs[i].errors;
        if (cs[i].loop_end_s - t0 > elapsed)
            elapsed = cs[i].loop_end_s - t0;
    }
    all = malloc((total ? total : 1) * sizeof(*all));
    if (all == NULL)
        rv = SD_ENOMEM;
    for (i = 0; i < n && all != NULL; i++) {
        memcpy(all + at, cs[i].lat_ms, cs[i].n * sizeof(*all));
        at += cs[i].n;
    }
    if (rv == 0) {
        qsort(all, total, sizeof(*all), sd_cmp_double);
        printf("%6s %7zu %8ld %9zu %7zu %10.1f", kind, k, n, total, errors,
               (double)total / elapsed);
        if (total > 0)
            printf(" %9.1f %9.1f %9.1f\n", all[(total - 1) / 2],
                   all[(size_t)ceil(0.99 * (double)total) - 1], all[total - 1]);
        else
            printf(" %9s %9s %9s\n", "-", "-", "-");
        for (i = 0; i < n; i++)
            if (cs[i].errors > 0) {
                printf("        first error: %s (%s)\n", cs[i].first_msg,
                       rpc_code_name(cs[i].first_error));
                break;
            }
        fflush(stdout);
    }
    for (i = 0; i < n; i++)
        free(cs[i].lat_ms);
    free(all);
    free(cs);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* The daemon                                                              */

/* VmRSS and VmHWM of pid in MiB (-1 when unknown). */
static void daemon_memory(pid_t pid, double *rss, double *hwm)
{
    char path[64], line[256];
    FILE *f;

    *rss = *hwm = -1;
    snprintf(path, sizeof(path), "/proc/%ld/status", (long)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "VmRSS:", 6) == 0)
            *rss = strtod(line + 6, NULL) / 1024;
        else if (strncmp(line, "VmHWM:", 6) == 0)
            *hwm = strtod(line + 6, NULL) / 1024;
    }
    fclose(f);
}

/* Removes the private data directory and what shardd leaves in it. */
static void remove_data_dir(const char *dir)
{
    static const char *const files[] = {"shardd.db", "shardd.db-wal",
                                        "shardd.db-shm", "shardd.pid",
                                        "shardd.sock"};
    char path[128];
    size_t i;

    for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

static pid_t start_daemon(const char *bin, const char *dir, const char *addr,
                          bool cache)
{
    pid_t pid = fork();

    if (pid == 0) {
        execl(bin, bin, "--listen", addr, "--data-dir", dir, "--profiler",
              "off", "--plan-cache-entries", cache ? "256" : "0", (char *)NULL);
        fprintf(stderr, "bench_load: exec %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    return pid;
}

/* Waits until Health/Check answers SERVING (up to 20 s). */
static int wait_ready(const char *addr)
{
    Grpc__Health__V1__HealthCheckRequest rq =
        GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    uint8_t buf[16], *resp;
    size_t len = grpc__health__v1__health_check_request__pack(&rq, buf), n;
    struct rpc_client *c;
    struct sd_diag d;
    int i, status, rv = SD_EIO;

    if (rpc_client_open(addr, NULL, &c, &d) != 0)
        return SD_EIO;
    for (i = 0; i < 200 && rv != 0; i++) {
        rv = rpc_client_call(c, "/grpc.health.v1.Health/Check", buf, len, 1000,
                             &resp, &n, &status, &d);
        if (rv == 0)
            free(resp);
        else
            nanosleep(&(struct timespec){0, 100000000L}, NULL);
    }
    rpc_client_close(c);
    return rv;
}

int main(int argc, char **argv)
{
    const char *bin = NULL, *addr = NULL;
    long clients[LEVELS_MAX] = {1, 4, 16, 64},
         sizes[LEVELS_MAX] = {10, 50, 856};
    size_t nclients = 4, nsizes = 3, s, l, v;
    double seconds = 5, quantile = -1, rss0, hwm0, rss1, hwm1;
    char dir[64] = "", sock[128];
    struct synth_params sp;
    struct table *pool = NULL;
    static struct request reqs[2][LEVELS_MAX][VARIANTS]; /* zeroed */
    static const char *const kinds[2] = {"whole", "split"};
    bool cache = false, in_phase = false, want[2] = {true, true};
    int k;
    pid_t pid = 0;
    int i, rv = 0, status;

    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(a, "--cache") == 0) {
            cache = true;
            continue;
        }
        if (strcmp(a, "--in-phase") == 0) {
            in_phase = true;
            continue;
        }
        if (val == NULL)
            goto usage;
        i++;
        if (strcmp(a, "--shardd") == 0)
            bin = val;
        else if (strcmp(a, "--addr") == 0)
            addr = val;
        else if (strcmp(a, "--pid") == 0)
            pid = (pid_t)atol(val);
        else if (strcmp(a, "--seconds") == 0 && (seconds = atof(val)) > 0)
            ;
        else if (strcmp(a, "--quantile") == 0 && (quantile = atof(val)) >= 0 &&
                 quantile <= 1)
            ;
        else if (strcmp(a, "--clients") == 0 &&
                 (nclients = parse_list(val, clients)) > 0)
            ;
        else if (strcmp(a, "--sizes") == 0 &&
                 (nsizes = parse_list(val, sizes)) > 0)
            ;
        else if (strcmp(a, "--plans") == 0 && strstr(val, "whole") != NULL)
            want[1] = strstr(val, "split") != NULL;
        else if (strcmp(a, "--plans") == 0 && strcmp(val, "split") == 0)
            want[0] = false;
        else
            goto usage;
    }
    if ((bin == NULL) == (addr == NULL))
        goto usage;
    for (s = 0; s < nsizes; s++)
        if (sizes[s] > POOL)
            goto usage;

    /* Fork before any gRPC call: gRPC starts threads. */
    if (bin != NULL) {
        snprintf(dir, sizeof(dir), "/tmp/bench-load-XXXXXX");
        if (mkdtemp(dir) == NULL) {
            perror("bench_load: mkdtemp");
            return 1;
        }
        snprintf(sock, sizeof(sock), "unix:%s/shardd.sock", dir);
        addr = sock;
        pid = start_daemon(bin, dir, addr, cache);
        if (pid < 0) {
            perror("bench_load: fork");
            return 1;
        }
    }
    synth_params_default(&sp);
    sp.count = POOL;
    sp.batch_size = 4096;
    rv = synth_tables(&sp, 2, &pool);
    for (k = 0; k < 2; k++)
        for (s = 0; s < nsizes && rv == 0; s++)
            for (v = 0; v < VARIANTS && rv == 0; v++)
                rv = make_request(pool, (size_t)sizes[s], 1000 * s + v, k == 0,
                                  quantile, &reqs[k][s][v]);
    if (rv == 0 && wait_ready(addr) != 0) {
        fprintf(stderr, "bench_load: shardd at %s does not answer\n", addr);
        rv = SD_EIO;
    }
    if (rv != 0)
        goto out_daemon;

    daemon_memory(pid, &rss0, &hwm0);
    printf("bench_load: Plan (neuroshard, embedded model%s), %.0f s per "
           "level, plan cache %s, clients %s, %ld CPUs\n",
           quantile >= 0 ? ", robust: options.quantile" : "", seconds,
           cache ? "on" : "off",
           in_phase ? "in phase" : "start at draw i mod 16",
           sysconf(_SC_NPROCESSORS_ONLN));
    printf("%6s %7s %8s %9s %7s %10s %9s %9s %9s\n", "plans", "tables",
           "clients", "calls", "errors", "plans/s", "p50 ms", "p99 ms",
           "max ms");
    for (k = 0; k < 2; k++)
        for (s = 0; s < nsizes && rv == 0 && want[k]; s++)
            for (l = 0; l < nclients && rv == 0; l++)
                rv = run_level(addr, kinds[k], reqs[k][s], (size_t)sizes[s],
                               clients[l], seconds, in_phase);
    daemon_memory(pid, &rss1, &hwm1);
    printf("daemon memory: RSS %.0f MiB before, %.0f MiB after (peak %.0f "
           "MiB)\n",
           rss0, rss1, hwm1);

out_daemon:
    for (k = 0; k < 2; k++)
        for (s = 0; s < nsizes; s++)
            for (v = 0; v < VARIANTS; v++)
                free(reqs[k][s][v].buf);
    free(pool);
    if (bin != NULL && pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fprintf(stderr, "bench_load: shardd did not stop cleanly\n");
        remove_data_dir(dir);
    }
    return rv == 0 ? 0 : 1;

usage:
    fprintf(stderr, "usage: bench_load --shardd PATH | --addr ADDR [--pid P]\n"
                    "       [--seconds S] [--clients 1,4,16,64] "
                    "[--sizes 10,50,856] [--plans whole,split] [--cache]\n"
                    "       [--in-phase] [--quantile Q]\n");
    return 2;
}
