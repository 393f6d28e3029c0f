/* tmpfile.c — see tmpfile.h. */
#include "src/tmpfile.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/check.h"
#include "src/log.h"
#include "src/path.h"

/* the process's umask, read without changing it (umask(2) sets it: a race with other threads) */
static mode_t g_umask = 022;
static void read_umask(void) {
  FILE *f = fopen("/proc/self/status", "re");
  char line[256];
  unsigned u;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "Umask: %o", &u) == 1) g_umask = (mode_t)u;
  if (f) fclose(f);
}

int mnt_tmp_create(const char *path, char *tmp, size_t n) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, read_umask);
  const char *slash = strrchr(path, '/');
  int len = slash ? snprintf(tmp, n, "%.*s/.%s.XXXXXX", (int)(slash - path), path, slash + 1)
                  : snprintf(tmp, n, ".%s.XXXXXX", path);
  if (len < 0 || (size_t)len >= n) {
    MNT_ERR("%s: path too long", path);
    return -1;
  }
  int fd = mkostemp(tmp, O_CLOEXEC); /* O_CREAT|O_EXCL: never an existing file or a link */
  if (fd < 0) {
    MNT_SYSERR("%s: cannot create a file beside it", path);
    return -1;
  }
  if (fchmod(fd, 0644 & ~g_umask) != 0) {
    MNT_SYSERR("%s: cannot set its mode", tmp);
    close(fd);
    unlink(tmp);
    return -1;
  }
  return fd;
}

int mnt_tmp_commit(const char *tmp, const char *path) {
  if (rename(tmp, path) != 0) {
    int st = MNT_SYSERR("rename %s -> %s", tmp, path);
    unlink(tmp);
    return st;
  }
  return MNT_OK;
}

FILE *mnt_open_log(const char *path, int append) {
  int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (append ? O_APPEND : O_TRUNC);
  int fd = open(path, flags, 0644);
  if (fd < 0) return NULL;
  FILE *f = fdopen(fd, append ? "a" : "w");
  if (!f) {
    int e = errno;
    close(fd);
    errno = e;
  }
  return f;
}

FILE *mnt_tmp_fopen(const char *path, char *tmp, size_t n) {
  int fd = mnt_tmp_create(path, tmp, n);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (fd >= 0 && !f) {
    MNT_SYSERR("%s: cannot open", tmp);
    close(fd);
    unlink(tmp);
  }
  return f;
}

int mnt_tmp_fcommit(FILE *f, const char *tmp, const char *path) {
  errno = EIO; /* ferror's: a write failed earlier, errno since overwritten */
  int bad = ferror(f) || fflush(f) != 0 || fsync(fileno(f)) != 0; /* on disk before the rename */
  if (fclose(f) != 0) bad = 1;
  if (bad) {
    int st = MNT_SYSERR("%s: cannot write", tmp);
    unlink(tmp);
    return st;
  }
  return mnt_tmp_commit(tmp, path);
}
