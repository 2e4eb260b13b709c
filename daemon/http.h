/*
 * The HTTP transport: /metrics (Prometheus), the status page and its JSON,
 * /healthz and /readyz, served by libmicrohttpd on threads of its own, so
 * that nothing here ever waits on or blocks the gRPC loop.  Like the gRPC
 * transport it decodes nothing of the service's: every answer is a
 * service.h function's text (svc_metrics_text(), svc_status_json(), ...)
 * or a file of the page compiled into the binary (daemon/www/).
 * daemon/http.c is the only file that includes microhttpd.h
 * (scripts/check-layering.sh).
 *
 * Routes (GET and HEAD; docs/daemon.md, "Metrics and the status page"):
 *   /metrics        text/plain; version=0.0.4
 *   /healthz        200 "ok" while the process serves (liveness)
 *   /readyz         200 "SERVING" or 503 "NOT_SERVING": grpc.health.v1
 *                   Check of the whole server (readiness)
 *   /api/status     the page's data (JSON)
 *   /api/plans      the newest plans of the plan audit (?limit=N, <= 500)
 *   /api/plans/ID   one plan with its per-device bars
 *   /, /app.js, /style.css   the page
 */
#ifndef SHARDD_DAEMON_HTTP_H
#define SHARDD_DAEMON_HTTP_H

#include "service.h"
#include "shardd/err.h"

#define HTTP_THREADS     2  /* the listener's thread pool */
#define HTTP_CONNECTIONS 64 /* connections at once; more are refused */
#define HTTP_TIMEOUT_S   10 /* an idle connection is closed after this */
#define HTTP_ADDRESS_MAX 128

struct http_server; /* opaque */

/*
 * Listens on `listen` ("HOST:PORT", "[V6]:PORT"; port 0: a free one) and
 * serves svc (borrowed: it must outlive the server) from HTTP_THREADS
 * threads.  *out is owned by the caller (http_server_stop()).  Returns 0,
 * SD_EINVAL (a bad address, d says why) or SD_EIO (cannot bind).
 */
int http_server_start(const char *listen, struct svc *svc,
                      struct http_server **out, struct sd_diag *d);

/* The bound address, "127.0.0.1:9464". */
const char *http_server_address(const struct http_server *h);

/* Stops listening, finishes the requests being answered and joins the
 * threads.  NULL-safe. */
void http_server_stop(struct http_server *h);

#endif /* SHARDD_DAEMON_HTTP_H */
