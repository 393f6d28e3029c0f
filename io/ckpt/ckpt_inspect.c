/* ckpt_inspect.c — `mntrain inspect` of a checkpoint (a step directory or its state.h5) or a root
 * (every step directory's verdict, newest first, the newest good one in full), and telling a
 * checkpoint path from a dataset's (mnt_ckpt_is_path); see ckpt.h. It reads through ckpt_read.c and
 * lists through ckpt_retain.c. */
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
