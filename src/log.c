/* log.c — breadcrumbs with rank, node and file:line, and the trail of check.h; see log.h. */
#include "src/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int g_rank = -1;
static char g_node[64];
static int g_level = MNT_LOG_INFO; /* main sets MNT_LOG_LEVEL's (env.c) before anything logs */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_last[1600];

/* This thread's way up from its newest error (check.h): where it was logged, then each
 * breadcrumb. Thread-local, so the loader's threads do not mix theirs into main's. */
enum { TRAIL_MAX = 24 };
typedef struct trail {
  const char *origin_file;
  int origin_line, n, dropped;
  struct {
    const char *file;
    int line;
  } at[TRAIL_MAX];
} trail;
static _Thread_local trail t_trail;

void mnt_log_set_identity(int rank, const char *node) {
  g_rank = rank;
  snprintf(g_node, sizeof g_node, "%s", node ? node : "");
}

void mnt_log_set_level(int level) { g_level = level; }

int mnt_log_level(void) { return g_level; }

/* "…/mntrain/src/comm/cpu/ring.c" -> "src/comm/cpu/ring.c": the path inside the project. */
static const char *short_path(const char *file) {
  static const char *roots[] = {"/src/", "/io/", "/kernels/", "/tests/", "/benchmarks/"};
  const char *best = NULL;
  for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++) {
    const char *p = strstr(file, roots[i]);
    if (p && (!best || p > best)) best = p;
  }
  if (best) return best + 1;
  const char *s = strrchr(file, '/');
  return s ? s + 1 : file;
}

/* "rank R on NODE: " once the world is known, else "" */
static void who_prefix(char *who, size_t n) {
  if (g_rank >= 0)
    snprintf(who, n, "rank %d on %s: ", g_rank, g_node);
  else
    who[0] = '\0';
}

void mnt_log_at(int level, const char *file, int line, const char *fmt, ...) {
  if (level == MNT_LOG_ERROR) { /* a new origin: the trail starts here */
    t_trail.origin_file = file;
    t_trail.origin_line = line;
    t_trail.n = t_trail.dropped = 0;
  }
  if (level > mnt_log_level()) return;
  char msg[1600]; /* paths of up to a few hundred characters, several of them in one message */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  static const char *tag[] = {"error", "warning", "info", "debug"};
  char who[96];
  who_prefix(who, sizeof who);
  pthread_mutex_lock(&g_lock);
  if (level == MNT_LOG_ERROR) snprintf(g_last, sizeof g_last, "%s", msg);
  if (level <= MNT_LOG_WARN || level == MNT_LOG_DEBUG)
    fprintf(stderr, "mntrain: %s%s: %s:%d: %s\n", who, tag[level], short_path(file), line, msg);
  else
    fprintf(stderr, "mntrain: %s%s\n", who, msg);
  pthread_mutex_unlock(&g_lock);
}

const char *mnt_last_error(void) { return g_last; }

void mnt_trail_add(int st, const char *file, int line) {
  if (t_trail.n < TRAIL_MAX) {
    t_trail.at[t_trail.n].file = file;
    t_trail.at[t_trail.n].line = line;
    t_trail.n++;
  } else {
    t_trail.dropped++;
  }
  if (mnt_log_level() >= MNT_LOG_DEBUG) mnt_log_at(MNT_LOG_DEBUG, file, line, "-> %s", mnt_status_str(st));
}

void mnt_trail_print(int st) {
  /* an error logged in this thread, or one passed up from another (a loader thread's); a usage
   * error that logged nothing has said all there is (and said it on the first rank only) */
  if (!t_trail.origin_file && (t_trail.n == 0 || st == MNT_EARG)) return;
  char path[1400];
  size_t len = 0;
  path[0] = '\0';
#define PUT(...)                                                                          \
  do {                                                                                    \
    if (len < sizeof path) len += (size_t)snprintf(path + len, sizeof path - len, __VA_ARGS__); \
  } while (0)
  if (t_trail.origin_file) PUT("%s:%d", short_path(t_trail.origin_file), t_trail.origin_line);
  for (int i = 0; i < t_trail.n; i++)
    PUT("%s%s:%d", len ? " -> " : "", short_path(t_trail.at[i].file), t_trail.at[i].line);
  if (t_trail.dropped) PUT(" (+%d more)", t_trail.dropped);
#undef PUT
  char who[96];
  who_prefix(who, sizeof who);
  pthread_mutex_lock(&g_lock);
  fprintf(stderr, "mntrain: %serror path: %s -> main (%s)\n", who, path, mnt_status_str(st));
  pthread_mutex_unlock(&g_lock);
}

int mnt_syserr_at(const char *file, int line, const char *fmt, ...) {
  int e = errno;
  char msg[1400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  mnt_log_at(MNT_LOG_ERROR, file, line, "%s: %s", msg, strerror(e));
  errno = e;
  return e == ENOMEM ? MNT_ENOMEM : MNT_ESYS;
}

double mnt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int mnt_exit_code(int st) {
  return st == MNT_OK         ? MNT_EXIT_OK
         : st == MNT_EARG     ? MNT_EXIT_USAGE
         : st == MNT_EPREEMPT ? MNT_EXIT_PREEMPTED
                              : MNT_EXIT_FAILURE;
}

const char *mnt_status_str(int st) {
  switch (st) {
    case MNT_OK: return "ok";
    case MNT_EARG: return "bad argument";
    case MNT_ESYS: return "system error";
    case MNT_EPMIX: return "PMIx error";
    case MNT_EPEER: return "peer failure";
    case MNT_ETIMEOUT: return "timeout";
    case MNT_EAUTH: return "authentication refused";
    case MNT_ENOMEM: return "out of memory";
    case MNT_EDATA: return "wrong data";
    case MNT_EPREEMPT: return "preempted (checkpoint written)";
    case MNT_EFENCED: return "left out by the other ranks";
    default: return "unknown error";
  }
}
