/*
 * End to end: starts the built shardd (argv[1]) on a unix socket in a fresh
 * temporary folder, talks to it with the gRPC C-core client, and stops it
 * with SIGTERM.  Checks a neuroshard plan (every column of every table
 * placed once, costs, explanation, search figures, determinism), the
 * errors clients rely on (INVALID_ARGUMENT naming the table and field,
 * RESOURCE_EXHAUSTED when nothing fits, UNIMPLEMENTED for unknown methods),
 * Estimate of the plan it got, a second daemon refused by the pidfile, and
 * a graceful stop: a search running at SIGTERM is answered with a whole
 * plan (its best so far if the grace period ends first), then exit status 0
 * and the pidfile gone.
 *
 * Waits are bounded polls (the socket to appear, the child to exit); calls
 * wait for the channel to be ready within their deadline.
 */
#define _GNU_SOURCE /* memmem */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <protobuf-c/protobuf-c.h>

#include "harness.h"
#include "shardd/v1/planner.pb-c.h"
#include "shardd/v1/types.pb-c.h"

#define NTABLES    8
#define NDEVICES   4
#define NBIG       20000 /* most tables of the request in flight at SIGTERM */
#define GRACE_S    "1"   /* shardd --grace-s */
#define GIB        ((uint64_t)1 << 30)
#define CALL_MS    20000  /* per call; the daemon answers in milliseconds */
#define BIG_MS     120000 /* the big call's deadline: past its budget */
#define POLL_MS    20
#define START_POLL 500 /* x POLL_MS: 10 s for the socket to appear */
#define EXIT_POLL  750 /* x POLL_MS: 15 s to exit after SIGTERM */

static char dir[64], sock_path[128], listen_addr[160], pid_path[128];
static char http_addr[64], log_path[128];

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Starts shardd on our socket and data directory (whose pidfile is
 * shardd.pid), its metrics on http_addr, its log (stdout and stderr) into
 * log_path; returns its pid or -1. */
