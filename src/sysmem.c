/* sysmem.c — see sysmem.h. Memory cgroups: v2 (memory.max along the path, the smallest wins) and
 * v1 (memory.stat's hierarchical_memory_limit), both looked up under /sys/fs/cgroup from the
 * path in /proc/self/cgroup, falling back to the mount's root when the cgroup namespace hides
 * the path (containers). Open files: RLIMIT_NOFILE, and the count in /proc/self/fd. */
#include "src/sysmem.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "src/check.h"
#include "src/log.h"
#include "src/path.h"

void mnt_format_bytes(double v, char *out, size_t n) {
  static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int i = 0;
  while (v >= 1024 && i < 5) v /= 1024, i++;
  snprintf(out, n, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

static int read_u64(const char *path, const char *key, uint64_t *v) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[256];
  int ok = -1;
  size_t kl = key ? strlen(key) : 0;
  while (ok && fgets(line, sizeof line, f)) {
    const char *p = line;
    if (key) {
      if (strncmp(line, key, kl) || (line[kl] != ' ' && line[kl] != ':')) continue;
      p = line + kl + 1;
    }
    char *end;
    unsigned long long x = strtoull(p, &end, 10);
    if (end != p) *v = x, ok = 0;
    break;
  }
  fclose(f);
  return ok;
}

/* the cgroup path of this process for controller ctl ("" for v2's unified line) */
static int cgroup_path(int v2, char *out, size_t n) {
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (!f) return -1;
  char line[MNT_PATH_MAX + 64]; /* "ID:CONTROLLERS:PATH" */
  int ok = -1;
  while (ok && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
    if (!b) continue;
    *b = '\0';
    int match = v2 ? line[0] == '0' && a[1] == '\0' : strstr(a + 1, "memory") != NULL;
    if (match && snprintf(out, n, "%s", b + 1) < (int)n) ok = 0;
  }
  fclose(f);
  return ok;
}

static int cgroup_limit(uint64_t *limit) {
  char cg[MNT_PATH_MAX], p[MNT_PATH_MAX]; /* a path too long to open is not read (-1) */
  uint64_t best = UINT64_MAX, v;
  if (cgroup_path(0, cg, sizeof cg) == 0) { /* v1 */
    int pn = snprintf(p, sizeof p, "/sys/fs/cgroup/memory%s/memory.stat", cg);
    if ((pn < (int)sizeof p && read_u64(p, "hierarchical_memory_limit", &v) == 0) ||
        read_u64("/sys/fs/cgroup/memory/memory.stat", "hierarchical_memory_limit", &v) == 0)
      best = v;
  } else if (cgroup_path(1, cg, sizeof cg) == 0) { /* v2: every level of the path */
    for (;;) {
      char val[64];
      FILE *f = snprintf(p, sizeof p, "/sys/fs/cgroup%s/memory.max", cg) < (int)sizeof p ? fopen(p, "r") : NULL;
      if (f) {
        if (fgets(val, sizeof val, f) && strncmp(val, "max", 3) != 0) {
          v = strtoull(val, NULL, 10);
          if (v < best) best = v;
        }
        fclose(f);
      }
      char *s = strrchr(cg, '/');
      if (!s || s == cg) break;
      *s = '\0';
    }
  }
  if (best >= (1ull << 60)) return -1; /* "unlimited" is a huge number in v1 */
  *limit = best;
  return 0;
}

void mnt_mem_limit(int sharing, size_t *bytes, char *why, size_t why_n) {
  if (sharing < 1) sharing = 1;
  double best = 1e30;
  char b[64];
  snprintf(why, why_n, "no limit found");
  uint64_t v;
#define CONSIDER(val, ...)                     \
  do {                                         \
    double x_ = (double)(val);                 \
    if (x_ < best) {                           \
      best = x_;                               \
      snprintf(why, why_n, __VA_ARGS__);       \
    }                                          \
  } while (0)
  if (read_u64("/proc/meminfo", "MemAvailable", &v) == 0) {
    mnt_format_bytes((double)v * 1024, b, sizeof b);
    CONSIDER((double)v * 1024 / sharing, "MemAvailable %s shared by %d rank%s on this node", b, sharing,
             sharing > 1 ? "s" : "");
  }
  if (cgroup_limit(&v) == 0) {
    mnt_format_bytes((double)v, b, sizeof b);
    CONSIDER((double)v / sharing, "the memory cgroup's limit %s shared by %d rank%s", b, sharing, sharing > 1 ? "s" : "");
  }
  const char *e = getenv("SLURM_MEM_PER_NODE"), *c = getenv("SLURM_MEM_PER_CPU");
  if (e && atof(e) > 0) {
    mnt_format_bytes(atof(e) * 1048576.0, b, sizeof b);
    CONSIDER(atof(e) * 1048576.0 / sharing, "SLURM_MEM_PER_NODE %s shared by %d rank%s", b, sharing,
             sharing > 1 ? "s" : "");
  } else if (c && atof(c) > 0) {
    const char *t = getenv("SLURM_CPUS_PER_TASK");
    int cpus = t && atoi(t) > 0 ? atoi(t) : 1;
    mnt_format_bytes(atof(c) * 1048576.0 * cpus, b, sizeof b);
    CONSIDER(atof(c) * 1048576.0 * cpus, "SLURM_MEM_PER_CPU x %d CPUs per task = %s", cpus, b);
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    mnt_format_bytes((double)rl.rlim_cur, b, sizeof b);
    CONSIDER((double)rl.rlim_cur, "the address-space limit (ulimit -v) %s", b);
  }
#undef CONSIDER
  *bytes = best >= 1e19 ? SIZE_MAX : (size_t)best;
}

int mnt_mem_check(size_t need, const char *what, int sharing) {
  size_t limit;
  char why[200], nb[32], lb[32];
  mnt_mem_limit(sharing, &limit, why, sizeof why);
  if (need <= limit) return MNT_OK;
  mnt_format_bytes((double)need, nb, sizeof nb);
  mnt_format_bytes((double)limit, lb, sizeof lb);
  MNT_ERR("%s needs about %s of memory per rank, but this rank may use %s (%s): use a smaller batch per "
          "rank or image size, fewer ranks per node, or ask Slurm for more memory (--mem)",
          what, nb, lb, why);
  return MNT_EARG;
}

size_t mnt_rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long long size = 0, resident = 0;
  int n = f ? fscanf(f, "%llu %llu", &size, &resident) : 0;
  if (f) fclose(f);
  long page = sysconf(_SC_PAGESIZE);
  return n == 2 && page > 0 ? (size_t)resident * (size_t)page : 0;
}

