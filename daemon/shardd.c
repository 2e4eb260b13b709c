/*
 * shardd: the planning daemon.  Serves shardd.v1.Planner (Plan, Estimate)
 * over gRPC with the embedded cost model, on a unix socket or TCP, until
 * SIGTERM or SIGINT; then it stops accepting, lets the calls in flight
 * finish (up to a grace period) and exits 0.
 *
 *   shardd [--listen ADDR] [--pidfile FILE] [--threads N] [--help]
 *
 * Exit status: 0 after a graceful stop, 1 when it cannot start (bad model,
 * address in use, a live pidfile), 2 for bad usage; always with one message
 * on stderr.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include <uv.h>

#include "daemon.h"

#define EXIT_USAGE        2
#define DEFAULT_LISTEN    "unix:/tmp/shardd.sock"
#define MAX_MESSAGE_BYTES (64u << 20)
#define GRACE_MS          10000
#define THREADS_MAX       1024

static const char usage_text[] =
    "usage: shardd [--listen ADDR] [--pidfile FILE] [--threads N]\n"
    "\n"
    "Serves shardd.v1.Planner (Plan, Estimate) over gRPC with the embedded\n"
    "cost model until SIGTERM or SIGINT, then drains and exits 0.\n"
    "\n"
    "  --listen ADDR   unix:/path or host:port (default " DEFAULT_LISTEN ")\n"
    "  --pidfile FILE  write the pid there (atomically), remove it on exit;\n"
    "                  refuse to start while a live process holds it\n"
    "  --threads N     worker threads that run the searches (the libuv\n"
    "                  threadpool; default 4)\n"
    "  --help          this text\n";

struct opts {
    const char *listen;
    const char *pidfile;
    long threads; /* 0: libuv's default */
};

