/*
 * shardd: the planning daemon.  Serves shardd.v1.Planner, shardd.v1.Admin
 * and grpc.health.v1.Health over gRPC (TCP and unix sockets) with the
 * active cost models, profiles idle devices and retrains, until SIGTERM or
 * SIGINT; then it stops accepting, lets the calls in flight finish (up to
 * grace_s) and exits 0.  SIGHUP reloads the configuration.
 *
 *   shardd [--listen ADDR]... [--data-dir DIR] [--config FILE] [...]
 *
 * Configuration: config.c, docs/config.md.  It runs in the foreground,
 * logs to stderr, and is ready when Health/Check answers SERVING (under
 * systemd, Type=notify: it sends READY=1 then).
 *
 * Exit status: 0 after a graceful stop, 1 when it cannot start (bad model,
 * address in use, another shardd on the data directory), 2 for bad usage;
 * always with one message on stderr.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#if defined(__GLIBC__)
#    include <malloc.h>
#endif
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <uv.h>

#include "config.h"
#include "fleet_sync.h"
#include "http.h"
#include "kernels.h"
#include "rpc.h"
#include "service.h"
#include "shardd/log.h"

#define EXIT_USAGE  2
#define SOCKET_FILE "shardd.sock" /* the admin socket in data_dir */
/* Calls in flight (running or waiting for a worker) before the server
 * answers RESOURCE_EXHAUSTED: a minute's work of quick plans, not a backlog
 * that outlives its clients' deadlines. */
#define MAX_QUEUED 1024
/* ... and at most this many request bytes waiting: 1,024 requests of 64
 * MiB would be 64 GiB of memory before any work started. */
#define MAX_QUEUED_BYTES ((size_t)1 << 30)
/* SIGTERM: this long answering new calls UNAVAILABLE (clients and load
 * balancers move on) before the listeners close. */
#define LAME_DUCK_MS 500

extern char **environ;

/* ---------------------------------------------------------------------- */
/* Data directory and pidfile                                              */

/* Creates dir (0700) unless it exists as a directory. */
static int make_data_dir(const char *dir, struct sd_diag *d)
{
    struct stat st;

    if (mkdir(dir, 0700) == 0 || errno == EEXIST) {
        if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
            return 0;
        return sd_diag_set(d, SD_EINVAL, "data_dir: %s is not a directory",
                           dir);
    }
    return sd_diag_set(d, SD_EIO, "data_dir: cannot create %s: %s", dir,
                       strerror(errno));
}

/*
 * Takes data_dir/shardd.pid under an exclusive flock held for the life of
 * the process: a second shardd on the same data directory refuses to start
 * (a lock, unlike a pid, cannot be stale: it dies with its process).
 * Returns the open descriptor in *fd.
 */
