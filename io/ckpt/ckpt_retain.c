/* ckpt_retain.c — the step directories of a checkpoint root: naming and listing them, reading a
 * manifest, removing one (its manifest first, nothing followed), keeping the newest K after a
 * commit; see ckpt.h (`mntrain inspect`: ckpt_inspect.c). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/check.h"
#include "io/ckpt/ckpt.h"
#include "io/ckpt/ckpt_internal.h"
#include "src/log.h"
#include "src/path.h"

void mnt_ckpt_step_dir(char *out, size_t n, const char *root, int64_t step) {
  snprintf(out, n, "%s/step-%08lld", root, (long long)step);
}

static int step_of(const char *name, int64_t *step) {
  char *end;
  if (strncmp(name, "step-", 5) != 0) return 0;
  long long v = strtoll(name + 5, &end, 10);
  if (*end || end == name + 5 || v < 0) return 0;
  *step = v;
  return 1;
}

enum { MANIFEST_MAX = 64 << 20 };

json_t *mnt_ckpt_load_manifest(const char *dir, int *present, char *why, size_t n) {
  char p[MNT_PATH_MAX];
  if (mnt_path_join(p, dir, MNT_CKPT_MANIFEST) != MNT_OK) { /* logged; not readable: a damaged one */
    *present = 1;
    snprintf(why, n, "%s/%s: path too long", dir, MNT_CKPT_MANIFEST);
    return NULL;
  }
  struct stat sb;
  *present = lstat(p, &sb) == 0 || (errno != ENOENT && errno != ENOTDIR);
  if (!*present) {
    snprintf(why, n, "no %s (an unfinished write)", MNT_CKPT_MANIFEST);
    return NULL;
  }
  /* a link planted in its place is not followed; a manifest is a few hundred KB at most */
  int fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > MANIFEST_MAX) {
    snprintf(why, n, "%s: %s", p, fd < 0 && errno == ELOOP ? "a symbolic link (not followed)" : fd < 0 ? strerror(errno)
             : !S_ISREG(sb.st_mode) ? "not a regular file" : "larger than any manifest");
    if (fd >= 0) close(fd);
    return NULL;
  }
  /* read whole, then parsed: jansson's json_loadfd reads one byte per read(2), which made a
   * ResNet-50 manifest (~300 KB) cost about 40 ms, inside every commit's retention pass (once per
   * checkpoint kept) and every resume */
  char *text = malloc((size_t)sb.st_size + 1);
  size_t got = 0;
  while (text && got < (size_t)sb.st_size) {
    ssize_t r = read(fd, text + got, (size_t)sb.st_size - got);
    if (r > 0) got += (size_t)r;
    else if (r < 0 && errno == EINTR) continue;
    else break;
  }
  int rerr = errno;
  close(fd);
  if (!text || got < (size_t)sb.st_size) {
    snprintf(why, n, "%s: %s", p, !text ? "out of memory" : got ? "shorter than its size" : strerror(rerr));
    free(text);
    return NULL;
  }
  json_error_t e;
  json_t *m = json_loadb(text, got, JSON_REJECT_DUPLICATES, &e);
  free(text);
  if (!m) {
    snprintf(why, n, "%s does not parse: %s (line %d)", p, e.text, e.line);
    return NULL;
  }
  const char *fmt = json_string_value(json_object_get(m, "format"));
  if (!fmt || strcmp(fmt, MNT_CKPT_FORMAT) || !json_is_integer(json_object_get(m, "step")) ||
      !json_is_array(json_object_get(m, "datasets")) || !json_is_array(json_object_get(m, "shares"))) {
    snprintf(why, n, "%s is not an mntrain checkpoint manifest", p);
    json_decref(m);
    return NULL;
  }
  if (json_integer_value(json_object_get(m, "format_version")) > MNT_CKPT_VERSION) {
    snprintf(why, n, "%s: format version %lld is newer than this mntrain reads (%d)", p,
             (long long)json_integer_value(json_object_get(m, "format_version")), MNT_CKPT_VERSION);
    json_decref(m);
    return NULL;
  }
  return m;
}

static int cmp_stepdir_desc(const void *a, const void *b) {
  const mnt_ckpt_stepdir *x = a, *y = b;
  return x->step < y->step ? 1 : x->step > y->step ? -1 : 0;
}