static int parse_opts(int argc, char **argv, struct opts *o, bool *help)
{
    int i;

    o->listen = DEFAULT_LISTEN;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            *help = true;
            return 0;
        }
        if (strcmp(a, "--listen") != 0 && strcmp(a, "--pidfile") != 0 &&
            strcmp(a, "--threads") != 0) {
            fprintf(stderr, "shardd: unknown option \"%s\" (see --help)\n", a);
            return EXIT_USAGE;
        }
        if (i + 1 >= argc || argv[i + 1][0] == '\0') {
            fprintf(stderr, "shardd: %s needs a value\n", a);
            return EXIT_USAGE;
        }
        i++;
        if (strcmp(a, "--listen") == 0) {
            o->listen = argv[i];
        } else if (strcmp(a, "--pidfile") == 0) {
            o->pidfile = argv[i];
        } else {
            char *end;

            errno = 0;
            o->threads = strtol(argv[i], &end, 10);
            if (errno != 0 || *end != '\0' || o->threads < 1 ||
                o->threads > THREADS_MAX) {
                fprintf(stderr,
                        "shardd: --threads: \"%s\" is not an integer in "
                        "[1, %d]\n",
                        argv[i], THREADS_MAX);
                return EXIT_USAGE;
            }
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Pidfile                                                                 */

/* The pid written in path, or 0 when there is none or it is unreadable. */
static pid_t pidfile_read(const char *path)
{
    char buf[32];
    ssize_t n;
    long pid;
    int fd = open(path, O_RDONLY);

    if (fd < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    pid = strtol(buf, NULL, 10);
    return pid > 0 ? (pid_t)pid : 0;
}

static bool pid_alive(pid_t pid)
{
    return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

/*
 * Writes our pid to path atomically: into a private temporary file, then
 * link()ed to path, which fails if path exists.  An existing pidfile of a
 * live process is SD_EBUSY; one of a dead process is replaced.
 */
static int pidfile_create(const char *path, struct sd_diag *d)
{
    char tmp[4096], line[32];
    int fd, len, attempt, rv = 0;
    pid_t other;

    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path,
                         (long)getpid()) >= sizeof(tmp))
        return sd_diag_set(d, SD_EINVAL, "--pidfile: the path is too long");
    len = snprintf(line, sizeof(line), "%ld\n", (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return sd_diag_set(d, SD_EIO, "--pidfile: %s: %s", tmp,
                           strerror(errno));
    if (write(fd, line, (size_t)len) != len || fsync(fd) != 0)
        rv = sd_diag_set(d, SD_EIO, "--pidfile: %s: %s", tmp, strerror(errno));
    if (close(fd) != 0 && rv == 0)
        rv = sd_diag_set(d, SD_EIO, "--pidfile: %s: %s", tmp, strerror(errno));
    for (attempt = 0; rv == 0; attempt++) {
        if (link(tmp, path) == 0)
            break;
        if (errno != EEXIST || attempt > 0) {
            rv = sd_diag_set(d, SD_EIO, "--pidfile: %s: %s", path,
                             strerror(errno));
            break;
        }
        other = pidfile_read(path);
        if (pid_alive(other)) {
            rv = sd_diag_set(d, SD_EBUSY,
                             "--pidfile: %s: shardd is already running as "
                             "pid %ld",
                             path, (long)other);
            break;
        }
        /* Left by a process that died: take it over. */
        if (unlink(path) != 0 && errno != ENOENT)
            rv = sd_diag_set(d, SD_EIO, "--pidfile: %s: %s", path,
                             strerror(errno));
    }
    unlink(tmp);
    return rv;
}

/* Removes path if it still names this process. */
static void pidfile_remove(const char *path)
{
    if (path != NULL && pidfile_read(path) == getpid())
        unlink(path);
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
                           "--listen %s: the path is longer than %zu bytes",
                           listen, sizeof(sa.sun_path) - 1);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0)
        return 0; /* cannot probe; the bind will tell */
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
        rv = sd_diag_set(d, SD_EBUSY,
                         "--listen %s: another server is accepting there",
                         listen);
    close(fd);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* Signals and main                                                        */

struct daemon_state {
    struct rpc_server *rpc;
    uv_signal_t sigint, sigterm;
};

static void on_signal(uv_signal_t *h, int signum)
{
    struct daemon_state *st = h->data;

    fprintf(stderr,
            "shardd: %s: stopping (calls in flight get %d s; a second "
            "signal kills)\n",
            signum == SIGINT ? "SIGINT" : "SIGTERM", GRACE_MS / 1000);
    /* Closing the handles restores the default action: the next signal
     * ends the process at once. */
    uv_close((uv_handle_t *)&st->sigint, NULL);
    uv_close((uv_handle_t *)&st->sigterm, NULL);
    rpc_server_shutdown(st->rpc);
}

static const struct rpc_method planner_methods[] = {
    {"/shardd.v1.Planner/Plan", svc_plan},
    {"/shardd.v1.Planner/Estimate", svc_estimate},
};

int main(int argc, char **argv)
{
    struct daemon_state st;
    struct svc_config scfg;
    struct rpc_config rcfg;
    struct sd_diag d = {{0}};
    struct opts o = {0};
    struct svc svc;
    uv_loop_t *loop;
    bool help = false;
    char threads[24];
    int rv;

    rv = parse_opts(argc, argv, &o, &help);
    if (rv != 0)
        return rv;
    if (help) {
        fputs(usage_text, stdout);
        return 0;
    }
    /* libuv sizes its threadpool from the environment on first use. */
    if (o.threads > 0) {
        snprintf(threads, sizeof(threads), "%ld", o.threads);
        if (setenv("UV_THREADPOOL_SIZE", threads, 1) != 0) {
            fprintf(stderr, "shardd: cannot set UV_THREADPOOL_SIZE: %s\n",
                    strerror(errno));
            return 1;
        }
    }
    signal(SIGPIPE, SIG_IGN);

    svc_config_default(&scfg);
    if (svc_init(&svc, &scfg, &d) != 0) {
        fprintf(stderr, "shardd: %s\n", d.msg);
        return 1;
    }
    if (o.pidfile != NULL && pidfile_create(o.pidfile, &d) != 0) {
        fprintf(stderr, "shardd: %s\n", d.msg);
        return 1;
    }
    if (check_socket_free(o.listen, &d) != 0) {
        fprintf(stderr, "shardd: %s\n", d.msg);
        goto fail_pidfile;
    }

    loop = uv_default_loop();
    memset(&rcfg, 0, sizeof(rcfg));
    rcfg.listen = o.listen;
    rcfg.max_message_bytes = MAX_MESSAGE_BYTES;
    rcfg.grace_ms = GRACE_MS;
    rcfg.methods = planner_methods;
    rcfg.nmethods = sizeof(planner_methods) / sizeof(planner_methods[0]);
    rcfg.svc = &svc;
    if (rpc_server_start(loop, &rcfg, &st.rpc, &d) != 0) {
        fprintf(stderr, "shardd: %s\n", d.msg);
        goto fail_pidfile;
    }
    uv_signal_init(loop, &st.sigint);
    uv_signal_init(loop, &st.sigterm);
    st.sigint.data = st.sigterm.data = &st;
    uv_signal_start(&st.sigint, on_signal, SIGINT);
    uv_signal_start(&st.sigterm, on_signal, SIGTERM);
    fprintf(stderr, "shardd: serving shardd.v1.Planner on %s (model %s)\n",
            rpc_server_address(st.rpc), svc.net->profile);

    uv_run(loop, UV_RUN_DEFAULT); /* returns once every handle is closed */

    rpc_server_free(st.rpc);
    rv = uv_loop_close(loop);
    if (rv != 0)
        fprintf(stderr, "shardd: closing the loop: %s\n", uv_strerror(rv));
    pidfile_remove(o.pidfile);
    fprintf(stderr, "shardd: stopped\n");
    return 0;

fail_pidfile:
    pidfile_remove(o.pidfile);
    return 1;
}
