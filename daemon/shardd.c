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
#include <unistd.h>

#include <uv.h>

#include "config.h"
#include "daemon.h"

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

/* ---------------------------------------------------------------------- */
/* systemd notification (Type=notify), without libsystemd                  */

/* Sends `state` ("READY=1", ...) to $NOTIFY_SOCKET when set; best effort. */
static void notify(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sa;
    size_t n;
    int fd;

    if (path == NULL || (path[0] != '/' && path[0] != '@'))
        return;
    n = strlen(path);
    if (n >= sizeof(sa.sun_path))
        return;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, n);
    if (path[0] == '@')
        sa.sun_path[0] = '\0'; /* an abstract socket */
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa,
           (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n));
    close(fd);
}

/* ---------------------------------------------------------------------- */
/* Signals and main                                                        */

struct daemon_state {
    struct rpc_server *rpc;
    struct svc *svc;
    struct sd_config *cfg;
    int argc;
    char **argv;
    uv_signal_t sigint, sigterm, sighup;
};

static void svc_config_from(const struct sd_config *c, struct svc_config *o)
{
    svc_config_default(o);
    o->max_tables = c->max_tables;
    o->default_batch = c->default_batch;
    o->default_budget_ms = c->default_time_budget_ms;
    o->cache_entries = c->plan_cache_entries;
    snprintf(o->admin_token, sizeof(o->admin_token), "%s", c->admin_token);
    o->profiler = c->profiler;
    o->profiler_idle_ms = c->profiler_idle_ms;
    o->profiler_max_samples = c->profiler_max_samples;
    o->profiler_batch = c->profiler_batch;
    o->retrain_every_samples = c->retrain_every_samples;
    o->retrain_every_hours = c->retrain_every_hours;
    o->retrain_window_samples = c->retrain_window_samples;
    o->backend = conf_backend_name(c->backend);
    o->data_dir = c->data_dir;
}

static void set_log_level(const struct sd_config *c)
{
    /* The enums are numbered alike (config.h, daemon.h). */
    atomic_store(&svc_log_level, (int)c->log_level);
}

static void on_stop_signal(uv_signal_t *h, int signum)
{
    struct daemon_state *st = h->data;

    fprintf(stderr,
            "shardd: %s: stopping (calls in flight get %u s; a second "
            "signal kills)\n",
            signum == SIGINT ? "SIGINT" : "SIGTERM", st->cfg->grace_s);
    notify("STOPPING=1");
    atomic_store(&st->svc->draining, true);
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
    struct svc_config scfg;
    struct sd_diag d;
    char keys[512];

    (void)signum;
    notify("RELOADING=1");
    if (conf_reload(st->cfg, st->argc, st->argv, environ, &next, &ch, &d) !=
        0) {
        fprintf(stderr, "shardd: SIGHUP: configuration not reloaded: %s\n",
                d.msg);
        notify("READY=1");
        return;
    }
    conf_free(st->cfg);
    *st->cfg = next;
    svc_config_from(st->cfg, &scfg);
    svc_reconfigure(st->svc, &scfg);
    rpc_server_set_grace(st->rpc, (uint64_t)st->cfg->grace_s * 1000);
    set_log_level(st->cfg);
    conf_keys_format(ch.applied, keys, sizeof(keys));
    fprintf(stderr, "shardd: SIGHUP: configuration reloaded; changed: %s\n",
            keys[0] ? keys : "nothing");
    if (ch.restart != 0) {
        conf_keys_format(ch.restart, keys, sizeof(keys));
        fprintf(stderr, "shardd: SIGHUP: %s changed; restart to apply\n", keys);
    }
    notify("READY=1");
}

static const struct rpc_method methods[] = {
    /* path, admin, draining_ok, unary, stream, bidi */
    {"/shardd.v1.Planner/Plan", false, false, svc_plan, NULL, NULL},
    {"/shardd.v1.Planner/Estimate", false, false, svc_estimate, NULL, NULL},
    {"/grpc.health.v1.Health/Check", false, true, svc_health, NULL, NULL},
    {"/grpc.health.v1.Health/Watch", false, true, NULL, svc_health_watch, NULL},
    {"/shardd.v1.Admin/GetStatus", true, false, admin_status, NULL, NULL},
    {"/shardd.v1.Admin/ListModels", true, false, admin_list_models, NULL, NULL},
    {"/shardd.v1.Admin/ActivateModel", true, false, admin_activate, NULL, NULL},
    {"/shardd.v1.Admin/Retrain", true, false, admin_retrain, NULL, NULL},
    {"/shardd.v1.Admin/GetJob", true, false, admin_get_job, NULL, NULL},
    {"/shardd.v1.Admin/WatchJob", true, false, NULL, admin_watch_job, NULL},
    {"/shardd.v1.Admin/SetProfiler", true, false, admin_set_profiler, NULL,
     NULL},
    {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", false,
     false, NULL, NULL, svc_reflect},
    {"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", false, false,
     NULL, NULL, svc_reflect},
};

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

