/* safefs.c — see safefs.h. */
#include "src/safefs.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/check.h"
#include "src/log.h"
#include "src/path.h"

/* "probe (uid 1001)" */
static void owner_name(uid_t uid, char *out, size_t n) {
  struct passwd pw, *res = NULL;
  char buf[1024];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res)
    snprintf(out, n, "%s (uid %u)", res->pw_name, (unsigned)uid);
  else
    snprintf(out, n, "uid %u", (unsigned)uid);
}

static int mkdir_parents(const char *path) {
  char p[MNT_PATH_MAX];
  if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) {
    errno = ENAMETOOLONG;
    return -1;
  }
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = 0;
    if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
    *s = '/';
  }
  return mkdir(p, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* the rules below, logged (quiet = 0) or not */
static int dir_secure(const char *path, const char *what, int create, int kind, int quiet);

int mnt_dir_secure(const char *path, const char *what, int create, int kind) {
  return dir_secure(path, what, create, kind, 0);
}

int mnt_dir_usable(const char *path, int kind) { return dir_secure(path, "", 0, kind, 1) == MNT_OK; }

/* MNT_ERR / MNT_SYSERR unless quiet */
#define SAY(...)                      \
  do {                                \
    if (!quiet) MNT_ERR(__VA_ARGS__); \
  } while (0)
#define SAYSYS(...)                      \
  do {                                   \
    if (!quiet) MNT_SYSERR(__VA_ARGS__); \
  } while (0)

static int dir_secure(const char *path, const char *what, int create, int kind, int quiet) {
  struct stat lb, sb;
  uid_t me = geteuid();
  char who[300], mine[300];
  if (lstat(path, &lb) != 0) {
    if (errno != ENOENT || !create) {
      SAYSYS("%s %s", what, path);
      return MNT_EARG;
    }
    if (mkdir_parents(path) != 0) {
      SAYSYS("%s %s: cannot create the directory", what, path);
      return MNT_EARG;
    }
    if (lstat(path, &lb) != 0) { /* made by someone else meanwhile and gone again */
      SAYSYS("%s %s", what, path);
      return MNT_EARG;
    }
  }
  owner_name(me, mine, sizeof mine);
  if (S_ISLNK(lb.st_mode) && lb.st_uid != me && lb.st_uid != 0) {
    owner_name(lb.st_uid, who, sizeof who);
    SAY("%s %s is a symbolic link owned by %s, not by %s or root: refused (another user's link chooses where "
            "the files go); name the directory itself", what, path, who, mine);
    return MNT_EARG;
  }
  if (stat(path, &sb) != 0) {
    SAYSYS("%s %s", what, path);
    return MNT_EARG;
  }
  if (!S_ISDIR(sb.st_mode)) {
    SAY("%s %s is not a directory (%s): name a directory", what, path,
            S_ISREG(sb.st_mode) ? "a regular file" : "not a directory");
    return MNT_EARG;
  }
  int owner_ok = sb.st_uid == me || (kind == MNT_DIR_FILES && sb.st_uid == 0);
  int others_write = (sb.st_mode & S_IWOTH) && !(sb.st_mode & S_ISVTX);
  if (!owner_ok || others_write) {
    owner_name(sb.st_uid, who, sizeof who);
    SAY("%s %s is owned by %s with mode %04o: refused, %s (another user could replace its files or plant links "
            "in it); %s", what, path, who, (unsigned)(sb.st_mode & 07777),
            !owner_ok ? (kind == MNT_DIR_FILES ? "it must be owned by you or root" : "a run's directory must be your own")
                      : "others may write to it and it has no sticky bit",
            !owner_ok ? "choose a directory of your own" : "remove their write permission (chmod o-w) or choose another");
    return MNT_EARG;
  }
  return MNT_OK;
}
