/*
 * Counters, histograms and their rendering in the Prometheus text
 * exposition format (metrics.h).
 */
#include "metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

const double metrics_bucket_le[METRICS_BUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5,   1,      2.5,   5,    10,    30,   60};

static const char *const lane_names[METRICS_LANES] = {"small", "big"};

void metrics_init(struct metrics *m)
{
    memset(m, 0, sizeof(*m)); /* atomics of integer type: all-zero is 0 */
}

const char *metrics_code_name(int code)
{
    return wire_status_name(code);
}

void metrics_observe(struct metrics *m, size_t method, int code, double seconds,
                     int lane, int timed)
{
    struct metrics_hist *h;
    size_t b = 0;

    if (method >= METRICS_METHODS)
        return;
    if (code < 0 || code >= METRICS_CODES)
        code = 2; /* UNKNOWN */
    atomic_fetch_add_explicit(&m->calls[method][code], 1, memory_order_relaxed);
    if (!timed || lane < 0 || lane >= METRICS_LANES)
        return;
    if (seconds < 0)
        seconds = 0;
    while (b < METRICS_BUCKETS && seconds > metrics_bucket_le[b])
        b++;
    h = &m->latency[method][lane];
    atomic_fetch_add_explicit(&h->bucket[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us,
                              (unsigned long long)(seconds * 1e6 + 0.5),
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
}

void metrics_lanes(struct metrics *m, size_t inflight, size_t big_running,
                   size_t big_waiting)
{
    atomic_store_explicit(&m->inflight, inflight, memory_order_relaxed);
    atomic_store_explicit(&m->big_running, big_running, memory_order_relaxed);
    atomic_store_explicit(&m->big_waiting, big_waiting, memory_order_relaxed);
}

/* ---------------------------------------------------------------------- */
/* Text                                                                    */

void mtext_printf(struct mtext *t, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (t->oom)
        return;
    for (;;) {
        size_t room = t->cap - t->n;

        va_start(ap, fmt);
        n = vsnprintf(t->p != NULL ? t->p + t->n : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = 1;
            return;
        }
        if ((size_t)n < room) {
            t->n += (size_t)n;
            return;
        }
        {
            size_t cap = t->cap > 0 ? t->cap * 2 : 4096;
            char *p;

            while (cap - t->n <= (size_t)n)
                cap *= 2;
            p = realloc(t->p, cap);
            if (p == NULL) {
                t->oom = 1;
                return;
            }
            t->p = p;
            t->cap = cap;
        }
    }
}

void mtext_label(struct mtext *t, const char *v)
{
    for (; *v != '\0'; v++) {
        if (*v == '\\' || *v == '"')
            mtext_printf(t, "\\%c", *v);
        else if (*v == '\n')
            mtext_printf(t, "\\n");
        else
            mtext_printf(t, "%c", *v);
    }
}

void mtext_head(struct mtext *t, const char *name, const char *type,
                const char *help)
{
    mtext_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* "/shardd.v1.Planner/Plan" -> grpc_service="shardd.v1.Planner",
 * grpc_method="Plan". */
static void method_labels(struct mtext *t, const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *svc = path[0] == '/' ? path + 1 : path;

    if (slash == NULL || slash <= svc) {
        mtext_printf(t, "grpc_service=\"\",grpc_method=\"");
        mtext_label(t, path);
        mtext_printf(t, "\"");
        return;
    }
    mtext_printf(t, "grpc_service=\"%.*s\",grpc_method=\"", (int)(slash - svc),
                 svc);
    mtext_label(t, slash + 1);
    mtext_printf(t, "\"");
}

static void render_hist(struct metrics_hist *h, const char *path,
                        const char *lane, struct mtext *t)
{
    unsigned long long cum = 0, count, sum_us;
    size_t b;

    for (b = 0; b <= METRICS_BUCKETS; b++) {
        cum += atomic_load_explicit(&h->bucket[b], memory_order_relaxed);
        mtext_printf(t, "shardd_grpc_server_handling_seconds_bucket{");
        method_labels(t, path);
        if (b < METRICS_BUCKETS)
            mtext_printf(t, ",size_class=\"%s\",le=\"%g\"} %llu\n", lane,
                         metrics_bucket_le[b], cum);
        else
            mtext_printf(t, ",size_class=\"%s\",le=\"+Inf\"} %llu\n", lane,
                         cum);
    }
    /* count after the buckets: never below +Inf's in one scrape of a
     * quiet histogram; under load the two may differ by the calls that
     * landed in between. */
    count = atomic_load_explicit(&h->count, memory_order_relaxed);
    sum_us = atomic_load_explicit(&h->sum_us, memory_order_relaxed);
    mtext_printf(t, "shardd_grpc_server_handling_seconds_sum{");
    method_labels(t, path);
    mtext_printf(t, ",size_class=\"%s\"} %.6f\n", lane, (double)sum_us / 1e6);
    mtext_printf(t, "shardd_grpc_server_handling_seconds_count{");
    method_labels(t, path);
    mtext_printf(t, ",size_class=\"%s\"} %llu\n", lane,
                 count < cum ? cum : count);
}

void metrics_render(struct metrics *m, const char *const *paths, size_t npaths,
                    struct mtext *t)
{
    size_t i, n = npaths < METRICS_METHODS ? npaths : METRICS_METHODS;
    int c, l;

    mtext_head(t, "shardd_grpc_server_handled_total", "counter",
               "gRPC calls answered, by method and status code.");
    for (i = 0; i < n; i++)
        for (c = 0; c < METRICS_CODES; c++) {
            unsigned long long v =
                atomic_load_explicit(&m->calls[i][c], memory_order_relaxed);

            /* Every method's OK series exists from the start; the others
             * once they happened. */
            if (v == 0 && c != 0)
                continue;
            mtext_printf(t, "shardd_grpc_server_handled_total{");
            method_labels(t, paths[i]);
            mtext_printf(t, ",grpc_code=\"%s\"} %llu\n", wire_status_name(c),
                         v);
        }
    mtext_head(t, "shardd_grpc_server_handling_seconds", "histogram",
               "Time from a unary call's arrival to its answer, by method and "
               "size class (the lane: a Plan over small_search_work tables x "
               "devices is big).");
    for (i = 0; i < n; i++)
        for (l = 0; l < METRICS_LANES; l++) {
            struct metrics_hist *h = &m->latency[i][l];

            /* Plan's two size classes always; others once used. */
            if (atomic_load_explicit(&h->count, memory_order_relaxed) == 0 &&
                strcmp(paths[i], "/shardd.v1.Planner/Plan") != 0)
                continue;
            render_hist(h, paths[i], lane_names[l], t);
        }
    mtext_head(t, "shardd_unary_calls_in_flight", "gauge",
               "Unary calls running or waiting for a worker.");
    mtext_printf(t, "shardd_unary_calls_in_flight %llu\n",
                 (unsigned long long)atomic_load(&m->inflight));
    mtext_head(t, "shardd_searches_running", "gauge",
               "Big searches (the big lane) running on a worker.");
    mtext_printf(t, "shardd_searches_running{size_class=\"big\"} %llu\n",
                 (unsigned long long)atomic_load(&m->big_running));
    mtext_head(t, "shardd_searches_queued", "gauge",
               "Big searches waiting for their lane's turn.");
    mtext_printf(t, "shardd_searches_queued{size_class=\"big\"} %llu\n",
                 (unsigned long long)atomic_load(&m->big_waiting));
}
