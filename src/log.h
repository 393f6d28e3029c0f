/* log.h — status codes and breadcrumbs.
 * defines: mnt_status, mnt_exit_code, mnt_log_set_identity, mnt_log_at, mnt_last_error, mnt_now,
 *          MNT_ERR, MNT_WARN, MNT_INFO, MNT_DBG (printf-style, carry rank, node, file:line),
 *          mnt_trail_add / mnt_trail_print / mnt_syserr_at (the breadcrumbs of check.h's macros).
 * How a failure is passed up (MNT_CHECK and its kind) is check.h.
 * Library code (src/, io/) logs where a failure happens and returns a status; only main exits. */
#ifndef MNT_LOG_H
#define MNT_LOG_H

#include <stdarg.h>

typedef enum {
  MNT_OK = 0,
  MNT_EARG = 2,      /* bad user input (flag, file, value): exit code 2 */
  MNT_ESYS = 3,      /* a system call failed */
  MNT_EPMIX = 4,     /* PMIx refused or failed */
  MNT_EPEER = 5,     /* a peer died, closed its connection, or misbehaved */
  MNT_ETIMEOUT = 6,  /* a deadline passed */
  MNT_EAUTH = 7,     /* a connection without the job secret */
  MNT_ENOMEM = 8,
  MNT_EDATA = 9,     /* wrong results or corrupt data */
  MNT_EPREEMPT = 10, /* stopped on request (SIGUSR1/SIGTERM, --stop-after) with a checkpoint written */
  MNT_EFENCED = 11   /* left out by the other ranks (--on-rank-loss shrink): exit touching nothing */
} mnt_status;

/* The exit-code contract of the mntrain command (README "Exit codes", `mntrain --help`):
 *   0 success; 1 failure at run time (I/O, corrupt data, a failed or timed-out collective, out
 *   of memory, wrong benchmark results); 2 usage: a bad flag, value, input path or environment
 *   variable, or a request that cannot fit (rerunning it unchanged fails the same way); 3 preempted:
 *   train stopped on SIGUSR1/SIGTERM or --stop-after after committing a checkpoint (rerunning the
 *   same command resumes it: what a requeued job does).
 * Library code returns mnt_status; main maps it here, and nowhere else. */
enum { MNT_EXIT_OK = 0, MNT_EXIT_FAILURE = 1, MNT_EXIT_USAGE = 2, MNT_EXIT_PREEMPTED = 3 };
int mnt_exit_code(int status);

enum { MNT_LOG_ERROR = 0, MNT_LOG_WARN = 1, MNT_LOG_INFO = 2, MNT_LOG_DEBUG = 3 };

/* Set once the world is known: every later line says "rank R on NODE". */
void mnt_log_set_identity(int rank, const char *node);
/* Verbosity: MNT_LOG_ERROR .. MNT_LOG_DEBUG (default info). main sets it from MNT_LOG_LEVEL
 * (env.h) first thing; the logger reads no environment itself (env.c logs: no cycle). */
void mnt_log_set_level(int level);
int mnt_log_level(void);
void mnt_log_at(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The text of the newest error logged by this process ("" when none). */
const char *mnt_last_error(void);
/* Monotonic seconds. */
double mnt_now(void);
const char *mnt_status_str(int st);

/* The way up (check.h's macros): mnt_trail_add records a breadcrumb (status st passed up at
 * file:line) in this thread's trail and logs it at debug level; an error logged starts the trail
 * anew. mnt_trail_print prints the trail ending in st at error level ("error path: ..."): nothing
 * when it is empty, or when st is a usage error (MNT_EARG) that logged nothing in this thread
 * (mnt_usage_error has said it, on the first rank only). mnt_syserr_at logs fmt + ": " +
 * strerror(errno), keeps errno, and returns MNT_ENOMEM for ENOMEM, else MNT_ESYS. */
void mnt_trail_add(int st, const char *file, int line);
void mnt_trail_print(int st);
int mnt_syserr_at(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define MNT_ERR(...) mnt_log_at(MNT_LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)
#define MNT_WARN(...) mnt_log_at(MNT_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define MNT_INFO(...) mnt_log_at(MNT_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define MNT_DBG(...) mnt_log_at(MNT_LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__)

#endif