static pid_t start_daemon(const char *bin)
{
    pid_t pid = fork();

    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);

        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        /* One search thread: the big search below is as long as it gets
         * on a machine with many cores too (plans do not depend on it). */
        execl(bin, bin, "--listen", listen_addr, "--data-dir", dir, "--threads",
              "2", "--search-threads", "1", "--grace-s", GRACE_S, "--profiler",
              "off", "--http-listen", http_addr, (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    return pid;
}

/* A TCP port free on 127.0.0.1 now (0 when none). */
static int free_port(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/*
 * The value of the daemon's metric line that starts with `name` (GET
 * /metrics on http_addr), or -1 when it cannot be read.
 */
static long metric(int port, const char *name)
{
    static const char get[] = "GET /metrics HTTP/1.0\r\n\r\n";
    static char buf[1 << 17];
    struct sockaddr_in a;
    size_t got = 0;
    ssize_t n;
    long v = -1;
    char *at;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        write(fd, get, sizeof(get) - 1) == (ssize_t)(sizeof(get) - 1)) {
        while (got < sizeof(buf) - 1 &&
               (n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
            got += (size_t)n;
        buf[got] = '\0';
        at = strstr(buf, name);
        if (at != NULL)
            v = strtol(at + strlen(name), NULL, 10);
    }
    close(fd);
    return v;
}

/* Whether the daemon's log holds `text`. */
static bool log_has(const char *text)
{
    static char buf[1 << 16];
    size_t n = 0;
    FILE *f = fopen(log_path, "r");

    if (f != NULL) {
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
    }
    buf[n] = '\0';
    return strstr(buf, text) != NULL;
}

/* Waits up to polls x POLL_MS for pid to exit; its wait status or -1. */
static int wait_exit(pid_t pid, int polls)
{
    int status, i;

    for (i = 0; i < polls; i++) {
        pid_t r = waitpid(pid, &status, WNOHANG);

        if (r == pid)
            return status;
        if (r < 0)
            return -1;
        sleep_ms(POLL_MS);
    }
    return -1;
}

/* ---------------------------------------------------------------------- */
/* A unary call through the C core                                         */

struct client {
    grpc_channel *ch;
    grpc_completion_queue *cq;
};

struct reply {
    grpc_status_code status;
    char details[1024];
    ProtobufCMessage *msg; /* on OK; protobuf_c_message_free_unpacked() */
};

static grpc_byte_buffer *pack(const ProtobufCMessage *m)
{
    grpc_slice s = grpc_slice_malloc(protobuf_c_message_get_packed_size(m));
    grpc_byte_buffer *bb;

    protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(s));
    bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

static ProtobufCMessage *unpack(grpc_byte_buffer *bb,
                                const ProtobufCMessageDescriptor *desc)
{
    grpc_byte_buffer_reader rd;
    ProtobufCMessage *m;
    grpc_slice s;

    if (!grpc_byte_buffer_reader_init(&rd, bb))
        return NULL;
    s = grpc_byte_buffer_reader_readall(&rd);
    grpc_byte_buffer_reader_destroy(&rd);
    m = protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(s),
                                  GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    return m;
}

/* The state of one call in flight. */
struct pending {
    grpc_call *call;
    grpc_byte_buffer *out, *in;
    grpc_metadata_array md, trailers;
    grpc_status_code status;
    grpc_slice details;
};

/*
 * Starts a unary call.  wait_ready: wait (within the deadline) for the
 * channel to connect instead of failing at once while the daemon starts.
 */
static int start_call(struct client *c, const char *method,
                      const ProtobufCMessage *req, bool wait_ready,
                      long deadline_ms, struct pending *p)
{
    gpr_timespec deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                     gpr_time_from_millis(deadline_ms, GPR_TIMESPAN));
    grpc_op ops[6];

    memset(p, 0, sizeof(*p));
    memset(ops, 0, sizeof(ops));
    grpc_metadata_array_init(&p->md);
    grpc_metadata_array_init(&p->trailers);
    p->out = pack(req);
    p->call = grpc_channel_create_call(
        c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq,
        grpc_slice_from_static_string(method), NULL, deadline, NULL);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (wait_ready)
        ops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY |
                       GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = p->out;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &p->md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &p->in;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &p->trailers;
    ops[5].data.recv_status_on_client.status = &p->status;
    ops[5].data.recv_status_on_client.status_details = &p->details;
    return grpc_call_start_batch(p->call, ops, 6, p, NULL) == GRPC_CALL_OK ? 0
                                                                           : -1;
}

/*
 * Waits up to ms (< 0: without limit) for the call to complete, driving the
 * client's I/O meanwhile (the C core moves it only inside pluck/next).
 * True when it completed.
 */
static bool poll_call(struct client *c, struct pending *p, long ms)
{
    gpr_timespec until =
        ms < 0 ? gpr_inf_future(GPR_CLOCK_REALTIME)
               : gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                              gpr_time_from_millis(ms, GPR_TIMESPAN));
    grpc_event ev = grpc_completion_queue_pluck(c->cq, p, until, NULL);

    if (ev.type != GRPC_OP_COMPLETE)
        return false;
    if (!ev.success)
        p->status = GRPC_STATUS_UNKNOWN;
    return true;
}

/* The result of a completed call; frees what the call held. */
static void finish_call(struct pending *p,
                        const ProtobufCMessageDescriptor *desc, struct reply *r)
{
    size_t n;

    memset(r, 0, sizeof(*r));
    r->status = p->status;
    n = GRPC_SLICE_LENGTH(p->details);
    if (n >= sizeof(r->details))
        n = sizeof(r->details) - 1;
    memcpy(r->details, GRPC_SLICE_START_PTR(p->details), n);
    if (r->status == GRPC_STATUS_OK && p->in != NULL)
        r->msg = unpack(p->in, desc);
    grpc_slice_unref(p->details);
    grpc_metadata_array_destroy(&p->md);
    grpc_metadata_array_destroy(&p->trailers);
    grpc_byte_buffer_destroy(p->out);
    if (p->in != NULL)
        grpc_byte_buffer_destroy(p->in);
    grpc_call_unref(p->call);
}

static void call(struct client *c, const char *method,
                 const ProtobufCMessage *req,
                 const ProtobufCMessageDescriptor *desc, struct reply *r)
{
    struct pending p;

    if (start_call(c, method, req, true, CALL_MS, &p) != 0) {
        memset(r, 0, sizeof(*r));
        r->status = GRPC_STATUS_UNKNOWN;
        snprintf(r->details, sizeof(r->details), "start_batch failed");
        return;
    }
    poll_call(c, &p, -1);
    finish_call(&p, desc, r);
}

static void reply_free(struct reply *r)
{
    if (r->msg != NULL)
        protobuf_c_message_free_unpacked(r->msg, NULL);
    r->msg = NULL;
}

/* ---------------------------------------------------------------------- */
/* Requests                                                                */

static char names[NTABLES + 1][16];
static double bins[NTABLES + 1][17];
static Shardd__V1__Table tables[NTABLES + 1];
static Shardd__V1__Table *table_ptrs[NTABLES + 1];
static Shardd__V1__Topology topo;
static Shardd__V1__PlanOptions options;
static Shardd__V1__PlanRequest plan_req;

static void make_request(void)
{
    static const int32_t dims[NTABLES] = {16, 32, 64, 128, 8, 48, 96, 4};
    static const double pf[NTABLES] = {1, 4, 12, 30, 2, 8, 20, 60};
    int i, k;

    for (i = 0; i < NTABLES; i++) {
        shardd__v1__table__init(&tables[i]);
        snprintf(names[i], sizeof(names[i]), "t%d", i);
        tables[i].name = names[i];
        tables[i].rows = 100000 + 250000 * (int64_t)i;
        tables[i].dim = dims[i];
        tables[i].pooling_factor = pf[i];
        for (k = 0; k < 17; k++)
            bins[i][k] = k < 6 ? 0.5 / (1 << k) : 0; /* sums to < 1 */
        tables[i].n_bins = 17;
        tables[i].bins = bins[i];
        table_ptrs[i] = &tables[i];
    }
    shardd__v1__topology__init(&topo);
    topo.num_devices = NDEVICES;
    topo.mem_bytes_per_device = 4 * GIB;
    shardd__v1__plan_options__init(&options);
    options.seed = 7;
    shardd__v1__plan_request__init(&plan_req);
    plan_req.n_tables = NTABLES;
    plan_req.tables = table_ptrs;
    plan_req.topology = &topo;
    plan_req.options = &options;
}

static bool contains(const char *s, const char *part)
{
    return strstr(s, part) != NULL;
}

/* ---------------------------------------------------------------------- */
/* Checks                                                                  */

/* Every column of every table placed once; devices in range. */
static void check_placements(Shardd__V1__TablePlacement **tp, size_t n)
{
    size_t i, k;

    CHECK(n == NTABLES);
    for (i = 0; i < n && i < NTABLES; i++) {
        int32_t next = 0;
        bool ok = true;

        ok = ok && strcmp(tp[i]->table, names[i]) == 0;
        for (k = 0; k < tp[i]->n_shards; k++) {
            const Shardd__V1__Shard *s = tp[i]->shards[k];

            ok = ok && s->col_offset == next && s->col_width > 0 &&
                 s->col_width % 4 == 0 && s->device >= 0 &&
                 s->device < NDEVICES;
            next += s->col_width;
        }
        ok = ok && next == tables[i].dim;
        if (!ok)
            fprintf(stderr, "table %zu is not covered exactly once\n", i);
        CHECK(ok);
    }
}

static Shardd__V1__PlanResponse *check_plan(struct client *c)
{
    Shardd__V1__PlanResponse *pr;
    struct reply r;
    double max_total = 0, compute = 0;
    uint64_t mem = 0;
    size_t d;

    call(c, "/shardd.v1.Planner/Plan", &plan_req.base,
         &shardd__v1__plan_response__descriptor, &r);
    CHECK(r.status == GRPC_STATUS_OK);
    if (r.status != GRPC_STATUS_OK || r.msg == NULL) {
        fprintf(stderr, "Plan: status %d: %s\n", (int)r.status, r.details);
        reply_free(&r);
        return NULL;
    }
    pr = (Shardd__V1__PlanResponse *)r.msg;
    check_placements(pr->tables, pr->n_tables);
    CHECK(pr->n_devices == NDEVICES);
    for (d = 0; d < pr->n_devices; d++) {
        const Shardd__V1__DeviceCost *dc = pr->devices[d];

        CHECK(dc->device == (int32_t)d);
        CHECK(dc->total_ms >= 0 && isfinite(dc->total_ms));
        CHECK(dc->memory_capacity_bytes == 4 * GIB);
        CHECK(dc->memory_bytes <= dc->memory_capacity_bytes);
        if (dc->total_ms > max_total)
            max_total = dc->total_ms;
        compute += dc->compute_ms;
        mem += dc->memory_bytes;
    }
    CHECK(compute > 0);
    CHECK(mem > 0);
    CHECK(pr->plan_cost_ms > 0 && isfinite(pr->plan_cost_ms));
    CHECK_NEAR(pr->plan_cost_ms, max_total, 1e-9);
    CHECK(pr->algorithm != NULL && strcmp(pr->algorithm, "neuroshard") == 0);
    CHECK(pr->basis != NULL && pr->basis->cost_model != NULL &&
          pr->basis->cost_model[0] != '\0');
    CHECK(pr->basis != NULL &&
          pr->basis->compute_source ==
              SHARDD__V1__COST_SOURCE__COST_SOURCE_LEARNED);
    CHECK(pr->explanation != NULL);
    if (pr->explanation != NULL) {
        CHECK(pr->explanation->bottleneck_device >= 0 &&
              pr->explanation->bottleneck_device < NDEVICES);
        CHECK(pr->explanation->n_bottleneck_tables >= 1);
        CHECK(pr->explanation->lower_bound_ms > 0);
    }
    CHECK(pr->search != NULL && pr->search->candidates_evaluated > 0);
    CHECK(pr->request_hash != NULL && strlen(pr->request_hash) == 16);
    printf("plan: cost %.4f ms, bottleneck device %d, %s\n", pr->plan_cost_ms,
           pr->explanation ? pr->explanation->bottleneck_device : -1,
           pr->basis ? pr->basis->cost_model : "?");
    return pr;
}

/* The same request again: the same plan, now from the cache. */
static void check_deterministic(struct client *c,
                                const Shardd__V1__PlanResponse *first)
{
    Shardd__V1__PlanResponse *pr;
    struct reply r;

    call(c, "/shardd.v1.Planner/Plan", &plan_req.base,
         &shardd__v1__plan_response__descriptor, &r);
    CHECK(r.status == GRPC_STATUS_OK && r.msg != NULL);
    if (r.msg == NULL)
        return;
    pr = (Shardd__V1__PlanResponse *)r.msg;
    CHECK(strcmp(pr->request_hash, first->request_hash) == 0);
    CHECK(pr->plan_cost_ms == first->plan_cost_ms);
    /* From the plan cache, marked so (protobuf-c reads the appended field);
     * the first was not. */
    CHECK(!first->cache_hit && pr->cache_hit);
    CHECK(pr->n_tables == first->n_tables && pr->n_devices == first->n_devices);
    reply_free(&r);
}

/* A Plan that must fail with `code` and a message containing both parts. */
static void expect_plan_error(struct client *c, grpc_status_code code,
                              const char *part1, const char *part2)
{
    struct reply r;

    call(c, "/shardd.v1.Planner/Plan", &plan_req.base,
         &shardd__v1__plan_response__descriptor, &r);
    CHECK(r.status == code);
    CHECK(contains(r.details, part1) && contains(r.details, part2));
    printf("status %d: %s\n", (int)r.status, r.details);
    reply_free(&r);
}

static void check_errors(struct client *c)
{
    double saved;

    /* A bad table among good ones: named, with its field. */
    shardd__v1__table__init(&tables[NTABLES]);
    snprintf(names[NTABLES], sizeof(names[NTABLES]), "t_bad");
    tables[NTABLES].name = names[NTABLES];
    tables[NTABLES].rows = 1000;
    tables[NTABLES].dim = 30;
    tables[NTABLES].pooling_factor = 1;
    tables[NTABLES].n_bins = 17;
    tables[NTABLES].bins = bins[NTABLES];
    table_ptrs[NTABLES] = &tables[NTABLES];
    plan_req.n_tables = NTABLES + 1;
    expect_plan_error(c, GRPC_STATUS_INVALID_ARGUMENT, "\"t_bad\"", "dim 30");
    plan_req.n_tables = NTABLES;

    saved = tables[2].pooling_factor;
    tables[2].pooling_factor = NAN;
    expect_plan_error(c, GRPC_STATUS_INVALID_ARGUMENT, "\"t2\"",
                      "pooling_factor");
    tables[2].pooling_factor = saved;

    topo.link_latency_ms = INFINITY;
    expect_plan_error(c, GRPC_STATUS_INVALID_ARGUMENT,
                      "topology.link_latency_ms", "finite");
    topo.link_latency_ms = 0;

    options.algorithm = (char *)"simulated_annealing";
    expect_plan_error(c, GRPC_STATUS_INVALID_ARGUMENT, "options.algorithm",
                      "neuroshard");
    options.algorithm = NULL;

    /* 1 MiB devices: the largest table fits nowhere. */
    topo.mem_bytes_per_device = 1 << 20;
    expect_plan_error(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "\"t",
                      "the most a device has left is 1.00 MiB");
    topo.mem_bytes_per_device = 4 * GIB;
}

static void check_baseline(struct client *c)
{
    Shardd__V1__PlanResponse *pr;
    struct reply r;

    options.algorithm = (char *)"size_greedy";
    call(c, "/shardd.v1.Planner/Plan", &plan_req.base,
         &shardd__v1__plan_response__descriptor, &r);
    options.algorithm = NULL;
    CHECK(r.status == GRPC_STATUS_OK && r.msg != NULL);
    if (r.msg == NULL)
        return;
    pr = (Shardd__V1__PlanResponse *)r.msg;
    CHECK(strcmp(pr->algorithm, "size_greedy") == 0);
    check_placements(pr->tables, pr->n_tables);
    reply_free(&r);
}

static void check_estimate(struct client *c, Shardd__V1__PlanResponse *plan)
{
    Shardd__V1__EstimateRequest er = SHARDD__V1__ESTIMATE_REQUEST__INIT;
    Shardd__V1__EstimateResponse *resp;
    struct reply r;

    er.n_tables = NTABLES;
    er.tables = table_ptrs;
    er.topology = &topo;
    er.n_placement = plan->n_tables;
    er.placement = plan->tables;
    call(c, "/shardd.v1.Planner/Estimate", &er.base,
         &shardd__v1__estimate_response__descriptor, &r);
    CHECK(r.status == GRPC_STATUS_OK && r.msg != NULL);
    if (r.msg == NULL) {
        fprintf(stderr, "Estimate: status %d: %s\n", (int)r.status, r.details);
        return;
    }
    resp = (Shardd__V1__EstimateResponse *)r.msg;
    CHECK(resp->n_devices == NDEVICES);
    CHECK(resp->fits_memory);
    /* The same placement and model: the plan's own cost. */
    CHECK_NEAR(resp->plan_cost_ms, plan->plan_cost_ms, 1e-9);
    CHECK(resp->basis != NULL &&
          strcmp(resp->basis->cost_model, plan->basis->cost_model) == 0);
    printf("estimate: cost %.4f ms\n", resp->plan_cost_ms);
    reply_free(&r);

    /* A shard reaching past its table: refused, naming the shard. */
    {
        Shardd__V1__Shard *sh = plan->tables[0]->shards[0];
        int32_t width = sh->col_width;

        sh->col_width = INT32_MAX - 3;
        call(c, "/shardd.v1.Planner/Estimate", &er.base,
             &shardd__v1__estimate_response__descriptor, &r);
        sh->col_width = width;
        CHECK(r.status == GRPC_STATUS_INVALID_ARGUMENT);
        CHECK(contains(r.details, "\"t0\"") && contains(r.details, "shards"));
        printf("status %d: %s\n", (int)r.status, r.details);
        reply_free(&r);
    }

    /* One table left out: refused, naming the placement. */
    er.n_placement = plan->n_tables - 1;
    call(c, "/shardd.v1.Planner/Estimate", &er.base,
         &shardd__v1__estimate_response__descriptor, &r);
    CHECK(r.status == GRPC_STATUS_INVALID_ARGUMENT);
    CHECK(contains(r.details, "placement"));
    printf("status %d: %s\n", (int)r.status, r.details);
    reply_free(&r);
}

static void check_unknown_method(struct client *c)
{
    struct reply r;

    call(c, "/shardd.v1.Planner/Nope", &plan_req.base,
         &shardd__v1__plan_response__descriptor, &r);
    CHECK(r.status == GRPC_STATUS_UNIMPLEMENTED);
    reply_free(&r);
}

/*
 * How much smaller check_drain()'s big search is for the shardd binary at
 * path: 1, or 2.5 when it is built with ASan (2-3 times slower), 10 with
 * TSan (5-20 times): it names the sanitizer runtime's entry point.
 */
static double slowdown(const char *path)
{
    static const struct {
        const char *mark;
        double div;
    } marks[] = {{"__tsan_init", 10}, {"__asan_init", 2.5}};
    char buf[1 << 16];
    size_t n, keep = 0, i;
    double div = 1;
    FILE *f = fopen(path, "rb");

    while (f != NULL && div == 1 &&
           (n = fread(buf + keep, 1, sizeof(buf) - keep, f)) > 0) {
        n += keep;
        for (i = 0; i < 2 && div == 1; i++)
            if (memmem(buf, n, marks[i].mark, strlen(marks[i].mark)) != NULL)
                div = marks[i].div;
        keep = 16; /* a mark across two reads */
        memmove(buf, buf + n - keep, keep);
    }
    if (f != NULL)
        fclose(f);
    return div;
}

/*
 * SIGTERM while a big search runs (20000 tables on 2048 devices, one search
 * thread, a budget of 60 s): the daemon says the search is running
 * (shardd_searches_running on /metrics) when the signal is sent, so the
 * call is surely in flight, and the one right outcome is OK with a plan of
 * every table: the daemon drains, it neither refuses nor cancels what it
 * took.  The planner bounds its beam (1.5 s for this search here), so the
 * search either ends within the 1 s grace or is cut when it ends and
 * answers with its best plan (time_budget_exhausted): both happen, by
 * machine and load.  A reply marked exhausted must come with the daemon's
 * "grace period over" line, as nothing else cuts a 60 s budget
 * (check_cut_logged()).  A sanitized shardd gets a smaller search
 * (slowdown()), so that what it does after a cut fits the 2 s the daemon
 * then gives.
 */
static bool check_drain(struct client *c, pid_t pid, double div, int port)
{
    static Shardd__V1__Table big[NBIG];
    static Shardd__V1__Table *big_ptrs[NBIG];
    static char big_names[NBIG][16];
    Shardd__V1__PlanRequest req = SHARDD__V1__PLAN_REQUEST__INIT;
    Shardd__V1__Topology tb = SHARDD__V1__TOPOLOGY__INIT;
    Shardd__V1__PlanOptions opt = SHARDD__V1__PLAN_OPTIONS__INIT;
    Shardd__V1__PlanResponse *pr;
    struct pending p;
    struct reply r;
    bool done_early = false, answered, exhausted;
    size_t placed = 0;
    long running = 0;
    int i, polls;

    for (i = 0; i < NBIG; i++) {
        big[i] = tables[i % NTABLES];
        snprintf(big_names[i], sizeof(big_names[i]), "big%d", i);
        big[i].name = big_names[i];
        big[i].rows += 1000 * i;
        big_ptrs[i] = &big[i];
    }
    tb.num_devices = (int32_t)(2048 / div);
    tb.mem_bytes_per_device = 64 * GIB;
    opt.seed = 7;
    opt.time_budget_ms = 60000;
    req.n_tables = (size_t)(NBIG / div);
    req.tables = big_ptrs;
    req.topology = &tb;
    req.options = &opt;
    if (start_call(c, "/shardd.v1.Planner/Plan", &req.base, false, BIG_MS,
                   &p) != 0) {
        CHECK(!"start_call");
        kill(pid, SIGTERM);
        return false;
    }
    /* The client's I/O runs in pluck: poll the call while asking the
     * daemon whether its search runs (30 s at most). */
    for (polls = 0; polls < 3000 && running < 1 && !done_early; polls++) {
        done_early = poll_call(c, &p, 10);
        if (!done_early)
            running =
                metric(port, "shardd_searches_running{size_class=\"big\"} ");
    }
    CHECK(running == 1 && !done_early);
    CHECK(kill(pid, SIGTERM) == 0);
    answered = done_early || poll_call(c, &p, 30000);
    CHECK(answered);
    if (!answered) {
        kill(pid, SIGKILL); /* the call then ends and frees */
        poll_call(c, &p, -1);
    }
    finish_call(&p, &shardd__v1__plan_response__descriptor, &r);
    CHECK(r.status == GRPC_STATUS_OK);
    pr = (Shardd__V1__PlanResponse *)r.msg;
    CHECK(pr != NULL && pr->n_tables == req.n_tables);
    /* Every column of every table placed once, on a device that exists. */
    for (i = 0; pr != NULL && i < (int)pr->n_tables && i < (int)req.n_tables;
         i++) {
        const Shardd__V1__TablePlacement *tp = pr->tables[i];
        int32_t next = 0;
        bool ok = strcmp(tp->table, big_names[i]) == 0 && tp->n_shards > 0;
        size_t k;

        for (k = 0; k < tp->n_shards; k++) {
            const Shardd__V1__Shard *sh = tp->shards[k];

            ok = ok && sh->col_offset == next && sh->col_width > 0 &&
                 sh->device >= 0 && sh->device < tb.num_devices;
            next += sh->col_width;
        }
        placed += ok && next == big[i].dim;
    }
    CHECK(placed == req.n_tables);
    exhausted =
        pr != NULL && pr->search != NULL && pr->search->time_budget_exhausted;
    printf("search running at SIGTERM (%zu tables on %d devices): status %d "
           "%s; %zu tables placed, search %.0f ms, %s\n",
           req.n_tables, (int)tb.num_devices, (int)r.status, r.details, placed,
           pr != NULL && pr->search != NULL ? pr->search->search_time_ms : -1,
           exhausted ? "cut when the grace ended" : "ended within the grace");
    reply_free(&r);
    return exhausted;
}

/* After the daemon exited: a cut search was cut by the grace. */
static void check_cut_logged(bool exhausted)
{
    CHECK(!exhausted || log_has("grace period over: 1 call(s) still running"));
}

/* A second daemon on the same data directory refuses to start (exit 1). */
static void check_second_refused(const char *bin)
{
    pid_t pid = start_daemon(bin);
    int status = pid > 0 ? wait_exit(pid, START_POLL) : -1;

    CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 1);
    if (status == -1 && pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
}

/* Removes dir and the files in it: the daemon's socket, pid file, log,
 * store and the store's backups (the data directory is dir itself). */
static void remove_dir(const char *path)
{
    DIR *dp = opendir(path);
    struct dirent *e;
    char file[sizeof(dir) + 256];

    while (dp && (e = readdir(dp)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
        if (unlink(file) != 0)
            fprintf(stderr, "test_daemon: cannot remove %s: %s\n", file,
                    strerror(errno));
    }
    if (dp)
        closedir(dp);
    if (rmdir(path) != 0)
        fprintf(stderr, "test_daemon: cannot remove %s: %s\n", path,
                strerror(errno));
}

int main(int argc, char **argv)
{
    Shardd__V1__PlanResponse *plan = NULL;
    grpc_channel_credentials *creds;
    struct client c;
    struct stat st;
    pid_t pid;
    int i, status, port;
    bool up = false, cut;

    if (argc != 2) {
        fprintf(stderr, "usage: test_daemon PATH-TO-SHARDD\n");
        return 2;
    }
    snprintf(dir, sizeof(dir), "/tmp/shardd-test-XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(sock_path, sizeof(sock_path), "%s/shardd.sock", dir);
    snprintf(listen_addr, sizeof(listen_addr), "unix:%s", sock_path);
    snprintf(pid_path, sizeof(pid_path), "%s/shardd.pid", dir);
    snprintf(log_path, sizeof(log_path), "%s/shardd.log", dir);
    port = free_port();
    snprintf(http_addr, sizeof(http_addr), "127.0.0.1:%d", port);
    make_request();

    /* Fork before grpc_init: gRPC starts threads. */
    pid = start_daemon(argv[1]);
    CHECK(pid > 0);
    if (pid <= 0)
        return tap_done();
    for (i = 0; i < START_POLL && !up; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            fprintf(stderr, "shardd exited early (status %d)\n", status);
            pid = -1;
            break;
        }
        up = stat(sock_path, &st) == 0 && stat(pid_path, &st) == 0;
        if (!up)
            sleep_ms(POLL_MS);
    }
    CHECK(up);
    if (!up) {
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        rmdir(dir);
        return tap_done();
    }
    check_second_refused(argv[1]);

    grpc_init();
    creds = grpc_insecure_credentials_create();
    c.ch = grpc_channel_create(listen_addr, creds, NULL);
    grpc_channel_credentials_release(creds);
    c.cq = grpc_completion_queue_create_for_pluck(NULL);

    plan = check_plan(&c);
    if (plan != NULL) {
        check_deterministic(&c, plan);
        check_estimate(&c, plan);
        protobuf_c_message_free_unpacked(&plan->base, NULL);
    }
    check_errors(&c);
    check_baseline(&c);
    check_unknown_method(&c);

    cut = check_drain(&c, pid, slowdown(argv[1]), port);
    status = wait_exit(pid, EXIT_POLL);
    CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    check_cut_logged(cut);
    if (status == -1) {
        fprintf(stderr, "shardd did not stop after SIGTERM\n");
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    CHECK(stat(pid_path, &st) != 0 && errno == ENOENT);

    grpc_channel_destroy(c.ch);
    grpc_completion_queue_shutdown(c.cq);
    while (grpc_completion_queue_pluck(c.cq, NULL,
                                       gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
               .type != GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(c.cq);
    grpc_shutdown();
    if (tap_fail > 0) {
        char cmd[160];

        snprintf(cmd, sizeof(cmd), "cat %s >&2", log_path);
        if (system(cmd) != 0)
            fprintf(stderr, "no log at %s\n", log_path);
    }
    remove_dir(dir);
    return tap_done();
}
