/*
 * The service's metrics: lock-free counters and fixed-bucket histograms
 * that the transport records into after every call (svc_observe()), and
 * gauges of its lanes (svc_lanes_set()).  metrics.c renders them, with what
 * the other parts report (cache, models, profiler, jobs, store), in the
 * Prometheus text exposition format (svc_metrics_text(), service.h).
 *
 * Threads: metrics_observe() and metrics_lanes() are called on the
 * transport's loop thread, the readers on the HTTP thread; every field is
 * an atomic, so nothing here takes a lock and a reader may see one call's
 * count before its histogram bucket (a scrape is not a snapshot).
 */
#ifndef SHARDD_DAEMON_METRICS_H
#define SHARDD_DAEMON_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define METRICS_METHODS 32 /* svc_methods[] entries counted (more: dropped) */
#define METRICS_CODES   17 /* gRPC status codes 0 (OK) .. 16 */
#define METRICS_LANES   2  /* enum svc_lane */
#define METRICS_BUCKETS 15 /* upper bounds, metrics_bucket_le[] */

/* A latency histogram: counts per bucket (not cumulative; the renderer
 * sums), the count and the sum in microseconds. */
struct metrics_hist {
    atomic_ullong bucket[METRICS_BUCKETS + 1]; /* the last one: +Inf */
    atomic_ullong count;
    atomic_ullong sum_us;
};

struct metrics {
    /* Calls answered, by method (svc_methods[] index) and status code. */
    atomic_ullong calls[METRICS_METHODS][METRICS_CODES];
    /* Latency of the unary calls of each method, by lane (Plan's lane is
     * its size class: small or big search). */
    struct metrics_hist latency[METRICS_METHODS][METRICS_LANES];
    /* The transport's lanes now. */
    atomic_ullong inflight;    /* unary calls running or queued */
    atomic_ullong big_running; /* big searches with a worker */
    atomic_ullong big_waiting; /* big searches waiting their turn */
};

/* Bucket upper bounds in seconds, increasing. */
extern const double metrics_bucket_le[METRICS_BUCKETS];

/* Zeroes every counter. */
void metrics_init(struct metrics *m);

/* One finished call: method index, gRPC status code (0..16; others count
 * as UNKNOWN), wall seconds, lane; `timed` false for a call whose latency
 * means nothing (streams). */
void metrics_observe(struct metrics *m, size_t method, int code, double seconds,
                     int lane, int timed);

/* The lanes now. */
void metrics_lanes(struct metrics *m, size_t inflight, size_t big_running,
                   size_t big_waiting);

/* The canonical name of a gRPC status code ("OK", "NOT_FOUND", ...). */
const char *metrics_code_name(int code);

/* A growing text: appends never fail loudly, `oom` says one did. */
struct mtext {
    char *p; /* NUL-terminated; owned, free() */
    size_t n, cap;
    int oom;
};

void mtext_printf(struct mtext *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Writes a Prometheus label value: backslash, quote and newline escaped. */
void mtext_label(struct mtext *t, const char *v);

/* "# HELP name help\n# TYPE name type\n". */
void mtext_head(struct mtext *t, const char *name, const char *type,
                const char *help);

/*
 * Renders the counters: shardd_grpc_requests_total by method and code (the
 * methods named by paths[], npaths of them, each counted method once),
 * shardd_request_duration_seconds by method and size class, and the lane
 * gauges.
 */
void metrics_render(struct metrics *m, const char *const *paths, size_t npaths,
                    struct mtext *t);

#endif /* SHARDD_DAEMON_METRICS_H */