/* ---- file descriptors ------------------------------------------------------------------------ */
void mnt_fd_raise_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return;
  rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > MNT_FD_RAISE_MAX ? MNT_FD_RAISE_MAX : rl.rlim_max;
  if (rl.rlim_cur >= want) return;
  rl.rlim_cur = want;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) MNT_DBG("raising the soft limit on open files failed: %s", strerror(errno));
}

int mnt_fd_exhausted(int err) { return err == EMFILE || err == ENFILE; }

int mnt_fd_probe(const char *path) {
  int fd = open(path ? path : "/", O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  int err = fd < 0 ? errno : 0;
  if (fd >= 0) close(fd);
  return mnt_fd_exhausted(err) ? err : 0;
}

/* descriptors open in this process now (-1: unknown); a full table counts as full */
static long fds_open(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) {
    struct rlimit rl;
    return errno == EMFILE && getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (long)rl.rlim_cur : -1;
  }
  long n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    n += e->d_name[0] != '.';
  closedir(d);
  return n - 1; /* the directory's own */
}

/* "this process may open 20 files (ulimit -n 20, ...)<mid>: raise ... (ulimit -n W ...)", W >= want */
static void limit_text(char *out, size_t n, unsigned long long want, const char *mid) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
    snprintf(out, n, "the limit on open files is unknown%s: raise it (ulimit -n %llu)", mid, want);
    return;
  }
  unsigned long long soft = rl.rlim_cur, hard = rl.rlim_max, w = want > 4096 ? want : 4096;
  if (rl.rlim_max != RLIM_INFINITY && soft < hard) {
    if (w > hard && hard >= want) w = hard;
    snprintf(out, n, "this process may open %llu files (ulimit -n %llu; hard limit %llu)%s: raise it (ulimit -n %llu)",
             soft, soft, hard, mid, w);
  } else {
    snprintf(out, n, "this process may open %llu files (ulimit -n %llu, also the hard limit)%s: raise both "
             "(ulimit -n %llu; a higher hard limit needs root: limits.conf)", soft, soft, mid, w);
  }
}

void mnt_fd_advice(int err, char *out, size_t n) {
  if (err == ENFILE) {
    snprintf(out, n, "the system's table of open files is full (ENFILE; /proc/sys/fs/file-nr): other programs hold "
             "them, or raise fs.file-max");
    return;
  }
  long open_now = fds_open();
  limit_text(out, n, open_now > 0 ? (unsigned long long)open_now * 2 : 4096, " and all are in use");
}

int mnt_fd_syserr_at(const char *file, int line, const char *call, const char *opening) {
  int err = errno;
  if (!mnt_fd_exhausted(err)) return mnt_syserr_at(file, line, "%s failed", call);
  char why[300];
  mnt_fd_advice(err, why, sizeof why);
  mnt_log_at(MNT_LOG_ERROR, file, line, "out of file descriptors opening %s: %s", opening, why);
  errno = err;
  return MNT_ESYS;
}

int mnt_fd_check(int need, const char *what, const char *hint) {
  struct rlimit rl;
  long open_now = fds_open();
  if (need <= 0 || open_now < 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
      (unsigned long long)open_now + (unsigned long long)need <= (unsigned long long)rl.rlim_cur)
    return MNT_OK;
  char lim[300], mid[80];
  snprintf(mid, sizeof mid, ", %ld open already", open_now);
  limit_text(lim, sizeof lim, (unsigned long long)open_now + (unsigned long long)need, mid);
  MNT_ERR("out of file descriptors %s: %d more are needed, but %s%s%s", what, need, lim, hint ? ", or " : "",
          hint ? hint : "");
  return MNT_EARG;
}

int mnt_fd_short(const char *path, const char *hint) {
  int err = mnt_fd_probe(path);
  if (!err) return 0;
  char why[300];
  mnt_fd_advice(err, why, sizeof why);
  MNT_ERR("out of file descriptors opening %s: %s%s", path, why, hint ? hint : "");
  return 1;
}