int mnt_ckpt_list_steps(const char *root, mnt_ckpt_stepdir **out, int *n) {
  *out = NULL;
  *n = 0;
  DIR *d = opendir(root);
  if (!d) return errno == ENOENT ? MNT_OK : MNT_ESYS;
  int cap = 0;
  struct dirent *e;
  int64_t s;
  while ((e = readdir(d)))
    if (step_of(e->d_name, &s) && strlen(e->d_name) < sizeof(*out)->name) {
      if (*n == cap) {
        cap = cap ? 2 * cap : 16;
        mnt_ckpt_stepdir *p = realloc(*out, (size_t)cap * sizeof *p);
        if (!p) break;
        *out = p;
      }
      struct stat sb;
      (*out)[*n].step = s;
      (*out)[*n].link = fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(sb.st_mode);
      snprintf((*out)[*n].name, sizeof(*out)[*n].name, "%s", e->d_name);
      (*n)++;
    }
  closedir(d);
  if (*n) qsort(*out, (size_t)*n, sizeof **out, cmp_stepdir_desc);
  return MNT_OK;
}

/* Nothing is followed: a symbolic link under a checkpoint's name is removed itself (not what it
 * points to), and the files are unlinked relative to the directory opened with O_NOFOLLOW. */
int mnt_ckpt_remove_step_dir(const char *dir) {
  struct stat sb;
  if (lstat(dir, &sb) != 0) return errno == ENOENT ? MNT_OK : MNT_SYSERR("%s: cannot remove", dir);
  if (!S_ISDIR(sb.st_mode))
    return unlink(dir) != 0 && errno != ENOENT ? MNT_SYSERR("%s: cannot remove", dir) : MNT_OK;
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return errno == ENOENT ? MNT_OK : MNT_SYSERR("%s: cannot remove", dir);
  int st = MNT_OK;
  DIR *d = NULL;
  if (unlinkat(dfd, MNT_CKPT_MANIFEST, 0) != 0 && errno != ENOENT) { /* from here on it is no checkpoint */
    st = MNT_SYSERR("%s/%s: cannot remove", dir, MNT_CKPT_MANIFEST);
    goto out;
  }
  if (!(d = fdopendir(dfd))) {
    st = MNT_SYSERR("%s: cannot list", dir);
    goto out;
  }
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlinkat(dirfd(d), e->d_name, 0);
out:
  if (d) closedir(d);
  else close(dfd);
  if (st == MNT_OK && rmdir(dir) != 0 && errno != ENOENT) st = MNT_SYSERR("%s: cannot remove", dir);
  return st;
}

int mnt_ckpt_remove_all(const char *root) {
  mnt_ckpt_stepdir *sd;
  int n, st = mnt_ckpt_list_steps(root, &sd, &n);
  for (int i = 0; i < n && st == MNT_OK; i++) {
    char dir[MNT_PATH_MAX];
    MNT_CHECK_GOTO(mnt_path_join(dir, root, sd[i].name), st, out);
    MNT_CHECK_GOTO(mnt_ckpt_remove_step_dir(dir), st, out);
  }
out:
  free(sd);
  return st;
}

int64_t mnt_ckpt_newest(const char *root) {
  mnt_ckpt_stepdir *sd;
  int n;
  int64_t found = -1;
  if (mnt_ckpt_list_steps(root, &sd, &n) != MNT_OK) return -1;
  for (int i = 0; i < n && found < 0; i++) {
    char dir[MNT_PATH_MAX], why[600];
    int present;
    if (sd[i].link) continue; /* not followed: no checkpoint */
    if (mnt_path_join(dir, root, sd[i].name) != MNT_OK) break;
    json_t *m = mnt_ckpt_load_manifest(dir, &present, why, sizeof why);
    if (present) found = sd[i].step; /* a damaged one is a checkpoint of an earlier run too */
    json_decref(m);
  }
  free(sd);
  return found;
}

/* Newer directories than upto are left alone (they are being written again); directories without
 * a manifest, or with a damaged one, older than the newest valid one (which is never deleted) go. */
void mnt_ckpt_retain(const char *root, int keep, int64_t upto) {
  mnt_ckpt_stepdir *sd;
  int n, kept = 0;
  if (mnt_ckpt_list_steps(root, &sd, &n) != MNT_OK) return;
  for (int i = 0; i < n; i++) {
    if (sd[i].step > upto) continue;
    char dir[MNT_PATH_MAX], why[600];
    int present;
    if (mnt_path_join(dir, root, sd[i].name) != MNT_OK) break;
    json_t *m = mnt_ckpt_load_manifest(dir, &present, why, sizeof why);
    int valid = m != NULL && !sd[i].link;
    json_decref(m);
    if (valid && kept < keep) {
      kept++;
      continue;
    }
    if (kept == 0) continue; /* never the last valid one */
    if (mnt_ckpt_remove_step_dir(dir) == MNT_OK) MNT_DBG("removed %s (--keep %d)", dir, keep);
  }
  free(sd);
}
