/*
 * The HTTP transport on libmicrohttpd (http.h): address parsing, routing,
 * and the page's files compiled in from daemon/www/ at build time.
 */
#include "http.h"

#include <microhttpd.h>
#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "shardd/log.h"

#define PLANS_DEFAULT 50
#define PLANS_MAX     500

/* The page (cmake/embed.cmake of daemon/www/). */
extern const unsigned char sd_www_index_html[], sd_www_app_js[],
    sd_www_style_css[];
extern const size_t sd_www_index_html_len, sd_www_app_js_len,
    sd_www_style_css_len;

struct http_server {
    struct MHD_Daemon *mhd;
    atomic_bool started; /* before: MHD's messages are debug lines (a bind
                          * failure is shardd's one line) */
    struct svc *svc;
    char address[HTTP_ADDRESS_MAX];
};

struct asset {
    const char *path, *type;
    const unsigned char *data;
    const size_t *len;
};

static const struct asset assets[] = {
    {"/", "text/html; charset=utf-8", sd_www_index_html,
     &sd_www_index_html_len},
    {"/index.html", "text/html; charset=utf-8", sd_www_index_html,
     &sd_www_index_html_len},
    {"/app.js", "text/javascript; charset=utf-8", sd_www_app_js,
     &sd_www_app_js_len},
    {"/style.css", "text/css; charset=utf-8", sd_www_style_css,
     &sd_www_style_css_len},
};

/* ---------------------------------------------------------------------- */
/* Answers                                                                 */

/* Queues `body` (len bytes; freed by MHD when `owned`) with a status. */
static enum MHD_Result answer(struct MHD_Connection *conn, unsigned status,
                              const char *type, void *body, size_t len,
                              bool owned)
{
    struct MHD_Response *r;
    enum MHD_Result rv;

    r = owned ? MHD_create_response_from_buffer_with_free_callback(len, body,
                                                                   free)
              : MHD_create_response_from_buffer(len, body,
                                                MHD_RESPMEM_PERSISTENT);
    if (r == NULL) {
        if (owned)
            free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    rv = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rv;
}

static enum MHD_Result answer_text(struct MHD_Connection *conn, unsigned status,
                                   const char *text)
{
    return answer(conn, status, "text/plain; charset=utf-8", (void *)text,
                  strlen(text), false);
}

/* A service text (0 or an SD_E* code with d): 200, 404 or 500. */
static enum MHD_Result answer_svc(struct MHD_Connection *conn, int rv,
                                  const char *type, char *body, size_t len,
                                  const struct sd_diag *d)
{
    char *msg;

    if (rv == 0)
        return answer(conn, MHD_HTTP_OK, type, body, len, true);
    msg = malloc(sizeof(d->msg) + 2);
    if (msg == NULL)
        return MHD_NO;
    snprintf(msg, sizeof(d->msg) + 2, "%s\n", d->msg);
    if (rv != SD_ENOENT)
        sd_log(SD_LOG_WARN, "http: %s", d->msg);
    return answer(conn,
                  rv == SD_ENOENT ? MHD_HTTP_NOT_FOUND
                                  : MHD_HTTP_INTERNAL_SERVER_ERROR,
                  "text/plain; charset=utf-8", msg, strlen(msg), true);
}

/* A positive decimal id, or 0. */
static int64_t parse_id(const char *s)
{
    int64_t v = 0;

    if (*s == '\0')
        return 0;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9' || v > (INT64_MAX - 9) / 10)
            return 0;
        v = v * 10 + (*s - '0');
    }
    return v;
}

static enum MHD_Result route_api(struct http_server *h,
                                 struct MHD_Connection *conn, const char *url)
{
    struct sd_diag d = {{0}};
    const char *json = "application/json";
    char *body = NULL;
    size_t len = 0;
    int rv;

    if (strcmp(url, "/api/status") == 0) {
        rv = svc_status_json(h->svc, &body, &len, &d);
        return answer_svc(conn, rv, json, body, len, &d);
    }
    if (strcmp(url, "/api/plans") == 0) {
        const char *lim =
            MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "limit");
        int64_t n = lim != NULL ? parse_id(lim) : PLANS_DEFAULT;

