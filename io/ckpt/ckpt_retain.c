/* ckpt_retain.c — the step directories of a checkpoint root: naming and listing them, reading a
 * manifest, removing one (its manifest first, nothing followed), keeping the newest K after a
 * commit, and `mntrain inspect` of a checkpoint or a root; see ckpt.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "io/ckpt/ckpt.h"
#include "io/ckpt/ckpt_internal.h"
#include "log.h"
#include "path.h"

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

/* ---- inspect ------------------------------------------------------------------------------ */

int mnt_ckpt_is_path(const char *path) {
  char p[MNT_PATH_MAX];
  struct stat sb;
  if (stat(path, &sb) != 0) return 0;
  if (S_ISREG(sb.st_mode)) {
    const char *b = strrchr(path, '/');
    return !strcmp(b ? b + 1 : path, MNT_CKPT_FILE);
  }
  if (mnt_path_join(p, path, MNT_CKPT_MANIFEST) != MNT_OK) return 0;
  if (access(p, F_OK) == 0) return 1;
  mnt_ckpt_stepdir *sd;
  int n;
  if (mnt_path_join(p, path, "index.json") != MNT_OK) return 0; /* a dataset is not a checkpoint root */
  if (access(p, F_OK) == 0 || mnt_ckpt_list_steps(path, &sd, &n) != MNT_OK) return 0;
  free(sd);
  return n > 0;
}

static void print_one(const mnt_ckpt *c, double read_s) {
  json_t *m = c->manifest, *s = json_object_get(m, "state"), *cfg = json_object_get(m, "config");
  json_t *ds = json_object_get(m, "datasets"), *shares = json_object_get(m, "shares");
  int world = (int)json_integer_value(json_object_get(m, "world_size"));
  printf("checkpoint %s: step %lld of %lld (epoch %lld, cursor %lld), written by %d rank%s, mntrain %s\n", c->dir,
         (long long)c->step, (long long)json_integer_value(json_object_get(cfg, "steps")),
         (long long)json_integer_value(json_object_get(s, "epoch")),
         (long long)json_integer_value(json_object_get(s, "cursor")), world, world == 1 ? "" : "s",
         json_string_value(json_object_get(m, "version")) ? json_string_value(json_object_get(m, "version")) : "?");
  printf("  model: %s, %d px, global batch %lld (%lld per rank), bn groups of %lld, lr %.6g, seed %lld, %lld skipped "
         "steps\n",
         json_string_value(json_object_get(cfg, "arch")) ? json_string_value(json_object_get(cfg, "arch")) : "?",
         (int)json_integer_value(json_object_get(cfg, "size")),
         (long long)json_integer_value(json_object_get(s, "global_batch")),
         (long long)json_integer_value(json_object_get(cfg, "batch_per_rank")),
         (long long)json_integer_value(json_object_get(s, "bn_group")), json_number_value(json_object_get(s, "lr")),
         (long long)json_integer_value(json_object_get(cfg, "seed")),
         (long long)json_integer_value(json_object_get(s, "skipped_steps")));
  int nm = 0, nmo = 0, nsm = 0, nb = 0;
  for (size_t i = 0; i < json_array_size(ds); i++) {
    const char *nmv = json_string_value(json_object_get(json_array_get(ds, i), "name"));
    if (!nmv) continue;
    nm += !strncmp(nmv, "/model/", 7);
    nmo += !strncmp(nmv, "/optim/momentum/", 16);
    nsm += !strncmp(nmv, "/optim/", 7) && strncmp(nmv, "/optim/momentum/", 16); /* rmsprop-warmup's second moment */
    nb += !strncmp(nmv, "/bn/", 4);
  }
  char other[48] = "";
  if (nsm) snprintf(other, sizeof other, ", %d other optimizer state", nsm);
  printf("  %s: %.1f MB; %zu datasets (%d weights, %d momentum%s, %d BN statistics, the training state): %.1f MB of "
         "data; stripe %lld KiB\n",
         MNT_CKPT_FILE, (double)json_integer_value(json_object_get(m, "file_bytes")) / 1e6, json_array_size(ds), nm, nmo,
         other, nb, (double)c->image_bytes / 1e6, (long long)json_integer_value(json_object_get(m, "stripe")) / 1024);
  printf("  shares:");
  for (size_t r = 0; r < json_array_size(shares); r++)
    printf(" rank %zu %.1f MB%s", r, (double)json_integer_value(json_object_get(json_array_get(shares, r), "bytes")) / 1e6,
           r + 1 < json_array_size(shares) ? "," : "\n");
  if (c->verified)
    printf("  checksums: ok (xxh3-64 of every share; read in %.2f s, %.0f MB/s)\n", read_s,
           read_s > 0 ? (double)c->image_bytes / 1e6 / read_s : 0.0);
  char *txt = json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS);
  printf("  config: %s\n", txt ? txt : "?");
  free(txt);
}

/* one checkpoint, named: it must pass its checks */
static int inspect_one(const char *path) {
  mnt_ckpt c;
  int found;
  double t0 = mnt_now();
  int st = mnt_ckpt_open(path, 1, &c, &found);
  if (st == MNT_OK) print_one(&c, mnt_now() - t0);
  mnt_ckpt_close(&c);
  return st;
}

/* a root: every step directory's verdict, newest first, and the newest good one in full */
static int inspect_root(const char *path) {
  mnt_ckpt_stepdir *sd;
  int n, bad = 0, shown = 0;
  if (mnt_ckpt_list_steps(path, &sd, &n) != MNT_OK) return MNT_SYSERR("%s: cannot list", path);
  printf("checkpoints in %s (newest first):\n", path);
  for (int i = 0; i < n; i++) {
    char dir[MNT_PATH_MAX], why[1400];
    int present;
    json_t *m = NULL;
    if (mnt_path_join(dir, path, sd[i].name) != MNT_OK) { /* logged: a damaged one, as far as we can tell */
      present = 1;
      snprintf(why, sizeof why, "path too long");
    } else {
      m = mnt_ckpt_load_manifest(dir, &present, why, sizeof why);
    }
    if (sd[i].link) {
      printf("  %s: not a checkpoint: a symbolic link (not followed)\n", sd[i].name);
      json_decref(m);
      continue;
    }
    if (!m && !present) {
      printf("  %s: not a checkpoint: %s\n", sd[i].name, why);
      continue;
    }
    double t0 = mnt_now();
    mnt_ckpt c;
    memset(&c, 0, sizeof c);
    int r = m ? mnt_ckpt_read_one(dir, m, 1, &c, why, sizeof why) : MNT_EDATA;
    json_decref(m);
    if (r == MNT_OK) {
      printf("  %s: ok\n", sd[i].name);
      if (!shown++) print_one(&c, mnt_now() - t0);
    } else {
      printf("  %s: DAMAGED: %s\n", sd[i].name, why);
      bad++;
    }
    mnt_ckpt_close(&c);
  }
  free(sd);
  if (bad) MNT_ERR("%s: %d damaged checkpoint%s (resume skips them)", path, bad, bad == 1 ? "" : "s");
  return bad ? MNT_EDATA : MNT_OK;
}

int mnt_ckpt_inspect(const char *path) {
  char man[MNT_PATH_MAX];
  struct stat sb;
  int there = stat(path, &sb) == 0;
  if (there && S_ISREG(sb.st_mode)) return inspect_one(path); /* a state.h5 */
  MNT_CHECK(mnt_path_join(man, path, MNT_CKPT_MANIFEST));
  if (there && access(man, F_OK) == 0) return inspect_one(path);
  return inspect_root(path);
}