static int pidfile_lock(const char *path, int *fd, struct sd_diag *d)
{
    char line[32], other[32];
    ssize_t n;
    int len;

    *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (*fd < 0)
        return sd_diag_set(d, SD_EIO, "pidfile %s: %s", path, strerror(errno));
    if (flock(*fd, LOCK_EX | LOCK_NB) != 0) {
        n = read(*fd, other, sizeof(other) - 1);
        other[n > 0 ? n : 0] = '\0';
        other[strcspn(other, "\n")] = '\0';
        close(*fd);
        *fd = -1;
        return sd_diag_set(d, SD_EBUSY,
                           "another shardd (pid %s) is running on this data "
                           "directory (%s is locked)",
                           other[0] ? other : "?", path);
    }
    len = snprintf(line, sizeof(line), "%ld\n", (long)getpid());
    if (ftruncate(*fd, 0) != 0 || pwrite(*fd, line, (size_t)len, 0) != len) {
        close(*fd);
        *fd = -1;
        return sd_diag_set(d, SD_EIO, "pidfile %s: %s", path, strerror(errno));
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Unix socket in use?                                                     */

/*
 * gRPC unlinks an existing socket file before binding, so a second daemon
 * would silently take the path over.  Refuse when something answers there.
 */
static int check_socket_free(const char *listen, struct sd_diag *d)
{
    struct sockaddr_un sa;
    const char *path;
    int fd, rv = 0;

    if (strncmp(listen, "unix:", 5) != 0)
        return 0;
    path = listen + 5;
    if (strlen(path) >= sizeof(sa.sun_path))
        return sd_diag_set(d, SD_EINVAL,
                           "listen %s: the path is longer than %zu bytes",
                           listen, sizeof(sa.sun_path) - 1);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0)
        return 0; /* cannot probe; the bind will tell */
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
        rv =
            sd_diag_set(d, SD_EBUSY,
                        "listen %s: another server is accepting there", listen);
    close(fd);
    return rv;
}

/* systemd (Type=notify): READY=1, RELOADING=1, STOPPING=1; nothing when
 * not run by systemd (libsystemd checks $NOTIFY_SOCKET). */
static void notify(const char *state)
{
    sd_notify(0, state);
}

/* ---------------------------------------------------------------------- */
/* Signals and main                                                        */

struct daemon_state {
    struct rpc_server *rpc;
    struct http_server *http; /* NULL: http_listen unset */
    struct fleet_sync *sync;  /* NULL: not a profiler or planner of a fleet */
    struct svc *svc;
    struct sd_config *cfg;
    int argc;
    char **argv;
    uv_signal_t sigint, sigterm, sighup;
};

static void set_log_level(const struct sd_config *c)
{
    /* The config's words are numbered as the logger's levels. */
    sd_log_set_level((enum sd_log_level)c->log_level);
}

static void on_stop_signal(uv_signal_t *h, int signum)
{
    struct daemon_state *st = h->data;

    sd_log(SD_LOG_INFO,
           "%s: stopping (calls in flight get %u s; a second signal kills)",
           signum == SIGINT ? "SIGINT" : "SIGTERM", st->cfg->grace_s);
    notify("STOPPING=1");
    svc_set_draining(st->svc);
    fleet_sync_request_stop(st->sync);
    /* Closing the handles restores the default action: the next signal
     * ends the process at once. */
    uv_close((uv_handle_t *)&st->sigint, NULL);
    uv_close((uv_handle_t *)&st->sigterm, NULL);
    uv_close((uv_handle_t *)&st->sighup, NULL);
    rpc_server_shutdown(st->rpc);
}

static void on_sighup(uv_signal_t *h, int signum)
{
    struct daemon_state *st = h->data;
    struct sd_config next;
    struct conf_changes ch;
    struct sd_diag d;
    char keys[512];

    (void)signum;
    notify("RELOADING=1");
    if (conf_reload(st->cfg, st->argc, st->argv, environ, &next, &ch, &d) !=
        0) {
        sd_log(SD_LOG_ERROR, "SIGHUP: configuration not reloaded: %s", d.msg);
        notify("READY=1");
        return;
    }
    if (svc_reconfigure(st->svc, &next) != 0) {
        sd_log(SD_LOG_ERROR, "SIGHUP: configuration not reloaded: out of "
                             "memory");
        conf_free(&next);
        notify("READY=1");
        return;
    }
    conf_free(st->cfg);
    *st->cfg = next;
    rpc_server_set_grace(st->rpc, (uint64_t)st->cfg->grace_s * 1000);
    set_log_level(st->cfg);
    conf_keys_format(ch.applied, keys, sizeof(keys));
    sd_log(SD_LOG_INFO, "SIGHUP: configuration reloaded; changed: %s",
           keys[0] ? keys : "nothing");
    if (ch.restart != 0) {
        conf_keys_format(ch.restart, keys, sizeof(keys));
        sd_log(SD_LOG_WARN, "SIGHUP: %s changed; restart to apply", keys);
    }
    notify("READY=1");
}

/*
 * The listen addresses, plus the admin socket data_dir/shardd.sock when no
 * unix address is configured: Admin calls always have a way in on the host.
 */
static int listen_addresses(const struct sd_config *c, struct rpc_config *r,
                            char *admin, size_t cap, struct sd_diag *d)
{
    bool have_unix = false;
    size_t i;

    for (i = 0; i < c->nlisten && i < RPC_LISTEN_MAX; i++) {
        r->listen[r->nlisten++] = c->listen[i];
        if (strncmp(c->listen[i], "unix:", 5) == 0)
            have_unix = true;
    }
    if (have_unix || r->nlisten == RPC_LISTEN_MAX)
        return 0;
    if ((size_t)snprintf(admin, cap, "unix:%s/%s", c->data_dir, SOCKET_FILE) >=
            cap ||
        strlen(admin) - 5 >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return sd_diag_set(d, SD_ERANGE,
                           "data_dir: %s is too long for the admin socket "
                           "(%s); use a shorter path or listen on a unix: "
                           "address",
                           c->data_dir, SOCKET_FILE);
    r->listen[r->nlisten++] = admin;
    return 0;
}

/*
 * The planner workers: `threads`, or where it is 0 one per CPU this
 * process may run on (libuv reads its affinity), at least 2 so that a big
 * search leaves one to small plans.  More workers than CPUs only
 * time-slice the searches: on 2 CPUs, 4 workers added 2-7 ms to the p99
 * of 50-table plans at 64 clients (docs/daemon.md, "Workers: one per CPU").
 */
static unsigned workers_of(const struct sd_config *c)
{
    unsigned n;

    if (c->threads > 0)
        return c->threads;
    n = uv_available_parallelism();
    return n < 2 ? 2 : n > 256 ? 256 : n;
}

/* The rpc server's settings from the configuration and the worker count
 * (main's listen list and admin socket path are borrowed). */
static void rpc_config_of(const struct sd_config *c, unsigned workers,
                          struct svc *svc, struct rpc_config *r)
{
    r->max_message_bytes = (size_t)c->max_message_mb << 20;
    r->grace_ms = (uint64_t)c->grace_s * 1000;
    r->max_queued = MAX_QUEUED;
    r->max_queued_bytes = r->max_message_bytes > MAX_QUEUED_BYTES
                              ? r->max_message_bytes
                              : MAX_QUEUED_BYTES;
    r->lame_duck_ms = LAME_DUCK_MS;
    r->unix_mode = c->socket_mode;
    /* Big searches leave at least one worker to small requests. */
    r->max_big = c->big_searches > 0 ? c->big_searches
                 : workers > 1       ? workers - 1
                                     : 1;
    r->big_per_peer = c->big_searches_per_peer;
    r->methods = svc_methods;
    r->nmethods = svc_nmethods;
    r->svc = svc;
}

/* Signals on the loop: SIGTERM/SIGINT stop, SIGHUP reloads. */
static void watch_signals(uv_loop_t *loop, struct daemon_state *st)
{
    uv_signal_init(loop, &st->sigint);
    uv_signal_init(loop, &st->sigterm);
    uv_signal_init(loop, &st->sighup);
    st->sigint.data = st->sigterm.data = st->sighup.data = st;
    uv_signal_start(&st->sigint, on_stop_signal, SIGINT);
    uv_signal_start(&st->sigterm, on_stop_signal, SIGTERM);
    uv_signal_start(&st->sighup, on_sighup, SIGHUP);
}

/*
 * Everything before the service: threadpool size, listen addresses, the
 * data directory, its pidfile lock, and sockets no other server answers
 * on.  *pidpath and *pidfd are set as soon as they exist.
 */
static int prepare(const struct sd_config *cfg, unsigned workers,
                   struct rpc_config *rcfg, char *admin, size_t admin_size,
                   char **pidpath, int *pidfd, struct sd_diag *d)
{
    char threads[24];
    size_t i;
    int rv;

    /* libuv sizes its threadpool from the environment on first use. */
    snprintf(threads, sizeof(threads), "%u", workers);
    if (setenv("UV_THREADPOOL_SIZE", threads, 1) != 0)
        return sd_diag_set(d, SD_EIO, "cannot set UV_THREADPOOL_SIZE: %s",
                           strerror(errno));
    rcfg->unix_gid = -1;
    if (cfg->socket_group != NULL) {
        struct group *g = getgrnam(cfg->socket_group);

        if (g == NULL)
            return sd_diag_set(d, SD_EINVAL,
                               "socket_group: no group \"%.64s\" on this "
                               "host",
                               cfg->socket_group);
        rcfg->unix_gid = (int64_t)g->gr_gid;
    }
    rv = listen_addresses(cfg, rcfg, admin, admin_size, d);
    if (rv == 0)
        rv = make_data_dir(cfg->data_dir, d);
    if (rv != 0)
        return rv;
    *pidpath = conf_data_path(cfg, CONF_PID_FILE);
    if (*pidpath == NULL)
        return sd_diag_set(d, SD_ENOMEM, "out of memory");
    rv = pidfile_lock(*pidpath, pidfd, d);
    for (i = 0; rv == 0 && i < rcfg->nlisten; i++)
        rv = check_socket_free(rcfg->listen[i], d);
    return rv;
}

/*
 * A search allocates and frees a few MiB of states, levels and plans per
 * request.  glibc's defaults hand a freed top of a worker's heap back to
 * the kernel once it passes 128 KiB, and the next request faults it in
 * again, with a TLB shootdown across the cores each time: 50-table split
 * plans ran 15 % faster with these (docs/daemon.md, "Split plans at 64
 * clients, again").  A MALLOC_*_ variable the operator set wins.  The
 * cost: up to the trim threshold plus the pad of free memory kept per
 * worker's heap.
 */
static void tune_malloc(void)
{
#if defined(__GLIBC__)
    if (getenv("MALLOC_MMAP_THRESHOLD_") == NULL)
        mallopt(M_MMAP_THRESHOLD, 32 << 20);
    if (getenv("MALLOC_TRIM_THRESHOLD_") == NULL)
        mallopt(M_TRIM_THRESHOLD, 64 << 20);
    if (getenv("MALLOC_TOP_PAD_") == NULL)
        mallopt(M_TOP_PAD, 16 << 20);
#endif
}

int main(int argc, char **argv)
{
    struct daemon_state st;
    struct sd_config cfg;
    struct rpc_config rcfg;
    struct sd_diag d = {{0}};
    struct svc *svc = NULL;
    uv_loop_t *loop;
    unsigned workers;
    char admin[sizeof(((struct sockaddr_un *)0)->sun_path) + 8], what[512];
    char *pidpath = NULL;
    bool help = false;
    int pidfd = -1, rv;

    tune_malloc(); /* before any thread, so every arena has it */
    sd_log_init("shardd");
    if (conf_resolve(argc, argv, environ, &cfg, &help, &d) != 0) {
        sd_log(SD_LOG_ERROR, "%s", d.msg);
        return EXIT_USAGE;
    }
    if (help) {
        fputs(conf_usage(), stdout);
        return 0;
    }
    if (cfg.print_version) {
        printf("shardd %s (backends: cpu%s)\n", SHARDD_VERSION,
               kern_have_cuda() ? ", cuda" : "");
        conf_free(&cfg);
        return 0;
    }
    if ((cfg.fleet_role == CONF_FLEET_PROFILER ||
         cfg.fleet_role == CONF_FLEET_PLANNER) &&
        cfg.fleet_trainer == NULL) {
        sd_log(SD_LOG_ERROR, "fleet_role: a %s needs fleet_trainer",
               cfg.fleet_role == CONF_FLEET_PROFILER ? "profiler" : "planner");
        conf_free(&cfg);
        return EXIT_USAGE;
    }
    if (cfg.print_config) {
        conf_print(stdout, &cfg);
        conf_free(&cfg);
        return 0;
    }
    set_log_level(&cfg);
    signal(SIGPIPE, SIG_IGN);

    memset(&rcfg, 0, sizeof(rcfg));
    /* Resolved once: the threadpool, the lanes and the log agree. */
    workers = workers_of(&cfg);
    rv = prepare(&cfg, workers, &rcfg, admin, sizeof(admin), &pidpath, &pidfd,
                 &d);
    if (rv == 0)
        rv = svc_open(&cfg, &svc, &d);
    if (rv != 0) {
        sd_log(SD_LOG_ERROR, "%s", d.msg);
        goto fail_prepare;
    }
    loop = uv_default_loop();
    rpc_config_of(&cfg, workers, svc, &rcfg);
    if (rpc_server_start(loop, &rcfg, &st.rpc, &d) != 0) {
        sd_log(SD_LOG_ERROR, "%s", d.msg);
        goto fail_svc;
    }
    st.http = NULL;
    if (cfg.http_listen != NULL &&
        http_server_start(cfg.http_listen, svc, &st.http, &d) != 0) {
        sd_log(SD_LOG_ERROR, "%s", d.msg);
        goto fail_rpc;
    }
    if (svc_start_workers(svc, &d) != 0)
        sd_log(SD_LOG_WARN, "%s", d.msg);
    st.sync = NULL;
    if ((cfg.fleet_role == CONF_FLEET_PROFILER ||
         cfg.fleet_role == CONF_FLEET_PLANNER) &&
        fleet_sync_start(svc, (int)cfg.fleet_role, cfg.fleet_trainer,
                         cfg.admin_token, cfg.fleet_sync_ms, &st.sync, &d) != 0)
        sd_log(SD_LOG_ERROR, "fleet: %s; this node works alone", d.msg);
    st.svc = svc;
    st.cfg = &cfg;
    st.argc = argc;
    st.argv = argv;
    watch_signals(loop, &st);
    svc_describe(svc, what, sizeof(what));
    sd_log(SD_LOG_INFO,
           "shardd %s: serving on %s; %u planner workers; %s; data in %s",
           SHARDD_VERSION, rpc_server_address(st.rpc), workers, what,
           cfg.data_dir);
    if (st.http != NULL)
        sd_log(SD_LOG_INFO, "http: metrics and status page on http://%s/",
               http_server_address(st.http));
    notify("READY=1");

    uv_run(loop, UV_RUN_DEFAULT); /* returns once every handle is closed */

    http_server_stop(st.http); /* /readyz said NOT_SERVING while draining */
    fleet_sync_stop(st.sync);
    rpc_server_free(st.rpc);
    rv = uv_loop_close(loop);
    if (rv != 0)
        sd_log(SD_LOG_WARN, "closing the loop: %s", uv_strerror(rv));
    svc_close(svc);
    unlink(pidpath);
    close(pidfd);
    free(pidpath);
    conf_free(&cfg);
    sd_log(SD_LOG_INFO, "stopped");
    return 0;

fail_rpc:
    /* Nothing was accepted yet: the server stops at once. */
    rpc_server_set_grace(st.rpc, 0);
    rpc_server_shutdown(st.rpc);
    uv_run(loop, UV_RUN_DEFAULT);
    rpc_server_free(st.rpc);
    uv_loop_close(loop);
fail_svc:
    svc_close(svc);
fail_prepare:
    if (pidfd >= 0) {
        unlink(pidpath);
        close(pidfd);
    }
    free(pidpath);
    conf_free(&cfg);
    return 1;
}