        if (n < 1 || n > PLANS_MAX)
            return answer_text(conn, MHD_HTTP_BAD_REQUEST,
                               "limit: an integer in [1, 500]\n");
        rv = svc_plans_json(h->svc, (size_t)n, &body, &len, &d);
        return answer_svc(conn, rv, json, body, len, &d);
    }
    if (strncmp(url, "/api/plans/", 11) == 0) {
        int64_t id = parse_id(url + 11);

        if (id < 1)
            return answer_text(conn, MHD_HTTP_NOT_FOUND,
                               "no such plan: ids are positive integers\n");
        rv = svc_plan_json(h->svc, id, &body, &len, &d);
        return answer_svc(conn, rv, json, body, len, &d);
    }
    return answer_text(conn, MHD_HTTP_NOT_FOUND, "not found\n");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    struct http_server *h = cls;
    struct sd_diag d = {{0}};
    char *body = NULL;
    size_t i, len = 0;
    int rv;

    (void)version;
    (void)upload;
    (void)upload_size;
    (void)con_cls;
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
        strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return answer_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
                           "only GET and HEAD\n");
    if (strcmp(url, "/metrics") == 0) {
        rv = svc_metrics_text(h->svc, &body, &len, &d);
        return answer_svc(conn, rv, "text/plain; version=0.0.4; charset=utf-8",
                          body, len, &d);
    }
    if (strcmp(url, "/healthz") == 0)
        return answer_text(conn, MHD_HTTP_OK, "ok\n");
    if (strcmp(url, "/readyz") == 0)
        return svc_is_serving(h->svc)
                   ? answer_text(conn, MHD_HTTP_OK, "SERVING\n")
                   : answer_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE,
                                 "NOT_SERVING\n");
    if (strncmp(url, "/api/", 5) == 0)
        return route_api(h, conn, url);
    for (i = 0; i < sizeof(assets) / sizeof(assets[0]); i++)
        if (strcmp(url, assets[i].path) == 0)
            return answer(conn, MHD_HTTP_OK, assets[i].type,
                          (void *)assets[i].data, *assets[i].len, false);
    return answer_text(conn, MHD_HTTP_NOT_FOUND, "not found\n");
}

static void log_from_mhd(void *cls, const char *fmt, va_list ap)
{
    struct http_server *h = cls;
    char line[256];
    size_t n;

    vsnprintf(line, sizeof(line), fmt, ap);
    n = strlen(line);
    while (n > 0 && line[n - 1] == '\n')
        line[--n] = '\0';
    sd_log(atomic_load(&h->started) ? SD_LOG_WARN : SD_LOG_DEBUG, "http: %s",
           line);
}

/* ---------------------------------------------------------------------- */
/* Lifecycle                                                               */

/* "host:port" or "[v6]:port" into host and port. */
static int split_address(const char *listen, char *host, size_t cap,
                         const char **port, struct sd_diag *d)
{
    const char *colon;
    size_t n;

    if (listen[0] == '[') {
        const char *end = strchr(listen, ']');

        if (end == NULL || end[1] != ':')
            return sd_diag_set(d, SD_EINVAL,
                               "http_listen: \"%.64s\" is not [ADDRESS]:PORT",
                               listen);
        n = (size_t)(end - listen - 1);
        colon = end + 1;
        listen++;
    } else {
        colon = strrchr(listen, ':');
        if (colon == NULL)
            return sd_diag_set(d, SD_EINVAL,
                               "http_listen: \"%.64s\" is not HOST:PORT",
                               listen);
        n = (size_t)(colon - listen);
    }
    if (n == 0 || n >= cap || colon[1] == '\0')
        return sd_diag_set(d, SD_EINVAL,
                           "http_listen: \"%.64s\" is not HOST:PORT", listen);
    memcpy(host, listen, n);
    host[n] = '\0';
    *port = colon + 1;
    return 0;
}

int http_server_start(const char *listen, struct svc *svc,
                      struct http_server **out, struct sd_diag *d)
{
    struct addrinfo hints, *ai = NULL;
    struct http_server *h;
    const union MHD_DaemonInfo *info;
    char host[HTTP_ADDRESS_MAX];
    const char *port = NULL;
    int rv;

    rv = split_address(listen, host, sizeof(host), &port, d);
    if (rv != 0)
        return rv;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    if (getaddrinfo(host, port, &hints, &ai) != 0 || ai == NULL)
        return sd_diag_set(d, SD_EINVAL,
                           "http_listen: cannot resolve \"%.64s\"", listen);
    h = calloc(1, sizeof(*h));
    if (h == NULL) {
        freeaddrinfo(ai);
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    }
    h->svc = svc;
    h->mhd = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
            (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0),
        0, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, log_from_mhd,
        h, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned)HTTP_THREADS, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)HTTP_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)HTTP_TIMEOUT_S, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (h->mhd == NULL) {
        free(h);
        return sd_diag_set(d, SD_EIO,
                           "http_listen %s: cannot bind (address in use, bad "
                           "address or no permission)",
                           listen);
    }
    atomic_store(&h->started, true);
    info = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_BIND_PORT);
    snprintf(h->address, sizeof(h->address),
             strchr(host, ':') != NULL ? "[%s]:%u" : "%s:%u", host,
             info != NULL ? (unsigned)info->port : 0u);
    *out = h;
    return 0;
}

const char *http_server_address(const struct http_server *h)
{
    return h->address;
}

void http_server_stop(struct http_server *h)
{
    if (h == NULL)
        return;
    MHD_stop_daemon(h->mhd);
    free(h);
}