int main(int argc, char **argv)
{
    struct daemon_state st;
    struct sd_config cfg;
    struct svc_config scfg;
    struct rpc_config rcfg;
    struct sd_diag d = {{0}};
    struct svc svc;
    struct dmodel *m;
    uv_loop_t *loop;
    char threads[24], admin[sizeof(((struct sockaddr_un *)0)->sun_path) + 8];
    char *pidpath = NULL;
    bool help = false;
    size_t i;
    int pidfd = -1, rv;

    if (conf_resolve(argc, argv, environ, &cfg, &help, &d) != 0) {
        fprintf(stderr, "shardd: %s\n", d.msg);
        return EXIT_USAGE;
    }
    if (help) {
        fputs(conf_usage(), stdout);
        return 0;
    }
    if (cfg.print_config) {
        conf_print(stdout, &cfg);
        conf_free(&cfg);
        return 0;
    }
    set_log_level(&cfg);
    /* libuv sizes its threadpool from the environment on first use. */
    snprintf(threads, sizeof(threads), "%u", cfg.threads);
    if (setenv("UV_THREADPOOL_SIZE", threads, 1) != 0) {
        fprintf(stderr, "shardd: cannot set UV_THREADPOOL_SIZE: %s\n",
                strerror(errno));
        goto fail_config;
    }
    signal(SIGPIPE, SIG_IGN);

    memset(&rcfg, 0, sizeof(rcfg));
    if (listen_addresses(&cfg, &rcfg, admin, sizeof(admin), &d) != 0 ||
        make_data_dir(cfg.data_dir, &d) != 0) {
        fprintf(stderr, "shardd: %s\n", d.msg);
        goto fail_config;
    }
    pidpath = conf_data_path(&cfg, CONF_PID_FILE);
    if (pidpath == NULL || pidfile_lock(pidpath, &pidfd, &d) != 0) {
        fprintf(stderr, "shardd: %s\n", pidpath ? d.msg : "out of memory");
        goto fail_config;
    }
    for (i = 0; i < rcfg.nlisten; i++)
        if (check_socket_free(rcfg.listen[i], &d) != 0) {
            fprintf(stderr, "shardd: %s\n", d.msg);
            goto fail_pidfile;
        }

    svc_config_from(&cfg, &scfg);
    if (svc_init(&svc, &scfg, &d) != 0) {
        fprintf(stderr, "shardd: %s\n", d.msg);
        goto fail_pidfile;
    }

    loop = uv_default_loop();
    rcfg.max_message_bytes = (size_t)cfg.max_message_mb << 20;
    rcfg.grace_ms = (uint64_t)cfg.grace_s * 1000;
    rcfg.max_queued = MAX_QUEUED;
    rcfg.max_queued_bytes = rcfg.max_message_bytes > MAX_QUEUED_BYTES
                                ? rcfg.max_message_bytes
                                : MAX_QUEUED_BYTES;
    rcfg.lame_duck_ms = LAME_DUCK_MS;
    rcfg.methods = methods;
    rcfg.nmethods = sizeof(methods) / sizeof(methods[0]);
    rcfg.svc = &svc;
    if (rpc_server_start(loop, &rcfg, &st.rpc, &d) != 0) {
        fprintf(stderr, "shardd: %s\n", d.msg);
        goto fail_svc;
    }
    if (svc_start_workers(&svc, &d) != 0)
        fprintf(stderr, "shardd: warning: %s\n", d.msg);
    st.svc = &svc;
    st.cfg = &cfg;
    st.argc = argc;
    st.argv = argv;
    uv_signal_init(loop, &st.sigint);
    uv_signal_init(loop, &st.sigterm);
    uv_signal_init(loop, &st.sighup);
    st.sigint.data = st.sigterm.data = st.sighup.data = &st;
    uv_signal_start(&st.sigint, on_stop_signal, SIGINT);
    uv_signal_start(&st.sigterm, on_stop_signal, SIGTERM);
    uv_signal_start(&st.sighup, on_sighup, SIGHUP);
    if (models_acquire(&svc, NULL, &m, &d) != 0)
        m = NULL;
    fprintf(stderr,
            "shardd %s: serving on %s; model %s answers for %s; profiler "
            "%s (profile %s); data in %s\n",
            SHARDD_VERSION, rpc_server_address(st.rpc),
            m != NULL ? m->version : "none", svc.default_profile,
            profw_state(&svc) == SVC_PROFILER_DISABLED ? "off" : "on",
            svc.profile[0] ? svc.profile : "none", cfg.data_dir);
    dmodel_release(m);
    notify("READY=1");

    uv_run(loop, UV_RUN_DEFAULT); /* returns once every handle is closed */

    rpc_server_free(st.rpc);
    rv = uv_loop_close(loop);
    if (rv != 0)
        fprintf(stderr, "shardd: closing the loop: %s\n", uv_strerror(rv));
    svc_free(&svc);
    unlink(pidpath);
    close(pidfd);
    free(pidpath);
    conf_free(&cfg);
    fprintf(stderr, "shardd: stopped\n");
    return 0;

fail_svc:
    svc_free(&svc);
fail_pidfile:
    unlink(pidpath);
    close(pidfd);
fail_config:
    free(pidpath);
    conf_free(&cfg);
    return 1;
}
