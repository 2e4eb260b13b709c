/*
 * One logger and the clocks, shared by every module that logs (the daemon,
 * its workers, the transport and main).  The planning library never logs:
 * it returns errors with a struct sd_diag.
 *
 * A line is one event: "shardd: warning: TEXT" on a terminal or in a file;
 * "<4>TEXT" when stderr is the systemd journal (journald reads the
 * priority from the prefix and adds the program's name itself).  Each line
 * is written with a single write(2), so lines of different threads never
 * interleave.  Thread-safe; no allocation.
 */
#ifndef SHARDD_LOG_H
#define SHARDD_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* Numbered as the config key log_level (error, warn, info, debug). */
enum sd_log_level {
    SD_LOG_ERROR,
    SD_LOG_WARN,
    SD_LOG_INFO,
    SD_LOG_DEBUG,
};

/*
 * Names the program ("shardd"; borrowed, must outlive the logger) and
 * decides once whether stderr is the journal ($JOURNAL_STREAM names
 * stderr's device and inode).  Before it is called lines go out as
 * "shardd: ...".  Call from main() before any thread starts.
 */
void sd_log_init(const char *ident);

/* Lines above `level` are dropped (default SD_LOG_INFO). */
void sd_log_set_level(enum sd_log_level level);
bool sd_log_enabled(enum sd_log_level level);

/* Logs one line; fmt has no trailing newline (one is added). */
void sd_log(enum sd_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Monotonic milliseconds (for durations and deadlines). */
int64_t sd_now_ms(void);
/* Monotonic milliseconds with the fraction (for timing work). */
double sd_now_ms_f(void);
/* Wall-clock milliseconds since the Unix epoch (for records). */
int64_t sd_wall_ms(void);
/* The time ms (>= 0) milliseconds from now on `clock`: the deadline of a
 * pthread_cond_timedwait() on a condition of that clock. */
struct timespec sd_after_ms(clockid_t clock, int64_t ms);

#endif /* SHARDD_LOG_H */
