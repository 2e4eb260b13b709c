/* The logger and the clocks (include/shardd/log.h). */
#include "shardd/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOG_LINE_MAX 2048

static atomic_int log_level = SD_LOG_INFO;
static const char *log_ident = "shardd";
static bool log_journal; /* set once by sd_log_init(), before threads */

/*
 * $JOURNAL_STREAM is "DEVICE:INODE" of the stream systemd connected to
 * stdout/stderr; it counts only if stderr is still that stream (a child
 * redirected elsewhere inherits the variable).
 */
static bool stderr_is_journal(void)
{
    const char *v = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;

    if (v == NULL || sscanf(v, "%llu:%llu", &dev, &ino) != 2)
        return false;
    if (fstat(STDERR_FILENO, &st) != 0)
        return false;
    return (unsigned long long)st.st_dev == dev &&
           (unsigned long long)st.st_ino == ino;
}

void sd_log_init(const char *ident)
{
    log_ident = ident;
    log_journal = stderr_is_journal();
}

void sd_log_set_level(enum sd_log_level level)
{
    atomic_store(&log_level, (int)level);
}

bool sd_log_enabled(enum sd_log_level level)
{
    return (int)level <= atomic_load(&log_level);
}

void sd_log(enum sd_log_level level, const char *fmt, ...)
{
    /* syslog priorities: err, warning, info, debug. */
    static const char *const journal[] = {"<3>", "<4>", "<6>", "<7>"};
    static const char *const plain[] = {"error: ", "warning: ", "", ""};
    char line[LOG_LINE_MAX];
    size_t len, cap = sizeof(line) - 1; /* room for the newline */
    va_list ap;
    int n;

    if (!sd_log_enabled(level))
        return;
    if (log_journal)
        n = snprintf(line, cap, "%s", journal[level]);
    else
        n = snprintf(line, cap, "%s: %s", log_ident, plain[level]);
    len = n > 0 ? (size_t)n : 0;
    va_start(ap, fmt);
    n = vsnprintf(line + len, cap - len, fmt, ap);
    va_end(ap);
    len = n < 0 ? len : len + (size_t)n >= cap ? cap - 1 : len + (size_t)n;
    line[len++] = '\n';
    /* One write per line: lines of threads do not interleave. */
    if (write(STDERR_FILENO, line, len) < 0)
        return; /* nowhere left to say so */
}

int64_t sd_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double sd_now_ms_f(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int64_t sd_wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct timespec sd_after_ms(clockid_t clock, int64_t ms)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}
